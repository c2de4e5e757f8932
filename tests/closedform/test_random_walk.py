"""Tests of closedform.random_walk (spec token_selection.md, Study C) against independent computations.

Independent references used here: exact enumeration of the walk law (finite sums, exact to round-off), Monte Carlo
with SE-based tolerances plus negative controls, central finite differences of the loss, a literal matrix
construction of the model f = V X softmax(X~^T W x~_N), the public reference values of spec Sec. 4 / Appendix R, and
the theorems of Sec. C.6 at small sizes.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import softmax

import dynamics
from closedform import random_walk as rw
from dynamics import SaveAt
from dynamics.testing import assert_mc_close, assert_mc_rejects

# ---------------------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(K=2, N=11, p=0.5, M=40), "K"),
        (dict(K=1, N=11, p=0.5, M=40), "K"),
        (dict(K=5, N=1, p=0.5, M=40), "N"),
        (dict(K=5, N=11, p=0.5, M=11), "M"),  # the sine code needs M >= N + 1 (Sec. C.2)
        (dict(K=5, N=11, p=-0.1, M=40), "p"),
        (dict(K=5, N=11, p=1.5, M=40), "p"),
        (dict(K=5, N=11, p=0.5, M=40, eta=0.0), "eta"),
        (dict(K=5, N=11, p=0.5, M=40, eps=-1.0), "eps"),
        (dict(K=5, N=11, p=0.5, M=40, rho=0.0), "rho"),
        (dict(K=5.5, N=11, p=0.5, M=40), "K"),
    ],
)
def test_spec_rejects_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        rw.RandomWalkTask(**kwargs)


def test_bad_sample_counts_and_states():
    spec = rw.RandomWalkTask(K=5, N=6, M=20, p=0.5)
    with pytest.raises(ValueError, match="^n "):
        rw.sample_walks(spec, 0, 0)
    with pytest.raises(ValueError, match="^walks "):
        rw.map(spec, 3, walks=0, rng=0)
    with pytest.raises(ValueError, match="^test "):
        rw.map(spec, 3, walks=10, rng=0, test=-1)
    with pytest.raises(ValueError, match="^n_steps "):
        rw.map(spec, -1, walks=10, rng=0)
    with pytest.raises(ValueError, match="^state0 "):
        rw.map(spec, 1, walks=10, rng=0, state0=np.full(spec.n_state, np.nan))
    with pytest.raises(ValueError, match="N must be small enough"):
        rw.enumerate_walks(rw.RandomWalkTask(K=5, N=40, M=100, p=0.5))
    with pytest.raises(ValueError, match="^N must satisfy"):
        rw.theorem_accuracy(rw.RandomWalkTask(K=5, N=20, M=40, p=1.0))


def test_accuracy_refuses_non_finite_outputs():
    """Issue 18: accuracy of a NaN output used to return 0.4 (argmax of NaN is 0); it must raise."""
    spec = rw.RandomWalkTask(K=5, N=11, M=40, p=0.7)
    sample = rw.sample_walks(spec, 20, 0)
    f = np.eye(5)[(sample.parent + 1) % 5]  # clockwise successor: acc_RB = p exactly
    assert rw.accuracy(spec, f, sample)[1] == pytest.approx(0.7, abs=1e-15)
    for bad in (np.nan, np.inf):
        g = f.copy()
        g[3, 2] = bad
        with pytest.raises(ValueError, match="f must be finite"):
            rw.accuracy(spec, g, sample)
    with pytest.raises(ValueError, match="f must have shape"):
        rw.accuracy(spec, f[:, :4], sample)


def test_walk_sample_rejects_bad_weights():
    states = np.zeros((3, 4), dtype=np.int64)
    with pytest.raises(ValueError, match="^weights "):
        rw.WalkSample(states, np.array([0.5, 0.5, 0.5]))
    with pytest.raises(ValueError, match="^weights "):
        rw.WalkSample(states, np.array([0.2, 0.3, 0.5]))  # unequal weights need exact=True
    assert rw.WalkSample(states, np.array([0.2, 0.3, 0.5]), exact=True).n == 3
    with pytest.raises(ValueError, match="^states "):
        rw.WalkSample(np.zeros((0, 4)))


def test_non_finite_state_raises_divergence():
    """A logit overflow (rho a = inf) makes the next state NaN: the engine names step 1 and a state variable."""
    spec = rw.RandomWalkTask(K=5, N=6, M=20, p=0.5)
    x0 = rw.initial_state(spec)
    x0[spec.K * spec.K] = 1e308  # a_0: rho * a_0 overflows to inf inside the softmax
    with pytest.raises(dynamics.DivergenceError) as info:
        rw.map(spec, 3, walks=50, rng=0, state0=x0)
    assert info.value.step == 1


def test_full_gd_log_undefined_raises_divergence():
    spec = rw.RandomWalkTask(K=3, N=4, M=6, p=0.5)
    sample = rw.sample_walks(spec, 20, 0)
    with pytest.raises(dynamics.DivergenceError):
        rw.full_gd(spec, sample, 2, V0=-np.ones((3, 3)))  # e_y^T f = -(1 - S_N) < -eps: log undefined


# ---------------------------------------------------------------------------------------------------------------------
# data law
# ---------------------------------------------------------------------------------------------------------------------


def test_sampler_follows_the_walk_law():
    """Steps are +-1 mod K; the (parent, label) frequencies match the exact law (1/K) Pi within 5 SE (Sec. C.1)."""
    spec = rw.RandomWalkTask(K=5, N=9, M=20, p=0.7)
    n = 40000
    s = rw.sample_walks(spec, n, 3)
    d = (np.diff(s.states, axis=1)) % spec.K
    assert np.all((d == 1) | (d == spec.K - 1))
    C_hat = rw.empirical_transitions(s, spec.K)
    joint = rw.transition_matrix(spec.K, spec.p) / spec.K  # P(parent = a, y = b); parent is uniform
    se = np.sqrt(joint * (1 - joint) / n)  # binomial SE of each cell frequency
    assert_mc_close(C_hat, se, joint, what="(parent, label) frequency")
    assert_mc_rejects(C_hat, se, joint.T, what="transposed transition law")  # clockwise vs anticlockwise mix-up
    law = rw.enumerate_walks(spec)
    assert law.n == spec.K * 2 ** (spec.N - 1)
    np.testing.assert_allclose(law.weights.sum(), 1.0, rtol=1e-14)  # float64 summation of 1280 terms
    np.testing.assert_allclose(rw.empirical_transitions(law, spec.K), joint, atol=1e-15)


def test_exact_law_for_deterministic_walks():
    spec = rw.RandomWalkTask(K=4, N=9, M=20, p=0.0)
    law = rw.enumerate_walks(spec)
    assert law.n == 4
    np.testing.assert_array_equal(law.states[1], [(1 - i) % 4 for i in range(9)])


# ---------------------------------------------------------------------------------------------------------------------
# model, forward pass and probes
# ---------------------------------------------------------------------------------------------------------------------


def _literal_forward(spec, V, W, context, normalize_tokens=False):
    """f = V X softmax(X~^T W x~_N) built column by column from the definitions of Sec. C.2-C.3."""
    Phi = rw.positional_matrix(spec)
    out_S, out_f = [], []
    for ctx in context:
        X = np.zeros((spec.K, spec.N))
        X[ctx, np.arange(spec.N - 1)] = 1.0
        Xt = np.vstack([X, Phi])
        Xs = Xt / np.linalg.norm(Xt, axis=0) if normalize_tokens else Xt
        S = softmax(Xs.T @ W @ Xs[:, -1])
        out_S.append(S)
        out_f.append(V @ X @ S)
    return np.array(out_S), np.array(out_f)


def test_positional_code_is_orthogonal_with_norm_rho():
    """Both codes of Sec. C.2 are orthogonal with squared norm rho; the one-hot code exactly in float64 (off-diagonal
    Gram entries exactly 0, every squared norm the same float), the sine code only to the round-off of its M-term
    sums (which Theorem C2's unstable ridge amplifies, see tests/empirical/test_random_walk.py)."""
    for code in rw.POSITIONAL_CODES:
        spec = rw.RandomWalkTask(K=5, N=11, M=40, p=0.5, code=code)
        Phi = rw.positional_matrix(spec)
        assert Phi.shape == (40, 11)
        np.testing.assert_allclose(Phi.T @ Phi, spec.rho * np.eye(spec.N), atol=1e-12)  # round-off of 40-term sums
        spec2 = rw.RandomWalkTask(K=5, N=11, M=40, p=0.5, rho=3.0, code=code)
        G = rw.positional_matrix(spec2).T @ rw.positional_matrix(spec2)
        np.testing.assert_allclose(G, 3.0 * np.eye(11), atol=1e-13)
    G = rw.positional_matrix(rw.RandomWalkTask(K=6, N=97, M=1000, p=1.0)).T @ rw.positional_matrix(
        rw.RandomWalkTask(K=6, N=97, M=1000, p=1.0)
    )
    assert np.all(G[~np.eye(97, dtype=bool)] == 0.0) and np.ptp(np.diag(G)) == 0.0  # exact, not to round-off
    Gs = rw.positional_matrix(rw.RandomWalkTask(K=6, N=97, M=1000, p=1.0, code="sine"))
    Gs = Gs.T @ Gs
    assert np.abs(Gs[~np.eye(97, dtype=bool)]).max() > 0.0  # the sine code is orthogonal to round-off only
    with pytest.raises(ValueError, match="code"):
        rw.RandomWalkTask(K=5, N=11, M=40, p=0.5, code="cosine")


@pytest.mark.parametrize("normalize_tokens", [False, True])
def test_forward_matches_literal_construction(normalize_tokens):
    spec = rw.RandomWalkTask(K=4, N=6, M=9, p=0.5)
    rng = np.random.default_rng(5)
    V = rng.normal(size=(4, 4))
    W = 0.1 * rng.normal(size=(13, 13))
    ctx = rw.sample_walks(spec, 7, 1).context
    S, f = rw.forward(spec, V, W, ctx, normalize_tokens=normalize_tokens)
    S_ref, f_ref = _literal_forward(spec, V, W, ctx, normalize_tokens)
    np.testing.assert_allclose(S, S_ref, rtol=1e-12, atol=1e-15)  # float64 round-off of matrix products
    np.testing.assert_allclose(f, f_ref, rtol=1e-12, atol=1e-15)


@settings(max_examples=25)
@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(1e-4, 1e-1))
def test_reduced_family_roundtrip_and_forward(seed, scale):
    """probe_W inverts W_from_reduced (off = 0); the reduced and full forward passes agree (Sec. C.5, C.5.1)."""
    spec = rw.RandomWalkTask(K=4, N=7, M=12, p=0.3)
    rng = np.random.default_rng(seed)
    V, a, c = rng.normal(size=(4, 4)), scale * rng.normal(size=4), scale * scale * rng.normal(size=7)
    W = rw.W_from_reduced(spec, a, c)
    a2, c2, off = rw.probe_W(spec, W)
    np.testing.assert_allclose(a2, a, rtol=1e-12, atol=1e-14 * np.abs(a).max())  # orthogonality up to round-off
    np.testing.assert_allclose(c2, c, rtol=1e-12, atol=1e-14 * np.abs(c).max())
    assert off < 1e-13
    ctx = rw.sample_walks(spec, 5, rng).context
    S, f = rw.reduced_forward(spec, V, a, c, ctx)
    S2, f2 = rw.forward(spec, V, W, ctx)
    np.testing.assert_allclose(S, S2, rtol=1e-10, atol=1e-15)  # logits of size rho^2 c ~ 1 differ by round-off
    np.testing.assert_allclose(f, f2, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(S.sum(axis=1), 1.0, rtol=1e-14)


def test_probe_detects_leaving_the_family():
    spec = rw.RandomWalkTask(K=4, N=7, M=12, p=0.3)
    W = rw.W_from_reduced(spec, np.ones(4), np.zeros(7))
    W[0, 0] = 1.0  # W11 != 0: off the family
    assert rw.probe_W(spec, W)[2] > 0.1


def test_kl_to_truth_limits():
    """KL(P_true || P_model) (Sec. C.8): 0 for f = Pi^T x_{N-1}; log K - H(p) for a uniform output (closed form)."""
    spec = rw.RandomWalkTask(K=6, N=9, M=20, p=0.7)
    s = rw.sample_walks(spec, 50, 0)
    f_true = 3.0 * rw.transition_matrix(6, 0.7)[s.parent]  # any positive scale: the output is normalised
    # the 1e-12 floor on the K - 2 zero entries shifts the normaliser by 4e-12/3: KL ~ 1.3e-12
    assert abs(rw.kl_to_truth(spec, f_true, s)) < 1e-11
    H = -(0.7 * np.log(0.7) + 0.3 * np.log(0.3))
    np.testing.assert_allclose(rw.kl_to_truth(spec, np.ones((50, 6)), s), np.log(6) - H, rtol=1e-13)


def test_prediction_breaks_ties_to_smallest_label():
    np.testing.assert_array_equal(rw.predict(np.array([[0.2, 0.5, 0.5], [1.0, 1.0, 1.0]])), [1, 0])


# ---------------------------------------------------------------------------------------------------------------------
# gradients: full matrices vs finite differences; reduced vs exact law / Monte Carlo
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("normalize_tokens", [False, True])
def test_full_gradient_matches_finite_differences(normalize_tokens):
    spec = rw.RandomWalkTask(K=3, N=4, M=6, p=0.6)
    rng = np.random.default_rng(2)
    sample = rw.sample_walks(spec, 30, 4)
    V = rng.uniform(0.1, 1.0, size=(3, 3))  # positive: the log argument stays > 0
    W = 0.3 * rng.normal(size=(9, 9))
    dV, dW, L = rw.full_gradient(spec, sample, V, W, normalize_tokens=normalize_tokens)

    def loss(V_, W_):
        return rw.full_gradient(spec, sample, V_, W_, normalize_tokens=normalize_tokens)[2]

    h = 1e-6  # central differences: truncation O(h^2 L''') ~ 1e-12, round-off O(eps_mach L / h) ~ 1e-10
    for i, j in [(0, 0), (1, 2), (2, 1)]:
        E = np.zeros((3, 3))
        E[i, j] = h
        fd = (loss(V + E, W) - loss(V - E, W)) / (2 * h)
        np.testing.assert_allclose(dV[i, j], fd, rtol=1e-6, atol=1e-8)
    for i, j in [(0, 5), (4, 8), (8, 8), (2, 3), (7, 1)]:
        E = np.zeros((9, 9))
        E[i, j] = h
        fd = (loss(V, W + E) - loss(V, W - E)) / (2 * h)
        np.testing.assert_allclose(dW[i, j], fd, rtol=1e-6, atol=1e-8)


def test_reduced_gradient_matches_full_gradient():
    """Sec. C.5: on the family, -grad L of the full model restricted to (V, a, c) equals the reduced gradient."""
    spec = rw.RandomWalkTask(K=4, N=7, M=12, p=0.3)
    rng = np.random.default_rng(9)
    V, a, c = rng.uniform(0, 1, (4, 4)), 0.05 * rng.normal(size=4), 0.005 * rng.normal(size=7)
    sample = rw.sample_walks(spec, 200, 0)
    g = rw.reduced_gradient(spec, sample, V, a, c)
    dV, dW, L = rw.full_gradient(spec, sample, V, rw.W_from_reduced(spec, a, c))
    # a GD step moves W by -eta dW = eta [[0, G_a phi_N^T], [0, (sum_i G_c,i phi_i) phi_N^T]]
    Ga, Gc, off = rw.probe_W(spec, -dW)
    np.testing.assert_allclose(g.G_V, -dV, rtol=1e-12, atol=1e-15)  # float64 round-off
    np.testing.assert_allclose(g.G_a, Ga, rtol=1e-10, atol=1e-14)  # probes divide by rho: round-off of 12-sums
    np.testing.assert_allclose(g.G_c, Gc, rtol=1e-10, atol=1e-14)
    assert off < 1e-12
    np.testing.assert_allclose(g.loss, L, rtol=1e-13)


def test_reduced_gradient_monte_carlo_against_exact_law():
    """MC gradient at a generic state within 5 SE of the exact enumerated expectation; a transposed V is rejected."""
    spec = rw.RandomWalkTask(K=4, N=8, M=12, p=0.7)
    rng = np.random.default_rng(1)
    V, a, c = rng.uniform(0, 1, (4, 4)), 0.05 * rng.normal(size=4), 0.005 * rng.normal(size=8)
    exact = rw.reduced_gradient(spec, rw.enumerate_walks(spec), V, a, c)
    assert np.all(exact.se_V == 0)
    mc = rw.reduced_gradient(spec, rw.sample_walks(spec, 20000, 2), V, a, c)
    for blk in ("V", "a", "c"):
        assert_mc_close(
            getattr(mc, "G_" + blk), getattr(mc, "se_" + blk), getattr(exact, "G_" + blk), atol=1e-13, what=f"G_{blk}"
        )  # atol: round-off of the 512-walk exact sum
    assert_mc_close(mc.loss, mc.se_loss, exact.loss, atol=1e-13, what="loss")
    wrong = rw.reduced_gradient(spec, rw.enumerate_walks(spec), V.T, a, c)  # negative control: row/column mix-up
    assert_mc_rejects(
        np.concatenate([mc.G_V.ravel(), mc.G_a]),
        np.concatenate([mc.se_V.ravel(), mc.se_a]),
        np.concatenate([wrong.G_V.ravel(), wrong.G_a]),
        what="V transposed",
    )


def test_gradient_standard_error_matches_seed_spread():
    """The reported SE equals the seed-to-seed SD of the MC gradient (40 samples of 500 walks).

    With 40 replicates the ratio SD/SE has relative SD ~ 1/sqrt(2*39) = 0.11; we accept [0.6, 1.5] (> 3.5 SD).
    """
    spec = rw.RandomWalkTask(K=4, N=8, M=12, p=0.7)
    V1 = rw.V1_closed(spec)
    zeros_a, zeros_c = np.zeros(4), np.zeros(8)
    gens = dynamics.random.spawn_generators(3, [f"r{i}" for i in range(40)])
    reps = [rw.reduced_gradient(spec, rw.sample_walks(spec, 500, g), V1, zeros_a, zeros_c) for g in gens.values()]
    Gc = np.array([r.G_c for r in reps])
    se = np.mean([r.se_c for r in reps], axis=0)
    ratio = Gc.std(axis=0, ddof=1) / se
    assert np.all((ratio > 0.6) & (ratio < 1.5)), ratio


# ---------------------------------------------------------------------------------------------------------------------
# closed forms V^(1), W^(2)
# ---------------------------------------------------------------------------------------------------------------------


def test_V1_closed_form_against_monte_carlo():
    spec = rw.RandomWalkTask(K=5, N=7, M=20, p=0.8, eta=0.7)
    V1 = rw.V1_closed(spec)
    g = rw.reduced_gradient(spec, rw.sample_walks(spec, 20000, 11), np.zeros((5, 5)), np.zeros(5), np.zeros(7))
    assert_mc_close(spec.eta * g.G_V, spec.eta * g.se_V, V1, atol=1e-14, what="V^(1)")
    # negative controls: the blank token excluded from the softmax (1/(N-1), Sec. C.3) and Pi instead of Pi^T
    assert_mc_rejects(spec.eta * g.G_V, spec.eta * g.se_V, V1 * spec.N / (spec.N - 1), what="1/(N-1)")
    assert_mc_rejects(spec.eta * g.G_V, spec.eta * g.se_V, V1.T, what="V^(1) transposed")


def test_V1_closed_form_equals_exact_first_step_and_W1_is_zero():
    spec = rw.RandomWalkTask(K=4, N=9, M=20, p=0.65, eta=1.3, eps=0.2)
    tr = rw.map(spec, 1, walks=rw.enumerate_walks(spec), saveat=SaveAt(final=True))
    V, a, c = rw.unpack_state(spec, tr.states()[0, -1])
    np.testing.assert_allclose(V, rw.V1_closed(spec), rtol=1e-13)  # two float64 evaluations of one finite sum
    assert np.all(a == 0) and np.all(c == 0)  # g_i - gbar = 0 at V = 0: W^(1) = 0 exactly


def test_W2_closed_form_equals_exact_second_step():
    """W2_closed (numpy formula of Sec. C.5) equals two steps of the numba reduced map on the enumerated law."""
    spec = rw.RandomWalkTask(K=5, N=9, M=30, p=0.7)
    a2, c2 = rw.W2_closed(spec)
    tr = rw.map(spec, 2, walks=rw.enumerate_walks(spec), saveat=SaveAt(final=True))
    V, a, c = rw.unpack_state(spec, tr.states()[0, -1])
    np.testing.assert_allclose(a, a2, rtol=1e-11, atol=1e-16)  # round-off of 1280-walk sums
    np.testing.assert_allclose(c, c2, rtol=1e-11, atol=1e-16)
    assert c2[-1] < 0  # the blank query is suppressed (Sec. C.5)


def test_W2_closed_form_against_monte_carlo():
    spec = rw.RandomWalkTask(K=5, N=7, M=20, p=0.8)
    V1 = rw.V1_closed(spec)
    a2, c2 = rw.W2_closed(spec)
    g = rw.reduced_gradient(spec, rw.sample_walks(spec, 20000, 12), V1, np.zeros(5), np.zeros(7))
    assert_mc_close(spec.eta * g.G_a, spec.eta * g.se_a, a2, atol=1e-15, what="a^(2)")
    assert_mc_close(spec.eta * g.G_c, spec.eta * g.se_c, c2, atol=1e-15, what="c^(2)")
    # negative control: kappa frozen at its step-1 value 1/eps (forgetting gbar in 1/(gbar + eps))
    law = rw.enumerate_walks(spec)
    gq = V1[law.label[:, None], law.context]
    gbar = gq.sum(axis=1) / spec.N
    c_wrong = (
        spec.eta / spec.N * np.append((law.weights / spec.eps) @ (gq - gbar[:, None]), (law.weights / spec.eps) @ -gbar)
    )
    assert_mc_rejects(spec.eta * g.G_c, spec.eta * g.se_c, c_wrong, what="kappa = 1/eps")


# ---------------------------------------------------------------------------------------------------------------------
# reduced map = full-matrix GD; invariances
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("exact", [True, False])
def test_reduced_map_equals_full_matrix_gd(exact):
    """Sec. C.5: K=5, N=11, M=40, 8 steps from zero; the spec reports 7e-16 agreement with torch."""
    spec = rw.RandomWalkTask(K=5, N=11, M=40, p=0.6)
    sample = rw.enumerate_walks(spec) if exact else rw.sample_walks(spec, 300, 7)
    red = rw.map(spec, 8, walks=sample, saveat=SaveAt(every=1))
    full = rw.full_gd(spec, sample, 8)
    Yr, Yf = red.states()[0], full.states()[0]
    V_r, a_r, c_r = rw.unpack_state(spec, Yr)
    V_f, a_f, c_f = rw.unpack_state(spec, Yf)
    # 1e-12 of each block's scale: float64 round-off of 8 steps (observed ~1e-15)
    for r, f in ((V_r, V_f), (a_r, a_f), (c_r, c_f)):
        assert np.abs(r - f).max() <= 1e-12 * np.abs(f).max()
    assert full["off"].values.max() < 1e-13  # W stays on the reduced family (probe round-off only)
    np.testing.assert_allclose(red["loss"].values, full["loss"].values, rtol=1e-12)
    np.testing.assert_array_equal(red["step"].values, np.arange(9))
    np.testing.assert_allclose(red["time"].values, spec.eta * np.arange(9))


def test_full_gd_keeps_W11_W21_zero_and_W_rank_one():
    """Invariance along full GD from the paper's init: W11 = W21 = 0 exactly, every column along x~_N (Sec. C.5)."""
    spec = rw.RandomWalkTask(K=4, N=7, M=12, p=0.5)
    sample = rw.sample_walks(spec, 100, 3)
    V, W = np.zeros((4, 4)), np.zeros((16, 16))
    for _ in range(4):
        dV, dW, _ = rw.full_gradient(spec, sample, V, W)
        V, W = V - spec.eta * dV, W - spec.eta * dW
        assert np.all(W[:, :4] == 0)  # W11 and W21 (columns of the token part of the query)
        assert np.linalg.matrix_rank(W, tol=1e-12 * np.abs(W).max()) <= 1
    assert np.abs(W).max() > 0


def test_random_start_is_off_the_family():
    spec = rw.RandomWalkTask(K=4, N=7, M=12, p=0.5)
    rng = np.random.default_rng(0)
    sample = rw.sample_walks(spec, 100, 3)
    tr = rw.full_gd(
        spec,
        sample,
        3,
        V0=0.01 * rng.normal(size=(4, 4)) + 1.0,
        W0=0.01 * rng.normal(size=(16, 16)),
        normalize_tokens=True,
    )
    off = tr["off"].values[0]
    # GD increments lie on the family (rank one along x~_N), so the random start's off-family part is frozen while
    # the on-family part grows: off starts near 1 and decreases, but stays clearly positive.
    assert off[0] > 0.9 and np.all(np.diff(off) < 0) and off[-1] > 0.1


# ---------------------------------------------------------------------------------------------------------------------
# public reference values (spec Sec. 4, Appendix R)
# ---------------------------------------------------------------------------------------------------------------------

# Appendix R: V^(1) by cyclic offset k = (row - col) mod 6, printed to 6 decimals (so abs 5e-7 = half a last digit)
_V1_REF = {
    0.5: [0.278732, 0.278732, 0.273005, 0.267278, 0.273005, 0.278732],
    0.7: [0.274824, 0.282340, 0.278878, 0.270799, 0.271040, 0.271603],
}


@pytest.mark.parametrize("p", [0.5, 0.7])
def test_reference_V1(p):
    spec = rw.RandomWalkTask(K=6, N=97, M=1000, p=p)
    V1 = rw.V1_closed(spec)
    for b in range(6):
        for a in range(6):
            assert abs(V1[b, a] - _V1_REF[p][(b - a) % 6]) <= 5e-7
    if p == 0.7:  # unique column maximum at the clockwise successor, offset +1 (Sec. C.5)
        assert np.all(np.argmax(V1, axis=0) == (np.arange(6) + 1) % 6)


def test_reference_attention_after_step_2():
    """Sec. 4: mean S_{N-1} at t = 2 > 0.9999; exact recipe (G.C seed 0, 1000 walks) 0.99999987 (rel 1e-6)."""
    spec = rw.RandomWalkTask(K=6, N=97, M=1000, p=0.5)
    tr = rw.map(spec, 2, walks=1000, rng=0, test=1000, saveat=SaveAt(every=1))
    S = tr["attn_parent"].values[0]
    np.testing.assert_allclose(S[:2], 1 / 97, rtol=1e-13)  # uniform attention for t = 0, 1 (W^(1) = 0)
    assert S[2] > 0.9999
    assert abs(S[2] - 0.99999987) <= 1e-6 * 0.99999987


@pytest.mark.parametrize(("p", "seed", "plain_ref"), [(0.5, 4, 0.5047), (0.7, 5, 0.6974)])
def test_reference_accuracy_from_step_3(p, seed, plain_ref):
    """Sec. 4: acc_RB = max{p, 1-p} at every t >= 3 (abs 1e-9); plain 0/1 at t = 3 from the exact recipe."""
    spec = rw.RandomWalkTask(K=6, N=97, M=1000, p=p)
    n = 20000
    tr = rw.map(spec, 5, walks=n, rng=seed, test=n, saveat=SaveAt(steps=[2, 3, 4, 5]))
    acc_rb, acc = tr["acc_rb"].values[0], tr["acc"].values[0]
    assert np.all(np.abs(acc_rb[1:] - max(p, 1 - p)) <= 1e-9)
    # the reference is printed to 4 decimals (half a unit: 5e-5; 0.69735 sits on the rounding boundary), plus 1e-12
    # for the float64 round-off of the weighted mean of 2e4 indicators
    assert abs(acc[1] - plain_ref) <= 5e-5 + 1e-12
    assert np.all(np.abs(acc[1:] - max(p, 1 - p)) <= 5 * np.sqrt(p * (1 - p) / n))  # 5 SE of a 0/1 mean
    if seed == 4:  # the 2e4-walk attention row of Sec. 4 (exact recipe 0.9999999965, rel 1e-6)
        assert abs(tr["attn_parent"].values[0, 0] - 0.9999999965) <= 1e-6


def test_reference_deterministic_walk_failure_theorem():
    """Sec. 4 / Theorem C2: K=6, N=97, p=1, rho=500, exact population, t = 0..50."""
    spec = rw.RandomWalkTask(K=6, N=97, M=1000, rho=500.0, p=1.0)
    assert rw.failure_theorem_applies(spec)
    law = rw.enumerate_walks(spec)
    tr = rw.map(spec, 50, walks=law, test=law, saveat=SaveAt(every=1))
    assert np.all(tr["acc"].values == 1 / 6) and np.all(tr["acc_rb"].values == 1 / 6)
    assert rw.theorem_accuracy(spec) == 1 / 6
    Y = tr.states()[0]
    V, a, c = rw.unpack_state(spec, Y)
    spread = V.max(axis=(1, 2)) - V.min(axis=(1, 2))
    assert np.all(spread <= 1e-12 * np.abs(V).max(axis=(1, 2)))
    S = np.stack([rw.reduced_forward(spec, V[t], a[t], c[t], law.context)[0] for t in range(51)])
    ctx = S[:, :, :-1]
    assert np.all(ctx.max(axis=2) - ctx.min(axis=2) <= 1e-12)
    assert np.all(S[2:, :, -1] < S[2:, :, 0])  # the blank is suppressed from t = 2 on
    np.testing.assert_allclose(S[2:, :, :-1], 1 / 96, rtol=1e-12)  # theorem_attention: uniform context, blank 0
    np.testing.assert_allclose(S[2:, 0], np.broadcast_to(rw.theorem_attention(spec), S[2:, 0].shape), atol=1e-12)


def test_paper_setting_numbers_of_sec_C7():
    """Sec. C.7 exact recipe: one default_rng(0) draws training then test walks for p = 0.5, then for p = 0.7, then
    (separately, seed 0) p = 1. Printed values: plain accuracy 0.169 -> 0.489 at t = 3, cos_F(V, Pi^T) 0.58 / 0.92 /
    0.983 at t = 1 / 10 / 50; p = 0.7: 0.679 from t = 3; p = 1 sampled: 0.139 (half a last printed digit each)."""
    rng = np.random.default_rng(0)
    spec = rw.RandomWalkTask(K=6, N=97, M=1000, p=0.5)
    tr = rw.map(spec, 50, walks=1000, rng=rng, test=1000, saveat=SaveAt(steps=[1, 3, 10, 50]))
    acc, cos = tr["acc"].values[0], tr["cos_V_Pi"].values[0]
    assert abs(acc[0] - 0.169) <= 5e-4 + 1e-12 and abs(acc[1] - 0.489) <= 5e-4 + 1e-12
    assert abs(cos[0] - 0.58) <= 5e-3 and abs(cos[2] - 0.92) <= 5e-3 and abs(cos[3] - 0.983) <= 5e-4
    np.testing.assert_allclose(tr["acc_rb"].values[0, 1:], 0.5, atol=1e-12)
    spec = rw.RandomWalkTask(K=6, N=97, M=1000, p=0.7)
    tr = rw.map(spec, 10, walks=1000, rng=rng, test=1000, saveat=SaveAt(steps=[3, 10]))
    assert np.all(np.abs(tr["acc"].values - 0.679) <= 5e-4 + 1e-12)
    np.testing.assert_allclose(tr["acc_rb"].values, 0.7, atol=1e-12)
    spec = rw.RandomWalkTask(K=6, N=97, M=1000, p=1.0)
    tr = rw.map(spec, 10, walks=1000, rng=0, test=1000, saveat=SaveAt(steps=[3, 10]))
    assert np.all(np.abs(tr["acc"].values - 0.139) <= 5e-4 + 1e-12)  # the most frequent training label's share


@pytest.mark.parametrize(("p", "ref"), [(0.7, 0.174526), (0.8, 0.218234)])
def test_reference_direction_limit(p, ref):
    """Sec. 4: the formula of Sec. C.7, and independently the distance between the two direction matrices."""
    # the spec says rel 1e-6, but prints 6 decimals (0.1745257 -> 0.174526): half a last digit, abs 5e-7, is the
    # tightest tolerance the printed value supports
    assert abs(rw.direction_limit_distance(p) - ref) <= 5e-7
    for K in (3, 6, 11):
        spec = rw.RandomWalkTask(K=K, N=4, M=10, p=p)
        d = np.linalg.norm(rw.V_direction(spec, "derived") - rw.V_direction(spec, "theorem"))
        np.testing.assert_allclose(d, rw.direction_limit_distance(p), rtol=1e-12)
    assert rw.direction_limit_distance(0.5) < 1e-7  # the two directions coincide at p = 1/2 (sqrt round-off)


@pytest.mark.slow
def test_reference_direction_finite_sample():
    """Sec. 4: K=6, N=97, p=0.7, 4000 walks (G.C seed 1), t = 3000: dist to sqrt(C_hat^T) 0.0221, to Pi^T 0.1837."""
    spec = rw.RandomWalkTask(K=6, N=97, M=1000, p=0.7)
    train = rw.sample_walks(spec, 4000, 1)
    tr = rw.map(spec, 3000, walks=train, saveat=SaveAt(final=True))
    V = rw.unpack_state(spec, tr.states()[0, -1])[0]
    C_hat = rw.empirical_transitions(train, 6)
    assert abs(rw.direction_error(V, np.sqrt(C_hat.T)) - 0.0221) <= 5e-5  # printed to 4 decimals
    assert abs(tr["dist_V_sqrtChat"].values[0, -1] - 0.0221) <= 5e-5
    assert abs(rw.direction_errors(V, 0.7)["dist_V_Pi"] - 0.1837) <= 5e-5


# ---------------------------------------------------------------------------------------------------------------------
# qualitative theorem checks at small sizes (Sec. C.6)
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.5, 0.7])
def test_theorem_C1_parent_selection_and_optimal_accuracy(p):
    """K=5, N=31, M=400 (rho=200 ~ N^{3/2}), 2000 training / 2000 test walks, 10 steps."""
    spec = rw.RandomWalkTask(K=5, N=31, M=400, p=p)
    tr = rw.map(spec, 10, walks=2000, rng=21, test=2000, saveat=SaveAt(every=1))
    assert tr["attn_parent"].values[0, -1] > 0.99
    assert np.isnan(tr["dist_f_Pi"].values[0, 0])  # f = 0 at the zero init: no direction
    assert tr["dist_f_Pi"].values[0, -1] < tr["dist_f_Pi"].values[0, 3]  # item 2: f turns towards Pi^T x_{N-1}
    assert tr["attn_parent_q"].values[0, -1] > 0.99
    np.testing.assert_allclose(tr["acc_rb"].values[0, -3:], rw.theorem_accuracy(spec), atol=1e-12)
    assert rw.theorem_accuracy(spec) == max(p, 1 - p)
    assert np.all(np.diff(tr["loss"].values[0]) < 0)  # GD decreases the training loss


