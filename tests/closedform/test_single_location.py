"""Tests of closedform.single_location against independent computations.

Independent references used: Monte Carlo of the predictor over the exact Gaussian law of the token projections and
full d-dimensional Monte Carlo (risk), finite differences (partials), brute-force d-dimensional PGD (maps), scipy root
finding (fixed points), explicit d-dimensional vectors and exact Beta laws (initial states), and the numerically
checked public values of spec Sec. 10 (and Secs. 5.3, 7.2, 7.4, 8.2-8.3).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.special
import scipy.stats
from hypothesis import given
from hypothesis import strategies as hst

import dynamics
from closedform import single_location as sl
from closedform import special
from dynamics import SaveAt
from dynamics.testing import assert_mc_close, assert_mc_rejects, mean_and_se

# These tests run the maps for finite horizons on purpose (reference trajectories, brute-force comparisons); the
# default warning on runs that end unconverged (docs/guides/engine.md, convergence diagnostics) is tested in
# tests/closedform/test_convergence_warnings.py.
pytestmark = pytest.mark.filterwarnings("ignore::dynamics.convergence.UnconvergedWarning")

G_HALF = math.sqrt(0.5)

# spec Sec. 10.1: (state, lambda, gamma, d, L, eps, R, R_M)
POINTS = {
    "P1": ((0.3, 0.4, 0.1, -0.2, 0.25), 1.0, G_HALF, 400, 10, 0.0, 13.0502666475, 4.7810184679),
    "P2": ((0.9, 0.8, 0, 0, 0), 0.1, G_HALF, 400, 10, 0.0, 0.3005100076, 0.3005100076),
    "P3": ((1, 1, 0, 0, 0), 1.0, G_HALF, 400, 10, 0.1, 4.1910314896, 4.1910314896),
    "P4": ((-0.6, 0.5, -0.2, 0.1, 0.3), 2.0, G_HALF, 80, 10, 0.1, 18.4109390531, 7.7833933283),
    "P5": ((0.2, 0.1, 0.3, 0.3, 0.5), 0.5, 1.0, 20, 5, 0.3, 4.2583176125, 2.1724818321),
    "P6": ((0.01, 0.02, 0.15, -0.1, 0.2), 0.3, 1.5, 50, 3, 0.0, 3.1481002072, 2.8628798062),
    "P7": ((0, 0, 0.6, 1, 0), 0.1, G_HALF, 400, 10, 0.0, 0.1166290981, 0.6155035003),
    "P8": ((-0.5, -0.7, 0.05, 0.05, -0.1), 0.2, 0.5, 1000, 20, 0.05, 3.3937728186, 1.0490445229),
}
# spec Sec. 10.2: five partials and the tangent-gradient norms
PARTIALS = {
    "P1": (
        5.459230206e-03,
        -9.999779095e-01,
        8.145759826e01,
        -8.703315747e-05,
        3.357087650e01,
        3.250496233e01,
        9.569264898e01,
    ),
    "P2": (3.954417312e-02, -9.267174468e-01, 0, 0, 0, 1.723690544e-02, 5.560304681e-01),
    "P3": (-7.040538084e-59, -1.000000000e00, 0, 0, 0, 0, 0),
    "P4": (
        -1.753360693e-04,
        9.999984133e-01,
        -4.169134084e01,
        3.549323986e-06,
        4.305607642e01,
        4.107288458e01,
        7.268011785e01,
    ),
    "P5": (
        3.732080137e00,
        -5.699986906e-01,
        3.042889614e00,
        -7.268172006e-01,
        6.953699674e00,
        7.831288311e00,
        6.726897942e00,
    ),
    "P6": (
        5.887281043e-01,
        -6.425360329e-02,
        2.084809841e00,
        -9.599972517e-01,
        8.085980031e-01,
        1.401535240e00,
        2.196502049e00,
    ),
    "P7": (0, 0, -7.506505089e-02, -9.527097738e-01, 0, 0, 6.005204071e-02),
    "P8": (
        -1.290571578e-01,
        4.991292994e-01,
        6.824862343e01,
        -9.101548529e-04,
        -1.277070927e01,
        1.270655135e01,
        7.532147159e01,
    ),
}
# spec Sec. 10.3: zeta(t, g), d zeta/dt, zeta(0, lambda), oracle risk, linear risk
ZETAS = {
    "P1": (0.99995628433438, 1.9411624717e-04, 0.46455905439754, 4.1810314896, 0.4736842105),
    "P2": (0.85906419842136, 4.1718667453e-01, 0.012483540641116, 0.1134980830, 0.4736842105),
    "P3": (1.0, 5.9363823726e-44, 0.46455905439754, 4.1910314896, 0.4836842105),
    "P4": (0.99999713338079, -8.9230528152e-06, 0.69704395054741, 6.2833955549, 0.4836842105),
    "P5": (0.27409411740478, 3.5121802694e-01, 0.21634689593879, 0.9725754181, 0.8900000000),
    "P6": (0.18630251728192, 2.0203815998e-02, 0.097492107198295, 0.2328444402, 1.0588235294),
    "P7": (0.0063032690504017, 0.0, 0.012483540641116, 0.1134980830, 0.4736842105),
    "P8": (0.99652098924606, -1.6571460923e-02, 0.047200251852539, 0.8993047852, 0.2492532468),
}


def _task(name):
    _, _, gamma, d, L, eps, _, _ = POINTS[name]
    return sl.SingleLocationTask(d=d, L=L, gamma=gamma, noise=eps)


def _close_to_printed(value, printed, decimals=None, sig=None):
    """|value - printed| within the rounding of the printed digits (half a unit in the last place) plus 1e-13*|x|."""
    if sig is not None:
        half_unit = 0.5 * 10.0 ** (math.floor(math.log10(abs(printed))) - sig + 1) if printed != 0 else 1e-300
    else:
        half_unit = 0.5 * 10.0 ** (-decimals)
    return abs(value - printed) <= half_unit + 1e-13 * abs(printed)


# ------------------------------------------------------------------------------------------------------------
# public reference values (spec Sec. 10)


@pytest.mark.parametrize("name", sorted(POINTS))
def test_risk_reference_values(name):
    state, lam, *_, R, RM = POINTS[name]
    task = _task(name)
    # 10 decimals printed: the tolerance is the rounding of the table (spec Sec. 10: ~1e-10 relative)
    assert _close_to_printed(sl.risk(task, lam, *state), R, decimals=10)
    assert _close_to_printed(sl.manifold_risk(task, lam, state[0], state[1]), RM, decimals=10)
    assert sl.excess_risk(task, lam, *state) == pytest.approx(R - task.eps**2, abs=1e-10)


def _tangent_norms(state, partials):
    """||grad_k R - (k.grad_k R) k|| and the same for v, from the Gram matrix (spec Sec. 4.3, Sec. 10.2)."""
    kappa, nu, theta, eta, rho = state
    G = np.array([[1, rho, kappa, eta], [rho, 1, theta, nu], [kappa, theta, 1, 0], [eta, nu, 0, 1]], dtype=float)
    rk, rn, rt, re, rr = partials
    out = []
    for c, e in ((np.array([0, rr, rk, re]), 0), (np.array([rr, 0, rt, rn]), 1)):
        c = c - (G[e] @ c) * np.eye(4)[e]
        out.append(math.sqrt(max(c @ G @ c, 0.0)))
    return out


@pytest.mark.parametrize("name", sorted(POINTS))
def test_partials_reference_values(name):
    state, lam, *_ = POINTS[name]
    task = _task(name)
    got = sl.risk_partials(task, lam, *state)
    ref = PARTIALS[name]
    for x, r in zip(got, ref[:5]):
        # 10 significant digits printed; exact zeros in the table are exact zeros of the formula (on M)
        assert (x == 0 and r == 0) or (r != 0 and _close_to_printed(x, r, sig=10)) or (r == 0 and abs(x) < 1e-300)
    for x, r in zip(_tangent_norms(state, got), ref[5:]):
        # 10 significant digits; a printed 0 is a norm that vanishes up to cancellation (rounding, 1e-12)
        assert _close_to_printed(x, r, sig=10) if r else abs(x) < 1e-12


@pytest.mark.parametrize("name", sorted(POINTS))
def test_zeta_oracle_and_linear_reference_values(name):
    state, lam, gamma, *_ = POINTS[name]
    task = _task(name)
    z, zt, z0, oracle, lin = ZETAS[name]
    t, g = lam * task.s * state[0], lam * gamma
    assert abs(special.zeta(t, g) - z) <= 1e-14  # 14+ decimals printed ("1 (to 1e-16)" for P3)
    assert _close_to_printed(special.zeta_t(t, g), zt, sig=11) if zt else special.zeta_t(t, g) == 0
    assert abs(special.zeta(0.0, lam) - z0) <= 1e-14 * max(1.0, z0) + 5e-16  # 14-15 decimals printed
    # the oracle column is R(k*, v*) without eps^2 for P1, P2, P6, P7 (eps = 0) and with it otherwise
    assert _close_to_printed(sl.oracle_risk(task, lam), oracle, decimals=10)
    assert _close_to_printed(sl.linear_risk(task), lin, decimals=10)


def test_linear_risk_reference_values():
    """Spec Sec. 10.3 (Prop. 3 values)."""
    assert _close_to_printed(sl.linear_risk(sl.SingleLocationTask(d=10, L=10)), 0.4736842105, decimals=10)
    assert _close_to_printed(
        sl.linear_risk(sl.SingleLocationTask(d=10, L=4, gamma=1.5, noise=0.2)), 1.3257142857, decimals=10
    )
    task = sl.SingleLocationTask(d=10, L=3, gamma=0.6)
    assert _close_to_printed(sl.linear_risk(task, [0.6, 0.3, 0.1]), 0.2684394813, decimals=10)
    assert sl.linear_risk(sl.SingleLocationTask(d=10, L=1, noise=0.3)) == pytest.approx(0.09, abs=1e-16)  # L = 1: eps^2


def test_linear_risk_monte_carlo_with_least_squares():
    """Spec Sec. 5.4: only x_l.v* matters; fit least squares on the L projections, evaluate on fresh samples."""
    task = sl.SingleLocationTask(d=10, L=3, gamma=0.6, noise=0.2)
    p = np.array([0.6, 0.3, 0.1])
    rng = np.random.default_rng(11)

    def draw(n):
        u = rng.standard_normal((n, task.L))  # x_l.v* of each token (the k* mean is orthogonal to v*)
        j0 = rng.choice(task.L, size=n, p=p)
        u[np.arange(n), j0] *= task.gamma
        return u, u[np.arange(n), j0] + task.eps * rng.standard_normal(n)

    u, y = draw(400_000)
    w = np.linalg.lstsq(u, y, rcond=None)[0]
    u, y = draw(400_000)
    mean, se = mean_and_se((u @ w - y) ** 2)
    value = sl.linear_risk(task, p)
    # 5 SE (tests/_stats.py); the fitted w differs from the optimum by O(1/sqrt(n)), an excess risk O(L/n) = 1e-5
    assert_mc_close(mean, se, value, atol=1e-5, what="linear risk")
    assert_mc_rejects(mean, se, sl.linear_risk(task), atol=1e-5, what="linear risk with a uniform law")


def test_bayes_lower_bound_and_oracle_limits():
    task = sl.SingleLocationTask(d=80, L=10, noise=0.1)
    assert sl.bayes_risk_lower_bound(task) == pytest.approx(0.01, abs=1e-17)
    # spec Sec. 5.3 numerical illustration (gamma^2 = 1/2, lambda = d^(-1/4), L = 10), 3 significant digits printed
    for d, ref in ((1e2, 0.959), (1e3, 0.341), (1e4, 0.112), (1e5, 0.0360), (1e6, 0.0114), (1e8, 0.00115)):
        task = sl.SingleLocationTask(d=int(d), L=10)
        assert _close_to_printed(sl.oracle_risk(task, d**-0.25), ref, sig=3)
    # spec Sec. 8.2: value at the origin of the five scalars at lambda = 1, d = 400
    task = sl.SingleLocationTask(d=400, L=10)
    assert _close_to_printed(sl.risk(task, 1.0, 0, 0, 0, 0, 0), 4.848, decimals=3)
    assert _close_to_printed(9 * special.zeta(0.0, 1.0), 4.181, decimals=3)


# ------------------------------------------------------------------------------------------------------------
# Monte Carlo of the risk


def _reduced_mc(task, lam, state, n, rng):
    """Simulate the predictor on the exact law of the projections (spec Sec. 4.1): the tokens' components on
    span(k, v, k*, v*) are 4-dim Gaussians; coordinates of the four vectors from an eigen square root of the Gram
    matrix (valid also when it is singular). Returns per-sample squared errors."""
    kappa, nu, theta, eta, rho = state
    G = np.array([[1, rho, kappa, eta], [rho, 1, theta, nu], [kappa, theta, 1, 0], [eta, nu, 0, 1]], dtype=float)
    w, U = np.linalg.eigh(G)
    M = U * np.sqrt(np.clip(w, 0, None))  # rows: coordinates of k, v, k*, v*
    mk, mv, mks, mvs = M
    x = task.s * mks + task.gamma * rng.standard_normal((n, 4))  # informative token
    y = x @ mvs + task.eps * rng.standard_normal(n)
    pred = scipy.special.erf(lam * (x @ mk)) * (x @ mv)
    for _ in range(task.L - 1):  # the other tokens, N(0, I)
        z = rng.standard_normal((n, 4))
        pred += scipy.special.erf(lam * (z @ mk)) * (z @ mv)
    return (pred - y) ** 2


MC_POINTS = {name: POINTS[name][:6] for name in POINTS}
# L = 1 (no noise tokens) and L = 50, off the manifold, eps > 0, small and large lambda
MC_POINTS["L1"] = ((0.7, 0.6, -0.3, 0.2, 0.35), 3.0, 0.8, 30, 1, 0.5)
MC_POINTS["L50"] = ((0.5, -0.3, 0.2, 0.4, -0.1), 0.05, G_HALF, 200, 50, 0.2)


@pytest.mark.statistical
def test_risk_matches_monte_carlo_with_negative_control():
    rng = np.random.default_rng(20250101)
    means, ses, exact, no_noise_tokens = [], [], [], []
    for state, lam, gamma, d, L, eps in MC_POINTS.values():
        task = sl.SingleLocationTask(d=d, L=L, gamma=gamma, noise=eps)
        n = min(100_000, 2_000_000 // L)  # a budget of token draws per point (SEs stay >= 100x below the control gap)
        mean, se = mean_and_se(_reduced_mc(task, lam, state, n, rng))
        means.append(mean)
        ses.append(se)
        exact.append(sl.risk(task, lam, *state))
        no_noise_tokens.append(exact[-1] - (L - 1) * special.zeta(0.0, lam))
    # 5 SE (tests/_stats.py); atol 0: the closed form is exact to ~1e-14, far below the SEs (>= 1e-4)
    assert_mc_close(means, ses, exact, what="risk (reduced MC)")
    # negative control: the authors' coded risk without (L-1) zeta(0, lambda) (spec Sec. 9.2) must be rejected
    assert_mc_rejects(means, ses, no_noise_tokens, what="risk without (L-1) zeta0")


def _full_dimensional_mc(task, state, lam, seed, n=200_000):
    """Mean and SE of the squared error of the erf predictor at the state's vectors on n sample_data draws."""
    rng = np.random.default_rng(seed)
    k, v, k_star, v_star = sl.vectors_from_state(task, state, rng)
    losses = []
    for _ in range(4):
        X, y, _ = sl.sample_data(task, n // 4, rng, k_star=k_star, v_star=v_star)
        losses.append((sl.predict_erf(X, k, v, lam) - y) ** 2)
    return mean_and_se(np.concatenate(losses))


@pytest.mark.statistical
def test_risk_matches_full_dimensional_monte_carlo():
    """Full d-dimensional sampling with the public data sampler and predictor (spec Secs. 1, 2.3) at P5."""
    state, lam, gamma, d, L, eps, *_ = POINTS["P5"]
    task = sl.SingleLocationTask(d=d, L=L, gamma=gamma, noise=eps)
    mean, se = _full_dimensional_mc(task, state, lam, 5)
    value = sl.risk(task, lam, *state)
    assert_mc_close(mean, se, value, what="risk (d-dimensional MC)")  # 5 SE
    assert_mc_rejects(mean, se, value - (L - 1) * special.zeta(0.0, lam), what="risk without (L-1) zeta0")


@pytest.mark.statistical
def test_sample_data_draws_the_informative_token_with_std_gamma():
    """Full d-dimensional Monte Carlo at gamma = 1.5 != 1 (spec Sec. 1: x_J0 ~ N(s k*, gamma^2 I)), at P6's scalars.

    A sampler drawing the informative token with std 1 instead of gamma samples the task with gamma = 1, whose risk
    (closed form, spec Sec. 4.2) must be rejected by the same 5-SE test (issue 19)."""
    state, lam, gamma, d, L, eps, *_ = POINTS["P6"]
    assert gamma != 1.0
    task = sl.SingleLocationTask(d=d, L=L, gamma=gamma, noise=eps)
    mean, se = _full_dimensional_mc(task, state, lam, 19)
    assert_mc_close(mean, se, sl.risk(task, lam, *state), what="risk at gamma = 1.5 (d-dimensional MC)")  # 5 SE
    wrong = sl.risk(sl.SingleLocationTask(d=d, L=L, gamma=1.0, noise=eps), lam, *state)
    assert_mc_rejects(mean, se, wrong, what="risk of the std-1 informative token")


# ------------------------------------------------------------------------------------------------------------
# partial derivatives


def _random_states(n, rng, dim=6):
    """Five scalars of random unit vectors k, v with k*, v* = e1, e2 in R^dim (strictly inside the PSD set)."""
    k = rng.standard_normal((n, dim))
    v = rng.standard_normal((n, dim))
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return np.stack([k[:, 0], v[:, 1], v[:, 0], k[:, 1], np.sum(k * v, axis=1)], axis=1)


@pytest.mark.parametrize(
    ("d", "L", "gamma", "lam"),
    [(400, 10, G_HALF, 0.1), (80, 10, G_HALF, 2.0), (20, 5, 1.0, 0.5), (50, 1, 1.5, 0.3), (2000, 3, 0.5, 5.0)],
)
def test_partials_match_finite_differences(d, L, gamma, lam):
    task = sl.SingleLocationTask(d=d, L=L, gamma=gamma, noise=0.1)
    rng = np.random.default_rng(d + L)
    states = _random_states(6, rng)
    h = 1e-4 / max(1.0, lam * task.s / 10)  # keep h * (d/dkappa scale lambda s) small
    for state in states:
        got = sl.risk_partials(task, lam, *state)
        for j in range(5):

            def f(x, j=j, state=state):
                st = state.copy()
                st[j] = x
                return sl.risk(task, lam, *st)

            x0 = state[j]
            fd = (f(x0 - 2 * h) - 8 * f(x0 - h) + 8 * f(x0 + h) - f(x0 + 2 * h)) / (12 * h)
            # 5-point stencil: truncation h^4/30 |R^(5)| with |R^(5)| <~ R (lambda s)^5 scaled away by the choice of
            # h (<= 1e-13 * R), rounding ~1.5 eps R / h <= 1e-11 R: 1e-7 * max(1, R) is a safe bound that still
            # rejects any wrong coefficient (partials are O(1e-3 .. 1e2)).
            scale = max(1.0, abs(f(x0)))
            assert abs(got[j] - fd) <= 1e-7 * scale, (j, got[j], fd)


def test_partials_vanish_on_manifold():
    task = sl.SingleLocationTask(d=400, L=10)
    kappa, nu = np.meshgrid(np.linspace(-1, 1, 21), np.linspace(-1, 1, 21))
    parts = sl.risk_partials(task, np.array([[0.1], [0.9]])[..., None], kappa, nu)  # broadcast over lambda too
    assert parts.shape == (2, 21, 21, 5)
    assert np.all(parts[..., 2:] == 0.0)  # paper Lemma 14: exactly zero (every term has a factor theta, eta or rho)
    # on M, dR/dkappa and dR/dnu equal those of R_M (spec Sec. 5.1), by finite differences of manifold_risk
    h = 1e-6
    fd_nu = (sl.manifold_risk(task, 0.1, 0.3, 0.2 + h) - sl.manifold_risk(task, 0.1, 0.3, 0.2 - h)) / (2 * h)
    assert sl.risk_partials(task, 0.1, 0.3, 0.2)[1] == pytest.approx(fd_nu, abs=1e-8)  # R linear in nu: rounding


@given(hst.integers(0, 2**32 - 1), hst.floats(0.01, 5.0), hst.sampled_from([4, 20, 400]), hst.integers(1, 30))
def test_risk_properties(seed, lam, d, L):
    """R >= eps^2 (the noise is independent of X); R is invariant under (k, v) -> (-k, -v), i.e.
    (kappa, nu, theta, eta, rho) -> (-kappa, -nu, -theta, -eta, rho) (the predictor is unchanged, spec Sec. 5.1), and
    under (theta, eta, rho) -> -(theta, eta, rho)."""
    task = sl.SingleLocationTask(d=d, L=L, noise=0.1)
    state = _random_states(1, np.random.default_rng(seed), dim=4)[0]
    r = sl.risk(task, lam, *state)
    assert r >= task.eps**2
    flipped = sl.risk(task, lam, -state[0], -state[1], -state[2], -state[3], state[4])
    assert flipped == pytest.approx(r, rel=1e-13, abs=1e-13)  # rounding of erf(-x) = -erf(x) paths
    # (theta, eta, rho) -> -(theta, eta, rho) (Gram congruence by diag(1, -1, 1, -1); spec Sec. 7.4)
    assert sl.risk(task, lam, state[0], state[1], -state[2], -state[3], -state[4]) == pytest.approx(r, rel=1e-13)


def test_broadcasting_shapes():
    task = sl.SingleLocationTask(d=40, L=4)
    r = sl.risk(task, np.array([0.1, 0.2, 0.3])[:, None], np.linspace(-0.5, 0.5, 5), 0.3)
    assert r.shape == (3, 5)
    assert r[1, 2] == sl.risk(task, 0.2, 0.0, 0.3)
    assert isinstance(sl.risk(task, 0.2, 0.1, 0.3), float)


# ------------------------------------------------------------------------------------------------------------
# PGD: reduced maps against brute force, reference trajectories


def test_manifold_map_reference_trajectory():
    """Spec Sec. 10.5(a) (12 decimals printed; brute-force deviation 3.5e-13 there)."""
    task = sl.SingleLocationTask(d=400, L=10)
    tr = sl.map(
        task,
        [0.05, 0.02],
        alpha=4e-3,
        n_steps=20000,
        lam=0.1,
        manifold=True,
        saveat=SaveAt(steps=[0, 100, 1000, 5000, 20000]),
    )
    ref = np.array(
        [
            [0.050000000000, 0.020000000000, 0.617028574377],
            [0.032501040274, 0.044504329894, 0.614525057592],
            [0.316496244335, 0.614357939606, 0.436003685227],
            [0.890810584661, 1.0, 0.115398224174],
            [0.982973307153, 1.0, 0.113694059283],
        ]
    )
    got = np.stack([tr.kappa[0], tr.nu[0], tr.excess_risk[0]], axis=1)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-11)  # 12 decimals printed + accumulated rounding
    assert np.all(tr.distance_to_manifold.values == 0) and np.all(tr.theta.values == 0)
    assert list(tr.step.values) == [0, 100, 1000, 5000, 20000] and np.all(tr.time.values == tr.step.values)


