"""Batched iteration of discrete maps and integration of ODEs, saves written inside the compiled loop.

Main entry points (the design follows diffrax's ``diffeqsolve``; docs/guides/engine.md):

* :func:`iterate` for a discrete map ``x_{k+1} = step(k, x_k; p)``;
* :func:`integrate` for an ODE ``dy/dt = rhs(t, y; p)`` with the explicit Runge-Kutta methods :class:`Euler`,
  :class:`RK4` (fixed step) or :class:`Dopri5`, :class:`Tsit5` (adaptive 5(4) pairs with rtol/atol step control,
  per-trajectory step sizes and 4th-order dense output at the save times). Every method is a Butcher tableau
  (the engine's steppers) turned into one generated kernel; the step-size controller is separate
  (``_steppers.step_factor``).

Model kernels are numba functions written by the model modules (the engine contract):

* ``step(k, x, p, out)``: ``k`` the int64 index of the step (from state k to state k+1), ``x`` float64[n_state]
  (read only), ``p`` float64[n_params] (the trajectory's parameter row), ``out`` float64[n_state] to fill;
* ``rhs(t, y, p, dy)``: writes dy/dt into ``dy``;
* with ``args=(A0, A1, ...)`` (a tuple of numpy arrays: samples, tables, index arrays) the five-argument forms
  ``step(k, x, p, args, out)`` / ``rhs(t, y, p, args, dy)``, reading ``args[0]``, ``args[1]``, ... inside the
  kernel (``observe`` and ``step_observe`` take ``args`` after ``p`` the same way). Data never goes into ``p``.
  ``args_per_trajectory`` (a bool, or one bool per array) marks arrays whose leading axis is the trajectory:
  trajectory i then sees ``A[i]`` (so a batched run equals the one-at-a-time runs with ``A[i]`` bit for bit),
  and a single start with per-trajectory data runs one trajectory per row of the data.

``state0`` is (n_traj, n_state); all trajectories advance inside one compiled loop that also writes the saved states
into a pre-allocated array, so saving every step costs about as much as saving none. ``params`` is (n_params,) shared
by all trajectories or (n_traj, n_params), one row per trajectory: per-configuration task parameters (a learning rate,
a regularisation) enter this way, and a single initial state with n parameter rows runs n trajectories. A schedule
that changes with the step (a temperature, a learning rate) is written into the kernel as a function of ``k``, or
given as an array through ``args``. One driver loop serves the map and both integrators: a run is one compiled call
(which also samples the convergence trend) unless a progress bar or a Python ``stop`` condition (checked at each
save) cuts it into segments; failures are reported and stop conditions applied there. Kernels are generated per
model function and cached on disk across processes (see docs/guides/engine.md). Non-finite values are caught inside
the kernels at the exact step and raised as :class:`DivergenceError`, which carries the run up to the last save
point before the failure.
"""

from __future__ import annotations

from typing import Annotated, Any
import math
import numbers
import warnings
from dataclasses import dataclass

import numpy as np

from dynamics import _kernels, _steppers
from dynamics.convergence import DEFAULT_CONVERGENCE_TOL, step_norm_trend, tail_blocks, tail_points
from dynamics.errors import DivergenceError, MaxStepsError
from dynamics.saveat import DEFAULT_SAVEAT, SaveAt
from dynamics.trajectory import Trajectory
from dynamics.validation import (
    Array,
    Range,
    callable_check,
    check_allocation,
    check_finite_array,
    check_int,
    check_positive,
    sequence_check,
    validate_module,
)

__all__ = ["Euler", "RK4", "Dopri5", "Tsit5", "iterate", "integrate"]

# Progress bars are serviced this many times per run when progress is on.
_PROGRESS_UPDATES = 200


@dataclass(frozen=True)
class Euler:
    """Explicit Euler, fixed step ``dt`` (order 1)."""

    dt: float
    order = 1
    tableau = _steppers.EULER

    def __post_init__(self):
        check_positive("solver.dt", self.dt)


@dataclass(frozen=True)
class RK4:
    """Classical 4th-order Runge–Kutta, fixed step ``dt`` (order 4)."""

    dt: float
    order = 4
    tableau = _steppers.RK4

    def __post_init__(self):
        check_positive("solver.dt", self.dt)


@dataclass(frozen=True)
class _Adaptive:
    rtol: float = 1e-8
    atol: float = 1e-10
    dt0: float | None = None
    dt_max: Annotated[float, Range(gt=0, finite=False)] = math.inf
    max_steps: Annotated[int, Range(integer=True, ge=1, le=10**9)] = 10**8

    def __post_init__(self):
        check_positive("rtol", self.rtol)
        check_positive("atol", self.atol)
        if self.dt0 is not None:
            check_positive("dt0", self.dt0)
        if isinstance(self.dt_max, bool) or not isinstance(self.dt_max, numbers.Real) or not self.dt_max > 0:
            raise ValueError(f"dt_max must be a number > 0 (math.inf for no limit); got {self.dt_max!r}")
        check_int("max_steps", self.max_steps, min_value=1)


@dataclass(frozen=True)
class Dopri5(_Adaptive):
    """Adaptive Dormand–Prince 5(4) (order 5, error estimate of order 4), per-trajectory step sizes.

    Step control as in Hairer, Nørsett & Wanner (Solving ODEs I, Sec. II.4): the scaled RMS error with
    ``atol + rtol * max(|y|, |y_new|)`` must be <= 1; factor ``0.9 err^(-1/5)`` clipped to [0.2, 10]; steps never
    exceed ``dt_max``. Save times are served by the 4th-order continuous extension, so they do not change the step
    sequence. ``dt0`` (default: Hairer's initial-step heuristic) is the first trial step.

    Parameters
    ----------
    dt_max : float > 0
    max_steps : int in [1, 1000000000]
    """

    order = 5
    tableau = _steppers.DOPRI5


@dataclass(frozen=True)
class Tsit5(_Adaptive):
    """Adaptive Tsitouras 5(4) (Tsitouras 2011), with the same step control and options as :class:`Dopri5` and its
    own 4th-order free interpolant for the save times.

    Parameters
    ----------
    dt_max : float > 0
    max_steps : int in [1, 1000000000]
    """

    order = 5
    tableau = _steppers.TSIT5


