"""Value checks for the public functions of ``closedform`` that no other test checked (issue 19, item 3).

Each test compares a function with an independent computation: a reference value of the spec, finite differences of
another closed form, an explicit loop over the definition, or the documented layout of a packed vector. Functions that
other test files pin (scan_snap.theorem3_bounds, icl_regression.symmetric_two_head_loss, nearest_neighbor.
signed_permutations, icl_regression.phase3_heuristic_rate, nearest_neighbor.shifted_test_bound,
random_walk.output_direction_error) are not repeated here. The last test pins the conftest gpu-marker fix.

How the list was made: every name in ``__all__`` (or every public ``def``) of each public closedform module, minus the
names that appear in some ``tests/test_*.py``; ``test_every_public_function_is_named_by_a_test`` keeps it that way.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from closedform import group_sparse as gs
from closedform import icl_regression as icl
from closedform import nearest_neighbor as nn
from closedform import random_walk as rw
from closedform import scan_snap as ss
from closedform import single_location as sl

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------------------------------
# single_location


def test_eta_batch_sets_the_step_entry_row_by_row_and_broadcasts_with_the_starts():
    params = np.array([3.0, 0.5, 7.0])
    rows, x0, scale, unit = nn.eta_batch(params, 1, [0.1, 0.2, 0.4], np.array([1.0, 2.0]))
    np.testing.assert_array_equal(rows, [[3.0, 0.1, 7.0], [3.0, 0.2, 7.0], [3.0, 0.4, 7.0]])
    np.testing.assert_array_equal(x0, [[1.0, 2.0]] * 3)  # one start, repeated for the three step sizes
    assert scale == 1.0 and unit.startswith("step ")  # different etas: time is the step count
    rows, x0, scale, unit = nn.eta_batch(params, 1, 0.25, np.array([[0.0, 1.0], [5.0, 6.0]]))
    np.testing.assert_array_equal(rows, [[3.0, 0.25, 7.0]] * 2)
    assert scale == 0.25 and unit == "eta*step"  # one shared eta: time = eta * step
    same, x0, scale, unit = nn.eta_batch(params, 1, None, np.array([1.0, 2.0]))
    assert same is params and scale == 0.5 and unit == "eta*step"
    with pytest.raises(ValueError, match="eta"):
        nn.eta_batch(params, 1, [0.1, -0.2], np.array([1.0, 2.0]))


def test_manifold_vector_field_at_the_spec_reference_point():
    """Spec single_location.md Sec. 10.2, point P2 (on M, so dR/dkappa, dR/dnu are the R_M partials): the field is
    (-(1 - kappa^2) dR/dkappa, -(1 - nu^2) dR/dnu). The spec prints 10 significant digits: rel 1e-9."""
    task = sl.SingleLocationTask(d=400, L=10, gamma=math.sqrt(0.5), noise=0.0)
    field = sl.manifold_vector_field(task, 0.1, 0.9, 0.8)
    expected = [-(1 - 0.81) * 3.954417312e-02, -(1 - 0.64) * -9.267174468e-01]
    np.testing.assert_allclose(field, expected, rtol=1e-9)


def test_manifold_vector_field_is_the_projected_gradient_of_manifold_risk():
    """Central differences of the separate closed form manifold_risk (spec Sec. 5.1): error O(h^2 R''') ~ 1e-10 at
    h = 1e-5 plus rounding eps R / h ~ 1e-11; tolerance 1e-7 absolute."""
    task = sl.SingleLocationTask(d=50, L=5, gamma=1.0, noise=0.3)
    lam, h = 0.5, 1e-5
    for kappa, nu in [(0.2, 0.1), (-0.6, 0.5), (0.95, -0.3)]:
        dk = (sl.manifold_risk(task, lam, kappa + h, nu) - sl.manifold_risk(task, lam, kappa - h, nu)) / (2 * h)
        dv = (sl.manifold_risk(task, lam, kappa, nu + h) - sl.manifold_risk(task, lam, kappa, nu - h)) / (2 * h)
        field = sl.manifold_vector_field(task, lam, kappa, nu)
        np.testing.assert_allclose(field, [-(1 - kappa**2) * dk, -(1 - nu**2) * dv], atol=1e-7)


# ----------------------------------------------------------------------------------------------------------------
# special (mutation survivor, issue 19)


def test_owens_t_relative_accuracy_beyond_a_equal_one():
    """For a > 1 Owen's T uses the reflection identity (spec single_location.md Sec. 3.2); in the moderate tail its
    value is small, so the absolute 1e-15 of test_special.py cannot tell it from a 16-node rule on [0, a]
    (relative error 3.8e-9 at (h, a) = (5, 2): a surviving mutant). Reference: 40-digit mpmath quadrature of the
    definition; tolerance rtol 1e-13 (measured worst 2.4e-15)."""
    mpmath = pytest.importorskip("mpmath")
    from closedform import special

    mpmath.mp.dps = 40
    for a in (1.2, 1.5, 2.0, 3.0):
        for h in (2.0, 3.0, 5.0):
            ref = mpmath.quad(lambda x: mpmath.exp(-h * h * (1 + x * x) / 2) / (1 + x * x), [0, a]) / (2 * mpmath.pi)
            assert float(special.owens_t(h, a)) == pytest.approx(float(ref), rel=1e-13, abs=0)


# ----------------------------------------------------------------------------------------------------------------
# icl_regression


def test_m_matrix_is_half_the_hessian_of_approx_loss_in_mu_and_kernel_matrix_its_exp_part():
    """Spec icl_regression.md Sec. 4.4: the Hessian of F(omega, mu) (Eq. 4.1) in mu is 2 M(omega), and
    K = (M - omega omega^T) / C_L. F is quadratic in mu, so central second differences are exact up to rounding
    (eps F / h^2 ~ 1e-10 at h = 1e-3): tolerance 1e-7."""
    task = icl.ICLRegressionTask(d=5, L=40, sigma2=0.1)
    omega = np.array([0.3, -0.2, 0.05])
    mu = np.array([0.4, 0.1, -0.7])
    H, h = omega.size, 1e-3
    hess = np.empty((H, H))
    e = np.eye(H) * h
    for i in range(H):
        for j in range(H):
            hess[i, j] = (
                float(icl.approx_loss(task, omega, mu + e[i] + e[j]))
                - float(icl.approx_loss(task, omega, mu + e[i] - e[j]))
                - float(icl.approx_loss(task, omega, mu - e[i] + e[j]))
                + float(icl.approx_loss(task, omega, mu - e[i] - e[j]))
            ) / (4 * h * h)
    M = icl.m_matrix(task, omega)
    np.testing.assert_allclose(2 * M, hess, atol=1e-7)
    K = icl.kernel_matrix(task, omega)
    cL = (1 + 0.1) / 40
    np.testing.assert_allclose(K, (hess / 2 - np.outer(omega, omega)) / cL, atol=1e-7 / cL)
    # and one entry by hand: K_12 = exp(d omega_1 omega_2) = exp(5 * 0.3 * -0.2) = exp(-0.3)
    assert K[0, 1] == pytest.approx(math.exp(-0.3), rel=1e-15)


# ----------------------------------------------------------------------------------------------------------------
# scan_snap


def _classes():
    # K = 2 classes over Lc = 6 tokens; distinct tokens {0, 1} (class 0) and {3, 4} (class 1); common {2, 5}.
    P = np.array([[0.4, 0.2, 0.2, 0.0, 0.0, 0.2], [0.0, 0.0, 0.3, 0.3, 0.2, 0.2]])
    return ss.SequenceClasses(M=4, P=P), P


def test_attention_maps_unit_attention_and_distinct_entropy_by_hand():
    """Spec scan_snap.md Sec. 2.1 (Eq. 5), Lemma 2 and Sec. 4.6, evaluated with explicit loops."""
    classes, P = _classes()
    Z = np.array([[0.3, -1.0, 0.5, 2.0, 0.0, -0.4]])
    c = np.zeros((2, 6))
    for n in range(2):
        weights = [P[n, ell] * math.exp(Z[0, ell]) for ell in range(6)]
        c[n] = np.array(weights) / sum(weights)
    np.testing.assert_allclose(ss.attention_maps(classes, Z), c, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(ss.unit_attention(classes, Z), c / np.sqrt((c**2).sum(1, keepdims=True)), rtol=1e-14)
    H = []
    for n, dt in ((0, [0, 1]), (1, [3, 4])):
        p = c[n, dt] / c[n, dt].sum()
        H.append(-sum(x * math.log(x) for x in p))
    np.testing.assert_allclose(ss.distinct_entropy(classes, Z), H, rtol=1e-13)


def test_dominant_token_is_the_distinct_token_with_the_largest_initial_attention():
    classes, _ = _classes()
    assert ss.dominant_token(classes, 0) == 0  # P 0.4 > 0.2 at Z = 0
    assert ss.dominant_token(classes, 1) == 3  # 0.3 > 0.2
    Z0 = np.zeros((1, 6))
    Z0[0, 1] = 1.0  # 0.2 e = 0.544 > 0.4: token 1 now dominates class 0
    assert ss.dominant_token(classes, 0, Z0) == 1
    single = ss.SequenceClasses(M=2, P=np.array([[0.5, 0.5], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="no distinct token"):
        ss.dominant_token(single, 0)


# ----------------------------------------------------------------------------------------------------------------
# random_walk


def test_optimal_accuracy_is_max_p_one_minus_p():
    assert rw.optimal_accuracy(0.3) == pytest.approx(0.7, rel=1e-15)
    assert rw.optimal_accuracy(0.8) == 0.8 and rw.optimal_accuracy(0.5) == 0.5
    with pytest.raises(ValueError, match="p"):
        rw.optimal_accuracy(1.5)


def test_attention_stats_against_loops_and_an_expanded_sample():
    """Weighted statistics with integer weights equal the plain statistics of the sample with each row repeated
    weight times; the q-quantile is the inverted-CDF quantile (numpy method 'inverted_cdf')."""
    rng = np.random.default_rng(0)
    S = rng.dirichlet(np.ones(5), size=7)  # 7 walks, N = 5 positions
    counts = np.array([1, 3, 2, 1, 4, 1, 2])
    out = rw.attention_stats(S, weights=counts / counts.sum(), q=0.2)
    big = np.repeat(S, counts, axis=0)
    assert out["attn_parent"] == pytest.approx(big[:, 3].mean(), rel=1e-14)
    assert out["attn_blank"] == pytest.approx(big[:, 4].mean(), rel=1e-14)
    assert out["attn_max_other"] == pytest.approx(np.mean([max(r[0], r[1], r[2], r[4]) for r in big]), rel=1e-14)
    assert out["attn_parent_q"] == np.quantile(big[:, 3], 0.2, method="inverted_cdf")


def test_pack_state_and_map_params_layouts():
    spec = rw.RandomWalkTask(K=3, N=4, M=20, p=0.7)
    V = np.arange(9.0).reshape(3, 3)
    a, c = np.array([10.0, 11.0, 12.0]), np.array([20.0, 21.0, 22.0, 23.0])
    x = rw.pack_state(spec, V, a, c)
    np.testing.assert_array_equal(x, np.r_[np.arange(9.0), 10, 11, 12, 20, 21, 22, 23])  # K^2 + K + N
    V2, a2, c2 = rw.unpack_state(spec, x)
    np.testing.assert_array_equal(V2, V) and np.testing.assert_array_equal(c2, c)
    sample = rw.sample_walks(spec, 5, rng=1)
    params = rw.map_params(spec, sample)
    np.testing.assert_array_equal(params, [spec.rho, spec.eps, spec.eta])
    states, weights, dims = rw._kernel_args(spec, sample)
    np.testing.assert_array_equal(states, np.asarray(sample.states, dtype=np.float64).ravel())
    np.testing.assert_array_equal(weights, sample.weights)
    np.testing.assert_array_equal(dims, [3, 4])


# ----------------------------------------------------------------------------------------------------------------
# group_sparse and nearest_neighbor


def test_group_sparse_attention_diagnostics_by_loops():
    spec = gs.GroupSparseTask(d=3, D=4, jstar=2)
    rng = np.random.default_rng(2)
    S = rng.dirichlet(np.ones(4), size=(25, 4)).transpose(0, 2, 1)  # columns (queries) sum to 1 over keys
    out = gs.attention_diagnostics(spec, S, quantile=0.1)
    row = [[S[k, 1, j] for j in range(4)] for k in range(25)]  # key j* = 2 (1-based) -> index 1
    assert out["attn_jstar"] == pytest.approx(sum(map(sum, row)) / 100, rel=1e-14)
    assert out["attn_jstar_q"] == pytest.approx(np.quantile([min(r) for r in row], 0.1), rel=1e-14)


def test_group_sparse_and_nearest_neighbor_pack_params_layouts():
    spec = gs.GroupSparseTask(d=3, D=4, jstar=2, eta=0.25)
    rs = gs.population_sample(spec, 6, rng=0)
    p = gs.pack_params(spec, rs)
    np.testing.assert_array_equal(p, [0.25, 3])  # [eta, d]
    a, gram, index = gs._kernel_args(spec, rs)
    np.testing.assert_array_equal(a, rs.a)
    np.testing.assert_array_equal(gram, rs.gram)
    np.testing.assert_array_equal(index, [1])  # j* - 1
    nspec = nn.NearestNeighborTask(d=3, N=5, sigma=1.0, eta=0.5)
    prompts = nn.sample_prompts(nspec, 4, rng=0)
    q = nn.pack_params(nspec, prompts)
    np.testing.assert_array_equal(q, [0.5, 3])  # [eta, d]
    istar, c = nn._kernel_args(nspec, prompts)
    np.testing.assert_array_equal(istar, np.argmax(prompts.X @ prompts.xq[:, :, None], axis=1)[:, 0])
    np.testing.assert_array_equal(c, np.einsum("bnd,bd->bn", prompts.X, prompts.xq))


# ----------------------------------------------------------------------------------------------------------------
# dynamics.saveat (survivors of the mutation run, issue 19): values from the module docstring's definitions


def test_saveat_validation_names_the_request():
    from dynamics.saveat import SaveAt

    for kwargs, name in (
        ({"ts": [0.0, float("nan")]}, "SaveAt.ts"),
        ({"ts": []}, "SaveAt.ts"),
        ({"every": 0}, "SaveAt.every"),
        ({"log": 1}, "SaveAt.log"),
        ({"n": 1}, "SaveAt.n"),
    ):
        with pytest.raises(ValueError, match=name):
            SaveAt(**kwargs)
    with pytest.raises(ValueError, match=r"SaveAt.steps must lie in \[0, n_steps=5\]"):
        SaveAt(steps=[0, 6]).resolve_steps(5)


def test_saveat_edge_grids():
    from dynamics.saveat import SaveAt

    # log: the start and the end included (log=2 does not include the end, see the issue-19 report)
    np.testing.assert_array_equal(SaveAt(log=3).resolve_steps(100), [0, 1, 100])
    np.testing.assert_array_equal(SaveAt(log=5).resolve_steps(1), [0, 1])
    np.testing.assert_array_equal(SaveAt(log=5).resolve_steps(0), [0])
    # final: the end only, for maps (int64 steps) and ODEs
    steps = SaveAt(final=True).resolve_steps(7)
    assert steps.dtype == np.int64 and steps.tolist() == [7]
    np.testing.assert_array_equal(SaveAt(final=True).resolve_times(0.0, 2.5), [2.5])
    # ts may overshoot the span by 1e-12 relative (rounding of a computed end time) and is clipped; more is refused
    np.testing.assert_array_equal(SaveAt(ts=[1000.0 + 5e-10]).resolve_times(0.0, 1000.0), [1000.0])
    with pytest.raises(ValueError, match="SaveAt.ts must lie in t_span"):
        SaveAt(ts=[1000.0 + 2e-9]).resolve_times(0.0, 1000.0)


# ----------------------------------------------------------------------------------------------------------------
# the list stays complete


def _public_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [e.value for e in node.value.elts if e.value in defs]
    return sorted(defs)


def test_every_public_function_is_named_by_a_test():
    texts = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    unnamed = [
        f"{path.stem}.{name}"
        for path in sorted((ROOT / "closedform").glob("[!_]*.py"))
        for name in _public_functions(path)
        if not re.search(rf"\b{name}\b", texts)
    ]
    assert not unnamed, f"public closedform functions no test names: {unnamed}"


# ----------------------------------------------------------------------------------------------------------------
# conftest: the gpu marker, not a parameter id, decides (issue 19)


def test_gpu_skip_follows_the_marker_not_a_parameter_id(monkeypatch):
    from tests import conftest

    class Item:
        def __init__(self, keywords, marked):
            self.keywords, self.marked, self.added = keywords, marked, []

        def get_closest_marker(self, name):
            return SimpleNamespace(name=name) if (self.marked and name == "gpu") else None

        def add_marker(self, marker):
            self.added.append(marker)

    monkeypatch.setattr(conftest, "_cuda_available", lambda: False)
    by_param = Item({"test_x[gpu]": 1, "gpu": 1}, marked=False)  # "gpu" as a parameter id
    by_marker = Item({"test_y": 1, "gpu": 1}, marked=True)
    conftest.pytest_collection_modifyitems(None, [by_param, by_marker])
    assert by_param.added == [] and len(by_marker.added) == 1
