"""
Quick start: single-location regression
=======================================

The task, its closed-form risk, the exact five-scalar PGD map, torch training of the erf predictor, and the
overlay of the two (:doc:`/models/single_location`).
"""

import matplotlib.pyplot as plt

from closedform import single_location as sl
from dynamics import SaveAt, overlay
from empirical.models import single_location as esl
from empirical.train import train

task = sl.SingleLocationTask(d=40, L=5)  # gamma^2 = 1/2, no noise
print("erf-oracle excess risk at lambda = 0.3:", sl.theorem_predictions(task, 0.3)["oracle_excess_risk"])
config = esl.config("fig5", seeds=range(8), n_steps=1000, lam=0.3, alpha=0.02, batch_size=200, log_every=50)
learned = train(esl.build(task, rng=0), config)  # online SGD, 8 seeds at once


def theory(state0, steps):  # exact population PGD from each seed's start, over the run's (finite) horizon
    return sl.map(
        task, state0, alpha=0.02, n_steps=int(steps[-1]), lam=0.3, saveat=SaveAt(steps=steps), warn_unconverged=False
    )


theory_run, learned = overlay(theory, learned, state_variables=("kappa", "nu", "theta", "eta", "rho"))
# %%
# The overlay: the reduced dynamics (dashed) started from every seed's own step-0 state, and the
# learned runs of the seeds.

fig, ax = plt.subplots()
ax.plot(theory_run.step, abs(theory_run.kappa.T), "k--", lw=1)
ax.plot(learned.step, abs(learned.kappa.T), alpha=0.6)
ax.set(xlabel="step", ylabel="|kappa| = |k . k*|", title="PGD map (dashed) vs torch SGD")
