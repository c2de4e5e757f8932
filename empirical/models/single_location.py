"""Torch side of single-location regression: erf and softmax predictors trained by online stochastic PGD.

Implements docs/models/single_location.md §1 (data law), docs/models/single_location.md §2.2 (softmax predictor),
docs/models/single_location.md §2.3 (erf predictor, paper Eq. (3)), docs/models/single_location.md §6.1 (projected
update, paper Definition 1) with the stochastic mini-batch gradient of docs/models/single_location.md §8.4 (Fig. 5
protocol), and the probes of docs/models/single_location.md §4.1, §5.1, for the shared trainer
:func:`empirical.train.train`. Reference: :data:`closedform.single_location.REFERENCE` (Marion, Berthier, Biau, Boyer,
ICLR 2025). The Transformer and the multiple-location models (docs/models/single_location.md §8.7-§8.9) live in
:mod:`empirical.models.single_location_transformer`.

Symbol table
------------
Sections (§) in the last column are those of docs/models/single_location.md.

===================== ============== ============================================== =============== ==========
code                  paper symbol   meaning                                        shape           spec
===================== ============== ============================================== =============== ==========
task                  (d, L, gamma,  the task: closedform SingleLocationTask        dataclass       §1
                      eps)
k_star, v_star        k*, v*         oracle directions (orthonormal; shared by the  (d,) float64    §1
                                     seeds of one model object)
X, y                  X, Y           tokens, output                                 (S, B, L, d),   §1
                                                                                    (S, B)
k, v                  k, v           trained key / value directions (unit)          (S, d)          §2.3
lam                   lambda_n       inverse temperature of update / row n          float           §0.3, §6.1
kappa, nu, theta,     kappa, nu,     k.k*, v.v*, v.k*, k.v*, k.v                    (S,)            §4.1
eta, rho              theta, eta,
                      rho
distance_to_manifold  dist_M         sqrt(theta^2 + eta^2 + rho^2)                  (S,)            §5.1
risk                  R_lambda       test MSE (eps^2 included) of iterate n at      (S,)            §0.3, §8.4
                                     lambda_n on the fixed evaluation batch
excess_risk           R - eps^2      risk - eps^2 (may be negative: it is noisy)    (S,)            §0.1, §8.4
===================== ============== ============================================== =============== ==========

The logged variables (``kappa, nu, theta, eta, rho, distance_to_manifold, risk, excess_risk, lam``) are exactly those
of :func:`closedform.single_location.map`, on the same time axis (time = step, the state after ``step`` updates; the
row at step n holds iterate n and lambda_n, docs/models/single_location.md §0.3), so an overlay is an ``xarray``
alignment.

Loss (docs/models/single_location.md §8.4): the mini-batch mean squared error (1/B) sum_b (T(X_b) - Y_b)^2, no factor
1/2, so that its population version is the closed-form risk R of docs/models/single_location.md §4.2 (true MSE, eps^2
included). The trainer's ``sphere_params`` give the update of docs/models/single_location.md §6.1: tangent projection of
the gradient, a step of size alpha (= the trainer's ``lr``), normalisation.

Example (Fig. 5 protocol, 30 seeds at once)::

    from closedform.single_location import SingleLocationTask
    from empirical.models import single_location as slm
    from empirical.train import train

    task = SingleLocationTask(d=80, L=10, noise=0.1)
    model = slm.build(task, rng=0)                       # erf predictor, sphere initialisation
    traj = train(model, slm.config("fig5", range(30), n_steps=200_000), device="auto")
    traj["kappa"], traj["excess_risk"]                   # (trajectory=30, time=401)

Notes
-----
* One model object holds one pair (k*, v*), shared by its seeds (the seeds repeat over initialisation and data).
  The data law and the sphere/manifold initialisations are rotation invariant, so the joint law of every logged
  quantity of one seed is the same as with a fresh (k*, v*) per repeat (the authors' protocol,
  docs/models/single_location.md §9.5).
* Data are drawn by :meth:`SingleLocationAttention.draw` from the trainer's counter-keyed block streams
  (:class:`empirical.seeding.BlockRNG`): float64 normals for all seeds in one compiled call, each seed's numbers
  independent of the other seeds. :func:`sample_batch` / ``sample`` draw the same law from a ``torch.Generator``.
* The projections (X k, X v) are one batched matmul over the seed axis, laid out as (k, v)^T X^T (about twice as fast
  on CPU as X (k, v) and its backward); on CPU (torch 2.13) each seed's product is computed as by itself, so a seed
  trained among others is bitwise equal to its single-seed run (a test checks it; on other BLAS builds expect
  agreement to rounding, as the trainer's contract allows).
* The softmax predictor has no closed-form risk (docs/models/single_location.md §2.2); it is checked against the Monte
  Carlo reference values of docs/models/single_location.md §10.4.
"""

