"""Tests of the shared torch trainer (empirical.train, empirical.checkpoint, empirical.seeding).

Toy models are defined here, so the machinery is checked independently of any paper model:

* ``Regression``: online / fixed-dataset linear regression ``y = x.w_star + eps*xi``, ``x ~ N(0, I_d)``, loss
  ``0.5 * mean (x.w + b - y)^2``. Its online-SGD mean squared distance has an exact recursion (derived in
  ``_q_recursion``), checked by Monte Carlo over seeds; its fixed-dataset GD / heavy-ball / Adam runs are checked
  against numpy re-implementations fed with the documented random streams.
* ``SphereTeacher``: a unit vector trained by projected gradient descent (single_location spec §6.1 step).
* ``Linear``: a loss linear in the parameters, so every update reveals the learning rate and temperature used.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dynamics.errors import DivergenceError  # noqa: E402
from dynamics.saveat import SaveAt  # noqa: E402
from dynamics.trajectory import Trajectory  # noqa: E402
from empirical.checkpoint import load_checkpoint  # noqa: E402
from empirical.seeding import STREAMS, BlockRNG, stream_keys  # noqa: E402
from empirical.train import Schedule, TrainConfig, per_seed, train  # noqa: E402
from dynamics.testing import assert_mc_close, assert_mc_rejects, mean_and_se  # noqa: E402
from tests._training import kill_and_resume, same  # noqa: E402

CPU = "cpu"


# ---------------------------------------------------------------------------------------------------------------
# Toy models


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToySpec:
    d: int
    eps: float = 0.5


class Regression:
    """Linear regression with a unit teacher ``w_star = e_1``; params ``w`` (d,) and optionally a bias ``b`` (1,)."""

    name = "toy_regression"
    time_unit = "step/d"

    def __init__(self, d=6, eps=0.5, bias=False):
        self.spec = ToySpec(d=d, eps=eps)
        self.bias = bias

    def time_of_step(self, step):
        return np.asarray(step, dtype=np.float64) / self.spec.d

    def init_params(self, generators, *, device, dtype):
        d = self.spec.d

        def draw(g):
            out = {"w": torch.randn(d, generator=g, device=device, dtype=dtype) / math.sqrt(d)}
            if self.bias:
                out["b"] = torch.randn(1, generator=g, device=device, dtype=dtype)
            return out

        return per_seed(generators, draw)

    def sample(self, generators, n, *, device, dtype):
        d, eps = self.spec.d, self.spec.eps

        def draw(g):
            x = torch.randn(n, d, generator=g, device=device, dtype=dtype)
            xi = torch.randn(n, generator=g, device=device, dtype=dtype)
            return {"x": x, "y": x[:, 0] + eps * xi}

        return per_seed(generators, draw)

    def predict(self, params, x):
        pred = (x * params["w"][:, None, :]).sum(-1)  # row-wise ops only: bitwise seed-independent
        return pred + params["b"] if self.bias else pred

    def loss(self, params, batch, hyper):
        return 0.5 * ((self.predict(params, batch["x"]) - batch["y"]) ** 2).mean(-1)

    def probes(self, params):
        w = params["w"]
        q = (w**2).sum(-1) - 2 * w[:, 0] + 1.0  # |w - e_1|^2
        return {"q": q, "w0": w[:, 0].clone()}


class CounterRegression(Regression):
    """:class:`Regression` drawing its data from the trainer's counter-keyed block streams (``draw``)."""

    name = "toy_regression_counter"

    def draw(self, rng, n, *, device, dtype):
        x = rng.normal((n, self.spec.d), dtype=dtype)
        xi = rng.normal((n,), dtype=dtype)
        return {"x": x, "y": x[..., 0] + self.spec.eps * xi}


class SphereTeacher:
    """A unit vector ``w`` fitting the teacher direction ``e_1``: loss ``0.5 mean (x.(w - e_1))^2``."""

    name = "toy_sphere"
    sphere_params = ("w",)

    def __init__(self, d=5):
        self.d = d

    def init_params(self, generators, *, device, dtype):
        def draw(g):
            w = torch.randn(self.d, generator=g, device=device, dtype=dtype)
            return {"w": w / torch.linalg.vector_norm(w)}

        return per_seed(generators, draw)

    def sample(self, generators, n, *, device, dtype):
        return per_seed(generators, lambda g: {"x": torch.randn(n, self.d, generator=g, device=device, dtype=dtype)})

    def loss(self, params, batch, hyper):
        w = params["w"].clone()
        w[:, 0] = w[:, 0] - 1.0
        return 0.5 * ((batch["x"] * w[:, None, :]).sum(-1) ** 2).mean(-1)

    def probes(self, params):
        w = params["w"]
        return {"m": w[:, 0].clone(), "norm": torch.linalg.vector_norm(w, dim=-1)}


