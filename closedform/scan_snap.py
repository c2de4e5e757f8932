"""Scan and Snap: training dynamics of a 1-layer transformer on sequence classes (Tian et al., NeurIPS 2023).

Implements ``docs/models/scan_snap.md``: the data model (docs/models/scan_snap.md §1.2, §4.1, generator
docs/models/scan_snap.md §5.1), Lemma 1 gradients (docs/models/scan_snap.md §1.5), the decoder closed forms (Lemmas 5-7,
docs/models/scan_snap.md §2.3-§2.4), Theorems 2-4 (docs/models/scan_snap.md §3), the exact reduced ODE with lumping
(docs/models/scan_snap.md §4.2), the discrete population map (docs/models/scan_snap.md §4.3), the composite Theorem-1
ODE (docs/models/scan_snap.md §4.4) and the diagnostics of docs/models/scan_snap.md §4.6.

Conventions: POPULATION convention (class prior pi_n inside the vector fields, errata E4); time in optimizer steps
(learning rates inside the vector field, docs/models/scan_snap.md §0.2), so ``time_of_step(s) = s``; 0-based indices
(docs/models/scan_snap.md §0.1).

Symbol table (code name | paper symbol | meaning | shape | where defined)
-------------------------------------------------------------------------
Sections (§) in the last column are those of docs/models/scan_snap.md.

M          | M          | output (softmax) size                               | int          | §0.4, §4.1
K          | K          | number of classes                                   | int          | §1.2
Lc         | Lc         | number of contextual token types                    | int          | §0.4
Q          | Q          | number of query tokens                              | int          | §0.4
P          | P(l|n)     | contextual-token law of class n                     | (K, Lc)      | §1.2
pi         | pi_n       | class prior                                         | (K,)         | §1.2
psi        | psi(n)     | query index of class n                              | (K,) int     | §1.2
tgt        | tgt(n)     | output index of class n's next token                | (K,) int     | §1.2
Y          | Y          | decoder, contextual rows                            | (Lc, M)      | §1.4, §4.1
Z          | Z, z_{ml}  | attention logits of query m on token l              | (Q, Lc)      | §1.4, §4.1
eta_Y      | eta_Y      | decoder learning rate                               | float        | §1.6
eta_Z      | eta_Z      | attention learning rate                             | float        | §1.6
mu         | mu         | heavy-ball momentum                                 | float        | §4.3
c          | c_{l|n}    | attention map of class n                            | (K, Lc)      | Eq. (5)
f          | f_n        | c~_n / ||c~_n||                                     | (K, Lc)      | §2.1
alpha_tgt  | alpha_{n,tgt(n)} | decoder confidence                            | (K,)         | §4.6
gamma_hat  | gamma_hat_n| measured speed-control coefficient                  | (K,)         | §4.6
H          | H_n        | distinct-token entropy                              | (K,)         | §4.6
h, h_star  | h, h*      | continuous / discrete decoder scalar                | float        | Lemmas 5-6
gamma, Gamma | gamma, Gamma | speed-control coefficient, eta_Z x its integral | float        | §2.4
t0p, t0, t0_omega1, t_peak, t_half | | decoder time scales                     | float        | §2.4
chi, r     | chi_l, r_{l/l'|n} | growth factor, relative gain                 | float        | Theorem 3, §3.3
B          | B_n        | drive integral (printed / paper / cons forms)       | float        | Theorem 4, §3.4
C0_paper, C0_cons | C0  | Theorem 4 constants                                 | float        | §3.4

Notes
-----
Departures from the printed paper follow the errata of docs/models/scan_snap.md §8: E' sign (E1), B_n(0) = 0 (E2,
form 'paper'), the consistent common-token rate with 1/(4K) prefactor (E3, form 'cons'), pi_n in the attention ODE
(E4).
"""

from __future__ import annotations

from typing import Annotated, Any
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
import scipy.special

from closedform import _scan_snap_kernels as _k
from dynamics.convergence import check_run
from dynamics.validation import check_allocation, check_choice, check_finite_array, check_int, check_positive

REFERENCE = {
    "title": "Scan and Snap: Understanding Training Dynamics and Token Composition in 1-layer Transformer",
    "authors": "Yuandong Tian, Yiping Wang, Beidi Chen, Simon S. Du",
    "venue": "NeurIPS 2023",
    "arxiv": "2305.16380",
    "bibtex_key": "tian2023scan",
    "spec": "docs/models/scan_snap.md",
}

# : The time axis of every trajectory of this module: optimizer steps (docs/models/scan_snap.md §0.2). :func:`map`
# counts updates : (``time`` = ``step``); :func:`flow` and :func:`composite_flow` integrate in the same unit (ODE time 1
# = one : step at the task's learning rates eta_Y, eta_Z), so map and flows share one axis.
TIME_UNIT = "step (optimizer steps; flows integrate in the same unit, docs/models/scan_snap.md §0.2)"

__all__ = [
    "REFERENCE",
    "theorem_predictions",
    "TIME_UNIT",
    "SequenceClasses",
    "ScanSnapTask",
    "TransitionTimes",
    "flow",
    "map",
    "composite_flow",
    "random_init",
    "population_gradient",
    "lemma1_gradient",
    "attention_maps",
    "unit_attention",
    "distinct_entropy",
    "decoder_stats",
    "token_drive",
    "decoder_h",
    "decoder_h_star",
    "speed_control",
    "transition_times",
    "transition_time",
    "measure_transition",
    "growth_factor",
    "relative_gain",
    "dominant_token",
    "saturation_dz",
    "theorem3_dz",
    "theorem3_bounds",
    "theorem4_constants",
    "drive_B",
    "common_token_z",
    "theorem2_signs",
]


# ---------------------------------------------------------------------------------------------------------------
# Data model
# ---------------------------------------------------------------------------------------------------------------


def _frozen(a, dtype):
    a = np.array(a, dtype=dtype, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, kw_only=True, eq=False)
