"""Per-seed random streams for torch runs: torch generators and counter-keyed block streams.

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

Counter-keyed block streams (fast sampling for many seeds)
-----------------------------------------------------------
torch's float64 normal sampler costs ~15 ns a normal on CPU and one call per seed; in a many-seed run it dominated
training. A model that defines ``draw(rng, n, *, device, dtype)`` (see :mod:`empirical.train`) instead
receives a :class:`BlockRNG`: one small-state generator per seed, started from a state that is a fixed function of
``(seed, stream, block)`` only, and advanced by compiled kernels that draw for **all seeds in one call**:

* the key of ``(seed, stream)`` is two 64-bit words of the same ``SeedSequence(seed).spawn(...)`` child as the torch
  stream (:func:`stream_keys`);
* block ``b`` of that stream starts the SFC64 generator (Doty-Humphrey's small fast chaotic generator, the algorithm
  of ``numpy.random.SFC64``) at ``(a, b, c, counter) = (key0, key1, splitmix64(b), 1)`` and discards 12 outputs, as
  numpy does when seeding SFC64;
* standard normals come from a 256-layer ziggurat (Marsaglia & Tsang 2000, with the independent index/sign/mantissa
  bits of Doornik 2005 and numpy), exact in float64: 8 bits pick the layer, 1 bit the sign, 53 bits the abscissa;
  the tail beyond r = 3.654 uses Marsaglia's exact exponential method. ~1.35 ns a normal on the CI machine (AMD
  EPYC, one thread; ~35 instructions on the fast path, issue-bound: the generator step, one signed-table load and
  compare, one product), float64 throughout.
* integers in ``[0, high)`` use Lemire's multiply-shift with rejection (unbiased); uniforms are 53-bit doubles.

What is reproducible: the numbers seed ``s`` draws from block ``b`` depend only on ``(s, stream, b)`` and on the
sequence of draws the model makes in that block, never on the other seeds of the run or their number. A seed trained
among others therefore draws bit for bit what its single-seed run draws (tested), on any device (the draws are made
on the CPU and copied to the run's device). Resuming a run needs only the block index, not a generator state.
"""

from __future__ import annotations

from typing import Annotated
import math
import numbers

import numpy as np
import torch
from numba import njit, uint64

__all__ = ["STREAMS", "BlockRNG", "check_seeds", "stream_generators", "stream_keys", "torch_generator"]

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


