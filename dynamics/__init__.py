"""attndyn's model-agnostic numba engine: iterate maps, integrate ODEs, save, store, sweep, compare.

Public API: :func:`iterate`, :func:`integrate`, solvers :class:`Euler`, :class:`RK4`, :class:`Dopri5`, :class:`Tsit5`,
:class:`SaveAt`, :class:`Trajectory`, :class:`DivergenceError`, :class:`UnconvergedWarning`, :func:`sweep`,
:func:`overlay`, :func:`compare`, :func:`fixed_points` and :func:`basins` (any model's map or flow); submodules
``validation``, ``random`` (seed handling) and ``convergence`` (how a run ended: converged, still converging, or not).
Knows no paper; importing it never imports torch.

Importing the package loads what every run needs (the integrators, ``SaveAt``, ``Trajectory``, the diagnostics);
:func:`compare`, :func:`overlay`, :func:`sweep`, :func:`fixed_points`, :func:`basins` and the other submodules are
imported on first use (PEP 562), so that a run does not pay for scipy.stats or the sweep machinery it never calls.
"""

from __future__ import annotations

import importlib
import sys
import types

from dynamics.convergence import UnconvergedWarning
from dynamics.errors import DivergenceError, MaxStepsError
from dynamics.integrate import RK4, Dopri5, Euler, Tsit5, integrate, iterate
from dynamics.saveat import SaveAt
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

# Public names imported on first use: name -> the submodule that defines it.
_LAZY = {
    "SweepError": "sweep",
    "basins": "fixed_points",
    "compare": "compare",
    "fixed_points": "fixed_points",
    "overlay": "overlay",
    "sweep": "sweep",
}

# Submodules that share their name with the public function they define: the package attribute stays the function.
_SAME_NAME = frozenset(name for name, module in _LAZY.items() if name == module) | {"integrate"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f"{__name__}.{name}")  # a submodule not imported yet (dynamics.align, ...)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package's module type: when the import system binds a submodule to the package attribute of the same
    name (``import dynamics.compare`` sets ``dynamics.compare``), the attribute becomes the submodule's public
    function instead, as it was when the package imported everything eagerly.
    """

    def __setattr__(self, name, value):
        if name in _SAME_NAME and isinstance(value, types.ModuleType) and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
