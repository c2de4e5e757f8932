"""Tests of closedform.special against independent computations (scipy Owen's T, scipy/mpmath quadrature, FD)."""

from __future__ import annotations

import math
import warnings

import mpmath
import numpy as np
import pytest
import scipy.integrate
import scipy.special
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

from closedform import special

SQRT_HALF = math.sqrt(0.5)


def _zeta_owen_scipy(t, g):
    """zeta = 1 - 8 OwenT(sqrt2 t/q, 1/r) with scipy's Owen's T (spec Sec. 3.2, the reference closed form)."""
    q = np.sqrt(1 + 2 * g * g)
    r = np.sqrt(1 + 4 * g * g)
    return 1.0 - 8.0 * scipy.special.owens_t(np.sqrt(2) * t / q, 1.0 / r)


def _gauss_expect_quad(f):
    """E[f(Z)] by adaptive quadrature against the standard normal density (scipy.integrate.quad)."""
    with warnings.catch_warnings():  # quad warns that 1e-15 is unattainable; its result is still good to ~1e-16
        warnings.simplefilter("ignore", scipy.integrate.IntegrationWarning)
        val, _ = scipy.integrate.quad(
            lambda z: f(z) * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi),
            -40,
            40,
            points=[0.0],
            epsabs=1e-15,
            epsrel=1e-14,
            limit=400,
        )
    return val


def test_zeta_matches_scipy_owens_t_on_grid():
    t = np.concatenate([np.linspace(-50, 50, 1001), np.linspace(-6, 6, 601)])
    g = np.geomspace(1e-3, 30, 120)
    T, G = np.meshgrid(t, g)
    # 1e-13: the target; scipy's owens_t is accurate to ~1e-16 absolute here (measured: max gap 9e-16).
    np.testing.assert_allclose(special.zeta(T, G), _zeta_owen_scipy(T, G), rtol=0, atol=1e-13)


@pytest.mark.parametrize("t", [-50.0, -7.3, -2.5, -0.4, 0.0, 0.01, 0.3, 1.0, 3.7, 12.0, 50.0])
@pytest.mark.parametrize("g", [1e-3, 0.05, 0.7071067811865476, 1.3, 5.0, 30.0])
def test_zeta_matches_direct_quadrature(t, g):
    ref = _gauss_expect_quad(lambda z: math.erf(t + g * z) ** 2)
    # 1e-13: quad with epsabs=1e-15/epsrel=1e-14 on a smooth bounded integrand is good to ~1e-15.
    assert abs(special.zeta(t, g) - ref) <= 1e-13


@pytest.mark.parametrize(("t", "g"), [(0.0, 1e-3), (0.0, 1e-4), (0.01, 1e-3), (1e-3, 0.02), (0.0, 0.01)])
def test_zeta_small_values_relative_accuracy(t, g):
    """Small-g values need the cancellation-free form (spec Sec. 3.2); reference: 40-digit mpmath quadrature."""
    mpmath.mp.dps = 40
    ref = mpmath.quad(lambda z: mpmath.erf(t + g * z) ** 2 * mpmath.npdf(z), [-mpmath.inf, -1, 0, 1, mpmath.inf])
    mpmath.mp.dps = 15
    # 1e-12 relative: spec Sec. 3.2 measures 2e-16..9e-16 for this form; the plain Owen-T form fails (1e-10..4e-9).
    assert abs(special.zeta(t, g) / float(ref) - 1) <= 1e-12


def test_zeta_special_values():
    # exact 1/3; the arcsin form rounds asin(1/2) and 2/pi: a few ulps (ulp(1/3) = 5.6e-17)
    assert abs(special.zeta(0.0, SQRT_HALF) - 1 / 3) <= 3e-16
    assert special.zeta(np.inf, 0.3) == 1.0
    np.testing.assert_allclose(
        special.zeta(np.linspace(-3, 3, 7), 0.0), scipy.special.erf(np.linspace(-3, 3, 7)) ** 2, rtol=0, atol=4e-16
    )  # g = 0: zeta = erf(t)^2 exactly, up to rounding


def test_owens_t_matches_scipy():
    h = np.concatenate([np.linspace(-40, 40, 401), np.linspace(-8, 8, 801)])
    a = np.concatenate([np.geomspace(1e-4, 1e4, 160), -np.geomspace(1e-3, 1e3, 40), [0.0, 1.0]])
    H, A = np.meshgrid(h, a)
    # 1e-15 absolute: T <= 1/4, float64 rounding of both implementations (measured max gap 1.1e-16).
    np.testing.assert_allclose(special.owens_t(H, A), scipy.special.owens_t(H, A), rtol=0, atol=1e-15)


def _five_point(f, x, h):
    return (f(x - 2 * h) - 8 * f(x - h) + 8 * f(x + h) - f(x + 2 * h)) / (12 * h)


