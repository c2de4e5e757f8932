"""Public surfaces say what they are: every public module declares ``__all__``, exports neither imported libraries
nor validation helpers, and no public docstring sends the reader to a private name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types

import pytest

PACKAGES = ("dynamics", "closedform", "empirical", "figures")


def _public_modules() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        pkg = importlib.import_module(package)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=package + "."):
            parts = info.name.split(".")
            if not any(p.startswith("_") for p in parts):
                names.append(info.name)
    return sorted(names)


MODULES = _public_modules()


@pytest.mark.parametrize("name", MODULES)
def test_public_module_declares_what_it_exports(name):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats names"
    libraries = [
        n
        for n in exported
        if isinstance(getattr(module, n), types.ModuleType) and not getattr(module, n).__name__.startswith(PACKAGES)
    ]
    assert not libraries, f"{name} exports imported libraries: {libraries}"
    helpers = [
        n
        for n in exported
        if getattr(getattr(module, n), "__module__", "") == "dynamics.validation" and name != "dynamics.validation"
    ]
    assert not helpers, f"{name} exports validation helpers: {helpers}"
    foreign = [
        n
        for n in exported
        if callable(getattr(module, n))
        and not isinstance(getattr(module, n), types.ModuleType)
        and not str(getattr(getattr(module, n), "__module__", "") or "").startswith(PACKAGES)
        and getattr(getattr(module, n), "__module__", None) is not None
    ]
    assert not foreign, f"{name} re-exports third-party callables: {foreign}"


# a reference to a private name: a code span (``x`` or `x`) whose last dotted part starts with one underscore
PRIVATE_REF = re.compile(r"`+~?([\w.]*\b_[a-z]\w*)`+")


def _private_refs(doc: str) -> list[str]:
    return [m for m in PRIVATE_REF.findall(doc or "") if not m.split(".")[-1].startswith("__")]


def test_private_reference_rule_catches_a_planted_reference():
    assert _private_refs("see :func:`_edge_certificate` for the rule") == ["_edge_certificate"]
    assert _private_refs("cached on disk (``dynamics._kernels``)") == ["dynamics._kernels"]
    assert _private_refs("returns ``x_dim0`` and :func:`classify`") == []


@pytest.mark.parametrize("name", MODULES)
def test_public_docstrings_point_to_no_private_name(name):
    module = importlib.import_module(name)
    found = {}
    if _private_refs(module.__doc__):
        found[name] = _private_refs(module.__doc__)
    for attr in getattr(module, "__all__", []):
        obj = getattr(module, attr, None)
        docs = [(attr, inspect.getdoc(obj))]
        if inspect.isclass(obj):
            docs += [
                (f"{attr}.{m}", inspect.getdoc(v))
                for m, v in vars(obj).items()
                if not m.startswith("_") and callable(v)
            ]
        for where, doc in docs:
            refs = _private_refs(doc)
            if refs:
                found[f"{name}.{where}"] = refs
    assert not found, f"public docstrings that point to private names: {found}"


ISSUE_NUMBER = re.compile(r"\bissues? [0-9]+", re.IGNORECASE)


def test_no_issue_numbers_in_the_packages():
    """Package code and docstrings state facts, not tracker numbers that mean nothing to a user."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    hits = [
        f"{path.relative_to(root)}:{n}"
        for pkg in PACKAGES
        for path in sorted((root / pkg).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ISSUE_NUMBER.search(line)
    ]
    assert not hits, f"issue numbers in package files: {hits}"
    assert ISSUE_NUMBER.search("Speed (issue 13): on CPU")  # control: the rule sees one
