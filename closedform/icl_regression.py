"""Multi-head softmax attention for in-context linear regression: approximate loss, flows, exact risks.

Implements the mathematics of docs/models/icl_regression.md (He, Pan, Chen, Yang, ICML 2025). Conventions
(docs/models/icl_regression.md §0): omega_h is the EFFECTIVE KQ coefficient (after the 1/sqrt(d+1) factor of the
authors' code); F approximates the plain MSE E[(y_q - yhat)^2] (no 1/2); every flow is the gradient flow of F/2 and its
time ``t`` is the F/2-flow time of docs/models/icl_regression.md §0.3 (GD on F/2 with step ``lr`` after ``n`` updates is
close to the flow at ``t = n * lr``).

Symbol table
------------
Sections (§) in the last column are those of docs/models/icl_regression.md.

===============  =============  ========================================================  ===========  =====
code name        paper symbol   meaning                                                   shape        where
===============  =============  ========================================================  ===========  =====
d, L, sigma2     d, L, sigma^2  covariate dimension, prompt length, label-noise variance  scalars      §1
L_test           L'             test prompt length                                        scalar       §7.6
omega, mu        omega_h, mu_h  effective KQ coefficient and OV label entry of each head  (..., H)     §3
u / muTomega     mu^T omega     effective step of the multi-head predictor                (...)        §4.4
sum_mu           1^T mu         sum of the OV entries (zero-sum diagnostic)               (...)        §5.2
Kmat, Mmat       K, M           exp(d omega omega^T); omega omega^T + cL K                (..., H, H)  §4.1
cL, D            C_L, D         (1 + sigma^2)/L; d (1 + sigma^2)                          scalars      §0
eta, eta_star    eta, eta*      step of a GD-type predictor; 1/(1 + D/L)                  scalar       §4.4
gamma, mu_gamma  gamma, mu(g)   common |omega_h| on S_gamma; optimal group OV sum         (...)        §5.4
chi, ratio       chi, r         d omega^2 and mu/omega in the two-head reduction          scalar       §6.3
xi               xi             d/L in the proportional limit                             scalar       §7.4
lam_ridge        lambda         ridge penalty (Bayes: d sigma^2)                          scalar       §7.4
Sigma, rho, G    Sigma, rho, G  covariate covariance, KMS correlation, preconditioner     (d, d)       §8.1
t, step, lr      t, n, lr       F/2-flow time, GD update count, learning rate             scalars      §0.3
===============  =============  ========================================================  ===========  =====

Trajectories of :func:`flow` and :func:`map` have state variables ``omega_0 .. omega_{H-1}``, ``mu_0 .. mu_{H-1}``
(code head h is math head h+1, docs/models/icl_regression.md §0.2) and derived variables ``F``, ``mu_dot_omega``,
``sum_mu``.

REFERENCE
---------
J. He, X. Pan, S. Chen, Z. Yang, "In-Context Linear Regression Demystified: Training Dynamics and Mechanistic
Interpretability of Multi-Head Softmax Attention", ICML 2025, arXiv:2503.12734. BibTeX key: he2025incontext.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

import numpy as np
import scipy.special

import dynamics
from closedform import _icl_regression_kernels as _k
from dynamics.convergence import DEFAULT_CONVERGENCE_TOL, check_run
from dynamics.errors import DivergenceError
from dynamics.random import as_generator
from dynamics.validation import (
    check_allocation,
    check_finite_array,
    check_in_range,
    check_int,
    check_nonneg,
    check_positive,
)

__all__ = [
    "REFERENCE",
    "MODEL",
    "TIME_UNIT",
    "CONVERGENCE_TOL",
    "ICLRegressionTask",
    "eta_star",
    "loss_infimum",
    "approx_loss",
    "approx_loss_grad",
    "kernel_matrix",
    "m_matrix",
    "optimal_mu",
    "refined_loss",
    "small_omega_limit",
    "true_loss_mc",
    "state_names",
    "flow",
    "map",
    "symmetric_two_head_loss",
    "symmetric_flow",
    "phase1_asymptotic",
    "phase2_peak_omega",
    "phase3_asymptotic",
    "phase3_heuristic_rate",
    "solution_manifold_mu",
    "manifold_loss",
    "manifold_step_series",
    "HeadPattern",
    "classify_heads",
    "gd_risk",
    "dgd_risk",
    "gd_optimal_eta",
    "dgd_optimal_eta",
    "FixedPoint",
    "fixed_points",
    "classify",
    "SingleHeadOptimum",
    "single_head_optimum",
    "bayes_risk_asymptotic",
    "linear_attention_risk",
    "Prompts",
    "sample_prompts",
    "predict_attention",
    "softmax_weight_norms",
    "predict_manifold",
    "predict_nadaraya_watson",
    "predict_gd",
    "predict_dgd",
    "predict_ridge",
    "predict_preconditioned_gd",
    "risk_mc",
    "ridge_risk_mc",
    "kms_covariance",
    "optimal_preconditioner",
    "preconditioned_gd_risk",
    "optimal_preconditioned_risk",
    "theorem_predictions",
]

logger = logging.getLogger(__name__)

REFERENCE = {
    "title": "In-Context Linear Regression Demystified: Training Dynamics and Mechanistic Interpretability of "
    "Multi-Head Softmax Attention",
    "authors": "J. He, X. Pan, S. Chen, Z. Yang",
    "venue": "ICML 2025",
    "arxiv": "2503.12734",
    "bibtex_key": "he2025incontext",
    "spec": "docs/models/icl_regression.md",
}

MODEL = "icl_regression"
# : The time axis of every trajectory of this module: the F/2 gradient-flow time t (docs/models/icl_regression.md §0.3).
#:func:`flow` and : :func:`symmetric_flow` integrate in t; :func:`map` (GD on F/2 with learning rate ``lr``) reports
# ``time = lr * step`` : (one shared ``lr``; the update count is ``step``), so a map and a flow of the same task share
# one time axis.
TIME_UNIT = "F/2 gradient-flow time t; map: t = lr * step (docs/models/icl_regression.md §0.3)"
_TIME_FLOW = "F/2 gradient-flow time t (docs/models/icl_regression.md §0.3)"
_TIME_MAP = "F/2 gradient-flow time t = lr * step (docs/models/icl_regression.md §0.3)"

# Threshold of ``converged`` in flow and symmetric_flow (max-norm of d(omega, mu)/dt at the end; map: lr times it).
CONVERGENCE_TOL = DEFAULT_CONVERGENCE_TOL
_EXP_MAX = float(np.log(np.finfo(np.float64).max))  # largest exponent whose exp is finite (~709.78)


# ----------------------------------------------------------------------------------------------------------------------
# Task spec
# ----------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ICLRegressionTask:
    """In-context linear regression task: x_i, x_q ~ N(0, I_d), beta ~ N(0, I_d/d), label noise N(0, sigma2).

    docs/models/icl_regression.md §1 (data model, Sec. 2 of the paper). ``L`` is the (training) prompt length.

    Parameters
    ----------
    d : int >= 1
        Covariate dimension.
    L : int >= 1
        Number of context examples per prompt.
    sigma2 : float >= 0
        Label-noise variance on context AND query labels.
    """

    d: Annotated[int, _V.Range(integer=True, ge=1)]
    L: Annotated[int, _V.Range(array=True, integer=True, ge=1)]
    sigma2: Annotated[float, _V.Range(array=True, ge=0)]

    def __post_init__(self):
        object.__setattr__(self, "d", check_int("d", self.d, min_value=1))
        object.__setattr__(self, "L", check_int("L", self.L, min_value=1))
        object.__setattr__(self, "sigma2", check_nonneg("sigma2", self.sigma2))

    # cross-paper names
    @property
    def dim(self) -> int:
        """Covariate dimension d (docs/models/icl_regression.md §1)."""
        return self.d

    @property
    def seq_len(self) -> int:
        """Prompt length L (docs/models/icl_regression.md §1)."""
        return self.L

    @property
    def cL(self) -> float:
        """C_L = (1 + sigma^2)/L (docs/models/icl_regression.md §0, §6.1)."""
        return (1.0 + self.sigma2) / self.L

    @property
    def D(self) -> float:
        """D = d (1 + sigma^2) (docs/models/icl_regression.md §0)."""
        return self.d * (1.0 + self.sigma2)

    def with_L(self, L: int) -> ICLRegressionTask:
        """The same task at another prompt length (docs/models/icl_regression.md §7.6, length generalisation)."""
        return dataclasses.replace(self, L=L)

    @staticmethod
    def time_of_step(step, lr: float):
        """F/2-flow time of GD step ``step`` with learning rate ``lr``: t = lr * step
        (docs/models/icl_regression.md §0.3).
        """
        return lr * np.asarray(step, dtype=np.float64)

    @staticmethod
    def step_of_time(t, lr: float):
        """GD step count closest to flow time ``t``: round(t / lr) (docs/models/icl_regression.md §0.3)."""
        return np.rint(np.asarray(t, dtype=np.float64) / lr).astype(np.int64)

    def to_json(self) -> str:
        """JSON of the task (provenance); see docs/models/icl_regression.md §1 for the meaning of the fields."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def _check_task(task) -> ICLRegressionTask:
    if not isinstance(task, ICLRegressionTask):
        raise ValueError(f"task must be an ICLRegressionTask; got {type(task).__name__}")
    return task


def eta_star(task: ICLRegressionTask) -> float:
    """eta* = 1/(1 + (1 + sigma^2) d / L): docs/models/icl_regression.md §4.4, Eq. (4.3) (optimality condition; =
    optimal dGD step).
    """
    task = _check_task(task)
    return task.L / (task.L + task.D)


def loss_infimum(task: ICLRegressionTask) -> float:
    """inf F = 1 + sigma^2 - eta*: docs/models/icl_regression.md §4.4 (global infimum of Eq. (4.1), approached as gamma
    -> 0 on S_gamma).
    """
    return 1.0 + task.sigma2 - eta_star(task)


