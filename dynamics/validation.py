"""Input checks shared by every package: each names the parameter, its valid range and the value it got.

Two layers:

* ``check_*`` helpers, called inside a function for one value (``check_int``, ``check_positive``,
  ``check_finite_array``, ``check_instance``, ``check_bool``, ``check_allocation``, ...);
* the :func:`validated` decorator (and :func:`validate_module` for every public function and dataclass of a module),
  which reads a callable's signature and annotations once and checks, on each call, the arguments whose annotation is
  a class (a task or sample class, ``bool``, ``int``, ``float``, ``np.ndarray``, ``Callable``, a ``Literal``, a union
  of these, ``| None``) or carries a rule in ``typing.Annotated`` metadata (:class:`Range`, :class:`Array`,
  :class:`OneOf`, :class:`Instance`, a class, or any ``check(name, value)`` callable), e.g.
  ``n_steps: Annotated[int, Range(integer=True, ge=0)]``. A parameter's rule is declared once, at its definition;
  the docstring states the same range in its type line (``n_steps : int >= 0``), which a test compares with the rule
  (:func:`argument_rules`).

Wrong types raise :class:`ArgumentTypeError` (a ``TypeError`` that is also a ``ValueError``, so callers that caught
the ``ValueError`` the helpers raised before keep working); values of the right type outside their range raise
``ValueError``. Every message names the parameter, the valid range and the value.

Every call of a checked function checks its own arguments, however deep it is called (from a user's callback inside
a sweep, a theory function of an overlay, another checked function); a check costs about a microsecond per call, so
inner loops call the unwrapped functions (``fn.__wrapped__``) or numba kernels. A finite-array check of a tensor is a
pass over its data (and a device synchronisation on a GPU): the public torch functions of the model modules make it,
and their training steps call unchecked private versions of them. :func:`check_shapes` checks that arguments agree
on named axes. Numba-compiled functions are never wrapped (:func:`validated` refuses them, :func:`validate_module`
skips them).
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import numbers
import os
import pathlib
import sys
import types
import typing

import numpy as np

__all__ = [
    "MAX_INT",
    "ArgumentTypeError",
    "check_int",
    "check_positive",
    "check_nonneg",
    "check_in_range",
    "check_finite_array",
    "check_choice",
    "check_instance",
    "check_bool",
    "available_memory",
    "check_allocation",
    "check_shapes",
    "MEMORY_LIMIT_ENV",
    "Range",
    "Array",
    "OneOf",
    "Instance",
    "seed_check",
    "seeds_check",
    "seed_or_seeds_check",
    "callable_check",
    "sequence_check",
    "validated",
    "validate_module",
    "argument_rules",
]

#: Largest integer any checked ``int`` parameter accepts unless its check says otherwise: sizes, counts, step numbers
#: and indices all stay in the int32 range that numba's and torch's index arithmetic use on some paths, and every
#: array sized by such a count must in any case fit in memory (``check_allocation``).
MAX_INT = 2**31 - 1


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type. A ``TypeError``; also a ``ValueError`` for callers catching the older class."""


# ----------------------------------------------------------------------------------------------------------------
# helpers for one value


