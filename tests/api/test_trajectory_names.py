"""No variable, dimension or coordinate name of a model's Trajectory shadows an attribute of ``xarray.Dataset``
(issue 16): ``traj.<name>`` must reach the data, not a method such as ``Dataset.query``.

Covers the ``map``/``flow`` results of the six models at tiny sizes (closed form) and the array-probe dims that the
torch models hand to the trainer (``probe_dims``).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import xarray as xr

from closedform import group_sparse as gs
from closedform import icl_regression as icl
from closedform import nearest_neighbor as nn
from closedform import random_walk as rw
from closedform import scan_snap as ss
from closedform import single_location as sl
from dynamics import SaveAt

FINAL = SaveAt(n=3)


def _runs():
    sl_task = sl.SingleLocationTask(d=8, L=4)
    icl_task = icl.ICLRegressionTask(d=3, L=5, sigma2=0.1)
    nn_task = nn.NearestNeighborTask(d=3, N=4, sigma=1.0, eta=1.0)
    gs_task = gs.GroupSparseTask(d=2, D=4)
    rw_task = rw.RandomWalkTask(K=5, N=6, M=20, p=0.5)
    ss_task = ss.ScanSnapTask(classes=ss.SequenceClasses.syn_small(), eta_Y=1.0, eta_Z=1.0)
    x0 = sl.sample_initial_state(sl_task, 2, rng=0)
    quiet = {"warn_unconverged": False}
    return {
        "single_location.map": lambda: sl.map(sl_task, x0, alpha=1e-3, n_steps=4, lam=0.5, saveat=FINAL, **quiet),
        "single_location.full_pgd": lambda: sl.full_pgd(
            sl_task, *sl.vectors_from_state(sl_task, x0[0], rng=1), alpha=1e-3, n_steps=4, lam=0.5, **quiet
        ),
        "icl_regression.flow": lambda: icl.flow(icl_task, [0.1, -0.1], [0.1, -0.1], (0.0, 1.0), saveat=FINAL),
        "icl_regression.map": lambda: icl.map(icl_task, [0.1], [0.1], lr=0.1, n_steps=4, saveat=FINAL, **quiet),
        "icl_regression.symmetric_flow": lambda: icl.symmetric_flow(icl_task, 0.1, 0.1, (0.0, 1.0), saveat=FINAL),
        "nearest_neighbor.map": lambda: nn.map(nn_task, nn.sample_prompts(nn_task, 20, 0), 4, saveat=FINAL),
        "group_sparse.map": lambda: gs.map(gs_task, 4, n_samples=20, rng=0, saveat=FINAL),
        "random_walk.map": lambda: rw.map(rw_task, 4, walks=20, rng=0, test=10, saveat=FINAL),
        "random_walk.flow": lambda: rw.flow(rw_task, 1.0, walks=20, rng=0, saveat=FINAL),
        "scan_snap.map": lambda: ss.map(ss_task, 4, saveat=FINAL),
        "scan_snap.flow": lambda: ss.flow(ss_task, (0.0, 1.0), saveat=FINAL),
        "scan_snap.composite_flow": lambda: ss.composite_flow(ss_task, (0.0, 1.0), saveat=FINAL),
    }


def _shadowing(names) -> list[str]:
    return sorted(n for n in set(names) if hasattr(xr.Dataset, n))


@pytest.mark.parametrize("name", sorted(_runs()))
def test_trajectory_names_do_not_shadow_dataset_attributes(name):
    traj = _runs()[name]()
    names = list(traj.data_vars) + list(traj.dims) + list(traj.coords)
    assert not _shadowing(names), f"{name}: {_shadowing(names)} shadow xarray.Dataset attributes"
    for var in traj.data_vars:  # every name reaches its data by attribute access
        assert isinstance(getattr(traj, var), xr.DataArray)


def test_a_shadowing_name_is_detected():
    # the check itself: 'query' (Dataset.query, a method) and 'sizes' are caught, 'z' is not
    assert _shadowing(["z", "query", "sizes"]) == ["query", "sizes"]


def test_torch_probe_dims_do_not_shadow_dataset_attributes():
    pytest.importorskip("torch")
    from empirical.models import scan_snap as ess

    task = ss.ScanSnapTask(classes=ss.SequenceClasses.syn_small(), eta_Y=1.0, eta_Z=1.0)
    dims = dict(ess.build(task, T=8, probe_z=True).probe_dims)
    # the text transformer's attention-map probe, read from its property without building a corpus
    dims.update(ess.TextTransformer.probe_dims.fget(types.SimpleNamespace(map_rows=4)))
    assert dims["z"] == ("query_token", "token") and dims["attn"] == ("query_position", "key_position")
    names = list(dims) + [d for ds in dims.values() for d in ds]
    assert not _shadowing(names), _shadowing(names)
    assert np.all([isinstance(d, str) for d in names])
