"""Seed-level checks shared by the single_location Transformer figures (Marion et al., Figs. 8-10): a Student-t
interval on the seed mean, and a binomial test of alignment against chance.
"""

from __future__ import annotations

import math

import numpy as np

from dynamics.compare import t_quantile
from figures.registry import CheckResult

LEVEL = 1e-3  # two-sided false-alarm level of every seed-mean check of these figures


def mean_check(name, samples, *, below=None, above=None, tolerance):
    """A check on the seed mean with its Student-t interval at level 1e-3 (n - 1 d.o.f.): passes when the whole
    interval lies below ``below`` (and/or above ``above``), i.e. the claim is established, not merely not refuted.
    """
    x = np.asarray(samples, dtype=np.float64).ravel()
    n = x.size
    mean = float(x.mean())
    half = float(t_quantile(LEVEL, n - 1) * x.std(ddof=1) / math.sqrt(n))
    ok = (below is None or mean + half < below) and (above is None or mean - half > above)
    want = " and ".join(
        w for w in (f"> {above:.4g}" if above is not None else "", f"< {below:.4g}" if below is not None else "") if w
    )
    return CheckResult(
        name=name,
        passed=bool(ok),
        measured=f"{mean:.4g} (t interval [{mean - half:.4g}, {mean + half:.4g}])",
        expected=f"mean {want} (whole interval)",
        tolerance=tolerance,
        n_seeds=n,
    )


def above_chance_check(name, overlaps, d, n_overlaps):
    """Per-seed count of runs whose largest |overlap| with the oracle directions exceeds 3/sqrt(d), against the
    binomial law of that count without any alignment: each of the ``n_overlaps`` overlaps of a random unit vector is
    ~ N(0, 1/d), above 3/sqrt(d) in absolute value with probability 2 Phi(-3) = 0.0027, so a run's maximum is above
    with p0 = 1 - (1 - 0.0027)^n_overlaps; passes when P(Bin(n, p0) >= count) < 1e-3.
    """
    from scipy.stats import binom, norm

    x = np.asarray(overlaps, dtype=np.float64).ravel()
    chance = 3.0 / math.sqrt(d)
    count = int(np.sum(x > chance))
    p0 = 1.0 - (1.0 - 2.0 * norm.sf(3.0)) ** n_overlaps
    pval = float(binom.sf(count - 1, x.size, p0))
    return CheckResult(
        name=name,
        passed=bool(pval < LEVEL),
        measured=f"{count} of {x.size} runs above {chance:.3g}",
        expected=f"more than chance: P(>= {count} of {x.size} | no alignment) = {pval:.2g}",
        tolerance=f"binomial test against no alignment (each run above with p0 = {p0:.3g}), level {LEVEL:g}",
        n_seeds=x.size,
    )
