"""Theory vs practice as a calibrated statistical test: :func:`compare` (Trajectories) and :func:`gap_test` (arrays).

The test
--------
At one time and for one variable, ``n`` learned runs (seeds) give values ``x_1..x_n`` with mean ``m`` and standard
error ``s_L = std(x, ddof=1) / sqrt(n)``; the theory gives ``theta`` (exact, or itself a Monte Carlo mean with its
own standard error ``s_T`` from ``n_T`` samples). The *gap* is ``g = m - theta`` (signed, raw). Its two-sided
confidence interval at ``level`` (the false-alarm probability) is::

    g +- q * se,   se = sqrt(s_L^2 + s_T^2),   q = Student-t quantile 1 - level/2 with df degrees of freedom

* exact theory (``s_T = 0``): ``df = n - 1``. If the seeds are independent and Gaussian with mean ``theta`` then
  ``g / s_L`` is Student-t with ``n - 1`` df, so the interval covers 0 with probability exactly ``1 - level`` for
  any ``n >= 2`` (a normal quantile would not: with 3 seeds and ``level = 1e-3`` it covers only 91.9 %).
* Monte Carlo theory (``s_T > 0``): ``df = min(n - 1, n_T - 1)``, "the smaller df" (Hsu's conservative solution
  of the Behrens-Fisher problem). The Welch-Satterthwaite df always lies between ``min(n - 1, n_T - 1)`` and
  ``n + n_T - 2``, so the smaller df gives the widest interval of the two; Mickey & Brown (1966, Ann. Math.
  Statist. 37, 639) prove that its coverage is at least ``1 - level`` for every ratio of the two variances.

Verdict: with an *allowance* ``a >= 0`` (a derived, documented bound on a deviation the theory does not model, e.g.
a finite-d bias, ``a = allowance + rel_allowance * |theta|``) the comparison **holds** when the interval
``[g - q se, g + q se]`` meets ``[-a, a]`` and **fails** otherwise. Under the null hypothesis ``E[x] = theta``
(the theory is right up to seed noise) the probability of a false ``fails`` is at most ``level`` (exactly ``level``
when ``a = 0`` and the theory is exact); ``tests/test_compare.py`` checks both by simulation, and checks that the
normal-quantile rule is rejected by the same simulation. The seeds are assumed independent and roughly Gaussian at
each time (the t interval is robust to moderate non-normality; it is not a test over many times jointly: with
``k`` rows the expected number of false ``fails`` is at most ``k * level``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr
from scipy.special import stdtrit

from dynamics.validation import Range, check_in_range, check_int, check_nonneg, validate_module

DEFAULT_LEVEL = 1e-3
"""Default false-alarm probability per row (two-sided)."""

RULE = ("holds iff the two-sided Student-t confidence interval of the gap (mean - theory) at the stated level meets "
        "[-allowance, +allowance]; df = n_seeds - 1 (exact theory) or min(n_seeds - 1, n_theory - 1) for a Monte "
        "Carlo theory; SE = sqrt(SE_learned^2 + SE_theory^2); false 'fails' rate under the null <= level")
"""One-line statement of the test, shown once per gap table in the report."""


def t_quantile(level: float, df) -> np.ndarray:
    """Two-sided Student-t critical value ``q`` with ``P(|T_df| > q) = level`` (``df`` may be an array; inf = normal)."""
    level = check_in_range("level", level, 0.0, 1.0, low_open=True, high_open=True)
    return stdtrit(np.asarray(df, dtype=np.float64), 1.0 - level / 2.0)


def gap_test(theory, mean, se_learned, n_seeds: int, *, theory_se=None, theory_n: int | None = None,
             allowance=0.0, level: float = DEFAULT_LEVEL) -> dict[str, np.ndarray]:
    """The calibrated gap test of the module docstring on arrays (broadcast elementwise).

    Parameters
    ----------
    theory, mean, se_learned : array_like
        Theory value, mean over seeds and its standard error (``std(ddof=1) / sqrt(n_seeds)``); finite, se >= 0.
    n_seeds : int >= 2
        Number of seeds behind ``mean``.
    theory_se : array_like, optional
        The theory's own standard error when it is a Monte Carlo estimate (>= 0, finite).
    theory_n : int >= 2, optional
        Number of Monte Carlo samples behind ``theory_se``; ``None`` means at least ``n_seeds`` (then
        ``df = n_seeds - 1``, which is the smaller df).
    allowance : array_like
        Absolute allowance ``a >= 0`` (already combined with any relative part).
    level : float in (0, 1)
        Two-sided false-alarm probability.

    Returns
    -------
    dict of ndarray
        ``gap``, ``se``, ``df``, ``half_width``, ``ci_low``, ``ci_high``, ``allowance``, ``holds`` (bool).
    """
    n_seeds = check_int("n_seeds", n_seeds, min_value=2)
    level = check_in_range("level", level, 0.0, 1.0, low_open=True, high_open=True)
    arrays = {"theory": theory, "mean": mean, "se_learned": se_learned, "allowance": allowance}
    if theory_se is not None:
        arrays["theory_se"] = theory_se
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}
    for name, value in arrays.items():
        if not np.all(np.isfinite(value)):
            raise ValueError(f"{name} must be finite; got non-finite values at {np.argwhere(~np.isfinite(value))[:3]}")
    for name in ("se_learned", "allowance", "theory_se"):
        if name in arrays and np.any(arrays[name] < 0):
            raise ValueError(f"{name} must be >= 0; got min {arrays[name].min()!r}")
    df_value = n_seeds - 1
    se2 = arrays["se_learned"] ** 2
    if theory_se is not None:
        se2 = se2 + arrays["theory_se"] ** 2
        if theory_n is not None:
            df_value = min(df_value, check_int("theory_n", theory_n, min_value=2) - 1)
    gap = arrays["mean"] - arrays["theory"]
    se = np.sqrt(se2)
    gap, se, a = np.broadcast_arrays(gap, se, arrays["allowance"])
    df = np.full(gap.shape, float(df_value))
    half = t_quantile(level, df) * se
    ci_low, ci_high = gap - half, gap + half
    holds = (ci_low <= a) & (ci_high >= -a)
    return {"gap": gap, "se": se, "df": df, "half_width": half, "ci_low": ci_low, "ci_high": ci_high,
            "allowance": a.copy(), "holds": holds}


def _time_index(name: str, grid: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Indices of ``times`` in ``grid`` (each must match a grid point to 1e-9 relative); else ``ValueError``."""
    idx = np.abs(grid[None, :] - times[:, None]).argmin(axis=1)
    ok = np.isclose(grid[idx], times, rtol=1e-9, atol=1e-12)
    if not np.all(ok):
        missing = times[~ok][:5]
        raise ValueError(f"times must lie on the time grid of {name}; {missing.tolist()} do not "
                         f"(grid {grid[:3].tolist()}...{grid[-1:].tolist()})")
    return idx


