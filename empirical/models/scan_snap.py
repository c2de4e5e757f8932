"""Torch one-layer attention of Scan and Snap (Tian et al., NeurIPS 2023): the Y/Z model, the full (U, W) model and
the one-layer text Transformer.

Implements the empirical side of ``docs/models/scan_snap.md``:

* :class:`ScanSnapTorch` with ``parametrisation="YZ"``: the authors' synthetic model
  (docs/models/scan_snap.md §1.4, §5.1): free matrices Y (decoder) and Z (attention logits) indexed by vocabulary ids,
  attention of the query on the T - 1 contextual positions (query excluded), l2-normalised attention output f = LN(X^T
  b), logits Y^T f over all M outputs, cross-entropy averaged over the batch (= -J of docs/models/scan_snap.md §1.3).
  Zero init (docs/models/scan_snap.md §5.2) or random init U(+-1/sqrt(M)) of every entry, Y drawn before Z
  (docs/models/scan_snap.md §5.1, §5.3).
* the same class with ``parametrisation="full"``: embeddings U and W_Q, W_K, W_V (docs/models/scan_snap.md §1.3); the
  probes map the weights to Y = U W_V^T U^T and Z = U W_Q W_K^T U^T / sqrt(d) (docs/models/scan_snap.md §1.4), so both
  parametrisations log the same variables.
* :func:`distinct_recall`: recall of distinct tokens above attention thresholds (docs/models/scan_snap.md §5.3, Figs.
  11/12).
* :class:`TextTransformer`: the one-layer post-LayerNorm Transformer of the WikiText experiment
  (docs/models/scan_snap.md §5.5, Fig. 10 setting), trained on the word-level corpus of :mod:`empirical.text_corpus`;
  probe: average attention entropy.

Data: :meth:`ScanSnapTorch.sample` draws sequences of any :class:`closedform.scan_snap.SequenceClasses`
(docs/models/scan_snap.md §1.2, §5.1): class n ~ pi, T - 1 contextual tokens i.i.d. from P(.|n), query qtok(psi(n)),
label tgt(n).

Training is the shared trainer :func:`empirical.train.train`; :func:`config("sgd") <config>` gives the paper's protocol
(SGD with momentum 0.9, batch 128, T = 128, separate learning rates eta_Y, eta_Z as ``lr_scale``). The probes REUSE the
docs/models/scan_snap.md §4.6 diagnostics of :mod:`closedform.scan_snap` (``attention_maps``, ``distinct_entropy``,
``decoder_stats``) on the reduced blocks Y = Y_full[0:Lc, :], Z = Z_full[Lc:Lc+Q, 0:Lc] (docs/models/scan_snap.md §4.1),
so a torch run and ``map`` align with ``xarray`` on the same variables: ``z`` (dims query_token, token), ``H`` /
``alpha_tgt`` / ``gamma_hat`` (dim class) and ``H_mean``, with the closed form's coordinates (the 0-based ids m, l,
n of docs/models/scan_snap.md §0.1). The array probes are declared by :attr:`ScanSnapTorch.probe_dims` (the
trainer's array-probe protocol, :mod:`empirical.train`).

Symbol table (docs/models/scan_snap.md §0.4; shapes carry the trainer's leading seed axis S)
--------------------------------------------------------------------------------------------
Sections (§) in the last column are those of docs/models/scan_snap.md.

===========  ===========  =======================================================  ==========  =======
code         paper        meaning                                                  shape       defined
===========  ===========  =======================================================  ==========  =======
counts       X^T 1        token counts of x_1..x_T-1 (floats, trainer rule)        (S, B, V)   §1.1
cls          n            class of the sequence (query and label follow from it)   (S, B)      §1.2
Y            Y            decoder matrix, rows = input token ids, columns outputs  (S, V, M)   §1.4
Z            Z            attention logits Z[query id, key id]                     (S, V, V)   §1.4
U            U            embeddings (full model)                                  (S, V, d)   §1.3
W_Q,W_K,W_V  W_Q,W_K,W_V  projections (full model)                                 (S, d, d)   §1.3
f            f            LN(X^T b)                                                (S, B, V)   §1.3
z            z_{ml}       probe Z[Lc + m, l], dims (query_token m, token l)        (S, Q, Lc)  §1.4
H            H_n          distinct-token entropy per class (dim class)             (S, K)      §4.6
H_mean       H            distinct-token entropy, mean over classes                (S,)        §4.6
alpha_tgt    alpha_tgt    target probability per class (dim class)                 (S, K)      §4.6
gamma_hat    gamma_hat    measured speed-control coefficient (dim class)           (S, K)      §4.6
===========  ===========  =======================================================  ==========  =======

V = max(M, Lc + Q) input ids: contextual token l has id l, query m has id Lc + m (the generator layout of
docs/models/scan_snap.md §5.1, where V = M). Time axis: optimizer steps, ``time = step``
(docs/models/scan_snap.md §0.2), as in ``closedform.scan_snap``.

Notes
-----
* [choice] Full model: U i.i.d. N(0, 1/d) (near-orthonormal rows for d >> V, where LN(U^T X^T b) ~ U^T LN(X^T b));
  W_Q, W_K, W_V i.i.d. U(+-1/sqrt(d)) (torch's bias-free linear default). The paper gives no recipe.
* [departure] :class:`TextTransformer` has no dropout (docs/models/scan_snap.md §5.5 choice: dropout 0.2): the shared
  trainer passes no random stream to the loss. Gradient clipping to total norm 0.5 (docs/models/scan_snap.md §5.5) is
  done inside the loss, exactly (:meth:`TextTransformer.loss`).
"""