from __future__ import annotations

from typing import Annotated, Any
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numba import njit

from closedform.single_location import (
    REFERENCE,
    TIME_UNIT,
    LamSchedule,
    SingleLocationTask,
    random_oracle_directions,
)
from dynamics.random import as_generator
from dynamics.saveat import SaveAt
from dynamics.validation import (
    check_choice,
    check_finite_array,
    check_int,
    check_positive,
)
from empirical.models import dispatch_config
from empirical.models._fastexp import exp_shifted as _exp_shifted
from empirical.train import Schedule, TrainConfig, per_seed

__all__ = [
    "INITS",
    "PREDICTORS",
    "REFERENCE",
    "SingleLocationAttention",
    "SingleLocationModelSpec",
    "as_train_schedule",
    "build",
    "config",
    "init_from_state",
    "predict",
    "sample_batch",
]

#: Predictors of docs/models/single_location.md §2.2-§2.3.
PREDICTORS: tuple[str, ...] = ("erf", "softmax")
#: Initial laws of docs/models/single_location.md §6.5 (an explicit five-scalar state is the third option).
INITS: tuple[str, ...] = ("sphere", "manifold")

# Orthonormality tolerance of (k*, v*): float64 Gram–Schmidt is exact to ~1e-15; 1e-10 rejects only wrong inputs.
_ORTHO_TOL = 1e-10


# ----------------------------------------------------------------------------------------------------------------
# data, predictors, initial vectors


def _check_oracle(task: SingleLocationTask, k_star, v_star) -> tuple[np.ndarray, np.ndarray]:
    ks = check_finite_array("k_star", k_star, shape=(task.d,))
    vs = check_finite_array("v_star", v_star, shape=(task.d,))
    if abs(ks @ ks - 1) > _ORTHO_TOL or abs(vs @ vs - 1) > _ORTHO_TOL or abs(ks @ vs) > _ORTHO_TOL:
        raise ValueError(
            "k_star and v_star must be orthonormal (docs/models/single_location.md §1, Assumption 1), to 1e-10"
        )
    return np.ascontiguousarray(ks), np.ascontiguousarray(vs)


def sample_batch(
    task: SingleLocationTask,
    k_star: Annotated[torch.Tensor, _V.Array(ndim=1)],
    v_star: Annotated[torch.Tensor, _V.Array(ndim=1)],
    generator: torch.Generator,
    n: int,
) -> dict[str, torch.Tensor]:
    """Draw n sequences of the data law: ``{"X": (n, L, d), "y": (n,)}`` on the device/dtype of ``k_star``.

    Implements docs/models/single_location.md §1 (paper Sec. 2) with uniform J0: x_J0 ~ N(sqrt(d/2) k*, gamma^2 I),
    the other tokens N(0, I), y = x_J0 . v* + eps xi. Draw order (as :func:`closedform.single_location.sample_data`):
    J0, tokens, noise, all from ``generator``. (The trainer uses the faster :meth:`SingleLocationAttention.draw`, the
    same law from counter-keyed streams.)
    """
    n = check_int("n", n, min_value=1)
    dev, dt = k_star.device, k_star.dtype
    j0 = torch.randint(task.L, (n,), generator=generator, device=dev)
    X = torch.randn(n, task.L, task.d, generator=generator, device=dev, dtype=dt)
    xi = torch.randn(n, generator=generator, device=dev, dtype=dt)
    return {k: v[0] for k, v in _place_signal(task, k_star, v_star, j0[None], X[None], xi[None]).items()}


@njit(cache=True)
def _place_signal_kernel(X, j0, xi, k_star, v_star, s, gamma, eps, y):  # pragma: no cover (compiled)
    """In place: X[a, i, j0[a, i]] <- s k* + gamma X[a, i, j0[a, i]]; y[a, i] = that token . v* + eps xi[a, i]."""
    S, n, L, d = X.shape
    for a in range(S):
        for i in range(n):
            ell = j0[a, i]
            acc = 0.0
            for j in range(d):
                x = s * k_star[j] + gamma * X[a, i, ell, j]
                X[a, i, ell, j] = x
                acc += x * v_star[j]
            y[a, i] = acc + eps * xi[a, i]


