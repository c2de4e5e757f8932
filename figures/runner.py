"""Where the report's figures are built: worker processes on this machine.

The report hands :func:`parallel_entries` its figures and a picklable top-level function that builds, plots and
evaluates one figure and returns plain fields; this module schedules them. Workers are started with the ``spawn``
method (torch and numba start clean) and run numba, torch and BLAS with one thread each; figures that share their
data go to the same worker, one after the other, so a shared run is computed once and the others read it from the
cache. Results come back keyed by their position, so the caller puts them in registry order and the report is the
same as a serial build.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import math
import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from tqdm.auto import tqdm

from figures import cache
from figures.registry import REGISTRY, FigureSpec, Registry

logger = logging.getLogger(__name__)

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")

EntryFn = Callable[[FigureSpec, str, "Path | None", dict], dict]
"""Builds one figure: ``fn(spec, preset, out_dir, build_kw) -> fields`` (picklable; ``"traceback"`` on failure)."""

_WORKER_REGISTRY: Registry | None = None


def default_registry() -> Registry:
    """The package registry with its figure modules imported (what a worker builds from by default)."""
    REGISTRY.discover()
    return REGISTRY


def _worker_init(factory) -> None:
    """Worker start: build the registry, then pin numba and torch to one thread each."""
    global _WORKER_REGISTRY
    _WORKER_REGISTRY = factory()
    _WORKER_REGISTRY.discover()
    if "numba" in sys.modules:
        sys.modules["numba"].set_num_threads(1)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def _worker_entries(entry_fn: EntryFn, names: list[str], preset: str, out_dir: str | None,
                    build_kw: dict) -> list[dict]:
    """Build the figures ``names`` one after the other in this worker (figures that share their data go together,
    so the shared runs are computed once and the others read them from the cache)."""
    kw = {**build_kw, "registry": _WORKER_REGISTRY}
    return [entry_fn(_WORKER_REGISTRY.get(name), preset, None if out_dir is None else Path(out_dir), kw)
            for name in names]


@contextlib.contextmanager
def _single_threaded_env() -> Iterator[None]:
    """Set the BLAS/OpenMP/numba thread counts to 1 in ``os.environ`` (inherited by spawned workers), then restore."""
    saved = {k: os.environ.get(k) for k in _THREAD_VARS}
    os.environ.update({k: "1" for k in _THREAD_VARS})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _longest_first(names: list[str], preset: str, cache_dir) -> list[int]:
    """Indices of ``names`` in the order to submit them: longest previous runtime first (figures never built, or
    without a cache, first of all), so no long figure starts last while the other workers idle. The entries are put
    back in registry order afterwards, so the order changes nothing in the report."""
    def key(i):
        runtime = None if cache_dir is None else cache.previous_runtime(cache_dir, names[i], preset)
        return -math.inf if runtime is None else -runtime

    return sorted(range(len(names)), key=key)


def _tasks(specs: list[FigureSpec], preset: str, cache_dir) -> list[list[int]]:
    """Group the indices of ``specs`` by data source (the figure first, then those sharing its data), longest first."""
    groups: dict[str, list[int]] = {}
    for i in _longest_first([spec.name for spec in specs], preset, cache_dir):
        groups.setdefault(specs[i].data_source, []).append(i)
    return [sorted(members, key=lambda i: specs[i].shares_data_with is not None) for members in groups.values()]


def parallel_entries(entry_fn: EntryFn, specs: list[FigureSpec], preset: str, n_jobs: int, factory,
                     out_dir: Path | None, build_kw: dict, progress: bool) -> list[dict]:
    """Build ``specs`` in ``n_jobs`` worker processes; return ``entry_fn``'s fields per spec, in the order given.

    A worker that dies is an error of its figures (``status="failed"`` with the reason), never a lost figure.
    """
    ctx = multiprocessing.get_context("spawn")
    results: list[dict | None] = [None] * len(specs)
    kw = {k: (str(v) if isinstance(v, Path) else v) for k, v in build_kw.items() if k != "registry"}
    tasks = _tasks(specs, preset, build_kw.get("cache_dir"))
    with _single_threaded_env(), cf.ProcessPoolExecutor(max_workers=n_jobs, mp_context=ctx,
                                                        initializer=_worker_init, initargs=(factory,)) as pool:
        futures = {pool.submit(_worker_entries, entry_fn, [specs[i].name for i in task], preset,
                               None if out_dir is None else str(out_dir), kw): task for task in tasks}
        with tqdm(total=len(specs), desc=f"report ({preset}, {n_jobs} workers)", unit="fig",
                  disable=None if progress else True) as bar:
            for fut in cf.as_completed(futures):
                task = futures[fut]
                try:
                    fields = fut.result()
                except Exception as exc:  # noqa: BLE001 - a dead worker is an error of its figures, shown in the report
                    fields = [{"preset": preset, "status": "failed", "error": f"worker process failed: "
                               f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()} for _ in task]
                for i, f in zip(task, fields):
                    results[i] = f
                bar.update(len(task))
    return results
