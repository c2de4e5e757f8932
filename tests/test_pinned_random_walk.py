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
