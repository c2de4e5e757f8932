"""Input checks shared by every package: each raises ``ValueError`` naming the parameter and its valid range."""

from __future__ import annotations

import numbers

import numpy as np


def check_int(name: str, value, *, min_value: int | None = None, max_value: int | None = None) -> int:
    """Return ``value`` as ``int`` if it is an integer in [min_value, max_value]; else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and float(value).is_integer() and not isinstance(value, bool):
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer{_range_text(min_value, max_value)}; got {value!r}")
    value = int(value)
    if (min_value is not None and value < min_value) or (max_value is not None and value > max_value):
        raise ValueError(f"{name} must be an integer{_range_text(min_value, max_value)}; got {value}")
    return value


def check_positive(name: str, value) -> float:
    """Return ``value`` as float if it is finite and > 0; else raise ``ValueError``."""
    x = _real(name, value)
    if not x > 0:
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    return x


def check_nonneg(name: str, value) -> float:
    """Return ``value`` as float if it is finite and >= 0; else raise ``ValueError``."""
    x = _real(name, value)
    if not x >= 0:
        raise ValueError(f"{name} must be a finite number >= 0; got {value!r}")
    return x


def check_in_range(name: str, value, low: float, high: float, *, low_open: bool = False,
                   high_open: bool = False) -> float:
    """Return ``value`` as float if it lies in the interval (closed unless ``*_open``); else raise."""
    x = _real(name, value)
    ok_low = x > low if low_open else x >= low
    ok_high = x < high if high_open else x <= high
    if not (ok_low and ok_high):
        lb = "(" if low_open else "["
        rb = ")" if high_open else "]"
        raise ValueError(f"{name} must lie in {lb}{low}, {high}{rb}; got {value!r}")
    return x


def check_finite_array(name: str, value, *, ndim: int | tuple[int, ...] | None = None,
                       shape: tuple[int | None, ...] | None = None, allow_empty: bool = False) -> np.ndarray:
    """Return ``value`` as a C-contiguous float64 array after checking finiteness, ndim and shape.

    ``shape`` may contain ``None`` for free axes.
    """
    try:
        arr = np.asarray(value, dtype=np.float64)
        arr = np.ascontiguousarray(arr) if arr.ndim else arr.copy()  # ascontiguousarray would make 0-d 1-d
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of real numbers; got {type(value).__name__}") from exc
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            raise ValueError(f"{name} must have ndim in {allowed}; got shape {arr.shape}")
    if shape is not None:
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} must have shape {want}; got {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} must not be empty; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name} must be finite; found {arr[tuple(bad)]} at index {tuple(int(i) for i in bad)}")
    return arr


def check_choice(name: str, value, choices) -> object:
    """Return ``value`` if it is one of ``choices``; else raise ``ValueError`` listing them."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _real(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real | np.floating | np.integer):
        try:
            value = float(np.asarray(value).item())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be a real number; got {value!r}") from exc
    x = float(value)
    if not np.isfinite(x):
        raise ValueError(f"{name} must be finite; got {value!r}")
    return x


def _range_text(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f" in [{lo}, {hi}]"
    if lo is not None:
        return f" >= {lo}"
    if hi is not None:
        return f" <= {hi}"
    return ""
