"""Compare a learned run with a theory up to a monotone time reparametrisation.

Some claims hold only "up to reparametrisation": the learned run traces the theory's path at another speed (an
optimiser that preconditions the reduced gradient, a parametrisation that trains a d x d matrix where the theory
moves one scalar). :func:`align` finds, seed by seed, the monotone map from learned time to theory time under which
one chosen variable of the learned run follows the theory, and returns the learned run on the theory's own time
grid, ready for :func:`dynamics.compare` (paired, when each theory trajectory started from its seed's state).

The map, per seed ``i``:

1. every learned save point ``t_k`` whose value ``v_k`` of the alignment variable lies within the range the
   theory's curve covers gets the theory time ``s_k`` at which the theory's monotone envelope (its running maximum,
   or minimum for a decreasing curve) first reaches ``v_k`` (linear interpolation between theory save points);
   values outside that range are *out of range*: never clipped or pinned to an end;
2. the ``s_k`` are made non-decreasing in ``t_k`` by isotonic regression (pool-adjacent-violators, least squares),
   so the map never runs backwards;
3. the learned run's variables are interpolated linearly in the mapped time onto the theory grid points that the
   seed's mapped points span; grid points outside that span are out of range (``in_range`` False, values NaN).

The fitted *time scale* of a seed is theory time per unit of learned time (1 when the two clocks agree), read where the
map is best conditioned: the ratio of the times at which the theory and the seed first reach the midpoint of the theory
curve's range (near a plateau a small change in value means a large change in time). A variable used for the alignment
matches by construction up to interpolation; :func:`dynamics.compare` labels its rows so.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from dynamics.validation import check_finite_array, validate_module

__all__ = ["TimeScaleWarning", "align", "isotonic", "reference_times"]


class TimeScaleWarning(UserWarning):
    """The learned run moves at a constant multiple of the reduced dynamics' speed: compare with ``align=``."""


def isotonic(y, w=None) -> np.ndarray:
    """Least-squares non-decreasing fit to ``y`` (pool-adjacent-violators).

    Parameters
    ----------
    y : array_like, (n,)
        Finite values in order.
    w : array_like, (n,), optional
        Positive weights (default 1).

    Returns
    -------
    ndarray, (n,): the fit, non-decreasing.
    """
    y = check_finite_array("y", y, ndim=1)
    w = np.ones(y.size) if w is None else check_finite_array("w", w, ndim=1, shape=y.shape)
    if np.any(w <= 0):
        raise ValueError(f"w must be > 0; got min {w.min()!r}")
    means, weights, sizes = [], [], []
    for value, weight in zip(y, w):
        means.append(float(value))
        weights.append(float(weight))
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:  # pool the last two blocks
            m2, w2, n2 = means.pop(), weights.pop(), sizes.pop()
            m1, w1, n1 = means.pop(), weights.pop(), sizes.pop()
            means.append((m1 * w1 + m2 * w2) / (w1 + w2))
            weights.append(w1 + w2)
            sizes.append(n1 + n2)
    return np.repeat(np.asarray(means), sizes)


def _inverse(curve_t, curve_v, values):
    """Theory times at which the monotone envelope of (curve_t, curve_v) first reaches ``values``; NaN outside."""
    increasing = curve_v[-1] >= curve_v[0]
    sign = 1.0 if increasing else -1.0
    env = np.maximum.accumulate(sign * curve_v)
    keep = np.concatenate([[True], np.diff(env) > 0])  # first arrival at each level
    env_v, env_t = env[keep], curve_t[keep]
    target = sign * values
    out = np.interp(target, env_v, env_t) if env_v.size > 1 else np.full(values.shape, np.nan)
    inside = (target >= env_v[0]) & (target <= env_v[-1]) & np.isfinite(target)
    return np.where(inside, out, np.nan)


def reference_times(times, curve, values) -> np.ndarray:
    """Steps 1-2 of the module docstring for one seed: the theory times at which the reference ``curve`` (over
    ``times``) reaches ``values`` (given in learned-time order), made non-decreasing by isotonic regression.

    Parameters
    ----------
    times, curve : array_like, (m,)
        The reference's time grid (increasing) and its values of the alignment variable (finite).
    values : array_like, (n,)
        Learned values of the same variable, in the order of the learned save points.

    Returns
    -------
    ndarray, (n,): theory times, NaN where a value lies outside the range of the reference's monotone envelope
    (never clipped to an end).
    """
    times = check_finite_array("times", times, ndim=1)
    curve = check_finite_array("curve", curve, ndim=1, shape=times.shape)
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    s = _inverse(times, curve, values)
    ok = np.isfinite(s)
    if ok.any():
        s[ok] = isotonic(s[ok])
    return s


