"""Pinned values for closedform.single_location (issue 19, item 2): each test kills mutants that survived the sampled
mutation run of ``tools/mutate.py`` (named in each docstring)."""

from __future__ import annotations

import numpy as np
import pytest

from closedform import single_location as sl


def test_vectors_from_state_names_the_five_columns():
    """Kills ``ValueError(f"state must have 5 columns ...")`` -> ``ValueError(None)``: a state with 4 columns is
    refused with a message naming the parameter, the five coordinates and the shape given."""
    with pytest.raises(ValueError, match=r"state must have 5 columns \(kappa, nu, theta, eta, rho\); got shape "
                                         r"\(3, 4\)"):
        sl.vectors_from_state(sl.SingleLocation(d=6, L=4), np.zeros((3, 4)), rng=0)
