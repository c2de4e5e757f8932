"""The guarded ``_nrt=False`` of numba (``dynamics._jit``): its meaning on the installed numba, and the fallback."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from dynamics import _jit


def _views(x, out):
    a = x[:2]
    b = x[2:]
    out[0] = a[0] + b[0]


def _allocates(x, out):
    t = np.empty(2)
    out[0] = t.shape[0] + x[0]


def _nrt_calls(fn) -> int:
    return sum(ir.count("NRT_") for ir in fn.inspect_llvm().values())


def test_the_option_still_means_no_reference_counting():
    # fails loudly when a numba release changes what _nrt=False does: the helper must then be revisited
    assert _jit.nrt_option_supported(), f"numba {numba.__version__} no longer maps _nrt to the nrt flag"
    x, out = np.arange(4.0), np.empty(1)
    plain, noref = numba.njit(_views), _jit.njit_noref()(_views)
    plain(x, out)
    assert out[0] == 2.0
    noref(x, out)
    assert out[0] == 2.0
    assert _nrt_calls(plain) > 0  # views are reference counted normally (the contrast the check relies on)
    assert _nrt_calls(noref) == 0
    with pytest.raises(numba.core.errors.TypingError):
        _jit.njit_noref()(_allocates)(x, out)


def test_fallback_without_the_option(monkeypatch):
    monkeypatch.setattr(_jit, "nrt_option_supported", lambda: False)
    with pytest.warns(RuntimeWarning, match="no longer maps"):
        fn = _jit.njit_noref(cache=False)(_views)
    x, out = np.arange(4.0), np.empty(1)
    fn(x, out)
    assert out[0] == 2.0 and _nrt_calls(fn) > 0