def _half_way_scale(t_theory, curve, t_learned, v_learned) -> float:
    """Theory time over learned time at which each first reaches the midpoint of the theory curve's range (NaN if
    the learned run never reaches it): the time scale where the map is best conditioned (mid-transition, away from
    the plateaus where a small change in value means a large change in time).
    """
    mid = 0.5 * (curve[0] + curve[-1])
    sign = 1.0 if curve[-1] >= curve[0] else -1.0
    s_mid = _inverse(t_theory, curve, np.array([mid]))[0]
    above = np.flatnonzero(sign * (v_learned - mid) >= 0)
    if above.size == 0 or above[0] == 0 or not np.isfinite(s_mid):
        return float("nan")
    k = above[0]
    v0, v1 = v_learned[k - 1], v_learned[k]
    t_mid = t_learned[k - 1] + (mid - v0) / (v1 - v0) * (t_learned[k] - t_learned[k - 1])
    return float(s_mid / t_mid) if t_mid > 0 else float("nan")


def _on_grid(mapped, values, grid):
    """Linear interpolation of values (n_points, m) at mapped times onto grid; NaN outside the mapped span."""
    u, inv = np.unique(mapped, return_inverse=True)  # ties (flat stretches of the map): average the values there
    avg = np.zeros((u.size, values.shape[1]))
    np.add.at(avg, inv, values)
    avg /= np.bincount(inv, minlength=u.size)[:, None]
    out = np.full((grid.size, values.shape[1]), np.nan)
    inside = (grid >= u[0]) & (grid <= u[-1])
    if u.size == 1:
        out[inside] = avg[0]
    else:
        for j in range(values.shape[1]):
            out[inside, j] = np.interp(grid[inside], u, avg[:, j])
    return out, inside


