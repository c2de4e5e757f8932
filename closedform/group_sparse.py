"""Study B: a one-layer transformer learns optimal variable selection (group-sparse classification).

Implements ``docs/models/token_selection.md`` Study B (docs/models/token_selection.md §B.0-§B.8): the data law
(docs/models/token_selection.md §B.1, docs/models/token_selection.md §G.B), the embedding H = [X; I_D] and the
scalar-output softmax-attention model with logistic loss (docs/models/token_selection.md §B.2), full-matrix gradient
descent from zero (docs/models/token_selection.md §B.2), its exact 8-scalar reduction
(docs/models/token_selection.md §B.3), the closed forms of the first two GD steps (docs/models/token_selection.md §B.3),
the probes weights -> order parameters (docs/models/token_selection.md §B.3.1) and the theorem predictions
(docs/models/token_selection.md §B.4).

Symbol table (docs/models/token_selection.md §B.0)
--------------------------------------------------
Sections (§) in the last column are those of docs/models/token_selection.md.

=======================  ===============  ==============================================  =============  =======
code                     paper            meaning                                         shape          defined
=======================  ===============  ==============================================  =============  =======
d                        d                group size = token feature dimension (>= 2)     int            §B.1
D                        D                number of groups = tokens (>= 3)                int            §B.1
sigma_x                  sigma_x          feature scale, x_j ~ N(0, sigma_x^2 I_d)        float          §B.1
jstar                    j*               label-relevant group, 1-BASED as in the paper   int            §B.1
jstar_index              j* - 1           the same group as a 0-based code index          int            §0
eta                      eta              GD step size (same for v and W)                 float          §B.2
v_star                   v*               unit label direction inside group j*            (d,)           §B.1
X                        X                features; X[k, :, j] = x_j of draw k            (n,d,D)        §B.1
y                        y                label sign(<x_{j*}, v*>), sign(0) := +1         (n,)           §G.B
H                        H                tokens h_j = [x_j; e_j]                         (n,d+D,D)      §B.2
v                        v                value vector [v_x; v_pos]                       (d+D,)         §B.2
W                        W                merged key-query matrix (W11, W12, W21, W22)    (d+D,d+D)      §B.2
S                        S                column softmax of H^T W H; S[k, i, j]: key i    (n,D,D)        §B.2
f                        f                model output v^T H S 1_D                        (n,)           §B.2
beta                     beta             v_x = beta v*                                   float          §B.3
w_par, w_perp            w_par, w_perp    W11 = w_par v*v*^T + w_perp (I - v*v*^T)        float          §B.3
m1 .. m5                 m_1 .. m_5       W22 on orbits O_1..O_5 (row key, column query)  float          §B.3
orbit_sizes              abs(O_k)         (1, D-1, D-1, D-1, (D-1)(D-2))                  (5,)           §B.3
gap_ss, gap_s, gap_self  same             m1 - m3, m2 - m5, m4 - m5                       float          §B.3
a, gram                  a_i, <z_i, z_j>  <x_i, v*>; Gram of z_i = (I - v*v*^T) x_i       (n,D);(n,D,D)  §B.3
m_star                   m*               E[lambda y (a_{j*} - abar)] at step 2           float          §B.3
eps_B, T_star            eps_B, T*        accuracy parameter, horizon of the theorem      float          §B.4
=======================  ===============  ==============================================  =============  =======

Time axis: the GD step t (``step``); ``time`` = eta * t, the gradient-flow time (docs/models/token_selection.md §0).
Every quantity "at t" is evaluated at theta^(t), the parameters after t updates, on the training sample.

Notes
-----
The embedding H = [X; I_D] is [reconstructed] (docs/models/token_selection.md §B.2; strongly constrained); the
reduction is [derived] and exact for the stated model. The population expectations of the reduced map are Monte
Carlo averages over a fixed sample (common random numbers across steps); their standard errors count unique draws
only (docs/models/token_selection.md §0: a mirror image (-X, -y) is an exact copy for every quantity of the reduced
state).
"""

from __future__ import annotations

from typing import Annotated, Any
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from scipy import integrate as _integrate
from scipy.special import expit, softmax

import dynamics
from closedform import _group_sparse_kernels as _k
from closedform.nearest_neighbor import _over_samples, _sample_list, eta_batch, _sample_list_check
from dynamics.convergence import check_run
from dynamics.errors import DivergenceError
from dynamics.random import as_generator
from dynamics.saveat import DEFAULT_SAVEAT, SaveAt
from dynamics.trajectory import Trajectory
from dynamics.validation import check_allocation, check_finite_array, check_in_range, check_int, check_positive

__all__ = [
    "REFERENCE",
    "TIME_UNIT",
    "STATE_NAMES",
    "GAP_NAMES",
    "N_STATE",
    "GroupSparseTask",
    "GroupSparseSample",
    "ReducedSample",
    "sample",
    "reduce_sample",
    "population_sample",
    "embed_tokens",
    "forward",
    "logistic_loss",
    "full_gradient",
    "embed_state",
    "project",
    "order_params",
    "attention_diagnostics",
    "evaluate",
    "FullGDRun",
    "FULL_GD_VARIABLES",
    "full_gd",
    "reduced_gradient",
    "reduced_update",
    "reduced_evaluate",
    "pack_params",
    "map",
    "beta_step1",
    "step2_expectations",
    "step_closed_form",
    "theorem_horizon",
    "theorem_loss_order",
    "attention_lower_bound",
    "direction_error_bound",
    "loss_rate_statistic",
    "predicted_loss",
    "downstream_error_bound",
    "linear_sample_complexity",
    "theorem_predictions",
]

REFERENCE = {
    "title": "Transformer learns optimal variable selection in group-sparse classification",
    "authors": "Chenyang Zhang, Xuran Meng, Yuan Cao",
    "venue": "ICLR 2025",
    "arxiv": "2504.08638",
    "bibtex_key": "zhang2025transformer",
    "spec": "docs/models/token_selection.md, Study B",
}

#: The time axis of every trajectory of this module: the GD step t (``step``); ``time`` = eta * t is the
# : gradient-flow time of docs/models/token_selection.md §0 (with one shared eta; per-trajectory step sizes give time =
# step).
TIME_UNIT = "GD step t; time = eta * t, the flow time tau (docs/models/token_selection.md §0)"

