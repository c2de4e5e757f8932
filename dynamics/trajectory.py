"""``Trajectory``: the one result type of every simulator and trainer.

An ``xarray.Dataset`` with dimensions ``("trajectory", "time")``, coordinates ``time`` (float) and ``step`` (int,
along ``time``), one variable per state component and per derived quantity, and provenance attributes (``model``,
``spec_json``, ``config_json``, ``seed``, ``source``, ``time_unit``, ``git_rev``, ``versions_json``,
``created_utc``). Saved as netCDF (h5netcdf engine) atomically; never pickled.
"""

from __future__ import annotations

import os
import pathlib
import tempfile

import numpy as np
import pandas as pd
import xarray as xr

from dynamics.provenance import provenance_attrs, sanitize_attrs
from dynamics.validation import Instance, callable_check, validate_module

__all__ = ["Trajectory", "atomic_write", "save_dataset"]


class Trajectory(xr.Dataset):
    """A batch of trajectories on a common time grid (an ``xarray.Dataset`` subclass).

    Build one with :meth:`from_arrays`; save with :meth:`save`; read with :meth:`load`. Overlaying two sources
    (closed form and torch) is ``xarray.align`` on the shared ``time``/``step`` coordinates.
    """

    __slots__ = ()

    @classmethod
    def from_arrays(cls, Y, *, names, time, step=None, variables=None, attrs=None,
                    trajectory=None, per_trajectory=None) -> Trajectory:
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
                raise ValueError(f"the per-trajectory variable {name!r} clashes with a state or derived name; "
                                 "rename that variable")
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
    the constructor xarray's own methods use, which is not public API: ``tests/test_engine_driver.py`` checks that
    the result is identical to :func:`_public_dataset`'s, and any failure of the direct path falls back to it."""
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


def atomic_write(path, write) -> pathlib.Path:
    """Write a file atomically: ``write(tmp_path)`` fills a temporary file beside ``path``, then ``os.replace``
    moves it into place, so a reader (or a run killed mid-write) never sees a partial file. The folder is created
    if needed; the temporary file is removed on failure. The file gets the mode a plain ``open(path, "w")`` would
    give (0666 less the user's umask), not the private 0600 of the temporary file. The toolkit's one writer of
    results and checkpoints."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_current_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def save_dataset(ds: xr.Dataset, path) -> pathlib.Path:
    """Write any Dataset to netCDF (h5netcdf engine) atomically, with netCDF-safe attributes."""
    ds = ds.copy()
    ds.attrs = sanitize_attrs(dict(ds.attrs))
    return atomic_write(path, lambda tmp: ds.to_netcdf(tmp, engine="h5netcdf"))


# argument checks of the public entry points (dynamics.validation)
validate_module(globals(), path=Instance(str, os.PathLike), write=callable_check, ds=Instance(xr.Dataset))
