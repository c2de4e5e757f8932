"""Tests of closedform.group_sparse (spec token_selection.md, Study B).

Independent references used here:
* finite differences of the numpy loss for the full-model gradients;
* an explicit per-draw Python loop for the forward pass;
* full-matrix numpy GD (projected, or on a sample symmetrised under the whole invariance group) for the numba
  reduced map (exact in finite samples, 1e-12);
* full-model Monte Carlo with per-draw standard errors for the closed-form steps 1 and 2 (5 SE + negative controls);
* a Gauss-Legendre x Gauss-Hermite product rule for the adaptive step-2 quadrature;
* the public reference values of spec Sec. 4 with their stated tolerances.
"""

from __future__ import annotations

import itertools
import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from closedform import group_sparse as gs
from dynamics import DivergenceError, SaveAt
from dynamics.testing import assert_mc_close, assert_mc_rejects, mean_and_se

# ----------------------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------------------


def _rotation_to(v_star):
    """An orthogonal Q with Q e_1 = v_star (Householder reflection)."""
    d = v_star.size
    e1 = np.zeros(d)
    e1[0] = 1.0
    w = e1 - v_star
    if np.linalg.norm(w) < 1e-14:
        return np.eye(d)
    w /= np.linalg.norm(w)
    return np.eye(d) - 2.0 * np.outer(w, w)


def _symmetrised_sample(spec, n0, seed):
    """n0 draws closed under the invariance group of Sec. B.3: (X, y) -> (-X, -y), signed permutations of the d-1
    coordinates orthogonal to v*, permutations of the groups other than j*; then rotated so that v* is generic."""
    rng = np.random.default_rng(seed)
    d, D, js = spec.d, spec.D, spec.jstar_index
    v_star = rng.standard_normal(d)
    v_star /= np.linalg.norm(v_star)
    X0 = spec.sigma_x * rng.standard_normal((n0, d, D))  # coordinates in the basis (v*, perp)
    others = [j for j in range(D) if j != js]
    copies = []
    for sign in (1.0, -1.0):
        for perm in itertools.permutations(range(1, d)):
            for flips in itertools.product((1.0, -1.0), repeat=d - 1):
                for cperm in itertools.permutations(others):
                    cols = list(range(D))
                    for j_from, j_to in zip(others, cperm):
                        cols[j_to] = j_from
                    Xc = X0[:, :, cols].copy()
                    Xc[:, 1:, :] = Xc[:, list(perm), :] * np.asarray(flips)[None, :, None]
                    copies.append(sign * Xc)
    Xb = np.concatenate(copies)
    y = np.where(Xb[:, 0, js] >= 0.0, 1.0, -1.0)
    X = np.einsum("ab,nbj->naj", _rotation_to(v_star), Xb)
    return gs.GroupSparseSample(X=X, y=y, v_star=v_star, n_unique=n0)


def _increments(spec, v_star, gv, gW):
    """Per-draw reduced increments -eta * (projections of the full gradient) (Sec. B.3), written out here from the
    definitions rather than through the module's probes."""
    d, D, js, eta = spec.d, spec.D, spec.jstar_index, spec.eta
    P = np.outer(v_star, v_star)
    g11 = gW[:, :d, :d]
    g22 = gW[:, d:, d:]
    rows_other = [i for i in range(D) if i != js]
    out = {
        "beta": -eta * gv[:, :d] @ v_star,
        "w_par": -eta * np.einsum("a,nab,b->n", v_star, g11, v_star),
        "w_perp": -eta * np.einsum("ab,nab->n", np.eye(d) - P, g11) / (d - 1),
        "W22_row_jstar": -eta * g22[:, js, :].mean(axis=1),  # every column of row j*
        "W22_rows_other": -eta * g22[:, rows_other, :].mean(axis=(1, 2)),
        "m2": -eta * g22[:, js, rows_other].mean(axis=1),
        "m3": -eta * g22[:, rows_other, js].mean(axis=1),
    }
    return out


def _full_model_increments(spec, v, W, n, seed, chunk=20000):
    """Per-draw reduced increments of one full-model GD step at (v, W), on n fresh unique draws (no mirror)."""
    rng = np.random.default_rng(seed)
    v_star = np.zeros(spec.d)
    v_star[0] = 1.0  # G.B allows v* = e_1 for the step-2 checks (the values do not depend on v*)
    parts = []
    for start in range(0, n, chunk):
        s = gs.sample(spec, min(chunk, n - start), rng, v_star=v_star)
        _, gv, gW = gs.full_gradient(v, W, s.X, s.y, per_sample=True)
        parts.append(_increments(spec, v_star, gv, gW))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, v_star


