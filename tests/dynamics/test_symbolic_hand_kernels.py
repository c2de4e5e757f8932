"""Hand-derived kernels against symbolic derivations (dynamics.symbolic), with wrong-kernel controls.

single_location: the five partials of the risk (docs/models/single_location.md §4.3) and the exact five-scalar PGD
map (§6.4) of closedform._single_location_kernels against the sympy derivative of the §4.2 risk (zeta registered
with its derivative rules) and against generic projected gradient descent on a product of spheres (the front end's
``spheres=``) applied to vectors with the same five scalars. Each comparison runs at >= 1 000 random states and at
the named points, and the same comparison rejects a copy of the hand kernel with one sign or one factor changed.

Tolerance: 1e-12 relative to the largest component at each point (dynamics.testing.formula_error); the partials
are sums of terms up to s^2 = d/2 times larger than the result, so rounding alone gives ~(d/2) 1e-16, i.e. 2e-14
at d = 400 and 1e-13 at d = 2000.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from closedform import _single_location_kernels as _k
from closedform import single_location as sl
from dynamics.testing import assert_formula_close, assert_formula_rejects

# (d, L, lam): the paper's settings (d = 400, L = 10 at lambda = 0.1 and 1) and a larger, sharper case
CASES = [(400, 10, 0.1), (400, 10, 1.0), (2000, 20, 0.3)]
RTOL = 1e-12


def _states(task, lam, n, seed):
    """Sphere starts (the law of §6.5) plus the named points: M's five points, S, the swap points."""
    rng = np.random.default_rng(seed)
    X = sl.sample_initial_state(task, n, rng=rng)[:, :5]
    named = sl._closed_form_points(task, lam)
    # points near M and near the corners, where terms cancel
    near = np.array([[0.999, 0.998, 1e-3, -2e-3, 1e-3], [1e-4, -1e-4, 1e-5, 0.0, 0.0], [0.5, -0.5, 0.0, 0.0, 0.0]])
    return np.concatenate([X, named, near])


def _hand_partials(task, lam, X, partials=None):
    partials = _k._partials if partials is None else partials
    cst = np.empty(_k.N_CONST)
    _k.lam_constants(lam, task.s, task.gamma, cst)
    out = np.empty_like(X)
    for i, x in enumerate(X):
        fam = _k._zeta_family(lam * task.s * x[0], cst[_k.C_G], cst[_k.C_Q], cst[_k.C_R])
        out[i] = partials(*x, task.s, task.gamma, float(task.L), cst, 0, fam)
    return out


def _mutant(fn, old, new, **replace_globals):
    """A copy of the (numba) function ``fn`` with ``old`` replaced by ``new`` in its source, as plain Python (with
    ``replace_globals`` standing in for the functions it calls)."""
    src = inspect.getsource(fn.py_func)
    assert src.count(old) == 1, old
    src = "\n".join(line for line in src.replace(old, new).splitlines() if not line.startswith("@"))
    namespace = {**fn.py_func.__globals__, **replace_globals}
    exec(compile(src, "<mutant>", "exec"), namespace)
    return namespace[fn.py_func.__name__]


@pytest.mark.parametrize("d, L, lam", CASES)
def test_single_location_partials_and_risk_match_the_symbolic_derivative(d, L, lam):
    task = sl.SingleLocationTask(d=d, L=L, noise=0.1)
    X = _states(task, lam, 1000, seed=d + L)
    model = sl._symbolic_scalar_model()
    p = sl._symbolic_params(task, lam, None)
    sym = model.gradient(X, p)
    assert_formula_close(_hand_partials(task, lam, X), sym, rtol=RTOL, what=f"partials d={d} lam={lam}")
    assert_formula_close(sl.risk(task, lam, *X.T), model.risk(X, p), rtol=RTOL, what="risk")
    # controls: one sign (the eta-term of R_theta) and one factor (the (L-1) of R_rho's B_2 term)
    sign = _mutant(_k._partials, "-2.0 * g * gamma * s * eta * phi1", "2.0 * g * gamma * s * eta * phi1")
    factor = _mutant(
        _k._partials, "2.0 * (L - 1.0) * (B2 + (L - 2.0) * C * C) * rho", "2.0 * L * (B2 + (L - 2.0) * C * C) * rho"
    )
    for wrong in (sign, factor):
        assert_formula_rejects(_hand_partials(task, lam, X, wrong), sym, rtol=RTOL)


