"""Command line: ``python -m figures list [--markdown] | params NAME... | make NAME... | report`` (also installed as
``attndyn-figures``).

Examples::

    python -m figures list
    python -m figures params scan_snap.fig4                                  # parameters, units, ranges, presets
    python -m figures make scan_snap.fig4 --set num_unique=20 --set eta_Y=3  # away from the preset
    python -m figures report --set scan_snap.fig4.eta_Y=3
    python -m figures make single_location.fig4a scan_snap --preset quick     # a model name = all its figures
    python -m figures report                                                 # report/, quick preset, 2 workers
    python -m figures report --preset paper --device auto --out report-paper --jobs 4
    python -m figures report --include scan_snap --preset tiny               # one model (any registered one)

Exit status: 0 when the report (or the requested figures) was built, whatever the verdicts (verdicts are data, in
``report/summary.json``); 1 if a figure (or a figure module) raised an error; 2 on bad input, with a one-line
message and no traceback: unknown figure, preset, device or format, a negative seed, an unknown parameter or a
value out of its range in ``--set`` (the message lists the valid keys), ``--jobs < 1``, an output or
cache folder that is a file or not writable (checked before anything is computed). A write that fails later (disk
full, permission denied, read-only file system) exits 1 with one line naming the file. Progress bars go to stderr (only
on a terminal), log messages to stderr, the summary to stdout.
"""

from __future__ import annotations

import argparse
import copy
import errno
import importlib.util
import json
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from dynamics.validation import MAX_INT, check_int
from figures import cache, registry, runner
from figures._style import SAVE_METADATA
from figures.params import parse_assignment
from figures.presets import DEFAULT_PRESET, DEFAULT_SEED, DEVICES, PRESETS, check_preset, resolve_device
from figures.report import DEFAULT_JOBS, DEFAULT_REPORT_DIR, build_report

logger = logging.getLogger("figures")


class UsageError(ValueError):
    """A bad command line: reported in one line with exit status 2."""


WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO, errno.EFBIG, errno.ENAMETOOLONG}
)
"""``errno`` values of a failed write the user can act on (disk full or over quota, permission denied, read-only
file system, an I/O error, a file or name too long): reported in one line with exit status 1, no traceback."""


def _is_write_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS


def _write_error_line(exc: OSError) -> str:
    """One line for a failed write: the writer's message (which names the file) or the file named by the OS."""
    text = exc.strerror or str(exc)  # without the "[Errno N]" prefix
    if exc.filename is not None and str(exc.filename) not in text:
        text = f"cannot write {exc.filename}: {text}"
    return " ".join(text.split())


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message and exits; we want one line, exit 2
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m figures", description="Regenerate the papers' figures and the theory-vs-practice report."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="list the registered figures per model")
    p_list.add_argument("--model", default=None, help="only this model")
    p_list.add_argument(
        "--markdown",
        action="store_true",
        help="print the figure table of the README (figure, paper, docs, command) as Markdown",
    )

    p_params = sub.add_parser("params", help="print a figure's parameters: meaning, unit, valid range, preset values")
    p_params.add_argument("names", nargs="+", metavar="NAME", help="figure names, or model names for all their figures")
    p_params.add_argument("--json", action="store_true", help="print them as JSON (preset -> parameter -> value)")

    def common(p):
        p.add_argument(
            "--preset", default=DEFAULT_PRESET, help=f"one of {', '.join(PRESETS)} (default {DEFAULT_PRESET})"
        )
        p.add_argument("--device", default="auto", help=f"one of {', '.join(DEVICES)} (default auto)")
        p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"the run's seed >= 0 (default {DEFAULT_SEED})")
        p.add_argument("--cache-dir", default=str(cache.DEFAULT_CACHE_DIR), help="cache root (default results)")
        p.add_argument("--recompute", action="store_true", help="ignore cached data, recompute and overwrite")
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="[FIGURE.]PARAM=VALUE",
            dest="overrides",
            help="set a parameter away from the preset (repeatable; VALUE is JSON, e.g. 3, 1e-3, [1,2]; "
            "`python -m figures params NAME` lists the parameters). make: PARAM=VALUE applies to "
            "every figure named; report: FIGURE.PARAM=VALUE",
        )

    p_make = sub.add_parser("make", help="build figures and write <out>/<name>.png/.pdf")
    p_make.add_argument("names", nargs="+", metavar="NAME", help="figure names, or model names for all their figures")
    common(p_make)
    p_make.add_argument("--out", default=str(registry.DEFAULT_OUT_DIR), help="output folder (default figures/out)")
    p_make.add_argument("--formats", default="png,pdf", help=f"comma-separated, among {', '.join(SAVE_METADATA)}")
    p_make.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS|local",
        help="compute the figures' data on a Dask cluster ('local' or tcp://host:8786; shared "
        "--cache-dir), then draw them here",
    )

    p_est = sub.add_parser(
        "estimate", help="estimated CPU-s/GPU-s and memory per figure at a preset (measured at smaller sizes)"
    )
    p_est.add_argument("names", nargs="*", metavar="NAME", help="figure or model names (default: every figure)")
    p_est.add_argument("--preset", default="paper", help=f"one of {', '.join(PRESETS)} (default paper)")
    p_est.add_argument("--device", default="cpu", help=f"one of {', '.join(DEVICES)} (default cpu)")
    p_est.add_argument("--no-progress", action="store_true", help="no line per figure measured (on stderr)")

    p_report = sub.add_parser("report", help="build every figure and write <out>/report.html, summary.json, data/")
    common(p_report)
    p_report.add_argument("--out", default=str(DEFAULT_REPORT_DIR), help="output folder (default report)")
    p_report.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        help=f"worker processes building figures in parallel (default {DEFAULT_JOBS})",
    )
    p_report.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS|local",
        help="build on a Dask cluster: 'local' (a LocalCluster of --jobs workers) or a scheduler "
        "address such as tcp://host:8786 (needs the dask extra; cache and --out shared)",
    )
    p_report.add_argument(
        "--include",
        action="append",
        metavar="MODEL",
        help="only the figures of this model (repeatable; default every registered model)",
    )
    return parser


