"""The engine's fixed costs: the Dataset built directly equals xarray's public construction; no progress bar is
built when progress is off."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import xarray as xr

from dynamics import trajectory as T
from dynamics.trajectory import Trajectory


def _cases():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(3, 4, 5))
    per = {
        "final_step_norm": rng.random(3),
        "converged": np.array([True, False, True]),
        "step_norm_trend": np.array([0, -1, 1], dtype=np.int8),
    }
    yield dict(
        Y=Y,
        names=[f"y{j}" for j in range(5)],
        time=np.linspace(0, 1, 4),
        step=np.arange(4),
        variables={"risk": Y[:, :, 0] ** 2, "matrix": rng.normal(size=(3, 4, 2, 2))},
        per_trajectory=per,
    )
    yield dict(
        Y=Y,
        names="state",
        time=np.arange(4.0),
        trajectory=np.array(["a", "b", "c"]),
        attrs={"model": "m", "spec": {"d": 3}},
    )
    yield dict(Y=Y[:1, :1], names=[f"y{j}" for j in range(5)], time=np.zeros(1))


@pytest.mark.parametrize("case", list(_cases()))
def test_direct_dataset_is_identical_to_the_public_construction(case, monkeypatch):
    fast = Trajectory.from_arrays(**case)
    monkeypatch.setattr(T, "_direct_dataset", T._public_dataset)
    slow = Trajectory.from_arrays(**case)
    slow.attrs["created_utc"] = fast.attrs["created_utc"]
    xr.testing.assert_identical(fast, slow)
    assert type(fast) is type(slow) is Trajectory
    assert {k: type(v) for k, v in fast.xindexes.items()} == {k: type(v) for k, v in slow.xindexes.items()}
    assert dict(fast.sizes) == dict(slow.sizes)
    # the indexes work: selection by time and by trajectory label
    t = float(case["time"][-1])
    xr.testing.assert_identical(fast.sel(time=t), slow.sel(time=t))


def test_direct_dataset_rejects_inconsistent_sizes_like_the_public_one():
    data = {"a": (("trajectory", "time"), np.zeros((2, 3))), "b": (("trajectory", "time"), np.zeros((2, 4)))}
    coords = {"time": ("time", np.arange(3.0))}
    with pytest.raises(ValueError):
        T._direct_dataset(Trajectory, data, coords, {})


def test_no_progress_bar_without_progress(monkeypatch):
    from numba import njit  # noqa: F401  (the engine needs numba anyway)

    import dynamics

    integ = sys.modules["dynamics.integrate"]

    assert isinstance(integ._bar(False, 10, "x", "step"), integ._NoBar)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # importing tqdm would now fail
    tests_step = _step()
    tr = dynamics.iterate(tests_step, [0.5], 3, params=[0.5], saveat=dynamics.SaveAt(final=True))
    assert tr.states()[0, -1, 0] == 0.5**4


def _step():
    from numba import njit

    @njit
    def halve(k, x, p, out):
        out[0] = p[0] * x[0]

    return halve


# ----------------------------------------------------------------------------------------------------------------
# step-norm samples of step_norm_trend, taken inside the compiled loop, against a brute-force numpy run

from numba import njit  # noqa: E402

from dynamics import convergence  # noqa: E402


@njit(cache=True, fastmath=False)
def henon(k, x, p, out):
    out[0] = 1.0 - p[0] * x[0] * x[0] + x[1]
    out[1] = p[1] * x[0]


def _brute_samples(x0, P, n_steps, tol):
    """Per-trajectory step norms of every step by a numpy loop (the same float operations), frozen at the first
    step smaller than ``tol``; then the engine's sample definition: block maxima over tail_blocks, and the state
    at the first block's end."""
    x = x0.copy()
    norms = np.full((x0.shape[0], n_steps + 1), np.nan)
    states = [x.copy()]
    running = np.ones(x0.shape[0], dtype=bool)
    for k in range(1, n_steps + 1):
        new = np.stack([1.0 - P[:, 0] * x[:, 0] * x[:, 0] + x[:, 1], P[:, 1] * x[:, 0]], axis=1)
        moved = np.max(np.abs(new - x), axis=1)
        norms[:, k] = np.where(running, moved, norms[:, k - 1])
        x = np.where(running[:, None], new, x)
        running &= ~(moved < tol)
        states.append(x.copy())
    blocks = convergence.tail_blocks(0, n_steps)
    return [norms[:, blk].max(axis=1) for blk in blocks], [int(b[-1]) for b in blocks], states[blocks[0][-1]]


