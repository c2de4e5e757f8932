"""House rules that keep the code tied to the papers (STYLE.md §2.13): every public callable of ``closedform``
cites an equation, lemma, theorem or section, and every model module carries a ``REFERENCE`` and a symbol table."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import closedform
from closedform import models as model_registry

CITATION = re.compile(
    r"(Eq\.|Eqs\.|Equation|Lemma|Theorem|Thm\.|Prop\.|Proposition|Corollary|Definition|Sec\.|"
    r"Section|§|Appendix|Table|Fig\.)"
)
MODELS = model_registry.names(builtin=True)
_INFRASTRUCTURE = ("models",)  # the model registry: records and plumbing, no mathematics to cite


def _public_modules():
    return [
        m.name
        for m in pkgutil.iter_modules(closedform.__path__)
        if not m.name.startswith("_") and m.name not in _INFRASTRUCTURE
    ]


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
    assert not missing, (
        f"closedform.{module_name}: public callables without an Eq./Lemma/Theorem/Sec. citation: {missing}"
    )


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

    root = pathlib.Path(__file__).resolve().parents[2]
    outside = re.compile(r"\.\./shared|STYLE\.md|DESIGN\.md")
    hits = [
        f"{path.relative_to(root)}:{n}"
        for pkg in ("dynamics", "closedform", "empirical", "figures")
        for path in sorted((root / pkg).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if outside.search(line)
    ]
    assert not hits, f"references to files outside the repository: {hits}"


# -- citations of the model pages: ``docs/models/<page>.md §<N>`` must name a numbered heading of that page ----------
_ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
_PAGES = tuple(dict.fromkeys(__import__("pathlib").Path(m.docs).stem for m in model_registry.models(builtin=True)))
_SECTION = r"(?:[A-C]\.\d+(?:\.\d+)*|G\.[ABC]|\d+(?:\.\d+)*)"
_CITATION = re.compile(r"docs/models/(\w+)\.md((?:(?:\s?,\s*|\s?[-/\u2013]\s?|\s+)§" + _SECTION + r")+)")
_PACKAGES = ("closedform", "dynamics", "empirical", "figures", "benchmarks", "tools")


def _numbered_headings(page):
    """Section numbers carried by the headings of docs/models/<page>.md (``## 6.4 Title`` -> "6.4"), in order."""
    text = (_ROOT / "docs" / "models" / f"{page}.md").read_text(encoding="utf-8")
    return re.findall(r"^#{1,6}\s+(" + _SECTION + r")\.?\s", text, flags=re.MULTILINE)


@pytest.mark.parametrize("page", _PAGES)
def test_model_pages_number_their_sections_once_and_their_own_references_resolve(page):
    heads = _numbered_headings(page)
    assert len(heads) >= 20, f"docs/models/{page}.md: too few numbered sections ({len(heads)})"
    assert len(heads) == len(set(heads)), f"docs/models/{page}.md: a section number is used twice: {heads}"
    text = (_ROOT / "docs" / "models" / f"{page}.md").read_text(encoding="utf-8")
    missing = sorted(set(re.findall("§(" + _SECTION + ")", text)) - set(heads))
    assert not missing, f"docs/models/{page}.md cites sections it does not have: {missing}"


def test_every_docs_citation_in_the_package_resolves_to_a_numbered_heading():
    """``docs/models/<page>.md §N`` (lists ``§6.1, §6.4`` and ranges ``§6.4-§6.5`` included) names a heading."""
    heads = {page: set(_numbered_headings(page)) for page in _PAGES}
    bad = []
    for pkg in _PACKAGES:
        for path in sorted((_ROOT / pkg).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for m in _CITATION.finditer(text):
                for num in re.findall("§(" + _SECTION + ")", m.group(2)):
                    if num not in heads.get(m.group(1), ()):
                        line = text.count("\n", 0, m.start()) + 1
                        bad.append(f"{path.relative_to(_ROOT)}:{line}: {m.group(1)} §{num}")
    assert not bad, f"citations of sections the docs pages do not have: {bad}"


def test_the_package_cites_the_docs_pages_not_the_outside_specification():
    """No ``spec Sec. X``, ``spec §X``, ``spec <model>.md`` or ``spec/<model>.md`` is left (issue 16): the package
    cites ``docs/models/<page>.md §N`` instead."""
    outside = re.compile(r"\b[Ss]pec(?:'s)?\s+(?:Sec\.|§|(?:" + "|".join(_PAGES) + r")\.md)|\bspec/\w+\.md")
    hits = [
        f"{path.relative_to(_ROOT)}:{n}"
        for pkg in _PACKAGES
        for path in sorted((_ROOT / pkg).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if outside.search(line)
    ]
    assert not hits, f"citations of the specification outside the repository: {hits}"
