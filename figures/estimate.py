"""Cost estimates of the figures at a preset, from runs measured on the way from the ``tiny`` sizes to the preset's.

Work. A figure's amount of computation is summarised by its *work*, a number computed from its registered parameters
by their names (:func:`work`): time axes (steps, iterations, a corpus's tokens) add up and epochs multiply them,
repetitions (seeds, runs, draws, starts), configuration lists and sizes multiply, and of the sample counts (batch,
training and test set sizes) the largest counts; a list of positive integers counts as the sum of its entries (the
largest for sample counts), any other list as its length; parameters that do not set the amount of computation
(:data:`NOT_WORK`: logging and saving intervals, seeds of an initialisation, plotting offsets) and non-integers are
left out.

Measurement. The work only orders sizes; how the cost grows with it is measured. Each figure's data function runs,
single-threaded and timed in process CPU seconds (wall seconds on a GPU; a busy machine does not inflate CPU time),
first at the tiny sizes with another seed to compile the numba kernels and warm caches (its excess over the second
call is reported as ``overhead_s`` and is not counted in the measurement budget: a cold numba cache can take
minutes to compile; the other seed keeps a figure that memoises its runs from reusing them), then at
sizes a fraction ``s`` of the way from the tiny preset's to the estimated preset's on a log scale (:func:`between`:
every size ``tiny^(1 - s) target^s``, so the measured runs scale the way the target does, seeds, sizes and steps
together): ``s = 0`` (the tiny sizes), then steps of :data:`STEP` times more work (smaller where that leaves room
for two steps before half way), until the cost above the tiny run's is at least the tiny run's and 0.2 s, half the
way (:data:`MAX_FRACTION`) or the time budget (:data:`BUDGET_S`) is reached (a point less than twice the last one's
work is not taken: it would not show the growth; sizes a figure refuses are retried rounded to the divisibility both
presets share). The cost is fitted as ``seconds(W) = a + c W^p`` through the tiny point (mostly fixed cost:
imports, compiled kernels, closed forms) and the last two (:func:`fit`), and evaluated at the preset's work; a
preset whose estimate is at most :data:`DIRECT_S` is then run itself, and its measurement is the estimate.

Length. A path that scales every size together cannot see a cost per step that is flat at small widths (fixed
per-step overhead: Python, small kernels) and grows with the width at the preset's (a training step of a large batch
and many seeds): measured where the overhead dominates, the fitted exponent extrapolates the overhead. So where the
preset's time axes (:data:`TIME_LIKE`, :func:`duration`) are longer than the tiny preset's, the preset's own sizes
are then run for the tiny length (:func:`between` with ``s = 1, s_time = 0``; where the fit says that run would not
fit the budget, the sizes are first reached from the tiny sizes at the tiny length in steps of :data:`STEP` times
the work, each step expected from the measured one before it: a fit through points where fixed per-step costs
dominate overestimated ``scan_snap.gap_T``'s quick sizes tenfold) and then for :data:`STEP`, :data:`STEP` squared,
... times it, as long as the budget allows (the longest runs leave the least to extrapolate,
and a cost per step measured over a few dozen steps can be swamped by a fixed cost many times larger). The
estimate is the longest run plus the cost per unit of length measured between the first run and it, times the
length still missing: only the length is extrapolated, linearly (runs of steps one after the other), and the width
is measured, not fitted. Where the budget leaves room for one length only, the cost at the preset's sizes is taken
to grow with the length in the proportion measured at smaller sizes run for longer lengths (the length share: the
largest sizes already run at the tiny length, tiny or the climb's, whose doubled length fits what is left of the
budget): runs that stop once converged hardly grow with their step limit.
Because the exponent ``p`` is measured along the preset's own direction, a figure whose cost grows more slowly
than its work (evaluation grids that add up where the work multiplies, early stops) or faster (quadratic sizes) is
estimated from its measured growth, not from the work's. Memory is the peak of Python-traced allocations (numpy
arrays included, torch's own allocator not) in extra calls at the tiny sizes and, at the largest fraction of the
way the path measured in at most a second, its width at the tiny length and the tiny width at its length: the
width's peak extrapolated as a power law, the length's excess added in proportion (tracing slows Python code
several times, so the timed calls are not traced).
A figure that shares its data with another costs nothing of its own.

The estimate is measured on the device asked for (``cuda`` needs a CUDA device here); without one, ``--device cuda``
prints the CPU measurement and says so. It extrapolates at least the square root of the way in work, so it is an
order of magnitude with a measured exponent, not a schedule; the check is that quick-preset estimates land within a
factor of 2 of measured quick builds for at least 90 % of the figures (tests/figures/test_estimate.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import re
import sys
import time
import tracemalloc
from collections.abc import Mapping, Sequence

from figures.presets import DEFAULT_SEED, RunConfig, check_preset, resolve_device
from figures.registry import REGISTRY, Registry

__all__ = [
    "SMALL_PRESET",
    "NOT_WORK",
    "TIME_LIKE",
    "EPOCHS",
    "REPLICATES",
    "SAMPLES",
    "work",
    "FigureEstimate",
    "STEP",
    "MAX_FRACTION",
    "BUDGET_S",
    "DIRECT_S",
    "between",
    "LOGGING",
    "duration",
    "fit",
    "measure",
    "estimate",
    "format_table",
    "advice",
    "total_seconds",
]

logger = logging.getLogger(__name__)

SMALL_PRESET = "tiny"
"""The preset measured."""

NOT_WORK = re.compile(r"(log_every|save|every|seed$|init_seed|offset|freeze|map_rows|^H$|^K$|^C$)")
"""Parameter names that do not scale the computation (matched with ``re.search``)."""

TIME_LIKE = re.compile(r"(step|iter|epoch|tokens|^n_t$|^T_|^t1$)")
"""Time axes: their values add up (runs one after the other); a positive float counts here too (an integration's end
time ``t1``), where other floats (rates, tolerances) are left out. A corpus's token count is the length of one epoch
(steps = tokens / (batch x window))."""

EPOCHS = re.compile(r"epoch")
"""Passes over the data: a time axis that multiplies the others (each epoch runs all of them) where they add up."""

LOGGING = re.compile(r"(log_every|save|every)")
"""Logging and saving intervals: they follow the time axes when :func:`between` moves those alone."""

REPLICATES = re.compile(r"(seed|runs|draws|starts|^n_mc$|^n_search$)")
"""Independent repetitions: multiply."""

SAMPLES = re.compile(
    r"(batch|n_train|n_test|n_pop|prompts|eval_size|^n$|^n_big$|^n_large$|^n_small$|^n_pre$|"
    r"^n_err$|^n_torch$|^n_heldout$)"
)
"""Sample counts of one step or one evaluation: the largest one counts (training and evaluation alternate)."""


def work(params: Mapping) -> float:
    """The work of a parameter set: (sum of the time axes) x (epochs) x (product of the repetitions, the list lengths
    and the remaining sizes) x (largest sample count), an integer list counting as its sum (its largest entry for
    sample counts); a nested mapping adds its own work. Names in :data:`NOT_WORK`, non-integers and non-positive
    values are ignored.
    """
    time_sum, epochs, product, largest, nested = 0.0, 1, 1.0, 1.0, 0.0
    for name, value in params.items():
        if NOT_WORK.search(name):
            continue
        if isinstance(value, Mapping):
            nested += work(value)
            continue
        if isinstance(value, (list, tuple)):
            if not value:
                continue
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
                product *= len(value)  # a list of configurations: one run each
                continue
            # a list of counts (sizes, seeds, steps of separate runs): runs one per entry, costs add up
            value = max(value) if SAMPLES.search(name) else sum(value)
        if EPOCHS.search(name) and _positive_int(value):
            epochs *= value
            continue
        if TIME_LIKE.search(name) and isinstance(value, float) and math.isfinite(value) and value > 0:
            time_sum += value
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            continue
        if TIME_LIKE.search(name):
            time_sum += value
        elif SAMPLES.search(name):
            largest = max(largest, value)
        else:  # repetitions and sizes (grids, dimensions, vocabularies) multiply
            product *= value
    return max(time_sum, 1.0) * epochs * product * largest + nested


@dataclasses.dataclass(frozen=True, kw_only=True)
class FigureEstimate:
    """The estimate of one figure at ``preset`` on ``device`` (seconds and bytes; 0 for a figure sharing data).
    ``measured_s`` is the tiny run's CPU time, ``work_ratio`` the work at ``preset`` over the work at tiny,
    ``exponent`` the fitted ``p`` of ``seconds = a + c W^p``.
    """

    name: str
    preset: str
    device: str
    measured_s: float
    overhead_s: float
    work_ratio: float
    seconds: float
    memory_bytes: float
    exponent: float = math.nan
    lower_bound: bool = False
    shares_data_with: str | None = None
    error: str = ""


def between(
    small: Mapping, large: Mapping, s: float, residue: int | None = None, *, s_time: float | None = None
) -> dict:
    """Parameters a fraction ``s`` (in [0, 1]) of the way from ``small`` to ``large`` on a log scale: positive
    integers ``small^(1 - s) large^s`` rounded; a list has the first ``len_small^(1 - s) len_large^s`` entries of
    ``large``, for positive integers interpolated entry by entry with ``small``'s where it has one; nested mappings
    likewise; every other value is ``large``'s (rates, tolerances: the physics of the size aimed at). With
    ``residue`` r, an integer is rounded to ``r`` plus a multiple of ``gcd(small - r, large - r)``, the divisibility
    both presets share (a step count that is a multiple of a logging interval, a size of the form ``r K + 1``).
    With ``s_time``, the time axes (:data:`TIME_LIKE`, floats included) and the logging intervals (:data:`LOGGING`)
    move ``s_time`` of the way instead of ``s``: ``s=1, s_time=0`` is the large sizes run for the small length.
    """
    s_time = s if s_time is None else s_time
    if s <= 0 and s_time <= 0:
        return dict(small)
    out = {}
    for name, b in large.items():
        a = small.get(name, b)
        f = s_time if TIME_LIKE.search(name) or LOGGING.search(name) else s
        if isinstance(b, Mapping) and isinstance(a, Mapping):
            out[name] = between(a, b, s, residue, s_time=s_time)
        elif f <= 0:
            out[name] = a
        elif _positive_int(a) and _positive_int(b):
            v = a ** (1 - f) * b**f
            g = math.gcd(a - residue, b - residue) if residue is not None else 1
            out[name] = max(1, round(v) if g == 0 or g == 1 else residue + g * round((v - residue) / g))
        elif TIME_LIKE.search(name) and all(isinstance(x, float) and x > 0 for x in (a, b)):
            out[name] = a ** (1 - f) * b**f  # an end time
        elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and a and b:
            head = b[: max(1, round(len(a) ** (1 - f) * len(b) ** f))]
            if all(_positive_int(x) for x in (*a, *b)):  # sizes: entry by entry where small has one
                head = [max(1, round(x ** (1 - f) * y**f)) for x, y in zip(a, head)] + list(head[len(a) :])
            out[name] = type(b)(head)
        else:
            out[name] = b
    return out


def duration(params: Mapping) -> float:
    """The time part of :func:`work`: the sum of the time axes (:data:`TIME_LIKE`; an integer list counts as its
    sum) times the epochs (:data:`EPOCHS`), nested mappings included; 1 where there is none.
    """

    def total(p: Mapping) -> float:
        t, epochs, timed = 0.0, 1, False
        for name, value in p.items():
            if isinstance(value, Mapping):
                t += total(value)
            elif NOT_WORK.search(name) or not TIME_LIKE.search(name):
                continue
            elif EPOCHS.search(name) and _positive_int(value):
                epochs, timed = epochs * value, True
            elif isinstance(value, (list, tuple)) and value and all(_positive_int(v) for v in value):
                t, timed = t + sum(value), True
            elif _positive_int(value) or (isinstance(value, float) and math.isfinite(value) and value > 0):
                t, timed = t + value, True
        return max(t, 1.0) * epochs if timed else t

    return max(total(params), 1.0)


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _seconds(spec, params, device, seed: int = DEFAULT_SEED) -> float:
    """Seconds of one call of the figure's data function: process CPU time on a CPU, wall time on a GPU."""
    cfg = RunConfig(figure=spec.name, preset=SMALL_PRESET, device=device, params=params, seed=seed)
    clock = time.process_time if device == "cpu" else time.perf_counter
    t0 = clock()
    spec.data(cfg)
    return clock() - t0


