"""Errors raised by the engine."""

from __future__ import annotations

__all__ = ["DivergenceError", "MaxStepsError"]


class DivergenceError(FloatingPointError):
    """A run produced a non-finite (NaN/inf) value or left the allowed range.

    Attributes
    ----------
    trajectory : int
        Index of the first failing trajectory along the batch axis.
    step : int or None
        For maps: the step whose result was non-finite (the state index ``k+1``). For fixed-step ODE solvers: the
        grid step. ``None`` where not applicable.
    time : float or None
        The time of the failure (ODEs), or ``step * time_scale`` (maps).
    variable : str
        The name of the first non-finite state component.
    partial : Trajectory or None
        What was computed before the failure: the run's save points up to the last one that every trajectory
        reached with finite values (raised by ``dynamics.iterate``/``integrate``; None where not available).
    """

    def __init__(
        self,
        message: str,
        *,
        trajectory: int,
        variable: str,
        step: int | None = None,
        time: float | None = None,
        partial=None,
    ):
        super().__init__(message)
        self.trajectory = trajectory
        self.variable = variable
        self.step = step
        self.time = time
        self.partial = partial


class MaxStepsError(RuntimeError):
    """An adaptive solver exceeded ``max_steps`` on a trajectory (the flow is stiff or the tolerance too tight)."""
