"""Benchmark of the random-walk study (docs/models/token_selection.md, Study C): the numba reduced GD map.

Rows (throughput in walk-steps per second: walks in the training sample times GD steps):

* ``reduced_step_kernel``: the numba step kernel of the exact reduced update (docs/models/token_selection.md §C.5)
  against a plain vectorised numpy implementation of the same update, same walks, same steps.
* ``reduced_gd_vs_full_gd``: :func:`closedform.random_walk.map` end to end (engine, derived loss/SEs,
  provenance) against full-matrix GD on (V, W) in numpy (:func:`closedform.random_walk.full_gd`), the computation
  the reduction replaces (paper sizes K=6, N=97, M=1000).
"""

from __future__ import annotations

import numpy as np
from scipy.special import softmax

from benchmarks._common import Result, best_time
from closedform import _random_walk_kernels as _kern
from closedform import random_walk as rw
from dynamics import SaveAt


def _numpy_reduced_gd(spec: rw.RandomWalkTask, sample: rw.WalkSample, n_steps: int) -> np.ndarray:
    """Plain numpy twin of the reduced GD map (docs/models/token_selection.md §C.5), vectorised over walks; returns the
    final state."""
    K, N, rho = spec.K, spec.N, spec.rho
    ctx, y, w = sample.context, sample.label, sample.weights
    rows = np.broadcast_to(np.arange(sample.n)[:, None], ctx.shape)
    V, a, c = np.zeros((K, K)), np.zeros(K), np.zeros(N)
    for _ in range(n_steps):
        logits = np.empty((sample.n, N))
        logits[:, :-1] = rho * a[ctx] + rho * rho * c[:-1]
        logits[:, -1] = rho * rho * c[-1]
        S = softmax(logits, axis=1)
        u = np.zeros((sample.n, K))
        np.add.at(u, (rows, ctx), S[:, :-1])
        gbar = np.einsum("nk,nk->n", V[y], u)
        wk = w / (gbar + spec.eps)
        g = np.zeros((sample.n, N))
        g[:, :-1] = V[y[:, None], ctx]
        t = wk[:, None] * S * (g - gbar[:, None])
        GV = np.zeros((K, K))
        np.add.at(GV, y, wk[:, None] * u)
        Ga = np.bincount(ctx.ravel(), weights=t[:, :-1].ravel(), minlength=K)
        Gc = t.sum(axis=0)
        V, a, c = V + spec.eta * GV, a + spec.eta * Ga, c + spec.eta * Gc
    return rw.pack_state(spec, V, a, c)


def run(quick: bool) -> list[Result]:
    """Time the numba reduced map against the numpy twin and against full-matrix numpy GD (same walks, same steps)."""
    results = []
    spec = rw.RandomWalkTask(K=6, N=97, M=1000, p=0.5)
    n_walks = 1000 if quick else 4000
    n_steps = 20 if quick else 50
    repeat = 2 if quick else 3
    sample = rw.sample_walks(spec, n_walks, 0)
    params = rw.map_params(spec, sample)
    data = rw._kernel_args(spec, sample)

    def kernel_run():
        x, out = rw.initial_state(spec), np.empty(spec.n_state)
        for k in range(n_steps):
            _kern.reduced_step(k, x, params, data, out)
            x, out = out, x
        return x

    def numpy_run():
        return _numpy_reduced_gd(spec, sample, n_steps)

    gap = np.abs(kernel_run() - numpy_run()).max()  # same computation: must agree to round-off
    if gap > 1e-10:
        raise AssertionError(f"numba and numpy reduced maps disagree by {gap:.3g}")
    work = n_walks * n_steps
    t_kernel = best_time(kernel_run, repeat=repeat)
    t_numpy = best_time(numpy_run, repeat=repeat)
    results.append(
        Result(
            name="random_walk.reduced_step_kernel",
            unit="walk-steps",
            value=work / t_kernel,
            baseline=work / t_numpy,
            baseline_name="numpy vectorised reduced map",
            note=f"K=6, N=97, {n_walks} walks, {n_steps} steps; max state gap {gap:.1e}",
        )
    )

    n_full = 3 if quick else 10
    small = rw.sample_walks(spec, 1000, 1)

    def reduced_small():
        return rw.map(spec, n_full, walks=small, saveat=SaveAt(final=True))

    def full_small():
        return rw.full_gd(spec, small, n_full, save_every=n_full)

    t_red = best_time(reduced_small, repeat=repeat)
    t_full = best_time(full_small, repeat=repeat, min_time=0.0)
    results.append(
        Result(
            name="random_walk.reduced_gd_vs_full_gd",
            unit="walk-steps",
            value=1000 * n_full / t_red,
            baseline=1000 * n_full / t_full,
            baseline_name="numpy full-matrix GD (M=1000)",
            note=f"K=6, N=97, M=1000, 1000 walks, {n_full} steps; end to end (engine, derived, provenance included)",
        )
    )
    return results
