"""Typed figure parameters: one frozen record type per figure, presets as its instances, validated overrides.

Every figure declares its parameters per preset as JSON values at registration (``register(params={"tiny": {...},
"quick": {...}, "paper": {...}})``). :func:`record_type` turns those dictionaries into a frozen dataclass for the
figure, one field per parameter, whose metadata holds the parameter's description, unit and valid range
(:class:`Param`, looked up in the shared :data:`VOCABULARY`, or given by the figure itself with ``param_info``).
The presets become instances of that class; an override (``python -m figures make NAME --set key=value``,
``build(name, preset, key=value)``) is a validated :meth:`ParamsRecord.replace`: an unknown key or a value out of
range raises ``ValueError`` naming the valid keys (or the valid range) before anything is computed.

A record is also a read-only mapping (``record["d"]``, ``dict(record)``), whose values are plain JSON values
(lists, not tuples), so figure code reads it as it read the preset dictionaries; the attributes (``record.d``)
hold the same values frozen (tuples).

The type of a field follows the preset values (a number, a list of numbers, a list of pairs, ``null`` or an
integer, or a nested object of parameters); whether it is an integer or a real number, and its range, come from
its :class:`Param`. A list field accepts a single number for a one-element list (``--set eta_Y=3`` means
``[3.0]``).
"""

from __future__ import annotations

import json
import numbers
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any, ClassVar

from dynamics.validation import Range

__all__ = [
    "Param",
    "VOCABULARY",
    "RESERVED",
    "ParamsRecord",
    "record_type",
    "records",
    "parse_value",
    "split_key",
    "parse_assignment",
]

_INT = Range(integer=True, ge=1)
_INT0 = Range(integer=True, ge=0)
_SEEDS = Range(integer=True, ge=2)
_POS = Range(gt=0)
_NONNEG = Range(ge=0)


@dataclass(frozen=True)
class Param:
    """What one parameter means: ``description``, ``unit`` (``""`` for a pure number or count) and ``range``.

    Parameters
    ----------
    description : str
        One line, e.g. ``"dimension of the tokens"``.
    unit : str
        E.g. ``"steps"``, ``"seeds"``; empty for a dimensionless number.
    range : dynamics.validation.Range
        Valid values (of every element, for a list parameter); ``Range(integer=True, ...)`` marks an integer.
    """

    description: str
    unit: str = ""
    range: Range = field(default_factory=lambda: _POS)

    @property
    def integer(self) -> bool:
        """Whether the parameter (or each of its elements) is an integer."""
        return bool(self.range.integer)

    def text(self, kind: str = "scalar") -> str:
        """``"description [unit]; valid: range"`` (one line, for ``params``) for a field of ``kind``."""
        unit = f" [{self.unit}]" if self.unit else ""
        valid = self.range.text.replace(" and <= 2147483647", "")  # the implicit cap of integers says nothing
        if kind == "object":
            valid = "an object with the preset's keys, each valid as the parameter of that name"
        elif kind in ("list", "pairs"):
            valid = f"a non-empty list{' of lists' if kind == 'pairs' else ''}, each element {valid}"
        elif kind == "optional":
            valid = f"null or {valid}"
        return f"{self.description}{unit}; valid: {valid}"


def _p(description: str, unit: str = "", rng: Range = _POS) -> Param:
    return Param(description, unit, rng)


