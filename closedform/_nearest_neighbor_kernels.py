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
# the diagnostics at every save, inside the compiled loop (``dynamics.iterate``'s ``observe``): numpy's own
# summation and quantile rules, written out, so that they equal the numpy formulas of ``nearest_neighbor.diagnostics``
# bit for bit


@njit(cache=True, fastmath=False)
def _block_sum(v, lo, n):
    """numpy's pairwise sum of ``v[lo:lo + n]`` for n <= 128: a plain loop below 8 terms, else eight running sums
    combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)) and the remainder added one by one."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += v[lo + i]
        return res
    r0, r1, r2, r3 = v[lo], v[lo + 1], v[lo + 2], v[lo + 3]
    r4, r5, r6, r7 = v[lo + 4], v[lo + 5], v[lo + 6], v[lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += v[lo + i]
        r1 += v[lo + i + 1]
        r2 += v[lo + i + 2]
        r3 += v[lo + i + 3]
        r4 += v[lo + i + 4]
        r5 += v[lo + i + 5]
        r6 += v[lo + i + 6]
        r7 += v[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += v[lo + i]
        i += 1
    return res


@njit(cache=True, fastmath=False)
def pairwise_sum(v, lo, n):
    """The sum of ``v[lo:lo + n]`` by numpy's pairwise rule for float64 (``np.add.reduce``): blocks of at most 128
    terms (:func:`_block_sum`); above that the two halves, split at a multiple of 8, summed apart and added. The
    recursion is run on an explicit stack (numba's cache does not reload recursive functions safely)."""
    if n <= 128:
        return _block_sum(v, lo, n)
    los = np.empty(64, dtype=np.int64)  # depth <= log2(n / 128) + 1
    ns = np.empty(64, dtype=np.int64)
    stage = np.empty(64, dtype=np.int64)  # 0: not split yet; 1: left half pending; 2: right half pending
    left = np.empty(64)
    top = 0
    los[0] = lo
    ns[0] = n
    stage[0] = 0
    while True:
        m = ns[top]
        if m > 128:
            half = m // 2
            half -= half % 8
            stage[top] = 1
            top += 1
            los[top] = los[top - 1]
            ns[top] = half
            stage[top] = 0
            continue
        val = _block_sum(v, los[top], m)
        top -= 1
        while top >= 0 and stage[top] == 2:  # a right half done: add it to its left half, one level up
            val = left[top] + val
            top -= 1
        if top < 0:
            return val
        left[top] = val  # a left half done: the right half next
        stage[top] = 2
        half = ns[top] // 2
        half -= half % 8
        los[top + 1] = los[top] + half
        ns[top + 1] = ns[top] - half
        stage[top + 1] = 0
        top += 1


@njit(cache=True, fastmath=False)
def mean_se(v, work):
    """(mean, standard error) of ``v`` as ``np.mean(v)`` and ``np.std(v, ddof=1) / sqrt(n)`` compute them (NaN
    standard error for one value); ``work`` is scratch of v's length."""
    n = v.shape[0]
    mean = pairwise_sum(v, 0, n) / n
    if n < 2:
        return mean, np.nan
    for i in range(n):
        dev = v[i] - mean
        work[i] = dev * dev
    return mean, math.sqrt(pairwise_sum(work, 0, n) / (n - 1)) / math.sqrt(n)


@njit(cache=True, fastmath=False)
def quantile_linear(v, q, work):
    """``np.quantile(v, q)`` (its default 'linear' rule: virtual index (n - 1) q, numpy's two-sided interpolation
    formula); ``work`` is scratch of v's length."""
    n = v.shape[0]
    for i in range(n):
        work[i] = v[i]
    work.sort()
    vi = (n - 1) * q
    lo = math.floor(vi)
    t = vi - lo
    if vi >= n - 1:
        a = work[n - 1]
        b = work[n - 1]
    else:
        a = work[int(lo)]
        b = work[int(lo) + 1]
    diff = b - a
    if t >= 0.5:
        return b - diff * (1.0 - t)
    return a + diff * t


@njit(cache=True, fastmath=False)
def _diagnostics_of(stats, quantile, out):
    """``nearest_neighbor.DIAGNOSTIC_NAMES`` from the per-prompt statistics ``stats`` (B, N_STATS)."""
    n = stats.shape[0]
    work = np.empty(n)
    out[0], out[1] = mean_se(stats[:, 0], work)
    out[2] = pairwise_sum(stats[:, 3], 0, n) / n
    out[3] = quantile_linear(stats[:, 3], quantile, work)
    out[4] = pairwise_sum(stats[:, 4], 0, n) / n
    out[5], out[6] = mean_se(stats[:, 1], work)
    out[7], out[8] = mean_se(stats[:, 2], work)


@njit(cache=True, fastmath=False)
def observables(k, x, p, args, out):
    """``nearest_neighbor.DIAGNOSTIC_NAMES`` of the state x = (xi1, xi2) on the prompt sample ``args = (istar, c,
    [quantile])`` (the GD step's data plus the lower quantile of q_{i*}), as ``nearest_neighbor.diagnostics``
    computes them."""
    c = args[1]
    stats = np.empty((c.shape[0], N_STATS))
    per_prompt_stats(x[0], x[1], c, args[0], stats)
    _diagnostics_of(stats, args[2][0], out)


@njit(cache=True, fastmath=False)
def step_observables(k, x, p, args, out, obs):
    """:func:`gd_step` and :func:`observables` of the same state in one pass over the prompts (the per-prompt
    statistics are computed once; the gradient sums them in the order of :func:`mean_gradient`, so both results
    equal the separate calls bit for bit)."""
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
