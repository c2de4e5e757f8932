"""Shared helpers of the single_location figures: the reduced state, initial states, exact PGD runs, the
four-panel dynamics plot and the interval checks.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from closedform import single_location as sl
from dynamics.random import spawn_generators
from figures.presets import run_seed_sequence
from dynamics.saveat import SaveAt
from figures._style import (
    TOL_BRIGHT,
    band_over_seeds,
    panel_grid,
    plot_empirical_band,
    plot_theory,
)
from figures.registry import CheckResult


__all__ = ["STATE", "DYN_VARS", "DIST_FLOOR", "GAMMA"]

STATE = ("kappa", "nu", "theta", "eta", "rho")
DYN_VARS = STATE + ("excess_risk", "distance_to_manifold")
DIST_FLOOR = 1e-16  # float64 floor for dist_M on a log axis (docs/models/single_location.md §0.3)
GAMMA = math.sqrt(0.5)


# ----------------------------------------------------------------------------------------------------------------
# shared data and plotting helpers


def _initial_states(cfg, task, n, on="sphere"):
    """``n`` initial states; the stream is that of the model's run ``"init"`` (figure = the model name in the seed rule
    of :mod:`figures.presets`), so the figures that start from the same states, as in the authors' code, share it.
    """
    rng = spawn_generators(run_seed_sequence(cfg.seed, "single_location", "init"), ["init", "oracle"])["init"]
    return sl.sample_initial_state(task, n, rng, on=on)


def _pgd_dataset(task, states, *, alpha, n_steps, lam, log_every, manifold=False, progress=False):
    """Exact PGD (docs/models/single_location.md §6.3, §6.4) as a plain Dataset with dims (run, time), coordinate
    step.
    """
    traj = sl.map(
        task,
        states,
        alpha=alpha,
        n_steps=n_steps,
        lam=lam,
        saveat=SaveAt(every=log_every),
        manifold=manifold,
        progress=progress,
        warn_unconverged=False,
    )  # the paper's finite horizons
    return xr.Dataset(
        {v: (("run", "time"), np.asarray(traj[v].values, dtype=np.float64)) for v in DYN_VARS + ("lam",)},
        coords={"step": ("time", traj.step.values.astype(np.int64)), "run": np.arange(states.shape[0])},
    )


def _final(ds, var, absolute=False):
    x = ds[var].isel(time=-1).values
    return np.abs(x) if absolute else x


def _band(ax, x, samples, color, label, theory=True):
    """Across-run mean (solid: exact dynamics) with the 95% percentile band (docs/models/single_location.md §8)."""
    mean, lo, hi = band_over_seeds(samples, axis=0, method="percentile")
    if theory:
        plot_theory(ax, x, mean, label=label, color=color)
        ax.fill_between(x, lo, hi, color=color, alpha=0.2, linewidth=0)
    else:
        plot_empirical_band(ax, x, mean, lo, hi, label=label, color=color)


_RUN_MARKERS = ("o", "s", "^", "D", "v", "P")


def _path_panel(ax, ds, runs, prefix=""):
    """Panel (3): (kappa, nu) paths of selected runs coloured by step, axes [-1.1, 1.1]^2
    (docs/models/single_location.md §8).

    Each run's end point has its own marker, named in the legend (runs often end at the same fixed point, where
    text labels at the end points would overlap).
    """
    step = ds.step.values
    sc = None
    for j, r in enumerate(runs):
        if r >= ds.sizes["run"]:
            continue
        kap, nu = ds[prefix + "kappa"].values[r], ds[prefix + "nu"].values[r]
        ax.plot(kap, nu, color=TOL_BRIGHT["grey"], linewidth=0.6)
        sc = ax.scatter(kap, nu, c=step, s=5, cmap="viridis")
        ax.plot(
            kap[-1],
            nu[-1],
            linestyle="none",
            marker=_RUN_MARKERS[j % len(_RUN_MARKERS)],
            markersize=7,
            markerfacecolor="none",
            markeredgecolor="k",
            label=f"run {r + 1} (end)",
        )
    ax.set(xlim=(-1.1, 1.1), ylim=(-1.1, 1.1), xlabel=r"$\kappa$", ylabel=r"$\nu$", title="(kappa, nu) paths")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    if sc is not None:
        ax.figure.colorbar(sc, ax=ax, label="step")


def _tidy_step_axes(fig):
    """Step axes with large counts get a shared power-of-ten offset (no overlapping tick labels like 100000120000)."""
    for ax in fig.get_axes():
        if ax.get_xlabel() == "step" and ax.get_xscale() == "linear":
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4), useMathText=True)
    return fig


def _plot_dynamics(ds, runs, *, individual=False, title=""):
    fig, axes = panel_grid(4, max_per_row=2, panel_size=(5.0, 3.4))
    x = ds.step.values
    if individual:
        for r in range(ds.sizes["run"]):
            axes[0].plot(x, ds.excess_risk.values[r], color=TOL_BRIGHT["blue"], linewidth=0.6, alpha=0.6)
            axes[1].plot(x, np.abs(ds.kappa.values[r]), color=TOL_BRIGHT["blue"], linewidth=0.6, alpha=0.6)
            axes[1].plot(x, np.abs(ds.nu.values[r]), color=TOL_BRIGHT["red"], linewidth=0.6, alpha=0.6)
            axes[3].plot(
                x,
                np.maximum(ds.distance_to_manifold.values[r], DIST_FLOOR),
                color=TOL_BRIGHT["green"],
                linewidth=0.6,
                alpha=0.6,
            )
        axes[1].plot([], [], color=TOL_BRIGHT["blue"], label=r"$|\kappa|$")
        axes[1].plot([], [], color=TOL_BRIGHT["red"], label=r"$|\nu|$")
    else:
        _band(axes[0], x, ds.excess_risk.values, TOL_BRIGHT["blue"], "PGD (exact 5-scalar map)")
        _band(axes[1], x, np.abs(ds.kappa.values), TOL_BRIGHT["blue"], r"$|\kappa|$")
        _band(axes[1], x, np.abs(ds.nu.values), TOL_BRIGHT["red"], r"$|\nu|$")
        _band(axes[3], x, np.maximum(ds.distance_to_manifold.values, DIST_FLOOR), TOL_BRIGHT["green"], r"dist$_M$")
    top = 1.1 * float(np.nanmax(ds.excess_risk.values))  # the scale of the run (Fig. 4(a) ~6, Fig. 4(b) ~0.7)
    axes[0].set(xlabel="step", ylabel=r"excess risk $R - \varepsilon^2$", ylim=(-0.05 * top, top), title="excess risk")
    axes[1].set(xlabel="step", ylabel="alignment", ylim=(-0.05, 1.05), title="alignment with (k*, v*)")
    axes[1].legend(loc="best")  # runs that have not aligned yet sit in the lower right
    _path_panel(axes[2], ds, runs)
    # limits before the log scale: runs that stay on M sit on the floor, and a log scale over one value warns
    axes[3].set(xlabel="step", ylabel=r"dist$_M$ (floor $10^{-16}$)", ylim=(1e-17, 2), title="distance to M")
    axes[3].set_yscale("log")
    if title:
        fig.suptitle(title)
    return _tidy_step_axes(fig)


def _check(name, measured, lo, hi, tolerance):
    return CheckResult(
        name=name,
        passed=bool(lo <= measured <= hi),
        measured=float(measured),
        expected=f"[{lo:.6g}, {hi:.6g}]",
        tolerance=tolerance,
    )


def _at_step(ds, step):
    idx = np.nonzero(ds.step.values == step)[0]
    return None if idx.size == 0 else int(idx[0])


def _task(p, noise=0.0):
    return sl.SingleLocationTask(d=int(p["d"]), L=int(p["L"]), gamma=GAMMA, noise=noise)
