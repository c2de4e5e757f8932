"""Torch Scan and Snap benchmark (issue 8): the Syn-Small protocol of docs/models/scan_snap.md §5.2 (Y/Z model, zero
init, SGD momentum 0.9, batch 128, T = 128, eta_Y = eta_Z = 1), N seeds trained together through the shared trainer
against N sequential single-seed runs of the same model and steps, in float64 on CPU with one intra-op thread.

The model is computed from token counts (empirical.models.scan_snap.yz_logits), so a step costs O(batch x V) after
sampling. The sampler draws the counts directly (Multinomial(T - 1, P(.|n)) over supp(n), exact in law); a second row
times it against the token sampler it replaced (torch.multinomial of 127 tokens per sequence + a scatter into counts),
on the Syn-Medium 3/6 layout of Fig. 6 (M = 79, |supp(n)| = 20), 1280 sequences per draw (a data block).
"""

from __future__ import annotations

import numpy as np
import torch

from benchmarks._common import Result, best_time
from closedform import scan_snap as cf
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import scan_snap as ssm
from empirical.seeding import stream_generators
from empirical.train import train

N_SEEDS = 10


def run(quick: bool) -> list[Result]:
    n_steps = 20 if quick else 100
    classes = cf.SequenceClasses.syn_small()
    task = cf.ScanSnapTask(classes=classes, eta_Y=1.0, eta_Z=1.0)
    model = ssm.ScanSnapTorch(classes=classes, T=128, probe_z=False)

    def config(seeds):
        return ssm.config("sgd", model, task, seeds, n_steps=n_steps, saveat=SaveAt(steps=(0, n_steps)))

    with torch_threads(1):
        t_batched = best_time(lambda: train(model, config(tuple(range(N_SEEDS))), device="cpu"), repeat=2, min_time=0.0)
        t_sequential = best_time(
            lambda: [train(model, config((s,)), device="cpu") for s in range(N_SEEDS)], repeat=1, min_time=0.0
        )
    seed_steps = N_SEEDS * n_steps
    n_seq = 1280
    medium = cf.SequenceClasses.syn_medium(3)
    m_model = ssm.ScanSnapTorch(classes=medium, T=128, probe_z=False)
    gens = stream_generators(tuple(range(N_SEEDS)), torch.device("cpu"))["data"]
    P = torch.tensor(np.asarray(medium.P))
    pi = torch.tensor(np.asarray(medium.pi))

    def token_sampler():  # the replaced baseline: draw the tokens, then count them
        for g in gens:
            cls = torch.multinomial(pi, n_seq, replacement=True, generator=g)
            ctx = torch.multinomial(P[cls], 127, replacement=True, generator=g)
            counts = torch.zeros(n_seq, m_model.V, dtype=torch.float64)
            counts.scatter_add_(1, ctx, torch.ones(ctx.shape, dtype=torch.float64))

    with torch_threads(1):
        t_counts = best_time(lambda: m_model.sample(gens, n_seq, device="cpu", dtype=torch.float64), repeat=3)
        t_tokens = best_time(token_sampler, repeat=3)
    n_draw = N_SEEDS * n_seq
    return [
        Result(
            "scan_snap sampler: token counts drawn directly vs tokens drawn and counted",
            "sequences",
            n_draw / t_counts,
            n_draw / t_tokens,
            "torch.multinomial tokens + scatter_add",
            note=f"Syn-Medium 3/6 (M = 79), T - 1 = 127, {N_SEEDS} seeds x {n_seq} sequences, float64 CPU, 1 thread",
        ),
        Result(
            f"scan_snap Syn-Small SGD: {N_SEEDS} seeds in one run vs {N_SEEDS} single-seed runs",
            "seed-steps",
            seed_steps / t_batched,
            seed_steps / t_sequential,
            f"{N_SEEDS} sequential train() calls",
            note=f"Y/Z model, M=34, batch 128, T=128, momentum 0.9, {n_steps} steps, float64 CPU, 1 thread; "
            f"batched: {n_steps / t_batched:.1f} steps/s ({N_SEEDS} seeds), single seed: "
            f"{seed_steps / t_sequential:.1f} steps/s",
        ),
    ]
