"""The one torch trainer of the toolkit: many seeds in one run, logged order parameters, checkpoint and resume.

Every paper model (``empirical/models/<model>.py``) is trained by :func:`train`. A model is a plain object that
implements the small :class:`TorchModel` protocol below; the trainer owns everything else: device and precision
(:mod:`empirical.device`), per-seed random streams (:mod:`empirical.seeding`), the optimiser and its schedules, data
refills, logging on a ``dynamics.SaveAt`` grid, NaN detection, checkpoints (:mod:`empirical.checkpoint`) and the
output ``dynamics.Trajectory`` (dims ``trajectory`` = seed, ``time``; coords ``step``, ``time``), whose variable
names are the model's probe names, i.e. the closed form's, so an overlay is an ``xarray`` alignment.

Many seeds in one run
---------------------
Every tensor carries a leading **seed axis** of length ``S = len(config.seeds)``: parameters ``(S, ...)``, batches
``(S, batch, ...)``, the loss ``(S,)``. The trainer back-propagates ``loss.sum()``; since seeds never mix, the gradient
of seed ``s`` is that of its own loss, and SGD, heavy-ball momentum and Adam act elementwise, so ``torch.optim`` on the
stacked parameters is exactly per-seed optimisation. Each seed draws from its own ``torch.Generator`` streams
(``data``, ``init``, ``sgd``, ``eval``; see :mod:`empirical.seeding`), so seed ``s`` of a batched run uses the numbers
of a single-seed run with seed ``s``. A model that defines ``draw`` samples its data for all seeds in one compiled
call from counter-keyed block streams (:class:`empirical.seeding.BlockRNG`; ~1.35 ns a float64 normal against torch's
~15 ns, and no Python loop over seeds); otherwise ``sample`` loops over the seeds' torch generators once per block of
``config.refill`` steps (online) or one permutation per epoch (fixed dataset).

Bitwise equality of a batched seed and its single-seed run holds when the model computes each seed with row-wise
operations (elementwise ops, reductions over non-seed axes). Batched BLAS calls (``matmul``/``einsum``/``bmm`` over
the seed axis) may block differently for different ``S`` and then agree only to rounding (~1e-16 relative per step);
model tests should then compare with a rounding tolerance.

The model protocol
------------------
Required:

``name: str``
    Model name, e.g. ``"single_location"`` (attrs ``model``).
``init_params(generators, *, device, dtype) -> dict[str, Tensor]``
    Initial parameters, each ``(S, ...)``, seed ``s`` drawn from ``generators[s]`` (use :func:`per_seed`). The trainer
    makes them leaf tensors with ``requires_grad``.
``sample(generators, n, *, device, dtype) -> dict[str, Tensor]``
    ``n`` i.i.d. samples per seed from the model's data law, each tensor ``(S, n, ...)``; seed ``s`` from
    ``generators[s]`` (use :func:`per_seed`). Used for training data, the fixed dataset and the evaluation batch.
``loss(params, batch, hyper) -> Tensor``
    Per-seed loss ``(S,)`` on a batch ``(S, B, ...)`` (mean over the batch, with the paper's normalisation);
    ``hyper`` maps each name of ``config.schedules`` to its float value at the current step (e.g. ``{"lam": 1.9}``).
``probes(params) -> dict[str, Tensor]``
    Order parameters ``(S,)`` computed from the weights with the definitions of docs/models (e.g. ``kappa``,
    ``nu``), named exactly as in the closed form. A probe named in ``probe_dims`` is an array per seed,
    ``(S, *shape)`` (below).

Optional:

``draw(rng, n, *, device, dtype) -> dict[str, Tensor]``
    The same law as ``sample``, drawn from ``rng``, an :class:`empirical.seeding.BlockRNG` that draws for all seeds
    in one call (``rng.normal(shape)``, ``rng.integers(high, shape)``, ``rng.uniform(shape)``, each ``(S, *shape)``).
    If present, the trainer uses it instead of ``sample`` for the training data, the fixed dataset and the evaluation
    batch: online, block ``b`` (steps ``[b refill, (b + 1) refill)``) starts a generator keyed by ``(seed, "data",
    b)`` and each step draws its ``batch_size`` samples from it in turn (a contiguous batch, recycled buffers); the
    fixed dataset is block 0 of ``data``, the evaluation batch block 0 of ``eval``. Seed ``s`` still draws exactly the
    numbers of its single-seed run (each seed's state depends only on ``(seed, stream, block)`` and its own draws),
    and a resumed run replays the draws of its block from the block's start.
``sphere_params: tuple[str, ...]``
    Parameters whose last axis lives on the unit sphere. Before each optimiser step their gradient is projected on
    the tangent space, ``g <- g - (g.w) w``, and after it they are renormalised, ``w <- w / |w|`` (projected SGD of
    docs/models/single_location.md §6.1, §8.4; with momentum or Adam the projected gradient feeds the optimiser).
``project(params) -> None``
    Any other constraint, applied in place (under ``no_grad``) after each step.
``evaluate(params, batch, hyper) -> dict[str, Tensor]``
    Metrics ``(S,)`` on the fixed evaluation batch; default ``{"loss": loss(params, batch, hyper)}``. Use it to log
    the quantity under the closed form's name (e.g. ``{"risk": mse - eps**2}``).
``probe_dims: Mapping[str, tuple[str, ...]]`` and ``probe_coords: Mapping[str, Sequence]``
    Array probes. ``probe_dims[name]`` names the extra dims of probe ``name``, which must then be a tensor
    ``(S, *shape)`` with ``len(shape) == len(probe_dims[name])`` (e.g. ``{"z": ("query_token", "token")}`` for a
    ``(S, Q, Lc)`` matrix of logits); every other probe and every evaluation metric stays ``(S,)``. The output
    stores each array probe as ONE variable of dims ``(trajectory, time, *probe_dims[name])``, the closed form's
    layout, so the two align and subtract as they are. ``probe_coords[dim]`` labels a dim (length = its size); a
    dim without an entry gets ``0 .. size - 1`` (0-based ids, as in the docs pages). Probes sharing a dim name
    must agree on its size. Checkpoints store the records as ``(S, n_logged, *shape)``; the shape of a probe may not
    change during a run.
``time_of_step(step: ndarray) -> ndarray`` and ``time_unit: str`` (both optional)
    The model's time axis; default ``time = step`` (no ``time_of_step`` method), unit ``"step"``. A unit that
    names an optimiser ("Adam step n ...") is rewritten to name the one the run used (``config.optimizer``), so a
    trajectory's ``time_unit`` always follows the optimiser that produced it; the ``optimizer`` attribute records
    it too.
``spec``
    The model's frozen spec dataclass; stored in the output attrs and compared when resuming.
``schedule_names: tuple[str, ...]``
    Names the model reads from ``hyper``; if given, ``config.schedules`` must provide exactly these.

Step convention (docs/models/single_location.md §0.3, docs/models/scan_snap.md §0.2)
------------------------------------------------------------------------------------
Step ``n`` is the state after ``n`` updates; update ``n`` maps iterate ``n`` to ``n + 1`` with learning rate
``config.lr.at(n)`` and hyper-parameters ``config.schedules[k].at(n)``. The row logged at step ``n`` holds the probes
of iterate ``n`` and the evaluation metrics of iterate ``n`` at the hyper-parameters of step ``n``. Rows are logged at
``config.saveat.resolve_steps(config.n_steps)`` under ``torch.no_grad``.

Data
----
Online (``config.dataset_size is None``): fresh samples every step. The ``data`` stream of each seed is consumed in
blocks of ``config.refill`` steps (``refill * batch_size`` samples per draw with ``sample``; one draw per step from
the block's counter-keyed generator with ``draw``), aligned to absolute steps, so the stream depends on
``(seed, refill, batch_size)`` only: a shorter run is a prefix of a longer one. Fixed dataset
(``dataset_size = N``): ``N`` samples per seed drawn once from ``data``; full-batch gradient descent when
``batch_size == N``, else minibatches of consecutive slices of a per-epoch permutation from ``sgd``
(``N // batch_size`` steps per epoch; the remainder of each permutation is dropped). The evaluation batch
(``config.eval_size`` samples per seed, 0 = none) is drawn once from ``eval``.

Checkpoints and resume
----------------------
With ``checkpoint_path`` and ``config.checkpoint_every = K > 0``, a checkpoint is written atomically at every step
that is a positive multiple of ``K`` and at the last step. It is a state dict (loaded with ``weights_only=True``)::

    {"format": "attndyn.train/1", "identity": {"config", "model", "dtype", "device", "streams"},  # strings
     "step": int, "params": {name: Tensor}, "optimizer": optimizer.state_dict(),
     "block": {"index": int, "states": [generator state at the start of the current data block, per seed;
                                        empty for counter streams, which need only the index]},
     "records": {"steps": Tensor[int64], "values": {name: Tensor (S, n_logged, *probe shape)}}}

``train(..., resume=True)`` loads it, refuses another configuration (naming the differing field, e.g.
``config.lr.value``), restores parameters, optimiser and generator states (re-drawing the current data block from
its saved start state) and continues; on the same device and dtype the result is bit-identical to an uninterrupted
run. A non-finite loss, parameter or logged value raises ``dynamics.DivergenceError`` naming the seed index, the
step and the variable; checkpoints are written only from finite states, so the last good one is kept.

Worked example
--------------
A unit vector ``w`` on the sphere learning a teacher direction by online projected SGD (squared loss)::

    import torch
    from empirical.train import Schedule, TrainConfig, per_seed, train
    from dynamics.saveat import SaveAt

    class Teacher:
        name = "teacher_sphere"
        sphere_params = ("w",)

        def __init__(self, d):
            self.d = d
            self.w_star = torch.zeros(d, dtype=torch.float64)
            self.w_star[0] = 1.0

        def init_params(self, generators, *, device, dtype):
            def draw(g):
                w = torch.randn(self.d, generator=g, device=device, dtype=dtype)
                return {"w": w / w.norm()}
            return per_seed(generators, draw)

        def sample(self, generators, n, *, device, dtype):
            return per_seed(generators, lambda g: {"x": torch.randn(n, self.d, generator=g, device=device,
                                                                   dtype=dtype)})

        def loss(self, params, batch, hyper):
            w_star = self.w_star.to(batch["x"])
            err = (batch["x"] * (params["w"][:, None, :] - w_star)).sum(-1)   # (S, B)
            return 0.5 * (err ** 2).mean(-1)                                  # (S,)

        def probes(self, params):
            return {"m": (params["w"] * self.w_star.to(params["w"])).sum(-1)}  # overlap m = w.w*

    config = TrainConfig(seeds=range(30), n_steps=2000, batch_size=8, lr=Schedule(value=0.05),
                         saveat=SaveAt(every=100), checkpoint_every=500)
    traj = train(Teacher(d=50), config, device="auto", checkpoint_path="results/teacher/ckpt.pt")
    traj["m"]                     # (trajectory=30 seeds, time=21), coords step and time
    traj["loss"]                  # loss of each iterate on the fixed evaluation batch

Rerunning with ``resume=True`` after a kill continues from the last checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import pathlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol, runtime_checkable

import numpy as np
import torch

from dynamics.errors import DivergenceError
from dynamics.provenance import to_jsonable
from dynamics.saveat import SaveAt
from dynamics.trajectory import Trajectory
from dynamics.validation import (
    Instance,
    Range,
    callable_check,
    check_choice,
    check_in_range,
    check_int,
    check_nonneg,
    check_positive,
    seed_or_seeds_check,
    sequence_check,
    validate_module,
)
from empirical.checkpoint import check_compatible, load_checkpoint, save_checkpoint
from empirical.device import resolve, resolve_dtype
from empirical.seeding import BlockRNG, check_seeds, stream_generators, stream_keys

__all__ = ["CHECKPOINT_FORMAT", "Schedule", "TorchModel", "TrainConfig", "per_seed", "train"]

log = logging.getLogger(__name__)

#: Version tag stored in every checkpoint; a checkpoint with another tag is refused.
CHECKPOINT_FORMAT = "attndyn.train/1"
#: Checkpoint identity field ``streams``: which data streams a run used (a checkpoint of the other kind is refused).
_STREAMS_TORCH = "torch.Generator per seed"
_STREAMS_COUNTER = "empirical.seeding.BlockRNG/1 (SFC64 keyed by seed, stream, block; ziggurat)"

Tensors = dict[str, torch.Tensor]


# ---------------------------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A scalar that varies with the update index ``n`` (learning rate, inverse temperature, ...).

    ``kind``:

    * ``"constant"``: ``value``;
    * ``"inverse_time"``: ``value / (1 + rate * n)`` (e.g. docs/models/single_location.md §6.1: ``lam_n = lam_0/(1 +
      1e-4 n)``);
    * ``"exponential"``: ``value * gamma ** (n // every)`` (torch's ``StepLR``; ``every = 1`` is ``ExponentialLR``).

    Fields that a kind does not use must keep their defaults (a ``rate`` on a constant schedule is refused).
    """

    value: float
    kind: str = "constant"
    rate: float = 0.0
    gamma: float = 1.0
    every: int = 1

    def __post_init__(self):
        check_choice("Schedule.kind", self.kind, ("constant", "inverse_time", "exponential"))
        object.__setattr__(self, "value", _finite("Schedule.value", self.value))
        object.__setattr__(self, "rate", check_nonneg("Schedule.rate", self.rate))
        object.__setattr__(self, "gamma", check_positive("Schedule.gamma", self.gamma))
        object.__setattr__(self, "every", check_int("Schedule.every", self.every, min_value=1))
        if self.kind != "inverse_time" and self.rate != 0.0:
            raise ValueError(
                f"Schedule.rate applies only to kind='inverse_time'; got rate={self.rate} with kind={self.kind!r}"
            )
        if self.kind != "exponential" and (self.gamma != 1.0 or self.every != 1):
            raise ValueError(
                f"Schedule.gamma and Schedule.every apply only to kind='exponential'; got "
                f"gamma={self.gamma}, every={self.every} with kind={self.kind!r}"
            )

    def at(self, step: int) -> float:
        """Value used by update ``step`` (0-based; update ``n`` maps iterate ``n`` to ``n + 1``)."""
        if self.kind == "constant":
            return self.value
        if self.kind == "inverse_time":
            return self.value / (1.0 + self.rate * step)
        return self.value * self.gamma ** (step // self.every)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything that determines a training run's numbers, serialised to JSON with the run and its checkpoints.

    Parameters
    ----------
    seeds : sequence of int
        Distinct seeds >= 0, trained together along the leading seed axis (an int is one seed).
    n_steps : int >= 0
        Number of updates (>= 0).
    batch_size : int
        Samples per seed per update (>= 1).
    lr : Schedule or float
        Learning rate of update ``n`` (a float is a constant schedule); must be > 0 at step 0.
    optimizer : {"sgd", "adam"}
        ``torch.optim.SGD`` (heavy-ball ``momentum``, dampening 0, no Nesterov, no weight decay) or
        ``torch.optim.Adam`` (``betas``, ``adam_eps``, no weight decay).
    momentum : float
        SGD heavy-ball momentum in [0, 1); must be 0 for Adam.
    betas, adam_eps : Adam's coefficients (torch defaults); ignored by SGD.
    lr_scale : mapping name -> float
        Per-parameter learning-rate multipliers (default 1), e.g. ``{"Y": eta_Y, "Z": eta_Z}`` with ``lr=1``.
        Stored, like ``schedules``, as a sorted tuple of ``(name, value)`` pairs (hashable); ``dict(...)`` reads it.
    schedules : mapping name -> Schedule or float
        Model hyper-parameters that vary with the step (e.g. ``{"lam": Schedule(value=2, kind="inverse_time",
        rate=1e-4)}``), passed to the model as ``hyper``.
    dataset_size : int or None
        ``None``: online (fresh samples every step). An int ``N >= batch_size``: a fixed dataset of ``N`` samples per
        seed.
    eval_size : int >= 0
        Size of the fixed evaluation batch per seed (>= 0; 0 logs no evaluation metrics).
    saveat : dynamics.SaveAt
        Steps at which probes and metrics are logged (``SaveAt(every=...)``, ``steps=``, ``n=``, ``log=``,
        ``final=True``).
    checkpoint_every : int
        Write a checkpoint every this many steps and at the end (0 = never; needs ``checkpoint_path``).
    refill : int
        Online mode: steps of fresh data drawn per seed at once (>= 1). Part of the data stream's definition;
        ``S * refill * batch_size`` samples are held in memory at a time.
    dtype : {"float64", "float32"}
        Precision; float64 for every theory comparison.
    """

    seeds: Annotated[tuple[int, ...], seed_or_seeds_check]
    n_steps: Annotated[int, Range(integer=True, ge=0)]
    batch_size: int
    lr: Annotated[Schedule | float, None]
    optimizer: str = "sgd"
    momentum: float = 0.0
    betas: Annotated[tuple[float, float], sequence_check] = (0.9, 0.999)
    adam_eps: float = 1e-8
    lr_scale: Annotated[Mapping[str, float], None] = field(default_factory=dict)
    schedules: Annotated[Mapping[str, Schedule | float], None] = field(default_factory=dict)
    dataset_size: int | None = None
    eval_size: Annotated[int, Range(integer=True, ge=0)] = 1000
    saveat: SaveAt = field(default_factory=lambda: SaveAt(n=201))
    checkpoint_every: int = 0
    refill: int = 32
    dtype: str = "float64"

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("seeds", check_seeds(self.seeds))
        put("n_steps", check_int("n_steps", self.n_steps, min_value=0))
        put("batch_size", check_int("batch_size", self.batch_size, min_value=1))
        put("lr", _as_schedule("lr", self.lr))
        if not self.lr.value > 0:
            raise ValueError(f"lr must be > 0 at step 0; got {self.lr.value}")
        put("optimizer", check_choice("optimizer", self.optimizer, ("sgd", "adam")))
        put("momentum", check_in_range("momentum", self.momentum, 0.0, 1.0, high_open=True))
        if self.optimizer == "adam" and self.momentum != 0.0:
            raise ValueError(
                f"momentum applies only to optimizer='sgd' (Adam uses betas); got momentum={self.momentum}"
            )
        betas = tuple(self.betas)
        if len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2); got {self.betas!r}")
        put("betas", tuple(check_in_range(f"betas[{i}]", b, 0.0, 1.0, high_open=True) for i, b in enumerate(betas)))
        put("adam_eps", check_positive("adam_eps", self.adam_eps))
        put("lr_scale", _frozen_mapping("lr_scale", self.lr_scale, lambda k, v: check_positive(f"lr_scale[{k!r}]", v)))
        put(
            "schedules", _frozen_mapping("schedules", self.schedules, lambda k, v: _as_schedule(f"schedules[{k!r}]", v))
        )
        if self.dataset_size is not None:
            put("dataset_size", check_int("dataset_size", self.dataset_size, min_value=self.batch_size))
        put("eval_size", check_int("eval_size", self.eval_size, min_value=0))
        if not isinstance(self.saveat, SaveAt):
            raise ValueError(f"saveat must be a dynamics.SaveAt; got {self.saveat!r}")
        self.saveat.resolve_steps(self.n_steps)  # raises ValueError for ts= or steps outside [0, n_steps]
        put("checkpoint_every", check_int("checkpoint_every", self.checkpoint_every, min_value=0))
        put("refill", check_int("refill", self.refill, min_value=1))
        put("dtype", str(resolve_dtype(self.dtype)).removeprefix("torch."))  # refuses float16 with a clear message

    @property
    def n_seeds(self) -> int:
        """Number of seeds trained together (length of the seed axis)."""
        return len(self.seeds)

    def save_steps(self) -> np.ndarray:
        """The logged steps, ``saveat.resolve_steps(n_steps)`` (sorted int64)."""
        return self.saveat.resolve_steps(self.n_steps)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (mappings as dicts, schedules and ``saveat`` as dicts of their fields)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("lr_scale", "schedules"):
                value = {k: (dataclasses.asdict(v) if isinstance(v, Schedule) else v) for k, v in value}
            elif isinstance(value, Schedule | SaveAt):
                value = dataclasses.asdict(value)
            out[f.name] = to_jsonable(value)
        return out

    def to_json(self) -> str:
        """Deterministic JSON text of :meth:`to_dict` (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        """Rebuild a config from :meth:`to_json` output (round trip)."""
        d = json.loads(text)
        saveat = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d["saveat"].items()}
        d["saveat"] = SaveAt(**saveat)
        d["betas"] = tuple(d["betas"])
        return cls(**d)


def _finite(name, value) -> float:
    return check_in_range(name, value, -math.inf, math.inf)  # raises "must be finite" for nan/inf


def _as_schedule(name, value) -> Schedule:
    if isinstance(value, Schedule):
        return value
    if isinstance(value, Mapping):
        return Schedule(**value)
    return Schedule(value=_finite(name, value))


def _frozen_mapping(name, value, convert) -> tuple[tuple[str, Any], ...]:
    """Store a mapping as a sorted tuple of ``(key, value)`` pairs (hashable, immutable)."""
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping from parameter names to values; got {value!r}")
    return tuple(sorted((str(k), convert(k, v)) for k, v in value.items()))


# ---------------------------------------------------------------------------------------------------------------
# Model protocol and helpers


@runtime_checkable
class TorchModel(Protocol):
    """The methods every paper model implements (see the module docstring for the optional ones)."""

    name: str

    def init_params(
        self, generators: Sequence[torch.Generator], *, device: torch.device, dtype: torch.dtype
    ) -> Tensors:
        """Initial parameters of every seed, each tensor ``(S, ...)``, seed ``s`` drawn from ``generators[s]``."""

    def sample(
        self, generators: Sequence[torch.Generator], n: int, *, device: torch.device, dtype: torch.dtype
    ) -> Tensors:
        """``n`` samples per seed from the model's data law, each tensor ``(S, n, ...)``."""

    def loss(self, params: Tensors, batch: Tensors, hyper: Mapping[str, float]) -> torch.Tensor:
        """Per-seed loss ``(S,)`` of ``params`` on ``batch`` with the hyper-parameters ``hyper``."""

    def probes(self, params: Tensors) -> Tensors:
        """The quantities logged per seed (each tensor ``(S, ...)``) from ``params``."""


def _probe_dims(model) -> dict[str, tuple[str, ...]]:
    """The model's ``probe_dims`` (module docstring) as ``{name: tuple of dim names}``, checked."""
    raw = getattr(model, "probe_dims", None) or {}
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"{model.name}.probe_dims must be a mapping probe name -> tuple of dim names; got {type(raw).__name__}"
        )
    out = {}
    for name, dims in raw.items():
        dims = (dims,) if isinstance(dims, str) else tuple(dims)
        if not dims or not all(isinstance(d, str) and d for d in dims) or len(set(dims)) != len(dims):
            raise ValueError(
                f"{model.name}.probe_dims[{name!r}] must be a non-empty tuple of distinct dim names; got {raw[name]!r}"
            )
        if set(dims) & {"trajectory", "time"}:
            raise ValueError(f"{model.name}.probe_dims[{name!r}] may not reuse the dims 'trajectory' or 'time'")
        out[str(name)] = dims
    return out


