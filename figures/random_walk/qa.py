"""``random_walk.qa``: the question-answering tasks beyond random walks, with and without an extra ReLU layer."""

from __future__ import annotations

import math

import numpy as np
import scipy.stats
import xarray as xr

from closedform import random_walk as cf
from dynamics.saveat import SaveAt
from empirical.device import torch_threads
from empirical.models import random_walk as rwm
from figures._style import (
    TOL_BRIGHT,
    new_figure,
    plot_reduced,
    plot_theory,
)
from figures.experiments import train
from figures.registry import CheckResult, Explanation, GapRow, compare_rows, register

from figures.random_walk._common import _band, DEFAULTS_U, _seeds

__all__ = ["QA_IMBALANCE", "data_qa", "plot_qa", "gaps_qa", "checks_qa"]


# ----------------------------------------------------------------------------------------------------------------------
# Beyond random walks: QA tasks (docs/models/token_selection.md §C.8)
# ----------------------------------------------------------------------------------------------------------------------

_QA_RUNS = (("majority", False), ("majority", True), ("preference", False), ("preference", True))
QA_IMBALANCE = Explanation(
    reason=(
        "the loss -log(e_y^T f + eps) (docs/models/token_selection.md §C.4) only ever raises the true label's "
        "output: its gradient in f is -e_y / (e_y^T f + eps), so nothing lowers the other labels' outputs and the "
        "prediction margin is left to the part of f that all questions share (11 of 16 words are common), which "
        "follows the sample's label frequencies (as V ~ sqrt(C_hat) in docs/models/token_selection.md §C.7). A "
        "sampled training set whose labels are not exactly balanced pulls the ReLU model to its majority label "
        "(accuracy ~ 0.5) and slowly flips the plain model's borderline lists (3 vs 2 fruits, after ~500 "
        "iterations); on the balanced set the ReLU model rises and then falls again (measured, 4 runs: "
        "0.68 / 0.84 / 0.85 at t = 100 / 400 / 1000; at eta = 1: 0.88 / 0.84 / 0.72; init scale 0.1: "
        "0.95 / 0.78 / 0.69; init scale 0.001: 0.50 / 0.51 / 0.56, the small-start plateau of a two-layer map). "
        "With softmax cross-entropy, which also lowers the wrong label, the same ReLU model reaches 100% (4 runs "
        "of 1 024 questions: 1.0 at t = 400 on the balanced set, 1.0 at t = 1000 on random samples, where the "
        "plain model also stays at 1.0): the paper's 'same outcome' for the ReLU variant is not reproduced "
        "under the loss of §C.4, and "
        "the cause is that loss, not the data or the step"
    ),
    kind="disagrees",
    evidence=(
        "random_walk.qa: the 'balanced training set' curves (each of the 32 questions equally often) and the "
        "'ReLU, cross-entropy, balanced' curve; checks 'a balanced training set lifts ...' and 'cross-entropy "
        "lifts ...'"
    ),
)


def _qa_tag(task: str, relu: bool) -> str:
    return f"{task}_{'relu' if relu else 'plain'}"


