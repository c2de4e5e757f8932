"""Shared helpers of the scan_snap figures: the torch side imported on first use (the model and a single-threaded
trainer), the attention rows of a trajectory, the SGD runs and the one-sided Student t check over seeds.
"""

from __future__ import annotations

import numpy as np

from empirical.device import torch_threads
from figures.registry import CheckResult


__all__ = ["SNAPSHOTS"]

SNAPSHOTS = (0, 2, 4, 6, 8, 10)
"""Iterations shown in Fig. 4/5 (plus the last, 48, docs/models/scan_snap.md §5.2)."""


def _torch():
    from empirical.models import scan_snap as ssm
    from figures.experiments import train

    def train_1t(*args, **kw):
        with torch_threads(1):
            return train(*args, **kw)

    return ssm, train_1t


def _Z_of(traj, classes) -> np.ndarray:
    """Z rows (trajectory, time, Q, Lc) from the logged array variable ``z`` (dims query_token, token; closed form or
    torch).
    """
    z = traj["z"].transpose("trajectory", "time", "query_token", "token")
    if z.shape[2:] != (classes.Q, classes.Lc):
        raise ValueError(
            f"z has (query_token, token) sizes {z.shape[2:]}; the classes have (Q, Lc) = {(classes.Q, classes.Lc)}"
        )
    return z.values


def _sgd(
    cfg, classes, task, *, T, n_seeds, n_steps, init="zero", run="train", probe_z=True, saveat=None, batch_size=128
):
    """Torch SGD of ``n_seeds`` seeds of run ``run`` (the seed rule of :mod:`figures.presets`)."""
    ssm, train = _torch()
    model = ssm.ScanSnapTorch(classes=classes, T=T, init=init, probe_z=probe_z)
    seeds = cfg.seeds(run, n_seeds)
    return train(
        model,
        ssm.config("sgd", model, task, seeds, n_steps=n_steps, saveat=saveat, batch_size=batch_size),
        device=cfg.device,
    )


def _mean_t_check(name: str, diffs, *, sign: int, statistic: str, level: float = 1e-2) -> CheckResult:
    """A claim about the sign of a per-seed statistic: the mean of ``diffs`` (one value per seed) with its two-sided
    Student-t interval at ``level`` (n - 1 degrees of freedom); passes when the whole interval has sign ``sign``.
    """
    from dynamics.compare import t_quantile

    d = np.asarray(diffs, dtype=np.float64)
    m, se = float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size))
    half = float(t_quantile(level, d.size - 1)) * se
    lo, hi = m - half, m + half
    ok = lo > 0 if sign > 0 else hi < 0
    return CheckResult(
        name=name,
        passed=ok,
        measured=m,
        expected=("> 0" if sign > 0 else "< 0"),
        tolerance=(
            f"{statistic}; mean over {d.size} seeds with its {100 * (1 - level):g}% Student-t "
            f"interval [{lo:.4g}, {hi:.4g}] (df {d.size - 1}) must lie entirely "
            f"{'above' if sign > 0 else 'below'} 0"
        ),
        n_seeds=int(d.size),
    )
