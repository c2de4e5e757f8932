"""The counter-keyed block streams of empirical.seeding against independent references, bit for bit.

The compiled kernels (SFC64 in registers, the ziggurat with its signed fast-path tables, Lemire's integers) are
re-derived here from the module's description alone: the generator is numpy's own ``numpy.random.SFC64`` set to the
documented start state, and the samplers are plain Python written from the documented algorithm. The statistical
tests of the laws (KS, tail mass, moments, a too-wide law rejected) are in tests/empirical/test_train.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("torch")

from empirical.seeding import _ZIG_F, _ZIG_X, BlockRNG, stream_keys  # noqa: E402

CPU = "cpu"
M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _numpy_sfc64(key, block: int) -> np.random.SFC64:
    """numpy's SFC64 at the documented start of ``block``: (key0, key1, splitmix64(block), 1), 12 outputs dropped."""
    g = np.random.SFC64(0)
    state = g.state
    state["state"]["state"] = np.array([key[0], key[1], _splitmix64(block), 1], dtype=np.uint64)
    state["has_uint32"] = 0
    g.state = state
    g.random_raw(12)
    return g


def _reference_normals(g: np.random.SFC64, n: int, sign_bit: int = 8):
    """Ziggurat of the module notes in plain Python: layer = 8 low bits, sign = bit ``sign_bit``, abscissa = the
    top 53 bits times 2^-53 X[i]; inside X[i+1] accept, layer 0 beyond it: Marsaglia's tail; else the wedge test
    with a fresh 53-bit uniform, rejection draws afresh. Returns the draws and the numbers of tail / wedge events."""
    X, F, u53 = _ZIG_X, _ZIG_F, 2.0**-53
    out, tails, wedges = [], 0, 0
    while len(out) < n:
        u = int(g.random_raw())
        i, negative = u & 0xFF, (u >> sign_bit) & 1
        z = float(u >> 11) * u53 * X[i]
        if z >= X[i + 1]:
            if i == 0:
                tails += 1
                while True:
                    e1 = -math.log((float(int(g.random_raw()) >> 11) + 1.0) * u53) / X[1]
                    e2 = -math.log((float(int(g.random_raw()) >> 11) + 1.0) * u53)
                    if e2 + e2 > e1 * e1:
                        break
                z = X[1] + e1
            else:
                wedges += 1
                w = float(int(g.random_raw()) >> 11) * u53
                if F[i] + w * (F[i + 1] - F[i]) >= math.exp(-0.5 * z * z):
                    continue
        out.append(-z if negative else z)
    return np.array(out), tails, wedges


def test_block_generator_is_numpy_sfc64_from_the_documented_start_state():
    """Start state of two seeds at block 9 and their next 2 000 uniforms ((raw >> 11) 2^-53) equal numpy's SFC64."""
    keys = stream_keys((3, 8), "data")
    rng = BlockRNG(keys, 9, CPU)
    refs = [_numpy_sfc64(keys[s], 9) for s in range(2)]
    for s, g in enumerate(refs):
        np.testing.assert_array_equal(rng._state[s], g.state["state"]["state"])
    u = rng.uniform((2000,)).numpy()
    for s, g in enumerate(refs):
        np.testing.assert_array_equal(u[s], (g.random_raw(2000) >> np.uint64(11)).astype(np.float64) * 2.0**-53)


def test_compiled_ziggurat_equals_the_plain_python_ziggurat_bit_for_bit():
    """60 000 normals of two seeds (tail and wedge paths included: ~15 and ~700 events expected) are exactly the
    plain-Python ziggurat's; a reference with the sign taken from the wrong bit is told apart."""
    keys = stream_keys((4, 21), "eval")
    n = 30_000
    x = BlockRNG(keys, 2, CPU).normal((n,)).numpy()
    tails = wedges = 0
    for s in range(2):
        ref, t, w = _reference_normals(_numpy_sfc64(keys[s], 2), n)
        np.testing.assert_array_equal(x[s], ref)
        tails, wedges = tails + t, wedges + w
    # P(no tail event in 60 000 draws) = exp(-15.5) and wedge events ~ 1.2 %: both slow paths were exercised.
    assert tails >= 1 and wedges >= 100
    wrong, _, _ = _reference_normals(_numpy_sfc64(keys[0], 2), 1000, sign_bit=9)
    assert not np.array_equal(x[0, :1000], wrong)


def test_compiled_integers_equal_lemires_method_in_plain_python():
    """Integers in [0, 7): 32-bit multiply-shift of the high output word, rejected below 2^32 mod 7 (Lemire 2019)."""
    keys = stream_keys((5,), "sgd")
    k = BlockRNG(keys, 0, CPU).integers(7, (3000,)).numpy()[0]
    g, h = _numpy_sfc64(keys[0], 0), 7
    threshold, ref = (1 << 32) % h, []
    while len(ref) < k.size:
        m = (int(g.random_raw()) >> 32) * h
        if (m & 0xFFFFFFFF) >= threshold:
            ref.append(m >> 32)
    np.testing.assert_array_equal(k, ref)
