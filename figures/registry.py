"""Registry of paper figures: one ``data`` + ``plot`` pair per figure, built through a checksummed cache.

This module is the contract for the figure modules ``figures/<model>.py`` (one per model of :data:`MODELS`).

How a figure is declared
------------------------
A figure is a *pure* pair:

* ``data(cfg: RunConfig) -> xarray.Dataset`` computes everything the figure shows (closed-form curves, reduced
  dynamics, learned trajectories with a ``seed`` dimension). ``cfg.params`` holds the figure's own parameters for
  the requested preset (with any overrides), ``cfg.seed`` the run's one seed, ``cfg.device`` ``"cpu"`` or
  ``"cuda"``. Same ``cfg`` -> same data (bitwise, on one machine): all randomness comes from ``cfg.seed``. The
  result is cached on disk under ``results/<name>/`` keyed by a hash of ``cfg`` (:mod:`figures.cache`).
* ``plot(ds) -> matplotlib.figure.Figure`` draws it from the Dataset alone (no computation, no I/O, no pyplot).
  It is called inside :func:`figures._style.style_context`; use :func:`figures._style.new_figure` and the source
  helpers ``plot_theory`` (solid), ``plot_reduced`` (dashed), ``plot_empirical_band`` (mean over seeds + band).
  Layout rules of the report (:func:`figures._style.layout_problems`, listed under each figure): at most 3 panels a
  row (``panel_grid(n)`` adds rows instead of shrinking panels) and a colour bar on every heat map
  (``plot_heatmap(ax, z, label=...)`` or ``add_colorbar(ax, mappable, label=...)``).

Optionally, for the report (:mod:`figures.report`):

* ``gaps(ds) -> list[GapRow]``: theory vs practice at chosen times (:func:`compare_rows` builds them from arrays):
  the raw gap ``mean - theory``, its Student-t confidence interval over seeds (:mod:`dynamics.compare`, calibrated
  for any number of seeds >= 2), an allowance with its source where the docs derive one, and a status of
  :data:`STATUSES` (``holds`` shown, ``consistent`` undecided, ``fails``; with an :class:`Explanation`: ``explained`` /
  ``disagrees`` / ``deferred``).
* ``checks(ds) -> list[CheckResult]``: theorem checks with the measured numbers; same statuses (no
  ``consistent``). Rows that should agree exactly (same data, same steps) use :func:`per_seed_check`. A check
  must be able to fail: identities that hold by construction belong in the test suite, not in the report.

``paper_only="reason"`` at registration marks a figure whose claim truly needs the paper's sizes: below ``--preset
paper`` its caption and badge say so and its failing rows and checks are ``explained`` by that reason.

Parameters per preset (``tiny`` for the tests: seconds; ``quick``: the whole set in minutes on a CPU; ``paper``: the
papers' sizes) are declared at registration as JSON values; they become instances of the figure's typed record
(:mod:`figures.params`: one frozen dataclass per figure, with each parameter's meaning, unit and valid range), and
``cfg.params`` is that record (read like a dictionary). Every quantity the paper varies should be a parameter:
users change them with ``build(name, preset, key=value)`` or ``python -m figures make NAME --set key=value``
(validated before anything runs; recorded in the configuration, the caption and the netCDF). A figure may define
only some presets (the others fall back, with a message). ``calibrated_at`` names the parameter values at which
its allowances were measured. Randomness follows the one seed rule of :mod:`figures.presets`
(``cfg.seeds(run, n)``, ``cfg.generators(run, names)``); torch training goes through :mod:`figures.experiments`.
Where the docs mark a parameter as unrecoverable ([U]/[choice]), use the documented default and list it in
``unrecoverable``: the caption then says so (:attr:`FigureSpec.full_caption`).

Worked example (``figures/single_location.py``)::

    import numpy as np
    import xarray as xr

    from figures.registry import CheckResult, compare_rows, register
    from figures._style import band_over_seeds, new_figure, plot_empirical_band, plot_theory


    def plot_fig4a(ds: xr.Dataset):
        fig, ax = new_figure()
        plot_theory(ax, ds.step, ds.risk_theory, label="closed form")
        mean, lo, hi = band_over_seeds(ds.risk_pgd.values, axis=0, method="percentile")
        plot_empirical_band(ax, ds.step, mean, lo, hi, label=f"PGD, d = {ds.attrs['d']}")
        ax.set(xlabel="step", ylabel="excess risk")
        ax.legend()
        return fig


    def gaps_fig4a(ds):
        idx = [0, ds.sizes["time"] // 2, ds.sizes["time"] - 1]
        return compare_rows("excess risk", ds.step.values[idx], ds.risk_theory.values[idx],
                            ds.risk_pgd.values[:, idx], rel_allowance=0.02,
                            allowance_source="finite-d bias <= 2 % (docs/models/single_location.md §8.2)",
                            d=int(ds.attrs["d"]))


    def checks_fig4a(ds):
        final = float(ds.kappa_pgd.isel(time=-1).median())
        return [CheckResult(name="Theorem 5: kappa -> 1", passed=abs(final - 1) < 1e-3, measured=final,
                            expected=1.0, tolerance="1e-3 (docs/models/single_location.md §7.3, after 2000 steps)")]


    @register(name="single_location.fig4a", model="single_location", paper="Marion et al. (2025), Fig. 4(a)",
              spec="docs/models/single_location.md §8.2", caption="PGD from the sphere, decreasing temperature.",
              params={"tiny": {"d": 20, "L": 10, "n_steps": 50, "n_seeds": 3},
                      "quick": {"d": 200, "L": 10, "n_steps": 5000, "n_seeds": 10},
                      "paper": {"d": 400, "L": 10, "n_steps": 120_000, "n_seeds": 30}},
              plot=plot_fig4a, gaps=gaps_fig4a, checks=checks_fig4a)
    def data_fig4a(cfg):
        rng = np.random.default_rng(cfg.seed)
        ...  # compute with closedform/dynamics/empirical, sizes from cfg.params
        return xr.Dataset(...)

A figure whose parameters the docs mark unrecoverable (e.g. Fig. 3, docs/models/single_location.md §8.1) adds
``unrecoverable=("curves vs L = 1..100 at d = 400, gamma^2 = 1/2, eps = 0 (docs/models/single_location.md §8.1
proposal)",)``; its caption then ends with "Not recoverable from the paper; the documented default is used for:
...".

Then ``python -m figures make single_location.fig4a --preset quick`` writes ``figures/out/single_location.fig4a.{png,
pdf}``, and ``python -m figures report`` includes it. Library use: :func:`build` (data, cached), :func:`render`
(figure), :func:`make` (both, saved to files).

Discovery: figure modules register into :data:`REGISTRY` when imported; :func:`discover` imports ``figures.<model>``
for each model of :data:`MODELS`, records a module that does not exist yet as ``missing`` and one that fails to
import as ``error`` (with the message), so ``list`` and ``report`` can say so.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import math
import numbers
import re
import time
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import xarray as xr
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from closedform import models as _models
from dynamics.compare import DEFAULT_LEVEL, DEFAULT_POWER, gap_test, mdd_factor, p_value, t_quantile
from dynamics.provenance import git_revision, package_versions, sanitize_attrs
from dynamics.validation import ArgumentTypeError, Range, check_choice, check_int, check_nonneg, validate_module
from figures import _style, cache, experiments
from figures.params import Param, ParamsRecord, records, split_key
from figures.presets import DEFAULT_PRESET, DEFAULT_SEED, PRESETS, RunConfig, check_preset, resolve_device

__all__ = [
    "MODELS",
    "DEFAULT_OUT_DIR",
    "PAPER_ONLY_NOTE",
    "STATUSES",
    "EXPLANATION_KINDS",
    "MDD_POWER",
    "Explanation",
    "GapRow",
    "compare_rows",
    "gap_rows",
    "per_seed_check",
    "CheckResult",
    "FigureSpec",
    "ModuleStatus",
    "Registry",
    "REGISTRY",
    "register",
    "discover",
    "BuildResult",
    "CalibrationWarning",
    "run_config",
    "build",
    "render",
    "make",
]

logger = logging.getLogger(__name__)

MODELS: tuple[str, ...] = _models.names()
"""The registered models (:mod:`closedform.models`: the built-in ones, then other packages' by name), in report
order; figures of model ``m`` live in the module its record names (``figures/m.py`` for a built-in model)."""


def _figure_module(package: str, model: str) -> str:
    """The module registering the figures of ``model``: the record's ``figures`` for the package ``figures`` (a
    registered package's own module), else ``<package>.<model>``.
    """
    if package == "figures" and model in _models.names():
        return _models.get(model).figures or f"{package}.{model}"
    return f"{package}.{model}"


DEFAULT_OUT_DIR = Path("figures") / "out"
"""Where :func:`make` writes ``<name>.png``/``.pdf`` by default (relative to the working directory; git-ignored)."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_.\-]+$")

