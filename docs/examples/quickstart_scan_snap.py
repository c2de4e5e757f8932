"""
Quick start: scan and snap
==========================

The predicted transition time, the population map of the reduced (Y, Z) dynamics, SGD on the torch Y/Z model with
the same optimiser, and the overlay of the attention logits (:doc:`/models/scan_snap`). The population map is the
long-sequence limit; SGD on sequences of finite length T sits close to it (the gap shrinks like 1/T).
"""

import matplotlib.pyplot as plt
from closedform import scan_snap as ss
from dynamics import SaveAt, overlay
from empirical.models.scan_snap import build, config
from empirical.train import train

classes = ss.SequenceClasses.syn_small()
task = ss.ScanSnapTask(classes=classes, eta_Y=1.0, eta_Z=0.5)
print("predicted snapping time t0:", ss.theorem_predictions(task)["t0"])
model = build(task, T=256)  # zero init, the paper's Y/Z model
learned = train(model, config("sgd", model, task, range(8), n_steps=100, saveat=SaveAt(every=10)))
# learned["z"]: the logits z_{ml}, dims (trajectory, time, query_token, token), as in the closed form's Trajectory


def theory(state0, steps):  # population map from each seed's step-0 logits (state0 holds z flattened per seed)
    Z0 = state0.reshape(len(state0), classes.Q, classes.Lc)
    return ss.map(task, int(steps[-1]), momentum=0.9, Z0=Z0, saveat=SaveAt(steps=steps))


theory_run, learned = overlay(theory, learned, state_variables=("z",))
z19 = dict(query_token=0, token=19)  # a distinct token of class 0
# %%
# The overlay: the reduced dynamics (dashed) started from every seed's own step-0 state, and the
# learned runs of the seeds.

fig, ax = plt.subplots()
ax.plot(theory_run.step, theory_run.z.sel(**z19).isel(trajectory=0), "k--", label="population map")
ax.plot(learned.step, learned.z.sel(**z19).T, alpha=0.5)
ax.set(xlabel="SGD step", ylabel="z (query token 0, token 19)", title="attention logit: population map vs torch SGD")
