"""Benchmarks of the single-location PGD maps (docs/models/single_location.md §6.3-§6.4, §8).

Each row times the numba map run through ``dynamics.iterate`` (via ``closedform.single_location.map``) and a plain
numpy baseline of the same map vectorised over trajectories (scipy.special.erf / owens_t), in the same process.
Throughputs are trajectory-steps per second of *process CPU time* (``time.process_time``: one core, since neither
side is multithreaded), so they stay meaningful on a shared machine; the Section-5 row also reports wall time.
Before timing, each baseline is checked to reproduce the numba trajectory (max deviation printed in the note).
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy.special import erf, owens_t

from benchmarks._common import Result, cpu_time
from benchmarks._dense import dense_save_result
from closedform import single_location as sl
from dynamics import SaveAt

_TWO_OVER_SQRTPI = 2.0 / math.sqrt(math.pi)


# ---------------------------------------------------------------------------------------------------------------
# numpy baselines of the same maps


def _numpy_manifold(task, lam, alpha, kappa, nu, n_steps):
    """docs/models/single_location.md §6.3 map, vectorised over trajectories with numpy."""
    g = lam * task.gamma
    q, r = math.sqrt(1 + 2 * g * g), math.sqrt(1 + 4 * g * g)
    c = lam * task.s / q
    gg2 = 2 * task.gamma**2
    kappa, nu = kappa.copy(), nu.copy()
    for _ in range(n_steps):
        ck = c * kappa
        dk = alpha * gg2 * c * _TWO_OVER_SQRTPI * np.exp(-ck * ck) * (erf(ck / r) - nu)
        dv = -alpha * gg2 * erf(ck)
        ok, on = 1 - kappa * kappa, 1 - nu * nu
        kappa = (kappa - dk * ok) / np.sqrt(1 + dk * dk * ok)
        nu = (nu - dv * on) / np.sqrt(1 + dv * dv * on)
    return kappa, nu


def _numpy_partials(task, lam, kappa, nu, theta, eta, rho):
    """docs/models/single_location.md §4.3 partials, vectorised; zeta through scipy's Owen's T
    (docs/models/single_location.md §3.2)."""
    s, gamma, L = task.s, task.gamma, task.L
    g = lam * gamma
    q, r = math.sqrt(1 + 2 * g * g), math.sqrt(1 + 4 * g * g)
    C = 2 * lam / math.sqrt(math.pi * (1 + 2 * lam * lam))
    B2 = 8 * lam * lam / (math.pi * (1 + 2 * lam * lam) * math.sqrt(1 + 4 * lam * lam))
    t = lam * s * kappa
    m = t / q
    u = m / r
    e1m = _TWO_OVER_SQRTPI * np.exp(-m * m)
    e2m, e3m = -2 * m * e1m, (4 * m * m - 2) * e1m
    erfu, e1u = erf(u), _TWO_OVER_SQRTPI * np.exp(-u * u)
    e2u = -2 * u * e1u
    phi0, phi1, phi2, phi3 = erf(m), e1m / q, e2m / q**2, e3m / q**3
    z = 1 - 8 * owens_t(math.sqrt(2) * t / q, 1 / r)
    zt = 2 / q * erfu * e1m
    ztt = 2 / q * (e1u * e1m / (q * r) + erfu * e2m / q)
    zttt = 2 / q * (e2u * e1m / (q * r) ** 2 + 2 * e1u * e2m / (q * q * r) + erfu * e3m / q**2)
    gg, st = gamma * gamma, s * theta
    rk = (
        lam
        * s
        * (
            -2 * gamma * (st * eta * g * phi2 + gamma * nu * phi1 + gamma * rho * eta * g * g * phi3)
            + (st * st + gg) * zt
            + 2 * g * gamma * st * rho * ztt
            + g * g * gg * rho * rho * zttt
            + 2 * (L - 1) * C * rho * (st * phi1 + g * gamma * rho * phi2)
        )
    )
    rn = -2 * gg * phi0
    rt = (
        -2 * g * gamma * s * eta * phi1
        + 2 * s * st * z
        + 2 * g * gamma * s * rho * zt
        + 2 * (L - 1) * C * rho * s * phi0
    )
    re = -2 * gamma * (g * st * phi1 + g * g * gamma * rho * phi2)
    rr = (
        -2 * g * g * gg * eta * phi2
        + 2 * g * gamma * st * zt
        + 2 * g * g * gg * rho * ztt
        + 2 * (L - 1) * (B2 + (L - 2) * C * C) * rho
        + 2 * (L - 1) * C * (st * phi0 + 2 * g * gamma * rho * phi1)
    )
    return rk, rn, rt, re, rr


def _numpy_five(task, lam, alpha, state, n_steps):
    """docs/models/single_location.md §6.4 map (Gram-matrix update), vectorised over trajectories with numpy."""
    kappa, nu, theta, eta, rho = (state[:, j].copy() for j in range(5))
    for _ in range(n_steps):
        rk, rn, rt, re, rr = _numpy_partials(task, lam, kappa, nu, theta, eta, rho)
        kc = np.stack([1 + alpha * (rk * kappa + re * eta + rr * rho), -alpha * rr, -alpha * rk, -alpha * re])
        vc = np.stack([-alpha * rr, 1 + alpha * (rn * nu + rt * theta + rr * rho), -alpha * rt, -alpha * rn])
        one, zero = np.ones_like(kappa), np.zeros_like(kappa)
        G = np.array([[one, rho, kappa, eta], [rho, one, theta, nu], [kappa, theta, one, zero], [eta, nu, zero, one]])
        gk = np.einsum("ijn,jn->in", G, kc)
        gv = np.einsum("ijn,jn->in", G, vc)
        nk, nv = np.sqrt(np.sum(kc * gk, 0)), np.sqrt(np.sum(vc * gv, 0))
        kappa, eta, theta, nu = gk[2] / nk, gk[3] / nk, gv[2] / nv, gv[3] / nv
        rho = np.sum(kc * gv, 0) / (nk * nv)
    return np.stack([kappa, nu, theta, eta, rho], axis=1)


# ---------------------------------------------------------------------------------------------------------------


def _bench_manifold(quick: bool) -> Result:
    task = sl.SingleLocationTask(d=400, L=10)
    n_traj, n_steps = 1000, (2000 if quick else 20000)
    n_base = n_steps  # the same steps: the cost of erf depends on the state (cheaper near kappa = 0)
    state0 = sl.sample_initial_state(task, n_traj, 0, on="manifold")

    def run(n):
        return sl.map(task, state0, alpha=4e-3, n_steps=n, lam=0.1, manifold=True, saveat=SaveAt(final=True))

    check = run(n_base).states()[:, -1, :2]
    base = _numpy_manifold(task, 0.1, 4e-3, state0[:, 0], state0[:, 1], n_base)
    dev = float(np.max(np.abs(check - np.stack(base, axis=1))))
    t_nb = cpu_time(lambda: run(n_steps), repeat=2)
    t_np = cpu_time(lambda: _numpy_manifold(task, 0.1, 4e-3, state0[:, 0], state0[:, 1], n_base), repeat=1)
    return Result(
        name="manifold map (docs/models/single_location.md §6.3), 1000 trajectories",
        unit="trajectory-steps/s per core",
        value=n_traj * n_steps / t_nb,
        baseline=n_traj * n_base / t_np,
        baseline_name="numpy vectorised over trajectories",
        target_value=2e7,
        note=f"max |numba - numpy| after {n_base} steps: {dev:.1e}",
    )


def _bench_five(quick: bool, d: int) -> Result:
    task = sl.SingleLocationTask(d=d, L=10)
    n_traj, n_steps = 200, (1000 if quick else 10000)
    n_base = n_steps // 5  # numpy is slow here; the first fifth of the same run
    state0 = sl.sample_initial_state(sl.SingleLocationTask(d=400, L=10), n_traj, 1)  # same starts for every d
    # Fig. 7(b) setting at d = 400; for larger d, lambda sqrt(d) and alpha d are held fixed so that the run stays in
    #  the same (stable) regime: the off-manifold curvature grows like d (docs/models/single_location.md §7.4, step-size
    # instability)
    lam, alpha = 0.1 * math.sqrt(400 / d), 4e-3 * 400 / d

    def run(n):
        return sl.map(task, state0, alpha=alpha, n_steps=n, lam=lam, saveat=SaveAt(final=True))

    dev = float(np.max(np.abs(run(n_base).states()[:, -1, :5] - _numpy_five(task, lam, alpha, state0, n_base))))
    t_nb = cpu_time(lambda: run(n_steps), repeat=2)
    t_np = cpu_time(lambda: _numpy_five(task, lam, alpha, state0, n_base), repeat=1)
    return Result(
        name=f"five-scalar map (docs/models/single_location.md §6.4), d = {d}, {n_traj} trajectories",
        unit="trajectory-steps/s per core",
        value=n_traj * n_steps / t_nb,
        baseline=n_traj * n_base / t_np,
        baseline_name="numpy vectorised (scipy owens_t)",
        target_value=2e6,
        note=f"max |numba - numpy| after {n_base} steps: {dev:.1e}",
    )


def _section5_runs():
    """All PGD runs of the paper's Section 5 (Figs. 4(a), 4(b), 7(a), 7(b);
    docs/models/single_location.md §8.2, §8.3, §8.6): 30 repeats."""
    task = sl.SingleLocationTask(d=400, L=10)
    sphere = sl.sample_initial_state(task, 30, 0)
    manifold = sl.sample_initial_state(task, 30, 0, on="manifold")
    return [
        {
            "state0": sphere,
            "alpha": 4e-3,
            "n_steps": 120_000,
            "lam": sl.lam_schedule(1.0),
            "every": 300,
            "manifold": False,
        },
        {"state0": manifold, "alpha": 4e-3, "n_steps": 20_000, "lam": 0.1, "every": 200, "manifold": True},
        {"state0": sphere, "alpha": 1e-3, "n_steps": 120_000, "lam": 0.9, "every": 300, "manifold": False},
        {"state0": sphere, "alpha": 4e-3, "n_steps": 20_000, "lam": 0.1, "every": 200, "manifold": False},
    ], task


def _bench_section5(quick: bool) -> Result:
    runs, task = _section5_runs()
    scale = 10 if quick else 1
    total = sum(r["state0"].shape[0] * (r["n_steps"] // scale) for r in runs)

    def all_runs():
        for r in runs:
            n = r["n_steps"] // scale
            lam = r["lam"]
            sl.map(
                task,
                r["state0"],
                alpha=r["alpha"],
                n_steps=n,
                lam=lam,
                manifold=r["manifold"],
                saveat=SaveAt(every=r["every"]),
            )

    all_runs()  # compile both kernels
    w0, c0 = time.perf_counter(), time.process_time()
    all_runs()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    # numpy baseline: the same five-scalar computation on Fig. 7(a)'s 30 runs for a slice of steps
    n_base = 200 if quick else 1000
    t_np = cpu_time(lambda: _numpy_five(task, 0.9, 1e-3, runs[2]["state0"], n_base), repeat=1)
    return Result(
        name="Section 5 PGD runs (Figs 4a, 4b, 7a, 7b; 30 repeats each)" + (" / 10" if quick else ""),
        unit="trajectory-steps/s",
        value=total / wall,
        baseline=30 * n_base / t_np,
        baseline_name="numpy five-scalar map (CPU time, Fig. 7(a) runs)",
        target_value=total / 30.0 if not quick else None,
        note=f"{total:.3g} trajectory-steps in {wall:.2f} s wall ({cpu:.2f} s CPU), compilation excluded; "
        f"numpy would need ~{total / (30 * n_base / t_np):.0f} s CPU",
    )


def _bench_basins(quick: bool) -> Result:
    """Issue 14 item 7: 10^6 sphere starts of five-scalar PGD run to convergence (or 10^4 steps), final states only,
    on one core (target <= 10 min). Times a subset (2 000 quick, 10^5 full) with ``run_to_fixed_point`` at the atlas
    setting lambda = 0.05, d = 400, alpha = 4e-3 (a run stops within 1e-3 of an attractor: the classification
    tolerance) and extrapolates linearly in the number of starts."""
    task = sl.SingleLocationTask(d=400, L=10)
    lam, alpha = 0.05, 4e-3
    n_sub = 2000 if quick else 100_000
    pts = sl.fixed_points(task, lam, alpha)
    state0 = sl.sample_initial_state(task, n_sub, 2)
    sl.run_to_fixed_point(task, state0[:10], alpha=alpha, lam=lam, n_steps=500, points=pts)  # compile
    c0 = time.process_time()
    X, steps = sl.run_to_fixed_point(task, state0, alpha=alpha, lam=lam, n_steps=10_000, points=pts, stop_tol=1e-3)
    cpu = time.process_time() - c0
    named = float(np.mean(sl.classify(task, lam, X, points=pts) != "unconverged"))
    n_base = 100
    t_np = cpu_time(lambda: _numpy_five(task, lam, alpha, state0[:2000], n_base), repeat=1)
    np_rate = 2000 * n_base / t_np  # numpy trajectory-steps per CPU second
    return Result(
        name=f"basins: sphere starts to convergence (lambda = 0.05, d = 400), {n_sub} starts timed",
        unit="starts/s per core",
        value=n_sub / cpu,
        baseline=np_rate / float(steps.mean()),
        baseline_name="numpy five-scalar map at the same mean steps per start",
        target_value=1e6 / 600.0,
        note=f"mean {steps.mean():.0f} steps/start, {n_sub * steps.mean() / cpu:.3g} steps/s; 10^6 starts "
        f"extrapolated to {1e6 * cpu / n_sub:.0f} s CPU; named {100 * named:.2f} %",
    )


def _bench_dense(quick: bool) -> list[Result]:
    """Saving every step against the final state only through ``single_location.map`` (risk, excess_risk and
    distance_to_manifold are computed in the compiled loop at every save): five-scalar and manifold maps, 1000
    trajectories x 1000 steps, and one trajectory x 1e5 steps (1e4 quick)."""
    task = sl.SingleLocationTask(d=400, L=10)
    out = []
    n_long = 10_000 if quick else 100_000
    for manifold in (False, True):
        on = "manifold" if manifold else "sphere"
        for n_traj, n_steps in ((1000, 200 if quick else 1000), (1, n_long)):
            state0 = sl.sample_initial_state(task, n_traj, 0, on=on)
            call = (
                lambda st, n, man: (
                    lambda saveat: sl.map(
                        task, st, alpha=4e-3, n_steps=n, lam=0.1, manifold=man, saveat=saveat, warn_unconverged=False
                    )
                )
            )(state0, n_steps, manifold)
            what = "manifold" if manifold else "five-scalar"
            out.append(dense_save_result(f"single_location.map {what}, {n_traj} x {n_steps}", call, n_steps, n_traj))
    return out


def run(quick: bool) -> list[Result]:
    """Benchmarks of docs/models/single_location.md §6.3-§6.4 maps and the Section 5 figure runs (see the module
    docstring)."""
    return [
        _bench_manifold(quick),
        _bench_five(quick, 400),
        _bench_five(quick, 10**6),
        _bench_section5(quick),
        _bench_basins(quick),
        *_bench_dense(quick),
    ]