@pytest.mark.parametrize("d, L, lam", CASES)
def test_single_location_pgd_map_matches_symbolic_and_generic_projected_descent(d, L, lam):
    task = sl.SingleLocationTask(d=d, L=L)
    alpha = 4e-3 if lam < 0.5 else 1e-3
    X = _states(task, lam, 1000, seed=7 * d + L)
    n = X.shape[0]

    def hand(update=None):
        if update is None:
            out = np.empty_like(X)
            _k.five_map_array(X, np.full(n, lam), np.full(n, alpha), task.s, task.gamma, float(task.L), out)
            return out
        P = _hand_partials(task, lam, X, _k._partials)
        return np.array([update(*x, *r, alpha) for x, r in zip(X, P)])

    # the symbolic Gram-matrix form of §6.4 (zeta's series form in the hand kernel agrees to a few ulp)
    p = sl._symbolic_params(task, lam, alpha)
    sym = sl._symbolic_scalar_model().map(X, p)
    assert_formula_close(hand(), sym, rtol=RTOL, what="five-scalar map vs symbolic")
    # generic PGD on (S^5)^2 applied to vectors with these scalars, then the scalars of the result
    V = np.array([np.concatenate(sl._frame_vectors(x)) for x in X])
    W = sl._symbolic_vector_model().map(V, p)
    k, v = W[:, :6], W[:, 6:]
    generic = np.column_stack([k[:, 0], v[:, 1], v[:, 0], k[:, 1], np.sum(k * v, axis=1)])
    # 1e-12 on the scalars, which are O(1); the frame vectors themselves carry ~1e-16 rounding
    assert_formula_close(hand(), generic, rtol=RTOL, what="five-scalar map vs generic PGD on spheres")
    sign = _mutant(
        _k.five_update,
        "k0, k1, k2, k3 = 1.0 + alpha * kgk, -alpha * rr",
        "k0, k1, k2, k3 = 1.0 + alpha * kgk, alpha * rr",
    )
    factor = _mutant(
        _k.five_update,
        "v0, v1, v2, v3 = -alpha * rr, 1.0 + alpha * vgv",
        "v0, v1, v2, v3 = -alpha * rr, 1.0 + 2.0 * alpha * vgv",
    )
    for wrong in (sign, factor):
        assert_formula_rejects(hand(wrong), generic, rtol=RTOL)


def test_single_location_saddle_eigenvalue_from_the_symbolic_jacobian():
    """docs/models/single_location.md §7.2: at d = 400, L = 10, lambda = 0.1, alpha = 4e-3 the saddle's map
    multipliers are 0.986928 and 1.003086 (6 decimals quoted); the Jacobian is the symbolic one and equals the
    closed form I - alpha H of §7.2 to rounding."""
    task = sl.SingleLocationTask(d=400, L=10)
    lam, alpha = 0.1, 4e-3
    J = sl._symbolic_scalar_model().jacobian_map(np.zeros(5), sl._symbolic_params(task, lam, alpha))[:2, :2]
    g = lam * task.gamma
    q, r = np.sqrt(1 + 2 * g * g), np.sqrt(1 + 4 * g * g)
    c = lam * task.s / q
    H = np.array(
        [
            [8 * task.gamma**2 * c**2 / (np.pi * r), -4 * task.gamma**2 * c / np.sqrt(np.pi)],
            [-4 * task.gamma**2 * c / np.sqrt(np.pi), 0.0],
        ]
    )
    np.testing.assert_allclose(J, np.eye(2) - alpha * H, rtol=0, atol=1e-15)  # entries O(1): rounding only
    ev = np.sort(np.linalg.eigvals(J).real)
    np.testing.assert_allclose(ev, [0.986928, 1.003086], atol=5e-7)  # 6 decimals quoted
    saddle = sl.fixed_points(task, lam, alpha, n_starts=0)[0]
    np.testing.assert_allclose(sorted(saddle.manifold_map_eigenvalues), ev, rtol=0, atol=1e-15)


