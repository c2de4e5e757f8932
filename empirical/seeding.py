"""Per-seed random streams for torch runs (STYLE.md §2.8).

Each seed of a run owns independent streams, spawned from ``numpy.random.SeedSequence(seed)`` in the fixed order
:data:`STREAMS`:

========  ===========================================================================================
``data``  training samples (fresh samples every step, or the fixed dataset drawn once)
``init``  the model's initial parameters
``sgd``   minibatch selection from a fixed dataset (one permutation per epoch); unused in online mode
``eval``  the fixed evaluation batch on which the logged loss is measured
========  ===========================================================================================

A torch stream is ``torch.Generator(device).manual_seed(int(child.generate_state(1)[0]))`` (a 32-bit seed drawn
from the child sequence). Streams depend only on the integer seed, never on the other seeds of a batched run, so
seed ``s`` trained among others draws exactly the numbers of a single-seed run with seed ``s``. Library code never
touches torch's global generator.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

__all__ = ["STREAMS", "check_seeds", "stream_generators", "torch_generator"]

#: Spawn order of the per-seed streams; part of reproducibility, never reorder (append new streams at the end).
STREAMS: tuple[str, ...] = ("data", "init", "sgd", "eval")


def check_seeds(seeds) -> tuple[int, ...]:
    """Return ``seeds`` as a tuple of distinct integers >= 0 (an int is one seed); else raise ``ValueError``."""
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        seeds = (seeds,)
    try:
        seeds = tuple(seeds)
    except TypeError as exc:
        raise ValueError(f"seeds must be an integer >= 0 or a non-empty sequence of them; got {seeds!r}") from exc
    if not seeds:
        raise ValueError("seeds must be a non-empty sequence of integers >= 0; got an empty sequence")
    out = []
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
            raise ValueError(f"seeds must contain integers >= 0; got {s!r}")
        out.append(int(s))
    if len(set(out)) != len(out):
        raise ValueError(f"seeds must be distinct (a repeated seed repeats the same run); got {out}")
    return tuple(out)


def torch_generator(seq: np.random.SeedSequence, device: torch.device) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded from one ``SeedSequence`` (32-bit state word 0)."""
    return torch.Generator(device=device).manual_seed(int(seq.generate_state(1)[0]))


def stream_generators(seeds, device: torch.device) -> dict[str, list[torch.Generator]]:
    """One ``torch.Generator`` per seed and stream: ``{stream: [generator of seeds[0], ...]}``.

    Parameters
    ----------
    seeds : sequence of int
        Distinct integers >= 0 (see :func:`check_seeds`).
    device : torch.device
        Device the generators live on (a CUDA generator draws on the GPU).
    """
    seeds = check_seeds(seeds)
    out: dict[str, list[torch.Generator]] = {name: [] for name in STREAMS}
    for s in seeds:
        children = np.random.SeedSequence(s).spawn(len(STREAMS))
        for name, child in zip(STREAMS, children):
            out[name].append(torch_generator(child, device))
    return out
