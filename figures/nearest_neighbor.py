"""Figures of Study A (one-layer transformer learns 1-NN in context; Li et al., NeurIPS 2024),
docs/models/token_selection.md §A.9 and the suggested overlay of docs/models/token_selection.md §5.

Registered figures (``python -m figures list --model nearest_neighbor``):

* ``nearest_neighbor.fig1``: illustration (Fig. 1): N labelled points on S^2 (d = 3) and the sphere coloured by the
  1-NN rule, beside the prediction f_W of the attention layer at the (xi1, xi2) reached by reduced GD
  (docs/models/token_selection.md §A.5).
* ``nearest_neighbor.fig2``: loss landscape L(xi1, xi2) for d = N = 4 (Fig. 2): heat map and 3-D surface, Monte
  Carlo over the x's with the labels integrated out (docs/models/token_selection.md §A.5), against Appendix R and
  against the torch loss.
* ``nearest_neighbor.fig3``: (left) training-loss curves for several (N, d); (right) test MSE on the shifted test law
  of Theorem A2 and on the training law (Fig. 3). Torch full-matrix W from W^(0) trained by GD on fixed prompts
  (seeds) against the reduced (xi1, xi2) map on a large prompt sample (the population proxy).
* ``nearest_neighbor.overlay``: the overlay of docs/models/token_selection.md §5 at d = 4, N = 16: reduced map vs torch
  full-matrix GD (the same x's) vs the factorised W = W_K^T W_Q from i.i.d. N(0, 0.01^2) factors with no mask
  (docs/models/token_selection.md §A.9); L vs log t, E[q_{i*}] and its 5% quantile, the distance off to the family and
  the probes xi1, xi2.

Seeds: prompt sample k of a build with seed ``s`` is recipe docs/models/token_selection.md §G.A with
``numpy.random.default_rng`` of the k-th word of ``SeedSequence([s, tag]).generate_state``; the torch runs use the same
integers as trainer seeds (factor init). Time axis of every panel: the GD step t (docs/models/token_selection.md §0;
time = eta t is stored too).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special
import torch
import xarray as xr

from closedform import nearest_neighbor as cf
from dynamics.random import spawn_generators
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import nearest_neighbor as nnm
from figures._style import TOL_BRIGHT, new_figure, plot_reduced, plot_seed_band
from figures.experiments import train
from figures.registry import CheckResult, Explanation, GapRow, compare_rows, register

__all__ = [
    "LABEL_BIAS_SOURCE",
    "ETA",
    "DELTA",
    "COLORS",
    "DIAG",
    "plot_fig1",
    "checks_fig1",
    "data_fig1",
    "APPENDIX_R",
    "plot_fig2",
    "gaps_fig2",
    "checks_fig2",
    "data_fig2",
    "plot_fig3",
    "gaps_fig3",
    "checks_fig3",
    "data_fig3",
    "plot_overlay",
    "gaps_overlay",
    "checks_overlay",
    "data_overlay",
]

LABEL_BIAS_SOURCE = (
    "explicit labels add zero-mean gradient noise (docs/models/token_selection.md §A.5) whose second-order "
    "effect makes torch "
    "xi1 lag the map on the same x's: about 8% of a step's drift per step at n = 1000 (per-prompt "
    "gradient noise ~2.4x the mean dL/dxi1 at W^(0)), diluted as xi1 grows (docs/models/token_selection.md §A.8: "
    "+0.3% at n = 4000, t = 300); 6% of |theory| bounds it from t >= 25 on at n >= 1000"
)
ETA = 2.0
"""GD step of every torch-vs-reduced panel. The reduced map's reference eta = 5 (docs/models/token_selection.md §4) is
past the edge of stability of full-matrix GD: the label-bias entry W23 (score y_j W23 on context token j) has curvature
lambda = E[(sum_j q_j - f^2)^2] ~ 1 at W^(0) [derived here], so W23 = 0 is linearly unstable for eta > 2/lambda ~ 2
(measured at eta = 5, d = 4, N = 16: W23 -> +-0.93 and a loss spike within 50 steps, even with mirrored labels, which
make its gradient vanish exactly). The reduced map cannot see that direction. eta = 2 keeps both sides stable."""
DELTA = (
    0.2  # separation gap of the shifted test law (docs/models/token_selection.md §A.9: value [unknown]; spec used 0.2)
)
COLORS = {
    "reduced": TOL_BRIGHT["blue"],
    "merged": TOL_BRIGHT["red"],
    "factorised": TOL_BRIGHT["green"],
    "train_law": TOL_BRIGHT["purple"],
    "shifted": TOL_BRIGHT["cyan"],
}
DIAG = ("L", "q_istar", "q_istar_lo", "q_self", "xi1", "xi2")


def _sample_seeds(seed: int, tag: int, n: int) -> list[int]:
    """n distinct integer seeds for prompt samples (recipe docs/models/token_selection.md §G.A) and trainer seeds, from
    the build seed."""
    words = np.random.SeedSequence([seed, tag]).generate_state(n)
    if len(set(words.tolist())) != n:  # pragma: no cover - 32-bit collisions among a handful of words
        raise RuntimeError("seed words collide; use another build seed")
    return [int(w) for w in words]


def _sigma_default(N: int, d: int) -> float:
    """Mask sigma = the explicit part of Theorem A1's condition, sigma_condition(N, d, C_d = 0)
    (docs/models/token_selection.md §A.6)."""
    return cf.sigma_condition(N, d, 0.0)


def _paired(theory_per_seed: np.ndarray, learned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Theory = mean over seeds of the per-seed reduced values; samples = learned - reduced + theory (paired)."""
    theory = theory_per_seed.mean(axis=0)
    return theory, learned - theory_per_seed + theory[None]