def per_seed(
    generators: Annotated[Sequence[torch.Generator], sequence_check],
    draw: Annotated[Callable[[torch.Generator], Tensors], callable_check],
) -> Tensors:
    """Call ``draw(g)`` for each seed's generator and stack the returned dicts along a new leading seed axis.

    ``draw`` returns ``{name: Tensor}`` with the same names and shapes for every seed. This is the only place a
    model loops over seeds, and the trainer calls it once per data block, not per step.
    """
    draws = [draw(g) for g in generators]
    if not draws:
        raise ValueError("generators must be a non-empty sequence (one per seed)")
    names = list(draws[0])
    for d in draws[1:]:
        if list(d) != names:
            raise ValueError(f"draw must return the same names for every seed; got {names} and {list(d)}")
    return {name: torch.stack([d[name] for d in draws]) for name in names}


# ---------------------------------------------------------------------------------------------------------------
# The trainer


def train(
    model: TorchModel,
    config: TrainConfig,
    *,
    device: str | torch.device = "auto",
    checkpoint_path: Annotated[Any, Instance(str, os.PathLike)] = None,
    resume: bool = False,
    progress: bool = False,
    return_params: bool = False,
) -> Trajectory | tuple[Trajectory, Tensors]:
    """Train ``model`` for all ``config.seeds`` at once and return the logged order parameters as a Trajectory.

    Parameters
    ----------
    model : TorchModel
        The paper model (protocol in the module docstring).
    config : TrainConfig
        What determines the numbers of the run.
    device : str or torch.device
        ``"auto"`` (CUDA if present, else CPU), ``"cpu"``, ``"cuda[:i]"``; see :func:`empirical.device.resolve`.
        Deterministic mode is switched on and TF32 off.
    checkpoint_path : path-like, optional
        Where checkpoints are written (needs ``config.checkpoint_every > 0``) and read from (``resume=True``).
    resume : bool
        Continue from the checkpoint at ``checkpoint_path`` (which must exist and match the configuration).
    progress : bool
        Show a tqdm progress bar.
    return_params : bool
        Also return the final parameters (detached, with the seed axis).

    Returns
    -------
    Trajectory
        Dims ``(trajectory, time)``, coordinate ``trajectory`` = the seeds, ``step`` = the logged steps, ``time`` =
        ``model.time_of_step(step)`` when the model has that method, else the step itself; one variable per probe
        and evaluation metric (an array probe with its ``probe_dims`` and their coordinates; ``state_names`` lists
        the scalar ones); attrs ``model``, ``source = "torch"``, ``device``, ``dtype``, ``seeds``, ``config_json``,
        ``spec_json`` (if the model has a ``spec``), ``optimizer`` and ``time_unit`` (the model's, default
        ``"step"``, naming the optimiser that ran; see the protocol above).

    Raises
    ------
    ValueError
        Bad configuration, a model that breaks the protocol's shapes, or a checkpoint of another configuration.
    dynamics.DivergenceError
        A non-finite loss, parameter or logged value; ``trajectory`` is the seed index, ``step`` the step, and
        ``partial`` the Trajectory of every record logged before it (all seeds; None if nothing was logged).
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig; got {type(config).__name__}")
    for attr in ("name", "init_params", "sample", "loss", "probes"):
        if not hasattr(model, attr):
            raise ValueError(f"model must implement {attr!r} (see empirical.train.TorchModel)")
    if config.checkpoint_every and checkpoint_path is None:
        raise ValueError("checkpoint_every > 0 needs a checkpoint_path")
    if resume and checkpoint_path is None:
        raise ValueError("resume=True needs a checkpoint_path")
    wanted = getattr(model, "schedule_names", None)
    if wanted is not None and set(wanted) != {k for k, _ in config.schedules}:
        raise ValueError(
            f"schedules must provide exactly {sorted(wanted)} for model {model.name!r}; "
            f"got {sorted(k for k, _ in config.schedules)}"
        )
    fresh = not resume and checkpoint_path is not None and config.checkpoint_every
    if fresh and pathlib.Path(checkpoint_path).exists():
        log.warning(
            "starting afresh: the checkpoint at %s will be overwritten (pass resume=True to continue it)",
            checkpoint_path,
        )
    placement = resolve(device, config.dtype)
    run = _Run(model, config, placement.device, placement.dtype, checkpoint_path)
    if resume:
        run.restore()
    run.loop(progress)
    traj = run.trajectory()
    if return_params:
        return traj, {k: v.detach().clone() for k, v in run.params.items()}
    return traj


_OPTIMIZER_NAMES = {"sgd": "SGD", "adam": "Adam"}


def _time_unit(model, optimizer: str) -> str:
    """The model's ``time_unit`` (default ``"step"``) with any other optimiser's name replaced by ``optimizer``'s."""
    unit = str(getattr(model, "time_unit", "step"))
    own = _OPTIMIZER_NAMES[optimizer]
    for key, name in _OPTIMIZER_NAMES.items():
        if key != optimizer:
            unit = re.sub(rf"\b{name}\b", own, unit)
    return unit


