"""DP-FTS-DE's synthetic objectives: GP samples on a 1-D grid and their clients (spec-dpftsde
§6, §7.1, §9 items 10-11)."""

from __future__ import annotations

import numpy as np
import pytest
from config_factory import sim_config

from fedxab.agents.federation import Federation
from fedxab.config import config_from_dict
from fedxab.errors import ConfigError, ObjectiveError
from fedxab.objectives import GPGrid, GridObjective, gp_sample_family, make_objective
from fedxab.objectives.gp import (
    GP_JITTER,
    gp_grid_factor,
    gp_grid_values,
    sample_gp_grid,
    se_kernel,
    unit_grid,
)
from fedxab.run.assembly import make_family
from fedxab.seeding import stream

G = 1000


# ------------------------------------------------------------------------------ grid objective
def test_grid_objective_returns_the_value_at_the_nearest_grid_point():
    values = np.array([0.0, 3.0, 1.0, 2.0, 3.0])  # grid 0, .25, .5, .75, 1
    f = GridObjective(values)
    np.testing.assert_array_equal(f.grid[:, 0], [0.0, 0.25, 0.5, 0.75, 1.0])
    x = np.array([[0.0], [0.12], [0.13], [0.5], [0.74], [0.88], [1.0], [-3.0], [7.0]])
    np.testing.assert_array_equal(f(x), [0.0, 0.0, 3.0, 1.0, 2.0, 3.0, 3.0, 0.0, 3.0])
    # an exact midpoint goes to the even index (numpy rint): 0.125 -> 0, 0.375 -> 2
    np.testing.assert_array_equal(f.index(np.array([[0.125], [0.375]])), [0, 2])
    # exact optimum: the largest value, every grid point attaining it
    assert f.optimum_value == 3.0
    np.testing.assert_array_equal(f.maximizers, [[0.25], [1.0]])
    np.testing.assert_array_equal(f.maximizer, [0.25])
    assert f.regret(f.maximizers).tolist() == [0.0, 0.0]
    assert not f.values.flags.writeable and not f.grid.flags.writeable


def test_grid_objective_on_a_large_grid_hits_every_grid_point_exactly():
    rng = np.random.default_rng(0)
    f = GridObjective(rng.random(G))
    assert f.grid.shape == (G, 1)
    np.testing.assert_array_equal(f(f.grid), f.values)
    # any point within half a spacing of grid point i evaluates to value i
    i = rng.integers(0, G, size=200)
    jitter = rng.uniform(-0.49, 0.49, size=200) / (G - 1)
    x = np.clip(i / (G - 1) + jitter, 0.0, 1.0)[:, None]
    np.testing.assert_array_equal(f(x), f.values[i])


@pytest.mark.parametrize("values", [[1.0], [[1.0, 2.0]], [0.0, np.nan]])
def test_grid_objective_rejects_bad_values(values):
    with pytest.raises(ObjectiveError, match="grid objective"):
        GridObjective(np.array(values))


# ------------------------------------------------------------------------------ GP samples
def test_gp_sample_is_normalised_to_unit_interval_with_exact_optimum():
    f = GPGrid()
    assert (f.lengthscale, f.grid_size, f.sample_seed) == (0.03, G, None)
    np.testing.assert_array_equal(f.domain, [[0.0, 1.0]])
    assert f.values.min() == 0.0 and f.values.max() == 1.0
    assert f.optimum_value == 1.0
    assert f(f.maximizer[None])[0] == 1.0
    np.testing.assert_array_equal(f.grid[:, 0], unit_grid(G))
    # the standalone objective is the draw of seed 0; sample_seed fixes another one
    np.testing.assert_array_equal(f.values, gp_grid_values(stream(0, "gp-family")))
    g = GPGrid(sample_seed=5)
    np.testing.assert_array_equal(g.values, gp_grid_values(stream(5, "gp-family")))
    assert g.for_seed(9) is g
    np.testing.assert_array_equal(f.for_seed(9).values, GPGrid(sample_seed=9).values)


def test_the_covariance_factor_is_computed_once_per_grid_and_lengthscale():
    a = gp_grid_factor(G, 0.03)
    assert gp_grid_factor(G, 0.03) is a  # cached: repeated seeds reuse it
    assert not a.flags.writeable
    x = unit_grid(G)[:50]
    np.testing.assert_allclose(
        (a @ a.T)[:50, :50], se_kernel(x, x, 0.03) + GP_JITTER * np.eye(50), atol=1e-9
    )


