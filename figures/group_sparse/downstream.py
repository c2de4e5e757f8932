"""``group_sparse.downstream``: downstream transfer of the pre-trained attention."""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from closedform import group_sparse as cf
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import group_sparse as gm
from figures._style import (
    TOL_BRIGHT,
    new_figure,
    plot_reduced,
    plot_seed_band,
)
from figures.registry import CheckResult, Explanation, GapRow, register

from figures.group_sparse._common import ETA, JSTAR, _paired_check, _seeds, _task, _train_gd, UNRECOVERABLE, _v_star

__all__ = ["plot_downstream", "gaps_downstream", "checks_downstream", "data_downstream"]


# ----------------------------------------------------------------------------------------------------------------------
# Downstream transfer (docs/models/token_selection.md §B.4 runnable recipe, docs/models/token_selection.md §B.7)
# ----------------------------------------------------------------------------------------------------------------------


def plot_downstream(ds: xr.Dataset):
    """Test error vs downstream sample size n (log-log)."""
    fig, ax = new_figure(figsize=(9.0, 6.0))
    n = ds.n.values
    T_pre, T_th = ds.attrs["T_pre"], ds.attrs["T_theory"]
    for key, label, color, marker in (
        (
            "theory",
            f"W(T*): population map at T = {T_th}, v by online SGD (the theorem's estimator)",
            TOL_BRIGHT["blue"],
            "o",
        ),
        ("theory_fit", f"W(T*): population map at T = {T_th}, v fitted like the baseline", TOL_BRIGHT["cyan"], "s"),
        (
            "pretrained",
            f"torch W, {ds.attrs['n_pre']} raw samples, T = {T_pre}, v by online SGD",
            TOL_BRIGHT["purple"],
            "^",
        ),
        ("pretrained_fit", "torch W as above, v fitted like the baseline", TOL_BRIGHT["yellow"], "v"),
        ("no_pretraining", "W = 0 (no pre-training), v by online SGD", TOL_BRIGHT["red"], "x"),
        ("logistic", "logistic regression on vec(X) (d D weights)", TOL_BRIGHT["green"], "D"),
    ):
        plot_seed_band(ax, n, ds[f"error_{key}"].values, method="percentile", label=label, color=color, marker=marker)
    plot_reduced(
        ax,
        n,
        ds["error_reduced"].values.mean(axis=0),
        label=f"population map at T = {T_pre} (the torch run's length), v by online SGD",
        color="k",
    )
    ax.set_xscale("log")
    ax.set_xticks(n, [str(int(v)) for v in n])
    ax.minorticks_off()
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set(
        xlabel="downstream sample size n",
        ylabel="test error (linear below 1e-3)",
        title=f"Downstream transfer, d = {ds.attrs['d']}, D = {ds.attrs['D']}, gamma = {ds.attrs['gamma']}",
    )
    ax.set_ylim(0.0, 0.6)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)  # below: inside it covers bands
    return fig


def gaps_downstream(ds: xr.Dataset) -> list[GapRow]:
    """No theory value to compare with: the downstream theorem bounds rates up to constants
    (docs/models/token_selection.md §B.4); the claims
    are the inequalities of :func:`checks_downstream`.
    """
    return []


"""One-sided false-alarm probability of the paired downstream checks (Wilcoxon signed-rank over seeds)."""


_RAW_W_WHY = Explanation(
    reason=(
        "the torch W is pre-trained on the paper's raw finite sample (n_pre = 500) for T_pre steps, not the "
        "theorem's W(T*) of population GD: the sample's broken x -> -x symmetry grows v_pos, W12, W21 and caps "
        "the row-j* weight near 0.75 (group_sparse.pretrain_n500_d4_D6), so the features phi = H S 1 keep a share "
        "of the irrelevant groups' x, an error floor (~0.05 here) that no v removes, while logistic regression on "
        "vec(X) keeps improving; longer torch pre-training does not help (T_pre = 3 000: E[S_j*,j] = 0.78, "
        "logistic regression still wins at n = 200, measured)"
    ),
    evidence=(
        "the black dashed curve (population map at the same T_pre: no floor) and the W(T*) curves and checks "
        "of this figure; the sign-test check of group_sparse.pretrain_n500_d4_D6"
    ),
    kind="disagrees",
)


