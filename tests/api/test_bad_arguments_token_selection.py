"""Bad arguments of the token-selection models (closedform and empirical nearest_neighbor, group_sparse,
random_walk) get a clear error naming the argument (issue 18, dynamics.validation)."""

import numpy as np
import pytest

import closedform.group_sparse as gs
import closedform.nearest_neighbor as nn
import closedform.random_walk as rw

NN = nn.NearestNeighborTask(d=3, N=4, sigma=1.0, eta=1.0)
GS = gs.GroupSparseTask()
RW = rw.RandomWalkTask(K=3, N=4, p=0.7, M=10)


@pytest.mark.parametrize(
    "call, exc, pattern",
    [
        # the example: AttributeError: 'NoneType' object has no attribute 'N'
        (lambda: nn.sample_prompts(None, 5), TypeError, r"^task must be a NearestNeighborTask"),
        (lambda: nn.sample_prompts(NN, True), TypeError, r"^n_prompts must be an integer"),
        (lambda: nn.sample_prompts(NN, 2**40), ValueError, r"^n_prompts must be an integer >= 1 and <= 2147483647"),
        (lambda: nn.map(NN, nn.sample_prompts(NN, 5, 0), 2**40), ValueError, r"^n_steps must be an integer"),
        (lambda: nn.map(NN, "prompts", 3), TypeError, r"^prompts must be a Prompts"),
        (
            lambda: nn.attention(np.ones((5, 5, 2)), nn.embed(nn.sample_prompts(NN, 3, 0, labels=True))),
            ValueError,
            r"^W must",
        ),
        (lambda: nn.reduced_loss(float("nan"), 1.0, nn.sample_prompts(NN, 3, 0)), ValueError, r"^xi1 must"),
        (lambda: nn.signed_permutations(12), ValueError, r"^d must be an integer >= 1 and <= 7"),
        (lambda: gs.sample(GS, 2**40, 0), ValueError, r"^n must be an integer"),
        (lambda: gs.GroupSparseSample(X=None, y=np.ones(2), v_star=np.ones(4), n_unique=2), TypeError, r"^X must"),
        (
            lambda: gs.GroupSparseSample(X=np.full((2, 4, 6), np.nan), y=np.ones(2), v_star=np.ones(4), n_unique=2),
            ValueError,
            r"^X must be",
        ),
        (lambda: gs.step2_expectations(GS, epsabs=None), TypeError, r"^epsabs must"),
        (lambda: gs.map(GS, 3, n_samples=2**40), ValueError, r"^n_samples must"),
        (lambda: gs.full_gd(GS, gs.sample(GS, 10, 0), 3, project_steps=1), TypeError, r"^project_steps must be a bool"),
        # the example: accuracy of a NaN array returned 0.4
        (lambda: rw.accuracy(RW, np.full((5, 3), np.nan), rw.sample_walks(RW, 5, 0)), ValueError, r"^f must"),
        (lambda: rw.WalkSample(states=np.full((3, 4), np.nan)), ValueError, r"^states must"),
        (lambda: rw.map(RW, 3, walks=None), TypeError, r"^walks must be a sample size"),
        (lambda: rw.map(RW, 3, walks=True), TypeError, r"^walks must be a sample size"),
        (lambda: rw.empirical_transitions(rw.sample_walks(RW, 5, 0), 0), ValueError, r"^K must be an integer >= 3"),
        (lambda: rw.V_direction(RW, "paper"), ValueError, r"^kind must be one of"),
    ],
)
def test_bad_argument_is_named(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_reduced_gradient_refuses_an_undefined_log_loss():
    # V = -1.5 everywhere makes e_y^T f + eps < 0 (f is an average of V's columns): the loss of Sec. C.4 is log of
    # a negative number; before, the gradient came back as NaN without an error
    V, a, c = rw.unpack_state(RW, rw.initial_state(RW))
    with pytest.raises(ValueError, match="log loss"):
        rw.reduced_gradient(RW, rw.sample_walks(RW, 20, 0), V - 1.5, a, c)


def test_torch_arguments_are_checked_for_type_and_shape():
    torch = pytest.importorskip("torch")
    import empirical.models as em
    import empirical.models.nearest_neighbor as enn
    import empirical.models.random_walk as erw

    with pytest.raises(ValueError, match=r"^name must be one of"):
        em.load("nearest")
    with pytest.raises(TypeError, match=r"^params must be a mapping"):
        enn.predict(None, {"H": torch.zeros(1, 2, 5, 5)})
    with pytest.raises(ValueError, match=r"^params must be a mapping of torch tensors with keys"):
        enn.predict({"V": torch.zeros(1, 5, 5)}, {"H": torch.zeros(1, 2, 5, 5)})
    with pytest.raises(ValueError, match=r"^batch\['H'\] must"):
        enn.predict({"W": torch.zeros(1, 5, 5)}, {"H": torch.zeros(2, 5, 5)})
    with pytest.raises(TypeError, match=r"^X must be a torch.Tensor"):
        enn.embed(np.zeros((2, 4, 3)), torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"^seeds must"):
        erw.walk_samples(RW, 10, [0, -1])
    with pytest.raises(TypeError, match=r"^data must be a WalkSample"):
        erw.RandomWalkAttention(RW, data=3)


def test_far_negative_xi_gives_the_limit_not_an_overflow():
    # e^{-2 xi2} q0^3 -> 0 as xi2 -> -inf (q0 ~ e^{xi2}); math.exp raised OverflowError before
    g = nn.gradient_xi1_zero(3, 4, -9e5)
    assert np.all(np.isfinite(g)) and g[1] == 0.0
    p = nn.sample_prompts(NN, 5, 0, labels=True)
    assert np.all(nn.shifted_test_bound(-1e6, 1.0, p, 0.2) == np.inf)  # no bound, documented as +inf


def test_logistic_baseline_checks_that_its_arrays_agree():
    gm = pytest.importorskip("empirical.models.group_sparse")
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((8, 3)), np.sign(rng.standard_normal(8))
    assert 0.0 <= gm.logistic_baseline(X, y, X, y) <= 1.0
    with pytest.raises(ValueError, match="must agree"):
        gm.logistic_baseline(X, y, np.ones((8, 3, 2)), y)
