"""Every model's trainer on a CUDA device against its CPU run, batched seeds and the probe encoder on the device.

Marked ``gpu`` (excluded from the default run; ``make gpu-check`` runs them). The device under test is
``$ATTNDYN_TEST_DEVICE`` (default ``cuda``, skipped where CUDA is absent); ``tools/gpu_check.py --device cpu`` sets
it to ``cpu`` for the CI dry run, where each comparison is CPU against CPU.

What "matches" means. Where the device run draws the same random numbers as the CPU run, the logged order parameters
agree to ``RTOL`` (float64 rounding: the device's kernels sum in other orders, and the difference is carried through
a few dozen steps). Where a model draws its initialisation or data from torch generators living on the device, CUDA's
generators give other numbers than the CPU's, so the two runs are different samples of the same law; then, at the
final logged step, each variable's seed mean on the device must pass a two-sample Welch t-test against the CPU's at
level ``ALPHA`` / (number of variables) (Bonferroni), with ``N_SEEDS`` seeds on each side. Which case applied and the
largest difference are written to ``$ATTNDYN_GPU_RECORD`` (a folder), when set, for the check's summary.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from scipy import stats  # noqa: E402

from closedform import models  # noqa: E402
from closedform import group_sparse as gs_cf  # noqa: E402
from closedform import icl_regression as icl_cf  # noqa: E402
from closedform import nearest_neighbor as nn_cf  # noqa: E402
from closedform import random_walk as rw_cf  # noqa: E402
from closedform import scan_snap as ss_cf  # noqa: E402
from closedform import single_location as sl_cf  # noqa: E402
from dynamics import SaveAt  # noqa: E402
from empirical.models import group_sparse as gsm  # noqa: E402
from empirical.models import icl_regression as iclm  # noqa: E402
from empirical.models import nearest_neighbor as nnm  # noqa: E402
from empirical.models import random_walk as rwm  # noqa: E402
from empirical.models import scan_snap as ssm  # noqa: E402
from empirical.models import single_location as slm  # noqa: E402
from empirical.models import single_location_transformer as slt  # noqa: E402
from empirical.train import TrainConfig, train  # noqa: E402

pytestmark = pytest.mark.gpu

DEVICE = os.environ.get("ATTNDYN_TEST_DEVICE", "cuda")
if DEVICE.startswith("cuda") and not torch.cuda.is_available():
    pytest.skip("no CUDA device (set ATTNDYN_TEST_DEVICE=cpu for the dry run)", allow_module_level=True)

N_SEEDS = 12
"""Seeds per side: enough for the t-test to see a mean shift of ~1.5 seed SDs (power ~0.9 at the level below)."""

RTOL, ATOL = 1e-9, 1e-12
"""Same random numbers: float64 rounding of reordered sums, amplified over <= 60 steps (measured on CPU vs CPU: 0)."""

ALPHA = 1e-3
"""Family-wise level of the t-tests of one model (false alarm once in a thousand checks)."""

SEEDS = tuple(range(N_SEEDS))


def _single_location():
    task = sl_cf.SingleLocationTask(d=16, L=5, noise=0.1)
    return slm.build(task, rng=2), slm.config("fig5", SEEDS, n_steps=40, log_every=10, eval_size=50)


def _icl_regression():
    cfg = TrainConfig(
        seeds=SEEDS,
        n_steps=30,
        batch_size=32,
        lr=1e-3,
        optimizer="adam",
        eval_size=64,
        saveat=SaveAt(every=10),
        refill=4,
    )
    return iclm.ICLAttention(icl_cf.ICLRegressionTask(d=5, L=40, sigma2=0.1), 2), cfg


def _scan_snap():
    classes = ss_cf.SequenceClasses.syn_medium(1)
    task = ss_cf.ScanSnapTask(classes=classes, eta_Y=2.0, eta_Z=1.0)
    model = ssm.ScanSnapTorch(classes=classes, T=32, init="random")
    return model, ssm.config("sgd", model, task, SEEDS, n_steps=6, batch_size=16)


def _nearest_neighbor():
    model = nnm.NearestNeighborAttention(nn_cf.NearestNeighborTask(d=4, N=8, sigma=2.0, eta=5.0))
    return model, nnm.config("sgd", model, 60, 64, seeds=SEEDS, eval_size=400, saveat=SaveAt(steps=[0, 60]))


def _group_sparse():
    task = gs_cf.GroupSparseTask(d=3, D=4)
    v = np.random.default_rng(11).standard_normal(3)
    model = gsm.GroupSparseAttention(task, data=gsm.training_samples(task, 120, list(SEEDS), v / np.linalg.norm(v)))
    return model, gsm.config("gd", model, 40, saveat=SaveAt(steps=(0, 1, 2, 10, 40)))


def _random_walk():
    task = rw_cf.RandomWalkTask(K=5, N=11, M=40, p=0.5, eta=0.5)
    train_w, test_w = rwm.walk_samples(task, 60, list(SEEDS), n_test=30)
    model = rwm.RandomWalkAttention(task, init="random", data=train_w, test=test_w)
    return model, rwm.config("gd", model, 5, seeds=SEEDS)


def _transformer():
    task = slt.MultiLocationTask(d=8, L=4, K=2, noise=0.1)
    k, v = slt.random_oracle_directions(task, 0)
    model = slt.TransformerLayer(task, k_star=k, v_star=v, n_heads=2)
    return model, TrainConfig(seeds=SEEDS, n_steps=20, batch_size=8, lr=1e-2, eval_size=64, saveat=SaveAt(every=10))


# one case per built-in model (the registry's names; each has a _<name> builder above), plus the Transformer layer
CASES = {
    **{name: globals()[f"_{name}"] for name in models.names(builtin=True)},
    "single_location_transformer": _transformer,
}


def _record(name: str, data: dict) -> None:
    folder = os.environ.get("ATTNDYN_GPU_RECORD")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(json.dumps(data, indent=1))


def _numeric(traj):
    return [
        k for k in traj.data_vars if np.issubdtype(traj[k].dtype, np.floating) and traj[k].dims[:1] == ("trajectory",)
    ]


def _max_rel_diff(a, b, names) -> float:
    worst = 0.0
    for k in names:
        x, y = a[k].values, b[k].values
        both = np.isfinite(x) & np.isfinite(y)
        if not np.array_equal(np.isfinite(x), np.isfinite(y)):
            return math.inf
        diff = np.abs(x[both] - y[both]) / (ATOL / RTOL + np.abs(y[both]))
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst


def _welch_failures(a, b, names) -> list[str]:
    """Variables whose final-step seed means differ at level ALPHA / len(names) (Welch t-test)."""
    bad = []
    for k in names:
        x, y = a[k].values[:, -1].reshape(N_SEEDS, -1), b[k].values[:, -1].reshape(N_SEEDS, -1)
        for j in range(x.shape[1]):
            xs, ys = x[:, j], y[:, j]
            if np.all(xs == xs[0]) and np.all(ys == ys[0]):  # no seed spread (e.g. a deterministic quantity)
                if not np.isclose(xs[0], ys[0], rtol=RTOL, atol=ATOL):
                    bad.append(f"{k}[{j}]: {xs[0]} vs {ys[0]}")
                continue
            p = stats.ttest_ind(xs, ys, equal_var=False).pvalue
            if not p >= ALPHA / len(names):
                bad.append(f"{k}[{j}]: p = {p:.2g}")
    return bad


@pytest.mark.parametrize("model_name", list(CASES))
def test_trainer_on_the_device_matches_the_cpu_run(model_name):
    model, cfg = CASES[model_name]()
    ref = train(model, cfg, device="cpu")
    dev = train(model, cfg, device=DEVICE)
    assert dev.attrs["device"].startswith(DEVICE.split(":")[0])
    names = _numeric(ref)
    assert names and set(names) == set(_numeric(dev))
    worst = _max_rel_diff(dev, ref, names)
    same_streams = worst <= RTOL
    failures = [] if same_streams else _welch_failures(dev, ref, names)
    _record(
        f"trainer_{model_name}",
        {
            "device": DEVICE,
            "max_rel_diff": worst,
            "same_random_numbers": same_streams,
            "t_test_failures": failures,
            "n_variables": len(names),
        },
    )
    assert not failures, f"{model_name} on {DEVICE} differs from CPU beyond seed noise: {failures}"


@pytest.mark.parametrize("model_name", ["icl_regression", "single_location"])
def test_batched_seeds_on_the_device_equal_single_seed_runs(model_name):
    model, cfg = CASES[model_name]()  # these two models take any seeds (data drawn per seed)
    both = train(model, dataclasses.replace(cfg, seeds=(3, 5)), device=DEVICE)
    for i, s in enumerate((3, 5)):
        one = train(model, dataclasses.replace(cfg, seeds=(s,)), device=DEVICE)
        for k in _numeric(one):
            # the batched kernels may block the seed axis differently: float64 rounding, as on the CPU
            np.testing.assert_allclose(both[k].values[i], one[k].values[0], rtol=1e-12, atol=1e-14, err_msg=k)


def test_probe_encoder_runs_on_the_device():
    from empirical import probing

    if probing.missing_probe_modules():
        pytest.skip(f"probe extra missing: {', '.join(probing.missing_probe_modules())}")
    sentences = probing.make_sentences("train", 16, rng=0)
    outs = {}
    for device in ("cpu", DEVICE):
        tokenizer, enc = probing.load_encoder(device=device)
        outs[device] = probing.encode(sentences, tokenizer, enc, batch_size=8, rng=1)
    # float32 encoder: the device's matmuls (TF32 off) round differently; 1e-3 relative on hidden states of size ~1
    np.testing.assert_allclose(outs[DEVICE].cls, outs["cpu"].cls, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(outs[DEVICE].attn_target, outs["cpu"].attn_target, rtol=1e-3, atol=1e-4)
    _record(
        "probe_encoder", {"device": DEVICE, "max_abs_diff_cls": float(np.abs(outs[DEVICE].cls - outs["cpu"].cls).max())}
    )


def test_the_t_test_rejects_a_shifted_law_and_accepts_the_same_law():
    """The statistical branch can fail: a 3-SD shift of one variable is rejected, a fresh sample of the law is not."""
    import xarray as xr

    rng = np.random.default_rng(0)

    def traj(shift):
        return xr.Dataset(
            {
                "a": (("trajectory", "time"), rng.standard_normal((N_SEEDS, 2)) + [0.0, shift]),
                "b": (("trajectory", "time"), rng.standard_normal((N_SEEDS, 2))),
            }
        )

    ref = traj(0.0)
    assert _welch_failures(traj(3.0), ref, ["a", "b"])[0].startswith("a[0]")
    assert _welch_failures(traj(0.0), ref, ["a", "b"]) == []
