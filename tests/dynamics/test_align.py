"""Time-aligned comparisons: ``dynamics.align`` (isotonic map, out-of-range marking, time scales) and
``overlay(..., align=)`` with its paired ``compare`` and the time-scale warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr

import dynamics
from dynamics import SaveAt, Trajectory, overlay
from dynamics.align import TimeScaleWarning, align, isotonic


def _minmax_isotonic(y):
    """Closed form of the least-squares isotonic fit: f_i = max_{j <= i} min_{k >= i} mean(y[j..k])."""
    n = y.size
    return np.array([max(min(y[j : k + 1].mean() for k in range(i, n)) for j in range(i + 1)) for i in range(n)])


def test_isotonic_matches_the_min_max_formula_and_is_monotone():
    rng = np.random.default_rng(0)
    for _ in range(20):
        y = np.cumsum(rng.normal(0.1, 1.0, size=25))
        fit = isotonic(y)
        np.testing.assert_allclose(fit, _minmax_isotonic(y), rtol=0, atol=1e-12)  # float64 round-off of means
        assert np.all(np.diff(fit) >= 0)
    with pytest.raises(ValueError, match="w must be > 0"):
        isotonic([1.0, 2.0], w=[1.0, 0.0])


def _flow(x0, times):
    """Exact reduced dynamics x' = -x (each seed from its own start), on the given theory times."""
    x0 = np.asarray(x0, dtype=float).reshape(-1)
    path = x0[:, None] * np.exp(-np.asarray(times)[None, :])
    return Trajectory.from_arrays(
        path[..., None],
        names=("x",),
        time=np.asarray(times, float),
        step=np.arange(len(times)),
        trajectory=np.arange(x0.size),
    )


def _learned(x0, scales, times, noise=0.0, rng=0):
    """Learned run: seed i follows the flow at speed scales[i] (x = x0 exp(-c t)), plus optional noise."""
    rng = np.random.default_rng(rng)
    path = np.asarray(x0)[:, None] * np.exp(-np.outer(scales, times))
    path = path + noise * rng.standard_normal(path.shape)
    path[:, 0] = x0
    return Trajectory.from_arrays(
        path[..., None],
        names=("x",),
        time=np.asarray(times, float),
        step=np.arange(len(times)),
        trajectory=np.arange(10, 10 + len(x0)),
    )


def test_align_recovers_per_seed_time_scales_and_maps_the_run_onto_the_theory():
    x0 = np.array([1.0, 1.5, 2.0, 2.5])
    scales = np.array([0.2, 0.25, 0.3, 0.5])
    t_learned = np.linspace(0.0, 12.0, 121)
    grid = np.linspace(0.0, 6.0, 601)
    learned = _learned(x0, scales, t_learned)
    theory, aligned = overlay(lambda s0, at: _flow(s0[:, 0], at), learned, state_variables=("x",), align="x", grid=grid)
    # exact data: the time scale is c up to the linear interpolation of the learned crossing time between save
    # points 0.1 apart (relative error ~ (c 0.1)^2 / 8 = 3e-4 for c = 0.5) and of the theory's (step 0.01)
    np.testing.assert_allclose(aligned.time_scale.values, scales, rtol=1e-3)
    assert np.all(
        np.diff(aligned.theory_time.values, axis=1)[np.isfinite(np.diff(aligned.theory_time.values, axis=1))] >= 0
    )
    # in range: up to c_i * 12 in theory time; beyond it out of range (NaN), never pinned to the last value
    for i, c in enumerate(scales):
        inside = aligned.in_range.values[i]
        assert abs(grid[inside].max() - min(c * 12.0, 6.0)) < 0.011  # one grid step
        assert np.all(np.isnan(aligned.x.values[i, ~inside]))
    # on the common grid the learned run equals the theory up to the linear interpolation between its save points:
    # |error| <= h^2 / 8 max|x''| with h = c * 0.1 in theory time and x'' = x <= x0 (plus the map's 1e-4)
    ok = aligned.in_range.values
    bound = (scales * 0.1) ** 2 / 8 * x0 + 1e-4 * x0
    err = np.abs(aligned.x.values - theory.x.values)
    assert np.all(np.where(ok, err, 0.0) <= bound[:, None])
    res = dynamics.compare(theory, aligned, variables="x", allowance=1e-3)
    assert res.attrs["paired"] == 1 and res.attrs["aligned_on"] == "x"
    assert set(np.unique(res.status.values)) <= {"holds", "out_of_range", "consistent"}
    assert (res.status == "out_of_range").any() and str(res.tests.values[0, 0]).startswith("the alignment variable")


def test_values_beyond_the_reference_are_marked_not_pinned_and_the_map_never_runs_backwards():
    x0 = np.array([1.0, 1.0, 1.0])
    t_learned = np.linspace(0.0, 10.0, 101)
    learned = _learned(x0, np.array([0.5, 0.5, 0.5]), t_learned, noise=0.01, rng=3)
    learned["x"][0, 50] = 1.2  # above the theory's maximum (its start, 1.0): out of range, not clipped
    theory = _flow(x0, np.linspace(0.0, 8.0, 801))
    _, aligned = align(theory, learned, variable="x")
    assert bool(aligned.out_of_range.values[0, 50]) and np.isnan(aligned.theory_time.values[0, 50])
    mapped = aligned.theory_time.values
    for i in range(3):
        m = mapped[i][np.isfinite(mapped[i])]
        assert np.all(np.diff(m) >= 0)  # noise makes the raw inverse run backwards; the isotonic map does not
    raw = np.diff(np.interp(-learned.x.values[1], -theory.x.values[1][::-1], theory.time.values[::-1]))
    assert np.any(raw < 0)  # (the raw inverse does run backwards here)


