"""Pinned values for closedform.icl_regression (issue 19, item 2): each test kills mutants that survived the sampled
mutation run of ``tools/mutate.py`` (named in each docstring), against an independent value."""

from __future__ import annotations

import numpy as np

from closedform import icl_regression as icl

TASK = icl.ICLRegression(d=5, L=40, sigma2=0.1)


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
