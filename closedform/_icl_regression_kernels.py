"""Private numba kernels of :mod:`closedform.icl_regression` (approximate loss, its gradient, flows, Monte Carlo).

All kernels are ``@njit(cache=True, fastmath=False)``, float64, allocation-free where the caller can allocate, and
draw no random numbers (the public wrappers draw them). Symbols follow the table of :mod:`closedform.icl_regression`;
the mathematics is in docs/models/icl_regression.md (He, Pan, Chen, Yang, ICML 2025, arXiv:2503.12734).

Parameter vectors handed to the ``dynamics`` engine:

- flows (:func:`flow_rhs`, :func:`two_head_rhs`): ``p = [d, cL]`` with ``cL = (1 + sigma2) / L``;
- GD (:func:`gd_step`): ``p = [d, cL, lr]``;
- either with ``sigma2`` appended as the last entry when the engine also evaluates :func:`observables` (the
  compiled derived variables F, mu.omega, sum mu at every save point): ``[d, cL, sigma2]``, ``[d, cL, lr, sigma2]``.

The state of the general-H kernels is ``x = (omega_1..omega_H, mu_1..mu_H)`` (H = len(x) // 2).

The engine kernels ``gd_step`` and ``flow_rhs`` and the row loops ``loss_batch`` and ``grad_batch`` allocate nothing and
are compiled without reference counting (``dynamics._jit.njit_noref``): the views (one row) they pass on otherwise cost
atomic reference-count pairs per call (~30 % of a GD step at H = 8, ~20 % of a loss row). The exponentials of the
gradient and of F are evaluated in one loop over a stack buffer (see ``_kernel_row_sums``), vectorised from
``VEC_HEADS`` heads on with ``closedform._simd.exp_poly`` (within 1.5 ulp of exp; the library exp, as before, below).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from dynamics._jit import njit_noref

from closedform._simd import exp_poly, load, stack_buffer, store


@njit(cache=True, fastmath=False)
def loss_one(omega, mu, d, sigma2, cL):
    """F(omega, mu) for one configuration: docs/models/icl_regression.md §4.1, Eq. (4.1) (Proposition 4.1). Returns a
    float.
    """
    H = omega.shape[0]
    u = 0.0
    for h in range(H):
        u += mu[h] * omega[h]
    quad = 0.0
    for h in range(H):
        acc = 0.5 * np.exp(d * omega[h] * omega[h]) * mu[h]
        for g in range(h + 1, H):
            acc += np.exp(d * omega[h] * omega[g]) * mu[g]
        quad += mu[h] * acc
    # mu^T K mu = sum_h mu_h^2 K_hh + 2 sum_{h<g} mu_h mu_g K_hg  (K symmetric; each exponential computed once)
    return 1.0 + sigma2 - 2.0 * u + u * u + 2.0 * cL * quad


@njit_noref(cache=True, fastmath=False)
def loss_batch(Omega, Mu, d, sigma2, cL, out):
    """F for a batch of configurations, rows of ``Omega``/``Mu`` (n, H) -> ``out`` (n,).
    docs/models/icl_regression.md §4.1, Eq. (4.1).
    """
    for n in range(Omega.shape[0]):
        out[n] = loss_one(Omega[n], Mu[n], d, sigma2, cL)


# The kernel matrix K_hg = exp(d omega_h omega_g) of the gradient and of F: its upper triangle (each exponential once,
# K symmetric) is evaluated into a stack buffer in three loops: the arguments, then the exponentials (vectorised by
# LLVM with exp_poly from H = VEC_HEADS heads on; below that, H(H+1)/2 <= 15 library calls are cheaper than the
# vector loop), then the row sums. Cost per evaluation: c0 + c1 H + c2 H^2, with H(H+1)/2 exponentials at SIMD
# throughput and ~4 H^2 flops for the sums; a GD step measured 26, 59, 122, 281, 910 ns at H = 2, 4, 8, 16, 32
# (c2 ~ 0.8 ns; one library exp per pair gave 23, 57, 163, 545, 2190 ns in the same run). The buffer holds the
# triangle of at most MAX_HEADS heads.
MAX_HEADS = 90
VEC_HEADS = 6


@njit(cache=True, fastmath=False, inline="always")
def _kernel_row_sums(x, d, out):
    """Row sums of K_hg = exp(d omega_h omega_g) for the state x = (omega, mu) (H = len(x) // 2): out[h] =
    sum_g mu_g omega_g K_hg and out[H + h] = sum_g mu_g K_hg (docs/models/icl_regression.md §4.4), each summed over
    g = 0..H-1 in increasing order. Returns u = mu^T omega.
    """
    H = x.shape[0] // 2
    if H > MAX_HEADS:
        raise ValueError("icl_regression kernels: more heads than MAX_HEADS")
    E = stack_buffer(4095)  # MAX_HEADS (MAX_HEADS + 1) / 2 values
    vec = H >= VEC_HEADS
    u = 0.0
    for h in range(H):
        u += x[H + h] * x[h]
        out[h] = 0.0  # holds the terms g < h until row h is reached
        out[H + h] = 0.0
    n = 0
    for h in range(H):
        a = d * x[h]
        for g in range(h, H):
            store(E, n, a * x[g])
            n += 1
    if vec:
        for j in range(n):
            store(E, j, exp_poly(load(E, j)))
    else:
        for j in range(n):
            store(E, j, np.exp(load(E, j)))
    i = 0
    for h in range(H):
        wh = x[h]
        mh = x[H + h]
        kk = load(E, i)
        i += 1
        # row h in registers: out[h] holds the terms g < h, then g = h, then g > h are added
        s_w = out[h] + mh * wh * kk
        s_m = out[H + h] + mh * kk
        for g in range(h + 1, H):
            wg = x[g]
            mg = x[H + g]
            kk = load(E, i)
            i += 1
            s_w += mg * wg * kk
            out[g] += mh * wh * kk
            s_m += mg * kk
            out[H + g] += mh * kk
        out[h] = s_w
        out[H + h] = s_m
    return u


@njit(cache=True, fastmath=False, inline="always")
def _half_grad_from_sums(x, d, cL, u, out, h):
    """(d(F/2)/d omega_h, d(F/2)/d mu_h) from the row sums of _kernel_row_sums in ``out``."""
    H = x.shape[0] // 2
    one_minus_u = 1.0 - u
    return (-x[H + h] * one_minus_u + d * cL * x[H + h] * out[h], -x[h] * one_minus_u + cL * out[H + h])


@njit_noref(cache=True, fastmath=False)
def half_grad_state(x, d, cL, out):
    """grad(F/2) at the state x = (omega, mu), written into out = (g_omega, g_mu) (the authors' ``gradients``).

    From docs/models/icl_regression.md §4.4, Eq. (4.4) halved,

    d(F/2)/d omega_h = -mu_h (1 - u) + d cL mu_h sum_g mu_g omega_g K_hg,
    d(F/2)/d mu_h    = -omega_h (1 - u) + cL sum_g mu_g K_hg,   u = mu^T omega, K_hg = exp(d omega_h omega_g),

    the sums from _kernel_row_sums (each exponential once).
    """
    H = x.shape[0] // 2
    u = _kernel_row_sums(x, d, out)
    for h in range(H):
        g_omega, g_mu = _half_grad_from_sums(x, d, cL, u, out, h)
        out[h] = g_omega
        out[H + h] = g_mu


@njit_noref(cache=True, fastmath=False)
def grad_batch(X, d, cL, G):
    """grad F (full, no 1/2) for a batch of states, rows of X (n, 2H) = (omega, mu) -> G (n, 2H):
    docs/models/icl_regression.md §4.4, Eq. (4.4).
    """
    for n in range(X.shape[0]):
        half_grad_state(X[n], d, cL, G[n])
        for j in range(X.shape[1]):
            G[n, j] *= 2.0


@njit_noref(cache=True, fastmath=False)
def flow_rhs(t, y, p, dy):
    """Gradient flow of F/2 for H heads, state (omega, mu): docs/models/icl_regression.md §5.1 (flow of F/2, time
    convention docs/models/icl_regression.md §0.3).
    """
    half_grad_state(y, p[0], p[1], dy)
    for j in range(y.shape[0]):
        dy[j] = -dy[j]


@njit_noref(cache=True, fastmath=False)
def gd_step(k, x, p, out):
    """One GD step on F/2 with learning rate ``p[2]``: docs/models/icl_regression.md §5.1 (the authors' helper
    ``gradient_flow``).
    """
    H = x.shape[0] // 2
    d = p[0]
    cL = p[1]
    lr = p[2]
    u = _kernel_row_sums(x, d, out)
    for h in range(H):
        g_omega, g_mu = _half_grad_from_sums(x, d, cL, u, out, h)
        out[h] = x[h] - lr * g_omega
        out[H + h] = x[H + h] - lr * g_mu


# Names of the values written by :func:`observables`, in order (the trajectory variables of ``map``/``flow``).
OBSERVABLE_NAMES = ("F", "mu_dot_omega", "sum_mu")


@njit(cache=True, fastmath=False, inline="always")
def _write_observables(x, p, u, sums, obs):
    """F, mu^T omega and sum_h mu_h from u and the row sums S_h = sums[H + h] of _kernel_row_sums."""
    H = x.shape[0] // 2
    s = 0.0
    quad = 0.0  # mu^T K mu = sum_h mu_h S_h
    for h in range(H):
        s += x[H + h]
        quad += x[H + h] * sums[H + h]
    obs[0] = 1.0 + p[p.shape[0] - 1] - 2.0 * u + u * u + p[1] * quad
    obs[1] = u
    obs[2] = s


@njit(cache=True, fastmath=False)
def observables(k, x, p, out):
    """Derived variables of the state x = (omega, mu) for the engine's ``observe=`` hook, at every save point.

    out[0] = F(omega, mu) of docs/models/icl_regression.md §4.1, Eq. (4.1), with d = p[0], cL = p[1] and sigma2 = p[-1],
    written as F = 1 + sigma2 - 2 u + u^2 + cL sum_h mu_h S_h with u = mu^T omega and S_h = sum_g K_hg mu_g the row sums
    that the gradient (docs/models/icl_regression.md §4.4) also needs (from the same _kernel_row_sums, so this equals
    the F of :func:`gd_step_observables` bit for bit, and :func:`loss_one` to rounding). out[1] = mu^T omega
    (docs/models/icl_regression.md §4.4); out[2] = sum_h mu_h (docs/models/icl_regression.md §5.2). ``k`` (step or
    time) is unused. Allocates the row sums (the fused step shares them with the gradient).
    """
    sums = np.empty(x.shape[0])
    u = _kernel_row_sums(x, p[0], sums)
    _write_observables(x, p, u, sums, out)


@njit_noref(cache=True, fastmath=False)
def gd_step_observables(k, x, p, out, obs):
    """:func:`gd_step` into ``out`` and :func:`observables` of ``x`` into ``obs`` in one pass, bit for bit equal to
    the two separate calls (same operations in the same order): the row sums S_h = sum_g K_hg mu_g of the gradient
    (docs/models/icl_regression.md §4.4, Eq. (4.4) halved) also give F (docs/models/icl_regression.md §4.1, Eq. (4.1))
    as 1 + sigma2 - 2 u + u^2 + cL sum_h mu_h S_h. The engine's ``step_observe``.
    """
    H = x.shape[0] // 2
    d = p[0]
    cL = p[1]
    lr = p[2]
    u = _kernel_row_sums(x, d, out)
    _write_observables(x, p, u, out, obs)
    for h in range(H):
        g_omega, g_mu = _half_grad_from_sums(x, d, cL, u, out, h)
        out[h] = x[h] - lr * g_omega
        out[H + h] = x[H + h] - lr * g_mu


@njit(cache=True, fastmath=False)
def two_head_rhs(t, y, p, dy):
    """Reduced symmetric two-head flow (omega, mu) = (omega_1, mu_1), omega_2 = -omega_1, mu_2 = -mu_1.

    docs/models/icl_regression.md §6.2, Eq. (B.4): d omega/dt = mu - 2 mu^2 omega - 2 d cL mu^2 omega cosh(d omega^2),
    d mu/dt = omega - 2 mu omega^2 - 2 cL mu sinh(d omega^2).
    """
    d = p[0]
    cL = p[1]
    omega = y[0]
    mu = y[1]
    chi = d * omega * omega
    dy[0] = mu - 2.0 * mu * mu * omega - 2.0 * d * cL * mu * mu * omega * np.cosh(chi)
    dy[1] = omega - 2.0 * mu * omega * omega - 2.0 * cL * mu * np.sinh(chi)


@njit(cache=True, fastmath=False)
def mc_conditional_losses(a, s, omega, mu, d, sigma2, out):
    """Per-prompt conditional loss of the reduced predictor (3.2) given the covariates:
    docs/models/icl_regression.md §4.1 (reduced form).

    Rotated coordinates (exact in law, see ``icl_regression.true_loss_mc``): ``a[n, i] = x_i . xq/|xq|`` and
    ``s[n] = |xq|``, so that x_i . xq = s a_i. With w_i = sum_h mu_h softmax_i(omega_h s a_i) (stable softmax),
    beta ~ N(0, I/d) and the label noise integrated out exactly,
    out[n] = sigma2 + (s - sum_i w_i a_i)^2 / d + ((d - 1)/d + sigma2) sum_i w_i^2 = E[(y_q - yhat)^2 | x_1..x_L, x_q].
    """
    N, L = a.shape
    H = omega.shape[0]
    w = np.empty(L)
    e = np.empty(L)
    c_perp = (d - 1.0) / d + sigma2
    for n in range(N):
        for i in range(L):
            w[i] = 0.0
        amax = a[n, 0]
        amin = a[n, 0]
        for i in range(1, L):
            if a[n, i] > amax:
                amax = a[n, i]
            if a[n, i] < amin:
                amin = a[n, i]
        for h in range(H):
            z = omega[h] * s[n]
            shift = z * amax if z >= 0.0 else z * amin  # max_i of the logits z a_i (stable softmax)
            tot = 0.0
            for i in range(L):
                e[i] = np.exp(z * a[n, i] - shift)
                tot += e[i]
            scale = mu[h] / tot
            for i in range(L):
                w[i] += scale * e[i]
        wa = 0.0
        ww = 0.0
        for i in range(L):
            wa += w[i] * a[n, i]
            ww += w[i] * w[i]
        r = s[n] - wa
        out[n] = sigma2 + r * r / d + c_perp * ww