class Linear:
    """Loss ``lam * (a.c_a + b.c_b)``: constant gradients, so parameters move by exactly ``-lr*scale*lam*c``."""

    name = "toy_linear"
    schedule_names = ("lam",)
    c_a = (1.0, -2.0)
    c_b = (0.5, 0.25, 3.0)

    def init_params(self, generators, *, device, dtype):
        S = len(generators)
        return {"a": torch.zeros(S, 2, device=device, dtype=dtype), "b": torch.zeros(S, 3, device=device, dtype=dtype)}

    def sample(self, generators, n, *, device, dtype):
        return per_seed(generators, lambda g: {"z": torch.zeros(n, 1, device=device, dtype=dtype)})

    def loss(self, params, batch, hyper):
        ca = torch.tensor(self.c_a, dtype=params["a"].dtype)
        cb = torch.tensor(self.c_b, dtype=params["b"].dtype)
        return hyper["lam"] * ((params["a"] * ca).sum(-1) + (params["b"] * cb).sum(-1))

    def probes(self, params):
        return {"a0": params["a"][:, 0].clone(), "b2": params["b"][:, 2].clone()}

    def evaluate(self, params, batch, hyper):
        return {"lam_seen": torch.full((params["a"].shape[0],), hyper["lam"], dtype=params["a"].dtype)}


class NaNAt:
    """Wraps a model: the training loss of seed index ``seed_index`` is NaN at step ``step``."""

    def __init__(self, model, step, seed_index):
        self._model, self._step, self._seed_index, self._calls = model, step, seed_index, 0

    def __getattr__(self, name):
        return getattr(self._model, name)

    def loss(self, params, batch, hyper):
        out = self._model.loss(params, batch, hyper)
        if torch.is_grad_enabled():
            if self._calls == self._step:
                out = out.clone()
                out[self._seed_index] = float("nan")
            self._calls += 1
        return out


def config(**kw):
    base = dict(seeds=(3, 11, 42), n_steps=40, batch_size=4, lr=0.05, saveat=SaveAt(every=10), eval_size=64)
    base.update(kw)
    return TrainConfig(**base)


def stream(seed, name):
    """The documented stream (empirical.seeding docstring), rebuilt here from SeedSequence directly."""
    child = np.random.SeedSequence(seed).spawn(len(STREAMS))[STREAMS.index(name)]
    return torch.Generator().manual_seed(int(child.generate_state(1)[0]))


# ---------------------------------------------------------------------------------------------------------------
# Statistics: online SGD against an exact recursion (Monte Carlo over seeds)


def _q_recursion(n_steps, *, q0, lr, d, B, eps, fresh_variance=True):
    """E|w_n - w*|^2 for online SGD on Gaussian linear regression, exactly.

    With A = (1/B) sum_i x_i x_i^T (x_i ~ N(0, I_d)): E A = I, E A^2 = ((d + 2) + (B - 1)) / B * I, so
    E|(I - lr A) D|^2 = |D|^2 (1 - 2 lr + lr^2 (d + 1 + B) / B); the label noise adds lr^2 d eps^2 / B.
    ``fresh_variance=False`` is the negative control: it drops the sampling variance of A (as if each minibatch were
    the population), i.e. factor (1 - lr)^2.
    """
    f = 1 - 2 * lr + lr**2 * (d + 1 + B) / B if fresh_variance else (1 - lr) ** 2
    c = lr**2 * d * eps**2 / B
    q = [q0]
    for _ in range(n_steps):
        q.append(q[-1] * f + c)
    return np.asarray(q)


@pytest.mark.statistical
def test_online_sgd_matches_the_exact_mean_square_recursion():
    d, B, lr, eps, S = 10, 4, 0.1, 0.5, 500  # S = 500 seeds: the negative control is rejected at ~13 SE
    traj = train(
        Regression(d=d, eps=eps),
        config(seeds=range(S), n_steps=30, batch_size=B, lr=lr, saveat=SaveAt(every=5), eval_size=200),
        device=CPU,
    )
    steps = traj["step"].values
    q_mc, q_se = mean_and_se(traj["q"].values, axis=0)
    # E q_0 = |w*|^2 + E|w_0|^2 = 1 + d * (1/d) = 2 (w_0 ~ N(0, I/d)).
    exact = _q_recursion(30, q0=2.0, lr=lr, d=d, B=B, eps=eps)[steps]
    # Seeds are i.i.d. runs, so the SE over S seeds is exact; atol 1e-12 covers float64 rounding of the recursion.
    assert_mc_close(q_mc, q_se, exact, atol=1e-12, what="E|w_n - w*|^2 of online SGD")
    wrong = _q_recursion(30, q0=2.0, lr=lr, d=d, B=B, eps=eps, fresh_variance=False)[steps]
    assert_mc_rejects(q_mc, q_se, wrong, atol=1e-12, what="recursion without minibatch variance")
    # Logged loss = 0.5 mean over the (independent) evaluation batch: its expectation is 0.5 (q + eps^2).
    l_mc, l_se = mean_and_se(traj["loss"].values, axis=0)
    assert_mc_close(l_mc, l_se, 0.5 * (exact + eps**2), atol=1e-12, what="logged evaluation loss")
    assert_mc_rejects(l_mc, l_se, exact + eps**2, atol=1e-12, what="loss without the factor 1/2")


