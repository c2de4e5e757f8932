"""``icl_regression.fig1``: two heads, learned KQ / OV heatmaps, omega_h and mu_h dynamics and the path in the
(gamma, mu_+) plane against GD on F/2.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy import stats

from closedform import icl_regression as cf
from figures._style import (
    band_over_seeds,
    panel_grid,
    plot_empirical_band,
)
from figures.registry import Explanation, compare_rows, register

from figures.icl_regression._common import (
    COLORS,
    COMMON_SETUP,
    _count_check,
    D,
    ETA_STAR,
    MODEL,
    PAPER,
    _same_sign_explanation,
    TASK,
    TRAIN_PAPER,
    TRAIN_QUICK,
    TRAIN_TINY,
    UNREC_STEPS_H2,
)
from figures.icl_regression._gd_overlay import _overlay_formed_check, _overlay_gaps, _plot_overlay
from figures.icl_regression._heads import _heads_ds, _heatmap, _plot_seed_lines, _shown_seed, _split_heads

__all__ = ["plot_fig1", "gaps_fig1", "checks_fig1", "data_fig1"]


def plot_fig1(ds):
    """Draw ``icl_regression.fig1`` from its dataset ``ds`` (a matplotlib Figure)."""
    # rows: the circuits of one seed; omega, mu and the risk per seed; the overlay with GD on F/2
    fig, axes = panel_grid(8, max_per_row=3, panel_size=(4.4, 3.4))
    H = ds.sizes["head"]
    s0 = _shown_seed(ds)
    for h in range(H):
        _heatmap(axes[h], ds.KQ.values[s0, -1, h], f"(a) KQ^({h + 1}), seed {int(ds.seed[s0])}, final")
    # a (d+1) x H matrix: at equal aspect it would be a strip; its cells stretch to the panel instead
    _heatmap(axes[2], ds.OV.values[s0, -1].T, "(a) OV label rows (columns = heads)", scale=1.2, aspect="auto")
    formed = ds.i0.values < ds.sizes["step"]
    for h in range(H):
        for key, ax, ref in (("omega", axes[3], 0.13), ("mu", axes[4], 3.5)):
            _plot_seed_lines(ax, ds.step.values, ds[key].values[:, :, h], formed, COLORS[h], f"head {h + 1}")
            ax.axhline(ref * (1 if h == 0 else -1), color="grey", lw=0.8, ls="-.")
    axes[3].set(xlabel="Adam step", ylabel="omega_h (effective KQ)", title="(b) omega_h per seed (dashed: not split)")
    axes[4].set(xlabel="Adam step", ylabel="mu_h (OV label entry)", title="(c) mu_h per seed")
    axes[3].legend(fontsize=7)
    axes[4].legend(fontsize=7)
    mean, lo, hi = band_over_seeds(ds.risk.values, method="percentile")
    plot_empirical_band(axes[5], ds.step.values, mean, lo, hi, color=COLORS[0], label="learned risk (eval)")
    axes[5].axhline(float(cf.dgd_risk(TASK, ETA_STAR)), color="k", lw=1, label="R_dGD(eta*) (7.2)")
    axes[5].axhline(cf.loss_infimum(TASK), color="k", ls="--", lw=1, label="inf F (4.4)")
    axes[5].set(xlabel="Adam step", ylabel="ICL risk", yscale="log", title="(d) risk")
    axes[5].legend(fontsize=7)
    _plot_overlay(axes[6], axes[7], ds)
    axes[6].set_title("(e) path vs GD on F/2")
    axes[7].set_title("(f) mu^T omega vs eta*")
    return fig


# The paper's two-head values at the end of its 500 001-step run (Fig. 1): omega_h = +-0.13, mu_h = +-3.5
PAPER_MAGNITUDES = {"omega": 0.13, "mu": 3.5}
MAGNITUDE_REL = 0.1  # see the allowance source in _magnitude_rows


def _magnitude_rows(ds):
    """|omega_h| and |mu_h| (mean over the two heads) at the last step against the paper's 0.13 / 3.5, over the seeds
    whose heads split (a same-sign seed is counted by the checks). A failing row is ``deferred`` only when the run
    measurably moves towards the paper's value over its second half (every seed's change in that direction, a
    one-sided Student t test of the mean change at level 0.05), with those numbers as its evidence; else it fails.
    """
    om, mu = ds.omega.values, ds.mu.values
    split = _split_heads(om[:, -1], mu[:, -1])
    if split.sum() < 2:
        return []
    steps = ds.step.values
    half = int(np.argmin(np.abs(steps - steps[-1] / 2)))
    rows = []
    for key, vals in (("omega", np.abs(om[split]).mean(-1)), ("mu", np.abs(mu[split]).mean(-1))):
        ref = PAPER_MAGNITUDES[key]
        change = vals[:, -1] - vals[:, half]
        towards = np.sign(ref - vals[:, half])  # the direction of the paper's value, per seed
        p = float(stats.ttest_1samp(change * towards, 0.0, alternative="greater").pvalue)
        moving = bool(np.all(change * towards > 0) and p <= 0.05)
        trend = (
            f"mean |{key}_h| over the {int(split.sum())} split seeds {vals[:, half].mean():.3g} at step "
            f"{int(steps[half])} -> {vals[:, -1].mean():.3g} at step {int(steps[-1])}, every seed towards "
            f"{ref:g} (one-sided t test of the change, p = {p:.1g})"
        )
        expl = Explanation(
            kind="deferred",
            reason=f"the paper's |{key}_h| = {ref:g} is the end of a 500 001-step run; the run drifts slowly along "
            "the valley of S_gamma (gamma ~ t^(-1/6) in phase III, docs/models/icl_regression.md §6.3) and has not "
            "got there",
            evidence=f"icl_regression.fig1 panels (b)-(c) against the grey lines: {trend}; the longer runs of "
            "icl_regression.fig13 (15 000 steps at lr 3e-3) get further, to gamma ~ 0.16 "
            "(docs/models/icl_regression.md §10)",
        )
        rows += compare_rows(
            f"H=2: |{key}_h| at the last step vs the paper's {ref:g} (Fig. 1, 500 001 steps)",
            steps[-1:],
            [ref],
            vals[:, -1:],
            rel_allowance=MAGNITUDE_REL,
            allowance_source="toolkit allowance, 10 %: the paper's value is one run read off its Fig. 1 to two "
            "digits, and where a run stops on the valley depends on lr, steps and batch (paper §4.2)",
            d=D,
            explanation=expl if moving else None,
        )
    return rows


def gaps_fig1(ds):
    """The gap rows of ``icl_regression.fig1`` (theory against the trained seeds) from its dataset ``ds``."""
    return _overlay_gaps(ds, "H=2") + _magnitude_rows(ds)


def checks_fig1(ds):
    """Fig. 1's own claims (the generic pattern checks of H = 2 are Fig. 13's): one positive and one negative head
    with omega_1 ~ -omega_2, a diagonal KQ x-x block, and the overlay's precondition.
    """
    om = ds.omega.values[:, -1]
    split = _split_heads(om, ds.mu.values[:, -1])
    pair = (om[:, 0] > 0) & (om[:, 1] < 0) & (np.abs(om[:, 0] + om[:, 1]) < 0.3 * np.abs(om).mean(-1))
    off = ds.kq_offdiag.values
    return [
        _count_check(
            "H=2",
            pair,
            claim="one positive and one negative head, omega_1 ~ -omega_2 (Observation 2)",
            criterion="omega_1 > 0 > omega_2 and |omega_1 + omega_2| < 0.3 mean|omega_h|",
            explanation=_same_sign_explanation(pair, split),
        ),
        _count_check(
            "H=2",
            np.all(off[:, -1] < 0.5 * off[:, 0], axis=-1),
            claim="KQ x-x block becomes diagonal (Observation 1)",
            criterion="off-diagonal ratio of every head < 0.5 x its initial value (formed: < 0.05, "
            "docs/models/icl_regression.md §9)",
        ),
        _overlay_formed_check(ds, "H=2", split),
    ]


_FIG1_CAPTION = (
    "Two heads (H = 2), " + COMMON_SETUP + ". (a) Learned KQ^(h) = W_K^T W_Q / sqrt(d+1) (rows = key "
    "features, last row/column = label slot) and the OV label rows at the end, of the first seed (in trainer "
    "order) whose pattern formed; colour scale +-1.15 max|entry| (OV: 1.2). (b)-(c) omega_h and mu_h vs Adam "
    "step, every seed of the run (16 at --preset quick; heads sorted by final omega; dashed: a seed whose heads "
    "did not split into a positive and a negative one; grey: the paper's +-0.13 / +-3.5 at 500k steps, compared "
    "in the magnitude rows: a 5 000-step run is still drifting towards them along the valley, gamma ~ t^(-1/6), "
    "docs/models/icl_regression.md §6.3). (d) The learned risk. (e) Learned path in the (gamma, mu_+) plane "
    "against GD on F/2 (lr 0.01) started from the probed state once the pattern formed (mu^T omega >= 0.9 "
    "eta*, gamma past its peak), and the solution manifold (4.6). (f) mu^T omega, learned vs GD at matched "
    "gamma, against eta* (4.3)."
)


@register(
    name="icl_regression.fig1",
    model=MODEL,
    paper=f"{PAPER}, Fig. 1",
    spec="docs/models/icl_regression.md §3, §5, §9",
    caption=_FIG1_CAPTION,
    unrecoverable=(
        UNREC_STEPS_H2,
        "overlay start: first logged step with mu^T omega >= "
        "0.9 eta*, sign matching and gamma past its peak [toolkit choice]",
    ),
    params={"tiny": TRAIN_TINY, "quick": TRAIN_QUICK, "paper": TRAIN_PAPER},
    plot=plot_fig1,
    gaps=gaps_fig1,
    checks=checks_fig1,
)
def data_fig1(cfg) -> xr.Dataset:
    """Fig. 1: H = 2 training (docs/models/icl_regression.md §9) with the GD-on-F/2 overlay
    (docs/models/icl_regression.md §5.1, §12).
    """
    return _heads_ds(cfg, 2, gd_overlay=True)
