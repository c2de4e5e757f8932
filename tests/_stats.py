"""The suite's statistical assertions are the public ones of :mod:`dynamics.testing` (re-exported here for test
modules that still import them from this file)."""

from dynamics.testing import assert_mc_close, assert_mc_rejects, assert_t_close, mc_gap_in_se, mean_and_se

__all__ = ["assert_mc_close", "assert_mc_rejects", "assert_t_close", "mc_gap_in_se", "mean_and_se"]
