"""``random_walk.fig6``: random start, normalised tokens, eta = 0.01, p = 0.5 and p = 1."""

from __future__ import annotations


import numpy as np
import scipy.stats
import torch
import xarray as xr

from empirical.device import torch_threads
from empirical.models import random_walk as rwm
from figures._style import (
    TOL_BRIGHT,
    panel_grid,
    plot_theory,
)
from figures.registry import CheckResult, Explanation, GapRow, compare_rows, register

from figures.random_walk._common import _band, DEFAULTS_U, RB_SOURCE, ROUND_OFF, _seeds, _task, _torch_run, _V_of

__all__ = ["FIG6_P1_EXPLANATION", "data_fig6", "plot_fig6", "gaps_fig6", "checks_fig6"]


# ----------------------------------------------------------------------------------------------------------------------
# Fig. 6: random start, normalised tokens, eta = 0.01 (docs/models/token_selection.md §C.8)
# ----------------------------------------------------------------------------------------------------------------------

_FIG6_P = (0.5, 1.0)
FIG6_P1_EXPLANATION = Explanation(
    reason=(
        "a random start is off the symmetric ridge of Theorem C2, and at p = 1 the ridge is unstable: the random "
        "V makes g_j = V[y, s_j] depend on the residue (j - 1) mod K, GD gives the attention that residue "
        "pattern, the token average X S becomes a fixed non-uniform vector shifted by s_1 (no longer 1_K / K), "
        "and y = s_1 (N - 1 = 96 = 0 mod 6) is read off it, a deterministic and so easier task than p = 0.5. "
        "Measured (4 runs each, first t with p = 1 accuracy >= 0.999): random V with W = 0 breaks as the full "
        "random start does (190-270 against 170-270), V = W = 0 on the exact population never leaves 1/6 "
        "(Theorem C2), V, W ~ N(0, 0.001^2) delays the break only to 340-470 (logarithmic in the start's "
        "scale). The break precedes p = 0.5's ~0.5 at every step we tried: with eta n_train = 3, 10, 30 on the "
        "mean loss the medians are 515 / 185 / 95 for p = 1 (accuracy >= 0.5) against 895 / 325 / 145 for "
        "p = 0.5, a ratio ~0.6 that the step does not change; with the blank query left unnormalised (mean "
        "loss, eta = 0.01-0.1) p = 1 breaks by 15-110 while p = 0.5 mostly stays at chance, and without "
        "normalisation p = 1 breaks within 10-60. So no step or normalisation reading of the reference reproduces "
        "the paper's p = 1 panel together with its p = 0.5 timing: a disagreement with the paper, not a "
        "defect"
    ),
    kind="disagrees",
    evidence=(
        "check 'Fig. 6 reading: p = 1 leaves the Theorem C2 ridge before p = 0.5 reaches 0.49' on this run; "
        "tests/figures/test_random_walk.py::test_fig6_p1_breaks_first_at_every_step (slow; the step sweep) "
        "and ::test_fig6_p1_break_is_seeded_by_the_random_start"
    ),
)


