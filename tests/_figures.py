"""Shared helpers of the per-model figure tests (``tests/test_figures_<model>.py``).

That every registered figure builds at the ``tiny`` preset twice with identical data and renders a non-blank PNG is
checked once, for all models, by ``tests/test_figures_framework.py::test_registered_figure_builds_at_tiny_size``. The
per-model files build each of their figures once at ``tiny`` (no cache) with :func:`build_tiny`, check the time budget
and the well-formedness of the gap rows and checks with :func:`check_tiny_build`, and add the model-specific facts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from figures import registry
from figures.registry import CheckResult, GapRow


def build_tiny(names: Sequence[str]) -> dict:
    """Build each figure of ``names`` once at ``tiny`` on the CPU without a cache: ``{name: (result, seconds)}``."""
    registry.discover()
    out = {}
    for name in names:
        t0 = time.perf_counter()
        res = registry.build(name, "tiny", device="cpu", cache_dir=None)
        out[name] = (res, time.perf_counter() - t0)
    return out


def assert_gap_rows(rows) -> None:
    """Gap rows are present, typed, and finite: theory and mean finite, a non-negative SE."""
    assert rows and all(isinstance(g, GapRow) for g in rows)
    for g in rows:
        assert np.isfinite(g.theory) and np.isfinite(g.mean) and g.se >= 0


def assert_check_results(rows) -> None:
    """Checks are present and typed."""
    assert rows and all(isinstance(c, CheckResult) for c in rows)


def check_tiny_build(built: dict, name: str, budget_s: float, *, gaps: bool = True):
    """The figure ``name`` of :func:`build_tiny`'s ``built`` took less than ``budget_s`` seconds, its checks (and, with
    ``gaps``, its gap rows) are well formed; returns the build result for model-specific assertions."""
    res, seconds = built[name]
    assert seconds < budget_s, f"{name}: tiny build took {seconds:.1f} s"
    if gaps:
        assert_gap_rows(res.spec.gaps(res.dataset))
    assert_check_results(res.spec.checks(res.dataset))
    return res
