"""Figures of Study B (group-sparse classification; Zhang, Meng, Cao, ICLR 2025), docs/models/token_selection.md §B.7.

Registered figures (``python -m figures list --model group_sparse``):

* ``group_sparse.pretrain_n500_d4_D6`` and ``group_sparse.pretrain_n200_d2_D4``: the paper's synthetic pre-training
  runs (docs/models/token_selection.md §B.7): full-batch GD from zero on n raw samples (not mirrored), eta = 0.5, j* =
  2; the paper's four panels (training loss, cos(v_x, v*), the norm ratio ||v_pos|| / ||v_x||, the attention matrix S
  at the last step) and two more: the row-j* weight E[S_j*,j] against t and S of the same draws with their mirror
  images. Torch GD over several training samples (seeds), on the raw samples, on the mirrored samples and projected
  onto the invariant family, against the projected 8-scalar population dynamics (docs/models/token_selection.md §B.3,
  numba reduced map on a Monte Carlo proxy of the population) and the closed-form first two steps.
* ``group_sparse.overlay``: the suggested overlay of docs/models/token_selection.md §5 at (d, D) = (2, 4): population
  reduced dynamics vs finite-n merged GD (n = 200 and 500, raw samples) vs the factorised transformer W = W_K^T W_Q from
  i.i.d. N(0, 0.01^2) factors; panels D L T^{1/3}, E[S_{j*,j}], the 5% quantile of min_j S_{j*,j}, 1 - cos(v_x, v*), the
  norm ratio and the distance to the reduced family.
* ``group_sparse.downstream``: downstream transfer (docs/models/token_selection.md §B.4 runnable recipe,
  docs/models/token_selection.md §B.7): test error vs downstream sample size n when v is fine-tuned by online SGD (or
  fitted) with the pre-trained W frozen, for the theorem's W(T*) (population map) and the torch W of the paper's
  raw-sample pre-training, against W = 0 (no pre-training) and logistic regression on vec(X).

Not registered: the CIFAR-10 experiment of docs/models/token_selection.md §B.7 (data sets are not loadable offline; the
spec keeps it optional).

Seeds: training sample k of a build with seed ``s`` is docs/models/token_selection.md §G.B with
``numpy.random.default_rng(1000 s + k)`` and a v* drawn once per build (first stream of
``dynamics.random.spawn_generators(s, ...)``); the torch runs use the same integers as trainer seeds (factor
initialisation of the factorised model).
"""

from __future__ import annotations

import json
import math

import numpy as np
import scipy.stats
import torch
import xarray as xr

from closedform import group_sparse as cf
from dynamics.random import spawn_generators
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import group_sparse as gm
from figures._style import (
    TOL_BRIGHT,
    new_figure,
    panel_grid,
    plot_reduced,
    plot_seed_band,
    plot_theory,
)
from figures.experiments import train
from figures.registry import CheckResult, Explanation, GapRow, compare_rows, register

__all__ = [
    "LEARNED",
    "REDUCED",
    "UNRECOVERABLE",
    "N_PROXY",
    "plot_pretrain",
    "gaps_pretrain",
    "checks_pretrain",
    "data_pretrain_n500_d4_D6",
    "data_pretrain_n200_d2_D4",
    "SOURCES",
    "plot_overlay",
    "gaps_overlay",
    "checks_overlay",
    "data_overlay",
    "plot_downstream",
    "gaps_downstream",
    "PAIRED_LEVEL",
    "checks_downstream",
    "data_downstream",
]

ETA, SIGMA_X, JSTAR = (
    0.5,
    1.0,
    2,
)  # docs/models/token_selection.md §B.7: eta = 0.5 [exact], j* = 2 [exact], sigma_x = 1 [unknown; suggested]
LEARNED = (
    (
        "loss",
        "accuracy",
        "attn_jstar",
        "attn_jstar_q",
        "cos_vx_vstar",
        "norm_ratio",
        "v_pos_norm",
        "off",
        "w_cross_norm",
    )
    + cf.STATE_NAMES
    + cf.GAP_NAMES
)
REDUCED = ("loss", "loss_se", "accuracy", "attn_jstar", "attn_jstar_q") + cf.STATE_NAMES + cf.GAP_NAMES
UNRECOVERABLE = (
    "sigma_x = 1, v* a random unit vector (docs/models/token_selection.md §B.7 suggestions)",
    "norm ratio = ||v_pos|| / ||v_x|| [reconstructed]",
    "embedding H = [X; I_D] [reconstructed]",
)
N_PROXY = 8
"""Independent population proxies (docs/models/token_selection.md §G.B Monte Carlo samples) behind every reduced-map
curve: their spread is
the theory side's own standard error in the rows (``theory_se``)."""


