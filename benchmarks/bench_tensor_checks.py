"""Cost of the tensor checks of the public torch functions, and the trainer's speed on the unchecked step path.

The public torch functions of ``empirical.models`` check their tensors (real, finite, shapes consistent: a pass over
the data, and a device synchronisation on a GPU); a model's training step calls their unchecked versions. Rows, all
on CPU in float64 with one torch thread:

* a checked call of ``single_location.erf_mse`` against the autograd function it wraps (the unchecked call the
  training step makes), at a small batch (1 seed, B = 5, L = 10, d = 80) and at Fig. 5's batch (30 seeds of it): the
  ratio is below 1 and the note gives the microseconds the checks add per call;
* the trainer on Fig. 5's protocol (30 seeds, erf predictor): the model as shipped (unchecked step) against the same
  model whose loss calls the checked ``erf_mse`` (what every step would pay if the step path were checked), in the
  same run, interleaved, best process time of several repeats.
"""

from __future__ import annotations

import torch

from benchmarks._common import Result, best_time, cpu_time
from closedform.single_location import SingleLocationTask
from empirical.device import torch_threads
from empirical.models import single_location as slm
from empirical.train import train

N_SEEDS = 30


class _CheckedStep(slm.SingleLocationAttention):
    """The shipped model, except that its loss calls the public (checked) ``erf_mse``."""

    def loss(self, params, batch, hyper):
        return slm.erf_mse(batch["X"], batch["y"], params["k"], params["v"], self.lam(hyper))


def _call_cost(S: int) -> Result:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(S, 5, 10, 80, generator=g, dtype=torch.float64)
    y = torch.randn(S, 5, generator=g, dtype=torch.float64)
    k = torch.randn(S, 80, generator=g, dtype=torch.float64)
    v = torch.randn(S, 80, generator=g, dtype=torch.float64)
    checked = best_time(lambda: slm.erf_mse(X, y, k, v, 0.5), repeat=5)
    unchecked = best_time(lambda: slm._ErfMSE.apply(k, v, X, y, 0.5), repeat=5)
    return Result(
        f"single_location.erf_mse checked vs unchecked, {S} seed(s) x batch 5, L=10, d=80",
        "calls",
        1.0 / checked,
        1.0 / unchecked,
        "the unchecked autograd function (the training step's call)",
        note=f"checks add {1e6 * (checked - unchecked):.1f} us per call ({1e6 * unchecked:.1f} us unchecked, "
        f"X {X.numel() * 8 / 1024:.0f} KiB); wall time, best of 5",
    )


def run(quick: bool) -> list[Result]:
    n_steps = 200 if quick else 2000
    repeats = 3 if quick else 5
    task = SingleLocationTask(d=80, L=10, noise=0.1)
    shipped = slm.build(task, rng=0)
    checked = _CheckedStep(task, k_star=shipped.k_star_np, v_star=shipped.v_star_np)
    cfg = slm.config("fig5", tuple(range(N_SEEDS)), n_steps=n_steps, log_every=n_steps // 2, eval_size=100)
    with torch_threads(1):
        out = [_call_cost(1), _call_cost(N_SEEDS)]
        for model in (shipped, checked):
            train(model, slm.config("fig5", (0,), n_steps=n_steps, log_every=n_steps // 2, eval_size=100))  # warm-up
        t_shipped = t_checked = float("inf")
        for _ in range(repeats):  # interleaved: both see the same load
            t_shipped = min(t_shipped, cpu_time(lambda: train(shipped, cfg, device="cpu"), warmup=False))
            t_checked = min(t_checked, cpu_time(lambda: train(checked, cfg, device="cpu"), warmup=False))
    out.append(
        Result(
            f"single_location Fig. 5 training ({N_SEEDS} seeds): unchecked step path vs checked erf_mse in the step",
            "steps",
            n_steps / t_shipped,
            n_steps / t_checked,
            "the same model whose loss calls the checked erf_mse",
            note=f"{n_steps} steps, erf predictor, d=80, L=10, batch 5, CPU, 1 thread, process time, best of "
            f"{repeats} interleaved; the checks would cost {1e6 * (t_checked - t_shipped) / n_steps:.1f} us a step",
        )
    )
    return out