# ---------------------------------------------------------------------------------------------------------------
# Exact algorithms: numpy re-implementations fed with the documented streams


def _numpy_reference(model, cfg, seed):
    """Full-batch GD / heavy-ball / Adam on the fixed dataset, in numpy, from the documented streams."""
    d = model.spec.d
    data = model.sample([stream(seed, "data")], cfg.dataset_size, device=torch.device(CPU), dtype=torch.float64)
    X, y = data["x"][0].numpy(), data["y"][0].numpy()
    init = model.init_params([stream(seed, "init")], device=torch.device(CPU), dtype=torch.float64)
    theta = {k: v[0].numpy().copy() for k, v in init.items()}
    scale = dict(cfg.lr_scale)
    state = {k: {"m": np.zeros_like(v), "v": np.zeros_like(v), "buf": None} for k, v in theta.items()}
    rows = {0: theta["w"][0]}
    for n in range(cfg.n_steps):
        r = X @ theta["w"] + (theta["b"][0] if "b" in theta else 0.0) - y
        grads = {"w": X.T @ r / len(y)}
        if "b" in theta:
            grads["b"] = np.array([r.mean()])
        for k, g in grads.items():
            lr = cfg.lr.at(n) * scale.get(k, 1.0)
            st = state[k]
            if cfg.optimizer == "adam":
                b1, b2 = cfg.betas
                st["m"] = b1 * st["m"] + (1 - b1) * g
                st["v"] = b2 * st["v"] + (1 - b2) * g * g
                mhat, vhat = st["m"] / (1 - b1 ** (n + 1)), st["v"] / (1 - b2 ** (n + 1))
                theta[k] = theta[k] - lr * mhat / (np.sqrt(vhat) + cfg.adam_eps)
            else:
                st["buf"] = g if st["buf"] is None else cfg.momentum * st["buf"] + g
                theta[k] = theta[k] - lr * st["buf"]
        rows[n + 1] = theta["w"][0]
    assert d == X.shape[1]
    return rows


@pytest.mark.parametrize(
    "opt", [dict(optimizer="sgd"), dict(optimizer="sgd", momentum=0.9), dict(optimizer="adam", lr=0.02)]
)
def test_fixed_dataset_full_batch_matches_numpy_optimiser(opt):
    model = Regression(d=4, eps=0.3, bias=True)
    base = dict(
        n_steps=25,
        batch_size=32,
        dataset_size=32,
        lr_scale={"b": 0.5},
        saveat=SaveAt(every=5),
        eval_size=0,
        lr=Schedule(value=0.1, kind="inverse_time", rate=0.05),
    )
    base.update(opt)
    if "lr" in opt:
        base["lr"] = opt["lr"]
    cfg = config(**base)
    traj = train(model, cfg, device=CPU)
    for i, seed in enumerate(cfg.seeds):
        ref = _numpy_reference(model, cfg, seed)
        want = np.array([ref[s] for s in traj["step"].values])
        # float64 rounding: torch and numpy sum in different orders (~1e-16 per op) over 25 contracting steps.
        np.testing.assert_allclose(traj["w0"].values[i], want, rtol=1e-11, atol=1e-13)
        # Negative control: the same reference with the wrong optimiser coefficient differs far beyond that.
        wrong = (
            dataclasses.replace(cfg, betas=(0.5, 0.999))
            if cfg.optimizer == "adam"
            else dataclasses.replace(cfg, lr_scale={"b": 1.0}, momentum=0.0 if cfg.momentum else 0.5)
        )
        bad = np.array([_numpy_reference(model, wrong, seed)[s] for s in traj["step"].values])
        assert np.max(np.abs(bad - want)) > 1e-4


def test_minibatches_follow_per_epoch_permutations_of_the_sgd_stream():
    model = Regression(d=3, eps=0.2)
    cfg = config(seeds=(5,), n_steps=7, batch_size=3, dataset_size=10, lr=0.2, saveat=SaveAt(every=1), eval_size=0)
    traj = train(model, cfg, device=CPU)
    data = model.sample([stream(5, "data")], 10, device=torch.device(CPU), dtype=torch.float64)
    X, y = data["x"][0].numpy(), data["y"][0].numpy()
    w = model.init_params([stream(5, "init")], device=torch.device(CPU), dtype=torch.float64)["w"][0].numpy()
    g_sgd = stream(5, "sgd")
    got = [w[0]]
    for n in range(7):
        if n % 3 == 0:  # 10 // 3 = 3 steps per epoch; the 10th sample of each permutation is dropped
            perm = torch.randperm(10, generator=g_sgd).numpy()
        idx = perm[(n % 3) * 3 : (n % 3) * 3 + 3]
        w = w - 0.2 * X[idx].T @ (X[idx] @ w - y[idx]) / 3
        got.append(w[0])
    # float64 rounding only (order of summation), 7 steps.
    np.testing.assert_allclose(traj["w0"].values[0], got, rtol=1e-12, atol=1e-14)


