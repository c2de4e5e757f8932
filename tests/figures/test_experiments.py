"""The experiment layer (figures/experiments.py): the figures' one entry to torch training, recorded per build and
cached on disk across builds."""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import xarray as xr

from figures import experiments
from figures.registry import Registry, build
from tests._figures import TOY_PARAMS, toy_data, toy_plot

FIGURES = Path(__file__).resolve().parents[2] / "figures"

# What a figure module may take from empirical.train: configuration types, not the training function.
ALLOWED_FROM_TRAIN = {"TrainConfig", "Schedule"}


def _training_imports(path: Path) -> list[str]:
    """Imports of ``path`` that reach empirical's training function other than through figures.experiments."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "empirical.train":
            bad += [
                f"{path.name}:{node.lineno} from empirical.train import {a.name}"
                for a in node.names
                if a.name not in ALLOWED_FROM_TRAIN
            ]
        elif isinstance(node, ast.ImportFrom) and node.module == "empirical":
            bad += [f"{path.name}:{node.lineno} from empirical import train" for a in node.names if a.name == "train"]
        elif isinstance(node, ast.Import):
            bad += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names if a.name == "empirical.train"]
    return bad


def test_no_figure_module_trains_without_the_experiment_layer():
    modules = [p for p in FIGURES.rglob("*.py") if p.name != "experiments.py"]
    assert len(modules) > 10
    bad = [b for p in modules for b in _training_imports(p)]
    assert bad == [], bad


def test_the_import_check_catches_a_direct_import(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f():\n    from empirical.train import Schedule, train\n    import empirical.train\n")
    assert _training_imports(p) == ["m.py:2 from empirical.train import train", "m.py:3 import empirical.train"]


def fake_trajectory(n_steps: int):
    config = {"n_steps": n_steps, "seeds": [1, 2], "lr": 0.1}
    return SimpleNamespace(
        attrs={"model": "toy_model", "device": "cpu", "dtype": "float64", "config_json": json.dumps(config)}
    )


def test_build_records_the_trainer_configuration_of_every_run(tmp_path):
    reg = Registry(models=("toy",), package=None)

    def data(cfg):
        experiments.note(fake_trajectory(5))
        experiments.note(fake_trajectory(5))  # the same run reused: listed once
        experiments.note(fake_trajectory(int(cfg.params["n_times"])))
        return toy_data(cfg)

    reg.register(name="toy.trained", model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS, plot=toy_plot)(
        data
    )
    res = build("toy.trained", "tiny", device="cpu", cache_dir=tmp_path, registry=reg)
    runs = json.loads(res.dataset.attrs["train_configs_json"])
    assert [r["config"]["n_steps"] for r in runs] == [5, TOY_PARAMS["tiny"]["n_times"]]
    assert runs[0] == {
        "model": "toy_model",
        "device": "cpu",
        "dtype": "float64",
        "config": {"n_steps": 5, "seeds": [1, 2], "lr": 0.1},
    }
    again = build("toy.trained", "tiny", device="cpu", cache_dir=tmp_path, registry=reg)  # cache hit: same record
    assert (
        again.status == "cached"
        and again.dataset.attrs["train_configs_json"] == res.dataset.attrs["train_configs_json"]
    )


def test_recording_nests_and_is_off_outside_a_build():
    experiments.note(fake_trajectory(1))  # no build: nothing to record into, no error
    with experiments.recording() as outer:
        experiments.note(fake_trajectory(1))
        with experiments.recording() as inner:
            experiments.note(fake_trajectory(2))
    assert [r["config"]["n_steps"] for r in inner] == [2]
    assert [r["config"]["n_steps"] for r in outer] == [1, 2]


def test_memo_records_the_runs_of_a_hit_again():
    store: dict = {}
    calls = []

    def compute():
        calls.append(1)
        experiments.note(fake_trajectory(7))
        return "value"

    for _ in range(2):
        with experiments.recording() as runs:
            assert experiments.memo(store, "k", compute) == "value"
        assert [r["config"]["n_steps"] for r in runs] == [7]
    assert calls == [1]


# -- the disk cache of training runs -----------------------------------------------------------------------------------


def _tiny_run(n_steps: int = 4, d: int = 4):
    """A real torch run of a few steps (single-location model, two seeds): its model and trainer configuration."""
    from closedform import single_location as sl
    from empirical.models import single_location as slm

    task = sl.SingleLocationTask(d=d, L=4)
    model = slm.build(task, rng=np.random.default_rng(3))
    return model, slm.config("fig5", (11, 12), n_steps=n_steps, log_every=2, eval_size=16)


@pytest.fixture
def trainer_calls(monkeypatch):
    """Count the calls of empirical's training function (the experiment layer imports it at call time)."""
    import empirical.train

    calls = []
    real = empirical.train.train

    def counting(*args, **kwargs):
        calls.append(args[1].n_steps)
        return real(*args, **kwargs)

    monkeypatch.setattr(empirical.train, "train", counting)
    return calls


