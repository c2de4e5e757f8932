"""dynamics.overlay: the reduced dynamics started from a learned run's step-0 state, aligned without clipping."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from dynamics import SaveAt, Trajectory, iterate
from dynamics import overlay

A = np.array([[0.9, 0.2], [-0.1, 0.95]])


@numba.njit
def _linear_map(k, y, p, out):  # y_{k+1} = A y_k with A = [[p0, p1], [p2, p3]]
    out[0] = p[0] * y[0] + p[1] * y[1]
    out[1] = p[2] * y[0] + p[3] * y[1]


def _theory(state0, steps):
    return iterate(_linear_map, state0, int(steps[-1]), params=A.ravel(), saveat=SaveAt(steps=steps), names=("x", "y"))


def _learned(steps, seeds=4, noise=0.0, rng=0):
    rng = np.random.default_rng(rng)
    x0 = rng.normal(size=(seeds, 2))
    path = np.stack([x0 @ np.linalg.matrix_power(A, int(s)).T for s in steps], axis=1)
    path = path + noise * rng.normal(size=path.shape)
    return Trajectory.from_arrays(
        path, names=("x", "y"), time=0.5 * np.asarray(steps, float), step=steps, trajectory=np.arange(10, 10 + seeds)
    ), x0


def test_theory_starts_at_the_learned_step0_state_and_matches_the_exact_solution():
    steps = np.array([0, 3, 10, 25])
    learned, x0 = _learned(steps)
    theory, same = overlay(_theory, learned, state_variables=("x", "y"))
    assert same is learned
    # independent reference: matrix powers of A applied to each seed's start
    exact = np.stack([x0 @ np.linalg.matrix_power(A, int(s)).T for s in steps], axis=1)
    np.testing.assert_allclose(np.stack([theory.x.values, theory.y.values], -1), exact, rtol=1e-13, atol=1e-15)
    assert list(theory.trajectory.values) == list(learned.trajectory.values)
    np.testing.assert_array_equal(theory.step.values, steps)
    np.testing.assert_array_equal(theory.time.values, learned.time.values)


def test_an_array_state_variable_is_flattened_in_c_order_and_starts_the_theory():
    steps = np.array([0, 4, 9])
    flat, x0 = _learned(steps, seeds=3)
    # the same run stored as ONE array variable w of dims (row, col) = (1, 2), as scan_snap stores z (query, token)
    learned = Trajectory(
        {"w": (("trajectory", "time", "row", "col"), flat.states()[:, :, None, :])},
        coords={
            "trajectory": flat.trajectory.values,
            "time": flat.time.values,
            "step": ("time", steps),
            "row": [0],
            "col": [0, 1],
        },
    )
    seen = []

    def theory(state0, at):
        seen.append(state0)
        tr = _theory(state0, at)
        return tr.assign(w=(("trajectory", "time", "row", "col"), tr.states()[:, :, None, :]))

    aligned, _ = overlay(theory, learned, state_variables=("w",))
    np.testing.assert_array_equal(seen[0], x0)  # (n_seeds, 2): w[0, 0], w[0, 1] in C order
    exact = np.stack([x0 @ np.linalg.matrix_power(A, int(s)).T for s in steps], axis=1)
    np.testing.assert_allclose(aligned.w.values[:, :, 0, :], exact, rtol=1e-13, atol=1e-15)
    learned["w"][2, 0, 0, 1] = np.inf
    with pytest.raises(ValueError, match=r"'w' \(component 1\) is not finite for trajectory 2"):
        overlay(theory, learned, state_variables=("w",))


def test_alignment_on_time_uses_the_learned_time_axis():
    steps = np.array([0, 2, 4])
    learned, _ = _learned(steps)

    def theory_on_time(state0, times):  # the theory's own time axis is 0.5 * step, as the learned one
        tr = _theory(state0, (times / 0.5).round().astype(int))
        return tr.assign_coords(time=0.5 * tr.step.values)

    theory, _ = overlay(theory_on_time, learned, state_variables=("x", "y"), on="time")
    np.testing.assert_array_equal(theory.time.values, [0.0, 1.0, 2.0])


def test_a_save_point_the_theory_lacks_is_an_error_naming_it_never_clipped():
    steps = np.array([0, 5, 50])
    learned, _ = _learned(steps)

    def short_theory(state0, at):
        return _theory(state0, np.array([0, 5, 20]))

    with pytest.raises(ValueError, match=r"lacks 1 .* \(50\).*covers 0 .. 20"):
        overlay(short_theory, learned, state_variables=("x", "y"))


@pytest.mark.parametrize(
    "case, match",
    [
        ("no_step0", "first save point is step 3"),
        ("missing_var", r"\['z'\] are not variables"),
        ("nan", "'y' is not finite for trajectory 1"),
        ("count", "returned 1 trajectories for 4"),
        ("on", "on must be one of"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(case, match):
    steps = np.array([3, 6]) if case == "no_step0" else np.array([0, 6])
    learned, _ = _learned(steps)
    fn, variables, on = _theory, ("x", "y"), "step"
    if case == "missing_var":
        variables = ("x", "z")
    elif case == "nan":
        learned["y"][1, 0] = np.nan
    elif case == "count":

        def fn(state0, at):
            return _theory(state0[:1], at)
    elif case == "on":
        on = "epoch"
    with pytest.raises(ValueError, match=match):
        overlay(fn, learned, state_variables=variables, on=on)
    with pytest.raises(TypeError, match="Trajectory"):
        overlay(_theory, np.zeros((2, 2)), state_variables=("x",))


def _from_each_start(learned, steps, start):
    """Hand-computed control: A^(k - s_i) applied to seed i's learned state at its start s_i, NaN before it."""
    states = np.stack([learned.x.values, learned.y.values], -1)
    out = np.full(states.shape, np.nan)
    for i, s_i in enumerate(start):
        x_start = states[i, list(steps).index(s_i)]
        for k, s in enumerate(steps):
            if s >= s_i:
                out[i, k] = np.linalg.matrix_power(A, int(s - s_i)) @ x_start
    return out


