"""The seventh model added as a user would (examples/linear_attention): registered through the entry point, seen by
the registry, the CLI and the report, built from public names only, and its maths checked independently."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from closedform import models as M

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "linear_attention"
PACKAGE = EXAMPLE / "attndyn_linear_attention"
NAME = "linear_attention"


def _install_metadata(where: Path) -> None:
    """What ``pip install -e examples/linear_attention`` records for the entry points, written into ``where``."""
    meta = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    info = where / "attndyn_linear_attention-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
    eps = meta["entry-points"][M.ENTRY_POINT_GROUP]
    (info / "entry_points.txt").write_text(
        f"[{M.ENTRY_POINT_GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
    )


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The example as if pip-installed (unless it is): its metadata and source on sys.path and in PYTHONPATH."""
    site = tmp_path / "site"
    site.mkdir()
    _install_metadata(site)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(site))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(EXAMPLE), str(ROOT)]), MPLBACKEND="Agg")
    M.refresh()
    yield env
    monkeypatch.undo()
    M.refresh()


def test_the_entry_point_registers_the_model(installed):
    assert NAME in M.names() and NAME not in M.names(builtin=True)
    record = M.get(NAME)
    assert record.state_names == ("k", "v") and record.figures == "attndyn_linear_attention.figure"
    assert callable(record.resolve("step")) and callable(record.resolve("rhs"))


@pytest.mark.slow
def test_the_cli_lists_the_model(installed):
    """``python -m figures list`` in a fresh process (~20 s: it imports every figure module)."""
    out = subprocess.run(
        [sys.executable, "-m", "figures", "list", "--model", NAME],
        env=installed,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith(f"{NAME}  (1 figures)") and f"{NAME}.overlay" in out


@pytest.mark.slow
def test_make_and_report_include_the_model(installed, tmp_path):
    """``make <model>.<figure>`` and ``report --include <model>`` at the tiny preset (~1 min on 2 cores)."""
    common = ["--preset", "tiny", "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--no-progress"]
    subprocess.run(
        [sys.executable, "-m", "figures", "make", f"{NAME}.overlay", "--out", str(tmp_path / "out"), *common],
        env=installed,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    assert (tmp_path / "out" / f"{NAME}.overlay.png").is_file()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "figures",
            "report",
            "--include",
            NAME,
            "--out",
            str(tmp_path / "rep"),
            "--jobs",
            "1",
            *common,
        ],
        env=installed,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    text = json.dumps(summary)
    assert f"{NAME}.overlay" in text and "single_location." not in text
    assert (tmp_path / "rep" / "report.html").read_text().count(f"{NAME}.overlay") >= 1


# -- the example uses attndyn's public names only, and attndyn does not know it ----------------------------------
_PACKAGES = ("dynamics", "closedform", "empirical", "figures")


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


def test_the_example_imports_only_public_names():
    bad = []
    for path in sorted(PACKAGE.glob("*.py")):
        for module, names in _imports(path):
            if module.split(".")[0] not in _PACKAGES:
                continue
            if any(part.startswith("_") for part in module.split(".")):
                bad.append(f"{path.name}: {module}")
            mod = importlib.import_module(module)
            public = getattr(mod, "__all__", None)
            for name in names:
                if name.startswith("_") or (
                    public is not None and name not in public and not importlib.util.find_spec(f"{module}.{name}")
                ):
                    bad.append(f"{path.name}: {module}.{name}")
    assert not bad, f"private names used by the example: {bad}"


def test_attndyn_packages_do_not_know_the_example():
    hits = [
        str(p.relative_to(ROOT))
        for pkg in _PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if "attndyn_linear_attention" in p.read_text(encoding="utf-8")
    ]
    assert not hits


# -- the model's maths, checked independently ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def la():
    sys.path.insert(0, str(EXAMPLE))
    try:
        yield importlib.import_module("attndyn_linear_attention.model")
    finally:
        sys.path.remove(str(EXAMPLE))


def test_reduced_map_is_gradient_descent_on_the_sympy_risk(la):
    task = la.Task(d=8, N=16)
    k, v = sp.symbols("k v")
    R = 1 + task.s2 - 2 * k * v + task.c * (k * v) ** 2 + sp.Rational(1, 2) * task.lam * (k**2 + v**2)
    gk, gv = (sp.lambdify((k, v), sp.diff(R, s)) for s in (k, v))
    lr, x = 0.2, np.array([0.1, 0.3])
    want = [x.copy()]
    for _ in range(50):
        x = np.array([x[0] - lr / task.d * gk(*x), x[1] - lr * gv(*x)])
        want.append(x)
    got = la.reduced_map(task, np.array([[0.1, 0.3]]), lr, np.arange(51))
    np.testing.assert_allclose(np.stack([got.k.values[0], got.v.values[0]], 1), want, rtol=1e-13)  # rounding only


def test_fixed_points_match_the_closed_form(la):
    task = la.Task(d=8, N=16)
    pts = sorted(la.fixed_points(task), key=lambda fp: fp.state[0])
    ks = la.theorem_predictions(task)["k_star"]
    np.testing.assert_allclose([fp.state for fp in pts], [[-ks, -ks], [0, 0], [ks, ks]], atol=1e-10)
    assert [fp.stability for fp in pts] == ["attracting", "saddle", "attracting"]


def test_torch_gradient_of_the_full_matrix_is_one_over_d_of_dR_dk(la):
    """Monte Carlo: the mean gradient of the torch loss on Gamma's diagonal at Gamma = k I is (1/d) dR/dk; the
    gradient without 1/d (the preconditioning trap) is rejected. Tolerance: 5 standard errors over 16 batches."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(EXAMPLE))
    try:
        from attndyn_linear_attention.torch_model import build
    finally:
        sys.path.remove(str(EXAMPLE))
    task, (k0, v0) = la.Task(d=8, N=16), (0.4, 0.3)
    model = build(task, k0, v0)
    gens = [torch.Generator().manual_seed(s) for s in range(16)]  # 16 independent batches as 16 "seeds"
    batch = model.sample(gens, 4096, device="cpu", dtype=torch.float64)
    params = {n: t.requires_grad_(True) for n, t in model.init_params(gens, device="cpu", dtype=torch.float64).items()}
    model.loss(params, batch, {}).sum().backward()
    diag = torch.diagonal(params["Gamma"].grad, dim1=1, dim2=2).mean(-1).numpy()  # (16,)
    dRdk = la._grad(np.array([k0, v0]), la.params(task, 1.0))[0]
    se = diag.std(ddof=1) / np.sqrt(diag.size)
    assert abs(diag.mean() - dRdk / task.d) < 5 * se
    assert abs(diag.mean() - dRdk) > 5 * se
