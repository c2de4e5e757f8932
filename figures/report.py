"""The theory-vs-practice report: ``<out>/report.html`` (self-contained: figures embedded, no scripts, no external
resources), the data of every figure as netCDF in ``<out>/data/`` (linked from the HTML) and a machine-readable
``<out>/summary.json``.

Verdicts. Every gap row and theorem check has one of the statuses of :data:`figures.registry.STATUSES`: ``holds``
(shown: the gap's interval inside the allowance band, or the check passed), ``consistent`` (undecided), ``explained``
(an understood artefact of the setup, with a run that removes the cause), ``disagrees`` (the paper's claim does not
reproduce, with the measured cause: a result), ``deferred`` (decided at the paper's sizes only, with the measured
trend) and ``fails``. A figure's badge is its worst status (order of :data:`BADGE_ORDER`), ``error`` when building,
plotting or evaluating it raised, and ``descriptive`` when it has no rows and no checks. A figure registered with
``paper_only`` is ``deferred`` below ``--preset paper``: its rows and checks whose test fails take that reason.

Many rows: each gap row is tested at its own level, so under the null hypothesis (every theory right) the expected
number of false ``fails`` is the sum of the levels. The report also gives the family-wise decision: Holm's step-down
procedure over the p-values (:attr:`figures.registry.GapRow.p_value`) of all gap rows at :data:`FAMILY_LEVEL`, which
keeps the probability of any false ``fails`` among them at most :data:`FAMILY_LEVEL`; ``summary.json`` carries
both decisions per row.

Layout of ``report.html`` (the first screen answers "what happened"):

1. Provenance, once: preset, seed, device, git revision, package versions, build time, wall time, load average.
2. Counts of rows and checks per status (and family-wise fails), how many of the holds come from figures with no
   training run, the rule for many rows, and every ``disagrees`` and ``deferred`` row or check with its cause.
3. A summary table per model (a run shared by several figures counted once in the runtime) and the contents.
4. "Needs attention": every ``fails``, ``disagrees``, ``deferred`` and ``explained`` row and check, each linked to
   its figure; each distinct explanation is written out once and referenced by number.
5. Per model, per figure: badge, paper and spec reference, how far the preset is from the paper's sizes (computed
   from the registered ``params``), the plot and caption, a link to its netCDF data, the gap table (raw gap,
   allowance and its source, SE, seeds, confidence interval, minimum detectable deviation, status and family-wise
   decision; the test stated once under the table), the checks, and the figure's configuration.

Building: figures are built in ``jobs`` worker processes (:mod:`figures.runner`: ``spawn`` start method, so torch
and numba start clean; each worker runs numba, torch and BLAS with one thread) and collected in registry order, so
the report and its data are the same as a serial build. A figure that raises is shown with its error; the report is
still written and :attr:`ReportResult.n_failed` counts such errors (verdicts are data, never errors).
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
import os
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from tqdm.auto import tqdm

from dynamics.compare import RULE, adjust
from dynamics.provenance import git_revision, package_versions, utc_now
from dynamics.trajectory import atomic_write, save_dataset
from dynamics.validation import Range, check_finite_array, check_int, validate_module
from figures import _style, cache, runner
from figures.presets import DEFAULT_PRESET, DEFAULT_SEED, PRESETS, check_preset, resolve_device
from figures.registry import (
    EXPLANATION_KINDS,
    MDD_POWER,
    PAPER_ONLY_NOTE,
    REGISTRY,
    STATUSES,
    CheckResult,
    FigureSpec,
    GapRow,
    ModuleStatus,
    Registry,
    build,
    render,
)

__all__ = [
    "DEFAULT_REPORT_DIR",
    "REPORT_FILE",
    "SUMMARY_FILE",
    "DATA_DIR",
    "MIN_SEEDS",
    "MAX_PAPER_ONLY",
    "DEFAULT_JOBS",
    "BADGES",
    "BADGE_ORDER",
    "FAMILY_LEVEL",
    "FigureEntry",
    "ModelSection",
    "ReportResult",
    "collect",
    "build_report",
    "holm",
    "adjusted_status",
    "FamilyWise",
    "family_wise",
    "preset_distance",
    "summary_dict",
    "render_html",
]

logger = logging.getLogger(__name__)

DEFAULT_REPORT_DIR = Path("report")
"""Default output folder of the report (git-ignored)."""

REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.json"
DATA_DIR = "data"
"""Sub-folder of the report folder holding ``<figure>.nc``."""

MIN_SEEDS = 8
"""Seeds every compared row should use at the default preset (a Student-t interval needs them); rows below are
counted in the report."""

MAX_PAPER_ONLY = 2
"""At most this many ``paper_only`` (deferred) figures in the report; more are flagged in the attention list."""

DEFAULT_JOBS = 2
"""Worker processes of a report build (the CI machine has 2 cores)."""

BADGES: tuple[str, ...] = STATUSES + ("error", "descriptive")
"""A figure's badge: the worst status of its rows and checks, ``error``, or ``descriptive`` (no verdicts)."""

BADGE_ORDER: tuple[str, ...] = ("fails", "disagrees", "deferred", "explained", "consistent", "holds")
"""Statuses from worst to best: a figure's (and a model's) badge is the first of these among its rows and checks."""

FAMILY_LEVEL = 0.05
"""Family-wise level of the report's many-rows rule: Holm over all gap rows keeps P(any false ``fails``) <= this."""


