"""The engine's compiled observables hook (``observe=``, ``observe_names=``, ``step_observe=``; issue 14).

Observables are derived values of the state written by the compiled loop at every save point. Checked against
closed forms (a linear map), against the same function applied to the saved states in Python, and for
icl_regression against an independent numpy evaluation of the loss F (spec §4.1, Eq. (4.1)) and the model's
public ``approx_loss``.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
from numba import njit

import dynamics
from dynamics import _kernels
from dynamics.errors import DivergenceError

A, B = 0.9, -0.5  # the diagonal linear map x_{k+1} = diag(A, B) x_k


@njit(cache=True)
def lin_step(k, x, p, out):
    out[0] = p[0] * x[0]
    out[1] = p[1] * x[1]


@njit(cache=True)
def lin_obs(k, x, p, out):
    out[0] = x[0] * x[0] + x[1] * x[1]
    out[1] = k


@njit(cache=True)
def lin_step_obs(k, x, p, out, obs):
    lin_step(k, x, p, out)
    lin_obs(k, x, p, obs)


@njit(cache=True)
def lin_rhs(t, y, p, dy):
    dy[0] = -p[0] * y[0]
    dy[1] = -p[1] * y[1]


@njit(cache=True)
def three_values(k, x, p, out):
    out[0] = x[0]
    out[1] = x[1]
    out[2] = 0.0


def plain_obs(k, x, p, out):
    out[0] = x[0]


X0 = np.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.1]])


@pytest.mark.parametrize("fused", [False, True])
def test_observable_of_a_linear_map_equals_the_closed_form(fused):
    extra = {"step_observe": lin_step_obs} if fused else {}
    tr = dynamics.iterate(
        lin_step,
        X0,
        40,
        params=[A, B],
        saveat=dynamics.SaveAt(every=1),
        observe=lin_obs,
        observe_names=["r2", "k"],
        **extra,
    )
    k = np.arange(41)
    closed = X0[:, :1] ** 2 * A ** (2.0 * k) + X0[:, 1:] ** 2 * B ** (2.0 * k)
    # 40 multiplications per component: <= ~80 ulp of accumulated rounding, far below 1e-13 relative
    np.testing.assert_allclose(tr.r2.values, closed, rtol=1e-13, atol=0)
    np.testing.assert_array_equal(tr.k.values, np.broadcast_to(k, (3, 41)))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"saveat": dynamics.SaveAt(steps=[0, 3, 4, 17, 60])},
        {"saveat": dynamics.SaveAt(every=1), "progress": True},
        {"saveat": dynamics.SaveAt(every=1), "converged": 1e-3},
        # several chunks with stopped trajectories: the frozen saves of a later chunk get their observables too
        {"saveat": dynamics.SaveAt(every=1), "converged": 1e-3, "progress": True},
        {"saveat": dynamics.SaveAt(final=True)},
    ],
)
def test_fused_and_separate_observables_equal_python_on_the_saved_states(kwargs):
    x0 = np.concatenate([X0, [[1e-4, 2e-4], [-2.0, 0.3]]])  # an odd batch; the small start stops early
    runs = [
        dynamics.iterate(lin_step, x0, 60, params=[A, B], observe=lin_obs, observe_names=["r2", "k"], **kwargs, **extra)
        for extra in ({}, {"step_observe": lin_step_obs})
    ]
    Y = runs[0].states()
    for tr in runs:
        np.testing.assert_array_equal(tr.states(), Y)
        np.testing.assert_array_equal(tr.r2.values, Y[..., 0] * Y[..., 0] + Y[..., 1] * Y[..., 1])
        np.testing.assert_array_equal(tr.k.values, np.broadcast_to(tr.step.values, Y.shape[:2]))


@pytest.mark.parametrize("solver", [dynamics.RK4(dt=0.01), dynamics.Dopri5()])
def test_observables_in_flows_see_the_saved_state_and_time(solver):
    tr = dynamics.integrate(
        lin_rhs,
        X0,
        (0.0, 1.0),
        params=[A, 2.0],
        solver=solver,
        saveat=dynamics.SaveAt(ts=[0.0, 0.255, 0.5, 1.0]),
        observe=lin_obs,
        observe_names=["r2", "t"],
        converged=1e-300,
    )
    Y = tr.states()
    np.testing.assert_array_equal(tr.r2.values, Y[..., 0] * Y[..., 0] + Y[..., 1] * Y[..., 1])
    # fixed step: the kernel passes t0 + k dt + h of the save, equal to the save time up to rounding
    np.testing.assert_allclose(tr.t.values, np.broadcast_to(tr.time.values, Y.shape[:2]), rtol=0, atol=1e-14)


def test_bad_observe_arguments_are_named():
    def run(**kw):
        return dynamics.iterate(lin_step, X0, 5, params=[A, B], **kw)

    with pytest.raises(TypeError, match="observe must be a numba @njit function"):
        run(observe=plain_obs, observe_names=["a"])
    with pytest.raises(ValueError, match=r"observe_names has 2 entries .* writes 3 values"):
        run(observe=three_values, observe_names=["a", "b"])
    with pytest.raises(ValueError, match=r"observe_names has 4 entries .* writes 3 values"):
        run(observe=three_values, observe_names=["a", "b", "c", "d"])
    with pytest.raises(TypeError, match="observe_names was given without observe"):
        run(observe_names=["a"])
    with pytest.raises(TypeError, match="observe_names must be a sequence"):
        run(observe=lin_obs)
    with pytest.raises(ValueError, match="distinct"):
        run(observe=lin_obs, observe_names=["a", "a"])
    with pytest.raises(TypeError, match="step_observe needs observe"):
        run(step_observe=lin_step_obs)
    with pytest.raises(TypeError, match="step_observe must be a numba"):
        run(observe=lin_obs, observe_names=["a", "b"], step_observe=plain_obs)
    with pytest.raises(ValueError, match="observe_names has 1 entries"):
        dynamics.integrate(lin_rhs, X0, (0.0, 1.0), params=[A, B], observe=lin_obs, observe_names=["a"])
    with pytest.raises(ValueError, match="clashes with a state name"):
        run(observe=lin_obs, observe_names=["y0", "k"])


@pytest.mark.parametrize("fused", [False, True])
def test_divergence_is_reported_with_observables_on(fused):
    extra = {"step_observe": lin_step_obs} if fused else {}
    x0 = np.array([[1.0, 1.0], [0.1, 0.1]])
    with pytest.raises(DivergenceError) as err:
        # trajectory 0 grows as 2^k and leaves the bound 100 at step 7 (128); trajectory 1 reaches 12.8 there
        dynamics.iterate(
            lin_step,
            x0,
            20,
            params=[2.0, 0.5],
            bound=100.0,
            saveat=dynamics.SaveAt(every=1),
            observe=lin_obs,
            observe_names=["r2", "k"],
            **extra,
        )
    e = err.value
    assert (e.trajectory, e.step, e.variable) == (0, 7, "y0")
    part = e.partial
    Y = part.states()
    assert part.sizes["time"] == 7  # saves 0..6, before the failing step
    np.testing.assert_array_equal(part.r2.values, Y[..., 0] ** 2 + Y[..., 1] ** 2)
    np.testing.assert_array_equal(part.k.values[0], np.arange(7))


MODULE = """
from numba import njit