STATE_NAMES = ("beta", "w_par", "w_perp", "m1", "m2", "m3", "m4", "m5")
GAP_NAMES = ("gap_ss", "gap_s", "gap_self")
N_STATE = len(STATE_NAMES)


# ----------------------------------------------------------------------------------------------------------------------
# Task spec and data
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class GroupSparseTask:
    """Group-sparse classification task and its GD training (docs/models/token_selection.md §B.1-§B.2; defaults = paper
    runs of docs/models/token_selection.md §B.7).

    Parameters
    ----------
    d : int >= 2
        Group size (feature dimension of a token), >= 2 (the 8-scalar reduction of docs/models/token_selection.md §B.3
        needs d >= 2).
    D : int >= 3
        Number of groups = tokens, >= 3 (docs/models/token_selection.md §B.3 needs D >= 3).
    sigma_x : float > 0
        Feature scale, > 0 (docs/models/token_selection.md §B.1; the paper value is unknown, suggested 1).
    jstar : int >= 1
        Label-relevant group, 1-based as in the paper, in [1, D] (paper figures: 2).
    eta : float > 0
        GD step size for v and W, > 0 (paper: 0.5).
    """

    d: Annotated[int, _V.Range(integer=True, ge=2)] = 4
    D: Annotated[int, _V.Range(integer=True, ge=3)] = 6
    sigma_x: Annotated[float, _V.Range(gt=0)] = 1.0
    jstar: Annotated[int, _V.Range(integer=True, ge=1)] = 2
    eta: Annotated[float, _V.Range(gt=0)] = 0.5

    def __post_init__(self):
        object.__setattr__(self, "d", check_int("d", self.d, min_value=2))
        object.__setattr__(self, "D", check_int("D", self.D, min_value=3))
        object.__setattr__(self, "sigma_x", check_positive("sigma_x", self.sigma_x))
        object.__setattr__(self, "jstar", check_int("jstar", self.jstar, min_value=1, max_value=self.D))
        object.__setattr__(self, "eta", check_positive("eta", self.eta))

    @property
    def jstar_index(self) -> int:
        """0-based code index of j* (docs/models/token_selection.md §0)."""
        return self.jstar - 1

    @property
    def dim(self) -> int:
        """Token dimension d + D (rows of H, size of v and W; docs/models/token_selection.md §B.2)."""
        return self.d + self.D

    @property
    def seq_len(self) -> int:
        """Number of tokens D (cross-paper name; docs/models/token_selection.md §B.1)."""
        return self.D

    @property
    def lr(self) -> float:
        """Step size eta (cross-paper name; docs/models/token_selection.md §B.2)."""
        return self.eta

    @property
    def orbit_sizes(self) -> np.ndarray:
        """Sizes |O_1..O_5| = (1, D-1, D-1, D-1, (D-1)(D-2)) of the W22 orbits (docs/models/token_selection.md §B.3)."""
        D = self.D
        return np.array([1, D - 1, D - 1, D - 1, (D - 1) * (D - 2)], dtype=np.float64)

    def time_of_step(self, step):
        """Flow time tau = eta * t of GD step t (docs/models/token_selection.md §0)."""
        return self.eta * np.asarray(step, dtype=np.float64)

    def step_of_time(self, time):
        """GD step t = tau / eta of flow time tau (docs/models/token_selection.md §0)."""
        return np.asarray(time, dtype=np.float64) / self.eta


@dataclass(frozen=True, eq=False)
class GroupSparseSample:
    """A sample of the data law (docs/models/token_selection.md §B.1): X (n, d, D), labels y (n,), the direction v_star
    (d,), n_unique draws.

    ``mirrored`` samples hold the n_unique draws followed by their images (-X, -y) (docs/models/token_selection.md §0,
    docs/models/token_selection.md §G.B).

    Parameters
    ----------
    n_unique : int >= 1
    """

    X: Annotated[np.ndarray, _V.Array(ndim=3)]
    y: Annotated[np.ndarray, _V.Array(ndim=1)]
    v_star: Annotated[np.ndarray, _V.Array(ndim=1)]
    n_unique: Annotated[int, _V.Range(integer=True, ge=1)]
    mirrored: bool = False


@dataclass(frozen=True, eq=False)
class ReducedSample:
    """The reduced statistics of a sample (docs/models/token_selection.md §B.3): a[k, i] = <x_i, v*>, gram[k] = Gram of
    (I - v*v*^T) x_i.

    ``n_unique`` counts unique draws (standard errors use it; mirror images are exact copies in the reduced model).

    Parameters
    ----------
    n_unique : int >= 1
    """

    a: Annotated[np.ndarray, _V.Array(ndim=2)]
    gram: Annotated[np.ndarray, _V.Array(ndim=3)]
    n_unique: Annotated[int, _V.Range(integer=True, ge=1)]


def _unit_vector(name: str, v, d: int) -> np.ndarray:
    v = check_finite_array(name, v, shape=(d,))
    norm = float(np.linalg.norm(v))
    if not norm > 0:
        raise ValueError(f"{name} must be a non-zero vector of length d={d}")
    return v / norm


def sample(
    task: GroupSparseTask,
    n: Annotated[int, _V.Range(integer=True, ge=1)],
    rng: Annotated[Any, _V.seed_check] = None,
    *,
    v_star: Annotated[Any, _V.Array(ndim=1)] = None,
    mirror: bool = False,
) -> GroupSparseSample:
    """Draw n samples of the group-sparse data law exactly as docs/models/token_selection.md §G.B
    (docs/models/token_selection.md §B.1).

    Order of draws: v_star (only if not given) = normalised standard normal vector, then
    X = sigma_x * standard_normal((n, d, D)); y = sign(X[:, :, j*-1] @ v_star) with sign(0) := +1.

    Parameters
    ----------
    task : GroupSparseTask
    n : int >= 1
        Number of unique draws, >= 1.
    rng : int, Generator, SeedSequence or None
        Normalised by ``dynamics.random.as_generator``.
    v_star : (d,) array, optional
        Label direction (normalised here); drawn first from ``rng`` when omitted.
    mirror : bool
        Append the images (-X, -y) (population proxies only, docs/models/token_selection.md §0).
    """
    n = check_int("n", n, min_value=1)
    rng = as_generator(rng)
    d, D = task.d, task.D
    check_allocation("n", (2 * n if mirror else n, d, D), what="the samples X (n, d, D)")
    if v_star is None:
        v_star = rng.standard_normal(d)
    v_star = _unit_vector("v_star", v_star, d)
    X = task.sigma_x * rng.standard_normal((n, d, D))
    y = np.where(X[:, :, task.jstar_index] @ v_star >= 0.0, 1.0, -1.0)
    if mirror:
        X = np.concatenate([X, -X])
        y = np.concatenate([y, -y])
    return GroupSparseSample(X=X, y=y, v_star=v_star, n_unique=n, mirrored=bool(mirror))


