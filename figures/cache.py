"""Content-addressed, checksummed on-disk cache of figure data (no pickle).

Layout, under a cache root (``results/`` by default, git-ignored)::

    results/<figure name>/<key>.nc     the Dataset, netCDF (written by dynamics.trajectory.save_dataset)
    results/<figure name>/<key>.json   sidecar: sha256 of the .nc file, the full configuration, runtime, time

``key = sha256(RunConfig.to_json())[:12]``: the configuration JSON holds the preset, seed, resolved device, code
version (package version + git revision) and the figure's own parameters, so a change to any of them is a new key
and parameters never appear in file names. The git part is ``git describe --always --dirty``: while
the working tree has uncommitted changes, edits do not change the key, so use ``--recompute`` (or ``recompute=True``)
after editing a figure's code.

Both files are written atomically (temporary file in the same folder, then ``os.replace``), the ``.nc`` first and the
sidecar last, so an interrupted write leaves at worst an ``.nc`` without sidecar. :func:`load` trusts nothing it
cannot verify: a missing or unreadable sidecar, a sidecar for another configuration, a checksum mismatch or a file
that does not open is reported as ``"corrupt"`` (with a logged warning) and the caller recomputes; a corrupted file
is never silently used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import xarray as xr

from dynamics.provenance import utc_now
from dynamics.trajectory import atomic_write, save_dataset
from dynamics.validation import validate_module
from figures.presets import RunConfig

__all__ = [
    "KEY_LENGTH",
    "DEFAULT_CACHE_DIR",
    "cache_key",
    "entry_paths",
    "file_sha256",
    "CacheLookup",
    "load",
    "load_entry",
    "previous_runtime",
    "store",
    "store_entry",
]

logger = logging.getLogger(__name__)

KEY_LENGTH = 12
"""Hex digits of the configuration hash kept in file names."""

DEFAULT_CACHE_DIR = Path("results")
"""Default cache root, relative to the working directory."""


def cache_key(cfg: RunConfig) -> str:
    """First :data:`KEY_LENGTH` hex digits of the sha256 of the configuration's canonical JSON."""
    return hashlib.sha256(cfg.to_json().encode("utf-8")).hexdigest()[:KEY_LENGTH]


def entry_paths(root: str | os.PathLike, cfg: RunConfig) -> tuple[Path, Path]:
    """``(data_path, sidecar_path)`` of the cache entry for ``cfg`` under ``root``."""
    folder = Path(root) / cfg.figure
    key = cache_key(cfg)
    return folder / f"{key}.nc", folder / f"{key}.json"


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True, kw_only=True)
class CacheLookup:
    """Result of :func:`load`.

    Attributes
    ----------
    status : str
        ``"hit"`` (verified and loaded), ``"miss"`` (no entry) or ``"corrupt"`` (entry present but unusable).
    dataset : xarray.Dataset or None
        The data, fully loaded into memory, on a hit.
    runtime_s : float or None
        Wall time of the computation that produced the entry (from the sidecar), on a hit.
    created_utc : str or None
        When the entry was computed, on a hit.
    reason : str
        Why an entry was judged corrupt (empty otherwise).
    """

    status: str
    dataset: xr.Dataset | None = None
    runtime_s: float | None = None
    created_utc: str | None = None
    reason: str = ""


def load(root: str | os.PathLike, cfg: RunConfig) -> CacheLookup:
    """Look up and verify the cache entry of ``cfg``; see the module docstring for what counts as corrupt."""
    data_path, sidecar_path = entry_paths(root, cfg)
    return load_entry(data_path, sidecar_path, cfg.to_dict(), label=cfg.figure)


def load_entry(
    data_path: str | os.PathLike, sidecar_path: str | os.PathLike, config: dict, *, label: str = ""
) -> CacheLookup:
    """Look up and verify the entry ``(data_path, sidecar_path)`` written by :func:`store_entry` for ``config`` (the
    JSON-able configuration its sidecar must hold); ``label`` names the entry in the warning of a corrupt one. The
    engine under :func:`load` and the run cache of :mod:`figures.experiments`.
    """
    data_path, sidecar_path = Path(data_path), Path(sidecar_path)
    if not data_path.exists() and not sidecar_path.exists():
        return CacheLookup(status="miss")
    reason = _verify(data_path, sidecar_path, config)
    if not reason:
        try:
            dataset = xr.load_dataset(data_path)  # engine detected from the file (whatever save_dataset wrote)
        except Exception as exc:  # noqa: BLE001 - any failure to read the file means it is unusable
            reason = f"cannot be read ({type(exc).__name__}: {exc})"
    if reason:
        logger.warning("cache entry %s for %s is corrupt: %s; recomputing", data_path, label, reason)
        return CacheLookup(status="corrupt", reason=reason)
    sidecar = json.loads(sidecar_path.read_text(encoding="utf-8"))
    return CacheLookup(
        status="hit", dataset=dataset, runtime_s=float(sidecar["runtime_s"]), created_utc=str(sidecar["created_utc"])
    )