@pytest.mark.parametrize("g", [1e-3, 0.1, SQRT_HALF, 1.3, 8.0])
def test_zeta_derivatives_match_finite_differences(g):
    t = np.linspace(-6, 6, 97)
    h = 1e-3
    # 5-point stencil: truncation h^4/30 max|f^(5)| <= 3.4e-14 * 1e3 (|f^(5)| < 1e3 for these g), rounding about
    # 1.5 * eps * max|f| / h <= 3e-13 * max|f|: 1e-9 * max(1, |f|) leaves a wide margin and still catches any
    # wrong factor (the derivatives are O(0.1-10)).
    for f, df in (
        (special.zeta, special.zeta_t),
        (special.zeta_t, special.zeta_tt),
        (special.zeta_tt, special.zeta_ttt),
    ):
        fd = _five_point(lambda x, f=f: f(x, g), t, h)
        scale = max(1.0, float(np.max(np.abs(f(t, g)))))
        np.testing.assert_allclose(df(t, g), fd, rtol=0, atol=1e-9 * scale)


@pytest.mark.parametrize(("t", "g"), [(1.0, SQRT_HALF), (-2.5, 1.3), (0.3, 0.2), (4.0, 0.05)])
def test_zeta_t_matches_quadrature_of_pathwise_derivative(t, g):
    """d/dt E[erf(t+gZ)^2] = E[2 erf(t+gZ) erf'(t+gZ)] (differentiation under the integral)."""
    ref = _gauss_expect_quad(lambda z: 2 * math.erf(t + g * z) * 2 / math.sqrt(math.pi) * math.exp(-((t + g * z) ** 2)))
    assert abs(special.zeta_t(t, g) - ref) <= 1e-13  # quadrature accuracy as in test_zeta_matches_direct_quadrature


@pytest.mark.parametrize("j", [0, 1, 2, 3])
@pytest.mark.parametrize(("t", "g"), [(0.0, 1.0), (0.7, 0.3), (-1.9, 2.0)])
def test_phi_matches_quadrature(j, t, g):
    ref = _gauss_expect_quad(lambda z: float(special.erf_derivative(t + g * z, j)))
    assert abs(special.phi(t, g, j) - ref) <= 1e-13  # quadrature accuracy (see above)


def test_erf_derivative_matches_finite_differences():
    x = np.linspace(-3, 3, 61)
    for j in range(3):
        fd = _five_point(lambda y, j=j: special.erf_derivative(y, j), x, 1e-3)
        # truncation h^4/30 |erf^(j+5)| <= 3.4e-14 * 60; rounding ~3e-13: 1e-10 is a safe bound
        np.testing.assert_allclose(special.erf_derivative(x, j + 1), fd, rtol=0, atol=1e-10)


def test_reference_values_of_spec_table():
    """Spec Sec. 10.3 'Additional zeta values' (Owen-T = quadrature = 40-digit quadrature to <= 3e-16)."""
    rows = [
        (0, SQRT_HALF, 0.3333333333333334, 0, 7.351051938957e-01),
        (1, SQRT_HALF, 0.6154353631128272, 4.222845386880e-01, -4.486894785213e-02),
        (-2.5, 1.3, 0.9005865888637415, -1.179743699641e-01, -9.299056611614e-02),
        (5, 0.1, 0.9999999999949317, 5.066550472725e-11, -4.967206345776e-10),
        (0.3, 0.2, 0.1406213219730784, 5.900880192692e-01, 1.546722512306e00),
    ]
    for t, g, z, zt, ztt in rows:
        assert abs(special.zeta(t, g) - z) <= 1e-15  # 16 printed digits
        assert abs(special.zeta_t(t, g) - zt) <= 1e-12 * max(abs(zt), 1e-10)  # 13 significant digits printed
        assert abs(special.zeta_tt(t, g) - ztt) <= 1e-12 * max(abs(ztt), 1e-10)
    assert abs(special.zeta(0.0, 0.01) - 0.0001272984956229) <= 1e-16  # 16 decimals printed: rounding 5e-17


@njit(cache=False)
def _uses_special_in_kernel(t, g):
    return special.zeta(t, g) + special.zeta_t(t, g) + special.owens_t(t, g) + special.phi(t, g, 1)


def test_callable_from_numba_kernels():
    t, g = 0.37, 0.9
    expected = special.zeta(t, g) + special.zeta_t(t, g) + special.owens_t(t, g) + special.phi(t, g, 1)
    assert _uses_special_in_kernel(t, g) == expected


@given(st.floats(-60, 60), st.floats(0, 40))
def test_zeta_properties(t, g):
    z = special.zeta(t, g)
    assert 0.0 <= z <= 1.0
    assert special.zeta(-t, g) == z and special.zeta(t, -g) == z  # even in t and g (exact by construction)
    q = math.sqrt(1 + 2 * g * g)
    assert z >= math.erf(t / q) ** 2 - 1e-15  # Jensen (spec Sec. 3.2), up to rounding
