"""Checkpoints of torch runs: atomic writes, safe loads, configuration checks (DESIGN.md; issue 7).

A checkpoint is a plain ``dict`` of tensors, numbers, strings, lists and dicts written with ``torch.save`` and read
with ``torch.load(..., weights_only=True)`` (no pickle of arbitrary objects). It is written to a temporary file in
the same folder and moved into place with ``os.replace``, so a run killed while writing leaves the previous
checkpoint intact. What a trainer checkpoint holds is documented in :mod:`empirical.train`.

Resuming with another configuration is refused: :func:`check_compatible` compares the flattened JSON identity of the
checkpoint with the current run's and names the first differing field (``"config.lr.value"``, ``"model.d"``,
``"dtype"``, ...).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping

import torch

from dynamics.trajectory import atomic_write

__all__ = ["check_compatible", "flatten_json", "load_checkpoint", "save_checkpoint"]


def save_checkpoint(path, state: Mapping) -> pathlib.Path:
    """Write ``state`` with ``torch.save`` atomically (temporary file beside ``path``, then ``os.replace``).

    Parameters
    ----------
    path : str or path-like
        Destination file; its folder is created if needed.
    state : mapping
        Tensors, numbers, strings, ``None`` and (nested) lists/tuples/dicts of them: the types that
        ``torch.load(weights_only=True)`` accepts.
    """
    state = dict(state)
    return atomic_write(path, lambda tmp: torch.save(state, tmp))


def load_checkpoint(path, *, map_location=None) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint` with ``torch.load(weights_only=True)``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    return torch.load(path, map_location=map_location, weights_only=True)


def flatten_json(obj, prefix: str = "") -> dict[str, object]:
    """Flatten nested JSON-like dicts/lists into ``{"a.b.0": leaf}`` (the keys name fields in error messages)."""
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
        out.update(flatten_json(value, name))
    if not out and prefix:
        out[prefix] = obj
    return out


def check_compatible(found: Mapping, expected: Mapping, *, path="checkpoint") -> None:
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
            raise ValueError(f"{path} was written by another configuration: field {key!r} differs "
                             f"(checkpoint: {va!r}, this run: {vb!r}); refusing to resume")
