"""Single-location regression with the erf-attention predictor: closed-form risks, exact PGD dynamics, fixed points.

Implements docs/models/single_location.md (Marion, Berthier, Biau, Boyer, ICLR 2025). The task: L tokens in R^d, one of
them (position J0) drawn from N(sqrt(d/2) k*, gamma^2 I), the others from N(0, I); Y = x_J0 . v* + xi. The predictor
T_lambda(X) = sum_l erf(lambda x_l.k) (x_l.v) with (k, v) on the unit sphere. Its risk depends on (k, v) only through
five scalars (docs/models/single_location.md §4), and projected gradient descent on the population risk is an exact map
of those five scalars (docs/models/single_location.md §6.4) whose cost does not depend on d.

Symbol table
------------
Sections (§) in the last column are those of docs/models/single_location.md.

================== ============== ================================================== ============ =============
code               paper symbol   meaning                                            shape        where defined
================== ============== ================================================== ============ =============
d, L               d, L           token dimension, tokens per sequence               int          §1
gamma              gamma          std of the informative token around its mean       float        §1
noise (eps)        eps            std of the output noise xi                         float        §1
lam                lambda         inverse temperature of the erf predictor           float/array  §2.3
lam_n              lambda_n       lambda used by update n                            float        §0.3
alpha              alpha          PGD step size                                      float        §6.1
k_star, v_star     k*, v*         oracle key / value directions (orthonormal)        (d,)         §1
k, v               k, v           trained directions (unit)                          (d,)         §2.3
kappa              kappa          k.k*                                               float        §4.1
nu                 nu             v.v*                                               float        §4.1
theta              theta          v.k*                                               float        §4.1
eta                eta            k.v*                                               float        §4.1
rho                rho            k.v                                                float        §4.1
s                  s              sqrt(d/2)                                          float        §3
g, q, r            g, q, r        lambda gamma, sqrt(1+2g^2), sqrt(1+4g^2)           float        §3
c                  c              lambda s / q                                       float        §5.1
risk               R_lambda       true mean squared error, eps^2 included            float        §4.2
excess_risk        R - eps^2      "excess risk" of the paper's plots                 float        §0.1
risk_M             R_M            R restricted to M                                  float        §5.1
dist_M             dist_M         sqrt(theta^2 + eta^2 + rho^2)                      float        §5.1
theta_S            theta_S        theta coordinate of the spurious point S           float        §7.4
================== ============== ================================================== ============ =============

Time (docs/models/single_location.md §0.3): the time axis of every trajectory here is the PGD step, time = step ("step
n" is the state after n updates). The row saved at step n holds iterate n and lambda_n, and its ``risk`` is that of
iterate n at lambda_n. ``SingleLocationTask.time_of_step``/``step_of_time`` implement this convention.

Notes
-----
Departures from the authors' code (docs/models/single_location.md §9): everything is float64; ``risk`` returns the true
MSE with eps^2 and (L-1) zeta0(lambda) (the authors' coded risk omits both, docs/models/single_location.md §9.2);
logging pairs iterate n with lambda_n (docs/models/single_location.md §0.3, not the authors'
docs/models/single_location.md §9.3 pairing).
"""

from __future__ import annotations

from typing import Annotated, Any
import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import erf as _erf

import dynamics
from closedform import _single_location_kernels as _k
from closedform.special import phi as _phi
from closedform.special import zeta as _zeta_u
from dynamics.convergence import DEFAULT_CONVERGENCE_TOL, block_samples, check_run, step_norm_trend, tail_blocks
from dynamics.random import as_generator
from dynamics.validation import (
    check_allocation,
    check_choice,
    check_finite_array,
    check_int,
    check_nonneg,
    check_positive,
)

REFERENCE = {
    "title": "Attention layers provably solve single-location regression",
    "authors": "Pierre Marion, Raphael Berthier, Gerard Biau, Claire Boyer",
    "venue": "ICLR 2025",
    "arxiv": "2410.01537",
    "bibtex_key": "marion2025attention",
    "spec": "docs/models/single_location.md",
}

__all__ = [
    "REFERENCE",
    "theorem_predictions",
    "TIME_UNIT",
    "FixedPoint",
    "FIXED_POINT_KINDS",
    "LamSchedule",
    "LocationTask",
    "SingleLocationTask",
    "SpuriousPoint",
    "Basins",
    "basins",
    "bayes_risk_lower_bound",
    "classify",
    "critical_point_search",
    "distance_to_manifold",
    "excess_risk",
    "fixed_points",
    "lam_schedule",
    "linear_risk",
    "manifold_risk",
    "manifold_vector_field",
    "oracle_risk",
    "map",
    "full_pgd",
    "predict_erf",
    "random_oracle_directions",
    "risk",
    "risk_partials",
    "run_to_fixed_point",
    "sample_data",
    "sample_initial_state",
    "spurious_point",
    "vectors_from_state",
]

TIME_UNIT = "step"
"""Time axis of single-location trajectories: time = PGD step (docs/models/single_location.md §0.3)."""

# Threshold of ``converged`` in map and full_pgd with a constant lambda (max-norm of the last update of the scalars).
CONVERGENCE_TOL = DEFAULT_CONVERGENCE_TOL

# Tolerances of the state checks: inner products of float64 unit vectors are exact to a few ulps, and PGD states
# accumulate rounding of order 1e-15 per 1e5 steps; 1e-12 (|scalar| <= 1) and 1e-10 (smallest Gram eigenvalue)
# accept such states while rejecting any genuinely infeasible input (whose violation is O(1e-3) or larger).
_UNIT_TOL = 1e-12
_PSD_TOL = 1e-10
_STATE_NAMES = ("kappa", "nu", "theta", "eta", "rho")


class LocationTask:
    """Fields' validation and derived scalars shared by :class:`SingleLocationTask` and its multiple-location extension
    (``empirical.models.single_location_transformer.MultiLocationTask``, docs/models/single_location.md §8.8): ``d``,
    ``L``, ``gamma`` and
    ``noise`` with the same meaning, and the same time axis. Not itself a task (no ``isinstance`` dispatch on it).
    """

    def _check_fields(self, *, d_min: int, L_min: int) -> None:
        """Validate and normalise ``d >= d_min``, ``L >= L_min``, ``gamma > 0``, ``noise >= 0`` (frozen dataclass)."""
        object.__setattr__(self, "d", check_int("d", self.d, min_value=d_min))
        object.__setattr__(self, "L", check_int("L", self.L, min_value=L_min))
        object.__setattr__(self, "gamma", check_positive("gamma", self.gamma))
        object.__setattr__(self, "noise", check_nonneg("noise", self.noise))

    @property
    def eps(self) -> float:
        """Noise std eps (docs/models/single_location.md §1), the same as ``noise``."""
        return self.noise

    @property
    def s(self) -> float:
        """s = sqrt(d/2), the norm of an informative token's mean (docs/models/single_location.md §3)."""
        return math.sqrt(self.d / 2.0)

    @property
    def dim(self) -> int:
        """Cross-paper name of d."""
        return self.d

    @property
    def seq_len(self) -> int:
        """Cross-paper name of L."""
        return self.L

    def time_of_step(self, step):
        """Time of a PGD step: time = step (docs/models/single_location.md §0.3; unit ``TIME_UNIT = "step"``)."""
        return np.asarray(step, dtype=np.float64)[()]

    def step_of_time(self, time):
        """PGD step of a time on the trajectory axis (inverse of ``time_of_step``, docs/models/single_location.md §0.3),
        rounded to int.
        """
        return np.rint(np.asarray(time, dtype=np.float64)).astype(np.int64)[()]


@dataclass(frozen=True, kw_only=True)
class SingleLocationTask(LocationTask):
    """The single-location regression task (docs/models/single_location.md §1, data model; paper Sec. 2).

    Parameters
    ----------
    d : int >= 2
        Token dimension (>= 4 for the five-scalar map and the initial-state laws,
        docs/models/single_location.md §6.4-§6.5).
    L : int >= 1
        Number of tokens per sequence.
    gamma : float > 0
        Std of the informative token around its mean sqrt(d/2) k* (default sqrt(1/2): equal expected norms).
    noise : float >= 0
        Std eps of the output noise xi (E[xi^2] = eps^2).
    """

    d: Annotated[int, _V.Range(integer=True, ge=2)]
    L: Annotated[int, _V.Range(integer=True, ge=1)]
    gamma: Annotated[float, _V.Range(gt=0)] = math.sqrt(0.5)
    noise: Annotated[float, _V.Range(ge=0)] = 0.0

    def __post_init__(self):
        self._check_fields(d_min=2, L_min=1)


@dataclass(frozen=True, kw_only=True)
class LamSchedule:
    """Decreasing temperature schedule lambda_n = lam0 / (1 + decay n), n the 0-based update index
    (docs/models/single_location.md §6.1).

    Parameters
    ----------
    lam0 : float > 0
    decay : float >= 0
    """

    lam0: Annotated[float, _V.Range(gt=0)]
    decay: Annotated[float, _V.Range(ge=0)] = 1e-4

    def __post_init__(self):
        object.__setattr__(self, "lam0", check_positive("lam0", self.lam0))
        object.__setattr__(self, "decay", check_nonneg("decay", self.decay))

    def __call__(self, n):
        """lambda_n for update index n (docs/models/single_location.md §0.3, §6.1)."""
        return self.lam0 / (1.0 + self.decay * np.asarray(n, dtype=np.float64))[()]


def lam_schedule(lam0: Annotated[float, _V.Range(gt=0)], decay: Annotated[float, _V.Range(ge=0)] = 1e-4) -> LamSchedule:
    """The schedule lambda_n = lam0 / (1 + decay n) of docs/models/single_location.md §6.1, §9.6 (Figs. 4(a) and 5 use
    decay = 1e-4).

    Parameters
    ----------
    lam0 : float > 0
    decay : float >= 0
    """
    return LamSchedule(lam0=lam0, decay=decay)


# ----------------------------------------------------------------------------------------------------------------
# input handling


def _gram(kappa, nu, theta, eta, rho):
    """Gram matrices (..., 4, 4) of (k, v, k*, v*) (docs/models/single_location.md §4.1)."""
    one = np.ones_like(kappa)
    zero = np.zeros_like(kappa)
    rows = [[one, rho, kappa, eta], [rho, one, theta, nu], [kappa, theta, one, zero], [eta, nu, zero, one]]
    return np.stack([np.stack(r, axis=-1) for r in rows], axis=-2)


def _check_state(kappa, nu, theta, eta, rho, where="state"):
    """Raise ValueError unless every scalar is in [-1, 1] and the Gram matrix is PSD
    (docs/models/single_location.md §4.1).
    """
    for name, x in zip(_STATE_NAMES, (kappa, nu, theta, eta, rho)):
        if x.size and np.max(np.abs(x)) > 1.0 + _UNIT_TOL:
            bad = float(np.ravel(x)[np.argmax(np.abs(np.ravel(x)))])
            raise ValueError(f"{where}: {name} must lie in [-1, 1] (an inner product of unit vectors); got {bad!r}")
    if kappa.size:
        w = np.linalg.eigvalsh(_gram(kappa, nu, theta, eta, rho))[..., 0]
        if np.min(w) < -_PSD_TOL:
            i = int(np.argmin(np.ravel(w)))
            vals = ", ".join(
                f"{n}={float(np.ravel(x)[i]):.6g}" for n, x in zip(_STATE_NAMES, (kappa, nu, theta, eta, rho))
            )
            raise ValueError(
                f"{where}: the Gram matrix of (k, v, k*, v*) must be positive semidefinite "
                f"(docs/models/single_location.md §4.1); "
                f"smallest eigenvalue {float(np.ravel(w)[i]):.3g} at ({vals})"
            )


def _broadcast(lam, *state, check=True):
    """Broadcast (lam, kappa, nu, theta, eta, rho) to one shape; validate; return shape and flat float64 arrays."""
    names = ("lam",) + _STATE_NAMES[: len(state)]
    arrs = []
    for name, x in zip(names, (lam,) + state):
        a = np.asarray(x, dtype=np.float64)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be finite; got non-finite values")
        arrs.append(a)
    arrs = np.broadcast_arrays(*arrs)
    shape = arrs[0].shape
    flat = [np.ascontiguousarray(a.ravel()) for a in arrs]
    if flat[0].size and np.min(flat[0]) <= 0:
        raise ValueError(f"lam must be > 0 (inverse temperature); got {float(np.min(flat[0]))!r}")
    if check and len(state) == 5:
        _check_state(*flat[1:])
    elif check:
        for name, x in zip(names[1:], flat[1:]):
            if x.size and np.max(np.abs(x)) > 1.0 + _UNIT_TOL:
                raise ValueError(f"{name} must lie in [-1, 1]; got {float(np.max(np.abs(x)))!r}")
    return shape, flat


