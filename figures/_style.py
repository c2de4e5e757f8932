"""The shared look of every figure: what a line *means* decides how it is drawn.

=================  ==========================================  ===================================================
source             helper                                      drawn as
=================  ==========================================  ===================================================
closed form        :func:`plot_theory`                         solid line
reduced ODE / map  :func:`plot_reduced`                        dashed line
learned (torch)    :func:`plot_empirical_band`                 dotted line with sparse markers (mean over seeds)
                                                               and a shaded band (see :func:`band_over_seeds`)
=================  ==========================================  ===================================================

Colours come from Paul Tol's colour-blind-safe "bright" scheme (:data:`TOL_BRIGHT`, also the axes colour cycle of
``style.mplstyle``); give the same quantity the same colour in every source, so a panel reads as "colour = quantity,
line style = source".

Figures are built without pyplot: :func:`new_figure` returns a ``matplotlib.figure.Figure`` (no global figure
manager, no backend switch, nothing to close), and saving renders through Agg. :func:`style_context` resets matplotlib
to its defaults and applies ``style.mplstyle``; the framework calls every ``plot(ds)`` and every save inside it, so the
output does not depend on a user's ``matplotlibrc``. Output bytes are deterministic: PNG without the ``Software`` tag,
PDF without ``CreationDate``, SVG with a fixed hash salt (:data:`SAVE_METADATA`).
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure
from scipy.special import ndtri

from dynamics.validation import check_choice, check_in_range, check_int

STYLE_PATH = Path(__file__).with_name("style.mplstyle")
"""The shared matplotlib style file."""

TOL_BRIGHT: dict[str, str] = {
    "blue": "#4477AA",
    "red": "#EE6677",
    "green": "#228833",
    "yellow": "#CCBB44",
    "cyan": "#66CCEE",
    "purple": "#AA3377",
    "grey": "#BBBBBB",
}
"""Paul Tol's "bright" qualitative colours (colour-blind safe), in cycle order."""

SAVE_METADATA: dict[str, dict] = {
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "ModDate": None},
    "svg": {"Date": None},
}
"""``savefig(metadata=...)`` per format: drops the time stamps and version tags that would change the bytes."""

BAND_METHODS = ("se", "percentile")


@contextlib.contextmanager
def style_context() -> Iterator[None]:
    """Reset matplotlib's rcParams to the defaults, apply ``style.mplstyle``, restore everything on exit."""
    with matplotlib.style.context(str(STYLE_PATH), after_reset=True):
        yield


def new_figure(
    nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None, squeeze: bool = True, **subplot_kw
) -> tuple[Figure, object]:
    """A pyplot-free ``Figure`` and its axes (as ``Figure.subplots``); call inside :func:`style_context`.

    Parameters
    ----------
    nrows, ncols : int
        Grid of panels.
    figsize : (float, float), optional
        Inches; default from the style (6.4 x 4.0), widened by ``ncols`` for multi-panel figures.
    squeeze : bool
        As ``matplotlib.pyplot.subplots``: a single ``Axes`` for a 1 x 1 grid.
    """
    nrows = check_int("nrows", nrows, min_value=1)
    ncols = check_int("ncols", ncols, min_value=1)
    if figsize is None:
        figsize = (min(3.2 * ncols, 13.0), 2.8 * nrows) if (nrows, ncols) != (1, 1) else None
    fig = Figure(figsize=figsize)
    axes = fig.subplots(nrows, ncols, squeeze=squeeze, subplot_kw=subplot_kw or None)
    return fig, axes


def plot_theory(ax, x, y, *, label: str | None = "theory", color: str | None = None, **kwargs):
    """Draw a closed-form curve: solid line. Returns the ``Line2D``."""
    kwargs.setdefault("linewidth", 1.8)
    (line,) = ax.plot(np.asarray(x), np.asarray(y), linestyle="-", label=label, color=color, **kwargs)
    return line


def plot_reduced(ax, x, y, *, label: str | None = "reduced ODE", color: str | None = None, **kwargs):
    """Draw a reduced-dynamics curve (ODE or discrete map): dashed line. Returns the ``Line2D``."""
    kwargs.setdefault("linewidth", 1.6)
    (line,) = ax.plot(np.asarray(x), np.asarray(y), linestyle="--", label=label, color=color, **kwargs)
    return line


