"""Tests of the figure/report framework (issue 9): registry, cache, style, CLI and HTML report.

The framework is exercised on a toy figure defined here (a noisy exponential decay: closed form exp(-t), an Euler
"reduced" map and per-seed "learned" curves = closed form + Gaussian noise), in private :class:`Registry` objects so
the package's registry stays untouched. Every figure registered by the real ``figures/<model>.py`` modules is then
built at the ``tiny`` preset (data twice: identical; plot: a non-empty PNG that decodes), and the report is built
from them.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import matplotlib.colors
import matplotlib.image
import numpy as np
import pytest
import xarray as xr

from figures import _style, cache, registry
from figures.__main__ import main
from figures.presets import RunConfig, resolve_device
from figures.registry import CheckResult, Registry, compare_rows
from figures.report import build_report
from tests._stats import assert_mc_close, assert_mc_rejects

# A blank (one-colour) image has pixel variance 0; a white page with a few dark lines (values in [0, 1]) covering
# ~1% of the pixels already has variance ~1e-2, so 1e-4 separates "blank" from "drew something" with margin.
NOT_BLANK = 1e-4

# ----------------------------------------------------------------------------------------------------------------
# The toy figure
# ----------------------------------------------------------------------------------------------------------------
TOY_PARAMS = {"tiny": {"n_times": 21, "n_seeds": 4, "sigma": 0.05},
              "quick": {"n_times": 101, "n_seeds": 10, "sigma": 0.05},
              "paper": {"n_times": 401, "n_seeds": 30, "sigma": 0.05}}


def toy_data(cfg: RunConfig) -> xr.Dataset:
    p = cfg.params
    rng = np.random.default_rng(cfg.seed)
    t = np.linspace(0.0, 2.0, p["n_times"])
    theory = np.exp(-t)
    reduced = (1.0 - (t[1] - t[0])) ** np.arange(t.size)  # Euler map of x' = -x
    learned = theory + p["sigma"] * rng.standard_normal((p["n_seeds"], t.size))
    return xr.Dataset({"x_theory": ("time", theory), "x_reduced": ("time", reduced),
                       "x_learned": (("seed", "time"), learned)}, coords={"time": t},
                      attrs={"nested": {"a": [1, 2]}})  # a nested attribute the framework must make netCDF-safe


def toy_plot(ds: xr.Dataset):
    fig, ax = _style.new_figure()
    _style.plot_theory(ax, ds.time, ds.x_theory)
    _style.plot_reduced(ax, ds.time, ds.x_reduced)
    mean, lo, hi = _style.band_over_seeds(ds.x_learned.values)
    _style.plot_empirical_band(ax, ds.time.values, mean, lo, hi)
    ax.set(xlabel="t", ylabel="x")
    ax.legend()
    return fig


def toy_gaps(ds: xr.Dataset):
    idx = [0, ds.sizes["time"] // 2, ds.sizes["time"] - 1]
    return compare_rows("x", ds.time.values[idx], ds.x_theory.values[idx], ds.x_learned.values[:, idx], d=7)


def toy_checks(ds: xr.Dataset):
    final = float(ds.x_theory[-1])
    return [CheckResult(name="x(2) = exp(-2)", passed=abs(final - np.exp(-2)) < 1e-12, measured=final,
                        expected=float(np.exp(-2)), tolerance="1e-12 (float64 round-off)")]


def broken_data(cfg: RunConfig):
    raise FloatingPointError("toy divergence")


def make_registry(*, with_broken: bool = False) -> Registry:
    reg = Registry(models=("toy", "empty"), package=None)
    reg.register(name="toy.decay", model="toy", paper="Toy (2026), Fig. 1", spec="toy.md §1",
                 caption="Exponential decay.", unrecoverable=("sigma = 0.05 (toy default)",), params=TOY_PARAMS,
                 plot=toy_plot, gaps=toy_gaps, checks=toy_checks)(toy_data)
    if with_broken:
        reg.register(name="toy.broken", model="toy", paper="Toy (2026), Fig. 2", spec="toy.md §2",
                     caption="Always fails.", params=TOY_PARAMS, plot=toy_plot)(broken_data)
    return reg


@pytest.fixture
def reg():
    return make_registry()


# ----------------------------------------------------------------------------------------------------------------
# Registration and validation
# ----------------------------------------------------------------------------------------------------------------
def test_register_validates_its_arguments(reg):
    good = dict(model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS, plot=toy_plot)
    with pytest.raises(ValueError, match="model must be one of toy, empty"):
        reg.register(name="other.x", **{**good, "model": "other"})(toy_data)
    with pytest.raises(ValueError, match="must start with the model name"):
        reg.register(name="empty.x", **good)(toy_data)
    with pytest.raises(ValueError, match="name must look like"):
        reg.register(name="toy/x", **good)(toy_data)
    with pytest.raises(ValueError, match="params must map every preset"):
        reg.register(name="toy.x", **{**good, "params": {"quick": {}}})(toy_data)
    with pytest.raises(ValueError, match="JSON-serialisable"):
        reg.register(name="toy.x", **{**good, "params": {k: {"a": float("nan")} for k in TOY_PARAMS}})(toy_data)
    with pytest.raises(ValueError, match="unrecoverable must be a tuple"):
        reg.register(name="toy.x", **good, unrecoverable="gamma")(toy_data)
    with pytest.raises(ValueError, match="caption must be a non-empty string"):
        reg.register(name="toy.x", **{**good, "caption": " "})(toy_data)
    with pytest.raises(ValueError, match="already registered"):
        reg.register(name="toy.decay", **good)(broken_data)
    assert reg.names() == ["toy.decay"]


def test_unknown_figure_lists_the_valid_ones(reg):
    with pytest.raises(ValueError, match=r"unknown figure 'nope'; valid figures: toy\.decay"):
        reg.get("nope")
    assert reg.resolve(["toy"]) == ["toy.decay"]  # a model name expands to its figures
    with pytest.raises(ValueError, match="no figures are registered yet"):
        Registry(models=("toy",), package=None).resolve(["toy.decay"])


def test_caption_names_the_unrecoverable_parameters(reg):
    spec = reg.get("toy.decay")
    assert spec.full_caption.startswith("Exponential decay.")
    assert "not recoverable from the paper" in spec.full_caption.lower()
    assert "sigma = 0.05 (toy default)" in spec.full_caption


def test_bad_preset_seed_and_device_fail_with_the_valid_choices(reg, tmp_path):
    with pytest.raises(ValueError, match="preset must be one of 'tiny', 'quick', 'paper'"):
        registry.build("toy.decay", "huge", device="cpu", cache_dir=tmp_path, registry=reg)
    with pytest.raises(ValueError, match="device must be one of 'auto', 'cpu', 'cuda'"):
        registry.build("toy.decay", "tiny", device="gpu", cache_dir=tmp_path, registry=reg)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        registry.build("toy.decay", "tiny", seed=-1, device="cpu", cache_dir=tmp_path, registry=reg)
    assert resolve_device("cpu") == "cpu"


def test_cuda_request_without_cuda_fails():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")
    assert resolve_device("auto") == "cpu"


# ----------------------------------------------------------------------------------------------------------------
# Cache
# ----------------------------------------------------------------------------------------------------------------
def test_build_caches_and_same_seed_gives_identical_data(reg, tmp_path):
    first = registry.build("toy.decay", "tiny", seed=3, device="cpu", cache_dir=tmp_path / "a", registry=reg)
    again = registry.build("toy.decay", "tiny", seed=3, device="cpu", cache_dir=tmp_path / "a", registry=reg)
    fresh = registry.build("toy.decay", "tiny", seed=3, device="cpu", cache_dir=tmp_path / "b", registry=reg)
    forced = registry.build("toy.decay", "tiny", seed=3, device="cpu", cache_dir=tmp_path / "a", recompute=True,
                            registry=reg)
    assert (first.status, again.status, fresh.status, forced.status) == ("computed", "cached", "computed",
                                                                         "recomputed")
    xr.testing.assert_identical(first.dataset, again.dataset)
    xr.testing.assert_identical(first.dataset, fresh.dataset)
    assert again.runtime_s == pytest.approx(first.runtime_s)  # the cached entry reports its original runtime
    # Provenance attributes; the nested attribute became JSON text.
    attrs = first.dataset.attrs
    assert json.loads(attrs["config_json"]) == first.config.to_dict()
    assert attrs["seed"] == 3 and attrs["device"] == "cpu" and attrs["preset"] == "tiny"
    assert json.loads(attrs["nested"]) == {"a": [1, 2]} and "numpy" in json.loads(attrs["versions_json"])
    # File layout: results/<figure>/<sha256(config)[:12]>.nc plus its sidecar.
    key = cache.cache_key(first.config)
    assert first.cache_path == tmp_path / "a" / "toy.decay" / f"{key}.nc"
    assert re.fullmatch(r"[0-9a-f]{12}", key)
    other = registry.build("toy.decay", "tiny", seed=4, device="cpu", cache_dir=tmp_path / "a", registry=reg)
    assert other.status == "computed" and not np.array_equal(other.dataset.x_learned, first.dataset.x_learned)


def test_cache_key_covers_the_whole_configuration():
    base = dict(figure="toy.decay", preset="tiny", seed=0, device="cpu", params={"n": 1}, code="0.1.0+abc")
    key = cache.cache_key(RunConfig(**base))
    assert cache.cache_key(RunConfig(**base, progress=True)) == key  # progress bars do not change the data
    for change in ({"preset": "quick"}, {"seed": 1}, {"device": "cuda"}, {"params": {"n": 2}},
                   {"code": "0.1.0+abd"}, {"figure": "toy.other"}):
        assert cache.cache_key(RunConfig(**{**base, **change})) != key, change


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "drop_sidecar", "sidecar_garbage",
                                    "sidecar_other_config"])
def test_corrupted_cache_is_detected_and_recomputed(reg, tmp_path, caplog, damage):
    first = registry.build("toy.decay", "tiny", device="cpu", cache_dir=tmp_path, registry=reg)
    data_path, sidecar_path = cache.entry_paths(tmp_path, first.config)
    if damage == "flip_byte":
        raw = bytearray(data_path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data_path.write_bytes(bytes(raw))
    elif damage == "truncate":
        data_path.write_bytes(data_path.read_bytes()[:100])
    elif damage == "drop_sidecar":
        sidecar_path.unlink()
    elif damage == "sidecar_garbage":
        sidecar_path.write_text("{not json")
    else:
        side = json.loads(sidecar_path.read_text())
        side["config"]["seed"] = 99
        sidecar_path.write_text(json.dumps(side))
    with caplog.at_level(logging.WARNING, logger="figures.cache"):
        assert cache.load(tmp_path, first.config).status == "corrupt"
        repaired = registry.build("toy.decay", "tiny", device="cpu", cache_dir=tmp_path, registry=reg)
    assert repaired.status == "repaired"
    assert "corrupt" in caplog.text
    xr.testing.assert_identical(repaired.dataset, first.dataset)
    assert cache.load(tmp_path, first.config).status == "hit"  # the entry has been rewritten


def test_data_and_plot_must_return_the_right_types(tmp_path):
    reg = Registry(models=("toy",), package=None)
    reg.register(name="toy.bad", model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS,
                 plot=lambda ds: "not a figure")(lambda cfg: {"x": 1})
    with pytest.raises(TypeError, match="must return an xarray.Dataset"):
        registry.build("toy.bad", "tiny", device="cpu", cache_dir=tmp_path, registry=reg)
    with pytest.raises(TypeError, match="must return a matplotlib Figure"):
        registry.render(reg.get("toy.bad"), xr.Dataset())


# ----------------------------------------------------------------------------------------------------------------
# Style and deterministic output
# ----------------------------------------------------------------------------------------------------------------
def test_make_writes_deterministic_png_and_pdf(reg, tmp_path):
    (result,) = registry.make(["toy.decay"], "tiny", device="cpu", cache_dir=tmp_path / "c", out_dir=tmp_path / "o",
                              registry=reg)
    png, pdf = result.outputs
    assert png.name == "toy.decay.png" and pdf.name == "toy.decay.pdf"
    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100 and np.var(image) > NOT_BLANK
    assert pdf.read_bytes().startswith(b"%PDF") and b"CreationDate" not in pdf.read_bytes()
    first = (png.read_bytes(), pdf.read_bytes())
    registry.make(["toy.decay"], "tiny", device="cpu", cache_dir=tmp_path / "c", out_dir=tmp_path / "o",
                  recompute=True, registry=reg)
    assert (png.read_bytes(), pdf.read_bytes()) == first  # same data -> same bytes (no time stamps)


def test_source_styles_and_colour_blind_safe_cycle(reg):
    ds = toy_data(RunConfig(figure="toy.decay", preset="tiny", params=TOY_PARAMS["tiny"], code=""))
    fig = registry.render(reg.get("toy.decay"), ds)
    ax = fig.axes[0]
    theory, reduced, learned = ax.get_lines()
    assert (theory.get_linestyle(), reduced.get_linestyle(), learned.get_linestyle()) == ("-", "--", ":")
    assert len(ax.collections) == 1  # the band over seeds
    tol = {c.lower() for c in _style.TOL_BRIGHT.values()}
    assert {matplotlib.colors.to_hex(line.get_color()) for line in ax.get_lines()} <= tol


def test_band_over_seeds_matches_numpy_and_covers_at_its_level():
    rng = np.random.default_rng(11)
    # Independent computation: the band edges from numpy / the 1.96 normal quantile written out.
    x = rng.normal(size=(50, 3))
    mean, lo, hi = _style.band_over_seeds(x, method="se", level=0.95)
    se = x.std(axis=0, ddof=1) / np.sqrt(50)
    np.testing.assert_allclose(hi - mean, 1.959963984540054 * se, rtol=1e-12)  # float64 round-off
    _, plo, phi = _style.band_over_seeds(x, method="percentile", level=0.9)
    np.testing.assert_allclose([plo, phi], np.percentile(x, [5, 95], axis=0), rtol=1e-12)  # same arithmetic
    # Monte Carlo coverage: 4000 independent experiments of 200 Gaussian seeds each; the 95% band must contain the
    # true mean (0) with frequency 0.95 (t-vs-normal quantile difference at 200 seeds: < 0.002, well inside 5 SE).
    n_rep, n_seeds = 4000, 200
    samples = rng.normal(size=(n_seeds, n_rep))
    _, lo, hi = _style.band_over_seeds(samples, method="se", level=0.95)
    covered = (lo <= 0) & (0 <= hi)
    cov, cov_se = covered.mean(), np.sqrt(0.95 * 0.05 / n_rep)  # binomial SE of a frequency
    assert_mc_close(cov, cov_se, 0.95, what="95% band coverage")
    assert_mc_rejects(cov, cov_se, 0.68, what="coverage of a 1-SE band (negative control)")
    with pytest.raises(ValueError, match="at least 2 seeds"):
        _style.band_over_seeds(np.ones((1, 3)))
    with pytest.raises(ValueError, match="method must be one of"):
        _style.band_over_seeds(x, method="std")


# ----------------------------------------------------------------------------------------------------------------
# Discovery and CLI
# ----------------------------------------------------------------------------------------------------------------
def test_discover_reports_missing_and_broken_modules(tmp_path, monkeypatch):
    pkg = tmp_path / "fakefigs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "broken.py").write_text("raise RuntimeError('boom')\n")
    (pkg / "needsdep.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    status = Registry(models=("absent", "broken", "needsdep"), package="fakefigs").discover()
    assert status["absent"].state == "missing" and "not written yet" in status["absent"].detail
    assert status["broken"].state == "error" and "boom" in status["broken"].detail
    assert status["needsdep"].state == "error" and "no_such_dependency_xyz" in status["needsdep"].detail


def test_cli_list_make_and_bad_input(reg, tmp_path, capsys):
    assert main(["list"], reg=reg) == 0
    out = capsys.readouterr().out
    assert "toy.decay" in out and "unrecoverable" in out and "empty  (0 figures)" in out
    args = ["--device", "cpu", "--cache-dir", str(tmp_path / "r"), "--no-progress"]
    progress_on = args[:-1]  # progress bars requested (tqdm silences them off a terminal)
    assert main(["make", "toy", "--preset", "tiny", "--out", str(tmp_path / "o"), *progress_on], reg=reg) == 0
    assert "1 computed" in capsys.readouterr().out
    assert main(["make", "toy.decay", "--preset", "tiny", "--out", str(tmp_path / "o"), *args], reg=reg) == 0
    assert "1 cached" in capsys.readouterr().out
    assert main(["make", "toy", "--recompute", "--preset", "tiny", "--out", str(tmp_path / "o"), *args], reg=reg) == 0
    assert "1 recomputed" in capsys.readouterr().out
    assert (tmp_path / "o" / "toy.decay.png").stat().st_size > 0
    assert main(["make", "nope", *args], reg=reg) == 2
    assert "valid figures: toy.decay" in capsys.readouterr().err
    assert main(["make", "toy", "--preset", "huge", *args], reg=reg) == 2
    assert "'tiny', 'quick', 'paper'" in capsys.readouterr().err
    assert main(["report", "--device", "tpu"], reg=reg) == 2
    assert "'auto', 'cpu', 'cuda'" in capsys.readouterr().err
    assert main(["make", "toy", "--formats", "gif", *args], reg=reg) == 2


# ----------------------------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------------------------
class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.ids, self.tables, self.order = [], set(), 0, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.imgs.append(attrs["src"])
        if "id" in attrs:
            self.ids.add(attrs["id"])
            self.order.append(attrs["id"])
        if tag == "table":
            self.tables += 1
            self.order.append(f"table:{attrs.get('class', '')}")


def check_report_html(path, models):
    """Parse the report: well-formed, every embedded image decodes, every model has a section, summary first."""
    text = path.read_text(encoding="utf-8")
    ET.fromstring(text.split("\n", 1)[1])  # well-formed markup (XHTML-compatible) after the DOCTYPE line
    parser = _Collect()
    parser.feed(text)
    assert "http://" not in text and "https://" not in text and "<script" not in text  # self-contained
    for model in models:
        assert f"model-{model}" in parser.ids, model
    assert parser.order[0] == "table:summary"  # the summary table opens the report
    for src in parser.imgs:
        assert src.startswith("data:image/png;base64,")
        image = matplotlib.image.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png")
        assert image.ndim == 3 and np.var(image) > NOT_BLANK
    return text, parser


def test_report_with_figures_gaps_checks_and_a_failure(tmp_path, caplog):
    reg = make_registry(with_broken=True)
    with caplog.at_level(logging.ERROR):
        result = build_report("tiny", device="cpu", out_dir=tmp_path / "rep", cache_dir=tmp_path / "res",
                              registry=reg)
    assert result.n_failed == 1 and "toy divergence" in caplog.text
    text, parser = check_report_html(result.path, reg.models)
    assert len(parser.imgs) == 1 and {"fig-toy.decay", "fig-toy.broken"} <= parser.ids
    assert "FloatingPointError: toy divergence" in text and "sigma = 0.05 (toy default)" in text
    assert "x(2) = exp(-2)" in text and '"seed": 0' in html.unescape(text)
    toy, empty = result.sections
    assert (toy.verdict, empty.verdict) == ("FAILED", "no figures yet")
    assert (toy.n_gaps, toy.n_checks_passed) == (3, 1) and all(r.d == 7 for r in toy.figures[0].gaps)
    # A second build reads the cache, and the CLI exits non-zero because of the failing figure.
    assert main(["report", "--preset", "tiny", "--device", "cpu", "--no-progress", "--out", str(tmp_path / "rep"),
                 "--cache-dir", str(tmp_path / "res")], reg=reg) == 1


def test_report_without_any_figures_is_valid(tmp_path):
    reg = Registry(models=registry.MODELS, package=None)
    result = build_report("quick", device="cpu", out_dir=tmp_path, cache_dir=None, registry=reg)
    text, parser = check_report_html(result.path, registry.MODELS)
    assert result.n_failed == 0 and not parser.imgs and text.count("No figures yet") == len(registry.MODELS)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(tmp_path):
    result = build_report("tiny", device="cpu", out_dir=tmp_path / "rep", cache_dir=tmp_path / "res",
                          registry=make_registry())
    shot = tmp_path / "shot.png"
    cmd = [shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2000", f"--screenshot={shot}",
           result.path.resolve().as_uri()]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    image = matplotlib.image.imread(shot)
    assert image.shape[0] > 100 and np.var(image[..., :3]) > NOT_BLANK


# ----------------------------------------------------------------------------------------------------------------
# Every figure registered by the real figure modules builds at the tiny preset
# ----------------------------------------------------------------------------------------------------------------
_MODULES = registry.discover()
_REAL = registry.REGISTRY.names()


def test_figure_modules_import():
    broken = {m: s.detail for m, s in _MODULES.items() if s.state == "error"}
    assert not broken, f"figure modules failed to import: {broken}"


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("results")


@pytest.mark.parametrize("name", _REAL)
def test_registered_figure_builds_at_tiny_size(name, tiny_cache, tmp_path):
    first = registry.build(name, "tiny", device="cpu", cache_dir=tiny_cache)
    second = registry.build(name, "tiny", device="cpu", cache_dir=tmp_path / "again")
    assert first.status == second.status == "computed"
    xr.testing.assert_identical(first.dataset, second.dataset)  # same seed -> identical data
    stem = tmp_path / name
    (png,) = _style.save_figure(registry.render(first.spec, first.dataset), stem, ("png",))
    assert png.stat().st_size > 0
    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and np.var(image) > NOT_BLANK


def test_report_of_the_registered_figures(tiny_cache, tmp_path):
    result = build_report("tiny", device="cpu", out_dir=tmp_path, cache_dir=tiny_cache)
    check_report_html(result.path, registry.MODELS)
    assert result.n_failed == 0, [f.error for s in result.sections for f in s.figures if f.failed]
