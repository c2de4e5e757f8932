"""``icl_regression.fig20`` (concentration of the softmax weights), ``icl_regression.fig21`` (four heads against
GD on F/2) and ``icl_regression.fig22`` (the two-head reduced ODE).
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from closedform import icl_regression as cf
from dynamics.saveat import SaveAt
from figures._style import (
    band_over_seeds,
    new_figure,
    panel_grid,
    plot_empirical_band,
    plot_reduced,
    plot_theory,
)
from figures.registry import CheckResult, compare_rows, register

from figures.icl_regression._common import (
    COLORS,
    D,
    ETA_STAR,
    HEADS_SETUP,
    HEADS_UNREC,
    L_TRAIN,
    MODEL,
    PAPER,
    TASK,
    TRAIN_HEADS,
)
from figures.icl_regression._gd_overlay import (
    _overlay_formed_check,
    _overlay_gaps,
    _overlay_mean,
    OVERLAY_MIN_LOGS,
    _plot_overlay,
)
from figures.icl_regression._heads import HOMOG_TOL
from figures.icl_regression.circuits import data_heads

__all__ = [
    "plot_fig20",
    "checks_fig20",
    "data_fig20",
    "plot_fig21",
    "gaps_fig21",
    "checks_fig21",
    "TABLE_64",
    "plot_fig22",
    "checks_fig22",
    "data_fig22",
]


# ----------------------------------------------------------------------------------------------------------------------
# Fig. 20: softmax weight norms
# ----------------------------------------------------------------------------------------------------------------------
def _fig20_references(omega: float, d: int, L: int) -> list[tuple[float, str, str]]:
    """Reference lines of one Fig. 20 panel: 1/sqrt(L) always; the large-L prediction exp(omega^2 d/2)/sqrt(L)
    (docs/models/icl_regression.md §4.2) only where it applies (omega^2 d <= 1: beyond it the prediction exceeds the
    largest possible norm 1,
    e.g. 7.7e7 at d = 40, omega = 1, and would stretch the axis); there, the one-hot norm 1 instead.
    """
    out = [(1 / math.sqrt(L), "-", "1/sqrt(L)")]
    if omega * omega * d <= 1.0 + 1e-12:
        out.append((math.exp(omega * omega * d / 2) / math.sqrt(L), "--", "exp(omega^2 d/2)/sqrt(L)"))
    else:
        out.append((1.0, ":", "one-hot: |w| = 1"))
    return out


def plot_fig20(ds):
    """Draw ``icl_regression.fig20`` from its dataset ``ds`` (a matplotlib Figure)."""
    n_case = ds.sizes["case"]
    fig, axes = panel_grid(n_case, max_per_row=2 if n_case == 4 else 3, panel_size=(4.2, 3.2))
    L = int(ds.attrs["L"])
    for j in range(ds.sizes["case"]):
        ax = axes[j]
        ax.hist(ds.norms.values[j], bins=50, color=COLORS[j % 7], alpha=0.8)
        for x, style, lab in _fig20_references(float(ds.omega.values[j]), int(ds.d.values[j]), L):
            ax.axvline(x, color="k", lw=1, ls=style, label=lab)
        ax.set(title=f"d = {int(ds.d.values[j])}, omega = {ds.omega.values[j]:.3g}", xlabel="|softmax weights|")
        ax.legend(fontsize=6)
    return fig


def checks_fig20(ds):
    """The theorem checks of ``icl_regression.fig20`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
    out = []
    L = int(ds.attrs["L"])
    for j in range(ds.sizes["case"]):
        d, om = int(ds.d.values[j]), float(ds.omega.values[j])
        med = float(np.median(ds.norms.values[j])) * np.sqrt(L)
        if om * om * d <= 1.0 + 1e-12:
            pred = math.exp(om * om * d / 2)
            out.append(
                CheckResult(
                    name=f"d={d}, omega={om:.3g}: sqrt(L) |w| ~ exp(omega^2 d / 2) (large-L, "
                    "docs/models/icl_regression.md §4.2)",
                    passed=0.6 * pred < med < 1.4 * pred,
                    measured=med,
                    expected=pred,
                    tolerance="+-40% (finite L = 40, median vs mean-square)",
                )
            )
        elif d >= L_TRAIN / 2:
            # d ~ L and omega = 1: exp(omega^2 d/2) = e^20, the weights are near one-hot (sqrt(L)|w| -> sqrt(40) = 6.3)
            out.append(
                CheckResult(
                    name=f"d={d}, omega={om:.3g}: concentration fails (d ~ L, omega not O(1/sqrt(d)))",
                    passed=med > 3.0,
                    measured=med,
                    expected="> 3 (one-hot: sqrt(L) = 6.3)",
                    tolerance="median sqrt(L)|w| above half its one-hot value",
                )
            )
    return out


@register(
    name="icl_regression.fig20",
    model=MODEL,
    paper=f"{PAPER}, Fig. 20",
    spec="docs/models/icl_regression.md §4.2, §9",
    caption=(
        "Histograms of the Euclidean norm of softmax_i(omega x_i^T x_q), i = 1..L, x's iid N(0, I_d), "
        "L = 40: it concentrates near 1/sqrt(L) (up to exp(omega^2 d/2)) for omega = O(1/sqrt(d)) and "
        "fails for omega = 1 when d ~ L."
    ),
    unrecoverable=(
        "L = 40, d in {5, 40}, omega in {1/sqrt(d), 1}, 1e4 draws (docs/models/icl_regression.md §9 Fig. 20 defaults)",
    ),
    params={"tiny": {"n": 1000}, "quick": {"n": 10000}, "paper": {"n": 10000}},
    plot=plot_fig20,
    checks=checks_fig20,
)
def data_fig20(cfg) -> xr.Dataset:
    """Fig. 20: softmax weight-vector norms (closedform.icl_regression.softmax_weight_norms)."""
    n = cfg.params["n"]
    cases = [(5, 1 / np.sqrt(5)), (5, 1.0), (40, 1 / np.sqrt(40)), (40, 1.0)]
    rng = cfg.generators("data", ["norms"])["norms"]
    norms = np.stack([cf.softmax_weight_norms(d, L_TRAIN, om, n, rng) for d, om in cases])
    return xr.Dataset(
        {"norms": (("case", "draw"), norms)},
        coords={"d": (("case",), [c[0] for c in cases]), "omega": (("case",), [c[1] for c in cases])},
        attrs={"L": L_TRAIN},
    )


# ----------------------------------------------------------------------------------------------------------------------
# Fig. 21: four heads, learned vs GD on F/2
# ----------------------------------------------------------------------------------------------------------------------
def plot_fig21(ds):
    """Draw ``icl_regression.fig21`` from its dataset ``ds`` (a matplotlib Figure)."""
    fig, axes = panel_grid(4, max_per_row=2, panel_size=(5.0, 3.6))
    _plot_overlay(axes[0], axes[1], ds)
    axes[0].set_title("(a) path vs GD on F/2")
    axes[1].set_title("(b) mu^T omega vs eta*")
    mean, lo, hi = band_over_seeds(ds.sum_mu.values, method="percentile")
    plot_empirical_band(axes[2], ds.step.values, mean, lo, hi, color=COLORS[0], label="learned sum mu")
    plot_reduced(axes[2], ds.step.values, _overlay_mean(ds, "summu_gd"), color=COLORS[1], label="GD on F/2")
    axes[2].axhline(0, color="k", lw=0.8)
    axes[2].set(xlabel="Adam step", ylabel="sum_h mu_h (4.2)", title="(c) zero-sum OV")
    axes[2].legend(fontsize=7)
    mean, lo, hi = band_over_seeds(ds.homogeneity.values, method="percentile")
    plot_empirical_band(axes[3], ds.step.values, mean, lo, hi, color=COLORS[0], label="learned")
    plot_reduced(axes[3], ds.step.values, _overlay_mean(ds, "homog_gd"), color=COLORS[1], label="GD on F/2")
    axes[3].set(xlabel="Adam step", ylabel="std/mean |omega_h| (4.4)", title="(d) homogeneity of |omega_h|")
    axes[3].legend(fontsize=7)
    return fig


def gaps_fig21(ds):
    """The overlay rows (the flow against the trained heads) and the homogeneity of |omega_h| (over non-dummy heads,
    Eq. (4.4)), learned minus GD on F/2 at matched gamma at the last logged step, over the same seeds.
    """
    rows = _overlay_gaps(ds, "H=4")
    T = ds.sizes["step"]
    use = ds.i0.values <= T - 1 - OVERLAY_MIN_LOGS
    if use.sum() >= 2:
        rows += compare_rows(
            "H=4: homogeneity std/mean |omega_h| (non-dummy heads), learned - GD on F/2 at matched gamma",
            ds.step.values[-1:],
            [0.0],
            (ds.homogeneity - ds.homog_gd).values[use][:, -1:],
            allowance=HOMOG_TOL,
            allowance_source="the homogeneity tolerance of the pattern checks "
            "(formed pattern 0.01, docs/models/icl_regression.md §9; untrained init O(1))",
            d=D,
        )
    return rows


def checks_fig21(ds):
    """The overlay's precondition only (the H = 4 pattern checks are Fig. 13's, on the same run)."""
    return [_overlay_formed_check(ds, "H=4")]


register(
    name="icl_regression.fig21",
    model=MODEL,
    paper=f"{PAPER}, Fig. 21",
    spec="docs/models/icl_regression.md §5, §9, §12",
    caption=(
        "Four heads: torch training (" + HEADS_SETUP + ") against GD on F/2 (lr 0.01) started from the "
        "probed (omega, mu) once the pattern formed, aligned by the KQ scale gamma (mean |omega_h| weighted "
        "by |mu_h|, so that a head turning into a dummy leaves it continuously; docs/models/icl_regression.md "
        "§12): path in the (gamma, mu_+) plane against S_gamma (4.6), mu^T omega, zero-sum OV and the "
        "homogeneity of |omega_h| over non-dummy heads (|mu_h| >= 0.05 max|mu|), learned (mean and 95% "
        "range over seeds) and GD on F/2 (mean over the seeds whose pattern formed). Rows: learned minus "
        "GD at matched gamma at the last step."
    ),
    unrecoverable=(
        HEADS_UNREC,
        "overlay start: first logged step with mu^T omega >= 0.9 eta*, sign "
        "matching and gamma past its peak [toolkit choice]",
    ),
    params=TRAIN_HEADS,
    plot=plot_fig21,
    gaps=gaps_fig21,
    checks=checks_fig21,
    shares_data_with="icl_regression.fig3",
)(data_heads)


# ----------------------------------------------------------------------------------------------------------------------
# Fig. 22: the two-head reduced ODE
# ----------------------------------------------------------------------------------------------------------------------
TABLE_64 = {
    1: (0.0271631, 0.0271631),
    5: (0.569193, 0.599085),
    20: (0.426530, 0.982801),
    100: (0.309249, 1.402214),
    1000: (0.205756, 2.130561),
    10000: (0.139413, 3.151148),
}


def plot_fig22(ds):
    """Draw ``icl_regression.fig22`` from its dataset ``ds`` (a matplotlib Figure)."""
    fig, axes = new_figure(1, 3, figsize=(12, 3.6))
    t = ds.time.values
    plot_reduced(axes[0], t, ds.omega.values, color=COLORS[0], label="omega (ODE (B.4))")
    plot_reduced(axes[0], t, ds.mu.values, color=COLORS[1], label="mu")
    w1, _ = cf.phase1_asymptotic(TASK, ds.attrs["eps0"], t[t <= 4])
    plot_theory(axes[0], t[t <= 4], w1, color="grey", label="phase I: eps0 e^t", linewidth=1)
    tt = t[t >= 100]
    w3, m3 = cf.phase3_asymptotic(TASK, tt)
    plot_theory(axes[0], tt, w3, color=COLORS[0], label="phase III law t^(-1/6)", linewidth=1)
    plot_theory(axes[0], tt, m3, color=COLORS[1], label="eta*/(2 omega)", linewidth=1)
    axes[0].axhline(
        ds.attrs["omega_peak_pred"],
        color=COLORS[0],
        ls=":",
        lw=1,
        label="phase II peak (docs/models/icl_regression.md §6.3)",
    )
    # the legend sits below the curves (omega(0) = 0.01 is the lowest value drawn), clear of the phase II line
    axes[0].set(xscale="log", yscale="log", xlabel="F/2-flow time t", ylabel="omega, mu", ylim=(2e-4, 10))
    axes[0].legend(fontsize=6, loc="lower right")
    plot_reduced(axes[1], t, ds.ratio.values, color=COLORS[2], label="r = mu/omega")
    axes[1].set(xscale="log", yscale="log", xlabel="t", ylabel="r")
    plot_reduced(axes[2], t, ds.two_omega_mu.values, color=COLORS[3], label="2 omega mu")
    axes[2].axhline(ETA_STAR, color="k", lw=1, label="eta*")
    axes[2].set(xscale="log", xlabel="t", ylabel="2 omega mu")
    axes[2].legend(fontsize=7)
    return fig


def checks_fig22(ds):
    """The theorem checks of ``icl_regression.fig22`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
    out = []
    for t, (om, mu) in TABLE_64.items():
        if t > ds.time.values[-1]:
            continue
        j = int(np.argmin(np.abs(ds.time.values - t)))
        got = (float(ds.omega.values[j]), float(ds.mu.values[j]))
        ok = abs(got[0] - om) <= 2e-6 * max(1, om) + 5e-7 and abs(got[1] - mu) <= 2e-6 * max(1, mu) + 5e-7
        out.append(
            CheckResult(
                name=f"two-head ODE at t = {t} vs table 6.4",
                passed=ok,
                measured=f"{got}",
                expected=f"{(om, mu)}",
                tolerance="quoted 6 digits (+-5e-7 + 2e-6 rel)",
            )
        )
    pk = float(np.max(ds.omega.values))
    out.append(
        CheckResult(
            name="phase II peak omega (eps0 = 0.01: 0.57631, docs/models/icl_regression.md §6.3)",
            passed=abs(pk - 0.57631) < 2e-4,
            measured=pk,
            expected=0.57631,
            tolerance="2e-4 (log-spaced output grid)",
        )
    )
    return out


