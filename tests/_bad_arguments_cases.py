"""Valid example calls of the public callables, the bad values that replace one argument, and the verdict on a probe.

Shared by the sweep tool (``tools/bad_arguments.py``, which runs every probe in a worker process with a time limit)
and the CI test (``tests/api/test_bad_arguments.py``, which runs a bounded hypothesis sample in process).

A *probe* replaces one parameter of a valid example call by a bad value of one *kind* (issue 18) while the other
arguments stay valid, and classifies what happens:

``clear``
    ``ValueError``/``TypeError`` raised in project code whose message names the parameter.
``unclear``
    Another exception, or one that does not name the parameter, raised in project code.
``library``
    An exception raised inside numpy/numba/torch/scipy/... (the argument was never checked).
``memory``
    ``MemoryError`` (a size was never compared with the available memory).
``silent_nan``
    Returned normally with a NaN/inf somewhere in the result.
``accepted``
    Returned a finite answer for a value that is never valid (NaN, inf, None where None is no option, a string or
    an ``object()`` where neither is meant, a complex number, a huge size).
``hang``
    No answer within the time limit (worker processes only).
``crash``
    The worker process died (segfault, out of memory; worker processes only).
``unjudged``
    Returned a finite answer for a value that may be valid for this parameter (zero, negative, a wrong shape where
    the parameter is not known to need a sign or a shape), or raised ``dynamics.DivergenceError`` for such a value
    (the dynamics from there blow up), or accepted a value listed in ``VALID_VALUES``: not counted in the rate
    either way.

The rate of the issue is ``clear / (all probes - unjudged)``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import os
import re
import sys
import traceback
from collections.abc import Mapping

import numpy as np

from closedform import models as _model_registry

#: Modules swept, in import order (dynamics -> closedform -> empirical -> figures).
_BUILTIN = sorted(_model_registry.names(builtin=True))
MODULES = (
    "dynamics.random",
    "dynamics.integrate",
    "dynamics.saveat",
    "dynamics.trajectory",
    "dynamics.sweep",
    "dynamics.overlay",
    "dynamics.compare",
    "closedform.special",
    *(f"closedform.{m}" for m in _BUILTIN),
    *(f"empirical.models.{m}" for m in _BUILTIN),
    "empirical.models.single_location_transformer",
    "empirical.train",
    "empirical.checkpoint",
    "empirical.seeding",
    "empirical.device",
    "figures.registry",
    "figures.report",
)

#: Bad-value kinds, in the order they are tried.
KINDS = ("none", "string", "object", "nan", "inf", "negative", "zero", "complex", "huge", "wrong_shape")

#: Kinds whose acceptance (a finite answer) is a failure for every parameter.
ALWAYS_INVALID = frozenset({"none", "string", "object", "nan", "inf", "complex", "huge"})

#: Parameters that must be > 0 wherever they occur (sizes, counts, rates, scales, variances): accepting zero or a
#: negative value is a failure for them. Other parameters (times, coordinates, indices, seeds) may take such values.
POSITIVE = frozenset(
    {
        "n",
        "N",
        "d",
        "D",
        "L",
        "K",
        "M",
        "H",
        "n_steps",
        "n_prompts",
        "n_samples",
        "n_train",
        "n_test",
        "batch_size",
        "chunk",
        "eval_size",
        "n_grid",
        "max_walks",
        "width",
        "dt",
        "lr",
        "alpha",
        "sigma2",
        "sigma_x",
        "tau_end",
        "rtol",
        "atol",
        "dt_max",
        "max_steps",
        "vocab_size",
        "L_test",
        "n_seeds",
        "save_every",
        "log_every",
        "Q",
    }
)

#: Documented valid values of an always-invalid kind: {(qualname or "*", parameter): kinds}. Accepting them is
#: right, so the probe is unjudged (a NaN/inf in the answer still counts as silent_nan).
VALID_VALUES = {
    ("closedform.special.zeta", "t"): {"inf"},  # zeta(+-inf, g) = 1, the limit (tests/closedform/test_special.py)
    ("closedform.special.owens_t", "h"): {"inf"},  # T(+-inf, a) = 0
    ("dynamics.compare.t_quantile", "df"): {"inf"},  # the normal limit, documented
    ("dynamics.integrate.Dopri5", "dt_max"): {"inf"},  # the default: no step-size limit (documented)
    ("dynamics.integrate.Tsit5", "dt_max"): {"inf"},
    # the engine: one str in names stores the whole state as one variable; bound=inf (the default) is no bound
    **{
        (f"dynamics.integrate.{f}", p): {k}
        for f in ("iterate", "integrate")
        for p, k in (("names", "string"), ("bound", "inf"))
    },
    ("dynamics.integrate.iterate", "n_steps"): {"zero"},  # zero steps: the initial state only (tested)
    ("empirical.train.TrainConfig", "n_steps"): {"zero"},  # documented n_steps >= 0 (tested)
    ("empirical.train.TrainConfig", "eval_size"): {"zero"},  # no held-out evaluation
    ("figures.registry.gap_rows", "atol"): {"zero"},  # an absolute allowance (not a solver tolerance): 0 = none
    ("closedform.scan_snap.theorem3_dz", "dz_l0"): {"inf"},  # the saturation limit (saturation_dz)
    ("dynamics.compare.adjust", "results"): {"nan"},  # a NaN p-value is "no test" (tests/api/test_extreme_inputs.py)
    # nearest_neighbor: H is the embedded prompt array (any real entries), not a number of heads
    **{
        (f"closedform.nearest_neighbor.{f}", "H"): {"zero", "negative"}
        for f in ("attention", "forward", "full_loss", "full_gradient")
    },
    # icl_regression: sigma2 = 0 is the noise-free task (spec Sec. 1)
    **{
        (f"closedform.icl_regression.{f}", "sigma2"): {"zero"}
        for f in ("ICLRegressionTask", "flow", "map", "bayes_risk_asymptotic")
    },
    # scan_snap: n is a class index (0 = the first class), not a size
    **{
        (f"closedform.scan_snap.{f}", "n"): {"zero"}
        for f in ("measure_transition", "relative_gain", "dominant_token", "saturation_dz", "theorem3_dz")
    },
    # token-selection GD maps: zero steps return the initial state (documented n_steps >= 0; no last step, so the
    # engine's final_step_norm is NaN by definition); bound=inf is the documented default (no bound)
    **{
        (f"closedform.{m.name}.{f}", "n_steps"): {"zero"}
        for m in _model_registry.models(builtin=True)
        if m.docs == "docs/models/token_selection.md"
        for f in ("map", "full_gd")
    },
    ("closedform.nearest_neighbor.map", "bound"): {"inf"},
    # the single-location and ICL maps: zero steps return the initial state too (documented n_steps >= 0)
    ("closedform.icl_regression.map", "n_steps"): {"zero"},
    **{
        (f"closedform.single_location.{f}", "n_steps"): {"zero"}
        for f in ("map", "full_pgd", "run_to_fixed_point", "basins")
    },
    # the torch nearest_neighbor attention takes the embedded prompts H (any real entries), as the closed form does
    ("empirical.models.nearest_neighbor.attention", "H"): {"zero", "negative"},
    # a checkpoint path is any file name; a check's measurement may be NaN ("not defined") or +-inf (an unbounded
    # statistic, e.g. a singular-value ratio whose second value is 0): its own test decides, and the report prints it
    ("empirical.train.train", "checkpoint_path"): {"string"},
    ("figures.registry.CheckResult", "measured"): {"nan", "inf"},
    # a prediction may be +-inf (e.g. "sv_1/sv_2 -> inf" for a rank-one limit); only NaN is refused there
    ("figures.registry.CheckResult", "expected"): {"inf"},
    # a seed is not a size: numpy takes any integer >= 0 as a seed
    ("*", "seed"): {"huge"},
    ("*", "seeds"): {"huge"},
    ("*", "rng"): {"huge"},
    ("*", "seed_or_rng"): {"huge"},
}

#: Project packages: an exception whose innermost frame is in one of them was raised by project code.
PROJECT_PACKAGES = ("dynamics", "closedform", "empirical", "figures")

#: Public callables left out of the sweep, with the reason (counted as not covered).
EXCLUDED = {
    # records the library builds and returns; callers never construct them
    "closedform.group_sparse.FullGDRun": "result record",
    "closedform.icl_regression.HeadPattern": "result record",
    "closedform.icl_regression.SingleHeadOptimum": "result record",
    "closedform.random_walk.ReducedGradient": "result record",
    "closedform.scan_snap.TransitionTimes": "result record",
    "closedform.single_location.FixedPoint": "result record",
    "closedform.single_location.SpuriousPoint": "result record",
    "closedform.single_location.LocationTask": "protocol (no constructor arguments)",
    "closedform.single_location.Basins": "result record",
    "closedform.icl_regression.FixedPoint": "result record",
    "empirical.train.TorchModel": "protocol (no constructor arguments)",
    "empirical.checkpoint.CheckpointError": "exception class",
    "empirical.device.Placement": "result record",
    "figures.registry.BuildResult": "result record",
    "figures.registry.ModuleStatus": "result record",
    "figures.report.ReportResult": "result record",
    "figures.report.FigureEntry": "result record",
    "figures.report.ModelSection": "result record",
    "figures.report.FamilyWise": "result record",
    # whole-figure builds: a valid call computes a paper figure (minutes)
    "figures.registry.build": "a valid call builds a figure (minutes of CPU)",
    "figures.registry.make": "a valid call builds figures (minutes of CPU)",
    "figures.report.collect": "a valid call builds every figure",
    "figures.report.build_report": "a valid call builds every figure",
    "figures.registry.discover": "no arguments",
    "empirical.device.set_determinism": "global torch state",
}


class Fixtures:
    """Small valid objects built on first use (attribute access) and kept for the process."""

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(self, "_make_" + name)()
        setattr(self, name, value)
        return value

    # dynamics
    def _make_traj_map(self):
        import dynamics

        return dynamics.iterate(
            self.step, np.array([[1.0, 0.5], [0.8, 0.4]]), 3, params=np.array([0.9]), names=("x0", "x1")
        )

    def _make_theory_fn(self):
        import dynamics

        def theory_fn(state0, at):
            return dynamics.iterate(
                self.step,
                state0,
                int(max(at)),
                params=np.array([0.9]),
                names=("x0", "x1"),
                saveat=dynamics.SaveAt(steps=tuple(int(a) for a in at)),
            )

        return theory_fn

    def _make_rhs(self):
        import numba

        @numba.njit(cache=False)
        def rhs(t, y, p, dy):
            for i in range(y.shape[0]):
                dy[i] = -p[0] * y[i]

        return rhs

    def _make_step(self):
        import numba

        @numba.njit(cache=False)
        def step(k, x, p, out):
            for i in range(x.shape[0]):
                out[i] = p[0] * x[i]

        return step

    def _make_dataset(self):
        import xarray as xr

        return xr.Dataset({"x": ("t", np.linspace(0.0, 1.0, 4))}, coords={"t": np.arange(4.0)})

    # closedform
    def _make_gs(self):
        import closedform.group_sparse as gs

        return gs.GroupSparseTask(d=2, D=4, eta=0.5, sigma_x=1.0, jstar=2)

    def _make_gs_sample(self):
        import closedform.group_sparse as gs

        return gs.sample(self.gs, 6, rng=0)

    def _make_gs_rs(self):
        import closedform.group_sparse as gs

        return gs.reduce_sample(self.gs_sample)

    def _make_gs_state(self):
        import closedform.group_sparse as gs

        return np.linspace(0.1, 0.4, gs.N_STATE)

    def _make_gs_vW(self):
        import closedform.group_sparse as gs

        return gs.embed_state(self.gs, self.gs_state, self.gs_sample.v_star)

    def _make_icl(self):
        import closedform.icl_regression as icl

        return icl.ICLRegressionTask(d=2, L=4, sigma2=0.1)

    def _make_icl_prompts(self):
        import closedform.icl_regression as icl

        return icl.sample_prompts(self.icl, 3, rng=0)

    def _make_nn(self):
        import closedform.nearest_neighbor as nn

        return nn.NearestNeighborTask(d=3, N=4, sigma=1.0, eta=1.0)

    def _make_nn_prompts(self):
        import closedform.nearest_neighbor as nn

        return nn.sample_prompts(self.nn, 5, rng=0, labels=True)

    def _make_nn_H(self):
        import closedform.nearest_neighbor as nn

        return nn.embed(self.nn_prompts)

    def _make_nn_W(self):
        import closedform.nearest_neighbor as nn

        return nn.family_W(self.nn.d, 0.3, 0.2)

    def _make_rw(self):
        import closedform.random_walk as rw

        return rw.RandomWalkTask(K=3, N=4, M=10, p=0.7)

    def _make_rw_sample(self):
        import closedform.random_walk as rw

        return rw.sample_walks(self.rw, 20, rng=0)

    def _make_rw_state(self):
        import closedform.random_walk as rw

        return rw.unpack_state(self.rw, rw.initial_state(self.rw) + 0.1)

    def _make_rw_f(self):
        import closedform.random_walk as rw

        V, a, c = self.rw_state
        return rw.reduced_forward(self.rw, V, a, c, self.rw_sample.states[:, :-1])[1]

    def _make_ss_classes(self):
        import closedform.scan_snap as ss

        return ss.SequenceClasses.syn_small()

    def _make_ss(self):
        import closedform.scan_snap as ss

        return ss.ScanSnapTask(classes=self.ss_classes, eta_Y=1.0, eta_Z=1.0)

    def _make_ss_YZ(self):
        import closedform.scan_snap as ss

        return ss.random_init(self.ss_classes, rng=0)

    def _make_ss_classes1(self):
        import closedform.scan_snap as ss

        return ss.SequenceClasses.syn(1, 2, num_common=1, num_unique=2)

    def _make_ss1(self):
        import closedform.scan_snap as ss

        return ss.ScanSnapTask(classes=self.ss_classes1, eta_Y=1.0, eta_Z=1.0)

    def _make_theory_ds(self):
        import xarray as xr

        return xr.Dataset({"x": ("time", np.array([1.0, 0.5, 0.25]))}, coords={"time": np.arange(3.0)})

    def _make_learned_ds(self):
        import xarray as xr

        x = np.array([1.0, 0.5, 0.25]) + np.array([[0.01], [-0.02], [0.015]])
        return xr.Dataset(
            {"x": (("trajectory", "time"), x)}, coords={"time": np.arange(3.0), "trajectory": np.arange(3)}
        )

    # empirical
    def _make_gens(self):
        import torch

        return [torch.Generator().manual_seed(0)]

    def _torch_parts(self, model):
        import torch

        cpu = torch.device("cpu")
        params = model.init_params(self.gens, device=cpu, dtype=torch.float64)
        batch = model.sample(self.gens, 4, device=cpu, dtype=torch.float64)
        return params, batch

    def _make_m_gs(self):
        import empirical.models.group_sparse as m

        return m.GroupSparseAttention(self.gs)

    def _make_m_gs_parts(self):
        return self._torch_parts(self.m_gs)

    def _make_m_icl(self):
        import empirical.models.icl_regression as m

        return m.ICLAttention(self.icl, 2)

    def _make_m_icl_parts(self):
        return self._torch_parts(self.m_icl)

    def _make_m_nn(self):
        import empirical.models.nearest_neighbor as m

        return m.NearestNeighborAttention(self.nn)

    def _make_m_nn_parts(self):
        return self._torch_parts(self.m_nn)

    def _make_m_rw(self):
        import empirical.models.random_walk as m

        return m.RandomWalkAttention(self.rw)

    def _make_m_rw_parts(self):
        return self._torch_parts(self.m_rw)

    def _make_m_ss(self):
        import empirical.models.scan_snap as m

        return m.ScanSnapTorch(classes=self.ss_classes, T=16)

    def _make_m_ss_parts(self):
        return self._torch_parts(self.m_ss)

    def _make_m_sl(self):
        import empirical.models.single_location as m

        return m.build(self.sl, rng=0)

    def _make_sl_tdirs(self):
        import torch

        return tuple(torch.as_tensor(a) for a in self.sl_dirs)

    def _make_ckpt_path(self):
        import torch

        import empirical.checkpoint as ck

        path = os.path.join(_scratch(), "c.ckpt")
        ck.save_checkpoint(path, {"step": 1, "w": torch.zeros(2)})
        return path

    def _make_icl_traj(self):
        import empirical.train as tr

        model = self.m_icl
        return tr.train(model, tr.TrainConfig(seeds=(0,), n_steps=2, batch_size=2, lr=0.01), device="cpu")

    def _make_qa_sample(self):
        import empirical.models.random_walk as m

        return m.qa_sample("majority", 4, 0)

    def _make_m_qa(self):
        import empirical.models.random_walk as m

        return m.QAAttention("majority", data=[self.qa_sample], test=[self.qa_sample])

    def _make_sl_X(self):
        import torch

        return torch.full((1, 2, 4, 8), 0.1, dtype=torch.float64)

    def _make_cfg(self):
        import empirical.train as tr

        return tr.TrainConfig(seeds=(0,), n_steps=2, batch_size=2, lr=0.01)

    # figures
    def _make_fig_spec(self):
        from figures.registry import REGISTRY

        REGISTRY.discover()
        return REGISTRY.get(REGISTRY.names()[0])

    def _make_section(self):
        from figures.registry import ModuleStatus
        from figures.report import FigureEntry, ModelSection

        spec = self.fig_spec
        return ModelSection(
            model=spec.model,
            module=ModuleStatus(spec.model, "ok"),
            figures=[FigureEntry(spec=spec, status="failed", error="not built")],
        )

    def _make_sl(self):
        import closedform.single_location as sl

        return sl.SingleLocationTask(d=8, L=4, noise=0.1)

    def _make_sl_dirs(self):
        import closedform.single_location as sl

        return sl.random_oracle_directions(self.sl, rng=0)

    def _make_sl_state(self):
        return (0.3, 0.4, 0.2, 0.1, 0.05)


F = Fixtures()


def _nn_prompts_fields(fx):
    p = fx.nn_prompts
    return dict(X=p.X, xq=p.xq, c=p.c, istar=p.istar)


#: Example values by parameter name, per module (then for every module under "*"). A value is a function of the
#: fixtures. Parameters with a default keep it unless the callable has an entry in EXAMPLES.
NAMES = {
    "*": {
        "rng": lambda f: 0,
        "seed": lambda f: 0,
        "seeds": lambda f: (0,),
        "n_steps": lambda f: 3,
        "n_prompts": lambda f: 3,
        "n": lambda f: 3,
    },
    "dynamics.validation": {
        "name": lambda f: "x",
        "value": lambda f: 1,
        "low": lambda f: 0.0,
        "high": lambda f: 2.0,
        "choices": lambda f: (1, 2),
    },
    "dynamics.random": {"seed": lambda f: 0, "names": lambda f: ("a", "b")},
    "closedform.special": {
        "t": lambda f: 0.5,
        "g": lambda f: 0.7,
        "h": lambda f: 0.5,
        "a": lambda f: 0.3,
        "j": lambda f: 1,
        "x": lambda f: 0.4,
    },
    "closedform.group_sparse": {
        "task": lambda f: f.gs,
        "s": lambda f: f.gs_sample,
        "rs": lambda f: f.gs_rs,
        "state": lambda f: f.gs_state,
        "v": lambda f: f.gs_vW[0],
        "W": lambda f: f.gs_vW[1],
        "X": lambda f: f.gs_sample.X,
        "y": lambda f: f.gs_sample.y,
        "v_star": lambda f: f.gs_sample.v_star,
        "t": lambda f: 2,
        "eps_B": lambda f: 0.1,
        "eps": lambda f: 0.1,
        "gamma": lambda f: 0.5,
        "delta": lambda f: 0.1,
        "loss": lambda f: np.array([0.5, 0.4, 0.3]),
        "f": lambda f: np.linspace(-0.5, 0.5, 6),
        "a": lambda f: f.gs_rs.a,
        "gram": lambda f: f.gs_rs.gram,
        "S": lambda f: np.full((2, 4, 4), 0.25),
        "n_unique": lambda f: 6,
    },
    "closedform.icl_regression": {
        "task": lambda f: f.icl,
        "omega": lambda f: np.array([0.4, 0.2]),
        "mu": lambda f: np.array([1.0, 0.5]),
        "eta": lambda f: 0.5,
        "sum_mu": lambda f: 1.5,
        "omega0": lambda f: np.array([0.4, 0.2]),
        "mu0": lambda f: np.array([1.0, 0.5]),
        "t_span": lambda f: (0.0, 0.5),
        "lr": lambda f: 0.1,
        "eps0": lambda f: 0.01,
        "t": lambda f: np.array([1.0, 2.0]),
        "gamma": lambda f: 0.13,
        "xi": lambda f: 0.125,
        "sigma2": lambda f: 0.1,
        "L_test": lambda f: 4,
        "X": lambda f: f.icl_prompts.X,
        "y": lambda f: f.icl_prompts.y,
        "xq": lambda f: f.icl_prompts.xq,
        "mu_gamma": lambda f: 3.4,
        "lam_ridge": lambda f: 0.5,
        "G": lambda f: np.eye(2),
        "Sigma": lambda f: np.eye(2),
        "rho": lambda f: 0.3,
        "d": lambda f: 2,
        "L": lambda f: 4,
        "H": lambda f: 2,
        "yq": lambda f: f.icl_prompts.yq,
        "beta": lambda f: f.icl_prompts.beta,
        "predict": lambda f: lambda X, y, xq: np.zeros(np.shape(xq)[0]),
    },
    "closedform.nearest_neighbor": {
        "task": lambda f: f.nn,
        "prompts": lambda f: f.nn_prompts,
        "xi1": lambda f: 0.3,
        "xi2": lambda f: 0.2,
        "W": lambda f: f.nn_W,
        "H": lambda f: f.nn_H,
        "target": lambda f: f.nn_prompts.c[:, 0] * 0 + 1.0,
        "d": lambda f: 3,
        "N": lambda f: 4,
        "C_d": lambda f: 1.0,
        "t": lambda f: np.array([2.0, 3.0]),
        "C": lambda f: 1.0,
        "delta": lambda f: 0.1,
        "y": lambda f: f.nn_prompts.y,
        "Y": lambda f: np.eye(4)[:2],
        "X": lambda f: f.nn_prompts.X,
        "xq": lambda f: f.nn_prompts.xq,
        "c": lambda f: f.nn_prompts.c,
        "istar": lambda f: f.nn_prompts.istar,
        "sigma": lambda f: 1.0,
        "eta": lambda f: 1.0,
    },
    "closedform.random_walk": {
        "task": lambda f: f.rw,
        "sample": lambda f: f.rw_sample,
        "walks": lambda f: f.rw_sample,
        "K": lambda f: 3,
        "N": lambda f: 4,
        "p": lambda f: 0.7,
        "V": lambda f: f.rw_state[0],
        "a": lambda f: f.rw_state[1],
        "c": lambda f: f.rw_state[2],
        "context": lambda f: f.rw_sample.states[:, :-1],
        "W": lambda f: __import__("closedform.random_walk").random_walk.W_from_reduced(f.rw, *f.rw_state[1:]),
        "f": lambda f: f.rw_f,
        "target": lambda f: np.eye(3),
        "S": lambda f: np.full((2, 3), 1 / 3),
        "x": lambda f: __import__("closedform.random_walk").random_walk.initial_state(f.rw),
        "states": lambda f: f.rw_sample.states,
        "tau_end": lambda f: 0.5,
    },
    "closedform.scan_snap": {
        "classes": lambda f: f.ss_classes,
        "task": lambda f: f.ss,
        "Y": lambda f: f.ss_YZ[0],
        "Z": lambda f: f.ss_YZ[1],
        "t_span": lambda f: (0.0, 0.5),
        "M": lambda f: 50,
        "K": lambda f: 2,
        "eta_Y": lambda f: 1.0,
        "eta_Z": lambda f: 1.0,
        "tau": lambda f: np.array([0.5, 1.0]),
        "s": lambda f: np.array([1, 2]),
        "P": lambda f: f.ss_classes.P,
        "t": lambda f: np.array([0.5, 1.0]),
        "z": lambda f: np.array([0.2]),
        "z0": lambda f: np.array([0.1]),
        "n": lambda f: 0,
        "l": lambda f: 0,
        "l2": lambda f: 1,
        "C0": lambda f: 1.0,
        "f_l0_0": lambda f: 0.5,
        "B": lambda f: 1.0,
        "query": lambda f: 0,
        "target": lambda f: 1,
        "context": lambda f: np.array([0, 1, 2]),
        "dz_l0": lambda f: 0.1,
    },
    "closedform.single_location": {
        "task": lambda f: f.sl,
        "lam": lambda f: 0.5,
        "kappa": lambda f: 0.4,
        "nu": lambda f: 0.3,
        "theta": lambda f: 0.1,
        "eta": lambda f: 0.1,
        "rho": lambda f: 0.1,
        "lam0": lambda f: 0.5,
        "d": lambda f: 8,
        "L": lambda f: 4,
        "state0": lambda f: f.sl_state,
        "state": lambda f: f.sl_state,
        "states": lambda f: np.array([[0.4, 0.3, 0.1, 0.1, 0.1]]),
        "alpha": lambda f: 0.01,
        "k_star": lambda f: f.sl_dirs[0],
        "v_star": lambda f: f.sl_dirs[1],
        "k0": lambda f: f.sl_dirs[0],
        "v0": lambda f: f.sl_dirs[1],
        "k": lambda f: f.sl_dirs[0],
        "v": lambda f: f.sl_dirs[1],
        "X": lambda f: np.ones((2, 4, 8)) * 0.1,
    },
    "empirical.models.group_sparse": {
        "task": lambda f: f.gs,
        "model": lambda f: f.m_gs,
        "params": lambda f: f.m_gs_parts[0],
        "X": lambda f: f.m_gs_parts[1]["X"],
        "y": lambda f: f.m_gs_parts[1]["y"],
        "W": lambda f: f.m_gs_parts[0].get("W"),
        "f": lambda f: __import__("torch").zeros(4, dtype=__import__("torch").float64),
        "v_star": lambda f: f.gs_sample.v_star,
        "batch_size": lambda f: 2,
        "v_tilde_star": lambda f: np.array([1.0, 0.0]),
        "gamma": lambda f: 0.1,
        "X_test": lambda f: f.m_gs_parts[1]["X"],
        "y_test": lambda f: f.m_gs_parts[1]["y"],
        "checkpoints": lambda f: (1, 2),
    },
    "empirical.models.icl_regression": {
        "task": lambda f: f.icl,
        "H": lambda f: 2,
        "model_or_spec": lambda f: f.m_icl,
        "model": lambda f: f.m_icl,
        "params": lambda f: f.m_icl_parts[0],
        "batch": lambda f: f.m_icl_parts[1],
        "omega": lambda f: np.array([0.4, 0.2]),
        "mu": lambda f: np.array([1.0, 0.5]),
        "L_test": lambda f: 4,
        "traj": lambda f: f.icl_traj,
        "width": lambda f: 2,
        "learned": lambda f: f.icl_traj,
        "reference": lambda f: f.icl_traj,
        "KQ": lambda f: __import__("empirical.models.icl_regression", fromlist=["circuits"]).circuits(
            f.m_icl, f.m_icl_parts[0]
        )[0],
        "OV": lambda f: __import__("empirical.models.icl_regression", fromlist=["circuits"]).circuits(
            f.m_icl, f.m_icl_parts[0]
        )[1],
    },
    "empirical.models.nearest_neighbor": {
        "task": lambda f: f.nn,
        "model": lambda f: f.m_nn,
        "params": lambda f: f.m_nn_parts[0],
        "batch": lambda f: f.m_nn_parts[1],
        "seed_index": lambda f: 0,
        "batch_size": lambda f: 2,
        "W": lambda f: f.m_nn_parts[0]["W"],
        "H": lambda f: f.m_nn_parts[1]["H"],
        "X": lambda f: __import__("torch").as_tensor(f.nn_prompts.X),
        "xq": lambda f: __import__("torch").as_tensor(f.nn_prompts.xq),
        "y": lambda f: __import__("torch").as_tensor(f.nn_prompts.y),
    },
    "empirical.models.random_walk": {
        "task": lambda f: f.rw,
        "model": lambda f: f.m_rw,
        "params": lambda f: f.m_rw_parts[0],
        "states": lambda f: f.m_rw_parts[1]["states"],
        "sample": lambda f: f.rw_sample,
        "n_train": lambda f: 20,
        "batch_size": lambda f: 2,
        "words": lambda f: "the cat",
    },
    "empirical.models.scan_snap": {
        "classes": lambda f: f.ss_classes,
        "model": lambda f: f.m_ss,
        "task": lambda f: f.ss,
        "params": lambda f: f.m_ss_parts[0],
        "Z_full": lambda f: np.zeros((f.ss_classes.M, f.ss_classes.M)),
        "thresholds": lambda f: np.array([0.1, 0.5]),
        "Y": lambda f: f.ss_YZ[0],
        "Z": lambda f: f.ss_YZ[1],
        "eta": lambda f: 0.01,
        "a": lambda f: __import__("torch").full((1, 2, 4, 4), 0.25, dtype=__import__("torch").float64),
    },
    "empirical.models.single_location": {
        "task": lambda f: f.sl,
        "k_star": lambda f: f.sl_tdirs[0],
        "v_star": lambda f: f.sl_tdirs[1],
        "generator": lambda f: f.gens[0],
        "X": lambda f: f.sl_X[0],
        "k": lambda f: f.sl_tdirs[0],
        "v": lambda f: f.sl_tdirs[1],
        "lam": lambda f: 0.5,
        "state": lambda f: f.sl_state,
        "predictor": lambda f: "erf",
        "init": lambda f: "sphere",
    },
    "empirical.models.single_location_transformer": {
        "task": lambda f: f.sl,
        "d": lambda f: 8,
        "L": lambda f: 4,
        "k_star": lambda f: f.sl_dirs[0],
        "v_star": lambda f: f.sl_dirs[1],
        "generator": lambda f: f.gens[0],
        "x": lambda f: __import__("torch").full((2, 4, 8), 0.1, dtype=__import__("torch").float64),
    },
    "empirical.train": {
        "value": lambda f: 0.1,
        "batch_size": lambda f: 2,
        "lr": lambda f: 0.01,
        "generators": lambda f: f.gens,
        "draw": lambda f: lambda g: {"x": __import__("torch").zeros(2)},
        "model": lambda f: f.m_gs,
        "config": lambda f: f.cfg,
    },
    "empirical.checkpoint": {
        "path": lambda f: f.ckpt_path,
        "state": lambda f: {"step": 1, "w": __import__("torch").zeros(2)},
        "obj": lambda f: {"a": {"b": 1}},
        "found": lambda f: {"a": 1},
        "expected": lambda f: {"a": 1},
    },
    "empirical.seeding": {
        "seq": lambda f: np.random.SeedSequence(0),
        "device": lambda f: __import__("torch").device("cpu"),
    },
    "empirical.device": {"device": lambda f: "cpu", "dtype": lambda f: "float64"},
    "figures.registry": {
        "reason": lambda f: "why",
        "evidence": lambda f: "how",
        "quantity": lambda f: "x",
        "times": lambda f: np.array([0.0, 1.0]),
        "theory": lambda f: np.array([1.0, 2.0]),
        "samples": lambda f: np.array([[1.0, 2.0], [1.1, 2.1], [0.9, 1.9]]),
        "name": lambda f: "check",
        "passed": lambda f: True,
        "measured": lambda f: 1.0,
        "expected": lambda f: 1.0,
        "tolerance": lambda f: "0.1",
        "spec": lambda f: f.fig_spec,
        "preset": lambda f: "quick",
        "models": lambda f: ("single_location",),
        "reference": lambda f: np.array([[1.0, 2.0], [1.1, 2.1], [0.9, 1.9]]),
        "tol": lambda f: 1e-9,
    },
    "figures.report": {
        "spec": lambda f: f.fig_spec,
        "preset": lambda f: "quick",
        "sections": lambda f: [f.section],
        "meta": lambda f: {"preset": "quick", "seed": 0, "device": "cpu"},
        "seed": lambda f: 0,
        "device": lambda f: "cpu",
        "wall_s": lambda f: 1.0,
        "pvalues": lambda f: [0.01, 0.5],
        "rejected": lambda f: True,
        "row": lambda f: __import__("figures.registry", fromlist=["compare_rows"]).compare_rows(
            "x", [0.0], [1.0], np.array([[1.0], [1.1], [0.9]])
        )[0],
    },
}

#: Whole example calls (keyword arguments) of callables that the name table cannot serve.
EXAMPLES = {
    "dynamics.integrate.iterate": lambda f: dict(
        step=f.step, state0=np.array([[1.0, 0.5]]), n_steps=3, params=np.array([0.9])
    ),
    "dynamics.integrate.integrate": lambda f: dict(
        rhs=f.rhs,
        state0=np.array([[1.0, 0.5]]),
        t_span=(0.0, 0.5),
        params=np.array([1.0]),
        solver=__import__("dynamics").RK4(dt=0.1),
    ),
    "dynamics.integrate.Euler": lambda f: dict(dt=0.1),
    "dynamics.integrate.RK4": lambda f: dict(dt=0.1),
    "dynamics.integrate.Dopri5": lambda f: dict(rtol=1e-6, atol=1e-8),
    "dynamics.saveat.SaveAt": lambda f: dict(n=5),
    "dynamics.overlay.overlay": lambda f: dict(theory_fn=f.theory_fn, learned=f.traj_map, state_variables=("x0", "x1")),
    "empirical.train.train": lambda f: dict(model=f.m_gs, config=f.cfg, device="cpu"),
    "empirical.device.torch_threads": lambda f: dict(n=1),
    "empirical.models.group_sparse.logistic_baseline": lambda f: dict(
        X=np.linspace(-1, 1, 24).reshape(8, 3),
        y=np.array([1.0, -1.0] * 4),
        X_test=np.linspace(-1, 1, 12).reshape(4, 3),
        y_test=np.array([1.0, -1.0] * 2),
    ),
    "figures.registry.FigureSpec": lambda f: _fields(f.fig_spec),
    "empirical.models.single_location.SingleLocationModelSpec": lambda f: _fields(f.m_sl.spec),
    "empirical.models.random_walk.QAModelSpec": lambda f: _fields(f.m_qa.spec),
    "figures.registry.Registry": lambda f: dict(models=("single_location",), package=None),
    "empirical.models.single_location.config": lambda f: dict(name="fig5", seeds=(0,), n_steps=2),
    "empirical.models.icl_regression.config": lambda f: dict(name="paper", seeds=(0,), n_steps=2),
    "empirical.models.scan_snap.config": lambda f: dict(name="sgd", model=f.m_ss, task=f.ss, seeds=(0,), n_steps=2),
    "empirical.models.group_sparse.config": lambda f: dict(
        name="gd",
        model=__import__("empirical.models.group_sparse").models.group_sparse.GroupSparseAttention(
            f.gs, data=[f.gs_sample]
        ),
        n_steps=2,
    ),
    "empirical.models.nearest_neighbor.config": lambda f: dict(
        name="gd",
        model=__import__("empirical.models.nearest_neighbor").models.nearest_neighbor.NearestNeighborAttention(
            f.nn, data=[f.nn_prompts]
        ),
        n_steps=2,
    ),
    "empirical.models.random_walk.config": lambda f: dict(
        name="gd",
        model=__import__("empirical.models.random_walk").models.random_walk.RandomWalkAttention(
            f.rw, data=[f.rw_sample]
        ),
        n_steps=2,
    ),
    "empirical.models.random_walk.qa_tokens": lambda f: dict(words="i prefer the apple"),
    "empirical.models.random_walk.QAAttention": lambda f: dict(task="majority", data=[f.qa_sample], test=[f.qa_sample]),
    "empirical.models.single_location.predict": lambda f: dict(
        X=f.sl_X, k=f.sl_tdirs[0][None], v=f.sl_tdirs[1][None], lam=0.5
    ),
    "empirical.models.single_location.erf_mse": lambda f: dict(
        X=f.sl_X,
        y=__import__("torch").zeros((1, 2), dtype=__import__("torch").float64),
        k=f.sl_tdirs[0][None],
        v=f.sl_tdirs[1][None],
        lam=0.5,
    ),
    "empirical.models.random_walk.qa_questions": lambda f: dict(task="majority"),
    "empirical.models.random_walk.qa_sample": lambda f: dict(task="majority", n=4, rng=0),
    "empirical.models.random_walk.qa_geometry": lambda f: dict(task="majority"),
    "dynamics.compare.t_quantile": lambda f: dict(level=0.05, df=3.0),
    "dynamics.compare.gap_test": lambda f: dict(
        theory=np.array([1.0, 2.0]), mean=np.array([1.1, 1.9]), se_learned=np.array([0.1, 0.1]), n_seeds=4
    ),
    "dynamics.compare.compare": lambda f: dict(theory=f.theory_ds, learned=f.learned_ds, variables="x"),
    "dynamics.compare.mdd_factor": lambda f: dict(level=0.05, df=3.0),
    "dynamics.compare.p_value": lambda f: dict(gap=np.array([0.1, -0.3]), se=np.array([0.1, 0.1]), df=3.0),
    "dynamics.compare.adjust": lambda f: dict(results=np.array([0.01, 0.2, 0.5])),
    "closedform.icl_regression.softmax_weight_norms": lambda f: dict(d=2, L=4, omega=0.4, n=3, rng=0),
    "closedform.icl_regression.predict_nadaraya_watson": lambda f: dict(
        X=f.icl_prompts.X, y=f.icl_prompts.y, xq=f.icl_prompts.xq, omega=0.4, mu=1.6
    ),
    "closedform.nearest_neighbor.a_Nd": lambda f: dict(N=4, d=4),
    "closedform.scan_snap.lemma1_gradient": lambda f: dict(
        Y=np.eye(5) * 0.1, Z=np.eye(5) * 0.2, context=np.array([0, 1, 2]), query=3, target=4
    ),
    "closedform.scan_snap.theorem4_constants": lambda f: dict(classes=f.ss_classes1),
    "closedform.scan_snap.common_token_z": lambda f: dict(t=np.array([0.5, 1.0]), task=f.ss1),
    "dynamics.trajectory.atomic_write": lambda f: dict(
        path=os.path.join(_scratch(), "a.txt"), write=lambda p: open(p, "w").close()
    ),
    "dynamics.trajectory.write_bytes": lambda f: dict(path=os.path.join(_scratch(), "b.bin"), data=b"xy"),
    "dynamics.trajectory.save_dataset": lambda f: dict(ds=f.dataset, path=os.path.join(_scratch(), "d.nc")),
    "dynamics.sweep.sweep": lambda f: dict(fn=_sweep_fn, grid={"x": [1.0, 2.0]}, processes=1),
    "closedform.nearest_neighbor.eta_batch": lambda f: dict(
        params=np.array([1.0, 0.5]), eta_index=0, eta=np.array([0.1, 0.2]), state0=np.array([[0.1, 0.2]])
    ),
    "empirical.seeding.stream_keys": lambda f: dict(seeds=(0, 1), stream="data"),
    "empirical.seeding.BlockRNG": lambda f: dict(
        keys=__import__("empirical.seeding").seeding.stream_keys((0,), "data"),
        block=0,
        device=__import__("torch").device("cpu"),
    ),
}


def _fields(obj) -> dict:
    """The constructor arguments of a dataclass instance (to rebuild it with one field replaced)."""
    return {x.name: getattr(obj, x.name) for x in dataclasses.fields(obj) if x.init}


def _sweep_fn(x):
    """A top-level function of one named parameter for ``dynamics.sweep``."""
    return {"y": 2.0 * x}


def _scratch() -> str:
    """A scratch directory of this process for callables that write files."""
    import atexit
    import shutil
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"attndyn_bad_args_{os.getpid()}")
    if not os.path.isdir(path):
        os.makedirs(path)
        atexit.register(shutil.rmtree, path, True)  # removed when this process ends
    return path


# ----------------------------------------------------------------------------------------------------------------
# enumeration


def public_callables(module_name: str) -> list[str]:
    """Qualified names of the public callables defined in ``module_name`` (names without a leading underscore)."""
    mod = importlib.import_module(module_name)
    out = []
    for name, obj in vars(mod).items():
        if name.startswith("_") or not callable(obj) or getattr(obj, "__module__", None) != module_name:
            continue
        if inspect.isclass(obj) and issubclass(obj, BaseException) and f"{module_name}.{name}" not in EXCLUDED:
            continue  # exception classes are raised, not called with user input
        out.append(f"{module_name}.{name}")
    return out


def resolve(qualname: str):
    """The object named ``module.name``."""
    module_name, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


def parameters(qualname: str) -> list[inspect.Parameter]:
    """The named parameters of ``qualname`` (``*args``/``**kwargs`` left out)."""
    sig = inspect.signature(resolve(qualname))
    return [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def example(qualname: str) -> dict:
    """Keyword arguments of a valid call of ``qualname`` (KeyError if the tables cannot build one)."""
    if qualname in EXAMPLES:
        return dict(EXAMPLES[qualname](F))
    module_name = qualname.rpartition(".")[0]
    table = {**NAMES["*"], **NAMES.get(module_name, {})}
    kwargs = {}
    for p in parameters(qualname):
        if p.default is not inspect.Parameter.empty:
            continue
        if p.name not in table:
            raise KeyError(f"no example value for parameter {p.name!r} of {qualname}")
        kwargs[p.name] = table[p.name](F)
    return kwargs


#: Where a probe calls the callable: directly (``"top"``), or from inside a user's function run by
#: ``dynamics.sweep(processes=1)`` (``"callback"``), where a checked call must check its arguments just the same.
DEPTHS = ("top", "callback")


def call(qualname: str, kwargs: dict, depth: str = "top"):
    """Call ``qualname``: leading positional parameters present in ``kwargs`` positionally, the rest by keyword;
    at ``depth="callback"`` from inside the function of a one-configuration ``dynamics.sweep(processes=1)`` (what
    the call returns or raises there is passed on unchanged)."""
    fn = resolve(qualname)
    args = []
    for p in parameters(qualname):
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.name not in kwargs:
            break
        args.append(kwargs.pop(p.name))
    if depth == "top":
        return fn(*args, **kwargs)
    if depth != "callback":
        raise ValueError(f"depth must be one of {DEPTHS}; got {depth!r}")
    import dynamics

    box = {}

    def user_fn(c):
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001  (raised again below, outside the sweep)
            box["error"] = exc
        return 0.0

    dynamics.sweep(user_fn, {"c": [0]}, processes=1)
    if "error" in box:
        raise box["error"]
    return box["result"]


# ----------------------------------------------------------------------------------------------------------------
# bad values


def _is_str_param(p: inspect.Parameter, valid) -> bool:
    ann = str(p.annotation)
    return isinstance(valid, str | os.PathLike) or "str" in ann or "Path" in ann or p.name in ("path", "device")


def bad_value(kind: str, p: inspect.Parameter, valid):
    """The bad value of ``kind`` for parameter ``p`` whose valid example value is ``valid``.

    Returns ``NotImplemented`` where the kind does not apply (None for a parameter that defaults to None, a string
    for a string parameter, a huge size for a non-integer, a wrong shape for a non-array).
    """
    if kind == "none":
        if valid is None or p.default is None or "None" in str(p.annotation):
            return NotImplemented
        return None
    if kind == "string":
        return NotImplemented if _is_str_param(p, valid) else "abc"
    if kind == "object":
        return object()
    if kind == "nan":
        return _like(valid, math.nan)
    if kind == "inf":
        return _like(valid, math.inf)
    if kind == "negative":
        return _like(valid, -1.5 if not _is_int_like(valid) else -3)
    if kind == "zero":
        return _like(valid, 0)
    if kind == "complex":
        return _like(valid, 0.5 + 0.5j)
    if kind == "huge":
        return 2**40 if _is_int_like(valid) else NotImplemented
    if kind == "wrong_shape":
        arr = _as_array(valid)
        if arr is None or arr.ndim == 0:
            return NotImplemented
        return np.ones(arr.shape + (2,)) * 0.5
    raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")


def _is_int_like(valid) -> bool:
    return isinstance(valid, int | np.integer) and not isinstance(valid, bool)


def _as_array(valid):
    if isinstance(valid, np.ndarray):
        return valid
    if type(valid).__module__.startswith("torch"):
        return valid.detach().cpu().numpy() if hasattr(valid, "detach") else None
    if isinstance(valid, list | tuple) and valid and all(isinstance(v, int | float) for v in valid):
        return np.asarray(valid)
    return None


def _like(valid, x):
    """``x`` in the form of ``valid``: a scalar for a scalar, a filled array of the same shape for an array."""
    arr = _as_array(valid)
    if arr is None or arr.ndim == 0 or arr.size == 0:
        if isinstance(x, float) and _is_int_like(valid) and math.isfinite(x) and x.is_integer():
            return int(x)
        return x
    if isinstance(x, complex):
        out = arr.astype(np.complex128)
        out.flat[0] = x
    else:
        out = arr.astype(np.float64 if not (_is_int_like(x) and arr.dtype.kind in "iu") else arr.dtype).copy()
        out.flat[0] = x
    if type(valid).__module__.startswith("torch"):
        import torch

        return torch.as_tensor(out)
    return out


def probes(qualname: str, valid: dict) -> list[tuple[str, str]]:
    """(parameter, kind) pairs that apply to ``qualname`` with valid arguments ``valid``."""
    out = []
    for p in parameters(qualname):
        v = valid.get(p.name, p.default)
        for kind in KINDS:
            if bad_value(kind, p, v) is not NotImplemented:
                out.append((p.name, kind))
    return out


# ----------------------------------------------------------------------------------------------------------------
# verdict


def names_parameter(message: str, name: str) -> bool:
    """Whether ``message`` names ``name`` as a word (``x`` in ``"x must be..."``, ``spec.d``, ``x[0]``)."""
    return re.search(r"(?<![\w'])" + re.escape(name) + r"(?![\w'])", message) is not None


def _raised_in_project(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc``'s traceback is a file of the project packages."""
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return False
    fname = os.path.abspath(tb[-1].filename)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rel = os.path.relpath(fname, root)
    return rel.split(os.sep)[0] in PROJECT_PACKAGES


