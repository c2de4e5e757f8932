"""``random_walk.large_circle``: (K, N) = (20, 101), zero initialisation, p = 0.5 and p = 1."""

from __future__ import annotations


import numpy as np
import xarray as xr

from empirical.models import random_walk as rwm
from figures._style import (
    TOL_BRIGHT,
    new_figure,
    plot_reduced,
    plot_theory,
)
from figures.registry import CheckResult, GapRow, compare_rows, per_seed_check, register

from figures.random_walk._common import (
    _band,
    DEFAULTS_U,
    _perturbed_reduced,
    RB_SOURCE,
    RIDGE_EXPLANATION,
    ROUND_OFF,
    _save_steps,
    _seeds,
    _series,
    _task,
    _torch_and_reduced,
)

__all__ = ["plot_large_circle", "gaps_large_circle", "checks_large_circle", "data_large_circle"]


# ----------------------------------------------------------------------------------------------------------------------
# Larger circle (docs/models/token_selection.md §C.8 appendix)
# ----------------------------------------------------------------------------------------------------------------------


def plot_large_circle(ds: xr.Dataset):
    """Draw ``random_walk.large_circle`` from its dataset ``ds`` (a matplotlib Figure)."""
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
    :func:`checks_large_circle`.
    """
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
    """The theorem checks of ``random_walk.large_circle`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
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
        traj, _, _, reduced = _torch_and_reduced(task, cfg, seeds, walks, par["n_steps"], steps)
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