def _product_rule_step2(spec, g_of, n_leg=200, n_herm=120):
    """2 E[lambda g(A, R) 1{A > 0}] by Gauss-Legendre on A in [0, 12 sigma_x] x Gauss-Hermite in R.

    An independent quadrature rule for the step-2 integrals of Sec. B.3 (the neglected A-tail is < exp(-72))."""
    b1 = gs.beta_step1(spec)
    sx, D = spec.sigma_x, spec.D
    xa, wa = np.polynomial.legendre.leggauss(n_leg)
    A = 6.0 * sx * (xa + 1.0)
    wA = 6.0 * sx * wa * np.exp(-0.5 * (A / sx) ** 2) / (sx * math.sqrt(2.0 * math.pi))
    xr, wr = np.polynomial.hermite_e.hermegauss(n_herm)
    R = math.sqrt(D - 1.0) * sx * xr
    wR = wr / math.sqrt(2.0 * math.pi)
    AA, RR = np.meshgrid(A, R, indexing="ij")
    lam = expit(-b1 * (AA + RR))
    return 2.0 * float(np.einsum("i,j,ij->", wA, wR, lam * g_of(AA, RR)))


# ----------------------------------------------------------------------------------------------------------------------
# spec, bad input, divergence
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"d": 1}, "d"),
        ({"D": 2}, "D"),
        ({"D": 1}, "D"),
        ({"jstar": 0}, "jstar"),
        ({"jstar": 7, "D": 6}, "jstar"),
        ({"sigma_x": 0.0}, "sigma_x"),
        ({"sigma_x": -1.0}, "sigma_x"),
        ({"eta": 0.0}, "eta"),
        ({"eta": float("nan")}, "eta"),
        ({"d": 2.5}, "d"),
    ],
)
def test_spec_rejects_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gs.GroupSparseTask(**kwargs)


def test_functions_reject_bad_input():
    spec = gs.GroupSparseTask(d=2, D=4)
    with pytest.raises(ValueError, match="n"):
        gs.sample(spec, 0, 1)
    with pytest.raises(ValueError, match="v_star"):
        gs.sample(spec, 5, 1, v_star=np.zeros(2))
    with pytest.raises(ValueError, match="v_star"):
        gs.sample(spec, 5, 1, v_star=np.ones(3))
    with pytest.raises(ValueError, match="n_samples"):
        gs.map(spec, 3, n_samples=0, rng=1)
    with pytest.raises(ValueError, match="n_steps"):
        gs.map(spec, -1, n_samples=10, rng=1)
    rs = gs.population_sample(spec, 10, 1)
    with pytest.raises(ValueError, match="state"):
        gs.reduced_gradient(spec, np.full(8, np.nan), rs)
    with pytest.raises(ValueError, match="state"):
        gs.reduced_update(spec, np.zeros(7), rs)
    with pytest.raises(ValueError, match="reduced sample"):
        gs.reduced_gradient(gs.GroupSparseTask(d=2, D=5), np.zeros(8), rs)
    with pytest.raises(ValueError, match="t"):
        gs.step_closed_form(spec, 3)
    with pytest.raises(ValueError, match="eps_B"):
        gs.theorem_horizon(spec, 0.0)
    with pytest.raises(ValueError, match="quantile"):
        gs.reduced_evaluate(spec, np.zeros(8), rs, quantile=1.5)
    with pytest.raises(ValueError, match="W"):
        gs.forward(np.zeros(6), np.zeros((5, 5)), np.zeros((3, 2, 4)))


def test_divergence_raises_with_step_and_variable():
    # eta = 1e300: beta^(1) ~ 4e299 is finite, the next scores overflow, so the state turns non-finite at step 2 or 3.
    spec = gs.GroupSparseTask(d=2, D=4, eta=1e300)
    with pytest.raises(DivergenceError) as info:
        gs.map(spec, 5, n_samples=50, rng=1, saveat=SaveAt(final=True), with_se=False)
    assert info.value.step is not None and 1 <= info.value.step <= 5
    s = gs.sample(spec, 50, 1)
    with pytest.raises(DivergenceError) as info:
        gs.full_gd(spec, s, 5, saveat=SaveAt(final=True))
    assert info.value.variable in ("v", "W") and 1 <= info.value.step <= 5


# ----------------------------------------------------------------------------------------------------------------------
# the full model
# ----------------------------------------------------------------------------------------------------------------------


