"""Sphinx configuration of the attndyn documentation (``make docs`` builds it with warnings as errors)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

project = "attndyn"
author = "the attndyn developers"
copyright = "2026, the attndyn developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 4  # numbered sections down to "#### A.5.1" get anchors that docstring citations link to
exclude_patterns = ["_build", "**.ipynb_checkpoints", "examples/README.txt"]

# numpy-style docstrings; the package's own symbol tables are plain reST tables
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True  # "Attributes" sections as fields, so dataclass members are not described twice
autodoc_typehints = "none"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}

# The gallery: every examples/*.py runs when the docs are built (tiny sizes, so CI stays fast).
sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/(plot|quickstart)_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "within_subsection_order": "FileNameSortKey",
}

# The same short names (d, L, M, eta, ...) are attributes of several models' task classes; a bare name in a
# docstring type field then has several targets. That ambiguity is expected, so it is not reported.
suppress_warnings = ["ref.python"]

html_theme = "furo"
html_title = "attndyn"


# -- docstrings are plain text for help(); two plain-text habits clash with reST and are adapted here -----------
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_BORDER = re.compile(r"^\s*=+(?:\s+=+)+\s*$")
_UNDERLINE = re.compile(r"^\s*([=\-~^`#*+\"'])\1{2,}\s*$")

# -- docstrings cite the model pages as "docs/models/<page>.md §6.4"; on the site each section number links to its
# heading (anchors are MyST's GitHub-style slugs of the heading titles, myst_heading_anchors above) --------------
_SECTION = r"(?:[A-C]\.\d+(?:\.\d+)*|G\.[ABC]|\d+(?:\.\d+)*)"
_CITATION = re.compile(r"docs/models/(\w+)\.md((?:(?:\s?,\s*|\s?[-/\u2013]\s?|\s)§" + _SECTION + r")+)")


def _section_anchors():
    """{page: {section number: anchor}} from the numbered headings of docs/models/*.md."""
    from myst_parser.slugs import github_slugify

    anchors = {}
    for path in sorted((ROOT / "docs" / "models").glob("*.md")):
        heads = re.findall(r"^#{1,4}\s+((" + _SECTION + r")\.?\s.*?)\s*$", path.read_text(encoding="utf-8"), re.MULTILINE)
        anchors[path.stem] = {num: github_slugify(title) for title, num in heads}
    return anchors


_ANCHORS = _section_anchors()


def _link_citations(line):
    """Turn each "§N" of a "docs/models/<page>.md §N, §M" citation into a link to that heading of the page."""

    def repl(m):
        page, items = m.group(1), m.group(2)
        known = _ANCHORS.get(page, {})

        def one(s):
            num = s.group(1)
            if num not in known:
                return s.group(0)
            return f"`§{num} <models/{page}.html#{known[num]}>`__"

        return f"docs/models/{page}.md" + re.sub("§(" + _SECTION + r")(?!\w|\.\d)", one, items)

    return _CITATION.sub(repl, line)


def _plain_text_to_rest(app, what, name, obj, options, lines):
    """Adapt a docstring's plain-text notation to reST, in place.

    * Markdown tables (runs of ``| a | b |`` lines) become literal blocks, shown as written.
    * ``|x|`` (an absolute value or a norm) would be read as a substitution reference: the bars become the
      one-character sign U+2758 (light vertical bar, of single width), so simple-table columns and title underlines keep their widths.
    """
    out, i, literal_indent, in_table = [], 0, None, False
    while i < len(lines):
        line = lines[i]
        # citations become links, except in literal blocks and simple tables (where a longer cell breaks the layout)
        indent = len(line) - len(line.lstrip())
        if literal_indent is not None and line.strip() and indent <= literal_indent:
            literal_indent = None
        if not line.strip():
            in_table = False
        elif _BORDER.match(line):
            in_table = True
        title = i + 1 < len(lines) and bool(_UNDERLINE.match(lines[i + 1]))  # a longer title needs a longer underline
        if literal_indent is None and not in_table and not title and "docs/models/" in line:
            line = _link_citations(line)
        if line.rstrip().endswith("::") and literal_indent is None:
            literal_indent = indent
        if _TABLE_ROW.match(line):
            indent = len(line) - len(line.lstrip())
            out += ["", " " * indent + "::", ""]
            while i < len(lines) and _TABLE_ROW.match(lines[i]):
                out.append("    " + lines[i])
                i += 1
            out.append("")
            continue
        out.append(line.replace("|", "\u2758"))
        i += 1
    lines[:] = out


def setup(app):
    app.connect("autodoc-process-docstring", _plain_text_to_rest)