def _write(text: str) -> None:
    sys.stdout.write(text + "\n")


def check_writable_dir(path: str | os.PathLike, what: str) -> Path:
    """Create folder ``path`` if needed and prove it writable (a temporary file is created and removed);
    else raise :class:`UsageError` naming ``what`` (the option) and the reason.
    """
    if not str(path).strip():
        raise UsageError(f"{what} must be a non-empty folder path; got {str(path)!r}")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{what} {str(p)!r} exists and is not a folder; give a folder path")
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=p):
            pass
    except OSError as exc:
        raise UsageError(f"{what} {str(p)!r} is not a writable folder ({exc.strerror or exc})") from None
    return p


def _common_checks(args) -> str:
    """Validate the options shared by make and report (before anything is computed); return the resolved device."""
    check_preset(args.preset)
    check_int("--seed", args.seed, min_value=0)
    check_int("--seed", args.seed, max_value=MAX_INT)
    return resolve_device(args.device)


def _check_dirs(args) -> None:
    check_writable_dir(args.out, "--out")
    check_writable_dir(args.cache_dir, "--cache-dir")


MARKDOWN_HEADER = (
    "| figure | paper | mathematics | command (quick preset; add `--preset paper` for the paper's sizes) |\n"
    "|---|---|---|---|"
)
"""Header of the Markdown figure table (``list --markdown``), as the README shows it."""


def markdown_table(reg: registry.Registry, models: Sequence[str]) -> str:
    """The figure table of the README: one row per registered figure of ``models``, in registration order.

    Columns: the figure's name, the paper figure it reproduces (with the registry's flags for documented defaults
    and paper-only figures), the documentation section of its mathematics and the command that builds it. The README
    holds this table verbatim; a test regenerates it so that the two cannot drift apart.
    """
    rows = [MARKDOWN_HEADER]
    for model in models:
        for name in reg.names(model):
            spec = reg.get(name)
            paper = (
                spec.paper
                + (" (unrecoverable parameters: documented defaults)" if spec.unrecoverable else "")
                + (f" ({registry.PAPER_ONLY_NOTE})" if spec.paper_only else "")
            )
            rows.append(f"| `{name}` | {paper} | {spec.spec} | `python -m figures make {name}` |")
    return "\n".join(rows)


def _cmd_list(args, reg: registry.Registry) -> int:
    if args.model is not None and args.model not in reg.models:
        raise UsageError(f"--model must be one of {', '.join(reg.models)}; got {args.model!r}")
    statuses = reg.discover()
    models = reg.models if args.model is None else (args.model,)
    if args.markdown:
        _write(markdown_table(reg, models))
        return 1 if any(statuses[m].state == "error" for m in models) else 0
    for model in models:
        status = statuses[model]
        names = reg.names(model)
        note = {"missing": status.detail, "error": f"IMPORT ERROR: {status.detail}"}.get(
            status.state, f"{len(names)} figures"
        )
        _write(f"{model}  ({note})")
        for name in names:
            spec = reg.get(name)
            flags = ("  [unrecoverable parameters: documented defaults]" if spec.unrecoverable else "") + (
                f"  [{registry.PAPER_ONLY_NOTE}]" if spec.paper_only else ""
            )
            _write(f"  {name:32s} {spec.paper}; {spec.spec}{flags}")
    return 1 if any(statuses[m].state == "error" for m in models) else 0


