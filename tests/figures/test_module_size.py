"""No figure module over 600 lines: the figure families are split into modules that one reads at a sitting.

The framework modules (registry, report, runner, command line, parameters, cache, experiment layer, style,
estimates) are not figure modules and are left out by name; every other module under ``figures/`` counts.
"""

from __future__ import annotations

from pathlib import Path

FIGURES = Path(__file__).resolve().parents[2] / "figures"
LIMIT = 600
FRAMEWORK = {
    "__init__.py",
    "__main__.py",
    "registry.py",
    "report.py",
    "runner.py",
    "params.py",
    "presets.py",
    "cache.py",
    "experiments.py",
    "estimate.py",
    "_style.py",
}


def oversized(root: Path, limit: int = LIMIT) -> dict[str, int]:
    """``relative path -> line count`` of the figure modules under ``root`` longer than ``limit`` lines."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        if path.parent == root and path.name in FRAMEWORK:
            continue
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out[path.relative_to(root).as_posix()] = n
    return out


def test_no_figure_module_exceeds_the_limit():
    assert oversized(FIGURES) == {}


def test_the_size_check_catches_a_long_module(tmp_path):
    (tmp_path / "fam").mkdir()
    (tmp_path / "fam" / "long.py").write_text("x = 1\n" * (LIMIT + 1), encoding="utf-8")
    (tmp_path / "fam" / "ok.py").write_text("x = 1\n" * LIMIT, encoding="utf-8")
    (tmp_path / "registry.py").write_text("x = 1\n" * (LIMIT + 1), encoding="utf-8")  # framework: left out
    assert oversized(tmp_path) == {"fam/long.py": LIMIT + 1}
