"""Figures of Study C (random walks on a circle; Shi, Cao, NeurIPS 2025), docs/models/token_selection.md §C.8, §5.

Registered figures (``python -m figures list``):

* ``random_walk.fig4`` / ``random_walk.fig5``: zero initialisation, K = 6, N = 97, M = 1000, eta = 1, eps = 0.1,
  full-batch GD on 1000 training walks, p = 0.5 (Fig. 4) and p = 1 (Fig. 5): (a) test accuracy (plain and acc_RB)
  vs iteration, (b) heat map of V^(T), (c) mean attention over test walks vs position, (d) zoom near N - 1. Torch
  full-matrix GD (several training samples = seeds) against the exact reduced map of docs/models/token_selection.md §C.5
  on the same walks. Fig. 5 adds (e): the exact population (the K walks) of Theorem C2, torch vs reduced map.
* ``random_walk.fig6``: random start V, W ~ N(0, 0.01^2), eta = 0.01 on the loss summed over the 1000 training
  walks (eta n_train = 10 on the mean loss: the reading that reproduces the paper's ~0.5 at ~400 iterations; the mean
  loss at eta = 0.01, 0.1 or 1 stays at chance), tokens normalised inside the scores, p = 0.5 and p = 1: accuracy and
  KL(P_true || P_model) vs iteration, with the appendix heat maps (V and S for p = 0.5; snapshots of V and of the
  token average X S for p = 1). The p = 1 panel departs from the paper (it leaves the symmetric state of Theorem C2
  before p = 0.5 learns, at every step tried): ``FIG6_P1_EXPLANATION`` gives the measured cause.
* ``random_walk.factorised``: W = W_K^T W_Q from N(0, 0.01^2) factors (docs/models/token_selection.md §C.8 "our
  extension") at K = 6, N = 25, M = 200, p = 0.5 against the merged model from zero and the reduced map.
* ``random_walk.large_circle``: (K, N) = (20, 101), zero init, 50 iterations, p = 0.5 and p = 1
  (docs/models/token_selection.md §C.8 appendix).
* ``random_walk.overlay``: docs/models/token_selection.md §5: reduced (V, a, c) map vs torch full-matrix GD from zero vs
  a random start, p in {0, 0.5, 0.7, 1}: acc_RB, S_{N-1} and the direction errors of V (to Pi^T, sqrt(Pi^T),
  sqrt(C_hat^T)).

* ``random_walk.qa``: the QA tasks of docs/models/token_selection.md §C.8 ("beyond random walks": majority fruit,
  preferred fruit; 19-word vocabulary) with the model of docs/models/token_selection.md §C.3 and with an extra ReLU
  layer; Task 1 also on a balanced training set, and (a diagnostic of the ReLU variant's departure) with softmax
  cross-entropy in place of the paper's loss.

Positional code: phi_i = sqrt(rho) e_i with the paper's rho = M/2 (exactly orthogonal; the reconstructed sine code is
orthogonal only to round-off, which the unstable symmetric state of Theorem C2 amplifies until torch reaches accuracy
1 at p = 1). With it the coordinates of x~ beyond K + N are 0, so every run uses M = N + 1: exactly the
paper's M = 1000 from zero, equal in law from a random start, ~100x cheaper.

Seeds (the seed rule of :mod:`figures.presets`): repeat k of a figure uses the k-th seed ``r_k`` of its run
``"walks"`` (``cfg.seeds("walks", n_seeds)``): the training walks, then the test walks, of
docs/models/token_selection.md §G.C are drawn with ``numpy.random.default_rng(r_k)``, and ``r_k`` is the trainer
seed (random starts). Torch runs single-threaded inside ``data`` (small tensors; see
:func:`empirical.device.torch_threads`).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats
import torch
import xarray as xr

from closedform import random_walk as cf
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import random_walk as rwm
from figures._style import (
    TOL_BRIGHT,
    new_figure,
    panel_grid,
    plot_empirical_band,
    plot_reduced,
    plot_seed_band,
    plot_theory,
)
from figures.experiments import train
from figures.registry import CheckResult, Explanation, GapRow, compare_rows, per_seed_check, register

__all__ = [
    "SERIES",
    "ROUND_OFF",
    "EXACT_SOURCE",
    "RB_SOURCE",
    "DEFAULTS_U",
    "RIDGE_EXPLANATION",
    "plot_zero_init",
    "gaps_zero_init",
    "checks_fig4",
    "checks_fig5",
    "data_fig4",
    "data_fig5",
    "FIG6_P1_EXPLANATION",
    "data_fig6",
    "plot_fig6",
    "gaps_fig6",
    "checks_fig6",
    "plot_factorised",
    "gaps_factorised",
    "checks_factorised",
    "data_factorised",
    "plot_large_circle",
    "gaps_large_circle",
    "checks_large_circle",
    "data_large_circle",
    "data_overlay",
    "plot_overlay",
    "gaps_overlay",
    "checks_overlay",
    "QA_IMBALANCE",
    "data_qa",
    "plot_qa",
    "gaps_qa",
    "checks_qa",
]

SERIES = (
    "acc",
    "acc_rb",
    "attn_parent",
    "attn_parent_q",
    "attn_blank",
    "dist_V_Pi",
    "dist_V_sqrtPi",
    "cos_V_Pi",
    "dist_V_sqrtChat",
    "loss",
    "kl",
)
ROUND_OFF = 1e-9
EXACT_SOURCE = (
    "float64 round-off: torch full-matrix GD from zero and the reduced map of docs/models/token_selection.md "
    "§C.5 run on the same "
    "walks, so their difference is 0 in exact arithmetic (reference: 7e-16 after 8 steps); 1e-9 bounds the "
    "round-off over the run"
)
RB_SOURCE = (
    "acc_RB = mean Pi[s_{N-1}, Pred] equals max(p, 1-p) exactly once every prediction is a likeliest "
    "successor (docs/models/token_selection.md §C.3); 1e-9 bounds the float64 round-off of the weighted mean"
)
DEFAULTS_U = (
    "positional code phi_i = sqrt(rho) e_i, rho = M/2: orthogonal exactly in float64 (the sine code "
    "[phi_i]_k = sin(pi i k / M) reconstructed in docs/models/token_selection.md §C.2 is orthogonal only to "
    "round-off, which the unstable "
    "symmetric state of Theorem C2 amplifies); only orthogonality and rho enter the dynamics "
    "(docs/models/token_selection.md §C.9). With this "
    "code the coordinates of x~ beyond K + N are 0, so the rows and columns of W beyond them never enter the scores "
    "nor move: runs use M = N + 1 with rho = M_paper / 2, exactly the paper's M = 1000 from zero and equal in law "
    "from a random start (tests/test_random_walk.py::test_onehot_code_dynamics_do_not_depend_on_M_beyond_N)",
)
RIDGE_EXPLANATION = Explanation(
    reason=(
        "the symmetric state of Theorem C2 is an unstable equilibrium: in exact arithmetic GD stays on it "
        "(accuracy 1/K), but any perturbation grows ~10x per step; float64 round-off in torch's sums is enough "
        "at K = 20 (the reduced map stays on the ridge only because its state-count sums are exactly "
        "symmetric)"
    ),
    evidence=(
        "the dashed 'reduced map, perturbed 1e-16 at t = 2' curves of random_walk.large_circle and "
        "random_walk.fig5 panel (e) leave the ridge the same way: in random_walk.large_circle every seed "
        "whose torch run leaves the reduced map is a seed whose perturbed reduced map leaves the ridge too"
    ),
)


def _task(p, par) -> cf.RandomWalkTask:
    """The task of a figure run: the paper's rho = M/2 at M = N + 1 (see :data:`DEFAULTS_U`)."""
    return cf.RandomWalkTask(
        K=par["K"],
        N=par["N"],
        M=par["N"] + 1,
        rho=par["M"] / 2.0,
        p=p,
        eta=par.get("eta", 1.0),
        eps=par.get("eps", 0.1),
    )


