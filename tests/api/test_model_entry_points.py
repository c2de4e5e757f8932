"""One API shape for every model (issue 16): task classes, ``TIME_UNIT``, the torch ``build``/``config`` entry points.

The reduced dynamics ``map``/``flow`` are checked against independent references in each model's test file; the
batched token-selection maps against the per-sample calls (tests/closedform/test_nearest_neighbor.py,
test_group_sparse.py, test_random_walk.py).
"""

from __future__ import annotations

import dataclasses
import importlib
import re

import numpy as np
import pytest

from closedform import models as model_registry

MODELS = model_registry.names(builtin=True)


def _configs(model: str) -> tuple[str, ...]:
    """The protocols each model's ``config`` dispatches to, as the API table of the docs lists them."""
    return tuple(re.findall(r'`"(\w+)"`', model_registry.get(model).summary["configs"]))


@pytest.mark.parametrize("model", MODELS)
def test_every_closedform_model_has_a_frozen_task_class_a_time_unit_and_the_shared_verbs(model):
    cf = importlib.import_module(f"closedform.{model}")
    record = model_registry.get(model)
    cls = record.resolve("params")
    assert cls is getattr(cf, cls.__name__)
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert isinstance(cf.TIME_UNIT, str) and cf.TIME_UNIT and record.resolve("time_unit") == cf.TIME_UNIT
    assert callable(cf.map) and callable(cf.theorem_predictions)
    assert hasattr(cf, "flow") == (record.flow is not None)
    has_fixed = record.fixed_points is not None  # the papers with a fixed-point analysis
    assert hasattr(cf, "fixed_points") == has_fixed and hasattr(cf, "classify") == has_fixed
    assert (record.classify is not None) == has_fixed


@pytest.mark.parametrize("model", MODELS)
def test_config_dispatches_to_its_protocols_and_names_the_choices_on_error(model):
    pytest.importorskip("torch")
    em = importlib.import_module(f"empirical.models.{model}")
    assert tuple(em.CONFIGS) == _configs(model)
    for name in _configs(model):
        assert em.CONFIGS[name].__name__ == f"_{name}_config"
    with pytest.raises(ValueError, match="name must be one of") as err:
        em.config("nope")
    for name in _configs(model):
        assert repr(name) in str(err.value)
    with pytest.raises(ValueError, match="name"):
        em.config(3)


def test_config_returns_what_the_protocol_returns():
    """``config(name, ...)`` is the protocol's factory called with the same arguments (compared field by field)."""
    pytest.importorskip("torch")
    from closedform import nearest_neighbor as nn
    from empirical.models import icl_regression as im
    from empirical.models import nearest_neighbor as nnm
    from empirical.models import single_location as slm

    assert im.config("paper", seeds=(0, 1), n_steps=7) == im._paper_config(seeds=(0, 1), n_steps=7)
    assert slm.config("fig5", (0,), n_steps=10, alpha=0.01) == slm._fig5_config((0,), n_steps=10, alpha=0.01)
    task = nn.NearestNeighborTask(d=3, N=4, sigma=1.0, eta=1.0)
    model = nnm.build(task, data=nnm.prompt_samples(task, 5, seeds=(0,)))
    assert nnm.config("gd", model, 3) == nnm._gd_config(model, 3)


def test_build_makes_each_models_torch_class_and_refuses_other_tasks():
    pytest.importorskip("torch")
    from closedform import group_sparse as gs
    from closedform import icl_regression as icl
    from closedform import nearest_neighbor as nn
    from closedform import random_walk as rw
    from closedform import scan_snap as ss
    from empirical.models import group_sparse as gm
    from empirical.models import icl_regression as im
    from empirical.models import nearest_neighbor as nnm
    from empirical.models import random_walk as rwm
    from empirical.models import scan_snap as ssm

    icl_task = icl.ICLRegressionTask(d=3, L=8, sigma2=0.1)
    model = im.build(icl_task, 2)
    assert isinstance(model, im.ICLAttention) and model.spec.H == 2 and model.spec.task == icl_task
    ss_task = ss.ScanSnapTask(classes=ss.SequenceClasses.syn_small(), eta_Y=1.0, eta_Z=0.5)
    model = ssm.build(ss_task, T=16)
    assert isinstance(model, ssm.ScanSnapTorch) and model.T == 16 and model.classes is ss_task.classes
    nn_task = nn.NearestNeighborTask(d=3, N=4, sigma=1.0, eta=1.0)
    assert isinstance(nnm.build(nn_task), nnm.NearestNeighborAttention)
    gs_task = gs.GroupSparseTask(d=2, D=4, eta=0.5, sigma_x=1.0, jstar=2)
    assert isinstance(gm.build(gs_task), gm.GroupSparseAttention)
    rw_task = rw.RandomWalkTask(K=3, N=4, M=10, p=0.7)
    assert isinstance(rwm.build(rw_task), rwm.RandomWalkAttention)
    for build in (im.build, ssm.build, nnm.build, gm.build, rwm.build):
        with pytest.raises(TypeError, match="task must be"):
            build(rw_task if build is not rwm.build else nn_task)
    with pytest.raises(ValueError, match="H"):
        im.build(icl_task, 2**40)
    with pytest.raises(ValueError, match="T"):
        ssm.build(ss_task, T=2**40)