_LAM_SCALE = 1e100
"""lambda, lambda s and lambda gamma must lie in [1/_LAM_SCALE, _LAM_SCALE]: the closed forms square them (q^2 =
1 + 2 (lambda gamma)^2; zeta(0, g) ~ (4/pi) g^2 as g -> 0), and squares leave float64's normal range (about 2e-308
to 1.8e308) past 1e+-154. Inside the range the risks have reached their lambda -> 0 and lambda -> infinity limits to
the last digit (measured: the risk at lambda = 1e100 and 1e80, and at 1e-100 and 1e-80, agree exactly for d from 4
to 2^31 - 1 and gamma from 1e-3 to 1e3)."""


def _check_lam_range(task, lam) -> None:
    """Raise ValueError naming lam and the valid range unless lam (already finite and > 0) is within it."""
    lam = np.asarray(lam)
    lo = 1.0 / (_LAM_SCALE * min(1.0, task.s, task.gamma))
    hi = _LAM_SCALE / max(1.0, task.s, task.gamma)
    if lam.size and (np.min(lam) < lo or np.max(lam) > hi):
        bad = float(np.min(lam)) if np.min(lam) < lo else float(np.max(lam))
        raise ValueError(
            f"lam must lie in [{lo:.3g}, {hi:.3g}] for this task (lambda, lambda s and lambda gamma within "
            f"[1e-100, 1e100], where the risks have long reached their limits; beyond, their squares leave float64's "
            f"range); got {bad!r}"
        )


def _task(task) -> SingleLocationTask:
    if not isinstance(task, SingleLocationTask):
        raise ValueError(f"task must be a SingleLocationTask; got {type(task).__name__}")  # noqa: TRY004 (project rule)
    return task


# ----------------------------------------------------------------------------------------------------------------
# risks


def risk(
    task: SingleLocationTask,
    lam: Annotated[Any, _check_lam],
    kappa: Annotated[Any, _REALS],
    nu: Annotated[Any, _REALS],
    theta: Annotated[Any, _REALS] = 0.0,
    eta: Annotated[Any, _REALS] = 0.0,
    rho: Annotated[Any, _REALS] = 0.0,
):
    """True mean squared error R_lambda = E[(T_lambda(X) - Y)^2] as a function of the five scalars.

    Implements docs/models/single_location.md §4.2 ("in full"; paper Theorem 1 and Appendix C), including eps^2 and the
    noise-token constant (L-1) zeta(0, lambda) that the authors' coded risk omits (docs/models/single_location.md §9.2).

    Parameters
    ----------
    task : SingleLocationTask
    lam : array_like float64 > 0
        Inverse temperature lambda, with lambda, lambda s and lambda gamma in [1e-100, 1e100] (the risks' limits
        are reached well inside; beyond, their squares leave float64's range). The other closed forms of lambda
        take the same range.
    kappa, nu, theta, eta, rho : array_like float64
        k.k*, v.v*, v.k*, k.v*, k.v (docs/models/single_location.md §4.1), each in [-1, 1] (not checked); their Gram
        matrix must be positive semidefinite.

    Returns
    -------
    float64 array of the broadcast shape (numpy scalar for scalar inputs).
    """
    task = _task(task)
    shape, (lam, *st) = _broadcast(lam, kappa, nu, theta, eta, rho)
    _check_lam_range(task, lam)
    out = np.empty(lam.shape[0], dtype=np.float64)
    _k.risk_array(*st, lam, task.s, task.gamma, float(task.L), task.eps, out)
    return out.reshape(shape)[()]


def excess_risk(
    task: SingleLocationTask,
    lam: Annotated[Any, _check_lam],
    kappa: Annotated[Any, _REALS],
    nu: Annotated[Any, _REALS],
    theta: Annotated[Any, _REALS] = 0.0,
    eta: Annotated[Any, _REALS] = 0.0,
    rho: Annotated[Any, _REALS] = 0.0,
):
    """Excess risk R - eps^2 (the quantity of the paper's risk plots; docs/models/single_location.md §0.1 "Words",
    docs/models/single_location.md §4.2, §9.2).

    Parameters
    ----------
    lam : float or array > 0
    """
    return risk(task, lam, kappa, nu, theta, eta, rho) - _task(task).eps ** 2


def risk_partials(
    task: SingleLocationTask,
    lam: Annotated[Any, _check_lam],
    kappa: Annotated[Any, _REALS],
    nu: Annotated[Any, _REALS],
    theta: Annotated[Any, _REALS] = 0.0,
    eta: Annotated[Any, _REALS] = 0.0,
    rho: Annotated[Any, _REALS] = 0.0,
):
    """Partial derivatives (dR/dkappa, dR/dnu, dR/dtheta, dR/deta, dR/drho) of the risk.

    Implements docs/models/single_location.md §4.3 (paper Appendix C; on M the last three vanish, paper Lemma 14).
    Arguments as in :func:`risk`; returns a float64 array of shape broadcast_shape + (5,).

    Parameters
    ----------
    lam : float or array > 0
    """
    task = _task(task)
    shape, (lam, *st) = _broadcast(lam, kappa, nu, theta, eta, rho)
    _check_lam_range(task, lam)
    out = np.empty((lam.shape[0], 5), dtype=np.float64)
    _k.partials_array(*st, lam, task.s, task.gamma, float(task.L), out)
    return out.reshape(shape + (5,))


def manifold_risk(
    task: SingleLocationTask, lam: Annotated[Any, _check_lam], kappa: Annotated[Any, _REALS], nu: Annotated[Any, _REALS]
):
    """Risk on the invariant manifold M: R_M = eps^2 + (L-1) zeta0 + gamma^2 [1 - 2 nu erf(c kappa) + zeta(t, g)].

    Implements docs/models/single_location.md §5.1 (paper Lemma 6), an expression separate from :func:`risk` (they agree
    on M). Broadcasts over ``lam``, ``kappa``, ``nu``.

    Parameters
    ----------
    lam : float or array > 0
    """
    task = _task(task)
    shape, (lam, kappa, nu) = _broadcast(lam, kappa, nu)
    _check_lam_range(task, lam)
    g = lam * task.gamma
    c = lam * task.s / np.sqrt(1.0 + 2.0 * g * g)
    out = (
        task.eps**2
        + (task.L - 1) * _zeta_u(0.0, lam)
        + task.gamma**2 * (1.0 - 2.0 * nu * _erf(c * kappa) + _zeta_u(lam * task.s * kappa, g))
    )
    return out.reshape(shape)[()]


def manifold_vector_field(
    task: SingleLocationTask, lam: Annotated[Any, _check_lam], kappa: Annotated[Any, _REALS], nu: Annotated[Any, _REALS]
):
    """The PGD flow on M, -((1 - kappa^2) dR_M/dkappa, (1 - nu^2) dR_M/dnu), shape broadcast + (2,).

    Implements docs/models/single_location.md §8.5 (Fig. 6(b)) with the partials of docs/models/single_location.md §5.1;
    its zeros are the five stationary points of docs/models/single_location.md §7.1 (paper Props. 8-10).

    Parameters
    ----------
    lam : float or array > 0
    """
    task = _task(task)
    shape, (lam, kappa, nu) = _broadcast(lam, kappa, nu)
    _check_lam_range(task, lam)
    out = np.empty((lam.shape[0], 2), dtype=np.float64)
    _k.manifold_partials_array(kappa, nu, lam, task.s, task.gamma, out)
    out[:, 0] *= -(1.0 - kappa**2)
    out[:, 1] *= -(1.0 - nu**2)
    return out.reshape(shape + (2,))


def oracle_risk(task: SingleLocationTask, lam: Annotated[Any, _check_lam]):
    """Risk of the erf oracle (k, v) = (k*, v*): eps^2 + gamma^2 [1 - 2 erf(c) + zeta(lambda s, g)] + (L-1) zeta0.

    Implements docs/models/single_location.md §5.2 (paper Theorem 1, "in particular" part). Broadcasts over ``lam``.

    Parameters
    ----------
    lam : float or array > 0
    """
    task = _task(task)
    shape, (lam,) = _broadcast(lam)
    _check_lam_range(task, lam)
    g = lam * task.gamma
    c = lam * task.s / np.sqrt(1.0 + 2.0 * g * g)
    out = (
        task.eps**2
        + task.gamma**2 * (1.0 - 2.0 * _erf(c) + _zeta_u(lam * task.s, g))
        + (task.L - 1) * _zeta_u(0.0, lam)
    )
    return out.reshape(shape)[()]


def bayes_risk_lower_bound(task: SingleLocationTask) -> float:
    """Lower bound eps^2 on the Bayes risk (docs/models/single_location.md §5.3, paper Eq. (8) and Corollary 2)."""
    return _task(task).eps ** 2


def linear_risk(task: SingleLocationTask, location_probs: Annotated[Any, _V.Range(array=True, ge=0)] = None) -> float:
    """Risk of the optimal linear predictor, eps^2 + gamma^2 - sum_l p_l^2 gamma^4 / (1 + p_l (gamma^2 - 1)).

    Implements docs/models/single_location.md §5.4 (paper Proposition 3).

    Parameters
    ----------
    location_probs : (L,) array_like, >= 0, optional
        p_l = P(J0 = l), non-negative, summing to 1; uniform (1/L each) by default.
    """
    task = _task(task)
    p = _location_probs(task, location_probs)
    g2 = task.gamma**2
    return float(task.eps**2 + g2 - np.sum(p * p * g2 * g2 / (1.0 + p * (g2 - 1.0))))


def _location_probs(task, location_probs):
    if location_probs is None:
        return np.full(task.L, 1.0 / task.L)
    p = check_finite_array("location_probs", location_probs, shape=(task.L,))
    if np.any(p < 0) or abs(p.sum() - 1.0) > 1e-12:  # 1e-12: float64 rounding of a sum of L probabilities
        raise ValueError(f"location_probs must be >= 0 and sum to 1 (a law on the L positions); got sum {p.sum()!r}")
    return p


def distance_to_manifold(theta: Annotated[Any, _REALS], eta: Annotated[Any, _REALS], rho: Annotated[Any, _REALS]):
    """dist_M = sqrt(theta^2 + eta^2 + rho^2), the distance to M (docs/models/single_location.md §5.1)."""
    theta, eta, rho = (np.asarray(x, dtype=np.float64) for x in (theta, eta, rho))
    return np.sqrt(theta * theta + eta * eta + rho * rho)[()]


# ----------------------------------------------------------------------------------------------------------------
# stationary points


@dataclass(frozen=True, kw_only=True)
class FixedPoint:
    """A fixed point of the five-scalar PGD map (docs/models/single_location.md §6.4), i.e. a critical point of R on
    (S^{d-1})^2.

    Attributes
    ----------
    state : (kappa, nu, theta, eta, rho)
    kappa, nu : its first two scalars (the (kappa, nu) of docs/models/single_location.md §7.1 for the points of M).
    kind : "oracle" ((1, 1), (-1, -1) on M), "anti_oracle" ((1, -1), (-1, 1)), "saddle" (the origin of M),
        "spurious" (S of docs/models/single_location.md §7.4), "swap" (k = +-v*, v = +-k* with theta eta = +1),
        "anti_swap" (theta eta = -1), "collinear" (k = +-v, |rho| = 1, off M) or "mixed" (any other off-M critical
        point).
    stability : "minimum", "maximum" or "saddle": the signs of the eigenvalues of the linearised flow (all < 0,
        all > 0, mixed), as in docs/models/single_location.md §7.1 for the points of M.
    risk, excess_risk : R and R - eps^2 at the point (docs/models/single_location.md §4.2).
    flow_eigenvalues : real parts (ascending) of the eigenvalues of the linearised Riemannian gradient flow of R on
        (S^{d-1})^2 at the point, with the neutral rotations fixing k*, v* divided out; for the points of M, the
        (kappa, nu) block of the reduced flow of docs/models/single_location.md §7.2 instead.
    map_eigenvalues : eigenvalues (by modulus, descending; complex allowed) of the linearised PGD update at step size
        ``alpha`` on (S^{d-1})^2 (vectors, so that points on the boundary of the Gram set such as k = k* are regular;
        a corner's kappa-multiplier is then 1 + alpha kappa_c dR_M/dkappa, the square root of the scalar one), the
        neutral rotations divided out; None without alpha.
    manifold_map_eigenvalues : for the points of M, the (kappa, nu) block of the reduced map's Jacobian in the
        scalar coordinates of docs/models/single_location.md §7.2 (e.g. (1 + alpha kappa_c dR_M/dkappa)^2 at a corner);
        else None.
    attracting : True when every map eigenvalue has modulus < 1 (None without alpha).
    on_manifold : theta = eta = rho = 0.
    orbit : the images of ``state`` under the symmetry group {id, A, B, AB} (A: (k, v) -> (-k, -v); B: v* -> -v*
        with v -> -v, i.e. (theta, eta, rho) -> -(theta, eta, rho)), duplicates removed; ``state`` is the first.
    """

    state: Annotated[tuple[float, float, float, float, float], _REALS]
    kappa: Annotated[float, _REALS]
    nu: Annotated[float, _REALS]
    kind: str
    stability: str
    risk: float
    excess_risk: float
    flow_eigenvalues: tuple
    map_eigenvalues: tuple | None
    manifold_map_eigenvalues: tuple | None
    attracting: bool | None
    on_manifold: bool
    orbit: tuple


