"""Tests of empirical.models.nearest_neighbor (torch side of spec token_selection.md, Study A: 1-NN in context).

Independent references used here:
* the closed form's numpy embedding, forward pass and loss (closedform.nearest_neighbor.embed/forward/full_loss) at
  fixed weights, to 1e-12;
* exact values: the loss at xi1 = 0 (Sec. A.5, spec Sec. 4 row 1) and the landscape value L(2, 5) of Appendix R, with
  5-SE Monte Carlo tolerances and negative controls (wrong normalisations) that must be rejected (dynamics.testing);
* the closed form's numpy full-matrix GD (closedform.nearest_neighbor.full_gd) and, on a sample where the invariances
  of Sec. A.5 are exact (symmetrized_prompts), the reduced (xi1, xi2) map map, to round-off;
* the chain rule dL/dW_K = W_Q G^T, dL/dW_Q = W_K G (Sec. A.9) with G from the numpy full gradient;
* the numbers of Sec. A.8 (full-matrix GD, exact recipe G.A) and the qualitative behaviour of Sec. A.8-A.9.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from closedform import nearest_neighbor as cf
from dynamics import SaveAt
from dynamics.compare import gap_test
from empirical.models import nearest_neighbor as nnm
from empirical.train import TrainConfig, train
from dynamics.testing import assert_mc_close, assert_mc_rejects, mean_and_se
from tests._training import assert_seed_equals_single, kill_and_resume, same

CPU = "cpu"


def _batch(prompts_list):
    return nnm._torch_batch(prompts_list, torch.device("cpu"), torch.float64)


def _online_batch(model, seeds, n):
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    return model.sample(gens, n, device=torch.device("cpu"), dtype=torch.float64)


# ----------------------------------------------------------------------------------------------------------------
# Forward pass and sampler against the closed form's numpy code
# ----------------------------------------------------------------------------------------------------------------


def test_forward_and_loss_equal_the_closed_form_numpy_pass():
    task = cf.NearestNeighborTask(d=4, N=16, sigma=5.0, eta=5.0)
    prompts = cf.sample_prompts(task, 200, 0, labels=True)
    batch = _batch([prompts])
    np.testing.assert_array_equal(batch["H"][0].numpy(), cf.embed(prompts))  # same layout (Sec. A.2)
    rng = np.random.default_rng(1)
    W = 2.0 * rng.standard_normal((6, 6))  # a generic W: every block enters the scores
    W_K, W_Q = rng.standard_normal((6, 6)), rng.standard_normal((6, 6))
    H = cf.embed(prompts)
    for params, W_np in (
        ({"W": torch.as_tensor(W)[None]}, W),
        ({"W_K": torch.as_tensor(W_K)[None], "W_Q": torch.as_tensor(W_Q)[None]}, W_K.T @ W_Q),
    ):
        q, f = nnm.predict(params, batch)
        q_np, f_np = cf.forward(W_np, H)
        # float64 round-off of a 6x6 product and a 17-term softmax: 1e-12 (issue 8)
        np.testing.assert_allclose(q[0].numpy(), q_np, rtol=0, atol=1e-12)
        np.testing.assert_allclose(f[0].numpy(), f_np, rtol=0, atol=1e-12)
        model = nnm.NearestNeighborAttention(task)
        assert abs(float(model.loss(params, batch)[0]) - cf.full_loss(W_np, H, prompts.target)) <= 1e-12
        np.testing.assert_allclose(model.probes(params)["xi1"].numpy(), cf.probe(W_np)[0], rtol=0, atol=1e-13)


def test_online_sampler_follows_the_data_law():
    task = cf.NearestNeighborTask(d=3, N=5, sigma=1.0, eta=1.0)
    model = nnm.NearestNeighborAttention(task)
    batch = _online_batch(model, [3, 4], 500)
    H = batch["H"].numpy()
    assert H.shape == (2, 500, 5, 6)
    np.testing.assert_allclose(np.linalg.norm(H[:, :, :3, :], axis=2), 1.0, atol=1e-14)  # x's on S^{d-1}
    assert set(np.unique(H[:, :, 3, :5])) == {-1.0, 1.0} and np.all(H[:, :, 3, 5] == 0)  # labels, query slot 0
    assert np.all(H[:, :, 4, :5] == 0) and np.all(H[:, :, 4, 5] == 1)
    for s in range(2):
        p = nnm.to_prompts(batch, s)
        np.testing.assert_array_equal(batch["target"][s].numpy(), p.target)  # target = y_{i*}
        np.testing.assert_array_equal(cf.embed(p), H[s])
    # labels: mean 0 and uncorrelated (Sec. A.1); 5000 entries, SE 1/sqrt(5000) = 0.014
    assert abs(H[:, :, 3, :5].mean()) < 5 / math.sqrt(5000)
    # different seeds draw different prompts; the same seed the same ones
    assert not np.array_equal(H[0], H[1])
    np.testing.assert_array_equal(_online_batch(model, [3], 500)["H"][0].numpy(), H[0])


# ----------------------------------------------------------------------------------------------------------------
# Torch loss on a large batch against exact values (5 SE, with negative controls)
# ----------------------------------------------------------------------------------------------------------------


def _per_prompt_loss(model, params, batch):
    _, f = nnm.predict(params, batch)
    return (0.5 * (f - batch["target"]) ** 2)[0].numpy()


@pytest.mark.statistical
def test_torch_loss_equals_the_exact_loss_at_xi1_zero():
    # Sec. A.5 / spec Sec. 4 row 1: at xi1 = 0 every context token gets q0 = 1/(N + e^{-xi2}) and, the labels
    # integrated out, L = 1/2 (N q0^2 - 2 q0 + 1) = 0.46875000554 for N = 16, xi2 = 5 (any d).
    task = cf.NearestNeighborTask(d=4, N=16, sigma=5.0, eta=1.0)
    model = nnm.NearestNeighborAttention(task)
    batch = _online_batch(model, [11], 40_000)
    params = model.init_params([torch.Generator()], device=torch.device("cpu"), dtype=torch.float64)  # W^(0)
    loss = _per_prompt_loss(model, params, batch)
    mean, se = mean_and_se(loss)
    exact, _ = cf.loss_xi1_zero(16, 5.0)
    assert abs(float(exact) - 0.46875000554) <= 1e-9
    assert_mc_close(mean, se, exact, what="torch loss at W^(0) vs docs/models/token_selection.md §A.5 closed form")
    assert abs(float(model.loss(params, batch)[0]) - mean) <= 1e-12  # the trainer's loss is this mean
    # negative control: the loss without the factor 1/2 (Sec. A.4) must be rejected
    assert_mc_rejects(mean, se, 2 * exact, what="loss without 1/2")


@pytest.mark.statistical
def test_torch_loss_equals_the_landscape_reference_of_appendix_R():
    # Appendix R: L(xi1 = 2, xi2 = 5) = 0.17845 for d = N = 4 (1e6 prompts, SE_ref = 0.079/1000). The torch loss uses
    # explicit labels (more noise per prompt than the label-integrated reference): combined SE, 5 SE (spec Sec. 0).
    task = cf.NearestNeighborTask(d=4, N=4, sigma=0.0, eta=1.0)
    model = nnm.NearestNeighborAttention(task)
    batch = _online_batch(model, [12], 100_000)
    W = torch.as_tensor(cf.family_W(4, 2.0, 5.0))[None]
    mean, se = mean_and_se(_per_prompt_loss(model, {"W": W}, batch))
    se_comb = math.hypot(se, 0.079 / 1000)
    assert_mc_close(mean, se_comb, 0.17845, what="torch L(2, 5) vs Appendix R")
    # negative controls: a 1/sqrt(d) temperature on the scores (Sec. 0: none) and a missing 1/2 are rejected
    W_temp = W / math.sqrt(4)
    mean_t, se_t = mean_and_se(_per_prompt_loss(model, {"W": W_temp}, batch))
    assert_mc_rejects(mean_t, math.hypot(se_t, 0.079 / 1000), 0.17845, what="1/sqrt(d) temperature")
    assert_mc_rejects(2 * mean, 2 * se_comb, 0.17845, what="loss without 1/2")


# ----------------------------------------------------------------------------------------------------------------
# Full-matrix GD through the trainer against the closed form
# ----------------------------------------------------------------------------------------------------------------


def test_torch_gd_equals_closed_form_full_matrix_gd():
    task = cf.NearestNeighborTask(d=3, N=8, sigma=3.0, eta=2.0)
    data = nnm.prompt_samples(task, 300, [3])
    test = cf.sample_shifted_prompts(task, 200, 7, delta=0.2)
    model = nnm.NearestNeighborAttention(task, data=data, test=test)
    saveat = SaveAt(every=10)
    traj, params = train(model, nnm.config("gd", model, 40, saveat=saveat), device=CPU, return_params=True)
    full = cf.full_gd(task, data[0], 40, saveat=saveat)
    assert float(traj.xi1.values[0, -1]) > 1.0  # the run moves
    # round-off of 40 float64 GD steps on sums over 300 prompts in another order: 1e-12
    for name in ("xi1", "xi2", "off", "L"):
        np.testing.assert_allclose(traj[name].values, full[name].values, rtol=0, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(params["W"][0].numpy(), full.W.values[0, -1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(traj.time.values, task.eta * traj.step.values)  # time = eta t (Sec. 0)
    # the logged diagnostics are the closed form's at the learned W
    W_end = full.W.values[0, -1]
    diag = cf.full_diagnostics(W_end, data[0])
    for name in ("q_istar", "q_istar_lo", "q_self"):
        assert abs(float(traj[name].values[0, -1]) - diag[name]) <= 1e-12, name
    _, f = cf.forward(W_end, cf.embed(test))
    assert abs(float(traj.mse_test.values[0, -1]) - np.mean((f - test.target) ** 2)) <= 1e-12
    _, f = cf.forward(W_end, cf.embed(data[0]))
    assert float(traj.acc.values[0, -1]) == np.mean(np.sign(f) == data[0].target)  # accuracy of sign(f)


def test_torch_gd_on_a_symmetric_sample_equals_the_reduced_map():
    # On the orbit of a sample under signed permutations, with the label design, the invariances of Sec. A.5 are
    # exact: full-matrix GD from W^(0) stays on diag(xi1 I, 0, -xi2) and equals the two-scalar map (Sec. A.5).
    task = cf.NearestNeighborTask(d=3, N=4, sigma=3.0, eta=2.0)
    base = cf.sample_prompts(task, 12, 0)
    model = nnm.NearestNeighborAttention(task, data=[cf.symmetrized_prompts(base)])
    saveat = SaveAt(every=15)
    traj = train(model, nnm.config("gd", model, 60, saveat=saveat), device=CPU)
    red = cf.map(task, base, 60, saveat=saveat)
    assert float(red.xi1.values[0, -1]) > 2.0
    # round-off only (60 steps, sums over 9216 prompts in another order)
    for name in ("xi1", "xi2", "L", "q_istar", "q_self"):
        np.testing.assert_allclose(traj[name].values, red[name].values, rtol=0, atol=1e-12, err_msg=name)
    assert float(traj.off.max()) <= 1e-13
    # the overlay is an xarray alignment on the shared step/time axis
    assert np.array_equal(traj.time.values, red.time.values)


def test_factorised_gd_step_is_the_chain_rule_of_the_merged_gradient():
    # Sec. A.9: with G = dL/dW, dL/dW_K = W_Q G^T and dL/dW_Q = W_K G; GD updates both factors at once.
    task = cf.NearestNeighborTask(d=3, N=6, sigma=0.0, eta=0.5)
    data = nnm.prompt_samples(task, 200, [5])
    rng = np.random.default_rng(0)
    W_K, W_Q = rng.standard_normal((5, 5)), rng.standard_normal((5, 5))
    model = nnm.NearestNeighborAttention(
        task, parametrisation="factorised", data=data, init_weights={"W_K": W_K, "W_Q": W_Q}
    )
    _, params = train(model, nnm.config("gd", model, 2, saveat=SaveAt(final=True)), device=CPU, return_params=True)
    H, target = cf.embed(data[0]), data[0].target
    for _ in range(2):
        G = cf.full_gradient(W_K.T @ W_Q, H, target)
        W_K, W_Q = W_K - task.eta * W_Q @ G.T, W_Q - task.eta * W_K @ G
    np.testing.assert_allclose(params["W_K"][0].numpy(), W_K, rtol=0, atol=1e-12)  # float64 round-off
    np.testing.assert_allclose(params["W_Q"][0].numpy(), W_Q, rtol=0, atol=1e-12)


def test_torch_full_gd_reproduces_spec_A8():
    # Sec. A.8: d=3, N=8, sigma=3, eta=2, 300 steps; 4000 prompts (G.A, seed 3), labels drawn next, duplicated with
    # y -> -y. Quoted: mean diag(W11) = 6.411 (reduced xi1 = 6.391); W33 = -5.612; ||W - family||_F = 0.30 (2.4%).
    # Exact recipe: agreement to the printed digits (half a unit in the last digit).
    task = cf.NearestNeighborTask(d=3, N=8, sigma=3.0, eta=2.0)
    model = nnm.NearestNeighborAttention(task, data=nnm.prompt_samples(task, 4000, [3], duplicate_labels=True))
    traj, params = train(model, nnm.config("gd", model, 300, saveat=SaveAt(final=True)), device=CPU, return_params=True)
    W = params["W"][0].numpy()
    assert abs(np.mean(np.diag(W)[:3]) - 6.411) <= 5e-4
    assert abs(W[4, 4] + 5.612) <= 5e-4
    assert abs(float(traj.off.values[0, -1]) * np.linalg.norm(W) - 0.30) <= 5e-3
    assert abs(100 * float(traj.off.values[0, -1]) - 2.4) <= 0.05


# ----------------------------------------------------------------------------------------------------------------
# Short seeded runs: the predicted qualitative behaviour
# ----------------------------------------------------------------------------------------------------------------


def test_merged_gd_learns_nearest_neighbour_and_tracks_the_reduced_map():
    # d = 4, N = 16, sigma = 5 (the Sec. 4 setting) at eta = 2: at the reference eta = 5 full-matrix GD is unstable in
    # the label-bias direction W23 (next test), which the reduced map cannot see.
    task = cf.NearestNeighborTask(d=4, N=16, sigma=5.0, eta=2.0)
    seeds = list(range(2, 10))
    model = nnm.NearestNeighborAttention(task, data=nnm.prompt_samples(task, 1000, seeds, duplicate_labels=True))
    saveat = SaveAt(steps=[0, 25, 50, 100, 200])
    traj = train(model, nnm.config("gd", model, 200, seeds=seeds, saveat=saveat), device=CPU)
    assert np.all(np.diff(traj.L.values, axis=1) < 0)  # loss decreases (Sec. A.7 item 1)
    assert np.all(np.diff(traj.q_istar.values, axis=1) > 0)  # attention concentrates on i*
    assert np.all(np.diff(traj.xi1.values, axis=1) > 0) and np.all(traj.q_self.values < 0.05)
    # stays near the family: label-sampling noise only, O(n^-1/2) (Sec. A.8: 2.4% at 4000 prompts, d = 3, so ~5% at
    # n = 1000 before the d-dependence); mean over the 8 seeds at each step measured <= 0.095 (single seeds <= 0.134)
    assert float(traj.off.values.mean(axis=0).max()) < 0.12
    # The same x's for torch and the reduced map; the explicit labels add zero-mean gradient noise (Sec. A.5), so the
    # per-seed relative differences of xi1, xi2 and L have mean 0 at first order. Tested with the calibrated gap test
    # of dynamics.compare (Student t over the 8 seeds, two-sided level 1e-3, no allowance): a torch model that
    # followed another map (e.g. a wrong step) fails it. Measured: xi1 +3.2% +- 1.1% (SE) at t = 25, -0.6% +- 0.3% at
    # t = 200; L -1.1% +- 0.5%; xi2 < 0.1%.
    rel = {name: [] for name in ("xi1", "xi2", "L")}
    for i, s in enumerate(seeds):
        red = cf.map(task, cf.sample_prompts(task, 1000, s), 200, saveat=saveat)
        for name in rel:
            rel[name].append(traj[name].values[i, 1:] / red[name].values[0, 1:] - 1)
    for name, r in rel.items():
        r = np.asarray(r)
        mean, se = r.mean(axis=0), r.std(axis=0, ddof=1) / math.sqrt(len(seeds))
        res = gap_test(np.zeros_like(mean), mean, se, len(seeds), level=1e-3)
        assert np.all(res["holds"]), (name, mean, se)


def test_full_matrix_gd_at_the_reference_step_is_unstable_in_the_label_bias_entry():
    # Measured truth, not in the spec: the label-bias entry W23 (score y_j W23 on context token j) has curvature
    # lambda = E[(sum_j q_j - f^2)^2] ~ 1 at W^(0), so W23 = 0 is linearly unstable for eta > 2/lambda. With mirrored
    # labels its gradient vanishes exactly on the family, so only a perturbation can leave it: seeded here explicitly
    # (W23 = 1e-8 at the start; round-off alone does it at eta = 5 only on some machines and thread counts). At
    # eta = 5 it grows into W23 ~ +-0.9 (a loss spike), at eta = 2 it decays. Reduced-map step sizes therefore do not
    # carry over to the full matrix.
    W23 = {}
    for eta in (5.0, 2.0):
        task = cf.NearestNeighborTask(d=4, N=16, sigma=5.0, eta=eta)
        W0 = cf.initial_W(task)
        W0[4, 5] = 1e-8
        model = nnm.NearestNeighborAttention(
            task, data=nnm.prompt_samples(task, 300, [5], duplicate_labels=True), init_weights={"W": W0}
        )
        _, params = train(model, nnm.config("gd", model, 80, saveat=SaveAt(final=True)), device=CPU, return_params=True)
        W23[eta] = abs(float(params["W"][0, 4, 5]))
    assert W23[5.0] > 0.3  # grown by > 3e7: linear instability (measured 0.93 when round-off seeds it)
    assert W23[2.0] < 1e-8  # decayed below its seed
    # the curvature itself, by central differences of the closed form's full-matrix loss at W^(0) on mirrored prompts
    # (independent of torch): 2/eta = 0.4 < lambda < 1 = 2/2 (measured 0.88 on 4e4 rows; 0.94 at xi1 = 2)
    task = cf.NearestNeighborTask(d=4, N=16, sigma=5.0, eta=5.0)
    p = cf.sample_prompts(task, 2000, 3, labels=True)
    dup = cf.repeat_with_labels(p, np.stack([p.y, -p.y], axis=1))
    H, target, W0, h = cf.embed(dup), dup.target, cf.initial_W(task), 1e-3
    E = np.zeros((6, 6))
    E[4, 5] = 1.0
    lam = (
        cf.full_loss(W0 + h * E, H, target) - 2 * cf.full_loss(W0, H, target) + cf.full_loss(W0 - h * E, H, target)
    ) / h**2
    assert 2 / 5.0 < lam < 2 / 2.0, lam


def test_factorised_model_leaves_the_saddle_and_approaches_the_family():
    # Sec. A.9: from i.i.d. N(0, 0.01^2) factors (no mask) the saddle at 0 is left after ~100 steps (eta = 5,
    # d = 4, N = 16) and W then stays close to the reduced family (off = 8%, 5% at t = 200, 300 with 4000 prompts).
    task = cf.NearestNeighborTask(d=4, N=16, sigma=0.0, eta=5.0)
    model = nnm.NearestNeighborAttention(
        task, parametrisation="factorised", data=nnm.prompt_samples(task, 500, [1], duplicate_labels=True)
    )
    traj = train(model, nnm.config("gd", model, 300, saveat=SaveAt(steps=[0, 20, 300])), device=CPU)
    xi1, off, L = traj.xi1.values[0], traj.off.values[0], traj.L.values[0]
    # near the saddle early: W = W_K^T W_Q = O(s^2) (measured xi1 = 3e-3 at t = 20, 0.24 at t = 50, 4.0 at t = 100)
    assert abs(xi1[0]) < 1e-3 and abs(xi1[1]) < 0.05 and abs(L[1] - L[0]) < 0.01
    assert xi1[-1] > 10.0 and L[-1] < 0.5 * L[0]  # escaped and learning (measured xi1 = 25.7, L = 0.125)
    # random start far from the family, then close (measured off = 0.98 -> 0.095; spec 5% with 8x more prompts)
    assert off[0] > 0.5 and off[-1] < 0.15


def test_online_sgd_learns_and_batched_seeds_equal_single_runs():
    task = cf.NearestNeighborTask(d=4, N=8, sigma=2.0, eta=5.0)
    model = nnm.NearestNeighborAttention(task)
    cfg = nnm.config("sgd", model, 60, 64, seeds=(0, 1), eval_size=400, saveat=SaveAt(steps=[0, 60]))
    both = train(model, cfg, device=CPU)
    assert np.all(both.L.values[:, -1] < both.L.values[:, 0]) and np.all(both.xi1.values[:, -1] > 1.0)
    for i, s in enumerate(cfg.seeds):
        alone = train(model, dataclasses.replace(cfg, seeds=(s,)), device=CPU)
        # batched einsum over the seed axis may block differently: rounding-level agreement (empirical/train.py)
        assert_seed_equals_single(both, i, alone, rtol=1e-10, atol=1e-13, names=both.data_vars)


def test_resume_after_a_kill_is_bit_identical(tmp_path):
    task = cf.NearestNeighborTask(d=3, N=6, sigma=2.0, eta=2.0)
    model = nnm.NearestNeighborAttention(task, data=nnm.prompt_samples(task, 100, [0, 1]))
    cfg = nnm.config("gd", model, 20, batch_size=25, saveat=SaveAt(every=4), checkpoint_every=6)  # minibatch SGD
    full, resumed, path = kill_and_resume(model, cfg, tmp_path, at=15, every_call=True, checkpoint_step=12)
    same(full, resumed)
    # another fixed sample is another run: resume refuses it (the data digest is part of the model spec)
    other = nnm.NearestNeighborAttention(task, data=nnm.prompt_samples(task, 100, [0, 2]))
    with pytest.raises(ValueError, match="data_digest"):
        train(other, cfg, device=CPU, checkpoint_path=path, resume=True)


# ----------------------------------------------------------------------------------------------------------------
# Bad configurations
# ----------------------------------------------------------------------------------------------------------------


def test_invalid_configurations_raise_clear_errors():
    task = cf.NearestNeighborTask(d=3, N=4, sigma=1.0, eta=1.0)
    data = nnm.prompt_samples(task, 10, [0])
    with pytest.raises(ValueError, match="parametrisation"):
        nnm.NearestNeighborAttention(task, parametrisation="lowrank")
    with pytest.raises(ValueError, match="init_scale"):
        nnm.NearestNeighborAttention(task, init_scale=0.1)  # merged: no random start
    with pytest.raises(ValueError, match="init_scale"):
        nnm.NearestNeighborAttention(task, parametrisation="factorised", init_scale=0.0)
    with pytest.raises(ValueError, match="quantile"):
        nnm.NearestNeighborAttention(task, quantile=1.0)
    with pytest.raises(ValueError, match="task"):
        nnm.NearestNeighborAttention({"d": 3})
    with pytest.raises(ValueError, match="labels"):
        nnm.NearestNeighborAttention(task, data=[cf.sample_prompts(task, 10, 0)])
    with pytest.raises(ValueError, match=r"\(N, d\)"):
        nnm.NearestNeighborAttention(
            task, data=nnm.prompt_samples(cf.NearestNeighborTask(d=3, N=5, sigma=1.0, eta=1.0), 10, [0])
        )
    with pytest.raises(ValueError, match="same number"):
        nnm.NearestNeighborAttention(task, data=data + nnm.prompt_samples(task, 11, [1]))
    with pytest.raises(ValueError, match="init_weights"):
        nnm.NearestNeighborAttention(task, init_weights={"W_K": np.zeros((5, 5)), "W_Q": np.zeros((5, 5))})
    with pytest.raises(ValueError, match="init_weights"):
        nnm.NearestNeighborAttention(task, init_weights={"W": np.zeros((4, 4))})
    with pytest.raises(ValueError, match="test"):
        nnm.NearestNeighborAttention(task, data=data * 1, test=data + data + data)
    model = nnm.NearestNeighborAttention(task, data=data)
    with pytest.raises(ValueError, match="config[(]'sgd'[)]"):
        nnm.config("gd", nnm.NearestNeighborAttention(task), 10)
    with pytest.raises(ValueError, match="config[(]'gd'[)]"):
        nnm.config("sgd", model, 10, 4)
    with pytest.raises(ValueError, match="dataset_size and eval_size"):
        train(model, TrainConfig(seeds=0, n_steps=1, batch_size=5, dataset_size=5, eval_size=10, lr=1.0), device=CPU)
    with pytest.raises(ValueError, match="one sample per seed"):
        train(model, nnm.config("gd", model, 1, seeds=(0, 1)), device=CPU)


@pytest.mark.slow
def test_factorised_random_start_matches_spec_A9_numbers():
    # Sec. A.9 check of the random start: d = 4, N = 16, 4000 prompts (G.A, seed 1) with labels drawn next and
    # mirrored, eta = 5, W_K then W_Q drawn from default_rng(0) (taken here as 0.01 * standard_normal((6, 6)) each; the
    # spec does not pin the draw further, so this is not an exact-recipe row). Quoted: off = 8%, 5%, 4% at t = 200, 300,
    # 1000; L = 0.077 at t = 1000 against 0.073 for the merged W from 0 (sigma = 0). Measured here: off = 5.8%, 6.2%,
    # 5.2%; L = 0.0783 (factorised) and 0.0759 (merged). Tolerances: off < 10%, L within 5% of the quoted values.
    task = cf.NearestNeighborTask(d=4, N=16, sigma=0.0, eta=5.0)
    data = nnm.prompt_samples(task, 4000, [1], duplicate_labels=True)
    rng = np.random.default_rng(0)
    W_K, W_Q = 0.01 * rng.standard_normal((6, 6)), 0.01 * rng.standard_normal((6, 6))
    fact = nnm.NearestNeighborAttention(
        task, parametrisation="factorised", data=data, init_weights={"W_K": W_K, "W_Q": W_Q}
    )
    traj = train(fact, nnm.config("gd", fact, 1000, saveat=SaveAt(steps=[200, 300, 1000])), device=CPU)
    assert np.all(traj.off.values < 0.10)
    assert abs(float(traj.L.values[0, -1]) / 0.077 - 1) < 0.05
    merged = nnm.NearestNeighborAttention(task, data=data)
    traj_m = train(merged, nnm.config("gd", merged, 1000, saveat=SaveAt(final=True)), device=CPU)
    assert abs(float(traj_m.L.values[0, -1]) / 0.073 - 1) < 0.05
