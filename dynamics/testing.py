"""Helpers to unit-test a formula the way the toolkit tests its own: against Monte Carlo, derivatives, full dynamics.

Every check compares a formula with an *independent* computation and states its tolerance:

* **Monte Carlo** (:func:`assert_mc_close`): an estimate ``mean`` with standard error ``se`` agrees with an exact
  ``value`` when ``|mean - value| <= n_se * se + atol``. The default ``n_se = 5`` makes a false alarm a two-sided
  Gaussian tail event of probability 5.7e-7 per comparison; pass ``level=`` to set the false-alarm probability
  instead (``n_se`` is then its Gaussian quantile). ``atol`` covers the numerical error of the exact value itself
  (quadrature, rounding). A deliberately wrong formula must then fail the same test (:func:`assert_mc_rejects`),
  which proves the sample had power against that bug. The Gaussian tail assumes an accurate SE (hundreds of draws or
  more); for a handful of seeds use :func:`assert_t_close` (Student t, calibrated for any n >= 2).
* **Derivatives** (:func:`assert_jacobian_close`): a gradient or Jacobian against central differences, with the
  tolerance of the difference quotient itself (truncation ``h^2 |f'''| / 6`` plus rounding ``eps |f| / h``), or
  (:func:`assert_formula_close`) against an exact reference such as a :class:`dynamics.symbolic.SymbolicModel`
  derivative, at a relative tolerance per point.
* **Reductions** (:func:`assert_reduction_close`): a reduced map or flow against the full high-dimensional dynamics
  it reduces, run from the same start for the same steps, compared on the reduced variables.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

__all__ = [
    "assert_formula_close",
    "assert_formula_rejects",
    "assert_jacobian_close",
    "assert_mc_close",
    "assert_mc_rejects",
    "assert_reduction_close",
    "assert_t_close",
    "finite_difference_jacobian",
    "formula_error",
    "mc_gap_in_se",
    "mean_and_se",
    "n_se_for_level",
]

#: Default width of the Monte Carlo acceptance band in standard errors (false alarm 5.7e-7, two-sided).
DEFAULT_N_SE = 5.0


def n_se_for_level(level: float) -> float:
    """Half-width in standard errors of the two-sided Gaussian band whose false-alarm probability is ``level``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be a probability in (0, 1); got {level!r}")
    return float(norm.isf(level / 2.0))


def _n_se(n_se, level):
    if level is not None:
        return n_se_for_level(level)
    if not n_se > 0:
        raise ValueError(f"n_se must be > 0; got {n_se!r}")
    return float(n_se)


def mc_gap_in_se(mean, se, value, atol=0.0):
    """``(|mean - value| - atol)`` in units of the standard error ``se``, elementwise (0 where within ``atol``)."""
    mean, se, value = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (mean, se, value)))
    excess = np.maximum(np.abs(mean - value) - atol, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se > 0, excess / se, np.where(excess > 0, np.inf, 0.0))


def mean_and_se(samples, axis=0):
    """Sample mean and its standard error (ddof=1) along ``axis``."""
    samples = np.asarray(samples, dtype=np.float64)
    n = samples.shape[axis]
    if n < 2:
        raise ValueError(f"samples needs at least 2 draws along axis {axis}; got {n}")
    return samples.mean(axis=axis), samples.std(axis=axis, ddof=1) / np.sqrt(n)


def assert_mc_close(
    mean,
    se,
    value,
    n_se: float = DEFAULT_N_SE,
    atol: float = 0.0,
    what: str = "Monte Carlo estimate",
    *,
    level: float | None = None,
):
    """Assert ``|mean - value| <= n_se * se + atol`` elementwise (see the module docstring for the false-alarm
    rate; ``level`` sets it directly). Raises ``AssertionError`` naming the worst element.
    """
    n_se = _n_se(n_se, level)
    gap = mc_gap_in_se(mean, se, value, atol)
    if not np.all(gap <= n_se):
        worst = int(np.argmax(gap))
        m = np.ravel(np.broadcast_to(mean, gap.shape))[worst]
        s = np.ravel(np.broadcast_to(se, gap.shape))[worst]
        v = np.ravel(np.broadcast_to(value, gap.shape))[worst]
        raise AssertionError(
            f"{what}: MC mean {m:.10g} +- {s:.3g} (SE) vs exact {v:.10g}: gap {gap.ravel()[worst]:.2f} SE > "
            f"{n_se:.3g} SE (worst of {gap.size}; atol={atol:g})"
        )