def test_five_scalar_map_reference_trajectory():
    """Spec Sec. 10.5(b)."""
    task = sl.SingleLocationTask(d=400, L=10)
    tr = sl.map(
        task,
        [0.03, -0.04, 0.05, 0.02, -0.06],
        alpha=1e-3,
        n_steps=50000,
        lam=0.9,
        saveat=SaveAt(steps=[0, 100, 1000, 10000, 50000]),
    )
    ref = np.array(
        [
            [
                0.030000000000,
                -0.040000000000,
                0.050000000000,
                0.020000000000,
                -0.060000000000,
                4.645833745408,
                0.080622577483,
            ],
            [
                -0.005124645051,
                -0.034963985248,
                0.002485030379,
                0.027692452702,
                0.000307400241,
                4.465692657846,
                0.027805427664,
            ],
            [
                -0.021205228192,
                -0.142557638543,
                0.005909301830,
                0.064448847546,
                0.003031049267,
                4.448678734041,
                0.064790130867,
            ],
            [
                -0.246286487780,
                -0.999703079217,
                -0.024242130919,
                0.064445539859,
                -0.060804400253,
                3.819329302494,
                0.091859042066,
            ],
            [
                -0.284740365427,
                -0.997012830923,
                -0.076949382008,
                0.209515596603,
                -0.193198692016,
                3.818581889025,
                0.295201163968,
            ],
        ]
    )
    got = np.concatenate(
        [tr.states()[0, :, :5], tr.excess_risk.values[0, :, None], tr.distance_to_manifold.values[0, :, None]], axis=1
    )
    # 12 decimals printed; 1e-10 allows the spec's brute-force deviation (8e-13) with margin
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize(("d", "lam", "alpha"), [(400, 0.1, 4e-3), (80, sl.lam_schedule(2.0), 1e-3)])
def test_five_scalar_map_equals_brute_force(d, lam, alpha):
    """Spec Sec. 6.4: the exact five-scalar map equals d-dimensional PGD with the chain-rule gradient (>= 1e4 steps,
    stable regimes as verified in the spec: lambda = 0.1, alpha = 4e-3; lambda_n = 2/(1 + 1e-4 n), alpha = 1e-3)."""
    task = sl.SingleLocationTask(d=d, L=10)
    rng = np.random.default_rng(d)
    state0 = sl.sample_initial_state(task, 3, rng)
    k_star, v_star = sl.random_oracle_directions(task, rng)
    k, v = _vectors_in_frame(state0, k_star, v_star, rng)
    n_steps = 10_000
    saveat = SaveAt(every=500)
    red = sl.map(task, state0, alpha=alpha, n_steps=n_steps, lam=lam, saveat=saveat)
    brute = sl.full_pgd(task, k, v, k_star, v_star, alpha=alpha, n_steps=n_steps, lam=lam, save_every=500)
    assert np.array_equal(red.step.values, brute.step.values)
    dev = np.max(np.abs(red.states() - brute.states()))
    assert dev <= 1e-10, dev  # the target; spec Sec. 6.4 measured 1.6e-14 .. 1.9e-13 for these regimes
    assert np.max(np.abs(red.risk.values - brute.risk.values)) <= 1e-10


