"""Pinned values for the engine (issue 19, item 2): each test kills mutants of dynamics/ that survived the sampled
mutation run of ``tools/mutate.py`` (named in each docstring), against an independent value."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from dynamics import RK4, DivergenceError, Dopri5, Euler, SaveAt, integrate, iterate, sweep


@njit(cache=True)
def _squaring(k, x, p, out):
    out[0] = x[0] * x[0]


@njit(cache=True)
def _riccati(t, y, p, dy):
    # y' = y^2, y(0) = 1/2: y = 1 / (2 - t), which blows up at t = 2
    dy[0] = y[0] * y[0]


def _reciprocal(Y, P):
    return {"recip": 1.0 / Y[:, :, 0]}


@pytest.mark.parametrize("solver", [RK4(dt=1e-3), Dopri5()], ids=["fixed", "adaptive"])
def test_divergence_partial_keeps_the_derived_variables_of_an_ode(solver):
    """Kills ``_partial_builder(..., derived, ...)`` -> ``None`` in ``_integrate_fixed``/``_integrate_adaptive``:
    the partial run of a diverging ODE must carry ``derived``. Reference: 1/y = 2 - t exactly for y' = y^2,
    y(0) = 1/2; RK4 at dt = 1e-3 has error ~dt^4 y^5 ~ 1e-11 relative up to t = 1.5, Dopri5 at rtol 1e-8 about
    1e-8, so rtol 1e-7 bounds both."""
    with pytest.raises(DivergenceError) as info:
        integrate(
            _riccati,
            [[0.5]],
            (0.0, 3.0),
            params=[0.0],
            solver=solver,
            saveat=SaveAt(n=31),
            names=["y"],
            derived=_reciprocal,
        )
    part = info.value.partial
    t = part.time.values
    assert "recip" in part.data_vars and t.size >= 15  # saves up to t >= 1.4 were reached
    early = t <= 1.5
    np.testing.assert_allclose(part.recip.values[0, early], 2.0 - t[early], rtol=1e-7)


def test_divergence_partial_keeps_the_derived_variables_of_a_map():
    """Kills ``_partial_builder(..., derived, ...)`` -> ``None`` in ``iterate``. Reference: x_k = 10^(2^k), so
    1/x_k = 10^-(2^k) (8 roundings at most, rtol 1e-14)."""
    with pytest.raises(DivergenceError) as info:
        iterate(
            _squaring, np.array([[10.0]]), 20, params=[0.0], saveat=SaveAt(every=1), names=["x"], derived=_reciprocal
        )
    part = info.value.partial
    np.testing.assert_allclose(part.recip.values[0], 10.0 ** -(2.0 ** np.arange(part.step.size)), rtol=1e-14)


@njit(cache=True)
def _halving_flow(t, y, p, dy):
    dy[0] = -0.5 * y[0]


def test_integrate_flushes_subnormals_by_default():
    """Kills the default ``flush_subnormals=True`` -> ``False`` of ``integrate``. Euler with dt = 1 on y' = -y/2 halves
    y exactly each step (y + 1.0 * (-0.5 y) = y/2 in binary), so from y0 = 2^-1000 the state is 2^-(1000 + k); the
    documented flush (dynamics.integrate: components below 2.2e-308 in magnitude set to zero after each step) makes
    every save with 2^-(1000 + k) < 2^-1022 exactly zero, the others exact powers of two."""
    traj = integrate(
        _halving_flow,
        [[2.0**-1000]],
        (0.0, 40.0),
        params=[0.0],
        solver=Euler(dt=1.0),
        saveat=SaveAt(every=1),
        names=["y"],
    )
    k = np.rint(traj.time.values).astype(int)
    exact = np.ldexp(1.0, -(1000 + k))
    expected = np.where(exact < 2.0**-1022, 0.0, exact)
    assert np.array_equal(traj.y.values[0], expected)


def test_sweep_names_a_grid_parameter_given_as_a_ragged_object_array():
    """Kills ``ValueError(<message>)`` -> ``ValueError(None)`` for an object array of unequal rows (numpy builds it
    without complaint, so only sweep's own check sees it): the error must name the parameter (STYLE: bad input gets
    a ValueError naming the parameter and its valid range)."""
    ragged = np.empty(2, dtype=object)
    ragged[0], ragged[1] = [1.0, 2.0], [3.0]
    with pytest.raises(ValueError, match=r"grid parameter 'a' must be a scalar or a 1-D sequence; got ragged"):
        sweep(_identity, {"a": ragged}, processes=1)


def _identity(config):
    return config


def test_sweep_over_a_list_returns_fn_of_each_entry_in_order():
    """The list interface of sweep: ``[fn(c) for c in grid]`` in order, here squares computed by hand. Kills
    ``_sweep_list(fn, list(grid), ...)`` -> ``_sweep_list(fn, None, ...)``."""
    assert sweep(_square, [3, 1, 2], processes=1) == [9, 1, 4]
    assert sweep(_square, (5,), processes=1) == [25]


def _square(config):
    return config * config
