"""``random_walk.overlay``: the reduced (V, a, c) map against torch full-matrix GD from zero and from a random
start, for several p.
"""

from __future__ import annotations


import numpy as np
import xarray as xr

from closedform import random_walk as cf
from empirical.models import random_walk as rwm
from figures._style import (
    TOL_BRIGHT,
    panel_grid,
    plot_reduced,
    plot_theory,
)
from figures.registry import CheckResult, GapRow, compare_rows, register

from figures.random_walk._common import (
    DEFAULTS_U,
    EXACT_SOURCE,
    ROUND_OFF,
    _save_steps,
    _seeds,
    _task,
    _torch_and_reduced,
    _torch_run,
)

__all__ = ["data_overlay", "plot_overlay", "gaps_overlay", "checks_overlay"]


# ----------------------------------------------------------------------------------------------------------------------
# Overlay of docs/models/token_selection.md §5
# ----------------------------------------------------------------------------------------------------------------------

_OVERLAY_P = (0.0, 0.5, 0.7, 1.0)
_P_COLORS = (TOL_BRIGHT["purple"], TOL_BRIGHT["blue"], TOL_BRIGHT["green"], TOL_BRIGHT["red"])


def _ptag(p: float) -> str:
    return f"p{round(100 * p):03d}"


@register(
    name="random_walk.overlay",
    model="random_walk",
    paper="Shi & Cao (2025): theory vs practice (docs/models/token_selection.md §5 suggested overlay)",
    spec="docs/models/token_selection.md §5, §C.5, §C.6, §C.7",
    caption=(
        "K = 6, N = 97, M = 1000, eta = 1, eps = 0.1, full-batch GD on n_train walks, p in {0, 0.5, 0.7, "
        "1}. Dashed: exact reduced (V, a, c) map (docs/models/token_selection.md §C.5); markers: torch "
        "full-matrix GD from zero; "
        "dotted thin: torch from a random start V, W ~ N(0, 0.01^2), tokens normalised as in Fig. 6 (without "
        "normalisation the random scores rho W ~ 5 make the blank take all attention, f = 0). Right: "
        "direction errors of V (Theorem C1 item 3) to Pi^T, to sqrt(Pi^T) (entrywise) and to "
        "sqrt(C_hat^T) of the training walks; grey: the population floor "
        "dist(sqrt(Pi^T), Pi^T) of docs/models/token_selection.md §C.7 (0.1745 at p = 0.7): the paper's Pi^T "
        "claim holds at p = 1/2 "
        "only. Left: thin solid lines max(p, 1-p) (Theorem C1) and 1/K at p = 0, 1 (the symmetric state of "
        "Theorem C2); hollow markers of decreasing size, so coinciding curves (p = 0, 0.5, 1 on the parent "
        "attention) stay visible."
    ),
    unrecoverable=DEFAULTS_U
    + (
        (
            "random start with tokens normalised as in Fig. 6 at eta = 1 (our choice for "
            "the docs/models/token_selection.md §5 overlay)"
        ),
    ),
    params={
        "tiny": {
            "K": 6,
            "N": 25,
            "M": 200,
            "n_train": 200,
            "n_test": 200,
            "n_steps": 20,
            "n_steps_reduced": 60,
            "n_seeds": 2,
        },
        "quick": {
            "K": 6,
            "N": 97,
            "M": 1000,
            "n_train": 1000,
            "n_test": 500,
            "n_steps": 20,
            "n_steps_reduced": 400,
            "n_seeds": 8,
        },
        "paper": {
            "K": 6,
            "N": 97,
            "M": 1000,
            "n_train": 4000,
            "n_test": 2000,
            "n_steps": 300,
            "n_steps_reduced": 3000,
            "n_seeds": 4,
        },
    },
    plot=lambda ds: plot_overlay(ds),
    gaps=lambda ds: gaps_overlay(ds),
    checks=lambda ds: checks_overlay(ds),
)
def data_overlay(cfg) -> xr.Dataset:
    """docs/models/token_selection.md §5 overlay for Study C."""
    par = cfg.params
    seeds = _seeds(cfg, par["n_seeds"])
    T, T_red = par["n_steps"], par["n_steps_reduced"]
    if T_red < T:
        raise ValueError(f"n_steps_reduced must be >= n_steps = {T}; got {T_red}")
    steps = _save_steps(T, dense=10, n_log=8)
    steps_red = tuple(sorted(set(_save_steps(T_red, dense=10, n_log=20)) | set(steps)))  # torch steps included
    names = ("acc", "acc_rb", "attn_parent", "dist_V_Pi", "dist_V_sqrtPi", "dist_V_sqrtChat")
    data = {}
    for p in _OVERLAY_P:
        tag = _ptag(p)
        task = _task(p, par)
        walks = rwm.walk_samples(task, par["n_train"], seeds, n_test=par["n_test"])
        # the reduced map from each zero-init seed's step-0 state, on its own longer grid (torch steps included)
        zero, _, _, red = _torch_and_reduced(task, cfg, seeds, walks, T, steps, grid=steps_red)
        rand, _, _ = _torch_run(task, cfg, seeds, walks, T, steps, init="random", normalize_tokens=True)
        Pi = cf.transition_matrix(task.K, p)
        data[f"{tag}_bayes_chat_acc_rb"] = (
            ("seed",),
            np.array(
                [
                    te.weights @ Pi[te.parent, np.argmax(cf.empirical_transitions(tr_, task.K), axis=1)[te.parent]]
                    for tr_, te in zip(*walks)
                ]
            ),
        )
        for name in names:
            data[f"{tag}_torch_{name}"] = (("seed", "step"), zero[name].values)
            data[f"{tag}_random_{name}"] = (("seed", "step"), rand[name].values)
            data[f"{tag}_reduced_{name}"] = (("seed", "step_red"), red[name].transpose("trajectory", "time").values)
    return xr.Dataset(
        data,
        coords={"seed": np.asarray(seeds), "step": np.asarray(steps), "step_red": np.asarray(steps_red)},
        attrs={"K": par["K"], "N": par["N"], "M": par["M"], "n_train": par["n_train"], "n_test": par["n_test"]},
    )


