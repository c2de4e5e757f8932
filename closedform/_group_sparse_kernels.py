"""Private numba kernels of the group-sparse study (docs/models/token_selection.md, Study B,
docs/models/token_selection.md §B.3).

The reduced model of docs/models/token_selection.md §B.3: for one draw with a_i = <x_i, v*> (shape (D,)) and the Gram
matrix gram_ij = <z_i, z_j> of the components z_i = (I - v* v*^T) x_i orthogonal to v* (shape (D, D)), and the reduced
state state = (beta, w_par, w_perp, m1, m2, m3, m4, m5) (order of ``STATE_NAMES`` in ``closedform.group_sparse``):

    Z_ij = w_par a_i a_j + w_perp gram_ij + [W22]_ij,   S = column-softmax(Z),   f = beta sum_i r_i a_i,

with W22 taking the value m_k on orbit O_k (row = key i, column = query j; O_1 = (j*, j*), O_2 = (j*, j != j*),
O_3 = (i != j*, j*), O_4 = (i, i) with i != j*, O_5 = the rest). The per-draw partial derivatives of the logistic
loss ell(y f) with respect to the 8 coordinates are (docs/models/token_selection.md §B.2 gradients projected on the
orbit basis, docs/models/token_selection.md §B.3):

    dbeta = coef sum_i r_i a_i,  dw_par = coef sum_ij G_ij a_i a_j,  dw_perp = coef sum_ij G_ij gram_ij,
    dm_k = coef sum_{(i, j) in O_k} G_ij,   G_ij = S_ij (u_i - ubar_j),  u_i = beta a_i,  coef = -lambda y.

The label is y = sign(a_{j*}) with sign(0) := +1 (docs/models/token_selection.md §G.B). No RNG here; all samples come
from the caller. ``reduced_step`` is a ``dynamics.iterate`` map of the five-argument form: parameter row p = [eta, d],
data args = (a (n, D), gram (n, D, D), index = [jstar_index] (int64)).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from closedform._numpy_rules import mean_std, pairwise_sum, quantile_linear

N_STATE = 8


@njit(cache=True, fastmath=False)
def _orbit(i, j, js):
    """Orbit index 0..4 of entry (key i, query j) of W22 (docs/models/token_selection.md §B.3)."""
    if i == js:
        return 0 if j == js else 1
    if j == js:
        return 2
    if i == j:
        return 3
    return 4


@njit(cache=True, fastmath=False)
def _w22(state, js, D):
    """W22 (D, D) of a reduced state: m_k on orbit O_k (docs/models/token_selection.md §B.3)."""
    M = np.empty((D, D))
    for i in range(D):
        for j in range(D):
            M[i, j] = state[3 + _orbit(i, j, js)]
    return M


@njit(cache=True, fastmath=False)
def _softplus(x):
    """log(1 + exp(x)), overflow-free."""
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@njit(cache=True, fastmath=False)
def _sigmoid(x):
    """1 / (1 + exp(-x)), overflow-free."""
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit(cache=True, fastmath=False)
def _attention(state, M, a, gram, S, sa):
    """Fill S (D, D) with the column softmax of the reduced scores Z (docs/models/token_selection.md §B.3) and sa (D,)
    with
    sa_j = sum_i S_ij a_i; return f = beta sum_i r_i a_i = beta sum_j sa_j. M is W22 (see ``_w22``).
    """
    D = a.shape[0]
    w_par = state[1]
    w_perp = state[2]
    f = 0.0
    for j in range(D):
        zmax = -np.inf
        for i in range(D):
            z = w_par * a[i] * a[j] + w_perp * gram[i, j] + M[i, j]
            S[i, j] = z
            if z > zmax:
                zmax = z
        tot = 0.0
        for i in range(D):
            e = math.exp(S[i, j] - zmax)
            S[i, j] = e
            tot += e
        s = 0.0
        for i in range(D):
            S[i, j] /= tot
            s += S[i, j] * a[i]
        sa[j] = s
        f += s
    return state[0] * f


@njit(cache=True, fastmath=False)
def _draw_terms(state, js, M, a, gram, S, sa, g):
    """Per-draw partial derivatives of ell(y f) w.r.t. the 8 reduced coordinates, written to g (8,)
    (docs/models/token_selection.md §B.3).

    Orbit sums of G from four partial sums: O_1 = G[j*, j*], O_2 = row j* - O_1, O_3 = column j* - O_1,
    O_4 = trace - O_1, O_5 = total - O_1 - O_2 - O_3 - O_4. Returns the per-draw loss log(1 + exp(-y f))
    (docs/models/token_selection.md §B.2).
    """
    D = a.shape[0]
    beta = state[0]
    f = _attention(state, M, a, gram, S, sa)
    y = 1.0 if a[js] >= 0.0 else -1.0
    coef = -_sigmoid(-y * f) * y
    g_beta = 0.0
    g_par = 0.0
    g_perp = 0.0
    total = 0.0
    row = 0.0
    col = 0.0
    trace = 0.0
    for j in range(D):
        g_beta += sa[j]
        ubar = beta * sa[j]
        for i in range(D):
            G = S[i, j] * (beta * a[i] - ubar)
            g_par += G * a[i] * a[j]
            g_perp += G * gram[i, j]
            total += G
            if i == js:
                row += G
            if j == js:
                col += G
            if i == j:
                trace += G
    o1 = S[js, js] * (beta * a[js] - beta * sa[js])
    g[0] = coef * g_beta
    g[1] = coef * g_par
    g[2] = coef * g_perp
    g[3] = coef * o1
    g[4] = coef * (row - o1)
    g[5] = coef * (col - o1)
    g[6] = coef * (trace - o1)
    g[7] = coef * (total - row - col - trace + 2.0 * o1)
    return _softplus(-y * f)


@njit(cache=True, fastmath=False)
def reduced_terms(state, js, a, gram, terms):
    """Per-draw gradient terms: terms[k, :8] = d ell / d(state) of draw k, terms[k, 8] = loss of draw k."""
    n, D = a.shape
    S = np.empty((D, D))
    sa = np.empty(D)
    g = np.empty(N_STATE)
    M = _w22(state, js, D)
    for k in range(n):
        terms[k, N_STATE] = _draw_terms(state, js, M, a[k], gram[k], S, sa, g)
        for q in range(N_STATE):
            terms[k, q] = g[q]


@njit(cache=True, fastmath=False)
def reduced_grad_mean(state, js, a, gram, grad):
    """Sample mean of the per-draw gradient terms (the MC population gradient of docs/models/token_selection.md §B.3),
    written to grad (8,).
    """
    n, D = a.shape
    S = np.empty((D, D))
    sa = np.empty(D)
    g = np.empty(N_STATE)
    M = _w22(state, js, D)
    for q in range(N_STATE):
        grad[q] = 0.0
    for k in range(n):
        _draw_terms(state, js, M, a[k], gram[k], S, sa, g)
        for q in range(N_STATE):
            grad[q] += g[q]
    for q in range(N_STATE):
        grad[q] /= n


@njit(cache=True, fastmath=False)
def apply_update(state, grad, eta, d, D, out):
    """Induced update of full-matrix GD on the reduced coordinates (docs/models/token_selection.md §B.3,
    orthogonal-basis projection).

    beta, w_par: step eta; w_perp: eta / (d - 1); m_k: eta / |O_k| with |O| = (1, D-1, D-1, D-1, (D-1)(D-2)).
    """
    out[0] = state[0] - eta * grad[0]
    out[1] = state[1] - eta * grad[1]
    out[2] = state[2] - eta / (d - 1.0) * grad[2]
    out[3] = state[3] - eta * grad[3]
    out[4] = state[4] - eta / (D - 1.0) * grad[4]
    out[5] = state[5] - eta / (D - 1.0) * grad[5]
    out[6] = state[6] - eta / (D - 1.0) * grad[6]
    out[7] = state[7] - eta / ((D - 1.0) * (D - 2.0)) * grad[7]


@njit(cache=True, fastmath=False)
def reduced_step(k, x, p, args, out):
    """One reduced GD step (``dynamics.iterate`` map; docs/models/token_selection.md §B.3) on the fixed sample ``args``
    (module docstring).
    """
    eta = p[0]
    d = p[1]
    a = args[0]
    gram = args[1]
    js = args[2][0]
    D = a.shape[1]
    grad = np.empty(N_STATE)
    reduced_grad_mean(x, js, a, gram, grad)
    apply_update(x, grad, eta, d, float(D), out)


@njit(cache=True, fastmath=False)
def reduced_eval(state, js, a, gram, out):
    """Per-draw diagnostics at one state: out[k] = (loss, correct, mean_j S_{j*, j}, min_j S_{j*, j})
    (docs/models/token_selection.md §B.3.1).
    """
    n, D = a.shape
    S = np.empty((D, D))
    sa = np.empty(D)
    M = _w22(state, js, D)
    for k in range(n):
        f = _attention(state, M, a[k], gram[k], S, sa)
        y = 1.0 if a[k, js] >= 0.0 else -1.0
        out[k, 0] = _softplus(-y * f)
        out[k, 1] = 1.0 if y * f > 0.0 else 0.0
        s = 0.0
        smin = np.inf
        for j in range(D):
            s += S[js, j]
            if S[js, j] < smin:
                smin = S[js, j]
        out[k, 2] = s / D
        out[k, 3] = smin


# ----------------------------------------------------------------------------------------------------------------
# the diagnostics of every save, inside the compiled loop (``dynamics.iterate``'s ``observe``), by numpy's own
# summation and quantile rules (closedform._numpy_rules), so that they equal group_sparse's numpy formulas
# (reduced_evaluate, _gaps, reduced_gradient) bit for bit. Data: the map's args plus args[3] = [n_unique, quantile].

N_EVAL = 8  # gap_ss, gap_s, gap_self, loss, loss_se, accuracy, attn_jstar, attn_jstar_q
N_OBS_SE = N_EVAL + 2 * N_STATE  # then grad_<name>, se_grad_<name> per state coordinate


@njit(cache=True, fastmath=False)
def _evaluation(x, args, out):
    """The N_EVAL diagnostics without gradients (``group_sparse.reduced_evaluate`` and ``_gaps``) into out[:8]."""
    a = args[0]
    n = a.shape[0]
    per = np.empty((n, 4))
    reduced_eval(x, args[2][0], a, args[1], per)
    out[0] = x[3] - x[5]  # gap_ss = m1 - m3
    out[1] = x[4] - x[7]  # gap_s = m2 - m5
    out[2] = x[6] - x[7]  # gap_self = m4 - m5
    work = np.empty(n)
    mean, std = mean_std(per[:, 0], work)
    out[3] = mean
    out[4] = std / math.sqrt(args[3][0])
    out[5] = pairwise_sum(per[:, 1], 0, n) / n
    out[6] = pairwise_sum(per[:, 2], 0, n) / n
    out[7] = quantile_linear(per[:, 3], args[3][1], work)


@njit(cache=True, fastmath=False)
def _gradient_se(terms, n_unique, mean, out):
    """``reduced_gradient``'s mean and standard error of the per-draw terms (rows added in order, as numpy's
    reductions over axis 0 do): out[2q] = grad_q, out[2q + 1] = se_q; ``mean`` (N_STATE,) receives the mean.
    """
    n = terms.shape[0]
    for q in range(N_STATE):
        mean[q] = 0.0
    for k in range(n):
        for q in range(N_STATE):
            mean[q] += terms[k, q]
    for q in range(N_STATE):
        mean[q] /= n
    root = math.sqrt(n_unique)
    for q in range(N_STATE):
        out[2 * q] = mean[q]
        if n < 2:
            out[2 * q + 1] = np.nan
            continue
        acc = 0.0
        for k in range(n):
            dev = terms[k, q] - mean[q]
            acc += dev * dev
        out[2 * q + 1] = math.sqrt(acc / (n - 1)) / root


@njit(cache=True, fastmath=False)
def observables(k, x, p, args, out):
    """The N_EVAL diagnostics of the state x (``map(..., with_se=False)``)."""
    _evaluation(x, args, out)


@njit(cache=True, fastmath=False)
def observables_se(k, x, p, args, out):
    """The N_EVAL diagnostics, then the Monte Carlo gradient and its standard error per coordinate (``map(...,
    with_se=True)``).
    """
    _evaluation(x, args, out)
    a = args[0]
    terms = np.empty((a.shape[0], N_STATE + 1))
    reduced_terms(x, args[2][0], a, args[1], terms)
    _gradient_se(terms, args[3][0], np.empty(N_STATE), out[N_EVAL:])


@njit(cache=True, fastmath=False)
def step_observables_se(k, x, p, args, out, obs):
    """:func:`reduced_step` and :func:`observables_se` of the same state, the per-draw gradient terms computed once
    (their mean, summed in the order of :func:`reduced_grad_mean`, is the step's gradient bit for bit).
    """
    _evaluation(x, args, obs)
    a = args[0]
    terms = np.empty((a.shape[0], N_STATE + 1))
    reduced_terms(x, args[2][0], a, args[1], terms)
    grad = np.empty(N_STATE)
    _gradient_se(terms, args[3][0], grad, obs[N_EVAL:])
    apply_update(x, grad, p[0], p[1], float(a.shape[1]), out)
