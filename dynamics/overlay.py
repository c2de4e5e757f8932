"""``overlay``: run the reduced dynamics from a learned run's own starting point and align the two.

A torch run and the reduced dynamics describe the same order parameters (the probes of :mod:`empirical` read them
off the weights). To compare them trajectory by trajectory, the reduced dynamics must start where each seed of the
learned run started: :func:`overlay` reads the order parameters of every seed at step 0, hands them to the caller's
``theory_fn`` and returns the theory's trajectories restricted to exactly the save points of the learned run, so
that the two Datasets share their ``trajectory`` and ``time`` coordinates and subtract, plot or go to
:func:`dynamics.compare` as they are; the theory is marked as started from the seeds' own states, so
:func:`dynamics.compare` tests the per-seed differences (paired) by default. Nothing is interpolated and nothing is
clipped: a save point of the learned run that the theory did not produce is an error that names it.

When the claim holds only up to a monotone time reparametrisation, ``overlay(..., align=<variable>, grid=<theory
times>)`` runs the theory on ``grid`` instead and maps each seed onto it (:func:`dynamics.align.align`: isotonic,
never backwards, points beyond the theory's range marked, never pinned), reporting each seed's fitted time scale.
Without ``align``, :func:`overlay` warns (:class:`dynamics.align.TimeScaleWarning`) when the learned run visibly
moves at a constant multiple of the theory's speed from the start.

A theory that describes the run only from some point on (a stage that begins once a pattern has formed, say) is
started per seed: ``overlay(..., start=<one learned step per seed>)`` reads each seed's state at its own step and
runs the theory from there, its clock starting at 0 at that step. The theory then sits on the learned save points
shifted by the seed's start (``step - start``, or ``time - time(start)`` on the time axis) and is NaN before it:
point for point, learned step ``s`` faces the theory ``s - start`` steps after its start. ``overlay(...,
grid=<points>)`` without ``align`` instead returns the theory at the points of ``grid`` on its own clock (for a
horizon beyond the learned run, or for a matching of the caller's own), still started from the seeds' states.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
import xarray as xr

from dynamics.align import TimeScaleWarning
from dynamics.align import align as _align
from dynamics.compare import PAIRED_ATTR
from dynamics.validation import check_finite_array, validate_module

__all__ = ["overlay"]

_ON = ("step", "time")


def _as_run(name: str, ds) -> xr.Dataset:
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"{name} must be a Trajectory (an xarray.Dataset); got {type(ds).__name__}")
    for dim in ("trajectory", "time"):
        if dim not in ds.dims:
            raise ValueError(f"{name} must have dims ('trajectory', 'time'); got {tuple(ds.dims)}")
    if "step" not in ds.coords:
        raise ValueError(f"{name} must have a 'step' coordinate along 'time'")
    return ds


# time-scale warning: a variable whose learned/theory displacement ratio lies outside [1 / _RATIO, _RATIO] at both of
# the first two save points where the theory has moved by more than _MOVED of its range, the two ratios agreeing
# within _SAME (a constant multiple, not noise); multiples within _SAME of each other count as one common clock
_RATIO = 2.0
_MOVED = 0.02
_SAME = 0.5


def _time_scale_ratios(theory: xr.Dataset, learned: xr.Dataset, variables) -> dict[str, np.ndarray]:
    """Median over seeds of (learned - its start) / (theory - its start) at the first two save points where the
    theory has moved appreciably, per scalar variable that moves.
    """
    out = {}
    for v in variables:
        if set(learned[v].dims) != {"trajectory", "time"}:
            continue
        th = np.asarray(theory[v].transpose("trajectory", "time").values, dtype=np.float64)
        lr = np.asarray(learned[v].transpose("trajectory", "time").values, dtype=np.float64)
        d_th, d_lr = th - th[:, :1], lr - lr[:, :1]
        span = np.nanmax(np.abs(d_th)) if d_th.size else 0.0
        if not np.isfinite(span) or span == 0:
            continue
        moved = np.flatnonzero(np.nanmedian(np.abs(d_th), axis=0) > _MOVED * span)[:2]
        if moved.size < 2:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            out[v] = np.nanmedian(d_lr[:, moved] / d_th[:, moved], axis=0)
    return out


def _time_scale_message(ratios: dict[str, np.ndarray]) -> str | None:
    """The warning text when some variables move at a constant multiple (not 1) of the theory's speed, else None."""
    flagged = {}
    for v, (r1, r2) in ratios.items():
        if not (np.isfinite(r1) and np.isfinite(r2)) or r1 <= 0 or r2 <= 0:
            continue
        off = all(r > _RATIO or r < 1.0 / _RATIO for r in (r1, r2))
        if off and abs(np.log(r1 / r2)) < np.log(1.0 + _SAME):
            flagged[v] = float(np.sqrt(r1 * r2))
    if not flagged:
        return None
    listed = ", ".join(f"{v}: {r:.3g}" for v, r in flagged.items())
    values = np.array(list(flagged.values()))
    if len(flagged) == len(ratios) and values.max() / values.min() < 1.0 + _SAME:
        return (
            f"the learned run moves at about {float(np.median(values)):.3g} times the speed of the reduced "
            f"dynamics from the start ({listed}; median over seeds of the displacement ratio): the two clocks "
            "differ by a constant factor (e.g. an optimiser or parametrisation that rescales the reduced "
            "gradient). Compare up to reparametrisation with overlay(..., align=<variable>, grid=<theory times>)"
        )
    return (
        f"learned variables move at constant multiples of the reduced dynamics' speed from the start ({listed}; "
        "median over seeds of the displacement ratio): a rescaled (preconditioned) gradient, not only another "
        "clock. overlay(..., align=<variable>, grid=<theory times>) removes a common clock; the variables that "
        "still differ after aligning on one of them follow another path"
    )