# ----------------------------------------------------------------------------------------------------------------------
# Approximate loss (4.1), gradient (4.4), optimal OV
# ----------------------------------------------------------------------------------------------------------------------
def _pair(omega, mu, *, name_omega="omega", name_mu="mu"):
    omega = check_finite_array(name_omega, omega)
    mu = check_finite_array(name_mu, mu)
    if omega.ndim == 0 or mu.ndim == 0:
        raise ValueError(f"{name_omega} and {name_mu} must have a trailing head axis (shape [..., H])")
    if omega.shape[-1] != mu.shape[-1]:
        raise ValueError(
            f"{name_omega} and {name_mu} must have the same number of heads H (last axis); "
            f"got shapes {omega.shape} and {mu.shape}"
        )
    try:
        omega, mu = np.broadcast_arrays(omega, mu)
    except ValueError as exc:
        raise ValueError(f"{name_omega} {omega.shape} and {name_mu} {mu.shape} must broadcast") from exc
    return np.ascontiguousarray(omega), np.ascontiguousarray(mu)


def _check_exponent(task: ICLRegressionTask, omega: np.ndarray, name: str = "omega") -> None:
    """Raise DivergenceError when exp(d omega_h omega_h') overflows (its largest exponent is d max_h omega_h^2)."""
    flat = omega.reshape(-1, omega.shape[-1])
    expo = task.d * flat * flat
    if expo.size and float(expo.max()) > _EXP_MAX:
        n, h = np.unravel_index(int(np.argmax(expo)), expo.shape)
        raise DivergenceError(
            f"exp(d * {name}_h * {name}_h') overflows float64: d * {name}_{h}^2 = {expo[n, h]:.4g} > {_EXP_MAX:.2f} "
            f"(configuration {n}, head {h})",
            trajectory=int(n),
            variable=f"{name}_{h}",
        )


def approx_loss(task: ICLRegressionTask, omega: Annotated[Any, _REALS], mu: Annotated[Any, _REALS]) -> np.ndarray:
    """Approximate ICL loss F(omega, mu) for H heads: docs/models/icl_regression.md §4.1, Eq. (4.1) (Proposition 4.1).

    F = 1 + sigma^2 - 2 mu^T omega + mu^T (omega omega^T + ((1 + sigma^2)/L) exp.(d omega omega^T)) mu
    (no 1/2; approximates the plain MSE).

    Parameters
    ----------
    task : ICLRegressionTask
    omega, mu : (..., H) float64
        Effective KQ coefficients and OV label entries; broadcast against each other.

    Returns
    -------
    (...) float64 array (a 0-d array for a single configuration).
    """
    task = _check_task(task)
    omega, mu = _pair(omega, mu)
    _check_exponent(task, omega)
    lead = omega.shape[:-1]
    out = np.empty(int(np.prod(lead, dtype=np.int64)))
    _k.loss_batch(
        omega.reshape(-1, omega.shape[-1]), mu.reshape(-1, mu.shape[-1]), float(task.d), task.sigma2, task.cL, out
    )
    return out.reshape(lead)


def approx_loss_grad(
    task: ICLRegressionTask, omega: Annotated[Any, _REALS], mu: Annotated[Any, _REALS]
) -> tuple[np.ndarray, np.ndarray]:
    """Gradient of F (full, no 1/2) with respect to omega and mu: docs/models/icl_regression.md §4.4, Eq. (4.4).

    grad_omega F = -2 mu + 2 (mu^T omega) mu + (2 d (1+sigma^2)/L) (K o mu mu^T) omega,
    grad_mu F    = -2 omega + 2 M(omega) mu.

    Returns
    -------
    (grad_omega, grad_mu), each (..., H) float64. Halve them for the F/2 flow of docs/models/icl_regression.md §5.1.
    """
    task = _check_task(task)
    omega, mu = _pair(omega, mu)
    _check_exponent(task, omega)
    H = omega.shape[-1]
    X = np.concatenate([omega.reshape(-1, H), mu.reshape(-1, H)], axis=1)
    G = np.empty_like(X)
    _k.grad_batch(X, float(task.d), task.cL, G)
    return G[:, :H].reshape(omega.shape), G[:, H:].reshape(mu.shape)


def kernel_matrix(task: ICLRegressionTask, omega: Annotated[Any, _REALS]) -> np.ndarray:
    """K(omega) = exp.(d omega omega^T) (elementwise): docs/models/icl_regression.md §4.1, Eq. (4.1). Shape (..., H,
    H).
    """
    task = _check_task(task)
    omega = check_finite_array("omega", omega, ndim=tuple(range(1, 33)))
    _check_exponent(task, omega)
    return np.exp(task.d * omega[..., :, None] * omega[..., None, :])


def m_matrix(task: ICLRegressionTask, omega: Annotated[Any, _REALS]) -> np.ndarray:
    """M(omega) = omega omega^T + ((1 + sigma^2)/L) K(omega): docs/models/icl_regression.md §4.4 (Hessian of Eq. (4.1)
    in mu is 2 M).
    """
    K = kernel_matrix(task, omega)
    omega = np.asarray(omega, dtype=np.float64)
    return omega[..., :, None] * omega[..., None, :] + task.cL * K


def optimal_mu(task: ICLRegressionTask, omega: Annotated[Any, _REALS]) -> np.ndarray:
    """mu*(omega) = M(omega)^+ omega, the minimiser of F in mu: docs/models/icl_regression.md §4.4 (paper Eq. (4.4)).

    M is positive semidefinite; when two heads share omega_h it is singular and the minimum-norm minimiser
    (Moore-Penrose pseudo-inverse) is returned (docs/models/icl_regression.md §10, item 10: only group sums of mu are
    identified).

    Parameters
    ----------
    omega : (..., H) float64

    Returns
    -------
    (..., H) float64.
    """
    M = m_matrix(task, omega)
    omega = np.asarray(omega, dtype=np.float64)
    return np.einsum("...hg,...g->...h", np.linalg.pinv(M, hermitian=True), omega)


def refined_loss(task: ICLRegressionTask, omega: Annotated[Any, _REALS], mu: Annotated[Any, _REALS]) -> np.ndarray:
    """Refined large-L expansion F_ref of the true loss, exact to O(1/L) for fixed omega:
    docs/models/icl_regression.md §4.2 [D][V].

    F_ref = 1 + sigma^2 - 2u + u^2 + (1/L) sum_{h,h'} mu_h mu_h' [(1+sigma^2) g^{-d/2} + omega_h omega_h' g^{-d/2-1}]
            + (2/L)(1 - u) sum_h mu_h omega_h (1 - 2 omega_h^2)^{-d/2-1},  g = 1 - 2 omega_h omega_h'.

    Needs |omega_h omega_h'| < 1/2 (``ValueError`` otherwise); a diagnostic, not a replacement for F
    (docs/models/icl_regression.md §4.2).
    """
    task = _check_task(task)
    omega, mu = _pair(omega, mu)
    g = 1.0 - 2.0 * omega[..., :, None] * omega[..., None, :]
    if np.any(g <= 0):
        raise ValueError(
            "refined_loss needs |omega_h omega_h'| < 1/2 for all head pairs of omega "
            "(docs/models/icl_regression.md §4.2)"
        )
    d, L, s2 = task.d, task.L, task.sigma2
    u = np.sum(mu * omega, axis=-1)
    mm = mu[..., :, None] * mu[..., None, :]
    oo = omega[..., :, None] * omega[..., None, :]
    pair = np.sum(mm * ((1.0 + s2) * g ** (-d / 2) + oo * g ** (-d / 2 - 1)), axis=(-2, -1))
    lin = np.sum(mu * omega * (1.0 - 2.0 * omega**2) ** (-d / 2 - 1), axis=-1)
    return 1.0 + s2 - 2.0 * u + u**2 + pair / L + 2.0 / L * (1.0 - u) * lin


def small_omega_limit(
    task: ICLRegressionTask, eta: Annotated[Any, _REALS], sum_mu: Annotated[Any, _REALS]
) -> np.ndarray:
    """Exact small-omega limit of the true loss, R -> R_dGD(eta) + a^2 (1 + sigma^2)/L:
    docs/models/icl_regression.md §4.2 [D][V].

    Limit of omega -> 0 with mu^T omega -> eta and a = 1^T mu held fixed (any H, any L).
    """
    a = np.asarray(sum_mu, dtype=np.float64)
    return dgd_risk(task, eta) + a**2 * task.cL


# ----------------------------------------------------------------------------------------------------------------------
# Monte Carlo of the true ICL loss of the reduced predictor (3.2)
# ----------------------------------------------------------------------------------------------------------------------
def _draw_rotated(task: ICLRegressionTask, rng: np.random.Generator, a_out: np.ndarray):
    """Draw the rotated covariates of :func:`true_loss_mc` (see its Notes) into ``a_out`` (n, L); return s (n,)."""
    rng.standard_normal(out=a_out)
    return np.sqrt(rng.chisquare(task.d, a_out.shape[0]))


