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
states keep scores and logits within about +-30, so the references (float64 evaluations of the sympy expressions)
and the kernels round to a few 1e-16 of their largest terms. The per-sample losses and gradients cancel to ~0 where
attention is near one-hot while their terms stay of order one, so their rounding is absolute: they are judged
against max(|value|, FLOOR) (see below). The maps' values are of the order of the state and need no floor.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
import sympy

from closedform import _nearest_neighbor_kernels as _nn
from dynamics.testing import assert_formula_close, assert_formula_rejects
from tests.test_symbolic_crosscheck import _mutant

RTOL = 1e-12
# A per-sample loss or gradient is a sum of terms of size <= 1 here (softmax weights times |c_j| <= 1, |a_i| and
# |gram| of order one, one-hot data) that cancel to ~0 where attention is near one-hot: its rounding is absolute, about
# (number of terms) * 1.1e-16 <= 1e-15. The relative error is therefore taken against max(|value|, FLOOR):
# 1e-12 * 1e-2 = 1e-14 absolute for gradients below 1e-2, ten times that rounding.
FLOOR = 1e-2
N_POINTS = 1000


def _softmax(scores):
    """Softmax of a list of sympy expressions (the model's definition; no max shift: the test keeps |scores| small)."""
    e = [sympy.exp(s) for s in scores]
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