def _task(d: int, D: int) -> cf.GroupSparseTask:
    return cf.GroupSparseTask(d=d, D=D, sigma_x=SIGMA_X, jstar=JSTAR, eta=ETA)


def _save_steps(n_steps: int, n_save: int) -> np.ndarray:
    """Steps 0, 1, 2 (closed forms of docs/models/token_selection.md §B.3) and a log grid up to n_steps."""
    grid = SaveAt(log=n_save).resolve_steps(n_steps)
    return np.unique(np.concatenate([[0, 1, 2], grid]))


def _v_star(gen: np.random.Generator, d: int) -> np.ndarray:
    v = gen.standard_normal(d)
    return v / np.linalg.norm(v)


def _seeds(cfg, n_seeds: int) -> tuple[int, ...]:
    return tuple(1000 * cfg.seed + k for k in range(n_seeds))


def _train_gd(task, samples, seeds, n_steps, steps, device, progress, **model_kw):
    """Torch full-batch GD (shared trainer) on fixed samples; returns the trajectory and the final parameters."""
    model = gm.GroupSparseAttention(task, data=samples, **model_kw)
    config = gm.config("gd", model, n_steps, seeds=seeds, saveat=SaveAt(steps=tuple(int(s) for s in steps)))
    return train(model, config, device=device, return_params=True, progress=progress)


def _learned_vars(traj, prefix: str = "") -> dict:
    return {f"{prefix}{name}": (("seed", "step"), traj[name].values) for name in LEARNED}


def _mirrored(samples) -> list:
    """Each training sample with the mirror images (-X, -y) of its draws appended (docs/models/token_selection.md §B.6:
    the x -> -x symmetry of the population restored)."""
    return [
        cf.GroupSparseSample(
            X=np.concatenate([s.X, -s.X]),
            y=np.concatenate([s.y, -s.y]),
            v_star=s.v_star,
            n_unique=s.n_unique,
            mirrored=True,
        )
        for s in samples
    ]


def _mean_attention(params, samples, device) -> np.ndarray:
    """Mean over seeds and draws of the attention matrix S (key, query) at the final weights."""
    X = torch.stack([torch.as_tensor(s.X, dtype=torch.float64, device=device) for s in samples])
    with torch.no_grad():
        _, S = gm.forward(params, X)
    return S.mean(dim=(0, 1)).cpu().numpy()


# ----------------------------------------------------------------------------------------------------------------------
# Pre-training runs (docs/models/token_selection.md §B.7)
# ----------------------------------------------------------------------------------------------------------------------


def _pretrain_data(cfg, d: int, D: int) -> xr.Dataset:
    p = cfg.params
    task = _task(d, D)
    gens = spawn_generators(cfg.seed, ["v_star", "population"])
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
    population map, and S of the mirrored run."""
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


def _row(quantity, time, theory, samples, *, theory_se=None, **kw) -> GapRow:
    """One row at ``time``: ``samples`` (seed,) against ``theory`` (:func:`figures.registry.compare_rows`); with
    ``theory_se`` the theory is the mean of :data:`N_PROXY` independent Monte Carlo proxies."""
    (row,) = compare_rows(
        quantity,
        [time],
        [theory],
        np.asarray(samples)[:, None],
        theory_se=None if theory_se is None else [theory_se],
        theory_n_seeds=None if theory_se is None else N_PROXY,
        **kw,
    )
    return row


def _reduced_proxies(task, n_steps, steps, n_pop, rng) -> dict:
    """The projected population map (docs/models/token_selection.md §B.3) on :data:`N_PROXY` independent population
    proxies of n_pop draws:
    ``{name: (N_PROXY, n_saved)}`` for the variables of ``REDUCED``."""
    runs = [
        cf.map(task, n_steps, n_samples=n_pop, rng=g, saveat=SaveAt(steps=tuple(int(s) for s in steps)), with_se=False)
        for g in rng.spawn(N_PROXY)
    ]
    return {name: np.stack([r[name].values[0] for r in runs]) for name in REDUCED}


def _reduced_vars(prox: dict) -> dict:
    """Mean over proxies (``reduced_<name>``) and its standard error (``reduced_<name>_pse``)."""
    out = {}
    for name, v in prox.items():
        out[f"reduced_{name}"] = (("step",), v.mean(axis=0))
        out[f"reduced_{name}_pse"] = (("step",), v.std(axis=0, ddof=1) / math.sqrt(v.shape[0]))
    return out


def _closed_rows(ds) -> list[GapRow]:
    """Torch GD at t = 1, 2 (on ``early_seed`` training samples) against the closed-form population steps of
    docs/models/token_selection.md §B.3."""
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
        "panel (e) and the rows and checks of this figure: the same draws with their mirror images (symmetry "
        "restored) and GD projected onto the invariant family recover the population's weight; measured at "
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
    where it applies."""
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


