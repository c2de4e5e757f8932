"""The seed rule of the figures (figures/presets.py): streams spawned from (--seed, figure, run)."""

from __future__ import annotations

import numpy as np
import pytest

from closedform.models import names
from figures.presets import RunConfig, run_seed_sequence, run_seeds


def cfg(seed: int, figure: str = "random_walk.fig4") -> RunConfig:
    return RunConfig(figure=figure, preset="quick", seed=seed, params={}, code="")


def test_run_seeds_are_reproducible_distinct_and_prefix_stable():
    a = run_seeds(3, "scan_snap.fig4", "train", 16)
    assert a == run_seeds(3, "scan_snap.fig4", "train", 16)
    assert len(set(a)) == 16 and all(0 <= s < 2**31 for s in a)
    assert run_seeds(3, "scan_snap.fig4", "train", 4) == a[:4]  # more repeats keep the first ones


@pytest.mark.parametrize("figure", ["random_walk.fig4", "scan_snap.fig4", "icl_regression.fig1"])
def test_no_seed_is_shared_between_build_seeds_figures_or_runs(figure):
    """The known overlap of the old rule (``seed + k``: --seed 0 and --seed 1 shared all but one run) is gone: the
    trainer seeds of --seed 0-9, of two runs and of two figures, 64 repeats each, are pairwise disjoint."""
    seen: dict[int, tuple] = {}
    for seed in range(10):
        for run in ("walks", "train"):
            for fig in (figure, "single_location.fig5"):
                for s in run_seeds(seed, fig, run, 64):
                    assert s not in seen, (s, seen.get(s), (seed, fig, run))
                    seen[s] = (seed, fig, run)
    assert len(seen) == 10 * 2 * 2 * 64


def test_generators_are_independent_streams_per_run_and_seed():
    draws = {
        (seed, run): cfg(seed).generators(run, ["a"])["a"].standard_normal(4)
        for seed in (0, 1)
        for run in ("walks", "train")
    }
    keys = list(draws)
    for i, k in enumerate(keys):
        for k2 in keys[i + 1 :]:
            assert not np.array_equal(draws[k], draws[k2])
    np.testing.assert_array_equal(cfg(0).generators("walks", ["a"])["a"].standard_normal(4), draws[(0, "walks")])
    assert run_seed_sequence(0, "f.x", "r").spawn_key != run_seed_sequence(0, "f.x", "s").spawn_key


def test_random_walk_repeats_differ_between_build_seeds():
    from figures.random_walk import _common as random_walk

    s0, s1 = random_walk._seeds(cfg(0), 8), random_walk._seeds(cfg(1), 8)
    assert len(set(s0)) == 8 and not set(s0) & set(s1)


def test_bad_seed_arguments_are_refused():
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        run_seeds(-1, "f.x", "r", 2)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        run_seeds(0, "f.x", "r", 0)
    with pytest.raises(ValueError, match="non-empty strings"):
        run_seeds(0, "f.x", "", 2)


# Every figure module: each stream follows the rule (cfg.seeds / cfg.generators, or run_seeds / run_seed_sequence with
# the model as the figure for runs that several figures share).
RULED = (*names(builtin=True), "_atlas", "_icl_atlas", "_single_location_transformer", "_single_location_probing")


def _unruled(text: str) -> list[str]:
    """Lines of ``text`` that derive randomness from the build seed other than through the seed rule."""
    import re

    raw = [
        line
        for line in re.findall(r".*\bcfg\.seed\b(?!s).*", text)
        if not re.search(r"\b(run_seeds|run_seed_sequence)\(cfg\.seed, ", line)
    ]
    return raw + re.findall(r".*spawn_generators\((?!run_seed_sequence\().*", text)


def test_the_rule_check_catches_a_derived_seed():
    assert _unruled("seeds = tuple(1000 * cfg.seed + k for k in range(n))\n") != []
    assert _unruled("gens = spawn_generators(cfg.seed, ['a'])\n") != []
    assert _unruled("rng = np.random.default_rng(cfg.seed)\n") != []
    assert _unruled("seeds = cfg.seeds('train', n)\nss = run_seeds(cfg.seed, MODEL, 'train', n)\n") == []
    assert _unruled("g = spawn_generators(run_seed_sequence(cfg.seed, 'm', 'init'), ['init'])\n") == []


@pytest.mark.parametrize("model", RULED)
def test_ruled_figure_modules_draw_only_through_the_rule(model):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "figures"
    files = [root / f"{model}.py"] if (root / f"{model}.py").is_file() else sorted((root / model).rglob("*.py"))
    assert files, model
    text = "\n".join(f.read_text(encoding="utf-8") for f in files)
    assert _unruled(text) == []


def test_every_figure_module_is_ruled():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "figures"
    framework = {"__init__", "__main__", "_range_test", "_style", "cache", "estimate", "experiments", "params"}
    framework |= {"presets", "registry", "report", "runner", "_seed_checks"}
    found = {p.stem for p in root.glob("*.py")} | {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    assert found - framework == set(RULED)
