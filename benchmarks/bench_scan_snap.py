"""Scan and Snap simulators: ``flow`` (numba Dopri5 through ``dynamics.integrate``) against scipy
``solve_ivp`` (RK45, the same Dormand-Prince pair, same rtol/atol) on the same right-hand side written in numpy, and
``map`` against the same map as a plain numpy loop (docs/models/scan_snap.md §4.2-§4.3)."""

from __future__ import annotations

import numpy as np
import scipy.integrate
import scipy.special

import time

from numba import njit

from benchmarks._common import Result, best_time, cpu_time
from benchmarks._dense import dense_save_result
from closedform import _scan_snap_kernels as _k
from closedform import scan_snap as ss
from dynamics import Dopri5, SaveAt, integrate

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
        Y = y[: Lc * ncol].reshape(Lc, ncol)
        Z = y[Lc * ncol :].reshape(Q, Lc)
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
    return Result(
        f"exact_flow lumped to t={t1:g}, {name}",
        "integrations",
        1.0 / t_eng,
        1.0 / t_np,
        "solve_ivp RK45 on a numpy rhs",
        target_ratio=20,
        note=f"engine {t_eng:.3g} s, scipy {t_np:.3g} s",
    )


def _p8_layout(K, M):
    P = np.zeros((K, 1 + 5 * K))
    P[:, 0] = 0.3
    for n in range(K):
        P[n, 1 + 5 * n : 6 + 5 * n] = 0.7 * np.array([0.2, 0.4, 0.6, 0.8, 1.0]) / 3.0
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
    return Result(
        "population_map, momentum 0.9, Syn-Small (lumped)",
        "steps",
        n_eng / t_eng,
        n_np / t_np,
        "numpy loop of the same map",
        target_value=1e4,
    )


@njit(cache=True, fastmath=False)
def _linear_rhs(t, y, p, dy):
    """dy/dt = -1e-3 y: a right-hand side of negligible cost, to time the solver's own work per step."""
    for i in range(y.shape[0]):
        dy[i] = -1e-3 * y[i]


@njit(cache=True, fastmath=False)
def _rhs_loop(y, p, data, dy, n):
    for _ in range(n):
        _k.exact_rhs(0.0, y, p, data, dy)


def _k20_cost_model(t1: float) -> Result:
    """Why the exact flow at K = 20 stays below 20x solve_ivp: the pieces of one ``flow`` call, each timed (CPU).

    engine = n_rhs * (one numba right-hand side) + (the solver's own work on the n_state components for the same
    number of steps, timed with a right-hand side of negligible cost) + (the call's wrapping: validation,
    provenance, diagnostics, Dataset); scipy = nfev * (numpy right-hand side + solve_ivp's per-evaluation work).
    The ratio cannot exceed scipy / (solver work + wrapping) even with a free right-hand side."""
    classes = ss.SequenceClasses.syn_medium(10)
    task = ss.ScanSnapTask(classes=classes, eta_Y=1.0, eta_Z=1.0)
    lay = ss._layout(classes, True)
    y0, params, _ = ss._batched_params(task, lay, ss._initial_state(classes, lay, None, None))
    data = ss._kernel_args(classes, lay)
    p = params if params.ndim == 1 else params[0]
    y = y0[0].copy()
    dy = np.empty_like(y)
    n_loop = 2000
    t_rhs = cpu_time(lambda: _rhs_loop(y, p, data, dy, n_loop), repeat=3) / n_loop
    solver = Dopri5(rtol=RTOL, atol=ATOL)

    def run_raw():
        return integrate(
            _k.exact_rhs,
            y0,
            (0.0, t1),
            params=params,
            args=data,
            solver=solver,
            saveat=SaveAt(final=True),
            names="state",
        )

    steps = int(run_raw()["n_rhs_steps"].values[0, -1])
    t_raw = cpu_time(run_raw, repeat=3)
    t_flow = cpu_time(lambda: ss.flow(task, (0.0, t1), saveat=SaveAt(final=True)), repeat=3)
    lin = Dopri5(rtol=RTOL, atol=ATOL, dt_max=t1 / steps)  # the same number of steps
    t_solver = cpu_time(
        lambda: integrate(
            _linear_rhs, y0, (0.0, t1), params=np.zeros(1), solver=lin, saveat=SaveAt(final=True), names="state"
        ),
        repeat=3,
    )
    grads = _numpy_ascent(classes, lay)

    def rhs(t, yy):
        gY, gZ = grads(yy)
        return np.concatenate([gY, gZ])

    c0 = time.process_time()
    sol = scipy.integrate.solve_ivp(rhs, (0.0, t1), y0[0], method="RK45", rtol=RTOL, atol=ATOL)
    t_scipy = time.process_time() - c0
    t_np_rhs = cpu_time(lambda: rhs(0.0, y), repeat=20)
    bound = t_scipy / (t_solver + t_flow - t_raw)
    return Result(
        f"exact_flow K=20 cost model (t={t1:g})",
        "integrations",
        1.0 / t_flow,
        1.0 / t_scipy,
        "solve_ivp RK45 on a numpy rhs (CPU time)",
        target_ratio=20,
        note=f"n_state {y.size}, {steps} steps; numba rhs {t_rhs * 1e6:.1f} us x ~{6 * steps} evaluations; "
        f"solver work alone {t_solver * 1e3:.1f} ms; integrate {t_raw * 1e3:.1f} ms; flow() "
        f"{t_flow * 1e3:.1f} ms (wrapping {(t_flow - t_raw) * 1e3:.1f} ms); scipy {t_scipy * 1e3:.0f} "
        f"ms = {sol.nfev} nfev x {t_scipy / sol.nfev * 1e6:.0f} us (numpy rhs {t_np_rhs * 1e6:.0f} "
        f"us); ratio bound with a free rhs: {bound:.1f}x",
    )


def run(quick: bool) -> list[Result]:
    t1 = 1e2 if quick else 1e3
    results = [
        _flow_case("Syn-Medium 1/2 (K=2, M=33)", ss.SequenceClasses.syn_medium(1), t1),
        _flow_case("Syn-Medium 3/6 (K=6, M=79)", ss.SequenceClasses.syn_medium(3), t1),
        _flow_case("Syn-Medium 10/20 (K=20, M=240)", ss.SequenceClasses.syn_medium(10), t1),
        _flow_case("P8 layout M=1e4, K=8", _p8_layout(8, 10**4), t1),
        _map_case(quick),
        _k20_cost_model(t1),
    ]
    task = ss.ScanSnapTask(classes=ss.SequenceClasses.syn_small(), eta_Y=1.0, eta_Z=1.0)
    n_map = 200 if quick else 2000
    results.append(
        dense_save_result(
            f"scan_snap.map Syn-Small, 1 x {n_map}",
            lambda saveat: ss.map(task, n_map, momentum=0.9, saveat=saveat, warn_unconverged=False),
            n_map,
            1,
        )
    )
    results.append(
        dense_save_result(
            "scan_snap.flow Syn-Small Dopri5 t=1000, 2001 saves",
            lambda saveat: ss.flow(task, (0.0, 1e3), saveat=saveat),
            2000,
            1,
            dense=SaveAt(n=2001),
        )
    )
    return results
