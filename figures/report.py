"""The theory-vs-practice report: one self-contained HTML file (figures embedded, no scripts, no external resources).

Layout of ``<out>/report.html``:

1. A one-screen summary table over all models of :data:`figures.registry.MODELS`: figure module state, figures
   built / registered, how many came from the cache, gap rows within tolerance, theorem checks passed, runtime, and
   an overall verdict (``ok``, ``FAILED``, ``outside tolerance``, ``no figures yet``).
2. Per model, per figure: the plot (PNG as a base64 data URI) with its caption (which names every parameter the
   spec marks unrecoverable), the table of theory-vs-practice gaps in units of the standard error over seeds (each
   row marked within/outside the tolerance the spec justifies), the theorem checks (pass/fail, measured, expected,
   tolerance), the runtime and the provenance (configuration JSON, seed, device, git revision, package versions,
   cache entry).

A figure whose data, plot, gaps or checks raise is reported as ``FAILED`` with the error (and the traceback is
logged); the report is still written, and :class:`ReportResult` counts the failures so the CLI can exit non-zero.
With no figure modules at all the report still builds and says which models have no figures yet.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import logging
import os
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from dynamics.provenance import git_revision, package_versions, utc_now
from figures import _style, cache
from figures.presets import DEFAULT_PRESET, DEFAULT_SEED, PRESETS, check_preset, resolve_device
from figures.registry import REGISTRY, CheckResult, FigureSpec, GapRow, ModuleStatus, Registry, build, render

logger = logging.getLogger(__name__)

DEFAULT_REPORT_DIR = Path("report")
"""Default output folder of the report (git-ignored); the file is ``report.html`` inside it."""

REPORT_FILE = "report.html"


@dataclass(kw_only=True)
class FigureEntry:
    """What the report shows for one figure (filled by :func:`collect`)."""

    spec: FigureSpec
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

    @property
    def failed(self) -> bool:
        """Whether building, plotting or evaluating the figure raised."""
        return bool(self.error)


@dataclass(kw_only=True)
class ModelSection:
    """One model's part of the report."""

    model: str
    module: ModuleStatus
    figures: list[FigureEntry] = field(default_factory=list)

    @property
    def n_gaps_within(self) -> int:
        return sum(row.within for f in self.figures for row in f.gaps)

    @property
    def n_gaps(self) -> int:
        return sum(len(f.gaps) for f in self.figures)

    @property
    def n_checks_passed(self) -> int:
        return sum(c.passed for f in self.figures for c in f.checks)

    @property
    def n_checks(self) -> int:
        return sum(len(f.checks) for f in self.figures)

    @property
    def verdict(self) -> str:
        """``FAILED`` (an error), ``outside tolerance`` (a gap row or check failed), ``ok`` or ``no figures yet``."""
        if self.module.state == "error" or any(f.failed for f in self.figures):
            return "FAILED"
        if not self.figures:
            return "no figures yet"
        if self.n_gaps_within < self.n_gaps or self.n_checks_passed < self.n_checks:
            return "outside tolerance"
        return "ok"


@dataclass(frozen=True, kw_only=True)
class ReportResult:
    """The written report: its path, the sections and the number of failed figures/modules."""

    path: Path
    sections: tuple[ModelSection, ...]
    n_failed: int


def collect(preset: str = DEFAULT_PRESET, *, seed: int = DEFAULT_SEED, device: str = "cpu",
            cache_dir: str | Path | None = cache.DEFAULT_CACHE_DIR, recompute: bool = False, progress: bool = False,
            registry: Registry = REGISTRY) -> list[ModelSection]:
    """Discover the figure modules, build every registered figure (cached) and evaluate its gaps and checks.

    ``device`` must be resolved (``cpu`` or ``cuda``); other arguments as :func:`figures.registry.build`.
    """
    statuses = registry.discover()
    sections = [ModelSection(model=m, module=statuses[m]) for m in registry.models]
    jobs = [(section, registry.get(name)) for section in sections for name in registry.names(section.model)]
    for section, spec in tqdm(jobs, desc=f"report ({preset})", unit="fig", disable=None if progress else True):
        section.figures.append(_figure_entry(spec, preset, seed=seed, device=device, cache_dir=cache_dir,
                                             recompute=recompute, progress=progress, registry=registry))
    return sections