def true_loss_mc(
    task: ICLRegressionTask,
    omega: Annotated[Any, _REALS],
    mu: Annotated[Any, _REALS],
    n_prompts: Annotated[int, _V.Range(integer=True, ge=2)],
    rng: Annotated[Any, _V.seed_check] = None,
    *,
    chunk: Annotated[int, _V.Range(integer=True, ge=1)] = 65536,
):
    """Monte Carlo estimate of the true ICL loss R(omega, mu) of the reduced predictor: paper Eq. (3.2)
    (docs/models/icl_regression.md §4.3), docs/models/icl_regression.md §4.1.

    Uses the variance-reduced form R = sigma^2 + E[(beta^T x_q - yhat)^2] of docs/models/icl_regression.md §4.1, with
    beta and the context-label noise also integrated out exactly (only the covariates are sampled). All configurations
    in ``omega``/``mu`` (shape (..., H)) are evaluated on the SAME prompts (common random numbers: smooth landscapes,
    docs/models/icl_regression.md §9 Fig. 6).

    Parameters
    ----------
    task : ICLRegressionTask
    omega, mu : (..., H) float64
    n_prompts : int >= 2
        Number of independent prompts.
    rng : int seed, numpy Generator or None
    chunk : int >= 1
        Prompts per compiled batch (bounds memory at ~chunk L floats). The random stream, hence the estimate, is
        reproducible for a given (rng seed, chunk).

    Returns
    -------
    (mean, se) : arrays of shape (...): the estimate and its standard error std/sqrt(N).

    Notes
    -----
    Exact reduction (rotation invariance of N(0, I_d), then conditional expectations). Rotate so that
    x_q = |x_q| e1; then |x_q|^2 ~ chi^2_d and a_i = x_i . e1 are iid N(0, 1), independent of |x_q|, and
    x_i = a_i e1 + r_i with r_i iid N(0, I_{d-1}) on e1's complement. The weights w_i = sum_h mu_h softmax_i(omega_h
    |x_q| a_i) depend on (a, |x_q|) only, and yhat = sum_i w_i (beta^T x_i + eps_i). Averaging over
    beta ~ N(0, I/d), eps and then r (all independent of the weights) gives the per-prompt value
    sigma^2 + (|x_q| - sum_i w_i a_i)^2 / d + ((d-1)/d + sigma^2) sum_i w_i^2 (kernel
    ``_icl_regression_kernels.mc_conditional_losses``): L + 1 random numbers per prompt instead of
    (L + 1)(d + 1) + d, and a smaller variance. The tests compare it with a brute-force d-dimensional simulation
    that samples every quantity.
    """
    task = _check_task(task)
    omega, mu = _pair(omega, mu)
    _check_exponent(task, omega)
    n_prompts = check_int("n_prompts", n_prompts, min_value=2)
    chunk = check_int("chunk", chunk, min_value=1)
    rng = as_generator(rng)
    H = omega.shape[-1]
    Om = omega.reshape(-1, H)
    Mu = mu.reshape(-1, H)
    m = Om.shape[0]
    count = 0
    mean = np.zeros(m)
    m2 = np.zeros(m)  # sum of squared deviations (Chan et al. pairwise update across chunks)
    vals = np.empty(min(chunk, n_prompts))
    a_buf = np.empty((vals.size, task.L))  # reused: no fresh pages per chunk
    done = 0
    while done < n_prompts:
        nb = min(chunk, n_prompts - done)
        a = a_buf[:nb]
        s = _draw_rotated(task, rng, a)
        v = vals[:nb]
        for j in range(m):
            _k.mc_conditional_losses(a, s, Om[j], Mu[j], float(task.d), task.sigma2, v)
            mb = v.mean()
            m2b = float(np.sum((v - mb) ** 2))
            delta = mb - mean[j]
            tot = count + nb
            mean[j] += delta * nb / tot
            m2[j] += m2b + delta**2 * count * nb / tot
        count += nb
        done += nb
    se = np.sqrt(m2 / (count - 1) / count)
    lead = omega.shape[:-1]
    return mean.reshape(lead), se.reshape(lead)


# ----------------------------------------------------------------------------------------------------------------------
# Flows and GD (through the dynamics engine)
# ----------------------------------------------------------------------------------------------------------------------
def _initial_state(omega0, mu0):
    omega0, mu0 = _pair(omega0, mu0, name_omega="omega0", name_mu="mu0")
    if omega0.ndim > 2:
        raise ValueError(f"omega0 must have shape (H,) or (n_traj, H); got {omega0.shape}")
    if omega0.shape[-1] > _k.MAX_HEADS:
        raise ValueError(
            f"omega0 and mu0 must have 1 <= H <= {_k.MAX_HEADS} heads (last axis) for the compiled "
            f"kernels; got H = {omega0.shape[-1]}"
        )
    omega0 = np.atleast_2d(omega0)
    mu0 = np.atleast_2d(mu0)
    return np.ascontiguousarray(np.concatenate([omega0, mu0], axis=1)), omega0.shape[1]


def state_names(H: Annotated[int, _V.Range(integer=True, ge=1)]) -> list[str]:
    """Names of the general-H state: omega_0..omega_{H-1}, mu_0..mu_{H-1} (code head h = math head h+1,
    docs/models/icl_regression.md §0.2).

    Parameters
    ----------
    H : int >= 1
    """
    return [f"omega_{h}" for h in range(H)] + [f"mu_{h}" for h in range(H)]


def _batch_params(task: ICLRegressionTask, n_traj: int, sigma2, L, lr=None):
    """Engine parameters [d, cL, sigma2] (flows) or [d, cL, lr, sigma2] (GD), shared or one row per trajectory when
    sigma2, L or lr is an array broadcast with the batch (they enter the maps only as numbers,
    docs/models/icl_regression.md §5.1; sigma2, last, only enters the observable F). Returns
    (params, n, per-row sigma2 or None, config).
    """
    given = {"sigma2": sigma2, "L": L, "lr": lr}
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in given.items() if v is not None}
    for k, a in arrays.items():
        if a.ndim > 1:
            raise ValueError(f"{k} must be a number or a 1-D array (one per trajectory); got shape {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{k} must be finite")
    sizes = {"omega0/mu0": n_traj, **{k: a.size for k, a in arrays.items() if a.ndim == 1}}
    batch = {k: v for k, v in sizes.items() if v != 1}
    if len(set(batch.values())) > 1:
        raise ValueError(f"omega0/mu0, sigma2, L and lr must broadcast against the batch; got sizes {sizes}")
    n = next(iter(batch.values())) if batch else 1
    s2 = np.broadcast_to(arrays.get("sigma2", np.float64(task.sigma2)), (n,)).astype(np.float64)
    Ls = np.broadcast_to(arrays.get("L", np.float64(task.L)), (n,)).astype(np.float64)
    if np.min(s2) < 0:
        raise ValueError(f"sigma2 must be >= 0; got min {float(np.min(s2))!r}")
    if np.min(Ls) < 1 or np.any(Ls != np.round(Ls)):
        raise ValueError("L must be integers >= 1")
    cols = [np.full(n, float(task.d)), (1.0 + s2) / Ls]
    if lr is not None:
        lrs = np.broadcast_to(arrays["lr"], (n,)).astype(np.float64)
        if np.min(lrs) <= 0:
            raise ValueError(f"lr must be > 0; got min {float(np.min(lrs))!r}")
        cols.append(lrs)
    cols.append(s2)  # read by _k.observables as p[-1]
    P = np.stack(cols, axis=1)
    per_row = any(a.ndim == 1 for a in arrays.values())
    if not per_row:
        return P[0], n, None, {}
    return P, n, s2, {"sigma2": s2.tolist(), "L": Ls.astype(int).tolist()}


def _attrs(task: ICLRegressionTask, *, equation: str, time_unit: str, config: dict) -> dict:
    return {
        "model": MODEL,
        "spec": dataclasses.asdict(task),
        "config": config,
        "source": "closedform",
        "equation": equation,
        "time_unit": time_unit,
        "paper": REFERENCE["arxiv"],
    }


def flow(
    task: ICLRegressionTask,
    omega0: Annotated[Any, _REALS],
    mu0: Annotated[Any, _REALS],
    t_span: Annotated[Any, _V.Array(shape=(2,))],
    *,
    saveat: Annotated[Any, _V.Instance(_SaveAt)] = None,
    solver=None,
    stop: Annotated[Any, _V.callable_check] = None,
    progress: bool = False,
    sigma2: Annotated[Any, _V.Range(array=True, ge=0)] = None,
    L: Annotated[Any, _V.Range(array=True, integer=True, ge=1)] = None,
    warn_unconverged: bool = True,
):
    """Gradient flow of F/2 for H heads, batched over initial conditions: docs/models/icl_regression.md §5.1 (time:
    F/2-flow time, docs/models/icl_regression.md §0.3).

    d omega_h/dt = mu_h (1 - mu^T omega) - (d (1+sigma^2)/L) mu_h sum_h' mu_h' omega_h' exp(d omega_h omega_h'),
    d mu_h/dt    = omega_h (1 - mu^T omega) - ((1+sigma^2)/L) sum_h' mu_h' exp(d omega_h omega_h').

    Parameters
    ----------
    task : ICLRegressionTask
    omega0, mu0 : (H,) or (n_traj, H) float64
        Initial KQ coefficients and OV entries.
    t_span : (t0, t1)
        F/2-flow times.
    saveat : dynamics.SaveAt, optional
        Default ``SaveAt(n=201)`` (the engine's).
    solver : dynamics solver, optional
        Default ``Dopri5(rtol=1e-10, atol=1e-12)`` (docs/models/icl_regression.md §12: rtol ~1e-10 reproduces the
        tables).
    stop, progress :
        Passed to :func:`dynamics.integrate`.
    sigma2 : number or (n_traj,) array, >= 0, optional
        Per-trajectory noise variance (default: the task's), broadcast with the batch.
    L : int or (n_traj,) int array, >= 1, optional
        Per-trajectory prompt length (default: the task's), broadcast with the batch.
    warn_unconverged : bool, default True
        For one head (H = 1, whose F has a finite minimiser, docs/models/icl_regression.md §7.3): warn
        (``dynamics.UnconvergedWarning``) when a trajectory ends with the max-norm of the vector field >= 1e-8
        (:data:`CONVERGENCE_TOL`), unless ``stop`` ended the run on purpose. For H >= 2 the flow never warns: its
        infimum lies at the end of the solution manifold (gamma -> 0, docs/models/icl_regression.md §5.4, §6.3;
        omega ~ t^(-1/6)), so no run converges, and a gradient flow cannot cycle (its blow-up raises).

    Returns
    -------
    dynamics.Trajectory with variables omega_0.., mu_0.., F, mu_dot_omega, sum_mu, and the convergence diagnostics
    ``final_step_norm``, ``converged``, ``step_norm_trend`` (``dynamics.convergence``).
    A non-finite value (e.g. exp(d omega_h omega_h') overflowing) raises ``dynamics.DivergenceError`` naming the
    time, trajectory and head variable.
    """
    task = _check_task(task)
    y0, H = _initial_state(omega0, mu0)
    _check_exponent(task, y0[:, :H], "omega0")
    if solver is None:
        solver = dynamics.Dopri5(rtol=1e-10, atol=1e-12)
    params, n, _, cfg = _batch_params(task, y0.shape[0], sigma2, L)
    y0 = np.ascontiguousarray(np.broadcast_to(y0, (n, y0.shape[1])))
    traj = dynamics.integrate(
        _k.flow_rhs,
        y0,
        tuple(t_span),
        params=params,
        solver=solver,
        saveat=saveat,
        names=state_names(H),
        observe=_k.observables,
        observe_names=_k.OBSERVABLE_NAMES,
        stop=stop,
        progress=progress,
        convergence_tol=CONVERGENCE_TOL,
        attrs=_attrs(
            task,
            equation="docs/models/icl_regression.md §5.1 (gradient flow of F/2, F = Eq. (4.1))",
            time_unit=_TIME_FLOW,
            config={"H": H, "solver": repr(solver), "t_span": [float(t) for t in t_span], **cfg},
        ),
    )
    return check_run(
        traj, warn_unconverged and H == 1 and stop is None, what="icl_regression.flow", tol=CONVERGENCE_TOL
    )


