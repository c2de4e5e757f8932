"""Explicit Runge-Kutta methods as data (Butcher tableaus) and the small numba helpers the engine kernels share.

The kernels themselves are generated from these tableaus by :mod:`dynamics._kernels` (one source per model function
and method, compiled with ``cache=True``). Status codes written by every kernel, per trajectory
``status[i] = (code, step_or_0, variable_index, n_saves_written)``:

* code 1: a non-finite value or one with ``|x| > bound`` (the variable index says which component);
* code 2: the adaptive solver exceeded ``max_steps``;
* code 3: the adaptive step size underflowed (stiff or singular flow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction as F

import numpy as np
from numba import njit
from numpy.polynomial import polynomial as npoly

# Smallest positive normal float64: values strictly below it in magnitude are subnormal (or zero).
TINY = 2.2250738585072014e-308


@dataclass(frozen=True)
class Tableau:
    """An explicit Runge-Kutta method ``(c, A, b)`` (Hairer, Nørsett & Wanner, Solving ODEs I, Sec. II.1).

    ``A`` is strictly lower triangular (s x s). For embedded pairs ``e = b - b_hat`` gives the local error estimate
    ``h * sum_s e_s k_s``; ``dense[s, m]`` the continuous extension ``y(t + theta h) = y + h sum_s k_s
    sum_m dense[s, m] theta^(m+1)``. ``fsal``: the last stage is f(t + h, y_new) (first same as last).
    ``order`` is the order of ``b``; ``err_order`` the order of the embedded solution (step control exponent
    ``1/(err_order + 1)``).
    """

    name: str
    c: tuple
    A: tuple
    b: tuple
    order: int
    e: tuple | None = None
    dense: tuple | None = None
    err_order: int | None = None
    fsal: bool = False

    @property
    def stages(self) -> int:
        return len(self.b)


def _rows(rows):
    return tuple(tuple(float(v) for v in r) for r in rows)


EULER = Tableau("euler", c=(0.0,), A=((0.0,),), b=(1.0,), order=1)

RK4 = Tableau(
    "rk4",
    c=(0.0, 0.5, 0.5, 1.0),
    A=_rows([[0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 1, 0]]),
    b=tuple(float(v) for v in (F(1, 6), F(1, 3), F(1, 3), F(1, 6))),
    order=4,
)

# Dormand & Prince 1980 (Hairer, Nørsett & Wanner, Table II.5.2); row 6 of A is b (FSAL). Dense output: the
# order-4 continuous extension of Shampine (1986), the coefficients of scipy's RK45.P.
_DP_A = [
    [0] * 7,
    [F(1, 5)] + [0] * 6,
    [F(3, 40), F(9, 40)] + [0] * 5,
    [F(44, 45), F(-56, 15), F(32, 9)] + [0] * 4,
    [F(19372, 6561), F(-25360, 2187), F(64448, 6561), F(-212, 729)] + [0] * 3,
    [F(9017, 3168), F(-355, 33), F(46732, 5247), F(49, 176), F(-5103, 18656)] + [0] * 2,
    [F(35, 384), 0, F(500, 1113), F(125, 192), F(-2187, 6784), F(11, 84), 0],
]
DOPRI5 = Tableau(
    "dopri5",
    c=tuple(float(v) for v in (0, F(1, 5), F(3, 10), F(4, 5), F(8, 9), 1, 1)),
    A=_rows(_DP_A),
    b=tuple(float(v) for v in _DP_A[6]),
    order=5,
    err_order=4,
    fsal=True,
    e=tuple(float(v) for v in (F(-71, 57600), 0, F(71, 16695), F(-71, 1920), F(17253, 339200), F(-22, 525), F(1, 40))),
    dense=_rows(
        [
            [1, F(-8048581381, 2820520608), F(8663915743, 2820520608), F(-12715105075, 11282082432)],
            [0, 0, 0, 0],
            [0, F(131558114200, 32700410799), F(-68118460800, 10900136933), F(87487479700, 32700410799)],
            [0, F(-1754552775, 470086768), F(14199869525, 1410260304), F(-10690763975, 1880347072)],
            [0, F(127303824393, 49829197408), F(-318862633887, 49829197408), F(701980252875, 199316789632)],
            [0, F(-282668133, 205662961), F(2019193451, 616988883), F(-1453857185, 822651844)],
            [0, F(40617522, 29380423), F(-110615467, 29380423), F(69997945, 29380423)],
        ]
    ),
)


def _tsit5() -> Tableau:
    """Tsitouras 5(4) (Ch. Tsitouras, Comput. Math. Appl. 62 (2011) 770, Table 1), FSAL, with its order-4 free
    interpolant (ibid., the b_i(theta) in factored form), expanded here into powers of theta.
    """
    c = [0.0, 0.161, 0.327, 0.9, 0.9800255409045097, 1.0, 1.0]
    low = [
        [],
        [0.161],
        [None, 0.3354806554923570],
        [None, -6.359448489975075, 4.362295432869581],
        [None, -11.74888356406283, 7.495539342889836, -0.09249506636175525],
        [None, -12.92096931784711, 8.159367898576159, -0.071584973281401006, -0.02826905039406838],
        [0.09646076681806523, 0.01, 0.4798896504144996, 1.379008574103742, -3.290069515436081, 2.324710524099774],
    ]
    A = np.zeros((7, 7))
    for s, row in enumerate(low):
        for q, v in enumerate(row):
            if v is not None:
                A[s, q] = v
        if row and row[0] is None:  # the paper fixes a_s1 by the row-sum condition sum_q a_sq = c_s
            A[s, 0] = c[s] - sum(row[1:])
    b = A[6].copy()
    # Error weights e = b - b_hat as tabulated (the sign of the last entry as corrected after publication); they
    # sum to 0 (both weight vectors sum to 1), which tests/dynamics/test_solvers.py checks in exact arithmetic.
    e = [
        0.001780011052226,
        0.000816434459657,
        -0.007880878010262,
        0.144711007173263,
        -0.582357165452555,
        0.458082105929187,
        -1.0 / 66.0,
    ]
    P = npoly.Polynomial
    th = P([0.0, 1.0])
    polys = [
        -1.0530884977290216 * th * (th - 1.3299890189751412) * (th**2 - 1.4364028541716351 * th + 0.7139816917074209),
        0.1017 * th**2 * (th**2 - 2.1966568338249754 * th + 1.2949852507374631),
        2.490627285651252793 * th**2 * (th**2 - 2.38535645472061657 * th + 1.57803468208092486),
        -16.54810288924490272 * (th - 1.21712927295533244) * (th - 0.61620406037800089) * th**2,
        47.37952196281928122 * (th - 1.203071208372362603) * (th - 0.658047292653547382) * th**2,
        -34.87065786149660974 * (th - 1.2) * (th - 0.666666666666666667) * th**2,
        2.5 * (th - 1.0) * (th - 0.6) * th**2,
    ]
    dense = np.zeros((7, 4))
    for s, poly in enumerate(polys):
        coef = np.zeros(5)
        coef[: len(poly.coef)] = poly.coef
        dense[s] = coef[1:5]  # constant term is 0: y(t) = y at theta = 0
    return Tableau(
        "tsit5",
        c=tuple(c),
        A=_rows(A),
        b=tuple(float(v) for v in b),
        order=5,
        err_order=4,
        fsal=True,
        e=tuple(float(v) for v in e),
        dense=_rows(dense),
    )


TSIT5 = _tsit5()


@njit(cache=True, fastmath=False)
def max_abs(v):
    """``max_m |v[m]|`` (0 for an empty vector), NaN once one appears, as numpy's ``np.max(np.abs(v))``."""
    out = 0.0
    for m in range(v.shape[0]):
        a = abs(v[m])
        if out == out and not a <= out:
            out = a
    return out


