"""``single_location.fig3``: erf-oracle risk against the optimal linear risk, vs L and vs d (closed forms)."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from scipy.optimize import minimize_scalar

from closedform import single_location as sl
from figures._style import (
    TOL_BRIGHT,
    new_figure,
    plot_theory,
)
from figures.registry import CheckResult, register

from figures.single_location._common import _check, GAMMA

__all__ = ["plot_fig3", "checks_fig3", "data_fig3"]


# ----------------------------------------------------------------------------------------------------------------
# Fig. 3: erf-oracle vs linear risk (closed forms)


def _best_lam(task):
    """lambda minimising the erf-oracle risk (docs/models/single_location.md §5.2), by bounded search on log lambda."""
    res = minimize_scalar(
        lambda u: float(sl.oracle_risk(task, math.exp(u))),
        bounds=(math.log(1e-4), math.log(10)),
        method="bounded",
        options={"xatol": 1e-8},
    )
    return math.exp(res.x)


def plot_fig3(ds):
    """Draw ``single_location.fig3`` from its dataset ``ds`` (a matplotlib Figure)."""
    fig, (a, b) = new_figure(1, 2, figsize=(10.0, 3.6))
    L = ds.L.values
    plot_theory(
        a,
        L,
        ds.oracle_fixed.values,
        label=rf"erf oracle, $\lambda$ = {ds.attrs['lam_fixed']}",
        color=TOL_BRIGHT["blue"],
    )
    plot_theory(a, L, ds.oracle_best.values, label=r"erf oracle, best $\lambda$", color=TOL_BRIGHT["cyan"])
    plot_theory(a, L, ds.linear_L.values, label="optimal linear (Prop. 3)", color=TOL_BRIGHT["red"])
    a.axhline(ds.attrs["null_risk"], color=TOL_BRIGHT["grey"], linestyle=":", label=r"null $\gamma^2$")
    a.axhline(ds.attrs["bayes_bound"], color="k", linestyle=":", linewidth=0.8, label=r"$\varepsilon^2$ (Bayes bound)")
    a.set(xlabel="L (tokens)", ylabel="risk", xscale="log", title=f"vs L (d = {ds.attrs['d_fixed']})")
    a.legend(fontsize=7)
    d = ds.d.values
    plot_theory(b, d, ds.oracle_d.values, label=r"erf oracle, $\lambda = d^{-1/4}$", color=TOL_BRIGHT["blue"])
    plot_theory(b, d, ds.linear_d.values, label="optimal linear", color=TOL_BRIGHT["red"])
    b.axhline(ds.attrs["null_risk"], color=TOL_BRIGHT["grey"], linestyle=":", label=r"null $\gamma^2$")
    b.set(xlabel="d", ylabel="excess risk", xscale="log", yscale="log", title=f"vs d (L = {ds.attrs['L_fixed']})")
    b.legend(fontsize=7)
    return fig


def checks_fig3(ds):
    """The theorem checks of ``single_location.fig3`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
    out = []
    #  docs/models/single_location.md §5.3 numerical illustration (gamma^2 = 1/2, lambda = d^{-1/4}, L = 10), 3-4
    # significant digits given.
    ref = {1e2: 0.959, 1e3: 0.341, 1e4: 0.112, 1e5: 0.0360, 1e6: 0.0114}
    for dv, val in ref.items():
        hit = np.nonzero(np.isclose(ds.d.values, dv))[0]
        if hit.size:
            m = float(ds.oracle_d.values[hit[0]])
            out.append(
                _check(
                    f"Sec. 5.3: oracle excess risk at d = {dv:.0e}, lambda = d^-1/4",
                    m,
                    val * 0.995,
                    val * 1.005,
                    "0.5%: the spec quotes 3 significant digits",
                )
            )
    i10 = np.nonzero(ds.L.values == 10)[0]
    if (
        i10.size
    ):  # docs/models/single_location.md §10.3: linear risk (uniform J0, gamma^2 = 1/2, L = 10, eps = 0) = 0.4736842105
        out.append(
            _check(
                "Sec. 5.4/10.3: linear risk at L = 10",
                float(ds.linear_L.values[i10[0]]),
                0.4736842105 - 1e-9,
                0.4736842105 + 1e-9,
                "1e-9: closed form, 10 digits quoted",
            )
        )
    big = ds.L.values >= 2
    out.append(
        CheckResult(
            name="Sec. 5.4: linear risk increases towards the null risk gamma^2 as L grows",
            passed=bool(np.all(np.diff(ds.linear_L.values) > 0) and ds.linear_L.values[-1] < ds.attrs["null_risk"]),
            measured=float(ds.linear_L.values[-1]),
            expected=f"< {ds.attrs['null_risk']}",
            tolerance="strict monotonicity (closed form)",
        )
    )
    out.append(
        CheckResult(
            name="best-lambda erf oracle beats the linear predictor for L >= 2 (d = 400)",
            passed=bool(np.all(ds.oracle_best.values[big] < ds.linear_L.values[big])),
            measured=float(np.max(ds.oracle_best.values[big] - ds.linear_L.values[big])),
            expected="< 0",
            tolerance="strict (closed forms)",
        )
    )
    return out


@register(
    name="single_location.fig3",
    model="single_location",
    paper="Marion et al. (2025), Fig. 3",
    spec="docs/models/single_location.md §8.1, §5.2-§5.4",
    caption=(
        "Erf-oracle risk R_lambda(k*, v*) (docs/models/single_location.md §5.2) against the optimal linear risk "
        "(Prop. 3, docs/models/single_location.md §5.4), "
        "the null risk gamma^2 and the Bayes bound eps^2, gamma^2 = 1/2, eps = 0. Left: vs L at d = 400 "
        "with lambda = 0.1 or the best lambda per point. Right: excess risk vs d with lambda = d^(-1/4), "
        "L = 10 (Corollary 2: the oracle tends to eps^2, the linear predictor does not)."
    ),
    unrecoverable=(
        (
            "axis variables and parameters: curves vs L = 1..100 at d = 400, gamma^2 = 1/2, eps = 0, "
            "lambda = 0.1 or optimised; vs d = 1e1..1e6 with lambda = d^(-1/4), L = 10 "
            "(docs/models/single_location.md §8.1 proposal)"
        ),
    ),
    params={"tiny": {"n_L": 8, "n_d": 6}, "quick": {"n_L": 40, "n_d": 26}, "paper": {"n_L": 100, "n_d": 51}},
    plot=plot_fig3,
    checks=checks_fig3,
)
def data_fig3(cfg) -> xr.Dataset:
    """Closed forms of docs/models/single_location.md §5.2-§5.4 on the grids of the docs/models/single_location.md §8.1
    proposal.
    """
    p = cfg.params
    d0, lam0, L0 = 400, 0.1, 10
    Ls = np.unique(np.rint(np.geomspace(1, 100, int(p["n_L"]))).astype(int))
    Ls = np.unique(np.append(Ls, L0))
    oracle_fixed, oracle_best, lin_L = [], [], []
    for L in Ls:
        task = sl.SingleLocationTask(d=d0, L=L.item(), gamma=GAMMA)
        oracle_fixed.append(float(sl.oracle_risk(task, lam0)))
        oracle_best.append(float(sl.oracle_risk(task, _best_lam(task))))
        lin_L.append(sl.linear_risk(task))
    ds_ = np.unique(np.concatenate([np.geomspace(10, 1e6, int(p["n_d"])), [1e2, 1e3, 1e4, 1e5, 1e6]]))
    oracle_d, lin_d = [], []
    for dv in ds_:
        task = sl.SingleLocationTask(d=round(dv), L=L0, gamma=GAMMA)
        oracle_d.append(float(sl.oracle_risk(task, task.d**-0.25)))
        lin_d.append(sl.linear_risk(task))
    return xr.Dataset(
        {
            "oracle_fixed": ("L", oracle_fixed),
            "oracle_best": ("L", oracle_best),
            "linear_L": ("L", lin_L),
            "oracle_d": ("d", oracle_d),
            "linear_d": ("d", lin_d),
        },
        coords={"L": Ls, "d": np.rint(ds_)},
        attrs={"d_fixed": d0, "lam_fixed": lam0, "L_fixed": L0, "null_risk": GAMMA**2, "bayes_bound": 0.0},
    )
