"""Shared helpers of the per-model figure tests (``tests/test_figures_<model>.py``).

That every registered figure builds at the ``tiny`` preset twice with identical data and renders a non-blank PNG is
checked once, for all models, by ``tests/figures/test_framework.py::test_registered_figure_builds_at_tiny_size``. The
per-model files build each of their figures once at ``tiny`` (no cache) with :func:`build_tiny`, check the time budget
and the well-formedness of the gap rows and checks with :func:`check_tiny_build`, and add the model-specific facts.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import numpy as np
import xarray as xr

from figures import _style, registry
from figures.registry import CheckResult, Explanation, GapRow, compare_rows


def build_tiny(names: Sequence[str]) -> dict:
    """Build each figure of ``names`` once at ``tiny`` on the CPU without a cache: ``{name: (result, seconds)}``."""
    registry.discover()
    out = {}
    for name in names:
        t0 = time.perf_counter()
        res = registry.build(name, "tiny", device="cpu", cache_dir=None)
        out[name] = (res, time.perf_counter() - t0)
    return out


def assert_gap_rows(rows) -> None:
    """Gap rows are present, typed, and finite: theory and mean finite, a non-negative SE."""
    assert rows and all(isinstance(g, GapRow) for g in rows)
    for g in rows:
        assert np.isfinite(g.theory) and np.isfinite(g.mean) and g.se >= 0


def assert_check_results(rows) -> None:
    """Checks are present and typed."""
    assert rows and all(isinstance(c, CheckResult) for c in rows)


def assert_readable_layout(fig) -> None:
    """The report's layout rules (:func:`figures._style.layout_problems`): colour bars on heat maps, at most three
    panels a row."""
    problems = _style.layout_problems(fig)
    assert not problems, problems


def check_tiny_build(built: dict, name: str, budget_s: float, *, gaps: bool = True):
    """The figure ``name`` of :func:`build_tiny`'s ``built`` took less than ``budget_s`` seconds, its checks (and, with
    ``gaps``, its gap rows) are well formed; returns the build result for model-specific assertions."""
    res, seconds = built[name]
    assert seconds < budget_s, f"{name}: tiny build took {seconds:.1f} s"
    if gaps:
        assert_gap_rows(res.spec.gaps(res.dataset))
    assert_check_results(res.spec.checks(res.dataset))
    return res


# ----------------------------------------------------------------------------------------------------------------
# Synthetic figures for the framework tests: cheap, registered in private registries (never the package's)
# ----------------------------------------------------------------------------------------------------------------
TOY_PARAMS = {
    "tiny": {"n_times": 21, "n_seeds": 8, "sigma": 0.05},
    "quick": {"n_times": 101, "n_seeds": 10, "sigma": 0.05},
    "paper": {"n_times": 401, "n_seeds": 30, "sigma": 0.05},
}
"""Sizes of the toy figures; the report's "size vs the paper" line is computed from them."""

TOY_WHY = Explanation(reason="the Euler map is not this figure's theory (toy)", evidence="toy.decay rows (hold)")
TOY_DISAGREES = Explanation(
    reason="the toy paper's Euler map is off by 0.2 (toy)",
    kind="disagrees",
    evidence="measured gap 0.2 at every time (toy)",
)


def toy_data(cfg) -> xr.Dataset:
    """A noisy exponential decay: closed form exp(-t), its Euler map, per-seed "learned" curves = closed form plus
    Gaussian noise (so the closed form is the right theory and its rows hold at the calibrated level)."""
    p = cfg.params
    rng = np.random.default_rng(cfg.seed)
    t = np.linspace(0.0, 2.0, p["n_times"])
    theory = np.exp(-t)
    reduced = (1.0 - (t[1] - t[0])) ** np.arange(t.size)  # Euler map of x' = -x
    learned = theory + p["sigma"] * rng.standard_normal((p["n_seeds"], t.size))
    return xr.Dataset(
        {"x_theory": ("time", theory), "x_reduced": ("time", reduced), "x_learned": (("seed", "time"), learned)},
        coords={"time": t},
        attrs={"nested": {"a": [1, 2]}},
    )  # a nested attribute the framework must make netCDF-safe


def toy_plot(ds: xr.Dataset):
    fig, ax = _style.new_figure()
    _style.plot_theory(ax, ds.time, ds.x_theory)
    _style.plot_reduced(ax, ds.time, ds.x_reduced)
    _style.plot_seed_band(ax, ds.time.values, ds.x_learned.values)
    ax.set(xlabel="t", ylabel="x")
    ax.legend()
    return fig


