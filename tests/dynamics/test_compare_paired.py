"""Paired comparisons (``dynamics.compare(..., paired=True)``): calibration by simulation, power gain, the step-0 case.

Model of a paired overlay: seed ``i`` starts at a random state, the theory run from that state gives ``theta_i``
(spread ``S`` across seeds, common to both sides), the learned run adds its own noise ``e_i`` (spread ``s``):
``x_i = theta_i + delta + e_i``. Under the null ``delta = 0``.

Tolerances: ``K`` false fails out of ``N`` replicates is Binomial(N, p); a correct rule (p <= level) passes
``K <= binom.ppf(1 - 1e-6, N, level)`` except with probability < 1e-6, and the paired t on the differences is exact,
so ``K >= binom.ppf(1e-6, N, level)`` too (the interval is not over-wide). Power rates are compared with the exact
power of the one-sample t (normal power integrated over the chi-square law of the variance, by quadrature) within
5 binomial SE (a false alarm < 6e-7).
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from scipy import integrate, stats

import dynamics

N_REP = 20_000
ALARM = 1e-6


def _runs(theta, x):
    """theory (n, k) and learned (n, k) as two Trajectory-shaped Datasets over (trajectory, time)."""
    n, k = x.shape
    coords = {"trajectory": np.arange(n), "time": np.arange(k, dtype=float)}
    return (
        xr.Dataset({"x": (("trajectory", "time"), theta)}, coords=coords),
        xr.Dataset({"x": (("trajectory", "time"), x)}, coords=coords),
    )


def _simulate(n, delta, rng, spread=3.0, noise=0.5):
    theta = spread * rng.standard_normal((n, N_REP))
    return _runs(theta, theta + delta + noise * rng.standard_normal((n, N_REP)))


def _exact_power(n, level, ncp):
    q, df = stats.t.ppf(1 - level / 2, n - 1), n - 1

    def integrand(v):  # P(|Z + ncp| > q sqrt(v / df)) times the chi-square(df) density of v
        c = q * np.sqrt(v / df)
        return (stats.norm.sf(c - ncp) + stats.norm.cdf(-c - ncp)) * stats.chi2.pdf(v, df)

    return integrate.quad(integrand, 0, np.inf)[0]


@pytest.mark.statistical
@pytest.mark.parametrize("n_seeds", [2, 3, 8])
@pytest.mark.parametrize("level", [1e-3, 0.05])
def test_paired_false_fail_rate_is_level(n_seeds, level):
    rng = np.random.default_rng(50 + 100 * n_seeds + int(level * 1e4))
    theory, learned = _simulate(n_seeds, 0.0, rng)
    res = dynamics.compare(theory, learned, variables="x", level=level, paired=True)
    assert res.attrs["paired"] == 1 and np.all(res.df == n_seeds - 1)
    k = int((res.status == "fails").sum())
    upper, lower = stats.binom.ppf(1 - ALARM, N_REP, level), stats.binom.ppf(ALARM, N_REP, level)
    assert lower <= k <= upper, f"{k} false fails of {N_REP}, outside [{lower}, {upper}] (level {level})"
    # Independent computation of the paired SE: the per-seed differences.
    d = learned.x.values - theory.x.values
    np.testing.assert_allclose(res.se.values[0], d.std(0, ddof=1) / np.sqrt(n_seeds), rtol=1e-12)  # round-off
    if n_seeds == 3:  # a wrong rule (normal quantile on the paired SE) is rejected by the same bound
        z = stats.norm.ppf(1 - level / 2)
        assert int((np.abs(res.gap) > z * res.se).sum()) > upper


@pytest.mark.statistical
def test_paired_test_gains_power_over_the_unpaired_one():
    """A shift of 1.5 noise SD with a start spread 6 times the noise: the paired test detects it at its exact power
    (noncentral t on n - 1 df with ncp = delta sqrt(n) / s); the unpaired test, whose SE carries the start spread
    on both sides, almost never does."""
    n, level, delta, noise = 8, 0.05, 0.75, 0.5
    rng = np.random.default_rng(11)
    theory, learned = _simulate(n, delta, rng, spread=3.0, noise=noise)
    paired = float(
        (dynamics.compare(theory, learned, variables="x", level=level, paired=True).status == "fails").mean()
    )
    unpaired = float((dynamics.compare(theory, learned, variables="x", level=level).status == "fails").mean())
    power = _exact_power(n, level, delta * np.sqrt(n) / noise)
    assert abs(paired - power) <= 5 * np.sqrt(power * (1 - power) / N_REP), (paired, power)
    assert paired > 0.9 and unpaired < 0.2, (paired, unpaired)
    # the paired SE is the smaller one on average: here by the factor noise / sqrt(2 spread^2 + noise^2) ~ 0.12
    se_p = dynamics.compare(theory, learned, variables="x", paired=True).se.mean()
    se_u = dynamics.compare(theory, learned, variables="x").se.mean()
    assert float(se_p / se_u) < 0.25


def test_identical_starts_give_a_zero_width_paired_interval():
    """At step 0 an overlay's theory equals each seed's learned state: the paired gap and SE are exactly 0 (the
    unpaired test reports the seeds' spread instead)."""
    rng = np.random.default_rng(3)
    start = rng.normal(size=(8, 1))
    theory, learned = _runs(start, start.copy())
    res = dynamics.compare(theory, learned, variables="x", paired=True)
    assert res.gap.item() == 0.0 and res.se.item() == 0.0 and str(res.status.item()) == "holds"
    assert str(res.tests.item()).startswith("difference only")  # allowance 0: the row says what it tests
    unpaired = dynamics.compare(theory, learned, variables="x")
    assert unpaired.se.item() > 0.1


def test_paired_needs_one_theory_trajectory_per_seed():
    theory, learned = _runs(np.zeros((3, 2)), np.ones((4, 2))[:3])
    learned4 = xr.concat([learned, learned.isel(trajectory=[0])], dim="trajectory")
    with pytest.raises(ValueError, match="one theory trajectory per learned seed"):
        dynamics.compare(theory, learned4, variables="x", paired=True)
    exact = xr.Dataset({"x": ("time", np.zeros(2))}, coords={"time": [0.0, 1.0]})
    with pytest.raises(ValueError, match="one theory trajectory per learned seed"):
        dynamics.compare(exact, learned, variables="x", paired=True)