def test_forward_matches_explicit_loop():
    """f = sum_j v^T H softmax(H^T W h_j) written per draw and per query (Sec. B.2)."""
    rng = np.random.default_rng(3)
    d, D = 3, 5
    X = rng.standard_normal((4, d, D))
    v = rng.standard_normal(d + D)
    W = rng.standard_normal((d + D, d + D)) * 0.5
    f, S = gs.forward(v, W, X)
    for k in range(X.shape[0]):
        H = np.vstack([X[k], np.eye(D)])
        total = 0.0
        for j in range(D):
            z = np.array([H[:, i] @ W @ H[:, j] for i in range(D)])
            w = np.exp(z - z.max())
            w /= w.sum()
            np.testing.assert_allclose(S[k, :, j], w, rtol=1e-13, atol=1e-15)  # round-off of a D-term softmax
            total += sum(w[i] * (v @ H[:, i]) for i in range(D))
        assert abs(f[k] - total) <= 1e-12 * (1 + abs(total))  # round-off of the same sums in another order


def test_full_gradient_matches_finite_differences():
    rng = np.random.default_rng(4)
    spec = gs.GroupSparseTask(d=3, D=4)
    s = gs.sample(spec, 40, rng)
    v = rng.standard_normal(spec.dim) * 0.7
    W = rng.standard_normal((spec.dim, spec.dim)) * 0.3
    loss, gv, gW = gs.full_gradient(v, W, s.X, s.y)
    assert abs(loss - gs.logistic_loss(gs.forward(v, W, s.X)[0], s.y).mean()) < 1e-14
    h = 1e-5
    # central differences: truncation O(h^2 L''') ~ 1e-10, round-off ~ eps L / h ~ 1e-11; atol 1e-8 covers both.
    for idx in range(spec.dim):
        e = np.zeros(spec.dim)
        e[idx] = h
        fd = (gs.full_gradient(v + e, W, s.X, s.y)[0] - gs.full_gradient(v - e, W, s.X, s.y)[0]) / (2 * h)
        assert abs(fd - gv[idx]) < 1e-8
    for a, b in [(0, 0), (1, 2), (0, 4), (5, 1), (6, 6), (3, 6)]:
        E = np.zeros_like(W)
        E[a, b] = h
        fd = (gs.full_gradient(v, W + E, s.X, s.y)[0] - gs.full_gradient(v, W - E, s.X, s.y)[0]) / (2 * h)
        assert abs(fd - gW[a, b]) < 1e-8
    # per-sample gradients average to the mean gradient
    _, gvs, gWs = gs.full_gradient(v, W, s.X, s.y, per_sample=True)
    np.testing.assert_allclose(gvs.mean(0), gv, atol=1e-14)
    np.testing.assert_allclose(gWs.mean(0), gW, atol=1e-14)


def test_sampler_follows_recipe_GB():
    """Appendix G.B: v* drawn first and normalised, then X; labels sign(<x_{j*}, v*>) with sign(0) = +1; mirror."""
    spec = gs.GroupSparseTask(d=3, D=5, sigma_x=2.0, jstar=4)
    s = gs.sample(spec, 7, 11, mirror=True)
    rng = np.random.default_rng(11)
    v = rng.standard_normal(3)
    v /= np.linalg.norm(v)
    X = 2.0 * rng.standard_normal((7, 3, 5))
    np.testing.assert_array_equal(s.v_star, v)
    np.testing.assert_array_equal(s.X[:7], X)
    np.testing.assert_array_equal(s.X[7:], -X)
    np.testing.assert_array_equal(s.y[:7], np.where(X[:, :, 3] @ v >= 0, 1.0, -1.0))
    np.testing.assert_array_equal(s.y[7:], -s.y[:7])
    assert s.n_unique == 7 and s.mirrored


# ----------------------------------------------------------------------------------------------------------------------
# probes and projection (Sec. B.3.1)
# ----------------------------------------------------------------------------------------------------------------------


