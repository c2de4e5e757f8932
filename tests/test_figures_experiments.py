"""The experiment layer (figures/experiments.py): the figures' one entry to torch training, recorded per build."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

from figures import experiments
from figures.registry import Registry, build
from tests._figures import TOY_PARAMS, toy_data, toy_plot

FIGURES = Path(__file__).resolve().parents[1] / "figures"

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
    modules = [p for p in FIGURES.glob("*.py") if p.name != "experiments.py"]
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