def test_theorem_C2_p1_stays_at_one_over_K():
    spec = rw.RandomWalkTask(K=5, N=21, M=60, p=1.0)
    law = rw.enumerate_walks(spec)
    tr = rw.map(spec, 30, walks=law, test=law, saveat=SaveAt(every=1))
    np.testing.assert_array_equal(tr["acc"].values, 1 / 5)
    V = rw.unpack_state(spec, tr.states()[0])[0]
    assert np.all(np.ptp(V, axis=(1, 2)) <= 1e-12 * np.abs(V).max(axis=(1, 2)))


def test_direction_claims():
    """Theorem C1 item 3 holds at p = 1/2 only (Sec. C.7): p = 0.5 -> dist to Pi^T falls like 1/sqrt(t);
    p = 0.7 -> dist to Pi^T stays above the direction floor, while dist to sqrt(C_hat^T) keeps falling."""
    steps = [10, 40, 160]
    out = {}
    for p in (0.5, 0.7):
        spec = rw.RandomWalkTask(K=6, N=41, M=600, p=p)
        train = rw.sample_walks(spec, 1000, 8)
        tr = rw.map(spec, 160, walks=train, saveat=SaveAt(steps=steps))
        V = rw.unpack_state(spec, tr.states()[0])[0]
        C_hat = rw.empirical_transitions(train, 6)
        out[p] = (
            np.array([rw.direction_errors(v, p)["dist_V_Pi"] for v in V]),
            np.array([rw.direction_error(v, np.sqrt(C_hat.T)) for v in V]),
        )
    d_pi, d_chat = out[0.5]
    assert np.all(np.diff(d_pi) < 0)
    # sqrt(t) dist is flat on the O(1/sqrt T) branch (Sec. C.7: 1.24, 1.24, 1.25); allow a 40% drift before the floor
    r = np.sqrt(steps) * d_pi
    assert r.max() / r.min() < 1.4, r
    d_pi, d_chat = out[0.7]
    assert np.all(d_pi > 0.8 * rw.direction_limit_distance(0.7))
    r_chat, r_pi = np.sqrt(steps) * d_chat, np.sqrt(steps) * d_pi
    assert r_chat.max() / r_chat.min() < 1.4, r_chat  # O(1/sqrt t) convergence to the sqrt(C_hat^T) direction
    assert r_pi[-1] / r_pi[0] > 1.5, r_pi  # but not to the Pi^T direction (observed ratio 1.97)