def test_projected_sgd_keeps_the_norm_and_matches_the_pgd_formula():
    model = SphereTeacher(d=5)
    cfg = config(seeds=(2, 9), n_steps=30, batch_size=16, dataset_size=16, lr=0.1, saveat=SaveAt(every=1), eval_size=0)
    traj = train(model, cfg, device=CPU)
    # |w| = 1 up to float64 rounding of one normalisation (a few ulp).
    np.testing.assert_allclose(traj["norm"].values, 1.0, rtol=0, atol=4e-16)
    for i, seed in enumerate(cfg.seeds):
        X = model.sample([stream(seed, "data")], 16, device=torch.device(CPU), dtype=torch.float64)["x"][0].numpy()
        w = model.init_params([stream(seed, "init")], device=torch.device(CPU), dtype=torch.float64)["w"][0].numpy()
        e1 = np.eye(5)[0]
        ms = [w[0]]
        for _ in range(30):  # single_location spec §6.1: w <- Pi(w - lr (I - w w^T) grad)
            g = X.T @ (X @ (w - e1)) / 16
            w = w - 0.1 * (g - (g @ w) * w)
            w = w / np.linalg.norm(w)
            ms.append(w[0])
        np.testing.assert_allclose(traj["m"].values[i], ms, rtol=1e-12, atol=1e-14)  # rounding only
    # Negative control: without the tangent projection the trajectory is visibly different.
    assert abs(traj["m"].values[0, 1] - traj["m"].values[0, 0]) > 1e-3