from __future__ import annotations

from typing import Annotated, Any
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from closedform import scan_snap as cf
from dynamics.saveat import SaveAt
from dynamics.validation import check_choice, check_int, check_positive
from empirical.models import dispatch_config
from empirical.train import Schedule, TrainConfig, per_seed

__all__ = [
    "build",
    "INITS",
    "PARAMETRISATIONS",
    "RECALL_ATTENTION",
    "REFERENCE",
    "ScanSnapTorch",
    "TextTransformer",
    "config",
    "attention_entropy",
    "distinct_recall",
    "effective_YZ",
    "reduced_blocks",
    "yz_logits",
]

REFERENCE = cf.REFERENCE
PARAMETRISATIONS = ("YZ", "full")
INITS = ("zero", "random")


# ---------------------------------------------------------------------------------------------------------------
# The Y/Z model and the full model (docs/models/scan_snap.md §1.3-§1.4, §5.1)
# ---------------------------------------------------------------------------------------------------------------


def yz_logits(Y: torch.Tensor, Z: torch.Tensor, counts: torch.Tensor, qid: torch.Tensor) -> torch.Tensor:
    """Decoder logits Y^T LN(X^T b) of the Y/Z model (docs/models/scan_snap.md §1.3-§1.4, Lemma 1 setting).

    Without positional encoding (Assumption 1a) b_p depends only on the token at p, so X^T b has entries
    v_l = n_l e^{Z[x_T, l]} / sum_k n_k e^{Z[x_T, k]} with n_l the count of token l among x_1..x_{T-1}: the model
    is computed exactly from the counts, at a cost independent of T.

    Parameters
    ----------
    Y : (S, V, M) decoder; Z : (S, V, V) attention logits; counts : (S, B, V) token counts of the contexts;
    qid : (S, B) int64 query ids.

    Returns
    -------
    logits (S, B, M)
    """
    V = Z.shape[1]
    Zq = torch.gather(Z, 1, qid[..., None].expand(-1, -1, V))  # (S, B, V): row Z[x_T, :]
    v = torch.softmax(Zq + torch.log(counts), dim=-1)  # X^T b (log 0 = -inf: absent tokens)
    f = v / torch.linalg.vector_norm(v, dim=-1, keepdim=True)  # LN(X^T b), docs/models/scan_snap.md §1.3
    return torch.einsum("sbv,svj->sbj", f, Y)