def plot_overlay(ds: xr.Dataset):
    """Draw ``random_walk.overlay`` from its dataset ``ds`` (a matplotlib Figure)."""
    fig, axes = panel_grid(4, max_per_row=2, panel_size=(5.0, 3.6))
    t, tr = ds.step.values, ds.step_red.values
    for k, (p, color) in enumerate(zip(_OVERLAY_P, _P_COLORS)):
        tag = _ptag(p)
        # hollow markers of decreasing size: curves that coincide (p = 0, 0.5 and 1 on panel (b)) stay visible
        ms = 7.0 - 1.5 * k
        for ax, name in ((axes[0], "acc_rb"), (axes[1], "attn_parent")):
            ax.plot(
                t,
                ds[f"{tag}_torch_{name}"].values.mean(0),
                "o",
                ms=ms,
                mfc="none",
                mew=1.0,
                color=color,
                label=f"p = {p:g} torch",
            )
            ax.plot(t, ds[f"{tag}_random_{name}"].values.mean(0), ":", lw=1, color=color)
            plot_reduced(ax, tr, ds[f"{tag}_reduced_{name}"].values.mean(0), label=None, color=color)
    K = int(ds.attrs["K"])
    for p, color in zip(_OVERLAY_P, _P_COLORS):
        if 0.0 < p < 1.0:  # Theorem C1 item 1: acc_RB -> max(p, 1-p)
            plot_theory(axes[0], tr, np.full(tr.shape, max(p, 1 - p)), label=None, color=color, linewidth=0.8)
    plot_theory(
        axes[0],
        tr,
        np.full(tr.shape, 1 / K),
        label="theory: max(p, 1-p); 1/K at p = 0, 1 (Thm. C2)",
        color="k",
        linewidth=0.8,
    )
    axes[0].set(
        xscale="symlog", xlabel="iteration t", ylabel="acc_RB", title="(a) acc_RB vs max(p, 1-p)", ylim=(0, 1.05)
    )
    axes[1].set(xscale="symlog", xlabel="iteration t", ylabel="mean S_{N-1}", title="(b) attention on the parent")
    axes[0].legend(fontsize=6)
    for ax, p in ((axes[2], 0.7), (axes[3], 0.5)):
        tag = _ptag(p)
        for name, color, label in (
            ("dist_V_Pi", TOL_BRIGHT["red"], "to Pi^T"),
            ("dist_V_sqrtPi", TOL_BRIGHT["blue"], "to sqrt(Pi^T)"),
            ("dist_V_sqrtChat", TOL_BRIGHT["green"], "to sqrt(C_hat^T)"),
        ):
            sel = tr >= 1
            plot_reduced(
                ax, tr[sel], ds[f"{tag}_reduced_{name}"].values.mean(0)[sel], label=f"reduced {label}", color=color
            )
            ax.plot(t[t >= 1], ds[f"{tag}_torch_{name}"].values.mean(0)[t >= 1], "o", ms=3, color=color)
        ax.axhline(
            cf.direction_limit_distance(p),
            color="grey",
            lw=0.8,
            label="population floor (docs/models/token_selection.md §C.7)",
        )
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="iteration t",
            ylabel="direction error of V",
            title=f"({'c' if p == 0.7 else 'd'}) p = {p:g}",
        )
        ax.legend(fontsize=6)
    return fig