class SequenceClasses:
    """Sequence classes of docs/models/scan_snap.md §1.2, §4.1: K classes over Lc contextual tokens, Q queries, M
    outputs.

    Parameters
    ----------
    M : int >= 1
        Output (softmax) size, any integer >= K and >= 2 (docs/models/scan_snap.md §4.1; need not equal Lc + Q + K).
    P : (K, Lc) float64
        P(l|n): rows non-negative, summing to 1 (docs/models/scan_snap.md §1.2).
    tgt : (K,) int, optional
        Output index of each class's next token, distinct, in [0, M) (default: n, as in the reference values of
        docs/models/scan_snap.md §7).
    psi : (K,) int, optional
        Query index of each class (default: all 0, a single query).
    Q : int, optional
        Number of query tokens (default max(psi) + 1).
    pi : (K,) float64, optional
        Class prior (default uniform 1/K). Everything using gamma or h(t/K) requires it uniform
        (docs/models/scan_snap.md §4.1).
    name : str
        Label for provenance.
    """

    M: Annotated[int, _V.Range(integer=True, ge=1)]
    P: np.ndarray
    tgt: np.ndarray | None = None
    psi: np.ndarray | None = None
    Q: int | None = None
    pi: np.ndarray | None = None
    name: str = "custom"

    def __post_init__(self):
        P = check_finite_array("P", self.P, ndim=2)
        K, Lc = P.shape
        if np.any(P < 0):
            raise ValueError("P must have non-negative entries (P(l|n) >= 0)")
        if not np.allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-12):
            raise ValueError(f"P rows must sum to 1 (|sum - 1| <= 1e-12); got row sums {P.sum(axis=1)}")
        M = check_int("M", self.M, min_value=2)
        if K > M:
            raise ValueError(f"K (number of classes, rows of P) must be <= M={M}; got K={K}")
        tgt = np.arange(K) if self.tgt is None else np.asarray(self.tgt)
        if tgt.shape != (K,) or not np.issubdtype(tgt.dtype, np.integer):
            raise ValueError(f"tgt must be K={K} integers; got {self.tgt!r}")
        if np.any(tgt < 0) or np.any(tgt >= M) or len(set(tgt.tolist())) != K:
            raise ValueError(f"tgt must be K={K} distinct output indices in [0, M={M}); got {tgt.tolist()}")
        psi = np.zeros(K, dtype=np.int64) if self.psi is None else np.asarray(self.psi)
        if psi.shape != (K,) or not np.issubdtype(psi.dtype, np.integer) or np.any(psi < 0):
            raise ValueError(f"psi must be K={K} query indices >= 0; got {self.psi!r}")
        Q = int(psi.max()) + 1 if self.Q is None else check_int("Q", self.Q, min_value=int(psi.max()) + 1)
        pi = np.full(K, 1.0 / K) if self.pi is None else check_finite_array("pi", self.pi, shape=(K,))
        if np.any(pi < 0) or abs(pi.sum() - 1.0) > 1e-12:
            raise ValueError(f"pi must be a probability vector of length K={K}; got {pi}")
        object.__setattr__(self, "M", M)
        object.__setattr__(self, "Q", Q)
        for name, arr, dt in (
            ("P", P, np.float64),
            ("tgt", tgt, np.int64),
            ("psi", psi, np.int64),
            ("pi", pi, np.float64),
        ):
            object.__setattr__(self, name, _frozen(arr, dt))

    # value semantics (numpy fields: compare by content)
    def _key(self):
        return (
            self.M,
            self.Q,
            self.name,
            self.P.tobytes(),
            self.P.shape,
            self.tgt.tobytes(),
            self.psi.tobytes(),
            self.pi.tobytes(),
        )

    def __eq__(self, other):
        return isinstance(other, SequenceClasses) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    @property
    def K(self) -> int:
        """Number of classes K (docs/models/scan_snap.md §1.2)."""
        return self.P.shape[0]

    @property
    def Lc(self) -> int:
        """Number of contextual token types Lc (docs/models/scan_snap.md §0.4)."""
        return self.P.shape[1]

    @property
    def uniform_prior(self) -> bool:
        """True when pi_n = 1/K (required by docs/models/scan_snap.md §2.3-§2.5, §3.4, §4.4;
        docs/models/scan_snap.md §4.1).
        """
        return bool(np.allclose(self.pi, 1.0 / self.K, rtol=0, atol=1e-15))

    def classes_of(self, l: int) -> np.ndarray:  # noqa: E741 (the paper's token index l)
        """Omega(l) = {n : P(l|n) > 0} (docs/models/scan_snap.md §1.2)."""
        return np.flatnonzero(self.P[:, l] > 0)

    def distinct_tokens(self, n: int) -> np.ndarray:
        """G_DT(n): contextual tokens with |Omega(l)| = 1 in class n (docs/models/scan_snap.md §1.2)."""
        cnt = (self.P > 0).sum(axis=0)
        return np.flatnonzero((self.P[n] > 0) & (cnt == 1))

    def common_tokens(self) -> np.ndarray:
        """G_CT: contextual tokens with |Omega(l)| > 1 (docs/models/scan_snap.md §1.2)."""
        return np.flatnonzero((self.P > 0).sum(axis=0) > 1)

    def to_dict(self) -> dict:
        """JSON-ready description (provenance; docs/models/scan_snap.md §4.1 configuration)."""
        return {
            "name": self.name,
            "M": self.M,
            "K": self.K,
            "Lc": self.Lc,
            "Q": self.Q,
            "P": self.P.tolist(),
            "tgt": self.tgt.tolist(),
            "psi": self.psi.tolist(),
            "pi": self.pi.tolist(),
        }

    # ---- constructors ---------------------------------------------------------------------------------------
    @classmethod
    def from_P(cls, P, *, M: int, tgt=None, psi=None, Q=None, pi=None, name: str = "custom") -> SequenceClasses:
        """Validated constructor from a user's P matrix (docs/models/scan_snap.md §4.1); defaults tgt(n) = n, one query,
        uniform pi.
        """
        return cls(M=M, P=P, tgt=tgt, psi=psi, Q=Q, pi=pi, name=name)

    @classmethod
    def syn(
        cls,
        num_last: int,
        num_next_per_last: int,
        *,
        num_common: int = 10,
        num_common_per_last: int = 0,
        num_unique: int = 10,
        p_min: float = 0.1,
        p_max: float = 1.0,
    ) -> SequenceClasses:
        """Synthetic generator of docs/models/scan_snap.md §5.1 (the authors' code): layout, weights and M = Lc + Q + K.

        Common tokens weigh 1, the Nd distinct tokens of each class weigh linspace(p_min, p_max, Nd); class
        n = m R + i has query m; tgt(n) = Lc + Q + n.
        """
        Q = check_int("num_last", num_last, min_value=1)
        R = check_int("num_next_per_last", num_next_per_last, min_value=1)
        Nc = check_int("num_common", num_common, min_value=0)
        Ncl = check_int("num_common_per_last", num_common_per_last, min_value=0)
        Nd = check_int("num_unique", num_unique, min_value=0)
        p_min = check_positive("p_min", p_min)
        p_max = check_positive("p_max", p_max)
        K = Q * R
        Lc = Nc + Ncl * Q + Nd * K
        if Lc == 0:
            raise ValueError("num_common + num_common_per_last + num_unique must give Lc >= 1 contextual token")
        check_allocation(  # W, P = W / row sums, and the frozen copy of P: three (K, Lc) float64 arrays
            "num_last, num_next_per_last, num_common, num_common_per_last and num_unique",
            (K, Lc),
            itemsize=3 * 8,
            what="the class table P (K classes x Lc contextual tokens, three copies)",
        )
        W = np.zeros((K, Lc))
        W[:, :Nc] = 1.0
        for n in range(K):
            m = n // R
            W[n, Nc + Ncl * m : Nc + Ncl * (m + 1)] = 1.0
            W[n, Nc + Ncl * Q + Nd * n : Nc + Ncl * Q + Nd * (n + 1)] = np.linspace(p_min, p_max, Nd)
        P = W / W.sum(axis=1, keepdims=True)
        return cls(M=Lc + Q + K, P=P, tgt=Lc + Q + np.arange(K), psi=np.arange(K) // R, Q=Q, name=f"syn({Q},{R})")

    @classmethod
    def syn_small(cls) -> SequenceClasses:
        """Syn-Small of docs/models/scan_snap.md §5.2 = syn(2, 1): M = 34, K = 2, Q = 2, Lc = 30 (deterministic data
        law).
        """
        return cls.syn(2, 1)

    @classmethod
    def syn_medium(cls, num_last: int = 1) -> SequenceClasses:
        """Syn-Medium of docs/models/scan_snap.md §5.3 = syn(num_last, 2), num_last in {1, 3, 5, 10} in Fig. 6."""
        return cls.syn(num_last, 2)


@dataclass(frozen=True, kw_only=True)
class ScanSnapTask:
    """The task: sequence classes plus learning rates eta_Y, eta_Z (docs/models/scan_snap.md §1.6, §4.1); time unit
    steps (docs/models/scan_snap.md §0.2).

    Parameters
    ----------
    eta_Y : float or array > 0
    eta_Z : float or array > 0
    """

    classes: SequenceClasses
    eta_Y: Annotated[float, _V.Range(array=True, gt=0)]
    eta_Z: Annotated[float, _V.Range(array=True, gt=0)]

    def __post_init__(self):
        if not isinstance(self.classes, SequenceClasses):
            raise ValueError(f"classes must be a SequenceClasses; got {type(self.classes).__name__}")
        object.__setattr__(self, "eta_Y", check_positive("eta_Y", self.eta_Y))
        object.__setattr__(self, "eta_Z", check_positive("eta_Z", self.eta_Z))

    @property
    def nu(self) -> float:
        """nu = eta_Y / eta_Z (docs/models/scan_snap.md §0.4; Fig. 9 caption corrected, E7)."""
        return self.eta_Y / self.eta_Z

    @staticmethod
    def time_of_step(step):
        """t = step: the ODEs carry the learning rates, time is in optimizer steps (docs/models/scan_snap.md §0.2)."""
        return np.asarray(step, dtype=np.float64)

    @staticmethod
    def step_of_time(t):
        """Inverse of ``time_of_step`` (docs/models/scan_snap.md §0.2)."""
        return np.asarray(t, dtype=np.float64)

    def to_dict(self) -> dict:
        """JSON-ready description (provenance; docs/models/scan_snap.md §4.1 configuration)."""
        return {"classes": self.classes.to_dict(), "eta_Y": self.eta_Y, "eta_Z": self.eta_Z}


def _require_uniform(classes: SequenceClasses):
    if not classes.uniform_prior:
        raise ValueError(
            "pi must be uniform (pi_n = 1/K) for gamma, h(t/K) and the Theorem 1-4 forms "
            "(docs/models/scan_snap.md §4.1)"
        )


# ---------------------------------------------------------------------------------------------------------------
# Kernel parameter rows and data (private)
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """Column layout of the stored decoder: mult[j] outputs per column, tcol[n] the target column
    (docs/models/scan_snap.md §4.2).
    """

    lumped: bool
    mult: np.ndarray
    tcol: np.ndarray
    labels: tuple = field(default=())


def _layout(classes: SequenceClasses, lumped: bool) -> _Layout:
    K, M = classes.K, classes.M
    if lumped:
        ncol = K + (1 if M > K else 0)
        mult = np.ones(ncol)
        if M > K:
            mult[K] = M - K
        labels = tuple(f"t{n}" for n in range(K)) + (("rest",) if M > K else ())
        return _Layout(True, mult, np.arange(K), labels)
    return _Layout(False, np.ones(M), classes.tgt.copy(), tuple(str(j) for j in range(M)))


def _params(task: ScanSnapTask | SequenceClasses, *, eta_Y=1.0, eta_Z=1.0, mu=0.0, q_mode=0.0):
    """The kernels' parameter row [eta_Y, eta_Z, mu, q_mode, M] (the task's rates for a ScanSnapTask)."""
    classes = task.classes if isinstance(task, ScanSnapTask) else task
    if isinstance(task, ScanSnapTask):
        eta_Y, eta_Z = task.eta_Y, task.eta_Z
    return np.array([eta_Y, eta_Z, mu, q_mode, classes.M], dtype=np.float64)


def _kernel_args(task: ScanSnapTask | SequenceClasses, lay: _Layout) -> tuple:
    """The kernels' data (``dynamics``' ``args``): the class structure and the decoder's column layout, in the order
    of _scan_snap_kernels' A_* indices (docs/models/scan_snap.md §4.1-§4.2).
    """
    classes = task.classes if isinstance(task, ScanSnapTask) else task
    logP = np.log(np.where(classes.P > 0, classes.P, 1.0))  # 0 where P = 0 (the kernels test P > 0 first)
    rows, tokens = np.nonzero(classes.P > 0)  # the supports, row by row with increasing tokens
    sup = np.searchsorted(rows, np.arange(classes.K + 1))
    ints = (np.array([classes.Lc, len(lay.mult), classes.K, classes.Q]), classes.psi, lay.tcol, sup, tokens)
    dims, psi, tcol, sup, tok = (np.ascontiguousarray(a, dtype=np.int64) for a in ints)
    P, logP, pi, mult = (np.ascontiguousarray(a, dtype=np.float64) for a in (classes.P, logP, classes.pi, lay.mult))
    return dims, P, logP, pi, psi, tcol, mult, sup, tok


def _rate_batch(task: ScanSnapTask, n_init: int, **rates):
    """Per-trajectory rates (docs/models/scan_snap.md §4.1 task numbers) broadcast with an initial-state batch of length
    n_init.

    ``rates`` maps a name (``eta_Y``, ``eta_Z``, ``momentum``) to None (the task's value, or the given default for
    momentum), a scalar, or a 1-D array. Returns (n, {name: (n,) float64}) with n the common batch length: every
    array, and the init batch, has length 1 or n.
    """
    vals, n = {}, n_init
    for name, v in rates.items():
        if v is None:
            v = getattr(task, name)
        a = np.atleast_1d(check_finite_array(name, v, ndim=(0, 1)))
        if name == "momentum":
            if np.any(a < 0) or np.any(a >= 1):
                raise ValueError(f"momentum must lie in [0, 1); got {v}")
        elif np.any(a <= 0):
            raise ValueError(f"{name} must be > 0; got {v}")
        vals[name] = a
        if len(a) != 1:
            if n not in (1, len(a)):
                raise ValueError(
                    f"{name} has length {len(a)}, but the batch (initial states or another rate) has "
                    f"length {n}; lengths must be 1 or equal"
                )
            n = len(a)
    return n, {k: np.broadcast_to(a, (n,)).astype(np.float64) for k, a in vals.items()}


def _batched_params(task: ScanSnapTask, lay: _Layout, y0, *, eta_Y=None, eta_Z=None, momentum=None, q_mode=0.0):
    """(y0 tiled to n, params (n, n_params) or (n_params,)) for rates given as scalars or per-trajectory arrays."""
    rates = {"eta_Y": eta_Y, "eta_Z": eta_Z}
    if momentum is not None:
        rates["momentum"] = momentum
    n, r = _rate_batch(task, len(y0), **rates)
    mu = r.get("momentum", np.zeros(n))
    rows = np.array(
        [_params(task.classes, eta_Y=r["eta_Y"][i], eta_Z=r["eta_Z"][i], mu=mu[i], q_mode=q_mode) for i in range(n)]
    )
    if np.all(rows == rows[0]):
        rows = rows[0]
    if len(y0) != n:
        y0 = np.repeat(y0, n, axis=0)
    attrs = {k: float(a[0]) if np.all(a == a[0]) else a for k, a in r.items()}  # scalar when uniform
    return y0, rows, attrs


def _batch(name, arr, shape):
    """Return arr as (n, *shape) float64 (a single array gets n = 1)."""
    a = check_finite_array(name, arr, ndim=(len(shape), len(shape) + 1))
    if a.ndim == len(shape):
        a = a[None]
    if a.shape[1:] != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} or (n,)+{tuple(shape)}; got {a.shape}")
    return a