# ----------------------------------------------------------------------------------------------------------------
# icl_regression: the approximate loss F (docs/models/icl_regression.md §4.1), grad(F/2) and the H-head flow and GD
# step of F/2 (§4.4, §5.1) against the symbolic model of F/2. The flow vanishes at stationary points, so errors are
# measured relative to max(|reference|, 1) per point (the terms of the gradient are O(1) or larger on this box):
# 1e-12 absolute there, relative elsewhere.

from closedform import _icl_regression_kernels as _ik  # noqa: E402
from closedform import icl_regression as icl  # noqa: E402


def _icl_model(H):
    import sympy as sp

    from dynamics.symbolic import SymbolicModel

    om = sp.symbols(f"omega0:{H}", real=True)
    mu = sp.symbols(f"mu0:{H}", real=True)
    d, cL, s2 = sp.symbols("d cL sigma2", real=True)
    # F written out as a double sum, not as matrices
    F = (
        1
        + s2
        - 2 * sum(m * w for m, w in zip(mu, om))
        + sum(mu[h] * mu[g] * (om[h] * om[g] + cL * sp.exp(d * om[h] * om[g])) for h in range(H) for g in range(H))
    )
    return SymbolicModel.from_risk(F / 2, om + mu, [d, cL, s2], step_size="lr", derivatives=H < 8)


def _icl_points(H, n, seed):
    rng = np.random.default_rng(seed)
    d = rng.integers(1, 12, n).astype(float)
    L = rng.integers(1, 100, n).astype(float)
    s2 = rng.uniform(0, 2, n)
    X = np.column_stack([rng.uniform(-0.6, 0.6, (n, H)), rng.uniform(-3, 3, (n, H))])
    P = np.column_stack([d, (1 + s2) / L, s2, rng.uniform(1e-3, 0.1, n)])
    if H == 1:  # the single-head optimum of the paper's example task (a named stationary point)
        task = icl.ICLRegressionTask(d=5, L=20, sigma2=0.25)
        opt = icl.single_head_optimum(task)
        X = np.vstack([X, [opt.omega, opt.mu], [-opt.omega, -opt.mu]])
        row = [task.d, (1 + task.sigma2) / task.L, task.sigma2, 0.05]
        P = np.vstack([P, row, row])
    return X, P


def _icl_half_grad(X, P, half_grad):
    out = np.empty_like(X)
    for i, (x, p) in enumerate(zip(X, P)):
        half_grad(x.copy(), p[0], p[1], out[i])  # half_grad_state(x = (omega, mu), d, cL, out)
    return out


# H = 8: ~40 s on a cold cache (sympy derivation of a 16-variable model), hence slow
@pytest.mark.parametrize("H", [1, 3, pytest.param(8, marks=pytest.mark.slow)])
def test_icl_regression_loss_gradient_flow_and_gd_match_the_symbolic_model(H):
    model = _icl_model(H)
    X, P = _icl_points(H, 1000, seed=H)
    n = X.shape[0]
    sym_grad = model.gradient(X, P)
    floor = np.ones(n)
    F = np.array([_ik.loss_one(x[:H], x[H:], p[0], p[2], p[1]) for x, p in zip(X, P)])
    assert_formula_close(F, 2 * model.risk(X, P), rtol=RTOL, floor=floor, what="F")
    assert_formula_close(_icl_half_grad(X, P, _ik.half_grad_state), sym_grad, rtol=RTOL, floor=floor, what="grad F/2")
    flow = np.empty_like(X)
    step = np.empty_like(X)
    for i, (x, p) in enumerate(zip(X, P)):
        _ik.flow_rhs(0.0, x, p[:2].copy(), flow[i])
        _ik.gd_step(0, x, p[[0, 1, 3]].copy(), step[i])
    assert_formula_close(flow, model.vector_field(X, P), rtol=RTOL, floor=floor, what="H-head flow")
    assert_formula_close(step, model.map(X, P), rtol=RTOL, floor=floor, what="GD step on F/2")
    # controls: one sign (the (1 - u) term of d/d omega_h) and one factor (the d of its kernel sum), each mutated in
    # the helper that half_grad_state calls
    sign = _mutant(_ik._half_grad_from_sums, "(-x[H + h] * one_minus_u", "(x[H + h] * one_minus_u")
    factor = _mutant(_ik._half_grad_from_sums, "+ d * cL * x[H + h] * out[h]", "+ cL * x[H + h] * out[h]")
    for helper in (sign, factor):
        wrong = _mutant(
            _ik.half_grad_state,
            "u = _kernel_row_sums(x, d, out)",
            "u = _kernel_row_sums(x, d, out)",
            _half_grad_from_sums=helper,
        )  # the compiled row sums, the mutated gradient helper
        assert_formula_rejects(_icl_half_grad(X, P, wrong), sym_grad, rtol=RTOL, floor=floor)


