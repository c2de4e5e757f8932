"""Trainer throughput (issue 7): 30 seeds trained together against 30 sequential single-seed runs, and the
trainer's per-step overhead against a hand-written torch loop of the same computation, both on CPU in float64.

The toy model is online linear regression (d = 20, batch 8, SGD), small enough that per-step Python overhead, the
quantity the batched seed axis amortises, dominates; it is measured with per-seed ``torch.Generator`` sampling
(``sample``) and with the counter-keyed block streams (``draw``, one compiled call for all seeds). Paper models measure
their own ratio in their benchmarks.
"""

from __future__ import annotations

import math

import torch

from benchmarks._common import Result, best_time
from dynamics.saveat import SaveAt
from empirical.train import TrainConfig, per_seed, train

D, BATCH, N_SEEDS = 20, 8, 30


class _Regression:
    name = "bench_regression"

    def init_params(self, generators, *, device, dtype):
        return per_seed(
            generators, lambda g: {"w": torch.randn(D, generator=g, device=device, dtype=dtype) / math.sqrt(D)}
        )

    def sample(self, generators, n, *, device, dtype):
        def draw(g):
            x = torch.randn(n, D, generator=g, device=device, dtype=dtype)
            return {"x": x, "y": x[:, 0] + 0.5 * torch.randn(n, generator=g, device=device, dtype=dtype)}

        return per_seed(generators, draw)

    def loss(self, params, batch, hyper):
        return 0.5 * (((batch["x"] * params["w"][:, None, :]).sum(-1) - batch["y"]) ** 2).mean(-1)

    def probes(self, params):
        w = params["w"]
        return {"q": (w**2).sum(-1) - 2 * w[:, 0] + 1.0}


class _CounterRegression(_Regression):
    """The same model drawing its data from the trainer's counter-keyed block streams (``draw``)."""

    name = "bench_regression_counter"

    def draw(self, rng, n, *, device, dtype):
        x = rng.normal((n, D), dtype=dtype)
        return {"x": x, "y": x[..., 0] + 0.5 * rng.normal((n,), dtype=dtype)}


def _config(seeds, n_steps):
    return TrainConfig(seeds=seeds, n_steps=n_steps, batch_size=BATCH, lr=0.05, saveat=SaveAt(n=11), eval_size=256)


def _hand_loop(n_steps):
    """The same single-seed online SGD written directly in torch (no logging, checks or schedules)."""
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(D, generator=g, dtype=torch.float64) / math.sqrt(D)).requires_grad_(True)
    opt = torch.optim.SGD([w], lr=0.05)
    for _ in range(n_steps):
        x = torch.randn(BATCH, D, generator=g, dtype=torch.float64)
        y = x[:, 0] + 0.5 * torch.randn(BATCH, generator=g, dtype=torch.float64)
        opt.zero_grad(set_to_none=True)
        loss = 0.5 * (((x * w).sum(-1) - y) ** 2).mean()
        loss.backward()
        opt.step()


def run(quick: bool) -> list[Result]:
    n_steps = 100 if quick else 500
    seed_steps = N_SEEDS * n_steps
    out = []
    for label, model in (("torch.Generator streams", _Regression()), ("counter block streams", _CounterRegression())):
        t_batched = best_time(lambda: train(model, _config(tuple(range(N_SEEDS)), n_steps), device="cpu"), repeat=2)
        t_sequential = best_time(
            lambda: [train(model, _config((s,), n_steps), device="cpu") for s in range(N_SEEDS)], repeat=1, min_time=0.0
        )
        out.append(
            Result(
                f"{N_SEEDS} seeds in one run vs {N_SEEDS} single-seed runs ({label})",
                "seed-steps",
                seed_steps / t_batched,
                seed_steps / t_sequential,
                f"{N_SEEDS} sequential train() calls",
                target_ratio=10,
                note=f"toy online regression d={D}, batch {BATCH}, {n_steps} steps, float64 CPU, data from {label}",
            )
        )
    model = _Regression()
    t_single = best_time(lambda: train(model, _config((0,), n_steps), device="cpu"), repeat=3)
    t_hand = best_time(lambda: _hand_loop(n_steps), repeat=3)
    return out + [
        Result(
            "trainer, 1 seed vs hand-written torch loop",
            "steps",
            n_steps / t_single,
            n_steps / t_hand,
            "plain torch SGD loop",
            note="ratio < 1 is the trainer's overhead (logging, checks, refills)",
        ),
    ]