def _run_registry():
    """Two figures whose data are the same torch run (different figure names: separate figure-cache entries)."""
    reg = Registry(models=("toy",), package=None)

    def data(cfg):
        model, config = _tiny_run()
        traj, params = experiments.train(model, config, device="cpu", return_params=True)
        return xr.Dataset(
            {
                "kappa": (("seed", "step"), traj["kappa"].values),
                "k": (("seed", "dim"), params["k"].numpy()),
            },
            coords={"step": traj.step.values},
        )

    for name in ("toy.run_a", "toy.run_b"):
        reg.register(name=name, model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS, plot=toy_plot)(data)
    return reg


def test_a_second_build_reuses_the_stored_run_bit_for_bit_without_training(tmp_path, trainer_calls):
    reg = _run_registry()
    first = build("toy.run_a", "tiny", device="cpu", cache_dir=tmp_path, registry=reg)
    assert trainer_calls == [4] and first.status == "computed"
    stored = sorted((tmp_path / "_runs").rglob("*"))
    assert [p.suffix for p in stored if p.is_file()] == [".json", ".nc"]  # netCDF and its JSON sidecar, no pickle
    second = build("toy.run_b", "tiny", device="cpu", cache_dir=tmp_path, registry=reg)  # another figure, same run
    assert trainer_calls == [4] and second.status == "computed"  # its data computed, the run read from disk
    for v in ("kappa", "k"):
        assert first.dataset[v].values.tobytes() == second.dataset[v].values.tobytes()
    assert json.loads(second.dataset.attrs["train_configs_json"]) == json.loads(
        first.dataset.attrs["train_configs_json"]
    )
    build("toy.run_b", "tiny", device="cpu", cache_dir=tmp_path, registry=reg, recompute=True)
    assert trainer_calls == [4, 4]  # recompute retrains the run


def test_a_fresh_run_equals_the_run_without_a_cache(tmp_path, trainer_calls):
    """What the cache returns (read back from its file) is the trainer's own result, bit for bit."""
    model, config = _tiny_run()
    plain, plain_params = experiments.train(model, config, device="cpu", return_params=True)  # no cache open
    with experiments.caching(tmp_path):
        fresh, fresh_params = experiments.train(*_tiny_run(), device="cpu", return_params=True)
        reused = experiments.train(*_tiny_run(), device="cpu")
    assert trainer_calls == [4, 4]
    for v in plain.data_vars:
        assert plain[v].values.tobytes() == fresh[v].values.tobytes() == reused[v].values.tobytes(), v
    assert plain.step.values.tolist() == reused.step.values.tolist()
    assert set(plain_params) == set(fresh_params)
    for k in plain_params:
        assert plain_params[k].dtype == fresh_params[k].dtype
        assert plain_params[k].numpy().tobytes() == fresh_params[k].numpy().tobytes()


def test_the_run_key_follows_the_model_state_and_the_configuration(tmp_path, trainer_calls):
    with experiments.caching(tmp_path):
        experiments.train(*_tiny_run(), device="cpu")
        experiments.train(*_tiny_run(d=5), device="cpu")  # another task: another run
        experiments.train(*_tiny_run(n_steps=6), device="cpu")  # another trainer configuration
        experiments.train(*_tiny_run(d=5), device="cpu")  # stored
    assert trainer_calls == [4, 4, 6]
    a, b = _tiny_run(), _tiny_run()
    assert experiments.run_identity(*a, "cpu") == experiments.run_identity(*b, "cpu")
    b[0].k_star_np[0] = np.nextafter(b[0].k_star_np[0], 2.0)  # one ulp of one model array
    assert experiments.run_identity(*a, "cpu") != experiments.run_identity(*b, "cpu")


def test_a_corrupted_run_is_retrained_never_used(tmp_path, trainer_calls, caplog):
    with experiments.caching(tmp_path):
        first = experiments.train(*_tiny_run(), device="cpu")
    (data,) = (tmp_path / "_runs").rglob("*.nc")
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING), experiments.caching(tmp_path):
        again = experiments.train(*_tiny_run(), device="cpu")
    assert trainer_calls == [4, 4] and "sha256 mismatch" in caplog.text
    assert first["kappa"].values.tobytes() == again["kappa"].values.tobytes()


def test_a_model_that_cannot_be_fingerprinted_is_trained_without_the_cache(tmp_path, trainer_calls):
    model, config = _tiny_run()
    model.hook = lambda x: x  # a function: no value to key on
    assert experiments.run_identity(model, config, "cpu") is None
    with experiments.caching(tmp_path):
        experiments.train(model, config, device="cpu")
        experiments.train(model, config, device="cpu")
    assert trainer_calls == [4, 4] and not (tmp_path / "_runs").exists()


def test_a_figure_moved_to_another_module_keeps_its_cache_entry(tmp_path):
    """The figure cache's key is the resolved configuration, not where the code lives: the same figure registered
    from another module (a split module) finds its data."""
    import types

    results = []
    for module in ("figures.old_place", "figures.new_place.family"):
        data = types.FunctionType(toy_data.__code__, toy_data.__globals__, "data_toy")
        data.__module__ = module
        reg = Registry(models=("toy",), package=None)
        reg.register(name="toy.moved", model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS, plot=toy_plot)(
            data
        )
        results.append(build("toy.moved", "tiny", device="cpu", cache_dir=tmp_path, registry=reg))
    assert [r.status for r in results] == ["computed", "cached"]
    assert results[0].cache_path == results[1].cache_path
    xr.testing.assert_identical(results[0].dataset, results[1].dataset)
