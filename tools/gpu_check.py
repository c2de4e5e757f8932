"""The prepared GPU check (``make gpu-check``): one command on a fresh GPU machine, one JSON summary, <= 8 minutes.

Stages, each timed and recorded even when it fails (a failed stage never hides the others):

1. ``environment``: Python, torch and CUDA versions, the device's name and memory.
2. ``tests``: the ``gpu``-marked tests (every model's trainer on the device against its CPU run, batched seeds and the
   probe encoder on the device; see tests/empirical/test_gpu_trainers.py for tolerances) with their per-test records.
3. ``seeds_per_second``: seed-steps per second of one ``train`` call with 1, 4, ..., 1 024 seeds for two models
   (icl_regression: Adam, batch 256, d = 5, L = 40; single_location: the Fig. 5 protocol), on the device and on the
   CPU (torch's default threads), wall time after one warm-up call; a size whose CPU run would overrun the stage's
   budget (extrapolated from the previous size) is skipped and marked so.
4. ``paper_fraction``: a stated fraction of a paper-preset figure, icl_regression.fig1 (8 seeds, batch 256, 500 000
   Adam steps): ``PAPER_STEPS`` of its steps on the device and on the CPU, with the projected full-figure time.

``--device cpu`` is the dry run (CI): the same stages with the CPU standing in for the device, at smaller sizes.

Usage::

    python tools/gpu_check.py [--device auto|cuda|cpu] [--out PATH] [--install]

The summary goes to ``--out``, else ``$GPU_CHECK_OUT``, else ``$OUT/gpu_check.json`` where ``$OUT`` is set, else
``results/gpu_check.json``. ``--install`` first installs the toolkit's missing runtime packages (from ``.whl/`` when
that folder exists, with no index; else from the default index). Exit status 0 when every stage ran and passed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RUNTIME_MODULES = {
    "numpy": "numpy",
    "scipy": "scipy",
    "sympy": "sympy",
    "numba": "numba",
    "xarray": "xarray",
    "h5netcdf": "h5netcdf",
    "h5py": "h5py",
    "matplotlib": "matplotlib",
    "tqdm": "tqdm",
    "torch": "torch",
    "pytest": "pytest",
    "hypothesis": "hypothesis",
}
"""Import name -> distribution name of what the check needs (the toolkit's runtime plus the test runner)."""

BUDGET_S = {"tests": 180.0, "seeds_per_second": 150.0, "paper_fraction": 90.0}
"""Seconds per stage on the GPU machine (8 minutes in all with start-up); the dry run uses a tenth of the sizes."""

SEED_COUNTS = (1, 4, 16, 64, 256, 1024)
BENCH_STEPS = 20
PAPER_STEPS = 5000
"""1 % of icl_regression.fig1's 500 000 paper-preset steps."""


def install_missing() -> dict:
    """pip-install the distributions of :data:`RUNTIME_MODULES` that cannot be imported; return what was done."""
    missing = [dist for mod, dist in RUNTIME_MODULES.items() if importlib.util.find_spec(mod) is None]
    if not missing:
        return {"missing": [], "installed": []}
    wheels = ROOT / ".whl"
    cmd = [sys.executable, "-m", "pip", "install", "--quiet"]
    cmd += ["--no-index", "--find-links", str(wheels)] if wheels.is_dir() else ["-c", str(ROOT / "constraints.txt")]
    out = subprocess.run(cmd + missing, capture_output=True, text=True)
    return {
        "missing": missing,
        "installed": missing if out.returncode == 0 else [],
        "pip_rc": out.returncode,
        "pip_stderr": out.stderr[-2000:],
    }


def environment(device: str) -> dict:
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "device": device,
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1))
    return info


