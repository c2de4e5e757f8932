"""Figures of single-location regression (Marion, Berthier, Biau, Boyer, ICLR 2025), docs/models/single_location.md §8.

Registered figures (``python -m figures list``):

* ``single_location.fig3``: erf-oracle risk vs the optimal linear risk, vs L and vs d
  (docs/models/single_location.md §8.1; closed forms of docs/models/single_location.md §5.2-§5.4; parameters [U], the
  the reference proposal).
* ``single_location.fig4a``: exact five-scalar PGD from the sphere, lambda_n = 1/(1 + 1e-4 n)
  (docs/models/single_location.md §8.2).
* ``single_location.fig4b``: PGD on the manifold M, lambda = 0.1 (docs/models/single_location.md §8.3; Theorem 5).
* ``single_location.fig5``: online stochastic PGD of the torch erf predictor (docs/models/single_location.md §8.4)
  against the deterministic five-scalar PGD started from the same initial scalars (overlay): the paper's batch 5 (rows
  explained by SGD noise; checks against the reference table of 12 runs) and a batch-100 run over the transient (rows
  hold).
* ``single_location.fig6``: the five fixed points on M and the vector field of the reduced flow
  (docs/models/single_location.md §8.5; [U]).
* ``single_location.fig7``: PGD from the sphere at constant lambda = 0.9 (a) and 0.1 (b), with the spurious point S of
  docs/models/single_location.md §7.4 (docs/models/single_location.md §8.6).

The four-panel dynamics figures follow docs/models/single_location.md §8: (1) excess risk R - eps^2 vs step, (2) |kappa|
and |nu|, (3) (kappa, nu) paths of selected runs coloured by step, (4) distance to M on a log axis, plotted as
max(dist_M, 1e-16) (docs/models/single_location.md §0.3). Bands are the 95% percentile range over runs
(docs/models/single_location.md §8); rows follow docs/models/single_location.md §0.3 (row n = iterate n with lambda_n).

Seeds (the seed rule of :mod:`figures.presets`): initial states come from the run ``"init"`` of the model itself
(figure name ``single_location``), so Figs. 4(a), 7(a), 7(b) share the same initial states, as in the authors' code
(docs/models/single_location.md §8.6, §9.5). Fig. 5's torch seeds are those of its run ``"train"`` and its oracle
comes from its run ``"data"``; the deterministic PGD starts from each seed's step-0 scalars.
"""

from __future__ import annotations

import importlib.util

from figures.single_location._common import STATE, DYN_VARS, DIST_FLOOR, GAMMA
from figures.single_location.oracle_risk import plot_fig3, checks_fig3, data_fig3
from figures.single_location.pgd import (
    plot_fig4a,
    checks_fig4a,
    data_fig4a,
    plot_fig4b,
    checks_fig4b,
    data_fig4b,
    plot_fig7,
    checks_fig7,
    data_fig7,
)
from figures.single_location.manifold import plot_fig6, checks_fig6, data_fig6
from figures.single_location.stochastic import plot_fig5, gaps_fig5, checks_fig5, data_fig5


#  The Transformer and multi-location figures (docs/models/single_location.md §8.7-§8.9) live in their own module;
# importing it registers them.
if importlib.util.find_spec("figures._single_location_transformer") is not None:
    from figures import _single_location_transformer  # noqa: F401

# The attractor atlas of the reduced dynamics (single_location.continuation, single_location.atlas and
# icl_regression.atlas): results of this toolkit, not figures of the papers.
from figures import _atlas  # noqa: F401

# Fig. 1(b): linear probing of a real pretrained encoder; registered only when the extra 'probe' is installed.
from figures import _single_location_probing  # noqa: F401

__all__ = [
    "STATE",
    "DYN_VARS",
    "DIST_FLOOR",
    "GAMMA",
    "plot_fig3",
    "checks_fig3",
    "data_fig3",
    "plot_fig4a",
    "checks_fig4a",
    "data_fig4a",
    "plot_fig4b",
    "checks_fig4b",
    "data_fig4b",
    "plot_fig7",
    "checks_fig7",
    "data_fig7",
    "plot_fig6",
    "checks_fig6",
    "data_fig6",
    "plot_fig5",
    "gaps_fig5",
    "checks_fig5",
    "data_fig5",
]