VOCABULARY: dict[str, Param] = {
    # sizes of the models
    "d": _p("dimension of the tokens (or of the inputs)", "", _INT),
    "ds": _p("dimensions d of the grid", "", _INT),
    "L": _p("sequence length (tokens per prompt)", "tokens", _INT),
    "Ls": _p("training sequence lengths", "tokens", _INT),
    "L_tests": _p("test sequence lengths", "tokens", _INT),
    "N": _p("number of states / in-context points", "", _INT),
    "M": _p("vocabulary size", "tokens", _INT),
    "K": _p("number of classes / candidate positions", "", _INT),
    "H": _p("number of attention heads", "heads", _INT),
    "Hs": _p("numbers of attention heads compared", "heads", _INT),
    "T": _p("context length", "tokens", _INT),
    "vocab": _p("vocabulary size of the corpus", "tokens", _INT),
    "num_unique": _p(
        "distinct tokens per class of the synthetic data law (Syn-Small: vocabulary size "
        "M = 14 + 2 num_unique, 34 at the paper's 10)",
        "tokens",
        _INT,
    ),
    "num_last": _p("last tokens (queries) of the synthetic data law", "tokens", _INT),
    "configs": _p("(T, batch) configurations", "", _INT),
    "max_tokens": _p("cap on the corpus tokens read (null: all)", "tokens", _INT),
    "n_heldout": _p("held-out sequences", "sequences", _INT),
    "map_rows": _p("rows of the attention map shown", "", _INT),
    # training
    "n_steps": _p("training steps", "steps", _INT),
    "n_steps_a": _p("training steps of the first phase", "steps", _INT),
    "n_steps_b": _p("training steps of the second phase", "steps", _INT),
    "n_steps_lb": _p("training steps of the large-batch runs", "steps", _INT),
    "n_steps_reduced": _p("steps of the reduced dynamics", "steps", _INT),
    "n_iter": _p("iterations of the reduced dynamics", "steps", _INT),
    "n_epochs": _p("passes over the corpus", "epochs", _INT),
    "T_pre": _p("pre-training steps", "steps", _INT),
    "T_theory": _p("steps of the theory curve", "steps", _INT),
    "t1": _p("end time of the flow", "time units", _POS),
    "batch": _p("minibatch size", "samples", _INT),
    "batch_size": _p("minibatch size", "samples", _INT),
    "batch_lb": _p("minibatch size of the large-batch runs", "samples", _INT),
    "lr": _p("learning rate", "", _POS),
    "alpha": _p("learning rate", "", _POS),
    "eta": _p("learning rate(s)", "", _POS),
    "eta_Y": _p("learning rate(s) of the decoder Y", "", _POS),
    "eta_Z": _p("learning rate(s) of the attention Z", "", _POS),
    "ratio": _p("learning-rate ratios eta_Y / eta_Z", "", _POS),
    "lam": _p("inverse temperature (lambda)", "", _POS),
    "lams": _p("inverse temperatures (lambda) of the grid", "", _POS),
    "lam0": _p("initial inverse temperature of the schedule", "", _POS),
    "lam_min": _p("smallest inverse temperature of the sweep", "", _POS),
    "lam_max": _p("largest inverse temperature of the sweep", "", _POS),
    "rate": _p("decay rate of the inverse-temperature schedule", "1/steps", _POS),
    "freeze": _p("step after which the inverse temperature stays fixed", "steps", _INT0),
    "noise": _p("label noise standard deviation", "", _NONNEG),
    "sigma": _p("noise standard deviation", "", _NONNEG),
    "sigma2": _p("noise variance", "", _NONNEG),
    "C": _p("inverse regularisation of the logistic probe", "", _POS),
    "init_scales": _p("initialisation scales", "", _POS),
    "init_seed": _p("seed of the fixed initial condition (a documented choice, not a run seed)", "", _INT0),
    "authors_plot_offset": _p("offset the authors' plot adds to the curve (0: none)", "", Range()),
    # repeats and sample sizes
    "n_seeds": _p("independent training seeds (>= 2: the gap tests need a standard error)", "seeds", _SEEDS),
    "n_seeds_h2": _p("independent training seeds of the two-head runs", "seeds", _SEEDS),
    "n_runs": _p("independent runs", "runs", _INT),
    "n_draws": _p("independent draws of the data law", "draws", _INT),
    "n_early": _p("seeds of the early-time runs", "seeds", _INT),
    "n": _p("sample size", "samples", _INT),
    "n_list": _p("sample sizes", "samples", _INT),
    "n_pre": _p("pre-training sample size", "samples", _INT),
    "n_small": _p("small sample size", "samples", _INT),
    "n_large": _p("large sample size", "samples", _INT),
    "n_big": _p("largest sample size", "samples", _INT),
    "n_train": _p("training samples", "samples", _INT),
    "n_test": _p("test samples", "samples", _INT),
    "eval_size": _p("samples of each evaluation", "samples", _INT),
    "n_prompts": _p("prompts of the Monte Carlo estimate", "prompts", _INT),
    "n_torch": _p("prompts drawn through the torch model", "prompts", _INT),
    "n_mc": _p("Monte Carlo samples", "samples", _INT),
    "n_err": _p("Monte Carlo samples of the error estimate", "samples", _INT),
    "n_pop": _p("samples of the population (reduced) dynamics", "samples", _INT),
    "n_starts": _p("random starts of the fixed-point search", "starts", _INT),
    "n_search": _p("random starts of the fixed-point search", "starts", _INT),
    # grids and logging
    "n_grid": _p("points of the parameter grid", "points", _INT),
    "n_lam": _p("inverse temperatures of the sweep", "points", _INT),
    "n_lam_search": _p("inverse temperatures searched for the bifurcation", "points", _INT),
    "n_L": _p("sequence lengths of the grid", "points", _INT),
    "n_d": _p("dimensions of the grid", "points", _INT),
    "n_split": _p("points of the split grid", "points", _INT),
    "n_lat": _p("latitudes of the sphere grid", "points", _INT),
    "n_lon": _p("longitudes of the sphere grid", "points", _INT),
    "n_xi1": _p("grid points along xi_1", "points", _INT),
    "n_xi2": _p("grid points along xi_2", "points", _INT),
    "n_thr": _p("thresholds of the sweep", "points", _INT),
    "n_t": _p("saved times", "points", _INT),
    "n_times": _p("saved times", "points", _INT),
    "n_save": _p("saved times", "points", _INT),
    "log_every": _p("steps between logged evaluations", "steps", _INT),
    "log_every_lb": _p("steps between logged evaluations of the large-batch runs", "steps", _INT),
    "dense": _p("saved times per decade at early times", "points", _INT),
    "population_steps": _p("steps of the population dynamics", "steps", _INT),
    "single": _p("training parameters of the single-head reference run", "", _INT),
}
"""Shared meaning of the parameter names the figures use (a figure adds or overrides entries with ``param_info``)."""

