"""The statuses of ``dynamics.compare`` at the allowance band's edge, the minimum detectable deviation, and the
family-wise rule ``dynamics.compare.adjust``, all calibrated by simulation.

Tolerances: a count ``K`` of events out of ``N`` independent replicates is Binomial(N, p). A claim ``p <= p0`` is
accepted when ``K <= binom.ppf(1 - 1e-6, N, p0)`` (a correct rule fails it with probability < 1e-6); where the rule
is exact, ``K >= binom.ppf(1e-6, N, p0)`` too. A rate claimed equal to ``p0`` (the power at the minimum detectable
deviation) must lie within 5 binomial SE of it (false alarm < 6e-7).
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from scipy import stats

import dynamics
from dynamics.compare import adjust, gap_test, mdd_factor

N_REP = 20_000
ALARM = 1e-6


def _rows(n, true_gap, allowance, level, rng, sigma=1.0):
    """Exact theory 0, seeds N(true_gap, sigma^2): compare() over N_REP independent rows."""
    samples = true_gap + sigma * rng.standard_normal((n, N_REP))
    learned = xr.Dataset({"x": (("trajectory", "time"), samples)}, coords={"time": np.arange(N_REP, dtype=float)})
    theory = xr.Dataset({"x": ("time", np.zeros(N_REP))}, coords={"time": np.arange(N_REP, dtype=float)})
    return dynamics.compare(theory, learned, variables="x", allowance=allowance, level=level)


@pytest.mark.statistical
@pytest.mark.parametrize("n_seeds", [2, 3, 8])
@pytest.mark.parametrize("side", [1.0, -1.0])
def test_false_holds_and_false_fails_at_the_band_edge(n_seeds, side):
    """True gap exactly on an edge of the band: 'holds' (equivalence shown) is false there and has probability
    at most level / 2 (the one-sided test at that edge; exactly level / 2 for 8 seeds, where the far edge, 6 sigma
    away, is out of reach of the interval; with 2 or 3 seeds the wide interval often crosses it too, which makes
    the rule conservative). 'fails' there has probability exactly level / 2 (<= level). The old rule, 'holds when
    the interval meets the band', is rejected by the same bound."""
    level, a = 0.05, 3.0
    rng = np.random.default_rng(int(10 * n_seeds + side))
    res = _rows(n_seeds, side * a, a, level, rng)
    status = res.status.values[0]
    half = level / 2
    upper, lower = stats.binom.ppf(1 - ALARM, N_REP, half), stats.binom.ppf(ALARM, N_REP, half)
    k_holds, k_fails = int((status == "holds").sum()), int((status == "fails").sum())
    assert k_holds <= upper, f"false holds {k_holds} of {N_REP} > {upper}"
    if n_seeds == 8:
        assert k_holds >= lower, f"false holds {k_holds} of {N_REP} < {lower}: the rule is over-wide"
    assert lower <= k_fails <= upper, f"fails at the edge {k_fails} of {N_REP} outside [{lower}, {upper}]"
    old_rule_holds = (res.ci_low.values[0] <= a) & (res.ci_high.values[0] >= -a)  # "meets the band"
    assert int(old_rule_holds.sum()) > upper
    # the three statuses partition the rows
    assert set(np.unique(status)) <= {"holds", "consistent", "fails"}


@pytest.mark.statistical
@pytest.mark.parametrize("n_seeds", [3, 8])
def test_power_at_the_minimum_detectable_deviation(n_seeds):
    """A true gap of allowance + mdd_factor * sigma / sqrt(n) fails with probability 80 % (the stated power); the
    normal-theory factor (q + z_0.8) is rejected for 3 seeds (its power is far from 80 %)."""
    level, a, sigma, power = 0.05, 0.2, 1.0, 0.8
    delta = float(mdd_factor(level, n_seeds - 1, power))
    rng = np.random.default_rng(5 + n_seeds)
    res = _rows(n_seeds, a + delta * sigma / np.sqrt(n_seeds), a, level, rng, sigma)
    rate = float((res.status == "fails").mean())
    tol = 5 * np.sqrt(power * (1 - power) / N_REP)
    assert abs(rate - power) <= tol, (rate, power)
    # each row's mdd is that formula with its measured se
    np.testing.assert_allclose(res.mdd.values[0], a + delta * res.se.values[0], rtol=1e-12)  # round-off
    if n_seeds == 3:
        wrong = stats.t.ppf(1 - level / 2, n_seeds - 1) + stats.norm.ppf(power)
        res_w = _rows(n_seeds, a + wrong * sigma / np.sqrt(n_seeds), a, level, np.random.default_rng(99), sigma)
        assert abs(float((res_w.status == "fails").mean()) - power) > tol


def _holm_by_loop(p, level):
    """Holm's step-down rule written out: reject the smallest p-values while p_(i) < level / (m - i)."""
    order = np.argsort(p)
    reject = np.zeros(p.size, dtype=bool)
    for i, j in enumerate(order):
        if p[j] < level / (p.size - i):
            reject[j] = True
        else:
            break
    return reject


