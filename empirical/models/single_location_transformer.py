"""Torch models of docs/models/single_location.md §8.7-§8.9: a one-layer Transformer with a register token, the
multiple-location task and its multi-head erf predictor.

Implements docs/models/single_location.md §8.7 (Fig. 8: one Transformer layer, paper Eq. (29)),
docs/models/single_location.md §8.8 (Fig. 9: multiple-location regression, paper Eq. (30), with the multi-head erf
predictor of paper Eq. (31)) and docs/models/single_location.md §8.9 (Fig. 10: the multi-head Transformer on that task),
for the shared trainer :func:`empirical.train.train`. Reference: :data:`closedform.single_location.REFERENCE` (Marion,
Berthier, Biau, Boyer, ICLR 2025).

Symbol table
------------
================== =============== ================================================== ================= ==========
code               paper symbol    meaning                                            shape             spec
================== =============== ================================================== ================= ==========
d, L, K            d, L, K         token dimension, tokens per sequence, locations    int               8.8
gamma, noise       gamma, eps      informative-token std, output-noise std            float             1, 8.8
k_star, v_star     k_i*, v_i*      oracle directions (jointly orthonormal)            (K, d)            8.8
J                  J_1..J_K        latent locations (distinct, 0-based)               (n, K) int        8.8
X, y               X, Y            tokens and output                                  (n, L, d), (n,)   1, 8.8
lam                lambda          inverse temperature of the erf heads               float             2.3, 8.8
k, v               k_h, v_h        erf heads' key / value directions (unit)           (S, H, d)         8.8
z_reg              z_reg           register token (drawn once per seed, not trained)  (S, d)            8.7
W_Q, W_K, W_V      W_Q^h ...       attention weights (d_head = d)                     (S, H, d, d)      8.7
W_O                W_O^h           output projection (H > 1 only; identity for H = 1) (S, H, d, d)      8.7, 8.9
W_1, b_1, W_2, b_2 W_1, b_1, ...   residual MLP (width d, ReLU)                       (S, d, d), (S, d) 8.7
u                  u               read-out vector                                    (S, d)            8.7
QK                 W_Q^h W_K^h^T   query-key matrix of head h                         (S, H, d, d)      8.7
k_hat              k_hat_h         key-side top singular vector of QK_h               (S, H, d)         8.7
v_hat              v_hat_h         W_V^h W_O^h u                                      (S, H, d)         8.7
sv_ratio           sv_1 / sv_2     rank-one ratio of QK_h                             (S, H)            8.7
kappa, nu, ...     kappa, nu, ...  order parameters (names of the closed form)        (S,)              4.1, 8.7
================== =============== ================================================== ================= ==========

Logged variables (trainer probes + evaluation, the closed form's names where they exist):

* erf heads, H = K = 1: ``kappa, nu, theta, eta, rho, distance_to_manifold`` (docs/models/single_location.md §4.1, §5.1)
  and ``risk`` (test MSE, eps^2 included), ``excess_risk`` (test MSE - eps^2), ``lam``; an overlay with
  :func:`closedform.single_location.map` is then an ``xarray`` alignment.
* erf heads otherwise: ``kappa_<h>_<i> = k_h . k_i*`` and ``nu_<h>_<i> = v_h . v_i*`` (signed;
  docs/models/single_location.md §8.8 plots their absolute values), 0-based head h and location i; ``risk``,
  ``excess_risk``, ``lam``.
* Transformer, H = K = 1: ``kappa = |k_hat . k*|``, ``nu = |v_hat . v*| / |v_hat|``, ``sv_ratio``; evaluation
  ``risk``, ``excess_risk`` and ``nu_mlp`` (the MLP-corrected value direction of docs/models/single_location.md §8.7).
* Transformer otherwise: ``kappa_<h>_<i>``, ``nu_<h>_<i>``, ``sv_ratio_<h>``, ``nu_mlp_<h>_<i>``.

Time (docs/models/single_location.md §0.3): time = step, the state after ``step`` updates; the row at step n holds
iterate n, its test risk evaluated with lambda_n.

Notes
-----
Choices of the toolkit where the paper is silent (docs/models/single_location.md §8.7-§8.9), documented here and in the
figure captions:

* The oracle directions belong to the model object and are shared by the seeds of one run (the seeds are repeats
  over initialisation, register and data). The Gaussian initialisation is rotation invariant, so this changes the
  law of no logged quantity of the erf model; for the Transformer the only non-invariant operation is the mean
  subtraction of LayerNorm.
* Transformer: only the register row (row 0) of the layer output is computed. This is exact: the prediction reads
  row 0 only, and LayerNorm and the MLP act row-wise, so the other rows' outputs never enter it (the test suite
  checks this against a numpy forward of the full (L+1)-row layer).
* Transformer: with the fixed register, the only query that ever enters the loss is LN(z_reg) W_Q^h, so every SGD
  gradient of W_Q^h has the form LN(z_reg) a^T. Starting from W_Q^h = 0 (documented default), W_Q^h stays rank one and
  so does QK_h: the ratio sv_1/sv_2 is infinite up to rounding at every step > 0 (it is reported capped at 1 / machine
  epsilon). The paper's "nearly rank one" finding is automatic in this reconstruction.
* ``z_reg`` is stored as a parameter (so it is seeded from the ``init`` stream and checkpointed) but used detached:
  it gets no gradient, and ``torch.optim`` leaves parameters without gradient unchanged.
* The Fig. 9 schedule lambda_n = lam0/(1 + 1e-4 min(n, n_freeze)) is an ``inverse_time`` schedule of the trainer
  with the floor ``lam_floor = lam0/(1 + 1e-4 n_freeze)`` applied by the model: max(lambda_n, lam_floor) is the
  same number for a decreasing schedule.
"""

