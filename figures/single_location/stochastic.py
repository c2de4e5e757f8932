"""``single_location.fig5``: online stochastic PGD of the torch erf predictor against the deterministic five-scalar
PGD from the same initial scalars.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from closedform import single_location as sl
from dynamics.overlay import overlay
from dynamics.saveat import SaveAt
from figures._range_test import _range_check
from figures._style import (
    TOL_BRIGHT,
    new_figure,
    plot_reduced,
    plot_seed_band,
)
from figures.registry import Explanation, GapRow, compare_rows, register

from figures.single_location._common import _at_step, DIST_FLOOR, _path_panel, STATE, _task, _tidy_step_axes

__all__ = ["plot_fig5", "gaps_fig5", "checks_fig5", "data_fig5"]


# ----------------------------------------------------------------------------------------------------------------
# Fig. 5: stochastic PGD (torch) against the deterministic five-scalar PGD


_FIG5_VARS = STATE + ("distance_to_manifold", "excess_risk")


def plot_fig5(ds):
    """Draw ``single_location.fig5`` from its dataset ``ds`` (a matplotlib Figure)."""
    fig, axes = new_figure(3, 2, figsize=(10.0, 10.5))
    axes = np.ravel(axes)
    x = ds.step.values
    sgd, pgd = ds.sel(source="sgd"), ds.sel(source="pgd")
    d = ds.attrs["d"]
    colour = TOL_BRIGHT["blue"]
    plot_seed_band(
        axes[0], x, sgd.excess_risk.values, method="percentile", label=f"SGD (torch, d = {d}), exact risk", color=colour
    )
    axes[0].plot(
        x,
        ds.test_excess_risk.mean("run").values,
        color=TOL_BRIGHT["grey"],
        linewidth=0.8,
        label="SGD, test MSE - eps^2",
    )
    plot_reduced(
        axes[0], x, pgd.excess_risk.mean("run").values, label="deterministic PGD (mean)", color=TOL_BRIGHT["purple"]
    )
    lb, xl = int(ds.attrs["batch_lb"]), ds.lb_step.values
    orange = TOL_BRIGHT["yellow"]
    # The large-batch run covers the transient only: its own panels (e, f) on the transient's step range.
    early = x <= xl[-1]
    plot_seed_band(
        axes[4],
        x[early],
        sgd.excess_risk.values[:, early],
        method="percentile",
        label="SGD batch 5 (paper)",
        color=colour,
    )
    plot_reduced(
        axes[4],
        x[early],
        pgd.excess_risk.mean("run").values[early],
        label="deterministic PGD (mean)",
        color=TOL_BRIGHT["purple"],
    )
    axes[4].plot(
        xl,
        ds.lb_excess_risk.sel(source="sgd").mean("run").values,
        color=orange,
        linewidth=1.2,
        label=f"SGD batch {lb} (mean)",
    )
    axes[4].set(xlabel="step", ylabel="excess risk", ylim=(-0.1, 10), title="(e) transient: excess risk")
    axes[4].legend(fontsize=7)
    axes[0].set(xlabel="step", ylabel="excess risk", ylim=(-0.1, 10), title="excess risk")
    axes[0].legend(fontsize=7)
    for var, col, lab in (("kappa", TOL_BRIGHT["blue"], r"|\kappa|"), ("nu", TOL_BRIGHT["red"], r"|\nu|")):
        plot_seed_band(axes[1], x, np.abs(sgd[var].values), method="percentile", label=f"${lab}$ SGD", color=col)
        plot_reduced(axes[1], x, np.abs(pgd[var].values).mean(0), label=f"${lab}$ PGD", color=col)
    for var, style, lab, col in (
        ("kappa", "-", r"|\kappa|", TOL_BRIGHT["blue"]),
        ("nu", "--", r"|\nu|", TOL_BRIGHT["red"]),
    ):
        plot_reduced(axes[5], x[early], np.abs(pgd[var].values).mean(0)[early], label=f"${lab}$ PGD", color=col)
        axes[5].plot(
            xl,
            np.abs(ds["lb_" + var].sel(source="sgd").values).mean(0),
            color=orange,
            linestyle=style,
            linewidth=1.2,
            label=rf"$|\{var}|$ SGD batch {lb}",
        )
    axes[5].set(xlabel="step", ylabel="alignment", ylim=(-0.05, 1.05), title="(f) transient: alignment")
    axes[5].legend(fontsize=7, loc="lower right")
    axes[1].set(xlabel="step", ylabel="alignment", ylim=(-0.05, 1.05), title="alignment")
    axes[1].legend(fontsize=7, loc="lower right")
    _path_panel(axes[2], sgd, [0, 1])
    plot_seed_band(
        axes[3],
        x,
        np.maximum(sgd.distance_to_manifold.values, DIST_FLOOR),
        method="percentile",
        label="SGD",
        color=TOL_BRIGHT["green"],
    )
    plot_reduced(
        axes[3],
        x,
        np.maximum(pgd.distance_to_manifold.values, DIST_FLOOR).mean(0),
        label="PGD",
        color=TOL_BRIGHT["green"],
    )
    axes[3].set(xlabel="step", ylabel=r"dist$_M$", yscale="log", ylim=(1e-17, 2), title="distance to M")
    axes[3].legend(fontsize=7)
    return _tidy_step_axes(fig)


# docs/models/single_location.md §8.4 table (median, min, max over 12 runs) at the steps it quotes.
_FIG5_TABLE = {
    1000: {
        "kappa": (0.12, 0.00, 0.35),
        "nu": (0.29, 0.04, 0.47),
        "excess_risk": (6.92, 6.64, 8.77),
        "distance_to_manifold": (0.16, 0.05, 0.32),
    },
    50_000: {
        "kappa": (0.577, 0.536, 0.615),
        "nu": (0.965, 0.961, 0.973),
        "excess_risk": (1.093, 1.087, 1.168),
        "distance_to_manifold": (0.044, 0.008, 0.104),
    },
    100_000: {
        "kappa": (0.924, 0.909, 0.944),
        "nu": (0.994, 0.993, 0.996),
        "excess_risk": (0.379, 0.371, 0.403),
        "distance_to_manifold": (0.025, 0.013, 0.062),
    },
    200_000: {
        "kappa": (0.998, 0.997, 0.998),
        "nu": (0.9985, 0.998, 0.999),
        "excess_risk": (0.1838, 0.18, 0.19),
        "distance_to_manifold": (0.010, 0.004, 0.021),
    },
}


def _fig5_rows(ds, prefix, quantity_prefix, explanation=None):
    sgd, pgd = ds.sel(source="sgd"), ds.sel(source="pgd")
    step = ds[prefix + "step"].values
    n = step.size
    # not step 0: SGD and PGD start from the same state there, so a row at t = 0 cannot fail
    idx = sorted({max(1, n // 4), n // 2, (3 * n) // 4, n - 1})
    rows: list[GapRow] = []
    for var in ("kappa", "nu", "excess_risk"):
        f = np.abs if var in ("kappa", "nu") else (lambda x: x)
        name = f"|{var}|" if var in ("kappa", "nu") else var
        rows += compare_rows(
            f"{quantity_prefix}: {name}",
            step[idx],
            f(pgd[prefix + var].values[:, idx]).mean(0),
            f(sgd[prefix + var].values[:, idx]),
            d=int(ds.attrs["d"]),
            explanation=explanation,
        )
    return rows


# Where the batch-100 SGD noise was measured against a 4x larger batch (the quick and paper presets' protocol).
_LB_MEASURED_AT = {"d": 80, "L": 10, "alpha": 1e-3, "batch_lb": 100}


def _large_batch_noise(ds) -> Explanation | None:
    """The SGD-noise explanation of the large-batch rows, attached only in the setting it was measured in."""
    at = {"d": int(ds.attrs["d"]), "L": int(ds.attrs["L"]), "alpha": float(ds.attrs["alpha"])}
    if {**at, "batch_lb": int(ds.attrs["batch_lb"])} != _LB_MEASURED_AT:
        return None
    return Explanation(
        reason=(
            "SGD noise at batch 100, smaller than at batch 5 but not zero: the random tangent part of each "
            "renormalised step shrinks the alignments by ~alpha^2 |noise|^2 / 2 per step, and |noise|^2 falls as "
            "1/batch, so the SGD mean lags the noiseless PGD by a gap that falls as 1/batch"
        ),
        evidence=(
            "measured with this figure's protocol at batch 400 (--set batch_lb=400, the same seeds): excess-risk gap "
            "to PGD 0.0062 (SE 0.0014) at step 9 000 against 0.031 at batch 100, a ratio of 5.0 where 1/batch "
            "predicts 4 (0.0054 against 0.021 at step 10 000: 3.9), and all 12 batch-400 rows inside their "
            "level-1e-3 intervals (largest |t| 4.3 against 5.41)"
        ),
    )


def gaps_fig5(ds):
    """Rows: SGD at the large batch over the transient (the noiseless-PGD theory applies, up to a lag that falls as
    1/batch: explained where measured), and the paper's batch-5 run (explained by SGD noise, with the large-batch
    rows as evidence).
    """
    lb = int(ds.attrs["batch_lb"])
    rows = _fig5_rows(ds, "lb_", f"batch-{lb} SGD", explanation=_large_batch_noise(ds))
    noise = Explanation(
        reason=(
            "SGD noise at batch 5: the theory is the noiseless PGD. Each update takes a random tangent step of "
            "about alpha |g| ~ 0.08 in d = 80, whose renormalisation shrinks the alignments by ~alpha^2 |g|^2 / 2 "
            "per step, comparable to the population drift (alpha x O(1)); this term scales as alpha / batch"
        ),
        evidence=(
            f"single_location.fig5, rows 'batch-{lb} SGD' (the same protocol with a {lb // 5}x larger batch "
            "follows PGD over the transient up to a lag that falls as 1/batch, measured there)"
        ),
    )
    return rows + _fig5_rows(ds, "", "batch-5 SGD (paper)", explanation=noise)


def checks_fig5(ds):
    """The theorem checks of ``single_location.fig5`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
    out = []
    sgd = ds.sel(source="sgd")
    if (int(ds.attrs["d"]), int(ds.attrs["L"])) != (80, 10):
        return out
    for step, table in _FIG5_TABLE.items():
        i = _at_step(ds, step)
        if i is None:
            continue
        for var, (_med, lo, hi) in table.items():
            x = sgd[var].values[:, i]
            x = np.abs(x) if var in ("kappa", "nu") else x
            out.append(
                _range_check(
                    f"Sec. 8.4: batch-5 SGD {var} at step {step} has the law of the paper's 12 runs", x, lo, hi
                )
            )
    return out


@register(
    name="single_location.fig5",
    model="single_location",
    paper="Marion et al. (2025), Fig. 5",
    spec="docs/models/single_location.md §8.4, §6.4",
    caption=(
        "Online stochastic PGD of the torch erf predictor (docs/models/single_location.md §8.4): d = 80, L = 10, "
        "gamma^2 = 1/2, "
        "eps = 0.1, lambda_n = 2/(1 + 1e-4 n), alpha = 1e-3, batch 5, sphere initialisation, float64. "
        "Markers and bands: mean and 95% range over seeds; excess risk = closed-form risk of each "
        "iterate at lambda_n (grey: the noisy 1 000-sample test MSE). Dashed: the deterministic "
        "five-scalar PGD (docs/models/single_location.md §6.4) started from each seed's initial scalars, "
        "averaged over seeds. At batch "
        "5 the gradient noise is large (a tangent step of about alpha |g| ~ 0.08 per update in d = 80) and "
        "each renormalisation shrinks the alignments: the SGD mean lags the noiseless PGD (rows explained "
        "by SGD noise). The same protocol at a large batch (orange, first steps) follows PGD over the "
        "transient up to a lag that falls as 1/batch (measured at batch 400: 5x smaller than at 100); the "
        "checks compare the batch-5 runs with the paper's 12 runs "
        "(docs/models/single_location.md §8.4 table)."
    ),
    params={
        "tiny": {
            "d": 20,
            "L": 5,
            "n_runs": 3,
            "n_steps": 300,
            "log_every": 50,
            "eval_size": 100,
            "batch_lb": 20,
            "n_steps_lb": 200,
            "log_every_lb": 50,
            "alpha": 1e-3,
            "batch_size": 5,
        },
        "quick": {
            "d": 80,
            "L": 10,
            "n_runs": 8,
            "n_steps": 200_000,
            "log_every": 2000,
            "eval_size": 1000,
            "batch_lb": 100,
            "n_steps_lb": 12_000,
            "log_every_lb": 1000,
            "alpha": 1e-3,
            "batch_size": 5,
        },
        "paper": {
            "d": 80,
            "L": 10,
            "n_runs": 30,
            "n_steps": 200_000,
            "log_every": 500,
            "eval_size": 1000,
            "batch_lb": 100,
            "n_steps_lb": 12_000,
            "log_every_lb": 500,
            "alpha": 1e-3,
            "batch_size": 5,
        },
    },
    calibrated_at={"d": 80, "L": 10, "alpha": 1e-3, "batch_size": 5},  # the paper's table the checks compare with
    plot=plot_fig5,
    gaps=gaps_fig5,
    checks=checks_fig5,
)
def data_fig5(cfg) -> xr.Dataset:
    """Compute the dataset of ``single_location.fig5`` for the run configuration ``cfg``."""
    p = cfg.params
    task = _task(p, noise=0.1)
    from empirical.models import single_location as slm

    model = slm.build(task, rng=cfg.generators("data", ["oracle"])["oracle"])
    seeds = list(cfg.seeds("train", int(p["n_runs"])))
    alpha = float(p["alpha"])
    main = _fig5_run(
        cfg,
        task,
        model,
        seeds,
        int(p["batch_size"]),
        int(p["n_steps"]),
        int(p["log_every"]),
        int(p["eval_size"]),
        alpha,
    )
    lb = int(p["batch_lb"])
    large = _fig5_run(cfg, task, model, seeds, lb, int(p["n_steps_lb"]), int(p["log_every_lb"]), 0, alpha)
    lb_train_config = large.attrs["train_config_json"]
    large = large.drop_vars(["test_excess_risk"]).rename(
        {**{v: "lb_" + v for v in large.data_vars if v != "test_excess_risk"}, "time": "time_lb", "step": "lb_step"}
    )
    return xr.merge([main, large], combine_attrs="override").assign_attrs(
        {
            "batch_lb": lb,
            "n_steps": int(p["n_steps"]),
            "n_steps_lb": int(p["n_steps_lb"]),
            "lb_train_config_json": lb_train_config,
        }
    )


def _fig5_run(cfg, task, model, seeds, batch_size, n_steps, log_every, eval_size, alpha) -> xr.Dataset:
    """Torch SGD (batch ``batch_size``) of the Fig. 5 protocol and the exact PGD from each seed's initial scalars."""
    from empirical.device import torch_threads
    from empirical.models import single_location as slm
    from figures.experiments import train

    lam = sl.lam_schedule(2.0)
    config = slm.config(
        "fig5",
        seeds,
        n_steps=n_steps,
        lam=lam,
        log_every=log_every,
        eval_size=eval_size,
        batch_size=batch_size,
        alpha=alpha,
    )
    with torch_threads(1):  # CPU: tiny tensors, threads only contend; GPU: unaffected
        traj = train(model, config, device=cfg.device, progress=cfg.progress)
    scal = {v: np.asarray(traj[v].values, dtype=np.float64) for v in STATE}
    lams = np.asarray(
        lam(traj.step.values), dtype=np.float64
    )  # lambda_n of each logged row (docs/models/single_location.md §0.3)
    exact = sl.excess_risk(task, lams, *(scal[v] for v in STATE))

    def exact_pgd(state0, at):  # the five-scalar PGD from each seed's step-0 scalars, saved at the torch run's steps
        return sl.map(
            task,
            state0,
            alpha=alpha,
            n_steps=n_steps,
            lam=lam,
            saveat=SaveAt(steps=tuple(int(s) for s in at)),
            warn_unconverged=False,
        )  # finite horizon

    pgd, _ = overlay(exact_pgd, traj, state_variables=STATE)
    sgd_vals = {**scal, "distance_to_manifold": np.asarray(traj.distance_to_manifold.values), "excess_risk": exact}
    data = {v: (("source", "run", "time"), np.stack([sgd_vals[v], pgd[v].values])) for v in _FIG5_VARS}
    test = np.asarray(traj.excess_risk.values, dtype=np.float64) if eval_size else np.full(exact.shape, np.nan)
    data["test_excess_risk"] = (("run", "time"), test)
    data["lam"] = ("time", lams)
    return xr.Dataset(
        data,
        coords={"source": ["sgd", "pgd"], "run": seeds, "step": ("time", traj.step.values.astype(np.int64))},
        attrs={
            "d": task.d,
            "L": task.L,
            "alpha": alpha,
            "batch_size": batch_size,
            "noise": task.eps,
            "lam": "2/(1 + 1e-4 n)",
            "torch_device": str(traj.attrs.get("device", cfg.device)),
            "train_config_json": config.to_json(),
        },
    )
