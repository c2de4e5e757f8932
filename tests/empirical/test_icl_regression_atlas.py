"""The icl_regression attractor atlas (issue 15 item 4) against the real torch model: end classes of the two-head
(omega, mu) dynamics of F/2 (``closedform.icl_regression.map`` + ``classify``) predict where SGD on the H = 2
softmax transformer (``empirical.models.icl_regression.ICLAttention``) ends when it starts on the reduced pattern (3.1).

Why torch should agree, and what is compared
--------------------------------------------
* Started on the pattern (3.1) (KQ^(h) = diag(omega_h I_d, 0), OV^(h) = (0_d, mu_h)), the expected gradient of the MSE
  keeps the pattern (rotation invariance of the data law, spec §3), so in expectation torch moves in the same
  (omega, mu) plane as the reduced flow. Mini-batch noise knocks the weights slightly off the pattern; the probes read
  omega as the mean KQ diagonal and mu as the label entry of OV (spec §3), which averages that out to first order.
* The torch loss is the true MSE, not F: F drops O(1/L) terms (spec §4.2), and at d = 5 these are not small near
  omega = 1/sqrt(d) ((1 - 2 omega^2)^(-d/2-1) ~ 6 in ``refined_loss``), so the true single-head optimum sits away
  from F's (1/sqrt(d), mu*). The stationary *structure* is the same: the sign pattern of the heads and the zero-sum
  valley u = mu^T omega ~ eta* (which the small-omega limit of the true loss keeps exactly: ``small_omega_limit`` is
  minimised at eta*, a = 0, spec §4.2). Hence the **class** of the end state is compared, never the end point.
* Torch trains the factors W_Q, W_K, W_V, W_O, not (omega, mu): SGD on the factors is GD on the MSE = F(+O(1/L)) with a
  state-dependent preconditioner (for omega ~ (logit_scale^2 + omega^2)/d, for mu ~ (1 + mu^2)), so torch time is not
  flow time and paths differ; the starts below are chosen well inside their basins under the reduced flow (a
  classification that flips under a preconditioner would not be a prediction of the atlas). ``lr_scale`` on W_Q, W_K
  only speeds up omega (a further preconditioner), which changes no stationary point.

Statistics: each start runs 8 seeds (independent mini-batch streams, same start) batched in one ``train`` call. The
verdict per start is an exact one-sided binomial test of H0 "a seed lands in the predicted class with probability
<= 1/2" (the atlas predicts nothing): it is rejected, i.e. the prediction confirmed, when >= 7 of 8 seeds agree;
P(>= 7 of 8 | p = 1/2) = 9/256 = 0.035 (the level). If the prediction holds for a seed with probability 0.99, the
test fails with probability P(<= 6 of 8) < 3e-3.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from closedform import icl_regression as icl
from dynamics import SaveAt
from empirical.models import icl_regression as m
from empirical.train import TrainConfig, train

TASK = icl.ICLRegressionTask(d=5, L=40, sigma2=0.1)  # the atlas figure's task (figures/_icl_atlas.py, spec §9)
H = 2
SEEDS = tuple(range(8))
# starts on the pattern (3.1) and the end class the reduced GD on F/2 predicts for them (asserted below, not assumed)
STARTS = {
    # both heads positive, mu of one sign: the heads merge onto the single-head line (omega_1 = omega_2)
    "same_sign": ((0.30, 0.35), (0.60, 0.70), "single_head"),
    # positive omega on both heads, the second mu slightly negative: its mu changes sign, still the single-head line
    "mixed_mu": ((0.30, 0.35), (1.00, -0.20), "single_head"),
    # one positive and one negative head of unequal size: the zero-sum two-head valley S_gamma
    "opposite_sign": ((0.35, -0.15), (1.20, -0.30), "solution_manifold"),
}


@functools.lru_cache(maxsize=1)
def _true_single_head_optimum(n_prompts=100_000):
    """Minimiser of the true loss on the single-head line, by Monte Carlo (``true_loss_mc``, spec (3.2), H = 1).

    Independent of F: for fixed omega the true loss is exactly quadratic in mu (the predictor is linear in mu), so
    three mu values on common prompts give mu_opt(omega) and the minimum; omega on a grid of step 0.025 over
    [0.35, 0.7]. Returns (omega_opt, mu_opt, omega grid, mu_opt on the grid)."""
    om = np.linspace(0.35, 0.70, 15)
    mus = np.array([0.5, 1.5, 2.5])
    OM, MU = np.meshgrid(om, mus, indexing="ij")
    mean, _ = icl.true_loss_mc(TASK, OM[..., None], MU[..., None], n_prompts, rng=3)
    coef = np.array([np.polyfit(mus, mean[i], 2) for i in range(om.size)])
    mu_opt = -coef[:, 1] / (2 * coef[:, 0])
    r_opt = coef[:, 2] - coef[:, 1] ** 2 / (4 * coef[:, 0])
    j = int(np.argmin(r_opt))
    return om[j], mu_opt[j], om, mu_opt


def _torch_tolerance():
    """Torch end states sit at the true loss's attractor, not F's. tol for ``classify`` on torch end states
    = twice the larger coordinate shift between F's single-head optimum (1/sqrt(d), mu*) and the true loss's (Monte
    Carlo above; at d = 5, L = 40 about (0.08, 0.15): the O(1/L) terms are not small, ``refined_loss`` even puts it at
    (0.34, 1.99)). It cannot blur the classes: single_head needs both omega of one sign, solution_manifold opposite
    signs; the valley test (|u - eta*| < 0.05, |sum mu| < 0.05) does not use tol."""
    w, a, _, _ = _true_single_head_optimum()
    o = icl.single_head_optimum(TASK)
    return 2.0 * max(abs(w - o.omega), abs(a - o.mu))


def _reduced_class(omega0, mu0, *, lr=0.2, n_steps=1000):
    """End class of GD on F/2 (flow time lr * n_steps = 200: the single-head line is reached to 1e-6 by t ~ 50)."""
    tr = icl.map(TASK, np.array(omega0), np.array(mu0), lr=lr, n_steps=n_steps, saveat=SaveAt(final=True))
    Y = tr.states()[:, -1]
    return icl.classify(TASK, Y[:, :H], Y[:, H:])[0]


def _torch_end_classes(omega0, mu0, *, n_steps, seeds=SEEDS, lr=0.1, omega_lr_scale=5.0, batch_size=256):
    """Train the torch H = 2 softmax model by SGD from the pattern start; classify the per-seed end state.

    The end state is the mean of the logged states over the last quarter of the run (Polyak averaging of the SGD
    iterates: removes most of the mini-batch jitter, ~0.03 per coordinate at lr = 0.1, batch 256, while the flow has
    settled; the valley's slow drift in gamma moves u and sum mu by far less than their 0.05 windows over that span).
    """
    model = m.ICLAttention(TASK, H, omega0=list(omega0), mu0=list(mu0))
    cfg = TrainConfig(
        seeds=tuple(seeds),
        n_steps=n_steps,
        batch_size=batch_size,
        lr=lr,
        optimizer="sgd",
        eval_size=16,
        saveat=SaveAt(every=max(1, n_steps // 20)),
        lr_scale={"Wq": omega_lr_scale, "Wk": omega_lr_scale},
    )
    tr = train(model, cfg, device="cpu")
    om, mu = m.stack_heads(tr, H)  # (seeds, time, H)
    k = max(1, om.shape[1] // 4)
    om_end, mu_end = om[:, -k:].mean(1), mu[:, -k:].mean(1)
    return icl.classify(TASK, om_end, mu_end, tol=_torch_tolerance()), om_end, mu_end


def _binomial_tail(k, n, p=0.5):
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


def _check_start(name, n_steps, seeds=SEEDS, min_agree=None):
    omega0, mu0, expected = STARTS[name]
    predicted = _reduced_class(omega0, mu0)
    assert predicted == expected, (name, predicted)  # the atlas's prediction for this start
    classes, om_end, mu_end = _torch_end_classes(omega0, mu0, n_steps=n_steps, seeds=seeds)
    agree = int(np.sum(classes == predicted))
    n = len(seeds)
    if min_agree is None:  # smallest k with P(>= k | p = 1/2) <= 0.05 (8 seeds: 7, level 0.035)
        min_agree = min(k for k in range(n + 1) if _binomial_tail(k, n) <= 0.05)
    assert agree >= min_agree, (
        name,
        predicted,
        classes.tolist(),
        np.round(om_end, 3).tolist(),
        np.round(mu_end, 3).tolist(),
    )
    return classes, om_end, mu_end


@pytest.mark.statistical
@pytest.mark.parametrize("name", list(STARTS))
def test_torch_end_class_matches_reduced_atlas(name):
    """8 seeds x 800 SGD steps per start (~3 s CPU each): >= 7 of 8 in the predicted class (binomial, level 0.035)."""
    _check_start(name, n_steps=800)


def test_classification_separates_the_torch_end_states():
    """Negative control: the torch end states of the two predicted classes are not interchangeable: a same-sign end
    state is never named solution_manifold and an opposite-sign one never single_head (so agreement above is not an
    artefact of a tolerance that accepts everything)."""
    c_same, om_s, mu_s = _torch_end_classes(*STARTS["same_sign"][:2], n_steps=800, seeds=(0, 1))
    c_opp, om_o, mu_o = _torch_end_classes(*STARTS["opposite_sign"][:2], n_steps=800, seeds=(0, 1))
    assert not np.any(c_same == "solution_manifold") and not np.any(c_opp == "single_head")


def test_torch_single_head_end_is_the_true_loss_optimum_not_fs():
    """The explained deviation: on the single-head line torch ends at the true loss's optimum (Monte Carlo), not at
    F's. Seed means over 8 seeds (same_sign start, 2 000 steps): sum(mu) within 0.05 of mu_opt(omega) of the true loss
    at torch's own omega (the MC mu_opt is sharp: SE < 0.01 at 10^5 prompts; SGD's stationary jitter of the Polyak
    average ~0.01; 0.05 allows the residual drift of omega, along which mu_opt changes by -2.3 per unit omega), and
    farther than 0.1 from F's mu* (F's line would put sum mu at 1.628)."""
    omega0, mu0, _ = STARTS["same_sign"]
    _, om_end, mu_end = _torch_end_classes(omega0, mu0, n_steps=2000)
    w, a = float(om_end.mean()), float(mu_end.sum(1).mean())
    w_opt, _, om_grid, mu_grid = _true_single_head_optimum()
    assert abs(a - np.interp(w, om_grid, mu_grid)) < 0.05, (w, a)
    assert abs(a - icl.single_head_optimum(TASK).mu) > 0.1, (w, a)
    assert abs(w - w_opt) < 0.05, (w, w_opt)  # grid step 0.025; the MC loss is flat (< 5e-4) over +-0.05


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("name", list(STARTS))
def test_torch_end_class_matches_reduced_atlas_long(name):
    """16 seeds x 3000 steps: >= 12 of 16 agree (P(>= 12 | p = 1/2) = 0.038)."""
    _check_start(name, n_steps=3000, seeds=tuple(range(16)))
