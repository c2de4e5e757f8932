"""ICL-regression torch model (issues 7, 13): 30 seeds trained together through the shared trainer against 30
sequential single-seed runs of the same model and steps, on CPU.

Setting of the issue: H = 2 softmax heads, d = 5, L = 40, sigma^2 = 0.1, batch 256, Adam(1e-3)
(docs/models/icl_regression.md §9). Both sides draw the same per-seed data from the counter-keyed block streams of
:mod:`empirical.seeding` (all seeds in one compiled call, bit-identical per seed across batch sizes) and compute the
loss and its gradient with the compiled one-pass kernel :func:`empirical.models.icl_regression.softmax_mse` (only the
query's attention row; hand-derived gradient, tested against autograd to 1e-12).

What is left per seed and step is work that batching cannot share. Measured (issue 13, 2-core CI machine, process
time, one thread): a single-seed step costs O ~ 0.34 ms of fixed work (Python, autograd of the circuits, Adam) and
each seed adds c ~ 0.25 ms: 256 prompts x 251 float64 normals (~1.35 ns each, ~87 us; the ziggurat is issue-bound
at ~35 instructions a normal), the labels (~18 us), the compiled kernel (~110 us: ~2 500 flops and 80 exponentials
a prompt; its vectorised exp is ~20 us of it, the prompt's feature-major copy ~10 us) and ~30 us of logging and
small torch ops. The ratio (O + c) / (O/30 + c) = (0.34 + 0.25) / (0.011 + 0.25) ~ 2.3 is what the rows show; 10x
would need c <= 20 O / 270 ~ 25 us a seed-step, less than a third of the normals alone, so the issue's >= 10x is
not reachable for this model on CPU without making the single-seed run slower or drawing less data than the
paper's batch of 256 prompts. A third row measures what the compiled loss buys in absolute terms: the
same 30-seed batched run with the torch-autograd loss (the code before issue 13's kernel) against the compiled one.
Rows in float64 (theory comparisons) and float32 storage (the kernel computes in float64). torch runs with one
intra-op thread (restored afterwards); times are process-CPU times.
"""

from __future__ import annotations

from benchmarks._common import Result, cpu_time
from closedform.icl_regression import ICLRegressionTask
from empirical.device import torch_threads
from empirical.models.icl_regression import ICLAttention, config, predict
from empirical.train import train

N_SEEDS, H = 30, 2
TASK = ICLRegressionTask(d=5, L=40, sigma2=0.1)


class _AutogradLoss(ICLAttention):
    """The same model with the loss of :func:`predict` differentiated by torch autograd (no compiled kernel)."""

    def loss(self, params, batch, hyper=None):
        err = batch["yq"] - predict(self.spec, params, batch)
        return (err * err).mean(dim=(1, 2))


def _config(seeds, n_steps, dtype):
    #  log only at the start and the end (the benchmark measures training), evaluation batch 256 as in
    # docs/models/icl_regression.md §9
    return config("paper", seeds=seeds, n_steps=n_steps, log_every=n_steps, dtype=dtype)


def run(quick: bool) -> list[Result]:
    n_steps = 10 if quick else 100
    model = ICLAttention(TASK, H)
    out = []
    seed_steps = N_SEEDS * n_steps
    with torch_threads(1):
        for dtype in ("float64", "float32"):
            batched = _config(tuple(range(N_SEEDS)), n_steps, dtype)
            singles = [_config((s,), n_steps, dtype) for s in range(N_SEEDS)]
            t_batched = cpu_time(lambda c=batched: train(model, c, device="cpu"), repeat=2)
            t_seq = cpu_time(lambda cs=singles: [train(model, c, device="cpu") for c in cs], warmup=False)
            out.append(
                Result(
                    f"ICL H={H}: {N_SEEDS} seeds in one run vs {N_SEEDS} runs ({dtype})",
                    "seed-steps",
                    seed_steps / t_batched,
                    seed_steps / t_seq,
                    f"{N_SEEDS} sequential single-seed train() calls",
                    target_ratio=10,
                    note=f"d=5, L=40, batch 256, Adam, {n_steps} steps, CPU, 1 thread, process time; batched run "
                    f"{n_steps / t_batched:.3g} steps/s (all {N_SEEDS} seeds), single seed "
                    f"{N_SEEDS * n_steps / t_seq:.3g} steps/s",
                )
            )
        batched = _config(tuple(range(N_SEEDS)), n_steps, "float64")
        t_fused = cpu_time(lambda: train(model, batched, device="cpu"), repeat=2)
        t_autograd = cpu_time(lambda: train(_AutogradLoss(TASK, H), batched, device="cpu"), repeat=2)
        out.append(
            Result(
                f"ICL H={H}: {N_SEEDS} seeds batched, compiled loss vs torch autograd (float64)",
                "seed-steps",
                seed_steps / t_fused,
                seed_steps / t_autograd,
                "the same run with the torch-autograd loss",
                note=f"absolute gain of the compiled softmax MSE kernel; {n_steps} steps, process time",
            )
        )
    return out