@njit(cache=True, fastmath=False)
def is_bad(x, bound):
    """True for NaN and |x| > bound; ``bound`` is finite (the engine passes at most the largest float, so that one
    comparison also catches +-inf).
    """
    return not abs(x) <= bound  # a NaN fails every comparison


@njit(cache=True, fastmath=False)
def first_bad(v, bound):
    """Index of the first component that is NaN or exceeds ``bound`` in absolute value, else -1."""
    for m in range(v.shape[0]):
        if not abs(v[m]) <= bound:
            return m
    return -1


@njit(cache=True, fastmath=False)
def commit_moved(x, new, flush):
    """Copy ``new`` into ``x`` and return ``max_m |new_m - x_m|`` (the size of the step in the max norm).

    With ``flush``, subnormal components (|v| < TINY) become a zero of the same sign, so a converged run never
    computes on subnormals (slow on x86); values of magnitude >= TINY are copied bit for bit. (The grid kernels
    write the same copy out inline when no step size is tracked.)
    """
    moved = 0.0
    for m in range(x.shape[0]):
        v = new[m]
        if flush and abs(v) < TINY:
            v = v * 0.0
        d = abs(v - x[m])
        if d > moved:
            moved = d
        x[m] = v
    return moved


@njit(cache=True, fastmath=False)
def fill_frozen(Yi, j, save_k, k_end, x):
    """Write the frozen state ``x`` into the saves ``Yi[j:]`` due at or before step ``k_end``; return the next j."""
    while j < save_k.shape[0] and save_k[j] <= k_end:
        Yi[j, :] = x
        j += 1
    return j


