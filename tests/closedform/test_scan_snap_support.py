"""The scan_snap ascent directions (docs/models/scan_snap.md §4.2) run over each class's support only: equal bit for
bit to the dense formula over all tokens (a plain-Python transcription below, the same operations in the same
order), including supports where an attention weight underflows to zero, and to a vectorised numpy evaluation to
rounding."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special

from closedform import _scan_snap_kernels as K
from closedform import scan_snap as ss


def _dense_ascent(y, classes, lay):
    """grad_Y, grad_Z by loops over every token l (f_n,l = 0 off the support), packed like the kernel's state."""
    P, Lc, Q, ncol = classes.P, classes.Lc, classes.Q, len(lay.mult)
    nY = Lc * ncol
    out = [0.0] * (nY + Q * Lc)
    for n in range(classes.K):
        pin, m, tc = float(classes.pi[n]), int(classes.psi[n]), int(lay.tcol[n])
        zoff = nY + m * Lc
        logs = [math.log(P[n, ell]) if P[n, ell] > 0 else 0.0 for ell in range(Lc)]
        mx = -math.inf
        for ell in range(Lc):
            if P[n, ell] > 0 and logs[ell] + y[zoff + ell] > mx:
                mx = logs[ell] + y[zoff + ell]
        f, s2 = [], 0.0
        for ell in range(Lc):
            c = math.exp(logs[ell] + y[zoff + ell] - mx) if P[n, ell] > 0 else 0.0
            f.append(c)
            s2 += c * c
        f = [c / math.sqrt(s2) for c in f]
        a = [0.0] * ncol
        for ell in range(Lc):
            if f[ell] != 0.0:
                for j in range(ncol):
                    a[j] += y[ell * ncol + j] * f[ell]
        amax = max(a)
        nrm = 0.0
        for j in range(ncol):
            a[j] = math.exp(a[j] - amax)
            nrm += lay.mult[j] * a[j]
        a = [-v / nrm for v in a]
        a[tc] += 1.0
        fg = 0.0
        for ell in range(Lc):
            if f[ell] != 0.0:
                gl = 0.0
                for j in range(ncol):
                    out[ell * ncol + j] += pin * f[ell] * a[j]
                    gl += lay.mult[j] * a[j] * y[ell * ncol + j]
                out[zoff + ell] += pin * f[ell] * gl
                fg += f[ell] * gl
        for ell in range(Lc):
            if f[ell] != 0.0:
                out[zoff + ell] -= pin * f[ell] * f[ell] * fg
    return np.array(out)


def _numpy_ascent(y, classes, lay):
    """The same directions vectorised with numpy (softmax by scipy): an independent evaluation order."""
    P, Lc, Q, ncol = classes.P, classes.Lc, classes.Q, len(lay.mult)
    Y = y[: Lc * ncol].reshape(Lc, ncol)
    Z = y[Lc * ncol :].reshape(Q, Lc)
    with np.errstate(divide="ignore"):
        F = scipy.special.softmax(np.log(P) + Z[classes.psi], axis=1)
    F /= np.linalg.norm(F, axis=1, keepdims=True)
    W = F @ Y
    alpha = np.exp(W - scipy.special.logsumexp(W + np.log(lay.mult), axis=1, keepdims=True))
    err = -alpha
    err[np.arange(classes.K), lay.tcol] += 1.0
    gY = F.T @ (classes.pi[:, None] * err)
    G = (err * lay.mult) @ Y.T
    rows = classes.pi[:, None] * F * (G - F * np.sum(F * G, axis=1, keepdims=True))
    gZ = np.zeros((Q, Lc))
    np.add.at(gZ, classes.psi, rows)
    return np.concatenate([gY.ravel(), gZ.ravel()])


def _cases():
    yield "syn_small", ss.SequenceClasses.syn_small(), 0.5
    yield "syn_medium(3)", ss.SequenceClasses.syn_medium(3), 0.5
    rng = np.random.default_rng(4)
    P = rng.uniform(size=(5, 12)) * (rng.uniform(size=(5, 12)) < 0.5)
    P[:, 0] = 0.2  # a shared token keeps every row non-empty
    P /= P.sum(axis=1, keepdims=True)
    yield "random sparse P", ss.SequenceClasses.from_P(P, M=9), 2.0


@pytest.mark.parametrize("lumped", [True, False])
@pytest.mark.parametrize("name,classes,scale", list(_cases()), ids=[c[0] for c in _cases()])
def test_support_ascent_equals_the_dense_formula_bit_for_bit(name, classes, scale, lumped):
    lay = ss._layout(classes, lumped)
    data = ss._kernel_args(classes, lay)
    rng = np.random.default_rng(0)
    y = ss._initial_state(classes, lay, None, None)[0] + rng.normal(
        0, scale, ss._initial_state(classes, lay, None, None).shape[1]
    )
    out = np.empty_like(y)
    K.ascent(y, data, out)
    np.testing.assert_array_equal(out, _dense_ascent(y, classes, lay))
    # rounding only against numpy's order: 1e-13 absolute (entries are O(1) sums of ~Lc * Ncol products of O(1)
    # factors, each rounding ~1e-16; measured <= 3e-16)
    np.testing.assert_allclose(out, _numpy_ascent(y, classes, lay), rtol=0, atol=1e-13)


def test_underflowing_attention_weights_are_skipped_as_in_the_dense_formula():
    # z of one support token 800 below the others: its weight underflows to 0 inside the support
    classes = ss.SequenceClasses.syn_small()
    lay = ss._layout(classes, True)
    data = ss._kernel_args(classes, lay)
    y = ss._initial_state(classes, lay, None, None)[0].copy()
    nY = classes.Lc * len(lay.mult)
    tok = np.flatnonzero(classes.P[0] > 0)
    y[nY + classes.psi[0] * classes.Lc + tok[0]] = -800.0
    y[:nY] = np.random.default_rng(1).normal(0, 1, nY)
    out = np.empty_like(y)
    K.ascent(y, data, out)
    np.testing.assert_array_equal(out, _dense_ascent(y, classes, lay))
