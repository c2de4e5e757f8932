"""Tests of empirical.device: device and dtype resolution, refused inputs, determinism flags, import hygiene."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from empirical.device import resolve, resolve_device, resolve_dtype, set_determinism  # noqa: E402


def test_resolve_cpu_defaults_to_float64_and_deterministic_without_tf32():
    device, dtype = resolve("cpu")
    assert device == torch.device("cpu")
    assert dtype == torch.float64
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False
    assert torch.backends.cudnn.benchmark is False
    assert os.environ.get("CUBLAS_WORKSPACE_CONFIG") in (":4096:8", ":16:8")


def test_float32_is_selectable_by_name_or_dtype():
    assert resolve("cpu", "float32").dtype == torch.float32
    assert resolve_dtype(torch.float32) == torch.float32
    assert resolve_dtype("double") == torch.float64


@pytest.mark.parametrize("bad", ["float16", "half", "bfloat16", torch.float16, torch.bfloat16])
def test_half_precision_is_refused_for_theory_comparisons(bad):
    with pytest.raises(ValueError, match="dtype=.*refused.*float64"):
        resolve("cpu", bad)


@pytest.mark.parametrize("bad", ["int32", "complex128", 64, None])
def test_non_float_dtype_is_refused(bad):
    with pytest.raises(ValueError, match="dtype must be 'float64' or 'float32'"):
        resolve_dtype(bad)


@pytest.mark.parametrize("bad", ["tpu", "gpu", "cuda0", "", 3, "mps"])
def test_unknown_device_is_refused_naming_the_choices(bad):
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>'"):
        resolve_device(bad)


def test_auto_picks_cuda_only_when_present():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_cuda_without_a_gpu_is_an_error_not_a_silent_fallback():
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (not part of the CPU dry run)")
def test_cuda_resolves_on_a_gpu_machine():
    device, dtype = resolve("cuda")
    assert device.type == "cuda" and dtype == torch.float64
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_determinism_can_be_switched_off_and_on_again():
    set_determinism(False)
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cuda.matmul.allow_tf32 is False  # TF32 stays off either way
    set_determinism(True)
    assert torch.are_deterministic_algorithms_enabled()


def test_imports_keep_torch_out_of_dynamics_and_cuda_uninitialised():
    """``import dynamics, closedform`` must not import torch; ``import empirical`` must not initialise CUDA."""
    code = (
        "import sys\n"
        "import dynamics, closedform\n"
        "assert 'torch' not in sys.modules, 'dynamics/closedform imported torch'\n"
        "import empirical, empirical.train, empirical.models\n"
        "import torch\n"
        "assert not torch.cuda.is_initialized(), 'importing empirical initialised CUDA'\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def test_torch_threads_sets_and_restores():
    from empirical.device import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"), torch_threads(0):
        pass