def map(
    task: ICLRegressionTask,
    omega0: Annotated[Any, _REALS],
    mu0: Annotated[Any, _REALS],
    *,
    lr: Annotated[Any, _V.Range(array=True, gt=0)],
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)],
    saveat: Annotated[Any, _V.Instance(_SaveAt)] = None,
    stop: Annotated[Any, _V.callable_check] = None,
    progress: bool = False,
    sigma2: Annotated[Any, _V.Range(array=True, ge=0)] = None,
    L: Annotated[Any, _V.Range(array=True, integer=True, ge=1)] = None,
    warn_unconverged: bool = True,
):
    """Gradient descent on F/2 with learning rate ``lr`` (the authors' helper ``gradient_flow``):
    docs/models/icl_regression.md §5.1.

    theta_{n+1} = theta_n - lr * grad(F/2)(theta_n), theta = (omega, mu); batched over initial conditions.
    The trajectory's ``time`` is the F/2-flow time ``lr * step`` (docs/models/icl_regression.md §0.3) and ``step`` the
    update count.

    Parameters
    ----------
    omega0, mu0 : (H,) or (n_traj, H) float64
    lr : float > 0 or (n_traj,) array
    n_steps : int >= 0
    saveat : dynamics.SaveAt, optional
        Entries hold the state after n updates, n = 0 is the initialisation (docs/models/icl_regression.md §0.2).

    sigma2 : number or (n_traj,) array, >= 0, optional
        Per-trajectory noise variance (default: the task's), broadcast with the batch.
    L : int or (n_traj,) int array, >= 1, optional
        Per-trajectory prompt length (default: the task's), broadcast with the batch.
    warn_unconverged : bool, default True
        Warn (``dynamics.UnconvergedWarning``) when a trajectory's step norm did not decrease over the last half of
        the run (an ``lr`` beyond the stability limit gives a cycle or chaos, or a ``dynamics.DivergenceError``);
        for one head without ``stop`` (see :func:`flow`) also when it is still converging, the threshold on the
        last update being ``lr`` (the smallest, for an array) times :data:`CONVERGENCE_TOL` (the flow's gradient
        size).

    Returns
    -------
    dynamics.Trajectory with variables omega_0.., mu_0.., F, mu_dot_omega, sum_mu and the convergence diagnostics
    of :func:`flow`.
    """
    task = _check_task(task)
    if np.ndim(lr) == 0:
        lr = check_positive("lr", lr)
    n_steps = check_int("n_steps", n_steps, min_value=0)
    y0, H = _initial_state(omega0, mu0)
    _check_exponent(task, y0[:, :H], "omega0")
    params, n, _, cfg = _batch_params(task, y0.shape[0], sigma2, L, lr)
    y0 = np.ascontiguousarray(np.broadcast_to(y0, (n, y0.shape[1])))
    # time = lr * step needs one lr: a per-trajectory lr gives time = step
    time_scale = float(lr) if np.ndim(lr) == 0 else 1.0
    tol = CONVERGENCE_TOL * float(np.min(lr))
    traj = dynamics.iterate(
        _k.gd_step,
        y0,
        n_steps,
        params=params,
        saveat=saveat,
        names=state_names(H),
        observe=_k.observables,
        observe_names=_k.OBSERVABLE_NAMES,
        step_observe=_k.gd_step_observables,
        stop=stop,
        time_scale=time_scale,
        progress=progress,
        convergence_tol=tol,
        attrs=_attrs(
            task,
            equation="docs/models/icl_regression.md §5.1 (GD on F/2, F = Eq. (4.1))",
            time_unit=_TIME_MAP,
            config={"H": H, "lr": np.asarray(lr).tolist(), "n_steps": n_steps, **cfg},
        ),
    )
    return check_run(traj, warn_unconverged, what="icl_regression.map", fixed_points=H == 1 and stop is None, tol=tol)


