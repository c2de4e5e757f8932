"""Every model's public maps and flows, and the engine's solvers, against arrays stored before the engine's driver
and kernel signature changed (``tools/reference_runs.py`` wrote ``tests/data/reference_runs.npz``).

The reference is the earlier code's output, an independent computation with respect to any later change: each
variable, coordinate and diagnostic must be equal bit for bit (NaN where NaN), and no variable may appear or vanish.
"""

from __future__ import annotations

import pathlib
import sys
import warnings

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import reference_runs  # noqa: E402

with np.load(reference_runs.OUT, allow_pickle=False) as _f:
    STORED = {k: _f[k] for k in _f.files}
RUNS = sorted({k.split("/")[0] for k in STORED})


# single_location's risk observables are now computed inside the compiled loop (the same formula, its terms summed in
# another order) instead of a Python pass over the saved states: it agrees to a few ulp (measured: 1.3 ulp, relative
# 2.9e-16), while the states themselves stay bit for bit. 8 ulp of a risk of order 1: 8 * 2.2e-16.
SUMMED_IN_THE_LOOP = {(run, var) for run in ("sl_five", "sl_five_stop") for var in ("risk", "excess_risk")}
SUMMED_RTOL = 8 * np.finfo(np.float64).eps


@pytest.fixture(scope="module")
def calls():
    return reference_runs.runs()


def test_every_run_is_stored(calls):
    assert sorted(calls) == RUNS


@pytest.mark.parametrize("name", RUNS)
def test_run_equals_stored_reference_bit_for_bit(calls, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = reference_runs.arrays(calls[name]())
    want = {k.split("/", 1)[1]: v for k, v in STORED.items() if k.split("/")[0] == name}
    assert sorted(got) == sorted(want)
    for var, ref in want.items():
        assert got[var].dtype == ref.dtype, var
        if (name, var) in SUMMED_IN_THE_LOOP:
            np.testing.assert_allclose(got[var], ref, rtol=SUMMED_RTOL, atol=0, err_msg=f"{name}/{var}")
            continue
        np.testing.assert_array_equal(got[var], ref, err_msg=f"{name}/{var}", strict=True)


def test_a_changed_result_is_detected(calls):
    # the comparison must reject a one-ulp change of a single entry
    ref = STORED["engine_henon/y0"]
    bad = ref.copy()
    bad.flat[3] = np.nextafter(bad.flat[3], np.inf)
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(bad, ref, strict=True)
