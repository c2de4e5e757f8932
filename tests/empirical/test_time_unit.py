"""A trajectory's ``time_unit`` names the optimiser that produced it (``empirical.train``)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from closedform import icl_regression as cf
from dynamics import SaveAt
from empirical.models import icl_regression as m
from empirical.train import Schedule, TrainConfig, train


@pytest.mark.parametrize(("optimizer", "name", "other"), [("sgd", "SGD", "Adam"), ("adam", "Adam", "SGD")])
def test_time_unit_follows_the_optimizer(optimizer, name, other):
    task = cf.ICLRegressionTask(d=4, L=8, sigma2=0.1)
    model = m.build(task, H=1)
    assert "Adam" in model.time_unit and not hasattr(model, "time_of_step")  # the model's own unit names Adam
    cfg = TrainConfig(
        seeds=(0, 1),
        n_steps=2,
        batch_size=4,
        lr=Schedule(value=1e-3),
        optimizer=optimizer,
        eval_size=4,
        saveat=SaveAt(every=1),
        dtype="float64",
    )
    traj = train(model, cfg, device="cpu")
    assert name in traj.attrs["time_unit"] and other not in traj.attrs["time_unit"]
    assert traj.attrs["optimizer"] == optimizer
    assert list(traj.time.values) == [0.0, 1.0, 2.0]  # no time_of_step: time is the step count