@register(
    name="random_walk.fig6",
    model="random_walk",
    paper="Shi & Cao (2025), Fig. 6 and appendix heat maps",
    spec="docs/models/token_selection.md §C.8",
    caption=(
        "Random start V, W ~ N(0, 0.01^2) (merged W), eta = 0.01, eps = 0.1, full-batch GD on n_train = "
        "1000 walks with the loss summed over the walks (step eta n_train = 10 on the mean loss, see "
        "below), tokens normalised to unit length inside the softmax only. Top: test accuracy (plain and "
        "acc_RB) and KL(P_true || P_model) vs iteration for p = 0.5 and p = 1 (torch, mean and 95% range "
        "over training samples and starts). Bottom: V and attention S (first test walks) at the last step "
        "for p = 0.5; V and the token average X S of the first test walks at 10/40/70/100% of the run for "
        "p = 1. The reduced map does not apply (random start). Theory line: max(p, 1-p). With the mean "
        "loss at eta = 0.01 (the documented reading) the normalised scores hardly move: acc_RB stays at "
        "chance (0.17) for 1000 iterations, and also at eta = 0.1 and 1 (measured, 2 runs each); the "
        "summed loss reaches 0.5 at ~400 iterations, as the paper reports for p = 0.5. At that step p = 1 "
        "reaches accuracy 1.0 by ~300 iterations, while the paper's p = 1 panel stays below 1.0 for 1000. "
        "Cause (measured, see the p = 1 rows): the random V breaks the symmetric state of Theorem C2 "
        "(a start with V = W = 0 stays at 1/6), and p = 1 leaves it before p = 0.5 reaches 0.5 at every "
        "step (ratio ~0.6 at eta n_train = 3, 10, 30) and normalisation reading we tried."
    ),
    unrecoverable=DEFAULTS_U
    + (
        "every column of X~, the blank query included, divided by its norm inside the scores "
        "(docs/models/token_selection.md §C.8)",
        "loss summed over the training walks: eta = 0.01 on the sum = 10 on the mean (our reading: it matches "
        "the paper's ~0.5 at ~400 iterations for p = 0.5; the mean stays at chance)",
        "KL direction KL(P_true || P_model), P_model = max(f, 1e-12) normalised (docs/models/token_selection.md §C.8)",
    ),
    params={
        "tiny": {"K": 6, "N": 25, "M": 200, "n_train": 200, "n_test": 200, "n_steps": 60, "eta": 0.05, "n_seeds": 2},
        "quick": {
            "K": 6,
            "N": 97,
            "M": 1000,
            "n_train": 1000,
            "n_test": 500,
            "n_steps": 600,
            "eta": 0.01,
            "n_seeds": 8,
        },
        "paper": {
            "K": 6,
            "N": 97,
            "M": 1000,
            "n_train": 1000,
            "n_test": 1000,
            "n_steps": 1000,
            "eta": 0.01,
            "n_seeds": 8,
        },
    },
    plot=lambda ds: plot_fig6(ds),
    gaps=lambda ds: gaps_fig6(ds),
    checks=lambda ds: checks_fig6(ds),
)
def data_fig6(cfg) -> xr.Dataset:
    """Fig. 6 of docs/models/token_selection.md §C.8 (random start) and its appendix snapshots."""
    par = cfg.params
    T = par["n_steps"]
    snaps = tuple(round(f * T) for f in (0.1, 0.4, 0.7, 1.0))
    steps = tuple(sorted(set(np.rint(np.linspace(0, T, 21)).astype(int)) | set(snaps)))
    seeds = _seeds(cfg, par["n_seeds"])
    data, coords = {}, {}
    n_show = 8
    for p in _FIG6_P:
        task = _task(p, {**par, "eta": par["eta"] * par["n_train"]})  # summed loss = mean loss at eta n_train
        walks = rwm.walk_samples(task, par["n_train"], seeds, n_test=par["n_test"])
        traj, params, model = _torch_run(
            task, cfg, seeds, walks, T, steps, init="random", normalize_tokens=True, log_walks=n_show
        )
        tag = "p05" if p == 0.5 else "p1"
        for name in ("acc", "acc_rb", "kl", "attn_parent"):
            data[f"{tag}_{name}"] = (("seed", "step"), traj[name].values)
        idx = [int(np.nonzero(np.asarray(steps) == s)[0][0]) for s in snaps]
        data[f"{tag}_V_snap"] = (("snap", "row", "col"), np.stack([_V_of(traj, task, i)[0] for i in idx]))
        data[f"{tag}_XS_snap"] = (
            ("snap", "walk", "col"),
            np.stack([[[traj[f"XS_{w}_{k}"].values[0, i] for k in range(task.K)] for w in range(n_show)] for i in idx]),
        )
        with torch.no_grad(), torch_threads(1):
            st = torch.as_tensor(walks[1][0].states[:20], dtype=params["V"].dtype)[None]
            S_att, _ = model.forward({k: v[:1] for k, v in params.items()}, st)
        data[f"{tag}_S_final"] = (("walk20", "pos"), S_att[0].cpu().numpy())
        coords["pos"] = np.arange(1, task.N + 1)
    coords.update(
        seed=np.asarray(seeds),
        step=np.asarray(steps),
        snap=np.asarray(snaps),
        row=np.arange(1, par["K"] + 1),
        col=np.arange(1, par["K"] + 1),
    )
    return xr.Dataset(
        data,
        coords=coords,
        attrs={
            "K": par["K"],
            "N": par["N"],
            "M": par["M"],
            "eta": par["eta"],
            "eta_mean_loss": par["eta"] * par["n_train"],
            "n_train": par["n_train"],
            "n_test": par["n_test"],
            "n_steps": T,
        },
    )