def _paired_checks(ds, names, steps, *, a="torch", b="reduced", label="") -> list[CheckResult]:
    """Torch ``a`` against the reduced map ``b`` on the same walks with the same steps: exact up to round-off, so
    compared seed by seed (a mean over seeds would hide one seed that leaves), one check per variable over
    ``steps``."""
    out = []
    for name in names:
        pairs = [(_at(ds, f"{a}_{name}", s), _at(ds, f"{b}_{name}", s)[0]) for s in steps]
        va = np.stack([v for (v, _), _ in pairs], axis=1)
        vb = np.stack([v for _, v in pairs], axis=1)
        shown = sorted({s for (_, s), _ in pairs})
        out.append(
            per_seed_check(
                f"{name}{label}: torch = reduced map (same walks) at steps {shown}",
                vb,
                va,
                tol=ROUND_OFF,
                tolerance=EXACT_SOURCE,
            )
        )
    return out


def _perturbed_reduced(task, walks, test, n_steps, steps, *, at=2, rel=1e-16, seed=0):
    """The reduced map run to step ``at``, its state perturbed by ``rel`` max|state| Gaussian noise, then run on to
    ``n_steps``: the stability probe of Theorem C2's symmetric state. Returns (steps, acc) of the whole run."""
    first = cf.map(task, at, walks=walks, test=test, saveat=SaveAt(steps=tuple(range(at + 1))))
    x = first.states()[0, -1]
    x = x + rel * np.abs(x).max() * np.random.default_rng(seed).standard_normal(x.shape)
    rest_steps = tuple(s - at for s in steps if s >= at)
    rest = cf.map(task, n_steps - at, walks=walks, test=test, state0=x, saveat=SaveAt(steps=rest_steps))
    acc = np.concatenate([first["acc"].values[0][[s for s in steps if s < at]], rest["acc"].values[0]])
    return acc


def _save_steps(n_steps: int, dense: int = 10, n_log: int = 12) -> tuple[int, ...]:
    """Every step up to ``dense``, then about ``n_log`` log-spaced steps up to ``n_steps``."""
    steps = set(range(min(dense, n_steps) + 1))
    if n_steps > dense:
        steps |= {int(s) for s in np.unique(np.rint(np.geomspace(dense, n_steps, n_log)))}
    return tuple(sorted(steps))


def _seeds(cfg, n_seeds: int) -> list[int]:
    """The seeds of the figure's repeats: walks and trainer seed of each (the seed rule, run ``"walks"``)."""
    return list(cfg.seeds("walks", n_seeds))


def _torch_run(task, cfg, seeds, walks, n_steps, steps, **model_kw):
    """Full-batch GD of the torch model on fixed walks; returns (trajectory, final params, model)."""
    train_w, test_w = walks
    model = rwm.RandomWalkAttention(task, data=train_w, test=test_w, **model_kw)
    config = rwm.config("gd", model, n_steps, seeds=tuple(seeds), saveat=SaveAt(steps=tuple(steps)))
    with torch_threads(1):
        traj, params = train(model, config, device=cfg.device, return_params=True, progress=cfg.progress)
    return traj, params, model


