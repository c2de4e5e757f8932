"""Parameter sweeps: run one function over a named grid of configurations, in local processes or on a Dask cluster,
and collect the results as an ``xarray.Dataset`` with the grid as coordinates.

Configurations are cut into chunks of consecutive grid points; each chunk is one task (one inter-process call, one
Dask task), so millisecond configurations do not pay a round trip each. Engine kernels are cached on disk
(the engine's kernel cache), so workers load them instead of recompiling. A configuration that raises is reported with
its coordinates (never lost): ``SweepError`` lists the failures and carries the partial result, or with
``on_error="mask"`` the result holds NaN there and an ``error`` variable with the message.

Workers can be lost too: when a local worker process dies (killed, out of memory), the chunks it broke are run once
more in a fresh pool, and those lost twice become failed configurations (``WorkerLost``) beside the finished ones;
a Dask sweep whose cluster has had no workers for ``DASK_NO_WORKER_TIMEOUT`` seconds stops waiting and reports its
unfinished configurations the same way.
"""

from __future__ import annotations

from typing import Annotated, Any
import concurrent.futures as cf
import math
import multiprocessing
import os
import time
import traceback
from collections.abc import Callable

import numpy as np
import xarray as xr
from tqdm.auto import tqdm

from dynamics.provenance import provenance_attrs
from dynamics.validation import ArgumentTypeError, Range, check_choice, check_int, validate_module

__all__ = ["SweepError", "sweep"]


class SweepError(RuntimeError):
    """Some configurations of a sweep raised.

    Attributes
    ----------
    failures : list of dict
        One entry per failing configuration: its coordinates (``{name: value}``) and ``error`` (the exception's
        type, message and traceback text).
    partial : xarray.Dataset or None
        The sweep's result with NaN at the failing configurations (None when no configuration succeeded).
    """

    def __init__(self, message: str, *, failures: list, partial=None):
        super().__init__(message)
        self.failures = failures
        self.partial = partial


def sweep(
    fn: Callable,
    grid,
    *,
    processes: Annotated[int | None, Range(integer=True, ge=1)] = None,
    client: Annotated[Any, _check_client] = None,
    chunk_size: Annotated[int | None, Range(integer=True, ge=1)] = None,
    progress: bool = False,
    on_error: str = "raise",
):
    """Evaluate ``fn(**config)`` over a named grid of configurations and return an ``xarray.Dataset``.

    Parameters
    ----------
    fn : a picklable top-level function of the parameters by name. It returns a number, an array, a dict
        ``{name: number or array}``, an ``xarray.DataArray`` or an ``xarray.Dataset`` (e.g. a Trajectory); every
        configuration must return the same variables with the same shapes.
    grid : dict or xarray.Dataset
        A dict ``{name: values}``: a scalar is passed unchanged to every call (a scalar coordinate of the result); a
        1-D sequence becomes a dimension of that name (the grid is the outer product of these); an
        ``xarray.DataArray`` keeps its own dimensions (entries sharing a dimension are zipped along it, so they must
        have equal lengths). A Dataset: its data variables are the parameters, broadcast against each other, and
        its dimensions and coordinates are the grid's.
    processes : int >= 1 or None
        Local worker processes (spawned; None = ``os.cpu_count()``; 1 = in this process, in order). Ignored when
        ``client`` is given.
    client : ``dask.distributed.Client``, optional
        Submit the chunks to its cluster instead (works the same on a ``LocalCluster`` and on a remote one; ``fn``
        must be importable on the workers).
    chunk_size : int >= 1, optional
        Configurations per task (default: about four tasks per worker).
    progress : tqdm bar over tasks.
    on_error : "raise" (default) or "mask"; see the module docstring.

    Returns
    -------
    xarray.Dataset with the grid dimensions first, then each variable's own dimensions; the parameters are
    coordinates. Its attributes record what ran (``function``, ``parameters``, ``n_configurations``,
    ``chunk_size``, ``executor``: this process, local processes or the Dask scheduler's address) and the provenance
    that a :class:`~dynamics.Trajectory` carries (``git_rev``, ``versions_json``, ``created_utc``).

    Raises
    ------
    ValueError for a bad grid (naming the parameter and the shapes): empty or ragged values, NaN, arrays of more
    than one dimension without names, DataArrays whose shared dimensions disagree in length. SweepError when a
    configuration raises (with ``on_error="raise"``).

    A list or tuple ``grid`` is the older interface: ``fn(config)`` for each entry, returning a list in order.
    """
    on_error = check_choice("on_error", on_error, ("raise", "mask"))
    if isinstance(grid, list | tuple):
        return _sweep_list(fn, list(grid), processes, client, progress)
    params, coords, shape = _parse_grid(grid)
    n = int(np.prod(shape)) if shape else 1
    configs = [{name: _item(arr, idx) for name, arr in params.items()} for idx in np.ndindex(*shape)] or [{}]
    workers = _n_workers(processes, client)
    size = (
        check_int("chunk_size", chunk_size, min_value=1)
        if chunk_size is not None
        else max(1, math.ceil(n / (4 * workers)))
    )
    chunks = [configs[i : i + size] for i in range(0, n, size)]
    outcomes = _run_chunks(fn, chunks, processes, client, progress)
    attrs = _provenance(fn, params, n, size, workers, client, on_error)
    try:
        ds = _assemble(outcomes, configs, params, coords, shape, on_error)
    except SweepError as err:
        if err.partial is not None:
            err.partial.attrs.update(attrs)
        raise
    ds.attrs.update(attrs)
    return ds