# ----------------------------------------------------------------------------------------------------------------
# scan_snap: the exact reduced vector field (docs/models/scan_snap.md §4.2) is the gradient ascent of the population
# log-likelihood J(Y, Z) = sum_n pi_n log softmax(Y^T f_n)_tgt(n), f_n = c_n / |c_n|, c_nl = P(l|n) exp(z_psi(n),l);
# the symbolic model differentiates J (unlumped decoder, one column per output) and is compared with exact_rhs.
# Entries are O(1); 1e-12 relative to max(|reference|, 1) per state.

from closedform import _scan_snap_kernels as _sk  # noqa: E402


def _scan_snap_case(seed):
    """A small random class structure: Lc = 4 tokens, M = 3 outputs, K = 3 classes on Q = 2 queries; P has a zero."""
    import sympy as sp

    from dynamics.symbolic import SymbolicModel

    rng = np.random.default_rng(seed)
    Lc, M, K, Q = 4, 3, 3, 2
    P = rng.uniform(0.1, 1.0, (K, Lc))
    P[1, 2] = 0.0
    P /= P.sum(axis=1, keepdims=True)
    pi = rng.dirichlet(np.ones(K))
    psi = np.array([0, 1, 1])
    tgt = np.array([0, 2, 1])
    Y = sp.Matrix(Lc, M, lambda i, j: sp.Symbol(f"Y{i}_{j}", real=True))
    Z = sp.Matrix(Q, Lc, lambda i, j: sp.Symbol(f"Z{i}_{j}", real=True))
    etaY, etaZ = sp.symbols("eta_Y eta_Z", real=True)
    J = 0
    for n in range(K):
        c = [sp.Float(P[n, ell]) * sp.exp(Z[psi[n], ell]) for ell in range(Lc)]
        norm = sp.sqrt(sum(ci**2 for ci in c))
        a = [sum(Y[ell, j] * c[ell] for ell in range(Lc)) / norm for j in range(M)]
        J += sp.Float(pi[n]) * (a[tgt[n]] - sp.log(sum(sp.exp(aj) for aj in a)))
    state = list(Y) + list(Z)  # row-major, as the kernel's layout
    flow = [etaY * sp.diff(J, v) for v in list(Y)] + [etaZ * sp.diff(J, v) for v in list(Z)]
    model = SymbolicModel(state, [etaY, etaZ], flow=flow, derivatives=False)  # the vector field alone
    logP = np.where(P > 0, np.log(np.where(P > 0, P, 1.0)), 0.0)
    rows, tokens = np.nonzero(P > 0)  # the kernels' class supports (closedform.scan_snap's data layout)
    sup = np.searchsorted(rows, np.arange(K + 1))
    p = np.array([0.7, 1.3, 0.0, 0.0, M], dtype=np.float64)
    data = (np.array([Lc, M, K, Q]), P, logP, pi, psi, tgt, np.ones(M), sup, tokens)  # index arrays int64
    return model, p, data, rng


def _scan_ascent(X, p, data, ascent):
    out = np.empty_like(X)
    nY = int(data[0][0] * data[0][1])
    for i, x in enumerate(X):
        ascent(x, data, out[i])
        out[i, :nY] *= p[0]
        out[i, nY:] *= p[1]
    return out


