"""``Trajectory``: the one result type of every simulator and trainer.

An ``xarray.Dataset`` with dimensions ``("trajectory", "time")``, coordinates ``time`` (float) and ``step`` (int,
along ``time``), one variable per state component and per derived quantity, and provenance attributes (``model``,
``spec_json``, ``config_json``, ``seed``, ``source``, ``time_unit``, ``git_rev``, ``versions_json``,
``created_utc``). Saved as netCDF (h5netcdf engine) atomically; never pickled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
import errno
import os
import sys
import pathlib
import tempfile

import numpy as np
import pandas as pd
import xarray as xr

from dynamics.provenance import provenance_attrs, sanitize_attrs
from dynamics.validation import ArgumentTypeError, Instance, callable_check, path_check, validate_module

__all__ = ["Trajectory", "atomic_write", "save_dataset"]


class Trajectory(xr.Dataset):
    """A batch of trajectories on a common time grid (an ``xarray.Dataset`` subclass).

    Build one with :meth:`from_arrays`; save with :meth:`save`; read with :meth:`load`. Overlaying two sources
    (closed form and torch) is ``xarray.align`` on the shared ``time``/``step`` coordinates.
    """

    __slots__ = ()

    def __init__(
        self, data_vars: Mapping | None = None, coords: Mapping | None = None, attrs: Mapping | None = None
    ) -> None:
        """As ``xarray.Dataset(data_vars, coords, attrs)``; each argument given must be a mapping (checked here, so
        that a wrong type is an error naming it, not one raised deep inside xarray).
        """
        super().__init__(data_vars, coords, attrs)

    @classmethod
    def from_arrays(
        cls, Y, *, names, time, step=None, variables=None, attrs=None, trajectory=None, per_trajectory=None
    ) -> Trajectory:
        """Build a Trajectory from saved states.

        Parameters
        ----------
        Y : (n_traj, n_time, n_state) array
            Saved states (a 2-D array is one trajectory).
        names : sequence of str, length n_state, or one str
            Variable name of each state component; a single string stores the whole state as ONE variable of
            dims (trajectory, time, <name>_component) -- the fast layout for states of thousands of components.
        time : (n_time,) array
            Time of each save point in the model's time unit.
        step : (n_time,) int array, optional
            Step index of each save point (defaults to ``arange(n_time)`` only if not given by the caller's unit).
        variables : dict name -> (n_traj, n_time) array, optional
            Derived quantities to store beside the state.
        attrs : dict, optional
            Provenance; ``spec``/``config`` entries are stored as JSON (see ``provenance_attrs``).
        trajectory : (n_traj,) array, optional
            Coordinate labels of the batch axis (e.g. seeds); default ``arange(n_traj)``.
        per_trajectory : dict name -> (n_traj,) array, optional
            Variables over the ``trajectory`` dimension only (diagnostics, stop steps); built with the Dataset,
            which is much cheaper than adding them afterwards.
        """
        Y = np.asarray(Y, dtype=np.float64)
        if Y.ndim == 2:
            Y = Y[None]
        if Y.ndim != 3:
            raise ValueError(f"Y must have shape (n_traj, n_time, n_state); got {Y.shape}")
        single = isinstance(names, str)
        names = [names] if single else list(names)
        if not single and len(names) != Y.shape[2]:
            raise ValueError(f"names has {len(names)} entries but the state has {Y.shape[2]} components")
        if len(set(names)) != len(names):
            raise ValueError(f"names must be distinct; got {names}")
        time = np.asarray(time, dtype=np.float64)
        if time.shape != (Y.shape[1],):
            raise ValueError(f"time must have shape ({Y.shape[1]},); got {time.shape}")
        step = np.arange(Y.shape[1], dtype=np.int64) if step is None else np.asarray(step, dtype=np.int64)
        if step.shape != time.shape:
            raise ValueError(f"step must have shape {time.shape}; got {step.shape}")
        dims = ("trajectory", "time")
        if single:
            data_vars = {names[0]: (dims + (f"{names[0]}_component",), Y)}
        else:
            data_vars = {name: (dims, Y[:, :, j]) for j, name in enumerate(names)}
        for name, value in (variables or {}).items():
            value = np.asarray(value)
            if value.shape[:2] != Y.shape[:2]:
                raise ValueError(f"derived variable {name!r} must have shape {Y.shape[:2]}+...; got {value.shape}")
            if name in data_vars:
                raise ValueError(f"derived variable {name!r} clashes with a state name")
            extra = tuple(f"{name}_dim{i}" for i in range(value.ndim - 2))
            data_vars[name] = (dims + extra, value)
        for name, value in (per_trajectory or {}).items():
            if name in data_vars:
                raise ValueError(
                    f"the per-trajectory variable {name!r} clashes with a state or derived name; rename that variable"
                )
            value = np.asarray(value)
            if value.shape != Y.shape[:1]:
                raise ValueError(f"per-trajectory variable {name!r} must have shape {Y.shape[:1]}; got {value.shape}")
            data_vars[name] = (("trajectory",), value)
        coords = {
            "time": ("time", time),
            "step": ("time", step),
            "trajectory": ("trajectory", np.arange(Y.shape[0]) if trajectory is None else np.asarray(trajectory)),
        }
        attrs = provenance_attrs(attrs)
        attrs["state_names"] = ",".join(names)
        attrs["state_layout"] = "array" if single else "components"
        return _direct_dataset(cls, data_vars, coords, attrs)

    @property
    def state_names(self) -> list[str]:
        """Names of the state components, in state order."""
        return self.attrs.get("state_names", "").split(",") if self.attrs.get("state_names") else []

    def states(self) -> np.ndarray:
        """The saved states as an array (n_traj, n_time, n_state), in state order."""
        if self.attrs.get("state_layout") == "array":
            values = self[self.state_names[0]].transpose("trajectory", "time", ...).values
            return values.reshape(values.shape[:2] + (-1,))  # array state with named dims, flattened in C order
        variables = self.variables  # Variable objects: ~100x cheaper than building a DataArray per name
        return np.stack([variables[name].values for name in self.state_names], axis=-1)

    def save(self, path) -> pathlib.Path:
        """Write netCDF atomically (temporary file in the same folder, then ``os.replace``); return the path."""
        return save_dataset(self, path)

    @classmethod
    def load(cls, path) -> Trajectory:
        """Read a Trajectory written by :meth:`save` (fully into memory; the file is closed on return)."""
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            ds = ds.load()
        return cls(ds.data_vars, coords=ds.coords, attrs=ds.attrs)


def _public_dataset(cls, data_vars: dict, coords: dict, attrs: dict):
    """The Dataset through xarray's public constructor (its merge and alignment pass)."""
    return cls(data_vars, coords=coords, attrs=attrs)


def _direct_dataset(cls, data_vars: dict, coords: dict, attrs: dict):
    """The Dataset of ``data_vars`` (name -> (dims, array)) and ``coords`` (name -> (dim, 1-D array)), built
    without xarray's merge and alignment pass (which costs ~25 us per variable and is not needed: every array
    here was shaped by :meth:`Trajectory.from_arrays`, and no array is copied). Uses ``Dataset._construct_direct``,
    the constructor xarray's own methods use, which is not public API: ``tests/dynamics/test_engine_driver.py``
    checks that
    the result is identical to :func:`_public_dataset`'s, and any failure of the direct path falls back to it.
    """
    try:
        variables, dims = {}, {}
        indexes = {}
        for name, (dim, values) in coords.items():
            if name == dim:
                index = xr.indexes.PandasIndex(pd.Index(values, name=dim), dim, fastpath=True)
                variables.update(index.create_variables())
                indexes[name] = index
            else:
                variables[name] = xr.Variable((dim,), values, fastpath=True)
        for name, (vdims, values) in data_vars.items():
            variables[name] = xr.Variable(vdims, values, fastpath=True)
        for var in variables.values():
            for d, size in zip(var.dims, var.shape):
                if dims.setdefault(d, size) != size:
                    raise ValueError(f"dimension {d!r} has sizes {dims[d]} and {size}")
        return cls._construct_direct(variables, set(coords), dims, attrs, indexes)
    except Exception:  # a changed private constructor: the public one (slower, same result)
        return _public_dataset(cls, data_vars, coords, attrs)


def _current_umask() -> int:
    """The process's file-mode creation mask (read from /proc on Linux, else set and restored)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Annotated[Any, path_check], write: Annotated[Any, _check_writer]) -> pathlib.Path:
    """Write a file atomically: ``write(tmp_path)`` fills a temporary file beside ``path``, then ``os.replace``
    moves it into place, so a reader (or a run killed mid-write) never sees a partial file. The folder is created
    if needed; the temporary file is removed on any failure. The file gets the mode a plain ``open(path, "w")`` would
    give (0666 less the user's umask), not the private 0600 of the temporary file. The toolkit's one writer of
    results and checkpoints.

    ``write`` may also be a ``bytes``-like object: the bytes are then written with plain OS calls
    (:func:`write_bytes`), which is how the binary formats are written (serialised in memory first, so that a full
    disk is an ``OSError`` here and never reaches the HDF5 or torch writers, which can crash on one).

    Raises
    ------
    OSError
        Disk full, permission denied or any other OS error, of the same class and ``errno``, with a message naming
        ``path``; nothing is left behind and a previous file at ``path`` is unchanged.
    """
    path = pathlib.Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        if isinstance(write, bytes | bytearray | memoryview):
            write_bytes(tmp, write)
        else:
            write(tmp)
        os.chmod(tmp, 0o666 & ~_current_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(exc, OSError) and not getattr(exc, "names_file", False):
            raise _write_error(path, exc) from exc
        raise
    return path


def _write_error(path: pathlib.Path, exc: OSError) -> OSError:
    """An ``OSError`` of ``exc``'s errno (so of its subclass: ``PermissionError`` for EACCES, ...) whose message names
    ``path`` and says that nothing was written; marked ``names_file`` so that an enclosing writer keeps it.
    """
    reason = exc.strerror or str(exc) or type(exc).__name__
    hint = {
        errno.ENOSPC: " (the disk is full: free space or choose another folder)",
        errno.EDQUOT: " (disk quota exceeded)",
        errno.EACCES: " (permission denied: choose a folder you can write)",
        errno.EPERM: " (operation not permitted: choose a folder you can write)",
        errno.EROFS: " (read-only file system: choose another folder)",
    }.get(exc.errno, "")
    err = OSError(
        exc.errno, f"cannot write {path}: {reason}{hint}; nothing was written there and any previous file is unchanged"
    )
    err.names_file = True
    return err


def write_bytes(path: Annotated[Any, path_check], data: Annotated[Any, _check_bytes]) -> None:
    """Write ``data`` (bytes-like) to the file ``path`` (created mode 0600 if missing, else truncated) with plain OS
    calls and flush it to disk
    (``fsync``), so that a short write or a full disk is an ``OSError`` at this point, never a truncated file.
    """
    view = memoryview(data).cast("B")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])
        os.fsync(fd)
    finally:
        os.close(fd)


def save_dataset(ds: Annotated[xr.Dataset, Instance(xr.Dataset)], path: Annotated[Any, path_check]) -> pathlib.Path:
    """Write any Dataset to netCDF (h5netcdf engine) atomically, with netCDF-safe attributes.

    The file is serialised in memory and then written with :func:`atomic_write`, so a full disk or a folder that
    cannot be written raises an ``OSError`` naming ``path`` (never a crash inside the HDF5 library).
    """
    ds = ds.copy()
    ds.attrs = sanitize_attrs(dict(ds.attrs))
    return atomic_write(path, _netcdf_bytes(ds))


def _netcdf_bytes(ds: xr.Dataset) -> bytes:
    """The netCDF file of ``ds`` as bytes. Inside a Dask worker xarray would guard the write with a cluster-wide lock
    named after the in-memory buffer, which the cluster cannot know ("Semaphore or Lock not known"); the data are in
    memory, so the write runs under dask's synchronous scheduler and a local lock instead.
    """
    if "dask" not in sys.modules:  # no Dask in this process: no cluster context to step out of
        return ds.to_netcdf(engine="h5netcdf")
    import dask

    with dask.config.set(scheduler="synchronous"):
        return ds.to_netcdf(engine="h5netcdf")


def _check_writer(name, value) -> None:
    if not isinstance(value, bytes | bytearray | memoryview):
        callable_check(name, value)


def _check_bytes(name, value) -> None:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ArgumentTypeError(f"{name} must be bytes, a bytearray or a memoryview; got {type(value).__name__}")


# argument checks of the public entry points (dynamics.validation), from the annotations
validate_module(globals())