def test_lr_temperature_and_per_parameter_schedules_are_applied_at_each_step():
    lr = Schedule(value=0.5, kind="exponential", gamma=0.5, every=3)
    lam = Schedule(value=2.0, kind="inverse_time", rate=0.25)
    cfg = config(
        seeds=(0,), n_steps=9, lr=lr, lr_scale={"b": 3.0}, schedules={"lam": lam}, saveat=SaveAt(every=1), eval_size=1
    )
    traj = train(Linear(), cfg, device=CPU)
    n = np.arange(9)
    lr_n = 0.5 * 0.5 ** (n // 3)  # exponential: value * gamma ** (n // every)
    lam_n = 2.0 / (1 + 0.25 * n)  # inverse_time: value / (1 + rate n)
    a0 = -np.concatenate([[0.0], np.cumsum(lr_n * lam_n * 1.0)])  # c_a[0] = 1
    b2 = -np.concatenate([[0.0], np.cumsum(3.0 * lr_n * lam_n * 3.0)])  # lr_scale 3, c_b[2] = 3
    np.testing.assert_allclose(traj["a0"].values[0], a0, rtol=1e-14)  # float64 rounding of the cumulative sum
    np.testing.assert_allclose(traj["b2"].values[0], b2, rtol=1e-14)
    # The row at step n is evaluated with the hyper-parameters of step n (single_location spec §0.3).
    np.testing.assert_array_equal(traj["lam_seen"].values[0], 2.0 / (1 + 0.25 * np.arange(10)))


def test_schedule_values_and_refusals():
    assert Schedule(value=3.0).at(10**6) == 3.0
    assert Schedule(value=2.0, kind="inverse_time", rate=1e-4).at(10**4) == 1.0
    assert Schedule(value=1.0, kind="exponential", gamma=0.5, every=2).at(5) == 0.25
    with pytest.raises(ValueError, match="rate applies only to kind='inverse_time'"):
        Schedule(value=1.0, rate=0.1)
    with pytest.raises(ValueError, match="Schedule.kind"):
        Schedule(value=1.0, kind="cosine")


# ---------------------------------------------------------------------------------------------------------------
# Many seeds at once; resume; divergence


@pytest.mark.parametrize("cls", [Regression, CounterRegression])
@pytest.mark.parametrize("mode", [dict(optimizer="adam", refill=3), dict(dataset_size=10, momentum=0.9)])
def test_batched_seeds_equal_separate_single_seed_runs_bitwise(mode, cls):
    model = cls(d=5, bias=True)
    cfg = config(seeds=(3, 11, 42), **mode)
    together, params = train(model, cfg, device=CPU, return_params=True)
    for i, seed in enumerate(cfg.seeds):
        alone, p1 = train(model, dataclasses.replace(cfg, seeds=(seed,)), device=CPU, return_params=True)
        same(together.isel(trajectory=[i]), alone)
        for k in params:
            assert torch.equal(params[k][i : i + 1], p1[k]), k
    assert list(together["trajectory"].values) == [3, 11, 42]
    # Seeds really differ (the streams are not shared).
    assert np.all(np.diff(together["q"].values[:, -1]) != 0)


def test_projected_sgd_batched_equals_single_seed_bitwise():
    cfg = config(seeds=(4, 8), batch_size=3, refill=4)
    together = train(SphereTeacher(d=6), cfg, device=CPU)
    for i, seed in enumerate(cfg.seeds):
        same(
            together.isel(trajectory=[i]),
            train(SphereTeacher(d=6), dataclasses.replace(cfg, seeds=(seed,)), device=CPU),
        )


def test_a_shorter_run_is_a_prefix_of_a_longer_one():
    model = Regression(d=4)
    long = train(model, config(n_steps=40, refill=7), device=CPU)
    short = train(model, config(n_steps=20, refill=7), device=CPU)
    same(short, long.sel(time=short["time"]))


# Checkpoints at 7, 14, 21; the kill comes in update 23. Step 21 lies inside a data block in both modes (online
# blocks of 5 steps start at 20; epochs of 20 // 4 = 5 steps start at 20), so resuming re-draws a block mid-way.
@pytest.mark.parametrize("cls", [Regression, CounterRegression])
@pytest.mark.parametrize("mode", [dict(optimizer="adam", refill=5), dict(dataset_size=20, momentum=0.9)])
def test_resume_after_a_kill_is_bit_identical_to_an_uninterrupted_run(tmp_path, mode, cls):
    model = cls(d=5, bias=True)
    cfg = config(checkpoint_every=7, **mode)
    # dies in update 23; the checkpoint holds step 21, the last multiple of checkpoint_every reached
    (full, p_full), (resumed, p_res), path = kill_and_resume(
        model, cfg, tmp_path, at=24, checkpoint_step=21, return_params=True
    )
    same(full, resumed)
    for k in p_full:
        assert torch.equal(p_full[k], p_res[k]), k
    # The final checkpoint of both runs is the same state.
    a, b = load_checkpoint(tmp_path / "a.pt"), load_checkpoint(path)
    assert a["step"] == b["step"] == cfg.n_steps
    for k in a["params"]:
        assert torch.equal(a["params"][k], b["params"][k])
    # Resuming a finished run returns its trajectory without training.
    same(full, train(model, cfg, device=CPU, checkpoint_path=path, resume=True))


def test_checkpoint_is_a_weights_only_state_dict_written_atomically(tmp_path):
    path = tmp_path / "sub" / "ck.pt"
    train(Regression(d=3), config(n_steps=10, checkpoint_every=5), device=CPU, checkpoint_path=path)
    state = torch.load(path, weights_only=True)  # no pickle of arbitrary objects
    assert state["format"] == "attndyn.train/1" and state["step"] == 10
    assert TrainConfig.from_json(state["identity"]["config"]) == config(n_steps=10, checkpoint_every=5)
    # no temporary files left behind; the checkpoint replaced at step 10 is kept as the fallback (empirical.checkpoint)
    assert sorted(p.name for p in path.parent.iterdir()) == ["ck.prev.pt", "ck.pt"]


def test_nan_loss_stops_with_the_step_and_seed_and_keeps_the_last_good_checkpoint(tmp_path):
    path = tmp_path / "ck.pt"
    with pytest.raises(DivergenceError, match="non-finite loss at step 13 for seed 11") as info:
        train(
            NaNAt(Regression(d=4), step=13, seed_index=1), config(checkpoint_every=5), device=CPU, checkpoint_path=path
        )
    assert (info.value.step, info.value.trajectory, info.value.variable) == (13, 1, "loss")
    state = load_checkpoint(path)
    assert state["step"] == 10
    assert all(torch.isfinite(p).all() for p in state["params"].values())


def test_overflowing_sgd_raises_at_the_first_non_finite_step(tmp_path):
    path = tmp_path / "ck.pt"
    # lr = 50 on d = 6: |w - w*|^2 grows ~ 1e5-fold per step, so float64 overflows after about 60 steps.
    cfg = config(seeds=(1,), n_steps=400, lr=50.0, checkpoint_every=10, eval_size=0, saveat=SaveAt(final=True))
    with pytest.raises(DivergenceError) as info:
        train(Regression(d=6), cfg, device=CPU, checkpoint_path=path)
    k = info.value.step
    assert 0 < k < 400 and info.value.variable in ("loss", "w")
    last = load_checkpoint(path)
    assert last["step"] == 10 * ((k - 1) // 10) or last["step"] == 10 * (k // 10)
    assert all(torch.isfinite(p).all() for p in last["params"].values())
    # Independent confirmation that every step before k was finite: the same stream trained for k - 1 steps.
    train(Regression(d=6), dataclasses.replace(cfg, n_steps=k - 1, checkpoint_every=0), device=CPU)


# ---------------------------------------------------------------------------------------------------------------
# Configuration and refusals


def test_resume_with_another_configuration_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "ck.pt"
    model = Regression(d=4)
    cfg = config(n_steps=10, checkpoint_every=5)
    train(model, cfg, device=CPU, checkpoint_path=path)
    with pytest.raises(ValueError, match="field 'config.lr.value' differs"):
        train(model, dataclasses.replace(cfg, lr=0.2), device=CPU, checkpoint_path=path, resume=True)
    with pytest.raises(ValueError, match="field 'config.seeds.2' differs"):
        train(model, dataclasses.replace(cfg, seeds=(3, 11, 43)), device=CPU, checkpoint_path=path, resume=True)
    with pytest.raises(ValueError, match="field 'config.dtype' differs"):
        train(model, dataclasses.replace(cfg, dtype="float32"), device=CPU, checkpoint_path=path, resume=True)
    with pytest.raises(ValueError, match="field 'model.spec.d' differs"):
        train(Regression(d=5), cfg, device=CPU, checkpoint_path=path, resume=True)
    with pytest.raises(FileNotFoundError):
        train(model, cfg, device=CPU, checkpoint_path=tmp_path / "absent.pt", resume=True)


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(batch_size=0), "batch_size must be an integer >= 1"),
        (dict(n_steps=-1), "n_steps must be an integer >= 0"),
        (dict(dtype="float16"), "dtype='float16' is refused"),
        (dict(seeds=(1, 1)), "seeds must be distinct"),
        (dict(seeds=()), "seeds must be a non-empty"),
        (dict(dataset_size=3), "dataset_size must be an integer >= 4"),
        (dict(optimizer="adam", momentum=0.9), "momentum applies only to optimizer='sgd'"),
        (dict(optimizer="lbfgs"), "optimizer must be one of"),
        (dict(momentum=1.0), r"momentum must lie in \[0.0, 1.0\)"),
        (dict(lr=0.0), "lr must be > 0"),
        (dict(saveat=SaveAt(ts=(0.0, 1.0))), r"SaveAt\(ts=\.\.\.\) is for ODEs"),
        (dict(saveat=SaveAt(steps=(0, 99))), "SaveAt.steps must lie in"),
        (dict(refill=0), "refill must be an integer >= 1"),
    ],
)
def test_bad_configuration_is_refused_naming_the_parameter(changes, match):
    with pytest.raises(ValueError, match=match):
        config(**changes)


