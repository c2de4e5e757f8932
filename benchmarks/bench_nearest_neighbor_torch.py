"""Torch 1-NN attention (empirical.models.nearest_neighbor, docs/models/token_selection.md Study A): many seeds trained
together through the shared trainer against the same seeds trained one after another (issue 8), CPU, float64.

Two workloads of the reference task d = 4, N = 16, sigma = 5, eta = 5 (docs/models/token_selection.md §4):
* online SGD, batch 64 (per-step overhead dominates: what the batched seed axis amortises);
* full-batch GD on 500 fixed prompts per seed (recipe docs/models/token_selection.md §G.A; arithmetic dominates).

Both run with one torch intra-op thread (restored afterwards): the tensors are tiny, and on the shared 2-core machine
extra threads only contend (measured: ~6x fewer steps/s with the default two threads under load).
"""

from __future__ import annotations

import dataclasses

from benchmarks._common import Result, best_time
from closedform import nearest_neighbor as cf
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import nearest_neighbor as nnm
from empirical.train import train

N_SEEDS = 10
TASK = cf.NearestNeighborTask(d=4, N=16, sigma=5.0, eta=5.0)


def _compare(model, cfg, what: str, note: str) -> Result:
    t_batched = best_time(lambda: train(model, cfg, device="cpu"), repeat=1, min_time=0.0)
    if model.data is None:

        def sequential():
            for s in cfg.seeds:
                train(model, dataclasses.replace(cfg, seeds=(s,)), device="cpu")
    else:
        singles = [nnm.NearestNeighborAttention(TASK, data=[p]) for p in model.data]

        def sequential():
            for s, single in zip(cfg.seeds, singles):
                train(single, dataclasses.replace(cfg, seeds=(s,)), device="cpu")

    t_seq = best_time(sequential, repeat=1, min_time=0.0)
    seed_steps = len(cfg.seeds) * cfg.n_steps
    return Result(
        f"torch {what}, {N_SEEDS} seeds batched vs sequential",
        "seed-steps",
        seed_steps / t_batched,
        seed_steps / t_seq,
        f"{N_SEEDS} sequential single-seed train() calls",
        note=f"{note}; {cfg.n_steps} steps, float64 CPU; steps/s batched = {cfg.n_steps / t_batched:.1f}",
    )


def run(quick: bool) -> list[Result]:
    n_steps = 30 if quick else 200
    seeds = tuple(range(N_SEEDS))
    online = nnm.NearestNeighborAttention(TASK)
    sgd = nnm.config("sgd", online, n_steps, 64, seeds=seeds, eval_size=256, saveat=SaveAt(n=3))
    fixed = nnm.NearestNeighborAttention(TASK, data=nnm.prompt_samples(TASK, 500, seeds))
    gd = nnm.config("gd", fixed, n_steps, saveat=SaveAt(n=3))
    with torch_threads(1):
        return [
            _compare(online, sgd, "online SGD", "batch 64, d=4, N=16"),
            _compare(fixed, gd, "full-batch GD", "500 prompts per seed, d=4, N=16"),
        ]