def symmetric_two_head_loss(
    task: ICLRegressionTask, omega: Annotated[Any, _REALS], mu: Annotated[Any, _REALS]
) -> np.ndarray:
    """f(omega, mu) = F((omega, -omega), (mu, -mu)) = 1 + s2 - 4 mu omega + 4 mu^2 omega^2 + 4 cL mu^2 sinh(d omega^2).

    docs/models/icl_regression.md §6.2 (paper Eq. (B.4); the reduced ODE is the gradient flow of f/4).
    """
    task = _check_task(task)
    omega = np.asarray(omega, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    return (
        1.0
        + task.sigma2
        - 4.0 * mu * omega
        + 4.0 * mu**2 * omega**2
        + 4.0 * task.cL * mu**2 * np.sinh(task.d * omega**2)
    )


def symmetric_flow(
    task: ICLRegressionTask,
    omega0: Annotated[Any, _REALS],
    mu0: Annotated[Any, _REALS],
    t_span: Annotated[Any, _V.Array(shape=(2,))],
    *,
    saveat: Annotated[Any, _V.Instance(_SaveAt)] = None,
    solver=None,
    progress: bool = False,
):
    """Symmetric two-head gradient flow of F/2 in (omega, mu): the reduced system of docs/models/icl_regression.md §6.2,
    Eq. (B.4).

    On the invariant set omega_1 = -omega_2 = omega, mu_1 = -mu_2 = mu of the two-head flow (``flow`` with H = 2,
    docs/models/icl_regression.md §6.1). ``omega0``, ``mu0`` are scalars or (n_traj,) arrays (e.g. omega0 = mu0 = eps0,
    Definition B.1); the trajectory holds ``omega``, ``mu`` and derived ``F`` (= f of :func:`symmetric_two_head_loss`),
    ``two_omega_mu``, ``ratio`` (r = mu/omega) and ``chi`` (d omega^2). For the full four-dimensional two-head system
    use :func:`flow` with (2,)-shaped ``omega0``, ``mu0``. ``omega0`` must be non-zero: the ratio is undefined at
    omega = 0 (omega = mu = 0 is a fixed point of the flow).

    Time is the F/2-flow time (docs/models/icl_regression.md §0.3). Default solver ``Dopri5(rtol=1e-10, atol=1e-12)``.
    Never warns about convergence, as :func:`flow` with H = 2.
    """
    task = _check_task(task)
    omega0 = check_finite_array("omega0", omega0, ndim=(0, 1))
    mu0 = check_finite_array("mu0", mu0, ndim=(0, 1))
    if np.any(omega0 == 0):  # the derived ratio mu/omega starts at +-inf (or 0/0 at the fixed point omega = mu = 0)
        raise ValueError(f"omega0 must be non-zero (the ratio r = mu/omega is undefined at omega = 0); got {omega0}")
    try:
        omega0, mu0 = np.broadcast_arrays(np.atleast_1d(omega0), np.atleast_1d(mu0))
    except ValueError as exc:
        raise ValueError(f"omega0 {omega0.shape} and mu0 {mu0.shape} must broadcast") from exc
    y0 = np.ascontiguousarray(np.stack([omega0, mu0], axis=1))
    if solver is None:
        solver = dynamics.Dopri5(rtol=1e-10, atol=1e-12)

    def derived(Y, P):
        om, m = Y[..., 0], Y[..., 1]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return {
                "F": symmetric_two_head_loss(task, om, m),
                "two_omega_mu": 2.0 * om * m,
                "ratio": m / om,
                "chi": task.d * om**2,
            }

    return dynamics.integrate(
        _k.two_head_rhs,
        y0,
        tuple(t_span),
        params=np.array([float(task.d), task.cL]),
        solver=solver,
        saveat=saveat,
        names=["omega", "mu"],
        derived=derived,
        progress=progress,
        convergence_tol=CONVERGENCE_TOL,
        attrs=_attrs(
            task,
            equation="docs/models/icl_regression.md §6.2, Eq. (B.4) (symmetric two-head flow of F/2)",
            time_unit=_TIME_FLOW,
            config={"H": 2, "symmetric": True, "solver": repr(solver), "t_span": [float(t) for t in t_span]},
        ),
    )


#  Phase-wise asymptotics of the symmetric two-head flow (docs/models/icl_regression.md §6.3)
# -------------------------------------------------
def phase1_asymptotic(
    task: ICLRegressionTask, eps0: float, t: Annotated[Any, _V.Range(array=True, ge=0)]
) -> tuple[np.ndarray, np.ndarray]:
    """Phase I (linearised flow): omega(t) = mu(t) = eps0 e^t, docs/models/icl_regression.md §6.3, Eqs. (B.5)-(B.6).
    Returns (omega, mu).

    Parameters
    ----------
    t : float or array >= 0
    """
    _check_task(task)
    eps0 = check_positive("eps0", eps0)
    w = eps0 * np.exp(np.asarray(t, dtype=np.float64))
    return w, w.copy()


def phase2_peak_omega(task: ICLRegressionTask, ratio: float = 1.1) -> float:
    """Peak value of omega in Phase II, from chi (1 + (D/L) cosh chi) = d/(2 r), chi = d omega^2:
    docs/models/icl_regression.md §6.3 (B.7)-(B.8).

    ``ratio`` is r = mu/omega at the peak (about 1.1 for the paper's settings, docs/models/icl_regression.md §6.3).
    Returns omega_peak.
    """
    task = _check_task(task)
    r = check_positive("ratio", ratio)
    target = task.d / (2.0 * r)
    fun = lambda chi: chi * (1.0 + task.D / task.L * np.cosh(chi)) - target  # noqa: E731
    hi = 1.0
    while fun(hi) < 0:
        hi *= 2.0
    import scipy.optimize  # imported on first use: 0.35 s that no other function of this module needs

    chi = scipy.optimize.brentq(fun, 0.0, hi, xtol=1e-15, rtol=1e-15)
    return float(np.sqrt(chi / task.d))


def phase3_asymptotic(
    task: ICLRegressionTask, t: Annotated[Any, _V.Range(array=True, gt=0)]
) -> tuple[np.ndarray, np.ndarray]:
    """Phase III law along the valley: omega(t)^{-6} ~ 4 (1+sigma^2) d^3 t / L, mu ~ eta*/(2 omega):
    docs/models/icl_regression.md §6.3.

    (Not the t^{-1/2} of the two-timescale heuristic (B.17)-(B.18); see docs/models/icl_regression.md §10, item 5.)
    Returns (omega, mu).

    Parameters
    ----------
    t : float or array > 0
    """
    task = _check_task(task)
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(divide="ignore"):
        omega = (4.0 * (1.0 + task.sigma2) * task.d**3 * t / task.L) ** (-1.0 / 6.0)
    return omega, eta_star(task) / (2.0 * omega)


def phase3_heuristic_rate(task: ICLRegressionTask, omega: Annotated[Any, _REALS]) -> np.ndarray:
    """Heuristic d omega/dt with mu pinned to mu*(omega): -C_L d^3 omega^3 / (6 (1 + C_L d)^2),
    docs/models/icl_regression.md §6.3 (B.17).
    """
    task = _check_task(task)
    omega = np.asarray(omega, dtype=np.float64)
    return -task.cL * task.d**3 * omega**3 / (6.0 * (1.0 + task.cL * task.d) ** 2)


# ----------------------------------------------------------------------------------------------------------------------
# Solution manifold (4.6)-(4.8) and the head classifier (5.2)-(5.4)
# ----------------------------------------------------------------------------------------------------------------------
def solution_manifold_mu(task: ICLRegressionTask, gamma: Annotated[Any, _check_nonzero]) -> np.ndarray:
    """mu(gamma) = gamma / (2 [gamma^2 + (1+sigma^2) sinh(d gamma^2)/L]): docs/models/icl_regression.md §5.4, Eq.
    (4.6).
    """
    task = _check_task(task)
    gamma = np.asarray(gamma, dtype=np.float64)
    return gamma / (2.0 * (gamma**2 + task.cL * np.sinh(task.d * gamma**2)))


def manifold_loss(task: ICLRegressionTask, gamma: Annotated[Any, _check_nonzero]) -> np.ndarray:
    """F on S_gamma: 1 + sigma^2 - gamma^2/(gamma^2 + (1+sigma^2) sinh(d gamma^2)/L): docs/models/icl_regression.md §5.4
    (Eqs. (4.6)-(4.7)).
    """
    task = _check_task(task)
    gamma = np.asarray(gamma, dtype=np.float64)
    return 1.0 + task.sigma2 - 2.0 * gamma * solution_manifold_mu(task, gamma)


def manifold_step_series(task: ICLRegressionTask, gamma: Annotated[Any, _check_nonzero]) -> np.ndarray:
    """Series 2 gamma mu(gamma) = eta* - (eta*)^2 (1+sigma^2) d^3 gamma^4/(6L) + O(gamma^8):
    docs/models/icl_regression.md §5.4, Eq. (4.8).
    """
    task = _check_task(task)
    gamma = np.asarray(gamma, dtype=np.float64)
    es = eta_star(task)
    return es - es**2 * (1.0 + task.sigma2) * task.d**3 * gamma**4 / (6.0 * task.L)


class HeadPattern(NamedTuple):
    """Pattern diagnostics of a state (docs/models/icl_regression.md §3 Observations 1-2,
    docs/models/icl_regression.md §5.2-§5.4, Eqs. (4.2)-(4.4)).
    """

    positive: np.ndarray  # (..., H) bool: non-dummy heads with omega_h > 0 (H+)
    negative: np.ndarray  # (..., H) bool: non-dummy heads with omega_h < 0 (H-)
    dummy: np.ndarray  # (..., H) bool: |mu_h| < dummy_tol * max_h' |mu_h'| (H0)
    sign_matched: np.ndarray  # (...) bool: sign(mu_h) = sign(omega_h) on every non-dummy head
    gamma: Annotated[np.ndarray, _check_nonzero]  # (...) mean |omega_h| over non-dummy heads
    homogeneity: np.ndarray  # (...) population std / mean of |omega_h| over non-dummy heads (0 = homogeneous)
    sum_mu: Annotated[np.ndarray, _REALS]  # (...) 1^T mu (zero-sum OV, Eq. (4.2))
    zero_sum_rel: np.ndarray  # (...) |1^T mu| / sum_h |mu_h|
    mu_pos: np.ndarray  # (...) sum of mu_h over H+
    mu_neg: np.ndarray  # (...) sum of mu_h over H-
    mu_dot_omega: np.ndarray  # (...) mu^T omega (-> eta*, Eq. (4.3))


def classify_heads(
    omega: Annotated[Any, _REALS],
    mu: Annotated[Any, _REALS],
    *,
    dummy_tol: Annotated[float, _V.Range(ge=0, lt=1)] = 0.05,
) -> HeadPattern:
    """Split heads into positive / negative / dummy and compute the diagnostics of
    docs/models/icl_regression.md §3, §5.2-§5.4.

    Dummy: |mu_h| < dummy_tol * max_h' |mu_h'| (docs/models/icl_regression.md §3, toolkit choice [U]). Homogeneity:
    population std / mean of |omega_h| over non-dummy heads (Eq. (4.4) predicts 0); zero-sum: 1^T mu (Eq. (4.2) predicts
    0); sign matching sign(mu_h) = sign(omega_h) (Observation 1); mu^T omega (Eq. (4.3) predicts eta*).

    Parameters
    ----------
    omega, mu : (..., H) float64 (e.g. ``np.stack([traj[f"omega_{h}"] for h in range(H)], -1)``)
    dummy_tol : float in [0, 1)
    """
    omega, mu = _pair(omega, mu)
    dummy_tol = check_in_range("dummy_tol", dummy_tol, 0.0, 1.0, high_open=True)
    amu = np.abs(mu)
    dummy = amu < dummy_tol * amu.max(axis=-1, keepdims=True)
    active = ~dummy
    positive = active & (omega > 0)
    negative = active & (omega < 0)
    sign_matched = np.all(~active | (np.sign(mu) == np.sign(omega)), axis=-1)
    aom = np.where(active, np.abs(omega), np.nan)
    gamma = np.nanmean(aom, axis=-1)
    homogeneity = np.nanstd(aom, axis=-1) / gamma
    sum_mu = mu.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        zero_sum_rel = np.abs(sum_mu) / amu.sum(axis=-1)
    return HeadPattern(
        positive=positive,
        negative=negative,
        dummy=dummy,
        sign_matched=sign_matched,
        gamma=gamma,
        homogeneity=homogeneity,
        sum_mu=sum_mu,
        zero_sum_rel=zero_sum_rel,
        mu_pos=np.where(positive, mu, 0.0).sum(axis=-1),
        mu_neg=np.where(negative, mu, 0.0).sum(axis=-1),
        mu_dot_omega=np.sum(mu * omega, axis=-1),
    )


# ----------------------------------------------------------------------------------------------------------------------
# docs/models/icl_regression.md §7: predictors and their exact risks
# ----------------------------------------------------------------------------------------------------------------------
def gd_risk(task: ICLRegressionTask, eta: Annotated[Any, _REALS]) -> np.ndarray:
    """Exact risk of one-step GD, R_GD(eta) = 1 + s2 - 2 eta + eta^2 (1 + (d + 1 + d s2)/L):
    docs/models/icl_regression.md §7.2 (Eq. (4.11)).
    """
    task = _check_task(task)
    eta = np.asarray(eta, dtype=np.float64)
    d, L, s2 = task.d, task.L, task.sigma2
    return 1.0 + s2 - 2.0 * eta + eta**2 * (1.0 + (d + 1.0 + d * s2) / L)


def dgd_risk(task: ICLRegressionTask, eta: Annotated[Any, _REALS]) -> np.ndarray:
    """Exact risk of debiased GD (4.11): R_dGD = 1 + s2 - 2 eta (L-1)/L + eta^2 (L-1)(L + d + d s2)/L^2,
    docs/models/icl_regression.md §7.2.
    """
    task = _check_task(task)
    eta = np.asarray(eta, dtype=np.float64)
    d, L, s2 = task.d, task.L, task.sigma2
    return 1.0 + s2 - 2.0 * eta * (L - 1.0) / L + eta**2 * (L - 1.0) * (L + d + d * s2) / L**2


def gd_optimal_eta(task: ICLRegressionTask) -> float:
    """eta_GD,opt = L/(L + d + 1 + d sigma^2): docs/models/icl_regression.md §7.2 (minimiser of R_GD)."""
    task = _check_task(task)
    return task.L / (task.L + task.d + 1.0 + task.d * task.sigma2)


def dgd_optimal_eta(task: ICLRegressionTask) -> float:
    """eta_dGD,opt = L/(L + d(1 + sigma^2)) = eta* exactly: docs/models/icl_regression.md §7.2 (Eq. (4.3))."""
    return eta_star(task)


class FixedPoint(NamedTuple):
    """A stationary point of the H-head flow of F/2 (docs/models/icl_regression.md §5.1): grad F = 0.

    ``kind``: "origin" (omega = mu = 0), "single_head" (every omega_h equal and non-zero: the heads act as one head,
    only sum(mu) is identified, docs/models/icl_regression.md §4.4; the representative has mu split equally, and the
    point is one member of a line of stationary points), or "other". ``hessian_eigenvalues``: of F/2 (ascending; a zero
    for each flat direction). ``stability``: "minimum" (no eigenvalue below -1e-8 relative to the largest), "saddle" or
    "maximum".
    """

    omega: Annotated[np.ndarray, _REALS]
    mu: Annotated[np.ndarray, _REALS]
    kind: str
    F: float
    hessian_eigenvalues: np.ndarray
    stability: str


def _half_grad_rows(task, X, H):
    go, gm = approx_loss_grad(task, X[:, :H], X[:, H:])
    return 0.5 * np.concatenate([go, gm], axis=1)


def _hessian(task, x, H):
    h = 1e-6  # central differences of the analytic gradient: error ~h^2 + 1e-16/h ~ 1e-10
    E = np.eye(2 * H) * h
    Hm = (_half_grad_rows(task, x + E, H) - _half_grad_rows(task, x - E, H)) / (2 * h)
    return 0.5 * (Hm + Hm.T)


def fixed_points(
    task: ICLRegressionTask,
    H: Annotated[int, _V.Range(integer=True, ge=1)] = 2,
    *,
    n_starts: int = 2000,
    rng: Annotated[Any, _V.seed_check] = 0,
    omega_box: Annotated[float, _V.Range(gt=0)] = 1.0,
    mu_box: Annotated[float, _V.Range(gt=0)] = 6.0,
) -> tuple[FixedPoint, ...]:
    """Every stationary point of F/2 (docs/models/icl_regression.md §4.1, §5.1) reached by a root search on the
    H-head flow (the engine's vector field, through :func:`dynamics.fixed_points`).

    Starts are uniform in [-omega_box, omega_box]^H x [-mu_box, mu_box]^H; omega is clipped to |omega| <= 2 during the
    search (exp(d omega^2) must stay finite, docs/models/icl_regression.md §12). Roots (gradient max-norm < 1e-12) are
    merged when their omega agree and the sums of mu over heads with equal omega agree to 1e-5 (only those sums are
    identified, docs/models/icl_regression.md §4.4; heads count as equal when their omega agree to 1e-4: near the line
    of single-head points the flow is flat to ~1e-6, so roots there polish to a residual of 1e-12 but only to ~1e-6 in
    omega). Each point is represented by its best-polished root. The solution manifold S_gamma of
    docs/models/icl_regression.md §5.4 holds no stationary point (grad_omega F != 0 on it for gamma > 0,
    docs/models/icl_regression.md §5.4): flows on it drift towards gamma -> 0, and the search does not converge there.

    Parameters
    ----------
    H : int >= 1
    omega_box : float > 0
    mu_box : float > 0

    Returns
    -------
    tuple of :class:`FixedPoint`, by increasing F.
    """
    task = _check_task(task)
    H = check_int("H", H, min_value=1)
    n_starts = check_int("n_starts", n_starts, min_value=1)
    rng = as_generator(rng)
    X = np.concatenate(
        [rng.uniform(-omega_box, omega_box, (n_starts, H)), rng.uniform(-mu_box, mu_box, (n_starts, H))], axis=1
    )
    lim = min(2.0, 0.95 * np.sqrt(700.0 / task.d))
    equal = 1e-4

    def clip(Y):
        Y = Y.copy()
        Y[:, :H] = np.clip(Y[:, :H], -lim, lim)
        return Y

    def key(x):
        om, mu = x[:H], x[H:]
        return np.concatenate([om, [mu[np.abs(om - om[h]) < equal].sum() for h in range(H)]])

    params, *_ = _batch_params(task, 1, None, None)
    roots = dynamics.fixed_points(
        _k.flow_rhs, params, X, kind="flow", canonical=key, project=clip, tol=1e-12, same=1e-5, max_iter=300
    )
    out: list[FixedPoint] = []
    for root in roots:
        om, mu = root.state[:H], root.state[H:]
        if np.all(np.abs(om) < 1e-10):
            kind = "origin"
            mu = np.zeros(H)
            om = np.zeros(H)
        elif np.all(np.abs(om - om[0]) < equal):
            kind = "single_head"
            mu = np.full(H, mu.sum() / H)
        else:
            kind = "other"
        z = np.concatenate([om, mu])
        ev = np.linalg.eigvalsh(_hessian(task, z, H))
        scale = max(1.0, float(np.max(np.abs(ev))))
        stab = "minimum" if ev[0] > -1e-8 * scale else ("maximum" if ev[-1] < 1e-8 * scale else "saddle")
        out.append(
            FixedPoint(
                omega=om, mu=mu, kind=kind, F=float(approx_loss(task, om, mu)), hessian_eigenvalues=ev, stability=stab
            )
        )
    return tuple(sorted(out, key=lambda p: p.F))


def classify(
    task: ICLRegressionTask, omega: Annotated[Any, _REALS], mu: Annotated[Any, _REALS], *, tol: float = 1e-3
) -> np.ndarray:
    """Name where H-head flows of F/2 ended: "single_head" (every omega_h within ``tol`` of 1/sqrt(d) in modulus, one
    sign, and sum(mu) within ``tol`` of the F_1 optimum, docs/models/icl_regression.md §7.3), "solution_manifold"
    (positive and negative heads with mu^T omega within 0.05 of eta* and |sum mu| < 0.05: the valley S_gamma of
    docs/models/icl_regression.md §5.4, on which the flow keeps
    drifting), "origin" (all |omega_h|, |mu_h| < tol) or "other". omega, mu: (n, H) or (H,).
    """
    task = _check_task(task)
    tol = check_positive("tol", tol)
    om, mu = _pair(np.atleast_2d(omega), np.atleast_2d(mu))
    o = single_head_optimum(task)
    sgn = np.sign(om[:, :1])
    single = np.all(np.abs(om * sgn - o.omega) < tol, axis=1) & (np.abs(mu.sum(1) * sgn[:, 0] - o.mu) < tol)
    u = np.sum(om * mu, axis=1)
    valley = (om.max(1) > 0) & (om.min(1) < 0) & (np.abs(u - eta_star(task)) < 0.05) & (np.abs(mu.sum(1)) < 0.05)
    origin = np.all(np.abs(om) < tol, axis=1) & np.all(np.abs(mu) < tol, axis=1)
    return np.where(single, "single_head", np.where(valley, "solution_manifold", np.where(origin, "origin", "other")))


class SingleHeadOptimum(NamedTuple):
    """Optimum of the single-head approximate loss F_1 (docs/models/icl_regression.md §7.3, Eq. (4.12))."""

    omega: Annotated[float, _REALS]
    mu: Annotated[float, _REALS]
    F: float


def single_head_optimum(task: ICLRegressionTask) -> SingleHeadOptimum:
    """F_1 optimum, docs/models/icl_regression.md §7.3: omega = 1/sqrt(d), mu = sqrt(d)/(1 + e(1+s2)d/L), F_min = 1 + s2
    - 1/(1 + e(1+s2)d/L).
    """
    task = _check_task(task)
    q = 1.0 + np.e * task.D / task.L
    return SingleHeadOptimum(omega=1.0 / np.sqrt(task.d), mu=np.sqrt(task.d) / q, F=1.0 + task.sigma2 - 1.0 / q)


def bayes_risk_asymptotic(
    xi: Annotated[Any, _V.Range(array=True, gt=0)], sigma2: Annotated[Any, _V.Range(array=True, ge=0)]
) -> np.ndarray:
    """Asymptotic Bayes (ridge, lambda = d sigma^2) risk for d/L -> xi: docs/models/icl_regression.md §7.4 (Eqs.
    (D.34)-(D.36)).

    R = (1/2)[sigma^2 + (xi - 1)/xi + sqrt(4 sigma^2 + (sigma^2 + (1 - xi)/xi)^2)] (total risk incl. sigma^2).

    Parameters
    ----------
    xi : float or array > 0
    sigma2 : float or array >= 0
    """
    xi = np.asarray(xi, dtype=np.float64)
    s2 = np.asarray(sigma2, dtype=np.float64)
    if np.any(~np.isfinite(xi)) or np.any(xi <= 0):
        raise ValueError(f"xi must be finite and > 0; got {xi}")
    if np.any(~np.isfinite(s2)) or np.any(s2 < 0):
        raise ValueError(f"sigma2 must be finite and >= 0; got {s2}")
    return 0.5 * (s2 + (xi - 1.0) / xi + np.sqrt(4.0 * s2 + (s2 + (1.0 - xi) / xi) ** 2))


def linear_attention_risk(
    task: ICLRegressionTask,
    eta: Annotated[Any, _REALS],
    L_test: Annotated[Any, _V.Range(array=True, integer=True, ge=1)],
) -> np.ndarray:
    """Risk of single-head linear attention trained at L = task.L, tested at L': R_GD(eta L'/L; d, L', s2),
    docs/models/icl_regression.md §7.6.

    Parameters
    ----------
    L_test : int or int array >= 1
    """
    task = _check_task(task)
    L_test = np.asarray(L_test)
    if np.any(L_test < 1) or not np.all(np.equal(np.mod(L_test, 1), 0)):
        raise ValueError(f"L_test must be integers >= 1; got {L_test}")
    eta = np.asarray(eta, dtype=np.float64)
    d, s2 = task.d, task.sigma2
    Lp = L_test.astype(np.float64)
    e = eta * Lp / task.L
    return 1.0 + s2 - 2.0 * e + e**2 * (1.0 + (d + 1.0 + d * s2) / Lp)


class Prompts(NamedTuple):
    """A batch of prompts (docs/models/icl_regression.md §1): X (N, L, d), y (N, L), xq (N, d), yq (N,), beta (N, d)."""

    X: Annotated[np.ndarray, _V.Array(ndim=3)]
    y: Annotated[np.ndarray, _V.Array(ndim=2)]
    xq: Annotated[np.ndarray, _V.Array(ndim=2)]
    yq: Annotated[np.ndarray, _V.Array(ndim=1)]
    beta: Annotated[np.ndarray, _V.Array(ndim=2)]


def _consistent_prompts(new):
    """``Prompts.__new__`` that also checks the fields against each other (each field's own checks come first)."""

    @functools.wraps(new)
    def checked(_cls, X, y, xq, yq, beta):
        shapes = {k: np.shape(v) for k, v in zip(("X", "y", "xq", "yq", "beta"), (X, y, xq, yq, beta))}
        N, L, d = shapes["X"] if len(shapes["X"]) == 3 else (None, None, None)
        want = {"X": (N, L, d), "y": (N, L), "xq": (N, d), "yq": (N,), "beta": (N, d)}
        if N is None or any(shapes[k] != want[k] for k in want):
            got = ", ".join(f"{k} {shapes[k]}" for k in want)
            raise ValueError(
                "X, y, xq, yq and beta must have shapes (N, L, d), (N, L), (N, d), (N,) and (N, d) with one N "
                f"(prompts), L (context length) and d (dimension); got {got}"
            )
        return new(_cls, X, y, xq, yq, beta)

    return staticmethod(checked)


Prompts.__new__ = _consistent_prompts(Prompts.__dict__["__new__"].__func__)


def sample_prompts(
    task: ICLRegressionTask,
    n: Annotated[int, _V.Range(integer=True, ge=1)],
    rng: Annotated[Any, _V.seed_check] = None,
    *,
    Sigma: Annotated[Any, _V.Array(ndim=2)] = None,
) -> Prompts:
    """Draw ``n`` independent prompts of the data model of docs/models/icl_regression.md §1 (covariates N(0, Sigma),
    default I, docs/models/icl_regression.md §8.1).

    Draw order (reproducibility): X, xq, beta, context noise, query noise.

    Parameters
    ----------
    n : int >= 1
    """
    task = _check_task(task)
    n = check_int("n", n, min_value=1)
    rng = as_generator(rng)
    d, L = task.d, task.L
    check_allocation("n", (n, L + 3, d), what="the prompts X (n, L, d), xq, beta and y")
    X = rng.standard_normal((n, L, d))
    xq = rng.standard_normal((n, d))
    if Sigma is not None:
        C = np.linalg.cholesky(_check_cov(Sigma, d))
        X = X @ C.T
        xq = xq @ C.T
    beta = rng.standard_normal((n, d)) / np.sqrt(d)
    sd = np.sqrt(task.sigma2)
    y = np.einsum("nld,nd->nl", X, beta) + sd * rng.standard_normal((n, L))
    yq = np.einsum("nd,nd->n", xq, beta) + sd * rng.standard_normal(n)
    return Prompts(X=X, y=y, xq=xq, yq=yq, beta=beta)


def predict_attention(
    X: Annotated[Any, _V.Array(ndim=3)],
    y: Annotated[Any, _V.Array(ndim=2)],
    xq: Annotated[Any, _V.Array(ndim=2)],
    omega: Annotated[Any, _REALS],
    mu: Annotated[Any, _REALS],
) -> np.ndarray:
    """Reduced H-head softmax-attention predictor (3.2): yhat = sum_h mu_h sum_i y_i softmax_i(omega_h x_i^T x_q).

    docs/models/icl_regression.md §3, Eq. (3.2); with H = 1 it is the Nadaraya-Watson predictor of
    docs/models/icl_regression.md §7.3 (Eq. (4.12)) and on S_gamma the two-kernel predictor (4.9). Shapes: X (N, L, d),
    y (N, L), xq (N, d), omega/mu (H,) -> (N,).
    """
    omega, mu = _pair(omega, mu)
    if omega.ndim != 1:
        raise ValueError(f"omega and mu must have shape (H,); got {omega.shape}")
    proj = np.einsum("nld,nd->nl", X, xq)
    logits = omega[:, None, None] * proj[None]  # (H, N, L)
    p = scipy.special.softmax(logits, axis=-1)
    return np.einsum("h,hnl,nl->n", mu, p, y)


def softmax_weight_norms(
    d: Annotated[int, _V.Range(integer=True, ge=1)],
    L: Annotated[int, _V.Range(array=True, integer=True, ge=1)],
    omega: Annotated[float, _REALS],
    n: Annotated[int, _V.Range(integer=True, ge=1)],
    rng: Annotated[Any, _V.seed_check] = None,
) -> np.ndarray:
    """Euclidean norms of softmax_i(omega x_i^T x_q), i = 1..L, x's iid N(0, I_d): docs/models/icl_regression.md §9
    (Fig. 20).

    Concentrates near 1/sqrt(L) for small omega (the large-L concentration behind Proposition 4.1). Returns (n,).

    Parameters
    ----------
    d : int >= 1
    L : int or int array >= 1
    n : int >= 1
    """
    d = check_int("d", d, min_value=1)
    L = check_int("L", L, min_value=1)
    n = check_int("n", n, min_value=1)
    omega = float(check_finite_array("omega", np.ravel(omega), shape=(1,))[0])
    rng = as_generator(rng)
    X = rng.standard_normal((n, L + 1, d))
    scores = np.einsum("nld,nd->nl", X[:, :L], X[:, L])
    return np.linalg.norm(scipy.special.softmax(omega * scores, axis=1), axis=1)


def predict_manifold(
    X: Annotated[Any, _V.Array(ndim=3)],
    y: Annotated[Any, _V.Array(ndim=2)],
    xq: Annotated[Any, _V.Array(ndim=2)],
    gamma: Annotated[float, _check_nonzero],
    mu_gamma: float,
) -> np.ndarray:
    """Two-kernel predictor on S_gamma, Eq. (4.9): mu(gamma) sum_i y_i [sm_i(gamma x^T xq) - sm_i(-gamma x^T xq)].

    docs/models/icl_regression.md §7.1.
    """
    return predict_attention(X, y, xq, [gamma, -gamma], [mu_gamma, -mu_gamma])


def predict_nadaraya_watson(
    X: Annotated[Any, _V.Array(ndim=3)],
    y: Annotated[Any, _V.Array(ndim=2)],
    xq: Annotated[Any, _V.Array(ndim=2)],
    omega: Annotated[float, _REALS],
    mu: Annotated[float, _REALS],
) -> np.ndarray:
    """Single-head (Nadaraya-Watson) predictor mu sum_i y_i softmax_i(omega x_i^T x_q):
    docs/models/icl_regression.md §7.3, Eq. (4.12).
    """
    return predict_attention(X, y, xq, [omega], [mu])


def predict_gd(
    X: Annotated[Any, _V.Array(ndim=3)],
    y: Annotated[Any, _V.Array(ndim=2)],
    xq: Annotated[Any, _V.Array(ndim=2)],
    eta: Annotated[float, _REALS],
) -> np.ndarray:
    """One-step GD predictor (eta/L) sum_i y_i x_i^T x_q: docs/models/icl_regression.md §7.2."""
    L = X.shape[1]
    return eta / L * np.einsum("nd,nd->n", np.einsum("nl,nld->nd", y, X), xq)


def predict_dgd(
    X: Annotated[Any, _V.Array(ndim=3)],
    y: Annotated[Any, _V.Array(ndim=2)],
    xq: Annotated[Any, _V.Array(ndim=2)],
    eta: Annotated[float, _REALS],
) -> np.ndarray:
    """Debiased GD predictor (eta/L) sum_i y_i (x_i - xbar)^T x_q: docs/models/icl_regression.md §7.2, Eq. (4.11)
    (first-order form (4.10)).
    """
    L = X.shape[1]
    Xc = X - X.mean(axis=1, keepdims=True)
    return eta / L * np.einsum("nd,nd->n", np.einsum("nl,nld->nd", y, Xc), xq)


def predict_ridge(
    X: Annotated[Any, _V.Array(ndim=3)],
    y: Annotated[Any, _V.Array(ndim=2)],
    xq: Annotated[Any, _V.Array(ndim=2)],
    lam_ridge: Annotated[float, _V.Range(ge=0)],
) -> np.ndarray:
    """Ridge predictor x_q^T (X^T X + lambda I)^{-1} X^T y (Bayes-optimal for lambda = d sigma^2):
    docs/models/icl_regression.md §7.4.

    Parameters
    ----------
    lam_ridge : float >= 0
    """
    d = X.shape[2]
    A = np.einsum("nld,nle->nde", X, X) + lam_ridge * np.eye(d)
    b = np.einsum("nld,nl->nd", X, y)
    beta_hat = np.linalg.solve(A, b[..., None])[..., 0]
    return np.einsum("nd,nd->n", beta_hat, xq)


def predict_preconditioned_gd(
    X: Annotated[Any, _V.Array(ndim=3)],
    y: Annotated[Any, _V.Array(ndim=2)],
    xq: Annotated[Any, _V.Array(ndim=2)],
    G: Annotated[Any, _V.Array(ndim=2)],
) -> np.ndarray:
    """Preconditioned GD predictor x_q^T G (1/L) sum_i y_i x_i: docs/models/icl_regression.md §8.1 (Lemma E.4, Eq.
    (5.6)).
    """
    L = X.shape[1]
    v = np.einsum("nl,nle->ne", y, X) / L  # (1/L) sum_i y_i x_i
    return np.einsum("nd,de,ne->n", xq, np.asarray(G, dtype=np.float64), v, optimize=True)


def risk_mc(
    task: ICLRegressionTask,
    predict: Callable,
    n_prompts: Annotated[int, _V.Range(integer=True, ge=2)],
    rng: Annotated[Any, _V.seed_check] = None,
    *,
    chunk: Annotated[int, _V.Range(integer=True, ge=1)] = 50000,
    Sigma: Annotated[Any, _V.Array(ndim=2)] = None,
):
    """Monte Carlo risk E[(y_q - yhat)^2] of any batched predictor ``predict(X, y, xq) -> (N,)``:
    docs/models/icl_regression.md §4.1 form.

    Uses the variance-reduced form sigma^2 + E[(beta^T x_q - yhat)^2] (query noise integrated out,
    docs/models/icl_regression.md §4.1). Returns (mean, se).

    Parameters
    ----------
    n_prompts : int >= 2
    chunk : int >= 1
    """
    task = _check_task(task)
    n_prompts = check_int("n_prompts", n_prompts, min_value=2)
    rng = as_generator(rng)
    vals = []
    done = 0
    while done < n_prompts:
        nb = min(chunk, n_prompts - done)
        P = sample_prompts(task, nb, rng, Sigma=Sigma)
        target = np.einsum("nd,nd->n", P.beta, P.xq)
        vals.append(task.sigma2 + (target - predict(P.X, P.y, P.xq)) ** 2)
        done += nb
    v = np.concatenate(vals)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size))


