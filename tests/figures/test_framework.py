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
from scipy import stats

from figures import _style, cache, registry
from figures.__main__ import main
from figures.presets import RunConfig, resolve_device
from figures.registry import Registry
from figures.report import build_report
from tests._figures import (
    TOY_PARAMS,
    assert_readable_layout,
    broken_data,
    synthetic_registry,
    toy_data,
    toy_plot,
)
from dynamics.testing import assert_mc_close, assert_mc_rejects

# A blank (one-colour) image has pixel variance 0; a white page with a few dark lines (values in [0, 1]) covering
# ~1% of the pixels already has variance ~1e-2, so 1e-4 separates "blank" from "drew something" with margin.
NOT_BLANK = 1e-4


# ----------------------------------------------------------------------------------------------------------------
# The toy figures (tests/_figures.py)
# ----------------------------------------------------------------------------------------------------------------
def make_registry(*, with_broken: bool = False, with_verdicts: bool = False) -> Registry:
    return synthetic_registry(with_broken=with_broken, with_verdicts=with_verdicts)


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
    with pytest.raises(ValueError, match="params must map some of the presets"):
        reg.register(name="toy.x", **{**good, "params": {"huge": {}}})(toy_data)
    with pytest.raises(ValueError, match="sigma must be a finite number >= 0; got nan"):
        reg.register(name="toy.x", **{**good, "params": {k: {"sigma": float("nan")} for k in TOY_PARAMS}})(toy_data)
    with pytest.raises(ValueError, match="'a' of figure 'toy.x' has no meaning declared"):
        reg.register(name="toy.x", **{**good, "params": {k: {"a": 1.0} for k in TOY_PARAMS}})(toy_data)
    with pytest.raises(ValueError, match="unrecoverable must be a tuple"):
        reg.register(name="toy.x", **good, unrecoverable="gamma")(toy_data)
    with pytest.raises(ValueError, match="caption must be a non-empty string"):
        reg.register(name="toy.x", **{**good, "caption": " "})(toy_data)
    with pytest.raises(ValueError, match="already registered"):
        reg.register(name="toy.decay", **good)(broken_data)
    assert reg.names() == ["toy.decay", "toy.heat"]


def test_unknown_figure_lists_the_valid_ones(reg):
    with pytest.raises(ValueError, match=r"unknown figure 'nope'; valid figures: toy\.decay"):
        reg.get("nope")
    assert reg.resolve(["toy"]) == ["toy.decay", "toy.heat"]  # a model name expands to its figures
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
    forced = registry.build(
        "toy.decay", "tiny", seed=3, device="cpu", cache_dir=tmp_path / "a", recompute=True, registry=reg
    )
    assert (first.status, again.status, fresh.status, forced.status) == ("computed", "cached", "computed", "recomputed")
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
    for change in (
        {"preset": "quick"},
        {"seed": 1},
        {"device": "cuda"},
        {"params": {"n": 2}},
        {"code": "0.1.0+abd"},
        {"figure": "toy.other"},
    ):
        assert cache.cache_key(RunConfig(**{**base, **change})) != key, change


@pytest.mark.parametrize(
    "damage",
    [
        "flip_byte",
        "truncate",
        "drop_sidecar",
        "sidecar_garbage",
        "sidecar_other_config",
        "sidecar_runtime_is_text",
        "sidecar_sha_is_number",
        "sidecar_is_a_list",
        "nc_is_a_directory",
        "sidecar_is_a_directory",
    ],
)
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
    elif damage.startswith("sidecar_") and damage != "sidecar_other_config" and damage != "sidecar_is_a_directory":
        # valid JSON, wrong field type (issue 18 item 8)
        side = json.loads(sidecar_path.read_text())
        side = {
            "sidecar_runtime_is_text": {**side, "runtime_s": "fast"},
            "sidecar_sha_is_number": {**side, "sha256": 12345},
            "sidecar_is_a_list": [side],
        }[damage]
        sidecar_path.write_text(json.dumps(side))
    elif damage == "nc_is_a_directory":
        data_path.unlink()
        (data_path / "inner").mkdir(parents=True)
    elif damage == "sidecar_is_a_directory":
        sidecar_path.unlink()
        sidecar_path.mkdir()
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
    reg.register(
        name="toy.bad", model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS, plot=lambda ds: "not a figure"
    )(lambda cfg: {"x": 1})
    with pytest.raises(TypeError, match="must return an xarray.Dataset"):
        registry.build("toy.bad", "tiny", device="cpu", cache_dir=tmp_path, registry=reg)
    with pytest.raises(TypeError, match="must return a matplotlib Figure"):
        registry.render(reg.get("toy.bad"), xr.Dataset())