def _figure_entry(spec: FigureSpec, preset: str, **build_kw) -> FigureEntry:
    entry = FigureEntry(spec=spec)
    try:
        result = build(spec.name, preset, **build_kw)
        ds = result.dataset
        entry.status, entry.runtime_s = result.status, result.runtime_s
        entry.cache_path = str(result.cache_path) if result.cache_path is not None else "(caching off)"
        entry.config_json = result.config.to_json()
        entry.seed, entry.device = result.config.seed, result.config.device
        entry.git_rev = str(ds.attrs.get("git_rev", ""))
        entry.versions_json = str(ds.attrs.get("versions_json", ""))
        entry.png = _style.figure_bytes(render(spec, ds), "png")
        entry.gaps = list(spec.gaps(ds)) if spec.gaps is not None else []
        entry.checks = list(spec.checks(ds)) if spec.checks is not None else []
        bad = [r for r in entry.gaps + entry.checks if not isinstance(r, GapRow | CheckResult)]
        if bad:
            raise TypeError(f"gaps/checks must return GapRow/CheckResult objects; got {type(bad[0]).__name__}")
    except Exception as exc:  # noqa: BLE001 - shown in the report and counted as a failure, never hidden
        entry.status = "failed"
        entry.error = f"{type(exc).__name__}: {exc}"
        logger.error("figure %s failed: %s\n%s", spec.name, entry.error, traceback.format_exc())
    return entry


def build_report(preset: str = DEFAULT_PRESET, *, seed: int = DEFAULT_SEED, device: str = "auto",
                 out_dir: str | Path = DEFAULT_REPORT_DIR, cache_dir: str | Path | None = cache.DEFAULT_CACHE_DIR,
                 recompute: bool = False, progress: bool = False, registry: Registry = REGISTRY) -> ReportResult:
    """Build every registered figure at ``preset`` and write ``<out_dir>/report.html`` (atomically).

    Parameters
    ----------
    preset : {"tiny", "quick", "paper"}
    seed : int >= 0
    device : {"auto", "cpu", "cuda"}
    out_dir : path
        Folder of the report (created).
    cache_dir, recompute, progress, registry
        As :func:`figures.registry.build`.
    """
    check_preset(preset)
    resolved = resolve_device(device)
    t0 = time.perf_counter()
    sections = collect(preset, seed=seed, device=resolved, cache_dir=cache_dir, recompute=recompute,
                       progress=progress, registry=registry)
    wall = time.perf_counter() - t0
    text = render_html(sections, preset=preset, seed=seed, device=resolved, wall_s=wall)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT_FILE
    tmp = out / f".{REPORT_FILE}.{os.getpid()}.tmp"
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    n_failed = sum(f.failed for s in sections for f in s.figures) + sum(s.module.state == "error" for s in sections)
    logger.info("report written to %s (%.1f s, %d failures)", path, wall, n_failed)
    return ReportResult(path=path, sections=tuple(sections), n_failed=n_failed)


