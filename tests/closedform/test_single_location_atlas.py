"""The attractor atlas of single-location PGD (issue 15): every fixed point of the five-scalar map, named, checked
against brute-force d-dimensional PGD; end-state classification; basin fractions against independent brute-force
samples; batched configurations (issue 14 item 5).

References are independent of the code under test: the swap point's risk from the spec Sec. 4.2 formula written out
here with scipy; fixed points and basins by ``full_pgd`` (d-dimensional vectors, spec Sec. 6.1) from vectors
drawn uniformly on the sphere in R^d (not from the five-scalar law of Sec. 6.5).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from closedform import single_location as sl
from dynamics import SaveAt

# These tests run the maps for finite horizons on purpose (reference trajectories, brute-force comparisons); the
# default warning on runs that end unconverged (docs/guides/engine.md, convergence diagnostics) is tested in
# tests/closedform/test_convergence_warnings.py.
pytestmark = pytest.mark.filterwarnings("ignore::dynamics.convergence.UnconvergedWarning")

TASK = sl.SingleLocationTask(d=400, L=10)
ALPHA = 4e-3  # the paper's step size at constant lambda (spec Sec. 8.3, 8.6(b))


def _swap_excess_risk(task, lam):
    """Spec Sec. 4.2 at (0, 0, 1, 1, 0): gamma^2 - 2 g gamma s phi_1(0, g) + (s^2 + gamma^2) zeta(0, g) + (L-1) zeta0,
    with phi_1(0, g) = (2/sqrt(pi))/q and zeta(0, g) = (2/pi) arcsin(2 g^2/(1 + 2 g^2)) (spec Sec. 3.1-3.2)."""
    g, s, gam = lam * task.gamma, task.s, task.gamma
    q = math.sqrt(1 + 2 * g * g)
    z = lambda x: 2 / math.pi * math.asin(2 * x * x / (1 + 2 * x * x))  # noqa: E731
    return gam**2 - 2 * g * gam * s * (2 / math.sqrt(math.pi)) / q + (s * s + gam**2) * z(g) + (task.L - 1) * z(lam)


def test_swap_point_is_listed_with_its_risk_at_lambda_005():
    fps = sl.fixed_points(TASK, 0.05, ALPHA)
    swaps = [fp for fp in fps if fp.kind == "swap"]
    assert {fp.state for fp in swaps} == {(0.0, 0.0, 1.0, 1.0, 0.0), (0.0, 0.0, -1.0, -1.0, 0.0)}
    for fp in swaps:
        assert abs(fp.excess_risk - _swap_excess_risk(TASK, 0.05)) < 1e-12  # closed form vs closed form: rounding
        assert round(fp.excess_risk, 5) == 0.04993  # issue 15
        assert fp.attracting and fp.stability == "minimum"
    assert not any(fp.kind == "spurious" for fp in fps)  # S exists only for lambda >= 0.06279 (spec Sec. 7.4)
    kinds = {fp.kind for fp in fps}
    assert {"oracle", "anti_oracle", "saddle", "swap", "anti_swap", "collinear"} <= kinds
    # orbits: images under (k, v) -> (-k, -v) and v* -> -v* are fixed points with the same risk
    for fp in fps:
        for y in fp.orbit:
            twin = [f for f in fps if max(abs(a - b) for a, b in zip(f.state, y)) < 1e-6]
            assert len(twin) == 1 and abs(twin[0].risk - fp.risk) < 1e-10 * max(1.0, fp.risk)


@pytest.mark.parametrize("lam", [0.05, 0.1])
def test_fixed_points_are_fixed_under_brute_force_pgd(lam):
    """Each listed point, realised as vectors in R^400 with a random frame, does not move under 5 brute-force PGD
    steps (spec Sec. 6.1); a perturbed point does (negative control). 5 steps: the largest map eigenvalue (3.5, at
    the swap point for lambda = 0.1) amplifies 1e-16 rounding to < 1e-13."""
    fps = sl.fixed_points(TASK, lam, ALPHA)
    rng = np.random.default_rng(7)
    states = np.array([fp.state for fp in fps])
    k, v, ks, vs = sl.vectors_from_state(TASK, states, rng)
    # vectors_from_state gives each state its own frame; rotate all into the frame of state 0's (k*, v*)
    frames = []
    for i in range(len(fps)):
        Q = np.linalg.qr(np.column_stack([ks[i], vs[i], rng.standard_normal((TASK.d, TASK.d - 2))]))[0]
        Q[:, :2] *= np.sign(np.sum(Q[:, :2] * np.column_stack([ks[i], vs[i]]), axis=0))
        frames.append(Q)
    Q0 = frames[0]
    k = np.array([Q0 @ (frames[i].T @ k[i]) for i in range(len(fps))])
    v = np.array([Q0 @ (frames[i].T @ v[i]) for i in range(len(fps))])
    tr = sl.full_pgd(TASK, k, v, ks[0], vs[0], alpha=ALPHA, n_steps=5, lam=lam, save_every=5)
    end = tr.states()[:, -1, :5]
    np.testing.assert_allclose(end, states, rtol=0, atol=1e-9)  # rounding of the frames ~1e-14, amplified < 1e3
    off = states + 0.01 * np.array([0.0, 0.0, 1.0, 0.0, 0.0])  # move theta: not a fixed point any more
    ok = np.all(np.abs(off) <= 1, axis=1) & (np.linalg.eigvalsh(sl._gram(*off.T))[:, 0] > 1e-9)
    moved = sl.map(TASK, off[ok], alpha=ALPHA, n_steps=5, lam=lam, saveat=SaveAt(final=True)).states()[:, -1, :5]
    assert np.all(np.max(np.abs(moved - off[ok]), axis=1) > 1e-8)


@pytest.mark.parametrize("lam", [0.05, 0.1])
def test_root_search_with_more_starts_finds_nothing_new(lam):
    """Completeness (issue 15): 4 000 fresh Levenberg-Marquardt starts (another seed) reach only listed points."""
    listed = np.array([fp.state for fp in sl.fixed_points(TASK, lam)])
    found, counts = sl.critical_point_search(TASK, lam, n_starts=4000, rng=12345)
    # most starts end at an off-M root (measured ~75 %; the rest reach M, whose five points are exact)
    assert counts.sum() >= 2000
    for x in found:
        assert np.min(np.max(np.abs(listed - x), axis=1)) < 1e-6, x


def test_classify_names_sphere_end_states_and_unconverged():
    task = sl.SingleLocationTask(d=400, L=10)
    pts = sl.fixed_points(task, 0.05, ALPHA)
    x0 = sl.sample_initial_state(task, 400, 3)
    X, steps = sl.run_to_fixed_point(task, x0, alpha=ALPHA, lam=0.05, points=pts)
    names = sl.classify(task, 0.05, X, points=pts)
    assert set(names) <= {"oracle", "swap"} and np.mean(names != "unconverged") == 1.0
    early = sl.classify(task, 0.05, x0, points=pts)  # random starts are at no fixed point
    assert np.mean(early == "unconverged") > 0.99
    assert sl.classify(task, 0.05, np.array(pts[0].state), points=pts)[0] == "saddle"
    with pytest.raises(ValueError, match="states"):
        sl.classify(task, 0.05, np.zeros((3, 4)))


@pytest.mark.slow
def test_classify_names_999_per_mille_of_1e5_sphere_starts():
    """Issue 15 'done when': lambda = 0.05, d = 400, L = 10, 10^5 sphere starts, >= 99.9 % named."""
    b = sl.basins(TASK, 0.05, 100_000, alpha=ALPHA, rng=15, stop_tol=1e-3)
    named = sum(c for k, c in zip(b.kinds, b.counts) if k != "unconverged")
    assert named / b.n >= 0.999


def _sphere_vectors(d, n, rng):
    k = rng.standard_normal((n, d))
    v = rng.standard_normal((n, d))
    return k / np.linalg.norm(k, axis=1, keepdims=True), v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("lam", "d"),
    [pytest.param(0.05, 400, marks=pytest.mark.slow), pytest.param(0.1, 400, marks=pytest.mark.slow), (0.2, 80)],
)
def test_basin_fractions_match_brute_force_pgd(lam, d):
    """Basin fractions from the five-scalar atlas (2 000 starts) against brute-force d-dimensional PGD from 150
    independent uniform vectors; two-sample binomial z-test at 5 SE per kind (false alarm < 6e-7 per kind)."""
    task = sl.SingleLocationTask(d=d, L=10)
    pts = sl.fixed_points(task, lam, ALPHA)
    b = sl.basins(task, lam, 2000, alpha=ALPHA, rng=1, points=pts)
    rng = np.random.default_rng(99)
    k, v = _sphere_vectors(d, 150, rng)
    ks, vs = np.eye(d)[0], np.eye(d)[1]
    tr = sl.full_pgd(task, k, v, ks, vs, alpha=ALPHA, n_steps=10_000, lam=lam, save_every=10_000)
    names = sl.classify(task, lam, tr.states()[:, -1, :5], points=pts)
    for kind in set(b.kinds) | set(names):
        p1 = dict(zip(b.kinds, b.fractions)).get(kind, 0.0)
        p2 = float(np.mean(names == kind))
        pool = (p1 * b.n + p2 * names.size) / (b.n + names.size)
        se = math.sqrt(max(pool * (1 - pool), 1e-12) * (1 / b.n + 1 / names.size))
        assert abs(p1 - p2) < 5 * se, (kind, p1, p2, se)


def test_batched_pgd_equals_per_configuration_calls():
    """Issue 14 item 5: lam (n, 1), alpha (n,), d (n,) per trajectory give bit-identical runs to separate calls."""
    x0 = sl.sample_initial_state(TASK, 4, 5)
    lams = np.array([[0.05], [0.1], [0.9], [0.3]])
    alphas = np.array([4e-3, 4e-3, 1e-3, 2e-3])
    ds = np.array([400, 80, 2000, 20])
    tr = sl.map(TASK, x0, alpha=alphas, n_steps=200, lam=lams, d=ds, saveat=SaveAt(every=50))
    for i in range(4):
        one = sl.map(
            sl.SingleLocationTask(d=int(ds[i]), L=10),
            x0[i],
            alpha=float(alphas[i]),
            n_steps=200,
            lam=float(lams[i, 0]),
            saveat=SaveAt(every=50),
        )
        np.testing.assert_array_equal(tr.states()[i], one.states()[0])
        np.testing.assert_array_equal(tr.risk.values[i], one.risk.values[0])
    # one state broadcast against per-trajectory lambdas; a shared 1-D schedule still works
    tb = sl.map(TASK, x0[0], alpha=4e-3, n_steps=10, lam=lams, saveat=SaveAt(final=True))
    assert tb.sizes["trajectory"] == 4
    sched = sl.map(TASK, x0, alpha=4e-3, n_steps=3, lam=np.array([0.1, 0.09, 0.08]), saveat=SaveAt(final=True))
    assert sched.sizes["trajectory"] == 4
    with pytest.raises(ValueError, match="broadcast"):
        sl.map(TASK, x0, alpha=np.full(3, 1e-3), n_steps=3, lam=0.1)
    with pytest.raises(ValueError, match="alpha"):
        sl.map(TASK, x0, alpha=np.array([1e-3, -1, 1e-3, 1e-3]), n_steps=3, lam=0.1)
    with pytest.raises(ValueError, match="d must be"):
        sl.map(TASK, x0, alpha=1e-3, n_steps=3, lam=0.1, d=np.array([400, 3, 400, 400]))


@pytest.mark.parametrize("name", ["single_location.continuation", "single_location.atlas", "icl_regression.atlas"])
def test_atlas_figures_build_at_tiny_preset(name):
    from figures import _atlas  # noqa: F401  (registers the three figures)
    from figures import registry
    from figures._style import style_context
    from figures.presets import RunConfig

    spec = registry.REGISTRY.get(name)
    cfg = RunConfig(figure=spec.name, preset="tiny", seed=0, device="cpu", params=spec.params["tiny"])
    ds = spec.data(cfg)
    with style_context():
        assert registry.render(spec, ds).get_axes()
    failed = [c for c in spec.checks(ds) if not c.passed]
    assert not failed, failed
    assert spec.params["quick"] and spec.params["paper"]


@pytest.mark.parametrize(("lam", "d"), [pytest.param(0.1, 400, marks=pytest.mark.slow), (0.03, 80)])
def test_edge_certificates_are_confirmed_by_longer_runs(lam, d):
    """States named through an invariant edge (classify(basin=True), not yet within 1e-3 of the fixed point) reach the
    named attractor when run on: 60 of them, 2 x 10^5 more steps (the slowest multiplier, 0.99996 at the oracle for
    lambda = 0.1, shrinks a 0.05 offset below 1e-3 in 1e5 steps)."""
    task = sl.SingleLocationTask(d=d, L=10)
    pts = sl.fixed_points(task, lam, ALPHA)
    x0 = sl.sample_initial_state(task, 400, 11)
    X, _ = sl.run_to_fixed_point(task, x0, alpha=ALPHA, lam=lam, points=pts, stop_tol=1e-3, certify=True)
    plain = sl.classify(task, lam, X, points=pts)
    cert = sl.classify(task, lam, X, points=pts, basin=True)
    idx = np.nonzero((plain == "unconverged") & (cert != "unconverged"))[0][:60]
    assert idx.size >= 20
    end = sl.map(task, X[idx], alpha=ALPHA, n_steps=200_000, lam=lam, saveat=SaveAt(final=True)).states()[:, -1, :5]
    np.testing.assert_array_equal(sl.classify(task, lam, end, points=pts), cert[idx])