def classify_exception(exc: BaseException, param: str, kind: str = "") -> str:
    """Verdict on an exception raised by a probe of parameter ``param`` with a bad value of ``kind`` (see the module
    docstring). A ``dynamics.DivergenceError`` (the run blew up, with the step, trajectory and variable named and the
    partial run attached) for a value that may be valid (zero, negative, another shape) is the designed answer of a
    valid call whose dynamics diverge: unjudged."""
    if isinstance(exc, MemoryError):
        return "memory"
    if type(exc).__name__ == "DivergenceError" and kind not in ALWAYS_INVALID:
        return "unjudged"
    if not _raised_in_project(exc):
        return "library"
    if isinstance(exc, ValueError | TypeError) and names_parameter(str(exc), param):
        return "clear"
    return "unclear"


def has_nonfinite(obj, depth: int = 0) -> bool:
    """Whether a NaN/inf occurs in a returned object (arrays, tensors, numbers, containers, dataclasses, datasets)."""
    if depth > 6:
        return False
    if isinstance(obj, bool | str | bytes) or obj is None:
        return False
    if isinstance(obj, int | np.integer):
        return False
    if isinstance(obj, float | complex | np.floating | np.complexfloating):
        return not np.isfinite(obj)
    if isinstance(obj, np.ndarray):
        return obj.dtype.kind in "fc" and not np.all(np.isfinite(obj))
    mod = type(obj).__module__
    if mod.startswith("torch"):
        import torch

        if isinstance(obj, torch.Tensor):
            return bool(obj.is_floating_point() or obj.is_complex()) and not bool(torch.isfinite(obj).all())
        if isinstance(obj, torch.nn.Module):
            return any(has_nonfinite(t, depth + 1) for t in obj.state_dict().values())
        return False
    if mod.startswith("xarray"):
        if hasattr(obj, "data_vars"):
            return any(has_nonfinite(v.values, depth + 1) for v in obj.data_vars.values())
        return has_nonfinite(getattr(obj, "values", None), depth + 1)
    if isinstance(obj, Mapping):
        return any(has_nonfinite(v, depth + 1) for v in obj.values())
    if isinstance(obj, list | tuple | set | frozenset):
        return any(has_nonfinite(v, depth + 1) for v in list(obj)[:1000])
    if dataclasses.is_dataclass(obj):
        return any(has_nonfinite(getattr(obj, f.name, None), depth + 1) for f in dataclasses.fields(obj))
    if hasattr(obj, "data") and type(obj).__name__ == "Trajectory":
        return has_nonfinite(obj.data, depth + 1)
    return False


