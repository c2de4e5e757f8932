"""Torch one-layer transformer for group-sparse classification (Zhang, Meng, Cao, ICLR 2025; spec Study B).

Implements the empirical side of ``docs/models/token_selection.md`` Study B: the model f(H; v, W) = v^T H softmax(H^T W
H) 1_D on tokens h_j = [x_j; e_j] (docs/models/token_selection.md §B.2, embedding [reconstructed]), the logistic loss
ell(y f) = log(1 + exp(-y f)) (docs/models/token_selection.md §B.2, mean over the sample, no extra factor), the zero
initialisation v^(0) = 0, W^(0) = 0 of the merged model (docs/models/token_selection.md §B.2) and the factorised variant
W = W_K^T W_Q with i.i.d. N(0, s^2) factors, s = 0.01, v^(0) = 0 (docs/models/token_selection.md §B.7, §0: never W_K =
W_Q = 0, a stationary point). Training is the shared trainer :func:`empirical.train.train`: full-batch GD on fixed
samples (docs/models/token_selection.md §B.7: the paper's finite training sets, step eta = 0.5) via :func:`config("gd")
<config>`, or online SGD on fresh draws of the data law (docs/models/token_selection.md §B.1) via :func:`config("sgd")
<config>`. The downstream transfer experiment (docs/models/token_selection.md §B.4 runnable recipe,
docs/models/token_selection.md §B.7) is :func:`downstream_sgd` with the baseline :func:`logistic_baseline`.

Everything model-specific that already exists in :mod:`closedform.group_sparse` is reused, not copied: the data
recipe (docs/models/token_selection.md §G.B, :func:`closedform.group_sparse.sample`), the probes
(docs/models/token_selection.md §B.3.1, :func:`closedform.group_sparse.order_params`,
:func:`closedform.group_sparse.attention_diagnostics`), the projection onto the invariant family
(:func:`closedform.group_sparse.project`) and the embedding of a reduced state
(:func:`closedform.group_sparse.embed_state`). Logged variables carry the closed form's names (``STATE_NAMES``,
``FULL_GD_VARIABLES`` of :mod:`closedform.group_sparse`), so a torch run and ``closedform.group_sparse.full_gd`` or
``map`` align with ``xarray``.

Symbol table (docs/models/token_selection.md §B.0; shapes carry the trainer's leading seed axis S)
--------------------------------------------------------------------------------------------------
Sections (§) in the last column are those of docs/models/token_selection.md.

============  ===========  ================================================  ================  =======
code          paper        meaning                                           shape             defined
============  ===========  ================================================  ================  =======
X, y          X, y         features X[k, :, j] = x_j of draw k; label +-1    (S,n,d,D); (S,n)  §B.1
v_star        v*           unit label direction inside group j*              (d,)              §B.1
v             v            value vector [v_x; v_pos]                         (S, d+D)          §B.2
W             W            merged key-query matrix                           (S, d+D, d+D)     §B.2
W_K, W_Q      W_K, W_Q     factors of the factorised model, W = W_K^T W_Q    (S, d+D, d+D)     §B.7
init_scale    s            std of the factor entries at init (0.01)          float             §0
f, S_att      f, S         output v^T H S 1_D; column softmax of H^T W H     (S,n); (S,n,D,D)  §B.2
beta .. m5    beta .. m_5  reduced coordinates (probes, §B.3.1)              (S,)              §B.3
v_tilde_star  v~*          downstream label direction                        (d,)              §B.4
gamma         gamma        downstream margin                                 float             §B.4
============  ===========  ================================================  ================  =======

Time axis: the GD step t (``step``); ``time`` = eta t with eta = the task's step size
(docs/models/token_selection.md §0), as in :mod:`closedform.group_sparse`. Use ``lr = task.eta`` (:func:`config("gd")
<config>` does) so that both axes agree.

Notes
-----
* With fixed samples (``data=...``) the model's ``sample`` returns those samples, seed by seed in the order of
  ``config.seeds``, for both the training set and the evaluation batch, so the logged ``loss``, ``accuracy`` and
  attention diagnostics are training-sample values, as docs/models/token_selection.md §0 requires ("the training loss at
  t is evaluated on that same sample"). Seed ``s`` of a batched run then equals a single-seed run given
  ``data=[sample_s]``.
* ``cos_vx_vstar`` and ``norm_ratio`` are 0 (not NaN) while v_x = 0 (at initialisation): the trainer refuses
  non-finite logged values. The closed form's ``order_params`` returns NaN there.
"""

from __future__ import annotations

from typing import Annotated, Any
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import optimize as _optimize
from scipy.special import erfcinv as _erfcinv
from scipy.special import expit as _expit

from closedform import group_sparse as cf
from dynamics.random import as_generator
from dynamics.saveat import SaveAt
from dynamics.validation import check_choice, check_finite_array, check_int, check_nonneg, check_positive
from empirical.models import dispatch_config
from empirical.train import TrainConfig, per_seed

__all__ = [
    "build",
    "EVAL_NAMES",
    "PARAMETRISATIONS",
    "PROBE_NAMES",
    "GroupSparseAttention",
    "GroupSparseModelSpec",
    "attention",
    "downstream_sgd",
    "effective_W",
    "forward",
    "config",
    "logistic_baseline",
    "loss_per_draw",
    "sample_downstream",
    "to_weights",
    "training_samples",
]

