"""Convergence diagnostics of a run: converged, still converging, or not converging (docs/guides/engine.md).

Every :func:`dynamics.iterate` / :func:`dynamics.integrate` result carries three per-trajectory variables:

* ``final_step_norm``: the max-norm of the last update (maps) or of the vector field at the final state (flows);
* ``converged``: ``final_step_norm < convergence_tol``;
* ``step_norm_trend``: how the last half of the run behaves, from the step norm sampled by the compiled loop at
  the fractions :data:`TAIL_FRACTIONS` of the run (the end included; for maps the largest step norm of the
  :data:`BLOCK_STEPS` steps ending there) and from the state's displacement over that half compared with the path
  the sampled step norms add up to (its *efficiency*):

  - ``-1`` *still converging*: the largest sample of the last third is at most :data:`TREND_RATIO` times the
    largest of the first third, and the state moves steadily (efficiency >= :data:`WANDER_EFFICIENCY`) or the step
    norm falls by :data:`STRONG_DECAY` or more (an oscillating approach); more steps help;
  - ``+1`` *not converging*: the step norm does not fall and the state wanders without getting anywhere
    (efficiency < :data:`WANDER_EFFICIENCY`): a cycle or chaos; more steps do not help;
  - ``2`` *drifting*: the step norm does not fall but the state moves steadily: growth without bound, a slow
    phase, or the run ended inside a transition;
  - ``0``: a map or fixed-step flow of fewer than :data:`MIN_STEPS` steps, too few samples, or a sample that is
    not finite.

:func:`convergence_warning` turns these into one ``RuntimeWarning``; the model modules (``closedform.<model>.map`` /
``flow``) call it by default, each with its own threshold and policy.
"""

from __future__ import annotations

import os
import pathlib
import sys
import warnings

import numpy as np

__all__ = [
    "BLOCK_STEPS",
    "DEFAULT_CONVERGENCE_TOL",
    "MIN_STEPS",
    "STRONG_DECAY",
    "TAIL_FRACTIONS",
    "TREND_RATIO",
    "UnconvergedWarning",
    "WANDER_EFFICIENCY",
    "block_samples",
    "check_run",
    "convergence_warning",
    "step_norm_trend",
    "tail_blocks",
    "tail_points",
]

# Default of the engine's ``convergence_tol`` when neither it nor ``converged`` is given (absolute, max norm).
DEFAULT_CONVERGENCE_TOL = 1e-8

# Fractions of the run at which the step norm is sampled (the last half: early transients do not count).
TAIL_FRACTIONS = tuple(0.5 + i / 16 for i in range(9))

# Maps: each sample is the largest step norm over this many consecutive steps ending at a tail point, so that a
# decaying oscillation (heavy-ball ringing, a period-2 approach) is judged by its envelope, and a chaotic step norm
# by (nearly) its supremum rather than one random value.
BLOCK_STEPS = 8

# Maps and fixed-step flows shorter than this many steps get no trend (0): their tail blocks would overlap, and a
# handful of steps says little about cycles (16 steps between tail samples of 8-step blocks need 128).
MIN_STEPS = 128

# A run whose state moved, between the first tail sample and the end, by less than this fraction of the path its
# steps add up to is wandering (a cycle: displacement ~ 0 or one cycle width; chaos: bounded by the attractor, while
# the path grows with the number of steps); a steady approach or drift moves by a fraction near 1.
WANDER_EFFICIENCY = 0.1

# A wandering run still counts as converging when its step norm falls at least this much over the tail (an
# oscillating approach x* + c (-r)^k wanders but contracts).
STRONG_DECAY = 0.5

# "Still converging" needs the largest sample of the last third at most this fraction of the largest of the first
# third. A power-law decay of the step norm, |dx| ~ k^-a, gives about (0.53 / 0.92)^a over those blocks (0.76 for
# a = 1/2, 0.58 for a = 1); a cycle keeps it at 1 and chaos near its supremum (1 within a few per cent over 24
# steps), so 0.9 separates them with margin on both sides.
TREND_RATIO = 0.9


class UnconvergedWarning(RuntimeWarning):
    """A run ended unconverged (still converging, or oscillating/chaotic); see :func:`convergence_warning`."""


def tail_points(start, end, integer: bool):
    """The sample points ``start + f (end - start)`` for ``f`` in :data:`TAIL_FRACTIONS`, strictly after
    ``start`` (rounded to distinct integers when ``integer``).
    """
    pts = start + np.asarray(TAIL_FRACTIONS) * (end - start)
    if integer:
        pts = np.unique(np.rint(pts).astype(np.int64))
    return pts[pts > start]


def tail_blocks(start: int, end: int, width: int = BLOCK_STEPS) -> list[np.ndarray]:
    """The steps of each sample block: the ``width`` steps ending at each :func:`tail_points` step, within
    (start, end]; none for a run of fewer than :data:`MIN_STEPS` steps (its trend is then unknown, 0).
    """
    if end - start < MIN_STEPS:
        return []
    return [np.arange(max(int(p) - width + 1, start + 1), int(p) + 1) for p in tail_points(start, end, True)]


def block_samples(blocks, recorded: dict) -> tuple[list[np.ndarray], list[int]]:
    """Per block, the largest recorded step norm (``recorded``: step -> (n_traj,) step norms; NaN propagates), and
    the block's last step (blocks with nothing recorded, after an early stop, are left out).
    """
    out, ends = [], []
    for steps in blocks:
        got = [recorded[int(k)] for k in steps if int(k) in recorded]
        if got:
            out.append(np.max(np.stack(got), axis=0))
            ends.append(int(steps[-1]))
    return out, ends


