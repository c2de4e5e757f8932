"""Argument checks hold at every depth: a checked function called from a user's callback (inside a sweep, a Monte
Carlo predictor) checks its own arguments, and huge integers and empty paths get clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from closedform import icl_regression as icl
from dynamics.validation import Range, validated


def _gd_risk_of_none(c):
    return float(icl.gd_risk(icl.ICLRegressionTask(d=2, L=3, sigma2=0.1), None))


def _state_names_negative(c):
    return len(icl.state_names(-3))


@pytest.mark.parametrize(
    "fn, words", [(_gd_risk_of_none, ("eta", "gd_risk")), (_state_names_negative, ("H", ">= 1", "-3"))]
)
def test_checks_inside_a_sweep_callback(fn, words):
    with pytest.raises(dynamics.SweepError) as info:
        dynamics.sweep(fn, {"c": [0]}, processes=1)
    message = str(info.value)
    for word in words:
        assert word in message


def test_checks_inside_a_risk_mc_predictor():
    task = icl.ICLRegressionTask(d=2, L=3, sigma2=0.1)

    def predict(X, y, xq):
        icl.state_names(-3)  # a checked call inside the user's predictor
        return np.zeros(len(y))

    with pytest.raises(ValueError, match="H must be an integer"):
        icl.risk_mc(task, predict, 10, rng=0)


def test_nested_checked_call_checks_its_arguments():
    @validated(x=Range(gt=0))
    def inner(x: float):
        return x

    @validated
    def outer(x: float):
        return inner(-x)

    assert outer(-1.0) == 1.0
    with pytest.raises(ValueError, match="x must be"):
        outer(1.0)


@pytest.mark.parametrize("value", [10**30, -(10**30), 2**63, 2**31])
def test_huge_integers_get_a_clear_error(value):
    with pytest.raises(ValueError, match="H must be an integer"):
        icl.state_names(value)


def test_huge_integer_float_range_is_checked():
    @validated(x=Range(le=1.0))
    def f(x: float):
        return x

    with pytest.raises(ValueError, match="x must be"):
        f(10**400)  # beyond float range: compared exactly, not converted


def test_empty_path_refused():
    import xarray as xr

    with pytest.raises(ValueError, match="path must be a non-empty path"):
        dynamics.save_dataset(xr.Dataset({"a": ("x", np.arange(3.0))}), "")


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--seed", str(10**30)], ("--seed", "2147483647")),
        (["--out", ""], ("--out", "non-empty")),
        (["--cache-dir", ""], ("--cache-dir", "non-empty")),
    ],
)
def test_cli_huge_seed_and_empty_paths(argv, words, capsys, tmp_path, monkeypatch):
    from figures.__main__ import main

    monkeypatch.chdir(tmp_path)  # nothing may be written here
    assert main(["make", "single_location.fig3", "--preset", "tiny", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # refused before computing or writing


def test_saveat_negative_steps_refused():
    with pytest.raises(ValueError, match="SaveAt.steps must be integers >= 0"):
        dynamics.SaveAt(steps=(-1, -1, -1))


@pytest.mark.parametrize(
    "args, match",
    [
        ((None, np.ones(3)), "proj_pos must be an array"),
        ((np.ones(1), np.ones(3)), "proj_pos must hold at least 2"),
        (([1 + 2j, 1.0], [1.0, 2.0]), "complex values are refused"),
        ((np.ones(3), [1.0, np.nan]), "proj_neg must be"),
    ],
)
def test_probing_separation_refuses_invalid_groups(args, match):
    from empirical import probing

    with pytest.raises(ValueError, match=match):
        probing.separation(*args)


def test_probing_separation_value():
    from empirical import probing

    # by hand: means 2 and 1, sample variances 1 and 1 -> d' = 1 / sqrt(1) = 1
    assert probing.separation([1.0, 2.0, 3.0], [0.0, 1.0, 2.0]) == 1.0


def test_probing_fit_probe_refuses_mismatched_labels():
    from empirical import probing

    with pytest.raises(ValueError, match="y_train must have one label per row"):
        probing.fit_probe(np.ones((4, 3)), np.ones(3, dtype=int))


def test_single_location_preset_refuses_a_huge_batch():
    from empirical.models import single_location

    with pytest.raises(ValueError, match="batch_size"):
        single_location.config("fig5", (0, 1), 10, batch_size=10**12)
