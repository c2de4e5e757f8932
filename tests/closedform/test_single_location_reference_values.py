"""Pinned values for closedform.single_location (issue 19, item 2): each test kills mutants that survived the sampled
mutation run of ``tools/mutate.py`` (named in each docstring)."""

from __future__ import annotations

import numpy as np
import pytest

from closedform import single_location as sl


def test_vectors_from_state_names_the_five_columns():
    """Kills ``ValueError(f"state must have 5 columns ...")`` -> ``ValueError(None)``: a state with 4 columns is
    refused with a message naming the parameter, the five coordinates and the shape given."""
    with pytest.raises(
        ValueError,
        match=r"state must have 5 columns \(kappa, nu, theta, eta, rho\); got shape "
        r"\(3, 4\)",
    ):
        sl.vectors_from_state(sl.SingleLocationTask(d=6, L=4), np.zeros((3, 4)), rng=0)


def test_pgd_per_trajectory_lambda_alpha_and_d_match_one_run_each():
    """pgd with lam of shape (n, 1), alpha (n,) and d (n,) (spec Sec. 6.4: they enter the map only as numbers) must
    give each trajectory the run with its own scalars. Reference: separate scalar runs, the path that
    test_single_location pins to brute-force d-dimensional PGD. Same kernel arithmetic, so agreement to 1e-13
    relative (a few roundings). Kills ``zip(alphas, lam0, svals)`` -> ``zip(None, ...)`` and swapped or dropped
    per-trajectory parameters."""
    state0 = np.array([0.1, 0.05, 0.02, 0.03, 0.01])
    lams, alphas, ds = [0.5, 1.0, 2.0], [0.1, 0.2, 0.05], [6, 10, 16]
    names = ["kappa", "nu", "theta", "eta", "rho"]
    batch = sl.map(
        sl.SingleLocationTask(d=8, L=4),
        state0,
        alpha=np.array(alphas),
        n_steps=30,
        lam=np.array(lams)[:, None],
        d=np.array(ds),
    )
    for i, (lam, alpha, d) in enumerate(zip(lams, alphas, ds)):
        one = sl.map(sl.SingleLocationTask(d=d, L=4), state0, alpha=alpha, n_steps=30, lam=lam)
        for v in names:
            np.testing.assert_allclose(batch[v].values[i], one[v].values[0], rtol=1e-13, atol=1e-15)


def test_basins_fractions_and_binomial_standard_errors():
    """basins (spec Sec. 6.5) at d = 40, L = 10, lambda = 0.05, 40 starts: the counts add up to n, each fraction is
    count / n and its standard error the binomial sqrt(p (1 - p) / n), computed here from the counts (exact up to
    two roundings, rtol 1e-15); at this point both attractors the spec names, oracle and swap, are reached.
    Kills ``classify(task, lam, ...)`` -> ``classify(lam, ...)`` and ``(1 - f)`` -> ``(2 - f)``."""
    n = 40
    b = sl.basins(sl.SingleLocationTask(d=40, L=10), 0.05, n, alpha=4e-3, rng=1, stop_tol=1e-3)
    counts = np.array(b.counts)
    assert b.n == n and counts.sum() == n and {"oracle", "swap"} <= set(b.kinds)
    p = counts / n
    np.testing.assert_allclose(b.fractions, p, rtol=1e-15)
    np.testing.assert_allclose(b.standard_errors, np.sqrt(p * (1 - p) / n), rtol=1e-15)
