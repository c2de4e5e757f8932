"""The mutation tool's test selection (``tools/mutate.py``'s ``tests_for``) names test files that exist.

``tests_for`` drops a listed file that is missing (a source without a reference-value file is normal), so a renamed
or moved test module would silently leave its mutants judged by fewer tests. These checks name every file the
mapping can produce and require each to exist, and check the order the tool relies on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import mutate  # noqa: E402


def test_every_named_test_file_exists():
    named = {*mutate.ENGINE_TESTS, mutate.DYNAMICS_PINNED, mutate.RULES_TESTS}
    named.update(f for files in mutate.DYNAMICS_TESTS.values() for f in files)
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
