"""Figures of Study C (random walks on a circle; Shi, Cao, NeurIPS 2025), docs/models/token_selection.md §C.8, §5.

Registered figures (``python -m figures list``):

* ``random_walk.fig4`` / ``random_walk.fig5``: zero initialisation, K = 6, N = 97, M = 1000, eta = 1, eps = 0.1,
  full-batch GD on 1000 training walks, p = 0.5 (Fig. 4) and p = 1 (Fig. 5): (a) test accuracy (plain and acc_RB)
  vs iteration, (b) heat map of V^(T), (c) mean attention over test walks vs position, (d) zoom near N - 1. Torch
  full-matrix GD (several training samples = seeds) against the exact reduced map of docs/models/token_selection.md §C.5
  on the same walks. Fig. 5 adds (e): the exact population (the K walks) of Theorem C2, torch vs reduced map.
* ``random_walk.fig6``: random start V, W ~ N(0, 0.01^2), eta = 0.01 on the loss summed over the 1000 training
  walks (eta n_train = 10 on the mean loss: the reading that reproduces the paper's ~0.5 at ~400 iterations; the mean
  loss at eta = 0.01, 0.1 or 1 stays at chance), tokens normalised inside the scores, p = 0.5 and p = 1: accuracy and
  KL(P_true || P_model) vs iteration, with the appendix heat maps (V and S for p = 0.5; snapshots of V and of the
  token average X S for p = 1). The p = 1 panel departs from the paper (it leaves the symmetric state of Theorem C2
  before p = 0.5 learns, at every step tried): ``FIG6_P1_EXPLANATION`` gives the measured cause.
* ``random_walk.factorised``: W = W_K^T W_Q from N(0, 0.01^2) factors (docs/models/token_selection.md §C.8 "our
  extension") at K = 6, N = 25, M = 200, p = 0.5 against the merged model from zero and the reduced map.
* ``random_walk.large_circle``: (K, N) = (20, 101), zero init, 50 iterations, p = 0.5 and p = 1
  (docs/models/token_selection.md §C.8 appendix).
* ``random_walk.overlay``: docs/models/token_selection.md §5: reduced (V, a, c) map vs torch full-matrix GD from zero vs
  a random start, p in {0, 0.5, 0.7, 1}: acc_RB, S_{N-1} and the direction errors of V (to Pi^T, sqrt(Pi^T),
  sqrt(C_hat^T)).

* ``random_walk.qa``: the QA tasks of docs/models/token_selection.md §C.8 ("beyond random walks": majority fruit,
  preferred fruit; 19-word vocabulary) with the model of docs/models/token_selection.md §C.3 and with an extra ReLU
  layer; Task 1 also on a balanced training set, and (a diagnostic of the ReLU variant's departure) with softmax
  cross-entropy in place of the paper's loss.

Positional code: phi_i = sqrt(rho) e_i with the paper's rho = M/2 (exactly orthogonal; the reconstructed sine code is
orthogonal only to round-off, which the unstable symmetric state of Theorem C2 amplifies until torch reaches accuracy
1 at p = 1). With it the coordinates of x~ beyond K + N are 0, so every run uses M = N + 1: exactly the
paper's M = 1000 from zero, equal in law from a random start, ~100x cheaper.

Seeds (the seed rule of :mod:`figures.presets`): repeat k of a figure uses the k-th seed ``r_k`` of its run
``"walks"`` (``cfg.seeds("walks", n_seeds)``): the training walks, then the test walks, of
docs/models/token_selection.md §G.C are drawn with ``numpy.random.default_rng(r_k)``, and ``r_k`` is the trainer
seed (random starts). Torch runs single-threaded inside ``data`` (small tensors; see
:func:`empirical.device.torch_threads`).
"""

from __future__ import annotations

from figures.random_walk._common import SERIES, ROUND_OFF, EXACT_SOURCE, RB_SOURCE, DEFAULTS_U, RIDGE_EXPLANATION
from figures.random_walk.zero_init import plot_zero_init, gaps_zero_init, checks_fig4, checks_fig5, data_fig4, data_fig5
from figures.random_walk.random_start import FIG6_P1_EXPLANATION, data_fig6, plot_fig6, gaps_fig6, checks_fig6
from figures.random_walk.factorised import plot_factorised, gaps_factorised, checks_factorised, data_factorised
from figures.random_walk.large_circle import (
    plot_large_circle,
    gaps_large_circle,
    checks_large_circle,
    data_large_circle,
)
from figures.random_walk.overlay import data_overlay, plot_overlay, gaps_overlay, checks_overlay
from figures.random_walk.qa import QA_IMBALANCE, data_qa, plot_qa, gaps_qa, checks_qa

__all__ = [
    "SERIES",
    "ROUND_OFF",
    "EXACT_SOURCE",
    "RB_SOURCE",
    "DEFAULTS_U",
    "RIDGE_EXPLANATION",
    "plot_zero_init",
    "gaps_zero_init",
    "checks_fig4",
    "checks_fig5",
    "data_fig4",
    "data_fig5",
    "FIG6_P1_EXPLANATION",
    "data_fig6",
    "plot_fig6",
    "gaps_fig6",
    "checks_fig6",
    "plot_factorised",
    "gaps_factorised",
    "checks_factorised",
    "data_factorised",
    "plot_large_circle",
    "gaps_large_circle",
    "checks_large_circle",
    "data_large_circle",
    "data_overlay",
    "plot_overlay",
    "gaps_overlay",
    "checks_overlay",
    "QA_IMBALANCE",
    "data_qa",
    "plot_qa",
    "gaps_qa",
    "checks_qa",
]
