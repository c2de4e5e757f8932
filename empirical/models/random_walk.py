"""Torch one-layer attention that learns a random walk on a circle (Shi, Cao, NeurIPS 2025; spec Study C).

Implements the empirical side of ``docs/models/token_selection.md`` Study C: the model f = V X softmax(X~^T W x~_N)
(docs/models/token_selection.md §C.3) with X~ = [X; Phi] and the blank query x~_N = [0; phi_N]
(docs/models/token_selection.md §C.2), the loss -log(e_y^T f + eps) averaged over the walks
(docs/models/token_selection.md §C.4, no extra factor), and three parametrisations of the key-query matrix:

* ``merged`` with ``init="zero"``: V = 0, W = 0 (docs/models/token_selection.md §C.4, the paper's Figs. 4-5); GD then
  stays on the reduced family (a, c) of docs/models/token_selection.md §C.5 and equals
  :func:`closedform.random_walk.map` on the same walks;
* ``merged`` with ``init="random"``: V, W i.i.d. N(0, s^2), s = 0.01, V drawn first
  (docs/models/token_selection.md §C.8, Fig. 6), usually with ``normalize_tokens=True`` (every column of X~, the blank
  query included, divided by its norm inside the scores only: the documented default for a detail of Fig. 6 the talk
  does not give);
* ``factorised``: W = W_K^T W_Q with V, W_K, W_Q i.i.d. N(0, s^2), drawn in that order
  (docs/models/token_selection.md §C.8 "our extension"; docs/models/token_selection.md §0: never W_K = W_Q = 0, a
  stationary point).

The QA tasks of docs/models/token_selection.md §C.8 ("beyond random walks": majority fruit, preferred fruit; 19-word
vocabulary) run the same model on word tokens, optionally with an extra ReLU layer: :class:`QAAttention`,
:func:`qa_questions`, :func:`qa_sample`, :func:`config("qa_gd") <config>`.

Training is the shared trainer :func:`empirical.train.train`: full-batch GD at step eta on fixed training walks
(:func:`config("gd") <config>`, the paper's protocol of docs/models/token_selection.md §C.8), or online SGD on fresh
walks (:func:`config("sgd") <config>`). Fixed walks come from the closed form's sampler
(:func:`closedform.random_walk.sample_walks`, recipe docs/models/token_selection.md §G.C), so a torch run and the
reduced dynamics see the same walks. Everything model-specific that exists in :mod:`closedform.random_walk` is reused:
the positional code (:func:`~closedform.random_walk.positional_matrix`), the probes of
docs/models/token_selection.md §C.5.1 (:func:`~closedform.random_walk.probe_W`), accuracy, attention statistics,
direction errors and the KL of Fig. 6 (:func:`~closedform.random_walk.accuracy`, ``attention_stats``,
``direction_errors``, ``output_direction_error``, ``kl_to_truth``, ``empirical_transitions``). Logged variables carry
the closed form's names (``V_b_a``, ``a_k``, ``c_i`` of :func:`~closedform.random_walk.state_names`, ``off``, ``loss``,
``se_loss``, ``dist_V_sqrtChat`` and :data:`~closedform.random_walk.DIAGNOSTIC_NAMES`), so a torch run and ``map`` align
with ``xarray``.

Symbol table (docs/models/token_selection.md §C.0; shapes carry the trainer's leading seed axis S)
--------------------------------------------------------------------------------------------------
Sections (§) in the last column are those of docs/models/token_selection.md.

=============  ============  ==================================================  ==================  =======
code           paper         meaning                                             shape               defined
=============  ============  ==================================================  ==================  =======
states         s_1..s_N      walk (code values 0..K-1, stored as floats); last   (S, n, N)           §C.1
                             column = label y
V              V             value matrix, row = label, column = state           (S, K, K)           §C.3
W              W             merged key-query matrix (tokens first)              (S, K+M, K+M)       §C.3
W_K, W_Q       W_K, W_Q      factors of the factorised model, W = W_K^T W_Q      (S, K+M, K+M)       §C.8
init_scale     0.01          std of the entries of a random start                float               §C.8
S_att, f       S, f          attention over the N positions; output V X S        (S,n,N); (S,n,K)    §C.3
a, c           a, c          probes W12 phi_N / rho, phi_j^T W22 phi_N / rho^2   (S, K); (S, N)      §C.5.1
off            off           ||W - W_red||_F / ||W||_F                           (S,)                §C.5.1
=============  ============  ==================================================  ==================  =======

Time axis: the GD step t (``step``); ``time`` = eta t (docs/models/token_selection.md §0), as in
:func:`closedform.random_walk.map`. Use ``lr = task.eta`` (:func:`config("gd") <config>` does) so that both axes agree.

Notes
-----
* With fixed walks the model's ``sample`` returns the training walks, seed by seed in the order of ``config.seeds``,
  for both the training set and the evaluation batch: ``loss`` and ``se_loss`` are training-sample values
  (docs/models/token_selection.md §0), while the diagnostics (accuracy, attention, KL) are measured on the fixed test
  walks (``test=``), as in the paper (Sec. C.8). Online, the evaluation batch (fresh walks of the ``eval`` stream)
  serves for both.
* The trainer refuses non-finite logged values, but a direction of V = 0 (or f = 0) is undefined (the closed form
  returns NaN). Here the normalised zero matrix is taken as 0: at V = 0 the direction errors are 1 and the cosine
  is 0 (:data:`ZERO_DIRECTION_CONVENTION`). Compare with the closed form only where V != 0 (t >= 1 from zero).
* A random start can make e_y^T f + eps <= 0 for some walk: the loss is then NaN and the trainer raises
  ``dynamics.DivergenceError`` naming the seed and step (the closed form raises too, docs/models/token_selection.md §C.4
  has no clamp).
"""

from __future__ import annotations

from typing import Annotated, Any
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from closedform import random_walk as cf
from dynamics.saveat import SaveAt
from dynamics.validation import check_choice, check_int, check_positive
from empirical.models import dispatch_config
from empirical.train import TrainConfig, per_seed

__all__ = [
    "build",
    "EVAL_NAMES",
    "INITS",
    "PARAMETRISATIONS",
    "QA_LOSSES",
    "QA_TASKS",
    "QA_VOCAB",
    "ZERO_DIRECTION_CONVENTION",
    "QAAttention",
    "QAModelSpec",
    "RandomWalkAttention",
    "RandomWalkModelSpec",
    "attention_profile",
    "effective_W",
    "forward",
    "config",
    "probe_names",
    "qa_geometry",
    "qa_questions",
    "qa_sample",
    "qa_tokens",
    "to_weights",
    "walk_samples",
]

