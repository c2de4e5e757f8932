"""The figures' one entry to torch training: every run a figure trains goes through :func:`train` here.

:func:`train` calls :func:`empirical.train.train` and records what was trained (the model, the trainer's full
configuration, the device and dtype) while a figure is built (runs reused from an in-process memo are recorded too:
:func:`memo`, or :func:`note` on the reused trajectory): :func:`figures.registry.build` collects those records
(:func:`recording`) into the ``train_configs_json`` attribute of the figure's netCDF, so every figure states the
trainer configuration behind its numbers, next to its own resolved parameters (``config_json``).

Run cache. Inside :func:`caching` (which :func:`figures.registry.build` opens on its cache root), a run is stored on
disk and reused by any later build, in this process or another: ``<root>/_runs/<model name>/<key>.nc`` holds the
trajectory and the final parameters (netCDF, no pickle) and ``<key>.json`` its checksum sidecar, both written
atomically and verified on reading exactly as the figure cache does (:func:`figures.cache.load_entry`). The key is the
sha256 of the run's resolved configuration (:func:`run_identity`): the model's class and its complete state (every
attribute, arrays by the sha256 of their bytes), the trainer's configuration, the resolved device and the code
version. A run whose model holds something that cannot be fingerprinted is trained without the disk cache, never
keyed on a guess. A fresh run is returned as read back from its file, so a fresh and a reused run are the same
numbers bit for bit; ``recompute`` retrains and overwrites.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import xarray as xr

__all__ = [
    "recording",
    "caching",
    "run_identity",
    "train",
    "note",
    "memo",
    "records_json",
    "train_many",
    "train_recorded",
    "spreading",
]

logger = logging.getLogger(__name__)

_RECORDS: contextvars.ContextVar[list | None] = contextvars.ContextVar("figures_training_records", default=None)
_SPREAD: contextvars.ContextVar = contextvars.ContextVar("figures_training_spread", default=None)
_CACHE: contextvars.ContextVar[tuple[Path, bool] | None] = contextvars.ContextVar("figures_run_cache", default=None)
_RUNS = "_runs"  # folder of the run cache under a cache root (no figure name starts with an underscore)
_PARAM = "__param__"  # prefix of the final parameters' variables in a stored run


@contextlib.contextmanager
def recording() -> Iterator[list[dict]]:
    """Collect a record of every :func:`train` call made inside the ``with`` block (nested blocks each see their
    own calls, and the enclosing block sees them too).
    """
    records: list[dict] = []
    outer = _RECORDS.get()
    token = _RECORDS.set(records)
    try:
        yield records
    finally:
        _RECORDS.reset(token)
        if outer is not None:
            outer.extend(records)


@contextlib.contextmanager
def caching(root: str | os.PathLike | None, *, recompute: bool = False) -> Iterator[None]:
    """Within the ``with`` block, :func:`train` stores its runs under ``root`` and reuses the stored ones (module
    docstring); ``root=None`` switches the disk cache off; ``recompute=True`` retrains and overwrites.
    """
    token = _CACHE.set(None if root is None else (Path(root), bool(recompute)))
    try:
        yield
    finally:
        _CACHE.reset(token)


class _Unkeyable(Exception):
    """A model attribute that :func:`_fingerprint` cannot reduce to its value."""


def _fingerprint(obj, seen: frozenset = frozenset()):
    """A JSON-able value that determines ``obj``: plain values as they are, arrays and tensors by dtype, shape and
    the sha256 of their bytes, containers and objects (dataclasses, instances) element by element with their
    class; raises :class:`_Unkeyable` for anything else (functions, generators, open files, cycles).
    """
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return repr(obj)  # exact (repr round-trips a float64), NaN and inf included
    if isinstance(obj, np.generic):
        return [type(obj).__name__, _fingerprint(obj.item(), seen)]
    if type(obj).__module__ == "torch" and type(obj).__name__ in ("Tensor", "Parameter"):
        obj = obj.detach().cpu().numpy()
    if type(obj).__module__ == "torch" and type(obj).__name__ == "dtype":
        return ["torch.dtype", str(obj)]
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            return ["object-array", list(obj.shape), [_fingerprint(v, seen) for v in obj.ravel().tolist()]]
        data = np.ascontiguousarray(obj)
        return ["ndarray", data.dtype.str, list(data.shape), hashlib.sha256(data.tobytes()).hexdigest()]
    if id(obj) in seen:
        raise _Unkeyable(f"a cycle through a {type(obj).__name__}")
    seen = seen | {id(obj)}
    if isinstance(obj, list | tuple):
        return [type(obj).__name__, [_fingerprint(v, seen) for v in obj]]
    if isinstance(obj, frozenset | set):
        return [type(obj).__name__, sorted(json.dumps(_fingerprint(v, seen), sort_keys=True) for v in obj)]
    if isinstance(obj, dict):
        return ["dict", sorted([json.dumps(_fingerprint(k, seen)), _fingerprint(v, seen)] for k, v in obj.items())]
    cls = type(obj)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if dataclasses.is_dataclass(obj):
        return [name, {f.name: _fingerprint(getattr(obj, f.name), seen) for f in dataclasses.fields(obj)}]
    if hasattr(obj, "__dict__") and not callable(obj) and cls.__module__.split(".")[0] in ("closedform", "empirical"):
        return [name, {k: _fingerprint(v, seen) for k, v in sorted(vars(obj).items())}]
    raise _Unkeyable(f"a {name}")


def run_identity(model, config, device: str) -> dict | None:
    """The resolved configuration that keys a run in the disk cache (module docstring): the model's class and
    state, the trainer's configuration, the resolved device type and the code version; ``None`` when the model holds
    something that cannot be reduced to its value (a function, a generator, an open file, a cycle, or an object that
    is neither a dataclass nor of a closedform/empirical class): the run is then not cached.
    """
    from empirical.device import resolve_device
    from figures.presets import code_version

    try:
        state = _fingerprint(model)
    except _Unkeyable as exc:
        logger.info("run of %s not cached on disk: its model holds %s", getattr(model, "name", model), exc)
        return None
    return {
        "format": "attndyn.figures.run/1",
        "model": state,
        "config": json.loads(config.to_json()),
        "device": resolve_device(device).type,
        "code": code_version(),
    }


def _run_dataset(trajectory: xr.Dataset, params: dict) -> xr.Dataset:
    """The trajectory with the final parameters added as variables (own dims), for one netCDF file."""
    ds = trajectory.copy()
    for name, value in params.items():
        arr = value.detach().cpu().numpy()
        ds[f"{_PARAM}{name}"] = (tuple(f"{_PARAM}{name}__{i}" for i in range(arr.ndim)), arr)
    return ds


def _split_run(ds: xr.Dataset):
    """Inverse of :func:`_run_dataset`: the Trajectory and the parameters (CPU tensors)."""
    import torch

    from dynamics.trajectory import Trajectory

    names = [v for v in ds.data_vars if str(v).startswith(_PARAM)]
    params = {str(v)[len(_PARAM) :]: torch.from_numpy(np.array(ds[v].values)) for v in names}
    rest = ds.drop_vars(names)
    return Trajectory(rest.data_vars, coords=rest.coords, attrs=rest.attrs), params


def _cached_run(model, config, device, progress, kwargs):
    """``(trajectory, params)`` from the disk cache, trained and stored on a miss; ``None`` when no disk cache is
    active or the run cannot be keyed.
    """
    from figures import cache

    setting = _CACHE.get()
    if setting is None or kwargs:  # checkpointing arguments: the caller manages its own files
        return None
    root, recompute = setting
    identity = run_identity(model, config, device)
    if identity is None:
        return None
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[: cache.KEY_LENGTH]
    folder = root / _RUNS / str(getattr(model, "name", type(model).__name__))
    paths = folder / f"{key}.nc", folder / f"{key}.json"
    label = f"run {key} of {getattr(model, 'name', '')}"
    if not recompute:
        lookup = cache.load_entry(*paths, identity, label=label)
        if lookup.status == "hit":
            return _split_run(lookup.dataset)
    from empirical.train import train as _train

    t0 = time.perf_counter()
    trajectory, params = _train(model, config, device=device, progress=progress, return_params=True)
    cache.store_entry(*paths, identity, _run_dataset(trajectory, params), runtime_s=time.perf_counter() - t0)
    stored = cache.load_entry(*paths, identity, label=label)
    if stored.status != "hit":
        raise OSError(f"the run just stored at {paths[0]} does not verify: {stored.reason}")
    return _split_run(stored.dataset)


def train(model, config, *, device="auto", progress: bool = False, return_params: bool = False, **kwargs):
    """:func:`empirical.train.train` (same arguments and result), recording the run for the figure being built
    (:func:`note`) and, inside :func:`caching`, reusing it from the disk cache (module docstring).
    """
    run = _cached_run(model, config, device, progress, kwargs)
    if run is None:
        from empirical.train import train as _train

        out = _train(model, config, device=device, progress=progress, return_params=return_params, **kwargs)
        run = out if return_params else (out, None)
    note(run[0])
    return run if return_params else run[0]


def train_many(calls) -> list:
    """Train independent runs, ``calls`` a sequence of ``(model, config, kwargs)``; return :func:`train`'s results
    in the same order. Here they run one after the other; inside :func:`spreading` (a report on a Dask cluster) each
    run is a task of its own on the cluster's workers, with the same numbers (each run is deterministic on a device).
    """
    calls = [(model, config, dict(kwargs)) for model, config, kwargs in calls]
    spread = _SPREAD.get()
    if spread is None:
        return [train(model, config, **kwargs) for model, config, kwargs in calls]
    cache = _CACHE.get()  # the run cache is a context variable: it travels with each run to its worker
    done = spread([(model, config, kwargs, cache) for model, config, kwargs in calls])  # [(result, records)]
    records = _RECORDS.get()
    if records is not None:
        for _, runs in done:
            records.extend(runs)
    return [out for out, _ in done]


def train_recorded(model, config, kwargs: dict, cache: tuple | None = None) -> tuple:
    """One run of :func:`train_many` where it is computed: ``(train's result, the run's records)``; the records go
    back with the result only (:func:`train_many` adds them to the figure's), not to a recording around this call.
    ``cache``: the ``(root, recompute)`` of the figure's :func:`caching` block, entered here (a worker does not
    inherit the figure's context), or None to leave the current one.
    """
    runs: list[dict] = []
    token = _RECORDS.set(runs)
    try:
        with caching(cache[0], recompute=cache[1]) if cache is not None else contextlib.nullcontext():
            out = train(model, config, **kwargs)
    finally:
        _RECORDS.reset(token)
    return out, runs


@contextlib.contextmanager
def spreading(spread) -> Iterator[None]:
    """Inside the block, :func:`train_many` hands its runs to ``spread(calls) -> [train_recorded(*call), ...]``
    (e.g. one task per run on a Dask cluster) instead of training them here.
    """
    token = _SPREAD.set(spread)
    try:
        yield
    finally:
        _SPREAD.reset(token)


def note(trajectory) -> None:
    """Record the run behind ``trajectory`` (a trainer's result, fresh or reused from a memo) for the figure being
    built: its model, device, dtype and the trainer's configuration (the trajectory's own attributes).
    """
    records = _RECORDS.get()
    if records is None:
        return
    attrs = trajectory.attrs
    records.append(
        {
            "model": str(attrs.get("model", "")),
            "device": str(attrs.get("device", "")),
            "dtype": str(attrs.get("dtype", "")),
            "config": json.loads(attrs.get("config_json", "null")),
        }
    )


def memo(store: dict, key, compute):
    """``compute()`` memoised in ``store`` under ``key`` (one entry kept), with its training records: a hit records
    the runs behind the value again, so a figure built from memoised runs states them as a fresh build does.
    """
    if key in store:
        value, runs = store[key]
        records = _RECORDS.get()
        if records is not None:
            records.extend(runs)
        return value
    with recording() as runs:
        value = compute()
    store.clear()
    store[key] = (value, list(runs))
    return value


def records_json(records: list[dict]) -> str:
    """The records as compact JSON text (a netCDF attribute); identical runs are listed once, in call order."""
    unique: list[dict] = []
    for r in records:
        if r not in unique:
            unique.append(r)
    return json.dumps(unique, sort_keys=True, separators=(",", ":"))
