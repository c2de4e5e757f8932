"""Theory vs practice as a calibrated statistical test: :func:`compare` (Trajectories), :func:`gap_test` (arrays)
and :func:`adjust` (many rows at once).

The test
--------
At one time and for one variable, ``n`` learned runs (seeds) give values ``x_1..x_n`` with mean ``m`` and standard
error ``s_L = std(x, ddof=1) / sqrt(n)``; the theory gives ``theta`` (exact, or itself a Monte Carlo mean with its
own standard error ``s_T`` from ``n_T`` samples). The *gap* is ``g = m - theta`` (signed, raw). Its two-sided
confidence interval at ``level`` is::

    g +- q * se,   se = sqrt(s_L^2 + s_T^2),   q = Student-t quantile 1 - level/2 with df degrees of freedom

* exact theory (``s_T = 0``): ``df = n - 1``. If the seeds are independent and Gaussian with mean ``theta`` then
  ``g / s_L`` is Student-t with ``n - 1`` df, so the interval covers the true gap with probability exactly
  ``1 - level`` for any ``n >= 2`` (a normal quantile would not: with 3 seeds and ``level = 1e-3`` it covers only
  91.9 %).
* Monte Carlo theory (``s_T > 0``): ``df = min(n - 1, n_T - 1)``, "the smaller df" (Hsu's conservative solution
  of the Behrens-Fisher problem). The Welch-Satterthwaite df always lies between ``min(n - 1, n_T - 1)`` and
  ``n + n_T - 2``, so the smaller df gives the widest interval of the two; Mickey & Brown (1966, Ann. Math.
  Statist. 37, 639) prove that its coverage is at least ``1 - level`` for every ratio of the two variances.
* paired (``compare(..., paired=True)``): when the theory has one trajectory per seed, started from that seed's
  own state (:func:`dynamics.overlay`), the seed-to-seed spread of the starts is common to both sides. The test
  then uses the per-seed differences ``d_i = x_i - theta_i``: ``g = mean(d)``, ``se = std(d, ddof=1) / sqrt(n)``,
  ``df = n - 1`` (a one-sample t on the differences), which is exact under the same assumptions and narrower
  whenever the two sides are positively correlated across seeds.

Statuses
--------
With an *allowance* ``a >= 0`` (a derived, documented bound on a deviation the theory does not model, e.g. a
finite-d bias; ``a = allowance + rel_allowance * |theta|``) and the interval ``[lo, hi] = [g - q se, g + q se]``:

* ``holds``: equivalence is *shown*: ``-a <= lo`` and ``hi <= a``. This is the two one-sided tests (TOST) of
  ``|gap| >= a`` against ``|gap| < a``, each at ``level / 2``: if the true gap lies on or beyond an edge of the
  band, a false ``holds`` has probability at most ``level / 2``. With ``a = 0`` nothing noisy can hold (the row
  is a difference test only; its ``tests`` field says so).
* ``fails``: the interval lies entirely outside the band (``lo > a`` or ``hi < -a``): the deviation exceeds the
  allowance. If ``|gap| <= a`` in truth, a false ``fails`` has probability at most ``level`` (exactly ``level``
  when ``a = 0`` and the theory is exact).
* ``consistent``: neither: the data do not contradict the theory but do not show agreement within the band
  either. ``n_seeds_to_decide`` says how many seeds would decide the row if the measured gap and per-seed spread
  were the truth (``inf`` when the gap sits on a band edge, or ``a = 0`` and the gap is 0).
* ``out_of_range``: no test (an aligned run that does not reach this point of the reference; see
  :func:`dynamics.align.align`).

Every row carries its *minimum detectable deviation* ``mdd``: the true ``|gap|`` at which the row ``fails`` with
probability ``power`` (default 80 %) at the stated level, ``mdd = a + delta * se`` with ``delta`` the noncentrality
at which the Student-t test on ``df`` degrees of freedom reaches that power (exact for the t statistic; the
measured ``se`` stands in for its expectation). A row whose ``mdd`` is large compared with the deviations that
matter cannot detect them, whatever its status.

``tests/dynamics/test_compare.py``, ``tests/dynamics/test_compare_paired.py`` and
``tests/dynamics/test_compare_equivalence.py`` check the
error rates by simulation (false ``fails`` under the null, false ``holds`` at the band edge, the power at ``mdd``),
and that wrong rules (a normal quantile, an unpaired test on paired data, "holds when the interval meets the
band") are rejected by the same simulations. The seeds are assumed independent and roughly Gaussian at each time
(the t interval is robust to moderate non-normality).

Many rows
---------
Each row's false-``fails`` probability is ``level``; over ``k`` rows that are all right the expected number of
false ``fails`` is ``k * level``. :func:`adjust` applies Holm's step-down rule (or Bonferroni) to the rows'
p-values so that the probability of *any* false ``fails`` in the family is at most ``level``; rows that fail
alone but not after adjustment become ``consistent``. ``holds`` needs no adjustment: "every row of the family
holds" is an intersection-union test, valid at the per-row level (Berger 1982, Technometrics 24, 295).
"""