STEP = 4.0
"""Work ratio between successive measurements on the way to the preset estimated."""

MAX_FRACTION = 0.5
"""Measurements stop half way (on a log scale of every size) to the preset estimated, so an estimate costs about the
square root of the run it estimates, or less."""

BUDGET_S = 30.0
"""Seconds of measurement per figure after which no larger point is started."""

DIRECT_S = 1.0
"""A preset whose fitted estimate is at most this many seconds is measured directly (the estimate is then the
measurement)."""


def fit(works: Sequence[float], seconds: Sequence[float]) -> dict:
    """Fit ``seconds = a + c W^p`` (``a``, ``c`` >= 0, ``p`` in [0.25, 3]) to measurements at increasing work ``W``:
    through the first (the tiny run, mostly fixed cost) and the last two points, which sets the exponent from how the
    cost grows between them; with two points, or without a cost that grows, ``p = 1`` through the first and the last;
    with one point (no larger size could be measured), the cost is taken as proportional to the work (``a = 0``,
    ``p = 1``), an upper bound where part of it is fixed, rather than the tiny cost itself.
    Returns ``{"a", "c", "p"}``.
    """
    w0, t0, wn, tn = works[0], seconds[0], works[-1], seconds[-1]
    if wn <= w0:  # one point
        return {"a": 0.0, "c": t0 / w0, "p": 1.0}
    p = 1.0
    if len(works) >= 3:
        w1, t1 = works[-2], seconds[-2]
        lo, hi = 0.25, 3.0
        if t1 > t0 and tn > t1 and w1 > w0 and wn > w1:
            target = (tn - t1) / (t1 - t0)

            def growth(q):  # (wn^q - w1^q) / (w1^q - w0^q): increasing in q
                return (wn**q - w1**q) / (w1**q - w0**q)

            if growth(lo) >= target:
                p = lo
            elif growth(hi) <= target:
                p = hi
            else:
                for _ in range(60):  # bisection to ~1e-18 of the bracket
                    mid = 0.5 * (lo + hi)
                    lo, hi = (mid, hi) if growth(mid) < target else (lo, mid)
                p = 0.5 * (lo + hi)
    c = max(tn - t0, 0.0) / (wn**p - w0**p)
    return {"a": max(t0 - c * w0**p, 0.0), "c": c, "p": p}