def overlay(
    theory_fn: Callable[[np.ndarray, np.ndarray], xr.Dataset],
    learned,
    *,
    state_variables: Sequence[str],
    on: str = "step",
    start=None,
    align: str | None = None,
    grid=None,
) -> tuple[xr.Dataset, xr.Dataset]:
    """Start the reduced dynamics from each learned seed's step-0 (or ``start``) state and align it with the run.

    Parameters
    ----------
    theory_fn : callable ``(state0, at) -> Trajectory``
        Runs the reduced dynamics. ``state0`` is a float64 array ``(n_seeds, n_components)``: the learned order
        parameters at step 0, in the order of ``state_variables``, a scalar variable giving one column and an array
        variable (extra dims beyond ``trajectory``, ``time``, e.g. ``z`` of dims (query, token)) its values
        flattened in C order over its own dims as stored (so ``state0.reshape(n_seeds, Q, Lc)`` recovers that
        ``z`` when it is the only state variable); ``at`` holds the learned run's save
        points on the axis ``on`` (integer steps, or times). It must return a Trajectory with one trajectory per
        row of ``state0`` that contains every point of ``at`` (e.g. ``SaveAt(steps=at)`` for a map, or
        ``SaveAt(ts=at)`` for a flow).
    learned : Trajectory
        The learned run, seeds along ``trajectory``; its first save point must be step 0.
    state_variables : sequence of str
        The learned variables that form the reduced state, e.g. ``("kappa", "nu", "theta", "eta", "rho")``, or
        one array variable such as ``("z",)``.
    on : ``"step"`` or ``"time"``
        The coordinate on which the two runs are matched: update counts (exact), or the model's time axis
        (matched to a relative 1e-12, i.e. to the rounding of the time grids). Ignored with ``align``.
    start : int or array_like of int, optional
        The learned step (a save point of the run, on its ``step`` coordinate) from which each seed's theory
        starts: one per seed, or one for all. Default: step 0 for every seed. ``state0`` then holds each seed's
        state at its start, ``at`` the offsets (on ``on``) of the learned save points from the starts, and the
        theory returned on the learned points is NaN before each seed's start (module docstring). Not with
        ``align``.
    align : str, optional
        A scalar variable to align the runs on, up to a monotone time reparametrisation (module docstring and
        :func:`dynamics.align.align`). Needs ``grid``.
    grid : array_like, optional
        With ``align``: the theory times (increasing, from 0) at which ``theory_fn`` runs the theory (``at`` is
        then this grid) and on which the aligned learned run is returned; fine and long enough to cover the
        learned run. Without ``align``: points on the axis ``on`` (increasing, from 0, on the theory's own clock)
        handed to ``theory_fn`` as ``at``; the theory is returned at exactly these points, with its own
        coordinates, and the learned run as it is.

    Returns
    -------
    theory, learned : Trajectory, Trajectory
        Without ``align`` and ``grid``: the theory restricted to the learned save points, with the learned run's
        ``trajectory``, ``time`` and ``step`` coordinates (float variables, NaN before a seed's ``start``), and the
        learned run itself. With ``grid`` alone: the theory at the points of ``grid`` on its own clock, and the
        learned run itself. With ``align``: the theory on ``grid`` and the learned run mapped onto it
        (``in_range``, ``time_scale`` per seed, ...; see :func:`dynamics.align.align`). The theory carries the
        attribute ``started_from_learned_seeds = 1`` and, with ``start``, the coordinate ``start_step``
        (``trajectory``).

    Warns
    -----
    dynamics.align.TimeScaleWarning
        Without ``align``, ``grid`` or ``start``, when a scalar state variable moves, over the first two save points
        where the theory moves by more than 2 % of its range, at a constant multiple (the two agreeing within 50 %)
        of more than twice or less than half the theory's speed (median over seeds). The message says whether every
        variable shares one multiple (a different clock: use ``align``) or not (a rescaled gradient: another path).

    Raises
    ------
    ValueError
        A missing state variable, a learned run that does not save step 0, a ``start`` that is not a save point
        (or not one per seed, or given with ``align``), a non-finite starting state, a theory with another number
        of trajectories, or a learned save point (or ``grid`` point) that the theory lacks (named).
    TypeError
        If ``learned`` or the theory's result is not a Dataset, or ``theory_fn`` is not callable.
    """
    if not callable(theory_fn):
        raise TypeError(f"theory_fn must be callable (state0, at) -> Trajectory; got {type(theory_fn).__name__}")
    learned = _as_run("learned", learned)
    if on not in _ON:
        raise ValueError(f"on must be one of {_ON}; got {on!r}")
    if align is not None and grid is None:
        raise ValueError("align needs grid: the theory times at which to run the theory and compare")
    if grid is not None:  # checked even where align ignores it: a bad grid is never accepted silently
        grid = check_finite_array("grid", grid, ndim=1)
        if grid.size == 0 or grid[0] != 0 or np.any(np.diff(grid) <= 0):
            raise ValueError(f"grid must be increasing and start at 0; got {grid[:3].tolist()}...")
    if align is not None:
        if not isinstance(align, str) or align not in learned.data_vars:
            raise ValueError(
                f"align must name a variable of the learned run; got {align!r} (it has {sorted(learned.data_vars)})"
            )
    if isinstance(state_variables, str) or not len(state_variables):
        raise ValueError(f"state_variables must be a non-empty sequence of names; got {state_variables!r}")
    missing = [v for v in state_variables if v not in learned.data_vars]
    if missing:
        raise ValueError(
            f"state_variables {missing} are not variables of the learned run (it has {sorted(learned.data_vars)})"
        )
    steps = learned["step"].values
    if steps.size == 0 or steps[0] != 0:
        first = None if steps.size == 0 else int(steps[0])
        raise ValueError(
            f"the learned run's first save point is step {first}, not 0: the overlay starts the reduced "
            "dynamics from the learned order parameters at step 0, so the run must save step 0"
        )
    n_seeds = learned.sizes["trajectory"]
    first = _start_indices(start, steps, n_seeds)  # (n_seeds,) index of each seed's start on the learned axis
    if start is not None and align is not None:
        raise ValueError("start cannot be combined with align: the alignment maps each whole seed from its step 0")
    rows = np.arange(n_seeds)
    blocks = [
        np.asarray(learned[v].transpose("trajectory", "time", ...).values, dtype=np.float64)[rows, first].reshape(
            n_seeds, -1
        )
        for v in state_variables
    ]
    state0 = np.concatenate(blocks, axis=-1)
    owner = np.repeat(np.arange(len(blocks)), [b.shape[1] for b in blocks])  # state column -> variable index
    bad = np.argwhere(~np.isfinite(state0))
    if bad.size:
        seed, col = bad[0]
        var = state_variables[owner[col]]
        where = (
            "" if blocks[owner[col]].shape[1] == 1 else f" (component {col - np.flatnonzero(owner == owner[col])[0]})"
        )
        at_step = "step-0" if start is None else f"step-{int(steps[first[seed]])}"
        raise ValueError(f"the learned {at_step} value of {var!r}{where} is not finite for trajectory {seed}")
    if align is not None:
        theory = _as_run("theory_fn's result", theory_fn(state0, grid.copy()))
        _check_count(theory, n_seeds)
        th, aligned = _align(theory, learned, variable=align, grid=grid)
        return th.assign_attrs({PAIRED_ATTR: 1}), aligned
    axis = np.asarray(learned[on].values)
    if grid is not None:
        if on == "step" and np.any(grid != np.round(grid)):
            raise ValueError(f"grid must hold whole steps with on='step'; got {grid[grid != np.round(grid)][:3]}")
        at = grid.astype(np.int64) if on == "step" else grid
        theory = _as_run("theory_fn's result", theory_fn(state0, at.copy()))
        _check_count(theory, n_seeds)
        own = theory.isel(time=np.asarray(_positions(theory, at, on)))
        return _mark_start(own.assign_attrs({PAIRED_ATTR: 1}), start, steps, first), learned
    if start is None:  # every seed from step 0, on the learned points themselves
        at = axis.copy()
        theory = _as_run("theory_fn's result", theory_fn(state0, at))
        _check_count(theory, n_seeds)
        aligned = theory.isel(time=np.asarray(_positions(theory, at, on)))
    else:  # each seed on its own clock: learned point k faces the theory at axis[k] - axis[first[seed]]
        offsets = axis[None, :] - axis[first][:, None]
        later = np.arange(axis.size)[None, :] >= first[:, None]
        at = np.unique(offsets[later])
        theory = _as_run("theory_fn's result", theory_fn(state0, at.copy()))
        _check_count(theory, n_seeds)
        index = np.asarray(_positions(theory, at, on))
        slot = np.searchsorted(at, offsets.clip(min=at[0]))  # offsets of later points are entries of at
        aligned = _gather(theory, np.where(later, index[slot.clip(max=at.size - 1)], -1))
    aligned = aligned.assign_coords(
        time=learned["time"].values, step=("time", steps), trajectory=learned["trajectory"].values
    )
    aligned = _mark_start(aligned.assign_attrs({PAIRED_ATTR: 1}), start, steps, first)
    if start is None:
        message = _time_scale_message(_time_scale_ratios(aligned, learned, state_variables))
        if message is not None:
            warnings.warn(message, TimeScaleWarning, stacklevel=3)  # 3: past the argument-check wrapper, to the caller
    return aligned, learned


