"""ICL-regression torch model (issue 7): 30 seeds trained together through the shared trainer against 30 sequential
single-seed runs of the same model and steps, on CPU.

Setting of the issue: H = 2 softmax heads, d = 5, L = 40, sigma^2 = 0.1, batch 256, Adam(1e-3) (spec §9). Both sides
draw the same per-seed data (the seed axis never mixes seeds), so the ratio measures what batching the seed axis
amortises: per-step Python/autograd/optimiser overhead and small-matmul inefficiency. Sampling the prompts
(L (d + 1) + 2 d + 1 = 251 normals per prompt per seed) costs the same on both sides and bounds the ratio. Rows
in float64 (theory comparisons) and float32 (speed study; torch's float32 normal sampler is ~5x faster on CPU).
torch runs with one intra-op thread (restored afterwards): tiny tensors gain nothing from more threads, and on a
shared machine spinning threads slow everything down.
"""

from __future__ import annotations

from benchmarks._common import Result, best_time
from closedform.icl_regression import ICLRegression
from empirical.device import torch_threads
from empirical.models.icl_regression import ICLAttention, paper_config
from empirical.train import train

N_SEEDS, H = 30, 2
TASK = ICLRegression(d=5, L=40, sigma2=0.1)


def _config(seeds, n_steps, dtype):
    # log only at the start and the end (the benchmark measures training), evaluation batch 256 as in spec §9
    return paper_config(seeds=seeds, n_steps=n_steps, log_every=n_steps, dtype=dtype)


def run(quick: bool) -> list[Result]:
    n_steps = 10 if quick else 100
    model = ICLAttention(TASK, H)
    out = []
    with torch_threads(1):
        for dtype in ("float64", "float32"):
            batched = _config(tuple(range(N_SEEDS)), n_steps, dtype)
            singles = [_config((s,), n_steps, dtype) for s in range(N_SEEDS)]
            t_batched = best_time(lambda c=batched: train(model, c, device="cpu"), repeat=1, min_time=0.0)
            t_seq = best_time(lambda cs=singles: [train(model, c, device="cpu") for c in cs], repeat=1, min_time=0.0)
            seed_steps = N_SEEDS * n_steps
            out.append(Result(
                f"ICL H={H}: {N_SEEDS} seeds in one run vs {N_SEEDS} runs ({dtype})", "seed-steps",
                seed_steps / t_batched, seed_steps / t_seq, f"{N_SEEDS} sequential single-seed train() calls",
                target_ratio=10,
                note=f"d=5, L=40, batch 256, Adam, {n_steps} steps, CPU, 1 thread; batched run "
                     f"{n_steps / t_batched:.3g} steps/s (all {N_SEEDS} seeds), single seed "
                     f"{N_SEEDS * n_steps / t_seq:.3g} steps/s"))
    return out
