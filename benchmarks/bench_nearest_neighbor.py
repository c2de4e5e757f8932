"""Benchmark of the 1-NN reduced GD (closedform.nearest_neighbor, docs/models/token_selection.md §A.5).

Compares, on the same prompt sample and in the same run:
* the numba Monte Carlo gradient (dL/dxi1, dL/dxi2) with a vectorised numpy/scipy evaluation of the same formulas;
* the reduced GD map run through ``dynamics.iterate`` with a plain numpy loop of the same updates.
"""

from __future__ import annotations

import numpy as np
import scipy.special

from benchmarks._common import Result, best_time
from closedform import _nearest_neighbor_kernels as _k
from closedform import nearest_neighbor as nn
from dynamics import SaveAt


def _numpy_gradient(xi1: float, xi2: float, c: np.ndarray, istar: np.ndarray) -> np.ndarray:
    """Baseline: docs/models/token_selection.md §A.5 gradients with scipy's softmax over all prompts at once."""
    B, N = c.shape
    scores = np.concatenate([xi1 * c, np.full((B, 1), xi1 - xi2)], axis=1)
    q = scipy.special.softmax(scores, axis=1)
    rows = np.arange(B)
    qi = q[rows, istar]
    q2 = np.sum(q[:, :N] ** 2, axis=1)
    gam = q * (np.concatenate([q[:, :N], np.zeros((B, 1))], axis=1) - q2[:, None] + qi[:, None])
    gam[rows, istar] -= qi
    g1 = np.sum(gam[:, :N] * c, axis=1) + gam[:, N]
    g2 = q[:, N] * (q2 - qi)
    return np.array([g1.mean(), g2.mean()])


def _numpy_gd(spec, c, istar, n_steps: int) -> np.ndarray:
    x = np.array([0.0, spec.sigma])
    for _ in range(n_steps):
        g = _numpy_gradient(x[0], x[1], c, istar)
        x = x - np.array([spec.eta / spec.d, spec.eta]) * g
    return x


def run(quick: bool) -> list[Result]:
    """Time the numba kernels against numpy baselines of the same computation (reference config of
    docs/models/token_selection.md §4)."""
    spec = nn.NearestNeighborTask(d=4, N=16, sigma=5.0, eta=5.0)
    n_prompts = 5_000 if quick else 50_000
    n_steps = 10 if quick else 100
    prompts = nn.sample_prompts(spec, n_prompts, 2)
    c, istar = np.ascontiguousarray(prompts.c), np.ascontiguousarray(prompts.istar)
    grad = np.empty(2)

    def kernel_grad():
        _k.mean_gradient(3.0, 6.0, c, istar, grad)

    base = _numpy_gradient(3.0, 6.0, c, istar)
    kernel_grad()
    if not np.allclose(grad, base, rtol=1e-10, atol=1e-15):
        raise RuntimeError(f"kernel and baseline disagree: {grad} vs {base}")
    t_kernel = best_time(kernel_grad)
    t_numpy = best_time(lambda: _numpy_gradient(3.0, 6.0, c, istar))

    def reduced_map():
        return nn.map(spec, prompts, n_steps, saveat=SaveAt(final=True))

    end = reduced_map()
    x_np = _numpy_gd(spec, c, istar, n_steps)
    x_nb = np.array([end.xi1.values[0, -1], end.xi2.values[0, -1]])
    if not np.allclose(x_nb, x_np, rtol=1e-10):
        raise RuntimeError(f"reduced map and numpy loop disagree: {x_nb} vs {x_np}")
    t_map = best_time(reduced_map, repeat=2)
    t_loop = best_time(lambda: _numpy_gd(spec, c, istar, n_steps), repeat=2)
    return [
        Result(
            name=f"MC gradient B={n_prompts} N=16",
            unit="prompts",
            value=n_prompts / t_kernel,
            baseline=n_prompts / t_numpy,
            baseline_name="numpy/scipy softmax, vectorised",
        ),
        Result(
            name=f"reduced GD map B={n_prompts} {n_steps} steps",
            unit="steps",
            value=n_steps / t_map,
            baseline=n_steps / t_loop,
            baseline_name="numpy loop",
            note="includes diagnostics at the saved points",
        ),
    ]
