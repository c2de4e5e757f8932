"""``single_location.basins(..., certify=True)`` never names a run after a fixed point that does not attract at the
run's step size: the d = 400, lambda = 0.2 and 0.3, alpha = 4e-3 cases where the oracle's map multiplier is -1.111
and -1.371 (the old certificate named 53 % and 58 % of the runs "oracle" there)."""

from __future__ import annotations

import numpy as np
import pytest

from closedform import single_location as sl
from dynamics import SaveAt

ALPHA = 4e-3


@pytest.mark.parametrize(("lam", "multiplier", "window"), [(0.2, 1.111, 80), (0.3, 1.371, 20)])
def test_runs_are_not_named_after_an_oracle_that_repels_at_their_step(lam, multiplier, window):
    task = sl.SingleLocationTask(d=400, L=10)
    pts = sl.fixed_points(task, lam, ALPHA, n_starts=0)  # the analytic families: enough to name these runs
    oracle = next(fp for fp in pts if fp.kind == "oracle")
    assert oracle.attracting is False
    top = max(abs(complex(z)) for z in oracle.map_eigenvalues)
    assert top == pytest.approx(multiplier, abs=1e-3)
    # independent of the linearisation: brute-force growth of a 1e-10 offset (k tilted towards v*) under the map,
    # per step over 20 steps once the other modes have decayed (window); 2e-3 covers their remaining transient
    e = 1e-10
    tr = sl.map(
        task,
        np.array([[np.sqrt(1 - e * e), 1.0, 0.0, e, e]]),
        alpha=ALPHA,
        n_steps=window + 20,
        lam=lam,
        saveat=SaveAt(steps=[window, window + 20]),
        warn_unconverged=False,
    )
    dist = np.max(np.abs(tr.states()[0, :, :5] - np.array([1.0, 1.0, 0.0, 0.0, 0.0])), axis=1)
    assert (dist[1] / dist[0]) ** (1 / 20) == pytest.approx(top, abs=2e-3)
    b = sl.basins(task, lam, 40, alpha=ALPHA, n_steps=4000, rng=1, certify=True, points=pts)
    counts = dict(zip(b.kinds, b.counts))
    assert counts["oracle"] == 0  # listed (every kind is), never reached
    assert counts.get("unconverged", 0) >= 10  # about half of the starts end on the nu = +-1 edge
    (note,) = [s for s in b.notes if "'oracle'" in s]
    assert f"{multiplier:.4g}" in note and "does not attract at alpha = 0.004" in note
    # the runs called unconverged do not reach the oracle when run on: 20 000 more steps leave them far from it
    x0 = sl.sample_initial_state(task, 40, 1)
    X, _ = sl.run_to_fixed_point(task, x0, alpha=ALPHA, lam=lam, n_steps=4000, points=pts, certify=True)
    names = sl.classify(task, lam, X, points=pts, basin=True)
    assert "oracle" not in set(names)
    end = sl.map(
        task, X, alpha=ALPHA, n_steps=20_000, lam=lam, saveat=SaveAt(final=True), warn_unconverged=False
    ).states()[:, -1, :5]
    near_oracle = np.min([np.max(np.abs(end - np.array(y)), axis=1) for y in oracle.orbit], axis=0)
    assert np.all(near_oracle > 0.1)


def test_certify_needs_points_at_the_step_size():
    task = sl.SingleLocationTask(d=400, L=10)
    pts = sl.fixed_points(task, 0.2, n_starts=0)  # no step size: attracting unknown
    with pytest.raises(ValueError, match="certify=True needs points computed at the run's step size"):
        sl.basins(task, 0.2, 4, alpha=ALPHA, n_steps=10, rng=0, certify=True, points=pts)
    # and such points certify nothing through the edges
    on_edge = np.array([[0.5, 1.0 - 1e-5, 0.0, 0.0, 0.0]])
    assert sl.classify(task, 0.2, on_edge, points=pts, basin=True)[0] == "unconverged"
    at_step = sl.fixed_points(task, 0.05, ALPHA, n_starts=0)  # the oracle attracts at lambda = 0.05
    assert sl.classify(task, 0.05, on_edge, points=at_step, basin=True)[0] == "oracle"


def test_basins_lists_every_kind_with_zero_counts():
    """Every kind of fixed point is reported, reached or not, in one fixed order (a sweep over parameters then gets the
    same variables at every grid point); the counts add up to n."""
    task = sl.SingleLocationTask(d=40, L=10)
    b = sl.basins(task, 0.05, 40, alpha=4e-3, rng=3, stop_tol=1e-3, n_steps=4000)
    assert b.kinds == sl.FIXED_POINT_KINDS + ("unconverged",)
    assert sum(b.counts) == b.n == 40 and 0 in b.counts  # some kinds (e.g. the maximum) are never reached
    assert all(f == c / b.n for f, c in zip(b.fractions, b.counts))
