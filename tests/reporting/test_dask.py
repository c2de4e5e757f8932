"""The report on a Dask cluster (``--scheduler local|ADDRESS``): the same summary as the local build, bit for bit;
a worker lost mid-figure is replaced and the figure rebuilt, and a figure whose workers keep dying is named as lost.

Fast tests use the toy figures of tests/_figures.py on a ``LocalCluster`` of 2 single-threaded worker processes; the
slow test compares the whole tiny-preset report of the package's figures.
"""

from __future__ import annotations

import functools
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

pytest.importorskip("dask.distributed")

import dask  # noqa: E402

from dynamics.validation import Range  # noqa: E402
from figures import registry  # noqa: E402
from figures.params import Param  # noqa: E402
from figures.report import build_report  # noqa: E402
from tests._figures import TOY_PARAMS, synthetic_registry, toy_data, toy_plot  # noqa: E402

ENV_DIR = "ATTNDYN_DASK_TEST_DIR"


def _same_summary(a: Path, b: Path) -> None:
    """summary.json rows and checks identical, and every figure's badge and error; runtimes and provenance differ."""
    sa, sb = (json.loads(p.read_text()) for p in (a, b))
    assert sa["rows"] == sb["rows"] and sa["rows"]
    assert sa["counts"] == sb["counts"]
    keep = ("model", "figure", "badge", "error", "data_file", "layout_problems", "preset_distance")
    assert [{k: f[k] for k in keep} for f in sa["figures"]] == [{k: f[k] for k in keep} for f in sb["figures"]]


def _dying_data(cfg):
    """Kill this worker process on the first attempt (``p["die"] == 0``) or on every attempt (``1``)."""
    marker = Path(os.environ[ENV_DIR]) / f"died.{cfg.figure}"
    if cfg.params["die"] == 1 or not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return toy_data(cfg)


def dying_registry(mode: str) -> registry.Registry:
    """The toy figures with verdicts, plus ``toy.dies`` that kills the process building it (see ``_dying_data``)."""
    reg = synthetic_registry(with_verdicts=True)
    reg.factory = functools.partial(dying_registry, mode)
    params = {k: {**v, "die": {"once": 0, "always": 1}[mode]} for k, v in TOY_PARAMS.items()}
    die = Param(
        "1: the figure kills its worker on every attempt; 0: on the first only", "", Range(integer=True, ge=0, le=1)
    )
    reg.register(
        name="toy.dies",
        model="toy",
        paper="Toy",
        spec="toy.md",
        caption="Kills its worker.",
        params=params,
        param_info={"die": die},
        plot=toy_plot,
    )(_dying_data)
    return reg


class LinearModel:
    """The trainer's protocol at its smallest: online least squares in ``d`` dimensions (targets ``x . 1`` plus noise),
    probe ``m`` = the mean weight. Each process that trains it leaves ``pid.<pid>`` in the test folder; with ``die``
    1 it kills its process on the first attempt (marker ``died.run``), with 2 on every attempt."""

    name = "toy_linear"

    def __init__(self, d: int, die: int = 0):
        self.d, self.die = d, die

    def init_params(self, generators, *, device, dtype):
        import torch

        from empirical.train import per_seed

        folder = Path(os.environ[ENV_DIR])
        (folder / f"pid.{os.getpid()}").touch()
        if self.die == 2 or (self.die == 1 and not (folder / "died.run").exists()):
            (folder / "died.run").touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return per_seed(generators, lambda g: {"w": torch.zeros(self.d, dtype=dtype, device=device)})

    def sample(self, generators, n, *, device, dtype):
        import torch

        from empirical.train import per_seed

        def one(g):
            x = torch.randn(n, self.d, generator=g, dtype=dtype, device=device)
            return {"x": x, "y": x.sum(-1) + 0.1 * torch.randn(n, generator=g, dtype=dtype, device=device)}

        return per_seed(generators, one)

    def loss(self, params, batch, hyper):
        pred = (batch["x"] * params["w"][:, None, :]).sum(-1)
        return 0.5 * ((pred - batch["y"]) ** 2).mean(-1)

    def probes(self, params):
        return {"m": params["w"].mean(-1)}