def _reduced_runs(task, walks, n_steps, steps):
    """The exact reduced GD map (docs/models/token_selection.md §C.5) on each run's walks; a list of trajectories."""
    train_w, test_w = walks
    return [
        cf.map(task, n_steps, walks=tr, test=te, saveat=SaveAt(steps=tuple(steps))) for tr, te in zip(train_w, test_w)
    ]


def _series(traj_or_list, names, prefix) -> dict:
    """Variables ``{prefix}_{name}`` (seed, step) from a torch trajectory or a list of reduced ones."""
    out = {}
    for name in names:
        if isinstance(traj_or_list, list):
            if name not in traj_or_list[0]:
                continue
            vals = np.stack([t[name].values[0] for t in traj_or_list])
        else:
            if name not in traj_or_list:
                continue
            vals = traj_or_list[name].values
        out[f"{prefix}_{name}"] = (("seed", "step"), vals)
    return out


def _V_of(traj, task, index) -> np.ndarray:
    """V (seed, K, K) at time index ``index`` of a torch trajectory (or a list of reduced ones)."""
    if isinstance(traj, list):
        return np.stack([cf.unpack_state(task, t.states()[0, index])[0] for t in traj])
    return np.stack(
        [
            [[traj[f"V_{b}_{a}"].values[s, index] for a in range(task.K)] for b in range(task.K)]
            for s in range(traj.sizes["trajectory"])
        ]
    )


def _profiles(task, params, model, reduced, test_w) -> tuple[np.ndarray, np.ndarray]:
    """Mean attention per position over each run's test walks at the last step: torch and reduced, (seed, N)."""
    torch_p, red_p = [], []
    for i, te in enumerate(test_w):
        one = {k: v[i : i + 1] for k, v in params.items()}
        with torch_threads(1):
            torch_p.append(rwm.attention_profile(task, one, te, normalize_tokens=model.spec.normalize_tokens)[0])
        if reduced is not None:
            V, a, c = cf.unpack_state(task, reduced[i].states()[0, -1])
            S, _ = cf.reduced_forward(task, V, a, c, te.context)
            red_p.append(te.weights @ S)
    return np.stack(torch_p), (np.stack(red_p) if reduced is not None else None)


def _band(ax, x, samples, label, color):
    """Percentile band over seeds; a single seed is drawn as its line (no band)."""
    samples = np.asarray(samples)
    if samples.shape[0] >= 2:
        plot_seed_band(ax, x, samples, method="percentile", label=label, color=color)
    else:
        plot_empirical_band(ax, x, samples[0], samples[0], samples[0], label=label, color=color)


def _at(ds, var, step):
    """Values (seed,) of ``var`` at the saved step closest to ``step``."""
    idx = int(np.argmin(np.abs(ds.step.values - step)))
    return ds[var].values[:, idx], int(ds.step.values[idx])


# ----------------------------------------------------------------------------------------------------------------------
# Figs. 4 and 5: zero initialisation, p = 0.5 and p = 1 (docs/models/token_selection.md §C.8)
# ----------------------------------------------------------------------------------------------------------------------