# ----------------------------------------------------------------------------------------------------------------
# HTML
# ----------------------------------------------------------------------------------------------------------------
_CSS = """
body { font-family: "DejaVu Sans", Arial, sans-serif; margin: 1.5em auto; max-width: 75em; color: #222;
       line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { border-bottom: 2px solid #4477AA; padding-bottom: .2em; margin-top: 2em; }
h3 { margin-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .88em; }
th, td { border: 1px solid #ccc; padding: .25em .55em; text-align: left; vertical-align: top; }
th { background: #f0f3f7; } td.num { text-align: right; font-family: monospace; }
.ok { color: #1d6f2b; font-weight: bold; } .bad { color: #b8283f; font-weight: bold; }
.muted { color: #777; } .meta { color: #555; font-size: .9em; margin: 0 0 .4em 0; }
figure { margin: .8em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: .9em; color: #333; max-width: 60em; }
pre { background: #f6f6f6; padding: .5em; overflow-x: auto; font-size: .8em; white-space: pre-wrap; }
article { border-top: 1px solid #ddd; padding-top: .5em; margin-top: 1.2em; }
.error { background: #fdecef; border: 1px solid #EE6677; padding: .5em; }
"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _num(value) -> str:
    if isinstance(value, str):
        return _e(value)
    if value is None:
        return "&#8211;"
    return _e(f"{value:.6g}")


def _runtime(seconds: float | None) -> str:
    return "&#8211;" if seconds is None else f"{seconds:.2f} s"


def _mark(ok: bool, yes: str = "within", no: str = "outside") -> str:
    return f'<span class="ok">{yes}</span>' if ok else f'<span class="bad">{no}</span>'


def _verdict_html(verdict: str) -> str:
    cls = {"ok": "ok", "FAILED": "bad", "outside tolerance": "bad"}.get(verdict, "muted")
    return f'<span class="{cls}">{_e(verdict)}</span>'


def _summary_table(sections: Sequence[ModelSection]) -> str:
    rows = []
    for s in sections:
        n_reg = len(s.figures)
        n_ok = sum(not f.failed for f in s.figures)
        n_cached = sum(f.status == "cached" for f in s.figures)
        runtime = sum(f.runtime_s or 0.0 for f in s.figures)
        module = s.module.state + (f": {s.module.detail}" if s.module.detail else "")
        rows.append(
            f'<tr><td><a href="#model-{_e(s.model)}">{_e(s.model)}</a></td><td>{_e(module)}</td>'
            f'<td class="num">{n_ok} / {n_reg}</td><td class="num">{n_cached}</td>'
            f'<td class="num">{s.n_gaps_within} / {s.n_gaps}</td>'
            f'<td class="num">{s.n_checks_passed} / {s.n_checks}</td>'
            f'<td class="num">{runtime:.2f}</td><td>{_verdict_html(s.verdict)}</td></tr>')
    head = ("<tr><th>model</th><th>figure module</th><th>figures built</th><th>from cache</th>"
            "<th>gap rows within tolerance</th><th>theorem checks passed</th><th>runtime (s)</th><th>verdict</th></tr>")
    return f'<table class="summary">\n{head}\n' + "\n".join(rows) + "\n</table>"


def _gaps_table(rows: Sequence[GapRow]) -> str:
    if not rows:
        return '<p class="muted">No theory-vs-practice gap rows for this figure.</p>'
    head = ("<tr><th>quantity</th><th>time</th><th>d</th><th>theory</th><th>empirical mean</th><th>SE</th>"
            "<th>seeds</th>"
            "<th>gap / SE</th><th>tolerance</th><th></th><th>justification</th></tr>")
    body = []
    for r in rows:
        tol = f"t-interval at level {r.level:g}" + (f" + {r.allowance:g}" if r.allowance > 0 else "")
        body.append(
            f"<tr><td>{_e(r.quantity)}</td><td class=\"num\">{_num(r.time)}</td><td class=\"num\">{_num(r.d)}</td>"
            f"<td class=\"num\">{_num(r.theory)}"
            f"</td><td class=\"num\">{_num(r.mean)}</td><td class=\"num\">{_num(r.se)}</td>"
            f"<td class=\"num\">{r.n_seeds}</td><td class=\"num\">{_num(r.gap_se)}</td><td>{_e(tol)}</td>"
            f"<td>{_mark(r.within)}</td><td>{_e(r.allowance_source)}</td></tr>")
    return "<table>\n" + head + "\n" + "\n".join(body) + "\n</table>"


def _checks_table(rows: Sequence[CheckResult]) -> str:
    if not rows:
        return '<p class="muted">No theorem checks for this figure.</p>'
    head = "<tr><th>check</th><th>result</th><th>measured</th><th>expected</th><th>tolerance</th></tr>"
    body = [f"<tr><td>{_e(c.name)}</td><td>{_mark(c.passed, 'pass', 'FAIL')}</td><td class=\"num\">"
            f"{_num(c.measured)}</td><td class=\"num\">{_num(c.expected)}</td><td>{_e(c.tolerance)}</td></tr>"
            for c in rows]
    return "<table>\n" + head + "\n" + "\n".join(body) + "\n</table>"


def _versions_text(versions_json: str) -> str:
    try:
        versions = json.loads(versions_json)
    except ValueError:
        return versions_json
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))


def _figure_html(f: FigureEntry) -> str:
    spec = f.spec
    parts = [f'<article id="fig-{_e(spec.name)}">', f"<h3>{_e(spec.name)}</h3>",
             f'<p class="meta">{_e(spec.paper)} &#183; spec: {_e(spec.spec)} &#183; status: {_e(f.status)}'
             f" &#183; runtime: {_runtime(f.runtime_s)}</p>"]
    if f.error:
        parts.append(f'<div class="error"><span class="bad">FAILED</span>: {_e(f.error)}</div>')
        parts.append(f"<p>{_e(spec.full_caption)}</p>")
    if f.png is not None:
        b64 = base64.b64encode(f.png).decode("ascii")
        parts.append(f'<figure><img src="data:image/png;base64,{b64}" alt="{_e(spec.name)}" />'
                     f"<figcaption>{_e(spec.full_caption)}</figcaption></figure>")
    if not f.error:
        parts += ["<h4>Theory vs practice</h4>", _gaps_table(f.gaps), "<h4>Theorem checks</h4>",
                  _checks_table(f.checks)]
    if f.config_json:
        parts.append(
            "<h4>Provenance</h4><table>"
            f"<tr><th>seed</th><td>{_e(f.seed)}</td></tr><tr><th>device</th><td>{_e(f.device)}</td></tr>"
            f"<tr><th>git revision</th><td>{_e(f.git_rev)}</td></tr>"
            f"<tr><th>versions</th><td>{_e(_versions_text(f.versions_json))}</td></tr>"
            f"<tr><th>cache entry</th><td>{_e(f.cache_path)}</td></tr></table>"
            f"<pre>{_e(json.dumps(json.loads(f.config_json), indent=1, sort_keys=True))}</pre>")
    parts.append("</article>")
    return "\n".join(parts)


def _model_html(s: ModelSection) -> str:
    parts = [f'<section id="model-{_e(s.model)}">', f"<h2>{_e(s.model)}</h2>"]
    if s.module.state == "error":
        parts.append(f'<div class="error"><span class="bad">FAILED</span>: figures/{_e(s.model)}.py does not import: '
                     f"{_e(s.module.detail)}</div>")
    if not s.figures:
        why = s.module.detail or "no figures registered"
        parts.append(f'<p class="muted">No figures yet for this model ({_e(why)}).</p>')
    parts += [_figure_html(f) for f in s.figures]
    parts.append("</section>")
    return "\n".join(parts)


def render_html(sections: Sequence[ModelSection], *, preset: str, seed: int, device: str, wall_s: float) -> str:
    """The complete, self-contained HTML document (well-formed XHTML-compatible markup, inline CSS, no scripts)."""
    n_figs = sum(len(s.figures) for s in sections)
    n_failed = sum(f.failed for s in sections for f in s.figures)
    versions = _versions_text(json.dumps(package_versions()))
    header = (
        f"<p class=\"meta\">preset <b>{_e(preset)}</b> ({_e(PRESETS[preset])}) &#183; seed {_e(seed)} &#183; "
        f"device {_e(device)} &#183; git {_e(git_revision())} &#183; built {_e(utc_now())} &#183; "
        f"{n_figs} figures, {n_failed} failed &#183; wall time {wall_s:.1f} s</p>"
        f"<p class=\"meta\">versions: {_e(versions)}</p>")
    legend = ("<p class=\"meta\">Line styles in every figure: closed-form theory solid, reduced ODE/map dashed, "
              "learned trajectories dotted (mean over seeds) with a shaded band. Gaps are "
              "|empirical mean &#8722; theory| in units of the standard error over seeds; each row is marked "
              "within/outside the tolerance its justification gives.</p>")
    body = "\n".join(_model_html(s) for s in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\" />\n"
            f"<title>attndyn report ({_e(preset)})</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            f"<h1>attndyn: theory vs practice ({_e(preset)} preset)</h1>\n{header}\n<h2>Summary</h2>\n"
            f"{_summary_table(sections)}\n{legend}\n{body}\n</body>\n</html>\n")
