"""
Add your own model
==================

The seventh model of :doc:`/guides/own_model`, run end to end at tiny sizes: linear attention with
:math:`\\Gamma = kI` and value :math:`v`, its fixed points through :func:`dynamics.fixed_points`, torch training of
the full :math:`d\\times d` matrix through :func:`empirical.train.train`, and the overlay with verdicts.
"""

import sys
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import dynamics
from closedform import models

try:  # installed: pip install -e examples/linear_attention (which registers it through the entry point)
    import attndyn_linear_attention  # noqa: F401
except ImportError:  # not installed: the source tree, and its record registered by hand (the same record)
    # the gallery runs this script from docs/examples without defining __file__
    here = Path(globals().get("__file__", Path.cwd() / "plot_own_model.py")).resolve().parent
    sys.path.insert(0, str(here.parents[1] / "examples" / "linear_attention"))
from attndyn_linear_attention import model as la  # noqa: E402
from attndyn_linear_attention.torch_model import train_run  # noqa: E402

if "linear_attention" not in models.names():
    models.register(la.MODEL)
print("registered models:", ", ".join(models.names()))

# %%
# Fixed points: the origin is a saddle, the minima sit at k = v = +-sqrt((2 - lam) / 2c) (closed form).
task = la.Task(d=8, N=16)
for fp in sorted(la.fixed_points(task), key=lambda p: p.state[0]):
    print(
        f"k = {fp.state[0]:+.6f}, v = {fp.state[1]:+.6f}: {fp.stability}, "
        f"eigenvalues {np.round(fp.eigenvalues.real, 4)}"
    )
print("closed form k* =", la.theorem_predictions(task)["k_star"])

# %%
# Torch trains the full matrix Gamma by gradient descent with learning rate lr. Its diagonal receives 1/d of dR/dk, so
# the reduced map that matches steps k by lr/d and v by lr; the map that steps both by lr is the trap.
lr, n_steps = 0.2, 300
t0 = time.perf_counter()
learned = train_run(task, lr=lr, n_steps=n_steps, n_prompts=1024, seeds=range(4))
print(f"torch: {time.perf_counter() - t0:.1f} s for 4 seeds x {n_steps} steps")
right, _ = dynamics.overlay(lambda s0, at: la.reduced_map(task, s0, lr, at), learned, state_variables=("k", "v"))
trap, _ = dynamics.overlay(
    lambda s0, at: la.reduced_map(task, s0, lr, at, full_matrix=False), learned, state_variables=("k", "v")
)
for name, theory in (("k step lr/d", right), ("k step lr", trap)):
    verdict = dynamics.compare(theory, learned, variables=["k", "v"])  # paired: one theory run per seed's start
    n_fail = int((verdict.status == "fails").sum())
    print(f"{name}: {n_fail} of {verdict.status.size} paired rows fail (no allowance: a difference test only)")

fig, ax = plt.subplots()
ax.plot(learned.step, learned.k.T, color="0.7", lw=0.8)
ax.plot(right.step, right.k[0], "--", label="reduced map, k step lr/d")
ax.plot(trap.step, trap.k[0], ":", label="reduced map, k step lr")
ax.set(xlabel="step", ylabel="k = tr(Gamma)/d")
ax.legend()
