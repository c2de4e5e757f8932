"""A one-layer transformer learns the in-context 1-nearest-neighbour rule: exact reduced GD and theorem checks.

Implements ``docs/models/token_selection.md`` Study A (sections A.0-docs/models/token_selection.md §A.10, public
reference values of section 4, recipe docs/models/token_selection.md §G.A). Prompts hold N labelled points x_j on the
sphere S^{d-1} and a query x_query; the target is the label of the nearest context point i*. A softmax attention layer
with merged key-query matrix W and identity value reads the label row: f_W(H) = sum_j q_j y_j, q = softmax(H^T W
h_query) (docs/models/token_selection.md §A.3). GD on the population square loss from W^(0) = diag(0, ..., 0, -sigma)
stays on the family W = diag(xi1 I_d, 0, -xi2) (docs/models/token_selection.md §A.5), so the training dynamics are
exactly the two-scalar map of docs/models/token_selection.md §A.5 ("xi1 <- xi1 - (eta/d) dL/dxi1, xi2 <- xi2 - eta
dL/dxi2"), with the population expectations replaced by a fixed Monte Carlo sample of prompts (common random numbers
across steps, docs/models/token_selection.md §0).

Time axis: the GD step t (``step``); ``time`` = eta * t is the flow time tau of docs/models/token_selection.md §0.

Symbol table (docs/models/token_selection.md §A.0)
--------------------------------------------------
Sections (§) in the last column are those of docs/models/token_selection.md.

=============  ==============  ============================================================  ==============  ======
code           paper           meaning                                                       shape           where
=============  ==============  ============================================================  ==============  ======
d              d               dimension; inputs on S^{d-1}                                  int             §A.1
N              N               number of labelled context points                             int             §A.1
X, xq          x_j, x_query    context inputs, query                                         (B,N,d), (B,d)  §A.1
y              y_j             context labels (Rademacher in the canonical instance)         (B, N)          §A.1
istar          i*              0-based index of the nearest neighbour of x_query             (B,) int        §A.1
c              c_j             <x_j, x_query>; c_{N+1} := 1                                  (B, N)          §A.5
H              H, h_j          embedded prompt [x; y; indicator]                             (B,d+2,N+1)     §A.2
W              W               merged key-query matrix                                       (d+2, d+2)      §A.3
sigma          sigma           mask, W33^(0) = -sigma                                        float           §A.4
eta            eta             GD step size                                                  float           §A.4
xi1, xi2       xi1, xi2        reduced state, W = diag(xi1 I_d, 0, -xi2)                     float           §A.5
q, q_self      q_j, q_{N+1}    attention of the query on token j / on itself                 (B, N+1)        §A.5
L              L               population square loss 1/2 E[(f - y_{i*})^2]                  float           §A.4
off            off             relative Frobenius distance of W to the reduced family        float           §A.5.1
k_d, a_Nd      k_d, a_{N,d}    constants of Theorem A1                                       float           §A.6
delta, R       delta, R        separation gap, label bound (Theorem A2)                      float           §A.6
=============  ==============  ============================================================  ==============  ======

Notes
-----
* The loss on the family is evaluated with the labels integrated out exactly (docs/models/token_selection.md §A.3):
  L = 1/2 E[sum_j q_j^2 - 2 q_{i*} + 1]; only the x's are sampled.
* Theorem A1's rate O(poly(N, d)/log t) is an upper bound with unrecoverable constants; at the sizes we can run the
  loss falls faster, about t^(-1/3), and xi1 grows like t^(1/3) (d=4, N=16: local exponents 0.34-0.36 for
  t = 10^3..2*10^4). Heuristic [derived here, not in the paper]: once the self-token is masked, L ~ C/xi1 (the mass on
  near-ties decays like 1/xi1), so dxi1/dt ~ (eta/d) C/xi1^2 and xi1 ~ t^(1/3). The ratio bound xi1 <= (7/15) xi2 of
  the proof is [not reproduced] (docs/models/token_selection.md §A.6) and deliberately not implemented.
"""

from __future__ import annotations

from typing import Annotated, Any
import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy.integrate
import scipy.linalg
import scipy.special

import dynamics
from closedform import _nearest_neighbor_kernels as _k
from dynamics.convergence import check_run
from dynamics.errors import DivergenceError
from dynamics.random import as_generator
from dynamics.saveat import SaveAt
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
    "TIME_UNIT",
    "STATE_NAMES",
    "DIAGNOSTIC_NAMES",
    "NearestNeighborTask",
    "Prompts",
    "sample_prompts",
    "sample_shifted_prompts",
    "embed",
    "initial_W",
    "family_W",
    "attention",
    "forward",
    "full_loss",
    "full_gradient",
    "probe",
    "full_diagnostics",
    "per_prompt",
    "reduced_loss",
    "reduced_gradient",
    "diagnostics",
    "loss_xi1_zero",
    "expected_max_inner_product",
    "gradient_xi1_zero",
    "first_step",
    "pack_params",
    "eta_batch",
    "map",
    "full_gd",
    "label_design",
    "repeat_with_labels",
    "signed_permutations",
    "symmetrized_prompts",
    "k_d",
    "a_Nd",
    "sigma_condition",
    "loss_decay_bound",
    "separation_gap",
    "squared_errors",
    "shifted_test_bound",
    "theorem_predictions",
]

REFERENCE = {
    "title": "One-layer transformer provably learns one-nearest neighbor in context",
    "authors": "Li, Cao, Gao, He, Liu, Klusowski, Fan, Wang",
    "venue": "NeurIPS 2024",
    "arxiv": "2411.10830",
    "bibtex_key": "li2024onenn",
    "spec": "docs/models/token_selection.md, Study A",
}

#: The time axis of every trajectory of this module: the GD step t (``step``); ``time`` = eta * t is the
# : gradient-flow time tau of docs/models/token_selection.md §0 (with one shared eta; per-trajectory step sizes give
# time = step).
TIME_UNIT = "GD step t; time = eta * t, the flow time tau (docs/models/token_selection.md §0)"

STATE_NAMES = ("xi1", "xi2")
DIAGNOSTIC_NAMES = (
    "L",
    "L_se",
    "q_istar",
    "q_istar_lo",
    "q_self",
    "grad_xi1",
    "grad_xi1_se",
    "grad_xi2",
    "grad_xi2_se",
)


# ----------------------------------------------------------------------------------------------------------------
# Task spec and data
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NearestNeighborTask:
    """The 1-NN in-context task (docs/models/token_selection.md §A.1-§A.4): data law, embedding, model, loss,
    initialisation, step size.

    Data: x_1..x_N, x_query i.i.d. uniform on S^{d-1}, labels i.i.d. Rademacher (docs/models/token_selection.md §A.1).
    Embedding docs/models/token_selection.md §A.2, model f_W(H) = sum_j q_j y_j (docs/models/token_selection.md §A.3),
    loss 1/2 E[(f - y_{i*})^2] and GD from W^(0) = diag(0_{d+1}, -sigma) (docs/models/token_selection.md §A.4).

    Parameters
    ----------
    d : int >= 2
        Dimension of the inputs.
    N : int >= 2
        Number of labelled context points.
    sigma : float >= 0
        Mask, W33^(0) = -sigma (docs/models/token_selection.md §A.4; sigma = 0 is the mask ablation of
        docs/models/token_selection.md §A.8).
    eta : float > 0
        GD step size.
    """

    d: Annotated[int, _V.Range(integer=True, ge=2)]
    N: Annotated[int, _V.Range(integer=True, ge=2)]
    sigma: Annotated[float, _V.Range(ge=0)]
    eta: Annotated[float, _V.Range(gt=0)]

    def __post_init__(self):
        object.__setattr__(self, "d", check_int("d", self.d, min_value=2))
        object.__setattr__(self, "N", check_int("N", self.N, min_value=2))
        object.__setattr__(self, "sigma", check_nonneg("sigma", self.sigma))
        object.__setattr__(self, "eta", check_positive("eta", self.eta))

    @property
    def dim(self) -> int:
        """Input dimension d (cross-model name)."""
        return self.d

    @property
    def seq_len(self) -> int:
        """Number of tokens N + 1 (context plus query)."""
        return self.N + 1

    @property
    def embed_dim(self) -> int:
        """Embedding dimension d + 2 (docs/models/token_selection.md §A.2)."""
        return self.d + 2

    def time_of_step(self, step):
        """Flow time tau = eta * t of GD step t (docs/models/token_selection.md §0)."""
        return self.eta * np.asarray(step, dtype=np.float64)

    def step_of_time(self, time):
        """GD step t = tau / eta of flow time tau (docs/models/token_selection.md §0)."""
        return np.asarray(time, dtype=np.float64) / self.eta