def step_norm_trend(samples, points=None, displacement=None) -> np.ndarray:
    """Per-trajectory kind of ending (int8 codes, see the module docstring) from step-norm samples.

    Parameters
    ----------
    samples : (n_traj, m) step norms (maps: per step; flows: |f|, per unit time) in time order.
    points : (m,) steps or times of the samples; with ``displacement``, the path length over the samples is
        estimated as sum_i (points[i] - points[i-1]) samples[:, i] (an upper estimate: block maxima).
    displacement : (n_traj,) max-norm distance between the states at points[0] and at the end.
    """
    s = np.asarray(samples, dtype=np.float64)
    n_traj = s.shape[0]
    if s.ndim != 2 or s.shape[1] < 3:
        return np.zeros(n_traj, dtype=np.int8)
    third = s.shape[1] // 3
    late, early = s[:, -third:].max(axis=1), s[:, :third].max(axis=1)
    efficiency = np.ones(n_traj)
    if points is not None and displacement is not None:
        path = np.sum(np.diff(np.asarray(points, dtype=np.float64)) * s[:, 1:], axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            efficiency = np.where(path > 0, np.asarray(displacement, dtype=np.float64) / path, 1.0)
    with np.errstate(invalid="ignore"):
        decreasing = (late <= TREND_RATIO * early) & (
            (efficiency >= WANDER_EFFICIENCY) | (late <= STRONG_DECAY * early)
        )
        wandering = ~decreasing & (efficiency < WANDER_EFFICIENCY)
    trend = np.where(decreasing, -1, np.where(wandering, 1, 2)).astype(np.int8)
    trend[~(np.isfinite(s).all(axis=1) & np.isfinite(efficiency))] = 0
    return trend


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning issued here at the first frame outside ``dynamics`` and
    ``closedform`` (the user's call of the model function, whatever wrappers lie between).
    """
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIRS):
        frame = frame.f_back
        level += 1
    return level


_PACKAGE_DIRS = tuple(
    str(pathlib.Path(__file__).resolve().parent.parent / pkg) + os.sep for pkg in ("dynamics", "closedform")
)


def convergence_warning(
    traj, *, what: str, fixed_points: bool = True, tol: float | None = None, keyword: str = "warn_unconverged"
) -> str | None:
    """Warn (:class:`UnconvergedWarning`) when trajectories of ``traj`` ended unconverged; return the message.

    Parameters
    ----------
    traj : Trajectory with the variables ``converged``, ``final_step_norm`` and ``step_norm_trend``.
    what : name of the run in the message (e.g. ``"single_location.map"``).
    fixed_points : bool, default True
        The dynamics have fixed points at finite state: warn about every unconverged trajectory, naming how many
        are still converging (run longer) and how many are not (cycle, chaos); a run of fewer than
        :data:`MIN_STEPS` steps (trend 0) is not judged. False (the state grows without
        bound by design, e.g. logits that saturate a softmax, or the run ends by a stop condition): warn only
        about trajectories whose step norm is not decreasing.
    tol : the threshold of ``converged`` (named in the message).
    keyword : the argument that silences the warning, named in the message.

    Returns
    -------
    The message, or None when nothing was warned. The warning points at the first caller outside ``dynamics`` and
    ``closedform``.
    """
    ok = np.asarray(traj["converged"].values, dtype=bool)
    trend = np.asarray(traj["step_norm_trend"].values)
    norm = np.asarray(traj["final_step_norm"].values)
    bad = ~ok
    wandering = bad & (trend == 1)
    drifting = bad & (trend == 2)
    still = bad & (trend == -1)
    flagged = (bad & (trend != 0)) if fixed_points else wandering  # a run too short to judge is not flagged
    if not flagged.any():
        return None
    n = ok.size
    parts = []
    if wandering.any():
        parts.append(
            f"{int(wandering.sum())} of {n} trajectories are not converging (over the last half of the run "
            "the step norm did not fall while the state got nowhere: a cycle or chaos; final step norm up "
            f"to {np.nanmax(norm[wandering]):.3g}; lower the step size)"
        )
    if fixed_points and still.any():
        parts.append(
            f"{int(still.sum())} of {n} are still converging (final step norm up to "
            f"{np.nanmax(norm[still]):.3g}; run longer)"
        )
    if fixed_points and drifting.any():
        parts.append(
            f"{int(drifting.sum())} of {n} are still moving steadily with a step norm that did not fall "
            f"(final step norm up to {np.nanmax(norm[drifting]):.3g}; a slow phase or a transition)"
        )
    threshold = "" if tol is None else f" (converged: final step norm < {tol:.3g})"
    msg = (
        f"{what}: " + "; ".join(parts) + f"{threshold}. See the variables converged, final_step_norm and "
        f"step_norm_trend; pass {keyword}=False to silence this warning."
    )
    warnings.warn(msg, UnconvergedWarning, stacklevel=_caller_stacklevel())
    return msg


def check_run(traj, warn: bool, *, what: str, fixed_points: bool = True, tol: float | None = None):
    """Return ``traj`` after :func:`convergence_warning` when ``warn`` (the model functions' tail call)."""
    if warn:
        convergence_warning(traj, what=what, fixed_points=fixed_points, tol=tol)
    return traj
