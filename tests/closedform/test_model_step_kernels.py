"""Model step kernels as the engine runs them: the series form of zeta in the single_location PGD maps and the
agreement of the fast map with the quadrature arithmetic of the risk API (issue 14 item 7, speed at <= 1e-13).

References: mpmath at 30 digits of the integral form of zeta (spec single_location.md Sec. 3.2), and the partials
of ``risk_partials`` (16-node Gauss-Legendre zeta, unchanged) fed to the same Gram update.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from closedform import _single_location_kernels as K
from closedform import single_location as sl

TASK = sl.SingleLocationTask(d=400, L=10)


def _zeta_mp(t, g):
    """zeta(t, g) = erf(m)^2 + (4/pi) int_{1-len}^1 exp(-m^2 (1+x^2)) / (1+x^2) dx (spec Sec. 3.2), 30 digits."""
    with mpmath.workdps(30):
        t, g = mpmath.mpf(t), mpmath.mpf(g)
        q, r = mpmath.sqrt(1 + 2 * g * g), mpmath.sqrt(1 + 4 * g * g)
        m = t / q
        length = 4 * g * g / (r * (r + 1))
        integral = mpmath.quad(lambda x: mpmath.exp(-m * m * (1 + x * x)) / (1 + x * x), [1 - length, 1])
        return float(mpmath.erf(m) ** 2 + 4 / mpmath.pi * integral)


def _series_zeta(t, lam, terms=K.ZETA_TERMS):
    """The kernels' series form of zeta (through the table row of lambda), optionally truncated to ``terms``."""
    row = np.empty(K.N_CONST)
    K.lam_constants(lam, TASK.s, TASK.gamma, row)
    m = t / row[K.C_Q]
    a = m * m
    if terms == K.ZETA_TERMS:
        return K._zeta_series(t, m, math.exp(-a), math.erf(m), row[K.C_G], row, 0), a <= row[K.C_ZAMAX]
    poly = sum(row[K.C_ZMU + k] * (-a) ** k for k in range(terms))
    return math.erf(m) ** 2 + row[K.C_ZH] * math.exp(-a) ** 2 * poly, True


@pytest.mark.parametrize("lam", [0.01, 0.05, 0.1, 0.3, 0.9])
def test_zeta_series_matches_mpmath(lam):
    # kappa in [-1, 1] at d = 400; 2e-15 relative: a few ulp of the Horner sum and the products (the truncation
    # bound of the series is 3.1e-19 and mpmath's quadrature is exact to ~1e-30)
    g = lam * TASK.gamma
    used = 0
    for kappa in np.concatenate([np.linspace(-1.0, 1.0, 9), [0.01, 0.02, 0.05, -0.1]]):
        t = lam * TASK.s * kappa
        got, series = _series_zeta(t, lam)
        used += series
        assert got == pytest.approx(_zeta_mp(t, g), rel=2e-15, abs=0)
    assert used >= 3  # the series branch (not only the quadrature fallback) was exercised


def test_truncated_series_is_rejected():
    # a mutant keeping 3 of the 11 terms must fail the same comparison where a D is not tiny
    lam, kappa = 0.3, 0.15  # a D = 0.06: inside the series range, far from a D = 0
    t = lam * TASK.s * kappa
    ref = _zeta_mp(t, lam * TASK.gamma)
    good, series = _series_zeta(t, lam)
    assert series and abs(good / ref - 1) <= 2e-15
    bad, _ = _series_zeta(t, lam, terms=3)
    assert abs(bad / ref - 1) > 2e-15


@pytest.mark.parametrize("lam", [0.05, 0.1, 0.9, 2.0])
@pytest.mark.parametrize("d", [8, 400, 10**6])
def test_fast_five_scalar_map_equals_the_quadrature_map(lam, d):
    # one PGD update of the map kernels (series zeta) against the partials of risk_partials (16-node quadrature,
    # the arithmetic of the kernels before the series form) through the same update; every state component lies in
    # [-1, 1], and the two differ by rounding only: measured <= 3.4e-16, asserted <= 1e-13 (the bound)
    task = sl.SingleLocationTask(d=d, L=10)
    X = sl.sample_initial_state(TASK, 500, 7)
    alpha = 4e-3 * 400 / d
    fast = np.empty((500, 5))
    K.five_map_array(X, np.full(500, lam), np.full(500, alpha), task.s, task.gamma, float(task.L), fast)
    partials = sl.risk_partials(task, lam, *X.T)
    ref = np.array([K.five_update(*X[i], *partials[i], alpha) for i in range(500)])
    assert np.max(np.abs(fast - ref)) <= 1e-13


def test_map_kernels_run_without_reference_counting():
    # the heavy model kernels are compiled with _nrt=False (no atomic refcount operations per step); they must
    # still give the engine the same one-step result as the array helper
    p, table = sl._map_params(TASK, 4e-3, np.array([0.05]))
    x = np.append(sl.sample_initial_state(TASK, 1, 3)[0], 0.05)
    out = np.empty(6)
    K.five_step(0, x, p, (table,), out)
    ref = np.empty((1, 5))
    K.five_map_array(x[None, :5].copy(), np.array([0.05]), np.array([4e-3]), TASK.s, TASK.gamma, float(TASK.L), ref)
    assert np.array_equal(out[:5], ref[0]) and out[5] == 0.05
