"""dynamics.symbolic: generated kernels against independent computations.

References: sympy's own derivatives evaluated by ``lambdify`` (numpy, no code generation of ours), plain numpy
projected gradient descent, central differences (dynamics.testing), scipy's adaptive solver for the flow, and the
closed-form t-derivative of closedform.special's zeta for a registered special function."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.integrate
import sympy as sp

import dynamics
from dynamics import SaveAt
from dynamics.symbolic import SymbolicModel, numba_function
from dynamics.testing import assert_formula_close, assert_formula_rejects, assert_jacobian_close

# child processes import the repository's packages whatever the caller's PYTHONPATH
_ENV = dict(
    os.environ,
    PYTHONPATH=os.pathsep.join([str(pathlib.Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]),
)

x, y, z = sp.symbols("x y z", real=True)
a, b = sp.symbols("a b", real=True)
RISK = (x**2 - 1) ** 2 / 4 + a * y**2 / 2 + b * x * y * z + sp.exp(-(x**2)) * sp.erf(y) + sp.log(1 + z**2)


@pytest.fixture(scope="module")
def model():
    return SymbolicModel.from_risk(RISK, [x, y, z], [a, b])


def _points(n, rng):
    X = rng.uniform(-1.5, 1.5, (n, 3))
    P = np.column_stack([rng.uniform(0.5, 2, n), rng.uniform(-1, 1, n), rng.uniform(0.01, 0.2, n)])
    return X, P


def test_risk_gradient_hessian_match_sympy_lambdify(model):
    rng = np.random.default_rng(0)
    X, P = _points(1000, rng)
    args = (X[:, 0], X[:, 1], X[:, 2], P[:, 0], P[:, 1])
    v = [x, y, z]
    f = sp.lambdify([x, y, z, a, b], RISK, ["scipy", "numpy"])
    g = [sp.lambdify([x, y, z, a, b], sp.diff(RISK, s), ["scipy", "numpy"]) for s in v]
    h = [[sp.lambdify([x, y, z, a, b], sp.diff(RISK, s, t), ["scipy", "numpy"]) for t in v] for s in v]
    assert model.param_names == ("a", "b", "alpha")
    # 1e-13: same expressions, different operation order; every quantity is O(1) on the box
    assert_formula_close(model.risk(X, P), f(*args), rtol=1e-13)
    grad = np.column_stack([gi(*args) for gi in g])
    assert_formula_close(model.gradient(X, P), grad, rtol=1e-13)
    hess = np.stack([np.column_stack([np.broadcast_to(hij(*args), (1000,)) for hij in row]) for row in h], axis=1)
    assert_formula_close(model.hessian(X, P).reshape(1000, 9), hess.reshape(1000, 9), rtol=1e-13)
    # the same test rejects a gradient with one wrong sign
    wrong = grad.copy()
    wrong[:, 1] = -wrong[:, 1]
    assert_formula_rejects(wrong, model.gradient(X, P), rtol=1e-13)
    # the map and the flow are the gradient step and the negative gradient
    assert_formula_close(model.map(X, P), X - P[:, 2:3] * grad, rtol=1e-13)
    assert_formula_close(model.vector_field(X, P), -grad, rtol=1e-13)


def test_jacobians_match_central_differences(model):
    rng = np.random.default_rng(1)
    X, P = _points(20, rng)
    for xi, pi in zip(X, P):
        # third derivatives of the map/flow are O(10) on the box (quartic and Gaussian terms)
        assert_jacobian_close(model.jacobian_map(xi, pi), lambda u: model.map(u, pi), xi, third=50.0)
        assert_jacobian_close(model.jacobian_flow(xi, pi), lambda u: model.vector_field(u, pi), xi, third=50.0)


def test_projected_map_on_a_product_of_spheres_matches_numpy_pgd():
    """PGD on S^2 x S^1 for R = -(u.c)^2 - w0 u0 + w1 (a coupled quadratic) against numpy PGD."""
    u = sp.symbols("u0:3", real=True)
    w = sp.symbols("w0:2", real=True)
    c = sp.symbols("c0:3", real=True)
    R = -((sum(ui * ci for ui, ci in zip(u, c))) ** 2) - w[0] * u[0] + w[1] * u[2]
    m = SymbolicModel.from_risk(R, u + w, c, spheres=[u, w])
    rng = np.random.default_rng(2)
    cvec, alpha = rng.standard_normal(3), 0.05
    p = np.append(cvec, alpha)

    def numpy_pgd(s):
        U, W = s[:3], s[3:]
        gu = -2 * (U @ cvec) * cvec + np.array([-W[0], 0.0, W[1]])
        gw = np.array([-U[0], U[2]])
        U1 = U - alpha * (gu - (U @ gu) * U)
        W1 = W - alpha * (gw - (W @ gw) * W)
        return np.concatenate([U1 / np.linalg.norm(U1), W1 / np.linalg.norm(W1)])

    S = rng.standard_normal((1000, 5))
    S[:, :3] /= np.linalg.norm(S[:, :3], axis=1, keepdims=True)
    S[:, 3:] /= np.linalg.norm(S[:, 3:], axis=1, keepdims=True)
    ref = np.array([numpy_pgd(s) for s in S])
    assert_formula_close(m.map(S, p), ref, rtol=1e-13)  # same arithmetic up to order; O(1) entries
    # an engine run stays on the spheres and equals repeated single steps
    tr = m.iterate(S[:8], 50, params=p, saveat=SaveAt(final=True))
    end = tr.states()[:, -1]
    np.testing.assert_allclose(np.linalg.norm(end[:, :3], axis=1), 1.0, atol=1e-14)  # 50 roundings of a norm
    one = S[:8]
    for _ in range(50):
        one = m.map(one, p)
    np.testing.assert_array_equal(end, one)  # the engine calls the same compiled step: bit for bit


def test_flow_through_the_engine_matches_scipy(model):
    p = np.array([1.0, 0.3, 0.1])
    x0 = np.array([0.4, -0.3, 0.8])
    tr = model.integrate(
        x0, (0.0, 3.0), params=p, solver=dynamics.Dopri5(rtol=1e-11, atol=1e-13), saveat=SaveAt(final=True)
    )
    ref = scipy.integrate.solve_ivp(
        lambda t, s: model.vector_field(s, p), (0, 3.0), x0, method="DOP853", rtol=1e-12, atol=1e-14
    )
    # both solvers at <= 1e-11 relative local error over 3 time units of a contracting flow
    np.testing.assert_allclose(tr.states()[0, -1], ref.y[:, -1], rtol=0, atol=1e-9)


def test_order_params_give_the_same_derivatives_as_the_substituted_risk():
    k = sp.symbols("k0:3", real=True)
    q, r = sp.symbols("q r", real=True)
    R = sp.exp(-q) * r**2 + sp.erf(q * r)
    over = {q: k[0] * k[1], r: k[0] ** 2 + k[2]}
    m1 = SymbolicModel.from_risk(R, k, [], order_params=over)
    m2 = SymbolicModel.from_risk(R.xreplace(over), k, [])
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (1000, 3))
    p = np.array([0.1])
    for name in ("gradient", "hessian", "jacobian_map", "jacobian_flow"):
        A = getattr(m1, name)(X, p).reshape(1000, -1)
        B = getattr(m2, name)(X, p).reshape(1000, -1)
        assert_formula_close(A, B, rtol=1e-13, what=name)  # chain rule in the generated code vs direct derivative
    sym = m1.expression("gradient")
    assert sp.simplify(sym[0] - sp.diff(R.xreplace(over), k[0])) == 0


def test_registered_special_function_and_its_derivative_rules():
    from closedform import special

    def zeta_t(t, g):
        qq, rr = sp.sqrt(1 + 2 * g**2), sp.sqrt(1 + 4 * g**2)
        return 4 / (qq * sp.sqrt(sp.pi)) * sp.erf(t / (qq * rr)) * sp.exp(-((t / qq) ** 2))

    zeta = numba_function("zeta", special._zeta, (zeta_t, None))
    t, g = sp.symbols("t g", real=True)
    m = SymbolicModel(["t"], ["g"], risk=zeta(t, g) * t)
    rng = np.random.default_rng(4)
    T = rng.uniform(-3, 3, (1000, 1))
    G = rng.uniform(0.05, 2, (1000, 1))
    assert_formula_close(m.risk(T, G), special.zeta(T[:, 0], G[:, 0]) * T[:, 0], rtol=1e-14)
    # d/dt (t zeta) = zeta + t zeta_t with closedform.special's zeta_t (its own closed form)
    want = special.zeta(T[:, 0], G[:, 0]) + T[:, 0] * special.zeta_t(T[:, 0], G[:, 0])
    assert_formula_close(m.gradient(T, G)[:, 0], want, rtol=1e-13)
    with pytest.raises(ValueError, match="no derivative rule"):
        SymbolicModel(["g"], ["t"], risk=zeta(t, g))  # differentiating along g needs the missing rule
    with pytest.raises(ValueError, match="one rule"):
        numba_function("zeta", special._zeta, (zeta_t,))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"free symbols \['c'\]"):
        SymbolicModel.from_risk(x * sp.Symbol("c"), [x], [])
    with pytest.raises(ValueError, match="one expression per state variable"):
        SymbolicModel([x, y], [], map=[x])
    with pytest.raises(ValueError, match="spheres"):
        SymbolicModel.from_risk(x * y, [x, y], [], spheres=[[x]])
    with pytest.raises(ValueError, match="not a state variable"):
        SymbolicModel.from_risk(x * y, [x, y], [], spheres=[["x", "q"]])
    with pytest.raises(ValueError, match="share names"):
        SymbolicModel([x], [x], risk=x)
    m = SymbolicModel([x], [a], flow=[-a * x])
    with pytest.raises(ValueError, match="no step"):
        m.map([1.0], [1.0])
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 1\)"):
        m.vector_field([1.0, 2.0], [1.0])
    with pytest.raises(TypeError, match="impl must be a numba"):
        numba_function("f", np.exp, (None,))


def test_second_process_reuses_the_generated_module(model, tmp_path):
    """A second process finds the module by its content hash and never differentiates (no sympy derivation)."""
    code = textwrap.dedent(f"""
        import sympy as sp
        from dynamics.symbolic import SymbolicModel
        x, y, z, a, b = sp.symbols("x y z a b", real=True)
        R = {sp.srepr(RISK)!r}
        m = SymbolicModel.from_risk(sp.sympify(eval(R, sp.__dict__)), [x, y, z], [a, b])
        m.gradient([0.1, 0.2, 0.3], [1.0, 0.5, 0.1])
        print(m.path, hasattr(m, "_sym"))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_ENV)
    path, derived = out.stdout.split()
    assert path == str(model.path) and derived == "False"


def test_cached_builder_is_not_called_by_a_second_process():
    """SymbolicModel.cached finds a built model by the hash of its builder's source: no sympy expression at all."""
    from closedform import single_location as sl

    first = sl._symbolic_scalar_model()
    code = (
        "from closedform import single_location as sl\n"
        "m = sl._symbolic_scalar_model()\n"
        "print(hasattr(m, '_exprs'), m.path, ','.join(m.state_names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_ENV)
    assert out.stdout.split() == ["False", str(first.path), "kappa,nu,theta,eta,rho"]