from __future__ import annotations

from typing import Annotated, Any
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr
from scipy import stats
from scipy.optimize import brentq
from scipy.special import stdtr, stdtrit

from dynamics.validation import Range, check_choice, check_in_range, check_int, check_nonneg, validate_module

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_POWER",
    "PAIRED_ATTR",
    "RULE",
    "STATUSES",
    "adjust",
    "compare",
    "gap_test",
    "mdd_factor",
    "p_value",
    "t_quantile",
]

DEFAULT_LEVEL = 1e-3
"""Default false-alarm probability per row (two-sided)."""

DEFAULT_POWER = 0.8
"""Default power at which the minimum detectable deviation is stated."""

_GL_X, _GL_W = np.polynomial.legendre.leggauss(400)
_GL_U, _GL_W = 0.5 * (_GL_X + 1.0), 0.5 * _GL_W  # nodes and weights on [0, 1]

PAIRED_ATTR = "started_from_learned_seeds"
"""Attribute that :func:`dynamics.overlay` sets (1) on its theory: trajectory ``i`` started from learned seed
``i``'s state, so :func:`compare` pairs the two by default."""

STATUSES: tuple[str, ...] = ("holds", "consistent", "fails", "out_of_range")
"""Statuses of a :func:`compare` row (module docstring)."""

RULE = (
    "holds iff the two-sided Student-t confidence interval of the gap (mean - theory) at the stated level lies "
    "inside [-allowance, +allowance] (agreement shown: TOST), fails iff it lies entirely outside, consistent "
    "otherwise; df = n_seeds - 1 (exact or paired theory) or min(n_seeds - 1, n_theory - 1) for a Monte Carlo "
    "theory; SE = sqrt(SE_learned^2 + SE_theory^2), or the SE of the per-seed differences when paired; "
    "false 'fails' rate under the null <= level, false 'holds' rate at a band edge <= level / 2"
)
"""One-line statement of the test, shown once per gap table in the report."""


def t_quantile(
    level: Annotated[float, Range(gt=0, lt=1)], df: Annotated[Any, Range(array=True, gt=0, finite=False)]
) -> np.ndarray:
    """Two-sided Student-t critical value ``q`` with ``P(|T_df| > q) = level`` (array ``df`` allowed; inf = normal).

    Parameters
    ----------
    df : float or array > 0
    level : float in (0, 1)
    """
    level = check_in_range("level", level, 0.0, 1.0, low_open=True, high_open=True)
    return stdtrit(np.asarray(df, dtype=np.float64), 1.0 - level / 2.0)


def mdd_factor(
    level: Annotated[float, Range(gt=0, lt=1)],
    df: Annotated[Any, Range(array=True, gt=0)],
    power: Annotated[float, Range(lt=1)] = DEFAULT_POWER,
) -> np.ndarray:
    """Noncentrality ``delta`` at which the two-sided Student-t test at ``level`` on ``df`` degrees of freedom
    rejects with probability ``power``: ``P(|T'_{df, delta}| > q) = power`` (``T'`` noncentral t, ``q`` of
    :func:`t_quantile`), computed as the normal power integrated over the chi-square law of the sample variance
    (scipy's noncentral t loses accuracy at the large noncentralities of 2 or 3 seeds). The minimum detectable
    deviation of a row is ``allowance + delta * se``.

    Parameters
    ----------
    level : float in (0, 1)
    df : array_like of float > 0
    power : float in (level, 1)

    Returns
    -------
    ndarray of float, the shape of ``df``.
    """
    level = check_in_range("level", level, 0.0, 1.0, low_open=True, high_open=True)
    power = check_in_range("power", power, level, 1.0, low_open=True, high_open=True)
    df = np.asarray(df, dtype=np.float64)
    out = np.empty(df.shape)
    for value in np.unique(df):
        q = float(t_quantile(level, value))
        # P(|Z + delta| > q sqrt(V / df)), V ~ chi2(df), integrated over the quantile u of V (a bounded integrand
        # on [0, 1] for every df) with Gauss-Legendre nodes
        scaled = q * np.sqrt(stats.chi2.ppf(_GL_U, value) / value)

        def excess(delta, scaled=scaled):
            return float(_GL_W @ (stats.norm.sf(scaled - delta) + stats.norm.cdf(-scaled - delta))) - power

        hi = q + 10.0
        while excess(hi) < 0:  # the power tends to 1 as delta grows; widen until it brackets
            hi *= 2.0
        out[df == value] = brentq(excess, 0.0, hi, xtol=1e-10, rtol=1e-12)
    return out