def ridge_risk_mc(
    task: ICLRegressionTask,
    n_prompts: Annotated[int, _V.Range(integer=True, ge=2)],
    rng: Annotated[Any, _V.seed_check] = None,
    *,
    lam_ridge: Annotated[float | None, _V.Range(ge=0)] = None,
    chunk: Annotated[int, _V.Range(integer=True, ge=1)] = 50000,
):
    """Finite-L Monte Carlo risk of ridge (default lambda = d sigma^2, the Bayes predictor):
    docs/models/icl_regression.md §7.4.

    Uses R = sigma^2 + E|beta_hat - beta|^2 (x_q isotropic and independent of the context). Returns (mean, se).

    Parameters
    ----------
    n_prompts : int >= 2
    lam_ridge : float >= 0
    chunk : int >= 1
    """
    task = _check_task(task)
    lam = task.d * task.sigma2 if lam_ridge is None else check_nonneg("lam_ridge", lam_ridge)
    n_prompts = check_int("n_prompts", n_prompts, min_value=2)
    rng = as_generator(rng)
    d = task.d
    vals = []
    done = 0
    while done < n_prompts:
        nb = min(chunk, n_prompts - done)
        P = sample_prompts(task, nb, rng)
        A = np.einsum("nld,nle->nde", P.X, P.X) + lam * np.eye(d)
        b = np.einsum("nld,nl->nd", P.X, P.y)
        beta_hat = np.linalg.solve(A, b[..., None])[..., 0]
        vals.append(task.sigma2 + np.sum((beta_hat - P.beta) ** 2, axis=1))
        done += nb
    v = np.concatenate(vals)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size))