REFERENCE = cf.REFERENCE
PARAMETRISATIONS = ("merged", "factorised")

#: Probe names, those of ``closedform.group_sparse.full_gd`` (docs/models/token_selection.md §B.3.1), in logging order.
PROBE_NAMES: tuple[str, ...] = (
    cf.STATE_NAMES + cf.GAP_NAMES + ("cos_vx_vstar", "v_pos_norm", "norm_ratio", "w_cross_norm", "off", "off_W")
)
#: Evaluation metrics on the evaluation batch (the training sample for fixed data), names of the closed form.
EVAL_NAMES: tuple[str, ...] = ("loss", "loss_se", "accuracy", "attn_jstar", "attn_jstar_q")


def _sample_digest(samples: Sequence[cf.GroupSparseSample]) -> str:
    h = hashlib.sha256()
    for s in samples:
        h.update(np.ascontiguousarray(s.X, dtype=np.float64).tobytes())
        h.update(np.ascontiguousarray(s.y, dtype=np.float64).tobytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class GroupSparseModelSpec:
    """What defines a torch run of Study B (stored with the run; resume refuses another one).

    Parameters
    ----------
    task : closedform.group_sparse.GroupSparseTask
        d, D, sigma_x, j* (1-based), eta (docs/models/token_selection.md §B.1-§B.2).
    parametrisation : {"merged", "factorised"}
        ``merged``: trainable v and W from v = 0, W = 0 (docs/models/token_selection.md §B.2). ``factorised``: trainable
        v, W_K, W_Q with W = W_K^T W_Q, v = 0 and factor entries i.i.d. N(0, init_scale^2), W_K drawn before W_Q
        (docs/models/token_selection.md §B.7).
    init_scale : float > 0
        s of the factorised init (documented default 0.01); ignored (must stay 0.01) for the merged model.
    v_star : tuple of d floats
        The unit label direction v* (normalised on construction).
    mirror : bool
        Online sampler only: each draw of n samples holds n/2 draws, each followed by its image (-X, -y)
        (docs/models/token_selection.md §0, population proxy); n, the batch size and the evaluation size must then be
        even.
    project_steps : bool
        Merged model only: project (v, W) orthogonally onto the invariant family of docs/models/token_selection.md §B.3
        after every step (the projected dynamics, equal to the reduced map on the same sample).
    state0 : tuple of 8 floats or None
        Merged model only: start at the reduced state (beta, w_par, w_perp, m1..m5) embedded by
        ``closedform.group_sparse.embed_state`` instead of zero.
    data_digest : str or None
        SHA-256 prefix of the fixed samples (set by :class:`GroupSparseAttention`), None for online data.
    """

    task: cf.GroupSparseTask
    parametrisation: str = "merged"
    init_scale: Annotated[float, _V.Range(gt=0)] = 0.01
    v_star: Annotated[tuple[float, ...], _V.Array(ndim=1)]
    mirror: bool = False
    project_steps: bool = False
    state0: Annotated[tuple[float, ...] | None, _V.Array(ndim=1)] = None
    data_digest: str | None = None

    def __post_init__(self):
        if not isinstance(self.task, cf.GroupSparseTask):
            raise ValueError(f"task must be a closedform.group_sparse.GroupSparseTask; got {type(self.task).__name__}")  # noqa: TRY004 (project rule)
        check_choice("parametrisation", self.parametrisation, PARAMETRISATIONS)
        object.__setattr__(self, "init_scale", check_positive("init_scale", self.init_scale))
        v = np.asarray(self.v_star, dtype=np.float64).reshape(-1)
        if v.shape != (self.task.d,) or not np.all(np.isfinite(v)) or not np.linalg.norm(v) > 0:
            raise ValueError(f"v_star must be a finite non-zero vector of length d={self.task.d}; got shape {v.shape}")
        object.__setattr__(self, "v_star", tuple(float(x) for x in v / np.linalg.norm(v)))
        object.__setattr__(self, "mirror", bool(self.mirror))
        object.__setattr__(self, "project_steps", bool(self.project_steps))
        merged_only = [
            name for name, bad in (("project_steps", self.project_steps), ("state0", self.state0 is not None)) if bad
        ]
        if self.parametrisation == "factorised":
            if merged_only:
                raise ValueError(
                    f"{merged_only[0]} applies only to parametrisation='merged' (the invariant family "
                    "of docs/models/token_selection.md §B.3 is a family of merged W)"
                )
        elif self.init_scale != 0.01:
            raise ValueError(
                f"init_scale applies only to parametrisation='factorised' (the merged model starts at "
                f"zero, docs/models/token_selection.md §B.2); got init_scale={self.init_scale}"
            )
        if self.state0 is not None:
            s0 = np.asarray(self.state0, dtype=np.float64).reshape(-1)
            if s0.shape != (cf.N_STATE,) or not np.all(np.isfinite(s0)):
                raise ValueError(f"state0 must be {cf.N_STATE} finite floats {cf.STATE_NAMES}; got shape {s0.shape}")
            object.__setattr__(self, "state0", tuple(float(x) for x in s0))

    @property
    def v_star_array(self) -> np.ndarray:
        """v* as a float64 array (d,)."""
        return np.asarray(self.v_star, dtype=np.float64)


# ----------------------------------------------------------------------------------------------------------------------
# The forward pass (docs/models/token_selection.md §B.2), batched over seeds and draws
# ----------------------------------------------------------------------------------------------------------------------


def effective_W(params: Annotated[Mapping[str, torch.Tensor], _WEIGHTS]) -> torch.Tensor:
    """The merged key-query matrix W (S, d+D, d+D): ``params["W"]``, or W_K^T W_Q for the factorised model
    (docs/models/token_selection.md §B.7).
    """
    return _effective_W(params)


def _effective_W(params):
    """:func:`effective_W` without its argument checks (the training step's path)."""
    if "W" in params:
        return params["W"]
    return params["W_K"].transpose(-1, -2) @ params["W_Q"]


def _tokens(X: torch.Tensor) -> torch.Tensor:
    """H = [X; I_D] (docs/models/token_selection.md §B.2): (..., d, D) -> (..., d + D, D)."""
    D = X.shape[-1]
    eye = torch.eye(D, dtype=X.dtype, device=X.device).expand(*X.shape[:-2], D, D)
    return torch.cat([X, eye], dim=-2)


def attention(
    W: Annotated[torch.Tensor, _tensor(ndim=3)], X: Annotated[torch.Tensor, _tensor(ndim=4)]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens H and column-softmax attention S = softmax(H^T W H) (docs/models/token_selection.md §B.2, §0: softmax over
    keys, axis -2).

    Parameters
    ----------
    W : (S, d+D, d+D)
    X : (S, n, d, D)

    Returns
    -------
    H : (S, n, d+D, D); S_att : (S, n, D, D) with S_att[s, k, i, j] = weight of query j on key i.
    """
    _V.check_shapes(W=(W, "S p p"), X=(X, "S n d D"))
    if W.shape[-1] != X.shape[-2] + X.shape[-1]:
        raise ValueError(
            f"W must have shape (S, d+D, d+D) for X of shape (S, n, d, D) = {tuple(X.shape)}; got {tuple(W.shape)}"
        )
    return _attention(W, X)


def _attention(W, X):
    """:func:`attention` without its argument checks (the training step's path)."""
    H = _tokens(X)
    Z = H.transpose(-1, -2) @ (W[:, None] @ H)
    return H, torch.softmax(Z, dim=-2)


def forward(
    params: Annotated[Mapping[str, torch.Tensor], _tensors(("v", "W"), ("v", "W_K", "W_Q"))],
    X: Annotated[torch.Tensor, _tensor(ndim=4)],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Model output f = v^T H S 1_D = sum_i u_i r_i (docs/models/token_selection.md §B.2) and the attention S.

    Parameters
    ----------
    params : {"v": (S, d+D), "W": (S, d+D, d+D)} or {"v", "W_K", "W_Q"}
    X : (S, n, d, D)

    Returns
    -------
    f : (S, n); S_att : (S, n, D, D)
    """
    W = _effective_W(params)
    _V.check_shapes(X=(X, "S n d D"), **{"params['v']": (params["v"], "S p")}, W=(W, "S p p"))
    if W.shape[-1] != X.shape[-2] + X.shape[-1]:
        raise ValueError(
            f"params must hold v (S, d+D) and W (S, d+D, d+D) for X of shape (S, n, d, D) = {tuple(X.shape)}; "
            f"got W {tuple(W.shape)}"
        )
    return _forward(params, X)


def _forward(params, X):
    """:func:`forward` without its argument checks (the training step's path)."""
    H, S_att = _attention(_effective_W(params), X)
    u = torch.einsum("sa,snai->sni", params["v"], H)  # u_i = v^T h_i
    f = (u * S_att.sum(dim=-1)).sum(dim=-1)  # sum_i u_i r_i, r_i = sum_j S_ij
    return f, S_att


def loss_per_draw(
    f: Annotated[torch.Tensor, _tensor(ndim=(1, 2))],
    y: Annotated[torch.Tensor, _tensor(ndim=(1, 2))],
) -> torch.Tensor:
    """ell(y f) = log(1 + exp(-y f)) (docs/models/token_selection.md §B.2), exactly (``logaddexp``, no softplus
    threshold). ``f`` and ``y`` (shapes that broadcast) are checked (real, finite); the training step calls an
    unchecked version.
    """
    try:
        torch.broadcast_shapes(f.shape, y.shape)
    except RuntimeError:
        raise ValueError(f"y must broadcast with f of shape {tuple(f.shape)}; got {tuple(y.shape)}") from None
    return _loss_per_draw(f, y)


def _loss_per_draw(f, y):
    """:func:`loss_per_draw` without its argument checks."""
    return torch.logaddexp(torch.zeros((), dtype=f.dtype, device=f.device), -y * f)


# ----------------------------------------------------------------------------------------------------------------------
# The model (protocol of empirical.train)
# ----------------------------------------------------------------------------------------------------------------------


class GroupSparseAttention:
    """One-layer softmax transformer of Study B as an :class:`empirical.train.TorchModel`
    (docs/models/token_selection.md §B.2, §B.7).

    Parameters
    ----------
    task : closedform.group_sparse.GroupSparseTask
    parametrisation : {"merged", "factorised"}
    init_scale : float > 0
        Std of the factor entries of the factorised model (default 0.01, docs/models/token_selection.md §0).
    v_star : (d,) array, optional
        The label direction. Default: that of ``data`` if given, else the first draw of
        docs/models/token_selection.md §G.B from ``numpy.random.default_rng(0)`` (a random unit vector,
        docs/models/token_selection.md §B.7 suggestion).
    data : sequence of closedform.group_sparse.GroupSparseSample, optional
        Fixed training samples, one per seed (in the order of ``config.seeds``), all with this ``v_star`` and the
        same size; e.g. from :func:`training_samples`. ``None``: online data from the torch sampler.
    mirror, project_steps, state0 :
        See :class:`GroupSparseModelSpec`.
    """

    name = "group_sparse"
    time_unit = "eta*step"

    def __init__(
        self,
        task: cf.GroupSparseTask,
        *,
        parametrisation: str = "merged",
        init_scale: Annotated[float, _V.Range(gt=0)] = 0.01,
        v_star: Annotated[Any, _V.Array(ndim=1)] = None,
        data: Annotated[Sequence[cf.GroupSparseSample] | None, _SAMPLES] = None,
        mirror: bool = False,
        project_steps: bool = False,
        state0: Annotated[Any, _V.Array(ndim=1)] = None,
    ):
        self.data = None
        if data is not None:
            if isinstance(data, cf.GroupSparseSample):
                data = [data]
            data = list(data)
            if not data or not all(isinstance(s, cf.GroupSparseSample) for s in data):
                raise ValueError("data must be a non-empty sequence of closedform.group_sparse.GroupSparseSample")
            shapes = {s.X.shape for s in data}
            if len(shapes) != 1 or next(iter(shapes))[1:] != (task.d, task.D):
                raise ValueError(f"data samples must all have shape (n, d={task.d}, D={task.D}); got {sorted(shapes)}")
            if v_star is None:
                v_star = data[0].v_star
            for s in data:
                if not np.allclose(
                    s.v_star, np.asarray(v_star, dtype=np.float64) / np.linalg.norm(v_star), rtol=0, atol=1e-15
                ):
                    raise ValueError(
                        "data samples must share the model's v_star "
                        "(the probes of docs/models/token_selection.md §B.3.1 use it)"
                    )
            if mirror:
                raise ValueError(
                    "mirror applies to the online sampler only; mirror fixed samples with "
                    "closedform.group_sparse.sample(..., mirror=True)"
                )
            self.data = data
        if v_star is None:
            v_star = np.random.default_rng(0).standard_normal(task.d)
        self.spec = GroupSparseModelSpec(
            task=task,
            parametrisation=parametrisation,
            init_scale=init_scale,
            v_star=tuple(np.ravel(v_star)),
            mirror=mirror,
            project_steps=project_steps,
            state0=None if state0 is None else tuple(np.ravel(state0)),
            data_digest=None if self.data is None else _sample_digest(self.data),
        )
        self.task = task
        self.v_star = self.spec.v_star_array

    # -- time axis ---------------------------------------------------------------------------------------------------

    def time_of_step(self, step):
        """Flow time eta * t of GD step t (docs/models/token_selection.md §0)."""
        return self.task.time_of_step(step)

    # -- protocol ----------------------------------------------------------------------------------------------------

    def init_params(self, generators, *, device, dtype):
        """v^(0) = 0 and W^(0) = 0 (merged, docs/models/token_selection.md §B.2) or W_K, W_Q i.i.d. N(0, s^2) from each
        seed's ``init`` stream,
        W_K first (factorised, docs/models/token_selection.md §B.7); or the embedded reduced state ``state0``.
        """
        dim = self.task.dim
        if self.spec.parametrisation == "factorised":
            s = self.spec.init_scale

            def draw(g):
                W_K = s * torch.randn(dim, dim, generator=g, device=device, dtype=dtype)
                W_Q = s * torch.randn(dim, dim, generator=g, device=device, dtype=dtype)
                return {"v": torch.zeros(dim, device=device, dtype=dtype), "W_K": W_K, "W_Q": W_Q}

            return per_seed(generators, draw)
        if self.spec.state0 is None:
            v0, W0 = np.zeros(dim), np.zeros((dim, dim))
        else:
            v0, W0 = cf.embed_state(self.task, np.asarray(self.spec.state0), self.v_star)
        S = len(generators)
        v = torch.as_tensor(v0, device=device, dtype=dtype).expand(S, dim).clone()
        W = torch.as_tensor(W0, device=device, dtype=dtype).expand(S, dim, dim).clone()
        return {"v": v, "W": W}

    def sample(self, generators, n, *, device, dtype):
        """``n`` draws per seed: the fixed samples (``data``), or fresh draws of docs/models/token_selection.md §B.1
        from each generator.

        Online draw order per seed: X = sigma_x * standard normal (n, d, D) (with ``mirror``: n/2 draws, each
        followed by its image (-X, -y), so that every even-sized consecutive minibatch is mirrored); y =
        sign(<x_{j*}, v*>) with sign(0) := +1 (docs/models/token_selection.md §G.B). Returns ``{"X": (S, n, d, D), "y":
        (S, n)}``.
        """
        n = check_int("n", n, min_value=1)
        if self.data is not None:
            if len(generators) != len(self.data):
                raise ValueError(
                    f"data holds {len(self.data)} fixed samples but the run has {len(generators)} seeds; "
                    "give one sample per seed"
                )
            n_data = self.data[0].X.shape[0]
            if n != n_data:
                raise ValueError(
                    f"with fixed data, dataset_size and eval_size must equal the sample size {n_data}; "
                    f"got {n} (use config('gd'))"
                )
            X = torch.stack([torch.as_tensor(s.X, device=device, dtype=dtype) for s in self.data])
            y = torch.stack([torch.as_tensor(s.y, device=device, dtype=dtype) for s in self.data])
            return {"X": X, "y": y}
        if self.spec.mirror and n % 2:
            raise ValueError(f"n must be even with mirror=True (n/2 draws and their images); got {n}")
        d, D, js = self.task.d, self.task.D, self.task.jstar_index
        vs = torch.as_tensor(self.v_star, device=device, dtype=dtype)
        m = n // 2 if self.spec.mirror else n

        def draw(g):
            X = self.task.sigma_x * torch.randn(m, d, D, generator=g, device=device, dtype=dtype)
            y = torch.where(X[:, :, js] @ vs >= 0, 1.0, -1.0).to(dtype)
            if self.spec.mirror:  # interleaved: draw k at rows 2k, its image at 2k + 1 (even minibatches stay mirrored)
                X = torch.stack([X, -X], dim=1).reshape(n, d, D)
                y = torch.stack([y, -y], dim=1).reshape(n)
            return {"X": X, "y": y}

        return per_seed(generators, draw)

    def loss(self, params, batch, hyper=None):
        """Empirical logistic loss mean_k log(1 + exp(-y_k f_k)) per seed (docs/models/token_selection.md §B.2), shape
        (S,).
        """
        f, _ = _forward(params, batch["X"])  # unchecked: a training step
        return _loss_per_draw(f, batch["y"]).mean(dim=-1)

    def evaluate(self, params, batch, hyper=None):
        """Loss, its SE over unique draws, accuracy P(y f > 0), E[S_{j*,j}] and the 5% quantile of min_j S_{j*,j}
        on the evaluation batch (docs/models/token_selection.md §B.3.1; attention diagnostics by
        ``closedform.group_sparse``).
        """
        f, S_att = _forward(params, batch["X"])
        ell = _loss_per_draw(f, batch["y"])
        n = ell.shape[1]
        # A mirrored sample holds n/2 draws and their images: average each pair first, so the SE counts unique draws
        # (online sampler: interleaved pairs; closedform.group_sparse.sample(mirror=True): images in the second half).
        if self.data is None and self.spec.mirror:
            unit = ell.reshape(ell.shape[0], n // 2, 2).mean(dim=-1)
        elif self.data is not None and self.data[0].mirrored:
            unit = 0.5 * (ell[:, : n // 2] + ell[:, n // 2 :])
        else:
            unit = ell
        se = (
            unit.std(dim=1, correction=1) / math.sqrt(unit.shape[1])
            if unit.shape[1] > 1
            else torch.zeros_like(unit[:, 0])
        )
        S_np = S_att.detach().cpu().numpy()
        diag = [cf.attention_diagnostics(self.task, S_np[s]) for s in range(S_np.shape[0])]
        out = {"loss": ell.mean(dim=1), "loss_se": se, "accuracy": (batch["y"] * f > 0).to(f.dtype).mean(dim=1)}
        for name in ("attn_jstar", "attn_jstar_q"):
            out[name] = torch.tensor([row[name] for row in diag], dtype=f.dtype, device=f.device)
        return out

    def probes(self, params):
        """Order parameters of docs/models/token_selection.md §B.3.1 per seed (``closedform.group_sparse.order_params``
        on (v, W), W = W_K^T W_Q
        for the factorised model): ``PROBE_NAMES``; cos and norm ratio are 0 while v_x = 0.
        """
        v, W = to_weights(params)
        rows = [cf.order_params(self.task, v[s], W[s], self.v_star) for s in range(v.shape[0])]
        ref = params["v"]
        out = {}
        for name in PROBE_NAMES:
            vals = [row[name] for row in rows]
            vals = [0.0 if math.isnan(x) else x for x in vals]
            out[name] = torch.tensor(vals, dtype=ref.dtype, device=ref.device)
        return out

    def project(self, params):
        """With ``project_steps``: the orthogonal projection onto the invariant family
        (docs/models/token_selection.md §B.3, §B.3.1) in place.
        """
        if not self.spec.project_steps:
            return
        v = params["v"].detach().cpu().numpy()
        W = params["W"].detach().cpu().numpy()
        for s in range(v.shape[0]):
            vp, Wp = cf.project(self.task, v[s], W[s], self.v_star)
            params["v"][s].copy_(torch.as_tensor(vp))
            params["W"][s].copy_(torch.as_tensor(Wp))


def to_weights(params: Annotated[Mapping[str, torch.Tensor], _WEIGHTS]) -> tuple[np.ndarray, np.ndarray]:
    """(v, W) as float64 numpy arrays (S, d+D), (S, d+D, d+D), W = W_K^T W_Q for the factorised model."""
    with torch.no_grad():
        v = params["v"].detach().to("cpu", torch.float64).numpy()
        W = effective_W(params).detach().to("cpu", torch.float64).numpy()
    return v, W


# ----------------------------------------------------------------------------------------------------------------------
# Data and configurations
# ----------------------------------------------------------------------------------------------------------------------


def training_samples(
    task: cf.GroupSparseTask,
    n: Annotated[int, _V.Range(integer=True, ge=1)],
    seeds: Annotated[Any, _seeds],
    v_star: Annotated[Any, _V.Array(ndim=1)],
    *,
    mirror: bool = False,
) -> list[cf.GroupSparseSample]:
    """One training sample per seed by the exact recipe of docs/models/token_selection.md §G.B
    (``closedform.group_sparse.sample``) with
    ``numpy.random.default_rng(seed)`` and the given v* (so v* is not drawn; docs/models/token_selection.md §B.7: raw
    samples, not mirrored).

    Parameters
    ----------
    n : int >= 1
    """
    seeds = [check_int("seed", s, min_value=0) for s in np.atleast_1d(seeds)]
    return [cf.sample(task, n, np.random.default_rng(s), v_star=v_star, mirror=mirror) for s in seeds]


def _gd_config(
    model: GroupSparseAttention,
    n_steps: int,
    *,
    seeds=None,
    saveat: SaveAt | None = None,
    checkpoint_every: int = 0,
    dtype: str = "float64",
) -> TrainConfig:
    """TrainConfig of full-batch GD at step eta = ``task.eta`` on the model's fixed samples
    (docs/models/token_selection.md §B.2, §B.7).

    The evaluation batch is the training sample (docs/models/token_selection.md §0). ``seeds`` defaults to
    0..len(data)-1.
    """
    if model.data is None:
        raise ValueError(
            "config('gd') needs a model with fixed data (GroupSparseAttention(..., data=samples)); use "
            "config('sgd') for online training"
        )
    n = model.data[0].X.shape[0]
    seeds = tuple(range(len(model.data))) if seeds is None else seeds
    return TrainConfig(
        seeds=seeds,
        n_steps=n_steps,
        batch_size=n,
        dataset_size=n,
        eval_size=n,
        lr=model.task.eta,
        saveat=saveat or SaveAt(n=201),
        checkpoint_every=checkpoint_every,
        dtype=dtype,
    )


def _sgd_config(
    model: GroupSparseAttention,
    n_steps: int,
    batch_size: int,
    *,
    seeds=(0,),
    eval_size: int = 4000,
    lr: float | None = None,
    saveat: SaveAt | None = None,
    checkpoint_every: int = 0,
    refill: int = 32,
    dtype: str = "float64",
) -> TrainConfig:
    """TrainConfig of online SGD (fresh draws of docs/models/token_selection.md §B.1 every step; default step
    ``task.eta``), evaluated on a
    fixed batch of ``eval_size`` fresh draws (a test sample).
    """
    if model.data is not None:
        raise ValueError("config('sgd') needs an online model (data=None); use config('gd') for fixed samples")
    if model.spec.mirror and (batch_size % 2 or eval_size % 2):
        raise ValueError(
            f"batch_size and eval_size must be even with mirror=True (draws come in mirrored pairs); got "
            f"batch_size={batch_size}, eval_size={eval_size}"
        )
    return TrainConfig(
        seeds=seeds,
        n_steps=n_steps,
        batch_size=batch_size,
        eval_size=eval_size,
        lr=model.task.eta if lr is None else lr,
        saveat=saveat or SaveAt(n=201),
        checkpoint_every=checkpoint_every,
        refill=refill,
        dtype=dtype,
    )


# ----------------------------------------------------------------------------------------------------------------------
#  Downstream transfer (docs/models/token_selection.md §B.4 runnable recipe [unknown; documented defaults],
# docs/models/token_selection.md §B.7)
# ----------------------------------------------------------------------------------------------------------------------

#: Smallest acceptance probability P(|<v~*, x_{j*}>| >= gamma) that :func:`sample_downstream` accepts: below it the
#: rejection sampler would need more than ~1e6 proposals per kept draw.
MIN_DOWNSTREAM_ACCEPTANCE = 1e-6


def sample_downstream(
    task: cf.GroupSparseTask,
    n: Annotated[int, _V.Range(integer=True, ge=1)],
    v_tilde_star: Annotated[Any, _V.Array(ndim=1)],
    gamma: Annotated[float, _V.Range(ge=0)],
    rng: Annotated[Any, _V.seed_check],
) -> tuple[np.ndarray, np.ndarray]:
    """n downstream draws (docs/models/token_selection.md §B.4 recipe): x's ~ N(0, sigma_x^2) as in
    docs/models/token_selection.md §B.1, kept only if
    |<v~*, x_{j*}>| >= gamma (margin by rejection), label y~ = sign(<v~*, x_{j*}>). Returns X (n, d, D), y (n,).

    ``v_tilde_star`` must be a finite, non-zero vector of length d; ``gamma`` a finite number >= 0 with acceptance
    probability P(|N(0, sigma_x^2)| >= gamma) = erfc(gamma / (sigma_x sqrt 2)) >= :data:`MIN_DOWNSTREAM_ACCEPTANCE`
    (``ValueError`` otherwise, before any draw). The number of proposal rounds is bounded (each round proposes at
    least twice the missing count divided by the acceptance probability); exceeding the bound raises
    ``RuntimeError`` instead of looping forever.

    Parameters
    ----------
    n : int >= 1
    gamma : float >= 0
    """
    n = check_int("n", n, min_value=1)
    gamma = check_nonneg("gamma", gamma)
    vt = check_finite_array("v_tilde_star", v_tilde_star, shape=(task.d,))
    norm = float(np.linalg.norm(vt))
    if not norm > 0:
        raise ValueError(f"v_tilde_star must be a non-zero vector of length d = {task.d}; got norm {norm}")
    vt = vt / norm
    accept = math.erfc(gamma / (task.sigma_x * math.sqrt(2.0)))  # <v~*, x_{j*}> ~ N(0, sigma_x^2) for unit v~*
    if not accept >= MIN_DOWNSTREAM_ACCEPTANCE:
        raise ValueError(
            f"gamma = {gamma} is unreachable: the margin |<v~*, x_j*>| >= gamma holds with probability "
            f"{accept:.3g} < {MIN_DOWNSTREAM_ACCEPTANCE} at sigma_x = {task.sigma_x}; use gamma <= "
            f"{task.sigma_x * math.sqrt(2.0) * _erfcinv(MIN_DOWNSTREAM_ACCEPTANCE):.3g}"
        )
    rng = as_generator(rng)
    keep_X, have = [], 0
    for _ in range(100):  # each round expects >= 2x the missing count: P(100 rounds short) is astronomically small
        if have >= n:
            break
        m = max(math.ceil(2 * (n - have) / accept), 64)
        X = task.sigma_x * rng.standard_normal((m, task.d, task.D))
        proj = X[:, :, task.jstar_index] @ vt
        X = X[np.abs(proj) >= gamma]
        keep_X.append(X)
        have += X.shape[0]
    if have < n:
        raise RuntimeError(
            f"sample_downstream kept only {have} of n = {n} draws after 100 rounds at acceptance "
            f"probability {accept:.3g}"
        )
    X = np.concatenate(keep_X)[:n]
    y = np.where(X[:, :, task.jstar_index] @ vt >= 0.0, 1.0, -1.0)
    return X, y


def _features(W: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """phi = H S 1_D (S, n, d+D): with W frozen, f = <v, phi> is linear in v (docs/models/token_selection.md §B.2)."""
    H, S_att = attention(W, X)
    return (H * S_att.sum(dim=-1)[:, :, None, :]).sum(dim=-1)


def downstream_features(W: Annotated[Any, _V.Array(ndim=3)], X: Annotated[Any, _V.Array(ndim=4)]) -> np.ndarray:
    """Features phi = H S 1_D of the frozen attention (docs/models/token_selection.md §B.2): with W fixed, f = <v, phi>
    is linear in v, so
    fitting v is logistic regression on phi in R^{d+D}. W (S, d+D, d+D), X (S, n, d, D); returns (S, n, d+D).
    """
    W = torch.as_tensor(np.asarray(W, dtype=np.float64))
    X = torch.as_tensor(np.asarray(X, dtype=np.float64))
    if W.ndim != 3 or X.ndim != 4 or W.shape[0] != X.shape[0]:
        raise ValueError(
            f"W must be (S, d+D, d+D) and X (S, n, d, D) with the same S; got {tuple(W.shape)}, {tuple(X.shape)}"
        )
    with torch.no_grad():
        return _features(W, X).numpy()


def downstream_sgd(
    task: cf.GroupSparseTask,
    W: Annotated[Any, _V.Array(ndim=3)],
    X: Annotated[Any, _V.Array(ndim=4)],
    y: Annotated[Any, _V.Array(ndim=2)],
    X_test: Annotated[Any, _V.Array(ndim=4)],
    y_test: Annotated[Any, _V.Array(ndim=2)],
    *,
    checkpoints: Annotated[Any, _V.Range(array=True, integer=True, ge=1)],
    lr0: Annotated[float, _V.Range(gt=0)] = 0.1,
    device: str | torch.device = "cpu",
) -> np.ndarray:
    """Fine-tune v by online SGD with W frozen (docs/models/token_selection.md §B.4 runnable recipe): v = 0, then for i
    = 1..n one fresh sample, v <- v - (lr0/sqrt(i)) grad_v ell(y~ f(X~_i; v, W)); test error of the iterate after n
    samples for each n of ``checkpoints``.

    Batched over seeds: W (S, d+D, d+D) (e.g. the pre-trained W^(T*), or 0 for "no pre-training"), X (S, n_max, d, D),
    y (S, n_max), X_test (S, n_test, d, D), y_test (S, n_test). Returns the test errors (S, len(checkpoints)), the
    fraction of test draws with y f <= 0. One SGD pass over the first n samples is the run with n samples (the step
    size depends only on i), so every checkpoint is the prefix of one pass. float64.

    Parameters
    ----------
    checkpoints : int or int array >= 1
    lr0 : float > 0
    """
    dtype = torch.float64
    W, X, y, X_test, y_test = (
        torch.tensor(np.asarray(a, dtype=np.float64), device=device) for a in (W, X, y, X_test, y_test)
    )
    if W.ndim != 3 or X.ndim != 4 or W.shape[0] != X.shape[0]:
        raise ValueError(
            f"W must be (S, d+D, d+D) and X (S, n, d, D) with the same S; got {tuple(W.shape)}, {tuple(X.shape)}"
        )
    lr0 = check_positive("lr0", lr0)
    checkpoints = sorted(int(c) for c in np.atleast_1d(checkpoints))
    if not checkpoints or checkpoints[0] < 1 or checkpoints[-1] > X.shape[1]:
        raise ValueError(f"checkpoints must lie in [1, n_max={X.shape[1]}]; got {checkpoints}")
    phi = _features(W, X)
    phi_test = _features(W, X_test)
    v = torch.zeros(W.shape[0], W.shape[1], dtype=dtype, device=device)
    errors = []
    want = set(checkpoints)
    for i in range(1, checkpoints[-1] + 1):
        p, yi = phi[:, i - 1], y[:, i - 1]
        f = (v * p).sum(-1)
        coef = -yi * torch.sigmoid(-yi * f)  # d ell / d f (docs/models/token_selection.md §B.2: coef = -lambda y)
        v = v - (lr0 / math.sqrt(i)) * coef[:, None] * p
        if i in want:
            f_test = (phi_test @ v[:, :, None])[..., 0]
            errors.append((y_test * f_test <= 0).to(dtype).mean(dim=1))
    return torch.stack(errors, dim=1).cpu().numpy()


def logistic_baseline(
    X: Annotated[Any, _V.Array(ndim=tuple(range(2, 33)))],
    y: Annotated[Any, _V.Array(ndim=1)],
    X_test: Annotated[Any, _V.Array(ndim=tuple(range(2, 33)))],
    y_test: Annotated[Any, _V.Array(ndim=1)],
    *,
    l2: Annotated[float, _V.Range(gt=0)] = 1e-4,
) -> float:
    """Test error of L2-penalised logistic regression on vec(X) in R^{dD} (docs/models/token_selection.md §B.4 baseline:
    penalty l2/2 ||w||^2,
    no intercept, fitted to convergence by L-BFGS). X (n, d, D), y (n,); returns the error on (X_test, y_test).

    Parameters
    ----------
    l2 : float > 0
    """
    X = np.asarray(X, dtype=np.float64)
    Xf = X.reshape(X.shape[0], -1)
    y = np.asarray(y, dtype=np.float64)
    l2 = check_positive("l2", l2)
    Xt = np.asarray(X_test, dtype=np.float64)
    if y.shape != X.shape[:1] or np.shape(y_test) != Xt.shape[:1] or Xt.shape[1:] != X.shape[1:]:
        raise ValueError(
            f"X (n, ...), y (n,), X_test (n_test, ...) and y_test (n_test,) must agree, X and X_test in "
            f"their trailing shape; got X {X.shape}, y {y.shape}, X_test {Xt.shape}, "
            f"y_test {np.shape(y_test)}"
        )

    def fun(w):
        z = y * (Xf @ w)
        val = np.mean(np.logaddexp(0.0, -z)) + 0.5 * l2 * (w @ w)
        grad = -(Xf.T @ (y * _expit(-z))) / Xf.shape[0] + l2 * w
        return val, grad

    res = _optimize.minimize(
        fun, np.zeros(Xf.shape[1]), jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-10}
    )
    Xt = Xt.reshape(len(y_test), -1)
    return float(np.mean(np.asarray(y_test) * (Xt @ res.x) <= 0))


def build(task: cf.GroupSparseTask, **kwargs) -> GroupSparseAttention:
    """The torch model of ``task``: a :class:`GroupSparseAttention` started from zero
    (docs/models/token_selection.md §B.2), on the fixed samples ``data`` (one per seed, :func:`training_samples`) or
    online (``data=None``).

    ``kwargs`` go to :class:`GroupSparseAttention` (``data``, ``parametrisation``, ``init_scale``, ``v_star``,
    ``mirror``, ``project_steps``, ``state0``).

    """
    if not isinstance(task, cf.GroupSparseTask):
        raise TypeError(f"task must be a closedform.group_sparse.GroupSparseTask; got {type(task).__name__}")
    return GroupSparseAttention(task, **kwargs)


#: The presets of :func:`config`: name -> factory.
CONFIGS = {"gd": _gd_config, "sgd": _sgd_config}


def config(name: str, *args, **kwargs) -> TrainConfig:
    """TrainConfig of a named training protocol (a paper figure's setup or a preset).

    Parameters
    ----------
    name : {"gd", "sgd"}
        * ``"gd"``: full-batch GD at step ``task.eta`` on the model's fixed samples
          (docs/models/token_selection.md §B.2, §B.7; the evaluation batch is the training sample): ``config("gd",
          model, n_steps, *, seeds=None, saveat=None, checkpoint_every=0, dtype="float64")``; ``seeds`` defaults to
          0..len(data)-1.
        * ``"sgd"``: online SGD on fresh draws of docs/models/token_selection.md §B.1 (default step ``task.eta``),
          evaluated on ``eval_size`` fresh draws: ``config("sgd", model, n_steps, batch_size, *, seeds=(0,),
          eval_size=4000, lr=None, saveat=None, checkpoint_every=0, refill=32, dtype="float64")``.
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
# The model's training step calls ``_forward`` and ``_loss_per_draw`` unchecked (a finiteness test is a pass over the
# batch, and a device synchronisation on a GPU; the trainer's divergence check sees non-finite values).

from closedform.nearest_neighbor import _sample_list_check  # noqa: E402
from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)
from empirical.models import tensor_check as _tensor  # noqa: E402
from dynamics.validation import seed_or_seeds_check as _seeds  # noqa: E402
from empirical.models import tensors_check as _tensors  # noqa: E402


_SAMPLES = _sample_list_check(cf.GroupSparseSample)
_WEIGHTS = _tensors(("W",), ("W_K", "W_Q"), ndim=3)
_V.validate_module(globals())