def _vectors_in_frame(states, k_star, v_star, rng):
    """Unit vectors k, v with the given five scalars against a fixed orthonormal pair (k*, v*) (Gram–Schmidt)."""
    d = k_star.size
    ks, vs = [], []
    for kappa, nu, theta, eta, rho in states:
        basis = np.linalg.qr(np.column_stack([k_star, v_star, rng.standard_normal((d, 2))]))[0]
        basis[:, 0], basis[:, 1] = k_star, v_star  # qr may flip signs of the first two columns
        a = math.sqrt(1 - kappa**2 - eta**2)
        b = (rho - kappa * theta - eta * nu) / a
        c = math.sqrt(1 - theta**2 - nu**2 - b**2)
        ks.append(basis @ np.array([kappa, eta, a, 0.0]))
        vs.append(basis @ np.array([theta, nu, b, c]))
    return np.array(ks), np.array(vs)


def test_manifold_map_equals_five_scalar_map_on_manifold():
    task = sl.SingleLocationTask(d=400, L=10)
    state0 = sl.sample_initial_state(task, 8, 3, on="manifold")
    for lam, alpha in ((0.1, 4e-3), (sl.lam_schedule(1.0), 4e-3)):
        a = sl.map(task, state0, alpha=alpha, n_steps=20000, lam=lam, manifold=True, saveat=SaveAt(every=1000))
        b = sl.map(task, state0, alpha=alpha, n_steps=20000, lam=lam, saveat=SaveAt(every=1000))
        assert np.all(b.distance_to_manifold.values == 0)  # M is exactly invariant for the 5-scalar map (spec 6.2)
        # two float64 evaluations of the same map: rounding-level differences, contracted by the stable dynamics
        np.testing.assert_allclose(a.states()[..., :2], b.states()[..., :2], rtol=0, atol=1e-11)
        np.testing.assert_allclose(a.risk.values, b.risk.values, rtol=0, atol=1e-11)


