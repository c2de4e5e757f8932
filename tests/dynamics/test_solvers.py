"""The Runge-Kutta methods of the engine against exact solutions (expm, polynomial quadrature, exact arithmetic):
convergence orders, dense output, off-grid saves, in-loop saves, stop/flush and argument errors."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.linalg
from numba import njit

from dynamics import RK4, DivergenceError, Dopri5, Euler, SaveAt, Tsit5, integrate, iterate
from dynamics import _steppers

from tests._ode import forced, forced_reference

# A damped rotation y' = A y with the exact solution expm(A t) y0.
A_LIN = np.array([[-0.3, 1.0], [-1.0, -0.3]])
Y0 = np.array([1.0, 0.5])


@njit(cache=True)
def linear_rhs(t, y, p, dy):
    dy[0] = p[0] * y[0] + p[1] * y[1]
    dy[1] = p[2] * y[0] + p[3] * y[1]


@njit(cache=True)
def cubic_quadrature(t, y, p, dy):
    # y' = (1 + t)^3, y(0) = 0: y(t) = ((1 + t)^4 - 1) / 4, a polynomial of degree 4
    dy[0] = (1.0 + t) ** 3


@njit(cache=True)
def halving(k, x, p, out):
    for m in range(x.shape[0]):
        out[m] = p[0] * x[m]


@njit(cache=True)
def squaring(k, x, p, out):
    out[0] = x[0] * x[0]


def _exact(t):
    return scipy.linalg.expm(A_LIN * t) @ Y0


def _fixed_steps(solver_cls, dt):
    """An adaptive solver forced onto fixed steps: every step is accepted (huge tolerances), dt0 = dt_max = dt."""
    return solver_cls(rtol=1e6, atol=1e6, dt0=dt, dt_max=dt)


def _slope(hs, errors):
    return np.polyfit(np.log(hs), np.log(errors), 1)[0]


@pytest.mark.parametrize("tab", [_steppers.EULER, _steppers.RK4, _steppers.DOPRI5, _steppers.TSIT5])
def test_tableau_consistency(tab):
    # Row sums equal the nodes, weights sum to 1, error weights to 0 (both weight vectors sum to 1), and the
    # dense output at theta = 1 reproduces b. Exact (Fraction) for the rational methods; Tsit5's coefficients are
    # 16-digit decimals, hence 1e-14.
    tol = 0 if tab.name != "tsit5" else Fraction(1, 10**14)
    for s in range(tab.stages):
        assert abs(sum(Fraction(a) for a in tab.A[s]) - Fraction(tab.c[s])) <= tol + Fraction(1, 10**15)
    assert abs(sum(Fraction(b) for b in tab.b) - 1) <= tol + Fraction(1, 10**15)
    if tab.e is not None:
        assert abs(sum(Fraction(e) for e in tab.e)) <= tol + Fraction(1, 10**15)
        for s in range(tab.stages):
            assert abs(sum(Fraction(d) for d in tab.dense[s]) - Fraction(tab.b[s])) <= tol + Fraction(1, 10**15)


@pytest.mark.parametrize(
    "make, order, hs",
    [
        (Euler, 1, [0.1, 0.05, 0.025, 0.0125]),
        (RK4, 4, [0.2, 0.1, 0.05, 0.025]),
        (lambda dt: _fixed_steps(Dopri5, dt), 5, [0.4, 0.2, 0.1, 0.05]),
        # Tsit5's leading error constant is small (the point of the method), so its 6th-order terms dominate until
        # h ~ 0.1: measured in the asymptotic range (the last error ~7e-13 is still far above rounding).
        (lambda dt: _fixed_steps(Tsit5, dt), 5, [0.1, 0.05, 0.025]),
    ],
)
def test_convergence_order_against_expm(make, order, hs):
    errors = []
    for dt in hs:
        tr = integrate(linear_rhs, Y0, (0.0, 2.0), params=A_LIN.ravel(), solver=make(dt), saveat=SaveAt(final=True))
        errors.append(np.linalg.norm(tr.states()[0, -1] - _exact(2.0)))
    # The fitted slope of log error against log h equals the order up to higher-order terms; 0.3 covers them at
    # these step sizes, while a wrong coefficient lowers the order by >= 1.
    assert abs(_slope(hs, errors) - order) < 0.3, errors


@pytest.mark.parametrize("solver_cls", [Dopri5, Tsit5])
def test_dense_output_is_exact_for_cubic_quadrature(solver_cls):
    # Both continuous extensions have order 4, so they integrate y' = q(t) exactly for polynomials q of degree
    # <= 3 (the quadrature order conditions sum_s b_s(theta) c_s^(q-1) = theta^q / q, q <= 4). One step of h = 1
    # with saves inside it: the error is pure rounding (~1e-16 per term, |y| <= 3.75); 1e-13 allows for it, while
    # any dense coefficient off by 1e-12 or more (e.g. two swapped digits, ~1e-8) fails.
    ts = np.array([0.0, 0.1, 0.25, 0.5, 0.73, 0.9, 1.0])
    tr = integrate(
        cubic_quadrature, [0.0], (0.0, 1.0), params=[0.0], solver=_fixed_steps(solver_cls, 1.0), saveat=SaveAt(ts=ts)
    )
    exact = ((1 + ts) ** 4 - 1) / 4
    np.testing.assert_allclose(tr.states()[0, :, 0], exact, rtol=0, atol=1e-13)
    assert tr.n_rhs_steps.values[0, -1] == 1


@pytest.mark.parametrize("solver_cls", [Dopri5, Tsit5])
def test_dense_output_converges_at_order_five_between_steps(solver_cls):
    # Saves at 0.37 h past each step start, on the linear flow. The error is the global error of the step values,
    # O(h^5), plus the local interpolation error of an order-4 extension, O(h^5): slope 5 (0.4 as above; an
    # interpolant of order 3 would give 4).
    errors = []
    hs = [0.2, 0.1, 0.05]
    for h in hs:
        ts = np.arange(0.0, 2.0 - h, h) + 0.37 * h
        tr = integrate(
            linear_rhs, Y0, (0.0, 2.0), params=A_LIN.ravel(), solver=_fixed_steps(solver_cls, h), saveat=SaveAt(ts=ts)
        )
        ref = np.array([_exact(t) for t in ts])
        errors.append(np.abs(tr.states()[0] - ref).max())
    assert abs(_slope(hs, errors) - 5) < 0.4, errors


def test_adaptive_solvers_match_scipy_and_many_saves_do_not_shrink_steps():
    ts = np.linspace(0.0, 5.0, 2001)
    ref = forced_reference(5.0, ts)
    for solver in (Dopri5(rtol=1e-10, atol=1e-12), Tsit5(rtol=1e-10, atol=1e-12)):
        dense = integrate(forced, [1.0, 0.0], (0.0, 5.0), params=[0.7], solver=solver, saveat=SaveAt(ts=ts))
        final = integrate(forced, [1.0, 0.0], (0.0, 5.0), params=[0.7], solver=solver, saveat=SaveAt(final=True))
        # the step sequence does not depend on the saves: same number of steps, same end state bit for bit
        assert dense.n_rhs_steps.values[0, -1] == final.n_rhs_steps.values[0, -1]
        assert np.array_equal(dense.states()[0, -1], final.states()[0, -1])
        # Tolerance: at rtol 1e-10 the global error of both 5(4) pairs on this O(1) smooth system is ~1e-9 and
        # the interpolation error of the same order; 2e-8 leaves a factor ~10 (a wrong dense coefficient at the
        # 1e-8 level is caught exactly by the quadrature test above).
        np.testing.assert_allclose(dense.states()[0], ref, rtol=0, atol=2e-8)


def test_fixed_step_off_grid_save_is_truly_off_grid():
    dt, s = 1e-3, 0.3704
    # In exact arithmetic on the float64 values, s / dt is not an integer: the save is 0.4 of a step past grid 370.
    r = Fraction(s) / Fraction(dt)
    assert r.denominator != 1 and abs(float(r) - 370.4) < 1e-9
    ts = np.array([0.0, s, 1.0])
    tr = integrate(forced, [1.0, 0.0], (0.0, 1.0), params=[0.7], solver=RK4(dt=dt), saveat=SaveAt(ts=ts))
    ref = forced_reference(1.0, ts)
    # RK4 global error C dt^4 ~ 1e-12 (C = O(1) here); the partial step of 0.4 dt adds a local error O(dt^5).
    # A partial step taken with a full dt (error ~0.6 dt |f| ~ 3e-4) or with the wrong stage time (error
    # ~h^2 |f_t| ~ 5e-7) fails by orders of magnitude.
    np.testing.assert_allclose(tr.states()[0], ref, rtol=0, atol=1e-10)
    assert list(tr.step.values) == [0, 371, 1000]  # the off-grid save is reached during step 371


def test_saves_every_step_equal_a_python_loop_of_single_steps():
    x0 = np.array([[0.3], [0.9]])
    full = iterate(halving, x0, 40, params=[0.75], saveat=SaveAt(every=1))
    x = x0[:, 0].copy()
    for k in range(41):
        assert np.array_equal(full.states()[:, k, 0], x)
        x = 0.75 * x
    tr = integrate(linear_rhs, Y0, (0.0, 1.0), params=A_LIN.ravel(), solver=RK4(dt=0.1), saveat=SaveAt(every=1))
    y = Y0.copy()
    for k in range(11):  # one RK4 step of the linear flow at a time, in numpy
        assert np.allclose(tr.states()[0, k], y, rtol=1e-14, atol=0)
        k1 = A_LIN @ y
        k2 = A_LIN @ (y + 0.05 * k1)
        k3 = A_LIN @ (y + 0.05 * k2)
        k4 = A_LIN @ (y + 0.1 * k3)
        y = y + 0.1 * (k1 / 6 + k2 / 3 + k3 / 3 + k4 / 6)


def test_converged_trajectories_freeze_and_record_the_step():
    x0 = np.array([[1.0], [2.0**-20]])
    tr = iterate(halving, x0, 100, params=[0.5], saveat=SaveAt(every=1), names=["x"], converged=1e-6)
    # |x_{k+1} - x_k| = 2^-(k+1) x0: below 1e-6 first at k + 1 = 20 for x0 = 1 (2^-20 < 1e-6 < 2^-19), and at the
    # first step for x0 = 2^-20
    assert list(tr.stopped_at.values) == [20, 1]
    assert np.all(tr.x.values[0, 20:] == 2.0**-20) and tr.x.values[0, 19] == 2.0**-19
    assert np.all(tr.x.values[1, 1:] == 2.0**-21)
    assert tr.step.values[-1] == 100  # the time axis is complete
    flow = integrate(
        linear_rhs, Y0, (0.0, 200.0), params=A_LIN.ravel(), solver=Dopri5(), converged=1e-9, saveat=SaveAt(final=True)
    )
    # |y(t)| ~ e^(-0.3 t): the rate drops below 1e-9 near t = ln(1e9) / 0.3 ~ 69
    assert 50 < float(flow.stopped_at.values[0]) < 90


def test_subnormal_flush_changes_nothing_above_the_normal_range():
    x0 = np.array([[1e-290], [3.0]])
    a = iterate(halving, x0, 120, params=[0.25], saveat=SaveAt(every=1))
    b = iterate(halving, x0, 120, params=[0.25], saveat=SaveAt(every=1), flush_subnormals=False)
    ya, yb = a.states(), b.states()
    normal = np.abs(yb) >= _steppers.TINY
    assert np.array_equal(ya[normal], yb[normal])  # bit for bit wherever the unflushed run is normal
    assert np.all(ya[~normal] == 0.0) and np.any((yb[~normal] != 0.0))  # subnormals became zeros


def test_divergence_error_carries_the_run_up_to_the_last_finite_save():
    x0 = np.array([[0.5], [10.0]])  # 10^(2^k) overflows at step 9
    with pytest.raises(DivergenceError) as info:
        iterate(squaring, x0, 20, params=[0.0], saveat=SaveAt(every=1), names=["x"])
    part = info.value.partial
    assert list(part.step.values) == list(range(9))
    np.testing.assert_allclose(part.x.values[1], 10.0 ** (2.0 ** np.arange(9)), rtol=1e-15)  # 8 roundings
    with pytest.raises(DivergenceError) as info:
        integrate(
            lambda_free_blowup, [[0.5]], (0.0, 3.0), params=[0.0], solver=RK4(dt=1e-3), saveat=SaveAt(n=31), names=["y"]
        )
    part = info.value.partial
    # y = 1 / (2 - t) blows up at t = 2 (RK4 a few steps later): the saves up to there are kept and finite, and
    # away from the singularity equal the exact solution (RK4 error C dt^4 y^5 ~ 1e-11 at t <= 1.5)
    t = part.time.values
    assert 1.9 <= t[-1] <= 2.1 and np.all(np.isfinite(part.y.values))
    np.testing.assert_allclose(part.y.values[0, t <= 1.5], 1 / (2 - t[t <= 1.5]), rtol=1e-9)


@njit(cache=True)
def lambda_free_blowup(t, y, p, dy):
    dy[0] = y[0] * y[0]


def test_params_broadcast_with_the_batch():
    rates = np.array([[0.5], [0.25], [0.75]])
    tr = iterate(halving, np.array([1.0]), 3, params=rates, saveat=SaveAt(final=True))
    np.testing.assert_array_equal(tr.states()[:, -1, 0], rates[:, 0] ** 3)
    with pytest.raises(ValueError, match=r"params.*\(3, 1\)"):
        iterate(halving, np.ones((2, 1)), 3, params=rates)


def _plain_python_step(k, x, p, out):
    out[0] = x[0]


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: iterate(halving, [1.0], 3, params=[0.5], bound=0), ValueError, "bound"),
        (lambda: iterate(halving, [1.0], 3, params=[0.5], bound=np.nan), ValueError, "bound"),
        (lambda: integrate(linear_rhs, Y0, (0, 1), params=A_LIN.ravel(), bound=-1.0), ValueError, "bound"),
        (lambda: iterate(halving, [1.0], 3, params=[0.5], saveat="n=5"), TypeError, "saveat"),
        (lambda: iterate(_plain_python_step, [1.0], 3, params=[0.5]), TypeError, "step must be a numba"),
        (lambda: integrate(_plain_python_step, Y0, (0, 1), params=[0.5]), TypeError, "rhs must be a numba"),
        (lambda: Dopri5(dt_max=None), ValueError, "dt_max"),
        (lambda: Tsit5(rtol=-1.0), ValueError, "rtol"),
        (lambda: iterate(halving, [1.0], 3, params=[0.5], converged=0.0), ValueError, "converged"),
        (lambda: iterate(halving, [1.0 + 1j], 3, params=[0.5]), ValueError, "state0"),
    ],
)
def test_bad_engine_arguments_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