# ----------------------------------------------------------------------------------------------------------------------
# docs/models/icl_regression.md §8.1: non-isotropic covariates
# ----------------------------------------------------------------------------------------------------------------------
def _check_cov(Sigma, d: int) -> np.ndarray:
    Sigma = check_finite_array("Sigma", Sigma, shape=(d, d))
    if not np.allclose(Sigma, Sigma.T, rtol=0, atol=1e-12 * max(1.0, float(np.abs(Sigma).max()))):
        raise ValueError("Sigma must be symmetric")
    if np.linalg.eigvalsh(Sigma).min() <= 0:
        raise ValueError("Sigma must be positive definite")
    return Sigma


def kms_covariance(d: Annotated[int, _V.Range(integer=True, ge=1)], rho: float) -> np.ndarray:
    """Kac-Murdock-Szego covariance Sigma_ij = rho^|i-j|: docs/models/icl_regression.md §8.1 (code default rho =
    0.5).

    Parameters
    ----------
    d : int >= 1
    """
    d = check_int("d", d, min_value=1)
    if not (np.isfinite(rho) and -1.0 < rho < 1.0):
        raise ValueError(f"rho must lie in (-1, 1); got {rho!r}")
    idx = np.arange(d)
    return float(rho) ** np.abs(idx[:, None] - idx[None, :])


