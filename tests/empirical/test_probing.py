"""Tests of the probing experiment (empirical/probing.py) and its figure single_location.fig1 (issue 17).

The encoder tests need the optional extra ``probe``; they are skipped without it. The behaviour without the extra
(the figure skipped with a message naming the extra, never a traceback) is tested by hiding ``transformers`` in a
subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from empirical import probing as pr

needs_probe = pytest.mark.skipif(bool(pr.missing_probe_modules()), reason="needs the optional extra 'probe'")
ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------------------------------
# the synthetic task


@pytest.mark.parametrize("kind", pr.SETS)
def test_sentences_balanced_and_spans_name_the_decisive_words(kind):
    s = pr.make_sentences(kind, 40, rng=3)
    assert len(s) == 40 and s.labels.sum() == 20
    split = "seen" if kind in ("train", "test", "ood_structure") else "unseen"
    for text, label, ts, dspan in zip(s.texts, s.labels, s.target_span, s.distractor_span):
        word = text[ts[0] : ts[1]]
        assert word in pr.SENTIMENT_WORDS[split][int(label)]  # the label is the decisive word's polarity
        if kind.startswith("ood_structure") or kind == "ood_both":
            assert text.startswith("Hello, how are you? Good evening, ") and dspan[0] == -1
        else:
            assert text.startswith("The city is ")
            assert text[dspan[0] : dspan[1]] in sum(pr.SENTIMENT_WORDS[split].values(), ())
        assert "  " not in text and " ." not in text  # an empty adverb leaves no double space


def test_test_sentences_never_occur_in_training():
    train = set(pr.make_sentences("train", 400, rng=0).texts)
    for kind in pr.TEST_SETS:
        assert not train & set(pr.make_sentences(kind, 400, rng=1).texts)


def test_sentence_draws_are_reproducible_and_bad_input_is_refused():
    assert pr.make_sentences("test", 10, rng=5).texts == pr.make_sentences("test", 10, rng=5).texts
    with pytest.raises(ValueError, match="n must be even"):
        pr.make_sentences("train", 5, rng=0)
    with pytest.raises(ValueError, match="kind"):
        pr.make_sentences("validation", 4, rng=0)


# ----------------------------------------------------------------------------------------------------------------
# probes: checked against independent computations


def test_fit_probe_satisfies_the_l2_logistic_optimality_condition():
    """The fitted probe is the minimiser of C sum_i log(1 + exp(-s_i f(z_i))) + |w|^2/2 on standardised features:
    its gradient, computed here in numpy, vanishes (to the solver's tolerance, far above float64 rounding)."""
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)) * np.array([1.0, 10.0, 0.1, 3.0, 1.0, 1.0]) + 2.0
    x[:, 5] = 4.0 + 1e-30 * rng.normal(size=200)  # a dead coordinate: dropped, not blown up
    y = (x[:, 0] + 0.1 * x[:, 1] + rng.normal(size=200) > 2.5).astype(np.int64)
    probe = pr.fit_probe(x, y, C=0.7)
    assert np.isinf(probe.scale[5]) and np.all(np.isfinite(probe.scale[:5]))
    z = (x[:, :5] - x[:, :5].mean(0)) / x[:, :5].std(0)  # population standardisation of the live coordinates
    w, b = probe.model.coef_[0], probe.model.intercept_[0]
    assert w[5] == 0.0
    s = 2.0 * y - 1.0
    resid = -s / (1.0 + np.exp(s * (z @ w[:5] + b)))  # d/df of log(1 + exp(-s f))
    grad_w = 0.7 * z.T @ resid + w[:5]
    grad_b = 0.7 * resid.sum()
    assert np.max(np.abs(grad_w)) < 1e-5 and abs(grad_b) < 1e-5  # tol=1e-8 on the L-BFGS projected gradient
    # the unit direction reproduces the decision function up to a positive factor and a shift
    f = probe.decision_function(x)
    assert np.corrcoef(probe.standardize(x) @ probe.direction, f)[0, 1] > 1 - 1e-12


def test_separation_matches_a_hand_computation():
    a, b = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 0.5, 1.0])
    pooled = np.sqrt((np.var(a, ddof=1) + np.var(b, ddof=1)) / 2)  # (1.6667 + 0.25) / 2
    assert pr.separation(a, b) == pytest.approx((2.5 - 0.5) / pooled, rel=1e-15)
    assert pr.separation(a, b) == pytest.approx(2.0 / np.sqrt((5 / 3 + 0.25) / 2), rel=1e-15)
    assert pr.separation([1.0, 1.0], [1.0, 1.0]) == 0.0


def test_direction_probe_recovers_a_planted_direction():
    """Two Gaussian clouds differing along a planted unit vector: the probe's direction aligns with it and its
    held-out separation estimates the planted d' = 3 (SE of d' with 2 x 2000 samples ~ sqrt(2/n + d'^2/(4n)) ~ 0.04,
    so 0.25 is > 5 SE)."""
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(1)
    width = 20
    u = rng.normal(size=width)
    u /= np.linalg.norm(u)

    def cloud(n, sign):
        return rng.normal(size=(n, width)) + sign * 1.5 * u

    direction, scores = pr.direction_probe(cloud(2000, 1), cloud(2000, -1), {"held": (cloud(2000, 1), cloud(2000, -1))})
    assert abs(direction @ u) > 0.95
    acc, sep = scores["held"]
    assert sep == pytest.approx(3.0, abs=0.25)
    # the Bayes accuracy along u is Phi(1.5) = 0.933; binomial SE over 4000 points 0.004
    assert acc == pytest.approx(0.9332, abs=0.02)


