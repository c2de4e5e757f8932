"""Statistical assertions shared by the test suite.

The rule (STYLE.md §2.12): a Monte Carlo estimate ``mean`` with standard error ``se`` agrees with an exact value when
``|mean - value| <= n_se * se + atol``. ``n_se = 5`` makes a false alarm a < 6e-7 event per comparison (two-sided
Gaussian tail), so the suite stays deterministic in practice even before seeds are fixed; ``atol`` covers the
numerical error of the exact value itself (quadrature, float64 round-off) and is normally tiny. Every negative control
(a deliberately wrong formula) must then *fail* the same test: ``assert_mc_rejects`` checks that, which proves the
sample was large enough for the test to have power against that bug.

The Gaussian tail bound assumes the SE itself is accurate, i.e. a large sample (hundreds of draws or more, as in
these Monte Carlo checks). With a handful of seeds the SE is itself noisy and the real false-alarm rate of "5 SE" is
far larger (12.6 % with 2 seeds, 3.8 % with 3): compare few seeds with :func:`dynamics.compare` (Student t, calibrated
for any n >= 2) or :func:`assert_t_close` below.
"""

from __future__ import annotations

import numpy as np


def mc_gap_in_se(mean, se, value, atol=0.0):
    """Return |mean - value| - atol in units of the standard error (elementwise, >= 0 where within atol)."""
    mean, se, value = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (mean, se, value)))
    excess = np.maximum(np.abs(mean - value) - atol, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se > 0, excess / se, np.where(excess > 0, np.inf, 0.0))


def assert_mc_close(mean, se, value, n_se: float = 5.0, atol: float = 0.0, what: str = "Monte Carlo estimate"):
    """Assert ``|mean - value| <= n_se * se + atol`` elementwise, with a readable message on failure."""
    gap = mc_gap_in_se(mean, se, value, atol)
    if not np.all(gap <= n_se):
        worst = int(np.argmax(gap))
        m = np.ravel(np.broadcast_to(mean, gap.shape))[worst]
        s = np.ravel(np.broadcast_to(se, gap.shape))[worst]
        v = np.ravel(np.broadcast_to(value, gap.shape))[worst]
        raise AssertionError(
            f"{what}: MC mean {m:.10g} +- {s:.3g} (SE) vs exact {v:.10g}: gap {gap.ravel()[worst]:.2f} SE > {n_se} SE "
            f"(worst of {gap.size}; atol={atol:g})"
        )


def assert_mc_rejects(mean, se, wrong_value, n_se: float = 5.0, atol: float = 0.0, what: str = "negative control"):
    """Assert that a deliberately wrong value is rejected by the ``assert_mc_close`` rule at some point at least."""
    gap = mc_gap_in_se(mean, se, wrong_value, atol)
    if not np.any(gap > n_se):
        raise AssertionError(
            f"{what}: the wrong formula was NOT rejected (max gap {float(np.max(gap)):.2f} SE <= {n_se} SE); "
            "the Monte Carlo test has no power against this bug: increase the sample size"
        )


def mean_and_se(samples, axis=0):
    """Sample mean and its standard error (ddof=1) along ``axis``."""
    samples = np.asarray(samples, dtype=np.float64)
    n = samples.shape[axis]
    return samples.mean(axis=axis), samples.std(axis=axis, ddof=1) / np.sqrt(n)


def assert_t_close(samples, value, *, level: float = 1e-6, allowance: float = 0.0, axis: int = 0,
                   what: str = "seed mean"):
    """Assert that the mean of ``samples`` (seeds along ``axis``, any number >= 2) agrees with ``value`` by the
    calibrated Student-t test of :func:`dynamics.compare.gap_test` at false-alarm probability ``level`` per
    element."""
    from dynamics.compare import gap_test

    samples = np.asarray(samples, dtype=np.float64)
    n = samples.shape[axis]
    mean, se = mean_and_se(samples, axis=axis)
    res = gap_test(value, mean, se, n, allowance=allowance, level=level)
    if not np.all(res["holds"]):
        worst = int(np.argmax(np.abs(res["gap"]) - res["half_width"]))
        raise AssertionError(f"{what}: gap {np.ravel(res['gap'])[worst]:.4g}, t interval half-width "
                             f"{np.ravel(res['half_width'])[worst]:.3g} ({n} seeds, level {level:g}), allowance "
                             f"{allowance:g}")