def _loglog_slope(t: np.ndarray, y: np.ndarray) -> float:
    """Local exponent d log y / d log t between the last two points."""
    return float(math.log(y[-1] / y[-2]) / math.log(t[-1] / t[-2]))


# ----------------------------------------------------------------------------------------------------------------
# Fig. 1: illustration on S^2
# ----------------------------------------------------------------------------------------------------------------


def _grid(n_lat: int, n_lon: int):
    lat = np.linspace(-np.pi / 2, np.pi / 2, n_lat)
    lon = np.linspace(-np.pi, np.pi, n_lon)
    LON, LAT = np.meshgrid(lon, lat)
    pts = np.stack([np.cos(LAT) * np.cos(LON), np.cos(LAT) * np.sin(LON), np.sin(LAT)], axis=-1)
    return lat, lon, pts


def _lonlat(x: np.ndarray):
    return np.arctan2(x[..., 1], x[..., 0]), np.arcsin(np.clip(x[..., 2], -1, 1))


def plot_fig1(ds: xr.Dataset):
    fig, axes = new_figure(1, 2, figsize=(10.0, 3.6))
    lon, lat = np.degrees(ds.lon.values), np.degrees(ds.lat.values)
    plon, plat = (np.degrees(a) for a in _lonlat(ds.points.values))
    cmap = "coolwarm"
    panels = (
        (ds.nn_label, "1-NN rule: label of the nearest point"),
        (ds.f_model, f"attention f_W at (xi1, xi2) = ({float(ds.xi1):.1f}, {float(ds.xi2):.1f})"),
    )
    for ax, (field, title) in zip(axes, panels):
        mesh = ax.pcolormesh(lon, lat, field.values, cmap=cmap, vmin=-1, vmax=1, shading="auto")
        ax.scatter(plon, plat, c=ds.labels.values, cmap=cmap, vmin=-1, vmax=1, edgecolors="k", s=40, zorder=3)
        ax.set(xlabel="longitude (deg)", ylabel="latitude (deg)", title=title)
    fig.colorbar(mesh, ax=axes, shrink=0.8, label="label / prediction")
    return fig


def checks_fig1(ds: xr.Dataset) -> list[CheckResult]:
    agree = float(ds.agreement)
    return [
        CheckResult(
            name="Sec. A.5: softmax(xi1 <x_j, x_q>) ~ hardmax: sign(f_W) reproduces the 1-NN labels on "
            "the sphere at the trained (xi1, xi2)",
            passed=agree >= 0.9,
            measured=agree,
            expected=">= 0.9 (fraction of grid points)",
            tolerance="0.9: near the Voronoi boundaries the soft attention mixes labels (a band of width ~ 1/xi1)",
        )
    ]


@register(
    name="nearest_neighbor.fig1",
    model="nearest_neighbor",
    paper="Li et al. (2024), Fig. 1",
    spec="docs/models/token_selection.md §A.9 (Fig. 1), docs/models/token_selection.md §A.5",
    caption=(
        "In-context 1-NN on S^2 (d = 3): N labelled context points (markers, Rademacher labels) and, "
        "left, every query on the sphere coloured by the label of its nearest context point; right, the "
        "prediction f_W = sum_j q_j y_j of the attention layer at the (xi1, xi2) reached by the exact "
        "reduced GD map (docs/models/token_selection.md §A.5; sigma = 3, eta = 2, docs/models/token_selection.md "
        "§A.8 setting) on B prompts of the training "
        "law. Equirectangular projection."
    ),
    unrecoverable=(
        "the figure's point count and layout (illustration); training setting d = 3, N = 8, sigma "
        "= 3, eta = 2 of docs/models/token_selection.md §A.8",
    ),
    params={
        "tiny": {"N": 8, "n_lat": 30, "n_lon": 60, "n_train": 500, "n_steps": 200},
        "quick": {"N": 8, "n_lat": 90, "n_lon": 180, "n_train": 4000, "n_steps": 3000},
        "paper": {"N": 8, "n_lat": 180, "n_lon": 360, "n_train": 20000, "n_steps": 20000},
    },
    plot=plot_fig1,
    checks=checks_fig1,
)
def data_fig1(cfg) -> xr.Dataset:
    """One prompt on S^2 with the 1-NN label map and the trained attention's prediction on a lon/lat grid."""
    p = cfg.params
    task = cf.NearestNeighborTask(d=3, N=p["N"], sigma=3.0, eta=2.0)
    gens = spawn_generators(cfg.seed, ["prompt", "train"])
    shown = cf.sample_prompts(task, 1, gens["prompt"], labels=True)
    traj = cf.map(task, cf.sample_prompts(task, p["n_train"], gens["train"]), p["n_steps"], saveat=SaveAt(final=True))
    xi1, xi2 = float(traj.xi1.values[0, -1]), float(traj.xi2.values[0, -1])
    lat, lon, pts = _grid(p["n_lat"], p["n_lon"])
    X, y = shown.X[0], shown.y[0]
    c = pts.reshape(-1, 3) @ X.T  # (n_grid, N)
    nn_label = y[np.argmax(c, axis=1)]
    scores = np.concatenate(
        [xi1 * c, np.full((c.shape[0], 1), xi1 - xi2)], axis=1
    )  # docs/models/token_selection.md §A.5 scores
    q = scipy.special.softmax(scores, axis=1)
    f = q[:, :-1] @ y
    shape = pts.shape[:2]
    return xr.Dataset(
        {
            "nn_label": (("lat", "lon"), nn_label.reshape(shape)),
            "f_model": (("lat", "lon"), f.reshape(shape)),
            "points": (("point", "xyz"), X),
            "labels": (("point",), y),
            "xi1": xi1,
            "xi2": xi2,
            "agreement": float(np.mean(np.sign(f) == nn_label)),
        },
        coords={"lat": lat, "lon": lon},
        attrs={"d": 3, "N": p["N"], "n_steps": p["n_steps"]},
    )