def assert_mc_rejects(
    mean,
    se,
    wrong_value,
    n_se: float = DEFAULT_N_SE,
    atol: float = 0.0,
    what: str = "negative control",
    *,
    level: float | None = None,
):
    """Assert that a deliberately wrong value fails the :func:`assert_mc_close` rule at some element at least."""
    n_se = _n_se(n_se, level)
    gap = mc_gap_in_se(mean, se, wrong_value, atol)
    if not np.any(gap > n_se):
        raise AssertionError(
            f"{what}: the wrong formula was NOT rejected (max gap {float(np.max(gap)):.2f} SE <= {n_se:.3g} SE); "
            "the Monte Carlo test has no power against this bug: increase the sample size"
        )


def assert_t_close(
    samples, value, *, level: float = 1e-6, allowance: float = 0.0, axis: int = 0, what: str = "seed mean"
):
    """Assert that the mean of ``samples`` (seeds along ``axis``, any number >= 2) agrees with ``value`` by the
    calibrated Student-t test of :func:`dynamics.compare.gap_test` at false-alarm probability ``level`` per
    element, up to ``allowance``.
    """
    from dynamics.compare import gap_test

    samples = np.asarray(samples, dtype=np.float64)
    n = samples.shape[axis]
    mean, se = mean_and_se(samples, axis=axis)
    res = gap_test(value, mean, se, n, allowance=allowance, level=level)
    if not np.all(res["holds"]):
        worst = int(np.argmax(np.abs(res["gap"]) - res["half_width"]))
        raise AssertionError(
            f"{what}: gap {np.ravel(res['gap'])[worst]:.4g}, t interval half-width "
            f"{np.ravel(res['half_width'])[worst]:.3g} ({n} seeds, level {level:g}), allowance "
            f"{allowance:g}"
        )


# ----------------------------------------------------------------------------------------------------------------
# exact comparisons


