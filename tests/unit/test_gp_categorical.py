"""The FTS family's kernel sees a categorical coordinate one-hot (``model_inputs``): every two
different choices are equally far apart, so the order of the choices does not change the model,
and a space without categoricals runs exactly as before."""

from __future__ import annotations

import hashlib
import itertools
import math

import numpy as np
import pytest
from scipy.linalg import cho_factor, cho_solve

from fedxab.algorithms.ftsde import FTSDEClient, FTSDEServer
from fedxab.algorithms.registry import make_federation
from fedxab.algorithms.rff import (
    RandomFeatures,
    WeightPosterior,
    model_inputs,
    se_kernel,
)
from fedxab.algorithms.ts import TSBroadcast, TSClient
from fedxab.errors import ConfigError
from fedxab.space import Categorical, Float, Int, SearchSpace

CATS = (None, 4)  # a continuous coordinate, then a categorical of 4 choices
CENTRES = (np.arange(4) + 0.5) / 4  # choice k's cell centre


def test_two_different_choices_are_at_distance_one_whatever_their_indices():
    X = np.column_stack([np.full(4, 0.3), CENTRES])
    Z = model_inputs(X, CATS)
    assert Z.shape == (4, 5) and np.all(Z[:, 0] == 0.3)
    dist = {
        round(float(np.linalg.norm(Z[i] - Z[j])), 12)
        for i, j in itertools.combinations(range(4), 2)
    }
    assert dist == {1.0}
    kernel = se_kernel(Z, Z, lengthscale=0.5, signal_variance=2.0)
    off = kernel[~np.eye(4, dtype=bool)]
    assert np.allclose(off, 2.0 * math.exp(-1 / (2 * 0.5**2)), rtol=0, atol=1e-12)
    # every point of a choice's cell (as the space decodes it) has the same input
    inside = np.column_stack([np.full(3, 0.3), [0.5, 0.6, 0.7499]])
    assert np.all(model_inputs(inside, CATS) == Z[2])


def test_without_a_categorical_the_inputs_are_the_points_themselves():
    X = np.random.default_rng(0).random((5, 2))
    assert model_inputs(X, None) is X
    assert SearchSpace({"a": Float(0, 1), "b": Int(1, 5)}).categories == (None, None)
    assert SearchSpace({"a": Float(0, 1), "c": Categorical(["x", "y"])}).categories == (None, 2)


def _data(perm):
    """20 points of (continuous, choice) and their values, the choices relabelled by ``perm``
    (choice k is written at cell perm[k]): the same data under a reordering of the choices."""
    rng = np.random.default_rng(3)
    u, k = rng.random(20), rng.integers(0, 4, 20)
    y = np.sin(4 * u) + np.array([0.0, 1.0, -0.5, 2.0])[k]
    return np.column_stack([u, CENTRES[np.asarray(perm)[k]]]), y


@pytest.mark.parametrize("perm", [(3, 1, 0, 2), (1, 0, 3, 2), (2, 3, 1, 0)])
def test_reordering_the_choices_gives_the_same_gp_posterior_means(perm):
    """Exact GP on ``model_inputs``: the posterior mean at corresponding points agrees within
    1e-9. Fails on the raw encoded coordinate, where cell 0 is nearer cell 1 than cell 3."""
    (X, y), (Xp, _) = _data((0, 1, 2, 3)), _data(perm)
    grid_u = np.linspace(0, 1, 7)
    test = np.array([[u, CENTRES[k]] for u in grid_u for k in range(4)])
    test_p = np.array([[u, CENTRES[perm[k]]] for u in grid_u for k in range(4)])

    def mean(X, y, T, cats):
        Z, ZT = model_inputs(X, cats), model_inputs(T, cats)
        chol = cho_factor(se_kernel(Z, Z, 0.4) + 1e-4 * np.eye(len(y)), lower=True)
        return se_kernel(ZT, Z, 0.4) @ cho_solve(chol, y)

    assert np.max(np.abs(mean(X, y, test, CATS) - mean(Xp, y, test_p, CATS))) < 1e-9
    assert np.max(np.abs(mean(X, y, test, None) - mean(Xp, y, test_p, None))) > 1e-3


@pytest.mark.parametrize("perm", [(3, 1, 0, 2), (2, 3, 1, 0)])
def test_reordering_the_choices_relabels_the_random_features(perm):
    """The RFF model: the features of reordered choices are those of a draw whose one-hot
    frequencies are permuted alike (an equally likely draw), and the posterior means at
    corresponding points agree within 1e-9."""
    (X, y), (Xp, _) = _data((0, 1, 2, 3)), _data(perm)
    phi = RandomFeatures.from_seed(2, 30, 0.5, seed=4, categories=CATS)
    cols = np.empty(5, dtype=int)
    cols[0] = 0
    cols[1 + np.asarray(perm)] = 1 + np.arange(4)  # reordered choice c's column: the original's
    phi_p = RandomFeatures(phi.spectral[:, cols], phi.phase, categories=CATS)
    nu = WeightPosterior.fit(phi(X), y, 1e-3).mean
    nu_p = WeightPosterior.fit(phi_p(Xp), y, 1e-3).mean
    test = np.array([[u, CENTRES[k]] for u in np.linspace(0, 1, 5) for k in range(4)])
    test_p = np.array([[u, CENTRES[perm[k]]] for u in np.linspace(0, 1, 5) for k in range(4)])
    assert np.max(np.abs(phi(test) @ nu - phi_p(test_p) @ nu_p)) < 1e-9


