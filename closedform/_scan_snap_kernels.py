"""Private numba kernels of ``closedform.scan_snap`` (docs/models/scan_snap.md §2.3-§2.4, §4.2-§4.4).

All kernels are ``@njit(cache=True, fastmath=False)``, float64, pure, with no RNG. The public wrappers in
``closedform/scan_snap.py`` validate inputs, build the parameter row ``p`` and the data ``args`` and build the
``Trajectory``.

Parameter row ``p`` (float64, one per trajectory or shared): ``[eta_Y, eta_Z, mu, q_mode, M]`` (the P_* indices).

Data ``args`` (shared by all trajectories), the class structure (docs/models/scan_snap.md §4.1) in the order of the
A_* indices: dims = [Lc, Ncol, K, Q] (int64), P (K, Lc), logP (K, Lc: log P where P > 0, else 0; finite as the
engine requires), pi (K), psi (K, int64), tcol (K, int64), mult (Ncol), then the supports of the classes in
compressed form: sup (K+1 offsets, int64) and tok (int64, the tokens l with P(l|n) > 0 of class n, increasing, at
tok[sup[n]:sup[n+1]]).

The decoder Y is stored with ``Ncol`` columns, column j standing for ``mult[j]`` identical output columns
(unlumped: Ncol = M, mult = 1; lumped, docs/models/scan_snap.md §4.2: the K target columns, then one column ``y_rest``
of multiplicity M - K when M > K). ``tcol[n]`` is the column holding class n's target output.

Flow state ``y``: Y (Lc*Ncol, row-major Y[l, j] at l*Ncol + j), then Z (Q*Lc, row-major z_{ml} at m*Lc + l).
Map state: the flow state followed by the momentum buffers buf_Y, buf_Z in the same layout
(docs/models/scan_snap.md §4.3).
"""

from __future__ import annotations

import numpy as np
from numba import njit

P_ETA_Y, P_ETA_Z, P_MU, P_QMODE, P_M = 0, 1, 2, 3, 4
A_DIMS, A_P, A_LOGP, A_PI, A_PSI, A_TCOL, A_MULT, A_SUP, A_TOK = 0, 1, 2, 3, 4, 5, 6, 7, 8


@njit(cache=True, fastmath=False)
def _unit_attention(P, logP, n, z, zoff, f):
    """Write f_n = c~_n / ||c~_n|| (docs/models/scan_snap.md §2.1, Eq. 5) into ``f`` from log P(l|n) + z_ml, max
    subtracted.
    """
    Lc = P.shape[1]
    mx = -np.inf
    for ell in range(Lc):
        if P[n, ell] > 0.0:
            v = logP[n, ell] + z[zoff + ell]
            if v > mx:
                mx = v
    s2 = 0.0
    for ell in range(Lc):
        c = np.exp(logP[n, ell] + z[zoff + ell] - mx) if P[n, ell] > 0.0 else 0.0
        f[ell] = c
        s2 += c * c
    nrm = np.sqrt(s2)
    for ell in range(Lc):
        f[ell] /= nrm


@njit(cache=True, fastmath=False, inline="always")
def _support_attention(logP, n, tok, a, b, z, zoff, f):
    """_unit_attention on the support of class n only: f[q] for the tokens l = tok[q], q in [a, b) (the arithmetic
    of _unit_attention on those tokens, whose other entries are 0).
    """
    mx = -np.inf
    for q in range(a, b):
        ell = tok[q]
        v = logP[n, ell] + z[zoff + ell]
        if v > mx:
            mx = v
    s2 = 0.0
    for q in range(a, b):
        ell = tok[q]
        c = np.exp(logP[n, ell] + z[zoff + ell] - mx)
        f[q - a] = c
        s2 += c * c
    nrm = np.sqrt(s2)
    for q in range(b - a):
        f[q] /= nrm


