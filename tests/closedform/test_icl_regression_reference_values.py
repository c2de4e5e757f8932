"""Pinned values for closedform.icl_regression (issue 19, item 2): each test kills mutants that survived the sampled
mutation run of ``tools/mutate.py`` (named in each docstring), against an independent value."""

from __future__ import annotations

import numpy as np
import pytest

from closedform import icl_regression as icl

TASK = icl.ICLRegressionTask(d=5, L=40, sigma2=0.1)


def test_true_loss_mc_standard_error_is_calibrated_on_tiny_samples():
    """The reported se^2 must be an unbiased estimate of the variance of the reported mean: over R independent runs
    of n = 5 prompts (chunks of 2, so Chan's pairwise merge of spec Sec. 4.1's estimator is used), mean(se^2)
    / var(mean) = 1. Kills ``m2 / (count - 1)`` -> ``(count + 1)`` (ratio (n-1)/(n+1) = 2/3) and other slips in the
    merge. Tolerance: 4 standard errors of the ratio by the delta method from the runs themselves (SE of mean(se^2)
    and of the sample variance, (m4 - var^2)/R, covariance ignored: conservative, bootstrap gives 0.026 vs 0.032);
    the wrong ratio 2/3 is 10 SE away, and the test checks that it is rejected."""
    om, mu = np.array([0.5, -0.3]), np.array([0.6, 0.4])
    R, n = 4000, 5
    means, ses = np.empty(R), np.empty(R)
    for r in range(R):
        means[r], ses[r] = icl.true_loss_mc(TASK, om, mu, n, rng=r, chunk=2)
    S = ses**2
    A, sA = S.mean(), S.std(ddof=1) / np.sqrt(R)
    B = means.var(ddof=1)
    sB = np.sqrt((np.mean((means - means.mean()) ** 4) - B**2) / R)
    Q = A / B
    sQ = Q * np.hypot(sA / A, sB / B)
    assert abs(Q - 1.0) <= 4 * sQ, (Q, sQ)
    assert abs(Q * (n - 1) / (n + 1) - 1.0) > 4 * sQ  # the test has the power to see the wrong normalisation


@pytest.mark.parametrize("xi", [0.0, -0.5, [1.0, -2.0]])
def test_bayes_risk_asymptotic_refuses_a_non_positive_ratio(xi):
    """xi = d/L > 0 (spec §7.4): a zero or negative ratio is refused naming xi (a negative one would otherwise give a
    finite, meaningless risk). Kills ``np.any(xi <= 0)`` -> ``np.any(None)``."""
    with pytest.raises(ValueError, match=r"xi must be finite.* > 0"):
        icl.bayes_risk_asymptotic(xi, 0.1)
