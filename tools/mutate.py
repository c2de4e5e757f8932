"""Mutation testing of closedform/ and dynamics/: ``make mutate`` runs this file.

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
  tests (:func:`tests_for`) are run with pytest (``-x``; a mutant is *killed* when pytest fails, *timeout* when it
  runs past the limit). The numba caches of the mutated file and of every file importing it are set aside for the
  run, so the kernels are recompiled from the mutant, and put back afterwards with the original source and its
  timestamp, so the next mutant reuses them.

Sampling and resuming
---------------------
All mutants of closedform/ and dynamics/ number about 10^4 and each reruns its file's tests (seconds to a minute),
so ``--sample N --seed S`` draws a stratified random sample: each file's share of N is proportional to its number
of mutants, drawn from a seeded permutation. Each result is appended to a JSON-lines journal; rerunning the same
command skips the mutants already there (same file content), and ``--max-minutes`` stops a run cleanly. After new
tests are written, ``--recheck`` reruns the survivors not listed in the equivalence file. The summary
(``summary.md``/``summary.json``) gives per file and overall the kill rate over non-equivalent mutants before and
after the rechecks, with a 95 % Clopper-Pearson interval, and every survivor (equivalent ones with their reason).

Usage::

    python tools/mutate.py                                          # every mutant of closedform/ and dynamics/
    python tools/mutate.py --sample 400 --seed 1 --max-minutes 75   # a stratified sample over both
    python tools/mutate.py closedform/special.py --sample 80        # a sample of one file's mutants
    python tools/mutate.py --sample 400 --seed 1 --recheck          # survivors again, with the new tests
    python tools/mutate.py --summary-only                           # the summary from the journal
    python tools/mutate.py --only closedform/special.py#12 --tests tests/closedform/test_special.py  # one mutant
    python tools/mutate.py --engine mutmut                          # mutmut over setup.cfg's [mutmut] paths

Not part of CI: a full run takes days on two cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

AREAS = ("closedform", "dynamics")
"""The packages a full (or stratified-sample) run covers."""
ENGINE_TESTS = (
    "tests/dynamics/test_engine.py",
    "tests/dynamics/test_solvers.py",
    "tests/dynamics/test_engine_cache.py",
)
"""The engine's own tests: a mutant of the core of dynamics/ is judged by these."""
DYNAMICS_TESTS = {
    "provenance": ("tests/dynamics/test_engine_cache.py", "tests/dynamics/test_engine.py"),
    "validation": ("tests/api/test_documented_ranges.py", "tests/api/test_bad_arguments.py"),
    "saveat": ("tests/dynamics/test_engine.py", "tests/closedform/test_public_values.py"),
    "convergence": ("tests/closedform/test_convergence_warnings.py",),
}
"""Tests of dynamics/ modules beyond their subject files (``tests/dynamics/test_<module>.py`` and
``tests/dynamics/test_<module>_*.py``, found by name); a module with neither (integrate, _kernels, _steppers, errors,
trajectory, random) gets ENGINE_TESTS."""
CLOSEDFORM_TESTS = {
    "models": ("tests/api/test_model_registry.py", "tests/api/test_model_entry_points.py"),
}
"""Tests of closedform/ modules that are not a model's (the model contract's registry)."""
DYNAMICS_PINNED = "tests/dynamics/test_engine_reference_values.py"
"""Reference values of the engine that killed survivors of earlier runs: first for every dynamics/ mutant."""
RULES_TESTS = "tests/api/test_documented_ranges.py"
"""Judges the argument rules too (a changed bound disagrees with the docstring); last, so the value tests fail first."""
SKIP_NAMES = ("REFERENCE", "__all__")
"""Module-level assignments not mutated: reference data that the tests read (a mutant only tests the test) and the
export list."""


