"""A vectorisable exp for the compiled loss kernels of the torch models (CPU).

numba calls libm's ``exp`` one value at a time (~3 ns a value here, and no SVML), which dominated the softmax and
erf kernels. :func:`exp_shifted` evaluates a whole row in one loop that LLVM vectorises, accurate to 2 ulp on
[-708, 0]: the range of a shifted softmax logit and of ``-(lambda a)^2`` in the erf predictor. Used by
:mod:`empirical.models.icl_regression` (softmax rows) and :mod:`empirical.models.single_location` (the erf
derivative's Gaussian factor).
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
from numba import njit

__all__ = ["exp_check", "exp_shifted"]

# exp by Cody-Waite range reduction x = k ln2 + r, |r| <= ln2/2, and the degree-13 Taylor polynomial of e^r (truncation
# (ln2/2)^14/14! < 5e-18 relative): a loop LLVM vectorises, unlike the libm call (3 ns a value here). ln2 = hi + lo with
# hi of 33 significant bits, so k * hi is exact for |k| <= 1100; lo carries the rest of ln2 (60-digit Decimal).
with localcontext() as _ctx:
    _ctx.prec = 60
    _LN2_DEC = Decimal(2).ln()
    _LN2_HI = math.ldexp(math.floor(math.ldexp(float(_LN2_DEC), 32)), -32)
    _LN2_LO = float(_LN2_DEC - Decimal(_LN2_HI))
    _INV_LN2 = float(1 / _LN2_DEC)
_EXP_FLOOR = -708.0  # exp(-708) ~ 3e-308 is still a normal double (2^k is built from its exponent bits below)


@njit(cache=True, fastmath={"contract"}, inline="always")
def exp_shifted(a, m, n, out, kbits, kscale):  # pragma: no cover (compiled; tested via exp_check)
    """out[i] = exp(max(a[i] - m, -708)) for i < n and returns their sum (a[i] <= m: the softmax shift).

    ``kbits`` (int64) and ``kscale`` (its float64 view) are scratch of length >= n for the 2^k factors.
    """
    for i in range(n):
        x = max(a[i] - m, _EXP_FLOOR)
        k = math.floor(x * _INV_LN2 + 0.5)
        r = (x - k * _LN2_HI) - k * _LN2_LO
        q = 1.0 / 6227020800.0
        q = q * r + 1.0 / 479001600.0
        q = q * r + 1.0 / 39916800.0
        q = q * r + 1.0 / 3628800.0
        q = q * r + 1.0 / 362880.0
        q = q * r + 1.0 / 40320.0
        q = q * r + 1.0 / 5040.0
        q = q * r + 1.0 / 720.0
        q = q * r + 1.0 / 120.0
        q = q * r + 1.0 / 24.0
        q = q * r + 1.0 / 6.0
        q = q * r + 0.5
        q = q * r + 1.0
        out[i] = q * r + 1.0
        kbits[i] = (np.int64(k) + 1023) << 52  # the bits of the double 2^k
    z = 0.0
    for i in range(n):
        out[i] *= kscale[i]
        z += out[i]
    return z


@njit(cache=True)
def exp_check(x, out):  # pragma: no cover (compiled)
    """exp(x) for x <= 0 through :func:`exp_shifted` (for the accuracy test); returns the sum."""
    kbits = np.empty(x.size, dtype=np.int64)
    return exp_shifted(x, 0.0, x.size, out, kbits, kbits.view(np.float64))