RUN_PARAMS = {k: {"n_runs": 6, "n_steps": 40, "die": 0} for k in ("tiny", "quick", "paper")}


def _runs_data(cfg):
    """Six independent training runs through ``experiments.train_many`` (the second one may kill its worker)."""
    from dynamics import SaveAt
    from empirical.train import TrainConfig
    from figures import experiments

    p = cfg.params
    calls = [
        (
            LinearModel(3, die=p["die"] if i == 1 else 0),
            TrainConfig(seeds=(i,), n_steps=p["n_steps"], batch_size=4, lr=0.05, eval_size=0, saveat=SaveAt(n=5)),
            {"device": cfg.device},
        )
        for i in range(p["n_runs"])
    ]
    trajs = experiments.train_many(calls)
    m = np.stack([t["m"].values[0] for t in trajs])
    return xr.Dataset({"m": (("run", "time"), m)}, coords={"time": trajs[0]["time"].values})


def _runs_plot(ds):
    from figures import _style

    fig, ax = _style.new_figure()
    for row in ds.m.values:
        ax.plot(ds.time.values, row)
    ax.set(xlabel="step", ylabel="m")
    return fig


def runs_registry(die: int) -> registry.Registry:
    """The toy figures plus ``toy.runs``, whose six training runs go through ``experiments.train_many``."""
    reg = synthetic_registry()
    reg.factory = functools.partial(runs_registry, die)
    die_info = Param(
        "1: the second run kills its worker once; 2: on every attempt", "", Range(integer=True, ge=0, le=2)
    )
    reg.register(
        name="toy.runs",
        model="toy",
        paper="Toy",
        spec="toy.md",
        caption="Six training runs.",
        params={k: {**v, "die": die} for k, v in RUN_PARAMS.items()},
        param_info={"die": die_info},
        plot=_runs_plot,
    )(_runs_data)
    return reg


def test_train_many_hands_its_runs_to_the_spread_and_keeps_their_records(tmp_path, monkeypatch):
    """Without a cluster: ``train_many`` trains here, one run after the other; inside ``spreading`` it hands the
    runs to the given function (here the same runs, trained in this process but through ``train_recorded``) and the
    figure being recorded lists every run either way, with the same numbers."""
    from dynamics import SaveAt
    from empirical.train import TrainConfig
    from figures import experiments

    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    calls = [
        (
            LinearModel(3),
            TrainConfig(seeds=(i,), n_steps=10, batch_size=4, lr=0.05, eval_size=0, saveat=SaveAt(n=3)),
            {},
        )
        for i in range(2)
    ]
    handed = []

    def spread(calls):
        handed.extend(calls)
        return [experiments.train_recorded(*call) for call in calls]

    with experiments.recording() as here:
        local = experiments.train_many(calls)
    with experiments.recording() as spread_records, experiments.spreading(spread):
        remote = experiments.train_many(calls)
    assert len(handed) == 2 and len(here) == len(spread_records) == 2 and here == spread_records
    assert all(np.array_equal(a["m"].values, b["m"].values) for a, b in zip(local, remote))


def test_spread_runs_use_the_figures_run_cache_although_a_worker_starts_in_a_fresh_context(tmp_path, monkeypatch):
    """The run cache is a context variable; a Dask task runs in a fresh context. Each spread run carries the figure's
    cache with it: trained once (stored under the figure's root), then reused without training."""
    import contextvars
    import dataclasses

    from dynamics import SaveAt
    from empirical.train import TrainConfig
    from figures import experiments

    @dataclasses.dataclass
    class KeyedLinear(LinearModel):  # a dataclass, so the run cache can key it by its fields
        d: int
        die: int = 0

    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    config = TrainConfig(seeds=(0,), n_steps=10, batch_size=4, lr=0.05, eval_size=0, saveat=SaveAt(n=3))
    calls = [(KeyedLinear(3), config, {})]

    def spread(calls):  # like a worker: a context with no caching block around the run
        return [contextvars.Context().run(experiments.train_recorded, *call) for call in calls]

    with experiments.caching(tmp_path / "root"), experiments.spreading(spread):
        first = experiments.train_many(calls)
    stored = sorted((tmp_path / "root").rglob("*.nc"))
    assert len(stored) == 1  # the run landed in the figure's cache, not nowhere
    with experiments.recording() as records, experiments.caching(tmp_path / "root"), experiments.spreading(spread):
        again = experiments.train_many(calls)
    assert np.array_equal(first[0]["m"].values, again[0]["m"].values)
    assert sorted((tmp_path / "root").rglob("*.nc")) == stored and len(records) == 1