def _zero_init_data(cfg, p: float) -> xr.Dataset:
    par = cfg.params
    task = _task(p, par)
    seeds = _seeds(cfg, par["n_seeds"])
    walks = rwm.walk_samples(task, par["n_train"], seeds, n_test=par["n_test"])
    steps = _save_steps(par["n_steps"], dense=par.get("dense", 10))
    traj, params, model = _torch_run(task, cfg, seeds, walks, par["n_steps"], steps)
    reduced = _reduced_runs(task, walks, par["n_steps"], steps)
    prof_t, prof_r = _profiles(task, params, model, reduced, walks[1])
    V_t = params["V"].cpu().numpy()
    V_r = _V_of(reduced, task, -1)
    names = cf.state_names(task)
    state_gap = max(
        float(np.max(np.abs(np.stack([traj[n].values[i] for n in names], -1) - reduced[i].states()[0])))
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
        red_p = cf.map(task, n_pop, walks=law, test=law, saveat=SaveAt(steps=psteps))
        prof = np.stack([traj_p[f"attn_pos_{j}"].values[0] for j in range(task.N)], -1)
        spread_r = []
        for t in range(len(psteps)):
            V, a, c = cf.unpack_state(task, red_p.states()[0, t])
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
    §C.5, is compared seed by seed in the checks)."""
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
        "tests/test_figures_random_walk.py::test_fig6_p1_breaks_first_at_every_step (slow; the step sweep) "
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
    return compare_rows(
        "acc_RB (random start, p = 0.5) at the last step vs max(p, 1-p) = 0.5",
        [ds.step.values[-1]],
        [0.5],
        ds.p05_acc_rb.values[:, -1:],
        allowance=ROUND_OFF,
        allowance_source=RB_SOURCE,
    )


def checks_fig6(ds: xr.Dataset) -> list[CheckResult]:
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


# ----------------------------------------------------------------------------------------------------------------------
# Factorised variant (docs/models/token_selection.md §C.8, our extension)
# ----------------------------------------------------------------------------------------------------------------------


def plot_factorised(ds: xr.Dataset):
    fig, axes = new_figure(2, 2, figsize=(10.0, 6.6))
    axes = axes.ravel()
    t = ds.step.values
    for ax, name, title in (
        (axes[0], "attn_parent", "(a) mean S_{N-1}"),
        (axes[1], "acc_rb", "(b) acc_RB"),
        (axes[2], "off", "(c) off (distance to the reduced family)"),
    ):
        _band(ax, t, ds[f"fact_{name}"].values, "torch factorised W_K^T W_Q", TOL_BRIGHT["green"])
        if f"merged_{name}" in ds:
            _band(ax, t, ds[f"merged_{name}"].values, "torch merged, zero init", TOL_BRIGHT["blue"])
        if f"reduced_{name}" in ds:
            plot_reduced(ax, t, ds[f"reduced_{name}"].values.mean(0), label="reduced map", color=TOL_BRIGHT["red"])
        ax.set(xlabel="iteration t", title=title)
        ax.legend(fontsize=7)
    ax = axes[3]
    im = ax.imshow(
        ds.fact_profile.values,
        aspect="auto",
        cmap="magma",
        vmin=0,
        vmax=1,
        extent=(0.5, ds.sizes["pos"] + 0.5, ds.sizes["seed"] - 0.5, -0.5),
    )
    fig.colorbar(im, ax=ax, fraction=0.046, label="mean attention")
    ax.set(
        title=f"(d) factorised: attention per seed at t = {int(t[-1])}",
        xlabel="token position i (N-1 = parent)",
        ylabel="run",
    )
    return fig


def _fact_peaks(ds) -> tuple[np.ndarray, np.ndarray]:
    """Per seed: the position (1-based) where the factorised run's mean attention peaks at the last step, and its
    mass."""
    prof = ds.fact_profile.values
    return ds.pos.values[np.argmax(prof, axis=1)], prof.max(axis=1)


def gaps_factorised(ds: xr.Dataset) -> list[GapRow]:
    """No gap rows: only the merged run from zero has a theory here (the reduced map, exact), compared seed by seed
    in :func:`checks_factorised`; no reduced dynamics covers a random factorised start."""
    return []


def checks_factorised(ds: xr.Dataset) -> list[CheckResult]:
    n, N = int(ds.sizes["seed"]), int(ds.attrs["N"])
    peak, mass = _fact_peaks(ds)
    parent = peak == N - 1
    rb = ds.fact_acc_rb.values[:, -1]
    out = []
    if parent.any():
        dev = float(np.abs(rb[parent] - 0.5).max())
        out.append(
            CheckResult(
                name=(
                    "factorised starts whose attention peaks at the parent: acc_RB = max(p, 1-p) = 0.5 at the "
                    "last step (Theorem C1 item 1's endpoint), max |acc_RB - 0.5| over those seeds"
                ),
                passed=dev <= 1e-9,
                measured=dev,
                expected=0.0,
                tolerance="1e-9: acc_RB is exact once Pred is a neighbour of the parent "
                "(docs/models/token_selection.md §C.3)",
                n_seeds=int(parent.sum()),
            )
        )
    others = [
        f"run {i}: position {int(p)} (mass {m:.2f})" for i, (p, m, ok) in enumerate(zip(peak, mass, parent)) if not ok
    ]
    check = CheckResult(
        name=(
            "factorised W_K^T W_Q from N(0, 0.01^2) factors selects the parent like the merged model from zero: "
            "seeds whose mean attention at the last step peaks at position N-1"
        ),
        passed=bool(parent.all()),
        measured=int(parent.sum()),
        expected=n,
        tolerance="every seed",
        n_seeds=n,
    )
    if others:
        check = check.explained(
            Explanation(
                kind="disagrees",
                reason=(
                    "the factorised model does not select the parent from every random start: Theorem C1 covers the "
                    "merged W from zero only, and the factorised dynamics has other attractors"
                ),
                evidence=(
                    "measured at the last step, per run, the position where the mean attention peaks: "
                    + "; ".join(others)
                    + " (panel d)"
                ),
            )
        )
    out += _paired_checks(ds, ("attn_parent",), [int(ds.step.values[-1])], a="merged", label=" (merged from zero)")
    return out + [check]


@register(
    name="random_walk.factorised",
    model="random_walk",
    paper="Shi & Cao (2025): factorised W = W_K^T W_Q (docs/models/token_selection.md §C.8, our extension)",
    spec="docs/models/token_selection.md §C.8, §0",
    caption=(
        "K = 6, N = 25, M = 200, p = 0.5, eta = 1, eps = 0.1, full-batch GD on n_train walks, no token "
        "normalisation. Green: W = W_K^T W_Q with V, W_K, W_Q i.i.d. N(0, 0.01^2) (never W_K = W_Q = 0, "
        "a stationary point); blue: merged W from zero; dashed: reduced map of docs/models/token_selection.md §C.5."
    ),
    unrecoverable=DEFAULTS_U + ("factor init scale 0.01 (docs/models/token_selection.md §0 default)",),
    params={
        "tiny": {"K": 6, "N": 25, "M": 200, "n_train": 300, "n_test": 300, "n_steps": 12, "n_seeds": 2},
        "quick": {"K": 6, "N": 25, "M": 200, "n_train": 2000, "n_test": 2000, "n_steps": 30, "n_seeds": 8},
        "paper": {"K": 6, "N": 25, "M": 200, "n_train": 2000, "n_test": 2000, "n_steps": 100, "n_seeds": 10},
    },
    plot=plot_factorised,
    gaps=gaps_factorised,
    checks=checks_factorised,
)
def data_factorised(cfg) -> xr.Dataset:
    """Factorised check of docs/models/token_selection.md §C.8 against the merged model and the reduced map."""
    par = cfg.params
    task = _task(0.5, par)
    seeds = _seeds(cfg, par["n_seeds"])
    walks = rwm.walk_samples(task, par["n_train"], seeds, n_test=par["n_test"])
    steps = _save_steps(par["n_steps"], dense=12)
    fact, fact_params, fact_model = _torch_run(
        task, cfg, seeds, walks, par["n_steps"], steps, parametrisation="factorised", init="random"
    )
    merged, _, _ = _torch_run(task, cfg, seeds, walks, par["n_steps"], steps)
    reduced = _reduced_runs(task, walks, par["n_steps"], steps)
    names = ("attn_parent", "acc_rb", "acc", "off", "dist_V_Pi")
    data = {**_series(fact, names, "fact"), **_series(merged, names, "merged"), **_series(reduced, names, "reduced")}
    prof, _ = _profiles(task, fact_params, fact_model, None, walks[1])
    data["fact_profile"] = (("seed", "pos"), prof)
    return xr.Dataset(
        data,
        coords={"seed": np.asarray(seeds), "step": np.asarray(steps), "pos": np.arange(1, task.N + 1)},
        attrs={"K": task.K, "N": task.N, "M": par["M"], "n_train": par["n_train"]},
    )


# ----------------------------------------------------------------------------------------------------------------------
# Larger circle (docs/models/token_selection.md §C.8 appendix)
# ----------------------------------------------------------------------------------------------------------------------


def plot_large_circle(ds: xr.Dataset):
    fig, axes = new_figure(1, 2, figsize=(10.0, 3.6))
    t = ds.step.values
    for ax, (tag, p) in zip(axes, (("p05", 0.5), ("p1", 1.0))):
        _band(ax, t, ds[f"{tag}_torch_acc_rb"].values, "torch acc_RB", TOL_BRIGHT["blue"])
        _band(ax, t, ds[f"{tag}_torch_acc"].values, "torch plain acc", TOL_BRIGHT["cyan"])
        plot_reduced(
            ax, t, ds[f"{tag}_reduced_acc"].values.mean(0), label="reduced map plain acc", color=TOL_BRIGHT["red"]
        )
        if f"{tag}_perturbed_acc" in ds:
            plot_reduced(
                ax,
                t,
                ds[f"{tag}_perturbed_acc"].values.mean(0),
                label="reduced map, perturbed 1e-16 at t = 2",
                color=TOL_BRIGHT["purple"],
            )
        theory = max(p, 1 - p) if 0 < p < 1 else 1 / ds.attrs["K"]
        plot_theory(ax, t, np.full(t.shape, theory), label="theorem", color="k", linewidth=0.8)
        ax.set(
            xlabel="iteration t",
            ylabel="test accuracy",
            ylim=(0, 1.05),
            title=f"K = {ds.attrs['K']}, N = {ds.attrs['N']}, p = {p:g}",
        )
        ax.legend(fontsize=7)
    return fig


def gaps_large_circle(ds: xr.Dataset) -> list[GapRow]:
    """Theorem rows; torch against the reduced map (same walks, same steps: exact) is compared seed by seed in
    :func:`checks_large_circle`."""
    T = int(ds.step.values[-1])
    K = int(ds.attrs["K"])
    rows = []
    rows += compare_rows(
        "acc_RB (p = 0.5, torch) vs Theorem C1 item 1: max(p, 1-p)",
        [T],
        [0.5],
        ds.p05_torch_acc_rb.values[:, -1:],
        allowance=ROUND_OFF,
        allowance_source=RB_SOURCE,
    )
    rows += compare_rows(
        "plain test accuracy (p = 1, reduced map) vs Theorem C2: 1/K", [T], [1.0 / K], ds.p1_reduced_acc.values[:, -1:]
    )
    return rows


def checks_large_circle(ds: xr.Dataset) -> list[CheckResult]:
    n = int(ds.sizes["seed"])
    rb = ds.p05_torch_acc_rb.values[:, -1]
    pert = ds.p1_perturbed_acc.values[:, -1]
    out = []
    # Torch and the reduced map see the same walks and take the same steps: they agree exactly up to round-off,
    # which cannot change a test prediction unless a score ties; one flipped walk moves accuracy by 1 / n_test.
    tol, n_test = 0.5 / int(ds.attrs["n_test"]), int(ds.attrs["n_test"])
    for tag, p in (("p05", 0.5), ("p1", 1.0)):
        for name in ("acc", "acc_rb"):
            a, b = ds[f"{tag}_torch_{name}"].values, ds[f"{tag}_reduced_{name}"].values
            escaped = np.abs(a - b).max(axis=1) > tol
            # the measured cause covers a seed only where the reduced map perturbed by 1e-16 leaves the ridge too
            covered = p == 1.0 and escaped.any() and bool(np.all(pert[escaped] > 0.5))
            out.append(
                per_seed_check(
                    f"{name} (p = {p:g}): torch full-matrix GD vs the reduced map, every saved step",
                    b,
                    a,
                    tol=tol,
                    tolerance=(
                        f"0.5 / n_test = {tol:.2g}: less than one of the {n_test} test walks (round-off flips a "
                        "prediction only at a tie)"
                    ),
                    explanation=RIDGE_EXPLANATION if covered else None,
                )
            )
    return out + [
        CheckResult(
            name=("Theorem C1 item 1 at K = 20: acc_RB = 0.5 at the last step, max |acc_RB - 0.5| over seeds (torch)"),
            passed=bool(np.all(np.abs(rb - 0.5) <= 1e-9)),
            measured=float(np.abs(rb - 0.5).max()),
            expected=0.0,
            tolerance="1e-9 (acc_RB is exact once Pred is a neighbour, docs/models/token_selection.md §C.3)",
            n_seeds=n,
        )
    ]


@register(
    name="random_walk.large_circle",
    model="random_walk",
    paper="Shi & Cao (2025), appendix: K = 20, N = 101",
    spec="docs/models/token_selection.md §C.8",
    caption=(
        "(K, N) = (20, 101), M = 1000, zero init, eta = 1, eps = 0.1, full-batch GD on n_train walks, test "
        "accuracy on n_test walks vs iteration for p = 0.5 and p = 1 (N = 5K + 1: Theorem C2). Torch "
        "full-matrix GD (bands over training samples) vs the reduced map (dashed); purple: the reduced map "
        "perturbed by 1e-16 at t = 2, which leaves the unstable symmetric state of Theorem C2 as torch's "
        "round-off does at K = 20."
    ),
    unrecoverable=DEFAULTS_U,
    params={
        "tiny": {"K": 20, "N": 41, "M": 200, "n_train": 200, "n_test": 200, "n_steps": 8, "n_seeds": 2},
        "quick": {"K": 20, "N": 101, "M": 1000, "n_train": 500, "n_test": 500, "n_steps": 30, "n_seeds": 8},
        "paper": {"K": 20, "N": 101, "M": 1000, "n_train": 1000, "n_test": 1000, "n_steps": 50, "n_seeds": 8},
    },
    plot=plot_large_circle,
    gaps=gaps_large_circle,
    checks=checks_large_circle,
)
def data_large_circle(cfg) -> xr.Dataset:
    """Appendix run of docs/models/token_selection.md §C.8 at (K, N) = (20, 101)."""
    par = cfg.params
    seeds = _seeds(cfg, par["n_seeds"])
    steps = _save_steps(par["n_steps"], dense=10, n_log=8)
    data = {}
    for tag, p in (("p05", 0.5), ("p1", 1.0)):
        task = _task(p, par)
        walks = rwm.walk_samples(task, par["n_train"], seeds, n_test=par["n_test"])
        traj, _, _ = _torch_run(task, cfg, seeds, walks, par["n_steps"], steps)
        reduced = _reduced_runs(task, walks, par["n_steps"], steps)
        data.update(_series(traj, ("acc", "acc_rb", "attn_parent"), f"{tag}_torch"))
        data.update(_series(reduced, ("acc", "acc_rb", "attn_parent"), f"{tag}_reduced"))
        if p == 1.0:
            data[f"{tag}_perturbed_acc"] = (
                ("seed", "step"),
                np.stack(
                    [
                        _perturbed_reduced(task, tr, te, par["n_steps"], steps, seed=i)
                        for i, (tr, te) in enumerate(zip(*walks))
                    ]
                ),
            )
    return xr.Dataset(
        data,
        coords={"seed": np.asarray(seeds), "step": np.asarray(steps)},
        attrs={"K": par["K"], "N": par["N"], "M": par["M"], "n_test": par["n_test"]},
    )


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
        zero, _, _ = _torch_run(task, cfg, seeds, walks, T, steps)
        rand, _, _ = _torch_run(task, cfg, seeds, walks, T, steps, init="random", normalize_tokens=True)
        red = _reduced_runs(task, walks, T_red, steps_red)
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
            data[f"{tag}_reduced_{name}"] = (("seed", "step_red"), np.stack([r[name].values[0] for r in red]))
    return xr.Dataset(
        data,
        coords={"seed": np.asarray(seeds), "step": np.asarray(steps), "step_red": np.asarray(steps_red)},
        attrs={"K": par["K"], "N": par["N"], "M": par["M"], "n_train": par["n_train"], "n_test": par["n_test"]},
    )


def plot_overlay(ds: xr.Dataset):
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
    every p."""
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


