"""ICL-regression torch model (issues 7, 13): 30 seeds trained together through the shared trainer against 30
sequential single-seed runs of the same model and steps, on CPU.

Setting of the issue: H = 2 softmax heads, d = 5, L = 40, sigma^2 = 0.1, batch 256, Adam(1e-3) (spec §9). Both sides
draw the same per-seed data: the model's ``draw`` uses the counter-keyed block streams of
:mod:`empirical.seeding` (all seeds in one compiled call, ~1.6 ns a float64 normal, bit-identical per seed across
batch sizes), so sampling, which was 68-73 % of the time with torch's per-seed ``randn``, is now ~10 %. What is
left is the model's own work, which batching cannot amortise: per seed and step 256 prompts x 40 tokens x (d + 1)
= 61 440 float64 token entries, read by the logits, the pooling and their two backward products (memory-bound;
~0.8 ms a seed-step at S = 8..30 on one core), against a fixed per-step cost (Python, autograd, Adam) of ~0.9 ms
that a single-seed run pays per seed. The ratio is therefore bounded by about (0.9 + 0.8) / 0.8 ~ 2 in float64,
whatever the sampler: the issue's >= 10x is not reachable for this model on CPU (measured 1.7-1.9x, float32
2.4-2.8x, on a loaded 2-core machine).
Rows in float64 (theory comparisons) and float32 (speed study). torch runs with one intra-op thread (restored
afterwards): tiny tensors gain nothing from more threads, and on a shared machine spinning threads slow everything.
"""

from __future__ import annotations

from benchmarks._common import Result, best_time
from closedform.icl_regression import ICLRegressionTask
from empirical.device import torch_threads
from empirical.models.icl_regression import ICLAttention, config
from empirical.train import train

N_SEEDS, H = 30, 2
TASK = ICLRegressionTask(d=5, L=40, sigma2=0.1)


def _config(seeds, n_steps, dtype):
    # log only at the start and the end (the benchmark measures training), evaluation batch 256 as in spec §9
    return config("paper", seeds=seeds, n_steps=n_steps, log_every=n_steps, dtype=dtype)


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