def plot_empirical_band(
    ax,
    x,
    mean,
    lo,
    hi,
    *,
    label: str | None = "empirical",
    color: str | None = None,
    alpha: float = 0.25,
    n_markers: int = 12,
    **kwargs,
):
    """Draw learned trajectories: the mean over seeds (dotted, sparse markers) and a shaded band ``[lo, hi]``.

    Parameters
    ----------
    x, mean, lo, hi : array_like, same shape (n_times,)
        Time axis, mean over seeds and the band's edges (e.g. from :func:`band_over_seeds`).
    n_markers : int
        About how many markers to draw along the curve (they mark *measured* points without hiding the band).

    Returns
    -------
    (Line2D, PolyCollection)
    """
    x, mean, lo, hi = (np.asarray(a, dtype=np.float64) for a in (x, mean, lo, hi))
    if not (x.shape == mean.shape == lo.shape == hi.shape):
        raise ValueError(
            f"x, mean, lo, hi must have the same shape; got {x.shape}, {mean.shape}, {lo.shape}, {hi.shape}"
        )
    n_markers = check_int("n_markers", n_markers, min_value=1)
    kwargs.setdefault("marker", "o")
    kwargs.setdefault("markevery", max(1, x.size // n_markers))
    kwargs.setdefault("linewidth", 1.3)
    (line,) = ax.plot(x, mean, linestyle=":", label=label, color=color, **kwargs)
    band = ax.fill_between(x, lo, hi, color=line.get_color(), alpha=alpha, linewidth=0)
    return line, band


def band_over_seeds(samples, *, axis: int = 0, method: str = "se", level: float = 0.95):
    """Mean over seeds and a band around it.

    Parameters
    ----------
    samples : array_like
        Values with the seeds along ``axis`` (at least 2 seeds).
    method : {"se", "percentile"}
        ``"se"``: mean +- z * SE with z the two-sided normal quantile of ``level`` (a confidence band for the mean;
        SE = sample std (ddof=1) / sqrt(n_seeds)). ``"percentile"``: the central ``level`` range of the seeds
        themselves (the spread of single runs, e.g. the 95% percentile band of docs/models/single_location.md §8).
    level : float in (0, 1)

    Returns
    -------
    mean, lo, hi : ndarray
        ``samples`` reduced over ``axis``.
    """
    check_choice("method", method, BAND_METHODS)
    level = check_in_range("level", level, 0.0, 1.0, low_open=True, high_open=True)
    samples = np.asarray(samples, dtype=np.float64)
    n = samples.shape[axis]
    if n < 2:
        raise ValueError(f"samples must hold at least 2 seeds along axis {axis}; got {n}")
    mean = samples.mean(axis=axis)
    if method == "se":
        half = ndtri(0.5 + level / 2) * samples.std(axis=axis, ddof=1) / np.sqrt(n)
        return mean, mean - half, mean + half
    lo, hi = np.percentile(samples, [50 * (1 - level), 50 * (1 + level)], axis=axis)
    return mean, lo, hi


def plot_seed_band(ax, x, samples, *, method: str = "se", level: float = 0.95, axis: int = 0, **kwargs):
    """Draw ``samples`` (seeds along ``axis``) as :func:`plot_empirical_band` of :func:`band_over_seeds`.

    ``method``, ``level`` and ``axis`` go to :func:`band_over_seeds`; the other keywords (``label``, ``color``,
    ``alpha``, matplotlib line properties) to :func:`plot_empirical_band`, whose ``(Line2D, PolyCollection)`` is
    returned.
    """
    mean, lo, hi = band_over_seeds(samples, axis=axis, method=method, level=level)
    return plot_empirical_band(ax, x, mean, lo, hi, **kwargs)


def figure_bytes(fig: Figure, fmt: str = "png") -> bytes:
    """Render ``fig`` to bytes in ``fmt`` (png, pdf or svg) with deterministic metadata, inside the style."""
    check_choice("fmt", fmt, tuple(SAVE_METADATA))
    buf = io.BytesIO()
    with style_context():
        fig.savefig(buf, format=fmt, metadata=SAVE_METADATA[fmt])
    return buf.getvalue()


def save_figure(fig: Figure, stem: str | os.PathLike, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Write ``fig`` to ``<stem>.<fmt>`` for each format, atomically and deterministically; return the paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        data = figure_bytes(fig, fmt)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        paths.append(path)
    return paths


# ----------------------------------------------------------------------------------------------------------------
# Layout rules for the report: colour bars on heat maps, at most MAX_PANELS_PER_ROW panels a row
# ----------------------------------------------------------------------------------------------------------------
MAX_PANELS_PER_ROW = 3
"""At most this many panels side by side: at the report's page width (about 1 000 px for a 6.4-inch-wide figure at
150 dpi scaled down) a fourth panel shrinks tick labels and legends below ~7 px, where they no longer read."""

PANEL_SIZE = (3.6, 3.0)
"""Inches per panel used by :func:`panel_grid` (wide enough for a legend of three short entries)."""


def panel_grid(
    n_panels: int,
    *,
    max_per_row: int = MAX_PANELS_PER_ROW,
    panel_size: tuple[float, float] = PANEL_SIZE,
    sharex: bool = False,
    sharey: bool = False,
    **subplot_kw,
) -> tuple[Figure, list]:
    """A figure of ``n_panels`` panels, at most ``max_per_row`` a row (rows added as needed); returns
    ``(fig, axes)`` with ``axes`` a flat list of exactly ``n_panels`` Axes (unused grid cells are removed).

    Use it instead of ``new_figure(1, n)`` for ``n > 3`` so legends and tick labels read at page width; the figure
    grows with the number of rows instead of shrinking the panels.
    """
    n_panels = check_int("n_panels", n_panels, min_value=1)
    max_per_row = check_int("max_per_row", max_per_row, min_value=1, max_value=MAX_PANELS_PER_ROW)
    ncols = min(n_panels, max_per_row)
    nrows = -(-n_panels // ncols)
    fig = Figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows))
    grid = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey, subplot_kw=subplot_kw or None)
    axes = list(grid.ravel())
    for ax in axes[n_panels:]:
        ax.remove()
    return fig, axes[:n_panels]


def add_colorbar(ax, mappable, *, label: str, **kwargs):
    """Attach a labelled colour bar for ``mappable`` (what ``imshow``/``pcolormesh``/``contourf`` returned) beside
    ``ax``; returns the ``Colorbar``. Every heat map in a figure needs one (the report's layout rule).
    """
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"label must say what the colours measure; got {label!r}")
    kwargs.setdefault("shrink", 0.9)
    kwargs.setdefault("pad", 0.02)
    cbar = ax.figure.colorbar(mappable, ax=ax, **kwargs)
    cbar.set_label(label)
    return cbar


