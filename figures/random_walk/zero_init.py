"""``random_walk.fig4`` and ``random_walk.fig5``: zero initialisation, p = 0.5 and p = 1, torch full-matrix GD
against the exact reduced map on the same walks.
"""

from __future__ import annotations


import numpy as np
import xarray as xr

from closedform import random_walk as cf
from dynamics.overlay import overlay
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import random_walk as rwm
from figures._style import (
    TOL_BRIGHT,
    panel_grid,
    plot_reduced,
    plot_theory,
)
from figures.experiments import train
from figures.registry import CheckResult, GapRow, compare_rows, register

from figures.random_walk._common import (
    _at,
    _band,
    DEFAULTS_U,
    _paired_checks,
    _perturbed_reduced,
    _profiles,
    ROUND_OFF,
    _save_steps,
    _seeds,
    SERIES,
    _series,
    _state,
    _task,
    _torch_and_reduced,
    _V_of,
)

__all__ = ["plot_zero_init", "gaps_zero_init", "checks_fig4", "checks_fig5", "data_fig4", "data_fig5"]


# ----------------------------------------------------------------------------------------------------------------------
# Figs. 4 and 5: zero initialisation, p = 0.5 and p = 1 (docs/models/token_selection.md §C.8)
# ----------------------------------------------------------------------------------------------------------------------


def _zero_init_data(cfg, p: float) -> xr.Dataset:
    par = cfg.params
    task = _task(p, par)
    seeds = _seeds(cfg, par["n_seeds"])
    walks = rwm.walk_samples(task, par["n_train"], seeds, n_test=par["n_test"])
    steps = _save_steps(par["n_steps"], dense=par.get("dense", 10))
    traj, params, model, reduced = _torch_and_reduced(task, cfg, seeds, walks, par["n_steps"], steps)
    prof_t, prof_r = _profiles(task, params, model, reduced, walks[1])
    V_t = params["V"].cpu().numpy()
    V_r = _V_of(reduced, task, -1)
    names = cf.state_names(task)
    state_gap = max(
        float(np.max(np.abs(np.stack([traj[n].values[i] - reduced[n].values[i] for n in names], -1))))
        for i in range(len(seeds))
    )
    data = {
        **_series(traj, SERIES + ("off",), "torch"),
        **_series(reduced, SERIES, "reduced"),
        "torch_V": (("seed", "row", "col"), V_t),
        "reduced_V": (("seed", "row", "col"), V_r),
        "torch_profile": (("seed", "pos"), prof_t),
        "reduced_profile": (("seed", "pos"), prof_r),
    }
    attrs = {
        "K": task.K,
        "N": task.N,
        "M": par["M"],
        "p": p,
        "eta": task.eta,
        "eps": task.eps,
        "n_train": par["n_train"],
        "n_test": par["n_test"],
        "n_steps": par["n_steps"],
        "state_gap_torch_reduced": state_gap,
        "theorem_accuracy": cf.theorem_accuracy(task),
        "label_count_max_freq": float(
            np.mean([np.bincount(te.label, minlength=task.K).max() / te.n for te in walks[1]])
        ),
    }
    if p in (0.0, 1.0) and par.get("population_steps"):
        n_pop = par["population_steps"]
        law = cf.enumerate_walks(task)
        psteps = tuple(range(n_pop + 1))
        model_p = rwm.RandomWalkAttention(task, data=law, test=law, log_profile=True)
        with torch_threads(1):
            pop_config = rwm.config(
                "gd", model_p, n_pop, seeds=cfg.seeds(f"population p={p}", 1), saveat=SaveAt(steps=psteps)
            )
            traj_p = train(model_p, pop_config, device=cfg.device)
        red_p, _ = overlay(  # the reduced map on the population, from the torch run's step-0 state
            lambda state0, at: cf.map(
                task, int(at[-1]), walks=law, test=law, state0=state0, saveat=SaveAt(steps=tuple(int(s) for s in at))
            ),
            traj_p,
            state_variables=names,
        )
        prof = np.stack([traj_p[f"attn_pos_{j}"].values[0] for j in range(task.N)], -1)
        spread_r = []
        for t in range(len(psteps)):
            V, a, c = cf.unpack_state(task, _state(task, red_p, 0, t))
            S, _ = cf.reduced_forward(task, V, a, c, law.context)
            spread_r.append(np.ptp(law.weights @ S[:, :-1]))
        data.update(
            {
                "pop_perturbed_acc": (("pstep",), _perturbed_reduced(task, law, law, n_pop, psteps)),
                "pop_torch_acc": (("pstep",), traj_p["acc"].values[0]),
                "pop_reduced_acc": (("pstep",), red_p["acc"].values[0]),
                "pop_torch_spread": (("pstep",), np.ptp(prof[:, :-1], axis=1)),
                "pop_reduced_spread": (("pstep",), np.asarray(spread_r)),
            }
        )
        coords_p = {"pstep": np.asarray(psteps)}
    else:
        coords_p = {}
    coords = {
        "seed": np.asarray(seeds),
        "step": np.asarray(steps),
        "pos": np.arange(1, task.N + 1),
        "row": np.arange(1, task.K + 1),
        "col": np.arange(1, task.K + 1),
        **coords_p,
    }
    return xr.Dataset(data, coords=coords, attrs=attrs)