# ----------------------------------------------------------------------------------------------------------------------
# Beyond random walks: QA tasks (docs/models/token_selection.md §C.8)
# ----------------------------------------------------------------------------------------------------------------------

_QA_RUNS = (("majority", False), ("majority", True), ("preference", False), ("preference", True))
QA_IMBALANCE = Explanation(
    reason=(
        "the loss -log(e_y^T f + eps) (docs/models/token_selection.md §C.4) only ever raises the true label's "
        "output: its gradient in f is -e_y / (e_y^T f + eps), so nothing lowers the other labels' outputs and the "
        "prediction margin is left to the part of f that all questions share (11 of 16 words are common), which "
        "follows the sample's label frequencies (as V ~ sqrt(C_hat) in docs/models/token_selection.md §C.7). A "
        "sampled training set whose labels are not exactly balanced pulls the ReLU model to its majority label "
        "(accuracy ~ 0.5) and slowly flips the plain model's borderline lists (3 vs 2 fruits, after ~500 "
        "iterations); on the balanced set the ReLU model rises and then falls again (measured, 4 runs: "
        "0.68 / 0.84 / 0.85 at t = 100 / 400 / 1000; at eta = 1: 0.88 / 0.84 / 0.72; init scale 0.1: "
        "0.95 / 0.78 / 0.69; init scale 0.001: 0.50 / 0.51 / 0.56, the small-start plateau of a two-layer map). "
        "With softmax cross-entropy, which also lowers the wrong label, the same ReLU model reaches 100% (4 runs "
        "of 1 024 questions: 1.0 at t = 400 on the balanced set, 1.0 at t = 1000 on random samples, where the "
        "plain model also stays at 1.0): the paper's 'same outcome' for the ReLU variant is not reproduced "
        "under the loss of §C.4, and "
        "the cause is that loss, not the data or the step"
    ),
    kind="disagrees",
    evidence=(
        "random_walk.qa: the 'balanced training set' curves (each of the 32 questions equally often) and the "
        "'ReLU, cross-entropy, balanced' curve; checks 'a balanced training set lifts ...' and 'cross-entropy "
        "lifts ...'"
    ),
)


