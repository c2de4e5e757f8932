"""Test configuration: hypothesis profiles, the gpu marker and float64 defaults."""

from __future__ import annotations

import os

# One compute thread per test process: pytest-xdist already runs one worker per core, and torch's intra-op threads
# make the small tensors of these tests several times slower when they compete (set before torch/numpy load BLAS).
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# numba compiles on first call, so no per-example deadline; CI derandomises so every run draws the same examples.
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    # Only the `gpu` marker counts: `"gpu" in item.keywords` also matched a parameter id such as `[gpu]`, which
    # silently skipped `test_unknown_device_is_refused_naming_the_choices[gpu]` on CPU (issue 19).
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    # ATTNDYN_TEST_DEVICE=cpu: the GPU check's dry run (tools/gpu_check.py --device cpu) runs them on the CPU.
    if gpu_items and not _cuda_available() and os.environ.get("ATTNDYN_TEST_DEVICE") != "cpu":
        skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
        for item in gpu_items:
            item.add_marker(skip_gpu)