def measure(
    name: str, preset: str = "quick", *, device: str = "cpu", registry: Registry = REGISTRY, budget_s: float = BUDGET_S
) -> dict:
    """Measure figure ``name`` on the way from the tiny sizes to ``preset``'s (see the module docstring); return the
    fit (``a``, ``c``, ``p``: seconds ``a + c W^p``), the estimate ``seconds``, ``overhead_s`` (the first call's
    excess), ``t1`` (the tiny run), ``points`` (``(s, W, seconds)`` measured), ``wide`` (the runs at the
    preset's sizes, ``(duration, seconds)``) and ``share`` (the length share, where only one length was run),
    ``lower_bound`` (one length run at the preset's sizes, no share: the estimate is that run), ``memory_bytes``
    and the ``traced`` ``(direction, size, peak bytes)`` it comes from.
    """
    spec = registry.get(name)
    small, large = dict(spec.params[SMALL_PRESET]), dict(spec.params[preset])
    w_small, w_large = work(small), work(large)
    points: list[tuple[float, float, float]] = []

    def run(s: float) -> bool:
        """Measure the sizes ``s`` of the way (:func:`_run_rounded`), unless they are less than twice the last point's
        work (they would not show the growth); False if the figure refuses every rounding.
        """
        tried = _run_rounded(spec, small, large, device, s, skip=lambda q: s < 1 and work(q) < 2 * points[-1][1])
        if tried is not None:
            points.append((s, work(tried[0]), tried[1]))
        return tried is not None

    with _one_thread():
        # another seed: a figure that memoises its runs by configuration must not reuse them at s = 0
        first = _seconds(spec, small, device, seed=DEFAULT_SEED + 1)
        points.append((0.0, w_small, _seconds(spec, small, device)))  # the tiny sizes: a refusal raises
        spent = 2 * points[-1][2]  # the warm-up's excess (numba compiles) is a one-off, not measurement
        # at most STEP times the work a step, and two steps to MAX_FRACTION where each still doubles the work
        step = (
            min(math.log(STEP), max(MAX_FRACTION / 2 * math.log(w_large / w_small), math.log(2)))
            / math.log(w_large / w_small)
            if w_large > STEP * w_small
            else math.inf
        )
        s = 0.0
        while step < math.inf and spent < budget_s and s < MAX_FRACTION:
            if len(points) >= 3 and points[-1][2] - points[0][2] >= max(points[0][2], 0.2):
                break  # the cost that grows is measured: at least the fixed cost and 0.2 s above it
            s = min(MAX_FRACTION, s + step)
            if run(s):
                spent += points[-1][2]
        fitted = fit([w for _, w, _ in points], [t for _, _, t in points])
        if fitted["a"] + fitted["c"] * w_large ** fitted["p"] <= DIRECT_S and points[-1][0] < 1.0:
            run(1.0)  # cheap enough: measure the preset itself
            fitted = fit([w for _, w, _ in points], [t for _, _, t in points])
        wide, share = [], None  # (duration, seconds) at the preset's sizes for short lengths
        if points[-1][0] < 1.0:
            wide, share = _wide(spec, small, large, device, fitted, budget_s, points[0][2])
        memory_bytes, traced = _memory(spec, small, large, device, points)
    seconds = fitted["a"] + fitted["c"] * w_large ** fitted["p"]
    if points[-1][0] >= 1.0:
        seconds = points[-1][2]  # the preset itself was measured
    elif len(wide) >= 2:  # the preset's sizes measured: only the length is extrapolated, linearly
        (d_a, t_a), (d_b, t_b) = wide[0], wide[-1]
        seconds = t_b + max(t_b - t_a, 0.0) / (d_b - d_a) * (duration(large) - d_b)
    elif len(wide) == 1:
        # one length only: its cost grows with the length in the share measured at smaller sizes; without a share,
        # that run is a lower bound (the path's fit fell below it: icl_regression.fig8 at paper, 41 s against
        # 38.6 s for 30 of its 500 000 steps)
        ((d_a, t_a),) = wide
        seconds = t_a if share is None else t_a * (1.0 + share * (duration(large) / d_a - 1.0))
    lower_bound = len(wide) == 1 and share is None
    return {
        **fitted,
        "seconds": seconds,
        "lower_bound": lower_bound,
        "wide": wide,
        "share": share,
        "overhead_s": max(0.0, first - points[0][2]),
        "t1": points[0][2],
        "points": points,
        "memory_bytes": memory_bytes,
        "traced": traced,
    }