def test_empirical_covariance_of_gp_samples_matches_the_se_kernel():
    """Seeded check: 4000 raw draws; at grid points 0, 10, 20, 30, 60 (distances 0..0.06, i.e.
    0..2 lengthscales) the sample covariance is within 0.08 of k(x, y) + jitter (standard error
    of each entry <= sqrt(2/4000) ~ 0.022, so about 3.6 standard errors)."""
    draws = sample_gp_grid(stream(7, "test-gp-cov"), G, 0.03, size=4000)
    assert draws.shape == (4000, G)
    idx = np.array([0, 10, 20, 30, 60])
    sample = draws[:, idx]
    emp = sample.T @ sample / sample.shape[0]  # zero-mean process
    x = unit_grid(G)[idx]
    expected = se_kernel(x, x, 0.03) + GP_JITTER * np.eye(idx.size)
    assert np.max(np.abs(emp - expected)) < 0.08
    assert np.max(np.abs(sample.mean(axis=0))) < 0.08


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"lengthscale": 0.0}, "objective.lengthscale"),
        ({"lengthscale": "wide"}, "objective.lengthscale"),
        ({"grid_size": 1}, "objective.grid_size"),
        ({"grid_size": 10.5}, "objective.grid_size"),
        ({"sample_seed": -1}, "objective.sample_seed"),
        ({"width": 3}, "objective.width"),
    ],
)
def test_bad_gp_objective_parameters_name_the_field(params, field):
    with pytest.raises(ConfigError) as err:
        make_objective("gp-grid", **params)
    assert err.value.field == field


# ------------------------------------------------------------------------------ the family
def test_perturbed_family_is_f_plus_minus_two_hundredths_per_point():
    fam = gp_sample_family(6, seed=3)
    assert fam.kind == "gp_perturbed" and fam.n_clients == 6
    f = fam.global_objective
    np.testing.assert_array_equal(f.values, GPGrid(sample_seed=3).values)
    assert f.values.min() == 0.0 and f.values.max() == 1.0
    signs = []
    for n, client in enumerate(fam.clients):
        assert isinstance(client, GridObjective) and client.grid_size == G
        np.testing.assert_allclose(np.abs(client.values - f.values), 0.02, rtol=0, atol=1e-15)
        d = client.values - f.values
        expected = 2.0 * stream(3, "family", n).integers(0, 2, size=G) - 1.0
        np.testing.assert_array_equal(np.sign(d), expected)
        signs.append(np.sign(d))
        # exact optimum of the client: its own largest grid value
        assert client.optimum_value == client.values.max()
        assert client(client.maximizer[None])[0] == client.optimum_value
    signs = np.array(signs)
    # independent fair signs per (client, point): about half are +, and clients differ
    assert abs(np.mean(signs > 0) - 0.5) < 0.03
    assert not np.array_equal(signs[0], signs[1])


def test_per_client_reading_is_a_constant_offset_and_magnitude_is_configurable():
    fam = gp_sample_family(8, seed=3, per="client", magnitude=0.05)
    f = fam.global_objective.values
    offsets = [np.unique(np.round(c.values - f, 12)) for c in fam.clients]
    assert all(o.size == 1 and abs(abs(o[0]) - 0.05) < 1e-12 for o in offsets)
    assert {np.sign(o[0]) for o in offsets} == {-1.0, 1.0}
    for c, o in zip(fam.clients, offsets, strict=True):
        assert c.optimum_value == pytest.approx(1.0 + o[0], abs=1e-12)


def test_same_seed_same_family_different_seed_different():
    a, b, c = gp_sample_family(3, 11), gp_sample_family(3, 11), gp_sample_family(3, 12)
    for x, y in zip(a.clients, b.clients, strict=True):
        np.testing.assert_array_equal(x.values, y.values)
    np.testing.assert_array_equal(a.global_objective.values, b.global_objective.values)
    assert not np.array_equal(a.global_objective.values, c.global_objective.values)
    assert not np.array_equal(a.clients[0].values, c.clients[0].values)
    # client n does not depend on the number of clients
    more = gp_sample_family(5, 11)
    np.testing.assert_array_equal(more.clients[2].values, a.clients[2].values)
    # sample_seed fixes f across run seeds; the perturbations still follow the run seed
    d, e = gp_sample_family(2, 11, sample_seed=4), gp_sample_family(2, 12, sample_seed=4)
    np.testing.assert_array_equal(d.global_objective.values, e.global_objective.values)
    assert not np.array_equal(d.clients[0].values, e.clients[0].values)


def test_mixture_family_mixes_normalised_components():
    alpha, n = 0.7, 4
    fam = gp_sample_family(n, seed=2, alpha=alpha)
    assert fam.kind == "gp_mixture"
    base = gp_grid_values(stream(2, "gp-family"))
    for k, client in enumerate(fam.clients):
        own = gp_grid_values(stream(2, "family", k))
        assert own.min() == 0.0 and own.max() == 1.0
        np.testing.assert_allclose(client.values, alpha * own + (1 - alpha) * base, atol=1e-15)
        assert client.values.min() >= 0.0 and client.values.max() <= 1.0
    mean = np.mean([c.values for c in fam.clients], axis=0)
    np.testing.assert_allclose(fam.global_objective.values, mean, atol=1e-15)
    assert fam.global_objective.optimum_value == fam.global_objective.values.max()
    # alpha = 0: every client is the base function; alpha = 1: independent functions
    same = gp_sample_family(3, seed=2, alpha=0.0)
    for c in same.clients:
        np.testing.assert_array_equal(c.values, base)
    indep = gp_sample_family(3, seed=2, alpha=1.0)
    np.testing.assert_array_equal(indep.clients[1].values, gp_grid_values(stream(2, "family", 1)))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n_clients": 0}, "family.n_clients"),
        ({"seed": -1}, "seed"),
        ({"lengthscale": -0.1}, "family.lengthscale"),
        ({"grid_size": 0}, "family.grid_size"),
        ({"magnitude": -0.02}, "family.magnitude"),
        ({"per": "row"}, "family.per"),
        ({"alpha": 1.5}, "family.alpha"),
        ({"alpha": -0.1}, "family.alpha"),
        ({"alpha": 0.5, "magnitude": 0.02}, "family.magnitude"),
        ({"alpha": 0.5, "per": "client"}, "family.per"),
        ({"sample_seed": -2}, "family.sample_seed"),
    ],
)
def test_bad_family_arguments_name_the_field(kwargs, field):
    args = {"n_clients": 2, "seed": 0} | kwargs
    with pytest.raises(ConfigError) as err:
        gp_sample_family(**args)
    assert err.value.field == field


