"""Figures of Study A (one-layer transformer learns 1-NN in context; Li et al., NeurIPS 2024),
docs/models/token_selection.md §A.9 and the suggested overlay of docs/models/token_selection.md §5.

Registered figures (``python -m figures list --model nearest_neighbor``):

* ``nearest_neighbor.fig1``: illustration (Fig. 1): N labelled points on S^2 (d = 3) and the sphere coloured by the
  1-NN rule, beside the prediction f_W of the attention layer at the (xi1, xi2) reached by reduced GD
  (docs/models/token_selection.md §A.5).
* ``nearest_neighbor.fig2``: loss landscape L(xi1, xi2) for d = N = 4 (Fig. 2): heat map and 3-D surface, Monte
  Carlo over the x's with the labels integrated out (docs/models/token_selection.md §A.5), against Appendix R and
  against the torch loss.
* ``nearest_neighbor.fig3``: (left) training-loss curves for several (N, d); (right) test MSE on the shifted test law
  of Theorem A2 and on the training law (Fig. 3). Torch full-matrix W from W^(0) trained by GD on fixed prompts
  (seeds) against the reduced (xi1, xi2) map on a large prompt sample (the population proxy).
* ``nearest_neighbor.overlay``: the overlay of docs/models/token_selection.md §5 at d = 4, N = 16: reduced map vs torch
  full-matrix GD (the same x's) vs the factorised W = W_K^T W_Q from i.i.d. N(0, 0.01^2) factors with no mask
  (docs/models/token_selection.md §A.9); L vs log t, E[q_{i*}] and its 5% quantile, the distance off to the family and
  the probes xi1, xi2.

Seeds (the seed rule of :mod:`figures.presets`): prompt sample k is recipe docs/models/token_selection.md §G.A with
``numpy.random.default_rng(r_k)``, ``r_k`` the k-th seed of the figure's sample run (``"samples"``; ``"samples<j>"``
for the j-th (N, d) of Fig. 3; ``"torch"`` for Fig. 2's torch batches); the torch runs use the same integers as
trainer seeds (factor init); other draws come from the generators of the run ``"data"`` (``"data<j>"`` in Fig. 3).
Time axis of every panel: the GD step t (docs/models/token_selection.md §0; time = eta t is stored too).
"""

from __future__ import annotations

from figures.nearest_neighbor._common import LABEL_BIAS_SOURCE, ETA, DELTA, COLORS, DIAG
from figures.nearest_neighbor.illustrations import (
    plot_fig1,
    checks_fig1,
    data_fig1,
    APPENDIX_R,
    plot_fig2,
    gaps_fig2,
    checks_fig2,
    data_fig2,
)
from figures.nearest_neighbor.training import plot_fig3, gaps_fig3, checks_fig3, data_fig3
from figures.nearest_neighbor.overlay import plot_overlay, gaps_overlay, checks_overlay, data_overlay

__all__ = [
    "LABEL_BIAS_SOURCE",
    "ETA",
    "DELTA",
    "COLORS",
    "DIAG",
    "plot_fig1",
    "checks_fig1",
    "data_fig1",
    "APPENDIX_R",
    "plot_fig2",
    "gaps_fig2",
    "checks_fig2",
    "data_fig2",
    "plot_fig3",
    "gaps_fig3",
    "checks_fig3",
    "data_fig3",
    "plot_overlay",
    "gaps_overlay",
    "checks_overlay",
    "data_overlay",
]
