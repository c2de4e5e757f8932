"""Paper figures and the theory-vs-practice report (STYLE.md §2.11).

Each figure of the papers is a registered pair ``data(cfg) -> xarray.Dataset`` (cached under ``results/``) and a pure
``plot(ds) -> Figure``, declared in ``figures/<model>.py`` with :func:`register`; see :mod:`figures.registry` for the
contract and a worked example, :mod:`figures._style` for the shared look, :mod:`figures.report` for the HTML report.

Command line: ``python -m figures list``, ``python -m figures make NAME... [--preset quick|paper] [--device ...]``,
``python -m figures report [--preset ...] [--out DIR]``.
"""

from figures._style import (
    TOL_BRIGHT,
    band_over_seeds,
    new_figure,
    plot_empirical_band,
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
    FigureSpec,
    GapRow,
    Registry,
    build,
    discover,
    gap_rows,
    make,
    register,
    render,
)
from figures.report import build_report

__all__ = [
    "DEVICES", "MODELS", "PRESETS", "REGISTRY", "TOL_BRIGHT", "BuildResult", "CheckResult", "FigureSpec", "GapRow",
    "Registry", "RunConfig", "band_over_seeds", "build", "build_report", "discover", "gap_rows", "make",
    "new_figure", "plot_empirical_band", "plot_reduced", "plot_theory", "register", "render", "save_figure",
    "style_context",
]