def reduce_sample(s: GroupSparseSample) -> ReducedSample:
    """Reduced statistics (a, Gram of z) of a sample (docs/models/token_selection.md §B.3: Z_ij = w_par a_i a_j + w_perp
    <z_i, z_j> + W22_ij).
    """
    a = np.einsum("e,ned->nd", s.v_star, s.X)
    z = s.X - s.v_star[None, :, None] * a[:, None, :]
    gram = np.einsum("nei,nej->nij", z, z)
    return ReducedSample(a=np.ascontiguousarray(a), gram=np.ascontiguousarray(gram), n_unique=s.n_unique)


def population_sample(
    task: GroupSparseTask, n: Annotated[int, _V.Range(integer=True, ge=1)], rng: Annotated[Any, _V.seed_check] = None
) -> ReducedSample:
    """A Monte Carlo proxy of the population law for the reduced map (docs/models/token_selection.md §B.3, §0): n draws
    of docs/models/token_selection.md §G.B, reduced.

    Parameters
    ----------
    n : int >= 1
    """
    return reduce_sample(sample(task, n, rng))


# ----------------------------------------------------------------------------------------------------------------------
# The full model (numpy, batched)
# ----------------------------------------------------------------------------------------------------------------------


def embed_tokens(X: Annotated[Any, _V.Array(ndim=3)]) -> np.ndarray:
    """Tokens H = [X; I_D] of each draw (docs/models/token_selection.md §B.2, reconstructed embedding): (n, d, D) -> (n,
    d + D, D).
    """
    X = np.asarray(X, dtype=np.float64)
    n, d, D = X.shape
    H = np.empty((n, d + D, D))
    H[:, :d] = X
    H[:, d:] = np.eye(D)
    return H


def _check_weights(v, W, dim):
    v = check_finite_array("v", v, shape=(dim,))
    W = check_finite_array("W", W, shape=(dim, dim))
    return v, W


def forward(
    v: Annotated[Any, _V.Array(ndim=1)], W: Annotated[Any, _V.Array(ndim=2)], X: Annotated[Any, _V.Array(ndim=3)]
):
    """Forward pass f(H; v, W) = v^T H S 1_D with S = column-softmax(H^T W H) (docs/models/token_selection.md §B.2).

    Parameters
    ----------
    v : (d + D,) float64
        Value vector [v_x; v_pos].
    W : (d + D, d + D) float64
        Merged key-query matrix.
    X : (n, d, D) float64
        Features of n draws.

    Returns
    -------
    f : (n,) model outputs.
    S : (n, D, D) attention, S[k, i, j] = weight that query j puts on key i (columns sum to 1).
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 3:
        raise ValueError(f"X must have shape (n, d, D); got {X.shape}")
    v, W = _check_weights(v, W, X.shape[1] + X.shape[2])
    H = embed_tokens(X)
    Z = np.matmul(H.transpose(0, 2, 1), np.matmul(W, H))
    S = softmax(Z, axis=1)
    u = np.einsum("a,nai->ni", v, H)
    f = np.einsum("ni,nij->n", u, S)
    return f, S


def logistic_loss(f: Annotated[Any, _V.Array(ndim=1)], y: Annotated[Any, _V.Array(ndim=1)]) -> np.ndarray:
    """Per-draw logistic loss ell(y f) = log(1 + exp(-y f)) (docs/models/token_selection.md §B.2)."""
    return np.logaddexp(0.0, -np.asarray(y) * np.asarray(f))


def full_gradient(
    v: Annotated[Any, _V.Array(ndim=1)],
    W: Annotated[Any, _V.Array(ndim=2)],
    X: Annotated[Any, _V.Array(ndim=3)],
    y: Annotated[Any, _V.Array(ndim=1)],
    *,
    per_sample: bool = False,
):
    """Loss and gradients of the full model (docs/models/token_selection.md §B.2): grad_v = coef H S 1, grad_W = coef H
    G H^T.

    coef = -lambda y, lambda = 1/(1 + exp(y f)), G_ij = S_ij (u_i - ubar_j), u_i = v^T h_i, ubar_j = sum_k S_kj u_k.

    Returns
    -------
    loss, grad_v, grad_W : the sample means ((), (d+D,), (d+D, d+D)), or with ``per_sample=True`` the per-draw
    values ((n,), (n, d+D), (n, d+D, d+D)).
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    H = embed_tokens(X)
    v, W = _check_weights(v, W, H.shape[1])
    Z = np.matmul(H.transpose(0, 2, 1), np.matmul(W, H))
    S = softmax(Z, axis=1)
    u = np.einsum("a,nai->ni", v, H)
    f = np.einsum("ni,nij->n", u, S)
    coef = -expit(-y * f) * y
    loss = logistic_loss(f, y)
    ubar = np.einsum("ni,nij->nj", u, S)
    cG = coef[:, None, None] * S * (u[:, :, None] - ubar[:, None, :])
    r = S.sum(axis=2)
    HG = np.matmul(H, cG)
    if per_sample:
        gv = coef[:, None] * np.einsum("nai,ni->na", H, r)
        gW = np.matmul(HG, H.transpose(0, 2, 1))
        return loss, gv, gW
    n = X.shape[0]
    gv = np.einsum("nai,ni->a", H, coef[:, None] * r) / n
    gW = np.tensordot(HG, H, axes=([0, 2], [0, 2])) / n
    return float(loss.mean()), gv, gW


# ----------------------------------------------------------------------------------------------------------------------
# Probes: weights -> order parameters (docs/models/token_selection.md §B.3.1), the projection and its inverse
# ----------------------------------------------------------------------------------------------------------------------


def _orbit_index(D: int, js: int) -> np.ndarray:
    """(D, D) int array: orbit 0..4 of each W22 entry (row = key i, column = query j;
    docs/models/token_selection.md §B.3).
    """
    idx = np.full((D, D), 4, dtype=np.int64)
    idx[np.arange(D), np.arange(D)] = 3
    idx[:, js] = 2
    idx[js, :] = 1
    idx[js, js] = 0
    return idx