def test_schedule_array_equals_schedule_object_and_logging_convention():
    task = sl.SingleLocationTask(d=400, L=10)
    state0 = sl.sample_initial_state(task, 4, 1)
    sched = sl.lam_schedule(1.0)
    n = 3000
    lam_arr = sched(np.arange(n + 1))
    a = sl.map(task, state0, alpha=4e-3, n_steps=n, lam=sched, saveat=SaveAt(every=300))
    b = sl.map(task, state0, alpha=4e-3, n_steps=n, lam=lam_arr, saveat=SaveAt(every=300))
    assert np.array_equal(a.states(), b.states())
    # spec Sec. 0.3: the row at step n holds lambda_n and the risk of iterate n at lambda_n
    np.testing.assert_array_equal(a.lam.values[0], 1.0 / (1.0 + 1e-4 * a.step.values))
    np.testing.assert_allclose(
        a.risk.values,
        sl.risk(task, a.lam.values, *(a[v].values for v in ("kappa", "nu", "theta", "eta", "rho"))),
        rtol=1e-15,
        atol=0,
    )
    assert a.attrs["model"] == "single_location" and a.attrs["source"] == "closedform"
    assert a.attrs["time_unit"] == "step" and '"d":400' in a.attrs["spec_json"]
    # an array with one entry per update gives the same updates
    c = sl.map(task, state0, alpha=4e-3, n_steps=n, lam=lam_arr[:-1], saveat=SaveAt(every=300))
    assert np.array_equal(c.states()[..., :5], a.states()[..., :5])