def test_a_per_seed_start_runs_each_seed_from_its_own_learned_state_on_a_shifted_clock():
    steps = np.array([0, 2, 5, 9, 14])
    learned, _ = _learned(steps, noise=0.05)  # noisy: a theory started at step 0 cannot pass for one started later
    start = np.array([0, 5, 2, 14])
    seen = []

    def theory(state0, at):
        seen.append((state0.copy(), at.copy()))
        return _theory(state0, at)

    th, same = overlay(theory, learned, state_variables=("x", "y"), start=start)
    assert same is learned
    state0, at = seen[0]
    # the offsets of the learned points from the starts, once each: 0..14 minus 0, 5, 2 or 14, the later ones only
    np.testing.assert_array_equal(at, [0, 2, 3, 4, 5, 7, 9, 12, 14])
    np.testing.assert_array_equal(state0[1], [learned.x.values[1, 2], learned.y.values[1, 2]])
    got = np.stack([th.x.values, th.y.values], -1)
    expected = _from_each_start(learned, steps, start)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))  # NaN exactly before each seed's start
    # matrix powers against 14 float64 map steps: a few ulps of |x| ~ 1
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-14)
    wrong = _from_each_start(learned, steps, np.zeros(4, dtype=int))  # every seed from step 0: must differ
    assert np.nanmax(np.abs(got - wrong)) > 1e-3
    np.testing.assert_array_equal(th.start_step.values, start)
    np.testing.assert_array_equal(th.step.values, steps)
    np.testing.assert_array_equal(th.time.values, learned.time.values)
    assert th.attrs["started_from_learned_seeds"] == 1


def test_a_per_seed_start_on_the_time_axis_and_a_common_start():
    steps = np.array([0, 2, 4, 8])
    learned, _ = _learned(steps, noise=0.05, seeds=3)

    def theory_on_time(state0, times):  # the theory's own clock: time 0.5 * step from its start
        tr = _theory(state0, (times / 0.5).round().astype(int))
        return tr.assign_coords(time=0.5 * tr.step.values)

    th, _ = overlay(theory_on_time, learned, state_variables=("x", "y"), on="time", start=[2, 4, 0])
    np.testing.assert_allclose(
        np.stack([th.x.values, th.y.values], -1), _from_each_start(learned, steps, [2, 4, 0]), rtol=1e-13, atol=1e-14
    )
    common, _ = overlay(_theory, learned, state_variables=("x", "y"), start=4)  # one step for every seed
    np.testing.assert_allclose(
        np.stack([common.x.values, common.y.values], -1),
        _from_each_start(learned, steps, [4, 4, 4]),
        rtol=1e-13,
        atol=1e-14,
    )


def test_a_grid_without_align_returns_the_theory_on_its_own_clock_beyond_the_learned_run():
    steps = np.array([0, 3, 6])
    learned, x0 = _learned(steps)
    grid = np.array([0, 1, 3, 6, 20, 50])
    th, same = overlay(_theory, learned, state_variables=("x", "y"), grid=grid)
    assert same is learned
    np.testing.assert_array_equal(th.step.values, grid)
    exact = np.stack([x0 @ np.linalg.matrix_power(A, int(s)).T for s in grid], axis=1)
    np.testing.assert_allclose(np.stack([th.x.values, th.y.values], -1), exact, rtol=1e-13, atol=1e-15)
    later, _ = overlay(_theory, learned, state_variables=("x", "y"), grid=grid, start=[3, 0, 6, 3])
    x_start = np.stack([learned.x.values[0, 1], learned.y.values[0, 1]])
    np.testing.assert_allclose(later.x.values[0, -1], (np.linalg.matrix_power(A, 50) @ x_start)[0], rtol=1e-12)


@pytest.mark.parametrize(
    "start, match",
    [
        ([0, 1, 0, 0], r"start must be save points .*\[1\] are not"),
        ([0, 3], r"one step per seed \(4\) or one for all"),
        ([0.5, 0, 0, 0], "start must be integer learned steps"),
        ("align", "start cannot be combined with align"),
    ],
)
def test_a_bad_start_is_refused_naming_it(start, match):
    steps = np.array([0, 3, 6])
    learned, _ = _learned(steps)
    kw = {"start": start}
    if start == "align":
        kw = {"start": 3, "align": "x", "grid": [0.0, 1.0]}
    with pytest.raises(ValueError, match=match):
        overlay(_theory, learned, state_variables=("x", "y"), **kw)
    with pytest.raises(ValueError, match="whole steps"):
        overlay(_theory, learned, state_variables=("x", "y"), grid=[0.0, 1.5])
