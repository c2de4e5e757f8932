"""Provenance of results: JSON-safe conversion, git revision, package versions, creation time."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import importlib.metadata
import json
import math
import pathlib
import platform
import subprocess
import sys

import numpy as np

__all__ = [
    "to_jsonable",
    "to_json",
    "git_revision",
    "package_versions",
    "utc_now",
    "provenance_attrs",
    "sanitize_attrs",
]

_PACKAGES = ("numpy", "scipy", "numba", "xarray", "h5netcdf", "sympy", "matplotlib")


def to_jsonable(obj):
    """Convert dataclasses, numpy scalars/arrays, tuples, sets and mappings to JSON-serialisable values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {"__class__": type(obj).__name__}
        for f in dataclasses.fields(obj):
            out[f.name] = to_jsonable(getattr(obj, f.name))
        return out
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, pathlib.PurePath):
        return str(obj)
    if callable(obj):
        return getattr(obj, "__qualname__", repr(obj))
    return repr(obj)


def to_json(obj) -> str:
    """Deterministic JSON text (sorted keys) of ``to_jsonable(obj)``."""
    return json.dumps(to_jsonable(obj), sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=1)
def git_revision() -> str:
    """``git describe --always --dirty`` of the source tree this package runs from, or ``"unknown"``."""
    here = pathlib.Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    rev = out.stdout.strip()
    return rev if out.returncode == 0 and rev else "unknown"


def package_versions() -> dict[str, str]:
    """Versions of python, attndyn and the numerical dependencies (torch only if already imported)."""
    versions = dict(_static_versions())
    torch = sys.modules.get("torch")
    if torch is not None:
        versions["torch"] = getattr(torch, "__version__", "unknown")
    return versions


@functools.lru_cache(maxsize=1)
def _static_versions() -> tuple[tuple[str, str], ...]:
    # reading package metadata costs ~0.1 s, so once per process
    versions = [("python", platform.python_version())]
    for name in ("attndyn",) + _PACKAGES:
        try:
            versions.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return tuple(versions)


def utc_now() -> str:
    """The current UTC time, ISO 8601, seconds precision."""
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


def provenance_attrs(attrs: dict | None = None) -> dict:
    """netCDF-safe attributes: user ``attrs`` (``spec`` and ``config`` become ``spec_json``/``config_json``) plus
    ``git_rev``, ``versions_json`` and ``created_utc``.

    netCDF rejects nested containers and booleans, so anything that is not a str/int/float becomes JSON text.
    """
    out: dict = {}
    for key, value in (attrs or {}).items():
        if key in ("spec", "config"):
            out[f"{key}_json"] = to_json(value)
        else:
            out[key] = value
    out.setdefault("git_rev", git_revision())
    out.setdefault("versions_json", json.dumps(package_versions(), sort_keys=True))
    out.setdefault("created_utc", utc_now())
    return sanitize_attrs(out)


def sanitize_attrs(attrs: dict) -> dict:
    """Make attribute values netCDF-safe: keep str/int/float, encode everything else as JSON text."""
    clean = {}
    for key, value in attrs.items():
        if isinstance(value, bool | np.bool_):
            clean[key] = int(value)
        elif isinstance(value, str | int | float | np.integer | np.floating):
            clean[key] = value.item() if isinstance(value, np.generic) else value
        else:
            clean[key] = to_json(value)
    return clean