def _provenance(fn, params, n: int, chunk_size: int, workers: int, client, on_error: str) -> dict:
    """The attributes of a sweep's result: what ran, where, and the usual provenance (git revision, versions, time),
    as a Trajectory carries them.
    """
    if client is not None:
        scheduler = getattr(getattr(client, "scheduler", None), "address", None) or type(client).__name__
        executor = f"dask ({scheduler})"
    else:
        executor = "this process" if workers == 1 else f"{workers} local processes"
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    return provenance_attrs(
        {
            "kind": "sweep",
            "function": name,
            "parameters": ", ".join(params) or "(none)",
            "n_configurations": n,
            "chunk_size": chunk_size,
            "executor": executor,
            "on_error": on_error,
        }
    )


def _item(arr, idx):
    value = arr[idx]
    return value.item() if isinstance(value, np.generic) else value


def _check_values(name: str, values: np.ndarray) -> None:
    if values.size == 0:
        raise ValueError(f"grid parameter {name!r} must not be empty; got shape {values.shape}")
    if np.iscomplexobj(values):
        raise ValueError(f"grid parameter {name!r} must be real; got complex values")
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
        bad = np.argwhere(~np.isfinite(values))[0]
        raise ValueError(
            f"grid parameter {name!r} must be finite; found {values[tuple(bad)]} at index "
            f"{tuple(int(i) for i in bad)} (shape {values.shape})"
        )


def _parse_grid(grid):
    """(params: name -> array over the grid shape, coords: dict for the result, grid shape)."""
    if isinstance(grid, xr.Dataset):
        if not grid.data_vars:
            raise ValueError("grid Dataset must have the parameters as data variables; got none")
        arrays = {name: grid[name] for name in grid.data_vars}
        coords = {name: c for name, c in grid.coords.items()}
    elif isinstance(grid, dict):
        if not grid:
            raise ValueError("grid must name at least one parameter; got an empty dict")
        arrays, coords = {}, {}
        for name, values in grid.items():
            name = str(name)
            if isinstance(values, xr.DataArray):
                arrays[name] = values.rename(name)
                continue
            try:
                arr = np.asarray(values)
            except ValueError as exc:  # ragged nested sequences
                raise ValueError(
                    f"grid parameter {name!r} must be a scalar or a 1-D sequence; got ragged values"
                ) from exc
            if arr.dtype == object and arr.ndim >= 1 and any(np.ndim(v) > 0 for v in arr.ravel()):
                raise ValueError(f"grid parameter {name!r} must be a scalar or a 1-D sequence; got ragged values")
            if arr.ndim > 1:
                raise ValueError(
                    f"grid parameter {name!r} must be a scalar, a 1-D sequence or an xarray.DataArray "
                    f"with named dimensions; got an array of shape {arr.shape}"
                )
            arrays[name] = xr.DataArray(arr, dims=() if arr.ndim == 0 else (name,), name=name)
    else:
        raise TypeError(f"grid must be a dict of name -> values or an xarray.Dataset; got {type(grid).__name__}")
    sizes: dict = {}
    for name, da in arrays.items():
        _check_values(name, np.asarray(da.values))
        for dim, length in da.sizes.items():
            if dim in sizes and sizes[dim][1] != length:
                other = sizes[dim][0]
                raise ValueError(
                    f"grid parameters {other!r} and {name!r} share dimension {dim!r} but their lengths "
                    f"differ: {other!r} has shape {tuple(arrays[other].shape)}, {name!r} has shape "
                    f"{tuple(da.shape)}"
                )
            sizes.setdefault(dim, (name, length))
    try:
        broadcast = xr.broadcast(*arrays.values())
    except ValueError as exc:
        raise ValueError(
            f"grid parameters do not broadcast: shapes { {k: tuple(v.shape) for k, v in arrays.items()} }"
        ) from exc
    dims = broadcast[0].dims
    broadcast = [b.transpose(*dims) for b in broadcast]
    shape = tuple(broadcast[0].shape)
    params = {name: np.asarray(b.values) for name, b in zip(arrays, broadcast)}
    for name, da in arrays.items():
        coords.setdefault(name, da.variable if da.dims else ((), da.values))
    return params, (dims, coords), shape


