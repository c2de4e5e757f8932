"""Benchmark of the torch side of Study C (docs/models/token_selection.md §C.3-§C.4, §C.8): batched vs sequential seeds.

Row (throughput in seed-steps per second: seeds times full-batch GD steps):

* ``random_walk.torch_batched_seeds``: ``n_seeds`` training samples trained together through the shared trainer
  (one leading seed axis, :mod:`empirical.train`) against the same seeds trained one after another (same model, same
  walks, same steps, same logging: the first and last step only). Merged W from zero (the paper's Figs. 4-5) at
  K = 6, N = 97, M = 1000 (paper sizes) with 1000 walks per seed (300 in quick mode).

Both sides run torch single-threaded (the tensors are small; on the shared 2-core machine thread hand-offs cost
10-30x, see ``empirical.device.torch_threads``) on the CPU. The batched run must reproduce the sequential ones to
rounding (checked before timing).
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks._common import Result
from closedform import random_walk as cf
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import random_walk as rwm
from empirical.train import train


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run(quick: bool) -> list[Result]:
    """Time N seeds batched through the trainer against N sequential single-seed runs (same model and steps)."""
    with torch_threads(1):
        task = cf.RandomWalkTask(K=6, N=97, M=1000, p=0.5)
        n_seeds = 4
        n_walks = 300 if quick else 1000
        n_steps = 10 if quick else 30
        seeds = list(range(n_seeds))
        train_w, test_w = rwm.walk_samples(task, n_walks, seeds, n_test=n_walks)
        saveat = SaveAt(steps=(0, n_steps))

        def batched():
            model = rwm.RandomWalkAttention(task, data=train_w, test=test_w)
            return train(model, rwm.config("gd", model, n_steps, seeds=tuple(seeds), saveat=saveat), device="cpu")

        def sequential():
            out = []
            for i in seeds:
                model = rwm.RandomWalkAttention(task, data=[train_w[i]], test=[test_w[i]])
                out.append(train(model, rwm.config("gd", model, n_steps, seeds=(i,), saveat=saveat), device="cpu"))
            return out

        rwm.RandomWalkAttention(task)  # imports, positional code
        train(
            rwm.RandomWalkAttention(task, data=[train_w[0]]),
            rwm.config(
                "gd", rwm.RandomWalkAttention(task, data=[train_w[0]]), 1, seeds=(0,), saveat=SaveAt(final=True)
            ),
            device="cpu",
        )  # warm-up: torch deterministic-mode import
        t_b, traj = _timed(batched)
        t_s, singles = _timed(sequential)
        gap = max(
            float(np.max(np.abs(traj[v].values[i] - singles[i][v].values[0])))
            for i in seeds
            for v in ("V_1_0", "a_0", "c_95", "loss")
        )
        if gap > 1e-10:
            raise AssertionError(f"batched and sequential seeds disagree by {gap:.3g}")
        work = n_seeds * n_steps
        return [
            Result(
                name="random_walk.torch_batched_seeds",
                unit="seed-steps",
                value=work / t_b,
                baseline=work / t_s,
                baseline_name=f"{n_seeds} sequential single-seed runs",
                note=(
                    f"K=6, N=97, M=1000, {n_walks} walks/seed, {n_steps} full-batch GD steps, CPU, 1 thread; "
                    f"max gap batched vs sequential {gap:.1e}"
                ),
            )
        ]