def test_spurious_point_values_and_stationarity():
    """Spec Sec. 7.4 table (6 significant digits) and: S is a fixed point of the five-scalar map."""
    task = sl.SingleLocationTask(d=400, L=10)
    for lam, theta_s, dist, exc, oracle in (
        (1 / 13, 0.817056, 1.29135, 0.068889, 0.075012),
        (0.08, 0.785819, 1.27181, 0.074441, 0.078705),
        (0.1, 0.629772, 1.18178, 0.115512, 0.113498),
        (0.9, 0.090351, 1.00407, 3.984798, 3.819360),
    ):
        S = sl.spurious_point(task, lam)
        assert S.exists
        # printed with 6 decimals (theta_S) and 5 decimals (dist_M)
        assert _close_to_printed(S.theta_S, theta_s, decimals=6)
        assert _close_to_printed(S.distance_to_manifold, dist, decimals=5)
        assert _close_to_printed(S.excess_risk, exc, decimals=6)
        assert _close_to_printed(sl.excess_risk(task, lam, *S.state), exc, decimals=6)  # the 7.4 formula = risk
        assert _close_to_printed(sl.oracle_risk(task, lam), oracle, decimals=6)
        tr = sl.map(task, S.state, alpha=1e-3, n_steps=2000, lam=lam, saveat=SaveAt(final=True))
        np.testing.assert_allclose(tr.states()[0, -1, :5], S.state, rtol=0, atol=1e-12)  # stationary (rounding)
    assert not sl.spurious_point(task, 0.06).exists  # exists only for lambda >= 0.06279