from __future__ import annotations

from typing import Annotated, Any
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from closedform.single_location import REFERENCE, TIME_UNIT, LocationTask, SingleLocationTask
from dynamics.random import as_generator
from dynamics.validation import (
    check_choice,
    check_finite_array,
    check_int,
    check_nonneg,
)
from empirical.train import per_seed

__all__ = [
    "KINDS",
    "REFERENCE",
    "TIME_UNIT",
    "MultiHeadErf",
    "MultiLocationTask",
    "TransformerLayer",
    "as_multi_location",
    "build",
    "layer_norm",
    "random_oracle_directions",
    "sample_tokens",
]

#: LayerNorm epsilon of docs/models/single_location.md §8.7 (LN(x) = (x - mean)/sqrt(var + 1e-5), no affine parameters).
LN_EPS = 1e-5


@dataclass(frozen=True, kw_only=True)
class MultiLocationTask(LocationTask):
    """The multiple-location regression task (docs/models/single_location.md §8.8, paper Eq. (30)).

    Y = sum_{i=1}^K x_{J_i}.v_i* + xi with (J_1, ..., J_K) uniform over ordered K-tuples of distinct positions,
    x_{J_i} ~ N(sqrt(d/2) k_i*, gamma^2 I), the other tokens N(0, I). K = 1 is the single-location task of
    docs/models/single_location.md §1.

    Parameters
    ----------
    d : int >= 2*K
        Token dimension (the 2K oracle directions must be orthonormal in R^d).
    L : int >= K
        Tokens per sequence.
    K : int >= 1
        Number of latent locations (2 in Fig. 9 and 10).
    gamma : float > 0
        Std of each informative token around its mean (default sqrt(1/2)).
    noise : float >= 0
        Output-noise std eps.
    """

    d: int
    L: int
    K: Annotated[int, _V.Range(integer=True, ge=1)] = 2
    gamma: Annotated[float, _V.Range(gt=0)] = math.sqrt(0.5)
    noise: Annotated[float, _V.Range(ge=0)] = 0.0

    def __post_init__(self):
        object.__setattr__(self, "K", check_int("K", self.K, min_value=1))
        self._check_fields(d_min=max(2, 2 * self.K), L_min=self.K)

    @property
    def null_risk(self) -> float:
        """Risk of the zero predictor, E[Y^2] = K gamma^2 + eps^2 (docs/models/single_location.md §1 remark,
        docs/models/single_location.md §8.8).
        """
        return self.K * self.gamma**2 + self.eps**2