@pytest.mark.slow
def test_training_runs_are_tasks_of_their_own_and_equal_the_local_build_after_losing_a_worker(tmp_path, monkeypatch):
    """``toy.runs`` hands six runs to ``experiments.train_many``: on a 2-worker ``LocalCluster`` they run as tasks on
    both workers (several training processes), the run that kills its worker is rerun, and the figure's data equal
    the local build's bit for bit."""
    import xarray as xr

    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    reg = runs_registry(1)
    remote = build_report(
        "tiny", device="cpu", out_dir=tmp_path / "d", cache_dir=tmp_path / "cd", registry=reg, jobs=2, scheduler="local"
    )
    assert (tmp_path / "died.run").exists()  # a worker died inside a training run
    assert len(list(tmp_path.glob("pid.*"))) >= 2  # the runs were spread over worker processes
    local = build_report("tiny", device="cpu", out_dir=tmp_path / "l", cache_dir=tmp_path / "cl", registry=reg, jobs=1)
    assert local.n_failed == remote.n_failed == 0
    _same_summary(local.summary_path, remote.summary_path)
    a, b = (xr.load_dataset(tmp_path / d / "data" / "toy.runs.nc") for d in ("l", "d"))
    assert np.array_equal(a.m.values, b.m.values) and np.all(a.m.values[:, -1] > 0.1)  # trained, and bit for bit


@pytest.mark.slow
def test_a_training_run_whose_workers_keep_dying_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        result = build_report(
            "tiny",
            device="cpu",
            out_dir=tmp_path / "d",
            cache_dir=tmp_path / "c",
            registry=runs_registry(2),
            jobs=2,
            scheduler="local",
        )
    entries = {f.spec.name: f for s in result.sections for f in s.figures}
    assert result.n_failed == 1 and not entries["toy.decay"].failed
    # named by its run when the figure's own task survives, else (the run shared the figure's worker) by the figure
    error = entries["toy.runs"].error
    assert "training run 2 of 6 of toy.runs" in error or "lost on the Dask cluster (toy.runs)" in error, error
    assert "KilledWorker" in error


def test_local_cluster_report_equals_the_local_build_after_losing_a_worker(tmp_path, monkeypatch):
    """One worker is killed inside ``toy.dies``; Dask reruns it on a new worker and the report equals the local
    build (built second: the marker left by the killed worker keeps this process alive)."""
    monkeypatch.setenv(ENV_DIR, str(tmp_path))  # inherited by the LocalCluster's worker processes
    reg = dying_registry("once")
    remote = build_report(
        "tiny", device="cpu", out_dir=tmp_path / "d", cache_dir=tmp_path / "cd", registry=reg, jobs=2, scheduler="local"
    )
    assert (tmp_path / "died.toy.dies").exists()  # a worker did die inside the figure
    local = build_report("tiny", device="cpu", out_dir=tmp_path / "l", cache_dir=tmp_path / "cl", registry=reg, jobs=1)
    assert local.n_failed == remote.n_failed == 0
    _same_summary(local.summary_path, remote.summary_path)
    pngs = [[f.png for s in r.sections for f in s.figures] for r in (local, remote)]
    assert pngs[0] == pngs[1]
    # results landed in the checksummed cache: a second local build reads every figure from it
    again = build_report(
        "tiny", device="cpu", out_dir=tmp_path / "again", cache_dir=tmp_path / "cd", registry=reg, jobs=1
    )
    assert {f.status for s in again.sections for f in s.figures} == {"cached"}


@pytest.mark.slow
def test_a_figure_whose_workers_keep_dying_is_named_as_lost(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):  # the scheduler runs in this process
        result = build_report(
            "tiny",
            device="cpu",
            out_dir=tmp_path / "d",
            cache_dir=tmp_path / "c",
            registry=dying_registry("always"),
            jobs=2,
            scheduler="local",
        )
    entries = {f.spec.name: f for s in result.sections for f in s.figures}
    assert result.n_failed == 1 and not entries["toy.decay"].failed
    assert "lost on the Dask cluster (toy.dies)" in entries["toy.dies"].error
    assert "KilledWorker" in entries["toy.dies"].error


