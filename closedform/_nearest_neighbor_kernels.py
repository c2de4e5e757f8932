"""Private numba kernels of the in-context 1-NN model (docs/models/token_selection.md, Study A).

Everything here works in the reduced coordinates (xi1, xi2) of docs/models/token_selection.md §A.5, where the attention
of the query is softmax over the scores ``xi1 * c_j`` (context token j) and ``xi1 - xi2`` (the query itself), with the
labels integrated out exactly (docs/models/token_selection.md §A.3, Eq. "L(W) = 1/2 E[(1 - q_{i*})^2 + sum_{j != i*}
q_j^2]"). The public wrappers live in ``closedform.nearest_neighbor``; they validate, draw the prompts and hand the
fixed prompt sample (common random numbers) to these kernels. No RNG in here, float64 only, sequential sums
(deterministic order).

The GD step (``gd_step``) is a ``dynamics.iterate`` map of the five-argument form, with the parameter row
``p = [eta, d]`` (``closedform.nearest_neighbor.pack_params``) and the prompt sample as data
``args = (istar (B,) int64, 0-based; c (B, N) float64 with c[b, j] = <x_{b,j}, x_query_b>)``
(``closedform.nearest_neighbor._kernel_args``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from closedform._numpy_rules import mean_std, pairwise_sum, quantile_linear

N_STATS = 5  # columns of per_prompt_stats: loss, dL/dxi1, dL/dxi2, q_{i*}, q_{N+1}


@njit(cache=True, fastmath=False)
def _prompt_stats(xi1, xi2, c_row, istar, q, out):
    """Per-prompt loss, gradient and attention in the reduced coordinates (docs/models/token_selection.md §A.5).

    ``q`` is scratch of length N + 1; ``out`` (5,) receives
    [1/2 (Q2 - 2 q_{i*} + 1), sum_m gamma_m c_m, q_{N+1} (Q2 - q_{i*}), q_{i*}, q_{N+1}].
    """
    n = c_row.shape[0]
    smax = xi1 - xi2  # the query's own score (||x_query|| = 1)
    for j in range(n):
        s = xi1 * c_row[j]
        if s > smax:
            smax = s
    z = 0.0
    for j in range(n):
        q[j] = math.exp(xi1 * c_row[j] - smax)
        z += q[j]
    q[n] = math.exp(xi1 - xi2 - smax)
    z += q[n]
    q2 = 0.0
    for j in range(n + 1):
        q[j] = q[j] / z
    for j in range(n):
        q2 += q[j] * q[j]
    qi = q[istar]
    qs = q[n]
    # gamma_m = dL/d(score_m) = q_m (q_m 1{m<=N} - Q2 + q_{i*}) - q_{i*} 1{m = i*}; dscore_m/dxi1 = c_m, c_{N+1} = 1
    g1 = 0.0
    for j in range(n):
        g1 += q[j] * (q[j] - q2 + qi) * c_row[j]
    g1 -= qi * c_row[istar]
    g1 += qs * (qi - q2)
    out[0] = 0.5 * (q2 - 2.0 * qi + 1.0)
    out[1] = g1
    out[2] = qs * (q2 - qi)  # dscore_{N+1}/dxi2 = -1
    out[3] = qi
    out[4] = qs


@njit(cache=True, fastmath=False)
def per_prompt_stats(xi1, xi2, c, istar, out):
    """Fill ``out`` (B, 5) with the per-prompt quantities of ``_prompt_stats`` for every prompt of the sample."""
    n_prompts, n = c.shape
    q = np.empty(n + 1)
    for b in range(n_prompts):
        _prompt_stats(xi1, xi2, c[b], istar[b], q, out[b])


@njit(cache=True, fastmath=False)
def mean_gradient(xi1, xi2, c, istar, grad):
    """Write the sample means (dL/dxi1, dL/dxi2) over the prompts into ``grad`` (2,)."""
    n_prompts, n = c.shape
    q = np.empty(n + 1)
    row = np.empty(N_STATS)
    g1 = 0.0
    g2 = 0.0
    for b in range(n_prompts):
        _prompt_stats(xi1, xi2, c[b], istar[b], q, row)
        g1 += row[1]
        g2 += row[2]
    grad[0] = g1 / n_prompts
    grad[1] = g2 / n_prompts


@njit(cache=True, fastmath=False)
def gd_step(k, x, p, args, out):
    """One full-matrix-exact GD step in (xi1, xi2) (docs/models/token_selection.md §A.5): xi1 -= (eta/d) dL/dxi1, xi2 -=
    eta dL/dxi2.

    Signature of a ``dynamics.iterate`` map: ``k`` step index (unused: constant step size), ``x`` = (xi1, xi2),
    ``p`` = [eta, d], ``args`` = (istar, c) of the module docstring, ``out`` the next state.
    """
    eta = p[0]
    d = p[1]
    istar = args[0]
    c = args[1]
    grad = np.empty(2)
    mean_gradient(x[0], x[1], c, istar, grad)
    out[0] = x[0] - (eta / d) * grad[0]
    out[1] = x[1] - eta * grad[1]


# ----------------------------------------------------------------------------------------------------------------
# the diagnostics at every save, inside the compiled loop (``dynamics.iterate``'s ``observe``), by numpy's own
# summation and quantile rules (closedform._numpy_rules), so that they equal the numpy formulas of
# ``nearest_neighbor.diagnostics`` bit for bit


@njit(cache=True, fastmath=False)
def _diagnostics_of(stats, quantile, out):
    """``nearest_neighbor.DIAGNOSTIC_NAMES`` from the per-prompt statistics ``stats`` (B, N_STATS)."""
    n = stats.shape[0]
    work = np.empty(n)
    root = math.sqrt(n)
    for q, col in ((0, 0), (5, 1), (7, 2)):  # (mean, std / sqrt(n)) of the loss and the two gradient components
        mean, std = mean_std(stats[:, col], work)
        out[q] = mean
        out[q + 1] = std / root
    out[2] = pairwise_sum(stats[:, 3], 0, n) / n
    out[3] = quantile_linear(stats[:, 3], quantile, work)
    out[4] = pairwise_sum(stats[:, 4], 0, n) / n


@njit(cache=True, fastmath=False)
def observables(k, x, p, args, out):
    """``nearest_neighbor.DIAGNOSTIC_NAMES`` of the state x = (xi1, xi2) on the prompt sample ``args = (istar, c,
    [quantile])`` (the GD step's data plus the lower quantile of q_{i*}), as ``nearest_neighbor.diagnostics``
    computes them.
    """
    c = args[1]
    stats = np.empty((c.shape[0], N_STATS))
    per_prompt_stats(x[0], x[1], c, args[0], stats)
    _diagnostics_of(stats, args[2][0], out)


@njit(cache=True, fastmath=False)
def step_observables(k, x, p, args, out, obs):
    """:func:`gd_step` and :func:`observables` of the same state in one pass over the prompts (the per-prompt
    statistics are computed once; the gradient sums them in the order of :func:`mean_gradient`, so both results
    equal the separate calls bit for bit).
    """
    c = args[1]
    n_prompts = c.shape[0]
    stats = np.empty((n_prompts, N_STATS))
    per_prompt_stats(x[0], x[1], c, args[0], stats)
    g1 = 0.0
    g2 = 0.0
    for b in range(n_prompts):
        g1 += stats[b, 1]
        g2 += stats[b, 2]
    out[0] = x[0] - (p[0] / p[1]) * (g1 / n_prompts)
    out[1] = x[1] - p[0] * (g2 / n_prompts)
    _diagnostics_of(stats, args[2][0], obs)