def plot_heatmap(ax, z, *, x=None, y=None, label: str, cmap: str | None = None, **kwargs):
    """Draw ``z`` (rows along y, columns along x) as a heat map with its colour bar; returns ``(mesh, colorbar)``.

    ``x``/``y`` are the column/row coordinates (cell centres or edges, as ``pcolormesh`` accepts); default the
    indices. ``label`` names the coloured quantity on the colour bar. Grid lines are switched off on ``ax``.
    """
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2:
        raise ValueError(f"z must be a 2-d array; got shape {z.shape}")
    x = np.arange(z.shape[1]) if x is None else np.asarray(x)
    y = np.arange(z.shape[0]) if y is None else np.asarray(y)
    mesh = ax.pcolormesh(x, y, z, cmap=cmap, shading=kwargs.pop("shading", "auto"), **kwargs)
    ax.grid(False)  # the style's grid lines would cross the cells
    return mesh, add_colorbar(ax, mesh, label=label)


def layout_problems(fig: Figure) -> list[str]:
    """What breaks the report's layout rules in ``fig``: a heat map (image, mesh or filled contour) without a colour
    bar (its own, or a shared one drawn for the same colour map and limits), more than :data:`MAX_PANELS_PER_ROW`
    panels in a row (colour-bar axes not counted, a twin axis counted with its host), a panel squeezed into a strip
    (:data:`MIN_PANEL_SHARE`), one small legend for many panels (:data:`MIN_SHARED_LEGEND_PT`), a legend over a curve
    (:data:`MAX_LEGEND_COVER`), a curve squeezed into a small part of a shared x-axis (:data:`MIN_CURVE_SPAN`).
    Empty if none.
    """
    from matplotlib.collections import QuadMesh
    from matplotlib.contour import ContourSet
    from matplotlib.image import AxesImage

    def scale(artist):  # what a colour bar shows: the colour map and its limits
        norm = artist.norm
        return (artist.get_cmap().name, type(norm).__name__, norm.vmin, norm.vmax)

    problems = []
    cbar_axes, shown = set(), set()
    for ax in fig.axes:
        for artist in list(ax.images) + list(ax.collections):
            cb = getattr(artist, "colorbar", None)
            if cb is not None:
                cbar_axes.add(cb.ax)
                shown.add(scale(artist))
    panels = [ax for ax in fig.axes if ax not in cbar_axes and ax.get_visible()]
    for ax in panels:
        for artist in list(ax.images) + list(ax.collections):
            heat = isinstance(artist, AxesImage | QuadMesh) or (isinstance(artist, ContourSet) and artist.filled)
            # covered by its own colour bar or by a shared one with the same colour map and limits
            if heat and getattr(artist, "colorbar", None) is None and scale(artist) not in shown:
                title = ax.get_title() or f"panel {panels.index(ax) + 1}"
                problems.append(f"heat map without a colour bar in {title!r}")
                break
    rows: dict[tuple[int, int], set] = {}
    for ax in panels:
        spec = ax.get_subplotspec()
        if spec is not None:  # a twin axis (twinx/twiny) shares its host's cell: one panel, counted once
            key = (id(spec.get_gridspec()), spec.rowspan.start)
            rows.setdefault(key, set()).add((spec.colspan.start, spec.colspan.stop))
    widest = max((len(cells) for cells in rows.values()), default=0)
    if widest > MAX_PANELS_PER_ROW:
        problems.append(f"{widest} panels in one row (at most {MAX_PANELS_PER_ROW}: use panel_grid or a larger figure)")
    problems += _drawn_layout_problems(fig, panels)
    return problems