def formula_error(candidate, reference, *, floor: float = 0.0) -> np.ndarray:
    """Relative error per point: ``max |candidate - reference| / max(max |reference|, floor)`` over the last axis
    (a scalar formula: per element). The scale is the largest reference component at the point, so a component
    that cancels to ~0 is judged against the size of the others (the rounding of a sum is relative to its terms).
    """
    a = np.asarray(candidate, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    a, b = np.broadcast_arrays(a, b)
    if a.ndim == 0:
        a, b = a[None], b[None]
    if a.ndim == 1:
        a, b = a[:, None], b[:, None]
    err = np.max(np.abs(a - b), axis=-1)
    scale = np.maximum(np.max(np.abs(b), axis=-1), floor)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(scale > 0, err / scale, np.where(err > 0, np.inf, 0.0))
    return np.where(np.isnan(a).any(axis=-1) | np.isnan(b).any(axis=-1), np.inf, rel)


def assert_formula_close(candidate, reference, *, rtol: float = 1e-12, floor: float = 0.0, what: str = "formula"):
    """Assert that ``candidate`` equals an exact ``reference`` to ``rtol`` relative (:func:`formula_error`) at
    every point; the message names the worst point and its error.
    """
    rel = formula_error(candidate, reference, floor=floor)
    if not np.all(rel <= rtol):
        worst = int(np.argmax(rel))
        raise AssertionError(
            f"{what}: relative error {rel.ravel()[worst]:.3g} > {rtol:g} at point {worst} "
            f"(worst of {rel.size}; {int(np.sum(rel > rtol))} points fail)"
        )
    return float(np.max(rel)) if rel.size else 0.0


def assert_formula_rejects(
    wrong, reference, *, rtol: float = 1e-12, floor: float = 0.0, what: str = "negative control"
):
    """Assert that a deliberately wrong formula fails :func:`assert_formula_close` at some point at least."""
    rel = formula_error(wrong, reference, floor=floor)
    if np.all(rel <= rtol):
        raise AssertionError(
            f"{what}: the wrong formula was NOT rejected (max relative error "
            f"{float(np.max(rel)):.3g} <= {rtol:g}): the points do not exercise this bug"
        )


def finite_difference_jacobian(f, x, h: float = 1e-6) -> np.ndarray:
    """Central-difference Jacobian of ``f: (n,) -> (m,)`` (or scalar) at ``x`` (n,): shape (m, n) (or (n,))."""
    x = np.asarray(x, dtype=np.float64)
    cols = []
    for j in range(x.shape[0]):
        e = np.zeros_like(x)
        e[j] = h
        cols.append((np.asarray(f(x + e), dtype=np.float64) - np.asarray(f(x - e), dtype=np.float64)) / (2 * h))
    return np.stack(cols, axis=-1)


def assert_jacobian_close(
    jac, f, x, *, h: float = 1e-6, third: float = 1.0, safety: float = 10.0, what: str = "Jacobian"
):
    """Assert that ``jac`` (the claimed Jacobian or gradient of ``f`` at ``x``) equals central differences.

    The tolerance is that of the central difference itself, ``safety * (h^2 * third / 6 + eps * |f| / h)``
    elementwise: truncation with ``third`` a bound on the third derivative near ``x`` (default 1, i.e. functions
    of order-one curvature; pass a larger one for steep functions) plus the rounding of the two evaluations.
    Returns the largest error as a fraction of the tolerance.
    """
    x = np.asarray(x, dtype=np.float64)
    fd = finite_difference_jacobian(f, x, h)
    jac = np.asarray(jac, dtype=np.float64)
    if jac.shape != fd.shape:
        raise ValueError(f"jac has shape {jac.shape}; f at x gives a Jacobian of shape {fd.shape}")
    fx = np.abs(np.asarray(f(x), dtype=np.float64))
    size = fx[..., None] if fd.ndim == 2 else np.max(fx)
    tol = safety * (h * h * third / 6.0 + np.finfo(np.float64).eps * np.maximum(size, 1.0) / h)
    ratio = np.abs(jac - fd) / tol
    if not np.all(ratio <= 1.0):
        worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        bound = np.broadcast_to(tol, ratio.shape)[worst]
        raise AssertionError(
            f"{what}: entry {tuple(int(i) for i in worst)} is {jac[worst]:.12g}, central "
            f"differences give {fd[worst]:.12g} (tolerance {bound:.2g}, h={h:g})"
        )
    return float(np.max(ratio))


def assert_reduction_close(
    reduced, full, *, rtol: float = 1e-10, atol: float = 0.0, names=None, what: str = "reduced dynamics"
):
    """Assert that a reduced run equals the full dynamics it reduces, on the reduced variables.

    ``reduced`` and ``full`` are :class:`dynamics.Trajectory` objects (or dicts of arrays) over the same starts and
    save points, the full one with the reduced variables computed from its high-dimensional state (the same
    seeds, the same steps). Every variable of ``names`` (default: those of ``reduced`` also in ``full``) must agree
    to ``atol + rtol * max|full|`` at every save; the message names the variable, trajectory and save of the worst
    mismatch.
    """

    def arrays(obj):
        if hasattr(obj, "data_vars"):
            return {k: np.asarray(obj[k].values, dtype=np.float64) for k in obj.data_vars}
        return {k: np.asarray(v, dtype=np.float64) for k, v in dict(obj).items()}

    a, b = arrays(reduced), arrays(full)
    names = [k for k in a if k in b] if names is None else list(names)
    if not names:
        raise ValueError("names: the two runs share no variable to compare")
    worst = (0.0, None)
    for k in names:
        if k not in a or k not in b:
            raise ValueError(f"names: {k!r} is missing from {'reduced' if k not in a else 'full'}")
        x, y = np.broadcast_arrays(a[k], b[k])
        tol = atol + rtol * np.max(np.abs(y))
        err = np.abs(x - y)
        bad = ~(err <= tol)
        if bad.any():
            idx = np.unravel_index(int(np.argmax(np.where(np.isnan(err), np.inf, err))), err.shape)
            raise AssertionError(
                f"{what}: {k} at index {tuple(int(i) for i in idx)} is {x[idx]:.15g} reduced vs "
                f"{y[idx]:.15g} full (tolerance {tol:.3g}; {int(bad.sum())} entries fail)"
            )
        if tol > 0:
            worst = max(worst, (float(np.max(err)) / tol, k), key=lambda t: t[0])
    return worst[0]
