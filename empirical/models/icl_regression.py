"""Torch H-head softmax attention for in-context linear regression (He, Pan, Chen, Yang, ICML 2025).

Implements the empirical side of docs/models/icl_regression.md: the one-layer H-head softmax attention of
docs/models/icl_regression.md §2 (embedding (2.1), strict causal mask so the query attends to the L context tokens only,
logits scaled by 1/sqrt(d+1), read-out width 1, PyTorch-default initialisation, plain MSE loss), the single-head
linear-attention baseline of docs/models/icl_regression.md §7.6, the non-isotropic data law of
docs/models/icl_regression.md §8.1 (KMS covariance) and the multi-task law of docs/models/icl_regression.md §8.3. It is
trained by the shared trainer :func:`empirical.train.train` (Adam settings of docs/models/icl_regression.md §9 in
:func:`config("paper") <config>`).

Variables are the closed form's (:mod:`closedform.icl_regression`): ``omega_0 .. omega_{H-1}`` (effective KQ
coefficient: mean of the x-x diagonal of KQ^(h) = W_K^T W_Q / sqrt(d+1)), ``mu_0 .. mu_{H-1}`` (label entry of
OV^(h) = W_O W_V), ``mu_dot_omega`` and ``sum_mu`` (docs/models/icl_regression.md §3 extraction; code head h is math
head h+1, docs/models/icl_regression.md §0.2); the off-pattern magnitudes of docs/models/icl_regression.md §3 per head
(``kq_offdiag_h``, ``kq_yrow_h``, ``ov_x_h``); evaluation metrics ``risk`` (sigma^2 + E[(beta^T x_q - yhat)^2], the
variance-reduced true ICL loss R of docs/models/icl_regression.md §4.1) and ``mse`` (noisy y_q, the authors' validation
MSE of docs/models/icl_regression.md §9). Head classification (positive / negative / dummy), homogeneity and zero-sum
are computed from these with :func:`closedform.icl_regression.classify_heads` (see :func:`head_pattern`).

Speed: on CPU the single-task softmax model's training loss and its gradient come from one compiled pass
over the prompts (:func:`softmax_mse`: only the query's attention row, hand-derived softmax gradient with respect to
the circuits, a vectorisable exp), and isotropic prompts are labelled by a compiled loop from the counter-stream
normals; a seed's numbers never depend on the other seeds of the run. Evaluation and every other variant use torch.

Time axis: the Adam step count n (state after n updates, docs/models/icl_regression.md §0.2). Adam steps do not map to
F/2-flow time; overlays with the reduced flow align by a monotone reparametrisation (docs/models/icl_regression.md §12),
see :func:`align_to_flow`.

Symbol table (names as in the closed form; shapes carry the trainer's leading seed axis S)
------------------------------------------------------------------------------------------
Sections (§) in the last column are those of docs/models/icl_regression.md.

=============  ==================  ===================================================  ==================  =====
code name      paper symbol        meaning                                              shape               where
=============  ==================  ===================================================  ==================  =====
Wq, Wk, Wv     W_Q^(h), W_K, W_V   per-head query/key/value weights (torch out x in)    (S, H, p, p)        §2
Wo             W_O^(h)             per-head read-out block (columns of o_proj)          (S, H, n_out, p)    §2
KQ             KQ^(h)              W_K^T W_Q / sqrt(p) (softmax); W_K^T W_Q (linear)    (S, H, p, p)        (2.4)
OV             OV^(h)              W_O W_V                                              (S, H, n_out, p)    (2.4)
omega, mu      omega_h, mu_h       mean x-x diagonal of KQ^(h); OV^(h) label entry      (S,) per head       §3
X, y, xq, yq   x_i, y_i, x_q, y_q  prompt (L context examples and the query)            (S, n, L, d) ...    §1
beta           beta                task vector N(0, I_d/d)                              (S, n, d)           §1
p              d + n_out           token width (embedding (2.1))                        scalar              §2
=============  ==================  ===================================================  ==================  =====

REFERENCE: see :data:`closedform.icl_regression.REFERENCE` (arXiv:2503.12734).
"""

from __future__ import annotations

from typing import Annotated, Any
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numba import njit

from closedform import icl_regression as cf
from dynamics.validation import check_choice, check_int
from empirical.models import dispatch_config
from empirical.models._fastexp import exp_shifted as _exp_shifted
from empirical.train import Schedule, TrainConfig, per_seed

__all__ = [
    "build",
    "ICLAttention",
    "ICLModelSpec",
    "align_to_flow",
    "circuit_arrays",
    "circuits",
    "head_pattern",
    "config",
    "pattern_params",
    "predict",
    "risk_at_length",
    "softmax_mse",
    "stack_heads",
]

REFERENCE = cf.REFERENCE
ATTENTIONS = ("softmax", "linear")
_DEN_FLOOR = 1e-150  # floor of the denominators of the off-pattern ratios (finite logs at an exactly-zero pattern)