# ----------------------------------------------------------------------------------------------------------------
# model files


def _truncated_copy(tmp_path: Path, n_bytes: int | None, drop: str | None = None) -> Path:
    """A copy of the model folder in tmp_path; model.safetensors cut to ``n_bytes`` (None: intact, linked)."""
    src = pr.default_model_dir()
    dst = tmp_path / "model"
    dst.mkdir()
    for name in pr.REQUIRED_MODEL_FILES:
        if name == drop:
            continue
        if name == "model.safetensors" and n_bytes is not None:
            with (src / name).open("rb") as fh:
                (dst / name).write_bytes(fh.read(n_bytes))
        else:
            os.symlink(src / name, dst / name)
    return dst


@needs_probe
@pytest.mark.parametrize("drop", ["model.safetensors", "config.json", "tokenizer.json"])
def test_missing_model_file_is_named(tmp_path, drop):
    folder = _truncated_copy(tmp_path, None, drop=drop)
    with pytest.raises(FileNotFoundError, match=f"{drop} is missing"):
        pr.load_encoder(folder)


@needs_probe
@pytest.mark.parametrize("n_bytes", [4, 1000, 5_000_000])
def test_truncated_safetensors_is_refused_naming_the_file(tmp_path, n_bytes):
    folder = _truncated_copy(tmp_path, n_bytes)
    with pytest.raises(ValueError, match=r"model\.safetensors is damaged"):
        pr.load_encoder(folder)


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pr.validate_model_dir(tmp_path / "nowhere")


def test_without_the_extra_the_error_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # importlib.util.find_spec -> None, import fails
    assert "transformers" in pr.missing_probe_modules()
    with pytest.raises(ImportError, match="extra 'probe'.*transformers"):
        pr.load_encoder()


def test_without_the_extra_the_figure_is_skipped_with_a_message():
    code = textwrap.dedent("""
        import logging, sys
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        sys.modules["transformers"] = None  # as if the extra 'probe' were not installed
        import figures._single_location_probing as m
        from figures.registry import REGISTRY
        assert m.SKIPPED is not None and "single_location.fig1" not in REGISTRY.names()
        print("OK")
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "OK" in out.stdout and "Traceback" not in out.stderr
    assert "extra 'probe'" in out.stderr and "transformers" in out.stderr


# ----------------------------------------------------------------------------------------------------------------
# the encoder


@pytest.fixture(scope="module")
def encoder():
    if pr.missing_probe_modules():
        pytest.skip("needs the optional extra 'probe'")
    return pr.load_encoder()


def test_every_word_is_one_token(encoder):
    tok, _ = encoder
    words = {w for split in pr.SENTIMENT_WORDS.values() for ws in split.values() for w in ws}
    words |= {w for lists in pr._NEUTRAL.values() for ws in lists.values() for w in ws if w}
    for w in sorted(words):
        assert len(tok(w, add_special_tokens=False)["input_ids"]) == 1, w


def test_encode_reads_the_decisive_token_and_matches_unbatched_runs(encoder):
    import torch

    tok, model = encoder
    s = pr.make_sentences("train", 6, rng=2)
    enc = pr.encode(s, tok, model, batch_size=4, rng=0)  # two batches, padded
    assert enc.cls.dtype == np.float32 and enc.cls.shape == (
        6,
        model.config.num_hidden_layers + 1,
        model.config.hidden_size,
    )
    # layer 0 [CLS] = LayerNorm([CLS] embedding + position 0 + segment 0): the same for every sentence
    assert np.all(enc.cls[:, 0] == enc.cls[0, 0])
    for i, text in enumerate(s.texts):  # independent path: one sentence, no padding, token found by its id
        ids = tok(text, return_tensors="pt")
        word = text[s.target_span[i][0] : s.target_span[i][1]]
        j = ids["input_ids"][0].tolist().index(tok.convert_tokens_to_ids(word.lower()))
        with torch.inference_mode():
            out = model(**ids, output_hidden_states=True, output_attentions=True)
        # float32 forward with and without padding: agreement to ~1e-6 relative; 1e-4 absolute on O(1) states
        np.testing.assert_allclose(enc.target[i], torch.stack(out.hidden_states)[:, 0, j].numpy(), atol=1e-4)
        np.testing.assert_allclose(enc.attn_target[i], torch.stack(out.attentions)[:, 0, :, 0, j].numpy(), atol=1e-5)
        assert enc.n_tokens[i] == ids["input_ids"].shape[1]


def test_tiny_figure_builds_and_its_checks_are_well_formed(encoder):
    import time

    import figures._single_location_probing as fig_module
    from figures import registry
    from figures.registry import CheckResult

    assert fig_module.SKIPPED is None
    t0 = time.process_time()
    res = registry.build("single_location.fig1", "tiny", device="cpu", cache_dir=None)
    assert time.process_time() - t0 < 60  # tiny: seconds of CPU after the module's model load
    ds = res.dataset
    assert ds.sizes["layer"] == 7 and ds.sizes["head"] == 12 and ds.sizes["draw"] == 2
    acc = ds["accuracy_train"].values
    assert np.all((acc >= 0) & (acc <= 1))
    np.testing.assert_array_equal(ds["cls_layer0_spread"].values, 0.0)
    checks = fig_module.checks_fig1(ds)
    assert checks and all(isinstance(c, CheckResult) for c in checks)
    # layer 0 is at chance by construction (cls_layer0_spread == 0 above): an identity here, not a report check
    assert not any("at chance" in c.name for c in checks)
    fig = registry.render(res.spec, ds)
    assert len(fig.axes) >= 4
