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
    "capture_repr": (),  # an example's last expression (e.g. the Text objects that ax.set returns) is not printed
    "write_computation_times": False,  # that page loads jQuery and DataTables from CDNs
}

# The same short names (d, L, M, eta, ...) are attributes of several models' task classes; a bare name in a
# docstring type field then has several targets. That ambiguity is expected, so it is not reported.
suppress_warnings = ["ref.python"]

html_theme = "furo"
html_title = "attndyn"
html_static_path = ["_static"]
html_css_files = ["attndyn.css"]  # tables fit the content column; long code lines wrap instead of scrolling

# -- math without a network: MathJax 3 (its full SVG build: glyphs and TeX extensions built in) is copied from the
# installed sphinx-mathjax-offline package (the docs extra) into the site, so no page loads a remote script -------
_MATHJAX_FILE = "tex-svg-full.js"  # every TeX extension built in: nothing is fetched on demand


def _bundled_mathjax() -> Path:
    """The folder of the MathJax build shipped by the ``sphinx-mathjax-offline`` package (a docs dependency)."""
    import importlib.util

    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the docs need the package sphinx-mathjax-offline (pip install -e '.[docs]'): it bundles "
            "MathJax so that formulas render without a network"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    if not (folder / _MATHJAX_FILE).is_file():
        raise RuntimeError(f"sphinx-mathjax-offline has no {_MATHJAX_FILE} under {folder}")
    return folder


mathjax_path = f"mathjax/{_MATHJAX_FILE}"
mathjax3_config = {"svg": {"fontCache": "global"}}  # each glyph's path once a page, not once a formula


# -- the API reference: one generated page per public module (docs/api/<module>.md, not kept in git) ------------
# A package page documents the names of its ``__all__``; a submodule page documents only the names of its own
# ``__all__`` that its package does not re-export (so no object is described twice). New modules appear by
# themselves: nothing here lists them.
API_PACKAGES = ("dynamics", "closedform", "empirical", "figures")


def _public_modules():
    """Names of the public modules of the packages (no part of the dotted name starts with an underscore)."""
    import importlib
    import pkgutil

    names = []
    for package in API_PACKAGES:
        names.append(package)
        pkg = importlib.import_module(package)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=package + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return sorted(names)


def _api_page(name: str) -> str | None:
    """The MyST source of the API page of module ``name`` (None when it has nothing of its own to show)."""
    import importlib

    module = importlib.import_module(name)
    exported = list(
        getattr(module, "__all__", None)
        or [n for n, obj in vars(module).items() if not n.startswith("_") and getattr(obj, "__module__", None) == name]
    )
    parent = name.rpartition(".")[0]
    reexported = set()
    if parent:
        reexported = set(getattr(importlib.import_module(parent), "__all__", []))
        exported = [n for n in exported if n not in reexported]
    is_package = hasattr(module, "__path__")
    if not exported and not is_package:
        return None
    members = f"   :members: {', '.join(exported)}\n" if exported else "   :no-members:\n"
    if parent and name.rpartition(".")[2] in reexported:
        # the package exports a function of the module's own name (dynamics.compare): the module's page is then not
        # indexed, so that the name keeps meaning the function
        members += "   :no-index:\n"
    return f"# `{name}`\n\n```{{eval-rst}}\n.. automodule:: {name}\n{members}```\n"


def _write_api_pages():
    folder = ROOT / "docs" / "api"
    folder.mkdir(exist_ok=True)
    wanted = {}
    for name in _public_modules():
        text = _api_page(name)
        if text is not None:
            wanted[f"{name}.md"] = text
    for old in folder.glob("*.md"):
        if old.name not in wanted:
            old.unlink()
    for file, text in wanted.items():
        path = folder / file
        if not path.is_file() or path.read_text(encoding="utf-8") != text:  # unchanged pages keep their timestamps
            path.write_text(text, encoding="utf-8")


_write_api_pages()


# -- the command line: one generated page per verb of ``python -m figures`` (docs/cli/<verb>.md, not kept in git),
# made from the parser itself so that every option shown is one the program accepts ----------------------------
def _write_cli_pages():
    import importlib

    cli = importlib.import_module("figures.__main__")
    parser = cli._parser()
    verbs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    helps = {c.dest: c.help for c in verbs._choices_actions}
    folder = ROOT / "docs" / "cli"
    folder.mkdir(exist_ok=True)
    wanted = {}
    for verb, sub in verbs.choices.items():
        sub.formatter_class = lambda prog: __import__("argparse").HelpFormatter(prog, width=100)
        wanted[f"{verb}.md"] = (
            f"# `{verb}`\n\n{(helps.get(verb) or '').capitalize()}.\n\n```text\n{sub.format_help().rstrip()}\n```\n"
        )
    for old in folder.glob("*.md"):
        if old.name not in wanted:
            old.unlink()
    for file, text in wanted.items():
        path = folder / file
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


