"""The model contract and the one model registry (closedform.models): records, entry points, and every reader of
the registry (docs table, CLI list, torch loader, figure registry, tests); no other hand-kept list of model names."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import io
import re
import subprocess
import sys
import textwrap
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from closedform import models as M

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = M.names(builtin=True)
# What is registered before a test plants a package: the built-in models plus any installed plugin (CI installs
# examples/linear_attention).
INSTALLED = M.names()


def test_six_builtin_models_in_report_order():
    assert len(BUILTIN) == 6 and BUILTIN[0] == "single_location"
    assert all(M.get(n).builtin for n in BUILTIN)


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_record_resolves_to_the_model_module(name):
    record = M.get(name)
    module = importlib.import_module(f"closedform.{name}")
    task = record.resolve("params")
    assert dataclasses.is_dataclass(task) and task.__dataclass_params__.frozen
    assert record.resolve("time_unit") == module.TIME_UNIT
    for verb in ("map", "flow", "fixed_points", "classify", "theorem_predictions"):
        assert record.resolve(verb) is getattr(module, verb, None)
    for kernel, first in (("step", "n"), ("rhs", "t")):
        fn = record.resolve(kernel)
        if fn is not None:  # engine kernels: numba functions of (k or t, x, p, out)
            params = list(inspect.signature(fn.py_func).parameters)
            assert len(params) in (4, 5) and hasattr(fn, "py_func"), (kernel, params)
    names = getattr(module, "STATE_NAMES", getattr(module, "_STATE_NAMES", None))
    if names is not None:
        assert tuple(names) == record.state_names
    assert (ROOT / record.docs).is_file()
    assert record.figures == f"figures.{name}"
    assert (ROOT / "figures" / f"{name}.py").is_file() or (ROOT / "figures" / name / "__init__.py").is_file()


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_torch_side_resolves(name):
    pytest.importorskip("torch")
    from empirical import models as em

    record = M.get(name)
    assert callable(record.resolve("build")) and callable(record.resolve("probe"))
    assert em.load(name).__name__ == record.torch_module == f"empirical.models.{name}"


def test_the_registry_imports_neither_torch_nor_the_model_modules():
    code = (
        "import sys; from closedform import models; models.names(); models.api_table(); "
        "assert 'torch' not in sys.modules, 'torch'; "
        "assert 'closedform.single_location' not in sys.modules, 'model module'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_docs_api_table_is_generated_from_the_registry():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert M.api_table() in text
    rows = [line for line in text.splitlines() if line.startswith("| task class")]
    assert len(rows) == 1  # exactly one table, the generated one


def test_readers_of_the_registry():
    pytest.importorskip("torch")
    from empirical import models as em
    from figures import registry
    from tests.api import test_model_entry_points as test_api_shape
    from tests.docs import test_paper_citations as test_docs

    assert em.MODEL_NAMES == registry.MODELS == M.names()
    assert test_api_shape.MODELS == test_docs.MODELS == BUILTIN


def test_cli_list_shows_the_registered_models_in_order():
    pytest.importorskip("torch")
    from figures.__main__ import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        main(["list"])
    listed = [line.split()[0] for line in buf.getvalue().splitlines() if line and not line.startswith(" ")]
    assert tuple(listed) == M.names()


# -- entry points --------------------------------------------------------------------------------------------------
def _fake_distribution(tmp_path: Path, module_body: str, entry: str) -> None:
    """A package ``fakeplugin`` and its dist-info with one ``attndyn.models`` entry point, on sys.path."""
    (tmp_path / "fakeplugin.py").write_text(textwrap.dedent(module_body))
    info = tmp_path / "fakeplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[attndyn.models]\n{entry}\n")


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    monkeypatch.undo()
    sys.modules.pop("fakeplugin", None)
    M.refresh()


GOOD = """
    from closedform.models import Model

    def _step(k, x, p, out):
        out[0] = x[0]

    class Task:
        pass

    MODEL = Model(name="toy", title="a toy", state_names=("x",), params=Task, time_unit="step", step=_step,
                  build="fakeplugin:Task")
"""


def test_an_entry_point_registers_a_model_after_the_builtin_ones(plugin_path):
    _fake_distribution(plugin_path, GOOD, "toy = fakeplugin:MODEL")
    names = M.refresh()
    assert names == INSTALLED + ("toy",)
    assert not M.get("toy").builtin and M.get("toy").resolve("build").__name__ == "Task"
    assert M.api_table() == M.api_table(builtin=True) and "`toy`" in M.api_table(builtin=None)


@pytest.mark.parametrize(
    "entry, match",
    [
        ("toy = fakeplugin:missing", "missing"),
        ("other = fakeplugin:MODEL", "registers a model named"),
        ("toy = fakeplugin:Task", "not a Model"),
    ],
)
def test_a_broken_entry_point_is_reported_and_hides_nothing(plugin_path, entry, match):
    _fake_distribution(plugin_path, GOOD, entry)
    with pytest.warns(RuntimeWarning, match="could not be registered"):
        names = M.refresh()
    assert names == INSTALLED
    assert re.search(match, next(iter(M.plugin_errors().values())))


def test_a_builtin_model_cannot_be_replaced_or_duplicated():
    record = M.get("single_location")
    with pytest.raises(ValueError, match="already registered"):
        M.register(dataclasses.replace(record, title="impostor", builtin=False), replace=True)
    assert M.register(record) is record  # the same record again: no change


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="9bad"), "name"),
        (dict(step=None), "step"),
        (dict(build=print), "build"),
        (dict(state_names=()), "state_names"),
        (dict(params="not a reference"), "params"),
        (dict(title=""), "title"),
    ],
)
def test_bad_records_are_refused_naming_the_field(kwargs, match):
    base = dict(name="toy", title="t", state_names=("x",), params=object, time_unit="step", step=print)
    with pytest.raises(ValueError, match=match):
        M.Model(**{**base, **kwargs})


def test_get_names_the_registered_models_on_error():
    with pytest.raises(ValueError, match="name must be one of 'single_location'"):
        M.get("nope")


# -- no hand-kept list of model names outside the registry ----------------------------------------------------------
_SCANNED = ("closedform", "dynamics", "empirical", "figures", "tests", "benchmarks", "tools", "docs", "examples")


def _hand_kept_lists(root: Path = ROOT):
    """Places where three or more built-in model names appear as string literals within three lines (a tuple, list,
    dict or set of model names written out), outside the registry itself."""
    quoted = re.compile(r"""["'](%s)["']""" % "|".join(map(re.escape, BUILTIN)))
    hits = []
    for folder in _SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            if path == root / "closedform" / "models.py" or "_build" in path.parts:
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            for i in range(len(lines)):
                window = "\n".join(lines[i : i + 3])
                if len(set(quoted.findall(window))) >= 3:
                    hits.append(f"{path.relative_to(root)}:{i + 1}")
                    break
    return hits


def test_no_hand_kept_list_of_model_names_outside_the_registry():
    assert not _hand_kept_lists()


def test_the_grep_finds_a_hand_kept_list(tmp_path):
    """The check above can fail: a module with the old-style tuple (names over two lines) is found."""
    (tmp_path / "tests").mkdir()
    a, b, c = (repr(n) for n in BUILTIN[:3])
    (tmp_path / "tests" / "probe.py").write_text(f"NAMES = ({a}, {b},\n    {c})\n")
    (tmp_path / "tests" / "fine.py").write_text(f"A = ({a}, {b})\n")
    assert _hand_kept_lists(tmp_path) == ["tests/probe.py:1"]
