"""dynamics.testing: the public formula-testing helpers accept right formulas and reject wrong ones.

Independent references: exact Gaussian moments (the Monte Carlo rule), analytic derivatives of elementary functions
(the finite-difference rule), and the calibration of the MC rule's false-alarm rate by simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from dynamics import testing as dt


def test_mc_rule_accepts_the_truth_and_rejects_a_wrong_mean():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20_000, 3)) * [1.0, 2.0, 0.5] + [0.0, 1.0, -1.0]
    mean, se = dt.mean_and_se(x)
    dt.assert_mc_close(mean, se, [0.0, 1.0, -1.0])
    # a wrong formula off by ~10 SE in the 2nd component (SE = 2 / sqrt(20000) = 0.014)
    dt.assert_mc_rejects(mean, se, [0.0, 1.15, -1.0])
    with pytest.raises(AssertionError, match="gap"):
        dt.assert_mc_close(mean, se, [0.0, 1.15, -1.0])
    with pytest.raises(AssertionError, match="NOT rejected"):
        dt.assert_mc_rejects(mean, se, [0.0, 1.0, -1.0])


def test_mc_level_sets_the_false_alarm_rate():
    """Calibration by simulation: with level = 0.05 the rule fires on ~5 % of exact-mean samples."""
    assert dt.n_se_for_level(5.733e-7) == pytest.approx(5.0, abs=1e-3)
    rng = np.random.default_rng(1)
    n_rep, n = 4000, 200
    fires = 0
    for _ in range(n_rep):
        mean, se = dt.mean_and_se(rng.standard_normal(n))
        try:
            dt.assert_mc_close(mean, se, 0.0, level=0.05)
        except AssertionError:
            fires += 1
    # binomial(4000, p): SE of the rate 0.0035 at p = 0.05; the t-vs-normal excess at n = 200 is ~0.001; 5 SE band
    assert abs(fires / n_rep - 0.05) < 5 * 0.0035 + 0.001
    with pytest.raises(ValueError, match="level"):
        dt.assert_mc_close(0.0, 1.0, 0.0, level=1.5)


def test_jacobian_rule_accepts_exact_derivatives_and_rejects_wrong_ones():
    f = lambda z: np.array([np.sin(z[0]) * z[1], np.exp(z[0] - z[1])])  # noqa: E731
    x = np.array([0.3, -0.7])
    J = np.array([[np.cos(x[0]) * x[1], np.sin(x[0])], [np.exp(x[0] - x[1]), -np.exp(x[0] - x[1])]])
    assert dt.assert_jacobian_close(J, f, x) <= 1.0
    wrong = J.copy()
    wrong[1, 1] *= -1  # one sign
    with pytest.raises(AssertionError, match=r"entry \(1, 1\)"):
        dt.assert_jacobian_close(wrong, f, x)
    g = lambda z: float(np.sum(z**3))  # noqa: E731  scalar -> gradient
    dt.assert_jacobian_close(3 * x**2, g, x, third=6.0)
    with pytest.raises(AssertionError):
        dt.assert_jacobian_close(2 * x**2, g, x, third=6.0)  # one factor


def test_formula_and_reduction_rules():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal((1000, 4))
    cand = ref * (1 + 1e-14 * rng.standard_normal(ref.shape))
    assert dt.assert_formula_close(cand, ref, rtol=1e-12) < 1e-12
    wrong = ref.copy()
    wrong[:, 2] *= 1.001
    dt.assert_formula_rejects(wrong, ref, rtol=1e-12)
    with pytest.raises(AssertionError, match="relative error"):
        dt.assert_formula_close(wrong, ref, rtol=1e-12)
    # NaN never passes
    bad = ref.copy()
    bad[5, 0] = np.nan
    with pytest.raises(AssertionError):
        dt.assert_formula_close(bad, ref)
    full = {"a": ref[:, 0], "b": ref[:, 1]}
    dt.assert_reduction_close({"a": ref[:, 0] * (1 + 1e-13)}, full, rtol=1e-12)
    with pytest.raises(AssertionError, match="a at index"):
        dt.assert_reduction_close({"a": ref[:, 0] + 1e-6}, full, rtol=1e-12)
    with pytest.raises(ValueError, match="names"):
        dt.assert_reduction_close({"c": ref[:, 0]}, full)


def test_tests_stats_reexports_the_public_helpers():
    from tests import _stats

    assert _stats.assert_mc_close is dt.assert_mc_close and _stats.assert_t_close is dt.assert_t_close
    assert norm.isf(5.733e-7 / 2) == pytest.approx(5.0, abs=1e-3)


def test_the_own_model_guide_runs_its_testing_example():
    """The code of "Testing the formulas" in docs/guides/own_model.md runs as printed on the seventh model (the
    example package, installed as in CI): its Monte Carlo check passes, its wrong formula is rejected, its gradient
    check accepts the flow at unit steps and rejects the full-matrix flow."""
    import pathlib
    import re

    pytest.importorskip("attndyn_linear_attention")
    guide = pathlib.Path(__file__).parents[2] / "docs" / "guides" / "own_model.md"
    section = guide.read_text().split("## Testing the formulas", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the section shows one python block"
    exec(compile(blocks[0], str(guide), "exec"), {"__name__": "own_model_guide"})


def test_the_formula_message_names_the_worst_point():
    """Three points, the last one off by 1/6 relative: the message names point 2 and the count of failing points."""
    cand, ref = np.array([[1.0], [2.0], [3.5]]), np.array([[1.0], [2.0], [3.0]])
    with pytest.raises(AssertionError, match=r"relative error 0.167 > 1e-12 at point 2 \(worst of 3; 1 points fail\)"):
        dt.assert_formula_close(cand, ref)
