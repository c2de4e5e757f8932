"""numpy's summation and quantile rules written out as numba functions (private).

A model's observables computed inside the compiled loop (``dynamics.iterate``'s ``observe``) equal the numpy
formulas of its public diagnostics bit for bit only if they add in numpy's order: ``np.sum``/``np.mean`` of a 1-D
float64 array use pairwise summation (:func:`pairwise_sum`), ``np.std(ddof=1)`` subtracts that mean and sums the
squares the same way (:func:`mean_std`), and ``np.quantile`` interpolates by its own two-sided formula
(:func:`quantile_linear`). Reductions over the leading axis of a 2-D array (``terms.mean(axis=0)``) add the rows in
order, a plain loop. ``tests/closedform/test_in_loop_observables.py`` checks each against numpy.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, fastmath=False)
def _block_sum(v, lo, n):
    """numpy's pairwise sum of ``v[lo:lo + n]`` for n <= 128: a plain loop below 8 terms, else eight running sums
    combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)) and the remainder added one by one.
    """
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
    recursion is run on an explicit stack (numba's cache does not reload recursive functions safely).
    """
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
def mean_std(v, work):
    """(mean, standard deviation) of ``v`` as ``np.mean(v)`` and ``np.std(v, ddof=1)`` compute them (NaN deviation
    for one value); ``work`` is scratch of v's length.
    """
    n = v.shape[0]
    mean = pairwise_sum(v, 0, n) / n
    if n < 2:
        return mean, np.nan
    for i in range(n):
        dev = v[i] - mean
        work[i] = dev * dev
    return mean, math.sqrt(pairwise_sum(work, 0, n) / (n - 1))


@njit(cache=True, fastmath=False)
def quantile_linear(v, q, work):
    """``np.quantile(v, q)`` (its default 'linear' rule: virtual index (n - 1) q, numpy's two-sided interpolation
    formula); ``work`` is scratch of v's length.
    """
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