@dataclass(kw_only=True)
class FigureEntry:
    """What the report shows for one figure (filled by :func:`collect`)."""

    spec: FigureSpec
    preset: str = DEFAULT_PRESET
    status: str = "failed"
    runtime_s: float | None = None
    png: bytes | None = None
    gaps: list[GapRow] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    error: str = ""
    config_json: str = ""
    seed: int | None = None
    device: str = ""
    git_rev: str = ""
    versions_json: str = ""
    cache_path: str = ""
    data_file: str = ""
    layout: list[str] = field(default_factory=list)
    caption: str = ""  # the build's caption (overrides and calibration notes included); empty: spec.full_caption
    overrides: dict = field(default_factory=dict)  # parameter -> {"value", "preset_value"} of a --set build
    training_runs: int | None = None  # distinct training runs the build recorded; None where it did not build

    @property
    def failed(self) -> bool:
        """Whether building, plotting or evaluating the figure raised."""
        return bool(self.error)

    @property
    def paper_only(self) -> bool:
        """Whether the figure is decided at ``--preset paper`` only and this build is below it."""
        return self.spec.paper_only_explanation(self.preset) is not None

    @property
    def untrained(self) -> bool:
        """Whether the figure built without any training run (closed form, reduced dynamics or numerics only)."""
        return self.training_runs == 0

    @property
    def statuses(self) -> list[str]:
        """The status of every gap row, then of every check, in order."""
        return [r.status for r in self.gaps] + [c.status for c in self.checks]

    @property
    def badge(self) -> str:
        """``error``, else the worst row/check status (:data:`BADGE_ORDER`) from ``fails`` down to ``explained``,
        else ``deferred`` for a paper-only figure, else ``consistent`` / ``holds``, else ``descriptive``.
        """
        if self.failed:
            return "error"
        statuses = self.statuses
        for status in BADGE_ORDER[:4]:
            if status in statuses:
                return status
        if self.paper_only:
            return "deferred"
        for status in BADGE_ORDER[4:]:
            if status in statuses:
                return status
        return "descriptive"

    @property
    def counted_runtime_s(self) -> float:
        """Runtime counted in totals: 0 for a figure that shows another figure's runs (counted there)."""
        return 0.0 if self.spec.shares_data_with is not None else (self.runtime_s or 0.0)


@dataclass(kw_only=True)
class ModelSection:
    """One model's part of the report."""

    model: str
    module: ModuleStatus
    figures: list[FigureEntry] = field(default_factory=list)

    def count(self, status: str, kind: str = "all") -> int:
        """Rows (``kind="gaps"``), checks (``"checks"``) or both with ``status``."""
        return sum(
            (r.status == status)
            for f in self.figures
            for r in ((f.gaps if kind in ("gaps", "all") else []) + (f.checks if kind in ("checks", "all") else []))
        )

    @property
    def verdict(self) -> str:
        """``error`` (a figure or the module failed), else the worst figure badge, else ``no figures yet``."""
        if self.module.state == "error" or any(f.failed for f in self.figures):
            return "error"
        if not self.figures:
            return "no figures yet"
        badges = {f.badge for f in self.figures}
        for badge in BADGE_ORDER:
            if badge in badges:
                return badge
        return "descriptive"


@dataclass(frozen=True, kw_only=True)
class ReportResult:
    """The written report: its paths, the sections and the number of failed figures/modules (errors, not
    verdicts).
    """

    path: Path
    summary_path: Path
    sections: tuple[ModelSection, ...]
    n_failed: int


# ----------------------------------------------------------------------------------------------------------------
# Building the entries (serially or in worker processes)
# ----------------------------------------------------------------------------------------------------------------
def _entry_fields(spec: FigureSpec, preset: str, out_dir: Path | None, build_kw: dict) -> dict:
    """Build, plot and evaluate one figure; return the :class:`FigureEntry` fields (picklable, no ``spec``)."""
    out = {"preset": preset}
    try:
        kw = {k: v for k, v in build_kw.items() if k != "overrides"}
        result = build(spec.name, preset, **kw, **build_kw.get("overrides", {}).get(spec.name, {}))
        ds = result.dataset
        out.update(
            caption=str(ds.attrs.get("caption", "")), overrides=json.loads(ds.attrs.get("overrides_json", "{}") or "{}")
        )
        out["training_runs"] = len(json.loads(ds.attrs.get("train_configs_json", "[]") or "[]"))
        out.update(
            status=result.status,
            runtime_s=result.runtime_s,
            config_json=result.config.to_json(),
            cache_path=str(result.cache_path) if result.cache_path is not None else "(caching off)",
            seed=result.config.seed,
            device=result.config.device,
            git_rev=str(ds.attrs.get("git_rev", "")),
            versions_json=str(ds.attrs.get("versions_json", "")),
        )
        if out_dir is not None:
            rel = f"{DATA_DIR}/{spec.name}.nc"
            save_dataset(ds, out_dir / rel)
            out["data_file"] = rel
        fig = render(spec, ds)
        out["layout"] = _style.layout_problems(fig)
        out["png"] = _style.figure_bytes(fig, "png")
        gaps = list(spec.gaps(ds)) if spec.gaps is not None else []
        checks = list(spec.checks(ds)) if spec.checks is not None else []
        bad = [r for r in gaps if not isinstance(r, GapRow)] + [c for c in checks if not isinstance(c, CheckResult)]
        if bad:
            raise TypeError(f"gaps/checks must return GapRow/CheckResult objects; got {type(bad[0]).__name__}")
        why = spec.paper_only_explanation(preset)
        if why is not None:  # decided at the paper's sizes only: what fails here is explained by that
            gaps = [r.explained(why) if r.status == "fails" else r for r in gaps]
            checks = [c.explained(why) if c.status == "fails" else c for c in checks]
        out.update(gaps=gaps, checks=checks)
    except Exception as exc:  # noqa: BLE001 - shown in the report and counted as an error, never hidden
        clear = getattr(exc, "names_file", False)  # a failed write that names its file: no traceback needed
        out.update(
            status="failed", error=f"{type(exc).__name__}: {exc}", traceback="" if clear else traceback.format_exc()
        )
    return out


def _figure_entry(spec: FigureSpec, preset: str, out_dir: Path | None = None, **build_kw) -> FigureEntry:
    return _entry(spec, _entry_fields(spec, preset, out_dir, build_kw))


def _entry(spec: FigureSpec, fields_: dict) -> FigureEntry:
    """The :class:`FigureEntry` of ``spec`` from :func:`_entry_fields`' output (its traceback logged on failure)."""
    tb = fields_.pop("traceback", "")
    entry = FigureEntry(spec=spec, **fields_)
    if entry.error:
        logger.error("figure %s failed: %s\n%s", spec.name, entry.error, tb)
    return entry


