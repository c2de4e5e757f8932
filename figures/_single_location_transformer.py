"""Figures 8, 9 and 10 of Marion et al. (2025): Transformer layer and multiple-location regression.

Registers ``single_location.fig8`` (docs/models/single_location.md §8.7: one Transformer layer with a register token on
single-location regression), ``single_location.fig9`` (docs/models/single_location.md §8.8: the multi-head erf predictor
on multiple-location regression) and ``single_location.fig10`` (docs/models/single_location.md §8.9: the multi-head
Transformer layer on that task). Imported by :mod:`figures.single_location`, so the figures are discovered with the
other single_location figures.

Every run goes through the shared trainer with the models of :mod:`empirical.models.single_location_transformer`;
reference levels are closed forms of :mod:`closedform.single_location` (null, optimal-linear and best erf-oracle
risks, docs/models/single_location.md §1, §5.2, §5.4). The spec gives no closed form for the learned quantities of these
figures, so they have theorem/finding checks (docs/models/single_location.md §8.7-§8.9 numbers) but no gap rows.

Presets: ``paper`` = the documented defaults ([U], docs/models/single_location.md §8.7-§8.9); ``quick`` = reduced
sizes with larger step sizes (each stated in the figure's parameters) so that the qualitative findings show within about
a minute of CPU time; ``tiny`` = d = 8, L = 4 with still larger step sizes (seconds; the findings already show).
"""

from __future__ import annotations

import json
import math

import numpy as np
import xarray as xr

from closedform import single_location as cf
from dynamics.saveat import SaveAt
from figures._style import (
    TOL_BRIGHT,
    new_figure,
    panel_grid,
    plot_seed_band,
    plot_theory,
)
from figures._seed_checks import above_chance_check, mean_check
from figures.registry import CheckResult, register

__all__ = ["data_fig8", "data_fig9", "data_fig10", "plot_fig8", "plot_fig9", "plot_fig10"]

_PAPER = "Marion et al. (2025), Fig. {}"
_COLOURS = [TOL_BRIGHT[c] for c in ("blue", "red", "green", "purple", "yellow", "cyan")]


# ----------------------------------------------------------------------------------------------------------------
# shared helpers


def _run(cfg, model, *, lr, batch_size, schedules=None):
    """Train ``model`` for ``cfg.params["n_seeds"]`` seeds through :func:`empirical.train.train`; return a Dataset
    with dims (seed, time), coordinate ``step``, and the training configuration in the attributes.
    """
    from empirical.device import torch_threads
    from empirical.train import TrainConfig
    from figures.experiments import train

    p = cfg.params
    n = int(p["n_seeds"])
    config = TrainConfig(
        seeds=cfg.seeds("train", n),
        n_steps=int(p["n_steps"]),
        batch_size=batch_size,
        lr=lr,
        schedules=schedules or {},
        eval_size=int(p["eval_size"]),
        saveat=SaveAt(every=int(p["log_every"])),
    )
    with torch_threads(1, device=cfg.device):
        traj = train(model, config, device=cfg.device, progress=cfg.progress)
    ds = xr.Dataset(
        {name: (("seed", "time"), traj[name].values) for name in traj.data_vars},
        coords={
            "seed": ("seed", traj["trajectory"].values),
            "time": ("time", traj["time"].values),
            "step": ("time", traj["step"].values),
        },
    )
    ds.attrs.update(
        train_config_json=config.to_json(),
        torch_device=traj.attrs.get("device", cfg.device),
        torch_dtype=traj.attrs.get("dtype", "float64"),
        time_unit="step",
        task_json=json.dumps({f: getattr(model.task, f) for f in ("d", "L", "K", "gamma", "noise")}),
    )
    return ds


def _oracle(task, cfg):
    from empirical.models.single_location_transformer import random_oracle_directions

    return random_oracle_directions(task, cfg.generators("data", ["oracle"])["oracle"])


def _task(cfg, K):
    from empirical.models.single_location_transformer import MultiLocationTask

    p = cfg.params
    return MultiLocationTask(d=int(p["d"]), L=int(p["L"]), K=K, gamma=math.sqrt(0.5), noise=float(p["noise"]))


def _band(ax, ds, var, *, label, color, transform=np.asarray, method="percentile"):
    plot_seed_band(ax, ds["step"].values, transform(ds[var].values), method=method, label=label, color=color)


