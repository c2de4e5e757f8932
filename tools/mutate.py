"""Mutation testing of closedform/ and dynamics/ (issue 19): ``make mutate`` runs this file.

Why two engines
---------------
mutmut 3 (pinned in the ``test`` extra) mutates through *trampolines*: every plain Python function is copied once
per mutant and a wrapper picks the active copy at call time. It deliberately skips decorated functions and does not
mutate module-level code, so it never touches the numba kernels (``@njit``/``@vectorize``), the Runge-Kutta tableaux
or the spec constants, which hold most of the mathematics here. This script therefore has two engines:

* ``mutmut``: runs ``mutmut run`` with the ``[mutmut]`` section of setup.cfg (plain Python functions and methods of
  closedform/ and dynamics/) and summarises ``mutmut results``.
* ``disk`` (default): mutmut's own mutation operators (``mutmut.mutation.mutators.mutation_operators``; string
  mutants left out, they only change messages) applied to *every* expression of a file, numba kernels and module
  constants included; each mutant is written over the file in a scratch copy of the repository and the file's
  tests are run with pytest (``-x``; a mutant is *killed* when pytest fails, *timeout* when it runs past the limit).
  The numba cache of the mutated module is cleared before each run, so the kernels are recompiled from the mutant.

The summary (``<out>/summary.md`` and one ``<out>/<file>.json`` per file, written atomically) gives the kill rate
and every survivor with its line and diff; judge each survivor: equivalent (no observable change: say why) or a
missing test (add one).

Usage::

    python tools/mutate.py                                   # the default targets below, disk engine
    python tools/mutate.py closedform/special.py --sample 80 # a seeded random sample of that file's mutants
    python tools/mutate.py --engine mutmut                   # mutmut over setup.cfg's [mutmut] paths

Not part of CI: a file takes minutes to hours (each mutant reruns its tests and recompiles its kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGETS: dict[str, list[str]] = {
    "closedform/special.py": ["tests/test_special.py", "tests/test_public_api_values.py"],
    "dynamics/saveat.py": ["tests/test_dynamics.py", "tests/test_public_api_values.py", "-k", "save"],
    "dynamics/validation.py": ["tests/test_dynamics.py", "tests/test_figures_framework.py", "-k",
                               "valid or refus or bad or check"],
    "dynamics/_steppers.py": ["tests/test_dynamics.py"],
    "closedform/single_location.py": ["tests/test_single_location.py", "tests/test_public_api_values.py"],
    "closedform/_single_location_kernels.py": ["tests/test_single_location.py"],
}
"""Source file -> pytest arguments selecting its tests (the default run mutates the first two)."""
DEFAULT_TARGETS = ("closedform/special.py", "dynamics/saveat.py")
SKIP_NAMES = ("REFERENCE", "__all__")
"""Module-level assignments not mutated: reference data that the tests read (a mutant only tests the test) and the
export list."""


@dataclass
class Mutant:
    """One mutant: where, what, and what the tests said."""

    index: int
    line: int
    operator: str
    before: str
    after: str
    status: str = "pending"  # killed | survived | timeout | error
    seconds: float = 0.0


def _operators():
    import libcst as cst
    from mutmut.mutation.mutators import mutation_operators

    return [(t, op) for t, op in mutation_operators if t is not cst.BaseString and "string" not in op.__name__]


def generate(path: Path) -> tuple[str, list[tuple[Mutant, str]]]:
    """All mutants of ``path``: a list of (Mutant, mutated source)."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    code = path.read_text()
    wrapper = MetadataWrapper(cst.parse_module(code))
    pos = wrapper.resolve(PositionProvider)
    module = wrapper.module
    ops = _operators()
    lines = code.splitlines()
    skip: set[int] = set()

    class Skipper(cst.CSTVisitor):
        """Nodes never mutated: docstrings, decorators, annotations, imports, skipped names, pragma lines."""

        def _skip(self, node):
            for sub in _walk(node):
                skip.add(id(sub))
            return False

        def visit_Decorator(self, node):
            return self._skip(node)

        def visit_Annotation(self, node):
            return self._skip(node)

        def visit_Import(self, node):
            return self._skip(node)

        def visit_ImportFrom(self, node):
            return self._skip(node)

        def visit_SimpleStatementLine(self, node):
            body = node.body[0]
            if isinstance(body, cst.Expr) and isinstance(body.value, (cst.SimpleString, cst.ConcatenatedString)):
                return self._skip(node)
            if isinstance(body, (cst.Assign, cst.AnnAssign)):
                targets = body.targets if isinstance(body, cst.Assign) else [body]
                names = {getattr(t.target, "value", None) for t in targets}
                if names & set(SKIP_NAMES):
                    return self._skip(node)
            if "pragma: no mutate" in lines[pos[node].start.line - 1]:
                return self._skip(node)
            return True

    module.visit(Skipper())
    out = []
    for node in _walk(module):
        if id(node) in skip or node not in pos:
            continue
        for typ, op in ops:
            if not isinstance(node, typ):
                continue
            try:
                variants = list(op(node))
            except Exception:  # noqa: BLE001 - an operator that cannot handle a node yields nothing
                continue
            for new in variants:
                try:
                    src = module.deep_replace(node, new).code
                except Exception:  # noqa: BLE001 - an invalid replacement is not a mutant
                    continue
                if src == code:
                    continue
                try:
                    compile(src, str(path), "exec")
                except SyntaxError:
                    continue
                line = pos[node].start.line
                before = module.code_for_node(node).strip().splitlines()[0][:120]
                after = module.code_for_node(new).strip().splitlines()[0][:120]
                out.append((Mutant(index=len(out), line=line, operator=op.__name__, before=before, after=after),
                            src))
    return code, out


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _scratch_copy() -> Path:
    """A copy of the tracked files (and untracked, unignored ones) in a temporary folder."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    dst = Path(tempfile.mkdtemp(prefix="attndyn-mutate-"))
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    return dst


def _env(scratch: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(scratch), NUMBA_CACHE_DIR=str(scratch / ".numba_cache"),
               MPLBACKEND="Agg", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("CI", None)
    return env


def _clear_numba_cache(scratch: Path, stem: str) -> None:
    for f in (scratch / ".numba_cache").rglob(f"{stem}.*"):
        f.unlink(missing_ok=True)


def _pytest(scratch: Path, args: list[str], timeout: float) -> tuple[str, float]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
           "-p", "no:randomly", "--no-header", *args]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, cwd=scratch, env=_env(scratch), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - t0
    # pytest exit codes: 0 passed, 1 tests failed, 2 interrupted, 3 internal error, 4 usage, 5 no tests
    status = {0: "survived", 1: "killed", 2: "killed", 3: "killed"}.get(res.returncode, "error")
    return status, time.perf_counter() - t0


def run_disk(target: str, test_args: list[str], out_dir: Path, *, sample: int | None, seed: int,
             timeout_factor: float) -> dict:
    """Mutate ``target`` on disk in a scratch copy and run its tests per mutant; returns the file's summary."""
    from dynamics.trajectory import atomic_write

    path = ROOT / target
    code, mutants = generate(path)
    n_total = len(mutants)
    if sample is not None and sample < n_total:
        mutants = sorted(random.Random(seed).sample(mutants, sample), key=lambda m: m[0].index)
    scratch = _scratch_copy()
    try:
        status, base = _pytest(scratch, test_args, timeout=3600)
        if status != "survived":
            raise RuntimeError(f"the tests of {target} ({' '.join(test_args)}) fail before any mutation")
        limit = timeout_factor * base + 60.0
        print(f"{target}: {len(mutants)} of {n_total} mutants; baseline {base:.1f} s, limit {limit:.0f} s",
              flush=True)
        for k, (m, src) in enumerate(mutants):
            (scratch / target).write_text(src)
            _clear_numba_cache(scratch, path.stem)
            m.status, m.seconds = _pytest(scratch, test_args, timeout=limit)
            print(f"  [{k + 1}/{len(mutants)}] line {m.line} {m.operator}: {m.before!r} -> {m.after!r}: "
                  f"{m.status} ({m.seconds:.1f} s)", flush=True)
        (scratch / target).write_text(code)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    counts = {s: sum(m.status == s for m, _ in mutants) for s in ("killed", "survived", "timeout", "error")}
    decided = counts["killed"] + counts["survived"] + counts["timeout"]
    summary = {"target": target, "tests": test_args, "engine": "disk (mutmut operators)", "n_generated": n_total,
               "n_run": len(mutants), "sample_seed": seed if sample is not None else None, **counts,
               "kill_rate": (counts["killed"] + counts["timeout"]) / decided if decided else float("nan"),
               "mutants": [asdict(m) for m, _ in mutants]}
    out = out_dir / (target.replace("/", "__") + ".json")
    atomic_write(out, lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=1)))
    return summary


