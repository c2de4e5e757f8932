"""Shared helpers of the group_sparse figures: the task, save steps, seeds, torch GD runs, the learned and reduced
variables, mirrored samples and the shared rows and checks.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats
import torch

from closedform import group_sparse as cf
from dynamics.saveat import SaveAt
from empirical.models import group_sparse as gm
from figures.experiments import train
from figures.registry import CheckResult, Explanation, GapRow, compare_rows


__all__ = ["LEARNED", "REDUCED", "UNRECOVERABLE", "N_PROXY", "PAIRED_LEVEL"]

ETA, SIGMA_X, JSTAR = (
    0.5,
    1.0,
    2,
)  # docs/models/token_selection.md §B.7: eta = 0.5 [exact], j* = 2 [exact], sigma_x = 1 [unknown; suggested]
LEARNED = (
    (
        "loss",
        "accuracy",
        "attn_jstar",
        "attn_jstar_q",
        "cos_vx_vstar",
        "norm_ratio",
        "v_pos_norm",
        "off",
        "w_cross_norm",
    )
    + cf.STATE_NAMES
    + cf.GAP_NAMES
)
REDUCED = ("loss", "loss_se", "accuracy", "attn_jstar", "attn_jstar_q") + cf.STATE_NAMES + cf.GAP_NAMES
UNRECOVERABLE = (
    "sigma_x = 1, v* a random unit vector (docs/models/token_selection.md §B.7 suggestions)",
    "norm ratio = ||v_pos|| / ||v_x|| [reconstructed]",
    "embedding H = [X; I_D] [reconstructed]",
)
N_PROXY = 8
"""Independent population proxies (docs/models/token_selection.md §G.B Monte Carlo samples) behind every reduced-map
curve: their spread is
the theory side's own standard error in the rows (``theory_se``)."""


def _task(d: int, D: int) -> cf.GroupSparseTask:
    return cf.GroupSparseTask(d=d, D=D, sigma_x=SIGMA_X, jstar=JSTAR, eta=ETA)


def _save_steps(n_steps: int, n_save: int) -> np.ndarray:
    """Steps 0, 1, 2 (closed forms of docs/models/token_selection.md §B.3) and a log grid up to n_steps."""
    grid = SaveAt(log=n_save).resolve_steps(n_steps)
    return np.unique(np.concatenate([[0, 1, 2], grid]))


def _v_star(gen: np.random.Generator, d: int) -> np.ndarray:
    v = gen.standard_normal(d)
    return v / np.linalg.norm(v)


def _seeds(cfg, n_seeds: int) -> tuple[int, ...]:
    """Seeds of the training samples (and trainer seeds) of a build: run ``"samples"`` of the seed rule."""
    return cfg.seeds("samples", n_seeds)


def _train_gd(task, samples, seeds, n_steps, steps, device, progress, **model_kw):
    """Torch full-batch GD (shared trainer) on fixed samples; returns the trajectory and the final parameters."""
    model = gm.GroupSparseAttention(task, data=samples, **model_kw)
    config = gm.config("gd", model, n_steps, seeds=seeds, saveat=SaveAt(steps=tuple(int(s) for s in steps)))
    return train(model, config, device=device, return_params=True, progress=progress)


def _learned_vars(traj, prefix: str = "") -> dict:
    return {f"{prefix}{name}": (("seed", "step"), traj[name].values) for name in LEARNED}


def _mirrored(samples) -> list:
    """Each training sample with the mirror images (-X, -y) of its draws appended (docs/models/token_selection.md §B.6:
    the x -> -x symmetry of the population restored).
    """
    return [
        cf.GroupSparseSample(
            X=np.concatenate([s.X, -s.X]),
            y=np.concatenate([s.y, -s.y]),
            v_star=s.v_star,
            n_unique=s.n_unique,
            mirrored=True,
        )
        for s in samples
    ]


