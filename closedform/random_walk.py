"""Study C: one-layer softmax attention learns a random walk on a circle (reduced GD, closed forms, theorems).

Implements ``docs/models/token_selection.md`` Study C (docs/models/token_selection.md §C.0-§C.9). A walk on K nodes
steps clockwise with probability p; the model f = V X softmax(X~^T W x~_N) predicts the next node from the N - 1 visited
ones. Gradient descent from zero keeps W on a (K + N)-dimensional family (a, c) (docs/models/token_selection.md §C.5),
so the exact GD trajectory is the one of the reduced state (V, a, c), run here as a numba map through
:func:`dynamics.iterate`.

Symbol table (docs/models/token_selection.md §C.0; code indices are 0-based, docs/models/token_selection.md §0)

Sections (§) in the last column are those of docs/models/token_selection.md.

| code        | paper    | meaning                                                 | shape      | defined |
| ----------- | -------- | ------------------------------------------------------- | ---------- | ------- |
| K           | K        | number of nodes on the circle                           | int        | §C.1    |
| N           | N        | sequence length: N - 1 context tokens + 1 blank query   | int        | §C.1    |
| p           | p        | probability of a clockwise step                         | float      | §C.1    |
| M           | M        | positional dimension                                    | int        | §C.2    |
| rho         | rho      | squared norm of every positional vector (M/2)           | float      | §C.2    |
| states      | s_i      | node of step i (code values 0..K-1); last = label y     | (n, N) int | §C.1    |
| Pi          | Pi       | transition matrix, Pi[a, b] = P(next = b given now = a) | (K, K)     | §C.1    |
| Phi         | Phi      | positional vectors phi_1..phi_N as columns              | (M, N)     | §C.2    |
| V           | V        | value matrix, row = label b, column = state a           | (K, K)     | §C.3    |
| W           | W        | merged key-query matrix, blocks W11, W12, W21, W22      | (K+M, K+M) | §C.3    |
| a           | a        | W12 = a phi_N^T                                         | (K,)       | §C.5    |
| c           | c        | W22 = (sum_i c_i phi_i) phi_N^T                         | (N,)       | §C.5    |
| S           | S        | attention weights (softmax over all N positions)        | (n, N)     | §C.5    |
| f           | f_theta  | model output                                            | (n, K)     | §C.3    |
| eps, eta    | eps, eta | offset in the log loss; GD step size                    | float      | §C.4    |
| acc, acc_rb | acc      | plain and Rao-Blackwellised accuracy                    | float      | §C.3    |
| C_hat       | C_hat    | empirical joint frequency of (parent, label)            | (K, K)     | §C.7    |

Time axis: the GD step t (integer); trajectories store ``step = t`` and ``time = eta t``
(docs/models/token_selection.md §0).

Where the paper's claims fail (docs/models/token_selection.md §C.6-§C.7): Theorem C1 items 2-3 (the direction of V tends
to Pi^T) hold only at p = 1/2; for p != 1/2 the direction of V tends to the entrywise square root sqrt(Pi^T)
(docs/models/token_selection.md §C.7), see :func:`V_direction`. Items 1 (accuracy max{p, 1-p}) and 4 (attention on the
parent) hold for all 0 < p < 1.

REFERENCE: Wei Shi and Yuan Cao, "Towards Understanding Transformers in Learning Random Walks", NeurIPS 2025,
arXiv:2511.23239 (BibTeX key ``shi2025randomwalks``); as summarised in the talk "Token Selection in the
Self-Attention Mechanism: Case Studies and Theoretical Understanding" (Yuan Cao).
"""

from __future__ import annotations

from typing import Annotated, Any
import numbers
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.special import softmax

import dynamics
from closedform import _random_walk_kernels as _kern
from closedform.nearest_neighbor import _over_samples, _sample_list, eta_batch
from dynamics.convergence import check_run
from dynamics.random import as_generator
from dynamics.validation import check_allocation, check_finite_array, check_in_range, check_int, check_positive

__all__ = [
    "REFERENCE",
    "TIME_UNIT",
    "POSITIONAL_CODES",
    "MAX_ENUMERATED_WALKS",
    "RandomWalkTask",
    "WalkSample",
    "transition_matrix",
    "positional_matrix",
    "sample_walks",
    "enumerate_walks",
    "empirical_transitions",
    "forward",
    "reduced_forward",
    "predict",
    "W_from_reduced",
    "probe_W",
    "direction_error",
    "direction_errors",
    "accuracy",
    "attention_stats",
    "output_direction_error",
    "kl_to_truth",
    "diagnostics",
    "DIAGNOSTIC_NAMES",
    "state_names",
    "pack_state",
    "unpack_state",
    "initial_state",
    "ReducedGradient",
    "reduced_gradient",
    "map_params",
    "map",
    "flow",
    "full_gradient",
    "full_gd",
    "V1_closed",
    "W2_closed",
    "optimal_accuracy",
    "failure_theorem_applies",
    "theorem_accuracy",
    "theorem_attention",
    "V_direction",
    "direction_limit_distance",
    "theorem_predictions",
]

REFERENCE = {
    "title": "Towards Understanding Transformers in Learning Random Walks",
    "authors": "Wei Shi, Yuan Cao",
    "venue": "NeurIPS 2025",
    "arxiv": "2511.23239",
    "bibtex_key": "shi2025randomwalks",
    "spec": "docs/models/token_selection.md, Study C",
}

#: The time axis of every trajectory of this module: the GD step t (``step``); ``time`` = eta * t is the
# : gradient-flow time tau of docs/models/token_selection.md §0; :func:`flow` integrates in tau, so ``time`` is shared
# by map and flow.
TIME_UNIT = "GD step t; time = eta * t, the flow time tau (docs/models/token_selection.md §0)"

#: Positional codes of :func:`positional_matrix` (``RandomWalkTask.code``).
POSITIONAL_CODES = ("onehot", "sine")

#: The largest number of walks :func:`enumerate_walks` builds by default (K 2^{N-1} walks; 2^22 ~ 4e6).
MAX_ENUMERATED_WALKS = 2**22