def gaps_overlay(ds: xr.Dataset) -> list[GapRow]:
    """Per-seed torch - reduced differences at the last torch step (exact, docs/models/token_selection.md §C.5) for
    every p.
    """
    T = int(ds.step.values[-1])
    j = int(np.nonzero(ds.step_red.values == T)[0][0])
    rows = []
    for p in _OVERLAY_P:
        tag = _ptag(p)
        for name in ("acc_rb", "attn_parent", "dist_V_Pi"):
            diff = ds[f"{tag}_torch_{name}"].values[:, -1] - ds[f"{tag}_reduced_{name}"].values[:, j]
            rows += compare_rows(
                f"{name} (p = {p:g}): torch - reduced map (same walks)",
                [T],
                [0.0],
                diff[:, None],
                allowance=ROUND_OFF,
                allowance_source=EXACT_SOURCE,
            )
    return rows


def checks_overlay(ds: xr.Dataset) -> list[CheckResult]:
    """The theorem checks of ``random_walk.overlay`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
    out = []
    tr = ds.step_red.values
    n = int(ds.sizes["seed"])
    for p in (0.5, 0.7):
        tag = _ptag(p)
        dev = np.abs(ds[f"{tag}_reduced_acc_rb"].values[:, -1] - ds[f"{tag}_bayes_chat_acc_rb"].values)
        out.append(
            CheckResult(
                name=(
                    f"Theorem C1 item 1 on a finite sample, p = {p:g}: reduced acc_RB at t = {int(tr[-1])} equals that "
                    "of predicting argmax_b C_hat[parent, b] (the sample's most frequent successor; max(p, 1-p) when "
                    "it is the likelier neighbour), max over seeds"
                ),
                passed=float(dev.max()) <= 1e-9,
                measured=float(dev.max()),
                expected=0.0,
                tolerance="1e-9: V -> sqrt(C_hat^T) direction keeps C_hat's argmax (docs/models/token_selection.md "
                "§C.7); acc_RB is exact",
                n_seeds=n,
            )
        )
    tag = _ptag(0.7)
    d_c = ds[f"{tag}_reduced_dist_V_sqrtChat"].values
    d_pi = ds[f"{tag}_reduced_dist_V_Pi"].values
    T = int(tr[-1])
    i0 = int(
        np.argmin(np.abs(tr - T / 10))
    )  # t >= 40: past the transient (docs/models/token_selection.md §C.7: sqrt(t) dist ~ 1.23 from t = 10)
    ratio = np.sqrt(T) * d_c[:, -1] / (np.sqrt(tr[i0]) * d_c[:, i0])
    out.append(
        CheckResult(
            name=(
                f"Sec. C.7 correction, p = 0.7: V approaches the sqrt(C_hat^T) direction like t^(-1/2): sqrt(t) "
                f"dist(V, sqrt(C_hat^T)) at t = {T} over its value at t = {int(tr[i0])}, mean over seeds"
            ),
            passed=0.75 <= float(ratio.mean()) <= 1.33,
            measured=float(ratio.mean()),
            expected=1.0,
            tolerance="[0.75, 1.33] (docs/models/token_selection.md §C.7: 0.1228, 0.0385, 0.0221 at t = 100, 1000, "
            "3000, i.e. sqrt(t) dist within 1%)",
            n_seeds=n,
        )
    )
    r = d_pi[:, -1] / d_c[:, -1]
    out.append(
        CheckResult(
            name=(
                f"Sec. C.7 correction, p = 0.7: at t = {T} V is nearer the sqrt(C_hat^T) direction than the paper's "
                "Pi^T direction: dist(V, Pi^T) / dist(V, sqrt(C_hat^T)), minimum over seeds"
            ),
            passed=float(r.min()) > 2.0,
            measured=float(r.min()),
            expected="> 2 (paper's Theorem C1 item 3: < 1 as t grows)",
            tolerance=(
                "ratio > 2: dist(V, Pi^T) levels off at dist(sqrt(C_hat^T), Pi^T) ~ 0.18 while dist(V, "
                "sqrt(C_hat^T)) decays (docs/models/token_selection.md §C.7)"
            ),
            n_seeds=n,
        )
    )
    return out