def toy_gaps(ds: xr.Dataset):
    idx = [0, ds.sizes["time"] // 2, ds.sizes["time"] - 1]
    return compare_rows("x", ds.time.values[idx], ds.x_theory.values[idx], ds.x_learned.values[:, idx], d=7)


def toy_checks(ds: xr.Dataset):
    final = float(ds.x_theory[-1])
    return [
        CheckResult(
            name="x(2) = exp(-2)",
            passed=abs(final - np.exp(-2)) < 1e-12,
            measured=final,
            expected=float(np.exp(-2)),
            tolerance="1e-12 (float64 round-off)",
        )
    ]


def toy_biased_gaps(ds: xr.Dataset):
    """Rows for the report's statuses: a theory off by 0.2 (40 seed SDs of 0.05: ``fails``), the same with an
    explanation (``explained``) and with a disagreement (``disagrees``), and a theory off by 0.01 inside an
    allowance of 0.05 (``consistent``: the interval of 8 seeds, +-0.1, is wider than the band)."""
    idx = [ds.sizes["time"] // 2, ds.sizes["time"] - 1]
    rows = compare_rows(
        "x vs Euler map", ds.time.values[idx], ds.x_reduced.values[idx] + 0.2, ds.x_learned.values[:, idx]
    )
    rows += compare_rows(
        "x vs Euler map (explained)",
        ds.time.values[idx],
        ds.x_reduced.values[idx] + 0.2,
        ds.x_learned.values[:, idx],
        explanation=TOY_WHY,
    )
    rows += compare_rows(
        "x with allowance",
        ds.time.values[idx],
        ds.x_theory.values[idx] + 0.01,
        ds.x_learned.values[:, idx],
        allowance=0.05,
        allowance_source="toy bound 0.05 (test)",
    )
    rows += compare_rows(
        "x vs the paper's Euler map",
        ds.time.values[idx],
        ds.x_reduced.values[idx] + 0.2,
        ds.x_learned.values[:, idx],
        explanation=TOY_DISAGREES,
    )
    return rows


def heat_plot(ds: xr.Dataset):
    """Four panels on the report's layout rule: a 2 x 2 grid, a heat map with its colour bar."""
    fig, axes = _style.panel_grid(4)
    _style.plot_heatmap(axes[0], np.outer(ds.x_theory.values, ds.x_theory.values), label="x(s) x(t)")
    for ax in axes[1:]:
        _style.plot_theory(ax, ds.time, ds.x_theory)
    return fig


def broken_data(cfg):
    raise FloatingPointError("toy divergence")


def synthetic_registry(with_broken: bool = False, with_verdicts: bool = False) -> registry.Registry:
    """A private registry of toy figures (models ``toy`` and ``empty``); picklable through its ``factory`` so the
    parallel report can rebuild it in worker processes."""
    reg = registry.Registry(
        models=("toy", "empty"), package=None, factory=functools.partial(synthetic_registry, with_broken, with_verdicts)
    )
    reg.register(
        name="toy.decay",
        model="toy",
        paper="Toy (2026), Fig. 1",
        spec="toy.md §1",
        caption="Exponential decay.",
        unrecoverable=("sigma = 0.05 (toy default)",),
        params=TOY_PARAMS,
        plot=toy_plot,
        gaps=toy_gaps,
        checks=toy_checks,
    )(toy_data)
    reg.register(
        name="toy.heat",
        model="toy",
        paper="Toy (2026), Fig. 3",
        spec="toy.md §3",
        caption="A heat map.",
        params=TOY_PARAMS,
        plot=heat_plot,
    )(toy_data)
    if with_verdicts:
        reg.register(
            name="toy.biased",
            model="toy",
            paper="Toy (2026), Fig. 4",
            spec="toy.md §4",
            caption="Biased comparator.",
            params=TOY_PARAMS,
            plot=toy_plot,
            gaps=toy_biased_gaps,
        )(toy_data)
        reg.register(
            name="toy.paper_only",
            model="toy",
            paper="Toy (2026), Fig. 5",
            spec="toy.md §5",
            caption="Needs the paper's size.",
            params=TOY_PARAMS,
            plot=toy_plot,
            gaps=toy_biased_gaps,
            paper_only="the bias vanishes only at 401 times",
        )(toy_data)
    if with_broken:
        reg.register(
            name="toy.broken",
            model="toy",
            paper="Toy (2026), Fig. 2",
            spec="toy.md §2",
            caption="Always fails.",
            params=TOY_PARAMS,
            plot=toy_plot,
        )(broken_data)
    return reg