def check_int(name: str, value, *, min_value: int | None = None, max_value: int | None = None) -> int:
    """Return ``value`` as ``int`` if it is an integer in [min_value, max_value]; else raise ``ValueError``.

    A float with an integral value is accepted; ``bool``, complex numbers, strings and ``None`` are not.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        if (
            isinstance(value, numbers.Real)
            and not isinstance(value, bool | np.bool_)
            and np.isfinite(value)
            and float(value).is_integer()
        ):
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer{_range_text(min_value, max_value)}; got {_show(value)}")
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


def check_in_range(
    name: str, value, low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> float:
    """Return ``value`` as float if it lies in the interval (closed unless ``*_open``); else raise."""
    x = _real(name, value)
    ok_low = x > low if low_open else x >= low
    ok_high = x < high if high_open else x <= high
    if not (ok_low and ok_high):
        lb = "(" if low_open else "["
        rb = ")" if high_open else "]"
        raise ValueError(f"{name} must lie in {lb}{low}, {high}{rb}; got {value!r}")
    return x


def check_finite_array(
    name: str,
    value,
    *,
    ndim: int | tuple[int, ...] | None = None,
    shape: tuple[int | None, ...] | None = None,
    allow_empty: bool = False,
) -> np.ndarray:
    """Return ``value`` as a C-contiguous float64 array after checking finiteness, ndim and shape.

    ``shape`` may contain ``None`` for free axes. Complex, string and object arrays are refused (a complex value is
    never cut to its real part).
    """
    _refuse_non_real_array(name, value)
    try:
        arr = np.asarray(value, dtype=np.float64)
        arr = np.ascontiguousarray(arr) if arr.ndim else arr.copy()  # ascontiguousarray would make 0-d 1-d
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of real numbers; got {_show(value)}") from exc
    _check_dims(name, arr, ndim, shape)
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} must not be empty; got shape {arr.shape}")
    _check_finite(name, arr)
    return arr


def check_choice(name: str, value, choices) -> object:
    """Return ``value`` if it is one of ``choices``; else raise ``ValueError`` listing them."""
    choices = tuple(choices)
    try:
        ok = value in choices
    except (TypeError, ValueError):  # e.g. an array compared with strings
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {_show(value)}")
    return value


def check_instance(name: str, value, types_, *, none: bool = False) -> object:
    """Return ``value`` if it is an instance of ``types_`` (a class or a tuple), or ``None`` with ``none=True``.

    Raises :class:`ArgumentTypeError` naming the expected classes otherwise.
    """
    if value is None and none:
        return value
    if not isinstance(value, types_):
        want = _type_text(types_ if isinstance(types_, tuple) else (types_,), none)
        raise ArgumentTypeError(f"{name} must be {want}; got {_show(value)}")
    return value


def check_bool(name: str, value) -> bool:
    """Return ``value`` as ``bool`` if it is ``True``/``False`` (numpy's bool too); else raise ``ArgumentTypeError``.

    Integers, strings and ``None`` are refused: a flag is never decided by the truth value of another object.
    """
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise ArgumentTypeError(f"{name} must be a bool (True or False); got {_show(value)}")


def available_memory() -> int:
    """Bytes a new allocation can use: the smaller of the free physical memory and this process's address-space
    limit (``RLIMIT_AS``) left over.
    """
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = 2**63
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as fh:
                used = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            avail = min(avail, max(soft - used, 0))
    except (ImportError, OSError, ValueError):
        pass
    return int(avail)


MEMORY_LIMIT_ENV = "ATTNDYN_MEMORY_LIMIT"
"""Environment variable that overrides the memory :func:`check_allocation` compares sizes with: a number of bytes
(``64e9``), or ``off`` to switch the refusal off and leave the decision to the operating system."""


def check_allocation(
    name: str, shape, *, itemsize: int = 8, what: str = "an array", limit: int | None = None
) -> tuple[int, ...]:
    """Raise ``ValueError`` naming ``name`` if an array of ``shape`` would not fit in the memory available.

    The one size refusal of the toolkit: the engine checks its saved trajectory and the samplers their draws with it
    before allocating, so a huge size is an error naming the argument, not a ``MemoryError`` (or a swapping machine)
    later.

    Parameters
    ----------
    name : str
        The size argument (or arguments, e.g. ``"n and d"``) the shape comes from; the message names it.
    shape : sequence of int
        Shape of the array about to be allocated.
    itemsize : int, default 8
        Bytes per element (float64); a caller that needs several arrays of ``shape`` multiplies it by their number.
    what : str
        What the array is, for the message.
    limit : int, optional
        Bytes allowed. Default: the environment variable ``ATTNDYN_MEMORY_LIMIT`` (bytes, or ``off`` for no
        refusal) when set, else :func:`available_memory`.

    Returns
    -------
    tuple of int
        ``shape`` as ints.
    """
    dims = tuple(int(s) for s in shape)
    n_bytes = itemsize
    for s in dims:
        n_bytes *= max(s, 0)
    source = "available"
    if limit is None:
        env = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
        if env.lower() == "off":
            return dims
        if env:
            try:
                limit = int(float(env))
            except ValueError:
                raise ValueError(
                    f"{MEMORY_LIMIT_ENV} must be a number of bytes (e.g. 64e9) or 'off'; got {env!r}"
                ) from None
            source = f"allowed by {MEMORY_LIMIT_ENV}"
        else:
            limit = available_memory()
    if n_bytes > limit:
        raise ValueError(
            f"{name} too large: {what} of shape {dims} needs {_bytes_text(n_bytes)}, "
            f"{_bytes_text(limit)} {source}; reduce {name} (or set {MEMORY_LIMIT_ENV}=off to try anyway)"
        )
    return dims


def check_shapes(**arrays) -> dict[str, int]:
    """Check that arrays (or tensors) agree on their named axes; return the size of each name.

    Each keyword is an argument's name and a pair ``(value, axes)``, ``axes`` a string of axis names such as
    ``"S B L d"``: the value must have one axis per name, and a name used twice (in one argument or across them)
    must have one size. A number stands for that fixed size; a leading ``...`` for any leading axes, which must then
    be the same in every argument that has it. The first argument that fixes a size is the reference the message
    names, e.g. ``check_shapes(X=(X, "S B L d"), y=(y, "S B"))`` raises ``ValueError: y must have shape (S, B) with
    S = 4, B = 100 as in X (S, B, L, d) = (4, 100, 8, 3); got (4, 99)``.
    """
    sizes: dict[str, int] = {}
    owner: dict[str, str] = {}
    layouts: dict[str, tuple[str, ...]] = {}
    for name, (value, axes) in arrays.items():
        shape = tuple(int(n) for n in value.shape)
        names = tuple(axes.split())
        lead = names[:1] == ("...",)
        core = names[1:] if lead else names
        want = "(" + ", ".join(names) + ")"
        if (len(shape) < len(core)) if lead else (len(shape) != len(core)):
            raise ValueError(f"{name} must have shape {want}; got {shape}")
        got = dict(zip(core, shape[len(shape) - len(core) :]))
        if lead:
            got["..."] = shape[: len(shape) - len(core)]
        for axis, n in got.items():
            fixed = axis.isdigit() and n != int(axis)
            if fixed or (axis in sizes and sizes[axis] != n):
                ref = owner.get(axis)
                same = ", ".join(f"{a} = {sizes[a]}" for a in got if a in sizes and not a.isdigit())
                where = f" with {same} as in {ref} {layouts[ref]}" if same and ref else ""
                raise ValueError(f"{name} must have shape {want}{where}; got {shape}")
            if not axis.isdigit() and axis not in sizes:
                sizes[axis], owner[axis] = n, name
        layouts[name] = "(" + ", ".join(names) + ") = " + str(shape)
    return sizes


# ----------------------------------------------------------------------------------------------------------------
# specs for the decorator


class Range:
    """A real number (or, with ``array=True``, also an array of them) in a range, finite unless ``finite=False``
    (which lets +-inf through; NaN never passes).

    ``integer=True`` asks for an integer (integral floats accepted). Bounds are optional: ``gt``/``ge`` below,
    ``lt``/``le`` above. An integer spec without an upper bound gets ``le=MAX_INT``.
    """

    __slots__ = ("gt", "ge", "lt", "le", "integer", "finite", "array", "text")

    def __init__(
        self, *, gt=None, ge=None, lt=None, le=None, integer: bool = False, finite: bool = True, array: bool = False
    ):
        if integer and lt is None and le is None:
            le = MAX_INT
        self.gt, self.ge, self.lt, self.le = gt, ge, lt, le
        self.integer, self.finite, self.array = integer, finite, array
        parts = []
        if gt is not None or ge is not None:
            parts.append(f"> {gt}" if gt is not None else f">= {ge}")
        if lt is not None or le is not None:
            parts.append(f"< {lt}" if lt is not None else f"<= {le}")
        kind = "an integer" if integer else ("a finite number" if finite else "a number")
        if array:
            kind = ("integers" if integer else ("finite numbers" if finite else "numbers")) + " (scalar or array)"
        self.text = kind + (" " + " and ".join(parts) if parts else "")

    def __repr__(self):
        return f"Range({self.text})"

    def __call__(self, name: str, value) -> None:
        """Check the argument ``value`` of parameter ``name``; raise an error naming both when it breaks the rule."""
        t = type(value)
        if t is float or t is int:  # fast path of the common case
            if (
                (value != value)
                or (self.finite and (value - value != 0))
                or (self.integer and t is float and not value.is_integer())
                or (self.gt is not None and not value > self.gt)
                or (self.ge is not None and not value >= self.ge)
                or (self.lt is not None and not value < self.lt)
                or (self.le is not None and not value <= self.le)
            ):
                self._scalar(name, value)
            return
        if isinstance(value, bool | np.bool_):
            raise ArgumentTypeError(f"{name} must be {self.text}; got {value!r}")
        if isinstance(value, numbers.Real):
            self._scalar(name, value)
            return
        if isinstance(value, numbers.Complex):
            raise ArgumentTypeError(f"{name} must be {self.text} (complex values are refused); got {value!r}")
        if not self.array:
            if isinstance(value, np.ndarray) and value.ndim == 0:
                self._array(name, value)
                return
            raise ArgumentTypeError(f"{name} must be {self.text}; got {_show(value)}")
        self._array(name, value)

    def _scalar(self, name, x):
        if isinstance(x, numbers.Integral):  # any size: np.isfinite refuses ints beyond int64
            x = int(x)
        elif x != x or (self.finite and not np.isfinite(x)):
            raise ValueError(f"{name} must be {self.text}; got {x!r}")
        if self.integer and not isinstance(x, int) and not float(x).is_integer():
            raise ValueError(f"{name} must be {self.text}; got {x!r}")
        if (
            (self.gt is not None and not x > self.gt)
            or (self.ge is not None and not x >= self.ge)
            or (self.lt is not None and not x < self.lt)
            or (self.le is not None and not x <= self.le)
        ):
            raise ValueError(f"{name} must be {self.text}; got {x!r}")

    def _array(self, name, value):
        arr = _real_array(name, value, self.text)
        if arr.size == 0:
            return
        if self.finite:
            _check_finite(name, arr, self.text)
        elif arr.dtype.kind == "f" and np.isnan(arr).any():
            idx = tuple(int(i) for i in np.argwhere(np.isnan(arr))[0]) if arr.ndim else ()
            raise ValueError(f"{name} must be {self.text}, not NaN; found NaN at index {idx}")
        if self.integer and arr.dtype.kind == "f" and not np.all(np.mod(arr[np.isfinite(arr)], 1) == 0):
            raise ValueError(f"{name} must be {self.text}; got non-integral entries")
        for bound, op, sym in (
            (self.gt, np.greater, ">"),
            (self.ge, np.greater_equal, ">="),
            (self.lt, np.less, "<"),
            (self.le, np.less_equal, "<="),
        ):
            if bound is not None:
                ok = op(arr, bound)
                if not np.all(ok):
                    idx = tuple(int(i) for i in np.argwhere(~ok)[0])
                    raise ValueError(f"{name} must be {self.text}; got {arr[idx]!r} at index {idx}")


class Array:
    """An array-like of real numbers (bools and integers included unless ``dtype`` says otherwise).

    ``ndim`` (an int or a tuple of allowed ones) and ``shape`` (``None`` for free axes) constrain the dimensions;
    ``range`` (a :class:`Range`) the entries; ``dtype="int"`` asks for integer entries. Finite unless
    ``finite=False``; non-empty unless ``allow_empty``. Torch tensors are checked on their own device (a ``range``
    on a copy in host memory).
    """

    __slots__ = ("ndim", "shape", "range", "dtype", "finite", "allow_empty", "text")

    def __init__(
        self,
        *,
        ndim=None,
        shape=None,
        range: Range | None = None,
        dtype: str = "real",
        finite: bool = True,
        allow_empty: bool = False,
    ):
        self.ndim = (ndim,) if isinstance(ndim, int) else ndim
        self.shape, self.range, self.dtype = shape, range, dtype
        self.finite, self.allow_empty = finite, allow_empty
        what = "integers" if dtype == "int" else "real numbers"
        self.text = f"an array of {'finite ' if finite and dtype != 'int' else ''}{what}"
        if shape is not None:
            self.text += " of shape (" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        elif self.ndim is not None:
            self.text += f" with ndim in {self.ndim}"

    def __repr__(self):
        return f"Array({self.text})"

    def __call__(self, name: str, value) -> None:
        """Check the argument ``value`` of parameter ``name``; raise an error naming both when it breaks the rule."""
        if value is None or isinstance(value, str | bytes | bool | np.bool_ | dict | set):
            raise ArgumentTypeError(f"{name} must be {self.text}; got {_show(value)}")
        if _is_tensor(value):
            _check_tensor(name, value, self)
            return
        arr = _real_array(name, value, self.text)
        if self.dtype == "int" and arr.dtype.kind not in "iu" and arr.size:
            if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or not np.all(np.mod(arr, 1) == 0):
                raise ValueError(f"{name} must be {self.text}; got dtype {arr.dtype}")
        _check_dims(name, arr, self.ndim, self.shape, self.text)
        if arr.size == 0 and not self.allow_empty:
            raise ValueError(f"{name} must be {self.text}, not empty; got shape {arr.shape}")
        if self.finite:
            _check_finite(name, arr, self.text)
        if self.range is not None:
            self.range._array(name, arr)


class OneOf:
    """One of a fixed set of values (compared with ``==``)."""

    __slots__ = ("choices",)

    def __init__(self, *choices):
        self.choices = choices

    def __repr__(self):
        return f"OneOf{self.choices!r}"

    def __call__(self, name: str, value) -> None:
        """Check the argument ``value`` of parameter ``name``; raise an error naming both when it breaks the rule."""
        check_choice(name, value, self.choices)


class Instance:
    """An instance of one of ``types_`` (``None`` too with ``none=True``)."""

    __slots__ = ("types", "none")

    def __init__(self, *types_, none: bool = False):
        self.types, self.none = types_, none

    def __repr__(self):
        return f"Instance({_type_text(self.types, self.none)})"

    def __call__(self, name: str, value) -> None:
        """Check the argument ``value`` of parameter ``name``; raise an error naming both when it breaks the rule."""
        if type(value) in self.types or isinstance(value, self.types):
            return
        check_instance(name, value, self.types, none=self.none)


def seed_check(name: str, value) -> None:
    """A random seed: an integer >= 0 (any size), a ``numpy.random.Generator``/``SeedSequence`` or a
    ``torch.Generator`` (``None`` is let through by the decorator where the parameter defaults to ``None``).
    """
    if isinstance(value, np.random.Generator | np.random.SeedSequence):
        return
    if isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
        if value < 0:
            raise ValueError(f"{name} must be a seed >= 0, a numpy Generator or a SeedSequence; got {value}")
        return
    if type(value).__module__.startswith("torch") and type(value).__name__ == "Generator":
        return
    raise ArgumentTypeError(
        f"{name} must be an integer seed >= 0, a numpy Generator or a SeedSequence; got {_show(value)}"
    )


def seeds_check(name: str, value) -> None:
    """A non-empty sequence of integer seeds >= 0 (one per run)."""
    sequence_check(name, value)
    seeds = list(value)
    if not seeds:
        raise ValueError(
            f"{name} must be a non-empty sequence of integer seeds >= 0; got an empty {type(value).__name__}"
        )
    for i, s in enumerate(seeds):
        if isinstance(s, bool | np.bool_) or not isinstance(s, numbers.Integral) or s < 0:
            raise ValueError(f"{name} must be a sequence of integer seeds >= 0; got {_show(s)} at index {i}")


def seed_or_seeds_check(name: str, value) -> None:
    """One integer seed >= 0 or a non-empty sequence of them (the forms ``TrainConfig`` and the samplers accept)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
        seed_check(name, value)
    else:
        seeds_check(name, value)


#: Checks of the scalar annotations.
def _bool_check(name, value):
    if value is not True and value is not False and not isinstance(value, np.bool_):
        raise ArgumentTypeError(f"{name} must be a bool (True or False); got {_show(value)}")


_INT = Range(integer=True)
_FLOAT = Range()


def callable_check(name, value):
    """A callable (a function, a class, an object with ``__call__``)."""
    if not callable(value):
        raise ArgumentTypeError(f"{name} must be callable; got {_show(value)}")


def _ndarray_check(name, value):
    _real_array(name, value, "an array of real numbers")


def path_check(name, value):
    """A non-empty path: a ``str`` or an ``os.PathLike`` (an empty string would silently mean the current folder)."""
    if isinstance(value, os.PathLike) and not isinstance(value, pathlib.PurePath):
        value = os.fspath(value)
    if not isinstance(value, str | os.PathLike) or (isinstance(value, str) and not value):
        raise ArgumentTypeError(f"{name} must be a non-empty path (str or os.PathLike); got {_show(value)}")


_path_check = path_check


def sequence_check(name, value):
    """A sequence (a tuple, a list, an array; not a string or a mapping)."""
    if value is None or isinstance(value, str | bytes | dict) or not isinstance(value, collections.abc.Iterable):
        raise ArgumentTypeError(f"{name} must be a tuple or list (a sequence); got {_show(value)}")


def _str_check(name, value):
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a str; got {_show(value)}")


# ----------------------------------------------------------------------------------------------------------------
# the decorator


def validated(fn=None, /, **specs):
    """Check the arguments of ``fn`` on each outermost call (see the module docstring).

    Use as ``@validated`` or ``@validated(lam=Range(gt=0), n_steps=Range(integer=True, ge=0))``. On a class (a
    dataclass), its ``__init__`` is wrapped in place and the class returned. A spec is a :class:`Range`,
    :class:`Array`, :class:`OneOf`, :class:`Instance`, a class (an instance check), or a callable
    ``check(name, value)`` that raises; ``None`` switches off the check the annotation would give. A parameter whose
    default is ``None`` (or whose annotation allows ``None``) accepts ``None`` without running its spec.
    """
    if fn is None:
        return lambda f: validated(f, **specs)
    _refuse_compiled(fn)
    if inspect.isclass(fn):
        init = fn.__dict__.get("__init__")
        if init is None or getattr(init, "__validated__", False):
            return fn
        fn.__init__ = _wrap(init, specs, owner=fn)
        return fn
    return _wrap(fn, specs)


def validate_module(namespace: dict, *, skip=(), per_function: dict | None = None, **specs) -> list[str]:
    """Apply :func:`validated` to every public function and class (its own ``__init__``, e.g. a dataclass's, or a
    NamedTuple's ``__new__``) defined in the module of ``namespace``.

    Call it at the end of a module as ``validate_module(globals())``; each parameter's rule is declared at its
    definition (its annotation, or a rule in ``Annotated`` metadata). ``specs`` (a rule for every parameter of that
    name in the module) and ``per_function`` (``{name: {param: spec}}``, the rules of one callable) override them
    from the bottom of a module, a second source of truth that dynamics/, closedform/ and empirical/ no longer use;
    ``skip`` names callables left alone. Numba dispatchers, imported objects, private names and
    exception classes are never wrapped. Returns the names wrapped.
    """
    module = namespace["__name__"]
    per_function = per_function or {}
    done = []
    for name, obj in list(namespace.items()):
        if name.startswith("_") or name in skip or getattr(obj, "__module__", None) != module:
            continue
        own = {**specs, **per_function.get(name, {})}
        if isinstance(obj, types.FunctionType) and not getattr(obj, "__validated__", False):
            namespace[name] = _wrap(obj, own, only_known=True)
            done.append(name)
        elif isinstance(obj, functools._lru_cache_wrapper):  # a cached function: checked before the cache lookup
            wrapped = _wrap(obj, own, only_known=True)
            wrapped.cache_clear, wrapped.cache_info = obj.cache_clear, obj.cache_info
            namespace[name] = wrapped
            done.append(name)
        elif inspect.isclass(obj) and not issubclass(obj, BaseException):
            init = obj.__dict__.get("__init__")
            new = obj.__dict__.get("__new__")
            if isinstance(init, types.FunctionType) and not getattr(init, "__validated__", False):
                obj.__init__ = _wrap(init, own, owner=obj, only_known=True)
                done.append(name)
            elif (
                hasattr(obj, "_fields")
                and isinstance(new, staticmethod)
                and isinstance(new.__func__, types.FunctionType)
                and not getattr(new.__func__, "__validated__", False)
            ):
                obj.__new__ = staticmethod(_wrap(new.__func__, own, owner=obj, only_known=True))  # a NamedTuple
                done.append(name)
    unknown = set(per_function) - set(done) - set(skip)
    if unknown:
        raise ValueError(f"per_function names callables not wrapped in {module}: {sorted(unknown)}")
    used = set()
    for name in done:
        obj = namespace[name]
        fn = (obj.__init__ if "__init__" in obj.__dict__ else obj.__new__) if inspect.isclass(obj) else obj
        used.update(inspect.signature(fn).parameters)
    if set(specs) - used:
        raise ValueError(f"validate_module({module}): no public callable has a parameter {sorted(set(specs) - used)}")
    return done


def argument_rules(obj) -> dict | None:
    """The checks a validated callable applies, ``{parameter: check}`` (a :class:`Range`, :class:`Array`,
    :class:`OneOf`, :class:`Instance` or a ``check(name, value)`` function), or ``None`` if ``obj`` is not validated.

    ``obj`` is a function wrapped by :func:`validated` (or :func:`validate_module`) or a class whose ``__init__`` (a
    NamedTuple's ``__new__``) is. Parameters without a check are left out. Tests read it to compare each parameter's
    documented range with the one enforced.
    """
    if inspect.isclass(obj):
        obj = obj.__dict__.get("__init__") if "__init__" in obj.__dict__ else obj.__dict__.get("__new__")
        obj = obj.__func__ if isinstance(obj, staticmethod) else obj
    rules = getattr(obj, "_argument_rules", None)
    return rules() if rules is not None else None


def _refuse_compiled(fn) -> None:
    mod = type(fn).__module__ or ""
    if mod.startswith("numba") or hasattr(fn, "py_func"):
        raise TypeError(
            f"validated cannot wrap the numba-compiled {getattr(fn, '__name__', fn)!r}: "
            "check the arguments in the Python function that calls it"
        )


def _wrap(fn, specs: dict, owner=None, only_known: bool = False):
    """The checking wrapper of ``fn``; the plan (which parameter gets which check) is built on the first call."""
    _refuse_compiled(fn)
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if owner is not None:
        params = params[1:]  # self
    unknown = set(specs) - {p.name for p in params}
    if unknown and not only_known:
        raise TypeError(f"validated({fn.__qualname__}): no parameter named {sorted(unknown)}")
    positional = tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    offset = 1 if owner is not None else 0
    label = owner.__qualname__ if owner is not None else fn.__qualname__
    plan = None

    def build():
        hints = _hints(fn, owner)
        out = []
        for p in params:
            spec = specs.get(p.name, _MISSING)
            ann = hints.get(p.name, _MISSING)
            check, optional = _check_for(spec, ann)
            if check is None:
                continue
            optional = optional or p.default is None
            idx = positional.index(p.name) + offset if p.name in positional else -1
            out.append((p.name, idx, check, optional))
        return tuple(out)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        nonlocal plan
        if plan is None:
            plan = build()
        n_args = len(args)
        for name, idx, check, optional in plan:
            if 0 <= idx < n_args:
                value = args[idx]
            elif name in kwargs:
                value = kwargs[name]
            else:
                continue  # default: trusted
            if value is None and optional:
                continue
            try:
                check(name, value)
            except (TypeError, ValueError) as exc:
                raise _prefixed(exc, label) from None
        return fn(*args, **kwargs)

    def rules() -> dict:
        nonlocal plan
        if plan is None:
            plan = build()
        return {name: check for name, _, check, _ in plan}

    wrapper.__validated__ = True
    wrapper.__wrapped__ = fn
    wrapper._argument_rules = rules
    return wrapper


_MISSING = object()


def _prefixed(exc: Exception, label: str) -> Exception:
    """``exc`` with the callable's name after its message (the message still starts with the parameter's name; the
    same exception if its class cannot be rebuilt from a message).
    """
    try:
        return type(exc)(f"{exc} (in {label})")
    except Exception:  # noqa: BLE001  (an exception class with another constructor)
        return exc


def _hints(fn, owner) -> dict:
    """The resolved annotations of ``fn`` (one by one, so that one unresolvable name costs only itself)."""
    raw = dict(getattr(fn, "__annotations__", {}) or {})
    if owner is not None:
        for klass in reversed(owner.__mro__):
            raw.update(getattr(klass, "__annotations__", {}) or {})
    module = sys.modules.get(getattr(owner or fn, "__module__", ""), None)
    glb = dict(vars(module)) if module is not None else {}
    glb.update(getattr(fn, "__globals__", {}))
    if owner is not None:
        glb.update(vars(sys.modules.get(owner.__module__, types.ModuleType("x"))))
    out = {}
    for name, ann in raw.items():
        if isinstance(ann, typing.ForwardRef):  # a NamedTuple's field: only its Annotated rule is read
            text = ann.__forward_arg__
            ann = text if text.startswith(("Annotated[", "typing.Annotated[")) else ann
        if isinstance(ann, str):
            try:
                ann = eval(ann, glb)  # noqa: S307  (the module's own annotation text)
            except Exception:  # noqa: BLE001  (a TYPE_CHECKING-only name: no check from it)
                continue
        out[name] = ann
    return out


def _check_for(spec, ann):
    """(check, optional) for a parameter: its explicit spec, else the rule in its ``Annotated`` metadata, else what its
    annotation implies (or (None, _)).
    """
    if typing.get_origin(ann) is typing.Annotated:
        rules = [m for m in ann.__metadata__ if m is None or inspect.isclass(m) or callable(m)]
        if len(rules) > 1:
            raise TypeError(f"Annotated[...] holds several argument rules: {rules}")
        if rules and spec is _MISSING:
            spec = rules[0]
        ann = ann.__origin__
    optional = False
    if ann is not _MISSING:
        _, optional = _annotation_types(ann)
    if spec is None:
        return None, optional
    if spec is not _MISSING:
        if inspect.isclass(spec):
            return Instance(spec), optional
        return spec, optional
    if ann is _MISSING:
        return None, optional
    return _annotation_check(ann)


def _annotation_types(ann):
    """(members, optional) of an annotation: the members of a union without ``None``."""
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in typing.get_args(ann) if a is not type(None)]
        return members, len(members) < len(typing.get_args(ann))
    if ann is None or ann is type(None):
        return [], True
    return [ann], False


