"""Tests of ``dynamics.compare`` and the registry's verdict rows (issue 12): calibration by simulation, power,
allowance semantics, errors, and the three statuses.

Calibration tolerance. Each simulation runs ``N`` independent null replicates (theory right, seeds Gaussian) in one
vectorised call; the number ``K`` of false ``fails`` is Binomial(N, p) with ``p`` the true false-alarm rate. The
test's claim is ``p <= level``; we accept it when ``K <= binom.ppf(1 - 1e-6, N, level)``, so a correct rule fails
this assertion with probability < 1e-6 (the seeds are fixed anyway, so the outcome is deterministic). For
``N = 20 000`` and ``level = 1e-3`` the bound is 45 (expected 20); the normal-quantile rule with 3 seeds has
``p = P(|T_2| > 3.29) = 0.081`` (about 1 600 false fails) and must be rejected by the same bound. With ``level =
0.05`` the rule is exact for an exact theory, so we also check the lower bound ``binom.ppf(1e-6, N, 0.05) = 857``
(the t interval is not over-wide); there the normal rule has ``p = 0.189`` for 3 seeds.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr
from scipy import integrate, stats

import dynamics
from dynamics.compare import gap_test
from figures.registry import CheckResult, Explanation, GapRow, compare_rows, gap_rows

N_REP = 20_000
ALARM = 1e-6  # probability that a correct rule fails one of the binomial assertions below


def _learned(samples) -> xr.Dataset:
    """A Trajectory-shaped Dataset: samples (n_seeds, n_times) as variable x over (trajectory, time)."""
    n, k = samples.shape
    return xr.Dataset(
        {"x": (("trajectory", "time"), samples)},
        coords={"time": np.arange(k, dtype=float), "step": ("time", np.arange(k))},
    )


def _exact(values) -> xr.Dataset:
    values = np.asarray(values, dtype=float)
    return xr.Dataset({"x": ("time", values)}, coords={"time": np.arange(values.size, dtype=float)})


def _false_fails(level, n_seeds, rng):
    samples = rng.standard_normal((n_seeds, N_REP)) * 0.7 + 2.0  # theory = 2 exactly: the null
    res = dynamics.compare(_exact(np.full(N_REP, 2.0)), _learned(samples), variables="x", level=level)
    k_t = int((res.status == "fails").sum())
    # The wrong rule on the same replicates: a normal quantile instead of Student t.
    z = stats.norm.ppf(1 - level / 2)
    k_normal = int((np.abs(res.gap) > z * res.se).sum())
    return k_t, k_normal


@pytest.mark.statistical
@pytest.mark.parametrize("n_seeds", [2, 3, 8])
@pytest.mark.parametrize("level", [1e-3, 0.05])
def test_false_fail_rate_is_at_most_level(n_seeds, level):
    rng = np.random.default_rng(1000 * n_seeds + int(level * 1e4))
    k_t, k_normal = _false_fails(level, n_seeds, rng)
    upper = stats.binom.ppf(1 - ALARM, N_REP, level)
    lower = stats.binom.ppf(ALARM, N_REP, level)
    assert k_t <= upper, f"{k_t} false fails of {N_REP} > {upper} (level {level}, {n_seeds} seeds)"
    assert k_t >= lower, f"{k_t} false fails of {N_REP} < {lower}: the interval is too wide"
    if n_seeds == 3:  # the wrong rule (normal quantile, 3 seeds) is rejected by the same test
        assert k_normal > upper, f"normal-quantile rule not rejected: {k_normal} <= {upper}"


@pytest.mark.statistical
@pytest.mark.parametrize("m_theory", [3, 50])
def test_monte_carlo_theory_is_conservative(m_theory):
    """Theory from m Monte Carlo samples with a larger spread than the learned seeds (Behrens-Fisher): the
    smaller-df rule keeps the false-fail rate <= level; ignoring the theory's SE does not."""
    rng = np.random.default_rng(7 + m_theory)
    n, level = 3, 0.05
    learned = rng.standard_normal((n, N_REP))
    theory_samples = 3.0 * rng.standard_normal((m_theory, N_REP))
    theory = xr.Dataset({"x": (("trajectory", "time"), theory_samples)}, coords={"time": np.arange(N_REP, dtype=float)})
    res = dynamics.compare(theory, _learned(learned), variables="x", level=level)
    k = int((res.status == "fails").sum())
    upper = stats.binom.ppf(1 - ALARM, N_REP, level)
    assert k <= upper, f"{k} false fails > {upper}"
    # Independent computation of the combined SE and df.
    se = np.hypot(learned.std(0, ddof=1) / np.sqrt(n), theory_samples.std(0, ddof=1) / np.sqrt(m_theory))
    np.testing.assert_allclose(res.se.values[0], se, rtol=1e-12)  # same arithmetic, float64 round-off
    assert np.all(res.df == min(n, m_theory) - 1)
    # Negative control: the learned SE alone (theory treated as exact) is rejected by the same bound.
    naive = np.abs(res.gap.values[0]) > stats.t.ppf(1 - level / 2, n - 1) * learned.std(0, ddof=1) / np.sqrt(n)
    assert naive.sum() > upper


