"""The registered figure ``linear_attention.overlay``: full-matrix torch GD against the reduced map, with verdicts."""

import numpy as np
import xarray as xr

import dynamics
from figures import CheckResult, band_over_seeds, compare_rows, new_figure, plot_empirical_band, plot_reduced, register

from attndyn_linear_attention import model as m


def data(cfg):
    """Torch runs (seeds), and both reduced maps from each seed's step-0 state (dynamics.overlay)."""
    from attndyn_linear_attention.torch_model import train_run  # torch only when the figure is built

    P = cfg.params
    task = m.Task(d=P["d"], N=P["N"])
    seeds = range(1000 * cfg.seed, 1000 * cfg.seed + P["n_seeds"])
    learned = train_run(
        task, lr=P["lr"], n_steps=P["n_steps"], n_prompts=P["n_prompts"], seeds=seeds, device=cfg.device
    )
    runs = {
        full: dynamics.overlay(
            lambda s0, at: m.reduced_map(task, s0, P["lr"], at, full_matrix=full), learned, state_variables=("k", "v")
        )[0]
        for full in (True, False)
    }
    stars = [fp.state for fp in m.fixed_points(task) if fp.stability == "attracting"]
    return xr.Dataset(
        {
            f"{x}_{src}": (("seed", "step") if src == "torch" else ("step",), val)
            for x in ("k", "v")
            for src, val in (
                ("torch", learned[x].values),
                ("map", runs[True][x].values[0]),
                ("naive", runs[False][x].values[0]),
            )
        },
        coords={"step": learned.step.values},
        attrs={
            "d": task.d,
            "k_star": float(max(s[0] for s in stars)),
            "k_closed": m.theorem_predictions(task)["k_star"],
        },
    )


def plot(ds):
    """k and v: the torch band and the two reduced maps."""
    fig, axes = new_figure(1, 2)
    for ax, x in zip(axes, ("k", "v")):
        mean, lo, hi = band_over_seeds(ds[f"{x}_torch"].values, axis=0)
        plot_empirical_band(ax, ds.step, mean, lo, hi, label=f"torch, full {ds.attrs['d']}x{ds.attrs['d']} Gamma")
        plot_reduced(ax, ds.step, ds[f"{x}_map"], label="reduced map, k step lr/d")
        plot_reduced(ax, ds.step, ds[f"{x}_naive"], label="reduced map, k step lr (wrong)", color="0.6")
        ax.set(xlabel="step", ylabel=x)
    axes[0].legend()
    return fig


def gaps(ds):
    """Torch against the lr/d map at five save points (the calibrated gap test)."""
    idx = np.linspace(0, ds.sizes["step"] - 1, 6).astype(int)[1:]  # step 0: every seed starts at (k0, v0)
    return [
        row
        for x in ("k", "v")
        for row in compare_rows(
            x, ds.step.values[idx], ds[f"{x}_map"].values[idx], ds[f"{x}_torch"].values[:, idx], d=int(ds.attrs["d"])
        )
    ]


def checks(ds):
    """The trap map is rejected; fixed_points finds the closed-form minimum."""
    naive = [
        r for x in ("k", "v") for r in compare_rows(x, ds.step.values, ds[f"{x}_naive"].values, ds[f"{x}_torch"].values)
    ]
    return [
        CheckResult(
            name="the map with torch's lr on k (no 1/d) is rejected",
            passed=any(r.status == "fails" for r in naive),
            measured=sum(r.status == "fails" for r in naive),
            expected="> 0 failing rows",
            tolerance="the gap test of compare_rows at its default level",
        ),
        CheckResult(
            name="dynamics.fixed_points finds the closed-form minimum k* = sqrt((2 - lam) / 2c)",
            passed=abs(ds.attrs["k_star"] - ds.attrs["k_closed"]) < 1e-9,
            measured=ds.attrs["k_star"],
            expected=ds.attrs["k_closed"],
            tolerance="1e-9: roots polished to a residual below 1e-12",
        ),
    ]


register(
    name="linear_attention.overlay",
    model="linear_attention",
    paper="example package (no paper)",
    spec="examples/linear_attention",
    caption="Linear attention, Gamma = k I: torch GD of the full matrix against the reduced map.",
    params={
        "tiny": dict(d=8, N=16, lr=0.2, n_steps=300, n_prompts=1024, n_seeds=4),
        "quick": dict(d=8, N=16, lr=0.2, n_steps=600, n_prompts=4096, n_seeds=8),
        "paper": dict(d=20, N=40, lr=0.2, n_steps=2000, n_prompts=8192, n_seeds=16),
    },
    plot=plot,
    gaps=gaps,
    checks=checks,
)(data)