def test_the_shared_features_are_the_same_at_every_party_and_sized_by_the_space():
    space = SearchSpace({"lr": Float(0, 1), "kind": Categorical(["a", "b", "c", "d"])})
    server, clients = make_federation(
        "ftsde",
        space.domain,
        n_clients=3,
        budget=14,
        seed=2,
        params={"n_features": 16, "n_init": 4},
        edges=space.edges,
        categories=space.categories,
    )
    assert server.features.spectral.shape == (16, 5) and server.features.dim == 2
    for c in clients:
        assert c.settings.categories == (None, 4)
        assert np.array_equal(c.features.spectral, server.features.spectral)
        assert np.array_equal(c.features.phase, server.features.phase)


def test_the_gradient_along_a_categorical_is_zero_and_exact_along_the_rest():
    phi = RandomFeatures.from_seed(2, 20, 0.5, seed=1, categories=CATS)
    x, h = np.array([0.4, 0.6]), 1e-6
    jac = phi.jacobian(x)
    assert np.all(jac[:, 1] == 0.0)
    step = (phi(np.array([[0.4 + h, 0.6]])) - phi(np.array([[0.4 - h, 0.6]])))[0] / (2 * h)
    assert np.allclose(jac[:, 0], step, atol=1e-6)


def test_a_categorical_ts_run_pulls_points_of_the_box():
    kw = {"budget": 9, "n_init": 3, "n_candidates": 32, "n_restarts": 1, "own_fit_every": 3}
    ts = TSClient(0, [[0, 1], [0, 1]], n_clients=1, categories=CATS, **kw)
    ts.answer(TSBroadcast(1, 9), lambda X: X[:, 0] + (X[:, 1] > 0.5))
    assert ts.X.shape == (9, 2) and np.all((ts.X >= 0) & (ts.X <= 1))


def test_bad_categories_name_the_field():
    with pytest.raises(ConfigError, match="categories"):
        FTSDEClient(0, [[0, 1]], n_clients=1, budget=12, categories=(None, 3))
    with pytest.raises(ConfigError, match="categories"):
        FTSDEClient(0, [[0, 1]], n_clients=1, budget=12, categories=(0,))


# --------------------------------------------------------------- unchanged without categoricals
BOX = [[0.0, 1.0], [-1.0, 2.0], [0.0, 1.0]]
KW = {
    "budget": 10,
    "n_init": 4,
    "n_features": 12,
    "n_candidates": 32,
    "n_restarts": 1,
    "own_fit_every": 3,
    "own_fit_restarts": 1,
    "seed": 7,
}
BOX_RUN_DIGEST = "c1e3b624460e2670fbbd63b6ab145acfa997c33b80d9edc07071887e6de274b6"
"""Computed with the code before the categorical inputs existed (the FTS agents' points and
rewards, the server's recommendation, an exact-sampler TS agent's points). Depends on libm's
cos/exp and the BLAS: recompute with the previous commit when the platform changes."""


def _evaluate(X):
    return np.sin(5 * X[:, 0]) - (X[:, 1] - 0.5) ** 2 + 0.3 * X[:, 2]


def _box_run_digest(**extra):
    shared = {k: KW[k] for k in ("budget", "n_init", "n_features", "seed")}
    server = FTSDEServer(BOX, n_clients=2, **shared, **extra)
    clients = [FTSDEClient(m, BOX, n_clients=2, **KW, **extra) for m in range(2)]
    broadcast = server.start()
    while not hasattr(broadcast, "recommendation"):
        for c in clients:
            server.receive(c.client_id, c.answer(broadcast, _evaluate))
        broadcast = server.close_phase()
    ts_kw = {k: v for k, v in KW.items() if k != "n_features"}
    ts = TSClient(0, BOX, n_clients=1, own_sampler="exact", **ts_kw, **extra)
    ts.answer(TSBroadcast(1, 10), _evaluate)
    h = hashlib.sha256()
    for arr in [*(c.X for c in clients), *(c.y for c in clients), server.recommend(), ts.X]:
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("extra", [{}, {"categories": (None, None, None)}])
def test_a_box_run_is_bit_for_bit_what_it_was(extra):
    assert _box_run_digest(**extra) == BOX_RUN_DIGEST