def _hline(ax, ds, value, *, label, color, **kwargs):
    steps = ds["step"].values
    plot_theory(ax, steps, np.full(steps.shape, float(value)), label=label, color=color, **kwargs)


def _at_step(ds, var, step):
    hit = np.nonzero(ds["step"].values == step)[0]
    return None if hit.size == 0 else ds[var].values[:, hit[0]]


def _pairs(ds, prefix):
    names = [n for n in ds.data_vars if n.startswith(prefix + "_") and n.count("_") == prefix.count("_") + 2]
    return sorted(names)


def _reference_levels(task) -> dict[str, float]:
    """Closed-form excess-risk levels for K = 1: null predictor (gamma^2), optimal linear predictor
    (docs/models/single_location.md §5.4,
    Prop. 3) and the erf oracle at its best lambda (docs/models/single_location.md §5.2, minimised on a log grid of 4001
    lambdas).
    """
    single = cf.SingleLocationTask(d=task.d, L=task.L, gamma=task.gamma, noise=task.noise)
    lams = np.logspace(-4, 1, 4001)
    oracle = np.asarray(cf.oracle_risk(single, lams)) - task.eps**2
    best = int(np.argmin(oracle))
    return {
        "null_excess": task.gamma**2,
        "linear_excess": cf.linear_risk(single) - task.eps**2,
        "oracle_excess_best": float(oracle[best]),
        "oracle_lam_best": float(lams[best]),
    }


# ----------------------------------------------------------------------------------------------------------------
# Fig. 8 - one Transformer layer on single-location regression (docs/models/single_location.md §8.7)


def plot_fig8(ds: xr.Dataset):
    """(a) test excess risk with closed-form reference levels; (b) alignments; (c) rank-one ratio of W_Q W_K^T."""
    fig, axes = new_figure(1, 3)
    ax = axes[0]
    _band(ax, ds, "excess_risk", label=f"Transformer (d = {ds.attrs['d']})", color=_COLOURS[0])
    _hline(ax, ds, ds["null_excess"], label="null predictor", color=TOL_BRIGHT["grey"])
    _hline(ax, ds, ds["linear_excess"], label="optimal linear (Prop. 3)", color=_COLOURS[1])
    _hline(ax, ds, ds["oracle_excess_best"], label="erf oracle, best lambda", color=_COLOURS[2])
    ax.set(xlabel="step", ylabel="excess risk (test MSE - eps^2)", title="(a) excess risk")
    # below the panel: four entries inside it cover the curve (the layout check measured a quarter of it covered)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    ax = axes[1]
    for j, (var, label) in enumerate(
        (("kappa", "|k_hat . k*|"), ("nu", "|v_hat . v*| / |v_hat|"), ("nu_mlp", "MLP-corrected v_hat"))
    ):
        _band(ax, ds, var, label=label, color=_COLOURS[j + 3])
    ax.set(xlabel="step", ylabel="alignment", ylim=(-0.05, 1.05), title="(b) learned directions")
    ax.legend(fontsize="small")
    ax = axes[2]
    _band(ax, ds, "sv_ratio", label="sv_1 / sv_2 of W_Q W_K^T", color=_COLOURS[0], transform=np.log10)
    ax.set(xlabel="step", ylabel="log10(sv_1 / sv_2)", title="(c) rank-one ratio")
    ax.legend(fontsize="small")
    return fig


