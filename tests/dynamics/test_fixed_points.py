"""dynamics.fixed_points against the models' own fixed-point lists, exact Jacobians and brute-force iteration."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from closedform import _icl_regression_kernels as icl_k
from closedform import icl_regression as icl
from closedform import single_location as sl
from dynamics.fixed_points import basins, fixed_points

# ---------------------------------------------------------------------------------------------------------------
# single_location, lambda = 0.05, d = 400: the critical points of R on (S^{d-1})^2 (docs/models/single_location.md
# §7.1-§7.4) as zeros of the Riemannian gradient flow, written in R^8 = (k, v) in span(k*, v*, e3, e4)^2 from the
# model's risk partials (the frame of docs/models/single_location.md §4.1; independent of the model's own search).
SL_TASK = sl.SingleLocationTask(d=400, L=10)
SL_LAM = 0.05


def _sl_frame(P):
    k = P[..., 0:4] / np.linalg.norm(P[..., 0:4], axis=-1, keepdims=True)
    v = P[..., 4:8] / np.linalg.norm(P[..., 4:8], axis=-1, keepdims=True)
    scalars = np.stack([k[..., 0], v[..., 1], v[..., 0], k[..., 1], np.sum(k * v, axis=-1)], axis=-1)
    return k, v, scalars


def _sl_flow(P, lam):
    """-(tangent gradient of R) at the normalised (k, v); k* = e1, v* = e2 (docs/models/single_location.md §4.3)."""
    k, v, s = _sl_frame(P)
    rk, rn, rt, re, rr = sl.risk_partials(SL_TASK, lam, *(np.ascontiguousarray(s[:, j]) for j in range(5))).T
    gk = rr[:, None] * v
    gk[:, 0] += rk
    gk[:, 1] += re
    gv = rr[:, None] * k
    gv[:, 0] += rt
    gv[:, 1] += rn
    gk -= np.sum(gk * k, axis=1, keepdims=True) * k
    gv -= np.sum(gv * v, axis=1, keepdims=True) * v
    return -np.concatenate([gk, gv], axis=1)


def _sl_points(lam, n_starts=2000):
    rng = np.random.default_rng(1)
    return fixed_points(
        _sl_flow,
        lam,
        rng.standard_normal((n_starts, 8)),
        kind="flow",
        vectorized=True,
        project=lambda P: np.concatenate(_sl_frame(P)[:2], axis=1),
        canonical=lambda P: _sl_frame(P)[2],
    )


@pytest.fixture(scope="module")
def sl_found():
    return _sl_points(SL_LAM)


@pytest.fixture(scope="module")
def sl_listed():
    return sl.fixed_points(SL_TASK, SL_LAM, 4e-3)


def _match(found_keys, listed_keys, tol):
    """Index of the listed point within ``tol`` of each found one (-1: none)."""
    d = np.max(np.abs(found_keys[:, None, :] - listed_keys[None, :, :]), axis=2)
    return np.where(d.min(axis=1) < tol, d.argmin(axis=1), -1)


# 1e-9: both lists hold polished roots (residuals <= 1e-12, roots of a smooth system agree to ~1e-12; the
# boundary points |rho| = 1 converge quadratically in the angle, so to ~1e-9 in the scalars).
_SAME = 1e-9


def test_single_location_fixed_point_set_is_reproduced_one_to_one(sl_found, sl_listed):
    found = np.array([p.key for p in sl_found])
    listed = np.array([p.state for p in sl_listed])
    idx = _match(found, listed, _SAME)
    assert len(sl_found) == len(sl_listed) == 27
    assert np.all(idx >= 0) and len(set(idx.tolist())) == len(listed), "not a one-to-one match"
    kinds = {p.kind for p in sl_listed}
    assert {"oracle", "swap", "saddle", "anti_swap", "collinear", "mixed"} <= kinds  # the orbit, swaps, saddles
    assert all(p.residual < 1e-12 for p in sl_found)


def test_single_location_stability_matches_the_models_own_classification(sl_found, sl_listed):
    """Off M (and at its saddle) the flow's signs give the model's names; on M the model names a point by the
    (kappa, nu) block of docs/models/single_location.md §7.2, whose eigenvalues in the scalar coordinates are twice
    the vector ones at a corner (the kappa multiplier is the square of the vector one): those must be among ours."""
    listed = np.array([p.state for p in sl_listed])
    idx = _match(np.array([p.key for p in sl_found]), listed, _SAME)
    names = {"minimum": "attracting", "maximum": "repelling", "saddle": "saddle"}
    for fp, j in zip(sl_found, idx):
        ref = sl_listed[j]
        if ref.kind == "anti_oracle":
            # a maximum within M, but the full flow contracts one direction off M: a saddle with one stable direction
            assert fp.stability == "saddle" and np.sum(fp.eigenvalues.real < -1e-6) == 1
        else:
            assert fp.stability == names[ref.stability], (ref.kind, ref.state, fp.eigenvalues)
        if ref.on_manifold:
            corner = 0.5 if abs(ref.kappa) == 1 else 1.0
            want = corner * np.asarray(ref.flow_eigenvalues)
            # 1e-6: both linearisations are central differences (errors ~1e-9 at these scales)
            assert all(np.min(np.abs(fp.eigenvalues.real - w)) < 1e-6 for w in want), (ref.kind, want)
            wrong = np.asarray(ref.flow_eigenvalues)  # without the corner factor: must not match at a corner
            if corner != 1.0:
                assert not all(np.min(np.abs(fp.eigenvalues.real - w)) < 1e-6 for w in wrong)


def test_a_wrong_lambda_gives_a_set_the_comparison_rejects(sl_listed):
    found = np.array([p.key for p in _sl_points(0.06, n_starts=600)])
    idx = _match(found, np.array([p.state for p in sl_listed]), _SAME)
    assert np.any(idx < 0)


# ---------------------------------------------------------------------------------------------------------------
# icl_regression: the engine's numba kernels (flow_rhs, gd_step) as they are, against closedform.icl_regression's list.
ICL_TASK = icl.ICLRegressionTask(d=3, L=8, sigma2=0.1)


def _icl_canonical(H, group_tol=1e-4):
    """Only the sums of mu over heads with equal omega are identified (docs/models/icl_regression.md §4.4)."""

    def key(x):
        om, mu = x[:H], x[H:]
        return np.concatenate([om, [mu[np.abs(om - om[h]) < group_tol].sum() for h in range(H)]])

    return key


def _icl_starts(H, n, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.uniform(-1, 1, (n, H)), rng.uniform(-6, 6, (n, H))], axis=1)


@pytest.mark.parametrize("H", [1, 2])
def test_icl_regression_fixed_point_set_is_reproduced_through_the_engine_kernel(H):
    """The stationary points of F/2: the origin and the single-head points omega_h = +-1/sqrt(d), sum mu = +-mu*
    (closed form of docs/models/icl_regression.md §7.3, ``single_head_optimum``), also the model's own list."""
    p, *_ = icl._batch_params(ICL_TASK, 1, None, None)
    # same=1e-5: on the line of single-head equilibria (H = 2) roots polish to 1e-12 in the residual but only to
    # ~1e-6 in omega (the flow is flat along the line), so keys are compared at 1e-5
    found = fixed_points(icl_k.flow_rhs, p, _icl_starts(H, 300), kind="flow", canonical=_icl_canonical(H), same=1e-5)
    opt = icl.single_head_optimum(ICL_TASK)
    closed = np.array([np.zeros(2 * H), np.full(2 * H, 1.0), np.full(2 * H, -1.0)])
    closed[1:, :H] *= opt.omega
    closed[1:, H:] *= opt.mu  # the key holds the sum of mu over the equal heads, in every head's slot
    idx = _match(np.array([fp.key for fp in found]), closed, 1e-5)
    assert len(found) == 3 and sorted(idx.tolist()) == [0, 1, 2]
    listed = icl.fixed_points(ICL_TASK, H)
    key = _icl_canonical(H)
    ref = np.array([key(np.concatenate([q.omega, q.mu])) for q in listed])
    assert sorted(_match(ref, closed, 1e-5).tolist()) == [0, 1, 2]
    for fp, j in zip(found, idx):
        want = "saddle" if j == 0 else "attracting"
        if H == 1:
            assert fp.stability == want
            # the flow is -grad(F/2): its Jacobian is minus the model's Hessian (central differences, ~1e-9)
            q = next(q for q in listed if np.allclose(q.omega, fp.state[:H], atol=1e-6))
            np.testing.assert_allclose(np.sort(-fp.eigenvalues.real), q.hessian_eigenvalues, atol=1e-6)