def collect(
    preset: str = DEFAULT_PRESET,
    *,
    seed: int = DEFAULT_SEED,
    device: str = "cpu",
    cache_dir: str | Path | None = cache.DEFAULT_CACHE_DIR,
    recompute: bool = False,
    progress: bool = False,
    registry: Registry = REGISTRY,
    jobs: int = 1,
    out_dir: str | Path | None = None,
    scheduler: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[ModelSection]:
    """Discover the figure modules, build every registered figure (cached) and evaluate its rows and checks.

    ``device`` must be resolved (``cpu`` or ``cuda``); ``jobs`` worker processes (1: in this process); with
    ``out_dir`` each figure's data is also written to ``<out_dir>/data/<figure>.nc``. A registry other than the
    package's is built in workers only if it has a ``factory`` (else serially). ``scheduler`` (``"local"`` or a
    Dask scheduler address) builds on a Dask cluster instead (:func:`figures.runner.dask_entries`). ``overrides``:
    ``{"figure.param": value}`` (validated before anything runs). Other arguments as :func:`figures.registry.build`.
    """
    jobs_n = check_int("jobs", jobs, min_value=1)
    statuses = registry.discover()
    sections = [ModelSection(model=m, module=statuses[m]) for m in registry.models]
    todo = [(section, registry.get(name)) for section in sections for name in registry.names(section.model)]
    out = None if out_dir is None else Path(out_dir)
    build_kw = dict(seed=seed, device=device, cache_dir=cache_dir, recompute=recompute, progress=False)
    if overrides:
        build_kw["overrides"] = registry.split_overrides(registry.names(), overrides, figure_required=True)
    factory = runner.default_registry if registry is REGISTRY else registry.factory
    n_workers = min(jobs_n, len(todo))
    if n_workers > 1 and factory is None:
        logger.info("registry has no factory: building %d figures serially", len(todo))
    if scheduler is not None:
        specs = [spec for _, spec in todo]
        entries = [
            _entry(spec, f)
            for spec, f in zip(
                specs,
                runner.dask_entries(
                    _entry_fields, specs, preset, max(n_workers, 1), factory, out, build_kw, progress, scheduler
                ),
            )
        ]
    elif n_workers > 1 and factory is not None:
        specs = [spec for _, spec in todo]
        entries = [
            _entry(spec, f)
            for spec, f in zip(
                specs,
                runner.parallel_entries(_entry_fields, specs, preset, n_workers, factory, out, build_kw, progress),
            )
        ]
    else:
        entries = [
            _figure_entry(spec, preset, out, **build_kw, registry=registry)
            for _, spec in tqdm(todo, desc=f"report ({preset})", unit="fig", disable=None if progress else True)
        ]
    for (section, _), entry in zip(todo, entries):
        section.figures.append(entry)
    return sections


def build_report(
    preset: str = DEFAULT_PRESET,
    *,
    seed: Annotated[int, Range(integer=True, ge=0)] = DEFAULT_SEED,
    device: str = "auto",
    out_dir: str | Path = DEFAULT_REPORT_DIR,
    cache_dir: str | Path | None = cache.DEFAULT_CACHE_DIR,
    recompute: bool = False,
    progress: bool = False,
    registry: Registry = REGISTRY,
    jobs: Annotated[int, Range(integer=True, ge=1)] = DEFAULT_JOBS,
    scheduler: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ReportResult:
    """Build every registered figure at ``preset`` and write the report folder (each file atomically).

    Parameters
    ----------
    preset : {"tiny", "quick", "paper"}
    seed : int >= 0
    device : {"auto", "cpu", "cuda"}
    out_dir : path
        Folder of the report (created): ``report.html``, ``summary.json``, ``data/<figure>.nc``.
    cache_dir, recompute, progress, registry
        As :func:`figures.registry.build`.
    jobs : int >= 1
        Worker processes (default 2); with ``scheduler="local"``, the ``LocalCluster``'s workers.
    scheduler : str, optional
        ``"local"`` (a ``LocalCluster``) or the address of a Dask scheduler: build there (needs the ``dask`` extra).
    overrides : mapping, optional
        ``{"figure.param": value}``: parameters set away from the preset (``--set``), shown in each figure's caption
        and configuration and in ``summary.json``.
    """
    check_preset(preset)
    check_int("seed", seed, min_value=0)
    jobs = check_int("jobs", jobs, min_value=1)
    resolved = resolve_device(device)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "preset": preset,
        "seed": seed,
        "device": resolved,
        "git_rev": git_revision(),
        "created_utc": utc_now(),
        "load_start": _load_average(),
    }
    t0 = time.perf_counter()  # provenance above is taken before the build, as the figures' own
    sections = collect(
        preset,
        seed=seed,
        device=resolved,
        cache_dir=cache_dir,
        recompute=recompute,
        progress=progress,
        registry=registry,
        jobs=jobs,
        out_dir=out,
        scheduler=scheduler,
        overrides=overrides,
    )
    wall = time.perf_counter() - t0
    meta.update(
        wall_s=round(wall, 3), jobs=jobs, versions=package_versions(), load_end=_load_average(), cpus=os.cpu_count()
    )
    fw = family_wise(sections)
    text = render_html(sections, **meta, fw=fw)
    path = atomic_write(out / REPORT_FILE, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    summary = json.dumps(summary_dict(sections, meta, fw), indent=1, sort_keys=False, allow_nan=False) + "\n"
    summary_path = atomic_write(out / SUMMARY_FILE, lambda tmp: Path(tmp).write_text(summary, encoding="utf-8"))
    n_failed = sum(f.failed for s in sections for f in s.figures) + sum(s.module.state == "error" for s in sections)
    logger.info("report written to %s (%.1f s, %d errors)", path, wall, n_failed)
    return ReportResult(path=path, summary_path=summary_path, sections=tuple(sections), n_failed=n_failed)


# ----------------------------------------------------------------------------------------------------------------
# Many rows: the family-wise decision
# ----------------------------------------------------------------------------------------------------------------
def holm(pvalues: Sequence[float], level: float = FAMILY_LEVEL) -> list[bool]:
    """Holm's step-down procedure (:func:`dynamics.compare.adjust`): which of the null hypotheses with ``pvalues``
    are rejected at family-wise level ``level`` (probability of any false rejection <= ``level`` under any
    configuration of true nulls).
    """
    if not len(pvalues):
        return []
    p = check_finite_array("pvalues", pvalues, ndim=1)  # adjust() reads NaN as "no test"; every gap row has one
    if np.any((p < 0) | (p > 1)):
        raise ValueError(f"pvalues: p-values must lie in [0, 1]; got min {p.min()!r}, max {p.max()!r}")
    return [bool(f) for f in adjust(p, method="holm", level=level)["fails"]]


def adjusted_status(row: GapRow, rejected: bool) -> str:
    """The family-wise decision of a gap row: its own status, except that a row whose test fails but which Holm does
    not reject over all rows is ``consistent`` at the family level (not contradicted).
    """
    if row.test_status == "fails" and not rejected:
        return "consistent"
    return row.status


@dataclass(frozen=True)
class FamilyWise:
    """The many-rows rule applied to all gap rows of a report (see the module docstring)."""

    level: float
    n_rows: int
    expected_false_fails: float
    adjusted: dict[int, str]

    @property
    def n_rejected(self) -> int:
        """Gap rows whose test fails family-wise (Holm rejects them; an explanation may attach)."""
        return sum(s not in ("holds", "consistent") for s in self.adjusted.values())

    @property
    def n_fails(self) -> int:
        """Gap rows that fail family-wise with nothing to explain them."""
        return sum(s == "fails" for s in self.adjusted.values())

    def statement(self) -> str:
        """The family-wise rule and its outcome, in words, for the report."""
        return (
            f"Each of the {self.n_rows} gap rows is tested at its own level; under the null hypothesis (every "
            f"theory right) the expected number of false 'fails' is the sum of the levels, "
            f"{self.expected_false_fails:.3g}. Family-wise decision: Holm's step-down procedure over the p-values "
            f"of all {self.n_rows} gap rows at level {self.level:g} (probability of any false 'fails' <= "
            f"{self.level:g}); a row that fails on its own but is not rejected by Holm is 'consistent' at the "
            f"family level. Holm rejects {self.n_rejected} gap rows, {self.n_fails} of them unexplained "
            f"('fails')."
        )


def family_wise(sections: Sequence[ModelSection], level: float = FAMILY_LEVEL) -> FamilyWise:
    """Holm over every gap row of ``sections``; ``adjusted`` maps ``id(row)`` to its family-wise decision."""
    rows = [r for s in sections for f in s.figures for r in f.gaps]
    rejected = holm([r.p_value for r in rows], level) if rows else []
    return FamilyWise(
        level=level,
        n_rows=len(rows),
        expected_false_fails=float(sum(r.level for r in rows)),
        adjusted={id(r): adjusted_status(r, rej) for r, rej in zip(rows, rejected)},
    )


def _load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):  # not available on this platform
        return None


# ----------------------------------------------------------------------------------------------------------------
# Preset distance and the machine-readable summary
# ----------------------------------------------------------------------------------------------------------------
def _fmt_size(value) -> str:
    if isinstance(value, int):
        return f"{value:,}".replace(",", "\u2009")  # thin space as thousands separator
    return f"{value:g}"


def preset_distance(spec: FigureSpec, preset: str) -> str:
    """How far ``preset`` is from the paper's sizes, from the registered ``params``: every numeric parameter (and
    every list length) that differs, as ``"n_steps 1 000 of 500 000; n_seeds 8 of 30"``.
    """
    if preset == "paper":
        return "the paper's sizes"
    mine, paper = spec.params[preset], spec.params["paper"]
    parts = []
    for key in mine:
        if key not in paper:
            continue
        a, b = mine[key], paper[key]
        if isinstance(a, bool) or isinstance(b, bool):
            continue
        if isinstance(a, int | float) and isinstance(b, int | float) and a != b:
            parts.append(f"{key} {_fmt_size(a)} of {_fmt_size(b)}")
        elif isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) != len(b):
            parts.append(f"{key} {len(a)} values of {len(b)}")
    return "; ".join(parts) if parts else "same sizes as the paper"


