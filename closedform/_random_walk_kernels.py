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
  ``args`` = (states (n*N,) float64, weights (n,), dims = [K, N] int64).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


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


@njit(cache=True, fastmath=False)
def reduced_attention(states, n, K, N, a, c, rho, out):
    """Attention weights S (n, N) of the reduced model for n walks (docs/models/token_selection.md §C.5, logits l_j)."""
    rho2 = rho * rho
    for w in range(n):
        base = w * N
        lmax = -np.inf
        for j in range(N):
            if j < N - 1:
                lj = rho * a[int(states[base + j])] + rho2 * c[j]
            else:
                lj = rho2 * c[N - 1]
            out[w, j] = lj
            if lj > lmax:
                lmax = lj
        Z = 0.0
        for j in range(N):
            out[w, j] = math.exp(out[w, j] - lmax)
            Z += out[w, j]
        for j in range(N):
            out[w, j] /= Z


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
