"""Presets, devices and the run configuration every figure's ``data`` function receives.

A *preset* is a size class shared by all figures; each figure declares its own parameters per preset in its
registration (``register(params={"tiny": {...}, "quick": {...}, "paper": {...}})``, see :mod:`figures.registry`), so
the sizes of one figure live next to its code and the framework can hash them. They become instances of the figure's
typed record (:mod:`figures.params`); a preset a figure leaves out falls back to a neighbouring one, with a message.

========  =====================================================================================================
preset    meaning
========  =====================================================================================================
``tiny``  the test size: every figure builds (data + plot) in a few seconds on one CPU core; used by the test suite
``quick`` CPU, the whole set of figures in minutes (the README's main command: ``python -m figures report``)
``paper`` the papers' sizes and repeat counts; GPU where training needs it (``--device auto`` picks CUDA if present)
========  =====================================================================================================

Devices: ``auto`` (CUDA when torch sees one, else CPU; via ``empirical.device``), ``cpu``, ``cuda``.
:func:`resolve_device` turns the request into ``"cpu"`` or ``"cuda"``; the resolved name is part of the cache key,
because CPU and GPU runs agree only statistically.

The configuration of one build, :class:`RunConfig`, is what :mod:`figures.cache` hashes: figure name, preset, seed,
resolved device, the figure's parameters for that preset and the code version (package version + git revision).
"""

from __future__ import annotations

import importlib.metadata
import json
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dynamics.provenance import git_revision, to_jsonable
from dynamics.validation import check_choice, check_int
from figures.params import ParamsRecord

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
        The run's one seed (>= 0); figure code spawns its streams from ``numpy.random.SeedSequence(seed)``, e.g.
        with ``dynamics.random.spawn_generators(cfg.seed, ["init", "sgd"])``.
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
        if isinstance(self.overrides, str) or not all(isinstance(k, str) and k in self.params
                                                      for k in self.overrides):
            raise ValueError(f"overrides must name parameters of params; got {self.overrides!r}")
        object.__setattr__(self, "overrides", tuple(sorted(set(self.overrides))))
        object.__setattr__(self, "params_from", check_preset(self.params_from or self.preset))

    def __hash__(self) -> int:
        return hash(self.to_json())

    def to_dict(self) -> dict[str, Any]:
        """The hashed configuration as plain JSON values (``progress`` excluded)."""
        out = {"figure": self.figure, "preset": self.preset, "seed": self.seed, "device": self.device,
               "params": to_jsonable(dict(self.params)), "code": self.code}
        if self.overrides:
            out["overrides"] = list(self.overrides)
        if self.params_from != self.preset:
            out["params_from"] = self.params_from
        return out

    def to_json(self) -> str:
        """Canonical JSON text of :meth:`to_dict` (sorted keys, no spaces): the input of the cache hash."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