def _finite(value):
    """A JSON-safe number: floats that are not finite become ``None``; strings pass."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _shown_explanation(r: GapRow | CheckResult):
    """The explanation that decides ``r``'s status (one attached to a row that holds or is undecided is not shown)."""
    return r.explanation if r.status in EXPLANATION_KINDS else None


def _row_dict(f: FigureEntry, r: GapRow | CheckResult, fw: FamilyWise) -> dict:
    why = _shown_explanation(r)
    common = {
        "model": f.spec.model,
        "figure": f.spec.name,
        "status": r.status,
        "explanation": why.to_dict() if why is not None else None,
    }
    if isinstance(r, GapRow):
        return {
            **common,
            "kind": "gap",
            "name": r.quantity,
            "time": _finite(r.time),
            "theory": _finite(r.theory),
            "mean": _finite(r.mean),
            "gap": _finite(r.gap),
            "allowance": _finite(r.allowance),
            "allowance_source": r.allowance_source,
            "se": _finite(r.se),
            "n_seeds": r.n_seeds,
            "df": _finite(r.df),
            "ci_low": _finite(r.ci_low),
            "ci_high": _finite(r.ci_high),
            "level": r.level,
            "d": r.d,
            "mdd": _finite(r.mdd),
            "mdd_power": MDD_POWER,
            "p_value": r.p_value,
            "n_seeds_to_decide": r.n_seeds_to_decide,
            "adjusted_status": fw.adjusted[id(r)],
        }
    # A check is its own threshold test: its decision is the same per row and family-wise; no MDD (not a t test).
    return {
        **common,
        "kind": "check",
        "name": r.name,
        "gap": None,
        "allowance": None,
        "se": None,
        "n_seeds": r.n_seeds,
        "measured": _finite(r.measured),
        "expected": _finite(r.expected),
        "tolerance": r.tolerance,
        "mdd": None,
        "adjusted_status": r.status,
    }