def checks_fig8(ds: xr.Dataset) -> list[CheckResult]:
    """docs/models/single_location.md §8.7 findings: low excess risk and both alignments approach 1 (seed means with t
    intervals).

    W_Q W_K^T is exactly rank one in this model (W_Q = 0 at init with a fixed register: every SGD update of W_Q is
    rank one along the register direction, see the model's Notes), so "nearly rank one" cannot fail and is not a
    check; panel (c) shows the ratio descriptively. What the rank-one claim is for -- the single attention direction
    being the oracle k* -- is the key-alignment check.
    """
    lin = float(ds["linear_excess"])
    nu = np.maximum(ds["nu"].values[:, -1], ds["nu_mlp"].values[:, -1])
    return [
        mean_check(
            "Sec. 8.7: low excess risk (final test excess risk below the optimal linear one, Prop. 3)",
            ds["excess_risk"].values[:, -1],
            below=lin,
            tolerance="t interval of the seed mean at level 1e-3; the linear risk is the closed form of "
            "docs/models/single_location.md §5.4",
        ),
        mean_check(
            "Sec. 8.7: the rank-one attention direction is the oracle: final |k_hat . k*| approaches 1",
            ds["kappa"].values[:, -1],
            above=0.7,
            tolerance="t interval at level 1e-3; 'approach 1' has no number in the reference, 0.7 is ours "
            "(chance level 1/sqrt(d))",
        ),
        mean_check(
            "Sec. 8.7: value alignment approaches 1 (final, max of plain and MLP-corrected)",
            nu,
            above=0.7,
            tolerance="t interval at level 1e-3; 'approach 1' has no number in the reference, 0.7 is ours",
        ),
    ]


#  Presets shared by the Transformer figures 8 and 10 (docs/models/single_location.md §8.7, §8.9 use the same training
# protocol).
TRANSFORMER_PRESETS = {
    "tiny": {
        "d": 8,
        "L": 4,
        "noise": 0.1,
        "n_seeds": 2,
        "n_steps": 200,
        "batch_size": 32,
        "lr": 5e-2,
        "eval_size": 300,
        "log_every": 50,
    },
    "quick": {
        "d": 20,
        "L": 10,
        "noise": 0.1,
        "n_seeds": 8,
        "n_steps": 2000,
        "batch_size": 64,
        "lr": 1e-2,
        "eval_size": 2000,
        "log_every": 100,
    },
    "paper": {
        "d": 80,
        "L": 10,
        "noise": 0.1,
        "n_seeds": 10,
        "n_steps": 200_000,
        "batch_size": 64,
        "lr": 1e-3,
        "eval_size": 10_000,
        "log_every": 1000,
    },
}


@register(
    name="single_location.fig8",
    model="single_location",
    paper=_PAPER.format(8),
    spec="docs/models/single_location.md §8.7",
    caption=(
        "One Transformer layer (register token, LayerNorm, softmax attention, residual ReLU MLP, read-out from "
        "the register row) trained by online SGD on single-location regression: (a) test excess risk, mean "
        "and 95% percentile band over seeds, with the closed-form null, optimal-linear and best erf-oracle "
        "levels; (b) |k_hat . k*| (top key-side singular vector of W_Q W_K^T), |v_hat . v*|/|v_hat| (v_hat = "
        "W_V u) and its MLP-corrected variant; (c) sv_1/sv_2 of W_Q W_K^T, descriptive: with W_Q = 0 at init and a "
        "fixed register the matrix is exactly rank one (ratio ~1e15), so the check is that its direction is k*. "
        "The quick preset uses d = 20 and lr = 1e-2 (10x the paper preset's) for 2 000 steps, 8 seeds."
    ),
    unrecoverable=(
        "register z_reg ~ N(0, I_d) drawn once per run, not trained",
        "LayerNorm without affine parameters (eps 1e-5) before attention and MLP; head width d; W_O = I",
        "ReLU MLP of width d with biases; init W_K, W_V, W_1, W_2 ~ N(0, 1/d), W_Q = 0, u ~ N(0, 1/d^2), zero biases",
        (
            "online SGD, batch 64, lr 1e-3, 200 000 steps, 10 repeats; d = 80, L = 10, gamma^2 = 1/2, eps = 0.1; "
            "test set 1e4 samples (docs/models/single_location.md §8.7 defaults, paper preset)"
        ),
    ),
    params=TRANSFORMER_PRESETS,
    plot=plot_fig8,
    checks=checks_fig8,
)
def data_fig8(cfg) -> xr.Dataset:
    """Train the docs/models/single_location.md §8.7 layer (H = 1) and attach the closed-form reference levels."""
    from empirical.models.single_location_transformer import TransformerLayer

    task = _task(cfg, K=1)
    k_star, v_star = _oracle(task, cfg)
    model = TransformerLayer(task, k_star=k_star, v_star=v_star, n_heads=1)
    ds = _run(cfg, model, lr=float(cfg.params["lr"]), batch_size=int(cfg.params["batch_size"]))
    for name, value in _reference_levels(task).items():
        ds[name] = ((), value)
    ds.attrs.update(d=task.d, L=task.L, K=1, n_heads=1)
    return ds