def _qa_tag(task: str, relu: bool) -> str:
    return f"{task}_{'relu' if relu else 'plain'}"


def _qa_balanced(task: str, n: int) -> cf.WalkSample:
    """Every question of ``task`` equally often (n rounded down to a multiple of the number of questions)."""
    tokens, labels = rwm.qa_questions(task)
    rows = np.concatenate([tokens, labels[:, None]], axis=1)
    return cf.WalkSample(np.tile(rows, (max(n // len(labels), 1), 1)))


@register(
    name="random_walk.qa",
    model="random_walk",
    paper="Shi & Cao (2025): beyond random walks (QA tasks)",
    spec="docs/models/token_selection.md §C.8",
    caption=(
        "Task 1 (majority fruit of a 5-word list, (K, N) = (19, 17)) and Task 2 (preferred fruit of 'I prefer "
        "an X to an Y', (K, N) = (19, 19)); random start N(0, 0.01^2), eta = 0.1, eps = 0.1, full-batch GD on "
        "n_train questions drawn at random, test accuracy on n_test questions vs iteration, for the model of "
        "docs/models/token_selection.md §C.3 (plain) and with an extra ReLU layer f = A relu(V X S) (m = 19). "
        "Bands: mean and 95% range "
        "over runs. Dashed (Task 1): the same models trained on a balanced set (each of the 32 questions "
        "equally often). Dotted red: the ReLU model on the balanced set with softmax cross-entropy instead of "
        "the paper's "
        "loss (a diagnostic). Expected (docs/models/token_selection.md §C.8): Task 1 ~100% within 100 "
        "iterations, Task 2 ~50% (both questions share the bag of words), the same with ReLU. Measured: on a "
        "random sample the ReLU model predicts the sample's majority label (see the rows); on the balanced set "
        "it rises slowly, 0.75 at 400 and 0.81 at 1 000 iterations (mean of 8 runs), not the paper's ~100%. "
        "The plain model on random samples stays at 1.0 to ~500 iterations, then decays (0.93 at 1 000). "
        "Cause (measured, see the rows): the loss -log(e_y^T f + eps) only raises the true label's output and "
        "never lowers the others, so the margin follows the label frequencies of the sample; with "
        "cross-entropy on the same balanced questions the ReLU model overtakes the paper's loss (dotted; 1.0 "
        "by 400-1 000 iterations in the runs we measured)."
    ),
    unrecoverable=DEFAULTS_U
    + (
        (
            "tokenisation: lower-case words, punctuation dropped, 19-word vocabulary in alphabetical order, "
            "blank query last (docs/models/token_selection.md §C.8)"
        ),
        "M = 1000, tokens normalised as in Fig. 6, 1000 iterations (docs/models/token_selection.md §C.8)",
        "ReLU variant: A_relu i.i.d. N(0, 0.01^2), log argument clamped at 1e-12 (docs/models/token_selection.md §C.8)",
    ),
    params={
        "tiny": {"M": 100, "n_train": 200, "n_test": 200, "n_steps": 30, "n_seeds": 2},
        "quick": {"M": 1000, "n_train": 1000, "n_test": 500, "n_steps": 400, "n_seeds": 8},
        "paper": {"M": 1000, "n_train": 1000, "n_test": 1000, "n_steps": 1000, "n_seeds": 8},
    },
    plot=lambda ds: plot_qa(ds),
    gaps=lambda ds: gaps_qa(ds),
    checks=lambda ds: checks_qa(ds),
)
def data_qa(cfg) -> xr.Dataset:
    """QA tasks of docs/models/token_selection.md §C.8 (plain and ReLU variants), and Task 1 on a balanced training
    set."""
    par = cfg.params
    seeds = _seeds(cfg, par["n_seeds"])
    T = par["n_steps"]
    steps = tuple(sorted(set(range(min(10, T) + 1)) | set(np.rint(np.linspace(0, T, 25)).astype(int))))
    data = {}
    runs = [(task, relu, False, "log_eps") for task, relu in _QA_RUNS] + [
        ("majority", False, True, "log_eps"),
        ("majority", True, True, "log_eps"),
        ("majority", True, True, "cross_entropy"),
    ]
    for task, relu, balanced, loss in runs:
        train_q, test_q = [], []
        for s in seeds:
            rng = np.random.default_rng(s)
            train_q.append(rwm.qa_sample(task, par["n_train"], rng))
            test_q.append(rwm.qa_sample(task, par["n_test"], rng))
        if balanced:
            train_q = [_qa_balanced(task, par["n_train"])] * len(seeds)
        N = rwm.qa_geometry(task).N
        model = rwm.QAAttention(task, data=train_q, test=test_q, M=N + 1, rho=par["M"] / 2.0, relu=relu, loss=loss)
        with torch_threads(1):
            traj = train(
                model,
                rwm.config("qa_gd", model, T, seeds=tuple(seeds), saveat=SaveAt(steps=steps)),
                device=cfg.device,
                progress=cfg.progress,
            )
        tag = _qa_tag(task, relu) + ("_balanced" if balanced else "") + ("_ce" if loss == "cross_entropy" else "")
        data[f"{tag}_acc"] = (("seed", "step"), traj["acc"].values)
        data[f"{tag}_loss"] = (("seed", "step"), traj["loss"].values)
    return xr.Dataset(
        data,
        coords={"seed": np.asarray(seeds), "step": np.asarray(steps)},
        attrs={"M": par["M"], "n_train": par["n_train"], "n_test": par["n_test"], "n_steps": T},
    )


def plot_qa(ds: xr.Dataset):
    fig, axes = new_figure(1, 2, figsize=(10.0, 3.6))
    t = ds.step.values
    for ax, task, expected, title in (
        (axes[0], "majority", 1.0, "Task 1: majority fruit"),
        (axes[1], "preference", 0.5, "Task 2: preferred fruit"),
    ):
        _band(ax, t, ds[f"{task}_plain_acc"].values, "model of docs/models/token_selection.md §C.3", TOL_BRIGHT["blue"])
        _band(ax, t, ds[f"{task}_relu_acc"].values, "with ReLU layer", TOL_BRIGHT["green"])
        for relu, color in ((False, TOL_BRIGHT["blue"]), (True, TOL_BRIGHT["green"])):
            name = f"{_qa_tag(task, relu)}_balanced_acc"
            if name in ds:
                plot_reduced(
                    ax,
                    t,
                    ds[name].values.mean(0),
                    color=color,
                    label=f"{'ReLU' if relu else 'plain'}, balanced training set (mean)",
                )
        name = f"{_qa_tag(task, True)}_balanced_ce_acc"
        if name in ds:
            ax.plot(
                t,
                ds[name].values.mean(0),
                color=TOL_BRIGHT["red"],
                linestyle=":",
                linewidth=1.5,
                label="ReLU, cross-entropy loss, balanced (mean; diagnostic)",
            )
        plot_theory(
            ax,
            t,
            np.full(t.shape, expected),
            label="expected (docs/models/token_selection.md §C.8)",
            color="k",
            linewidth=0.8,
        )
        ax.set(xlabel="iteration t", ylabel="test accuracy", ylim=(0, 1.05), title=title)
        # below the panel: inside, the legend covers the accuracy curves (the report's layout check)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
    return fig


def gaps_qa(ds: xr.Dataset) -> list[GapRow]:
    """Task 1 at t = 100 (the paper's '~100% within 100 iterations') and Task 2 at the last step, every seed's test
    accuracy against the expected outcome."""
    t = ds.step.values
    rows = []
    for task, relu in _QA_RUNS:
        tag = _qa_tag(task, relu)
        if task == "majority":
            i = int(np.argmin(np.abs(t - 100)))
            rows += compare_rows(
                f"QA Task 1 ({tag}) test accuracy vs ~100%",
                [t[i]],
                [1.0],
                ds[f"{tag}_acc"].values[:, i : i + 1],
                rel_allowance=0.02,
                allowance_source="'approximately 100%' (docs/models/token_selection.md §C.8) read as >= 98%",
                explanation=QA_IMBALANCE if relu else None,
            )
        else:
            rows += compare_rows(
                f"QA Task 2 ({tag}) test accuracy vs 50% (bag of words)",
                [t[-1]],
                [0.5],
                ds[f"{tag}_acc"].values[:, -1:],
            )
    return rows


def checks_qa(ds: xr.Dataset) -> list[CheckResult]:
    t = ds.step.values
    n = int(ds.sizes["seed"])
    i = int(np.argmin(np.abs(t - 100)))
    diff = ds.majority_relu_balanced_acc.values[:, -1] - ds.majority_relu_acc.values[:, -1]  # paired by seed
    # one-sided level 0.01: this tests the evidence behind an explanation (measured at t = 400: mean +0.24, SD 0.19
    # over 8 seeds, t = 3.6), not a theory row (those use 1e-3)
    lower = float(diff.mean() - scipy.stats.t.ppf(0.99, n - 1) * diff.std(ddof=1) / math.sqrt(n)) if n > 1 else -1.0
    out = [
        CheckResult(
            name=(
                f"QA Task 1, ReLU variant: a balanced training set lifts the last-step accuracy above the random "
                f"sample's: one-sided 99% Student-t lower bound of the mean paired difference (t = {int(t[-1])})"
            ),
            passed=lower > 0,
            measured=lower,
            expected="> 0",
            tolerance=f"Student t, {n - 1} df, over seeds (same test questions and start per seed)",
            n_seeds=n,
        )
    ]
    if "majority_relu_balanced_ce_acc" in ds:
        # the loss is the only difference between the two runs (same balanced questions, test set and start per
        # seed); one-sided level 0.01 as above (measured at t = 400, 4 seeds: 1.00 against 0.84)
        ce = ds.majority_relu_balanced_ce_acc.values[:, -1]
        d = ce - ds.majority_relu_balanced_acc.values[:, -1]
        low = float(d.mean() - scipy.stats.t.ppf(0.99, n - 1) * d.std(ddof=1) / math.sqrt(n)) if n > 1 else -1.0
        out.append(
            CheckResult(
                name=(
                    f"QA Task 1, ReLU variant, balanced set: cross-entropy (which also lowers the wrong label) lifts "
                    f"the last-step accuracy above the paper's loss -log(e_y^T f + eps): one-sided 99% Student-t lower "
                    f"bound of the mean paired difference (t = {int(t[-1])})"
                ),
                passed=low > 0,
                measured=low,
                expected="> 0",
                tolerance=f"Student t, {n - 1} df, over seeds (same questions and start per seed; only the loss "
                "differs)",
                n_seeds=n,
            )
        )
    out.append(
        CheckResult(
            name=f"QA Task 1, plain model, balanced training set: accuracy at t = {int(t[i])}, minimum over seeds",
            passed=float(ds.majority_plain_balanced_acc.values[:, i].min()) >= 0.98,
            measured=float(ds.majority_plain_balanced_acc.values[:, i].min()),
            expected=1.0,
            tolerance=">= 0.98 ('approximately 100% within 100 iterations', docs/models/token_selection.md §C.8)",
            n_seeds=n,
        )
    )
    return out
