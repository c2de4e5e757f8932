"""attndyn's model-agnostic numba engine: iterate maps, integrate ODEs, save, store.

Public API: :func:`iterate`, :func:`integrate`, solvers :class:`Euler`, :class:`RK4`, :class:`Dopri5`,
:class:`SaveAt`, :class:`Trajectory`, :class:`DivergenceError`, :func:`sweep`; submodules ``validation`` and
``random`` (seed handling). Knows no paper; importing it never imports torch.
"""

from dynamics.compare import compare
from dynamics.errors import DivergenceError, MaxStepsError
from dynamics.integrate import RK4, Dopri5, Euler, integrate, iterate
from dynamics.saveat import SaveAt
from dynamics.sweep import sweep
from dynamics.trajectory import Trajectory, atomic_write, save_dataset

__all__ = [
    "DivergenceError", "MaxStepsError", "Dopri5", "Euler", "RK4", "SaveAt", "Trajectory", "integrate", "iterate",
    "atomic_write", "compare", "save_dataset", "sweep",
]