def _common_checks(ds, prefix: str = "", who: str = "torch GD") -> list[CheckResult]:
    D, T = ds.attrs["D"], int(ds.step.values[-1])
    out = []
    attn = ds[f"{prefix}attn_jstar"].values[:, -1]
    # The theorem's weight is the population's: the population map at the same t (not a threshold read off these runs).
    pop = float(ds["reduced_attn_jstar"].values[-1])
    n = int(ds.attrs["n"] if "n" in ds.attrs else ds.attrs["n_large"])
    slack = 1.5 / math.sqrt(n)
    out.append(
        CheckResult(
            name=(
                f"docs/models/token_selection.md §B.4 item 1 (mean form, {who}): E[S_j*,j] at t = {T} reaches "
                "the population "
                f"map's {pop:.3f}, minimum over seeds"
            ),
            n_seeds=int(attn.size),
            passed=bool(np.all(attn >= pop - slack)),
            measured=float(attn.min()),
            expected=f">= {pop:.3f} - {slack:.3f} for every training sample",
            tolerance=(
                f"1.5/sqrt(n) = {slack:.3f} at n = {n}: 3 SD of a mean of n draws of a weight in [0, 1] (SD <= 1/2), "
                "the sampling error of finite-sample GD against the population"
            ),
        )
    )
    q = ds[f"{prefix}attn_jstar_q"].values[:, -1]
    bound = 1.0 - math.exp(-D)
    out.append(
        CheckResult(
            name=(
                f"docs/models/token_selection.md §B.4 item 1 (quantile form, {who}): the 5% quantile of min_j S_j*,j "
                f"reaches 1 - exp(-D), median over seeds"
            ),
            n_seeds=int(q.size),
            passed=bool(np.median(q) >= bound),
            measured=float(np.median(q)),
            expected=f">= {bound:.4f}",
            tolerance="the theorem's bound 1 - exp(-D), no slack",
            explanation=Explanation(
                kind="disagrees",
                reason=(
                    "the exp(-Theta(D)) deficit of the theorem is asymptotic: at D <= 10 the quantile has a heavy "
                    "lower tail from the w_par a_i a_j term"
                ),
                evidence=(
                    "docs/models/token_selection.md §B.6 measures the 5% quantile at 0.38-0.87 for D <= 10, "
                    "T <= 1e4; this check's measured median"
                ),
            ),
        )
    )
    cos = ds[f"{prefix}cos_vx_vstar"].values[:, -1]
    out.append(
        CheckResult(
            name=f"Sec. B.4 item 2 ({who}): cos(v_x, v*) -> 1 (t = {T}, finite raw samples), minimum over seeds",
            n_seeds=int(cos.size),
            passed=bool(np.all(cos >= 0.99)),
            measured=float(cos.min()),
            expected=">= 0.99 for every sample",
            tolerance="population: exactly 1 (docs/models/token_selection.md §B.3); docs/models/token_selection.md "
            "§B.6 measures >= 0.99995 with n = 4000 mirrored draws; "
            "0.99 allows the O(1/sqrt(n)) finite-sample tilt at n = 200-500",
        )
    )
    return out


def _rate_check(ds) -> CheckResult:
    D, T = ds.attrs["D"], int(ds.step.values[-1])
    task = _task(ds.attrs["d"], D)
    val = float(cf.loss_rate_statistic(task, T, ds["reduced_loss"].values[-1]))
    return CheckResult(
        name=f"Sec. B.4 item 3: D L T^(1/3) = O(1) on the population reduced dynamics (T = {T} >= D^3 = {D**3})",
        passed=bool(0.5 <= val <= 3.0),
        measured=val,
        expected="in [0.5, 3] for T >= D^3 (docs/models/token_selection.md §B.6: 1.55 at (4, 6), T = 1e3; -> 1.0-1.2 "
        "at T = 1e4)",
        tolerance="factor ~3 around the measured constant: the theorem fixes only the order Theta(1)",
    )