def test_dispatch_config_passes_arguments_through():
    pytest.importorskip("torch")
    from empirical.models import dispatch_config

    presets = {"a": lambda *args, **kw: (args, kw)}
    assert dispatch_config(presets, "a", (1, 2), {"x": 3}) == ((1, 2), {"x": 3})
    with pytest.raises(ValueError, match="'a'"):
        dispatch_config(presets, "b", (), {})


def test_icl_time_unit_states_both_conventions_and_trajectories_keep_theirs():
    from closedform import icl_regression as icl
    from dynamics import SaveAt

    assert "lr * step" in icl.TIME_UNIT and "flow time" in icl.TIME_UNIT
    task = icl.ICLRegressionTask(d=3, L=8, sigma2=0.1)
    gd = icl.map(task, [0.1], [0.1], lr=0.5, n_steps=4, saveat=SaveAt(steps=(0, 4)))
    np.testing.assert_allclose(gd["time"].values, [0.0, 2.0])  # time = lr * step
    assert "lr * step" in gd.attrs["time_unit"]


# ----------------------------------------------------------------------------------------------------------------
# theorem_predictions: every key against an independent computation or a printed / hand-derived value


def test_single_location_theorem_predictions():
    """oracle_risk: spec single_location.md Sec. 10.1 point P3 ((kappa, nu) = (1, 1) is the oracle), printed to 11
    digits and to be reproduced to ~1e-10 relative (Sec. 10); the others by their hand formulas (Sec. 5.3-5.4 with
    uniform J0: R_lin = eps^2 + gamma^2 (L-1)/(L-1+gamma^2))."""
    import math

    from closedform import single_location as sl

    g2 = 0.5
    p = sl.theorem_predictions(sl.SingleLocationTask(d=400, L=10, gamma=math.sqrt(g2), noise=0.1), 1.0)
    assert p["oracle_risk"] == pytest.approx(4.1910314896, rel=1e-10)
    assert p["oracle_excess_risk"] == pytest.approx(4.1910314896 - 0.01, rel=1e-10)
    assert p["bayes_risk_lower_bound"] == pytest.approx(0.01, rel=1e-15)
    assert p["linear_risk"] == pytest.approx(0.01 + g2 * 9 / (9 + g2), rel=1e-14)
    assert p["null_risk"] == pytest.approx(0.01 + g2, rel=1e-15)
    with pytest.raises(ValueError, match="lam"):
        sl.theorem_predictions(sl.SingleLocationTask(d=8, L=2), -1.0)


def test_scan_snap_theorem_predictions():
    """Syn-Small (M = 34, K = 2): omega1 and t_peak eta_Y / K are printed in spec scan_snap.md Sec. 2.4 (0.455 and
    3.2755, half a unit of the last digit as tolerance); t_peak is also the argmax of the speed gamma(t) of
    ``speed_control`` on a grid of spacing 1e-4 (tolerance one spacing); at t_half the explicit decoder h of Lemma 6
    (``decoder_h``, another closed form) gives M h = ln(M - 1) (rounding 1e-12); t0 and t0p by hand."""
    import math

    from closedform import scan_snap as ss

    classes = ss.SequenceClasses.syn_small()
    M, K, eta_Y = classes.M, classes.K, 2.0
    p = ss.theorem_predictions(ss.ScanSnapTask(classes=classes, eta_Y=eta_Y, eta_Z=0.5))
    assert (M, K) == (34, 2)
    assert p["t0"] == pytest.approx(2 * K * math.log(M) / eta_Y, rel=1e-14)
    assert p["t0p"] == pytest.approx(K * math.log(M) / eta_Y, rel=1e-14)
    assert p["t0_omega1"] == pytest.approx(2 * (1 + p["omega1"]) * K * math.log(M) / eta_Y, rel=1e-14)
    assert abs(p["omega1"] - 0.455) <= 5e-4
    assert abs(p["t_peak"] * eta_Y / K - 3.2755) <= 5e-5
    grid = np.arange(0.5, 10.0, 1e-4)
    gamma, _ = ss.speed_control(grid, M=M, K=K, eta_Y=eta_Y, eta_Z=0.5)
    assert abs(grid[np.argmax(gamma)] - p["t_peak"]) <= 1e-4
    h = float(ss.decoder_h(p["t_half"] / K, M=M, eta_Y=eta_Y))
    assert M * h == pytest.approx(math.log(M - 1), abs=1e-12)
    with pytest.raises(TypeError, match="task"):
        ss.theorem_predictions(classes)