@dataclass(frozen=True, kw_only=True)
class ICLModelSpec:
    """What defines the torch model of an ICL run (stored with the run; resume refuses another one).

    Parameters
    ----------
    task : closedform.icl_regression.ICLRegressionTask
        d, training prompt length L and label-noise variance sigma^2 (docs/models/icl_regression.md §1).
    H : int >= 1
        Number of heads (docs/models/icl_regression.md §2). Linear attention (docs/models/icl_regression.md §7.6) is
        single-head: H must be 1.
    attention : {"softmax", "linear"}
        ``softmax``: the model of docs/models/icl_regression.md §2 (strict causal mask, logits z_i^T W_K^T W_Q z_q /
        sqrt(d+1)). ``linear``: TF_lin of docs/models/icl_regression.md §7.6, yhat = OV . sum_{tokens} z (z^T W_K^T W_Q
        z_q) / L_train (no softmax, no mask: the sum runs over the L context tokens and the query token; fixed
        normalisation 1/task.L).
    rho : float in (-1, 1) or None
        Non-isotropic covariates x ~ N(0, Sigma), Sigma_ij = rho^|i-j| (docs/models/icl_regression.md §8.1); None =
        isotropic.
    supports : tuple of tuples of int, or None
        Multi-task regression (docs/models/icl_regression.md §8.3): one 0-based coordinate support S_j per task; the
        tokens then carry n_task labels (width d + n_task, read-out width n_task). None = single-task.
    """

    task: cf.ICLRegressionTask
    H: Annotated[int, _V.Range(integer=True, ge=1)]
    attention: str = "softmax"
    rho: Annotated[float | None, _V.Range(gt=-1, lt=1)] = None
    supports: Annotated[tuple[tuple[int, ...], ...] | None, _V.sequence_check] = None

    def __post_init__(self):
        if not isinstance(self.task, cf.ICLRegressionTask):
            raise ValueError(
                f"task must be a closedform.icl_regression.ICLRegressionTask; got {type(self.task).__name__}"
            )
        object.__setattr__(self, "H", check_int("H", self.H, min_value=1))
        check_choice("attention", self.attention, ATTENTIONS)
        if self.attention == "linear" and self.H != 1:
            raise ValueError(
                f"H must be 1 for attention='linear' (single-head baseline, "
                f"docs/models/icl_regression.md §7.6); got {self.H}"
            )
        if self.rho is not None:
            cf.kms_covariance(self.task.d, self.rho)  # validates rho in (-1, 1)
            object.__setattr__(self, "rho", float(self.rho))
        if self.supports is not None:
            sup = tuple(tuple(sorted(int(c) for c in s)) for s in self.supports)
            if not sup or any(not s for s in sup):
                raise ValueError(
                    f"supports must be a non-empty tuple of non-empty coordinate tuples; got {self.supports!r}"
                )
            for s in sup:
                if len(set(s)) != len(s) or s[0] < 0 or s[-1] >= self.task.d:
                    raise ValueError(
                        f"supports must hold distinct coordinates in [0, d-1 = {self.task.d - 1}]; got {s}"
                    )
            if self.rho is not None:
                raise ValueError(
                    "rho (docs/models/icl_regression.md §8.1) and supports "
                    "(docs/models/icl_regression.md §8.3) cannot be combined"
                )

            object.__setattr__(self, "supports", sup)

    @property
    def n_out(self) -> int:
        """Number of label slots per token (1, or n_task for docs/models/icl_regression.md §8.3)."""
        return 1 if self.supports is None else len(self.supports)

    @property
    def width(self) -> int:
        """Token width p = d + n_out (embedding (2.1))."""
        return self.task.d + self.n_out

    @property
    def logit_scale(self) -> float:
        """1/sqrt(p) for softmax attention (docs/models/icl_regression.md §2: 1/sqrt(d+1)); 1 for linear attention
        (docs/models/icl_regression.md §7.6).
        """
        return 1.0 / math.sqrt(self.width) if self.attention == "softmax" else 1.0

    def covariance(self) -> np.ndarray | None:
        """The KMS covariance of docs/models/icl_regression.md §8.1, or None (isotropic)."""
        return None if self.rho is None else cf.kms_covariance(self.task.d, self.rho)


