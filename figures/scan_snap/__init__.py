"""Figures of Scan and Snap (Tian et al., NeurIPS 2023), docs/models/scan_snap.md §5.

Registered figures (``python -m figures list``):

* ``scan_snap.fig4``: Syn-Small attention maps c_n at iterations 0, 2, ..., 10 and 48 (SGD, momentum 0.9, zero init,
  eta_Y in {1, 10}, eta_Z = 1) against the momentum population map of docs/models/scan_snap.md §4.3, plus the
  distinct-token entropy.
* ``scan_snap.gap_T``: the SGD-map entropy gap against the sequence length T at two batch sizes (finite-T bias
  O(1/T) plus an SGD-noise term that falls with the batch, docs/models/scan_snap.md §4.7, §6.8).
* ``scan_snap.fig5``: Syn-Small with Adam, eta_Y = eta_Z in {0.1, 0.5, 1} (docs/models/scan_snap.md §5.2 [choice]).
* ``scan_snap.fig6``: Syn-Medium entropy grid after 100 steps (random init, docs/models/scan_snap.md §5.3) against the
  random-init map.
* ``scan_snap.fig11``, ``scan_snap.fig12``: Syn-Medium recall of distinct tokens vs threshold
  (docs/models/scan_snap.md §5.3).
* ``scan_snap.fig3``, ``scan_snap.fig8``, ``scan_snap.fig9``: theory figures of docs/models/scan_snap.md §5.4 (growth
  factor chi(t), decoder scalars h and h*, drive integral B with the B(t0) dots).
* ``scan_snap.fig10``: one-layer Transformer on the shipped text corpus (stdlib ``pydoc_data.topics`` in place of
  WikiText, docs/models/scan_snap.md §5.5 [choice]): attention entropy over training for several learning rates, and a
  Fig.-7-style map.

Every torch run goes through the shared trainer (:mod:`empirical.train`) and every overlay through the closed form
(:func:`closedform.scan_snap.map`), with the diagnostics of :mod:`closedform.scan_snap` (docs/models/scan_snap.md §4.6).

Seeds (the seed rule of :mod:`figures.presets`): the trainer seeds of a figure are those of its run ``"train"``
(``"train_b<batch>"`` for the batch sizes of ``scan_snap.gap_T``, so each batch size has its own seeds).
"""

from __future__ import annotations

from figures.scan_snap._common import SNAPSHOTS
from figures.scan_snap.syn_small import (
    plot_fig4,
    gaps_fig4,
    checks_fig4,
    data_fig4,
    plot_gap_T,
    gaps_gap_T,
    checks_gap_T,
    data_gap_T,
    plot_fig5,
    checks_fig5,
    data_fig5,
)
from figures.scan_snap.syn_medium import (
    plot_fig6,
    gaps_fig6,
    checks_fig6,
    data_fig6,
    plot_fig11,
    plot_fig12,
    checks_fig11,
    checks_fig12,
)
from figures.scan_snap.theory import (
    plot_fig3,
    checks_fig3,
    data_fig3,
    plot_fig8,
    checks_fig8,
    data_fig8,
    plot_fig9,
    checks_fig9,
    data_fig9,
)
from figures.scan_snap.real_text import plot_fig10, checks_fig10, data_fig10

__all__ = [
    "SNAPSHOTS",
    "plot_fig4",
    "gaps_fig4",
    "checks_fig4",
    "data_fig4",
    "plot_gap_T",
    "gaps_gap_T",
    "checks_gap_T",
    "data_gap_T",
    "plot_fig5",
    "checks_fig5",
    "data_fig5",
    "plot_fig6",
    "gaps_fig6",
    "checks_fig6",
    "data_fig6",
    "plot_fig11",
    "plot_fig12",
    "checks_fig11",
    "checks_fig12",
    "plot_fig3",
    "checks_fig3",
    "data_fig3",
    "plot_fig8",
    "checks_fig8",
    "data_fig8",
    "plot_fig9",
    "checks_fig9",
    "data_fig9",
    "plot_fig10",
    "checks_fig10",
    "data_fig10",
]