def _start_indices(start, steps: np.ndarray, n_seeds: int) -> np.ndarray:
    """Index on the learned axis of each seed's start step (all 0 without ``start``); a start that is not a save
    point, or a count other than one or one per seed, is refused naming it.
    """
    if start is None:
        return np.zeros(n_seeds, dtype=np.int64)
    values = np.asarray(start)
    if values.dtype.kind not in "iu" and not (
        values.dtype.kind == "f" and np.all(np.isfinite(values)) and np.all(values == np.round(values))
    ):
        raise ValueError(f"start must be integer learned steps (one per seed, or one); got {start!r}")
    values = np.broadcast_to(values.astype(np.int64), (n_seeds,)) if values.ndim == 0 else values.astype(np.int64)
    if values.shape != (n_seeds,):
        raise ValueError(f"start must hold one step per seed ({n_seeds}) or one for all; got shape {values.shape}")
    pos = {int(s): i for i, s in enumerate(steps)}
    lacking = [int(v) for v in values if int(v) not in pos]
    if lacking:
        raise ValueError(
            f"start must be save points of the learned run (its steps {int(steps[0])} .. {int(steps[-1])}); "
            f"{lacking[:5]} are not"
        )
    return np.array([pos[int(v)] for v in values], dtype=np.int64)


