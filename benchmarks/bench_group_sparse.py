"""Benchmark of the group-sparse study (docs/models/token_selection.md, Study B): the numba reduced GD map.

Rows (throughput in draw-steps per second: draws in the sample times GD steps):

* ``group_sparse.reduced_map``: :func:`closedform.group_sparse.map` (numba kernel through ``dynamics.iterate``)
  against a plain vectorised numpy implementation of the same 8-scalar update (docs/models/token_selection.md §B.3),
  same sample, same steps.
* ``group_sparse.reduced_vs_full``: the same numba reduced map against projected full-matrix GD on (v, W) in numpy
  (:func:`closedform.group_sparse.full_gd` with ``project_steps=True``), the computation the reduction replaces
  exactly (docs/models/token_selection.md §B.3).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, softmax

from benchmarks._common import Result, best_time
from closedform import group_sparse as gs
from dynamics import SaveAt


def _numpy_reduced_gd(spec: gs.GroupSparseTask, rs: gs.ReducedSample, n_steps: int) -> np.ndarray:
    """Plain numpy twin of the reduced GD map (docs/models/token_selection.md §B.3), vectorised over draws; returns the
    final state."""
    D, js = spec.D, spec.jstar_index
    a, gram = rs.a, rs.gram
    y = np.where(a[:, js] >= 0.0, 1.0, -1.0)
    aa = a[:, :, None] * a[:, None, :]
    orbit = np.full((D, D), 4)
    orbit[np.arange(D), np.arange(D)] = 3
    orbit[:, js] = 2
    orbit[js, :] = 1
    orbit[js, js] = 0
    onehot = np.stack([(orbit == k).astype(np.float64) for k in range(5)])  # (5, D, D)
    scale = spec.eta / np.concatenate([[1.0, 1.0, spec.d - 1.0], spec.orbit_sizes])
    x = np.zeros(8)
    for _ in range(n_steps):
        M = x[3:][orbit]
        S = softmax(x[1] * aa + x[2] * gram + M[None], axis=1)
        r = S.sum(axis=2)
        f = x[0] * np.einsum("ni,ni->n", r, a)
        coef = -expit(-y * f) * y
        u = x[0] * a
        ubar = np.einsum("ni,nij->nj", u, S)
        G = coef[:, None, None] * S * (u[:, :, None] - ubar[:, None, :])
        grad = np.empty(8)
        grad[0] = np.mean(coef * np.einsum("ni,ni->n", r, a))
        grad[1] = np.einsum("nij,nij->", G, aa) / a.shape[0]
        grad[2] = np.einsum("nij,nij->", G, gram) / a.shape[0]
        grad[3:] = np.einsum("kij,nij->k", onehot, G) / a.shape[0]
        x = x - scale * grad
    return x


def run(quick: bool) -> list[Result]:
    """Time the numba reduced map against the numpy twin and against projected full-matrix numpy GD."""
    results = []
    spec = gs.GroupSparseTask(d=4, D=6, eta=0.5, sigma_x=1.0, jstar=2)
    n = 2000 if quick else 8000
    n_steps = 20 if quick else 100
    rs = gs.population_sample(spec, n, 0)

    def numba_run():
        return gs.map(spec, n_steps, rs=rs, saveat=SaveAt(final=True), with_se=False).states()[0, -1]

    def numpy_run():
        return _numpy_reduced_gd(spec, rs, n_steps)

    gap = np.abs(numba_run() - numpy_run()).max()  # same computation: must agree to round-off
    if gap > 1e-10:
        raise AssertionError(f"numba and numpy reduced maps disagree by {gap:.3g}")
    repeat = 2 if quick else 3
    t_numba = best_time(numba_run, repeat=repeat)
    t_numpy = best_time(numpy_run, repeat=repeat)
    work = n * n_steps
    results.append(
        Result(
            name="group_sparse.reduced_map",
            unit="draw-steps",
            value=work / t_numba,
            baseline=work / t_numpy,
            baseline_name="numpy vectorised reduced map",
            note=f"d=4, D=6, {n} draws, {n_steps} steps; max state gap {gap:.1e}",
        )
    )

    n_full = 5 if quick else 20
    s = gs.sample(spec, n, 1)
    rs_full = gs.reduce_sample(s)

    def reduced_small():
        return gs.map(spec, n_full, rs=rs_full, saveat=SaveAt(final=True), with_se=False).states()[0, -1]

    def full_small():
        run_ = gs.full_gd(spec, s, n_full, project_steps=True, saveat=SaveAt(final=True))
        return run_.trajectory.states()[0, -1]

    gap_full = np.abs(reduced_small() - full_small()).max()  # exact equivalence of docs/models/token_selection.md §B.3
    if gap_full > 1e-10:
        raise AssertionError(f"reduced map and projected full GD disagree by {gap_full:.3g}")
    t_red = best_time(reduced_small, repeat=repeat)
    t_full = best_time(full_small, repeat=repeat)
    work = n * n_full
    results.append(
        Result(
            name="group_sparse.reduced_vs_full",
            unit="draw-steps",
            value=work / t_red,
            baseline=work / t_full,
            baseline_name="projected full-matrix GD (numpy)",
            note=f"d=4, D=6, {n} draws, {n_full} steps; max state gap {gap_full:.1e}",
        )
    )
    return results
