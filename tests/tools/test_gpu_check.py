"""CI dry run of the prepared GPU check: ``tools/gpu_check.py --device cpu`` writes one summary that passes.

Slow (about a minute on the 2-core CI machine: a child pytest of the gpu-marked tests run on the CPU, the
seeds-per-second stage and 0.1 % of a paper-preset figure), so excluded from the default run: ``pytest -m slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from closedform import models

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_dry_run_writes_one_passing_summary(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run(
        [sys.executable, "tools/gpu_check.py", "--device", "cpu", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert [p.name for p in tmp_path.iterdir()] == ["gpu_check.json"]  # one file, no temporary left
    summary = json.loads(out.read_text())
    assert summary["passed"] and summary["device"] == "cpu"
    records = summary["tests"]["records"]
    assert {k for k in records if k.startswith("trainer_")} == {
        f"trainer_{m}" for m in (*models.names(builtin=True), "single_location_transformer")
    }
    assert all(r["max_rel_diff"] == 0.0 for k, r in records.items() if k.startswith("trainer_"))  # CPU vs CPU
    measured = [r for rows in summary["seeds_per_second"].values() for r in rows if "wall_s" in r]
    assert measured and all(r["seed_steps_per_s"] > 0 for r in measured)
    assert summary["paper_fraction"]["cpu"]["projected_full_s"] > 0
