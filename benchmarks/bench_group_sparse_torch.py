"""Benchmark of the torch model of Study B (empirical.models.group_sparse; docs/models/token_selection.md §B.2, §B.7):
N seeds trained together through the shared trainer against N sequential single-seed runs (issue 8).

Rows (throughput in seed-steps per second: seeds x full-batch GD steps, CPU, float64):

* ``group_sparse torch, merged W``: full-batch GD from zero on n = 200 raw samples per seed, (d, D) = (4, 6),
  eta = 0.5 (the paper's pre-training setting of docs/models/token_selection.md §B.7 at a smaller n), N seeds in one
  ``train`` call vs N calls.
* ``group_sparse torch, factorised W_K^T W_Q``: the same with the factorised model of
  docs/models/token_selection.md §B.7 (random init).

Both sides log the same probes on the same grid, so the ratio measures what batching the seed axis saves (per-step
Python and autograd overhead). Torch runs with one intra-op thread on both sides: the tensors are tiny and extra
threads only contend on a shared CPU.
"""

from __future__ import annotations

import numpy as np

from benchmarks._common import Result, best_time
from closedform import group_sparse as cf
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import group_sparse as gm
from empirical.train import train

N_SEEDS, N_SAMPLES = 8, 200


def _run(task, samples, seeds, n_steps, parametrisation):
    model = gm.GroupSparseAttention(task, data=samples, parametrisation=parametrisation)
    return train(model, gm.config("gd", model, n_steps, seeds=seeds, saveat=SaveAt(n=5)), device="cpu")


def run(quick: bool) -> list[Result]:
    n_steps = 30 if quick else 200
    task = cf.GroupSparseTask(d=4, D=6)
    v_star = np.ones(4) / 2.0
    seeds = tuple(range(N_SEEDS))
    samples = gm.training_samples(task, N_SAMPLES, seeds, v_star)
    with torch_threads(1):
        out = []
        for par in ("merged", "factorised"):
            t_batched = best_time(lambda par=par: _run(task, samples, seeds, n_steps, par), repeat=2, min_time=0.0)
            t_seq = best_time(
                lambda par=par: [_run(task, samples[k : k + 1], (k,), n_steps, par) for k in range(N_SEEDS)],
                repeat=1,
                min_time=0.0,
            )
            seed_steps = N_SEEDS * n_steps
            label = "merged W" if par == "merged" else "factorised W_K^T W_Q"
            out.append(
                Result(
                    f"group_sparse torch, {label}: {N_SEEDS} seeds in one run vs {N_SEEDS} runs",
                    "seed-steps",
                    seed_steps / t_batched,
                    seed_steps / t_seq,
                    f"{N_SEEDS} sequential single-seed train() calls",
                    note=f"full-batch GD, n = {N_SAMPLES}, (d, D) = (4, 6), {n_steps} steps, float64 CPU, "
                    f"1 torch thread; batched: {n_steps / t_batched:.1f} steps/s",
                )
            )
        return out
