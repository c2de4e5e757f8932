"""The figures' one entry to torch training: every run a figure trains goes through :func:`train` here.

:func:`train` calls :func:`empirical.train.train` and records what was trained (the model, the trainer's full
configuration, the device and dtype) while a figure is built (runs reused from an in-process memo are recorded too:
:func:`memo`, or :func:`note` on the reused trajectory): :func:`figures.registry.build` collects those records
(:func:`recording`) into the ``train_configs_json`` attribute of the figure's netCDF, so every figure states the
trainer configuration behind its numbers, next to its own resolved parameters (``config_json``).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator

__all__ = ["recording", "train", "note", "memo", "records_json", "train_many", "train_recorded", "spreading"]

_RECORDS: contextvars.ContextVar[list | None] = contextvars.ContextVar("figures_training_records", default=None)
_SPREAD: contextvars.ContextVar = contextvars.ContextVar("figures_training_spread", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[dict]]:
    """Collect a record of every :func:`train` call made inside the ``with`` block (nested blocks each see their
    own calls, and the enclosing block sees them too)."""
    records: list[dict] = []
    outer = _RECORDS.get()
    token = _RECORDS.set(records)
    try:
        yield records
    finally:
        _RECORDS.reset(token)
        if outer is not None:
            outer.extend(records)


def train(model, config, **kwargs):
    """:func:`empirical.train.train` (same arguments and result), recording the run for the figure being built
    (:func:`note`)."""
    from empirical.train import train as _train

    out = _train(model, config, **kwargs)
    note(out[0] if isinstance(out, tuple) else out)
    return out


def train_many(calls) -> list:
    """Train independent runs, ``calls`` a sequence of ``(model, config, kwargs)``; return :func:`train`'s results
    in the same order. Here they run one after the other; inside :func:`spreading` (a report on a Dask cluster) each
    run is a task of its own on the cluster's workers, with the same numbers (each run is deterministic on a device)."""
    calls = [(model, config, dict(kwargs)) for model, config, kwargs in calls]
    spread = _SPREAD.get()
    if spread is None:
        return [train(model, config, **kwargs) for model, config, kwargs in calls]
    done = spread(calls)  # [(result, records)] from train_recorded on the workers
    records = _RECORDS.get()
    if records is not None:
        for _, runs in done:
            records.extend(runs)
    return [out for out, _ in done]


def train_recorded(model, config, kwargs: dict) -> tuple:
    """One run of :func:`train_many` where it is computed: ``(train's result, the run's records)``; the records go
    back with the result only (:func:`train_many` adds them to the figure's), not to a recording around this call."""
    runs: list[dict] = []
    token = _RECORDS.set(runs)
    try:
        out = train(model, config, **kwargs)
    finally:
        _RECORDS.reset(token)
    return out, runs


@contextlib.contextmanager
def spreading(spread) -> Iterator[None]:
    """Inside the block, :func:`train_many` hands its runs to ``spread(calls) -> [train_recorded(*call), ...]``
    (e.g. one task per run on a Dask cluster) instead of training them here."""
    token = _SPREAD.set(spread)
    try:
        yield
    finally:
        _SPREAD.reset(token)


def note(trajectory) -> None:
    """Record the run behind ``trajectory`` (a trainer's result, fresh or reused from a memo) for the figure being
    built: its model, device, dtype and the trainer's configuration (the trajectory's own attributes)."""
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
    the runs behind the value again, so a figure built from memoised runs states them as a fresh build does."""
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
