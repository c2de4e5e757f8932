"""The estimates' acceptance table: each figure's quick-preset estimate against its measured quick build.

Usage (from the repository root, with the project on PYTHONPATH)::

    python tools/estimate_validation.py [NAME ...] [--preset quick] [--out PATH] [--jobs N] [--part both|build|estimate]

For every figure named (default: every registered figure that computes its own data; a figure sharing another's data
costs nothing of its own and is listed as such), two fresh single-threaded processes are run:

- ``estimate``: ``figures.estimate.estimate([NAME], PRESET)``, as ``python -m figures estimate`` computes it, with
  the points it measured on the way (at most half way to the preset: never the preset's own build, unless the fit
  puts it under ``DIRECT_S`` seconds, when the estimate is that measurement);
- ``build``: the figure's data function at the tiny preset (numba compiles, first-call costs; another seed, so no
  memoised run is reused), then at the preset, timed: process CPU seconds, as the estimate measures.

The table (figure, estimate, measured, ratio, the load average at each child's start) is written atomically to
``--out`` (default ``results/estimate_validation.json``) after every figure, merged with the rows already there, so
an interrupted run resumes, and the parts can be run separately (``--part build`` once, ``--part estimate`` again
after a change of the cost model). The summary counts the figures whose ratio estimate/measured lies in [1/2, 2].
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FACTOR = 2.0
"""An estimate counts as right when estimate/measured lies in [1/FACTOR, FACTOR]."""

GOAL = 0.9
"""Fraction of the figures whose estimate must count as right."""

_ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")}


def child_estimate(name: str, preset: str) -> dict:
    """The estimate of ``name`` at ``preset`` on the CPU, with the points it measured."""
    from figures import estimate

    (row,) = estimate.estimate([name], preset, device="cpu")
    if row.error:
        raise RuntimeError(row.error)
    return {
        "estimate_s": row.seconds,
        "tiny_s": row.measured_s,
        "overhead_s": row.overhead_s,
        "exponent": row.exponent,
        "work_ratio": row.work_ratio,
    }


def child_build(name: str, preset: str) -> dict:
    """Process CPU seconds of the data function of ``name`` at ``preset``, after a tiny build (another seed)."""
    from figures import estimate
    from figures.presets import DEFAULT_SEED, RunConfig
    from figures.registry import REGISTRY

    REGISTRY.discover()
    spec = REGISTRY.get(name)
    with estimate._one_thread():  # as the estimate measures: one thread, process CPU time, after a tiny warm-up
        warm = RunConfig(
            figure=name, preset="tiny", device="cpu", params=dict(spec.params["tiny"]), seed=DEFAULT_SEED + 1
        )
        t0 = time.process_time()
        spec.data(warm)
        warm_s = time.process_time() - t0
        cfg = RunConfig(figure=name, preset=preset, device="cpu", params=dict(spec.params[preset]))
        t0 = time.process_time()
        spec.data(cfg)
        seconds = time.process_time() - t0
    return {"measured_s": seconds, "warm_up_s": warm_s}


def _run_child(part: str, name: str, preset: str) -> dict:
    """Run one part for one figure in a fresh single-threaded process; its fields, or ``{"error": ...}``."""
    env = {**os.environ, **_ONE_THREAD}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", part, "--preset", preset, name],
        env=env,
        capture_output=True,
        text=True,
    )
    fields = {f"{part}_load": load, f"{part}_wall_s": time.perf_counter() - t0}
    if proc.returncode != 0:
        return {**fields, f"{part}_error": proc.stderr[-2000:]}
    return {**fields, **json.loads(proc.stdout.strip().splitlines()[-1])}


def summarise(rows: dict) -> dict:
    """Ratios and the fraction of figures within the factor (rows with both parts measured)."""
    done = {n: r for n, r in rows.items() if "estimate_s" in r and "measured_s" in r and r["measured_s"] > 0}
    for r in done.values():
        r["ratio"] = r["estimate_s"] / r["measured_s"]
    within = sorted(n for n, r in done.items() if 1 / FACTOR <= r["ratio"] <= FACTOR)
    return {
        "compared": len(done),
        "within": len(within),
        "fraction": len(within) / len(done) if done else float("nan"),
        "factor": FACTOR,
        "goal": GOAL,
        "outside": {n: round(r["ratio"], 3) for n, r in sorted(done.items()) if n not in within},
    }


def _write(path: Path, table: dict) -> None:
    from dynamics.trajectory import atomic_write

    atomic_write(path, (json.dumps(table, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def validate(names, preset: str, out: Path, jobs: int, parts: tuple[str, ...]) -> dict:
    """Measure ``parts`` for ``names`` with ``jobs`` children at a time, writing the merged table after each one."""
    from figures.registry import REGISTRY

    REGISTRY.discover()
    names = REGISTRY.resolve(names) if names else REGISTRY.names()
    table = json.loads(out.read_text()) if out.exists() else {}
    if table.get("preset", preset) != preset:
        raise SystemExit(f"{out} holds the {table['preset']} preset; name another --out for {preset}")
    rows = table.setdefault("rows", {})
    table.update(preset=preset, cores=os.cpu_count())
    lock = threading.Lock()
    todo = []
    for name in names:
        spec = REGISTRY.get(name)
        if spec.shares_data_with is not None:
            rows[name] = {"shares_data_with": spec.shares_data_with}
            continue
        todo += [(part, name) for part in parts]

    def one(job):
        part, name = job
        fields = _run_child(part, name, preset)
        with lock:
            row = rows.setdefault(name, {})
            row.update(fields)
            table["summary"] = summarise(rows)
            _write(out, table)
        ratio = row.get("ratio")
        print(
            f"{name:36s} {part:8s} {json.dumps({k: v for k, v in fields.items() if 'error' not in k})}"
            + (f"  ratio {ratio:.2f}" if ratio is not None else "")
            + ("  ERROR" if f"{part}_error" in fields else ""),
            flush=True,
        )

    with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, todo))
    table["summary"] = summarise(rows)
    _write(out, table)
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="figures or models (default: every figure)")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "estimate_validation.json")
    ap.add_argument("--jobs", type=int, default=1, help="children at a time (each single-threaded)")
    ap.add_argument("--part", choices=("both", "build", "estimate"), default="both")
    ap.add_argument("--child", choices=("build", "estimate"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        (name,) = args.names
        fn = child_build if args.child == "build" else child_estimate
        print(json.dumps(fn(name, args.preset)))
        return 0
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1; got {args.jobs}")
    parts = ("estimate", "build") if args.part == "both" else (args.part,)
    table = validate(args.names, args.preset, args.out, args.jobs, parts)
    s = table["summary"]
    print(
        f"{s['within']} of {s['compared']} estimates within a factor {FACTOR:g} ({100 * s['fraction']:.0f} %); "
        f"outside: {s['outside']}"
    )
    return 0 if s["compared"] and s["fraction"] >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