def _place_signal(task, k_star, v_star, j0, X, xi) -> dict[str, torch.Tensor]:
    """Data law of docs/models/single_location.md §1 from its normals: j0 (S, n), X (S, n, L, d) all N(0, I), xi (S, n).

    The token at J0 becomes x_J0 = sqrt(d/2) k* + gamma z (z its standard normal), and y = x_J0 . v* + eps xi;
    X is modified in place. Returns ``{"X": X, "y": y}`` with the leading axis of the inputs. On CPU one compiled
    loop (a per-step cost of a few microseconds instead of seven torch calls); elsewhere torch operations.
    """
    if X.device.type == "cpu":
        y = torch.empty(j0.shape, dtype=X.dtype)
        _place_signal_kernel(
            X.numpy(), j0.numpy(), xi.numpy(), k_star.numpy(), v_star.numpy(), task.s, task.gamma, task.eps, y.numpy()
        )
        return {"X": X, "y": y}
    return _place_signal_torch(task, k_star, v_star, j0, X, xi)


def _place_signal_torch(task, k_star, v_star, j0, X, xi) -> dict[str, torch.Tensor]:
    """:func:`_place_signal` in torch operations (any device; X contiguous)."""
    S, n = j0.shape
    tokens = X.view(S * n * task.L, task.d)
    rows = torch.arange(0, S * n * task.L, task.L, device=X.device).add_(j0.reshape(-1))  # token J0 of each sequence
    x_inf = tokens.index_select(0, rows).mul_(task.gamma).add_(k_star, alpha=task.s)  # (S n, d)
    tokens.index_copy_(0, rows, x_inf)
    # Row-wise product and sum (not a matrix-vector product, whose BLAS blocking may depend on the number of rows):
    # a seed's y never depends on the other seeds of the run.
    return {"X": X, "y": torch.add((x_inf * v_star).sum(-1).view(S, n), xi, alpha=task.eps)}


def predict(
    X: Annotated[torch.Tensor, _tensor(ndim=4)],
    k: Annotated[torch.Tensor, _tensor(ndim=2)],
    v: Annotated[torch.Tensor, _tensor(ndim=2)],
    lam: float,
    predictor: Annotated[str, _V.OneOf(*PREDICTORS)] = "erf",
) -> torch.Tensor:
    """The erf or softmax predictor for X (S, B, L, d) and k, v (S, d); returns (S, B).

    ``"erf"``: T_lambda(X) = sum_l erf(lambda x_l.k)(x_l.v) (docs/models/single_location.md §2.3, paper Eq. (3); no
    normalisation). ``"softmax"``: T^soft_lambda(X) = sum_l softmax(lambda X k)_l (x_l.v)
    (docs/models/single_location.md §2.2; ``torch.softmax``). The projections (x_l.k, x_l.v) are one batched matmul per
    seed, see the module Notes. The tensors are checked (real, finite, consistent shapes); the training step calls
    an unchecked version.
    """
    _V.check_shapes(X=(X, "S B L d"), k=(k, "S d"), v=(v, "S d"))
    return _predict(X, k, v, lam, predictor)


def _predict(X, k, v, lam, predictor):
    """:func:`predict` without its argument checks (the training step's path)."""
    S, B, L, d = X.shape
    ab = torch.bmm(torch.stack([k, v], dim=1), X.reshape(S, B * L, d).transpose(1, 2)).reshape(S, 2, B, L)
    a, b = ab[:, 0], ab[:, 1]  # x_l.k, x_l.v: (S, B, L)
    if predictor == "erf":
        w = torch.erf(lam * a)
    elif predictor == "softmax":
        w = torch.softmax(lam * a, dim=-1)
    else:
        raise ValueError(f"predictor must be one of {PREDICTORS}; got {predictor!r}")
    return (w * b).sum(-1)