# ----------------------------------------------------------------------------------------------------------------
# Fig. 9 - multi-head erf predictor on multiple-location regression (docs/models/single_location.md §8.8)


def _pair_panel(ax, ds, prefix, title, ylabel):
    for j, name in enumerate(_pairs(ds, prefix)):
        h, i = name.split("_")[-2:]
        _band(
            ax,
            ds,
            name,
            label=f"head {int(h) + 1}, location {int(i) + 1}",
            color=_COLOURS[j % len(_COLOURS)],
            transform=np.abs,
        )
    ax.set(xlabel="step", ylabel=ylabel, ylim=(-0.05, 1.05), title=title)
    ax.legend(fontsize="small")


def _risk_panel(ax, ds, label):
    _band(ax, ds, "excess_risk", label=label, color=_COLOURS[0])
    _hline(ax, ds, ds["null_excess"], label="null predictor (K gamma^2)", color=TOL_BRIGHT["grey"])
    ax.set(xlabel="step", ylabel="excess risk (test MSE - eps^2)", yscale="log", title="(a) excess risk")
    ax.legend(fontsize="small")


def plot_fig9(ds: xr.Dataset):
    """(a) test excess risk; (b) |k_h . k_i*|; (c) |v_h . v_i*| (all four head-location pairs, no matching)."""
    fig, axes = new_figure(1, 3)
    _risk_panel(axes[0], ds, f"2 erf heads (d = {ds.attrs['d']})")
    _pair_panel(axes[1], ds, "kappa", "(b) keys", "|k_h . k_i*|")
    _pair_panel(axes[2], ds, "nu", "(c) values", "|v_h . v_i*|")
    return fig


def _max_pair(ds, prefix, i=-1):
    """Per seed, the largest |inner product| over the head-location pairs of ``prefix`` at time index i."""
    return np.max(np.abs(np.stack([ds[n].values[:, i] for n in _pairs(ds, prefix)])), axis=0)


def _partial_check(max_key):
    """'Only partial' key alignment as a per-seed count: at least half of the runs keep max_h,i |k_h . k_i*| < 0.9."""
    x = np.asarray(max_key, dtype=np.float64).ravel()
    below = int(np.sum(x < 0.9))
    return CheckResult(
        name="Sec. 8.8: alignment only partial (final max_h,i |k_h . k_i*| < 0.9 in most runs)",
        passed=bool(2 * below >= x.size),
        measured=f"{below} of {x.size} runs below 0.9",
        expected=f">= {math.ceil(x.size / 2)} of {x.size}",
        tolerance="per-seed count rule (reference: |k_h . k_i*| between 0 and 0.53 at step 200 000 in all "
        "8 of its runs; full alignment would put every run near 1)",
        n_seeds=x.size,
    )


def checks_fig9(ds: xr.Dataset) -> list[CheckResult]:
    """docs/models/single_location.md §8.8: low risk, partial alignment (above chance, below full), the reference risk
    ranges.
    """
    from figures._range_test import _range_check

    null = float(ds["null_excess"])
    d = int(ds.attrs["d"])
    best = np.maximum(_max_pair(ds, "kappa"), _max_pair(ds, "nu"))
    out = [
        mean_check(
            "Sec. 8.8: low risk (final test excess risk below the null predictor's K gamma^2)",
            ds["excess_risk"].values[:, -1],
            below=null,
            tolerance="t interval of the seed mean at level 1e-3 (reference: 0.29-0.34 at step 200 000, null 1)",
        ),
        above_chance_check(
            "Sec. 8.8: some alignment (final max over heads, locations, keys and values of |. . *|)",
            best,
            d,
            n_overlaps=2 * len(_pairs(ds, "kappa")),
        ),
        _partial_check(_max_pair(ds, "kappa")),
    ]
    if d == 80 and ds.attrs["L"] == 10 and float(ds.attrs["alpha"]) == 1e-3 and float(ds.attrs["rate"]) == 1e-4:
        for step, lo, hi in ((50_000, 0.34, 0.51), (200_000, 0.29, 0.34)):
            vals = _at_step(ds, "excess_risk", step)
            if vals is not None:
                out.append(
                    _range_check(
                        f"Sec. 8.8: test excess risk at step {step} has the law of the reference's 8 runs",
                        vals,
                        lo,
                        hi,
                        n_ref=8,
                    )
                )
    return out


