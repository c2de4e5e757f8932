"""
Quick start: in-context nearest neighbour
=========================================

The loss at the start, the exact two-scalar GD map, full-batch GD of the torch model on the same prompts, and the
overlay (:doc:`/models/token_selection`). The reduced map integrates the labels out exactly; torch sees one finite
labelled sample per seed, so the two differ by label-sampling noise that shrinks as the sample grows.
"""

import matplotlib.pyplot as plt

from closedform import nearest_neighbor as nn
from dynamics import SaveAt, overlay
from empirical.models.nearest_neighbor import build, config, prompt_samples
from empirical.train import train

task = nn.NearestNeighborTask(d=4, N=8, sigma=4.0, eta=5.0)
print("population loss at W(0):", nn.theorem_predictions(task)["loss_at_init"])
data = prompt_samples(task, 500, seeds=range(8), duplicate_labels=True)  # label-symmetrised samples, one per seed
model = build(task, data=data)  # merged W from the paper's W(0)
learned = train(model, config("gd", model, 100, saveat=SaveAt(every=10)))  # full-batch GD, 8 seeds at once


def theory(state0, steps):  # the exact (xi1, xi2) map on each seed's own sample, from its step-0 state
    return nn.map(task, data, int(steps[-1]), state0=state0, saveat=SaveAt(steps=steps))


theory_run, learned = overlay(theory, learned, state_variables=("xi1", "xi2"))
# %%
# The overlay: the reduced dynamics (dashed) started from every seed's own step-0 state, and the
# learned runs of the seeds.

fig, ax = plt.subplots()
ax.plot(theory_run.step, theory_run.xi1.T, "k--", lw=1)
ax.plot(learned.step, learned.xi1.T, alpha=0.6)
ax.set(xlabel="GD step", ylabel="xi1", title="reduced map (dashed) vs torch GD")
