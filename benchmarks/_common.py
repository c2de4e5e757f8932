"""Shared benchmark machinery: a timer and the result record every ``bench_*.py`` module returns.

A benchmark module defines ``run(quick: bool) -> list[Result]``. Each ``Result`` compares a compiled/batched
implementation with a plain numpy/scipy baseline of the *same computation*, both timed in the same process run, so the
ratio is meaningful on whatever machine runs it. Throughputs are in ``unit`` per second (higher is better).
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Result:
    """One benchmark row: ``value`` and ``baseline`` are throughputs (``unit``/s, higher is better)."""

    name: str
    unit: str
    value: float
    baseline: float | None = None
    baseline_name: str = ""
    target_ratio: float | None = None  # the target for value / baseline, if any
    target_value: float | None = None  # an absolute throughput target, if any
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline <= 0:
            return None
        return self.value / self.baseline


def best_time(fn, *, repeat: int = 3, min_time: float = 0.2) -> float:
    """Best wall time of ``fn()`` over ``repeat`` rounds; each round loops until ``min_time`` s and averages.

    The first call is made once beforehand and not timed (numba compilation, caches).
    """
    fn()
    best = float("inf")
    for _ in range(repeat):
        n = 0
        t0 = time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_time:
                break
        best = min(best, elapsed / n)
    return best


def cpu_time(fn, *, repeat: int = 1, warmup: bool = True) -> float:
    """Best process-CPU time of ``fn()`` over ``repeat`` calls (one core: robust to other jobs on a shared machine).

    With ``warmup`` (default), one untimed call is made first (numba compilation, first-call costs).
    """
    if warmup:
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return max(best, 1e-9)