_write_cli_pages()


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
        heads = re.findall(
            r"^#{1,4}\s+((" + _SECTION + r")\.?\s.*?)\s*$", path.read_text(encoding="utf-8"), re.MULTILINE
        )
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
      one-character sign U+2758 (light vertical bar, of single width), so simple-table columns and title underlines
      keep their widths.
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
        if title and literal_indent is None and not in_table and line.strip() and not _BORDER.match(line):
            # a section title of a docstring ("Symbol table") becomes a rubric: each module has its own page, and a
            # section title would be a site-wide label that several modules' pages define
            out += [" " * indent + ".. rubric:: " + line.strip(), ""]
            i += 2
            continue
        out.append(line.replace("|", "\u2758"))
        i += 1
    lines[:] = out


def _copy_mathjax(app, exception):
    """Copy the bundled MathJax build into the site's ``_static/mathjax`` once the HTML is written."""
    if exception is not None or app.builder.format != "html":
        return
    import shutil

    dest = Path(app.outdir) / "_static" / "mathjax"
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(_bundled_mathjax() / _MATHJAX_FILE, dest / _MATHJAX_FILE)


# -- search snippets offline: the search page shows a snippet of each hit by fetching the page, which a browser
# refuses for file:// sites. The text of every section is written into _static/search_text.js at build time, and
# _static/offline_search.js answers those page requests from it (pages served over http are fetched as usual). ---
_SEARCH_TEXT: dict[str, str] = {}


def _section_html(node) -> str:
    """Minimal HTML of a doctree node: its sections (with their ids) and their plain text, nothing else."""
    import html

    from docutils import nodes

    parts = []
    for child in node.children:
        if isinstance(child, nodes.section):
            ids = child.get("ids") or [""]
            parts.append(f'<section id="{html.escape(ids[0])}">{_section_html(child)}</section>')
        elif not isinstance(child, (nodes.comment, nodes.raw, nodes.system_message)):
            parts.append(f"<p>{html.escape(child.astext())}</p>")
    return "".join(parts)


def _collect_search_text(app, doctree, docname):
    if app.builder.format == "html":
        _SEARCH_TEXT[docname] = f'<div role="main">{_section_html(doctree)}</div>'


_OFFLINE_SEARCH_JS = """// Answers the search page's requests for page text from _static/search_text.js when the site is
// read from disk (file://), where a browser refuses to fetch other files; over http the pages are fetched as usual.

(function () {
  const fetchPage = window.fetch.bind(window);
  window.fetch = function (url, options) {
    const texts = window.ATTNDYN_SEARCH_TEXT || {};
    const root = document.documentElement.dataset.content_root || "";
    if (window.location.protocol === "file:" && typeof url === "string" && url.startsWith(root)) {
      const doc = url.slice(root.length).replace(/\\.html$/, "");
      if (Object.prototype.hasOwnProperty.call(texts, doc)) {
        return Promise.resolve(new Response(texts[doc], {headers: {"Content-Type": "text/html"}}));
      }
    }
    return fetchPage(url, options);
  };
})();
"""


def _write_search_text(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    import json

    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(_SEARCH_TEXT, ensure_ascii=True, sort_keys=True)
    (static / "search_text.js").write_text(f"window.ATTNDYN_SEARCH_TEXT = {payload};\n", encoding="utf-8")
    (static / "offline_search.js").write_text(_OFFLINE_SEARCH_JS, encoding="utf-8")


def _search_page_scripts(app, pagename, templatename, context, doctree):
    """The two offline-search scripts go on the search page only (before Sphinx's own search script runs)."""
    if pagename == "search":
        app.add_js_file("search_text.js", priority=100)
        app.add_js_file("offline_search.js", priority=101)


def setup(app):
    app.connect("doctree-resolved", _collect_search_text)
    app.connect("build-finished", _write_search_text)
    app.connect("html-page-context", _search_page_scripts)
    _bundled_mathjax()  # fail at the start of the build, not after it, when the renderer is missing
    app.connect("autodoc-process-docstring", _plain_text_to_rest)
    app.connect("build-finished", _copy_mathjax)