def summary_dict(sections: Sequence[ModelSection], meta: dict, fw: FamilyWise | None = None) -> dict:
    """The content of ``summary.json``: provenance, counts, the many-rows rule, one record per figure and per
    row/check (per-row and family-wise decisions).
    """
    fw = family_wise(sections) if fw is None else fw
    figures, rows = [], []
    for s in sections:
        for f in s.figures:
            figures.append(
                {
                    "model": s.model,
                    "figure": f.spec.name,
                    "badge": f.badge,
                    "build": f.status,
                    "runtime_s": _finite(f.runtime_s),
                    "counted_runtime_s": _finite(f.counted_runtime_s),
                    "shares_data_with": f.spec.shares_data_with,
                    "error": f.error or None,
                    "paper_only": f.spec.paper_only,
                    "training_runs": f.training_runs,
                    "data_file": f.data_file or None,
                    "layout_problems": f.layout,
                    "overrides": f.overrides,
                    "preset_distance": preset_distance(f.spec, meta["preset"]),
                }
            )
            rows += [_row_dict(f, r, fw) for r in f.gaps + f.checks]
    counts = {status: sum(r["status"] == status for r in rows) for status in STATUSES}
    adjusted = {status: sum(r["adjusted_status"] == status for r in rows) for status in STATUSES}
    badges = {badge: sum(f["badge"] == badge for f in figures) for badge in BADGES}
    modules = {s.model: {"state": s.module.state, "detail": s.module.detail} for s in sections}
    few = sum(r["kind"] == "gap" and r["n_seeds"] < MIN_SEEDS for r in rows)
    layout = sum(bool(f["layout_problems"]) for f in figures)
    paper_only = sum(f["paper_only"] is not None for f in figures)
    untrained = {f["figure"] for f in figures if f["training_runs"] == 0}
    family = {
        "method": "holm",
        "level": fw.level,
        "n_gap_rows": fw.n_rows,
        "expected_false_fails_per_row_rule": fw.expected_false_fails,
        "rejected_family_wise": fw.n_rejected,
        "fails_family_wise": fw.n_fails,
        "statement": fw.statement(),
    }
    runtime = sum(f["counted_runtime_s"] or 0.0 for f in figures)
    return {
        **meta,
        "rule": RULE,
        "family_wise": family,
        "runtime_s_counted_once": runtime,
        "counts": {
            "rows": counts,
            "rows_adjusted": adjusted,
            "figures": badges,
            "gap_rows_below_min_seeds": few,
            "paper_only_figures": paper_only,
            "figures_without_training": len(untrained),
            "holds_without_training": sum(r["status"] == "holds" and r["figure"] in untrained for r in rows),
            "figures_with_layout_problems": layout,
        },
        "modules": modules,
        "figures": figures,
        "rows": rows,
    }


# ----------------------------------------------------------------------------------------------------------------
# HTML
# ----------------------------------------------------------------------------------------------------------------
_CSS = """
body { font-family: "DejaVu Sans", Arial, sans-serif; margin: 1.5em auto; max-width: 80em; color: #222;
       line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { border-bottom: 2px solid #4477AA; padding-bottom: .2em; margin-top: 2em; }
h3 { margin-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .85em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f0f3f7; } td.num { text-align: right; font-family: monospace; white-space: nowrap; }
caption { caption-side: bottom; text-align: left; font-size: .85em; color: #555; padding-top: .3em; }
.badge { display: inline-block; padding: 0 .45em; border-radius: .3em; font-weight: bold; font-size: .85em;
         color: white; white-space: nowrap; }
.b-holds { background: #228833; } .b-consistent { background: #66A39A; } .b-explained { background: #4477AA; }
.b-disagrees { background: #AA3377; } .b-deferred { background: #CCBB44; color: #222; }
.b-fails { background: #b8283f; }
.b-error { background: #6b1020; } .b-descriptive { background: #999; } .b-none { background: #bbb; }
.muted { color: #777; } .meta { color: #555; font-size: .9em; margin: 0 0 .4em 0; }
figure { margin: .8em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: .9em; color: #333; max-width: 62em; }
pre { background: #f6f6f6; padding: .5em; overflow-x: auto; font-size: .8em; white-space: pre-wrap; }
article { border-top: 1px solid #ddd; padding-top: .5em; margin-top: 1.2em; }
.error { background: #fdecef; border: 1px solid #EE6677; padding: .5em; }
ul.toc { list-style: none; padding-left: 0; columns: 2; } ul.toc li { margin: .15em 0; }
ol.notes { font-size: .85em; color: #444; margin-top: 0; }
"""

_STATUS_WORDS = {
    "holds": "shown: the gap's interval lies inside the allowance band (a check: its test passed)",
    "consistent": "undecided: the interval straddles an edge of the band (the row says how many seeds decide it)",
    "explained": "an understood artefact of the setup; a run that removes the cause holds",
    "disagrees": "the paper's claim does not reproduce under its protocol; the measured cause is given (a result)",
    "deferred": "decided at the paper's sizes only; the measured trend towards the claim is given",
    "fails": "the test fails and nothing explains it",
}


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _num(value) -> str:
    if isinstance(value, str):
        return _e(value)
    if value is None:
        return "&#8211;"
    return _e(f"{value:.4g}")


def _runtime(seconds: float | None) -> str:
    return "&#8211;" if seconds is None else f"{seconds:.2f} s"


def _badge(status: str, text: str | None = None) -> str:
    cls = status if status in BADGES else "none"
    return f'<span class="badge b-{cls}">{_e(text or status)}</span>'


def _figure_badge(f: FigureEntry) -> str:
    text = f.badge + (f" ({PAPER_ONLY_NOTE})" if f.paper_only and not f.failed else "")
    return _badge(f.badge, text)


def _anchor(name: str) -> str:
    return f"fig-{name}"


class _Why:
    """The distinct explanations of a report, numbered in order of appearance: written out once, referenced by
    number everywhere else.
    """

    def __init__(self, sections: Sequence[ModelSection]):
        self.index: dict[tuple[str, str, str], int] = {}
        for s in sections:
            for f in s.figures:
                for r in f.gaps + f.checks:
                    why = _shown_explanation(r)
                    if why is not None:
                        self.index.setdefault((why.reason, why.evidence, why.kind), len(self.index) + 1)

    def ref(self, explanation) -> str:
        """`` [n]`` linked to the written-out explanation (empty for None)."""
        if explanation is None:
            return ""
        n = self.index[(explanation.reason, explanation.evidence, explanation.kind)]
        return f' <a href="#why-{n}">[{n}]</a>'

    def cause(self, explanation) -> str:
        """The reason, with its reference."""
        return f" &#8212; <i>{_e(explanation.reason)}</i>{self.ref(explanation)}"

    def html(self) -> str:
        if not self.index:
            return ""
        items = "".join(
            f'<li id="why-{n}" value="{n}">{_badge(kind)} <i>{_e(reason)}</i> (evidence: {_e(evidence)})</li>'
            for (reason, evidence, kind), n in self.index.items()
        )
        return f'<h3>Explanations, each written once</h3>\n<ol class="notes">{items}</ol>'


