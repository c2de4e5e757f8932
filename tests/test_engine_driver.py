"""The engine's fixed costs: the Dataset built directly equals xarray's public construction; no progress bar is
built when progress is off."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import xarray as xr

from dynamics import trajectory as T
from dynamics.trajectory import Trajectory


def _cases():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(3, 4, 5))
    per = {"final_step_norm": rng.random(3), "converged": np.array([True, False, True]),
           "step_norm_trend": np.array([0, -1, 1], dtype=np.int8)}
    yield dict(Y=Y, names=[f"y{j}" for j in range(5)], time=np.linspace(0, 1, 4), step=np.arange(4),
               variables={"risk": Y[:, :, 0] ** 2, "matrix": rng.normal(size=(3, 4, 2, 2))}, per_trajectory=per)
    yield dict(Y=Y, names="state", time=np.arange(4.0), trajectory=np.array(["a", "b", "c"]),
               attrs={"model": "m", "spec": {"d": 3}})
    yield dict(Y=Y[:1, :1], names=[f"y{j}" for j in range(5)], time=np.zeros(1))


@pytest.mark.parametrize("case", list(_cases()))
def test_direct_dataset_is_identical_to_the_public_construction(case, monkeypatch):
    fast = Trajectory.from_arrays(**case)
    monkeypatch.setattr(T, "_direct_dataset", T._public_dataset)
    slow = Trajectory.from_arrays(**case)
    slow.attrs["created_utc"] = fast.attrs["created_utc"]
    xr.testing.assert_identical(fast, slow)
    assert type(fast) is type(slow) is Trajectory
    assert {k: type(v) for k, v in fast.xindexes.items()} == {k: type(v) for k, v in slow.xindexes.items()}
    assert dict(fast.sizes) == dict(slow.sizes)
    # the indexes work: selection by time and by trajectory label
    t = float(case["time"][-1])
    xr.testing.assert_identical(fast.sel(time=t), slow.sel(time=t))


def test_direct_dataset_rejects_inconsistent_sizes_like_the_public_one():
    data = {"a": (("trajectory", "time"), np.zeros((2, 3))), "b": (("trajectory", "time"), np.zeros((2, 4)))}
    coords = {"time": ("time", np.arange(3.0))}
    with pytest.raises(ValueError):
        T._direct_dataset(Trajectory, data, coords, {})


def test_no_progress_bar_without_progress(monkeypatch):
    from numba import njit  # noqa: F401  (the engine needs numba anyway)

    import dynamics
    I = sys.modules["dynamics.integrate"]

    assert isinstance(I._bar(False, 10, "x", "step"), I._NoBar)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # importing tqdm would now fail
    tests_step = _step()
    tr = dynamics.iterate(tests_step, [0.5], 3, params=[0.5], saveat=dynamics.SaveAt(final=True))
    assert tr.states()[0, -1, 0] == 0.5 ** 4


def _step():
    from numba import njit

    @njit
    def halve(k, x, p, out):
        out[0] = p[0] * x[0]

    return halve