# ---------------------------------------------------------------------------------------------------------------------
# Task spec and data
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RandomWalkTask:
    """The random-walk task of docs/models/token_selection.md §C.1-§C.4: data law, embedding, model, loss,
    initialisation and step size.

    Parameters
    ----------
    K : int >= 3
        Number of nodes on the circle, >= 3 (docs/models/token_selection.md §C.1; with K = 2 both neighbours coincide).
    N : int >= 2
        Sequence length, >= 2: N - 1 context tokens and the blank query (docs/models/token_selection.md §C.2).
    p : float in [0, 1]
        Probability of a clockwise step, in [0, 1] (docs/models/token_selection.md §C.1).
    M : int >= 3
        Positional dimension, >= N + 1 so that N positional vectors can be mutually orthogonal
        (docs/models/token_selection.md §C.2) and the sine code is orthogonal. Default 1000.
    rho : float > 0, optional
        Squared norm of every phi_i, > 0. Default M / 2 (the norm of the sine code of
        docs/models/token_selection.md §C.2); only rho enters the reduced dynamics
        (docs/models/token_selection.md §C.9), and :func:`positional_matrix` scales the code to this norm.
    code : {"onehot", "sine"}
        Positional code (:func:`positional_matrix`). ``"onehot"`` (default): phi_i = sqrt(rho) e_i, orthogonal
        exactly in floating point. ``"sine"``: the reconstructed [phi_i]_k = sin(pi i k / M) of
        docs/models/token_selection.md §C.2, orthogonal only up to round-off (~1e-13 rho), which the unstable symmetric
        state of Theorem C2 (p in {0, 1}) amplifies in full-matrix GD. Only orthogonality and rho enter the dynamics
        (docs/models/token_selection.md §C.9), so both describe the paper's model; the reduced map of
        docs/models/token_selection.md §C.5 is exact for the one-hot code.
    eta : float > 0
        GD step size, > 0 (docs/models/token_selection.md §C.4). Default 1.
    eps : float > 0
        Offset in the loss -log(e_y^T f + eps), > 0 (docs/models/token_selection.md §C.4). Default 0.1.

    Notes
    -----
    Initialisation is V = 0, W = 0 (docs/models/token_selection.md §C.4). Implements
    docs/models/token_selection.md §C.1-§C.4.
    """

    K: Annotated[int, _V.Range(integer=True, ge=3)]
    N: Annotated[int, _V.Range(integer=True, ge=2)]
    p: Annotated[float, _PROB]
    M: Annotated[int, _V.Range(integer=True, ge=3)] = 1000
    rho: Annotated[float | None, _V.Range(gt=0)] = None
    eta: Annotated[float, _V.Range(gt=0)] = 1.0
    eps: Annotated[float, _V.Range(gt=0)] = 0.1
    code: str = "onehot"

    def __post_init__(self):
        object.__setattr__(self, "K", check_int("K", self.K, min_value=3))
        object.__setattr__(self, "N", check_int("N", self.N, min_value=2))
        object.__setattr__(self, "p", check_in_range("p", self.p, 0.0, 1.0))
        object.__setattr__(self, "M", check_int("M", self.M, min_value=self.N + 1))
        rho = self.M / 2.0 if self.rho is None else check_positive("rho", self.rho)
        object.__setattr__(self, "rho", float(rho))
        object.__setattr__(self, "eta", check_positive("eta", self.eta))
        object.__setattr__(self, "eps", check_positive("eps", self.eps))
        if self.code not in POSITIONAL_CODES:
            raise ValueError(f"code must be one of {POSITIONAL_CODES}; got {self.code!r}")

    @property
    def seq_len(self) -> int:
        """Sequence length N (cross-paper name; docs/models/token_selection.md §C.1)."""
        return self.N

    @property
    def lr(self) -> float:
        """GD step size eta (cross-paper name; docs/models/token_selection.md §C.4)."""
        return self.eta

    @property
    def n_state(self) -> int:
        """Size K^2 + K + N of the reduced state (V, a, c) (docs/models/token_selection.md §C.5)."""
        return self.K * self.K + self.K + self.N

    def time_of_step(self, step):
        """Flow time tau = eta t of GD step t (docs/models/token_selection.md §0)."""
        return self.eta * np.asarray(step, dtype=np.float64)

    def step_of_time(self, time):
        """GD step t = tau / eta of flow time tau (docs/models/token_selection.md §0)."""
        return np.asarray(time, dtype=np.float64) / self.eta

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict (docs/models/token_selection.md §C.0 names)."""
        return asdict(self)


@dataclass(frozen=True, eq=False)
class WalkSample:
    """A weighted set of walks standing for the data law of docs/models/token_selection.md §C.1.

    ``states`` (n, N) int64 holds s_1..s_N (code values 0..K-1): columns 0..N-2 are the context, column N-1 the
    label y. ``weights`` (n,) sum to one: 1/n for a Monte Carlo sample (the default), the exact probabilities for an
    enumerated law (then ``exact`` is True and standard errors are zero).

    Parameters
    ----------
    states : int array >= 0
    weights : array >= 0
    """

    states: Annotated[np.ndarray, _V.Array(ndim=2, dtype="int", range=_V.Range(ge=0))]
    weights: Annotated[np.ndarray | None, _V.Array(ndim=1, range=_V.Range(ge=0))] = None
    exact: bool = False
    _flat: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        states = np.ascontiguousarray(self.states, dtype=np.int64)
        if states.ndim != 2 or states.shape[1] < 2 or states.shape[0] < 1:
            raise ValueError(f"states must have shape (n, N) with n >= 1, N >= 2; got {states.shape}")
        n = states.shape[0]
        weights = np.full(n, 1.0 / n) if self.weights is None else check_finite_array("weights", self.weights)
        if weights.shape != (n,):
            raise ValueError(f"weights must have shape ({n},); got {weights.shape}")
        if np.any(weights < 0) or abs(weights.sum() - 1.0) > 1e-9:
            raise ValueError(f"weights must be >= 0 and sum to 1; got sum {weights.sum()!r}")
        if not self.exact and np.ptp(weights) > 1e-12 / n:
            raise ValueError("weights of a Monte Carlo sample (exact=False) must all equal 1/n (the SEs assume it)")
        object.__setattr__(self, "states", states)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "_flat", states.astype(np.float64).ravel())

    @property
    def n(self) -> int:
        """Number of walks (docs/models/token_selection.md §C.1)."""
        return self.states.shape[0]

    @property
    def context(self) -> np.ndarray:
        """Context states s_1..s_{N-1}, (n, N-1) int64 (docs/models/token_selection.md §C.1)."""
        return self.states[:, :-1]

    @property
    def label(self) -> np.ndarray:
        """Labels y = s_N, (n,) int64 (docs/models/token_selection.md §C.1)."""
        return self.states[:, -1]

    @property
    def parent(self) -> np.ndarray:
        """Direct parents s_{N-1}, (n,) int64 (docs/models/token_selection.md §C.1)."""
        return self.states[:, -2]


def transition_matrix(K: Annotated[int, _V.Range(integer=True, ge=3)], p: Annotated[float, _PROB]) -> np.ndarray:
    """Transition matrix Pi = p Pi_0^T + (1-p) Pi_0, Pi[a, (a+1) mod K] = p, Pi[a, (a-1) mod K] = 1-p
    (docs/models/token_selection.md §C.1).

    Returns (K, K) float64 with rows indexed by the current state (0-based code values).

    Parameters
    ----------
    K : int >= 3
    p : float in [0, 1]
    """
    K = check_int("K", K, min_value=3)
    p = check_in_range("p", p, 0.0, 1.0)
    Pi = np.zeros((K, K))
    idx = np.arange(K)
    Pi[idx, (idx + 1) % K] += p
    Pi[idx, (idx - 1) % K] += 1.0 - p
    return Pi


def positional_matrix(task: RandomWalkTask) -> np.ndarray:
    """Positional vectors Phi = [phi_1..phi_N] (docs/models/token_selection.md §C.2), mutually orthogonal with
    ||phi_i||^2 = rho.

    ``task.code == "onehot"``: phi_i = sqrt(rho) e_i (the first N coordinates of R^M), exactly orthogonal in float64,
    every squared norm the same float. ``"sine"``: [phi_i]_k = sqrt(2 rho / M) sin(pi i k / M), k = 1..M, the
    reconstructed code of docs/models/token_selection.md §C.2 (rho = M/2 gives the unscaled sines), orthogonal up to
    round-off only. Both are orthogonal images of each other on span(phi_1..phi_N), so they give the same dynamics in
    exact arithmetic (docs/models/token_selection.md §C.9). Returns (M, N) float64.
    """
    if task.code == "onehot":
        Phi = np.zeros((task.M, task.N))
        Phi[np.arange(task.N), np.arange(task.N)] = np.sqrt(task.rho)
        return Phi
    k = np.arange(1, task.M + 1, dtype=np.float64)[:, None]
    i = np.arange(1, task.N + 1, dtype=np.float64)[None, :]
    return np.sqrt(2.0 * task.rho / task.M) * np.sin(np.pi * i * k / task.M)


def sample_walks(
    task: RandomWalkTask, n: Annotated[int, _SIZE], rng: Annotated[Any, _V.seed_check] = None
) -> WalkSample:
    """Draw n walks from the exact data law of docs/models/token_selection.md §C.1 with the generator recipe of
    docs/models/token_selection.md §G.C.

    ``s1 = rng.integers(0, K, n)``, then ``steps = where(rng.random((n, N-1)) < p, +1, -1)`` and cumulative sums
    mod K; the last state is the label. ``rng``: int seed, Generator or None (:func:`dynamics.random.as_generator`).
    Test walks are drawn by a second call on the same generator (docs/models/token_selection.md §G.C).

    Parameters
    ----------
    n : int >= 1
    """
    n = check_int("n", n, min_value=1)
    check_allocation("n", (n, 3 * task.N), what="the walks (n, N), their steps and their sums")
    rng = as_generator(rng)
    s1 = rng.integers(0, task.K, size=n)
    steps = np.where(rng.random((n, task.N - 1)) < task.p, 1, -1)
    states = np.empty((n, task.N), dtype=np.int64)
    states[:, 0] = s1
    states[:, 1:] = (s1[:, None] + np.cumsum(steps, axis=1)) % task.K
    return WalkSample(states)


def enumerate_walks(task: RandomWalkTask, max_walks: Annotated[int, _SIZE] = MAX_ENUMERATED_WALKS) -> WalkSample:
    """The exact law of docs/models/token_selection.md §C.1 as a weighted list of every walk of positive probability
    (docs/models/token_selection.md §G.C).

    K 2^{N-1} walks for 0 < p < 1 (weight (1/K) p^{#clockwise} (1-p)^{#anticlockwise}); the K deterministic walks
    s_1 = 0..K-1 for p in {0, 1} (the exact population of Theorem C2).

    Parameters
    ----------
    max_walks : int >= 1

    Raises
    ------
    ValueError
        If there would be more than ``max_walks`` walks (N too large for exact enumeration).
    """
    K, N, p = task.K, task.N, task.p
    if p in (0.0, 1.0):
        step = 1 if p == 1.0 else -1
        s1 = np.arange(K)
        states = (s1[:, None] + step * np.arange(N)[None, :]) % K
        return WalkSample(states, np.full(K, 1.0 / K), exact=True)
    n_walks = K * 2 ** (N - 1)
    if n_walks > max_walks:
        raise ValueError(
            f"N must be small enough that K 2^(N-1) <= max_walks = {max_walks} for exact enumeration; "
            f"got K={K}, N={N} ({n_walks} walks)"
        )
    codes = np.arange(2 ** (N - 1), dtype=np.int64)
    bits = (codes[:, None] >> np.arange(N - 1)[None, :]) & 1  # 1 = clockwise
    steps = 2 * bits - 1
    n_cw = bits.sum(axis=1)
    prob = p**n_cw * (1.0 - p) ** (N - 1 - n_cw) / K
    offsets = np.concatenate([np.zeros((codes.size, 1), dtype=np.int64), np.cumsum(steps, axis=1)], axis=1)
    states = (np.arange(K)[:, None, None] + offsets[None, :, :]) % K
    return WalkSample(states.reshape(-1, N), np.tile(prob, K), exact=True)


def empirical_transitions(sample: WalkSample, K: Annotated[int, _V.Range(integer=True, ge=3)]) -> np.ndarray:
    """C_hat[a, b] = weighted frequency of (parent s_{N-1} = a, label y = b) in a walk sample
    (docs/models/token_selection.md §C.7).

    Returns (K, K) float64 summing to one; its transpose's entrywise square root is the finite-sample limit
    direction of V (docs/models/token_selection.md §C.7).

    Parameters
    ----------
    K : int >= 3
    """
    C_hat = np.zeros((K, K))
    np.add.at(C_hat, (sample.parent, sample.label), sample.weights)
    return C_hat


# ---------------------------------------------------------------------------------------------------------------------
# Model: forward pass, prediction, probes
# ---------------------------------------------------------------------------------------------------------------------


def _column_scales(task: RandomWalkTask, normalize_tokens: bool) -> tuple[float, float]:
    """Scale of a context column and of the blank query column of X~ inside the scores
    (docs/models/token_selection.md §C.8, Fig. 6 default).
    """
    if not normalize_tokens:
        return 1.0, 1.0
    return 1.0 / np.sqrt(1.0 + task.rho), 1.0 / np.sqrt(task.rho)


def _one_hot_average(context: np.ndarray, S_ctx: np.ndarray, K: int) -> np.ndarray:
    """u = X S restricted to the context: u[n, k] = sum_{j < N} S[n, j] [s_j = k], (n, K)."""
    n = context.shape[0]
    flat = (np.arange(n)[:, None] * K + context).ravel()
    return np.bincount(flat, weights=np.asarray(S_ctx).ravel(), minlength=n * K).reshape(n, K)


def forward(
    task: RandomWalkTask,
    V: Annotated[Any, _V.Array(ndim=2)],
    W: Annotated[Any, _V.Array(ndim=2)],
    context: Annotated[Any, _V.Array(ndim=2, dtype="int", range=_V.Range(ge=0))],
    *,
    normalize_tokens: bool = False,
):
    """Attention weights and output of the full model f = V X softmax(X~^T W x~_N)
    (docs/models/token_selection.md §C.3).

    Parameters
    ----------
    task : RandomWalkTask
    V : (K, K) float64
        Value matrix (row = label, column = state).
    W : (K+M, K+M) float64
        Merged key-query matrix (token block first, then positions).
    context : (n, N-1) int, >= 0
        Context states s_1..s_{N-1} (code values).
    normalize_tokens : bool
        Divide every column of X~ (the blank query included) by its norm inside the scores only: the default of
        the random-init experiment, docs/models/token_selection.md §C.8 (Fig. 6).

    Returns
    -------
    S : (n, N) float64
        Attention weights over the N positions (last = blank query).
    f : (n, K) float64
        Output V X S (the blank contributes 0).
    """
    K, N, M = task.K, task.N, task.M
    V = check_finite_array("V", V, shape=(K, K))
    W = check_finite_array("W", W, shape=(K + M, K + M))
    context = _check_context(task, context)
    Phi = positional_matrix(task)
    a_ctx, a_q = _column_scales(task, normalize_tokens)
    xq = np.concatenate([np.zeros(K), a_q * Phi[:, N - 1]])
    q = W @ xq
    logits = np.empty((context.shape[0], N))
    logits[:, :-1] = a_ctx * (q[:K][context] + (Phi[:, :-1].T @ q[K:])[None, :])
    logits[:, -1] = a_q * (Phi[:, -1] @ q[K:])
    S = softmax(logits, axis=1)
    f = _one_hot_average(context, S[:, :-1], K) @ V.T
    return S, f


def reduced_forward(
    task: RandomWalkTask,
    V: Annotated[Any, _V.Array(ndim=2)],
    a: Annotated[Any, _V.Array(ndim=1)],
    c: Annotated[Any, _V.Array(ndim=1)],
    context: Annotated[Any, _V.Array(ndim=2, dtype="int", range=_V.Range(ge=0))],
):
    """Attention weights and output of the model on the reduced family W = W(a, c)
    (docs/models/token_selection.md §C.5).

    Logits l_j = rho a_{s_j} + rho^2 c_j (j < N), l_N = rho^2 c_N. Shapes: V (K, K), a (K,), c (N,),
    context (n, N-1) int. Returns S (n, N) and f (n, K) as :func:`forward`; f_b = sum_k V[b, k] u_k with
    u_k = sum_{j < N, s_j = k} S_j is added in a fixed order (j, then k), the order of the compiled loop's
    diagnostics.

    Parameters
    ----------
    context : int array >= 0
    """
    V, a, c = _check_reduced(task, V, a, c)
    context = _check_context(task, context)
    n = context.shape[0]
    flat = np.concatenate([context, np.zeros((n, 1), dtype=np.int64)], axis=1).astype(np.float64).ravel()
    S = np.empty((n, task.N))
    f = np.empty((n, task.K))
    _kern.reduced_forward(flat, n, task.K, task.N, np.ascontiguousarray(V).ravel(), a, c, task.rho, S, f)
    return S, f


def predict(f: Annotated[Any, _V.Array(ndim=tuple(range(1, 33)))]) -> np.ndarray:
    """Prediction rule Pred(f) = min{j : f_j = max_l f_l} (ties -> smallest label), docs/models/token_selection.md §C.3.
    f (n, K) -> (n,).
    """
    return np.argmax(np.asarray(f), axis=-1)


def W_from_reduced(
    task: RandomWalkTask, a: Annotated[Any, _V.Array(ndim=1)], c: Annotated[Any, _V.Array(ndim=1)]
) -> np.ndarray:
    """The key-query matrix W = [[0, a phi_N^T], [0, (sum_i c_i phi_i) phi_N^T]] of the reduced family
    (docs/models/token_selection.md §C.5).

    Returns (K+M, K+M) float64 (the inverse of :func:`probe_W` on the family).
    """
    K, N = task.K, task.N
    a = check_finite_array("a", a, shape=(K,))
    c = check_finite_array("c", c, shape=(N,))
    Phi = positional_matrix(task)
    W = np.zeros((K + task.M, K + task.M))
    W[:K, K:] = np.outer(a, Phi[:, -1])
    W[K:, K:] = np.outer(Phi @ c, Phi[:, -1])
    return W


def probe_W(task: RandomWalkTask, W: Annotated[Any, _V.Array(ndim=2)]):
    """Probes of docs/models/token_selection.md §C.5.1: a = W12 phi_N / rho, c_j = phi_j^T W22 phi_N / rho^2, and the
    relative distance off.

    off = ||W - W_red||_F / ||W||_F with W_red = :func:`W_from_reduced` (a, c), the orthogonal projection of W
    onto the reduced family (0 for GD from zero; 0 is returned for W = 0). Returns (a (K,), c (N,), off).
    """
    K, M = task.K, task.M
    W = check_finite_array("W", W, shape=(K + M, K + M))
    Phi = positional_matrix(task)
    phi_N = Phi[:, -1]
    a = W[:K, K:] @ phi_N / task.rho
    c = Phi.T @ (W[K:, K:] @ phi_N) / task.rho**2
    norm = np.linalg.norm(W)
    off = 0.0 if norm == 0 else float(np.linalg.norm(W - W_from_reduced(task, a, c)) / norm)
    return a, c, off


# ---------------------------------------------------------------------------------------------------------------------
# Diagnostics shared with the empirical probes (docs/models/token_selection.md §C.5.1)
# ---------------------------------------------------------------------------------------------------------------------


def direction_error(V: Annotated[Any, _V.Array(ndim=2)], target: Annotated[Any, _V.Array(ndim=2)]) -> float:
    """||V/||V||_F - T/||T||_F||_F, the direction error of Theorem C1 item 3 (docs/models/token_selection.md §C.5.1).
    NaN for V = 0.
    """
    V = np.asarray(V, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    nv = np.linalg.norm(V)
    if nv == 0:
        return float("nan")
    return float(np.linalg.norm(V / nv - target / np.linalg.norm(target)))


def direction_errors(V: Annotated[Any, _V.Array(ndim=2)], p: Annotated[float, _PROB]) -> dict:
    """The two direction errors of V (docs/models/token_selection.md §C.5.1, Theorem C1 item 3 and
    docs/models/token_selection.md §C.7) and cos_F(V, Pi^T).

    Returns {"dist_V_Pi": to Pi^T, "dist_V_sqrtPi": to sqrt(Pi^T) (entrywise), "cos_V_Pi": <V, Pi^T>_F / norms}.

    Parameters
    ----------
    p : float in [0, 1]
    """
    V = np.asarray(V, dtype=np.float64)
    PiT = transition_matrix(V.shape[0], p).T
    nv = np.linalg.norm(V)
    cos = float("nan") if nv == 0 else float(np.sum(V * PiT) / (nv * np.linalg.norm(PiT)))
    return {"dist_V_Pi": direction_error(V, PiT), "dist_V_sqrtPi": direction_error(V, np.sqrt(PiT)), "cos_V_Pi": cos}


def accuracy(task: RandomWalkTask, f: Annotated[Any, _V.Array(ndim=2)], sample: WalkSample) -> tuple[float, float]:
    """Plain 0/1 accuracy and Rao-Blackwellised accuracy acc_RB = mean Pi[s_{N-1}, Pred(f)]
    (docs/models/token_selection.md §C.3).

    f (n, K) are the outputs on ``sample`` (finite: a NaN output has no prediction, ``ValueError``); means are
    weighted by ``sample.weights``. Returns (acc, acc_rb).
    """
    if not isinstance(sample, WalkSample):
        raise TypeError(f"sample must be a WalkSample; got {type(sample).__name__}")
    f = check_finite_array("f", f, shape=(sample.n, task.K))
    pred = predict(f)
    Pi = transition_matrix(task.K, task.p)
    w = sample.weights
    return float(w @ (pred == sample.label)), float(w @ Pi[sample.parent, pred])


def _weighted_quantile(values, weights, q):
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    idx = min(int(np.searchsorted(cum, q * cum[-1], side="left")), values.size - 1)
    return float(values[order][idx])


def attention_stats(
    S: Annotated[Any, _V.Array(ndim=2)],
    weights: Annotated[Any, _V.Array(ndim=1, range=_V.Range(ge=0))] = None,
    q: Annotated[float, _V.Range(gt=0, lt=1)] = 0.05,
) -> dict:
    """Attention summaries of docs/models/token_selection.md §C.5.1 for S (n, N): parent (position N-1), its lower
    q-quantile, blank, max other.

    Returns {"attn_parent": mean S_{N-1}, "attn_parent_q": q-quantile of S_{N-1}, "attn_blank": mean S_N,
    "attn_max_other": mean over walks of max_{i != N-1} S_i}; weighted by ``weights`` (default uniform).

    Parameters
    ----------
    weights : array >= 0
    q : float in (0, 1)
    """
    S = np.asarray(S, dtype=np.float64)
    w = np.full(S.shape[0], 1.0 / S.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    parent = np.ascontiguousarray(S[:, -2])  # contiguous columns: the BLAS dot of the compiled diagnostics
    others = np.delete(S, S.shape[1] - 2, axis=1)
    return {
        "attn_parent": float(w @ parent),
        "attn_parent_q": _weighted_quantile(parent, w, q),
        "attn_blank": float(w @ np.ascontiguousarray(S[:, -1])),
        "attn_max_other": float(w @ others.max(axis=1)),
    }


def output_direction_error(task: RandomWalkTask, f: Annotated[Any, _V.Array(ndim=2)], sample: WalkSample) -> float:
    """Mean over walks of ||f/||f||_2 - Pi^T x_{N-1}/||Pi^T x_{N-1}||_2||_2, Theorem C1 item 2
    (docs/models/token_selection.md §C.6).

    Like item 3 it holds as stated only at p = 1/2 (docs/models/token_selection.md §C.7). NaN if some f = 0.
    """
    f = np.asarray(f, dtype=np.float64)
    target = transition_matrix(task.K, task.p)[sample.parent]
    nf = np.linalg.norm(f, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.linalg.norm(f / nf - target / np.linalg.norm(target, axis=1, keepdims=True), axis=1)
    return float(sample.weights @ err)


def kl_to_truth(task: RandomWalkTask, f: Annotated[Any, _V.Array(ndim=2)], sample: WalkSample) -> float:
    """Mean over walks of KL(P_true || P_model), the Fig. 6 (b, d) curve of docs/models/token_selection.md §C.8
    (direction reconstructed there).

    P_true = Pi^T x_{N-1}; P_model,k = max(f_k, 1e-12) / sum_l max(f_l, 1e-12) (f may be <= 0 after a random start);
    the sum runs over P_true,k > 0. Weighted by ``sample.weights``.
    """
    f = np.asarray(f, dtype=np.float64)
    P_true = transition_matrix(task.K, task.p)[sample.parent]
    clipped = np.maximum(f, 1e-12)
    P_model = clipped / clipped.sum(axis=1, keepdims=True)
    pos = P_true > 0
    terms = np.zeros_like(P_true)
    terms[pos] = P_true[pos] * np.log(P_true[pos] / P_model[pos])
    return float(sample.weights @ terms.sum(axis=1))


def diagnostics(
    task: RandomWalkTask,
    V: Annotated[Any, _V.Array(ndim=2)],
    a: Annotated[Any, _V.Array(ndim=1)],
    c: Annotated[Any, _V.Array(ndim=1)],
    sample: WalkSample,
    q: Annotated[float, _V.Range(gt=0, lt=1)] = 0.05,
) -> dict:
    """All scalar diagnostics of docs/models/token_selection.md §C.5.1 at reduced state (V, a, c) on ``sample``
    (normally test walks).

    Keys: acc, acc_rb (docs/models/token_selection.md §C.3), attn_parent, attn_parent_q, attn_blank, attn_max_other,
    dist_V_Pi, dist_V_sqrtPi, cos_V_Pi (Theorem C1 item 3), dist_f_Pi (item 2, NaN while f = 0). The empirical side
    computes the same keys from its probes.

    Parameters
    ----------
    q : float in (0, 1)
    """
    S, f = reduced_forward(task, V, a, c, sample.context)
    acc, acc_rb = accuracy(task, f, sample)
    out = {"acc": acc, "acc_rb": acc_rb}
    out.update(attention_stats(S, sample.weights, q))
    out.update(direction_errors(V, task.p))
    out["dist_f_Pi"] = output_direction_error(task, f, sample)
    return out


DIAGNOSTIC_NAMES = (
    "acc",
    "acc_rb",
    "attn_parent",
    "attn_parent_q",
    "attn_blank",
    "attn_max_other",
    "dist_V_Pi",
    "dist_V_sqrtPi",
    "cos_V_Pi",
    "dist_f_Pi",
)


# ---------------------------------------------------------------------------------------------------------------------
# Reduced state and its exact GD map (docs/models/token_selection.md §C.5)
# ---------------------------------------------------------------------------------------------------------------------


def state_names(task: RandomWalkTask) -> list[str]:
    """Variable names of the reduced state: V_b_a (row b = label, column a = state), a_k, c_i, 0-based
    (docs/models/token_selection.md §C.5).
    """
    K, N = task.K, task.N
    return (
        [f"V_{b}_{a}" for b in range(K) for a in range(K)] + [f"a_{k}" for k in range(K)] + [f"c_{i}" for i in range(N)]
    )


def pack_state(
    task: RandomWalkTask,
    V: Annotated[Any, _V.Array(ndim=2)],
    a: Annotated[Any, _V.Array(ndim=1)],
    c: Annotated[Any, _V.Array(ndim=1)],
) -> np.ndarray:
    """Flatten (V, a, c) into the reduced state vector of length K^2 + K + N (docs/models/token_selection.md §C.5)."""
    V, a, c = _check_reduced(task, V, a, c)
    return np.concatenate([V.ravel(), a, c])


def unpack_state(task: RandomWalkTask, x: Annotated[Any, _V.Array(ndim=tuple(range(1, 33)))]):
    """Split a reduced state vector (..., K^2 + K + N) into V (..., K, K), a (..., K), c (..., N)
    (docs/models/token_selection.md §C.5).
    """
    x = np.asarray(x, dtype=np.float64)
    K = task.K
    if x.shape[-1] != task.n_state:
        raise ValueError(f"x must have last axis K^2 + K + N = {task.n_state}; got shape {x.shape}")
    V = x[..., : K * K].reshape(x.shape[:-1] + (K, K))
    return V, x[..., K * K : K * K + K], x[..., K * K + K :]


def initial_state(task: RandomWalkTask) -> np.ndarray:
    """The paper's initialisation V = 0, W = 0 (docs/models/token_selection.md §C.4) as a reduced state vector
    (zeros).
    """
    return np.zeros(task.n_state)


@dataclass(frozen=True, eq=False)
class ReducedGradient:
    """Negative population gradient -grad L of the reduced state, its standard errors, and the loss
    (docs/models/token_selection.md §C.5).

    ``G_V`` (K, K), ``G_a`` (K,), ``G_c`` (N,): the GD update is x + eta G. ``se_*``: standard error of each entry
    over the walk sample (zero for an enumerated law). ``loss`` = E[-log(e_y^T f + eps)] and ``se_loss``.
    """

    G_V: np.ndarray
    G_a: np.ndarray
    G_c: np.ndarray
    se_V: np.ndarray
    se_a: np.ndarray
    se_c: np.ndarray
    loss: float
    se_loss: float


def _gradient_and_se(task: RandomWalkTask, sample: WalkSample, x: np.ndarray):
    G = np.empty(task.n_state)
    G2 = np.empty(task.n_state)
    loss, loss2 = _kern._accumulate_gradient(sample._flat, sample.weights, task.K, task.N, x, task.rho, task.eps, G, G2)
    if sample.exact or sample.n < 2:
        return G, np.zeros_like(G), loss, 0.0
    # equal weights 1/n: sample variance (ddof=1) = n/(n-1) (m2 - m1^2), SE = sqrt(var/n)
    se = np.sqrt(np.maximum(G2 - G * G, 0.0) / (sample.n - 1))
    se_loss = float(np.sqrt(max(loss2 - loss * loss, 0.0) / (sample.n - 1)))
    return G, se, float(loss), se_loss


def reduced_gradient(
    task: RandomWalkTask,
    sample: WalkSample,
    V: Annotated[Any, _V.Array(ndim=2)],
    a: Annotated[Any, _V.Array(ndim=1)],
    c: Annotated[Any, _V.Array(ndim=1)],
) -> ReducedGradient:
    """Population gradient of the reduced state over a walk sample, with the standard error of every entry.

    Implements the exact GD updates of docs/models/token_selection.md §C.5: G_V = E[kappa e_y (sum_{i<N} S_i x_i)^T],
    G_a = E[kappa sum_{i<N} S_i (g_i - gbar) x_i], G_c,i = E[kappa S_i (g_i - gbar)] (g_N = 0), kappa = 1/(gbar+eps).
    Expectations are weighted means over ``sample`` (Monte Carlo, or exact for :func:`enumerate_walks`).
    """
    _check_sample(task, sample, "sample")
    x = pack_state(task, V, a, c)
    G, se, loss, se_loss = _gradient_and_se(task, sample, x)
    if not np.isfinite(loss):
        raise ValueError(
            "V, a, c give e_y^T f + eps <= 0 on some walk of sample: the log loss of "
            "docs/models/token_selection.md §C.4 is "
            "undefined there (every e_y^T f must exceed -eps)"
        )
    GV, Ga, Gc = unpack_state(task, G)
    sV, sa, sc = unpack_state(task, se)
    return ReducedGradient(GV.copy(), Ga.copy(), Gc.copy(), sV.copy(), sa.copy(), sc.copy(), loss, se_loss)


def map_params(task: RandomWalkTask, sample: WalkSample) -> np.ndarray:
    """The parameter row of the reduced map and flow kernels: [rho, eps, eta] (docs/models/token_selection.md §C.5);
    the walks go to the kernel as data (the engine's ``args`` channel).
    """
    return np.array([task.rho, task.eps, task.eta], dtype=np.float64)


def _kernel_args(task: RandomWalkTask, sample: WalkSample) -> tuple:
    """Data of the reduced map and flow kernels (``dynamics``' ``args``): (states (n N,) float64, weights (n,),
    [K, N] int64).
    """
    return (
        sample._flat,
        np.ascontiguousarray(sample.weights, dtype=np.float64),
        np.array([task.K, task.N], dtype=np.int64),
    )


def map(
    task: RandomWalkTask,
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)],
    *,
    walks: Annotated[Any, _check_walks],
    rng: Annotated[Any, _V.seed_check] = None,
    test: Annotated[Any, _check_walks] = None,
    state0: Annotated[Any, _V.Array(ndim=(1, 2))] = None,
    saveat: Annotated[Any, _V.Instance(dynamics.SaveAt)] = None,
    progress: bool = False,
    attrs: dict | None = None,
    eta: Annotated[Any, _V.Range(array=True, gt=0)] = None,
    warn_unconverged: bool = True,
):
    """Exact GD on the reduced state (V, a, c) over a fixed walk sample (common random numbers),
    docs/models/token_selection.md §C.5.

    Parameters
    ----------
    task : RandomWalkTask
    n_steps : int >= 0
        Number of GD updates T >= 0 (time axis: step t, time eta t).
    walks : int, WalkSample or sequence of WalkSample
        Training walks: a sample size n (drawn by :func:`sample_walks` from ``rng``), or a sample (e.g.
        :func:`enumerate_walks` for the exact population). The same walks serve every step. A sequence (e.g. one
        sample per seed) runs one trajectory per sample: trajectory i on ``walks[i]`` from row i of ``state0`` (or
        the one ``state0``) with ``eta[i]`` (or the one ``eta``), tested on ``test`` (None, one WalkSample shared by
        all, or one per sample); the result equals the per-sample calls stacked along ``trajectory``
        (with a ``sample`` coordinate).
    rng : int, Generator or None
        Seed for the walks (training first, then test walks, docs/models/token_selection.md §G.C).
    test : None, int or WalkSample
        Test walks for the diagnostics (accuracy, attention, docs/models/token_selection.md §C.5.1); an int draws that
        many after the training walks from the same generator.
    state0 : (K^2+K+N,) or (n_traj, K^2+K+N) array, optional
        Initial reduced state(s); default V = 0, a = 0, c = 0 (docs/models/token_selection.md §C.4).
    saveat : dynamics.SaveAt, optional
        Save points (default: the engine's).
    eta : float or (n,) array, > 0, optional
        Step sizes per trajectory, overriding ``task.eta``, broadcast with the ``state0`` rows
        (:func:`closedform.nearest_neighbor.eta_batch`); ``time`` is then the step.
    warn_unconverged : bool, default True
        Warn (``dynamics.UnconvergedWarning``) when a trajectory's step norm (max-norm of one update) did not
        decrease over the last half of the run: a cycle or chaos from too large a step size (past the stability
        limit the map can also raise ``dynamics.DivergenceError``). A run that is merely unconverged does not warn:
        the cross-entropy has no minimiser at finite (V, a, c) (V grows like sqrt(t),
        docs/models/token_selection.md §C.7), so the steps only shrink. ``final_step_norm``, ``converged`` (step
        norm < 1e-8) and ``step_norm_trend`` (``dynamics.convergence``) are returned either way.

    Returns
    -------
    dynamics.Trajectory
        State variables V_b_a, a_k, c_i; derived: loss (training walks) and its SE, se_grad_V / se_grad_a /
        se_grad_c (largest standard error over the entries of each block of the gradient at the saved state; the
        per-entry SEs come from :func:`reduced_gradient`), dist_V_sqrtChat (direction error of V to the
        finite-sample limit sqrt(C_hat^T) of the training walks, docs/models/token_selection.md §C.7), and, with
        ``test``, the :data:`DIAGNOSTIC_NAMES` on the test walks. They are computed inside the compiled loop at every
        save (from the gradient of the step taken there), equal bit for bit to :func:`reduced_gradient`,
        :func:`direction_error` and :func:`diagnostics` at the saved state.

    Raises
    ------
    dynamics.DivergenceError
        If a state becomes non-finite (raised by the engine with the step and variable).
    """
    if not isinstance(walks, (WalkSample, int, np.integer)):
        samples = _sample_list(walks, WalkSample, "walks")
        tests = (
            [test] * len(samples)
            if test is None or isinstance(test, WalkSample)
            else _sample_list(test, WalkSample, "test")
        )
        if len(tests) != len(samples):
            raise ValueError(
                f"test must be None, one WalkSample or one per training sample ({len(samples)}); got {len(tests)}"
            )
        traj = _over_samples(
            lambda wt, s0, e: map(
                task,
                n_steps,
                walks=wt[0],
                test=wt[1],
                state0=s0,
                saveat=saveat,
                progress=progress,
                attrs=attrs,
                eta=e,
                warn_unconverged=False,
            ),
            list(zip(samples, tests)),
            state0,
            eta,
        )
        return check_run(traj, warn_unconverged, what="random_walk.map", fixed_points=False)
    n_steps = check_int("n_steps", n_steps, min_value=0)
    train, test, x0 = _prepare_run(task, walks, rng, test, state0)
    run_attrs = {
        "model": "random_walk",
        "spec": task.to_dict(),
        "source": "closedform",
        "time_unit": "step",
        "equation": "docs/models/token_selection.md §C.5 (exact reduced GD)",
        "config": {
            "n_train": train.n,
            "train_exact": train.exact,
            "n_test": None if test is None else test.n,
            "n_steps": n_steps,
        },
    }
    params, x0, time_scale, time_unit = eta_batch(map_params(task, train), 2, eta, x0)
    if eta is not None:
        run_attrs["eta"] = np.atleast_1d(np.asarray(eta, dtype=np.float64)).tolist()
        run_attrs["time_unit"] = "step"
    run_attrs.update(attrs or {})
    traj = dynamics.iterate(
        _kern.reduced_step,
        x0,
        n_steps,
        params=params,
        args=_observe_args(task, train, test),
        saveat=saveat,
        names=state_names(task),
        observe=_kern.observables,
        observe_names=_observable_names(test),
        step_observe=_kern.step_observables,
        time_scale=time_scale,
        progress=progress,
        attrs=run_attrs,
    )
    return check_run(traj, warn_unconverged, what="random_walk.map", fixed_points=False)


def flow(
    task: RandomWalkTask,
    tau_end: Annotated[float, _V.Range(gt=0)],
    *,
    walks: Annotated[Any, _check_walks],
    rng: Annotated[Any, _V.seed_check] = None,
    test: Annotated[Any, _check_walks] = None,
    state0: Annotated[Any, _V.Array(ndim=(1, 2))] = None,
    solver=None,
    saveat: Annotated[Any, _V.Instance(dynamics.SaveAt)] = None,
    progress: bool = False,
    attrs: dict | None = None,
):
    """Gradient flow of the reduced state, d(V, a, c)/dtau = the docs/models/token_selection.md §C.5 updates divided by
    eta (docs/models/token_selection.md §0).

    Same arguments and derived variables as :func:`map`, with the flow time ``tau_end`` = eta T instead of
    a step count, and ``solver`` a ``dynamics`` ODE solver (default ``dynamics.Dopri5()``). The ``time`` axis is tau;
    compare with the map at step tau / eta. The result carries the convergence diagnostics of :func:`map` (on the
    size of the vector field) but never warns: a gradient flow cannot cycle or be chaotic, its blow-up raises
    ``dynamics.DivergenceError``, and without a finite minimiser it never converges, so an unconverged end says
    nothing (its vector field may even grow for a while as the attention moves to the parent token).

    Parameters
    ----------
    tau_end : float > 0
    """
    tau_end = check_positive("tau_end", tau_end)
    train, test, x0 = _prepare_run(task, walks, rng, test, state0)
    run_attrs = {
        "model": "random_walk",
        "spec": task.to_dict(),
        "source": "closedform",
        "time_unit": "eta*step",
        "equation": "docs/models/token_selection.md §0, §C.5 (reduced gradient flow)",
        "config": {
            "n_train": train.n,
            "train_exact": train.exact,
            "n_test": None if test is None else test.n,
            "tau_end": tau_end,
        },
    }
    run_attrs.update(attrs or {})
    return dynamics.integrate(
        _kern.reduced_rhs,
        x0,
        (0.0, tau_end),
        params=map_params(task, train),
        args=_observe_args(task, train, test),
        solver=solver,
        saveat=saveat,
        names=state_names(task),
        observe=_kern.observables,
        observe_names=_observable_names(test),
        progress=progress,
        attrs=run_attrs,
    )


def _prepare_run(task, walks, rng, test, state0):
    """Validate and draw the training / test walks (training first, docs/models/token_selection.md §G.C) and the initial
    state(s).
    """
    rng = as_generator(rng)
    if isinstance(walks, WalkSample):
        train = _check_sample(task, walks, "walks")
    else:
        train = sample_walks(task, check_int("walks", walks, min_value=1), rng)
    if test is not None and not isinstance(test, WalkSample):
        test = sample_walks(task, check_int("test", test, min_value=1), rng)
    elif test is not None:
        _check_sample(task, test, "test")
    x0 = initial_state(task) if state0 is None else check_finite_array("state0", state0, ndim=(1, 2))
    if x0.shape[-1] != task.n_state:
        raise ValueError(f"state0 must have last axis K^2 + K + N = {task.n_state}; got shape {x0.shape}")
    return train, test, x0


_TRAIN_OBSERVABLES = ("loss", "se_loss", "se_grad_V", "se_grad_a", "se_grad_c", "dist_V_sqrtChat")


def _observable_names(test) -> tuple:
    """Names of the derived variables of the reduced runs: training loss, gradient SEs, direction to sqrt(C_hat^T),
    and with test walks the :data:`DIAGNOSTIC_NAMES`.
    """
    return _TRAIN_OBSERVABLES + (() if test is None else DIAGNOSTIC_NAMES)


def _unit(target) -> np.ndarray:
    """target / ||target||_F as :func:`direction_error` computes it, flattened row-major."""
    return np.ascontiguousarray(target / np.linalg.norm(target)).ravel()


def _observe_args(task, train, test, q: float = 0.05) -> tuple:
    """Data of the compiled observables (``_random_walk_kernels.observables``): the kernel data of
    :func:`_kernel_args` with dims [K, N, se, n_test], the constants of the diagnostics and the test walks.
    """
    states, weights, _ = _kernel_args(task, train)
    K = task.K
    se = int(not train.exact and train.n >= 2)
    Pi = transition_matrix(K, task.p)
    PiT = Pi.T
    parts = [
        _unit(np.sqrt(empirical_transitions(train, K).T)),
        np.ascontiguousarray(PiT).ravel(),
        _unit(PiT),
        _unit(np.sqrt(PiT)),
        Pi.ravel(),
        [np.linalg.norm(PiT), q],
    ]
    if test is None:
        test_states, test_weights = np.zeros(1), np.zeros(1)  # unread (n_test = 0); the engine refuses empty data
    else:
        target = Pi[test.parent]  # as output_direction_error
        parts.append((target / np.linalg.norm(target, axis=1, keepdims=True)).ravel())
        test_states, test_weights = test._flat, np.ascontiguousarray(test.weights, dtype=np.float64)
    dims = np.array([K, task.N, se, 0 if test is None else test.n], dtype=np.int64)
    return states, weights, dims, np.concatenate(parts), test_states, test_weights


# ---------------------------------------------------------------------------------------------------------------------
# Full-matrix GD (numpy, batched over walks): the check that GD stays on the reduced family
# ---------------------------------------------------------------------------------------------------------------------


def full_gradient(
    task: RandomWalkTask,
    sample: WalkSample,
    V: Annotated[Any, _V.Array(ndim=2)],
    W: Annotated[Any, _V.Array(ndim=2)],
    *,
    normalize_tokens: bool = False,
):
    """Gradient of L(V, W) = E[-log(e_y^T f + eps)] with respect to the full matrices V and W
    (docs/models/token_selection.md §C.3-§C.4).

    Generic chain rule for any (V, W) (random starts included): dL/dl_j = -kappa S_j (g_j - gbar) and
    dL/dW = E[sum_j dL/dl_j x~_j] x~_N^T, dL/dV = -E[kappa e_y (X S)^T]. No reduced structure is assumed.

    Returns (dL/dV (K, K), dL/dW (K+M, K+M), L).

    Raises
    ------
    dynamics.DivergenceError
        If e_y^T f + eps <= 0 for some walk (the log is undefined: possible only from a random start).
    """
    K, N, M = task.K, task.N, task.M
    S, f = forward(task, V, W, sample.context, normalize_tokens=normalize_tokens)
    V = np.asarray(V, dtype=np.float64)
    y, ctx, w = sample.label, sample.context, sample.weights
    gbar = f[np.arange(sample.n), y]
    arg = gbar + task.eps
    if not np.all(arg > 0):
        raise dynamics.DivergenceError("e_y^T f + eps <= 0: the log loss is undefined", trajectory=0, variable="loss")
    kappa = 1.0 / arg
    loss = float(w @ -np.log(arg))
    u = _one_hot_average(ctx, S[:, :-1], K)
    dV = np.zeros((K, K))
    np.add.at(dV, y, -(w * kappa)[:, None] * u)
    g = np.zeros((sample.n, N))
    g[:, :-1] = V[y[:, None], ctx]
    dl = -(w * kappa)[:, None] * S * (g - gbar[:, None])  # weighted dL/dl_j
    Phi = positional_matrix(task)
    a_ctx, a_q = _column_scales(task, normalize_tokens)
    col = np.zeros(K + M)  # sum over walks and positions of dL/dl_j x~_j (scaled columns)
    col[:K] = a_ctx * np.bincount(ctx.ravel(), weights=dl[:, :-1].ravel(), minlength=K)
    col[K:] = a_ctx * (Phi[:, :-1] @ dl[:, :-1].sum(axis=0)) + a_q * dl[:, -1].sum() * Phi[:, -1]
    xq = np.concatenate([np.zeros(K), a_q * Phi[:, -1]])
    return dV, np.outer(col, xq), loss


def full_gd(
    task: RandomWalkTask,
    sample: WalkSample,
    n_steps: Annotated[int, _V.Range(integer=True, ge=0)],
    *,
    V0: Annotated[Any, _V.Array(ndim=2)] = None,
    W0: Annotated[Any, _V.Array(ndim=2)] = None,
    normalize_tokens: bool = False,
    save_every: Annotated[int, _SIZE] = 1,
    attrs: dict | None = None,
):
    """Full-matrix GD on (V, W) in numpy (docs/models/token_selection.md §C.4), logging the probes of
    docs/models/token_selection.md §C.5.1 every ``save_every`` steps.

    Parameters
    ----------
    sample : WalkSample
        Training walks (fixed: full-batch GD).
    V0, W0 : arrays, optional
        Initial matrices; default zero (the paper's initialisation, docs/models/token_selection.md §C.4).
    n_steps : int >= 0
    save_every : int >= 1

    Returns
    -------
    dynamics.Trajectory
        Variables V_b_a, a_k, c_i (probes of W, docs/models/token_selection.md §C.5.1; equal to the reduced state for GD
        from zero), ``off`` (relative distance of W to the reduced family) and ``loss`` (at the saved parameters).

    Raises
    ------
    dynamics.DivergenceError
        With the step and the variable if V or W becomes non-finite.
    """
    K, M = task.K, task.M
    n_steps = check_int("n_steps", n_steps, min_value=0)
    save_every = check_int("save_every", save_every, min_value=1)
    _check_sample(task, sample, "sample")
    V = np.zeros((K, K)) if V0 is None else check_finite_array("V0", V0, shape=(K, K)).copy()
    W = np.zeros((K + M, K + M)) if W0 is None else check_finite_array("W0", W0, shape=(K + M, K + M)).copy()
    saved, steps, off, losses = [], [], [], []
    for t in range(n_steps + 1):
        dV, dW, loss = full_gradient(task, sample, V, W, normalize_tokens=normalize_tokens)
        if t % save_every == 0 or t == n_steps:
            a, c, o = probe_W(task, W)
            saved.append(np.concatenate([V.ravel(), a, c]))
            steps.append(t)
            off.append(o)
            losses.append(loss)
        if t == n_steps:
            break
        V = V - task.eta * dV
        W = W - task.eta * dW
        for name, arr in (("V", V), ("W", W)):
            if not np.all(np.isfinite(arr)):
                raise dynamics.DivergenceError(
                    f"full-matrix GD produced a non-finite {name} at step {t + 1}",
                    trajectory=0,
                    variable=name,
                    step=t + 1,
                    time=task.eta * (t + 1),
                )
    steps = np.asarray(steps)
    run_attrs = {
        "model": "random_walk",
        "spec": task.to_dict(),
        "source": "closedform",
        "time_unit": "step",
        "equation": (
            "docs/models/token_selection.md §C.3-§C.4 (full-matrix GD), probes docs/models/token_selection.md §C.5.1"
        ),
        "config": {"n_train": sample.n, "normalize_tokens": normalize_tokens, "n_steps": n_steps},
    }
    run_attrs.update(attrs or {})
    return dynamics.Trajectory.from_arrays(
        np.asarray(saved)[None],
        names=state_names(task),
        time=task.time_of_step(steps),
        step=steps,
        variables={"off": np.asarray(off)[None], "loss": np.asarray(losses)[None]},
        attrs=run_attrs,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Closed forms (docs/models/token_selection.md §C.5)
# ---------------------------------------------------------------------------------------------------------------------


def V1_closed(task: RandomWalkTask) -> np.ndarray:
    """V^(1) = eta/(eps N K) sum_{i=1}^{N-1} (Pi^T)^{N-i} after the first GD step from zero
    (docs/models/token_selection.md §C.5, Lemma C.1).

    W^(1) = 0. Circulant, (K, K), row = label, column = state.
    """
    PiT = transition_matrix(task.K, task.p).T
    total = np.zeros((task.K, task.K))
    power = np.eye(task.K)
    for _ in range(task.N - 1):
        power = power @ PiT
        total += power
    return task.eta / (task.eps * task.N * task.K) * total


def W2_closed(task: RandomWalkTask, max_walks: Annotated[int, _SIZE] = MAX_ENUMERATED_WALKS):
    """W^(2) in reduced coordinates (a^(2), c^(2)), exact expectation over the walk law
    (docs/models/token_selection.md §C.5, closed forms).

    a^(2) = (eta/N) E[kappa sum_{i<N} (g_i - gbar) x_i], c^(2)_i = (eta/N) E[(g_i - gbar)/(gbar + eps)] (g_N = 0),
    at V = V^(1), S = 1/N, kappa = 1/(gbar + eps). The expectation is a finite sum over the K 2^{N-1} walks
    (:func:`enumerate_walks`), so this is exact to round-off; N is limited by ``max_walks``. V^(2) is not part of
    the closed form. Build the matrix with :func:`W_from_reduced`.

    Parameters
    ----------
    max_walks : int >= 1
    """
    law = enumerate_walks(task, max_walks)
    V1 = V1_closed(task)
    N, K = task.N, task.K
    y, ctx, w = law.label, law.context, law.weights
    g = V1[y[:, None], ctx]  # (n, N-1)
    gbar = g.sum(axis=1) / N
    wk = w / (gbar + task.eps)
    diff = g - gbar[:, None]
    a2 = task.eta / N * np.bincount(ctx.ravel(), weights=(wk[:, None] * diff).ravel(), minlength=K)
    c2 = np.empty(N)
    c2[:-1] = task.eta / N * (wk @ diff)
    c2[-1] = task.eta / N * (wk @ -gbar)
    return a2, c2


# ---------------------------------------------------------------------------------------------------------------------
# Theorem predictions (docs/models/token_selection.md §C.6-§C.7)
# ---------------------------------------------------------------------------------------------------------------------


def optimal_accuracy(p: Annotated[float, _PROB]) -> float:
    """Bayes accuracy OPT = max{p, 1 - p} of predicting y from the walk (docs/models/token_selection.md §C.1; Theorem C1
    item 1).

    Parameters
    ----------
    p : float in [0, 1]
    """
    p = check_in_range("p", p, 0.0, 1.0)
    return max(p, 1.0 - p)


def failure_theorem_applies(task: RandomWalkTask) -> bool:
    """True when Theorem C2 applies: p in {0, 1} and N = r K + 1 with r >= 1 (docs/models/token_selection.md §C.6)."""
    return task.p in (0.0, 1.0) and (task.N - 1) % task.K == 0


def theorem_accuracy(task: RandomWalkTask) -> float:
    """Test accuracy predicted for T >= T_0 GD steps: max{p, 1-p} (Theorem C1, 0 < p < 1) or 1/K (Theorem C2).

    Theorem C1 needs K > 4 and N >= C_p poly(K) with unknown constants (docs/models/token_selection.md §C.6); the checks
    of docs/models/token_selection.md §4, §C.7 show it from K = 6, N = 97 on. Theorem C2 (p in {0, 1}, N = r K + 1)
    holds for any loss, step size and T.

    Raises
    ------
    ValueError
        If p is 0 or 1 but N - 1 is not a multiple of K (neither theorem covers this case).
    """
    if 0.0 < task.p < 1.0:
        return optimal_accuracy(task.p)
    if failure_theorem_applies(task):
        return 1.0 / task.K
    raise ValueError(f"N must satisfy N = r K + 1 for the failure theorem at p = {task.p}; got N={task.N}, K={task.K}")


def theorem_attention(task: RandomWalkTask) -> np.ndarray:
    """Limiting attention weights over the N positions predicted by the theorems (docs/models/token_selection.md §C.6),
    (N,) float64.

    Theorem C1 item 4 (0 < p < 1): one-hot on the direct parent, position N-1 (code index N-2), up to
    exp(-Omega(N)). Theorem C2 (p in {0, 1}, N = r K + 1): 1/(N-1) on every context position and 0 on the blank
    from step 2 on (the blank's weight is derived in docs/models/token_selection.md §C.6; exactly 0 in float64 for rho =
    500).
    """
    out = np.zeros(task.N)
    if 0.0 < task.p < 1.0:
        out[-2] = 1.0
        return out
    if failure_theorem_applies(task):
        out[:-1] = 1.0 / (task.N - 1)
        return out
    raise ValueError(f"N must satisfy N = r K + 1 for the failure theorem at p = {task.p}; got N={task.N}, K={task.K}")


def V_direction(task: RandomWalkTask, kind: Annotated[str, _V.OneOf("theorem", "derived")] = "derived") -> np.ndarray:
    """Unit-Frobenius limiting direction of V (docs/models/token_selection.md §C.6 item 3 and
    docs/models/token_selection.md §C.7), (K, K).

    ``kind="theorem"``: Pi^T/||Pi^T||_F as Theorem C1 item 3 states; it holds only at p = 1/2
    (docs/models/token_selection.md §C.7). ``kind="derived"``: sqrt(Pi^T)/||sqrt(Pi^T)||_F (entrywise square root), the
    limit of GD under the log loss for every 0 < p < 1 (docs/models/token_selection.md §C.7: dV_ba = eta Pi_ab / (K
    (V_ba + eps)) once attention is on the parent). Both coincide at p = 1/2. For a finite training sample the limit is
    sqrt(C_hat^T), see :func:`empirical_transitions`.
    """
    if kind not in ("theorem", "derived"):
        raise ValueError(f"kind must be one of 'theorem', 'derived'; got {kind!r}")
    PiT = transition_matrix(task.K, task.p).T
    D = PiT if kind == "theorem" else np.sqrt(PiT)
    return D / np.linalg.norm(D)


def direction_limit_distance(p: Annotated[float, _PROB]) -> float:
    """||sqrt(Pi^T)/||sqrt(Pi^T)|| - Pi^T/||Pi^T|| ||_F = sqrt(2 - 2 (p^1.5 + (1-p)^1.5)/sqrt(p^2 + (1-p)^2)),
    docs/models/token_selection.md §C.7.

    The floor of the Theorem C1 item 3 direction error under GD (any K >= 3); 0 only at p in {0, 1/2, 1}.

    Parameters
    ----------
    p : float in [0, 1]
    """
    p = check_in_range("p", p, 0.0, 1.0)
    q = 1.0 - p
    inner = (p**1.5 + q**1.5) / np.sqrt(p * p + q * q)
    return float(np.sqrt(max(2.0 - 2.0 * inner, 0.0)))


# ---------------------------------------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------------------------------------


def _check_context(task: RandomWalkTask, context) -> np.ndarray:
    context = np.asarray(context)
    if context.ndim != 2 or context.shape[1] != task.N - 1:
        raise ValueError(f"context must have shape (n, N-1) = (n, {task.N - 1}); got {context.shape}")
    if not np.issubdtype(context.dtype, np.integer):
        raise ValueError(f"context must hold integer node codes; got dtype {context.dtype}")
    if context.size and (context.min() < 0 or context.max() >= task.K):
        raise ValueError(f"context entries must lie in [0, K-1] = [0, {task.K - 1}]")
    return context.astype(np.int64, copy=False)


def _check_sample(task: RandomWalkTask, sample: WalkSample, name: str) -> WalkSample:
    if not isinstance(sample, WalkSample):
        raise ValueError(f"{name} must be a WalkSample; got {type(sample).__name__}")
    if sample.states.shape[1] != task.N:
        raise ValueError(f"{name} must hold walks of length N = {task.N}; got {sample.states.shape[1]}")
    if sample.states.min() < 0 or sample.states.max() >= task.K:
        raise ValueError(f"{name} states must lie in [0, K-1] = [0, {task.K - 1}]")
    return sample


def _check_reduced(task: RandomWalkTask, V, a, c):
    K, N = task.K, task.N
    return (
        check_finite_array("V", V, shape=(K, K)),
        check_finite_array("a", a, shape=(K,)),
        check_finite_array("c", c, shape=(N,)),
    )


def theorem_predictions(task: RandomWalkTask) -> dict:
    """The paper's named predictions for ``task`` (Theorems C1 and C2, docs/models/token_selection.md §C.6), assembled
    from the closed forms.

    Keys:

    * ``optimal_accuracy``: the Bayes accuracy max{p, 1 - p} (docs/models/token_selection.md §C.1, Theorem C1 item 1).
    * ``theorem_accuracy``: the test accuracy after enough GD steps: max{p, 1 - p} (Theorem C1) or 1/K (Theorem C2);
      None when neither theorem covers the task (p in {0, 1} with N - 1 not a multiple of K).
    * ``theorem_attention``: the limiting attention over the N positions, (N,) array
      (docs/models/token_selection.md §C.6), or None as above.
    * ``failure_theorem_applies``: whether Theorem C2 (p in {0, 1}, N = r K + 1) applies.
    * ``direction_limit_distance``: the floor of the Theorem C1 item 3 direction error under GD
      (docs/models/token_selection.md §C.7).
    """
    if not isinstance(task, RandomWalkTask):
        raise TypeError(f"task must be a RandomWalkTask; got {type(task).__name__}")
    covered = 0.0 < task.p < 1.0 or failure_theorem_applies(task)
    return {
        "optimal_accuracy": optimal_accuracy(task.p),
        "theorem_accuracy": theorem_accuracy(task) if covered else None,
        "theorem_attention": theorem_attention(task) if covered else None,
        "failure_theorem_applies": failure_theorem_applies(task),
        "direction_limit_distance": direction_limit_distance(task.p),
    }


# ----------------------------------------------------------------------------------------------------------------
# Argument checks of every public function and class (dynamics.validation): each parameter's rule is declared at its
# definition (a class annotation, or a rule in its ``Annotated`` metadata; the shared ones below); each function's own
# checks (shapes against the task, states in 0..K-1, ...) follow. Checks run once per outermost call, so the loops
# of ``map``/``full_gd`` pay nothing.

from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)

_SIZE = _V.Range(integer=True, ge=1)


def _check_walks(name: str, value) -> None:
    """walks (and test) of ``map``/``flow``: a sample size n >= 1, a WalkSample, or a non-empty sequence of them."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
        _SIZE(name, value)
    elif not isinstance(value, WalkSample):
        if isinstance(value, numbers.Number) or value is None:
            raise _V.ArgumentTypeError(
                f"{name} must be a sample size (an integer >= 1), a WalkSample or a "
                f"sequence of WalkSample; got {_V._show(value)}"
            )
        _sample_list(value, WalkSample, name)


_PROB = _V.Range(ge=0, le=1)
_V.validate_module(globals())
