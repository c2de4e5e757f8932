"""Shared helpers for the trainer's contracts in the torch tests (``tests/test_empirical_*.py``): kill a training run
mid-way and resume it from its checkpoint, and compare trajectories bit for bit or a batched seed with its single-seed
run (see the contract in ``empirical/train.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from empirical.checkpoint import load_checkpoint
from empirical.train import train


class Killed(RuntimeError):
    """Stands for a run killed mid-way (SIGKILL, pre-emption)."""


class KillAt:
    """Wraps a model and raises :class:`Killed` at its ``at``-th training loss call.

    Training calls are those with grad enabled (the trainer's evaluations run under ``no_grad``); with
    ``every_call=True`` every ``loss`` call counts, the trainer's default evaluation (``loss`` on the evaluation batch,
    for models without ``evaluate``) included.
    """

    def __init__(self, model, at, *, every_call=False):
        self._model, self._at, self._every_call, self._calls = model, at, every_call, 0

    def __getattr__(self, name):
        return getattr(self._model, name)

    def loss(self, params, batch, hyper=None):
        if self._every_call or torch.is_grad_enabled():
            self._calls += 1
            if self._calls == self._at:
                raise Killed(f"killed at loss call {self._at}")
        return self._model.loss(params, batch, hyper)


def kill_and_resume(
    model, cfg, tmp_path, *, at, device="cpu", every_call=False, checkpoint_step=None, return_params=False
):
    """Train ``model`` uninterrupted (checkpoint ``tmp_path/a.pt``), then again killed at the ``at``-th loss call of
    :class:`KillAt` (checkpoint ``tmp_path/b.pt``; with ``checkpoint_step``, the step it must hold after the kill) and
    resumed from it. Returns ``(full, resumed, path)``: the two ``train`` results and the resumed run's checkpoint."""
    full = train(model, cfg, device=device, checkpoint_path=tmp_path / "a.pt", return_params=return_params)
    path = tmp_path / "b.pt"
    with pytest.raises(Killed):
        train(KillAt(model, at, every_call=every_call), cfg, device=device, checkpoint_path=path)
    if checkpoint_step is not None:
        assert load_checkpoint(path)["step"] == checkpoint_step
    resumed = train(model, cfg, device=device, checkpoint_path=path, resume=True, return_params=return_params)
    return full, resumed, path


def same(a, b):
    """Bitwise equality of the logged variables and coordinates (attrs such as created_utc may differ)."""
    assert list(a.data_vars) == list(b.data_vars)
    for name in a.data_vars:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
    np.testing.assert_array_equal(a["step"].values, b["step"].values)
    np.testing.assert_array_equal(a["time"].values, b["time"].values)


def assert_seed_equals_single(batched, index, single, *, rtol=0.0, atol=0.0, names=None):
    """Seed ``index`` of the batched trajectory equals the single-seed run ``single`` on ``names`` (default: every
    variable of ``single``) to ``rtol``/``atol`` (0: bit for bit)."""
    for name in single.data_vars if names is None else names:
        np.testing.assert_allclose(
            batched[name].values[index], single[name].values[0], rtol=rtol, atol=atol, err_msg=name
        )
