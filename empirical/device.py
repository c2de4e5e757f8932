"""Device, precision and determinism for every torch run.

Nothing here runs at import: CUDA is queried only when :func:`resolve` / :func:`resolve_device` is called, so importing
``empirical`` never initialises CUDA and works on CPU-only machines.

Policy
------
- **Device.** ``"auto"`` picks ``cuda`` when a CUDA device is present and ``cpu`` otherwise; ``"cpu"``, ``"cuda"`` and
  ``"cuda:<index>"`` are explicit. Asking for CUDA where there is none is an error, never a silent fallback.
- **Precision.** Theory comparisons run in ``float64`` (the default); ``float32`` is selectable for speed studies.
  Half precisions (``float16``, ``bfloat16``) are refused: their rounding (~1e-3) swamps the gaps being measured.
- **Determinism.** :func:`set_determinism` sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (before CUDA initialises),
  ``torch.use_deterministic_algorithms(True)``, ``cudnn.benchmark = False``, ``cudnn.deterministic = True`` and turns
  TF32 off for matmul and cuDNN (pytorch #61890). Bitwise reproducibility is promised only on the same device type,
  dtype and torch build; CPU against GPU is a statistical comparison.

Example
-------
>>> from empirical.device import resolve
>>> device, dtype = resolve("cpu")            # float64, deterministic, TF32 off
>>> str(device), str(dtype)
('cpu', 'torch.float64')
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from typing import Annotated, NamedTuple

import torch

from dynamics.validation import Instance, Range, validate_module

__all__ = ["DTYPES", "Placement", "resolve", "resolve_device", "resolve_dtype", "set_determinism", "torch_threads"]

log = logging.getLogger(__name__)

#: The dtypes a run may use, by name. float64 is the default for every comparison with theory.
DTYPES: dict[str, torch.dtype] = {"float64": torch.float64, "float32": torch.float32}

_REFUSED_DTYPES = {"float16", "half", "bfloat16"}
_CUDA_RE = re.compile(r"^cuda(:\d+)?$")


class Placement(NamedTuple):
    """Where and in which precision a run computes (the result of :func:`resolve`)."""

    device: Annotated[torch.device, None]
    dtype: Annotated[torch.dtype, None]


def resolve_device(device: Annotated[str | torch.device, None] = "auto") -> torch.device:
    """Return the ``torch.device`` named by ``device`` ("auto", "cpu", "cuda" or "cuda:<index>").

    Parameters
    ----------
    device : str or torch.device
        ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:<index>"``, or a ``torch.device``.

    Raises
    ------
    ValueError
        For an unknown name, or a CUDA device that is not available on this machine.
    """
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>'; got {device!r}")
    name = device.strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if _CUDA_RE.match(name):
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={device!r} was requested but CUDA is not available on this machine; use device='cpu' or 'auto'"
            )
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device={device!r}: index must be in [0, {torch.cuda.device_count() - 1}]")
        return torch.device(name)
    raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>'; got {device!r}")


def resolve_dtype(dtype: Annotated[str | torch.dtype, None] = "float64") -> torch.dtype:
    """Return the torch dtype named by ``dtype``: ``"float64"`` (default, theory comparisons) or ``"float32"``.

    Raises
    ------
    ValueError
        For half precisions (refused for theory comparisons) and anything that is not a floating dtype name.
    """
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = dtype.strip().lower().removeprefix("torch.")
    else:
        raise ValueError(f"dtype must be 'float64' or 'float32'; got {dtype!r}")
    name = {"double": "float64", "float": "float32"}.get(name, name)
    if name in _REFUSED_DTYPES:
        raise ValueError(
            f"dtype={name!r} is refused: theory comparisons need 'float64' (default); "
            "'float32' is allowed for speed studies"
        )
    if name not in DTYPES:
        raise ValueError(f"dtype must be 'float64' or 'float32'; got {dtype!r}")
    return DTYPES[name]


def set_determinism(enabled: bool = True) -> None:
    """Switch torch's deterministic mode on (default) or off, and keep TF32 off either way.

    Sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless already set (it must precede CUDA initialisation; if CUDA was
    already initialised without it, a warning is logged), ``torch.use_deterministic_algorithms(enabled)``,
    ``cudnn.benchmark = False`` and ``cudnn.deterministic = enabled``. TF32 is disabled for matmul and cuDNN and
    the float32 matmul precision is ``"highest"``. This is process-wide torch state, as torch defines it.
    """
    if enabled:
        if "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
            if torch.cuda.is_initialized():
                log.warning("CUDA was initialised before set_determinism(); CUBLAS_WORKSPACE_CONFIG may not apply")
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(bool(enabled))
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = bool(enabled)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def resolve(
    device: Annotated[str | torch.device, None] = "auto",
    dtype: Annotated[str | torch.dtype, None] = "float64",
    *,
    deterministic: bool = True,
) -> Placement:
    """Resolve the device and dtype of a run and set deterministic mode (TF32 off).

    Parameters
    ----------
    device : str or torch.device
        See :func:`resolve_device`.
    dtype : str or torch.dtype
        ``"float64"`` (default; every theory comparison) or ``"float32"``; see :func:`resolve_dtype`.
    deterministic : bool
        Passed to :func:`set_determinism` (default True).

    Returns
    -------
    Placement
        ``(device, dtype)`` named tuple.
    """
    dt = resolve_dtype(dtype)  # validate both before touching global torch state
    dev = resolve_device(device)
    set_determinism(deterministic)
    return Placement(dev, dt)


@contextlib.contextmanager
def torch_threads(
    n: Annotated[int | None, Range(integer=True, ge=1)] = 1,
    *,
    device: Annotated[str | torch.device | None, Instance(str, torch.device, none=True)] = None,
):
    """Run a block with ``n`` torch intra-op CPU threads, restoring the previous number afterwards.

    The toolkit's models are small (tensors of a few thousand entries): a second OpenMP thread only adds
    synchronisation, measured 6-10x slower per step on a 2-core machine. ``n=None`` leaves the setting alone; a
    ``device`` other than CPU (GPU runs) leaves it alone too.

    Parameters
    ----------
    n : int >= 1
    """
    if n is None or (device is not None and torch.device(device).type != "cpu"):
        yield
        return
    if int(n) < 1:
        raise ValueError(f"n (torch threads) must be an integer >= 1 or None; got {n!r}")
    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


# argument checks from the annotations (dynamics.validation); device and dtype are checked (with their valid
# values named) by resolve_device / resolve_dtype
validate_module(globals())
