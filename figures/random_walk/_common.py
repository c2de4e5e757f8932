"""Shared helpers of the random_walk figures: the task of a run, the torch run and the reduced map started from its
seeds' own states on the same walks, save steps, series, the learned V, attention profiles and the paired checks.
"""

from __future__ import annotations


import numpy as np

from closedform import random_walk as cf
from dynamics.overlay import overlay
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import random_walk as rwm
from figures._style import (
    plot_empirical_band,
    plot_seed_band,
)
from figures.experiments import train
from figures.registry import CheckResult, Explanation, per_seed_check


__all__ = ["SERIES", "ROUND_OFF", "EXACT_SOURCE", "RB_SOURCE", "DEFAULTS_U", "RIDGE_EXPLANATION"]

SERIES = (
    "acc",
    "acc_rb",
    "attn_parent",
    "attn_parent_q",
    "attn_blank",
    "dist_V_Pi",
    "dist_V_sqrtPi",
    "cos_V_Pi",
    "dist_V_sqrtChat",
    "loss",
    "kl",
)
ROUND_OFF = 1e-9
EXACT_SOURCE = (
    "float64 round-off: torch full-matrix GD from zero and the reduced map of docs/models/token_selection.md "
    "§C.5 run on the same "
    "walks, so their difference is 0 in exact arithmetic (reference: 7e-16 after 8 steps); 1e-9 bounds the "
    "round-off over the run"
)
RB_SOURCE = (
    "acc_RB = mean Pi[s_{N-1}, Pred] equals max(p, 1-p) exactly once every prediction is a likeliest "
    "successor (docs/models/token_selection.md §C.3); 1e-9 bounds the float64 round-off of the weighted mean"
)
DEFAULTS_U = (
    "positional code phi_i = sqrt(rho) e_i, rho = M/2: orthogonal exactly in float64 (the sine code "
    "[phi_i]_k = sin(pi i k / M) reconstructed in docs/models/token_selection.md §C.2 is orthogonal only to "
    "round-off, which the unstable "
    "symmetric state of Theorem C2 amplifies); only orthogonality and rho enter the dynamics "
    "(docs/models/token_selection.md §C.9). With this "
    "code the coordinates of x~ beyond K + N are 0, so the rows and columns of W beyond them never enter the scores "
    "nor move: runs use M = N + 1 with rho = M_paper / 2, exactly the paper's M = 1000 from zero and equal in law "
    "from a random start (tests/closedform/test_random_walk.py::test_onehot_code_dynamics_do_not_depend_on_M_beyond_N)",
)
RIDGE_EXPLANATION = Explanation(
    reason=(
        "the symmetric state of Theorem C2 is an unstable equilibrium: in exact arithmetic GD stays on it "
        "(accuracy 1/K), but any perturbation grows ~10x per step; float64 round-off in torch's sums is enough "
        "at K = 20 (the reduced map stays on the ridge only because its state-count sums are exactly "
        "symmetric)"
    ),
    evidence=(
        "the dashed 'reduced map, perturbed 1e-16 at t = 2' curves of random_walk.large_circle and "
        "random_walk.fig5 panel (e) leave the ridge the same way: in random_walk.large_circle every seed "
        "whose torch run leaves the reduced map is a seed whose perturbed reduced map leaves the ridge too"
    ),
)


def _task(p, par) -> cf.RandomWalkTask:
    """The task of a figure run: the paper's rho = M/2 at M = N + 1 (see :data:`DEFAULTS_U`)."""
    return cf.RandomWalkTask(
        K=par["K"],
        N=par["N"],
        M=par["N"] + 1,
        rho=par["M"] / 2.0,
        p=p,
        eta=par.get("eta", 1.0),
        eps=par.get("eps", 0.1),
    )


def _paired_checks(ds, names, steps, *, a="torch", b="reduced", label="") -> list[CheckResult]:
    """Torch ``a`` against the reduced map ``b`` on the same walks with the same steps: exact up to round-off, so
    compared seed by seed (a mean over seeds would hide one seed that leaves), one check per variable over
    ``steps``.
    """
    out = []
    for name in names:
        pairs = [(_at(ds, f"{a}_{name}", s), _at(ds, f"{b}_{name}", s)[0]) for s in steps]
        va = np.stack([v for (v, _), _ in pairs], axis=1)
        vb = np.stack([v for _, v in pairs], axis=1)
        shown = sorted({s for (_, s), _ in pairs})
        out.append(
            per_seed_check(
                f"{name}{label}: torch = reduced map (same walks) at steps {shown}",
                vb,
                va,
                tol=ROUND_OFF,
                tolerance=EXACT_SOURCE,
            )
        )
    return out


def _perturbed_reduced(task, walks, test, n_steps, steps, *, at=2, rel=1e-16, seed=0):
    """The reduced map run to step ``at``, its state perturbed by ``rel`` max|state| Gaussian noise, then run on to
    ``n_steps``: the stability probe of Theorem C2's symmetric state. Returns (steps, acc) of the whole run.
    """
    first = cf.map(task, at, walks=walks, test=test, saveat=SaveAt(steps=tuple(range(at + 1))))
    x = first.states()[0, -1]
    x = x + rel * np.abs(x).max() * np.random.default_rng(seed).standard_normal(x.shape)
    rest_steps = tuple(s - at for s in steps if s >= at)
    rest = cf.map(task, n_steps - at, walks=walks, test=test, state0=x, saveat=SaveAt(steps=rest_steps))
    acc = np.concatenate([first["acc"].values[0][[s for s in steps if s < at]], rest["acc"].values[0]])
    return acc


