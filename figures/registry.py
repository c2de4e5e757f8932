"""Registry of paper figures: one ``data`` + ``plot`` pair per figure, built through a checksummed cache.

This module is the contract for the figure modules ``figures/<model>.py`` (one per model of :data:`MODELS`).

How a figure is declared
------------------------
A figure is a *pure* pair:

* ``data(cfg: RunConfig) -> xarray.Dataset`` computes everything the figure shows (closed-form curves, reduced
  dynamics, learned trajectories with a ``seed`` dimension). ``cfg.params`` holds the figure's own parameters for
  the requested preset, ``cfg.seed`` the run's one seed, ``cfg.device`` ``"cpu"`` or ``"cuda"``. Same ``cfg`` ->
  same data (bitwise, on one machine): all randomness comes from ``cfg.seed``. The result is cached on disk under
  ``results/<name>/`` keyed by a hash of ``cfg`` (:mod:`figures.cache`).
* ``plot(ds) -> matplotlib.figure.Figure`` draws it from the Dataset alone (no computation, no I/O, no pyplot).
  It is called inside :func:`figures._style.style_context`; use :func:`figures._style.new_figure` and the source
  helpers ``plot_theory`` (solid), ``plot_reduced`` (dashed), ``plot_empirical_band`` (mean over seeds + band).

Optionally, for the report (:mod:`figures.report`):

* ``gaps(ds) -> list[GapRow]``: theory vs practice at chosen times, in units of the standard error over seeds, with
  the tolerance the spec justifies (:func:`gap_rows` builds them from arrays).
* ``checks(ds) -> list[CheckResult]``: theorem checks, pass/fail with the measured numbers.

Parameters per preset (``tiny`` for the tests: seconds; ``quick``: the whole set in minutes on a CPU; ``paper``: the
papers' sizes) are declared at registration and must be JSON values. Where the spec marks a parameter as
unrecoverable ([U]/[choice]), use the spec's proposed default and list it in ``unrecoverable``: the caption then says
so (:attr:`FigureSpec.full_caption`).

Worked example (``figures/single_location.py``)::

    import numpy as np
    import xarray as xr

    from figures.registry import CheckResult, gap_rows, register
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
        return gap_rows("excess risk", ds.step.values[idx], ds.risk_theory.values[idx],
                        ds.risk_pgd.values[:, idx], tol_se=5.0,
                        justification="5 SE: two-sided false-alarm rate < 6e-7 per row (tests/_stats.py)")


    def checks_fig4a(ds):
        final = float(ds.kappa_pgd.isel(time=-1).median())
        return [CheckResult(name="Theorem 5: kappa -> 1", passed=abs(final - 1) < 1e-3, measured=final,
                            expected=1.0, tolerance="1e-3 (spec §7.3, after 2000 steps)")]


    @register(name="single_location.fig4a", model="single_location", paper="Marion et al. (2025), Fig. 4(a)",
              spec="single_location.md §8.2", caption="PGD from the sphere, decreasing temperature.",
              params={"tiny": {"d": 20, "L": 10, "n_steps": 50, "n_seeds": 3},
                      "quick": {"d": 200, "L": 10, "n_steps": 5000, "n_seeds": 10},
                      "paper": {"d": 400, "L": 10, "n_steps": 120_000, "n_seeds": 30}},
              plot=plot_fig4a, gaps=gaps_fig4a, checks=checks_fig4a)
    def data_fig4a(cfg):
        rng = np.random.default_rng(cfg.seed)
        ...  # compute with closedform/dynamics/empirical, sizes from cfg.params
        return xr.Dataset(...)

A figure whose parameters the spec marks unrecoverable (e.g. Fig. 3, single_location.md §8.1) adds
``unrecoverable=("curves vs L = 1..100 at d = 400, gamma^2 = 1/2, eps = 0 (spec §8.1 proposal)",)``; its caption
then ends with "Not recoverable from the paper; the spec's documented default is used for: ...".

Then ``python -m figures make single_location.fig4a --preset quick`` writes ``figures/out/single_location.fig4a.{png,
pdf}``, and ``python -m figures report`` includes it. Library use: :func:`build` (data, cached), :func:`render`
(figure), :func:`make` (both, saved to files).

Discovery: figure modules register into :data:`REGISTRY` when imported; :func:`discover` imports ``figures.<model>``
for each model of :data:`MODELS`, records a module that does not exist yet as ``missing`` and one that fails to
import as ``error`` (with the message), so ``list`` and ``report`` can say so.
"""

from __future__ import annotations

import importlib
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from dynamics.provenance import git_revision, package_versions, sanitize_attrs
from dynamics.validation import check_int, check_nonneg, check_positive
from figures import _style, cache
from figures.presets import DEFAULT_PRESET, DEFAULT_SEED, PRESETS, RunConfig, check_preset, resolve_device