def optimal_preconditioner(task: ICLRegressionTask, Sigma: Annotated[Any, _V.Array(ndim=2)]) -> np.ndarray:
    """G* = ((1 + 1/L) Sigma + ((tr Sigma + d sigma^2)/L) I_d)^{-1}: docs/models/icl_regression.md §8.1 (Lemma E.4, Eq.
    (5.6)).
    """
    task = _check_task(task)
    Sigma = _check_cov(Sigma, task.d)
    L = task.L
    A = (1.0 + 1.0 / L) * Sigma + (np.trace(Sigma) + task.d * task.sigma2) / L * np.eye(task.d)
    return np.linalg.inv(A)


def preconditioned_gd_risk(
    task: ICLRegressionTask, Sigma: Annotated[Any, _V.Array(ndim=2)], G: Annotated[Any, _V.Array(ndim=2)]
) -> float:
    """Exact risk R(G) of x_q^T G (1/L) sum_i y_i x_i under x ~ N(0, Sigma): docs/models/icl_regression.md §8.1 (Lemma
    E.4).

    R(G) = s2 + (1/d)[tr S - 2 tr(G S^2) + (1 + 1/L) tr(A S^2) + tr(A S) tr(S)/L] + (s2/L) tr(A S), A = G^T S G.
    """
    task = _check_task(task)
    S = _check_cov(Sigma, task.d)
    G = check_finite_array("G", G, shape=(task.d, task.d))
    d, L, s2 = task.d, task.L, task.sigma2
    A = G.T @ S @ G
    S2 = S @ S
    return float(
        s2
        + (
            np.trace(S)
            - 2.0 * np.trace(G @ S2)
            + (1.0 + 1.0 / L) * np.trace(A @ S2)
            + np.trace(A @ S) * np.trace(S) / L
        )
        / d
        + s2 / L * np.trace(A @ S)
    )


def optimal_preconditioned_risk(task: ICLRegressionTask, Sigma: Annotated[Any, _V.Array(ndim=2)]) -> float:
    """R(G*) = sigma^2 + (tr Sigma - tr(Sigma^2 G*))/d: docs/models/icl_regression.md §8.1 (Lemma E.4)."""
    task = _check_task(task)
    S = _check_cov(Sigma, task.d)
    G = optimal_preconditioner(task, S)
    return float(task.sigma2 + (np.trace(S) - np.trace(S @ S @ G)) / task.d)


def theorem_predictions(task: ICLRegressionTask) -> dict[str, float]:
    """The paper's named predictions for ``task``, assembled from the closed forms.

    Keys (each a float):

    * ``eta_star``: eta* = L / (L + d (1 + sigma^2)), the optimality condition mu^T omega = eta* of the trained
      heads, docs/models/icl_regression.md §4.4, Eq. (4.3).
    * ``loss_infimum``: inf F = 1 + sigma^2 - eta*, the infimum of the approximate loss (4.1),
      docs/models/icl_regression.md §4.4.
    * ``gd_optimal_eta``, ``gd_optimal_risk``: step and risk of the best one-step GD predictor,
      docs/models/icl_regression.md §7.2, Eq. (4.11).
    * ``dgd_optimal_risk``: risk of the best debiased GD predictor (its step is eta*),
      docs/models/icl_regression.md §7.2.
    * ``single_head_F``: F at the single-head optimum, docs/models/icl_regression.md §7.3.
    """
    task = _check_task(task)
    eta_gd = gd_optimal_eta(task)
    return {
        "eta_star": eta_star(task),
        "loss_infimum": loss_infimum(task),
        "gd_optimal_eta": eta_gd,
        "gd_optimal_risk": float(gd_risk(task, eta_gd)),
        "dgd_optimal_risk": float(dgd_risk(task, eta_star(task))),
        "single_head_F": float(single_head_optimum(task).F),
    }


# ----------------------------------------------------------------------------------------------------------------
# argument checks of every public function and class (dynamics.validation): each parameter's rule is declared at its
# definition (a class annotation, or a rule in its ``Annotated`` metadata; the shared ones below), then each
# function's own checks

from dynamics import SaveAt as _SaveAt  # noqa: E402
from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)


def _check_nonzero(name: str, value) -> None:
    """A finite real (or array) without zeros: the solution manifold has a pole at gamma = 0 (Eq. (4.6))."""
    _REALS(name, value)
    if np.any(np.asarray(value) == 0):
        raise ValueError(
            f"{name} must be nonzero (mu(gamma) has a pole at gamma = 0, "
            f"docs/models/icl_regression.md §5.4); got {value!r}"
        )


_REALS = _V.Range(array=True)
_V.validate_module(globals())
