"""The report's verdicts: the six statuses, the minimum detectable deviation, the many-rows (Holm) rule and the
per-seed comparison of runs that should agree exactly, each checked against an independent computation or by
simulation."""

import numpy as np
import pytest
from scipy import stats

from dynamics.compare import gap_test
from figures.registry import STATUSES, CheckResult, Explanation, GapRow, compare_rows, per_seed_check
from figures.report import FAMILY_LEVEL, adjusted_status, holm


def _holm_adjusted_pvalues(p):
    """Holm's adjusted p-values, written the textbook way (Holm 1979): sort, multiply the k-th smallest by m - k,
    take running maxima, cap at 1. Rejection iff adjusted p <= level."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p, kind="stable")
    m = p.size
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adj
    return out


def test_statuses_are_the_agreed_vocabulary_and_a_row_says_what_happened():
    assert STATUSES == ("holds", "consistent", "explained", "disagrees", "deferred", "fails")
    rng = np.random.default_rng(5)
    samples = rng.normal(0.0, 0.1, size=(8, 3))
    # A band of 1.0 around a right theory: the interval (half width 5.41 SE ~ 0.19) lies inside it -> holds (shown);
    # no band: consistent (equivalence cannot be shown with allowance 0); 10 sigma off: fails.
    shown = compare_rows("q", [0, 1, 2], np.zeros(3), samples, allowance=1.0, allowance_source="test band")
    assert [r.status for r in shown] == ["holds"] * 3
    rows = compare_rows("q", [0, 1, 2], [0.0, 0.0, 1.0], samples)
    assert [r.status for r in rows] == ["consistent", "consistent", "fails"]
    # The three explanation kinds give their status to a failing row only.
    for kind in ("explained", "disagrees", "deferred"):
        why = Explanation(reason="toy", evidence="measured here", kind=kind)
        assert [r.explained(why).status for r in rows] == ["consistent", "consistent", kind]
        check = CheckResult(name="c", passed=False, measured=2, expected=1, tolerance="exact", explanation=why)
        assert check.status == kind
    with pytest.raises(ValueError, match="kind must be one of"):
        Explanation(reason="r", evidence="e", kind="holds")
    # p-value of the fails test, recomputed with scipy: two-sided Student t on (|gap| - allowance) / SE.
    assert rows[2].p_value == pytest.approx(2 * stats.t.sf(abs(rows[2].gap) / rows[2].se, 7), rel=1e-9)
    assert rows[2].p_value < rows[2].level  # fails <=> p < level
    assert shown[0].p_value == 1.0  # inside the band: nothing to reject


def test_mdd_is_the_deviation_detected_with_80_percent_power_by_simulation():
    """At a true gap of MDD (computed at the true SE) a row fails with probability 0.8: 20 000 simulated rows of 8
    Gaussian seeds. Binomial SE sqrt(0.8 * 0.2 / 20 000) = 0.0028; tolerance 4 SE = 0.011. The normal-style
    shortcut allowance + (t_{1-level/2} + t_{0.8}) SE (power 0.74 at 7 df) must be rejected by the same rule."""
    n, sigma, allowance, reps = 8, 1.0, 0.3, 20_000
    true_se = sigma / np.sqrt(n)
    row = GapRow.from_stats(quantity="q", time=0.0, theory=0.0, mean=0.0, se=true_se, n_seeds=n,
                            allowance=allowance, allowance_source="test band")
    rng = np.random.default_rng(11)

    def fail_rate(delta):
        x = rng.normal(delta, sigma, size=(reps, n))
        res = gap_test(0.0, x.mean(axis=1), x.std(axis=1, ddof=1) / np.sqrt(n), n, allowance=allowance)
        return np.mean((res["ci_low"] > allowance) | (res["ci_high"] < -allowance))

    tol = 4 * np.sqrt(0.8 * 0.2 / reps)
    assert abs(fail_rate(row.mdd) - 0.8) < tol
    q = stats.t.ppf(1 - row.level / 2, n - 1)
    wrong = allowance + (q + stats.t.ppf(0.8, n - 1)) * true_se
    assert abs(fail_rate(wrong) - 0.8) > tol


def test_n_seeds_to_decide_decides_a_consistent_row():
    rng = np.random.default_rng(3)
    samples = rng.normal(0.2, 0.1, size=(4, 1))
    (row,) = compare_rows("q", [0], [0.0], samples, allowance=0.1, allowance_source="test band")
    assert row.status == "consistent" and row.n_seeds_to_decide is not None
    n = row.n_seeds_to_decide
    sd = row.se * np.sqrt(row.n_seeds)
    half = stats.t.ppf(1 - row.level / 2, n - 1) * sd / np.sqrt(n)  # the interval at n seeds, same gap and spread
    assert half < abs(abs(row.gap) - row.allowance)  # no longer straddles the band edge
    assert compare_rows("q", [0], [10.0], samples)[0].n_seeds_to_decide is None  # decided rows need no more


def test_holm_matches_the_adjusted_pvalue_formulation():
    rng = np.random.default_rng(7)
    for m in (1, 2, 5, 40):
        for _ in range(50):
            p = rng.uniform(0, 0.2, size=m) ** 2
            expected = _holm_adjusted_pvalues(p) <= FAMILY_LEVEL
            assert holm(p, FAMILY_LEVEL) == expected.tolist()
    with pytest.raises(ValueError, match="pvalues must lie in"):
        holm([0.1, 1.5])


def test_family_wise_rule_is_calibrated_by_simulation():
    """Under the null (every theory right, allowance 0), 400 reports of 50 rows of 8 seeds each at level 1e-3:

    * per-row rule: the expected number of false fails per report is 50 * 1e-3 = 0.05 (exact for exact theories);
      the observed mean over 400 reports (SE sqrt(0.05 / 400) = 0.011, Poisson) is within 4 SE of it;
    * Holm at 0.05: the fraction of reports with any false fails is <= 0.05 + 4 binomial SE (SE 0.011);
    * a wrong rule, each row at 0.05 without adjustment, has that fraction near 1 - 0.95^50 = 0.92: rejected.
    """
    n_rep, m, n = 400, 50, 8
    rng = np.random.default_rng(2026)
    per_row, any_holm, any_naive = [], 0, 0
    for _ in range(n_rep):
        rows = compare_rows("q", np.arange(m), np.zeros(m), rng.normal(0.0, 1.0, size=(n, m)))
        p = np.array([r.p_value for r in rows])
        per_row.append(sum(r.status == "fails" for r in rows))
        rejected = holm(p, FAMILY_LEVEL)
        any_holm += any(rejected)
        any_naive += bool(np.any(p < FAMILY_LEVEL))
        assert all(adjusted_status(r, rej) in ("consistent", "fails") for r, rej in zip(rows, rejected))
    se_mean = np.sqrt(m * 1e-3 / n_rep)
    assert abs(np.mean(per_row) - m * 1e-3) < 4 * se_mean
    se_frac = np.sqrt(FAMILY_LEVEL * (1 - FAMILY_LEVEL) / n_rep)
    assert any_holm / n_rep <= FAMILY_LEVEL + 4 * se_frac
    assert any_naive / n_rep > FAMILY_LEVEL + 4 * se_frac


def test_adjusted_status_keeps_family_wise_fails_and_relaxes_the_others():
    samples = np.random.default_rng(1).normal(0.0, 0.1, size=(8, 1))
    (bad,) = compare_rows("q", [0], [1.0], samples)
    why = Explanation(reason="toy", evidence="here", kind="disagrees")
    assert adjusted_status(bad, True) == "fails" and adjusted_status(bad, False) == "consistent"
    assert adjusted_status(bad.explained(why), True) == "disagrees"


def test_per_seed_check_fails_on_any_seed_beyond_round_off():
    ref = np.random.default_rng(4).uniform(size=(8, 5))
    same = per_seed_check("torch vs reduced map", ref, ref + 1e-15, tol=1e-12, tolerance="float64 round-off")
    assert same.passed and same.status == "holds" and same.n_seeds == 8
    off = ref.copy()
    off[2, 3] += 0.5  # one seed of eight escapes: the mean would hide it, the per-seed check must not
    bad = per_seed_check("torch vs reduced map", ref, off, tol=1e-12, tolerance="float64 round-off")
    assert not bad.passed and bad.status == "fails" and "seeds beyond: [2]" in bad.name
    assert bad.measured == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same shape"):
        per_seed_check("x", ref, ref[:, :2], tol=0.0, tolerance="t")
