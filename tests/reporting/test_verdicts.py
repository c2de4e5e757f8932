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
    row = GapRow.from_stats(
        quantity="q",
        time=0.0,
        theory=0.0,
        mean=0.0,
        se=true_se,
        n_seeds=n,
        allowance=allowance,
        allowance_source="test band",
    )
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
    with pytest.raises(ValueError, match="p-values must lie in"):
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


# ----------------------------------------------------------------------------------------------------------------
# The layout check learns the defects a reader found (each a synthetic figure that has it, and one that does not)
# ----------------------------------------------------------------------------------------------------------------
def _problems(fig):
    from figures import _style

    return _style.layout_problems(fig)


def test_layout_check_finds_a_strip_panel():
    from figures import _style

    with _style.style_context():
        fig, axes = _style.new_figure(1, 2)
        im = axes[0].imshow(np.arange(8.0)[None, :])  # a 1 x 8 matrix at equal aspect: a strip
        _style.add_colorbar(axes[0], im, label="mu")
        axes[1].plot(np.arange(10.0), np.arange(10.0) ** 2)
    assert any("a strip" in p for p in _problems(fig))
    im.axes.set_aspect("auto")
    assert not any("a strip" in p for p in _problems(fig))


def test_layout_check_finds_one_small_legend_for_many_panels():
    from figures import _style

    with _style.style_context():
        fig, axes = _style.panel_grid(9)
        for ax in axes:
            ax.plot(np.arange(10.0), np.sin(np.arange(10.0)), label="curve")
        axes[0].legend(fontsize=6)
    assert any("6-pt legend for 9 panels" in p for p in _problems(fig))
    axes[0].legend(fontsize=9)
    assert not any("legend for" in p for p in _problems(fig))


def test_layout_check_finds_a_legend_over_a_curve_and_a_squeezed_curve():
    from figures import _style

    x = np.linspace(0.0, 1.0, 200)
    with _style.style_context():
        fig, axes = _style.new_figure(1, 2)
        axes[0].plot(x, np.full_like(x, 0.9) + 0.01 * x, label="a curve under the legend")
        axes[0].plot(x, x, label="another")
        axes[0].set_ylim(0, 1)
        axes[0].legend(loc="upper left")
        axes[1].plot(x * 100, np.sin(x), label="full range")
        axes[1].plot(x * 6, np.cos(x), label="6 % of the axis")
    problems = _problems(fig)
    assert any("legend over" in p for p in problems), problems
    assert any("a curve spans 6% of the x-axis" in p for p in problems), problems
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the panel
    axes[1].set_xscale("linear")
    axes[1].lines[1].set_xdata(x * 90)
    assert not _problems(fig)


def test_runtime_counts_a_shared_run_once_and_the_report_states_build_time_and_load(tmp_path):
    import json

    from figures.registry import Registry
    from figures.report import build_report
    from tests._figures import TOY_PARAMS, toy_data, toy_plot

    reg = Registry(models=("toy",), package=None)
    kw = dict(model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS, plot=toy_plot)
    reg.register(name="toy.a", **kw)(toy_data)
    reg.register(name="toy.b", shares_data_with="toy.a", **kw)(toy_data)
    result = build_report("tiny", device="cpu", out_dir=tmp_path, cache_dir=tmp_path / "res", registry=reg, jobs=1)
    summary = json.loads(result.summary_path.read_text())
    a, b = summary["figures"]
    assert a["runtime_s"] == b["runtime_s"] > 0  # both show the one run ...
    assert (a["counted_runtime_s"], b["counted_runtime_s"]) == (a["runtime_s"], 0.0)  # ... counted once
    assert summary["runtime_s_counted_once"] == a["runtime_s"]
    text = result.path.read_text()
    assert "Build time: <b>" in text and "load average (1, 5, 15 min)" in text
    assert 'the runs of <a href="#fig-toy.a">toy.a</a> (counted there)' in text
    assert summary["cpus"] >= 1
    assert summary["load_start"] is None or len(summary["load_start"]) == 3  # None where the OS has no load average


@pytest.mark.parametrize("n_seeds", [3, 8, 100])
def test_mdd_power_is_exact_for_any_number_of_seeds(n_seeds):
    """scipy's noncentral t: at a true gap of MDD the row fails with probability 0.8. The MDD comes from
    dynamics.compare.mdd_factor (Gauss-Legendre over the chi-square law of the variance), so 1e-6 in power: its
    quadrature error, measured 7e-8 at 100 seeds. Not 2 seeds (df = 1, noncentrality ~816 SE at level 1e-3): there
    scipy's noncentral t is itself off (4e6 Monte Carlo draws: compare's noncentrality gives power 0.80002 +- 0.0002,
    scipy's root 0.79955), and the engine's simulation test of the power covers it."""
    row = GapRow.from_stats(quantity="q", time=0.0, theory=0.0, mean=0.0, se=0.5, n_seeds=n_seeds)
    q = stats.t.ppf(1 - row.level / 2, n_seeds - 1)
    assert stats.nct.sf(q, n_seeds - 1, row.mdd / row.se) == pytest.approx(0.8, abs=1e-6)


def test_first_screen_counts_each_status_and_the_holds_without_training(tmp_path):
    """The first screen counts every status, lists each disagrees/deferred row with its cause, and separates the holds
    of figures that record no training run from those of figures that train (counted by hand: the toy figure's
    checks, two holds, once without and once with a recorded run)."""
    import json

    import xarray as xr

    from figures import experiments
    from figures.registry import Registry
    from figures.report import build_report
    from tests._figures import TOY_PARAMS, toy_checks, toy_data, toy_plot

    def trained(cfg):
        # a recorded training run (the record is what the report counts; the toy curve itself is unchanged)
        experiments.note(xr.Dataset(attrs={"model": "toy", "device": "cpu", "dtype": "float64", "config_json": "{}"}))
        return toy_data(cfg)

    reg = Registry(models=("toy",), package=None)
    kw = dict(model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS, plot=toy_plot, checks=toy_checks)
    reg.register(name="toy.closed", **kw)(toy_data)
    reg.register(name="toy.trained", **kw)(trained)
    result = build_report("tiny", device="cpu", out_dir=tmp_path, cache_dir=tmp_path / "res", registry=reg, jobs=1)
    summary = json.loads(result.summary_path.read_text())
    per_fig = {f["figure"]: f["training_runs"] for f in summary["figures"]}
    assert per_fig == {"toy.closed": 0, "toy.trained": 1}
    holds = {f: sum(r["status"] == "holds" and r["figure"] == f for r in summary["rows"]) for f in per_fig}
    assert holds["toy.closed"] == holds["toy.trained"] > 0
    assert summary["counts"]["figures_without_training"] == 1
    assert summary["counts"]["holds_without_training"] == holds["toy.closed"]
    text = result.path.read_text()
    first = text[text.index('id="counts"') : text.index('class="summary"')]
    for status in STATUSES:
        assert f"b-{status}" in first  # every status has its count
    n = holds["toy.closed"]
    assert f"Of the {2 * n} rows and checks that hold, <b>{n} come from the 1 figure(s) with no training run" in first
    assert "Disagreements with the papers (results): 0" in first and "Deferred to the paper's sizes: 0" in first
