"""The engine's ``args`` channel: data arrays handed to a model function next to its parameter row.

References: the same maps written in plain numpy (exact: the same float operations in the same order), one-at-a-time
runs for batched per-trajectory data, and closed-form solutions of a linear flow.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from dynamics import RK4, Dopri5, SaveAt, integrate, iterate


@njit(cache=True, fastmath=False)
def table_step(k, x, p, args, out):
    """x <- p0 * x + w[idx[k % len(idx)]] (a shared weight table and an int index array)."""
    w, idx = args[0], args[1]
    out[0] = p[0] * x[0] + w[idx[k % idx.shape[0]]]


@njit(cache=True, fastmath=False)
def table_observe(k, x, p, args, out):
    out[0] = x[0] * args[0][0]


@njit(cache=True, fastmath=False)
def decay_rhs(t, y, p, args, dy):
    dy[0] = -args[0][0] * y[0]


@njit(cache=True, fastmath=False)
def plain_step(k, x, p, out):
    out[0] = p[0] * x[0]


def _numpy_table(x0, a, w, idx, n):
    x = np.array(x0, dtype=np.float64)
    for k in range(n):
        x = a * x + w[idx[k % idx.size]]
    return x


def test_shared_args_equal_plain_numpy():
    w = np.array([0.5, -0.25, 1.0])
    idx = np.array([2, 0, 1, 1], dtype=np.int64)
    x0 = np.array([[0.1], [0.7]])
    tr = iterate(table_step, x0, 37, params=[0.9], args=(w, idx), saveat=SaveAt(final=True))
    np.testing.assert_array_equal(tr.states()[:, -1, 0], _numpy_table(x0[:, 0], 0.9, w, idx, 37))
    # a wrong table must give a different answer (the kernel reads the data, not something else)
    assert not np.array_equal(tr.states()[:, -1, 0], _numpy_table(x0[:, 0], 0.9, w[::-1], idx, 37))


def test_per_trajectory_args_batched_equal_one_at_a_time():
    rng = np.random.default_rng(0)
    n = 5
    W = rng.normal(size=(n, 4))
    idx = np.array([3, 1, 0], dtype=np.int64)
    x0 = rng.normal(size=(n, 1))
    save = SaveAt(every=7)
    batch = iterate(
        table_step,
        x0,
        300,
        params=[0.8],
        args=(W, idx),
        args_per_trajectory=(True, False),
        saveat=save,
        observe=table_observe,
        observe_names=["xw"],
    )
    for i in range(n):
        one = iterate(
            table_step,
            x0[i],
            300,
            params=[0.8],
            args=(W[i], idx),
            saveat=save,
            observe=table_observe,
            observe_names=["xw"],
        )
        for var in ("y0", "xw", "final_step_norm", "step_norm_trend"):
            np.testing.assert_array_equal(batch[var].values[i], one[var].values[0])
        np.testing.assert_array_equal(batch.states()[i, -1, 0], _numpy_table(x0[i, 0], 0.8, W[i], idx, 300))
    # one start with per-trajectory data runs one trajectory per row of the data
    shared_start = iterate(table_step, x0[0], 50, params=[0.8], args=(W, idx), args_per_trajectory=(True, False))
    assert shared_start.sizes["trajectory"] == n


@pytest.mark.parametrize("solver", [RK4(dt=0.01), Dopri5(rtol=1e-10, atol=1e-12)])
def test_flow_with_per_trajectory_args(solver):
    rates = np.array([[0.5], [1.0], [2.0]])
    tr = integrate(
        decay_rhs,
        np.ones((3, 1)),
        (0.0, 2.0),
        params=[0.0],
        args=(rates,),
        args_per_trajectory=True,
        solver=solver,
        saveat=SaveAt(final=True),
    )
    # RK4 with h = 0.01: global error ~ (a h)^4 / 120 a t ~ 1e-9 for a = 2; Dopri5 at rtol 1e-10 ~ 1e-9 globally
    np.testing.assert_allclose(tr.states()[:, -1, 0], np.exp(-2.0 * rates[:, 0]), rtol=1e-8)
    for i in range(3):
        one = integrate(
            decay_rhs, np.ones(1), (0.0, 2.0), params=[0.0], args=(rates[i],), solver=solver, saveat=SaveAt(final=True)
        )
        np.testing.assert_array_equal(one.states()[0, -1], tr.states()[i, -1])


def test_args_errors_name_the_argument():
    w, idx = np.ones(2), np.zeros(2, dtype=np.int64)
    with pytest.raises(TypeError, match="step .* takes 5 arguments but args was not given"):
        iterate(table_step, [0.0], 3, params=[1.0])
    with pytest.raises(TypeError, match="takes 4 arguments but args was given"):
        iterate(plain_step, [0.0], 3, params=[1.0], args=(w,))
    with pytest.raises(TypeError, match="args must be a non-empty tuple"):
        iterate(table_step, [0.0], 3, params=[1.0], args=[w, idx])
    with pytest.raises(TypeError, match=r"args\[1\] must be a numpy array"):
        iterate(table_step, [0.0], 3, params=[1.0], args=(w, [0, 1]))
    with pytest.raises(ValueError, match=r"args\[0\] is per trajectory .* n_traj=3"):
        iterate(
            table_step,
            np.zeros((3, 1)),
            3,
            params=[1.0],
            args=(np.ones((2, 2)), idx),
            args_per_trajectory=(True, False),
        )
    with pytest.raises(ValueError, match="args_per_trajectory must be a bool or one bool per array"):
        iterate(table_step, [0.0], 3, params=[1.0], args=(w, idx), args_per_trajectory=(True,))
    with pytest.raises(ValueError, match=r"args\[0\]"):
        iterate(table_step, [0.0], 3, params=[1.0], args=(np.array([np.nan, 1.0]), idx))