@settings(max_examples=25)
@given(
    state=st.lists(st.floats(-5, 5), min_size=8, max_size=8),
    seed=st.integers(0, 10_000),
    d=st.integers(2, 4),
    D=st.integers(3, 6),
)
def test_probes_invert_embed_state(state, seed, d, D):
    spec = gs.GroupSparseTask(d=d, D=D, jstar=1 + seed % D)
    rng = np.random.default_rng(seed)
    v_star = rng.standard_normal(d)
    v_star /= np.linalg.norm(v_star)
    v, W = gs.embed_state(spec, np.array(state), v_star)
    p = gs.order_params(spec, v, W, v_star)
    np.testing.assert_allclose([p[k] for k in gs.STATE_NAMES], state, atol=1e-12)  # round-off of a d x d product
    assert p["off"] < 1e-14 and p["v_pos_norm"] == 0.0 and p["w_cross_norm"] == 0.0
    # projection: idempotent and orthogonal (the residual is orthogonal to the family)
    v2 = rng.standard_normal(spec.dim)
    W2 = rng.standard_normal((spec.dim, spec.dim))
    vp, Wp = gs.project(spec, v2, W2, v_star)
    vpp, Wpp = gs.project(spec, vp, Wp, v_star)
    np.testing.assert_allclose(vpp, vp, atol=1e-13)
    np.testing.assert_allclose(Wpp, Wp, atol=1e-13)
    inner = (v2 - vp) @ vp + np.sum((W2 - Wp) * Wp)
    assert abs(inner) < 1e-11
    assert gs.order_params(spec, v2, W2, v_star)["off"] > 0.1


# ----------------------------------------------------------------------------------------------------------------------
# reduced map = full-matrix GD (exact in finite samples)
# ----------------------------------------------------------------------------------------------------------------------


def test_reduced_map_equals_projected_full_gd():
    """On any finite sample the reduced map is exactly projected full GD (Sec. B.3): agreement to 1e-12."""
    spec = gs.GroupSparseTask(d=3, D=5, sigma_x=1.3, jstar=3, eta=0.8)
    s = gs.sample(spec, 300, 21)
    rs = gs.reduce_sample(s)
    steps = [0, 1, 2, 5, 20, 40]
    run = gs.full_gd(spec, s, 40, project_steps=True, saveat=SaveAt(steps=steps))
    traj = gs.map(spec, 40, rs=rs, saveat=SaveAt(steps=steps), with_se=False)
    Yf = run.trajectory.states()[0]
    Yr = traj.states()[0]
    np.testing.assert_allclose(Yr, Yf, rtol=0, atol=1e-12)
    # the iterate path equals repeated single updates, and the derived loss/attention equal the full model's
    x = np.zeros(8)
    for _ in range(40):
        x = gs.reduced_update(spec, x, rs)
    np.testing.assert_allclose(Yr[-1], x, rtol=0, atol=1e-14)
    for name in ("loss", "accuracy", "attn_jstar", "attn_jstar_q"):
        np.testing.assert_allclose(traj[name].values[0], run.trajectory[name].values[0], rtol=0, atol=1e-12)
    assert traj.attrs["model"] == "group_sparse"
    np.testing.assert_allclose(traj.time.values, spec.eta * np.array(steps))


def test_full_gd_stays_on_family_on_symmetrised_sample():
    """Unprojected full GD from zero keeps every invariance of Sec. B.3 when the sample carries the whole symmetry
    group, and equals the reduced map on it (1e-12)."""
    spec = gs.GroupSparseTask(d=3, D=4, sigma_x=1.0, jstar=2, eta=0.5)
    s = _symmetrised_sample(spec, 12, 5)  # 12 draws x 96 group images
    steps = [0, 1, 2, 3, 10, 25]
    run = gs.full_gd(spec, s, 25, saveat=SaveAt(steps=steps))
    tr = run.trajectory
    assert np.all(tr["off"].values <= 1e-12)
    assert np.all(tr["v_pos_norm"].values <= 1e-13) and np.all(tr["w_cross_norm"].values <= 1e-13)
    traj = gs.map(spec, 25, rs=gs.reduce_sample(s), saveat=SaveAt(steps=steps), with_se=False)
    np.testing.assert_allclose(traj.states()[0], tr.states()[0], rtol=0, atol=1e-12)
    assert abs(tr["w_par"].values[0, -1]) > 1e-3  # the run has left zero (the test is not vacuous)


def test_full_gd_mirrored_sample_kills_odd_parts():
    """(X, y) -> (-X, -y) alone forces v_pos = 0 and W12 = W21 = 0 exactly along full GD (Sec. B.3 (i)), while the
    rotation/permutation invariances hold only in population (off > 0 on a finite sample)."""
    spec = gs.GroupSparseTask(d=3, D=4)
    s = gs.sample(spec, 200, 8, mirror=True)
    tr = gs.full_gd(spec, s, 60, saveat=SaveAt(steps=[0, 30, 60])).trajectory
    assert np.all(tr["v_pos_norm"].values <= 1e-14) and np.all(tr["w_cross_norm"].values <= 1e-14)
    assert tr["off"].values[0, -1] > 1e-6


