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
myst_heading_anchors = 3
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


def _plain_text_to_rest(app, what, name, obj, options, lines):
    """Adapt a docstring's plain-text notation to reST, in place.

    * Markdown tables (runs of ``| a | b |`` lines) become literal blocks, shown as written.
    * ``|x|`` (an absolute value or a norm) would be read as a substitution reference: the bars become the
      one-character sign U+2758 (light vertical bar, of single width), so simple-table columns and title underlines keep their widths.
    """
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
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