def _annotation_check(ann):
    members, optional = _annotation_types(ann)
    if not members:
        return None, optional
    if len(members) == 1:
        return _single_check(members[0]), optional
    checks = [_single_check(m) for m in members]
    if any(c is None for c in checks):
        return None, optional  # a member we cannot check: no check for the union
    classes = tuple(_runtime_class(m) for m in members)
    text = _type_text(classes, optional)

    def union_check(name, value):
        for m, c in zip(members, checks):
            if _matches(m, value):
                c(name, value)
                return
        raise ArgumentTypeError(f"{name} must be {text}; got {_show(value)}")

    return union_check, optional


def _single_check(ann):
    if ann is bool:
        return _bool_check
    if ann is int:
        return _INT
    if ann is float:
        return _FLOAT
    if ann is str:
        return _str_check
    if ann is np.ndarray:
        return _ndarray_check
    if ann is os.PathLike:
        return _path_check
    origin = typing.get_origin(ann)
    if origin is typing.Literal:
        return OneOf(*typing.get_args(ann))
    if ann is collections.abc.Callable or origin is collections.abc.Callable:
        return callable_check
    cls = origin if origin is not None else ann
    if not inspect.isclass(cls) or cls in (object,) or isinstance(ann, typing.TypeVar):
        return None
    if cls in (dict,) or cls is collections.abc.Mapping:
        return Instance(collections.abc.Mapping)
    if cls in (list, tuple, set, frozenset) or cls in (
        collections.abc.Sequence,
        collections.abc.Iterable,
        collections.abc.Collection,
    ):
        return sequence_check
    if issubclass(cls, os.PathLike) or cls is pathlib.PurePath or issubclass(cls, pathlib.PurePath):
        return _path_check
    if cls.__module__ == "collections.abc":
        return Instance(cls)
    if cls.__module__.startswith("typing"):
        return None
    return Instance(cls)


