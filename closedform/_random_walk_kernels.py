"""Private numba kernels of the random-walk study (docs/models/token_selection.md, Study C,
docs/models/token_selection.md §C.5).

The public wrappers live in :mod:`closedform.random_walk`; they validate, draw the walks and allocate. Kernels are
pure: float64 arrays and scalars in, ``out`` arrays or scalars back, no RNG.

Layouts (0-based code indices, docs/models/token_selection.md §0):

* walk sample: ``states`` flat (n * N,), walk ``w`` occupies ``states[w*N:(w+1)*N]``; entries 0..N-2 are the context
  states s_1..s_{N-1} (code values 0..K-1), entry N-1 is the label y = s_N. ``weights`` (n,) sum to one (1/n for a
  Monte Carlo sample, the exact probabilities for an enumerated law).
* reduced state ``x`` (K*K + K + N,): V row-major (row = label b, column = state a), then a (K,), then c (N,).
* map/flow kernels (five-argument form of ``dynamics``): parameter row ``p`` = [rho, eps, eta]; data
  ``args`` = (states (n*N,) float64, weights (n,), dims = [K, N] int64). The public runs pass four more arrays,
  read only by the observables (:func:`observables`): ``dims`` then holds [K, N, se, n_test] (se = 1 when the
  training walks are a Monte Carlo sample of n >= 2, so the gradient carries standard errors), followed by
  ``consts`` (see :func:`observables`), the test walks flat (n_test * N,) and their weights (n_test,).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from closedform._numpy_rules import pairwise_sum


@njit(cache=True, fastmath=False)
def _accumulate_gradient(states, weights, K, N, x, rho, eps, G, G2):
    """Negative loss gradient of the reduced model and its weighted second moments; returns (loss, loss second moment).

    Implements docs/models/token_selection.md §C.5 (exact GD updates of (V, a, c)): with S = softmax(l),
    l_j = rho a_{s_j} + rho^2 c_j (j < N), l_N = rho^2 c_N, g_i = V[y, s_i] (g_N = 0), gbar = sum_i S_i g_i,
    kappa = 1/(gbar + eps):
    G_V = E[kappa e_y (sum_{i<N} S_i x_i)^T], G_a = E[kappa sum_{i<N} S_i (g_i - gbar) x_i],
    G_c,i = E[kappa S_i (g_i - gbar)]. ``G`` receives these means (the GD update is x + eta G) and ``G2`` the weighted
    means of the squared per-walk contributions (for standard errors). The loss is E[-log(gbar + eps)]
    (docs/models/token_selection.md §C.4).
    """
    nV = K * K
    n = weights.shape[0]
    for j in range(G.shape[0]):
        G[j] = 0.0
        G2[j] = 0.0
    loss = 0.0
    loss2 = 0.0
    logits = np.empty(N)
    u = np.empty(K)
    da = np.empty(K)
    rho2 = rho * rho
    for w in range(n):
        base = w * N
        wt = weights[w]
        y = int(states[base + N - 1])
        lmax = -np.inf
        for j in range(N - 1):
            s = int(states[base + j])
            logits[j] = rho * x[nV + s] + rho2 * x[nV + K + j]
            if logits[j] > lmax:
                lmax = logits[j]
        logits[N - 1] = rho2 * x[nV + K + N - 1]
        if logits[N - 1] > lmax:
            lmax = logits[N - 1]
        Z = 0.0
        for j in range(N):
            logits[j] = math.exp(logits[j] - lmax)
            Z += logits[j]
        for k in range(K):
            u[k] = 0.0
            da[k] = 0.0
        for j in range(N):
            logits[j] /= Z  # now the attention weights S_j
        for j in range(N - 1):
            u[int(states[base + j])] += logits[j]
        gbar = 0.0
        for k in range(K):
            gbar += x[y * K + k] * u[k]
        kappa = 1.0 / (gbar + eps)
        ell = -math.log(gbar + eps)
        loss += wt * ell
        loss2 += wt * ell * ell
        for k in range(K):
            t = kappa * u[k]
            G[y * K + k] += wt * t
            G2[y * K + k] += wt * t * t
        for j in range(N - 1):
            s = int(states[base + j])
            t = kappa * logits[j] * (x[y * K + s] - gbar)
            da[s] += t
            G[nV + K + j] += wt * t
            G2[nV + K + j] += wt * t * t
        t = -kappa * logits[N - 1] * gbar  # the blank query token: g_N = 0
        G[nV + K + N - 1] += wt * t
        G2[nV + K + N - 1] += wt * t * t
        for k in range(K):
            G[nV + k] += wt * da[k]
            G2[nV + k] += wt * da[k] * da[k]
    return loss, loss2


@njit(cache=True, fastmath=False)
def reduced_step(k, x, p, args, out):
    """One exact GD step of the reduced state (V, a, c): out = x + eta G (docs/models/token_selection.md §C.5, exact GD
    updates).

    Step-kernel signature of ``dynamics.iterate``: ``k`` step index (unused: constant step size), ``x`` the state,
    ``p`` and ``args`` as in the module docstring, ``out`` the next state.
    """
    states = args[0]
    weights = args[1]
    K = args[2][0]
    N = args[2][1]
    rho = p[0]
    eps = p[1]
    eta = p[2]
    G = np.empty(x.shape[0])
    G2 = np.empty(x.shape[0])
    _accumulate_gradient(states, weights, K, N, x, rho, eps, G, G2)
    for j in range(x.shape[0]):
        out[j] = x[j] + eta * G[j]


@njit(cache=True, fastmath=False, inline="always")
def _attention_row(states, base, K, N, x, ia, ic, rho, S):
    """Attention weights S (N,) of the walk at ``states[base:base + N]`` for the reduced logits l_j = rho a_{s_j} +
    rho^2 c_j (j < N), l_N = rho^2 c_N (docs/models/token_selection.md §C.5), a = x[ia:ia + K], c = x[ic:ic + N].
    """
    rho2 = rho * rho
    lmax = -np.inf
    for j in range(N):
        if j < N - 1:
            lj = rho * x[ia + int(states[base + j])] + rho2 * x[ic + j]
        else:
            lj = rho2 * x[ic + N - 1]
        S[j] = lj
        if lj > lmax:
            lmax = lj
    Z = 0.0
    for j in range(N):
        S[j] = math.exp(S[j] - lmax)
        Z += S[j]
    for j in range(N):
        S[j] /= Z


@njit(cache=True, fastmath=False, inline="always")
def _output_row(states, base, K, N, V, iv, S, u, f):
    """Output f = V X S (K,) of one walk (the blank contributes 0, docs/models/token_selection.md §C.3) in a fixed
    order: u_k = sum_{j < N, s_j = k} S_j added in j order, then f_b = sum_k V[b, k] u_k added in k order; V is
    ``V[iv:iv + K * K]`` row-major.
    """
    for k in range(K):
        u[k] = 0.0
    for j in range(N - 1):
        u[int(states[base + j])] += S[j]
    for b in range(K):
        acc = 0.0
        for k in range(K):
            acc += u[k] * V[iv + b * K + k]
        f[b] = acc


@njit(cache=True, fastmath=False)
def reduced_forward(states, n, K, N, V, a, c, rho, S, f):
    """Attention weights S (n, N) and outputs f (n, K) of the reduced model for n walks (docs/models/token_selection.md
    §C.5, logits l_j; output as :func:`_output_row`). V (K*K,) row-major, a (K,), c (N,).
    """
    x = np.concatenate((V, a, c))
    u = np.empty(K)
    for w in range(n):
        _attention_row(states, w * N, K, N, x, K * K, K * K + K, rho, S[w])
        _output_row(states, w * N, K, N, x, 0, S[w], u, f[w])


@njit(cache=True, fastmath=False)
def reduced_rhs(t, y, p, args, dy):
    """Gradient-flow vector field of the reduced state: dy/dtau = G(y) (docs/models/token_selection.md §0, §C.5, updates
    / eta).

    ODE-kernel signature of ``dynamics.integrate``; ``p`` as for :func:`reduced_step` (eta unused).
    """
    states = args[0]
    weights = args[1]
    G2 = np.empty(y.shape[0])
    _accumulate_gradient(states, weights, args[2][0], args[2][1], y, p[0], p[1], dy, G2)


# ----------------------------------------------------------------------------------------------------------------
# The derived variables of ``random_walk.map``/``flow`` at every save, inside the compiled loop (``dynamics``'
# ``observe``/``step_observe``), in the arithmetic of the numpy functions they replace (``_gradient_and_se``,
# ``direction_error``, ``diagnostics``), so that both are equal bit for bit: norms and weighted means are the BLAS dot
# numpy calls (``np.dot`` of contiguous vectors here, ``np.linalg.norm``/``w @ v`` there), ``np.sum`` and row norms
# replay numpy's pairwise rule (closedform._numpy_rules), the weighted quantile sorts stably and scans the running sum.

N_TRAIN_OBSERVABLES = 6  # loss, se_loss, se_grad_V, se_grad_a, se_grad_c, dist_V_sqrtChat
N_TEST_OBSERVABLES = 10  # random_walk.DIAGNOSTIC_NAMES


@njit(cache=True, fastmath=False, error_model="numpy")
def _se_max(G, G2, lo, hi, nm1):
    """max over j in [lo, hi) of sqrt(max(G2_j - G_j^2, 0) / (n - 1)) (NaN if any is NaN, as ``np.max``)."""
    m = 0.0
    for j in range(lo, hi):
        v = G2[j] - G[j] * G[j]
        if v < 0.0:
            v = 0.0
        se = math.sqrt(v / nm1)
        if j == lo or se > m or math.isnan(se):
            m = se
        if math.isnan(m):
            return m
    return m


@njit(cache=True, fastmath=False, error_model="numpy")
def _norm(v):
    """The Euclidean norm of the contiguous vector v as ``np.linalg.norm`` computes it: sqrt of the BLAS dot."""
    return math.sqrt(np.dot(v, v))


@njit(cache=True, fastmath=False, error_model="numpy")
def _unit_distance(v, nv, unit, uo, work):
    """||v/nv - u||_2 with the unit target u = ``unit[uo:uo + len(v)]`` (``direction_error``); NaN for nv = 0."""
    if nv == 0.0:
        return np.nan
    for j in range(v.shape[0]):
        work[j] = v[j] / nv - unit[uo + j]
    return _norm(work)


@njit(cache=True, fastmath=False, inline="always")
def _row_sum(d, K):
    """numpy's sum of d[0:K] (a row of ``np.linalg.norm(..., axis=1)``): a plain loop below 8 terms, the pairwise
    rule above.
    """
    if K >= 8:
        return pairwise_sum(d, 0, K)
    acc = 0.0
    for k in range(K):
        acc += d[k]
    return acc


@njit(cache=True, fastmath=False)
def _stable_argsort(v):
    """``np.argsort(v, kind="stable")`` for finite v: insertion sort up to 64 values (a quarter of the cost of numba's
    merge sort at 30), numba's merge sort above; both keep equal values in their original order, so the permutation
    is numpy's.
    """
    n = v.shape[0]
    if n > 64:
        return np.argsort(v, kind="mergesort")
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        j = i
        while j > 0 and v[order[j - 1]] > v[i]:
            order[j] = order[j - 1]
            j -= 1
        order[j] = i
    return order


@njit(cache=True, fastmath=False, error_model="numpy")
def _test_observables(x, nv, rho, K, N, consts, states, weights, obs):
    """``random_walk.DIAGNOSTIC_NAMES`` of the reduced state x (nv = ||V||_F) on the test walks
    (``random_walk.diagnostics``) into obs[0:10]. ``consts`` as in :func:`observables`.
    """
    n = weights.shape[0]
    nV = K * K
    S = np.empty(N)
    u = np.empty(K)
    f = np.empty(K)
    d = np.empty(K)
    correct = np.empty(n)
    rb = np.empty(n)
    parent = np.empty(n)
    blank = np.empty(n)
    other = np.empty(n)
    ferr = np.empty(n)
    io = 5 * nV + 2  # the test walks' unit target rows Pi[s_{N-1}] / ||Pi[s_{N-1}]||
    for w in range(n):
        base = w * N
        _attention_row(states, base, K, N, x, nV, nV + K, rho, S)
        _output_row(states, base, K, N, x, 0, S, u, f)
        pred = 0  # np.argmax: the first maximum (the first NaN if any)
        for k in range(1, K):
            if math.isnan(f[pred]):
                break
            if f[k] > f[pred] or math.isnan(f[k]):
                pred = k
        y = int(states[base + N - 1])
        s_par = int(states[base + N - 2])
        correct[w] = 1.0 if pred == y else 0.0
        rb[w] = consts[4 * nV + s_par * K + pred]
        parent[w] = S[N - 2]
        blank[w] = S[N - 1]
        m = S[0] if N > 2 else S[N - 1]
        for j in range(N):
            if j != N - 2 and (S[j] > m or math.isnan(S[j])) and not math.isnan(m):
                m = S[j]
        other[w] = m
        for k in range(K):
            d[k] = f[k] * f[k]
        nf = math.sqrt(_row_sum(d, K))
        for k in range(K):
            e = f[k] / nf - consts[io + w * K + k]
            d[k] = e * e
        ferr[w] = math.sqrt(_row_sum(d, K))
    obs[0] = np.dot(weights, correct)
    obs[1] = np.dot(weights, rb)
    obs[2] = np.dot(weights, parent)
    order = _stable_argsort(parent)
    cum = np.empty(n)
    run = 0.0
    for i in range(n):
        run += weights[order[i]]
        cum[i] = run
    target = consts[5 * nV + 1] * cum[n - 1]
    idx = n - 1
    for i in range(n):  # np.searchsorted(cum, target, side="left") on the non-decreasing cum
        if cum[i] >= target:
            idx = i
            break
    obs[3] = parent[order[idx]]
    obs[4] = np.dot(weights, blank)
    obs[5] = np.dot(weights, other)
    V = x[:nV]
    work = np.empty(nV)
    obs[6] = _unit_distance(V, nv, consts, 2 * nV, work)
    obs[7] = _unit_distance(V, nv, consts, 3 * nV, work)
    if nv == 0.0:
        obs[8] = np.nan
    else:
        for j in range(nV):
            work[j] = V[j] * consts[nV + j]
        obs[8] = pairwise_sum(work, 0, nV) / (nv * consts[5 * nV])
    obs[9] = np.dot(weights, ferr)


@njit(cache=True, fastmath=False, error_model="numpy")
def _observables_of(x, p, args, G, G2, loss, loss2, obs):
    """Write the observables of x from its gradient (G, G2, loss, loss2 of :func:`_accumulate_gradient`)."""
    dims = args[2]
    K = dims[0]
    N = dims[1]
    nV = K * K
    consts = args[3]
    obs[0] = loss
    if dims[2] == 1:
        nm1 = float(args[1].shape[0] - 1)
        v = loss2 - loss * loss
        if v < 0.0:
            v = 0.0
        obs[1] = math.sqrt(v / nm1)
        obs[2] = _se_max(G, G2, 0, nV, nm1)
        obs[3] = _se_max(G, G2, nV, nV + K, nm1)
        obs[4] = _se_max(G, G2, nV + K, nV + K + N, nm1)
    else:
        obs[1] = 0.0
        obs[2] = 0.0
        obs[3] = 0.0
        obs[4] = 0.0
    V = x[:nV].copy()
    nv = _norm(V)
    obs[5] = _unit_distance(V, nv, consts, 0, np.empty(nV))
    if dims[3] > 0:
        _test_observables(x, nv, p[0], K, N, consts, args[4], args[5], obs[N_TRAIN_OBSERVABLES:])


@njit(cache=True, fastmath=False, error_model="numpy")
def observables(k, x, p, args, out):
    """Derived variables of ``random_walk.map``/``flow`` at the reduced state x (the engine's ``observe``): loss,
    se_loss, se_grad_V, se_grad_a, se_grad_c (largest SE over each block of the gradient) and dist_V_sqrtChat on the
    training walks, then, when ``dims[3] = n_test > 0``, ``random_walk.DIAGNOSTIC_NAMES`` on the test walks
    (docs/models/token_selection.md §C.5.1).

    ``args`` = (states, weights, dims = [K, N, se, n_test], consts, test states, test weights); ``consts`` holds, each
    (K*K,) row-major: the unit target sqrt(C_hat^T)/||.|| of the training walks, Pi^T, Pi^T/||Pi^T||,
    sqrt(Pi^T)/||sqrt(Pi^T)||, Pi; then ||Pi^T|| and the quantile level q; then the unit rows Pi[s_{N-1}]/||.|| of
    the test walks (n_test * K).
    """
    n_state = x.shape[0]
    G = np.empty(n_state)
    G2 = np.empty(n_state)
    dims = args[2]
    loss, loss2 = _accumulate_gradient(args[0], args[1], dims[0], dims[1], x, p[0], p[1], G, G2)
    _observables_of(x, p, args, G, G2, loss, loss2, out)


@njit(cache=True, fastmath=False, error_model="numpy")
def step_observables(k, x, p, args, out, obs):
    """:func:`reduced_step` into ``out`` and :func:`observables` of x into ``obs`` from one gradient evaluation (bit
    for bit the two separate calls). The engine's ``step_observe``.
    """
    n_state = x.shape[0]
    G = np.empty(n_state)
    G2 = np.empty(n_state)
    dims = args[2]
    loss, loss2 = _accumulate_gradient(args[0], args[1], dims[0], dims[1], x, p[0], p[1], G, G2)
    eta = p[2]
    for j in range(n_state):
        out[j] = x[j] + eta * G[j]
    _observables_of(x, p, args, G, G2, loss, loss2, obs)
