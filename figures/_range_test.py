"""The exact range-count test of a set of runs against a reference table's [min, max] over its runs.

Used by the single-location figures that compare torch runs with the ranges their reference tables quote (Fig. 5 of
docs/models/single_location.md §8.4 and the Transformer figure of §8.8).
"""

from __future__ import annotations

import math

import numpy as np

from figures.registry import CheckResult

_FIG5_REF_RUNS = 12  # runs behind each range of the table
_FIG5_LEVEL = 1e-3  # false-alarm level of each Fig. 5 check


def range_count_pvalue(n_inside: int, n_new: int, n_ref: int) -> float:
    """P(at most ``n_inside`` of ``n_new`` new runs fall inside [min, max] of ``n_ref`` reference runs) when all
    ``n_ref + n_new`` runs are i.i.d. from one continuous law.

    Exact: the ranks of the pooled runs are a uniform arrangement of n_ref R's and n_new N's; m new runs lie between
    the first and the last R in (n_new - m + 1) (a, b)-splits of the others (a below, b above) times C(n_ref - 2 + m, m)
    arrangements of the middle, out of C(n_ref + n_new, n_new).
    """
    total = math.comb(n_ref + n_new, n_new)
    p = sum((n_new - m + 1) * math.comb(n_ref - 2 + m, m) for m in range(0, n_inside + 1))
    return p / total


def _range_check(name, samples, lo, hi, n_ref=_FIG5_REF_RUNS):
    """A calibrated check that our runs have the law of the paper's: the count of runs inside the paper's [min, max]
    over ``n_ref`` runs, against its exact null distribution (:func:`range_count_pvalue`), at level 1e-3.
    """
    inside = int(np.sum((samples >= lo) & (samples <= hi)))
    n = int(samples.size)
    pval = range_count_pvalue(inside, n, n_ref)
    return CheckResult(
        name=name,
        passed=bool(pval > _FIG5_LEVEL),
        measured=f"{inside} of {n} runs inside",
        expected=f"spec range [{lo:.4g}, {hi:.4g}] over {n_ref} runs; P(<= {inside} inside) = {pval:.2g}",
        tolerance=f"exact rank test: fails if P(count <= observed) < {_FIG5_LEVEL:g} under 'same law "
        f"as the paper's {n_ref} runs' (every run lands inside with prob. "
        f"{(n_ref - 1) / (n_ref + 1):.3f})",
        n_seeds=n,
    )
