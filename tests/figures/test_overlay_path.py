"""One overlay path: a figure function that puts a torch run next to reduced dynamics it runs itself goes through
:func:`dynamics.overlay.overlay` (theory started from each learned seed's own state, save points matched), found by
reading the figure modules' syntax trees.

A function *builds an overlay* when it reaches the trainer (``train`` of :mod:`figures.experiments`, directly or
through functions of its own figure package) and runs reduced dynamics (a ``map`` / ``flow`` / ``symmetric_flow`` of a
:mod:`closedform` module, directly or through its package's functions), and none of the functions it calls does both
already (the innermost such function is the one that must call ``overlay``). A function named ``*overlay*`` that
runs reduced dynamics counts too. One list names the exceptions, each with its reason: population theory (the
reduced dynamics are not started from a learned seed's state, by design; the comparison is unpaired, through
:func:`figures.registry.compare_rows`).
"""

from __future__ import annotations

import ast
from pathlib import Path

FIGURES = Path(__file__).resolve().parents[2] / "figures"
THEORY_RUNS = ("map", "flow", "symmetric_flow")
TRAINERS = {"train", "train_many", "train_1t"}  # figures.experiments.train and train_many; scan_snap's 1-thread train

# reduced dynamics of the population, not started from the learned seeds: compared unpaired (compare_rows)
POPULATION = {
    "group_sparse/pretrain.py:_pretrain_data": "population map of §B.3 on independent proxies vs finite-n GD",
    "group_sparse/overlay.py:data_overlay": "population map of §B.3 on independent proxies vs finite-n GD",
    "group_sparse/downstream.py:data_downstream": "population map to T_pre and T_theory, then downstream transfer",
    "scan_snap/syn_small.py:data_fig4": "momentum population map of §4.3 vs SGD at finite T and batch",
    "scan_snap/syn_small.py:data_gap_T": "population map vs SGD: the gap itself is the measured quantity",
    "scan_snap/syn_medium.py:_compute_medium_runs": "random-init population map vs SGD on the entropy grid",
}


def _calls(node) -> set[str]:
    out = set()
    for c in ast.walk(node):
        if isinstance(c, ast.Call):
            f = c.func
            out.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return out


def _theory_calls(node, aliases: set[str]) -> bool:
    return any(
        isinstance(c, ast.Call)
        and isinstance(c.func, ast.Attribute)
        and isinstance(c.func.value, ast.Name)
        and c.func.value.id in aliases
        and c.func.attr in THEORY_RUNS
        for c in ast.walk(node)
    )


def _closure(functions, seed: set[str]) -> set[str]:
    names = set(seed)
    changed = True
    while changed:
        changed = False
        for _, fn, _, _ in functions:
            if fn.name not in names and _calls(fn) & names:
                names.add(fn.name)
                changed = True
    return names


def overlay_builders(root: Path) -> dict[str, bool]:
    """``"<relative path>:<function>" -> calls dynamics.overlay`` for every function under ``root`` that builds an
    overlay (module docstring); functions are grouped by figure package (a flat module is its own package)."""
    packages: dict[str, list] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases, has_overlay = set(), False
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module == "closedform":
                aliases |= {a.asname or a.name for a in n.names}
            if isinstance(n, ast.ImportFrom) and n.module == "dynamics.overlay":
                has_overlay = has_overlay or any(a.name == "overlay" for a in n.names)
        package = path.parent.name if path.parent != root else path.stem
        for n in ast.walk(tree):
            if isinstance(n, ast.FunctionDef):
                packages.setdefault(package, []).append((path, n, aliases, has_overlay))
    found = {}
    for functions in packages.values():
        direct = {fn.name for _, fn, aliases, _ in functions if _theory_calls(fn, aliases)}
        trains, runs = _closure(functions, TRAINERS), _closure(functions, direct)
        both = {
            fn.name for _, fn, _, _ in functions if _calls(fn) & trains and (fn.name in direct or _calls(fn) & runs)
        }
        for path, fn, aliases, has_overlay in functions:
            named = "overlay" in fn.name.lower() and fn.name in direct
            if not (fn.name in both or named) or (_calls(fn) & both and not named):
                continue  # not an overlay, or one of the functions it calls builds it
            key = f"{path.relative_to(root).as_posix()}:{fn.name}"
            found[key] = has_overlay and "overlay" in _calls(fn)
    return found


def test_every_overlay_goes_through_dynamics_overlay():
    found = overlay_builders(FIGURES)
    hand_written = sorted(k for k, ok in found.items() if not ok and k not in POPULATION)
    assert hand_written == [], f"overlays built without dynamics.overlay: {hand_written}"
    # nearest_neighbor Figs. 3 and overlay, single_location Fig. 5, the random_walk runs, icl_regression's GD on F/2
    assert sum(found.values()) >= 5
    stale = sorted(k for k in POPULATION if k not in found or found[k])
    assert stale == [], f"listed as exceptions but no longer hand-written overlays: {stale}"


def test_the_overlay_check_catches_a_hand_written_overlay(tmp_path):
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "_common.py").write_text(
        "from figures.experiments import train\n\ndef _run(cfg):\n    return train(None, None)\n", encoding="utf-8"
    )
    (pkg / "fig.py").write_text(
        "from closedform import toy as cf\nfrom dynamics.overlay import overlay\n"
        "from toy._common import _run\n\n"
        "def data_hand(cfg):\n    learned = _run(cfg)\n    return learned, cf.map(None, 10)\n\n"
        "def data_paired(cfg):\n    learned = _run(cfg)\n    return overlay(lambda s, at: cf.map(s, at), learned)\n\n"
        "def data_theory_only(cfg):\n    return cf.flow(None, 1.0)\n",
        encoding="utf-8",
    )
    assert overlay_builders(tmp_path) == {"toy/fig.py:data_hand": False, "toy/fig.py:data_paired": True}