@dataclass(frozen=True)
class Prompts:
    """A fixed sample of prompts (docs/models/token_selection.md §A.1, recipe docs/models/token_selection.md §G.A), the
    common random numbers of a reduced-GD run.

    Attributes
    ----------
    X : (B, N, d) float64
        Context inputs on S^{d-1}.
    xq : (B, d) float64
        Queries on S^{d-1}.
    c : (B, N) float64
        Inner products <x_j, x_query>.
    istar : (B,) int64
        0-based index of the nearest neighbour, argmax_j c[b, j].
    y : (B, N) float64 or None
        Explicit labels (needed only by the full-matrix model and the test MSE).
    """

    X: np.ndarray
    xq: np.ndarray
    c: np.ndarray
    istar: np.ndarray
    y: np.ndarray | None = None

    def __post_init__(self):
        X = check_finite_array("X", self.X, ndim=3)
        xq = check_finite_array("xq", self.xq)
        c = check_finite_array("c", self.c)
        if xq.shape != (X.shape[0], X.shape[2]):
            raise ValueError(f"X must be (B, N, d) and xq (B, d); got {X.shape} and {xq.shape}")
        if c.shape != X.shape[:2] or np.shape(self.istar) != X.shape[:1]:
            raise ValueError(f"c must be (B, N) and istar (B,); got {c.shape} and {np.shape(self.istar)}")
        istar = np.asarray(self.istar)
        if istar.dtype.kind not in "iu":
            raise ValueError(f"istar must be an integer array of 0-based indices; got dtype {istar.dtype}")
        istar = istar.astype(np.int64)
        N = X.shape[1]
        if np.any(istar < 0) or np.any(istar >= N):
            raise ValueError(
                f"istar must hold 0-based indices in [0, N-1] = [0, {N - 1}]; got values in "
                f"[{istar.min()}, {istar.max()}] (1-based indices as in the paper: subtract 1)"
            )
        #  c must be <x_j, x_query> (docs/models/token_selection.md §A.1) and istar its argmax; 1e-9 is round-off of
        # d-term products of unit vectors, far below the gap to a wrong index (a 1-based istar picks another point, c
        # lower by O(1/N)).
        if np.abs(np.einsum("bnd,bd->bn", X, xq) - c).max(initial=0.0) > 1e-9:
            raise ValueError("c must equal the inner products <X[b, j], xq[b]> (docs/models/token_selection.md §A.1)")
        rows = np.arange(X.shape[0])
        short = c.max(axis=1) - c[rows, istar]
        if np.any(short > 1e-12):
            b = int(np.argmax(short))
            raise ValueError(
                f"istar must be the 0-based nearest neighbour argmax_j c[b, j] "
                f"(docs/models/token_selection.md §A.1); prompt {b}: "
                f"istar = {istar[b]}, argmax = {int(np.argmax(c[b]))} (a 1-based index?)"
            )
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "xq", xq)
        object.__setattr__(self, "c", c)
        object.__setattr__(self, "istar", istar)
        if self.y is not None:
            y = check_finite_array("y", self.y)
            if y.shape != X.shape[:2]:
                raise ValueError(f"y must have shape (B, N) = {X.shape[:2]}; got {y.shape}")
            object.__setattr__(self, "y", y)

    @property
    def n_prompts(self) -> int:
        """Number of prompts B."""
        return self.X.shape[0]

    @property
    def N(self) -> int:
        """Context length N."""
        return self.X.shape[1]

    @property
    def d(self) -> int:
        """Dimension d."""
        return self.X.shape[2]

    @property
    def target(self) -> np.ndarray:
        """Labels of the nearest neighbour y_{i*} (B,); needs explicit labels."""
        return self.y[np.arange(self.n_prompts), self.istar]


def _prompts_from(X, xq, y=None) -> Prompts:
    c = np.einsum("bjd,bd->bj", X, xq)
    return Prompts(X=X, xq=xq, c=c, istar=np.argmax(c, axis=1).astype(np.int64), y=y)