def _overrides(args, *, figure_required: bool) -> dict:
    """``--set`` options as ``{"[figure.]param": value}`` (a later --set of the same key wins)."""
    out = {}
    for text in args.overrides:
        figure, key, value = parse_assignment(text, figure_required=figure_required)
        out[f"{figure}.{key}" if figure else key] = value
    return out


def params_text(reg: registry.Registry, name: str) -> str:
    """The parameters of figure ``name``: one line per parameter with its value in each preset, its unit, range and
    meaning (the record type's field metadata), and the presets the figure defines.
    """
    spec = reg.get(name)
    info = spec.record_type.describe()
    kinds = spec.record_type.kinds
    width = max(len(k) for k in info)
    head = f"{name}  ({spec.record_type.__name__}; presets defined: {', '.join(spec.defined_presets)})"
    lines = [head, f"  {'parameter':{width}s}  " + "  ".join(f"{p:>12s}" for p in PRESETS) + "  meaning"]
    for key, param in info.items():
        values = "  ".join(f"{json.dumps(spec.params[p][key], separators=(',', ':')):>12s}" for p in PRESETS)
        lines.append(f"  {key:{width}s}  {values}  {param.text(kinds[key])}")
    if spec.calibrated_at:
        lines.append(
            "  allowances calibrated at: " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in spec.calibrated_at.items())
        )
    return "\n".join(lines)


def _cmd_params(args, reg: registry.Registry) -> int:
    reg.discover()
    names = reg.resolve(args.names)
    if args.json:
        _write(json.dumps({n: {p: reg.get(n).params[p].to_dict() for p in PRESETS} for n in names}, indent=1))
        return 0
    _write("\n\n".join(params_text(reg, n) for n in names))
    return 0


def _cmd_make(args, reg: registry.Registry) -> int:
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not formats:
        raise UsageError(f"--formats must name at least one of {', '.join(SAVE_METADATA)}; got {args.formats!r}")
    for fmt in formats:
        if fmt not in SAVE_METADATA:
            raise UsageError(f"--formats must be among {', '.join(SAVE_METADATA)}; got {fmt!r}")
    device = _common_checks(args)
    reg.discover()
    names = reg.resolve(args.names)
    overrides = _overrides(args, figure_required=False)
    reg.split_overrides(names, overrides)  # refused here, before anything runs
    _check_dirs(args)
    if args.preset == "paper":
        _paper_estimate_first(names, device, reg, progress=not args.no_progress)
    if args.scheduler is not None:
        _check_scheduler(args.scheduler)
        specs = [reg.get(n) for n in names]
        kw = dict(seed=args.seed, device=device, cache_dir=args.cache_dir, recompute=args.recompute, progress=False)
        factory = runner.default_registry if reg is registry.REGISTRY else reg.factory
        for spec, fields in zip(
            specs,
            runner.dask_entries(
                runner.build_only,
                specs,
                args.preset,
                DEFAULT_JOBS,
                factory,
                None,
                kw,
                not args.no_progress,
                args.scheduler,
            ),
        ):
            if fields.get("error"):
                logger.error("figure %s failed on the cluster: %s", spec.name, fields["error"])
        args.recompute = False  # the cluster has just (re)computed what is in the cache
    try:
        results = registry.make(
            names,
            args.preset,
            seed=args.seed,
            device=device,
            cache_dir=args.cache_dir,
            out_dir=args.out,
            formats=formats,
            recompute=args.recompute,
            progress=not args.no_progress,
            registry=reg,
            **overrides,
        )
    except Exception as exc:  # noqa: BLE001 - a failing figure is reported with its traceback and a non-zero exit
        if _is_write_error(exc):
            raise  # the disk or the folder, not the figure: one line from main
        logger.exception("building figures failed")
        return 1
    _write(f"{'figure':34s} {'data':10s} {'runtime (s)':>11s}  outputs")
    for r in results:
        _write(f"{r.spec.name:34s} {r.status:10s} {r.runtime_s:11.2f}  {', '.join(str(p) for p in r.outputs)}")
    counts = {s: sum(r.status == s for r in results) for s in ("cached", "computed", "recomputed", "repaired")}
    for r in results:
        if r.config.overrides:
            _write(f"{r.spec.name}: {r.dataset.attrs.get('caption', '')}")
    _write(
        f"{len(results)} figures ({args.preset}, device {device}): "
        + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        + f"; cache {args.cache_dir}"
    )
    return 0


def _cmd_estimate(args, reg: registry.Registry) -> int:
    from figures import estimate

    check_preset(args.preset)
    cuda = args.device == "cuda"
    device = resolve_device("auto" if cuda else args.device)  # no CUDA here: measure on the CPU and say so
    reg.discover()
    names = reg.resolve(args.names) if args.names else reg.names()
    est = estimate.estimate(names, args.preset, device=device, registry=reg, progress=not args.no_progress)
    _write(estimate.format_table(est, cuda_measured=not cuda or device == "cuda"))
    return 0