# tolerances of the fixed-point machinery, all in the scalar coordinates (|scalar| <= 1):
# _FP_RESID: a root of the tangent-gradient residual (polished roots reach 1e-13 or less at d <= 2000, while the frozen
# plateaus near the oracle corners (docs/models/single_location.md §7.1 caveat) stall at ~1e-11);
# _FP_SAME: two roots closer than this are one point (distinct critical points are >= 1e-3 apart on the lambda-d grid
# of the atlas; Levenberg-Marquardt roots agree to 1e-9);
_FP_RESID = 1e-12
_FP_SAME = 1e-6


def _unit_rows(P):
    P[:, 0:3] /= np.linalg.norm(P[:, 0:3], axis=1, keepdims=True)
    P[:, 3:7] /= np.linalg.norm(P[:, 3:7], axis=1, keepdims=True)
    return P


def _scalars_of_frame(P):
    """Five scalars of k = P[:, 0:3] (coordinates on k*, v*, e3) and v = P[:, 3:7] (on k*, v*, e3, e4), normalised."""
    k = P[:, 0:3] / np.linalg.norm(P[:, 0:3], axis=1, keepdims=True)
    v = P[:, 3:7] / np.linalg.norm(P[:, 3:7], axis=1, keepdims=True)
    return np.stack(
        [k[:, 0], v[:, 1], v[:, 0], k[:, 1], k[:, 0] * v[:, 0] + k[:, 1] * v[:, 1] + k[:, 2] * v[:, 2]], axis=1
    )


