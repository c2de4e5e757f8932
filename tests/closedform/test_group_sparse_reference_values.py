"""Pinned values for closedform.group_sparse (issue 19, item 2): each test kills mutants that survived the sampled
mutation run of ``tools/mutate.py`` (named in each docstring)."""

from __future__ import annotations

import numpy as np
import pytest

from closedform import group_sparse as gs


def test_forward_names_the_expected_shape_of_X():
    """Kills ``ValueError(f"X must have shape ...")`` -> ``ValueError(None)`` in ``forward``: a 2-d X is refused with
    a message naming X, the expected number of axes (n, d, D) and the shape given."""
    d, D = 2, 3
    with pytest.raises(ValueError, match=r"X must .*ndim in \(3,\); got shape \(4, 2\)"):
        gs.forward(np.zeros(d + D), np.eye(d + D), np.zeros((4, d)))
