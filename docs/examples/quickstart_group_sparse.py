"""
Quick start: group-sparse classification
========================================

The theorem's horizon, the exact eight-scalar GD map, full-batch GD of the torch model on the same (mirrored)
samples, and the overlay (:doc:`/models/token_selection`). The reduced map uses the symmetries of the data law
(rotations about v* and permutations of the irrelevant groups), which a finite sample has only approximately: the
two agree up to that sampling error.
"""

import matplotlib.pyplot as plt
import numpy as np

from closedform import group_sparse as gs
from dynamics import SaveAt, overlay
from empirical.models.group_sparse import build, config, training_samples
from empirical.train import train

task = gs.GroupSparseTask(d=4, D=6, jstar=2, eta=0.5)
print("theorem horizon T* at eps_B = 0.1:", gs.theorem_predictions(task, 0.1)["horizon"])
v_star = np.array([0.6, 0.0, 0.8, 0.0])  # the label direction in group j*
data = training_samples(task, 400, range(8), v_star, mirror=True)  # mirrored: the symmetries hold exactly
model = build(task, data=data)
learned = train(model, config("gd", model, 60, saveat=SaveAt(every=6)))  # full-batch GD from zero, 8 seeds


def theory(state0, steps):  # the exact reduced map on each seed's own sample (it starts from zero, as torch does)
    return gs.map(
        task, int(steps[-1]), rs=[gs.reduce_sample(s) for s in data], saveat=SaveAt(steps=steps), with_se=False
    )


theory_run, learned = overlay(theory, learned, state_variables=gs.STATE_NAMES)
# %%
# The overlay: the reduced dynamics (dashed) started from every seed's own step-0 state, and the
# learned runs of the seeds.

fig, ax = plt.subplots()
ax.plot(theory_run.step, theory_run.attn_jstar.T, "k--", lw=1)
ax.plot(learned.step, learned.attn_jstar.T, alpha=0.6)
ax.set(xlabel="GD step", ylabel="attention on group j*", title="reduced map (dashed) vs torch GD")