_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

RESERVED: frozenset[str] = frozenset(
    {
        "name",
        "names",
        "preset",
        "seed",
        "device",
        "cache_dir",
        "recompute",
        "progress",
        "registry",
        "out_dir",
        "formats",
        "spec",
    }
)
"""Keyword arguments of ``build``/``make``/``run_config``: no parameter may be called so."""


# ----------------------------------------------------------------------------------------------------------------
# Field kinds: how a JSON value is frozen, thawed and checked
# ----------------------------------------------------------------------------------------------------------------
def _kind_of(values: list) -> str:
    """The kind of a field from its values in the presets: scalar, optional, list, pairs or object."""
    if all(isinstance(v, Mapping) for v in values):
        return "object"
    if all(isinstance(v, list | tuple) for v in values):
        return "pairs" if all(isinstance(x, list | tuple) for v in values for x in v) else "list"
    if all(v is None or isinstance(v, numbers.Real) for v in values):
        return "optional" if any(v is None for v in values) else "scalar"
    raise ValueError(f"values {values!r} mix kinds; a parameter is a number, a list, a list of lists or an object")


def _number(name: str, value, info: Param):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be {info.range.text}; got {value!r}")
    info.range(name, value)
    return int(value) if info.integer else float(value)


def _freeze(name: str, value, kind: str, info: Param, template=None):
    """Validate ``value`` for a field of ``kind`` and return it frozen (tuples, read-only mappings)."""
    if kind == "scalar":
        return _number(name, value, info)
    if kind == "optional":
        return None if value is None else _number(name, value, info)
    if kind in ("list", "pairs"):
        if not isinstance(value, list | tuple):
            if kind == "list":  # a single number is a one-element list
                return (_number(f"{name}[0]", value, info),)
            raise ValueError(f"{name} must be a list of lists of numbers ({info.range.text}); got {value!r}")
        if not value:
            raise ValueError(f"{name} must be a non-empty list; got {value!r}")
        if kind == "list":
            return tuple(_number(f"{name}[{i}]", v, info) for i, v in enumerate(value))
        out = []
        for i, row in enumerate(value):
            if not isinstance(row, list | tuple) or not row:
                raise ValueError(f"{name}[{i}] must be a non-empty list of numbers; got {row!r}")
            out.append(tuple(_number(f"{name}[{i}][{j}]", v, info) for j, v in enumerate(row)))
        return tuple(out)
    if kind == "object":  # nested parameters: the keys of the preset's object, each checked by the vocabulary
        if not isinstance(value, Mapping):
            raise ValueError(f"{name} must be an object of parameters; got {value!r}")
        unknown = sorted(set(value) - set(template))
        if unknown:
            raise ValueError(f"{name} has unknown keys {unknown}; valid keys: {', '.join(sorted(template))}")
        merged = {**template, **value}
        out = {}
        for key in sorted(merged):
            sub = VOCABULARY.get(key)
            if sub is None:
                raise ValueError(f"{name}.{key} has no entry in figures.params.VOCABULARY")
            sub_kind = _kind_of([template[key]])
            out[key] = _freeze(f"{name}.{key}", merged[key], sub_kind, sub, template[key])
        return types.MappingProxyType(out)
    raise AssertionError(kind)