# Reassociation lets LLVM vectorise the dot products over d (~2x faster). The kernel is only ever called with a
# C-contiguous X (see _ErfMSE), so it is one compiled loop whatever S is: a seed's sums never depend on the others.
# exp(-(lam a)^2) of a sample's L tokens is one vectorised loop (icl_regression's Cody-Waite exp, tested there to
# ~1 ulp) instead of L libm calls, the projections take two tokens per pass and the gradient accumulates four tokens
# per pass over (gk, gv), whose read-modify-writes bound that loop: together ~25 % of the kernel (1.95 -> 1.5 us a
# seed-step at Fig. 5's sizes).
@njit(cache=True, fastmath={"reassoc", "contract"})
def _erf_mse_kernel(X, y, k, v, lam, with_grad, loss, gk, gv):  # pragma: no cover (compiled; tested via erf_mse)
    """Per seed s: loss[s] = (1/B) sum_b (T(X_sb) - y_sb)^2 with T = sum_l erf(lam x.k)(x.v), and its gradients
    gk[s] = dloss/dk, gv[s] = dloss/dv (if ``with_grad``), in one pass over X (S, B, L, d). See :func:`erf_mse`.
    """
    S, B, L, d = X.shape
    c = 2.0 * lam / math.sqrt(math.pi)  # d/da erf(lam a) = c exp(-(lam a)^2)
    q = np.empty(L)
    bv = np.empty(L)
    e = np.empty(L)
    ex = np.empty(L)
    ta = np.empty(L)
    ck = np.empty(L)
    cv = np.empty(L)
    kbits = np.empty(L, dtype=np.int64)
    kscale = kbits.view(np.float64)
    for s in range(S):
        acc = 0.0
        for j in range(d):
            gk[s, j] = 0.0
            gv[s, j] = 0.0
        for b in range(B):
            pred = 0.0
            # x_l.k and x_l.v of two tokens per pass (k, v loaded once for both), then the nonlinearities
            ell = 0
            while ell + 2 <= L:
                sa0 = 0.0
                sb0 = 0.0
                sa1 = 0.0
                sb1 = 0.0
                for j in range(d):
                    kj = k[s, j]
                    vj = v[s, j]
                    x0 = X[s, b, ell, j]
                    x1 = X[s, b, ell + 1, j]
                    sa0 += x0 * kj
                    sb0 += x0 * vj
                    sa1 += x1 * kj
                    sb1 += x1 * vj
                ta[ell] = sa0
                ta[ell + 1] = sa1
                bv[ell] = sb0
                bv[ell + 1] = sb1
                ell += 2
            while ell < L:
                sa0 = 0.0
                sb0 = 0.0
                for j in range(d):
                    x0 = X[s, b, ell, j]
                    sa0 += x0 * k[s, j]
                    sb0 += x0 * v[s, j]
                ta[ell] = sa0
                bv[ell] = sb0
                ell += 1
            for ell in range(L):
                t = lam * ta[ell]
                q[ell] = -(t * t)
                e[ell] = math.erf(t)
                pred += e[ell] * bv[ell]
            r = pred - y[s, b]
            acc += r * r
            if with_grad:
                coef = 2.0 * r / B
                _exp_shifted(q, 0.0, L, ex, kbits, kscale)  # ex[ell] = exp(-(lam a_ell)^2), one vectorised loop
                for ell in range(L):
                    ck[ell] = coef * bv[ell] * c * ex[ell]
                    cv[ell] = coef * e[ell]
                # gk += sum_l ck_l x_l, gv += sum_l cv_l x_l, four tokens per pass over (gk, gv): a quarter of the
                # read-modify-writes of the accumulators, which bound this loop
                ell = 0
                while ell + 4 <= L:
                    ck0, ck1, ck2, ck3 = ck[ell], ck[ell + 1], ck[ell + 2], ck[ell + 3]
                    cv0, cv1, cv2, cv3 = cv[ell], cv[ell + 1], cv[ell + 2], cv[ell + 3]
                    for j in range(d):
                        x0 = X[s, b, ell, j]
                        x1 = X[s, b, ell + 1, j]
                        x2 = X[s, b, ell + 2, j]
                        x3 = X[s, b, ell + 3, j]
                        gk[s, j] += (ck0 * x0 + ck1 * x1) + (ck2 * x2 + ck3 * x3)
                        gv[s, j] += (cv0 * x0 + cv1 * x1) + (cv2 * x2 + cv3 * x3)
                    ell += 4
                while ell < L:
                    ck0, cv0 = ck[ell], cv[ell]
                    for j in range(d):
                        x0 = X[s, b, ell, j]
                        gk[s, j] += ck0 * x0
                        gv[s, j] += cv0 * x0
                    ell += 1
        loss[s] = acc / B


class _ErfMSE(torch.autograd.Function):
    """Autograd wrapper of :func:`_erf_mse_kernel`: the gradient is computed in the forward pass and scaled by the
    incoming per-seed gradient in the backward pass.
    """

    @staticmethod
    def forward(ctx, k, v, X, y, lam):
        S, d = k.shape
        with_grad = k.requires_grad or v.requires_grad
        loss = np.empty(S)
        gk = np.empty((S, d))
        gv = np.empty((S, d))
        X, y, k, v = (t.detach().contiguous().numpy() for t in (X, y, k, v))  # one layout: see the kernel
        _erf_mse_kernel(X, y, k, v, float(lam), with_grad, loss, gk, gv)
        ctx.save_for_backward(torch.from_numpy(gk), torch.from_numpy(gv))
        return torch.from_numpy(loss)

    @staticmethod
    def backward(ctx, grad_loss):
        gk, gv = ctx.saved_tensors
        return grad_loss[:, None] * gk, grad_loss[:, None] * gv, None, None, None