def as_multi_location(task) -> MultiLocationTask:
    """``task`` as a :class:`MultiLocationTask` (a ``SingleLocationTask`` of docs/models/single_location.md §1 is the
    case K = 1, docs/models/single_location.md §8.8).
    """
    if isinstance(task, MultiLocationTask):
        return task
    if isinstance(task, SingleLocationTask):
        return MultiLocationTask(d=task.d, L=task.L, K=1, gamma=task.gamma, noise=task.noise)
    raise ValueError(
        f"task must be a MultiLocationTask or a closedform.single_location.SingleLocationTask; got "
        f"{type(task).__name__}"
    )


def random_oracle_directions(task, rng: Annotated[Any, _V.seed_check] = None) -> tuple[np.ndarray, np.ndarray]:
    """Draw jointly orthonormal oracle directions (k_i*, v_i*), i = 1..K: two (K, d) float64 arrays.

    Implements the recipe of docs/models/single_location.md §8.8: the columns (k_1*, v_1*, k_2*, v_2*, ...) of the Q
    factor of the QR decomposition of a d x 2K standard Gaussian matrix, signs fixed so that diag(R) > 0 (then Q is the
    Gram-Schmidt orthonormalisation of the columns, which for K = 1 is the recipe of docs/models/single_location.md §1).
    """
    task = as_multi_location(task)
    rng = as_generator(rng)
    q, r = np.linalg.qr(rng.standard_normal((task.d, 2 * task.K)))
    q = q * np.sign(np.diag(r))
    return np.ascontiguousarray(q[:, 0::2].T), np.ascontiguousarray(q[:, 1::2].T)


def _check_oracle(task: MultiLocationTask, k_star, v_star) -> tuple[np.ndarray, np.ndarray]:
    """(k_star, v_star) as (K, d) float64 arrays; ValueError unless jointly orthonormal
    (docs/models/single_location.md §1, §8.8).
    """
    out = []
    for name, a in (("k_star", k_star), ("v_star", v_star)):
        a = check_finite_array(name, a, ndim=(1, 2))
        if a.size != task.K * task.d:
            raise ValueError(f"{name} must have shape ({task.K}, {task.d}) (K oracle directions in R^d); got {a.shape}")
        out.append(np.ascontiguousarray(a.reshape(task.K, task.d)))
    frame = np.concatenate(out)
    # 1e-10: float64 orthonormalisation is exact to ~1e-15; anything larger is a wrong input, not rounding.
    if np.max(np.abs(frame @ frame.T - np.eye(2 * task.K))) > 1e-10:
        raise ValueError(
            "k_star and v_star must be jointly orthonormal (docs/models/single_location.md §1 Assumption 1, "
            "docs/models/single_location.md §8.8), to 1e-10"
        )
    return out[0], out[1]


def layer_norm(x: Annotated[torch.Tensor, _tensor(ndim=tuple(range(1, 33)))]) -> torch.Tensor:
    """LN(x) = (x - mean(x)) / sqrt(var(x) + 1e-5) over the last axis, no affine parameters
    (docs/models/single_location.md §8.7). ``x`` is checked (real, finite); the model's forward pass calls an
    unchecked version.
    """
    return _layer_norm(x)


def _layer_norm(x):
    """:func:`layer_norm` without its argument checks."""
    return torch.nn.functional.layer_norm(x, x.shape[-1:], eps=LN_EPS)


def sample_tokens(
    task,
    k_star: Annotated[Any, _V.Array(ndim=(1, 2))],
    v_star: Annotated[Any, _V.Array(ndim=(1, 2))],
    generator: torch.Generator,
    n: int,
    *,
    device: Annotated[Any, _V.Instance(str, torch.device)] = None,
    dtype: Annotated[Any, _V.Instance(torch.dtype)] = torch.float64,
) -> dict[str, torch.Tensor]:
    """Draw n sequences of the multiple-location law: ``{"X": (n, L, d), "y": (n,), "J": (n, K) int64}``.

    Implements docs/models/single_location.md §8.8 (paper Eq. (30)); with K = 1 the data model of
    docs/models/single_location.md §1 with uniform J0. (J_1, ..., J_K) = the first K entries of a uniform random
    permutation of the L positions (argsort of L uniforms); tokens N(0, I), then x_{J_i} <- sqrt(d/2) k_i* + gamma
    x_{J_i}; y = sum_i x_{J_i}.v_i* + eps xi. Draw order: permutation uniforms, tokens, noise, all from ``generator``.
    """
    task = as_multi_location(task)
    n = check_int("n", n, min_value=1)
    device = generator.device if device is None else torch.device(device)
    for name, vec in (("k_star", k_star), ("v_star", v_star)):
        if np.shape(vec) != (task.K, task.d) and not (task.K == 1 and np.shape(vec) == (task.d,)):
            one = " (or (d,) for K = 1)" if task.K == 1 else ""
            raise ValueError(f"{name} must have shape (K, d) = ({task.K}, {task.d}){one}; got {np.shape(vec)}")
    k_star = torch.as_tensor(np.asarray(k_star).reshape(task.K, task.d), device=device, dtype=dtype)
    v_star = torch.as_tensor(np.asarray(v_star).reshape(task.K, task.d), device=device, dtype=dtype)
    u = torch.rand(n, task.L, generator=generator, device=device, dtype=dtype)
    X = torch.randn(n, task.L, task.d, generator=generator, device=device, dtype=dtype)
    xi = torch.randn(n, generator=generator, device=device, dtype=dtype)
    return _place_locations(task, k_star, v_star, u, X, xi)