def _counts_html(sections: Sequence[ModelSection], fw: FamilyWise, why: _Why) -> str:
    """The first screen: rows and checks per status, the many-rows rule, and every disagrees/deferred row."""
    rows = [r for s in sections for f in s.figures for r in f.gaps]
    checks = [c for s in sections for f in s.figures for c in f.checks]
    cells = "".join(
        f'<tr><td>{_badge(st)}</td><td class="num">{sum(r.status == st for r in rows)}</td>'
        f'<td class="num">{sum(c.status == st for c in checks)}</td>'
        f'<td class="num">{sum(fw.adjusted[id(r)] == st for r in rows) + sum(c.status == st for c in checks)}</td>'
        f"<td>{_e(_STATUS_WORDS[st])}</td></tr>"
        for st in STATUSES
    )
    table = (
        '<table class="counts">\n<tr><th>status</th><th>gap rows</th><th>checks</th>'
        "<th>rows + checks, family-wise</th><th>meaning</th></tr>\n" + cells + "\n</table>"
    )
    untrained = [f for s in sections for f in s.figures if f.untrained]
    n_holds = sum(st == "holds" for st in (r.status for r in rows + checks))
    n_untrained = sum(r.status == "holds" for f in untrained for r in f.gaps + f.checks)
    table += (
        f'\n<p class="meta" id="holds-without-training">Of the {n_holds} rows and checks that hold, '
        f"<b>{n_untrained} come from the {len(untrained)} figure(s) with no training run</b> (closed form, reduced "
        f"dynamics or numerics only: they show the mathematics, not what training does); <b>{n_holds - n_untrained}"
        "</b> come from figures that train.</p>"
    )
    results = []
    for kind, title in (
        ("disagrees", "Disagreements with the papers (results)"),
        ("deferred", "Deferred to the paper's sizes"),
    ):
        items = []
        for s in sections:
            for f in s.figures:
                link = f'<a href="#{_e(_anchor(f.spec.name))}">{_e(f.spec.name)}</a>'
                names = [(f"{r.quantity} at {_num(r.time)}", r.explanation) for r in f.gaps if r.status == kind]
                names += [(_e(c.name), c.explanation) for c in f.checks if c.status == kind]
                by_cause: dict = {}
                for name, explanation in names:
                    by_cause.setdefault(explanation, []).append(name)
                for explanation, what in by_cause.items():
                    items.append(
                        f"<li>{link}: {len(what)} &#215; {'; '.join(_e(w) for w in what[:3])}"
                        f"{' ...' if len(what) > 3 else ''}{why.cause(explanation)}</li>"
                    )
        results.append(
            f"<h3>{_badge(kind)} {title}: {sum(st == kind for st in (r.status for r in rows + checks))}"
            "</h3>" + (f"<ul>{''.join(items)}</ul>" if items else '<p class="muted">None.</p>')
        )
    return (
        f'<section id="counts">\n{table}\n<p class="meta">{_e(fw.statement())} Each gap row states its minimum '
        f"detectable deviation (MDD: the true |gap| it calls 'fails' with probability {MDD_POWER:.0%}).</p>\n"
        + "\n".join(results)
        + "\n</section>"
    )


def _summary_table(sections: Sequence[ModelSection]) -> str:
    rows = []
    for s in sections:
        module = s.module.state + (f": {s.module.detail}" if s.module.detail else "")
        per_badge = {b: sum(f.badge == b for f in s.figures) for b in BADGES}
        figs = ", ".join(f"{n} {b}" for b, n in per_badge.items() if n) or "&#8211;"
        rows.append(
            f'<tr><td><a href="#model-{_e(s.model)}">{_e(s.model)}</a></td><td>{_e(module)}</td>'
            f"<td>{figs}</td>"
            + "".join(f'<td class="num">{s.count(st, "gaps")} + {s.count(st, "checks")}</td>' for st in STATUSES)
            + f'<td class="num">{sum(f.counted_runtime_s for f in s.figures):.1f}</td>'
            f"<td>{_badge(s.verdict) if s.verdict in BADGES else _e(s.verdict)}</td></tr>"
        )
    head = (
        "<tr><th>model</th><th>figure module</th><th>figures</th>"
        + "".join(f"<th>{st} (rows + checks)</th>" for st in STATUSES)
        + "<th>runtime (s; a shared run once)</th><th>verdict</th></tr>"
    )
    return f'<table class="summary">\n{head}\n' + "\n".join(rows) + "\n</table>"


def _attention_html(sections: Sequence[ModelSection], why: _Why) -> str:
    """Every row/check that does not hold or stay undecided (and every error), linked to its figure; explanations
    referenced by number and written out once at the end.
    """
    kinds = ("error", "fails", "disagrees", "deferred", "explained")
    items: dict[str, list[str]] = {k: [] for k in kinds}
    for s in sections:
        for f in s.figures:
            link = f'<a href="#{_e(_anchor(f.spec.name))}">{_e(f.spec.name)}</a>'
            if f.failed:
                items["error"].append(f"<li>{link}: {_e(f.error)}</li>")
            for r in f.gaps:
                if r.status in items:
                    what = (
                        f"{_e(r.quantity)} at {_num(r.time)}: gap {_num(r.gap)}, CI [{_num(r.ci_low)}, "
                        f"{_num(r.ci_high)}], allowance {_num(r.allowance)}"
                    )
                    items[r.status].append(f"<li>{link}: {what}{why.ref(_shown_explanation(r))}</li>")
            for c in f.checks:
                if c.status in items:
                    what = f"check {_e(c.name)}: measured {_num(c.measured)}, expected {_num(c.expected)}"
                    items[c.status].append(f"<li>{link}: {what}{why.ref(_shown_explanation(c))}</li>")
    parts = ['<section id="attention"><h2>Needs attention</h2>']
    n_few = sum(r.n_seeds < MIN_SEEDS for s in sections for f in s.figures for r in f.gaps)
    if n_few:
        parts.append(
            f'<p class="meta">{n_few} gap rows use fewer than {MIN_SEEDS} seeds (the default presets use '
            f"at least {MIN_SEEDS}); their intervals are wide.</p>"
        )
    n_paper = sum(f.spec.paper_only is not None for s in sections for f in s.figures)
    if n_paper > MAX_PAPER_ONLY:
        parts.append(
            f'<p class="meta">{n_paper} figures are decided at --preset paper only (at most '
            f"{MAX_PAPER_ONLY} expected).</p>"
        )
    titles = {
        "error": "Errors (figure did not build)",
        "fails": "Fails (unexplained)",
        "disagrees": "Disagrees with the paper (results)",
        "deferred": "Deferred to the paper's sizes",
        "explained": "Explained (artefacts of the setup, not failures)",
    }
    for key, title in titles.items():
        parts.append(f"<h3>{_badge(key)} {title}: {len(items[key])}</h3>")
        parts.append("<ul>" + "".join(items[key]) + "</ul>" if items[key] else '<p class="muted">None.</p>')
    parts.append(why.html())
    parts.append("</section>")
    return "\n".join(parts)


