"""The code of the engine guide (docs/guides/engine.md) runs as printed, and the results its comments state hold,
each checked against a computation independent of the engine (a closed form, or the analytic curvature)."""

from __future__ import annotations

import pathlib
import re
import warnings

import numpy as np
import pytest

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guides" / "engine.md"


def _snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.DOTALL)


def test_the_guide_has_its_snippets():
    # cheap guard so that a reformatted page (fence style) does not silently skip the slow test below
    assert len(_snippets()) >= 8


@pytest.mark.slow  # compiles a dozen numba kernels and trains a torch model: about a minute on a loaded machine
def test_every_snippet_of_the_engine_guide_runs_and_its_comments_hold():
    ns: dict = {"__name__": "engine_guide"}
    runs = []  # the `run` each snippet leaves (the snippets reuse the name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for code in _snippets():
            exec(compile(code, str(GUIDE), "exec"), ns)  # noqa: S102 - the guide's own code, run as a reader would
            runs.append(ns.get("run"))
    assert any("5 of 9 trajectories ended unconverged" in str(w.message) for w in caught)
    quadratic, rotation, fitted, observed, run = runs[:5]

    # x_n = 0.3 + (x_0 - 0.3) 0.9^n: after 500 steps 0.9^500 ~ 1e-23, so only rounding of 0.3 remains
    np.testing.assert_allclose(quadratic.x.isel(time=-1).values, 0.3, atol=1e-14)
    # exact solution (cos t, sin t); Dopri5 at rtol 1e-10 / atol 1e-12 over 10 time units: global error << 1e-8
    np.testing.assert_allclose(rotation.x.values[0], np.cos(rotation.time.values), atol=1e-8)
    # GD on a noise-free least-squares problem: contraction <= ~0.6 per step over 300 steps leaves rounding only
    np.testing.assert_allclose(fitted.w.isel(time=-1).values, ns["W"], atol=1e-12)
    # the observable at step 0 (w = 0) is mean(y^2) / 2 of each trajectory's labels, computed here with numpy
    np.testing.assert_allclose(observed.loss.isel(time=0).values, 0.5 * np.mean(ns["Y"] ** 2, axis=1), rtol=1e-12)

    # logistic map: r = 2.5 converges to 1 - 1/r, r = 3.9 is chaotic
    assert run.converged.values.tolist() == [True] * 4 + [False] * 5
    # 1e-12: 2000 steps contract the error by |2 - r| = 0.5 per step; only rounding of x (~1e-16) remains
    np.testing.assert_allclose(run.y0.isel(time=-1).values[:4], 1 - 1 / 2.5, atol=1e-12)

    # least squares with noise-free labels: each teacher W[i] is a fixed point of the step that reads its own row
    # of labels (the per-trajectory channel), and a wrong row (teacher i + 1) is not
    W, X, Y, step = ns["W"], ns["X"], ns["Y"], ns["least_squares"]
    out = np.empty(3)
    for i in range(W.shape[0]):
        step(0, W[i], np.array([0.5]), (X, Y[(i + 1) % W.shape[0]]), out)
        assert np.max(np.abs(out - W[i])) > 1e-3
        step(0, W[i], np.array([0.5]), (X, Y[i]), out)
        np.testing.assert_allclose(out, W[i], atol=1e-12)  # residuals X W - y are ~1e-15: rounding only

    # double well: x = +-1 has curvature 2, y curvature 1; GD stops attracting at step 2 / max curvature = 1
    points = ns["points"]
    assert [fp.stability for fp in points].count("attracting") == 2
    assert sum(fp.stability == "saddle" for fp in points) == 1
    for fp in points:
        if fp.stability == "attracting":
            np.testing.assert_allclose(abs(fp.state[0]), 1.0, atol=1e-10)  # root tolerance tol=1e-12 in residual
            # central differences: relative error ~1e-10 (eps^(2/3) times derivatives of order one)
            assert abs(fp.max_step - 1.0) < 1e-8

    # torch trains G (d x d) with lr; k = tr G / d follows k_n = 1 - (1 - lr / d)^n, the 1/d reduced map
    d, lr = ns["d"], ns["lr"]
    steps = ns["learned"].step.values
    closed = 1.0 - (1.0 - lr / d) ** steps
    np.testing.assert_allclose(ns["learned"].k.values[0], closed, rtol=1e-12)  # float64: rounding only
    np.testing.assert_allclose(ns["right"].k.values[0], closed, rtol=1e-12)
    wrong_gap = np.max(np.abs(ns["wrong"].k.values[0] - closed))
    assert wrong_gap > 0.5  # the map with step lr (not lr / d) is visibly off: 0.969 vs 0.226 after 5 steps