# ------------------------------------------------------------------------------------------------------------
# fixed points on M


@pytest.mark.parametrize("lam", [0.05, 0.2])
def test_exactly_five_fixed_points_on_manifold(lam):
    """Spec Sec. 7.1: zeros of the PGD flow on M found by scipy from a grid of starts, in angle coordinates
    kappa = sin u, nu = sin w (du/dt = -cos u dR/dkappa, so the corners are simple zeros), with the partials of
    risk_partials (checked against finite differences). lambda is kept moderate: for large lambda sqrt(d) the field
    underflows near nu = +-1 and root finders report frozen points (spec Sec. 7.1 caveat, Sec. 9.8)."""
    task = sl.SingleLocationTask(d=400, L=10)

    def field(x):
        p = sl.risk_partials(task, lam, np.sin(x[0]), np.sin(x[1]))
        return [-np.cos(x[0]) * p[0], -np.cos(x[1]) * p[1]]

    found = set()
    for u0 in np.linspace(-1.5, 1.5, 7):
        for w0 in np.linspace(-1.5, 1.5, 7):
            sol = scipy.optimize.root(field, [u0, w0], tol=1e-14)
            if np.max(np.abs(field(sol.x))) < 1e-12:  # a genuine zero (the field is >= 1e-4 away from the zeros)
                found.add(tuple(float(x) + 0.0 for x in np.round(np.sin(sol.x), 6)))
    fps = [fp for fp in sl.fixed_points(task, lam) if fp.on_manifold]
    assert len(fps) == 5
    assert found == {(fp.kappa, fp.nu) for fp in fps}
    kinds = {(fp.kappa, fp.nu): fp.stability for fp in fps}
    assert kinds == {
        (0.0, 0.0): "saddle",
        (1.0, 1.0): "minimum",
        (-1.0, -1.0): "minimum",
        (1.0, -1.0): "maximum",
        (-1.0, 1.0): "maximum",
    }
    names = {(fp.kappa, fp.nu): fp.kind for fp in fps}
    assert names == {
        (0.0, 0.0): "saddle",
        (1.0, 1.0): "oracle",
        (-1.0, -1.0): "oracle",
        (1.0, -1.0): "anti_oracle",
        (-1.0, 1.0): "anti_oracle",
    }
    # classification checked on the risk itself: corners are minima (maxima) when the risk grows (drops) towards
    # their neighbours in the square; the origin is a saddle when the finite-difference Hessian has det < 0
    for fp in fps:
        if fp.stability == "saddle":
            h = 1e-3

            def f(a, b):
                return sl.manifold_risk(task, lam, a, b)

            hkk = (f(h, 0) - 2 * f(0, 0) + f(-h, 0)) / h**2
            hkn = (f(h, h) - f(h, -h) - f(-h, h) + f(-h, -h)) / (4 * h * h)
            assert hkk * 0 - hkn**2 < 0 and abs(hkn) > 1e-3  # R_M is linear in nu: h_nn = 0
            continue
        nb = [(fp.kappa - 0.05 * np.sign(fp.kappa), fp.nu), (fp.kappa, fp.nu - 0.05 * np.sign(fp.nu))]
        diffs = [sl.manifold_risk(task, lam, a, b) - fp.risk for a, b in nb]
        assert all(x > 0 for x in diffs) if fp.stability == "minimum" else all(x < 0 for x in diffs)


def test_fixed_point_linearisation():
    """Spec Sec. 7.2 example (d=400, L=10, gamma^2=1/2, lambda=0.1, alpha=4e-3) and a finite-difference Jacobian."""
    task = sl.SingleLocationTask(d=400, L=10)
    lam, alpha = 0.1, 4e-3
    fps = {(fp.kappa, fp.nu): fp for fp in sl.fixed_points(task, lam, alpha, n_starts=0) if fp.on_manifold}
    saddle = fps[(0.0, 0.0)]
    # flow eigenvalues from central differences (error ~1e-10, see closedform.single_location._FD_H)
    assert np.allclose(sorted(-np.array(saddle.flow_eigenvalues)), [-0.77152, 3.26794], atol=5e-6)  # 5 decimals
    assert np.allclose(sorted(saddle.manifold_map_eigenvalues), [0.986928, 1.003086], atol=5e-7)  # 6 decimals
    corner = fps[(1.0, 1.0)]
    assert np.allclose(corner.manifold_map_eigenvalues, [0.99991446, 0.99238721], atol=5e-9)  # 8 decimals
    # on (S^{d-1})^2 the corner's kappa- and nu-multipliers are the square roots (angle, not 1 - kappa, coordinates)
    assert np.allclose(sorted(corner.map_eigenvalues)[-1], math.sqrt(0.99991446), atol=5e-9)
    assert corner.attracting and not saddle.attracting
    # finite-difference Jacobian of one reduced PGD step at the saddle (the map is smooth there)
    h = 1e-6
    starts = np.array([[h, 0], [-h, 0], [0, h], [0, -h]])
    one = sl.map(task, starts, alpha=alpha, n_steps=1, lam=lam, manifold=True, saveat=SaveAt(final=True))
    x1 = one.states()[:, -1, :2]
    J = np.column_stack([(x1[0] - x1[1]) / (2 * h), (x1[2] - x1[3]) / (2 * h)])
    # central differences: O(h^2) truncation ~1e-12, rounding ~eps/h ~ 1e-10
    np.testing.assert_allclose(np.sort(np.linalg.eigvals(J).real), np.sort(saddle.manifold_map_eigenvalues), atol=1e-8)


def test_pgd_from_manifold_starts_converges_to_oracle_corners():
    """Theorem 5 (spec Sec. 7.3): generic starts on M converge to (1, 1) or (-1, -1) (Fig. 4(b) setting)."""
    task = sl.SingleLocationTask(d=400, L=10)
    state0 = sl.sample_initial_state(task, 50, 2024, on="manifold")
    tr = sl.map(
        task,
        state0,
        alpha=4e-3,
        n_steps=200_000,
        lam=0.1,
        manifold=True,
        saveat=SaveAt(steps=[0, 5000, 20000, 200_000]),
    )
    kappa, nu = tr.kappa.values, tr.nu.values
    assert np.all(np.sign(kappa[:, 1]) == np.sign(nu[:, 1]))  # sign(kappa) = sign(nu) by step 5 000 (spec Sec. 8.3)
    # spec Sec. 8.3: |kappa| at 20 000 in 0.982-0.984 (5-95% range); the kappa multiplier 0.99991446 (Sec. 7.2) makes
    # 1 - |kappa| shrink by exp(-15) over the next 180 000 steps, i.e. below 1e-6
    assert np.all((np.abs(kappa[:, 2]) > 0.98) & (np.abs(kappa[:, 2]) < 0.986))
    assert np.all(1 - np.abs(kappa[:, 3]) < 1e-6) and np.all(1 - np.abs(nu[:, 3]) < 1e-12)
    assert np.all(np.sign(kappa[:, 3]) == np.sign(nu[:, 3]))


