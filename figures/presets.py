"""Presets, devices and the run configuration every figure's ``data`` function receives.

A *preset* is a size class shared by all figures; each figure declares its own parameters per preset in its
registration (``register(params={"tiny": {...}, "quick": {...}, "paper": {...}})``, see :mod:`figures.registry`), so
the sizes of one figure live next to its code and the framework can hash them. They become instances of the figure's
typed record (:mod:`figures.params`); a preset a figure leaves out falls back to a neighbouring one, with a message.

=========  ==========================================================================================================
preset     meaning
=========  ==========================================================================================================
``tiny``   the test size: every figure builds (data + plot) in a few seconds on one CPU core; used by the test suite
``quick``  CPU, the whole set of figures in minutes (the README's main command: ``python -m figures report``)
``paper``  the papers' sizes and repeat counts; GPU where training needs it (``--device auto`` picks CUDA if present)
=========  ==========================================================================================================

Devices: ``auto`` (CUDA when torch sees one, else CPU; via ``empirical.device``), ``cpu``, ``cuda``.
:func:`resolve_device` turns the request into ``"cpu"`` or ``"cuda"``; the resolved name is part of the cache key,
because CPU and GPU runs agree only statistically.

The configuration of one build, :class:`RunConfig`, is what :mod:`figures.cache` hashes: figure name, preset, seed,
resolved device, the figure's parameters for that preset and the code version (package version + git revision).

The seed rule (the one way figures derive their randomness)
-----------------------------------------------------------
A build has one seed ``s`` (``--seed``, default 0). Every random stream of a figure belongs to a named *run* of that
figure (``"train"``, ``"walks"``, ``"population"``, ``"p=0.5"``, ...) and is spawned from
``numpy.random.SeedSequence(entropy=s, spawn_key=(tag(figure), tag(run)))``, where ``tag`` is the CRC-32 of the
name (:func:`run_seed_sequence`); ``figure`` is the figure whose data is built (for figures that share data, the
figure that owns it; for runs that several figures of a model reuse, the model's name, through :func:`run_seeds` and
:func:`run_seed_sequence`). :meth:`RunConfig.generators` spawns numpy generators from it, :meth:`RunConfig.seeds`
draws the integer seeds of a run's repeats (torch trainer seeds, one per repeat, distinct, in ``[0, 2**31)``). Two
builds with different ``--seed`` therefore share no stream and, in practice, no trainer seed (a coincidence of two
31-bit integers is as rare as a hash collision; ``tests/figures/test_seeds.py`` checks that the seeds of ``--seed``
0-9 are disjoint), two runs of one figure are independent, and the same figure with the same seed always draws the
same numbers.
"""

from __future__ import annotations

import importlib.metadata
import json
import types
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dynamics.provenance import git_revision, to_jsonable
from dynamics.validation import check_choice, check_int
from figures.params import ParamsRecord

__all__ = [
    "PRESETS",
    "DEVICES",
    "DEFAULT_PRESET",
    "DEFAULT_SEED",
    "run_seed_sequence",
    "run_seeds",
    "check_preset",
    "check_device",
    "resolve_device",
    "code_version",
    "RunConfig",
]

PRESETS: dict[str, str] = {
    "tiny": "test size: every figure builds in seconds (used by the test suite)",
    "quick": "CPU, the whole set in minutes (README's main command)",
    "paper": "the papers' sizes and repeat counts; GPU where training needs it",
}
"""Preset name -> one-line description. The order is the order of increasing size."""

DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
"""Valid ``--device`` requests."""

DEFAULT_PRESET = "quick"
DEFAULT_SEED = 0