def _mean_attention(params, samples, device) -> np.ndarray:
    """Mean over seeds and draws of the attention matrix S (key, query) at the final weights."""
    X = torch.stack([torch.as_tensor(s.X, dtype=torch.float64, device=device) for s in samples])
    with torch.no_grad():
        _, S = gm.forward(params, X)
    return S.mean(dim=(0, 1)).cpu().numpy()


def _row(quantity, time, theory, samples, *, theory_se=None, **kw) -> GapRow:
    """One row at ``time``: ``samples`` (seed,) against ``theory`` (:func:`figures.registry.compare_rows`); with
    ``theory_se`` the theory is the mean of :data:`N_PROXY` independent Monte Carlo proxies.
    """
    (row,) = compare_rows(
        quantity,
        [time],
        [theory],
        np.asarray(samples)[:, None],
        theory_se=None if theory_se is None else [theory_se],
        theory_n_seeds=None if theory_se is None else N_PROXY,
        **kw,
    )
    return row


def _reduced_proxies(task, n_steps, steps, n_pop, rng) -> dict:
    """The projected population map (docs/models/token_selection.md §B.3) on :data:`N_PROXY` independent population
    proxies of n_pop draws:
    ``{name: (N_PROXY, n_saved)}`` for the variables of ``REDUCED``.
    """
    runs = [
        cf.map(task, n_steps, n_samples=n_pop, rng=g, saveat=SaveAt(steps=tuple(int(s) for s in steps)), with_se=False)
        for g in rng.spawn(N_PROXY)
    ]
    return {name: np.stack([r[name].values[0] for r in runs]) for name in REDUCED}


def _reduced_vars(prox: dict) -> dict:
    """Mean over proxies (``reduced_<name>``) and its standard error (``reduced_<name>_pse``)."""
    out = {}
    for name, v in prox.items():
        out[f"reduced_{name}"] = (("step",), v.mean(axis=0))
        out[f"reduced_{name}_pse"] = (("step",), v.std(axis=0, ddof=1) / math.sqrt(v.shape[0]))
    return out


def _attention_floor(ds) -> tuple[float, float, int]:
    """The population map's row-j* weight E[S_j*,j] at the last step, the slack 1.5/sqrt(n) allowed to one training
    sample of size n, and n: every sample's weight should reach ``pop - slack``.
    """
    # The theorem's weight is the population's: the population map at the same t (not a threshold read off these runs).
    pop = float(ds["reduced_attn_jstar"].values[-1])
    n = int(ds.attrs["n"] if "n" in ds.attrs else ds.attrs["n_large"])
    return pop, 1.5 / math.sqrt(n), n