PAPER_ONLY_NOTE = "decided at --preset paper only"
"""Caption, badge and explanation text of a figure registered with ``paper_only``."""


# ----------------------------------------------------------------------------------------------------------------
# Report rows
# ----------------------------------------------------------------------------------------------------------------
STATUSES: tuple[str, ...] = ("holds", "consistent", "explained", "disagrees", "deferred", "fails")
"""The verdicts of a row or check, in report order.

* ``holds``: shown. A gap row: the confidence interval of the gap lies inside the allowance band ``[-a, a]``
  (equivalence shown at the row's level); a check: its own test passed.
* ``consistent``: not contradicted, not shown (a gap row whose interval straddles an edge of the band; more seeds
  decide it, :attr:`GapRow.n_seeds_to_decide`).
* ``explained``: the test fails for an understood reason of the setup (e.g. SGD noise at batch 5), and a run that
  removes the cause holds (the :class:`Explanation` says where).
* ``disagrees``: the paper's claim does not reproduce under its protocol; the explanation gives the measured cause.
  A result of the toolkit, not a defect.
* ``deferred``: decided only at the paper's sizes; the explanation gives the measured evidence that the larger run
  moves towards the claim.
* ``fails``: the test fails and nothing explains it.
"""

EXPLANATION_KINDS: tuple[str, ...] = ("explained", "disagrees", "deferred")
"""The statuses an :class:`Explanation` can give to a row or check whose test fails."""

MDD_POWER = DEFAULT_POWER
"""Power at which a row's minimum detectable deviation (:attr:`GapRow.mdd`) is stated (that of dynamics.compare)."""


@dataclass(frozen=True)
class Explanation:
    """Why a row or check deviates from the theory, of which kind, and where the evidence for that reason is shown.

    Parameters
    ----------
    reason : str
        E.g. ``"SGD noise at batch 5: the theory is noiseless PGD"``.
    evidence : str
        Where the reader can check the reason, e.g. ``"single_location.fig5, rows 'batch-100 SGD' (hold)"``: for
        ``disagrees`` the measured cause, for ``deferred`` the measured trend towards the claim (never a command).
    kind : {"explained", "disagrees", "deferred"}
        The status it gives to a failing row or check (see :data:`STATUSES`).
    """

    reason: str
    evidence: str
    kind: str = "explained"

    def __post_init__(self):
        for name in ("reason", "evidence"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"Explanation.{name} must be a non-empty string; got {value!r}")
        check_choice("kind", self.kind, EXPLANATION_KINDS)

    def to_dict(self) -> dict[str, str]:
        """The explanation as a plain dict (reason, evidence, kind), as written to the summary."""
        return {"reason": self.reason, "evidence": self.evidence, "kind": self.kind}


def _check_explanation(explanation) -> Explanation | None:
    if explanation is not None and not isinstance(explanation, Explanation):
        raise TypeError(f"explanation must be an Explanation or None; got {type(explanation).__name__}")
    return explanation


def _status(test_passed: bool, explanation: Explanation | None) -> str:
    """A check's status: ``holds``, else its explanation's kind, else ``fails``."""
    if test_passed:
        return "holds"
    return explanation.kind if explanation is not None else "fails"


@functools.lru_cache(maxsize=256)
def _detectable_ncp(df: float, level: float, power: float) -> float:
    """:func:`dynamics.compare.mdd_factor` for one row's (df, level), cached: the report asks for it several times."""
    return float(mdd_factor(level, df, power))


def _gap_status(ci_low: float, ci_high: float, allowance: float, explanation: Explanation | None) -> str:
    """A gap row's status from its interval and band: ``holds`` (inside), ``consistent`` (straddles an edge), else
    (disjoint) the explanation's kind or ``fails``.
    """
    if -allowance <= ci_low and ci_high <= allowance:
        return "holds"
    if ci_low <= allowance and ci_high >= -allowance:
        return "consistent"
    return explanation.kind if explanation is not None else "fails"


_DERIVED = ("gap", "df", "ci_low", "ci_high", "status")