class ICLAttention:
    """One-layer H-head attention on ICL regression prompts, as a :class:`empirical.train.TorchModel`.

    docs/models/icl_regression.md §2 (model, PyTorch-default init U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = p for
    q/k/v and H p for o), docs/models/icl_regression.md §1, §8.1, §8.3 (data law), loss = plain MSE E[(y_q - yhat)^2]
    (torch ``MSELoss``, mean, no 1/2; docs/models/icl_regression.md §0).

    Parameters
    ----------
    task : ICLRegressionTask
    H : int
    attention, rho, supports :
        See :class:`ICLModelSpec`.
    omega0, mu0 : sequence of H floats, optional
        If given, start every seed on the reduced pattern (3.1) at (omega0, mu0) (:func:`pattern_params`) instead of
        the PyTorch-default init (linattn-icl's zeroed blocks; start on the theory's manifold).
    log_circuits : bool
        Also log every entry of the circuits (2.4): ``KQ_{h}_{i}_{j}`` (row i = key feature, column j = query
        feature) and ``OV_{h}_{j}`` for the label row (single-task models only), for the heatmaps of
        docs/models/icl_regression.md §9 (Figs. 1, 3, 5).
    """

    name = cf.MODEL
    time_unit = "Adam step n (state after n updates, docs/models/icl_regression.md §0.2)"

    def __init__(
        self,
        task: cf.ICLRegressionTask,
        H: int,
        *,
        attention: str = "softmax",
        rho: float | None = None,
        supports: Annotated[Any, _V.sequence_check] = None,
        omega0: Annotated[Any, _V.Range(array=True)] = None,
        mu0: Annotated[Any, _V.Range(array=True)] = None,
        log_circuits: bool = False,
    ):
        self.spec = ICLModelSpec(task=task, H=H, attention=attention, rho=rho, supports=supports)
        self.log_circuits = bool(log_circuits)
        if self.log_circuits and supports is not None:
            raise ValueError("log_circuits is available for single-task models only (supports=None)")
        if (omega0 is None) != (mu0 is None):
            raise ValueError("omega0 and mu0 must be given together (pattern initialisation) or both omitted")
        self.pattern0 = None
        if omega0 is not None:
            om = np.asarray(omega0, dtype=np.float64).reshape(-1)
            m = np.asarray(mu0, dtype=np.float64).reshape(-1)
            if om.shape != (H,) or m.shape != (H,) or not (np.all(np.isfinite(om)) and np.all(np.isfinite(m))):
                raise ValueError(f"omega0 and mu0 must be finite with shape (H={H},); got {om.shape}, {m.shape}")
            self.pattern0 = (om, m)
        sigma = self.spec.covariance()
        self._chol = None if sigma is None else np.linalg.cholesky(sigma)

    # -- protocol ---------------------------------------------------------------------------------------------------

    def init_params(self, generators, *, device, dtype):
        """PyTorch-default init of q/k/v/o_proj (docs/models/icl_regression.md §2), per seed from its ``init`` stream;
        or the pattern (3.1).
        """
        if self.pattern0 is not None:
            S = len(generators)
            om, m = self.pattern0
            return pattern_params(
                self.spec,
                np.broadcast_to(om, (S, om.size)),
                np.broadcast_to(m, (S, m.size)),
                device=device,
                dtype=dtype,
            )
        H, p, n_out = self.spec.H, self.spec.width, self.spec.n_out

        def draw(g):
            def linear(n_rows, fan_in):  # nn.Linear default: kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(fan_in), ..)
                bound = 1.0 / math.sqrt(fan_in)
                return (torch.rand(n_rows, fan_in, generator=g, device=device, dtype=dtype) * 2.0 - 1.0) * bound

            q, k, v = (
                linear(H * p, p).reshape(H, p, p) for _ in range(3)
            )  # rows h*p:(h+1)*p = head h (docs/models/icl_regression.md §2)
            o = linear(n_out, H * p).reshape(n_out, H, p).transpose(0, 1).contiguous()  # columns of head h
            return {"Wq": q, "Wk": k, "Wv": v, "Wo": o}

        return per_seed(generators, draw)

    def sample(self, generators, n, *, device, dtype, L: int | None = None):
        """``n`` prompts per seed from the data law of docs/models/icl_regression.md §1 (or
        docs/models/icl_regression.md §8.1, §8.3), prompt length ``L`` (default task.L).

        Draw order per seed (one ``torch.Generator`` each): X, xq (covariates, then the KMS factor of
        docs/models/icl_regression.md §8.1), beta, context noise, query noise. Returns X (S, n, L, d), xq (S, n, d), y
        (S, n, L, n_out), yq (S, n, n_out), beta (S, n, d) or, for multi-task, (S, n, n_task, d) (beta_j zero outside
        S_j).
        """
        L = self.spec.task.L if L is None else check_int("L", L, min_value=1)

        def draw(g):
            return self._prompts(
                lambda shape: torch.randn(*shape, generator=g, device=device, dtype=dtype),
                n,
                L,
                device=device,
                dtype=dtype,
            )

        return per_seed(generators, draw)

    def draw(self, rng, n, *, device, dtype, L: int | None = None):
        """The law of :meth:`sample` drawn for all seeds at once from a counter-keyed block stream ``rng``
        (:class:`empirical.seeding.BlockRNG`; the trainer uses it for training and evaluation data).

        Same draw order as :meth:`sample` (X, xq, beta, context noise, query noise), in float64, cast to ``dtype``.
        Seed ``s`` draws what its single-seed run draws (the stream depends only on (seed, stream, block)).
        """
        L = self.spec.task.L if L is None else check_int("L", L, min_value=1)
        spec = self.spec
        if spec.supports is None and spec.rho is None and torch.device(device).type == "cpu":
            # Isotropic single-task law on CPU: the same normals in the same order, combined by one compiled loop
            # (beta scaled, y = X beta + sigma eps row by row) instead of a batched matmul of 1 x d by d x 1 products.
            X, xq, beta, eps, eps_q = (
                rng.normal(shape) for shape in ((n, L, spec.task.d), (n, spec.task.d), (n, spec.task.d), (n, L), (n,))
            )
            # the labels overwrite their noise draws in place (no allocation per step: the buffers are the rng's)
            _label_prompts(
                X.numpy(),
                xq.numpy(),
                beta.numpy(),
                eps.numpy(),
                eps_q.numpy(),
                1.0 / math.sqrt(spec.task.d),
                math.sqrt(spec.task.sigma2),
            )
            batch = {"X": X, "xq": xq, "y": eps[..., None], "yq": eps_q[..., None], "beta": beta}
            return batch if dtype == torch.float64 else {k: v.to(dtype) for k, v in batch.items()}
        return self._prompts(lambda shape: rng.normal(shape, dtype=dtype).to(device), n, L, device=device, dtype=dtype)

    def _prompts(self, normal, n, L, *, device, dtype):
        """Prompts of docs/models/icl_regression.md §1, §8.1, §8.3 from ``normal(shape)``: standard normals of
        ``shape``, with or without a
        leading seed axis (every operation broadcasts over it).
        """
        spec = self.spec
        d, s2 = spec.task.d, spec.task.sigma2
        X = normal((n, L, d))
        xq = normal((n, d))
        if self._chol is not None:
            chol = torch.as_tensor(self._chol, device=device, dtype=dtype)
            X = X @ chol.T
            xq = xq @ chol.T
        if spec.supports is None:
            beta = normal((n, d)) / math.sqrt(d)
            sd = math.sqrt(s2)
            y = X @ beta[..., None] + sd * normal((n, L, 1))
            yq = (xq * beta).sum(-1, keepdim=True) + sd * normal((n, 1))
        else:
            #  docs/models/icl_regression.md §8.3 [C]: beta_j ~ N(0, I_{|S_j|}) (unscaled), context noise variance |S_j|
            # sigma^2, no query noise
            mask = torch.zeros(len(spec.supports), d, device=device, dtype=dtype)
            for j, sup in enumerate(spec.supports):
                mask[j, list(sup)] = 1.0
            beta = normal((n, len(spec.supports), d)) * mask
            sd = torch.sqrt(mask.sum(-1) * s2)  # (n_task,)
            y = torch.einsum("...nld,...njd->...nlj", X, beta) + sd * normal((n, L, len(spec.supports)))
            yq = torch.einsum("...nd,...njd->...nj", xq, beta)
        return {"X": X, "xq": xq, "y": y, "yq": yq, "beta": beta}

    def loss(self, params, batch, hyper=None):
        """Plain MSE mean over the batch (and over the n_task outputs) of (y_q - yhat)^2:
        docs/models/icl_regression.md §0, (2.5); (S,).

        Single-task softmax attention on CPU uses the compiled one-pass :func:`softmax_mse` (loss and analytic
        gradient in one pass over the prompts); otherwise torch autograd of :func:`predict`.
        """
        spec = self.spec
        if spec.attention == "softmax" and spec.supports is None and batch["X"].device.type == "cpu":
            KQ, OV = circuits(spec, params)  # softmax_mse without its argument checks (a training step):
            return _SoftmaxMSE.apply(KQ, OV, batch["X"], batch["y"], batch["xq"], batch["yq"])
        err = batch["yq"] - predict(self.spec, params, batch)
        return (err * err).mean(dim=(1, 2))

    def evaluate(self, params, batch, hyper=None):
        """``mse`` (noisy y_q, docs/models/icl_regression.md §9 validation MSE) and ``risk`` = sigma^2 + mean (beta^T
        x_q - yhat)^2 (docs/models/icl_regression.md §4.1).
        """
        yhat = predict(self.spec, params, batch)
        err = batch["yq"] - yhat
        out = {"mse": (err * err).mean(dim=(1, 2))}
        if self.spec.supports is None:
            clean = (batch["xq"] * batch["beta"]).sum(-1, keepdim=True) - yhat
            out["risk"] = self.spec.task.sigma2 + (clean * clean).mean(dim=(1, 2))
        return out

    def probes(self, params):
        """Order parameters of docs/models/icl_regression.md §3 per seed: omega_h, mu_h, mu_dot_omega, sum_mu and the
        off-pattern ratios.
        """
        spec = self.spec
        d, H = spec.task.d, spec.H
        KQ, OV = circuits(spec, params)
        XX = KQ[..., :d, :d]
        diag = torch.diagonal(XX, dim1=-2, dim2=-1)  # (S, H, d)
        dnorm = torch.linalg.vector_norm(diag, dim=-1).clamp_min(_DEN_FLOOR)
        off = torch.linalg.matrix_norm(XX - torch.diag_embed(diag))
        out = {}
        if spec.supports is None:
            omega = diag.mean(-1)  # trace(KQ_h[:d, :d]) / d (docs/models/icl_regression.md §3, 0-based)
            mu = OV[:, :, 0, d]  # OV_h[d], the label entry
            for h in range(H):
                out[f"omega_{h}"] = omega[:, h]
            for h in range(H):
                out[f"mu_{h}"] = mu[:, h]
            out["mu_dot_omega"] = (mu * omega).sum(-1)
            out["sum_mu"] = mu.sum(-1)
            yrow = torch.linalg.vector_norm(KQ[..., d, :d], dim=-1)
            ovx = torch.linalg.vector_norm(OV[:, :, 0, :d], dim=-1)
            ovx = ovx / OV[:, :, 0, d].abs().clamp_min(_DEN_FLOOR)
        else:
            #  docs/models/icl_regression.md §8.3: omega per coordinate group (coordinates with the same task
            # membership), mu per task
            for h in range(H):
                for gname, coords in _groups(spec):
                    out[f"omega_{h}_{gname}"] = diag[:, h, list(coords)].mean(-1)
            for h in range(H):
                for j in range(spec.n_out):
                    out[f"mu_{h}_t{j}"] = OV[:, h, j, d + j]
            for j in range(spec.n_out):
                out[f"sum_mu_t{j}"] = OV[:, :, j, d + j].sum(-1)
            yrow = torch.linalg.matrix_norm(KQ[..., d:, :d])
            lab = torch.diagonal(OV[..., d:], dim1=-2, dim2=-1)
            ovx = torch.linalg.matrix_norm(OV[..., :d]) / torch.linalg.vector_norm(lab, dim=-1).clamp_min(_DEN_FLOOR)
        for h in range(H):
            out[f"kq_offdiag_{h}"] = off[:, h] / dnorm[:, h]
            out[f"kq_yrow_{h}"] = yrow[:, h] / dnorm[:, h]
            out[f"ov_x_{h}"] = ovx[:, h]
        if self.log_circuits:
            p = spec.width
            for h in range(H):
                for i in range(p):
                    for j in range(p):
                        out[f"KQ_{h}_{i}_{j}"] = KQ[:, h, i, j]
                for j in range(p):
                    out[f"OV_{h}_{j}"] = OV[:, h, 0, j]
        return out