REFERENCE = cf.REFERENCE
PARAMETRISATIONS = ("merged", "factorised")
INITS = ("zero", "random")

#: Evaluation metrics logged by :meth:`RandomWalkAttention.evaluate` (besides the optional profile / token averages).
EVAL_NAMES: tuple[str, ...] = ("loss", "se_loss") + cf.DIAGNOSTIC_NAMES + ("kl",)

#: Values logged where the closed form returns NaN because V = 0 or f = 0 (module Notes).
ZERO_DIRECTION_CONVENTION = {
    "dist_V_Pi": 1.0,
    "dist_V_sqrtPi": 1.0,
    "cos_V_Pi": 0.0,
    "dist_f_Pi": 1.0,
    "dist_V_sqrtChat": 1.0,
}


def _digest(samples: Sequence[cf.WalkSample] | None) -> str | None:
    if samples is None:
        return None
    h = hashlib.sha256()
    for s in samples:
        h.update(s.states.tobytes())
        h.update(np.ascontiguousarray(s.weights).tobytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class RandomWalkModelSpec:
    """What defines a torch run of Study C (stored with the run; resume refuses another one).

    Parameters
    ----------
    task : closedform.random_walk.RandomWalkTask
        K, N, p, M, rho, eta, eps (docs/models/token_selection.md §C.1-§C.4).
    parametrisation : {"merged", "factorised"}
        Trainable (V, W), or (V, W_K, W_Q) with W = W_K^T W_Q (docs/models/token_selection.md §C.8, our extension).
    init : {"zero", "random"}
        V = W = 0 (docs/models/token_selection.md §C.4; merged only) or i.i.d. N(0, init_scale^2) entries, V first
        (docs/models/token_selection.md §C.8, Fig. 6). The factorised model must start at random (W_K = W_Q = 0 is
        stationary, docs/models/token_selection.md §0).
    init_scale : float > 0
        Std of a random start (documented default 0.01); must stay 0.01 for ``init="zero"``.
    normalize_tokens : bool
        Divide every column of X~ (blank query included) by its norm inside the scores only
        (docs/models/token_selection.md §C.8 default for Fig. 6); the reduced family of
        docs/models/token_selection.md §C.5 then no longer applies.
    log_profile : bool
        Also log the mean attention on each position over the diagnostic walks, ``attn_pos_0 .. attn_pos_{N-1}``
        (Fig. 4(c), docs/models/token_selection.md §C.8).
    log_walks : int >= 0
        Also log the token average X S of the first ``log_walks`` diagnostic walks, ``XS_{w}_{k}`` (Fig. 6 appendix
        snapshots, docs/models/token_selection.md §C.8).
    data_digest, test_digest : str or None
        SHA-256 prefixes of the fixed training / test walks (set by :class:`RandomWalkAttention`).
    """

    task: cf.RandomWalkTask
    parametrisation: str = "merged"
    init: str = "zero"
    init_scale: Annotated[float, _V.Range(gt=0)] = 0.01
    normalize_tokens: bool = False
    log_profile: bool = False
    log_walks: Annotated[int, _V.Range(integer=True, ge=0)] = 0
    data_digest: str | None = None
    test_digest: str | None = None

    def __post_init__(self):
        if not isinstance(self.task, cf.RandomWalkTask):
            raise ValueError(  # noqa: TRY004 - bad input is a ValueError naming the parameter (house style)
                f"task must be a closedform.random_walk.RandomWalkTask; got {type(self.task).__name__}"
            )
        check_choice("parametrisation", self.parametrisation, PARAMETRISATIONS)
        check_choice("init", self.init, INITS)
        object.__setattr__(self, "init_scale", check_positive("init_scale", self.init_scale))
        object.__setattr__(self, "normalize_tokens", bool(self.normalize_tokens))
        object.__setattr__(self, "log_profile", bool(self.log_profile))
        object.__setattr__(self, "log_walks", check_int("log_walks", self.log_walks, min_value=0))
        if self.parametrisation == "factorised" and self.init == "zero":
            raise ValueError(
                "init must be 'random' for parametrisation='factorised': W_K = W_Q = 0 is a stationary "
                "point that cannot learn (docs/models/token_selection.md §0)"
            )
        if self.init == "zero" and self.init_scale != 0.01:
            raise ValueError(
                f"init_scale applies only to init='random'; got init_scale={self.init_scale} with init='zero'"
            )


# ----------------------------------------------------------------------------------------------------------------------
# The forward pass (docs/models/token_selection.md §C.3), batched over seeds and walks
# ----------------------------------------------------------------------------------------------------------------------


def effective_W(params: Annotated[Mapping[str, torch.Tensor], _tensors(("W",), ("W_K", "W_Q"))]) -> torch.Tensor:
    """The merged key-query matrix W (S, K+M, K+M): ``params["W"]`` or W_K^T W_Q (factorised,
    docs/models/token_selection.md §C.8).
    """
    if "W" in params:
        return params["W"]
    return params["W_K"].transpose(-1, -2) @ params["W_Q"]


def _query_vector(params: Mapping[str, torch.Tensor], xq: torch.Tensor) -> torch.Tensor:
    """q = W x~_N (S, K+M); for the factorised model W_K^T (W_Q x~_N), never forming W
    (docs/models/token_selection.md §C.3).
    """
    if "W" in params:
        return params["W"] @ xq
    return (params["W_K"].transpose(-1, -2) @ (params["W_Q"] @ xq)[..., None])[..., 0]


def forward(
    task: cf.RandomWalkTask,
    params: Annotated[Mapping[str, torch.Tensor], _tensors(("V", "W"), ("V", "W_K", "W_Q"))],
    states: Annotated[torch.Tensor, _tensor(ndim=3, range=_V.Range(integer=True, ge=0, array=True))],
    *,
    normalize_tokens: bool = False,
    Phi: Annotated[torch.Tensor | None, _tensor(ndim=2)] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention S = softmax(X~^T W x~_N) over the N positions and output f = V X S
    (docs/models/token_selection.md §C.2-§C.3), for every seed.

    The same arithmetic as :func:`closedform.random_walk.forward` (logits of context j: q_{s_j} + phi_j^T q_pos,
    blank: phi_N^T q_pos, each times the column scale of ``normalize_tokens``); the blank contributes 0 to f.

    Parameters
    ----------
    task : closedform.random_walk.RandomWalkTask
    params : {"V": (S, K, K), "W": (S, K+M, K+M)} or {"V", "W_K", "W_Q"}
    states : (S, n, N) float or int tensor
        Walks (code values, integers in [0, K)); only the context columns 0..N-2 are read.
    normalize_tokens : bool
        Unit-norm columns of X~ inside the scores (docs/models/token_selection.md §C.8, Fig. 6 default).
    Phi : (M, N) tensor, optional
        The positional code (default :func:`closedform.random_walk.positional_matrix`, on ``states``' device).

    Returns
    -------
    S_att : (S, n, N); f : (S, n, K)

    The tensors are checked (real, finite, consistent shapes, ``states`` codes < K); the model's training step calls
    an unchecked version.
    """
    K, N = task.K, task.N
    _V.check_shapes(states=(states, f"S n {N}"), **{"params['V']": (params["V"], f"S {K} {K}")})
    if Phi is not None:
        _V.check_shapes(Phi=(Phi, f"M {N}"))
    top = int(states.max())
    if top >= K:
        raise ValueError(f"states must hold codes in [0, K) = [0, {K}); got {top}")
    return _forward(task, params, states, normalize_tokens=normalize_tokens, Phi=Phi)


def _forward(task, params, states, *, normalize_tokens=False, Phi=None):
    """:func:`forward` without its argument checks (the training step's path)."""
    V = params["V"]
    K, N = task.K, task.N
    if Phi is None:
        Phi = torch.as_tensor(cf.positional_matrix(task), dtype=V.dtype, device=V.device)
    a_ctx, a_q = cf._column_scales(task, normalize_tokens)
    xq = torch.cat([torch.zeros(K, dtype=V.dtype, device=V.device), a_q * Phi[:, N - 1]])
    q = _query_vector(params, xq)  # (S, K+M)
    q_tok, q_pos = q[:, :K], q[:, K:]
    ctx = states[..., : N - 1].long().to(V.device)  # (S, n, N-1), on the parameters' device
    pos = q_pos @ Phi[:, : N - 1]  # (S, N-1): phi_j^T q_pos
    tok = torch.gather(q_tok[:, None, :].expand(-1, ctx.shape[1], -1), 2, ctx)
    logits_ctx = a_ctx * (tok + pos[:, None, :])
    logit_blank = (a_q * (q_pos @ Phi[:, N - 1]))[:, None, None].expand(-1, ctx.shape[1], 1)
    S_att = torch.softmax(torch.cat([logits_ctx, logit_blank], dim=-1), dim=-1)
    u = torch.zeros(*ctx.shape[:2], K, dtype=V.dtype, device=V.device).scatter_add(2, ctx, S_att[..., : N - 1])
    f = torch.einsum("snk,sbk->snb", u, V)
    return S_att, f


def _token_average(task: cf.RandomWalkTask, states: torch.Tensor, S_att: torch.Tensor) -> torch.Tensor:
    """u = X S restricted to the context (S, n, K) (docs/models/token_selection.md §C.3)."""
    ctx = states[..., : task.N - 1].long().to(S_att.device)
    return torch.zeros(*ctx.shape[:2], task.K, dtype=S_att.dtype, device=S_att.device).scatter_add(
        2, ctx, S_att[..., : task.N - 1]
    )


def to_weights(
    params: Annotated[Mapping[str, torch.Tensor], _tensors(("V", "W"), ("V", "W_K", "W_Q"))],
) -> tuple[np.ndarray, np.ndarray]:
    """(V, W) as float64 numpy arrays (S, K, K), (S, K+M, K+M); W = W_K^T W_Q for the factorised model."""
    with torch.no_grad():
        V = params["V"].detach().to("cpu", torch.float64).numpy()
        W = effective_W(params).detach().to("cpu", torch.float64).numpy()
    return V, W


def probe_names(task: cf.RandomWalkTask) -> tuple[str, ...]:
    """Names of the weight probes (docs/models/token_selection.md §C.5.1): the closed form's state names V_b_a, a_k,
    c_i, then ``off``.
    """
    return tuple(cf.state_names(task)) + ("off",)


def attention_profile(
    task: cf.RandomWalkTask,
    params: Annotated[Mapping[str, torch.Tensor], _tensors(("V", "W"), ("V", "W_K", "W_Q"))],
    sample: cf.WalkSample,
    *,
    normalize_tokens: bool = False,
) -> np.ndarray:
    """Mean attention on each of the N positions over ``sample`` for every seed, (S, N) float64 (Fig. 4(c),
    docs/models/token_selection.md §C.8).

    ``params`` carry the seed axis; the same walks serve every seed.
    """
    V = params["V"]
    states = torch.as_tensor(sample.states, device=V.device).expand(V.shape[0], -1, -1)
    with torch.no_grad():
        S_att, _ = forward(task, params, states, normalize_tokens=normalize_tokens)
    w = torch.as_tensor(sample.weights, dtype=V.dtype, device=V.device)
    return torch.einsum("snj,n->sj", S_att, w).cpu().numpy()


# ----------------------------------------------------------------------------------------------------------------------
# The model (protocol of empirical.train)
# ----------------------------------------------------------------------------------------------------------------------


def _check_samples(task: cf.RandomWalkTask, samples, name: str) -> list[cf.WalkSample] | None:
    if samples is None:
        return None
    if isinstance(samples, cf.WalkSample):
        samples = [samples]
    samples = list(samples)
    if not samples or not all(isinstance(s, cf.WalkSample) for s in samples):
        raise ValueError(f"{name} must be a non-empty sequence of closedform.random_walk.WalkSample (one per seed)")
    sizes = {s.states.shape for s in samples}
    if len(sizes) != 1 or next(iter(sizes))[1] != task.N:
        raise ValueError(f"{name} walks must all have shape (n, N={task.N}) with one n; got {sorted(sizes)}")
    for s in samples:
        cf._check_sample(task, s, name)
        if np.ptp(s.weights) > 0:
            raise ValueError(
                f"{name} walks must carry equal weights (the torch loss is a plain mean over walks); "
                "an enumerated law with unequal weights is not supported"
            )
    return samples


class RandomWalkAttention:
    """One-layer attention of Study C as an :class:`empirical.train.TorchModel`
    (docs/models/token_selection.md §C.3-§C.4, §C.8).

    Parameters
    ----------
    task : closedform.random_walk.RandomWalkTask
    parametrisation : {"merged", "factorised"}
        See :class:`RandomWalkModelSpec`.
    init : {"zero", "random"}
        See :class:`RandomWalkModelSpec`.
    init_scale : float > 0
        See :class:`RandomWalkModelSpec`.
    normalize_tokens, log_profile : bool
        See :class:`RandomWalkModelSpec`.
    log_walks : int >= 0
        See :class:`RandomWalkModelSpec`.
    data : sequence of closedform.random_walk.WalkSample, optional
        Fixed training walks, one sample per seed (in the order of ``config.seeds``), all of one size, equal
        weights (e.g. :func:`walk_samples`, or :func:`closedform.random_walk.enumerate_walks` for p in {0, 1}).
        ``None``: online walks from the torch sampler (recipe of docs/models/token_selection.md §G.C with torch
        generators).
    test : sequence of closedform.random_walk.WalkSample, optional
        Fixed test walks, one per seed, for the diagnostics (fixed data only); default: the training walks.
    """

    name = "random_walk"
    time_unit = "eta*step"

    def __init__(
        self,
        task: cf.RandomWalkTask,
        *,
        parametrisation: str = "merged",
        init: str = "zero",
        init_scale: Annotated[float, _V.Range(gt=0)] = 0.01,
        normalize_tokens: bool = False,
        data: Annotated[Any, _WALK_SAMPLES] = None,
        test: Annotated[Any, _WALK_SAMPLES] = None,
        log_profile: bool = False,
        log_walks: Annotated[int, _V.Range(integer=True, ge=0)] = 0,
    ):
        if not isinstance(task, cf.RandomWalkTask):
            raise ValueError(  # noqa: TRY004 - bad input is a ValueError naming the parameter (house style)
                f"task must be a closedform.random_walk.RandomWalkTask; got {type(task).__name__}"
            )
        self.data = _check_samples(task, data, "data")
        self.test = _check_samples(task, test, "test")
        if self.test is not None:
            if self.data is None:
                raise ValueError("test applies to fixed data only (online runs measure on the evaluation batch)")
            if len(self.test) != len(self.data):
                raise ValueError(
                    f"test must hold one sample per seed like data ({len(self.data)}); got {len(self.test)}"
                )
        self.spec = RandomWalkModelSpec(
            task=task,
            parametrisation=parametrisation,
            init=init,
            init_scale=init_scale,
            normalize_tokens=normalize_tokens,
            log_profile=log_profile,
            log_walks=log_walks,
            data_digest=_digest(self.data),
            test_digest=_digest(self.test),
        )
        diag = self.test if self.test is not None else self.data
        if diag is not None and self.spec.log_walks > diag[0].n:
            raise ValueError(
                f"log_walks must be at most the number of diagnostic walks {diag[0].n}; got {self.spec.log_walks}"
            )
        self.task = task
        self._sqrt_C_hat_T = (
            None if self.data is None else [np.sqrt(cf.empirical_transitions(s, task.K).T) for s in self.data]
        )
        self._Phi: dict = {}

    # -- helpers -------------------------------------------------------------------------------------------------------

    def _positional(self, ref: torch.Tensor) -> torch.Tensor:
        key = (ref.device, ref.dtype)
        if key not in self._Phi:
            self._Phi[key] = torch.as_tensor(cf.positional_matrix(self.task), dtype=ref.dtype, device=ref.device)
        return self._Phi[key]

    def forward(self, params, states):
        """(S_att (S, n, N), f (S, n, K)) of :func:`forward` with this model's token normalisation (unchecked: a
        training step).
        """
        return _forward(
            self.task, params, states, normalize_tokens=self.spec.normalize_tokens, Phi=self._positional(params["V"])
        )

    def time_of_step(self, step):
        """Flow time eta t of GD step t (docs/models/token_selection.md §0)."""
        return self.task.time_of_step(step)

    # -- protocol ------------------------------------------------------------------------------------------------------

    def init_params(self, generators, *, device, dtype):
        """V = W = 0 (docs/models/token_selection.md §C.4), or i.i.d. N(0, s^2) entries from each seed's ``init``
        stream: V then W (merged,
        docs/models/token_selection.md §C.8 Fig. 6), or V then W_K then W_Q (factorised,
        docs/models/token_selection.md §C.8).
        """
        K, D = self.task.K, self.task.K + self.task.M
        if self.spec.init == "zero":
            S = len(generators)
            return {
                "V": torch.zeros(S, K, K, device=device, dtype=dtype),
                "W": torch.zeros(S, D, D, device=device, dtype=dtype),
            }
        s = self.spec.init_scale
        names = ("W",) if self.spec.parametrisation == "merged" else ("W_K", "W_Q")

        def draw(g):
            out = {"V": s * torch.randn(K, K, generator=g, device=device, dtype=dtype)}
            for name in names:
                out[name] = s * torch.randn(D, D, generator=g, device=device, dtype=dtype)
            return out

        return per_seed(generators, draw)

    def sample(self, generators, n, *, device, dtype):
        """``n`` walks per seed, ``{"states": (S, n, N)}`` (code values as floats; last column = label).

        Fixed data: the training walks (``n`` must equal their number). Online: per seed s_1 = randint(0, K, n),
        steps = where(rand(n, N-1) < p, +1, -1), cumulative sums mod K (docs/models/token_selection.md §G.C with torch
        generators).
        """
        n = check_int("n", n, min_value=1)
        if self.data is not None:
            if len(generators) != len(self.data):
                raise ValueError(
                    f"data holds {len(self.data)} fixed samples but the run has {len(generators)} seeds; "
                    "give one sample per seed"
                )
            if n != self.data[0].n:
                raise ValueError(
                    f"with fixed data, dataset_size and eval_size must equal the number of training "
                    f"walks {self.data[0].n}; got {n} (use config('gd'))"
                )
            states = np.stack([s.states for s in self.data])
            return {"states": torch.as_tensor(states, device=device).to(dtype)}
        K, N, p = self.task.K, self.task.N, self.task.p

        def draw(g):
            s1 = torch.randint(0, K, (n, 1), generator=g, device=device)
            steps = torch.where(torch.rand(n, N - 1, generator=g, device=device, dtype=dtype) < p, 1, -1)
            walk = torch.cat([s1, s1 + torch.cumsum(steps, dim=1)], dim=1).remainder(K)
            return {"states": walk.to(dtype)}

        return per_seed(generators, draw)

    def loss(self, params, batch, hyper=None):
        """L = mean over walks of -log(e_y^T f + eps) per seed (docs/models/token_selection.md §C.4), shape (S,)."""
        _, f = self.forward(params, batch["states"])
        y = batch["states"][..., -1].long().to(f.device)
        gbar = torch.gather(f, 2, y[..., None])[..., 0]
        return -torch.log(gbar + self.task.eps).mean(dim=-1)

    def evaluate(self, params, batch, hyper=None):
        """Loss and its SE on the evaluation batch (the training walks for fixed data), ``dist_V_sqrtChat`` (fixed
        data), and the diagnostics of docs/models/token_selection.md §C.5.1 plus ``kl`` (Fig. 6) on the test walks
        (module Notes).
        """
        states = batch["states"]
        _, f = self.forward(params, states)
        y = states[..., -1].long().to(f.device)
        ell = -torch.log(torch.gather(f, 2, y[..., None])[..., 0] + self.task.eps)
        n = ell.shape[1]
        se = ell.std(dim=1, correction=1) / math.sqrt(n) if n > 1 else torch.zeros_like(ell[:, 0])
        out = {"loss": ell.mean(dim=1), "se_loss": se}
        V = params["V"]
        S = V.shape[0]
        V_np = V.detach().to("cpu", torch.float64).numpy()
        if self._sqrt_C_hat_T is not None:
            out["dist_V_sqrtChat"] = torch.tensor(
                [_finite(cf.direction_error(V_np[s], self._sqrt_C_hat_T[s]), "dist_V_sqrtChat") for s in range(S)],
                dtype=V.dtype,
                device=V.device,
            )
        if self.test is not None:
            diag = self.test
            diag_states = torch.as_tensor(np.stack([t.states for t in diag]), device=V.device).to(V.dtype)
        elif self.data is not None:
            diag, diag_states = self.data, states
        else:
            diag = [cf.WalkSample(states[s].long().cpu().numpy()) for s in range(S)]
            diag_states = states
        S_att, f_d = self.forward(params, diag_states)
        S_np = S_att.detach().to("cpu", torch.float64).numpy()
        f_np = f_d.detach().to("cpu", torch.float64).numpy()
        rows = [self._diagnostics(V_np[s], S_np[s], f_np[s], diag[s]) for s in range(S)]
        for name in rows[0]:
            out[name] = torch.tensor([row[name] for row in rows], dtype=V.dtype, device=V.device)
        if self.spec.log_profile:
            profile = torch.einsum(
                "snj,sn->sj",
                S_att,
                torch.as_tensor(np.stack([d.weights for d in diag]), dtype=V.dtype, device=V.device),
            )
            for j in range(self.task.N):
                out[f"attn_pos_{j}"] = profile[:, j]
        if self.spec.log_walks:
            u = _token_average(self.task, diag_states, S_att)
            for w in range(self.spec.log_walks):
                for k in range(self.task.K):
                    out[f"XS_{w}_{k}"] = u[:, w, k]
        return out

    def _diagnostics(self, V, S_att, f, sample) -> dict:
        """The closed form's diagnostics (docs/models/token_selection.md §C.5.1) from one seed's attention and output,
        plus the KL of Fig. 6.
        """
        acc, acc_rb = cf.accuracy(self.task, f, sample)
        row = {"acc": acc, "acc_rb": acc_rb}
        row.update(cf.attention_stats(S_att, sample.weights))
        row.update(cf.direction_errors(V, self.task.p))
        row["dist_f_Pi"] = cf.output_direction_error(self.task, f, sample)
        row["kl"] = cf.kl_to_truth(self.task, f, sample)
        return {name: _finite(value, name) for name, value in row.items()}

    def probes(self, params):
        """Probes of docs/models/token_selection.md §C.5.1 per seed: V_b_a, a_k = (W12 phi_N)_k / rho, c_j = phi_j^T W22
        phi_N / rho^2 and off = ||W - W_red||_F / ||W||_F (0 for W = 0), W = W_K^T W_Q for the factorised model
        (:func:`probe_names`).

        The formulas of :func:`closedform.random_walk.probe_W`, evaluated in torch on the run's device (W never
        leaves it); the tests check them against ``probe_W`` to round-off.
        """
        task = self.task
        K, N, rho = task.K, task.N, task.rho
        V = params["V"]
        W = effective_W(params)
        Phi = self._positional(V)
        phi_N = Phi[:, N - 1]
        a = W[:, :K, K:] @ phi_N / rho  # (S, K)
        w22 = W[:, K:, K:] @ phi_N  # (S, M)
        c = (w22 @ Phi) / rho**2  # (S, N)
        # ||W - W_red||^2 block by block: W11, W21 are 0 on the family; W12 - a phi_N^T; W22 - (Phi c) phi_N^T.
        r12 = W[:, :K, K:] - a[:, :, None] * phi_N
        r22 = W[:, K:, K:] - (c @ Phi.T)[:, :, None] * phi_N
        resid = W[:, :, :K].square().sum(dim=(1, 2)) + r12.square().sum(dim=(1, 2)) + r22.square().sum(dim=(1, 2))
        norm2 = W.square().sum(dim=(1, 2))
        off = torch.where(norm2 > 0, torch.sqrt(resid / torch.where(norm2 > 0, norm2, 1.0)), 0.0)
        out = {f"V_{b}_{k}": V[:, b, k] for b in range(K) for k in range(K)}
        out.update({f"a_{k}": a[:, k] for k in range(K)})
        out.update({f"c_{i}": c[:, i] for i in range(N)})
        out["off"] = off
        return out


def _finite(value: float, name: str) -> float:
    """``value``, or the :data:`ZERO_DIRECTION_CONVENTION` value where the closed form returns NaN (V = 0, f = 0)."""
    if math.isnan(value) and name in ZERO_DIRECTION_CONVENTION:
        return ZERO_DIRECTION_CONVENTION[name]
    return value


# ----------------------------------------------------------------------------------------------------------------------
# Data and configurations
# ----------------------------------------------------------------------------------------------------------------------


def walk_samples(
    task: cf.RandomWalkTask,
    n_train: Annotated[int, _SIZE],
    seeds: Annotated[Any, _seeds],
    *,
    n_test: Annotated[int | None, _SIZE] = None,
) -> tuple[list[cf.WalkSample], list[cf.WalkSample] | None]:
    """Training walks and (optionally) test walks per seed by the exact recipe of docs/models/token_selection.md §G.C.

    For each seed, ``numpy.random.default_rng(seed)`` draws ``n_train`` training walks, then ``n_test`` test walks
    from the same generator (:func:`closedform.random_walk.sample_walks`), so the closed form's
    ``map(walks=n_train, rng=seed, test=n_test)`` sees the very same walks. Returns (train, test or None).

    Parameters
    ----------
    n_train : int >= 1
    n_test : int >= 1
    """
    n_train = check_int("n_train", n_train, min_value=1)
    seeds = [check_int("seed", s, min_value=0) for s in np.atleast_1d(seeds)]
    train, test = [], []
    for s in seeds:
        rng = np.random.default_rng(s)
        train.append(cf.sample_walks(task, n_train, rng))
        if n_test is not None:
            test.append(cf.sample_walks(task, check_int("n_test", n_test, min_value=1), rng))
    return train, (test if n_test is not None else None)


def _gd_config(
    model: RandomWalkAttention,
    n_steps: int,
    *,
    seeds=None,
    saveat: SaveAt | None = None,
    checkpoint_every: int = 0,
    dtype: str = "float64",
) -> TrainConfig:
    """TrainConfig of full-batch GD at step eta = ``task.eta`` on the model's fixed walks
    (docs/models/token_selection.md §C.4, §C.8).

    The evaluation batch is the training sample (docs/models/token_selection.md §0). ``seeds`` defaults to
    0..len(data)-1 (they label the runs; the walks are those given to the model).
    """
    if model.data is None:
        raise ValueError(
            "config('gd') needs a model with fixed walks (RandomWalkAttention(..., data=samples)); use "
            "config('sgd') for online training"
        )
    n = model.data[0].n
    seeds = tuple(range(len(model.data))) if seeds is None else seeds
    return TrainConfig(
        seeds=seeds,
        n_steps=n_steps,
        batch_size=n,
        dataset_size=n,
        eval_size=n,
        lr=model.task.eta,
        saveat=saveat or SaveAt(n=51),
        checkpoint_every=checkpoint_every,
        dtype=dtype,
    )


def _sgd_config(
    model: RandomWalkAttention,
    n_steps: int,
    batch_size: int,
    *,
    seeds=(0,),
    eval_size: int = 1000,
    lr: float | None = None,
    saveat: SaveAt | None = None,
    checkpoint_every: int = 0,
    refill: int = 32,
    dtype: str = "float64",
) -> TrainConfig:
    """TrainConfig of online SGD (fresh walks of docs/models/token_selection.md §C.1 every step; default step
    ``task.eta``), evaluated on a
    fixed batch of ``eval_size`` fresh walks (a test sample).
    """
    if model.data is not None:
        raise ValueError("config('sgd') needs an online model (data=None); use config('gd') for fixed walks")
    return TrainConfig(
        seeds=seeds,
        n_steps=n_steps,
        batch_size=batch_size,
        eval_size=eval_size,
        lr=model.task.eta if lr is None else lr,
        saveat=saveat or SaveAt(n=51),
        checkpoint_every=checkpoint_every,
        refill=refill,
        dtype=dtype,
    )


# ----------------------------------------------------------------------------------------------------------------------
#  Beyond random walks: the QA tasks of docs/models/token_selection.md §C.8 (same model on word tokens, optional extra
# ReLU layer)
# ----------------------------------------------------------------------------------------------------------------------

# : The 19-word vocabulary of both QA tasks in alphabetical order (docs/models/token_selection.md §C.8 [unknown;
# default]); index = token id.
QA_VOCAB: tuple[str, ...] = (
    "an",
    "appears",
    "apple",
    "based",
    "do",
    "frequently",
    "fruit",
    "i",
    "list",
    "most",
    "of",
    "on",
    "orange",
    "prefer",
    "sentence",
    "the",
    "to",
    "type",
    "which",
)
QA_TASKS = ("majority", "preference")
#: Losses of :class:`QAAttention`: the paper's -log(e_y^T f + eps) (docs/models/token_selection.md §C.4, with the clamp
#: of §C.8), and softmax cross-entropy -log softmax(f)_y, a diagnostic that also lowers the other labels' outputs.
QA_LOSSES = ("log_eps", "cross_entropy")


def qa_tokens(words: str) -> list[int]:
    """Token ids of a question: lower-case words, punctuation and quotes dropped (docs/models/token_selection.md §C.8
    [unknown; default]).
    """
    clean = "".join(ch if ch.isalnum() or ch.isspace() else " " for ch in words.lower())
    try:
        return [QA_VOCAB.index(w) for w in clean.split()]
    except ValueError as exc:
        raise ValueError(f"words must use the QA vocabulary {QA_VOCAB}; {exc}") from None


def qa_questions(task: str) -> tuple[np.ndarray, np.ndarray]:
    """Every question of a QA task with its answer (docs/models/token_selection.md §C.8): ``(tokens (n_q, n_words)
    int64, labels (n_q,))``.

    ``majority``: "Based on the list 'w1, w2, w3, w4, w5', which type of fruit appears most frequently?" for the 32
    lists w_i in {apple, orange}; answer the majority fruit (16 words). ``preference``: "Based on the sentence 'I
    prefer an apple to an orange', which type of fruit do I prefer?" and its swap; answer the preferred fruit (18
    words). Both questions of ``preference`` have the same bag of words.
    """
    check_choice("task", task, QA_TASKS)
    apple, orange = QA_VOCAB.index("apple"), QA_VOCAB.index("orange")
    rows, labels = [], []
    if task == "majority":
        for code in range(32):
            fruits = ["apple" if (code >> i) & 1 else "orange" for i in range(5)]
            rows.append(
                qa_tokens(f"Based on the list '{', '.join(fruits)}', which type of fruit appears most frequently?")
            )
            labels.append(apple if fruits.count("apple") >= 3 else orange)
    else:
        for first, second in (("apple", "orange"), ("orange", "apple")):
            rows.append(
                qa_tokens(
                    f"Based on the sentence 'I prefer an {first} to an {second}', which type of fruit do I prefer?"
                )
            )
            labels.append(QA_VOCAB.index(first))
    return np.asarray(rows, dtype=np.int64), np.asarray(labels, dtype=np.int64)


def qa_sample(task: str, n: Annotated[int, _SIZE], rng: Annotated[Any, _V.seed_check]) -> cf.WalkSample:
    """n questions drawn uniformly (with replacement) from :func:`qa_questions`, as a sample of token sequences whose
    last column is the answer (the layout of :class:`closedform.random_walk.WalkSample`; no walk structure).

    Parameters
    ----------
    n : int >= 1
    """
    n = check_int("n", n, min_value=1)
    tokens, labels = qa_questions(task)
    idx = (
        np.random.default_rng(rng).integers(0, len(labels), size=n)
        if not isinstance(rng, np.random.Generator)
        else rng.integers(0, len(labels), size=n)
    )
    return cf.WalkSample(np.concatenate([tokens[idx], labels[idx, None]], axis=1))


def qa_geometry(
    task: str,
    M: Annotated[int, _V.Range(integer=True, ge=3)] = 1000,
    eta: Annotated[float, _V.Range(gt=0)] = 0.1,
    eps: Annotated[float, _V.Range(gt=0)] = 0.1,
    rho: Annotated[float | None, _V.Range(gt=0)] = None,
) -> cf.RandomWalkTask:
    """The embedding geometry of a QA task: K = 19 tokens, N = words + 1 (blank query last), positional dimension M,
    squared positional norm rho (default M/2), step eta, offset eps (docs/models/token_selection.md §C.8 defaults: M =
    1000, eta = 0.1,
    eps = 0.1). Carried by a ``RandomWalkTask`` whose p (0.5) is not used: there is no walk.

    Parameters
    ----------
    M : int >= 3
    eta : float > 0
    eps : float > 0
    rho : float > 0
    """
    n_words = qa_questions(task)[0].shape[1]
    return cf.RandomWalkTask(K=len(QA_VOCAB), N=n_words + 1, M=M, p=0.5, eta=eta, eps=eps, rho=rho)


@dataclass(frozen=True, kw_only=True)
class QAModelSpec:
    """What defines a QA run (docs/models/token_selection.md §C.8): task, geometry, ReLU variant, init scale,
    normalisation, data digests.

    Parameters
    ----------
    m_relu : int >= 1
    init_scale : float > 0
    """

    task: str
    geometry: cf.RandomWalkTask
    relu: bool = False
    m_relu: Annotated[int, _SIZE] = 19
    init_scale: Annotated[float, _V.Range(gt=0)] = 0.01
    normalize_tokens: bool = True
    loss: str = "log_eps"
    data_digest: str | None = None
    test_digest: str | None = None

    def __post_init__(self):
        check_choice("task", self.task, QA_TASKS)
        check_choice("loss", self.loss, QA_LOSSES)
        object.__setattr__(self, "m_relu", check_int("m_relu", self.m_relu, min_value=1))
        object.__setattr__(self, "init_scale", check_positive("init_scale", self.init_scale))


class QAAttention:
    """The model of docs/models/token_selection.md §C.3 on QA token sequences (docs/models/token_selection.md §C.8
    "Beyond random walks") as a TorchModel.

    f = V X softmax(X~^T W x~_N), or with ``relu`` f = A_relu relu(V X S) (V (m_relu, K), A_relu (K, m_relu)); all
    entries i.i.d. N(0, 0.01^2) (V, then W, then A_relu), tokens normalised inside the scores
    (docs/models/token_selection.md §C.8 defaults). Loss -log(max(e_y^T f + eps, 1e-12)) (the clamp of
    docs/models/token_selection.md §C.8: f can be negative from a random start). Logged: ``loss`` on the training
    questions and ``acc`` on the test questions; probes ``norm_V`` and ``norm_W``.

    ``loss="cross_entropy"`` replaces the paper's loss by -log softmax(f)_y, a diagnostic: the paper's loss only ever
    raises e_y^T f (its gradient in f is -e_y / (e_y^T f + eps)), so nothing lowers the other labels' outputs and the
    prediction margin is left to the part of f shared by all questions; cross-entropy also pushes the wrong labels
    down (figure ``random_walk.qa``).

    Parameters
    ----------
    M : int >= 3
    eta : float > 0
    eps : float > 0
    m_relu : int >= 1
    init_scale : float > 0
    rho : float > 0
    """

    name = "random_walk_qa"
    time_unit = "eta*step"

    def __init__(
        self,
        task: str,
        *,
        data: Annotated[Sequence[cf.WalkSample], _WALK_SAMPLES],
        test: Annotated[Sequence[cf.WalkSample], _WALK_SAMPLES],
        M: Annotated[int, _V.Range(integer=True, ge=3)] = 1000,
        eta: Annotated[float, _V.Range(gt=0)] = 0.1,
        eps: Annotated[float, _V.Range(gt=0)] = 0.1,
        relu: bool = False,
        m_relu: Annotated[int, _SIZE] = 19,
        init_scale: Annotated[float, _V.Range(gt=0)] = 0.01,
        normalize_tokens: bool = True,
        rho: Annotated[float | None, _V.Range(gt=0)] = None,
        loss: str = "log_eps",
    ):
        geometry = qa_geometry(task, M=M, eta=eta, eps=eps, rho=rho)
        self.data = _check_samples(geometry, data, "data")
        self.test = _check_samples(geometry, test, "test")
        if len(self.test) != len(self.data):
            raise ValueError(f"test must hold one sample per seed like data ({len(self.data)}); got {len(self.test)}")
        self.spec = QAModelSpec(
            task=task,
            geometry=geometry,
            relu=relu,
            m_relu=m_relu,
            init_scale=init_scale,
            normalize_tokens=normalize_tokens,
            loss=loss,
            data_digest=_digest(self.data),
            test_digest=_digest(self.test),
        )
        self.task = geometry
        self._Phi: dict = {}

    _positional = RandomWalkAttention._positional

    def time_of_step(self, step):
        """Flow time eta t of GD step t (docs/models/token_selection.md §0)."""
        return self.task.time_of_step(step)

    def output(self, params, states):
        """Model output f (S, n, K) (docs/models/token_selection.md §C.3; ReLU variant of
        docs/models/token_selection.md §C.8).
        """
        ref = params["V"]
        if not self.spec.relu:  # unchecked forward pass: a training step
            return _forward(
                self.task, params, states, normalize_tokens=self.spec.normalize_tokens, Phi=self._positional(ref)
            )[1]
        S_att, _ = _forward(
            self.task,
            {
                "V": torch.zeros_like(ref[:, :1, :1]).expand(-1, 1, self.task.K),
                **{k: v for k, v in params.items() if k.startswith("W")},
            },
            states,
            normalize_tokens=self.spec.normalize_tokens,
            Phi=self._positional(ref),
        )
        u = _token_average(self.task, states, S_att)  # (S, n, K)
        hidden = torch.relu(torch.einsum("snk,smk->snm", u, params["V"]))
        return torch.einsum("snm,skm->snk", hidden, params["A_relu"])

    def init_params(self, generators, *, device, dtype):
        """V, W (and A_relu) i.i.d. N(0, s^2) from each seed's ``init`` stream, in that order
        (docs/models/token_selection.md §C.8).
        """
        K, D, m, s = self.task.K, self.task.K + self.task.M, self.spec.m_relu, self.spec.init_scale

        def draw(g):
            out = {
                "V": s * torch.randn(m if self.spec.relu else K, K, generator=g, device=device, dtype=dtype),
                "W": s * torch.randn(D, D, generator=g, device=device, dtype=dtype),
            }
            if self.spec.relu:
                out["A_relu"] = s * torch.randn(K, m, generator=g, device=device, dtype=dtype)
            return out

        return per_seed(generators, draw)

    def sample(self, generators, n, *, device, dtype):
        """The fixed training questions (``n`` must equal their number), ``{"states": (S, n, N)}``."""
        if len(generators) != len(self.data) or n != self.data[0].n:
            raise ValueError(
                f"QA runs use fixed data: one sample per seed ({len(self.data)}) of size "
                f"{self.data[0].n}; got {len(generators)} seeds and n = {n} (use config('qa_gd'))"
            )
        return {"states": torch.as_tensor(np.stack([s.states for s in self.data]), device=device).to(dtype)}

    def loss(self, params, batch, hyper=None):
        """mean -log(max(e_y^T f + eps, 1e-12)) per seed (docs/models/token_selection.md §C.4 with the clamp of
        docs/models/token_selection.md §C.8), or mean -log softmax(f)_y (``loss="cross_entropy"``), shape (S,).
        """
        f = self.output(params, batch["states"])
        y = batch["states"][..., -1].long().to(f.device)
        if self.spec.loss == "cross_entropy":
            return -torch.gather(torch.log_softmax(f, dim=-1), 2, y[..., None])[..., 0].mean(dim=-1)
        gbar = torch.gather(f, 2, y[..., None])[..., 0]
        return -torch.log(torch.clamp(gbar + self.task.eps, min=1e-12)).mean(dim=-1)

    def evaluate(self, params, batch, hyper=None):
        """Training loss and test accuracy (Pred = smallest maximiser, docs/models/token_selection.md §C.3)."""
        ref = params["V"]
        test = torch.as_tensor(np.stack([t.states for t in self.test]), device=ref.device).to(ref.dtype)
        f = self.output(params, test)
        pred = torch.argmax(f, dim=-1)  # first maximiser = smallest label on ties
        acc = (pred == test[..., -1].long()).to(ref.dtype).mean(dim=-1)
        return {"loss": self.loss(params, batch), "acc": acc}

    def probes(self, params):
        """Frobenius norms of V and W (there is no reduced family for word tokens)."""
        return {"norm_V": params["V"].flatten(1).norm(dim=1), "norm_W": params["W"].flatten(1).norm(dim=1)}


def _qa_gd_config(
    model: QAAttention,
    n_steps: int,
    *,
    seeds=None,
    saveat: SaveAt | None = None,
    checkpoint_every: int = 0,
    dtype: str = "float64",
) -> TrainConfig:
    """Full-batch GD at step eta on the fixed training questions (docs/models/token_selection.md §C.8)."""
    n = model.data[0].n
    seeds = tuple(range(len(model.data))) if seeds is None else seeds
    return TrainConfig(
        seeds=seeds,
        n_steps=n_steps,
        batch_size=n,
        dataset_size=n,
        eval_size=n,
        lr=model.task.eta,
        saveat=saveat or SaveAt(n=51),
        checkpoint_every=checkpoint_every,
        dtype=dtype,
    )


def build(task: cf.RandomWalkTask, **kwargs) -> RandomWalkAttention:
    """The torch model of ``task``: a :class:`RandomWalkAttention` started from zero
    (docs/models/token_selection.md §C.4), on the fixed walk samples ``data`` (one per seed, :func:`walk_samples`) or
    online (``data=None``).

    ``kwargs`` go to :class:`RandomWalkAttention` (``data``, ``parametrisation``, ``init``, ``init_scale``,
    ``normalize_tokens``, ``test``, ``log_profile``, ``log_walks``).
    """
    if not isinstance(task, cf.RandomWalkTask):
        raise TypeError(f"task must be a closedform.random_walk.RandomWalkTask; got {type(task).__name__}")
    return RandomWalkAttention(task, **kwargs)


#: The presets of :func:`config`: name -> factory.
CONFIGS = {"gd": _gd_config, "sgd": _sgd_config, "qa_gd": _qa_gd_config}


def config(name: str, *args, **kwargs) -> TrainConfig:
    """TrainConfig of a named training protocol (a paper figure's setup or a preset).

    Parameters
    ----------
    name : {"gd", "sgd", "qa_gd"}
        * ``"gd"``: full-batch GD at step ``task.eta`` on the model's fixed walks
          (docs/models/token_selection.md §C.4, §C.8; the evaluation batch is the training sample): ``config("gd",
          model, n_steps, *, seeds=None, saveat=None, checkpoint_every=0, dtype="float64")``.
        * ``"sgd"``: online SGD on fresh walks of docs/models/token_selection.md §C.1 (default step ``task.eta``),
          evaluated on ``eval_size`` fresh walks: ``config("sgd", model, n_steps, batch_size, *, seeds=(0,),
          eval_size=1000, lr=None, saveat=None, checkpoint_every=0, refill=32, dtype="float64")``.
        * ``"qa_gd"``: full-batch GD of a :class:`QAAttention` on its fixed training questions
          (docs/models/token_selection.md §C.8): ``config("qa_gd", model, n_steps, *, seeds=None, saveat=None,
          checkpoint_every=0, dtype="float64")``.
    *args, **kwargs
        The arguments of that protocol, as listed.

    Raises
    ------
    ValueError
        If ``name`` is not one of the listed protocols.
    """
    return dispatch_config(CONFIGS, name, args, kwargs)


# ----------------------------------------------------------------------------------------------------------------
# Argument checks of every public function and class (dynamics.validation): the annotations (task and sample
# classes, int, float, bool, str) plus the rules in their ``Annotated`` metadata (tensors: real, finite, their ndim).
# The models' training steps call ``_forward`` unchecked (a finiteness test is a pass over the batch, and a device
# synchronisation on a GPU; the trainer's divergence check sees non-finite values).

from closedform.nearest_neighbor import _sample_list_check  # noqa: E402
from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)
from dynamics.validation import seed_or_seeds_check as _seeds  # noqa: E402
from empirical.models import tensor_check as _tensor  # noqa: E402
from empirical.models import tensors_check as _tensors  # noqa: E402


_WALK_SAMPLES = _sample_list_check(cf.WalkSample)
_SIZE = _V.Range(integer=True, ge=1)
_V.validate_module(globals())