def test_overlay_warns_on_a_constant_time_scale_and_not_on_matching_clocks():
    x0 = np.array([1.0, 1.5, 2.0])
    t = np.linspace(0.0, 4.0, 41)
    with pytest.warns(TimeScaleWarning, match=r"about 0\.2\d+ times .*align="):
        overlay(
            lambda s0, at: _flow(s0[:, 0], at), _learned(x0, np.full(3, 0.25), t), state_variables=("x",), on="time"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error", TimeScaleWarning)
        theory, _ = overlay(
            lambda s0, at: _flow(s0[:, 0], at), _learned(x0, np.full(3, 1.1), t), state_variables=("x",), on="time"
        )
    assert theory.attrs["started_from_learned_seeds"] == 1


def test_bad_alignment_input_is_refused():
    x0 = np.array([1.0, 2.0])
    learned = _learned(x0, np.ones(2), np.linspace(0, 1, 5))

    def fn(s0, at):
        return _flow(s0[:, 0], at)

    with pytest.raises(ValueError, match="align needs grid"):
        overlay(fn, learned, state_variables=("x",), align="x")
    with pytest.raises(ValueError, match="grid must be increasing and start at 0"):
        overlay(fn, learned, state_variables=("x",), align="x", grid=[0.5, 1.0])
    with pytest.raises(ValueError, match="align must name a variable"):
        overlay(fn, learned, state_variables=("x",), align="y", grid=[0.0, 1.0])
    far = _learned(x0, np.ones(2), np.linspace(0, 1, 5)).assign(x=lambda d: d.x * 0 - 5.0)
    with pytest.raises(ValueError, match="no learned value of 'x' in seed 0 lies within"):
        align(_flow(x0, np.linspace(0, 1, 11)), far, variable="x")
    with pytest.raises(ValueError, match="theory must hold 1 trajectory or one per learned seed"):
        align(_flow(np.ones(3), np.linspace(0, 1, 11)), learned, variable="x")
    with pytest.raises(ValueError, match="grid must lie on the theory's time axis"):
        align(_flow(x0, np.linspace(0, 1, 11)), learned, variable="x", grid=[0.05])
    two_d = xr.Dataset({"x": (("trajectory", "time", "k"), np.ones((2, 5, 2)))}, coords={"time": np.linspace(0, 1, 5)})
    with pytest.raises(ValueError, match="must be scalar per seed"):
        align(two_d, two_d, variable="x")


def test_icl_align_to_flow_marks_values_beyond_the_reference_and_never_runs_backwards():
    pytest.importorskip("torch")
    from closedform import icl_regression as cf
    from empirical.models import icl_regression as m

    task = cf.ICLRegressionTask(d=5, L=40, sigma2=0.1)
    ref = cf.map(task, [0.01, -0.01], [0.01, -0.01], lr=0.01, n_steps=10_000, saveat=SaveAt(log=60))  # t <= 100
    curve = ref["mu_dot_omega"].values[0]
    t = np.array([3.0, 10.0, 9.0, 50.0])
    vals = np.interp(t, ref["time"].values, curve)
    vals = np.append(vals, curve.max() + 1e-3)  # above the reference's maximum: NaN, not the end time
    got = m.align_to_flow(np.stack([vals, vals]), ref, key="mu_dot_omega")
    assert got.shape == (2, 5) and np.all(np.isnan(got[:, -1]))
    assert np.all(np.diff(got[0, :-1]) >= 0)  # 10 then 9 pooled: never backwards
    np.testing.assert_allclose(got[0, [0, 3]], t[[0, 3]], rtol=0.05)  # piecewise-linear reference on a log grid


def test_overlay_warns_when_variables_move_at_different_constant_multiples():
    """Learned x moves at 1/4 of the theory's speed and y at its speed: a rescaled gradient, not a common clock."""
    x0 = np.array([1.0, 1.5, 2.0])
    t = np.linspace(0.0, 4.0, 41)

    def two(state0, times):
        path = np.stack([state0[:, :1] * np.exp(-times[None, :]), state0[:, 1:] * np.exp(-times[None, :])], -1)
        return Trajectory.from_arrays(
            path, names=("x", "y"), time=times, step=np.arange(times.size), trajectory=np.arange(state0.shape[0])
        )

    path = np.stack([x0[:, None] * np.exp(-0.25 * t[None, :]), x0[:, None] * np.exp(-t[None, :])], -1)
    learned = Trajectory.from_arrays(path, names=("x", "y"), time=t, step=np.arange(t.size), trajectory=np.arange(3))
    with pytest.warns(TimeScaleWarning, match=r"constant multiples .*\(x: 0\.2\d+; .*another path"):
        overlay(two, learned, state_variables=("x", "y"), on="time")