def plot_fig6(ds: xr.Dataset):
    """Draw ``random_walk.fig6`` from its dataset ``ds`` (a matplotlib Figure)."""
    # rows: p = 0.5 curves, p = 1 curves, then the four heat maps two a row
    fig, axes = panel_grid(8, max_per_row=2, panel_size=(5.0, 3.4))
    t = ds.step.values
    for j, (tag, p) in enumerate((("p05", 0.5), ("p1", 1.0))):
        ax = axes[2 * j]
        _band(ax, t, ds[f"{tag}_acc_rb"].values, "acc_RB", TOL_BRIGHT["blue"])
        _band(ax, t, ds[f"{tag}_acc"].values, "plain acc", TOL_BRIGHT["cyan"])
        plot_theory(ax, t, np.full(t.shape, max(p, 1 - p)), label="max(p, 1-p)", color="k", linewidth=0.8)
        ax.set(
            xlabel="iteration t",
            ylabel="test accuracy",
            ylim=(0, 1.05),
            title=f"({'a' if j == 0 else 'c'}) accuracy, p = {p:g}",
        )
        ax.legend(fontsize=7)
        ax = axes[2 * j + 1]
        _band(ax, t, ds[f"{tag}_kl"].values, "KL(P_true || P_model)", TOL_BRIGHT["purple"])
        ax.set(xlabel="iteration t", ylabel="KL", title=f"({'b' if j == 0 else 'd'}) KL, p = {p:g}")
        ax.legend(fontsize=7)
    ax = axes[4]
    im = ax.imshow(ds.p05_V_snap.values[-1], cmap="viridis")
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set(title=f"V at t = {int(ds.snap.values[-1])}, p = 0.5", xlabel="state", ylabel="label")
    ax = axes[5]
    im = ax.imshow(ds.p05_S_final.values, aspect="auto", cmap="magma")
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set(title="S (20 test walks), p = 0.5", xlabel="position", ylabel="walk")
    ax = axes[6]
    snaps = ds.snap.values
    im = ax.imshow(
        np.concatenate([v / max(np.abs(v).max(), 1e-300) for v in ds.p1_V_snap.values], axis=1),
        cmap="viridis",
        aspect="auto",
    )
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set(
        title="p = 1: V / max|V|\nat t = " + "/".join(str(int(s)) for s in snaps),
        xlabel="state (4 blocks)",
        ylabel="label",
    )
    ax = axes[7]
    im = ax.imshow(np.concatenate(list(ds.p1_XS_snap.values), axis=1), cmap="viridis", aspect="auto")
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set(title="p = 1: X S of 8 test walks\n(4 blocks)", xlabel="state", ylabel="walk")
    return fig


def _first_reach(t, values, level):
    """Per seed: the first saved t with ``values >= level`` (-1 = never)."""
    out = []
    for row in values:
        hit = np.nonzero(row >= level)[0]
        out.append(int(t[hit[0]]) if hit.size else -1)
    return np.asarray(out)


def gaps_fig6(ds: xr.Dataset) -> list[GapRow]:
    """The gap rows of ``random_walk.fig6`` (theory against the trained seeds) from its dataset ``ds``."""
    return compare_rows(
        "acc_RB (random start, p = 0.5) at the last step vs max(p, 1-p) = 0.5",
        [ds.step.values[-1]],
        [0.5],
        ds.p05_acc_rb.values[:, -1:],
        allowance=ROUND_OFF,
        allowance_source=RB_SOURCE,
    )


def checks_fig6(ds: xr.Dataset) -> list[CheckResult]:
    """The theorem checks of ``random_walk.fig6`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
    t = ds.step.values
    n = int(ds.sizes["seed"])
    # p = 0.5's timing (~400 iterations) is not a check: the step-size reading was chosen to match it (caption).
    out = []
    acc1 = ds.p1_acc.values
    reach1 = _first_reach(t, acc1, 0.999)
    never = int(np.sum(reach1 < 0))
    out.append(
        CheckResult(
            name=(
                f"Fig. 6(c): p = 1 does not reach accuracy 1.0 within {int(t[-1])} iterations: seeds that never reach "
                "it"
            ),
            passed=never == n,
            measured=never,
            expected=n,
            tolerance="all seeds (docs/models/token_selection.md §C.8: symmetry broken slowly)",
            n_seeds=n,
            explanation=FIG6_P1_EXPLANATION,
        )
    )
    # The evidence behind the explanation, decided on this run: per seed (same seed for both p), the first saved t
    # with p = 1 accuracy >= 0.5 against the first with p = 0.5 acc_RB >= 0.49 (never = inf; a tie counts against).
    # One-sided sign test at level 0.01: under "either order equally likely" the count is Binomial(n, 1/2).
    r1 = _first_reach(t, acc1, 0.5).astype(float)
    r05 = _first_reach(t, ds.p05_acc_rb.values, 0.49).astype(float)
    earlier = int(np.sum(np.where(r1 < 0, np.inf, r1) < np.where(r05 < 0, np.inf, r05)))
    need = next(k for k in range(n + 1) if scipy.stats.binom.sf(k - 1, n, 0.5) <= 0.01) if n >= 7 else n
    out.append(
        CheckResult(
            name=(
                "Fig. 6 reading: p = 1 leaves the Theorem C2 ridge (accuracy >= 0.5) before p = 0.5 reaches acc_RB "
                "0.49: seeds where it does (paired by seed)"
            ),
            passed=earlier >= need,
            measured=earlier,
            expected=f">= {need} of {n}",
            tolerance=(
                "one-sided sign test at level 0.01 (Binomial(n, 1/2) under no order); at n < 7 every seed "
                "(measured at eta n_train = 3, 10, 30: median 515 / 185 / 95 against 895 / 325 / 145 iterations)"
            ),
            n_seeds=n,
        )
    )
    kl = ds.p05_kl.values
    ratio = kl[:, -1] / kl[:, 0]
    out.append(
        CheckResult(
            name="Fig. 6(b): KL(P_true || P_model) decreases for p = 0.5: max over seeds of last / first",
            passed=float(ratio.max()) < 1,
            measured=float(ratio.max()),
            expected="< 1",
            tolerance="inequality, every seed",
            n_seeds=n,
        )
    )
    return out