def checks_downstream(ds: xr.Dataset) -> list[CheckResult]:
    """The downstream claims (docs/models/token_selection.md §B.4 downstream theorem, §B.7) with W = W(T*), the W of
    population GD at T* (the reduced map, exact for population GD, at T_theory >= D^3), each as a paired Student-t
    test over seeds (the compared models see the same downstream samples): with the theorem's estimator (online SGD
    on v) the pre-trained W beats W = 0 at the largest n and logistic regression on vec(X) at the smallest and a
    middle n, and so it does with v fitted like the baseline (d + D against d D parameters). (At the largest n both
    errors are ~1e-4, below the resolution of the test set.) The comparisons with logistic regression for the torch W
    pre-trained on the paper's raw samples are explained (:data:`_RAW_W_WHY`).
    """
    n_list = ds.n.values.astype(int)
    dD, dpD = ds.attrs["d"] * ds.attrs["D"], ds.attrs["d"] + ds.attrs["D"]
    T_th, T_pre = ds.attrs["T_theory"], ds.attrs["T_pre"]
    wt = f"W(T*) (population map at T = {T_th}, E[S_j*,j] = {ds.attrs['attn_jstar_theory']:.3f})"
    wl = (
        f"the torch W (raw n = {ds.attrs['n_pre']}, T_pre = {T_pre}, E[S_j*,j] = "
        f"{float(ds['pretrain_attn_jstar'].values.mean()):.3f}, mean over seeds)"
    )
    err = {
        k: ds[f"error_{k}"].values
        for k in ("theory", "theory_fit", "pretrained", "pretrained_fit", "no_pretraining", "logistic")
    }
    bound = "mean paired error difference"
    out = [
        _paired_check(
            f"Sec. B.7: with online SGD on v (the theorem's estimator), {wt} beats W = 0 at n = "
            f"{n_list[-1]}: {bound} (W = 0 - pre-trained)",
            err["no_pretraining"][:, -1],
            err["theory"][:, -1],
        )
    ]
    for i in sorted({0, len(n_list) // 2}):
        out.append(
            _paired_check(
                f"Sec. B.4 downstream theorem at n = {n_list[i]}: online SGD with {wt} beats logistic regression on "
                f"vec(X) ({dD} weights, fitted to convergence): {bound} (logistic - pre-trained)",
                err["logistic"][:, i],
                err["theory"][:, i],
            )
        )
        out.append(
            _paired_check(
                f"the same with v fitted like the baseline ({dpD} parameters against {dD}), n = {n_list[i]}: {bound} "
                "(logistic - pre-trained)",
                err["logistic"][:, i],
                err["theory_fit"][:, i],
            )
        )
    out.append(
        _paired_check(
            f"with online SGD, {wl} beats W = 0 at n = {n_list[-1]}: {bound} (W = 0 - pre-trained)",
            err["no_pretraining"][:, -1],
            err["pretrained"][:, -1],
        )
    )
    for i in sorted({0, len(n_list) // 2}):
        out.append(
            _paired_check(
                f"the same with {wl}, v fitted like the baseline, n = {n_list[i]}: {bound} (logistic - pre-trained)",
                err["logistic"][:, i],
                err["pretrained_fit"][:, i],
                explanation=_RAW_W_WHY,
            )
        )
    return out


@register(
    name="group_sparse.downstream",
    model="group_sparse",
    paper="Zhang, Meng, Cao (2025), downstream transfer (synthetic)",
    spec="docs/models/token_selection.md §B.4, §B.7",
    caption=(
        "Downstream transfer at (d, D) = (4, 6), j* = 2 (docs/models/token_selection.md §B.4 "
        "runnable recipe): W pre-trained, then frozen; v fine-tuned from 0 by online SGD (step "
        "0.1/sqrt(i), one fresh sample per step, the theorem's estimator) or fitted like the baseline, on n "
        "downstream samples with a new direction v~* in the same group and margin gamma = 0.1; test error "
        "on fresh samples vs n, against W = 0 (no pre-training) and L2-penalised logistic regression on "
        "vec(X) (d D weights). The paper's downstream test uses 'the pre-trained W(T*)', the W of its "
        "theorem: population GD run for T* = Theta(D^3 v 1/(D^3 eps^3)) steps, where attention sits on "
        "group j*. Here that W is the reduced population map's (exact for population GD) at "
        "T_theory (blue, cyan), and with it the paper's comparison holds: with the theorem's online SGD "
        "it beats W = 0 and logistic regression at every n (checked at n = 25 and 200; at n = 800 both "
        "errors are ~1e-4, below the test set's resolution), and so it does with v fitted like the "
        "baseline (d + D against d D parameters). The torch W pre-trained on the paper's raw "
        "n_pre = 500 samples (purple, yellow) stops at an error floor of ~0.05: its row-j* weight is "
        "capped near 0.75 by the raw sample's broken x -> -x symmetry (root cause measured in "
        "group_sparse.pretrain_n500_d4_D6), while the population map at the same T_pre (black dashed) "
        "has no such floor; so it beats logistic regression with few samples (n = 25, checked) but not "
        "from n ~ 100 on (explained). Longer torch pre-training does not close the gap "
        "(T_pre = 3 000: E[S_j*,j] = 0.78, logistic regression still wins at n = 200, measured)."
    ),
    unrecoverable=UNRECOVERABLE
    + (
        (
            "downstream protocol of docs/models/token_selection.md §B.4 (v~* uniform, gamma = 0.1, step "
            "0.1/sqrt(i), v only, W frozen, logistic baseline with penalty 1e-4/2)"
        ),
        "pre-training length T (not given by the paper)",
    ),
    params={
        "tiny": {
            "n_pre": 200,
            "T_pre": 80,
            "T_theory": 200,
            "n_seeds": 2,
            "n_list": [25, 100, 200],
            "n_test": 2000,
            "n_pop": 1000,
        },
        "quick": {
            "n_pre": 500,
            "T_pre": 400,
            "T_theory": 3000,
            "n_seeds": 12,
            "n_list": [25, 50, 100, 200, 400, 800],
            "n_test": 5000,
            "n_pop": 3000,
        },
        "paper": {
            "n_pre": 500,
            "T_pre": 3000,
            "T_theory": 10000,
            "n_seeds": 10,
            "n_list": [25, 50, 100, 200, 400, 800],
            "n_test": 10000,
            "n_pop": 20000,
        },
    },
    plot=plot_downstream,
    gaps=gaps_downstream,
    checks=checks_downstream,
)
def data_downstream(cfg) -> xr.Dataset:
    """Pre-train W (torch GD, and the reduced population map), then the downstream SGD of
    docs/models/token_selection.md §B.4 for each n.
    """
    p = cfg.params
    d, D, gamma = 4, 6, 0.1
    task = _task(d, D)
    gens = cfg.generators("data", ["v_star", "population", "downstream"])
    v_star = _v_star(gens["v_star"], d)
    seeds = _seeds(cfg, p["n_seeds"])
    n_list = sorted(int(n) for n in p["n_list"])
    samples = gm.training_samples(task, p["n_pre"], seeds, v_star)
    with torch_threads(1):
        traj, params = _train_gd(task, samples, seeds, p["T_pre"], [0, p["T_pre"]], cfg.device, cfg.progress)
        _, W_learned = gm.to_weights(params)
    red = cf.map(
        task, p["T_pre"], n_samples=p["n_pop"], rng=gens["population"], saveat=SaveAt(final=True), with_se=False
    )
    state = np.array([float(red[name].values[0, -1]) for name in cf.STATE_NAMES])
    S = len(seeds)
    W_red = np.repeat(cf.embed_state(task, state, v_star)[1][None], S, axis=0)
    #  the population map run on into the theorem's regime (T >= D^3, attention on j* near 1): the W of
    # docs/models/token_selection.md §B.4
    red_long = cf.map(
        task, p["T_theory"], n_samples=p["n_pop"], rng=gens["population"], saveat=SaveAt(final=True), with_se=False
    )
    state_long = np.array([float(red_long[name].values[0, -1]) for name in cf.STATE_NAMES])
    W_long = np.repeat(cf.embed_state(task, state_long, v_star)[1][None], S, axis=0)
    Xs, ys, Xts, yts, vts = [], [], [], [], []
    for _ in range(S):
        vt = _v_star(gens["downstream"], d)
        X, y = gm.sample_downstream(task, n_list[-1], vt, gamma, gens["downstream"])
        Xt, yt = gm.sample_downstream(task, p["n_test"], vt, gamma, gens["downstream"])
        Xs.append(X), ys.append(y), Xts.append(Xt), yts.append(yt), vts.append(vt)
    X, y, Xt, yt = (np.stack(a) for a in (Xs, ys, Xts, yts))
    with torch_threads(1):
        err = {
            name: gm.downstream_sgd(task, W, X, y, Xt, yt, checkpoints=n_list, device=cfg.device)
            for name, W in (
                ("pretrained", W_learned),
                ("reduced", W_red),
                ("theory", W_long),
                ("no_pretraining", np.zeros_like(W_red)),
            )
        }
    err["logistic"] = np.array(
        [[gm.logistic_baseline(X[s, :n], y[s, :n], Xt[s], yt[s]) for n in n_list] for s in range(S)]
    )
    # the same fitter on the pre-trained features phi = H S 1 (d + D parameters instead of d D)
    with torch_threads(1):
        phi, phit = gm.downstream_features(W_learned, X), gm.downstream_features(W_learned, Xt)
    err["pretrained_fit"] = np.array(
        [
            [gm.logistic_baseline(phi[s, :n, :, None], y[s, :n], phit[s, :, :, None], yt[s]) for n in n_list]
            for s in range(S)
        ]
    )
    with torch_threads(1):
        phi, phit = gm.downstream_features(W_long, X), gm.downstream_features(W_long, Xt)
    err["theory_fit"] = np.array(
        [
            [gm.logistic_baseline(phi[s, :n, :, None], y[s, :n], phit[s, :, :, None], yt[s]) for n in n_list]
            for s in range(S)
        ]
    )
    data = {f"error_{k}": (("seed", "n"), v) for k, v in err.items()}
    data["pretrain_loss"] = (("seed",), traj["loss"].values[:, -1])
    data["pretrain_attn_jstar"] = (("seed",), traj["attn_jstar"].values[:, -1])
    return xr.Dataset(
        data,
        coords={"seed": list(seeds), "n": n_list},
        attrs={
            "d": d,
            "D": D,
            "gamma": gamma,
            "n_pre": p["n_pre"],
            "T_pre": p["T_pre"],
            "eta": ETA,
            "T_theory": p["T_theory"],
            "attn_jstar_theory": float(red_long["attn_jstar"].values[0, -1]),
            "jstar": JSTAR,
            "n_test": p["n_test"],
            "reduced_loss_T": float(red["loss"].values[0, -1]),
            "v_star_json": json.dumps(v_star.tolist()),
        },
    )