def _flow_against_scipy(solver, rel_tol):
    from scipy.integrate import solve_ivp

    spec = rw.RandomWalkTask(K=4, N=7, M=20, p=0.7)
    law = rw.enumerate_walks(spec)
    taus = [0.5, 2.0, 5.0]
    tr = rw.flow(spec, 5.0, walks=law, solver=solver, saveat=SaveAt(ts=taus))

    def fun(t, y):
        g = rw.reduced_gradient(spec, law, *rw.unpack_state(spec, y))
        return np.concatenate([g.G_V.ravel(), g.G_a, g.G_c])

    ref = solve_ivp(fun, (0.0, 5.0), rw.initial_state(spec), method="DOP853", t_eval=taus, rtol=1e-11, atol=1e-13)
    Y = tr.states()[0]
    np.testing.assert_allclose(tr["time"].values, taus)
    for blk_r, blk_f in zip(rw.unpack_state(spec, ref.y.T), rw.unpack_state(spec, Y)):
        assert np.abs(blk_r - blk_f).max() <= rel_tol * np.abs(blk_r).max()
    return spec, law, Y


def test_reduced_flow_matches_scipy_solve_ivp():
    """Sec. 0: the flow d(V, a, c)/dtau = G; engine RK4 on the numba field vs scipy DOP853 (rtol 1e-11) on the
    numpy-level reduced_gradient (exact law K=4, N=7). RK4 global error O(dt^4): observed 3.6e-8 relative at
    dt = 0.01 (the attention switch is steep), so dt = 0.005 (16x smaller, ~2e-9) against a 1e-7 tolerance."""
    spec, law, Y = _flow_against_scipy(dynamics.RK4(dt=0.005), 1e-7)
    # the map at small eta approaches the flow at tau = eta t (first order in eta: the gap halves with eta)
    gaps = []
    for eta in (0.1, 0.05):
        s = rw.RandomWalkTask(K=4, N=7, M=20, p=0.7, eta=eta)
        m = rw.map(s, round(5.0 / eta), walks=law, saveat=SaveAt(final=True)).states()[0, -1]
        gaps.append(np.abs(m - Y[-1]).max())
    assert 1.6 < gaps[0] / gaps[1] < 2.4, gaps


