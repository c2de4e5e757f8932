"""Pinned values for closedform.nearest_neighbor (issue 19, item 2): each test kills mutants that survived the sampled
mutation run of ``tools/mutate.py`` (named in each docstring)."""

from __future__ import annotations

import numpy as np
import pytest

from closedform import nearest_neighbor as nn


def test_prompts_refuses_a_wrong_istar_naming_the_true_argmax():
    """A 1-based (or otherwise wrong) istar is refused with a message giving the prompt, the istar given and the
    true 0-based argmax, here found by hand: with xq = e1 and X rows at angles 1.0, 0.1, 0.5 rad, c = cos(angle) is
    largest for j = 1. Kills ``np.argmax(c[b])`` -> ``np.argmax(None)`` (which reports argmax = 0)."""
    ang = np.array([1.0, 0.1, 0.5])
    X = np.stack([np.cos(ang), np.sin(ang)], axis=1)[None]  # (B=1, N=3, d=2), unit rows
    xq = np.array([[1.0, 0.0]])
    c = np.cos(ang)[None]
    with pytest.raises(ValueError, match=r"prompt 0: istar = 2, argmax = 1 \(a 1-based index\?\)"):
        nn.Prompts(X=X, xq=xq, c=c, istar=np.array([2]))