# ----------------------------------------------------------------------------------------------------------------------
# closed-form first two steps (Sec. B.3)
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_step1_closed_form_vs_full_model_mc():
    spec = gs.GroupSparseTask(d=2, D=6, sigma_x=1.4, eta=0.7)
    dim = spec.dim
    inc, _ = _full_model_increments(spec, np.zeros(dim), np.zeros((dim, dim)), 40000, 31)
    m, se = mean_and_se(inc["beta"])
    assert_mc_close(m, se, gs.beta_step1(spec), what="beta^(1)")
    # negative control: E[sign(<x, v*>) x] without the factor 1/2 of lambda = 1/2 (CV 2.9 per draw -> 1.5% SE)
    assert_mc_rejects(m, se, spec.eta * spec.sigma_x * math.sqrt(2 / math.pi), what="beta^(1) without lambda=1/2")
    # W^(1) = 0 exactly: u = 0 at v = 0 makes every G_ij vanish
    assert np.all(inc["w_par"] == 0) and np.all(inc["W22_row_jstar"] == 0)
    np.testing.assert_array_equal(gs.step_closed_form(spec, 1), [gs.beta_step1(spec)] + [0.0] * 7)


@pytest.mark.statistical
def test_step2_closed_form_vs_full_model_mc():
    """One full-model GD step from the exact theta^(1) = ([beta^(1) v*; 0], 0) on 1e5 fresh draws (Sec. B.3)."""
    spec = gs.GroupSparseTask(d=2, D=6, sigma_x=1.0, eta=0.5)
    b1 = gs.beta_step1(spec)
    v_star = np.array([1.0, 0.0])
    v1 = np.concatenate([b1 * v_star, np.zeros(spec.D)])
    inc, _ = _full_model_increments(spec, v1, np.zeros((spec.dim, spec.dim)), 100000, 41)
    theta2 = gs.step_closed_form(spec, 2)
    e = gs.step2_expectations(spec)
    key_js = spec.eta * b1 * e["m_star"] / spec.D
    atol = 1e-10  # quadrature accuracy (epsabs 1e-14 on O(1) integrands; checked below against a product rule)
    checks = {
        "beta": theta2[0] - b1,
        "w_par": theta2[1],
        "w_perp": theta2[2],
        "W22_row_jstar": key_js,
        "W22_rows_other": -key_js / (spec.D - 1),
        "m2": theta2[4],
        "m3": theta2[5],
    }
    for name, value in checks.items():
        m, se = mean_and_se(inc[name])
        assert_mc_close(m, se, value, atol=atol, what=f"step-2 increment {name}")
    # negative controls, each a plausible bug:
    m, se = mean_and_se(inc["W22_row_jstar"])
    assert_mc_rejects(m, se, spec.eta * b1 * e["m_star"], what="W22 row j* without the 1/D of S = 1/D")
    m, se = mean_and_se(inc["m3"])
    assert_mc_rejects(m, se, key_js, what="transposed W22 (column j* gains instead of row j*)")
    m, se = mean_and_se(inc["beta"])
    assert_mc_rejects(m, se, spec.eta * _product_rule_step2(spec, lambda A, R: A), what="beta step without R")
    D = spec.D
    wrong = (
        spec.eta
        * b1
        * _product_rule_step2(spec, lambda A, R: (A + R) / D * (A * A + R * R / (D - 1) - (A + R) ** 2 / D))
    )
    m, se = mean_and_se(inc["w_par"])
    assert_mc_rejects(m, se, wrong, what="w_par without the (D-2) sigma_x^2 term of E[sum (a_i - abar)^2 | A, R]")


@pytest.mark.parametrize("D, sigma_x, eta", [(6, 1.0, 0.5), (4, 1.7, 1.3), (9, 0.6, 2.0)])
def test_step2_quadrature_vs_product_rule(D, sigma_x, eta):
    """The adaptive quadrature of the step-2 integrals against an independent Gauss product rule (rel 1e-10)."""
    spec = gs.GroupSparseTask(d=2, D=D, sigma_x=sigma_x, eta=eta)
    e = gs.step2_expectations(spec)
    ref = {
        "e_beta": _product_rule_step2(spec, lambda A, R: A + R),
        "m_star": _product_rule_step2(spec, lambda A, R: A - (A + R) / D),
        "e_wpar": _product_rule_step2(
            spec, lambda A, R: (A + R) / D * (A * A + R * R / (D - 1) + (D - 2) * sigma_x**2 - (A + R) ** 2 / D)
        ),
    }
    for k, val in ref.items():
        assert abs(e[k] - val) <= 1e-10 * max(1.0, abs(val)), k  # both rules converge to ~1e-13 here