# ----------------------------------------------------------------------------------------------------------------
# Style and deterministic output
# ----------------------------------------------------------------------------------------------------------------
def test_make_writes_deterministic_png_and_pdf(reg, tmp_path):
    (result,) = registry.make(
        ["toy.decay"], "tiny", device="cpu", cache_dir=tmp_path / "c", out_dir=tmp_path / "o", registry=reg
    )
    png, pdf = result.outputs
    assert png.name == "toy.decay.png" and pdf.name == "toy.decay.pdf"
    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100 and np.var(image) > NOT_BLANK
    assert pdf.read_bytes().startswith(b"%PDF") and b"CreationDate" not in pdf.read_bytes()
    first = (png.read_bytes(), pdf.read_bytes())
    registry.make(
        ["toy.decay"],
        "tiny",
        device="cpu",
        cache_dir=tmp_path / "c",
        out_dir=tmp_path / "o",
        recompute=True,
        registry=reg,
    )
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
    out_dir = ["--out", str(tmp_path / "o")]
    assert main(["make", "toy.decay", "--preset", "tiny", *out_dir, *progress_on], reg=reg) == 0
    assert "1 computed" in capsys.readouterr().out
    assert main(["make", "toy.decay", "--preset", "tiny", *out_dir, *args], reg=reg) == 0
    assert "1 cached" in capsys.readouterr().out
    assert main(["make", "toy.decay", "--recompute", "--preset", "tiny", *out_dir, *args], reg=reg) == 0
    assert "1 recomputed" in capsys.readouterr().out
    assert (tmp_path / "o" / "toy.decay.png").stat().st_size > 0
    assert main(["make", "nope", *args], reg=reg) == 2
    assert "valid figures: toy.decay" in capsys.readouterr().err
    assert main(["make", "toy", "--preset", "huge", *args], reg=reg) == 2
    assert "'tiny', 'quick', 'paper'" in capsys.readouterr().err
    assert main(["report", "--device", "tpu"], reg=reg) == 2
    assert "'auto', 'cpu', 'cuda'" in capsys.readouterr().err
    assert main(["make", "toy", "--formats", "gif", *args], reg=reg) == 2


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.mark.parametrize(
    "case",
    [
        "seed",
        "out_is_file",
        "formats_empty",
        "jobs",
        "cache_is_file",
        "out_under_file",
        "unknown_option",
        "seed_not_int",
    ],
)
def test_cli_user_errors_exit_2_with_one_line_before_computing(tmp_path, capsys, case):
    """Every user error (issue 18 item 4): exit 2, one line on stderr, no traceback, and nothing computed (the data
    function of the registry's figures would raise if called)."""
    reg = Registry(models=("toy",), package=None)
    reg.register(name="toy.never", model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS, plot=toy_plot)(
        broken_data
    )
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    base = ["--preset", "tiny", "--device", "cpu", "--no-progress"]
    out, cache_dir = ["--out", str(tmp_path / "o")], ["--cache-dir", str(tmp_path / "c")]
    argv, expect = {
        "seed": (["report", *base, *out, *cache_dir, "--seed", "-1"], "--seed must be an integer >= 0"),
        "out_is_file": (["report", *base, "--out", str(a_file), *cache_dir], "is not a folder"),
        "formats_empty": (["make", "toy.never", *base, *out, *cache_dir, "--formats", ""], "at least one of"),
        "jobs": (["report", *base, *out, *cache_dir, "--jobs", "0"], "--jobs must be an integer >= 1"),
        "cache_is_file": (["report", *base, *out, "--cache-dir", str(a_file)], "--cache-dir"),
        "out_under_file": (
            ["make", "toy.never", *base, "--out", str(a_file / "sub"), *cache_dir],
            "is not a writable folder",
        ),
        "unknown_option": (["report", "--colour", "red"], "unrecognized arguments"),
        "seed_not_int": (["report", "--seed", "abc"], "invalid int value"),
    }[case]
    assert main(argv, reg=reg) == 2
    assert expect in _one_line_error(capsys)
    assert not (tmp_path / "o" / "report.html").exists() and not (tmp_path / "c" / "toy.never").exists()