def embed_state(
    task: GroupSparseTask, state: Annotated[Any, _V.Array(ndim=1)], v_star: Annotated[Any, _V.Array(ndim=1)]
) -> tuple[np.ndarray, np.ndarray]:
    """Full weights (v, W) of a reduced state (docs/models/token_selection.md §B.3): v = [beta v*; 0], W11 = w_par
    v*v*^T + w_perp (I - v*v*^T), W12 = W21 = 0, W22 = m_k on orbit O_k. Inverse of :func:`order_params` on the
    invariant family.
    """
    state = check_finite_array("state", state, shape=(N_STATE,))
    d, D = task.d, task.D
    v_star = _unit_vector("v_star", v_star, d)
    P = np.outer(v_star, v_star)
    v = np.zeros(d + D)
    v[:d] = state[0] * v_star
    W = np.zeros((d + D, d + D))
    W[:d, :d] = state[1] * P + state[2] * (np.eye(d) - P)
    W[d:, d:] = state[3:][_orbit_index(D, task.jstar_index)]
    return v, W


def project(
    task: GroupSparseTask,
    v: Annotated[Any, _V.Array(ndim=1)],
    W: Annotated[Any, _V.Array(ndim=2)],
    v_star: Annotated[Any, _V.Array(ndim=1)],
) -> tuple[np.ndarray, np.ndarray]:
    """Orthogonal projection P(v, W) onto the invariant family of docs/models/token_selection.md §B.3 (formulas of
    docs/models/token_selection.md §B.3.1).
    """
    return embed_state(task, _reduced_coordinates(task, v, W, v_star), v_star)


def _reduced_coordinates(task, v, W, v_star) -> np.ndarray:
    d, D = task.d, task.D
    v, W = _check_weights(v, W, d + D)
    v_star = _unit_vector("v_star", v_star, d)
    P = np.outer(v_star, v_star)
    W11 = W[:d, :d]
    W22 = W[d:, d:]
    orbit = _orbit_index(D, task.jstar_index)
    m = np.bincount(orbit.ravel(), weights=W22.ravel(), minlength=5) / task.orbit_sizes
    return np.concatenate([[v[:d] @ v_star, v_star @ W11 @ v_star, np.sum((np.eye(d) - P) * W11) / (d - 1)], m])


def order_params(
    task: GroupSparseTask,
    v: Annotated[Any, _V.Array(ndim=1)],
    W: Annotated[Any, _V.Array(ndim=2)],
    v_star: Annotated[Any, _V.Array(ndim=1)],
) -> dict[str, float]:
    """Order parameters of any (v, W) (probes of docs/models/token_selection.md §B.3.1).

    Returns a dict with the reduced coordinates ``STATE_NAMES``; the gaps ``gap_ss, gap_s, gap_self``
    (docs/models/token_selection.md §B.3); ``cos_vx_vstar`` = cos(v_x, v*) (NaN when v_x = 0); ``v_pos_norm`` =
    ||v_pos||; ``norm_ratio`` =
    ||v_pos|| / ||v_x|| (docs/models/token_selection.md §B.7, NaN when v_x = 0); ``w_cross_norm`` =
    ||W12||_F + ||W21||_F; ``off`` =

    ||(v, W) - P(v, W)|| / ||(v, W)|| and ``off_W`` = ||W - P(W)|| / ||W|| (0 for the zero matrix), the relative
    distances to the invariant family.
    """
    d = task.d
    v, W = _check_weights(v, W, d + task.D)
    theta = _reduced_coordinates(task, v, W, v_star)
    vp, Wp = embed_state(task, theta, v_star)
    out = dict(zip(STATE_NAMES, (float(x) for x in theta)))
    out.update(_gaps(theta[None, 3:])[0])
    nvx = float(np.linalg.norm(v[:d]))
    nvpos = float(np.linalg.norm(v[d:]))
    out["cos_vx_vstar"] = out["beta"] / nvx if nvx > 0 else math.nan
    out["v_pos_norm"] = nvpos
    out["norm_ratio"] = nvpos / nvx if nvx > 0 else math.nan
    out["w_cross_norm"] = float(np.linalg.norm(W[:d, d:]) + np.linalg.norm(W[d:, :d]))
    total = math.sqrt(float(v @ v) + float(np.sum(W * W)))
    gap = math.sqrt(float(np.sum((v - vp) ** 2)) + float(np.sum((W - Wp) ** 2)))
    out["off"] = gap / total if total > 0 else 0.0
    nW = float(np.linalg.norm(W))
    out["off_W"] = float(np.linalg.norm(W - Wp)) / nW if nW > 0 else 0.0
    return out


def _gaps(m) -> list[dict[str, float]]:
    m = np.atleast_2d(m)
    return [{"gap_ss": float(r[0] - r[2]), "gap_s": float(r[1] - r[4]), "gap_self": float(r[3] - r[4])} for r in m]


def attention_diagnostics(
    task: GroupSparseTask,
    S: Annotated[Any, _V.Array(ndim=3)],
    *,
    quantile: Annotated[float, _V.Range(gt=0, lt=1)] = 0.05,
) -> dict[str, float]:
    """Attention on j* (docs/models/token_selection.md §B.3.1): the mean of S[j*, j] over draws and all D queries, and
    the ``quantile`` over draws of min_j S[j*, j] (default the 5% quantile).

    Parameters
    ----------
    S : (n, D, D) attention of :func:`forward` (rows = keys, columns = queries).
    quantile : float in (0, 1)
    """
    quantile = check_in_range("quantile", quantile, 0.0, 1.0, low_open=True, high_open=True)
    S = np.asarray(S, dtype=np.float64)
    row = S[:, task.jstar_index, :]
    return {"attn_jstar": float(row.mean()), "attn_jstar_q": float(np.quantile(row.min(axis=1), quantile))}


def evaluate(
    task: GroupSparseTask,
    v: Annotated[Any, _V.Array(ndim=1)],
    W: Annotated[Any, _V.Array(ndim=2)],
    s: GroupSparseSample,
) -> dict[str, float]:
    """Training-sample loss, accuracy and attention diagnostics of (v, W) on a sample
    (docs/models/token_selection.md §B.2, §B.3.1).
    """
    f, S = forward(v, W, s.X)
    out = {"loss": float(logistic_loss(f, s.y).mean()), "accuracy": float(np.mean(s.y * f > 0))}
    out.update(attention_diagnostics(task, S))
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Full-matrix GD (numpy)
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FullGDRun:
    """Result of :func:`full_gd` (GD of docs/models/token_selection.md §B.2): the probe trajectory and the final weights
    (v, W).
    """

    trajectory: Trajectory
    v: Annotated[np.ndarray, _V.Array(ndim=1)]
    W: Annotated[np.ndarray, _V.Array(ndim=2)]