# ----------------------------------------------------------------------------------------------------------------------
# public reference values (spec Sec. 4)
# ----------------------------------------------------------------------------------------------------------------------


def test_reference_beta1():
    spec = gs.GroupSparseTask(d=3, D=6, eta=0.5, sigma_x=1.0)
    assert abs(gs.beta_step1(spec) - 0.19947114020) <= 1e-12 * 0.2 + 5e-12  # rel 1e-12 + the 11 printed digits


@pytest.mark.parametrize("d", [2, 5])
def test_reference_step2(d):
    """Sec. 4 row 'B step 2' (D = 6, eta = 0.5, sigma_x = 1, any d): quadrature, rel 1e-6."""
    spec = gs.GroupSparseTask(d=d, D=6, eta=0.5, sigma_x=1.0, jstar=2)
    th = gs.step_closed_form(spec, 2)
    ref = {
        0: 0.2573509279,
        1: 4.094909402e-3,
        3: 5.526213302e-3,
        4: 5.526213302e-3,
        5: -1.105242660e-3,
        6: -1.105242660e-3,
        7: -1.105242660e-3,
    }
    for idx, val in ref.items():
        assert abs(th[idx] - val) <= 1e-6 * abs(val), gs.STATE_NAMES[idx]
    assert th[2] == 0.0
    v, W = gs.embed_state(spec, th, np.eye(d)[0])
    W22 = W[d:, d:]
    np.testing.assert_allclose(W22[1], 5.526213302e-3, rtol=1e-6)  # row of key j* = 2, every query column
    np.testing.assert_allclose(np.delete(W22, 1, axis=0), -1.105242660e-3, rtol=1e-6)


@pytest.mark.statistical
def test_reference_step2_two_full_gd_steps_note_b():
    """Sec. 4 note (b): two full GD steps of Sec. B.2 on n unique draws + mirror, relative tolerance 5 CV/sqrt(n)
    with the spec's measured per-draw CVs (3.1 beta^(2); 2.8 W22 row j* and mean of the other rows; 24 w_par^(2));
    |w_perp^(2)| <= 0.25/sqrt(n)."""
    n = 20000
    spec = gs.GroupSparseTask(d=2, D=6, eta=0.5, sigma_x=1.0, jstar=2)
    s = gs.sample(spec, n, 7, mirror=True)
    run = gs.full_gd(spec, s, 2, saveat=SaveAt(steps=[2]))
    v, W = run.v, run.W
    p = gs.order_params(spec, v, W, s.v_star)
    tol = lambda cv: 5 * cv / math.sqrt(n)  # noqa: E731
    assert abs(p["beta"] / 0.2573509279 - 1) <= tol(3.1)
    W22 = W[spec.d :, spec.d :]
    assert abs(W22[1].mean() / 5.526213302e-3 - 1) <= tol(2.8)
    assert abs(np.delete(W22, 1, axis=0).mean() / -1.105242660e-3 - 1) <= tol(2.8)
    assert abs(p["w_par"] / 4.094909402e-3 - 1) <= tol(24)
    assert abs(p["w_perp"]) <= 0.25 / math.sqrt(n)
    assert p["v_pos_norm"] <= 1e-15 and p["w_cross_norm"] <= 1e-15  # mirror: exactly zero up to round-off


@pytest.mark.slow
def test_reference_long_run_exact_recipe():
    """Sec. 4 row 'B long run': d=2, D=4, n = 4000 + mirror (G.B seed 0), full GD without projection, T = 1e4;
    exact recipe: rel 1e-6 (values printed to 4-6 digits: half a unit of the last digit is added)."""
    spec = gs.GroupSparseTask(d=2, D=4, eta=0.5, sigma_x=1.0, jstar=2)
    s = gs.sample(spec, 4000, 0, mirror=True)
    tr = gs.full_gd(spec, s, 10000, saveat=SaveAt(steps=[10000])).trajectory
    L = float(tr["loss"].values[0, -1])
    assert abs(L - 0.0125833) <= 1e-6 * 0.0125833 + 5e-8
    assert abs(float(gs.loss_rate_statistic(spec, 1e4, L)) - 1.0844) <= 1e-6 + 5e-5
    assert abs(float(tr["attn_jstar"].values[0, -1]) - 0.9809) <= 1e-6 + 5e-5