def _save_steps(n_steps: int, dense: int = 10, n_log: int = 12) -> tuple[int, ...]:
    """Every step up to ``dense``, then about ``n_log`` log-spaced steps up to ``n_steps``."""
    steps = set(range(min(dense, n_steps) + 1))
    if n_steps > dense:
        steps |= {int(s) for s in np.unique(np.rint(np.geomspace(dense, n_steps, n_log)))}
    return tuple(sorted(steps))


def _seeds(cfg, n_seeds: int) -> list[int]:
    """The seeds of the figure's repeats: walks and trainer seed of each (the seed rule, run ``"walks"``)."""
    return list(cfg.seeds("walks", n_seeds))


def _torch_run(task, cfg, seeds, walks, n_steps, steps, **model_kw):
    """Full-batch GD of the torch model on fixed walks; returns (trajectory, final params, model)."""
    train_w, test_w = walks
    model = rwm.RandomWalkAttention(task, data=train_w, test=test_w, **model_kw)
    config = rwm.config("gd", model, n_steps, seeds=tuple(seeds), saveat=SaveAt(steps=tuple(steps)))
    with torch_threads(1):
        traj, params = train(model, config, device=cfg.device, return_params=True, progress=cfg.progress)
    return traj, params, model


def _torch_and_reduced(task, cfg, seeds, walks, n_steps, steps, *, grid=None):
    """Full-batch GD of the torch model from zero (:func:`_torch_run`) and the exact reduced GD map
    (docs/models/token_selection.md §C.5) on each seed's walks, started from that seed's step-0 reduced state through
    :func:`dynamics.overlay.overlay`: on the torch save points, or on ``grid`` (steps from 0, e.g. beyond
    ``n_steps``). Returns (trajectory, final params, model, reduced map): the reduced map a Dataset with one
    trajectory per seed.
    """
    traj, params, model = _torch_run(task, cfg, seeds, walks, n_steps, steps)
    train_w, test_w = walks

    def reduced(state0, at):
        saveat = SaveAt(steps=tuple(int(s) for s in at))
        return cf.map(task, int(at[-1]), walks=list(train_w), test=list(test_w), state0=state0, saveat=saveat)

    theory, _ = overlay(reduced, traj, state_variables=cf.state_names(task), grid=grid)
    return traj, params, model, theory


def _series(traj, names, prefix) -> dict:
    """Variables ``{prefix}_{name}`` (seed, step) of a torch trajectory or a reduced run (one trajectory per seed)."""
    return {
        f"{prefix}_{name}": (("seed", "step"), traj[name].transpose("trajectory", "time").values)
        for name in names
        if name in traj
    }


def _state(task, run, seed: int, index: int) -> np.ndarray:
    """The reduced state (V, a, c) of trajectory ``seed`` of a run at time index ``index``, in state order."""
    return np.array([run[n].transpose("trajectory", "time").values[seed, index] for n in cf.state_names(task)])


def _V_of(traj, task, index) -> np.ndarray:
    """V (seed, K, K) at time index ``index`` of a torch trajectory or a reduced run."""
    return np.stack(
        [
            [[traj[f"V_{b}_{a}"].values[s, index] for a in range(task.K)] for b in range(task.K)]
            for s in range(traj.sizes["trajectory"])
        ]
    )


def _profiles(task, params, model, reduced, test_w) -> tuple[np.ndarray, np.ndarray]:
    """Mean attention per position over each run's test walks at the last step: torch and reduced, (seed, N)."""
    torch_p, red_p = [], []
    for i, te in enumerate(test_w):
        one = {k: v[i : i + 1] for k, v in params.items()}
        with torch_threads(1):
            torch_p.append(rwm.attention_profile(task, one, te, normalize_tokens=model.spec.normalize_tokens)[0])
        if reduced is not None:
            V, a, c = cf.unpack_state(task, _state(task, reduced, i, -1))
            S, _ = cf.reduced_forward(task, V, a, c, te.context)
            red_p.append(te.weights @ S)
    return np.stack(torch_p), (np.stack(red_p) if reduced is not None else None)


def _band(ax, x, samples, label, color):
    """Percentile band over seeds; a single seed is drawn as its line (no band)."""
    samples = np.asarray(samples)
    if samples.shape[0] >= 2:
        plot_seed_band(ax, x, samples, method="percentile", label=label, color=color)
    else:
        plot_empirical_band(ax, x, samples[0], samples[0], samples[0], label=label, color=color)


def _at(ds, var, step):
    """Values (seed,) of ``var`` at the saved step closest to ``step``."""
    idx = int(np.argmin(np.abs(ds.step.values - step)))
    return ds[var].values[:, idx], int(ds.step.values[idx])