def _wide(spec, small: dict, large: dict, device: str, fitted: dict, budget_s: float, t_small: float):
    """The preset's sizes (every parameter but the time axes) run for the small length, then longer
    (:func:`_lengthen`): ``(runs, share)``, ``runs`` the ``[(duration, seconds)]`` measured at the preset's sizes,
    ``share`` (where ``runs`` holds one length only) the fraction of the cost that grows with the length, measured at
    the largest sizes run for the small length (the tiny sizes, costing ``t_small``, or the climb's rungs) whose
    doubled length fits what is left of the budget (:func:`_length_share`), or None. ``runs`` is empty where the
    preset has no longer time axes than the small one or where the preset's sizes cannot be reached at the small
    length within the budget (:func:`_reach_width`). Memory is not checked before a run: an extrapolated peak
    stopped runs that take a few seconds (a 96 MB peak of the warm-up at tiny, scaled with the work, became 12 GB for
    a training figure at quick).
    """
    d_small, d_large = duration(small), duration(large)
    if d_large <= d_small or work(between(small, large, 1.0, s_time=0.0)) <= work(small):
        return [], None
    first = _reach_width(spec, small, large, device, fitted, budget_s)
    if first is None:
        return [], None
    d_first, t_first, spent, reached, rungs = first
    budget_s -= spent  # the climb's runs included
    runs = [(d_first, t_first)]
    if reached:  # the preset's sizes extrapolated, not run: no longer run at them
        runs, budget_s = _lengthen(spec, small, large, device, 1.0, runs, budget_s)
    if len(runs) >= 2:
        return runs, None
    sizes = [(s, t) for s, t in [(0.0, t_small), *rungs] if s < 1.0 and 2 * t <= budget_s]
    if not sizes:
        return runs, None
    s, t = max(sizes)
    return runs, _length_share(spec, small, large, device, s, t, budget_s)