def p_value(
    gap: Annotated[Any, _ARRAY],
    se: Annotated[Any, _SE],
    df: Annotated[Any, Range(array=True, gt=0)],
    allowance: Annotated[Any, _SE] = 0.0,
) -> np.ndarray:
    """Two-sided p-value of the ``fails`` test: ``min(1, 2 P(T_df > (|gap| - allowance) / se))``.

    A row ``fails`` at ``level`` exactly when this p-value is below ``level``; :func:`adjust` combines these
    p-values over many rows. ``se = 0`` gives 0 when ``|gap| > allowance`` and 1 otherwise.

    Parameters
    ----------
    se : float or array >= 0
    df : float or array > 0
    allowance : float or array >= 0
    """
    gap, se, df, a = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (gap, se, df, allowance)))
    excess = np.abs(gap) - a
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, excess / np.where(se > 0, se, 1.0), np.where(excess > 0, np.inf, -np.inf))
    return np.minimum(1.0, 2.0 * stdtr(df, -z))


def _seeds_to_decide(gap, sd_learned, theory_se, df_cap, allowance, level, n_now) -> np.ndarray:
    """Smallest seed count ``n >= n_now`` at which ``q(df(n)) * se(n) < ||gap| - a|`` with ``se(n)^2 =
    sd^2 / n + theory_se^2`` and ``df(n) = min(n - 1, df_cap)``: the measured gap and spread taken as the truth.
    ``inf`` where no count up to 2^40 decides (the gap on a band edge, or the theory's own SE too large). Counts
    above 10 000 are rounded up to a grid of 1 % steps (a projection, not a promise).
    """
    margin = np.abs(np.abs(gap) - allowance)
    grid = np.unique(
        np.concatenate(
            [
                np.arange(n_now, max(n_now, 10_000) + 1, dtype=np.float64),
                np.ceil(np.geomspace(max(n_now, 10_000), 2.0**40, 2200)),
            ]
        )
    )
    q = t_quantile(level, np.minimum(grid - 1.0, df_cap))  # one quantile per candidate count, shared by all rows

    def decided(i):
        return q[i] * np.sqrt(sd_learned**2 / grid[i] + theory_se**2) < margin

    lo = np.zeros(gap.shape, dtype=np.int64)
    hi = np.full(gap.shape, grid.size - 1, dtype=np.int64)
    possible, done = decided(hi), decided(lo)
    while np.any(hi - lo > 1):  # invariant where possible and not done: decided(hi), not decided(lo)
        mid = (lo + hi) // 2
        ok = decided(mid)
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    out = np.where(done, float(n_now), grid[hi])
    return np.where(possible, out, np.inf)


def _verdicts(gap, se, df, a, level, power, *, sd_learned, theory_se, df_cap, n_now) -> dict[str, np.ndarray]:
    """Interval, status, p-value, minimum detectable deviation and seeds-to-decide of gaps with their SE."""
    half = t_quantile(level, df) * se
    lo, hi = gap - half, gap + half
    fails = (lo > a) | (hi < -a)
    shown = (lo >= -a) & (hi <= a)
    status = np.where(fails, "fails", np.where(shown, "holds", "consistent")).astype("<U12")
    n_decide = np.full(gap.shape, float(n_now))
    open_ = status == "consistent"
    if np.any(open_):
        n_decide[open_] = _seeds_to_decide(
            gap[open_], sd_learned[open_], theory_se[open_], df_cap, a[open_], level, n_now
        )
    return {
        "gap": gap,
        "se": se,
        "df": df,
        "half_width": half,
        "ci_low": lo,
        "ci_high": hi,
        "allowance": a.copy(),
        "holds": ~fails,
        "shown": shown,
        "fails": fails,
        "status": status,
        "p_value": p_value(gap, se, df, a),
        "mdd": a + mdd_factor(level, df, power) * se,
        "n_seeds_to_decide": n_decide,
    }