@dataclass(frozen=True, kw_only=True, init=False)
class GapRow:
    """One theory-vs-practice comparison at one time: the calibrated gap test of :mod:`dynamics.compare`.

    Build rows with :func:`compare_rows` (or :meth:`from_stats` when only a mean and its SE are at hand); the
    derived fields are computed there.

    Attributes
    ----------
    quantity : str
        What is compared, e.g. ``"excess risk"``.
    time : float
        Where (on the figure's time axis).
    theory, mean : float
        Theory's value and the empirical mean over seeds.
    gap : float
        ``mean - theory`` (raw, signed).
    allowance : float
        Absolute allowance ``allowance + rel_allowance * |theory|`` (0: none).
    allowance_source : str
        Where a non-zero allowance comes from (docs section, derivation); empty when it is 0.
    se : float
        Standard error of the gap (the seeds' SE, combined with the theory's own SE for a Monte Carlo theory).
    n_seeds : int
        Number of seeds (>= 2).
    df : float
        Degrees of freedom of the Student-t interval.
    ci_low, ci_high : float
        Two-sided confidence interval of the gap at ``level``.
    level : float
        False-alarm probability of the test.
    status : str
        ``holds`` (the interval lies inside ``[-allowance, allowance]``), ``consistent`` (it straddles an edge),
        else the explanation's kind (``explained``, ``disagrees``, ``deferred``) or ``fails`` (:data:`STATUSES`).
    explanation : Explanation or None
    d : int or None
        The dimension of the empirical runs, where the theory is a d -> infinity limit (state d).
    """

    quantity: str
    time: float
    theory: float
    mean: float
    gap: float
    allowance: float
    allowance_source: str
    se: float
    n_seeds: int
    df: float
    ci_low: float
    ci_high: float
    level: float
    status: str
    explanation: Explanation | None = None
    d: int | None = None

    def __init__(self, **kwargs):
        """Keyword arguments: every attribute; or the summary statistics only (``quantity, time, theory, mean,
        se, n_seeds`` and optionally ``allowance, allowance_source, level, explanation, d``), the rest derived by
        :meth:`from_stats`. Deprecated: the old ``tol_se, atol, justification`` (``atol`` becomes the allowance,
        ``justification`` its source; ``tol_se`` is ignored in favour of the calibrated test).
        """
        legacy = {k: kwargs.pop(k) for k in ("tol_se", "atol", "justification") if k in kwargs}
        if legacy:
            warnings.warn(
                "GapRow(tol_se=, atol=, justification=) is deprecated; use compare_rows or "
                "GapRow.from_stats(allowance=, allowance_source=)",
                DeprecationWarning,
                stacklevel=2,
            )
            atol = check_nonneg("atol", legacy.get("atol", 0.0))
            kwargs.setdefault("allowance", atol)
            kwargs.setdefault("allowance_source", str(legacy.get("justification", "")) if atol > 0 else "")
        if not any(k in kwargs for k in _DERIVED):
            kwargs.setdefault("level", DEFAULT_LEVEL)
            derived = GapRow._derive(**kwargs)
            kwargs.update(derived)
        names = [f.name for f in fields(self)]
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(f"GapRow got unexpected keyword arguments {unknown}")
        for f in fields(self):
            if f.name in kwargs:
                object.__setattr__(self, f.name, kwargs[f.name])
            elif f.default is not MISSING:
                object.__setattr__(self, f.name, f.default)
            else:
                raise TypeError(f"GapRow missing keyword argument {f.name!r}")
        self.__post_init__()

    @staticmethod
    def _derive(
        *,
        theory,
        mean,
        se,
        n_seeds,
        allowance=0.0,
        level=DEFAULT_LEVEL,
        explanation=None,
        theory_se=None,
        theory_n=None,
        allowance_source="",
        **_others,
    ) -> dict:
        """The fields the gap test derives from the summary statistics (:func:`dynamics.compare.gap_test`)."""
        res = gap_test(
            float(theory),
            float(mean),
            float(se),
            n_seeds,
            theory_se=theory_se,
            theory_n=theory_n,
            allowance=float(allowance),
            level=level,
        )
        return {
            "gap": float(res["gap"]),
            "allowance": float(res["allowance"]),
            "se": float(res["se"]),
            "df": float(res["df"]),
            "ci_low": float(res["ci_low"]),
            "ci_high": float(res["ci_high"]),
            "status": _gap_status(
                float(res["ci_low"]), float(res["ci_high"]), float(res["allowance"]), _check_explanation(explanation)
            ),
            "allowance_source": allowance_source,
        }

    def __post_init__(self):
        if not isinstance(self.quantity, str) or not self.quantity.strip():
            raise ValueError(f"quantity must be a non-empty string; got {self.quantity!r}")
        for name in ("time", "theory", "mean", "gap", "ci_low", "ci_high", "df"):
            object.__setattr__(self, name, float(getattr(self, name)))
        object.__setattr__(self, "se", check_nonneg("se", self.se))
        object.__setattr__(self, "allowance", check_nonneg("allowance", self.allowance))
        object.__setattr__(self, "n_seeds", check_int("n_seeds", self.n_seeds, min_value=2))
        if not isinstance(self.allowance_source, str):
            raise ValueError(f"allowance_source must be a string; got {self.allowance_source!r}")
        if self.allowance > 0 and not self.allowance_source.strip():
            raise ValueError("allowance_source must say where a non-zero allowance comes from; got an empty string")
        check_choice("status", self.status, STATUSES)
        _check_explanation(self.explanation)
        if self.status != _gap_status(self.ci_low, self.ci_high, self.allowance, self.explanation):
            raise ValueError(
                f"status {self.status!r} does not follow from the interval [{self.ci_low}, "
                f"{self.ci_high}], the allowance {self.allowance} and the explanation "
                f"{self.explanation!r}"
            )
        if self.d is not None:
            object.__setattr__(self, "d", check_int("d", self.d, min_value=1))

    @classmethod
    def from_stats(
        cls,
        *,
        quantity: str,
        time: float,
        theory: float,
        mean: float,
        se: float,
        n_seeds: int,
        allowance: float = 0.0,
        allowance_source: str = "",
        theory_se: float | None = None,
        theory_n: int | None = None,
        level: float = DEFAULT_LEVEL,
        d: int | None = None,
        explanation: Explanation | None = None,
    ) -> GapRow:
        """A row from summary statistics: ``mean`` and its SE ``se`` over ``n_seeds`` seeds, optionally the
        theory's own SE ``theory_se`` from ``theory_n`` Monte Carlo samples (see :func:`compare_rows`).
        """
        stats = dict(
            quantity=quantity,
            time=time,
            theory=theory,
            mean=mean,
            n_seeds=n_seeds,
            level=level,
            d=d,
            explanation=explanation,
        )
        derived = cls._derive(
            **stats,
            se=se,
            allowance=allowance,
            allowance_source=allowance_source,
            theory_se=theory_se,
            theory_n=theory_n,
        )
        return cls(**stats, **derived)

    @property
    def test_status(self) -> str:
        """The statistical test's own verdict, before any explanation: ``holds``, ``consistent`` or ``fails``."""
        return _gap_status(self.ci_low, self.ci_high, self.allowance, None)

    @property
    def test_holds(self) -> bool:
        """Whether the statistical test shows equivalence (before any explanation)."""
        return self.test_status == "holds"

    @property
    def mdd(self) -> float:
        """Minimum detectable deviation: the true ``|gap|`` this row calls ``fails`` with probability
        :data:`MDD_POWER`, at the measured SE: ``allowance + delta * se``, where ``(gap_hat - allowance) / se_hat``
        is noncentral Student t with the row's df and noncentrality ``delta`` (:func:`dynamics.compare.mdd_factor`).
        """
        return self.allowance + _detectable_ncp(self.df, self.level, MDD_POWER) * self.se

    @property
    def p_value(self) -> float:
        """p-value of the row's ``fails`` test (null hypothesis ``|true gap| <= allowance``): the row fails at level
        ``level`` exactly when ``p_value < level`` (up to ties). Family-wise rules (Holm) use it.
        """
        return float(p_value(self.gap, self.se, self.df, self.allowance))

    @property
    def n_seeds_to_decide(self) -> int | None:
        """For a ``consistent`` row: seeds (at the measured spread) whose interval would no longer straddle the band
        edge nearest the measured gap, i.e. decide ``holds`` or ``fails``; None for a decided row or an undecidable
        one (gap on the edge or no spread).
        """
        margin = abs(abs(self.gap) - self.allowance)
        if self.test_status != "consistent" or margin == 0 or self.se == 0:
            return None
        sd = self.se * math.sqrt(self.n_seeds)
        n = self.n_seeds
        while n < 10**7:
            n = max(n + 1, int(n * 1.05))
            if float(t_quantile(self.level, n - 1)) * sd / math.sqrt(n) < margin:
                return n
        return None

    @property
    def gap_se(self) -> float:
        """Deprecated: ``|gap| / se`` (raw; 0 for 0/0, inf for a non-zero gap with se = 0)."""
        if self.se > 0:
            return abs(self.gap) / self.se
        return 0.0 if self.gap == 0 else math.inf

    @property
    def within(self) -> bool:
        """Deprecated: ``status != "fails"``."""
        return self.status != "fails"

    def explained(self, explanation: Explanation) -> GapRow:
        """A copy of the row with ``explanation`` attached (a row whose test fails takes the explanation's kind)."""
        return replace(
            self, explanation=explanation, status=_gap_status(self.ci_low, self.ci_high, self.allowance, explanation)
        )


