"""Tests of closedform.scan_snap against independent computations (spec scan_snap.md).

Independent references used here: finite differences of the exact finite-T objective (Lemma 1), a plain numpy
right-hand side written from Lemma 1's unsimplified form integrated by scipy ``solve_ivp`` (Sec. 4.2), scipy
quadrature / ``solve_ivp`` / ``wrightomega`` for the decoder closed forms (Sec. 2.3-2.4), and the public reference
values of spec Sec. 7 (computed by the spec authors with DOP853). Each check has a negative control.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
import scipy.special

from closedform import scan_snap as ss
from dynamics import RK4, DivergenceError, SaveAt

# ---------------------------------------------------------------------------------------------------------------
# configurations
# ---------------------------------------------------------------------------------------------------------------


def weak_corr(K=2, M=1000):
    """Spec Sec. 7 P7: one query, token 0 common (P_c = 0.15), 4 distinct tokens per class at 0.2125, tgt(n) = n."""
    P = np.zeros((K, 1 + 4 * K))
    P[:, 0] = 0.15
    for n in range(K):
        P[n, 1 + 4 * n : 5 + 4 * n] = 0.2125
    return ss.SequenceClasses.from_P(P, M=M, name="P7")


def p8_layout(K=2, M=1000):
    """Spec Sec. 7 P8 / Sec. 6 item 6: token 0 common with P = 0.3, 5 distinct with P = 0.7 (0.2..1.0)/3."""
    P = np.zeros((K, 1 + 5 * K))
    P[:, 0] = 0.3
    for n in range(K):
        P[n, 1 + 5 * n : 6 + 5 * n] = 0.7 * np.array([0.2, 0.4, 0.6, 0.8, 1.0]) / 3.0
    return ss.SequenceClasses.from_P(P, M=M, name="P8")


def custom_one_common():
    """Custom M = 20 configuration with one common token (spec Sec. 6 item 3), non-symmetric distinct tokens."""
    P = np.zeros((2, 9))
    P[:, 0] = 0.2
    P[0, 1:5] = 0.8 * np.array([1, 2, 3, 4]) / 10
    P[1, 5:9] = 0.8 * np.array([5, 1, 3, 1]) / 10
    return ss.SequenceClasses.from_P(P, M=20, tgt=[10, 11], name="custom")


# ---------------------------------------------------------------------------------------------------------------
# Lemma 1 (Sec. 1.5) against finite differences of the exact objective
# ---------------------------------------------------------------------------------------------------------------


def objective(Yf, Zf, ctx, query, target):
    """J = logit_target - logsumexp(logits) of the full model (spec Sec. 1.3-1.4), written out directly."""
    b = np.exp(Zf[query, ctx] - Zf[query, ctx].max())
    b /= b.sum()
    v = np.zeros(Yf.shape[0])
    np.add.at(v, ctx, b)
    logits = Yf.T @ (v / np.sqrt(v @ v))
    return logits[target] - scipy.special.logsumexp(logits)


def fd_grad(fun, X, h=1e-6):
    """Central differences; truncation O(h^2 J''') ~ 1e-12, round-off ~ eps |J| / h ~ 1e-9 for |J| ~ 10."""
    G = np.zeros_like(X)
    for idx in np.ndindex(X.shape):
        Xp, Xm = X.copy(), X.copy()
        Xp[idx] += h
        Xm[idx] -= h
        G[idx] = (fun(Xp) - fun(Xm)) / (2 * h)
    return G


FD_ATOL = 1e-8  # central differences above: round-off eps*|J|/h ~ 1e-9 dominates


def test_lemma1_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    M = 7
    Yf, Zf = rng.normal(size=(M, M)), rng.normal(size=(M, M))
    ctx = np.array([0, 1, 1, 2, 4, 4, 4, 3, 0])  # T - 1 = 9 contextual tokens, repeats included
    query, target = 5, 6
    dY, dZ = ss.lemma1_gradient(Yf, Zf, ctx, query, target)
    gY = fd_grad(lambda Y: objective(Y, Zf, ctx, query, target), Yf)
    gZ = fd_grad(lambda Z: objective(Yf, Z, ctx, query, target), Zf)
    np.testing.assert_allclose(dY, gY, rtol=0, atol=FD_ATOL)
    np.testing.assert_allclose(dZ, gZ, rtol=0, atol=FD_ATOL)
    # negative control: dropping the projection (I - f f^T) is a wrong formula the same test must reject
    b = scipy.special.softmax(Zf[query, ctx])
    v = np.bincount(ctx, weights=b, minlength=M)
    f = v / np.linalg.norm(v)
    err = -scipy.special.softmax(Yf.T @ f)
    err[target] += 1
    assert np.max(np.abs(f * (Yf @ err) - gZ[query])) > 1e3 * FD_ATOL


def test_population_gradient_is_lemma1_with_exact_token_proportions():
    """At T -> inf, X^T b -> c_n (Lemma 2); with integer weights a finite sequence holding exactly the proportions
    P(.|n) gives the same v, so sum_n pi_n J_n is an exact objective whose FD gradient must equal Sec. 4.2's."""
    cl = ss.SequenceClasses.syn(2, 2, num_common=1, num_unique=2, p_min=1.0, p_max=2.0)  # weights 1, 1, 2
    Lc, Q, M, K = cl.Lc, cl.Q, cl.M, cl.K
    W = np.rint(cl.P * 4).astype(int)  # each class: weights (1; 1, 2) / 4
    assert np.allclose(W / 4, cl.P)
    seqs = [np.repeat(np.arange(Lc), W[n]) for n in range(K)]
    rng = np.random.default_rng(1)
    Y, Z = 0.7 * rng.normal(size=(Lc, M)), 0.7 * rng.normal(size=(Q, Lc))

    def J(Yr, Zr):
        Yf = np.zeros((M, M))
        Yf[:Lc] = Yr
        Zf = np.zeros((M, M))
        Zf[Lc : Lc + Q, :Lc] = Zr
        return sum(cl.pi[n] * objective(Yf, Zf, seqs[n], Lc + cl.psi[n], cl.tgt[n]) for n in range(K))

    gY, gZ = ss.population_gradient(cl, Y, Z)
    np.testing.assert_allclose(gY, fd_grad(lambda A: J(A, Z), Y), rtol=0, atol=FD_ATOL)
    fdZ = fd_grad(lambda A: J(Y, A), Z)
    np.testing.assert_allclose(gZ, fdZ, rtol=0, atol=FD_ATOL)
    # negative control: the PAPER convention (no pi_n, errata E4) is off by the factor K
    assert np.max(np.abs(K * gZ - fdZ)) > 1e3 * FD_ATOL
    # lumped form (Sec. 4.2): with equal non-target columns, the rest column moves like any non-target column
    Yeq = Y.copy()
    rest = np.setdiff1d(np.arange(M), cl.tgt)
    Yeq[:, rest] = Y[:, rest[:1]]
    gYl, gZl = ss.population_gradient(cl, np.concatenate([Yeq[:, cl.tgt], Yeq[:, rest[:1]]], axis=1), Z, lumped=True)
    gYu, gZu = ss.population_gradient(cl, Yeq, Z)
    np.testing.assert_allclose(gYl[:, :K], gYu[:, cl.tgt], rtol=0, atol=1e-14)  # float64 round-off
    np.testing.assert_allclose(gYl[:, K], gYu[:, rest[0]], rtol=0, atol=1e-14)
    np.testing.assert_allclose(gZl, gZu, rtol=0, atol=1e-14)


# ---------------------------------------------------------------------------------------------------------------
# exact reduced ODE (Sec. 4.2) against scipy solve_ivp on an independent numpy right-hand side
# ---------------------------------------------------------------------------------------------------------------


def numpy_rhs(cl, eta_Y, eta_Z, with_pi=True):
    """Sec. 4.2 written from Lemma 1's unsimplified form diag(c) P_perp(c) g / ||c|| (full M-column decoder)."""
    Lc, Q, M = cl.Lc, cl.Q, cl.M

    def rhs(t, y):
        Y = y[: Lc * M].reshape(Lc, M)
        Z = y[Lc * M :].reshape(Q, Lc)
        dY, dZ = np.zeros_like(Y), np.zeros_like(Z)
        for n in range(cl.K):
            m = cl.psi[n]
            w = cl.pi[n] if with_pi else 1.0
            c = cl.P[n] * np.exp(Z[m])
            c /= c.sum()
            f = c / np.linalg.norm(c)
            err = -scipy.special.softmax(Y.T @ f)
            err[cl.tgt[n]] += 1
            dY += w * np.outer(f, err)
            Pperp = np.eye(Lc) - np.outer(c, c) / (c @ c)
            dZ[m] += w * (c * (Pperp @ (Y @ err))) / np.linalg.norm(c)
        return np.concatenate([eta_Y * dY.ravel(), eta_Z * dZ.ravel()])

    return rhs


def small_classes():
    return ss.SequenceClasses.syn(2, 1, num_common=3, num_unique=4)  # Lc = 11, M = 15, Q = 2


def test_exact_flow_matches_solve_ivp():
    cl = small_classes()
    task = ss.ScanSnapTask(classes=cl, eta_Y=1.5, eta_Z=0.8)
    rng = np.random.default_rng(3)
    Y0 = rng.uniform(-0.3, 0.3, size=(cl.Lc, cl.M))
    Z0 = rng.uniform(-0.3, 0.3, size=(cl.Q, cl.Lc))
    ts = np.array([0.0, 1.0, 5.0, 20.0])
    y0 = np.concatenate([Y0.ravel(), Z0.ravel()])
    ref = scipy.integrate.solve_ivp(
        numpy_rhs(cl, 1.5, 0.8), (0, 20), y0, method="DOP853", t_eval=ts, rtol=1e-10, atol=1e-12
    ).y.T
    tr = ss.flow(task, (0, 20), Y0=Y0, Z0=Z0, saveat=SaveAt(ts=ts), lumped=False)
    # one state variable z (trajectory, time, query_token, token), coordinates m and l (issue 16: no z_{m}_{l} scalars)
    assert tr["z"].dims == ("trajectory", "time", "query_token", "token")
    assert list(tr["query_token"].values) == list(range(cl.Q)) and list(tr["token"].values) == list(range(cl.Lc))
    assert tr.state_names == ["z"] and not any(v.startswith("z_") for v in tr.data_vars)
    Zs = tr["z"].values[0].reshape(len(ts), -1)  # row-major z_{ml} at m*Lc + l, as the solve_ivp state
    Zref = ref[:, cl.Lc * cl.M :]
    # both adaptive at rtol 1e-10 over 20 time units of a smooth flow: global errors ~1e-9; 1e-8 leaves room
    np.testing.assert_allclose(Zs, Zref, rtol=0, atol=1e-8)
    Ys = tr["Y"].values[0].reshape(len(ts), -1)
    np.testing.assert_allclose(Ys, ref[:, : cl.Lc * cl.M], rtol=0, atol=1e-8)
    # the fixed-step RK4 (dt = 0.05, error O(dt^4) ~ 1e-6 scale) on the same flow
    tr4 = ss.flow(task, (0, 20), Y0=Y0, Z0=Z0, saveat=SaveAt(ts=ts), lumped=False, solver=RK4(dt=0.05))
    np.testing.assert_allclose(tr4["z"].values[0].reshape(len(ts), -1), Zref, rtol=0, atol=1e-6)
    # negative control: the PAPER convention (pi_n dropped, errata E4) must be rejected at the same tolerance
    wrong = scipy.integrate.solve_ivp(
        numpy_rhs(cl, 1.5, 0.8, with_pi=False), (0, 20), y0, method="DOP853", t_eval=ts, rtol=1e-10, atol=1e-12
    ).y.T
    assert np.max(np.abs(wrong[:, cl.Lc * cl.M :] - Zref)) > 1e3 * 1e-8


def test_lumped_equals_unlumped_from_zero_decoder():
    cl = small_classes()
    task = ss.ScanSnapTask(classes=cl, eta_Y=1.0, eta_Z=2.0)
    Z0 = np.random.default_rng(4).uniform(-0.5, 0.5, size=(cl.Q, cl.Lc))
    ts = [0.0, 3.0, 30.0]
    a = ss.flow(task, (0, 30), Z0=Z0, saveat=SaveAt(ts=ts), lumped=True)
    b = ss.flow(task, (0, 30), Z0=Z0, saveat=SaveAt(ts=ts), lumped=False)
    # two adaptive runs of the same flow at rtol 1e-10 in different coordinates: agreement to ~1e-9
    for v in ("c", "H", "alpha_tgt", "gamma_hat"):
        np.testing.assert_allclose(a[v].values, b[v].values, rtol=0, atol=1e-8, err_msg=v)
    with pytest.raises(ValueError, match="lumped"):
        ss.flow(task, (0, 1), Y0=np.random.default_rng(0).normal(size=(cl.Lc, cl.M)), lumped=True)


# ---------------------------------------------------------------------------------------------------------------
# decoder closed forms (Sec. 2.3-2.4)
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("M,eta_Y", [(34, 1.0), (50, 2.0), (1000, 0.5), (10**4, 4.0)])
def test_h_explicit_against_ode_and_implicit_form(M, eta_Y):
    taus = np.array([0.0, 0.3, 1.0, 7.0, 50.0, 400.0])
    h = ss.decoder_h(taus, M=M, eta_Y=eta_Y)
    sol = scipy.integrate.solve_ivp(
        lambda t, y: eta_Y / ((M - 1) + np.exp(M * y)),
        (0, taus[-1]),
        [0.0],
        method="DOP853",
        t_eval=taus,
        rtol=1e-13,
        atol=1e-15,
    )
    np.testing.assert_allclose(h, sol.y[0], rtol=0, atol=1e-12)  # spec Sec. 6 item 2: < 1e-12
    # implicit solution exp(M h) + (M-1) M h = M eta_Y tau + 1, relative residual at round-off level
    resid = (np.exp(M * h) + (M - 1) * M * h) / (M * eta_Y * taus + 1) - 1
    assert np.max(np.abs(resid)) < 1e-13
    # negative control: (M-1) replaced by M in the explicit formula is rejected at 1e-12
    A = M * eta_Y * taus + 1
    wrong = (np.log(M) + np.log(scipy.special.wrightomega(A / M - np.log(M)).real)) / M
    assert np.max(np.abs(wrong - sol.y[0])) > 1e3 * 1e-12


def test_wright_omega_kernel_against_scipy():
    from closedform import _scan_snap_kernels as k

    xs = np.concatenate([np.linspace(-40, 5, 400), np.geomspace(5, 1e12, 200)])
    mine = np.array([k.wright_omega(x) for x in xs])
    # spec Sec. 2.3: 5 Newton steps reach 5e-15 relative error on [-40, 1e12]
    np.testing.assert_allclose(mine, scipy.special.wrightomega(xs).real, rtol=2e-14, atol=0)


def test_lemma7_gap_and_gamma_integral():
    M, eta_Y = 50, 2.0
    s = np.arange(0, 400)
    gap = ss.decoder_h_star(s, M=M, eta_Y=eta_Y) - ss.decoder_h(s, M=M, eta_Y=eta_Y)
    assert gap.min() >= -1e-15 and gap.max() <= 2 * eta_Y / M  # Lemma 7
    assert abs(gap.max() - 8.48e-3) < 1e-5  # spec Sec. 6 item 2 (3 printed digits)
    # Gamma(t) = eta_Z int_0^t gamma(u) du by adaptive quadrature (tolerance 1e-12 relative)
    kw = dict(M=34, K=2, eta_Y=1.3, eta_Z=0.7)
    for t in (0.5, 9.0, 120.0):
        quad = (
            kw["eta_Z"]
            * scipy.integrate.quad(lambda u: ss.speed_control(u, **kw)[0], 0, t, epsabs=0, epsrel=1e-12, limit=200)[0]
        )
        assert ss.speed_control(t, **kw)[1] == pytest.approx(quad, rel=1e-10)


def test_transition_landmarks_match_their_definitions():
    M, K, eta_Y = 1000, 4, 2.0
    tt = ss.transition_times(M=M, K=K, eta_Y=eta_Y)
    g = lambda t: -ss.speed_control(t, M=M, K=K, eta_Y=eta_Y, eta_Z=1.0)[0]  # noqa: E731
    res = scipy.optimize.minimize_scalar(
        g, bounds=(0.5 * tt.t_peak, 2 * tt.t_peak), method="bounded", options={"xatol": 1e-10}
    )
    assert res.x == pytest.approx(tt.t_peak, rel=1e-6)  # Brent on a smooth maximum: ~sqrt(eps) in argmax
    assert M * ss.decoder_h(tt.t_half / K, M=M, eta_Y=eta_Y) == pytest.approx(np.log(M - 1), rel=1e-12)
    x = (1 + tt.omega1) * np.log(M)  # larger root of exp(x) = (M-1) x (Sec. 2.4)
    assert np.exp(x) == pytest.approx((M - 1) * x, rel=1e-12) and x > 1
    # Lemma 9 second regime: for t >= t0_omega1, exp(M h) >= max(M-1, (M-1) M h)
    Mh = M * ss.decoder_h(np.linspace(tt.t0_omega1, 50 * tt.t0_omega1, 50) / K, M=M, eta_Y=eta_Y)
    assert np.all(np.exp(Mh) >= np.maximum(M - 1, (M - 1) * Mh))
    assert tt.omega1 == pytest.approx(0.320, abs=5e-4)  # spec Sec. 2.4 (3 printed digits)


def test_reference_values_p1():
    kw = dict(M=34, eta_Y=1.0)
    rel = 1e-6  # spec Sec. 7: closed forms to 1e-6 relative
    np.testing.assert_allclose(ss.decoder_h([1, 10, 100], **kw), [0.028819854, 0.15127224, 0.23677914], rtol=rel)
    np.testing.assert_allclose(
        ss.decoder_h_star(np.array([1, 10, 100]), **kw), [0.029411765, 0.15580401, 0.23750480], rtol=rel
    )
    g, G = ss.speed_control([1, 10, 100], K=2, eta_Z=1.0, **kw)
    np.testing.assert_allclose(g, [0.45832716, 1.5607487, 0.15626218], rtol=rel)
    np.testing.assert_allclose(G, [0.23148384, 13.685748, 50.016764], rtol=rel)
    tt = ss.transition_times(M=34, K=2, eta_Y=1.0)
    np.testing.assert_allclose(
        [tt.t_peak, tt.t0p, tt.t0, tt.t_half], [6.5509293, 7.0527210, 14.105442, 8.6696911], rtol=rel
    )


def test_reference_values_p2_fig9_and_fig3():
    # Fig. 9 (B_printed, C0 = 1, K = 1); spec Sec. 7 P2 printed to 6 decimals: 1e-6 absolute
    t0 = ss.transition_times(M=100, K=1, eta_Y=5.0).t0
    B = lambda t, M, ez, ey: ss.drive_B(t, M=M, K=1, eta_Y=ey, eta_Z=ez, C0=1.0, form="printed")  # noqa: E731
    assert B(t0, 100, 0.5, 5.0) == pytest.approx(0.509846, abs=1e-6)
    assert B(ss.transition_times(M=100, K=1, eta_Y=80.0).t0, 100, 8.0, 80.0) == pytest.approx(0.509846, abs=1e-6)
    assert B(5.0, 100, 0.5, 5.0) == pytest.approx(0.620160, abs=1e-6)
    assert B(5.0, 100, 8.0, 80.0) == pytest.approx(0.782794, abs=1e-6)
    for e in (0.5, 8.0):
        assert B(ss.transition_times(M=10**4, K=1, eta_Y=e).t0, 10**4, e, e) == pytest.approx(1.381698, abs=1e-6)
    assert B(50.0, 10**4, 0.5, 0.5) == pytest.approx(1.407816, abs=1e-6)
    assert B(50.0, 10**4, 8.0, 8.0) == pytest.approx(1.533215, abs=1e-6)
    # Fig. 3: chi(700) = exp(2 B_printed(700; C0 = 1)), K = 10, M = 1000, eta_Z = 0.5 (2 printed decimals)
    chi = [
        np.exp(2 * ss.drive_B(700.0, M=1000, K=10, eta_Y=e, eta_Z=0.5, C0=1.0, form="paper")) for e in (0.5, 1, 2, 5)
    ]
    np.testing.assert_allclose(chi, [45.23, 34.72, 26.29, 18.01], atol=5e-3)


# ---------------------------------------------------------------------------------------------------------------
# public reference values of spec Sec. 7 (simulators)
# ---------------------------------------------------------------------------------------------------------------


def test_reference_p3_exact_ode_syn_small():
    task = ss.ScanSnapTask(classes=ss.SequenceClasses.syn_small(), eta_Y=1.0, eta_Z=1.0)
    tr = ss.flow(task, (0, 1000), saveat=SaveAt(ts=[10, 100, 1000]))
    atol = 1e-6  # spec Sec. 7: ODE values 1e-6 absolute
    z = tr.z.sel(query_token=0).values[0]  # (time, token)
    np.testing.assert_allclose(z[:, 19], [0.077827968, 0.49585531, 0.60115534], atol=atol)
    np.testing.assert_allclose(z[:, 10], [0.00084708642, 0.0074093967, 0.013289143], atol=atol)
    np.testing.assert_allclose(z[:, 0], [-0.030885276, -0.22764484, -0.31914177], atol=atol)
    np.testing.assert_allclose(tr["H_mean"].values[0], [2.1406337, 2.0769455, 2.0663035], atol=atol)


def test_reference_p4_momentum_map_syn_small():
    task = ss.ScanSnapTask(classes=ss.SequenceClasses.syn_small(), eta_Y=1.0, eta_Z=1.0)
    tr = ss.map(task, 48, momentum=0.9, saveat=SaveAt(steps=[0, 9, 10, 11, 48]))
    atol = 1e-7  # spec Sec. 7: discrete map 1e-7 absolute
    np.testing.assert_allclose(
        tr["H_mean"].values[0], [2.1512817, 2.1088676, 2.0984380, 2.0883587, 1.9813818], atol=atol
    )
    c = tr["c"].values[0, :, 0]
    np.testing.assert_allclose(
        c[2, 10:20],
        [
            0.0064950013,
            0.013130053,
            0.020050365,
            0.027411686,
            0.035386138,
            0.044168707,
            0.053984618,
            0.065097724,
            0.077819974,
            0.092521777,
        ],
        atol=atol,
    )
    np.testing.assert_allclose(
        c[4, 10:20],
        [
            0.0060132721,
            0.012387612,
            0.019522446,
            0.027899496,
            0.038138679,
            0.051073734,
            0.067856889,
            0.090101413,
            0.12006240,
            0.16082317,
        ],
        atol=atol,
    )
    np.testing.assert_allclose(c[[2, 4], 0], [0.056393396, 0.040612089], atol=atol)
    # negative control: the step convention off by one (state s+1 reported as s) is rejected
    assert abs(tr["H_mean"].values[0, 3] - 2.0984380) > 100 * atol


def test_reference_p5_syn_medium_map():
    cl = ss.SequenceClasses.syn_medium(1)
    assert (cl.K, cl.Q, cl.Lc, cl.M) == (2, 1, 30, 33)
    want = {(0.5, 1): 2.0370236, (1, 1): 1.9961558, (1, 10): 2.0993876, (3, 2): 1.9601336}
    for (eZ, ratio), H in want.items():
        tr = ss.map(
            ss.ScanSnapTask(classes=cl, eta_Y=eZ * ratio, eta_Z=eZ), 100, momentum=0.9, saveat=SaveAt(final=True)
        )
        assert tr["H_mean"].values[0, -1] == pytest.approx(H, abs=1e-7)  # spec Sec. 7: map 1e-7 absolute


def test_reference_p5b_random_init_recipe():
    cl = ss.SequenceClasses.syn_medium(1)
    inits = [ss.random_init(cl, d) for d in range(10)]
    Y0, Z0 = np.stack([a for a, _ in inits]), np.stack([b for _, b in inits])
    want = {(0.5, 1): (1.9846813, 0.0411), (1, 10): (2.0779177, 0.0240)}
    for (eZ, ratio), (mean, std) in want.items():
        tr = ss.map(
            ss.ScanSnapTask(classes=cl, eta_Y=eZ * ratio, eta_Z=eZ),
            100,
            momentum=0.9,
            Y0=Y0,
            Z0=Z0,
            lumped=False,
            saveat=SaveAt(final=True),
        )
        H = tr["H_mean"].values[:, -1]
        assert H.mean() == pytest.approx(mean, abs=1e-6)  # spec Sec. 7: exact recipe, 1e-6 absolute
        assert H.std() == pytest.approx(std, abs=5e-5)  # printed to 3 significant digits


def test_reference_p6_composite_syn_small():
    task = ss.ScanSnapTask(classes=ss.SequenceClasses.syn_small(), eta_Y=1.0, eta_Z=1.0)
    tr = ss.composite_flow(task, (0, 1000), saveat=SaveAt(ts=[0, 10, 1000]))
    atol = 1e-5  # spec Sec. 7: P6 printed to 6 decimals, 1e-5 absolute
    np.testing.assert_allclose(tr["z"].sel(query_token=0, token=19).values[0, 1:], [0.524411, 1.670404], atol=atol)
    np.testing.assert_allclose(tr["z"].sel(query_token=0, token=10).values[0, 1:], [0.003259, 0.004846], atol=atol)
    np.testing.assert_allclose(tr["z"].sel(query_token=0, token=0).values[0, 1:], [-0.168149, -0.373572], atol=atol)
    sat = ss.saturation_dz(task.classes, 0)
    np.testing.assert_allclose(
        sat[10:19], [0.0050, 0.0204, 0.0472, 0.0872, 0.1438, 0.2231, 0.3367, 0.5108, 0.8304], atol=5e-5
    )  # printed to 4 decimals
    assert np.isinf(sat[19]) and np.all(np.isnan(sat[:10]))
    # Theorem 3 in the composite ODE: r_{l/l'|n}(t) = r(0) chi_l(t) and the integrated form, to integrator precision
    z = tr["z"].sel(query_token=0).values[0]  # (time, Lc)
    Z = np.zeros((3, 2, 30))
    Z[:, 0] = z
    for ell in range(10, 19):
        r = ss.relative_gain(task.classes, Z, 0, ell, 19)
        chi = ss.growth_factor(z[:, ell], z[0, ell])
        np.testing.assert_allclose(r, r[0] * chi, rtol=1e-9, atol=0)  # Dopri5 rtol 1e-10 on z
        # negative control: the growth factor without the factor 2 is rejected
        assert np.max(np.abs(r - r[0] * np.exp(z[:, ell] - z[0, ell])) / np.abs(r)) > 1e-6
    pred = ss.theorem3_dz(task.classes, 0, z[:, 19] - z[0, 19])
    np.testing.assert_allclose(pred[:, 10:20], z[:, 10:20] - z[0, 10:20], rtol=0, atol=1e-9)


def test_reference_p7_weak_correlation():
    cl = weak_corr()
    task = ss.ScanSnapTask(classes=cl, eta_Y=1.0, eta_Z=1.0)
    c = ss.theorem4_constants(cl)
    assert 1 / c["C0_cons"] == pytest.approx(0.012269822, rel=1e-6)
    assert c["C0_paper"] == pytest.approx(40.750386, rel=1e-6)
    kw = dict(M=1000, K=2, eta_Y=1.0, eta_Z=1.0)
    assert ss.drive_B(30.0, C0=c["C0_paper"], form="printed", **kw) == pytest.approx(1.4615375, rel=1e-6)
    assert ss.drive_B(30.0, C0=c["C0_paper"], form="paper", **kw) == pytest.approx(0.53467117, rel=1e-6)
    assert ss.drive_B(30.0, C0=c["C0_cons"], form="cons", **kw) == pytest.approx(0.19461358, rel=1e-6)
    np.testing.assert_allclose(ss.common_token_z([30.0, 3000.0], task), [-0.38922716, -0.59701913], rtol=1e-6)
    ts = [30.0, 3000.0]
    comp = ss.composite_flow(task, (0, 3000), saveat=SaveAt(ts=ts))["z"].sel(query_token=0, token=0).values[0]
    exact = ss.flow(task, (0, 3000), saveat=SaveAt(ts=ts))["z"].sel(query_token=0, token=0).values[0]
    np.testing.assert_allclose(comp, [-0.37368968, -0.57552726], atol=1e-6)  # ODE values 1e-6 absolute
    np.testing.assert_allclose(exact, [-0.0044007006, -0.0086540976], atol=1e-6)


def test_reference_p8_measured_transition():
    task = ss.ScanSnapTask(classes=p8_layout(), eta_Y=1.0, eta_Z=0.5)
    tt = ss.transition_time(task)
    assert tt.t_peak == pytest.approx(11.280147, rel=1e-6)
    assert tt.t_half == pytest.approx(15.795696, rel=1e-6)
    meas = ss.measure_transition(task, 0)
    assert meas["t_peak"] == pytest.approx(11.297588, rel=1e-5)  # spec Sec. 7: dense output, 1e-5 relative
    assert meas["gamma_hat_max"] == pytest.approx(4.4049290, rel=1e-6)
    assert meas["t_half"] == pytest.approx(15.879335, rel=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# Theorem 2 signs and orders along exact trajectories; transition-time ratios
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [ss.SequenceClasses.syn_small, custom_one_common])
def test_theorem2_signs_along_exact_trajectory(make):
    cl = make()
    task = ss.ScanSnapTask(classes=cl, eta_Y=1.0, eta_Z=1.0)
    ts = np.concatenate([[0.0], np.geomspace(0.05, 1e3, 25)])
    tr = ss.flow(task, (0, 1e3), saveat=SaveAt(ts=ts), lumped=True)
    Y, Z = tr["Y"].values[0], tr["z"].values[0]
    pred = ss.theorem2_signs(cl)
    ct = cl.common_tokens()
    for i in range(1, len(ts)):
        _, gZ = ss.population_gradient(cl, Y[i], Z[i], lumped=True)
        for n in range(cl.K):
            m, dt = cl.psi[n], cl.distinct_tokens(n)
            assert np.all(gZ[m, dt] > 0), f"distinct tokens of class {n} must grow (Theorem 2a) at t={ts[i]}"
            assert np.all(gZ[m, ct[cl.P[n, ct] > 0]] < 0), f"common tokens must shrink at t={ts[i]}"
            c = tr["c"].values[0, i, n, dt]
            assert np.all(np.diff(c[np.argsort(cl.P[n, dt], kind="stable")]) >= 0), "order of c follows P"
        known = np.isfinite(pred)
        assert np.all(np.sign(gZ[known]) == pred[known])
        D = ss.token_drive(task, Y[i], Z[i], lumped=True)  # Sec. 4.6: defined exactly on distinct tokens
        assert np.array_equal(
            np.isfinite(D), np.stack([np.isin(np.arange(cl.Lc), cl.distinct_tokens(n)) for n in range(cl.K)])
        )
        assert np.all(D[np.isfinite(D)] > 0)
    if make is custom_one_common:
        assert pred[0, 0] == -1 and np.all(pred[0, 1:] == 1)


@pytest.mark.parametrize("M,K,eta_Y", [(100, 2, 1.0), (1000, 4, 4.0)])
def test_transition_time_ratios(M, K, eta_Y):
    """Spec Sec. 6 item 6: measured/predicted within 1.000-1.024 (gamma peak) and 1.01-1.05 (alpha = 1/2)."""
    task = ss.ScanSnapTask(classes=p8_layout(K, M), eta_Y=eta_Y, eta_Z=eta_Y / 2)
    tt, meas = ss.transition_time(task), ss.measure_transition(task, 0)
    assert 1.0 <= meas["t_peak"] / tt.t_peak <= 1.024
    assert 1.0 <= meas["t_half"] / tt.t_half <= 1.05


@pytest.mark.slow
@pytest.mark.parametrize("M", [1000, 10**4])  # M = 34, 100 exceed the spec's ranges (see the module report)
@pytest.mark.parametrize("K", [2, 4, 8])
@pytest.mark.parametrize("eta_Y", [0.5, 1.0, 2.0, 4.0])
def test_transition_time_ratios_full_grid(M, K, eta_Y):
    """Spec Sec. 6 item 6 grid at M >= 1000. At M = 34 and 100 the exact ODE gives peak ratios up to 1.10 and half
    ratios up to 1.09 (K = 8), even with eta_Z -> 0 (frozen attention), so the spec's 1.000-1.024 range does not
    extend to small M there; the P8 reference point (M = 1000) is reproduced to 1e-5."""
    test_transition_time_ratios(M, K, eta_Y)


# ---------------------------------------------------------------------------------------------------------------
# bad input and divergence
# ---------------------------------------------------------------------------------------------------------------


def test_bad_input_raises_value_error_naming_the_parameter():
    with pytest.raises(ValueError, match="sum to 1"):
        ss.SequenceClasses.from_P([[0.5, 0.6]], M=4)
    with pytest.raises(ValueError, match="non-negative"):
        ss.SequenceClasses.from_P([[1.2, -0.2]], M=4)
    with pytest.raises(ValueError, match="K .* <= M"):
        ss.SequenceClasses.from_P(np.full((3, 2), 0.5), M=2)
    with pytest.raises(ValueError, match="tgt"):
        ss.SequenceClasses.from_P(np.full((2, 2), 0.5), M=4, tgt=[1, 1])
    cl = ss.SequenceClasses.syn_small()
    for kw in ({"eta_Y": 0.0, "eta_Z": 1.0}, {"eta_Y": 1.0, "eta_Z": -1.0}):
        with pytest.raises(ValueError, match="eta_"):
            ss.ScanSnapTask(classes=cl, **kw)
    no_dt = ss.SequenceClasses.from_P([[0.5, 0.5, 0.0], [0.5, 0.25, 0.25]], M=5)
    with pytest.raises(ValueError, match="class n=0 has no distinct token.*Theorem 3"):
        ss.saturation_dz(no_dt, 0)
    with pytest.raises(ValueError, match="pi must be uniform"):
        ss.transition_time(
            ss.ScanSnapTask(
                classes=ss.SequenceClasses.from_P(np.full((2, 2), 0.5), M=4, pi=[0.3, 0.7]), eta_Y=1.0, eta_Z=1.0
            )
        )
    with pytest.raises(ValueError, match="momentum"):
        ss.map(ss.ScanSnapTask(classes=cl, eta_Y=1.0, eta_Z=1.0), 3, momentum=1.0)
    with pytest.raises(ValueError, match="one common token"):
        ss.theorem4_constants(cl)


def test_non_finite_state_raises_divergence_error():
    # learning rates near the float64 maximum: the momentum buffer pushes Y past 1.8e308 within a few steps
    task = ss.ScanSnapTask(classes=small_classes(), eta_Y=1e308, eta_Z=1e308)
    with pytest.raises(DivergenceError):
        ss.map(task, 20, momentum=0.9)


# ---------------------------------------------------------------------------------------------------------------
# Task numbers as arrays broadcast with the batch (issue 14 item 5)
# ---------------------------------------------------------------------------------------------------------------


def test_batched_learning_rates_equal_per_configuration_calls():
    """One call over a grid of (eta_Y, eta_Z, momentum) and a batch of initial states equals one call per
    configuration (the engine runs each trajectory with its own parameter row: identical arithmetic, so 0 error)."""
    classes = ss.SequenceClasses.syn_medium(1)
    task = ss.ScanSnapTask(classes=classes, eta_Y=1.0, eta_Z=1.0)
    eY, eZ, mu = np.array([0.5, 2.0, 10.0]), np.array([0.5, 1.0, 1.0]), np.array([0.0, 0.9, 0.5])
    inits = [ss.random_init(classes, d) for d in range(3)]
    Y0, Z0 = np.stack([a for a, _ in inits]), np.stack([b for _, b in inits])
    batched = ss.map(task, 15, momentum=mu, eta_Y=eY, eta_Z=eZ, Y0=Y0, Z0=Z0, lumped=False)
    for i in range(3):
        one = ss.map(
            ss.ScanSnapTask(classes=classes, eta_Y=eY[i], eta_Z=eZ[i]),
            15,
            momentum=mu[i],
            Y0=Y0[i],
            Z0=Z0[i],
            lumped=False,
        )
        np.testing.assert_array_equal(batched.Y.values[i], one.Y.values[0])
        np.testing.assert_array_equal(batched.H_mean.values[i], one.H_mean.values[0])
    # a scalar rate broadcasts over the init batch; an array broadcasts one init over the rates
    b2 = ss.map(task, 5, momentum=0.9, eta_Y=eY, Y0=Y0[0], Z0=Z0[0], lumped=False)
    assert b2.H_mean.shape == (3, 6)
    np.testing.assert_array_equal(
        b2.H_mean.values[1],
        ss.map(
            ss.ScanSnapTask(classes=classes, eta_Y=2.0, eta_Z=1.0), 5, momentum=0.9, Y0=Y0[0], Z0=Z0[0], lumped=False
        ).H_mean.values[0],
    )
    # ODEs: the adaptive controller runs per trajectory, so per-configuration calls agree to the last bit too
    small = ss.SequenceClasses.syn_small()
    ts = ss.ScanSnapTask(classes=small, eta_Y=1.0, eta_Z=1.0)
    save = SaveAt(ts=(0.0, 2.0, 5.0))
    ef = ss.flow(ts, (0.0, 5.0), eta_Y=eY[1:], eta_Z=eZ[1:], saveat=save)
    cf_ = ss.composite_flow(ts, (0.0, 5.0), eta_Y=eY[1:], eta_Z=eZ[1:], saveat=save)
    for i in range(2):
        t1 = ss.ScanSnapTask(classes=small, eta_Y=eY[1 + i], eta_Z=eZ[1 + i])
        np.testing.assert_allclose(
            ef.H_mean.values[i], ss.flow(t1, (0.0, 5.0), saveat=save).H_mean.values[0], rtol=0, atol=1e-14
        )  # 1e-14: float64 rounding of a 1e-10-rtol integration
        np.testing.assert_allclose(
            cf_.H_mean.values[i], ss.composite_flow(t1, (0.0, 5.0), saveat=save).H_mean.values[0], rtol=0, atol=1e-14
        )
    with pytest.raises(ValueError, match="eta_Z"):
        ss.map(task, 5, eta_Y=eY, eta_Z=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="momentum"):
        ss.map(task, 5, momentum=np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="eta_Y"):
        ss.map(task, 5, eta_Y=np.array([1.0, -1.0]))


# ---------------------------------------------------------------------------------------------------------------
# Theorem 3 bounds (Eq. 12) against hand values and a brute-force integration of the drive dz_l/dt = f_l^2 D
# ---------------------------------------------------------------------------------------------------------------


def test_theorem3_bounds_hand_values_and_brute_force():
    # Hand values: f_{nl0}(0) = 0.6, B = 0.5 -> lower exp(2 * 0.36 * 0.5) = exp(0.36) = 1.4333294145603401,
    # upper exp(2 * 0.5) = e = 2.718281828459045 (math.exp by hand, not the function under test).
    lo, hi = ss.theorem3_bounds(0.6, 0.5)
    assert abs(lo - 1.4333294145603401) < 1e-15 and abs(hi - 2.718281828459045) < 1e-15
    lo1, hi1 = ss.theorem3_bounds(1.0, np.array([0.0, 2.0]))  # f = 1: both bounds are exp(2B) (and 1 at B = 0)
    np.testing.assert_allclose(lo1, [1.0, np.exp(4.0)], rtol=1e-15)
    np.testing.assert_allclose(hi1, lo1, rtol=0)
    # Brute force (spec Sec. 3.3): one class, distinct tokens with c~(0) = P = (0.5, 0.3) and a common token (0.2)
    # whose logit falls; the distinct tokens follow dz_l/dt = f_l^2 D with D = 1 (so B(t) = t), integrated by scipy.
    P = np.array([0.5, 0.3, 0.2])

    def rhs(t, z):
        c = P * np.exp(z)
        f = c / np.linalg.norm(c)
        return np.array([f[0] ** 2, f[1] ** 2, -(f[2] ** 2)])

    t = np.linspace(0.0, 10.0, 201)
    sol = scipy.integrate.solve_ivp(rhs, (0.0, 10.0), np.zeros(3), t_eval=t, rtol=1e-12, atol=1e-14)
    chi = np.exp(2.0 * sol.y[0])  # growth factor of the dominant token l0 = 0
    f0 = P[0] / np.linalg.norm(P)
    lo, hi = ss.theorem3_bounds(f0, t)
    slack = 1e-9  # solve_ivp at rtol 1e-12 over t <= 10: relative error of chi far below 1e-9
    assert np.all(lo <= chi * (1 + slack)) and np.all(chi <= hi * (1 + slack))
    # the lower bound is tight at t -> 0 (chi'(0) = 2 f0^2 D), the upper one as f_{l0} -> 1: each mutant of the
    # exponents (f for f^2, B for 2B) crosses chi somewhere on this grid
    assert abs((chi[1] - 1) / (lo[1] - 1) - 1) < 0.05
    assert np.any(np.exp(2.0 * f0 * t) > chi * (1 + 1e-6)) and np.any(np.exp(t) < chi * (1 - 1e-6))


def test_array_variables_carry_named_coordinates():
    """c, H, Y of the closed-form Trajectories have named coordinates (class, token: the spec's 0-based ids, Sec. 0.1),
    so a selection by label equals the positional one."""
    classes = ss.SequenceClasses.syn_small()
    tr = ss.map(ss.ScanSnapTask(classes=classes, eta_Y=1.0, eta_Z=1.0), 3, momentum=0.9)
    assert list(tr.c.coords["class"].values) == [0, 1] and list(tr.c.coords["token"].values) == list(range(30))
    assert float(tr.c.sel({"class": 1, "token": 25}).values[0, -1]) == float(tr.c.values[0, -1, 1, 25])
    assert tr.Y.dims[-2:] == ("token", "column") and tr.H.dims[-1] == "class"
    # the state z (query_token m, token l): labels select the kernel's row-major slot m*Lc + l (Sec. 4.1 layout)
    assert tr.z.dims == ("trajectory", "time", "query_token", "token") and list(tr["query_token"].values) == [0, 1]
    assert float(tr.z.sel(query_token=1, token=25).values[0, -1]) == float(tr.z.values[0, -1].ravel()[1 * 30 + 25])