@register(
    name="icl_regression.fig22",
    model=MODEL,
    paper=f"{PAPER}, Fig. 22",
    spec="docs/models/icl_regression.md §6",
    caption=(
        "Symmetric two-head gradient flow of F/2 (reduced ODE (B.4)), d = 5, L = 40, sigma^2 = 0.1, "
        "omega(0) = mu(0) = 0.01: phase I exponential growth, phase II peak of omega, phase III slow "
        "decay omega ~ t^(-1/6) along the valley with 2 omega mu -> eta*."
    ),
    unrecoverable=(
        "eps0 = 0.01, t in [0, 1e4], log-spaced output (docs/models/icl_regression.md §9 Fig. 22 defaults)",
    ),
    params={
        "tiny": {"t1": 100.0, "n_save": 60},
        "quick": {"t1": 10000.0, "n_save": 300},
        "paper": {"t1": 10000.0, "n_save": 600},
    },
    plot=plot_fig22,
    checks=checks_fig22,
)
def data_fig22(cfg) -> xr.Dataset:
    """Fig. 22: reduced two-head ODE (closedform.icl_regression.symmetric_flow),
    docs/models/icl_regression.md §6.2-§6.4.
    """
    p = cfg.params
    eps0 = 0.01
    ts = np.unique(
        np.concatenate(
            [
                [0.0],
                np.geomspace(1e-2, p["t1"], p["n_save"]),
                [t for t in TABLE_64 if t <= p["t1"]],
                np.linspace(4, 8, 81),
            ]
        )
    )
    traj = cf.symmetric_flow(TASK, eps0, eps0, (0.0, p["t1"]), saveat=SaveAt(ts=tuple(ts)))
    with np.errstate(divide="ignore", invalid="ignore"):
        return xr.Dataset(
            {k: (("time",), traj[k].values[0]) for k in ("omega", "mu", "F", "two_omega_mu", "ratio")},
            coords={"time": traj["time"].values},
            attrs={"eps0": eps0, "omega_peak_pred": cf.phase2_peak_omega(TASK)},
        )
