"""``make install`` without a reachable package index says so in one line (tools/index_reachable.py)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "index_reachable.py"


def test_unreachable_index_is_one_line():
    env = {k: v for k, v in os.environ.items() if k != "PIP_NO_INDEX"}
    env["PIP_INDEX_URL"] = "http://no-such-host.invalid/simple/"  # .invalid never resolves (RFC 2606)
    proc = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the package index" in lines[0] and "no-such-host.invalid" in lines[0]


def test_makefile_reports_pip_failure_through_the_probe():
    text = (TOOL.parent.parent / "Makefile").read_text()
    assert '-e ".[all]" || { $(PYTHON) tools/index_reachable.py; exit 1; }' in text
