"""Valid extremes and accepted-invalid inputs found by the outside sweep: each is either computed (finite and right,
checked against an independent limit) or refused with a ValueError naming the parameter and its valid range; a NaN
that appears mid-run is the engine's DivergenceError naming the step; huge sizes are refused against the memory
available (with an override) before anything is allocated."""

from __future__ import annotations

import math
import pickle

import numba
import numpy as np
import pytest

import dynamics
from closedform import icl_regression as icl
from closedform import scan_snap as ss
from closedform import single_location as sl
from dynamics.validation import MEMORY_LIMIT_ENV, check_allocation

# ----------------------------------------------------------------------------------------------------------------
# single_location: lambda at the ends of float64


@pytest.fixture(scope="module")
def sl_task():
    return sl.SingleLocationTask(d=8, L=4, noise=0.1)


def _lam_range(task):
    """The documented range: lambda, lambda s and lambda gamma in [1e-100, 1e100]."""
    return 1e-100 / min(1.0, task.s, task.gamma), 1e100 / max(1.0, task.s, task.gamma)


@pytest.mark.parametrize("lam", [1e308, 1e200, 5e-324, 1e-300])
@pytest.mark.parametrize("fn", ["risk", "excess_risk", "risk_partials", "manifold_risk", "manifold_vector_field"])
def test_single_location_refuses_lambda_out_of_range(sl_task, fn, lam):
    with pytest.raises(ValueError, match=r"lam must lie in \[1\.41e-100, 5e\+99\]"):
        getattr(sl, fn)(sl_task, lam, 0.3, 0.4)


@pytest.mark.parametrize("lam", [1e308, 5e-324])
def test_oracle_risk_and_spurious_point_refuse_lambda_out_of_range(sl_task, lam):
    with pytest.raises(ValueError, match="lam must lie in"):
        sl.oracle_risk(sl_task, lam)
    with pytest.raises(ValueError, match="lam must lie in"):  # was ZeroDivisionError (zeta(0, g) underflows to 0)
        sl.spurious_point(sl_task, lam)


@pytest.mark.parametrize("task_kw", [dict(d=8, L=4, noise=0.1), dict(d=4, L=3, gamma=1e-3), dict(d=10**6, L=2)])
def test_single_location_risk_at_the_range_ends_equals_its_limits(task_kw):
    """On the manifold (theta = eta = rho = 0) the lambda -> infinity limit is, independently of the code's special
    functions, eps^2 + (L-1) + gamma^2 [2 - 2 nu erf(s kappa / (sqrt2 gamma))] (erf(lambda x) -> sign x, so zeta ->
    1 and c -> s / (sqrt2 gamma)); the lambda -> 0 limit is eps^2 + gamma^2 (erf(lambda x) -> 0). At the ends of the
    range the differences are O(1/lambda) and O(lambda) ~ 1e-100: only float64 rounding of a sum of O(1) terms is
    left, hence the relative tolerance 1e-12."""
    task = sl.SingleLocationTask(**task_kw)
    lo, hi = _lam_range(task)
    kappa, nu = 0.3, 0.4
    g2 = task.gamma**2
    at_inf = task.eps**2 + (task.L - 1) + g2 * (2.0 - 2.0 * nu * math.erf(task.s * kappa / (math.sqrt(2) * task.gamma)))
    at_zero = task.eps**2 + g2
    for fn in (sl.risk, sl.manifold_risk):
        assert float(fn(task, hi, kappa, nu)) == pytest.approx(at_inf, rel=1e-12)
        assert float(fn(task, lo, kappa, nu)) == pytest.approx(at_zero, rel=1e-12)
    assert np.all(np.isfinite(sl.risk_partials(task, [lo, hi], kappa, nu, 0.2, 0.1, 0.05)))


def test_spurious_point_at_small_lambda_matches_its_asymptote(sl_task):
    """theta_S = gamma g phi_1(0, g) / (s zeta(0, g)) with phi_1(0, g) -> 2/sqrt(pi), zeta(0, g) = (4/pi) g^2 (1 +
    O(g^2)): theta_S -> sqrt(pi) / (2 s lambda). At lambda = 1e-100/s the O(g^2) correction is 1e-200, so the
    tolerance (1e-12 relative) covers only rounding."""
    lo, _ = _lam_range(sl_task)
    p = sl.spurious_point(sl_task, lo)
    assert p.theta_S == pytest.approx(math.sqrt(math.pi) / (2 * sl_task.s * lo), rel=1e-12)
    assert not p.exists and math.isfinite(p.excess_risk)


