"""
A parameter sweep on a Dask cluster
===================================

:func:`dynamics.sweep` evaluates a function over a named grid and returns an ``xarray.Dataset`` whose dimensions
are the grid's. Here it runs on a :class:`dask.distributed.LocalCluster` (two workers on this machine); a remote
cluster is used the same way, with ``Client("tcp://scheduler:8786")`` instead (see :doc:`/guides/sweeps`).

The function maps (lambda, alpha) to the risk that the exact five-scalar PGD map of single-location regression
(:doc:`/models/single_location`) reaches from one fixed start after 3 000 steps.
"""

import matplotlib.pyplot as plt
import numpy as np
from dask.distributed import Client, LocalCluster

from closedform import single_location as sl
from dynamics import sweep


def final_risk(lam, alpha):
    task = sl.SingleLocationTask(d=40, L=5)
    start = np.array([[0.1, 0.2, 0.0, 0.0, 0.0]])  # (kappa, nu, theta, eta, rho) on the manifold
    run = sl.map(task, start, alpha=alpha, n_steps=3000, lam=lam, warn_unconverged=False)
    state = run.isel(trajectory=0, time=-1)
    return {"risk": float(sl.risk(task, lam, *(float(state[v]) for v in ("kappa", "nu", "theta", "eta", "rho"))))}


with (
    LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
    Client(cluster) as client,
):
    grid = sweep(final_risk, {"lam": np.linspace(0.1, 1.0, 6), "alpha": [0.005, 0.02]}, client=client)

print(grid)
# %%
# The two coordinates of the flow against time.

fig, ax = plt.subplots()
for alpha in grid.alpha.values:
    ax.plot(grid.lam, grid.sel(alpha=alpha)["risk"], "o-", label=f"alpha = {alpha}")
_ = ax.set(xlabel="lambda", ylabel="risk after 3 000 PGD steps", title="dynamics.sweep on a LocalCluster")
_ = ax.legend()
