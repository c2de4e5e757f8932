"""Attractor atlases of the reduced dynamics: every fixed point named, followed in the temperature, and
mapped with its basin.

Registered figures (imported by :mod:`figures.single_location` and :mod:`figures.icl_regression`; the
icl_regression atlas lives in :mod:`figures._icl_atlas`, imported here so that the three register together,
before either model's other figures):

* ``single_location.continuation``: the fixed points of the five-scalar PGD map as branches over lambda
  (docs/models/single_location.md §7.1, §7.4; closedform.single_location.fixed_points): excess risk, spectral radius of
  the map's Jacobian at the paper's step size, theta of S and of the swap point; where S appears (it leaves the swap
  point at theta_S = 1) and where the swap point loses its stability to S.
* ``single_location.atlas``: basin fractions of the attractors from uniform sphere starts
  (docs/models/single_location.md §6.5) over a (lambda, d) grid at alpha = 4e-3, L = 10, with binomial standard errors
  (closedform.single_location.basins).
* ``icl_regression.atlas`` (:mod:`figures._icl_atlas`): the stationary points of the two-head (omega, mu) flow of
  F/2 (docs/models/icl_regression.md §5.1, §6.1) and where the flow from the paper's small random initialisation
  (docs/models/icl_regression.md §5.5) ends.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from scipy.optimize import brentq

from closedform import single_location as sl
from figures import _icl_atlas  # noqa: F401  (registers icl_regression.atlas with these two)
from figures._style import TOL_BRIGHT, new_figure, panel_grid
from figures.registry import CheckResult, register

ALPHA = 4e-3  # the paper's step size at constant lambda (docs/models/single_location.md §8.3, §8.6(b))
L_PAPER = 10
BRANCHES = ("oracle", "saddle", "anti_oracle", "spurious", "swap", "anti_swap")
COLOURS = {
    "oracle": TOL_BRIGHT["blue"],
    "saddle": TOL_BRIGHT["grey"],
    "anti_oracle": TOL_BRIGHT["red"],
    "spurious": TOL_BRIGHT["purple"],
    "swap": TOL_BRIGHT["green"],
    "anti_swap": TOL_BRIGHT["yellow"],
    "collinear": TOL_BRIGHT["cyan"],
    "mixed": "k",
    "unconverged": "0.6",
}


# ----------------------------------------------------------------------------------------------------------------
# single_location: continuation in lambda


def _theta_s(task, lam):
    return sl.spurious_point(task, lam).theta_S


def _lam_birth(task):
    """lambda at which theta_S = 1: S leaves the swap point (docs/models/single_location.md §7.4: S exists for lambda >=
    0.06279).
    """
    return brentq(lambda x: _theta_s(task, x) - 1.0, 1e-3, 10.0, xtol=1e-14)


def _lam_cross(task, lo):
    """lambda at which S and the oracle have the same risk (docs/models/single_location.md §7.4: 0.09072 at d = 400, L =
    10).
    """
    f = lambda x: sl.spurious_point(task, x).excess_risk - float(sl.excess_risk(task, x, 1.0, 1.0))  # noqa: E731
    return brentq(f, lo * (1 + 1e-9), 10.0, xtol=1e-14)


def data_continuation(cfg) -> xr.Dataset:
    p = cfg.params
    task = sl.SingleLocationTask(d=int(p["d"]), L=int(p["L"]))
    lams = np.geomspace(float(p["lam_min"]), float(p["lam_max"]), int(p["n_lam"]))
    shape = (lams.size, len(BRANCHES))
    risk = np.full(shape, np.nan)
    radius = np.full(shape, np.nan)
    theta = np.full(shape, np.nan)
    attracting = np.zeros(shape, dtype=bool)
    for i, lam in enumerate(lams):
        for fp in sl.fixed_points(task, float(lam), ALPHA, n_starts=0):
            j = BRANCHES.index(fp.kind)
            if fp.state[2] < 0 or fp.state[0] < 0:
                continue  # one member per orbit: the images have the same risk and spectrum
            risk[i, j] = fp.excess_risk
            radius[i, j] = max(abs(z) for z in fp.map_eigenvalues)
            theta[i, j] = fp.state[2]
            attracting[i, j] = fp.attracting
    # all fixed points (root search) at a few temperatures: how many, of which kinds
    lam_s = np.geomspace(float(p["lam_min"]), float(p["lam_max"]), int(p["n_lam_search"]))
    kinds = ("oracle", "saddle", "anti_oracle", "spurious", "swap", "anti_swap", "collinear", "mixed")
    counts = np.zeros((lam_s.size, len(kinds)), dtype=np.int64)
    n_attr = np.zeros(lam_s.size, dtype=np.int64)
    search_seed = cfg.seeds("search", 1)[0]  # the same starts at every lambda
    for i, lam in enumerate(lam_s):
        fps = sl.fixed_points(task, float(lam), ALPHA, n_starts=int(p["n_starts"]), rng=search_seed)
        for fp in fps:
            counts[i, kinds.index(fp.kind)] += 1
            n_attr[i] += bool(fp.attracting)
    birth = _lam_birth(task)
    return xr.Dataset(
        {
            "excess_risk": (("lam", "branch"), risk),
            "spectral_radius": (("lam", "branch"), radius),
            "theta": (("lam", "branch"), theta),
            "attracting": (("lam", "branch"), attracting),
            "n_points": (("lam_search", "kind"), counts),
            "n_attracting": ("lam_search", n_attr),
        },
        coords={"lam": lams, "branch": list(BRANCHES), "lam_search": lam_s, "kind": list(kinds)},
        attrs={"d": task.d, "L": task.L, "alpha": ALPHA, "lam_birth": birth, "lam_cross": _lam_cross(task, birth)},
    )


def plot_continuation(ds):
    fig, (a, b, c) = new_figure(1, 3, figsize=(15.0, 4.2))
    lam = ds.lam.values
    for br in ds.branch.values:
        col = COLOURS[str(br)]
        r = ds.excess_risk.sel(branch=br).values
        att = ds.attracting.sel(branch=br).values
        a.plot(
            lam, np.where(att, r, np.nan), color=col, linewidth=2.0, label=f"{br} (attracting)" if att.any() else None
        )
        a.plot(
            lam,
            np.where(~att, r, np.nan),
            color=col,
            linewidth=1.0,
            linestyle="--",
            label=f"{br} (unstable)" if (~att).any() else None,
        )
        b.plot(lam, ds.spectral_radius.sel(branch=br).values - 1.0, color=col, label=str(br))
    for ax in (a, b, c):
        ax.axvline(ds.attrs["lam_birth"], color="k", linewidth=0.6, linestyle=":")
        ax.set(xscale="log", xlabel=r"$\lambda$")
    a.axvline(ds.attrs["lam_cross"], color=TOL_BRIGHT["purple"], linewidth=0.6, linestyle=":")
    a.set(yscale="log", ylabel="excess risk", title=f"(a) fixed points vs lambda (d = {ds.attrs['d']})")
    a.legend(fontsize=6, ncol=2)
    b.axhline(0.0, color="k", linewidth=0.6)
    b.set_yscale("symlog", linthresh=1e-5)
    b.set(ylabel=r"spectral radius - 1 of the PGD map ($\alpha$ = 4e-3)", title="(b) stability (< 0: attracting)")
    b.legend(fontsize=6)
    c.plot(lam, ds.theta.sel(branch="spurious").values, color=COLOURS["spurious"], label=r"$\theta_S$ (S)")
    c.plot(lam, ds.theta.sel(branch="swap").values, color=COLOURS["swap"], label=r"$\theta$ (swap point)")
    c.set(ylabel=r"$\theta$", ylim=(0, 1.1), title="(c) S leaves the swap point at theta = 1")
    c.legend(fontsize=7)
    return fig


def checks_continuation(ds):
    out = []
    out.append(
        CheckResult(
            name="Sec. 7.4: S exists from lambda = 0.06279 (theta_S = 1 there)",
            passed=abs(ds.attrs["lam_birth"] - 0.06279) <= 5e-6,
            measured=ds.attrs["lam_birth"],
            expected=0.06279,
            tolerance="5 digits quoted by the reference",
        )
    )
    out.append(
        CheckResult(
            name="Sec. 7.4: S and the oracle have equal risk at lambda = 0.09072",
            passed=abs(ds.attrs["lam_cross"] - 0.09072) <= 5e-6,
            measured=ds.attrs["lam_cross"],
            expected=0.09072,
            tolerance="5 digits quoted by the reference",
        )
    )
    lam = ds.lam.values
    birth = ds.attrs["lam_birth"]
    away = np.abs(np.log(lam / birth)) > 0.02  # the exchange is at birth: its neighbourhood is marginal
    swap = ds.attracting.sel(branch="swap").values
    spur = ds.attracting.sel(branch="spurious").values
    exchange = bool(
        np.all(swap[away & (lam < birth)])
        and not np.any(swap[away & (lam > birth)])
        and np.all(spur[away & (lam > birth) & (lam < 0.25)])
    )
    out.append(
        CheckResult(
            name="Exchange of stability: the swap point attracts below lambda_birth, S above (to 0.25)",
            passed=exchange,
            measured=f"swap attracting at {int(swap.sum())} of {lam.size} lambdas",
            expected="lambda < lambda_birth exactly",
            tolerance="grid points at least 2% from birth",
        )
    )
    return out


register(
    name="single_location.continuation",
    model="single_location",
    paper="(toolkit; not in the paper)",
    spec="docs/models/single_location.md §7.1, §7.4",
    plot=plot_continuation,
    checks=checks_continuation,
    caption=(
        "Fixed points of the five-scalar PGD map as branches over the inverse temperature lambda (d = 400, "
        "L = 10, gamma^2 = 1/2, alpha = 4e-3). (a) Excess risk of each branch, thick where every eigenvalue "
        "of the map's Jacobian has modulus < 1; (b) the spectral radius; (c) theta of S and of the swap "
        "point (0, 0, 1, 1, 0). Dotted: lambda where S leaves the swap point (theta_S = 1) and, purple, "
        "where S and the oracle have equal risk. The collinear (k = +-v) and mixed critical points found "
        "by the root search are all unstable; their numbers are in the dataset (n_points)."
    ),
    params={
        "tiny": {
            "d": 400,
            "L": L_PAPER,
            "lam_min": 0.02,
            "lam_max": 1.0,
            "n_lam": 25,
            "n_lam_search": 2,
            "n_starts": 300,
        },
        "quick": {
            "d": 400,
            "L": L_PAPER,
            "lam_min": 0.02,
            "lam_max": 1.0,
            "n_lam": 120,
            "n_lam_search": 6,
            "n_starts": 1000,
        },
        "paper": {
            "d": 400,
            "L": L_PAPER,
            "lam_min": 0.02,
            "lam_max": 1.0,
            "n_lam": 400,
            "n_lam_search": 25,
            "n_starts": 4000,
        },
    },
)(data_continuation)


# ----------------------------------------------------------------------------------------------------------------
# single_location: basin atlas over (lambda, d)


ATLAS_KINDS = ("oracle", "swap", "spurious", "unconverged")


def paper_alpha(lam: float) -> float:
    """The paper's step size at constant lambda: 4e-3 up to lambda = 0.1 (Figs. 4(b), 7(b)), 1e-3 above (Fig. 7(a),
    lambda = 0.9; docs/models/single_location.md §8.3, §8.6). At alpha = 4e-3 the oracle itself is unstable for lambda
    >~ 0.15 (a multiplier
    below -1, see single_location.continuation).
    """
    return 4e-3 if lam <= 0.1 + 1e-12 else 1e-3


def data_atlas(cfg) -> xr.Dataset:
    p = cfg.params
    lams = np.asarray(p["lams"], dtype=np.float64)
    ds_ = np.asarray(p["ds"], dtype=np.int64)
    n = int(p["n_starts"])
    extra = set()
    frac = {}
    steps = np.zeros((lams.size, ds_.size))
    notes = []
    rng = cfg.generators("starts", ["starts"])["starts"]
    for i, lam in enumerate(lams):
        for j, d in enumerate(ds_):
            task = sl.SingleLocationTask(d=int(d), L=L_PAPER)
            # stop within 1e-3 of an attractor, inside its linear basin (Jacobian multipliers < 1; nonlinear terms
            # ~1e-6): the classification tolerance, so a stopped run is named
            b = sl.basins(
                task,
                float(lam),
                n,
                alpha=paper_alpha(float(lam)),
                n_steps=int(p["n_steps"]),
                rng=rng,
                stop_tol=1e-3,
                certify=True,
            )
            frac[(i, j)] = {k: c for k, c in zip(b.kinds, b.counts) if c}  # basins lists every kind; keep reached
            notes += [f"lambda = {lam:g}, d = {int(d)}: {note}" for note in b.notes]  # why runs stay unnamed
            extra |= {k for k, c in zip(b.kinds, b.counts) if c} - set(ATLAS_KINDS)  # kinds some start reached
            steps[i, j] = b.mean_steps
    kinds = list(ATLAS_KINDS) + sorted(extra)
    counts = np.zeros((lams.size, ds_.size, len(kinds)), dtype=np.int64)
    for (i, j), c in frac.items():
        for k, v in c.items():
            counts[i, j, kinds.index(k)] = v
    f = counts / n
    return xr.Dataset(
        {
            "count": (("lam", "d", "kind"), counts),
            "fraction": (("lam", "d", "kind"), f),
            "se": (("lam", "d", "kind"), np.sqrt(f * (1 - f) / n)),
            "mean_steps": (("lam", "d"), steps),
        },
        coords={"lam": lams, "d": ds_, "kind": kinds, "alpha": ("lam", [paper_alpha(float(x)) for x in lams])},
        attrs={"n_starts": n, "L": L_PAPER, "n_steps": int(p["n_steps"]), "unconverged_notes": "; ".join(notes)},
    )


def plot_atlas(ds):
    nd = ds.sizes["d"]
    fig, axes = panel_grid(nd, max_per_row=3, panel_size=(4.2, 3.8))
    for ax, d in zip(axes, ds.d.values):
        for k in ds.kind.values:
            fr = ds.fraction.sel(d=d, kind=k).values
            if not np.any(fr > 0):
                continue
            ax.errorbar(
                ds.lam.values,
                fr,
                yerr=ds.se.sel(d=d, kind=k).values,
                marker="o",
                ms=3,
                capsize=2,
                color=COLOURS.get(str(k), "k"),
                label=str(k),
            )
        ax.set(
            xscale="log",
            xlabel=r"$\lambda$",
            ylabel="basin fraction",
            ylim=(-0.02, 1.02),
            title=f"d = {int(d)}, L = {ds.attrs['L']}, {ds.attrs['n_starts']} starts",
        )
        ax.legend(fontsize=7)
    return fig


def checks_atlas(ds):
    out = []
    if 400 in ds.d.values:
        for lam in ds.lam.values:
            if abs(lam - 0.05) < 1e-12:
                named = 1.0 - float(ds.fraction.sel(lam=lam, d=400, kind="unconverged"))
                out.append(
                    CheckResult(
                        name="classify names >= 99.9 % of sphere end states (lambda = 0.05, d = 400)",
                        passed=named >= 0.999,
                        measured=named,
                        expected=">= 0.999",
                        tolerance="the issue's threshold (point estimate)",
                    )
                )
            if abs(lam - 0.1) < 1e-12:
                #  docs/models/single_location.md §7.4: pooled 49 % of 4 600 runs at S (lambda = 0.1, d = 400, 20 000
                # steps); two-sample binomial z-test at 5 SE (two-sided false alarm < 6e-7)
                f = float(ds.fraction.sel(lam=lam, d=400, kind="spurious"))
                n = ds.attrs["n_starts"]
                se = math.sqrt(0.49 * 0.51 / 4600 + f * (1 - f) / n)
                out.append(
                    CheckResult(
                        name="Sec. 7.4: fraction of sphere starts ending at S (lambda = 0.1, d = 400)",
                        passed=abs(f - 0.49) < 5 * se,
                        measured=f,
                        expected=0.49,
                        tolerance=f"5 SE of the difference ({se:.4f}): the reference 4 600 runs + ours",
                    )
                )
    return out


register(
    name="single_location.atlas",
    model="single_location",
    paper="(toolkit; not in the paper)",
    spec="docs/models/single_location.md §6.4-§6.5, §7.4",
    plot=plot_atlas,
    checks=checks_atlas,
    caption=(
        "Basin atlas of five-scalar PGD from uniform sphere starts (L = 10, gamma^2 = 1/2, constant "
        "lambda, the paper's step sizes: alpha = 4e-3 for lambda <= 0.1, 1e-3 above): fraction of starts "
        "whose end state is at each attractor (oracle (+-k*, +-v*), "
        "the swap point k = +-v*, v = +-k*, the spurious point S), with binomial standard errors. Each run "
        "stops within 1e-3 of an attracting fixed point, or once it is within 1e-3 of an invariant edge "
        "that leads to one (M with |nu| = 1 leads to the oracle, docs/models/single_location.md §7.1; k = +-v* "
        "leads to S or the "
        "swap point), or after n_steps updates ('unconverged' unless within 1e-3 of a fixed point). The "
        "edge rule also names the runs that sit on the kappa-plateau of large lambda sqrt(d) "
        "(docs/models/single_location.md §7.1). "
        "Brute-force d-dimensional PGD agrees within SE "
        "in three cells (tests/closedform/test_single_location_atlas.py)."
    ),
    params={
        "tiny": {"lams": [0.05, 0.1], "ds": [80], "n_starts": 300, "n_steps": 10_000},
        "quick": {"lams": [0.03, 0.05, 0.1], "ds": [80, 400], "n_starts": 10_000, "n_steps": 30_000},
        "paper": {
            "lams": [0.02, 0.03, 0.05, 0.07, 0.1, 0.2, 0.5, 1.0],
            "ds": [20, 80, 400, 2000],
            "n_starts": 1_000_000,
            "n_steps": 10_000,
        },
    },
)(data_atlas)
