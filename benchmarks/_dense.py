"""Dense saves through a public map or flow: the same call saving every step against saving the final state only.

Issue goal: saving every step costs at most 2x the final-only call (the model's observables included), i.e. the
dense call's throughput is >= 0.5x the final-only one's, both timed in the same run in process CPU time.
"""

from __future__ import annotations

from benchmarks._common import Result, cpu_time
from dynamics import SaveAt


def dense_save_result(name: str, call, n_steps: int, n_traj: int, *, dense=None, repeat: int = 3) -> Result:
    """Time ``call(saveat)`` with ``dense`` (default ``SaveAt(every=1)``) and with ``SaveAt(final=True)``.

    Returns a Result whose value is the dense call's trajectory-steps per CPU second and whose baseline is the
    final-only call's; the ratio (dense / final throughput) has the goal 0.5 next to it."""
    dense = SaveAt(every=1) if dense is None else dense
    t_final = cpu_time(lambda: call(SaveAt(final=True)), repeat=repeat)
    t_dense = cpu_time(lambda: call(dense), repeat=repeat)
    work = n_traj * n_steps
    return Result(
        name=f"dense saves: {name}",
        unit="trajectory-steps/s per core",
        value=work / t_dense,
        baseline=work / t_final,
        baseline_name="the same call saving the final state only",
        target_ratio=0.5,
        note=f"dense {t_dense * 1e3:.1f} ms, final only {t_final * 1e3:.1f} ms CPU: "
        f"{t_dense / t_final:.2f}x (goal <= 2x)",
    )
