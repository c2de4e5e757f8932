"""Single-location figures (figures/single_location/): every figure builds at the tiny preset (data, plot, gaps,
checks), the closed-form figures pass their theorem checks at the quick preset (the spec's distributional predictions
of Sec. 8.2, 8.3, 8.5, 8.6 and 7.4), and the Fig. 5 overlay aligns the torch and closed-form variables."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from closedform import single_location as sl
from figures import registry
from figures import _range_test
from figures import single_location as fsl
from figures.single_location import _common as sl_common
from figures._seed_checks import mean_check
from figures._style import style_context
from figures.presets import RunConfig
from figures.registry import CheckResult, GapRow

OURS = ("fig3", "fig4a", "fig4b", "fig5", "fig6", "fig7")


def _build(name, preset):
    spec = registry.REGISTRY.get(f"single_location.{name}")
    cfg = RunConfig(figure=spec.name, preset=preset, seed=0, device="cpu", params=spec.params[preset])
    return spec, spec.data(cfg)


@pytest.mark.parametrize("name", OURS)
def test_figure_builds_at_tiny_preset(name):
    spec, ds = _build(name, "tiny")
    assert isinstance(ds, xr.Dataset)
    fig = registry.render(spec, ds)
    with style_context():
        assert fig.get_axes()
    for getter in (spec.gaps, spec.checks):
        if getter is not None:
            rows = getter(ds)
            assert all(isinstance(r, GapRow | CheckResult) for r in rows)
    if spec.checks is not None:
        failed = [c for c in spec.checks(ds) if not c.passed]
        assert not failed, failed
    assert spec.params["paper"]  # every preset declared


@pytest.mark.parametrize("name", ("fig4a", "fig4b", "fig6", "fig7"))
def test_closed_form_figures_pass_spec_checks_at_quick_preset(name):
    """Quick = the paper's sizes for the exact PGD figures (seconds with the five-scalar map): the spec's predictions
    (medians and ranges over runs, counts of runs at S, fixed points) must all hold."""
    spec, ds = _build(name, "quick")
    checks = spec.checks(ds)
    assert len(checks) >= 3  # fig6: its fixed points are identities, in tests/closedform/test_single_location.py
    failed = [c for c in checks if not c.passed]
    assert not failed, failed


def test_fig3_matches_closed_forms():
    spec, ds = _build("fig3", "tiny")
    for c in spec.checks(ds):
        assert c.passed, c
    i = int(np.nonzero(ds.L.values == 10)[0][0])
    task = sl.SingleLocationTask(d=400, L=10)
    assert ds.oracle_fixed.values[i] == pytest.approx(float(sl.oracle_risk(task, 0.1)), rel=1e-14)


def test_fig5_overlay_aligns_torch_and_closed_form():
    """Fig. 5 data: SGD and deterministic PGD on the same step grid, PGD started at each seed's step-0 scalars, for
    the paper's batch 5 and the large batch; the batch-5 rows carry the SGD-noise explanation (never 'fails'), the
    large-batch rows none."""
    spec, ds = _build("fig5", "tiny")
    for prefix in ("", "lb_"):
        sgd, pgd = ds.sel(source="sgd"), ds.sel(source="pgd")
        for v in fsl.STATE:  # same initial scalars, exactly
            np.testing.assert_array_equal(sgd[prefix + v].values[:, 0], pgd[prefix + v].values[:, 0])
        np.testing.assert_allclose(
            sgd[prefix + "excess_risk"].values[:, 0], pgd[prefix + "excess_risk"].values[:, 0], rtol=1e-13
        )
    rows = spec.gaps(ds)
    lb = int(ds.attrs["batch_lb"])
    assert {r.quantity for r in rows} == {
        f"{p}: {q}" for p in (f"batch-{lb} SGD", "batch-5 SGD (paper)") for q in ("|kappa|", "|nu|", "excess_risk")
    }
    assert all(r.d == 20 for r in rows)
    assert all(r.gap == 0.0 for r in rows if r.time == 0)  # identical starts
    for r in rows:
        if r.quantity.startswith("batch-5"):
            assert r.explanation is not None and "SGD noise" in r.explanation.reason and r.status != "fails"
        else:
            assert r.explanation is None


def test_range_count_pvalue_is_exact():
    """The null law of 'how many of n new runs fall inside [min, max] of n_ref reference runs' against a simulation
    (200 000 replicates; 5 binomial SE), sums to 1, and each run is inside with probability (n_ref - 1)/(n_ref + 1)."""
    rng = np.random.default_rng(0)
    n_new, n_ref, reps = 8, 12, 200_000
    x = rng.random((reps, n_ref + n_new))
    ref, new = x[:, :n_ref], x[:, n_ref:]
    inside = ((new >= ref.min(1, keepdims=True)) & (new <= ref.max(1, keepdims=True))).sum(1)
    for m in (3, 5, 7, 8):
        p = _range_test.range_count_pvalue(m, n_new, n_ref)
        emp = float(np.mean(inside <= m))
        assert abs(emp - p) <= 5 * np.sqrt(p * (1 - p) / reps) + 1e-12, (m, emp, p)
    assert _range_test.range_count_pvalue(n_new, n_new, n_ref) == pytest.approx(1.0, abs=1e-15)
    mean_inside = sum(
        m
        * (
            _range_test.range_count_pvalue(m, n_new, n_ref)
            - (_range_test.range_count_pvalue(m - 1, n_new, n_ref) if m else 0.0)
        )
        for m in range(n_new + 1)
    )
    assert mean_inside == pytest.approx(n_new * (n_ref - 1) / (n_ref + 1), rel=1e-12)
    # The check built on it fails when most runs fall outside the paper's range.
    assert not _range_test._range_check("x", np.array([0.0] * 7 + [0.5]), 0.4, 0.6).passed  # P(<= 1 of 8) = 7.7e-4
    assert _range_test._range_check("x", np.full(8, 0.5), 0.4, 0.6).passed


def test_path_panel_names_runs_in_a_legend_not_overlapping_labels():
    """Fig. 4(a)/7 path panel: run end points are legend entries with distinct markers, no text labels that pile up
    where runs end at the same fixed point."""
    from figures._style import new_figure

    ds = xr.Dataset(
        {
            "kappa": (("run", "time"), np.tile(np.linspace(0, 1, 5), (3, 1))),
            "nu": (("run", "time"), np.tile(np.linspace(0, 1, 5), (3, 1))),
        },
        coords={"step": ("time", np.arange(5))},
    )
    with style_context():
        fig, ax = new_figure()
        sl_common._path_panel(ax, ds, [0, 1, 2])
        assert not ax.texts
        labels = ax.get_legend_handles_labels()[1]
        assert labels == ["run 1 (end)", "run 2 (end)", "run 3 (end)"]
        markers = {h.get_marker() for h in ax.get_legend_handles_labels()[0]}
        assert len(markers) == 3


def test_large_step_counts_share_an_offset_instead_of_overlapping_tick_labels():
    """Fig. 4/5/7 step axes up to 2e5: tick labels are 0.0 ... 2.0 with a x10^5 offset (not 100000120000)."""
    from figures._style import new_figure

    with style_context():
        fig, ax = new_figure()
        ax.plot([0, 200_000], [0, 1])
        ax.set_xlabel("step")
        sl_common._tidy_step_axes(fig)
        fig.canvas.draw()
        labels = [t.get_text().replace("$\\mathdefault{", "").replace("}$", "") for t in ax.get_xticklabels()]
        assert "10^{5}" in ax.xaxis.get_major_formatter().get_offset()
        assert labels and all(len(lab) <= 5 for lab in labels if lab), labels


def test_fig6_heat_maps_have_colour_bars():
    spec, ds = _build("fig6", "tiny")
    fig = registry.render(spec, ds)
    with style_context():
        labels = [ax.get_ylabel() for ax in fig.get_axes()]
    assert "|field|" in labels and any("R_M" in lab for lab in labels)


def test_transformer_checks_can_fail():
    """Figs. 8-10: the seed-mean checks decide with a t interval; a run with no alignment fails the alignment check
    of Fig. 9 (which used to pass as 'partial'), a fully aligned one fails 'partial'."""
    from figures import _single_location_transformer as tr

    rng = np.random.default_rng(1)

    def fig9_ds(key, value):
        data = {
            f"{p}_{h}_{i}": (("seed", "time"), np.full((8, 2), x) + 0.01 * rng.standard_normal((8, 2)))
            for p, x in (("kappa", key), ("nu", value))
            for h in range(2)
            for i in range(2)
        }
        data["excess_risk"] = (("seed", "time"), np.full((8, 2), 0.4) + 0.01 * rng.standard_normal((8, 2)))
        data["null_excess"] = ((), 1.0)
        return xr.Dataset(
            data, coords={"step": ("time", [0, 10])}, attrs={"d": 80, "L": 10, "alpha": 5e-3, "rate": 5e-4}
        )

    status = lambda ds: {c.name.split("(")[0].strip(): c.passed for c in tr.checks_fig9(ds)}  # noqa: E731
    none, full, partial = fig9_ds(0.02, 0.02), fig9_ds(0.99, 0.99), fig9_ds(0.4, 0.7)
    assert status(partial) == {k: True for k in status(partial)}
    assert not status(none)["Sec. 8.8: some alignment"]
    assert not status(full)["Sec. 8.8: alignment only partial"]
    check = mean_check("m", [0.5, 0.52, 0.48, 0.51], above=0.7, tolerance="t")
    assert not check.passed and check.n_seeds == 4


def test_transformer_module_hook_is_guarded():
    """The Transformer figures register through the guarded import in figures/single_location/__init__.py."""
    names = registry.REGISTRY.names("single_location")
    assert {f"single_location.{n}" for n in OURS} <= set(names)


def test_fig5_large_batch_noise_is_explained_only_in_the_setting_it_was_measured_in():
    from figures.single_location.stochastic import _large_batch_noise

    attrs = {"d": 80, "L": 10, "alpha": 1e-3, "batch_lb": 100}
    assert _large_batch_noise(xr.Dataset(attrs=attrs)).kind == "explained"
    for changed in ({"batch_lb": 20}, {"d": 20}, {"alpha": 1e-2}):  # tiny, or any setting not measured: no cover
        assert _large_batch_noise(xr.Dataset(attrs={**attrs, **changed})) is None