_SOLVERS = (Euler, RK4, Dopri5, Tsit5)


class _NoBar:
    """Stands in for a progress bar when progress is off (tqdm is then neither imported nor built)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n):
        pass


def _bar(progress: bool, total, desc: str, unit: str):
    """A tqdm progress bar when ``progress``, else a no-op stand-in."""
    if not progress:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False)


def _real_array(name: str, value, shapes: str) -> np.ndarray:
    """``value`` as a float64 array; complex or non-numeric input raises ``ValueError`` naming ``name``."""
    if np.iscomplexobj(value):
        raise ValueError(f"{name} must be real; got a complex array")
    try:
        return np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real array of shape {shapes}") from exc


def _prepare_state(state0) -> np.ndarray:
    arr = _real_array("state0", state0, "(n_traj, n_state)")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"state0 must have shape (n_traj, n_state) or (n_state,); got {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"state0 must be non-empty (n_traj >= 1, n_state >= 1); got {arr.shape}")
    check_finite_array("state0", arr)
    return np.ascontiguousarray(arr)


def _prepare_params(params, n_traj: int) -> np.ndarray:
    """Parameter rows: (1, n_params) shared or (n_traj, n_params); see :func:`_broadcast_batch`."""
    if params is None:
        params = np.zeros(1)
    arr = _real_array("params", params, "(n_params,) or (n_traj, n_params)")
    if arr.ndim == 0:
        arr = arr[None]
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] not in (1, n_traj):
        raise ValueError(
            f"params must have shape (n_params,), (1, n_params) or (n_traj={n_traj}, n_params) to "
            f"broadcast with the batch of state0 (n_traj={n_traj} rows); got params of shape "
            f"{arr.shape}"
        )
    if arr.shape[1] == 0:
        arr = np.zeros((arr.shape[0], 1))
    check_finite_array("params", arr)
    return np.ascontiguousarray(arr)


def _broadcast_batch(X, params):
    """Broadcast the batch: state0 rows and params rows must each be 1 or n_traj (one state with n parameter rows
    runs n trajectories from the same start). Returns (X, P).
    """
    n_state_rows = X.shape[0]
    p_rows = None
    if params is not None and not np.iscomplexobj(params):
        shape = np.shape(params)
        if len(shape) == 2:
            p_rows = shape[0]
    if n_state_rows == 1 and p_rows is not None and p_rows > 1:
        X = np.ascontiguousarray(np.repeat(X, p_rows, axis=0))
    return X, _prepare_params(params, X.shape[0])


def _prepare_args(args, args_per_trajectory):
    """The model's data arrays as a tuple of C-contiguous numpy arrays and the per-trajectory flag of each (the
    ``args_spec`` of :func:`dynamics._kernels.get_kernel`), or (NO_ARGS, None) without args.
    """
    if args is None:
        if args_per_trajectory is not None:
            raise TypeError("args_per_trajectory was given without args; pass args=(array, ...) or drop it")
        return _kernels.NO_ARGS, None
    if not isinstance(args, tuple) or not args:
        raise TypeError(
            f"args must be a non-empty tuple of numpy arrays (args=(A,) for one array); got {type(args).__name__}"
        )
    arrays = []
    for q, a in enumerate(args):
        if not isinstance(a, np.ndarray) or a.dtype.kind not in "fiub" or a.ndim == 0:
            what = f"a {a.dtype} array of {a.ndim} dimensions" if isinstance(a, np.ndarray) else type(a).__name__
            raise TypeError(
                f"args[{q}] must be a numpy array of at least 1 dimension with a real, integer or bool "
                f"dtype; got {what}"
            )
        if a.dtype.kind == "f":
            check_finite_array(f"args[{q}]", a)
        arrays.append(np.ascontiguousarray(a))
    if args_per_trajectory is None or isinstance(args_per_trajectory, bool | np.bool_):
        flags = (bool(args_per_trajectory),) * len(arrays)
    else:
        flags = tuple(args_per_trajectory)
        if len(flags) != len(arrays) or not all(isinstance(f, bool | np.bool_) for f in flags):
            raise ValueError(
                f"args_per_trajectory must be a bool or one bool per array of args ({len(arrays)}); "
                f"got {args_per_trajectory!r}"
            )
        flags = tuple(bool(f) for f in flags)
    return tuple(arrays), flags


def _batch_args(A, spec, X, P):
    """Broadcast the batch with the per-trajectory args: their leading axes must all equal n_traj, which a single
    state and parameter row take from them. Returns (X, P).
    """
    if not spec or not any(spec):
        return X, P
    rows = {A[q].shape[0] for q, per in enumerate(spec) if per}
    n_traj = max(X.shape[0], P.shape[0])
    if len(rows) == 1 and X.shape[0] == 1 and P.shape[0] == 1:
        n_traj = rows.pop()
        X = np.ascontiguousarray(np.repeat(X, n_traj, axis=0))
    for q, per in enumerate(spec):
        if per and A[q].shape[0] != n_traj:
            raise ValueError(
                f"args[{q}] is per trajectory (args_per_trajectory) so its leading axis must be "
                f"n_traj={n_traj}; got shape {A[q].shape}"
            )
    return X, P


def _args_row(A, spec, i: int) -> tuple:
    """The data trajectory ``i`` sees (what the kernels' args_row gives), for Python-side checks."""
    return tuple(a[i] if per else a for a, per in zip(A, spec))


def _check_arity(name: str, fn, args_spec, base: int, form: str):
    """``fn`` must take ``base`` arguments (no args) or ``base + 1`` (with args); the error shows both forms."""
    want = base if args_spec is None else base + 1
    got = fn.py_func.__code__.co_argcount
    if got != want:
        given = "args was not given" if args_spec is None else "args was given"
        raise TypeError(
            f"{name} {fn.py_func.__qualname__} takes {got} arguments but {given}: it must be "
            f"{form.format(a='') if args_spec is None else form.format(a='args, ')}"
        )
    return fn


def _names(names, n_state: int) -> list[str] | str:
    if names is None:
        return [f"y{j}" for j in range(n_state)]
    if isinstance(names, str):
        return names  # the whole state as one array variable (Trajectory.from_arrays)
    names = [str(n) for n in names]
    if len(names) != n_state:
        raise ValueError(f"names must have n_state={n_state} entries; got {len(names)}")
    return names


# Distinct bit pattern (a NaN payload no arithmetic produces) marking the entries an observable did not write.
_UNWRITTEN = np.array([0x7FF4DEADBEEF0001], dtype=np.int64).view(np.float64)[0]


# (observe, names, n_state, args_spec) of the observables :func:`_check_observe` has probed in this process.
_OBSERVE_CHECKED: set = set()


def _check_observe(observe, observe_names, x, p, when, A=None, spec=None):
    """Validate ``observe``/``observe_names`` and return (observe, names) or (None, ()).

    The observable is called once on the first initial state into a buffer longer than ``observe_names``: it must
    write exactly the first ``len(observe_names)`` entries (an observable that fills whatever buffer it gets is also
    accepted), so a names list of the wrong length is caught before the run instead of writing out of bounds.
    """
    if observe is None:
        if observe_names is not None:
            raise TypeError(
                "observe_names was given without observe; pass observe=<numba function "
                "observe(k, x, p, out)> or drop observe_names"
            )
        return None, ()
    observe = _check_arity(
        "observe",
        _kernels.check_model("observe", observe, "observe(k, x, p, out)"),
        spec,
        4,
        "observe(k, x, p, {a}out)",
    )
    if observe_names is None or isinstance(observe_names, str):
        raise TypeError(
            f"observe_names must be a sequence of names, one per value written by observe; got {observe_names!r}"
        )
    names = [str(n) for n in observe_names]
    key = (observe, tuple(names), x.shape[0], spec)
    if key in _OBSERVE_CHECKED:  # probed before in this process: the probe is part of validation, not the run
        return observe, names
    if not names or len(set(names)) != len(names):
        raise ValueError(f"observe_names must be non-empty and distinct; got {names}")
    extra = 8
    probe = np.full(len(names) + extra, _UNWRITTEN)
    if spec is None:
        observe(when, x, p, probe)
    else:
        observe(when, x, p, _args_row(A, spec, 0), probe)
    unwritten = probe.view(np.int64) == _UNWRITTEN.view(np.int64)
    if unwritten.any() and (unwritten[: len(names)].any() or not unwritten[len(names) :].all()):
        written = int(np.flatnonzero(~unwritten).max()) + 1 if (~unwritten).any() else 0
        raise ValueError(
            f"observe_names has {len(names)} entries ({names}) but observe "
            f"{observe.py_func.__qualname__} writes {written} values (out[0..{written - 1}]); give one "
            "name per value written"
        )
    _OBSERVE_CHECKED.add(key)
    return observe, names


def _check_saved_size(n_traj: int, n_save: int, n_state: int, names) -> None:
    """Refuse, before any step, a run whose saved states and observables would not fit in memory."""
    check_allocation(
        "saveat and the batch of initial states",
        (n_traj, n_save, n_state + len(names or ())),
        what="the saved trajectory (trajectory x save point x variable)",
    )


def _observable_array(names, n_traj: int, n_save: int) -> np.ndarray:
    """The kernel's observables output O (n_traj, n_save, n_obs); an empty placeholder when there are none."""
    return np.empty((n_traj, n_save, len(names)) if names else (n_traj, 0, 0))


def _observables(obs_arr, names, n: int) -> dict:
    return {name: obs_arr[:, :n, q] for q, name in enumerate(names)}


def _kept_observables(obs_arr, names, keep) -> dict:
    """The observables of the saves selected by the boolean mask ``keep``."""
    return {name: obs_arr[:, keep, q] for q, name in enumerate(names)}


def _check_saveat(saveat) -> SaveAt:
    if saveat is None:
        return DEFAULT_SAVEAT
    if not isinstance(saveat, SaveAt):
        raise TypeError(f"saveat must be a dynamics.SaveAt (e.g. SaveAt(n=5)) or None; got {saveat!r}")
    return saveat


def _check_bound(bound) -> float:
    ok = isinstance(bound, numbers.Real | np.floating | np.integer) and not isinstance(bound, bool)
    if not ok or not float(bound) > 0:
        raise ValueError(f"bound must be a number > 0 (math.inf: only NaN/inf count as divergence); got {bound!r}")
    return _steppers.finite_bound(bound)


def _convergence_tol(convergence_tol, converged) -> float:
    """The threshold of the ``converged`` diagnostic: ``convergence_tol``, else the stop tolerance ``converged``,
    else :data:`DEFAULT_CONVERGENCE_TOL`.
    """
    if convergence_tol is not None:
        return check_positive("convergence_tol", convergence_tol)
    return DEFAULT_CONVERGENCE_TOL if converged is None else float(converged)


def _diagnostics(norm, tol: float, warn: bool, kind: str, samples=(), points=None, displacement=None) -> dict:
    """Per-trajectory ``final_step_norm``, ``converged`` and ``step_norm_trend`` (see :func:`iterate` and
    :mod:`dynamics.convergence`; ``samples`` are the step norms at the tail ``points``, in time order, and
    ``displacement`` the max-norm distance from the state at the first of them to the end), warning when asked.
    """
    norm = np.asarray(norm, dtype=np.float64)
    ok = norm < tol  # NaN (no step taken) counts as not converged
    trend = step_norm_trend(
        np.stack(samples, axis=1) if len(samples) else np.empty((norm.size, 0)), points, displacement
    )
    if warn and not ok.all():
        bad = int((~ok).sum())
        cycling = int(((~ok) & (trend == 1)).sum())
        what = "last update" if kind == "map" else "vector field at the final state"
        warnings.warn(
            f"{bad} of {ok.size} trajectories ended unconverged ({cycling} of them cycling or chaotic: "
            f"see step_norm_trend): the max-norm of the {what} is >= convergence_tol={tol:g} (see the "
            "final_step_norm variable); run longer, lower the step size, or check for cycles or chaos",
            RuntimeWarning,
            stacklevel=3 if kind == "map" else 4,
        )
    return {"final_step_norm": norm, "converged": ok, "step_norm_trend": trend}


def _displacement(start, end) -> np.ndarray | None:
    """Max-norm distance per trajectory between two states (None when the first was not recorded)."""
    return None if start is None else np.max(np.abs(end - start), axis=1)


def _check_converged(converged) -> float:
    """The in-kernel stop tolerance (-1 when off)."""
    if converged is None:
        return -1.0
    return check_positive("converged", converged)


def _chunks(start: int, end: int, progress: bool, cuts=()) -> list[tuple[int, int]]:
    """[a, b] ranges covering start..end: one when progress is off, ~_PROGRESS_UPDATES when on; also cut at
    ``cuts`` (the save points where a Python stop condition runs).
    """
    points = {start, end}
    if progress and end > start:
        points.update(np.linspace(start, end, _PROGRESS_UPDATES + 1).astype(np.int64).tolist())
    points.update(int(c) for c in cuts if start <= c <= end)
    pts = sorted(points)
    pairs = [(start, end)] if len(pts) == 1 else list(zip(pts[:-1], pts[1:]))
    if len(cuts) and start in cuts and pairs[0] != (start, start):
        pairs.insert(0, (start, start))  # a stop condition also sees the initial save
    return pairs


def _variable_name(names, var: int) -> str:
    if isinstance(names, str):
        return f"{names}[{var}]"
    return names[var] if 0 <= var < len(names) else "?"


def _raise_status(status, names, *, kind, time_of, partial_fn):
    """Raise the error of the lowest failing trajectory, with the run up to the last save point written by every
    trajectory (``partial``).
    """
    bad = np.flatnonzero(status[:, 0])
    if bad.size == 0:
        return
    i = int(bad[0])
    code, where, var = (int(v) for v in status[i, :3])
    variable = _variable_name(names, var)
    if code == 2:
        raise MaxStepsError(
            f"trajectory {i}: the adaptive solver took max_steps={where} steps without reaching "
            "the end; try increasing max_steps or loosening rtol/atol (the flow may be stiff)"
        )
    partial = partial_fn(int(status[:, 3].min()))
    time = time_of(i, where)
    if kind == "map":
        msg = f"map diverged: trajectory {i}, step {where}, variable {variable!r} became non-finite or left the bound"
        raise DivergenceError(msg, trajectory=i, step=where, time=time, variable=variable, partial=partial)
    if code == 3:
        msg = (
            f"ODE step size underflow: trajectory {i}, time {time:.6g} (fastest variable {variable!r}); the "
            "flow is singular or blowing up there"
        )
    else:
        msg = (
            f"ODE diverged: trajectory {i}, time {time:.6g}, variable {variable!r} became non-finite or left the bound"
        )
    raise DivergenceError(
        msg, trajectory=i, step=None if code == 3 else where, time=time, variable=variable, partial=partial
    )


def _finish(Y, names, time, step, P_rows, n_traj, derived, attrs, extra_vars=None, per_traj=None):
    variables = dict(extra_vars or {})
    if derived is not None:
        P_full = np.broadcast_to(P_rows, (n_traj, P_rows.shape[1]))
        computed = derived(Y, P_full)
        for name, value in computed.items():
            variables[name] = np.asarray(value)
    return Trajectory.from_arrays(
        Y, names=names, time=time, step=step, variables=variables, attrs=attrs, per_trajectory=per_traj
    )


def _partial_builder(Y, names, time, step, P, n_traj, derived, attrs, extra=None):
    """A function n -> Trajectory of the first n save points (for DivergenceError.partial)."""

    def build(n):
        n = max(int(n), 0)
        extra_n = {k: v[:, :n] for k, v in (extra or {}).items()}
        try:
            return _finish(Y[:, :n].copy(), names, time[:n], step[:n], P, n_traj, derived, attrs, extra_n)
        except Exception:  # a derived quantity that fails on the partial run must not hide the divergence
            return _finish(Y[:, :n].copy(), names, time[:n], step[:n], P, n_traj, None, attrs, extra_n)

    return build


def _apply_stop(stop, when, X, P_rows, active):
    P_full = np.broadcast_to(P_rows, (X.shape[0], P_rows.shape[1]))
    done = np.broadcast_to(np.asarray(stop(when, X, P_full), dtype=bool), active.shape)
    active &= ~done


def _drive(segments, advance, check, *, bar, amount, stop=None, saves_at=None, X=None, P=None, active=None):
    """The one driver loop of :func:`iterate` and both integrators.

    For each segment ``(a, b)`` of the run (step, grid-step or save indices, per kind): ``advance(a, b)`` runs the
    compiled kernel, which writes the saves, samples the convergence trend and stops converged trajectories itself;
    ``check()`` raises the first failure (divergence, step limits) with the partial run; the progress bar moves by
    ``amount(a, b)``. With a Python ``stop`` condition (segments then end at
    save points), it is applied to each save ``saves_at(b)`` completed at b, as ``(j, when, saved states)`` in
    order; stopped trajectories freeze at their saved state, and once all have stopped the run ends there.
    Returns the number of saves kept when a stop ended the run, else None.
    """
    with bar:
        for a, b in segments:
            advance(a, b)
            check()
            bar.update(amount(a, b))
            if stop is not None:
                for j, when, Ysave in saves_at(b):
                    if _stop_at_save(stop, when, Ysave, X, P, active):
                        return j + 1
    return None


_CONVERGED_DOC = """converged : float > 0, optional
        Per-trajectory stop inside the compiled loop: a trajectory whose step moves no component by ``converged``
        or more (max norm; for ODEs the rate ``|y_{n+1} - y_n| / h``) is frozen there, and its later saves repeat
        that state; the variable ``stopped_at`` records the step (maps) or time (ODEs) of freezing, -1 if never.
    flush_subnormals : bool, default True
        Set state components below 2.2e-308 in magnitude (subnormal) to zero after each step, which avoids the
        slow subnormal arithmetic of converged runs; values of larger magnitude are unchanged bit for bit.
    convergence_tol : float > 0, optional
        Threshold of the ``converged`` diagnostic (below); default the ``converged`` stop tolerance when that is
        given, else 1e-8 (absolute: state units per step for maps, per unit time for flows).
    warn_unconverged : bool, default False
        Issue a ``RuntimeWarning`` naming how many trajectories ended unconverged.
    trend : bool, default True
        Sample the step norm over the last half of the run for ``step_norm_trend`` (below), inside the compiled
        loop (the run is not cut; flows evaluate the vector field once more at each of the 9 tail points). It
        changes no result; False gives ``step_norm_trend = 0``."""


def iterate(
    step,
    state0: Annotated[Any, Range(array=True)],
    n_steps: Annotated[Any, Range(integer=True, ge=0)],
    *,
    params: Annotated[Any, Range(array=True)],
    saveat: SaveAt | None = None,
    names: Annotated[Any, _check_names] = None,
    derived: Annotated[Any, callable_check] = None,
    stop: Annotated[Any, callable_check] = None,
    time_scale: Annotated[float, Range(gt=0)] = 1.0,
    progress: bool = False,
    attrs: dict | None = None,
    bound: Annotated[float, Range(gt=0, finite=False)] = np.inf,
    converged: Annotated[float | None, Range(gt=0)] = None,
    flush_subnormals: bool = True,
    convergence_tol: float | None = None,
    warn_unconverged: bool = False,
    observe=None,
    observe_names=None,
    step_observe=None,
    trend: bool = True,
    args: tuple | None = None,
    args_per_trajectory=None,
) -> Trajectory:
    """Iterate a discrete map ``x_{k+1} = step(k, x_k; p)`` for ``n_steps`` steps on a batch of trajectories.

    Parameters
    ----------
    step : numba ``@njit`` function ``step(k, x, p, out)`` (see the module docstring).
    state0 : (n_traj, n_state) float64; a 1-D array is one trajectory.
    n_steps : int >= 0.
    params : (n_params,) shared, or (n_traj, n_params) with one row per trajectory. Per-configuration parameters
        (task constants, step sizes) are passed as rows; with a single initial state (1, n_state) and n rows of
        params, the start is shared by n trajectories. Other row counts raise ``ValueError`` naming both shapes.
    saveat : :class:`SaveAt` with ``steps=``, ``every=``, ``n=``, ``log=`` or ``final=True``; default ``n=201``.
        Saves are written by the compiled loop, so ``every=1`` costs little more than ``final=True``.
    time_scale : float > 0
    bound : float > 0
    converged : float > 0

    Other Parameters
    ----------------
    names : state variable names (default ``y0, y1, ...``); one string stores the state as a single array variable
        with a ``<name>_component`` dimension (use it for states of hundreds of components or more).
    derived : ``derived(Y, P) -> {name: (n_traj, n_save) array}``, evaluated in Python on the saved states.
    observe : numba ``@njit`` function ``observe(k, x, p, out)`` writing ``len(observe_names)`` derived values of
        the state ``x`` (step ``k``, parameter row ``p``) into ``out``; evaluated by the compiled loop at every save
        point (stopped trajectories included), each value stored as a variable named by ``observe_names``. The
        compiled alternative to ``derived`` (which costs a Python pass over every saved row).
    observe_names : sequence of str, one per value ``observe`` writes (checked on the first state).
    step_observe : numba ``@njit`` function ``step_observe(k, x, p, out, obs)``, optional: ``step`` and ``observe``
        of the same state in one call (sharing their work, e.g. exponentials both need), whose results must equal
        the two separate calls bit for bit. The compiled loop then gets the observables of every save that a step
        follows from that step, and calls ``observe`` alone only at the last save and on frozen states.
    args : tuple of numpy arrays, optional
        Data for the five-argument form ``step(k, x, p, args, out)`` (see the module docstring).
    args_per_trajectory : bool or sequence of bool, optional
        Which arrays of ``args`` have the trajectory as leading axis (default: none, all shared).
    stop : ``stop(step, X, P) -> bool (n_traj,)`` checked in Python at every save point; stopped trajectories
        freeze, and once all have stopped the time axis ends there. (The run then returns to Python at each save
        point; prefer ``converged`` for speed.)
    time_scale : the ``time`` coordinate is ``step * time_scale`` (e.g. the learning rate for flow time).
    progress : show a tqdm progress bar.
    attrs : provenance attributes (``model``, ``spec``, ``config``, ``seed``, ``source``, ``time_unit``, ...).
    bound : float > 0; a state component with ``|x| > bound`` counts as divergence (default: only NaN/inf).
    {converged}

    Returns
    -------
    Trajectory with variables ``names`` (+ derived, + ``stopped_at`` when ``converged`` is set), dims
    (trajectory, time), coords ``step`` and ``time``; and two convergence diagnostics over ``trajectory``:
    ``final_step_norm``, the max-norm ``max_m |x_{k+1,m} - x_{k,m}|`` of the last update each trajectory took (NaN
    when ``n_steps = 0``), ``converged``, ``final_step_norm < convergence_tol``, and ``step_norm_trend`` (int8:
    -1 when the step norm, sampled in nine blocks of 8 steps from n/2 to n, decreases: still converging; +1 when
    it does not and the state gets nowhere: a cycle or chaos; 2 when it does not but the state moves steadily:
    drifting; 0 when fewer than 128 steps; see :mod:`dynamics.convergence`). All are computed inside the compiled
    loop; a cycle or chaos shows as a large final step that does not decrease.

    Raises
    ------
    ValueError/TypeError for invalid arguments (naming the parameter); DivergenceError naming the trajectory, step
    and variable, with ``partial`` the Trajectory up to the last save point before the failure.
    """
    A, spec = _prepare_args(args, args_per_trajectory)
    step = _check_arity(
        "step", _kernels.check_model("step", step, "step(k, x, p, out)"), spec, 4, "step(k, x, p, {a}out)"
    )
    n_steps = check_int("n_steps", n_steps, min_value=0)
    time_scale = check_positive("time_scale", time_scale)
    bound = _check_bound(bound)
    tol = _check_converged(converged)
    diag_tol = _convergence_tol(convergence_tol, converged)
    saveat = _check_saveat(saveat)
    X, P = _batch_args(A, spec, *_broadcast_batch(_prepare_state(state0), params))
    n_traj, n_state = X.shape
    names = _names(names, n_state)
    save_steps = saveat.resolve_steps(n_steps)
    observe, obs_names = _check_observe(observe, observe_names, X[0], P[0], np.int64(0), A, spec)
    if step_observe is not None:
        step_observe = _check_arity(
            "step_observe",
            _kernels.check_model("step_observe", step_observe, "step_observe(k, x, p, out, obs)"),
            spec,
            5,
            "step_observe(k, x, p, {a}out, obs)",
        )
        if observe is None:
            raise TypeError("step_observe needs observe (used at the last save and on frozen states) and observe_names")
    kernel = _kernels.get_kernel("map", step, n_state=n_state, observe=observe, fused=step_observe, args_spec=spec)
    _check_saved_size(n_traj, save_steps.size, n_state, obs_names)
    Y = np.empty((n_traj, save_steps.size, n_state))
    obs_arr = _observable_array(obs_names, n_traj, save_steps.size)
    active = np.ones(n_traj, dtype=np.bool_)
    status = np.zeros((n_traj, 4), dtype=np.int64)
    stop_at = np.full(n_traj, -1, dtype=np.int64)
    last = np.full(n_traj, np.nan)
    work = np.empty((4, n_state))
    work_obs = np.empty((2, obs_arr.shape[2]))
    partial = _partial_builder(
        Y,
        names,
        save_steps * time_scale,
        save_steps,
        P,
        n_traj,
        derived,
        attrs,
        _observables(obs_arr, obs_names, save_steps.size),
    )
    # the step-norm samples of step_norm_trend, taken by the kernel: block b of steps [TL[b], TH[b]]
    blocks = tail_blocks(0, n_steps) if trend else []
    TL = np.array([blk[0] for blk in blocks], dtype=np.int64)
    TH = np.array([blk[-1] for blk in blocks], dtype=np.int64)
    TC = np.unique(np.concatenate([TL - 1, TH]))
    S = np.full((n_traj, TL.size), -np.inf)
    XM = np.zeros((n_traj, n_state))
    kmid = int(TH[0]) if TH.size else -1
    reached = [0]

    def advance(a, b):
        j_start = int(np.searchsorted(save_steps, a, side="left" if a == 0 else "right"))
        kernel(
            X,
            P,
            a,
            b,
            save_steps,
            j_start,
            Y,
            obs_arr,
            active,
            status,
            bound,
            tol,
            stop_at,
            bool(flush_subnormals),
            last,
            work,
            work_obs,
            TL,
            TH,
            TC,
            S,
            XM,
            kmid,
            A,
        )
        reached[0] = b

    def saves_at(b):
        j = int(np.searchsorted(save_steps, b))
        return [(j, b, Y[:, j])] if j < save_steps.size and save_steps[j] == b else []

    stopped = _drive(
        _chunks(0, n_steps, progress, save_steps.tolist() if stop is not None else ()),
        advance,
        lambda: _raise_status(status, names, kind="map", time_of=lambda i, s: s * time_scale, partial_fn=partial),
        bar=_bar(progress, n_steps, "iterate", "step"),
        amount=lambda a, b: b - a,
        stop=stop,
        saves_at=saves_at,
        X=X,
        P=P,
        active=active,
    )
    n_saved = save_steps.size if stopped is None else stopped
    k_reached = reached[0]
    steps_out = save_steps[:n_saved]
    per_traj = {"stopped_at": stop_at} if converged is not None else {}
    sampled = np.flatnonzero(TL <= k_reached)  # blocks the run reached (all of them unless a stop ended it early)
    per_traj.update(
        _diagnostics(
            last,
            diag_tol,
            warn_unconverged,
            "map",
            [S[:, b] for b in sampled],
            TH[sampled].tolist(),
            _displacement(XM if 0 <= kmid <= k_reached else None, X),
        )
    )
    return _finish(
        Y[:, :n_saved],
        names,
        steps_out * time_scale,
        steps_out,
        P,
        n_traj,
        derived,
        attrs,
        _observables(obs_arr, obs_names, n_saved),
        per_traj=per_traj,
    )


def integrate(
    rhs,
    state0: Annotated[Any, Range(array=True)],
    t_span: Annotated[Any, Array(shape=(2,))],
    *,
    params: Annotated[Any, Range(array=True)],
    solver=None,
    saveat: SaveAt | None = None,
    names: Annotated[Any, _check_names] = None,
    derived: Annotated[Any, callable_check] = None,
    stop: Annotated[Any, callable_check] = None,
    progress: bool = False,
    attrs: dict | None = None,
    bound: Annotated[float, Range(gt=0, finite=False)] = np.inf,
    converged: Annotated[float | None, Range(gt=0)] = None,
    flush_subnormals: bool = True,
    convergence_tol: float | None = None,
    warn_unconverged: bool = False,
    observe=None,
    observe_names=None,
    trend: bool = True,
    args: tuple | None = None,
    args_per_trajectory=None,
) -> Trajectory:
    """Integrate ``dy/dt = rhs(t, y; p)`` over ``t_span = (t0, t1)`` for a batch of initial conditions.

    Parameters
    ----------
    rhs : numba ``@njit`` function ``rhs(t, y, p, dy)``.
    state0 : (n_traj, n_state) float64; a 1-D array is one trajectory.
    t_span : (t0, t1) with t1 > t0.
    params : (n_params,) shared or (n_traj, n_params) per trajectory, broadcast with the batch as in
        :func:`iterate`.
    solver : :class:`Euler`, :class:`RK4` (fixed step ``dt``), :class:`Dopri5` or :class:`Tsit5` (adaptive;
        default ``Dopri5()``).
    saveat : :class:`SaveAt` with ``ts=``, ``n=``, ``log=``, ``final=True`` or (fixed step) ``every=``;
        default ``n=201``.
    bound : float > 0
    converged : float > 0

    Other Parameters
    ----------------
    names, derived, stop, progress, attrs, bound, converged, flush_subnormals, convergence_tol, warn_unconverged, trend
        As in :func:`iterate` (``stop(t, X, P)`` takes the time).
    args, args_per_trajectory
        As in :func:`iterate`, for ``rhs(t, y, p, args, dy)``.
    observe, observe_names
        As in :func:`iterate`, with ``observe(t, y, p, out)`` taking the save time (for fixed-step solvers
        ``t0 + k dt + h`` of the save).

    Returns
    -------
    Trajectory as in :func:`iterate`, with ``final_step_norm`` the max-norm ``max_m |f_m(t, y)|`` of the vector
    field at the state the solver ended on (the last grid point for fixed-step solvers, t1 for adaptive ones, the
    frozen state of a trajectory stopped by ``converged``), ``converged`` = (``final_step_norm`` <
    ``convergence_tol``) and ``step_norm_trend`` from ``|f|`` sampled at the same fractions of the span (adaptive
    solvers: just past each fraction, through saves by dense output that leave the steps unchanged and are not
    returned). Adaptive solvers also return ``n_rhs_steps``.

    Notes
    -----
    Fixed-step solvers use the grid t0 + k dt (k integer, never accumulated); a save time between grid points is
    served by one extra step of the same method from the preceding grid point, leaving the grid state untouched.
    Adaptive solvers clip steps only at t1 and serve save times by dense output (so many save times do not shrink
    the steps); the ``n_rhs_steps`` variable records the number of attempted steps of each trajectory at each save
    time.
    """
    A, spec = _prepare_args(args, args_per_trajectory)
    rhs = _check_arity("rhs", _kernels.check_model("rhs", rhs, "rhs(t, y, p, dy)"), spec, 4, "rhs(t, y, p, {a}dy)")
    solver = Dopri5() if solver is None else solver
    if not isinstance(solver, _SOLVERS):
        raise ValueError(f"solver must be Euler(dt), RK4(dt), Dopri5(...) or Tsit5(...); got {solver!r}")
    try:
        t0, t1 = (float(t) for t in t_span)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"t_span must be a pair (t0, t1) of numbers; got {t_span!r}") from exc
    if not (math.isfinite(t0) and math.isfinite(t1)) or not t1 > t0:
        raise ValueError(f"t_span must be finite with t1 > t0 (forward in time); got ({t0}, {t1})")
    bound = _check_bound(bound)
    tol = _check_converged(converged)
    saveat = _check_saveat(saveat)
    X, P = _batch_args(A, spec, *_broadcast_batch(_prepare_state(state0), params))
    names = _names(names, X.shape[1])
    observe = _check_observe(observe, observe_names, X[0], P[0], t0, A, spec)
    dt = getattr(solver, "dt", None)
    save_times = saveat.resolve_times(t0, t1, dt)
    diag = (_convergence_tol(convergence_tol, converged), bool(warn_unconverged), bool(trend))
    opts = (
        names,
        derived,
        stop,
        progress,
        attrs,
        bound,
        tol,
        bool(flush_subnormals),
        converged is not None,
        diag,
        observe,
        (A, spec),
    )
    if isinstance(solver, _Adaptive):
        return _integrate_adaptive(rhs, X, P, t0, t1, solver, save_times, *opts)
    return _integrate_fixed(rhs, X, P, t0, t1, solver, save_times, *opts)