def test_icl_regression_theorem_predictions():
    """eta* and inf F by hand (spec §4.4, Eq. (4.3)); the GD optimum by golden-section search on the one-step GD
    risk written out here from Eq. (4.11) (xatol 1e-12); the single-head F by minimising the approximate loss F of
    Eq. (4.1) with H = 1 numerically (Nelder-Mead, tolerance 1e-8 in F)."""
    import scipy.optimize

    from closedform import icl_regression as icl

    d, L, s2 = 5, 40, 0.1
    task = icl.ICLRegressionTask(d=d, L=L, sigma2=s2)
    p = icl.theorem_predictions(task)
    assert p["eta_star"] == pytest.approx(L / (L + d * (1 + s2)), rel=1e-14)
    assert p["loss_infimum"] == pytest.approx(1 + s2 - L / (L + d * (1 + s2)), rel=1e-14)

    def r_gd(eta):
        return 1 + s2 - 2 * eta + eta**2 * (1 + (d + 1 + d * s2) / L)

    best = scipy.optimize.minimize_scalar(r_gd, bracket=(0.0, 0.8, 2.0), method="golden", tol=1e-12)
    assert p["gd_optimal_eta"] == pytest.approx(best.x, abs=1e-7)
    assert p["gd_optimal_risk"] == pytest.approx(best.fun, abs=1e-12)
    eta = p["eta_star"]
    assert p["dgd_optimal_risk"] == pytest.approx(
        1 + s2 - 2 * eta * (L - 1) / L + eta**2 * (L - 1) * (L + d + d * s2) / L**2, rel=1e-14
    )
    res = scipy.optimize.minimize(
        lambda x: float(icl.approx_loss(task, [x[0]], [x[1]])),
        [0.4, 1.0],
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-14},
    )
    assert p["single_head_F"] == pytest.approx(res.fun, abs=1e-8)


def test_nearest_neighbor_theorem_predictions():
    """loss_at_init: the per-prompt Monte Carlo loss at (0, sigma) (every prompt has the same loss there, so the MC
    mean equals it to rounding, 1e-12); first_step against one MC gradient step (5 standard errors of the MC
    gradient); k_d for d = 4 by hand (2 Gamma(2) / (sqrt(pi) Gamma(3/2)) = 4/pi); separation_gap by a loop over the
    definition."""
    import math

    from closedform import nearest_neighbor as nn

    task = nn.NearestNeighborTask(d=4, N=6, sigma=2.0, eta=3.0)
    prompts = nn.sample_prompts(task, 20_000, np.random.default_rng(5), labels=True)
    p = nn.theorem_predictions(task, t=[2.0, 100.0], C=3.0, prompts=prompts)
    assert p["loss_at_init"] == pytest.approx(nn.reduced_loss(0.0, task.sigma, prompts)[0], abs=1e-12)
    g, se = nn.reduced_gradient(0.0, task.sigma, prompts)
    mc_step = np.array([0.0, task.sigma]) - np.array([task.eta / task.d, task.eta]) * g
    mc_se = np.array([task.eta / task.d, task.eta]) * se
    assert np.all(np.abs(p["first_step"] - mc_step) <= 5 * mc_se + 1e-12)
    assert p["k_d"] == pytest.approx(4 / math.pi, rel=1e-14)
    np.testing.assert_allclose(p["loss_decay_bound"], [3.0 / math.log(2.0), 3.0 / math.log(100.0)], rtol=1e-14)
    gaps = []
    for b in range(50):
        X, xq, y, i = prompts.X[b], prompts.xq[b], prompts.y[b], prompts.istar[b]
        d_star = np.sum((X[i] - xq) ** 2)
        gaps.append(min([np.sum((X[j] - xq) ** 2) - d_star for j in range(task.N) if y[j] != y[i]] or [np.inf]))
    np.testing.assert_allclose(p["separation_gap"][:50], gaps, atol=1e-12)
    assert "separation_gap" not in nn.theorem_predictions(task)


