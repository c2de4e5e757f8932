"""The README's generated parts are current: its figure table equals what ``python -m figures list --markdown``
prints from the registry (so a renamed, added or re-cited figure cannot leave the README behind)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from figures import registry
from figures.__main__ import MARKDOWN_HEADER, main

README = Path(__file__).resolve().parents[2] / "README.md"
TABLE_RE = re.compile(
    r"<!-- figure-table: python -m figures list --markdown -->\n(.*?)\n<!-- end figure-table -->", re.S
)


_FRESH_TABLE = """
from closedform import models as model_registry
from figures import registry
from figures.__main__ import markdown_table

reg = registry.REGISTRY
reg.discover()
builtin = model_registry.names(builtin=True)  # an installed package's models are not attndyn's README's
print(markdown_table(reg, [m for m in reg.models if m in builtin]), end="")
"""


def test_readme_figure_table_is_current():
    """Computed in a fresh interpreter, as `python -m figures list --markdown` runs: within a model the table follows
    registration order, which a test that imported a figure module on its own first would change in this process."""
    match = TABLE_RE.search(README.read_text(encoding="utf-8"))
    assert match, "README.md lost its figure-table markers"
    root = README.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    expected = subprocess.run(
        [sys.executable, "-c", _FRESH_TABLE], cwd=root, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert match.group(1) == expected, "README figure table is stale: paste `python -m figures list --markdown`"


def test_markdown_table_has_one_row_per_figure(capsys):
    assert main(["list", "--markdown", "--model", "random_walk"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "\n".join(lines[:2]) == MARKDOWN_HEADER
    reg = registry.REGISTRY
    names = reg.names("random_walk")
    assert len(lines) == 2 + len(names)
    for line, name in zip(lines[2:], names):
        assert line.startswith(f"| `{name}` |") and line.endswith(f"`python -m figures make {name}` |")
