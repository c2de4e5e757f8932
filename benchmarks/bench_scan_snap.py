"""Scan and Snap simulators: ``flow`` (numba Dopri5 through ``dynamics.integrate``) against scipy
``solve_ivp`` (RK45, the same Dormand-Prince pair, same rtol/atol) on the same right-hand side written in numpy, and
``map`` against the same map as a plain numpy loop (docs/models/scan_snap.md §4.2-§4.3)."""

from __future__ import annotations

import numpy as np
import scipy.integrate
import scipy.special

from benchmarks._common import Result, best_time
from closedform import scan_snap as ss
from dynamics import SaveAt

RTOL, ATOL = 1e-10, 1e-12


def _numpy_ascent(classes, lay):
    """grad_Y, grad_Z of docs/models/scan_snap.md §4.2 (lumped or not), vectorised over classes, on the packed state."""
    P, pi, psi, tcol, mult = classes.P, classes.pi, classes.psi, lay.tcol, lay.mult
    K, Lc, Q, ncol = classes.K, classes.Lc, classes.Q, len(mult)
    with np.errstate(divide="ignore"):
        logP = np.log(P)
    logmult = np.log(mult)
    onehot = np.zeros((K, ncol))
    onehot[np.arange(K), tcol] = 1.0

    def grads(y):
        Y = y[:Lc * ncol].reshape(Lc, ncol)
        Z = y[Lc * ncol:].reshape(Q, Lc)
        F = scipy.special.softmax(logP + Z[psi], axis=1)
        F /= np.linalg.norm(F, axis=1, keepdims=True)
        W = F @ Y
        alpha = np.exp(W - scipy.special.logsumexp(W + logmult, axis=1, keepdims=True))
        err = onehot - alpha
        gY = F.T @ (pi[:, None] * err)
        G = (err * mult) @ Y.T
        rows = pi[:, None] * F * (G - F * np.sum(F * G, axis=1, keepdims=True))
        gZ = np.zeros((Q, Lc))
        np.add.at(gZ, psi, rows)
        return gY.ravel(), gZ.ravel()

    return grads


def _flow_case(name, classes, t1):
    task = ss.ScanSnapTask(classes=classes, eta_Y=1.0, eta_Z=1.0)
    lay = ss._layout(classes, True)
    grads = _numpy_ascent(classes, lay)
    y0 = ss._initial_state(classes, lay, None, None)[0]
    nZ = classes.Q * classes.Lc

    def rhs(t, y):
        gY, gZ = grads(y)
        return np.concatenate([task.eta_Y * gY, task.eta_Z * gZ])

    def engine():
        return ss.flow(task, (0.0, t1), saveat=SaveAt(final=True))["z"].values[0, -1].ravel()  # z_{ml} at m*Lc + l

    def baseline():
        return scipy.integrate.solve_ivp(rhs, (0.0, t1), y0, method="RK45", rtol=RTOL, atol=ATOL).y[-nZ:, -1]

    # both integrate the same flow at the same tolerances: final Z must agree before the timing means anything
    assert np.allclose(engine(), baseline(), rtol=0, atol=1e-6)
    t_eng = best_time(engine, repeat=2, min_time=0.1)
    t_np = best_time(baseline, repeat=1, min_time=0.1)
    return Result(f"exact_flow lumped to t={t1:g}, {name}", "integrations", 1.0 / t_eng, 1.0 / t_np,
                  "solve_ivp RK45 on a numpy rhs", target_ratio=20,
                  note=f"engine {t_eng:.3g} s, scipy {t_np:.3g} s")


def _p8_layout(K, M):
    P = np.zeros((K, 1 + 5 * K))
    P[:, 0] = 0.3
    for n in range(K):
        P[n, 1 + 5 * n: 6 + 5 * n] = 0.7 * np.array([0.2, 0.4, 0.6, 0.8, 1.0]) / 3.0
    return ss.SequenceClasses.from_P(P, M=M)


def _map_case(quick):
    classes = ss.SequenceClasses.syn_small()
    task = ss.ScanSnapTask(classes=classes, eta_Y=1.0, eta_Z=1.0)
    lay = ss._layout(classes, True)
    grads = _numpy_ascent(classes, lay)
    y0 = ss._initial_state(classes, lay, None, None)[0]
    nY = classes.Lc * len(lay.mult)
    n_eng = 2_000 if quick else 20_000
    n_np = 200 if quick else 2_000
    mu = 0.9

    def baseline(n):
        y = y0.copy()
        buf = np.zeros_like(y)
        for s in range(n):
            gY, gZ = grads(y)
            g = np.concatenate([gY, gZ])
            buf = g if s == 0 else mu * buf + g
            y = y + np.concatenate([task.eta_Y * buf[:nY], task.eta_Z * buf[nY:]])
        return y[nY:]

    def engine(n):
        return ss.map(task, n, momentum=mu, saveat=SaveAt(final=True))["z"].values[0, -1].ravel()  # z_{ml} at m*Lc + l

    assert np.allclose(engine(50), baseline(50), rtol=0, atol=1e-12)
    t_eng = best_time(lambda: engine(n_eng), repeat=2, min_time=0.1)
    t_np = best_time(lambda: baseline(n_np), repeat=2, min_time=0.1)
    return Result("population_map, momentum 0.9, Syn-Small (lumped)", "steps", n_eng / t_eng, n_np / t_np,
                  "numpy loop of the same map", target_value=1e4)


def run(quick: bool) -> list[Result]:
    t1 = 1e2 if quick else 1e3
    results = [
        _flow_case("Syn-Medium 1/2 (K=2, M=33)", ss.SequenceClasses.syn_medium(1), t1),
        _flow_case("Syn-Medium 3/6 (K=6, M=79)", ss.SequenceClasses.syn_medium(3), t1),
        _flow_case("Syn-Medium 10/20 (K=20, M=240)", ss.SequenceClasses.syn_medium(10), t1),
        _flow_case("P8 layout M=1e4, K=8", _p8_layout(8, 10**4), t1),
        _map_case(quick),
    ]
    return results