@pytest.mark.statistical
def test_family_wise_rule_controls_any_false_fail():
    """2 000 families of 200 null rows (3 seeds, exact theory, level 0.05): the per-row rule expects 10 false
    fails per family (it has some in nearly every family); after Holm's adjustment the fraction of families with
    any false fail is <= 0.05 (binomial bound), and the adjusted decision equals Holm's rule written out."""
    n_fam, m, n, level = 2000, 200, 3, 0.05
    rng = np.random.default_rng(21)
    x = rng.standard_normal((n, n_fam * m))
    res = gap_test(0.0, x.mean(0), x.std(0, ddof=1) / np.sqrt(n), n, level=level)
    p = res["p_value"].reshape(n_fam, m)
    per_row = res["fails"].reshape(n_fam, m)
    any_adjusted = np.zeros(n_fam, dtype=bool)
    any_bonf = np.zeros(n_fam, dtype=bool)
    for f in range(n_fam):
        out = adjust(p[f], level=level)
        any_adjusted[f] = out["fails"].any()
        any_bonf[f] = adjust(p[f], method="bonferroni", level=level)["fails"].any()
        if f < 50:
            np.testing.assert_array_equal(out["fails"], _holm_by_loop(p[f], level))
        assert out["expected_false_fails_per_row"] == pytest.approx(m * level)
    upper = stats.binom.ppf(1 - ALARM, n_fam, level)
    assert any_adjusted.sum() <= upper and any_bonf.sum() <= upper
    # the per-row rule: mean false fails per family ~ m * level (binomial over all rows), FWER ~ 1: rejected
    k_rows = per_row.sum()
    assert abs(k_rows - n_fam * m * level) <= 5 * np.sqrt(n_fam * m * level * (1 - level))
    assert per_row.any(axis=1).sum() > upper
    # the per-row rule agrees with its p-value: fails iff p < level
    np.testing.assert_array_equal(res["fails"], res["p_value"] < level)


def test_adjust_on_a_compare_result_keeps_holds_and_out_of_range_rows():
    rng = np.random.default_rng(4)
    samples = rng.normal(0.0, 0.1, size=(8, 6))
    samples[:, 5] += 0.25  # about 7 SE off: fails per row (p ~ 2e-4) but not after Holm over 6 rows at 1e-3
    samples[:, 4] += 2.0  # far off: fails either way
    learned = xr.Dataset(
        {
            "x": (("trajectory", "time"), samples),
            "in_range": (("trajectory", "time"), np.arange(6)[None, :].repeat(8, 0) != 3),
        },
        coords={"time": np.arange(6.0)},
    )
    theory = xr.Dataset({"x": ("time", np.zeros(6))}, coords={"time": np.arange(6.0)})
    res = dynamics.compare(theory, learned, variables="x", allowance=0.5)
    per_row = res.status.values[0]
    assert per_row[3] == "out_of_range" and np.isnan(res.p_value.values[0, 3])
    np.testing.assert_array_equal(res.adjusted_status, adjust(res).adjusted_status)  # compare adjusts its own rows
    out = adjust(res)
    adj = out.adjusted_status.values[0]
    assert out.attrs["family_size"] == 5 and out.attrs["method"] == "holm"
    for i in range(6):
        if per_row[i] != "fails":
            assert adj[i] == per_row[i]
    assert adj[4] == "fails"
    p = res.p_value.values[0]
    tested = ~np.isnan(p)
    expect = _holm_by_loop(p[tested], 1e-3)
    np.testing.assert_array_equal(adj[tested] == "fails", expect)
    with pytest.raises(ValueError, match="method must be one of"):
        adjust(res, method="fdr")
    with pytest.raises(ValueError, match=r"p-values must lie in \[0, 1\]"):
        adjust(np.array([0.1, 1.5]))
    with pytest.raises(ValueError, match="results must be a compare"):
        adjust("many rows")
    with pytest.raises(ValueError, match="results must carry 'p_value'"):
        adjust({"status": np.array(["fails"])})


def test_adjust_states_the_expected_false_fails_at_the_results_level():
    """k rows at the per-row level give k x level false fails on average: the level is the result's own, or the one
    given where the result does not carry one."""
    rng = np.random.default_rng(5)
    learned = xr.Dataset(
        {"x": (("trajectory", "time"), rng.normal(0.0, 0.1, size=(8, 4)))}, coords={"time": np.arange(4.0)}
    )
    theory = xr.Dataset({"x": ("time", np.zeros(4))}, coords={"time": np.arange(4.0)})
    res = dynamics.compare(theory, learned, variables="x", allowance=0.5, level=0.02)
    assert adjust(res).attrs["expected_false_fails_per_row"] == pytest.approx(4 * 0.02)
    del res.attrs["level"]
    assert adjust(res, level=0.01).attrs["expected_false_fails_per_row"] == pytest.approx(4 * 0.01)
