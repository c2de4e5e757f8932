"""Cost of the argument checks per checked call: a validated public callable against the function it wraps.

Usage (from the repository root, with the project on PYTHONPATH)::

    python tools/validation_cost.py [--calls N] [--repeats R]

Every public callable wrapped by ``dynamics.validation`` keeps the unchecked function as ``__wrapped__``. For a few
callables with cheap bodies (so that the checks are a visible part of the call) the tool times ``N`` calls of the
checked and of the unchecked function, ``R`` times each, interleaved, and prints the best time per call of each and
their difference: the checks' cost per call (the best of several repeats is the least disturbed by other load).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cases():
    """(label, checked callable, args, kwargs): cheap bodies, a few parameters of different kinds."""
    sys.path.insert(0, ROOT)
    import numpy as np

    from closedform import icl_regression as icl
    from closedform import single_location as sl
    from dynamics.validation import Range, validated

    @validated(x=Range(gt=0), n=Range(integer=True, ge=1))
    def two_scalars(x: float, n: int):
        return x

    task = icl.ICLRegressionTask(d=3, L=4, sigma2=0.1)
    sl_task = sl.SingleLocationTask(d=8, L=4, noise=0.1)
    X = np.zeros((2, 4, 3))
    y = np.zeros((2, 4))
    xq = np.zeros((2, 3))
    return [
        ("validated(x: float > 0, n: int >= 1)", two_scalars, (1.0, 3), {}),
        ("icl_regression.state_names(H)", icl.state_names, (3,), {}),
        ("icl_regression.gd_risk(task, eta)", icl.gd_risk, (task, 0.5), {}),
        ("icl_regression.predict_gd(X, y, xq, eta) (3 small arrays)", icl.predict_gd, (X, y, xq, 0.5), {}),
        ("single_location.risk(task, lam, kappa, nu)", sl.risk, (sl_task, 1.0, 0.3, 0.4), {}),
    ]


def _time(fn, args, kwargs, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args, **kwargs)
    return (time.perf_counter() - t0) / calls


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000, help="calls per timing")
    ap.add_argument("--repeats", type=int, default=7, help="timings per function; the best is kept")
    args = ap.parse_args(argv)
    head = f"{'callable':58s} {'checked':>10s} {'unchecked':>10s} {'checks':>9s}"
    print(f"{head}   (us per call, best of {args.repeats})")
    for label, checked, a, kw in _cases():
        raw = checked.__wrapped__
        checked(*a, **kw)  # the check plan is built on the first call; compiled kernels load here too
        raw(*a, **kw)
        best_c = best_r = float("inf")
        for _ in range(args.repeats):
            best_c = min(best_c, _time(checked, a, kw, args.calls))
            best_r = min(best_r, _time(raw, a, kw, args.calls))
        print(f"{label:58s} {1e6 * best_c:10.2f} {1e6 * best_r:10.2f} {1e6 * (best_c - best_r):9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
