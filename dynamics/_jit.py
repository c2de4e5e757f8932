"""One guarded way to compile a numba kernel without reference counting (private).

numba's ``njit(_nrt=False)`` turns off its runtime's reference counting in one function: array views made inside it
(``x[:H]``, a row ``X[i]``) then cost no atomic increments and decrements, which is measurable in kernels called
once per step; the price is that the function may not allocate (``np.empty`` inside it fails to compile). The
option is used by numba itself and is not documented, so a numba release may drop or change it. Kernels therefore
never pass it themselves: they use :func:`njit_noref`, which passes it only while the installed numba still maps it
to its ``nrt`` flag and otherwise compiles the function normally (same results; only the reference counting
returns) with a warning. ``tests/dynamics/test_jit.py`` checks the option's meaning on the installed numba: no reference
counting calls in the compiled code of a function that makes views, and allocation refused.
"""

from __future__ import annotations

import warnings

import numba
from numba.core import options as _options


def nrt_option_supported() -> bool:
    """True when the installed numba maps the ``_nrt`` option of ``njit`` to its ``nrt`` compiler flag."""
    mapping = getattr(getattr(_options, "DefaultOptions", None), "_nrt", None)
    return getattr(mapping, "flag_name", None) == "nrt"


def njit_noref(**options):
    """``numba.njit(_nrt=False, **options)`` while the installed numba supports it, else ``numba.njit(**options)``
    (with a ``RuntimeWarning``). Use it only for functions that allocate nothing.
    """
    if nrt_option_supported():
        return numba.njit(_nrt=False, **options)
    warnings.warn(
        f"numba {numba.__version__} no longer maps njit's _nrt option to its nrt flag; kernels are compiled "
        "with reference counting (same results, somewhat slower)",
        RuntimeWarning,
        stacklevel=2,
    )
    return numba.njit(**options)