# ------------------------------------------------------------------------------ configuration
def _config(heterogeneity="gp-perturbed", objective=None, **federation):
    return sim_config(
        clients=3,
        budget=40,
        objective={
            "name": "gp-grid",
            **(objective or {}),
            "noise": {"name": "gaussian", "sigma": 0.1},  # variance 0.01 (§6)
        },
        heterogeneity=heterogeneity,
        run={"seed": 0},
        federation=federation,
    )


def test_config_builds_the_gp_families_from_the_run_seed():
    cfg = _config()
    base = make_objective("gp-grid")
    fam = make_family(base, cfg, seed=5)
    ref = gp_sample_family(3, 5)
    assert fam.kind == "gp_perturbed"
    np.testing.assert_array_equal(fam.global_objective.values, ref.global_objective.values)
    np.testing.assert_array_equal(fam.clients[1].values, ref.clients[1].values)

    per_client = make_family(base, _config(perturbation="client", heterogeneity_scale=0.1), 5)
    assert (
        np.unique(np.round(per_client.clients[0].values - ref.global_objective.values, 12)).size
        == 1
    )

    mix = make_family(base, _config("gp-mixture", mixture_alpha=1.0), 5)
    ref_mix = gp_sample_family(3, 5, alpha=1.0)
    np.testing.assert_array_equal(mix.clients[2].values, ref_mix.clients[2].values)
    default_mix = make_family(base, _config("gp-mixture"), 5)  # alpha = 0.7 by default
    np.testing.assert_array_equal(
        default_mix.clients[0].values, gp_sample_family(3, 5, alpha=0.7).clients[0].values
    )

    # "none": every client is the GP function of the run seed (not the standalone seed-0 draw)
    none = make_family(base, _config("none"), 5)
    np.testing.assert_array_equal(none.global_objective.values, ref.global_objective.values)
    assert all(c is none.global_objective for c in none.clients)
    # a fixed sample_seed wins over the run seed
    fixed = make_family(GPGrid(sample_seed=1), _config(objective={"sample_seed": 1}), 5)
    np.testing.assert_array_equal(fixed.global_objective.values, GPGrid(sample_seed=1).values)


@pytest.mark.parametrize(
    ("federation", "field"),
    [
        ({"heterogeneity": "gp-mixture", "mixture_alpha": 1.2}, "federation.mixture_alpha"),
        ({"heterogeneity": "gp-perturbed", "mixture_alpha": 0.5}, "federation.mixture_alpha"),
        ({"heterogeneity": "gp-perturbed", "perturbation": "row"}, "federation.perturbation"),
        ({"heterogeneity": "none", "perturbation": "point"}, "federation.perturbation"),
        (
            {"heterogeneity": "gp-mixture", "heterogeneity_scale": 0.5},
            "federation.heterogeneity_scale",
        ),
        (
            {"heterogeneity": "gp-perturbed", "heterogeneity_scale": -1},
            "federation.heterogeneity_scale",
        ),
    ],
)
def test_bad_federation_settings_name_the_field(federation, field):
    with pytest.raises(ConfigError) as err:
        _config(**federation)
    assert err.value.field == field


def test_gp_heterogeneity_needs_the_gp_objective():
    cfg = config_from_dict(
        {
            "run": {"budget": 40},
            "objective": {"name": "garland"},
            "algorithm": {"name": "fedpne"},
            "federation": {"clients": 2, "heterogeneity": "gp-perturbed"},
        }
    )
    with pytest.raises(ConfigError, match="gp-grid") as err:
        make_family(make_objective("garland"), cfg, 0)
    assert err.value.field == "federation.heterogeneity"


def test_a_small_federated_run_on_the_gp_family():
    fed = Federation(_config(), seed=1)
    rec = fed.run()
    assert fed.family.kind == "gp_perturbed"
    assert rec.local_simple_regret is not None and rec.global_simple_regret is not None
    assert np.all(rec.local_simple_regret >= 0) and np.all(np.diff(rec.local_simple_regret) <= 0)
    assert np.all(rec.cumulative_regret >= 0)