def compare_rows(
    quantity: str,
    times: Annotated[Any, Range(array=True)],
    theory: Annotated[Any, Range(array=True)],
    samples: Annotated[Any, Range(array=True)],
    *,
    allowance: Annotated[float, Range(ge=0)] = 0.0,
    rel_allowance: Annotated[float, Range(ge=0)] = 0.0,
    allowance_source: str = "",
    theory_se: Annotated[Any, Range(array=True, ge=0)] = None,
    theory_n_seeds: int | None = None,
    level: Annotated[float, Range(gt=0, lt=1)] = DEFAULT_LEVEL,
    d: int | None = None,
    explanation: Explanation | None = None,
) -> list[GapRow]:
    """One :class:`GapRow` per time from arrays, with the calibrated test of :mod:`dynamics.compare`.

    Parameters
    ----------
    quantity : str
    times : array_like, (n_times,)
    theory : array_like, (n_times,)
        Theory's value at each time.
    samples : array_like, (n_seeds, n_times)
        Empirical values, seeds first (n_seeds >= 2; the default presets use >= 8); a 1-d array is one time.
    allowance, rel_allowance : float >= 0
        The row's absolute allowance is ``allowance + rel_allowance * |theory|``.
    allowance_source : str
        Where the allowance comes from; required whenever an allowance is non-zero.
    theory_se : array_like (n_times,), >= 0, optional
        The theory's own SE when it is a Monte Carlo estimate.
    theory_n_seeds : int, optional
        Samples behind ``theory_se``; default: at least ``n_seeds`` (then df = n_seeds - 1).
    level : float in (0, 1)
        Two-sided false-alarm probability per row (default 1e-3).
    d : int, optional
        Dimension of the empirical runs (shown in the report).
    explanation : Explanation, optional
        Attached to every row; a row whose test fails becomes ``explained``.
    """
    times = np.atleast_1d(np.asarray(times, dtype=np.float64))
    theory = np.atleast_1d(np.asarray(theory, dtype=np.float64))
    samples = np.asarray(samples, dtype=np.float64)
    if samples.ndim == 1:
        samples = samples[:, None]
    if samples.ndim != 2 or not (times.shape == theory.shape == samples.shape[1:]):
        raise ValueError(
            f"samples must have shape (n_seeds, n_times) matching times {times.shape} and theory "
            f"{theory.shape}; got {samples.shape}"
        )
    n = samples.shape[0]
    if n < 2:
        raise ValueError(f"samples must hold at least 2 seeds (axis 0) for a standard error; got {n}")
    if not np.all(np.isfinite(samples)):
        raise ValueError(f"samples of {quantity!r} must be finite; got non-finite values")
    allowance = check_nonneg("allowance", allowance)
    rel_allowance = check_nonneg("rel_allowance", rel_allowance)
    theory_n_seeds = None if theory_n_seeds is None else check_int("theory_n_seeds", theory_n_seeds, min_value=2)
    if (allowance > 0 or rel_allowance > 0) and not (isinstance(allowance_source, str) and allowance_source.strip()):
        raise ValueError("allowance_source must say where a non-zero allowance/rel_allowance comes from")
    if theory_se is not None:
        theory_se = np.broadcast_to(np.asarray(theory_se, dtype=np.float64), theory.shape)
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / np.sqrt(n)
    res = gap_test(
        theory,
        mean,
        se,
        n,
        theory_se=theory_se,
        theory_n=theory_n_seeds,
        allowance=allowance + rel_allowance * np.abs(theory),
        level=level,
    )
    _check_explanation(explanation)
    return [
        GapRow(
            quantity=quantity,
            time=times[i],
            theory=theory[i],
            mean=mean[i],
            gap=res["gap"][i],
            allowance=res["allowance"][i],
            allowance_source=allowance_source if res["allowance"][i] > 0 else "",
            se=res["se"][i],
            n_seeds=n,
            df=res["df"][i],
            ci_low=res["ci_low"][i],
            ci_high=res["ci_high"][i],
            level=level,
            status=_gap_status(res["ci_low"][i], res["ci_high"][i], res["allowance"][i], explanation),
            explanation=explanation,
            d=d,
        )
        for i in range(times.size)
    ]


def gap_rows(
    quantity: str,
    times: Annotated[Any, Range(array=True)],
    theory: Annotated[Any, Range(array=True)],
    samples: Annotated[Any, Range(array=True)],
    *,
    tol_se: float | None = None,
    justification: str = "",
    atol: Annotated[float, Range(ge=0)] = 0.0,
    d: int | None = None,
) -> list[GapRow]:
    """Deprecated shim onto :func:`compare_rows` (``allowance = atol``, ``allowance_source = justification``).

    ``tol_se`` is ignored: the fixed "k SE" rule is replaced by the Student-t interval at the default level, which
    is calibrated for any number of seeds (a fixed 5 SE is not: its false-alarm rate is 12.6 % with 2 seeds).

    Parameters
    ----------
    atol : float >= 0
    """
    warnings.warn(
        "gap_rows is deprecated; use compare_rows (allowance, allowance_source, explanation)",
        DeprecationWarning,
        stacklevel=2,
    )
    return compare_rows(
        quantity, times, theory, samples, allowance=atol, allowance_source=justification if atol > 0 else "", d=d
    )


