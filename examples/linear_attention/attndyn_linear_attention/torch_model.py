"""The torch side: linear attention training the full d x d matrix Gamma and the value v (empirical.train protocol)."""

import torch

from empirical.train import TrainConfig, per_seed, train
from dynamics import SaveAt


class LinearAttention:
    """f = v h^T Gamma q, h = (1/N) sum_i y_i x_i; Gamma starts at k0 I (every seed), v at v0."""

    name = "linear_attention"
    time_unit = "step"

    def __init__(self, task, k0: float, v0: float):
        self.spec, self.k0, self.v0 = task, k0, v0

    def init_params(self, generators, *, device, dtype):
        eye = torch.eye(self.spec.d, device=device, dtype=dtype)
        return per_seed(
            generators, lambda g: {"Gamma": self.k0 * eye, "v": torch.tensor(self.v0, device=device, dtype=dtype)}
        )

    def sample(self, generators, n, *, device, dtype):
        d, N = self.spec.d, self.spec.N

        def draw(g):
            w = torch.randn(n, d, generator=g, device=device, dtype=dtype) / d**0.5
            X = torch.randn(n, N, d, generator=g, device=device, dtype=dtype)
            q = torch.randn(n, d, generator=g, device=device, dtype=dtype)
            noise = self.spec.s2**0.5 * torch.randn(n, generator=g, device=device, dtype=dtype)
            h = torch.einsum("bnd,bn->bd", X, torch.einsum("bnd,bd->bn", X, w)) / N
            return {"h": h, "q": q, "y": (q * w).sum(-1) + noise}

        return per_seed(generators, draw)

    def loss(self, params, batch, hyper):
        G, v = params["Gamma"], params["v"]
        f = v[:, None] * (torch.bmm(batch["h"], G) * batch["q"]).sum(-1)
        penalty = self.spec.lam / 2 * ((G**2).sum((1, 2)) / self.spec.d + v**2)
        return ((batch["y"] - f) ** 2).mean(-1) + penalty

    def probes(self, params):
        return {"k": torch.diagonal(params["Gamma"], dim1=1, dim2=2).mean(-1), "v": params["v"]}


def build(task, k0: float = 0.1, v0: float = 0.1) -> LinearAttention:
    """The torch model of ``task`` (the record's ``build``)."""
    return LinearAttention(task, k0, v0)


def train_run(
    task,
    *,
    lr: float,
    n_steps: int,
    n_prompts: int,
    seeds,
    n_saves: int = 21,
    device: str = "cpu",
    k0: float = 0.1,
    v0: float = 0.1,
):
    """Full-batch GD on a fixed set of ``n_prompts`` prompts per seed; the Trajectory of k and v."""
    config = TrainConfig(
        seeds=tuple(seeds),
        n_steps=n_steps,
        batch_size=n_prompts,
        dataset_size=n_prompts,
        lr=lr,
        eval_size=0,
        saveat=SaveAt(n=n_saves),
    )
    return train(build(task, k0, v0), config, device=device)
