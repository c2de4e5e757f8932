"""Torch one-layer attention that learns the in-context 1-NN rule (Li et al., NeurIPS 2024; spec Study A).

Implements the empirical side of ``docs/models/token_selection.md`` Study A: prompts H = [x_j, x_query; y_j, 0; 0, 1]
(docs/models/token_selection.md §A.2), the prediction f_W(H) = sum_j q_j y_j with q = softmax(H^T W h_query)
(docs/models/token_selection.md §A.3, no temperature, value = identity) and the square loss 1/2 mean (f - y_{i*})^2
(docs/models/token_selection.md §A.4), with two parametrisations of the key-query matrix:

* ``merged``: a full trainable W in R^{(d+2)x(d+2)} from the paper's W^(0) = diag(0_{d+1}, -sigma)
  (docs/models/token_selection.md §A.4). Full- batch GD at step eta then equals
  :func:`closedform.nearest_neighbor.full_gd` on the same labelled prompts, and on a sample where the invariances of
  docs/models/token_selection.md §A.5 are exact (:func:`closedform.nearest_neighbor.symmetrized_prompts`) it equals the
  reduced map :func:`closedform.nearest_neighbor.map` in (xi1, xi2);
* ``factorised``: W = W_K^T W_Q with W_K, W_Q in R^{(d+2)x(d+2)} drawn i.i.d. N(0, s^2), s = 0.01, W_K first, and no
  mask (docs/models/token_selection.md §A.9 default; never from zero, a stationary point, nor from a factorisation of
  W^(0), which stays rank 1).

Training is the shared trainer :func:`empirical.train.train`: full-batch GD (or minibatch SGD) on fixed prompts drawn by
the closed form's sampler (:func:`closedform.nearest_neighbor.sample_prompts`, recipe
docs/models/token_selection.md §G.A, so a torch run and the reduced map see the same x's) via :func:`config("gd")
<config>`, or online SGD on fresh prompts via :func:`config("sgd") <config>`. The closed form is reused for everything
model-specific: the embedding and numpy forward pass (the torch pass is tested against them), the probes (xi1, xi2, off)
of docs/models/token_selection.md §A.5.1 (:func:`closedform.nearest_neighbor.probe`, applied to W or to W_K^T W_Q) and
the diagnostics L, E[q_{i*}], its lower quantile, E[q_{N+1}] (:func:`closedform.nearest_neighbor.full_diagnostics`).
Logged names are the closed form's, so a torch run and ``map`` align with ``xarray``.

Symbol table (docs/models/token_selection.md §A.0; shapes carry the trainer's leading seed axis S)
--------------------------------------------------------------------------------------------------
Sections (§) in the last column are those of docs/models/token_selection.md.

=============  =============  ==================================================  =====================  =======
code           paper          meaning                                             shape                  defined
=============  =============  ==================================================  =====================  =======
X, xq, y       x_j, x_query   context inputs, query on S^{d-1}, labels (+-1)      (n,N,d), (n,d), (n,N)  §A.1
target         y_{i*}         label of the nearest neighbour of x_query           (S, n)                 §A.1
H              H              embedded prompts [x; y; indicator] (the batch)      (S, n, d+2, N+1)       §A.2
W              W              merged key-query matrix                             (S, d+2, d+2)          §A.3
W_K, W_Q       W_K, W_Q       factors, W = W_K^T W_Q                              (S, d+2, d+2)          §A.9
init_scale     s              std of the factors' entries at initialisation       float                  §A.9
q              q              attention of the query, last entry = on itself      (S, n, N+1)            §A.3
xi1, xi2, off  xi1, xi2, off  probes: tr(W11)/d, -W33, distance to the family     (S,)                   §A.5.1
L, L_se        L              sample loss 1/2 mean (f - y_{i*})^2 and its SE      (S,)                   §A.4
acc            --             accuracy of sign(f) against the 1-NN label y_{i*}   (S,)                   §A.3
mse_test       --             test MSE mean (f - y_{i*})^2 on fixed test prompts  (S,)                   §A.6
=============  =============  ==================================================  =====================  =======

Time axis: the GD step t (``step``); ``time`` = eta t with eta = ``task.eta`` (docs/models/token_selection.md §0), as in
:func:`closedform.nearest_neighbor.map`. :func:`config("gd") <config>` and :func:`config("sgd") <config>` use
``lr = task.eta`` so that both axes agree.


Notes
-----
* With fixed prompts, ``sample`` returns the training prompts for both the training set and the evaluation batch, so
  ``L`` is the training-sample loss (docs/models/token_selection.md §0). With explicit labels it differs from the
  reduced map's L (labels integrated out, docs/models/token_selection.md §A.5) by label-sampling noise only;
  ``duplicate_labels=True`` in :func:`prompt_samples` adds every prompt again with y -> -y (the
  docs/models/token_selection.md §A.8 recipe), which cancels the odd label moments.
* The torch loss has the documented normalisation exactly: 1/2, mean over prompts, no 1/sqrt(d) temperature
  (docs/models/token_selection.md §0).
* Step size [measured here, not in the talk]: the label-bias entry W23 (score y_j W23 on context token j) has
  curvature lambda = E[(sum_j q_j - f^2)^2] ~ 0.9 at W^(0) (d = 4, N = 16), so full-matrix GD is linearly unstable in
  that direction for eta > 2/lambda ~ 2.2 until xi1 ~ 10; at the reduced map's reference eta = 5 W23 can jump to
  +-0.9 with a loss spike (tests/empirical/test_nearest_neighbor.py). The reduced map cannot see this direction: use
  eta <= 2 for torch-vs-reduced comparisons.
"""