@njit(cache=True, fastmath=False)
def in_tail(TL, TH, k):
    """True when step ``k`` lies in one of the tail blocks [TL[b], TH[b]]."""
    for b in range(TL.shape[0]):
        if TL[b] <= k <= TH[b]:
            return True
    return False


@njit(cache=True, fastmath=False)
def tail_add(row, TL, TH, k_from, k_to, v):
    """Fold the step size ``v`` into ``row[b]`` for every tail block [TL[b], TH[b]] that has a step in [k_from,
    k_to]: row[b] = max(row[b], v), with NaN kept once it appears (as numpy's max over the samples would).
    """
    for b in range(TL.shape[0]):
        if TL[b] <= k_to and TH[b] >= k_from:
            cur = row[b]
            if cur == cur and not v <= cur:
                row[b] = v


def finite_bound(bound: float) -> float:
    """The bound the kernels compare with: at most the largest float64, so ``|x| <= bound`` also rejects inf."""
    return min(float(bound), float(np.finfo(np.float64).max))


@njit(cache=True, fastmath=False)
def rms_scaled(v, y, atol, rtol):
    """sqrt(mean((v / (atol + rtol |y|))^2)), the norm of Hairer's step control."""
    s = 0.0
    for m in range(v.shape[0]):
        sc = atol + rtol * abs(y[m])
        s += (v[m] / sc) ** 2
    return np.sqrt(s / v.shape[0])


@njit(cache=True, fastmath=False)
def step_factor(err, accepted, rejected_last, exponent):
    """Step-size controller (Hairer, Nørsett & Wanner, Sec. II.4, eq. 4.13): the factor for the next step.

    ``0.9 err^(-exponent)`` clipped to [0.2, 10]; after an accepted step that followed a rejection the step may not
    grow; ``exponent = 1/(q + 1)`` with q the order of the embedded error estimate.
    """
    if accepted:
        fac = 10.0 if err == 0.0 else min(10.0, 0.9 * err**-exponent)
        if rejected_last:
            fac = min(fac, 1.0)
        return fac
    return max(0.2, 0.9 * err**-exponent)


def fixed_grid_saves(save_times, t0: float, dt: float):
    """For each save time s: the grid index ``k`` with t0 + k dt <= s and the remaining partial step ``h`` (0 when
    s is on the grid up to 1e-9 of a step, so float round-off in ``s`` never forces a sliver step).
    """
    ks = np.empty(len(save_times), dtype=np.int64)
    hs = np.zeros(len(save_times))
    for j, s in enumerate(save_times):
        r = (s - t0) / dt
        kr = round(r)
        if abs(r - kr) <= 1e-9 * max(1.0, abs(r)):
            ks[j] = int(kr)
        else:
            ks[j] = int(math.floor(r))
            hs[j] = s - (t0 + ks[j] * dt)
    return ks, hs