def _runtime_class(ann):
    if ann is float:
        return float
    if ann is collections.abc.Callable or typing.get_origin(ann) is collections.abc.Callable:
        return collections.abc.Callable
    if typing.get_origin(ann) is typing.Literal:
        return object
    return typing.get_origin(ann) or ann


def _matches(ann, value) -> bool:
    """Whether ``value`` is of the kind of union member ``ann`` (so that the member's check decides)."""
    if ann is bool:
        return isinstance(value, bool | np.bool_)
    if ann is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)
    if ann is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
    if ann is np.ndarray:
        return isinstance(value, np.ndarray | list | tuple) or _is_tensor(value)
    if ann is os.PathLike or (inspect.isclass(ann) and issubclass(ann, pathlib.PurePath)):
        return isinstance(value, os.PathLike | str)
    origin = typing.get_origin(ann)
    if origin is typing.Literal:
        return isinstance(value, str | int | float | bool) and value in typing.get_args(ann)
    if ann is collections.abc.Callable or origin is collections.abc.Callable:
        return callable(value)
    cls = origin or ann
    return inspect.isclass(cls) and isinstance(value, cls)


# ----------------------------------------------------------------------------------------------------------------
# private helpers


def _real(name: str, value) -> float:
    if isinstance(value, complex | np.complexfloating):
        raise ValueError(f"{name} must be a real number (complex values are refused); got {value!r}")
    if isinstance(value, bool) or not isinstance(value, numbers.Real | np.floating | np.integer):
        try:
            arr = np.asarray(value)
            if arr.dtype.kind not in "biuf":
                raise TypeError
            value = float(arr.item())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be a real number; got {_show(value)}") from exc
    x = float(value)
    if not np.isfinite(x):
        raise ValueError(f"{name} must be finite; got {value!r}")
    return x