def sample_prompts(
    task: NearestNeighborTask,
    n_prompts: Annotated[int, _V.Range(integer=True, ge=1)],
    rng: Annotated[Any, _V.seed_check] = None,
    *,
    labels: bool = False,
) -> Prompts:
    """Draw prompts from the training law (docs/models/token_selection.md §A.1) with recipe
    docs/models/token_selection.md §G.A, exactly in its order of draws.

    X ~ N(0, I) normalised, then xq likewise, then (if ``labels``) y = rng.choice([-1, 1], (B, N)).

    Parameters
    ----------
    task : NearestNeighborTask
    n_prompts : int >= 1
        Number of prompts B.
    rng : int seed, numpy Generator or None
    labels : bool
        Draw explicit Rademacher labels (the full-matrix model needs them; the reduced map does not,
        docs/models/token_selection.md §A.5).
    """
    n_prompts = check_int("n_prompts", n_prompts, min_value=1)
    check_allocation("n_prompts", (n_prompts, task.N + 2, task.d), what="the prompts X (n_prompts, N, d) and xq")
    rng = as_generator(rng)
    X = rng.standard_normal((n_prompts, task.N, task.d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    xq = rng.standard_normal((n_prompts, task.d))
    xq /= np.linalg.norm(xq, axis=-1, keepdims=True)
    y = rng.choice([-1.0, 1.0], size=(n_prompts, task.N)) if labels else None
    return _prompts_from(X, xq, y)


def sample_shifted_prompts(
    task: NearestNeighborTask,
    n_prompts: Annotated[int, _V.Range(integer=True, ge=1)],
    rng: Annotated[Any, _V.seed_check] = None,
    *,
    delta: Annotated[float, _V.Range(gt=0, lt=2)] = 0.2,
) -> Prompts:
    """Draw prompts from the shifted test law of Theorem A2 (docs/models/token_selection.md §A.9, paper App. B; recipe
    docs/models/token_selection.md §G.A shifted).

    x_i ~ Unif(S^{d-1}), y_i ~ N(0, 1); i* uniform on [N]; x_query = x_{i*}; every x_j (j != i*) with
    ||x_j - x_query||^2 <= delta is replaced by -x_j. The separation event A_delta then holds surely.

    Parameters
    ----------
    delta : float in (0, 2)
        Separation gap (its paper value is [unknown]; toolkit default 0.2).
    n_prompts : int >= 1
    """
    n_prompts = check_int("n_prompts", n_prompts, min_value=1)
    delta = check_in_range("delta", delta, 0.0, 2.0, low_open=True, high_open=True)
    if not delta < 2.0:
        raise ValueError(f"delta must lie in (0, 2) (reflection separates only then); got {delta!r}")
    rng = as_generator(rng)
    X = rng.standard_normal((n_prompts, task.N, task.d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    y = rng.standard_normal((n_prompts, task.N))
    istar = rng.integers(0, task.N, size=n_prompts)
    rows = np.arange(n_prompts)
    xq = X[rows, istar].copy()
    close = np.sum((X - xq[:, None, :]) ** 2, axis=-1) <= delta
    close[rows, istar] = False
    X[close] *= -1.0
    prompts = _prompts_from(X, xq, y)
    if not np.array_equal(prompts.istar, istar):  # cannot happen for delta < 2: x_query = x_{i*} exactly
        raise RuntimeError("shifted sampler: the nearest neighbour is not the copied point")
    return prompts


def embed(prompts: Prompts) -> np.ndarray:
    """Embedded prompts H (B, d+2, N+1): columns [x_j; y_j; 0] and [x_query; 0; 1]
    (docs/models/token_selection.md §A.2).
    """
    if prompts.y is None:
        raise ValueError("prompts must carry explicit labels y to be embedded (sample_prompts(..., labels=True))")
    B, N, d = prompts.X.shape
    H = np.zeros((B, d + 2, N + 1))
    H[:, :d, :N] = np.swapaxes(prompts.X, 1, 2)
    H[:, :d, N] = prompts.xq
    H[:, d, :N] = prompts.y
    H[:, d + 1, N] = 1.0
    return H


# ----------------------------------------------------------------------------------------------------------------
# Full model (numpy): forward pass, loss, gradient, probes
# ----------------------------------------------------------------------------------------------------------------


def initial_W(task: NearestNeighborTask) -> np.ndarray:
    """The paper's initialisation W^(0) = diag(0_{d+1}, -sigma) (docs/models/token_selection.md §A.4)."""
    return family_W(task.d, 0.0, task.sigma)


def family_W(
    d: Annotated[int, _V.Range(integer=True, ge=2)],
    xi1: Annotated[Any, _V.Range(array=True)],
    xi2: Annotated[Any, _V.Range(array=True)],
) -> np.ndarray:
    """The reduced family W = diag(xi1 I_d, 0, -xi2) (docs/models/token_selection.md §A.5); batched over the shapes of
    xi1, xi2.

    Parameters
    ----------
    d : int >= 2
    """
    d = check_int("d", d, min_value=2)
    xi1, xi2 = np.broadcast_arrays(np.asarray(xi1, dtype=np.float64), np.asarray(xi2, dtype=np.float64))
    W = np.zeros(xi1.shape + (d + 2, d + 2))
    idx = np.arange(d)
    W[..., idx, idx] = xi1[..., None]
    W[..., d + 1, d + 1] = -xi2
    return W


def attention(W: Annotated[Any, _check_W], H: Annotated[Any, _V.Array(ndim=3)]) -> np.ndarray:
    """Attention of the query on every token, q = softmax(H^T W h_query) (docs/models/token_selection.md §A.3).

    Parameters
    ----------
    W : (D, D) or (T, D, D) float64, D = d + 2
    H : (B, D, N+1) float64, from ``embed``

    Returns
    -------
    q : (B, N+1) or (T, B, N+1); the last column is the query's attention on itself, q_{N+1}.
    """
    W = np.asarray(W, dtype=np.float64)
    v = np.matmul(H[:, :, -1], np.swapaxes(W, -1, -2))  # W h_query, (..., B, D)
    scores = np.matmul(np.swapaxes(H, 1, 2), v[..., None])[..., 0]  # h_m^T W h_query, (..., B, N+1)
    return scipy.special.softmax(scores, axis=-1)


def forward(W: Annotated[Any, _check_W], H: Annotated[Any, _V.Array(ndim=3)]) -> tuple[np.ndarray, np.ndarray]:
    """Attention weights and prediction f_W(H) = [y_1..y_N, 0] q (docs/models/token_selection.md §A.3).

    Returns (q, f): q as in ``attention``; f of shape (B,) or (T, B).
    """
    q = attention(W, H)
    label_row = H[:, -2, :]  # [y_1, ..., y_N, 0]
    return q, np.sum(q * label_row, axis=-1)


def full_loss(
    W: Annotated[Any, _check_W], H: Annotated[Any, _V.Array(ndim=3)], target: Annotated[Any, _V.Array(ndim=1)]
) -> np.ndarray:
    """Sample square loss 1/2 mean_b (f_W(H_b) - y_{i*,b})^2 of the full model (docs/models/token_selection.md §A.4).

    A scalar for W of shape (D, D), (T,) for (T, D, D).
    """
    _, f = forward(W, H)
    return 0.5 * np.mean((f - target) ** 2, axis=-1)


def full_gradient(
    W: Annotated[Any, _check_W], H: Annotated[Any, _V.Array(ndim=3)], target: Annotated[Any, _V.Array(ndim=1)]
) -> np.ndarray:
    """Gradient of ``full_loss`` with respect to the whole matrix W (docs/models/token_selection.md §A.4).

    With s = H^T W h_query and q = softmax(s): dL/ds_m = (f - y_{i*}) q_m (ybar_m - f) (ybar = [y; 0]), and
    dL/dW = mean_b sum_m dL/ds_m h_m h_query^T.

    Returns
    -------
    (D, D) or (T, D, D) float64, like W.
    """
    q, f = forward(W, H)
    label_row = H[:, -2, :]
    a = (f - target)[..., None] * q * (label_row - f[..., None])  # (..., B, N+1)
    u = np.matmul(H, a[..., None])[..., 0]  # sum_m a_m h_m, (..., B, D)
    return np.matmul(np.swapaxes(u, -1, -2), H[:, :, -1]) / H.shape[0]


def probe(W: Annotated[Any, _V.Array(ndim=tuple(range(2, 33)))]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reduced coordinates and distance to the reduced family of any W (docs/models/token_selection.md §A.5.1).

    xi1 = tr(W11)/d, xi2 = -W33 are the Frobenius projection of W onto {diag(xi1 I_d, 0, -xi2)};
    off = ||W - diag(xi1 I_d, 0, -xi2)||_F / ||W||_F (0 for W = 0).

    Parameters
    ----------
    W : (..., d+2, d+2) float64 (merged W, or W_K^T W_Q of the factorised model)

    Returns
    -------
    xi1, xi2, off : arrays of shape W.shape[:-2]
    """
    W = np.asarray(W, dtype=np.float64)
    if W.ndim < 2 or W.shape[-1] != W.shape[-2] or W.shape[-1] < 4:
        raise ValueError(f"W must have shape (..., d+2, d+2) with d >= 2; got {W.shape}")
    d = W.shape[-1] - 2
    xi1 = np.trace(W[..., :d, :d], axis1=-2, axis2=-1) / d
    xi2 = -W[..., d + 1, d + 1]
    scale = np.max(np.abs(W), axis=(-2, -1), keepdims=True)  # off is scale-free; rescaling avoids overflow
    scale = np.where(scale > 0, scale, 1.0)
    resid = np.linalg.norm((W - family_W(d, xi1, xi2)) / scale, axis=(-2, -1))
    norm = np.linalg.norm(W / scale, axis=(-2, -1))
    off = np.divide(resid, norm, out=np.zeros_like(resid), where=norm > 0)
    return xi1, xi2, off


def full_diagnostics(
    W: Annotated[Any, _V.Array(ndim=2)], prompts: Prompts, *, quantile: Annotated[float, _V.Range(gt=0, lt=1)] = 0.05
) -> dict[str, float]:
    """Diagnostics of any trained W on a fixed labelled prompt set (docs/models/token_selection.md §A.5.1), for the
    empirical side.

    Keys: ``L`` (sample loss with the explicit labels, docs/models/token_selection.md §A.4), ``q_istar`` = E[q_{i*}],
    ``q_istar_lo`` (its lower ``quantile``), ``q_self`` = E[q_{N+1}], and the probes ``xi1``, ``xi2``, ``off`` of
    ``probe``.

    Parameters
    ----------
    quantile : float in (0, 1)
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must lie in (0, 1); got {quantile!r}")
    W = check_finite_array("W", W, ndim=2)
    H = embed(prompts)
    q, f = forward(W, H)
    q_istar = q[np.arange(prompts.n_prompts), prompts.istar]
    xi1, xi2, off = probe(W)
    return {
        "L": float(0.5 * np.mean((f - prompts.target) ** 2)),
        "q_istar": float(np.mean(q_istar)),
        "q_istar_lo": float(np.quantile(q_istar, quantile)),
        "q_self": float(np.mean(q[:, -1])),
        "xi1": float(xi1),
        "xi2": float(xi2),
        "off": float(off),
    }


# ----------------------------------------------------------------------------------------------------------------
# Reduced model: per-prompt quantities, Monte Carlo means with standard errors, closed forms
# ----------------------------------------------------------------------------------------------------------------


def _check_state(xi1, xi2) -> tuple[float, float]:
    out = []
    for name, value in (("xi1", xi1), ("xi2", xi2)):
        arr = np.asarray(value, dtype=np.float64)
        if arr.ndim != 0 or not np.isfinite(arr):
            raise ValueError(f"{name} must be a finite real scalar; got {value!r}")
        out.append(float(arr))
    return out[0], out[1]


def per_prompt(
    xi1: Annotated[float, _V.Range(array=True)], xi2: Annotated[float, _V.Range(array=True)], prompts: Prompts
) -> dict[str, np.ndarray]:
    """Per-prompt loss, gradients and attention at W = diag(xi1 I, 0, -xi2) (docs/models/token_selection.md §A.5).

    Returns a dict of (B,) arrays: ``loss`` = 1/2 (sum_j q_j^2 - 2 q_{i*} + 1) (labels integrated out, Eq. of
    docs/models/token_selection.md §A.5), ``grad_xi1`` = sum_m gamma_m c_m, ``grad_xi2`` = q_{N+1} (Q2 - q_{i*}),
    ``q_istar``, ``q_self``.
    """
    xi1, xi2 = _check_state(xi1, xi2)
    out = np.empty((prompts.n_prompts, _k.N_STATS))
    _k.per_prompt_stats(xi1, xi2, np.ascontiguousarray(prompts.c), np.ascontiguousarray(prompts.istar), out)
    return {"loss": out[:, 0], "grad_xi1": out[:, 1], "grad_xi2": out[:, 2], "q_istar": out[:, 3], "q_self": out[:, 4]}


def _mean_se(values: np.ndarray) -> tuple[float, float]:
    n = values.shape[0]
    se = float(np.std(values, ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return float(np.mean(values)), se


def reduced_loss(
    xi1: Annotated[float, _V.Range(array=True)], xi2: Annotated[float, _V.Range(array=True)], prompts: Prompts
) -> tuple[float, float]:
    """Monte Carlo loss L(xi1, xi2) = 1/2 E[sum_j q_j^2 - 2 q_{i*} + 1] and its standard error
    (docs/models/token_selection.md §A.5).
    """
    return _mean_se(per_prompt(xi1, xi2, prompts)["loss"])


def reduced_gradient(
    xi1: Annotated[float, _V.Range(array=True)], xi2: Annotated[float, _V.Range(array=True)], prompts: Prompts
) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo (dL/dxi1, dL/dxi2) of docs/models/token_selection.md §A.5 ("dL/dxi1 = E[sum_m gamma_m c_m]", "dL/dxi2
    = E[q_{N+1}(Q2 -
    q_{i*})]") and the standard error of each; returns (grad (2,), se (2,)).
    """
    pp = per_prompt(xi1, xi2, prompts)
    m1, s1 = _mean_se(pp["grad_xi1"])
    m2, s2 = _mean_se(pp["grad_xi2"])
    return np.array([m1, m2]), np.array([s1, s2])


def diagnostics(
    xi1: Annotated[float, _V.Range(array=True)],
    xi2: Annotated[float, _V.Range(array=True)],
    prompts: Prompts,
    *,
    quantile: Annotated[float, _V.Range(gt=0, lt=1)] = 0.05,
) -> dict[str, float]:
    """Diagnostics on a fixed prompt set (docs/models/token_selection.md §A.5.1): L and its SE, E[q_{i*}], its lower
    ``quantile``, E[q_{N+1}],
    and the gradient (dL/dxi1, dL/dxi2) with standard errors (docs/models/token_selection.md §A.5). Keys:
    ``DIAGNOSTIC_NAMES``.

    Parameters
    ----------
    quantile : float in (0, 1)
    """
    pp = per_prompt(xi1, xi2, prompts)
    L, L_se = _mean_se(pp["loss"])
    g1, g1_se = _mean_se(pp["grad_xi1"])
    g2, g2_se = _mean_se(pp["grad_xi2"])
    return {
        "L": L,
        "L_se": L_se,
        "q_istar": float(np.mean(pp["q_istar"])),
        "q_istar_lo": float(np.quantile(pp["q_istar"], quantile)),
        "q_self": float(np.mean(pp["q_self"])),
        "grad_xi1": g1,
        "grad_xi1_se": g1_se,
        "grad_xi2": g2,
        "grad_xi2_se": g2_se,
    }


def loss_xi1_zero(
    N: Annotated[int, _V.Range(integer=True, ge=2)], xi2: Annotated[Any, _V.Range(array=True)]
) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form loss at xi1 = 0 (docs/models/token_selection.md §A.5): q0 = 1/(N + e^{-xi2}), L = 1/2 (N q0^2 - 2 q0
    + 1); returns (L, q0).

    At xi1 = 0 every context token gets q0 and the loss is the same for every prompt.

    Parameters
    ----------
    N : int >= 2
    """
    N = check_int("N", N, min_value=2)
    xi2 = np.asarray(xi2, dtype=np.float64)
    with np.errstate(over="ignore"):  # xi2 -> -inf: e^{-xi2} = inf, q0 = 0 (its limit)
        q0 = 1.0 / (N + np.exp(-xi2))
    return 0.5 * (N * q0**2 - 2.0 * q0 + 1.0), q0


def expected_max_inner_product(
    d: Annotated[int, _V.Range(integer=True, ge=2)], N: Annotated[int, _V.Range(integer=True, ge=1)]
) -> float:
    """E[c_{i*}] = E[max_j <x_j, x_query>] for N i.i.d. uniform points on S^{d-1} (used by
    docs/models/token_selection.md §A.5 at xi1 = 0).

    Each c_j has (1 + c)/2 ~ Beta((d-1)/2, (d-1)/2), so E[max] = 1 - int_{-1}^{1} F(c)^N dc (quadrature).

    Parameters
    ----------
    d : int >= 2
    N : int >= 1
    """
    d = check_int("d", d, min_value=2)
    N = check_int("N", N, min_value=1)
    a = 0.5 * (d - 1)
    val, _ = scipy.integrate.quad(
        lambda c: scipy.special.betainc(a, a, 0.5 * (1.0 + c)) ** N, -1.0, 1.0, epsabs=1e-14, epsrel=1e-13, limit=200
    )
    return 1.0 - val


def gradient_xi1_zero(
    d: Annotated[int, _V.Range(integer=True, ge=1)],
    N: Annotated[int, _V.Range(integer=True, ge=1)],
    xi2: Annotated[float, _V.Range(array=True)],
) -> np.ndarray:
    """Closed-form population gradient at xi1 = 0 (derived from docs/models/token_selection.md §A.5 with q_j = q0).

    dL/dxi1 = -q0 E[c_{i*}] + e^{-2 xi2} q0^3 (E[sum_j c_j] = 0, 1 - N q0 = e^{-xi2} q0),
    dL/dxi2 = -e^{-2 xi2} q0^3.  Returns the array (dL/dxi1, dL/dxi2).

    Parameters
    ----------
    d : int >= 1
    N : int >= 1
    """
    _, q0 = loss_xi1_zero(N, xi2)
    with np.errstate(over="ignore"):  # e^{-2 xi2} q0^3 = q0 r^2, r = e^{-xi2} q0 = 1/(N e^{xi2} + 1): no overflow
        r = 1.0 / (N * np.exp(float(xi2)) + 1.0)
    tail = q0 * r**2
    return np.array([-q0 * expected_max_inner_product(d, N) + tail, -tail])


def first_step(task: NearestNeighborTask) -> np.ndarray:
    """Closed-form state after the first population GD step from W^(0) (docs/models/token_selection.md §A.4-§A.5 at xi1
    = 0):
    (xi1_1, xi2_1) = (0, sigma) - (eta/d, eta) * ``gradient_xi1_zero(d, N, sigma)``.
    """
    g = gradient_xi1_zero(task.d, task.N, task.sigma)
    return np.array([-(task.eta / task.d) * g[0], task.sigma - task.eta * g[1]])


# ----------------------------------------------------------------------------------------------------------------
# Reduced GD (through dynamics.iterate) and full-matrix GD (numpy loop)
# ----------------------------------------------------------------------------------------------------------------


def pack_params(task: NearestNeighborTask, prompts: Prompts) -> np.ndarray:
    """Parameter row of the numba GD step of docs/models/token_selection.md §A.5: [eta, d]; the prompt sample goes to
    the kernel as data (the engine's ``args`` channel).
    """
    _check_prompts(task, prompts)
    return np.array([task.eta, task.d], dtype=np.float64)


def _kernel_args(task: NearestNeighborTask, prompts: Prompts) -> tuple:
    """Data of the GD step (``dynamics.iterate``'s ``args``): (istar (B,) int64, c (B, N) float64)."""
    _check_prompts(task, prompts)
    return (np.ascontiguousarray(prompts.istar, dtype=np.int64), np.ascontiguousarray(prompts.c, dtype=np.float64))


def eta_batch(
    params: Annotated[np.ndarray, _V.Array(ndim=1)],
    eta_index: Annotated[int, _V.Range(integer=True, ge=0)],
    eta: Annotated[float | np.ndarray | None, _V.Range(array=True, gt=0)],
    state0: Annotated[np.ndarray, _V.Array(ndim=(1, 2))],
) -> tuple[np.ndarray, np.ndarray, float, str]:
    """Per-trajectory parameter rows for step sizes ``eta`` broadcast with the initial states
    (docs/models/token_selection.md §0: eta enters the GD maps of docs/models/token_selection.md §A.5, §B.3, §C.5 only
    as a number).

    The token-selection maps take eta only as a number in their packed parameter vector, so a grid of step sizes is
    one batch of the engine: row i of the result is ``params`` with entry ``eta_index`` set to ``eta[i]``.

    Parameters
    ----------
    params : (n_params,) the packed vector of one configuration.
    eta_index : int >= 0
        Position of eta in it.
    eta : None, float or (n,) array of finite values > 0. None: ``params`` unchanged.
    state0 : (n_state,) or (n0, n_state) initial states; ``eta`` and the n0 rows broadcast (lengths 1 or equal).

    Returns
    -------
    (params (n_traj, n_params) or (n_params,), state0 (n_traj, n_state), time_scale, time_unit): the ``time``
    coordinate is eta * step when all trajectories share one eta, else the step.
    """
    x0 = np.atleast_2d(state0)
    base = float(params[eta_index])
    if eta is None:
        return params, x0, base, "eta*step"
    eta = check_finite_array("eta", eta, ndim=(0, 1)).reshape(-1)
    if np.any(eta <= 0):
        raise ValueError(f"eta must hold finite numbers > 0; got {eta.tolist()}")
    n0, ne = x0.shape[0], eta.size
    if n0 != 1 and ne != 1 and n0 != ne:
        raise ValueError(f"eta of length {ne} does not broadcast with {n0} initial states (state0 shape {x0.shape})")
    n = max(n0, ne)
    P = np.repeat(np.asarray(params, dtype=np.float64)[None], n, axis=0)
    P[:, eta_index] = np.broadcast_to(eta, (n,))
    X0 = np.ascontiguousarray(np.broadcast_to(x0, (n, x0.shape[1])))
    if np.all(eta == eta[0]):
        return P, X0, float(eta[0]), "eta*step"
    return P, X0, 1.0, "step (eta differs between trajectories: see the eta parameter)"


def _sample_list(samples, kind: type, name: str) -> list:
    """The samples of a batched token-selection map (docs/models/token_selection.md §A.5, §B.3, §C.5) as a list: one
    ``kind`` instance or a non-empty sequence of them.

    Raises ``TypeError`` naming ``name`` for anything else.
    """
    if isinstance(samples, kind):
        return [samples]
    if isinstance(samples, (str, bytes)) or not hasattr(samples, "__len__") or not hasattr(samples, "__getitem__"):
        raise TypeError(f"{name} must be a {kind.__name__} or a sequence of them; got {type(samples).__name__}")
    out = list(samples)
    if not out:
        raise ValueError(f"{name} must hold at least one {kind.__name__}; got an empty sequence")
    for i, s in enumerate(out):
        if not isinstance(s, kind):
            raise TypeError(f"{name}[{i}] must be a {kind.__name__}; got {type(s).__name__}")
    return out


def _sample_list_check(kind: type):
    """A :mod:`dynamics.validation` spec ``check(name, value)`` for a batched-samples argument: one ``kind`` instance
    or a non-empty sequence of them (one trajectory or seed per sample), as :func:`_sample_list` accepts.
    """

    def check(name: str, value) -> None:
        _sample_list(value, kind, name)

    return check


def _over_samples(run, samples: list, state0, eta) -> dynamics.Trajectory:
    """Run ``run(sample, state0_row, eta_i)`` once per sample and stack the runs (``_stack_runs``); the maps of
    docs/models/token_selection.md §A.5, §B.3, §C.5 batched over seeds.

    Trajectory i uses ``samples[i]``, row i of ``state0`` (one row or None: shared) and ``eta[i]`` (one value or
    None: shared). This is how the token-selection ``map`` functions batch over seeds: each seed has its own sample
    (common random numbers within a seed), so the batch is one trajectory per sample.
    """
    k = len(samples)
    x0 = None if state0 is None else check_finite_array("state0", state0, ndim=(1, 2))
    if x0 is not None and x0.ndim == 2 and x0.shape[0] not in (1, k):
        raise ValueError(f"state0 must have one row or one row per sample ({k}); got shape {x0.shape}")
    etas = None if eta is None else check_finite_array("eta", eta, ndim=(0, 1)).reshape(-1)
    if etas is not None and etas.size not in (1, k):
        raise ValueError(f"eta must hold one value or one per sample ({k}); got {etas.size}")
    runs = []
    for i, sample in enumerate(samples):
        row = None if x0 is None else (x0 if x0.ndim == 1 else x0[i if x0.shape[0] == k else 0])
        e = None if etas is None else float(etas[i if etas.size == k else 0])
        runs.append(run(sample, row, e))
    traj = _stack_runs(runs)
    if etas is not None:
        traj.attrs["eta"] = np.broadcast_to(etas, (k,)).tolist()
    return traj


def _stack_runs(runs) -> dynamics.Trajectory:
    """Stack runs saved at the same steps into one Trajectory along ``trajectory`` (relabelled 0..n-1); time axis of
    docs/models/token_selection.md §0.

    A ``sample`` coordinate along ``trajectory`` holds the index of the run each trajectory came from. When the runs
    have different ``time`` coordinates (different step sizes eta), ``time`` becomes the step and ``time_unit``
    says so, as in :func:`eta_batch`. Attributes are those of the first run, with ``n_samples`` added.
    """
    import xarray as xr

    runs = list(runs)
    if not runs:
        raise ValueError("runs must hold at least one Trajectory")
    first = runs[0]
    for i, r in enumerate(runs):
        if not isinstance(r, xr.Dataset) or "step" not in r.coords:
            raise TypeError(f"runs[{i}] must be a Trajectory; got {type(r).__name__}")
        if not np.array_equal(r["step"].values, first["step"].values):
            raise ValueError(f"runs[{i}] is saved at other steps than runs[0]: stack only runs with the same saveat")
    attrs = dict(first.attrs)
    if any(not np.array_equal(r["time"].values, first["time"].values) for r in runs):
        runs = [r.assign_coords(time=("time", r["step"].values.astype(np.float64))) for r in runs]
        attrs["time_unit"] = "step (eta differs between trajectories: see the eta parameter)"
    sizes = [r.sizes["trajectory"] for r in runs]
    ds = xr.concat(runs, dim="trajectory", combine_attrs="override")
    ds = ds.assign_coords(
        trajectory=("trajectory", np.arange(sum(sizes))), sample=("trajectory", np.repeat(np.arange(len(runs)), sizes))
    )
    attrs["n_samples"] = len(runs)
    return dynamics.Trajectory(ds.data_vars, coords=ds.coords, attrs=attrs)


def _check_prompts(task: NearestNeighborTask, prompts: Prompts) -> None:
    if prompts.N != task.N or prompts.d != task.d:
        raise ValueError(f"prompts have (N, d) = ({prompts.N}, {prompts.d}) but the task has ({task.N}, {task.d})")


def _attrs(task, prompts, source, extra=None) -> dict:
    attrs = {
        "model": "nearest_neighbor",
        "paper": REFERENCE["arxiv"],
        "equation": "docs/models/token_selection.md §A.5",
        "spec": task,
        "source": source,
        "time_unit": "step (time = eta * step)",
        "n_prompts": prompts.n_prompts,
    }
    attrs.update(extra or {})
    return attrs


def map(
    task: NearestNeighborTask,
    prompts: Annotated[Any, _sample_list_check(Prompts)],
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)],
    *,
    state0: Annotated[Any, _V.Array(ndim=(1, 2))] = None,
    saveat: Annotated[Any, _V.Instance(SaveAt)] = None,
    quantile: Annotated[float, _V.Range(gt=0, lt=1)] = 0.05,
    bound: Annotated[float, _V.Range(gt=0, finite=False)] = np.inf,
    progress: bool = False,
    seed: Annotated[Any, _V.seed_check] = None,
    eta: Annotated[Any, _V.Range(array=True, gt=0)] = None,
    warn_unconverged: bool = True,
):
    """Exact reduced GD map in (xi1, xi2) on a fixed prompt sample (docs/models/token_selection.md §A.5, Eq. "xi1 <- xi1
    - (eta/d) dL/dxi1, xi2 <- xi2 - eta dL/dxi2"), run through ``dynamics.iterate``.

    Parameters
    ----------
    task : NearestNeighborTask
    prompts : Prompts or sequence of Prompts
        The Monte Carlo sample standing for the population (common random numbers across steps); only x's are used.
        A sequence (e.g. one sample per seed) runs one trajectory per sample: trajectory i on ``prompts[i]`` from
        row i of ``state0`` (or the one ``state0``) with ``eta[i]`` (or the one ``eta``); the result equals the
        per-sample calls stacked along ``trajectory``, with a ``sample`` coordinate.
    n_steps : int >= 0
    state0 : (2,) or (n_traj, 2) float64, optional
        Initial (xi1, xi2); default (0, sigma), the paper's W^(0). With one sample, several rows run as a batch on
        that sample (e.g. a mask sweep); with a sequence of samples, one row per sample.
    saveat : dynamics.SaveAt, optional (default SaveAt(n=201))
    quantile : float in (0, 1)
        Lower quantile of q_{i*} reported as ``q_istar_lo``.
    bound : float > 0, optional
        A state with |xi1| or |xi2| above ``bound`` counts as divergence (default: only non-finite values).
    seed : int, optional
        Recorded in the provenance (the seed that drew ``prompts``).
    eta : float or (n,) array, > 0, optional
        Step sizes per trajectory, overriding ``task.eta``, broadcast with the ``state0`` rows (:func:`eta_batch`):
        one call runs a grid of step sizes on the same sample.
    warn_unconverged : bool, default True
        Warn (``dynamics.UnconvergedWarning``) when a trajectory's step norm (max-norm of one update) did not decrease
        over the last half of the run: a cycle or chaos from too large a step size (a step size past the stability
        limit can also raise ``dynamics.DivergenceError``). A run that is merely unconverged does not warn: the loss
        has no minimiser at finite (xi1, xi2) -- xi1 grows as the softmax hardens towards the nearest-neighbour rule
        (docs/models/token_selection.md §A.5) -- so the steps only shrink.
        ``final_step_norm``, ``converged`` (step norm < 1e-8) and ``step_norm_trend`` (``dynamics.convergence``)
        are returned either way.

    Returns
    -------
    dynamics.Trajectory
        State variables xi1, xi2 and the diagnostics ``DIAGNOSTIC_NAMES`` (L, q_istar, ..., gradient with SE) at
        each save point; ``step`` = t, ``time`` = eta t (= t when ``eta`` differs between trajectories). Raises
        ``dynamics.DivergenceError`` on a non-finite state.
    """
    if not isinstance(prompts, Prompts):
        traj = _over_samples(
            lambda p, s0, e: map(
                task,
                p,
                n_steps,
                state0=s0,
                saveat=saveat,
                quantile=quantile,
                bound=bound,
                progress=progress,
                seed=seed,
                eta=e,
                warn_unconverged=False,
            ),
            _sample_list(prompts, Prompts, "prompts"),
            state0,
            eta,
        )
        return check_run(traj, warn_unconverged, what="nearest_neighbor.map", fixed_points=False)
    n_steps = check_int("n_steps", n_steps, min_value=0)
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must lie in (0, 1); got {quantile!r}")
    if state0 is None:
        state0 = np.array([0.0, task.sigma])
    state0 = check_finite_array("state0", state0, ndim=(1, 2))
    if state0.shape[-1] != 2:
        raise ValueError(f"state0 must have shape (2,) or (n_traj, 2); got {state0.shape}")
    params, state0, time_scale, time_unit = eta_batch(pack_params(task, prompts), 0, eta, state0)

    attrs = _attrs(task, prompts, "closedform", {"seed": seed, "quantile": quantile})
    attrs["time_unit"] = time_unit
    if eta is not None:
        attrs["eta"] = np.atleast_1d(np.asarray(eta, dtype=np.float64)).tolist()
    traj = dynamics.iterate(
        _k.gd_step,
        state0,
        n_steps,
        params=params,
        args=_kernel_args(task, prompts) + (np.array([float(quantile)]),),  # the diagnostics' quantile: args[2]
        saveat=saveat,
        names=list(STATE_NAMES),
        observe=_k.observables,  # the diagnostics of every save, computed in the compiled loop
        observe_names=DIAGNOSTIC_NAMES,
        step_observe=_k.step_observables,
        time_scale=time_scale,
        progress=progress,
        bound=bound,
        attrs=attrs,
    )
    return check_run(traj, warn_unconverged, what="nearest_neighbor.map", fixed_points=False)


def full_gd(
    task: NearestNeighborTask,
    prompts: Prompts,
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)],
    *,
    W0: Annotated[Any, _V.Array(ndim=(2, 3))] = None,
    saveat: Annotated[Any, _V.Instance(SaveAt)] = None,
    seed: Annotated[Any, _V.seed_check] = None,
):
    """Full-matrix GD on W (docs/models/token_selection.md §A.4) with explicit labels, batched over initial matrices;
    numpy.

    W_{t+1} = W_t - eta * grad ``full_loss`` on the fixed labelled sample. Used to check that GD stays on the reduced
    family and equals the reduced map (docs/models/token_selection.md §A.5, §A.7 item 2).

    Parameters
    ----------
    prompts : Prompts with labels
    W0 : (D, D) or (T, D, D), optional
        Initial matrices; default the paper's W^(0) (``initial_W``).
    saveat : dynamics.SaveAt, optional (default SaveAt(n=201))
    n_steps : int >= 0

    Returns
    -------
    dynamics.Trajectory
        Probes xi1, xi2 (state names, as in ``map``), ``off``, the sample loss ``L`` and the matrix ``W``
        (trajectory, time, D, D). Raises ``dynamics.DivergenceError`` naming the step and entry of a non-finite W.
    """
    _check_prompts(task, prompts)
    n_steps = check_int("n_steps", n_steps, min_value=0)
    W = initial_W(task) if W0 is None else check_finite_array("W0", W0, ndim=(2, 3))
    if W.ndim == 2:
        W = W[None]
    D = task.embed_dim
    if W.shape[1:] != (D, D):
        raise ValueError(f"W0 must have shape (D, D) or (T, D, D) with D = d + 2 = {D}; got {W.shape}")
    W = W.copy()
    H = embed(prompts)
    target = prompts.target
    save_steps = (saveat or SaveAt(n=201)).resolve_steps(n_steps)
    saved_W = np.empty((W.shape[0], save_steps.size, D, D))
    saved_L = np.empty((W.shape[0], save_steps.size))
    i_save = 0
    with np.errstate(over="ignore", invalid="ignore"):  # a blow-up is reported below, with its step and entry
        for k in range(n_steps + 1):
            if i_save < save_steps.size and k == save_steps[i_save]:
                saved_W[:, i_save] = W
                saved_L[:, i_save] = full_loss(W, H, target)
                i_save += 1
            if k == n_steps:
                break
            W -= task.eta * full_gradient(W, H, target)
            bad = ~np.isfinite(W)
            if bad.any():
                traj, row, col = (int(i) for i in np.argwhere(bad)[0])
                raise DivergenceError(
                    f"full-matrix GD: W[{row}, {col}] of trajectory {traj} is non-finite at step {k + 1}",
                    trajectory=traj,
                    variable=f"W[{row},{col}]",
                    step=k + 1,
                    time=task.eta * (k + 1),
                )
    xi1, xi2, off = probe(saved_W)
    return dynamics.Trajectory.from_arrays(
        np.stack([xi1, xi2], axis=-1),
        names=list(STATE_NAMES),
        time=task.time_of_step(save_steps),
        step=save_steps,
        variables={"off": off, "L": saved_L, "W": saved_W},
        attrs=_attrs(task, prompts, "closedform-full-matrix", {"seed": seed}),
    )


# ----------------------------------------------------------------------------------------------------------------
#  Exactly symmetric samples: make the population invariances of docs/models/token_selection.md §A.5 hold in finite
# samples
# ----------------------------------------------------------------------------------------------------------------


def label_design(N: Annotated[int, _V.Range(integer=True, ge=1)]) -> np.ndarray:
    """Label vectors whose empirical moments match Rademacher labels up to order 3 (used with
    docs/models/token_selection.md §A.5's invariances).

    Rows +-H[r, 1:N+1] of a Sylvester-Hadamard matrix of order m = 2^ceil(log2(N+1)): the mean over the 2m rows of
    y_j y_k is delta_jk and every odd moment is 0. The full-matrix loss and gradient are quadratic in the labels
    (scores do not see them on the family) and the W21/W23 gradient cubic, so this design integrates the labels out
    exactly. Returns (2m, N) float64.

    Parameters
    ----------
    N : int >= 1
    """
    N = check_int("N", N, min_value=1)
    m = 1 << int(math.ceil(math.log2(N + 1)))
    Hd = scipy.linalg.hadamard(m).astype(np.float64)[:, 1 : N + 1]
    return np.concatenate([Hd, -Hd], axis=0)


def repeat_with_labels(prompts: Prompts, Y: Annotated[Any, _V.Array(ndim=(2, 3))]) -> Prompts:
    """Each prompt repeated once per label vector of ``Y``, carrying those labels (exact label averages,
    docs/models/token_selection.md §A.5).

    Parameters
    ----------
    Y : (n_labels, N) label vectors shared by all prompts (e.g. ``label_design(N)``), or (B, n_labels, N) per prompt
        (e.g. ``np.stack([y, -y], axis=1)``: the y -> -y duplication of docs/models/token_selection.md §A.8).

    Returns
    -------
    Prompts with B * n_labels rows, prompt-major.
    """
    Y = np.asarray(Y, dtype=np.float64)
    B, N = prompts.n_prompts, prompts.N
    if Y.ndim == 2:
        Y = np.broadcast_to(Y, (B,) + Y.shape)
    if Y.ndim != 3 or Y.shape[0] != B or Y.shape[2] != N:
        raise ValueError(f"Y must have shape (n_labels, N={N}) or (B={B}, n_labels, N={N}); got {Y.shape}")
    rep = np.repeat(np.arange(B), Y.shape[1])
    return Prompts(
        X=prompts.X[rep],
        xq=prompts.xq[rep],
        c=prompts.c[rep],
        istar=prompts.istar[rep],
        y=np.ascontiguousarray(Y.reshape(-1, N)),
    )


def signed_permutations(d: Annotated[int, _V.Range(integer=True, ge=1, le=7)]) -> np.ndarray:
    """All 2^d d! signed permutation matrices of R^d (the hyperoctahedral group), (2^d d!, d, d).

    The symmetry group used to make the invariances of docs/models/token_selection.md §A.5 exact on a finite sample
    (``symmetrized_prompts``).

    Parameters
    ----------
    d : int in [1, 7]
    """
    d = check_int("d", d, min_value=1, max_value=7)
    mats = []
    for perm in itertools.permutations(range(d)):
        P = np.eye(d)[list(perm)]
        for signs in itertools.product((1.0, -1.0), repeat=d):
            mats.append(np.asarray(signs)[:, None] * P)
    return np.array(mats)


def symmetrized_prompts(prompts: Prompts) -> Prompts:
    """Orbit of a prompt sample under the symmetries used in docs/models/token_selection.md §A.5, with labels from
    ``label_design``.

    Every prompt is replaced by its images x -> G x (all x's of the prompt at once) for each signed permutation G,
    each with every label vector of ``label_design(N)``. The hyperoctahedral group acts irreducibly on R^d and
    contains -I, so on this sample grad_{W11} L is exactly a multiple of I_d, the W13/W31 and W21/W23 gradients
    vanish, and full-matrix GD from W^(0) stays on diag(xi1 I, 0, -xi2) up to round-off. Inner products c (hence the
    reduced map) are unchanged. Size: B * 2^d d! * 2m prompts; meant for small d (<= 4).
    """
    G = signed_permutations(prompts.d)
    Y = label_design(prompts.N)
    B, N, d = prompts.X.shape
    X = np.einsum("gij,bnj->bgni", G, prompts.X)  # (B, |G|, N, d)
    xq = np.einsum("gij,bj->bgi", G, prompts.xq)
    nG, nY = G.shape[0], Y.shape[0]
    X = np.broadcast_to(X[:, :, None], (B, nG, nY, N, d)).reshape(-1, N, d)
    xq = np.broadcast_to(xq[:, :, None], (B, nG, nY, d)).reshape(-1, d)
    y = np.broadcast_to(Y[None, None], (B, nG, nY, N)).reshape(-1, N)
    c = np.broadcast_to(prompts.c[:, None, None], (B, nG, nY, N)).reshape(-1, N)
    istar = np.broadcast_to(prompts.istar[:, None, None], (B, nG, nY)).reshape(-1)
    return Prompts(
        X=np.ascontiguousarray(X),
        xq=np.ascontiguousarray(xq),
        c=np.ascontiguousarray(c),
        istar=np.ascontiguousarray(istar),
        y=np.ascontiguousarray(y),
    )


# ----------------------------------------------------------------------------------------------------------------
# Theorem predictions (docs/models/token_selection.md §A.6)
# ----------------------------------------------------------------------------------------------------------------


def k_d(d: Annotated[int, _V.Range(integer=True, ge=2)]) -> float:
    """k_d = 2 Gamma(d/2) / (sqrt(pi) Gamma((d-1)/2)) = Theta(sqrt d), constant of Theorem A1
    (docs/models/token_selection.md §A.6).

    Parameters
    ----------
    d : int >= 2
    """
    d = check_int("d", d, min_value=2)
    return float(2.0 * math.exp(math.lgamma(d / 2) - math.lgamma((d - 1) / 2)) / math.sqrt(math.pi))


def a_Nd(N: Annotated[int, _V.Range(integer=True, ge=2)], d: Annotated[int, _V.Range(integer=True, ge=4)]) -> float:
    """a_{N,d} = (2 N sqrt d)^{-2/(d-3)} of Theorem A1's proof (docs/models/token_selection.md §A.6); defined only for d
    >= 4.

    Parameters
    ----------
    N : int >= 2
    d : int >= 4
    """
    N = check_int("N", N, min_value=2)
    d = check_int("d", d, min_value=4)
    return float((2.0 * N * math.sqrt(d)) ** (-2.0 / (d - 3)))


def sigma_condition(
    N: Annotated[int, _V.Range(integer=True, ge=2)],
    d: Annotated[int, _V.Range(integer=True, ge=2)],
    C_d: Annotated[float, _V.Range(ge=0)],
) -> float:
    """Mask threshold of Theorem A1 (docs/models/token_selection.md §A.6): 2 max{log(N d), -log(1 - (N sqrt d)^{-1/d}),
    C_d (1 - 1/(2N))}.

    C_d = poly(d) is not recoverable and must be given (>= 0). The theorem asks for sigma strictly above this value.

    Parameters
    ----------
    N : int >= 2
    d : int >= 2
    C_d : float >= 0
    """
    N = check_int("N", N, min_value=2)
    d = check_int("d", d, min_value=2)
    C_d = check_nonneg("C_d", C_d)
    return 2.0 * max(math.log(N * d), -math.log(1.0 - (N * math.sqrt(d)) ** (-1.0 / d)), C_d * (1.0 - 0.5 / N))


def loss_decay_bound(t: Annotated[Any, _V.Range(array=True, ge=0)], C: Annotated[float, _V.Range(gt=0)]) -> np.ndarray:
    """Theorem A1's rate (docs/models/token_selection.md §A.6): L(W^(t)) <= C / log t for t >= 2; C = poly(N, d) is
    unrecoverable (given).

    Parameters
    ----------
    t : float or array >= 0
    C : float > 0
    """
    C = check_positive("C", C)
    t = np.asarray(t, dtype=np.float64)
    if np.any(t < 2):
        raise ValueError("t must be >= 2 for the 1/log t bound of Theorem A1")
    return C / np.log(t)


def separation_gap(prompts: Prompts) -> np.ndarray:
    """Largest delta for which each prompt lies in A_delta (Theorem A2, docs/models/token_selection.md §A.6): min over j
    with
    y_j != y_{i*} of ||x_j - x_q||^2 - ||x_{i*} - x_q||^2 = 2 (c_{i*} - c_j); +inf if every label equals y_{i*}.
    """
    if prompts.y is None:
        raise ValueError("prompts must carry labels y for the separation event A_delta")
    rows = np.arange(prompts.n_prompts)
    cstar = prompts.c[rows, prompts.istar]
    differ = prompts.y != prompts.y[rows, prompts.istar][:, None]
    gaps = np.where(differ, 2.0 * (cstar[:, None] - prompts.c), np.inf)
    return gaps.min(axis=1)


def squared_errors(
    xi1: Annotated[float, _V.Range(array=True)], xi2: Annotated[float, _V.Range(array=True)], prompts: Prompts
) -> np.ndarray:
    """Per-prompt squared error (f_W(H) - y_{i*})^2 at W = diag(xi1 I, 0, -xi2) with explicit labels (Theorem A2,
    docs/models/token_selection.md §A.6; the test loss has no factor 1/2). Reduced scores, so any prompt law with x's on
    the sphere works.
    """
    xi1, xi2 = _check_state(xi1, xi2)
    if prompts.y is None:
        raise ValueError("prompts must carry labels y to evaluate the test error")
    scores = np.concatenate([xi1 * prompts.c, np.full((prompts.n_prompts, 1), xi1 - xi2)], axis=1)
    q = scipy.special.softmax(scores, axis=1)
    f = np.sum(q[:, :-1] * prompts.y, axis=1)
    return (f - prompts.target) ** 2


def shifted_test_bound(
    xi1: Annotated[float, _V.Range(array=True)],
    xi2: Annotated[float, _V.Range(array=True)],
    prompts: Prompts,
    delta: Annotated[float, _V.Range(gt=0)],
) -> np.ndarray:
    """Square of the per-prompt bound on the test error from Theorem A2's mechanism (token_selection.md §A.6).

    Derived in docs/models/token_selection.md §A.6: on A_delta,
    |f - y_{i*}| <= 2 R (N - 1) exp(-xi1 delta/2) + R exp(-(xi2 - xi1 (1 - c_{i*}))), with R = max_j |y_j|
    of the prompt (the labels of the shifted law are Gaussian, so R is per prompt; illustrative,
    docs/models/token_selection.md §A.6). Returns the square of the bound, +inf on prompts outside A_delta (and where it
    overflows).

    Parameters
    ----------
    delta : float > 0
    """
    xi1, xi2 = _check_state(xi1, xi2)
    delta = check_positive("delta", delta)
    rows = np.arange(prompts.n_prompts)
    R = np.max(np.abs(prompts.y), axis=1) if prompts.y is not None else None
    if R is None:
        raise ValueError("prompts must carry labels y for the Theorem A2 bound")
    cstar = prompts.c[rows, prompts.istar]
    # (N - 1) exp(-xi1 delta / 2) bounds the sum of q_j over the wrong-label tokens; q_{N+1}/q_{i*} bounds the self term
    with np.errstate(over="ignore"):  # a far negative xi1 or xi2 overflows to +inf: no bound, as outside A_delta
        bound = 2.0 * R * (prompts.N - 1) * np.exp(-xi1 * delta / 2.0) + R * np.exp(-(xi2 - xi1 * (1.0 - cstar)))
    return np.where(separation_gap(prompts) >= delta, bound**2, np.inf)


def theorem_predictions(
    task: NearestNeighborTask,
    *,
    t: Annotated[Any, _V.Range(array=True, ge=0)] = None,
    C: Annotated[float, _V.Range(gt=0)] = 1.0,
    prompts: Prompts | None = None,
) -> dict:
    """The paper's named predictions for ``task``, assembled from the closed forms.

    Keys:

    * ``loss_at_init``: the loss at W^(0) (xi1 = 0, xi2 = sigma), closed form of docs/models/token_selection.md §A.5
      (every prompt alike).
    * ``first_step``: (xi1, xi2) after the first population GD step from W^(0),
      docs/models/token_selection.md §A.4-§A.5.
    * ``k_d``: the constant k_d = Theta(sqrt d) of Theorem A1 (docs/models/token_selection.md §A.6).
    * ``loss_decay_bound`` (only with ``t``): Theorem A1's bound C / log t at the steps ``t`` >= 2
      (docs/models/token_selection.md §A.6); the constant C = poly(N, d) is unrecoverable from the paper, so it is the
      argument ``C`` (default 1).
    * ``separation_gap`` (only with labelled ``prompts``): the largest delta for which each prompt lies in the
      separation event A_delta of Theorem A2 (docs/models/token_selection.md §A.6), one value per prompt.

    Parameters
    ----------
    t : float or array >= 0
    C : float > 0
    """
    if not isinstance(task, NearestNeighborTask):
        raise TypeError(f"task must be a NearestNeighborTask; got {type(task).__name__}")
    C = check_positive("C", C)
    if prompts is not None and not isinstance(prompts, Prompts):
        raise TypeError(f"prompts must be a Prompts sample or None; got {type(prompts).__name__}")
    out = {
        "loss_at_init": float(loss_xi1_zero(task.N, task.sigma)[0]),
        "first_step": first_step(task),
        "k_d": k_d(task.d),
    }
    if t is not None:
        out["loss_decay_bound"] = loss_decay_bound(check_finite_array("t", t, ndim=(0, 1)), C)
    if prompts is not None:
        out["separation_gap"] = separation_gap(prompts)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Argument checks of every public function and class (dynamics.validation): each parameter's rule is declared at its
# definition (a class annotation, or a rule in its ``Annotated`` metadata; the shared ones below); each function's own
# checks (shapes against the task, ...) follow. Checks run once per outermost call, so the inner loops of
# ``map``/``full_gd`` pay nothing.

from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)


_W = _V.Array(ndim=(2, 3))


def _check_W(name: str, value) -> None:
    """W of the full model: (D, D) or (T, D, D) with D = d + 2 (docs/models/token_selection.md §A.3)."""
    _W(name, value)
    shape = tuple(value.shape)
    if shape[-1] != shape[-2]:
        raise ValueError(f"{name} must have shape (D, D) or (T, D, D), square in its last two axes; got {shape}")


_V.validate_module(globals())
