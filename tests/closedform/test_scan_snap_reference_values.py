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


def _p8_task():
    """Spec Sec. 7 P8: K = 2, M = 1000, token 0 common with P = 0.3, 5 distinct tokens with P = 0.7 (0.2..1.0)/3."""
    P = np.zeros((2, 11))
    P[:, 0] = 0.3
    for n in range(2):
        P[n, 1 + 5 * n : 6 + 5 * n] = 0.7 * np.array([0.2, 0.4, 0.6, 0.8, 1.0]) / 3.0
    return ss.ScanSnapTask(classes=ss.SequenceClasses.from_P(P, M=1000, name="P8"), eta_Y=1.0, eta_Z=0.5)


def test_measure_transition_refines_a_peak_at_the_first_interior_grid_point():
    """With n_grid = 3 and t_max = 22.6 the grid is (0, 11.3, 22.6): the coarse argmax of gamma_hat is index 1, an
    interior point, and the bounded Brent refinement must still reach the spec's P8 values (Sec. 7: t_peak =
    11.297588, gamma_hat_max = 4.4049290, t_half = 15.879335, quoted to 1e-5 / 1e-6 relative as in
    test_scan_snap's reference test). Kills the interior test ``i == 0`` -> ``i == 1`` (which refuses this grid)."""
    meas = ss.measure_transition(_p8_task(), 0, t_max=22.6, n_grid=3)
    assert meas["t_peak"] == pytest.approx(11.297588, rel=1e-5)
    assert meas["gamma_hat_max"] == pytest.approx(4.4049290, rel=1e-6)
    assert meas["t_half"] == pytest.approx(15.879335, rel=1e-5)


def test_decoder_h_star_by_hand_and_on_no_updates():
    """Lemma 5 (spec Sec. 2.3) by hand: h*(0) = 0, h*(1) = eta_Y / M, h*(2) = eta_Y / M + eta_Y / (M - 1 + e^eta_Y)
    (since M h*(1) = eta_Y); rtol 1e-15 (three roundings). An empty array of update counts gives an empty array.
    Kills ``int(s.max()) if s.size else 0`` -> ``... if s.size or True ...`` (the max of an empty array raises)."""
    M, eta = 7, 0.3
    got = ss.decoder_h_star(np.array([2, 0, 1]), M=M, eta_Y=eta)
    np.testing.assert_allclose(got, [eta / M + eta / (M - 1 + np.exp(eta)), 0.0, eta / M], rtol=1e-15)
    empty = ss.decoder_h_star(np.array([], dtype=np.int64), M=M, eta_Y=eta)
    assert empty.shape == (0,)


def test_syn_without_distinct_tokens_by_hand():
    """Spec Sec. 5.1 generator with num_unique = 0 (allowed: the context is then only common tokens): Q = 2 queries,
    R = 2 classes per query, 1 common token and 1 common-per-query token give Lc = 1 + 2 = 3, K = 4, M = 3 + 2 + 4;
    class n = 2m + i puts mass 1/2 on token 0 and 1/2 on token 1 + m (by hand). Kills ``min_value=0`` -> ``1`` for
    num_unique."""
    cl = ss.SequenceClasses.syn(2, 2, num_common=1, num_common_per_last=1, num_unique=0)
    P = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.5, 0.0, 0.5]])
    assert cl.M == 9
    np.testing.assert_array_equal(cl.P, P)
    np.testing.assert_array_equal(cl.tgt, [5, 6, 7, 8])


def test_growth_factor_refuses_overflow_and_keeps_the_largest_finite_value():
    """chi = exp(2 (z - z0)) is finite up to z - z0 = log(max float64) / 2 = 354.89 and refused beyond (it used to
    return inf silently); exp(708) is float64-exact to a few ulps (rtol 1e-14 of numpy's own exp)."""
    np.testing.assert_allclose(ss.growth_factor(354.0, 0.0), np.exp(708.0), rtol=1e-14)
    with pytest.raises(ValueError, match=r"z - z0 must be <= 354.89"):
        ss.growth_factor(0.0, -355.0)
