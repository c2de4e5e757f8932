"""Map kernel of the engine: interleaved trajectory pairs with per-block checks, and the convergence diagnostics
(``final_step_norm``, ``converged``, ``warn_unconverged``) of every iterate/integrate result.

References are independent of the engine: closed forms of linear maps and flows, numpy one-trajectory loops, and
one-at-a-time engine runs (which never pair trajectories).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from numba import njit

from dynamics import RK4, DivergenceError, Dopri5, Euler, SaveAt, integrate, iterate
from dynamics._kernels import PAIR_BLOCK


@njit(cache=True)
def _scale(k, x, p, out):
    """x_{k+1} = c x_k + shift (c = p[0], shift = p[1]), with a second component counting steps."""
    out[0] = p[0] * x[0] + p[1]
    out[1] = x[1] + 1.0


@njit(cache=True)
def _affine(k, x, p, out):
    out[0] = p[0] * x[0] + p[1]


@njit(cache=True)
def _logistic(k, x, p, out):
    out[0] = p[0] * x[0] * (1.0 - x[0])


@njit(cache=True)
def _decay(t, y, p, dy):
    dy[0] = -p[0] * y[0]


@njit(cache=True)
def _henon(k, x, p, out):
    out[0] = 1.0 - p[0] * x[0] * x[0] + x[1]
    out[1] = p[1] * x[0]


def _numpy_henon(x0, a, b, n):
    x, y = float(x0[0]), float(x0[1])
    out = [(x, y)]
    for _ in range(n):
        x, y = 1.0 - a * x * x + y, b * x
        out.append((x, y))
    return np.array(out)


def test_pairs_equal_one_at_a_time_runs_and_numpy_across_blocks():
    # 7 trajectories (three pairs and a single), per-trajectory parameters, saves at irregular steps across several
    # blocks: every saved value must equal the one-at-a-time run and a plain numpy loop, bit for bit
    rng = np.random.default_rng(3)
    x0 = rng.uniform(-0.1, 0.1, (7, 2))
    P = np.column_stack([rng.uniform(1.2, 1.4, 7), rng.uniform(0.2, 0.3, 7)])
    n = 2 * PAIR_BLOCK + 37
    steps = np.array([0, 1, 5, PAIR_BLOCK - 1, PAIR_BLOCK, PAIR_BLOCK + 3, n - 1, n])
    batched = iterate(_henon, x0, n, params=P, saveat=SaveAt(steps=steps)).states()
    for i in range(7):
        one = iterate(_henon, x0[i], n, params=P[i], saveat=SaveAt(steps=steps)).states()[0]
        assert np.array_equal(batched[i], one)
        assert np.array_equal(batched[i], _numpy_henon(x0[i], P[i, 0], P[i, 1], n)[steps])


@pytest.mark.parametrize("n_traj, bad", [(2, 1), (2, 0), (5, 3), (5, 4)])
def test_divergence_inside_a_block_is_reported_at_the_exact_step(n_traj, bad):
    # x_k = c^k with c = 2 for one trajectory and 1.001 for the others; with bound B the first step beyond B is
    # k* = floor(log2 B) + 1 (powers of two are exact), in the middle of the first block
    B = 2.0**300 + 1.0
    P = np.tile([1.001, 0.0], (n_traj, 1))
    P[bad, 0] = 2.0
    x0 = np.tile([1.0, 0.0], (n_traj, 1))
    with pytest.raises(DivergenceError) as info:
        iterate(_scale, x0, 3 * PAIR_BLOCK, params=P, saveat=SaveAt(every=100), bound=B)
    err = info.value
    assert (err.trajectory, err.step, err.variable) == (bad, 301, "y0")
    assert err.partial.sizes["time"] == 4  # saves at steps 0, 100, 200, 300 were written by every trajectory
    assert np.array_equal(err.partial.y0.values[bad], 2.0 ** np.array([0.0, 100.0, 200.0, 300.0]))


def test_nan_in_second_lane_names_step_and_variable():
    # x_{k+1} = c x_k with c = inf for trajectory 1: its first step gives inf (step 1, variable y0)
    P = np.array([[0.5, 0.0], [math.inf, 0.0], [0.5, 0.0]])
    with pytest.raises(ValueError, match="params must be finite"):
        iterate(_scale, np.ones((3, 2)), 10, params=P)
    P[1, 0] = 1e200  # 1e200 * 1e200 overflows to inf at step 2
    with pytest.raises(DivergenceError) as info:
        iterate(_scale, np.full((3, 2), 1e200), 10, params=P, saveat=SaveAt(final=True))
    assert (info.value.trajectory, info.value.step, info.value.variable) == (1, 1, "y0")


def test_converged_stop_in_pairs_matches_the_closed_form():
    # x_k = t + (x0 - t) c^k: the step into k has size |x0 - t| (1 - c) c^(k-1), so the stop step is the first k
    # with that below tol (evaluated here in exact-enough float arithmetic; the margins are far from ties)
    c, t, tol = 0.5, 0.25, 1e-9
    x0 = np.array([[1.0], [2.0], [3.0], [0.5], [4.0]])
    run = iterate(_affine, x0, 200, params=[c, t * (1 - c)], saveat=SaveAt(steps=[0, 10, 200]), converged=tol)
    size = np.abs(x0[:, 0] - t) * (1 - c)
    expected = np.array([next(k for k in range(1, 200) if s * c ** (k - 1) < tol) for s in size])
    assert np.array_equal(run.stopped_at.values, expected)
    frozen = t + (x0[:, 0] - t) * c**expected  # the state at the stop step, carried to the last save
    assert np.allclose(run.y0.values[:, -1], frozen, rtol=0, atol=1e-15)  # float round-off of x_k near t = 0.25
    assert run.converged.values.all()
    assert np.all(run.final_step_norm.values < tol)


def test_final_step_norm_is_the_last_update_of_a_converging_and_a_cycling_map():
    x0 = np.linspace(0.1, 0.9, 9)[:, None]
    n = 3000
    for r, converges in ((2.5, True), (3.9, False)):  # fixed point 0.6 attracts at r = 2.5; chaos at r = 3.9
        run = iterate(_logistic, x0, n, params=[r], saveat=SaveAt(steps=[n - 1, n]))
        last_step = np.abs(run.y0.values[:, 1] - run.y0.values[:, 0])
        assert np.array_equal(run.final_step_norm.values, last_step)
        assert run.converged.dtype == bool and run.converged.dims == ("trajectory",)
        assert run.converged.values.all() == converges and run.converged.values.any() == converges
    # a period-2 cycle (r = 3.2) never converges either: its last step is the cycle's width
    cyc = iterate(_logistic, x0[:3], n, params=[3.2], saveat=SaveAt(final=True))
    width = math.sqrt((3.2 + 1) * (3.2 - 3)) / 3.2  # |x+ - x-| of the 2-cycle of the logistic map
    assert np.allclose(cyc.final_step_norm.values, width, rtol=1e-12)  # float round-off of the cycle points


def test_warn_unconverged_counts_trajectories_and_tolerance_is_settable():
    x0 = np.linspace(0.1, 0.9, 4)[:, None]
    P = np.array([[2.5], [3.9], [2.5], [3.9]])
    with pytest.warns(RuntimeWarning, match="2 of 4 trajectories ended unconverged"):
        iterate(_logistic, x0, 500, params=P, saveat=SaveAt(final=True), warn_unconverged=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = iterate(_logistic, x0, 500, params=P, saveat=SaveAt(final=True))  # opt-in only
    loose = iterate(_logistic, x0, 500, params=P, saveat=SaveAt(final=True), convergence_tol=10.0)
    assert loose.converged.values.all() and not quiet.converged.values.all()
    empty = iterate(_logistic, x0, 0, params=P)
    assert np.isnan(empty.final_step_norm.values).all() and not empty.converged.values.any()
    with pytest.raises(ValueError, match="convergence_tol"):
        iterate(_logistic, x0, 5, params=P, convergence_tol=-1.0)


def _decay_amplification(solver, a, T):
    """y(T)/y(0) of the solver on dy/dt = -a y: (1 + z)^N for Euler and the 4th-order Taylor polynomial of e^z to the
    N for RK4 (z = -a dt, N = T/dt; linear ODE, exact for the discrete method), e^{-a T} for the adaptive solver."""
    if isinstance(solver, Dopri5):
        return math.exp(-a * T)
    z, n = -a * solver.dt, round(T / solver.dt)
    step = 1.0 + z if isinstance(solver, Euler) else 1.0 + z + z * z / 2 + z**3 / 6 + z**4 / 24
    return step**n


# rtol: the fixed-step references are the discrete methods themselves, so only float round-off over 500 steps
# (~500 ulp ~ 1e-13) separates them; Dopri5 at rtol 1e-12 keeps the global error of this decay below ~1e-10
@pytest.mark.parametrize(
    "solver, rtol", [(Euler(dt=0.01), 1e-12), (RK4(dt=0.01), 1e-12), (Dopri5(rtol=1e-12, atol=1e-14), 1e-9)]
)
def test_flow_final_step_norm_is_the_vector_field_at_the_end(solver, rtol):
    # dy/dt = -a y: |f(y(T))| = a |y(T)|
    a, T = 2.0, 5.0
    y0 = np.array([[1.0], [-3.0], [0.5]])
    run = integrate(_decay, y0, (0.0, T), params=[a], solver=solver, saveat=SaveAt(final=True))
    exact = a * np.abs(y0[:, 0]) * _decay_amplification(solver, a, T)
    assert np.allclose(run.final_step_norm.values, exact, rtol=rtol, atol=0)
    assert np.array_equal(run.final_step_norm.values, a * np.abs(run.y0.values[:, -1]))  # f at the saved end
    assert run.converged.values.all() == bool(np.all(exact < 1e-8))
    with pytest.warns(RuntimeWarning, match="3 of 3 trajectories ended unconverged"):
        integrate(_decay, y0, (0.0, 1.0), params=[a], solver=solver, saveat=SaveAt(final=True), warn_unconverged=True)


def test_step_norm_trend_tells_still_converging_from_cycles_and_chaos():
    # x -> c x: with c = 0.95 a monotone approach, with c = -0.95 an oscillating one; after 200 steps the step is
    # ~1e-5 (unconverged at 1e-8) and shrinks by 0.95 per step: both still converging (trend -1)
    x0 = np.array([[0.15], [0.3], [0.7], [0.85]])
    for c in (0.95, -0.95):
        run = iterate(_affine, x0, 200, params=[c, 0.0], saveat=SaveAt(final=True))
        assert not run.converged.values.any()
        assert run.step_norm_trend.dtype == np.int8 and run.step_norm_trend.dims == ("trajectory",)
        assert np.all(run.step_norm_trend.values == -1), (c, run.step_norm_trend.values)
    # logistic map: r = 3.2 has an attracting 2-cycle (the step norm is the cycle's constant width, the state gets
    # nowhere) and r = 3.9 is chaotic (the step norm wanders, the state stays in [0, 1]): both trend +1
    for r in (3.2, 3.9):
        run = iterate(_logistic, x0, 3000, params=[r], saveat=SaveAt(final=True))
        assert not run.converged.values.any()
        assert np.all(run.step_norm_trend.values == 1), (r, run.step_norm_trend.values)
    short = iterate(_logistic, x0, 100, params=[3.9], saveat=SaveAt(final=True))  # below MIN_STEPS: unknown
    assert np.all(short.step_norm_trend.values == 0)
    # x -> x + c: steps of constant size c and a steady drift (trend 2, not a cycle)
    drift = iterate(_affine, x0, 400, params=[1.0, 1e-3], saveat=SaveAt(final=True))
    assert np.all(drift.step_norm_trend.values == 2)
    # the samples are taken by cutting the compiled loop into chunks: the saved states are unchanged bit for bit
    one = iterate(_logistic, x0, 3000, params=[3.9], saveat=SaveAt(every=7), progress=True)
    two = iterate(_logistic, x0, 3000, params=[3.9], saveat=SaveAt(every=7))
    assert np.array_equal(one.states(), two.states())


@pytest.mark.parametrize("solver", [RK4(dt=0.01), Dopri5(rtol=1e-10, atol=1e-12)])
def test_step_norm_trend_of_flows(solver):
    # dy/dt = -a y: |f| = a |y| decays like e^{-a t} (trend -1); dy/dt = +a y grows steadily (drifting, 2)
    y0 = np.array([[1.0], [-2.0]])
    for a, trend in ((2.0, -1), (-0.5, 2)):
        run = integrate(_decay, y0, (0.0, 4.0), params=[a], solver=solver, saveat=SaveAt(n=3))
        assert np.all(run.step_norm_trend.values == trend)
        assert run.time.size == 3  # the adaptive solver's probe saves are not returned
    # adaptive: probe saves are served by dense output and leave the user's saves bit for bit as without them
    # (a save grid that already holds every probe time gives the reference)
    probe_grid = SaveAt(ts=np.linspace(0.0, 4.0, 9))
    ref = integrate(_decay, y0, (0.0, 4.0), params=[2.0], solver=solver, saveat=probe_grid)
    run = integrate(_decay, y0, (0.0, 4.0), params=[2.0], solver=solver, saveat=SaveAt(ts=[0.0, 1.3, 4.0]))
    sub = integrate(
        _decay,
        y0,
        (0.0, 4.0),
        params=[2.0],
        solver=solver,
        saveat=SaveAt(ts=np.union1d(np.linspace(0.0, 4.0, 9), [1.3])),
    )
    assert np.array_equal(run.states(), sub.states()[:, np.isin(sub.time.values, [0.0, 1.3, 4.0])])
    assert np.array_equal(ref.final_step_norm.values, run.final_step_norm.values)


def test_trend_off_leaves_the_run_unchanged_and_the_trend_unknown():
    x0 = np.array([[0.15], [0.3]])
    on = iterate(_logistic, x0, 3000, params=[3.9], saveat=SaveAt(every=100))
    off = iterate(_logistic, x0, 3000, params=[3.9], saveat=SaveAt(every=100), trend=False)
    assert np.array_equal(on.states(), off.states())
    assert np.array_equal(on.final_step_norm.values, off.final_step_norm.values)
    assert np.all(on.step_norm_trend.values == 1) and np.all(off.step_norm_trend.values == 0)
    for solver in (RK4(dt=0.01), Dopri5()):
        flow = integrate(_decay, x0, (0.0, 4.0), params=[2.0], solver=solver, saveat=SaveAt(n=5), trend=False)
        assert np.all(flow.step_norm_trend.values == 0)
