"""attndyn's model-agnostic numba engine: iterate maps, integrate ODEs, save, store, sweep, compare.

Public API: :func:`iterate`, :func:`integrate`, solvers :class:`Euler`, :class:`RK4`, :class:`Dopri5`, :class:`Tsit5`,
:class:`SaveAt`, :class:`Trajectory`, :class:`DivergenceError`, :class:`UnconvergedWarning`, :func:`sweep`,
:func:`overlay`, :func:`compare`, :func:`fixed_points` and :func:`basins` (any model's map or flow); submodules
``validation``, ``random`` (seed handling) and ``convergence`` (how a run ended: converged, still converging, or not).
Knows no paper; importing it never imports torch.
"""

from dynamics.compare import compare
from dynamics.convergence import UnconvergedWarning
from dynamics.errors import DivergenceError, MaxStepsError
from dynamics.fixed_points import basins, fixed_points
from dynamics.integrate import RK4, Dopri5, Euler, Tsit5, integrate, iterate
from dynamics.overlay import overlay
from dynamics.saveat import SaveAt
from dynamics.sweep import SweepError, sweep
from dynamics.trajectory import Trajectory, atomic_write, save_dataset

__all__ = [
    "DivergenceError",
    "MaxStepsError",
    "UnconvergedWarning",
    "Dopri5",
    "Euler",
    "RK4",
    "SaveAt",
    "SweepError",
    "Trajectory",
    "Tsit5",
    "atomic_write",
    "basins",
    "compare",
    "fixed_points",
    "integrate",
    "iterate",
    "overlay",
    "save_dataset",
    "sweep",
]