def _qa_balanced(task: str, n: int) -> cf.WalkSample:
    """Every question of ``task`` equally often (n rounded down to a multiple of the number of questions)."""
    tokens, labels = rwm.qa_questions(task)
    rows = np.concatenate([tokens, labels[:, None]], axis=1)
    return cf.WalkSample(np.tile(rows, (max(n // len(labels), 1), 1)))


@register(
    name="random_walk.qa",
    model="random_walk",
    paper="Shi & Cao (2025): beyond random walks (QA tasks)",
    spec="docs/models/token_selection.md §C.8",
    caption=(
        "Task 1 (majority fruit of a 5-word list, (K, N) = (19, 17)) and Task 2 (preferred fruit of 'I prefer "
        "an X to an Y', (K, N) = (19, 19)); random start N(0, 0.01^2), eta = 0.1, eps = 0.1, full-batch GD on "
        "n_train questions drawn at random, test accuracy on n_test questions vs iteration, for the model of "
        "docs/models/token_selection.md §C.3 (plain) and with an extra ReLU layer f = A relu(V X S) (m = 19). "
        "Bands: mean and 95% range "
        "over runs. Dashed (Task 1): the same models trained on a balanced set (each of the 32 questions "
        "equally often). Dotted red: the ReLU model on the balanced set with softmax cross-entropy instead of "
        "the paper's "
        "loss (a diagnostic). Expected (docs/models/token_selection.md §C.8): Task 1 ~100% within 100 "
        "iterations, Task 2 ~50% (both questions share the bag of words), the same with ReLU. Measured: on a "
        "random sample the ReLU model predicts the sample's majority label (see the rows); on the balanced set "
        "it rises slowly, 0.75 at 400 and 0.81 at 1 000 iterations (mean of 8 runs), not the paper's ~100%. "
        "The plain model on random samples stays at 1.0 to ~500 iterations, then decays (0.93 at 1 000). "
        "Cause (measured, see the rows): the loss -log(e_y^T f + eps) only raises the true label's output and "
        "never lowers the others, so the margin follows the label frequencies of the sample; with "
        "cross-entropy on the same balanced questions the ReLU model overtakes the paper's loss (dotted; 1.0 "
        "by 400-1 000 iterations in the runs we measured)."
    ),
    unrecoverable=DEFAULTS_U
    + (
        (
            "tokenisation: lower-case words, punctuation dropped, 19-word vocabulary in alphabetical order, "
            "blank query last (docs/models/token_selection.md §C.8)"
        ),
        "M = 1000, tokens normalised as in Fig. 6, 1000 iterations (docs/models/token_selection.md §C.8)",
        "ReLU variant: A_relu i.i.d. N(0, 0.01^2), log argument clamped at 1e-12 (docs/models/token_selection.md §C.8)",
    ),
    params={
        "tiny": {"M": 100, "n_train": 200, "n_test": 200, "n_steps": 30, "n_seeds": 2},
        "quick": {"M": 1000, "n_train": 1000, "n_test": 500, "n_steps": 400, "n_seeds": 8},
        "paper": {"M": 1000, "n_train": 1000, "n_test": 1000, "n_steps": 1000, "n_seeds": 8},
    },
    plot=lambda ds: plot_qa(ds),
    gaps=lambda ds: gaps_qa(ds),
    checks=lambda ds: checks_qa(ds),
)
def data_qa(cfg) -> xr.Dataset:
    """QA tasks of docs/models/token_selection.md §C.8 (plain and ReLU variants), and Task 1 on a balanced training
    set.
    """
    par = cfg.params
    seeds = _seeds(cfg, par["n_seeds"])
    T = par["n_steps"]
    steps = tuple(sorted(set(range(min(10, T) + 1)) | set(np.rint(np.linspace(0, T, 25)).astype(int))))
    data = {}
    runs = [(task, relu, False, "log_eps") for task, relu in _QA_RUNS] + [
        ("majority", False, True, "log_eps"),
        ("majority", True, True, "log_eps"),
        ("majority", True, True, "cross_entropy"),
    ]
    for task, relu, balanced, loss in runs:
        train_q, test_q = [], []
        for s in seeds:
            rng = np.random.default_rng(s)
            train_q.append(rwm.qa_sample(task, par["n_train"], rng))
            test_q.append(rwm.qa_sample(task, par["n_test"], rng))
        if balanced:
            train_q = [_qa_balanced(task, par["n_train"])] * len(seeds)
        N = rwm.qa_geometry(task).N
        model = rwm.QAAttention(task, data=train_q, test=test_q, M=N + 1, rho=par["M"] / 2.0, relu=relu, loss=loss)
        with torch_threads(1):
            traj = train(
                model,
                rwm.config("qa_gd", model, T, seeds=tuple(seeds), saveat=SaveAt(steps=steps)),
                device=cfg.device,
                progress=cfg.progress,
            )
        tag = _qa_tag(task, relu) + ("_balanced" if balanced else "") + ("_ce" if loss == "cross_entropy" else "")
        data[f"{tag}_acc"] = (("seed", "step"), traj["acc"].values)
        data[f"{tag}_loss"] = (("seed", "step"), traj["loss"].values)
    return xr.Dataset(
        data,
        coords={"seed": np.asarray(seeds), "step": np.asarray(steps)},
        attrs={"M": par["M"], "n_train": par["n_train"], "n_test": par["n_test"], "n_steps": T},
    )


def plot_qa(ds: xr.Dataset):
    """Draw ``random_walk.qa`` from its dataset ``ds`` (a matplotlib Figure)."""
    fig, axes = new_figure(1, 2, figsize=(10.0, 3.6))
    t = ds.step.values
    for ax, task, expected, title in (
        (axes[0], "majority", 1.0, "Task 1: majority fruit"),
        (axes[1], "preference", 0.5, "Task 2: preferred fruit"),
    ):
        _band(ax, t, ds[f"{task}_plain_acc"].values, "model of docs/models/token_selection.md §C.3", TOL_BRIGHT["blue"])
        _band(ax, t, ds[f"{task}_relu_acc"].values, "with ReLU layer", TOL_BRIGHT["green"])
        for relu, color in ((False, TOL_BRIGHT["blue"]), (True, TOL_BRIGHT["green"])):
            name = f"{_qa_tag(task, relu)}_balanced_acc"
            if name in ds:
                plot_reduced(
                    ax,
                    t,
                    ds[name].values.mean(0),
                    color=color,
                    label=f"{'ReLU' if relu else 'plain'}, balanced training set (mean)",
                )
        name = f"{_qa_tag(task, True)}_balanced_ce_acc"
        if name in ds:
            ax.plot(
                t,
                ds[name].values.mean(0),
                color=TOL_BRIGHT["red"],
                linestyle=":",
                linewidth=1.5,
                label="ReLU, cross-entropy loss, balanced (mean; diagnostic)",
            )
        plot_theory(
            ax,
            t,
            np.full(t.shape, expected),
            label="expected (docs/models/token_selection.md §C.8)",
            color="k",
            linewidth=0.8,
        )
        ax.set(xlabel="iteration t", ylabel="test accuracy", ylim=(0, 1.05), title=title)
        # below the panel: inside, the legend covers the accuracy curves (the report's layout check)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
    return fig


def gaps_qa(ds: xr.Dataset) -> list[GapRow]:
    """Task 1 at t = 100 (the paper's '~100% within 100 iterations') and Task 2 at the last step, every seed's test
    accuracy against the expected outcome.
    """
    t = ds.step.values
    rows = []
    for task, relu in _QA_RUNS:
        tag = _qa_tag(task, relu)
        if task == "majority":
            i = int(np.argmin(np.abs(t - 100)))
            rows += compare_rows(
                f"QA Task 1 ({tag}) test accuracy vs ~100%",
                [t[i]],
                [1.0],
                ds[f"{tag}_acc"].values[:, i : i + 1],
                rel_allowance=0.02,
                allowance_source="'approximately 100%' (docs/models/token_selection.md §C.8) read as >= 98%",
                explanation=QA_IMBALANCE if relu else None,
            )
        else:
            rows += compare_rows(
                f"QA Task 2 ({tag}) test accuracy vs 50% (bag of words)",
                [t[-1]],
                [0.5],
                ds[f"{tag}_acc"].values[:, -1:],
            )
    return rows


def checks_qa(ds: xr.Dataset) -> list[CheckResult]:
    """The theorem checks of ``random_walk.qa`` evaluated on its dataset ``ds`` (a list of CheckResult)."""
    t = ds.step.values
    n = int(ds.sizes["seed"])
    i = int(np.argmin(np.abs(t - 100)))
    diff = ds.majority_relu_balanced_acc.values[:, -1] - ds.majority_relu_acc.values[:, -1]  # paired by seed
    # one-sided level 0.01: this tests the evidence behind an explanation (measured at t = 400: mean +0.24, SD 0.19
    # over 8 seeds, t = 3.6), not a theory row (those use 1e-3)
    lower = float(diff.mean() - scipy.stats.t.ppf(0.99, n - 1) * diff.std(ddof=1) / math.sqrt(n)) if n > 1 else -1.0
    out = [
        CheckResult(
            name=(
                f"QA Task 1, ReLU variant: a balanced training set lifts the last-step accuracy above the random "
                f"sample's: one-sided 99% Student-t lower bound of the mean paired difference (t = {int(t[-1])})"
            ),
            passed=lower > 0,
            measured=lower,
            expected="> 0",
            tolerance=f"Student t, {n - 1} df, over seeds (same test questions and start per seed)",
            n_seeds=n,
        )
    ]
    if "majority_relu_balanced_ce_acc" in ds:
        # the loss is the only difference between the two runs (same balanced questions, test set and start per
        # seed); one-sided level 0.01 as above (measured at t = 400, 4 seeds: 1.00 against 0.84)
        ce = ds.majority_relu_balanced_ce_acc.values[:, -1]
        d = ce - ds.majority_relu_balanced_acc.values[:, -1]
        low = float(d.mean() - scipy.stats.t.ppf(0.99, n - 1) * d.std(ddof=1) / math.sqrt(n)) if n > 1 else -1.0
        out.append(
            CheckResult(
                name=(
                    f"QA Task 1, ReLU variant, balanced set: cross-entropy (which also lowers the wrong label) lifts "
                    f"the last-step accuracy above the paper's loss -log(e_y^T f + eps): one-sided 99% Student-t lower "
                    f"bound of the mean paired difference (t = {int(t[-1])})"
                ),
                passed=low > 0,
                measured=low,
                expected="> 0",
                tolerance=f"Student t, {n - 1} df, over seeds (same questions and start per seed; only the loss "
                "differs)",
                n_seeds=n,
            )
        )
    out.append(
        CheckResult(
            name=f"QA Task 1, plain model, balanced training set: accuracy at t = {int(t[i])}, minimum over seeds",
            passed=float(ds.majority_plain_balanced_acc.values[:, i].min()) >= 0.98,
            measured=float(ds.majority_plain_balanced_acc.values[:, i].min()),
            expected=1.0,
            tolerance=">= 0.98 ('approximately 100% within 100 iterations', docs/models/token_selection.md §C.8)",
            n_seeds=n,
        )
    )
    return out
