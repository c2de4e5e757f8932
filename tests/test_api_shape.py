"""One API shape for every model (issue 16): task classes, ``TIME_UNIT``, the torch ``build``/``config`` entry points.

The reduced dynamics ``map``/``flow`` are checked against independent references in each model's test file; the
batched token-selection maps against the per-sample calls (tests/test_nearest_neighbor.py, test_group_sparse.py,
test_random_walk.py).
"""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest

MODELS = ("single_location", "scan_snap", "icl_regression", "nearest_neighbor", "group_sparse", "random_walk")
TASKS = {"single_location": "SingleLocationTask", "scan_snap": "ScanSnapTask", "icl_regression": "ICLRegressionTask",
         "nearest_neighbor": "NearestNeighborTask", "group_sparse": "GroupSparseTask", "random_walk": "RandomWalkTask"}
#: The protocols each model's ``config`` dispatches to (the old factory names, now private).
CONFIGS = {"single_location": ("fig5",), "scan_snap": ("sgd", "adam", "text"), "icl_regression": ("paper",),
           "nearest_neighbor": ("gd", "sgd"), "group_sparse": ("gd", "sgd"), "random_walk": ("gd", "sgd", "qa_gd")}


@pytest.mark.parametrize("model", MODELS)
def test_every_closedform_model_has_a_frozen_task_class_a_time_unit_and_the_shared_verbs(model):
    cf = importlib.import_module(f"closedform.{model}")
    cls = getattr(cf, TASKS[model])
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert isinstance(cf.TIME_UNIT, str) and cf.TIME_UNIT
    assert callable(cf.map)
    has_flow = model in ("scan_snap", "icl_regression", "random_walk")
    assert hasattr(cf, "flow") == has_flow
    has_fixed = model in ("single_location", "icl_regression")  # the papers with a fixed-point analysis
    assert hasattr(cf, "fixed_points") == has_fixed and hasattr(cf, "classify") == has_fixed


@pytest.mark.parametrize("model", MODELS)
def test_config_dispatches_to_its_protocols_and_names_the_choices_on_error(model):
    pytest.importorskip("torch")
    em = importlib.import_module(f"empirical.models.{model}")
    assert tuple(em.CONFIGS) == CONFIGS[model]
    for name in CONFIGS[model]:
        assert em.CONFIGS[name].__name__ == f"_{name}_config"
    with pytest.raises(ValueError, match="name must be one of") as err:
        em.config("nope")
    for name in CONFIGS[model]:
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
