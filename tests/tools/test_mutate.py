"""The mutation tool's test selection (``tools/mutate.py``'s ``tests_for``) names test files that exist.

``tests_for`` drops a listed file that is missing (a source without a reference-value file is normal), so a renamed
or moved test module would silently leave its mutants judged by fewer tests. These checks name every file the
mapping can produce and require each to exist, and check the order the tool relies on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import mutate  # noqa: E402


def _head() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def test_every_named_test_file_exists():
    named = {*mutate.ENGINE_TESTS, mutate.DYNAMICS_PINNED, mutate.RULES_TESTS}
    named.update(
        f for table in (mutate.DYNAMICS_TESTS, mutate.CLOSEDFORM_TESTS) for files in table.values() for f in files
    )
    missing = sorted(f for f in named if not (ROOT / f).is_file())
    assert not missing, f"tools/mutate.py names test files that do not exist: {missing}"


@pytest.mark.parametrize("target", mutate.area_files())
def test_every_source_is_judged_by_its_subject_tests(target):
    files = mutate.tests_for(target)
    assert mutate.RULES_TESTS in files  # the argument rules judge every mutant (declared at the definitions)
    area = target.split("/", 1)[0]
    stem = Path(target).stem
    model = stem[1 : -len("_kernels")] if stem.startswith("_") and stem.endswith("_kernels") else stem
    own = ROOT / "tests" / "closedform" / f"test_{model}.py"
    if area == "closedform" and own.is_file():
        assert str(own.relative_to(ROOT)) in files  # each model's (and special's) own test module judges it
    if area == "closedform" and (ROOT / "tests" / "closedform" / f"test_{model}_reference_values.py").is_file():
        assert files[0].endswith(f"test_{model}_reference_values.py")  # reference values first
    if area == "dynamics":
        assert files[0] == mutate.DYNAMICS_PINNED
    subject = sorted((ROOT / "tests" / area).glob(f"test_{model.lstrip('_')}*.py"))
    subject = [
        q for q in subject if q.stem == f"test_{model.lstrip('_')}" or q.stem.startswith(f"test_{model.lstrip('_')}_")
    ]
    missing = [str(q.relative_to(ROOT)) for q in subject if str(q.relative_to(ROOT)) not in files]
    assert not missing, f"{target}: its subject's test modules are not in its selection: {missing}"


def test_a_module_without_subject_tests_is_judged_by_the_engine_tests_and_one_with_them_is_not():
    """dynamics/integrate.py has no test_integrate*.py: the engine's tests judge it; dynamics/align.py is judged by
    tests/dynamics/test_align.py, not by the engine's tests (which never call it: an align mutant survived them)."""
    assert [f for f in mutate.ENGINE_TESTS if f in mutate.tests_for("dynamics/integrate.py")] == list(
        mutate.ENGINE_TESTS
    )
    align = mutate.tests_for("dynamics/align.py")
    assert "tests/dynamics/test_align.py" in align and not set(mutate.ENGINE_TESTS) & set(align)
    assert "tests/api/test_model_registry.py" in mutate.tests_for("closedform/models.py")


def test_the_model_modules_have_their_test_files():
    """A model's closed form without its own test module under tests/closedform/ would lose that module's judges."""
    models = [
        p.stem
        for p in (ROOT / "closedform").glob("[!_]*.py")
        if (ROOT / "closedform" / f"_{p.stem}_kernels.py").is_file()
    ]
    assert len(models) >= 6
    for model in models:
        assert f"tests/closedform/test_{model}.py" in mutate.tests_for(f"closedform/{model}.py")
        assert f"tests/closedform/test_{model}_reference_values.py" in mutate.tests_for(f"closedform/{model}.py")


def test_a_recheck_runs_only_what_the_survivor_has_not_passed(tmp_path, monkeypatch):
    """A survivor judged by ``[A]`` whose selection is now ``[ref, A, B]`` (a reference-value file and a subject
    module added) is rerun on ``[ref, B]``: A, which it passed and which is unchanged since its record's commit, is
    not run again; a survivor whose selection did not change and has no reference values is not rerun at all; one
    whose record names no commit is rerun on its whole selection (what changed since is unknown)."""
    head = _head()
    code = "x = 1\n"
    mutant = mutate.Mutant(index=0, line=1, operator="number", before="1", after="2", start=4, end=5, text="2")
    monkeypatch.setattr(mutate, "generate_cached", lambda target, cache_dir: (code, [mutant]))
    selections = {
        "closedform/a.py": ["tests/ref_reference_values.py", "tests/A.py", "tests/B.py"],
        "dynamics/b.py": ["tests/C.py"],
        "dynamics/c.py": ["tests/D.py"],
    }
    monkeypatch.setattr(mutate, "tests_for", lambda target, root: selections[target])
    ran = []

    class FakeRunner:
        scratch = tmp_path

        def __init__(self, **kwargs):
            pass

        def run(self, target, code, m, args):
            ran.append((target, args))
            return "killed", 0.1

        def close(self):
            pass

    monkeypatch.setattr(mutate, "Runner", FakeRunner)
    journal = tmp_path / "journal.jsonl"
    for target, tests, commit in (
        ("closedform/a.py", ["tests/A.py"], head),
        ("dynamics/b.py", ["tests/C.py"], head),
        ("dynamics/c.py", ["tests/D.py"], None),
    ):
        rec = {"file": target, "sha": mutate._sha(code), "index": 0, "status": "survived", "tests": tests}
        mutate._append(journal, {**rec, "phase": "sample", "commit": commit})
    kwargs = dict(sample=None, seed=0, tests=None, timeout_factor=5.0, timeout_slack=1.0, max_minutes=None)
    mutate.run_disk(list(selections), tmp_path, journal, recheck=True, equivalent={}, base="HEAD", **kwargs)
    assert ran == [
        ("closedform/a.py", ["tests/ref_reference_values.py", "tests/B.py"]),
        ("dynamics/c.py", ["tests/D.py"]),
    ]


def test_test_files_edited_since_a_commit_are_found():
    """``_changed_since``: a commit against itself changes nothing; an unknown commit counts as everything."""
    head = _head()
    assert mutate._changed_since(head, head) == set()
    assert mutate._changed_since(None, None) == {"*"} and mutate._changed_since("0" * 40, "HEAD") == {"*"}
