"""Engine kernels cached across processes: a fresh process with a warm cache loads them without compiling, two
processes compiling the same kernel at once both succeed, and a changed model gets a new kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

MODEL = """
from numba import njit

@njit(cache=True)
def step(k, x, p, out):
    out[0] = p[0] * x[0] * (1.0 - x[0])

@njit(cache=True)
def rhs(t, y, p, dy):
    dy[0] = -p[0] * y[0]
"""

RUN = textwrap.dedent("""
    import json, sys
    import numpy as np
    import dynamics
    from dynamics import _kernels
    import cachemodel
    a = dynamics.iterate(cachemodel.step, [0.3], 50, params=[3.7], saveat=dynamics.SaveAt(final=True))
    b = dynamics.integrate(cachemodel.rhs, [1.0], (0.0, 1.0), params=[2.0], saveat=dynamics.SaveAt(final=True))
    hits = sum(sum(k._cache_hits.values()) for k in _kernels._LOADED.values())
    misses = sum(sum(k._cache_misses.values()) for k in _kernels._LOADED.values())
    print(json.dumps({"map": float(a.states()[0, -1, 0]), "flow": float(b.states()[0, -1, 0]), "hits": hits,
                      "misses": misses}))
""")


def _env(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), os.getcwd()])
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")
    env.pop("ATTNDYN_KERNEL_DIR", None)
    return env


def _results(procs):
    import json

    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_kernels_are_cached_across_processes_and_safe_under_concurrent_compiles(tmp_path):
    (tmp_path / "cachemodel.py").write_text(MODEL)
    env = _env(tmp_path)
    # two cold processes at once: both compile and write the same generated file; neither may fail
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RUN], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    first = _results(procs)
    kernels = sorted(p.name for p in (tmp_path / "numba" / "attndyn_kernels").glob("*.py"))
    assert len(kernels) == 2 and not list((tmp_path / "numba" / "attndyn_kernels").glob(".*tmp"))
    # a third, warm process loads both kernels from numba's cache without compiling
    (warm,) = _results(
        [
            subprocess.Popen(
                [sys.executable, "-c", RUN], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        ]
    )
    assert warm["hits"] == 2 and warm["misses"] == 0
    for res in first + [warm]:
        assert res["map"] == first[0]["map"] and res["flow"] == first[0]["flow"]
    np.testing.assert_allclose(first[0]["flow"], np.exp(-2.0), rtol=1e-7)  # Dopri5 default rtol 1e-8
    # a changed model module gets new kernel files for both of its functions (the digest covers the whole module
    # file), so the old kernels are never reused
    (tmp_path / "cachemodel.py").write_text(MODEL.replace("-p[0] * y[0]", "-p[0] * y[0] * 0.5"))
    (changed,) = _results(
        [
            subprocess.Popen(
                [sys.executable, "-c", RUN], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        ]
    )
    np.testing.assert_allclose(changed["flow"], np.exp(-1.0), rtol=1e-7)
    assert len(list((tmp_path / "numba" / "attndyn_kernels").glob("*.py"))) == 4


def test_models_that_cannot_be_imported_by_name_still_run():
    from numba import njit

    import dynamics

    @njit
    def local_step(k, x, p, out):  # defined inside a function: compiled in memory, not cached
        out[0] = x[0] + p[0]

    tr = dynamics.iterate(local_step, [0.0], 5, params=[0.5], saveat=dynamics.SaveAt(final=True))
    assert tr.states()[0, -1, 0] == 2.5