def _initial_state(classes: SequenceClasses, lay: _Layout, Y0, Z0):
    """Pack (Y0, Z0) into flow states (n, Lc*Ncol + Q*Lc); Y0 is the full (Lc, M) decoder
    (docs/models/scan_snap.md §4.1).
    """
    Lc, M, Q = classes.Lc, classes.M, classes.Q
    Yb = np.zeros((1, Lc, M)) if Y0 is None else _batch("Y0", Y0, (Lc, M))
    Zb = np.zeros((1, Q, Lc)) if Z0 is None else _batch("Z0", Z0, (Q, Lc))
    n = max(len(Yb), len(Zb))
    if len(Yb) not in (1, n) or len(Zb) not in (1, n):
        raise ValueError(f"Y0 and Z0 batches must have equal length or length 1; got {len(Yb)} and {len(Zb)}")
    Yb = np.broadcast_to(Yb, (n, Lc, M))
    Zb = np.broadcast_to(Zb, (n, Q, Lc))
    if lay.lumped:
        rest = np.setdiff1d(np.arange(M), classes.tgt)
        if rest.size and not np.all(Yb[:, :, rest] == Yb[:, :, rest[:1]]):
            raise ValueError(
                "lumped=True needs all non-target columns of Y0 equal (docs/models/scan_snap.md §4.2); "
                "pass lumped=False"
            )

        cols = np.concatenate([classes.tgt, rest[:1]])
        Yc = Yb[:, :, cols]
    else:
        Yc = Yb
    return np.concatenate([Yc.reshape(n, -1), Zb.reshape(n, -1)], axis=1)


def _unpack(classes: SequenceClasses, lay: _Layout, X):
    """Split states (..., n_state) into Y (..., Lc, Ncol) and Z (..., Q, Lc)."""
    Lc, Q, ncol = classes.Lc, classes.Q, len(lay.mult)
    nY = Lc * ncol
    return X[..., :nY].reshape(X.shape[:-1] + (Lc, ncol)), X[..., nY : nY + Q * Lc].reshape(X.shape[:-1] + (Q, Lc))


# ---------------------------------------------------------------------------------------------------------------
# Diagnostics of docs/models/scan_snap.md §4.6 (vectorised numpy; shared by simulators and empirical probes)
# ---------------------------------------------------------------------------------------------------------------


def _attention_logits(classes: SequenceClasses, Z):
    Z = np.asarray(Z, dtype=np.float64)
    if Z.shape[-2:] != (classes.Q, classes.Lc):
        raise ValueError(f"Z must have shape (..., Q={classes.Q}, Lc={classes.Lc}); got {Z.shape}")
    with np.errstate(divide="ignore"):
        logP = np.log(classes.P)
    return logP + Z[..., classes.psi, :]  # (..., K, Lc)


def attention_maps(classes: SequenceClasses, Z: Annotated[Any, _MATRICES]) -> np.ndarray:
    """Attention maps c_{l|n} = P(l|n) e^{z_{psi(n) l}} / sum_l' (...) (docs/models/scan_snap.md §2.1, Eq. 5;
    docs/models/scan_snap.md §4.6).

    Parameters
    ----------
    classes : SequenceClasses
    Z : (..., Q, Lc) float64
        Attention logits z_{ml}.

    Returns
    -------
    (..., K, Lc) float64
    """
    return scipy.special.softmax(_attention_logits(classes, Z), axis=-1)


def unit_attention(classes: SequenceClasses, Z: Annotated[Any, _MATRICES]) -> np.ndarray:
    """f_n = c~_n / ||c~_n|| (docs/models/scan_snap.md §2.1, Lemma 2), shape (..., K, Lc)."""
    c = attention_maps(classes, Z)
    return c / np.linalg.norm(c, axis=-1, keepdims=True)


def distinct_entropy(classes: SequenceClasses, Z: Annotated[Any, _MATRICES]) -> np.ndarray:
    """Distinct-token entropy H_n = -sum_{l in G_DT(n)} p_l ln p_l, p = c restricted and renormalised
    (docs/models/scan_snap.md §4.6).

    Returns (..., K); NaN for a class without distinct tokens (H_n undefined there).
    """
    return _distinct_entropy_of(classes, attention_maps(classes, Z))


def _distinct_entropy_of(classes: SequenceClasses, c) -> np.ndarray:
    """distinct_entropy from the attention maps c (..., K, Lc)."""
    H = np.full(c.shape[:-1], np.nan)
    for n in range(classes.K):
        dt = classes.distinct_tokens(n)
        if dt.size == 0:
            continue
        pl = c[..., n, dt]
        pl = pl / pl.sum(axis=-1, keepdims=True)
        H[..., n] = -np.sum(scipy.special.xlogy(pl, pl), axis=-1)
    return H


def _decoder_cols(classes, Y, lumped):
    lay = _layout(classes, lumped)
    Y = np.asarray(Y, dtype=np.float64)
    if Y.shape[-2:] != (classes.Lc, len(lay.mult)):
        raise ValueError(
            f"Y must have shape (..., Lc={classes.Lc}, {len(lay.mult)}) for lumped={lumped}; got {Y.shape}"
        )
    return lay, Y