# ----------------------------------------------------------------------------------------------------------------------
# Monte Carlo gradients and their standard errors
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_reduced_gradient_se_and_step2():
    """The reduced MC gradient at theta^(1) reproduces the closed-form step 2 within 5 of its reported SE, and two
    independent samples agree within 5 combined SE at a generic state."""
    spec = gs.GroupSparseTask(d=3, D=6, eta=0.5, sigma_x=1.0)
    rs = gs.population_sample(spec, 50000, 12)
    theta1 = gs.step_closed_form(spec, 1)
    grad, se = gs.reduced_gradient(spec, theta1, rs)
    scale = np.array([1, 1, 1 / (spec.d - 1)] + list(1 / spec.orbit_sizes)) * spec.eta
    inc, inc_se = -scale * grad, scale * se
    theta2 = gs.step_closed_form(spec, 2)
    assert_mc_close(inc, inc_se, theta2 - theta1, atol=1e-10, what="reduced MC step 2")
    assert_mc_rejects(inc[3:], inc_se[3:], (theta2 - theta1)[3:] * spec.D, what="step 2 W22 times D")
    state = np.array([1.5, -0.4, 0.2, 1.0, 0.8, -0.3, 0.1, -0.2])
    g1, s1 = gs.reduced_gradient(spec, state, gs.population_sample(spec, 20000, 1))
    g2, s2 = gs.reduced_gradient(spec, state, gs.population_sample(spec, 20000, 2))
    assert_mc_close(g1 - g2, np.sqrt(s1**2 + s2**2), 0.0, what="two independent MC gradients")


# ----------------------------------------------------------------------------------------------------------------------
# theorem checks (Sec. B.4) at small sizes
# ----------------------------------------------------------------------------------------------------------------------


def test_finite_sample_gd_selects_jstar_and_aligns_v():
    """Full GD on raw (unmirrored) samples, d=2, D=4, n=1000, T=1000: cos(v_x, v*) > 0.999, mean attention on
    j* > 0.9 (Sec. B.5 item 1; Sec. B.6 reports 0.947 at T=1000 with n = 4000 + mirror)."""
    spec = gs.GroupSparseTask(d=2, D=4, eta=0.5, sigma_x=1.0, jstar=2)
    s = gs.sample(spec, 1000, 3)
    tr = gs.full_gd(spec, s, 1000, saveat=SaveAt(steps=[0, 1000])).trajectory
    assert tr["cos_vx_vstar"].values[0, -1] > 0.999
    assert tr["attn_jstar"].values[0, -1] > 0.9
    assert tr["loss"].values[0, 0] == pytest.approx(math.log(2), abs=1e-15)  # f = 0 at v = 0
    assert tr["loss"].values[0, -1] < 0.05


def test_population_dynamics_attention_and_loss():
    """Reduced population dynamics (MC n = 2000): loss leaves the log 2 plateau, E[S_{j*,j}] > 0.9 at T = 1000,
    W22 favours key j* in every column (gap_ss, gap_s > 0), and D L T^{1/3} is O(1) (Sec. B.4 item 3)."""
    spec = gs.GroupSparseTask(d=2, D=4, eta=0.5, sigma_x=1.0, jstar=2)
    tr = gs.map(spec, 1000, n_samples=2000, rng=0, saveat=SaveAt(steps=[0, 2, 100, 1000]))
    assert tr["loss"].values[0, 0] == pytest.approx(math.log(2), abs=1e-15)
    assert tr["attn_jstar"].values[0, -1] > 0.9
    assert tr["gap_ss"].values[0, -1] > 0 and tr["gap_s"].values[0, -1] > 0
    assert np.all(np.diff(tr["loss"].values[0]) < 0)
    stat = float(gs.loss_rate_statistic(spec, 1000, tr["loss"].values[0, -1]))
    assert 0.5 < stat < 3.0  # Sec. B.6: 1.16 at (2, 4), T = 1000; Theta(1) means bounded away from 0 and infinity
    assert np.all(tr["se_grad_beta"].values > 0)
    # step 2 of the MC reduced map matches the closed form within its MC error (CV 3.1 for beta^(2), Sec. 4 (b))
    assert abs(tr["beta"].values[0, 1] / gs.step_closed_form(spec, 2)[0] - 1) < 5 * 3.1 / math.sqrt(2000)


