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


def _mutant(fn, old, new):
    """A copy of the (numba) function ``fn`` with ``old`` replaced by ``new`` in its source, as plain Python."""
    src = inspect.getsource(fn.py_func)
    assert src.count(old) == 1, old
    src = "\n".join(line for line in src.replace(old, new).splitlines() if not line.startswith("@"))
    namespace = dict(fn.py_func.__globals__)
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
    sign = _mutant(_k._partials, "r_theta = (-2.0 * g * gamma * s * eta", "r_theta = (2.0 * g * gamma * s * eta")
    factor = _mutant(_k._partials, "2.0 * (L - 1.0) * (B2 + (L - 2.0) * C * C) * rho",
                     "2.0 * L * (B2 + (L - 2.0) * C * C) * rho")
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
    sign = _mutant(_k.five_update, "k0, k1, k2, k3 = 1.0 + alpha * kgk, -alpha * rr",
                   "k0, k1, k2, k3 = 1.0 + alpha * kgk, alpha * rr")
    factor = _mutant(_k.five_update, "v0, v1, v2, v3 = -alpha * rr, 1.0 + alpha * vgv",
                     "v0, v1, v2, v3 = -alpha * rr, 1.0 + 2.0 * alpha * vgv")
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
    H = np.array([[8 * task.gamma ** 2 * c ** 2 / (np.pi * r), -4 * task.gamma ** 2 * c / np.sqrt(np.pi)],
                  [-4 * task.gamma ** 2 * c / np.sqrt(np.pi), 0.0]])
    np.testing.assert_allclose(J, np.eye(2) - alpha * H, rtol=0, atol=1e-15)  # entries O(1): rounding only
    ev = np.sort(np.linalg.eigvals(J).real)
    np.testing.assert_allclose(ev, [0.986928, 1.003086], atol=5e-7)  # 6 decimals quoted
    saddle = sl.fixed_points(task, lam, alpha, n_starts=0)[0]
    np.testing.assert_allclose(sorted(saddle.manifold_map_eigenvalues), ev, rtol=0, atol=1e-15)