def _is_tensor(value) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "is_floating_point")


def _check_tensor(name, t, spec: Array) -> None:
    if t.is_complex():
        raise ArgumentTypeError(f"{name} must be {spec.text} (complex values are refused); got a complex tensor")
    _check_dims(name, t, spec.ndim, spec.shape, spec.text)
    if t.numel() == 0 and not spec.allow_empty:
        raise ValueError(f"{name} must be {spec.text}, not empty; got shape {tuple(t.shape)}")
    if spec.finite and t.is_floating_point():
        import torch

        # A finite sum has finite terms (a NaN or an inf entry makes the sum NaN or inf): one reduction, ~50x cheaper
        # than torch.isfinite's elementwise pass on CPU; only a sum that overflows needs the elementwise test.
        d = t.detach()
        if not bool(torch.isfinite(d.sum())) and not bool(torch.isfinite(d).all()):
            raise ValueError(f"{name} must be {spec.text}; it holds NaN or inf")
    if spec.range is not None and t.numel():
        spec.range._array(name, t.detach().cpu().numpy())


def _refuse_non_real_array(name, value) -> None:
    if (
        isinstance(value, complex | np.complexfloating)
        or (isinstance(value, np.ndarray) and value.dtype.kind == "c")
        or (_is_tensor(value) and value.is_complex())
    ):
        raise ValueError(f"{name} must hold real numbers (complex values are refused); got {_show(value)}")


