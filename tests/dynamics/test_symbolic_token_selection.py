"""Token-selection kernels (docs/models/token_selection.md) against sympy derivations, with wrong-kernel controls.

The reduced dynamics of the three studies are expectations over the data law, which the toolkit replaces by a fixed
sample (§0): they are not closed forms in the reduced state, so no symbolic expression of the *population* map
exists to compare with. What is a closed form is each sample's contribution: the per-sample loss is an explicit
function of the reduced state and of that sample's data, and the reduced GD step on a sample of one draw is an
explicit map. Those are checked here, for every study, in two independent ways:

* **reduced gradient**: sympy differentiates the per-sample loss, written from the model's definition in the reduced
  coordinates (nearest_neighbor: the label-explicit square loss averaged over all 2^N label vectors, so the
  "labels integrated out" form of §A.3 is checked as well; group_sparse: the logistic loss of §B.2 with the scores
  of §B.3; random_walk: -log(e_y^T f + eps) of §C.4 with the logits of §C.5), against the hand kernel's per-sample
  gradient;
* **reduced map**: one GD step of the *full* model (full matrices W, v or V, built from the reduced state as in
  §A.5, §B.3, §C.5), whose gradient is sympy's derivative of the per-sample loss in the scores (logits) and value
  parameters, chained through the bilinear scores ``s = h_key^T W h_query``; the reduced state of the result is
  read off by the probes of §A.5.1, §B.3.1, §C.5.1 and compared with the hand map kernel. This checks the
  Frobenius factors (1/d, 1/(d-1), 1/|O_k|, 1/rho, 1/rho^2) of the reduction, not only the gradient.

Each comparison runs at >= 1 000 random states (each with its own random draw) and at named points (the papers'
initialisations, where the first steps have closed forms, and the states the map reaches from them), and the same
comparison rejects copies of the hand kernel with one sign or one factor changed (``_mutant``).

Tolerance: 1e-12 relative to the largest component at each point (dynamics.testing.formula_error); the random
states keep scores and logits within about +-30 (the references shift the softmax by its largest score), so the
references (float64 evaluations of the sympy expressions) and the kernels round to a few 1e-16 of their largest
terms. The per-sample losses and gradients cancel to ~0 where attention is near one-hot, or the logistic loss is
tiny, while their terms stay of order one; their rounding is then absolute (and log(1 + exp(-y f)) of the
reference itself loses relative accuracy below ~1e-8), so they are judged against max(|value|, FLOOR) (see below).
The maps' values are of the order of the state and need no floor. Measured maximum errors: 5e-14 (gradients and
losses with the floor; without it up to 2e-7, the reference's log(1 + tiny)), 6e-15 (maps).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
import sympy

from closedform import _group_sparse_kernels as _gs
from closedform import _nearest_neighbor_kernels as _nn
from closedform import _random_walk_kernels as _rw
from dynamics.testing import assert_formula_close, assert_formula_rejects
from tests.dynamics.test_symbolic_hand_kernels import _mutant

RTOL = 1e-12
# A per-sample loss or gradient is a sum of terms of order one here (softmax weights times data and states of order
# one; at most a few tens) that cancel to ~0 where attention is near one-hot: its rounding is absolute, at most a
# few 1e-15. The relative error is therefore taken against max(|value|, FLOOR): 1e-12 * 1e-2 = 1e-14 absolute for
# values below 1e-2 (the errors measured there are below 6e-16).
FLOOR = 1e-2
N_POINTS = 1000


def _softmax(scores, shift=0):
    """Softmax of a list of sympy expressions, computed as exp(s_j - shift) / sum_k exp(s_k - shift): ``shift`` (a
    symbol given the largest score at evaluation) prevents overflow and changes neither the value nor, held constant
    in the differentiation, the derivatives (softmax is invariant under a common shift)."""
    e = [sympy.exp(s - shift) for s in scores]
    z = sum(e)
    return [v / z for v in e]


def _unit(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# ----------------------------------------------------------------------------------------------------------------
# Study A: nearest neighbour


# (d, N): a small case, and a larger one (2^5 label vectors; ~30 s of sympy) in the slow run
NN_CASES = [(3, 4), pytest.param(5, 5, marks=pytest.mark.slow)]


def _nn_label_loss(scores, N, istar):
    """1/2 E_y (sum_j q_j y_j - y_{i*})^2 over all 2^N label vectors y (the query's own label is 0, §A.2-§A.4)."""
    q = _softmax(scores)
    total = 0
    for y in itertools.product((-1, 1), repeat=N):
        total += sympy.Rational(1, 2) * (sum(q[j] * y[j] for j in range(N)) - y[istar]) ** 2
    return total / 2**N


@functools.lru_cache(maxsize=None)
def _nn_symbolic(N):
    """Lambdified: per istar, the label-averaged loss and its gradient in (xi1, xi2) given c; and the gradient in
    the N + 1 scores of one label vector's loss 1/2 (sum_j q_j y_j - y_{i*})^2, given (scores, y, y_{i*})."""
    xi1, xi2 = sympy.symbols("xi1 xi2", real=True)
    c = sympy.symbols(f"c0:{N}", real=True)
    s = sympy.symbols(f"s0:{N + 1}", real=True)
    reduced, by_score = [], []
    for istar in range(N):
        L = _nn_label_loss([xi1 * cj for cj in c] + [xi1 - xi2], N, istar)
        reduced.append(sympy.lambdify((xi1, xi2, *c), [L, sympy.diff(L, xi1), sympy.diff(L, xi2)], "numpy"))
    y = sympy.symbols(f"y0:{N}", real=True)
    q = _softmax(s)
    ell = sympy.Rational(1, 2) * (sum(q[j] * y[j] for j in range(N)) - sympy.Symbol("y_istar")) ** 2
    by_score = sympy.lambdify((*s, *y, sympy.Symbol("y_istar")), [sympy.diff(ell, sj) for sj in s], "numpy")
    return reduced, by_score


def _nn_points(d, N, seed):
    """States (n, 2) and prompts: context X (n, N, d), query (n, d) on the sphere; the named points first."""
    rng = np.random.default_rng(seed)
    named = np.array([[0.0, 0.0], [0.0, 1.0], [0.0, 10.0], [0.5, 3.0], [3.0, 2.0], [8.0, 9.0]])  # (0, sigma): §A.4
    X = np.concatenate([named, rng.uniform(-10.0, 10.0, (N_POINTS, 2))])
    ctx = _unit(rng, X.shape[0] * N, d).reshape(-1, N, d)
    xq = _unit(rng, X.shape[0], d)
    return X, ctx, xq


def _nn_hand_stats(X, c, istar, stats=None):
    stats = _nn._prompt_stats if stats is None else stats
    out = np.empty((X.shape[0], _nn.N_STATS))
    q = np.empty(c.shape[1] + 1)
    for i in range(X.shape[0]):
        stats(X[i, 0], X[i, 1], c[i], istar[i], q, out[i])
    return out


@pytest.mark.parametrize("d, N", NN_CASES)
def test_nearest_neighbor_reduced_gradient_matches_sympy(d, N):
    X, ctx, xq = _nn_points(d, N, seed=10 * d + N)
    c = np.einsum("bjd,bd->bj", ctx, xq)
    istar = np.argmax(c, axis=1)
    reduced, _ = _nn_symbolic(N)
    sym = np.empty((X.shape[0], 3))
    for k in range(N):  # vectorised over the points whose nearest neighbour is k
        at = istar == k
        sym[at] = np.stack(np.broadcast_arrays(*reduced[k](*X[at].T, *c[at].T)), axis=1)
    hand = _nn_hand_stats(X, c, istar)
    assert_formula_close(
        hand[:, 1:3], sym[:, 1:], rtol=RTOL, floor=FLOOR, what=f"nearest_neighbor gradient d={d} N={N}"
    )
    assert_formula_close(
        hand[:, 0], sym[:, 0], rtol=RTOL, floor=FLOOR, what="nearest_neighbor loss (labels integrated out)"
    )
    sign = _mutant(_nn._prompt_stats, "out[2] = qs * (q2 - qi)", "out[2] = qs * (qi - q2)")
    factor = _mutant(_nn._prompt_stats, "g1 -= qi * c_row[istar]", "g1 -= 2.0 * qi * c_row[istar]")
    for wrong in (sign, factor):
        assert_formula_rejects(_nn_hand_stats(X, c, istar, wrong)[:, 1:3], sym[:, 1:], rtol=RTOL, floor=FLOOR)


def _nn_full_step(X, ctx, xq, istar, eta, by_score):
    """One GD step of the full (d+2) x (d+2) matrix W = diag(xi1 I, 0, -xi2) on one prompt per state (labels averaged
    over all 2^N vectors), read back by the probes of §A.5.1 (the orthogonal projection on the family):
    xi1 = tr W11 / d, xi2 = -W33. Vectorised over the states X (n, 2)."""
    n, N, d = ctx.shape
    W = np.zeros((n, d + 2, d + 2))
    W[:, np.arange(d), np.arange(d)] = X[:, :1]
    W[:, d + 1, d + 1] = -X[:, 1]
    hq = np.concatenate([xq, np.zeros((n, 1)), np.ones((n, 1))], axis=1)
    grad = np.zeros_like(W)
    labels = list(itertools.product((-1.0, 1.0), repeat=N))
    for y in labels:  # the expectation over the labels, exactly: d loss / dW = sum_m (d loss / d s_m) h_m h_q^T
        H = np.concatenate([ctx, np.broadcast_to(np.array(y), (n, N))[..., None], np.zeros((n, N, 1))], axis=2)
        H = np.concatenate([H, hq[:, None, :]], axis=1)  # (n, N + 1, d + 2): the tokens as rows
        s = np.einsum("bmk,bkl,bl->bm", H, W, hq)
        y_istar = np.array(y)[istar]
        g = np.stack(np.broadcast_arrays(*by_score(*s.T, *y, y_istar)), axis=1)  # (n, N + 1)
        grad += np.einsum("bm,bmk,bl->bkl", g, H, hq) / len(labels)
    W1 = W - eta * grad
    return np.column_stack([np.trace(W1[:, :d, :d], axis1=1, axis2=2) / d, -W1[:, d + 1, d + 1]])


@pytest.mark.parametrize("d, N", NN_CASES)
def test_nearest_neighbor_map_matches_full_matrix_gd(d, N):
    X, ctx, xq = _nn_points(d, N, seed=7 * d + N)
    c = np.einsum("bjd,bd->bj", ctx, xq)
    istar = np.argmax(c, axis=1)
    _, by_score = _nn_symbolic(N)
    eta = 0.7
    full = _nn_full_step(X, ctx, xq, istar, eta, by_score)

    def hand(step=_nn.gd_step):
        out = np.empty_like(X)
        for i in range(X.shape[0]):
            step(0, X[i], np.array([eta, float(d)]), (istar[i : i + 1], c[i : i + 1]), out[i])
        return out

    assert_formula_close(hand(), full, rtol=RTOL, what=f"nearest_neighbor map vs full-matrix GD d={d} N={N}")
    sign_stats = _mutant(_nn._prompt_stats, "out[2] = qs * (q2 - qi)", "out[2] = qs * (qi - q2)")
    sign_mean = _mutant(
        _nn.mean_gradient, "grad[1] = g2 / n_prompts", "grad[1] = g2 / n_prompts", _prompt_stats=sign_stats
    )
    sign = _mutant(
        _nn.gd_step, "out[1] = x[1] - eta * grad[1]", "out[1] = x[1] - eta * grad[1]", mean_gradient=sign_mean
    )
    factor = _mutant(_nn.gd_step, "out[0] = x[0] - (eta / d) * grad[0]", "out[0] = x[0] - eta * grad[0]")
    for wrong in (sign, factor):
        assert_formula_rejects(hand(wrong), full, rtol=RTOL)


# ----------------------------------------------------------------------------------------------------------------
# Study B: group-sparse classification

GS_CASES = [(2, 3), (3, 4)]  # (d, D)
GS_JSTAR = 1  # the papers' j* = 2 (0-based 1)


def _orbit(i, j, js):
    """Orbit 0..4 of W22's entry (key i, query j), §B.3: (j*, j*); key j*, other queries; other keys, query j*; the
    diagonal off j*; the rest."""
    if i == js:
        return 0 if j == js else 1
    if j == js:
        return 2
    return 3 if i == j else 4


def _gs_loss(Z, u, y):
    """Logistic loss log(1 + exp(-y f)) of §B.2, f = sum_j sum_i S_ij u_i with S the column softmax of Z (key i,
    query j) and u_i = <v, h_i>."""
    D = len(u)
    f = 0
    for j in range(D):
        S = _softmax([Z[i][j] for i in range(D)])
        f += sum(S[i] * u[i] for i in range(D))
    return sympy.log(1 + sympy.exp(-y * f))


@functools.lru_cache(maxsize=None)
def _gs_symbolic(D, js):
    """Lambdified (loss, gradient in the 8 reduced coordinates) given (state, a, gram, y), and the gradient of the
    loss in (Z, u) given (Z, u, y)."""
    state = sympy.symbols("beta w_par w_perp m1:6", real=True)
    a = sympy.symbols(f"a0:{D}", real=True)
    gram = sympy.Matrix(D, D, lambda i, j: sympy.Symbol(f"g{min(i, j)}{max(i, j)}", real=True))
    y = sympy.Symbol("y", real=True)
    beta, w_par, w_perp, *m = state
    Z = [[w_par * a[i] * a[j] + w_perp * gram[i, j] + m[_orbit(i, j, js)] for j in range(D)] for i in range(D)]
    ell = _gs_loss(Z, [beta * ai for ai in a], y)
    gsyms = sorted(gram.free_symbols, key=lambda s: s.name)
    reduced = sympy.lambdify((*state, *a, *gsyms, y), [ell, *(sympy.diff(ell, x) for x in state)], "numpy")
    Zs = sympy.Matrix(D, D, lambda i, j: sympy.Symbol(f"Z{i}{j}", real=True))
    us = sympy.symbols(f"u0:{D}", real=True)
    ell_full = _gs_loss(Zs.tolist(), us, y)
    by_score = sympy.lambdify((*Zs, *us, y), [sympy.diff(ell_full, v) for v in (*Zs, *us)], "numpy")
    return reduced, gsyms, by_score


def _gs_points(d, D, seed):
    """States (n, 8) (the zero start of §B.2 and its first step first), draws x (n, D, d) and v* (d,)."""
    rng = np.random.default_rng(seed)
    vstar = _unit(rng, 1, d)[0]
    named = np.zeros((3, 8))
    named[1, 0] = 0.5 / np.sqrt(2 * np.pi)  # beta after one population step from zero at eta = 0.5 (§B.3)
    named[2] = [0.8, -0.3, 0.0, 1.5, 1.0, 0.2, 0.1, 0.0]  # W22 with key j* ahead in every column (step 2 on)
    X = np.concatenate([named, rng.uniform(-3.0, 3.0, (N_POINTS, 8))])
    x = rng.standard_normal((X.shape[0], D, d))
    return X, x, vstar


def _gs_data(x, vstar):
    """(a, gram, y) of every draw: a_i = <x_i, v*>, gram_ij = <z_i, z_j> with z_i = x_i - a_i v*, y = sign a_{j*}."""
    a = x @ vstar
    z = x - a[..., None] * vstar
    gram = np.einsum("bid,bjd->bij", z, z)
    y = np.where(a[:, GS_JSTAR] >= 0.0, 1.0, -1.0)
    return a, gram, y


def _gs_hand_terms(X, a, gram, draw_terms=None):
    reduced_terms = _gs.reduced_terms
    if draw_terms is not None:
        reduced_terms = _mutant(
            _gs.reduced_terms, "S = np.empty((D, D))", "S = np.empty((D, D))", _draw_terms=draw_terms
        )
    out = np.empty((X.shape[0], _gs.N_STATE + 1))
    for i in range(X.shape[0]):
        reduced_terms(X[i], GS_JSTAR, a[i : i + 1], gram[i : i + 1], out[i : i + 1])
    return out


@pytest.mark.parametrize("d, D", GS_CASES)
def test_group_sparse_reduced_gradient_matches_sympy(d, D):
    X, x, vstar = _gs_points(d, D, seed=10 * d + D)
    a, gram, y = _gs_data(x, vstar)
    reduced, gsyms, _ = _gs_symbolic(D, GS_JSTAR)
    gvals = [gram[:, int(s.name[1]), int(s.name[2])] for s in gsyms]
    sym = np.stack(np.broadcast_arrays(*reduced(*X.T, *a.T, *gvals, y)), axis=1)
    hand = _gs_hand_terms(X, a, gram)
    assert_formula_close(hand[:, :8], sym[:, 1:], rtol=RTOL, floor=FLOOR, what=f"group_sparse gradient d={d} D={D}")
    assert_formula_close(hand[:, 8], sym[:, 0], rtol=RTOL, floor=FLOOR, what="group_sparse loss")
    sign = _mutant(_gs._draw_terms, "g[5] = coef * (col - o1)", "g[5] = coef * (col + o1)")
    factor = _mutant(_gs._draw_terms, "g_perp += G * gram[i, j]", "g_perp += 2.0 * G * gram[i, j]")
    for wrong in (sign, factor):
        assert_formula_rejects(_gs_hand_terms(X, a, gram, wrong)[:, :8], sym[:, 1:], rtol=RTOL, floor=FLOOR)


def _gs_full_step(X, x, vstar, eta, by_score):
    """One GD step of the full model (v in R^{d+D}, W = blockdiag(W11, W22) built from the reduced state as in §B.3)
    on one draw per state, read back by the probes of §B.3.1. Vectorised over the states X (n, 8)."""
    n, D, d = x.shape
    a, _, y = _gs_data(x, vstar)
    P = np.outer(vstar, vstar)
    W = np.zeros((n, d + D, d + D))
    W[:, :d, :d] = X[:, 1, None, None] * P + X[:, 2, None, None] * (np.eye(d) - P)
    orbit = np.array([[_orbit(i, j, GS_JSTAR) for j in range(D)] for i in range(D)])
    W[:, d:, d:] = X[:, 3:][:, orbit]
    v = np.concatenate([X[:, :1] * vstar, np.zeros((n, D))], axis=1)
    H = np.concatenate([x, np.broadcast_to(np.eye(D), (n, D, D))], axis=2)  # (n, D, d + D): tokens h_i as rows
    Z = np.einsum("bik,bkl,bjl->bij", H, W, H)
    u = np.einsum("bik,bk->bi", H, v)
    g = np.stack(np.broadcast_arrays(*by_score(*Z.reshape(n, -1).T, *u.T, y)), axis=1)
    gZ, gu = g[:, : D * D].reshape(n, D, D), g[:, D * D :]
    W1 = W - eta * np.einsum("bik,bij,bjl->bkl", H, gZ, H)  # d loss / dW = sum_ij (d loss / dZ_ij) h_i h_j^T
    v1 = v - eta * np.einsum("bi,bik->bk", gu, H)
    W11, W22 = W1[:, :d, :d], W1[:, d:, d:]
    m = [np.mean(W22[:, orbit == k], axis=1) for k in range(5)]
    return np.column_stack(
        [
            v1[:, :d] @ vstar,
            np.einsum("k,bkl,l->b", vstar, W11, vstar),
            np.einsum("kl,blk->b", np.eye(d) - P, W11) / (d - 1),
            *m,
        ]
    )


@pytest.mark.parametrize("d, D", GS_CASES)
def test_group_sparse_map_matches_full_matrix_gd(d, D):
    X, x, vstar = _gs_points(d, D, seed=7 * d + D)
    a, gram, _ = _gs_data(x, vstar)
    _, _, by_score = _gs_symbolic(D, GS_JSTAR)
    eta = 0.5
    full = _gs_full_step(X, x, vstar, eta, by_score)

    def hand(step=_gs.reduced_step):
        out = np.empty_like(X)
        for i in range(X.shape[0]):
            step(0, X[i], np.array([eta, float(d)]), (a[i : i + 1], gram[i : i + 1], np.array([GS_JSTAR])), out[i])
        return out

    assert_formula_close(hand(), full, rtol=RTOL, what=f"group_sparse map vs full-matrix GD d={d} D={D}")
    sign_terms = _mutant(_gs._draw_terms, "g[5] = coef * (col - o1)", "g[5] = coef * (col + o1)")
    sign_mean = _mutant(_gs.reduced_grad_mean, "S = np.empty((D, D))", "S = np.empty((D, D))", _draw_terms=sign_terms)
    sign = _mutant(
        _gs.reduced_step, "grad = np.empty(N_STATE)", "grad = np.empty(N_STATE)", reduced_grad_mean=sign_mean
    )
    factor_update = _mutant(_gs.apply_update, "eta / (d - 1.0) * grad[2]", "eta / d * grad[2]")
    factor = _mutant(
        _gs.reduced_step, "grad = np.empty(N_STATE)", "grad = np.empty(N_STATE)", apply_update=factor_update
    )
    for wrong in (sign, factor):
        assert_formula_rejects(hand(wrong), full, rtol=RTOL)


# ----------------------------------------------------------------------------------------------------------------
# Study C: random walks on a circle

RW_CASES = [(3, 4, 3.0), (4, 6, 500.0)]  # (K, N, rho); rho = M/2 = 500 is the default of M = 1000
RW_EPS, RW_ETA = 0.1, 1.0  # the defaults of §C.4


@functools.lru_cache(maxsize=None)
def _rw_symbolic(K, N):
    """Lambdified gradients of the loss -log(e_y^T V X S + eps) of §C.4 (X: the one-hot context states, the blank's
    column zero; S the softmax of the N logits): in the reduced coordinates (V, a, c) with the logits
    rho a_{s_j} + rho^2 c_j (j < N) and rho^2 c_N of §C.5, given (V, a, c, X, e_y, rho, eps, shift); and in
    (logits, V) given the same data."""
    V = sympy.Matrix(K, K, lambda i, j: sympy.Symbol(f"V{i}_{j}", real=True))
    a = sympy.Matrix(sympy.symbols(f"a0:{K}", real=True))
    c = sympy.symbols(f"c0:{N}", real=True)
    X = sympy.Matrix(K, N - 1, lambda i, j: sympy.Symbol(f"X{i}_{j}", real=True))
    ey = sympy.Matrix(sympy.symbols(f"e0:{K}", real=True))
    rho, eps = sympy.symbols("rho eps", positive=True)
    logit = sympy.symbols(f"l0:{N}", real=True)

    shift = sympy.Symbol("shift", real=True)

    def loss(logits):
        S = sympy.Matrix(_softmax(list(logits), shift)[: N - 1])
        return -sympy.log((ey.T * V * X * S)[0] + eps)

    reduced_logits = [rho * (a.T * X[:, j])[0] + rho**2 * c[j] for j in range(N - 1)] + [rho**2 * c[N - 1]]
    ell = loss(reduced_logits)
    state = (*V, *a, *c)
    data = (*X, *ey, rho, eps, shift)
    reduced = sympy.lambdify((*state, *data), [sympy.diff(ell, s) for s in state], "numpy")
    ell_l = loss(logit)
    by_logit = sympy.lambdify((*logit, *V, *data), [sympy.diff(ell_l, s) for s in (*logit, *V)], "numpy")
    return reduced, by_logit


def _rw_points(K, N, rho, seed):
    """Walks (n, N) (N - 1 context states, then the label) of the circle walk with p = 0.7, and states (n, K^2+K+N):
    V >= 0 (so that e_y^T f + eps > 0), logits of order one; the zero start of §C.4 and the two states the map
    reaches from it (the first steps of §C.5) come first."""
    rng = np.random.default_rng(seed)
    n = N_POINTS + 3
    s0 = rng.integers(0, K, n)
    moves = np.where(rng.random((n, N - 1)) < 0.7, 1, -1)
    walks = (s0[:, None] + np.concatenate([np.zeros((n, 1), int), np.cumsum(moves, axis=1)], axis=1)) % K
    X = np.column_stack(
        [rng.uniform(0.0, 3.0, (n, K * K)), rng.uniform(-5.0, 5.0, (n, K)) / rho, rng.uniform(-5, 5, (n, N)) / rho**2]
    )
    X[:3] = 0.0
    for i in (1, 2):
        _rw.reduced_step(0, X[i - 1], np.array([rho, RW_EPS, RW_ETA]), _rw_args(walks[0], K, N), X[i])
        walks[i] = walks[0]
    return X, walks


def _rw_args(walk, K, N):
    return (walk.astype(np.float64), np.ones(1), np.array([K, N], dtype=np.int64))


def _rw_data(walks, K):
    """One-hot context X (n, K, N-1) (column-major order of the sympy symbols: flattened row-major) and e_y (n, K)."""
    X = np.eye(K)[walks[:, :-1]].transpose(0, 2, 1)
    return X, np.eye(K)[walks[:, -1]]


def _rw_max_logit(X, walks, K, N, rho):
    """The largest of the N logits of §C.5 at every state (the softmax shift)."""
    a = X[:, K * K : K * K + K]
    c = X[:, K * K + K :]
    ctx = rho * np.take_along_axis(a, walks[:, :-1], axis=1) + rho**2 * c[:, :-1]
    return np.maximum(ctx.max(axis=1), rho**2 * c[:, -1])


@pytest.mark.parametrize("K, N, rho", RW_CASES)
def test_random_walk_reduced_gradient_matches_sympy(K, N, rho):
    """The hand kernel's G is the direction of full-matrix GD: minus the reduced gradient divided by the squared
    Frobenius norms of the family's directions, 1 (V), rho (a: W12 = a phi_N^T), rho^2 (c: W22 = sum c_i phi_i
    phi_N^T); the map test below derives these factors from the full matrices."""
    X, walks = _rw_points(K, N, rho, seed=K + N)
    Xd, ey = _rw_data(walks, K)
    reduced, _ = _rw_symbolic(K, N)
    shift = _rw_max_logit(X, walks, K, N, rho)
    grad = np.stack(np.broadcast_arrays(*reduced(*X.T, *Xd.reshape(len(X), -1).T, *ey.T, rho, RW_EPS, shift)), axis=1)
    metric = np.concatenate([np.ones(K * K), np.full(K, rho), np.full(N, rho**2)])
    sym = -grad / metric

    def hand(acc=_rw._accumulate_gradient):
        G, G2 = np.empty(X.shape[1]), np.empty(X.shape[1])
        out = np.empty_like(X)
        for i in range(X.shape[0]):
            acc(walks[i].astype(np.float64), np.ones(1), K, N, X[i], rho, RW_EPS, G, G2)
            out[i] = G
        return out

    assert_formula_close(hand(), sym, rtol=RTOL, floor=FLOOR, what=f"random_walk gradient K={K} N={N} rho={rho}")
    sign = _mutant(_rw._accumulate_gradient, "t = -kappa * logits[N - 1] * gbar", "t = kappa * logits[N - 1] * gbar")
    factor = _mutant(
        _rw._accumulate_gradient,
        "logits[j] = rho * x[nV + s] + rho2 * x[nV + K + j]",
        "logits[j] = rho2 * x[nV + s] + rho2 * x[nV + K + j]",
    )
    for wrong in (sign, factor):
        assert_formula_rejects(hand(wrong), sym, rtol=RTOL, floor=FLOOR)


def _rw_full_step(X, walks, K, N, rho, by_logit):
    """One GD step of the full model on one walk per state: V and the (K+N) x (K+N) matrix W with W12 = a phi_N^T,
    W22 = (sum_i c_i phi_i) phi_N^T (§C.5), one-hot positional code phi_i = sqrt(rho) e_i (M = N); read back by the
    probes of §C.5.1, a = W12 phi_N / rho, c_j = phi_j^T W22 phi_N / rho^2. Vectorised over the states."""
    n = X.shape[0]
    Xd, ey = _rw_data(walks, K)
    V = X[:, : K * K].reshape(n, K, K)
    a, c = X[:, K * K : K * K + K], X[:, K * K + K :]
    phi = np.sqrt(rho) * np.eye(N)
    W = np.zeros((n, K + N, K + N))
    W[:, :K, K:] = a[:, :, None] * phi[N - 1]
    W[:, K:, K:] = (c @ phi)[:, :, None] * phi[N - 1]
    tokens = np.zeros((n, N, K + N))  # rows: (x_j; phi_j), the blank query last
    tokens[:, : N - 1, :K] = Xd.transpose(0, 2, 1)
    tokens[:, :, K:] = phi
    query = tokens[:, N - 1]
    logits = np.einsum("bjk,bkl,bl->bj", tokens, W, query)
    g = np.stack(
        np.broadcast_arrays(
            *by_logit(*logits.T, *V.reshape(n, -1).T, *Xd.reshape(n, -1).T, *ey.T, rho, RW_EPS, logits.max(axis=1))
        ),
        axis=1,
    )
    W1 = W - RW_ETA * np.einsum("bj,bjk,bl->bkl", g[:, :N], tokens, query)  # sum_j (d loss / d l_j) x_j x_q^T
    V1 = V.reshape(n, -1) - RW_ETA * g[:, N:]
    a1 = W1[:, :K, K:] @ phi[N - 1] / rho
    c1 = np.einsum("jk,bkl,l->bj", phi, W1[:, K:, K:], phi[N - 1]) / rho**2
    return np.concatenate([V1, a1, c1], axis=1)


@pytest.mark.parametrize("K, N, rho", RW_CASES)
def test_random_walk_map_matches_full_matrix_gd(K, N, rho):
    X, walks = _rw_points(K, N, rho, seed=3 * K + N)
    _, by_logit = _rw_symbolic(K, N)
    full = _rw_full_step(X, walks, K, N, rho, by_logit)

    def hand(step=_rw.reduced_step):
        out = np.empty_like(X)
        for i in range(X.shape[0]):
            step(0, X[i], np.array([rho, RW_EPS, RW_ETA]), _rw_args(walks[i], K, N), out[i])
        return out

    assert_formula_close(hand(), full, rtol=RTOL, what=f"random_walk map vs full-matrix GD K={K} N={N} rho={rho}")
    sign_acc = _mutant(
        _rw._accumulate_gradient, "t = -kappa * logits[N - 1] * gbar", "t = kappa * logits[N - 1] * gbar"
    )
    sign = _mutant(
        _rw.reduced_step, "G = np.empty(x.shape[0])", "G = np.empty(x.shape[0])", _accumulate_gradient=sign_acc
    )
    factor = _mutant(_rw.reduced_step, "out[j] = x[j] + eta * G[j]", "out[j] = x[j] + eta * rho * G[j]")
    for wrong in (sign, factor):
        assert_formula_rejects(hand(wrong), full, rtol=RTOL)