def decoder_stats(
    classes: SequenceClasses, Y: Annotated[Any, _MATRICES], Z: Annotated[Any, _MATRICES], *, lumped: bool = False
) -> dict:
    """Decoder diagnostics of docs/models/scan_snap.md §4.6 (lumped form docs/models/scan_snap.md §4.2): alpha_tgt,
    gamma_hat, loss per class.

    gamma_hat_n = ((M-1)/M) w_n^T err_n with w_n = Y^T f_n, err_n = e_tgt(n) - softmax(w_n) over all M outputs.

    Parameters
    ----------
    Y : (..., Lc, M) float64, or (..., Lc, K+1) lumped columns [tgt(0..K-1), rest] when ``lumped``.
    Z : (..., Q, Lc) float64

    Returns
    -------
    dict with 'alpha_tgt', 'gamma_hat', 'loss', each (..., K).
    """
    lay, Y = _decoder_cols(classes, Y, lumped)
    return _decoder_stats_of(classes, lay, Y, unit_attention(classes, Z))


def _decoder_stats_of(classes: SequenceClasses, lay: _Layout, Y, f) -> dict:
    """decoder_stats from the decoder columns Y (..., Lc, Ncol) of layout ``lay`` and the unit attention f."""
    w = np.einsum("...lj,...nl->...nj", Y, f)  # (..., K, Ncol)
    logN = scipy.special.logsumexp(w + np.log(lay.mult), axis=-1, keepdims=True)
    alpha = np.exp(w - logN)
    err = -alpha
    idx = np.arange(classes.K)
    err[..., idx, lay.tcol] += 1.0
    wt_err = np.sum(lay.mult * w * err, axis=-1)
    log_alpha_t = w[..., idx, lay.tcol] - logN[..., 0]
    M = classes.M
    return {"alpha_tgt": np.exp(log_alpha_t), "gamma_hat": (M - 1.0) / M * wt_err, "loss": -log_alpha_t}


def population_gradient(
    task: ScanSnapTask | SequenceClasses,
    Y: Annotated[Any, _MATRICES],
    Z: Annotated[Any, _MATRICES],
    *,
    lumped: bool = False,
):
    """Population ascent directions grad_Y (Lc, Ncol), grad_Z (Q, Lc) of docs/models/scan_snap.md §4.2-§4.3 (Lemma 1 at
    T -> inf).

    These are the right-hand sides of docs/models/scan_snap.md §4.2 without learning rates: grad_Y = sum_n pi_n f_n
    err_n^T, grad_{Z,m} = sum_{psi(n)=m} pi_n f_n * ((I - f_n f_n^T) Y err_n).
    """
    classes = task.classes if isinstance(task, ScanSnapTask) else task
    lay, Yc = _decoder_cols(classes, Y, lumped)
    Zc = check_finite_array("Z", Z, shape=(classes.Q, classes.Lc))
    y = np.concatenate([np.ascontiguousarray(Yc, dtype=np.float64).ravel(), Zc.ravel()])
    out = np.empty_like(y)
    _k.ascent(y, _kernel_args(classes, lay), out)
    return _unpack(classes, lay, out)


def token_drive(
    task: ScanSnapTask, Y: Annotated[Any, _MATRICES], Z: Annotated[Any, _MATRICES], *, lumped: bool = False
) -> np.ndarray:
    """Per-token drive D_{nl} = (dz_{ml}/dt) / f_{nl}^2 of distinct tokens (docs/models/scan_snap.md §4.6, §3.3; exact
    ODE 4.2).

    Y (Lc, Ncol) and Z (Q, Lc) one state. Returns (K, Lc), NaN where l is not a distinct token of class n.
    """
    _, gZ = population_gradient(task, Y, Z, lumped=lumped)
    f = unit_attention(task.classes, Z)
    D = np.full((task.classes.K, task.classes.Lc), np.nan)
    for n in range(task.classes.K):
        dt = task.classes.distinct_tokens(n)
        D[n, dt] = task.eta_Z * gZ[task.classes.psi[n], dt] / f[n, dt] ** 2
    return D


def lemma1_gradient(
    Y: Annotated[Any, _MATRICES],
    Z: Annotated[Any, _MATRICES],
    context: Annotated[Any, _V.Array(ndim=1, dtype="int")],
    query: int,
    target: int,
):
    """Exact per-sequence ascent directions of J = logit_tgt - logsumexp (docs/models/scan_snap.md §1.5, Lemma 1), full
    M x M model.

    Parameters
    ----------
    Y, Z : (M, M) float64
        Decoder and attention matrices indexed by vocabulary ids (docs/models/scan_snap.md §1.4).
    context : (T-1,) int
        Contextual token ids x_1..x_{T-1}.
    query, target : int
        Query token id x_T and label x_{T+1}.

    Returns
    -------
    dY, dZ : (M, M) float64
        dY = f (e_tgt - alpha)^T and dZ = e_query [f * ((I - f f^T) g)]^T, g = Y (e_tgt - alpha), f = v/||v||,
        v = X^T b (finite T, exact).
    """
    Y = check_finite_array("Y", Y, ndim=2)
    M = Y.shape[0]
    Z = check_finite_array("Z", Z, shape=(M, M))
    ctx = np.asarray(context, dtype=np.int64)
    b = scipy.special.softmax(Z[query, ctx])
    v = np.bincount(ctx, weights=b, minlength=M)
    f = v / np.linalg.norm(v)
    alpha = scipy.special.softmax(Y.T @ f)
    err = -alpha
    err[target] += 1.0
    g = Y @ err
    dY = np.outer(f, err)
    dZ = np.zeros((M, M))
    dZ[query] = f * (g - f * (f @ g))
    return dY, dZ


def random_init(classes: SequenceClasses, rng: Annotated[Any, _V.seed_check] = None):
    """Random initialisation of docs/models/scan_snap.md §5.3: full Y, then Z, i.i.d. U(+-1/sqrt(M)) from one generator
    (docs/models/scan_snap.md §4.1).

    Returns Y0 = Yfull[0:Lc, :] (Lc, M) and Z0 = Zfull[Lc:Lc+Q, 0:Lc] (Q, Lc). Needs the generator layout
    (M >= Lc + Q); ``rng`` is an int seed or Generator (reference draw d uses ``numpy.random.default_rng(d)``,
    docs/models/scan_snap.md §7).
    """
    from dynamics.random import as_generator

    Lc, Q, M = classes.Lc, classes.Q, classes.M
    if M < Lc + Q:
        raise ValueError(f"random_init needs the generator layout M >= Lc + Q = {Lc + Q}; got M = {M}")
    g = as_generator(rng)
    s = 1.0 / np.sqrt(M)
    Yfull = g.uniform(-s, s, size=(M, M))
    Zfull = g.uniform(-s, s, size=(M, M))
    return Yfull[:Lc, :].copy(), Zfull[Lc : Lc + Q, :Lc].copy()


# ---------------------------------------------------------------------------------------------------------------
# Simulators (docs/models/scan_snap.md §4.2-§4.4)
# ---------------------------------------------------------------------------------------------------------------


def _diagnostic_vars(classes, lay, Y, Z):
    """Derived variables (name -> (dims, array)) on saved states Y (n, t, Lc, Ncol), Z (n, t, Q, Lc)."""
    c = attention_maps(classes, Z)  # once for the three diagnostics (each public function recomputes it)
    out = {"c": (("class", "token"), c)}
    H = _distinct_entropy_of(classes, c)
    out["H"] = (("class",), H)
    with np.errstate(invalid="ignore"):
        out["H_mean"] = ((), np.nanmean(H, axis=-1) if np.any(np.isfinite(H)) else np.full(H.shape[:-1], np.nan))
    if Y is not None:
        f = c / np.linalg.norm(c, axis=-1, keepdims=True)  # unit_attention
        for k, v in _decoder_stats_of(classes, lay, _decoder_cols(classes, Y, lay.lumped)[1], f).items():
            out[k] = (("class",), v)
    return out


def _finish(traj, classes, lay, *, has_Y=True):
    """Compact Trajectory: ONE state variable ``z`` (trajectory, time, query_token, token) holding the logits z_{ml};
    ``Y`` (token, column) and the docs/models/scan_snap.md §4.6 diagnostics as multi-dimensional variables (class,
    token). Every dim has a coordinate: ``query_token`` m, ``class`` n and ``token`` l are the 0-based ids of
    docs/models/scan_snap.md §0.1, ``column`` the output labels of :func:`_layout`. Provenance attributes are the
    engine's.
    """
    from dynamics import Trajectory

    X = traj.states()  # the engine ran with the whole state as one array variable (names="state")
    Lc, Q = classes.Lc, classes.Q
    nY = Lc * len(lay.mult) if has_Y else 0
    base = ("trajectory", "time")
    Z = X[..., nY : nY + Q * Lc].reshape(X.shape[:-1] + (Q, Lc))  # row-major z_{ml} at m*Lc + l (kernel layout)
    Y = X[..., :nY].reshape(X.shape[:-1] + (Lc, len(lay.mult))) if has_Y else None
    data = {"z": (base + ("query_token", "token"), Z)}
    for name, (dims, arr) in _diagnostic_vars(classes, lay, Y, Z).items():
        data[name] = (base + dims, arr)
    for name, var in traj.data_vars.items():  # the engine's per-trajectory diagnostics (final_step_norm, ...)
        if var.dims == ("trajectory",):
            data[name] = (("trajectory",), var.values)
    coords = {c: traj.coords[c] for c in ("time", "step", "trajectory")}
    coords["query_token"] = ("query_token", np.arange(Q))
    coords["class"] = ("class", np.arange(classes.K))
    coords["token"] = ("token", np.arange(Lc))
    if has_Y:
        data["Y"] = (base + ("token", "column"), Y)
        coords["column"] = ("column", list(lay.labels))
    _refuse_non_finite(data, traj)
    attrs = {
        **{k: v for k, v in traj.attrs.items() if k not in ("state_names", "state_layout")},
        "state_names": "z",
        "state_layout": "array",
    }
    return Trajectory(data, coords=coords, attrs=attrs)