@pytest.mark.statistical
def test_power_against_a_shifted_mean():
    """8 seeds, mean shifted by 3 sigma: the fail rate matches the exact power (noncentral t, integrated here over
    the chi-square law of the sample variance), within 5 binomial SE, and is large."""
    n, level, shift, reps = 8, 1e-3, 3.0, 4000
    rng = np.random.default_rng(3)
    res = dynamics.compare(
        _exact(np.zeros(reps)), _learned(shift + rng.standard_normal((n, reps))), variables="x", level=level
    )
    rate = float((res.status == "fails").mean())
    q, df, ncp = stats.t.ppf(1 - level / 2, n - 1), n - 1, shift * np.sqrt(n)

    def integrand(v):  # P(|Z + ncp| > q sqrt(v / df)) times the chi-square(df) density of v
        c = q * np.sqrt(v / df)
        return (stats.norm.sf(c - ncp) + stats.norm.cdf(-c - ncp)) * stats.chi2.pdf(v, df)

    power = integrate.quad(integrand, 0, np.inf)[0]
    assert abs(rate - power) <= 5 * np.sqrt(power * (1 - power) / reps), (rate, power)
    assert rate > 0.5


def test_outputs_against_a_direct_computation():
    rng = np.random.default_rng(0)
    samples = rng.normal(1.0, 0.2, size=(5, 7))
    theory = np.linspace(0.9, 1.1, 7)
    res = dynamics.compare(_exact(theory), _learned(samples), variables=["x"], allowance=0.01, rel_allowance=0.1)
    assert res.status.dims == ("variable", "time") and list(res.variable.values) == ["x"]
    mean, se = samples.mean(0), samples.std(0, ddof=1) / np.sqrt(5)
    lo, hi = stats.t.interval(1 - 1e-3, 4, loc=mean - theory, scale=se)  # scipy's t interval, independently
    np.testing.assert_allclose(res.gap.values[0], mean - theory, rtol=1e-12)  # round-off
    np.testing.assert_allclose(res.ci_low.values[0], lo, rtol=1e-9)  # quantile routines agree to ~1e-12
    np.testing.assert_allclose(res.ci_high.values[0], hi, rtol=1e-9)
    np.testing.assert_allclose(res.allowance.values[0], 0.01 + 0.1 * np.abs(theory), rtol=1e-12)
    assert np.all(res.n_seeds == 5) and np.all(res.step.values == np.arange(7))
    # A subset of times, on both grids.
    sub = dynamics.compare(_exact(theory), _learned(samples), variables="x", times=[2.0, 5.0])
    np.testing.assert_array_equal(sub.gap.values[0], res.gap.values[0, [2, 5]])