def _toc_html(sections: Sequence[ModelSection]) -> str:
    parts = ['<section id="contents"><h2>Contents</h2>']
    for s in sections:
        parts.append(f'<h3><a href="#model-{_e(s.model)}">{_e(s.model)}</a></h3>')
        if not s.figures:
            parts.append(f'<p class="muted">No figures yet ({_e(s.module.detail or "no figures registered")}).</p>')
            continue
        items = []
        for f in s.figures:
            n = {st: f.statuses.count(st) for st in STATUSES}
            counts = ", ".join(f"{v} {k}" for k, v in n.items() if v) or "no verdicts"
            items.append(
                f'<li>{_figure_badge(f)} <a href="#{_e(_anchor(f.spec.name))}">{_e(f.spec.name)}</a> '
                f'<span class="muted">({counts})</span></li>'
            )
        parts.append('<ul class="toc">' + "".join(items) + "</ul>")
    parts.append("</section>")
    return "\n".join(parts)


def _notes(values: list[str]) -> tuple[dict[str, int], str]:
    """Number the distinct non-empty texts ``values`` (in order) and render them as a list below a table."""
    index: dict[str, int] = {}
    for v in values:
        if v and v not in index:
            index[v] = len(index) + 1
    if not index:
        return index, ""
    items = "".join(f'<li value="{i}">{_e(v)}</li>' for v, i in index.items())
    return index, f'<ol class="notes">{items}</ol>'


def _status_cell(r: GapRow, fw: FamilyWise, why: _Why) -> str:
    cell = _badge(r.status) + why.ref(_shown_explanation(r))
    if r.n_seeds_to_decide is not None:
        cell += f' <span class="muted">(~{r.n_seeds_to_decide} seeds decide it)</span>'
    return cell


def _gaps_table(rows: Sequence[GapRow], fw: FamilyWise, why: _Why) -> str:
    if not rows:
        return '<p class="muted">No theory-vs-practice gap rows for this figure.</p>'
    src_index, src_notes = _notes([r.allowance_source for r in rows])
    has_d = any(r.d is not None for r in rows)
    head = (
        "<tr><th>quantity</th><th>time</th>"
        + ("<th>d</th>" if has_d else "")
        + "<th>theory</th><th>mean</th><th>raw gap (mean &#8722; theory)</th><th>allowance [source]</th>"
        "<th>SE</th><th>seeds</th><th>CI of the gap</th><th>MDD</th><th>status</th>"
        "<th>family-wise</th></tr>"
    )
    body = []
    for r in rows:
        allow = _num(r.allowance) + (f" [{src_index[r.allowance_source]}]" if r.allowance_source else "")
        body.append(
            f'<tr><td>{_e(r.quantity)}</td><td class="num">{_num(r.time)}</td>'
            + (f'<td class="num">{_num(r.d)}</td>' if has_d else "")
            + f'<td class="num">{_num(r.theory)}</td><td class="num">{_num(r.mean)}</td>'
            f'<td class="num">{_num(r.gap)}</td><td class="num">{allow}</td><td class="num">{_num(r.se)}</td>'
            f'<td class="num">{r.n_seeds}</td><td class="num">[{_num(r.ci_low)}, {_num(r.ci_high)}]</td>'
            f'<td class="num">{_num(r.mdd)}</td><td>{_status_cell(r, fw, why)}</td>'
            f"<td>{_badge(fw.adjusted[id(r)])}</td></tr>"
        )
    levels = sorted({r.level for r in rows})
    dfs = sorted({int(r.df) if float(r.df).is_integer() else r.df for r in rows})
    caption = (
        f"<caption>Test: {_e(RULE)}. Level {', '.join(f'{lv:g}' for lv in levels)}; df "
        f"{', '.join(map(str, dfs))}; CI = gap &#177; t quantile &#215; SE; holds = CI inside the band, "
        f"consistent = CI across a band edge, fails = CI outside it. MDD = allowance + (t quantile + "
        f"t_{MDD_POWER:g}) &#215; SE: the deviation detected with probability {MDD_POWER:.0%}. Family-wise: "
        f"Holm over all gap rows of the report at {fw.level:g}.</caption>"
    )
    note = f'<p class="meta">Allowance sources:</p>{src_notes}' if src_notes else ""
    return f"<table>\n{caption}\n{head}\n" + "\n".join(body) + "\n</table>" + note


def _checks_table(rows: Sequence[CheckResult], why: _Why) -> str:
    if not rows:
        return '<p class="muted">No theorem checks for this figure.</p>'
    head = "<tr><th>check</th><th>status</th><th>measured</th><th>expected</th><th>seeds</th><th>tolerance</th></tr>"
    body = [
        f"<tr><td>{_e(c.name)}</td><td>{_badge(c.status)}{why.ref(_shown_explanation(c))}</td>"
        f'<td class="num">{_num(c.measured)}</td><td class="num">{_num(c.expected)}</td>'
        f'<td class="num">{_num(c.n_seeds)}</td><td>{_e(c.tolerance)}</td></tr>'
        for c in rows
    ]
    return "<table>\n" + head + "\n" + "\n".join(body) + "\n</table>"


def _versions_text(versions) -> str:
    if isinstance(versions, str):
        try:
            versions = json.loads(versions)
        except ValueError:
            return versions
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))


