"""Generated kernel files are imported only from a private folder and only when their bytes are the source the
process generated; results are written with the user's umask.

A planted file under the expected name (what an attacker with write access to a shared folder, or a stale file,
would leave) must never run; folders others may write to, or that are links, are not used.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys
import textwrap

import pytest

from dynamics import _kernels
from dynamics.trajectory import atomic_write

MODEL = """
from numba import njit

@njit(cache=True)
def step(k, x, p, out):
    out[0] = p[0] * x[0] * (1.0 - x[0])
"""

RUN = textwrap.dedent("""
    import json, warnings
    import dynamics
    import plantmodel
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = dynamics.iterate(plantmodel.step, [0.3], 50, params=[3.7], saveat=dynamics.SaveAt(final=True))
    print(json.dumps({"x": float(a.states()[0, -1, 0]), "warnings": [str(w.message) for w in caught]}))
""")


def _run(tmp_path, kernel_dir):
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd()]),
        NUMBA_CACHE_DIR=str(tmp_path / "numba"),
        ATTNDYN_KERNEL_DIR=str(kernel_dir),
    )
    out = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _logistic(x, r, n):
    for _ in range(n):
        x = r * x * (1.0 - x)
    return x


def test_a_planted_kernel_file_is_not_imported(tmp_path):
    (tmp_path / "plantmodel.py").write_text(MODEL)
    folder = tmp_path / "kernels"
    first = _run(tmp_path, folder)
    assert first["x"] == _logistic(0.3, 3.7, 50)  # same float operations in the same order
    assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0  # created private
    (generated,) = folder.glob("attndyn_*.py")
    marker = tmp_path / "planted_code_ran"
    generated.write_text(f"open({str(marker)!r}, 'w').close()\n" + generated.read_text())
    second = _run(tmp_path, folder)
    assert not marker.exists()
    assert second["x"] == first["x"]
    assert any("not the source this process generated" in w for w in second["warnings"])


def test_unsafe_folders_are_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    # a folder of this user that others could write to is tightened before use
    assert _kernels._safe_folder(shared)
    assert stat.S_IMODE(shared.stat().st_mode) & 0o022 == 0
    link = tmp_path / "link"
    link.symlink_to(shared, target_is_directory=True)
    assert not _kernels._safe_folder(link)
    if os.getuid() == 0:  # a folder owned by someone else (only root can make one here)
        other = tmp_path / "other"
        other.mkdir(mode=0o777)
        os.chown(other, 65534, 65534)
        assert not _kernels._safe_folder(other)
    monkeypatch.setenv("ATTNDYN_KERNEL_DIR", str(link))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert _kernels.kernel_dir() == tmp_path / "numba" / "attndyn_kernels"


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_atomic_write_uses_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        path = atomic_write(tmp_path / f"out_{mask:o}.bin", lambda tmp: pathlib.Path(tmp).write_bytes(b"abc"))
        plain = tmp_path / f"plain_{mask:o}"
        plain.write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask == stat.S_IMODE(plain.stat().st_mode)
    assert not list(pathlib.Path(tmp_path).glob(".*.tmp"))