def effective_YZ(params: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(Y, Z) of the parameters: themselves (Y/Z model), or Y = U W_V^T U^T, Z = U W_Q W_K^T U^T / sqrt(d)
    (docs/models/scan_snap.md §1.4).
    """
    if "Y" in params:
        return params["Y"], params["Z"]
    U, WQ, WK, WV = params["U"], params["W_Q"], params["W_K"], params["W_V"]
    d = U.shape[-1]
    Y = U @ WV.transpose(-1, -2) @ U.transpose(-1, -2)
    Z = U @ WQ @ WK.transpose(-1, -2) @ U.transpose(-1, -2) / math.sqrt(d)
    return Y, Z


def reduced_blocks(
    classes: cf.SequenceClasses, Y: Annotated[Any, _MATRICES], Z: Annotated[Any, _MATRICES]
) -> tuple[np.ndarray, np.ndarray]:
    """Reduced state Y_full[0:Lc, :] (.., Lc, M) and Z_full[Lc:Lc+Q, 0:Lc] (.., Q, Lc) as float64 numpy
    (docs/models/scan_snap.md §4.1).
    """
    Lc, Q = classes.Lc, classes.Q
    Yn = torch.as_tensor(Y).detach().cpu().numpy().astype(np.float64, copy=False)
    Zn = torch.as_tensor(Z).detach().cpu().numpy().astype(np.float64, copy=False)
    return Yn[..., :Lc, :], Zn[..., Lc : Lc + Q, :Lc]


RECALL_ATTENTION = ("softmax_all_keys", "c_n")


def distinct_recall(
    classes: cf.SequenceClasses,
    Z_full: Annotated[Any, _MATRICES],
    thresholds: Annotated[Any, _V.Array(ndim=1)],
    *,
    attention: str = "softmax_all_keys",
):
    """Recall of distinct tokens (docs/models/scan_snap.md §5.3, Figs. 11/12): the fraction of a class's distinct tokens
    whose attention exceeds each threshold, averaged over classes.

    Parameters
    ----------
    Z_full : (..., V, V) array or tensor
        Attention logits by vocabulary id (query row Lc + m).
    thresholds : (n_thr,) float
    attention : {"softmax_all_keys", "c_n"}
        Row softmax of Z[Lc + m, :] over all keys (uniform value 1/V; the figures' default, [unverified]), or the
        class attention map c_n of Eq. 5 (docs/models/scan_snap.md §4.6).

    Returns
    -------
    (..., n_thr) float64
    """
    check_choice("attention", attention, RECALL_ATTENTION)
    Zf = torch.as_tensor(Z_full).detach().cpu().numpy().astype(np.float64, copy=False)
    thr = np.asarray(thresholds, dtype=np.float64)
    Lc = classes.Lc
    if Zf.shape[-1] != Zf.shape[-2] or Zf.shape[-1] < Lc + classes.Q:
        raise ValueError(f"Z_full must have shape (..., V, V) with V >= Lc + Q = {Lc + classes.Q}; got {Zf.shape}")
    if attention == "softmax_all_keys":
        rows = Zf[..., Lc + classes.psi, :]  # (..., K, V)
        a = np.exp(rows - rows.max(-1, keepdims=True))
        a = (a / a.sum(-1, keepdims=True))[..., :Lc]
    else:
        a = cf.attention_maps(classes, Zf[..., Lc : Lc + classes.Q, :Lc])  # (..., K, Lc)
    out = []
    for n in range(classes.K):
        dt = classes.distinct_tokens(n)
        out.append((a[..., n, dt, None] > thr).mean(-2))
    return np.mean(out, axis=0)


@dataclass(frozen=True, kw_only=True)
class ScanSnapTorch:
    """The one-layer attention model of docs/models/scan_snap.md §1.3-§1.4 on sequence classes, for
    :func:`empirical.train.train`.

    Parameters
    ----------
    classes : closedform.scan_snap.SequenceClasses
        The data law (Syn-Small, Syn-Medium or any configuration of docs/models/scan_snap.md §4.1).
    T : int
        Paper's sequence length: T - 1 contextual tokens + the query (docs/models/scan_snap.md §1.1; the paper's runs: T
        = 128).
    init : {"zero", "random"}
        Zero Y, Z (Syn-Small, docs/models/scan_snap.md §5.2) or every entry U(+-1/sqrt(M)), Y before Z (Syn-Medium,
        docs/models/scan_snap.md §5.3). The full model always starts at random (zero U is a stationary point).
    parametrisation : {"YZ", "full"}
        Free Y/Z (the authors' synthetic code) or U, W_Q, W_K, W_V (docs/models/scan_snap.md §1.3); "full" needs M >= Lc
        + Q.
    d : int
        Embedding width of the full model (>= 1); ignored by "YZ".
    probe_z : bool
        Log the logits ``z`` (query_token, token) (needed for attention maps and overlays); False logs only the
        per-class summaries.
    """

    classes: cf.SequenceClasses
    T: int = 128
    init: str = "zero"
    parametrisation: str = "YZ"
    d: int = 64
    probe_z: bool = True

    name = "scan_snap"
    time_unit = "step"

    @property
    def probe_dims(self) -> dict[str, tuple[str, ...]]:
        """Dims of the array probes (:mod:`empirical.train` protocol): ``z`` (query_token, token) when ``probe_z``; per
        class ``alpha_tgt``, ``gamma_hat`` and ``H`` (``H`` only when every class has distinct tokens, where H_n is
        defined, docs/models/scan_snap.md §4.6). Coordinates: the trainer's default 0-based ids, as in
        :mod:`closedform.scan_snap`.
        """
        dims = {"z": ("query_token", "token")} if self.probe_z else {}
        if self._H_defined:
            dims["H"] = ("class",)
        return {**dims, "alpha_tgt": ("class",), "gamma_hat": ("class",)}

    @property
    def _H_defined(self) -> bool:
        return all(self.classes.distinct_tokens(n).size for n in range(self.classes.K))

    def __post_init__(self):
        if not isinstance(self.classes, cf.SequenceClasses):
            raise ValueError(
                f"classes must be a closedform.scan_snap.SequenceClasses; got {type(self.classes).__name__}"
            )
        object.__setattr__(self, "T", check_int("T", self.T, min_value=2))
        check_choice("init", self.init, INITS)
        check_choice("parametrisation", self.parametrisation, PARAMETRISATIONS)
        object.__setattr__(self, "d", check_int("d", self.d, min_value=1))
        c = self.classes
        if self.parametrisation == "full" and c.M < c.Lc + c.Q:
            raise ValueError(
                f"parametrisation='full' needs the generator layout M >= Lc + Q = {c.Lc + c.Q} (outputs "
                f"are vocabulary tokens, docs/models/scan_snap.md §5.1); got M = {c.M}"
            )

    @property
    def spec(self) -> dict:
        """Provenance (stored with runs and checkpoints)."""
        return {
            "classes": self.classes.to_dict(),
            "T": self.T,
            "init": self.init,
            "parametrisation": self.parametrisation,
            "d": self.d,
            "probe_z": self.probe_z,
        }

    @property
    def V(self) -> int:
        """Number of input ids, max(M, Lc + Q) (contextual l -> l, query m -> Lc + m; docs/models/scan_snap.md §5.1
        layout).
        """
        return max(self.classes.M, self.classes.Lc + self.classes.Q)

    @staticmethod
    def time_of_step(step):
        """time = step (docs/models/scan_snap.md §0.2), as :meth:`closedform.scan_snap.ScanSnapTask.time_of_step`."""
        return np.asarray(step, dtype=np.float64)

    # -- protocol -------------------------------------------------------------------------------------------------

    def init_params(self, generators, *, device, dtype):
        """Initial parameters (docs/models/scan_snap.md §5.1-§5.3; full model: the module's [choice] note), per seed."""
        V, M, d = self.V, self.classes.M, self.d
        s = 1.0 / math.sqrt(M)

        def unif(g, shape, scale):
            return (2.0 * torch.rand(shape, generator=g, device=device, dtype=dtype) - 1.0) * scale

        def draw(g):
            if self.parametrisation == "YZ":
                if self.init == "zero":
                    return {
                        "Y": torch.zeros(V, M, device=device, dtype=dtype),
                        "Z": torch.zeros(V, V, device=device, dtype=dtype),
                    }
                Y = unif(g, (V, M), s)  # Y drawn before Z (docs/models/scan_snap.md §5.3)
                return {"Y": Y, "Z": unif(g, (V, V), s)}
            U = torch.randn(V, d, generator=g, device=device, dtype=dtype) / math.sqrt(d)
            w = 1.0 / math.sqrt(d)
            return {"U": U, "W_Q": unif(g, (d, d), w), "W_K": unif(g, (d, d), w), "W_V": unif(g, (d, d), w)}

        return per_seed(generators, draw)

    def sample(self, generators, n, *, device, dtype):
        """n sequences per seed: class ~ pi, T - 1 contextual tokens i.i.d. P(.|class)
        (docs/models/scan_snap.md §1.2, §5.1).

        Returns ``cls`` (S, n) and ``counts`` (S, n, V), the token counts of each context (all the model needs,
        :func:`yz_logits`); both float (trainer rule), exact integers.

        The counts are drawn directly, not the tokens. This is exact in law: given the class n, the T - 1 contextual
        tokens are i.i.d. categorical P(.|n), so their count vector is by definition Multinomial(T - 1, P(.|n)), and
        the model sees the context only through that vector (no positional encoding, Assumption 1a; the loss and its
        gradient are functions of (class, counts), :func:`yz_logits`). Drawing (class, counts) from their joint law
        therefore gives the same law of every loss, gradient and training run as drawing the tokens. The multinomial
        runs over supp(n) only (numpy's conditional-binomial sampler, cost ~ |supp(n)| per sequence instead of
        T - 1 draws plus a scatter), which is what makes it cheap (``benchmarks/bench_scan_snap_torch.py``).

        Reproducibility: each seed's numpy stream is keyed by two 62-bit integers drawn from that seed's torch
        generator, so a seed's data depend only on its own generator state (bitwise identical across batch sizes
        and across a checkpoint resume, which restores the generator state of the block).
        """
        c = self.classes
        P = np.asarray(c.P, dtype=np.float64)
        pi = np.asarray(c.pi, dtype=np.float64)
        supports = [np.flatnonzero(P[k] > 0) for k in range(c.K)]
        p_supp = [P[k, s] / P[k, s].sum() for k, s in enumerate(supports)]

        def draw(g):
            key = torch.randint(0, 2**62, (2,), generator=g, device=g.device).tolist()
            rng = np.random.default_rng(key)
            cls = rng.choice(c.K, size=n, p=pi)
            counts = np.zeros((n, self.V))
            for k in range(c.K):
                rows = np.flatnonzero(cls == k)
                if rows.size:
                    counts[np.ix_(rows, supports[k])] = rng.multinomial(self.T - 1, p_supp[k], size=rows.size)
            return {
                "cls": torch.as_tensor(cls, device=device, dtype=dtype),
                "counts": torch.as_tensor(counts, device=device, dtype=dtype),
            }

        return per_seed(generators, draw)

    def _ids(self, batch, device):
        c = self.classes
        cls = batch["cls"].long()
        qid = torch.tensor(c.Lc + np.array(c.psi), device=device)[cls]
        tgt = torch.tensor(np.array(c.tgt), device=device)[cls]
        return batch["counts"], qid, tgt

    def loss(self, params, batch, hyper):
        """Cross-entropy -J of docs/models/scan_snap.md §1.3, averaged over the batch (the authors' code); shape
        (S,).
        """
        Y, Z = effective_YZ(params)
        counts, qid, tgt = self._ids(batch, Y.device)
        logits = yz_logits(Y, Z, counts, qid)
        logp = logits.gather(-1, tgt[..., None])[..., 0] - torch.logsumexp(logits, dim=-1)
        return -logp.mean(-1)

    def probes(self, params):
        """docs/models/scan_snap.md §4.6 diagnostics of the reduced blocks, via ``closedform.scan_snap``: ``z`` (S, Q,
        Lc), ``H``,
        ``alpha_tgt``, ``gamma_hat`` (S, K), ``H_mean`` (S,); dims in :attr:`probe_dims`.
        """
        Y, Z = effective_YZ(params)
        c = self.classes
        Yr, Zr = reduced_blocks(c, Y, Z)
        out = {}
        if self.probe_z:
            out["z"] = Zr
        H = cf.distinct_entropy(c, Zr)
        out["H_mean"] = np.nanmean(H, axis=-1) if np.any(np.isfinite(H)) else np.zeros(len(Zr))
        if self._H_defined:
            out["H"] = H
        st = cf.decoder_stats(c, Yr, Zr)
        out["alpha_tgt"] = st["alpha_tgt"]
        out["gamma_hat"] = st["gamma_hat"]
        return {k: torch.as_tensor(np.ascontiguousarray(v), device=Y.device) for k, v in out.items()}


def _sgd_config(
    model: ScanSnapTorch,
    task: cf.ScanSnapTask,
    seeds,
    *,
    n_steps: int = 100,
    batch_size: int = 128,
    momentum: float = 0.9,
    saveat: SaveAt | None = None,
    eval_size: int = 0,
    **kw,
) -> TrainConfig:
    """The paper's protocol (docs/models/scan_snap.md §5.2-§5.3): SGD, momentum 0.9, batch 128, separate eta_Y, eta_Z
    (lr_scale).

    The full model takes one learning rate eta_Y for all of U, W_Q, W_K, W_V (docs/models/scan_snap.md §1.3 has no
    split).
    """
    if task.classes != model.classes:
        raise ValueError("task.classes must equal model.classes")
    scale = {"Y": task.eta_Y, "Z": task.eta_Z} if model.parametrisation == "YZ" else {}
    lr = 1.0 if model.parametrisation == "YZ" else task.eta_Y
    return TrainConfig(
        seeds=tuple(seeds) if not isinstance(seeds, int) else seeds,
        n_steps=n_steps,
        batch_size=batch_size,
        lr=lr,
        optimizer="sgd",
        momentum=momentum,
        lr_scale=scale,
        eval_size=eval_size,
        saveat=saveat or SaveAt(every=1),
        **kw,
    )


def _adam_config(
    model: ScanSnapTorch,
    eta: float,
    seeds,
    *,
    n_steps: int = 100,
    batch_size: int = 128,
    saveat: SaveAt | None = None,
    **kw,
) -> TrainConfig:
    """Fig. 5 protocol (docs/models/scan_snap.md §5.2 [choice]): Adam with torch defaults, eta_Y = eta_Z = eta, batch
    128.
    """
    check_positive("eta", eta)
    return TrainConfig(
        seeds=seeds,
        n_steps=n_steps,
        batch_size=batch_size,
        lr=eta,
        optimizer="adam",
        eval_size=kw.pop("eval_size", 0),
        saveat=saveat or SaveAt(every=1),
        **kw,
    )


# ---------------------------------------------------------------------------------------------------------------
# One-layer Transformer on text (docs/models/scan_snap.md §5.5, Figs. 7 and 10)
# ---------------------------------------------------------------------------------------------------------------


def attention_entropy(
    a: Annotated[torch.Tensor, _tensor(ndim=4, range=_V.Range(ge=0, le=1, array=True))],
) -> torch.Tensor:
    """Average attention entropy -sum_k a_k ln(a_k + 1e-8) over keys, mean over queries and sequences
    (docs/models/scan_snap.md §5.5).

    a : (S, B, Tq, Tk) attention rows, entries in [0, 1]; returns (S,). Checked (real, finite, in range); the
    model's probes call an unchecked version.
    """
    return _attention_entropy(a)


def _attention_entropy(a):
    """:func:`attention_entropy` without its argument checks."""
    return -(a * torch.log(a + 1e-8)).sum(-1).mean(dim=(-1, -2))


def _sinusoidal(n: int, d: int, device, dtype) -> torch.Tensor:
    pos = torch.arange(n, device=device, dtype=dtype)[:, None]
    div = torch.exp(torch.arange(0, d, 2, device=device, dtype=dtype) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d, device=device, dtype=dtype)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
    return pe


def _layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, x.shape[-1:]) * w[:, None, None, :] + b[:, None, None, :]


@dataclass(frozen=True, kw_only=True)
class TextTransformer:
    """One-layer post-LayerNorm Transformer LM of docs/models/scan_snap.md §5.5 (Fig. 10 setting), seeds stacked on a
    leading axis.

    Embedding ``d_model``, FFN ``d_ff`` (ReLU), 1 head, causal mask, sinusoidal positional encoding, untied decoder
    with bias; init: embedding and decoder U(+-0.1), decoder bias 0, embeddings x sqrt(d_model)
    (docs/models/scan_snap.md §5.5), attention in-projection xavier-uniform with zero biases, out-projection
    U(+-1/sqrt(d)) with zero bias, FFN torch defaults. No dropout (module Notes); gradient clipping to total norm
    ``clip`` per seed (default 0.5, docs/models/scan_snap.md §5.5; None: off). Data: chunks of ``bptt + 1`` token ids
    (inputs and shifted targets) of a :class:`empirical.text_corpus.Corpus`; a fixed dataset of training chunks
    (``config("text")``). Probe ``entropy``: average attention entropy (docs/models/scan_snap.md §5.5) on the held-out
    chunks ``heldout`` (n, bptt + 1); with ``map_rows`` > 0 also the attention map of held-out sequence 0 as ONE array
    probe ``attn`` of dims (query_position, key_position) = positions 0 .. map_rows - 1 (Fig. 7; :attr:`probe_dims`).
    """

    train_chunks: torch.Tensor
    heldout: torch.Tensor
    vocab_size: int
    d_model: int = 200
    d_ff: int = 200
    map_rows: int = 0
    clip: float | None = 0.5

    name = "scan_snap_text"
    time_unit = "step"

    @property
    def probe_dims(self) -> dict[str, tuple[str, ...]]:
        """``attn`` (query_position, key_position) when ``map_rows`` > 0 (the :mod:`empirical.train` array-probe
        protocol).
        """
        return {"attn": ("query_position", "key_position")} if self.map_rows else {}

    def __post_init__(self):
        for nm in ("train_chunks", "heldout"):
            t = getattr(self, nm)
            if not isinstance(t, torch.Tensor) or t.ndim != 2 or t.shape[1] < 2:
                raise ValueError(f"{nm} must be a (n, bptt + 1) tensor of token ids; got {getattr(t, 'shape', t)}")
        object.__setattr__(self, "vocab_size", check_int("vocab_size", self.vocab_size, min_value=2))
        object.__setattr__(self, "d_model", check_int("d_model", self.d_model, min_value=2))
        if self.d_model % 2:
            raise ValueError(f"d_model must be even (sinusoidal encoding); got {self.d_model}")
        object.__setattr__(self, "d_ff", check_int("d_ff", self.d_ff, min_value=1))
        if self.clip is not None:
            object.__setattr__(self, "clip", check_positive("clip", self.clip))
        object.__setattr__(
            self,
            "map_rows",
            check_int("map_rows", self.map_rows, min_value=0, max_value=self.train_chunks.shape[1] - 1),
        )
        if int(self.train_chunks.max()) >= self.vocab_size or int(self.heldout.max()) >= self.vocab_size:
            raise ValueError("token ids must lie in [0, vocab_size)")

    @property
    def spec(self) -> dict:
        """Provenance: sizes (the chunks themselves are identified by their count and a checksum)."""
        return {
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "d_ff": self.d_ff,
            "n_train_chunks": int(self.train_chunks.shape[0]),
            "n_heldout": int(self.heldout.shape[0]),
            "bptt": int(self.train_chunks.shape[1] - 1),
            "map_rows": self.map_rows,
            "checksum": int(self.train_chunks.long().sum()) * 1000003 + int(self.heldout.long().sum()),
        }

    def init_params(self, generators, *, device, dtype):
        """Initialisation of docs/models/scan_snap.md §5.5 (class docstring), per seed."""
        V, d, f = self.vocab_size, self.d_model, self.d_ff

        def unif(g, shape, a):
            return (2.0 * torch.rand(shape, generator=g, device=device, dtype=dtype) - 1.0) * a

        def draw(g):
            return {
                "emb": unif(g, (V, d), 0.1),
                "W_in": unif(g, (3 * d, d), math.sqrt(6.0 / (4 * d))),  # xavier-uniform of a (3d, d) matrix
                "b_in": torch.zeros(3 * d, device=device, dtype=dtype),
                "W_o": unif(g, (d, d), 1.0 / math.sqrt(d)),
                "b_o": torch.zeros(d, device=device, dtype=dtype),
                "ln1_w": torch.ones(d, device=device, dtype=dtype),
                "ln1_b": torch.zeros(d, device=device, dtype=dtype),
                "W_1": unif(g, (f, d), 1.0 / math.sqrt(d)),
                "b_1": unif(g, (f,), 1.0 / math.sqrt(d)),
                "W_2": unif(g, (d, f), 1.0 / math.sqrt(f)),
                "b_2": unif(g, (d,), 1.0 / math.sqrt(f)),
                "ln2_w": torch.ones(d, device=device, dtype=dtype),
                "ln2_b": torch.zeros(d, device=device, dtype=dtype),
                "W_dec": unif(g, (V, d), 0.1),
                "b_dec": torch.zeros(V, device=device, dtype=dtype),
            }

        return per_seed(generators, draw)

    def sample(self, generators, n, *, device, dtype):
        """The first n training chunks, the same for every seed (fixed dataset; seeds differ by init and order)."""
        if n > self.train_chunks.shape[0]:
            raise ValueError(f"n = {n} chunks requested; the corpus has {self.train_chunks.shape[0]} training chunks")
        x = self.train_chunks[:n].to(device=device, dtype=dtype)
        return {"tokens": x[None].expand(len(generators), -1, -1).clone()}

    def forward(self, params, tokens: torch.Tensor):
        """Logits (S, B, T, V) and attention (S, B, T, T) for input ids (S, B, T) (docs/models/scan_snap.md §5.5
        architecture).
        """
        p = params
        d = self.d_model
        S, _, T = tokens.shape
        x = p["emb"][torch.arange(S, device=tokens.device)[:, None, None], tokens] * math.sqrt(d)
        x = x + _sinusoidal(T, d, x.device, x.dtype)
        qkv = torch.einsum("sbtd,sed->sbte", x, p["W_in"]) + p["b_in"][:, None, None, :]
        q, k, v = qkv.split(d, dim=-1)
        scores = torch.einsum("sbtd,sbud->sbtu", q, k) / math.sqrt(d)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        a = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        h = torch.einsum("sbtu,sbud->sbtd", a, v)
        h = torch.einsum("sbtd,sed->sbte", h, p["W_o"]) + p["b_o"][:, None, None, :]
        x = _layer_norm(x + h, p["ln1_w"], p["ln1_b"])
        ff = torch.relu(torch.einsum("sbtd,sfd->sbtf", x, p["W_1"]) + p["b_1"][:, None, None, :])
        ff = torch.einsum("sbtf,sdf->sbtd", ff, p["W_2"]) + p["b_2"][:, None, None, :]
        x = _layer_norm(x + ff, p["ln2_w"], p["ln2_b"])
        return torch.einsum("sbtd,svd->sbtv", x, p["W_dec"]) + p["b_dec"][:, None, None, :], a

    def loss(self, params, batch, hyper):
        """Next-token cross-entropy, mean over positions and sequences (docs/models/scan_snap.md §5.5); (S,).

        With ``clip`` (docs/models/scan_snap.md §5.5: gradient clipping to total norm 0.5 over all parameters) the
        returned loss of seed s is multiplied by the constant (detached) factor min(1, clip / (||g_s|| + 1e-6)), g_s the
        gradient of seed s's loss over all its parameters (torch's ``clip_grad_norm_`` rule). Its gradient is therefore
        exactly the clipped gradient, per seed; the price is one extra backward pass per step.
        """
        tok = batch["tokens"].long()
        logits, _ = self.forward(params, tok[..., :-1])
        tgt = tok[..., 1:]
        logp = logits.gather(-1, tgt[..., None])[..., 0] - torch.logsumexp(logits, dim=-1)
        loss = -logp.mean(dim=(-1, -2))
        if self.clip is None or not torch.is_grad_enabled():
            return loss
        leaves = [p for p in params.values() if p.requires_grad]
        if not leaves:
            return loss
        grads = torch.autograd.grad(loss.sum(), leaves, retain_graph=True, allow_unused=True)
        S = loss.shape[0]
        norm = torch.sqrt(sum((g.reshape(S, -1) ** 2).sum(1) for g in grads if g is not None))
        return loss * torch.clamp(self.clip / (norm + 1e-6), max=1.0).detach()

    def probes(self, params):
        """``entropy``: average attention entropy on the held-out chunks (docs/models/scan_snap.md §5.5, Fig. 10);
        optional map.
        """
        S = next(iter(params.values())).shape[0]
        dev = params["emb"].device
        tok = self.heldout.to(dev).long()[None].expand(S, -1, -1)
        logits, a = self.forward(params, tok[..., :-1])
        tgt = tok[..., 1:]
        logp = logits.gather(-1, tgt[..., None])[..., 0] - torch.logsumexp(logits, dim=-1)
        out = {"entropy": _attention_entropy(a), "heldout_loss": -logp.mean(dim=(-1, -2))}
        if self.map_rows:
            out["attn"] = a[:, 0, : self.map_rows, : self.map_rows]
        return out


def _text_config(
    model: TextTransformer,
    eta: float,
    seeds: Sequence[int] | int,
    *,
    n_epochs: int = 1,
    batch_size: int = 20,
    saveat: SaveAt | None = None,
    **kw,
) -> TrainConfig:
    """Fig. 10 protocol (docs/models/scan_snap.md §5.5 [choice]): plain SGD (momentum 0), one learning rate eta, batch
    20, n_epochs
    passes over the training chunks (fixed dataset, per-epoch permutation), no lr decay, clipping in the model
    (``TextTransformer.clip``).
    """
    check_positive("eta", eta)
    n = int(model.train_chunks.shape[0])
    n_epochs = check_int("n_epochs", n_epochs, min_value=1)
    n_steps = n_epochs * (n // batch_size)
    return TrainConfig(
        seeds=seeds,
        n_steps=n_steps,
        batch_size=batch_size,
        lr=Schedule(value=eta),
        optimizer="sgd",
        momentum=0.0,
        dataset_size=n,
        eval_size=0,
        saveat=saveat or SaveAt(n=min(n_steps + 1, 11)),
        **kw,
    )


def build(task: cf.ScanSnapTask, *, T: int = 128, **kwargs) -> ScanSnapTorch:
    """The torch model of ``task``: a :class:`ScanSnapTorch` on ``task.classes`` with sequence length ``T``
    (docs/models/scan_snap.md §1.3-§1.4; the learning rates eta_Y, eta_Z of the task enter through :func:`config`).

    ``kwargs`` go to :class:`ScanSnapTorch` (``init``, ``parametrisation``, ``d``, ``probe_z``).
    """
    if not isinstance(task, cf.ScanSnapTask):
        raise TypeError(f"task must be a closedform.scan_snap.ScanSnapTask; got {type(task).__name__}")
    # the paper's runs use T = 128; 2^20 tokens per sequence is far past any run (each batch holds B x T ids)
    return ScanSnapTorch(classes=task.classes, T=check_int("T", T, min_value=2, max_value=2**20), **kwargs)


#: The presets of :func:`config`: name -> factory.
CONFIGS = {"sgd": _sgd_config, "adam": _adam_config, "text": _text_config}


def config(name: str, *args, **kwargs) -> TrainConfig:
    """TrainConfig of a named training protocol (a paper figure's setup or a preset).

    Parameters
    ----------
    name : {"sgd", "adam", "text"}
        * ``"sgd"``: the paper's protocol (docs/models/scan_snap.md §5.2-§5.3): SGD, momentum 0.9, batch 128, separate
          eta_Y, eta_Z: ``config("sgd", model, task, seeds, *, n_steps=100, batch_size=128, momentum=0.9, saveat=None,
          eval_size=0, **TrainConfig_fields)``.
        * ``"adam"``: the Fig. 5 protocol (docs/models/scan_snap.md §5.2): Adam with torch defaults, eta_Y = eta_Z =
          eta, batch 128: ``config("adam", model, eta, seeds, *, n_steps=100, batch_size=128, saveat=None,
          **TrainConfig_fields)``.
        * ``"text"``: the Fig. 10 protocol (docs/models/scan_snap.md §5.5) of a :class:`TextTransformer`: plain SGD, one
          learning rate, batch 20, ``n_epochs`` passes over the training chunks: ``config("text", model, eta, seeds, *,
          n_epochs=1, batch_size=20, saveat=None, **TrainConfig_fields)``.
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
# function's own checks. The model's probes call ``_attention_entropy`` unchecked.

from dynamics import validation as _V  # noqa: E402  (the checks wrap the functions defined above)
from empirical.models import tensor_check as _tensor  # noqa: E402

_MATRICES = _V.Array(ndim=(2, 3))  # one state or a stack of them; the per-step yz_logits is left unchecked
_V.validate_module(globals())