# ----------------------------------------------------------------------------------------------------------------
# containers: fields consistent with each other


def test_icl_prompts_refuse_inconsistent_shapes():
    pr = icl.sample_prompts(icl.ICLRegressionTask(d=3, L=4, sigma2=0.1), 5, rng=0)
    for bad in (
        dict(X=pr.X[..., :2]),
        dict(y=pr.y[:3]),
        dict(xq=pr.xq[:, :2]),
        dict(yq=pr.yq[:4]),
        dict(beta=pr.beta[:, :2]),
    ):
        with pytest.raises(ValueError, match=r"X, y, xq, yq and beta must have shapes \(N, L, d\)"):
            icl.Prompts(**{**pr._asdict(), **bad})
    same = icl.Prompts(**pr._asdict())
    assert pickle.loads(pickle.dumps(same))._asdict().keys() == pr._asdict().keys()
    X, y, xq, yq, beta = same  # still a tuple
    assert X is pr.X and beta is pr.beta


# ----------------------------------------------------------------------------------------------------------------
# NaN mid-run: the engine's divergence error naming the step


def test_scan_snap_map_overflowing_diagnostics_raise_divergence_naming_the_step():
    """eta = 1e308 with momentum: the state stays finite for a few steps while the logits overflow the diagnostics
    (gamma_hat first, at step 3); that must be an error naming the step, not a NaN in the result."""
    task = ss.ScanSnapTask(classes=ss.SequenceClasses.syn_small(), eta_Y=1.0, eta_Z=1.0)
    with pytest.raises(dynamics.DivergenceError, match="step 3") as info, np.errstate(over="ignore", invalid="ignore"):
        ss.map(task, 4, eta_Y=1e308, eta_Z=1e308, momentum=0.9)
    assert info.value.step == 3 and info.value.trajectory == 0 and info.value.variable == "gamma_hat"
    with pytest.raises(ValueError, match="momentum must be finite"):
        ss.map(task, 4, momentum=math.nan)


@numba.njit(cache=False)
def _linear_rhs(t, y, p, dy):
    for i in range(y.shape[0]):
        dy[i] = -p[0] * y[i]


@pytest.mark.parametrize("solver", [dynamics.Dopri5, dynamics.Tsit5])
@pytest.mark.parametrize("rate", [-1e308, 1e308, -1e200])
def test_adaptive_solver_with_overflowing_field_scale_raises_divergence(solver, rate):
    """|f| ~ 1e308 |y|: the initial-step estimate divided by an overflowed error norm (ZeroDivisionError); now the
    step size underflows at once and the engine says so, naming the trajectory and the time."""
    with pytest.raises(dynamics.DivergenceError, match="step size underflow: trajectory 0, time 0"):
        dynamics.integrate(_linear_rhs, np.ones(2), (0.0, 1.0), params=np.array([rate]), solver=solver())


