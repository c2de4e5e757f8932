"""Typed figure parameters and overrides (figures/params.py, figures.registry.build/make, ``--set``, ``params``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr

from figures import registry
from figures.__main__ import main, params_text
from figures.params import VOCABULARY, Param, ParamsRecord, parse_assignment
from figures.presets import PRESETS
from figures.registry import CalibrationWarning, Registry, build
from tests._figures import TOY_PARAMS, synthetic_registry, toy_data, toy_plot

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def reg():
    return synthetic_registry()


def counted_registry(calls: list, **kw) -> Registry:
    """A one-figure registry whose data function records each call (so a test sees whether anything ran)."""
    reg = Registry(models=("toy",), package=None)

    def data(cfg):
        calls.append(dict(cfg.params))
        return toy_data(cfg)

    reg.register(
        name="toy.count",
        model="toy",
        paper="p",
        spec="s",
        caption="Counted.",
        plot=toy_plot,
        **{"params": TOY_PARAMS, **kw},
    )(data)
    return reg


# ----------------------------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------------------------
def test_presets_are_instances_of_one_frozen_typed_record(reg):
    spec = reg.get("toy.decay")
    cls = spec.record_type
    assert dataclasses.is_dataclass(cls) and issubclass(cls, ParamsRecord)
    assert all(type(spec.params[p]) is cls for p in PRESETS)
    tiny = spec.params["tiny"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny.n_seeds = 3
    meta = {f.name: f.metadata["param"] for f in dataclasses.fields(cls)}
    assert meta == {k: VOCABULARY[k] for k in TOY_PARAMS["tiny"]}
    assert meta["n_seeds"].unit == "seeds" and meta["n_seeds"].integer and not meta["sigma"].integer
    assert dict(tiny) == TOY_PARAMS["tiny"] and tiny["n_times"] == tiny.n_times


def test_replace_validates_keys_types_and_ranges(reg):
    tiny = reg.get("toy.decay").params["tiny"]
    assert tiny.replace(n_seeds=5).n_seeds == 5 and tiny.n_seeds == TOY_PARAMS["tiny"]["n_seeds"]
    with pytest.raises(ValueError, match=r"unknown parameter n_distinct .*valid keys: n_times, n_seeds, sigma"):
        tiny.replace(n_distinct=5)
    with pytest.raises(ValueError, match="n_seeds must be an integer >= 2"):
        tiny.replace(n_seeds=1)
    with pytest.raises(ValueError, match="n_seeds must be an integer"):
        tiny.replace(n_seeds=2.5)
    with pytest.raises(ValueError, match="sigma must be a finite number >= 0"):
        tiny.replace(sigma=-0.1)
    with pytest.raises(ValueError, match="sigma must be a finite number"):
        tiny.replace(sigma="big")


def test_list_parameters_take_a_number_as_a_one_element_list():
    presets = {"quick": {"eta_Y": [1.0, 10.0], "Hs": [2, 4]}}
    rec = registry.records("toy.lists", presets)["quick"]
    assert rec.replace(eta_Y=3)["eta_Y"] == [3.0] and rec.replace(Hs=[8])["Hs"] == [8]
    with pytest.raises(ValueError, match=r"Hs\[1\] must be an integer >= 1"):
        rec.replace(Hs=[2, 0])
    with pytest.raises(ValueError, match="non-empty list"):
        rec.replace(Hs=[])


def test_parse_assignment_forms():
    assert parse_assignment("eta_Y=3") == (None, "eta_Y", 3)
    assert parse_assignment("scan_snap.fig4.eta_Y=[1, 3]") == ("scan_snap.fig4", "eta_Y", [1, 3])
    assert parse_assignment("lr=1e-3") == (None, "lr", 1e-3)
    for bad in ("eta_Y", "=3", "a.b-c=1"):
        with pytest.raises(ValueError, match="--set takes"):
            parse_assignment(bad)
    with pytest.raises(ValueError, match="FIGURE.PARAM=VALUE"):
        parse_assignment("eta_Y=3", figure_required=True)


# ----------------------------------------------------------------------------------------------------------------
# Overrides through build/make and the command line
# ----------------------------------------------------------------------------------------------------------------
def test_build_with_overrides_records_them_in_config_caption_and_netcdf(reg, tmp_path):
    default = build("toy.decay", "tiny", device="cpu", cache_dir=tmp_path, registry=reg)
    res = build("toy.decay", "tiny", device="cpu", cache_dir=tmp_path, registry=reg, n_times=11)
    assert res.status == "computed" and res.cache_path != default.cache_path
    assert res.config.overrides == ("n_times",) and res.config.params["n_times"] == 11
    assert res.dataset.sizes["time"] == 11
    on_disk = xr.open_dataset(res.cache_path)
    try:
        config = json.loads(on_disk.attrs["config_json"])
        assert config["params"] == {**TOY_PARAMS["tiny"], "n_times": 11} and config["overrides"] == ["n_times"]
        overrides = json.loads(on_disk.attrs["overrides_json"])
        assert overrides == {"n_times": {"value": 11, "preset_value": TOY_PARAMS["tiny"]["n_times"]}}
        assert "Overridden parameters: n_times = 11 (preset 21)." in on_disk.attrs["caption"]
    finally:
        on_disk.close()
    assert "Overridden" not in default.dataset.attrs["caption"] and default.config.overrides == ()
    # an "override" equal to the preset's value is none: same configuration, the cached entry reused bit for bit
    same = build(
        "toy.decay", "tiny", device="cpu", cache_dir=tmp_path, registry=reg, n_times=TOY_PARAMS["tiny"]["n_times"]
    )
    assert same.status == "cached" and same.cache_path == default.cache_path
    xr.testing.assert_identical(same.dataset, default.dataset)


def test_unknown_or_out_of_range_override_refused_before_computing(tmp_path, capsys):
    calls: list = []
    reg = counted_registry(calls)
    args = ["--preset", "tiny", "--device", "cpu", "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "o")]
    assert main(["make", "toy.count", *args, "--set", "n_distinct=5"], reg=reg) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown parameter n_distinct" in err
    assert "valid keys: n_times, n_seeds, sigma" in err
    assert main(["make", "toy.count", *args, "--set", "n_seeds=1"], reg=reg) == 2
    assert "n_seeds must be an integer >= 2" in capsys.readouterr().err
    assert main(["make", "toy.count", *args, "--set", "other.fig.n_seeds=3"], reg=reg) == 2
    assert main(["report", *args, "--set", "n_seeds=3"], reg=reg) == 2  # report: FIGURE.PARAM only
    assert main(["report", *args, "--set", "toy.count.bogus=3"], reg=reg) == 2
    assert calls == [] and not (tmp_path / "c").exists()
    with pytest.raises(ValueError, match="unknown parameter"):
        registry.make(["toy.count"], "tiny", registry=reg, cache_dir=None, out_dir=tmp_path, bogus=1)
    assert calls == []
    assert main(["make", "toy.count", *args, "--set", "n_seeds=3", "--set", "sigma=0.1"], reg=reg) == 0
    assert calls == [{**TOY_PARAMS["tiny"], "n_seeds": 3, "sigma": 0.1}]
    assert "Overridden parameters: n_seeds = 3 (preset 8); sigma = 0.1 (preset 0.05)." in capsys.readouterr().out


def test_report_records_overrides(tmp_path):
    from figures.report import build_report

    calls: list = []
    reg = counted_registry(calls)
    res = build_report(
        "tiny",
        device="cpu",
        out_dir=tmp_path / "r",
        cache_dir=None,
        registry=reg,
        jobs=1,
        overrides={"toy.count.n_times": 9},
    )
    summary = json.loads(res.summary_path.read_text())
    assert summary["figures"][0]["overrides"] == {"n_times": {"value": 9, "preset_value": 21}}
    html = res.path.read_text()
    assert "Overridden parameters: n_times = 9 (preset 21)." in html and "overridden" in html
    assert calls[0]["n_times"] == 9


def test_partial_presets_fall_back_with_a_message(tmp_path, caplog):
    calls: list = []
    reg = counted_registry(calls, params={"quick": TOY_PARAMS["tiny"]})
    spec = reg.get("toy.count")
    assert spec.defined_presets == ("quick",) and spec.params["paper"] == spec.params["quick"]
    with caplog.at_level(logging.WARNING, logger="figures.registry"):
        res = build("toy.count", "paper", device="cpu", cache_dir=None, registry=reg)
    assert [r.getMessage() for r in caplog.records] == [
        "toy.count defines no 'paper' preset; using its 'quick' parameters"
    ]
    assert res.config.params_from == "quick" and "defines no 'paper' preset" in res.dataset.attrs["caption"]
    assert spec.params_from("tiny") == "quick" and spec.params_from("quick") == "quick"
    assert registry._fallback_preset("paper", ("tiny", "quick")) == "quick"
    assert registry._fallback_preset("tiny", ("quick", "paper")) == "quick"


def test_override_outside_the_calibration_warns():
    calls: list = []
    reg = counted_registry(calls, calibrated_at={"n_times": 21})
    spec = reg.get("toy.count")
    assert "calibrated at n_times = 21" in spec.caption_for(registry.run_config(spec, "tiny"))
    with pytest.warns(CalibrationWarning, match="n_times = 11 is outside"):
        res = build("toy.count", "tiny", device="cpu", cache_dir=None, registry=reg, n_times=11)
    assert "Caution: n_times = 11 is outside" in res.dataset.attrs["caption"]
    with pytest.raises(ValueError, match="calibrated_at names unknown parameters"):
        counted_registry(calls, calibrated_at={"nope": 1})


# ----------------------------------------------------------------------------------------------------------------
# Every registered figure: typed, documented, round-trips through `params`
# ----------------------------------------------------------------------------------------------------------------
def test_every_registered_figure_round_trips_through_params(capsys):
    registry.discover()
    names = registry.REGISTRY.names()
    assert len(names) > 40
    assert main(["params", *names, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    for name in names:
        spec = registry.REGISTRY.get(name)
        cls = spec.record_type
        for preset in PRESETS:
            record = spec.params[preset]
            assert type(record) is cls
            assert cls(**printed[name][preset]) == record  # the printed values rebuild the same record
            assert record.replace(**printed[name][preset]) == record
        for f in dataclasses.fields(cls):
            assert isinstance(f.metadata["param"], Param) and f.metadata["param"].description
        text = params_text(registry.REGISTRY, name)
        assert all(f"  {k} " in text for k in cls.valid_keys())


def test_scan_snap_fig4_vocabulary_size_is_a_parameter():
    registry.discover()
    spec = registry.REGISTRY.get("scan_snap.fig4")
    assert spec.params["quick"]["num_unique"] == 10 and spec.calibrated_at["num_unique"] == 10
    assert spec.calibration_warnings(spec.params["quick"].replace(num_unique=20)) != []


@pytest.mark.slow
def test_cli_scan_snap_fig4_with_vocabulary_and_eta_overrides(tmp_path, capsys):
    args = ["--preset", "tiny", "--device", "cpu", "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "o")]
    with pytest.warns(CalibrationWarning):
        assert (
            main(["make", "scan_snap.fig4", *args, "--set", "num_unique=20", "--set", "eta_Y=3", "--no-progress"]) == 0
        )
    assert (
        "Overridden parameters: eta_Y = [3.0] (preset [1.0]); num_unique = 20 (preset 10)." in capsys.readouterr().out
    )
    (path,) = (tmp_path / "c" / "scan_snap.fig4").glob("*.nc")
    with xr.open_dataset(path) as ds:
        assert int(ds.attrs["M"]) == 54 and ds.eta_Y.values.tolist() == [3.0]
        assert json.loads(ds.attrs["config_json"])["params"]["num_unique"] == 20
        assert "num_unique = 20 (preset 10)" in ds.attrs["caption"]


# ----------------------------------------------------------------------------------------------------------------
# A closed pipe (`python -m figures list | head`)
# ----------------------------------------------------------------------------------------------------------------
def test_list_into_a_closed_pipe_exits_quietly():
    code = (
        "import os, sys\n"
        "r, w = os.pipe(); os.close(r); os.dup2(w, 1); os.close(w)\n"
        "from figures.__main__ import main\n"
        "from tests._figures import synthetic_registry\n"
        "sys.exit(main(['list'], reg=synthetic_registry()))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