def _paper_estimate_first(
    names: Sequence[str] | None, device: str, reg: registry.Registry, *, progress: bool = True
) -> None:
    """At --preset paper: print the estimate (measured at smaller sizes) before computing, and on a CPU how to go
    faster; with ``progress``, a line per figure measured on stderr.
    """
    from figures import estimate

    logger.info(
        "--preset paper: estimating the cost first (each figure measured at sizes up to half way from --preset tiny)"
    )
    _write(estimate.format_table(estimate.estimate(names, "paper", device=device, registry=reg, progress=progress)))


def _package_registry() -> registry.Registry:
    """The package's registry: what the report's workers rebuild when ``--include`` narrows the models."""
    return registry.REGISTRY


def _only(reg: registry.Registry, include: Sequence[str]) -> registry.Registry:
    """A view of ``reg`` holding the models of ``include`` only (figures and import statuses shared)."""
    unknown = [m for m in include if m not in reg.models]
    if unknown:
        raise UsageError(f"--include must name registered models ({', '.join(reg.models)}); got {unknown}")
    view = copy.copy(reg)
    view.models = tuple(m for m in reg.models if m in include)
    view.factory = reg.factory or (_package_registry if reg is registry.REGISTRY else None)
    return view


def _check_scheduler(scheduler: str) -> None:
    if not scheduler.strip():
        raise UsageError("--scheduler must be 'local' or a Dask scheduler address such as tcp://host:8786; got ''")
    if importlib.util.find_spec("distributed") is None:
        raise UsageError("--scheduler needs the optional extra 'dask' (pip install 'attndyn[dask]')")


def _cmd_report(args, reg: registry.Registry) -> int:
    check_int("--jobs", args.jobs, min_value=1)
    if args.include:
        reg = _only(reg, args.include)
    device = _common_checks(args)
    overrides = _overrides(args, figure_required=True)
    if overrides:
        reg.discover()
        reg.split_overrides(reg.names(), overrides, figure_required=True)
    _check_dirs(args)
    if args.scheduler is not None:
        _check_scheduler(args.scheduler)
    if args.preset == "paper":
        _paper_estimate_first(None, device, reg, progress=not args.no_progress)
    result = build_report(
        args.preset,
        seed=args.seed,
        device=device,
        out_dir=args.out,
        cache_dir=args.cache_dir,
        recompute=args.recompute,
        progress=not args.no_progress,
        registry=reg,
        jobs=args.jobs,
        scheduler=args.scheduler,
        overrides=overrides,
    )
    for s in result.sections:
        n_cached = sum(f.status == "cached" for f in s.figures)
        counts = ", ".join(f"{st} {s.count(st)}" for st in registry.STATUSES)
        _write(f"{s.model:18s} {s.verdict:14s} figures {len(s.figures)} (cached {n_cached}); rows+checks: {counts}")
    _write(f"report: {result.path}  summary: {result.summary_path}")
    return 1 if result.n_failed else 0


def main(argv: Sequence[str] | None = None, *, reg: registry.Registry | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) on registry ``reg`` (default the package's); return
    the exit status.
    """
    reg = registry.REGISTRY if reg is None else reg
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        logging.getLogger("fontTools").setLevel(logging.WARNING)  # the PDF backend's font subsetting chatter
    try:
        args = _parser().parse_args(argv)
        command = {
            "list": _cmd_list,
            "params": _cmd_params,
            "make": _cmd_make,
            "report": _cmd_report,
            "estimate": _cmd_estimate,
        }[args.command]
        with runner.signals_as_interrupts():  # SIGTERM stops a build as Ctrl-C does: workers stopped, temp files gone
            status = command(args, reg)
            sys.stdout.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
            return status
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", 2)  # runner.Interrupted carries its signal; a plain Ctrl-C is SIGINT (2)
        sys.stderr.write(f"interrupted ({signal.Signals(signum).name}): stopped; finished figures stay cached\n")
        return 128 + signum
    except ValueError as exc:  # UsageError and the validation errors of presets, devices, names, seeds, --set
        message = " ".join(str(exc).split())  # one line
        sys.stderr.write(f"error: {message}\n")
        return 2
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly, as a shell tool does
        _quiet_stdout()
        return 0
    except OSError as exc:  # a full disk, a folder that cannot be written: one line naming the file, no traceback
        if not _is_write_error(exc):
            raise
        sys.stderr.write(f"error: {_write_error_line(exc)}\n")
        return 1


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush of a closed pipe raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a real file (captured in tests): nothing to flush there
        pass


if __name__ == "__main__":
    sys.exit(main())
