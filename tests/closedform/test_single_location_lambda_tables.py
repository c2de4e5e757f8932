"""single_location's map kernels read their lambda constants from the engine's ``args`` (a table shared by the batch,
or one per trajectory when d differs between trajectories): a batched run with per-trajectory tables and a lambda
schedule equals the runs of one trajectory each, bit for bit (the engine's per-trajectory data contract)."""

from __future__ import annotations

import numpy as np

from closedform import single_location as sl
from dynamics import SaveAt


def test_table_is_shared_unless_it_differs_between_trajectories():
    task = sl.SingleLocationTask(d=40, L=6)
    alphas = np.array([1e-3, 4e-3, 8e-3])
    p, table, *_ = sl._batch_params(task, sl.lam_schedule(0.5), alphas, None, 3, 20)
    assert p.shape == (3, 5) and table.shape == (21 * sl._k.N_CONST,)  # alpha per row, one shared schedule table
    p, table, *_ = sl._batch_params(task, sl.lam_schedule(0.5), alphas, np.array([8, 40, 400]), 3, 20)
    assert p.shape == (3, 5) and table.shape == (3, 21 * sl._k.N_CONST)  # s = sqrt(d/2) enters the constants


def test_per_trajectory_tables_under_a_schedule_equal_one_run_each():
    ds, alphas = [8, 40, 400], [4e-3, 2e-3, 1e-3]
    state0 = sl.sample_initial_state(sl.SingleLocationTask(d=8, L=6), 1, 5)[0]
    kw = dict(n_steps=200, lam=sl.lam_schedule(0.5), saveat=SaveAt(every=10), warn_unconverged=False)
    for manifold in (False, True):
        start = np.r_[state0[:2], 0.0, 0.0, 0.0] if manifold else state0
        batch = sl.map(
            sl.SingleLocationTask(d=8, L=6), start, alpha=np.array(alphas), d=np.array(ds), manifold=manifold, **kw
        )
        for i, (d, alpha) in enumerate(zip(ds, alphas)):
            one = sl.map(sl.SingleLocationTask(d=d, L=6), start, alpha=alpha, manifold=manifold, **kw)
            for v in ("kappa", "nu", "theta", "eta", "rho", "lam", "risk", "excess_risk"):
                np.testing.assert_array_equal(batch[v].values[i], one[v].values[0], err_msg=f"{v} d={d}")
        # the runs differ, so a trajectory reading another's table would fail the equalities above
        assert not np.array_equal(batch["kappa"].values[0], batch["kappa"].values[1])