FULL_GD_VARIABLES = GAP_NAMES + (
    "cos_vx_vstar",
    "v_pos_norm",
    "norm_ratio",
    "w_cross_norm",
    "off",
    "off_W",
    "loss",
    "accuracy",
    "attn_jstar",
    "attn_jstar_q",
)


def full_gd(
    task: GroupSparseTask,
    s: GroupSparseSample,
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)],
    *,
    v0: Annotated[Any, _V.Array(ndim=1)] = None,
    W0: Annotated[Any, _V.Array(ndim=2)] = None,
    project_steps: Annotated[Any, _V.check_bool] = False,
    saveat: Annotated[SaveAt | None, _V.Instance(SaveAt)] = None,
) -> FullGDRun:
    """Full-matrix gradient descent on the empirical logistic loss of a sample (docs/models/token_selection.md §B.2),
    from v = 0, W = 0 by default.

    v <- v - eta grad_v L, W <- W - eta grad_W L with the gradients of :func:`full_gradient`. With
    ``project_steps=True`` the weights are projected onto the invariant family after every step (the projected
    dynamics of docs/models/token_selection.md §B.3, exactly the reduced map on this sample). The probes of
    docs/models/token_selection.md §B.3.1 and the sample loss, accuracy and attention are recorded at the ``saveat``
    steps (default ``SaveAt(n=201)``).

    Parameters
    ----------
    n_steps : int >= 0

    Raises
    ------
    DivergenceError
        When v or W become non-finite (names the step and the variable).
    """
    n_steps = check_int("n_steps", n_steps, min_value=0)
    steps = (saveat or DEFAULT_SAVEAT).resolve_steps(n_steps)
    dim = task.dim
    v = np.zeros(dim) if v0 is None else check_finite_array("v0", v0, shape=(dim,)).copy()
    W = np.zeros((dim, dim)) if W0 is None else check_finite_array("W0", W0, shape=(dim, dim)).copy()
    if s.X.shape[1:] != (task.d, task.D):
        raise ValueError(f"sample X must have shape (n, d={task.d}, D={task.D}); got {s.X.shape}")
    rows = []
    save_set = set(int(t) for t in steps)
    for t in range(n_steps + 1):
        if t in save_set:
            probes = order_params(task, v, W, s.v_star)
            probes.update(evaluate(task, v, W, s))
            rows.append(probes)
        if t == n_steps:
            break
        with np.errstate(over="ignore", invalid="ignore"):
            _, gv, gW = full_gradient(v, W, s.X, s.y)
            v = v - task.eta * gv
            W = W - task.eta * gW
        for name, arr in (("v", v), ("W", W)):
            if not np.all(np.isfinite(arr)):
                raise DivergenceError(
                    f"full GD diverged at step {t + 1}: {name} is not finite",
                    trajectory=0,
                    variable=name,
                    step=t + 1,
                    time=task.eta * (t + 1),
                )
        if project_steps:
            v, W = project(task, v, W, s.v_star)
    Y = np.array([[row[name] for name in STATE_NAMES] for row in rows])
    variables = {name: np.array([[row[name] for row in rows]]) for name in FULL_GD_VARIABLES}
    traj = Trajectory.from_arrays(
        Y,
        names=STATE_NAMES,
        time=task.time_of_step(steps),
        step=steps,
        variables=variables,
        attrs={
            "model": "group_sparse",
            "spec": task,
            "source": "full_gd_projected" if project_steps else "full_gd",
            "time_unit": "eta*step",
            "equation": "docs/models/token_selection.md §B.2",
            "config": {"n_unique": s.n_unique, "n_samples": int(s.X.shape[0]), "mirrored": s.mirrored},
        },
    )
    return FullGDRun(trajectory=traj, v=v, W=W)


# ----------------------------------------------------------------------------------------------------------------------
#  The reduced map (docs/models/token_selection.md §B.3), population expectations by Monte Carlo with common random
# numbers
# ----------------------------------------------------------------------------------------------------------------------


def _check_state(state) -> np.ndarray:
    return check_finite_array("state", state, shape=(N_STATE,))


def _check_reduced(task: GroupSparseTask, rs: ReducedSample) -> None:
    if rs.a.ndim != 2 or rs.a.shape[1] != task.D or rs.gram.shape != (rs.a.shape[0], task.D, task.D):
        raise ValueError(
            f"reduced sample must have a (n, D={task.D}) and gram (n, D, D); got {rs.a.shape}, {rs.gram.shape}"
        )


