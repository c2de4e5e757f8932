"""Checkpoints of torch runs: atomic writes, safe loads, configuration checks.

A checkpoint is a plain ``dict`` of tensors, numbers, strings, lists and dicts written with ``torch.save`` and read
with ``torch.load(..., weights_only=True)`` (no pickle of arbitrary objects). It is written to a temporary file in
the same folder and moved into place with ``os.replace``, so a run killed while writing leaves the previous
checkpoint intact. What a trainer checkpoint holds is documented in :mod:`empirical.train`.

Integrity: every checkpoint carries the SHA-256 of its own contents (key :data:`CHECKSUM_KEY`, a digest of the
canonical byte stream of every field: names, dtypes, shapes and raw bytes of tensors, values of numbers and strings;
:func:`state_digest`). :func:`load_checkpoint` recomputes it and refuses a file whose digest differs, which a flipped
byte inside a tensor record produces, and names the file in every error (a file that torch cannot read at all, a
truncated zip, a missing checksum). Before a new checkpoint replaces the old one, the old one is kept beside it as
``<stem>.prev<suffix>`` (:func:`previous_path`), so a damaged latest checkpoint leaves the previous good one to resume
from (``load_checkpoint(path, fallback=True)``). Temporary files that a killed write left behind beside ``path`` are
removed at the next write (:func:`remove_stale_temporaries`).

Resuming with another configuration is refused: :func:`check_compatible` compares the flattened JSON identity of the
checkpoint with the current run's and names the first differing field (``"config.lr.value"``, ``"model.d"``,
``"dtype"``, ...).
"""

from __future__ import annotations

from typing import Annotated, Any
import hashlib
import io
import json
import logging
import numbers
import os
import pathlib
from collections.abc import Mapping

import torch

from dynamics.trajectory import atomic_write, write_bytes
from dynamics.validation import ArgumentTypeError, validate_module

__all__ = [
    "CHECKSUM_KEY",
    "CheckpointError",
    "check_compatible",
    "flatten_json",
    "load_checkpoint",
    "previous_path",
    "remove_stale_temporaries",
    "save_checkpoint",
    "state_digest",
]

log = logging.getLogger(__name__)

#: The key under which a checkpoint stores the SHA-256 of the rest of its contents.
CHECKSUM_KEY = "__sha256__"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be trusted: unreadable, truncated, without checksum, or with a wrong one.

    Attributes
    ----------
    path : pathlib.Path
        The file concerned (always named in the message, with what to do).
    """

    def __init__(self, message: str, *, path):
        super().__init__(message)
        self.path = pathlib.Path(path)


def previous_path(path: str | os.PathLike) -> pathlib.Path:
    """Where :func:`save_checkpoint` keeps the checkpoint it replaces: ``ck.pt`` -> ``ck.prev.pt``."""
    path = pathlib.Path(path)
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def remove_stale_temporaries(path: str | os.PathLike) -> list[pathlib.Path]:
    """Delete the temporary files that an interrupted atomic write of ``path`` left beside it.

    :func:`dynamics.atomic_write` names them ``.<name>.<random>.tmp``; one process writes a given checkpoint, so
    any such file found before a write is the remains of a killed one. Returns the removed paths.
    """
    path = pathlib.Path(path)
    removed = []
    if path.parent.is_dir():
        for tmp in path.parent.glob(f".{path.name}.*.tmp"):
            try:
                tmp.unlink()
                removed.append(tmp)
            except FileNotFoundError:  # removed by someone else meanwhile
                pass
    if removed:
        log.info("removed %d stale temporary file(s) of %s", len(removed), path)
    return removed


def _feed(digest, obj) -> None:
    """Feed ``obj`` to ``digest`` in a canonical, type-tagged byte stream (see :func:`state_digest`)."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous()
        digest.update(f"T{t.dtype}{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, Mapping):
        digest.update(f"D{len(obj)}|".encode())
        for key in sorted(obj, key=lambda k: (type(k).__name__, repr(k))):
            _feed(digest, key)
            _feed(digest, obj[key])
    elif isinstance(obj, list | tuple):
        digest.update(f"{'L' if isinstance(obj, list) else 'U'}{len(obj)}|".encode())
        for item in obj:
            _feed(digest, item)
    elif obj is None or isinstance(obj, bool | numbers.Number | str | bytes):
        digest.update(f"S{type(obj).__name__}:{obj!r}|".encode())
    else:
        raise TypeError(f"state holds a {type(obj).__name__}, which a weights-only checkpoint cannot store")


def state_digest(state: Mapping) -> str:
    """Hex SHA-256 of a checkpoint's contents, :data:`CHECKSUM_KEY` excluded.

    The digest covers every key and value recursively: tensors by dtype, shape and raw bytes (on the CPU), numbers
    and strings by type and ``repr``, containers by kind, length and (for mappings) sorted keys, so any change of a
    stored value, a flipped byte of a tensor included, changes it.
    """
    digest = hashlib.sha256()
    _feed(digest, {k: v for k, v in state.items() if k != CHECKSUM_KEY})
    return digest.hexdigest()


def save_checkpoint(path: str | os.PathLike, state: Mapping) -> pathlib.Path:
    """Write ``state`` with ``torch.save`` atomically (temporary file beside ``path``, then ``os.replace``).

    Parameters
    ----------
    path : str or path-like
        Destination file; its folder is created if needed.
    state : mapping
        Tensors, numbers, strings, ``None`` and (nested) lists/tuples/dicts of them: the types that
        ``torch.load(weights_only=True)`` accepts.

    Raises
    ------
    OSError
        The disk is full, the folder cannot be written, or another OS error: the message names ``path``, the
        temporary file is removed and the checkpoint already at ``path`` (if any) is kept.
    """
    state = {k: v for k, v in dict(state).items() if k != CHECKSUM_KEY}
    state[CHECKSUM_KEY] = state_digest(state)
    path = pathlib.Path(path)
    remove_stale_temporaries(path)

    def write(tmp):
        buffer = io.BytesIO()  # serialised in memory: a full disk is an OSError of write_bytes, not a torch error
        torch.save(state, buffer)
        write_bytes(tmp, buffer.getbuffer())
        if path.exists():  # keep the checkpoint being replaced as the fallback (a kill here leaves it in place)
            path.replace(previous_path(path))

    return atomic_write(path, write)


def _load_verified(path: pathlib.Path, map_location) -> dict:
    if not path.exists():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint {path} is not a regular file (a directory?); remove it or pass another checkpoint_path",
            path=path,
        )
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises RuntimeError, EOFError, OSError, UnpicklingError, KeyError ... here
        raise CheckpointError(
            f"checkpoint {path} is damaged and cannot be read ({type(exc).__name__}: {exc}); "
            f"delete it to start afresh, or resume from {previous_path(path)} if it exists "
            "(load_checkpoint(..., fallback=True))",
            path=path,
        ) from exc
    if not isinstance(state, dict) or CHECKSUM_KEY not in state:
        raise CheckpointError(
            f"checkpoint {path} carries no {CHECKSUM_KEY!r} checksum (written by another program "
            "or an older attndyn); delete it to start afresh",
            path=path,
        )
    stored = state.pop(CHECKSUM_KEY)
    actual = state_digest(state)
    if stored != actual:
        raise CheckpointError(
            f"checkpoint {path} is damaged: its contents do not match their SHA-256 checksum "
            f"(stored {str(stored)[:12]}..., computed {actual[:12]}...); delete it to start afresh, "
            f"or resume from {previous_path(path)} if it exists "
            "(load_checkpoint(..., fallback=True))",
            path=path,
        )
    return state


