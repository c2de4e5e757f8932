"""Where the report's figures are built: worker processes on this machine, or a Dask cluster.

The report hands :func:`parallel_entries` its figures and a picklable top-level function that builds, plots and
evaluates one figure and returns plain fields; this module schedules them. Workers are started with the ``spawn``
method (torch and numba start clean) and run numba, torch and BLAS with one thread each; figures that share their
data go to the same worker, one after the other, so a shared run is computed once and the others read it from the
cache. Results come back keyed by their position, so the caller puts them in registry order and the report is the
same as a serial build.

Stopping. A worker ignores SIGINT (a Ctrl-C reaches the whole process group; the parent decides), from its birth: the
parent blocks SIGINT while it starts workers, so a worker still importing the toolkit is not killed by a Ctrl-C (with
a traceback of its own), and its initializer ignores SIGINT before unblocking it. It turns SIGTERM into an exit that
runs its clean-up (a half-written cache file is removed by the atomic writer); on Linux it also
asks the kernel for SIGTERM when its parent dies, so no worker outlives a killed report. When the parent is
interrupted (:class:`Interrupted`, raised by :func:`signals_as_interrupts` for SIGTERM, or a ``KeyboardInterrupt``),
:func:`parallel_entries` cancels the figures not started, sends SIGTERM to every worker, waits at most
:data:`GRACE_S` seconds, kills what is left and removes the temporary files a killed worker may have left in the
cache and output folders; then the interruption propagates. A report started with SIGINT ignored (a background job
of a shell without job control, which every program it starts inherits) keeps ignoring Ctrl-C, as any program does
there; SIGTERM still stops it.

Dask. :func:`dask_entries` runs the same tasks (a figure with the figures sharing its data) on a ``LocalCluster``
or a remote scheduler, and inside them each training run a figure hands to :func:`figures.experiments.train_many`
is a task of its own; the entries are the same function's output, so the report is the same, bit for bit.

Resources. :func:`bounded_jobs` caps the number of workers at the usable cores and at the available memory divided by
:data:`WORKER_MEMORY_BYTES`, with a logged message saying why.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import math
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from tqdm.auto import tqdm

from figures import cache, experiments
from figures.registry import REGISTRY, FigureSpec, Registry, build

__all__ = [
    "GRACE_S",
    "WORKER_MEMORY_BYTES",
    "TEMP_GLOB",
    "Interrupted",
    "signals_as_interrupts",
    "usable_cores",
    "bounded_jobs",
    "default_registry",
    "remove_temp_files",
    "parallel_entries",
    "DASK_RETRIES",
    "build_only",
    "dask_entries",
]

logger = logging.getLogger(__name__)

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")

EntryFn = Callable[[FigureSpec, str, "Path | None", dict], dict]
"""Builds one figure: ``fn(spec, preset, out_dir, build_kw) -> fields`` (picklable; ``"traceback"`` on failure)."""

GRACE_S = 3.0
"""Seconds an interrupted report waits for its workers to exit after SIGTERM before killing them."""

WORKER_MEMORY_BYTES = 1 << 30
"""Memory budgeted per worker by :func:`bounded_jobs` (a quick-preset worker peaks below this: numpy, torch, numba
and one figure's data)."""

TEMP_GLOB = ".*.tmp"
"""Names of the atomic writer's temporary files (``.<name>.<random>.tmp``, :func:`dynamics.trajectory.atomic_write`)."""

_WORKER_REGISTRY: Registry | None = None
_STOPPING = False


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal (``signum``); raised in the main thread by :func:`signals_as_interrupts`."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """While active, SIGTERM (and SIGHUP) raise :class:`Interrupted` in the main thread, as Ctrl-C raises
    ``KeyboardInterrupt``, so ``finally`` blocks, the atomic writer's clean-up and :func:`parallel_entries`' worker
    shutdown run. The previous handlers are restored on exit.
    """

    def handler(signum, frame):
        raise Interrupted(signum)

    saved = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            saved[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread: leave the handlers alone
            break
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def _available_memory() -> int | None:
    """Bytes of memory available to new processes (``MemAvailable`` of /proc/meminfo), or None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform has one, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def bounded_jobs(jobs: int, *, cores: int | None = None, memory: int | None = None) -> int:
    """``jobs`` capped at the usable ``cores`` and at ``memory`` (bytes available) // :data:`WORKER_MEMORY_BYTES`
    (at least 1); a reduction is logged with its reason. ``cores``/``memory`` default to this machine's.
    """
    cores = usable_cores() if cores is None else cores
    memory = _available_memory() if memory is None else memory
    limits = {"usable cores": cores}
    if memory is not None:
        limits[f"{memory / 2**30:.1f} GiB available memory at {WORKER_MEMORY_BYTES / 2**30:.1f} GiB a worker"] = max(
            1, memory // WORKER_MEMORY_BYTES
        )
    reason, cap = min(limits.items(), key=lambda kv: kv[1])
    if jobs > cap:
        logger.warning("--jobs %d reduced to %d (%s: %d)", jobs, cap, reason, cap)
        return int(cap)
    return jobs


def _set_parent_death_signal() -> None:
    """Linux: ask the kernel to send SIGTERM to this process when its parent dies (no orphaned workers)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # no libc prctl: workers still stop on the parent's SIGTERM
        pass


def _worker_sigterm(signum, frame):
    global _STOPPING
    _STOPPING = True
    raise SystemExit(128 + signum)


def default_registry() -> Registry:
    """The package registry with its figure modules imported (what a worker builds from by default)."""
    REGISTRY.discover()
    return REGISTRY


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread while active: processes (and threads) started meanwhile inherit the block. A Ctrl-C
    meanwhile is delivered when it ends, or at once through another thread that does not block it (a
    ``KeyboardInterrupt`` the caller handles as any other). A no-op where the platform has no signal masks.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _worker_init(factory, parent_pid: int | None = None) -> None:
    """Worker start: stop with the parent (signals above), build the registry, pin numba and torch to one thread."""
    global _WORKER_REGISTRY
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # born with SIGINT blocked (see _sigint_blocked): ignored from now on
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGTERM, _worker_sigterm)
    _set_parent_death_signal()
    if parent_pid is not None and os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)
    _WORKER_REGISTRY = factory()
    _WORKER_REGISTRY.discover()
    if "numba" in sys.modules:
        sys.modules["numba"].set_num_threads(1)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def _worker_entries(
    entry_fn: EntryFn, names: list[str], preset: str, out_dir: str | None, build_kw: dict
) -> list[dict]:
    """Build the figures ``names`` one after the other in this worker (figures that share their data go together,
    so the shared runs are computed once and the others read them from the cache).
    """
    kw = {**build_kw, "registry": _WORKER_REGISTRY}
    try:
        return [
            entry_fn(_WORKER_REGISTRY.get(name), preset, None if out_dir is None else Path(out_dir), kw)
            for name in names
        ]
    except BaseException:
        if _STOPPING:  # SIGTERM: the clean-up above has run; leave now instead of taking the pool's next task
            os._exit(143)
        raise


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
    back in registry order afterwards, so the order changes nothing in the report.
    """

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


def _stop_workers(pool: cf.ProcessPoolExecutor, folders) -> None:
    """Cancel what has not started, SIGTERM every worker, wait up to :data:`GRACE_S`, SIGKILL the rest; if one had to
    be killed, remove the atomic writer's temporary files it may have left in ``folders``.
    """
    procs = list(getattr(pool, "_processes", {}).values())  # the executor keeps no public list of its workers
    for proc in procs:
        if proc.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    killed = [proc for proc in procs if proc.is_alive()]
    for proc in killed:
        proc.kill()
        proc.join(1.0)
    pool.shutdown(wait=False, cancel_futures=True)
    if killed:
        removed = remove_temp_files(folders)
        logger.warning(
            "killed %d worker(s) that ignored SIGTERM for %.0f s; removed %d temporary file(s)",
            len(killed),
            GRACE_S,
            removed,
        )


def remove_temp_files(folders) -> int:
    """Remove the atomic writer's temporary files (:data:`TEMP_GLOB`) under ``folders`` (None entries skipped);
    return how many. Call only when no process is writing there.
    """
    n = 0
    for folder in folders:
        if folder is None or not Path(folder).is_dir():
            continue
        for path in Path(folder).rglob(TEMP_GLOB):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                n += 1
    return n


def parallel_entries(
    entry_fn: EntryFn,
    specs: list[FigureSpec],
    preset: str,
    n_jobs: int,
    factory,
    out_dir: Path | None,
    build_kw: dict,
    progress: bool,
) -> list[dict]:
    """Build ``specs`` in ``n_jobs`` worker processes; return ``entry_fn``'s fields per spec, in the order given.

    A worker that dies is an error of its figures (``status="failed"`` with the reason), never a lost figure. On an
    interruption (``KeyboardInterrupt``, :class:`Interrupted`) the workers are stopped (see the module docstring)
    before it propagates.
    """
    n_jobs = bounded_jobs(n_jobs)
    ctx = multiprocessing.get_context("spawn")
    results: list[dict | None] = [None] * len(specs)
    kw = {k: (str(v) if isinstance(v, Path) else v) for k, v in build_kw.items() if k != "registry"}
    tasks = _tasks(specs, preset, build_kw.get("cache_dir"))
    with _single_threaded_env():  # inherited by the workers, spawned as tasks are submitted
        pool = cf.ProcessPoolExecutor(
            max_workers=n_jobs, mp_context=ctx, initializer=_worker_init, initargs=(factory, os.getpid())
        )
        try:
            with _sigint_blocked():  # workers start here, as tasks are submitted: born immune to Ctrl-C
                futures = {
                    pool.submit(
                        _worker_entries,
                        entry_fn,
                        [specs[i].name for i in task],
                        preset,
                        None if out_dir is None else str(out_dir),
                        kw,
                    ): task
                    for task in tasks
                }
        except BaseException:
            _stop_workers(pool, (build_kw.get("cache_dir"), out_dir))
            raise
    try:
        with tqdm(
            total=len(specs),
            desc=f"report ({preset}, {n_jobs} workers)",
            unit="fig",
            disable=None if progress else True,
        ) as bar:
            for fut in cf.as_completed(futures):
                task = futures[fut]
                try:
                    fields = fut.result()
                except Exception as exc:  # noqa: BLE001 - a dead worker is an error of its figures, shown in the report
                    fields = [
                        {
                            "preset": preset,
                            "status": "failed",
                            "error": f"worker process failed: {type(exc).__name__}: {exc}",
                            "traceback": traceback.format_exc(),
                        }
                        for _ in task
                    ]
                for i, f in zip(task, fields):
                    results[i] = f
                bar.update(len(task))
    except BaseException:
        _stop_workers(pool, (build_kw.get("cache_dir"), out_dir))
        raise
    pool.shutdown(wait=True)
    return results


# ----------------------------------------------------------------------------------------------------------------
# The same work on a Dask cluster (optional extra ``dask``)
# ----------------------------------------------------------------------------------------------------------------
DASK_RETRIES = 2
"""Extra attempts of a task that raised on a worker (a worker that dies is handled by Dask's own rescheduling)."""

_DASK_REGISTRIES: dict = {}


def _pin_one_thread() -> None:
    """numba and torch, where loaded, on one thread (a Dask worker's task computes on one core)."""
    for mod in ("numba", "torch"):
        if mod in sys.modules:
            sys.modules[mod].set_num_threads(1)


def _run_task(model, config, kwargs: dict, cache: tuple | None = None) -> tuple:
    """One training run of :func:`figures.experiments.train_many` as a Dask task (``cache``: the figure's run cache,
    see :func:`figures.experiments.train_recorded`).
    """
    _pin_one_thread()
    return experiments.train_recorded(model, config, kwargs, cache)


def _spread_over_cluster(figure: str):
    """The ``spread`` of :func:`figures.experiments.spreading` for figure ``figure`` built in a Dask task: one task
    per training run, submitted from the figure's task (which leaves the worker's thread pool while it waits, so the
    runs can use every worker); a run that raises, or whose workers keep dying, fails the figure naming the run.
    """

    def spread(calls: list) -> list:
        from dask.distributed import worker_client

        with worker_client() as client:
            stamp = f"{os.getpid()}-{time.time_ns()}"
            futures = [
                client.submit(_run_task, *call, pure=False, retries=DASK_RETRIES, key=f"run-{figure}-{i}-{stamp}")
                for i, call in enumerate(calls)
            ]
            out = []
            for i, fut in enumerate(futures):
                try:
                    out.append(fut.result())
                except Exception as exc:
                    client.cancel(futures[i + 1 :])
                    model = getattr(calls[i][0], "name", type(calls[i][0]).__name__)
                    raise RuntimeError(
                        f"training run {i + 1} of {len(calls)} of {figure} (model {model}) lost on the Dask cluster: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
            return out

    return spread


def _dask_entries(
    entry_fn: EntryFn, factory, names: list[str], preset: str, out_dir: str | None, build_kw: dict
) -> list[dict]:
    """One task on a Dask worker: the figures ``names`` built one after the other (the registry is built once per
    worker process from ``factory``; numba and torch use one thread); the training runs a figure hands to
    :func:`figures.experiments.train_many` become tasks of their own (:func:`_spread_over_cluster`).
    """
    key = repr(factory)  # a factory arrives unpickled as a new object per task; its repr names the same function
    reg = _DASK_REGISTRIES.get(key)
    if reg is None:
        reg = _DASK_REGISTRIES[key] = factory()
        reg.discover()
        _pin_one_thread()
    kw = {**build_kw, "registry": reg}
    out = []
    for name in names:
        with experiments.spreading(_spread_over_cluster(name)):
            out.append(entry_fn(reg.get(name), preset, None if out_dir is None else Path(out_dir), kw))
    return out


def build_only(spec: FigureSpec, preset: str, out_dir: Path | None, build_kw: dict) -> dict:
    """An entry function that only builds the figure's data into the cache (``figures make --scheduler``: the
    figures are then rendered from the cache on the client).
    """
    try:
        result = build(spec.name, preset, **build_kw)
        return {"status": result.status, "runtime_s": result.runtime_s}
    except Exception as exc:  # noqa: BLE001 - reported by name; the client's own build raises it again
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def _dask_client(scheduler: str, n_jobs: int):
    """``(client, cluster)``: a ``LocalCluster`` of ``n_jobs`` single-threaded worker processes for ``"local"``,
    else a client of the scheduler at address ``scheduler`` (``cluster`` None).
    """
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as exc:
        raise ImportError("--scheduler needs the optional extra 'dask' (pip install 'attndyn[dask]')") from exc
    if not isinstance(scheduler, str) or not scheduler.strip():
        raise ValueError(f"scheduler must be 'local' or a Dask scheduler address (tcp://host:port); got {scheduler!r}")
    if scheduler == "local":
        n_jobs = bounded_jobs(n_jobs)
        with _single_threaded_env():  # inherited by the worker processes
            cluster = LocalCluster(n_workers=n_jobs, threads_per_worker=1, processes=True, dashboard_address=None)
        return Client(cluster), cluster
    return Client(scheduler, timeout="30s"), None


def dask_entries(
    entry_fn: EntryFn,
    specs: list[FigureSpec],
    preset: str,
    n_jobs: int,
    factory,
    out_dir: Path | None,
    build_kw: dict,
    progress: bool,
    scheduler: str,
) -> list[dict]:
    """As :func:`parallel_entries`, on the Dask cluster ``scheduler`` (``"local"`` or an address).

    The unit of work is a figure with the figures that share its data. Every worker writes to the same cache
    folder and output folder, so on a remote cluster both must be on a file system the workers share. A worker lost
    mid-figure is replaced and its task rerun by Dask; a task whose workers keep dying (Dask's ``KilledWorker``) or
    that raises :data:`DASK_RETRIES` + 1 times becomes ``status="failed"`` naming the lost figures.
    """
    if factory is None:
        raise ValueError("scheduler needs a registry with a factory (workers rebuild the registry)")
    client, cluster = _dask_client(scheduler, n_jobs)
    results: list[dict | None] = [None] * len(specs)
    # absolute paths: a worker's working folder need not be the client's
    kw = {
        k: (str(Path(v).resolve()) if k == "cache_dir" and v is not None else v)
        for k, v in build_kw.items()
        if k != "registry"
    }
    out_dir = None if out_dir is None else Path(out_dir).resolve()
    try:
        from dask.distributed import as_completed

        tasks = _tasks(specs, preset, build_kw.get("cache_dir"))
        futures = {
            client.submit(
                _dask_entries,
                entry_fn,
                factory,
                [specs[i].name for i in task],
                preset,
                None if out_dir is None else str(out_dir),
                kw,
                pure=False,
                retries=DASK_RETRIES,
                key=f"figures-{specs[task[0]].name}-{os.getpid()}-{time.time_ns()}",
            ): task
            for task in tasks
        }
        with tqdm(
            total=len(specs),
            desc=f"report ({preset}, dask {scheduler})",
            unit="fig",
            disable=None if progress else True,
        ) as bar:
            for fut in as_completed(list(futures)):
                task = futures[fut]
                try:
                    fields = fut.result()
                except Exception as exc:  # noqa: BLE001 - a lost worker or task is an error of its figures, by name
                    names = ", ".join(specs[i].name for i in task)
                    fields = [
                        {
                            "preset": preset,
                            "status": "failed",
                            "error": f"lost on the Dask cluster ({names}): {type(exc).__name__}: {exc}",
                            "traceback": traceback.format_exc(),
                        }
                        for _ in task
                    ]
                for i, f in zip(task, fields):
                    results[i] = f
                bar.update(len(task))
    finally:  # closing the client releases its tasks; closing a LocalCluster stops its workers
        client.close()
        if cluster is not None:
            cluster.close()
    return results