@register(
    name="single_location.fig9",
    model="single_location",
    paper=_PAPER.format(9),
    spec="docs/models/single_location.md §8.8",
    caption=(
        "Multiple-location regression (K = 2 latent locations, Y = x_J1.v1* + x_J2.v2* + noise) learned by the "
        "two-head erf predictor sum_h sum_l erf(lambda x_l.k_h)(x_l.v_h) with online projected SGD: (a) test "
        "excess risk (mean and 95% percentile band over seeds) and the null level 2 gamma^2; (b), (c) the "
        "2 x 2 matrices |k_h . k_i*| and |v_h . v_i*| (mean and band, no matching of heads to locations). "
        "The quick preset is the reference recipe (d = 80, alpha = 1e-3) for 50 000 of its 200 000 steps with "
        "8 seeds; a larger alpha with fewer steps is not equivalent: the SGD noise grows with alpha and keeps "
        "the heads from aligning (risk 0.75, no key alignment at alpha = 5e-3)."
    ),
    unrecoverable=(
        (
            "oracle directions = QR of a d x 4 Gaussian matrix; d = 80, L = 10, gamma^2 = 1/2, eps = 0.1, batch 5, "
            "alpha = 1e-3, initial heads uniform on the sphere"
        ),
        (
            "200 000 steps, 30 repeats, lambda_n = 2/(1 + 1e-4 min(n, 100 000)); test set of 1 000 samples per repeat "
            "(docs/models/single_location.md §8.8 defaults, paper preset)"
        ),
    ),
    params={
        "tiny": {
            "d": 8,
            "L": 4,
            "noise": 0.1,
            "n_seeds": 2,
            "n_steps": 400,
            "batch_size": 5,
            "alpha": 1e-2,
            "lam0": 2.0,
            "rate": 1e-3,
            "freeze": 10_000,
            "eval_size": 300,
            "log_every": 100,
        },
        "quick": {
            "d": 80,
            "L": 10,
            "noise": 0.1,
            "n_seeds": 8,
            "n_steps": 50_000,
            "batch_size": 5,
            "alpha": 1e-3,
            "lam0": 2.0,
            "rate": 1e-4,
            "freeze": 100_000,
            "eval_size": 1000,
            "log_every": 1000,
        },
        "paper": {
            "d": 80,
            "L": 10,
            "noise": 0.1,
            "n_seeds": 30,
            "n_steps": 200_000,
            "batch_size": 5,
            "alpha": 1e-3,
            "lam0": 2.0,
            "rate": 1e-4,
            "freeze": 100_000,
            "eval_size": 1000,
            "log_every": 500,
        },
    },
    plot=plot_fig9,
    checks=checks_fig9,
)
def data_fig9(cfg) -> xr.Dataset:
    """Train two erf heads on the K = 2 task with the docs/models/single_location.md §8.8 schedule (frozen at step
    ``freeze``).
    """
    from empirical.models.single_location_transformer import MultiHeadErf
    from empirical.train import Schedule

    p = cfg.params
    task = _task(cfg, K=2)
    k_star, v_star = _oracle(task, cfg)
    lam0, rate = float(p["lam0"]), float(p["rate"])
    model = MultiHeadErf(
        task, k_star=k_star, v_star=v_star, n_heads=2, lam_floor=lam0 / (1.0 + rate * int(p["freeze"]))
    )
    ds = _run(
        cfg,
        model,
        lr=float(p["alpha"]),
        batch_size=int(p["batch_size"]),
        schedules={"lam": Schedule(value=lam0, kind="inverse_time", rate=rate)},
    )
    ds["null_excess"] = ((), task.K * task.gamma**2)
    ds.attrs.update(d=task.d, L=task.L, K=2, n_heads=2, alpha=float(p["alpha"]), lam0=lam0, rate=rate)
    return ds


# ----------------------------------------------------------------------------------------------------------------
# Fig. 10 - multi-head Transformer layer on multiple-location regression (docs/models/single_location.md §8.9)