def test_bad_run_arguments_and_model_outputs_are_refused(tmp_path):
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu'"):
        train(Regression(), config(), device="tpu")
    with pytest.raises(ValueError, match="checkpoint_every > 0 needs a checkpoint_path"):
        train(Regression(), config(checkpoint_every=5), device=CPU)
    with pytest.raises(ValueError, match="lr_scale names \\['v'\\]"):
        train(Regression(), config(lr_scale={"v": 2.0}), device=CPU)
    with pytest.raises(ValueError, match="schedules must provide exactly \\['lam'\\]"):
        train(Linear(), config(), device=CPU)

    class BadLoss(Regression):
        def loss(self, params, batch, hyper):
            return super().loss(params, batch, hyper).sum()  # a scalar instead of one loss per seed

    with pytest.raises(ValueError, match=r"loss.* must have shape \(3,\) \(leading seed axis\)"):
        train(BadLoss(), config(), device=CPU)


def test_config_json_round_trip_and_hashable():
    cfg = config(
        lr=Schedule(value=0.1, kind="inverse_time", rate=1e-3),
        lr_scale={"w": 2.0},
        schedules={"lam": 1.5},
        dataset_size=8,
        saveat=SaveAt(steps=(0, 5, 40)),
    )
    assert TrainConfig.from_json(cfg.to_json()) == cfg
    assert hash(cfg) == hash(TrainConfig.from_json(cfg.to_json()))
    assert dict(cfg.schedules)["lam"] == Schedule(value=1.5)


# ---------------------------------------------------------------------------------------------------------------
# Output


@pytest.mark.parametrize(
    "saveat", [SaveAt(every=15), SaveAt(n=5), SaveAt(log=4), SaveAt(steps=(0, 7, 40)), SaveAt(final=True)]
)
def test_trajectory_has_the_probe_names_saveat_steps_and_time_axis(saveat, tmp_path):
    model = Regression(d=4)
    cfg = config(saveat=saveat)
    traj = train(model, cfg, device=CPU)
    assert isinstance(traj, Trajectory)
    assert list(traj.data_vars) == ["q", "w0", "loss"]
    assert traj["q"].dims == ("trajectory", "time")
    np.testing.assert_array_equal(traj["step"].values, saveat.resolve_steps(cfg.n_steps))
    np.testing.assert_array_equal(traj["time"].values, traj["step"].values / 4)  # time_of_step = step / d
    assert traj.attrs["source"] == "torch" and traj.attrs["model"] == "toy_regression"
    assert traj.attrs["time_unit"] == "step/d" and traj.attrs["dtype"] == "float64"
    assert TrainConfig.from_json(traj.attrs["config_json"]) == cfg
    assert '"d":4' in traj.attrs["spec_json"]
    back = Trajectory.load(traj.save(tmp_path / "t.nc"))
    same(traj, back)


