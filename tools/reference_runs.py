"""Small runs of every model's public maps and flows and of the engine's solvers, stored as reference arrays.

``python tools/reference_runs.py`` writes ``tests/data/reference_runs.npz`` (one array per run and variable, read
with ``allow_pickle=False``); ``tests/dynamics/test_engine_stored_runs.py`` reruns the same calls and requires every
array to be equal bit for bit, so a change of the engine's driver, of its kernel signature or of how a model hands
its data to a kernel cannot change a result silently. The file was written once, before those changes; rerun this script
only for a deliberate change of results, and say why in the commit.
"""

from __future__ import annotations

import pathlib
import sys
import warnings

import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "reference_runs.npz"


def _henon(k, x, p, out):
    out[0] = 1.0 - p[0] * x[0] * x[0] + x[1]
    out[1] = p[1] * x[0]


def _oscillator(t, y, p, dy):
    dy[0] = y[1]
    dy[1] = -p[0] * y[0] - p[1] * y[1]


def runs() -> dict:
    """name -> a function returning the run's Trajectory (small sizes; all six models and the engine's paths)."""
    from numba import njit

    from closedform import group_sparse as gs
    from closedform import icl_regression as icl
    from closedform import nearest_neighbor as nn
    from closedform import random_walk as rw
    from closedform import scan_snap as ss
    from closedform import single_location as sl
    from dynamics import RK4, Dopri5, Euler, SaveAt, Tsit5, integrate, iterate

    henon, osc = njit(_henon), njit(_oscillator)
    sl_task = sl.SingleLocationTask(d=40, L=6)
    sl_x0 = sl.sample_initial_state(sl_task, 5, 3)
    icl_task = icl.ICLRegressionTask(d=5, L=40, sigma2=0.1)
    rng = np.random.default_rng(4)
    om0, mu0 = rng.normal(0, 0.05, (3, 4)), rng.normal(0, 0.05, (3, 4))
    ss_task = ss.ScanSnapTask(
        classes=ss.SequenceClasses.syn(2, 2, num_common=1, num_common_per_last=1, num_unique=0), eta_Y=1.0, eta_Z=0.5
    )
    ss_small = ss.ScanSnapTask(classes=ss.SequenceClasses.syn_small(), eta_Y=1.0, eta_Z=1.0)
    nn_task = nn.NearestNeighborTask(d=3, N=5, sigma=2.0, eta=1.0)
    nn_prompts = nn.sample_prompts(nn_task, 30, 1, labels=True)
    gs_task = gs.GroupSparseTask(d=3, D=4, sigma_x=1.0, jstar=2, eta=0.5)
    rw_task = rw.RandomWalkTask(K=5, N=6, M=20, p=0.5)
    X0 = np.random.default_rng(0).uniform(-0.1, 0.1, size=(4, 2))
    return {
        "sl_five": lambda: sl.map(
            sl_task,
            sl_x0,
            alpha=np.array([4e-3, 1e-2, 2e-3, 4e-3, 5e-2]),
            n_steps=300,
            lam=0.1,
            saveat=SaveAt(n=7),
            warn_unconverged=False,
        ),
        "sl_five_schedule": lambda: sl.map(
            sl_task,
            sl_x0[:2],
            alpha=4e-3,
            n_steps=120,
            lam=np.linspace(0.3, 0.05, 121),
            saveat=SaveAt(n=5),
            warn_unconverged=False,
        ),
        "sl_five_stop": lambda: sl.map(
            sl_task,
            sl_x0,
            alpha=0.05,
            n_steps=400,
            lam=0.1,
            saveat=SaveAt(every=50),
            converged=1e-6,
            warn_unconverged=False,
        ),
        "sl_manifold": lambda: sl.map(
            sl_task,
            sl.sample_initial_state(sl_task, 4, 5, on="manifold"),
            alpha=4e-3,
            n_steps=250,
            lam=0.1,
            manifold=True,
            saveat=SaveAt(log=6),
            warn_unconverged=False,
        ),
        "icl_map": lambda: icl.map(
            icl_task, om0, mu0, lr=0.05, n_steps=200, saveat=SaveAt(every=25), warn_unconverged=False
        ),
        "icl_flow": lambda: icl.flow(icl_task, om0, mu0, (0.0, 20.0), saveat=SaveAt(n=6), warn_unconverged=False),
        "icl_symmetric": lambda: icl.symmetric_flow(icl_task, om0[:, 0], mu0[:, 0], (0.0, 5.0), saveat=SaveAt(n=4)),
        "ss_flow": lambda: ss.flow(ss_task, (0.0, 5.0), saveat=SaveAt(n=5)),
        "ss_flow_full": lambda: ss.flow(ss_task, (0.0, 5.0), saveat=SaveAt(n=5), lumped=False),
        "ss_map": lambda: ss.map(ss_task, 150, momentum=0.5, saveat=SaveAt(n=4), warn_unconverged=False),
        "ss_composite": lambda: ss.composite_flow(ss_small, (0.0, 50.0), saveat=SaveAt(n=4)),
        "nn_map": lambda: nn.map(nn_task, nn_prompts, 200, saveat=SaveAt(n=5), warn_unconverged=False),
        "gs_map": lambda: gs.map(gs_task, 150, n_samples=60, rng=2, saveat=SaveAt(n=4), warn_unconverged=False),
        "rw_map": lambda: rw.map(rw_task, 150, walks=40, rng=3, saveat=SaveAt(n=4), warn_unconverged=False),
        "rw_flow": lambda: rw.flow(rw_task, 3.0, walks=40, rng=3, saveat=SaveAt(n=4)),
        "engine_henon": lambda: iterate(henon, X0, 600, params=[1.4, 0.3], saveat=SaveAt(n=9)),
        "engine_henon_rows": lambda: iterate(
            henon, X0[:1], 300, params=[[1.4, 0.3], [1.2, 0.3], [0.2, 0.1]], saveat=SaveAt(every=100), converged=1e-12
        ),
        "engine_rk4": lambda: integrate(
            osc, X0, (0.0, 30.0), params=[4.0, 0.1], solver=RK4(dt=0.01), saveat=SaveAt(ts=[0.0, 1.005, 12.5, 30.0])
        ),
        "engine_euler": lambda: integrate(
            osc, X0, (0.0, 3.0), params=[4.0, 0.1], solver=Euler(dt=0.01), saveat=SaveAt(every=50)
        ),
        "engine_dopri5": lambda: integrate(
            osc, X0, (0.0, 40.0), params=[4.0, 0.1], solver=Dopri5(), saveat=SaveAt(n=7), converged=1e-3
        ),
        "engine_tsit5": lambda: integrate(
            osc, X0, (0.0, 10.0), params=[4.0, 0.1], solver=Tsit5(rtol=1e-6), saveat=SaveAt(log=5)
        ),
    }


def arrays(traj) -> dict:
    """Every numeric variable and coordinate of a Trajectory, as plain arrays."""
    out = {}
    for name in list(traj.data_vars) + ["time", "step"]:
        values = np.asarray(traj[name].values)
        if values.dtype.kind in "fiub":
            out[name] = values
    return out


def main() -> int:
    stored = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for run_name, run in runs().items():
            for var, values in arrays(run()).items():
                stored[f"{run_name}/{var}"] = values
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez(OUT, **stored)
    sys.stdout.write(f"wrote {len(stored)} arrays to {OUT}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