# ------------------------------------------------------------------------------------------------------------
# initial-state laws


def test_sphere_initial_law_matches_explicit_vectors():
    """Spec Sec. 6.5: the five-scalar sampler against inner products of explicit uniform vectors (two-sample KS)."""
    task = sl.SingleLocationTask(d=6, L=3)
    n = 20_000
    fast = sl.sample_initial_state(task, n, 7)
    rng = np.random.default_rng(8)
    k = rng.standard_normal((n, 6))
    v = rng.standard_normal((n, 6))
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    slow = np.stack([k[:, 0], v[:, 1], v[:, 0], k[:, 1], np.sum(k * v, axis=1)], axis=1)

    def stats(s):
        return [s[:, 0], s[:, 4], s[:, 4] - s[:, 0] * s[:, 2] - s[:, 3] * s[:, 1], s[:, 0] * s[:, 2]]

    for a, b in zip(stats(fast), stats(slow)):
        # p > 1e-4: a false alarm has probability 1e-4 per statistic (fixed seeds make it deterministic)
        assert scipy.stats.ks_2samp(a, b).pvalue > 1e-4
    # exact law of one coordinate: (kappa + 1)/2 ~ Beta((d-1)/2, (d-1)/2)
    exact = scipy.stats.beta((6 - 1) / 2, (6 - 1) / 2)
    assert scipy.stats.kstest((fast[:, 0] + 1) / 2, exact.cdf).pvalue > 1e-4


def test_manifold_initial_law():
    """Spec Sec. 6.5: kappa ~ coordinate of S^{d-2}, nu ~ coordinate of S^{d-3}; negative control S^{d-1}."""
    d, n = 6, 20_000
    task = sl.SingleLocationTask(d=d, L=3)
    st = sl.sample_initial_state(task, n, 9, on="manifold")
    assert np.all(st[:, 2:] == 0)

    def beta(m):  # coordinate law on S^{m-1}
        return scipy.stats.beta((m - 1) / 2, (m - 1) / 2)

    assert scipy.stats.kstest((st[:, 0] + 1) / 2, beta(d - 1).cdf).pvalue > 1e-4
    assert scipy.stats.kstest((st[:, 1] + 1) / 2, beta(d - 2).cdf).pvalue > 1e-4
    assert scipy.stats.kstest((st[:, 1] + 1) / 2, beta(d).cdf).pvalue < 1e-6  # wrong law rejected
    # the authors' procedure with explicit vectors (k Gaussian projected against v*; v against k* and the part of
    # k orthogonal to k*), two-sample KS
    rng = np.random.default_rng(10)
    ks, vs = np.eye(d)[0], np.eye(d)[1]
    k = rng.standard_normal((n, d))
    k -= np.outer(k @ vs, vs)
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    u = k - np.outer(k @ ks, ks)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    v = rng.standard_normal((n, d))
    v -= np.outer(v @ ks, ks)
    v -= np.sum(v * u, axis=1, keepdims=True) * u
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    assert scipy.stats.ks_2samp(st[:, 0], k @ ks).pvalue > 1e-4
    assert scipy.stats.ks_2samp(st[:, 1], v @ vs).pvalue > 1e-4
    assert np.max(np.abs(np.sum(k * v, axis=1))) < 1e-12  # the procedure really lands on M


def test_vectors_from_state_reproduce_scalars():
    task = sl.SingleLocationTask(d=50, L=3)
    states = np.vstack([sl.sample_initial_state(task, 5, 1), [[0, 0, 0.6, 1, 0]], [[1, 1, 0, 0, 0]]])
    k, v, ks, vs = sl.vectors_from_state(task, states, 2)
    got = np.stack([np.sum(k * ks, 1), np.sum(v * vs, 1), np.sum(v * ks, 1), np.sum(k * vs, 1), np.sum(k * v, 1)], 1)
    np.testing.assert_allclose(got, states, atol=1e-14)  # float64 rounding of 50-term inner products
    np.testing.assert_allclose(np.sum(ks * vs, 1), 0, atol=1e-15)


# ------------------------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"d": 400, "L": 0}, "L"),
        ({"d": 400, "L": 10, "gamma": 0}, "gamma"),
        ({"d": 400, "L": 10, "noise": -0.1}, "noise"),
        ({"d": 1, "L": 3}, "d"),
    ],
)
def test_bad_task(kwargs, word):
    with pytest.raises(ValueError, match=word):
        sl.SingleLocationTask(**kwargs)


def test_bad_inputs():
    task = sl.SingleLocationTask(d=400, L=10)
    with pytest.raises(ValueError, match="lam"):
        sl.risk(task, 0.0, 0.1, 0.1)
    with pytest.raises(ValueError, match="kappa"):
        sl.risk(task, 0.1, 1.5, 0.1)
    with pytest.raises(ValueError, match="positive semidefinite"):
        sl.risk(task, 0.1, 0.9, 0.0, 0.0, 0.9, 0.0)  # |k|^2 >= kappa^2 + eta^2 = 1.62 > 1
    with pytest.raises(ValueError, match="d must be >= 4"):
        sl.map(sl.SingleLocationTask(d=3, L=2), [0.1, 0.1, 0, 0, 0], alpha=1e-3, n_steps=10, lam=0.1)
    with pytest.raises(ValueError, match="alpha"):
        sl.map(task, [0.1, 0.1, 0, 0, 0], alpha=0.0, n_steps=10, lam=0.1)
    with pytest.raises(ValueError, match="lam"):
        sl.map(task, [0.1, 0.1, 0, 0, 0], alpha=1e-3, n_steps=10, lam=-1.0)
    with pytest.raises(ValueError, match="lam"):
        sl.map(task, [0.1, 0.1, 0, 0, 0], alpha=1e-3, n_steps=10, lam=np.ones(5))
    with pytest.raises(ValueError, match="positive semidefinite"):
        sl.map(task, [0.9, 0.1, 0, 0.9, 0], alpha=1e-3, n_steps=10, lam=0.1)
    with pytest.raises(ValueError, match="theta = eta = rho = 0"):
        sl.map(task, [0.1, 0.1, 0.1, 0, 0], alpha=1e-3, n_steps=10, lam=0.1, manifold=True)
    with pytest.raises(ValueError, match="location_probs"):
        sl.linear_risk(task, np.ones(10))
    with pytest.raises(ValueError, match="on"):
        sl.sample_initial_state(task, 3, 0, on="cube")