def _real_array(name, value, text) -> np.ndarray:
    """``value`` as a numpy array with a real (bool, int or float) dtype, else ``ArgumentTypeError``."""
    if _is_tensor(value):
        if value.is_complex():
            raise ArgumentTypeError(f"{name} must be {text} (complex values are refused); got a complex tensor")
        value = value.detach().cpu().numpy()
    if value is None or isinstance(value, str | bytes):
        raise ArgumentTypeError(f"{name} must be {text}; got {_show(value)}")
    try:
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{name} must be {text}; got {_show(value)}") from exc
    if arr.dtype.kind == "c":
        raise ArgumentTypeError(f"{name} must be {text} (complex values are refused); got dtype {arr.dtype}")
    if arr.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"{name} must be {text}; got {_show(value)}")
    return arr


def _check_dims(name, arr, ndim, shape, text=None) -> None:
    got = tuple(arr.shape)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if len(got) not in allowed:
            raise ValueError(
                f"{name} must {'be ' + text if text and 'ndim' in text else 'have ndim in ' + str(allowed)}"
                f"; got shape {got}"
            )
    if shape is not None:
        if len(got) != len(shape) or any(s is not None and s != a for s, a in zip(shape, got)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} must have shape {want}; got {got}")


def _check_finite(name, arr, text=None) -> None:
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0]) if arr.ndim else ()
        what = f"be finite ({text})" if text else "be finite"
        raise ValueError(f"{name} must {what}; found {arr[bad]} at index {bad}")