def _place_locations(task, k_star, v_star, u, X, xi) -> dict[str, torch.Tensor]:
    """The law of :func:`sample_tokens` from its uniforms u (..., L), normals X (..., L, d) and xi (...): J = the
    first K entries of argsort(u); X is modified in place. Leading axes (n,) or (S, n).
    """
    J = torch.argsort(u, dim=-1)[..., : task.K]  # (..., K)
    idx = J[..., None].expand(*J.shape, task.d)
    inf = task.s * k_star + task.gamma * torch.gather(X, -2, idx)  # (..., K, d)
    X.scatter_(-2, idx, inf)
    y = (inf * v_star).sum(dim=(-1, -2)) + task.eps * xi
    return {"X": X, "y": y, "J": J}


class _TaskModel:
    """Shared parts of the two models: task, oracle directions, data, loss, evaluation
    (docs/models/single_location.md §8.4, §8.7-§8.8).

    Subclasses define ``predict(params, X, hyper) -> (S, B)``, ``init_params`` and ``probes``.
    """

    name = "single_location"
    time_unit = TIME_UNIT

    def __init__(self, task, k_star, v_star, n_heads):
        self.spec = task
        self.task = as_multi_location(task)
        self.H = check_int("n_heads", n_heads, min_value=1)
        self.k_star_np, self.v_star_np = _check_oracle(self.task, k_star, v_star)
        self._oracle = {}

    def oracle(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(k_star, v_star) as (K, d) tensors on the device and dtype of ``like`` (cached)."""
        key = (like.device, like.dtype)
        if key not in self._oracle:
            self._oracle[key] = tuple(
                torch.as_tensor(a, device=like.device, dtype=like.dtype) for a in (self.k_star_np, self.v_star_np)
            )
        return self._oracle[key]

    def time_of_step(self, step):
        """time = step (docs/models/single_location.md §0.3)."""
        return np.asarray(step, dtype=np.float64)

    def sample(self, generators, n, *, device, dtype):
        """n sequences per seed from the task's law (:func:`sample_tokens`): ``X`` (S, n, L, d), ``y`` (S, n)."""

        def draw(g):
            out = sample_tokens(self.task, self.k_star_np, self.v_star_np, g, n, device=device, dtype=dtype)
            return {"X": out["X"], "y": out["y"]}

        return per_seed(generators, draw)

    def draw(self, rng, n, *, device, dtype):
        """The law of :meth:`sample` for all seeds at once from the trainer's counter-keyed ``BlockRNG``
        (:mod:`empirical.seeding`); draw order per seed: the L permutation uniforms, tokens, noise (as
        :func:`sample_tokens`). Returns ``X`` (S, n, L, d), ``y`` (S, n).
        """
        task = self.task
        ks, vs = (torch.as_tensor(a, device=device, dtype=dtype) for a in (self.k_star_np, self.v_star_np))
        u = rng.uniform((n, task.L), dtype=dtype)
        X = rng.normal((n, task.L, task.d), dtype=dtype)
        xi = rng.normal((n,), dtype=dtype)
        out = _place_locations(task, ks, vs, u, X, xi)
        return {"X": out["X"], "y": out["y"]}

    def loss(self, params, batch, hyper) -> torch.Tensor:
        """Mini-batch mean squared error (1/B) sum_b (Y_hat_b - Y_b)^2 per seed, shape (S,)
        (docs/models/single_location.md §8.4, §8.7).

        No factor 1/2: the population version is the risk R of docs/models/single_location.md §4 (true MSE, eps^2
        included).
        """
        return ((self.predict(params, batch["X"], hyper) - batch["y"]) ** 2).mean(dim=-1)

    def evaluate(self, params, batch, hyper) -> dict[str, torch.Tensor]:
        """``risk`` (test MSE, eps^2 included) and ``excess_risk`` = risk - eps^2
        (docs/models/single_location.md §0.1, §0.3).
        """
        risk = self.loss(params, batch, hyper)
        return {"risk": risk, "excess_risk": risk - self.task.eps**2}

    @property
    def single(self) -> bool:
        """Whether this is the single-head single-location case, logged under the closed form's names."""
        return self.H == 1 and self.task.K == 1


class MultiHeadErf(_TaskModel):
    """Multi-head erf predictor sum_h sum_l erf(lambda x_l.k_h)(x_l.v_h) with (k_h, v_h) on the sphere.

    Implements docs/models/single_location.md §8.8 (paper Eq. (31); H = 1 is the erf predictor of
    docs/models/single_location.md §2.3, paper Eq. (3)), trained by the stochastic PGD of
    docs/models/single_location.md §8.4 through the trainer's ``sphere_params`` (tangent projection of each head's
    gradient, then normalisation, per head). Initialisation: each k_h, v_h independent uniform on S^{d-1} (normalised
    standard Gaussians; draw order k then v). ``hyper["lam"]`` is lambda_n.

    Parameters
    ----------
    task : MultiLocationTask or SingleLocationTask
    k_star, v_star : (K, d) float64
        Jointly orthonormal oracle directions (:func:`random_oracle_directions`).
    n_heads : int >= 1
        H.
    lam_floor : float >= 0
        lambda actually used = max(hyper["lam"], lam_floor) (the Fig. 9 freeze, see the module Notes).
    """

    sphere_params = ("k", "v")
    schedule_names = ("lam",)

    def __init__(
        self,
        task,
        *,
        k_star: Annotated[Any, _V.Array(ndim=(1, 2))],
        v_star: Annotated[Any, _V.Array(ndim=(1, 2))],
        n_heads: Annotated[int, _V.Range(integer=True, ge=1)] = 1,
        lam_floor: Annotated[float, _V.Range(ge=0)] = 0.0,
    ):
        super().__init__(task, k_star, v_star, n_heads)
        self.lam_floor = check_nonneg("lam_floor", lam_floor)

    def init_params(self, generators, *, device, dtype):
        """k_h, v_h uniform on S^{d-1}, shape (S, H, d) each (docs/models/single_location.md §6.5 sphere initialisation,
        docs/models/single_location.md §8.8).
        """
        H, d = self.H, self.task.d

        def draw(g):
            k = torch.randn(H, d, generator=g, device=device, dtype=dtype)
            v = torch.randn(H, d, generator=g, device=device, dtype=dtype)
            return {
                "k": k / torch.linalg.vector_norm(k, dim=-1, keepdim=True),
                "v": v / torch.linalg.vector_norm(v, dim=-1, keepdim=True),
            }

        return per_seed(generators, draw)

    def lam(self, hyper: Mapping[str, float]) -> float:
        """lambda of this step: max(hyper["lam"], lam_floor) (docs/models/single_location.md §8.8 schedule)."""
        lam = max(float(hyper["lam"]), self.lam_floor)
        if not lam > 0:
            raise ValueError(f"lam must be > 0 (inverse temperature); got {lam!r}")
        return lam

    def predict(self, params, X, hyper) -> torch.Tensor:
        """T(X) = sum_h sum_l erf(lambda x_l.k_h)(x_l.v_h) for X (S, B, L, d); returns (S, B) (the paper's Eq. (31))."""
        a = torch.einsum("sbld,shd->sbhl", X, params["k"])
        b = torch.einsum("sbld,shd->sbhl", X, params["v"])
        return (torch.erf(self.lam(hyper) * a) * b).sum(dim=(-1, -2))

    def evaluate(self, params, batch, hyper) -> dict[str, torch.Tensor]:
        """``risk``, ``excess_risk`` (test MSE at lambda_n, docs/models/single_location.md §0.3) and ``lam``, the lambda
        used (docs/models/single_location.md §8.8).
        """
        out = super().evaluate(params, batch, hyper)
        out["lam"] = torch.full_like(out["risk"], self.lam(hyper))
        return out

    def probes(self, params) -> dict[str, torch.Tensor]:
        """Inner products with the oracle directions (docs/models/single_location.md §4.1 for H = K = 1,
        docs/models/single_location.md §8.8 otherwise).
        """
        k, v = params["k"], params["v"]
        ks, vs = self.oracle(k)
        if self.single:
            k0, v0 = k[:, 0], v[:, 0]
            theta, eta, rho = v0 @ ks[0], k0 @ vs[0], (k0 * v0).sum(-1)
            return {
                "kappa": k0 @ ks[0],
                "nu": v0 @ vs[0],
                "theta": theta,
                "eta": eta,
                "rho": rho,
                "distance_to_manifold": torch.sqrt(theta**2 + eta**2 + rho**2),
            }
        kk = torch.einsum("shd,id->shi", k, ks)
        vv = torch.einsum("shd,id->shi", v, vs)
        out = {}
        for prefix, m in (("kappa", kk), ("nu", vv)):
            for h in range(self.H):
                for i in range(self.task.K):
                    out[f"{prefix}_{h}_{i}"] = m[:, h, i]
        return out


class TransformerLayer(_TaskModel):
    """One Transformer layer with a register token, read out from the register row (docs/models/single_location.md §8.7,
    paper Eq. (29)).

    X' = [z_reg; X]; Att_h = softmax_rows(LN(X') W_Q^h (LN(X') W_K^h)^T / sqrt(d_h)); X_mid = X' + sum_h Att_h LN(X')
    W_V^h W_O^h; out = X_mid + ReLU(LN(X_mid) W_1 + 1 b_1^T) W_2 + 1 b_2^T; Y_hat = out[0] . u. Head width d_h = d;
    W_O^h = I (not a parameter) for H = 1, trained for H > 1 (docs/models/single_location.md §8.9). Every choice is the
    documented default for a detail the paper does not give.

    Initialisation (docs/models/single_location.md §8.7 defaults; draw order as listed, per seed from its ``init``
    stream): z_reg ~ N(0, I_d) (not trained); W_K^h, W_V^h i.i.d. N(0, 1/d); W_O^h i.i.d. N(0, 1/d) (H > 1); W_1, W_2
    i.i.d. N(0, 1/d); u i.i.d. N(0, 1/d^2); W_Q^h = 0, b_1 = b_2 = 0.

    Parameters
    ----------
    task : MultiLocationTask or SingleLocationTask
    k_star, v_star : (K, d) float64
        Jointly orthonormal oracle directions (used by the data law and the probes).
    n_heads : int >= 1
        H (1 for Fig. 8, 2 for Fig. 10).
    """

    schedule_names = ()

    def __init__(
        self,
        task,
        *,
        k_star: Annotated[Any, _V.Array(ndim=(1, 2))],
        v_star: Annotated[Any, _V.Array(ndim=(1, 2))],
        n_heads: Annotated[int, _V.Range(integer=True, ge=1)] = 1,
    ):
        super().__init__(task, k_star, v_star, n_heads)
        self.d_head = self.task.d

    def init_params(self, generators, *, device, dtype):
        """The docs/models/single_location.md §8.7 initialisation (see the class docstring), each tensor with a leading
        seed axis.
        """
        H, d = self.H, self.task.d
        sd = 1.0 / math.sqrt(d)

        def draw(g):
            def gauss(*shape, std=1.0):
                return std * torch.randn(*shape, generator=g, device=device, dtype=dtype)

            p = {"z_reg": gauss(d), "W_K": gauss(H, d, d, std=sd), "W_V": gauss(H, d, d, std=sd)}
            if H > 1:
                p["W_O"] = gauss(H, d, d, std=sd)
            p.update(W_1=gauss(d, d, std=sd), W_2=gauss(d, d, std=sd), u=gauss(d, std=1.0 / d))
            p.update(
                W_Q=torch.zeros(H, d, d, device=device, dtype=dtype),
                b_1=torch.zeros(d, device=device, dtype=dtype),
                b_2=torch.zeros(d, device=device, dtype=dtype),
            )
            return p

        return per_seed(generators, draw)

    # -- forward --------------------------------------------------------------------------------------------------

    def _attention(self, params, X):
        """Register row of X_mid = X' + MHA(X'): returns (S, B, d)."""
        z = params["z_reg"].detach()  # fixed register: no gradient (module Notes)
        S, B = X.shape[:2]
        Xp = torch.cat([z[:, None, None, :].expand(S, B, 1, -1), X], dim=2)  # (S, B, L+1, d)
        Z = _layer_norm(Xp)
        query = torch.einsum("sd,shde->she", _layer_norm(z), params["W_Q"])  # LN(z_reg) W_Q^h, (S, H, d_h)
        key_dir = torch.einsum("shde,she->shd", params["W_K"], query)  # W_K^h (LN(z_reg) W_Q^h)^T, (S, H, d)
        logits = torch.einsum("sbld,shd->sbhl", Z, key_dir) / math.sqrt(self.d_head)
        att = torch.softmax(logits, dim=-1)  # register row of Att_h
        pooled = torch.einsum("sbhl,sbld->sbhd", att, Z)
        heads = torch.einsum("sbhd,shde->sbhe", pooled, params["W_V"])
        mha = heads[:, :, 0] if self.H == 1 else torch.einsum("sbhe,shef->sbf", heads, params["W_O"])
        return z[:, None, :] + mha

    @staticmethod
    def _mlp(params, x_mid):
        """ReLU(LN(x) W_1 + b_1) W_2 + b_2 on rows x (S, B, d) (docs/models/single_location.md §8.7)."""
        hidden = torch.relu(torch.einsum("sbd,sde->sbe", _layer_norm(x_mid), params["W_1"]) + params["b_1"][:, None])
        return torch.einsum("sbe,sef->sbf", hidden, params["W_2"]) + params["b_2"][:, None]

    def predict(self, params, X, hyper=None) -> torch.Tensor:
        """Y_hat = out[0] . u for X (S, B, L, d); returns (S, B) (docs/models/single_location.md §8.7)."""
        x_mid = self._attention(params, X)
        out = x_mid + self._mlp(params, x_mid)
        return (out * params["u"][:, None, :]).sum(-1)

    # -- read-out -------------------------------------------------------------------------------------------------

    def value_directions(self, params, u=None) -> torch.Tensor:
        """v_hat_h = W_V^h W_O^h u, shape (S, H, d) (docs/models/single_location.md §8.7); ``u`` (S, d) defaults to the
        read-out vector.
        """
        u = params["u"] if u is None else u
        if self.H == 1:
            return torch.einsum("shde,se->shd", params["W_V"], u)
        return torch.einsum("shde,shef,sf->shd", params["W_V"], params["W_O"], u)

    def key_directions(self, params) -> tuple[torch.Tensor, torch.Tensor]:
        """(k_hat, sv_ratio): key-side top singular vector of QK_h = W_Q^h W_K^h^T (S, H, d) and sv_1/sv_2 (S, H).

        Implements the read-out of docs/models/single_location.md §8.7 (U, S, Vt = svd(QK_h); k_hat = Vt[0]).
        Conventions: where QK_h = 0 (step 0, W_Q = 0) k_hat = 0 and the ratio is 1; the ratio is capped at 1/machine
        epsilon (QK_h is exactly rank one under SGD from W_Q = 0, module Notes).
        """
        qk = params["W_Q"] @ params["W_K"].transpose(-1, -2)
        _, sv, vt = torch.linalg.svd(qk)
        k_hat = vt[..., 0, :]
        top, second = sv[..., 0], sv[..., 1]
        tiny = torch.finfo(qk.dtype).eps
        ratio = torch.where(top > 0, top / torch.maximum(second, tiny * top), torch.ones_like(top))
        k_hat = torch.where((top > 0)[..., None], k_hat, torch.zeros_like(k_hat))
        return k_hat, ratio

    def _alignments(self, k_hat, v_hat, prefix_k="kappa", prefix_v="nu"):
        ks, vs = self.oracle(v_hat)
        out = {}
        if k_hat is not None:
            kk = torch.einsum("shd,id->shi", k_hat, ks).abs()
        vv = torch.einsum("shd,id->shi", v_hat, vs).abs() / torch.linalg.vector_norm(v_hat, dim=-1)[..., None]
        for prefix, m in ((prefix_k, None if k_hat is None else kk), (prefix_v, vv)):
            if m is None:
                continue
            if self.single:
                out[prefix] = m[:, 0, 0]
            else:
                for h in range(self.H):
                    for i in range(self.task.K):
                        out[f"{prefix}_{h}_{i}"] = m[:, h, i]
        return out

    def probes(self, params) -> dict[str, torch.Tensor]:
        """kappa = |k_hat . k*|, nu = |v_hat . v*| / |v_hat|, sv_ratio, per head and location
        (docs/models/single_location.md §8.7, §8.9).
        """
        k_hat, ratio = self.key_directions(params)
        out = self._alignments(k_hat, self.value_directions(params))
        if self.single:
            out["sv_ratio"] = ratio[:, 0]
        else:
            for h in range(self.H):
                out[f"sv_ratio_{h}"] = ratio[:, h]
        return out

    def mlp_corrected_value_directions(self, params, X) -> torch.Tensor:
        """W_V^h W_O^h (I + J_MLP^T) u with J_MLP averaged over the sequences X (S, B, L, d): shape (S, H, d).

        Implements the MLP-corrected read-out of docs/models/single_location.md §8.7: J_MLP^T u is the gradient of u .
        MLP(LN(x)) at the register row x = X_mid[0], one vector-Jacobian product per sequence, averaged over the batch.
        """
        with torch.enable_grad():
            p = {k: t.detach() for k, t in params.items()}
            x_mid = self._attention(p, X).detach().requires_grad_(True)
            (jtu,) = torch.autograd.grad((self._mlp(p, x_mid) * p["u"][:, None, :]).sum(), x_mid)
        return self.value_directions(p, p["u"] + jtu.mean(dim=1))

    def evaluate(self, params, batch, hyper) -> dict[str, torch.Tensor]:
        """``risk``, ``excess_risk`` on the test batch and the MLP-corrected alignment ``nu_mlp``
        (docs/models/single_location.md §8.7).
        """
        out = super().evaluate(params, batch, hyper)
        out.update(self._alignments(None, self.mlp_corrected_value_directions(params, batch["X"]), prefix_v="nu_mlp"))
        return out


# : The models of :func:`build`: the one-layer Transformer (docs/models/single_location.md §8.7, §8.9) and the
# multi-head erf predictor (docs/models/single_location.md §8.8).
KINDS = ("transformer", "multihead_erf")


def build(
    task,
    kind: str = "transformer",
    *,
    rng: Annotated[Any, _V.seed_check] = None,
    n_heads: Annotated[int, _V.Range(integer=True, ge=1, le=4096)] = 1,
    **kwargs,
):
    """The torch model of ``task`` with oracle directions drawn by :func:`random_oracle_directions` from ``rng``.

    ``task`` is a :class:`MultiLocationTask` or a ``closedform.single_location.SingleLocationTask`` (one location,
    docs/models/single_location.md §8.7). ``kind="transformer"``: the one-layer Transformer with a register token, paper
    Eq. (29) (:class:`TransformerLayer`); ``kind="multihead_erf"``: the multi-head erf predictor, paper Eq. (31)
    (:class:`MultiHeadErf`; ``kwargs`` may hold ``lam_floor``). ``n_heads`` heads.

    Parameters
    ----------
    n_heads : int in [1, 4096]
    """
    check_choice("kind", kind, KINDS)
    # the paper uses 1 or K = 2 heads; 4096 keeps a typo from allocating H d x d matrices per seed
    n_heads = check_int("n_heads", n_heads, min_value=1, max_value=4096)
    k_star, v_star = random_oracle_directions(task, rng)
    cls = TransformerLayer if kind == "transformer" else MultiHeadErf
    return cls(task, k_star=k_star, v_star=v_star, n_heads=n_heads, **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# argument checks of every public function and class (dynamics.validation): the annotations (task, model and sample
# classes, int, float, bool), the rules in ``Annotated`` metadata (tensors: real, finite, their ndim), then each
# function's own checks. The model's forward pass calls ``_layer_norm`` unchecked.

from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)
from empirical.models import tensor_check as _tensor  # noqa: E402

_V.validate_module(globals())
