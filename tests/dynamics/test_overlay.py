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