@njit(cache=True)
def _label_prompts(X, xq, beta, eps, eps_q, beta_scale, sd):  # pragma: no cover (compiled; tested via draw)
    """docs/models/icl_regression.md §1 labels from standard normals, in place, each seed by itself: beta <- beta_scale
    * beta, then the noise draws become the labels, eps[s, b, i] <- x_i . beta + sd eps[s, b, i] and eps_q[s, b] <- x_q
    . beta +
    sd eps_q[s, b].
    """
    S, n, L, d = X.shape
    for s in range(S):
        for b in range(n):
            for j in range(d):
                beta[s, b, j] *= beta_scale
            for i in range(L):
                t = 0.0
                for j in range(d):
                    t += X[s, b, i, j] * beta[s, b, j]
                eps[s, b, i] = t + sd * eps[s, b, i]
            t = 0.0
            for j in range(d):
                t += xq[s, b, j] * beta[s, b, j]
            eps_q[s, b] = t + sd * eps_q[s, b]


def _groups(spec: ICLModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    """Coordinate groups of docs/models/icl_regression.md §8.3: coordinates with the same set of tasks, named by it
    (e.g. ``t0``, ``t0t1``).
    """
    groups: dict[str, list[int]] = {}
    for c in range(spec.task.d):
        key = "".join(f"t{j}" for j, s in enumerate(spec.supports) if c in s) or "none"
        groups.setdefault(key, []).append(c)
    return [(k, tuple(v)) for k, v in groups.items()]


# ----------------------------------------------------------------------------------------------------------------------
# Circuits, prediction, pattern initialisation
# ----------------------------------------------------------------------------------------------------------------------
def _spec_of(model_or_spec) -> ICLModelSpec:
    spec = getattr(model_or_spec, "spec", model_or_spec)
    if not isinstance(spec, ICLModelSpec):
        raise ValueError(f"expected an ICLAttention or ICLModelSpec; got {type(model_or_spec).__name__}")
    return spec


def circuits(
    model_or_spec: Annotated[Any, _MODEL], params: Mapping[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Effective circuits (2.4): KQ^(h) = W_K^T W_Q * logit_scale (S, H, p, p) and OV^(h) = W_O W_V (S, H, n_out, p).

    Rows of KQ index key features, columns query features (docs/models/icl_regression.md §2); torch weights are out x
    in.
    """
    spec = _spec_of(model_or_spec)
    KQ = params["Wk"].transpose(-1, -2) @ params["Wq"] * spec.logit_scale
    OV = params["Wo"] @ params["Wv"]
    return KQ, OV


def predict(
    model_or_spec: Annotated[Any, _MODEL], params: Mapping[str, torch.Tensor], batch: Mapping[str, torch.Tensor]
) -> torch.Tensor:
    """The model's prediction yhat (S, n, n_out) for a batch (S, n, ...): spec (2.3) (softmax) or
    docs/models/icl_regression.md §7.6 (linear).

    Softmax: yhat = sum_h OV^(h) . sum_{i<=L} p_i^(h) z_i, p^(h) = softmax_i(z_i^T KQ^(h) z_q) (strict causal mask:
    the query attends to the context only). The prompt length is read from the batch (length generalisation).
    """
    spec = _spec_of(model_or_spec)
    return _predict_circuits(spec, *circuits(spec, params), batch)


def _predict_circuits(spec: ICLModelSpec, KQ: torch.Tensor, OV: torch.Tensor, batch) -> torch.Tensor:
    """:func:`predict` from the circuits (2.4) KQ (S, H, p, p) and OV (S, H, n_out, p)."""
    d = spec.task.d
    X, y, xq = batch["X"], batch["y"], batch["xq"]
    kq_q = torch.einsum("shpd,snd->snhp", KQ[..., :d], xq)  # KQ^(h) z_q (the query's label slots are 0)
    if spec.attention == "softmax":
        # z_i = (x_i; y_i) kept split (no concatenated copy of the prompt): logit_i = x_i . (KQ z_q)[:d] +
        # y_i . (KQ z_q)[d:], pooled = (sum_i p_i x_i; sum_i p_i y_i); ~1.5x faster than on the concatenation
        logits = torch.einsum("snld,snhd->snhl", X, kq_q[..., :d]) + torch.einsum("snlo,snho->snhl", y, kq_q[..., d:])
        weights = torch.softmax(logits, dim=-1)  # over the L context tokens (strict causal mask)
        px = weights @ X  # sum_i p_i x_i, (S, n, H, d)
        if spec.n_out == 1:  # elementwise products and sums: cheaper than einsum/cat for these small last axes
            py = (weights * y[..., 0][:, :, None, :]).sum(-1)  # sum_i p_i y_i, (S, n, H)
            out = (px * OV[:, None, :, 0, :d]).sum(-1) + py * OV[:, None, :, 0, d]
            return out.sum(-1)[..., None]
        pooled = torch.cat([px, weights @ y], dim=-1)  # (S, n, H, p)
    else:
        #  linear attention (docs/models/icl_regression.md §7.6): no softmax, no mask (query token included), fixed
        # 1/L_train
        Z = torch.cat([X, y], dim=-1)  # (S, n, L, p): z_i = (x_i; y_i)
        logits = torch.einsum("snlp,snhp->snhl", Z, kq_q)
        zq_score = torch.einsum("snhd,snd->snh", kq_q[..., :d], xq)  # z_q^T KQ z_q
        pooled = torch.einsum("snhl,snlp->snhp", logits, Z)
        pooled = pooled.clone()
        pooled[..., :d] = pooled[..., :d] + zq_score[..., None] * xq[:, :, None, :]
        pooled = pooled / spec.task.L
    return torch.einsum("shop,snhp->sno", OV, pooled)


# ----------------------------------------------------------------------------------------------------------------------
# Compiled loss and gradient of single-task softmax attention (CPU)
# ----------------------------------------------------------------------------------------------------------------------
@njit(cache=True, fastmath={"reassoc", "contract"})
def _softmax_mse_kernel(X, y, xq, yq, A, OV, with_grad, loss, gA, gOV):  # pragma: no cover (compiled)
    """Per seed s: loss[s] = (1/n) sum_b (y_q - yhat)^2 of spec (2.3) and, if ``with_grad``, its gradients gA[s] =
    d loss / d KQ[:, :, :, :d] (S, H, p, d) and gOV[s] = d loss / d OV[:, :, 0, :] (S, H, p). See :func:`softmax_mse`.

    Inputs: X (S, n, L, d), y (S, n, L), xq (S, n, d), yq (S, n), A = KQ[..., :d] (S, H, p, d) (the query's label
    slot is 0, so the other columns of KQ never enter), OV (S, H, p). Per prompt and head: u = A x_q, logits
    l_i = x_i.u[:d] + y_i u[d], p = softmax(l), pooled (px, py) = sum_i p_i (x_i, y_i), out_h = OV.(px, py).
    Backward with g = 2 (yhat - y_q)/n: dOV += g (px, py); dl_i = g p_i (OV.z_i - out_h); du = sum_i dl_i z_i;
    dA += du x_q^T. The prompt is copied feature-major (d, L) so the token loops are contiguous.
    """
    S, n, L, d = X.shape
    H, p = A.shape[1], A.shape[2]
    Xt = np.empty((d, L))
    yt = np.empty(L)
    lg = np.empty(L)
    kbits = np.empty(L, dtype=np.int64)
    kscale = kbits.view(np.float64)
    u = np.empty(p)
    px = np.empty((H, d))
    py = np.empty(H)
    out = np.empty(H)
    P = np.empty((H, L))
    for s in range(S):
        acc = 0.0
        if with_grad:
            gA[s] = 0.0
            gOV[s] = 0.0
        for b in range(n):
            for i in range(L):
                for j in range(d):
                    Xt[j, i] = X[s, b, i, j]
                yt[i] = y[s, b, i]
            yhat = 0.0
            for h in range(H):
                Ph = P[h]
                for r in range(p):
                    t = 0.0
                    for c in range(d):
                        t += A[s, h, r, c] * xq[s, b, c]
                    u[r] = t
                uy = u[d]
                for i in range(L):
                    lg[i] = yt[i] * uy
                for j in range(d):
                    uj = u[j]
                    for i in range(L):
                        lg[i] += Xt[j, i] * uj
                m = lg[0]
                for i in range(1, L):
                    m = max(m, lg[i])
                inv = 1.0 / _exp_shifted(lg, m, L, Ph, kbits, kscale)
                for i in range(L):
                    Ph[i] *= inv
                o = 0.0
                for j in range(d):
                    t = 0.0
                    for i in range(L):
                        t += Ph[i] * Xt[j, i]
                    px[h, j] = t
                    o += OV[s, h, j] * t
                t = 0.0
                for i in range(L):
                    t += Ph[i] * yt[i]
                py[h] = t
                o += OV[s, h, d] * t
                out[h] = o
                yhat += o
            res = yhat - yq[s, b]
            acc += res * res
            if with_grad:
                g = 2.0 * res / n
                for h in range(H):
                    Ph = P[h]
                    for j in range(d):
                        gOV[s, h, j] += g * px[h, j]
                    gOV[s, h, d] += g * py[h]
                    oy = OV[s, h, d]
                    for i in range(L):
                        lg[i] = yt[i] * oy - out[h]
                    for j in range(d):
                        oj = OV[s, h, j]
                        for i in range(L):
                            lg[i] += Xt[j, i] * oj
                    for i in range(L):
                        lg[i] *= g * Ph[i]
                    for j in range(d):
                        t = 0.0
                        for i in range(L):
                            t += lg[i] * Xt[j, i]
                        u[j] = t
                    t = 0.0
                    for i in range(L):
                        t += lg[i] * yt[i]
                    u[d] = t
                    for r in range(p):
                        ur = u[r]
                        for c in range(d):
                            gA[s, h, r, c] += ur * xq[s, b, c]
        loss[s] = acc / n


class _SoftmaxMSE(torch.autograd.Function):
    """Autograd wrapper of :func:`_softmax_mse_kernel`: the gradient is formed in the forward pass and scaled by the
    incoming per-seed gradient in the backward pass.
    """

    @staticmethod
    def forward(ctx, KQ, OV, X, y, xq, yq):
        S, H, p, _ = KQ.shape
        d = X.shape[-1]
        with_grad = KQ.requires_grad or OV.requires_grad
        loss = np.empty(S)
        gA = np.empty((S, H, p, d))
        gOV = np.empty((S, H, p))
        arrays = (X, y[..., 0], xq, yq[..., 0], KQ[..., :d], OV[:, :, 0, :])
        _softmax_mse_kernel(*(t.detach().contiguous().numpy() for t in arrays), with_grad, loss, gA, gOV)
        dtype = KQ.dtype
        gKQ = torch.zeros(KQ.shape, dtype=dtype)
        gKQ[..., :d] = torch.from_numpy(gA)
        ctx.save_for_backward(gKQ, torch.from_numpy(gOV).to(dtype)[:, :, None, :])
        return torch.from_numpy(loss).to(dtype)

    @staticmethod
    def backward(ctx, grad_loss):
        gKQ, gOV = ctx.saved_tensors
        scale = grad_loss[:, None, None, None]
        return scale * gKQ, scale * gOV, None, None, None, None


def softmax_mse(
    model_or_spec: Annotated[Any, _MODEL],
    KQ: Annotated[torch.Tensor, _tensor(ndim=4)],
    OV: Annotated[torch.Tensor, _tensor(ndim=4)],
    batch: Annotated[Mapping[str, torch.Tensor], _tensors(("X", "y", "xq", "yq"))],
) -> torch.Tensor:
    """Per-seed MSE (1/n) sum_b (y_q - yhat_b)^2 of single-task softmax attention, shape (S,), differentiable in the
    circuits KQ (S, H, p, p) and OV (S, H, 1, p) (docs/models/icl_regression.md §2, Eqs. (2.3)-(2.5)).

    The same number as :meth:`ICLAttention.loss`'s torch path, computed by a compiled kernel that reads each prompt
    once (only the query's row of attention: its logits over the L context tokens) and forms the gradient on the
    way with the hand-derived softmax derivatives (tested against torch autograd to 1e-12). Each seed is computed by
    itself, so a seed trained among others is bitwise equal to its single-seed run. CPU tensors (float64 or float32;
    the kernel computes in float64 and returns the input dtype). The tensors are checked (real, finite, consistent
    shapes); the training step calls the kernel's autograd function directly.
    """
    spec = _spec_of(model_or_spec)
    if spec.attention != "softmax" or spec.supports is not None:
        raise ValueError("softmax_mse needs single-task softmax attention (attention='softmax', supports=None)")
    H, p, d = spec.H, spec.width, spec.task.d
    _V.check_shapes(
        KQ=(KQ, f"S {H} {p} {p}"),
        OV=(OV, f"S {H} 1 {p}"),
        **{
            "batch['X']": (batch["X"], f"S n L {d}"),
            "batch['y']": (batch["y"], "S n L 1"),
            "batch['xq']": (batch["xq"], f"S n {d}"),
            "batch['yq']": (batch["yq"], "S n 1"),
        },
    )
    return _SoftmaxMSE.apply(KQ, OV, batch["X"], batch["y"], batch["xq"], batch["yq"])


def pattern_params(
    model_or_spec: Annotated[Any, _MODEL],
    omega: Annotated[Any, _V.Range(array=True)],
    mu: Annotated[Any, _V.Range(array=True)],
    *,
    device: Annotated[Any, _V.Instance(str, torch.device)] = "cpu",
    dtype: Annotated[Any, _V.Instance(torch.dtype)] = torch.float64,
) -> dict[str, torch.Tensor]:
    """Weights realising the reduced pattern (3.1) exactly: KQ^(h) = diag(omega_h I_d, 0), OV^(h) = (0_d, mu_h).

    ``init_from_state``: W_K = I, W_Q = diag(omega_h I_d, 0) / logit_scale, W_V = I,
    W_O = (0, ..., 0, mu_h). :meth:`ICLAttention.probes` maps them back to (omega, mu) exactly.

    Parameters
    ----------
    omega, mu : (S, H) or (H,) array_like
        Per seed and head (a 1-D input is one seed). For multi-task specs (docs/models/icl_regression.md §8.3) mu is (S,
        H, n_task) (the label entry of each task's read-out row) and omega is shared by all coordinates.

    Returns
    -------
    dict Wq, Wk, Wv, Wo with a leading seed axis.
    """
    spec = _spec_of(model_or_spec)
    d, H, p, n_out = spec.task.d, spec.H, spec.width, spec.n_out
    omega = torch.as_tensor(np.array(omega, dtype=np.float64), device=device, dtype=dtype)
    mu = torch.as_tensor(np.array(mu, dtype=np.float64), device=device, dtype=dtype)
    if omega.ndim == 1:
        omega, mu = omega[None], mu[None]
    if spec.supports is None and mu.ndim == 2:
        mu = mu[..., None]
    S = omega.shape[0]
    if omega.shape != (S, H) or mu.shape != (S, H, n_out):
        raise ValueError(
            f"omega must have shape (S, H={H}) and mu (S, H, n_out={n_out}) (or (S, H) for one "
            f"task); got {tuple(omega.shape)} and {tuple(mu.shape)}"
        )
    eye = torch.eye(p, device=device, dtype=dtype).expand(S, H, p, p).clone()
    sel = torch.zeros(p, device=device, dtype=dtype)
    sel[:d] = 1.0
    Wq = torch.diag_embed(omega[..., None] * sel) / spec.logit_scale
    Wo = torch.zeros(S, H, n_out, p, device=device, dtype=dtype)
    for j in range(n_out):
        Wo[:, :, j, d + j] = mu[:, :, j]
    return {"Wq": Wq, "Wk": eye, "Wv": eye.clone(), "Wo": Wo}


# ----------------------------------------------------------------------------------------------------------------------
# Evaluation helpers
# ----------------------------------------------------------------------------------------------------------------------
def risk_at_length(
    model: ICLAttention,
    params: Mapping[str, torch.Tensor],
    L_test: int,
    n_prompts: int,
    seed: int = 0,
    *,
    chunk: int = 20000,
    noisy: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Test MSE of trained weights at prompt length L' (length generalisation, docs/models/icl_regression.md §7.6, §9
    Fig. 4(a)/8).

    Fresh prompts of length ``L_test`` from the model's data law (the same prompts for every seed of ``params``,
    drawn from ``torch.Generator(cpu).manual_seed(seed)`` on the CPU and moved to the weights' device).
    ``noisy=True`` averages (y_q - yhat)^2 (the toolkit's true MSE, no sigma^2 offset, docs/models/icl_regression.md §10
    item 2); ``noisy=False`` averages sigma^2 + (beta^T x_q - yhat)^2 (same expectation, smaller variance).

    Returns
    -------
    (mean, se) : (S,) float64 arrays (SE = std/sqrt(n_prompts) over prompts).
    """
    L_test = check_int("L_test", L_test, min_value=1)
    n_prompts = check_int("n_prompts", n_prompts, min_value=2)
    chunk = check_int("chunk", chunk, min_value=1)
    ref = next(iter(params.values()))
    S, device, dtype = ref.shape[0], ref.device, ref.dtype
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    vals = []
    done = 0
    with torch.no_grad():
        while done < n_prompts:
            nb = min(chunk, n_prompts - done)
            batch = model.sample([g], nb, device="cpu", dtype=dtype, L=L_test)
            batch = {k: v.to(device).expand(S, *v.shape[1:]) for k, v in batch.items()}
            yhat = predict(model, params, batch)
            if noisy or model.spec.supports is not None:
                err = batch["yq"] - yhat
                v = (err * err).mean(-1)
            else:
                clean = (batch["xq"] * batch["beta"]).sum(-1, keepdim=True) - yhat
                v = model.spec.task.sigma2 + (clean * clean).mean(-1)
            vals.append(v.cpu().numpy())
            done += nb
    v = np.concatenate(vals, axis=1)
    return v.mean(axis=1), v.std(axis=1, ddof=1) / np.sqrt(v.shape[1])


def stack_heads(traj: Annotated[Any, _V.Instance(_xr.Dataset)], H: int) -> tuple[np.ndarray, np.ndarray]:
    """(omega, mu) arrays (n_traj, n_time, H) from a Trajectory with variables omega_0.., mu_0.. (torch or flow)."""
    H = check_int("H", H, min_value=1)
    omega = np.stack([np.asarray(traj[f"omega_{h}"]) for h in range(H)], axis=-1)
    mu = np.stack([np.asarray(traj[f"mu_{h}"]) for h in range(H)], axis=-1)
    return omega, mu


def circuit_arrays(traj: Annotated[Any, _V.Instance(_xr.Dataset)], H: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Logged circuits (``log_circuits=True``) as arrays: KQ (n_traj, n_time, H, p, p) and OV (n_traj, n_time, H, p).

    Spec (2.4); rows of KQ index key features, columns query features; OV is the label read-out row.
    """
    H = check_int("H", H, min_value=1)
    p = check_int("width", width, min_value=2)
    KQ = np.stack(
        [
            np.stack([np.stack([np.asarray(traj[f"KQ_{h}_{i}_{j}"]) for j in range(p)], -1) for i in range(p)], -2)
            for h in range(H)
        ],
        -3,
    )
    OV = np.stack([np.stack([np.asarray(traj[f"OV_{h}_{j}"]) for j in range(p)], -1) for h in range(H)], -2)
    return KQ, OV


def head_pattern(traj: Annotated[Any, _V.Instance(_xr.Dataset)], H: int, *, dummy_tol: float = 0.05) -> cf.HeadPattern:
    """Head classification and pattern diagnostics of a trajectory: :func:`closedform.icl_regression.classify_heads`.

    docs/models/icl_regression.md §3 Observations 1-2 (positive / negative / dummy heads, sign matching, homogeneity,
    zero-sum OV) and (4.3) (mu^T omega). Arrays have shape (n_traj, n_time[, H]).
    """
    omega, mu = stack_heads(traj, H)
    return cf.classify_heads(omega, mu, dummy_tol=dummy_tol)


def align_to_flow(learned, reference, *, key: str = "mu_dot_omega") -> np.ndarray:
    """Flow times at which the reference flow reaches the learned values of ``key``
    (docs/models/icl_regression.md §12), seed by seed: monotone, and NaN beyond the reference's range.

    Adam or SGD steps of the full network do not map to F/2-flow time by a constant (the trained W_K, W_Q, W_O, W_V
    precondition the (omega, mu) gradient); docs/models/icl_regression.md §12 aligns learned and simulated
    trajectories by a monotone reparametrisation, e.g. matching mu^T omega. This is the model's use of
    :func:`dynamics.align.reference_times`; to compare whole runs on a common flow-time grid use
    ``dynamics.overlay(..., align=key, grid=...)``.

    Parameters
    ----------
    learned : array_like, (n,) or (S, n)
        Learned values of ``key`` in the order of the save points (one row per seed).
    reference : Trajectory
        A flow with one trajectory (or one per row of ``learned``) holding ``key``, long enough to reach the
        learned values.
    key : str
        The alignment variable; its reference curve is read through its monotone envelope.

    Returns
    -------
    ndarray, the shape of ``learned``: flow times, non-decreasing along each row (isotonic fit), NaN where a learned
    value lies outside the reference's range (never clipped to its ends).
    """
    from dynamics.align import reference_times

    if not isinstance(reference, _xr.Dataset) or key not in reference.data_vars:
        raise ValueError(f"reference must be a flow Trajectory holding {key!r}")
    values = np.asarray(learned, dtype=np.float64)
    rows = np.atleast_2d(values)
    ref_t = np.asarray(reference["time"], dtype=np.float64)
    ref_v = np.asarray(reference[key], dtype=np.float64).reshape(-1, ref_t.size)
    if ref_v.shape[0] not in (1, rows.shape[0]):
        raise ValueError(
            f"reference must hold 1 trajectory or one per row of learned ({rows.shape[0]}); got {ref_v.shape[0]}"
        )
    out = np.stack([reference_times(ref_t, ref_v[i if ref_v.shape[0] > 1 else 0], row) for i, row in enumerate(rows)])
    return out.reshape(values.shape)


def _paper_config(
    *,
    seeds: Sequence[int] = (0,),
    n_steps: int = 500_001,
    log_every: int = 1000,
    batch_size: int = 256,
    eval_size: int = 256,
    refill: int = 4,
    dtype: str = "float64",
    checkpoint_every: int = 0,
) -> TrainConfig:
    """The training setup of docs/models/icl_regression.md §9: Adam(lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight
    decay), batch 256.

    Toolkit logging (docs/models/icl_regression.md §0.2): entries at n = 0, log_every, ..., n_steps. ``eval_size``
    defaults to the notebook's validation batch of 256 prompts (docs/models/icl_regression.md §9), fixed here (the
    trainer's eval stream) instead of redrawn.
    """
    log_every = check_int("log_every", log_every, min_value=1)
    from dynamics.saveat import SaveAt

    return TrainConfig(
        seeds=tuple(seeds),
        n_steps=n_steps,
        batch_size=batch_size,
        lr=Schedule(value=1e-3),
        optimizer="adam",
        betas=(0.9, 0.999),
        adam_eps=1e-8,
        eval_size=eval_size,
        saveat=SaveAt(every=log_every),
        refill=refill,
        dtype=dtype,
        checkpoint_every=checkpoint_every,
    )


def build(task: cf.ICLRegressionTask, H: int = 1, **kwargs) -> ICLAttention:
    """The torch model of ``task``: an :class:`ICLAttention` with ``H`` heads (docs/models/icl_regression.md §2: the
    paper's multi-head softmax attention, scalar-pattern initialisation of docs/models/icl_regression.md §3 when
    ``omega0``/``mu0`` are given).

    ``kwargs`` go to :class:`ICLAttention` (``attention``, ``rho``, ``supports``, ``omega0``, ``mu0``,
    ``log_circuits``).
    """
    if not isinstance(task, cf.ICLRegressionTask):
        raise TypeError(f"task must be a closedform.icl_regression.ICLRegressionTask; got {type(task).__name__}")
    # the paper uses H <= 8; 4096 heads is far past any run and keeps a typo from allocating H x d x d weights
    return ICLAttention(task, check_int("H", H, min_value=1, max_value=4096), **kwargs)


#: The presets of :func:`config`: name -> factory.
CONFIGS = {"paper": _paper_config}


def config(name: str, *args, **kwargs) -> TrainConfig:
    """TrainConfig of a named training protocol (a paper figure's setup or a preset).

    Parameters
    ----------
    name : {"paper"}
        * ``"paper"``: the training setup of docs/models/icl_regression.md §9 (every figure of the paper): Adam(lr 1e-3,
          betas (0.9, 0.999), eps 1e-8), batch 256, entries at n = 0, log_every, ..., n_steps: ``config("paper", *,
          seeds=(0,), n_steps=500_001, log_every=1000, batch_size=256, eval_size=256, refill=4, dtype="float64",
          checkpoint_every=0)``.
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
# function's own checks. The model's training step calls ``_SoftmaxMSE`` unchecked.

import xarray as _xr  # noqa: E402

from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)
from empirical.models import tensor_check as _tensor  # noqa: E402
from empirical.models import tensors_check as _tensors  # noqa: E402

_MODEL = _V.Instance(ICLAttention, ICLModelSpec)
_V.validate_module(globals())