# ----------------------------------------------------------------------------------------------------------------
# Fig. 2: loss landscape
# ----------------------------------------------------------------------------------------------------------------

APPENDIX_R = {
    (0.0, 0.0): (0.38, 0.0),
    (2.0, 5.0): (0.17845, 0.079),
    (5.0, 8.0): (0.08190, 0.084),
    (10.0, 10.0): (0.06001, 0.098),
    (10.0, 25.0): (0.04070, 0.067),
    (20.0, 40.0): (0.02026, 0.050),
}
"""Appendix R: L(xi1, xi2) for d = N = 4 and the per-prompt standard deviation s (1e6 prompts, SE_ref = s/1000)."""


def plot_fig2(ds: xr.Dataset):
    fig, axes = new_figure(1, 2, figsize=(11.0, 4.2))
    xi1, xi2, L = ds.xi1.values, ds.xi2.values, ds.L.values
    ax = axes[0]
    mesh = ax.pcolormesh(xi1, xi2, L.T, cmap="viridis", shading="auto")
    ax.contour(xi1, xi2, L.T, levels=10, colors="w", linewidths=0.6)
    ax.plot(ds.ref_xi1.values, ds.ref_xi2.values, "o", mfc="none", mec="w", label="Appendix R points")
    ax.set(xlabel="xi1", ylabel="xi2", title=f"L(xi1, xi2), d = N = {ds.attrs['d']}")
    ax.legend(loc="upper left")
    fig.colorbar(mesh, ax=ax, label="L")
    pos = axes[1].get_position()
    axes[1].remove()
    ax3 = fig.add_axes(pos, projection="3d")
    X1, X2 = np.meshgrid(xi1, xi2, indexing="ij")
    ax3.plot_surface(X1, X2, L, cmap="viridis", linewidth=0, antialiased=True)
    ax3.set(xlabel="xi1", ylabel="xi2", zlabel="L")
    ax3.view_init(elev=25, azim=-130)
    return fig


def gaps_fig2(ds: xr.Dataset) -> list[GapRow]:
    rows = []
    for k in range(ds.sizes["ref"]):
        # Appendix R is itself a Monte Carlo value over 1e6 prompts: its SE s/1000 enters the test as theory_se
        rows += compare_rows(
            f"torch loss at (xi1, xi2) = ({float(ds.ref_xi1[k]):g}, {float(ds.ref_xi2[k]):g}) vs Appendix R",
            [0.0],
            [float(ds.ref_L[k])],
            ds.torch_L.values[:, k : k + 1],
            theory_se=[float(ds.ref_s[k]) / 1000],
            theory_n_seeds=10,
            d=int(ds.attrs["d"]),
        )
    return rows


def checks_fig2(ds: xr.Dataset) -> list[CheckResult]:
    out = []
    B = ds.attrs["n_prompts"]
    for k in range(ds.sizes["ref"]):
        ref, s = float(ds.ref_L[k]), float(ds.ref_s[k])
        tol = 5 * s * math.sqrt(1e-6 + 1.0 / B) if s > 0 else 1e-12
        val = float(ds.ref_mc[k])
        out.append(
            CheckResult(
                name=f"Appendix R: L({float(ds.ref_xi1[k]):g}, {float(ds.ref_xi2[k]):g}) (MC over x, "
                "labels integrated out)",
                passed=abs(val - ref) <= tol,
                measured=val,
                expected=ref,
                tolerance=f"5 s sqrt(1e-6 + 1/B) = {tol:.2g} (Appendix R rule, B = {B})",
            )
        )
    lam = float(ds.min_hessian_eig)
    out.append(
        CheckResult(
            name="Sec. A.7 item 3 / Fig. 2: the landscape is non-convex (a negative Hessian eigenvalue on the grid)",
            passed=lam < 0,
            measured=lam,
            expected="< 0",
            tolerance="sign of the most negative eigenvalue of the finite-difference Hessian",
        )
    )
    return out