def plot_zero_init(ds: xr.Dataset):
    """Draw ``random_walk.fig5`` from its dataset ``ds`` (a matplotlib Figure)."""
    has_pop = "pop_torch_acc" in ds
    fig, axes = panel_grid(5 if has_pop else 4, max_per_row=3 if has_pop else 2, panel_size=(4.6, 3.5))
    t = ds.step.values
    ax = axes[0]
    _band(ax, t, ds.torch_acc_rb.values, "torch acc_RB", TOL_BRIGHT["blue"])
    _band(ax, t, ds.torch_acc.values, "torch plain acc", TOL_BRIGHT["cyan"])
    plot_reduced(ax, t, ds.reduced_acc_rb.values.mean(0), label="reduced map acc_RB", color=TOL_BRIGHT["red"])
    plot_theory(ax, t, np.full(t.shape, ds.attrs["theorem_accuracy"]), label="theorem", color="k", linewidth=0.8)
    ax.set(xlabel="iteration t", ylabel="test accuracy", title="(a) accuracy", ylim=(0, 1.05))
    ax.legend(fontsize=7)
    ax = axes[1]
    im = ax.imshow(ds.torch_V.values[0], cmap="viridis")
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set(
        title=f"(b) V at t = {int(t[-1])} (torch, run 0)",
        xlabel="state (column)",
        ylabel="label (row)",
        xticks=range(ds.sizes["col"]),
        xticklabels=ds.col.values,
        yticks=range(ds.sizes["row"]),
        yticklabels=ds.row.values,
    )
    for ax, zoom in ((axes[2], False), (axes[3], True)):
        pos = ds.pos.values
        sl = slice(-8, None) if zoom else slice(None)
        ax.plot(pos[sl], ds.torch_profile.values.mean(0)[sl], "o", ms=3, color=TOL_BRIGHT["blue"], label="torch")
        plot_reduced(ax, pos[sl], ds.reduced_profile.values.mean(0)[sl], label="reduced map", color=TOL_BRIGHT["red"])
        ax.set(
            xlabel="token position i",
            ylabel="mean attention S_i",
            title="(d) zoom near N-1" if zoom else f"(c) attention at t = {int(t[-1])}",
        )
        ax.legend(fontsize=7)
    if has_pop:
        ax = axes[4]
        ps = ds.pstep.values
        ax.semilogy(
            ps,
            np.maximum(ds.pop_torch_spread.values, 1e-18),
            "o:",
            ms=3,
            color=TOL_BRIGHT["blue"],
            label="torch: spread of S_1..S_{N-1}",
        )
        ax.semilogy(
            ps,
            np.maximum(ds.pop_reduced_spread.values, 1e-18),
            "--",
            color=TOL_BRIGHT["red"],
            label="reduced map (1e-18 = exactly 0)",
        )
        ax2 = ax.twinx()
        ax2.plot(ps, ds.pop_torch_acc.values, color=TOL_BRIGHT["green"], lw=1, label="torch accuracy")
        if "pop_perturbed_acc" in ds:
            ax2.plot(
                ps,
                ds.pop_perturbed_acc.values,
                "--",
                color=TOL_BRIGHT["purple"],
                lw=1,
                label="reduced map, perturbed 1e-16 at t = 2: accuracy",
            )
        ax2.set(ylabel="accuracy (torch)", ylim=(0, 1.05))
        ax.set(xlabel="iteration t", ylabel="context attention spread", title="(e) exact population (K walks)")
        # one legend below the panel: inside, it would cover the spread lines or the accuracy curves
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return fig


