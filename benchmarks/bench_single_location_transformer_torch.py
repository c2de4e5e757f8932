"""Throughput of the single_location Transformer and multi-head erf models (docs/models/single_location.md §8.7-§8.9) in
the shared trainer: N seeds trained together (one run, leading seed axis) against N sequential single-seed runs of the
same model and steps, float64 on CPU with one intra-op thread (the tensors are tiny; see
figures/_single_location_transformer.py).
"""

from __future__ import annotations

from benchmarks._common import Result, best_time
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models.single_location_transformer import (
    MultiHeadErf,
    MultiLocationTask,
    TransformerLayer,
    random_oracle_directions,
)
from empirical.train import Schedule, TrainConfig, train

N_SEEDS = 10


def _cases():
    t1 = MultiLocationTask(d=20, L=10, K=1, noise=0.1)
    k1, v1 = random_oracle_directions(t1, 0)
    t2 = MultiLocationTask(d=80, L=10, K=2, noise=0.1)
    k2, v2 = random_oracle_directions(t2, 0)
    return [
        ("Transformer H=1 (Fig. 8 quick: d=20, L=10, batch 64)", TransformerLayer(t1, k_star=k1, v_star=v1), 64, {}),
        (
            "2-head erf, K=2 (Fig. 9: d=80, L=10, batch 5)",
            MultiHeadErf(t2, k_star=k2, v_star=v2, n_heads=2),
            5,
            {"lam": Schedule(value=2.0, kind="inverse_time", rate=1e-4)},
        ),
    ]


def run(quick: bool) -> list[Result]:
    n_steps = 50 if quick else 300
    out = []
    with torch_threads(1):
        for label, model, batch, schedules in _cases():

            def config(seeds, batch=batch, schedules=schedules):
                return TrainConfig(
                    seeds=seeds,
                    n_steps=n_steps,
                    batch_size=batch,
                    lr=1e-3,
                    schedules=schedules,
                    eval_size=100,
                    saveat=SaveAt(final=True),
                )

            t_batched = best_time(
                lambda m=model: train(m, config(tuple(range(N_SEEDS))), device="cpu"), repeat=2, min_time=0.0
            )
            t_seq = best_time(
                lambda m=model: [train(m, config((s,)), device="cpu") for s in range(N_SEEDS)], repeat=1, min_time=0.0
            )
            seed_steps = N_SEEDS * n_steps
            out.append(
                Result(
                    f"{label}: {N_SEEDS} seeds together vs sequential",
                    "seed-steps",
                    seed_steps / t_batched,
                    seed_steps / t_seq,
                    f"{N_SEEDS} single-seed train() calls",
                    note=f"{n_steps} steps, float64 CPU, 1 thread; steps/s of the batched run = "
                    f"{n_steps / t_batched:.0f}",
                )
            )
    return out
