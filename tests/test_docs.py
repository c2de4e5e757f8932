"""House rules that keep the code tied to the papers (STYLE.md §2.13): every public callable of ``closedform``
cites an equation, lemma, theorem or section, and every model module carries a ``REFERENCE`` and a symbol table."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import closedform

CITATION = re.compile(r"(Eq\.|Eqs\.|Equation|Lemma|Theorem|Thm\.|Prop\.|Proposition|Corollary|Definition|Sec\.|"
                      r"Section|§|Appendix|Table|Fig\.)")
MODELS = ("single_location", "scan_snap", "icl_regression", "nearest_neighbor", "group_sparse", "random_walk")


def _public_modules():
    return [m.name for m in pkgutil.iter_modules(closedform.__path__) if not m.name.startswith("_")]


def _public_callables(module):
    for name, obj in vars(module).items():
        if name.startswith("_") or not callable(obj) or getattr(obj, "__module__", None) != module.__name__:
            continue
        yield name, obj


@pytest.mark.parametrize("module_name", _public_modules())
def test_public_callables_cite_their_source(module_name):
    module = importlib.import_module(f"closedform.{module_name}")
    missing = []
    for name, obj in _public_callables(module):
        doc = inspect.getdoc(obj) or ""
        if not CITATION.search(doc):
            missing.append(name)
    assert not missing, f"closedform.{module_name}: public callables without an Eq./Lemma/Theorem/Sec. citation: " \
                        f"{missing}"


@pytest.mark.parametrize("module_name", [m for m in MODELS if m in _public_modules()])
def test_model_modules_have_reference_and_symbol_table(module_name):
    module = importlib.import_module(f"closedform.{module_name}")
    assert isinstance(getattr(module, "REFERENCE", None), dict | str) and module.REFERENCE, "REFERENCE missing"
    doc = module.__doc__ or ""
    has_table = "|" in doc or "=====" in doc  # markdown or reStructuredText table
    assert has_table and re.search(r"symbol", doc, re.IGNORECASE), "module docstring lacks a symbol table"


def test_the_package_points_to_no_file_outside_the_repository():
    """Docstrings and comments cite docs/models/<model>.md and the papers, never ../shared or the design notes that
    a user of an installed package does not have (issue 16)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    outside = re.compile(r"\.\./shared|STYLE\.md|DESIGN\.md")
    hits = [f"{path.relative_to(root)}:{n}" for pkg in ("dynamics", "closedform", "empirical", "figures")
            for path in sorted((root / pkg).rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1) if outside.search(line)]
    assert not hits, f"references to files outside the repository: {hits}"
