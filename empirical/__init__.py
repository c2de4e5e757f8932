"""attndyn.empirical: torch training of the papers' models, compared with the closed forms.

Shared machinery: :mod:`empirical.device` (device, float64 default, determinism), :mod:`empirical.seeding` (per-seed
streams), :mod:`empirical.train` (the one trainer, many seeds at once, logging on a ``dynamics.SaveAt`` grid, output
``dynamics.Trajectory``) and :mod:`empirical.checkpoint` (atomic, ``weights_only`` checkpoints). Paper models live in
:mod:`empirical.models` and implement :class:`empirical.train.TorchModel`.

The trainer is ``empirical.train.train`` (the package does not re-export it, so that ``empirical.train`` stays the
module). Importing this package imports torch (``dynamics`` and ``closedform`` never do) but does not initialise CUDA.
"""

from empirical.device import Placement, resolve, resolve_device, resolve_dtype, set_determinism, torch_threads
from empirical.train import Schedule, TorchModel, TrainConfig, per_seed

__all__ = [
    "Placement",
    "Schedule",
    "TorchModel",
    "TrainConfig",
    "per_seed",
    "resolve",
    "resolve_device",
    "resolve_dtype",
    "set_determinism",
    "torch_threads",
]