def run_tests(device: str, budget: float) -> dict:
    """The gpu-marked tests in a child pytest, with their records."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(
            os.environ,
            ATTNDYN_TEST_DEVICE=device,
            ATTNDYN_GPU_RECORD=tmp,
            PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
            "tests/empirical/test_gpu_trainers.py",
            "tests/empirical/test_device.py",
        ]
        try:
            out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=budget)
            rc, text = out.returncode, out.stdout + out.stderr
        except subprocess.TimeoutExpired as exc:
            rc, text = "timeout", str(exc.stdout or "")
        records = {p.stem: json.loads(p.read_text()) for p in sorted(Path(tmp).glob("*.json"))}
    tail = text.strip().splitlines()[-1] if text.strip() else ""
    return {"passed": rc == 0, "returncode": rc, "result": tail, "records": records, "output_tail": text[-4000:]}


def _models(device: str):
    from closedform.icl_regression import ICLRegressionTask
    from closedform.single_location import SingleLocationTask
    from empirical.models import icl_regression as iclm
    from empirical.models import single_location as slm

    sl_task = SingleLocationTask(d=80, L=10, noise=0.1)
    return {
        "icl_regression": (
            iclm.ICLAttention(ICLRegressionTask(d=5, L=40, sigma2=0.1), 2),
            lambda seeds, n: iclm.config("paper", seeds=seeds, n_steps=n, log_every=n),
        ),
        "single_location": (
            slm.build(sl_task, rng=0),
            lambda seeds, n: slm.config("fig5", seeds, n_steps=n, log_every=n, eval_size=100),
        ),
    }


def _timed_train(model, cfg, device) -> float:
    import torch

    from empirical.train import train

    t0 = time.perf_counter()
    train(model, cfg, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def seeds_per_second(device: str, budget: float, counts) -> dict:
    """Seed-steps/s of one train call per seed count, on ``device`` and on the CPU."""
    out = {}
    devices = (device, "cpu") if device != "cpu" else ("cpu",)
    models = _models(device)
    for name, (model, make_cfg) in models.items():
        rows = []
        for dev in devices:
            _timed_train(model, make_cfg((0,), 2), dev)  # warm-up: compilation, CUDA context, allocator
            t_end = time.perf_counter() + budget / (len(models) * len(devices))  # an equal share per model, device
            last = None
            for s in counts:
                projected = None if last is None else last[1] * s / last[0]
                if projected is not None and time.perf_counter() + projected > t_end:
                    rows.append({"device": dev, "seeds": s, "skipped": f"projected {projected:.1f} s over budget"})
                    continue
                wall = _timed_train(model, make_cfg(tuple(range(s)), BENCH_STEPS), dev)
                last = (s, wall)
                rows.append(
                    {
                        "device": dev,
                        "seeds": s,
                        "steps": BENCH_STEPS,
                        "wall_s": round(wall, 4),
                        "seed_steps_per_s": round(s * BENCH_STEPS / wall, 1),
                    }
                )
        out[name] = rows
    return out


def paper_fraction(device: str, steps: int) -> dict:
    """``steps`` of icl_regression.fig1's paper run (8 seeds, batch 256, Adam) per device; full-figure projection."""
    model, make_cfg = _models(device)["icl_regression"]
    full = 500_000
    res = {
        "figure": "icl_regression.fig1",
        "preset": "paper",
        "steps": steps,
        "of_steps": full,
        "fraction": steps / full,
    }
    for dev in dict.fromkeys((device, "cpu")):
        _timed_train(model, make_cfg(tuple(range(8)), 2), dev)
        wall = _timed_train(model, make_cfg(tuple(range(8)), steps), dev)
        res[dev] = {"wall_s": round(wall, 2), "projected_full_s": round(wall * full / steps, 0)}
    return res


def _stage(summary: dict, name: str, fn, *args) -> None:
    t0 = time.perf_counter()
    try:
        summary[name] = fn(*args)
    except Exception as exc:  # noqa: BLE001 - recorded in the summary; the other stages still run
        summary[name] = {"error": f"{type(exc).__name__}: {exc}"}
    summary.setdefault("stage_wall_s", {})[name] = round(time.perf_counter() - t0, 2)
    print(f"gpu-check: {name} done in {summary['stage_wall_s'][name]:.1f} s", file=sys.stderr, flush=True)


def default_out() -> Path:
    if os.environ.get("GPU_CHECK_OUT"):
        return Path(os.environ["GPU_CHECK_OUT"])
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "gpu_check.json"
    return ROOT / "results" / "gpu_check.json"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tools/gpu_check.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cuda", "cpu"),
        help="auto: cuda when torch sees a CUDA device, else the cpu dry run",
    )
    parser.add_argument("--out", default=None, help="summary JSON path (default: see the module docstring)")
    parser.add_argument("--install", action="store_true", help="install missing runtime packages first")
    args = parser.parse_args(argv)
    # the toolkit's deterministic cuBLAS setting must be in place before anything initialises CUDA (the environment
    # stage does), as empirical.device would set it
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    out = Path(args.out) if args.out else default_out()
    t0 = time.perf_counter()
    summary: dict = {"check": "attndyn gpu-check", "device": args.device}
    if args.install:
        _stage(summary, "install", install_missing)
    import torch

    if args.device == "auto":
        args.device = summary["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpu-check: --device cuda but torch sees no CUDA device (use --device cpu for the dry run)", file=sys.stderr
        )
        return 2
    dry = args.device == "cpu"
    scale = 0.1 if dry else 1.0
    _stage(summary, "environment", environment, args.device)
    _stage(summary, "tests", run_tests, args.device, BUDGET_S["tests"] * (2.0 if dry else 1.0))
    _stage(
        summary,
        "seeds_per_second",
        seeds_per_second,
        args.device,
        BUDGET_S["seeds_per_second"] * scale,
        SEED_COUNTS[:4] if dry else SEED_COUNTS,
    )
    _stage(summary, "paper_fraction", paper_fraction, args.device, int(PAPER_STEPS * scale))
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    ok = summary["tests"].get("passed") is True and not any(
        "error" in summary[k] for k in ("environment", "seeds_per_second", "paper_fraction")
    )
    summary["passed"] = ok
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(tmp, out)
    print(f"gpu-check: {'passed' if ok else 'FAILED'} in {summary['wall_s']:.0f} s; summary {out}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