def test_icl_map_step_size_limit_is_where_gd_stops_converging():
    """max_step of the GD map (lr at p[2]) = 2 / largest Hessian eigenvalue; GD just below converges to the point
    and just above leaves it (brute-force iteration of the engine kernel)."""
    H = 1
    lr = 0.05
    p, *_ = icl._batch_params(ICL_TASK, 1, None, None, lr)
    found = fixed_points(icl_k.gd_step, p, _icl_starts(H, 100), kind="map", step_param=2)
    best = next(fp for fp in found if fp.stability == "attracting")
    ref = next(
        q
        for q in icl.fixed_points(ICL_TASK, H)
        if q.stability == "minimum" and np.allclose(q.omega, best.state[:H], atol=1e-6)
    )
    limit = 2.0 / ref.hessian_eigenvalues[-1]
    # first order in lr: GD on F/2 is exactly x - lr grad, so the linearisation is exact up to the FD error ~1e-9
    assert best.max_step == pytest.approx(limit, rel=1e-6)
    for factor, converges in ((0.95, True), (1.05, False)):
        q, *_ = icl._batch_params(ICL_TASK, 1, None, None, factor * limit)
        x = best.state + 1e-6
        out = np.empty_like(x)
        for k in range(4000):
            icl_k.gd_step(k, x, q, out)
            x = out.copy()
        assert (np.max(np.abs(x - best.state)) < 1e-8) == converges


