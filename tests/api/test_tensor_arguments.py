"""The public torch functions of the model modules check their tensors (real, finite, shapes consistent) with an error
naming the argument, while a model's training step calls their unchecked versions; and the other probes of the
outside sweep that were not clear errors (a NaN ratio from ``symmetric_flow(omega0=0)``, ``Trajectory`` arguments
refused deep inside xarray, ``compare_rows(theory_n_seeds=0)`` naming another parameter) now are."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import dynamics
from dynamics import validation as V
from tests import _bad_arguments_cases as C

#: Probes of the outside sweep (tools/bad_arguments.py) that came back NaN, accepted or unclear before the torch
#: functions checked their tensors: each must now be a clear error naming the parameter.
FIXED = [
    ("empirical.models.single_location.erf_mse", "X", "nan"),
    ("empirical.models.single_location.erf_mse", "y", "inf"),
    ("empirical.models.single_location.erf_mse", "k", "inf"),
    ("empirical.models.single_location.erf_mse", "v", "complex"),
    ("empirical.models.single_location.predict", "X", "complex"),
    ("empirical.models.single_location.predict", "k", "inf"),
    ("empirical.models.single_location.predict", "v", "nan"),
    ("empirical.models.icl_regression.softmax_mse", "KQ", "nan"),
    ("empirical.models.icl_regression.softmax_mse", "OV", "complex"),
    ("empirical.models.nearest_neighbor.embed", "X", "inf"),
    ("empirical.models.nearest_neighbor.embed", "xq", "nan"),
    ("empirical.models.nearest_neighbor.embed", "y", "nan"),
    ("empirical.models.group_sparse.loss_per_draw", "f", "inf"),
    ("empirical.models.group_sparse.loss_per_draw", "y", "nan"),
    ("empirical.models.scan_snap.attention_entropy", "a", "nan"),
    ("empirical.models.scan_snap.attention_entropy", "a", "negative"),
    ("empirical.models.scan_snap.attention_entropy", "a", "complex"),
    ("empirical.models.single_location_transformer.layer_norm", "x", "inf"),
    ("empirical.models.single_location_transformer.layer_norm", "x", "complex"),
    ("empirical.models.single_location_transformer.sample_tokens", "k_star", "wrong_shape"),
    ("empirical.models.scan_snap.distinct_recall", "Z_full", "wrong_shape"),
    ("empirical.models.random_walk.forward", "states", "nan"),
    ("empirical.models.random_walk.forward", "states", "negative"),
    ("closedform.icl_regression.symmetric_flow", "omega0", "zero"),
    ("dynamics.trajectory.Trajectory", "data_vars", "string"),
    ("dynamics.trajectory.Trajectory", "coords", "nan"),
    ("dynamics.trajectory.Trajectory", "attrs", "object"),
]


@pytest.mark.parametrize("q, param, kind", FIXED)
def test_fixed_probes_are_clear_errors(q, param, kind):
    assert C.run_probe(q, "", "")[0] == "ok"  # the valid example call still works
    verdict, detail = C.run_probe(q, param, kind)
    assert verdict == "clear", detail


@pytest.mark.parametrize(
    "q, param, kind",
    [
        ("empirical.models.single_location.erf_mse", "X", "nan"),
        ("empirical.models.nearest_neighbor.embed", "X", "inf"),
        ("empirical.models.random_walk.forward", "states", "nan"),
    ],
)
def test_fixed_probes_are_clear_errors_inside_a_sweep_callback(q, param, kind):
    verdict, detail = C.run_probe(q, param, kind, depth="callback")
    assert verdict == "clear", detail


def _sl_tensors(S=2, B=5, L=4, d=3):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g, dtype=torch.float64) for shape in ((S, B, L, d), (S, B), (S, d), (S, d))]


@pytest.mark.parametrize(
    "which, shape, words",
    [
        (1, (2, 4), ("y must have shape (S, B)", "B = 5", "as in X")),
        (2, (1, 3), ("k must have shape (S, d)", "S = 2", "got (1, 3)")),
        (3, (2, 4), ("v must have shape (S, d)", "d = 3", "got (2, 4)")),
    ],
)
def test_erf_mse_refuses_inconsistent_shapes(which, shape, words):
    from empirical.models import single_location as slm

    args = _sl_tensors()
    args[which] = torch.zeros(shape, dtype=torch.float64)
    with pytest.raises(ValueError) as info:
        slm.erf_mse(*args, 0.5)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_checked_and_unchecked_paths_give_the_same_loss():
    from empirical.models import single_location as slm

    X, y, k, v = _sl_tensors()
    assert torch.equal(slm.erf_mse(X, y, k, v, 0.5), slm._ErfMSE.apply(k, v, X, y, 0.5))
    assert torch.equal(slm.predict(X, k, v, 0.5), slm._predict(X, k, v, 0.5, "erf"))


def test_nan_tensor_message_names_argument_and_function():
    from empirical.models import nearest_neighbor as nnm

    X = torch.zeros(2, 4, 3, dtype=torch.float64)
    X[1, 2, 0] = math.nan
    with pytest.raises(ValueError, match=r"^X must be .*finite.*NaN or inf \(in embed\)"):
        nnm.embed(X, torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"y must have shape \(\.\.\., N\) with N = 4"):
        nnm.embed(torch.zeros(2, 4, 3), torch.zeros(2, 3), torch.zeros(2, 5))


def test_random_walk_states_must_be_codes_below_K():
    verdict, _ = C.run_probe("empirical.models.random_walk.forward", "", "")
    assert verdict == "ok"
    kw = C.example("empirical.models.random_walk.forward")
    K = kw["task"].K
    kw["states"] = torch.full_like(kw["states"], float(K))
    with pytest.raises(ValueError, match=rf"states must hold codes in \[0, K\) = \[0, {K}\); got {K}"):
        C.call("empirical.models.random_walk.forward", kw)


class _CountingChecks:
    """Counts the tensor checks (``dynamics.validation._check_tensor``) made during a model's training losses."""

    def __init__(self, model, counts):
        self._model, self._counts = model, counts

    def __getattr__(self, name):
        return getattr(self._model, name)

    def loss(self, params, batch, hyper=None):
        before = self._counts["n"]
        out = self._model.loss(params, batch, hyper)
        if torch.is_grad_enabled():
            self._counts["steps"].append(self._counts["n"] - before)
        return out