def erf_mse(
    X: Annotated[torch.Tensor, _tensor(ndim=4)],
    y: Annotated[torch.Tensor, _tensor(ndim=2)],
    k: Annotated[torch.Tensor, _tensor(ndim=2)],
    v: Annotated[torch.Tensor, _tensor(ndim=2)],
    lam: float,
) -> torch.Tensor:
    """Per-seed mini-batch MSE of the erf predictor, (1/B) sum_b (T_lambda(X_b) - y_b)^2, shape (S,), differentiable
    in (k, v) (docs/models/single_location.md §2.3, §8.4).

    The same number as ``((predict(X, k, v, lam) - y) ** 2).mean(-1)``, computed by a compiled kernel that reads each
    sample once and forms the gradient on the way, with the hand-derived derivatives
    dT/dk = sum_l (2 lam / sqrt(pi)) exp(-(lam x_l.k)^2) (x_l.v) x_l and dT/dv = sum_l erf(lam x_l.k) x_l
    (tested against torch autograd of :func:`predict`). On CPU in float64 it is ~5x faster than the batched-matmul
    autograd path, whose cost is dominated by small GEMM calls per seed. Each seed is computed by itself, so a seed
    trained among others is bitwise equal to its single-seed run. CPU float64 tensors only (see :meth:`loss`). The
    tensors are checked (real, finite, consistent shapes); the training step calls the kernel's autograd function
    directly.
    """
    _V.check_shapes(X=(X, "S B L d"), y=(y, "S B"), k=(k, "S d"), v=(v, "S d"))
    return _ErfMSE.apply(k, v, X, y, lam)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)


def _complement_pair(k_star, v_star, generator, d):
    """Orthonormal (e3, e4), orthogonal to k* and v*, from two Gaussian vectors (Gram–Schmidt, twice for accuracy)."""
    basis = [k_star, v_star]
    out = []
    for _ in range(2):
        e = torch.randn(d, generator=generator, device=k_star.device, dtype=k_star.dtype)
        for _ in range(2):
            for b in basis:
                e = e - (e @ b) * b
        e = _unit(e)
        basis.append(e)
        out.append(e)
    return out


def init_from_state(
    state: Annotated[Any, _V.Range(array=True)],
    k_star: Annotated[torch.Tensor, _V.Array(ndim=1)],
    v_star: Annotated[torch.Tensor, _V.Array(ndim=1)],
    generator: torch.Generator,
):
    """Unit vectors (k, v) whose inner products with (k*, v*) and each other are the five scalars of ``state``.

    Implements the Gram-matrix parametrisation of docs/models/single_location.md §4.1 (the same coordinates as
    :func:`closedform.single_location.vectors_from_state`): with (e3, e4) a random orthonormal pair orthogonal to
    (k*, v*) drawn from ``generator``, k = kappa k* + eta v* + a e3 and v = theta k* + nu v* + b e3 + c e4, where
    a = sqrt(1 - kappa^2 - eta^2), b = (rho - kappa theta - eta nu)/a, c = sqrt(1 - theta^2 - nu^2 - b^2).

    Parameters
    ----------
    state : (5,) array_like (kappa, nu, theta, eta, rho), with a positive semidefinite Gram matrix.
    k_star, v_star : (d,) tensors
        Orthonormal, with d >= 4.
    """
    kappa, nu, theta, eta, rho = (float(x) for x in check_finite_array("state", state, shape=(5,)))
    d = k_star.shape[0]
    if d < 4:
        raise ValueError(
            f"d must be >= 4 to place a five-scalar state (docs/models/single_location.md §6.4); got d={d}"
        )
    a = math.sqrt(max(1.0 - kappa**2 - eta**2, 0.0))
    b = (rho - kappa * theta - eta * nu) / a if a > 1e-150 else 0.0
    c2 = 1.0 - theta**2 - nu**2 - b**2
    if (
        c2 < -1e-10
    ):  # the Gram matrix of (k, v, k*, v*) is not PSD (docs/models/single_location.md §4.1); 1e-10: float64 rounding
        raise ValueError(
            f"state must have a positive semidefinite Gram matrix (docs/models/single_location.md §4.1); "
            f"got {tuple(state)}"
        )
    c = math.sqrt(max(c2, 0.0))
    e3, e4 = _complement_pair(k_star, v_star, generator, d)
    k = kappa * k_star + eta * v_star + a * e3
    v = theta * k_star + nu * v_star + b * e3 + c * e4
    return _unit(k), _unit(v)