def test_composite_flow_default_start_on_a_single_common_token():
    """syn(2, 2, num_common=1) with the default Z0: finite, and the attention c of every class a law on the tokens
    (row sums 1 to rounding: a softmax of Lc = 41 terms, 1e-12)."""
    task = ss.ScanSnapTask(classes=ss.SequenceClasses.syn(2, 2, num_common=1), eta_Y=1.0, eta_Z=1.0)
    tr = ss.composite_flow(task, (0.0, 1.0), saveat=dynamics.SaveAt(n=5))
    for name in ("z", "c", "H"):
        assert np.all(np.isfinite(tr[name].values)), name
    np.testing.assert_allclose(tr.c.sum("token").values, 1.0, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------------------------------------------
# sizes refused against the memory available


def test_huge_class_table_refused_naming_the_sizes():
    with pytest.raises(ValueError, match=r"num_common.* too large: .*TiB") as info:
        ss.SequenceClasses.syn(2, 2, num_common=10**12)
    assert MEMORY_LIMIT_ENV in str(info.value)  # the override is named


def test_samplers_refuse_huge_draws():
    with pytest.raises(ValueError, match=r"^n too large: the prompts"):
        icl.sample_prompts(icl.ICLRegressionTask(d=10**4, L=10**4, sigma2=0.1), 10**5, rng=0)
    task = sl.SingleLocationTask(d=10**5, L=10**4)
    k, v = np.zeros(10**5), np.zeros(10**5)
    k[0] = v[1] = 1.0
    with pytest.raises(ValueError, match=r"^n too large: the tokens"):
        sl.sample_data(task, 10**6, rng=0, k_star=k, v_star=v)


@numba.njit(cache=False)
def _halve(k, x, p, out):
    for i in range(x.shape[0]):
        out[i] = p[0] * x[i]


def test_engine_refuses_a_saved_trajectory_beyond_the_limit_and_the_override(monkeypatch):
    x0 = np.ones((1000, 3))
    # 1000 trajectories x 101 saves x 3 variables x 8 bytes = 2.4 MB > 1 MB
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "1e6")
    with pytest.raises(ValueError, match=r"saveat and the batch of initial states too large: .*\(1000, 101, 3\)"):
        dynamics.iterate(_halve, x0, 100, params=np.array([0.5]))
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "off")
    assert dynamics.iterate(_halve, x0, 100, params=np.array([0.5])).sizes["trajectory"] == 1000
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "lots")
    with pytest.raises(ValueError, match=f"{MEMORY_LIMIT_ENV} must be a number of bytes"):
        check_allocation("n", (3,))
    monkeypatch.delenv(MEMORY_LIMIT_ENV)
    assert check_allocation("n", (3, 4)) == (3, 4)
    assert check_allocation("n", (10, 10), limit=800) == (10, 10)  # exactly at the limit: accepted
    with pytest.raises(ValueError, match="n too large"):
        check_allocation("n", (10, 10), limit=799)


# ----------------------------------------------------------------------------------------------------------------
# arguments ignored in one mode are still checked; None is not an empty family


def test_adjust_refuses_none_and_names_results_reads_nan_as_no_test():
    import importlib

    compare = importlib.import_module("dynamics.compare")  # the module (dynamics.compare is also the function)
    with pytest.raises(ValueError, match="^results must be .*got None"):
        compare.adjust(None)
    with pytest.raises(ValueError, match=r"^results: p-values must lie in \[0, 1\]"):
        compare.adjust([0.2, 1.5])
    # Holm by hand on the two tested p-values (0.01, 0.5): 2 * 0.01 = 0.02, then max(0.02, 1 * 0.5) = 0.5
    out = compare.adjust([0.01, math.nan, 0.5])
    assert out["family_size"] == 2
    np.testing.assert_array_equal(out["adjusted_p"], [0.02, math.nan, 0.5])


@pytest.mark.parametrize("grid", ["abc", object(), [0.0, math.nan], [0.0, math.inf], [], [1.0, 2.0]])
def test_overlay_checks_grid_even_without_align(grid):
    from tests._bad_arguments_cases import F

    with pytest.raises((ValueError, TypeError), match="grid"):
        dynamics.overlay(theory_fn=F.theory_fn, learned=F.traj_map, state_variables=("x0", "x1"), grid=grid)


@pytest.mark.parametrize(
    "pvalues", [[0.2, -0.5], [0.2, 1.5], [0.2, math.nan], [0.2 + 1j, 0.5], [[0.1, 0.2], [0.3, 0.4]], ["a", "b"]]
)
def test_report_holm_refuses_invalid_pvalues_naming_them(pvalues):
    from figures.report import holm

    with pytest.raises(ValueError, match="pvalues"):
        holm(pvalues)


def test_report_holm_by_hand():
    from figures.report import holm

    # Holm at 0.05 on (0.01, 0.5): 2 * 0.01 = 0.02 <= 0.05 rejected; then 0.5 > 0.05 kept
    assert holm([0.01, 0.5], level=0.05) == [True, False]
    assert holm([]) == []