def _refuse_non_finite(data, traj) -> None:
    """Raise the engine's DivergenceError at the first save point where a variable computed from the finite saved
    states becomes NaN or infinite (huge logits overflow the softmax or the loss there), never a silently NaN result.
    Entries that are NaN from the first save on are NaN by definition (e.g. an entropy over an empty token set).
    """
    from dynamics import DivergenceError

    first = None  # (save index, trajectory, variable)
    for name, (dims, arr) in data.items():
        if dims[:2] != ("trajectory", "time") or np.isfinite(arr).all():
            continue
        became = ~np.isfinite(arr) & np.isfinite(arr[:, :1])  # finite at the first save, not at this one
        bad = became.reshape(arr.shape[0], arr.shape[1], -1).any(axis=2)  # (trajectory, time)
        if not bad.any():
            continue
        j = int(np.argmax(bad.any(axis=0)))
        if first is None or j < first[0]:
            first = (j, int(np.argmax(bad[:, j])), name)
    if first is None:
        return
    j, i, name = first
    step, time = int(traj.coords["step"].values[j]), float(traj.coords["time"].values[j])
    raise DivergenceError(
        f"scan_snap diverged: trajectory {i}, step {step} (time {time:.6g}), variable {name!r} became non-finite "
        "although the state is finite (the logits overflow there; lower the learning rates or the momentum)",
        trajectory=i,
        variable=name,
        step=step,
        time=time,
    )


def _default_solver():
    from dynamics import Dopri5

    #  rtol 1e-10 / atol 1e-12: the reference settings of docs/models/scan_snap.md §7 for ODE values to 1e-6
    # absolute.
    return Dopri5(rtol=1e-10, atol=1e-12)


def flow(
    task: ScanSnapTask,
    t_span: Annotated[Any, _V.Array(shape=(2,))],
    *,
    Y0: Annotated[Any, _MATRICES] = None,
    Z0: Annotated[Any, _MATRICES] = None,
    saveat: Annotated[Any, _V.Instance(_SaveAt)] = None,
    lumped: bool = True,
    solver=None,
    progress: bool = False,
    eta_Y: Annotated[Any, _V.Range(array=True, gt=0)] = None,
    eta_Z: Annotated[Any, _V.Range(array=True, gt=0)] = None,
):
    """Integrate the exact reduced ODE of docs/models/scan_snap.md §4.2 (POPULATION convention), lumped or not.

    Implements docs/models/scan_snap.md §4.2 (exact reduced ODE, lumping of the M - K non-target outputs), with the
    diagnostics of docs/models/scan_snap.md §4.6 evaluated at the save points.

    Parameters
    ----------
    task : ScanSnapTask
    t_span : (t0, t1)
        Time in optimizer steps (docs/models/scan_snap.md §0.2).
    Y0 : (Lc, M) or (n, Lc, M) float64, optional
        Initial decoder rows (default zero). ``lumped=True`` requires equal non-target columns.
    Z0 : (Q, Lc) or (n, Q, Lc) float64, optional
        Initial attention logits (default zero).
    saveat : dynamics.SaveAt, optional
    lumped : bool
        Keep one column for the M - K non-target outputs (exact when they start equal; makes M = 1e4 cheap).
    solver : dynamics solver, optional
        Default ``Dopri5(rtol=1e-10, atol=1e-12)``.
    eta_Y, eta_Z : float or (n,) float, > 0, optional
        Learning rates per trajectory, overriding the task's (docs/models/scan_snap.md §4.1: they enter the vector field
        only as numbers). Arrays broadcast with the Y0/Z0 batch (each of length 1 or n): one call integrates a grid of
        learning rates, identical to one call per configuration.

    Returns
    -------
    Trajectory with the state variable ``z`` (trajectory, time, query_token, token): the logits z_{ml} of the Z rows,
    coordinates ``query_token`` = m and ``token`` = l; ``Y`` (token, column), columns labelled by output
    index, or ``t{n}`` (target of class n) and ``rest`` when lumped; diagnostics ``c`` (class, token), ``H``
    (class), ``H_mean``, ``alpha_tgt``, ``gamma_hat``, ``loss`` (class); the engine's convergence diagnostics
    ``final_step_norm``, ``converged`` (< 1e-8) and ``step_norm_trend`` (``dynamics.convergence``). Raises
    ``dynamics.DivergenceError`` on a non-finite state.

    The flow never warns about convergence, because it never converges: the cross-entropy has no minimiser at
    finite (Y, Z), and the logits grow without bound by design (like log t once the attention snaps,
    docs/models/scan_snap.md §3) while their rate decays; a gradient flow cannot cycle, and its blow-up raises.
    """
    from dynamics import integrate

    classes = task.classes
    lay = _layout(classes, lumped)
    y0, params, rates = _batched_params(task, lay, _initial_state(classes, lay, Y0, Z0), eta_Y=eta_Y, eta_Z=eta_Z)
    # names="state": one array variable inside the engine (thousands of components); _finish shapes it into z
    traj = integrate(
        _k.exact_rhs,
        y0,
        tuple(t_span),
        params=params,
        args=_kernel_args(classes, lay),
        solver=solver or _default_solver(),
        saveat=saveat,
        names="state",
        progress=progress,
        attrs={
            "model": "scan_snap",
            "spec": task.to_dict(),
            "source": "closedform",
            "equation": "docs/models/scan_snap.md 4.2",
            "time_unit": "step",
            "lumped": int(lumped),
            **rates,
        },
    )
    return _finish(traj, classes, lay)


def map(
    task: ScanSnapTask,
    n_steps: Annotated[int, _V.Range(integer=True, ge=1)],
    *,
    momentum: Annotated[Any, _V.Range(array=True, ge=0, lt=1)] = 0.0,
    Y0: Annotated[Any, _MATRICES] = None,
    Z0: Annotated[Any, _MATRICES] = None,
    saveat: Annotated[Any, _V.Instance(_SaveAt)] = None,
    lumped: bool = True,
    progress: bool = False,
    eta_Y: Annotated[Any, _V.Range(array=True, gt=0)] = None,
    eta_Z: Annotated[Any, _V.Range(array=True, gt=0)] = None,
    warn_unconverged: bool = True,
):
    """Iterate the discrete population map of docs/models/scan_snap.md §4.3 (plain GD or heavy-ball momentum), step for
    step.

    Implements docs/models/scan_snap.md §4.3: one evaluation of (grad_Y, grad_Z) at (Y_s, Z_s) per step; PyTorch SGD
    momentum (buf_1 = grad_0, buf_{s+1} = mu buf_s + grad_s, dampening 0). Overlay for SGD runs with the same mu
    (docs/models/scan_snap.md §0.3). Step s is the state after s updates; ``time`` = step.

    Parameters
    ----------
    task : ScanSnapTask
    n_steps : int >= 1
    momentum : float or (n,) float in [0, 1)
    Y0, Z0 : as in :func:`flow` (batches of n initial states allowed)
    eta_Y, eta_Z : float or (n,) float, > 0, optional
        Learning rates per trajectory, overriding the task's; ``momentum`` and the rates broadcast with the Y0/Z0
        batch (each of length 1 or n), so a grid of optimiser settings runs in one call.
    warn_unconverged : bool, default True
        Warn (``dynamics.UnconvergedWarning``) when a trajectory's step norm (max-norm of one update, momentum
        buffers included) did not decrease over the last half of the run: oscillation or chaos from too large a
        learning rate or momentum. A run that is merely unconverged does not warn: none converges (see
        :func:`flow`), the steps only shrink.

    Returns
    -------
    Trajectory with the variables of :func:`flow` (the momentum buffers are not stored).
    """
    from dynamics import iterate

    n_steps = check_int("n_steps", n_steps, min_value=1)
    classes = task.classes
    lay = _layout(classes, lumped)
    y0, params, rates = _batched_params(
        task, lay, _initial_state(classes, lay, Y0, Z0), eta_Y=eta_Y, eta_Z=eta_Z, momentum=momentum
    )
    x0 = np.concatenate([y0, np.zeros_like(y0)], axis=1)
    traj = iterate(
        _k.map_step,
        x0,
        n_steps,
        params=params,
        args=_kernel_args(classes, lay),
        saveat=saveat,
        names="state",
        progress=progress,
        attrs={
            "model": "scan_snap",
            "spec": task.to_dict(),
            "source": "closedform",
            "equation": "docs/models/scan_snap.md 4.3",
            "time_unit": "step",
            "lumped": int(lumped),
            **rates,
        },
    )
    return check_run(_finish(traj, classes, lay), warn_unconverged, what="scan_snap.map", fixed_points=False)