def _n_workers(processes, client) -> int:
    if client is not None:
        try:
            return max(1, len(client.scheduler_info().get("workers", {})))
        except Exception:  # a client without scheduler information: assume one worker
            return 1
    if processes is None:
        return os.cpu_count() or 1
    return check_int("processes", processes, min_value=1)


def _run_chunk(fn, configs):
    """Run ``fn`` over a chunk of configurations; each outcome is ("ok", value) or ("error", text)."""
    out = []
    for config in configs:
        try:
            out.append(("ok", _normalise(fn(**config))))
        except Exception as exc:  # reported with the configuration's coordinates by the caller
            out.append(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    return out


def _normalise(value) -> dict:
    """A result as {name: (dims or None, ndarray)} plus the coordinates of a Dataset result under '__coords__'."""
    if isinstance(value, xr.Dataset):
        out = {
            name: (tuple(str(d) for d in value[name].dims), np.asarray(value[name].values)) for name in value.data_vars
        }
        out["__coords__"] = {
            name: (tuple(str(d) for d in c.dims), np.asarray(c.values)) for name, c in value.coords.items()
        }
        return out
    if isinstance(value, xr.DataArray):
        return {value.name or "result": (tuple(str(d) for d in value.dims), np.asarray(value.values))}
    if isinstance(value, dict):
        return {str(k): (None, np.asarray(v)) for k, v in value.items()}
    return {"result": (None, np.asarray(value))}


def _run_chunks(fn, chunks, processes, client, progress):
    bar = tqdm(total=len(chunks), disable=not progress, desc="sweep", unit="task", leave=False)
    try:
        if client is not None:
            futures = [client.submit(_run_chunk, fn, chunk, pure=False) for chunk in chunks]
            for fut in futures:
                fut.add_done_callback(lambda _f: bar.update(1))
            return _gather_dask(client, futures, chunks)
        n_proc = _n_workers(processes, None)
        if n_proc == 1 or len(chunks) <= 1:
            out = []
            for chunk in chunks:
                out.append(_run_chunk(fn, chunk))
                bar.update(1)
            return out
        return _run_local_pool(fn, chunks, n_proc, bar)
    finally:
        bar.close()


#: Seconds a Dask sweep waits while its cluster has no workers before the unfinished chunks are reported as failed.
DASK_NO_WORKER_TIMEOUT = 120.0


def _gather_dask(client, futures, chunks, poll: float = 0.5):
    """The outcomes of the Dask futures. While the cluster has no workers at all for ``DASK_NO_WORKER_TIMEOUT``
    seconds, the sweep stops waiting: the unfinished chunks are cancelled and reported as failed configurations
    (so the finished ones are kept in the partial result), instead of waiting forever.
    """
    idle_since = None
    while not all(f.done() for f in futures):
        if _n_live_workers(client) == 0:
            idle_since = time.monotonic() if idle_since is None else idle_since
            if time.monotonic() - idle_since > DASK_NO_WORKER_TIMEOUT:
                break
        else:
            idle_since = None
        time.sleep(poll)
    finished = [i for i, f in enumerate(futures) if f.done() and getattr(f, "status", "finished") == "finished"]
    values = dict(zip(finished, client.gather([futures[i] for i in finished]))) if finished else {}
    lost = [futures[i] for i in range(len(futures)) if i not in values]
    if lost and callable(getattr(client, "cancel", None)):
        client.cancel(lost)
    message = (
        f"WorkerLost: no Dask worker was left for {DASK_NO_WORKER_TIMEOUT:.0f} s (or the task was lost); the "
        "configuration was not computed"
    )
    return [values[i] if i in values else [("error", message)] * len(chunks[i]) for i in range(len(futures))]


def _n_live_workers(client) -> int:
    """Workers the Dask scheduler knows now (-1 when the client cannot say, which never counts as none)."""
    try:
        return len(client.scheduler_info().get("workers", {}))
    except Exception:  # noqa: BLE001 - a client without scheduler information
        return -1


def _run_local_pool(fn, chunks, n_proc, bar):
    """Run the chunks in spawned worker processes. A worker that dies (killed, out of memory) breaks the pool: the
    chunks that had not finished are run once more in a fresh pool, and those lost again are reported as failed
    configurations (``"error"`` outcomes naming the lost worker), so that everything that finished is kept.
    """
    ctx = multiprocessing.get_context("spawn")  # numba/torch state is not fork-safe
    results = [None] * len(chunks)
    pending = list(range(len(chunks)))
    for attempt in range(2):
        lost = []
        with cf.ProcessPoolExecutor(max_workers=min(n_proc, len(pending)), mp_context=ctx) as pool:
            futures = {pool.submit(_run_chunk, fn, chunks[i]): i for i in pending}
            for fut in cf.as_completed(futures):
                i = futures[fut]
                try:
                    results[i] = fut.result()
                except cf.process.BrokenProcessPool:
                    lost.append(i)
                    continue
                bar.update(1)
        pending = sorted(lost)
        if not pending:
            return results
    for i in pending:
        message = (
            "WorkerLost: the worker process running this configuration died (killed or out of memory) "
            "twice; the configuration was not computed"
        )
        results[i] = [("error", message)] * len(chunks[i])
        bar.update(1)
    return results


def _describe(config: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in config.items())


def _assemble(outcomes, configs, params, coords_info, shape, on_error):
    dims, coords = coords_info
    flat = [o for chunk in outcomes for o in chunk]
    failures = [{**configs[i], "error": text} for i, (kind, text) in enumerate(flat) if kind == "error"]
    first = next((value for kind, value in flat if kind == "ok"), None)
    ds = None
    if first is not None:
        data_vars = {}
        for name, (vdims, arr) in first.items():
            if name == "__coords__":
                continue
            vdims = vdims if vdims is not None else tuple(f"{name}_dim{k}" for k in range(arr.ndim))
            dtype = np.result_type(arr.dtype, np.float64) if failures else arr.dtype
            if dtype.kind not in "fc" and failures:
                dtype = np.dtype(object)
            if failures:
                full = np.full(shape + arr.shape, np.nan if dtype.kind in "fc" else None, dtype=dtype)
            else:
                full = np.empty(shape + arr.shape, dtype=dtype)
            for i, (kind, value) in enumerate(flat):
                if kind != "ok":
                    continue
                if name not in value or value[name][1].shape != arr.shape:
                    got = "missing" if name not in value else f"shape {value[name][1].shape}"
                    raise ValueError(
                        f"sweep: variable {name!r} has shape {arr.shape} for the first configuration "
                        f"but is {got} for {_describe(configs[i])}; fn must return the same "
                        "variables and shapes for every configuration"
                    )
                full[np.unravel_index(i, shape) if shape else ()] = value[name][1]
            data_vars[name] = (tuple(dims) + vdims, full)
        result_coords = dict(coords)
        for name, (cdims, values) in first.get("__coords__", {}).items():
            if name not in result_coords and not set(cdims) & set(dims):
                result_coords[name] = (cdims, values)
        if on_error == "mask":
            errors = np.full(shape, "", dtype=object)
            for i, (kind, text) in enumerate(flat):
                if kind == "error":
                    errors[np.unravel_index(i, shape) if shape else ()] = text.splitlines()[0]
            data_vars["error"] = (tuple(dims), errors.astype(str))
        ds = xr.Dataset(data_vars, coords=result_coords)
    if failures and (on_error == "raise" or ds is None):
        shown = "; ".join(
            f"{_describe({k: v for k, v in f.items() if k != 'error'})}: {f['error'].splitlines()[0]}"
            for f in failures[:5]
        )
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        raise SweepError(
            f"{len(failures)} of {len(flat)} configurations failed: {shown}{more}", failures=failures, partial=ds
        )
    return ds


def _sweep_list(fn, configs, processes, client, progress) -> list:
    """The list interface: ``[fn(c) for c in configs]`` in order, locally or on ``client``."""
    if client is not None:
        return client.gather(client.map(fn, configs, pure=False))
    n_proc = _n_workers(processes, None)
    if n_proc == 1 or len(configs) <= 1:
        return [fn(c) for c in tqdm(configs, disable=not progress, desc="sweep", leave=False)]
    ctx = multiprocessing.get_context("spawn")
    results = [None] * len(configs)
    with cf.ProcessPoolExecutor(max_workers=n_proc, mp_context=ctx) as pool:
        futures = {pool.submit(fn, c): i for i, c in enumerate(configs)}
        for fut in tqdm(cf.as_completed(futures), total=len(configs), disable=not progress, desc="sweep", leave=False):
            results[futures[fut]] = fut.result()
    return results


def _check_client(name: str, client) -> None:
    if not (callable(getattr(client, "submit", None)) and callable(getattr(client, "gather", None))):
        raise ArgumentTypeError(
            f"{name} must be a dask.distributed.Client (with submit and gather) or None; got {type(client).__name__}"
        )


validate_module(globals())  # argument checks from the annotations (dynamics.validation)