def checks_pretrain(ds: xr.Dataset) -> list[CheckResult]:
    """Theorem B.4 items 1-3 and the attention heat map of docs/models/token_selection.md §B.7, with measured
    numbers."""
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
    mirrored_checks = [
        c for c in _common_checks(ds, prefix="mirrored_", who="same draws + mirror images") if "quantile" not in c.name
    ]
    # A raw sample can be captured by the symmetry-breaking solution (measured: 1 sample in 8 at seed 1, E[S_j*,j] =
    # 0.31, norm ratio 11); the explanation holds only where restoring the symmetry on the same draws passes the check.
    mirrored_passed = {("attention" if "S_j*,j" in c.name else "cos"): c.passed for c in mirrored_checks}
    for c in raw_checks:
        key = "attention" if "E[S_j*,j]" in c.name else "cos" if "cos(v_x" in c.name else None
        if key is not None and not c.passed and mirrored_passed.get(key, False):
            worst = float(ds["norm_ratio"].values[:, -1].max())
            c = c.explained(
                Explanation(
                    reason=_SYMMETRY_WHY.reason,
                    kind="disagrees",
                    evidence=(
                        "the same check on the same draws with their mirror images added (holds), and the norm "
                        f"ratio of the raw samples at the last step (max {worst:.3g}, population 0)"
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
    # v_pos = 0 on the mirrored samples holds by symmetry (an identity: tests/test_group_sparse.py), not a finding.
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
    "sample; hence also the norm ratio of panel (c) of ~1-1.5 at n = 500 instead of the population's 0. The same "
    "draws with their mirror images added (symmetry restored: v_pos = W12 = W21 = 0 exactly) and GD projected onto "
    "the invariant family recover the population's weight (panel e, rows, checks); raw samples of n = 500, 2 000, "
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
    preset)."""
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


# ----------------------------------------------------------------------------------------------------------------------
# Overlay of docs/models/token_selection.md §5: population reduced dynamics vs finite-n GD vs factorised W_K, W_Q
# ----------------------------------------------------------------------------------------------------------------------

SOURCES = (
    ("merged_n_small", "merged W, n = {n_small}"),
    ("merged_n_large", "merged W, n = {n_large}"),
    ("factorised", "W_K^T W_Q, s = 0.01, n = {n_large}"),
    ("merged_n_big", "merged W, n = {n_big}"),
)


def _dlt(ds, loss):
    return ds.attrs["D"] * np.asarray(loss) * np.cbrt(ds.step.values.astype(float))


def plot_overlay(ds: xr.Dataset):
    """Six panels: D L T^{1/3}, E[S_j*,j], its lower quantile, 1 - cos(v_x, v*), norm ratio, distance to the family."""
    fig, axes = new_figure(2, 3, figsize=(13.0, 6.4))
    pos = ds.step.values > 0
    t = ds.step.values[pos]
    colors = (TOL_BRIGHT["cyan"], TOL_BRIGHT["blue"], TOL_BRIGHT["red"], TOL_BRIGHT["purple"])
    panels = (
        ("D L T^(1/3)", lambda k: _dlt(ds, ds[f"{k}__loss"].values), _dlt(ds, ds["reduced_loss"].values), "linear"),
        ("E[S_j*,j]", lambda k: ds[f"{k}__attn_jstar"].values, ds["reduced_attn_jstar"].values, "linear"),
        (
            "5% quantile of min_j S_j*,j",
            lambda k: ds[f"{k}__attn_jstar_q"].values,
            ds["reduced_attn_jstar_q"].values,
            "linear",
        ),
        ("1 - cos(v_x, v*)", lambda k: np.maximum(1.0 - ds[f"{k}__cos_vx_vstar"].values, 1e-12), None, "log"),
        ("||v_pos|| / ||v_x||", lambda k: ds[f"{k}__norm_ratio"].values, None, "linear"),
        ("off (distance to the reduced family)", lambda k: ds[f"{k}__off"].values, None, "linear"),
    )
    for ax, (title, learned, reduced, yscale) in zip(axes.ravel(), panels):
        for (key, label), color in zip(SOURCES, colors):
            plot_seed_band(
                ax, t, learned(key)[:, pos], method="percentile", label=label.format(**ds.attrs), color=color
            )
        if reduced is not None:
            plot_reduced(ax, t, np.asarray(reduced)[pos], label="population, reduced map", color="k")
        elif yscale == "linear":
            plot_theory(
                ax,
                t,
                np.zeros_like(t, dtype=float),
                label="population: 0 exactly (docs/models/token_selection.md §B.3)",
                color="k",
            )
        else:
            title += " (population: 0)"
        ax.set(xscale="log", yscale=yscale, xlabel="GD step t", title=title)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"Study B overlay, d = {ds.attrs['d']}, D = {ds.attrs['D']}, eta = {ds.attrs['eta']}", fontsize=9)
    return fig


def gaps_overlay(ds: xr.Dataset) -> list[GapRow]:
    """Merged GD on n_big raw samples, where the population map applies, vs the map (mean of the proxies, with their
    SE) at the mid and last saved steps. The paper's n = 200 / 500 and the factorised runs are shown, not compared:
    finite-sample training overfits its sample (docs/models/token_selection.md §B.6), and no reduced dynamics describes
    a random factorised
    start."""
    rows = []
    n = ds.sizes["step"]
    lab = f"merged W, n = {ds.attrs['n_big']}"
    for i in sorted({n // 2, n - 1}):
        t = int(ds.step.values[i])
        for name in ("attn_jstar", "beta", "loss"):
            rows.append(
                _row(
                    f"{name}, {lab} vs the population map",
                    t,
                    ds[f"reduced_{name}"].values[i],
                    ds[f"merged_n_big__{name}"].values[:, i],
                    theory_se=float(ds[f"reduced_{name}_pse"].values[i]),
                    d=int(ds.attrs["d"]),
                )
            )
    return rows


def checks_overlay(ds: xr.Dataset) -> list[CheckResult]:
    """The factorised model leaves the saddle and matches the merged one (docs/models/token_selection.md §B.6); Theorem
    B.4 items 1-3."""
    T = int(ds.step.values[-1])
    f_loss = ds["factorised__loss"].values[:, -1]
    m_loss = ds["merged_n_large__loss"].values[:, -1]
    rel = float(np.max(np.abs(f_loss - m_loss) / m_loss))
    out = [
        CheckResult(
            name=(
                f"Sec. B.6: factorised W_K^T W_Q leaves the saddle at 0 and reaches the merged loss (t = {T}), "
                "max over seeds of the relative loss difference"
            ),
            n_seeds=int(f_loss.size),
            passed=rel <= 0.5,
            measured=rel,
            expected="<= 0.5",
            tolerance="Sec. B.6: 0.0186 vs 0.0191 at T = 3000; 50% allows the slower start (~100 steps) at short T",
        )
    ]
    out += _common_checks(ds, prefix="factorised__", who="factorised W_K^T W_Q")
    out.append(_rate_check(ds))
    return out


@register(
    name="group_sparse.overlay",
    model="group_sparse",
    paper="Zhang, Meng, Cao (2025): theory vs practice (docs/models/token_selection.md §5 suggested overlay)",
    spec="docs/models/token_selection.md §5, §B.3, §B.6, §B.7",
    caption=(
        "Study B overlay at (d, D) = (2, 4), eta = 0.5, j* = 2. Dashed: projected 8-scalar population "
        "dynamics (docs/models/token_selection.md §B.3). Markers and bands (mean and 95% range over training "
        "samples): torch "
        "full-batch GD on raw samples of size n with the merged W from zero, and the factorised "
        "transformer W = W_K^T W_Q with i.i.d. N(0, 0.01^2) factors and v = 0 (never W_K = W_Q = 0, a "
        "stationary point). 'off' is the relative distance of (v, W) to the invariant family (Sec. "
        "docs/models/token_selection.md §B.3.1). The rows compare the map with merged GD on n_big raw samples, "
        "where the population "
        "theory applies; the paper's n = 200 / 500 overfit their samples (docs/models/token_selection.md §B.6) "
        "and are shown only."
    ),
    unrecoverable=UNRECOVERABLE + ("factor init scale s = 0.01 (docs/models/token_selection.md §0 default)",),
    params={
        "tiny": {"n_small": 100, "n_large": 200, "n_big": 400, "n_steps": 60, "n_seeds": 2, "n_save": 8, "n_pop": 1000},
        "quick": {
            "n_small": 200,
            "n_large": 500,
            "n_big": 4000,
            "n_steps": 800,
            "n_seeds": 8,
            "n_save": 16,
            "n_pop": 4000,
        },
        "paper": {
            "n_small": 200,
            "n_large": 500,
            "n_big": 20000,
            "n_steps": 5000,
            "n_seeds": 10,
            "n_save": 31,
            "n_pop": 20000,
        },
    },
    plot=plot_overlay,
    gaps=gaps_overlay,
    checks=checks_overlay,
)
def data_overlay(cfg) -> xr.Dataset:
    """Reduced population map, merged GD at two sample sizes and factorised GD (docs/models/token_selection.md §5
    overlay)."""
    p = cfg.params
    d, D = 2, 4
    task = _task(d, D)
    gens = spawn_generators(cfg.seed, ["v_star", "population"])
    v_star = _v_star(gens["v_star"], d)
    seeds = _seeds(cfg, p["n_seeds"])
    steps = _save_steps(p["n_steps"], p["n_save"])
    data = {}
    with torch_threads(1):
        for key, n, kw in (
            ("merged_n_small", p["n_small"], {}),
            ("merged_n_large", p["n_large"], {}),
            ("factorised", p["n_large"], {"parametrisation": "factorised"}),
            ("merged_n_big", p["n_big"], {}),
        ):
            samples = gm.training_samples(task, n, seeds, v_star)
            traj, _ = _train_gd(task, samples, seeds, p["n_steps"], steps, cfg.device, cfg.progress, **kw)
            data.update(_learned_vars(traj, prefix=f"{key}__"))
    data.update(_reduced_vars(_reduced_proxies(task, p["n_steps"], steps, p["n_pop"], gens["population"])))
    return xr.Dataset(
        data,
        coords={"seed": list(seeds), "step": steps, "time": ("step", task.time_of_step(steps))},
        attrs={
            "d": d,
            "D": D,
            "n_small": p["n_small"],
            "n_large": p["n_large"],
            "n_big": p["n_big"],
            "eta": ETA,
            "sigma_x": SIGMA_X,
            "jstar": JSTAR,
            "n_pop": p["n_pop"],
            "v_star_json": json.dumps(v_star.tolist()),
            "time_unit": "GD step t (time = eta t)",
        },
    )


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
    are the inequalities of :func:`checks_downstream`."""
    return []


PAIRED_LEVEL = 1e-2
"""One-sided false-alarm probability of the paired downstream checks (Wilcoxon signed-rank over seeds)."""


def _paired_check(
    name: str, worse: np.ndarray, better: np.ndarray, *, expected: str = "> 0", explanation: Explanation | None = None
) -> CheckResult:
    """Check that ``worse`` exceeds ``better`` seed by seed (errors of two models on the same downstream samples, or
    a run's row-j* weight on the mirrored against the raw draws): the one-sided exact Wilcoxon signed-rank test of the
    paired differences ``worse - better`` rejects "no difference" at :data:`PAIRED_LEVEL`. Signed ranks, not Student
    t: the differences are heavy-tailed (one seed's baseline error, or one raw sample's symmetry breaking, several
    times the others'), which leaves a t interval without power at 8-12 seeds. ``measured`` is the mean paired
    difference; ``explanation`` is attached only if the check fails."""
    diff = np.asarray(worse, dtype=np.float64) - np.asarray(better, dtype=np.float64)
    n = int(diff.size)
    # all-zero differences (both errors 0 on every seed): no evidence either way
    p = 1.0 if not np.any(diff) else float(scipy.stats.wilcoxon(diff, alternative="greater").pvalue)
    check = CheckResult(
        name=name,
        passed=p < PAIRED_LEVEL,
        measured=float(diff.mean()),
        expected=expected,
        n_seeds=n,
        tolerance=(
            f"one-sided exact Wilcoxon signed-rank test over {n} paired seeds: p = {p:.2g} "
            f"< {PAIRED_LEVEL:g} ({int(np.sum(diff > 0))} of {n} differences > 0)"
        ),
    )
    return check.explained(explanation) if explanation is not None and not check.passed else check


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
    pre-trained on the paper's raw samples are explained (:data:`_RAW_W_WHY`)."""
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
    docs/models/token_selection.md §B.4 for each n."""
    p = cfg.params
    d, D, gamma = 4, 6, 0.1
    task = _task(d, D)
    gens = spawn_generators(cfg.seed, ["v_star", "population", "downstream"])
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