@register(
    name="nearest_neighbor.fig2",
    model="nearest_neighbor",
    paper="Li et al. (2024), Fig. 2",
    spec="docs/models/token_selection.md §A.9 (Fig. 2), docs/models/token_selection.md §A.5, Appendix R",
    caption=(
        "Loss landscape L(xi1, xi2) = 1/2 E[sum_j q_j^2 - 2 q_{i*} + 1] of the reduced family "
        "W = diag(xi1 I_d, 0, -xi2) for d = N = 4 (labels integrated out exactly, Monte Carlo over B "
        "prompts of recipe docs/models/token_selection.md §G.A, common to all grid points): heat map with "
        "contours and the Appendix R "
        "reference points (left), 3-D surface (right). The report compares the torch loss (explicit "
        "labels) with Appendix R."
    ),
    unrecoverable=("axis ranges xi1 in [0, 20], xi2 in [0, 40] (docs/models/token_selection.md §A.9 suggestion)",),
    params={
        "tiny": {"n_prompts": 2000, "n_xi1": 21, "n_xi2": 21, "n_seeds": 3, "n_torch": 2000},
        "quick": {"n_prompts": 20000, "n_xi1": 41, "n_xi2": 41, "n_seeds": 8, "n_torch": 20000},
        "paper": {"n_prompts": 200000, "n_xi1": 81, "n_xi2": 81, "n_seeds": 10, "n_torch": 100000},
    },
    plot=plot_fig2,
    gaps=gaps_fig2,
    checks=checks_fig2,
)
def data_fig2(cfg) -> xr.Dataset:
    """Grid of reduced losses, MC values at the Appendix R points and torch losses at those points per seed."""
    p = cfg.params
    task = cf.NearestNeighborTask(d=4, N=4, sigma=0.0, eta=1.0)
    gens = spawn_generators(cfg.seed, ["landscape"])
    prompts = cf.sample_prompts(task, p["n_prompts"], gens["landscape"])
    xi1 = np.linspace(0.0, 20.0, p["n_xi1"])
    xi2 = np.linspace(0.0, 40.0, p["n_xi2"])
    L = np.array([[cf.reduced_loss(a, b, prompts)[0] for b in xi2] for a in xi1])
    h1, h2 = xi1[1] - xi1[0], xi2[1] - xi2[0]
    L11 = (L[2:, 1:-1] - 2 * L[1:-1, 1:-1] + L[:-2, 1:-1]) / h1**2
    L22 = (L[1:-1, 2:] - 2 * L[1:-1, 1:-1] + L[1:-1, :-2]) / h2**2
    L12 = (L[2:, 2:] - L[2:, :-2] - L[:-2, 2:] + L[:-2, :-2]) / (4 * h1 * h2)
    min_eig = float(np.min(0.5 * (L11 + L22) - np.sqrt(0.25 * (L11 - L22) ** 2 + L12**2)))
    refs = list(APPENDIX_R)
    ref_mc = [cf.reduced_loss(a, b, prompts)[0] for a, b in refs]
    # torch: the loss of the merged model at W = diag(xi1 I, 0, -xi2) on fresh labelled prompts, one batch per seed
    model = nnm.NearestNeighborAttention(task)
    seeds = _sample_seeds(cfg.seed, 2, p["n_seeds"])
    device = torch.device(cfg.device)
    torch_L = np.empty((p["n_seeds"], len(refs)))
    with torch_threads(1), torch.no_grad():
        gens_t = [torch.Generator(device=device).manual_seed(s) for s in seeds]
        batch = model.sample(gens_t, p["n_torch"], device=device, dtype=torch.float64)
        for k, (a, b) in enumerate(refs):
            W = torch.as_tensor(cf.family_W(4, a, b), device=device).expand(p["n_seeds"], 6, 6)
            torch_L[:, k] = model.loss({"W": W}, batch).cpu().numpy()
    return xr.Dataset(
        {
            "L": (("xi1", "xi2"), L),
            "ref_xi1": (("ref",), [a for a, _ in refs]),
            "ref_xi2": (("ref",), [b for _, b in refs]),
            "ref_L": (("ref",), [APPENDIX_R[r][0] for r in refs]),
            "ref_s": (("ref",), [APPENDIX_R[r][1] for r in refs]),
            "ref_mc": (("ref",), ref_mc),
            "torch_L": (("seed", "ref"), torch_L),
            "min_hessian_eig": min_eig,
        },
        coords={"xi1": xi1, "xi2": xi2, "seed": seeds},
        attrs={"d": 4, "N": 4, "n_prompts": p["n_prompts"], "n_torch": p["n_torch"]},
    )


# ----------------------------------------------------------------------------------------------------------------
# Fig. 3: training loss for several (N, d); shifted test MSE (Theorem A2)
# ----------------------------------------------------------------------------------------------------------------


def _mse(xi1, xi2, prompts) -> float:
    return float(np.mean(cf.squared_errors(float(xi1), float(xi2), prompts)))


def plot_fig3(ds: xr.Dataset):
    fig, (ax_l, ax_r) = new_figure(1, 2, figsize=(11.0, 4.0))
    t, tt = ds.step.values[1:], ds.step_torch.values[1:]
    palette = [TOL_BRIGHT[c] for c in ("blue", "red", "green", "purple", "yellow")]
    for k in range(ds.sizes["config"]):
        N, d = int(ds.N.values[k]), int(ds.d.values[k])
        color = palette[k % len(palette)]
        plot_reduced(ax_l, t, ds.L_reduced.values[k, 1:], label=f"reduced, (N, d) = ({N}, {d})", color=color)
        plot_seed_band(
            ax_l,
            tt,
            ds.L_torch.values[k, :, 1:],
            method="percentile",
            label=f"torch GD, (N, d) = ({N}, {d})",
            color=color,
        )
    plot_reduced(ax_r, t, ds.mse_shift_reduced.values[0, 1:], label="shifted law, reduced", color=COLORS["shifted"])
    plot_seed_band(
        ax_r,
        tt,
        ds.mse_shift_torch.values[0, :, 1:],
        method="percentile",
        label="shifted law, torch",
        color=COLORS["shifted"],
    )
    plot_reduced(ax_r, t, ds.mse_train_reduced.values[0, 1:], label="training law, reduced", color=COLORS["train_law"])
    ax_r.set_title(f"test MSE, (N, d) = ({int(ds.N.values[0])}, {int(ds.d.values[0])}); 1-NN: 0 on the shifted law")
    ax_l.set(xscale="log", yscale="log", xlabel="GD step t", ylabel="training loss L", title="training loss")
    ax_r.set(xscale="log", yscale="log", xlabel="GD step t", ylabel="test MSE")
    ax_l.legend(fontsize=7)
    ax_r.legend(fontsize=7)
    return fig