def test_group_sparse_theorem_predictions():
    """Hand values at D = 6, eps_B = 0.1 (Sec. B.4 with the Theta(1) constants 1): T* = max(216, 1/0.216) = 216,
    loss order min(0.1, 1/36); beta^(1) = 0.5 / sqrt(2 pi) (Sec. B.3)."""
    import math

    from closedform import group_sparse as gs

    p = gs.theorem_predictions(gs.GroupSparseTask(d=4, D=6, jstar=2, eta=0.5), 0.1)
    assert p["horizon"] == 216.0
    assert p["loss_order"] == pytest.approx(1 / 36, rel=1e-15)
    assert p["attention_lower_bound"] == pytest.approx(1 - math.exp(-6), rel=1e-15)
    assert p["direction_error_bound"] == pytest.approx(0.6 * math.exp(-math.sqrt(6)), rel=1e-14)
    assert p["beta_step1"] == pytest.approx(0.5 / math.sqrt(2 * math.pi), rel=1e-15)
    with pytest.raises(ValueError, match="eps_B"):
        gs.theorem_predictions(gs.GroupSparseTask(d=4, D=6, jstar=2), 0.0)


def test_random_walk_theorem_predictions():
    """Theorem C1 (0 < p < 1): accuracy max(p, 1-p), attention one-hot on the parent (position N-1); Theorem C2
    (p = 1, N = 2K + 1): accuracy 1/K, uniform attention on the context; the direction floor recomputed here from the
    transition matrix (Frobenius distance of the normalised sqrt(Pi^T) and Pi^T, Sec. C.7)."""
    from closedform import random_walk as rw

    p = rw.theorem_predictions(rw.RandomWalkTask(K=6, N=13, p=0.7, M=14))
    assert p["optimal_accuracy"] == p["theorem_accuracy"] == 0.7
    assert not p["failure_theorem_applies"]
    np.testing.assert_array_equal(p["theorem_attention"], np.eye(13)[11])
    PiT = rw.transition_matrix(6, 0.7).T
    A, B = np.sqrt(PiT), PiT
    assert p["direction_limit_distance"] == pytest.approx(
        np.linalg.norm(A / np.linalg.norm(A) - B / np.linalg.norm(B)), rel=1e-12
    )
    q = rw.theorem_predictions(rw.RandomWalkTask(K=3, N=7, p=1.0, M=14))
    assert q["failure_theorem_applies"] and q["theorem_accuracy"] == pytest.approx(1 / 3, rel=1e-15)
    np.testing.assert_allclose(q["theorem_attention"], [1 / 6] * 6 + [0.0], rtol=1e-15)
    assert q["optimal_accuracy"] == 1.0 and q["direction_limit_distance"] == 0.0
    uncovered = rw.theorem_predictions(rw.RandomWalkTask(K=3, N=6, p=1.0, M=14))
    assert uncovered["theorem_accuracy"] is None and uncovered["theorem_attention"] is None


def test_single_location_transformer_build_draws_the_oracle_like_random_oracle_directions():
    """The same rng gives the same oracle directions as a direct draw (Sec. 8.8 recipe), for both kinds."""
    pytest.importorskip("torch")
    from empirical.models import single_location_transformer as slt

    task = slt.MultiLocationTask(d=8, L=4, K=2, gamma=0.7, noise=0.1)
    k_star, v_star = slt.random_oracle_directions(task, np.random.default_rng(3))
    for kind, cls in (("transformer", slt.TransformerLayer), ("multihead_erf", slt.MultiHeadErf)):
        model = slt.build(task, kind, rng=np.random.default_rng(3), n_heads=2)
        assert isinstance(model, cls) and model.H == 2
        np.testing.assert_array_equal(model.k_star_np, k_star)
        np.testing.assert_array_equal(model.v_star_np, v_star)
    with pytest.raises(ValueError, match="kind"):
        slt.build(task, "lstm")
