"""FTS / DP-FTS-DE: sub-regions, weight and p_t schedules, the server's aggregation (spec-dpftsde
§3.2-§3.6 and the quick checks of §10), the agent's rounds and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedxab.algorithms.fts_schedules import a_schedule, p_own, region_weights
from fedxab.algorithms.ftsde import (
    DPFTSDEServer,
    FTSBroadcast,
    FTSDEClient,
    FTSDEServer,
    FTSReport,
)
from fedxab.algorithms.protocol import Finished
from fedxab.algorithms.subregions import SubRegions, split_factors
from fedxab.broker.codec import packb, unpackb
from fedxab.errors import ConfigError, ProtocolError

UNIT = [[0.0, 1.0]]
SQUARE = [[0.0, 1.0], [0.0, 1.0]]


# ---------------------------------------------------------------------------- sub-regions §3.2
def test_the_landmine_layout_is_two_by_two_first_dimension_outermost():
    layout = SubRegions(2, 4)
    assert [layout.bounds(i).tolist() for i in range(4)] == [
        [[0.0, 0.5], [0.0, 0.5]],
        [[0.0, 0.5], [0.5, 1.0]],
        [[0.5, 1.0], [0.0, 0.5]],
        [[0.5, 1.0], [0.5, 1.0]],
    ]
    points = np.array([[0.1, 0.1], [0.1, 0.6], [0.6, 0.1], [0.6, 0.6], [0.5, 0.5], [1.0, 1.0]])
    assert layout.region_of(points).tolist() == [0, 1, 2, 3, 3, 3]  # half-open, last closed
    assert [layout.home(n) for n in range(6)] == [0, 1, 2, 3, 0, 1]  # round-robin n mod P


@pytest.mark.parametrize(
    ("p", "d", "factors"),
    [(2, 1, (2,)), (3, 1, (3,)), (2, 3, (2, 1, 1)), (4, 3, (2, 2, 1)), (6, 3, (3, 2, 1))],
)
def test_p_is_factored_over_the_leading_dimensions_as_the_spec_proposes(p, d, factors):
    assert split_factors(p, d) == factors  # spec §9.8


# --------------------------------------------------------------------------- schedules §3.3-4
def test_weights_match_the_spec_sanity_values():
    homes = np.arange(29) % 4
    concentrated = region_weights(homes, 4, a_schedule(0, "real"))
    assert concentrated.sum(axis=1) == pytest.approx(np.ones(4), abs=1e-15)
    assert concentrated[0, 0] == pytest.approx(0.125, abs=1e-6)
    assert concentrated[1, 1] == pytest.approx(0.142857, abs=1e-6)
    assert concentrated[0, 1] == pytest.approx(3.82e-8, rel=1e-2)
    assert concentrated[1, 0] == pytest.approx(4.37e-8, rel=1e-2)
    uniform = region_weights(homes, 4, a_schedule(40, "real"))
    assert uniform == pytest.approx(np.full((4, 29), 1 / 29), abs=1e-15)


def test_a_schedules_and_p_t_follow_the_spec():
    assert [a_schedule(r, "synthetic") for r in range(5, 12)] == [
        16.0,
        16.0,
        12.25,
        8.5,
        4.75,
        1.0,
        1.0,
    ]
    assert [a_schedule(r, "real") for r in (9, 10, 39, 40)] == [16.0, 16.0, 1.0, 1.0]
    assert a_schedule(100, "non-adaptive") == 16.0
    assert [p_own(t, "1/t") for t in (1, 2, 10)] == [0.0, 0.5, 0.9]
    assert p_own(60, "1/t") == pytest.approx(0.983, abs=1e-3)
    assert [round(p_own(t, "1/sqrt(t)"), 3) for t in (1, 4, 16, 40)] == [0.0, 0.5, 0.75, 0.842]
    assert p_own(1, "1/t", p_min=1e-3) == 1e-3


# ---------------------------------------------------------------------------- server §3.6
def _round(server, omegas):
    """Feed one report per agent to the open phase and close it."""
    for m, omega in enumerate(omegas):
        assert server.receive(m, FTSReport(server.phase, m, np.asarray(omega, dtype=float)))
    return server.close_phase()


def _server(cls=FTSDEServer, n=29, m=5, regions=4, budget=70, **kw):
    server = cls(SQUARE, n_clients=n, budget=budget, n_features=m, regions=regions, **kw)
    server.start()
    return server


def test_without_privacy_the_aggregate_is_the_weighted_sum_exactly():
    rng = np.random.default_rng(0)
    omegas = rng.normal(size=(29, 5))
    server = _server()
    _round(server, omegas)
    assert np.array_equal(server.vectors, server.settings.weights_at(0) @ omegas)


@pytest.mark.parametrize(("round_", "std"), [(0, 8.98), (45, 2.17)])
def test_the_noise_std_matches_the_spec_sanity_values(round_, std):
    server = _server(DPFTSDEServer, q=0.35, z=1.0, clip=22.0)
    server.phase = round_ + 1  # jump to the round (the weights depend on it only)
    server._inbox.open(server.phase)
    _round(server, np.zeros((29, 5)))
    assert server.diagnostics[-1]["noise_std"] == pytest.approx(std, abs=5e-3)


def test_dp_fts_with_one_region_has_noise_std_z_s_over_q_n():
    server = _server(DPFTSDEServer, n=10, regions=1, q=0.5, z=2.0, clip=8.0)
    _round(server, np.zeros((10, 5)))
    assert server.diagnostics[-1]["noise_std"] == pytest.approx(2.0 * 8.0 / (0.5 * 10))


def test_the_noisy_aggregate_is_unbiased_with_the_stated_variance():
    # many rounds of the same vectors: mean -> sum_n phi_n omega_hat_n, variance -> std^2
    rng = np.random.default_rng(1)
    omegas = rng.normal(size=(8, 3))
    n_rounds = 4000
    server = _server(
        DPFTSDEServer,
        n=8,
        m=3,
        regions=2,
        budget=n_rounds + 11,
        q=0.5,
        z=0.5,
        clip=100.0,
        weights="equal",
    )
    outputs = []
    for _ in range(n_rounds):
        _round(server, omegas)
        outputs.append(server.vectors)
    outputs = np.array(outputs)  # (rounds, P, M)
    expected = np.full((2, 8), 1 / 8) @ omegas  # no vector is clipped at S = 100
    std = server.diagnostics[0]["noise_std"]  # z phi_max S / q = 0.5 * (1/8) * 100 / 0.5
    assert std == pytest.approx(12.5)
    # subsampling adds variance too: Var = std^2 + (1-q)/q sum_n phi_n^2 omega_n^2
    extra = (1 - 0.5) / 0.5 * ((1 / 8) ** 2 * omegas**2).sum(axis=0)
    sem = np.sqrt((std**2 + extra) / n_rounds)
    assert np.all(np.abs(outputs.mean(axis=0) - expected) < 4.5 * sem)  # 4.5 standard errors
    variance = outputs.var(axis=0)
    assert variance == pytest.approx(np.broadcast_to(std**2 + extra, variance.shape), rel=0.1)


def test_clipping_bounds_each_vector_by_s_over_sqrt_p_and_is_counted():
    server = _server(DPFTSDEServer, n=4, m=3, regions=4, q=1.0, z=1e-9, clip=2.0, weights="equal")
    omegas = np.array([[3.0, 0, 0], [0, 0.5, 0], [0, 0, 10.0], [0.1, 0.1, 0.1]])
    _round(server, omegas)
    assert server.diagnostics[-1]["clipped"] == 2  # norms 3 and 10 exceed S/sqrt(P) = 1
    clipped = np.array([[1.0, 0, 0], [0, 0.5, 0], [0, 0, 1.0], [0.1, 0.1, 0.1]])
    assert server.vectors == pytest.approx(np.full((4, 4), 0.25) @ clipped, abs=1e-6)


def test_an_empty_subsample_releases_pure_noise_or_the_releases_uniform_vectors():
    for empty in ("noise", "uniform"):
        server = _server(DPFTSDEServer, n=3, m=4, regions=1, q=1e-9, z=1.0, clip=1.0, empty=empty)
        _round(server, np.ones((3, 4)))
        assert server.diagnostics[-1]["sampled"] == 0
        inside = np.all((server.vectors >= 0) & (server.vectors <= 1))
        assert inside == (empty == "uniform")


def test_the_run_releases_t_aggregates_and_finishes_after_the_last_iteration():
    server = _server(FTSDEServer, n=2, m=3, regions=1, budget=13, n_init=10)  # T = 3
    phases = [server.phase]
    while True:
        last = server.phase == server.last_phase
        msg = _round(server, np.zeros((2, 0 if last else 3)))
        if isinstance(msg, Finished):
            break
        phases.append(msg.phase)
    assert phases == [1, 2, 3, 4]  # round 0 (init) and BO iterations 1..3


# ------------------------------------------------------------------------------------ agent
def _evaluate(X):
    return np.sin(6 * X[:, 0])


def test_the_agent_initialises_in_its_home_region_then_queries_one_point_per_round():
    kw = {
        "n_clients": 4,
        "budget": 14,
        "n_features": 20,
        "regions": 4,
        "n_restarts": 1,
        "own_fit_every": 0,
    }
    agent = FTSDEClient(2, SQUARE, **kw)
    report = agent.answer(FTSBroadcast(1, np.empty((0, 20))), _evaluate)
    home = SubRegions(2, 4).bounds(2)
    assert agent.X.shape == (10, 2)
    assert np.all((home[:, 0] <= agent.X) & (home[:, 1] >= agent.X))
    assert report.omega.shape == (20,)
    again = agent.answer(FTSBroadcast(1, np.empty((0, 20))), _evaluate)
    assert again is report and agent.used == 10  # a redelivered broadcast: no new pull
    vectors = np.zeros((4, 20))
    report = agent.answer(FTSBroadcast(2, vectors), _evaluate)
    assert agent.used == 11 and agent.branches == ["federated"]  # p_1 = 0
    last = agent.answer(FTSBroadcast(3, vectors, last=True), _evaluate)
    assert last.omega.shape == (0,)


def test_the_same_seed_gives_the_same_agent_and_messages_round_trip():
    kw = {"n_clients": 2, "budget": 12, "n_features": 8, "n_restarts": 1, "seed": 5}
    a, b = FTSDEClient(0, UNIT, **kw), FTSDEClient(0, UNIT, **kw)
    first = FTSBroadcast(1, np.empty((0, 8)))
    wire = FTSBroadcast.from_wire(unpackb(packb(first.to_wire())))
    ra, rb = a.answer(first, _evaluate), b.answer(wire, _evaluate)
    assert np.array_equal(ra.omega, rb.omega)
    assert FTSReport.from_wire(unpackb(packb(ra.to_wire()))).omega.tolist() == ra.omega.tolist()
    with pytest.raises(ProtocolError, match="vectors"):
        FTSBroadcast.from_wire(FTSBroadcast(2, np.empty((0, 8))).to_wire())


# -------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"q": 0.0}, "algorithm.q"),
        ({"q": 1.5}, "algorithm.q"),
        ({"clip": 0.0}, "algorithm.clip"),
        ({"clip": -1.0}, "algorithm.clip"),
        ({"n_features": 0}, "algorithm.n_features"),
        ({"z": 0.0}, "algorithm.z"),
        ({"regions": 0}, "algorithm.regions"),
        ({"budget": 10}, "run.budget"),
        ({"regions": 8, "grid_size": 4}, "algorithm.regions"),
        ({"weights": "sometimes"}, "algorithm.weights"),
    ],
)
def test_bad_settings_name_the_field(kw, field):
    args = {"n_clients": 3, "budget": 20, **kw}
    with pytest.raises(ConfigError) as err:
        DPFTSDEServer(UNIT, **args)
    assert err.value.field == field


def test_the_event_is_one_subsampled_gaussian_release():
    server = DPFTSDEServer(UNIT, n_clients=3, budget=20, q=0.25, z=1.2)
    event = server.event
    assert (event.noise_multiplier, event.sampling_rate, event.count) == (1.2, 0.25, 1)
    assert math.isclose(server.z, 1.2)