def per_seed_check(
    name: str,
    reference: Annotated[Any, Range(array=True)],
    samples: Annotated[Any, Range(array=True)],
    *,
    tol: Annotated[float, Range(ge=0)],
    tolerance: str,
    explanation: Explanation | None = None,
) -> CheckResult:
    """Two computations that should agree exactly (same data, same steps), compared seed by seed: passes only if
    every seed's ``|sample - reference| <= tol`` (``tol``: round-off, with its source in ``tolerance``).

    Parameters
    ----------
    name : str
    reference, samples : array_like, (n_seeds, ...)
        Per-seed values of the two computations (same shape).
    tol : float >= 0
        Largest deviation attributed to round-off.
    tolerance : str
        Where ``tol`` comes from.
    explanation : Explanation, optional
        A measured cause for seeds beyond round-off.
    """
    reference = np.asarray(reference, dtype=np.float64)
    samples = np.asarray(samples, dtype=np.float64)
    if reference.shape != samples.shape or reference.ndim < 1:
        raise ValueError(
            f"reference and samples must have the same shape (n_seeds, ...); got {reference.shape} and {samples.shape}"
        )
    dev = np.abs(samples - reference).reshape(samples.shape[0], -1).max(axis=1)
    bad = np.flatnonzero(~(dev <= tol))
    detail = f"; seeds beyond: {bad.tolist()} (max {dev.max():.3g})" if bad.size else ""
    return CheckResult(
        name=f"{name} (per seed, {samples.shape[0]} seeds){detail}",
        passed=not bad.size,
        measured=float(dev.max()),
        expected=0.0,
        tolerance=tolerance,
        n_seeds=int(samples.shape[0]),
        explanation=explanation,
    )


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One theorem check: what was tested, whether it passed, and the numbers.

    Attributes
    ----------
    name : str
        E.g. ``"Theorem 5: kappa -> 1 (docs/models/single_location.md §7.3)"``.
    passed : bool
        Whether the check's own test passed.
    measured, expected : float or str
        The measured number and the prediction (numbers are shown with 6 significant digits). A check that
        summarises seeds states the statistic it tests and reports that same statistic here. ``measured`` may be
        NaN (not defined for this run) or +-inf (an unbounded statistic); ``passed`` decides either way.
    tolerance : str
        The tolerance and where it comes from.
    n_seeds : int or None
        Seeds behind ``measured`` (None for a deterministic check).
    explanation : Explanation or None
        A documented reason for a check that does not pass.
    """

    name: str
    passed: bool
    measured: Annotated[float | str, _measured_check]
    expected: Annotated[float | str, _expected_check]
    tolerance: str
    n_seeds: int | None = None
    explanation: Explanation | None = None

    def __post_init__(self):
        for name in ("name", "tolerance"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ValueError(f"{name} must be a non-empty string; got {getattr(self, name)!r}")
        object.__setattr__(self, "passed", bool(self.passed))
        for name in ("measured", "expected"):
            value = getattr(self, name)
            if not isinstance(value, str):
                object.__setattr__(self, name, float(value))
        if self.n_seeds is not None:
            object.__setattr__(self, "n_seeds", check_int("n_seeds", self.n_seeds, min_value=1))
        _check_explanation(self.explanation)

    @property
    def status(self) -> str:
        """``holds`` if passed, else the explanation's kind (``explained``, ``disagrees``, ``deferred``), else
        ``fails``.
        """
        return _status(self.passed, self.explanation)

    def explained(self, explanation: Explanation) -> CheckResult:
        """A copy of the check with ``explanation`` attached."""
        return replace(self, explanation=explanation)


# ----------------------------------------------------------------------------------------------------------------
# Figure specs and the registry
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class FigureSpec:
    """A registered figure: metadata, parameters per preset and its functions (see the module docstring)."""

    name: str
    model: str
    paper: str
    spec: str
    caption: str
    unrecoverable: tuple[str, ...]
    params: Mapping[str, Mapping[str, Any]]
    data: Callable[[RunConfig], xr.Dataset]
    plot: Callable[[xr.Dataset], Figure]
    gaps: Callable[[xr.Dataset], list[GapRow]] | None = None
    checks: Callable[[xr.Dataset], list[CheckResult]] | None = None
    paper_only: str | None = None
    shares_data_with: str | None = None
    param_info: Mapping[str, Param] = field(default_factory=dict)
    calibrated_at: Mapping[str, Any] = field(default_factory=dict)
    defined_presets: tuple[str, ...] = field(init=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(f"name must look like '<model>.<figure>' (letters, digits, _ . -); got {self.name!r}")
        if not self.name.startswith(f"{self.model}."):
            raise ValueError(f"name must start with the model name '{self.model}.'; got {self.name!r}")
        for attr in ("paper", "spec", "caption"):
            if not isinstance(getattr(self, attr), str) or not getattr(self, attr).strip():
                raise ValueError(f"{attr} must be a non-empty string; got {getattr(self, attr)!r}")
        if isinstance(self.unrecoverable, str) or not all(isinstance(u, str) and u for u in self.unrecoverable):
            raise ValueError(f"unrecoverable must be a tuple of non-empty strings; got {self.unrecoverable!r}")
        object.__setattr__(self, "unrecoverable", tuple(self.unrecoverable))
        if not isinstance(self.params, Mapping) or not self.params or not set(self.params) <= set(PRESETS):
            got = sorted(self.params) if isinstance(self.params, Mapping) else type(self.params).__name__
            raise ValueError(
                f"params must map some of the presets {list(PRESETS)} to the figure's parameters; got {got}"
            )
        defined = tuple(p for p in PRESETS if p in self.params)
        typed = _param_records(self.name, {p: self.params[p] for p in defined}, self.param_info)
        object.__setattr__(self, "defined_presets", defined)
        # every preset maps to a record: a preset the figure does not define falls back (_fallback_preset)
        object.__setattr__(
            self, "params", types.MappingProxyType({p: typed[_fallback_preset(p, defined)] for p in PRESETS})
        )
        object.__setattr__(self, "param_info", types.MappingProxyType(dict(self.param_info)))
        bad = sorted(set(self.calibrated_at) - set(self.record_type.valid_keys()))
        if bad:
            raise ValueError(
                f"calibrated_at names unknown parameters {bad}; valid keys: {', '.join(self.record_type.valid_keys())}"
            )
        object.__setattr__(
            self,
            "calibrated_at",
            types.MappingProxyType(
                {k: self.params[defined[0]].replace(**{k: v})[k] for k, v in self.calibrated_at.items()}
            ),
        )
        for attr in ("data", "plot"):
            if not callable(getattr(self, attr)):
                raise ValueError(f"{attr} must be callable; got {getattr(self, attr)!r}")
        for attr in ("gaps", "checks"):
            if getattr(self, attr) is not None and not callable(getattr(self, attr)):
                raise ValueError(f"{attr} must be callable or None; got {getattr(self, attr)!r}")
        if self.paper_only is not None and (not isinstance(self.paper_only, str) or not self.paper_only.strip()):
            raise ValueError(f"paper_only must be None or a non-empty reason; got {self.paper_only!r}")
        if self.shares_data_with is not None and (
            not isinstance(self.shares_data_with, str)
            or not _NAME_RE.match(self.shares_data_with)
            or self.shares_data_with == self.name
        ):
            raise ValueError(f"shares_data_with must be None or another figure's name; got {self.shares_data_with!r}")

    @property
    def record_type(self) -> type[ParamsRecord]:
        """The figure's parameter record (a frozen dataclass; the presets are its instances)."""
        return type(self.params[self.defined_presets[0]])

    def params_from(self, preset: str) -> str:
        """The preset whose parameters this figure uses at ``preset``: ``preset`` itself when the figure defines it,
        else the largest defined preset below it, else the smallest above it.
        """
        return _fallback_preset(check_preset(preset), self.defined_presets)

    def resolve_params(self, preset: str, overrides: Mapping[str, Any] | None = None) -> ParamsRecord:
        """The parameters at ``preset`` with ``overrides`` applied and validated (``ValueError`` naming the valid
        keys, or the valid range, before anything runs).
        """
        check_preset(preset)
        record = self.params[preset]
        return record.replace(**dict(overrides)) if overrides else record

    def calibration_warnings(self, params: Mapping[str, Any]) -> list[str]:
        """One line per parameter of ``params`` outside the values at which the figure's allowances or checks were
        calibrated (``calibrated_at``): a number that differs, or a list with values the calibration did not see.
        """
        out = []
        for key, calibrated in self.calibrated_at.items():
            value = params[key]
            inside = (
                set(_flat(value)) <= set(_flat(calibrated)) if isinstance(calibrated, list) else value == calibrated
            )
            if not inside:
                out.append(
                    f"{key} = {_json(value)} is outside the value its allowances and checks were calibrated "
                    f"at ({key} = {_json(calibrated)})"
                )
        return out

    def caption_for(self, config: RunConfig) -> str:
        """:attr:`full_caption` plus, for a build with overrides, every overridden parameter (with its preset
        value) and any calibration warning.
        """
        text = self.full_caption
        if self.calibrated_at:
            text += (
                " Allowances and checks calibrated at "
                + ", ".join(f"{k} = {_json(v)}" for k, v in self.calibrated_at.items())
                + "."
            )
        if config.params_from != config.preset:
            text += f" Parameters of preset {config.params_from!r} (the figure defines no {config.preset!r} preset)."
        if config.overrides:
            preset_params = self.params[config.preset]
            changes = "; ".join(
                f"{k} = {_json(config.params[k])} (preset {_json(preset_params[k])})" for k in config.overrides
            )
            text += f" Overridden parameters: {changes}."
            warns = self.calibration_warnings(config.params)
            if warns:
                text += " Caution: " + "; ".join(warns) + "."
        return text

    @property
    def data_source(self) -> str:
        """The figure whose cached data this figure shows: ``shares_data_with`` or the figure itself."""
        return self.shares_data_with or self.name

    def paper_only_explanation(self, preset: str) -> Explanation | None:
        """The explanation given to the failing rows and checks of a ``paper_only`` figure built below ``paper``."""
        if self.paper_only is None or preset == "paper":
            return None
        return Explanation(
            reason=f"{PAPER_ONLY_NOTE}: {self.paper_only}",
            kind="deferred",
            evidence=f"{self.name}: the measured trend towards the claim, in its caption and rows",
        )

    @property
    def full_caption(self) -> str:
        """The caption, followed by the unrecoverable parameters (and the documented defaults used for them) and, for a
        ``paper_only`` figure, the note that its claim is decided at ``--preset paper`` only.
        """
        text = self.caption.rstrip()
        if self.unrecoverable:
            text += (
                f" Not recoverable from the paper; the documented default is used for: {'; '.join(self.unrecoverable)}."
            )
        if self.paper_only is not None:
            text += f" {PAPER_ONLY_NOTE[0].upper()}{PAPER_ONLY_NOTE[1:]}: {self.paper_only.rstrip('.')}."
        return text