def align(theory: xr.Dataset, learned: xr.Dataset, *, variable: str, grid=None) -> tuple[xr.Dataset, xr.Dataset]:
    """Map each learned seed onto the theory's time axis through ``variable`` (module docstring).

    Parameters
    ----------
    theory : Trajectory
        The theory over ``("trajectory", "time")`` on a time grid fine and long enough to contain the learned
        values of ``variable``: one trajectory per learned seed (seed ``i`` aligned with trajectory ``i``), or one
        trajectory shared by all seeds.
    learned : Trajectory
        Seeds along ``trajectory``, learned time along ``time``.
    variable : str
        A scalar variable (dims ``("trajectory", "time")`` in both) whose theory curve is monotone over the
        stretch the learned run covers, e.g. a slowly saturating order parameter.
    grid : array_like, optional
        Theory times to return (each on the theory's grid); default the whole theory grid.

    Returns
    -------
    theory, learned : Trajectory, Trajectory
        The theory at ``grid``; the learned run on ``grid`` with every variable over ``("trajectory", "time")``
        (and its own extra dims) interpolated in mapped time, plus ``in_range`` (bool), ``learned_time`` (the
        learned time mapped to each grid point), ``time_scale`` (per seed), ``theory_time`` and ``out_of_range``
        (per learned save point, along ``save``: the fitted map and whether the point's value lies outside the
        theory's range); attribute ``aligned_on``. Pass both to ``compare(..., paired=True)`` when the theory
        trajectories started from the seeds' own states.

    Raises
    ------
    ValueError
        Missing or non-scalar ``variable``, another number of theory trajectories, non-finite values, a grid off
        the theory's time axis, or a seed none of whose points the theory reaches.
    """
    for name, ds in (("theory", theory), ("learned", learned)):
        if not isinstance(ds, xr.Dataset):
            raise TypeError(f"{name} must be a Trajectory (an xarray.Dataset); got {type(ds).__name__}")
        if "trajectory" not in ds.dims or "time" not in ds.dims:
            raise ValueError(f"{name} must have dims ('trajectory', 'time'); got {tuple(ds.dims)}")
        if not isinstance(variable, str) or variable not in ds.data_vars:
            raise ValueError(
                f"variable must name a variable of {name}; got {variable!r} (it has {sorted(ds.data_vars)})"
            )
        if set(ds[variable].dims) != {"trajectory", "time"}:
            raise ValueError(
                f"variable {variable!r} must be scalar per seed and time (dims ('trajectory', "
                f"'time')) in {name}; got {ds[variable].dims}"
            )
    n_seeds, n_theory = learned.sizes["trajectory"], theory.sizes["trajectory"]
    if n_theory not in (1, n_seeds):
        raise ValueError(f"theory must hold 1 trajectory or one per learned seed ({n_seeds}); got {n_theory}")
    t_theory = np.asarray(theory["time"].values, dtype=np.float64)
    if grid is None:
        grid_idx = np.arange(t_theory.size)
    else:
        g = check_finite_array("grid", grid, ndim=1)
        grid_idx = np.abs(t_theory[None, :] - g[:, None]).argmin(axis=1)
        off = ~np.isclose(t_theory[grid_idx], g, rtol=1e-12, atol=1e-15)
        if np.any(off):
            raise ValueError(f"grid must lie on the theory's time axis; {g[off][:3].tolist()} do not")
    grid_t = t_theory[grid_idx]
    t_learned = np.asarray(learned["time"].values, dtype=np.float64)
    curves = check_finite_array(f"theory[{variable!r}]", theory[variable].transpose("trajectory", "time").values)
    v_learned = np.asarray(learned[variable].transpose("trajectory", "time").values, dtype=np.float64)
    if not np.all(np.isfinite(v_learned)):
        raise ValueError(f"learned[{variable!r}] must be finite")

    names = [v for v in learned.data_vars if "time" in learned[v].dims and "trajectory" in learned[v].dims]
    blocks = {v: np.asarray(learned[v].transpose("trajectory", "time", ...).values, dtype=np.float64) for v in names}
    out = {v: np.full((n_seeds, grid_t.size) + b.shape[2:], np.nan) for v, b in blocks.items()}
    in_range = np.zeros((n_seeds, grid_t.size), dtype=bool)
    learned_time = np.full((n_seeds, grid_t.size), np.nan)
    mapped_all = np.full((n_seeds, t_learned.size), np.nan)
    scale = np.full(n_seeds, np.nan)
    for i in range(n_seeds):
        curve = curves[i if n_theory > 1 else 0]
        s = reference_times(t_theory, curve, v_learned[i])
        ok = np.isfinite(s)
        if ok.sum() == 0:
            raise ValueError(
                f"no learned value of {variable!r} in seed {i} lies within the theory's range "
                f"[{curve.min():.6g}, {curve.max():.6g}]: extend the theory's time grid"
            )
        fitted = s[ok]
        mapped_all[i, ok] = fitted
        tl = t_learned[ok]
        scale[i] = _half_way_scale(t_theory, curve, t_learned, v_learned[i])
        cols = np.concatenate(
            [np.asarray(blocks[v][i][ok]).reshape(ok.sum(), -1) for v in names] + [tl[:, None]], axis=1
        )
        vals, inside = _on_grid(fitted, cols, grid_t)
        in_range[i] = inside
        learned_time[i] = vals[:, -1]
        start = 0
        for v in names:
            width = int(np.prod(blocks[v].shape[2:], dtype=np.int64))
            out[v][i] = vals[:, start : start + width].reshape((grid_t.size,) + blocks[v].shape[2:])
            start += width
    data = {
        v: (("trajectory", "time") + tuple(d for d in learned[v].transpose("trajectory", "time", ...).dims[2:]), out[v])
        for v in names
    }
    data.update(
        in_range=(("trajectory", "time"), in_range),
        learned_time=(("trajectory", "time"), learned_time),
        time_scale=(("trajectory",), scale),
        theory_time=(("trajectory", "save"), mapped_all),
        out_of_range=(("trajectory", "save"), ~np.isfinite(mapped_all)),
    )
    coords = {"trajectory": learned["trajectory"].values, "time": grid_t, "save": t_learned}
    coords.update(
        {
            k: learned.coords[k]
            for k in learned.coords
            if k not in ("trajectory", "time", "step") and "time" not in learned.coords[k].dims
        }
    )
    aligned = xr.Dataset(data, coords=coords, attrs={**learned.attrs, "aligned_on": variable})
    th = theory.isel(time=grid_idx)
    if n_theory == n_seeds:
        th = th.assign_coords(trajectory=learned["trajectory"].values)
    return th, aligned


validate_module(globals())  # argument checks from the annotations (dynamics.validation)
