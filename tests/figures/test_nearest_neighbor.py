"""Tests of the Study A figures (figures/nearest_neighbor/; spec token_selection.md Sec. A.9, Sec. 5).

Each registered figure is built once at the ``tiny`` preset (no cache) and checked for: the variables the plot needs,
the build time, well-formed gap rows and checks (helpers in tests/_figures.py; the non-blank PNG of every figure is
checked by tests/figures/test_framework.py), and an independent recomputation of one number per figure:
* fig1: the 1-NN map equals a brute-force nearest-point search on the sphere; the plotted prediction equals the
  closed form's numpy forward pass (closedform.nearest_neighbor.forward) at W = diag(xi1 I, 0, -xi2);
* fig2: grid values equal closedform.nearest_neighbor.reduced_loss; L(0, 0) = 0.38 exactly (q = 1/5, Appendix R);
* fig3: the reduced curves equal a fresh map on the same seeds' population sample; the checks report the
  proof's ratio bound as [not reproduced] (measured truth);
* overlay: step 0 is W^(0) for the merged model (off = 0, xi2 = sigma) and a random start off the family for the
  factorised one; the gap rows are paired over seeds.
"""

from __future__ import annotations

import numpy as np
import pytest

from closedform import nearest_neighbor as cf
from figures import registry
from figures.registry import GapRow
from tests._figures import build_tiny, check_tiny_build

NAMES = ("nearest_neighbor.fig1", "nearest_neighbor.fig2", "nearest_neighbor.fig3", "nearest_neighbor.overlay")
# The tiny preset must build in <= 10 s on an idle 2-core machine (project budget); the shared test machine is ~3x
# slower under contention and the first build in a process pays torch's deterministic-mode import: 60 s flags a
# regression (e.g. a paper-size parameter in the tiny preset) without failing on load.
TINY_BUDGET_S = 60.0


@pytest.fixture(scope="module")
def built():
    return build_tiny(NAMES)


def test_all_figures_registered_with_presets_and_captions():
    registry.discover()
    assert set(NAMES) <= set(registry.REGISTRY.names("nearest_neighbor"))
    for name in NAMES:
        spec = registry.REGISTRY.get(name)
        assert spec.checks is not None
        assert "Not recoverable from the paper" in spec.full_caption  # [U]/reconstructed choices stated
    for name in NAMES[1:]:
        assert registry.REGISTRY.get(name).gaps is not None


@pytest.mark.parametrize("name", NAMES)
def test_tiny_build_plot_gaps_checks(built, name):
    res = check_tiny_build(built, name, TINY_BUDGET_S, gaps=False)
    if res.spec.gaps is not None:
        rows = res.spec.gaps(res.dataset)
        assert rows and all(isinstance(r, GapRow) for r in rows)
        assert all(np.isfinite(r.gap_se) or r.se == 0 for r in rows)


def test_fig1_maps_equal_brute_force_and_the_numpy_forward_pass(built):
    ds = built["nearest_neighbor.fig1"][0].dataset
    X, y = ds.points.values, ds.labels.values
    lat, lon = ds.lat.values, ds.lon.values
    i, j = 3, 7  # one grid point, recomputed independently
    xq = np.array([np.cos(lat[i]) * np.cos(lon[j]), np.cos(lat[i]) * np.sin(lon[j]), np.sin(lat[i])])
    dist2 = np.sum((X - xq) ** 2, axis=1)  # ||x_j - x_q||^2 (Sec. A.1: argmin distance = argmax inner product)
    assert ds.nn_label.values[i, j] == y[np.argmin(dist2)]
    c = X @ xq
    prompts = cf.Prompts(X=X[None], xq=xq[None], c=c[None], istar=np.array([np.argmax(c)]), y=y[None])
    _, f = cf.forward(cf.family_W(3, float(ds.xi1), float(ds.xi2)), cf.embed(prompts))
    assert abs(float(ds.f_model.values[i, j]) - f[0]) <= 1e-12
    assert 0.5 <= float(ds.agreement) <= 1.0


def test_fig2_grid_equals_the_reduced_loss(built):
    res = built["nearest_neighbor.fig2"][0]
    ds = res.dataset
    assert abs(float(ds.L.values[0, 0]) - 0.38) <= 1e-12  # xi = 0: q = 1/5, L = 1/2 (4/25 - 2/5 + 1) (Appendix R)
    # the figure's own prompt sample (its documented stream), then one grid value recomputed from it
    prompts = cf.sample_prompts(
        cf.NearestNeighborTask(d=4, N=4, sigma=0.0, eta=1.0),
        ds.attrs["n_prompts"],
        res.config.generators("data", ["landscape"])["landscape"],
    )
    a, b = float(ds.xi1[5]), float(ds.xi2[3])
    assert abs(float(ds.L.sel(xi1=a, xi2=b)) - cf.reduced_loss(a, b, prompts)[0]) <= 1e-15
    assert ds.torch_L.dims == ("seed", "ref") and np.all(np.isfinite(ds.torch_L.values))


def test_fig3_reduced_curves_and_measured_truth_of_the_ratio_bound(built):
    res = built["nearest_neighbor.fig3"][0]
    ds = res.dataset
    assert ds.L_torch.dims == ("config", "seed_index", "step_torch")
    assert ds.step.values[-1] > ds.step_torch.values[-1]  # the cheap reduced map runs further
    assert set(ds.step_torch.values) <= set(ds.step.values)  # gaps compare on shared steps
    np.testing.assert_allclose(ds.time.values, 2.0 * ds.step.values)  # time = eta t, eta = 2 (Sec. 0)
    # t = 0 is W^(0): the reduced loss is the closed form at xi1 = 0 up to the MC sample (exactly: it is x-free)
    L0, _ = cf.loss_xi1_zero(int(ds.N[0]), float(ds.sigma[0]))
    assert abs(float(ds.L_reduced.values[0, 0]) - L0) <= 1e-12
    assert np.all(ds.xi1_torch.values[:, :, 0] == 0.0)
    checks = res.spec.checks(ds)
    names = [c.name for c in checks]
    # the paper's ratio bound, tested as stated: a violation is a 'disagrees' result, never a 'holds'
    assert any("7/15" in c.name and c.status in ("holds", "disagrees") for c in checks)
    assert any("only an upper bound" in n for n in names)


def test_overlay_starts_on_w0_and_gaps_are_paired(built):
    res = built["nearest_neighbor.overlay"][0]
    ds = res.dataset
    assert np.all(ds.off_merged.values[:, 0] == 0.0) and np.all(ds.xi2_merged.values[:, 0] == 5.0)
    assert np.all(ds.off_factorised.values[:, 0] > 0.5)  # i.i.d. factors: far from the family
    assert np.all(np.abs(ds.xi1_factorised.values[:, 0]) < 1e-3)  # W = W_K^T W_Q = O(0.01^2)
    rows = res.spec.gaps(ds)
    row = rows[0]
    idx = list(ds.step.values).index(int(row.time))
    assert abs(row.theory - ds.L_reduced.values[:, idx].mean()) <= 1e-15
    assert abs(row.mean - ds.L_merged.values[:, idx].mean()) <= 1e-12  # paired: the mean is the learned mean