def _figure_html(f: FigureEntry, report_git: str, fw: FamilyWise, why: _Why) -> str:
    spec = f.spec
    runtime = _runtime(f.runtime_s)
    if spec.shares_data_with is not None:
        runtime = (
            f'the runs of <a href="#{_e(_anchor(spec.shares_data_with))}">{_e(spec.shares_data_with)}</a> '
            "(counted there)"
        )
    parts = [
        f'<article id="{_e(_anchor(spec.name))}">',
        f"<h3>{_figure_badge(f)} {_e(spec.name)}</h3>",
        f'<p class="meta">{_e(spec.paper)} &#183; reference: {_e(spec.spec)} &#183; data: {_e(f.status)}'
        f" &#183; runtime: {runtime}</p>",
        f'<p class="meta">Size vs the paper ({_e(f.preset)} preset): {_e(preset_distance(spec, f.preset))}</p>',
    ]
    if f.error:
        parts.append(f'<div class="error">{_badge("error")} {_e(f.error)}</div>')
        parts.append(f"<p>{_e(f.caption or spec.full_caption)}</p>")
    if f.png is not None:
        b64 = base64.b64encode(f.png).decode("ascii")
        parts.append(
            f'<figure><img src="data:image/png;base64,{b64}" alt="{_e(spec.name)}" />'
            f"<figcaption>{_e(f.caption or spec.full_caption)}</figcaption></figure>"
        )
    if f.layout:
        parts.append(f'<p class="meta">Layout: {_e("; ".join(f.layout))} (figures._style.layout_problems)</p>')
    if f.data_file:
        parts.append(
            f'<p class="meta">Data behind this figure: <a href="{_e(f.data_file)}">{_e(f.data_file)}</a> (netCDF)</p>'
        )
    if not f.error:
        parts += [
            "<h4>Theory vs practice</h4>",
            _gaps_table(f.gaps, fw, why),
            "<h4>Theorem checks</h4>",
            _checks_table(f.checks, why),
        ]
    if f.config_json:
        params = json.loads(f.config_json).get("params", {})
        git = "" if f.git_rev == report_git else f"<tr><th>git revision</th><td>{_e(f.git_rev)}</td></tr>"
        parts.append(
            "<h4>Configuration</h4><table>"
            f"<tr><th>parameters</th><td><code>{_e(json.dumps(params, sort_keys=True))}</code></td></tr>"
            + (
                f"<tr><th>overridden</th><td><code>{_e(json.dumps(f.overrides, sort_keys=True))}</code></td></tr>"
                if f.overrides
                else ""
            )
            + f"<tr><th>seed</th><td>{_e(f.seed)}</td></tr><tr><th>device</th><td>{_e(f.device)}</td></tr>{git}"
            f"<tr><th>cache entry</th><td>{_e(f.cache_path)}</td></tr></table>"
        )
    parts.append("</article>")
    return "\n".join(parts)


def _model_html(s: ModelSection, report_git: str, fw: FamilyWise, why: _Why) -> str:
    parts = [f'<section id="model-{_e(s.model)}">', f"<h2>{_e(s.model)}</h2>"]
    if s.module.state == "error":
        parts.append(
            f'<div class="error">{_badge("error")} figures/{_e(s.model)}.py does not import: '
            f"{_e(s.module.detail)}</div>"
        )
    if not s.figures:
        why_none = s.module.detail or "no figures registered"
        parts.append(f'<p class="muted">No figures yet for this model ({_e(why_none)}).</p>')
    parts += [_figure_html(f, report_git, fw, why) for f in s.figures]
    parts.append("</section>")
    return "\n".join(parts)


def _load_text(load) -> str:
    return "n/a" if not load else ", ".join(f"{v:g}" for v in load)


def render_html(
    sections: Sequence[ModelSection],
    *,
    preset: str,
    seed: int,
    device: str,
    wall_s: float,
    git_rev: str | None = None,
    created_utc: str | None = None,
    jobs: int = 1,
    versions: dict | None = None,
    load_start: list[float] | None = None,
    load_end: list[float] | None = None,
    cpus: int | None = None,
    fw: FamilyWise | None = None,
) -> str:
    """The complete, self-contained HTML document (well-formed XHTML-compatible markup, inline CSS, no scripts).

    ``load_start`` / ``load_end`` are the load averages (1, 5, 15 min) at the start and end of the build, ``cpus``
    the machine's CPU count, ``fw`` the family-wise decision (computed from ``sections`` when None).
    """
    git_rev = git_revision() if git_rev is None else git_rev
    fw = family_wise(sections) if fw is None else fw
    why = _Why(sections)
    n_figs = sum(len(s.figures) for s in sections)
    n_err = sum(f.failed for s in sections for f in s.figures)
    runtime = sum(f.counted_runtime_s for s in sections for f in s.figures)
    header = (
        f'<p class="meta">preset <b>{_e(preset)}</b> ({_e(PRESETS[preset])}) &#183; seed {_e(seed)} &#183; '
        f"device {_e(device)} &#183; git {_e(git_rev)} &#183; built {_e(created_utc or utc_now())} &#183; "
        f"{n_figs} figures, {n_err} errors</p>"
        f'<p class="meta">Build time: <b>{wall_s:.1f} s wall</b> with {jobs} worker process(es) on '
        f"{_e(cpus or 'an unknown number of')} CPUs; load average (1, 5, 15 min) {_e(_load_text(load_start))} at "
        f"the start, {_e(_load_text(load_end))} at the end; the figures' own runtimes add up to {runtime:.1f} s "
        "(a run shared by several figures counted once; cached figures count the run that made the entry).</p>"
        f'<p class="meta">versions: {_e(_versions_text(versions or package_versions()))}</p>'
        f'<p class="meta">Summary for machines: <a href="{SUMMARY_FILE}">{SUMMARY_FILE}</a>; the data of each '
        f"figure: <code>{DATA_DIR}/&lt;figure&gt;.nc</code>, linked under it.</p>"
    )
    legend = (
        '<p class="meta">A figure\'s badge is the worst of its rows and checks ('
        + ", ".join(_badge(b) for b in BADGE_ORDER)
        + "); "
        + _badge("descriptive")
        + " a figure with no verdicts. Line styles: "
        "closed-form theory solid, reduced ODE/map dashed, learned trajectories dotted (mean over seeds) with "
        "a shaded band.</p>"
    )
    body = "\n".join(_model_html(s, git_rev, fw, why) for s in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8" />\n'
        f"<title>attndyn report ({_e(preset)})</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>attndyn: theory vs practice ({_e(preset)} preset)</h1>\n{header}\n<h2>What happened</h2>\n"
        f"{_counts_html(sections, fw, why)}\n<h2>Per model</h2>\n{_summary_table(sections)}\n{legend}\n"
        f"{_toc_html(sections)}\n{_attention_html(sections, why)}\n{body}\n</body>\n</html>\n"
    )


validate_module(globals())  # each parameter's rule is declared at its definition (dynamics.validation)