@njit(cache=True)
def step(k, x, p, out):
    out[0] = 0.5 * x[0]

@njit(cache=True)
def obs(k, x, p, out):
    out[0] = {factor} * x[0]
"""


def test_the_kernel_cache_key_includes_the_observable(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNDYN_KERNEL_DIR", str(tmp_path / "kernels"))
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "obsmodel_cachekey.py"
    values, files = [], []
    for factor in ("2.0", "3.0"):
        path.write_text(MODULE.format(factor=factor))
        importlib.invalidate_caches()
        mod = (
            importlib.reload(sys.modules["obsmodel_cachekey"])
            if "obsmodel_cachekey" in sys.modules
            else importlib.import_module("obsmodel_cachekey")
        )
        tr = dynamics.iterate(
            mod.step, [1.0], 2, params=[0.0], observe=mod.obs, observe_names=["o"], saveat=dynamics.SaveAt(final=True)
        )
        values.append(float(tr.o.values[0, -1]))
        files.append({p.name for p in (tmp_path / "kernels").glob("*.py")})
    assert values == [2.0 * 0.25, 3.0 * 0.25]  # the changed observable was recompiled, not loaded from the cache
    new = files[1] - files[0]
    assert len(new) == 1 and "_step__obs_" in next(iter(new))
    sys.modules.pop("obsmodel_cachekey", None)


def test_digest_depends_on_the_observable():
    src = _kernels._map_source(None, "2", True)
    assert _kernels._digest((lin_step, lin_obs), None, src) != _kernels._digest((lin_step, three_values), None, src)


# --- icl_regression: the derived variables of map/flow are compiled observables ------------------------------------
def _numpy_F(task_d, sigma2, cL, omega, mu):
    """Independent evaluation of F (spec §4.1, Eq. (4.1)) with matrices: 1 + s2 - 2 mu.w + mu^T (w w^T + cL K) mu.
    Returns F and the sum of the magnitudes of its terms (the scale of its rounding error)."""
    cL = np.asarray(cL)[..., None, None]
    u = np.einsum("...h,...h->...", mu, omega)
    K = np.exp(task_d * omega[..., :, None] * omega[..., None, :])
    quad = np.einsum("...h,...hg,...g->...", mu, cL * K, mu)
    F = 1.0 + sigma2 - 2.0 * u + u * u + quad
    scale = 1.0 + sigma2 + 2.0 * np.abs(u) + u * u + np.einsum("...h,...hg,...g->...", np.abs(mu), cL * K, np.abs(mu))
    return F, scale


def test_icl_map_and_flow_observables_equal_independent_numpy_and_approx_loss():
    from closedform import _icl_regression_kernels as _k
    from closedform import icl_regression as icl

    task = icl.ICLRegressionTask(d=5, L=40, sigma2=0.1)
    rng = np.random.default_rng(3)
    om0, mu0 = rng.normal(0, 0.3, (5, 4)), rng.normal(0, 0.3, (5, 4))
    s2, Ls = np.array([0.1, 0.3, 0.0, 1.0, 0.2]), np.array([40, 10, 7, 3, 100])
    runs = [
        (icl.map(task, om0, mu0, lr=0.05, n_steps=200, saveat=dynamics.SaveAt(every=1)), task.sigma2, task.cL),
        (
            icl.map(task, om0, mu0, lr=0.05, n_steps=200, sigma2=s2, L=Ls, saveat=dynamics.SaveAt(every=7)),
            s2[:, None],
            ((1 + s2) / Ls)[:, None],
        ),
        (icl.flow(task, om0, mu0, (0.0, 10.0), saveat=dynamics.SaveAt(n=21)), task.sigma2, task.cL),
    ]
    for tr, sigma2, cL in runs:
        Y = tr.states()
        omega, mu = Y[..., :4], Y[..., 4:]
        F_np, scale = _numpy_F(task.d, sigma2, cL, omega, mu)
        # a sum of O(H^2) = 16 rounded terms: |error| <= ~16 * 4 eps * scale ~ 1.4e-14 * scale; 1e-13 leaves margin
        assert np.all(np.abs(tr.F.values - F_np) <= 1e-13 * scale)
        u = (mu * omega).sum(-1)
        assert np.all(np.abs(tr.mu_dot_omega.values - u) <= 1e-13 * np.abs(mu * omega).sum(-1))
        assert np.all(np.abs(tr.sum_mu.values - mu.sum(-1)) <= 1e-13 * np.abs(mu).sum(-1))
        if np.ndim(sigma2) == 0:  # the model's public loss (the former Python derived path), to rounding
            assert np.all(np.abs(tr.F.values - icl.approx_loss(task, omega, mu)) <= 1e-13 * scale)
    # the fused step (icl.map) equals the separate step + observables calls bit for bit
    y0 = np.concatenate([om0, mu0], axis=1)
    sep = dynamics.iterate(
        _k.gd_step,
        y0,
        200,
        params=[task.d, task.cL, 0.05, task.sigma2],
        saveat=dynamics.SaveAt(every=1),
        observe=_k.observables,
        observe_names=_k.OBSERVABLE_NAMES,
    )
    fused = runs[0][0]
    np.testing.assert_array_equal(sep.states(), fused.states())
    for name in _k.OBSERVABLE_NAMES:
        np.testing.assert_array_equal(sep[name].values, fused[name].values)
