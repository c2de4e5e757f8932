"""The README's generated parts are current: its figure table equals what ``python -m figures list --markdown``
prints from the registry (so a renamed, added or re-cited figure cannot leave the README behind)."""

from __future__ import annotations

import re
from pathlib import Path

from closedform import models as model_registry
from figures import registry
from figures.__main__ import MARKDOWN_HEADER, main, markdown_table

README = Path(__file__).resolve().parents[1] / "README.md"
TABLE_RE = re.compile(
    r"<!-- figure-table: python -m figures list --markdown -->\n(.*?)\n<!-- end figure-table -->", re.S
)


def test_readme_figure_table_is_current():
    match = TABLE_RE.search(README.read_text(encoding="utf-8"))
    assert match, "README.md lost its figure-table markers"
    reg = registry.REGISTRY
    reg.discover()
    builtin = model_registry.names(builtin=True)  # an installed package's models are not attndyn's README's
    expected = markdown_table(reg, [m for m in reg.models if m in builtin])
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