def _thaw(value):
    """The JSON value of a frozen field (lists and dicts, fresh each time)."""
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    return value


_TYPES = {
    "scalar": (int, float),
    "optional": (int | None, float | None),
    "list": (tuple[int, ...], tuple[float, ...]),
    "pairs": (tuple[tuple[int, ...], ...], tuple[tuple[float, ...], ...]),
    "object": (Mapping[str, Any], Mapping[str, Any]),
}


# ----------------------------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------------------------
class ParamsRecord(Mapping):
    """Base of the per-figure parameter records (frozen dataclasses made by :func:`record_type`).

    A record is a read-only mapping from parameter name to its JSON value; :meth:`replace` returns a validated
    copy with some parameters changed; :meth:`describe` gives each field's meaning, unit and range.
    """

    figure: ClassVar[str] = ""
    kinds: ClassVar[Mapping[str, str]] = types.MappingProxyType({})
    templates: ClassVar[Mapping[str, Any]] = types.MappingProxyType({})

    def __post_init__(self):
        for f in fields(self):
            info = f.metadata["param"]
            value = _freeze(f.name, getattr(self, f.name), self.kinds[f.name], info, self.templates.get(f.name))
            object.__setattr__(self, f.name, value)

    def __getitem__(self, key: str):
        if key not in self.kinds:
            raise KeyError(key)
        return _thaw(getattr(self, key))

    def __iter__(self):
        return iter(self.kinds)

    def __len__(self) -> int:
        return len(self.kinds)

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and self.to_dict() == {k: other[k] for k in other}

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={self[k]!r}" for k in self)
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        """The parameters as plain JSON values."""
        return {k: self[k] for k in self}

    @classmethod
    def valid_keys(cls) -> tuple[str, ...]:
        """The parameter names of this figure, in declaration order."""
        return tuple(cls.kinds)

    @classmethod
    def describe(cls) -> dict[str, Param]:
        """Parameter name -> its :class:`Param` (description, unit, range)."""
        return {f.name: f.metadata["param"] for f in fields(cls)}

    def replace(self, **overrides) -> ParamsRecord:
        """A copy with ``overrides`` applied, validated; an unknown key raises ``ValueError`` naming the valid keys."""
        unknown = sorted(set(overrides) - set(self.kinds))
        if unknown:
            raise ValueError(
                f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} of figure "
                f"{self.figure!r}; valid keys: {', '.join(self.kinds)}"
            )
        values = {k: getattr(self, k) for k in self.kinds}
        for key, value in overrides.items():
            try:
                values[key] = _freeze(key, value, self.kinds[key], type(self).describe()[key], self.templates.get(key))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"figure {self.figure!r}, parameter {exc}") from None
        return type(self)(**values)

    def changed(self, base: ParamsRecord) -> dict[str, tuple[Any, Any]]:
        """Parameter -> (this value, ``base``'s value) for the parameters where this record differs from ``base``."""
        return {k: (self[k], base[k]) for k in self if self[k] != base[k]}


def _class_name(figure: str) -> str:
    parts = re.split(r"[^A-Za-z0-9]+", figure)
    return "".join(p[:1].upper() + p[1:] for p in parts if p) + "Params"


