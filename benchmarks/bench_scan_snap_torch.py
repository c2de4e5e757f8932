"""Torch Scan and Snap benchmark (issue 8): the Syn-Small protocol of spec scan_snap.md Sec. 5.2 (Y/Z model, zero init,
SGD momentum 0.9, batch 128, T = 128, eta_Y = eta_Z = 1), N seeds trained together through the shared trainer against
N sequential single-seed runs of the same model and steps, in float64 on CPU with one intra-op thread.

The model is computed from token counts (empirical.models.scan_snap.yz_logits), so a step costs O(batch x V) after
sampling; per seed-step the batched run still pays the sampling of 128 x 127 tokens, which bounds the ratio.
"""

from __future__ import annotations

from benchmarks._common import Result, best_time
from closedform import scan_snap as cf
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import scan_snap as ssm
from empirical.train import train

N_SEEDS = 10


def run(quick: bool) -> list[Result]:
    n_steps = 20 if quick else 100
    classes = cf.SequenceClasses.syn_small()
    task = cf.ScanSnap(classes=classes, eta_Y=1.0, eta_Z=1.0)
    model = ssm.ScanSnapTorch(classes=classes, T=128, probe_z=False)

    def config(seeds):
        return ssm.sgd_config(model, task, seeds, n_steps=n_steps, saveat=SaveAt(steps=(0, n_steps)))

    with torch_threads(1):
        t_batched = best_time(lambda: train(model, config(tuple(range(N_SEEDS))), device="cpu"), repeat=2,
                              min_time=0.0)
        t_sequential = best_time(lambda: [train(model, config((s,)), device="cpu") for s in range(N_SEEDS)],
                                 repeat=1, min_time=0.0)
    seed_steps = N_SEEDS * n_steps
    return [
        Result(f"scan_snap Syn-Small SGD: {N_SEEDS} seeds in one run vs {N_SEEDS} single-seed runs", "seed-steps",
               seed_steps / t_batched, seed_steps / t_sequential, f"{N_SEEDS} sequential train() calls",
               note=f"Y/Z model, M=34, batch 128, T=128, momentum 0.9, {n_steps} steps, float64 CPU, 1 thread; "
                    f"batched: {n_steps / t_batched:.1f} steps/s ({N_SEEDS} seeds), single seed: "
                    f"{seed_steps / t_sequential:.1f} steps/s"),
    ]