def gaps_zero_init(ds: xr.Dataset) -> list[GapRow]:
    """The test accuracy against the theorem (torch against the reduced map, exact by docs/models/token_selection.md
    §C.5, is compared seed by seed in the checks).
    """
    T = int(ds.step.values[-1])
    rows = []  # torch against the reduced map (exact) is compared seed by seed in the checks (_checks_common)
    p, K = float(ds.attrs["p"]), int(ds.attrs["K"])
    theory = 1.0 / K if p in (0.0, 1.0) else max(p, 1.0 - p)
    what = "Theorem C2: 1/K" if p in (0.0, 1.0) else "Theorem C1 item 1: max(p, 1-p)"
    for src in ("torch", "reduced"):
        rows += compare_rows(f"plain test accuracy ({src}) vs {what}", [T], [theory], ds[f"{src}_acc"].values[:, -1:])
    return rows


def _checks_common(ds, label) -> list[CheckResult]:
    gap = float(ds.attrs["state_gap_torch_reduced"])
    T = int(ds.step.values[-1])
    steps = [s for s in sorted({1, 2, 3, 10, T}) if s <= T]
    # continuous observables only: an accuracy is a count of predictions, which round-off flips at a score tie
    return _paired_checks(ds, ("attn_parent", "dist_V_Pi"), steps) + [
        CheckResult(
            name=f"{label}: torch full-matrix GD = reduced map (docs/models/token_selection.md §C.5), max |state "
            "gap| over seeds "
            "and steps",
            passed=gap <= ROUND_OFF,
            measured=gap,
            expected=0.0,
            tolerance="1e-9 (float64 round-off; spec measured 7e-16 after 8 steps)",
            n_seeds=int(ds.sizes["seed"]),
        )
    ]


