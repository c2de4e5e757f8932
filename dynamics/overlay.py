"""``overlay``: run the reduced dynamics from a learned run's own starting point and align the two.

A torch run and the reduced dynamics describe the same order parameters (the probes of :mod:`empirical` read them
off the weights). To compare them trajectory by trajectory, the reduced dynamics must start where each seed of the
learned run started: :func:`overlay` reads the order parameters of every seed at step 0, hands them to the caller's
``theory_fn`` and returns the theory's trajectories restricted to exactly the save points of the learned run, so
that the two Datasets share their ``trajectory`` and ``time`` coordinates and subtract, plot or go to
:func:`dynamics.compare` as they are. Nothing is interpolated and nothing is clipped: a save point of the learned run
that the theory did not produce is an error that names it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import xarray as xr

from dynamics.validation import validate_module

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


def overlay(theory_fn: Callable[[np.ndarray, np.ndarray], xr.Dataset], learned, *,
            state_variables: Sequence[str], on: str = "step") -> tuple[xr.Dataset, xr.Dataset]:
    """Start the reduced dynamics from each learned seed's step-0 state and align it with the learned run.

    Parameters
    ----------
    theory_fn : callable ``(state0, at) -> Trajectory``
        Runs the reduced dynamics. ``state0`` is a float64 array ``(n_seeds, len(state_variables))`` (the learned
        order parameters at step 0, in the order of ``state_variables``); ``at`` holds the learned run's save
        points on the axis ``on`` (integer steps, or times). It must return a Trajectory with one trajectory per
        row of ``state0`` that contains every point of ``at`` (e.g. ``SaveAt(steps=at)`` for a map, or
        ``SaveAt(ts=at)`` for a flow).
    learned : Trajectory
        The learned run, seeds along ``trajectory``; its first save point must be step 0.
    state_variables : sequence of str
        The learned variables that form the reduced state, e.g. ``("kappa", "nu", "theta", "eta", "rho")``.
    on : ``"step"`` or ``"time"``
        The coordinate on which the two runs are matched: update counts (exact), or the model's time axis
        (matched to a relative 1e-12, i.e. to the rounding of the time grids).

    Returns
    -------
    theory, learned : Trajectory, Trajectory
        The theory restricted to the learned save points, with the learned run's ``trajectory``, ``time`` and
        ``step`` coordinates, and the learned run itself.

    Raises
    ------
    ValueError
        A missing state variable, a learned run that does not save step 0, a non-finite starting state, a theory
        with another number of trajectories, or a learned save point that the theory lacks (named).
    TypeError
        If ``learned`` or the theory's result is not a Dataset, or ``theory_fn`` is not callable.
    """
    if not callable(theory_fn):
        raise TypeError(f"theory_fn must be callable (state0, at) -> Trajectory; got {type(theory_fn).__name__}")
    learned = _as_run("learned", learned)
    if on not in _ON:
        raise ValueError(f"on must be one of {_ON}; got {on!r}")
    if isinstance(state_variables, str) or not len(state_variables):
        raise ValueError(f"state_variables must be a non-empty sequence of names; got {state_variables!r}")
    missing = [v for v in state_variables if v not in learned.data_vars]
    if missing:
        raise ValueError(f"state_variables {missing} are not variables of the learned run "
                         f"(it has {sorted(learned.data_vars)})")
    steps = learned["step"].values
    if steps.size == 0 or steps[0] != 0:
        first = None if steps.size == 0 else int(steps[0])
        raise ValueError(f"the learned run's first save point is step {first}, not 0: the overlay starts the reduced "
                         "dynamics from the learned order parameters at step 0, so the run must save step 0")
    state0 = np.stack([np.asarray(learned[v].isel(time=0).values, dtype=np.float64) for v in state_variables],
                      axis=-1)
    if state0.ndim != 2:
        raise ValueError(f"state_variables must be scalar per seed and save point; got a state of shape {state0.shape}")
    bad = np.argwhere(~np.isfinite(state0))
    if bad.size:
        seed, var = bad[0]
        raise ValueError(f"the learned step-0 value of {state_variables[var]!r} is not finite for trajectory {seed}")
    at = learned[on].values.copy()
    theory = theory_fn(state0, at)
    theory = _as_run("theory_fn's result", theory)
    if theory.sizes["trajectory"] != learned.sizes["trajectory"]:
        raise ValueError(f"theory_fn returned {theory.sizes['trajectory']} trajectories for "
                         f"{learned.sizes['trajectory']} learned seeds")
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
        raise ValueError(f"the theory lacks {len(absent)} of the learned run's save points on {on!r} ({shown}); "
                         f"it covers {have.min():g} .. {have.max():g}: save the theory at exactly the learned points "
                         "(nothing is interpolated or clipped)")
    aligned = theory.isel(time=np.asarray(index))
    aligned = aligned.assign_coords(time=learned["time"].values, step=("time", steps),
                                    trajectory=learned["trajectory"].values)
    return aligned, learned


validate_module(globals())  # argument checks from the annotations (dynamics.validation)