def composite_flow(
    task: ScanSnapTask,
    t_span: Annotated[Any, _V.Array(shape=(2,))],
    *,
    Z0: Annotated[Any, _MATRICES] = None,
    saveat: Annotated[Any, _V.Instance(_SaveAt)] = None,
    leading_order: bool = False,
    solver=None,
    progress: bool = False,
    eta_Y: Annotated[Any, _V.Range(array=True, gt=0)] = None,
    eta_Z: Annotated[Any, _V.Range(array=True, gt=0)] = None,
):
    """Integrate the composite Theorem-1 ODE in Z only (docs/models/scan_snap.md §4.4), exact-q or leading-order form.

    Implements docs/models/scan_snap.md §4.4: g_n = gamma(t) F (F^T F)^{-1} q^(n) (Theorem 1, Eq. 9) in the POPULATION
    attention ODE of Lemma 4 (docs/models/scan_snap.md §3.1). Requires uniform pi. ``leading_order=True`` uses q^(n) =
    e_n. ``eta_Y``, ``eta_Z`` (float or (n,) arrays) override the task's rates per trajectory, broadcast with the Z0
    batch. Never warns about convergence, as :func:`flow`.

    Parameters
    ----------
    eta_Y : float or array > 0
    eta_Z : float or array > 0

    Returns
    -------
    Trajectory with ``z`` (query_token, token) and the diagnostics ``c`` (class, token), ``H`` (class), ``H_mean``.
    """
    from dynamics import integrate

    classes = task.classes
    _require_uniform(classes)
    lay = _layout(classes, True)
    Zb = np.zeros((1, classes.Q, classes.Lc)) if Z0 is None else _batch("Z0", Z0, (classes.Q, classes.Lc))
    z0, params, rates = _batched_params(
        task, lay, Zb.reshape(len(Zb), -1), eta_Y=eta_Y, eta_Z=eta_Z, q_mode=1.0 if leading_order else 0.0
    )
    traj = integrate(
        _k.composite_rhs,
        z0,
        tuple(t_span),
        params=params,
        args=_kernel_args(classes, lay),
        solver=solver or _default_solver(),
        saveat=saveat,
        names="state",
        progress=progress,
        attrs={
            "model": "scan_snap",
            "spec": task.to_dict(),
            "source": "closedform",
            "equation": "docs/models/scan_snap.md 4.4",
            "time_unit": "step",
            "leading_order": int(leading_order),
            **rates,
        },
    )
    return _finish(traj, classes, lay, has_Y=False)


# ---------------------------------------------------------------------------------------------------------------
# Decoder closed forms (docs/models/scan_snap.md §2.3-§2.4)
# ---------------------------------------------------------------------------------------------------------------


def _check_M(M):
    return check_int("M", M, min_value=2)


def decoder_h(
    tau: Annotated[Any, _TIMES],
    *,
    M: Annotated[int, _V.Range(integer=True, ge=1)],
    eta_Y: Annotated[float, _V.Range(array=True, gt=0)],
) -> np.ndarray:
    """Explicit h(tau) of Lemma 6 (docs/models/scan_snap.md §2.3): M h = ln(M-1) + ln wright_omega((M eta_Y tau +
    1)/(M-1) - ln(M-1)).

    Solves dh/dtau = eta_Y / ((M-1) + exp(M h)), h(0) = 0 (implicit form exp(M h) + (M-1) M h = M eta_Y tau + 1).

    Parameters
    ----------
    tau : float or array >= 0
    M : int >= 1
    eta_Y : float or array > 0
    """
    M = _check_M(M)
    eta_Y = check_positive("eta_Y", eta_Y)
    tau = np.asarray(tau, dtype=np.float64)
    if np.any(tau < 0):
        raise ValueError("tau must be >= 0")
    return np.vectorize(lambda x: _k.decoder_h(x, float(M), eta_Y), otypes=[np.float64])(tau)


def decoder_h_star(
    s: Annotated[Any, _REALS],
    *,
    M: Annotated[int, _V.Range(integer=True, ge=1)],
    eta_Y: Annotated[float, _V.Range(array=True, gt=0)],
) -> np.ndarray:
    """Discrete h*(s) of Lemma 5 (docs/models/scan_snap.md §2.3): h*(s) = h*(s-1) + eta_Y / ((M-1) + exp(M h*(s-1))),
    h*(0) = 0.

    Parameters
    ----------
    M : int >= 1
    eta_Y : float or array > 0
    """
    M = _check_M(M)
    eta_Y = check_positive("eta_Y", eta_Y)
    s = np.asarray(s)
    if not np.issubdtype(s.dtype, np.integer) or np.any(s < 0):
        raise ValueError("s must be integers >= 0 (update counts)")
    smax = int(s.max()) if s.size else 0
    hs = np.zeros(smax + 1)
    for i in range(1, smax + 1):
        hs[i] = hs[i - 1] + eta_Y / ((M - 1) + np.exp(M * hs[i - 1]))
    return hs[s]


def speed_control(
    t: Annotated[Any, _TIMES],
    *,
    M: Annotated[int, _V.Range(integer=True, ge=1)],
    K: Annotated[int, _V.Range(integer=True, ge=1)],
    eta_Y: Annotated[float, _V.Range(array=True, gt=0)],
    eta_Z: Annotated[float, _V.Range(array=True, gt=0)],
):
    """Speed-control coefficient gamma(t) and Gamma(t) = eta_Z int_0^t gamma (docs/models/scan_snap.md §2.4, Theorem
    1(b)).

    gamma(t) = (M-1)^2 h(t/K) / ((M-1) + exp(M h(t/K))), Gamma(t) = (eta_Z/eta_Y) K (M-1)^2 h(t/K)^2 / 2.
    Assumes uniformly sampled classes (pi_n = 1/K).

    Parameters
    ----------
    t : float or array >= 0
    M : int >= 1
    K : int >= 1
    eta_Y : float or array > 0
    eta_Z : float or array > 0
    """
    K = check_int("K", K, min_value=1)
    eta_Z = check_positive("eta_Z", eta_Z)
    t = np.asarray(t, dtype=np.float64)
    h = decoder_h(t / K, M=M, eta_Y=eta_Y)
    gamma = (M - 1.0) ** 2 * h / ((M - 1.0) + np.exp(M * h))
    Gamma = (eta_Z / eta_Y) * K * (M - 1.0) ** 2 * h**2 / 2.0
    return gamma, Gamma


@dataclass(frozen=True)
class TransitionTimes:
    """Decoder time scales of docs/models/scan_snap.md §2.4 (Lemma 9 and the derived landmarks)."""

    t0p: float  # K ln M / eta_Y (end of the growing regime)
    t0: float  # 2 K ln M / eta_Y (the paper's transition time, omega1 dropped)
    t0_omega1: float  # 2 (1 + omega1) K ln M / eta_Y
    omega1: float  # M h = (1 + omega1) ln M is the larger root of exp(M h) = (M-1) M h
    x_pk: float  # M h at the peak of gamma: exp(x)(x - 1) = M - 1
    t_peak: float  # time of the peak of gamma
    t_half: float  # time when alpha_{n,tgt(n)} = 1/2 (M h = ln(M-1))


def transition_times(
    *,
    M: Annotated[int, _V.Range(integer=True, ge=1)],
    K: Annotated[int, _V.Range(integer=True, ge=1)],
    eta_Y: Annotated[float, _V.Range(array=True, gt=0)],
) -> TransitionTimes:
    """t0p, t0, t0_omega1, t_peak, t_half of docs/models/scan_snap.md §2.4 (Lemma 9 and derived landmarks) for uniform
    classes.

    Parameters
    ----------
    M : int >= 1
    K : int >= 1
    eta_Y : float or array > 0
    """
    M = _check_M(M)
    K = check_int("K", K, min_value=1)
    eta_Y = check_positive("eta_Y", eta_Y)
    lnM = np.log(M)
    if M > 2:
        x_big = float(-scipy.special.lambertw(-1.0 / (M - 1.0), -1).real)  # larger root of e^x = (M-1) x
        omega1 = x_big / lnM - 1.0
    else:
        omega1 = float("nan")  # e^x = x has no real root (M = 2)
    # exp(x)(x-1) = M-1 has one root with x > 1 (left side increasing there from 0)
    x_pk = float(scipy.optimize.brentq(lambda x: np.exp(x) * (x - 1.0) - (M - 1.0), 1.0, 2.0 + lnM, xtol=1e-15))
    t_peak = K * (np.exp(x_pk) + (M - 1.0) * x_pk - 1.0) / (M * eta_Y)
    t_half = K * ((M - 1.0) * (1.0 + np.log(M - 1.0)) - 1.0) / (M * eta_Y)
    return TransitionTimes(
        t0p=K * lnM / eta_Y,
        t0=2 * K * lnM / eta_Y,
        t0_omega1=2 * (1 + omega1) * K * lnM / eta_Y,
        omega1=omega1,
        x_pk=x_pk,
        t_peak=float(t_peak),
        t_half=float(t_half),
    )