def gaps_fig3(ds: xr.Dataset) -> list[GapRow]:
    rows = []
    n = ds.sizes["step_torch"]
    idx = sorted({n // 3, (2 * n) // 3, n - 1})
    t = ds.step_torch.values[idx]
    for k in range(ds.sizes["config"]):
        N, d = int(ds.N.values[k]), int(ds.d.values[k])
        for var, what in (("L", "training loss L"), ("xi1", "xi1 = tr(W11)/d")):
            # paired over training samples: the torch run and the reduced map share the x's, only labels differ
            theory, samples = _paired(ds[f"{var}_reduced_same"].values[k][:, idx], ds[f"{var}_torch"].values[k][:, idx])
            rows += compare_rows(
                f"{what}, (N, d) = ({N}, {d}): torch GD vs reduced map on the same x's",
                t,
                theory,
                samples,
                rel_allowance=0.06,
                allowance_source=LABEL_BIAS_SOURCE,
                d=d,
            )
    return rows


def _theorem_checks(t, L, xi1, xi2, q_istar, q_self, label: str) -> list[CheckResult]:
    """Theorem A1 and the proof's claims (docs/models/token_selection.md §A.6) on a reduced trajectory; measured truth
    where a claim fails."""
    out = []
    # Theorem A1 (L <= C / log t, C = poly(N, d) unrecoverable) is checked through its two testable parts: L decreases
    # at every saved step (here), and it falls faster than 1/log t at the end of the run (the rate check below). A
    # "C/log t" check with C fitted on the same trajectory would hold by construction.
    out.append(
        CheckResult(
            name=f"Theorem A1: L(W^(t)) decreases at every saved step ({label})",
            passed=bool(np.all(np.diff(L) < 0)),
            measured=float(np.max(np.diff(L))),
            expected="< 0 (largest step-to-step change)",
            tolerance="strict inequality",
        )
    )
    slope = _loglog_slope(t.astype(float), L)
    out.append(
        CheckResult(
            name=f"Theorem A1 rate: measured late exponent d log L / d log t ({label}); the 1/log t "
            "rate is only an upper bound: the loss falls like about t^(-1/3) here",
            passed=slope < -0.2,
            measured=slope,
            expected="1/log t would give ~ -1/log t ~ -0.1; measured ~ -1/3",
            tolerance="< -0.2: faster than any 1/log t decay at these t",
        )
    )
    ratio = float(np.max(xi1 / xi2))
    # The paper's claim, tested as stated: where it fails the status is 'disagrees' (a result, with the measurement).
    out.append(
        CheckResult(
            name=f"docs/models/token_selection.md §A.6 ratio bound xi1 <= (7/15) xi2 for all t ({label})",
            passed=ratio <= 7 / 15,
            measured=ratio,
            expected="max_t xi1/xi2 <= 7/15 = 0.467",
            tolerance="sign of max_t xi1/xi2 - 7/15 on the saved steps",
            explanation=Explanation(
                kind="disagrees",
                reason="the proof's ratio bound xi1 <= (7/15) xi2 does not hold along the GD path",
                evidence=(
                    "measured max_t xi1/xi2 on the saved steps of this run; docs/models/"
                    "token_selection.md §A.6 documents the same violation"
                ),
            ),
        )
    )
    out.append(
        CheckResult(
            name=f"Sec. A.7 item 1: E[q_i*] increases towards 1, E[q_N+1] stays small ({label})",
            passed=bool(np.all(np.diff(q_istar) > 0) and np.max(q_self) < 0.05),
            measured=float(q_istar[-1]),
            expected="increasing; E[q_N+1] < 0.05 throughout",
            tolerance=f"monotone; max_t E[q_N+1] = {float(np.max(q_self)):.2g} (docs/models/token_selection.md §A.8: "
            "9e-4 at t = 20000, d = 4, N = 16)",
        )
    )
    return out


def checks_fig3(ds: xr.Dataset) -> list[CheckResult]:
    out = []
    t = ds.step.values
    for k in range(ds.sizes["config"]):
        N, d = int(ds.N.values[k]), int(ds.d.values[k])
        sel = t >= 1  # the reduced trajectory, up to n_steps_reduced
        out += _theorem_checks(
            t[sel],
            ds.L_reduced.values[k, sel],
            ds.xi1_reduced.values[k, sel],
            ds.xi2_reduced.values[k, sel],
            ds.q_istar_reduced.values[k, sel],
            ds.q_self_reduced.values[k, sel],
            f"reduced, (N, d) = ({N}, {d})",
        )
        Lt = ds.L_torch.values[k]
        out.append(
            CheckResult(
                name=(
                    f"torch GD training loss decreases ((N, d) = ({N}, {d})): every seed below its "
                    "start; mean over seeds at the end"
                ),
                n_seeds=int(Lt.shape[0]),
                passed=bool(np.all(Lt[:, -1] < Lt[:, 0])),
                measured=float(Lt[:, -1].mean()),
                expected=f"< L(0) = {float(Lt[:, 0].mean()):.4g}",
                tolerance="strict",
            )
        )
    shift = ds.mse_shift_reduced.values[0, 1:]
    train_law = ds.mse_train_reduced.values[0, 1:]
    out.append(
        CheckResult(
            name="Theorem A2: the shifted-law test MSE decreases with T (reduced, first config)",
            passed=bool(np.all(np.diff(shift) < 0)),
            measured=float(shift[-1]),
            expected="decreasing towards 0",
            tolerance="strictly decreasing on the saved steps",
        )
    )
    out.append(
        CheckResult(
            name="Sec. A.7 item 4: on the training law the MSE plateaus far above the shifted-law MSE "
            "(P(A_delta^c) > 0)",
            passed=bool(train_law[-1] > 10 * shift[-1]),
            measured=float(train_law[-1] / shift[-1]),
            expected="> 10 (ratio training-law / shifted)",
            tolerance="factor 10 (reference: 46x at t = 3000, d = 4, N = 16)",
        )
    )
    out.append(
        CheckResult(
            name="Theorem A2 pointwise bound (docs/models/token_selection.md §A.6 [derived]) holds on every shifted "
            "test prompt "
            "at the final (xi1, xi2)",
            passed=bool(ds.bound_ok),
            measured=float(ds.bound_ok),
            expected=1.0,
            tolerance="err <= bound (1 + 1e-12) on every prompt",
        )
    )
    mt = ds.mse_shift_torch.values[0]
    out.append(
        CheckResult(
            name="Theorem A2 for the torch full-matrix W: shifted test MSE at the end below its value "
            "at t = 1 (every seed; mean over seeds shown)",
            passed=bool(np.all(mt[:, -1] < mt[:, 1])),
            n_seeds=int(mt.shape[0]),
            measured=float(mt[:, -1].mean()),
            expected=f"< {float(mt[:, 1].mean()):.3g}",
            tolerance="strict",
        )
    )
    return out


@register(
    name="nearest_neighbor.fig3",
    model="nearest_neighbor",
    paper="Li et al. (2024), Fig. 3",
    spec="docs/models/token_selection.md §A.9 (Fig. 3), docs/models/token_selection.md §A.6-§A.8",
    caption=(
        "Left: training loss vs GD step for several (N, d). Dashed: the exact reduced (xi1, xi2) map "
        "(docs/models/token_selection.md §A.5) on a large prompt sample (population proxy, labels integrated "
        "out), run further than "
        "the torch runs (it is cheap), so the theorem checks see long times. Markers and "
        "bands (mean and 95% range over training samples): torch full-matrix W from W^(0) = diag(0, "
        "-sigma), full-batch GD at eta = 2 on fixed training prompts with explicit Rademacher labels. "
        "Right: test MSE (no 1/2) on the shifted test law of Theorem A2 (x_query = x_{i*}, other points "
        "reflected to squared distance > delta = 0.2, Gaussian labels) and on the training law, which "
        "plateaus; the 1-NN predictor has MSE exactly 0 on the shifted law. The report's gaps compare each "
        "torch run with the reduced map on its own x's (paired)."
    ),
    unrecoverable=(
        "the paper's optimiser, learning rate, batch and initialisation: full-batch GD, eta = 2 "
        "(eta = 5 is unstable for the full matrix), merged W from W^(0) (docs/models/token_selection.md §A.9 default)",
        "mask sigma = sigma_condition(N, d, C_d = 0) = 2 max{log(N d), -log(1 - (N sqrt d)^(-1/d))} "
        "(C_d unrecoverable)",
        "(N, d) grid {(16, 4), (32, 8), (64, 16)} (docs/models/token_selection.md §A.9 suggestion)",
        "delta = 0.2 of the shifted test law (docs/models/token_selection.md §A.9)",
    ),
    params={
        "tiny": {
            "configs": [[16, 4]],
            "n_train": 200,
            "n_seeds": 2,
            "n_steps": 30,
            "n_save": 6,
            "n_steps_reduced": 300,
            "n_pop": 1000,
            "n_test": 500,
        },
        "quick": {
            "configs": [[16, 4], [32, 8]],
            "n_train": 1000,
            "n_seeds": 8,
            "n_steps": 250,
            "n_save": 14,
            "n_steps_reduced": 3000,
            "n_pop": 2000,
            "n_test": 3000,
        },
        "paper": {
            "configs": [[16, 4], [32, 8], [64, 16]],
            "n_train": 10000,
            "n_seeds": 8,
            "n_steps": 20000,
            "n_save": 31,
            "n_steps_reduced": 30000,
            "n_pop": 10000,
            "n_test": 20000,
        },
    },
    plot=plot_fig3,
    gaps=gaps_fig3,
    checks=checks_fig3,
)
def data_fig3(cfg) -> xr.Dataset:
    """Per (N, d): torch GD over seeds (training samples) up to ``n_steps`` and the reduced map on a population proxy
    up to ``n_steps_reduced`` (cheap, so the theorem checks see long times), on one log grid of steps; test MSEs on
    the shifted and the training law."""
    p = cfg.params
    steps_t = SaveAt(log=p["n_save"]).resolve_steps(p["n_steps"])
    steps = np.union1d(SaveAt(log=p["n_save"]).resolve_steps(p["n_steps_reduced"]), steps_t)
    out = {
        k: []
        for k in (
            "L_torch",
            "xi1_torch",
            "xi2_torch",
            "off_torch",
            "q_istar_torch",
            "mse_shift_torch",
            "L_reduced_same",
            "xi1_reduced_same",
            "L_reduced",
            "xi1_reduced",
            "xi2_reduced",
            "q_istar_reduced",
            "q_self_reduced",
            "mse_shift_reduced",
            "mse_train_reduced",
        )
    }
    bound_ok = True
    Ns, ds_, sigmas = [], [], []
    for k, (N, d) in enumerate(p["configs"]):
        task = cf.NearestNeighborTask(d=d, N=N, sigma=_sigma_default(N, d), eta=ETA)
        gens = spawn_generators(np.random.SeedSequence([cfg.seed, k]), ["pop", "shift", "train_law"])
        seeds = _sample_seeds(cfg.seed, 100 + k, p["n_seeds"])
        shifted = cf.sample_shifted_prompts(task, p["n_test"], gens["shift"], delta=DELTA)
        train_law = cf.sample_prompts(task, p["n_test"], gens["train_law"], labels=True)
        model = nnm.NearestNeighborAttention(task, data=nnm.prompt_samples(task, p["n_train"], seeds), test=shifted)
        with torch_threads(1):
            traj = train(
                model,
                nnm.config("gd", model, p["n_steps"], seeds=seeds, saveat=SaveAt(steps=[int(s) for s in steps_t])),
                device=cfg.device,
                progress=cfg.progress,
            )
        red = cf.map(
            task,
            cf.sample_prompts(task, p["n_pop"], gens["pop"]),
            int(steps[-1]),
            saveat=SaveAt(steps=[int(s) for s in steps]),
        )
        same = [
            cf.map(task, prompts, p["n_steps"], saveat=SaveAt(steps=[int(s) for s in steps_t]))
            for prompts in model.data
        ]  # the reduced map on each seed's own x's (paired gaps)
        out["L_reduced_same"].append(np.stack([r.L.values[0] for r in same]))
        out["xi1_reduced_same"].append(np.stack([r.xi1.values[0] for r in same]))
        r1, r2 = red.xi1.values[0], red.xi2.values[0]
        for name in ("L", "xi1", "xi2", "off", "q_istar"):
            out[f"{name}_torch"].append(traj[name].values)
        out["mse_shift_torch"].append(traj.mse_test.values)
        for name in ("L", "xi1", "xi2", "q_istar", "q_self"):
            out[f"{name}_reduced"].append(red[name].values[0])
        out["mse_shift_reduced"].append([_mse(a, b, shifted) for a, b in zip(r1, r2)])
        out["mse_train_reduced"].append([_mse(a, b, train_law) for a, b in zip(r1, r2)])
        err = cf.squared_errors(r1[-1], r2[-1], shifted)
        bound_ok &= bool(np.all(err <= cf.shifted_test_bound(r1[-1], r2[-1], shifted, DELTA) * (1 + 1e-12)))
        Ns.append(N)
        ds_.append(d)
        sigmas.append(task.sigma)
    torch_dims = ("config", "seed_index", "step_torch")
    data = {
        k: (torch_dims if k.endswith(("_torch", "_same")) else ("config", "step"), np.asarray(v))
        for k, v in out.items()
    }
    data.update(N=(("config",), Ns), d=(("config",), ds_), sigma=(("config",), sigmas), bound_ok=bound_ok)
    return xr.Dataset(
        data,
        coords={"step": steps, "time": ("step", ETA * steps), "step_torch": steps_t},
        attrs={"eta": ETA, "delta": DELTA, "n_train": p["n_train"], "n_pop": p["n_pop"], "n_test": p["n_test"]},
    )


# ----------------------------------------------------------------------------------------------------------------
# Overlay of docs/models/token_selection.md §5: reduced map vs full-matrix GD vs factorised W_K, W_Q
# ----------------------------------------------------------------------------------------------------------------


def plot_overlay(ds: xr.Dataset):
    fig, axes = new_figure(2, 2, figsize=(11.0, 7.0))
    t = ds.step.values[1:]
    (ax_L, ax_q), (ax_off, ax_xi) = axes
    sources = (("merged", "torch full-matrix W"), ("factorised", "torch W_K^T W_Q, random init"))
    plot_reduced(ax_L, t, ds.L_reduced.values[:, 1:].mean(0), label="reduced map", color=COLORS["reduced"])
    plot_reduced(ax_q, t, ds.q_istar_reduced.values[:, 1:].mean(0), label="E[q_i*], reduced", color=COLORS["reduced"])
    plot_reduced(
        ax_q,
        t,
        ds.q_istar_lo_reduced.values[:, 1:].mean(0),
        label="5% quantile, reduced",
        color=COLORS["reduced"],
        alpha=0.5,
    )
    for name, lab in (("xi1", "xi1"), ("xi2", "xi2")):
        plot_reduced(
            ax_xi,
            t,
            ds[f"{name}_reduced"].values[:, 1:].mean(0),
            label=f"{lab}, reduced",
            color=COLORS["reduced"],
            alpha=1.0 if name == "xi1" else 0.5,
        )
    for src, label in sources:
        color = COLORS[src]
        for ax, var in ((ax_L, "L"), (ax_q, "q_istar"), (ax_off, "off"), (ax_xi, "xi1")):
            plot_seed_band(
                ax,
                t,
                ds[f"{var}_{src}"].values[:, 1:],
                method="percentile",
                label=f"{label}" + ("" if var != "xi1" else ", xi1"),
                color=color,
            )
        plot_seed_band(
            ax_xi,
            t,
            ds[f"xi2_{src}"].values[:, 1:],
            method="percentile",
            label=f"{label}, xi2",
            color=color,
            marker="s",
            alpha=0.12,
        )
    ax_L.set(xscale="log", yscale="log", xlabel="GD step t", ylabel="L", title="loss")
    ax_q.set(xscale="log", xlabel="GD step t", ylabel="attention on i*", title="E[q_i*] and its 5% quantile")
    ax_off.set(
        xscale="log", yscale="log", xlabel="GD step t", ylabel="off", title="distance of W to diag(xi1 I, 0, -xi2)"
    )
    ax_xi.set(xscale="log", xlabel="GD step t", ylabel="probe", title="xi1 = tr(W11)/d, xi2 = -W33")
    for ax in (ax_L, ax_q, ax_off, ax_xi):
        ax.legend(fontsize=6)
    return fig


def gaps_overlay(ds: xr.Dataset) -> list[GapRow]:
    rows = []
    n = ds.sizes["step"]
    idx = sorted({n // 3, (2 * n) // 3, n - 1})
    t = ds.step.values[idx]
    for var in ("L", "xi1", "xi2", "q_istar"):
        theory, samples = _paired(ds[f"{var}_reduced"].values[:, idx], ds[f"{var}_merged"].values[:, idx])
        rows += compare_rows(
            f"{var}: torch full-matrix GD vs reduced map (same x's, paired over seeds)",
            t,
            theory,
            samples,
            rel_allowance=0.06,
            allowance_source=LABEL_BIAS_SOURCE,
            d=int(ds.attrs["d"]),
        )
    return rows


def checks_overlay(ds: xr.Dataset) -> list[CheckResult]:
    t = ds.step.values
    out = _theorem_checks(
        t[1:],
        ds.L_reduced.values[:, 1:].mean(0),
        ds.xi1_reduced.values[:, 1:].mean(0),
        ds.xi2_reduced.values[:, 1:].mean(0),
        ds.q_istar_reduced.values[:, 1:].mean(0),
        ds.q_self_reduced.values[:, 1:].mean(0),
        "reduced, mean over samples",
    )
    off_m = float(ds.off_merged.values[:, -1].max())
    out.append(
        CheckResult(
            name="Sec. A.5 / A.8: full-matrix GD from W^(0) stays near diag(xi1 I, 0, -xi2) (off = "
            "label-sampling noise), max over seeds of off at the last step",
            passed=off_m < 0.1,
            measured=off_m,
            n_seeds=int(ds.sizes["seed"]),
            expected="< 0.1 (reference: 2.4% at 4000 prompts, d = 3)",
            tolerance="0.1: label noise O(1/sqrt(n)) at the preset's n",
        )
    )
    xf = ds.xi1_factorised.values
    k_early = int(np.searchsorted(t, 20))
    esc = float(np.median(xf[:, -1]))
    out.append(
        CheckResult(
            name="Sec. A.9: the factorised model sits at the saddle W ~ 0 early (every seed), then "
            "leaves it (median over seeds of the final xi1)",
            passed=bool(np.all(np.abs(xf[:, k_early]) < 0.05) and esc > 5.0),
            measured=esc,
            n_seeds=int(xf.shape[0]),
            expected=f"|xi1| < 0.05 at t = {int(t[k_early])}; xi1 > 5 at the end",
            tolerance="reference: the saddle is left after ~100 steps at eta = 5 (measured ~200 at eta = 2)",
        )
    )
    off_f = float(np.median(ds.off_factorised.values[:, -1]))
    out.append(
        CheckResult(
            name=(
                "Sec. A.9: the factorised W approaches the reduced family (off small after the "
                "escape), median over seeds of off at the last step"
            ),
            passed=off_f < 0.15,
            measured=off_f,
            n_seeds=int(ds.off_factorised.values.shape[0]),
            expected="< 0.15 (reference: off = 4-8% from t = 200 on, 4000 prompts)",
            tolerance="0.15: fewer prompts than the reference check in the quick preset",
        )
    )
    return out


@register(
    name="nearest_neighbor.overlay",
    model="nearest_neighbor",
    paper="Li et al. (2024): theory vs practice (docs/models/token_selection.md §5 suggested overlay)",
    spec="docs/models/token_selection.md §5, §A.5, §A.8, §A.9",
    caption=(
        "Study A overlay at d = 4, N = 16, sigma = 5, eta = 2 (docs/models/token_selection.md §4 setting with a "
        "smaller step: at "
        "eta = 5 full-matrix GD is unstable in the label-bias entry W23, which the reduced map cannot see). "
        "Dashed: the "
        "exact reduced (xi1, xi2) GD map (docs/models/token_selection.md §A.5) on each seed's prompts (mean over "
        "seeds). Markers and "
        "bands (mean and 95% range over prompt samples): torch full-matrix GD from W^(0) on the same x's "
        "with explicit Rademacher labels, each prompt also with y -> -y (docs/models/token_selection.md §A.8), "
        "and the factorised "
        "W = W_K^T W_Q from i.i.d. N(0, 0.01^2) factors with no mask (docs/models/token_selection.md §A.9; never "
        "from zero, a "
        "stationary point). Probes xi1 = tr(W11)/d, xi2 = -W33 and off (docs/models/token_selection.md §A.5.1)."
    ),
    unrecoverable=(
        "factor init scale s = 0.01 (docs/models/token_selection.md §0 default)",
        "eta = 2 instead of the reference 5 (stability of full-matrix GD, see the caption)",
    ),
    params={
        "tiny": {"n_prompts": 300, "n_seeds": 2, "n_steps": 60, "n_save": 8},
        "quick": {"n_prompts": 1000, "n_seeds": 8, "n_steps": 500, "n_save": 14},
        "paper": {"n_prompts": 4000, "n_seeds": 8, "n_steps": 5000, "n_save": 25},
    },
    plot=plot_overlay,
    gaps=gaps_overlay,
    checks=checks_overlay,
)
def data_overlay(cfg) -> xr.Dataset:
    """Reduced map, torch merged W and torch factorised W on the same prompt samples (one per seed)."""
    p = cfg.params
    task = cf.NearestNeighborTask(d=4, N=16, sigma=5.0, eta=ETA)
    task_fact = cf.NearestNeighborTask(d=4, N=16, sigma=0.0, eta=ETA)  # no mask for the factorised model
    steps = np.unique(np.concatenate([SaveAt(log=p["n_save"]).resolve_steps(p["n_steps"]), [20]]))
    saveat = SaveAt(steps=[int(s) for s in steps])
    seeds = _sample_seeds(cfg.seed, 7, p["n_seeds"])
    data = nnm.prompt_samples(task, p["n_prompts"], seeds, duplicate_labels=True)
    out = {}
    with torch_threads(1):
        for src, t_, kw in (("merged", task, {}), ("factorised", task_fact, {"parametrisation": "factorised"})):
            model = nnm.NearestNeighborAttention(t_, data=data, **kw)
            traj = train(
                model,
                nnm.config("gd", model, p["n_steps"], seeds=seeds, saveat=saveat),
                device=cfg.device,
                progress=cfg.progress,
            )
            for var in ("L", "q_istar", "q_istar_lo", "q_self", "xi1", "xi2", "off"):
                out[f"{var}_{src}"] = (("seed", "step"), traj[var].values)
    reds = [cf.map(task, cf.sample_prompts(task, p["n_prompts"], s), p["n_steps"], saveat=saveat) for s in seeds]
    for var in DIAG:
        out[f"{var}_reduced"] = (("seed", "step"), np.stack([r[var].values[0] for r in reds]))
    return xr.Dataset(
        out,
        coords={"step": steps, "time": ("step", ETA * steps), "seed": seeds},
        attrs={"d": 4, "N": 16, "sigma": 5.0, "eta": ETA, "n_prompts": p["n_prompts"]},
    )