def run_mutmut(out_dir: Path) -> dict:
    """``mutmut run`` with setup.cfg's [mutmut] section, then the counts of ``mutmut results --all true``."""
    subprocess.run([sys.executable, "-m", "mutmut", "run"], cwd=ROOT, env=_env(ROOT), check=False)
    res = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=ROOT, env=_env(ROOT),
                         capture_output=True, text=True, check=False).stdout
    rows = [line.rsplit(":", 1) for line in res.splitlines() if ":" in line]
    counts: dict[str, int] = {}
    for _, status in rows:
        counts[status.strip()] = counts.get(status.strip(), 0) + 1
    survivors = [name.strip() for name, status in rows if status.strip() == "survived"]
    summary = {"target": "setup.cfg [mutmut] source_paths", "engine": "mutmut", **counts, "survivors": survivors}
    from dynamics.trajectory import atomic_write

    atomic_write(out_dir / "mutmut.json", lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=1)))
    return summary


def write_markdown(summaries: list[dict], out_dir: Path) -> Path:
    """``summary.md``: one row per file (kill rate = (killed + timeout) / decided) and every survivor."""
    from dynamics.trajectory import atomic_write

    lines = ["# Mutation testing summary", "", "| file | engine | run / generated | killed | timeout | survived | "
             "error | kill rate |", "|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        lines.append(f"| {s['target']} | {s['engine']} | {s.get('n_run', '')} / {s.get('n_generated', '')} | "
                     f"{s.get('killed', 0)} | {s.get('timeout', 0)} | {s.get('survived', 0)} | {s.get('error', 0)} "
                     f"| {s.get('kill_rate', float('nan')):.3f} |")
    for s in summaries:
        surv = [m for m in s.get("mutants", []) if m["status"] == "survived"]
        if surv:
            lines += ["", f"## Survivors in {s['target']}", ""]
            lines += [f"- line {m['line']} ({m['operator']}): `{m['before']}` -> `{m['after']}`" for m in surv]
        elif s.get("survivors"):
            lines += ["", f"## Survivors ({s['engine']})", ""] + [f"- {n}" for n in s["survivors"]]
    path = out_dir / "summary.md"
    atomic_write(path, lambda tmp: Path(tmp).write_text("\n".join(lines) + "\n"))
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help=f"source files (default {' '.join(DEFAULT_TARGETS)}); their "
                                                   f"tests come from TARGETS or --tests")
    parser.add_argument("--engine", choices=("disk", "mutmut"), default="disk")
    parser.add_argument("--tests", nargs=argparse.REMAINDER, help="pytest arguments for a target not in TARGETS")
    parser.add_argument("--sample", type=int, default=None, help="run a seeded random sample of this many mutants")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-factor", type=float, default=4.0,
                        help="a mutant times out after factor x the baseline test time + 60 s")
    parser.add_argument("--out", default=str(ROOT / "results" / "mutate"))
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.engine == "mutmut":
        summaries = [run_mutmut(out_dir)]
    else:
        summaries = []
        for target in args.targets or DEFAULT_TARGETS:
            tests = args.tests if args.tests else TARGETS.get(target)
            if tests is None:
                parser.error(f"no tests known for {target}: pass --tests <pytest args>")
            summaries.append(run_disk(target, tests, out_dir, sample=args.sample, seed=args.seed,
                                      timeout_factor=args.timeout_factor))
    path = write_markdown(summaries, out_dir)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