def transition_time(task: ScanSnapTask) -> TransitionTimes:
    """Transition-time predictions of docs/models/scan_snap.md §2.4 / Theorem 4(a) for a task (requires uniform pi)."""
    _require_uniform(task.classes)
    return transition_times(M=task.classes.M, K=task.classes.K, eta_Y=task.eta_Y)


def measure_transition(
    task: ScanSnapTask,
    n: Annotated[int, _INDEX] = 0,
    *,
    t_max: Annotated[float | None, _V.Range(gt=0)] = None,
    n_grid: Annotated[int, _V.Range(integer=True, ge=3)] = 3001,
    lumped: bool = True,
) -> dict:
    """Measured transition landmarks of the exact ODE (docs/models/scan_snap.md §4.2, §6 item 6,
    docs/models/scan_snap.md §7 P8).

    Returns the argmax of gamma_hat_n and the time where alpha_{n,tgt(n)} = 1/2.

    The ODE is saved on ``n_grid`` equispaced points of [0, t_max] (default t_max: 3 t_half of the theory); the peak is
    then refined by bounded Brent maximisation and the crossing by Brent root finding, both on re-integrations from the
    nearest saved state (the dense solution). Returns dict t_peak, gamma_hat_max, t_half.

    Parameters
    ----------
    n : int >= 0
    t_max : float > 0
    n_grid : int >= 3
    """
    from dynamics import SaveAt, integrate

    _require_uniform(task.classes)
    classes = task.classes
    n = check_int("n", n, min_value=0, max_value=classes.K - 1)
    tt = transition_time(task)
    t_max = 3.0 * tt.t_half if t_max is None else check_positive("t_max", t_max)
    lay = _layout(classes, lumped)
    p = _params(task)
    data = _kernel_args(classes, lay)
    ts = np.linspace(0.0, t_max, check_int("n_grid", n_grid, min_value=3))
    solver = _default_solver()
    X = integrate(
        _k.exact_rhs,
        _initial_state(classes, lay, None, None),
        (0.0, float(ts[-1])),
        params=p,
        args=data,
        solver=solver,
        saveat=SaveAt(ts=ts),
        names="state",
        trend=False,
    ).states()[0]

    def stats_of(Xs):
        Y, Z = _unpack(classes, lay, Xs)
        return decoder_stats(classes, Y, Z, lumped=lumped)

    def at(t):
        i = int(np.searchsorted(ts, t, side="right") - 1)
        if t == ts[i]:
            return X[i]
        return integrate(
            _k.exact_rhs,
            X[i],
            (float(ts[i]), float(t)),
            params=p,
            args=data,
            solver=solver,
            saveat=SaveAt(final=True),
            names="state",
            trend=False,
        ).states()[0, -1]

    s = stats_of(X)
    g = s["gamma_hat"][:, n]
    i = int(np.argmax(g))
    if i == 0 or i == len(ts) - 1:
        raise ValueError(f"gamma_hat has no interior maximum on [0, t_max={t_max}]; increase t_max")
    res = scipy.optimize.minimize_scalar(
        lambda t: -stats_of(at(t))["gamma_hat"][n],
        bounds=(ts[i - 1], ts[i + 1]),
        method="bounded",
        options={"xatol": 1e-9},
    )
    a = s["alpha_tgt"][:, n] - 0.5
    j = np.flatnonzero((a[:-1] < 0) & (a[1:] >= 0))
    if j.size == 0:
        raise ValueError(f"alpha_tgt never reaches 1/2 on [0, t_max={t_max}]; increase t_max")
    j = int(j[0])
    t_half = scipy.optimize.brentq(lambda t: stats_of(at(t))["alpha_tgt"][n] - 0.5, ts[j], ts[j + 1], xtol=1e-12)
    return {"t_peak": float(res.x), "gamma_hat_max": float(-res.fun), "t_half": float(t_half)}


# ---------------------------------------------------------------------------------------------------------------
# Theorems 2-4 (docs/models/scan_snap.md §3)
# ---------------------------------------------------------------------------------------------------------------
_MAX_LOG_GROWTH = np.log(np.finfo(np.float64).max) / 2.0  # 354.89: the largest z - z0 with finite exp(2 (z - z0))


def growth_factor(z: Annotated[Any, _REALS], z0: Annotated[Any, _REALS]) -> np.ndarray:
    """Growth factor chi_l(t) = exp(2 (z_{ml}(t) - z_{ml}(0))) (docs/models/scan_snap.md §3.3, Theorem 3).

    Raises ``ValueError`` where z - z0 > 354.89 (chi would overflow float64) instead of returning inf.
    """
    dz = np.asarray(z, dtype=np.float64) - np.asarray(z0, dtype=np.float64)
    if np.any(dz > _MAX_LOG_GROWTH):
        raise ValueError(
            f"z - z0 must be <= {_MAX_LOG_GROWTH:.2f} (chi = exp(2 (z - z0)) overflows float64 beyond); "
            f"got max(z - z0) = {np.max(dz)!r} (in growth_factor)"
        )
    return np.exp(2.0 * dz)


def relative_gain(
    classes: SequenceClasses,
    Z: Annotated[Any, _MATRICES],
    n: Annotated[int, _INDEX],
    l: Annotated[int, _INDEX],  # noqa: E741 (paper's l)
    l2: Annotated[int, _INDEX],
) -> np.ndarray:
    """Relative gain r_{l/l'|n} = c~_{l|n}^2 / c~_{l'|n}^2 - 1 (docs/models/scan_snap.md §3.3, Theorem 3); Z (..., Q,
    Lc).

    Parameters
    ----------
    n : int >= 0
    l : int >= 0
    l2 : int >= 0
    """
    lg = _attention_logits(classes, Z)
    return np.exp(2.0 * (lg[..., n, l] - lg[..., n, l2])) - 1.0


def _need_distinct(classes, n, what):
    check_int("n", n, min_value=0, max_value=classes.K - 1)
    dt = classes.distinct_tokens(n)
    if dt.size == 0:
        raise ValueError(
            f"class n={n} has no distinct token, which {what} needs (docs/models/scan_snap.md §1.2, G_DT(n) empty)"
        )
    return dt


def dominant_token(classes: SequenceClasses, n: Annotated[int, _INDEX], Z0: Annotated[Any, _MATRICES] = None) -> int:
    """l0: the distinct token of class n with the largest c~(0) (docs/models/scan_snap.md §3.3, Theorem 3).

    Parameters
    ----------
    n : int >= 0
    """
    dt = _need_distinct(classes, n, "Theorem 3 (dominant token l0)")
    Z0 = np.zeros((classes.Q, classes.Lc)) if Z0 is None else Z0
    lg = _attention_logits(classes, Z0)[n, dt]
    return int(dt[np.argmax(lg)])


def saturation_dz(
    classes: SequenceClasses, n: Annotated[int, _INDEX], Z0: Annotated[Any, _MATRICES] = None
) -> np.ndarray:
    """Saturation values of Delta z_l = -1/2 ln(1 - (c~_l(0)/c~_{l0}(0))^2) for l in G_DT(n)
    (docs/models/scan_snap.md §3.3, Theorem 3).

    Returns (Lc,): +inf at l0, NaN for tokens outside G_DT(n).

    Parameters
    ----------
    n : int >= 0
    """
    return theorem3_dz(classes, n, np.inf, Z0)


def theorem3_dz(
    classes: SequenceClasses,
    n: Annotated[int, _INDEX],
    dz_l0: Annotated[Any, _V.Range(array=True, ge=0, finite=False)],
    Z0: Annotated[Any, _MATRICES] = None,
) -> np.ndarray:
    """Theorem 3 integrated form (docs/models/scan_snap.md §3.3).

    Delta z_l = -1/2 ln[1 - (c~_l(0)/c~_{l0}(0))^2 (1 - exp(-2 Delta z_l0))] for l in G_DT(n).

    ``dz_l0`` scalar or array (...); returns (..., Lc), NaN outside G_DT(n).

    Parameters
    ----------
    n : int >= 0
    dz_l0 : float or array >= 0
    """
    dt = _need_distinct(classes, n, "Theorem 3")
    Z0 = np.zeros((classes.Q, classes.Lc)) if Z0 is None else Z0
    l0 = dominant_token(classes, n, Z0)
    lg = _attention_logits(classes, Z0)[n]
    ratio2 = np.exp(2.0 * (lg[dt] - lg[l0]))
    d0 = np.asarray(dz_l0, dtype=np.float64)[..., None]
    out = np.full(d0.shape[:-1] + (classes.Lc,), np.nan)
    with np.errstate(divide="ignore"):
        out[..., dt] = -0.5 * np.log1p(-ratio2 * (-np.expm1(-2.0 * d0)))
    out[..., l0] = d0[..., 0]
    return out