def _tangent_residual(task, lam, X):
    """Inner products of the tangent gradients with the frame: (g_k.k*, g_k.v*, g_k.v, g_v.k*, g_v.v*, g_v.k).

    g_k = grad_k R - (k.grad_k R) k and g_v likewise, with grad_k R = R_kappa k* + R_eta v* + R_rho v and
    grad_v R = R_nu v* + R_theta k* + R_rho k (docs/models/single_location.md §4.3). All six vanish exactly at the
    critical points of R on (S^{d-1})^2, the fixed points of the PGD map of docs/models/single_location.md §6.1, §6.4
    for every step size. X: (n, 5); lam: scalar or (n,).
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n = X.shape[0]
    out = np.empty((n, 5))
    cols = [np.ascontiguousarray(X[:, j]) for j in range(5)]
    _k.partials_array(
        *cols, np.broadcast_to(np.asarray(lam, dtype=np.float64), (n,)).copy(), task.s, task.gamma, float(task.L), out
    )
    ka, nu, th, et, rh = cols
    rk, rn, rt, re, rr = out.T
    kgk = rk * ka + re * et + rr * rh
    vgv = rn * nu + rt * th + rr * rh
    return np.stack(
        [
            rk + th * rr - kgk * ka,
            re + nu * rr - kgk * et,
            th * rk + nu * re + rr - kgk * rh,
            rt + ka * rr - vgv * th,
            rn + et * rr - vgv * nu,
            et * rn + ka * rt + rr - vgv * rh,
        ],
        axis=1,
    )


def _symbolic_zeta():
    """zeta(t, g) as a sympy function evaluated by closedform.special's numba kernel, with its derivative rules:
    d/dt = (2/q) erf(t/(q r)) erf'(t/q) (docs/models/single_location.md §3.2) and d/dg = g d2/dt2 (zeta is a
    Gaussian expectation over t + gZ, whose variance g^2 enters as in the heat equation). Where g is a parameter
    expression, generated kernels evaluate it by the series form of closedform.special from a table of g.
    """
    import sympy

    import dynamics.symbolic
    from closedform import special

    def zeta_t(t, g):
        q, r = sympy.sqrt(1 + 2 * g**2), sympy.sqrt(1 + 4 * g**2)
        return 2 / q * sympy.erf(t / (q * r)) * 2 / sympy.sqrt(sympy.pi) * sympy.exp(-((t / q) ** 2))

    def shared(t, g):  # m = t/q, exp(-m^2), erf(m): the erf and exp that zeta's derivatives also use
        m = t / sympy.sqrt(1 + 2 * g**2)
        return m, sympy.exp(-(m**2)), sympy.erf(m)

    # the series of zeta in t at fixed g (the map kernels' form), its table built once per parameter row
    series = dynamics.symbolic.Precompute(
        special._zeta_series_table, special._zeta_series_m, special.ZETA_SERIES_SIZE, args=(1,), shared=shared
    )
    rules = (zeta_t, lambda t, g: g * sympy.diff(zeta_t(t, g), t))
    return dynamics.symbolic.numba_function("zeta", special._zeta, rules, precompute=series)


def _symbolic_risk(kappa, nu, theta, eta, rho, lam, s, gamma, L, eps, zeta):
    """The five-scalar risk of docs/models/single_location.md §4.2 as a sympy expression: phi_j and the
    zeta-derivatives by differentiation (§3.1-§3.2), C = lam phi_1(0, lam), B_2 = lam^2 zeta_tt(0, lam).
    """
    import sympy

    T = sympy.Dummy("T")
    g = lam * gamma
    q = sympy.sqrt(1 + 2 * g**2)
    t = lam * s * kappa
    phi = [sympy.diff(sympy.erf(T / q), T, j).subs(T, t) for j in range(3)]
    z = [sympy.diff(zeta(T, g), T, j).subs(T, t) for j in range(3)]
    C = lam * sympy.diff(sympy.erf(T / sympy.sqrt(1 + 2 * lam**2)), T).subs(T, 0)
    B2 = lam**2 * sympy.diff(zeta(T, lam), T, 2).subs(T, 0)
    gg = gamma**2
    return (
        eps**2
        + gg
        - 2 * gg * nu * phi[0]
        - 2 * g * gamma * s * theta * eta * phi[1]
        - 2 * g**2 * gg * rho * eta * phi[2]
        + (s**2 * theta**2 + gg) * z[0]
        + 2 * g * gamma * s * theta * rho * z[1]
        + g**2 * gg * rho**2 * z[2]
        + (L - 1) * zeta(0, lam)
        + (L - 1) * B2 * rho**2
        + (L - 1) * (L - 2) * C**2 * rho**2
        + 2 * (L - 1) * C * rho * (s * theta * phi[0] + g * gamma * rho * phi[1])
    )


# Parameter row of the symbolic models: (lam, s, gamma, L, eps, alpha).
_SYM_PARAMS = ("lam", "s", "gamma", "L", "eps", "alpha")


@functools.lru_cache(maxsize=None)
def _symbolic_scalar_model():
    """The model of :func:`_build_scalar_model`, loaded from the kernel folder when built before (no sympy work)."""
    from dynamics.symbolic import SymbolicModel

    return SymbolicModel.cached(_build_scalar_model)


@functools.lru_cache(maxsize=None)
def _symbolic_vector_model():
    """The model of :func:`_build_vector_model`, loaded from the kernel folder when built before."""
    from dynamics.symbolic import SymbolicModel

    return SymbolicModel.cached(_build_vector_model)


def _build_scalar_model():
    """Five-scalar model (kappa, nu, theta, eta, rho): risk of docs/models/single_location.md §4.2, the exact PGD map
    of §6.4 and the Riemannian gradient flow, derived symbolically from the risk's gradient; its Jacobians are the
    linearisations of :func:`_describe`.

    The Euclidean gradients (§4.3) and the new unnormalised vectors are combinations of (k, v, k*, v*), whose
    products the Gram matrix G gives: a coefficient vector c has squared norm c.Gc and scalars (Gc)_3, (Gc)_4.
    """
    import sympy

    st = sympy.symbols("kappa nu theta eta rho", real=True)
    lam, s, gamma, L, eps, alpha = sympy.symbols(_SYM_PARAMS, real=True)
    kappa, nu, theta, eta, rho = st
    R = _symbolic_risk(*st, lam, s, gamma, L, eps, _symbolic_zeta())
    partials = sympy.symbols("R_kappa R_nu R_theta R_eta R_rho", real=True)  # computed once per call (aux)
    rk, rn, rt, re, rr = partials
    G = sympy.Matrix([[1, rho, kappa, eta], [rho, 1, theta, nu], [kappa, theta, 1, 0], [eta, nu, 0, 1]])
    grad_k = sympy.Matrix([0, rr, rk, re])  # coefficients on (k, v, k*, v*)
    grad_v = sympy.Matrix([rr, 0, rt, rn])
    tk = grad_k - (sympy.Matrix([1, 0, 0, 0]).T * G * grad_k)[0] * sympy.Matrix([1, 0, 0, 0])  # tangent parts
    tv = grad_v - (sympy.Matrix([0, 1, 0, 0]).T * G * grad_v)[0] * sympy.Matrix([0, 1, 0, 0])
    k1 = sympy.Matrix([1, 0, 0, 0]) - alpha * tk
    v1 = sympy.Matrix([0, 1, 0, 0]) - alpha * tv
    Gk, Gv = G * k1, G * v1
    nk, nv = sympy.sqrt((k1.T * Gk)[0]), sympy.sqrt((v1.T * Gv)[0])
    step = [Gk[2] / nk, Gv[3] / nv, Gv[2] / nv, Gk[3] / nk, (k1.T * Gv)[0] / (nk * nv)]
    Gtk, Gtv = G * tk, G * tv
    flow = [-Gtk[2], -Gtv[3], -Gtv[2], -Gtk[3], -(Gtv[0] + Gtk[1])]
    from dynamics.symbolic import SymbolicModel

    return SymbolicModel(
        st,
        _SYM_PARAMS,
        map=step,
        flow=flow,
        risk=R,
        aux={r: sympy.diff(R, v) for r, v in zip(partials, st)},
        gradient=partials,
    )


def _build_vector_model():
    """PGD and the Riemannian gradient flow of R on (S^5)^2, k and v in R^6 with k* = e1, v* = e2, from the risk as a
    function of the vectors (docs/models/single_location.md §4.1, §6.1) by the symbolic front end's sphere
    projection.
    """
    import sympy

    from dynamics.symbolic import SymbolicModel

    k = sympy.symbols(f"k0:{_DV}", real=True)
    v = sympy.symbols(f"v0:{_DV}", real=True)
    st = sympy.symbols("kappa nu theta eta rho", real=True)
    lam, s, gamma, L, eps, _ = sympy.symbols(_SYM_PARAMS, real=True)
    R = _symbolic_risk(*st, lam, s, gamma, L, eps, _symbolic_zeta())
    overlaps = dict(zip(st, (k[0], v[1], v[0], k[1], sum(a * b for a, b in zip(k, v)))))
    return SymbolicModel.from_risk(R, k + v, _SYM_PARAMS, spheres=(k, v), order_params=overlaps)


def _symbolic_params(task, lam, alpha):
    return np.array([lam, task.s, task.gamma, float(task.L), task.eps, 0.0 if alpha is None else alpha])


def critical_point_search(
    task: SingleLocationTask,
    lam: Annotated[float, _check_lam],
    *,
    n_starts: Annotated[int, _V.Range(integer=True, ge=1)] = 2000,
    rng: Annotated[Any, _V.seed_check] = 0,
    max_iter: Annotated[int, _V.Range(integer=True, ge=1)] = 150,
):
    """Every critical point of R on (S^{d-1})^2 reached by a Levenberg–Marquardt root search from random starts.

    The critical points of R_lambda on (S^{d-1})^2 are the fixed points of the PGD map
    (docs/models/single_location.md §6.1, §6.4) for every step size. Because grad R lies in span(k, v, k*, v*), each one
    is represented in R^4 with k* = e1, v* = e2, k = (kappa, eta, a, 0), v = (theta, nu, b, c)
    (docs/models/single_location.md §4.1); the search runs over (k, v) in S^2 x S^3 (the remaining rotation fixing k*
    and v* is a symmetry), solving the six tangent-gradient equations (residual < 1e-12) by
    damped Gauss–Newton with central-difference Jacobians, from ``n_starts`` independent uniform starts on S^2 x S^3.

    Parameters
    ----------
    n_starts : int >= 1
    max_iter : int >= 1
    lam : float or array > 0

    Returns
    -------
    (m, 5) float64 array of distinct roots (kappa, nu, theta, eta, rho) off M, sorted lexicographically, and the (m,)
    number of starts that reached each (roots on M are left out: docs/models/single_location.md §7.1 lists them
    exactly).
    """
    task = _task(task)
    _need_d4(task)
    lam = check_positive("lam", lam)
    n_starts = check_int("n_starts", n_starts, min_value=1)
    max_iter = check_int("max_iter", max_iter, min_value=1)
    rng = as_generator(rng)
    P = _unit_rows(rng.standard_normal((n_starts, 7)))
    mu = np.full(n_starts, 1e-3)
    h = 1e-7
    eye = np.eye(7)
    for _ in range(max_iter):
        r0 = _tangent_residual(task, lam, _scalars_of_frame(P))
        f0 = np.sum(r0 * r0, axis=1)
        live = f0 > 1e-28  # residual 1e-14: polished
        if not live.any():
            break
        Pl, rl, ml = P[live], r0[live], mu[live]
        J = np.empty((Pl.shape[0], 6, 7))
        for j in range(7):
            J[:, :, j] = (
                _tangent_residual(task, lam, _scalars_of_frame(Pl + h * eye[j]))
                - _tangent_residual(task, lam, _scalars_of_frame(Pl - h * eye[j]))
            ) / (2 * h)
        J = np.where(np.isfinite(J), J, 0.0)
        JT = np.transpose(J, (0, 2, 1))
        # pseudo-inverse: J^T J + mu I can be singular to rounding when mu has shrunk to its floor
        step = (np.linalg.pinv(JT @ J + ml[:, None, None] * eye) @ -(JT @ rl[..., None]))[..., 0]
        Pn = _unit_rows(Pl + step)
        f1 = np.sum(_tangent_residual(task, lam, _scalars_of_frame(Pn)) ** 2, axis=1)
        ok = np.isfinite(f1) & (f1 < f0[live])
        Pl[ok] = Pn[ok]
        ml = np.clip(np.where(ok, ml * 0.3, ml * 10.0), 1e-15, 1e10)
        P[live], mu[live] = Pl, ml
    X = _scalars_of_frame(P)
    res = np.sqrt(np.sum(_tangent_residual(task, lam, X) ** 2, axis=1))
    #  roots on M (dist_M < 1e-8) are left out: the five points of docs/models/single_location.md §7.1 are the only ones
    # there (placed exactly by fixed_points), and the others reported there are the frozen plateaus of the
    # docs/models/single_location.md §7.1 caveat
    on_m = np.sqrt(X[:, 2] ** 2 + X[:, 3] ** 2 + X[:, 4] ** 2) < 1e-8
    return _distinct(X[(res < _FP_RESID) & ~on_m])


def _distinct(X):
    """Cluster rows closer than _FP_SAME (max norm); representative = first member; sorted; with counts."""
    reps, counts = [], []
    for x in X[np.lexsort(X.T[::-1])]:
        for i, r in enumerate(reps):
            if np.max(np.abs(r - x)) < _FP_SAME:
                counts[i] += 1
                break
        else:
            reps.append(x)
            counts.append(1)
    return np.array(reps).reshape(-1, 5), np.array(counts, dtype=np.int64)


_SYMMETRIES = np.array([[1, 1, 1, 1, 1], [-1, -1, -1, -1, 1], [1, 1, -1, -1, -1], [-1, -1, 1, 1, -1]], dtype=np.float64)


def _orbit(x):
    out = []
    for sgn in _SYMMETRIES:
        y = tuple(float(v) + 0.0 for v in sgn * np.asarray(x))
        if all(max(abs(a - b) for a, b in zip(y, z)) > _FP_SAME for z in out):
            out.append(y)
    return tuple(out)


def _closed_form_points(task, lam):
    """States of the analytic families: M's five points (docs/models/single_location.md §7.1), S if it exists
    (docs/models/single_location.md §7.4), the four swap points (0, 0, +-1, +-1, 0) (stationary since phi_0(0) =
    phi_2(0) = zeta_t(0) = 0 make every partial but
    R_theta, R_eta vanish there, and those two are normal to the sphere constraints).
    """
    pts = [
        (0.0, 0.0, 0.0, 0.0, 0.0),
        (1.0, 1.0, 0.0, 0.0, 0.0),
        (-1.0, -1.0, 0.0, 0.0, 0.0),
        (1.0, -1.0, 0.0, 0.0, 0.0),
        (-1.0, 1.0, 0.0, 0.0, 0.0),
    ]
    S = spurious_point(task, lam)
    if S.theta_S < 1.0 - _FP_SAME:  # at theta_S = 1, S is the swap point itself
        pts += [S.state, (0.0, 0.0, -S.theta_S, -1.0, 0.0)]
    pts += [
        (0.0, 0.0, 1.0, 1.0, 0.0),
        (0.0, 0.0, -1.0, -1.0, 0.0),
        (0.0, 0.0, 1.0, -1.0, 0.0),
        (0.0, 0.0, -1.0, 1.0, 0.0),
    ]
    return np.array(pts)


def _kind_of(x):
    ka, nu, th, et, rh = (float(v) for v in x)
    if max(abs(th), abs(et), abs(rh)) < _FP_SAME:
        if max(abs(ka), abs(nu)) < _FP_SAME:
            return "saddle"
        return "oracle" if ka * nu > 0 else "anti_oracle"
    if max(abs(ka), abs(nu), abs(rh)) < _FP_SAME and abs(abs(et) - 1.0) < _FP_SAME:
        if abs(abs(th) - 1.0) < _FP_SAME:
            return "swap" if th * et > 0 else "anti_swap"
        return "spurious"
    if abs(abs(rh) - 1.0) < 1e-6:  # |rho| = 1 - O(residual^2) at a polished root (rho is quadratic in the angle)
        return "collinear"
    return "mixed"


def _stability(eigs) -> str:
    eigs = np.asarray(eigs)
    if np.all(eigs < 0):
        return "minimum"
    if np.all(eigs > 0):
        return "maximum"
    return "saddle"


def fixed_points(
    task: SingleLocationTask,
    lam: Annotated[float, _check_lam],
    alpha: Annotated[float | None, _V.Range(gt=0)] = None,
    *,
    n_starts: Annotated[int, _V.Range(integer=True, ge=0)] = 1000,
    rng: Annotated[Any, _V.seed_check] = 0,
) -> tuple[FixedPoint, ...]:
    """All fixed points of the five-scalar PGD map at (task, lambda), named, with risk, linearisation and orbit.

    Implements docs/models/single_location.md §7.1-§7.2 (the five points of M: (0, 0) saddle, (1, 1) and (-1, -1)
    oracle, (1, -1) and (-1, 1) anti-oracle) and docs/models/single_location.md §7.4 (S), plus every other critical
    point of R on (S^{d-1})^2: the swap points (0, 0, +-1, +-1, 0) (k = +-v*, v = +-k*) and the points found by
    :func:`critical_point_search` (points with k = +-v, and "mixed" ones). The analytic families are placed exactly; the
    others are polished roots.

    Parameters
    ----------
    task : SingleLocationTask
        The task; its dimension d must be >= 4.
    lam : float > 0
    alpha : float > 0, optional
        Step size for ``map_eigenvalues`` and ``attracting``.
    n_starts : int >= 0
        Random starts of the root search (0 starts: the analytic families only). Completeness is numerical
        evidence, not a proof: with the default, 4 000 fresh starts find no further point at lambda = 0.05 and 0.1,
        d = 400 (tests/closedform/test_single_location_atlas.py), and every sphere start of PGD ends at a listed
        attractor there; rarely hit
        saddles (reached by ~1 start in 600 at lambda = 0.2) need more starts. The images of every root under the
        symmetry group are added, so an orbit is complete as soon as one member is found.
    rng : int, Generator, SeedSequence or None
        Seed of the root search.

    Returns
    -------
    tuple of :class:`FixedPoint`, the five points of M first (order (0,0), (1,1), (-1,-1), (1,-1), (-1,1)), then the
    others by increasing risk.

    Notes
    -----
    For large lambda sqrt(d) the kappa-partials underflow near |nu| = 1 (docs/models/single_location.md §7.1 caveat,
    docs/models/single_location.md §9.8), so the corner eigenvalues along kappa can be 0 in float64 (then ``stability``
    of a corner is named from the signs of docs/models/single_location.md §7.2, which do not underflow).
    """
    task = _task(task)
    _need_d4(task)
    lam = check_positive("lam", lam)
    if alpha is not None:
        alpha = check_positive("alpha", alpha)
    n_starts = check_int("n_starts", n_starts, min_value=0)
    pts = list(_closed_form_points(task, lam))
    if n_starts:
        found, _ = critical_point_search(task, lam, n_starts=n_starts, rng=rng)
        found = [np.array(y) for x in found for y in _orbit(x)]  # symmetry completion: a root's images are roots
        for x in found:
            if all(np.max(np.abs(x - p)) > 1e-5 for p in pts):  # 1e-5: polished roots of the analytic points agree
                pts.append(x)
    return tuple(_describe(task, lam, alpha, np.asarray(x, dtype=np.float64)) for x in _order(task, lam, pts))


def _order(task, lam, pts):
    first, rest = pts[:5], pts[5:]
    rest = sorted(rest, key=lambda x: (float(risk(task, lam, *x)), tuple(x)))
    out = list(first)  # every member of every orbit, once
    for x in rest:
        if all(np.max(np.abs(np.asarray(x) - np.asarray(y))) > _FP_SAME for y in out):
            out.append(np.asarray(x))
    return out


_DV = 6  # ambient dimension of the vector linearisation: span(k, v, k*, v*) plus two more directions


def _frame_vectors(x):
    """k, v in R^6 with k* = e1, v* = e2 and the given five scalars (Gram–Schmidt coordinates as in
    vectors_from_state).
    """
    kappa, nu, theta, eta, rho = (float(t) for t in x)
    a = math.sqrt(max(1.0 - kappa**2 - eta**2, 0.0))
    b = (rho - kappa * theta - eta * nu) / a if a > 1e-150 else 0.0
    c = math.sqrt(max(1.0 - theta**2 - nu**2 - b**2, 0.0))
    k = np.zeros(_DV)
    v = np.zeros(_DV)
    k[:3] = kappa, eta, a
    v[:4] = theta, nu, b, c
    return k / np.linalg.norm(k), v / np.linalg.norm(v)


def _tangent_gradients(task, lam, K, V):
    """Riemannian gradients (g_k, g_v) of R at rows of K, V (n, 6) (docs/models/single_location.md §4.3 chain rule,
    tangent parts).
    """
    sc = [np.ascontiguousarray(z) for z in (K[:, 0], V[:, 1], V[:, 0], K[:, 1], np.sum(K * V, axis=1))]
    out = np.empty((K.shape[0], 5))
    _k.partials_array(*sc, np.full(K.shape[0], lam), task.s, task.gamma, float(task.L), out)
    e1, e2 = np.eye(_DV)[0], np.eye(_DV)[1]
    gk = out[:, 0:1] * e1 + out[:, 3:4] * e2 + out[:, 4:5] * V
    gv = out[:, 1:2] * e2 + out[:, 2:3] * e1 + out[:, 4:5] * K
    gk -= np.sum(gk * K, axis=1, keepdims=True) * K
    gv -= np.sum(gv * V, axis=1, keepdims=True) * V
    return gk, gv


def _vector_linearisation(task, lam, x, alpha):
    """Eigenvalues of the linearised PGD map (alpha given) or Riemannian gradient flow (alpha None) at a fixed point,
    computed on (S^5)^2 (vectors, not scalars, so that points on the boundary of the Gram set, e.g. k = k*, are
    regular), with the neutral directions of the rotations fixing k* and v* (a symmetry, eigenvalue 1 for the map and
    0 for the flow) divided out. The Jacobian is the symbolic one of :func:`_symbolic_vector_model` restricted to the
    tangent spaces.
    """
    k, v = _frame_vectors(x)
    eye = np.eye(_DV)

    def complement(u):
        q = np.linalg.svd(np.eye(_DV) - np.outer(u, u))[0][:, : _DV - 1]
        return q

    Bk, Bv = complement(k), complement(v)  # (6, 5) orthonormal bases of the tangent spaces
    n_t = 2 * (_DV - 1)
    basis = np.zeros((n_t, 2 * _DV))
    basis[: _DV - 1, :_DV] = Bk.T
    basis[_DV - 1 :, _DV:] = Bv.T
    model = _symbolic_vector_model()
    p = _symbolic_params(task, lam, alpha)
    xv = np.concatenate([k, v])
    J_ambient = model.jacobian_flow(xv, p) if alpha is None else model.jacobian_map(xv, p)
    J = basis @ J_ambient @ basis.T  # (n_t, n_t): tangent coordinates of the derivative
    # neutral directions of the symmetry: (A k, A v) for rotations A of span(e3..e6)
    gens = []
    for i in range(2, _DV):
        for j in range(i + 1, _DV):
            A = np.outer(eye[i], eye[j]) - np.outer(eye[j], eye[i])
            gens.append(basis @ np.concatenate([A @ k, A @ v]))
    W = np.array(gens).T
    u, s, _ = np.linalg.svd(W)
    rank = int(np.sum(s > 1e-9))
    Q = u[:, rank:]  # orthonormal complement of the symmetry directions (J-invariant by equivariance)
    return np.linalg.eigvals(Q.T @ J @ Q)


def _describe(task, lam, alpha, x):
    kind = _kind_of(x)
    on_m = kind in ("saddle", "oracle", "anti_oracle")
    flow = _vector_linearisation(task, lam, x, None)
    stab = _stability(flow.real)
    manifold_map = None
    if on_m:
        #  the (kappa, nu) block in the coordinates of docs/models/single_location.md §7.2 (scalar Jacobian of the
        # reduced map on M)
        Jf = _symbolic_scalar_model().jacobian_flow(x, _symbolic_params(task, lam, None))
        flow = np.linalg.eigvals(Jf[:2, :2])
        if kind != "saddle":
            #  corners: the kappa-multiplier underflows for large c (docs/models/single_location.md §7.1 caveat); name
            # them by the signs of docs/models/single_location.md §7.2, kappa_c (erf(c kappa_c / r) - nu_c) and -nu_c
            # erf(c kappa_c), which do not underflow
            g = lam * task.gamma
            q, r = math.sqrt(1 + 2 * g * g), math.sqrt(1 + 4 * g * g)
            c = lam * task.s / q
            kc, nc = float(x[0]), float(x[1])
            gap = (-math.erfc(c / r) if kc == nc else 1.0 + math.erf(c / r)) * kc
            stab = _stability([np.sign(kc * gap), np.sign(-nc * math.erf(c * kc))])
        if alpha is not None:
            Jm = _symbolic_scalar_model().jacobian_map(x, _symbolic_params(task, lam, alpha))
            mm = np.linalg.eigvals(Jm[:2, :2])
            manifold_map = tuple(float(z.real) for z in mm[np.argsort(-np.abs(mm))])
    mapped = attracting = None
    if alpha is not None:
        mapped = _vector_linearisation(task, lam, x, alpha)
        mapped = mapped[np.argsort(-np.abs(mapped))]
        top = float(np.max(np.abs(mapped)))
        #  a multiplier that rounds to 1 at an oracle corner is the underflowing kappa-mode
        # (docs/models/single_location.md §7.1): attracting
        attracting = bool(top < 1.0 or (top <= 1.0 + 1e-12 and kind == "oracle" and stab == "minimum"))
        mapped = tuple(complex(z) if abs(z.imag) > 1e-12 else float(z.real) for z in mapped)
    r = float(risk(task, lam, *x))
    return FixedPoint(
        state=tuple(float(v) + 0.0 for v in x),
        kappa=float(x[0]) + 0.0,
        nu=float(x[1]) + 0.0,
        kind=kind,
        stability=stab,
        risk=r,
        excess_risk=r - task.eps**2,
        flow_eigenvalues=tuple(float(v) for v in np.sort(flow.real)),
        map_eigenvalues=mapped,
        manifold_map_eigenvalues=manifold_map,
        attracting=attracting,
        on_manifold=on_m,
        orbit=_orbit(x),
    )


def classify(
    task: SingleLocationTask,
    lam: Annotated[float, _check_lam],
    states: Annotated[Any, _REALS],
    *,
    tol: Annotated[float, _V.Range(gt=0)] = 1e-3,
    points: Annotated[Any, _check_points] = None,
    basin: bool = False,
) -> np.ndarray:
    """Name end states by the fixed point they sit at: the ``kind`` of the nearest point within ``tol``.

    The names are those of :func:`fixed_points` (the five stationary points on M of Props. 8-10, S of
    docs/models/single_location.md §7.4, the swap points and the other off-manifold points of the complete set).

    Parameters
    ----------
    states : (n, 5) or (5,) array of (kappa, nu, theta, eta, rho).
    tol : float > 0
        Largest max-norm distance in the five scalars to a fixed point (default 1e-3: the fixed points of the atlas
        grid are >= 1e-2 apart, and PGD end states after convergence are within 1e-6 of theirs).
    points : tuple of FixedPoint, optional
        From :func:`fixed_points` (computed when not given).
    basin : bool
        Also name states within 1e-3 of two invariant edges by the attractor they reach (the edge certificate):
        on M with |nu| = 1 ("oracle") and k = +-v* ("spurious" or "swap"), only when that point attracts at the
        step size of ``points`` (``fixed_points(task, lam, alpha)``; points computed without a step size certify
        nothing). The dynamics along each edge is monotone towards its attractor (docs/models/single_location.md
        §7.1, §7.4).
    lam : float or array > 0

    Returns
    -------
    (n,) array of str: a ``FixedPoint.kind`` or "unconverged".
    """
    task = _task(task)
    lam = check_positive("lam", lam)
    tol = check_positive("tol", tol)
    st = np.atleast_2d(check_finite_array("states", states, ndim=(1, 2)))
    if st.shape[1] != 5:
        raise ValueError(f"states must have 5 columns (kappa, nu, theta, eta, rho); got shape {st.shape}")
    pts = fixed_points(task, lam) if points is None else points
    images = [(np.array(y), fp.kind) for fp in pts for y in fp.orbit]
    ref = np.array([y for y, _ in images])
    names = np.array([k for _, k in images] + ["unconverged"], dtype=object)
    dist = np.max(np.abs(st[:, None, :] - ref[None, :, :]), axis=2)
    idx = np.argmin(dist, axis=1)
    idx = np.where(dist[np.arange(st.shape[0]), idx] <= tol, idx, len(images))
    out = names[idx].astype(object)
    if basin:
        cert = _edge_certificate(task, lam, st, pts)
        out = np.where((out == "unconverged") & (cert != ""), cert, out)
    return out.astype(str)


# distance to an invariant edge under which a state is named by the edge's attractor: the edges attract
# transversally at the atlas's step sizes (checked by running certified states to the attractor,
# tests/closedform/test_single_location_atlas.py)
_EDGE_TOL = 1e-3


def _edge_certificate(task, lam, st, points):
    """Kind of the attractor that states near two invariant edges reach (else ""): within _EDGE_TOL of the edge,
    and only when a fixed point of that kind in ``points`` attracts at their step size (``FixedPoint.attracting``
    True): an edge leads to its end point only if that point attracts (at lambda = 0.2, d = 400, alpha = 4e-3 the
    oracle's map multiplier is -1.11 and runs on the nu = 1 edge stay at |kappa| ~ 0.72, still moving).

    (i) M with nu = +-1: M is invariant (docs/models/single_location.md §6.2), so is nu = +-1 (the factor 1 - nu^2 of
    docs/models/single_location.md §6.3), and along it dR_M/dkappa has the sign of -nu for every kappa
    (docs/models/single_location.md §7.1), so kappa moves monotonically to nu: "oracle". (ii) kappa = nu = rho = 0 with
    eta = +-1 (k = +-v*): all partials but R_theta vanish there (phi_0(0) = phi_2(0) = zeta_t(0) = 0,
    docs/models/single_location.md §4.3), so only theta moves, by gradient descent on a convex quadratic in theta (s^2
    zeta(0, g) theta^2 - 2 g gamma s phi_1(0, g) theta eta) whose minimiser on [-1, 1] is theta_S eta clipped to +-1:
    "spurious" when theta_S < 1, else "swap" (theta eta = -1, the anti-swap point, is excluded). States near an edge
    (not on it) are named on the evidence that the edges attract transversally at the step sizes of the atlas
    (tests/closedform/test_single_location_atlas.py runs certified states on until they reach the named attractor);
    use with
    ``basin=True`` at such step sizes only.
    """
    ka, nu, th, et, rh = st.T
    out = np.full(st.shape[0], "", dtype=object)
    attracting = {fp.kind for fp in points if fp.attracting}
    on_m = np.maximum(np.maximum(np.abs(th), np.abs(et)), np.abs(rh)) < _EDGE_TOL
    if "oracle" in attracting:
        out[on_m & (np.abs(nu) > 1 - _EDGE_TOL)] = "oracle"
    edge = (np.maximum(np.maximum(np.abs(ka), np.abs(nu)), np.abs(rh)) < _EDGE_TOL) & (np.abs(et) > 1 - _EDGE_TOL)
    target = "spurious" if spurious_point(task, lam).theta_S < 1.0 - _FP_SAME else "swap"
    if target in attracting:
        out[edge & (th * et > -1 + 1e-3)] = target
    return out


def run_to_fixed_point(
    task: SingleLocationTask,
    state0: Annotated[Any, _REALS],
    *,
    alpha: Annotated[float, _V.Range(gt=0)],
    lam: Annotated[float, _check_lam],
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)] = 10_000,
    points: Annotated[Any, _check_points] = None,
    stop_tol: Annotated[float, _V.Range(gt=0)] = 1e-4,
    chunk: Annotated[int, _V.Range(integer=True, ge=1)] = 250,
    certify: bool = False,
):
    """Five-scalar PGD (docs/models/single_location.md §6.4) at constant lambda, final states only, each trajectory
    stopped when converged.

    A trajectory stops once it is within ``stop_tol`` (max norm over the five scalars) of an attracting fixed point of
    ``points`` (default ``fixed_points(task, lam, alpha)``), or once a block of ``chunk`` steps moves it by less than
    1e-13 (a frozen state, docs/models/single_location.md §7.1 caveat), or (``certify=True``) once it is on an invariant
    edge that leads to a point attracting at ``alpha`` (the edge certificate of :func:`classify`), or after ``n_steps``
    updates. It runs through ``dynamics.iterate`` in blocks of ``chunk`` steps with ``SaveAt(final=True)``; stopping
    converged trajectories also keeps them clear of the subnormal range (docs/models/single_location.md §0.3:
    converging components decay geometrically).

    Parameters
    ----------
    alpha : float > 0
    n_steps : int >= 0
    stop_tol : float > 0
    chunk : int >= 1
    lam : float or array > 0

    Returns
    -------
    (final states (n, 5), steps run (n,) int64).
    """
    task = _task(task)
    _need_d4(task)
    alpha = check_positive("alpha", alpha)
    lam = check_positive("lam", lam)
    n_steps = check_int("n_steps", n_steps, min_value=0)
    chunk = check_int("chunk", chunk, min_value=1)
    stop_tol = check_positive("stop_tol", stop_tol)
    X = np.atleast_2d(check_finite_array("state0", state0, ndim=(1, 2))).copy()
    if X.shape[1] != 5:
        raise ValueError(f"state0 must have 5 columns (kappa, nu, theta, eta, rho); got shape {X.shape}")
    _check_state(*(np.ascontiguousarray(X[:, j]) for j in range(5)), where="state0")
    pts = fixed_points(task, lam, alpha) if points is None else points
    attract = np.array([y for fp in pts if fp.attracting for y in fp.orbit]).reshape(-1, 5)
    steps = np.zeros(X.shape[0], dtype=np.int64)
    live = np.arange(X.shape[0])
    params, table = _map_params(task, alpha, np.array([lam]))
    done = 0
    while live.size and done < n_steps:
        m = min(chunk, n_steps - done)
        x0 = np.concatenate([X[live], np.full((live.size, 1), lam)], axis=1)
        tr = dynamics.iterate(
            _k.five_step, x0, m, params=params, args=(table,), saveat=dynamics.SaveAt(final=True), trend=False
        )
        new = tr.states()[:, -1, :5]
        moved = np.max(np.abs(new - X[live]), axis=1)
        X[live] = new
        done += m
        steps[live] = done
        near = np.zeros(live.size, dtype=bool)
        if attract.size:
            near = np.min(np.max(np.abs(new[:, None, :] - attract[None]), axis=2), axis=1) < stop_tol
        if certify:
            near |= _edge_certificate(task, lam, new, pts) != ""
        live = live[~(near | (moved < 1e-13))]
    return X, steps


FIXED_POINT_KINDS: tuple[str, ...] = (
    "oracle",
    "anti_oracle",
    "saddle",
    "spurious",
    "swap",
    "anti_swap",
    "collinear",
    "mixed",
)
"""Every ``kind`` a :class:`FixedPoint` can have (docs/models/single_location.md §7.1, §7.4)."""


@dataclass(frozen=True, kw_only=True)
class Basins:
    """Basin fractions of the end states of PGD (Definition 1) from uniform sphere starts (see :func:`basins`).

    Parameters
    ----------
    n : int >= 1
    """

    kinds: tuple
    counts: tuple
    n: Annotated[int, _V.Range(integer=True, ge=1)]
    fractions: tuple
    standard_errors: tuple
    mean_steps: float
    notes: tuple = ()


def basins(
    task: SingleLocationTask,
    lam: Annotated[float, _check_lam],
    n: Annotated[int, _V.Range(integer=True, ge=1)],
    *,
    alpha: Annotated[float, _V.Range(gt=0)] = 4e-3,
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)] = 10_000,
    rng: Annotated[Any, _V.seed_check] = None,
    tol: Annotated[float, _V.Range(gt=0)] = 1e-3,
    stop_tol: Annotated[float, _V.Range(gt=0)] = 1e-4,
    points: Annotated[Any, _check_points] = None,
    certify: bool = False,
) -> Basins:
    """Fractions of n uniform sphere starts (docs/models/single_location.md §6.5) whose PGD end state sits at each kind
    of fixed point.

    Runs :func:`run_to_fixed_point` (stopping within ``stop_tol`` of an attracting fixed point) and names the end
    states with :func:`classify` (within ``tol``; with ``certify=True`` also states on the invariant edges of
    the edge certificate of :func:`classify`, by the attractor they reach); the standard error of a fraction
    p is sqrt(p (1 - p) / n) (binomial, independent starts). Every kind of :data:`FIXED_POINT_KINDS` is listed, in
    that order, with its count (0 for kinds no start reached), then "unconverged": the end states that are at no fixed
    point within ``tol`` after ``n_steps`` updates.

    With ``certify=True`` a run is never named after a fixed point that does not attract at ``alpha`` (a map
    multiplier of modulus >= 1, e.g. the oracle at lambda >= 0.2, d = 400, alpha = 4e-3): neither through an edge
    certificate nor by sitting within ``tol`` of it. Such runs count as "unconverged", and ``notes`` says, per
    nearest fixed point, how many there are, how far they are from it and why they were not named after it.
    ``points`` must then carry the step size (``fixed_points(task, lam, alpha)``).

    Parameters
    ----------
    n : int >= 1
    alpha : float > 0
    n_steps : int >= 0
    tol : float > 0
    stop_tol : float > 0
    lam : float or array > 0
    """
    task = _task(task)
    n = check_int("n", n, min_value=1)
    alpha = check_positive("alpha", alpha)
    pts = fixed_points(task, lam, alpha) if points is None else points
    if certify and any(fp.attracting is None for fp in pts):
        raise ValueError("certify=True needs points computed at the run's step size: fixed_points(task, lam, alpha)")
    x0 = sample_initial_state(task, n, rng)
    X, steps = run_to_fixed_point(
        task, x0, alpha=alpha, lam=lam, n_steps=n_steps, points=pts, stop_tol=stop_tol, certify=certify
    )
    names = classify(task, lam, X, tol=tol, points=pts, basin=certify)
    notes = ()
    if certify:
        names, notes = _certified_names(X, names, pts, alpha)
    kinds = FIXED_POINT_KINDS + ("unconverged",)  # every kind, reached or not, so sweeps get the same variables
    counts = np.array([int(np.sum(names == k)) for k in kinds])
    frac = counts / n
    return Basins(
        kinds=kinds,
        counts=tuple(int(c) for c in counts),
        n=n,
        fractions=tuple(float(f) for f in frac),
        standard_errors=tuple(float(np.sqrt(f * (1 - f) / n)) for f in frac),
        mean_steps=float(steps.mean()),
        notes=notes,
    )


def _certified_names(X, names, pts, alpha):
    """Names with every state whose nearest fixed point does not attract at ``alpha`` turned "unconverged", and one
    note per nearest fixed point of the unconverged states (count, distance range, whether it attracts and why).
    """
    images = [(np.array(y), fp) for fp in pts for y in fp.orbit]
    ref = np.array([y for y, _ in images])
    dist = np.max(np.abs(X[:, None, :] - ref[None, :, :]), axis=2)
    nearest = np.argmin(dist, axis=1)
    d_near = dist[np.arange(X.shape[0]), nearest]
    names = np.asarray(names, dtype=object).copy()
    repelling = np.array([not images[i][1].attracting for i in nearest])
    names[repelling & (names != "unconverged")] = "unconverged"
    notes = []
    unconv = names == "unconverged"
    for kind in sorted({images[i][1].kind for i in nearest[unconv]}):
        sel = unconv & np.array([images[i][1].kind == kind for i in nearest])
        fp = images[nearest[sel][0]][1]
        top = max(abs(complex(z)) for z in fp.map_eigenvalues)
        why = (
            f"it does not attract at alpha = {alpha:g} (largest map multiplier modulus {top:.4g})"
            if not fp.attracting
            else "not reached within the run's steps"
        )
        notes.append(
            f"{int(sel.sum())} unconverged runs nearest to {kind!r} (max-norm distance "
            f"{d_near[sel].min():.3g} .. {d_near[sel].max():.3g}): {why}"
        )
    return names.astype(str), tuple(notes)


@dataclass(frozen=True, kw_only=True)
class SpuriousPoint:
    """The off-manifold stationary point S = (0, 0, theta_S, 1, 0) of full PGD (docs/models/single_location.md §7.4)."""

    theta_S: float
    state: Annotated[tuple[float, float, float, float, float], _REALS]
    exists: bool
    excess_risk: float
    distance_to_manifold: float


def spurious_point(task: SingleLocationTask, lam: Annotated[float, _check_lam]) -> SpuriousPoint:
    """The spurious stationary point S (k = v*): theta_S = gamma g phi_1(0, g) / (s zeta(0, g)).

    Implements docs/models/single_location.md §7.4 (found by this toolkit's verification; not in the paper). S exists
    when theta_S <= 1. Its excess risk is gamma^2 [1 - g^2 phi_1(0,g)^2/zeta(0,g) + zeta(0,g)] + (L-1) zeta0(lambda).

    Parameters
    ----------
    lam : float or array > 0
    """
    task = _task(task)
    lam = check_positive("lam", lam)
    _check_lam_range(task, lam)
    g = lam * task.gamma
    p1, z0g = float(_phi(0.0, g, 1)), float(_zeta_u(0.0, g))
    theta_s = task.gamma * g * p1 / (task.s * z0g)
    exc = task.gamma**2 * (1 - g * g * p1 * p1 / z0g + z0g) + (task.L - 1) * float(_zeta_u(0.0, lam))
    return SpuriousPoint(
        theta_S=theta_s,
        state=(0.0, 0.0, theta_s, 1.0, 0.0),
        exists=theta_s <= 1.0,
        excess_risk=exc,
        distance_to_manifold=math.sqrt(1.0 + theta_s**2),
    )


# ----------------------------------------------------------------------------------------------------------------
# random initial states, vectors and data


def sample_initial_state(
    task: SingleLocationTask,
    n: Annotated[int, _V.Range(integer=True, ge=1)],
    rng: Annotated[Any, _V.seed_check] = None,
    on: str = "sphere",
) -> np.ndarray:
    """Draw n initial states (kappa, nu, theta, eta, rho) from their exact laws; returns (n, 5) float64.

    Implements docs/models/single_location.md §6.5. ``on="sphere"``: k, v independent uniform on S^{d-1}, with the
    toolkit's reference generator (draw order (Z1, Z2), (Z3, Z4), Q_k, Q_v, Z5, Q_kv). ``on="manifold"``: the authors'
    manifold initialisation, kappa = Z1/sqrt(Z1^2 + chi2(d-2)), nu = Z2/sqrt(Z2^2 + chi2(d-3)) (draw order (Z1, Z2),
    then the two chi-squares), theta = eta = rho = 0. Needs d >= 4.

    Parameters
    ----------
    n : int >= 1
    """
    task = _task(task)
    n = check_int("n", n, min_value=1)
    check_choice("on", on, ("sphere", "manifold"))
    _need_d4(task)
    check_allocation("n", (n, 5 + 11), what="the states (n, 5) and the draws behind them")
    rng = as_generator(rng)
    d = task.d
    out = np.zeros((n, 5), dtype=np.float64)
    if on == "sphere":
        z12 = rng.standard_normal((n, 2))
        z34 = rng.standard_normal((n, 2))
        q_k = rng.chisquare(d - 2, n)
        q_v = rng.chisquare(d - 2, n)
        z5 = rng.standard_normal(n)
        q_kv = rng.chisquare(d - 3, n)
        len_k = np.sqrt(z12[:, 0] ** 2 + z12[:, 1] ** 2 + q_k)
        len_v = np.sqrt(z34[:, 0] ** 2 + z34[:, 1] ** 2 + q_v)
        kappa, eta = z12[:, 0] / len_k, z12[:, 1] / len_k
        theta, nu = z34[:, 0] / len_v, z34[:, 1] / len_v
        rho = kappa * theta + eta * nu + np.sqrt(q_k * q_v) / (len_k * len_v) * z5 / np.sqrt(z5**2 + q_kv)
        out[:] = np.stack([kappa, nu, theta, eta, rho], axis=1)
    else:
        z = rng.standard_normal((n, 2))
        q1 = rng.chisquare(d - 2, n)
        q2 = rng.chisquare(d - 3, n)
        out[:, 0] = z[:, 0] / np.sqrt(z[:, 0] ** 2 + q1)
        out[:, 1] = z[:, 1] / np.sqrt(z[:, 1] ** 2 + q2)
    return out


def _need_d4(task):
    if task.d < 4:
        raise ValueError(
            f"d must be >= 4 for the five-scalar map and initial laws "
            f"(docs/models/single_location.md §6.4-§6.5); got d={task.d}"
        )


def random_oracle_directions(
    task: SingleLocationTask, rng: Annotated[Any, _V.seed_check] = None
) -> tuple[np.ndarray, np.ndarray]:
    """Draw (k*, v*): k* uniform on S^{d-1}, v* by Gram–Schmidt of a Gaussian against k*
    (docs/models/single_location.md §1 sampling recipe).
    """
    task = _task(task)
    rng = as_generator(rng)
    k_star = rng.standard_normal(task.d)
    k_star /= np.linalg.norm(k_star)
    v_star = rng.standard_normal(task.d)
    v_star -= (v_star @ k_star) * k_star
    v_star /= np.linalg.norm(v_star)
    return k_star, v_star


def vectors_from_state(
    task: SingleLocationTask, state: Annotated[Any, _REALS], rng: Annotated[Any, _V.seed_check] = None
):
    """Unit vectors (k, v, k*, v*) in R^d whose inner products are the given five scalars
    (docs/models/single_location.md §4.1, §6.4).

    Coordinates on (e1, e2, e3, e4) by Gram–Schmidt (k* = e1, v* = e2), then a random orthonormal 4-frame of R^d
    (QR of a d x 4 Gaussian matrix). ``state`` is (5,) or (n, 5); returns four arrays of shape (n, d) (or (d,)).
    Each state gets its own random frame. Needs d >= 4.
    """
    task = _task(task)
    _need_d4(task)
    rng = as_generator(rng)
    st = check_finite_array("state", state, ndim=(1, 2))
    single = st.ndim == 1
    st = np.atleast_2d(st)
    if st.shape[1] != 5:
        raise ValueError(f"state must have 5 columns (kappa, nu, theta, eta, rho); got shape {st.shape}")
    _check_state(*(np.ascontiguousarray(st[:, j]) for j in range(5)), where="state")
    kappa, nu, theta, eta, rho = st.T
    a = np.sqrt(np.maximum(1.0 - kappa**2 - eta**2, 0.0))
    b = np.where(a > 1e-150, (rho - kappa * theta - eta * nu) / np.where(a > 1e-150, a, 1.0), 0.0)
    cc = np.sqrt(np.maximum(1.0 - theta**2 - nu**2 - b**2, 0.0))
    n = st.shape[0]
    coords = np.zeros((n, 4, 4))  # (state, vector k/v/k*/v*, coordinate)
    coords[:, 0] = np.stack([kappa, eta, a, np.zeros(n)], axis=1)
    coords[:, 1] = np.stack([theta, nu, b, cc], axis=1)
    coords[:, 2, 0] = 1.0
    coords[:, 3, 1] = 1.0
    frames = np.linalg.qr(rng.standard_normal((n, task.d, 4)))[0]  # (n, d, 4), orthonormal columns
    vecs = np.einsum("nvc,ndc->nvd", coords, frames)
    vecs /= np.linalg.norm(vecs, axis=-1, keepdims=True)
    out = tuple(vecs[:, j] for j in range(4))
    return tuple(x[0] for x in out) if single else out


def sample_data(
    task: SingleLocationTask,
    n: Annotated[int, _V.Range(integer=True, ge=1)],
    rng: Annotated[Any, _V.seed_check] = None,
    *,
    k_star: Annotated[Any, _REALS],
    v_star: Annotated[Any, _REALS],
    location_probs: Annotated[Any, _V.Range(array=True, ge=0)] = None,
):
    """Draw n sequences from the data law: returns X (n, L, d), y (n,), j0 (n,) int (0-based positions).

    Implements docs/models/single_location.md §1 (paper Sec. 2): J0 ~ location_probs (uniform by default); x_J0 ~
    N(sqrt(d/2) k*, gamma^2 I); other tokens N(0, I); y = x_J0 . v* + xi, xi ~ N(0, eps^2). Draw order: j0, tokens,
    noise.

    Parameters
    ----------
    n : int >= 1
    location_probs : float or array >= 0
    """
    task = _task(task)
    n = check_int("n", n, min_value=1)
    rng = as_generator(rng)
    k_star = check_finite_array("k_star", k_star, shape=(task.d,))
    v_star = check_finite_array("v_star", v_star, shape=(task.d,))
    if abs(k_star @ k_star - 1) > 1e-10 or abs(v_star @ v_star - 1) > 1e-10 or abs(k_star @ v_star) > 1e-10:
        raise ValueError(
            "k_star and v_star must be orthonormal (docs/models/single_location.md §1, Assumption 1), to 1e-10"
        )
    p = _location_probs(task, location_probs)
    check_allocation("n", (n, task.L, task.d), what="the tokens X (n, L, d)")
    j0 = rng.choice(task.L, size=n, p=p)
    X = rng.standard_normal((n, task.L, task.d))
    rows = np.arange(n)
    X[rows, j0] = task.s * k_star + task.gamma * X[rows, j0]
    y = X[rows, j0] @ v_star + task.eps * rng.standard_normal(n)
    return X, y, j0


def predict_erf(
    X: Annotated[Any, _REALS], k: Annotated[Any, _REALS], v: Annotated[Any, _REALS], lam: Annotated[Any, _check_lam]
):
    """The erf predictor T_lambda(X) = sum_l erf(lambda x_l.k)(x_l.v) for X (..., L, d)
    (docs/models/single_location.md §2.3, paper Eq. (3)).

    Parameters
    ----------
    lam : float or array > 0
    """
    X = check_finite_array("X", X, ndim=tuple(range(2, 33)))
    lam = check_positive("lam", lam)
    d = X.shape[-1]
    k, v = (check_finite_array(name, a) for name, a in (("k", k), ("v", v)))
    for name, a in (("k", k), ("v", v)):
        if a.shape != (d,):
            raise ValueError(
                f"{name} must have shape (d,) with d = X.shape[-1] = {d} (X of shape (..., L, d)); "
                f"got {name} of shape {a.shape}"
            )
    return np.sum(_erf(lam * (X @ k)) * (X @ v), axis=-1)


# ----------------------------------------------------------------------------------------------------------------
# PGD


def _lam_sequence(lam, n_steps):
    """(lambda_0, ..., lambda_{n_steps}) and a JSON description, for a float, a LamSchedule or an array
    (docs/models/single_location.md §0.3).

    A constant gives a length-1 array. An array of length n_steps (one per update) is extended by repeating its last
    entry as the logging lambda of the final iterate; an array of length n_steps + 1 is used as is.
    """
    if isinstance(lam, LamSchedule):
        return lam(np.arange(n_steps + 1)), {"lam0": lam.lam0, "decay": lam.decay}
    arr = np.asarray(lam, dtype=np.float64)
    if arr.ndim == 0:
        val = check_positive("lam", float(arr))
        return np.array([val]), val
    arr = check_finite_array("lam", arr, ndim=1)
    if arr.shape[0] not in (n_steps, n_steps + 1):
        raise ValueError(
            f"lam as an array must have n_steps={n_steps} (one per update) or n_steps+1 entries; got {arr.shape[0]}"
        )
    if np.min(arr) <= 0:
        raise ValueError(f"lam must be > 0 at every step; got min {float(np.min(arr))!r}")
    if arr.shape[0] == n_steps:
        arr = np.append(arr, arr[-1])
    return arr, "array"


def _map_params(task, alpha, lams, s=None):
    """The map kernels' parameter row [s, gamma, L, alpha, eps] and their table of lambda constants (flat, one row per
    entry of ``lams``; the kernels' ``args = (table,)``; layout in _single_location_kernels).
    """
    s = task.s if s is None else s
    table = np.empty((lams.shape[0], _k.N_CONST))
    _k.lam_table(np.ascontiguousarray(lams), s, task.gamma, table)
    return np.array([s, task.gamma, float(task.L), alpha, task.eps]), table.ravel()


def _stack_params(pairs):
    """Per-trajectory (params (n, 5), tables (n, n_table)) from :func:`_map_params` pairs; the table is shared (1-D)
    when every trajectory's is the same.
    """
    params = np.array([p for p, _ in pairs])
    tables = np.array([t for _, t in pairs])
    return params, tables[0] if np.all(tables == tables[0]) else tables


def _batch_params(task, lam, alpha, d, n_traj, n_steps):
    """Per-trajectory or shared map parameters for :func:`map` (docs/models/single_location.md §6.3-§6.4: alpha, lambda
    and d enter the map only as numbers). Returns (params, table of lambda constants (1-D shared, 2-D one row per
    trajectory), lambda_0 per trajectory (n,), shared lambda sequence or None, n, descriptions).
    """
    lam_arr = None if isinstance(lam, LamSchedule) else np.asarray(lam, dtype=np.float64)
    per_lam = lam_arr is not None and lam_arr.ndim == 2
    alpha_arr = np.asarray(alpha, dtype=np.float64)
    d_arr = None if d is None else np.asarray(d)
    sizes = {"state0": n_traj}
    if per_lam:
        if lam_arr.shape[1] != 1:
            raise ValueError(
                "lam as a 2-D array is one constant per trajectory, shape (n_traj, 1); got "
                f"{lam_arr.shape} (a shared schedule is 1-D)"
            )
        sizes["lam"] = lam_arr.shape[0]
    if alpha_arr.ndim > 1:
        raise ValueError(f"alpha must be a number or a 1-D array (one per trajectory); got shape {alpha_arr.shape}")
    if alpha_arr.ndim == 1:
        sizes["alpha"] = alpha_arr.shape[0]
    if d_arr is not None and d_arr.ndim > 1:
        raise ValueError(f"d must be None, an int or a 1-D array (one per trajectory); got shape {d_arr.shape}")
    if d_arr is not None and d_arr.ndim == 1:
        sizes["d"] = d_arr.shape[0]
    batch = {k: v for k, v in sizes.items() if v != 1}
    if len(set(batch.values())) > 1:
        raise ValueError(f"state0, lam, alpha and d must broadcast against the batch; got sizes {sizes}")
    n = next(iter(batch.values())) if batch else 1
    alphas = np.broadcast_to(alpha_arr, (n,)).astype(np.float64)
    if not np.all(np.isfinite(alphas)) or np.min(alphas) <= 0:
        raise ValueError(f"alpha must be finite and > 0; got min {float(np.min(alphas))!r}")
    if d_arr is None:
        ds = np.full(n, task.d)
    else:
        if not np.issubdtype(d_arr.dtype, np.integer):
            if not np.all(np.isfinite(d_arr)) or np.any(d_arr != np.round(d_arr)):
                raise ValueError("d must be integers")
        ds = np.broadcast_to(d_arr, (n,)).astype(np.int64)
        if np.min(ds) < 4:
            raise ValueError(
                f"d must be >= 4 for the five-scalar map (docs/models/single_location.md §6.4); "
                f"got min {int(np.min(ds))}"
            )
    svals = np.sqrt(ds / 2.0)
    if per_lam:
        lam0 = np.broadcast_to(lam_arr[:, 0], (n,)).astype(np.float64)
        if not np.all(np.isfinite(lam0)) or np.min(lam0) <= 0:
            raise ValueError(f"lam must be finite and > 0; got min {float(np.min(lam0))!r}")
        rows = [_map_params(task, a, np.array([lam_i]), s) for a, lam_i, s in zip(alphas, lam0, svals)]
        return *_stack_params(rows), lam0, None, n, ("per-trajectory", alphas, ds)
    lams, lam_desc = _lam_sequence(lam, n_steps)
    if n == 1 or (alpha_arr.ndim == 0 and d_arr is None):
        return (
            *_map_params(task, float(alphas[0]), lams),
            np.full(n, lams[0]),
            lams,
            n,
            (lam_desc, float(alphas[0]), task.d),
        )
    rows = [_map_params(task, a, lams, s) for a, s in zip(alphas, svals)]
    return *_stack_params(rows), np.full(n, lams[0]), lams, n, (lam_desc, alphas, ds)


def _risk_variables(task, saved):
    """risk, excess_risk and distance_to_manifold of saved five-scalar rows (n, n_save, 6) with lambda in the last
    column (docs/models/single_location.md §4.2), by risk_core (16-node quadrature of zeta); for :func:`full_pgd`,
    whose saves are made in Python (``map`` computes the same variables in its compiled loop).
    """
    shape = saved.shape[:2]
    flat = [np.ascontiguousarray(saved[..., j]).ravel() for j in range(6)]
    r = np.empty(flat[0].shape[0])
    _k.risk_array(*flat, task.s, task.gamma, float(task.L), task.eps, r)
    r = r.reshape(shape)
    theta, eta, rho = saved[..., 2], saved[..., 3], saved[..., 4]
    return {"risk": r, "excess_risk": r - task.eps**2, "distance_to_manifold": np.sqrt(theta**2 + eta**2 + rho**2)}


def _off_manifold_zeros(Y, P):
    """theta, eta, rho and distance_to_manifold of a run on M (all zero)."""
    return {name: np.zeros(Y.shape[:2]) for name in ("distance_to_manifold", "theta", "eta", "rho")}


def map(
    task: SingleLocationTask,
    state0: Annotated[Any, _REALS],
    *,
    alpha: Annotated[Any, _V.Range(array=True, gt=0)],
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)],
    lam: Annotated[Any, _check_lam],
    saveat: Annotated[Any, _V.Instance(_SaveAt)] = None,
    manifold: bool = False,
    progress: bool = False,
    d: Annotated[Any, _V.Range(array=True, integer=True, ge=2)] = None,
    converged: Annotated[float | None, _V.Range(gt=0)] = None,
    warn_unconverged: bool = True,
):
    """Projected gradient descent on the population risk, run exactly on the five scalars (or on M).

    Implements docs/models/single_location.md §6.4 (exact five-scalar map, cost independent of d) or, with
    ``manifold=True``, docs/models/single_location.md §6.3 (reduced map on M, paper Lemma 7), both for the update of
    docs/models/single_location.md §6.1 (paper Definition 1), through ``dynamics.iterate``.

    Parameters
    ----------
    task : SingleLocationTask
        The task; its dimension d must be >= 4.
    state0 : (n, 5) or (5,) float64 (kappa, nu, theta, eta, rho); with ``manifold=True`` also (n, 2) (kappa, nu) or
        (n, 5) with theta = eta = rho = 0.
    alpha : float > 0 or (n,) array
        Step size, shared or one per trajectory.
    n_steps : int >= 0
        Number of updates.
    lam : float > 0, ``LamSchedule`` (``lam_schedule(lam0, decay)``), 1-D array of lambda_n, or (n, 1) array
        A 1-D array is a schedule shared by every trajectory, with one entry per update (n_steps) or also the final
        iterate's logging lambda (n_steps + 1); an (n, 1) array is one constant lambda per trajectory.
    saveat : dynamics.SaveAt, optional
        Steps to record (default ``SaveAt(n=201)``).
    manifold : bool
        Run the two-scalar map on M.
    d : int or (n,) int array, >= 2, optional
        Token dimension per trajectory (default ``task.d``); d enters the map only through s = sqrt(d/2).
    converged : float > 0, optional
        Stop each trajectory, inside the compiled loop, once one update moves none of its scalars by more than
        ``converged`` (its last state is then carried to the later save points, and ``stopped_at`` records the
        step); for basin maps and runs to convergence. With a decreasing lambda schedule the lambda column keeps
        moving, so use it with a constant lambda.
    warn_unconverged : bool, default True
        Warn (``dynamics.UnconvergedWarning``) when a trajectory ends unconverged: its last update moves a state
        scalar by ``converged`` or more (default 1e-8; with a decreasing lambda schedule, at least twice the
        schedule's own last increment, since the lambda column moves by that much at every step). With a constant
        lambda the map has fixed points (docs/models/single_location.md §7), so both a run that is still converging
        and one that is not (the step-size instability and chaotic windows of §7.4 and §9.7, e.g. d = 1000,
        lambda >= 0.3, alpha = 4e-3) warn; with a schedule only the latter. The variables ``final_step_norm``,
        ``converged`` and ``step_norm_trend`` (``dynamics.convergence``) are returned either way.

    Arrays of size n (lam (n, 1), alpha (n,), d (n,)) broadcast with the batch: a single state0 row is repeated.

    Returns
    -------
    dynamics.Trajectory with variables kappa, nu, theta, eta, rho, lam (lambda_n of the row), risk (true MSE of
    iterate n at lambda_n, at the trajectory's d), excess_risk (risk - eps^2), distance_to_manifold; time = step
    (docs/models/single_location.md §0.3). The risks are computed inside the compiled loop at every save, from the
    zeta values the update itself uses (series form), so they equal :func:`risk` to a few ulp of its terms.

    Raises
    ------
    ValueError for bad input (naming the parameter and the shapes); dynamics.DivergenceError if a step produces a
    non-finite value.
    """
    task = _task(task)
    _need_d4(task)
    n_steps = check_int("n_steps", n_steps, min_value=0)
    st = check_finite_array("state0", state0, ndim=(1, 2))
    st = np.atleast_2d(st)
    if manifold:
        if st.shape[1] == 5:
            if np.any(st[:, 2:] != 0):
                raise ValueError(
                    "state0 with manifold=True must have theta = eta = rho = 0 "
                    "(a point of M, docs/models/single_location.md §5.1)"
                )

            st = st[:, :2]
        if st.shape[1] != 2:
            raise ValueError(f"state0 with manifold=True must have 2 (kappa, nu) or 5 columns; got shape {st.shape}")
        full = np.concatenate([st, np.zeros((st.shape[0], 3))], axis=1)
    else:
        if st.shape[1] != 5:
            raise ValueError(f"state0 must have 5 columns (kappa, nu, theta, eta, rho); got shape {st.shape}")
        full = st
    _check_state(*(np.ascontiguousarray(full[:, j]) for j in range(5)), where="state0")
    p, table, lam0, lams, n, (lam_desc, alpha_desc, d_desc) = _batch_params(task, lam, alpha, d, st.shape[0], n_steps)
    st = np.broadcast_to(st, (n, st.shape[1]))
    x0 = np.concatenate([st, lam0[:, None]], axis=1)
    names = ["kappa", "nu", "lam"] if manifold else ["kappa", "nu", "theta", "eta", "rho", "lam"]
    step = _k.manifold_step if manifold else _k.five_step
    attrs = {
        "model": "single_location",
        "spec": task,
        "source": "closedform",
        "time_unit": TIME_UNIT,
        "equation": "docs/models/single_location.md §6.3 (Lemma 7)"
        if manifold
        else "docs/models/single_location.md §6.4",
        "config": {"alpha": alpha_desc, "n_steps": n_steps, "lam": lam_desc, "manifold": bool(manifold), "d": d_desc},
    }
    constant = lams is None or np.ptp(lams) == 0
    tol = (
        converged
        if converged is not None
        else max(CONVERGENCE_TOL, 0.0 if constant else 2.0 * float(abs(lams[-1] - lams[-2])))
    )
    if manifold:
        observe = dict(
            observe=_k.manifold_observe,
            observe_names=_k.MANIFOLD_OBSERVABLE_NAMES,
            step_observe=_k.manifold_step_observe,
            derived=_off_manifold_zeros,
        )
    else:
        observe = dict(observe=_k.five_observe, observe_names=_k.OBSERVABLE_NAMES, step_observe=_k.five_step_observe)
    traj = dynamics.iterate(
        step,
        x0,
        n_steps,
        params=p,
        args=(table,),
        args_per_trajectory=table.ndim == 2,
        saveat=saveat,
        names=names,
        progress=progress,
        attrs=attrs,
        converged=converged,
        convergence_tol=tol,
        **observe,
    )
    return check_run(traj, warn_unconverged, what="single_location.map", fixed_points=constant, tol=tol)


def full_pgd(
    task: SingleLocationTask,
    k0: Annotated[Any, _REALS],
    v0: Annotated[Any, _REALS],
    k_star: Annotated[Any, _REALS],
    v_star: Annotated[Any, _REALS],
    *,
    alpha: Annotated[float, _V.Range(gt=0)],
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)],
    lam: Annotated[Any, _check_lam],
    save_every: Annotated[int, _V.Range(integer=True, ge=1)] = 1,
    save_vectors: bool = False,
    warn_unconverged: bool = True,
):
    """Brute-force PGD with d-dimensional vectors and the chain-rule gradient (reference for the reduced maps).

    Implements docs/models/single_location.md §6.1 (paper Definition 1) with grad_k R = R_kappa k* + R_eta v* + R_rho v
    and grad_v R = R_nu v* + R_theta k* + R_rho k (docs/models/single_location.md §4.3), tangent projection and
    normalisation, in plain numpy (O(d) per step and trajectory).

    Parameters
    ----------
    k0, v0 : (d,) or (n, d) unit vectors; k_star, v_star : (d,) orthonormal.
    alpha : float > 0 or (n,) array
        As in :func:`map`.
    n_steps : int >= 0
        As in :func:`map`.
    lam : float > 0 or 1-D array
        As in :func:`map`.
    save_every : int >= 1
        Record every ``save_every`` steps (and the last step).
    save_vectors : bool
        Also store ``k`` and ``v`` as variables of shape (trajectory, time, d).
    warn_unconverged : bool, default True
        As in :func:`map`, with the step norm taken over the six scalars (kappa, ..., rho, lambda) of each update.

    Returns
    -------
    dynamics.Trajectory with the variables of :func:`map`, the scalars computed as inner products of the vectors,
    and the convergence diagnostics ``final_step_norm``, ``converged``, ``step_norm_trend`` of :func:`map`.
    """
    task = _task(task)
    alpha = check_positive("alpha", alpha)
    n_steps = check_int("n_steps", n_steps, min_value=0)
    save_every = check_int("save_every", save_every, min_value=1)
    k = np.atleast_2d(check_finite_array("k0", k0, ndim=(1, 2))).copy()
    v = np.atleast_2d(check_finite_array("v0", v0, ndim=(1, 2))).copy()
    ks = check_finite_array("k_star", k_star, shape=(task.d,))
    vs = check_finite_array("v_star", v_star, shape=(task.d,))
    if k.shape != v.shape or k.shape[1] != task.d:
        raise ValueError(f"k0 and v0 must have the same shape (n, d={task.d}); got {k.shape} and {v.shape}")
    for name, x in (("k0", k), ("v0", v)):
        if np.max(np.abs(np.linalg.norm(x, axis=1) - 1.0)) > 1e-10:
            raise ValueError(f"{name} must be unit vectors (to 1e-10)")
    lams, lam_desc = _lam_sequence(lam, n_steps)
    lams = np.broadcast_to(lams, (n_steps + 1,))
    steps = np.unique(np.append(np.arange(0, n_steps + 1, save_every), n_steps))
    n = k.shape[0]
    saved = np.empty((n, steps.size, 6))
    vec_k = np.empty((n, steps.size, task.d)) if save_vectors else None
    vec_v = np.empty((n, steps.size, task.d)) if save_vectors else None
    partials = np.empty((n, 5))
    s, gamma, L = task.s, task.gamma, float(task.L)
    j = 0
    blocks, recorded, previous, moved, mid = tail_blocks(0, n_steps), {}, None, np.full(n, np.nan), None
    tail = set(np.concatenate(blocks).tolist()) if blocks else set()
    for step in range(n_steps + 1):
        sc = [k @ ks, v @ vs, v @ ks, k @ vs, np.sum(k * v, axis=1)]
        current = np.stack(sc + [np.full(n, lams[step])], axis=1)
        if previous is not None:  # the max-norm of the update into this step, as the engine's final_step_norm
            moved = np.max(np.abs(current - previous), axis=1)
            if step in tail:
                recorded[step] = moved
                if step == blocks[0][-1]:
                    mid = current  # the scalars at the first tail point, for the displacement
        previous = current
        if step == steps[j]:
            saved[:, j, :5] = np.stack(sc, axis=1)
            saved[:, j, 5] = lams[step]
            if save_vectors:
                vec_k[:, j], vec_v[:, j] = k, v
            j += 1
        if step == n_steps:
            break
        lam_vec = np.full(n, lams[step])
        _k.partials_array(*(np.ascontiguousarray(x) for x in sc), lam_vec, s, gamma, L, partials)
        r_k, r_n, r_t, r_e, r_r = (partials[:, i : i + 1] for i in range(5))
        grad_k = r_k * ks + r_e * vs + r_r * v
        grad_v = r_n * vs + r_t * ks + r_r * k
        grad_k -= np.sum(grad_k * k, axis=1, keepdims=True) * k
        grad_v -= np.sum(grad_v * v, axis=1, keepdims=True) * v
        k_new = k - alpha * grad_k
        v_new = v - alpha * grad_v
        k = k_new / np.linalg.norm(k_new, axis=1, keepdims=True)
        v = v_new / np.linalg.norm(v_new, axis=1, keepdims=True)
        if not (np.all(np.isfinite(k)) and np.all(np.isfinite(v))):
            bad = int(np.argmax(~np.all(np.isfinite(k), axis=1) | ~np.all(np.isfinite(v), axis=1)))
            raise dynamics.DivergenceError(
                f"full_pgd: non-finite vector at step {step + 1}, trajectory {bad}",
                trajectory=bad,
                variable="k/v",
                step=step + 1,
                time=float(step + 1),
            )
    derived = _risk_variables(task, saved)
    if save_vectors:
        derived.update(k=vec_k, v=vec_v)
    attrs = {
        "model": "single_location",
        "spec": task,
        "source": "closedform-vectors",
        "time_unit": TIME_UNIT,
        "equation": "docs/models/single_location.md §6.1, §4.3",
        "config": {"alpha": alpha, "n_steps": n_steps, "lam": lam_desc, "save_every": save_every},
    }
    constant = np.ptp(lams) == 0
    tol = max(CONVERGENCE_TOL, 0.0 if constant else 2.0 * float(abs(lams[-1] - lams[-2])))
    samples, ends = block_samples(blocks, recorded)
    trend = step_norm_trend(
        np.stack(samples, axis=1) if samples else np.empty((n, 0)),
        ends,
        None if mid is None else np.max(np.abs(previous - mid), axis=1),
    )
    diagnostics = {"final_step_norm": moved, "converged": moved < tol, "step_norm_trend": trend}
    traj = dynamics.Trajectory.from_arrays(
        saved,
        names=["kappa", "nu", "theta", "eta", "rho", "lam"],
        time=steps.astype(np.float64),
        step=steps,
        variables=derived,
        attrs=attrs,
        per_trajectory=diagnostics,
    )
    return check_run(traj, warn_unconverged, what="single_location.full_pgd", fixed_points=constant, tol=tol)


def theorem_predictions(task: SingleLocationTask, lam: Annotated[float, _check_lam]) -> dict[str, float]:
    """The paper's named risk predictions for ``task`` at temperature ``lam``, assembled from the closed forms.

    Keys (each a float):

    * ``oracle_risk``: R_lambda(k*, v*) of the erf oracle, paper Theorem 1 ("in particular" part),
      docs/models/single_location.md §5.2.
    * ``oracle_excess_risk``: ``oracle_risk`` - eps^2; it tends to 0 under Corollary 2's scaling
      (docs/models/single_location.md §5.3).
    * ``bayes_risk_lower_bound``: eps^2, paper Eq. (8) (docs/models/single_location.md §5.3).
    * ``linear_risk``: risk of the optimal linear predictor, uniform J0, paper Proposition 3
      (docs/models/single_location.md §5.4).
    * ``null_risk``: eps^2 + gamma^2, the risk of the zero predictor (the large-L limit of ``linear_risk``,
      docs/models/single_location.md §5.4).

    Parameters
    ----------
    lam : float or array > 0
    """
    task = _task(task)
    lam = check_positive("lam", lam)
    oracle = float(oracle_risk(task, lam))
    eps2 = bayes_risk_lower_bound(task)
    return {
        "oracle_risk": oracle,
        "oracle_excess_risk": oracle - eps2,
        "bayes_risk_lower_bound": eps2,
        "linear_risk": linear_risk(task),
        "null_risk": eps2 + task.gamma**2,
    }


# ----------------------------------------------------------------------------------------------------------------
# argument checks of every public function and class (dynamics.validation): each parameter's rule is declared at its
# definition (a class annotation, or a rule in its ``Annotated`` metadata; the shared ones below), then each
# function's own checks (state in [-1, 1], PSD Gram matrix, ...)

from dynamics import SaveAt as _SaveAt  # noqa: E402
from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)


def _check_lam(name: str, value) -> None:
    """lambda: a schedule, or a positive finite number or array (one per step)."""
    if not isinstance(value, LamSchedule):
        _LAM(name, value)


def _check_points(name: str, value) -> None:
    """Known fixed points: a sequence of FixedPoint (as returned by fixed_points)."""
    if (
        isinstance(value, str | bytes)
        or not isinstance(value, list | tuple)
        or not all(isinstance(p, FixedPoint) for p in value)
    ):
        raise _V.ArgumentTypeError(
            f"{name} must be a tuple of FixedPoint (from fixed_points) or None; got {type(value).__name__}"
        )


_LAM = _V.Range(array=True, gt=0)
_check_lam.range = _LAM  # the range it enforces on numbers (read by dynamics.validation.argument_rules)
_REALS = _V.Range(array=True)
_V.validate_module(globals())
