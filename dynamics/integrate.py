"""Batched iteration of discrete maps and integration of ODEs, in compiled chunks between save points.

Main entry points (STYLE.md §2.5; the design follows diffrax's ``diffeqsolve``):

* :func:`iterate` for a discrete map ``x_{k+1} = step(k, x_k; p)``;
* :func:`integrate` for an ODE ``dy/dt = rhs(t, y; p)`` with :class:`Euler`, :class:`RK4` (fixed step) or
  :class:`Dopri5` (adaptive Dormand–Prince 5(4) with rtol/atol step control, per-trajectory step sizes and
  4th-order dense output at the save times).

Model kernels are numba functions written by the model modules:

* ``step(k, x, p, out)``: ``k`` the int64 index of the step (from state k to state k+1), ``x`` float64[n_state]
  (read only), ``p`` float64[n_params] (the trajectory's parameter row), ``out`` float64[n_state] to fill;
* ``rhs(t, y, p, dy)``: writes dy/dt into ``dy``.

``state0`` is (n_traj, n_state); all trajectories advance inside one compiled loop. ``params`` is (n_params,)
shared by all trajectories or (n_traj, n_params) per trajectory. A schedule that changes with the step (a
temperature, a learning rate) is written into the kernel as a function of ``k``, or packed as a tail of ``p``.
Between chunks Python updates the progress bar (tqdm), applies the optional ``stop`` condition and records saves.
Non-finite values are caught inside the kernels at the exact step and raised as :class:`DivergenceError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from dynamics import _steppers
from dynamics.errors import DivergenceError, MaxStepsError
from dynamics.saveat import DEFAULT_SAVEAT, SaveAt
from dynamics.trajectory import Trajectory
from dynamics.validation import check_finite_array, check_int, check_positive

# Progress bars and stop conditions are serviced at least this often (in steps) when progress is on.
_PROGRESS_UPDATES = 200


@dataclass(frozen=True)
class Euler:
    """Explicit Euler, fixed step ``dt`` (order 1)."""

    dt: float
    order = 1
    method = _steppers.EULER

    def __post_init__(self):
        check_positive("solver.dt", self.dt)


@dataclass(frozen=True)
class RK4:
    """Classical 4th-order Runge–Kutta, fixed step ``dt`` (order 4)."""

    dt: float
    order = 4
    method = _steppers.RK4

    def __post_init__(self):
        check_positive("solver.dt", self.dt)


@dataclass(frozen=True)
class Dopri5:
    """Adaptive Dormand–Prince 5(4) (order 5, error estimate of order 4), per-trajectory step sizes.

    Step control as in Hairer, Nørsett & Wanner (Solving ODEs I, Sec. II.4): the scaled RMS error with
    ``atol + rtol * max(|y|, |y_new|)`` must be <= 1; factor ``0.9 err^(-1/5)`` clipped to [0.2, 10]; steps never
    exceed ``dt_max``. Save times are served by the 4th-order continuous extension, so they do not change the step
    sequence. ``dt0`` (default: Hairer's initial-step heuristic) is the first trial step.
    """

    rtol: float = 1e-8
    atol: float = 1e-10
    dt0: float | None = None
    dt_max: float = math.inf
    max_steps: int = 10**8
    order = 5

    def __post_init__(self):
        check_positive("rtol", self.rtol)
        check_positive("atol", self.atol)
        if self.dt0 is not None:
            check_positive("dt0", self.dt0)
        if not self.dt_max > 0:
            raise ValueError(f"dt_max must be > 0; got {self.dt_max!r}")
        check_int("max_steps", self.max_steps, min_value=1)


def _prepare_state(state0) -> np.ndarray:
    try:
        arr = np.array(state0, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError("state0 must be a real array of shape (n_traj, n_state)") from exc
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"state0 must have shape (n_traj, n_state) or (n_state,); got {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"state0 must be non-empty (n_traj >= 1, n_state >= 1); got {arr.shape}")
    check_finite_array("state0", arr)
    return np.ascontiguousarray(arr)


def _prepare_params(params, n_traj: int) -> np.ndarray:
    if params is None:
        params = np.zeros(1)
    arr = np.array(params, dtype=np.float64)
    if arr.ndim == 0:
        arr = arr[None]
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] not in (1, n_traj):
        raise ValueError(f"params must have shape (n_params,) or (n_traj={n_traj}, n_params); got {arr.shape}")
    if arr.shape[1] == 0:
        arr = np.zeros((arr.shape[0], 1))
    check_finite_array("params", arr)
    return np.ascontiguousarray(arr)


def _names(names, n_state: int) -> list[str] | str:
    if names is None:
        return [f"y{j}" for j in range(n_state)]
    if isinstance(names, str):
        return names  # the whole state as one array variable (Trajectory.from_arrays)
    names = [str(n) for n in names]
    if len(names) != n_state:
        raise ValueError(f"names must have n_state={n_state} entries; got {len(names)}")
    return names


def _raise_status(status, names, *, kind: str, time_of=None):
    bad = np.flatnonzero(status[:, 0])
    if bad.size == 0:
        return
    i = int(bad[0])
    code, where, var = (int(v) for v in status[i])
    if isinstance(names, str):
        variable = f"{names}[{var}]"
    else:
        variable = names[var] if 0 <= var < len(names) else "?"
    if code == 2:
        raise MaxStepsError(f"trajectory {i}: the adaptive solver took max_steps={where} steps without reaching "
                            "the end; try increasing max_steps or loosening rtol/atol (the flow may be stiff)")
    time = time_of(i, where) if time_of is not None else None
    if kind == "map":
        msg = f"map diverged: trajectory {i}, step {where}, variable {variable!r} became non-finite or left the bound"
        raise DivergenceError(msg, trajectory=i, step=where, time=time, variable=variable)
    if code == 3:
        msg = (f"ODE step size underflow: trajectory {i}, time {time:.6g} (fastest variable {variable!r}); the "
               "flow is singular or blowing up there")
    else:
        msg = (f"ODE diverged: trajectory {i}, time {time:.6g}, variable {variable!r} became non-finite or left "
               "the bound")
    raise DivergenceError(msg, trajectory=i, step=None if code == 3 else where, time=time, variable=variable)


def _finish(Y, names, time, step, P_rows, n_traj, derived, attrs, extra_vars=None):
    variables = dict(extra_vars or {})
    if derived is not None:
        P_full = np.broadcast_to(P_rows, (n_traj, P_rows.shape[1]))
        computed = derived(Y, P_full)
        for name, value in computed.items():
            variables[name] = np.asarray(value)
    return Trajectory.from_arrays(Y, names=names, time=time, step=step, variables=variables, attrs=attrs)


def _apply_stop(stop, when, X, P_rows, active):
    if stop is None:
        return
    P_full = np.broadcast_to(P_rows, (X.shape[0], P_rows.shape[1]))
    done = np.broadcast_to(np.asarray(stop(when, X, P_full), dtype=bool), active.shape)
    active &= ~done


def iterate(step, state0, n_steps, *, params, saveat: SaveAt | None = None, names=None, derived=None, stop=None,
            time_scale: float = 1.0, progress: bool = False, attrs: dict | None = None,
            bound: float = np.inf) -> Trajectory:
    """Iterate a discrete map ``x_{k+1} = step(k, x_k; p)`` for ``n_steps`` steps on a batch of trajectories.

    Main arguments
    --------------
    step : numba function ``step(k, x, p, out)`` (see the module docstring).
    state0 : (n_traj, n_state) float64; a 1-D array is one trajectory.
    n_steps : int >= 0.
    params : (n_params,) shared or (n_traj, n_params) per trajectory.
    saveat : :class:`SaveAt` with ``steps=``, ``every=``, ``n=``, ``log=`` or ``final=True``; default ``n=201``.

    Other arguments
    ---------------
    names : state variable names (default ``y0, y1, ...``); one string stores the state as a single array variable
        with a ``<name>_component`` dimension (use it for states of hundreds of components or more).
    derived : ``derived(Y, P) -> {name: (n_traj, n_save) array}``, evaluated on the saved states.
    stop : ``stop(step, X, P) -> bool (n_traj,)`` checked at save points; stopped trajectories freeze, and once all
        have stopped the time axis ends there.
    time_scale : the ``time`` coordinate is ``step * time_scale`` (e.g. the learning rate for flow time).
    progress : show a tqdm progress bar.
    attrs : provenance attributes (``model``, ``spec``, ``config``, ``seed``, ``source``, ``time_unit``, ...).
    bound : a state component with ``|x| > bound`` counts as divergence (default: only NaN/inf).

    Returns
    -------
    Trajectory with variables ``names`` (+ derived), dims (trajectory, time), coords ``step`` and ``time``.

    Raises
    ------
    ValueError for invalid arguments (naming the parameter); DivergenceError naming the trajectory, step and variable.
    """
    n_steps = check_int("n_steps", n_steps, min_value=0)
    time_scale = check_positive("time_scale", time_scale)
    X = _prepare_state(state0)
    n_traj, n_state = X.shape
    P = _prepare_params(params, n_traj)
    names = _names(names, n_state)
    save_steps = (saveat or DEFAULT_SAVEAT).resolve_steps(n_steps)
    Y = np.empty((n_traj, save_steps.size, n_state))
    active = np.ones(n_traj, dtype=np.bool_)
    status = np.zeros((n_traj, 3), dtype=np.int64)
    buf = np.empty(n_state)
    chunk = max(1, math.ceil(n_steps / _PROGRESS_UPDATES)) if progress else max(n_steps, 1)
    n_saved = save_steps.size
    k = 0
    with tqdm(total=n_steps, disable=not progress, desc="iterate", unit="step", leave=False) as bar:
        for j, target in enumerate(save_steps):
            while k < target:
                n = min(int(target) - k, chunk)
                _steppers.iterate_chunk(step, X, P, k, n, active, status, bound, buf)
                _raise_status(status, names, kind="map", time_of=lambda i, s: s * time_scale)
                k += n
                bar.update(n)
            Y[:, j] = X
            _apply_stop(stop, int(target), X, P, active)
            if not active.any():
                n_saved = j + 1
                break
    steps_out = save_steps[:n_saved]
    return _finish(Y[:, :n_saved], names, steps_out * time_scale, steps_out, P, n_traj, derived, attrs)


def integrate(rhs, state0, t_span, *, params, solver=None, saveat: SaveAt | None = None, names=None, derived=None,
              stop=None, progress: bool = False, attrs: dict | None = None, bound: float = np.inf) -> Trajectory:
    """Integrate ``dy/dt = rhs(t, y; p)`` over ``t_span = (t0, t1)`` for a batch of initial conditions.

    Main arguments
    --------------
    rhs : numba function ``rhs(t, y, p, dy)``.
    state0 : (n_traj, n_state) float64; a 1-D array is one trajectory.
    t_span : (t0, t1) with t1 > t0.
    params : (n_params,) shared or (n_traj, n_params) per trajectory.
    solver : :class:`Euler`, :class:`RK4` (fixed step ``dt``) or :class:`Dopri5` (default ``Dopri5()``).
    saveat : :class:`SaveAt` with ``ts=``, ``n=``, ``log=``, ``final=True`` or (fixed step) ``every=``;
        default ``n=201``.

    Other arguments: ``names``, ``derived``, ``stop`` (``stop(t, X, P)``), ``progress``, ``attrs``, ``bound`` as in
    :func:`iterate`.

    Notes
    -----
    Fixed-step solvers use the grid t0 + k dt (k integer, never accumulated); a save time between grid points is
    served by one extra step of the same method from the preceding grid point, leaving the grid state untouched.
    Dopri5 clips steps only at t1 and serves save times by dense output; the ``n_rhs_steps`` variable records the
    number of attempted steps of each trajectory at each save time.
    """
    solver = Dopri5() if solver is None else solver
    if not isinstance(solver, Euler | RK4 | Dopri5):
        raise ValueError(f"solver must be Euler(dt), RK4(dt) or Dopri5(...); got {solver!r}")
    try:
        t0, t1 = (float(t) for t in t_span)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"t_span must be a pair (t0, t1) of numbers; got {t_span!r}") from exc
    if not (math.isfinite(t0) and math.isfinite(t1)) or not t1 > t0:
        raise ValueError(f"t_span must be finite with t1 > t0 (forward in time); got ({t0}, {t1})")
    X = _prepare_state(state0)
    n_traj, n_state = X.shape
    P = _prepare_params(params, n_traj)
    names = _names(names, n_state)
    dt = getattr(solver, "dt", None)
    save_times = (saveat or DEFAULT_SAVEAT).resolve_times(t0, t1, dt)
    if isinstance(solver, Dopri5):
        return _integrate_dopri5(rhs, X, P, t0, t1, solver, save_times, names, derived, stop, progress, attrs,
                                 bound)
    return _integrate_fixed(rhs, X, P, t0, t1, solver, save_times, names, derived, stop, progress, attrs, bound)


def _integrate_fixed(rhs, X, P, t0, t1, solver, save_times, names, derived, stop, progress, attrs, bound):
    n_traj, n_state = X.shape
    dt = float(solver.dt)
    n_grid_total = int(math.ceil((t1 - t0) / dt * (1 - 1e-12)))
    chunk = max(1, math.ceil(n_grid_total / _PROGRESS_UPDATES)) if progress else max(n_grid_total, 1)
    Y = np.empty((n_traj, save_times.size, n_state))
    steps = np.empty(save_times.size, dtype=np.int64)
    active = np.ones(n_traj, dtype=np.bool_)
    status = np.zeros((n_traj, 3), dtype=np.int64)
    work = np.empty((5, n_state))
    buf = np.empty(n_state)
    n_saved = save_times.size
    k = 0
    with tqdm(total=n_grid_total, disable=not progress, desc="integrate", unit="step", leave=False) as bar:
        for j, s in enumerate(save_times):
            r = (s - t0) / dt
            kr = round(r)
            on_grid = abs(r - kr) <= 1e-9 * max(1.0, abs(r))
            ks = int(kr) if on_grid else int(math.floor(r))
            while k < ks:
                n = min(ks - k, chunk)
                _steppers.fixed_chunk(rhs, solver.method, X, P, t0, dt, k, n, active, status, bound, work, buf)
                _raise_status(status, names, kind="ode", time_of=lambda i, g: t0 + g * dt)
                k += n
                bar.update(n)
            if on_grid:
                Y[:, j] = X
                steps[j] = ks
            else:
                _steppers.fixed_partial(rhs, solver.method, X, P, t0 + ks * dt, s - (t0 + ks * dt), active,
                                        Y[:, j], work)
                finite = np.all(np.isfinite(Y[:, j]) & (np.abs(Y[:, j]) <= bound), axis=1)
                if not finite.all():
                    i = int(np.flatnonzero(~finite)[0])
                    var = int(np.flatnonzero(~np.isfinite(Y[i, j]) | (np.abs(Y[i, j]) > bound))[0])
                    name = f"{names}[{var}]" if isinstance(names, str) else names[var]
                    raise DivergenceError(f"ODE diverged: trajectory {i}, time {s:.6g}, variable {name!r}",
                                          trajectory=i, time=float(s), variable=name)
                steps[j] = ks + 1
            _apply_stop(stop, float(s), Y[:, j], P, active)
            if not active.any():
                n_saved = j + 1
                break
    return _finish(Y[:, :n_saved], names, save_times[:n_saved], steps[:n_saved], P, n_traj, derived, attrs)


def _integrate_dopri5(rhs, X, P, t0, t1, solver, save_times, names, derived, stop, progress, attrs, bound):
    n_traj, n_state = X.shape
    T = np.full(n_traj, t0)
    H = np.full(n_traj, solver.dt0 if solver.dt0 is not None else 0.0)
    F0 = np.zeros((n_traj, n_state))
    K = np.zeros((n_traj, 7, n_state))
    Yold = np.zeros((n_traj, n_state))
    Told = np.zeros(n_traj)
    Hold = np.ones(n_traj)
    fresh = np.ones(n_traj, dtype=np.int64)
    nsteps = np.zeros(n_traj, dtype=np.int64)
    active = np.ones(n_traj, dtype=np.bool_)
    status = np.zeros((n_traj, 3), dtype=np.int64)
    work = np.empty((5, n_state))
    Y = np.empty((n_traj, save_times.size, n_state))
    n_rhs_steps = np.zeros((n_traj, save_times.size), dtype=np.int64)
    n_saved = save_times.size
    with tqdm(total=t1 - t0, disable=not progress, desc="integrate", unit="time", leave=False) as bar:
        last = t0
        for j, s in enumerate(save_times):
            if s == t0:
                Y[:, j] = X
            else:
                _steppers.dopri5_chunk(rhs, X, P, T, H, F0, K, Yold, Told, Hold, fresh, float(s), t1,
                                       solver.rtol, solver.atol, float(solver.dt_max), solver.max_steps, nsteps,
                                       active, status, bound,
                                       Y[:, j], work)
                _raise_status(status, names, kind="ode", time_of=lambda i, _n: float(T[i]))
            n_rhs_steps[:, j] = nsteps
            bar.update(float(s) - last)
            last = float(s)
            _apply_stop(stop, float(s), Y[:, j], P, active)
            if not active.any():
                n_saved = j + 1
                break
    extra = {"n_rhs_steps": n_rhs_steps[:, :n_saved]}
    return _finish(Y[:, :n_saved], names, save_times[:n_saved], np.arange(n_saved), P, n_traj, derived, attrs,
                   extra)