def _verify(data_path: Path, sidecar_path: Path, config: dict) -> str:
    """Return an empty string if the entry is intact, else the reason it is not."""
    if not data_path.exists():
        return "data file missing"
    if not data_path.is_file():
        return "data path is not a regular file"
    try:
        sidecar = json.loads(sidecar_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "checksum sidecar missing (interrupted write?)"
    except (OSError, ValueError) as exc:
        return f"checksum sidecar unreadable ({exc})"
    problem = _sidecar_problem(sidecar)
    if problem:
        return f"checksum sidecar invalid: {problem}"
    if sidecar["config"] != config:
        return "sidecar describes another configuration"
    try:
        actual = file_sha256(data_path)
    except OSError as exc:
        return f"data file unreadable ({exc})"
    if actual != sidecar["sha256"]:
        return f"sha256 mismatch (file {actual[:12]}..., sidecar {sidecar['sha256'][:12]}...)"
    return ""


def _sidecar_problem(sidecar) -> str:
    """Why a parsed sidecar does not have the fields and types :func:`store` writes (empty if it does)."""
    if not isinstance(sidecar, dict):
        return f"not a JSON object ({type(sidecar).__name__})"
    types_ = {"sha256": str, "config": dict, "created_utc": str}
    for key, kind in types_.items():
        if not isinstance(sidecar.get(key), kind):
            return f"field {key!r} missing or not a {kind.__name__}"
    runtime = sidecar.get("runtime_s")
    if isinstance(runtime, bool) or not isinstance(runtime, int | float) or not math.isfinite(runtime) or runtime < 0:
        return f"field 'runtime_s' must be a finite number >= 0; got {runtime!r}"
    return ""


def previous_runtime(root: str | os.PathLike, figure: str, preset: str) -> float | None:
    """The runtime of the most recent cache entry of ``figure`` at ``preset`` under ``root`` (any code version or
    seed), from the sidecars; ``None`` if there is none. Used to schedule long figures first; never trusted for data.
    """
    best: tuple[str, float] | None = None
    folder = Path(root) / figure
    if not folder.is_dir():
        return None
    for path in folder.glob("*.json"):
        try:
            side = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if _sidecar_problem(side) or side["config"].get("preset") != preset:
            continue
        if best is None or side["created_utc"] > best[0]:
            best = (side["created_utc"], float(side["runtime_s"]))
    return None if best is None else best[1]


def store(root: str | os.PathLike, cfg: RunConfig, dataset: xr.Dataset, *, runtime_s: float) -> Path:
    """Write ``dataset`` as the cache entry of ``cfg`` (atomically, data then sidecar); return the data path.

    A full disk, a folder that cannot be written or any other OS error raises ``OSError`` naming the file, with no
    temporary file and no entry left behind (a data file whose sidecar could not be written is removed).

    The netCDF file is written by :func:`dynamics.trajectory.save_dataset` (the engine's one writer), so figure data
    and trajectories share their on-disk format.
    """
    data_path, sidecar_path = entry_paths(root, cfg)
    return store_entry(data_path, sidecar_path, cfg.to_dict(), dataset, runtime_s=runtime_s)


def store_entry(
    data_path: str | os.PathLike,
    sidecar_path: str | os.PathLike,
    config: dict,
    dataset: xr.Dataset,
    *,
    runtime_s: float,
) -> Path:
    """Write ``dataset`` at ``data_path`` and its checksum sidecar (``config``, the sha256 of the file, runtime and
    time) at ``sidecar_path``, atomically, data then sidecar, as :func:`store` does; return the data path.
    """
    data_path, sidecar_path = Path(data_path), Path(sidecar_path)
    for path in (data_path, sidecar_path):
        _clear_non_file(path)
    save_dataset(dataset, data_path)
    sidecar = {
        "sha256": file_sha256(data_path),
        "config": config,
        "runtime_s": float(runtime_s),
        "created_utc": utc_now(),
        "file": data_path.name,
    }
    try:
        _write_text_atomic(sidecar_path, json.dumps(sidecar, sort_keys=True, indent=1) + "\n")
    except BaseException:  # no entry without its sidecar: the data file alone would only be recomputed later
        data_path.unlink(missing_ok=True)
        raise
    return data_path


def _clear_non_file(path: Path) -> None:
    """Remove whatever occupies an entry path without being a regular file (e.g. a folder), so the atomic rename of
    the new entry can succeed; the cache owns these paths.
    """
    if path.exists() and not path.is_file():
        logger.warning("cache path %s is not a regular file; removing it", path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _write_text_atomic(path: Path, text: str) -> None:
    atomic_write(path, text.encode("utf-8"))


validate_module(globals())  # argument checks from the annotations (dynamics.validation)
