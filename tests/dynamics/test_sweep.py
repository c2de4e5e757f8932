"""dynamics.sweep over named grids: local (in-process and spawned processes) and on a Dask LocalCluster of two
workers give the same Dataset in grid order; a failing configuration is reported with its coordinates; bad grids
are refused naming the parameter and the shapes."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from numba import njit

import dynamics
from dynamics import SaveAt, SweepError, sweep


@njit(cache=True)
def _decay(k, x, p, out):
    out[0] = p[0] * x[0]


def model(rate, x0, n):
    """A small engine run per configuration: x_n = x0 * rate^n, saved at 5 steps."""
    tr = dynamics.iterate(_decay, [x0], n, params=[rate], saveat=SaveAt(n=5), names=["x"])
    return {"final": tr.x.values[0, -1], "path": tr.x.values[0]}


def fragile(rate, x0, n):
    if rate == 0.5 and x0 == 2.0:
        raise RuntimeError("boom")
    return model(rate, x0, n)


GRID = {"rate": [0.5, 0.9, 1.1], "x0": [1.0, 2.0], "n": 8}


def _expected():
    rate = np.array(GRID["rate"])[:, None]
    x0 = np.array(GRID["x0"])[None, :]
    return x0 * rate**8


def test_local_sweep_is_a_dataset_over_the_grid_in_order():
    ds = sweep(model, GRID, processes=1, chunk_size=4)
    assert ds.final.dims == ("rate", "x0") and list(ds.rate.values) == GRID["rate"]
    # rate^8 by repeated multiplication: within a few roundings of the power
    np.testing.assert_allclose(ds.final.values, _expected(), rtol=1e-14)
    assert ds.path.dims == ("rate", "x0", "path_dim0") and ds.path.shape == (3, 2, 5)
    assert int(ds.n) == 8  # a scalar parameter is a scalar coordinate


def test_dask_local_cluster_gives_the_same_result_and_reports_failures():
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl,
        distributed.Client(cl) as client,
    ):
        remote = sweep(model, GRID, client=client, chunk_size=2)
        with pytest.raises(SweepError) as info:
            sweep(fragile, GRID, client=client, chunk_size=1)
    local = sweep(model, GRID, processes=1)
    # the same data and coordinates; the attributes differ only in where and when the sweep ran
    where = {"executor", "chunk_size", "created_utc"}
    xr.testing.assert_identical(remote.drop_attrs(), local.drop_attrs())
    assert {k: v for k, v in remote.attrs.items() if k not in where} == {
        k: v for k, v in local.attrs.items() if k not in where
    }
    assert remote.attrs["executor"].startswith("dask (")
    err = info.value
    assert len(err.failures) == 1 and err.failures[0]["rate"] == 0.5 and err.failures[0]["x0"] == 2.0
    assert "rate=0.5, x0=2.0" in str(err) and "boom" in str(err)
    part = err.partial
    assert np.isnan(part.final.sel(rate=0.5, x0=2.0)) and part.final.sel(rate=0.9, x0=1.0) == pytest.approx(0.9**8)


def test_spawned_processes_and_masked_errors():
    ds = sweep(fragile, GRID, processes=2, chunk_size=3, on_error="mask")
    assert ds.error.sel(rate=0.5, x0=2.0).item().startswith("RuntimeError: boom")
    assert ds.error.sel(rate=1.1, x0=1.0).item() == ""
    ok = ds.final.values.copy()
    ok[0, 1] = _expected()[0, 1]
    np.testing.assert_allclose(ok, _expected(), rtol=1e-14)


def test_dataset_grid_zips_configurations_along_its_dimension():
    grid = xr.Dataset({"rate": ("config", [0.5, 0.9]), "x0": ("config", [1.0, 3.0])}, coords={"config": ["a", "b"]})
    ds = sweep(model, {"n": 8, **{k: grid[k] for k in grid.data_vars}}, processes=1)
    np.testing.assert_allclose(ds.final.values, [0.5**8, 3.0 * 0.9**8], rtol=1e-14)
    ds2 = sweep(lambda_free_model, grid, processes=1)
    assert ds2.final.dims == ("config",) and list(ds2.config.values) == ["a", "b"]


def lambda_free_model(rate, x0):
    return model(rate, x0, 8)


@pytest.mark.parametrize(
    "grid, match",
    [
        (
            {"rate": xr.DataArray([0.5, 0.9], dims="c"), "x0": xr.DataArray([1.0, 2.0, 3.0], dims="c")},
            r"'rate' and 'x0' share dimension 'c'.*\(2,\).*\(3,\)",
        ),
        ({"rate": [0.5, np.nan], "x0": [1.0]}, r"'rate' must be finite.*nan"),
        ({"rate": np.ones((2, 2)), "x0": [1.0]}, r"'rate'.*shape \(2, 2\)"),
        ({"rate": [], "x0": [1.0]}, r"'rate' must not be empty"),
        ({}, "at least one parameter"),
    ],
)
def test_bad_grids_name_the_parameter_and_shapes(grid, match):
    with pytest.raises(ValueError, match=match):
        sweep(model, grid, processes=1)


def _square(x):
    return {"y": x * x}


def test_sweep_result_carries_provenance_like_a_trajectory():
    from dynamics.provenance import provenance_attrs

    ds = sweep(_square, {"x": [1.0, 2.0, 3.0]}, processes=1)
    np.testing.assert_array_equal(ds["y"].values, [1.0, 4.0, 9.0])
    expected = set(provenance_attrs({}))  # git_rev, versions_json, created_utc: what a Trajectory carries
    assert expected <= set(ds.attrs)
    assert ds.attrs["function"].endswith("_square") and ds.attrs["parameters"] == "x"
    assert ds.attrs["n_configurations"] == 3 and ds.attrs["executor"] == "this process"
    # the attributes survive a netCDF round trip (no nested containers or booleans)
    from dynamics import save_dataset
    import tempfile
    import pathlib
    import xarray as xr

    with tempfile.TemporaryDirectory() as tmp:
        path = save_dataset(ds, pathlib.Path(tmp) / "s.nc")
        with xr.open_dataset(path, engine="h5netcdf") as back:
            assert back.attrs["function"] == ds.attrs["function"]


def test_kernels_load_safely_from_many_threads():
    """A Dask worker runs tasks in threads: the first use of a kernel from several threads at once must give every
    thread the complete compiled kernel (a half-executed kernel module raised AttributeError before). Run in a fresh
    interpreter, so that every thread goes through the module loader (and this process's modules stay as they are)."""
    import pathlib
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import threading
        import numpy as np
        from closedform import single_location as sl

        task = sl.SingleLocationTask(d=40, L=5)
        errors, barrier = [], threading.Barrier(4)

        def run():
            try:
                barrier.wait()
                sl.map(task, np.array([[0.1, 0.2, 0.0, 0.0, 0.0]]), alpha=0.01, n_steps=5, lam=0.3,
                       warn_unconverged=False)
            except Exception as err:
                errors.append(repr(err))

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("ERRORS", errors)
        """
    )
    root = str(pathlib.Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ERRORS []" in out.stdout, out.stdout[-2000:]


def test_sweep_refuses_a_fractional_process_count():
    """``processes`` is an integer rule (mutant: ``integer=True`` dropped)."""
    from dynamics import sweep

    with pytest.raises(ValueError, match="processes must be an integer"):
        sweep(lambda x: x, {"x": [1.0]}, processes=1.5)