@pytest.mark.slow
def test_reduced_flow_dopri5_matches_scipy_solve_ivp():
    """As above with the engine's adaptive Dopri5 at rtol 1e-10 (slow: ~20 s of numba compilation)."""
    _flow_against_scipy(dynamics.Dopri5(rtol=1e-10, atol=1e-12), 1e-7)


def test_trajectory_roundtrip(tmp_path):
    spec = rw.RandomWalkTask(K=4, N=7, M=12, p=0.5)
    tr = rw.map(spec, 3, walks=30, rng=0, test=30, saveat=SaveAt(every=1))
    path = tr.save(tmp_path / "rw.nc")
    back = dynamics.Trajectory.load(path)
    np.testing.assert_array_equal(back.states(), tr.states())
    assert back.attrs["model"] == "random_walk"


@pytest.mark.parametrize("normalize_tokens", [False, True])
def test_onehot_code_dynamics_do_not_depend_on_M_beyond_N(normalize_tokens):
    """With phi_i = sqrt(rho) e_i only the first K + N coordinates of x~ are ever non-zero, so the other rows and
    columns of W never enter the scores nor receive a gradient (Sec. C.3-C.4): full-matrix GD at M = 200 from a
    random start equals GD at M = N + 1 (same rho) started from the leading (K+N+1)-block of the same W^(0), to
    round-off (1e-12: ~1e4 ulps over 15 steps of O(1) updates). The figures use this to run the paper's M = 1000
    at M = N + 1. Control: a start whose block differs (another draw) does not match."""
    big = rw.RandomWalkTask(K=5, N=11, M=200, p=0.7, rho=100.0, eta=0.5)
    small = rw.RandomWalkTask(K=5, N=11, M=12, p=0.7, rho=100.0, eta=0.5)
    sample = rw.sample_walks(big, 40, 3)
    rng = np.random.default_rng(5)
    V0 = 0.01 * rng.standard_normal((5, 5))
    W0 = 0.01 * rng.standard_normal((205, 205))
    b = 5 + 12
    tb = rw.full_gd(big, sample, 15, V0=V0, W0=W0, normalize_tokens=normalize_tokens)
    ts = rw.full_gd(small, sample, 15, V0=V0, W0=W0[:b, :b], normalize_tokens=normalize_tokens)
    names = rw.state_names(big)
    np.testing.assert_allclose(tb.states()[0], ts.states()[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(tb["loss"].values, ts["loss"].values, rtol=1e-12)
    assert names == rw.state_names(small)
    other = rw.full_gd(
        small, sample, 15, V0=V0, W0=0.01 * rng.standard_normal((b, b)), normalize_tokens=normalize_tokens
    )
    assert np.abs(other.states()[0] - tb.states()[0]).max() > 1e-6


def test_output_direction_error_pinned_to_a_hand_computation():
    """Theorem C1 item 2's quantity (Sec. C.6) on three hand-made walks, computed here by plain loops:
    mean_n || f_n/||f_n|| - Pi[s_{N-1}]/||Pi[s_{N-1}]|| ||_2. Dropping either normalisation changes the value by
    O(1), far outside the 1e-12 round-off tolerance."""
    spec = rw.RandomWalkTask(K=4, N=3, M=4, p=0.7)
    sample = rw.WalkSample(np.array([[0, 1, 2], [1, 0, 3], [3, 0, 1]]))  # parents 1, 0, 0
    f = np.array([[0.1, 0.2, 3.0, 0.4], [2.0, 0.5, -1.0, 1.0], [0.0, 1.0, 0.0, 0.3]])
    Pi = [[0.0, 0.7, 0.0, 0.3], [0.3, 0.0, 0.7, 0.0], [0.0, 0.3, 0.0, 0.7], [0.7, 0.0, 0.3, 0.0]]
    errs = []
    for n, parent in enumerate((1, 0, 0)):
        nf = math.sqrt(sum(v * v for v in f[n]))
        nt = math.sqrt(sum(v * v for v in Pi[parent]))
        errs.append(math.sqrt(sum((f[n][k] / nf - Pi[parent][k] / nt) ** 2 for k in range(4))))
    expected = sum(errs) / 3
    assert abs(rw.output_direction_error(spec, f, sample) - expected) <= 1e-12
    # the unnormalised distance is a different number (the mutant the test must kill)
    raw = np.mean([np.linalg.norm(f[n] - np.asarray(Pi[p])) for n, p in enumerate((1, 0, 0))])
    assert abs(raw - expected) > 0.1
    # a prediction along the true law has error 0
    assert rw.output_direction_error(spec, 5.0 * np.asarray(Pi)[sample.parent], sample) <= 1e-15


def test_reduced_gd_batched_eta_equals_per_configuration_runs():
    """Issue 14 item 5: eta as an array broadcast with the batch; one call equals the per-eta calls (bitwise: the
    same kernel on the same numbers), and a length mismatch with the state0 rows is refused."""
    spec = rw.RandomWalkTask(K=4, N=9, M=10, p=0.7)
    walks = rw.sample_walks(spec, 50, 2)
    etas = [0.3, 1.0, 2.5]
    batch = rw.map(spec, 6, walks=walks, eta=etas, saveat=SaveAt(every=1))
    for i, e in enumerate(etas):
        one = rw.map(dataclasses.replace(spec, eta=e), 6, walks=walks, saveat=SaveAt(every=1))
        np.testing.assert_array_equal(batch.states()[i], one.states()[0])
    with pytest.raises(ValueError, match="eta"):
        rw.map(spec, 2, walks=walks, eta=[1.0, 2.0], state0=np.zeros((3, spec.n_state)))
    with pytest.raises(ValueError, match="eta"):
        rw.map(spec, 2, walks=walks, eta=[1.0, -2.0])


def test_map_over_a_sequence_of_walk_samples_equals_the_per_sample_calls():
    """Independent reference: one call per WalkSample (the pre-batching API); bit-equal (same engine, same numbers).
    Test walks: one per training sample here, so each trajectory's diagnostics use its own."""
    task = rw.RandomWalkTask(K=3, N=4, M=10, p=0.7)
    train = [rw.sample_walks(task, 30, s) for s in range(3)]
    test = [rw.sample_walks(task, 20, 10 + s) for s in range(3)]
    sv = dynamics.SaveAt(steps=(0, 2, 4))
    batched = rw.map(task, 4, walks=train, test=test, saveat=sv)
    assert batched.sizes["trajectory"] == 3 and list(batched["sample"].values) == [0, 1, 2]
    for i in range(3):
        one = rw.map(task, 4, walks=train[i], test=test[i], saveat=sv)
        for name in list(rw.state_names(task)) + ["loss", "acc"]:
            np.testing.assert_array_equal(batched[name].values[i], one[name].values[0])
    shared = rw.map(task, 4, walks=train[:2], test=test[0], saveat=sv)
    np.testing.assert_array_equal(
        shared["acc"].values[1], rw.map(task, 4, walks=train[1], test=test[0], saveat=sv)["acc"].values[0]
    )
    with pytest.raises(ValueError, match="test"):
        rw.map(task, 4, walks=train, test=test[:2])
