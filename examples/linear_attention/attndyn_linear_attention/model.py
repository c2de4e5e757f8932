"""Linear attention with Gamma = k I and value v: risk, reduced map and flow, fixed points, and the model's record.

Prompt: w ~ N(0, I/d), N context tokens x_i ~ N(0, I) with labels x_i.w, a query q ~ N(0, I) with label q.w + noise
(variance s2). Prediction f = v h^T Gamma q, h = (1/N) sum_i y_i x_i. At Gamma = k I the population risk is
R = 1 + s2 - 2 k v + c (k v)^2 + lam/2 (k^2 + v^2) with c = 1 + (d + 1)/N (Wishart moments), lam/2 (|Gamma|_F^2/d + v^2)
being the penalty. Trained as a full d x d matrix, Gamma's diagonal moves at 1/d of dR/dk per unit learning rate.
"""

from dataclasses import dataclass

import numba
import numpy as np

import dynamics
from closedform.models import Model
from dynamics.fixed_points import fixed_points as find_fixed_points


@dataclass(frozen=True, kw_only=True)
class Task:
    """d: dimension, N: context length, s2: label noise variance, lam: ridge penalty."""

    d: int = 20
    N: int = 40
    s2: float = 0.25
    lam: float = 0.1

    @property
    def c(self) -> float:
        """c = 1 + (d + 1) / N: E[h h^T] = c / d I (Wishart second moment)."""
        return 1.0 + (self.d + 1) / self.N


def risk(task: Task, k, v):
    """R(k, v) of the module docstring."""
    return 1 + task.s2 - 2 * k * v + task.c * (k * v) ** 2 + task.lam / 2 * (k**2 + v**2)


@numba.njit(cache=True)
def _grad(x, p):  # p = [c, lam, step_k, step_v]
    k, v = x[0], x[1]
    return -2 * v + 2 * p[0] * k * v * v + p[1] * k, -2 * k + 2 * p[0] * k * k * v + p[1] * v


@numba.njit(cache=True)
def step(n, x, p, out):
    """One gradient step, k with step p[2], v with step p[3]."""
    gk, gv = _grad(x, p)
    out[0] = x[0] - p[2] * gk
    out[1] = x[1] - p[3] * gv


@numba.njit(cache=True)
def rhs(t, x, p, out):
    """The flow dk/dt = -p[2] dR/dk, dv/dt = -p[3] dR/dv."""
    gk, gv = _grad(x, p)
    out[0] = -p[2] * gk
    out[1] = -p[3] * gv


def params(task: Task, lr: float, *, full_matrix: bool = True) -> np.ndarray:
    """Kernel parameters for torch's learning rate ``lr``: k moves at lr/d when torch trains the full matrix."""
    return np.array([task.c, task.lam, lr / task.d if full_matrix else lr, lr])


def reduced_map(task: Task, state0, lr: float, steps, *, full_matrix: bool = True):
    """The reduced GD map from ``state0`` (n, 2), saved at ``steps``."""
    p = params(task, lr, full_matrix=full_matrix)
    return dynamics.iterate(
        step,
        np.atleast_2d(state0),
        int(np.max(steps)),
        params=p,
        saveat=dynamics.SaveAt(steps=np.asarray(steps)),
        names=["k", "v"],
    )


def flow(task: Task, state0, t_end: float):
    """The gradient flow of R in the time of the full-matrix training (t = lr * step)."""
    return dynamics.integrate(rhs, np.atleast_2d(state0), (0.0, t_end), params=params(task, 1.0), names=["k", "v"])


def fixed_points(task: Task, n_starts: int = 200, seed: int = 0):
    """Equilibria of the flow from ``n_starts`` starts in [-2, 2]^2, with stability."""
    starts = np.random.default_rng(seed).uniform(-2, 2, (n_starts, 2))
    return find_fixed_points(rhs, params(task, 1.0), starts, kind="flow")


def theorem_predictions(task: Task) -> dict:
    """Closed form: minima at k = v = +-sqrt((2 - lam) / (2 c)) (lam < 2), the origin a saddle."""
    return {
        "k_star": float(np.sqrt((2 - task.lam) / (2 * task.c))),
        "risk_star": float(risk(task, *[np.sqrt((2 - task.lam) / (2 * task.c))] * 2)),
    }


MODEL = Model(
    name="linear_attention",
    title="linear attention, Gamma = k I and value v (an example package)",
    state_names=("k", "v"),
    params=Task,
    time_unit="step",
    step=step,
    rhs=rhs,
    map=reduced_map,
    flow=flow,
    fixed_points=fixed_points,
    theorem_predictions=theorem_predictions,
    build="attndyn_linear_attention.torch_model:build",
    probe="attndyn_linear_attention.torch_model:LinearAttention.probes",
    figures="attndyn_linear_attention.figure",
)