def test_scan_snap_exact_vector_field_matches_the_symbolic_gradient_of_the_likelihood():
    model, p, data, rng = _scan_snap_case(0)
    X = np.vstack([rng.normal(0, 1.5, (1000, 20)), np.zeros((1, 20))])  # random states and the zero start
    ref = model.vector_field(X, np.array([0.7, 1.3]))
    floor = np.ones(X.shape[0])
    hand = np.empty_like(X)
    for i, x in enumerate(X):
        _sk.exact_rhs(0.0, x, p, data, hand[i])
    assert_formula_close(hand, ref, rtol=RTOL, floor=floor, what="scan_snap exact_rhs")
    sign = _mutant(_sk.ascent, "a[j] = -a[j] / nrm", "a[j] = a[j] / nrm")
    factor = _mutant(
        _sk.ascent,
        "out[zoff + tok[qa + q]] -= pin * fl * fl * fg",
        "out[zoff + tok[qa + q]] -= 2.0 * pin * fl * fl * fg",
    )
    for wrong in (sign, factor):
        assert_formula_rejects(_scan_ascent(X, p, data, wrong), ref, rtol=RTOL, floor=floor)


# ----------------------------------------------------------------------------------------------------------------
# icl_regression's symmetric two-head flow (docs/models/icl_regression.md §6.2, Eq. (B.4)): the gradient flow of f/4
# with f(omega, mu) = F((omega, -omega), (mu, -mu)), generated from f, against the hand two_head_rhs; and f against
# the H = 2 symbolic model of F/2 on that invariant set. O(1) entries on this box: 1e-12 relative to max(|ref|, 1).


def _two_head_model():
    import sympy as sp

    from dynamics.symbolic import SymbolicModel

    om, mu, d, cL, s2 = sp.symbols("omega mu d cL sigma2", real=True)
    f = 1 + s2 - 4 * mu * om + 4 * mu**2 * om**2 + 4 * cL * mu**2 * sp.sinh(d * om**2)
    flow = [-sp.diff(f / 4, v) for v in (om, mu)]
    return SymbolicModel([om, mu], [d, cL], flow=flow)


def test_icl_regression_symmetric_two_head_flow_matches_the_gradient_flow_of_the_reduced_loss():
    model = _two_head_model()
    rng = np.random.default_rng(5)
    X = np.vstack([rng.uniform(-0.8, 0.8, (1000, 2)), np.zeros((1, 2))])
    P = np.column_stack([rng.integers(1, 12, X.shape[0]).astype(float), rng.uniform(0.01, 2.0, X.shape[0])])
    ref = model.vector_field(X, P)
    floor = np.ones(X.shape[0])

    def hand(rhs):
        out = np.empty_like(X)
        for i, (x, p) in enumerate(zip(X, P)):
            rhs(0.0, x, p, out[i])
        return out

    assert_formula_close(hand(_ik.two_head_rhs), ref, rtol=RTOL, floor=floor, what="two-head flow")
    # f is F on the invariant set omega_2 = -omega_1, mu_2 = -mu_1 of the H = 2 model
    Y = np.column_stack([X[:, 0], -X[:, 0], X[:, 1], -X[:, 1]])
    P4 = np.column_stack([P[:, 0], P[:, 1], np.full(X.shape[0], 0.25), np.full(X.shape[0], 0.05)])
    task_f = 1.25 - 4 * X[:, 1] * X[:, 0] + 4 * (X[:, 1] * X[:, 0]) ** 2
    task_f = task_f + 4 * P[:, 1] * X[:, 1] ** 2 * np.sinh(P[:, 0] * X[:, 0] ** 2)
    assert_formula_close(2 * _icl_model(2).risk(Y, P4), task_f, rtol=RTOL, floor=floor, what="f = F on the set")
    sign = _mutant(_ik.two_head_rhs, "dy[1] = omega - 2.0 * mu", "dy[1] = omega + 2.0 * mu")
    factor = _mutant(_ik.two_head_rhs, "- 2.0 * cL * mu * np.sinh(chi)", "- cL * mu * np.sinh(chi)")
    for wrong in (sign, factor):
        assert_formula_rejects(hand(wrong), ref, rtol=RTOL, floor=floor)
