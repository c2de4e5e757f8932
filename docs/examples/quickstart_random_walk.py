"""
Quick start: random walks on a circle
=====================================

The optimal accuracy, the exact GD map of the reduced state (V, a, c), full-batch GD of the torch model on the same
walks, and the overlay (:doc:`/models/token_selection`).
"""

import matplotlib.pyplot as plt

from closedform import random_walk as rw
from dynamics import SaveAt, overlay
from empirical.models.random_walk import build, config, walk_samples
from empirical.train import train

task = rw.RandomWalkTask(K=6, N=13, p=0.7, M=14)  # exactly orthogonal positional code
print("optimal accuracy max(p, 1 - p):", rw.theorem_predictions(task)["optimal_accuracy"])
data, _ = walk_samples(task, 400, seeds=range(8))  # one fixed walk sample per seed
model = build(task, data=data)
learned = train(model, config("gd", model, 20, saveat=SaveAt(every=2)))  # full-batch GD from zero, 8 seeds


def theory(state0, steps):  # the exact reduced map on each seed's own walks, from its step-0 state
    return rw.map(task, int(steps[-1]), walks=data, state0=state0, saveat=SaveAt(steps=steps))


theory_run, learned = overlay(theory, learned, state_variables=rw.state_names(task))
# %%
# The overlay: the reduced dynamics (dashed) started from every seed's own step-0 state, and the
# learned runs of the seeds.

fig, ax = plt.subplots()
ax.plot(theory_run.step, theory_run[f"c_{task.N - 2}"].T, "k--", lw=1)
ax.plot(learned.step, learned[f"c_{task.N - 2}"].T, alpha=0.6)
ax.set(xlabel="GD step", ylabel="c of the parent token (position N - 1)", title="reduced map (dashed) vs torch GD")