def classify_result(result, kind: str, param: str, qualname: str = "", nan_by_design: bool = False) -> str:
    """Verdict on a normal return of a probe of ``qualname`` with a bad value of ``kind`` for ``param``.

    ``nan_by_design``: the valid example call's answer holds NaN/inf already (documented NaN entries, e.g. "NaN
    outside G_DT(n)"), so a NaN in the answer is no evidence of a silent failure.
    """
    if kind in VALID_VALUES.get((qualname, param), ()) or kind in VALID_VALUES.get(("*", param), ()):
        return "unjudged"  # a documented valid input: its answer (NaN entries included) is tested elsewhere
    if has_nonfinite(result) and not nan_by_design:
        return "silent_nan"
    if kind in ALWAYS_INVALID or (kind in ("zero", "negative") and param in POSITIVE):
        return "accepted"
    return "unjudged"


def run_probe(qualname: str, param: str, kind: str, value=NotImplemented, depth: str = "top") -> tuple[str, str]:
    """Run one probe in this process; return (verdict, detail). ``param == ''`` runs the valid call.

    ``value`` replaces the standard bad value of ``kind`` (the CI test draws it with hypothesis); ``depth`` is where
    the call is made (``DEPTHS``).
    """
    import warnings

    kwargs = example(qualname)
    if param:
        p = next(q for q in parameters(qualname) if q.name == param)
        if value is NotImplemented:
            value = bad_value(kind, p, kwargs.get(param, p.default))
        kwargs[param] = value
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = call(qualname, kwargs, depth)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001  (the verdict is the point; SystemExit from a callable counts too)
        if not param:
            return "baseline_error", f"{type(exc).__name__}: {exc}"[:300]
        return classify_exception(exc, param, kind), f"{type(exc).__name__}: {exc}"[:300]
    if not param:
        _NAN_BY_DESIGN[qualname] = has_nonfinite(result)
        return "ok", ""
    if qualname not in _NAN_BY_DESIGN:
        run_probe(qualname, "", "", depth=depth)
    verdict = classify_result(result, kind, param, qualname, _NAN_BY_DESIGN.get(qualname, False))
    return verdict, repr(type(result).__name__)


#: {qualname: whether its valid example call answers with a NaN/inf}, filled on first use in this process.
_NAN_BY_DESIGN: dict[str, bool] = {}


def covered_callables() -> tuple[list[str], dict[str, str]]:
    """(all public callables of MODULES, {qualname: reason} of those not swept: EXCLUDED or no example)."""
    allq, skipped = [], {}
    for m in MODULES:
        for q in public_callables(m):
            allq.append(q)
            if q in EXCLUDED:
                skipped[q] = EXCLUDED[q]
    return allq, skipped


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run tools/bad_arguments.py")
