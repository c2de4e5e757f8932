"""The shared look of every figure: what a line *means* decides how it is drawn (STYLE.md §2.11).

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


def new_figure(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None,
               squeeze: bool = True, **subplot_kw) -> tuple[Figure, object]:
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


def plot_empirical_band(ax, x, mean, lo, hi, *, label: str | None = "empirical", color: str | None = None,
                        alpha: float = 0.25, n_markers: int = 12, **kwargs):
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
        raise ValueError(f"x, mean, lo, hi must have the same shape; got {x.shape}, {mean.shape}, {lo.shape}, "
                         f"{hi.shape}")
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
        themselves (the spread of single runs, e.g. the 95% percentile band of single_location.md §8).
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