def compare(theory: xr.Dataset, learned: xr.Dataset, *, variables: str | Sequence[str], times=None,
            allowance: float = 0.0, rel_allowance: float = 0.0, level: float = DEFAULT_LEVEL) -> xr.Dataset:
    """Compare learned trajectories (seeds) with a theory, variable by variable and time by time.

    Parameters
    ----------
    theory : xarray.Dataset (e.g. a :class:`dynamics.Trajectory`)
        The prediction: each variable over ``time`` (exact), or over ``("trajectory", "time")``. With a
        ``trajectory`` dimension of size > 1 the theory is a Monte Carlo estimate: its mean over trajectories is
        compared and its own standard error enters the test (module docstring); size 1 is an exact theory.
    learned : xarray.Dataset
        Learned runs, each variable over ``("trajectory", "time")`` with the seeds along ``trajectory`` (>= 2).
    variables : str or sequence of str
        Variables present in both.
    times : array_like, optional
        Times to compare; each must lie on both time grids. Default: every time, and then both grids must be equal.
    allowance, rel_allowance : float >= 0
        The allowance is ``allowance + rel_allowance * |theory|`` (per variable and time).
    level : float in (0, 1)
        Two-sided false-alarm probability of each (variable, time) test; default ``1e-3``.

    Returns
    -------
    xarray.Dataset
        Over ``(variable, time)``: ``theory``, ``mean``, ``gap`` (mean - theory, signed), ``allowance``
        (absolute), ``se`` (combined), ``n_seeds``, ``df``, ``ci_low``, ``ci_high`` and ``status``
        (``"holds"``/``"fails"``); attributes ``level`` and ``rule`` (the test in words).

    Raises
    ------
    ValueError
        Fewer than 2 seeds, a missing variable, wrong dimensions, times off a grid, non-finite values, or a bad
        ``allowance``/``rel_allowance``/``level``.
    """
    for name, ds in (("theory", theory), ("learned", learned)):
        if not isinstance(ds, xr.Dataset):
            raise TypeError(f"{name} must be an xarray.Dataset (e.g. a Trajectory); got {type(ds).__name__}")
    if isinstance(variables, str):
        variables = [variables]
    variables = list(variables)
    if not variables or not all(isinstance(v, str) for v in variables):
        raise ValueError(f"variables must be a non-empty sequence of variable names; got {variables!r}")
    allowance = check_nonneg("allowance", allowance)
    rel_allowance = check_nonneg("rel_allowance", rel_allowance)
    level = check_in_range("level", level, 0.0, 1.0, low_open=True, high_open=True)
    if "trajectory" not in learned.dims:
        raise ValueError("learned must have a 'trajectory' dimension holding the seeds")
    n_seeds = int(learned.sizes["trajectory"])
    if n_seeds < 2:
        raise ValueError(f"learned must hold at least 2 seeds along 'trajectory' for a standard error; got {n_seeds}")
    n_theory = int(theory.sizes.get("trajectory", 1))
    for v in variables:
        for name, ds, allowed in (("learned", learned, [("trajectory", "time")]),
                                  ("theory", theory, [("time",), ("trajectory", "time")])):
            if v not in ds.data_vars:
                raise ValueError(f"variable {v!r} is not in {name} (it has {sorted(ds.data_vars)})")
            if ds[v].dims not in allowed:
                raise ValueError(f"{name}[{v!r}] must have dims {' or '.join(map(str, allowed))}; got {ds[v].dims}")
    grid_l = np.asarray(learned["time"].values, dtype=np.float64)
    grid_t = np.asarray(theory["time"].values, dtype=np.float64)
    if times is None:
        if grid_l.shape != grid_t.shape or not np.allclose(grid_l, grid_t, rtol=1e-9, atol=1e-12):
            raise ValueError("theory and learned have different time grids; pass times= (points on both grids)")
        times_arr, il, it = grid_l, np.arange(grid_l.size), np.arange(grid_t.size)
    else:
        times_arr = np.atleast_1d(np.asarray(times, dtype=np.float64))
        if times_arr.ndim != 1 or times_arr.size == 0 or not np.all(np.isfinite(times_arr)):
            raise ValueError(f"times must be a non-empty 1-d array of finite times; got {times!r}")
        il, it = _time_index("learned", grid_l, times_arr), _time_index("theory", grid_t, times_arr)

    out = {k: [] for k in ("theory", "mean", "gap", "allowance", "se", "df", "ci_low", "ci_high", "holds")}
    for v in variables:
        x = np.asarray(learned[v].transpose("trajectory", "time").values, dtype=np.float64)[:, il]
        th = np.asarray(theory[v].values, dtype=np.float64)
        th = th[..., it] if th.ndim == 1 else th[:, it]
        for name, arr in ((f"learned[{v!r}]", x), (f"theory[{v!r}]", th)):
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"{name} must be finite at the compared times; got non-finite values")
        mean, se_l = x.mean(axis=0), x.std(axis=0, ddof=1) / np.sqrt(n_seeds)
        if th.ndim == 2 and n_theory > 1:
            th_mean, th_se = th.mean(axis=0), th.std(axis=0, ddof=1) / np.sqrt(n_theory)
            res = gap_test(th_mean, mean, se_l, n_seeds, theory_se=th_se, theory_n=n_theory,
                           allowance=allowance + rel_allowance * np.abs(th_mean), level=level)
        else:
            th_mean = th.reshape(-1)
            res = gap_test(th_mean, mean, se_l, n_seeds, allowance=allowance + rel_allowance * np.abs(th_mean),
                           level=level)
        out["theory"].append(th_mean)
        out["mean"].append(mean)
        for k in ("gap", "allowance", "se", "df", "ci_low", "ci_high", "holds"):
            out[k].append(res[k])
    dims = ("variable", "time")
    data = {k: (dims, np.stack(out[k])) for k in ("theory", "mean", "gap", "allowance", "se", "df", "ci_low",
                                                    "ci_high")}
    holds = np.stack(out["holds"])
    data["n_seeds"] = (dims, np.full(holds.shape, n_seeds, dtype=np.int64))
    data["status"] = (dims, np.where(holds, "holds", "fails").astype("<U5"))
    coords = {"variable": variables, "time": times_arr}
    if "step" in learned.coords and learned["step"].dims == ("time",):
        coords["step"] = ("time", np.asarray(learned["step"].values)[il])
    return xr.Dataset(data, coords=coords, attrs={"level": level, "rule": RULE, "n_theory": n_theory})


# Argument checks of the public functions (dynamics.validation; annotations give the rest).
_ARRAY = Range(array=True)
_SE = Range(array=True, ge=0)
validate_module(
    globals(),
    per_function={
        "t_quantile": {"df": Range(array=True, gt=0, finite=False)},  # inf = the normal limit
        "gap_test": dict(theory=_ARRAY, mean=_ARRAY, se_learned=_SE, theory_se=_SE, allowance=_SE,
                         n_seeds=Range(integer=True, ge=2), theory_n=Range(integer=True, ge=2)),
        "compare": dict(times=_ARRAY, allowance=Range(ge=0), rel_allowance=Range(ge=0)),
    },
)