def torch_generator(
    seq: Annotated[np.random.SeedSequence, Instance(np.random.SeedSequence)],
    device: Annotated[torch.device, Instance(str, torch.device)],
) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded from one ``SeedSequence`` (32-bit state word 0)."""
    return torch.Generator(device=device).manual_seed(int(seq.generate_state(1)[0]))


def stream_generators(
    seeds, device: Annotated[torch.device, Instance(str, torch.device)]
) -> dict[str, list[torch.Generator]]:
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


# ---------------------------------------------------------------------------------------------------------------
# Counter-keyed block streams: SFC64 per seed, started from (key, block); ziggurat normals; all seeds in one call.


def stream_keys(seeds, stream: str) -> np.ndarray:
    """Two 64-bit key words per seed for ``stream``, shape ``(S, 2)`` uint64.

    Drawn from the same ``SeedSequence(seed).spawn(len(STREAMS))`` child as :func:`stream_generators` uses for that
    stream, so the key depends only on ``(seed, stream)``.
    """
    seeds = check_seeds(seeds)
    if stream not in STREAMS:
        raise ValueError(f"stream must be one of {STREAMS}; got {stream!r}")
    idx = STREAMS.index(stream)
    return np.stack([np.random.SeedSequence(s).spawn(len(STREAMS))[idx].generate_state(2, np.uint64) for s in seeds])


# 256-layer ziggurat for the half-normal density f(x) = exp(-x^2/2) (unnormalised): layer i >= 1 is the rectangle
# [0, x_i] x [f(x_i), f(x_{i+1})], layer 0 the base strip [0, x_0] x [0, f(r)] (x_0 = v/f(r)) that also carries the
# tail x > r; every layer has area v. r and v are the standard 256-layer constants (as in numpy); with them the
# recursion x_{i+1} = f^{-1}(v/x_i + f(x_i)) closes at x_256 = 0 to 1e-9 relative (checked by a test).
_ZIG_LAYERS = 256
_ZIG_R = 3.6541528853610088
_ZIG_V = 4.92867323399e-3


def _ziggurat_tables() -> tuple[np.ndarray, np.ndarray]:
    x = np.empty(_ZIG_LAYERS + 1)
    x[0] = _ZIG_V / math.exp(-0.5 * _ZIG_R**2)
    x[1] = _ZIG_R
    for i in range(1, _ZIG_LAYERS - 1):
        x[i + 1] = math.sqrt(-2.0 * math.log(_ZIG_V / x[i] + math.exp(-0.5 * x[i] ** 2)))
    x[_ZIG_LAYERS] = 0.0
    return x, np.exp(-0.5 * x * x)


_ZIG_X, _ZIG_F = _ziggurat_tables()
_U53 = 1.0 / 9007199254740992.0  # 2**-53: a 53-bit integer times this is a uniform double in [0, 1)
# Fast-path bound of the 53-bit abscissa integer m: m < K[i] implies z = m 2^-53 X[i] < X[i+1] (K is shrunk by
# 2e-16 relative so that float64 rounding of the ratio never admits a point outside); the exact test decides the rest.
_ZIG_K = np.floor(_ZIG_X[1:] / _ZIG_X[:-1] * 2.0**53 * (1 - 2e-16)).astype(np.uint64)
# The sampler's signed tables, indexed by layer + 256 sign: +-X[i] 2^-53 and K[i] (see _fill_normal).
_ZIG_XS = np.concatenate([_ZIG_X[:-1], -_ZIG_X[:-1]]) * _U53
_ZIG_KS = np.concatenate([_ZIG_K, _ZIG_K])
_MASK64 = (1 << 64) - 1


@njit(cache=True, inline="always")
def _sfc(a, b, c, ctr):
    """One SFC64 step: returns the output and the new state ``(out, a, b, c, counter)`` (kept in registers)."""
    out = a + b + ctr
    return (
        out,
        b ^ (b >> uint64(11)),
        c + (c << uint64(3)),
        ((c << uint64(24)) | (c >> uint64(40))) + out,
        ctr + uint64(1),
    )


@njit(cache=True)
def _sfc_start(keys, block):
    """SFC64 states (S, 4) for ``block``: (key0, key1, splitmix64(block), 1), then 12 discarded outputs."""
    S = keys.shape[0]
    st = np.empty((S, 4), dtype=np.uint64)
    z = uint64(block) + uint64(0x9E3779B97F4A7C15)  # splitmix64 finaliser (a bijection of the block index)
    z = (z ^ (z >> uint64(30))) * uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> uint64(27))) * uint64(0x94D049BB133111EB)
    z = z ^ (z >> uint64(31))
    for s in range(S):
        a, b, c, ctr = keys[s, 0], keys[s, 1], z, uint64(1)
        for _ in range(12):
            _, a, b, c, ctr = _sfc(a, b, c, ctr)
        st[s, 0], st[s, 1], st[s, 2], st[s, 3] = a, b, c, ctr
    return st


@njit(cache=True)
def _fill_normal(st, out, X, F, XS, KS):
    """Standard normals into ``out`` (S, n) float64, row s from seed s's state (ziggurat, see the module notes).

    One 64-bit output gives the layer i (8 bits), the sign (1 bit) and the abscissa m (53 bits): z = +-m 2^-53 X[i].
    The low 9 bits (layer and sign) index the signed tables ``XS = (X[:256], -X[:256]) 2^-53`` and ``KS = (K, K)``,
    so the fast path (m < K[i]: z inside the layer's inner rectangle) is one load, one compare and one product
    (m 2^-53 X[i] rounds once whichever way it is grouped, since 2^-53 is exact: the same numbers as forming m 2^-53
    first); the exact tests (inner rectangle, tail of layer 0, wedge) decide the rest.
    """
    S, n = out.shape
    for s in range(S):
        a, b, c, ctr = st[s, 0], st[s, 1], st[s, 2], st[s, 3]
        for j in range(n):
            while True:
                u, a, b, c, ctr = _sfc(a, b, c, ctr)
                idx = np.int64(u & uint64(0x1FF))
                m = u >> uint64(11)
                z = np.float64(m) * XS[idx]
                if m < KS[idx]:
                    break
                i = idx & 0xFF
                az = abs(z)
                if az < X[i + 1]:  # inside the inner rectangle after all
                    break
                if i == 0:
                    while True:  # Marsaglia's tail: r + E1/r with 2 E2 > (E1/r)^2, E1, E2 ~ Exp(1)
                        u1, a, b, c, ctr = _sfc(a, b, c, ctr)
                        u2, a, b, c, ctr = _sfc(a, b, c, ctr)
                        e1 = -math.log((np.float64(u1 >> uint64(11)) + 1.0) * _U53) / X[1]
                        e2 = -math.log((np.float64(u2 >> uint64(11)) + 1.0) * _U53)
                        if e2 + e2 > e1 * e1:
                            break
                    z = X[1] + e1 if idx < 256 else -(X[1] + e1)
                    break
                u2, a, b, c, ctr = _sfc(a, b, c, ctr)  # wedge: accept under the density, else draw afresh
                if F[i] + np.float64(u2 >> uint64(11)) * _U53 * (F[i + 1] - F[i]) < math.exp(-0.5 * az * az):
                    break
            out[s, j] = z
        st[s, 0], st[s, 1], st[s, 2], st[s, 3] = a, b, c, ctr


@njit(cache=True)
def _fill_uniform(st, out):
    """Uniform doubles in [0, 1) with 53 random bits into ``out`` (S, n)."""
    S, n = out.shape
    for s in range(S):
        a, b, c, ctr = st[s, 0], st[s, 1], st[s, 2], st[s, 3]
        for j in range(n):
            u, a, b, c, ctr = _sfc(a, b, c, ctr)
            out[s, j] = np.float64(u >> uint64(11)) * _U53
        st[s, 0], st[s, 1], st[s, 2], st[s, 3] = a, b, c, ctr


@njit(cache=True)
def _fill_integers(st, out, high):
    """Unbiased integers in [0, high) into ``out`` (S, n) int64 (Lemire 2019: 32-bit multiply-shift, rejection)."""
    S, n = out.shape
    h = uint64(high)
    threshold = (uint64(1 << 32) - h) % h  # = 2**32 mod high
    for s in range(S):
        a, b, c, ctr = st[s, 0], st[s, 1], st[s, 2], st[s, 3]
        for j in range(n):
            while True:
                u, a, b, c, ctr = _sfc(a, b, c, ctr)
                m = (u >> uint64(32)) * h
                if (m & uint64(0xFFFFFFFF)) >= threshold:
                    break
            out[s, j] = np.int64(m >> uint64(32))
        st[s, 0], st[s, 1], st[s, 2], st[s, 3] = a, b, c, ctr


class BlockRNG:
    """Random numbers for all seeds of a run from one block of their counter-keyed streams (see the module notes).

    Each call draws for every seed at once, seed ``s`` from its own state, and returns a tensor with a leading seed
    axis on ``device``. The numbers of seed ``s`` depend only on ``(seed, stream, block)`` and on the order of calls.

    Parameters
    ----------
    keys : (S, 2) uint64 array
        Per-seed key words (:func:`stream_keys`).
    block : int >= 0
        Block index (>= 0); the trainer uses the data block index, 0 for a one-off draw (evaluation set).
    device : torch.device
        Where the returned tensors live (the draws are made on the CPU).
    pool : list, optional
        Reusable output buffers: the ``k``-th draw since construction or the last :meth:`reuse` writes into
        ``pool[k]`` when its shape and dtype match (else a new array is stored there). The trainer draws each online
        step into one pool, so the batch memory stays hot in cache instead of being page-faulted afresh; tensors of
        an earlier step drawn into the same pool are then overwritten (the trainer no longer holds them).
    """

    def __init__(
        self,
        keys: np.ndarray,
        block: Annotated[int, Range(integer=True, ge=0)],
        device: Annotated[torch.device, Instance(str, torch.device)],
        pool: Annotated[list | None, sequence_check] = None,
    ):
        keys = np.asarray(keys)
        if keys.ndim != 2 or keys.shape[1] != 2 or keys.dtype != np.uint64 or keys.shape[0] < 1:
            raise ValueError(f"keys must be a (S, 2) uint64 array with S >= 1; got {keys.dtype} {keys.shape}")
        if isinstance(block, bool) or not isinstance(block, numbers.Integral) or not 0 <= block <= _MASK64:
            raise ValueError(f"block must be an integer in [0, 2**64); got {block!r}")
        self.n_seeds = keys.shape[0]
        self.device = torch.device(device)
        self._state = _sfc_start(keys, np.uint64(block))
        self._pool = pool
        self._calls = 0

    def reuse(self) -> None:
        """Start writing into the pool's first buffer again (the next draws overwrite the previous ones)."""
        self._calls = 0

    def _shape(self, shape) -> tuple[int, ...]:
        shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
        if any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in shape):
            raise ValueError(f"shape must be a tuple of integers >= 0; got {shape!r}")
        return shape

    def _out(self, shape, np_dtype) -> tuple[np.ndarray, np.ndarray]:
        shape = (self.n_seeds, *shape)
        k, pool = self._calls, self._pool
        self._calls += 1
        if pool is None:
            full = np.empty(shape, dtype=np_dtype)
        else:
            if k == len(pool):
                pool.append(None)
            full = pool[k]
            if full is None or full.shape != shape or full.dtype != np_dtype:
                full = pool[k] = np.empty(shape, dtype=np_dtype)
        return full, full.reshape(self.n_seeds, -1)

    def _tensor(self, arr: np.ndarray, dtype=None) -> torch.Tensor:
        t = torch.from_numpy(arr)
        return t.to(device=self.device, dtype=dtype) if dtype is not None or self.device.type != "cpu" else t

    def normal(self, shape, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Standard normals, tensor ``(S, *shape)`` (float64, 53-bit abscissa; cast to ``dtype``)."""
        full, flat = self._out(self._shape(shape), np.float64)
        _fill_normal(self._state, flat, _ZIG_X, _ZIG_F, _ZIG_XS, _ZIG_KS)
        return self._tensor(full, None if dtype == torch.float64 else dtype)

    def uniform(self, shape, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Uniforms in [0, 1) (53 random bits), tensor ``(S, *shape)`` cast to ``dtype``."""
        full, flat = self._out(self._shape(shape), np.float64)
        _fill_uniform(self._state, flat)
        return self._tensor(full, None if dtype == torch.float64 else dtype)

    def integers(self, high: int, shape) -> torch.Tensor:
        """Uniform integers in ``[0, high)`` (unbiased), int64 tensor ``(S, *shape)``; ``1 <= high <= 2**32``."""
        if isinstance(high, bool) or not isinstance(high, numbers.Integral) or not 1 <= high <= 1 << 32:
            raise ValueError(f"high must be an integer in [1, 2**32]; got {high!r}")
        full, flat = self._out(self._shape(shape), np.int64)
        _fill_integers(self._state, flat, np.uint64(high))
        return self._tensor(full)


# argument checks of the public entry points (dynamics.validation)
from dynamics.validation import Instance, Range, sequence_check, validate_module  # noqa: E402

validate_module(globals())
