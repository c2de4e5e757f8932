"""Head-pattern helpers of the icl_regression figures: split and near-dummy heads, the pattern checks, the
mu^T omega rows, the learned circuits and their heatmaps.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from closedform import icl_regression as cf
from dynamics.overlay import overlay
from empirical.models import icl_regression as im
from figures.registry import Explanation, compare_rows

from figures.icl_regression._common import (
    _consistency_check,
    _count_check,
    D,
    ETA_STAR,
    L_TRAIN,
    _run,
    S2,
    _same_sign_explanation,
    TASK,
)
from figures.icl_regression._gd_overlay import (
    _gd_on_half_F,
    _learned_arrays,
    _overlay_learned,
    _overlay_vars,
    _sorted_heads,
    GD_SAVE,
)

__all__ = ["NEAR_DUMMY", "NEAR_DUMMY_EXPL", "ZERO_SUM_TOL", "HOMOG_TOL", "MUDO_REL"]


# |mu_h| / max|mu|: a head above the dummy threshold 0.05 (docs/models/icl_regression.md §3) but still shrinking
# towards it
NEAR_DUMMY = 0.15
NEAR_DUMMY_EXPL = Explanation(
    reason="the seeds whose |omega_h| are not yet homogeneous each have a head in transit to a dummy head: |mu_h| "
    "between the dummy threshold 0.05 (docs/models/icl_regression.md §3, toolkit choice) and 0.15 of the largest "
    "|mu| and still "
    "shrinking at the last step, so it counts as active while its omega_h has not reached the common scale; "
    "dummy heads appear in real training, not in the flow of F (docs/models/icl_regression.md §10 item 9)",
    evidence="icl_regression.fig13: per-head mu_h curves of the H >= 3 runs (one seed shown); icl_regression.fig3: "
    "H = 4 head kinds",
)


def _split_heads(omega, mu):
    """(S,) bool: the final heads of each seed include a positive and a negative non-dummy head
    (docs/models/icl_regression.md §3).
    """
    pat = cf.classify_heads(omega, mu)
    return pat.positive.any(-1) & pat.negative.any(-1)


# |sum mu| / sum |mu|: formed pattern 0.0016 (docs/models/icl_regression.md §9 re-implementation), untrained init O(1)
ZERO_SUM_TOL = 0.05
# std/mean |omega_h|: formed pattern 0.01 (docs/models/icl_regression.md §9: omega = 0.132 / -0.132), untrained
# init O(1)
HOMOG_TOL = 0.1
# mu^T omega vs eta*: the true loss puts the learned point at 0.888 = 1.01 eta* (docs/models/icl_regression.md §9),
# twice that
MUDO_REL = 0.02


def _pattern_formed(omega, mu):
    """(S,) bool: the final heads of each seed (omega, mu: (S, H)) show the whole pattern of Observations 1-2: sign
    matching, and for H >= 2 a positive and a negative head, zero-sum OV (< :data:`ZERO_SUM_TOL`) and homogeneous
    |omega_h| (< :data:`HOMOG_TOL`) over the non-dummy heads.
    """
    pat = cf.classify_heads(omega, mu)
    ok = np.asarray(pat.sign_matched, dtype=bool)
    if np.shape(omega)[-1] >= 2:
        ok = ok & _split_heads(omega, mu) & (pat.zero_sum_rel < ZERO_SUM_TOL) & (pat.homogeneity < HOMOG_TOL)
    return ok


def _pattern_checks(ds, tag, *, H):
    """Observations 1-2 at the last logged step, one statistic each: sign matching, zero-sum OV and homogeneity
    (per-seed counts, one-sided binomial tests); mu^T omega -> eta* is a gap row.
    """
    om = ds.omega.values[:, -1]
    mu = ds.mu.values[:, -1]
    pat = cf.classify_heads(om, mu)
    split = _split_heads(om, mu)
    out = [
        _count_check(
            tag,
            pat.sign_matched,
            claim="sign matching sign(mu_h) = sign(omega_h) on non-dummy heads (Observation 1)",
            criterion="all non-dummy heads sign-matched",
        )
    ]
    if H >= 2:
        zs, hom = pat.zero_sum_rel < ZERO_SUM_TOL, pat.homogeneity < HOMOG_TOL
        out.append(
            _count_check(
                tag,
                zs,
                claim="zero-sum OV (Eq. (4.2))",
                criterion=f"|sum mu| / sum |mu| < {ZERO_SUM_TOL:g} (formed: 0.0016, docs/models/icl_regression.md §9)",
                explanation=_same_sign_explanation(zs, split) if H == 2 else None,
            )
        )
        share = np.abs(ds.mu.values) / np.abs(ds.mu.values).max(-1, keepdims=True)  # (seed, step, head)
        j = 3 * (share.shape[1] - 1) // 4  # shrinking: its share of |mu| fell over the last quarter of the run
        near_dummy = np.any(~pat.dummy & (share[:, -1] < NEAR_DUMMY) & (share[:, -1] < share[:, j]), axis=-1)
        out.append(
            _count_check(
                tag,
                hom,
                claim="homogeneous KQ scaling (Eq. (4.4))",
                criterion=f"std/mean |omega_h| over non-dummy heads < {HOMOG_TOL:g} (formed: 0.01, "
                "docs/models/icl_regression.md §9)",
                explanation=_pattern_explanation(hom, split, near_dummy, H),
            )
        )
    else:
        near_dummy = np.zeros(om.shape[0], dtype=bool)
    formed = _pattern_formed(om, mu)
    out.append(
        _consistency_check(
            tag,
            formed,
            claim="the whole pattern consistently appears (abstract; Observations 1-2)",
            criterion="sign matching"
            + (
                ", a positive and a negative head, zero-sum OV and homogeneous |omega_h| (criteria above)"
                if H >= 2
                else ""
            ),
            explanation=_pattern_explanation(formed, split, near_dummy, H),
        )
    )
    return out


def _pattern_explanation(ok, split, near_dummy, H):
    """The measured cause of the seeds that fail a pattern test, where one covers every failing seed: for H = 2 the
    same-sign basin (:data:`SAME_SIGN`), for H >= 3 a head still in transit to a dummy head (:data:`NEAR_DUMMY_EXPL`);
    else None.
    """
    if H == 2:
        return _same_sign_explanation(ok, split)
    if H >= 3 and not np.any(~np.asarray(ok) & ~np.asarray(near_dummy)):
        return NEAR_DUMMY_EXPL
    return None


def _mudo_rows(ds, tag):
    """mu^T omega at the last logged step against eta* (4.3): mean over seeds, Student-t interval."""
    pat = cf.classify_heads(ds.omega.values[:, -1:], ds.mu.values[:, -1:])
    return compare_rows(
        f"{tag}: mu^T omega vs eta* (4.3)",
        ds.step.values[-1:],
        [ETA_STAR],
        pat.mu_dot_omega,
        rel_allowance=MUDO_REL,
        allowance_source="2 x the 1 % offset of the true-loss optimum over "
        "F's (learned 0.888 vs eta* = 0.879 at 500k steps, docs/models/icl_regression.md §9, §10 item 4)",
        d=D,
    )


def _circuit_vars(model, traj, order):
    """Logged KQ (seed, step, head, row, col) and OV label rows (seed, step, head, col), heads in ``order``."""
    H, p = model.spec.H, model.spec.width
    KQ, OV = im.circuit_arrays(traj, H, p)
    S = KQ.shape[0]
    KQ = np.stack([KQ[s][:, order[s]] for s in range(S)])
    OV = np.stack([OV[s][:, order[s]] for s in range(S)])
    return {"KQ": (("seed", "step", "head", "row", "col"), KQ), "OV": (("seed", "step", "head", "col"), OV)}


def _heads_ds(cfg, H, *, gd_overlay=False, params=None):
    """Dataset of one softmax run (d=5, L=40): omega, mu, off-pattern ratios, circuits, risk (heads sorted), with
    ``gd_overlay`` the overlay with GD on F/2 from each seed's probed state once its pattern formed; ``params``: the
    run's parameters (default ``cfg.params``, :func:`_run_key`).
    """
    model, traj, _ = _run(cfg, H, params=params)
    omega, mu, steps, _ = _learned_arrays(traj, H)
    order = _sorted_heads(omega[:, -1])
    take = lambda a: np.stack([a[s][:, order[s]] for s in range(a.shape[0])])  # noqa: E731
    dims = ("seed", "step", "head")
    data = {
        "omega": (dims, take(omega)),
        "mu": (dims, take(mu)),
        "risk": (("seed", "step"), traj["risk"].values),
        "mse": (("seed", "step"), traj["mse"].values),
    }
    for name in ("kq_offdiag", "kq_yrow", "ov_x"):
        arr = np.stack([traj[f"{name}_{h}"].values for h in range(H)], -1)
        data[name] = (dims, take(arr))
    data.update(_circuit_vars(model, traj, order))
    if gd_overlay:
        learned, i0, start = _overlay_learned(TASK, take(omega), take(mu), steps)
        gd, _ = overlay(_gd_on_half_F(TASK, H), learned, state_variables=("omega", "mu"), start=start, grid=GD_SAVE)
        data.update(_overlay_vars(TASK, learned, gd, i0))
    return xr.Dataset(
        data,
        coords={"step": steps, "head": np.arange(H), "seed": traj["trajectory"].values},
        attrs={"H": H, "d": D, "L": L_TRAIN, "sigma2": S2, "eta_star": ETA_STAR},
    )


def _mosaic(mats, ncols=2):
    """Matrices of one shape tiled ``ncols`` a row, one NaN row/column between tiles (drawn blank): several heads'
    KQ in one panel, so a figure keeps at most three panels a row.
    """
    mats = np.asarray(mats, dtype=np.float64)
    n, r, c = mats.shape
    nrows = -(-n // ncols)
    out = np.full((nrows * (r + 1) - 1, ncols * (c + 1) - 1), np.nan)
    for k in range(n):
        i, j = divmod(k, ncols)
        out[i * (r + 1) : i * (r + 1) + r, j * (c + 1) : j * (c + 1) + c] = mats[k]
    return out


def _legend_above_curves(ax, *, fontsize=7, ncol=2, handles=None, room=0.5):
    """A legend in a band added above the panel's curves (the y-range grown by ``room``), so it hides none of them
    whatever the run (the report's layout rule: no legend over a curve).
    """
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + room * (hi - lo))
    kw = {} if handles is None else {"handles": handles}
    return ax.legend(fontsize=fontsize, ncol=ncol, loc="upper left", **kw)


def _heatmap(ax, M, title, scale=1.15, aspect="equal"):
    vmax = float(np.nanmax(np.abs(M))) * scale or 1.0
    im_ = ax.imshow(M, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect=aspect)
    ax.figure.colorbar(im_, ax=ax, fraction=0.046, pad=0.03)
    ax.set_title(title, fontsize=8, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])
    return im_


# ----------------------------------------------------------------------------------------------------------------------
# Fig. 1: two heads
# ----------------------------------------------------------------------------------------------------------------------
def _shown_seed(ds):
    """Index of the seed whose heatmaps are shown: the first seed whose pattern formed (else seed 0)."""
    formed = np.flatnonzero(ds.i0.values < ds.sizes["step"]) if "i0" in ds else []
    return int(formed[0]) if len(formed) else 0


def _plot_seed_lines(ax, steps, values, formed, color, label):
    """Every seed's curve (thin; dashed where the seed's pattern did not form), so that no mean hides a seed."""
    for s in range(values.shape[0]):
        ax.plot(
            steps,
            values[s],
            color=color,
            lw=0.8,
            alpha=0.8,
            ls="-" if formed[s] else "--",
            label=label if s == 0 else None,
        )
