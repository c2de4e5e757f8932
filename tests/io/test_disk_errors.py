"""OS write errors (disk full, permission denied) of every writer: a clear error naming the file, no temporary file
left, and the previous file (or no file) in place; a real full filesystem where a small tmpfs can be mounted."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

import dynamics
from empirical.checkpoint import load_checkpoint, save_checkpoint
from figures import cache
from figures.presets import RunConfig


def _dataset(n=5):
    return dynamics.Trajectory.from_arrays(np.arange(float(n)).reshape(1, n, 1), names=["a"], time=np.arange(n))


def _raise_on_write(monkeypatch, code):
    def failing(fd, data):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "write", failing)


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize(
    "code, cls, word", [(errno.ENOSPC, OSError, "disk is full"), (errno.EACCES, PermissionError, "permission denied")]
)
def test_trajectory_save_error_names_file_and_keeps_previous(tmp_path, monkeypatch, code, cls, word):
    path = tmp_path / "run.nc"
    _dataset(3).save(path)
    before = path.read_bytes()
    _raise_on_write(monkeypatch, code)
    with pytest.raises(cls, match=word) as info:
        _dataset(7).save(path)
    monkeypatch.undo()
    assert str(path) in str(info.value) and info.value.errno == code
    assert path.read_bytes() == before  # the previous file is untouched
    assert _leftovers(tmp_path) == []


def test_checkpoint_error_names_file_and_keeps_previous(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, {"w": torch.ones(3), "step": 1})
    _raise_on_write(monkeypatch, errno.ENOSPC)
    with pytest.raises(OSError, match="disk is full") as info:
        save_checkpoint(path, {"w": torch.zeros(3), "step": 2})
    monkeypatch.undo()
    assert str(path) in str(info.value)
    assert load_checkpoint(path)["step"] == 1
    assert _leftovers(tmp_path) == []


def _cfg():
    return RunConfig(figure="single_location.fig3", preset="tiny", seed=0, device="cpu", params={})


@pytest.mark.parametrize("fail_on", [1, 2])  # the data file's write, then the sidecar's
def test_cache_store_error_leaves_no_entry(tmp_path, monkeypatch, fail_on):
    real, calls = os.write, []

    def write(fd, data):
        calls.append(fd)
        if len(calls) >= fail_on:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OSError, match="cannot write .*disk is full"):
        cache.store(tmp_path, _cfg(), xr.Dataset({"a": ("x", np.arange(4.0))}), runtime_s=1.0)
    monkeypatch.undo()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # no data, sidecar or temporary file
    assert cache.load(tmp_path, _cfg()).status != "hit"


def test_text_writer_error_is_wrapped(tmp_path, monkeypatch):
    """A writer callback (as the report's text files use) that hits a full disk: same clear error, no temp file."""

    def write(tmp):
        with open(tmp, "w") as fh:
            fh.write("x")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError, match=r"cannot write .*report\.html.*disk is full"):
        dynamics.atomic_write(tmp_path / "report.html", write)
    assert list(tmp_path.iterdir()) == []


_FULL_FS_SCRIPT = """
import sys, numpy as np, dynamics
ds = dynamics.Trajectory.from_arrays(np.random.default_rng(0).random((1, 100_000, 4)), names=list("abcd"),
                                     time=np.arange(100_000))
try:
    ds.save(sys.argv[1] + "/big.nc")
except OSError as exc:
    print("OSError:", exc)
    sys.exit(3)
"""


def test_real_full_filesystem(tmp_path):
    """A 3.2 MB save on a 2 MiB tmpfs: an OSError naming the file, not a crash (skipped where mounting fails)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        env = dict(os.environ, PYTHONPATH=os.getcwd())
        proc = subprocess.run(
            [sys.executable, "-c", _FULL_FS_SCRIPT, str(mnt)], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == 3, proc.stderr[-2000:]  # a segfault would be -11
        assert "big.nc" in proc.stdout and "disk is full" in proc.stdout
        assert list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


@pytest.mark.parametrize("command", ["make", "report"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EROFS])
def test_cli_write_error_is_one_line(tmp_path, monkeypatch, capsys, caplog, command, code):
    """``python -m figures make``/``report`` on a disk that fails every write: exit 1 with one line naming the file
    and the reason (no traceback), and no temporary file left behind. The report's text files are written through
    ``Path.write_text``, which does not go through ``os.write``: it fails too."""
    from figures.__main__ import main
    from tests._figures import synthetic_registry

    folders = ["--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]
    argv = ["make", "toy.decay"] if command == "make" else ["report", "--jobs", "1"]
    argv += ["--preset", "tiny", "--device", "cpu", "--no-progress", *folders]
    _raise_on_write(monkeypatch, code)

    def write_text(self, *args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(Path, "write_text", write_text)
    status = main(argv, reg=synthetic_registry())
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert status == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: cannot write ") and str(tmp_path) in last, err
    assert (
        os.strerror(code).lower() in last.lower()
        or {
            errno.ENOSPC: "disk is full",
            errno.EACCES: "permission denied",
            errno.EROFS: "read-only",
        }[code]
        in last
    ), last
    assert "Traceback" not in err + caplog.text
    assert [p for p in tmp_path.rglob("*") if p.is_file() and p.name.endswith(".tmp")] == []