def reduced_gradient(
    task: GroupSparseTask, state: Annotated[Any, _V.Array(ndim=1)], rs: ReducedSample
) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo population gradient dL/d(beta, w_par, w_perp, m1..m5) and its standard errors
    (docs/models/token_selection.md §B.3).

    The partial derivatives are the full-matrix gradient of docs/models/token_selection.md §B.2 projected on the
    (unnormalised) basis of the invariant family: dL/dbeta = <grad_vx, v*>, dL/dw_par = <grad_W11, v*v*^T>, dL/dw_perp =
    <grad_W11, I - v*v*^T>, dL/dm_k = sum of grad_W22 over orbit O_k. Standard errors: per-draw standard deviation /
    sqrt(n_unique).

    Returns
    -------
    grad, se : (8,) float64 each.
    """
    state = _check_state(state)
    _check_reduced(task, rs)
    terms = np.empty((rs.a.shape[0], N_STATE + 1))
    _k.reduced_terms(state, task.jstar_index, rs.a, rs.gram, terms)
    grad = terms[:, :N_STATE].mean(axis=0)
    se = terms[:, :N_STATE].std(axis=0, ddof=1) / math.sqrt(rs.n_unique) if terms.shape[0] > 1 else np.full(8, np.nan)
    return grad, se


def reduced_update(task: GroupSparseTask, state: Annotated[Any, _V.Array(ndim=1)], rs: ReducedSample) -> np.ndarray:
    """One step of the reduced GD map (docs/models/token_selection.md §B.3): beta, w_par step eta; w_perp eta/(d-1); m_k
    eta/|O_k|.
    """
    state = _check_state(state)
    _check_reduced(task, rs)
    grad = np.empty(N_STATE)
    _k.reduced_grad_mean(state, task.jstar_index, rs.a, rs.gram, grad)
    out = np.empty(N_STATE)
    _k.apply_update(state, grad, task.eta, float(task.d), float(task.D), out)
    return out


def reduced_evaluate(
    task: GroupSparseTask,
    state: Annotated[Any, _V.Array(ndim=1)],
    rs: ReducedSample,
    *,
    quantile: Annotated[float, _V.Range(gt=0, lt=1)] = 0.05,
) -> dict[str, float]:
    """Loss (with its SE), accuracy, mean attention on j* and the ``quantile`` of min_j S[j*, j] at a reduced state
    on the reduced sample (docs/models/token_selection.md §B.3.1; equal to :func:`evaluate` at :func:`embed_state`).

    Parameters
    ----------
    quantile : float in (0, 1)
    """
    state = _check_state(state)
    _check_reduced(task, rs)
    quantile = check_in_range("quantile", quantile, 0.0, 1.0, low_open=True, high_open=True)
    out = np.empty((rs.a.shape[0], 4))
    _k.reduced_eval(state, task.jstar_index, rs.a, rs.gram, out)
    return {
        "loss": float(out[:, 0].mean()),
        "loss_se": float(out[:, 0].std(ddof=1) / math.sqrt(rs.n_unique)),
        "accuracy": float(out[:, 1].mean()),
        "attn_jstar": float(out[:, 2].mean()),
        "attn_jstar_q": float(np.quantile(out[:, 3], quantile)),
    }


def pack_params(task: GroupSparseTask, rs: ReducedSample) -> np.ndarray:
    """Parameter row of the ``dynamics.iterate`` map (docs/models/token_selection.md §B.3): [eta, d]; the sample goes
    to the kernel as data (the engine's ``args`` channel).
    """
    _check_reduced(task, rs)
    return np.array([task.eta, task.d], dtype=np.float64)


def _kernel_args(task: GroupSparseTask, rs: ReducedSample) -> tuple:
    """Data of the map kernel (``dynamics.iterate``'s ``args``): (a (n, D), gram (n, D, D), [j* - 1] as int64)."""
    _check_reduced(task, rs)
    return (
        np.ascontiguousarray(rs.a, dtype=np.float64),
        np.ascontiguousarray(rs.gram, dtype=np.float64),
        np.array([task.jstar_index], dtype=np.int64),
    )


def map(
    task: GroupSparseTask,
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)],
    *,
    rs: Annotated[Any, _sample_list_check(ReducedSample)] = None,
    n_samples: Annotated[int, _V.Range(integer=True, ge=2)] = 4000,
    rng: Annotated[Any, _V.seed_check] = None,
    state0: Annotated[Any, _V.Array(ndim=(1, 2))] = None,
    saveat: Annotated[SaveAt | None, _V.Instance(SaveAt)] = None,
    with_se: bool = True,
    progress: bool = False,
    eta: Annotated[Any, _V.Range(array=True, gt=0)] = None,
    warn_unconverged: bool = True,
) -> Trajectory:
    """The reduced 8-scalar GD dynamics of docs/models/token_selection.md §B.3 on a fixed Monte Carlo sample (common
    random numbers), from zero.

    Runs the numba map through ``dynamics.iterate``. The sample is ``rs`` if given, else ``n_samples`` draws of
    docs/models/token_selection.md §G.B from ``rng``. Saved variables: the state ``STATE_NAMES``; derived ``gap_ss,
    gap_s, gap_self``, ``loss`` (and ``loss_se``), ``accuracy``, ``attn_jstar``, ``attn_jstar_q`` (5% quantile of min_j
    S[j*, j]); with ``with_se`` also ``grad_<name>`` and ``se_grad_<name>`` (the MC gradient and its standard error at
    each saved state). Time axis: ``step`` = t, ``time`` = eta t. ``eta`` (float or (n,) array, optional) overrides the
    task's step per trajectory (:func:`closedform.nearest_neighbor.eta_batch`): one call runs a grid of step sizes on
    the same sample (then ``time`` = t unless they are all equal).

    ``rs`` may also be a sequence of ReducedSample (e.g. one per seed, :func:`reduce_sample` of each seed's training
    set): trajectory i then runs on ``rs[i]`` from row i of ``state0`` (or the one ``state0``) with ``eta[i]`` (or
    the one ``eta``), and the result equals the per-sample calls stacked along ``trajectory``
    (with a ``sample`` coordinate).

    ``warn_unconverged`` (default True): warn (``dynamics.UnconvergedWarning``) when a trajectory's step norm (the
    max-norm of one update) did not decrease over the last half of the run, i.e. a cycle or chaos from too large
    a step size (past the stability limit the map can also raise ``dynamics.DivergenceError``). A run that is merely
    unconverged does not warn: the logistic loss has no minimiser at finite weights (the attention and value
    scalars keep growing, docs/models/token_selection.md §B.4), so the steps only shrink. ``final_step_norm``,
    ``converged`` (step norm < 1e-8) and ``step_norm_trend`` (``dynamics.convergence``) are returned either way.

    Parameters
    ----------
    n_steps : int >= 0
    n_samples : int >= 2
    eta : float or array > 0
    """
    if rs is not None and not isinstance(rs, ReducedSample):
        traj = _over_samples(
            lambda r, s0, e: map(
                task,
                n_steps,
                rs=r,
                state0=s0,
                saveat=saveat,
                with_se=with_se,
                progress=progress,
                eta=e,
                warn_unconverged=False,
            ),
            _sample_list(rs, ReducedSample, "rs"),
            state0,
            eta,
        )
        return check_run(traj, warn_unconverged, what="group_sparse.map", fixed_points=False)
    n_steps = check_int("n_steps", n_steps, min_value=0)
    if rs is None:
        rs = population_sample(task, check_int("n_samples", n_samples, min_value=2), rng)
    _check_reduced(task, rs)
    x0 = np.zeros(N_STATE) if state0 is None else _check_state(state0)
    p, x0, time_scale, time_unit = eta_batch(pack_params(task, rs), 0, eta, x0)

    names = GAP_NAMES + ("loss", "loss_se", "accuracy", "attn_jstar", "attn_jstar_q")
    if with_se:
        names += tuple(f"{kind}_{name}" for name in STATE_NAMES for kind in ("grad", "se_grad"))
    traj = dynamics.iterate(
        _k.reduced_step,
        x0,
        n_steps,
        params=p,
        args=_kernel_args(task, rs) + (np.array([float(rs.n_unique), 0.05]),),  # reduced_evaluate's 5% quantile
        saveat=saveat,
        names=list(STATE_NAMES),
        observe=_k.observables_se if with_se else _k.observables,  # the diagnostics of every save, in the loop
        observe_names=names,
        step_observe=_k.step_observables_se if with_se else None,
        time_scale=time_scale,
        progress=progress,
        attrs={
            "model": "group_sparse",
            "spec": task,
            "source": "closedform",
            "time_unit": time_unit,
            "equation": "docs/models/token_selection.md §B.3",
            "config": {"n_unique": rs.n_unique, "n_samples": rs.a.shape[0]},
        },
    )
    return check_run(traj, warn_unconverged, what="group_sparse.map", fixed_points=False)


