"""Generic numba steppers (private). They know no model: ``step``/``rhs`` are numba functions passed in.

Each kernel advances a batch ``X`` (n_traj, n_state) in place, one trajectory after the other (so a batched run
does exactly the arithmetic of one-at-a-time runs), and reports the first failure of each trajectory in
``status[i] = (code, step_or_0, variable_index)``:

* code 1: a non-finite value or one with ``|x| > bound`` (the variable index says which component);
* code 2: the adaptive solver exceeded ``max_steps``;
* code 3: the adaptive step size underflowed (stiff or singular flow).

``P`` has one row (shared parameters) or one row per trajectory; ``P[i if P.shape[0] > 1 else 0]`` picks it.
Kernels that take a function argument cannot be cached on disk by numba (a dispatcher type is not cacheable), so they
compile once per process and per model function (~0.3 s each after numba's one-off start-up).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Dormand–Prince 5(4) tableau (Dormand & Prince 1980; Hairer, Nørsett & Wanner, Solving ODEs I, Table II.5.2).
# Row 6 of _A is the 5th-order weight vector b, so stage 7 is f(t + h, y_new) (first same as last).
_C = np.array([0.0, 1.0 / 5.0, 3.0 / 10.0, 4.0 / 5.0, 8.0 / 9.0, 1.0, 1.0])
_A = np.zeros((7, 6))
_A[1, :1] = [1.0 / 5.0]
_A[2, :2] = [3.0 / 40.0, 9.0 / 40.0]
_A[3, :3] = [44.0 / 45.0, -56.0 / 15.0, 32.0 / 9.0]
_A[4, :4] = [19372.0 / 6561.0, -25360.0 / 2187.0, 64448.0 / 6561.0, -212.0 / 729.0]
_A[5, :5] = [9017.0 / 3168.0, -355.0 / 33.0, 46732.0 / 5247.0, 49.0 / 176.0, -5103.0 / 18656.0]
_A[6, :6] = [35.0 / 384.0, 0.0, 500.0 / 1113.0, 125.0 / 192.0, -2187.0 / 6784.0, 11.0 / 84.0]
# Error weights b_hat - b for the 7 stages (k7 = f(t + h, y_new), first-same-as-last).
_E = np.array([-71.0 / 57600.0, 0.0, 71.0 / 16695.0, -71.0 / 1920.0, 17253.0 / 339200.0, -22.0 / 525.0,
               1.0 / 40.0])
# Continuous extension of order 4 (Shampine 1986; the same coefficients as scipy's RK45.P):
# y(t_old + theta h) = y_old + h * sum_s k_s * sum_m DENSE[s, m] theta^(m+1).
_DENSE = np.array([
    [1.0, -8048581381.0 / 2820520608.0, 8663915743.0 / 2820520608.0, -12715105075.0 / 11282082432.0],
    [0.0, 0.0, 0.0, 0.0],
    [0.0, 131558114200.0 / 32700410799.0, -68118460800.0 / 10900136933.0, 87487479700.0 / 32700410799.0],
    [0.0, -1754552775.0 / 470086768.0, 14199869525.0 / 1410260304.0, -10690763975.0 / 1880347072.0],
    [0.0, 127303824393.0 / 49829197408.0, -318862633887.0 / 49829197408.0, 701980252875.0 / 199316789632.0],
    [0.0, -282668133.0 / 205662961.0, 2019193451.0 / 616988883.0, -1453857185.0 / 822651844.0],
    [0.0, 40617522.0 / 29380423.0, -110615467.0 / 29380423.0, 69997945.0 / 29380423.0],
])

EULER = 0
RK4 = 1


@njit(cache=True, fastmath=False)
def _is_bad(x, bound):
    """True for NaN, +-inf, and |x| > bound."""
    return not (abs(x) <= bound and abs(x) < np.inf)  # a NaN fails every comparison


@njit(cache=True, fastmath=False)
def _first_bad(v, bound):
    """Index of the first component that is non-finite or exceeds ``bound`` in absolute value, else -1."""
    for m in range(v.shape[0]):
        if _is_bad(v[m], bound):
            return m
    return -1


@njit(fastmath=False)
def iterate_chunk(step, X, P, k_start, n, active, status, bound, buf):
    """Advance every active trajectory of ``X`` by ``n`` map steps, starting at step index ``k_start``."""
    n_traj, n_state = X.shape
    shared = P.shape[0] == 1
    for i in range(n_traj):
        if not active[i] or status[i, 0] != 0:
            continue
        x = X[i]
        p = P[0] if shared else P[i]
        for j in range(n):
            k = k_start + j
            step(k, x, p, buf)
            bad = _first_bad(buf, bound)
            if bad >= 0:
                status[i, 0] = 1
                status[i, 1] = k + 1
                status[i, 2] = bad
                break
            for m in range(n_state):
                x[m] = buf[m]


@njit(fastmath=False)
def _fixed_step(rhs, method, t, y, p, h, k1, k2, k3, k4, yt, out):
    """One Euler (method 0) or classical RK4 (method 1) step of size ``h`` from (t, y) into ``out``."""
    n = y.shape[0]
    rhs(t, y, p, k1)
    if method == 0:
        for m in range(n):
            out[m] = y[m] + h * k1[m]
        return
    for m in range(n):
        yt[m] = y[m] + 0.5 * h * k1[m]
    rhs(t + 0.5 * h, yt, p, k2)
    for m in range(n):
        yt[m] = y[m] + 0.5 * h * k2[m]
    rhs(t + 0.5 * h, yt, p, k3)
    for m in range(n):
        yt[m] = y[m] + h * k3[m]
    rhs(t + h, yt, p, k4)
    for m in range(n):
        out[m] = y[m] + (h / 6.0) * (k1[m] + 2.0 * k2[m] + 2.0 * k3[m] + k4[m])


@njit(fastmath=False)
def fixed_chunk(rhs, method, X, P, t0, dt, k_start, n, active, status, bound, work, buf):
    """Advance every active trajectory by ``n`` fixed steps on the grid t = t0 + k dt, from grid index ``k_start``.

    Times are computed as ``t0 + k * dt`` (never accumulated), so splitting a run into chunks changes no bit. The
    Euler and RK4 bodies are written out here rather than called (a call costs ~4x on small systems); they perform
    exactly the arithmetic of :func:`_fixed_step`.
    """
    n_traj, n_state = X.shape
    shared = P.shape[0] == 1
    k1, k2, k3, k4, yt = work[0], work[1], work[2], work[3], work[4]
    h = dt
    for i in range(n_traj):
        if not active[i] or status[i, 0] != 0:
            continue
        y = X[i]
        p = P[0] if shared else P[i]
        for j in range(n):
            k = k_start + j
            t = t0 + k * dt
            rhs(t, y, p, k1)
            if method == 0:
                for m in range(n_state):
                    buf[m] = y[m] + h * k1[m]
            else:
                for m in range(n_state):
                    yt[m] = y[m] + 0.5 * h * k1[m]
                rhs(t + 0.5 * h, yt, p, k2)
                for m in range(n_state):
                    yt[m] = y[m] + 0.5 * h * k2[m]
                rhs(t + 0.5 * h, yt, p, k3)
                for m in range(n_state):
                    yt[m] = y[m] + h * k3[m]
                rhs(t + h, yt, p, k4)
                for m in range(n_state):
                    buf[m] = y[m] + (h / 6.0) * (k1[m] + 2.0 * k2[m] + 2.0 * k3[m] + k4[m])
            bad = _first_bad(buf, bound)
            if bad >= 0:
                status[i, 0] = 1
                status[i, 1] = k + 1
                status[i, 2] = bad
                break
            for m in range(n_state):
                y[m] = buf[m]


@njit(fastmath=False)
def fixed_partial(rhs, method, X, P, t, h, active, out, work):
    """Dense output of a fixed-step solver: one step of size ``h`` (< dt) from each grid state, into ``out``.

    Used for save times that fall between grid points; the grid state itself is not changed.
    """
    n_traj = X.shape[0]
    shared = P.shape[0] == 1
    for i in range(n_traj):
        if not active[i]:
            out[i, :] = X[i]
            continue
        p = P[0] if shared else P[i]
        _fixed_step(rhs, method, t, X[i], p, h, work[0], work[1], work[2], work[3], work[4], out[i])


@njit(fastmath=False)
def _rms_scaled(v, y, atol, rtol):
    s = 0.0
    for m in range(v.shape[0]):
        sc = atol + rtol * abs(y[m])
        s += (v[m] / sc) ** 2
    return np.sqrt(s / v.shape[0])


@njit(fastmath=False)
def _initial_step(rhs, t, y, p, f0, rtol, atol, work):
    """Initial step size of Hairer, Nørsett & Wanner (Solving ODEs I, Sec. II.4), for order 5."""
    d0 = _rms_scaled(y, y, atol, rtol)
    d1 = _rms_scaled(f0, y, atol, rtol)
    if d0 < 1e-5 or d1 < 1e-5:
        h0 = 1e-6
    else:
        h0 = 0.01 * d0 / d1
    y1 = work[0]
    f1 = work[1]
    for m in range(y.shape[0]):
        y1[m] = y[m] + h0 * f0[m]
    rhs(t + h0, y1, p, f1)
    for m in range(y.shape[0]):
        y1[m] = f1[m] - f0[m]
    d2 = _rms_scaled(y1, y, atol, rtol) / h0
    if max(d1, d2) <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1.0 / 5.0)
    return min(100.0 * h0, h1)


@njit(fastmath=False)
def dopri5_chunk(rhs, X, P, T, H, F0, K, Yold, Told, Hold, fresh, t_save, t_end, rtol, atol, dt_max, max_steps,
                 nsteps, active, status, bound, out, work):
    """Advance each active trajectory with adaptive Dormand–Prince 5(4) steps until its time reaches ``t_save``,
    then write the dense-output value at ``t_save`` into ``out[i]``.

    Per-trajectory state kept between chunks: time ``T``, proposed step ``H``, ``F0 = f(T, X)`` (first same as
    last), the stages ``K`` (n_traj, 7, n_state) and start ``Yold``, ``Told``, ``Hold`` of the last accepted step
    (for dense output), and ``fresh`` (1 until the first step). Steps are clipped only at ``t_end``, so the accepted
    step sequence does not depend on the save times or on the chunking.
    """
    n_traj, n = X.shape
    shared = P.shape[0] == 1
    ynew = work[0]
    yt = work[1]
    for i in range(n_traj):
        if not active[i] or status[i, 0] != 0:
            out[i, :] = X[i]
            continue
        y = X[i]
        p = P[0] if shared else P[i]
        Ki = K[i]
        if fresh[i] == 1:
            rhs(T[i], y, p, F0[i])
            bad = _first_bad(F0[i], np.inf)
            if bad >= 0:  # the vector field itself is non-finite at the start
                status[i, 0] = 1
                status[i, 1] = 0
                status[i, 2] = bad
                out[i, :] = X[i]
                continue
            if H[i] <= 0.0:
                H[i] = _initial_step(rhs, T[i], y, p, F0[i], rtol, atol, work[3:5])
            fresh[i] = 0
        rejected_last = False
        while T[i] < t_save:
            if nsteps[i] >= max_steps:
                status[i, 0] = 2
                status[i, 1] = nsteps[i]
                break
            t = T[i]
            h = min(H[i], dt_max)
            if t + 1.000001 * h >= t_end:
                h = t_end - t  # the last step lands on t_end (stretched by at most 1e-6 h, never a sliver)
            if h <= 1e-14 * max(abs(t), 1.0):
                status[i, 0] = 3
                status[i, 1] = nsteps[i]
                status[i, 2] = np.argmax(np.abs(F0[i]))  # the fastest-moving component, as a hint
                break
            for m in range(n):
                Ki[0, m] = F0[i, m]
            for st in range(1, 7):
                for m in range(n):
                    acc = 0.0
                    for q in range(st):
                        acc += _A[st, q] * Ki[q, m]
                    yt[m] = y[m] + h * acc
                rhs(t + _C[st] * h, yt, p, Ki[st])
            for m in range(n):
                ynew[m] = yt[m]  # the last stage was evaluated at y + h * sum_q b_q k_q = y_new
            s = 0.0
            finite = True
            for m in range(n):
                e = 0.0
                for q in range(7):
                    e += _E[q] * Ki[q, m]
                e *= h
                sc = atol + rtol * max(abs(y[m]), abs(ynew[m]))
                s += (e / sc) ** 2
                if _is_bad(ynew[m], bound) or _is_bad(Ki[6, m], np.inf):
                    finite = False
            err = np.sqrt(s / n)
            nsteps[i] += 1
            if finite and err <= 1.0:
                Yold[i, :] = y
                Told[i] = t
                Hold[i] = h
                for m in range(n):
                    y[m] = ynew[m]
                    F0[i, m] = Ki[6, m]
                T[i] = t_end if h == t_end - t else t + h
                fac = 10.0 if err == 0.0 else min(10.0, 0.9 * err ** -0.2)
                if rejected_last:
                    fac = min(fac, 1.0)
                H[i] = h * fac
                rejected_last = False
            else:
                if not finite:
                    fac = 0.2
                    if h <= 1e-10 * max(abs(t), 1.0):
                        status[i, 0] = 1
                        status[i, 1] = nsteps[i]
                        status[i, 2] = max(_first_bad(ynew, bound), 0)
                        break
                else:
                    fac = max(0.2, 0.9 * err ** -0.2)
                H[i] = h * fac
                rejected_last = True
        if status[i, 0] != 0:
            out[i, :] = X[i]
            continue
        if T[i] == t_save or fresh[i] == 1:
            out[i, :] = y
        else:
            theta = (t_save - Told[i]) / Hold[i]
            for m in range(n):
                acc = 0.0
                for st in range(7):
                    q = theta * (_DENSE[st, 0] + theta * (_DENSE[st, 1] + theta * (_DENSE[st, 2]
                                                                                 + theta * _DENSE[st, 3])))
                    acc += q * Ki[st, m]
                out[i, m] = Yold[i, m] + Hold[i] * acc
