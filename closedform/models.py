"""The model contract and the one model registry of attndyn (Sec. "One shape for every model" of the API page).

A model is a :class:`Model` record: its name, the names of its state variables, its typed parameter record (the task
class), the data arrays its kernels read, its engine kernels (a map ``step(k, x, p, out)`` and/or a vector field
``rhs(t, x, p, out)``), the unit of its time axis and, optionally, its fixed points, ``classify``,
``theorem_predictions`` and the torch side (``build`` and the probe that maps weights to the state). Everything other
packages read about models comes from here: the CLI's and the report's model list, the torch model loader and the
documentation's API table.

Fields that name code hold either the object itself or a *reference* ``"package.module:attribute"`` (attributes may
be dotted, ``"module:Class.method"``), imported only when :meth:`Model.resolve` asks for it; so the records of this
module import neither the model modules nor torch.

The six built-in models are registered below. Other packages register theirs through the entry-point group
``attndyn.models`` (``importlib.metadata``): an entry point names a :class:`Model` (or an argument-free callable
returning one), e.g. in ``pyproject.toml``::

    [project.entry-points."attndyn.models"]
    my_model = "my_package.model:MODEL"

A package registering a model this way should keep the module the entry point names free of torch and of
``empirical``/``figures`` imports (reference them by name instead): the registry is read while those packages import.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "ENTRY_POINT_GROUP",
    "Model",
    "api_table",
    "get",
    "models",
    "names",
    "plugin_errors",
    "refresh",
    "register",
    "resolve",
]

ENTRY_POINT_GROUP = "attndyn.models"
"""The ``importlib.metadata`` entry-point group through which other packages register models."""

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_CODE_FIELDS = (
    "params",
    "step",
    "rhs",
    "map",
    "flow",
    "fixed_points",
    "classify",
    "theorem_predictions",
    "build",
    "probe",
)
_RESOLVABLE = _CODE_FIELDS + ("time_unit",)


def resolve(ref: Any) -> Any:
    """The object a reference ``"package.module:attribute.path"`` names (imported now); any other value unchanged.

    Raises
    ------
    ImportError, AttributeError
        If the module or the attribute does not exist (the message names the reference).
    """
    if not isinstance(ref, str) or not _REF.match(ref):
        return ref
    module_name, attr = ref.split(":", 1)
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(f"reference {ref!r}: {obj!r} has no attribute {part!r}") from None
    return obj


@dataclass(frozen=True, kw_only=True)
class Model:
    """The record every model implements, built-in or registered by another package (one contract for all).

    Parameters
    ----------
    name : str
        Identifier (letters, digits, underscores): the CLI's model name and the prefix of its figures' names.
    title : str
        One line: the model and its paper.
    state_names : tuple of str
        The reduced state's variables, in the kernels' order (for a state whose size depends on the task, the name
        pattern of one block, e.g. ``("omega_h", "mu_h")``).
    params : type or reference
        The typed parameter record (a frozen dataclass; the "task class").
    time_unit : str or reference
        The unit of the time axis of the model's trajectories (the text, or a reference to it).
    step, rhs : callable, reference or None
        Engine kernels: the reduced map ``step(k, x, p, out)`` and the vector field ``rhs(t, x, p, out)`` (see
        :func:`dynamics.iterate`, :func:`dynamics.integrate`); at least one is given.
    map, flow : callable, reference or None
        The model's user-level reduced map and flow (``Trajectory``-returning functions of the task).
    data : tuple of str
        Names of the data arrays (samples, tables, index arrays) the kernels read next to the parameter row; empty
        for a model whose kernels read parameters only.
    fixed_points, classify, theorem_predictions : callable, reference or None
        Optional: the model's fixed points, the naming of final states, the paper's predictions for a task.
    build, probe : reference or None
        The torch side, by reference only (``closedform`` never imports torch): ``build(task, ...)`` makes a
        :class:`empirical.train.TorchModel`; ``probe`` maps its weights to the named state (its ``probes``).
    figures : str or None
        Module whose import registers the model's figures (:mod:`figures.registry`); None: no figures.
    docs : str or None
        The documentation page of the model's mathematics.
    summary : mapping of str to str
        Cells of the API table (:func:`api_table`) the record cannot derive itself: ``"risk"``, ``"map"``, ``"flow"``,
        ``"full"``, ``"predictions"``, ``"time"``, ``"build"``, ``"configs"``.
    builtin : bool
        Whether the model ships with attndyn (set by this module; registered packages leave it False).
    """

    name: str
    title: str
    state_names: tuple[str, ...]
    params: Any
    time_unit: str
    step: Any = None
    rhs: Any = None
    map: Any = None
    flow: Any = None
    data: tuple[str, ...] = ()
    fixed_points: Any = None
    classify: Any = None
    theorem_predictions: Any = None
    build: str | None = None
    probe: str | None = None
    figures: str | None = None
    docs: str | None = None
    summary: Mapping[str, str] = field(default_factory=dict)
    builtin: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"name must be an identifier (letters, digits, underscores); got {self.name!r}")
        for attr in ("title", "time_unit"):
            if not isinstance(getattr(self, attr), str) or not getattr(self, attr).strip():
                raise ValueError(
                    f"{attr} of model {self.name!r} must be a non-empty string; got {getattr(self, attr)!r}"
                )
        for attr in ("state_names", "data"):
            value = getattr(self, attr)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"{attr} of model {self.name!r} must be a tuple of non-empty strings; got {value!r}")
            object.__setattr__(self, attr, tuple(value))
        if not self.state_names:
            raise ValueError(f"state_names of model {self.name!r} must name at least one variable")
        if self.step is None and self.rhs is None:
            raise ValueError(f"model {self.name!r} must give a map kernel (step) or a vector field (rhs)")
        for attr in ("build", "probe"):
            value = getattr(self, attr)
            if value is not None and not (isinstance(value, str) and _REF.match(value)):
                raise ValueError(
                    f"{attr} of model {self.name!r} must be None or a reference 'module:attribute' "
                    f"(the torch side is imported on demand only); got {value!r}"
                )
        for attr in ("figures", "docs"):
            value = getattr(self, attr)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{attr} of model {self.name!r} must be None or a non-empty string; got {value!r}")
        for attr in _CODE_FIELDS:
            value = getattr(self, attr)
            if isinstance(value, str) and not _REF.match(value):
                raise ValueError(
                    f"{attr} of model {self.name!r} must be an object or a reference 'module:attribute'; got {value!r}"
                )
        if attr_bad := [k for k, v in dict(self.summary).items() if not (isinstance(k, str) and isinstance(v, str))]:
            raise ValueError(f"summary of model {self.name!r} must map strings to strings; bad keys {attr_bad}")
        object.__setattr__(self, "summary", MappingProxyType(dict(self.summary)))

    def resolve(self, attr: str) -> Any:
        """The object behind field ``attr`` (a reference is imported now; None stays None)."""
        if attr not in _RESOLVABLE:
            raise ValueError(f"attr must be one of {', '.join(_RESOLVABLE)}; got {attr!r}")
        return resolve(getattr(self, attr))

    @property
    def torch_module(self) -> str | None:
        """The module holding the model's torch side (the module of ``build``), or None."""
        return None if self.build is None else self.build.split(":", 1)[0]


