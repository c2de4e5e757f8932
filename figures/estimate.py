"""Cost estimates of the figures at a preset, from runs measured at the ``tiny`` preset.

Model. A figure's computation is taken to cost in proportion to its *work*, a number computed from its registered
parameters by their names (:func:`work`): time axes (steps, iterations, epochs) add up, repetitions (seeds, runs,
draws, starts), configuration lists and sizes multiply, and of the sample counts (batch, training and test set
sizes) the largest counts; a list of positive integers counts as the sum of its entries (the largest for sample
counts), any other list as its length; parameters that do not set the amount of computation (:data:`NOT_WORK`:
logging and saving intervals, seeds of an initialisation, plotting offsets) and non-integers are left out.
Parameters equal at both presets cancel.

Measurement. Each figure's data function runs three times at the ``tiny`` sizes, single-threaded, timed in process
CPU seconds (so a busy machine does not inflate it): once to compile the numba kernels and warm caches (reported as
``overhead_s``, the excess over the second run), once at the tiny sizes (``t1`` at work ``W1``) and once with every
time axis doubled, or every ``n_*`` count for a figure without time axes (``t2`` at ``W2``). The cost is fitted as
a fixed part plus a part proportional to the work, ``seconds(W) = a + b W`` with ``b = (t2 - t1) / (W2 - W1)`` and
``a = t1 - b W1`` (both kept >= 0); a figure whose second run fails or adds no work is taken as proportional
(``a = 0``, ``b = t1 / W1``). Memory is the peak of Python-traced allocations (numpy arrays included, torch's own
allocator not) during the tiny run, scaled by the work without the time axes (steps, iterations and epochs are not
held in memory at once). A figure that shares its data with another costs nothing of its own.

The estimate is measured on the device asked for (``cuda`` needs a CUDA device here); without one, ``--device cuda``
prints the CPU measurement and says so. Rough by construction (one power law per figure, fixed costs folded in):
the check is that quick-preset estimates land within a factor of 2 of measured quick builds for most figures.
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

from figures.presets import RunConfig, check_preset, resolve_device
from figures.registry import REGISTRY, Registry

__all__ = [
    "SMALL_PRESET",
    "NOT_WORK",
    "TIME_LIKE",
    "REPLICATES",
    "SAMPLES",
    "work",
    "FigureEstimate",
    "COUNTS",
    "measure",
    "estimate",
    "format_table",
    "advice",
    "total_seconds",
]

logger = logging.getLogger(__name__)

SMALL_PRESET = "tiny"
"""The preset measured."""

NOT_WORK = re.compile(r"(log_every|save|every|seed$|init_seed|offset|freeze|map_rows|max_tokens|^H$|^K$|^C$)")
"""Parameter names that do not scale the computation (matched with ``re.search``)."""

TIME_LIKE = re.compile(r"(step|iter|epoch|^n_t$|^T_)")
"""Time axes: their values add up (runs one after the other) and are left out of the memory scaling."""

REPLICATES = re.compile(r"(seed|runs|draws|starts|^n_mc$|^n_search$)")
"""Independent repetitions: multiply."""

SAMPLES = re.compile(
    r"(batch|n_train|n_test|n_pop|prompts|eval_size|^n$|^n_big$|^n_large$|^n_small$|^n_pre$|"
    r"^n_err$|^n_torch$|^n_heldout$)"
)
"""Sample counts of one step or one evaluation: the largest one counts (training and evaluation alternate)."""


def work(params: Mapping, *, memory: bool = False) -> float:
    """The work of a parameter set: (sum of the time axes) x (product of the repetitions, the list lengths and the
    remaining sizes) x (largest sample count), an integer list counting as its sum (its largest entry for sample
    counts); a nested mapping adds its own work. ``memory=True`` leaves out the
    time axes. Names in :data:`NOT_WORK`, non-integers and non-positive values are ignored."""
    time_sum, product, largest, nested = 0.0, 1.0, 1.0, 0.0
    for name, value in params.items():
        if NOT_WORK.search(name):
            continue
        if isinstance(value, Mapping):
            nested += work(value, memory=memory)
            continue
        if isinstance(value, (list, tuple)):
            if not value:
                continue
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
                product *= len(value)  # a list of configurations: one run each
                continue
            # a list of counts (sizes, seeds, steps of separate runs): runs one per entry, costs add up
            value = max(value) if SAMPLES.search(name) else sum(value)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            continue
        if TIME_LIKE.search(name):
            time_sum += 0 if memory else value
        elif SAMPLES.search(name):
            largest = max(largest, value)
        else:  # repetitions and sizes (grids, dimensions, vocabularies) multiply
            product *= value
    return max(time_sum, 1.0) * product * largest + nested


@dataclasses.dataclass(frozen=True, kw_only=True)
class FigureEstimate:
    """The estimate of one figure at ``preset`` on ``device`` (seconds and bytes; 0 for a figure sharing data).
    ``measured_s`` is the tiny run's CPU time, ``work_ratio`` the work at ``preset`` over the work at tiny."""

    name: str
    preset: str
    device: str
    measured_s: float
    overhead_s: float
    work_ratio: float
    seconds: float
    memory_bytes: float
    shares_data_with: str | None = None
    error: str = ""