def load_checkpoint(
    path: str | os.PathLike, *, map_location: Annotated[Any, _check_map_location] = None, fallback: bool = False
) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint` with ``torch.load(weights_only=True)`` and verify it.

    Parameters
    ----------
    path : str or path-like
    map_location : optional
        As in ``torch.load``.
    fallback : bool
        If the checkpoint at ``path`` is damaged, load the previous one (:func:`previous_path`) instead, with a
        warning; its own damage is still an error. A *missing* ``path`` whose previous checkpoint exists (a write
        killed between keeping the old file and moving the new one into place) always falls back to it: nothing is
        damaged there, the new file just never arrived.

    Returns
    -------
    dict
        The saved state, without :data:`CHECKSUM_KEY`.

    Raises
    ------
    FileNotFoundError
        If ``path`` (and, with ``fallback``, the previous checkpoint) does not exist.
    CheckpointError
        If the file is unreadable, has no checksum or a wrong one; the message names the file and what to do.
    """
    path = pathlib.Path(path)
    try:
        return _load_verified(path, map_location)
    except (FileNotFoundError, CheckpointError) as exc:
        prev = previous_path(path)
        missing = isinstance(exc, FileNotFoundError)
        if not prev.exists() or not (missing or fallback):
            raise
        log.warning("%s; using the previous checkpoint %s", exc, prev)
        return _load_verified(prev, map_location)


def flatten_json(obj: Mapping | list | tuple | str, prefix: str = "") -> dict[str, object]:
    """Flatten nested JSON-like dicts/lists into ``{"a.b.0": leaf}`` (the keys name fields in error messages)."""
    return _flatten(obj, prefix)


def _flatten(obj, prefix: str) -> dict[str, object]:
    """:func:`flatten_json` of any node (leaves included), unchecked: it recurses once per entry."""
    if isinstance(obj, str):
        try:
            parsed = json.loads(obj)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict | list):
            obj = parsed
    out: dict[str, object] = {}
    if isinstance(obj, Mapping):
        items = obj.items()
    elif isinstance(obj, list | tuple):
        items = ((str(i), v) for i, v in enumerate(obj))
    else:
        return {prefix: obj}
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        out.update(_flatten(value, name))
    if not out and prefix:
        out[prefix] = obj
    return out


def check_compatible(found: Mapping, expected: Mapping, *, path: str | os.PathLike = "checkpoint") -> None:
    """Refuse a checkpoint whose identity differs from the current run's, naming the first differing field.

    Parameters
    ----------
    found, expected : mapping
        Identities (e.g. ``{"config": config_json, "model": model_json, "dtype": "float64"}``); JSON strings
        inside are parsed and compared field by field.
    path : str or path-like
        Shown in the error message.

    Raises
    ------
    ValueError
        ``"<path> was written by another configuration: field 'config.lr.value' differs (checkpoint: 0.1, this run:
        0.2)"``.
    """
    a, b = flatten_json(dict(found)), flatten_json(dict(expected))
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, "<absent>"), b.get(key, "<absent>")
        if va != vb:
            raise ValueError(
                f"{path} was written by another configuration: field {key!r} differs "
                f"(checkpoint: {va!r}, this run: {vb!r}); refusing to resume"
            )


def _check_map_location(name: str, value) -> None:
    """``map_location`` of ``torch.load``: a device (or its name), a mapping of device names, or a callable."""
    if isinstance(value, torch.device) or callable(value) or isinstance(value, Mapping):
        return
    if isinstance(value, str):
        try:
            torch.device(value)
            return
        except RuntimeError:
            pass
    raise ArgumentTypeError(
        f"{name} must be a torch.device, a device name such as 'cpu' or 'cuda:0', a mapping of "
        f"device names or a callable (see torch.load); got {value!r}"
    )


validate_module(globals())  # argument checks from the annotations (dynamics.validation)