class ArrayProbes(Regression):
    """:class:`Regression` logging the whole weight vector ``w`` (S, d) and ``w w^T`` (S, d, d) as array probes."""

    name = "toy_regression_arrays"

    @property
    def probe_dims(self):
        return {"w": ("component",), "wwT": ("row", "component")}

    @property
    def probe_coords(self):
        return {"component": [f"e{i}" for i in range(self.spec.d)]}  # 'row' gets the default 0 .. d - 1

    def probes(self, params):
        w = params["w"]
        return {**super().probes(params), "w": w.clone(), "wwT": w[:, :, None] * w[:, None, :]}


def test_array_probes_are_one_variable_with_dims_and_survive_resume_and_netcdf(tmp_path):
    model = ArrayProbes(d=4, bias=True)
    cfg = config(checkpoint_every=7, optimizer="adam", refill=5)
    (full, p_full), (resumed, _), _ = kill_and_resume(
        model, cfg, tmp_path, at=24, checkpoint_step=21, return_params=True
    )
    assert full["w"].dims == ("trajectory", "time", "component")
    assert full["wwT"].dims == ("trajectory", "time", "row", "component")
    assert list(full["component"].values) == ["e0", "e1", "e2", "e3"] and list(full["row"].values) == [0, 1, 2, 3]
    assert full.state_names == ["q", "w0", "loss"]  # the scalar probes; arrays are extra variables
    # the array probe holds exactly the scalar probe's numbers and the final weights (the same tensors, copied)
    np.testing.assert_array_equal(full["w"].sel(component="e0").values, full["w0"].values)
    np.testing.assert_array_equal(full["w"].values[:, -1], p_full["w"].numpy())
    np.testing.assert_array_equal(full["wwT"].values, full["w"].values[..., :, None] * full["w"].values[..., None, :])
    same(full, resumed)  # bit-identical through a checkpoint that stores (S, n_logged, *shape) records
    back = Trajectory.load(full.save(tmp_path / "t.nc"))
    same(full, back)
    assert back["wwT"].dims == full["wwT"].dims and list(back["component"].values) == ["e0", "e1", "e2", "e3"]


def test_array_probes_are_refused_without_or_against_their_declared_dims():
    class Undeclared(ArrayProbes):
        probe_dims = {"wwT": ("row", "component")}

    with pytest.raises(ValueError, match=r"logged value 'w' must have shape \(3,\)"):
        train(Undeclared(d=4), config(), device=CPU)

    class WrongRank(ArrayProbes):
        probe_dims = {"w": ("component",), "wwT": ("component",)}

    with pytest.raises(ValueError, match=r"'wwT' must have shape \(3, <1 dims of probe_dims>\)"):
        train(WrongRank(d=4), config(), device=CPU)

    class Clash(ArrayProbes):
        probe_dims = {"w": ("time",)}

    with pytest.raises(ValueError, match="may not reuse the dims 'trajectory' or 'time'"):
        train(Clash(d=4), config(), device=CPU)

    class Mismatch(ArrayProbes):
        probe_dims = {"w": ("component",), "wwT": ("row", "component")}
        probe_coords = {"component": ["a", "b"]}

    with pytest.raises(ValueError, match=r"probe_coords\['component'\] must have 4 labels"):
        train(Mismatch(d=4), config(), device=CPU)


def test_float32_runs_and_logs_float32_values():
    traj = train(Regression(d=4), config(dtype="float32"), device=CPU)
    assert traj.attrs["dtype"] == "float32"
    assert np.all(np.isfinite(traj["q"].values))


# ---------------------------------------------------------------------------------------------------------------
# GPU (skipped without CUDA): the same exactness guarantees on the device


@pytest.mark.gpu
def test_gpu_batched_equals_single_and_resume_is_bit_identical(tmp_path):
    model = Regression(d=5, bias=True)
    cfg = config(optimizer="adam", refill=5, checkpoint_every=7)
    full, resumed, _ = kill_and_resume(model, cfg, tmp_path, at=24, device="cuda")
    alone = train(model, dataclasses.replace(cfg, seeds=(11,), checkpoint_every=0), device="cuda")
    same(full.isel(trajectory=[1]), alone)
    same(full, resumed)
    assert full.attrs["device"].startswith("cuda")


def test_the_worked_example_of_the_module_docstring_runs(tmp_path):
    """The docstring of empirical.train is the model authors' contract: its example must stay correct."""
    import empirical.train as module

    doc = module.__doc__
    code = doc[doc.index("    import torch\n") : doc.index("Rerunning with")]
    code = "\n".join(line[4:] for line in code.splitlines())
    code = code.replace("n_steps=2000", "n_steps=200")
    code = code.replace('"results/teacher/ckpt.pt"', repr(str(tmp_path / "c.pt")))
    code = code.replace('device="auto"', 'device="cpu", progress=True')
    namespace: dict = {}
    exec(compile(code, "empirical.train docstring", "exec"), namespace)
    traj = namespace["traj"]
    assert traj["m"].shape == (30, 3) and list(traj["step"].values) == [0, 100, 200]
    assert np.all(traj["m"].values[:, -1] > traj["m"].values[:, 0])  # the overlap grows towards the teacher
    assert load_checkpoint(tmp_path / "c.pt")["step"] == 200


