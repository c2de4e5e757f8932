"""
A model from a sympy risk
=========================

Map, flow, fixed points with their stability and a batched run from one sympy expression (:doc:`/guides/symbolic`).
The fixed points come from scipy's root finder given the symbolic Jacobian of the flow.
"""

import numpy as np
import sympy as sp
from scipy.optimize import root

from dynamics import SaveAt
from dynamics.symbolic import SymbolicModel

x, y, a = sp.symbols("x y a", real=True)
risk = (x**2 - 1) ** 2 / 4 + a * (y - x) ** 2 / 2 + sp.exp(-(y**2)) / 4  # a double well in x, y tied to x
model = SymbolicModel.from_risk(risk, [x, y], [a])  # the step size alpha is appended to the parameters
p = model.params_row(a=1.0, alpha=0.1)

# %%
# The fixed points, classified by the multipliers of the gradient map at the symbolic Jacobian, and a batched run.

for guess in ([0.0, 0.0], [1.0, 1.0], [-1.0, -1.0]):
    sol = root(model.vector_field, guess, args=(p,), jac=model.jacobian_flow)
    mult = np.abs(np.linalg.eigvals(model.jacobian_map(sol.x, p)))  # multipliers of the gradient map
    print(sol.x.round(6), "attracting" if np.all(mult < 1) else "saddle/repelling", mult.round(4))

starts = np.random.default_rng(0).uniform(-2, 2, (1000, 2))
run = model.iterate(starts, 300, params=p, saveat=SaveAt(final=True))
print("share of 1000 starts ending in the right well:", np.mean(run.states()[:, -1, 0] > 0))
