"""Single-location figures (figures/single_location.py): every figure builds at the tiny preset (data, plot, gaps,
checks), the closed-form figures pass their theorem checks at the quick preset (the spec's distributional predictions
of Sec. 8.2, 8.3, 8.5, 8.6 and 7.4), and the Fig. 5 overlay aligns the torch and closed-form variables."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from closedform import single_location as sl
from figures import registry
from figures import single_location as fsl
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
    assert len(checks) >= 4
    failed = [c for c in checks if not c.passed]
    assert not failed, failed


def test_fig3_matches_closed_forms():
    spec, ds = _build("fig3", "tiny")
    for c in spec.checks(ds):
        assert c.passed, c
    i = int(np.nonzero(ds.L.values == 10)[0][0])
    task = sl.SingleLocation(d=400, L=10)
    assert ds.oracle_fixed.values[i] == pytest.approx(float(sl.oracle_risk(task, 0.1)), rel=1e-14)


def test_fig5_overlay_aligns_torch_and_closed_form():
    """Fig. 5 data: SGD and deterministic PGD on the same step grid, PGD started at each seed's step-0 scalars."""
    spec, ds = _build("fig5", "tiny")
    sgd, pgd = ds.sel(source="sgd"), ds.sel(source="pgd")
    for v in fsl.STATE:  # same initial scalars, exactly
        np.testing.assert_array_equal(sgd[v].values[:, 0], pgd[v].values[:, 0])
    np.testing.assert_allclose(sgd.excess_risk.values[:, 0], pgd.excess_risk.values[:, 0], rtol=1e-13)
    rows = spec.gaps(ds)
    assert {r.quantity for r in rows} == {"|kappa|", "|nu|", "excess_risk", "distance_to_manifold"}
    assert all(r.d == 20 for r in rows)
    assert all(r.gap_se == 0.0 for r in rows if r.time == 0)  # identical starts


def test_transformer_module_hook_is_guarded():
    """The Transformer figures register through the guarded import at the end of figures/single_location.py."""
    names = registry.REGISTRY.names("single_location")
    assert {f"single_location.{n}" for n in OURS} <= set(names)