def tests_for(target: str, root: Path = ROOT) -> list[str]:
    """The pytest arguments that judge a mutant of ``target`` (a path relative to the repository root).

    The mapping follows the tests' subject layout: ``closedform/<model>.py`` and ``closedform/_<model>_kernels.py``
    are judged by ``tests/closedform/test_<model>.py`` and every ``tests/closedform/test_<model>_*.py``,
    ``closedform/special.py`` by ``tests/closedform/test_special.py``, ``closedform/models.py`` by the model
    registry's tests (CLOSEDFORM_TESTS; every closedform file also by ``tests/closedform/test_public_values.py``, the
    value checks of the public functions); ``dynamics/<module>.py`` by ``tests/dynamics/test_<module>.py`` and
    ``tests/dynamics/test_<module>_*.py`` (a leading underscore dropped) with the extras of DYNAMICS_TESTS, and a
    module with neither by the engine's tests (ENGINE_TESTS). The reference-value tests
    ``tests/closedform/test_<model>_reference_values.py`` (``tests/dynamics/test_engine_reference_values.py`` for
    dynamics/) come first, so that with ``-x`` the direct value
    checks fail first; ``tests/api/test_documented_ranges.py`` comes last in every list (it judges the argument rules,
    which are mutated where they are declared, in ``Annotated`` metadata). The empirical and figure tests are left
    out: they exercise the same formulas through torch and are ten times slower per mutant. Files are looked up in
    ``root`` (the scratch copy that runs).
    """
    area, name = target.split("/", 1)
    stem = Path(name).stem

    def subject(folder: str, module: str) -> list[str]:  # tests/<folder>/test_<module>.py, then test_<module>_*.py
        own = [f"tests/{folder}/test_{module}.py"] if (root / "tests" / folder / f"test_{module}.py").is_file() else []
        return [*own, *sorted(str(q.relative_to(root)) for q in (root / "tests" / folder).glob(f"test_{module}_*.py"))]

    if area == "closedform":
        model = stem[1 : -len("_kernels")] if stem.startswith("_") and stem.endswith("_kernels") else stem
        pinned = f"tests/closedform/test_{model}_reference_values.py"
        files = [
            pinned,
            "tests/closedform/test_public_values.py",
            *subject("closedform", model),
            *CLOSEDFORM_TESTS.get(stem, ()),
            RULES_TESTS,
        ]
    elif area == "dynamics":
        own = [*subject("dynamics", stem.lstrip("_")), *DYNAMICS_TESTS.get(stem, ())]
        files = [DYNAMICS_PINNED, *(own or ENGINE_TESTS), RULES_TESTS]
    else:
        raise ValueError(f"no tests known for {target}: pass --tests <pytest args>")
    files = list(dict.fromkeys(f for f in files if (root / f).is_file()))
    if not files:
        raise ValueError(f"no test file found for {target}")
    return files


def area_files() -> list[str]:
    """Every Python source file of closedform/ and dynamics/ (relative paths, sorted)."""
    return sorted(str(p.relative_to(ROOT)) for a in AREAS for p in (ROOT / a).glob("*.py"))


@dataclass
class Mutant:
    """One mutant: where, what, and the text that replaces ``source[start:end]``."""

    index: int
    line: int
    operator: str
    before: str
    after: str
    start: int
    end: int
    text: str

    def apply(self, code: str) -> str:
        """The mutated source."""
        return code[: self.start] + self.text + code[self.end :]


def _operators():
    import libcst as cst
    from mutmut.mutation.mutators import mutation_operators

    return [(t, op) for t, op in mutation_operators if t is not cst.BaseString and "string" not in op.__name__]