from __future__ import annotations

from typing import Annotated, Any
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from closedform import nearest_neighbor as cf
from dynamics.saveat import SaveAt
from dynamics.validation import check_choice, check_in_range, check_int, check_positive
from empirical.models import dispatch_config
from empirical.train import TrainConfig, per_seed

__all__ = [
    "build",
    "EVAL_NAMES",
    "PARAMETRISATIONS",
    "PROBE_NAMES",
    "NearestNeighborAttention",
    "NearestNeighborModelSpec",
    "attention",
    "effective_W",
    "embed",
    "config",
    "predict",
    "prompt_samples",
    "to_prompts",
    "to_weights",
]

REFERENCE = cf.REFERENCE
PARAMETRISATIONS = ("merged", "factorised")

#: Weight probes of docs/models/token_selection.md §A.5.1, logged at every save step (names of the closed form).
PROBE_NAMES: tuple[str, ...] = ("xi1", "xi2", "off")
#: Evaluation metrics (names of ``closedform.nearest_neighbor.DIAGNOSTIC_NAMES`` where they exist there).
EVAL_NAMES: tuple[str, ...] = ("L", "L_se", "acc", "q_istar", "q_istar_lo", "q_self")


def _digest(samples) -> str | None:
    if samples is None:
        return None
    h = hashlib.sha256()
    for p in samples:
        for arr in (p.X, p.xq, p.y):
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:16]