def gap_test(
    theory: Annotated[Any, _ARRAY],
    mean: Annotated[Any, _ARRAY],
    se_learned: Annotated[Any, _SE],
    n_seeds: Annotated[int, Range(integer=True, ge=2)],
    *,
    theory_se: Annotated[Any, _SE] = None,
    theory_n: Annotated[int | None, Range(integer=True, ge=2)] = None,
    allowance: Annotated[Any, _SE] = 0.0,
    level: Annotated[float, Range(gt=0, lt=1)] = DEFAULT_LEVEL,
    power: Annotated[float, Range(lt=1)] = DEFAULT_POWER,
) -> dict[str, np.ndarray]:
    """The calibrated gap test of the module docstring on arrays (broadcast elementwise).

    Parameters
    ----------
    theory, mean : array_like
        Theory value and mean over seeds.
    se_learned : array_like >= 0
        Standard error of the mean (``std(ddof=1) / sqrt(n_seeds)``); finite, se >= 0.
        For a paired comparison pass ``theory = 0`` and the mean and SE of the per-seed differences.
    n_seeds : int >= 2
        Number of seeds behind ``mean``.
    theory_se : array_like >= 0, optional
        The theory's own standard error when it is a Monte Carlo estimate (>= 0, finite).
    theory_n : int >= 2, optional
        Number of Monte Carlo samples behind ``theory_se``; ``None`` means at least ``n_seeds`` (then
        ``df = n_seeds - 1``, which is the smaller df).
    allowance : array_like >= 0
        Absolute allowance ``a >= 0`` (already combined with any relative part).
    level : float in (0, 1)
        Two-sided false-alarm probability.
    power : float in (level, 1)
        Power at which ``mdd`` is stated (default 0.8).

    Returns
    -------
    dict of ndarray
        ``gap``, ``se``, ``df``, ``half_width``, ``ci_low``, ``ci_high``, ``allowance``, ``status`` (``"holds"``,
        ``"consistent"`` or ``"fails"``), ``shown`` (bool: ``holds``), ``fails`` (bool), ``holds`` (bool: *not*
        ``fails``, i.e. the interval meets the band; kept for callers of the two-status test), ``p_value``,
        ``mdd`` and ``n_seeds_to_decide`` (module docstring).
    """
    n_seeds = check_int("n_seeds", n_seeds, min_value=2)
    level = check_in_range("level", level, 0.0, 1.0, low_open=True, high_open=True)
    power = check_in_range("power", power, level, 1.0, low_open=True, high_open=True)
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
    df_value, df_cap = n_seeds - 1, np.inf  # df_cap: the theory's own df, which more seeds do not raise
    se2 = arrays["se_learned"] ** 2
    th_se = arrays.get("theory_se", np.zeros(()))
    if theory_se is not None:
        se2 = se2 + th_se**2
        if theory_n is not None:
            df_cap = check_int("theory_n", theory_n, min_value=2) - 1
            df_value = min(df_value, df_cap)
    gap = arrays["mean"] - arrays["theory"]
    gap, se, a, sd, th_se = np.broadcast_arrays(
        gap, np.sqrt(se2), arrays["allowance"], arrays["se_learned"] * np.sqrt(n_seeds), th_se
    )
    df = np.full(gap.shape, float(df_value))
    return _verdicts(gap, se, df, a, level, power, sd_learned=sd, theory_se=th_se, df_cap=float(df_cap), n_now=n_seeds)