MIN_PANEL_SHARE = 0.3
"""A panel drawn on less than this share of its grid cell (e.g. an equal-aspect image of a 1 x n matrix) is a strip."""

MIN_SHARED_LEGEND_PT = 8.0
"""A figure of more than 6 panels with a single legend needs at least this font size for it."""

MAX_LEGEND_COVER = 0.05
"""A legend box over more than this share of a curve's points hides it."""

MIN_CURVE_SPAN = 0.15
"""A curve over less than this share of an x-axis that another curve spans (>= 80 %) is squeezed against an edge."""


def _drawn_layout_problems(fig: Figure, panels: list) -> list[str]:
    """The rules that need the drawn figure: strips, a small shared legend, a legend over a curve, a curve squeezed
    into a small part of the x-axis that another curve fills.
    """
    problems = []
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()  # positions after aspect adjustment and legend placement
    renderer = canvas.get_renderer()

    def title(ax):
        return ax.get_title() or f"panel {panels.index(ax) + 1}"

    for ax in panels:
        cell, drawn = ax.get_position(original=True), ax.get_position()
        share = (drawn.width * drawn.height) / (cell.width * cell.height) if cell.width * cell.height > 0 else 1.0
        if share < MIN_PANEL_SHARE:
            problems.append(f"{title(ax)!r} drawn on {share:.0%} of its cell (a strip: use aspect='auto')")
    legends = [ax.get_legend() for ax in panels if ax.get_legend() is not None] + list(fig.legends)
    if len(panels) > 6 and len(legends) == 1:
        size = min((t.get_fontsize() for t in legends[0].get_texts()), default=MIN_SHARED_LEGEND_PT)
        if size < MIN_SHARED_LEGEND_PT:
            problems.append(
                f"one {size:g}-pt legend for {len(panels)} panels (at least {MIN_SHARED_LEGEND_PT:g} pt, "
                "or a legend per panel)"
            )
    for ax in panels:
        lines = [
            ln
            for ln in ax.get_lines()
            if ln.get_visible()
            and ln.get_transform() == ax.transData
            and not (ln.get_label() or "").startswith("_child")
        ]
        data = []
        for ln in lines:
            xy = np.asarray(ln.get_xydata(), dtype=float)
            xy = xy[np.all(np.isfinite(xy), axis=1)] if xy.ndim == 2 and xy.size else np.empty((0, 2))
            if len(xy) >= 10 and np.ptp(xy[:, 0]) > 0 and np.ptp(xy[:, 1]) > 0:  # a curve, not a reference line
                data.append(xy)
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            box = legend.get_window_extent(renderer)
            for xy in data:
                px = ax.transData.transform(xy)
                inside = (px[:, 0] >= box.x0) & (px[:, 0] <= box.x1) & (px[:, 1] >= box.y0) & (px[:, 1] <= box.y1)
                if inside.mean() > MAX_LEGEND_COVER:
                    problems.append(f"legend over {inside.mean():.0%} of a curve in {title(ax)!r}")
                    break
        if len(data) >= 2:
            log = ax.get_xscale() == "log"
            xs = [np.log10(xy[:, 0][xy[:, 0] > 0]) if log else xy[:, 0] for xy in data]
            xs = [x for x in xs if x.size]
            width = np.ptp(np.concatenate(xs)) if xs else 0.0
            spans = [np.ptp(x) / width for x in xs] if width > 0 else [1.0]
            if max(spans) >= 0.8 and min(spans) < MIN_CURVE_SPAN:
                problems.append(
                    f"a curve spans {min(spans):.0%} of the x-axis in {title(ax)!r} (another spans "
                    f"{max(spans):.0%}: a separate panel or a shared, shorter axis)"
                )
    return problems