def test_cli_report_exits_0_whatever_the_verdicts(tmp_path, capsys):
    reg = make_registry(with_verdicts=True)
    argv = [
        "report",
        "--preset",
        "tiny",
        "--device",
        "cpu",
        "--no-progress",
        "--out",
        str(tmp_path / "rep"),
        "--cache-dir",
        str(tmp_path / "res"),
        "--jobs",
        "1",
    ]
    assert main(argv, reg=reg) == 0
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["counts"]["rows"]["fails"] > 0  # verdicts are data: a failing row does not fail the build
    assert "summary: " in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------------------------
class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.ids, self.tables, self.order, self.links = [], set(), 0, [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.imgs.append(attrs["src"])
        if tag == "a":
            self.links.append(attrs["href"])
        if "id" in attrs:
            self.ids.add(attrs["id"])
            self.order.append(attrs["id"])
        if tag == "table":
            self.tables += 1
            self.order.append(f"table:{attrs.get('class', '')}")


def check_report_html(path, models):
    """Parse the report: well-formed, every embedded image decodes, every model has a section, summary first,
    every internal link has its target and every file link exists."""
    text = path.read_text(encoding="utf-8")
    ET.fromstring(text.split("\n", 1)[1])  # well-formed markup (XHTML-compatible) after the DOCTYPE line
    parser = _Collect()
    parser.feed(text)
    assert "http://" not in text and "https://" not in text and "<script" not in text  # self-contained
    for model in models:
        assert f"model-{model}" in parser.ids, model
    # The first screen: the counts per status (what happened), then the per-model summary table.
    assert parser.order[:2] == ["counts", "table:counts"]
    assert parser.order.index("table:counts") < parser.order.index("table:summary") < parser.order.index("contents")
    for src in parser.imgs:
        assert src.startswith("data:image/png;base64,")
        image = matplotlib.image.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png")
        assert image.ndim == 3 and np.var(image) > NOT_BLANK
    for href in parser.links:
        if href.startswith("#"):
            assert href[1:] in parser.ids, href
        else:
            assert (path.parent / href).is_file(), href
    return text, parser


def test_report_with_figures_gaps_checks_and_a_failure(tmp_path, caplog):
    reg = make_registry(with_broken=True)
    with caplog.at_level(logging.ERROR):
        result = build_report(
            "tiny", device="cpu", out_dir=tmp_path / "rep", cache_dir=tmp_path / "res", registry=reg, jobs=1
        )
    assert result.n_failed == 1 and "toy divergence" in caplog.text
    text, parser = check_report_html(result.path, reg.models)
    assert len(parser.imgs) == 2 and {"fig-toy.decay", "fig-toy.broken"} <= parser.ids
    assert "FloatingPointError: toy divergence" in text and "sigma = 0.05 (toy default)" in text
    assert "x(2) = exp(-2)" in text and "n_seeds" in html.unescape(text)
    toy, empty = result.sections
    assert (toy.verdict, empty.verdict) == ("error", "no figures yet")
    # allowance 0: equivalence cannot be shown, the rows of a right theory are "consistent" (undecided)
    assert toy.count("consistent", "gaps") == 3 and toy.count("holds", "checks") == 1
    assert all(r.d == 7 for r in toy.figures[0].gaps)
    # A second build reads the cache, and the CLI exits 1 because a figure raised (an error, not a verdict).
    assert (
        main(
            [
                "report",
                "--preset",
                "tiny",
                "--device",
                "cpu",
                "--no-progress",
                "--out",
                str(tmp_path / "rep"),
                "--cache-dir",
                str(tmp_path / "res"),
                "--jobs",
                "1",
            ],
            reg=reg,
        )
        == 1
    )


def test_report_statuses_first_screen_attention_list_toc_summary_and_data(tmp_path):
    reg = make_registry(with_verdicts=True)
    result = build_report(
        "tiny", device="cpu", out_dir=tmp_path / "rep", cache_dir=tmp_path / "res", registry=reg, jobs=1
    )
    text, parser = check_report_html(result.path, reg.models)
    figs = {f.spec.name: f for f in result.sections[0].figures}
    assert {n: f.badge for n, f in figs.items()} == {
        "toy.decay": "consistent",
        "toy.heat": "descriptive",
        "toy.biased": "fails",
        "toy.paper_only": "disagrees",
    }
    biased = [r.status for r in figs["toy.biased"].gaps]
    assert biased == ["fails", "fails", "explained", "explained", "consistent", "consistent", "disagrees", "disagrees"]
    # paper_only: what fails is deferred by the paper-only reason; what is undecided stays; own explanations stay.
    paper = figs["toy.paper_only"]
    assert [r.status for r in paper.gaps] == ["deferred"] * 2 + ["explained"] * 2 + ["consistent"] * 2 + [
        "disagrees"
    ] * 2
    assert "Decided at --preset paper only: the bias vanishes only at 401 times." in paper.spec.full_caption
    assert "disagrees (decided at --preset paper only)" in text
    # The first screen: counts per status, the many-rows rule, every disagrees and deferred row with its cause.
    counts = text[text.index('id="counts"') : text.index('class="summary"')]
    for status in registry.STATUSES:
        assert f"b-{status}" in counts
    assert "Holm" in counts and "expected number of false 'fails'" in html.unescape(counts)
    assert "Disagreements with the papers (results): 4" in counts and "Deferred to the paper's sizes: 2" in counts
    assert counts.count("the toy paper&#x27;s Euler map is off by 0.2 (toy)") == 2  # once per figure
    assert "decided at --preset paper only: the bias vanishes" in counts
    # Contents come before the attention list, which names every fails/disagrees/deferred/explained row with a
    # link; each explanation is written out once and referenced by number.
    assert parser.order.index("contents") < parser.order.index("attention") < parser.order.index("model-toy")
    attention = text[text.index('id="attention"') : text.index('id="model-toy"')]
    assert attention.count('href="#fig-toy.biased"') == 2 + 2 + 2
    assert attention.count('href="#fig-toy.paper_only"') == 2 + 2 + 2
    assert "Fails (unexplained): 2" in attention and "not failures): 4" in attention
    assert "Disagrees with the paper (results): 4" in attention and "Deferred to the paper's sizes: 2" in attention
    assert text.count("the Euler map is not this figure&#x27;s theory (toy)") == 1  # written once, referenced
    assert text.count('href="#why-1"') == 4 + 4  # 4 explained rows: in the attention list and in the gap tables
    # Contents: one badge per figure, linked.
    contents = text[text.index('id="contents"') : text.index('id="attention"')]
    assert contents.count('class="badge') == 4 and contents.count('href="#fig-') == 4
    # Gap table columns, the allowance source as a note, the test stated once per table.
    decay = text[text.index('id="fig-toy.decay"') : text.index('id="fig-toy.heat"')]
    for column in ("raw gap", "allowance [source]", "SE", "seeds", "CI of the gap", "MDD", "status", "family-wise"):
        assert column in decay
    assert decay.count("Test: holds iff") == 1
    biased_html = text[text.index('id="fig-toy.biased"') : text.index('id="fig-toy.paper_only"')]
    assert "toy bound 0.05 (test)" in biased_html and biased_html.count("toy bound 0.05 (test)") == 1
    assert "seeds decide it)" in biased_html  # a consistent row says how many seeds would decide it
    # Size vs the paper, from the registered params.
    assert "n_times 21 of 401; n_seeds 8 of 30" in decay
    # Data next to the HTML, linked; identical to the cached data.
    nc = tmp_path / "rep" / "data" / "toy.decay.nc"
    assert "data/toy.decay.nc" in parser.links and nc.is_file()
    xr.testing.assert_identical(
        xr.load_dataset(nc),
        registry.build("toy.decay", "tiny", device="cpu", cache_dir=tmp_path / "res", registry=reg).dataset,
    )
    # summary.json: every figure, every row and check with the required fields.
    summary = json.loads(result.summary_path.read_text())
    assert summary["preset"] == "tiny" and {f["figure"] for f in summary["figures"]} == set(figs)
    n_rows = sum(len(f.gaps) + len(f.checks) for f in figs.values())
    assert len(summary["rows"]) == n_rows
    for row in summary["rows"]:
        assert {
            "model",
            "figure",
            "name",
            "status",
            "gap",
            "allowance",
            "se",
            "n_seeds",
            "explanation",
            "mdd",
            "adjusted_status",
        } <= set(row)
        assert (row["explanation"] is not None) == (row["status"] in ("explained", "disagrees", "deferred"))
        if row["kind"] == "gap":  # at a true gap of MDD the row fails with probability 0.8 (scipy's noncentral t)
            q, ncp = stats.t.ppf(1 - row["level"] / 2, row["df"]), (row["mdd"] - row["allowance"]) / row["se"]
            assert stats.nct.sf(q, row["df"], ncp) == pytest.approx(0.8, abs=1e-6)
    assert summary["counts"]["rows"] == {
        "holds": 1,
        "consistent": n_rows - 1 - 2 - 4 - 2 - 4,
        "explained": 4,
        "disagrees": 4,
        "deferred": 2,
        "fails": 2,
    }
    # The 6 rows 40 SE off are rejected family-wise too (p ~ 1e-5 against Holm's smallest threshold 0.05 / 19).
    assert summary["counts"]["rows_adjusted"] == summary["counts"]["rows"]
    assert summary["family_wise"]["n_gap_rows"] == n_rows - 1 and summary["family_wise"]["method"] == "holm"
    assert (summary["family_wise"]["rejected_family_wise"], summary["family_wise"]["fails_family_wise"]) == (12, 2)
    assert summary["family_wise"]["expected_false_fails_per_row_rule"] == pytest.approx((n_rows - 1) * 1e-3)
    assert summary["counts"]["gap_rows_below_min_seeds"] == 0 and summary["counts"]["paper_only_figures"] == 1
    assert summary["counts"]["figures_with_layout_problems"] == 0
    # The raw gap is shown even inside the allowance (the old "gap / SE" column showed 0 there).
    inside = [r for r in summary["rows"] if r["name"] == "x with allowance"]
    assert inside and all(r["status"] == "consistent" and r["gap"] != 0 and r["allowance"] == 0.05 for r in inside)
    for r in inside:
        assert f'<td class="num">{r["gap"]:.4g}</td>' in biased_html
    assert not list((tmp_path / "rep").glob("*.tmp")) and not list((tmp_path / "rep").glob(".*.tmp"))


def test_report_without_any_figures_is_valid(tmp_path):
    reg = Registry(models=registry.MODELS, package=None)
    result = build_report("quick", device="cpu", out_dir=tmp_path, cache_dir=None, registry=reg)
    text, parser = check_report_html(result.path, registry.MODELS)
    assert result.n_failed == 0 and not parser.imgs and text.count("No figures yet") == 2 * len(registry.MODELS)


def test_parallel_report_equals_serial(tmp_path):
    """Issue 13 item 2: the same figures built in 2 worker processes and serially give identical data and rows."""
    reg = make_registry()
    serial = build_report("tiny", device="cpu", out_dir=tmp_path / "s", cache_dir=None, registry=reg, jobs=1)
    parallel = build_report("tiny", device="cpu", out_dir=tmp_path / "p", cache_dir=None, registry=reg, jobs=2)
    for name in reg.names():
        a, b = (xr.load_dataset(tmp_path / d / "data" / f"{name}.nc") for d in ("s", "p"))
        for ds in (a, b):  # provenance: torch's version is listed only where torch is imported (pytest's process)
            del ds.attrs["versions_json"]
        xr.testing.assert_identical(a, b)
    rows = [json.loads(r.summary_path.read_text())["rows"] for r in (serial, parallel)]
    assert rows[0] == rows[1] and len(rows[0]) == 4
    pngs = [[f.png for f in r.sections[0].figures] for r in (serial, parallel)]
    assert pngs[0] == pngs[1]


def test_parallel_build_schedules_the_longest_figures_first(tmp_path):
    from figures import runner

    reg = make_registry()
    for name in reg.names():
        registry.build(name, "tiny", device="cpu", cache_dir=tmp_path, registry=reg)
    # Rewrite the recorded runtimes (toy.heat slower), as sidecars of an older code version would hold them.
    for name, runtime in (("toy.decay", 1.0), ("toy.heat", 5.0)):
        (side,) = (tmp_path / name).glob("*.json")
        data = json.loads(side.read_text())
        side.write_text(json.dumps({**data, "runtime_s": runtime}))
    names = ["toy.decay", "toy.heat", "toy.new"]
    assert cache.previous_runtime(tmp_path, "toy.heat", "tiny") == 5.0
    assert cache.previous_runtime(tmp_path, "toy.heat", "quick") is None
    assert runner._longest_first(names, "tiny", tmp_path) == [2, 1, 0]  # never built first, then 5 s, then 1 s
    assert runner._longest_first(names, "tiny", None) == [0, 1, 2]


def test_layout_helpers_colour_bars_and_panels_per_row():
    reg = make_registry()
    ds = toy_data(RunConfig(figure="toy.heat", preset="tiny", params=TOY_PARAMS["tiny"], code=""))
    fig = registry.render(reg.get("toy.heat"), ds)
    assert_readable_layout(fig)
    assert len(fig.axes) == 5  # 4 panels (2 x 2) + 1 colour bar
    # The rules catch what they are for: a heat map without a colour bar, four panels in a row.
    with _style.style_context():
        bad, axes = _style.new_figure(1, 4)
        axes[0].imshow(np.eye(3))
    problems = _style.layout_problems(bad)
    assert any("colour bar" in p for p in problems) and any("4 panels in one row" in p for p in problems)
    # A colour bar shared by two heat maps on the same scale covers both.
    with _style.style_context():
        shared, (left, right) = _style.new_figure(1, 2)
        im = left.imshow(np.eye(3), vmin=0, vmax=1)
        right.imshow(np.eye(3)[::-1], vmin=0, vmax=1)
        shared.colorbar(im, ax=[left, right], label="value")
    assert _style.layout_problems(shared) == []
    # A twin axis is its host's panel (three panels, one with a twinx: no problem); a fourth real panel is one.
    with _style.style_context():
        twin, axes3 = _style.new_figure(1, 3)
        axes3[2].twinx()
        wide, axes4 = _style.new_figure(1, 4)
        axes4[3].twinx()
    assert _style.layout_problems(twin) == []
    assert _style.layout_problems(wide) == ["4 panels in one row (at most 3: use panel_grid or a larger figure)"]
    # The report lists a figure's layout problems.
    from figures import report

    def bad_plot(ds):
        fig, axes = _style.new_figure(1, 4)
        axes[0].imshow(np.eye(3))
        return fig

    small = Registry(models=("toy",), package=None)
    small.register(
        name="toy.bad_layout", model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS, plot=bad_plot
    )(toy_data)
    entry = report._figure_entry(
        small.get("toy.bad_layout"),
        "tiny",
        None,
        seed=0,
        device="cpu",
        cache_dir=None,
        recompute=False,
        progress=False,
        registry=small,
    )
    assert len(entry.layout) == 2 and not entry.error
    assert "Layout: heat map without a colour bar" in report._figure_html(
        entry, "", report.family_wise([]), report._Why([])
    )
    with pytest.raises(ValueError, match="max_per_row must be an integer in"):
        _style.panel_grid(4, max_per_row=4)
    with pytest.raises(ValueError, match="label must say"):
        _style.add_colorbar(axes[0], axes[0].images[0], label="")


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(tmp_path):
    result = build_report(
        "tiny",
        device="cpu",
        out_dir=tmp_path / "rep",
        cache_dir=tmp_path / "res",
        registry=make_registry(with_verdicts=True),
        jobs=1,
    )
    shot = tmp_path / "shot.png"
    cmd = [
        shutil.which("chromium"),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,2000",
        f"--screenshot={shot}",
        result.path.resolve().as_uri(),
    ]
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
    # a figure that shares another's data finds it in the cache, built for the figure registered before it
    assert first.status == ("cached" if first.spec.shares_data_with else "computed")
    assert second.status == "computed"
    xr.testing.assert_identical(first.dataset, second.dataset)  # same seed -> identical data
    stem = tmp_path / name
    fig = registry.render(first.spec, first.dataset)
    assert_readable_layout(fig)  # at most 3 panels a row, a colour bar on every heat map (the report's rules)
    (png,) = _style.save_figure(fig, stem, ("png",))
    assert png.stat().st_size > 0
    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and np.var(image) > NOT_BLANK


def test_report_of_the_registered_figures(tiny_cache, tmp_path):
    # Serial (the figures are cached by the test above; workers would only add their start-up cost).
    result = build_report("tiny", device="cpu", out_dir=tmp_path, cache_dir=tiny_cache, jobs=1)
    check_report_html(result.path, registry.MODELS)
    assert result.n_failed == 0, [f.error for s in result.sections for f in s.figures if f.failed]
    summary = json.loads(result.summary_path.read_text())
    assert len(summary["figures"]) == len(_REAL)
    for row in summary["rows"]:
        assert row["status"] in registry.STATUSES and row["model"] in registry.MODELS
        assert (row["explanation"] is not None) == (row["status"] in ("explained", "disagrees", "deferred"))


def test_a_figure_sharing_another_figures_data_builds_it_once(tmp_path):
    calls = []

    def counted(cfg):
        calls.append(cfg.figure)
        return toy_data(cfg)

    reg = Registry(models=("toy",), package=None)
    kw = dict(model="toy", paper="p", spec="s", caption="c", params=TOY_PARAMS, plot=toy_plot)
    reg.register(name="toy.a", **kw)(counted)
    reg.register(name="toy.b", shares_data_with="toy.a", **kw)(counted)
    b = registry.build("toy.b", "tiny", cache_dir=tmp_path, registry=reg)  # builds toy.a's data for both
    a = registry.build("toy.a", "tiny", cache_dir=tmp_path, registry=reg)
    assert calls == ["toy.a"] and a.status == "cached" and b.spec.name == "toy.b"
    xr.testing.assert_identical(a.dataset, b.dataset)
    assert not (tmp_path / "toy.b").exists()  # one cache entry, the source's
    # sharing needs the same data function and parameters, and a source of its own
    reg.register(
        name="toy.c",
        shares_data_with="toy.a",
        **{**kw, "params": {**TOY_PARAMS, "tiny": {**TOY_PARAMS["tiny"], "n_seeds": 9}}},
    )(counted)
    reg.register(name="toy.d", shares_data_with="toy.b", **kw)(counted)
    for name in ("toy.c", "toy.d"):
        with pytest.raises(ValueError, match="must be a figure of its own with the same data function and param"):
            registry.build(name, "tiny", cache_dir=tmp_path, registry=reg)
    with pytest.raises(ValueError, match="shares_data_with must be None or another figure's name"):
        reg.register(name="toy.e", shares_data_with="toy.e", **kw)(counted)