def checks_fig4(ds: xr.Dataset) -> list[CheckResult]:
    """The theorem checks of ``random_walk.fig4`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
    out = _checks_common(ds, "Fig. 4")
    n = int(ds.sizes["seed"])
    if 2 in ds.step.values:
        s2, _ = _at(ds, "torch_attn_parent", 2)
        out.append(
            CheckResult(
                name="Theorem C1 item 4: mean S_{N-1} over test walks at t = 2, minimum over seeds",
                passed=float(s2.min()) > 0.9999,
                measured=float(s2.min()),
                expected="> 0.9999",
                tolerance="inequality (docs/models/token_selection.md §4 row; exact recipe 0.99999987)",
                n_seeds=n,
            )
        )
    late = ds.step.values >= 3
    rb = ds.torch_acc_rb.values[:, late]
    out.append(
        CheckResult(
            name=(
                "Theorem C1 item 1: acc_RB = max(p, 1-p) = 0.5 at every t >= 3, max |acc_RB - 0.5| "
                "over seeds and steps (torch)"
            ),
            passed=bool(np.all(np.abs(rb - 0.5) <= 1e-9)),
            measured=float(np.abs(rb - 0.5).max()),
            expected=0.0,
            tolerance="1e-9: acc_RB is exact once Pred is a neighbour (docs/models/token_selection.md §4 row)",
            n_seeds=n,
        )
    )
    d = ds.torch_dist_V_Pi.values
    t = ds.step.values
    i10 = int(np.argmin(np.abs(t - 10)))
    if t[-1] > 10:
        ratio = np.sqrt(t[-1]) * d[:, -1] / (np.sqrt(t[i10]) * d[:, i10])
        out.append(
            CheckResult(
                name=(
                    f"Theorem C1 item 3 (p = 1/2): sqrt(t) dist(V, Pi^T) at t = {t[-1]} over its value at t = "
                    f"{t[i10]}, mean over seeds"
                ),
                passed=0.75 <= ratio.mean() <= 1.5,
                measured=float(ratio.mean()),
                expected=1.0,
                tolerance=(
                    "[0.75, 1.5]: O(1/sqrt t) until the finite-sample floor (docs/models/token_selection.md "
                    "§C.7: sqrt(t) dist "
                    "= 1.24, 1.24, 1.25 at t = 10, 30, 100, then 1.50 at t = 1000 at the floor)"
                ),
                n_seeds=n,
            )
        )
    return out


def checks_fig5(ds: xr.Dataset) -> list[CheckResult]:
    """The theorem checks of ``random_walk.fig5`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
    out = _checks_common(ds, "Fig. 5")
    K = ds.attrs["K"]
    if "pop_reduced_acc" in ds:
        acc = ds.pop_reduced_acc.values
        out.append(
            CheckResult(
                name="Theorem C2, exact population, reduced map: accuracy = 1/K at every t",
                passed=bool(np.all(acc == 1 / K)),
                measured=float(np.abs(acc - 1 / K).max()),
                expected=0.0,
                tolerance="exact (docs/models/token_selection.md §4 row: enumeration)",
            )
        )
        spread = ds.pop_torch_spread.values
        out.append(
            CheckResult(
                name=(
                    "Theorem C2, exact population, torch full-matrix GD: max over t of the spread max - min of the "
                    "context attention S_1..S_{N-1}"
                ),
                passed=float(spread.max()) <= 1e-12,
                measured=float(spread.max()),
                expected=0.0,
                tolerance="1e-12 (docs/models/token_selection.md §4 row)",
            )
        )
        # The perturbed run (panel e) shows the ridge's instability; it is not a claim of the paper, so no check.
    return out


_ZERO_PARAMS = {
    "tiny": {
        "K": 6,
        "N": 25,
        "M": 200,
        "n_train": 200,
        "n_test": 200,
        "n_steps": 12,
        "n_seeds": 2,
        "population_steps": 12,
        "dense": 10,
    },
    "quick": {
        "K": 6,
        "N": 97,
        "M": 1000,
        "n_train": 1000,
        "n_test": 1000,
        "n_steps": 50,
        "n_seeds": 8,
        "population_steps": 30,
        "dense": 10,
    },
    "paper": {
        "K": 6,
        "N": 97,
        "M": 1000,
        "n_train": 1000,
        "n_test": 1000,
        "n_steps": 50,
        "n_seeds": 8,
        "population_steps": 50,
        "dense": 50,
    },
}
_ZERO_CAPTION = (
    "Zero initialisation V = W = 0, eta = 1, eps = 0.1, full-batch GD on n_train training walks; accuracy "
    "and attention on n_test test walks (docs/models/token_selection.md §C.8). Markers/bands: torch full-matrix "
    "GD (mean and 95% "
    "range over training samples); dashed: the exact reduced (V, a, c) map of docs/models/token_selection.md "
    "§C.5 on the same "
    "walks; black: the theorem's accuracy. acc_RB = mean Pi[s_{N-1}, Pred] (docs/models/token_selection.md §C.3)."
)


@register(
    name="random_walk.fig4",
    model="random_walk",
    paper="Shi & Cao (2025), Fig. 4 (p = 0.5, zero init)",
    spec="docs/models/token_selection.md §C.8, §C.5, §C.6",
    caption=_ZERO_CAPTION + " p = 0.5.",
    unrecoverable=DEFAULTS_U,
    params={k: {kk: vv for kk, vv in v.items() if kk != "population_steps"} for k, v in _ZERO_PARAMS.items()},
    plot=plot_zero_init,
    gaps=gaps_zero_init,
    checks=checks_fig4,
)
def data_fig4(cfg) -> xr.Dataset:
    """Fig. 4 of docs/models/token_selection.md §C.8: p = 0.5 from zero."""
    return _zero_init_data(cfg, 0.5)


@register(
    name="random_walk.fig5",
    model="random_walk",
    paper="Shi & Cao (2025), Fig. 5 (p = 1, zero init)",
    spec="docs/models/token_selection.md §C.8, §C.6 (Theorem C2), docs/models/token_selection.md §C.7",
    caption=_ZERO_CAPTION
    + (
        " p = 1 (N = 16K + 1: Theorem C2). Panel (e): the exact population (the K walks s_1 = 1..K), spread "
        "max - min of the context attention (log scale; 1e-18 = exactly 0) and accuracies (right axis): "
        "torch and the reduced map stay on the symmetric state; the same reduced map perturbed by 1e-16 at "
        "t = 2 leaves it (the state is unstable)."
    ),
    unrecoverable=DEFAULTS_U,
    params=_ZERO_PARAMS,
    plot=plot_zero_init,
    gaps=gaps_zero_init,
    checks=checks_fig5,
)
def data_fig5(cfg) -> xr.Dataset:
    """Fig. 5 of docs/models/token_selection.md §C.8: p = 1 from zero, plus the exact population of Theorem C2."""
    return _zero_init_data(cfg, 1.0)