def _lengthen(spec, small, large, device, s, runs, budget_s):
    """Run the sizes ``s`` of the way (:func:`between`) for :data:`STEP`, :data:`STEP` squared, ... times the small
    length, from ``runs`` = ``[(small length, seconds)]``, up to the preset's length, while the next run fits what is
    left of ``budget_s``, expected in proportion to its length from the last run (an upper bound where part of the
    cost is fixed); where it does not fit, the longest run that does, if at least twice the last one's length.
    Returns ``(runs, budget left)``: the longest runs make the length's extrapolation shortest.
    """
    d_small, d_large = duration(small), duration(large)
    step = math.log(STEP) / math.log(d_large / d_small)
    st = 0.0

    def fits(params) -> bool:
        return runs[-1][1] * duration(params) / runs[-1][0] <= budget_s

    while st < 1.0:
        st_next = min(1.0, st + step)
        if not fits(between(small, large, s, s_time=st_next)):
            d_fit = 0.97 * runs[-1][0] * budget_s / runs[-1][1]  # 3 %: room for rounding a length of >= 24
            if d_fit < 2 * runs[-1][0]:
                break
            st_next = math.log(d_fit / d_small) / math.log(d_large / d_small)
        st = st_next
        tried = _run_rounded(spec, small, large, device, s, st, skip=lambda q: duration(q) <= runs[-1][0], limit=fits)
        if tried == "over":
            break
        if tried is not None:
            params, t = tried
            budget_s -= t
            runs.append((duration(params), t))
    return runs, budget_s


def _length_share(spec, small, large, device, s: float, t: float, budget_s: float) -> float | None:
    """The fraction of the cost ``t`` of the sizes ``s`` of the way (:func:`between`) at the small length that grows
    with the length, measured by running those sizes longer (:func:`_lengthen`; cost linear in the length:
    ``(t_b - t_a) / (d_b - d_a) x d_a / t_a``, clipped to [0, 1]); None where no run of twice the small length fits
    ``budget_s``. Where the preset's sizes could be run for one length only, their cost is taken to grow with the
    length in this proportion: a cost that hardly grows with the length (runs that stop once converged, as
    single_location.atlas's: 1.92 s at 10 000 steps and 1.96 s at 30 000 at the tiny sizes, 2.69 and 2.67 s at
    1 732 starts) is not scaled with it. The share is that of sizes smaller than the preset's, where a fixed cost
    weighs more or less than at the preset's: hence the largest sizes that leave room to measure it.
    """
    runs, _ = _lengthen(spec, small, large, device, s, [(duration(small), t)], budget_s)
    if len(runs) < 2:
        return None
    (d_a, t_a), (d_b, t_b) = runs[0], runs[-1]
    return min(1.0, max(0.0, (t_b - t_a) / (d_b - d_a) * d_a / t_a))