# ---------------------------------------------------------------------------------------------------------------
# Counter-keyed block streams (empirical.seeding.BlockRNG)


def test_block_rng_normals_have_the_normal_law():
    """KS against N(0, 1) on 400 000 draws (4 seeds x 100 000), the tail beyond the ziggurat's r = 3.654 (the exact
    tail sampler) and the first two moments: every check at a false-alarm level <= 1e-4, and a law 3 % too wide is
    rejected by the same KS rule (its KS distance 0.03 * phi(1) = 0.0073 is twice the critical value 0.0035)."""
    from scipy import stats

    from empirical.seeding import _ZIG_F, _ZIG_K, _ZIG_V, _ZIG_X

    # The tables: every layer has area v (rectangles x_i (f(x_{i+1}) - f(x_i)), to 1e-9 relative: the published r, v
    # close the recursion to that accuracy), and the integer fast path never admits a point beyond x_{i+1}.
    areas = _ZIG_X[1:-1] * (_ZIG_F[2:] - _ZIG_F[1:-1])
    np.testing.assert_allclose(areas, _ZIG_V, rtol=1e-8)
    K = _ZIG_K.astype(np.float64)  # < 2**53: exact
    assert np.all((K - 1) * 2.0**-53 * _ZIG_X[:-1] < _ZIG_X[1:]) and np.all(
        K >= 0.999 * _ZIG_X[1:] / _ZIG_X[:-1] * 2.0**53
    )
    x = BlockRNG(stream_keys(range(4), "data"), 5, CPU).normal((100_000,)).numpy().ravel()
    assert stats.kstest(x, "norm").pvalue > 1e-4
    assert stats.kstest(x * 1.03, "norm").pvalue < 1e-4  # negative control: sd 1.03
    r = 3.6541528853610088
    p = 2 * stats.norm.sf(r)
    # 4.5 SE of a binomial count: two-sided false alarm 7e-6.
    assert abs((np.abs(x) > r).sum() - x.size * p) < 4.5 * math.sqrt(x.size * p)
    # Moments: mean and variance within 5 SE (SE 1/sqrt(n) and sqrt(2/n)).
    assert abs(x.mean()) < 5 / math.sqrt(x.size) and abs(x.var() - 1) < 5 * math.sqrt(2 / x.size)


def test_block_rng_uniforms_and_integers_are_uniform_and_unbiased():
    """Uniforms: KS against U(0, 1); integers in [0, 7): chi-square with 6 d.o.f. (false alarm 1e-4 each)."""
    from scipy import stats

    rng = BlockRNG(stream_keys(range(3), "eval"), 0, CPU)
    u = rng.uniform((50_000,)).numpy().ravel()
    assert u.min() >= 0 and u.max() < 1 and stats.kstest(u, "uniform").pvalue > 1e-4
    k = rng.integers(7, (50_000,)).numpy().ravel()
    assert k.min() == 0 and k.max() == 6
    counts = np.bincount(k, minlength=7)
    assert stats.chisquare(counts).pvalue > 1e-4
    with pytest.raises(ValueError, match="high"):
        rng.integers(0, 3)


def test_block_rng_numbers_of_a_seed_depend_only_on_seed_stream_and_block():
    """Seed 7's draws are the same alone or among other seeds (bit for bit), repeat for the same block, and differ
    between blocks, streams and seeds; the pool recycles buffers without changing the numbers."""

    def draws(seeds, stream="data", block=3, pool=None):
        rng = BlockRNG(stream_keys(seeds, stream), block, CPU, pool)
        return rng.integers(10, (5,)), rng.normal((4, 3)), rng.normal((6,)), rng.uniform((2,))

    together, alone = draws((2, 7, 9)), draws((7,))
    for a, b in zip(together, alone):
        assert torch.equal(a[1], b[0])
    for a, b in zip(draws((7,)), alone):
        assert torch.equal(a, b)
    pool: list = []
    draws((7,), block=0, pool=pool)
    for a, b in zip(draws((7,), pool=pool), alone):
        assert torch.equal(a, b)
    assert not torch.equal(draws((7,), block=4)[1], alone[1])
    assert not torch.equal(draws((7,), stream="eval")[1], alone[1])
    assert not torch.equal(together[1][0], together[1][1])
    with pytest.raises(ValueError, match="block"):
        BlockRNG(stream_keys((1,), "data"), -1, CPU)
    with pytest.raises(ValueError, match="stream"):
        stream_keys((1,), "noise")
