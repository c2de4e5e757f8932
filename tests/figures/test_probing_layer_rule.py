"""The layer rule of single_location.fig1 on synthetic probe accuracies (no encoder needed): the layer is chosen on
the validation split alone, a layer whose probe predicts one class on it is refused, and a test set below 'well above
chance' at the chosen layer is a disagreement whose cause (constant predictions, AUC) is measured, not assumed."""

import numpy as np
import xarray as xr

from figures._single_location_probing import checks_fig1, select_layer

SETS = ("train", "validation", "test", "ood_tokens", "ood_structure", "ood_both")


def _dataset(validation, ood_structure, *, rate=None, auc=0.9, n_draws=8, seed=0):
    """Per-layer mean accuracies (layers 0..3) with small draw noise; every other set at 0.9 on every layer."""
    rng = np.random.default_rng(seed)
    n_layers = len(validation)
    data = {}
    for kind in SETS:
        mean = {"validation": validation, "ood_structure": ood_structure}.get(kind, [0.9] * n_layers)
        # SD 0.01 over draws: SE ~0.004, far below the 0.1 margins the tests use
        acc = np.asarray(mean)[None, :] + 0.01 * rng.standard_normal((n_draws, n_layers))
        data[f"accuracy_{kind}"] = (("draw", "layer"), np.clip(acc, 0, 1))
        data[f"positive_rate_{kind}"] = (("draw", "layer"), np.full((n_draws, n_layers), 0.5))
        data[f"auc_{kind}"] = (("draw", "layer"), np.full((n_draws, n_layers), auc) + 0.01 * rng.random((n_draws, 1)))
    if rate is not None:
        for kind, layer, value in rate:
            data[f"positive_rate_{kind}"][1][:, layer] = value
    for name in ("key_accuracy_ood_both", "value_accuracy_ood_tokens"):
        data[name] = (("draw", "layer"), np.full((n_draws, n_layers), 0.9) + 0.01 * rng.random((n_draws, 1)))
    shape = (n_draws, n_layers - 1, 2)
    uniform = np.full(shape, 0.1)
    data["attn_target"] = (("draw", "attn_layer", "head"), uniform * (2 + 0.01 * rng.random(shape)))
    data["attn_distractor"] = (("draw", "attn_layer", "head"), uniform * 0.5)
    data["attn_uniform"] = (("draw", "attn_layer", "head"), uniform)
    return xr.Dataset(data, attrs={"n_train": 800, "width": 16})


def _structure_check(checks):
    (c,) = [c for c in checks if "OOD structure well above" in c.name]
    return c


def test_layer_is_chosen_on_validation_never_on_the_test_sets():
    # layer 2 best on validation; the OOD set is best at layer 3, which must not pull the choice
    ds = _dataset([0.5, 0.8, 0.97, 0.9], [0.5, 0.7, 0.8, 0.99])
    assert select_layer(ds) == 2
    c = _structure_check(checks_fig1(ds))
    assert "layer 2" in c.name and c.passed and c.status == "holds"


def test_a_layer_whose_probe_predicts_one_class_on_validation_is_refused():
    ds = _dataset([0.5, 0.8, 0.97, 0.9], [0.5, 0.7, 0.8, 0.8], rate=[("validation", 2, 1.0)])
    assert select_layer(ds) == 3
    refused = _dataset([0.5, 0.8, 0.97, 0.9], [0.5] * 4, rate=[("validation", lv, 0.0) for lv in (1, 2, 3)])
    assert select_layer(refused) is None
    (c,) = [c for c in checks_fig1(refused) if "validation split" in c.name]
    assert not c.passed and c.status == "fails"


def test_a_test_set_at_chance_at_the_chosen_layer_disagrees_with_its_measured_cause():
    # constant predictions on the OOD set at the chosen layer, direction still ranks (AUC 0.9): offset cause
    ds = _dataset([0.5, 0.8, 0.97, 0.9], [0.5, 0.7, 0.5, 0.8], rate=[("ood_structure", 2, 1.0)])
    c = _structure_check(checks_fig1(ds))
    assert not c.passed and c.status == "disagrees"
    assert "8/8 draws" in c.explanation.evidence and "offset does not transfer" in c.explanation.reason
    # control: no constant predictions and no ranking (AUC 0.5): the other cause is named
    flat = _dataset([0.5, 0.8, 0.97, 0.9], [0.5, 0.7, 0.5, 0.8], auc=0.5)
    c = _structure_check(checks_fig1(flat))
    assert (
        not c.passed and "0/8 draws" in c.explanation.evidence and "no ranking of their labels" in c.explanation.reason
    )