def _common_checks(ds, prefix: str = "", who: str = "torch GD") -> list[CheckResult]:
    D, T = ds.attrs["D"], int(ds.step.values[-1])
    out = []
    attn = ds[f"{prefix}attn_jstar"].values[:, -1]
    pop, slack, n = _attention_floor(ds)
    out.append(
        CheckResult(
            name=(
                f"docs/models/token_selection.md §B.4 item 1 (mean form, {who}): E[S_j*,j] at t = {T} reaches "
                "the population "
                f"map's {pop:.3f}, minimum over seeds"
            ),
            n_seeds=int(attn.size),
            passed=bool(np.all(attn >= pop - slack)),
            measured=float(attn.min()),
            expected=f">= {pop:.3f} - {slack:.3f} for every training sample",
            tolerance=(
                f"1.5/sqrt(n) = {slack:.3f} at n = {n}: 3 SD of a mean of n draws of a weight in [0, 1] (SD <= 1/2), "
                "the sampling error of finite-sample GD against the population"
            ),
        )
    )
    q = ds[f"{prefix}attn_jstar_q"].values[:, -1]
    bound = 1.0 - math.exp(-D)
    out.append(
        CheckResult(
            name=(
                f"docs/models/token_selection.md §B.4 item 1 (quantile form, {who}): the 5% quantile of min_j S_j*,j "
                f"reaches 1 - exp(-D), median over seeds"
            ),
            n_seeds=int(q.size),
            passed=bool(np.median(q) >= bound),
            measured=float(np.median(q)),
            expected=f">= {bound:.4f}",
            tolerance="the theorem's bound 1 - exp(-D), no slack",
            explanation=Explanation(
                kind="disagrees",
                reason=(
                    "the exp(-Theta(D)) deficit of the theorem is asymptotic: at D <= 10 the quantile has a heavy "
                    "lower tail from the w_par a_i a_j term"
                ),
                evidence=(
                    "docs/models/token_selection.md §B.6 measures the 5% quantile at 0.38-0.87 for D <= 10, "
                    "T <= 1e4; this check's measured median"
                ),
            ),
        )
    )
    cos = ds[f"{prefix}cos_vx_vstar"].values[:, -1]
    out.append(
        CheckResult(
            name=f"Sec. B.4 item 2 ({who}): cos(v_x, v*) -> 1 (t = {T}, finite raw samples), minimum over seeds",
            n_seeds=int(cos.size),
            passed=bool(np.all(cos >= 0.99)),
            measured=float(cos.min()),
            expected=">= 0.99 for every sample",
            tolerance="population: exactly 1 (docs/models/token_selection.md §B.3); docs/models/token_selection.md "
            "§B.6 measures >= 0.99995 with n = 4000 mirrored draws; "
            "0.99 allows the O(1/sqrt(n)) finite-sample tilt at n = 200-500",
        )
    )
    return out


def _rate_check(ds) -> CheckResult:
    D, T = ds.attrs["D"], int(ds.step.values[-1])
    task = _task(ds.attrs["d"], D)
    val = float(cf.loss_rate_statistic(task, T, ds["reduced_loss"].values[-1]))
    return CheckResult(
        name=f"Sec. B.4 item 3: D L T^(1/3) = O(1) on the population reduced dynamics (T = {T} >= D^3 = {D**3})",
        passed=bool(0.5 <= val <= 3.0),
        measured=val,
        expected="in [0.5, 3] for T >= D^3 (docs/models/token_selection.md §B.6: 1.55 at (4, 6), T = 1e3; -> 1.0-1.2 "
        "at T = 1e4)",
        tolerance="factor ~3 around the measured constant: the theorem fixes only the order Theta(1)",
    )


PAIRED_LEVEL = 1e-2


def _paired_check(
    name: str, worse: np.ndarray, better: np.ndarray, *, expected: str = "> 0", explanation: Explanation | None = None
) -> CheckResult:
    """Check that ``worse`` exceeds ``better`` seed by seed (errors of two models on the same downstream samples, or
    a run's row-j* weight on the mirrored against the raw draws): the one-sided exact Wilcoxon signed-rank test of the
    paired differences ``worse - better`` rejects "no difference" at :data:`PAIRED_LEVEL`. Signed ranks, not Student
    t: the differences are heavy-tailed (one seed's baseline error, or one raw sample's symmetry breaking, several
    times the others'), which leaves a t interval without power at 8-12 seeds. ``measured`` is the mean paired
    difference; ``explanation`` is attached only if the check fails.
    """
    diff = np.asarray(worse, dtype=np.float64) - np.asarray(better, dtype=np.float64)
    n = int(diff.size)
    # all-zero differences (both errors 0 on every seed): no evidence either way
    p = 1.0 if not np.any(diff) else float(scipy.stats.wilcoxon(diff, alternative="greater").pvalue)
    check = CheckResult(
        name=name,
        passed=p < PAIRED_LEVEL,
        measured=float(diff.mean()),
        expected=expected,
        n_seeds=n,
        tolerance=(
            f"one-sided exact Wilcoxon signed-rank test over {n} paired seeds: p = {p:.2g} "
            f"< {PAIRED_LEVEL:g} ({int(np.sum(diff > 0))} of {n} differences > 0)"
        ),
    )
    return check.explained(explanation) if explanation is not None and not check.passed else check