def _check_count(theory: xr.Dataset, n_seeds: int) -> None:
    if theory.sizes["trajectory"] != n_seeds:
        raise ValueError(f"theory_fn returned {theory.sizes['trajectory']} trajectories for {n_seeds} learned seeds")


def _positions(theory: xr.Dataset, at: np.ndarray, on: str) -> list[int]:
    """Index on the theory's time axis of every point of ``at`` (exact steps, or times to a relative 1e-12); a
    point the theory lacks is an error naming it (nothing is interpolated or clipped).
    """
    have = theory[on].values
    if on == "step":
        pos = {int(s): i for i, s in enumerate(have)}
        index = [pos.get(int(s), -1) for s in at]
    else:
        order = np.argsort(have)
        j = np.clip(np.searchsorted(have[order], at), 0, have.size - 1)
        candidates = [order[np.clip(j + k, 0, have.size - 1)] for k in (-1, 0)]
        index = []
        for n, t in enumerate(at):
            best = min((c[n] for c in candidates), key=lambda i: abs(have[i] - t))
            tol = 1e-12 * max(abs(t), abs(have[best]), np.finfo(float).tiny)
            index.append(int(best) if abs(have[best] - t) <= tol else -1)
    absent = [at[n] for n, i in enumerate(index) if i < 0]
    if absent:
        shown = ", ".join(f"{a:g}" for a in absent[:5]) + (" ..." if len(absent) > 5 else "")
        raise ValueError(
            f"the theory lacks {len(absent)} of the requested save points on {on!r} ({shown}); "
            f"it covers {have.min():g} .. {have.max():g}: save the theory at exactly the learned points "
            "(nothing is interpolated or clipped)"
        )
    return index