def _integrate_fixed(
    rhs,
    X,
    P,
    t0,
    t1,
    solver,
    save_times,
    names,
    derived,
    stop,
    progress,
    attrs,
    bound,
    tol,
    flush,
    record_stop,
    diag,
    observe,
    data,
):
    n_traj, n_state = X.shape
    A, spec = data
    dt = float(solver.dt)
    save_k, save_h = _steppers.fixed_grid_saves(save_times, t0, dt)
    k_last = int(save_k[-1])
    observe, obs_names = observe
    kernel = _kernels.get_kernel("fixed", rhs, solver.tableau, n_state=n_state, observe=observe, args_spec=spec)
    _check_saved_size(n_traj, save_times.size, n_state, obs_names)
    Y = np.empty((n_traj, save_times.size, n_state))
    obs_arr = _observable_array(obs_names, n_traj, save_times.size)
    steps = save_k + (save_h > 0)
    active = np.ones(n_traj, dtype=np.bool_)
    status = np.zeros((n_traj, 4), dtype=np.int64)
    stop_at = np.full(n_traj, -1.0)
    last = np.full(n_traj, np.nan)
    K = np.empty((solver.tableau.stages, n_state))
    yt = np.empty(n_state)
    buf = np.empty(n_state)
    partial = _partial_builder(
        Y, names, save_times, steps, P, n_traj, derived, attrs, _observables(obs_arr, obs_names, save_times.size)
    )
    # the |f| samples of step_norm_trend, taken by the kernel at the grid steps TP, and the state at TP[0]
    blocks = tail_blocks(0, k_last, 1) if diag[2] else []
    TP = np.concatenate(blocks).astype(np.int64) if blocks else np.empty(0, np.int64)
    S = np.full((n_traj, TP.size), np.nan)
    XM = np.zeros((n_traj, n_state))
    reached = [0]

    def advance(a, b):
        j_start = int(np.searchsorted(save_k, a, side="left" if a == 0 else "right"))
        kernel(
            X,
            P,
            t0,
            dt,
            a,
            b,
            save_k,
            save_h,
            j_start,
            Y,
            obs_arr,
            active,
            status,
            bound,
            tol,
            stop_at,
            flush,
            last,
            K,
            yt,
            buf,
            TP,
            S,
            XM,
            A,
        )
        reached[0] = b

    stopped = _drive(
        _chunks(0, k_last, progress, save_k.tolist() if stop is not None else ()),
        advance,
        lambda: _raise_status(status, names, kind="ode", time_of=lambda i, g: t0 + g * dt, partial_fn=partial),
        bar=_bar(progress, k_last, "integrate", "step"),
        amount=lambda a, b: b - a,
        stop=stop,
        saves_at=lambda b: [(int(j), float(save_times[j]), Y[:, j]) for j in np.flatnonzero(save_k == b)],
        X=X,
        P=P,
        active=active,
    )
    n_saved = save_times.size if stopped is None else stopped
    per_traj = {"stopped_at": stop_at} if record_stop else {}
    got = int(np.searchsorted(TP, reached[0], side="right"))  # tail points the run reached (all, unless stopped)
    per_traj.update(
        _diagnostics(
            last,
            *diag[:2],
            "flow",
            [S[:, b] for b in range(got)],
            TP[:got] * dt,
            _displacement(XM if got else None, X),
        )
    )
    return _finish(
        Y[:, :n_saved],
        names,
        save_times[:n_saved],
        steps[:n_saved],
        P,
        n_traj,
        derived,
        attrs,
        _observables(obs_arr, obs_names, n_saved),
        per_traj=per_traj,
    )