#: Fixtures of the models whose ``config`` example carries no model (the others' examples do).
_MODEL_FIXTURES = {"single_location": "m_sl", "icl_regression": "m_icl"}


@pytest.mark.parametrize("module", C._BUILTIN)
def test_training_step_makes_no_tensor_check(module, monkeypatch):
    """A control first: the same counter sees the checks of a public call, so a zero below is not a broken counter."""
    from empirical.train import train

    counts = {"n": 0, "steps": []}
    original = V._check_tensor

    def counting(*args, **kwargs):
        counts["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(V, "_check_tensor", counting)
    from empirical.models import single_location as slm

    slm.erf_mse(*_sl_tensors(), 0.5)
    assert counts["n"] == 4  # the control: X, y, k, v checked once each
    if f"empirical.models.{module}.config" not in C.EXAMPLES:
        pytest.skip(f"no example config of {module}")
    kw = C.example(f"empirical.models.{module}.config")
    if "model" not in kw and module not in _MODEL_FIXTURES:
        pytest.skip(f"no example model of {module}")
    model = kw.get("model") or getattr(C.F, _MODEL_FIXTURES[module])
    cfg = C.call(f"empirical.models.{module}.config", kw)
    train(_CountingChecks(model, counts), cfg, device="cpu")
    assert counts["steps"] and counts["steps"] == [0] * len(counts["steps"]), counts["steps"]


def test_symmetric_flow_refuses_zero_omega0():
    from closedform import icl_regression as icl

    task = icl.ICLRegressionTask(d=2, L=3, sigma2=0.1)
    with pytest.raises(ValueError, match="omega0 must be non-zero"):
        icl.symmetric_flow(task, np.array([0.1, 0.0]), 0.1, (0.0, 1.0))
    run = icl.symmetric_flow(task, 1e-3, 0.1, (0.0, 1.0), saveat=dynamics.SaveAt(n=3))  # any non-zero start: finite
    assert np.all(np.isfinite(run["ratio"].values))


def test_trajectory_refuses_non_mappings_naming_the_argument():
    from dynamics.trajectory import Trajectory

    assert isinstance(Trajectory({"a": ("x", np.arange(3.0))}).copy(), Trajectory)
    for kw in ({"data_vars": "abc"}, {"coords": 1.5}, {"attrs": object()}):
        (name,) = kw
        with pytest.raises(TypeError, match=rf"^{name} must be a Mapping"):
            Trajectory(**kw)


def test_compare_rows_names_theory_n_seeds():
    from figures.registry import compare_rows

    with pytest.raises(ValueError, match="theory_n_seeds must be an integer >= 2; got 0"):
        compare_rows("q", [1.0], [0.0], np.ones((3, 1)), theory_se=[0.1], theory_n_seeds=0)


def test_check_shapes_names_the_first_argument_that_fixed_a_size():
    with pytest.raises(ValueError, match=r"^b must have shape \(n, 3\) with n = 4 as in a \(n, m\) = \(4, 2\); got"):
        V.check_shapes(a=(np.zeros((4, 2)), "n m"), b=(np.zeros((5, 3)), "n 3"))
    with pytest.raises(ValueError, match=r"^a must have shape \(n, 3\); got \(4, 2\)"):
        V.check_shapes(a=(np.zeros((4, 2)), "n 3"))
    assert V.check_shapes(a=(np.zeros((4, 2, 3)), "... m"), b=(np.zeros((4, 2)), "...")) == {"m": 3, "...": (4, 2)}


@pytest.mark.parametrize(
    "values, ok",
    [
        ([1e308, 1e308, -1.0], True),  # finite entries whose sum overflows: the elementwise test decides
        ([1e308, 1e308, math.nan], False),
        ([math.inf, -math.inf], False),  # a NaN sum
        ([1.0, -math.inf], False),
        ([0.5, -2.0], True),
    ],
)
def test_tensor_finiteness_test_is_exact(values, ok):
    from empirical.models import tensor_check

    check = tensor_check(ndim=1)
    t = torch.tensor(values, dtype=torch.float64)
    if ok:
        check("x", t)
    else:
        with pytest.raises(ValueError, match="x must be .*NaN or inf"):
            check("x", t)
