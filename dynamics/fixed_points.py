"""Fixed points of any model's map or flow: multi-start root finding, Jacobians, eigenvalues, stability, basins.

:func:`fixed_points` takes a map ``x -> F(x)`` (fixed points ``F(x) = x``) or a vector field ``x -> f(x)`` (zeros
``f(x) = 0``) in any of these forms:

* an engine kernel, ``step(k, x, p, out)`` / ``rhs(t, x, p, out)`` (a numba function as :func:`dynamics.iterate` and
  :func:`dynamics.integrate` take; called with ``k = 0`` / ``t = 0``), or the same with a data argument,
  ``step(k, x, p, args, out)`` (pass ``args=``);
* a Python callable ``fn(x, p) -> array``; with ``vectorized=True`` it takes a batch ``(n, dim)`` and returns one.

The roots of the residual (``F(x) - x`` or ``f(x)``) are found from every start by a damped Gauss-Newton
(Levenberg-Marquardt) iteration run on all starts at once, which also converges where the roots are not isolated
(symmetries, lines of equilibria) and for residuals with more equations than unknowns' independent directions. Roots
are merged when their ``canonical`` coordinates agree to ``same``; each distinct point then gets its Jacobian
(analytic when ``jacobian`` is a callable ``jac(x, p)``, else complex-step or central differences, with an error
estimate), its eigenvalues and a stability class:

* flows: ``attracting`` (every non-neutral eigenvalue has a negative real part), ``repelling`` (all positive),
  ``saddle`` (both), ``neutral`` (none away from 0); the explicit Euler step ``h`` of the flow keeps an attracting
  point attracting while ``h < max_step = min -2 Re(mu) / |mu|^2``;
* maps: the same with ``|lambda| < 1`` / ``> 1``; with ``step_param`` (the index of the step size alpha in ``p``)
  the map is read to first order as ``x + alpha g(x)``, ``mu = (lambda - 1) / alpha``, and ``max_step`` is the step
  size at which the point stops attracting by the same formula.

Eigenvalues within ``neutral_tol`` (relative to the largest rate) of the neutral value (0 for a flow, modulus 1 for
a map) count as neutral: symmetry directions and lines of fixed points.

:func:`basins` runs the map or flow from many starts and names the fixed point each one ends at.
"""

from __future__ import annotations

from typing import Annotated
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dynamics.validation import Range, check_choice, check_finite_array, check_int, check_positive, validate_module

__all__ = ["Basins", "FixedPoint", "basins", "fixed_points"]

_KINDS = ("map", "flow")
_EPS = np.finfo(np.float64).eps
# central differences: step h = eps^(1/3) * max(1, |x_j|) balances truncation (~h^2 |f'''| / 6) against rounding
# (~eps |f| / h); both are ~eps^(2/3) ~ 4e-11 relative for f of order one.
_H_CENTRAL = _EPS ** (1.0 / 3.0)
_H_COMPLEX = 1e-20  # complex step: no subtractive cancellation, truncation ~h^2 |f'''|: exact in float64


@dataclass(frozen=True, kw_only=True)
class FixedPoint:
    """One fixed point (map) or equilibrium (flow) found by :func:`fixed_points`.

    Attributes
    ----------
    state : ndarray (dim,)
        The root (the start-polished representative of its cluster; the one with the smallest residual).
    key : ndarray
        Its ``canonical`` coordinates (the state itself without ``canonical``), used for de-duplication.
    residual : float
        Max-norm of ``F(x) - x`` or ``f(x)`` at ``state``.
    jacobian : ndarray (dim, dim)
        Jacobian of the map (``dF/dx``) or of the vector field (``df/dx``) at ``state``.
    jacobian_error : float
        Estimated max-norm error of ``jacobian``: 0 for an analytic Jacobian; for differences, the change between
        steps h and 2h (Richardson: the truncation error at h is a third of it for central differences).
    eigenvalues : ndarray (dim,) complex
        Of ``jacobian``, by decreasing real part (flow) or modulus (map).
    stability : str
        ``attracting``, ``repelling``, ``saddle`` or ``neutral`` (module docstring).
    n_neutral : int
        Eigenvalues counted as neutral.
    max_step : float or None
        Step size below which the point attracts (module docstring); None where it is not defined (a map without
        ``step_param``, or a point that is not attracting).
    count : int
        Starts that converged to this point.
    """

    state: np.ndarray
    key: np.ndarray
    residual: float
    jacobian: np.ndarray
    jacobian_error: float
    eigenvalues: np.ndarray
    stability: str
    n_neutral: int
    max_step: float | None
    count: int