def _fallback_preset(preset: str, defined: Sequence[str]) -> str:
    """The preset whose parameters a figure uses at ``preset``: ``preset`` itself when the figure defines it, else
    the largest defined preset below it, else the smallest above it.
    """
    if preset in defined:
        return preset
    order = list(PRESETS)
    below = [p for p in defined if order.index(p) < order.index(preset)]
    return below[-1] if below else defined[0]


def _param_records(
    name: str, params: Mapping[str, Mapping[str, Any]], param_info: Mapping[str, Param]
) -> dict[str, ParamsRecord]:
    """Preset -> record of figure ``name``: records given as such are kept (all of one type), dictionaries are
    turned into records of a type made for the figure (:func:`figures.params.records`).
    """
    given = [v for v in params.values() if isinstance(v, ParamsRecord)]
    if given:
        if len(given) != len(params) or len({type(v) for v in given}) != 1:
            raise ValueError(f"params of figure {name!r} must be all records of one type or all mappings")
        return dict(params)
    return records(name, params, param_info)


def _flat(value) -> list:
    if isinstance(value, list | tuple):
        return [x for v in value for x in _flat(v)]
    return [value]


def _json(value) -> str:
    return json.dumps(value, separators=(", ", ": "))


@dataclass(frozen=True)
class ModuleStatus:
    """Import status of ``figures.<model>``: ``loaded``, ``missing`` (not written yet), ``error`` or ``direct``
    (a registry without a package: figures registered by hand, e.g. in tests).
    """

    model: str
    state: str
    detail: str = ""


class Registry:
    """Name -> :class:`FigureSpec`, with discovery of the figure modules of a package.

    Parameters
    ----------
    models : sequence of str
        Allowed model names, in report order.
    package : str or None
        Package whose ``<package>.<model>`` modules :meth:`discover` imports; ``None`` for a registry filled by hand.
    factory : callable, optional
        A module-level, argument-free function that rebuilds an equivalent registry in another process (the
        parallel report's workers use it; without it a hand-filled registry is built serially).
    """

    def __init__(
        self,
        models: Sequence[str] = MODELS,
        package: str | None = "figures",
        factory: Callable[[], Registry] | None = None,
    ):
        self.models = tuple(models)
        self.package = package
        self.factory = factory
        self._figures: dict[str, FigureSpec] = {}
        self._status: dict[str, ModuleStatus] = {}

    def register(
        self,
        *,
        name: str,
        model: str,
        paper: str,
        spec: str,
        caption: str,
        params: Mapping[str, Mapping[str, Any]],
        plot: Callable,
        unrecoverable: Sequence[str] = (),
        gaps: Callable | None = None,
        checks: Callable | None = None,
        paper_only: str | None = None,
        shares_data_with: str | None = None,
        param_info: Mapping[str, Param] | None = None,
        calibrated_at: Mapping[str, Any] | None = None,
    ) -> Callable:
        """Decorator registering ``data`` (the decorated function) as figure ``name``; returns ``data`` unchanged.

        See the module docstring for the meaning of each argument and a worked example. ``paper_only="reason"``
        marks a figure whose claim truly needs the paper's sizes (at most a few in the whole report): below
        ``--preset paper`` its caption and badge say "decided at --preset paper only" (badge ``explained``) and
        its failing rows and checks are ``explained`` by that reason; rows that hold stay ``holds``.

        ``shares_data_with="<model>.<figure>"`` declares that this figure shows the same runs as another figure
        (same parameters, same data function): :func:`build` then builds (or reads from the cache) the other figure's
        data once for both, and the parallel report builds the two in one worker, one after the other.

        ``params`` maps some or all presets to the figure's parameters (JSON values, or instances of one
        :class:`figures.params.ParamsRecord` type); a preset left out falls back to another
        (:meth:`FigureSpec.params_from`, with a one-line message at build time). ``param_info`` gives the meaning, unit
        and range of parameters that :data:`figures.params.VOCABULARY` lacks (or that mean something else here).
        ``calibrated_at`` maps parameters to the values at which the figure's allowances and checks were calibrated: the
        caption says so, and a build whose overrides move outside them warns.
        """
        if model not in self.models:
            raise ValueError(f"model must be one of {', '.join(self.models)}; got {model!r}")

        def decorator(data: Callable) -> Callable:
            fig = FigureSpec(
                name=name,
                model=model,
                paper=paper,
                spec=spec,
                caption=caption,
                unrecoverable=unrecoverable,
                params=params,
                data=data,
                plot=plot,
                gaps=gaps,
                checks=checks,
                paper_only=paper_only,
                shares_data_with=shares_data_with,
                param_info=param_info or {},
                calibrated_at=calibrated_at or {},
            )
            old = self._figures.get(name)
            if old is not None and (old.data.__module__, old.data.__qualname__) != (data.__module__, data.__qualname__):
                raise ValueError(
                    f"figure {name!r} is already registered by {old.data.__module__}.{old.data.__qualname__}"
                )
            self._figures[name] = fig  # same function re-registered (module reload): replace
            return data

        return decorator

    def discover(self) -> dict[str, ModuleStatus]:
        """Import ``<package>.<model>`` for every model (once) and return each model's :class:`ModuleStatus`."""
        for model in self.models:
            if model in self._status:
                continue
            if self.package is None:
                self._status[model] = ModuleStatus(model, "direct")
                continue
            module = _figure_module(self.package, model)
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name != module:
                    self._status[model] = ModuleStatus(model, "error", f"{type(exc).__name__}: {exc}")
                    logger.error("importing %s failed: %s", module, exc)
                else:
                    self._status[model] = ModuleStatus(
                        model, "missing", f"{module.replace('.', '/')}.py not written yet"
                    )
            except Exception as exc:  # noqa: BLE001 - reported in `list` and the report, never hidden
                self._status[model] = ModuleStatus(model, "error", f"{type(exc).__name__}: {exc}")
                logger.error("importing %s failed: %s", module, exc, exc_info=True)
            else:
                self._status[model] = ModuleStatus(model, "loaded")
        return dict(self._status)

    def names(self, model: str | None = None) -> list[str]:
        """Registered figure names (of one model), in model order then registration order."""
        order = {m: i for i, m in enumerate(self.models)}
        figs = sorted(self._figures.values(), key=lambda f: order[f.model])  # stable: keeps registration order
        return [f.name for f in figs if model is None or f.model == model]

    def get(self, name: str) -> FigureSpec:
        """The :class:`FigureSpec` called ``name``; an unknown name raises ``ValueError`` listing the valid ones."""
        try:
            return self._figures[name]
        except KeyError:
            raise ValueError(self._unknown_message(name)) from None

    def resolve(self, names: Sequence[str]) -> list[str]:
        """Expand figure names and model names (all figures of that model) into figure names, without repeats."""
        out: list[str] = []
        for name in names:
            if name in self._figures:
                expanded = [name]
            elif name in self.models and self.names(name):
                expanded = self.names(name)
            else:
                raise ValueError(self._unknown_message(name))
            out.extend(n for n in expanded if n not in out)
        return out

    def split_overrides(
        self, names: Sequence[str], overrides: Mapping[str, Any], *, figure_required: bool = False
    ) -> dict[str, dict[str, Any]]:
        """Per-figure overrides from ``{"param": value}`` (every figure of ``names``) and ``{"figure.param": value}``
        (that figure, which must be among ``names``); each figure's overrides are validated now, before anything runs.

        Returns figure name -> {param: value} for every figure of ``names`` (empty where none applies).
        """
        out: dict[str, dict[str, Any]] = {name: {} for name in names}
        for text, value in overrides.items():
            figure, key = split_key(text, figure_required=figure_required)
            targets = list(names) if figure is None else [figure]
            if figure is not None and figure not in out:
                self.get(figure)  # an unknown figure: ValueError listing the valid ones
                raise ValueError(f"--set {text}: figure {figure!r} is not among the figures built ({', '.join(names)})")
            for name in targets:
                out[name][key] = value
        for name, values in out.items():
            spec = self.get(name)
            spec.resolve_params(DEFAULT_PRESET, values)  # unknown keys and ranges do not depend on the preset
        return out

    def _unknown_message(self, name: str) -> str:
        valid = self.names()
        if not valid:
            return (
                f"unknown figure {name!r}: no figures are registered yet (models: {', '.join(self.models)}; "
                "run `python -m figures list`)"
            )
        with_figs = [m for m in self.models if self.names(m)]
        return (
            f"unknown figure {name!r}; valid figures: {', '.join(valid)} "
            f"(or a model name for all its figures: {', '.join(with_figs)})"
        )


