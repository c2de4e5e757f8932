"""``SaveAt(log=n)`` on an ODE puts the earliest stage on the grid (issue 16 item 3).

The first positive save is 1e-6 of the span (``dynamics.saveat.LOG_START_FRACTION``), so over t in (0, 2e4) the
exponential Phase I of the symmetric two-head ICL flow (docs/models/icl_regression.md §6.3, omega = mu = eps0 e^t,
paper Eqs. (B.5)-(B.6)) is resolved by many saves before t = 1, where the old default (1e-3 of the span) saved
nothing before t = 20.
"""

from __future__ import annotations

import numpy as np

from closedform import icl_regression as icl
from dynamics import SaveAt


def test_log_saves_of_a_flow_resolve_phase_one():
    task = icl.ICLRegressionTask(d=5, L=40, sigma2=0.1)
    eps0 = 1e-3
    run = icl.symmetric_flow(task, eps0, eps0, (0.0, 2e4), saveat=SaveAt(log=61))
    t = run.time.values
    early = (t > 0) & (t <= 1.0)
    assert early.sum() >= 15  # log-spaced from 0.02: 59 points per factor 1e6, 17 of them in (0, 1]
    omega, _ = icl.phase1_asymptotic(task, eps0, t[early])
    # Phase I is the linearised flow; the cubic terms of Eq. (B.4) change omega by a relative amount at most
    # int_0^t (2 + 2 d C_L) omega^2 ds <= (1 + d C_L) eps0^2 e^2 = 8.4e-6 for t <= 1 (C_L = (1 + sigma^2) / L)
    bound = (1 + task.d * task.cL) * eps0**2 * np.e**2
    assert np.max(np.abs(run.omega.values[0, early] / omega - 1)) <= bound