def test_allowance_semantics():
    """Seeds at 11 +- c exactly (mean 11, se c / sqrt(7)), theory 10: the gap is 1 with a tiny interval [1 - half,
    1 + half], so the status switches exactly where the allowance crosses its ends: fails below 1 - half, consistent
    between (the interval straddles the band edge), holds (equivalence shown) above 1 + half."""
    c = 1e-4
    samples = (11.0 + c * np.array([-1, 1] * 4))[:, None]
    half = stats.t.ppf(1 - 5e-4, 7) * c / np.sqrt(7)
    th, lr = _exact([10.0]), _learned(samples)
    status = lambda **kw: str(dynamics.compare(th, lr, variables="x", **kw).status.item())  # noqa: E731
    assert status() == "fails"
    assert status(allowance=1.0 - 2.0 * half) == "fails"
    assert status(allowance=1.0 - 0.5 * half) == "consistent"  # the interval meets the band but is not inside it
    assert status(allowance=1.0 + 0.5 * half) == "consistent"
    assert status(allowance=1.0 + 2.0 * half) == "holds"  # the interval lies inside [-a, a]
    assert status(rel_allowance=0.1) == "consistent"  # 0.1 * |theory| = 1: the gap sits on the band edge
    assert status(allowance=0.09, rel_allowance=0.09) == "fails"  # 0.99 < 1 - half
    assert status(allowance=0.5, rel_allowance=0.06) == "holds"  # both parts add up to 1.1 > 1 + half
    # The sign does not matter: theory 12 gives gap -1.
    assert str(dynamics.compare(_exact([12.0]), lr, variables="x", allowance=1.1).status.item()) == "holds"
    # A gap on the band edge is undecidable by more seeds; one just inside it is decided by a finite number.
    edge = dynamics.compare(th, lr, variables="x", rel_allowance=0.1)
    assert np.isinf(edge.n_seeds_to_decide.item())
    near = dynamics.compare(th, lr, variables="x", allowance=1.0 + 0.5 * half)
    n_dec = float(near.n_seeds_to_decide.item())
    sd = samples.std(ddof=1)  # independent check: the t half-width with n seeds must fall below the margin 0.5 half
    margin = 0.5 * half
    assert stats.t.ppf(1 - 5e-4, n_dec - 1) * sd / np.sqrt(n_dec) < margin
    assert stats.t.ppf(1 - 5e-4, n_dec - 2) * sd / np.sqrt(n_dec - 1) >= margin
    assert near.tests.item().startswith("equivalence")
    assert dynamics.compare(th, lr, variables="x").tests.item().startswith("difference only")


def test_bad_input_is_refused():
    good_th, good_lr = _exact([1.0, 2.0]), _learned(np.ones((3, 2)))
    with pytest.raises(ValueError, match="at least 2 seeds"):
        dynamics.compare(good_th, _learned(np.ones((1, 2))), variables="x")
    bad = np.ones((3, 2))
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="must be finite"):
        dynamics.compare(good_th, _learned(bad), variables="x")
    with pytest.raises(ValueError, match="must be finite"):
        dynamics.compare(_exact([1.0, np.inf]), good_lr, variables="x")
    with pytest.raises(ValueError, match="variable 'y' is not in"):
        dynamics.compare(good_th, good_lr, variables="y")
    with pytest.raises(ValueError, match="times must lie on the time grid"):
        dynamics.compare(good_th, good_lr, variables="x", times=[0.5])
    with pytest.raises(ValueError, match="different time grids"):
        dynamics.compare(_exact([1.0, 2.0, 3.0]), good_lr, variables="x")
    with pytest.raises(ValueError, match="allowance must be a finite number >= 0"):
        dynamics.compare(good_th, good_lr, variables="x", allowance=-1)
    with pytest.raises(ValueError, match="level must be a finite number > 0 and < 1"):
        dynamics.compare(good_th, good_lr, variables="x", level=0.0)
    with pytest.raises(TypeError, match="theory must be an xarray.Dataset"):
        dynamics.compare(np.ones(2), good_lr, variables="x")
    with pytest.raises(ValueError, match="at least 2 seeds"):
        compare_rows("q", [0], [1.0], np.ones((1, 1)))
    with pytest.raises(ValueError, match="must be finite"):
        compare_rows("q", [0], [1.0], np.array([[1.0], [np.nan]]))
    with pytest.raises(ValueError, match="allowance_source must say"):
        compare_rows("q", [0], [1.0], np.ones((3, 1)), rel_allowance=0.1)


