"""Paper figures and the theory-vs-practice report.

Each figure of the papers is a registered pair ``data(cfg) -> xarray.Dataset`` (cached under ``results/``) and a pure
``plot(ds) -> Figure``, declared in ``figures/<model>.py`` with :func:`register`; see :mod:`figures.registry` for the
contract and a worked example, the shared look (a matplotlib style and the layout helpers ``panel_grid``,
``add_colorbar``, ``plot_heatmap``, exported here), :mod:`figures.report` for the HTML report and ``summary.json``.
Verdicts use the calibrated test of :func:`dynamics.compare` through :func:`compare_rows`.

Command line: ``python -m figures list``, ``params NAME``, ``make NAME... [--preset ...] [--set key=value]``,
``report [--preset ...] [--set FIGURE.key=value] [--scheduler local|ADDRESS]``, ``estimate``; every verb has a page in
the documentation's command-line reference.
"""

from figures._style import (
    TOL_BRIGHT,
    add_colorbar,
    band_over_seeds,
    new_figure,
    panel_grid,
    plot_empirical_band,
    plot_heatmap,
    plot_reduced,
    plot_theory,
    save_figure,
    style_context,
)
from figures.presets import DEVICES, PRESETS, RunConfig
from figures.registry import (
    MODELS,
    REGISTRY,
    BuildResult,
    CheckResult,
    Explanation,
    FigureSpec,
    GapRow,
    Registry,
    build,
    compare_rows,
    discover,
    gap_rows,
    make,
    register,
    render,
)
from figures.report import build_report

__all__ = [
    "DEVICES",
    "MODELS",
    "PRESETS",
    "REGISTRY",
    "TOL_BRIGHT",
    "BuildResult",
    "CheckResult",
    "Explanation",
    "FigureSpec",
    "GapRow",
    "Registry",
    "RunConfig",
    "add_colorbar",
    "band_over_seeds",
    "build",
    "build_report",
    "compare_rows",
    "discover",
    "gap_rows",
    "make",
    "new_figure",
    "panel_grid",
    "plot_empirical_band",
    "plot_heatmap",
    "plot_reduced",
    "plot_theory",
    "register",
    "render",
    "save_figure",
    "style_context",
]
