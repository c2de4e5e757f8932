"""
The engine on its own
=====================

A batched map and an adaptive ODE solve with :mod:`dynamics`, the examples of :doc:`/guides/engine`.
"""

import matplotlib.pyplot as plt
import numba
import numpy as np

from dynamics import Dopri5, SaveAt, integrate, iterate


@numba.njit
def gd_on_a_quadratic(k, x, p, out):  # x <- x - lr * (x - target)
    out[0] = x[0] - p[0] * (x[0] - p[1])


x0 = np.linspace(-1, 1, 1000)[:, None]  # 1000 trajectories, one state variable
run = iterate(gd_on_a_quadratic, x0, 500, params=np.array([0.1, 0.3]), saveat=SaveAt(every=50), names=("x",))
print("every trajectory ends at the target:", np.allclose(run.x.isel(time=-1), 0.3))


@numba.njit
def rotation(t, y, p, out):
    out[0] = -p[0] * y[1]
    out[1] = p[0] * y[0]


flow = integrate(
    rotation,
    np.array([[1.0, 0.0]]),
    (0.0, 10.0),
    solver=Dopri5(rtol=1e-10, atol=1e-12),
    params=np.array([1.0]),
    saveat=SaveAt(ts=np.linspace(0, 10, 101)),
    names=("x", "y"),
)
print("error against cos(t):", float(np.abs(flow.x.values[0] - np.cos(flow.time.values)).max()))
# %%
# The two coordinates of the flow against time.

fig, ax = plt.subplots()
ax.plot(flow.time, flow.x[0], label="x(t)")
ax.plot(flow.time, flow.y[0], label="y(t)")
ax.set(xlabel="t", title="Dopri5 with dense output")
ax.legend()