logger = logging.getLogger(__name__)

MODELS: tuple[str, ...] = ("single_location", "scan_snap", "icl_regression", "nearest_neighbor", "group_sparse",
                           "random_walk")
"""The models of the toolkit, in report order; figures of model ``m`` live in ``figures/m.py``."""

DEFAULT_OUT_DIR = Path("figures") / "out"
"""Where :func:`make` writes ``<name>.png``/``.pdf`` by default (relative to the working directory; git-ignored)."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_.\-]+$")


# ----------------------------------------------------------------------------------------------------------------
# Report rows
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class GapRow:
    """One theory-vs-practice comparison at one time, measured in standard errors over seeds.

    Attributes
    ----------
    quantity : str
        What is compared, e.g. ``"excess risk"``.
    time : float
        Where (on the figure's time axis).
    theory : float
        Theory's value (closed form or reduced dynamics).
    mean, se : float
        Empirical mean over seeds and its standard error (sample std with ddof=1 over sqrt(n_seeds)).
    n_seeds : int
        Number of seeds (>= 2).
    tol_se : float
        The tolerance in SE the spec justifies (e.g. 5).
    atol : float
        An absolute allowance added before dividing by SE (e.g. a finite-d bias bound the spec derives); default 0.
    justification : str
        Where ``tol_se``/``atol`` come from (spec section, argument).
    d : int or None
        The dimension of the empirical runs, where the theory is a d -> infinity limit (STYLE.md §2.4: state d).
    """

    quantity: str
    time: float
    theory: float
    mean: float
    se: float
    n_seeds: int
    tol_se: float
    justification: str
    atol: float = 0.0
    d: int | None = None

    def __post_init__(self):
        for name in ("quantity", "justification"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ValueError(f"{name} must be a non-empty string; got {getattr(self, name)!r}")
        for name in ("time", "theory", "mean"):
            object.__setattr__(self, name, float(getattr(self, name)))
        object.__setattr__(self, "se", check_nonneg("se", self.se))
        object.__setattr__(self, "n_seeds", check_int("n_seeds", self.n_seeds, min_value=2))
        object.__setattr__(self, "tol_se", check_positive("tol_se", self.tol_se))
        object.__setattr__(self, "atol", check_nonneg("atol", self.atol))
        if self.d is not None:
            object.__setattr__(self, "d", check_int("d", self.d, min_value=1))

    @property
    def gap_se(self) -> float:
        """``max(|mean - theory| - atol, 0) / se`` (0 if within ``atol``; inf if ``se = 0`` and outside; nan if a
        value is nan)."""
        excess = max(abs(self.mean - self.theory) - self.atol, 0.0)
        if math.isnan(self.mean) or math.isnan(self.theory):
            return math.nan
        if excess == 0.0:
            return 0.0
        return excess / self.se if self.se > 0 else math.inf

    @property
    def within(self) -> bool:
        """Whether ``gap_se <= tol_se`` (False for nan)."""
        return bool(self.gap_se <= self.tol_se)


def gap_rows(quantity: str, times, theory, samples, *, tol_se: float, justification: str,
             atol: float = 0.0, d: int | None = None) -> list[GapRow]:
    """Build one :class:`GapRow` per time from arrays.

    Parameters
    ----------
    quantity : str
    times : array_like, (n_times,)
    theory : array_like, (n_times,)
        Theory's value at each time.
    samples : array_like, (n_seeds, n_times)
        Empirical values, seeds first; mean and SE (ddof=1) are taken over axis 0.
    tol_se, justification, atol, d
        As in :class:`GapRow`, shared by all rows.
    """
    times = np.atleast_1d(np.asarray(times, dtype=np.float64))
    theory = np.atleast_1d(np.asarray(theory, dtype=np.float64))
    samples = np.asarray(samples, dtype=np.float64)
    if samples.ndim == 1:
        samples = samples[:, None]
    if samples.ndim != 2 or not (times.shape == theory.shape == samples.shape[1:]):
        raise ValueError(f"samples must have shape (n_seeds, n_times) matching times {times.shape} and theory "
                         f"{theory.shape}; got {samples.shape}")
    n = samples.shape[0]
    if n < 2:
        raise ValueError(f"samples must hold at least 2 seeds (axis 0) for a standard error; got {n}")
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / np.sqrt(n)
    return [GapRow(quantity=quantity, time=t, theory=v, mean=m, se=s, n_seeds=n, tol_se=tol_se, atol=atol,
                   justification=justification, d=d) for t, v, m, s in zip(times, theory, mean, se)]


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One theorem check: what was tested, whether it passed, and the numbers.

    Attributes
    ----------
    name : str
        E.g. ``"Theorem 5: kappa -> 1 (single_location.md §7.3)"``.
    passed : bool
    measured, expected : float or str
        The measured number and the prediction (numbers are shown with 6 significant digits).
    tolerance : str
        The tolerance and where it comes from.
    """

    name: str
    passed: bool
    measured: float | str
    expected: float | str
    tolerance: str

    def __post_init__(self):
        for name in ("name", "tolerance"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ValueError(f"{name} must be a non-empty string; got {getattr(self, name)!r}")
        object.__setattr__(self, "passed", bool(self.passed))
        for name in ("measured", "expected"):
            value = getattr(self, name)
            if not isinstance(value, str):
                object.__setattr__(self, name, float(value))


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
        if not isinstance(self.params, Mapping) or set(self.params) != set(PRESETS):
            got = sorted(self.params) if isinstance(self.params, Mapping) else type(self.params).__name__
            raise ValueError(f"params must map every preset {sorted(PRESETS)} to the figure's parameters; got {got}")
        for preset in PRESETS:  # validates JSON-ability now, not at the first build
            RunConfig(figure=self.name, preset=preset, params=self.params[preset], code="")
        for attr in ("data", "plot"):
            if not callable(getattr(self, attr)):
                raise ValueError(f"{attr} must be callable; got {getattr(self, attr)!r}")
        for attr in ("gaps", "checks"):
            if getattr(self, attr) is not None and not callable(getattr(self, attr)):
                raise ValueError(f"{attr} must be callable or None; got {getattr(self, attr)!r}")

    @property
    def full_caption(self) -> str:
        """The caption, followed by the unrecoverable parameters and the spec defaults used for them."""
        if not self.unrecoverable:
            return self.caption
        return (f"{self.caption.rstrip()} Not recoverable from the paper; the spec's documented default is used for: "
                f"{'; '.join(self.unrecoverable)}.")


@dataclass(frozen=True)
class ModuleStatus:
    """Import status of ``figures.<model>``: ``loaded``, ``missing`` (not written yet), ``error`` or ``direct``
    (a registry without a package: figures registered by hand, e.g. in tests)."""

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
    """

    def __init__(self, models: Sequence[str] = MODELS, package: str | None = "figures"):
        self.models = tuple(models)
        self.package = package
        self._figures: dict[str, FigureSpec] = {}
        self._status: dict[str, ModuleStatus] = {}

    def register(self, *, name: str, model: str, paper: str, spec: str, caption: str,
                 params: Mapping[str, Mapping[str, Any]], plot: Callable, unrecoverable: Sequence[str] = (),
                 gaps: Callable | None = None, checks: Callable | None = None) -> Callable:
        """Decorator registering ``data`` (the decorated function) as figure ``name``; returns ``data`` unchanged.

        See the module docstring for the meaning of each argument and a worked example.
        """
        if model not in self.models:
            raise ValueError(f"model must be one of {', '.join(self.models)}; got {model!r}")

        def decorator(data: Callable) -> Callable:
            fig = FigureSpec(name=name, model=model, paper=paper, spec=spec, caption=caption,
                             unrecoverable=unrecoverable, params=params, data=data, plot=plot, gaps=gaps,
                             checks=checks)
            old = self._figures.get(name)
            if old is not None and (old.data.__module__, old.data.__qualname__) != (data.__module__,
                                                                                   data.__qualname__):
                raise ValueError(f"figure {name!r} is already registered by {old.data.__module__}."
                                 f"{old.data.__qualname__}")
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
            module = f"{self.package}.{model}"
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name != module:
                    self._status[model] = ModuleStatus(model, "error", f"{type(exc).__name__}: {exc}")
                    logger.error("importing %s failed: %s", module, exc)
                else:
                    self._status[model] = ModuleStatus(model, "missing", f"{module.replace('.', '/')}.py not "
                                                                         "written yet")
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

    def _unknown_message(self, name: str) -> str:
        valid = self.names()
        if not valid:
            return (f"unknown figure {name!r}: no figures are registered yet (models: {', '.join(self.models)}; "
                    "run `python -m figures list`)")
        with_figs = [m for m in self.models if self.names(m)]
        return (f"unknown figure {name!r}; valid figures: {', '.join(valid)} "
                f"(or a model name for all its figures: {', '.join(with_figs)})")


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


def run_config(spec: FigureSpec, preset: str, *, seed: int = DEFAULT_SEED, device: str = "cpu",
               progress: bool = False) -> RunConfig:
    """The :class:`RunConfig` of ``spec`` at ``preset`` (``device`` must already be resolved: cpu or cuda)."""
    check_preset(preset)
    return RunConfig(figure=spec.name, preset=preset, seed=seed, device=device, params=spec.params[preset],
                     progress=progress)


def build(name: str, preset: str = DEFAULT_PRESET, *, seed: int = DEFAULT_SEED, device: str = "auto",
          cache_dir: str | Path | None = cache.DEFAULT_CACHE_DIR, recompute: bool = False, progress: bool = False,
          registry: Registry = REGISTRY) -> BuildResult:
    """Return the data of figure ``name`` at ``preset``: from the cache if a verified entry exists, else computed
    (and stored).

    Parameters
    ----------
    name : str
        A registered figure name (unknown -> ``ValueError`` listing the valid ones).
    preset : {"tiny", "quick", "paper"}
    seed : int >= 0
    device : {"auto", "cpu", "cuda"}
        Resolved with :func:`figures.presets.resolve_device`.
    cache_dir : path or None
        Cache root (``results/``); None disables caching.
    recompute : bool
        Ignore an existing entry, compute and overwrite it.
    progress : bool
        Passed to ``data`` through ``cfg.progress``.

    Notes
    -----
    With caching on, the returned Dataset is always the one read back from the verified cache file, so a fresh
    build and a cache hit give identical objects. Attributes added: ``figure``, ``model``, ``paper``,
    ``spec_section``, ``preset``, ``seed``, ``device``, ``code``, ``config_json``, ``config_key``, ``git_rev``,
    ``versions_json``; nested attribute values become JSON text (netCDF-safe).
    """
    spec = registry.get(name)
    check_preset(preset)
    cfg = run_config(spec, preset, seed=seed, device=resolve_device(device), progress=progress)
    status = "recomputed" if recompute else "computed"
    if cache_dir is not None and not recompute:
        lookup = cache.load(cache_dir, cfg)
        if lookup.status == "hit":
            return BuildResult(spec=spec, config=cfg, dataset=lookup.dataset, status="cached",
                               runtime_s=lookup.runtime_s, cache_path=cache.entry_paths(cache_dir, cfg)[0])
        if lookup.status == "corrupt":
            status = "repaired"
    t0 = time.perf_counter()
    dataset = spec.data(cfg)
    runtime = time.perf_counter() - t0
    if not isinstance(dataset, xr.Dataset):
        raise TypeError(f"data function of figure {name!r} must return an xarray.Dataset; got "
                        f"{type(dataset).__name__}")
    dataset = _with_provenance(dataset, spec, cfg)
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


def _with_provenance(dataset: xr.Dataset, spec: FigureSpec, cfg: RunConfig) -> xr.Dataset:
    """A copy of ``dataset`` with netCDF-safe attributes and the build's provenance (STYLE.md §2.9)."""
    dataset = dataset.copy(deep=False)  # data shared; the attribute dicts below are replaced, not mutated
    for var in dataset.variables.values():
        var.attrs = sanitize_attrs(dict(var.attrs))
    attrs = dict(dataset.attrs)
    attrs.update(figure=spec.name, model=spec.model, paper=spec.paper, spec_section=spec.spec, preset=cfg.preset,
                 seed=cfg.seed, device=cfg.device, code=cfg.code, config_json=cfg.to_json(),
                 config_key=cache.cache_key(cfg), git_rev=git_revision(), versions_json=package_versions())
    dataset.attrs = sanitize_attrs(attrs)
    return dataset


def render(spec: FigureSpec, dataset: xr.Dataset) -> Figure:
    """Call ``spec.plot(dataset)`` inside the shared style and check that it returned a ``Figure``."""
    with _style.style_context():
        fig = spec.plot(dataset)
    if not isinstance(fig, Figure):
        raise TypeError(f"plot function of figure {spec.name!r} must return a matplotlib Figure; got "
                        f"{type(fig).__name__}")
    return fig


def make(names: Sequence[str], preset: str = DEFAULT_PRESET, *, seed: int = DEFAULT_SEED, device: str = "auto",
         cache_dir: str | Path | None = cache.DEFAULT_CACHE_DIR, out_dir: str | Path = DEFAULT_OUT_DIR,
         formats: Sequence[str] = ("png", "pdf"), recompute: bool = False, progress: bool = False,
         registry: Registry = REGISTRY) -> list[BuildResult]:
    """Build figures (names or model names) and write ``<out_dir>/<name>.<fmt>``; return one result per figure.

    All names are validated before anything is computed. See :func:`build` for the other arguments.
    """
    figures = registry.resolve(names)
    check_preset(preset)
    for fmt in formats:
        if fmt not in _style.SAVE_METADATA:
            raise ValueError(f"formats must be among {', '.join(_style.SAVE_METADATA)}; got {fmt!r}")
    device = resolve_device(device)
    results = []
    for name in tqdm(figures, desc=f"figures ({preset})", unit="fig", disable=None if progress else True):
        result = build(name, preset, seed=seed, device=device, cache_dir=cache_dir, recompute=recompute,
                       progress=progress, registry=registry)
        fig = render(result.spec, result.dataset)
        paths = _style.save_figure(fig, Path(out_dir) / name, formats)
        results.append(replace(result, outputs=tuple(paths)))
    return results
