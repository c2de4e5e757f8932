"""Pinned values for closedform.scan_snap (issue 19, item 2): each test kills mutants that survived the sampled
mutation run of ``tools/mutate.py`` (named in each docstring), against an independent value."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from closedform import scan_snap as ss


@pytest.mark.parametrize("M", [5, 20, 50])
def test_transition_times_roots_to_a_few_ulps_against_mpmath(M):
    """Spec Sec. 2.4: x_pk solves exp(x)(x - 1) = M - 1 (x > 1) and (1 + omega1) ln M is the larger root of
    exp(x) = (M - 1) x. References: mpmath's 40-digit roots. Tolerance 8 ulps of x (~3e-15): the float64 residual
    of either equation determines its root to about one ulp. Kills dropping ``xtol=1e-15`` from the brentq call
    (brentq's default xtol 2e-12 leaves an error of 1.2e-13 at M = 50)."""
    mpmath.mp.dps = 40
    f = lambda x: mpmath.exp(x) * (x - 1) - (M - 1)  # noqa: E731 - one-line equation
    x_pk = mpmath.findroot(f, (mpmath.mpf(1), 2 + mpmath.log(M)), solver="anderson")
    x_big = mpmath.findroot(lambda x: mpmath.exp(x) - (M - 1) * x, 2 * mpmath.log(M) + 2)
    got = ss.transition_times(M=M, K=3, eta_Y=0.5)
    assert abs(got.x_pk - float(x_pk)) <= 8 * np.spacing(float(x_pk))
    assert abs((1 + got.omega1) * np.log(M) - float(x_big)) <= 8 * np.spacing(float(x_big))
    # t_peak of Sec. 2.4: K (e^x_pk + (M - 1) x_pk - 1) / (M eta_Y), from the 40-digit root
    t_peak = 3 * (mpmath.exp(x_pk) + (M - 1) * x_pk - 1) / (M * 0.5)
    assert got.t_peak == pytest.approx(float(t_peak), rel=1e-14)
