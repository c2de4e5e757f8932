"""Nothing computed is lost: a diverging torch training keeps its records in ``partial``; a sweep that loses a worker
retries it once, and otherwise returns what finished with the lost configurations named."""

from __future__ import annotations

import importlib
import os
import signal
import types

import numpy as np
import pytest

pytest.importorskip("torch")

import dynamics  # noqa: E402

sweep_module = importlib.import_module("dynamics.sweep")
from dynamics.errors import DivergenceError  # noqa: E402
from empirical.train import train  # noqa: E402
from tests.empirical.test_train import CPU, NaNAt, Regression, config  # noqa: E402


def test_diverging_training_returns_its_records_in_partial():
    cfg = config(n_steps=40)
    with pytest.raises(DivergenceError) as info:
        train(NaNAt(Regression(d=4), step=23, seed_index=1), cfg, device=CPU)
    partial = info.value.partial
    assert partial is not None
    assert list(partial.step.values) == [0, 10, 20]  # every logged step before the divergence at step 23
    assert list(partial.trajectory.values) == list(cfg.seeds)
    # Independent: the same streams trained for 20 steps only (no NaN) log the same records bit for bit.
    clean = train(Regression(d=4), config(n_steps=20), device=CPU)
    for name in clean.data_vars:
        np.testing.assert_array_equal(partial[name].values, clean[name].sel(time=partial.time).values)


def test_divergence_in_the_first_update_keeps_the_initial_record():
    with pytest.raises(DivergenceError) as info:
        train(NaNAt(Regression(d=4), step=0, seed_index=0), config(n_steps=5), device=CPU)
    assert list(info.value.partial.step.values) == [0]  # the state before the first update was logged


def kill_at_two(c, marker=""):
    """Kill the worker process at ``c == 2``: every time, or only the first time when ``marker`` names a file."""
    if c == 2 and (not marker or not os.path.exists(marker)):
        if marker:
            open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return float(c) ** 2


@pytest.mark.slow  # two spawned pools of two workers: ~30 s on a busy 2-core machine
def test_local_sweep_retries_a_killed_worker(tmp_path):
    ds = dynamics.sweep(kill_at_two, {"c": [0, 1, 2, 3], "marker": str(tmp_path / "killed")}, processes=2, chunk_size=1)
    np.testing.assert_array_equal(ds.result.values, [0.0, 1.0, 4.0, 9.0])


@pytest.mark.slow  # two spawned pools of two workers: ~30 s on a busy 2-core machine
def test_local_sweep_returns_what_finished_when_a_worker_keeps_dying():
    with pytest.raises(dynamics.SweepError, match="c=2.*WorkerLost") as info:
        dynamics.sweep(kill_at_two, {"c": [0, 1, 2, 3]}, processes=2, chunk_size=1)
    err = info.value
    assert [f["c"] for f in err.failures] == [2]
    np.testing.assert_array_equal(err.partial.result.values, [0.0, 1.0, np.nan, 9.0])


class _Future:
    def __init__(self, value=None, done=True):
        self.value, self._done, self.status = value, done, "finished" if done else "pending"

    def done(self):
        return self._done

    def add_done_callback(self, fn):
        pass


class _ClusterWithoutWorkers:
    """A client whose scheduler has no workers: the first chunk finished before they left, the rest never run."""

    def __init__(self):
        self.scheduler = types.SimpleNamespace(address="tcp://fake:8786")
        self.n, self.cancelled = 0, []

    def submit(self, run_chunk, fn, chunk, pure=False):
        self.n += 1
        return _Future(run_chunk(fn, chunk)) if self.n == 1 else _Future(done=False)

    def gather(self, futures):
        return [f.value for f in futures]

    def cancel(self, futures):
        self.cancelled.extend(futures)

    def scheduler_info(self):
        return {"workers": {}}


def _square(c):
    return float(c) ** 2


def test_dask_sweep_without_workers_times_out_with_an_error(monkeypatch):
    monkeypatch.setattr(sweep_module, "DASK_NO_WORKER_TIMEOUT", 0.2)
    client = _ClusterWithoutWorkers()
    with pytest.raises(dynamics.SweepError, match="no Dask worker") as info:
        dynamics.sweep(_square, {"c": [0, 1, 2, 3]}, client=client, chunk_size=2)
    assert [f["c"] for f in info.value.failures] == [2, 3]
    np.testing.assert_array_equal(info.value.partial.result.values, [0.0, 1.0, np.nan, np.nan])
    assert len(client.cancelled) == 1
