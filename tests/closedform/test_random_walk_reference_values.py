"""Pinned values for closedform.random_walk (issue 19, item 2): each test kills mutants that survived the sampled
mutation run of ``tools/mutate.py`` (named in each docstring), against an independent value."""

from __future__ import annotations

import math

import numpy as np

from closedform import random_walk as rw


def test_direction_error_computes_in_float64_for_float32_input():
    """Theorem C1 item 3 (Sec. C.5.1): ||V/||V|| - T/||T||||_F^2 = 2 - 2 <V, T> / (||V|| ||T||). For V = [[1, 2],
    [3, 4]] (exact in float32) and T = I: <V, T> = 5, ||V|| = sqrt(30), ||T|| = sqrt(2), so the error is
    sqrt(2 - 10 / sqrt(60)). Tolerance 1e-14 relative: float64 roundings of a 4-entry sum (float32 arithmetic errs by
    ~1e-7). Kills ``np.asarray(V, dtype=np.float64)`` -> ``dtype=None``, which computes float32 input in float32."""
    V = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    exact = math.sqrt(2.0 - 10.0 / math.sqrt(60.0))
    got = rw.direction_error(V, np.eye(2))
    assert abs(got - exact) <= 1e-14 * exact


def test_attention_stats_default_weights_by_hand():
    """Sec. C.5.1 summaries of S (n = 3 walks, N = 4 positions; parent = position N-1, blank = position N) with the
    default uniform weights 1/n, by hand: mean parent (0.5 + 0.2 + 0.8)/3, mean blank (0.1 + 0.3 + 0.1)/3, mean of
    the row maxima of the other positions (0.3 + 0.3 + 0.1)/3, and the 0.05-quantile of the parent column, its
    minimum 0.2 (cumulative weight 1/3 >= 0.05 at the smallest value). Exact up to one rounding per mean (rtol
    1e-15). Kills ``S.shape[0]`` -> ``S.shape[1]`` in the default weights (1/N = 1/4 instead of 1/3)."""
    S = np.array([[0.1, 0.3, 0.5, 0.1], [0.3, 0.2, 0.2, 0.3], [0.05, 0.05, 0.8, 0.1]])
    got = rw.attention_stats(S)
    np.testing.assert_allclose(got["attn_parent"], 1.5 / 3, rtol=1e-15)
    np.testing.assert_allclose(got["attn_blank"], 0.5 / 3, rtol=1e-15)
    np.testing.assert_allclose(got["attn_max_other"], 0.7 / 3, rtol=1e-15)
    assert got["attn_parent_q"] == 0.2
