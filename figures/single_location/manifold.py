"""``single_location.fig6``: the fixed points on M and the vector field of the reduced flow."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from matplotlib.colors import LogNorm

from closedform import single_location as sl
from figures._style import (
    TOL_BRIGHT,
    new_figure,
)
from figures.registry import register

from figures.single_location._common import _check, _task

__all__ = ["plot_fig6", "checks_fig6", "data_fig6"]


# ----------------------------------------------------------------------------------------------------------------
# Fig. 6: dynamics on M


def plot_fig6(ds):
    """Draw ``single_location.fig6`` from its dataset ``ds`` (a matplotlib Figure)."""
    fig, (a, b) = new_figure(1, 2, figsize=(10.0, 4.4))
    colours = {"minimum": TOL_BRIGHT["yellow"], "saddle": TOL_BRIGHT["blue"], "maximum": TOL_BRIGHT["red"]}
    kap, nu = ds.kappa.values, ds.nu.values
    K, N = np.meshgrid(kap, nu, indexing="xy")
    risk = ds.risk_M.values.T  # (nu, kappa)
    for ax in (a, b):
        ax.set(xlim=(-1.05, 1.05), ylim=(-1.05, 1.05), xlabel=r"$\kappa$", ylabel=r"$\nu$", aspect="equal")
    cs = a.contourf(K, N, risk, levels=20, cmap="viridis")
    fig.colorbar(cs, ax=a, label=r"$R_M - \varepsilon^2$")
    a.plot(kap, ds.nullcline.values, color="w", linestyle="--", linewidth=1.0, label=r"$\nu = $erf$(c\kappa/r)$")
    for i in range(ds.sizes["point"]):
        kind = str(ds.fp_kind.values[i])
        a.scatter(
            ds.fp_kappa.values[i],
            ds.fp_nu.values[i],
            s=70,
            color=colours[kind],
            edgecolor="k",
            zorder=3,
            label=kind if kind not in [str(x) for x in ds.fp_kind.values[:i]] else None,
        )
    a.set(title=r"(a) $R_M$ and the five fixed points")
    a.legend(fontsize=7, loc="center left", frameon=True, framealpha=0.8)  # clear of the fixed points
    U, V = ds.field_kappa.values.T, ds.field_nu.values.T
    mag = np.hypot(U, V)
    step = max(1, kap.size // 20)
    mesh = b.pcolormesh(
        K,
        N,
        np.maximum(mag, 1e-12),
        norm=LogNorm(vmin=max(mag.max() * 1e-6, 1e-12), vmax=mag.max()),
        cmap="magma",
        shading="auto",
    )
    fig.colorbar(mesh, ax=b, label="|field|")
    sl_ = (slice(None, None, step), slice(None, None, step))
    b.quiver(
        K[sl_],
        N[sl_],
        (U / np.maximum(mag, 1e-300))[sl_],
        (V / np.maximum(mag, 1e-300))[sl_],
        color="0.15",
        scale=30,
        width=0.003,
    )
    b.plot(kap, ds.nullcline.values, color=TOL_BRIGHT["cyan"], linestyle="--", linewidth=1.0)
    b.set(title=rf"(b) $-((1-\kappa^2)\partial_\kappa R_M, (1-\nu^2)\partial_\nu R_M)$, $\lambda$ = {ds.attrs['lam']}")
    return fig


def checks_fig6(ds):
    """The theorem checks of ``single_location.fig6`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
    out = []
    # The five fixed points are placed analytically (Sec. 7.1); their count, kinds and zero field are identities
    # checked in tests/closedform/test_single_location.py, not findings of this figure.
    out.append(
        _check(
            "Sec. 8.5: kappa-component of the field on the nullcline nu = erf(c kappa/r)",
            float(np.max(np.abs(ds.nullcline_field.values))),
            0.0,
            1e-10,
            "1e-10: float64 rounding",
        )
    )
    if (int(ds.attrs["d"]), float(ds.attrs["lam"])) == (400, 0.1):
        ev = np.sort(ds.saddle_map_eigenvalues.values)
        out.append(
            _check(
                "Sec. 7.2: PGD-map eigenvalue < 1 at the saddle (reference 0.986928, alpha = 4e-3)",
                ev[0],
                0.986928 - 1e-6,
                0.986928 + 1e-6,
                "6 digits quoted",
            )
        )
        out.append(
            _check(
                "Sec. 7.2: PGD-map eigenvalue > 1 at the saddle (reference 1.003086)",
                ev[1],
                1.003086 - 1e-6,
                1.003086 + 1e-6,
                "6 digits quoted",
            )
        )
    return out


@register(
    name="single_location.fig6",
    model="single_location",
    paper="Marion et al. (2025), Fig. 6",
    spec="docs/models/single_location.md §8.5, §7.1-§7.2",
    caption=(
        "Dynamics on the invariant manifold M in the (kappa, nu) square (docs/models/single_location.md §5.1, "
        "§7.1). (a) R_M with the "
        "five fixed points: minima (1, 1), (-1, -1) (yellow), saddle (0, 0) (blue), maxima (1, -1), "
        "(-1, 1) (red); dashed: the kappa-nullcline nu = erf(c kappa / r). (b) The vector field "
        "-((1 - kappa^2) dR_M/dkappa, (1 - nu^2) dR_M/dnu), arrows normalised, colour = magnitude."
    ),
    unrecoverable=("d = 400, L = 10, gamma^2 = 1/2, lambda = 0.1 (docs/models/single_location.md §8.5 default)",),
    params={
        "tiny": {"d": 400, "L": 10, "lam": 0.1, "n_grid": 41},
        "quick": {"d": 400, "L": 10, "lam": 0.1, "n_grid": 161},
        "paper": {"d": 400, "L": 10, "lam": 0.1, "n_grid": 401},
    },
    plot=plot_fig6,
    checks=checks_fig6,
)
def data_fig6(cfg) -> xr.Dataset:
    """Compute the dataset of ``single_location.fig6`` for the run configuration ``cfg``."""
    p = cfg.params
    task = _task(p)
    lam = float(p["lam"])
    g = np.linspace(-1.0, 1.0, int(p["n_grid"]))
    K, N = np.meshgrid(g, g, indexing="ij")  # (kappa, nu)
    field = sl.manifold_vector_field(task, lam, K, N)
    risk_M = sl.manifold_risk(task, lam, K, N) - task.eps**2
    gg = lam * task.gamma
    q, r = math.sqrt(1 + 2 * gg * gg), math.sqrt(1 + 4 * gg * gg)
    c = lam * task.s / q
    from scipy.special import erf

    nullcline = erf(c * g / r)
    null_field = sl.manifold_vector_field(task, lam, g, nullcline)[:, 0]
    fps = [f for f in sl.fixed_points(task, lam, alpha=4e-3, n_starts=0) if f.on_manifold]
    fp_field = np.array([np.max(np.abs(sl.manifold_vector_field(task, lam, f.kappa, f.nu))) for f in fps])
    saddle = next(f for f in fps if f.kind == "saddle")
    return xr.Dataset(
        {
            "field_kappa": (("kappa", "nu"), field[..., 0]),
            "field_nu": (("kappa", "nu"), field[..., 1]),
            "risk_M": (("kappa", "nu"), risk_M),
            "nullcline": ("kappa", nullcline),
            "nullcline_field": ("kappa", null_field),
            "fp_kappa": ("point", [f.kappa for f in fps]),
            "fp_nu": ("point", [f.nu for f in fps]),
            "fp_kind": ("point", [f.stability for f in fps]),
            "fp_risk": ("point", [f.risk for f in fps]),
            "fp_field": ("point", fp_field),
            "saddle_map_eigenvalues": ("eig", list(saddle.manifold_map_eigenvalues)),
        },
        coords={"kappa": g, "nu": g},
        attrs={"d": task.d, "L": task.L, "lam": lam, "alpha": 4e-3},
    )