class _Run:
    """State of one training run (parameters, optimiser, streams, data block, records) and its loop."""

    def __init__(self, model, config: TrainConfig, device: torch.device, dtype: torch.dtype, checkpoint_path):
        self.model, self.config, self.device, self.dtype = model, config, device, dtype
        self.path = None if checkpoint_path is None else pathlib.Path(checkpoint_path)
        self.S = config.n_seeds
        self.gens = stream_generators(config.seeds, device)
        # Counter-keyed block streams for the data and evaluation draws when the model implements `draw`.
        self.draw = getattr(model, "draw", None)
        self.keys = (
            {name: stream_keys(config.seeds, name) for name in ("data", "eval")} if self.draw is not None else None
        )
        self.identity = {
            "config": config.to_json(),
            "model": json.dumps(
                to_jsonable({"name": model.name, "spec": getattr(model, "spec", None)}), sort_keys=True
            ),
            "dtype": str(dtype).removeprefix("torch."),
            "device": device.type,
            "streams": _STREAMS_COUNTER if self.draw is not None else _STREAMS_TORCH,
        }
        self.params = self._init_params()
        self.sphere = tuple(getattr(model, "sphere_params", ()))
        for name in self.sphere:
            if name not in self.params:
                raise ValueError(
                    f"sphere_params names {name!r}, which is not a parameter of {model.name!r}; "
                    f"parameters: {sorted(self.params)}"
                )
        self.project = getattr(model, "project", None)
        self.probe_dims = _probe_dims(model)
        self.optimizer, self.lr_scales = self._optimizer()
        self.schedules = tuple(config.schedules)
        self.eval_batch = self._sample("eval", config.eval_size) if config.eval_size else None
        self.evaluate = getattr(model, "evaluate", None)
        # Data: online blocks of `refill` steps from `data`, or a fixed dataset (+ per-epoch permutations from `sgd`).
        n, B = config.dataset_size, config.batch_size
        if n is None:
            self.dataset, self.block_len = None, config.refill
            self.block_gens = [] if self.draw is not None else self.gens["data"]  # counter streams keep no state
            self.block_pool: list = []  # buffers recycled from one online step to the next (BlockRNG pool)
            self.block_rng, self.block_pos = None, 0  # counter streams: the block's generator, steps drawn from it
        else:
            self.dataset = self._sample("data", n)
            self.block_len, self.block_gens = (n // B, self.gens["sgd"]) if n != B else (1, [])
        self.seed_index = torch.arange(self.S, device=device)[:, None]
        self.block = None
        self.block_index = -1
        self.block_states: list[torch.Tensor] = []
        # Logging.
        self.save_steps = config.save_steps()
        self.rec_steps: list[int] = []
        self.records: dict[str, list[torch.Tensor]] = {}
        self.step = 0

    # -- setup ----------------------------------------------------------------------------------------------------

    def _init_params(self) -> Tensors:
        raw = self.model.init_params(self.gens["init"], device=self.device, dtype=self.dtype)
        if not isinstance(raw, Mapping) or not raw:
            raise ValueError(f"{self.model.name}.init_params must return a non-empty dict of tensors")
        params = {}
        for name, t in raw.items():
            self._check_seed_tensor(f"init_params()[{name!r}]", t)
            params[name] = t.detach().clone().requires_grad_(True)
        return params

    def _check_seed_tensor(self, what, t, ndim=None, any_float=False):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{self.model.name}: {what} must be a torch.Tensor; got {type(t).__name__}")
        if t.ndim < 1 or t.shape[0] != self.S or (ndim is not None and t.ndim != ndim):
            want = (
                f"({self.S},)"
                if ndim == 1
                else f"({self.S}, ...)"
                if ndim is None
                else f"({self.S}, <{ndim - 1} dims of probe_dims>)"
            )
            raise ValueError(
                f"{self.model.name}: {what} must have shape {want} (leading seed axis); got {tuple(t.shape)}"
            )
        dtype_ok = t.dtype.is_floating_point if any_float else t.dtype == self.dtype
        if not dtype_ok or t.device.type != self.device.type:
            want = "a floating dtype" if any_float else self.dtype
            raise ValueError(f"{self.model.name}: {what} must be {want} on {self.device}; got {t.dtype} on {t.device}")

    def _optimizer(self):
        c = self.config
        scales = dict(c.lr_scale)
        unknown = sorted(set(scales) - set(self.params))
        if unknown:
            raise ValueError(
                f"lr_scale names {unknown}, which are not parameters of {self.model.name!r}; "
                f"parameters: {sorted(self.params)}"
            )
        lr0 = c.lr.at(0)
        groups = [{"params": [p], "lr": lr0 * scales.get(name, 1.0)} for name, p in self.params.items()]
        if c.optimizer == "sgd":
            opt = torch.optim.SGD(groups, lr=lr0, momentum=c.momentum)
        else:
            opt = torch.optim.Adam(groups, lr=lr0, betas=c.betas, eps=c.adam_eps)
        return opt, [scales.get(name, 1.0) for name in self.params]

    def _sample(self, stream: str, n: int, rng: BlockRNG | None = None) -> Tensors:
        """``n`` samples per seed from ``stream``: from ``rng`` or block 0 of the counter streams (model ``draw``),
        else from the seeds' torch generators of that stream (model ``sample``).
        """
        if self.draw is not None:
            rng = BlockRNG(self.keys[stream], 0, self.device) if rng is None else rng
            batch = self.draw(rng, n, device=self.device, dtype=self.dtype)
        else:
            batch = self.model.sample(self.gens[stream], n, device=self.device, dtype=self.dtype)
        if not isinstance(batch, Mapping) or not batch:
            raise ValueError(f"{self.model.name}.sample must return a non-empty dict of tensors")
        for name, t in batch.items():
            self._check_seed_tensor(f"sample()[{name!r}]", t)
            if t.ndim < 2 or t.shape[1] != n:
                raise ValueError(
                    f"{self.model.name}: sample()[{name!r}] must have shape ({self.S}, {n}, ...); got {tuple(t.shape)}"
                )
        return dict(batch)

    # -- data -----------------------------------------------------------------------------------------------------

    def _draw_block(self, index: int) -> None:
        """Draw data block ``index`` (steps ``[index * block_len, (index + 1) * block_len)``)."""
        self.block_states = [g.get_state() for g in self.block_gens]
        c = self.config
        if self.dataset is None:
            self.block = self._sample("data", c.refill * c.batch_size)
        elif self.block_gens:
            self.block = torch.stack(
                [torch.randperm(c.dataset_size, generator=g, device=self.device) for g in self.block_gens]
            )
        else:
            self.block = None  # full-batch gradient descent
        self.block_index = index

    def _batch(self, step: int) -> Tensors:
        index, j = divmod(step, self.block_len)
        if self.dataset is None and self.draw is not None:
            # Counter streams: block `index` starts a generator keyed by (seed, "data", index); step j of the block is
            # its j-th draw of batch_size samples (a contiguous batch, written into recycled buffers). A resumed run
            # replays the draws of the block's earlier steps.
            if index != self.block_index or j < self.block_pos:
                self.block_rng = BlockRNG(self.keys["data"], index, self.device, self.block_pool)
                self.block_index, self.block_pos = index, 0
            while True:
                self.block_rng.reuse()  # each step overwrites the previous step's buffers
                batch = self._sample("data", self.config.batch_size, self.block_rng)
                self.block_pos += 1
                if self.block_pos > j:
                    return batch
        if index != self.block_index:
            self._draw_block(index)
        B = self.config.batch_size
        if self.dataset is None:
            return {k: v[:, j * B : (j + 1) * B] for k, v in self.block.items()}
        if self.block is None:
            return self.dataset
        idx = self.block[:, j * B : (j + 1) * B]
        return {k: v[self.seed_index, idx] for k, v in self.dataset.items()}

    # -- logging and checks ---------------------------------------------------------------------------------------

    def _hyper(self, step: int) -> dict[str, float]:
        return {name: sched.at(step) for name, sched in self.schedules}

    def _log(self, step: int) -> None:
        with torch.no_grad():
            values = dict(self.model.probes(self.params))
            if self.eval_batch is not None:
                hyper = self._hyper(step)
                metrics = (
                    self.evaluate(self.params, self.eval_batch, hyper)
                    if self.evaluate is not None
                    else {"loss": self.model.loss(self.params, self.eval_batch, hyper)}
                )
                clash = sorted(set(values) & set(metrics))
                if clash:
                    raise ValueError(f"{self.model.name}: probe and evaluation names clash: {clash}")
                values.update(metrics)
        if self.records and list(values) != list(self.records):
            raise ValueError(f"{self.model.name}: logged names changed from {list(self.records)} to {list(values)}")
        for name, v in values.items():
            self._check_seed_tensor(
                f"logged value {name!r}", v, ndim=1 + len(self.probe_dims.get(name, ())), any_float=True
            )
            if self.records.get(name) and self.records[name][0].shape != v.shape:
                raise ValueError(
                    f"{self.model.name}: logged value {name!r} changed shape from "
                    f"{tuple(self.records[name][0].shape)} to {tuple(v.shape)}"
                )
            self._check_finite(v, step, name)
            self.records.setdefault(name, []).append(v.detach().clone())
        self.rec_steps.append(step)

    def _check_finite(self, t: torch.Tensor, step: int, variable: str) -> None:
        finite = torch.isfinite(t.detach().reshape(self.S, -1)).all(dim=1)
        if not bool(finite.all()):
            i = int(torch.nonzero(~finite)[0, 0])
            time = float(np.asarray(self._time(np.asarray([step])))[0])
            raise DivergenceError(
                f"{self.model.name}: non-finite {variable} at step {step} for seed {self.config.seeds[i]} "
                f"(trajectory {i})"
                + (f"; last good checkpoint: {self.path}" if self.path is not None and self.path.exists() else ""),
                trajectory=i,
                variable=variable,
                step=step,
                time=time,
                partial=self._partial(),
            )

    def _partial(self) -> Trajectory | None:
        """The records logged so far (every seed, up to the last complete logging step) as a Trajectory; None when
        nothing was logged. Never raises: it is built while a DivergenceError is being raised.
        """
        n = len(self.rec_steps)
        if not n:
            return None
        complete = self.records
        try:
            self.records = {k: v[:n] for k, v in complete.items()}  # a step being logged may be half recorded
            return self.trajectory()
        except Exception:  # noqa: BLE001 - the divergence is the error to report, not a failure to package records
            return None
        finally:
            self.records = complete

    def _time(self, steps: np.ndarray) -> np.ndarray:
        fn = getattr(self.model, "time_of_step", None)
        return np.asarray(steps, dtype=np.float64) if fn is None else np.asarray(fn(steps), dtype=np.float64)

    # -- checkpoints ----------------------------------------------------------------------------------------------

    def _save(self) -> None:
        for name, p in self.params.items():
            self._check_finite(p, self.step, name)  # never write a non-finite state: the last good one is kept
        state = {
            "format": CHECKPOINT_FORMAT,
            "identity": dict(self.identity),
            "step": self.step,
            "params": {k: v.detach() for k, v in self.params.items()},
            "optimizer": self.optimizer.state_dict(),
            "block": {"index": self.block_index, "states": list(self.block_states)},
            "records": {
                "steps": torch.tensor(self.rec_steps, dtype=torch.int64),
                "values": {k: torch.stack(v, dim=1) for k, v in self.records.items()},
            },
        }
        save_checkpoint(self.path, state)
        log.info("checkpoint at step %d written to %s", self.step, self.path)

    def restore(self) -> None:
        """Load the checkpoint at ``self.path`` into this run (refusing another configuration)."""
        ckpt = load_checkpoint(self.path, map_location="cpu")  # generator states must stay CPU byte tensors
        if ckpt.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(
                f"{self.path}: unknown checkpoint format {ckpt.get('format')!r}; expected {CHECKPOINT_FORMAT!r}"
            )
        check_compatible(ckpt["identity"], self.identity, path=self.path)
        if sorted(ckpt["params"]) != sorted(self.params):
            raise ValueError(
                f"{self.path}: parameters {sorted(ckpt['params'])} differ from the model's {sorted(self.params)}"
            )
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(ckpt["params"][name])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.step = int(ckpt["step"])
        block = ckpt["block"]
        if block["index"] >= 0 and not (self.dataset is None and self.draw is not None):  # counter: re-drawn lazily
            for g, state in zip(self.block_gens, block["states"]):
                g.set_state(state)
            self._draw_block(int(block["index"]))
        self.rec_steps = [int(s) for s in ckpt["records"]["steps"]]
        self.records = {k: list(v.to(self.device).unbind(dim=1)) for k, v in ckpt["records"]["values"].items()}
        log.info("resumed from %s at step %d", self.path, self.step)

    # -- the loop -------------------------------------------------------------------------------------------------

    def loop(self, progress: bool) -> None:
        from tqdm.auto import tqdm

        c = self.config
        every = c.checkpoint_every if self.path is not None else 0
        save_steps = [int(s) for s in self.save_steps]
        next_save = len(self.rec_steps)
        first_step = self.step
        pbar = tqdm(total=c.n_steps, initial=first_step, desc=self.model.name, disable=not progress)
        params = list(self.params.values())
        sphere = [self.params[name] for name in self.sphere]
        groups = self.optimizer.param_groups
        try:
            for n in range(first_step, c.n_steps + 1):
                self.step = n
                if next_save < len(save_steps) and n == save_steps[next_save]:
                    self._log(n)
                    next_save += 1
                if every and n > first_step and (n % every == 0 or n == c.n_steps):
                    self._save()
                if n == c.n_steps:
                    break
                batch = self._batch(n)
                lr = c.lr.at(n)
                for group, scale in zip(groups, self.lr_scales):
                    group["lr"] = lr * scale
                for p in params:
                    p.grad = None
                loss = self.model.loss(self.params, batch, self._hyper(n))
                if n == first_step:
                    self._check_seed_tensor("loss(...)", loss, ndim=1)
                total = loss.sum()  # seeds never mix: d total / d params[s] = d loss[s] / d params[s]
                if not math.isfinite(total.item()):  # one sync per step; names the seed only on failure
                    self._check_finite(loss, n, "loss")
                total.backward()
                with torch.no_grad():
                    for w in sphere:
                        g = w.grad
                        g.sub_((g * w).sum(-1, keepdim=True) * w)
                    self.optimizer.step()
                    for w in sphere:
                        w.div_(torch.linalg.vector_norm(w, dim=-1, keepdim=True))
                    if self.project is not None:
                        self.project(self.params)
                if progress:
                    pbar.update(1)
        finally:
            pbar.close()

    # -- output ---------------------------------------------------------------------------------------------------

    def trajectory(self) -> Trajectory:
        steps = np.asarray(self.rec_steps, dtype=np.int64)
        values = {k: torch.stack(v, dim=1).cpu().numpy() for k, v in self.records.items()}  # (S, n_logged, ...)
        names = [k for k in values if k not in self.probe_dims]
        c, model = self.config, self.model
        attrs = {
            "model": model.name,
            "source": "torch",
            "time_unit": _time_unit(model, c.optimizer),
            "optimizer": c.optimizer,
            "device": str(self.device),
            "dtype": self.identity["dtype"],
            "seeds": json.dumps(list(c.seeds)),
            "config_json": self.identity["config"],
        }
        spec = getattr(model, "spec", None)
        if spec is not None:
            attrs["spec"] = spec
        seeds = np.asarray(c.seeds, dtype=np.int64)
        if names:
            Y = np.stack([values[k] for k in names], axis=-1)
            traj = Trajectory.from_arrays(
                Y, names=names, time=self._time(steps), step=steps, attrs=attrs, trajectory=seeds
            )
        else:  # array probes only: no scalar state
            traj = Trajectory.from_arrays(
                np.zeros((self.S, steps.size, 0)),
                names=[],
                time=self._time(steps),
                step=steps,
                attrs=attrs,
                trajectory=seeds,
            )
        arrays = {k: v for k, v in values.items() if k in self.probe_dims}
        if not arrays:
            return traj
        labels = dict(getattr(model, "probe_coords", None) or {})
        coords, data = {}, {}
        for name, v in arrays.items():
            dims = tuple(self.probe_dims[name])
            for dim, size in zip(dims, v.shape[2:]):
                if dim in coords and len(coords[dim]) != size:
                    raise ValueError(
                        f"{model.name}: dim {dim!r} has size {len(coords[dim])} in one probe and {size} in {name!r}"
                    )
                lab = np.asarray(labels[dim]) if dim in labels else np.arange(size)
                if lab.shape != (size,):
                    raise ValueError(
                        f"{model.name}: probe_coords[{dim!r}] must have {size} labels (the size of "
                        f"{name!r} along it); got shape {lab.shape}"
                    )
                coords[dim] = lab
            data[name] = (("trajectory", "time") + dims, v)
        return traj.assign(data).assign_coords({d: (d, lab) for d, lab in coords.items()})


# argument checks of the public entry points (dynamics.validation), on top of TrainConfig.__post_init__
validate_module(globals())