def record_type(
    figure: str, presets: Mapping[str, Mapping[str, Any]], param_info: Mapping[str, Param] | None = None
) -> type[ParamsRecord]:
    """A frozen dataclass for figure ``figure`` with one field per parameter of ``presets``.

    Parameters
    ----------
    figure : str
        The figure's name (named in error messages).
    presets : mapping
        Preset name -> the preset's parameters (JSON values). Every preset must give the same keys.
    param_info : mapping of str to Param, optional
        Meaning of parameters that are not in :data:`VOCABULARY`, or that mean something else in this figure.

    Returns
    -------
    type
        A subclass of :class:`ParamsRecord`; its fields carry ``metadata={"param": Param, "kind": str}``.
    """
    info_table = {**VOCABULARY, **dict(param_info or {})}
    if not presets:
        raise ValueError(f"figure {figure!r} must define the parameters of at least one preset")
    keys = None
    for preset, values in presets.items():
        if not isinstance(values, Mapping):
            raise ValueError(f"params[{preset!r}] of figure {figure!r} must be a mapping; got {type(values).__name__}")
        if keys is None:
            keys = list(values)
        elif set(values) != set(keys):
            raise ValueError(
                f"every preset of figure {figure!r} must give the same parameters; {preset!r} differs by "
                f"{sorted(set(values) ^ set(keys))}"
            )
    kinds, templates, specs = {}, {}, []
    for key in keys:
        if not isinstance(key, str) or not _KEY_RE.match(key) or key in RESERVED:
            raise ValueError(
                f"parameter names of figure {figure!r} must be identifiers other than "
                f"{', '.join(sorted(RESERVED))}; got {key!r}"
            )
        info = info_table.get(key)
        if info is None:
            raise ValueError(
                f"parameter {key!r} of figure {figure!r} has no meaning declared: add it to "
                "figures.params.VOCABULARY or pass param_info={...: Param(...)} at registration"
            )
        values = [presets[p][key] for p in presets]
        try:
            kind = _kind_of(values)
        except ValueError as exc:
            raise ValueError(f"parameter {key!r} of figure {figure!r}: {exc}") from None
        kinds[key] = kind
        if kind == "object":
            templates[key] = types.MappingProxyType(dict(values[0]))
        annotation = _TYPES[kind][0 if info.integer else 1]
        specs.append((key, annotation, field(metadata={"param": info, "kind": kind})))
    cls = make_dataclass(
        _class_name(figure),
        specs,
        bases=(ParamsRecord,),
        frozen=True,
        eq=False,
        namespace={
            "figure": figure,
            "kinds": types.MappingProxyType(kinds),
            "templates": types.MappingProxyType(templates),
            "__module__": __name__,
            "__hash__": ParamsRecord.__hash__,
            "__eq__": ParamsRecord.__eq__,
        },
    )
    cls.__doc__ = f"Parameters of figure {figure!r} (one field per parameter; presets are instances)."
    return cls


def records(
    figure: str, presets: Mapping[str, Mapping[str, Any]], param_info: Mapping[str, Param] | None = None
) -> dict[str, ParamsRecord]:
    """Preset name -> record instance, for the presets ``presets`` defines (see :func:`record_type`)."""
    cls = record_type(figure, presets, param_info)
    out = {}
    for preset, values in presets.items():
        try:
            out[preset] = cls(**dict(values))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"preset {preset!r} of figure {figure!r}: {exc}") from None
    return out


def parse_value(text: str):
    """A command-line value: JSON (``3``, ``1e-3``, ``[1, 2]``, ``null``) or, failing that, the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def split_key(text: str, *, figure_required: bool = False) -> tuple[str | None, str]:
    """``"key"`` or ``"figure.key"`` -> ``(figure or None, key)``: the key is the part after the last dot (parameter
    names have no dots; figure names do).
    """
    figure, _, key = str(text).strip().rpartition(".")
    if not _KEY_RE.match(key) or (figure_required and not figure):
        form = "FIGURE.PARAM=VALUE (e.g. scan_snap.fig4.eta_Y=3)" if figure_required else "[FIGURE.]PARAM=VALUE"
        raise ValueError(f"--set takes {form}; got {text!r}")
    return (figure or None), key


def parse_assignment(text: str, *, figure_required: bool = False) -> tuple[str | None, str, Any]:
    """``"key=value"`` or ``"figure.key=value"`` -> ``(figure or None, key, value)`` (:func:`split_key`,
    :func:`parse_value`).
    """
    if not isinstance(text, str) or "=" not in text:
        form = "FIGURE.PARAM=VALUE" if figure_required else "[FIGURE.]PARAM=VALUE"
        raise ValueError(f"--set takes {form}; got {text!r}")
    lhs, _, rhs = text.partition("=")
    figure, key = split_key(lhs, figure_required=figure_required)
    return figure, key, parse_value(rhs.strip())