@pytest.mark.parametrize("tol", [None, 1e-9])
@pytest.mark.parametrize("n_traj", [1, 4, 5])
def test_in_loop_step_norm_samples_equal_brute_force(monkeypatch, tol, n_traj):
    import dynamics

    integ = sys.modules["dynamics.integrate"]
    rng = np.random.default_rng(n_traj)
    x0 = rng.uniform(-0.1, 0.1, size=(n_traj, 2))
    P = np.column_stack([np.where(np.arange(n_traj) % 2, 1.4, 0.2), np.full(n_traj, 0.3)])  # chaotic / converging
    captured = {}
    real = integ._diagnostics

    def spy(norm, tol_, warn, kind, samples=(), points=None, displacement=None):
        captured.update(samples=samples, points=points, displacement=displacement)
        return real(norm, tol_, warn, kind, samples, points, displacement)

    monkeypatch.setattr(integ, "_diagnostics", spy)
    n_steps = 700  # > PAIR_BLOCK, so pair blocks, save cuts and tail cuts all occur
    tr = dynamics.iterate(henon, x0, n_steps, params=P, saveat=dynamics.SaveAt(n=7), converged=tol)
    samples, points, x_mid = _brute_samples(x0, P, n_steps, -1.0 if tol is None else tol)
    assert captured["points"] == points
    assert len(captured["samples"]) == len(samples) == 9
    for got, want in zip(captured["samples"], samples):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(captured["displacement"], np.max(np.abs(tr.states()[:, -1] - x_mid), axis=1))
    if tol is not None:
        assert (tr.stopped_at.values[::2] > 0).all()  # the converging ones stopped (the frozen path was taken)


def test_in_loop_samples_with_a_python_stop_condition(monkeypatch):
    # a stop condition at the save points cuts the loop there; every trajectory stops at step 400, so the blocks
    # after it are not sampled and the block around it only up to step 400 (as if the run had ended there)
    import dynamics

    integ = sys.modules["dynamics.integrate"]
    x0 = np.array([[0.05, 0.0], [0.01, 0.02], [-0.03, 0.01]])
    P = np.array([[1.4, 0.3], [0.2, 0.3], [1.4, 0.3]])
    captured = {}
    real = integ._diagnostics

    def spy(norm, tol_, warn, kind, samples=(), points=None, displacement=None):
        captured.update(samples=samples, points=points)
        return real(norm, tol_, warn, kind, samples, points, displacement)

    monkeypatch.setattr(integ, "_diagnostics", spy)
    full = dynamics.iterate(henon, x0, 400, params=P, saveat=dynamics.SaveAt(steps=[0, 250, 400]))

    def stop(k, X, P_):
        return np.full(X.shape[0], k >= 400)

    tr = dynamics.iterate(henon, x0, 700, params=P, saveat=dynamics.SaveAt(steps=[0, 250, 400, 430, 700]), stop=stop)
    assert tr.step.values[-1] == 400
    np.testing.assert_array_equal(tr.states(), full.states())
    x, norms = x0.copy(), [np.full(3, np.nan)]
    for _ in range(400):
        new = np.stack([1.0 - P[:, 0] * x[:, 0] * x[:, 0] + x[:, 1], P[:, 1] * x[:, 0]], axis=1)
        norms.append(np.max(np.abs(new - x), axis=1))
        x = new
    norms = np.stack(norms, axis=1)
    want = [
        (norms[:, blk[0] : min(blk[-1], 400) + 1].max(axis=1), int(blk[-1]))
        for blk in convergence.tail_blocks(0, 700)
        if blk[0] <= 400
    ]
    assert 0 < len(want) < 9 and captured["points"] == [p for _, p in want]
    for got, (ref, _) in zip(captured["samples"], want):
        np.testing.assert_array_equal(got, ref)


# ----------------------------------------------------------------------------------------------------------------
# flows: the |f| samples of step_norm_trend are taken inside the compiled loop (the run is not cut)


