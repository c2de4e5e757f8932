"""Figures of Study B (group-sparse classification; Zhang, Meng, Cao, ICLR 2025), docs/models/token_selection.md §B.7.

Registered figures (``python -m figures list --model group_sparse``):

* ``group_sparse.pretrain_n500_d4_D6`` and ``group_sparse.pretrain_n200_d2_D4``: the paper's synthetic pre-training
  runs (docs/models/token_selection.md §B.7): full-batch GD from zero on n raw samples (not mirrored), eta = 0.5, j* =
  2; the paper's four panels (training loss, cos(v_x, v*), the norm ratio ||v_pos|| / ||v_x||, the attention matrix S
  at the last step) and two more: the row-j* weight E[S_j*,j] against t and S of the same draws with their mirror
  images. Torch GD over several training samples (seeds), on the raw samples, on the mirrored samples and projected
  onto the invariant family, against the projected 8-scalar population dynamics (docs/models/token_selection.md §B.3,
  numba reduced map on a Monte Carlo proxy of the population) and the closed-form first two steps.
* ``group_sparse.overlay``: the suggested overlay of docs/models/token_selection.md §5 at (d, D) = (2, 4): population
  reduced dynamics vs finite-n merged GD (n = 200 and 500, raw samples) vs the factorised transformer W = W_K^T W_Q from
  i.i.d. N(0, 0.01^2) factors; panels D L T^{1/3}, E[S_{j*,j}], the 5% quantile of min_j S_{j*,j}, 1 - cos(v_x, v*), the
  norm ratio and the distance to the reduced family.
* ``group_sparse.downstream``: downstream transfer (docs/models/token_selection.md §B.4 runnable recipe,
  docs/models/token_selection.md §B.7): test error vs downstream sample size n when v is fine-tuned by online SGD (or
  fitted) with the pre-trained W frozen, for the theorem's W(T*) (population map) and the torch W of the paper's
  raw-sample pre-training, against W = 0 (no pre-training) and logistic regression on vec(X).

Not registered: the CIFAR-10 experiment of docs/models/token_selection.md §B.7 (data sets are not loadable offline; the
spec keeps it optional).

Seeds (the seed rule of :mod:`figures.presets`): training sample k is docs/models/token_selection.md §G.B with
``numpy.random.default_rng(r_k)``, ``r_k`` the k-th seed of the figure's run ``"samples"``, and the torch runs use the
same integers as trainer seeds (factor initialisation of the factorised model); v*, the population and the
downstream draws come from the generators of its run ``"data"``.
"""

from __future__ import annotations

from figures.group_sparse._common import LEARNED, REDUCED, UNRECOVERABLE, N_PROXY, PAIRED_LEVEL
from figures.group_sparse.pretrain import (
    plot_pretrain,
    gaps_pretrain,
    checks_pretrain,
    data_pretrain_n500_d4_D6,
    data_pretrain_n200_d2_D4,
)
from figures.group_sparse.overlay import SOURCES, plot_overlay, gaps_overlay, checks_overlay, data_overlay
from figures.group_sparse.downstream import plot_downstream, gaps_downstream, checks_downstream, data_downstream

__all__ = [
    "LEARNED",
    "REDUCED",
    "UNRECOVERABLE",
    "N_PROXY",
    "plot_pretrain",
    "gaps_pretrain",
    "checks_pretrain",
    "data_pretrain_n500_d4_D6",
    "data_pretrain_n200_d2_D4",
    "SOURCES",
    "plot_overlay",
    "gaps_overlay",
    "checks_overlay",
    "data_overlay",
    "plot_downstream",
    "gaps_downstream",
    "PAIRED_LEVEL",
    "checks_downstream",
    "data_downstream",
]