def _gather(theory: xr.Dataset, index: np.ndarray) -> xr.Dataset:
    """Per seed, the theory's time points ``index[seed]`` (``-1``: NaN), for every variable along ``time``."""
    rows = np.arange(index.shape[0])[:, None]
    take = index.clip(min=0)
    data = {}
    for name, var in theory.data_vars.items():
        if "time" not in var.dims:
            data[name] = var
            continue
        dims = ("trajectory", "time") + tuple(d for d in var.dims if d not in ("trajectory", "time"))
        values = np.asarray(var.transpose(*dims).values)[rows, take].astype(np.float64)
        values[index < 0] = np.nan
        data[name] = (dims, values)
    coords = {k: c for k, c in theory.coords.items() if "time" not in c.dims}
    coords.update(time=np.arange(index.shape[1]), step=("time", np.zeros(index.shape[1], dtype=np.int64)))
    return type(theory)(data, coords=coords, attrs=theory.attrs)


def _mark_start(theory: xr.Dataset, start, steps: np.ndarray, first: np.ndarray) -> xr.Dataset:
    """The theory with its seeds' start steps as the coordinate ``start_step`` (only when ``start`` was given)."""
    return theory if start is None else theory.assign_coords(start_step=("trajectory", steps[first]))


validate_module(globals())  # argument checks from the annotations (dynamics.validation)
