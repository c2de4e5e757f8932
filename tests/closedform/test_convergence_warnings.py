"""Model-level convergence warnings (``dynamics.convergence``, issue 16 item 3).

Each model's ``map``/``flow`` warns by default when a run ends unconverged in the way its docstring states: every
unconverged end for dynamics with a finite fixed point (single_location, one-head icl_regression), only a step norm
that does not decrease (a cycle, chaos) for dynamics whose state grows without bound (the token-selection maps,
scan_snap, multi-head icl_regression). Each case is decided by a run whose behaviour is known independently of the
diagnostic: chaotic PGD windows of docs/models/single_location.md §7.4/§9.7 (end states that differ between
neighbouring starts by O(1)), absurd step sizes, and runs to a fixed point (a final step at rounding level).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from closedform import group_sparse as gs
from closedform import icl_regression as icl
from closedform import nearest_neighbor as nn
from closedform import random_walk as rw
from closedform import scan_snap as ss
from closedform import single_location as sl
from dynamics import DivergenceError, SaveAt, UnconvergedWarning

FINAL = SaveAt(final=True)


def _quiet(fn):
    """Run ``fn`` with every warning an error (a converging run must not warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


def _warns(fn, match):
    with pytest.warns(UnconvergedWarning, match=match) as record:
        out = fn()
    assert record[0].filename == __file__  # the warning points at the caller, not at the package
    return out


# --- single_location: fixed points; chaos, cycles and slow runs all warn ------------------------------------------


def test_single_location_chaotic_pgd_warns_and_a_run_to_a_fixed_point_does_not():
    task = sl.SingleLocationTask(d=1000, L=10)
    x0 = sl.sample_initial_state(task, 4, rng=1)
    run = _warns(
        lambda: sl.map(task, x0, alpha=4e-3, n_steps=5000, lam=0.5, saveat=FINAL),
        "4 of 4 trajectories are not converging",
    )
    # independent evidence of chaos: a start moved by 1e-9 ends O(1) away after 5000 steps
    near = sl.map(
        task,
        x0 + 1e-9 * np.array([1, -1, 0, 0, 0]),
        alpha=4e-3,
        n_steps=5000,
        lam=0.5,
        saveat=FINAL,
        warn_unconverged=False,
    )
    assert np.max(np.abs(near.kappa.values - run.kappa.values)) > 1e-2
    assert np.all(run.step_norm_trend.values == 1)
    # d = 400, lambda = 0.1: these two starts reach a fixed point (final step at rounding level)
    small = sl.SingleLocationTask(d=400, L=10)
    done = _quiet(
        lambda: sl.map(
            small, sl.sample_initial_state(small, 4, rng=1)[:2], alpha=4e-3, n_steps=40_000, lam=0.1, saveat=FINAL
        )
    )
    assert np.all(done.final_step_norm.values < 1e-15)
    # the same starts stopped early are still converging: a warning that says so
    _warns(
        lambda: sl.map(
            small, sl.sample_initial_state(small, 4, rng=1)[:2], alpha=4e-3, n_steps=3000, lam=0.1, saveat=FINAL
        ),
        "2 of 2 are still converging",
    )


def test_single_location_absurd_step_and_silencing():
    task = sl.SingleLocationTask(d=400, L=10)
    x0 = sl.sample_initial_state(task, 3, rng=2)
    # alpha = 50: each update jumps across the sphere; the projection keeps the state bounded, so it never settles
    _warns(lambda: sl.map(task, x0, alpha=50.0, n_steps=2000, lam=0.1, saveat=FINAL), "not converging")
    _quiet(lambda: sl.map(task, x0, alpha=50.0, n_steps=2000, lam=0.1, saveat=FINAL, warn_unconverged=False))
    # a decreasing schedule moves lambda at every step: only a step norm that does not decrease warns
    sched = sl.lam_schedule(0.1)
    _quiet(lambda: sl.map(task, x0[:1], alpha=4e-3, n_steps=3000, lam=sched, saveat=FINAL))
    _warns(lambda: sl.map(task, x0, alpha=50.0, n_steps=2000, lam=sched, saveat=FINAL), "not converging")


def test_single_location_period_two_cycle_of_the_step_size_instability_warns():
    # d = 400, alpha = 4e-3, constant lambda = 0.5 (docs/models/single_location.md §7.4): PGD ends on a period-2
    # cycle, shown independently of the diagnostic by x_n = x_{n-2} (to rounding) while x_n - x_{n-1} stays 0.02
    task = sl.SingleLocationTask(d=400, L=10)
    x0 = sl.sample_initial_state(task, 3, rng=0)
    n = 40_000
    run = _warns(
        lambda: sl.map(task, x0, alpha=4e-3, n_steps=n, lam=0.5, saveat=SaveAt(steps=[n - 2, n - 1, n])),
        "3 of 3 trajectories are not converging",
    )
    X = run.states()[..., :5]
    assert np.max(np.abs(X[:, 2] - X[:, 0])) < 1e-12  # rounding of a cycle reached long ago (|x| <= 1)
    assert np.min(np.max(np.abs(X[:, 2] - X[:, 1]), axis=1)) > 1e-2
    assert np.all(run.step_norm_trend.values == 1)


def test_full_pgd_carries_the_diagnostics_and_warns_on_chaos():
    task = sl.SingleLocationTask(d=1000, L=10)
    x0 = sl.sample_initial_state(task, 1, rng=1)[0]
    k0, v0, k_star, v_star = sl.vectors_from_state(task, x0, rng=3)
    run = _warns(
        lambda: sl.full_pgd(task, k0, v0, k_star, v_star, alpha=4e-3, n_steps=1500, lam=0.5, save_every=1500),
        "1 of 1 trajectories are not converging",
    )
    assert run.step_norm_trend.values.tolist() == [1] and not run.converged.values.any()
    red = sl.map(task, x0, alpha=4e-3, n_steps=1500, lam=0.5, saveat=FINAL, warn_unconverged=False)
    assert red.step_norm_trend.values.tolist() == [1]  # the five-scalar map makes the same diagnosis
    # d = 400, lambda = 0.1 from a start whose five-scalar run reaches its fixed point (test above): quiet
    small = sl.SingleLocationTask(d=400, L=10)
    y0 = sl.sample_initial_state(small, 4, rng=1)[0]
    done = _quiet(
        lambda: sl.full_pgd(
            small, *sl.vectors_from_state(small, y0, rng=3), alpha=4e-3, n_steps=40_000, lam=0.1, save_every=40_000
        )
    )
    assert done.converged.values.all()


# --- icl_regression: one head has a finite optimum; multi-head flows never converge --------------------------------

ICL = icl.ICLRegressionTask(d=5, L=20, sigma2=0.1)


def test_icl_one_head_flow_warns_until_it_reaches_the_optimum():
    _warns(lambda: icl.flow(ICL, [0.3], [0.3], (0.0, 5.0), saveat=FINAL), "1 of 1 are still converging")
    done = _quiet(lambda: icl.flow(ICL, [0.3], [0.3], (0.0, 2000.0), saveat=FINAL))
    assert done.converged.values.all()
    opt = icl.single_head_optimum(ICL)  # independent: the optimum by root finding on F (docs §7.3)
    # converged: the field is below 1e-8 at the end, so the state lies within 1e-8 / lambda_min of the optimum; 1e-6
    # allows a smallest Hessian eigenvalue down to 0.01 (measured distance 1e-11)
    assert abs(done.omega_0.values[0, -1] - opt.omega) < 1e-6
    _quiet(lambda: icl.flow(ICL, [0.3], [0.3], (0.0, 5.0), saveat=FINAL, warn_unconverged=False))


def test_icl_multi_head_flow_never_warns_and_an_absurd_lr_diverges_or_warns():
    _quiet(lambda: icl.flow(ICL, [0.1, -0.1], [0.1, -0.1], (0.0, 1000.0), saveat=FINAL))  # drifts on, by design
    with pytest.raises(DivergenceError):
        icl.map(ICL, [0.1, -0.1], [0.1, -0.1], lr=50.0, n_steps=2000, saveat=FINAL)
    _warns(lambda: icl.map(ICL, [0.3], [0.3], lr=0.01, n_steps=400, saveat=FINAL), "1 of 1 are still converging")


# --- token selection and scan_snap: the state grows by design; only cycles or chaos warn ---------------------------


def test_group_sparse_warns_for_a_cycling_step_only():
    task = gs.GroupSparseTask(d=2, D=4)
    run = _quiet(lambda: gs.map(task, 500, n_samples=300, rng=0, with_se=False, saveat=FINAL))
    assert not run.converged.values.any()  # unconverged (the weights grow), but the steps shrink: no warning
    # eta = 50: the step overshoots back and forth (step norm ~36 with no net progress)
    bad = _warns(
        lambda: gs.map(task, 500, n_samples=300, rng=0, eta=50.0, with_se=False, saveat=FINAL),
        "1 of 1 trajectories are not converging",
    )
    assert bad.step_norm_trend.values.tolist() == [1]
    _quiet(
        lambda: gs.map(task, 500, n_samples=300, rng=0, eta=50.0, with_se=False, saveat=FINAL, warn_unconverged=False)
    )


# The nearest-neighbour, random-walk and scan-snap losses saturate: an absurd step size makes the state grow
# steadily (drifting, code 2) rather than cycle, which is their normal long-run behaviour, so it does not warn.


def test_nearest_neighbor_absurd_step_drifts_without_warning():
    spec = nn.NearestNeighborTask(d=3, N=4, sigma=1.0, eta=1.0)
    prompts = nn.sample_prompts(spec, 200, 0)
    run = _quiet(lambda: nn.map(spec, prompts, 2000, saveat=FINAL))
    assert not run.converged.values.any() and run.step_norm_trend.values.tolist() == [-1]
    both = _quiet(lambda: nn.map(spec, [prompts, prompts], 2000, eta=[1.0, 1e4], saveat=FINAL))
    assert both.step_norm_trend.values.tolist() == [-1, 2]
    assert both.xi1.values[1, -1] > 10 * both.xi1.values[0, -1]  # the absurd step's state ran off


def test_random_walk_absurd_step_drifts_without_warning():
    task = rw.RandomWalkTask(K=5, N=6, M=20, p=0.5)
    run = _quiet(lambda: rw.map(task, 500, walks=200, rng=0, saveat=FINAL))
    assert run.step_norm_trend.values.tolist() == [-1]
    bad = _quiet(lambda: rw.map(task, 500, walks=200, rng=0, eta=1e5, saveat=FINAL))
    assert bad.step_norm_trend.values.tolist() == [2]
    _quiet(lambda: rw.flow(task, 50.0, walks=200, rng=0, saveat=FINAL))  # gradient flows of this model never warn


def test_scan_snap_runs_do_not_warn_and_carry_the_diagnostics():
    task = ss.ScanSnapTask(classes=ss.SequenceClasses.syn_small(), eta_Y=1.0, eta_Z=1.0)
    run = _quiet(lambda: ss.map(task, 300, momentum=0.9, saveat=FINAL))
    assert run.step_norm_trend.values.tolist() == [2]  # a slow phase: z moves steadily at an almost constant rate
    flow = _quiet(lambda: ss.flow(task, (0.0, 200.0), saveat=FINAL))
    assert {"final_step_norm", "converged", "step_norm_trend"} <= set(flow.data_vars)
    assert flow.final_step_norm.dims == ("trajectory",)
