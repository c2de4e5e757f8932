"""Stopping a report: Ctrl-C (SIGINT to the process group) or SIGTERM to the parent ends ``python -m figures report
--jobs 2`` within a few seconds, with its workers gone (no process left in its process group) and no temporary file
left in the cache; ``--jobs`` is bounded by the cores and the memory.

The report runs in a child process that leads its own process group (as a shell job would), on a private registry of
two figures that each start an atomic cache write and then wait for minutes, so the signal always arrives while both
workers are inside a figure with a temporary file open.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dynamics.trajectory import atomic_write
from figures import registry, runner
from tests._figures import TOY_PARAMS, toy_plot

ROOT = Path(__file__).resolve().parents[2]
ENV_DIR = "ATTNDYN_SIGNAL_TEST_DIR"

STOP_WITHIN_S = 10.0
"""'A few seconds': runner.GRACE_S (3 s) for the workers, plus the parent's exit on a loaded 2-core machine."""


def _hanging_data(cfg):
    """Start an atomic write in the cache folder, mark the start, then wait (never finishes within the test)."""
    folder = Path(os.environ[ENV_DIR])

    def write(tmp):
        Path(tmp).write_bytes(b"partial")
        (folder / f"started.{cfg.figure}").touch()
        time.sleep(600)

    atomic_write(folder / "cache" / cfg.figure / "data.nc", write)


def hanging_registry() -> registry.Registry:
    """Two figures with different data sources (so the two workers each take one); rebuilt in the workers."""
    reg = registry.Registry(models=("toy",), package=None, factory=hanging_registry)
    for name in ("toy.a", "toy.b"):
        reg.register(
            name=name, model="toy", paper="Toy", spec="toy.md", caption="Hangs.", params=TOY_PARAMS, plot=toy_plot
        )(_hanging_data)
    return reg


#: The report as a shell with job control starts a foreground job: SIGINT at its default, whatever the test runner's.
#: A runner started as a background job of a shell without job control (``pytest ... &`` in a script) ignores SIGINT
#: and its children inherit that; the report then rightly keeps ignoring Ctrl-C, and this test would wait in vain.
_CHILD = (
    "import signal, sys\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "from figures.__main__ import main\n"
    "from tests.reporting.test_signals import hanging_registry\n"
    "sys.exit(main(['report', '--preset', 'tiny', '--jobs', '2', '--device', 'cpu', '--no-progress',\n"
    "               '--cache-dir', sys.argv[1] + '/cache', '--out', sys.argv[1] + '/report'],\n"
    "              reg=hanging_registry()))\n"
)


def _group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes in process group ``pgid`` (Linux /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields after the name: state, ppid, pgrp, ...
            pids.append(int(stat.parent.name))
    return pids


def _spawn(code: str, tmp_path) -> subprocess.Popen:
    """``python -c code tmp_path`` in a new session (its own process group), with the toolkit importable."""
    env = dict(
        os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **{ENV_DIR: str(tmp_path)}
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups read from Linux /proc")
@pytest.mark.parametrize("how", ["SIGTERM to the parent", "Ctrl-C to the group"])
def test_report_stops_quickly_with_its_workers_and_leaves_no_temp_files(tmp_path, how):
    proc = _spawn(_CHILD, tmp_path)
    try:
        deadline = time.monotonic() + 240  # two spawned workers importing the toolkit on a busy machine
        while len(list(tmp_path.glob("started.*"))) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the workers never started their figures"
            time.sleep(0.2)
        assert len(list((tmp_path / "cache").rglob(runner.TEMP_GLOB))) == 2  # both writes in progress
        assert len(_group_members(proc.pid)) >= 3  # the report and its two workers
        t0 = time.monotonic()
        if how == "SIGTERM to the parent":
            os.kill(proc.pid, signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    expected = 143 if how == "SIGTERM to the parent" else 130
    assert proc.returncode == expected, err
    assert elapsed < STOP_WITHIN_S, f"took {elapsed:.1f} s to stop"
    assert "interrupted" in err.splitlines()[-1]
    time.sleep(0.5)  # the resource tracker leaves once the parent's pipe closes
    assert _group_members(proc.pid) == [], "processes of the report outlived it"
    assert list(tmp_path.rglob(runner.TEMP_GLOB)) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups read from Linux /proc")
def test_figures_make_stops_on_sigterm_and_removes_its_temp_file(tmp_path):
    """``figures make`` builds in its own process: SIGTERM ends it through the atomic writer's clean-up."""
    code = _CHILD.replace("['report', '--preset', 'tiny', '--jobs', '2',", "['make', 'toy.a', '--preset', 'tiny',")
    code = code.replace("'--out', sys.argv[1] + '/report'", "'--out', sys.argv[1] + '/out'")
    proc = _spawn(code, tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started.toy.a").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the figure never started"
            time.sleep(0.2)
        assert len(list(tmp_path.rglob(runner.TEMP_GLOB))) == 1
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143 and elapsed < STOP_WITHIN_S, err
    assert list(tmp_path.rglob(runner.TEMP_GLOB)) == []


def _child_blocks_sigint(q):
    q.put(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks on this platform")
def test_workers_are_born_with_sigint_blocked_and_a_ctrl_c_meanwhile_is_delivered_after():
    """A process started inside ``runner._sigint_blocked`` (where the report starts its workers) has SIGINT blocked
    until its initializer ignores it, so a Ctrl-C while it imports the toolkit cannot kill it; the main thread gets a
    Ctrl-C sent to it meanwhile when the block ends. Control: a process started outside the block has SIGINT
    unblocked."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    seen = []
    for blocked in (True, False):
        q = ctx.Queue()
        with runner._sigint_blocked() if blocked else contextlib.nullcontext():
            proc = ctx.Process(target=_child_blocks_sigint, args=(q,))
            proc.start()
        seen.append(q.get(timeout=120))
        proc.join(60)
    assert seen == [True, False]
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not at Python's default handler in this test process")
    reached = False
    with pytest.raises(KeyboardInterrupt):
        with runner._sigint_blocked():
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # a Ctrl-C to this (the main) thread
            time.sleep(0.05)  # blocked: no KeyboardInterrupt here
            reached = True
    assert reached
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_jobs_are_bounded_by_cores_and_memory(caplog):
    with caplog.at_level(logging.WARNING, logger="figures.runner"):
        assert runner.bounded_jobs(2, cores=4, memory=64 << 30) == 2  # within both: unchanged, no message
        assert caplog.records == []
        assert runner.bounded_jobs(10**9, cores=4, memory=64 << 30) == 4
        assert "usable cores" in caplog.records[-1].getMessage()
        assert runner.bounded_jobs(8, cores=16, memory=3 * runner.WORKER_MEMORY_BYTES + 1) == 3
        assert "available memory" in caplog.records[-1].getMessage()
        assert runner.bounded_jobs(8, cores=16, memory=10) == 1  # never below one worker
    assert runner.bounded_jobs(10**9) <= runner.usable_cores()