def _stop_at_save(stop, t, Ysave, X, P, active) -> bool:
    """Apply a Python stop condition at one save; True when every trajectory has stopped."""
    before = active.copy()
    _apply_stop(stop, t, Ysave, P, active)
    newly = before & ~active
    X[newly] = Ysave[newly]  # freeze at the saved state (as in a one-save-per-chunk run)
    return not active.any()


def _integrate_adaptive(
    rhs,
    X,
    P,
    t0,
    t1,
    solver,
    save_times,
    names,
    derived,
    stop,
    progress,
    attrs,
    bound,
    tol,
    flush,
    record_stop,
    diag,
    observe,
    data,
):
    n_traj, n_state = X.shape
    A, spec = data
    tab = solver.tableau
    observe, obs_names = observe
    kernel = _kernels.get_kernel("adaptive", rhs, tab, observe=observe, args_spec=spec)
    # probe saves at the tail points of step_norm_trend (served by dense output, so they never change the step
    # sequence; dropped from the result): |f| at the solver's state just past each
    user_times = save_times
    probes = tail_points(t0, float(user_times[-1]), integer=False) if diag[2] else np.empty(0)
    save_times = np.union1d(user_times, probes)
    user = np.zeros(save_times.size, dtype=np.bool_)
    user[np.searchsorted(save_times, user_times)] = True  # the user's times are in the union, exactly
    probe_at = np.searchsorted(save_times, probes)
    PB = np.full(save_times.size, -1, dtype=np.int64)  # save j is probe PB[j] (its |f| sample), or -1
    PB[probe_at] = np.arange(probes.size)
    S = np.full((n_traj, probes.size), np.nan)
    T = np.full(n_traj, t0)
    H = np.full(n_traj, solver.dt0 if solver.dt0 is not None else 0.0)
    F0 = np.zeros((n_traj, n_state))
    K = np.zeros((n_traj, tab.stages, n_state))
    Yold = np.zeros((n_traj, n_state))
    Told = np.zeros(n_traj)
    Hold = np.zeros(n_traj)
    fresh = np.ones(n_traj, dtype=np.int64)
    nsteps = np.zeros(n_traj, dtype=np.int64)
    active = np.ones(n_traj, dtype=np.bool_)
    status = np.zeros((n_traj, 4), dtype=np.int64)
    stop_at = np.full(n_traj, -1.0)
    work = np.empty((4, n_state))
    n_save = save_times.size
    _check_saved_size(n_traj, n_save, n_state, obs_names)
    Y = np.empty((n_traj, n_save, n_state))
    NS = np.zeros((n_traj, n_save), dtype=np.int64)
    obs_arr = _observable_array(obs_names, n_traj, n_save)
    index = np.arange(user_times.size)

    def partial(n):  # the user's saves among the first n written
        keep = user & (np.arange(n_save) < n)
        return _partial_builder(
            Y[:, keep],
            names,
            save_times[keep],
            index[: int(keep.sum())],
            P,
            n_traj,
            derived,
            attrs,
            {"n_rhs_steps": NS[:, keep], **_kept_observables(obs_arr, obs_names, keep)},
        )(int(keep.sum()))

    if stop is not None:
        bounds = list(range(n_save + 1))
    elif progress:
        bounds = sorted(set(np.linspace(0, n_save, min(n_save, _PROGRESS_UPDATES) + 1).astype(int).tolist()))
    else:
        bounds = [0, n_save]
    reached = [0]

    def advance(ja, jb):
        kernel(
            X,
            P,
            T,
            H,
            F0,
            K,
            Yold,
            Told,
            Hold,
            fresh,
            save_times,
            ja,
            jb,
            t1,
            solver.rtol,
            solver.atol,
            float(solver.dt_max),
            solver.max_steps,
            nsteps,
            NS,
            active,
            status,
            bound,
            tol,
            stop_at,
            flush,
            Y,
            obs_arr,
            work[0],
            work[1],
            work[2],
            work[3],
            PB,
            S,
            A,
        )
        reached[0] = jb

    def amount(ja, jb):  # flow time covered, from the start to the segment's last save
        return float(save_times[jb - 1]) - (t0 if ja == 0 else float(save_times[ja - 1]))

    # with a stop condition every segment is one save; it sees the user's saves only (not the probes)
    stopped = _drive(
        list(zip(bounds[:-1], bounds[1:])),
        advance,
        lambda: _raise_status(status, names, kind="ode", time_of=lambda i, _n: float(T[i]), partial_fn=partial),
        bar=_bar(progress, t1 - t0, "integrate", "time"),
        amount=amount,
        stop=stop,
        saves_at=lambda jb: [(jb - 1, float(save_times[jb - 1]), Y[:, jb - 1])] if user[jb - 1] else [],
        X=X,
        P=P,
        active=active,
    )
    n_saved = n_save if stopped is None else stopped
    keep = user & (np.arange(n_save) < n_saved)
    n_keep = int(keep.sum())
    extra = {"n_rhs_steps": NS[:, keep], **_kept_observables(obs_arr, obs_names, keep)}
    per_traj = {"stopped_at": stop_at} if record_stop else {}
    # F0 holds f(T, y) at each trajectory's current state (set after every accepted step): no extra evaluation
    got = int(np.sum(probe_at < reached[0]))  # probes the run reached (all, unless a stop ended it early)
    per_traj.update(
        _diagnostics(
            np.max(np.abs(F0), axis=1),
            *diag[:2],
            "flow",
            [S[:, b] for b in range(got)],
            probes[:got].tolist(),
            _displacement(Y[:, probe_at[0]], X) if got else None,
        )
    )
    return _finish(
        Y[:, keep], names, save_times[keep], index[:n_keep], P, n_traj, derived, attrs, extra, per_traj=per_traj
    )


iterate.__doc__ = iterate.__doc__.replace("{converged}", _CONVERGED_DOC)


# argument checks of the public entry points (dynamics.validation): each parameter's rule is declared at its definition
# (a class annotation, or a rule in its ``Annotated`` metadata), on top of the checks in the bodies


def _check_names(name: str, value) -> None:
    if not isinstance(value, str):
        sequence_check(name, value)


validate_module(globals())
