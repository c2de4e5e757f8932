"""Torch versions of the papers' models, one module per model, named as in ``closedform``.

Each module ``empirical/models/<model>.py`` defines a class implementing :class:`empirical.train.TorchModel`
(``name``, ``init_params``, ``sample``, ``loss``, ``probes`` and the optional hooks documented in
:mod:`empirical.train`), built from the model's closed-form spec, with the paper's initialisation, data law, loss
normalisation and probes (weights -> order parameters, named as in the closed form). The model names are those of
the one model registry, :mod:`closedform.models` (the built-in models and the models other packages register through
the ``attndyn.models`` entry points); :func:`load` imports the module of a model's torch ``build``.
"""

from __future__ import annotations

from typing import Annotated, Any
import importlib
from collections.abc import Callable, Mapping
from types import ModuleType

from closedform import models as _registry

__all__ = ["MODEL_NAMES", "load"]

#: The registered models (:func:`closedform.models.names`), read when this package is imported.
MODEL_NAMES: tuple[str, ...] = _registry.names()


def load(name: Annotated[str, _V.OneOf(*MODEL_NAMES)]) -> ModuleType:
    """Import and return the torch module of a registered model (for a built-in one, ``empirical.models.<name>``).

    Raises
    ------
    ValueError
        If ``name`` is not a registered model, or the model has no torch side.
    ModuleNotFoundError
        If the model's torch module does not exist.
    """
    module = _registry.get(name).torch_module
    if module is None:
        raise ValueError(f"name: model {name!r} has no torch side (its record gives no build)")
    return importlib.import_module(module)


def dispatch_config(presets: Mapping[str, Callable], name: Annotated[Any, None], args: tuple, kwargs: dict):
    """Call the preset ``name`` of a model module's ``config(name, ...)`` with the remaining arguments.

    Shared by the ``config`` functions of every model module (one API shape for every model).

    Raises
    ------
    ValueError
        If ``name`` is not one of ``presets`` (the message lists them).
    """
    if not isinstance(name, str) or name not in presets:
        raise ValueError(f"name must be one of {', '.join(map(repr, presets))}; got {name!r}")
    return presets[name](*args, **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# Argument checks shared by the model modules (dynamics.validation specs for torch arguments)


def tensor_check(*, ndim=None, finite: bool = True, range=None) -> Callable:
    """A ``check(name, value)`` spec for :func:`dynamics.validation.validated`: a real torch tensor with ``ndim`` in
    the given ones, finite unless ``finite=False``, its entries in ``range`` (a :class:`dynamics.validation.Range`)
    if given.

    The public torch functions of the model modules check their tensors with it (a pass over the data, and a device
    synchronisation on a GPU); a model's training step calls their unchecked versions (the same name with a leading
    underscore), and the trainer's divergence check catches non-finite values there.
    """
    spec = _V.Array(ndim=ndim, finite=finite, range=range)

    def check(name: str, value) -> None:
        if not _V._is_tensor(value):
            raise _V.ArgumentTypeError(f"{name} must be a torch.Tensor ({spec.text}); got {_V._show(value)}")
        spec(name, value)

    return check


def tensors_check(*layouts: tuple[str, ...], ndim=None) -> Callable:
    """A ``check(name, value)`` spec for a mapping of torch tensors (``params``, ``batch``) holding every key of one
    of ``layouts``; each of those tensors is checked as :func:`tensor_check` checks one (real, finite, ``ndim``).
    """
    spec = tensor_check(ndim=ndim)
    want = " or ".join("{" + ", ".join(map(repr, keys)) + "}" for keys in layouts)

    def check(name: str, value) -> None:
        if not isinstance(value, Mapping):
            raise _V.ArgumentTypeError(
                f"{name} must be a mapping of torch tensors with keys {want}; got {_V._show(value)}"
            )
        keys = next((k for k in layouts if all(key in value for key in k)), None)
        if keys is None:
            raise ValueError(f"{name} must be a mapping of torch tensors with keys {want}; got keys {sorted(value)}")
        for key in keys:
            spec(f"{name}[{key!r}]", value[key])

    return check


from dynamics import validation as _V  # noqa: E402

_V.validate_module(globals(), skip=("tensor_check", "tensors_check"))  # the spec builders: not entry points