@njit(cache=True, fastmath=False)
def damped(t, y, p, dy):
    dy[0] = y[1]
    dy[1] = -p[0] * y[0] - p[1] * y[1]


def _spy(monkeypatch):
    integ = sys.modules["dynamics.integrate"]
    captured = {}
    real = integ._diagnostics

    def spy(norm, tol_, warn, kind, samples=(), points=None, displacement=None):
        captured.update(samples=list(samples), points=list(points), displacement=displacement)
        return real(norm, tol_, warn, kind, samples, points, displacement)

    monkeypatch.setattr(integ, "_diagnostics", spy)
    return captured


def _rk4_brute(y0, P, dt, n_steps, tol):
    """A numpy RK4 loop on the grid (the kernel's stage formulas, in the same order), each trajectory frozen at
    the first step with max|y_new - y| < tol dt; returns |f| at every grid point and every grid state."""

    def f(y):
        return np.stack([y[:, 1], -P[:, 0] * y[:, 0] - P[:, 1] * y[:, 1]], axis=1)

    y = y0.copy()
    running = np.ones(y0.shape[0], dtype=bool)
    states, norms = [y.copy()], [np.max(np.abs(f(y)), axis=1)]
    for _ in range(n_steps):
        k0 = f(y)
        k1 = f(y + dt * (0.5 * k0))
        k2 = f(y + dt * (0.5 * k1))
        k3 = f(y + dt * (1.0 * k2))
        new = y + dt * (1 / 6 * k0 + 1 / 3 * k1 + 1 / 3 * k2 + 1 / 6 * k3)
        moved = np.max(np.abs(new - y), axis=1)
        y = np.where(running[:, None], new, y)
        running &= ~(moved < tol * dt)
        states.append(y.copy())
        norms.append(np.max(np.abs(f(y)), axis=1))
    return np.stack(norms, axis=1), states


@pytest.mark.parametrize("tol", [None, 1e-6])
def test_fixed_step_flow_samples_equal_brute_force(monkeypatch, tol):
    import dynamics

    captured = _spy(monkeypatch)
    x0 = np.array([[1.0, 0.0], [0.5, -0.2], [0.0, 1.0]])
    P = np.array([[4.0, 2.0], [4.0, 0.5], [1.0, 3.0]])  # damped at different rates: some freeze with tol
    dt, n = 0.05, 300
    tr = dynamics.integrate(
        damped, x0, (0.0, n * dt), params=P, solver=dynamics.RK4(dt=dt), saveat=dynamics.SaveAt(n=5), converged=tol
    )
    norms, states = _rk4_brute(x0, P, dt, n, -1.0 if tol is None else tol)
    points = np.concatenate(convergence.tail_blocks(0, n, 1))
    assert len(captured["samples"]) == points.size == 9
    np.testing.assert_allclose(captured["points"], points * dt, rtol=0, atol=0)
    # the same float operations in the same order; 1e-14 relative allows only an FMA contraction's rounding
    for got, k in zip(captured["samples"], points):
        np.testing.assert_allclose(got, norms[:, k], rtol=1e-14, atol=0)
    want = np.max(np.abs(tr.states()[:, -1] - states[points[0]]), axis=1)
    np.testing.assert_allclose(captured["displacement"], want, rtol=1e-14, atol=1e-300)
    if tol is not None:
        assert (tr.stopped_at.values > 0).any()  # the frozen path was taken


@njit(cache=True, fastmath=False)
def decay(t, y, p, dy):
    dy[0] = -y[0]