def generate(path: Path) -> tuple[str, list[Mutant]]:
    """All mutants of ``path``, in a fixed order (a mutant's index identifies it for a given source)."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider, WhitespaceInclusivePositionProvider

    code = path.read_text()
    wrapper = MetadataWrapper(cst.parse_module(code))
    pos = wrapper.resolve(PositionProvider)
    wpos = wrapper.resolve(WhitespaceInclusivePositionProvider)
    offsets = _line_offsets(code)
    module = wrapper.module
    ops = _operators()
    lines = code.splitlines()
    skip: set[int] = set()

    class Skipper(cst.CSTVisitor):
        """Nodes never mutated: docstrings, decorators, annotations (except the argument rules in ``Annotated[type,
        rule]``), imports, skipped names, pragma lines."""

        def _skip(self, node):
            for sub in _walk(node):
                skip.add(id(sub))
            return False

        def visit_Decorator(self, node):
            return self._skip(node)

        def visit_Annotation(self, node):
            ann = node.annotation
            if isinstance(ann, cst.Subscript) and getattr(ann.value, "value", None) == "Annotated" and ann.slice:
                self._skip(ann.value)
                self._skip(ann.slice[0])  # the type; the rules after it are mutated
                return True
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
    out: list[Mutant] = []
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
                    start, end, text = _splice(code, offsets, wpos.get(node), module, node, new)
                except Exception:  # noqa: BLE001 - an invalid replacement is not a mutant
                    continue
                src = code[:start] + text + code[end:]
                if src == code:
                    continue
                try:
                    compile(src, str(path), "exec")
                except SyntaxError:
                    continue
                before = module.code_for_node(node).strip().splitlines()[0][:120]
                after = (module.code_for_node(new).strip().splitlines() or [""])[0][:120]
                out.append(
                    Mutant(
                        index=len(out),
                        line=pos[node].start.line,
                        operator=op.__name__,
                        before=before,
                        after=after,
                        start=start,
                        end=end,
                        text=text,
                    )
                )
    return code, out


def _line_offsets(code: str) -> list[int]:
    """Character offset of the start of each line (1-based line k starts at ``offsets[k - 1]``)."""
    offsets, total = [], 0
    for line in code.splitlines(keepends=True):
        offsets.append(total)
        total += len(line)
    offsets.append(total)
    return offsets


def _splice(code: str, offsets: list[int], where, module, node, new) -> tuple[int, int, str]:
    """``(start, end, text)`` such that ``code[:start] + text + code[end:]`` has ``node`` replaced by ``new``.

    The same source as ``module.deep_replace(node, new).code`` (checked on a whole file; the fallback where the
    node's text cannot be located) but linear in the mutant instead of the file, so the ~10^4 mutants of
    closedform/ and dynamics/ are generated in minutes instead of hours.
    """
    if where is not None:
        start = offsets[where.start.line - 1] + where.start.column
        end = offsets[where.end.line - 1] + where.end.column
        if code[start:end] == module.code_for_node(node):
            return start, end, module.code_for_node(new)
    return 0, len(code), module.deep_replace(node, new).code


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def generate_cached(target: str, cache_dir: Path) -> tuple[str, list[Mutant]]:
    """:func:`generate`, cached in ``cache_dir`` under the SHA-256 of the source (same source, same mutants)."""
    from dynamics.trajectory import atomic_write

    code = (ROOT / target).read_text()
    path = cache_dir / f"{target.replace('/', '__')}.{_sha(code)}.json"
    if path.is_file():
        return code, [Mutant(**m) for m in json.loads(path.read_text())]
    code, mutants = generate(ROOT / target)
    cache_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps([asdict(m) for m in mutants])))
    return code, mutants


def _scratch_copy(base: str | None = None) -> Path:
    """A copy of the tracked files (and untracked, unignored ones) in a temporary folder; with ``base`` (a git
    revision) the tracked files of that revision instead, e.g. to judge mutants by the suite before new tests."""
    if base is not None:
        dst = Path(tempfile.mkdtemp(prefix="attndyn-mutate-"))
        archive = subprocess.run(["git", "archive", "--format=tar", base], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(dst)], input=archive.stdout, check=True)
        return dst
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    dst = Path(tempfile.mkdtemp(prefix="attndyn-mutate-"))
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    return dst


def _env(scratch: Path) -> dict:
    env = dict(
        os.environ,
        PYTHONPATH=str(scratch),
        NUMBA_CACHE_DIR=str(scratch / ".numba_cache"),
        MPLBACKEND="Agg",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        NUMBA_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("CI", None)
    env.pop("ATTNDYN_KERNEL_DIR", None)
    return env


def dependents(target: str) -> set[str]:
    """``target`` and every file of closedform/ and dynamics/ that imports it, directly or through another.

    numba's on-disk cache checks only the source file of the cached function, not the files of the jitted functions
    it calls (``closedform/_single_location_kernels.py`` inlines ``closedform.special._zeta``), so a mutant must
    clear the caches of all these files or a stale compiled copy of the original would run. Importing the package
    (``import dynamics``, ``from dynamics import X``) counts as importing each of its files.
    """
    files = area_files()
    texts = {f: (ROOT / f).read_text() for f in files}

    def imports(f: str, g: str) -> bool:
        pkg, stem = g[:-3].split("/")
        if stem == "__init__":  # the package itself, imported by name
            pats = (rf"^\s*import\s+{pkg}\s*$", rf"^\s*from\s+{pkg}\s+import\b")
        else:
            mod = re.escape(f"{pkg}.{stem}")
            pats = (
                rf"^\s*from\s+{mod}\s+import\b",
                rf"^\s*import\s+{mod}\b",
                rf"^\s*from\s+{pkg}\s+import\s+(\([^)]*\b|[^\n]*\b){re.escape(stem)}\b",
            )
        return f != g and any(re.search(p, texts[f], re.M) for p in pats)

    found, todo = {target}, [target]
    while todo:
        g = todo.pop()
        for f in files:
            if f not in found and imports(f, g):
                found.add(f)
                todo.append(f)
    return found


def _pytest(scratch: Path, args: list[str], timeout: float) -> tuple[str, float]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:xdist",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--no-header",
        *args,
    ]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, cwd=scratch, env=_env(scratch), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - t0
    # pytest exit codes: 0 passed, 1 tests failed, 2 interrupted, 3 internal error, 4 usage, 5 no tests
    status = {0: "survived", 1: "killed", 2: "killed", 3: "killed"}.get(res.returncode, "error")
    return status, time.perf_counter() - t0


class Runner:
    """Runs mutants in one scratch copy of the repository, restoring the source and numba caches after each."""

    def __init__(self, *, timeout_factor: float, timeout_slack: float, base: str | None = None):
        self.scratch = _scratch_copy(base)
        self.factor, self.slack = timeout_factor, timeout_slack
        self.baseline: dict[tuple[str, ...], float] = {}
        self._deps: dict[str, set[str]] = {}

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _cache_files(self, stems: set[str]) -> list[Path]:
        cache = self.scratch / ".numba_cache"
        return (
            [p for p in cache.rglob("*") if p.is_file() and p.name.split(".", 1)[0] in stems] if cache.is_dir() else []
        )

    def run(self, target: str, code: str, mutant: Mutant, args: list[str]) -> tuple[str, float]:
        """Status (killed, survived, timeout, error) and seconds of the tests ``args`` on ``mutant``."""
        key = tuple(args)
        if key not in self.baseline:
            status, base = _pytest(self.scratch, args, timeout=3600)
            if status != "survived":
                raise RuntimeError(f"the tests {' '.join(args)} fail before any mutation")
            self.baseline[key] = base
            print(f"baseline {' '.join(args)}: {base:.1f} s", flush=True)
        if target not in self._deps:
            self._deps[target] = dependents(target)
        stems = {Path(f).stem for f in self._deps[target]}
        path = self.scratch / target
        st = path.stat()
        stash = Path(tempfile.mkdtemp(prefix="stash-", dir=self.scratch))
        moved = []
        for f in self._cache_files(stems):  # keep the original's compiled code aside
            dst = stash / f.relative_to(self.scratch)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(f, dst)
            moved.append((f, dst))
        try:
            path.write_text(mutant.apply(code))
            return _pytest(self.scratch, args, timeout=self.factor * self.baseline[key] + self.slack)
        finally:
            path.write_text(code)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # numba's cache stamp: mtime and size
            for f in self._cache_files(stems):
                f.unlink(missing_ok=True)
            for f, dst in moved:
                shutil.move(dst, f)
            shutil.rmtree(stash, ignore_errors=True)


def _commit() -> str:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", *AREAS], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return head + ("+dirty" if dirty else "")


def _changed_since(commit: str | None, base: str | None) -> set[str]:
    """Test files changed between ``commit`` (a journal record's) and ``base`` (or the working tree): a survivor has
    not passed their new content. ``{"*"}`` where the commit is unknown or unreadable (every file counts as changed).
    """
    if not commit:
        return {"*"}
    cmd = ["git", "diff", "--name-only", commit.removesuffix("+dirty"), *([base] if base else []), "--", "tests"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return set(out.stdout.split()) if out.returncode == 0 else {"*"}


def read_journal(path: Path) -> list[dict]:
    """The records of a JSON-lines journal (a torn last line from an interrupted run is ignored)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _append(path: Path, record: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def stratified_order(counts: dict[str, int], n: int, seed: int) -> list[tuple[str, int]]:
    """A seeded stratified random sample of ``n`` mutants, in run order.

    Each file gets a share of ``n`` proportional to its number of mutants (largest remainders), drawn without
    replacement from a seeded random permutation of its mutants (a larger ``n`` extends a smaller one). The run
    order interleaves the files by the fraction of their share already run, so a run stopped early is still close to
    a proportional sample.
    """
    total = sum(counts.values())
    n = min(n, total)
    quota = {f: n * c / total for f, c in counts.items()}
    share = {f: int(q) for f, q in quota.items()}
    for f in sorted(counts, key=lambda f: (share[f] - quota[f], f))[: n - sum(share.values())]:
        share[f] += 1
    order = []
    for f, c in sorted(counts.items()):
        rng = random.Random(f"{seed}:{f}")
        perm = rng.sample(range(c), c)[: share[f]]
        order += [((j + rng.random()) / share[f], f, i) for j, i in enumerate(perm)]
    return [(f, i) for _, f, i in sorted(order)]


def run_disk(
    targets: list[str],
    out_dir: Path,
    journal: Path,
    *,
    sample: int | None,
    seed: int,
    tests: list[str] | None,
    timeout_factor: float,
    timeout_slack: float,
    max_minutes: float | None,
    recheck: bool,
    equivalent: dict[str, str],
    only: list[str] | None = None,
    base: str | None = None,
) -> None:
    """Run the mutants of ``targets`` (all, or a stratified sample), appending one record per mutant to ``journal``.

    Mutants already in the journal for the same source (SHA-256) are skipped, so an interrupted run continues where it
    stopped. With ``recheck`` only the journal's survivors not judged equivalent are run again, with the current tests
    (after new tests were written), as records of phase ``recheck``; only the reference-value test files
    (``tests/*/test_*_reference_values.py``), the files of its current selection that its last run did not have and
    those edited since its record's commit are run then, since the mutant already passed the others.
    ``only`` (``file#index`` names) runs just those mutants, as records of phase ``check`` (to confirm that a new test
    kills a survivor; not summarised).
    """
    cache_dir = out_dir / "generated"
    gen = {t: generate_cached(t, cache_dir) for t in targets}
    shas = {t: _sha(code) for t, (code, _) in gen.items()}
    records = read_journal(journal)
    if only:
        order = [(name.rsplit("#", 1)[0], int(name.rsplit("#", 1)[1])) for name in only]
        phase = "check"
    elif recheck:
        latest: dict[tuple, dict] = {}
        for r in records:
            latest[(r["file"], r["sha"], r["index"])] = r
        changed = {c: _changed_since(c, base) for c in {r.get("commit") for r in latest.values()}}
        passed = {  # the files a survivor passed that are unchanged since (none where that is unknown)
            k: set() if "*" in changed[r.get("commit")] else set(r.get("tests") or ()) - changed[r.get("commit")]
            for k, r in latest.items()
        }
        order = [
            (r["file"], r["index"])
            for k, r in latest.items()
            if r["status"] == "survived"
            and r["file"] in gen
            and r["sha"] == shas[r["file"]]
            and f"{r['file']}#{r['index']}" not in equivalent
        ]
        phase = "recheck"
    else:
        counts = {t: len(m) for t, (_, m) in gen.items()}
        order = (
            stratified_order(counts, sample, seed)
            if sample is not None
            else [(t, i) for t in targets for i in range(counts[t])]
        )
        done = {(r["file"], r["sha"], r["index"]) for r in records if r.get("phase") == "sample"}
        order = [(t, i) for t, i in order if (t, shas[t], i) not in done]
        phase = "sample"
    print(f"{len(order)} mutants to run ({phase}); journal {journal}", flush=True)
    commit = (
        _commit()
        if base is None
        else subprocess.run(
            ["git", "rev-parse", base], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    runner = Runner(timeout_factor=timeout_factor, timeout_slack=timeout_slack, base=base)
    t_start = time.perf_counter()
    try:
        for k, (t, i) in enumerate(order):
            if max_minutes is not None and time.perf_counter() - t_start > 60 * max_minutes:
                print(f"stopping after {max_minutes} minutes ({k} run); rerun the same command to continue")
                break
            code, mutants = gen[t]
            m = mutants[i]
            args = tests if tests else tests_for(t, runner.scratch)
            if phase == "recheck" and not tests:
                # it passed the files of its last run that are unchanged since: only reference values, files new to
                # its selection (a test module added to its subject) and edited files can kill it
                done = passed[(t, shas[t], i)]
                args = [a for a in args if Path(a).stem.endswith("_reference_values") or a not in done]
                if not args:
                    continue
            status, seconds = runner.run(t, code, m, args)
            rec = {
                "file": t,
                "sha": shas[t],
                "index": i,
                "line": m.line,
                "operator": m.operator,
                "before": m.before,
                "after": m.after,
                "status": status,
                "seconds": round(seconds, 2),
                "tests": args,
                "phase": phase,
                "commit": commit,
                "seed": seed,
                "sample": sample,
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            _append(journal, rec)
            print(
                f"[{k + 1}/{len(order)}] {t}:{m.line} #{i} {m.operator}: {m.before!r} -> {m.after!r}: {status} "
                f"({seconds:.1f} s)",
                flush=True,
            )
    finally:
        runner.close()


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided confidence interval of a binomial proportion k/n."""
    from scipy.stats import beta

    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def summarise(journal: Path, equivalent: dict[str, str], out_dir: Path, counts: dict[str, int] | None = None) -> str:
    """``summary.md`` and ``summary.json`` in ``out_dir`` from the journal: kill rates before and after rechecks.

    *Before* is each mutant's first (``sample``) result, *after* its latest (a survivor killed by a recheck with new
    tests counts as killed). A timeout counts as killed; an ``error`` (pytest could not run) is left out; survivors
    judged equivalent (``equivalent``, keyed ``file#index``) are left out of the non-equivalent kill rate, whose 95 %
    Clopper-Pearson interval is given. With proportional allocation the pooled rate is the sample's estimate of the
    rate over all mutants of the files; the per-file rows show where survivors cluster.
    """
    from dynamics.trajectory import atomic_write

    first: dict[tuple, dict] = {}
    last: dict[tuple, dict] = {}
    for r in read_journal(journal):
        key = (r["file"], r["sha"], r["index"])
        if r.get("phase") == "sample":
            first.setdefault(key, r)
        if key in first and r.get("phase") in ("sample", "recheck"):
            last[key] = r
    files = sorted({k[0] for k in first})
    rows, tot = [], {"run": 0, "killed": 0, "timeout": 0, "survived": 0, "equivalent": 0, "error": 0, "killed_after": 0}
    for f in files:
        keys = [k for k in first if k[0] == f]
        c = {s: sum(first[k]["status"] == s for k in keys) for s in ("killed", "timeout", "survived", "error")}
        c["equivalent"] = sum(first[k]["status"] == "survived" and f"{f}#{k[2]}" in equivalent for k in keys)
        c["killed_after"] = sum(last[k]["status"] in ("killed", "timeout") for k in keys)
        c["run"] = len(keys)
        for s in tot:
            tot[s] += c[s]
        rows.append((f, c))

    def rate(c, after):
        n = c["killed"] + c["timeout"] + c["survived"] - c["equivalent"]
        k = c["killed_after"] if after else c["killed"] + c["timeout"]
        return k, n

    commits = sorted({r["commit"] for r in first.values()})
    seeds = sorted({str(r.get("seed")) for r in first.values()})
    kb, n = rate(tot, False)
    ka, _ = rate(tot, True)
    lo_b, hi_b = clopper_pearson(kb, n) if n else (float("nan"), float("nan"))
    lo_a, hi_a = clopper_pearson(ka, n) if n else (float("nan"), float("nan"))
    lines = [
        "# Mutation testing summary",
        "",
        f"Journal `{journal}`; source commit(s) {', '.join(commits)}; seed(s) {', '.join(seeds)}.",
        "",
        f"**Non-equivalent mutants killed: before {kb}/{n} = {kb / max(n, 1):.1%} (95 % Clopper-Pearson "
        f"{lo_b:.1%}-{hi_b:.1%}); after rechecks with new tests {ka}/{n} = {ka / max(n, 1):.1%} "
        f"({lo_a:.1%}-{hi_a:.1%}).**",
        "",
        "| file | generated | run | killed | timeout | survived | equivalent | error | rate before | rate after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f, c in rows + [("**all**", tot)]:
        k_b, n_f = rate(c, False)
        k_a, _ = rate(c, True)
        gen_n = (counts or {}).get(f, sum((counts or {}).values()) if f == "**all**" else "")
        lines.append(
            f"| {f} | {gen_n} | {c['run']} | {c['killed']} | {c['timeout']} | {c['survived']} | "
            f"{c['equivalent']} | {c['error']} | {k_b}/{n_f} | {k_a}/{n_f} |"
        )
    surv = sorted((k for k in first if first[k]["status"] == "survived"), key=lambda k: (k[0], first[k]["line"]))
    eq = [k for k in surv if f"{k[0]}#{k[2]}" in equivalent]
    gaps = [k for k in surv if f"{k[0]}#{k[2]}" not in equivalent]
    lines += ["", f"## Survivors judged equivalent ({len(eq)})", ""]
    lines += [
        f"- `{k[0]}:{first[k]['line']}` #{k[2]} `{first[k]['before']}` -> `{first[k]['after']}`: "
        f"{equivalent[f'{k[0]}#{k[2]}']}"
        for k in eq
    ]
    lines += ["", f"## Survivors not equivalent ({len(gaps)}; status after rechecks)", ""]
    lines += [
        f"- `{k[0]}:{first[k]['line']}` #{k[2]} `{first[k]['before']}` -> `{first[k]['after']}`: "
        f"{last[k]['status']}" + (f" by {' '.join(last[k]['tests'])}" if last[k] is not first[k] else "")
        for k in gaps
    ]
    text = "\n".join(lines) + "\n"
    summary = {
        "journal": str(journal),
        "commits": commits,
        "non_equivalent": n,
        "killed_before": kb,
        "killed_after": ka,
        "ci95_before": [lo_b, hi_b],
        "ci95_after": [lo_a, hi_a],
        "files": {f: c for f, c in rows},
        "equivalent": {f"{k[0]}#{k[2]}": equivalent[f"{k[0]}#{k[2]}"] for k in eq},
    }
    atomic_write(out_dir / "summary.md", lambda tmp: Path(tmp).write_text(text))
    atomic_write(out_dir / "summary.json", lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=1)))
    return text


def run_mutmut(out_dir: Path) -> dict:
    """``mutmut run`` with setup.cfg's [mutmut] section, then the counts of ``mutmut results --all true``."""
    subprocess.run([sys.executable, "-m", "mutmut", "run"], cwd=ROOT, env=_env(ROOT), check=False)
    res = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=ROOT,
        env=_env(ROOT),
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    rows = [line.rsplit(":", 1) for line in res.splitlines() if ":" in line]
    counts: dict[str, int] = {}
    for _, status in rows:
        counts[status.strip()] = counts.get(status.strip(), 0) + 1
    survivors = [name.strip() for name, status in rows if status.strip() == "survived"]
    summary = {"target": "setup.cfg [mutmut] source_paths", "engine": "mutmut", **counts, "survivors": survivors}
    from dynamics.trajectory import atomic_write

    atomic_write(out_dir / "mutmut.json", lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=1)))
    return summary


def _expand(targets: list[str]) -> list[str]:
    """Files and folders (``closedform``, ``dynamics/``) to the source files they name, without empty ones."""
    out = []
    for t in targets or list(AREAS):
        p = ROOT / t
        out += sorted(str(q.relative_to(ROOT)) for q in p.glob("*.py")) if p.is_dir() else [t]
    return [t for t in dict.fromkeys(out) if not t.endswith("__init__.py")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help="source files or folders (default: closedform dynamics)")
    parser.add_argument("--engine", choices=("disk", "mutmut"), default="disk")
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        help="run a stratified seeded random sample of this many mutants over the targets "
        "(proportional to each file's number of mutants)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timeout-factor",
        type=float,
        default=5.0,
        help="a mutant times out after factor x its tests' baseline time + the slack",
    )
    parser.add_argument("--timeout-slack", type=float, default=120.0, help="seconds (covers numba recompiles)")
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="start no new mutant after this many minutes (rerun the command to continue)",
    )
    parser.add_argument("--out", default=str(ROOT / "results" / "mutate"))
    parser.add_argument("--journal", default=None, help="JSON-lines results (default <out>/journal.jsonl)")
    parser.add_argument(
        "--equivalent",
        default=None,
        help="JSON {'<file>#<index>': 'why this survivor is equivalent'} (default <out>/equivalent.json if present)",
    )
    parser.add_argument(
        "--recheck", action="store_true", help="rerun the journal's non-equivalent survivors with the current tests"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="FILE#INDEX",
        help="run only these mutants (phase 'check', e.g. with --tests <new test file>)",
    )
    parser.add_argument(
        "--base",
        default=None,
        metavar="REV",
        help="run the sources and tests of this git revision (default: the working tree)",
    )
    parser.add_argument("--summary-only", action="store_true", help="only rewrite the summary from the journal")
    parser.add_argument("--tests", nargs=argparse.REMAINDER, help="pytest arguments replacing tests_for()")
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.engine == "mutmut":
        print(json.dumps(run_mutmut(out_dir), indent=1))
        return 0
    journal = Path(args.journal) if args.journal else out_dir / "journal.jsonl"
    eq_path = Path(args.equivalent) if args.equivalent else out_dir / "equivalent.json"
    equivalent = json.loads(eq_path.read_text()) if eq_path.is_file() else {}
    targets = _expand(args.targets or sorted({n.rsplit("#", 1)[0] for n in args.only or []}))
    if not args.summary_only:
        run_disk(
            targets,
            out_dir,
            journal,
            sample=args.sample,
            seed=args.seed,
            tests=args.tests,
            timeout_factor=args.timeout_factor,
            timeout_slack=args.timeout_slack,
            max_minutes=args.max_minutes,
            recheck=args.recheck,
            equivalent=equivalent,
            only=args.only,
            base=args.base,
        )
        if args.only:
            return 0
    counts = {t: len(generate_cached(t, out_dir / "generated")[1]) for t in targets}
    print(summarise(journal, equivalent, out_dir, counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