REGISTRY = Registry()
"""The registry that ``figures/<model>.py`` modules register into and the CLI reads."""

register = REGISTRY.register
"""``@register(...)`` on :data:`REGISTRY`; see :meth:`Registry.register`."""


def discover() -> dict[str, ModuleStatus]:
    """Import every ``figures.<model>`` module into :data:`REGISTRY`; see :meth:`Registry.discover`."""
    return REGISTRY.discover()


# ----------------------------------------------------------------------------------------------------------------
# Building
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class BuildResult:
    """The data of one figure build and how it was obtained.

    Attributes
    ----------
    spec : FigureSpec
    config : RunConfig
    dataset : xarray.Dataset
    status : str
        ``cached`` (verified cache hit), ``computed`` (no entry), ``recomputed`` (on request) or ``repaired``
        (the entry was corrupt and has been recomputed).
    runtime_s : float
        Wall time of the data computation (for a cache hit: of the run that produced the entry).
    cache_path : pathlib.Path or None
        The cache entry (None when caching is off).
    outputs : tuple of pathlib.Path
        Image files written by :func:`make`.
    """

    spec: FigureSpec
    config: RunConfig
    dataset: xr.Dataset
    status: str
    runtime_s: float
    cache_path: Path | None = None
    outputs: tuple[Path, ...] = field(default_factory=tuple)


class CalibrationWarning(UserWarning):
    """A build whose overrides move a figure outside the parameter values its allowances were calibrated at."""


def run_config(
    spec: FigureSpec, preset: str, *, seed: int = DEFAULT_SEED, device: str = "cpu", progress: bool = False, **overrides
) -> RunConfig:
    """The :class:`RunConfig` of ``spec`` at ``preset`` with parameter ``overrides`` (validated: an unknown key or
    a value out of range raises ``ValueError`` naming the valid keys or range). ``device`` must already be resolved
    (cpu or cuda). Overrides equal to the preset's value are no overrides (same configuration, same cache entry).
    """
    params = spec.resolve_params(preset, overrides)
    base = spec.params[preset]
    changed = tuple(k for k in overrides if params[k] != base[k])
    return RunConfig(
        figure=spec.name,
        preset=preset,
        seed=seed,
        device=device,
        params=params,
        overrides=changed,
        params_from=spec.params_from(preset),
        progress=progress,
    )


