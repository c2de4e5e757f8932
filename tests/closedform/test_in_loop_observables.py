"""Observables computed in the compiled loop of the public maps and flows (risks, overlaps at every save).

single_location.map saves risk, excess_risk and distance_to_manifold from the engine's ``observe``/``step_observe``
hooks with the series form of zeta that its step uses; the reference is the risk API (``sl.risk``: the 16-node
quadrature of zeta, the arithmetic of the former Python pass over the saved rows), at the lambda of each saved row.
The fused step-and-observe kernels must equal the separate observable bit for bit, and leave the states bit for bit
those of the plain step. nearest_neighbor, group_sparse and random_walk compute their diagnostics in the loop in the
arithmetic of their numpy functions, so those are equal bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from closedform import _single_location_kernels as K
from closedform import single_location as sl
from dynamics import SaveAt, iterate

EPS64 = np.finfo(np.float64).eps


def _risk_tol(task, theta):
    """Tolerance of |map risk - sl.risk|: the two differ only in zeta (series form against the 16-node quadrature;
    both within 2e-15 relative of mpmath, test_model_step_kernels.py) and, on M, in m = c kappa against t / q
    (1 ulp, moving erf and zeta by ~1 ulp). zeta enters the risk with weight s^2 theta^2 + gamma^2, so it moves it
    by <= 4e-15 (s^2 theta^2 + gamma^2); the ~15 other terms are each at most ~gamma^2 L + eps^2 here and are summed
    in the same order, so the changed partial sums add <= 16 ulp of that scale."""
    return 4e-15 * (task.s**2 * theta**2 + task.gamma**2) + 16 * EPS64 * (task.gamma**2 * task.L + task.eps**2 + 1.0)


def _api_risk(task, tr, lam=None):
    names = ("kappa", "nu", "theta", "eta", "rho")
    cols = [tr[v].values.ravel() for v in names]
    lam = tr["lam"].values.ravel() if lam is None else lam.ravel()
    return sl.risk(task, lam, *cols).reshape(tr["kappa"].shape)


@pytest.mark.parametrize("manifold", [False, True])
def test_map_risk_equals_the_risk_api_at_every_save(manifold):
    task = sl.SingleLocationTask(d=400, L=10, noise=0.3)
    state0 = sl.sample_initial_state(task, 6, 0, on="manifold" if manifold else "sphere")
    lam = sl.lam_schedule(0.5, 2e-3)  # a schedule: every saved row has its own lambda (table row)
    tr = sl.map(
        task,
        state0,
        alpha=4e-3,
        n_steps=400,
        lam=lam,
        manifold=manifold,
        saveat=SaveAt(every=1),
        warn_unconverged=False,
    )
    ref = _api_risk(task, tr)
    tol = _risk_tol(task, np.abs(tr["theta"].values))
    assert np.all(np.abs(tr["risk"].values - ref) <= tol)
    np.testing.assert_array_equal(tr["excess_risk"].values, tr["risk"].values - task.eps**2)
    dist = np.sqrt(tr["theta"].values ** 2 + tr["eta"].values ** 2 + tr["rho"].values ** 2)
    np.testing.assert_array_equal(tr["distance_to_manifold"].values, dist)
    # a risk read at the next row's lambda (an off-by-one in the table) is far outside the tolerance
    wrong = _api_risk(task, tr, lam=lam(tr["step"].values + 1)[None, :] * np.ones(tr["kappa"].shape))
    assert np.max(np.abs(tr["risk"].values - wrong) - tol) > 0


@pytest.mark.parametrize("manifold", [False, True])
def test_fused_observables_equal_the_separate_ones_and_keep_the_states(manifold):
    task = sl.SingleLocationTask(d=400, L=10, noise=0.1)
    state0 = sl.sample_initial_state(task, 5, 3, on="manifold" if manifold else "sphere")
    alpha = np.array([1e-3, 2e-3, 4e-3, 4e-3, 8e-3])  # per-trajectory rows
    tr = sl.map(
        task,
        state0,
        alpha=alpha,
        n_steps=300,
        lam=0.1,
        manifold=manifold,
        saveat=SaveAt(every=1),
        warn_unconverged=False,
    )
    p, table, _, _, _, _ = sl._batch_params(task, 0.1, alpha, None, 5, 300)
    step, observe = (K.manifold_step, K.manifold_observe) if manifold else (K.five_step, K.five_observe)
    names = ["kappa", "nu", "lam"] if manifold else ["kappa", "nu", "theta", "eta", "rho", "lam"]
    Y = np.stack([tr[v].values for v in names], axis=-1)
    plain = iterate(step, Y[:, 0], 300, params=p, args=(table,), saveat=SaveAt(every=1))
    np.testing.assert_array_equal(plain.states(), Y)  # the fused step leaves the trajectory bit for bit
    out = np.empty(3)
    for i in range(5):
        for j in range(0, 301, 7):
            observe(j, Y[i, j], p[i], (table,), out)
            assert out[0] == tr["risk"].values[i, j] and out[1] == tr["excess_risk"].values[i, j]


@pytest.mark.parametrize("manifold", [False, True])
def test_dense_saves_equal_sparse_saves(manifold):
    # a row saved by a dense run (observables from the fused step) equals the same row of a sparse run (observables
    # mostly from the separate observable), states and observables bit for bit, under a lambda schedule
    task = sl.SingleLocationTask(d=400, L=10, noise=0.2)
    state0 = sl.sample_initial_state(task, 5, 4, on="manifold" if manifold else "sphere")
    kw = dict(alpha=4e-3, n_steps=300, lam=sl.lam_schedule(0.5, 2e-3), manifold=manifold, warn_unconverged=False)
    dense = sl.map(task, state0, saveat=SaveAt(every=1), **kw)
    sparse = sl.map(task, state0, saveat=SaveAt(every=30), **kw)
    assert {"risk", "excess_risk", "distance_to_manifold"} <= set(sparse.data_vars)
    for name in sparse.data_vars:
        if "time" in sparse[name].dims:
            np.testing.assert_array_equal(dense[name].values[:, ::30], sparse[name].values, err_msg=name)


def test_frozen_states_under_a_schedule_use_their_own_lambda():
    # a state frozen by the converged stop keeps its lambda while the table moves on: the observable must use the
    # state's lambda (its own constants), not the row of the save step
    task = sl.SingleLocationTask(d=400, L=10)
    state0 = sl.sample_initial_state(task, 2, 1)  # these two stop at steps 11 722 and 11 583 (1e-8, lambda 0.1)
    lams = np.full(14_001, 0.1)
    lams[12_000:] = 0.2  # a step in lambda after the runs have converged and frozen
    tr = sl.map(
        task,
        state0,
        alpha=4e-3,
        n_steps=14_000,
        lam=lams,
        converged=1e-8,
        saveat=SaveAt(every=500),
        warn_unconverged=False,
    )
    frozen = tr["stopped_at"].values
    assert np.all((frozen > 0) & (frozen < 12_000))
    assert np.all(tr["lam"].values[:, -1] == 0.1)
    ref = _api_risk(task, tr)
    assert np.all(np.abs(tr["risk"].values - ref) <= _risk_tol(task, np.abs(tr["theta"].values)))
    wrong = _api_risk(task, tr, lam=np.full(tr["kappa"].shape, 0.2))
    assert np.max(np.abs(tr["risk"].values[:, -1] - wrong[:, -1])) > 1e-6


def test_per_trajectory_dimension_risk():
    task = sl.SingleLocationTask(d=400, L=10)
    state0 = sl.sample_initial_state(task, 1, 2)
    ds = np.array([8, 400, 10_000])
    tr = sl.map(task, state0, alpha=4e-4, n_steps=50, lam=0.05, d=ds, saveat=SaveAt(every=10), warn_unconverged=False)
    for i, d in enumerate(ds):
        t_d = sl.SingleLocationTask(d=int(d), L=10)
        ref = sl.risk(t_d, 0.05, *(tr[v].values[i] for v in ("kappa", "nu", "theta", "eta", "rho")))
        assert np.all(np.abs(tr["risk"].values[i] - ref) <= _risk_tol(t_d, np.abs(tr["theta"].values[i])))


# ----------------------------------------------------------------------------------------------------------------
# nearest_neighbor.map: the diagnostics of every save in the compiled loop, against the numpy formulas of
# nearest_neighbor.diagnostics (np.mean, np.std(ddof=1), np.quantile on the per-prompt statistics)


@pytest.mark.parametrize("n_prompts, quantile", [(1, 0.05), (7, 0.05), (200, 0.37), (3000, 0.05)])
def test_nearest_neighbor_diagnostics_equal_numpy_at_every_save(n_prompts, quantile):
    # the kernels replay numpy's pairwise summation and its 'linear' quantile rule, so equality is exact (NaN for
    # the standard errors of a single prompt); 3000 prompts take the halving branch of the pairwise rule
    from closedform import nearest_neighbor as nn

    task = nn.NearestNeighborTask(d=3, N=5, sigma=2.0, eta=1.0)
    prompts = nn.sample_prompts(task, n_prompts, n_prompts)
    tr = nn.map(task, prompts, 40, saveat=SaveAt(steps=[0, 1, 7, 40]), quantile=quantile, warn_unconverged=False)
    for k, (xi1, xi2) in enumerate(tr.states()[0]):
        want = nn.diagnostics(xi1, xi2, prompts, quantile=quantile)
        for name in nn.DIAGNOSTIC_NAMES:
            np.testing.assert_array_equal(tr[name].values[0, k], want[name], err_msg=f"{name} at save {k}")


def test_nearest_neighbor_fused_step_keeps_the_states():
    # the fused step-and-diagnostics kernel must leave the GD states bit for bit those of the plain step
    from closedform import _nearest_neighbor_kernels as NK
    from closedform import nearest_neighbor as nn

    task = nn.NearestNeighborTask(d=3, N=5, sigma=2.0, eta=1.0)
    prompts = nn.sample_prompts(task, 50, 3)
    fused = nn.map(task, prompts, 300, saveat=SaveAt(every=1), warn_unconverged=False)
    plain = iterate(
        NK.gd_step,
        np.array([0.0, task.sigma]),
        300,
        params=nn.pack_params(task, prompts),
        args=nn._kernel_args(task, prompts),
        saveat=SaveAt(every=1),
        names=["xi1", "xi2"],
    )
    np.testing.assert_array_equal(fused.states(), plain.states())
    assert np.isfinite(fused.L.values).all()


def test_pairwise_sum_rejects_a_plain_running_sum():
    # the check above can fail: a running sum differs from numpy's pairwise sum on values of mixed magnitude
    from closedform import _numpy_rules as R

    v = np.random.default_rng(0).normal(size=1000) * 10.0 ** np.arange(-4, 6, 0.01)
    assert R.pairwise_sum(v, 0, v.size) == np.sum(v)
    running = 0.0
    for x in v:
        running += x
    assert running != np.sum(v)


# ----------------------------------------------------------------------------------------------------------------
# group_sparse.map: loss, accuracy, attention, gaps and (with_se) the Monte Carlo gradient with its standard errors
# of every save in the compiled loop, against reduced_evaluate, _gaps and reduced_gradient (numpy), exactly


@pytest.mark.parametrize("n_samples, with_se", [(2, True), (40, False), (400, True), (3000, True)])
def test_group_sparse_diagnostics_equal_numpy_at_every_save(n_samples, with_se):
    from closedform import group_sparse as gs

    task = gs.GroupSparseTask(d=3, D=4)
    rs = gs.population_sample(task, n_samples, n_samples)
    tr = gs.map(task, 30, rs=rs, saveat=SaveAt(steps=[0, 1, 5, 30]), with_se=with_se, warn_unconverged=False)
    names = set(tr.data_vars)
    for k, x in enumerate(tr.states()[0]):
        want = gs.reduced_evaluate(task, x, rs) | gs._gaps(x[3:])[0]
        if with_se:
            grad, se = gs.reduced_gradient(task, x, rs)
            for q, name in enumerate(gs.STATE_NAMES):
                want |= {f"grad_{name}": grad[q], f"se_grad_{name}": se[q]}
        assert set(want) <= names
        for name, value in want.items():
            np.testing.assert_array_equal(tr[name].values[0, k], value, err_msg=f"{name} at save {k}")
    assert with_se or not any(v.startswith("grad_") for v in names)


def test_group_sparse_fused_step_keeps_the_states():
    from closedform import _group_sparse_kernels as GK
    from closedform import group_sparse as gs

    task = gs.GroupSparseTask(d=3, D=4)
    rs = gs.population_sample(task, 300, 5)
    fused = gs.map(task, 200, rs=rs, saveat=SaveAt(every=1), warn_unconverged=False)
    plain = iterate(
        GK.reduced_step,
        np.zeros(gs.N_STATE),
        200,
        params=gs.pack_params(task, rs),
        args=gs._kernel_args(task, rs),
        saveat=SaveAt(every=1),
        names=list(gs.STATE_NAMES),
    )
    np.testing.assert_array_equal(fused.states(), plain.states())


# ----------------------------------------------------------------------------------------------------------------
# random_walk.map / flow: the training loss, gradient SEs and direction to sqrt(C_hat^T), and with test walks the
# diagnostics of every save in the compiled loop, against the numpy functions (reduced_gradient, direction_error,
# diagnostics), exactly: norms and weighted means are the BLAS dot numpy calls, sums numpy's pairwise rule


def _rw_numpy_observables(rw, task, train, test, x):
    V, a, c = rw.unpack_state(task, x)
    g = rw.reduced_gradient(task, train, V, a, c)
    want = {
        "loss": g.loss,
        "se_loss": g.se_loss,
        "se_grad_V": g.se_V.max(),
        "se_grad_a": g.se_a.max(),
        "se_grad_c": g.se_c.max(),
        "dist_V_sqrtChat": rw.direction_error(V, np.sqrt(rw.empirical_transitions(train, task.K).T)),
    }
    return want | ({} if test is None else rw.diagnostics(task, V, a, c, test))


@pytest.mark.parametrize(
    "K, N, n_train, n_test, exact",
    [(5, 6, 40, None, False), (3, 4, 1, 7, False), (9, 7, 60, 300, False), (4, 5, None, 3000, True)],
)
def test_random_walk_observables_equal_numpy_at_every_save(K, N, n_train, n_test, exact):
    # K = 9 takes numpy's eight-accumulator pairwise block in the row norms; 3000 test walks take the halving
    # branch and a BLAS dot over long vectors; the exact law (enumerated walks) has zero standard errors
    from closedform import random_walk as rw

    task = rw.RandomWalkTask(K=K, N=N, M=20, p=0.3)
    train = rw.enumerate_walks(task) if exact else rw.sample_walks(task, n_train, 1)
    test = None if n_test is None else rw.sample_walks(task, n_test, 2)
    tr = rw.map(task, 60, walks=train, test=test, saveat=SaveAt(steps=[0, 1, 9, 60]), warn_unconverged=False)
    for k, x in enumerate(tr.states()[0]):
        want = _rw_numpy_observables(rw, task, train, test, x)
        assert set(want) <= set(tr.data_vars)
        for name, value in want.items():
            np.testing.assert_array_equal(tr[name].values[0, k], value, err_msg=f"{name} at save {k}")
    fl = rw.flow(task, 2.0, walks=train, test=test, saveat=SaveAt(n=3))
    for k, x in enumerate(fl.states()[0]):
        for name, value in _rw_numpy_observables(rw, task, train, test, x).items():
            np.testing.assert_array_equal(fl[name].values[0, k], value, err_msg=f"flow {name} at save {k}")


def test_random_walk_dense_saves_equal_sparse_and_keep_the_states():
    # the fused step-and-observables kernel leaves the GD states bit for bit those of the plain step; every saved
    # row of a dense run equals the same row of a sparse run (states and observables)
    from closedform import _random_walk_kernels as RK
    from closedform import random_walk as rw

    task = rw.RandomWalkTask(K=5, N=6, M=20, p=0.5)
    train, test = rw.sample_walks(task, 30, 3), rw.sample_walks(task, 50, 4)
    eta = np.array([0.5, 1.0, 2.0])
    dense = rw.map(task, 200, walks=train, test=test, eta=eta, saveat=SaveAt(every=1), warn_unconverged=False)
    sparse = rw.map(task, 200, walks=train, test=test, eta=eta, saveat=SaveAt(every=50), warn_unconverged=False)
    for name in sparse.data_vars:
        if "time" in sparse[name].dims:
            np.testing.assert_array_equal(dense[name].values[:, ::50], sparse[name].values, err_msg=name)
    plain = iterate(
        RK.reduced_step,
        np.zeros(task.n_state),
        200,
        params=np.stack([[task.rho, task.eps, e] for e in eta]),
        args=rw._kernel_args(task, train),
        saveat=SaveAt(every=1),
    )
    np.testing.assert_array_equal(dense.states(), plain.states())


def test_random_walk_stable_argsort_is_numpys():
    # ties (equal attention weights) must keep their original order, as np.argsort(kind="stable"): the weighted
    # quantile's running sum adds the weights in that order; an unstable order (quicksort) differs on ties
    from closedform import _random_walk_kernels as RK

    rng = np.random.default_rng(5)
    for n in (1, 2, 30, 64, 65, 500):
        v = rng.integers(0, 4, n).astype(np.float64) / 3.0
        np.testing.assert_array_equal(RK._stable_argsort(v), np.argsort(v, kind="stable"))
    # the data have ties on which an unstable sort (numpy's introsort at 500 values) orders differently
    assert not np.array_equal(np.argsort(v, kind="quicksort"), np.argsort(v, kind="stable"))
