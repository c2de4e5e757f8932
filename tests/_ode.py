"""A time-dependent test system of the engine's ODE tests and its independent reference solution.

``forced``: y0' = -k y0 + sin(3 t), y1' = y0^2 (the time dependence catches a solver that mishandles t), as a numba
right-hand side ``f(t, y, p, dy)`` with ``p = [k]``. ``forced_reference``: the same system solved by scipy's
DOP853 at rtol 1e-13, atol 1e-14 (errors ~1e-13 on this O(1) smooth system, far below every tolerance that uses it).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy.integrate import solve_ivp


@njit(cache=True)
def forced(t, y, p, dy):
    dy[0] = -p[0] * y[0] + np.sin(3.0 * t)
    dy[1] = y[0] * y[0]


def forced_reference(t1: float, ts, k: float = 0.7, y0=(1.0, 0.0)) -> np.ndarray:
    """States of ``forced`` at the times ``ts`` (rows) on (0, ``t1``), from ``y0``, by scipy's DOP853."""
    return solve_ivp(
        lambda t, y: [-k * y[0] + np.sin(3 * t), y[0] ** 2],
        (0.0, t1),
        list(y0),
        method="DOP853",
        rtol=1e-13,
        atol=1e-14,
        t_eval=ts,
    ).y.T