def plot_fig10(ds: xr.Dataset):
    """(a) test excess risk; (b) |k_hat_h . k_i*|; (c) |v_hat_h . v_i*|/|v_hat_h|; (d) sv_1/sv_2 per head."""
    fig, axes = panel_grid(4, max_per_row=2, panel_size=(4.6, 3.4))
    _risk_panel(axes[0], ds, f"2-head Transformer (d = {ds.attrs['d']})")
    _pair_panel(axes[1], ds, "kappa", "(b) keys", "|k_hat_h . k_i*|")
    _pair_panel(axes[2], ds, "nu", "(c) values", "|v_hat_h . v_i*| / |v_hat_h|")
    ax = axes[3]
    for h, name in enumerate(sorted(n for n in ds.data_vars if n.startswith("sv_ratio_"))):
        _band(ax, ds, name, label=f"head {h + 1}", color=_COLOURS[h], transform=np.log10)
    ax.set(xlabel="step", ylabel="log10(sv_1 / sv_2)", title="(d) rank-one ratio")
    ax.legend(fontsize="small")
    return fig


def checks_fig10(ds: xr.Dataset) -> list[CheckResult]:
    """docs/models/single_location.md §8.9 findings: low excess risk; each head's rank-one attention direction aligns
    with an oracle key.

    Each W_Q^h W_K^h^T is exactly rank one here (W_Q = 0 at init, fixed register; model Notes): "nearly rank one" is
    not a check (panel (d) is descriptive); the alignment of that direction with the oracle keys is.
    """
    null = float(ds["null_excess"])
    d = int(ds.attrs["d"])
    best_key = _max_pair(ds, "kappa")
    return [
        mean_check(
            "Sec. 8.9: low excess risk (final test excess risk below half the null predictor's)",
            ds["excess_risk"].values[:, -1],
            below=0.5 * null,
            tolerance="t interval at level 1e-3; 'low' has no number in the reference, half the null level 2 "
            "gamma^2 is ours",
        ),
        above_chance_check(
            "Sec. 8.9: the heads' rank-one attention directions align with oracle keys (final "
            "max_h,i |k_hat_h . k_i*|)",
            best_key,
            d,
            n_overlaps=len(_pairs(ds, "kappa")),
        ),
    ]


@register(
    name="single_location.fig10",
    model="single_location",
    paper=_PAPER.format(10),
    spec="docs/models/single_location.md §8.9",
    caption=(
        "The Transformer layer of Fig. 8 with H = 2 heads (W_O^h trained) on the multiple-location task of "
        "Fig. 9: (a) test excess risk with the null level 2 gamma^2; (b) |k_hat_h . k_i*|; (c) "
        "|v_hat_h . v_i*|/|v_hat_h| (v_hat_h = W_V^h W_O^h u); (d) sv_1/sv_2 of each W_Q^h W_K^h^T (descriptive: "
        "exactly rank one by construction); mean and 95% percentile band over seeds. The quick preset uses "
        "d = 20 and lr = 1e-2 for 2 000 steps, 8 seeds."
    ),
    unrecoverable=(
        (
            "the Fig. 8 layer recipe (register, LayerNorm, head width d, ReLU MLP, initialisation, SGD batch 64, "
            "lr 1e-3, "
            "200 000 steps) with H = 2 and W_O^h ~ N(0, 1/d) trained"
        ),
        (
            "the Fig. 9 task (K = 2, QR oracle directions), d = 80, L = 10, eps = 0.1, 10 repeats "
            "(docs/models/single_location.md §8.9 defaults, "
            "paper preset)"
        ),
    ),
    params=TRANSFORMER_PRESETS,
    plot=plot_fig10,
    checks=checks_fig10,
)
def data_fig10(cfg) -> xr.Dataset:
    """Train the two-head docs/models/single_location.md §8.9 layer on the K = 2 task."""
    from empirical.models.single_location_transformer import TransformerLayer

    task = _task(cfg, K=2)
    k_star, v_star = _oracle(task, cfg)
    model = TransformerLayer(task, k_star=k_star, v_star=v_star, n_heads=2)
    ds = _run(cfg, model, lr=float(cfg.params["lr"]), batch_size=int(cfg.params["batch_size"]))
    ds["null_excess"] = ((), task.K * task.gamma**2)
    ds.attrs.update(d=task.d, L=task.L, K=2, n_heads=2)
    return ds
