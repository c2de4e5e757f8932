"""``group_sparse.pretrain_n500_d4_D6`` and ``group_sparse.pretrain_n200_d2_D4``: pre-training runs, torch GD
against the closed-form first steps and the reduced dynamics.
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from closedform import group_sparse as cf
from empirical.device import torch_threads
from empirical.models import group_sparse as gm
from figures._style import (
    TOL_BRIGHT,
    panel_grid,
    plot_reduced,
    plot_seed_band,
    plot_theory,
)
from figures.registry import CheckResult, Explanation, GapRow, register

from figures.group_sparse._common import (
    _attention_floor,
    _common_checks,
    ETA,
    JSTAR,
    _learned_vars,
    _mean_attention,
    _mirrored,
    _paired_check,
    _rate_check,
    _reduced_proxies,
    _reduced_vars,
    _row,
    _save_steps,
    _seeds,
    SIGMA_X,
    _task,
    _train_gd,
    UNRECOVERABLE,
    _v_star,
)

__all__ = ["plot_pretrain", "gaps_pretrain", "checks_pretrain", "data_pretrain_n500_d4_D6", "data_pretrain_n200_d2_D4"]


# ----------------------------------------------------------------------------------------------------------------------
# Pre-training runs (docs/models/token_selection.md §B.7)
# ----------------------------------------------------------------------------------------------------------------------


def _pretrain_data(cfg, d: int, D: int) -> xr.Dataset:
    p = cfg.params
    task = _task(d, D)
    gens = cfg.generators("data", ["v_star", "population"])
    v_star = _v_star(gens["v_star"], d)
    seeds = _seeds(cfg, p["n_seeds"])
    steps = _save_steps(p["n_steps"], p["n_save"])
    samples = gm.training_samples(task, p["n"], seeds, v_star)
    with torch_threads(1):
        traj, params = _train_gd(task, samples, seeds, p["n_steps"], steps, cfg.device, cfg.progress)
        attn = _mean_attention(params, samples, cfg.device)
        # The first two GD steps on more training samples (cheap): the closed-form rows of the report need an SE
        # over many samples, not over the few long runs.
        early_seeds = _seeds(cfg, p["n_early"])
        early, _ = _train_gd(
            task, gm.training_samples(task, p["n"], early_seeds, v_star), early_seeds, 2, (0, 1, 2), cfg.device, False
        )
        # The same draws with their mirror images (-X, -y): the population's x -> -x symmetry restored, hence v_pos = 0
        # and W12 = W21 = 0 exactly; and the raw samples with GD projected onto the invariant family after every step
        # (docs/models/token_selection.md §B.3). Both isolate the cause of the raw run's lower row-j* weight: the
        # symmetry-breaking directions (v_pos, W12, W21) that fit the finite sample.
        mir, mir_params = _train_gd(task, _mirrored(samples), seeds, p["n_steps"], steps, cfg.device, False)
        mir_attn = _mean_attention(mir_params, samples, cfg.device)
        proj, _ = _train_gd(task, samples, seeds, p["n_steps"], steps, cfg.device, False, project_steps=True)
    prox = _reduced_proxies(task, p["n_steps"], steps, p["n_pop"], gens["population"])
    closed = np.array([cf.step_closed_form(task, t) for t in (0, 1, 2)])
    data = _learned_vars(traj)
    data["mirrored_norm_ratio"] = (("seed",), mir["norm_ratio"].values[:, -1])
    data["mirrored_w_cross_norm"] = (("seed",), mir["w_cross_norm"].values[:, -1])
    data["mirrored_attn_jstar"] = (("seed", "step"), mir["attn_jstar"].values)
    data["mirrored_cos_vx_vstar"] = (("seed", "step"), mir["cos_vx_vstar"].values)
    data["mirrored_attn_jstar_q"] = (("seed", "step"), mir["attn_jstar_q"].values)
    data["projected_attn_jstar"] = (("seed", "step"), proj["attn_jstar"].values)
    data["mirrored_attn_matrix"] = (("key_group", "query_group"), mir_attn)
    data.update({f"early_{name}": (("early_seed", "closed_step"), early[name].values) for name in cf.STATE_NAMES})
    data.update(_reduced_vars(prox))
    data.update({f"closed_{name}": (("closed_step",), closed[:, i]) for i, name in enumerate(cf.STATE_NAMES)})
    data["attn_matrix"] = (("key_group", "query_group"), attn)
    return xr.Dataset(
        data,
        coords={
            "seed": list(seeds),
            "step": steps,
            "time": ("step", task.time_of_step(steps)),
            "early_seed": list(early_seeds),
            "closed_step": [0, 1, 2],
            "key_group": np.arange(1, D + 1),
            "query_group": np.arange(1, D + 1),
        },
        attrs={
            "d": d,
            "D": D,
            "n": p["n"],
            "eta": ETA,
            "sigma_x": SIGMA_X,
            "jstar": JSTAR,
            "n_pop": p["n_pop"],
            "v_star_json": json.dumps(v_star.tolist()),
            "time_unit": "GD step t (time = eta t)",
        },
    )


def _attention_heatmap(ax, fig, S, D, jstar, title):
    im = ax.imshow(S, vmin=0.0, vmax=1.0, cmap="viridis", origin="upper", extent=(0.5, D + 0.5, D + 0.5, 0.5))
    ax.set(xlabel="query j", ylabel="key i", title=title)
    ax.set_xticks(range(1, D + 1))
    ax.set_yticks(range(1, D + 1))
    ax.grid(False)
    fig.colorbar(im, ax=ax, fraction=0.046, label="attention S_ij (mean over seeds, draws)")


def plot_pretrain(ds: xr.Dataset):
    """Six panels: the four of docs/models/token_selection.md §B.7 (training loss, cos(v_x, v*), norm ratio, attention
    matrix S at the last step), the row-j* weight E[S_j*,j] against t for the raw, mirrored and projected runs and the
    population map, and S of the mirrored run.
    """
    fig, axes = panel_grid(6, max_per_row=3, panel_size=(4.6, 3.6))
    pos = ds.step.values > 0
    t = ds.step.values[pos]
    lab = f"torch GD, n = {ds.attrs['n']} (raw; {ds.sizes['seed']} samples)"
    ax = axes[0]
    plot_seed_band(ax, t, ds["loss"].values[:, pos], method="percentile", label=lab, color=TOL_BRIGHT["blue"])
    plot_reduced(ax, t, ds["reduced_loss"].values[pos], label="population, reduced 8-scalar map", color="k")
    ax.set(xscale="log", yscale="log", xlabel="GD step t", ylabel="training loss", title="(a) loss")
    ax.legend(fontsize=7)
    ax = axes[1]
    plot_seed_band(ax, t, ds["cos_vx_vstar"].values[:, pos], method="percentile", label=lab, color=TOL_BRIGHT["green"])
    plot_theory(ax, t, np.ones_like(t, dtype=float), label="population: 1 exactly (§B.3)", color="k")
    ax.set(xscale="log", xlabel="GD step t", ylabel=r"cos$(v_x, v^*)$", title="(b) cosine similarity")
    ax.legend(fontsize=7)
    ax = axes[2]
    plot_seed_band(ax, t, ds["norm_ratio"].values[:, pos], method="percentile", label=lab, color=TOL_BRIGHT["red"])
    plot_theory(
        ax, t, np.zeros_like(t, dtype=float), label="population and mirrored sample: 0 exactly (§B.3)", color="k"
    )
    ax.set(xscale="log", xlabel="GD step t", ylabel=r"$\|v_{pos}\| / \|v_x\|$", title="(c) norm ratio")
    ax.legend(fontsize=7)
    D, js, T = ds.attrs["D"], ds.attrs["jstar"], int(ds.step.values[-1])
    _attention_heatmap(axes[3], fig, ds["attn_matrix"].values, D, js, f"(d) S at t = {T}, raw samples (j* = {js})")
    ax = axes[4]
    for key, label, color in (
        ("attn_jstar", "raw samples (paper)", TOL_BRIGHT["blue"]),
        ("mirrored_attn_jstar", "same draws + mirror images", TOL_BRIGHT["purple"]),
        ("projected_attn_jstar", "raw samples, GD projected (§B.3)", TOL_BRIGHT["cyan"]),
    ):
        plot_seed_band(ax, t, ds[key].values[:, pos], method="percentile", label=label, color=color)
    plot_reduced(ax, t, ds["reduced_attn_jstar"].values[pos], label="population, reduced map", color="k")
    ax.axhline(1.0 / D, color="0.5", linewidth=0.8, linestyle=":")
    ax.set(xscale="log", ylim=(0.0, 1.0), xlabel="GD step t", ylabel="E[S_j*,j]", title="(e) row-j* weight")
    ax.legend(fontsize=7)
    _attention_heatmap(
        axes[5], fig, ds["mirrored_attn_matrix"].values, D, js, f"(f) S at t = {T}, draws + mirror images"
    )
    fig.suptitle(
        f"Group-sparse pre-training, n = {ds.attrs['n']}, d = {ds.attrs['d']}, D = {D}, eta = {ds.attrs['eta']}",
        fontsize=9,
    )
    return fig


def _closed_rows(ds) -> list[GapRow]:
    """Torch GD at t = 1, 2 (on ``early_seed`` training samples) against the closed-form population steps of
    docs/models/token_selection.md §B.3.
    """
    rows = []
    for t in (1, 2):
        for name in ("beta", "w_par", "m1", "m3"):
            if t == 1 and name != "beta":
                continue  # W^(1) = 0 exactly: both sides are 0, no SE to compare in
            # finite-n GD steps 1-2 are unbiased (step 1) / O(1/n)-biased (step 2) estimates of the closed form
            rows.append(
                _row(
                    f"{name} (closed form, docs/models/token_selection.md §B.3)",
                    t,
                    float(ds[f"closed_{name}"].values[t]),
                    ds[f"early_{name}"].values[:, t],
                )
            )
    return rows


_SYMMETRY_WHY = Explanation(
    reason=(
        "the paper's raw finite sample breaks the population's x -> -x symmetry at O(1/sqrt n); GD on its "
        "logistic loss grows the symmetry-breaking directions (a non-uniform v_pos with the cross blocks W12, "
        "W21: norm ratio ~1.5, ||W12|| + ||W21|| ~3 at n = 500), which fit the sample (training accuracy 1) "
        "and take weight off row j*; the run then plateaus (measured at n = 500: E[S_j*,j] = 0.70, 0.74, 0.75, "
        "0.76 at t = 600, 1 500, 3 000, 6 000), so neither more steps nor another step size closes the gap"
    ),
    evidence=(
        "panel (e) and the rows and checks of this figure: GD on the same draws projected onto the invariant family "
        "(every symmetry of the population imposed) recovers the population's weight; the same draws with their "
        "mirror images (x -> -x restored, the sample's other symmetry-breaking directions kept) recover part of it "
        "(at t = 1 500, 8 samples: raw 0.77, mirrored 0.88, projected 0.94, population map 0.94); measured at "
        "t = 600 with raw samples of n = 500, 2 000, 8 000: E[S_j*,j] = 0.70, 0.86, 0.89, norm ratio 1.47, "
        "0.47, 0.15 (population map: 0.89)"
    ),
    kind="disagrees",
)


def gaps_pretrain(ds: xr.Dataset) -> list[GapRow]:
    """Learned vs the closed-form population steps t = 1, 2 (docs/models/token_selection.md §B.3), where finite-n GD
    estimates the population, and the row-j* weight E[S_j*,j] at the last step of GD on the raw samples projected onto
    the invariant family after every step (the population's symmetries imposed, the sample's own fluctuations kept)
    against the population map. The paper's unprojected raw run is not a row: its seed spread (one sample in eight
    far below the rest) leaves a Student-t row without power; its deficit and cause are decided by the sign test of
    :func:`checks_pretrain` (reason: :data:`_SYMMETRY_WHY`).

    Other late-time quantities are not compared: at the paper's n = 200 / 500 (raw samples) training overfits its
    sample (docs/models/token_selection.md §B.6); ``group_sparse.overlay`` compares the map with GD at a sample size
    where it applies.
    """
    rows = _closed_rows(ds)
    T = int(ds.step.values[-1])
    theory, se = float(ds["reduced_attn_jstar"].values[-1]), float(ds["reduced_attn_jstar_pse"].values[-1])
    rows.append(
        _row(
            "E[S_j*,j], GD on the raw samples projected onto the invariant family (§B.3) vs the population map",
            T,
            theory,
            ds["projected_attn_jstar"].values[:, -1],
            theory_se=se,
        )
    )
    return rows


def checks_pretrain(ds: xr.Dataset) -> list[CheckResult]:
    """Theorem B.4 items 1-3 and the attention heat map of docs/models/token_selection.md §B.7, with measured
    numbers.
    """
    js = ds.attrs["jstar"] - 1
    S = ds["attn_matrix"].values
    others = np.delete(S, js, axis=0)
    margin = float(np.min(S[js] - others.max(axis=0)))
    out = [
        CheckResult(
            name="Sec. B.7 panel (d): row j* of S dominates every query column (variable selection)",
            passed=margin > 0,
            measured=margin,
            expected="> 0 (min over queries of S_j*,j - max_i!=j* S_ij)",
            tolerance="strict inequality; the paper's heat map shows row j* ~ 1",
        )
    ]
    raw_checks = _common_checks(ds)
    # The mirrored run is a diagnostic, not the paper's protocol: only its cosine is a claim (population: exactly 1).
    # Its row-j* weight is not compared with the population: the mirror images restore x -> -x only, and the sample's
    # other symmetry-breaking directions still take weight off row j* (the paired check below measures it).
    mirrored_checks = [
        c for c in _common_checks(ds, prefix="mirrored_", who="same draws + mirror images") if "cos(v_x" in c.name
    ]
    # A raw sample can be captured by the symmetry-breaking solution (measured: 1 sample in 8 at seed 1, E[S_j*,j] =
    # 0.56, norm ratio 2.9); the deficit is a measured disagreement only where GD on the same draws, projected onto the
    # invariant family after every step (the population's symmetries imposed), reaches the population on every sample.
    pop, slack, _ = _attention_floor(ds)
    projected = ds["projected_attn_jstar"].values[:, -1]
    projection_fixes_it = bool(np.all(projected >= pop - slack))
    for c in raw_checks:
        if "E[S_j*,j]" in c.name and not c.passed and projection_fixes_it:
            worst = float(ds["norm_ratio"].values[:, -1].max())
            c = c.explained(
                Explanation(
                    reason=_SYMMETRY_WHY.reason,
                    kind="disagrees",
                    evidence=(
                        f"the same draws with GD projected onto the invariant family reach the population on every "
                        f"sample (min {projected.min():.3g} >= {pop - slack:.3g}); the norm ratio of the raw samples "
                        f"at the last step (max {worst:.3g}, population 0); the paired checks below"
                    ),
                )
            )
        out.append(c)
    out += mirrored_checks
    acc = ds["accuracy"].values[:, -1]
    out.append(
        CheckResult(
            name="Training accuracy -> 1 (docs/models/token_selection.md §B.6: 0.99-0.999), minimum over seeds",
            passed=bool(np.all(acc >= 0.95)),
            n_seeds=int(acc.size),
            measured=float(acc.min()),
            expected=">= 0.95",
            tolerance="0.95: a few misclassified draws of n allowed before convergence",
        )
    )
    # v_pos = 0 on the mirrored samples holds by symmetry (an identity: tests/closedform/test_group_sparse.py), not
    # a finding.
    raw, mirrored = ds["attn_jstar"].values[:, -1], ds["mirrored_attn_jstar"].values[:, -1]
    out.append(
        _paired_check(
            (
                f"the raw samples' row-j* weight is below the population's because they break the x -> -x symmetry: "
                f"E[S_j*,j] at t = {int(ds.step.values[-1])} is higher on the same draws with their mirror "
                "images added (symmetry restored) than on the raw draws; mean paired difference (mirrored - raw)"
            ),
            mirrored,
            raw,
            expected="> 0 (the symmetry-breaking directions take weight off row j*)",
        )
    )
    out.append(
        _paired_check(
            (
                "the mirror images remove only part of the deficit: E[S_j*,j] at t = "
                f"{int(ds.step.values[-1])} is higher with GD on the raw draws projected onto the invariant family "
                "(every symmetry of the population imposed) than on the same draws with their mirror images added "
                "(x -> -x only); mean paired difference (projected - mirrored)"
            ),
            ds["projected_attn_jstar"].values[:, -1],
            mirrored,
            expected="> 0 (the sample's other symmetry-breaking directions also take weight off row j*)",
        )
    )
    if int(ds.step.values[-1]) >= ds.attrs["D"] ** 3:
        out.append(_rate_check(ds))
    return out


_PRETRAIN_CAPTION = (
    "Paper docs/models/token_selection.md §B.7 synthetic pre-training: full-batch GD from v = 0, W = 0 on n raw (not "
    "mirrored) samples, eta = 0.5, j* = 2. Markers and bands: torch GD through the shared trainer, mean and 95% range "
    "over training samples; dashed: the projected 8-scalar population dynamics of docs/models/token_selection.md §B.3 "
    "(numba reduced map, mean over independent Monte Carlo proxies of the population). Time axis: GD step t. Row j* "
    "of S dominates every query column (panels d, f; the paper's claim), but on the paper's raw samples its weight "
    "stays below the population's (panel e). Cause, measured: a finite sample breaks the population's x -> -x "
    "symmetry, and GD grows the symmetry-breaking directions (v_pos with the cross blocks W12, W21) that fit the "
    "sample; hence also the norm ratio of panel (c) of ~0.4-3 at n = 500 instead of the population's 0. GD on the "
    "same draws projected onto the invariant family (every symmetry of the population imposed) recovers the "
    "population's weight (panel e, the last row); the draws with their mirror images added (x -> -x restored: "
    "v_pos = W12 = W21 = 0 exactly) recover part of it, the sample's other symmetry-breaking directions the rest "
    "(at t = 1 500 and n = 500, mean of 8 samples: raw 0.77, mirrored 0.88, projected 0.94, population 0.94; the "
    "paired checks); raw samples of n = 500, 2 000, "
    "8 000 give E[S_j*,j] = 0.70, 0.86, 0.89 and norm ratios 1.47, 0.47, 0.15 at t = 600 (4 samples each, measured; "
    "population map 0.89). "
    "Longer runs do not help: at n = 500 the raw run plateaus once the sample is separated (0.70, 0.74, 0.75, 0.76 at "
    "t = 600, 1 500, 3 000, 6 000; training accuracy 1 from t ~ 1 500). The population value itself is below 1 at "
    "D = 6 (0.96 at t = 1e4, docs/models/token_selection.md §B.6): the 1 - exp(-Theta(D)) of the theorem is "
    "asymptotic in D. Steps 1-2 are compared with the closed-form population steps (rows)."
)


def _pretrain_params(n, n_quick_steps, n_paper_steps):
    return {
        "tiny": {"n": min(n, 200), "n_steps": 60, "n_seeds": 2, "n_early": 6, "n_save": 8, "n_pop": 1000},
        "quick": {"n": n, "n_steps": n_quick_steps, "n_seeds": 8, "n_early": 30, "n_save": 16, "n_pop": 3000},
        "paper": {"n": n, "n_steps": n_paper_steps, "n_seeds": 10, "n_early": 100, "n_save": 31, "n_pop": 20000},
    }


@register(
    name="group_sparse.pretrain_n500_d4_D6",
    model="group_sparse",
    paper="Zhang, Meng, Cao (2025), synthetic pre-training experiment, (n, d, D) = (500, 4, 6)",
    spec="docs/models/token_selection.md §B.7",
    caption=_PRETRAIN_CAPTION,
    unrecoverable=UNRECOVERABLE
    + (("iterations: 3000 (paper preset; docs/models/token_selection.md §B.7 suggests 2000-5000)"),),
    params=_pretrain_params(500, 1500, 3000),
    plot=plot_pretrain,
    gaps=gaps_pretrain,
    checks=checks_pretrain,
)
def data_pretrain_n500_d4_D6(cfg) -> xr.Dataset:
    """Pre-training run (n, d, D) = (500, 4, 6) of docs/models/token_selection.md §B.7 (``n`` shrinks in the tiny
    preset).
    """
    return _pretrain_data(cfg, 4, 6)


@register(
    name="group_sparse.pretrain_n200_d2_D4",
    model="group_sparse",
    paper="Zhang, Meng, Cao (2025), synthetic pre-training experiment, (n, d, D) = (200, 2, 4)",
    spec="docs/models/token_selection.md §B.7",
    caption=_PRETRAIN_CAPTION,
    unrecoverable=UNRECOVERABLE
    + (("iterations: 3000 (paper preset; docs/models/token_selection.md §B.7 suggests 2000-5000)"),),
    params=_pretrain_params(200, 1000, 3000),
    plot=plot_pretrain,
    gaps=gaps_pretrain,
    checks=checks_pretrain,
)
def data_pretrain_n200_d2_D4(cfg) -> xr.Dataset:
    """Pre-training run (n, d, D) = (200, 2, 4) of docs/models/token_selection.md §B.7."""
    return _pretrain_data(cfg, 2, 4)