def test_blow_up_raises_divergence_error():
    task = sl.SingleLocationTask(d=400, L=10)
    with pytest.raises(dynamics.DivergenceError) as info:
        sl.map(task, [0.1, 0.2, 0.05, 0.02, 0.03], alpha=1e308, n_steps=5, lam=1.0)
    assert info.value.trajectory == 0 and info.value.step == 1


# ------------------------------------------------------------------------------------------------------------
# figure outcomes (spec Sec. 8; distributional, per Sec. 11)


def _at_spurious(tr):
    """Runs whose final state is at (or heading to) S: |eta| near 1 and kappa near 0 (spec Sec. 7.4)."""
    return (np.abs(tr.eta.values[:, -1]) > 0.9) & (np.abs(tr.kappa.values[:, -1]) < 0.2)


@pytest.mark.slow
@pytest.mark.statistical
def test_fig7b_fraction_of_runs_at_spurious_point():
    """Spec Sec. 8.6(b)/7.4: about 49% (pooled over 4 600 runs) of sphere starts end at S; recovering runs have
    |kappa| in 0.982-0.984 and excess risk 0.1137 at step 20 000."""
    task = sl.SingleLocationTask(d=400, L=10)
    n = 400
    tr = sl.map(
        task,
        sl.sample_initial_state(task, n, 77),
        alpha=4e-3,
        n_steps=20_000,
        lam=0.1,
        saveat=SaveAt(steps=[0, 20_000]),
    )
    at_s = _at_spurious(tr)
    frac = at_s.mean()
    # binomial SE of this estimate combined with that of the spec's pooled 49% (n = 4 600); 5 SE rule
    se = math.sqrt(frac * (1 - frac) / n + 0.49 * 0.51 / 4600)
    assert_mc_close(frac, se, 0.49, what="fraction of runs at S")
    assert_mc_rejects(frac, se, 0.037, what="Fig. 4(a) rate instead of Fig. 7(b)'s")  # negative control
    rec = ~at_s
    assert np.all(np.abs(tr.nu.values[rec, -1]) > 0.999)
    assert 0.982 <= np.median(np.abs(tr.kappa.values[rec, -1])) <= 0.984  # spec's 5-95% range of |kappa|
    np.testing.assert_allclose(np.median(tr.excess_risk.values[rec, -1]), 0.1137, atol=1e-4)  # 4 decimals
    np.testing.assert_allclose(tr.excess_risk.values[at_s, -1], 0.115512, atol=2e-6)  # S, 6 decimals + transient


@pytest.mark.slow
def test_fig4a_recovering_runs():
    """Spec Sec. 8.2: decreasing schedule lambda_n = 1/(1 + 1e-4 n), 120 000 steps, 30 sphere starts."""
    task = sl.SingleLocationTask(d=400, L=10)
    tr = sl.map(
        task,
        sl.sample_initial_state(task, 30, 4),
        alpha=4e-3,
        n_steps=120_000,
        lam=sl.lam_schedule(1.0),
        saveat=SaveAt(steps=[0, 1000, 60_000, 120_000]),
    )
    # step 0: mean excess risk 5.25, 95% of starts in [4.87, 6.53]
    assert np.all((tr.excess_risk.values[:, 0] > 4.8) & (tr.excess_risk.values[:, 0] < 7.0))
    # step 1 000: v aligns first (|nu| ~ 0.98, |kappa| ~ 0.12; medians)
    assert np.median(np.abs(tr.nu.values[:, 1])) > 0.9 and np.median(np.abs(tr.kappa.values[:, 1])) < 0.3
    at_s = _at_spurious(tr)
    assert at_s.sum() <= 5  # expected 0-3 of 30 (rate 3.7%); 5 has probability < 0.5%
    rec = ~at_s
    np.testing.assert_allclose(np.abs(tr.kappa.values[rec, 2]), 0.78882, atol=5e-6)  # printed to 5 decimals
    np.testing.assert_allclose(np.abs(tr.nu.values[rec, 2:]), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.abs(tr.kappa.values[rec, 3]), 0.99997, atol=5e-6)
    # "excess risk 0.07501" (5 decimals printed); on M it cannot go below the erf-oracle value 0.0750118 (Sec. 7.1)
    np.testing.assert_allclose(tr.excess_risk.values[rec, 3], 0.07501, atol=5e-6)
    assert np.all(tr.excess_risk.values[rec, 3] >= sl.oracle_risk(task, 1 / 13) - 1e-15)
    assert np.all(tr.distance_to_manifold.values[rec, 2:] < 1e-30)
    np.testing.assert_allclose(tr.lam.values[0, 3], 1 / 13, rtol=1e-15)


def test_pgd_stops_converged_trajectories_where_the_full_run_ends():
    task = sl.SingleLocationTask(d=400, L=10)
    state0 = sl.sample_initial_state(task, 16, rng=3)
    full = sl.map(task, state0, alpha=4e-3, n_steps=20_000, lam=0.1, saveat=dynamics.SaveAt(final=True))
    fast = sl.map(
        task, state0, alpha=4e-3, n_steps=20_000, lam=0.1, saveat=dynamics.SaveAt(final=True), converged=1e-12
    )
    # a trajectory stops once an update moves no scalar by 1e-12; the map contracts at rate <= 0.99992 per step
    # near its attractors (spec Sec. 7.2), so the remaining distance is at most 1e-12 / (1 - 0.99992) ~ 1.3e-8
    for v in ("kappa", "nu", "theta", "eta", "rho"):
        np.testing.assert_allclose(fast[v].values, full[v].values, atol=2e-8)
    stopped = fast.stopped_at.values
    assert np.all(stopped <= 20_000) and np.any(stopped < 20_000)