def _time_index(name: str, grid: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Indices of ``times`` in ``grid`` (each must match a grid point to 1e-9 relative); else ``ValueError``."""
    idx = np.abs(grid[None, :] - times[:, None]).argmin(axis=1)
    ok = np.isclose(grid[idx], times, rtol=1e-9, atol=1e-12)
    if not np.all(ok):
        missing = times[~ok][:5]
        raise ValueError(
            f"times must lie on the time grid of {name}; {missing.tolist()} do not "
            f"(grid {grid[:3].tolist()}...{grid[-1:].tolist()})"
        )
    return idx


_TESTS = {
    "equivalence": "equivalence within the allowance (holds = shown) and difference beyond it",
    "difference": "difference only: allowance 0, so agreement cannot be shown, only contradicted",
    "alignment": "the alignment variable: matched by the time map, so the row tests only its interpolation",
}
"""What a row tests, by kind (the ``tests`` variable of :func:`compare`)."""


def compare(
    theory: xr.Dataset,
    learned: xr.Dataset,
    *,
    variables: str | Sequence[str],
    times: Annotated[Any, _ARRAY] = None,
    allowance: Annotated[float, Range(ge=0)] = 0.0,
    rel_allowance: Annotated[float, Range(ge=0)] = 0.0,
    level: Annotated[float, Range(gt=0, lt=1)] = DEFAULT_LEVEL,
    paired: bool | None = None,
    power: Annotated[float, Range(lt=1)] = DEFAULT_POWER,
) -> xr.Dataset:
    """Compare learned trajectories (seeds) with a theory, variable by variable and time by time.

    Parameters
    ----------
    theory : xarray.Dataset (e.g. a :class:`dynamics.Trajectory`)
        The prediction: each variable over ``time`` (exact), or over ``("trajectory", "time")``. Unpaired, a
        ``trajectory`` dimension of size > 1 makes the theory a Monte Carlo estimate: its mean over trajectories
        is compared and its own standard error enters the test (module docstring); size 1 is an exact theory.
        Paired, it must hold one trajectory per learned seed, in the same order.
    learned : xarray.Dataset
        Learned runs, each variable over ``("trajectory", "time")`` with the seeds along ``trajectory`` (>= 2). An
        optional boolean variable ``in_range`` over the same dims (from :func:`dynamics.align.align`) marks the
        points that reach the reference: a time where some seed is out of range gets status ``out_of_range`` and
        no test (its values may be NaN).
    variables : str or sequence of str
        Variables present in both.
    times : array_like, optional
        Times to compare; each must lie on both time grids. Default: every time, and then both grids must be equal.
    allowance, rel_allowance : float >= 0
        The allowance is ``allowance + rel_allowance * |theory|`` (per variable and time).
    level : float in (0, 1)
        Two-sided false-alarm probability of each (variable, time) test; default ``1e-3``.
    paired : bool, optional
        Test the per-seed differences (theory trajectory ``i`` started from learned seed ``i``'s state, as
        :func:`dynamics.overlay` returns them). Default: paired exactly when the theory carries the attribute
        ``started_from_learned_seeds = 1`` that :func:`dynamics.overlay` sets.
    power : float in (level, 1)
        Power at which the minimum detectable deviation ``mdd`` is stated (default 0.8).

    Returns
    -------
    xarray.Dataset
        Over ``(variable, time)``: ``theory`` (its mean over trajectories if several), ``mean``, ``gap`` (mean -
        theory, signed), ``allowance`` (absolute), ``se``, ``n_seeds``, ``df``, ``ci_low``, ``ci_high``,
        ``p_value``, ``mdd``, ``n_seeds_to_decide`` (the current count where decided), ``status``
        (``"holds"``, ``"consistent"``, ``"fails"`` or ``"out_of_range"``) and ``tests`` (what the row can
        show), and the family-wise decision of :func:`adjust` (Holm) over this result's rows, ``adjusted_p`` and
        ``adjusted_status``; attributes ``level``, ``power``, ``paired``, ``n_theory``, ``rule`` (the test in
        words) and those of :func:`adjust` (``family_size``, ``expected_false_fails_per_row``, ...). NaN marks the
        numbers of ``out_of_range`` rows. To adjust over a larger family, pass all its p-values to :func:`adjust`.

    Raises
    ------
    ValueError
        Fewer than 2 seeds, a missing variable, wrong dimensions, times off a grid, non-finite values, a paired
        theory with another number of trajectories, or a bad ``allowance``/``rel_allowance``/``level``/``power``.
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
    power = check_in_range("power", power, level, 1.0, low_open=True, high_open=True)
    if "trajectory" not in learned.dims:
        raise ValueError("learned must have a 'trajectory' dimension holding the seeds")
    n_seeds = int(learned.sizes["trajectory"])
    if n_seeds < 2:
        raise ValueError(f"learned must hold at least 2 seeds along 'trajectory' for a standard error; got {n_seeds}")
    n_theory = int(theory.sizes.get("trajectory", 1))
    if paired is None:
        paired = bool(theory.attrs.get(PAIRED_ATTR, 0))
    if paired and n_theory != n_seeds:
        raise ValueError(
            f"paired=True needs one theory trajectory per learned seed: theory has {n_theory} "
            f"trajectories, learned {n_seeds} seeds"
        )
    for v in variables:
        for name, ds, allowed in (
            ("learned", learned, [("trajectory", "time")]),
            ("theory", theory, [("trajectory", "time")] if paired else [("time",), ("trajectory", "time")]),
        ):
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
    in_range = np.ones(times_arr.size, dtype=bool)
    if "in_range" in learned.data_vars:
        mask = np.asarray(learned["in_range"].transpose("trajectory", "time").values, dtype=bool)
        in_range = mask[:, il].all(axis=0)
    aligned_on = learned.attrs.get("aligned_on")

    keys = (
        "theory",
        "mean",
        "gap",
        "allowance",
        "se",
        "df",
        "ci_low",
        "ci_high",
        "p_value",
        "mdd",
        "n_seeds_to_decide",
    )
    out = {k: [] for k in keys + ("status", "tests")}
    for v in variables:
        x = np.asarray(learned[v].transpose("trajectory", "time").values, dtype=np.float64)[:, il]
        th = np.asarray(theory[v].values, dtype=np.float64)
        th = th[..., it] if th.ndim == 1 else th[:, it]
        for name, arr in ((f"learned[{v!r}]", x), (f"theory[{v!r}]", th)):
            if not np.all(np.isfinite(arr[..., in_range])):
                raise ValueError(f"{name} must be finite at the compared times; got non-finite values")
        x, th_in = x[:, in_range], th[..., in_range]
        mean = x.mean(axis=0)
        th_mean = th_in.mean(axis=0) if th_in.ndim == 2 else th_in
        a = allowance + rel_allowance * np.abs(th_mean)
        if paired:
            diff = x - th_in
            d_mean, d_se = diff.mean(axis=0), diff.std(axis=0, ddof=1) / np.sqrt(n_seeds)
            res = gap_test(0.0, d_mean, d_se, n_seeds, allowance=a, level=level, power=power)
        elif th_in.ndim == 2 and n_theory > 1:
            th_se = th_in.std(axis=0, ddof=1) / np.sqrt(n_theory)
            res = gap_test(
                th_mean,
                mean,
                x.std(axis=0, ddof=1) / np.sqrt(n_seeds),
                n_seeds,
                theory_se=th_se,
                theory_n=n_theory,
                allowance=a,
                level=level,
                power=power,
            )
        else:
            th_mean = th_mean.reshape(-1)
            res = gap_test(
                th_mean, mean, x.std(axis=0, ddof=1) / np.sqrt(n_seeds), n_seeds, allowance=a, level=level, power=power
            )
        full = {"theory": th_mean, "mean": mean, **{k: res[k] for k in keys[2:]}}
        for k in keys:
            row = np.full(times_arr.size, np.nan)
            row[in_range] = full[k]
            out[k].append(row)
        status = np.full(times_arr.size, "out_of_range", dtype="<U12")
        status[in_range] = res["status"]
        out["status"].append(status)
        kind = "alignment" if v == aligned_on else "equivalence"
        tests = np.where(
            np.nan_to_num(out["allowance"][-1], nan=1.0) > 0,
            _TESTS[kind],
            _TESTS["alignment" if kind == "alignment" else "difference"],
        )
        out["tests"].append(tests)
    dims = ("variable", "time")
    data = {k: (dims, np.stack(out[k])) for k in keys}
    data["n_seeds"] = (dims, np.full(data["gap"][1].shape, n_seeds, dtype=np.int64))
    data["status"] = (dims, np.stack(out["status"]))
    data["tests"] = (dims, np.stack(out["tests"]).astype(str))
    coords = {"variable": variables, "time": times_arr}
    if "step" in learned.coords and learned["step"].dims == ("time",):
        coords["step"] = ("time", np.asarray(learned["step"].values)[il])
    attrs = {"level": level, "power": power, "paired": int(bool(paired)), "rule": RULE, "n_theory": n_theory}
    if aligned_on is not None:
        attrs["aligned_on"] = aligned_on
    return adjust(xr.Dataset(data, coords=coords, attrs=attrs), method="holm")  # this result's rows as the family


_METHODS = ("holm", "bonferroni")


def adjust(results, method: str = "holm", level: Annotated[float | None, Range(gt=0, lt=1)] = None):
    """Family-wise decision over many rows: Holm's step-down rule (or Bonferroni) on the rows' ``fails`` p-values.

    Under the complete null (every row's theory right within its allowance) the probability that *any* row of the
    family fails after adjustment is at most ``level``, whatever the dependence between rows; the per-row rule
    instead expects ``k * level`` false ``fails`` over ``k`` rows. Rows that fail per row but not after adjustment
    become ``consistent``; ``holds`` and ``out_of_range`` rows are unchanged (module docstring).

    Parameters
    ----------
    results : xarray.Dataset, mapping or array_like
        A :func:`compare` result (all its rows form the family), a :func:`gap_test` result (its ``p_value`` and
        ``status``), or an array of p-values (NaN: no test).
    method : {"holm", "bonferroni"}
    level : float in (0, 1), optional
        Family-wise error rate; default the result's ``level`` attribute, else 1e-3.

    Returns
    -------
    Same kind as ``results``. A Dataset gains ``adjusted_p`` and ``adjusted_status`` and the attributes
    ``family_size``, ``method``, ``familywise_level`` and ``expected_false_fails_per_row`` (``k * level``: the
    per-row rule's expected number of false ``fails`` under the null); a mapping gains the same keys; an array
    gives a dict with ``adjusted_p``, ``fails`` (bool), ``family_size``, ``familywise_level`` and
    ``expected_false_fails_per_row``.
    """
    method = check_choice("method", method, _METHODS)
    is_ds = isinstance(results, xr.Dataset)
    is_map = not is_ds and isinstance(results, Mapping)  # a Dataset is a Mapping too
    if level is None:
        level = float(results.attrs.get("level", DEFAULT_LEVEL)) if is_ds else DEFAULT_LEVEL
    level = check_in_range("level", level, 0.0, 1.0, low_open=True, high_open=True)
    if is_ds or is_map:
        if "p_value" not in results:
            raise ValueError("results must carry 'p_value' (a compare() Dataset or a gap_test() dict)")
        p = np.asarray(results["p_value"], dtype=np.float64)
    else:
        if results is None:
            raise ValueError("results must be a compare() Dataset, a gap_test() dict or an array of p-values; got None")
        if np.iscomplexobj(results):
            raise ValueError("results must be real p-values in [0, 1]; got complex values")
        try:
            p = np.asarray(results, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                "results must be a compare() Dataset, a gap_test() dict or an array of p-values; got "
                f"{type(results).__name__}"
            ) from exc
    tested = ~np.isnan(p)
    if np.any((p[tested] < 0) | (p[tested] > 1)):
        raise ValueError(
            f"results: p-values must lie in [0, 1] (NaN: no test); got min {p[tested].min()!r}, max {p[tested].max()!r}"
        )
    flat = p[tested]
    k = flat.size
    adj = np.full(p.shape, np.nan)
    if k:
        if method == "bonferroni":
            adj_flat = np.minimum(1.0, k * flat)
        else:
            order = np.argsort(flat, kind="stable")
            stepped = np.maximum.accumulate((k - np.arange(k)) * flat[order])
            adj_flat = np.empty(k)
            adj_flat[order] = np.minimum(1.0, stepped)
        adj[tested] = adj_flat
    fails = tested & (np.nan_to_num(adj, nan=1.0) < level)
    extra = {
        "family_size": int(k),
        "method": method,
        "familywise_level": level,
        "expected_false_fails_per_row": k * float(results.attrs.get("level", level) if is_ds else level),
    }
    if not (is_ds or is_map):
        return {"adjusted_p": adj, "fails": fails, **extra}
    status = np.asarray(results["status"]).astype("<U12")
    new_status = np.where((status == "fails") & ~fails, "consistent", status)
    if is_map:
        return {**results, "adjusted_p": adj, "adjusted_status": new_status, **extra}
    out = results.copy()
    dims = results["p_value"].dims
    out["adjusted_p"] = (dims, adj)
    out["adjusted_status"] = (dims, new_status)
    out.attrs.update(extra)
    return out


# Argument checks of the public functions (dynamics.validation): each parameter's rule is in its annotation.
_ARRAY = Range(array=True)
_SE = Range(array=True, ge=0)
validate_module(globals())