def test_scheduler_address_is_checked(capsys):
    from figures import runner
    from figures.__main__ import main

    with pytest.raises(ValueError, match="scheduler must be 'local' or a Dask scheduler address"):
        runner._dask_client("", 1)
    assert main(["report", "--scheduler", " ", "--preset", "tiny"], reg=synthetic_registry()) == 2
    assert "--scheduler must be 'local'" in capsys.readouterr().err


@pytest.mark.slow
def test_figures_make_computes_on_the_cluster_and_draws_here(tmp_path, capsys):
    from figures.__main__ import main

    reg = synthetic_registry()
    argv = [
        "make",
        "toy.decay",
        "toy.heat",
        "--preset",
        "tiny",
        "--device",
        "cpu",
        "--no-progress",
        "--formats",
        "png",
        "--out",
        str(tmp_path / "o"),
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    assert main(argv + ["--scheduler", "local"], reg=reg) == 0
    assert "2 cached" in capsys.readouterr().out  # computed by the workers into the cache, read back here
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["toy.decay.png", "toy.heat.png"]


@pytest.mark.slow
def test_tiny_report_of_every_figure_on_a_local_cluster_equals_the_local_build(tmp_path):
    local = build_report("tiny", device="cpu", out_dir=tmp_path / "l", cache_dir=tmp_path / "cl", jobs=2)
    remote = build_report(
        "tiny", device="cpu", out_dir=tmp_path / "d", cache_dir=tmp_path / "cd", jobs=2, scheduler="local"
    )
    _same_summary(local.summary_path, remote.summary_path)


def one_figure_registry(name: str) -> registry.Registry:
    """A registry holding only the package's figure ``name`` (picklable through its factory)."""
    from figures.registry import REGISTRY

    REGISTRY.discover()
    spec = REGISTRY.get(name)
    reg = registry.Registry(models=(spec.model,), package=None, factory=functools.partial(one_figure_registry, name))
    reg._figures[name] = spec
    return reg


@pytest.mark.slow
def test_a_package_figures_training_runs_are_tasks_of_their_own_and_equal_the_local_build(tmp_path, monkeypatch):
    """icl_regression.fig3 trains its three tiny runs (H = 4, the single head, H = 2) through one
    ``experiments.train_many`` call: on a 2-worker ``LocalCluster`` each is a task of its own (counted on the
    scheduler), and the figure's data equal the local build's bit for bit."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    from figures import runner

    name = "icl_regression.fig3"
    finished: list[str] = []

    class Finished(SchedulerPlugin):
        def transition(self, key, start, finish, *args, **kwargs):
            if finish == "memory":
                finished.append(str(key))

    real = runner._dask_client

    def counted(scheduler, n_jobs):
        client, cluster = real(scheduler, n_jobs)
        cluster.scheduler.add_plugin(Finished())  # a LocalCluster's scheduler lives in this process
        return client, cluster

    monkeypatch.setattr(runner, "_dask_client", counted)
    reg = one_figure_registry(name)
    remote = build_report(
        "tiny", device="cpu", out_dir=tmp_path / "d", cache_dir=tmp_path / "cd", registry=reg, jobs=2, scheduler="local"
    )
    runs = {k.rsplit("-", 2)[0] for k in finished if k.startswith(f"run-{name}-")}
    assert runs == {f"run-{name}-{i}" for i in range(3)}, finished
    local = build_report("tiny", device="cpu", out_dir=tmp_path / "l", cache_dir=tmp_path / "cl", registry=reg, jobs=1)
    assert local.n_failed == remote.n_failed == 0
    _same_summary(local.summary_path, remote.summary_path)
    a, b = (xr.load_dataset(tmp_path / d / "data" / f"{name}.nc") for d in ("l", "d"))
    assert set(a.data_vars) == set(b.data_vars) and a.attrs["train_configs_json"] == b.attrs["train_configs_json"]
    assert all(np.array_equal(a[v].values, b[v].values, equal_nan=True) for v in a.data_vars)