def test_adaptive_flow_samples_just_past_each_probe(monkeypatch):
    # dy/dt = -y: |f| = |y| = y0 exp(-t) falls monotonically, so the sample at the solver's state just past probe
    # time t_b (at most one step, <= dt_max, later) lies in [y0 exp(-t_b - dt_max), y0 exp(-t_b)]; the slack 1e-8
    # covers the solver's local error at rtol 1e-10 (a sample taken at another time falls outside by far more)
    import dynamics

    captured = _spy(monkeypatch)
    dt_max, t1 = 0.05, 10.0
    solver = dynamics.Dopri5(rtol=1e-10, atol=1e-14, dt_max=dt_max)
    x0 = np.array([[1.0], [2.0]])
    tr = dynamics.integrate(decay, x0, (0.0, t1), params=[0.0], solver=solver, saveat=dynamics.SaveAt(n=3))
    t_b = np.asarray(captured["points"])
    np.testing.assert_allclose(t_b, convergence.tail_points(0.0, t1, integer=False), rtol=0, atol=0)
    for got, t in zip(captured["samples"], t_b):
        assert np.all(got <= x0[:, 0] * np.exp(-t) * (1 + 1e-8))
        assert np.all(got >= x0[:, 0] * np.exp(-t - dt_max) * (1 - 1e-8))
    # the same samples when the run is cut at every save (a stop condition that never fires) or by a progress bar
    ref = [s.copy() for s in captured["samples"]]
    for extra in ({"stop": lambda t, X, P: np.zeros(X.shape[0], dtype=bool)}, {"progress": True}):
        again = dynamics.integrate(
            decay, x0, (0.0, t1), params=[0.0], solver=solver, saveat=dynamics.SaveAt(n=3), **extra
        )
        for got, want in zip(captured["samples"], ref):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(again.step_norm_trend.values, tr.step_norm_trend.values)
    assert (tr.step_norm_trend.values == -1).all()  # still converging (exponential decay)


# ----------------------------------------------------------------------------------------------------------------
# the package imports what a run needs; compare, overlay, sweep and fixed_points on first use


def test_package_imports_the_rest_on_first_use():
    import subprocess

    code = (
        "import sys, dynamics\n"
        "lazy = ['dynamics.compare', 'dynamics.overlay', 'dynamics.sweep', 'dynamics.fixed_points', 'scipy.stats']\n"
        "print([m for m in lazy if m in sys.modules])\n"
        "from dynamics.compare import t_quantile\n"  # binds the submodule to the package attribute ...
        "from dynamics.overlay import overlay\n"
        "import dynamics.fixed_points\n"
        "print(dynamics.compare.__module__, dynamics.overlay is overlay, dynamics.fixed_points.__module__,\n"
        "      dynamics.basins.__name__, dynamics.sweep.__module__, dynamics.SweepError.__name__,\n"
        "      dynamics.align.__name__, hasattr(dynamics, 'no_such_name'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"
    # ... which stays the public function of that name, as with eager imports
    assert out[1].split() == [
        "dynamics.compare",
        "True",
        "dynamics.fixed_points",
        "basins",
        "dynamics.sweep",
        "SweepError",
        "dynamics.align",
        "False",
    ]


@pytest.mark.parametrize(
    "saveat, n_steps",
    [
        ({"every": 1}, 1000),
        ({"every": 7}, 1000),
        ({"every": 10}, 1000),
        ({"every": 3}, 0),
        ({"steps": (5, 1, 3, 3, 0)}, 10),
        ({"steps": (0, 2, 9)}, 10),
        ({"n": 50}, 20),
        ({"log": 30}, 1000),
        ({"final": True}, 5),
    ],
)
def test_resolve_steps_equals_numpy_unique(saveat, n_steps):
    # the fast paths (no sort for grids that are increasing by construction) against the plain definition
    from dynamics import SaveAt

    sv = SaveAt(**saveat)
    got = sv.resolve_steps(n_steps)
    if sv.every is not None:
        want = np.unique(np.append(np.arange(0, n_steps + 1, sv.every), n_steps))
    elif sv.steps is not None:
        want = np.unique(sv.steps)
    else:
        want = np.unique(got)  # n=, log=, final: unchanged definitions; at least sorted and unique
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "saveat", [{"every": 1}, {"every": 4}, {"ts": (0.3, 0.1, 0.1, 1.0)}, {"ts": (0.0, 0.5, 1.0)}, {"n": 9}]
)
def test_resolve_times_equals_numpy_unique(saveat):
    from dynamics import SaveAt

    sv = SaveAt(**saveat)
    got = sv.resolve_times(0.0, 1.0, 0.01)
    if sv.every is not None:
        arr = 0.0 + 0.01 * np.arange(0, 101, sv.every)
        want = np.unique(np.append(arr[arr <= 1.0], 1.0))
    elif sv.ts is not None:
        want = np.unique(sv.ts)
    else:
        want = np.linspace(0.0, 1.0, sv.n)
    np.testing.assert_array_equal(got, want)
