"""``SaveAt``: which steps or times a run records (a value object, after diffrax's ``SaveAt``).

Exactly one request per object:

* ``SaveAt(steps=[...])`` explicit integer steps (maps);
* ``SaveAt(ts=[...])`` explicit times (ODEs);
* ``SaveAt(every=n)`` every n-th step, the last step always included (maps; fixed-step ODE solvers: every n grid steps);
* ``SaveAt(n=npoints)`` a linear grid of ``npoints`` points including both ends (steps rounded to integers);
* ``SaveAt(log=npoints)`` log-spaced points including the start and the end: for maps step 0, then steps from 1 to
  the last; for ODEs ``t0``, then offsets from ``log_start`` to the span, ``log_start`` defaulting to
  :data:`LOG_START_FRACTION` (1e-6) of the span, so that the earliest stage of dynamics with widely separated time
  scales (e.g. the exponential Phase I of a small-initialisation flow) is on the grid;
* ``SaveAt(final=True)`` the end only.

The engine runs in compiled chunks between consecutive save points, so saving costs nothing in between.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynamics.validation import check_int, check_positive, validate_module

__all__ = ["LOG_START_FRACTION", "SaveAt", "DEFAULT_SAVEAT"]


LOG_START_FRACTION = 1e-6
"""Default first positive offset of ``SaveAt(log=n)`` on an ODE, as a fraction of the span."""


def _log_grid(first: float, last: float, count: int) -> np.ndarray:
    """``count`` log-spaced points from ``first`` to ``last``, both included; one point is ``last`` itself (the end
    is always saved).
    """
    return np.geomspace(first, last, count) if count > 1 else np.asarray([last], dtype=np.float64)


def _sorted_unique(arr: np.ndarray) -> np.ndarray:
    """``np.unique(arr)`` for a 1-D array, without its sort when ``arr`` is already strictly increasing (dense
    grids of 10^5 points and more: one linear pass instead of a sort).
    """
    if arr.size < 2 or bool(np.all(arr[1:] > arr[:-1])):
        return arr
    return np.unique(arr)


@dataclass(frozen=True)
class SaveAt:
    """Save request; see the module docstring. Built objects are validated, and an empty request is refused."""

    steps: tuple[int, ...] | None = None
    ts: tuple[float, ...] | None = None
    every: int | None = None
    n: int | None = None
    log: int | None = None
    final: bool = False
    log_start: float | None = None

    def __post_init__(self):
        given = [k for k in ("steps", "ts", "every", "n", "log") if getattr(self, k) is not None]
        if self.final:
            given.append("final")
        if len(given) != 1:
            raise ValueError(
                f"SaveAt takes exactly one of steps=, ts=, every=, n=, log=, final=True; got {given or 'none'}"
            )
        if self.steps is not None:
            arr = np.atleast_1d(np.asarray(self.steps))
            if arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"SaveAt.steps must be a non-empty sequence of integers; got {self.steps!r}")
            if arr.min() < 0:
                raise ValueError(f"SaveAt.steps must be integers >= 0 (step numbers); got {self.steps!r}")
            object.__setattr__(self, "steps", tuple(int(s) for s in arr))
        if self.ts is not None:
            arr = np.atleast_1d(np.asarray(self.ts, dtype=np.float64))
            if arr.size == 0 or not np.all(np.isfinite(arr)):
                raise ValueError(f"SaveAt.ts must be a non-empty sequence of finite times; got {self.ts!r}")
            object.__setattr__(self, "ts", tuple(float(t) for t in arr))
        if self.every is not None:
            object.__setattr__(self, "every", check_int("SaveAt.every", self.every, min_value=1))
        if self.n is not None:
            object.__setattr__(self, "n", check_int("SaveAt.n", self.n, min_value=2))
        if self.log is not None:
            object.__setattr__(self, "log", check_int("SaveAt.log", self.log, min_value=2))
        if self.log_start is not None:
            object.__setattr__(self, "log_start", check_positive("SaveAt.log_start", self.log_start))

    def resolve_steps(self, n_steps: int) -> np.ndarray:
        """Sorted unique int64 save steps in [0, n_steps] for a discrete map of ``n_steps`` steps."""
        if self.ts is not None:
            raise ValueError("SaveAt(ts=...) is for ODEs; a discrete map takes SaveAt(steps=...)")
        if self.steps is not None:
            arr = np.asarray(self.steps, dtype=np.int64)
            if arr.min() < 0 or arr.max() > n_steps:
                raise ValueError(
                    f"SaveAt.steps must lie in [0, n_steps={n_steps}]; got range [{arr.min()}, {arr.max()}]"
                )
            return _sorted_unique(arr)
        if self.every is not None:
            arr = np.arange(0, n_steps + 1, self.every, dtype=np.int64)  # increasing: no sort needed
            return arr if arr[-1] == n_steps else np.append(arr, n_steps)
        if self.n is not None:
            return np.unique(np.rint(np.linspace(0, n_steps, self.n)).astype(np.int64))
        if self.log is not None:
            if n_steps == 0:
                return np.zeros(1, dtype=np.int64)
            pos = np.rint(_log_grid(1, n_steps, self.log - 1)).astype(np.int64)
            return np.unique(np.concatenate([[0], pos]))
        return np.asarray([n_steps], dtype=np.int64)

    def resolve_times(self, t0: float, t1: float, dt: float | None = None) -> np.ndarray:
        """Sorted unique float64 save times in [t0, t1]; ``dt`` is the fixed step (needed by ``every``)."""
        if self.steps is not None:
            raise ValueError("SaveAt(steps=...) is for discrete maps; an ODE takes SaveAt(ts=...)")
        span = t1 - t0
        if self.ts is not None:
            arr = np.asarray(self.ts, dtype=np.float64)
            slack = 1e-12 * max(abs(t0), abs(t1), 1.0)
            if arr.min() < t0 - slack or arr.max() > t1 + slack:
                raise ValueError(f"SaveAt.ts must lie in t_span [{t0}, {t1}]; got range [{arr.min()}, {arr.max()}]")
            return _sorted_unique(np.clip(arr, t0, t1))
        if self.every is not None:
            if dt is None:
                raise ValueError("SaveAt(every=n) needs a fixed-step solver (Euler or RK4); use ts=, n= or log=")
            n_grid = int(np.floor(span / dt * (1 + 1e-12)))
            arr = t0 + dt * np.arange(0, n_grid + 1, self.every)
            return _sorted_unique(np.append(arr[arr <= t1], t1))
        if self.n is not None:
            return np.linspace(t0, t1, self.n)
        if self.log is not None:
            start = self.log_start if self.log_start is not None else LOG_START_FRACTION * span
            if not 0 < start < span:
                raise ValueError(f"SaveAt.log_start must lie in (0, t1 - t0 = {span}); got {start}")
            return np.unique(np.concatenate([[t0], t0 + _log_grid(start, span, self.log - 1)]))
        return np.asarray([t1], dtype=np.float64)


DEFAULT_SAVEAT = SaveAt(n=201)


validate_module(globals())  # field types from the annotations (dynamics.validation), then __post_init__