def _doubled(params: Mapping, pattern: re.Pattern) -> dict:
    """``params`` with every positive integer whose name matches ``pattern`` (and not :data:`NOT_WORK`) doubled,
    nested mappings too."""
    out = {}
    for name, value in params.items():
        if isinstance(value, Mapping):
            out[name] = _doubled(value, pattern)
        elif (
            pattern.search(name)
            and not NOT_WORK.search(name)
            and isinstance(value, int)
            and not isinstance(value, bool)
            and value > 0
        ):
            out[name] = 2 * value
        else:
            out[name] = value
    return out


COUNTS = re.compile(r"^n_")
"""Counts doubled for the second measurement of a figure without a time axis (grid points, starts, samples)."""


def _second_point(params: Mapping) -> dict:
    """The parameters of the second measurement: time axes doubled, or, without any, every ``n_*`` count."""
    doubled = _doubled(params, TIME_LIKE)
    return doubled if work(doubled) > work(params) else _doubled(params, COUNTS)


def _cpu_seconds(spec, params, device) -> float:
    cfg = RunConfig(figure=spec.name, preset=SMALL_PRESET, device=device, params=params)
    t0 = time.process_time()
    spec.data(cfg)
    return time.process_time() - t0


def measure(name: str, *, device: str = "cpu", registry: Registry = REGISTRY) -> dict:
    """Time figure ``name``'s data function at the tiny sizes (see the module docstring); return ``a``, ``b`` (the
    fitted cost ``a + b W`` in CPU seconds), ``overhead_s``, ``t1`` and ``peak_bytes`` (traced allocations)."""
    spec = registry.get(name)
    small = dict(spec.params[SMALL_PRESET])
    with _one_thread():
        first = _cpu_seconds(spec, small, device)
        tracemalloc.start()
        try:
            t1 = _cpu_seconds(spec, small, device)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        w1, doubled = work(small), _second_point(small)
        w2 = work(doubled)
        a, b = 0.0, t1 / w1
        if w2 > w1:
            try:
                t2 = _cpu_seconds(spec, doubled, device)
            except Exception as exc:  # noqa: BLE001 - a figure that refuses longer runs is taken as proportional
                logger.info("%s: doubled time axes refused (%s); cost taken proportional to work", name, exc)
            else:
                b = max(t2 - t1, 0.0) / (w2 - w1)
                a = max(t1 - b * w1, 0.0)
    return {"a": a, "b": b, "overhead_s": max(0.0, first - t1), "t1": t1, "peak_bytes": peak}


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
) -> list[FigureEstimate]:
    """Estimate ``names`` (default every registered figure) at ``preset`` on ``device`` (``cpu`` or ``cuda``)."""
    check_preset(preset)
    device = resolve_device(device)
    registry.discover()
    names = registry.resolve(names) if names else registry.names()
    out = []
    for name in names:
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
            m = measure(name, device=device, registry=registry)
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
        mem_ratio = work(spec.params[preset], memory=True) / work(spec.params[SMALL_PRESET], memory=True)
        out.append(
            FigureEstimate(
                name=name,
                preset=preset,
                device=device,
                measured_s=m["t1"],
                overhead_s=m["overhead_s"],
                work_ratio=ratio,
                seconds=m["a"] + m["b"] * work(spec.params[preset]),
                memory_bytes=m["peak_bytes"] * mem_ratio,
            )
        )
        if progress:
            print(f"  measured {name} in {time.perf_counter() - t0:.1f} s", flush=True)
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
    lines = [f"{'figure':34s} {'tiny (s)':>9s} {'work x':>10s} {unit:>10s} {'memory':>10s}"]
    for e in estimates:
        if e.error:
            lines.append(f"{e.name:34s} not measured: {e.error}")
            continue
        if e.shares_data_with:
            lines.append(f"{e.name:34s} {'':>9s} {'':>10s} {'0':>10s} {'':>10s}  (data of {e.shares_data_with})")
            continue
        lines.append(
            f"{e.name:34s} {e.measured_s:9.2f} {e.work_ratio:10.3g} {_fmt_s(e.seconds):>10s} "
            f"{_fmt_b(e.memory_bytes):>10s}"
        )
    ok = [e for e in estimates if not e.error]
    total = sum(e.seconds for e in ok)
    peak = max((e.memory_bytes for e in ok), default=0.0)
    preset, device = estimates[0].preset, estimates[0].device
    lines.append(
        f"total at --preset {preset} on {device}: {_fmt_s(total)} ({total:.0f} {unit}) of computation, "
        f"largest figure memory {_fmt_b(peak)}; with --jobs N about total/N wall time"
        + (f"; {len(estimates) - len(ok)} figure(s) not measured" if len(ok) < len(estimates) else "")
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