def _tag(name: str) -> int:
    """A stable 32-bit tag of a figure or run name (CRC-32 of its UTF-8 bytes; Python's own hash is salted)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"run and figure names must be non-empty strings; got {name!r}")
    return zlib.crc32(name.encode("utf-8"))


def run_seed_sequence(seed: int, figure: str, run: str) -> np.random.SeedSequence:
    """The :class:`numpy.random.SeedSequence` of run ``run`` of figure ``figure`` at build seed ``seed`` (the seed
    rule of this module's docstring).
    """
    seed = check_int("seed", seed, min_value=0)
    return np.random.SeedSequence(entropy=seed, spawn_key=(_tag(figure), _tag(run)))


def run_seeds(seed: int, figure: str, run: str, n: int) -> tuple[int, ...]:
    """``n`` distinct integer seeds in ``[0, 2**31)`` for the repeats of run ``run`` of ``figure`` at ``seed``
    (e.g. the trainer seeds of ``n`` torch runs); the first ``k`` are the same for every ``n >= k``.
    """
    n = check_int("n", n, min_value=1)
    out: list[int] = []
    words = run_seed_sequence(seed, figure, run).generate_state(2 * n + 8, dtype=np.uint64)
    for w in words:  # 31 bits: a valid seed for torch, numpy and the trainers; repeats (rare) are skipped
        v = int(w >> np.uint64(33))
        if v not in out:
            out.append(v)
        if len(out) == n:
            return tuple(out)
    raise RuntimeError(f"could not draw {n} distinct seeds for run {run!r} of {figure!r}")  # 2n + 8 words: never


def check_preset(preset: str) -> str:
    """Return ``preset`` if it is a known preset; else raise ``ValueError`` listing the valid choices."""
    return check_choice("preset", preset, tuple(PRESETS))


def check_device(device: str) -> str:
    """Return ``device`` if it is ``auto``, ``cpu`` or ``cuda``; else raise ``ValueError`` listing the choices."""
    return check_choice("device", device, DEVICES)


def resolve_device(device: str) -> str:
    """Resolve a device request to ``"cpu"`` or ``"cuda"``.

    ``cpu`` needs no torch. ``auto`` and ``cuda`` are resolved by :func:`empirical.device.resolve_device` (imported
    only then): ``auto`` picks CUDA when available, CPU otherwise; ``cuda`` without a CUDA device raises
    ``ValueError``. The device *type* is returned: figure code asks ``empirical`` for the torch device itself.
    """
    check_device(device)
    if device == "cpu":
        return "cpu"
    from empirical.device import resolve_device as resolve_torch_device

    return resolve_torch_device(device).type


def code_version() -> str:
    """``"<attndyn version>+<git describe --always --dirty>"``: the code part of every cache key."""
    try:
        version = importlib.metadata.version("attndyn")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"{version}+{git_revision()}"


def _frozen_params(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A figure's parameter record as it is (already frozen and checked), or a read-only copy of a mapping."""
    if isinstance(params, ParamsRecord):
        return params
    if not isinstance(params, Mapping):
        raise ValueError(f"params must be a mapping of JSON-serialisable values; got {type(params).__name__}")
    try:  # NaN/inf are rejected before to_jsonable could turn them into strings
        json.dumps(dict(params), allow_nan=False, default=to_jsonable)
    except ValueError as exc:
        raise ValueError(f"params must be JSON-serialisable without NaN/inf; got {params!r}") from exc
    return types.MappingProxyType(dict(params))


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything that determines the data of one figure build (hashed for the cache key).

    Parameters
    ----------
    figure : str
        Registered figure name, e.g. ``"single_location.fig4a"``.
    preset : str
        ``tiny`` | ``quick`` | ``paper``.
    seed : int
        The build's one seed (>= 0); figure code derives every stream from it by the seed rule (module docstring):
        ``cfg.seeds("train", n)`` for trainer seeds, ``cfg.generators("data", ["train", "test"])`` for numpy.
    device : str
        Resolved device, ``"cpu"`` or ``"cuda"`` (never ``"auto"``).
    params : Mapping[str, Any]
        The figure's own parameters for this preset (read-only), as declared at registration.
    code : str
        Code version, :func:`code_version`.
    overrides : tuple of str
        Names of the parameters set away from the preset (``--set``); recorded in the hash only when non-empty, so
        a build without overrides keeps its cache entry.
    params_from : str
        The preset whose parameters were used (a figure may define only some presets; default ``preset``);
        recorded in the hash only when it differs from ``preset``.
    progress : bool
        Whether the data function may show progress bars. Not part of the configuration hash.
    """

    figure: str
    preset: str
    seed: int = DEFAULT_SEED
    device: str = "cpu"
    params: Mapping[str, Any] = field(default_factory=dict)
    code: str = field(default_factory=code_version)
    overrides: tuple[str, ...] = ()
    params_from: str = ""
    progress: bool = field(default=False, compare=False)

    def __post_init__(self):
        if not isinstance(self.figure, str) or not self.figure:
            raise ValueError(f"figure must be a non-empty string; got {self.figure!r}")
        check_preset(self.preset)
        object.__setattr__(self, "seed", check_int("seed", self.seed, min_value=0))
        check_choice("device", self.device, ("cpu", "cuda"))
        object.__setattr__(self, "params", _frozen_params(self.params))
        if isinstance(self.overrides, str) or not all(isinstance(k, str) and k in self.params for k in self.overrides):
            raise ValueError(f"overrides must name parameters of params; got {self.overrides!r}")
        object.__setattr__(self, "overrides", tuple(sorted(set(self.overrides))))
        object.__setattr__(self, "params_from", check_preset(self.params_from or self.preset))

    def __hash__(self) -> int:
        return hash(self.to_json())

    def seeds(self, run: str, n: int) -> tuple[int, ...]:
        """``n`` integer seeds of run ``run`` of this build (:func:`run_seeds` with this figure and seed)."""
        return run_seeds(self.seed, self.figure, run, n)

    def generators(self, run: str, names: Sequence[str]) -> dict[str, np.random.Generator]:
        """One numpy generator per name, spawned from run ``run``'s seed sequence (:func:`run_seed_sequence`)."""
        from dynamics.random import spawn_generators

        return spawn_generators(run_seed_sequence(self.seed, self.figure, run), names)

    def to_dict(self) -> dict[str, Any]:
        """The hashed configuration as plain JSON values (``progress`` excluded)."""
        out = {
            "figure": self.figure,
            "preset": self.preset,
            "seed": self.seed,
            "device": self.device,
            "params": to_jsonable(dict(self.params)),
            "code": self.code,
        }
        if self.overrides:
            out["overrides"] = list(self.overrides)
        if self.params_from != self.preset:
            out["params_from"] = self.params_from
        return out

    def to_json(self) -> str:
        """Canonical JSON text of :meth:`to_dict` (sorted keys, no spaces): the input of the cache hash."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
