"""Run every benchmark and print throughputs with ratios against baselines measured in the same run.

Usage: ``python -m benchmarks [--quick] [--only NAME ...]``. Each ``benchmarks/bench_<name>.py`` defines
``run(quick: bool) -> list[Result]``; see ``benchmarks/_common.py``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pathlib
import sys
import time

from benchmarks._common import Result

log = logging.getLogger("benchmarks")


def discover() -> list[str]:
    """Names of the benchmark modules (``bench_<name>.py`` -> ``<name>``), sorted."""
    here = pathlib.Path(__file__).parent
    return sorted(p.stem.removeprefix("bench_") for p in here.glob("bench_*.py"))


def format_table(rows: list[tuple[str, Result]]) -> str:
    """A plain-text table: benchmark, throughput, baseline, ratio, target, status."""
    header = f"{'module':<18} {'benchmark':<52} {'throughput':>14} {'baseline':>14} {'ratio':>9} {'target':>10} ok"
    lines = [header, "-" * len(header)]
    for module, r in rows:
        ratio = r.ratio
        target = ""
        ok = ""
        if r.target_ratio is not None and ratio is not None:
            target = f">={r.target_ratio:g}x"
            ok = "yes" if ratio >= r.target_ratio else "NO"
        if r.target_value is not None:
            target = (target + " " if target else "") + f">={r.target_value:.3g}"
            ok = "yes" if r.value >= r.target_value and ok != "NO" else "NO"
        base = f"{r.baseline:.4g}" if r.baseline is not None else "-"
        rat = f"{ratio:.1f}x" if ratio is not None else "-"
        lines.append(
            f"{module:<18} {r.name[:52]:<52} {r.value:>10.4g} {r.unit[:3]:<3} {base:>14} {rat:>9} {target:>10} {ok}"
        )
        if r.note:
            lines.append(f"{'':<18}   note: {r.note}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run, ratios less stable)")
    parser.add_argument("--only", nargs="*", default=None, help=f"modules to run, from {discover()}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    names = discover()
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            parser.error(f"unknown benchmark module(s) {unknown}; valid: {names}")
        names = [n for n in names if n in args.only]
    rows: list[tuple[str, Result]] = []
    for name in names:
        t0 = time.perf_counter()
        module = importlib.import_module(f"benchmarks.bench_{name}")
        results = module.run(quick=args.quick)
        rows.extend((name, r) for r in results)
        log.info("%s: %d benchmark(s) in %.1f s", name, len(results), time.perf_counter() - t0)
    sys.stdout.write(format_table(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
