"""Tests of empirical/models/single_location_transformer.py (spec single_location.md Secs. 8.7-8.9).

Independent computations used:
* the closed-form risk of closedform.single_location (spec Sec. 4.2) for the erf heads, directly (H = K = 1) and
  through an exact decomposition of the two-head, two-location risk (gamma = 1, heads in orthogonal subspaces);
* a numpy forward of the FULL (L+1)-row Transformer layer, written here from the spec's formulas, on data from the
  numpy sampler closedform.single_location.sample_data (a second, independent Monte Carlo);
* numpy finite differences for the MLP Jacobian of the MLP-corrected read-out;
* short seeded training runs through empirical.train, with thresholds from the spec's numbers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import softmax as sp_softmax

from closedform import single_location as cf
from closedform.special import phi as cf_phi
from closedform.special import zeta as cf_zeta
from dynamics.saveat import SaveAt
from empirical.models import single_location_transformer as slt
from empirical.seeding import BlockRNG, stream_keys
from empirical.train import Schedule, TrainConfig, train
from dynamics.testing import assert_mc_close, assert_mc_rejects, mean_and_se
from tests._training import assert_seed_equals_single

DT = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _squared_errors(model, params, task, n, seed, hyper=None, chunk=20_000, sampler="sample"):
    """Per-sample squared errors (Y_hat - Y)^2 of ``model`` on n fresh samples, and the model's own loss.

    ``sampler="sample"``: :func:`slt.sample_tokens` from a torch generator; ``"draw"``: the model's ``draw`` from a
    counter-keyed ``BlockRNG`` (the trainer's sampler), one block per chunk.
    """
    g = _gen(seed)
    errs, losses = [], []
    for j, start in enumerate(range(0, n, chunk)):
        m = min(chunk, n - start)
        if sampler == "draw":
            batch = model.draw(
                BlockRNG(stream_keys([seed], "data"), j, torch.device("cpu")), m, device=torch.device("cpu"), dtype=DT
            )
        else:
            b = slt.sample_tokens(task, model.k_star_np, model.v_star_np, g, m)
            batch = {"X": b["X"][None], "y": b["y"][None]}
        with torch.no_grad():
            errs.append(((model.predict(params, batch["X"], hyper) - batch["y"]) ** 2)[0].numpy())
            losses.append(float(model.loss(params, batch, hyper)[0]) * m)
    errs = np.concatenate(errs)
    # the model's loss is the mean of the same squared errors (mean-of-squares normalisation, no 1/2)
    np.testing.assert_allclose(sum(losses) / n, errs.mean(), rtol=1e-12)
    return errs


# -------------------------------------------------------------------------------------------------------------------
# task, sampler, validation


def test_oracle_directions_orthonormal_and_qr_recipe():
    task = slt.MultiLocationTask(d=12, L=5, K=2)
    k, v = slt.random_oracle_directions(task, 3)
    frame = np.stack([k[0], v[0], k[1], v[1]])
    np.testing.assert_allclose(frame @ frame.T, np.eye(4), atol=1e-14)
    # spec Sec. 8.8: the Q factor of a d x 4 Gaussian matrix, i.e. Gram-Schmidt of its columns in order
    G = np.random.default_rng(3).standard_normal((12, 4))
    gs = G[:, 0] / np.linalg.norm(G[:, 0])
    np.testing.assert_allclose(k[0], gs, atol=1e-14)


def test_sampler_law_moments():
    task = slt.MultiLocationTask(d=10, L=6, K=2, gamma=0.8, noise=0.3)
    k, v = slt.random_oracle_directions(task, 0)
    n = 40_000
    b = slt.sample_tokens(task, k, v, _gen(1), n)
    X, y, J = b["X"].numpy(), b["y"].numpy(), b["J"].numpy()
    assert X.shape == (n, 6, 10) and y.shape == (n,) and J.shape == (n, 2)
    assert np.all(J[:, 0] != J[:, 1])
    # E[Y^2] = K gamma^2 + eps^2 (spec Sec. 1 remark, Sec. 8.8), 5 SE rule of dynamics.testing
    m, se = mean_and_se(y**2)
    assert_mc_close(m, se, task.null_risk, what="E[Y^2]")
    assert_mc_rejects(m, se, task.gamma**2 + task.eps**2, what="E[Y^2] of a one-location law")
    # J_1 uniform over the L positions: frequency 1/L, binomial SE
    freq = np.mean(J[:, 0] == 2)
    assert_mc_close(freq, math.sqrt((1 / 6) * (5 / 6) / n), 1 / 6, what="P(J_1 = 2)")
    # informative tokens: mean s k_i*, projection on k_i* has std gamma
    rows = np.arange(n)
    proj = X[rows, J[:, 1]] @ k[1]
    m, se = mean_and_se(proj)
    assert_mc_close(m, se, task.s, what="E[x_J2 . k_2*]")
    m, se = mean_and_se((proj - task.s) ** 2)
    assert_mc_close(m, se, task.gamma**2, what="Var[x_J2 . k_2*]")


def test_sampler_reproducible_and_single_location_case():
    task = cf.SingleLocationTask(d=8, L=4, noise=0.1)
    k, v = slt.random_oracle_directions(task, 0)
    a = slt.sample_tokens(task, k, v, _gen(5), 100)
    b = slt.sample_tokens(task, k, v, _gen(5), 100)
    assert torch.equal(a["X"], b["X"]) and torch.equal(a["y"], b["y"])
    assert a["J"].shape == (100, 1)
    assert slt.as_multi_location(task).K == 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"d": 3, "L": 5, "K": 2}, "d must be"),
        ({"d": 8, "L": 1, "K": 2}, "L must be"),
        ({"d": 8, "L": 5, "K": 0}, "K must be"),
        ({"d": 8, "L": 5, "K": 2, "gamma": 0.0}, "gamma"),
        ({"d": 8, "L": 5, "K": 2, "noise": -1.0}, "noise"),
    ],
)
def test_task_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        slt.MultiLocationTask(**kwargs)


def test_model_validation():
    task = slt.MultiLocationTask(d=8, L=5, K=2)
    k, v = slt.random_oracle_directions(task, 0)
    with pytest.raises(ValueError, match="n_heads"):
        slt.MultiHeadErf(task, k_star=k, v_star=v, n_heads=0)
    with pytest.raises(ValueError, match="orthonormal"):
        slt.TransformerLayer(task, k_star=k, v_star=k)
    with pytest.raises(ValueError, match="k_star must have shape"):
        slt.MultiHeadErf(task, k_star=k[:1], v_star=v)
    with pytest.raises(ValueError, match="lam_floor"):
        slt.MultiHeadErf(task, k_star=k, v_star=v, lam_floor=-1.0)
    with pytest.raises(ValueError, match="task must be"):
        slt.MultiHeadErf("task", k_star=k, v_star=v)
    model = slt.MultiHeadErf(task, k_star=k, v_star=v)
    with pytest.raises(ValueError, match="lam must be > 0"):
        model.lam({"lam": 0.0})


# -------------------------------------------------------------------------------------------------------------------
# erf heads against the closed form


@pytest.mark.parametrize(
    "case",
    [
        # spec Sec. 10.1 P5 (gamma = 1) and P6 (gamma = 1.5), and a gamma^2 = 1/2 point (P1's scalars at d = 40, L = 6)
        {"d": 20, "L": 5, "gamma": 1.0, "noise": 0.3, "lam": 0.5, "state": (0.2, 0.1, 0.3, 0.3, 0.5), "n": 200_000},
        {"d": 50, "L": 3, "gamma": 1.5, "noise": 0.0, "lam": 0.3, "state": (0.01, 0.02, 0.15, -0.1, 0.2), "n": 100_000},
        {
            "d": 40,
            "L": 6,
            "gamma": math.sqrt(0.5),
            "noise": 0.1,
            "lam": 1.0,
            "state": (0.3, 0.4, 0.1, -0.2, 0.25),
            "n": 100_000,
        },
    ],
)
def test_erf_head_loss_matches_closed_form_risk(case):
    task = cf.SingleLocationTask(d=case["d"], L=case["L"], gamma=case["gamma"], noise=case["noise"])
    k, v, k_star, v_star = cf.vectors_from_state(task, np.array(case["state"]), np.random.default_rng(0))
    model = slt.MultiHeadErf(task, k_star=k_star[None], v_star=v_star[None])
    params = {"k": torch.tensor(k).reshape(1, 1, -1), "v": torch.tensor(v).reshape(1, 1, -1)}
    hyper = {"lam": case["lam"]}
    probes = model.probes(params)
    np.testing.assert_allclose(
        [float(probes[n][0]) for n in ("kappa", "nu", "theta", "eta", "rho")], case["state"], atol=1e-12
    )
    m, se = mean_and_se(_squared_errors(model, params, task, case["n"], seed=11, hyper=hyper))
    exact = float(cf.risk(task, case["lam"], *case["state"]))
    assert_mc_close(m, se, exact, what="torch erf loss vs closed-form risk (docs/models/single_location.md §4.2)")
    # negative controls: the authors' coded risk without eps^2 and (L-1) zeta0 (spec Sec. 9.2) and a loss with 1/2
    coded = exact - task.eps**2 - (task.L - 1) * float(cf_zeta(0.0, case["lam"]))
    assert_mc_rejects(m, se, coded, what="risk without the noise-token constant (docs/models/single_location.md §9.2)")
    assert_mc_rejects(m, se, 0.5 * exact, what="risk with a factor 1/2")


def _head_vectors(state, basis):
    """Unit vectors k, v with the five scalars ``state`` on basis (k*, v*, e, f) (Gram-Schmidt, spec Sec. 4.1)."""
    kappa, nu, theta, eta, rho = state
    a = math.sqrt(1 - kappa**2 - eta**2)
    b = (rho - kappa * theta - eta * nu) / a
    c = math.sqrt(1 - theta**2 - nu**2 - b**2)
    return basis.T @ np.array([kappa, eta, a, 0.0]), basis.T @ np.array([theta, nu, b, c])


@pytest.mark.parametrize("sampler", ["sample", "draw"])
def test_two_head_two_location_loss_matches_decomposed_closed_form(sampler):
    """R = eps^2 + R_1 + R_2 + 2 m_1 m_2 for heads in orthogonal subspaces and gamma = 1 (derivation below).

    Head h uses span(k_h*, v_h*, e_h, f_h), orthogonal to the other head's; with gamma = 1 the other informative token
    is N(0, I) on that span, so head h sees the single-location law of spec Sec. 1 (risk R_h, Sec. 4.2, eps = 0), and
    the two heads' errors are independent given the locations with means m_h = E[A] + (L-1) E[B] = s theta phi_0 +
    g gamma rho phi_1 + (L-1) C rho (spec Sec. 4.2).
    """
    d, L, lam, eps = 20, 5, 0.5, 0.2
    task = slt.MultiLocationTask(d=d, L=L, K=2, gamma=1.0, noise=eps)
    Q = np.linalg.qr(np.random.default_rng(4).standard_normal((d, 8)))[0].T  # 8 orthonormal rows
    states = [(0.3, 0.4, 0.35, -0.2, 0.5), (0.5, 0.6, 0.3, 0.2, 0.5)]  # cross term 2 m_1 m_2 = 5.3
    heads = [_head_vectors(states[0], Q[[0, 1, 4, 5]]), _head_vectors(states[1], Q[[2, 3, 6, 7]])]
    model = slt.MultiHeadErf(task, k_star=Q[[0, 2]], v_star=Q[[1, 3]], n_heads=2)
    params = {
        "k": torch.tensor(np.stack([h[0] for h in heads]))[None],
        "v": torch.tensor(np.stack([h[1] for h in heads]))[None],
    }
    probes = model.probes(params)
    np.testing.assert_allclose([float(probes["kappa_1_1"][0]), float(probes["nu_0_0"][0])], [0.5, 0.4], atol=1e-12)
    assert abs(float(probes["kappa_0_1"][0])) < 1e-12  # head 0 is orthogonal to location 1's directions
    single = cf.SingleLocationTask(d=d, L=L, gamma=1.0, noise=0.0)
    s, g = single.s, lam
    C = 2 * lam / math.sqrt(math.pi * (1 + 2 * lam**2))
    r_h = [float(cf.risk(single, lam, *st)) for st in states]
    m_h = [
        s * st[2] * float(cf_phi(lam * s * st[0], g, 0))
        + g * st[4] * float(cf_phi(lam * s * st[0], g, 1))
        + (L - 1) * C * st[4]
        for st in states
    ]
    exact = eps**2 + sum(r_h) + 2 * m_h[0] * m_h[1]
    m, se = mean_and_se(_squared_errors(model, params, task, 200_000, seed=12, hyper={"lam": lam}, sampler=sampler))
    assert_mc_close(m, se, exact, what="two-head torch loss vs decomposed closed form")
    assert_mc_rejects(m, se, exact - 2 * m_h[0] * m_h[1], what="decomposition without the cross-head term")


def test_erf_step_zero_excess_risk_is_about_15():
    """Spec Sec. 8.8 (checked defaults): test excess risk ~ 15 at step 0 (d = 80, L = 10, K = H = 2, lambda_0 = 2)."""
    task = slt.MultiLocationTask(d=80, L=10, K=2, noise=0.1)
    k, v = slt.random_oracle_directions(task, 0)
    model = slt.MultiHeadErf(task, k_star=k, v_star=v, n_heads=2)
    cfg = TrainConfig(
        seeds=tuple(range(12)),
        n_steps=0,
        batch_size=5,
        lr=1e-3,
        eval_size=500,
        schedules={"lam": Schedule(value=2.0, kind="inverse_time", rate=1e-4)},
    )
    traj = train(model, cfg, device="cpu")
    excess = traj["excess_risk"].values[:, 0]
    # "~ 15" (spec, 8 runs); the mean over 12 random initialisations must lie within +-20% of it
    assert 12.0 < excess.mean() < 18.0, excess.mean()


# -------------------------------------------------------------------------------------------------------------------
# Transformer against an independent numpy forward


def _np_layer_norm(x):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


def _np_transformer(p, X):
    """Full (L+1)-row layer of spec Sec. 8.7 in numpy for one seed: p[name] without the seed axis; X (n, L, d)."""
    n, _L, d = X.shape
    H = p["W_K"].shape[0]
    Xp = np.concatenate([np.broadcast_to(p["z_reg"], (n, 1, d)), X], axis=1)
    Z = _np_layer_norm(Xp)
    mha = np.zeros_like(Xp)
    for h in range(H):
        Wo = p["W_O"][h] if "W_O" in p else np.eye(d)
        att = sp_softmax((Z @ p["W_Q"][h]) @ np.swapaxes(Z @ p["W_K"][h], 1, 2) / math.sqrt(d), axis=-1)
        mha += att @ Z @ p["W_V"][h] @ Wo
    X_mid = Xp + mha
    out = X_mid + np.maximum(_np_layer_norm(X_mid) @ p["W_1"] + p["b_1"], 0.0) @ p["W_2"] + p["b_2"]
    return out[:, 0] @ p["u"]


def _transformer_params(model, seed, q_scale=3.0):
    """Trained-looking parameters: the model's init plus a non-zero W_Q, biases and a larger read-out."""
    g = _gen(seed)
    params = model.init_params([g], device=torch.device("cpu"), dtype=DT)
    d = model.task.d
    params["W_Q"] = q_scale * torch.randn(params["W_Q"].shape, generator=g, dtype=DT) / math.sqrt(d)
    params["b_1"] = 0.3 * torch.randn(params["b_1"].shape, generator=g, dtype=DT)
    params["b_2"] = 0.3 * torch.randn(params["b_2"].shape, generator=g, dtype=DT)
    params["u"] = torch.randn(params["u"].shape, generator=g, dtype=DT) / math.sqrt(d)
    return params


@pytest.mark.parametrize("n_heads, K", [(1, 1), (2, 2)])
def test_transformer_register_row_equals_full_numpy_layer(n_heads, K):
    task = slt.MultiLocationTask(d=12, L=6, K=K, noise=0.1)
    k, v = slt.random_oracle_directions(task, 1)
    model = slt.TransformerLayer(task, k_star=k, v_star=v, n_heads=n_heads)
    params = _transformer_params(model, 2)
    assert ("W_O" in params) == (n_heads > 1)
    b = slt.sample_tokens(task, k, v, _gen(3), 50)
    torch_pred = model.predict(params, b["X"][None])[0].detach().numpy()
    np_pred = _np_transformer({n: t[0].numpy() for n, t in params.items()}, b["X"].numpy())
    # float64 rounding of a few hundred operations: relative 1e-12
    np.testing.assert_allclose(torch_pred, np_pred, rtol=1e-12, atol=1e-12)


def test_transformer_loss_matches_numpy_monte_carlo():
    """Torch loss on torch samples vs the numpy layer on closedform.sample_data samples (two independent MCs)."""
    task = cf.SingleLocationTask(d=16, L=6, noise=0.1)
    k_star, v_star = cf.random_oracle_directions(task, np.random.default_rng(5))
    model = slt.TransformerLayer(task, k_star=k_star[None], v_star=v_star[None])
    params = _transformer_params(model, 6)
    m_t, se_t = mean_and_se(_squared_errors(model, params, task, 60_000, seed=13))
    X, y, _ = cf.sample_data(task, 60_000, np.random.default_rng(14), k_star=k_star, v_star=v_star)
    p_np = {n: t[0].numpy() for n, t in params.items()}
    err_np = np.concatenate(
        [(_np_transformer(p_np, X[i : i + 10_000]) - y[i : i + 10_000]) ** 2 for i in range(0, 60_000, 10_000)]
    )
    m_n, se_n = mean_and_se(err_np)
    se = math.hypot(se_t, se_n)  # difference of two independent means
    assert_mc_close(m_t, se, m_n, what="torch Transformer loss vs numpy Monte Carlo")
    assert_mc_rejects(m_t, se, 0.5 * m_n, what="numpy MSE with a factor 1/2")


def test_transformer_probes_on_constructed_weights():
    task = slt.MultiLocationTask(d=10, L=4, K=1)
    k_star, v_star = slt.random_oracle_directions(task, 0)
    model = slt.TransformerLayer(task, k_star=k_star, v_star=v_star)
    params = model.init_params([_gen(0)], device=torch.device("cpu"), dtype=DT)
    # step 0: W_Q = 0, so QK = 0: k_hat := 0, kappa = 0 and the ratio := 1 (documented conventions)
    p0 = model.probes(params)
    assert float(p0["kappa"][0]) == 0.0 and float(p0["sv_ratio"][0]) == 1.0
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(10), rng.standard_normal(10)
    params["W_K"] = torch.eye(10, dtype=DT)[None, None].clone()
    params["W_Q"] = torch.tensor(np.outer(a, b))[None, None]
    probes = model.probes(params)
    np.testing.assert_allclose(float(probes["kappa"][0]), abs(b @ k_star[0]) / np.linalg.norm(b), rtol=1e-12)
    assert float(probes["sv_ratio"][0]) == pytest.approx(1 / np.finfo(np.float64).eps)  # exactly rank one: capped
    params["W_Q"] = torch.diag(torch.tensor([3.0] + [1.0] + [0.5] * 8, dtype=DT))[None, None]
    assert float(model.probes(params)["sv_ratio"][0]) == pytest.approx(3.0, rel=1e-12)
    v_hat = params["W_V"][0, 0].numpy() @ params["u"][0].numpy()
    np.testing.assert_allclose(float(probes["nu"][0]), abs(v_hat @ v_star[0]) / np.linalg.norm(v_hat), rtol=1e-12)


def test_mlp_corrected_value_direction_matches_finite_differences():
    task = slt.MultiLocationTask(d=8, L=4, K=1, noise=0.1)
    k, v = slt.random_oracle_directions(task, 0)
    model = slt.TransformerLayer(task, k_star=k, v_star=v)
    params = _transformer_params(model, 3)
    X = slt.sample_tokens(task, k, v, _gen(4), 6)["X"][None]
    got = model.mlp_corrected_value_directions(params, X)[0, 0].numpy()
    p = {n: t[0].detach().numpy() for n, t in params.items()}
    x_mid = model._attention(params, X)[0].detach().numpy()  # (B, d) register rows

    def mlp(x):
        return np.maximum(_np_layer_norm(x) @ p["W_1"] + p["b_1"], 0.0) @ p["W_2"] + p["b_2"]

    h = 1e-6  # central differences: error O(h^2) ~ 1e-12 away from ReLU kinks, rounding O(1e-16/h) ~ 1e-10
    jtu = np.zeros(8)
    for x in x_mid:
        J = np.stack([(mlp(x + h * e) - mlp(x - h * e)) / (2 * h) for e in np.eye(8)], axis=1)  # J[i, j]
        jtu += J.T @ p["u"] / len(x_mid)
    np.testing.assert_allclose(got, p["W_V"][0] @ (p["u"] + jtu), rtol=1e-7, atol=1e-9)


# -------------------------------------------------------------------------------------------------------------------
# training through the shared trainer


def test_transformer_training_learns_and_qk_is_rank_one():
    """A short seeded run beats the optimal linear predictor (spec Sec. 5.4) and keeps QK rank one.

    Reduced recipe: d = 12, L = 6, eps = 0.1, batch 64, SGD lr 3e-2 (the spec's 1e-3 at d = 80 needs ~1e5 steps), 500
    steps. Spec Sec. 8.7 finding: the excess risk becomes low and both alignments grow.
    """
    task = slt.MultiLocationTask(d=12, L=6, K=1, noise=0.1)
    k, v = slt.random_oracle_directions(task, 0)
    model = slt.TransformerLayer(task, k_star=k, v_star=v)
    cfg = TrainConfig(seeds=(0, 1), n_steps=500, batch_size=64, lr=3e-2, eval_size=1000, saveat=SaveAt(n=3))
    traj = train(model, cfg, device="cpu")
    excess = traj["excess_risk"].values
    linear_excess = cf.linear_risk(cf.SingleLocationTask(d=12, L=6, noise=0.1)) - 0.01  # Prop. 3: 0.455
    null_excess = task.gamma**2  # 0.5 (spec Sec. 1 remark)
    assert np.all(excess[:, 0] > 0.9 * null_excess)  # u ~ N(0, 1/d^2): the initial predictor is almost null
    assert np.all(excess[:, -1] < 0.75 * linear_excess), excess[:, -1]
    # QK = LN(z_reg) w^T W_K^T is exactly rank one at every step > 0 (module Notes): the ratio is at rounding level
    assert np.all(traj["sv_ratio"].values[:, 1:] > 1e10)
    assert np.all(traj["kappa"].values[:, -1] > 0.5) and np.all(traj["nu_mlp"].values[:, -1] > 0.5)


def test_multihead_erf_short_training_decreases_risk_and_stays_on_sphere():
    """Spec Sec. 8.8 recipe (d = 80, L = 10, K = H = 2, batch 5, alpha = 1e-3, lambda_n = 2/(1 + 1e-4 n)), 1000 steps.

    The excess risk falls from ~15 at step 0 (spec) towards the spec's 0.34-0.51 at step 50 000; after 1000 steps it
    must be below half its initial value (observed: ~1/10, 3 seeds; the factor 1/2 leaves room for seed-to-seed
    spread). The heads stay unit vectors (projected SGD of Sec. 8.4).
    """
    task = slt.MultiLocationTask(d=80, L=10, K=2, noise=0.1)
    k, v = slt.random_oracle_directions(task, 0)
    model = slt.MultiHeadErf(task, k_star=k, v_star=v, n_heads=2, lam_floor=2 / 11)
    cfg = TrainConfig(
        seeds=(0, 1, 2),
        n_steps=1000,
        batch_size=5,
        lr=1e-3,
        eval_size=500,
        saveat=SaveAt(n=3),
        schedules={"lam": Schedule(value=2.0, kind="inverse_time", rate=1e-4)},
    )
    traj, params = train(model, cfg, device="cpu", return_params=True)
    excess = traj["excess_risk"].values
    assert np.all(excess[:, -1] < 0.5 * excess[:, 0]), excess
    for name in ("k", "v"):
        np.testing.assert_allclose(torch.linalg.vector_norm(params[name], dim=-1).numpy(), 1.0, atol=1e-12)


def test_lam_floor_reproduces_frozen_schedule():
    task = slt.MultiLocationTask(d=8, L=4, K=2)
    k, v = slt.random_oracle_directions(task, 0)
    model = slt.MultiHeadErf(task, k_star=k, v_star=v, n_heads=2, lam_floor=2 / 11)
    sched = Schedule(value=2.0, kind="inverse_time", rate=1e-4)
    for n in (0, 50_000, 99_999, 100_000, 100_001, 200_000):
        assert model.lam({"lam": sched.at(n)}) == pytest.approx(2 / (1 + 1e-4 * min(n, 100_000)), rel=1e-15)


def test_batched_seeds_equal_single_seed_runs():
    task = slt.MultiLocationTask(d=8, L=4, K=2, noise=0.1)
    k, v = slt.random_oracle_directions(task, 0)
    model = slt.TransformerLayer(task, k_star=k, v_star=v, n_heads=2)
    cfg = {"n_steps": 20, "batch_size": 8, "lr": 1e-2, "eval_size": 64, "saveat": SaveAt(every=10)}
    both = train(model, TrainConfig(seeds=(3, 7), **cfg), device="cpu")
    one = train(model, TrainConfig(seeds=(7,), **cfg), device="cpu")
    # batched einsum over the seed axis may block differently: agreement to float64 rounding (empirical/train.py)
    assert_seed_equals_single(both, 1, one, rtol=1e-9, atol=1e-12)


def test_erf_single_head_logs_the_closed_form_names():
    """H = K = 1: the trainer's variables carry the closed form's names, so an overlay is an xarray alignment."""
    task = cf.SingleLocationTask(d=8, L=4, noise=0.1)
    k, v = slt.random_oracle_directions(task, 0)
    model = slt.MultiHeadErf(task, k_star=k, v_star=v)
    traj = train(
        model,
        TrainConfig(
            seeds=(0,), n_steps=4, batch_size=5, lr=1e-3, eval_size=10, schedules={"lam": 1.0}, saveat=SaveAt(every=2)
        ),
        device="cpu",
    )
    ref = cf.map(
        task,
        cf.sample_initial_state(task, 1, np.random.default_rng(0)),
        alpha=1e-3,
        n_steps=4,
        lam=1.0,
        saveat=SaveAt(every=2),
    )
    names = {"kappa", "nu", "theta", "eta", "rho", "distance_to_manifold", "risk", "excess_risk", "lam"}
    assert names <= set(traj.data_vars) and names <= set(ref.data_vars)
    np.testing.assert_array_equal(traj["step"].values, ref["step"].values)
    np.testing.assert_array_equal(traj["time"].values, ref["time"].values)


@pytest.mark.parametrize("name", ["single_location.fig8", "single_location.fig9", "single_location.fig10"])
def test_figure_builds_at_tiny_preset(name, tmp_path):
    import figures._single_location_transformer  # noqa: F401 - registers the figures
    from figures import registry

    result = registry.build(name, "tiny", device="cpu", cache_dir=tmp_path)
    ds = result.dataset
    assert ds.sizes["seed"] == 2 and "excess_risk" in ds and np.all(np.isfinite(ds["excess_risk"].values))
    assert "Not recoverable from the paper" in result.spec.full_caption
    fig = registry.render(result.spec, ds)
    assert len(fig.axes) >= 3
    checks = result.spec.checks(ds)
    # 2 seeds cannot establish a finding at level 1e-3 (t with 1 d.o.f., binomial counts of 2): the tiny preset only
    # exercises the checks; they decide at the quick preset (8 seeds), see the report.
    assert checks and all(c.n_seeds == 2 and isinstance(c.passed, bool) for c in checks)


@pytest.mark.slow
def test_multihead_erf_spec_recipe_at_50k_steps():
    """Spec Sec. 8.8 defaults for 50 000 steps: test excess risk 0.34-0.51 (8 numpy runs) -> median of 4 seeds within
    (0.25, 0.65) (the spec's range widened for 4 seeds and the 1 000-sample test set)."""
    task = slt.MultiLocationTask(d=80, L=10, K=2, noise=0.1)
    k, v = slt.random_oracle_directions(task, 0)
    model = slt.MultiHeadErf(task, k_star=k, v_star=v, n_heads=2, lam_floor=2 / 11)
    cfg = TrainConfig(
        seeds=(0, 1, 2, 3),
        n_steps=50_000,
        batch_size=5,
        lr=1e-3,
        eval_size=1000,
        saveat=SaveAt(final=True),
        schedules={"lam": Schedule(value=2.0, kind="inverse_time", rate=1e-4)},
    )
    traj = train(model, cfg, device="cpu")
    med = float(np.median(traj["excess_risk"].values[:, -1]))
    assert 0.25 < med < 0.65, med
