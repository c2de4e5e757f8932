"""Private numba kernels of ``closedform.single_location`` (docs/models/single_location.md §4-§6).

Scalar kernels take the task constants explicitly: ``s = sqrt(d/2)``, ``gamma``, ``L`` (as float) and ``eps``.
The map kernels follow the engine contract ``step(k, x, p, args, out)`` (``dynamics.iterate`` with ``args``): the
parameter row ``p`` holds the scalars below and ``args = (table,)`` the lambda-dependent constants precomputed per
update; the state carries lambda_n as its last component so that the row saved at step n holds iterate n together
with lambda_n (docs/models/single_location.md §0.3). No RNG, no allocation in the hot loops, float64 only.

The map kernels evaluate zeta by a series form of the same quadrature (closedform.special._zeta_series_table; equal
to it to a few ulp) and five_step is compiled without reference counting (``dynamics._jit.njit_noref``): it
allocates nothing, and without it numba keeps four atomic reference-count increments and decrements per call (its
pruning pass gives up on large functions), which cost as much as the rest of the step.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from dynamics._jit import njit_noref

from closedform import special as _sp
from closedform.special import _zeta, _zeta_series_m, _zeta_series_table

# Parameter row of the map kernels: p = [s, gamma, L, alpha, eps] (eps for the observables' risk). Their data,
# args = (table,): a flat float64 array of rows of N_CONST lambda-dependent constants (lam, g, q, r, c, zeta0, C, B2)
# of docs/models/single_location.md §3, §5.1, then those of the series form of zeta (below); row n (at N_CONST * n)
# belongs to update n. One row for a constant lambda; n_steps + 1 rows for a schedule, the last one being lambda of
# the final iterate (see _rows). Precomputing them keeps square roots, arcsines and the quadrature nodes out of the
# loop.
P_S, P_GAMMA, P_L, P_ALPHA, P_EPS = 0, 1, 2, 3, 4
C_LAM, C_G, C_Q, C_R, C_C, C_ZETA0, C_CC, C_B2 = 0, 1, 2, 3, 4, 5, 6, 7
# The series form of zeta (closedform.special._zeta_series_table) occupies the row from C_ZSERIES on; C_ZH, C_ZAMAX
# and C_ZMU locate its entries in the row.
C_ZSERIES = 8
C_ZH, C_ZAMAX, C_ZMU = C_ZSERIES + _sp.ZS_H, C_ZSERIES + _sp.ZS_AMAX, C_ZSERIES + _sp.ZS_MU
ZETA_TERMS = _sp.ZETA_TERMS
N_CONST = C_ZSERIES + _sp.ZETA_SERIES_SIZE

_TWO_OVER_SQRTPI = 2.0 / math.sqrt(math.pi)
_SQRT2 = math.sqrt(2.0)


@njit(cache=True, fastmath=False, error_model="numpy")
def lam_constants(lam, s, gamma, out):
    """Write (lam, g, q, r, c, zeta0, C, B2) of docs/models/single_location.md §3, §3.2, §5.1 into out[0:8]."""
    g = lam * gamma
    q = math.sqrt(1.0 + 2.0 * g * g)
    lam2 = lam * lam
    out[C_LAM] = lam
    out[C_G] = g
    out[C_Q] = q
    out[C_R] = math.sqrt(1.0 + 4.0 * g * g)
    out[C_C] = lam * s / q
    out[C_ZETA0] = _zeta(0.0, lam)
    out[C_CC] = 2.0 * lam / math.sqrt(math.pi * (1.0 + 2.0 * lam2))
    out[C_B2] = 8.0 * lam2 / (math.pi * (1.0 + 2.0 * lam2) * math.sqrt(1.0 + 4.0 * lam2))
    _zeta_series_table(g, out, C_ZSERIES)


@njit(cache=True, fastmath=False, error_model="numpy")
def lam_table(lams, s, gamma, out):
    """Rows of lam_constants for each lambda in lams; out has shape (len(lams), N_CONST)."""
    for i in range(lams.shape[0]):
        lam_constants(lams[i], s, gamma, out[i])


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def _rows(n, tab):
    """Offsets in the flat table ``tab`` of the lam_constants rows of update n and of lambda_{n+1}: rows n and n + 1
    of a schedule, row 0 for both under a constant lambda (a table of one row).
    """
    if tab.shape[0] == N_CONST:
        return 0, 0
    o = N_CONST * n
    return o, o + N_CONST


@njit(cache=True, fastmath=False, error_model="numpy")
def _zeta_family(t, g, q, r):
    """(zeta, zeta_t, zeta_tt, zeta_ttt, phi0, phi1, phi2, phi3) at (t, g) in one pass
    (docs/models/single_location.md §3.1-§3.2).

    Shares erf(t/q), erf'(t/q), erf(t/(qr)), erf'(t/(qr)) between the derivatives; zeta itself by the
    cancellation-free Gauss-Legendre form (closedform.special).
    """
    m = t / q
    return _zeta_family_m(q, r, m, math.exp(-m * m), math.erf(m), _zeta(t, g))


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def _zeta_series(t, m, ex, erfm, g, cst, o):
    """zeta(t, g) from the series table of the lam_constants row at cst[o] (closedform.special._zeta_series_m)."""
    return _zeta_series_m(t, g, m, ex, erfm, cst, o + C_ZSERIES)


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def _zeta_family_fast(t, cst, o):
    """_zeta_family with zeta from _zeta_series (erf(m) and exp(-m^2) shared with the derivatives): the map kernels'
    form, ~2x cheaper per step and equal to _zeta_family to a few ulp.
    """
    g, q, r = cst[o + C_G], cst[o + C_Q], cst[o + C_R]
    m = t / q
    ex = math.exp(-m * m)
    erfm = math.erf(m)
    return _zeta_family_m(q, r, m, ex, erfm, _zeta_series(t, m, ex, erfm, g, cst, o))


@njit(cache=True, fastmath=False, error_model="numpy")
def _zeta_family_m(q, r, m, ex, erfm, z):
    """The derivatives of zeta and the phi_j given m = t/q, ex = exp(-m^2), erfm = erf(m) and zeta itself
    (docs/models/single_location.md §3.1-§3.2).
    """
    u = m / r
    e1m = _TWO_OVER_SQRTPI * ex
    e2m = -2.0 * m * e1m
    e3m = (4.0 * m * m - 2.0) * e1m
    erfu = math.erf(u)
    e1u = _TWO_OVER_SQRTPI * math.exp(-u * u)
    e2u = -2.0 * u * e1u
    qr = q * r
    zt = (2.0 / q) * erfu * e1m
    ztt = (2.0 / q) * (e1u * e1m / qr + erfu * e2m / q)
    zttt = (2.0 / q) * (e2u * e1m / (qr * qr) + 2.0 * e1u * e2m / (q * q * r) + erfu * e3m / (q * q))
    return z, zt, ztt, zttt, erfm, e1m / q, e2m / (q * q), e3m / (q * q * q)


@njit(cache=True, fastmath=False, error_model="numpy")
def risk_core(kappa, nu, theta, eta, rho, s, gamma, L, eps, cst, o):
    """True MSE R(kappa, nu, theta, eta, rho) of docs/models/single_location.md §4.2 ("in full"), eps^2 and (L-1) zeta0
    included; the lam_constants row starts at cst[o].
    """
    fam = _zeta_family(cst[o + C_LAM] * s * kappa, cst[o + C_G], cst[o + C_Q], cst[o + C_R])
    return _risk(kappa, nu, theta, eta, rho, s, gamma, L, eps, cst, o, fam)


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def _risk(kappa, nu, theta, eta, rho, s, gamma, L, eps, cst, o, fam):
    """The risk of docs/models/single_location.md §4.2 given the zeta family ``fam`` at t = lam s kappa."""
    g = cst[o + C_G]
    zeta0, C, B2 = cst[o + C_ZETA0], cst[o + C_CC], cst[o + C_B2]
    z, zt, ztt, _, phi0, phi1, phi2, _ = fam
    gg = gamma * gamma
    return (
        eps * eps
        + gg
        - 2.0 * gg * nu * phi0
        - 2.0 * g * gamma * s * theta * eta * phi1
        - 2.0 * g * g * gg * rho * eta * phi2
        + (s * s * theta * theta + gg) * z
        + 2.0 * g * gamma * s * theta * rho * zt
        + g * g * gg * rho * rho * ztt
        + (L - 1.0) * zeta0
        + (L - 1.0) * B2 * rho * rho
        + (L - 1.0) * (L - 2.0) * C * C * rho * rho
        + 2.0 * (L - 1.0) * C * rho * (s * theta * phi0 + g * gamma * rho * phi1)
    )


@njit(cache=True, fastmath=False, error_model="numpy")
def partials_core(kappa, nu, theta, eta, rho, s, gamma, L, cst, o):
    """(dR/dkappa, dR/dnu, dR/dtheta, dR/deta, dR/drho) of docs/models/single_location.md §4.3; the lam_constants row
    starts at cst[o].
    """
    lam, g, q, r = cst[o + C_LAM], cst[o + C_G], cst[o + C_Q], cst[o + C_R]
    fam = _zeta_family(lam * s * kappa, g, q, r)
    return _partials(kappa, nu, theta, eta, rho, s, gamma, L, cst, o, fam)


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def partials_map(kappa, nu, theta, eta, rho, s, gamma, L, cst, o):
    """partials_core with zeta by its series form (_zeta_family_fast); the form the PGD map kernels use."""
    fam = _zeta_family_fast(cst[o + C_LAM] * s * kappa, cst, o)
    return _partials(kappa, nu, theta, eta, rho, s, gamma, L, cst, o, fam)


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def _partials(kappa, nu, theta, eta, rho, s, gamma, L, cst, o, fam):
    """The partials of docs/models/single_location.md §4.3 given the zeta family ``fam`` at t = lam s kappa."""
    lam, g = cst[o + C_LAM], cst[o + C_G]
    C, B2 = cst[o + C_CC], cst[o + C_B2]
    z, zt, ztt, zttt, phi0, phi1, phi2, phi3 = fam
    gg = gamma * gamma
    ls = lam * s
    st = s * theta
    r_kappa = ls * (
        -2.0 * gamma * (st * eta * g * phi2 + gamma * nu * phi1 + gamma * rho * eta * g * g * phi3)
        + (st * st + gg) * zt
        + 2.0 * g * gamma * st * rho * ztt
        + g * g * gg * rho * rho * zttt
        + 2.0 * (L - 1.0) * C * rho * (st * phi1 + g * gamma * rho * phi2)
    )
    r_nu = -2.0 * gg * phi0
    r_theta = (
        -2.0 * g * gamma * s * eta * phi1
        + 2.0 * s * st * z
        + 2.0 * g * gamma * s * rho * zt
        + 2.0 * (L - 1.0) * C * rho * s * phi0
    )
    r_eta = -2.0 * gamma * (g * st * phi1 + g * g * gamma * rho * phi2)
    r_rho = (
        -2.0 * g * g * gg * eta * phi2
        + 2.0 * g * gamma * st * zt
        + 2.0 * g * g * gg * rho * ztt
        + 2.0 * (L - 1.0) * (B2 + (L - 2.0) * C * C) * rho
        + 2.0 * (L - 1.0) * C * (st * phi0 + 2.0 * g * gamma * rho * phi1)
    )
    return r_kappa, r_nu, r_theta, r_eta, r_rho


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def manifold_partials_core(kappa, nu, gamma, cst, o):
    """(dR_M/dkappa, dR_M/dnu) of docs/models/single_location.md §5.1 (compact form); the lam_constants row starts at
    cst[o].
    """
    rk, rn, _, _, _ = _manifold_partials_shared(kappa, nu, gamma, cst, o)
    return rk, rn


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def _manifold_partials_shared(kappa, nu, gamma, cst, o):
    """manifold_partials_core and the values it shares with the risk on M: (dR_M/dkappa, dR_M/dnu, m, exp(-m^2),
    erf(m)) with m = c kappa (= t/q up to rounding, t = lam s kappa; docs/models/single_location.md §5.1).
    """
    c, r = cst[o + C_C], cst[o + C_R]
    ck = c * kappa
    gg2 = 2.0 * gamma * gamma
    ex = math.exp(-ck * ck)
    erfm = math.erf(ck)
    return gg2 * c * _TWO_OVER_SQRTPI * ex * (math.erf(ck / r) - nu), -gg2 * erfm, ck, ex, erfm


@njit(cache=True, fastmath=False, error_model="numpy")
def risk_array(kappa, nu, theta, eta, rho, lam, s, gamma, L, eps, out):
    """Elementwise risk_core over equal-length 1-D arrays (lambda per element)."""
    cst = np.empty(N_CONST)
    for i in range(out.shape[0]):
        if i == 0 or lam[i] != lam[i - 1]:
            lam_constants(lam[i], s, gamma, cst)
        out[i] = risk_core(kappa[i], nu[i], theta[i], eta[i], rho[i], s, gamma, L, eps, cst, 0)


@njit(cache=True, fastmath=False, error_model="numpy")
def partials_array(kappa, nu, theta, eta, rho, lam, s, gamma, L, out):
    """Elementwise partials_core over equal-length 1-D arrays; out has shape (n, 5)."""
    cst = np.empty(N_CONST)
    for i in range(out.shape[0]):
        if i == 0 or lam[i] != lam[i - 1]:
            lam_constants(lam[i], s, gamma, cst)
        a, b, c, d, e = partials_core(kappa[i], nu[i], theta[i], eta[i], rho[i], s, gamma, L, cst, 0)
        out[i, 0] = a
        out[i, 1] = b
        out[i, 2] = c
        out[i, 3] = d
        out[i, 4] = e


@njit(cache=True, fastmath=False, error_model="numpy")
def manifold_partials_array(kappa, nu, lam, s, gamma, out):
    """Elementwise manifold_partials_core; out has shape (n, 2)."""
    cst = np.empty(N_CONST)
    for i in range(out.shape[0]):
        if i == 0 or lam[i] != lam[i - 1]:
            lam_constants(lam[i], s, gamma, cst)
        a, b = manifold_partials_core(kappa[i], nu[i], gamma, cst, 0)
        out[i, 0] = a
        out[i, 1] = b


@njit(cache=True, fastmath=False, error_model="numpy")
def manifold_update(kappa, nu, dk, dv):
    """One reduced PGD update on M (docs/models/single_location.md §6.3, paper Lemma 7) given delta_k, delta_v."""
    ok = 1.0 - kappa * kappa
    on = 1.0 - nu * nu
    return ((kappa - dk * ok) / math.sqrt(1.0 + dk * dk * ok), (nu - dv * on) / math.sqrt(1.0 + dv * dv * on))


@njit(cache=True, fastmath=False, error_model="numpy")
def manifold_step(n, x, p, args, out):
    """Engine map kernel on M, state (kappa, nu, lam): update n with lambda_n (docs/models/single_location.md §6.3);
    out[2] = lambda_{n+1}.
    """
    tab = args[0]
    o, o1 = _rows(n, tab)
    alpha = p[P_ALPHA]
    rk, rn = manifold_partials_core(x[0], x[1], p[P_GAMMA], tab, o)
    k1, n1 = manifold_update(x[0], x[1], alpha * rk, alpha * rn)
    out[0] = k1
    out[1] = n1
    out[2] = tab[o1 + C_LAM]


@njit(cache=True, fastmath=False, error_model="numpy")
def five_update(kappa, nu, theta, eta, rho, rk, rn, rt, re, rr, alpha):
    """One exact five-scalar PGD update (docs/models/single_location.md §6.4) given the partials; returns (kappa', nu',
    theta', eta', rho').
    """
    kgk = rk * kappa + re * eta + rr * rho
    vgv = rn * nu + rt * theta + rr * rho
    # coefficients of the unnormalised new k and v on (k, v, k*, v*)
    k0, k1, k2, k3 = 1.0 + alpha * kgk, -alpha * rr, -alpha * rk, -alpha * re
    v0, v1, v2, v3 = -alpha * rr, 1.0 + alpha * vgv, -alpha * rt, -alpha * rn
    # G = [[1, rho, kappa, eta], [rho, 1, theta, nu], [kappa, theta, 1, 0], [eta, nu, 0, 1]]
    gk0 = k0 + rho * k1 + kappa * k2 + eta * k3
    gk1 = rho * k0 + k1 + theta * k2 + nu * k3
    gk2 = kappa * k0 + theta * k1 + k2
    gk3 = eta * k0 + nu * k1 + k3
    gv0 = v0 + rho * v1 + kappa * v2 + eta * v3
    gv1 = rho * v0 + v1 + theta * v2 + nu * v3
    gv2 = kappa * v0 + theta * v1 + v2
    gv3 = eta * v0 + nu * v1 + v3
    nk = math.sqrt(k0 * gk0 + k1 * gk1 + k2 * gk2 + k3 * gk3)
    nv = math.sqrt(v0 * gv0 + v1 * gv1 + v2 * gv2 + v3 * gv3)
    rho1 = (k0 * gv0 + k1 * gv1 + k2 * gv2 + k3 * gv3) / (nk * nv)
    return gk2 / nk, gv3 / nv, gv2 / nv, gk3 / nk, rho1


@njit_noref(cache=True, fastmath=False, error_model="numpy")
def five_step(n, x, p, args, out):
    """Engine map kernel, state (kappa, nu, theta, eta, rho, lam): update n with lambda_n
    (docs/models/single_location.md §6.4).
    """
    tab = args[0]
    o, o1 = _rows(n, tab)
    rk, rn, rt, re, rr = partials_map(x[0], x[1], x[2], x[3], x[4], p[P_S], p[P_GAMMA], p[P_L], tab, o)
    a, b, c, d, e = five_update(x[0], x[1], x[2], x[3], x[4], rk, rn, rt, re, rr, p[P_ALPHA])
    out[0] = a
    out[1] = b
    out[2] = c
    out[3] = d
    out[4] = e
    out[5] = tab[o1 + C_LAM]


@njit(cache=True, fastmath=False, error_model="numpy")
def five_map_array(X, lam, alpha, s, gamma, L, out):
    """One five-scalar PGD update (docs/models/single_location.md §6.4) of every row of X (n, 5), with per-row lambda
    and alpha.
    """
    cst = np.empty(N_CONST)
    for i in range(X.shape[0]):
        if i == 0 or lam[i] != lam[i - 1]:
            lam_constants(lam[i], s, gamma, cst)
        rk, rn, rt, re, rr = partials_map(X[i, 0], X[i, 1], X[i, 2], X[i, 3], X[i, 4], s, gamma, L, cst, 0)
        a, b, c, d, e = five_update(X[i, 0], X[i, 1], X[i, 2], X[i, 3], X[i, 4], rk, rn, rt, re, rr, alpha[i])
        out[i, 0] = a
        out[i, 1] = b
        out[i, 2] = c
        out[i, 3] = d
        out[i, 4] = e


# ----------------------------------------------------------------------------------------------------------------
# Observables: the derived variables of ``map``, evaluated by the engine's compiled loop at every save point
# (``observe``), or together with the step that leaves the saved state (``step_observe``, sharing the zeta family).
# Both use the series form of zeta (as the map does), so the saved risk equals risk_core (16-node quadrature) to a
# few ulp of the terms it sums; the fused and the separate forms are equal bit for bit.

OBSERVABLE_NAMES = ("risk", "excess_risk", "distance_to_manifold")
MANIFOLD_OBSERVABLE_NAMES = ("risk", "excess_risk")


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def _write_five_observables(x, s, gamma, L, eps, cst, o, fam, obs):
    r = _risk(x[0], x[1], x[2], x[3], x[4], s, gamma, L, eps, cst, o, fam)
    obs[0] = r
    obs[1] = r - eps * eps
    obs[2] = math.sqrt(x[2] * x[2] + x[3] * x[3] + x[4] * x[4])


@njit(cache=True, fastmath=False, error_model="numpy", inline="always")
def _manifold_risk(t, nu, gamma, L, eps, cst, o, m, ex, erfm):
    """The risk on M (theta = eta = rho = 0) of docs/models/single_location.md §4.2 given m = t/q, exp(-m^2), erf(m):
    the terms of _risk that do not vanish there, in its order (so equal to _risk at zero off-manifold scalars, bit
    for bit, for the same zeta and phi0).
    """
    gg = gamma * gamma
    z = _zeta_series(t, m, ex, erfm, cst[o + C_G], cst, o)
    return eps * eps + gg - 2.0 * gg * nu * erfm + gg * z + (L - 1.0) * cst[o + C_ZETA0]


@njit(cache=True, fastmath=False, error_model="numpy")
def _own_row(lam, s, gamma):
    """A lam_constants row for lambda = ``lam`` (allocated; only for states whose lambda is not the table's row)."""
    cst = np.empty(N_CONST)
    lam_constants(lam, s, gamma, cst)
    return cst


@njit(cache=True, fastmath=False, error_model="numpy")
def five_observe(n, x, p, args, out):
    """Engine observable of the five-scalar map (state (kappa, nu, theta, eta, rho, lam), saved at step n): risk,
    excess risk and distance to M (docs/models/single_location.md §4.2, §5) into out[0:3].

    The lam_constants row is that of update n, unless the state's lambda differs from it (a state frozen by the
    ``converged`` stop under a schedule); then the row is computed for the state's own lambda.
    """
    tab = args[0]
    o, _ = _rows(n, tab)
    s, gamma, L, eps = p[P_S], p[P_GAMMA], p[P_L], p[P_EPS]
    if tab[o + C_LAM] == x[5]:
        _write_five_observables(x, s, gamma, L, eps, tab, o, _zeta_family_fast(x[5] * s * x[0], tab, o), out)
    else:
        cst = _own_row(x[5], s, gamma)
        _write_five_observables(x, s, gamma, L, eps, cst, 0, _zeta_family_fast(x[5] * s * x[0], cst, 0), out)


@njit_noref(cache=True, fastmath=False, error_model="numpy")
def five_step_observe(n, x, p, args, out, obs):
    """five_step into ``out`` and five_observe of ``x`` into ``obs`` in one pass (the risk and the partials share the
    zeta family at t = lam s kappa); bit for bit the two separate calls. The engine's ``step_observe``.
    """
    tab = args[0]
    o, o1 = _rows(n, tab)
    s, gamma, L = p[P_S], p[P_GAMMA], p[P_L]
    fam = _zeta_family_fast(tab[o + C_LAM] * s * x[0], tab, o)
    rk, rn, rt, re, rr = _partials(x[0], x[1], x[2], x[3], x[4], s, gamma, L, tab, o, fam)
    a, b, c, d, e = five_update(x[0], x[1], x[2], x[3], x[4], rk, rn, rt, re, rr, p[P_ALPHA])
    _write_five_observables(x, s, gamma, L, p[P_EPS], tab, o, fam, obs)
    out[0] = a
    out[1] = b
    out[2] = c
    out[3] = d
    out[4] = e
    out[5] = tab[o1 + C_LAM]


@njit(cache=True, fastmath=False, error_model="numpy")
def manifold_observe(n, x, p, args, out):
    """Engine observable of the map on M (state (kappa, nu, lam), saved at step n): risk and excess risk
    (docs/models/single_location.md §4.2 at theta = eta = rho = 0) into out[0:2]; rows as in five_observe.
    """
    tab = args[0]
    o, _ = _rows(n, tab)
    s, gamma, L, eps = p[P_S], p[P_GAMMA], p[P_L], p[P_EPS]
    cst = tab if tab[o + C_LAM] == x[2] else _own_row(x[2], s, gamma)
    o = o if tab[o + C_LAM] == x[2] else 0
    m = cst[o + C_C] * x[0]
    r = _manifold_risk(x[2] * s * x[0], x[1], gamma, L, eps, cst, o, m, math.exp(-m * m), math.erf(m))
    out[0] = r
    out[1] = r - eps * eps


@njit_noref(cache=True, fastmath=False, error_model="numpy")
def manifold_step_observe(n, x, p, args, out, obs):
    """manifold_step into ``out`` and manifold_observe of ``x`` into ``obs`` in one pass (exp(-m^2) and erf(m) shared);
    bit for bit the two separate calls. The engine's ``step_observe``.
    """
    tab = args[0]
    o, o1 = _rows(n, tab)
    alpha = p[P_ALPHA]
    gamma = p[P_GAMMA]
    rk, rn, m, ex, erfm = _manifold_partials_shared(x[0], x[1], gamma, tab, o)
    k1, n1 = manifold_update(x[0], x[1], alpha * rk, alpha * rn)
    eps = p[P_EPS]
    r = _manifold_risk(x[2] * p[P_S] * x[0], x[1], gamma, p[P_L], eps, tab, o, m, ex, erfm)
    obs[0] = r
    obs[1] = r - eps * eps
    out[0] = k1
    out[1] = n1
    out[2] = tab[o1 + C_LAM]
