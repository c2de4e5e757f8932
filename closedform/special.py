"""Gaussian special functions of the erf-attention models: zeta = E[erf(t + gZ)^2], its t-derivatives, Owen's T.

Every public function is a numpy ufunc compiled by numba (``@vectorize``): it broadcasts over numpy arrays and can be
called with scalar arguments from inside other ``@njit`` kernels (numba lowers the call to the scalar kernel).

Symbol table
------------
Sections (§) in the last column are those of docs/models/single_location.md.

======== ================ =============================================================== ========= =============
code     paper symbol     meaning                                                         shape     where defined
======== ================ =============================================================== ========= =============
t        t                argument of the informative-token erf, lambda sqrt(d/2) kappa   scalar    §3, §3.2
g        g                lambda * gamma (std of the Gaussian smoothing)                  scalar    §3
q        q                sqrt(1 + 2 g^2)                                                 scalar    §3
r        r                sqrt(1 + 4 g^2)                                                 scalar    §3
zeta     zeta(t, g)       E[erf(t + g Z)^2], Z standard normal                            ufunc     §3.2
zeta_t   d zeta / dt      first t-derivative                                              ufunc     §3.2
zeta_tt  d2 zeta / dt2    second t-derivative                                             ufunc     §3.2
zeta_ttt d3 zeta / dt3    third t-derivative                                              ufunc     §3.2
owens_t  T(h, a)          Owen's T function (1/2pi) int_0^a exp(-h^2(1+x^2)/2)/(1+x^2) dx ufunc     §3.2
phi      phi_j(t, g)      E[erf^(j)(t + g Z)] = erf^(j)(t/q) / q^j, j = 0..3              ufunc     §3.1
======== ================ =============================================================== ========= =============

Numerics (docs/models/single_location.md §3.2, §11): zeta uses the cancellation-free Gauss–Legendre form
``zeta = erf(t/q)^2 + (4/pi) int_{1/r}^1 exp(-h^2 (1+x^2)/2)/(1+x^2) dx`` with ``h = sqrt2 t/q`` and the interval
length written as ``4 g^2 / (r (r + 1))``, plus the exact arcsin form at t = 0; it is never a quadrature of zeta_t.
Owen's T uses the same 16-node rule on [0, a] for |a| <= 1 and the reflection identity
``T(h, a) = [Phi(h) Q(ah) + Phi(ah) Q(h)] / 2 - T(ah, 1/a)`` (Q = 1 - Phi, h >= 0, a > 1) otherwise.
The Gauss–Legendre nodes are module constants (frozen into numba's cache, never changed).
For many values of t at one g, ``_zeta_series_table(g, ...)`` expands the same quadrature sum in powers of
(t/q)^2 once and ``_zeta_series_m(t, g, m, exp(-m^2), erf(m), table, o)`` (m = t/q) evaluates it (a few ulp from
the quadrature, about six times cheaper); the map kernels of closedform.single_location and the symbolic front end's
generated kernels use it.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
from numba import njit, vectorize
from numba.extending import overload

from dynamics.validation import Range, validated

REFERENCE = {
    "title": "Attention layers provably solve single-location regression",
    "authors": "P. Marion, R. Berthier, G. Biau, C. Boyer",
    "venue": "ICLR 2025",
    "arxiv": "2410.01537",
    "bibtex_key": "marion2025attention",
    "spec": "docs/models/single_location.md §3",
}

__all__ = ["REFERENCE", "erf_derivative", "owens_t", "phi", "zeta", "zeta_t", "zeta_tt", "zeta_ttt"]

#  16-node Gauss–Legendre rule on [-1, 1] (docs/models/single_location.md §3.2: matches the Owen-T form to 6e-16 on t in
# [-200, 200]).
_GL_X, _GL_W = np.polynomial.legendre.leggauss(16)
_GL_X = np.ascontiguousarray(_GL_X, dtype=np.float64)
_GL_W = np.ascontiguousarray(_GL_W, dtype=np.float64)

_SQRT2 = math.sqrt(2.0)
_TWO_OVER_SQRTPI = 2.0 / math.sqrt(math.pi)


@njit(cache=True, fastmath=False)
def _erf_deriv(x, j):
    """j-th derivative of erf at x, j = 0..3 (docs/models/single_location.md §0 conventions: erf' = 2/sqrt(pi)
    e^{-x^2}, erf'' = -2x erf', ...).
    """
    if j == 0:
        return math.erf(x)
    e1 = _TWO_OVER_SQRTPI * math.exp(-x * x)
    if j == 1:
        return e1
    if j == 2:
        return -2.0 * x * e1
    if j == 3:
        return (4.0 * x * x - 2.0) * e1
    return math.nan


@njit(cache=True, fastmath=False)
def _gl_integral(h, lo, length):
    """int_lo^{lo+length} exp(-h^2 (1+x^2)/2) / (1+x^2) dx by the 16-node Gauss–Legendre rule
    (docs/models/single_location.md §3.2).
    """
    half = 0.5 * length
    acc = 0.0
    hh = 0.5 * h * h
    for i in range(_GL_X.shape[0]):
        x = lo + half * (1.0 + _GL_X[i])
        y = 1.0 + x * x
        acc += _GL_W[i] * math.exp(-hh * y) / y
    return half * acc


@njit(cache=True, fastmath=False)
def _gl_integral_to_one(h, length):
    """int_{1-length}^1 exp(-h^2 (1+x^2)/2)/(1+x^2) dx with nodes 1 - (len/2)(1 - x_i) (cancellation-free,
    docs/models/single_location.md §3.2).
    """
    half = 0.5 * length
    acc = 0.0
    hh = 0.5 * h * h
    for i in range(_GL_X.shape[0]):
        x = 1.0 - half * (1.0 - _GL_X[i])
        y = 1.0 + x * x
        acc += _GL_W[i] * math.exp(-hh * y) / y
    return half * acc


@njit(cache=True, fastmath=False)
def _norm_cdf(x):
    return 0.5 * math.erfc(-x / _SQRT2)


@njit(cache=True, fastmath=False)
def _owens_t(h, a):
    """Owen's T(h, a) (docs/models/single_location.md §3.2): Gauss–Legendre on [0, a] for |a| <= 1, reflection identity
    for |a| > 1.
    """
    if math.isnan(h) or math.isnan(a):
        return math.nan
    sign = 1.0
    if a < 0.0:
        sign = -1.0
        a = -a
    h = abs(h)
    if a == 0.0:
        return 0.0
    if a <= 1.0:
        return sign * _gl_integral(h, 0.0, a) / (2.0 * math.pi)
    if math.isinf(a):
        return sign * 0.5 * _norm_cdf(-h)
    ah = a * h
    ph, pah = _norm_cdf(h), _norm_cdf(ah)
    qh, qah = _norm_cdf(-h), _norm_cdf(-ah)
    return sign * (0.5 * (ph * qah + pah * qh) - _gl_integral(ah, 0.0, 1.0 / a) / (2.0 * math.pi))


@njit(cache=True, fastmath=False)
def _zeta(t, g):
    """zeta(t, g) = E[erf(t + gZ)^2] (docs/models/single_location.md §3.2, cancellation-free Gauss–Legendre form; arcsin
    form at t = 0).
    """
    g2 = g * g
    q = math.sqrt(1.0 + 2.0 * g2)
    if t == 0.0:
        return (2.0 / math.pi) * math.asin(2.0 * g2 / (1.0 + 2.0 * g2))
    if math.isinf(t):
        return 1.0
    r = math.sqrt(1.0 + 4.0 * g2)
    e = math.erf(t / q)
    length = 4.0 * g2 / (r * (r + 1.0))
    return e * e + (4.0 / math.pi) * _gl_integral_to_one(_SQRT2 * t / q, length)


@njit(cache=True, fastmath=False)
def _zeta_t(t, g):
    """d zeta / dt = (2/q) erf(t/(q r)) erf'(t/q) (docs/models/single_location.md §3.2)."""
    g2 = g * g
    q = math.sqrt(1.0 + 2.0 * g2)
    r = math.sqrt(1.0 + 4.0 * g2)
    return (2.0 / q) * math.erf(t / (q * r)) * _erf_deriv(t / q, 1)


@njit(cache=True, fastmath=False)
def _zeta_tt(t, g):
    """d^2 zeta / dt^2 (docs/models/single_location.md §3.2)."""
    g2 = g * g
    q = math.sqrt(1.0 + 2.0 * g2)
    r = math.sqrt(1.0 + 4.0 * g2)
    u, m = t / (q * r), t / q
    return (2.0 / q) * (_erf_deriv(u, 1) * _erf_deriv(m, 1) / (q * r) + math.erf(u) * _erf_deriv(m, 2) / q)


@njit(cache=True, fastmath=False)
def _zeta_ttt(t, g):
    """d^3 zeta / dt^3 (docs/models/single_location.md §3.2)."""
    g2 = g * g
    q = math.sqrt(1.0 + 2.0 * g2)
    r = math.sqrt(1.0 + 4.0 * g2)
    u, m = t / (q * r), t / q
    qr = q * r
    return (2.0 / q) * (
        _erf_deriv(u, 2) * _erf_deriv(m, 1) / (qr * qr)
        + 2.0 * _erf_deriv(u, 1) * _erf_deriv(m, 2) / (q * q * r)
        + math.erf(u) * _erf_deriv(m, 3) / (q * q)
    )


# Series form of zeta for many t at one g. The quadrature sum of _zeta is erf(m)^2 + (4/pi) half sum_i W_i
# exp(-a y_i) / y_i with m = t/q, a = m^2, half = len/2, nodes x_i = 1 - half (1 - X_i) and y_i = 1 + x_i^2. With
# d_i = y_i - 2 = (x_i - 1)(x_i + 1) in [-2 len, 0], exp(-a y_i) = exp(-a)^2 sum_k (-a d_i)^k / k!, so the same sum
# equals exp(-a)^2 sum_k (-a)^k mu_k with mu_k = sum_i (W_i / y_i) d_i^k / k!, coefficients that depend on g only.
# Truncated after ZETA_TERMS terms, the relative error is at most (a D)^ZETA_TERMS e^(2 a D) / ZETA_TERMS!
# (Lagrange remainder, D = max_i |d_i|), <= 3.1e-19 for a D <= ZETA_SERIES_AD. Table layout (ZETA_SERIES_SIZE
# floats from an offset o): ZS_H = (4/pi) half, ZS_AMAX = the largest a for which the series is used
# (ZETA_SERIES_AD / D), ZS_Q = q, then ZS_MU .. ZS_MU + ZETA_TERMS - 1 the mu_k.
ZETA_TERMS = 11
ZETA_SERIES_AD = 0.1
ZS_H, ZS_AMAX, ZS_Q, ZS_MU = 0, 1, 2, 3
ZETA_SERIES_SIZE = ZS_MU + ZETA_TERMS


@njit(cache=True, fastmath=False, error_model="numpy")
def _zeta_series_table(g, out, o):
    """Write the series table of zeta at smoothing g into out[o : o + ZETA_SERIES_SIZE] (layout above)."""
    g2 = g * g
    r = math.sqrt(1.0 + 4.0 * g2)
    half = 0.5 * (4.0 * g2 / (r * (r + 1.0)))
    out[o + ZS_H] = (4.0 / math.pi) * half
    out[o + ZS_Q] = math.sqrt(1.0 + 2.0 * g2)
    big_d = 0.0
    for k in range(ZETA_TERMS):
        out[o + ZS_MU + k] = 0.0
    for i in range(_GL_X.shape[0]):
        xm1 = -half * (1.0 - _GL_X[i])  # x_i - 1
        x = 1.0 + xm1
        y = 1.0 + x * x
        d = xm1 * (x + 1.0)  # y_i - 2 without cancellation
        big_d = max(big_d, abs(d))
        c = _GL_W[i] / y
        for k in range(ZETA_TERMS):
            out[o + ZS_MU + k] += c
            c *= d
    fact = 1.0
    for k in range(1, ZETA_TERMS):
        fact *= k
        out[o + ZS_MU + k] /= fact
    out[o + ZS_AMAX] = ZETA_SERIES_AD / big_d if big_d > 0.0 else math.inf


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def _zeta_series_m(t, g, m, ex, erfm, tab, o):
    """zeta(t, g) from the series table at tab[o:] given m = t/q, ex = exp(-m^2) and erfm = erf(m) (shared with
    the caller's other uses of them), falling back to _zeta at t = 0 or where the series bound does not hold
    (a > ZS_AMAX). Equal to the 16-node quadrature of _zeta up to rounding (a few ulp) and the truncation bound.
    """
    a = m * m
    if t == 0.0 or not a <= tab[o + ZS_AMAX]:
        return _zeta(t, g)
    s = -a
    acc = tab[o + ZS_MU + ZETA_TERMS - 1]
    for k in range(ZETA_TERMS - 2, -1, -1):
        acc = acc * s + tab[o + ZS_MU + k]
    return erfm * erfm + tab[o + ZS_H] * (ex * ex) * acc


@vectorize(["float64(float64, float64)"], cache=True)
def _zeta_ufunc(t, g):
    """zeta(t, g) = E[erf(t + g Z)^2] for real t and g (even in both).

    Implements docs/models/single_location.md §3.2, zeta(t, g) = 1 - 8 OwenT(sqrt2 t/q, 1/r), evaluated in the
    equivalent cancellation-free Gauss–Legendre form (interval length 4 g^2/(r (r+1))) and the arcsin form zeta(0, g) =
    (2/pi) arcsin(2 g^2/(1 + 2 g^2)) at t = 0 (paper Appendix C, Lemma 18 analogue).

    Parameters
    ----------
    t : array_like float64
        Argument of the informative erf, t = lambda sqrt(d/2) kappa.
    g : array_like float64
        Smoothing std, g = lambda gamma.

    Returns
    -------
    ndarray float64 (broadcast shape), values in [0, 1].
    """
    return _zeta(t, g)


@vectorize(["float64(float64, float64)"], cache=True)
def _zeta_t_ufunc(t, g):
    """First t-derivative of zeta: (2/q) erf(t/(q r)) erf'(t/q).

    Implements docs/models/single_location.md §3.2 (derivatives of zeta in t; paper Appendix C). Exact closed form, not
    a differentiated quadrature. Broadcasts over ``t`` and ``g`` (float64).
    """
    return _zeta_t(t, g)


@vectorize(["float64(float64, float64)"], cache=True)
def _zeta_tt_ufunc(t, g):
    """Second t-derivative of zeta, (2/q)[erf'(t/(qr)) erf'(t/q)/(qr) + erf(t/(qr)) erf''(t/q)/q].

    Implements docs/models/single_location.md §3.2 (derivatives of zeta in t). Broadcasts over ``t`` and ``g``
    (float64).
    """
    return _zeta_tt(t, g)


@vectorize(["float64(float64, float64)"], cache=True)
def _zeta_ttt_ufunc(t, g):
    """Third t-derivative of zeta (docs/models/single_location.md §3.2, formula for zeta_ttt).

    Implements docs/models/single_location.md §3.2. Broadcasts over ``t`` and ``g`` (float64).
    """
    return _zeta_ttt(t, g)


@vectorize(["float64(float64, float64)"], cache=True)
def _owens_t_ufunc(h, a):
    """Owen's T function T(h, a) = (1/2pi) int_0^a exp(-h^2 (1 + x^2)/2) / (1 + x^2) dx.

    Implements the function used in docs/models/single_location.md §3.2 (closed form of zeta). 16-node Gauss–Legendre
    rule on [0, a] for |a| <= 1; for |a| > 1 the reflection identity T(h, a) = [Phi(h) Q(ah) + Phi(ah) Q(h)]/2 - T(ah,
    1/a) (h >= 0), written without cancellation. Agrees with ``scipy.special.owens_t`` to ~1e-16 absolute
    (tests/closedform/test_special.py). Broadcasts (float64).
    """
    return _owens_t(h, a)


@vectorize(["float64(float64, float64, int64)"], cache=True)
def _phi_ufunc(t, g, j):
    """phi_j(t, g) = E[erf^(j)(t + g Z)] = erf^(j)(t/q) / q^j for j = 0, 1, 2, 3 (NaN for other j).

    Implements docs/models/single_location.md §3.1 (paper Lemma 18 analogue). Broadcasts over ``t``, ``g``, ``j``.
    """
    q = math.sqrt(1.0 + 2.0 * g * g)
    return _erf_deriv(t / q, j) / q**j


@vectorize(["float64(float64, int64)"], cache=True)
def _erf_derivative_ufunc(x, j):
    """j-th derivative of erf at x for j = 0..3 (NaN otherwise): erf, erf', erf'' = -2x erf', erf''' = (4x^2-2) erf'.

    Implements the conventions of docs/models/single_location.md §0 (Conventions) used in
    docs/models/single_location.md §3.1-§4.3.
    """
    return _erf_deriv(x, j)


# ----------------------------------------------------------------------------------------------------------------
# public entry points: the arguments are checked (finite reals, +-inf only for zeta's t and owens_t's h, j in 0..3),
# then the ufunc runs. Inside numba kernels the same names lower to the ufuncs (``numba.extending.overload``), with no
# checks in compiled code.


_REAL = Range(array=True)
_LIMIT = Range(array=True, finite=False)  # +-inf valid here (limits zeta(inf, g) = 1, T(inf, a) = 0); NaN not
_ORDER = Range(array=True, integer=True, ge=0, le=3)


@validated(t=_LIMIT, g=_REAL)
def zeta(t, g):  # noqa: D103  (the docstring is its ufunc's, set below)
    return _zeta_ufunc(t, g)


@validated(t=_REAL, g=_REAL)
def zeta_t(t, g):  # noqa: D103  (the docstring is its ufunc's, set below)
    return _zeta_t_ufunc(t, g)


@validated(t=_REAL, g=_REAL)
def zeta_tt(t, g):  # noqa: D103  (the docstring is its ufunc's, set below)
    return _zeta_tt_ufunc(t, g)


@validated(t=_REAL, g=_REAL)
def zeta_ttt(t, g):  # noqa: D103  (the docstring is its ufunc's, set below)
    return _zeta_ttt_ufunc(t, g)


@validated(h=_LIMIT, a=_REAL)
def owens_t(h, a):  # noqa: D103  (the docstring is its ufunc's, set below)
    return _owens_t_ufunc(h, a)


@validated(t=_REAL, g=_REAL, j=_ORDER)
def phi(t, g, j):  # noqa: D103  (the docstring is its ufunc's, set below)
    return _phi_ufunc(t, g, j)


@validated(x=_REAL, j=_ORDER)
def erf_derivative(x, j):  # noqa: D103  (the docstring is its ufunc's, set below)
    return _erf_derivative_ufunc(x, j)


def _lower_to(ufunc):
    """The numba implementation of a checked entry point: the ufunc itself (no checks in compiled code)."""

    def typer(*args):
        return lambda *args: ufunc(*args)

    return typer


for _entry, _ufunc in (
    (zeta, _zeta_ufunc),
    (zeta_t, _zeta_t_ufunc),
    (zeta_tt, _zeta_tt_ufunc),
    (zeta_ttt, _zeta_ttt_ufunc),
    (owens_t, _owens_t_ufunc),
    (phi, _phi_ufunc),
    (erf_derivative, _erf_derivative_ufunc),
):
    _entry.__doc__ = _ufunc.__doc__ + (
        "\n    Arguments are checked (finite reals, except that zeta's t and owens_t's h "
        "may be +-inf; j an integer in 0..3) before the ufunc runs.\n"
    )
    if "j" in inspect.signature(_entry).parameters:
        _entry.__doc__ += "\n    Parameters\n    ----------\n    j : int or int array, in [0, 3]\n"
    overload(_entry)(_lower_to(_ufunc))
del _entry, _ufunc