# ----------------------------------------------------------------------------------------------------------------
# the model


@dataclass(frozen=True, kw_only=True)
class SingleLocationModelSpec:
    """What determines a torch single-location model (hashable; the trainer stores it and compares it on resume).

    ``oracle_sha256`` is the SHA-256 of the float64 bytes of (k*, v*); ``state0`` the explicit initial state or None.
    """

    task: SingleLocationTask
    predictor: str
    init: str
    state0: tuple[float, float, float, float, float] | None
    oracle_sha256: str


class SingleLocationAttention:
    """Erf (docs/models/single_location.md §2.3) or softmax (docs/models/single_location.md §2.2) predictor with (k, v)
    on the sphere, for :func:`empirical.train.train`.

    Trained by the stochastic PGD of docs/models/single_location.md §8.4, §6.1 (``sphere_params = ("k", "v")``: the
    trainer projects the mini-batch gradient on the tangent space, steps with ``lr`` = alpha and renormalises).
    ``hyper["lam"]`` is lambda_n (``config.schedules = {"lam": ...}``, see :func:`as_train_schedule`).

    Parameters
    ----------
    task : closedform.single_location.SingleLocationTask
    k_star, v_star : (d,) float64, orthonormal
        Oracle directions (:func:`closedform.single_location.random_oracle_directions`).
    predictor : {"erf", "softmax"}
    init : {"sphere", "manifold"} or (5,) array_like
        ``"sphere"``: k, v independent uniform on S^{d-1} (normalised Gaussians, draw order k then v;
        docs/models/single_location.md §6.5). ``"manifold"``: the authors' manifold initialisation of
        docs/models/single_location.md §6.5 (k Gaussian projected orthogonally to v*; v Gaussian projected orthogonally
        to k* and to the part of k orthogonal to k*; theta = eta = rho = 0). A state (kappa, nu, theta, eta, rho): every
        seed starts at these scalars, in its own random frame (:func:`init_from_state`).
    """

    name = "single_location"
    sphere_params = ("k", "v")
    schedule_names = ("lam",)
    time_unit = TIME_UNIT

    def __init__(
        self,
        task: SingleLocationTask,
        *,
        k_star: Annotated[Any, _V.Array(ndim=1)],
        v_star: Annotated[Any, _V.Array(ndim=1)],
        predictor: str = "erf",
        init="sphere",
    ):
        if not isinstance(task, SingleLocationTask):
            msg = f"task must be a closedform.single_location.SingleLocationTask; got {type(task).__name__}"
            raise ValueError(msg)  # noqa: TRY004 (project rule: bad input raises ValueError)
        self.task = task
        self.predictor = check_choice("predictor", predictor, PREDICTORS)
        self.k_star_np, self.v_star_np = _check_oracle(task, k_star, v_star)
        state0 = None
        if isinstance(init, str):
            check_choice("init", init, INITS)
        else:
            state0 = tuple(float(x) for x in check_finite_array("init", init, shape=(5,)))
            init = "state"
        if task.d < 4 and init != "sphere":
            raise ValueError(f"init={init!r} needs d >= 4 (docs/models/single_location.md §6.5); got d={task.d}")
        self.init = init
        self.state0 = state0
        digest = hashlib.sha256(np.concatenate([self.k_star_np, self.v_star_np]).tobytes()).hexdigest()
        self.spec = SingleLocationModelSpec(
            task=task, predictor=self.predictor, init=init, state0=state0, oracle_sha256=digest
        )
        self._oracle: dict = {}

    # -- helpers --------------------------------------------------------------------------------------------------

    def oracle(self, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(k*, v*) as tensors on ``device`` / ``dtype`` (cached)."""
        key = (torch.device(device), dtype)
        if key not in self._oracle:
            self._oracle[key] = tuple(
                torch.as_tensor(a, device=key[0], dtype=dtype) for a in (self.k_star_np, self.v_star_np)
            )
        return self._oracle[key]

    def time_of_step(self, step):
        """time = step (docs/models/single_location.md §0.3; ``TIME_UNIT = "step"``)."""
        return np.asarray(step, dtype=np.float64)

    @staticmethod
    def lam(hyper: Mapping[str, float]) -> float:
        """lambda_n of this step from ``hyper["lam"]`` (> 0, docs/models/single_location.md §0.3)."""
        lam = float(hyper["lam"])
        if not lam > 0:
            raise ValueError(f"lam must be > 0 (inverse temperature); got {lam!r}")
        return lam

    # -- protocol -------------------------------------------------------------------------------------------------

    def init_params(self, generators: Sequence[torch.Generator], *, device, dtype) -> dict[str, torch.Tensor]:
        """Initial (k, v), each (S, d), seed s from ``generators[s]`` (docs/models/single_location.md §6.5; see the
        class docstring).
        """
        ks, vs = self.oracle(device, dtype)
        d = self.task.d

        def draw(g):
            if self.init == "state":
                k, v = init_from_state(self.state0, ks, vs, g)
                return {"k": k, "v": v}
            k = torch.randn(d, generator=g, device=device, dtype=dtype)
            v = torch.randn(d, generator=g, device=device, dtype=dtype)
            if self.init == "manifold":  # docs/models/single_location.md §6.5, the authors' manifold initialisation
                k = k - (k @ vs) * vs
                k_perp = k - (k @ ks) * ks
                k_perp = _unit(k_perp)
                v = v - (v @ ks) * ks
                v = v - (v @ k_perp) * k_perp
            return {"k": _unit(k), "v": _unit(v)}

        return per_seed(generators, draw)

    def sample(self, generators, n, *, device, dtype) -> dict[str, torch.Tensor]:
        """n sequences per seed from the data law (:func:`sample_batch`): ``X`` (S, n, L, d), ``y`` (S, n)."""
        ks, vs = self.oracle(device, dtype)
        return per_seed(generators, lambda g: sample_batch(self.task, ks, vs, g, n))

    def draw(self, rng, n, *, device, dtype) -> dict[str, torch.Tensor]:
        """n sequences per seed from the data law, all seeds at once from the trainer's ``BlockRNG``
        (docs/models/single_location.md §1).

        Draw order per seed (as :func:`sample_batch`): J0 (n,), the tokens' normals (n, L, d), the noise (n,).
        Returns ``X`` (S, n, L, d), ``y`` (S, n) in ``dtype`` (float64 normals; all arithmetic in ``dtype``).
        """
        ks, vs = self.oracle(device, dtype)
        task = self.task
        j0 = rng.integers(task.L, (n,))
        X = rng.normal((n, task.L, task.d), dtype=dtype)
        xi = rng.normal((n,), dtype=dtype)
        return _place_signal(task, ks, vs, j0, X, xi)

    def predict(self, params, X, hyper) -> torch.Tensor:
        """The model's predictor (:func:`predict`) at lambda_n = ``hyper["lam"]``; X (S, B, L, d) -> (S, B)."""
        return _predict(X, params["k"], params["v"], self.lam(hyper), self.predictor)  # unchecked: a training step

    def squared_errors(self, params, batch, hyper) -> torch.Tensor:
        """Per-sample squared errors (T(X_b) - Y_b)^2, shape (S, B) (docs/models/single_location.md §4: their mean
        estimates R).
        """
        return (self.predict(params, batch["X"], hyper) - batch["y"]) ** 2

    def loss(self, params, batch, hyper) -> torch.Tensor:
        """Mini-batch MSE (1/B) sum_b (T(X_b) - Y_b)^2 per seed, (S,) (docs/models/single_location.md §8.4; no 1/2,
        eps^2 included).

        The erf predictor on CPU in float64 uses the compiled one-pass :func:`erf_mse`; otherwise torch autograd of
        :meth:`squared_errors`.
        """
        X, k = batch["X"], params["k"]
        if self.predictor == "erf" and X.device.type == "cpu" and X.dtype == k.dtype == torch.float64:
            return _ErfMSE.apply(k, params["v"], X, batch["y"], self.lam(hyper))  # erf_mse, unchecked: a training step
        return self.squared_errors(params, batch, hyper).mean(dim=-1)

    def evaluate(self, params, batch, hyper) -> dict[str, torch.Tensor]:
        """``risk`` = test MSE at lambda_n, ``excess_risk`` = risk - eps^2, ``lam`` = lambda_n
        (docs/models/single_location.md §0.3, §8.4).
        """
        risk = self.loss(params, batch, hyper)
        return {"risk": risk, "excess_risk": risk - self.task.eps**2, "lam": torch.full_like(risk, self.lam(hyper))}

    def probes(self, params) -> dict[str, torch.Tensor]:
        """kappa, nu, theta, eta, rho (docs/models/single_location.md §4.1) and distance_to_manifold
        (docs/models/single_location.md §5.1) of each seed's (k, v).
        """
        k, v = params["k"], params["v"]
        ks, vs = self.oracle(k.device, k.dtype)
        theta, eta, rho = (v * ks).sum(-1), (k * vs).sum(-1), (k * v).sum(-1)
        return {
            "kappa": (k * ks).sum(-1),
            "nu": (v * vs).sum(-1),
            "theta": theta,
            "eta": eta,
            "rho": rho,
            "distance_to_manifold": torch.sqrt(theta**2 + eta**2 + rho**2),
        }


# ----------------------------------------------------------------------------------------------------------------
# construction and the Fig. 5 protocol


def build(
    task: SingleLocationTask, *, rng: Annotated[Any, _V.seed_check] = None, predictor: str = "erf", init="sphere"
) -> SingleLocationAttention:
    """A :class:`SingleLocationAttention` with (k*, v*) drawn from ``rng``.

    The directions come from :func:`closedform.single_location.random_oracle_directions`
    (docs/models/single_location.md §1 sampling recipe).
    """
    k_star, v_star = random_oracle_directions(task, as_generator(rng))
    return SingleLocationAttention(task, k_star=k_star, v_star=v_star, predictor=predictor, init=init)


def as_train_schedule(lam) -> Schedule:
    """The trainer's ``Schedule`` for lambda_n: a float (constant) or a closedform ``LamSchedule``
    (docs/models/single_location.md §6.1).

    ``LamSchedule(lam0, decay)`` (lambda_n = lam0/(1 + decay n)) becomes ``Schedule(value=lam0, kind="inverse_time",
    rate=decay)``: the same numbers at every update index n, so torch runs and :func:`closedform.single_location.map`
    use the same lambda_n.
    """
    if isinstance(lam, LamSchedule):
        if lam.decay == 0:
            return Schedule(value=lam.lam0)
        return Schedule(value=lam.lam0, kind="inverse_time", rate=lam.decay)
    if isinstance(lam, Schedule):
        return lam
    return Schedule(value=check_positive("lam", lam))


def _fig5_config(
    seeds,
    n_steps: int = 200_000,
    *,
    lam=None,
    alpha: float = 1e-3,
    batch_size: int = 5,
    log_every: int = 500,
    eval_size: int = 1000,
    **kwargs,
) -> TrainConfig:
    """TrainConfig of the Fig. 5 protocol (docs/models/single_location.md §8.4): online stochastic PGD, alpha = 1e-3,
    batch 5, lambda_n = 2/(1 + 1e-4 n), test MSE on 1 000 fixed samples logged every 500 steps.

    ``lam`` overrides the schedule (float, ``LamSchedule`` or ``Schedule``); ``kwargs`` go to ``TrainConfig``.
    """
    lam = LamSchedule(lam0=2.0, decay=1e-4) if lam is None else lam
    return TrainConfig(
        seeds=seeds,
        n_steps=n_steps,
        batch_size=batch_size,
        lr=check_positive("alpha", alpha),
        schedules={"lam": as_train_schedule(lam)},
        eval_size=eval_size,
        saveat=SaveAt(every=check_int("log_every", log_every, min_value=1)),
        **kwargs,
    )


#: The presets of :func:`config`: name -> factory.
CONFIGS = {"fig5": _fig5_config}


def config(name: str, *args, **kwargs) -> TrainConfig:
    """TrainConfig of a named training protocol (a paper figure's setup or a preset).

    Parameters
    ----------
    name : {"fig5"}
        * ``"fig5"``: the Fig. 5 protocol (docs/models/single_location.md §8.4): online stochastic PGD, alpha = 1e-3,
          batch 5, lambda_n = 2/(1 + 1e-4 n), test MSE on 1 000 fixed samples every 500 steps: ``config("fig5", seeds,
          n_steps=200_000, *, lam=None, alpha=1e-3, batch_size=5, log_every=500, eval_size=1000,
          **TrainConfig_fields)``; ``lam`` overrides the schedule (float, ``LamSchedule`` or ``Schedule``).
    *args, **kwargs
        The arguments of that protocol, as listed.

    Raises
    ------
    ValueError
        If ``name`` is not one of the listed protocols.
    """
    return dispatch_config(CONFIGS, name, args, kwargs)


# ----------------------------------------------------------------------------------------------------------------
# argument checks of every public function and class (dynamics.validation): the annotations (task, model and sample
# classes, int, float, bool), the rules in ``Annotated`` metadata (tensors: real, finite, their ndim), then each
# function's own checks. The model's training step calls the unchecked ``_predict`` and ``_ErfMSE``.

from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)
from empirical.models import tensor_check as _tensor  # noqa: E402

_V.validate_module(globals())
