"""The [CLS]-attention check of single_location.fig1 on synthetic attention weights (no encoder needed): a head
that attends to the decisive adjective above uniform and above the distractor passes; attention shared equally with
the distractor, or below uniform, fails and is classified ``disagrees``."""

import numpy as np
import xarray as xr

from figures._single_location_probing import _attention_check


def _dataset(target, distractor, n_draws=8, seed=0):
    rng = np.random.default_rng(seed)
    shape = (n_draws, 2, 3)  # draws x layers x heads
    noise = 0.01 * rng.standard_normal((2, *shape))  # SE ~0.004 in units of uniform: far below the margins used
    uniform = np.full(shape, 0.1)
    t = np.full(shape, 0.05) + 0.1 * noise[0]
    d = np.full(shape, 0.05) + 0.1 * noise[1]
    t[:, 1, 2] += target - 0.05
    d[:, 1, 2] += distractor - 0.05
    dims = ("draw", "attn_layer", "head")
    return xr.Dataset({"attn_target": (dims, t), "attn_distractor": (dims, d), "attn_uniform": (dims, uniform)})


def test_attention_check_passes_on_selection_and_fails_otherwise():
    c = _attention_check(_dataset(target=0.3, distractor=0.05))  # 3x uniform, 6x the distractor
    assert c.passed and c.status == "holds" and "layer 2, head 3" in c.name
    shared = _attention_check(_dataset(target=0.3, distractor=0.3))  # above uniform but no more than the distractor
    assert not shared.passed and shared.status == "disagrees"
    below = _attention_check(_dataset(target=0.08, distractor=0.01))  # above the distractor but below uniform
    assert not below.passed and below.status == "disagrees"
