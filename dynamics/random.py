"""One seed normaliser for the whole toolkit.

A run has one integer seed; ``numpy.random.SeedSequence(seed)`` spawns children in a fixed, documented order. Library
functions take ``rng`` arguments and pass them through :func:`as_generator`; they never seed global state.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from dynamics.validation import ArgumentTypeError, validate_module

__all__ = ["as_generator", "spawn_generators"]


def as_generator(seed_or_rng=None) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from an int seed, a ``SeedSequence``, a ``Generator`` or ``None``.

    ``None`` gives a fresh, unseeded generator (not reproducible; library defaults should prefer an explicit seed).
    """
    if isinstance(seed_or_rng, np.random.Generator):
        return seed_or_rng
    if seed_or_rng is None or isinstance(seed_or_rng, np.random.SeedSequence):
        return np.random.default_rng(seed_or_rng)
    if isinstance(seed_or_rng, numbers.Integral) and not isinstance(seed_or_rng, bool):
        if seed_or_rng < 0:
            raise ValueError(f"seed must be an integer >= 0; got {seed_or_rng}")
        return np.random.default_rng(int(seed_or_rng))
    raise ArgumentTypeError(
        f"rng (seed_or_rng) must be an int seed >= 0, a numpy Generator, a SeedSequence or None; got {seed_or_rng!r}"
    )


def spawn_generators(seed, names: Sequence[str]) -> dict[str, np.random.Generator]:
    """Spawn one independent generator per name, in the order given (the order is part of reproducibility).

    Example: ``spawn_generators(7, ["data", "init", "sgd", "mc"])``.
    """
    names = list(names)
    if len(set(names)) != len(names):
        raise ValueError(f"names must be distinct; got {names}")
    if isinstance(seed, np.random.Generator):
        children = seed.bit_generator.seed_seq.spawn(len(names))
    else:
        ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(_seed_int(seed))
        children = ss.spawn(len(names))
    return {name: np.random.default_rng(child) for name, child in zip(names, children)}


def _seed_int(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0; got {seed!r}")
    return int(seed)


validate_module(globals())  # argument checks from the annotations (dynamics.validation)