def _array_digest(arrays: Mapping[str, np.ndarray] | None) -> str | None:
    if arrays is None:
        return None
    h = hashlib.sha256()
    for name in sorted(arrays):
        h.update(name.encode())
        h.update(np.ascontiguousarray(arrays[name], dtype=np.float64).tobytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class NearestNeighborModelSpec:
    """What defines a torch run of Study A (stored with the run; resume refuses another one).

    Parameters
    ----------
    task : closedform.nearest_neighbor.NearestNeighborTask
        d, N, sigma, eta (docs/models/token_selection.md §A.1-§A.4).
    parametrisation : {"merged", "factorised"}
        Trainable W from W^(0) (docs/models/token_selection.md §A.4), or (W_K, W_Q) from i.i.d. N(0, init_scale^2)
        entries (docs/models/token_selection.md §A.9).
    init_scale : float > 0
        Std of the factors' entries (documented default 0.01); must stay 0.01 for the merged model (no random start).
    quantile : float in (0, 1)
        Lower quantile of q_{i*} logged as ``q_istar_lo`` (docs/models/token_selection.md §A.5.1; default 0.05).
    data_digest, test_digest, init_digest : str or None
        SHA-256 prefixes of the fixed training prompts, the test prompts and explicit initial weights.
    """

    task: cf.NearestNeighborTask
    parametrisation: str = "merged"
    init_scale: Annotated[float, _V.Range(gt=0)] = 0.01
    quantile: Annotated[float, _V.Range(gt=0, lt=1)] = 0.05
    data_digest: str | None = None
    test_digest: str | None = None
    init_digest: str | None = None

    def __post_init__(self):
        if not isinstance(self.task, cf.NearestNeighborTask):
            raise ValueError(
                f"task must be a closedform.nearest_neighbor.NearestNeighborTask; got {type(self.task).__name__}"
            )
        check_choice("parametrisation", self.parametrisation, PARAMETRISATIONS)
        object.__setattr__(self, "init_scale", check_positive("init_scale", self.init_scale))
        object.__setattr__(
            self, "quantile", check_in_range("quantile", self.quantile, 0.0, 1.0, low_open=True, high_open=True)
        )
        if self.parametrisation == "merged" and self.init_scale != 0.01:
            raise ValueError(
                f"init_scale applies only to parametrisation='factorised' (the merged W starts at the "
                f"paper's W^(0), docs/models/token_selection.md §A.4); got init_scale={self.init_scale}"
            )


# ----------------------------------------------------------------------------------------------------------------
# The forward pass (docs/models/token_selection.md §A.2-§A.3), batched over seeds and prompts
# ----------------------------------------------------------------------------------------------------------------


def embed(
    X: Annotated[torch.Tensor, _tensor(ndim=_LEADING)],
    xq: Annotated[torch.Tensor, _tensor(ndim=_LEADING[:-1] + (1,))],
    y: Annotated[torch.Tensor, _tensor(ndim=_LEADING[:-1] + (1,))],
) -> torch.Tensor:
    """Embedded prompts H (..., d+2, N+1) from X (..., N, d), xq (..., d), y (..., N): columns [x_j; y_j; 0] and
    [x_query; 0; 1] (docs/models/token_selection.md §A.2), the layout of :func:`closedform.nearest_neighbor.embed`.
    The tensors are checked (real, finite, consistent shapes); the sampler of a training run calls an unchecked
    version.
    """
    _V.check_shapes(X=(X, "... N d"), xq=(xq, "... d"), y=(y, "... N"))
    return _embed(X, xq, y)


def _embed(X, xq, y):
    """:func:`embed` without its argument checks."""
    lead = X.shape[:-2]
    zeros = X.new_zeros(*lead, 1, X.shape[-2])
    ctx = torch.cat([X.transpose(-1, -2), y[..., None, :], zeros], dim=-2)  # (..., d+2, N)
    query = torch.cat([xq, xq.new_zeros(*lead, 1), xq.new_ones(*lead, 1)], dim=-1)  # (..., d+2)
    return torch.cat([ctx, query[..., None]], dim=-1)


def effective_W(
    params: Annotated[Mapping[str, torch.Tensor], _tensors(("W",), ("W_K", "W_Q"), ndim=3)],
) -> torch.Tensor:
    """The merged key-query matrix (S, d+2, d+2): ``params["W"]`` or W_K^T W_Q (factorised,
    docs/models/token_selection.md §A.9).
    """
    return _effective_W(params)


def _effective_W(params):
    """:func:`effective_W` without its argument checks (the training step's path)."""
    if "W" in params:
        return params["W"]
    return params["W_K"].transpose(-1, -2) @ params["W_Q"]


def attention(W: Annotated[torch.Tensor, _tensor(ndim=3)], H: Annotated[torch.Tensor, _tensor(ndim=4)]) -> torch.Tensor:
    """q = softmax(H^T W h_query) (S, n, N+1) for W (S, D, D), H (S, n, D, N+1) (docs/models/token_selection.md §A.3,
    column-wise softmax of
    docs/models/token_selection.md §0, no temperature); the last entry is the query's attention on itself, q_{N+1}.
    """
    _V.check_shapes(W=(W, "S D D"), H=(H, "S n D N1"))
    return _attention(W, H)


def _attention(W, H):
    """:func:`attention` without its argument checks (the training step's path)."""
    v = torch.einsum("sij,snj->sni", W, H[..., -1])  # W h_query
    scores = torch.einsum("snim,sni->snm", H, v)  # h_m^T W h_query
    return torch.softmax(scores, dim=-1)


def predict(
    params: Annotated[Mapping[str, torch.Tensor], _tensors(("W",), ("W_K", "W_Q"), ndim=3)],
    batch: Annotated[Mapping[str, torch.Tensor], _tensors(("H",), ndim=4)],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention q (S, n, N+1) and prediction f_W(H) = [y_1..y_N, 0] q (S, n) (docs/models/token_selection.md §A.3) on a
    batch ``{"H": (S, n,
    d+2, N+1), ...}``. The tensors are checked (real, finite, consistent shapes); the training step calls an
    unchecked version.
    """
    _V.check_shapes(W=(_effective_W(params), "S D D"), **{"batch['H']": (batch["H"], "S n D N1")})
    return _predict(params, batch)


def _predict(params, batch):
    """:func:`predict` without its argument checks (the training step's path)."""
    H = batch["H"]
    q = _attention(_effective_W(params), H)
    f = (q * H[..., -2, :]).sum(dim=-1)  # the label row [y_1, ..., y_N, 0]
    return q, f


def to_weights(params: Annotated[Mapping[str, torch.Tensor], _tensors(("W",), ("W_K", "W_Q"), ndim=3)]) -> np.ndarray:
    """W as float64 numpy (S, d+2, d+2); W = W_K^T W_Q for the factorised model."""
    with torch.no_grad():
        return effective_W(params).detach().to("cpu", torch.float64).numpy()


def to_prompts(
    batch: Annotated[Mapping[str, torch.Tensor], _tensors(("H",), ndim=4)],
    seed_index: Annotated[int, _V.Range(integer=True, ge=0)],
) -> cf.Prompts:
    """The prompts of one seed of a torch batch as a labelled :class:`closedform.nearest_neighbor.Prompts`.

    Parameters
    ----------
    seed_index : int >= 0
    """
    H = batch["H"][seed_index].detach().to("cpu", torch.float64).numpy()
    d = H.shape[1] - 2
    X = np.ascontiguousarray(np.swapaxes(H[:, :d, :-1], 1, 2))
    xq = np.ascontiguousarray(H[:, :d, -1])
    c = np.einsum("bjd,bd->bj", X, xq)
    return cf.Prompts(
        X=X, xq=xq, c=c, istar=np.argmax(c, axis=1).astype(np.int64), y=np.ascontiguousarray(H[:, d, :-1])
    )


def _torch_batch(samples: Sequence[cf.Prompts], device, dtype) -> dict[str, torch.Tensor]:
    """Fixed prompts as a batch ``{"H": (S, n, d+2, N+1), "target": (S, n)}`` (H from the closed form's embed)."""
    H = np.stack([cf.embed(p) for p in samples])
    target = np.stack([p.target for p in samples])
    return {
        "H": torch.as_tensor(H, device=device).to(dtype),
        "target": torch.as_tensor(target, device=device).to(dtype),
    }


# ----------------------------------------------------------------------------------------------------------------
# The model (protocol of empirical.train)
# ----------------------------------------------------------------------------------------------------------------


def _check_samples(task: cf.NearestNeighborTask, samples, name: str) -> list[cf.Prompts] | None:
    if samples is None:
        return None
    if isinstance(samples, cf.Prompts):
        samples = [samples]
    samples = list(samples)
    if not samples or not all(isinstance(p, cf.Prompts) for p in samples):
        raise ValueError(f"{name} must be a non-empty sequence of closedform.nearest_neighbor.Prompts (one per seed)")
    for p in samples:
        if p.y is None:
            raise ValueError(f"{name} prompts must carry explicit labels y (sample_prompts(..., labels=True))")
        if (p.N, p.d) != (task.N, task.d):
            raise ValueError(f"{name} prompts have (N, d) = ({p.N}, {p.d}) but the task has ({task.N}, {task.d})")
    sizes = {p.n_prompts for p in samples}
    if len(sizes) != 1:
        raise ValueError(f"{name} samples must all hold the same number of prompts; got {sorted(sizes)}")
    return samples


class NearestNeighborAttention:
    """One-layer attention of Study A as an :class:`empirical.train.TorchModel`
    (docs/models/token_selection.md §A.2-§A.4, §A.9).

    Parameters
    ----------
    task : closedform.nearest_neighbor.NearestNeighborTask
    parametrisation : {"merged", "factorised"}
        See :class:`NearestNeighborModelSpec`.
    init_scale : float > 0
        See :class:`NearestNeighborModelSpec`.
    quantile : float in (0, 1)
        See :class:`NearestNeighborModelSpec`.
    data : sequence of closedform.nearest_neighbor.Prompts, optional
        Fixed labelled training prompts, one sample per seed (in the order of ``config.seeds``), all of one size
        (e.g. :func:`prompt_samples`). ``None``: online prompts from the torch sampler
        (docs/models/token_selection.md §A.1).
    test : closedform.nearest_neighbor.Prompts or a sequence of them (one per seed), optional
        Fixed labelled test prompts (e.g. the shifted law of Theorem A2, ``sample_shifted_prompts``); the test MSE
        mean (f - y_{i*})^2 (no 1/2, docs/models/token_selection.md §A.6) is then logged as ``mse_test``.
    init_weights : mapping name -> array, optional
        Explicit initial weights instead of the paper's (``{"W": ...}`` merged, ``{"W_K": ..., "W_Q": ...}``
        factorised), each (d+2, d+2) for every seed or (S, d+2, d+2): e.g. to start both sources on the same point
        or to rerun a recipe that draws the factors with numpy (docs/models/token_selection.md §A.9).
    """

    name = "nearest_neighbor"
    time_unit = "step (time = eta * step)"

    def __init__(
        self,
        task: cf.NearestNeighborTask,
        *,
        parametrisation: str = "merged",
        init_scale: Annotated[float, _V.Range(gt=0)] = 0.01,
        quantile: Annotated[float, _V.Range(gt=0, lt=1)] = 0.05,
        data: Annotated[Any, _PROMPT_SAMPLES] = None,
        test: Annotated[Any, _PROMPT_SAMPLES] = None,
        init_weights: Mapping[str, np.ndarray] | None = None,
    ):
        if not isinstance(task, cf.NearestNeighborTask):
            raise ValueError(
                f"task must be a closedform.nearest_neighbor.NearestNeighborTask; got {type(task).__name__}"
            )
        self.data = _check_samples(task, data, "data")
        self.test = _check_samples(task, test, "test")
        if self.test is not None and self.data is not None and len(self.test) not in (1, len(self.data)):
            raise ValueError(
                f"test must hold one sample, or one per seed like data ({len(self.data)}); got {len(self.test)}"
            )
        self.init_weights = self._check_init_weights(task, parametrisation, init_weights)
        self.spec = NearestNeighborModelSpec(
            task=task,
            parametrisation=parametrisation,
            init_scale=init_scale,
            quantile=quantile,
            data_digest=_digest(self.data),
            test_digest=_digest(self.test),
            init_digest=_array_digest(self.init_weights),
        )
        self.task = task
        self._test_H: dict = {}

    @staticmethod
    def _check_init_weights(task, parametrisation, init_weights):
        if init_weights is None:
            return None
        check_choice("parametrisation", parametrisation, PARAMETRISATIONS)
        want = {"W"} if parametrisation == "merged" else {"W_K", "W_Q"}
        if not isinstance(init_weights, Mapping) or set(init_weights) != want:
            got = sorted(init_weights) if isinstance(init_weights, Mapping) else type(init_weights).__name__
            raise ValueError(
                f"init_weights must provide exactly {sorted(want)} for parametrisation={parametrisation!r}; got {got}"
            )
        D = task.embed_dim
        out = {}
        for name, value in init_weights.items():
            arr = np.asarray(value, dtype=np.float64)
            if arr.shape[-2:] != (D, D) or arr.ndim not in (2, 3) or not np.all(np.isfinite(arr)):
                raise ValueError(
                    f"init_weights[{name!r}] must be finite with shape (D, D) or (S, D, D), D = d + 2 = "
                    f"{D}; got shape {arr.shape}"
                )
            out[name] = arr
        return out

    def time_of_step(self, step):
        """Flow time tau = eta t of GD step t (docs/models/token_selection.md §0)."""
        return self.task.time_of_step(step)

    # -- protocol ----------------------------------------------------------------------------------------------------

    def init_params(self, generators, *, device, dtype):
        """W = W^(0) = diag(0_{d+1}, -sigma) for every seed (merged, docs/models/token_selection.md §A.4; no
        randomness), or W_K then W_Q with i.i.d. N(0, init_scale^2) entries from each seed's ``init`` stream
        (factorised, docs/models/token_selection.md §A.9); or the explicit
        ``init_weights``.
        """
        S, D = len(generators), self.task.embed_dim
        if self.init_weights is not None:
            out = {}
            for name, arr in self.init_weights.items():
                if arr.ndim == 3 and arr.shape[0] != S:
                    raise ValueError(f"init_weights[{name!r}] holds {arr.shape[0]} matrices but the run has {S} seeds")
                t = torch.as_tensor(arr, device=device).to(dtype)
                out[name] = t.expand(S, D, D).clone() if t.ndim == 2 else t.clone()
            return out
        if self.spec.parametrisation == "merged":
            W0 = torch.as_tensor(cf.initial_W(self.task), device=device).to(dtype)
            return {"W": W0.expand(S, D, D).clone()}
        s = self.spec.init_scale

        def draw(g):
            W_K = s * torch.randn(D, D, generator=g, device=device, dtype=dtype)
            return {"W_K": W_K, "W_Q": s * torch.randn(D, D, generator=g, device=device, dtype=dtype)}

        return per_seed(generators, draw)

    def sample(self, generators, n, *, device, dtype):
        """``n`` labelled prompts per seed: ``{"H": (S, n, d+2, N+1), "target": (S, n)}`` (H of
        docs/models/token_selection.md §A.2, target y_{i*}).

        Fixed data: the training prompts (``n`` must equal their number). Online (docs/models/token_selection.md §A.1,
        the order of recipe docs/models/token_selection.md §G.A with torch generators): X ~ N(0, I) normalised, then
        x_query likewise, then y Rademacher; target = y_{i*} with i* = argmax_j <x_j, x_query>.
        """
        n = check_int("n", n, min_value=1)
        if self.data is not None:
            if len(generators) != len(self.data):
                raise ValueError(
                    f"data holds {len(self.data)} fixed samples but the run has {len(generators)} seeds; "
                    "give one sample per seed"
                )
            if n != self.data[0].n_prompts:
                raise ValueError(
                    f"with fixed data, dataset_size and eval_size must equal the number of training "
                    f"prompts {self.data[0].n_prompts}; got {n} (use config('gd'))"
                )
            return _torch_batch(self.data, device, dtype)
        N, d = self.task.N, self.task.d

        def draw(g):
            X = torch.randn(n, N, d, generator=g, device=device, dtype=dtype)
            X = X / torch.linalg.vector_norm(X, dim=-1, keepdim=True)
            xq = torch.randn(n, d, generator=g, device=device, dtype=dtype)
            xq = xq / torch.linalg.vector_norm(xq, dim=-1, keepdim=True)
            y = 2.0 * torch.randint(0, 2, (n, N), generator=g, device=device).to(dtype) - 1.0
            istar = torch.einsum("njd,nd->nj", X, xq).argmax(dim=-1)
            return {"H": _embed(X, xq, y), "target": torch.gather(y, 1, istar[:, None])[:, 0]}

        return per_seed(generators, draw)

    def loss(self, params, batch, hyper=None):
        """L = 1/2 mean over prompts of (f_W(H) - y_{i*})^2 per seed (docs/models/token_selection.md §A.4), shape
        (S,).
        """
        _, f = _predict(params, batch)  # unchecked: a training step
        return 0.5 * ((f - batch["target"]) ** 2).mean(dim=-1)

    def evaluate(self, params, batch, hyper=None):
        """Sample loss ``L`` and its SE, the accuracy ``acc`` of sign(f) against y_{i*}, and the diagnostics of
        docs/models/token_selection.md §A.5.1 (E[q_{i*}], its lower quantile, E[q_{N+1}];
        :func:`closedform.nearest_neighbor.full_diagnostics` on each seed's W) on the evaluation batch (the training
        prompts for fixed data); ``mse_test`` on the test
        prompts if given.
        """
        _, f = _predict(params, batch)
        ell = 0.5 * (f - batch["target"]) ** 2
        n = ell.shape[1]
        out = {
            "L": ell.mean(dim=1),
            "L_se": ell.std(dim=1, correction=1) / math.sqrt(n) if n > 1 else torch.zeros_like(ell[:, 0]),
            "acc": (f * batch["target"] > 0).to(f.dtype).mean(dim=1),
        }
        W = to_weights(params)
        ref = out["L"]
        rows = []
        for s in range(W.shape[0]):
            prompts = self.data[s] if self.data is not None else to_prompts(batch, s)
            diag = cf.full_diagnostics(W[s], prompts, quantile=self.spec.quantile)
            rows.append([diag[name] for name in ("q_istar", "q_istar_lo", "q_self")])
            if self.test is not None:
                test = self.test[s] if len(self.test) > 1 else self.test[0]
                key = id(test)
                if key not in self._test_H:
                    self._test_H[key] = cf.embed(test)
                _, f_test = cf.forward(W[s], self._test_H[key])
                rows[-1].append(float(np.mean((f_test - test.target) ** 2)))
        arr = torch.as_tensor(np.asarray(rows), dtype=ref.dtype, device=ref.device)
        for j, name in enumerate(("q_istar", "q_istar_lo", "q_self")):
            out[name] = arr[:, j]
        if self.test is not None:
            out["mse_test"] = arr[:, 3]
        return out

    def probes(self, params):
        """Probes of docs/models/token_selection.md §A.5.1 per seed (:func:`closedform.nearest_neighbor.probe` on W, or
        on W_K^T W_Q):
        xi1 = tr(W11)/d, xi2 = -W33 and off = ||W - diag(xi1 I, 0, -xi2)||_F / ||W||_F.
        """
        W = effective_W(params)
        xi1, xi2, off = cf.probe(to_weights(params))
        return {
            name: torch.as_tensor(np.asarray(v), dtype=W.dtype, device=W.device)
            for name, v in zip(PROBE_NAMES, (xi1, xi2, off))
        }


# ----------------------------------------------------------------------------------------------------------------
# Data and configurations
# ----------------------------------------------------------------------------------------------------------------


def prompt_samples(
    task: cf.NearestNeighborTask,
    n_prompts: Annotated[int, _V.Range(integer=True, ge=1)],
    seeds: Annotated[Any, _seeds],
    *,
    duplicate_labels: bool = False,
) -> list[cf.Prompts]:
    """Labelled training prompts per seed by the exact recipe docs/models/token_selection.md §G.A (x's, then Rademacher
    labels from the same generator, ``closedform.nearest_neighbor.sample_prompts(task, n_prompts, seed, labels=True)``).

    ``duplicate_labels``: every prompt is followed by its copy with y -> -y (docs/models/token_selection.md §A.8; 2
    n_prompts rows, the same x's, so ``map`` on ``sample_prompts(task, n_prompts, seed)`` sees the same inputs).

    Parameters
    ----------
    n_prompts : int >= 1
    """
    n_prompts = check_int("n_prompts", n_prompts, min_value=1)
    out = []
    for s in np.atleast_1d(seeds):
        p = cf.sample_prompts(task, n_prompts, check_int("seed", s, min_value=0), labels=True)
        if duplicate_labels:
            p = cf.repeat_with_labels(p, np.stack([p.y, -p.y], axis=1))
        out.append(p)
    return out


def _gd_config(
    model: NearestNeighborAttention,
    n_steps: int,
    *,
    seeds=None,
    batch_size: int | None = None,
    saveat: SaveAt | None = None,
    checkpoint_every: int = 0,
    dtype: str = "float64",
) -> TrainConfig:
    """TrainConfig of GD at step eta = ``task.eta`` on the model's fixed prompts (docs/models/token_selection.md §A.4):
    full batch by default, minibatch SGD over per-epoch permutations with ``batch_size``. The evaluation batch is the
    training sample
    (docs/models/token_selection.md §0). ``seeds`` defaults to 0..len(data)-1 (labels of the runs; the prompts are those
    of the model).
    """
    if model.data is None:
        raise ValueError(
            "config('gd') needs a model with fixed prompts (NearestNeighborAttention(..., data=samples)); "
            "use config('sgd') for online training"
        )
    n = model.data[0].n_prompts
    seeds = tuple(range(len(model.data))) if seeds is None else seeds
    return TrainConfig(
        seeds=seeds,
        n_steps=n_steps,
        batch_size=n if batch_size is None else batch_size,
        dataset_size=n,
        eval_size=n,
        lr=model.task.eta,
        saveat=saveat or SaveAt(n=51),
        checkpoint_every=checkpoint_every,
        dtype=dtype,
    )


def _sgd_config(
    model: NearestNeighborAttention,
    n_steps: int,
    batch_size: int,
    *,
    seeds=(0,),
    eval_size: int = 2000,
    saveat: SaveAt | None = None,
    checkpoint_every: int = 0,
    refill: int = 32,
    dtype: str = "float64",
) -> TrainConfig:
    """TrainConfig of online SGD at step eta = ``task.eta`` (fresh prompts of docs/models/token_selection.md §A.1 every
    step), evaluated on a
    fixed batch of ``eval_size`` fresh prompts per seed.
    """
    if model.data is not None:
        raise ValueError("config('sgd') needs an online model (data=None); use config('gd') for fixed prompts")
    return TrainConfig(
        seeds=seeds,
        n_steps=n_steps,
        batch_size=batch_size,
        eval_size=eval_size,
        lr=model.task.eta,
        saveat=saveat or SaveAt(n=51),
        checkpoint_every=checkpoint_every,
        refill=refill,
        dtype=dtype,
    )


def build(task: cf.NearestNeighborTask, **kwargs) -> NearestNeighborAttention:
    """The torch model of ``task``: a :class:`NearestNeighborAttention` from the paper's W^(0)
    (docs/models/token_selection.md §A.4), on the fixed prompt samples ``data`` (one per seed, :func:`prompt_samples`)
    or online (``data=None``).

    ``kwargs`` go to :class:`NearestNeighborAttention` (``data``, ``parametrisation``, ``init_scale``, ``quantile``,
    ``test``, ``init_weights``).
    """
    if not isinstance(task, cf.NearestNeighborTask):
        raise TypeError(f"task must be a closedform.nearest_neighbor.NearestNeighborTask; got {type(task).__name__}")
    return NearestNeighborAttention(task, **kwargs)


#: The presets of :func:`config`: name -> factory.
CONFIGS = {"gd": _gd_config, "sgd": _sgd_config}


def config(name: str, *args, **kwargs) -> TrainConfig:
    """TrainConfig of a named training protocol (a paper figure's setup or a preset).

    Parameters
    ----------
    name : {"gd", "sgd"}
        * ``"gd"``: GD at step ``task.eta`` on the model's fixed prompts (docs/models/token_selection.md §A.4), full
          batch by default, minibatch SGD over per-epoch permutations with ``batch_size``; the evaluation batch is the
          training sample: ``config("gd", model, n_steps, *, seeds=None, batch_size=None, saveat=None,
          checkpoint_every=0, dtype="float64")``.
        * ``"sgd"``: online SGD at step ``task.eta`` on fresh prompts of docs/models/token_selection.md §A.1, evaluated
          on ``eval_size`` fresh prompts per seed: ``config("sgd", model, n_steps, batch_size, *, seeds=(0,),
          eval_size=2000, saveat=None, checkpoint_every=0, refill=32, dtype="float64")``.
    *args, **kwargs
        The arguments of that protocol, as listed.

    Raises
    ------
    ValueError
        If ``name`` is not one of the listed protocols.
    """
    return dispatch_config(CONFIGS, name, args, kwargs)


# ----------------------------------------------------------------------------------------------------------------
# Argument checks of every public function and class (dynamics.validation): the annotations (task class, int,
# float, bool, str, Mapping) plus the rules in their ``Annotated`` metadata (tensors: real, finite, their ndim). The
# model's sampler and training step call ``_embed`` and ``_predict`` unchecked (a finiteness test is a pass over the
# batch, and a device synchronisation on a GPU; the trainer's divergence check sees non-finite values).

from closedform.nearest_neighbor import _sample_list_check  # noqa: E402
from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)
from empirical.models import tensor_check as _tensor  # noqa: E402
from dynamics.validation import seed_or_seeds_check as _seeds  # noqa: E402
from empirical.models import tensors_check as _tensors  # noqa: E402


_PROMPT_SAMPLES = _sample_list_check(cf.Prompts)
_LEADING = tuple(range(2, 33))
_V.validate_module(globals())