# ----------------------------------------------------------------------------------------------------------------------
# Closed forms of the first two GD steps (docs/models/token_selection.md §B.3)
# ----------------------------------------------------------------------------------------------------------------------


def beta_step1(task: GroupSparseTask) -> float:
    """beta^(1) = eta sigma_x / sqrt(2 pi) (docs/models/token_selection.md §B.3, first GD step; W^(1) = 0, v_pos^(1) =
    0).
    """
    return task.eta * task.sigma_x / math.sqrt(2.0 * math.pi)


@functools.lru_cache(maxsize=64)
def step2_expectations(
    task: GroupSparseTask,
    *,
    epsabs: Annotated[float, _V.Range(gt=0)] = 1e-14,
    epsrel: Annotated[float, _V.Range(gt=0)] = 1e-12,
) -> Mapping[str, float]:
    """The three 2-D Gaussian integrals of step 2 (docs/models/token_selection.md §B.3), by adaptive quadrature over A >
    0 (doubled by symmetry).

    With A = a_{j*} ~ N(0, sigma_x^2), R = sum_{k != j*} a_k ~ N(0, (D-1) sigma_x^2), y = sign A, abar = (A+R)/D,
    lambda = 1/(1 + exp(y beta^(1) (A + R))) and c(A, R) = A^2 + R^2/(D-1) + (D-2) sigma_x^2 - (A+R)^2/D:
    ``e_beta`` = E[lambda y (A + R)], ``m_star`` = E[lambda y (A - abar)], ``e_wpar`` = E[lambda y abar c(A, R)].
    Cached per spec; the returned mapping is read-only.

    Parameters
    ----------
    epsabs : float > 0
    epsrel : float > 0
    """
    b1 = beta_step1(task)
    D, sx = task.D, task.sigma_x
    sr = math.sqrt(D - 1.0) * sx
    norm = 1.0 / (2.0 * math.pi * sx * sr)

    def integrand(r, a, which):
        s = a + r
        lam = expit(-b1 * s)
        dens = norm * math.exp(-0.5 * (a / sx) ** 2 - 0.5 * (r / sr) ** 2)
        if which == 0:
            g = s
        elif which == 1:
            g = a - s / D
        else:
            g = (s / D) * (a * a + r * r / (D - 1.0) + (D - 2.0) * sx * sx - s * s / D)
        return 2.0 * lam * g * dens

    out = {}
    for which, name in enumerate(("e_beta", "m_star", "e_wpar")):
        val, _ = _integrate.dblquad(
            integrand, 0.0, np.inf, -np.inf, np.inf, args=(which,), epsabs=epsabs, epsrel=epsrel
        )
        out[name] = float(val)
    return MappingProxyType(out)


def step_closed_form(task: GroupSparseTask, t: Annotated[int, _V.Range(integer=True, ge=0, le=2)]) -> np.ndarray:
    """Reduced state (beta, w_par, w_perp, m1..m5) after t in {0, 1, 2} population GD steps
    (docs/models/token_selection.md §B.3 closed forms).

    t = 1: beta^(1) = eta sigma_x/sqrt(2 pi), W^(1) = 0. t = 2: beta^(2) = beta^(1) + eta E[lambda y (A + R)],
    w_par^(2) = eta beta^(1) E[lambda y abar sum_i (a_i - abar)^2], w_perp^(2) = 0,
    W22^(2)[i, j] = eta beta^(1) g_i / D with g_{j*} = m*, g_i = -m*/(D - 1): m1 = m2 = eta beta^(1) m*/D,
    m3 = m4 = m5 = -eta beta^(1) m*/(D (D - 1)).

    Parameters
    ----------
    t : int in [0, 2]
    """
    t = check_int("t", t, min_value=0, max_value=2)
    state = np.zeros(N_STATE)
    if t == 0:
        return state
    b1 = beta_step1(task)
    state[0] = b1
    if t == 1:
        return state
    e = step2_expectations(task)
    eta, D = task.eta, task.D
    state[0] = b1 + eta * e["e_beta"]
    state[1] = eta * b1 * e["e_wpar"]
    key_js = eta * b1 * e["m_star"] / D
    state[3:5] = key_js
    state[5:8] = -key_js / (D - 1.0)
    return state


# ----------------------------------------------------------------------------------------------------------------------
# Theorem predictions (docs/models/token_selection.md §B.4)
# ----------------------------------------------------------------------------------------------------------------------


def theorem_horizon(
    task: GroupSparseTask, eps_B: Annotated[float, _V.Range(gt=0)], *, const: Annotated[float, _V.Range(gt=0)] = 1.0
) -> float:
    """T* = const * max{D^3, 1/(D^3 eps_B^3)} of the pre-training theorem (docs/models/token_selection.md §B.4;
    Theta(.), so ``const`` is free).

    Parameters
    ----------
    eps_B : float > 0
    const : float > 0
    """
    eps_B = check_positive("eps_B", eps_B)
    const = check_positive("const", const)
    D = task.D
    return const * max(D**3, 1.0 / (D**3 * eps_B**3))


def theorem_loss_order(task: GroupSparseTask, eps_B: Annotated[float, _V.Range(gt=0)]) -> float:
    """Loss order at T*: Theta(min{eps_B, D^-2}) (docs/models/token_selection.md §B.4 item 3), returned with constant
    1.

    Parameters
    ----------
    eps_B : float > 0
    """
    eps_B = check_positive("eps_B", eps_B)
    return min(eps_B, task.D**-2.0)