# inlined into exact_rhs and map_step: a call that hands on the nine arrays of args costs ~0.1 us, an eighth of the
# whole right-hand side of Syn-Small
@njit(cache=True, fastmath=False, inline="always")
def ascent(y, args, out):
    """Population ascent directions grad_Y, grad_Z of docs/models/scan_snap.md §4.2 (without learning rates), packed
    like ``y``; ``args`` the class structure (module docstring).

    grad_Y = sum_n pi_n f_n err_n^T and grad_{Z,m} = sum_{psi(n)=m} pi_n f_n * (g_n - f_n (f_n^T g_n)), with
    err_n = e_tgt(n) - alpha_n, g_n = Y err_n summed over columns with their multiplicities (lumped form of
    docs/models/scan_snap.md §4.2). Only the first Lc*Ncol + Q*Lc entries of ``out`` are written. Each class runs
    over its support only (f_n vanishes elsewhere), in increasing token order, with the products over the columns in
    loops of their own (vectorised by LLVM) and every sum in the order of the dense formula, so the result equals
    the dense computation bit for bit.
    """
    dims, logP, pi, psi, tcol, mult = args[A_DIMS], args[A_LOGP], args[A_PI], args[A_PSI], args[A_TCOL], args[A_MULT]
    sup, tok = args[A_SUP], args[A_TOK]
    Lc, Ncol, K, Q = dims[0], dims[1], dims[2], dims[3]
    nY = Lc * Ncol
    for i in range(nY + Q * Lc):
        out[i] = 0.0
    f = np.empty(Lc)
    a = np.empty(Ncol)
    ma = np.empty(Ncol)
    for n in range(K):
        pin = pi[n]
        m = psi[n]
        tc = tcol[n]
        zoff = nY + m * Lc
        qa = sup[n]
        qb = sup[n + 1]
        _support_attention(logP, n, tok, qa, qb, y, zoff, f)
        # decoder logits a_j = y_j^T f_n
        for j in range(Ncol):
            a[j] = 0.0
        for q in range(qb - qa):
            fl = f[q]
            if fl != 0.0:
                row = tok[qa + q] * Ncol
                for j in range(Ncol):
                    a[j] += y[row + j] * fl
        amax = a[0]
        for j in range(1, Ncol):
            if a[j] > amax:
                amax = a[j]
        nrm = 0.0
        for j in range(Ncol):
            a[j] = np.exp(a[j] - amax)
            nrm += mult[j] * a[j]
        # a becomes err_n = 1[j = tc] - alpha_{n,j} (per output of column j)
        for j in range(Ncol):
            a[j] = -a[j] / nrm
        a[tc] += 1.0
        for j in range(Ncol):
            ma[j] = mult[j] * a[j]
        # grad_Y and g_n = sum_j mult_j err_j y_j restricted to supp(f_n); f^T g
        fg = 0.0
        for q in range(qb - qa):
            fl = f[q]
            if fl != 0.0:
                ell = tok[qa + q]
                row = ell * Ncol
                c = pin * fl
                for j in range(Ncol):
                    out[row + j] += c * a[j]
                gl = 0.0
                for j in range(Ncol):
                    gl += ma[j] * y[row + j]
                # store g_l temporarily in the Z slot; finished below once f^T g is known
                out[zoff + ell] += c * gl
                fg += fl * gl
        for q in range(qb - qa):
            fl = f[q]
            if fl != 0.0:
                out[zoff + tok[qa + q]] -= pin * fl * fl * fg


@njit(cache=True, fastmath=False)
def exact_rhs(t, y, p, args, dy):
    """Exact reduced ODE of docs/models/scan_snap.md §4.2 (POPULATION convention): dY/dt = eta_Y grad_Y, dZ/dt = eta_Z
    grad_Z.
    """
    dims = args[A_DIMS]
    Lc, Ncol, Q = dims[0], dims[1], dims[3]
    ascent(y, args, dy)
    nY = Lc * Ncol
    if p[P_ETA_Y] != 1.0:  # (a product by 1.0 changes nothing)
        for i in range(nY):
            dy[i] *= p[P_ETA_Y]
    if p[P_ETA_Z] != 1.0:
        for i in range(nY, nY + Q * Lc):
            dy[i] *= p[P_ETA_Z]


@njit(cache=True, fastmath=False)
def map_step(k, x, p, args, out):
    """One update s -> s+1 of the population map of docs/models/scan_snap.md §4.3 (heavy-ball with mu = p[P_MU]; mu = 0
    is plain GD).

    State x = [Y, Z, buf_Y, buf_Z]; buf_1 = grad(Y_0, Z_0), buf_{s+1} = mu buf_s + grad(Y_s, Z_s),
    Y_{s+1} = Y_s + eta_Y buf^Y_{s+1}, Z_{s+1} = Z_s + eta_Z buf^Z_{s+1} (PyTorch SGD, dampening 0).
    """
    dims = args[A_DIMS]
    Lc, Ncol, Q = dims[0], dims[1], dims[3]
    n = Lc * Ncol + Q * Lc
    nY = Lc * Ncol
    mu = p[P_MU] if k > 0 else 0.0
    g = np.empty(n)
    ascent(x, args, g)
    for i in range(n):
        b = mu * x[n + i] + g[i]
        out[n + i] = b
        lr = p[P_ETA_Y] if i < nY else p[P_ETA_Z]
        out[i] = x[i] + lr * b