def build(
    name: str,
    preset: str = DEFAULT_PRESET,
    *,
    seed: Annotated[int, Range(integer=True, ge=0)] = DEFAULT_SEED,
    device: str = "auto",
    cache_dir: str | Path | None = cache.DEFAULT_CACHE_DIR,
    recompute: bool = False,
    progress: bool = False,
    registry: Registry = REGISTRY,
    **overrides,
) -> BuildResult:
    """Build figure ``name`` at ``preset``, with parameter ``overrides``: its data from the cache if a verified entry
    exists, else computed (and stored), as a :class:`BuildResult`.

    Parameters
    ----------
    name : str
        A registered figure name (unknown -> ``ValueError`` listing the valid ones).
    preset : {"tiny", "quick", "paper"}
    seed : int >= 0
        The run's seed; every random stream of the figure is spawned from it (:func:`figures.presets.spawn_seeds`).
    device : {"auto", "cpu", "cuda"}
        Resolved with :func:`figures.presets.resolve_device`.
    cache_dir : path or None
        Cache root (``results/``) of the figure's data and of its torch runs (:mod:`figures.experiments`); None
        disables caching.
    recompute : bool
        Ignore an existing entry (the figure's and its runs'), compute and overwrite it.
    progress : bool
        Passed to ``data`` through ``cfg.progress``.
    **overrides
        Parameters of the figure set away from the preset (``python -m figures params NAME`` lists them with their
        units and ranges); validated before anything is computed.

    Returns
    -------
    BuildResult
        The dataset, the :class:`RunConfig` (the resolved parameters included) and how the data was obtained.

    Notes
    -----
    With caching on, the returned Dataset is always the one read back from the verified cache file, so a fresh
    build and a cache hit give identical objects. Attributes added: ``figure``, ``model``, ``paper``,
    ``spec_section``, ``preset``, ``seed``, ``device``, ``code``, ``config_json`` (the full resolved configuration),
    ``overrides_json`` (parameter -> value and preset value), ``caption``, ``train_configs_json`` (the trainer's
    configuration of every torch run, :mod:`figures.experiments`), ``config_key``, ``git_rev``,
    ``versions_json``; nested attribute values become JSON text (netCDF-safe).
    """
    spec = registry.get(name)
    check_preset(preset)
    cfg = run_config(spec, preset, seed=seed, device="cpu", **overrides)  # validates before anything runs
    if spec.shares_data_with is not None:
        source = registry.get(spec.shares_data_with)
        if source.shares_data_with is not None or source.data is not spec.data or source.params != spec.params:
            raise ValueError(
                f"figure {name!r} shares its data with {source.name!r}, which must be a figure of its own "
                "with the same data function and parameters"
            )
        shared = build(
            source.name,
            preset,
            seed=seed,
            device=device,
            cache_dir=cache_dir,
            recompute=recompute,
            progress=progress,
            registry=registry,
            **overrides,
        )
        return replace(shared, spec=spec)
    if cfg.params_from != preset:
        logger.warning("%s defines no %r preset; using its %r parameters", name, preset, cfg.params_from)
    for line in spec.calibration_warnings(cfg.params) if cfg.overrides else ():
        warnings.warn(f"{name}: {line}", CalibrationWarning, stacklevel=2)
    cfg = replace(cfg, device=resolve_device(device), progress=progress)
    status = "recomputed" if recompute else "computed"
    if cache_dir is not None and not recompute:
        lookup = cache.load(cache_dir, cfg)
        if lookup.status == "hit":
            return BuildResult(
                spec=spec,
                config=cfg,
                dataset=lookup.dataset,
                status="cached",
                runtime_s=lookup.runtime_s,
                cache_path=cache.entry_paths(cache_dir, cfg)[0],
            )
        if lookup.status == "corrupt":
            status = "repaired"
    t0 = time.perf_counter()
    with experiments.recording() as runs, experiments.caching(cache_dir, recompute=recompute):
        dataset = spec.data(cfg)  # torch runs are reused from <cache_dir>/_runs (figures.experiments)
    runtime = time.perf_counter() - t0
    if not isinstance(dataset, xr.Dataset):
        raise TypeError(f"data function of figure {name!r} must return an xarray.Dataset; got {type(dataset).__name__}")
    dataset = _with_provenance(dataset, spec, cfg, runs)
    path = None
    if cache_dir is not None:
        path = cache.store(cache_dir, cfg, dataset, runtime_s=runtime)
        # Return what was stored, read back: a fresh build and a later cache hit are then identical (dtypes and
        # attributes as the file holds them), and the new entry is verified once.
        stored = cache.load(cache_dir, cfg)
        if stored.status != "hit":
            raise OSError(f"the cache entry just written for {name!r} at {path} does not verify: {stored.reason}")
        dataset = stored.dataset
    logger.info("%s: %s in %.2f s", name, status, runtime)
    return BuildResult(spec=spec, config=cfg, dataset=dataset, status=status, runtime_s=runtime, cache_path=path)


def _with_provenance(dataset: xr.Dataset, spec: FigureSpec, cfg: RunConfig, runs: Sequence[dict] = ()) -> xr.Dataset:
    """A copy of ``dataset`` with netCDF-safe attributes and the build's provenance (``runs``: the training runs
    recorded by :mod:`figures.experiments`).
    """
    dataset = dataset.copy(deep=False)  # data shared; the attribute dicts below are replaced, not mutated
    for var in dataset.variables.values():
        var.attrs = sanitize_attrs(dict(var.attrs))
    attrs = dict(dataset.attrs)
    base = spec.params[cfg.preset]
    overrides = {k: {"value": cfg.params[k], "preset_value": base[k]} for k in cfg.overrides}
    attrs.update(
        figure=spec.name,
        model=spec.model,
        paper=spec.paper,
        spec_section=spec.spec,
        preset=cfg.preset,
        seed=cfg.seed,
        device=cfg.device,
        code=cfg.code,
        config_json=cfg.to_json(),
        overrides_json=json.dumps(overrides, sort_keys=True),
        caption=spec.caption_for(cfg),
        train_configs_json=experiments.records_json(list(runs)),
        config_key=cache.cache_key(cfg),
        git_rev=git_revision(),
        versions_json=package_versions(),
    )
    dataset.attrs = sanitize_attrs(attrs)
    return dataset


def render(spec: FigureSpec, dataset: xr.Dataset) -> Figure:
    """Call ``spec.plot(dataset)`` inside the shared style and check that it returned a ``Figure``."""
    with _style.style_context():
        fig = spec.plot(dataset)
        if not isinstance(fig, Figure):
            raise TypeError(
                f"plot function of figure {spec.name!r} must return a matplotlib Figure; got {type(fig).__name__}"
            )
        overrides = json.loads(dataset.attrs.get("overrides_json", "{}") or "{}")
        if overrides:  # a figure built away from its preset says so on the image itself
            text = "overridden: " + ", ".join(f"{k} = {_json(v['value'])}" for k, v in sorted(overrides.items()))
            fig.text(0.005, 0.005, text, fontsize="x-small", color="#882255", ha="left", va="bottom")
    return fig


def make(
    names: Sequence[str],
    preset: str = DEFAULT_PRESET,
    *,
    seed: int = DEFAULT_SEED,
    device: str = "auto",
    cache_dir: str | Path | None = cache.DEFAULT_CACHE_DIR,
    out_dir: str | Path = DEFAULT_OUT_DIR,
    formats: Sequence[str] = ("png", "pdf"),
    recompute: bool = False,
    progress: bool = False,
    registry: Registry = REGISTRY,
    **overrides,
) -> list[BuildResult]:
    """Build figures (names or model names) and write ``<out_dir>/<name>.<fmt>``; return one result per figure.

    ``overrides``: ``param=value`` applies to every figure built, ``**{"figure.param": value}`` to one. All names
    and overrides are validated before anything is computed. See :func:`build` for the other arguments.
    """
    figures = registry.resolve(names)
    check_preset(preset)
    per_figure = registry.split_overrides(figures, overrides)
    if isinstance(formats, str) or not formats:
        raise ValueError(
            f"formats must be a non-empty sequence among {', '.join(_style.SAVE_METADATA)}; got {formats!r}"
        )
    for fmt in formats:
        if fmt not in _style.SAVE_METADATA:
            raise ValueError(f"formats must be among {', '.join(_style.SAVE_METADATA)}; got {fmt!r}")
    device = resolve_device(device)
    results = []
    for name in tqdm(figures, desc=f"figures ({preset})", unit="fig", disable=None if progress else True):
        result = build(
            name,
            preset,
            seed=seed,
            device=device,
            cache_dir=cache_dir,
            recompute=recompute,
            progress=progress,
            registry=registry,
            **per_figure[name],
        )
        fig = render(result.spec, result.dataset)
        paths = _style.save_figure(fig, Path(out_dir) / name, formats)
        results.append(replace(result, outputs=tuple(paths)))
    return results


# The rules of CheckResult's measured and expected (Annotated metadata of its fields, dynamics.validation).
def _measured_check(name, value):
    """``measured`` of a :class:`CheckResult`: a string, or any real number (inf may mean "not reached", NaN "not
    defined": the check's own test says how it reads them).
    """
    if isinstance(value, str):
        return
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real | np.floating | np.integer):
        raise ArgumentTypeError(f"{name} must be a real number or a string; got {value!r}")


def _expected_check(name, value):
    """``expected`` of a :class:`CheckResult`, the prediction: as ``measured``, but never NaN."""
    _measured_check(name, value)
    if not isinstance(value, str) and value != value:
        raise ValueError(f"{name} must be a number (inf allowed) or a string, not NaN; got {value!r}")


validate_module(globals())  # each parameter's rule is declared at its definition