def attention_lower_bound(task: GroupSparseTask, *, c: Annotated[float, _V.Range(gt=0)] = 1.0) -> float:
    """Attention concentration of docs/models/token_selection.md §B.4 item 1: S_{j*, j}^(T*) >= 1 - exp(-c D) for all
    queries j (c = Theta(1)).

    Parameters
    ----------
    c : float > 0
    """
    c = check_positive("c", c)
    return 1.0 - math.exp(-c * task.D)


def direction_error_bound(
    task: GroupSparseTask, eps_B: Annotated[float, _V.Range(gt=0)], *, c: Annotated[float, _V.Range(gt=0)] = 1.0
) -> float:
    """|| v_x/||v_x|| - v* || <= eps_B D exp(-c sqrt(D)) (docs/models/token_selection.md §B.4 item 2; c = Theta(1)
    unspecified).

    Parameters
    ----------
    eps_B : float > 0
    c : float > 0
    """
    eps_B = check_positive("eps_B", eps_B)
    c = check_positive("c", c)
    return eps_B * task.D * math.exp(-c * math.sqrt(task.D))


def loss_rate_statistic(
    task: GroupSparseTask,
    t: Annotated[Any, _V.Range(array=True, ge=0, le=_V.MAX_INT)],
    loss: Annotated[Any, _V.Range(array=True, ge=0)],
) -> np.ndarray:
    """D L T^{1/3}, which docs/models/token_selection.md §B.4 item 3 (read as L(T) = Theta(1/(D T^{1/3})) for T >= D^3)
    predicts to be constant.

    Parameters
    ----------
    t : float or array in [0, 2147483647]
    loss : float or array >= 0
    """
    return task.D * np.asarray(loss, dtype=np.float64) * np.cbrt(np.asarray(t, dtype=np.float64))


def predicted_loss(
    task: GroupSparseTask,
    t: Annotated[Any, _V.Range(array=True, ge=0, le=_V.MAX_INT)],
    *,
    const: Annotated[float, _V.Range(gt=0)] = 1.09,
) -> np.ndarray:
    """L(T) = const / (D T^{1/3}) (docs/models/token_selection.md §B.4 item 3, derived reading); const = 1.09 is the
    mean measured in docs/models/token_selection.md §B.6.

    Parameters
    ----------
    t : float or array in [0, 2147483647]
    const : float > 0
    """
    const = check_positive("const", const)
    t = np.asarray(t, dtype=np.float64)
    if np.any(t <= 0):
        raise ValueError("t must be > 0 for the T^(1/3) loss rate")
    return const / (task.D * np.cbrt(t))


def downstream_error_bound(
    task: GroupSparseTask,
    n: Annotated[Any, _V.Range(array=True, gt=0, le=_V.MAX_INT)],
    *,
    gamma: Annotated[float, _V.Range(gt=0)],
    delta: Annotated[float, _V.Range(gt=0, lt=1)],
    const: Annotated[float, _V.Range(gt=0)] = 1.0,
):
    """Downstream-transfer bound of docs/models/token_selection.md §B.4 (Theorem, constants unspecified): after online
    SGD on n fresh samples with the pre-trained W, test error <= const ((d + D) log^2 n / (gamma^2 n) + log(1/delta) /
    n).

    Compare with :func:`linear_sample_complexity`, the Omega(d D / eps) lower bound of logistic regression on vec(X).

    Parameters
    ----------
    n : float or array in (0, 2147483647]
    gamma : float > 0
    delta : float in (0, 1)
    const : float > 0
    """
    gamma = check_positive("gamma", gamma)
    delta = check_in_range("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    const = check_positive("const", const)
    n = np.asarray(n, dtype=np.float64)
    if np.any(n < 2):
        raise ValueError("n must be >= 2 (downstream sample size)")
    return const * ((task.d + task.D) * np.log(n) ** 2 / (gamma**2 * n) + math.log(1.0 / delta) / n)


def linear_sample_complexity(
    task: GroupSparseTask, eps: Annotated[float, _V.Range(gt=0)], *, const: Annotated[float, _V.Range(gt=0)] = 1.0
) -> float:
    """Omega(d D / eps) samples needed by linear logistic regression on vec(X) (docs/models/token_selection.md §B.4,
    downstream theorem),
    returned as const d D / eps.

    Parameters
    ----------
    eps : float > 0
    const : float > 0
    """
    eps = check_positive("eps", eps)
    const = check_positive("const", const)
    return const * task.d * task.D / eps


def theorem_predictions(task: GroupSparseTask, eps_B: Annotated[float, _V.Range(gt=0)]) -> dict[str, float]:
    """The pre-training theorem's named predictions for ``task`` at accuracy ``eps_B``
    (docs/models/token_selection.md §B.4), with the unrecoverable Theta(1) constants set to 1.

    Keys (each a float):

    * ``horizon``: T* = max{D^3, 1/(D^3 eps_B^3)} (docs/models/token_selection.md §B.4).
    * ``loss_order``: the loss order min{eps_B, D^-2} at T* (docs/models/token_selection.md §B.4 item 3).
    * ``attention_lower_bound``: 1 - exp(-D), the attention on group j* at T* (docs/models/token_selection.md §B.4 item
      1).
    * ``direction_error_bound``: eps_B D exp(-sqrt D), the direction error of v_x at T*
      (docs/models/token_selection.md §B.4 item 2).
    * ``beta_step1``: beta^(1) = eta sigma_x / sqrt(2 pi) after the first GD step, exact
      (docs/models/token_selection.md §B.3).

    Parameters
    ----------
    eps_B : float > 0
    """
    if not isinstance(task, GroupSparseTask):
        raise TypeError(f"task must be a GroupSparseTask; got {type(task).__name__}")
    return {
        "horizon": theorem_horizon(task, eps_B),
        "loss_order": theorem_loss_order(task, eps_B),
        "attention_lower_bound": attention_lower_bound(task),
        "direction_error_bound": direction_error_bound(task, eps_B),
        "beta_step1": beta_step1(task),
    }


# ----------------------------------------------------------------------------------------------------------------
# Argument checks of every public function and class (dynamics.validation): each parameter's rule is declared at its
# definition (a class annotation, or a rule in its ``Annotated`` metadata); each function's own checks (shapes against
# the task, unit v_star, ...) follow. Checks run once per outermost call, so the loops of ``map``/``full_gd`` pay
# nothing.

from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)


_V.validate_module(globals())
