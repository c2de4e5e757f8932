"""Word-level text corpus for the real-text experiment of Scan and Snap (docs/models/scan_snap.md §5.5, Figs. 7, 10).

The paper trains on WikiText-2/103, which would have to be downloaded. This loader reads any local UTF-8 text file;
its default corpus ships with CPython: the English prose of the Python reference documentation in the stdlib module
``pydoc_data.topics`` (about 0.7 MB), so nothing is fetched at run time. [choice: a stand-in for WikiText-2.]

Tokenisation (a "basic English" tokenizer in the spirit of the authors' pipeline, docs/models/scan_snap.md §5.5):
lower-case, words are runs of letters/digits/apostrophes, each punctuation mark is its own token; the ``vocab_size - 1``
most frequent tokens of the *training* split are kept (ties broken alphabetically) and every other token becomes
``<unk>`` (id 0). Splits are contiguous: the first ``1 - heldout_fraction`` of the token stream trains, the rest is held
out.

Example
-------
>>> from empirical.text_corpus import load_corpus
>>> corpus = load_corpus(vocab_size=2000)            # pydoc_data.topics, no download
>>> x = corpus.chunks("train", bptt=35)              # (n_chunks, 36) int64: inputs x[:, :-1], targets x[:, 1:]
"""

from __future__ import annotations

from typing import Annotated
import collections
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dynamics.validation import Range, check_choice, check_in_range, check_int, validate_module

__all__ = ["UNK", "Corpus", "default_text", "load_corpus", "tokenize"]

UNK = "<unk>"
_TOKEN_RE = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")


def default_text() -> str:
    """The stdlib corpus: all topics of ``pydoc_data.topics`` joined in sorted-key order (deterministic)."""
    from pydoc_data import topics

    return "\n\n".join(topics.topics[k] for k in sorted(topics.topics))


def tokenize(text: str) -> list[str]:
    """Lower-case word/punctuation tokens (module docstring)."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str; got {type(text).__name__}")
    return _TOKEN_RE.findall(text.lower())


@dataclass(frozen=True)
class Corpus:
    """A tokenised corpus: ``vocab`` (id -> word, ``vocab[0] = '<unk>'``) and the id streams of both splits."""

    vocab: tuple[str, ...]
    train: np.ndarray
    heldout: np.ndarray
    source: str

    @property
    def vocab_size(self) -> int:
        """Number of ids, ``<unk>`` included."""
        return len(self.vocab)

    def chunks(self, split: str = "train", *, bptt: int = 35) -> np.ndarray:
        """Non-overlapping windows of ``bptt + 1`` ids (inputs and next-token targets), (n, bptt + 1) int64."""
        check_choice("split", split, ("train", "heldout"))
        bptt = check_int("bptt", bptt, min_value=1)
        ids = self.train if split == "train" else self.heldout
        n = (len(ids) - 1) // bptt
        if n < 1:
            raise ValueError(f"the {split} split ({len(ids)} tokens) is shorter than bptt + 1 = {bptt + 1}")
        idx = np.arange(n)[:, None] * bptt + np.arange(bptt + 1)[None, :]
        return ids[idx]


def load_corpus(
    path: str | Path | None = None,
    *,
    vocab_size: int = 2000,
    heldout_fraction: Annotated[float, Range(gt=0, lt=1)] = 0.1,
    max_tokens: int | None = None,
) -> Corpus:
    """Read and tokenise a local text file (default: the stdlib corpus, module docstring).

    Parameters
    ----------
    path : path-like, optional
        A UTF-8 text file; ``None`` uses :func:`default_text`.
    vocab_size : int
        Ids kept, ``<unk>`` included (>= 2).
    heldout_fraction : float in (0, 1)
        Tail of the token stream held out (for the attention-entropy probe of Fig. 10).
    max_tokens : int, optional
        Use only the first ``max_tokens`` tokens (small presets).
    """
    vocab_size = check_int("vocab_size", vocab_size, min_value=2)
    heldout_fraction = check_in_range("heldout_fraction", heldout_fraction, 0.0, 1.0, low_open=True, high_open=True)
    if path is None:
        text, source = default_text(), "pydoc_data.topics (CPython stdlib)"
    else:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"path must be an existing text file; got {str(path)!r}")
        text, source = p.read_text(encoding="utf-8"), str(p)
    tokens = tokenize(text)
    if max_tokens is not None:
        tokens = tokens[: check_int("max_tokens", max_tokens, min_value=2)]
    n_train = round(len(tokens) * (1.0 - heldout_fraction))
    if n_train < 2 or len(tokens) - n_train < 2:
        raise ValueError(f"the corpus has {len(tokens)} tokens: too few for a train/held-out split")
    counts = collections.Counter(tokens[:n_train])
    words = sorted(counts, key=lambda w: (-counts[w], w))[: vocab_size - 1]
    vocab = (UNK, *words)
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.fromiter((index.get(w, 0) for w in tokens), dtype=np.int64, count=len(tokens))
    return Corpus(vocab=vocab, train=ids[:n_train], heldout=ids[n_train:], source=source)


validate_module(globals())  # argument checks from the annotations (dynamics.validation)
