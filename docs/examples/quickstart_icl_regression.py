"""
Quick start: in-context linear regression
=========================================

Two softmax heads started on the reduced pattern, the approximate loss, gradient descent on it, torch SGD on the
real model, and the overlay (:doc:`/models/icl_regression`). Both reach the optimality condition
mu^T omega = eta* (paper Eq. (4.3)); torch gets there in fewer steps because it trains the factors W_K, W_Q, W_O,
W_V, which precondition the gradient of (omega, mu), so its step count is not the time of GD on F: the overlay by
step count warns of that, and the aligned overlay (``align=``, :doc:`/guides/theory_vs_practice`) compares the runs
up to a monotone time change and reports the fitted time scale of each seed.
"""

import matplotlib.pyplot as plt
import numpy as np

from closedform import icl_regression as icl
from dynamics import SaveAt, overlay
from empirical.models.icl_regression import build
from empirical.train import TrainConfig, train

task = icl.ICLRegressionTask(d=5, L=40, sigma2=0.1)
print("approximate loss at the start:", icl.approx_loss(task, [0.1, -0.1], [0.2, -0.2]))
model = build(task, 2, omega0=[0.1, -0.1], mu0=[0.2, -0.2])  # every seed starts on the pattern (3.1)
config = TrainConfig(seeds=tuple(range(8)), n_steps=800, batch_size=256, lr=0.05, saveat=SaveAt(every=100))
learned = train(model, config)  # SGD on the plain MSE (no 1/2)


def theory(state0, steps):  # SGD with step lr on the MSE is GD with step 2 lr on F/2 (the flow's convention)
    return icl.map(task, state0[:, :2], state0[:, 2:], lr=0.1, n_steps=int(steps[-1]), saveat=SaveAt(steps=steps))


state = ("omega_0", "omega_1", "mu_0", "mu_1")
theory_run, steps_run = overlay(theory, learned, state_variables=state)  # matched by step count: warns (see below)


def flow(state0, times):  # the flow of F/2, saved at the given flow times
    return icl.flow(task, state0[:, :2], state0[:, 2:], (0.0, float(times[-1])), saveat=SaveAt(ts=times))


flow_run, aligned = overlay(
    flow, learned, state_variables=state, align="mu_dot_omega", grid=np.linspace(0.0, 400.0, 81)
)  # matched up to a monotone time change
print("fitted time scale (flow time per nominal time), per seed:", np.round(aligned.time_scale.values, 2))
# %%
# The overlay: the reduced dynamics (dashed) started from every seed's own step-0 state, and the
# learned runs of the seeds.

fig, ax = plt.subplots()
ax.plot(theory_run.step, theory_run.mu_dot_omega.T, "k--", lw=1)
ax.plot(steps_run.step, steps_run.mu_dot_omega.T, alpha=0.6)
ax.axhline(icl.theorem_predictions(task)["eta_star"], color="0.5", lw=0.8)  # the optimality condition (4.3)
ax.set(xlabel="SGD step", ylabel="mu^T omega", title="GD on F (dashed) vs torch SGD; grey: eta*")
