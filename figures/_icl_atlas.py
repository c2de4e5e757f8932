"""The attractor atlas of the icl_regression reduced dynamics (a result of this toolkit, not a figure of the paper).

* ``icl_regression.atlas``: the stationary points of the two-head (omega, mu) flow of F/2
  (docs/models/icl_regression.md §5.1, §6.1) and where the flow from the paper's small random initialisation
  (docs/models/icl_regression.md §5.5) ends.

Imported by :mod:`figures._atlas`, so that the atlas figures of both models register together.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from closedform import icl_regression as icl
from dynamics import SaveAt
from figures._style import TOL_BRIGHT, new_figure
from figures.registry import CheckResult, register


# ----------------------------------------------------------------------------------------------------------------
# icl_regression: stationary points and end states of the two-head flow


ICL_CLASSES = ("solution_manifold", "single_head", "origin", "other")


def data_icl_atlas(cfg) -> xr.Dataset:
    p = cfg.params
    task = icl.ICLRegressionTask(d=int(p["d"]), L=int(p["L"]), sigma2=float(p["sigma2"]))
    H = 2
    pts = icl.fixed_points(task, H, n_starts=int(p["n_search"]), rng=cfg.seeds("search", 1)[0])
    # the single-head line omega_1 = omega_2 = 1/sqrt(d), mu_1 + mu_2 = mu*: Hessian of F/2 along the split s = mu_1/mu*
    o = icl.single_head_optimum(task)
    splits = np.linspace(-1.0, 2.0, int(p["n_split"]))
    hess = np.array([icl._hessian(task, np.array([o.omega, o.omega, s * o.mu, (1 - s) * o.mu]), H) for s in splits])
    ev = np.linalg.eigvalsh(hess)
    #  end states of GD on F/2 (lr, steps as in docs/models/icl_regression.md §5.5 / Fig. 7: flow time lr * n) from N(0,
    # scale^2) inits
    scales = np.asarray(p["init_scales"], dtype=np.float64)
    n = int(p["n_starts"])
    rng = cfg.generators("starts", ["starts"])["starts"]
    counts = np.zeros((scales.size, len(ICL_CLASSES)), dtype=np.int64)
    finals = np.zeros((scales.size, n, 2 * H))
    classes = np.empty((scales.size, n), dtype=object)
    for i, sc in enumerate(scales):
        om0 = rng.normal(0.0, sc, (n, H))  # omega drawn first (docs/models/icl_regression.md §5.5 recipe)
        mu0 = rng.normal(0.0, sc, (n, H))
        tr = icl.map(task, om0, mu0, lr=float(p["lr"]), n_steps=int(p["n_steps"]), saveat=SaveAt(final=True))
        Y = tr.states()[:, -1]
        finals[i] = Y
        names = icl.classify(task, Y[:, :H], Y[:, H:])
        classes[i] = names
        for j, c in enumerate(ICL_CLASSES):
            counts[i, j] = int(np.sum(names == c))
    frac = counts / n
    return xr.Dataset(
        {
            "sp_omega": (("point", "head"), np.array([q.omega for q in pts])),
            "sp_mu": (("point", "head"), np.array([q.mu for q in pts])),
            "sp_kind": ("point", [q.kind for q in pts]),
            "sp_stability": ("point", [q.stability for q in pts]),
            "sp_F": ("point", [q.F for q in pts]),
            "sp_hessian": (("point", "eig"), np.array([q.hessian_eigenvalues for q in pts])),
            "line_hessian": (("split", "eig"), ev),
            "count": (("init_scale", "end"), counts),
            "fraction": (("init_scale", "end"), frac),
            "se": (("init_scale", "end"), np.sqrt(frac * (1 - frac) / n)),
            "final": (("init_scale", "start", "coord"), finals),
            "end_class": (("init_scale", "start"), classes.astype(str)),
        },
        coords={
            "split": splits,
            "init_scale": scales,
            "end": list(ICL_CLASSES),
            "coord": ["omega_1", "omega_2", "mu_1", "mu_2"],
        },
        attrs={
            "d": task.d,
            "L": task.L,
            "sigma2": task.sigma2,
            "lr": float(p["lr"]),
            "n_steps": int(p["n_steps"]),
            "flow_time": float(p["lr"]) * int(p["n_steps"]),
            "n_starts": n,
            "single_head_omega": o.omega,
            "single_head_mu": o.mu,
            "single_head_F": o.F,
            "eta_star": icl.eta_star(task),
        },
    )


def plot_icl_atlas(ds):
    fig, (a, b, c) = new_figure(1, 3, figsize=(15.0, 4.4))
    cols = {
        "solution_manifold": TOL_BRIGHT["blue"],
        "single_head": TOL_BRIGHT["red"],
        "origin": "k",
        "other": TOL_BRIGHT["grey"],
    }
    i0 = 0
    i0 = int(
        np.argmin(np.abs(np.log(ds.init_scale.values / 0.01)))
    )  # the paper's scale (docs/models/icl_regression.md §5.5)
    Y = ds.final.values[i0]
    names = ds.end_class.values[i0].astype(str)
    for cl in ICL_CLASSES:
        m = names == cl
        if m.any():
            a.scatter(Y[m, 0], Y[m, 1], s=4, color=cols[cl], label=f"{cl} ({int(m.sum())})")
    om = ds.sp_omega.values
    # hollow stars: the end states that sit on a stationary point stay visible through them
    a.scatter(
        om[:, 0],
        om[:, 1],
        marker="*",
        s=220,
        facecolor="none",
        edgecolor="k",
        linewidth=0.8,
        zorder=3,
        label="stationary points",
    )
    a.set(
        xlabel=r"$\omega_1$",
        ylabel=r"$\omega_2$",
        aspect="equal",
        title=f"(a) end states, init N(0, {ds.init_scale.values[i0]:g}^2), t = {ds.attrs['flow_time']:g}",
    )
    a.legend(fontsize=6)
    for cl in ds.end.values:
        fr = ds.fraction.sel(end=cl).values
        if np.any(fr > 0):
            b.errorbar(
                ds.init_scale.values,
                fr,
                yerr=ds.se.sel(end=cl).values,
                marker="o",
                capsize=2,
                color=cols[str(cl)],
                label=str(cl),
            )
    b.set(
        xscale="log",
        xlabel="initialisation scale",
        ylabel="fraction of starts",
        ylim=(-0.02, 1.02),
        title=f"(b) where GD on F/2 ends ({ds.attrs['n_starts']} starts)",
    )
    b.legend(fontsize=7)
    for k in range(ds.sizes["eig"]):
        c.plot(ds.split.values, ds.line_hessian.values[:, k], color="k", linewidth=1.0)
    c.axhline(0.0, color=TOL_BRIGHT["red"], linewidth=0.6)
    c.axvspan(0.0, 1.0, color=TOL_BRIGHT["green"], alpha=0.15, label="mu_1, mu_2 of one sign")
    c.set(
        xlabel=r"split $\mu_1 / (\mu_1 + \mu_2)$",
        ylabel="Hessian eigenvalues of F/2",
        yscale="symlog",
        title=r"(c) the single-head line $\omega_1 = \omega_2 = 1/\sqrt{d}$",
    )
    c.legend(fontsize=7)
    return fig


def checks_icl_atlas(ds):
    out = []
    single = [i for i, k in enumerate(ds.sp_kind.values) if str(k) == "single_head"]
    if single:
        i = single[0]
        w = float(np.abs(ds.sp_omega.values[i, 0]))
        out.append(
            CheckResult(
                name="docs/models/icl_regression.md §11: single-head stationary point at omega = 1/sqrt(5) = "
                "0.447213595499958",
                passed=abs(w - 0.447213595499958) < 1e-9,
                measured=w,
                expected=0.447213595499958,
                tolerance="1e-9: root polished to |grad| < 1e-12, Hessian ~0.2",
            )
        )
        out.append(
            CheckResult(
                name="docs/models/icl_regression.md §11: F there = F_1,min = 0.372072800748053",
                passed=abs(float(ds.sp_F.values[i]) - 0.372072800748053) < 1e-12,
                measured=float(ds.sp_F.values[i]),
                expected=0.372072800748053,
                tolerance="1e-12: closed form at a root accurate to 1e-9 (F is stationary there)",
            )
        )
        ev = ds.sp_hessian.values[i]
        flat = int(np.sum(np.abs(ev) < 1e-6 * np.max(np.abs(ev))))
        out.append(
            CheckResult(
                name="Equal split: F/2 has a minimum with one flat direction (the mu_1 - mu_2 split)",
                passed=flat == 1 and ev[0] > -1e-8,
                measured=f"eigenvalues {np.round(ev, 5).tolist()}",
                expected="one zero, the others > 0",
                tolerance="zero = |eig| < 1e-6 max|eig| (FD)",
            )
        )
    return out


register(
    name="icl_regression.atlas",
    model="icl_regression",
    paper="(toolkit; not in the paper)",
    spec="docs/models/icl_regression.md §4.4, §5.1-§5.5, §6.1",
    plot=plot_icl_atlas,
    checks=checks_icl_atlas,
    caption=(
        "Stationary points of the two-head approximate loss F/2 (d = 5, L = 40, sigma^2 = 0.1) and where "
        "GD on F/2 (lr = 0.01) from random N(0, s^2) initialisations ends. The only stationary points are "
        "the origin (a saddle) and the single-head line omega_1 = omega_2 = +-1/sqrt(d), mu_1 + mu_2 = "
        "+-mu* (F = F_1,min = 0.372); on it the Hessian is positive semidefinite exactly when mu_1 and "
        "mu_2 have one sign (c), so the segment attracts. The other starts reach the valley S_gamma of "
        "the two-head solution (mu^T omega ~ eta*), which holds no stationary point: gamma keeps "
        "drifting to 0 (docs/models/icl_regression.md §6.3). Standard errors binomial. Scales above ~0.3 make GD "
        "at lr = 0.01 diverge (exp(d omega^2) grows), so they are left out."
    ),
    params={
        "tiny": {
            "d": 5,
            "L": 40,
            "sigma2": 0.1,
            "n_search": 300,
            "n_split": 31,
            "init_scales": [0.01],
            "n_starts": 200,
            "lr": 0.01,
            "n_steps": 5000,
        },
        "quick": {
            "d": 5,
            "L": 40,
            "sigma2": 0.1,
            "n_search": 2000,
            "n_split": 121,
            "init_scales": [0.001, 0.01, 0.1],
            "n_starts": 2000,
            "lr": 0.01,
            "n_steps": 20_000,
        },
        "paper": {
            "d": 5,
            "L": 40,
            "sigma2": 0.1,
            "n_search": 10_000,
            "n_split": 301,
            "init_scales": [0.001, 0.003, 0.01, 0.03, 0.1],
            "n_starts": 100_000,
            "lr": 0.01,
            "n_steps": 100_000,
        },
    },
)(data_icl_atlas)