# ---------------------------------------------------------------------------------------------------------------
# The other accepted forms, Jacobians and basins on a double well dx/dt = x - x^3 (fixed points -1, 0, 1).
@numba.njit(cache=False)
def _well_rhs(t, x, p, out):
    out[0] = p[0] * x[0] - x[0] ** 3


@numba.njit(cache=False)
def _well_rhs_args(t, x, p, args, out):
    out[0] = p[0] * x[0] - args[0] * x[0] ** 3


def _well(x, p):
    return p[0] * x - x**3


STARTS = np.linspace(-2.0, 2.0, 41)[:, None]


@pytest.mark.parametrize("form", ["kernel", "kernel_args", "callable", "vectorized", "analytic", "complex"])
def test_every_form_finds_the_three_equilibria_and_their_stability(form):
    p = np.array([1.0])
    kw = {
        "kernel": dict(fn=_well_rhs),
        "kernel_args": dict(fn=_well_rhs_args, args=np.array([1.0])),
        "callable": dict(fn=_well),
        "vectorized": dict(fn=_well, vectorized=True),
        "analytic": dict(fn=_well, jacobian=lambda x, p: np.array([[p[0] - 3 * x[0] ** 2]])),
        "complex": dict(fn=_well, jacobian="complex"),
    }[form]
    fn = kw.pop("fn")
    pts = sorted(fixed_points(fn, p, STARTS, kind="flow", **kw), key=lambda fp: fp.state[0])
    np.testing.assert_allclose([fp.state[0] for fp in pts], [-1.0, 0.0, 1.0], atol=1e-12)
    assert [fp.stability for fp in pts] == ["attracting", "repelling", "attracting"]
    exact = np.array([-2.0, 1.0, -2.0])  # f'(x) = 1 - 3 x^2
    err = np.abs(np.array([fp.jacobian[0, 0] for fp in pts]) - exact)
    if form in ("analytic", "complex"):
        assert np.all(err < 1e-14) and all(fp.jacobian_error == 0 for fp in pts)
    else:
        # the stated error (h vs 2h) bounds the actual one up to rounding (~eps / h ~ 4e-11)
        assert all(e <= fp.jacobian_error + 1e-10 for e, fp in zip(err, pts))
    # Euler on the flow: |1 + h f'| < 1 at x = +-1 for h < 2 / 2 = 1
    assert pts[0].max_step == pytest.approx(1.0, rel=1e-8) and pts[1].max_step is None


def test_map_fixed_points_and_basins_by_brute_force():
    """The Euler map of the double well with h = 0.5: fixed points and basins (sign of the start) by iteration."""
    h = 0.5

    def euler(x, p):
        return x + p[0] * _well(x, np.array([1.0]))

    pts = fixed_points(euler, np.array([h]), STARTS, kind="map", step_param=0)
    assert len(pts) == 3
    attracting = [fp for fp in pts if fp.stability == "attracting"]
    assert sorted(round(fp.state[0], 12) for fp in attracting) == [-1.0, 1.0]
    assert all(fp.max_step == pytest.approx(1.0, rel=1e-6) for fp in attracting)
    starts = np.linspace(-1.3, 1.3, 27)[:, None]
    b = basins(euler, np.array([h]), starts, pts, kind="map", n_steps=200)
    want = np.sign(starts[:, 0])
    got = np.array([pts[i].state[0] if i >= 0 else np.nan for i in b.labels])
    np.testing.assert_array_equal(np.sign(got), want)  # the start at 0 stays at 0 (the repelling point)
    assert b.fractions.sum() == pytest.approx(1.0)
    # the engine path (numba flow kernel) gives the same basins
    flow_pts = fixed_points(_well_rhs, np.array([1.0]), STARTS, kind="flow")
    fb = basins(_well_rhs, np.array([1.0]), starts, flow_pts, kind="flow", t_end=50.0)
    got = np.array([flow_pts[i].state[0] for i in fb.labels])
    np.testing.assert_array_equal(np.sign(got), want)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kind="cycle"), "kind"),
        (dict(tol=0.0), "tol"),
        (dict(same=-1.0), "same"),
        (dict(max_iter=0), "max_iter"),
        (dict(jacobian="forward"), "jacobian"),
        (dict(kind="flow", step_param=0), "step_param"),
        (dict(step_param=3), "step_param"),
        (dict(neutral_tol=-1.0), "neutral_tol"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fixed_points(_well, np.array([1.0]), STARTS, **kwargs)


def test_bad_starts_and_function_forms_are_refused():
    with pytest.raises(ValueError, match="starts"):
        fixed_points(_well, np.array([1.0]), np.array([[np.nan]]))
    with pytest.raises(ValueError, match="args"):
        fixed_points(_well_rhs_args, np.array([1.0]), STARTS, kind="flow")
    with pytest.raises(ValueError, match="fn"):
        fixed_points(lambda a, b, c: a, np.array([1.0]), STARTS)