def _type_text(types_, none: bool) -> str:
    names = []
    for t in types_:
        if t is float:
            names.append("a real number")
        elif t is int:
            names.append("an integer")
        elif t is bool:
            names.append("a bool")
        elif t is np.ndarray:
            names.append("an array")
        elif t is collections.abc.Callable:
            names.append("callable")
        else:
            names.append(_class_text(t))
    if none:
        names.append("None")
    return " or ".join(names) if len(names) > 1 else (names[0] if names else "None")


def _class_text(cls) -> str:
    """``a Task``, ``an xarray.Dataset``: a class with its article (third-party classes with their package)."""
    name = getattr(cls, "__name__", str(cls))
    top = (getattr(cls, "__module__", "") or "").split(".")[0]
    if top and top not in ("builtins", "collections", "dynamics", "closedform", "empirical", "figures", "tests"):
        name = f"{top}.{name}"
    return ("an " if name[:1].lower() in "aeioux" else "a ") + name  # "an xarray..."


def _show(value) -> str:
    """A short description of a bad value: its repr for small values, its type otherwise."""
    if isinstance(value, np.ndarray) and value.size > 6:
        return f"{type(value).__name__} of shape {value.shape}, dtype {value.dtype}"
    text = " ".join(repr(value).split())
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})" if not isinstance(value, str | int | float) or value is None else text


def _bytes_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _range_text(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f" in [{lo}, {hi}]"
    if lo is not None:
        return f" >= {lo}"
    if hi is not None:
        return f" <= {hi}"
    return ""
