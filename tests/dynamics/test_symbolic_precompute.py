"""dynamics.symbolic: tables computed once per parameter row (a registered function's Precompute).

The single-location five-scalar model registers zeta(t, g) with the series table of closedform.special: its
generated kernels take ``args = model.args(p)``. References: the hand-written map kernel (its own lambda table) and
the same generated kernel run with a table that does not match the parameter row (its direct branch: the 16-node
quadrature of zeta, every parameter expression computed in the kernel). Controls: a corrupted table with a valid
key changes the result (the table is really read) and the same corruption under a stale key does not (the guard).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from numba import njit

import dynamics
from closedform import _single_location_kernels as _k
from closedform import single_location as sl
from dynamics import SaveAt
from dynamics.symbolic import Precompute, SymbolicModel, numba_function
from dynamics.testing import assert_formula_close

TASK = sl.SingleLocationTask(d=400, L=10)
# 1e-12: the table branch (series zeta, parameter expressions from the table) and the direct branch (quadrature,
# computed in the kernel) differ by a few ulp per step on O(1) states; 40 steps of a map whose multipliers are
# within 2e-2 of 1 keep that far below 1e-12
RTOL = 1e-12


@pytest.fixture(scope="module")
def model():
    return sl._symbolic_scalar_model()


def _rows(n, rng):
    lam = rng.uniform(0.05, 1.0, n)
    return np.column_stack(
        [lam, np.full(n, TASK.s), np.full(n, TASK.gamma), np.full(n, 10.0), np.zeros(n), 4e-3 * np.ones(n)]
    )


def _run(model, X0, P, args, per_trajectory, n=40):
    run = dynamics.iterate(
        model.step,
        X0,
        n,
        params=P,
        args=args,
        args_per_trajectory=per_trajectory,
        saveat=SaveAt(final=True),
        trend=False,
    )
    return run.states()[:, -1]


def test_model_args_give_the_hand_kernel_values_per_row(model):
    rng = np.random.default_rng(0)
    P = _rows(64, rng)
    X0 = sl.sample_initial_state(TASK, 64, rng=rng)[:, :5]
    (T,) = model.args(P)
    assert T.shape == (64, model.table_size)
    got = _run(model, X0, P, (T,), True, n=1)
    hand = np.empty_like(X0)
    _k.five_map_array(X0, P[:, 0], P[:, 5], TASK.s, TASK.gamma, 10.0, hand)
    assert_formula_close(got, hand, rtol=RTOL, what="generated step with tables vs hand five_map_array")


def test_a_table_built_for_other_parameters_is_not_used(model):
    """Sweeping the parameter row with one shared table (built for row 0) gives the values of per-row tables."""
    rng = np.random.default_rng(1)
    P = _rows(32, rng)
    X0 = sl.sample_initial_state(TASK, 32, rng=rng)[:, :5]
    fresh = _run(model, X0, P, model.args(P), True)
    stale = _run(model, X0, P, model.args(P[0]), False)
    assert_formula_close(stale, fresh, rtol=RTOL, what="stale shared table vs per-row tables")
    # the model's own wrappers build the per-row tables themselves
    wrapped = model.iterate(X0, 40, params=P, saveat=SaveAt(final=True), trend=False).states()[:, -1]
    np.testing.assert_array_equal(wrapped, fresh)


def test_the_table_is_read_when_its_key_matches_and_ignored_otherwise(model):
    rng = np.random.default_rng(2)
    p = _rows(1, rng)[0]
    X0 = sl.sample_initial_state(TASK, 16, rng=rng)[:, :5]
    (T,) = model.args(p)
    good = _run(model, X0, p, (T,), False, n=1)
    n_key = len(model.param_names)
    np.testing.assert_array_equal(T[:n_key], p)  # the key: the raw values of the parameters the table uses
    bad = T.copy()
    bad[n_key:] *= 1.5  # every table value wrong, the key intact
    assert np.max(np.abs(_run(model, X0, p, (bad,), False, n=1) - good)) > 1e-3
    bad[0] = np.nextafter(bad[0], 2.0)  # the same corruption under a key one ulp off: the direct branch
    assert_formula_close(_run(model, X0, p, (bad,), False, n=1), good, rtol=RTOL, what="stale key")


def test_fixed_points_with_a_stale_table_find_the_same_saddle(model):
    """fixed_points evaluates the kernel at its parameter row; a table of another lambda changes nothing."""
    lam, alpha = 0.1, 4e-3
    p = sl._symbolic_params(TASK, lam, alpha)
    other = sl._symbolic_params(TASK, 0.3, alpha)
    starts = np.array([[1e-3, 2e-3, 0.0, 0.0, 0.0]])
    kw = dict(jacobian=model.jacobian_map, step_param=5)
    (a,) = dynamics.fixed_points(model.step, p, starts, args=model.args(p), **kw)
    (b,) = dynamics.fixed_points(model.step, p, starts, args=model.args(other), **kw)
    assert a.residual < 1e-12 and b.residual < 1e-12
    np.testing.assert_allclose(b.state, a.state, rtol=0, atol=1e-12)  # roots to the solver's tol 1e-12
    np.testing.assert_allclose(a.state, 0.0, rtol=0, atol=1e-9)  # the saddle k = v = 0 of §7.2


def test_model_args_bad_shapes_are_named(model):
    with pytest.raises(ValueError, match=r"params must have shape \(6,\)"):
        model.args(np.zeros(5))
    plain = SymbolicModel.from_risk(sp.Symbol("x", real=True) ** 2, ["x"], [])
    assert plain.args([0.1]) is None and plain.table_size == 0  # no registered table: four-argument kernels


# ----------------------------------------------------------------------------------------------------------------
# a user's own registered function with a table: f(t, c) = exp(c) t, table [exp(c)]


@njit(cache=True)
def scaled(t, c):
    return math.exp(c) * t


@njit(cache=True)
def scaled_table(c, out, o):
    out[o] = math.exp(c)


@njit(cache=True)
def scaled_from_table(t, c, tab, o):
    return tab[o] * t


@njit(cache=True)
def scaled_from_wrong_table(t, c, tab, o):
    return 2.0 * tab[o] * t


def _scaled_model(evaluate):
    f = numba_function(
        "scaled", scaled, (lambda t, c: sp.exp(c), None), precompute=Precompute(scaled_table, evaluate, 1, args=(1,))
    )
    x, c = sp.symbols("x c", real=True)
    return SymbolicModel.from_risk(f(x, c**2) * x / 2, [x], [c])


def test_a_users_registered_table_is_hoisted_and_checked():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (200, 1))
    P = np.column_stack([rng.uniform(-1, 1, 200), np.full(200, 0.1)])
    want = np.exp(P[:, :1] ** 2) * X  # d/dx (exp(c^2) x^2 / 2)
    m = _scaled_model(scaled_from_table)
    assert m.table_size > 0
    assert_formula_close(m.gradient(X, P), want, rtol=1e-15)  # exp and one product: rounding only
    # control: an evaluate that ignores half the table is caught by the same comparison
    wrong = _scaled_model(scaled_from_wrong_table)
    assert np.max(np.abs(wrong.gradient(X, P) - want) / np.abs(want)) > 0.5


def test_bad_precompute_is_named():
    rules = (lambda t, c: sp.exp(c), None)
    with pytest.raises(ValueError, match="precompute.args"):
        numba_function("scaled", scaled, rules, precompute=Precompute(scaled_table, scaled_from_table, 1, args=(2,)))
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        Precompute(scaled_table, scaled_from_table, 0, args=(1,))
    with pytest.raises(ValueError, match="precompute.evaluate must take"):
        numba_function("scaled", scaled, rules, precompute=Precompute(scaled_table, scaled, 1, args=(1,)))
