"""The many-head path of the icl_regression kernels: the exponentials exp(d omega_h omega_g) by closedform._simd's
exp_poly in a vectorised loop (H >= VEC_HEADS), checked against independent references: mpmath for the exponential
itself, and the gradient step written in numpy extended precision (np.longdouble, 64-bit significand) for the step.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from numba import njit

from closedform import _icl_regression_kernels as K
from closedform import icl_regression as icl
from closedform._simd import exp_poly
from dynamics import SaveAt, iterate

EPS = np.finfo(np.float64).eps
TASK = icl.ICLRegressionTask(d=5, L=40, sigma2=0.1)


@njit(cache=True)
def _exp_poly_array(x, out):
    for i in range(x.shape[0]):
        out[i] = exp_poly(x[i])


def _exp_mp(x):
    with mpmath.workdps(40):
        return float(mpmath.exp(mpmath.mpf(float(x))))


def test_exp_poly_within_one_and_a_half_ulp_of_mpmath():
    # 1.5 ulp (np.spacing of the exact value, so also in the subnormal range): the method's bound (module docstring
    # of closedform._simd: Taylor truncation < 4.5e-18, Horner rounding and the exact reduction give <= 1.01 ulp
    # measured on 1e7 values, plus one rounding when the result is subnormal)
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.uniform(-745.0, 709.7, 3000),
            rng.uniform(-1.0, 1.0, 1000),
            rng.uniform(-1e-8, 1e-8, 200),
            rng.uniform(-745.0, -708.0, 500),
            [0.0, -0.0, 1.0, -1.0, 709.78, -745.13, 1e-300],
        ]
    )
    got = np.empty_like(x)
    _exp_poly_array(x, got)
    ref = np.array([_exp_mp(v) for v in x])
    ulp = np.spacing(np.abs(ref))
    assert np.all(np.abs(got - ref) <= 1.5 * ulp)
    # a result 4 ulp off (e.g. a polynomial two terms short, whose truncation error is ~3e-15 at |r| = ln2/2) fails
    assert np.any(np.abs(got * (1 + 4 * EPS) - ref) > 1.5 * ulp)


def test_exp_poly_special_values():
    x = np.array([-800.0, -745.3, 709.8, 800.0, np.inf, -np.inf, np.nan])
    got = np.empty_like(x)
    _exp_poly_array(x, got)
    assert got[0] == 0.0 and got[1] == 0.0 and got[4] == np.inf and got[5] == 0.0
    assert got[2] == np.inf and got[3] == np.inf and np.isnan(got[6])


def _step_longdouble(x, d, cL, lr, k_error=0.0):
    """One GD step on F/2 (docs/models/icl_regression.md §4.4, Eq. (4.4) halved) in extended precision, and the sum
    of the absolute values of the terms of each update (the scale of its rounding errors)."""
    H = x.size // 2
    w, m = x[:H].astype(np.longdouble), x[H:].astype(np.longdouble)
    arg = np.longdouble(d) * np.outer(w, w)
    Km = np.exp(arg) * (1 + np.longdouble(k_error))  # k_error: a deliberately wrong kernel matrix
    u = m @ w
    s_w, s_m = Km @ (m * w), Km @ m
    dl, cl = np.longdouble(d), np.longdouble(cL)
    g_w = -m * (1 - u) + dl * cl * m * s_w
    g_m = -w * (1 - u) + cl * s_m
    step = np.concatenate([w - lr * g_w, m - lr * g_m])
    a_w = np.abs(m * (1 - u)) + np.abs(dl * cl * m) * (np.abs(Km) @ np.abs(m * w))
    a_m = np.abs(w * (1 - u)) + cl * (np.abs(Km) @ np.abs(m))
    scale = np.concatenate([np.abs(w) + lr * a_w, np.abs(m) + lr * a_m])
    return step, scale.astype(np.float64), float(np.max(np.abs(arg)))


@pytest.mark.parametrize("H", [6, 8, 16])
def test_gd_step_against_extended_precision(H):
    # tolerance: each K_hg is exp_poly of the rounded argument: <= 1.5 ulp plus 1 ulp of the argument times |arg|;
    # the row sums over H terms add <= H ulp of the sum of |terms|, the update ~4 more roundings, so the error of a
    # component is <= (1.5 + |arg|_max + H + 4) eps times the sum of the absolute values of its terms (``scale``)
    rng = np.random.default_rng(H)
    p = np.array([float(TASK.d), TASK.cL, 0.01])
    out = np.empty(2 * H)
    seen = 0
    for scale_w in (0.01, 0.3, 1.0):
        for _ in range(20):
            x = np.concatenate([rng.normal(0, scale_w, H), rng.normal(0, 1.0, H)])
            K.gd_step(0, x, p, out)
            ref, scale, amax = _step_longdouble(x, p[0], p[1], p[2])
            tol = (1.5 + amax + H + 4) * EPS * scale
            err = np.abs(out - ref.astype(np.float64))
            assert np.all(err <= tol)
            wrong = _step_longdouble(x, p[0], p[1], p[2], k_error=1e-11)[0]
            seen += bool(np.any(np.abs(out - wrong.astype(np.float64)) > tol))
    assert seen >= 20  # exponentials off by 1e-11 relative are rejected (at least wherever omega is O(1))


def test_many_head_map_fused_observables_and_flow_agree_with_the_separate_kernels():
    # H = 8 (the vectorised path): the fused step-and-observables kernel of map leaves the states of the plain step
    # bit for bit, and its F equals observables() on the saved states bit for bit
    H = 8
    rng = np.random.default_rng(3)
    om, mu = rng.normal(0, 0.3, (4, H)), rng.normal(0, 0.3, (4, H))
    tr = icl.map(TASK, om, mu, lr=0.01, n_steps=200, saveat=SaveAt(every=1), warn_unconverged=False)
    X = np.stack([tr[f"omega_{h}"].values for h in range(H)] + [tr[f"mu_{h}"].values for h in range(H)], axis=-1)
    p = np.array([float(TASK.d), TASK.cL, 0.01, TASK.sigma2])
    plain = iterate(K.gd_step, X[:, 0], 200, params=p, saveat=SaveAt(every=1))
    np.testing.assert_array_equal(plain.states(), X)
    obs = np.empty(3)
    for i in range(4):
        for j in range(0, 201, 20):
            K.observables(j, X[i, j], p, obs)
            assert obs[0] == tr["F"].values[i, j] and obs[1] == tr["mu_dot_omega"].values[i, j]
    # F agrees with the loss API (library exponentials, another summation order) to the rounding of its terms
    F_api = icl.approx_loss(TASK, X[:, :, :H], X[:, :, H:])
    np.testing.assert_allclose(tr["F"].values, F_api, rtol=64 * EPS, atol=0)


def test_too_many_heads_raise():
    H = K.MAX_HEADS + 1
    with pytest.raises(ValueError, match=r"H <= 90 heads"):
        icl.map(TASK, np.full(H, 0.01), np.full(H, 0.01), lr=0.01, n_steps=1)
    x = np.full(2 * H, 0.01)  # the kernel itself refuses a triangle larger than its stack buffer
    with pytest.raises(ValueError, match="MAX_HEADS"):
        K.gd_step(0, x, np.array([5.0, 0.1, 0.01]), np.empty_like(x))