def _run_rounded(spec, small, large, device, s, s_time=None, *, skip=None, limit=None, measure=None):
    """Run the sizes ``s`` (time axes ``s_time``) of the way, rounded plainly or else keeping the presets' common
    divisibility (each distinct rounding once): ``(params, seconds)`` (or what ``measure(spec, params, device)``
    returns in place of :func:`_seconds`); ``None`` if the figure refuses every rounding or ``skip(params)`` passes
    over them all, ``"over"`` if ``limit(params)`` is False (the run would not fit what is left of the budget).
    """
    measure = _seconds if measure is None else measure
    tried = []
    for residue in (None, 0, 1):
        params = between(small, large, s, residue, s_time=s_time)
        if params in tried or (skip is not None and skip(params)):
            continue
        tried.append(params)
        if limit is not None and not limit(params):
            return "over"
        try:
            return params, measure(spec, params, device)
        except Exception as exc:  # noqa: BLE001 - sizes between the presets may be refused: try the next rounding
            logger.info(
                "%s: refused the sizes %s (length %s) of the way (%s)",
                spec.name,
                f"{s:.2f}",
                f"{s if s_time is None else s_time:.2f}",
                exc,
            )
    return None


def _reach_width(spec, small: dict, large: dict, device: str, fitted: dict, budget_s: float):
    """The preset's sizes run for the small length: ``(duration, seconds, seconds spent in all, reached, rungs)``, or
    ``None`` if out of reach; ``rungs`` are the ``(s, seconds)`` of the runs at the small length.
    Where the fit expects that run to take at most a quarter of ``budget_s`` it is run directly. Otherwise (the fit,
    measured where fixed per-step costs dominate, can overestimate the width several times, or underestimate it) the
    sizes climb to the preset's at the small length in steps of :data:`STEP` times the work, each run expected from
    its predecessor's cost by the growth measured between the last two runs (at least the square root of the work
    ratio; in proportion after the first), and started only while that fits half of what is left of the budget.
    A climb stopped by the budget after at least two runs ends with the preset's sizes extrapolated from the last two
    (``reached`` False; exponent in [1/2, 3/2]), so that only the sizes, not the length, are extrapolated that far.
    """
    target = work(between(small, large, 1.0, s_time=0.0))
    if fitted["a"] + fitted["c"] * target ** fitted["p"] <= budget_s / 4:
        widths = [1.0]
    else:
        n = max(1, math.ceil(math.log(target / work(small)) / math.log(STEP)))
        widths = [k / n for k in range(1, n + 1)]
    runs, rungs, spent = [], [], 0.0  # (work, seconds) and (s, seconds) of the runs, seconds of every run

    def growth() -> float:  # exponent measured between the last two runs, in [1/2, 3/2]
        (w1, t1), (w2, t2) = runs[-2:]
        return min(1.5, max(0.5, math.log(t2 / t1) / math.log(w2 / w1))) if t1 > 0 and t2 > 0 and w2 > w1 else 1.0

    for s in widths:

        def fits(params):
            w = work(params)
            if not runs:
                expected = fitted["a"] + fitted["c"] * w ** fitted["p"]
            else:
                expected = runs[-1][1] * (w / runs[-1][0]) ** (growth() if len(runs) >= 2 else 1.0)
            return expected <= budget_s / (4 if not runs else 2)

        tried = _run_rounded(spec, small, large, device, s, 0.0, limit=fits)
        if tried == "over":
            if len(runs) < 2:
                return None
            (w_last, t_last), d = runs[-1], duration(between(small, large, 1.0, s_time=0.0))
            return (d, t_last * (target / w_last) ** growth(), spent, False, rungs)
        if tried is None:
            if s >= 1.0:
                return None
            continue
        params, t = tried
        budget_s, spent = budget_s - t, spent + t
        runs.append((work(params), t))
        rungs.append((s, t))
    return (duration(params), runs[-1][1], spent, True, rungs)


MEMORY_S = 1.0
"""The largest sizes that the path measured in at most this many seconds are traced for memory (tracing slows Python
code several times; the traced calls are not counted in the budget)."""