_REGISTRY: dict[str, Model] = {}
_PLUGINS_LOADED = False
_PLUGIN_ERRORS: dict[str, str] = {}


def register(model: Model, *, replace: bool = False) -> Model:
    """Add ``model`` to the registry and return it.

    Raises
    ------
    ValueError
        If a different model of the same name is registered already (``replace=True`` replaces a registered
        package's model; a built-in model is never replaced).
    """
    if not isinstance(model, Model):
        raise TypeError(f"model must be a closedform.models.Model; got {type(model).__name__}")
    old = _REGISTRY.get(model.name)
    if old is not None and old != model and (old.builtin or not replace):
        raise ValueError(f"model {model.name!r} is already registered ({old.title})")
    _REGISTRY[model.name] = model
    return model


def _load_plugins() -> None:
    """Register the models of the ``attndyn.models`` entry points (once); a failing one is recorded and warned."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
            model = obj() if callable(obj) and not isinstance(obj, Model) else obj
            if not isinstance(model, Model):
                raise TypeError(f"entry point {ep.value!r} gives {type(model).__name__}, not a Model")
            if model.name != ep.name:
                raise ValueError(f"entry point {ep.name!r} registers a model named {model.name!r}")
            if model.builtin:
                raise ValueError("a registered package's model cannot be marked builtin")
            register(model)
        except Exception as exc:  # noqa: BLE001 - one broken package must not hide the others: recorded, warned
            _PLUGIN_ERRORS[ep.name] = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"model entry point {ep.name!r} ({ep.value}) could not be registered: {exc}",
                RuntimeWarning,
                stacklevel=3,
            )


def models(*, builtin: bool | None = None) -> tuple[Model, ...]:
    """Every registered model in report order: the built-in ones, then the registered packages' models by name.

    ``builtin=True`` / ``False`` keeps only the built-in / the registered packages' models.
    """
    _load_plugins()
    out = [m for m in _REGISTRY.values() if m.builtin] + sorted(
        (m for m in _REGISTRY.values() if not m.builtin), key=lambda m: m.name
    )
    return tuple(m for m in out if builtin is None or m.builtin == builtin)


def names(*, builtin: bool | None = None) -> tuple[str, ...]:
    """The names of :func:`models` (same order and filter)."""
    return tuple(m.name for m in models(builtin=builtin))


def get(name: str) -> Model:
    """The registered model called ``name``.

    Raises
    ------
    ValueError
        If no model of that name is registered (the message lists them).
    """
    _load_plugins()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"name must be one of {', '.join(map(repr, names()))}; got {name!r}") from None


def refresh() -> tuple[str, ...]:
    """Forget the registered packages' models and read the ``attndyn.models`` entry points again (e.g. after
    ``pip install`` in a running session); return the names of :func:`models`.
    """
    global _PLUGINS_LOADED
    for name in [n for n, m in _REGISTRY.items() if not m.builtin]:
        del _REGISTRY[name]
    _PLUGIN_ERRORS.clear()
    _PLUGINS_LOADED = False
    return names()


def plugin_errors() -> Mapping[str, str]:
    """Entry points of ``attndyn.models`` that could not be registered: name -> error message."""
    _load_plugins()
    return MappingProxyType(dict(_PLUGIN_ERRORS))


_TABLE_ROWS: tuple[tuple[str, Callable[[Model], str]], ...] = (
    ("task class", lambda m: f"`{m.params.rsplit(':', 1)[-1] if isinstance(m.params, str) else m.params.__name__}`"),
    ("risk / loss", lambda m: m.summary.get("risk", "-")),
    ("`map`", lambda m: m.summary.get("map", "-") if m.map is not None else "-"),
    ("`flow`", lambda m: m.summary.get("flow", "-") if m.flow is not None else "-"),
    ("full model (numpy)", lambda m: m.summary.get("full", "-")),
    ("`fixed_points`", lambda m: "yes" if m.fixed_points is not None else "-"),
    ("`classify`", lambda m: "yes" if m.classify is not None else "-"),
    (
        "`theorem_predictions`",
        lambda m: m.summary.get("predictions", "-") if m.theorem_predictions is not None else "-",
    ),
    ("`TIME_UNIT`", lambda m: m.summary.get("time") or str(resolve(m.time_unit))),
    ("`empirical.models.<model>.build`", lambda m: m.summary.get("build", "-") if m.build is not None else "-"),
    ("`config(name, ...)` names", lambda m: m.summary.get("configs", "-")),
)


def api_table(*, builtin: bool | None = True) -> str:
    """The Markdown table of the API page (docs/api.md, "One shape for every model"): one column per model of
    :func:`models` (``builtin`` as there), one row per part of the contract; a dash where the model has none.
    """
    ms = models(builtin=builtin)
    lines = ["| | " + " | ".join(f"`{m.name}`" for m in ms) + " |", "|---" * (len(ms) + 1) + "|"]
    for label, cell in _TABLE_ROWS:
        lines.append(f"| {label} | " + " | ".join(cell(m) for m in ms) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# The built-in models (report order). Each record's references are checked by tests/api/test_model_registry.py.
# ----------------------------------------------------------------------------------------------------------------
def _builtin(
    name: str,
    *,
    title: str,
    state_names,
    params: str,
    kernels: Mapping[str, str],
    verbs: tuple[str, ...],
    torch_class: str,
    summary: Mapping[str, str],
    data: tuple[str, ...] = (),
    docs: str,
) -> Model:
    module = f"closedform.{name}"
    return register(
        Model(
            name=name,
            title=title,
            state_names=tuple(state_names),
            params=f"{module}:{params}",
            time_unit=f"{module}:TIME_UNIT",
            data=data,
            **{k: f"closedform._{name}_kernels:{v}" for k, v in kernels.items()},
            **{verb: f"{module}:{verb}" for verb in verbs},
            build=f"empirical.models.{name}:build",
            probe=f"empirical.models.{name}:{torch_class}.probes",
            figures=f"figures.{name}",
            docs=docs,
            summary=summary,
            builtin=True,
        )
    )


_TOKEN_TIME = "GD step, time $=\\eta t$"

_builtin(
    "single_location",
    title="single-location regression, Marion et al. (2025)",
    state_names=("kappa", "nu", "theta", "eta", "rho"),
    params="SingleLocationTask",
    kernels={"step": "five_step"},
    data=("lambda-constants table",),
    verbs=("map", "fixed_points", "classify", "theorem_predictions"),
    torch_class="SingleLocationAttention",
    docs="docs/models/single_location.md",
    summary={
        "risk": "`risk`, `excess_risk`, `manifold_risk`",
        "map": "five-scalar PGD",
        "full": "`full_pgd`",
        "predictions": "oracle, linear, Bayes-bound and null risks",
        "time": "PGD step",
        "build": "`build(task, rng=...)`",
        "configs": '`"fig5"`',
    },
)
_builtin(
    "scan_snap",
    title="scan and snap, Tian et al. (2023)",
    state_names=("Y", "Z"),
    params="ScanSnapTask",
    kernels={"step": "map_step", "rhs": "exact_rhs"},
    data=("class structure",),
    verbs=("map", "flow", "theorem_predictions"),
    torch_class="ScanSnapTorch",
    docs="docs/models/scan_snap.md",
    summary={
        "risk": "`decoder_stats` (loss per class)",
        "map": "population GD / momentum",
        "flow": "exact reduced ODE (and `composite_flow`)",
        "predictions": "transition times $t_0$, $t_{peak}$, $t_{1/2}$, $\\omega_1$",
        "time": "optimizer step",
        "build": "`build(task, T=...)`",
        "configs": '`"sgd"`, `"adam"`, `"text"`',
    },
)
_builtin(
    "icl_regression",
    title="in-context regression with multi-head softmax attention",
    state_names=("omega_h", "mu_h"),
    params="ICLRegressionTask",
    kernels={"step": "gd_step", "rhs": "flow_rhs"},
    verbs=("map", "flow", "fixed_points", "classify", "theorem_predictions"),
    torch_class="ICLAttention",
    docs="docs/models/icl_regression.md",
    summary={
        "risk": "`approx_loss`, `refined_loss`, `true_loss_mc`",
        "map": "GD on $F/2$",
        "flow": "$H$-head flow (and `symmetric_flow`)",
        "predictions": "$\\eta^*$, $\\inf F$, GD / dGD optima, single-head $F$",
        "time": "$F/2$-flow time ($t$ = lr $\\cdot$ step for `map`)",
        "build": "`build(task, H, ...)`",
        "configs": '`"paper"`',
    },
)
_builtin(
    "nearest_neighbor",
    title="nearest-neighbour token selection",
    state_names=("xi1", "xi2"),
    params="NearestNeighborTask",
    kernels={"step": "gd_step"},
    data=("prompts",),
    verbs=("map", "theorem_predictions"),
    torch_class="NearestNeighborAttention",
    docs="docs/models/token_selection.md",
    summary={
        "risk": "`reduced_loss`, `loss_xi1_zero`",
        "map": "$(\\xi_1,\\xi_2)$ GD",
        "full": "`full_gd`",
        "predictions": "loss at $W^{(0)}$, first step, $k_d$, $C/\\log t$ bound, separation gap",
        "time": _TOKEN_TIME,
        "build": "`build(task, data=...)`",
        "configs": '`"gd"`, `"sgd"`',
    },
)
_builtin(
    "group_sparse",
    title="group-sparse token selection",
    state_names=("beta", "w_par", "w_perp", "m1", "m2", "m3", "m4", "m5"),
    params="GroupSparseTask",
    kernels={"step": "reduced_step"},
    data=("reduced sample",),
    verbs=("map", "theorem_predictions"),
    torch_class="GroupSparseAttention",
    docs="docs/models/token_selection.md",
    summary={
        "risk": "`reduced_evaluate`, `evaluate`",
        "map": "eight-scalar GD",
        "full": "`full_gd`",
        "predictions": "horizon $T^*$, loss order, attention and direction bounds, $\\beta^{(1)}$",
        "time": _TOKEN_TIME,
        "build": "`build(task, data=...)`",
        "configs": '`"gd"`, `"sgd"`',
    },
)
_builtin(
    "random_walk",
    title="random-walk token selection",
    state_names=("V", "a", "c"),
    params="RandomWalkTask",
    kernels={"step": "reduced_step", "rhs": "reduced_rhs"},
    data=("walks",),
    verbs=("map", "flow", "theorem_predictions"),
    torch_class="RandomWalkAttention",
    docs="docs/models/token_selection.md",
    summary={
        "risk": "`accuracy`, `kl_to_truth`",
        "map": "$(V,a,c)$ GD",
        "flow": "$(V,a,c)$ flow",
        "full": "`full_gd`",
        "predictions": "optimal and theorem accuracy, limiting attention, direction floor",
        "time": _TOKEN_TIME,
        "build": "`build(task, data=...)`",
        "configs": '`"gd"`, `"sgd"`, `"qa_gd"`',
    },
)