@njit(cache=True, fastmath=False)
def wright_omega(x):
    """Wright omega w + ln w = x by 5 Newton steps from x - ln x (x > 1) or exp(x) (docs/models/scan_snap.md §2.3,
    numerical note).
    """
    w = x - np.log(x) if x > 1.0 else np.exp(x)
    for _ in range(5):
        w = w - (w + np.log(w) - x) * w / (1.0 + w)
    return w


@njit(cache=True, fastmath=False)
def decoder_h(tau, M, eta_Y):
    """h(tau) of Lemma 6 (docs/models/scan_snap.md §2.3): M h = ln(M-1) + ln wright_omega(A/(M-1) - ln(M-1)), A = M
    eta_Y tau + 1.
    """
    A = M * eta_Y * tau + 1.0
    return (np.log(M - 1.0) + np.log(wright_omega(A / (M - 1.0) - np.log(M - 1.0)))) / M


@njit(cache=True, fastmath=False)
def speed_gamma(t, M, K, eta_Y):
    """gamma(t) = (M-1)^2 h(t/K) / ((M-1) + exp(M h(t/K))) (docs/models/scan_snap.md §2.4)."""
    h = decoder_h(t / K, M, eta_Y)
    return (M - 1.0) ** 2 * h / ((M - 1.0) + np.exp(M * h))


@njit(cache=True, fastmath=False)
def _cholesky_solve(G, B):
    """Solve G X = B in place (B <- X) for symmetric positive definite G (K x K, small); G is overwritten by L."""
    K = G.shape[0]
    for j in range(K):
        s = G[j, j]
        for k in range(j):
            s -= G[j, k] * G[j, k]
        G[j, j] = np.sqrt(s)
        for i in range(j + 1, K):
            s = G[i, j]
            for k in range(j):
                s -= G[i, k] * G[j, k]
            G[i, j] = s / G[j, j]
    for c in range(B.shape[1]):
        for i in range(K):  # forward: L u = b
            s = B[i, c]
            for k in range(i):
                s -= G[i, k] * B[k, c]
            B[i, c] = s / G[i, i]
        for i in range(K - 1, -1, -1):  # backward: L^T x = u
            s = B[i, c]
            for k in range(i + 1, K):
                s -= G[k, i] * B[k, c]
            B[i, c] = s / G[i, i]


@njit(cache=True, fastmath=False)
def composite_rhs(t, z, p, args, dz):
    """Composite (Theorem-1) ODE of docs/models/scan_snap.md §4.4 in Z only.

    g_n = gamma(t) F (F^T F)^{-1} q^(n), dz_m/dt = eta_Z sum_{psi(n)=m} pi_n f_n * (g_n - f_n (f_n^T g_n)),
    with q^(n)_n = M/(M-1), q^(n)_k = -M/(M-1)^2 (q_mode = 0, exact) or q^(n) = e_n (q_mode = 1, leading order).
    """
    dims, P, logP, pi, psi = args[A_DIMS], args[A_P], args[A_LOGP], args[A_PI], args[A_PSI]
    Lc, K, Q = dims[0], dims[2], dims[3]
    M = p[P_M]
    eta_Z = p[P_ETA_Z]
    gam = speed_gamma(t, M, K, p[P_ETA_Y])
    F = np.empty((Lc, K))
    f = np.empty(Lc)
    for n in range(K):
        _unit_attention(P, logP, n, z, psi[n] * Lc, f)
        for ell in range(Lc):
            F[ell, n] = f[ell]
    # Gram matrix F^T F (symmetric positive definite when the f_n are independent, docs/models/scan_snap.md §2.1)
    G = np.empty((K, K))
    for a in range(K):
        for b in range(a + 1):
            s = 0.0
            for ell in range(Lc):
                s += F[ell, a] * F[ell, b]
            G[a, b] = s
            G[b, a] = s
    if p[P_QMODE] == 0.0:
        q1 = M / (M - 1.0)
        q0 = -M / (M - 1.0) ** 2
    else:
        q1 = 1.0
        q0 = 0.0
    X = np.full((K, K), q0)  # column n: q^(n); overwritten by (F^T F)^{-1} q^(n)
    for n in range(K):
        X[n, n] = q1
    _cholesky_solve(G, X)
    Gn = np.zeros((Lc, K))  # column n: F (F^T F)^{-1} q^(n)
    for n in range(K):
        for k in range(K):
            x = X[k, n]
            for ell in range(Lc):
                Gn[ell, n] += F[ell, k] * x
    for i in range(Q * Lc):
        dz[i] = 0.0
    for n in range(K):
        zoff = psi[n] * Lc
        fg = 0.0
        for ell in range(Lc):
            fg += F[ell, n] * Gn[ell, n]
        c = eta_Z * gam * pi[n]
        for ell in range(Lc):
            dz[zoff + ell] += c * F[ell, n] * (Gn[ell, n] - F[ell, n] * fg)
