"""
A model from a sympy risk
=========================

Map, flow, fixed points with their stability and a batched run from one sympy expression (:doc:`/guides/symbolic`).
The fixed points come from :func:`dynamics.fixed_points` on the generated map kernel, with the symbolic Jacobian of
the map for the root search and the stability (no finite differences).
"""

import numpy as np
import sympy as sp

from dynamics import SaveAt, fixed_points
from dynamics.symbolic import SymbolicModel

x, y, a = sp.symbols("x y a", real=True)
risk = (x**2 - 1) ** 2 / 4 + a * (y - x) ** 2 / 2 + sp.exp(-(y**2)) / 4  # a double well in x, y tied to x
model = SymbolicModel.from_risk(risk, [x, y], [a])  # the step size alpha is appended to the parameters
p = model.params_row(a=1.0, alpha=0.1)
print(model.expression("jacobian_flow"))  # the flow's Jacobian, derived by sympy and compiled by numba

# %%
# Every fixed point of the gradient map reached from 200 starts, with its multipliers and the largest step size at
# which it attracts; then a batched run of 1000 trajectories.

starts = np.random.default_rng(0).uniform(-2, 2, (200, 2))
alpha = model.param_names.index("alpha")
for fp in fixed_points(model.step, p, starts, jacobian=model.jacobian_map, step_param=alpha):
    print(fp.state.round(6), fp.stability, "|multipliers|", np.abs(fp.eigenvalues).round(4), "max step", fp.max_step)

run = model.iterate(np.random.default_rng(1).uniform(-2, 2, (1000, 2)), 300, params=p, saveat=SaveAt(final=True))
print("share of 1000 starts ending in the right well:", np.mean(run.states()[:, -1, 0] > 0))