def test_rows_statuses_and_explanations():
    rng = np.random.default_rng(2)
    samples = rng.normal(0.0, 0.1, size=(8, 3))
    theory = np.array([0.0, 0.0, 1.0])  # the last time is 10 sigma off
    rows = compare_rows("q", [0, 1, 2], theory, samples)
    assert [r.status for r in rows] == ["consistent", "consistent", "fails"]  # allowance 0: never shown
    assert all(r.n_seeds == 8 and r.df == 7 and r.level == 1e-3 for r in rows)
    why = Explanation(reason="toy bias", evidence="this test, row 3")
    explained = compare_rows("q", [0, 1, 2], theory, samples, explanation=why)
    assert [r.status for r in explained] == ["consistent", "consistent", "explained"]  # only a failing row changes
    assert explained[2].explanation == why and rows[2].explained(why).status == "explained"
    # Monte Carlo theory in compare_rows: the SEs add in quadrature.
    mc = compare_rows("q", [0], [0.0], samples[:, :1], theory_se=[0.05], theory_n_seeds=4)
    assert mc[0].se == pytest.approx(np.hypot(samples[:, 0].std(ddof=1) / np.sqrt(8), 0.05), rel=1e-12)
    assert mc[0].df == 3
    # Checks: three statuses.
    ok = CheckResult(name="c", passed=True, measured=1, expected=1, tolerance="exact")
    bad = CheckResult(name="c", passed=False, measured=2, expected=1, tolerance="exact", n_seeds=8)
    assert (ok.status, bad.status, bad.explained(why).status) == ("holds", "fails", "explained")
    with pytest.raises(ValueError, match="reason must be a non-empty"):
        Explanation(reason="", evidence="x")
    with pytest.raises(TypeError, match="explanation must be an Explanation"):
        CheckResult(name="c", passed=False, measured=2, expected=1, tolerance="t", explanation="because")
    with pytest.raises(ValueError, match="does not follow from the interval"):
        GapRow(**{**rows[2].__dict__, "status": "explained"})


def test_deprecated_gap_rows_shim_uses_the_calibrated_test():
    samples = np.array([[1.2], [1.2 + 1e-3], [1.2 - 1e-3]])
    with pytest.warns(DeprecationWarning):
        (row,) = gap_rows("q", [0], [1.0], samples, tol_se=5.0, justification="bias 0.25", atol=0.25)
    assert row.status == "holds" and row.allowance == 0.25 and row.allowance_source == "bias 0.25"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        (tight,) = gap_rows("q", [0], [1.0], samples, tol_se=5.0, justification="none")
        legacy = GapRow(
            quantity="q",
            time=0,
            theory=1.0,
            mean=1.2,
            se=1e-3,
            n_seeds=3,
            tol_se=5,
            atol=0.25,
            justification="finite-d bias 0.25",
        )
    assert tight.status == "fails" and tight.allowance == 0.0
    assert legacy.status == "holds" and legacy.allowance_source == "finite-d bias 0.25"
    # The summary-statistics row equals the array row.
    direct = GapRow.from_stats(
        quantity="q",
        time=0,
        theory=1.0,
        mean=float(samples.mean()),
        se=float(samples.std(ddof=1) / np.sqrt(3)),
        n_seeds=3,
    )
    assert (direct.ci_low, direct.ci_high) == pytest.approx((tight.ci_low, tight.ci_high), rel=1e-12)


def test_gap_test_vectorised_equals_scalar():
    rng = np.random.default_rng(4)
    th, m, s = rng.normal(size=(3, 5))
    s = np.abs(s)
    res = gap_test(th, m, s, 4, allowance=0.1)
    for i in range(5):
        one = gap_test(th[i], m[i], s[i], 4, allowance=0.1)
        assert bool(one["holds"]) == bool(res["holds"][i]) and float(one["ci_low"]) == res["ci_low"][i]


def test_assert_t_close_helper():
    from dynamics.testing import assert_t_close

    rng = np.random.default_rng(8)
    samples = rng.normal(1.0, 0.1, size=(8, 50))
    assert_t_close(samples, 1.0)  # right value, 8 seeds: holds at level 1e-6 per element
    with pytest.raises(AssertionError, match="t interval half-width"):
        assert_t_close(samples, 2.0)  # 10 sigma off; the interval half-width is t_7(1 - 5e-7) = 15.8 SE = 5.6 sigma