def theorem3_bounds(f_l0_0: Annotated[Any, _V.Range(array=True, ge=0, le=1)], B: Annotated[Any, _REALS]):
    """Bounds of Eq. (12) (docs/models/scan_snap.md §3.3, Theorem 3): exp(2 f_{nl0}(0)^2 B) <= chi_{l0}(t) <=
    exp(2 B), with f_{nl0}(0) in [0, 1] (an entry of a unit-norm vector).

    Parameters
    ----------
    f_l0_0 : float or array in [0, 1]
    """
    f = np.asarray(f_l0_0, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    return np.exp(2.0 * f**2 * B), np.exp(2.0 * B)


def theorem4_constants(classes: SequenceClasses, Z0: Annotated[Any, _MATRICES] = None) -> dict:
    """Theorem 4 setting constants (docs/models/scan_snap.md §3.4): l_common, P_c, rho0, C0_paper = rho0^4/K,
    C0_cons = ||c~_n(0)||^4 / ((K-1) P_c^4).

    Requires one common token shared by all classes with equal P_c, one query for all classes, K >= 2 and uniform pi.
    ||c~_n(0)|| uses the unscaled c~ = P e^{z(0)} with z(0) of the common token taken as 0 reference.
    """
    _require_uniform(classes)
    K = classes.K
    if K < 2:
        raise ValueError(f"Theorem 4 needs K >= 2 classes (C0_cons has K-1 in the denominator); got K={K}")
    ct = classes.common_tokens()
    if ct.size != 1 or classes.classes_of(int(ct[0])).size != K:
        raise ValueError(f"Theorem 4 needs exactly one common token shared by all K classes; got G_CT={ct.tolist()}")
    if np.any(classes.psi != classes.psi[0]):
        raise ValueError("Theorem 4 needs one query shared by all classes (psi constant)")
    lc = int(ct[0])
    Pc = classes.P[:, lc]
    if not np.allclose(Pc, Pc[0], rtol=1e-12, atol=0):
        raise ValueError(f"Theorem 4 needs the same P_c = P(l_c|n) in every class; got {Pc}")
    Z0 = (
        np.zeros((classes.Q, classes.Lc)) if Z0 is None else check_finite_array("Z0", Z0, shape=(classes.Q, classes.Lc))
    )
    for n in range(K):
        _need_distinct(classes, n, "Theorem 4")
    ctil = classes.P * np.exp(Z0[classes.psi] - Z0[classes.psi, lc][:, None])  # c~ relative to e^{z_c(0)}
    norms = np.linalg.norm(ctil, axis=1)
    if not np.allclose(norms, norms[0], rtol=1e-12, atol=0):
        raise ValueError("Theorem 4 needs ||c~_n(0)|| equal across classes (roughly constant normalisations)")
    P_c = float(Pc[0])
    rho0 = float(norms[0] / P_c)
    return {
        "l_common": lc,
        "P_c": P_c,
        "rho0": rho0,
        "C0_paper": rho0**4 / K,
        "C0_cons": float(norms[0] ** 4 / ((K - 1) * P_c**4)),
    }


def drive_B(
    t: Annotated[Any, _TIMES],
    *,
    M: Annotated[int, _V.Range(integer=True, ge=1)],
    K: Annotated[int, _V.Range(integer=True, ge=1)],
    eta_Y: Annotated[float, _V.Range(array=True, gt=0)],
    eta_Z: Annotated[float, _V.Range(array=True, gt=0)],
    C0: float,
    form: str = "cons",
) -> np.ndarray:
    """Theorem 4 drive integral B_n(t) (docs/models/scan_snap.md §3.4) in one of three forms.

    form='printed': 1/4 ln(C0 + 4 Gamma) (Eq. 14/129 as printed; Figs. 3, 9 with C0 = 1);
    form='paper':   1/4 ln(1 + 4 Gamma/C0) (exact integral of Eq. 13, errata E2);
    form='cons':    1/(4K) ln(1 + 4 Gamma/C0) with C0 = C0_cons (consistent POPULATION form, errata E3).

    Parameters
    ----------
    t : float or array >= 0
    M : int >= 1
    K : int >= 1
    eta_Y : float or array > 0
    eta_Z : float or array > 0
    """
    check_choice("form", form, ("printed", "paper", "cons"))
    C0 = check_positive("C0", C0)
    _, Gamma = speed_control(t, M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z)
    if form == "printed":
        return 0.25 * np.log(C0 + 4.0 * Gamma)
    if form == "paper":
        return 0.25 * np.log1p(4.0 * Gamma / C0)
    return np.log1p(4.0 * Gamma / C0) / (4.0 * K)


def common_token_z(t: Annotated[Any, _TIMES], task: ScanSnapTask) -> np.ndarray:
    """Common-token logit z_c(t) = -1/4 ln(1 + 4 Gamma(t)/C0_cons) (docs/models/scan_snap.md §3.4, Theorem 4, consistent
    form).

    Parameters
    ----------
    t : float or array >= 0
    """
    c = theorem4_constants(task.classes)
    _, Gamma = speed_control(t, M=task.classes.M, K=task.classes.K, eta_Y=task.eta_Y, eta_Z=task.eta_Z)
    return -0.25 * np.log1p(4.0 * Gamma / c["C0_cons"])


def theorem2_signs(classes: SequenceClasses) -> np.ndarray:
    """Predicted sign of dz_{ml}/dt for t > 0 from zero init (docs/models/scan_snap.md §3.2, Theorem 2 and Corollary 2).

    Returns (Q, Lc) float: +1 for distinct tokens of classes of query m (Theorem 2a); -1 for the common token when
    |G_CT| = 1 and a class of m has a distinct token (Theorem 2b), or for every common token in the symmetric case
    of Corollary 2; 0 where l is in no class of query m (z_{ml} never moves); NaN where the theorems are silent.
    """
    Q, Lc = classes.Q, classes.Lc
    S = np.full((Q, Lc), np.nan)
    ct = classes.common_tokens()
    cnt = (classes.P > 0).sum(axis=0)
    sym = _corollary2(classes)
    for m in range(Q):
        ns = np.flatnonzero(classes.psi == m)
        supp = (classes.P[ns] > 0).any(axis=0) if ns.size else np.zeros(Lc, bool)
        S[m, ~supp] = 0.0
        S[m, supp & (cnt == 1)] = 1.0
        has_dt = any(classes.distinct_tokens(int(n)).size for n in ns)
        if has_dt and (ct.size == 1 or sym):
            S[m, ct[supp[ct]]] = -1.0
    return S


def _corollary2(classes: SequenceClasses) -> bool:
    """Symmetric case of Corollary 2 (docs/models/scan_snap.md §3.2): one query, P-preserving bijection of distinct
    tokens, equal pc.
    """
    if np.any(classes.psi != classes.psi[0]):
        return False
    ct = classes.common_tokens()
    if ct.size and not np.allclose(classes.P[:, ct], classes.P[:1, ct], rtol=1e-12, atol=0):
        return False
    ref = np.sort(classes.P[0, classes.distinct_tokens(0)])
    return all(
        np.allclose(np.sort(classes.P[n, classes.distinct_tokens(n)]), ref, rtol=1e-12, atol=0)
        if classes.distinct_tokens(n).size == ref.size
        else False
        for n in range(classes.K)
    )


def theorem_predictions(task: ScanSnapTask) -> dict[str, float]:
    """The paper's named time-scale predictions for ``task`` (uniform class probabilities), from Lemma 9.

    Keys (each a float, in optimizer steps, :data:`TIME_UNIT`):

    * ``t0``: 2 K ln M / eta_Y, the transition time of the paper (Theorem 4(a), omega1 dropped),
      docs/models/scan_snap.md §2.4.
    * ``t0_omega1``: 2 (1 + omega1) K ln M / eta_Y, the same with the omega1 correction kept
      (docs/models/scan_snap.md §2.4).
    * ``t0p``: K ln M / eta_Y, the end of the decoder's growing regime (Lemma 9, docs/models/scan_snap.md §2.4).
    * ``omega1``: M h = (1 + omega1) ln M is the larger root of exp(M h) = (M - 1) M h (Lemma 9,
      docs/models/scan_snap.md §2.4).
    * ``t_peak``: time of the peak of the speed gamma(t) of the attention drive (derived,
      docs/models/scan_snap.md §2.4).
    * ``t_half``: time at which the target-token probability alpha_{n, tgt(n)} reaches 1/2 (derived,
      docs/models/scan_snap.md §2.4).

    The growth factors chi_l(t) = exp(2 (z_l(t) - z_l(0))) of Theorem 3 (docs/models/scan_snap.md §3.3) depend on a run:
    see :func:`growth_factor` and :func:`theorem3_bounds`.
    """
    if not isinstance(task, ScanSnapTask):
        raise TypeError(f"task must be a ScanSnapTask; got {type(task).__name__}")
    tt = transition_time(task)
    return {
        "t0": float(tt.t0),
        "t0_omega1": float(tt.t0_omega1),
        "t0p": float(tt.t0p),
        "omega1": float(tt.omega1),
        "t_peak": float(tt.t_peak),
        "t_half": float(tt.t_half),
    }


# ----------------------------------------------------------------------------------------------------------------
# argument checks of every public function and class (dynamics.validation): each parameter's rule is declared at its
# definition (a class annotation, or a rule in its ``Annotated`` metadata; the shared ones below), then each
# function's own checks

from dynamics import SaveAt as _SaveAt  # noqa: E402
from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)

_REALS = _V.Range(array=True)
_TIMES = _V.Range(array=True, ge=0)
_MATRICES = _V.Array(ndim=tuple(range(2, 33)))  # (..., rows, columns)
_INDEX = _V.Range(integer=True, ge=0)
_V.validate_module(globals())