def _peak_bytes(spec, params, device, seed: int = DEFAULT_SEED + 2) -> float:
    """Peak of the Python-traced allocations (numpy arrays included, torch's own allocator not) during one call of
    the figure's data function, with another seed than the timed calls' (no memoised run is reused).
    """
    cfg = RunConfig(figure=spec.name, preset=SMALL_PRESET, device=device, params=params, seed=seed)
    tracemalloc.start()
    try:
        spec.data(cfg)
        return float(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


def _memory(spec, small: dict, large: dict, device: str, points) -> tuple[float, list[tuple[str, float, float]]]:
    """The preset's memory in bytes and the ``(direction, size, peak bytes)`` traced (:func:`_peak_bytes`). Where the
    path measured the preset itself in at most :data:`MEMORY_S` seconds, its peak is the answer. Otherwise the width
    and the length are traced apart, at the fraction ``s`` of the largest point of the path measured that quickly:
    the tiny sizes; the sizes ``s`` of the way at the tiny length (``"width"``, size: the work without the time
    axes); the tiny sizes for the length ``s`` of the way (``"length"``, size: :func:`duration`). The width's peak is
    extrapolated as a power law through the tiny peak and its own (exponent in [0, 1]: the seeds, configurations and
    samples that the work multiplies are often not held at once, a line through the two overestimated
    group_sparse.downstream's quick peak 27-fold, and an exponent fitted above 1 put icl_regression.fig1's paper
    preset at 300 TiB); what the longer run held above the tiny peak (stored trajectories: single_location.fig4a's
    quick peak is 40 times its tiny one, all of it from its 40-fold length) is added, in proportion to the length.
    Without a point of the path that cheap, the tiny peak is scaled in proportion to the work without the time axes
    (an upper bound where part of it is fixed). The warm-up call is not traced: it holds the numba compiler's
    allocations (a 70 MiB peak at tiny where the next call peaks at 0.2 MiB: single_location.fig8).
    """
    w0, d0 = _width(small), duration(small)
    m0 = _peak_bytes(spec, small, device)
    traced = [("tiny", w0, m0)]
    cheap = [s for s, _, t in points[1:] if t <= MEMORY_S]
    if cheap and cheap[-1] >= 1.0:  # the preset itself
        traced.append(("preset", work(large), _peak_bytes(spec, large, device)))
        return traced[-1][2], traced
    if not cheap:
        return m0 * _width(large) / w0, traced
    s = cheap[-1]
    peak = m0
    tried = _run_rounded(spec, small, large, device, s, 0.0, measure=_peak_bytes)
    if tried is not None and _width(tried[0]) > w0:
        (w1, m1) = _width(tried[0]), tried[1]
        traced.append(("width", w1, m1))
        q = min(1.0, max(0.0, math.log(m1 / m0) / math.log(w1 / w0))) if m1 > 0 and m0 > 0 else 1.0
        peak = m1 * (_width(large) / w1) ** q
    tried = _run_rounded(spec, small, large, device, 0.0, s, measure=_peak_bytes)
    if tried is not None and duration(tried[0]) > d0:
        (d1, m2) = duration(tried[0]), tried[1]
        traced.append(("length", d1, m2))
        peak += max(m2 - m0, 0.0) * (duration(large) - d0) / (d1 - d0)
    return peak, traced


def _width(params: Mapping) -> float:
    """The work without the time axes: what a run holds at once, where the time axes add records."""
    return work(params) / duration(params)


@contextlib.contextmanager
def _one_thread():
    """numba and torch (where loaded) on one thread, as in the report's workers; restored afterwards."""
    saved = {}
    for mod in ("numba", "torch"):
        if mod in sys.modules:
            saved[mod] = sys.modules[mod].get_num_threads()
            sys.modules[mod].set_num_threads(1)
    try:
        yield
    finally:
        for mod, n in saved.items():
            sys.modules[mod].set_num_threads(n)


def estimate(
    names: Sequence[str] | None = None,
    preset: str = "paper",
    *,
    device: str = "cpu",
    registry: Registry = REGISTRY,
    progress: bool = False,
    budget_s: float = BUDGET_S,
) -> list[FigureEstimate]:
    """Estimate ``names`` (default every registered figure) at ``preset`` on ``device`` (``cpu`` or ``cuda``),
    spending about ``budget_s`` seconds of measurement per figure (:func:`measure`).
    """
    check_preset(preset)
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not 0 < budget_s < math.inf:
        raise ValueError(f"budget_s must be a positive finite number of seconds; got {budget_s!r}")
    device = resolve_device(device)
    registry.discover()
    names = registry.resolve(names) if names else registry.names()
    out = []
    for i, name in enumerate(names, 1):
        spec = registry.get(name)
        ratio = work(spec.params[preset]) / work(spec.params[SMALL_PRESET])
        if spec.shares_data_with is not None:
            out.append(
                FigureEstimate(
                    name=name,
                    preset=preset,
                    device=device,
                    measured_s=0.0,
                    overhead_s=0.0,
                    work_ratio=ratio,
                    seconds=0.0,
                    memory_bytes=0.0,
                    shares_data_with=spec.shares_data_with,
                )
            )
            continue
        t0 = time.perf_counter()
        try:
            m = measure(name, preset, device=device, registry=registry, budget_s=budget_s)
        except Exception as exc:  # noqa: BLE001 - one figure that cannot run here is named, the others estimated
            logger.error("%s: could not be measured on %s: %s: %s", name, device, type(exc).__name__, exc)
            out.append(
                FigureEstimate(
                    name=name,
                    preset=preset,
                    device=device,
                    measured_s=math.nan,
                    overhead_s=math.nan,
                    work_ratio=ratio,
                    seconds=math.nan,
                    memory_bytes=math.nan,
                    error=f"{type(exc).__name__}: {exc}",
                )
            )
            continue
        out.append(
            FigureEstimate(
                name=name,
                preset=preset,
                device=device,
                measured_s=m["t1"],
                overhead_s=m["overhead_s"],
                work_ratio=ratio,
                seconds=m["seconds"],
                exponent=m["p"],
                lower_bound=m["lower_bound"],
                memory_bytes=m["memory_bytes"],
            )
        )
        if progress:  # on stderr, so that the table on stdout can be redirected alone
            print(
                f"  [{i}/{len(names)}] measured {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True
            )
    return out


def _fmt_s(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _fmt_b(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # unreachable


def format_table(estimates: Sequence[FigureEstimate], *, cuda_measured: bool = True) -> str:
    """The table ``estimate`` prints: one row per figure, then the total (and the advice for large totals)."""
    if not estimates:
        return "no figures"
    unit = "GPU-s" if estimates[0].device == "cuda" else "CPU-s"
    lines = [f"{'figure':34s} {'tiny (s)':>9s} {'work x':>10s} {'p':>5s} {unit:>10s} {'memory':>10s}"]
    for e in estimates:
        if e.error:
            lines.append(f"{e.name:34s} not measured: {e.error}")
            continue
        if e.shares_data_with:
            lines.append(
                f"{e.name:34s} {'':>9s} {'':>10s} {'':>5s} {'0':>10s} {'':>10s}  (data of {e.shares_data_with})"
            )
            continue
        seconds = (">= " if e.lower_bound else "") + _fmt_s(e.seconds)
        lines.append(
            f"{e.name:34s} {e.measured_s:9.2f} {e.work_ratio:10.3g} {e.exponent:5.2f} {seconds:>10s} "
            f"{_fmt_b(e.memory_bytes):>10s}"
        )
    ok = [e for e in estimates if not e.error]
    total = sum(e.seconds for e in ok)
    peak = max((e.memory_bytes for e in ok), default=0.0)
    preset, device = estimates[0].preset, estimates[0].device
    bounds = [e.name for e in ok if e.lower_bound]
    lines.append(
        f"total at --preset {preset} on {device}: {'at least ' if bounds else ''}{_fmt_s(total)} ({total:.0f} {unit}) "
        "of computation, "
        f"largest figure memory {_fmt_b(peak)}; with --jobs N about total/N wall time"
        + (f"; {len(estimates) - len(ok)} figure(s) not measured" if len(ok) < len(estimates) else "")
    )
    if bounds:
        lines.append(
            f">= : a lower bound ({len(bounds)} figure(s)): the preset's sizes run for a shorter length, with no "
            "room left in the budget to see the cost grow with the length"
        )
    if not cuda_measured:
        lines.append(
            "(no CUDA device here: the GPU column is the CPU measurement; run `python -m figures estimate "
            "--device cuda` on the GPU machine for a measured one)"
        )
    if device == "cpu" and (total > 3600 or preset == "paper"):
        lines.append(advice())
    return "\n".join(lines)


def advice() -> str:
    """How to spend less wall time than one CPU (printed with large estimates)."""
    return (
        "hint: this is hours of CPU. Spread it: `python -m figures report --scheduler local --jobs N` (a Dask "
        "LocalCluster), or `--scheduler tcp://HOST:8786` for a cluster sharing this folder; torch figures also "
        "take `--device cuda` (measure first: `python -m figures estimate --device cuda` on that machine). "
        "See docs/guides/scaling.md."
    )


def total_seconds(estimates: Sequence[FigureEstimate]) -> float:
    """Sum of the figures' estimated seconds (figures that could not be measured left out)."""
    return math.fsum(e.seconds for e in estimates if not e.error)