@pytest.mark.slow
def test_population_loss_rate_T13():
    """Sec. B.4 item 3 / Sec. 4 note (c): D L T^{1/3} at T = 1e4 within 0.3 of 1.09 (5 seed-to-seed SD), reduced
    dynamics on 4000 MC draws; and the loss falls by the factor 10^{1/3} between T = 1e3 and 1e4 within 25%."""
    spec = gs.GroupSparseTask(d=2, D=4, eta=0.5, sigma_x=1.0, jstar=2)
    tr = gs.map(spec, 10000, n_samples=4000, rng=0, saveat=SaveAt(steps=[1000, 10000]), with_se=False)
    L = tr["loss"].values[0]
    assert abs(float(gs.loss_rate_statistic(spec, 1e4, L[-1])) - 1.09) <= 0.3
    assert abs((L[0] / L[1]) / 10 ** (1 / 3) - 1) < 0.25
    assert tr["attn_jstar"].values[0, -1] > 0.98


def test_theorem_prediction_functions():
    spec = gs.GroupSparseTask(d=2, D=5)
    assert gs.theorem_horizon(spec, 1.0) == 125.0  # D^3 dominates for eps_B >= 1/D^2
    assert gs.theorem_horizon(spec, 1e-3) == pytest.approx(1 / (125 * 1e-9))
    assert gs.theorem_loss_order(spec, 1.0) == pytest.approx(1 / 25) and gs.theorem_loss_order(spec, 1e-3) == 1e-3
    assert gs.attention_lower_bound(spec) == pytest.approx(1 - math.exp(-5))
    assert gs.direction_error_bound(spec, 0.1) == pytest.approx(0.1 * 5 * math.exp(-math.sqrt(5)))
    t = np.array([8.0, 1000.0])
    np.testing.assert_allclose(gs.loss_rate_statistic(spec, t, gs.predicted_loss(spec, t, const=1.2)), 1.2)
    assert spec.time_of_step(10) == pytest.approx(5.0) and spec.step_of_time(5.0) == pytest.approx(10.0)


def test_downstream_bounds():
    spec = gs.GroupSparseTask(d=4, D=6)
    n = np.array([25.0, 800.0])
    b = gs.downstream_error_bound(spec, n, gamma=0.1, delta=0.05)
    np.testing.assert_allclose(b, 10 * np.log(n) ** 2 / (0.01 * n) + math.log(20) / n, rtol=1e-14)
    assert gs.linear_sample_complexity(spec, 0.1) == pytest.approx(240.0)
    with pytest.raises(ValueError, match="delta"):
        gs.downstream_error_bound(spec, 100, gamma=0.1, delta=1.0)
    with pytest.raises(ValueError, match="n"):
        gs.downstream_error_bound(spec, 1, gamma=0.1, delta=0.1)


def test_reduced_gd_batched_eta_equals_per_configuration_runs():
    """Issue 14 item 5: eta as an array (the map's only task number besides the sample); one call equals the
    per-eta calls on the same population proxy."""
    spec = gs.GroupSparseTask(d=2, D=4, sigma_x=1.0, jstar=2, eta=0.5)
    rs = gs.population_sample(spec, 300, 1)
    etas = [0.1, 0.5, 1.5]
    batch = gs.map(spec, 15, rs=rs, eta=etas, with_se=False, saveat=SaveAt(every=5))
    for i, e in enumerate(etas):
        one = gs.map(dataclasses.replace(spec, eta=e), 15, rs=rs, with_se=False, saveat=SaveAt(every=5))
        np.testing.assert_array_equal(batch.states()[i], one.states()[0])
    with pytest.raises(ValueError, match="eta"):
        gs.map(spec, 2, rs=rs, eta=[np.nan])


def test_map_over_a_sequence_of_samples_equals_the_per_sample_calls():
    """Independent reference: one call per ReducedSample (the pre-batching API); bit-equal (same engine, same
    numbers)."""
    task = gs.GroupSparseTask(d=2, D=4, eta=0.5, sigma_x=1.0, jstar=2)
    samples = [gs.population_sample(task, 60, s) for s in range(3)]
    sv = SaveAt(steps=(0, 1, 3))
    batched = gs.map(task, 3, rs=samples, saveat=sv, with_se=False)
    assert batched.sizes["trajectory"] == 3 and list(batched["sample"].values) == [0, 1, 2]
    for i, r in enumerate(samples):
        one = gs.map(task, 3, rs=r, saveat=sv, with_se=False)
        for name in gs.STATE_NAMES + ("loss", "gap_s"):
            np.testing.assert_array_equal(batched[name].values[i], one[name].values[0])
    with pytest.raises(TypeError, match=r"rs\[0\]"):
        gs.map(task, 3, rs=[object()])