@dataclass(frozen=True, kw_only=True)
class Basins:
    """Where runs from many starts end (:func:`basins`).

    Attributes
    ----------
    labels : ndarray (n_starts,) int
        Index into ``points`` of the point each start ends at, -1 for none (not converged, or a point not listed).
    final : ndarray (n_starts, dim)
        The final states.
    fractions : ndarray (n_points,)
        Share of the starts ending at each point.
    points : tuple of FixedPoint
    """

    labels: np.ndarray
    final: np.ndarray
    fractions: np.ndarray
    points: tuple


# ----------------------------------------------------------------------------------------------------------------
# Calling a model function in any of the accepted forms
# ----------------------------------------------------------------------------------------------------------------
def _arity(fn) -> int:
    target = getattr(fn, "py_func", fn)  # a numba dispatcher keeps its Python function
    try:
        return len(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return -1


def _evaluator(fn: Callable, params, args, vectorized: bool, dim: int, kind: str) -> Callable[[np.ndarray], np.ndarray]:
    """A function of a batch ``X (n, dim)`` returning ``fn`` at every row, whatever the form of ``fn`` (an engine
    kernel is called at step ``k = 0`` or time ``t = 0.0``).
    """
    p = np.asarray(params, dtype=np.float64) if params is not None else np.empty(0)
    n_args = _arity(fn)
    if vectorized:

        def batch(X):
            out = np.asarray(fn(X, params), dtype=X.dtype if np.iscomplexobj(X) else np.float64)
            if out.shape != X.shape:
                raise ValueError(f"fn must return an array of shape {X.shape} for a batch; got {out.shape}")
            return out

        return batch
    if n_args in (4, 5):
        if n_args == 5 and args is None:
            raise ValueError("fn takes a data argument (k, x, p, args, out): pass args=")
        p = np.ascontiguousarray(p)
        first = 0 if kind == "map" else 0.0

        def batch(X):
            out = np.empty_like(X, dtype=np.float64)
            row = np.empty(dim)
            for i in range(X.shape[0]):
                x = np.ascontiguousarray(X[i], dtype=np.float64)
                if n_args == 4:
                    fn(first, x, p, row)
                else:
                    fn(first, x, p, args, row)
                out[i] = row
            return out

        return batch
    if n_args == 2 or n_args == -1:

        def batch(X):
            rows = [np.asarray(fn(x, params)) for x in X]
            out = np.array(rows, dtype=np.result_type(X.dtype, *rows) if rows else np.float64)
            if out.shape != X.shape:
                raise ValueError(f"fn(x, p) must return an array of shape {X.shape[1:]}; got {out.shape[1:]}")
            return out

        return batch
    raise ValueError(
        f"fn must be an engine kernel fn(k, x, p, out) or fn(k, x, p, args, out), or a callable "
        f"fn(x, p); got a function of {n_args} arguments"
    )


def _residual_of(evaluate, kind):
    if kind == "map":
        return lambda X: evaluate(X) - X
    return evaluate


def _jacobian_fd(func, x, h_scale, *, complex_step: bool) -> tuple[np.ndarray, float]:
    """Jacobian of ``func`` (batch -> batch) at ``x`` by differences, and the error estimate of the docstring."""
    dim = x.size
    if complex_step:
        pts = np.repeat(x[None, :].astype(np.complex128), dim, axis=0) + 1j * _H_COMPLEX * np.eye(dim)
        J = np.imag(func(pts)).T / _H_COMPLEX
        return J, 0.0

    def central(scale):
        h = scale * np.maximum(1.0, np.abs(x))
        E = np.diag(h)
        f = func(np.concatenate([x + E, x - E]))
        return ((f[:dim] - f[dim:]) / (2.0 * h)).T

    J = central(h_scale)
    J2 = central(2.0 * h_scale)
    return J, float(np.max(np.abs(J - J2)))


def _classify(eigs, kind, neutral_tol):
    """(stability, n_neutral, rates mu) of the eigenvalues: mu = eig (flow) or eig - 1 (map)."""
    mu = eigs if kind == "flow" else eigs - 1.0
    scale = max(1.0, float(np.max(np.abs(mu)))) if mu.size else 1.0
    if kind == "flow":
        margin = eigs.real
    else:
        margin = np.abs(eigs) - 1.0
    neutral = np.abs(margin) <= neutral_tol * scale
    stable = (margin < 0) & ~neutral
    unstable = (margin > 0) & ~neutral
    if stable.any() and unstable.any():
        name = "saddle"
    elif unstable.any():
        name = "repelling"
    elif stable.any():
        name = "attracting"
    else:
        name = "neutral"
    return name, int(neutral.sum()), mu, ~neutral


def _max_step(mu, active):
    """Largest h with |1 + h mu| < 1 for every active rate (all must have Re mu < 0)."""
    mu = mu[active]
    if mu.size == 0 or np.any(mu.real >= 0):
        return None
    return float(np.min(-2.0 * mu.real / np.abs(mu) ** 2))


# ----------------------------------------------------------------------------------------------------------------
# The solver
# ----------------------------------------------------------------------------------------------------------------
def fixed_points(
    fn: Callable,
    params,
    starts,
    *,
    kind: str = "map",
    jacobian=None,
    args=None,
    vectorized: bool = False,
    canonical: Callable | None = None,
    project: Callable | None = None,
    tol: Annotated[float, Range(gt=0)] = 1e-12,
    same: Annotated[float, Range(gt=0)] = 1e-6,
    max_iter: Annotated[int, Range(integer=True, ge=1)] = 200,
    neutral_tol: Annotated[float, Range(ge=0)] = 1e-7,
    step_param: int | None = None,
) -> tuple[FixedPoint, ...]:
    """Every distinct fixed point of a map (or equilibrium of a flow) reached from ``starts``.

    Parameters
    ----------
    fn : callable
        The map or vector field, in one of the forms of the module docstring.
    params : array_like or object
        The parameter row ``p`` (engine kernels) or whatever ``fn(x, p)`` takes.
    starts : array_like (n_starts, dim)
        Initial guesses (one row per start).
    kind : {"map", "flow"}
    jacobian : None, callable, "central" or "complex"
        ``jac(x, p) -> (dim, dim)`` of the map or vector field (e.g. from a symbolic front end), used for the root
        search and the stability; ``"complex"`` uses complex steps (``fn`` must accept complex ``x``: Python
        callables only, exact to rounding); None or ``"central"`` central differences (error ~1e-10 relative,
        estimated per point in :attr:`FixedPoint.jacobian_error`).
    args : object, optional
        The data argument of a five-argument kernel ``fn(k, x, p, args, out)``.
    vectorized : bool
        ``fn(X, p)`` takes and returns a batch ``(n, dim)``.
    canonical : callable, optional
        ``canonical(x) -> array``: the coordinates in which two roots are the same point (e.g. invariants of a
        symmetry, or the identified combination on a line of equilibria); default the state itself.
    project : callable, optional
        ``project(X) -> X`` applied to the batch after every update (e.g. normalising onto a sphere).
    tol : float > 0
        A start has converged when the max-norm of its residual is below ``tol``.
    same : float > 0
        Roots whose canonical coordinates agree to ``same`` (max-norm) are one point.
    max_iter : int >= 1
        Levenberg-Marquardt iterations.
    neutral_tol : float >= 0
        Relative tolerance of neutral eigenvalues (module docstring).
    step_param : int, optional
        For a map whose ``p[step_param]`` is the step size: report :attr:`FixedPoint.max_step`.

    Returns
    -------
    tuple of :class:`FixedPoint`, most-visited first (ties: by canonical coordinates).

    Raises
    ------
    ValueError
        For bad input (naming the parameter), or ``fn`` of an unsupported form.
    """
    kind = check_choice("kind", kind, _KINDS)
    X = np.array(check_finite_array("starts", starts, ndim=(1, 2)), dtype=np.float64)
    X = np.atleast_2d(X).copy()
    n, dim = X.shape
    if n == 0 or dim == 0:
        raise ValueError(f"starts must hold at least one start of at least one coordinate; got shape {X.shape}")
    tol = check_positive("tol", tol)
    same = check_positive("same", same)
    max_iter = check_int("max_iter", max_iter, min_value=1)
    if not (isinstance(neutral_tol, int | float) and math.isfinite(neutral_tol) and neutral_tol >= 0):
        raise ValueError(f"neutral_tol must be a finite number >= 0; got {neutral_tol!r}")
    if jacobian is not None and not callable(jacobian):
        jacobian = check_choice("jacobian", jacobian, ("central", "complex"))
    if step_param is not None:
        if kind != "map":
            raise ValueError("step_param applies to kind='map' only")
        step_param = check_int("step_param", step_param, min_value=0, max_value=np.size(params) - 1)
    if not callable(fn):
        raise ValueError(f"fn must be callable; got {type(fn).__name__}")
    evaluate = _evaluator(fn, params, args, vectorized, dim, kind)
    residual = _residual_of(evaluate, kind)
    eye = np.eye(dim)

    def jac_batch(Xb):
        if callable(jacobian):
            J = np.array([np.asarray(jacobian(x, params), dtype=np.float64) for x in Xb]).reshape(-1, dim, dim)
            return J - eye if kind == "map" else J
        if jacobian == "complex":
            pts = np.repeat(Xb.astype(np.complex128), dim, axis=0) + 1j * _H_COMPLEX * np.tile(eye, (Xb.shape[0], 1))
            R = np.imag(residual(pts)) / _H_COMPLEX
            return R.reshape(Xb.shape[0], dim, dim).transpose(0, 2, 1)
        h = _H_CENTRAL * np.maximum(1.0, np.abs(Xb))  # (m, dim)
        plus = (Xb[:, None, :] + h[:, :, None] * eye).reshape(-1, dim)
        minus = (Xb[:, None, :] - h[:, :, None] * eye).reshape(-1, dim)
        D = (residual(plus) - residual(minus)).reshape(Xb.shape[0], dim, dim) / (2.0 * h[:, :, None])
        return D.transpose(0, 2, 1)

    if project is not None:
        X = np.asarray(project(X), dtype=np.float64)
    damp = np.full(n, 1e-3)
    with np.errstate(all="ignore"):
        R = residual(X)
        for _ in range(max_iter):
            f0 = np.sum(R * R, axis=1)
            live = np.flatnonzero(np.isfinite(f0) & (np.max(np.abs(R), axis=1) >= tol))
            if live.size == 0:
                break
            J = jac_batch(X[live])
            J = np.where(np.isfinite(J), J, 0.0)
            JT = J.transpose(0, 2, 1)
            # pseudo-inverse: J^T J + damp I is singular to rounding once damp reaches its floor at a degenerate root
            step = (np.linalg.pinv(JT @ J + damp[live, None, None] * eye) @ -(JT @ R[live][..., None]))[..., 0]
            Xn = X[live] + step
            if project is not None:
                Xn = np.asarray(project(Xn), dtype=np.float64)
            Rn = residual(Xn)
            f1 = np.sum(Rn * Rn, axis=1)
            ok = np.isfinite(f1) & (f1 < f0[live])
            X[live[ok]], R[live[ok]] = Xn[ok], Rn[ok]
            damp[live] = np.clip(np.where(ok, damp[live] * 0.3, damp[live] * 10.0), 1e-15, 1e10)
    res = np.max(np.abs(R), axis=1)
    good = np.flatnonzero(np.isfinite(res) & (res < tol))
    keys = [
        np.atleast_1d(np.asarray(canonical(X[i]) if canonical is not None else X[i], dtype=np.float64)) for i in good
    ]
    clusters: list[list[int]] = []  # indices into good
    for j, key in enumerate(keys):
        for members in clusters:
            if np.max(np.abs(keys[members[0]] - key)) < same:
                members.append(j)
                break
        else:
            clusters.append([j])
    out = []
    for members in clusters:
        best = min(members, key=lambda j: res[good[j]])
        x = X[good[best]].copy()
        out.append(
            _describe(
                x,
                keys[best],
                float(res[good[best]]),
                len(members),
                evaluate,
                params,
                kind,
                jacobian,
                neutral_tol,
                step_param,
            )
        )
    return tuple(sorted(out, key=lambda fp: (-fp.count, tuple(fp.key))))


def _describe(x, key, residual, count, evaluate, params, kind, jacobian, neutral_tol, step_param) -> FixedPoint:
    if callable(jacobian):
        J, err = np.asarray(jacobian(x, params), dtype=np.float64), 0.0
    else:
        J, err = _jacobian_fd(evaluate, x, _H_CENTRAL, complex_step=jacobian == "complex")
    eigs = np.linalg.eigvals(J).astype(np.complex128)
    order = np.argsort(-(eigs.real if kind == "flow" else np.abs(eigs)), kind="stable")
    eigs = eigs[order]
    stability, n_neutral, mu, active = _classify(eigs, kind, neutral_tol)
    max_step = None
    if stability == "attracting":
        if kind == "flow":
            max_step = _max_step(mu, active)
        elif step_param is not None:
            alpha = float(np.asarray(params, dtype=np.float64).ravel()[step_param])
            rate = _max_step(mu / alpha, active)  # mu / alpha: the flow's rates to first order in alpha
            max_step = rate
    return FixedPoint(
        state=x,
        key=key,
        residual=residual,
        jacobian=J,
        jacobian_error=err,
        eigenvalues=eigs,
        stability=stability,
        n_neutral=n_neutral,
        max_step=max_step,
        count=count,
    )


def basins(
    fn: Callable,
    params,
    starts,
    points,
    *,
    kind: str = "map",
    n_steps: Annotated[int, Range(integer=True, ge=0)] = 10_000,
    t_end: Annotated[float, Range(gt=0)] = 100.0,
    args=None,
    vectorized: bool = False,
    canonical: Callable | None = None,
    tol: Annotated[float, Range(gt=0)] = 1e-6,
):
    """Run the map ``n_steps`` times (or the flow to ``t_end``) from every start and name the point it ends at.

    Parameters
    ----------
    fn, params, kind, args, vectorized, canonical :
        As in :func:`fixed_points`. Engine kernels run in :func:`dynamics.iterate` / :func:`dynamics.integrate`
        (Dopri5, rtol 1e-10, atol 1e-12); Python callables in a loop (map) or ``scipy.integrate.solve_ivp`` (flow,
        the same tolerances).
    starts : array_like (n_starts, dim)
    points : sequence of FixedPoint
        The candidates, e.g. from :func:`fixed_points`.
    n_steps : int >= 0
    t_end : float > 0
    tol : float > 0
        A final state whose canonical coordinates are within ``tol`` (max-norm) of a point's ``key`` ends there.

    Returns
    -------
    :class:`Basins`
    """
    kind = check_choice("kind", kind, _KINDS)
    X = np.atleast_2d(np.array(check_finite_array("starts", starts, ndim=(1, 2)), dtype=np.float64))
    n_steps = check_int("n_steps", n_steps, min_value=0)
    t_end = check_positive("t_end", t_end)
    tol = check_positive("tol", tol)
    points = tuple(points)
    if not all(isinstance(p, FixedPoint) for p in points):
        raise ValueError("points must be a sequence of FixedPoint (from fixed_points)")
    n_args = _arity(fn)
    if n_args == 4 and not vectorized and hasattr(fn, "py_func"):  # a numba kernel: the engine runs it
        from dynamics.integrate import Dopri5, integrate, iterate
        from dynamics.saveat import SaveAt

        if kind == "map":
            tr = iterate(fn, X, n_steps, params=params, saveat=SaveAt(final=True), trend=False)
        else:
            tr = integrate(
                fn,
                X,
                (0.0, t_end),
                params=params,
                solver=Dopri5(rtol=1e-10, atol=1e-12),
                saveat=SaveAt(final=True),
                trend=False,
            )
        final = tr.states()[:, -1, :]
    else:
        evaluate = _evaluator(fn, params, args, vectorized, X.shape[1], kind)
        if kind == "map":
            final = X.copy()
            for _ in range(n_steps):
                final = evaluate(final)
        else:
            from scipy.integrate import solve_ivp

            final = np.array(
                [
                    solve_ivp(lambda t, y: evaluate(y[None, :])[0], (0.0, t_end), x, rtol=1e-10, atol=1e-12).y[:, -1]
                    for x in X
                ]
            )
    labels = np.full(X.shape[0], -1, dtype=np.int64)
    for i, x in enumerate(final):
        if not np.all(np.isfinite(x)):
            continue
        key = np.atleast_1d(np.asarray(canonical(x) if canonical is not None else x, dtype=np.float64))
        dists = [np.max(np.abs(key - p.key)) if p.key.shape == key.shape else np.inf for p in points]
        if dists and min(dists) < tol:
            labels[i] = int(np.argmin(dists))
    fractions = np.array([np.mean(labels == j) for j in range(len(points))])
    return Basins(labels=labels, final=final, fractions=fractions, points=points)


# argument checks from the annotations (dynamics.validation); the result classes are built here (complex eigenvalues)
validate_module(globals(), skip=("FixedPoint", "Basins"))
