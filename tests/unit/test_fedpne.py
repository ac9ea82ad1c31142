"""Fed-PNE: spec-fedpne-pfpne §3 tau table, §4.6 first phase, §13 implementation checks."""

import itertools
import math

import numpy as np
import pytest

from fedxab.algorithms.fedpne import (
    FedPNEBroadcast,
    FedPNEClient,
    FedPNEReport,
    FedPNEServer,
)
from fedxab.algorithms.pne import PNEConstants, children, eliminate
from fedxab.algorithms.protocol import Finished
from fedxab.errors import ConfigError, InvalidRewardError, ProtocolError


@pytest.mark.parametrize(
    ("m", "t", "log_term", "taus"),
    [
        (10, 10_000, 11.5129, [1, 1, 2, 8, 30, 118, 472, 1887, 7546, 30181, 120722]),
        (10, 1_000, 9.2103, [1, 1, 2, 6, 24, 95, 378, 1510, 6037, 24145, 96578]),
        (50, 10_000, 13.1224, [1, 1, 3, 9, 34, 135, 538, 2150, 8600, 34400, 137598]),
        (500, 10_000, 15.4249, [1, 1, 3, 10, 40, 158, 632, 2528, 10109, 40436, 161743]),
    ],
)
def test_tau_table(m, t, log_term, taus):
    const = PNEConstants.resolve(n_clients=m, horizon=t)
    assert const.log_term == pytest.approx(log_term, abs=1e-4)
    assert [const.tau(h) for h in range(11)] == taus


@pytest.mark.parametrize(
    ("m", "t", "depth", "size", "t_h", "b_h", "gap"),
    [
        (10, 10_000, 3, 8, 1, 0.1073, 0.3396),
        (10, 1_000, 3, 8, 1, 0.0960, 0.3169),
        (50, 10_000, 3, 8, 1, 0.0512, 0.2275),
        (500, 10_000, 4, 16, 1, 0.0176, 0.0976),
    ],
)
def test_first_phase_of_the_spec(m, t, depth, size, t_h, b_h, gap):
    server = FedPNEServer([[0, 1]], n_clients=m, budget=t)
    b = server.start()
    assert (b.depth, len(b.nodes), b.pulls_per_node, server.phase_length) == (
        depth,
        size,
        t_h,
        size * t_h,
    )
    assert b.nodes.tolist() == list(range(1, size + 1))
    width = server.constants.width(m * t_h)
    assert width == pytest.approx(b_h, abs=1e-4)
    assert 2 * width + 0.5**depth == pytest.approx(gap, abs=1e-4)


def test_children_and_elimination_rule():
    assert children(np.array([1, 3]), 2).tolist() == [1, 2, 5, 6]
    assert children(np.array([2]), 3).tolist() == [4, 5, 6]
    est = np.array([0.5, 0.9, 0.9, 0.1])
    survive, best = eliminate(est, 0.05, 0.2)
    assert best == 1  # ties: first argmax
    # eliminated iff est + 0.05 + 0.2 < 0.9 - 0.05 = 0.85
    assert survive.tolist() == [False, True, True, False]


def _drive(server, clients, fns, noise=0.0, seed=0):
    """Run a federation in a plain loop; returns pulled points per client and the answer."""
    rng = np.random.default_rng(seed)
    pulled = [[] for _ in clients]

    def evaluator(m):
        def evaluate(X):
            pulled[m].append(X.copy())
            return fns[m](X) + rng.uniform(-noise, noise, len(X))

        return evaluate

    msg = server.start()
    phases = 0
    while not isinstance(msg, Finished):
        phases += 1
        for m, client in enumerate(clients):
            wire = FedPNEBroadcast.from_wire(msg.to_wire())
            report = client.answer(wire, evaluator(m))
            assert server.receive(m, FedPNEReport.from_wire(report.to_wire()))
        assert server.ready()
        msg = server.close_phase()
    return [np.concatenate(p) for p in pulled], msg, phases


def _federation(m, t, **kw):
    server = FedPNEServer([[0, 1]], n_clients=m, budget=t, seed=3, **kw)
    clients = [FedPNEClient(j, [[0, 1]], budget=t, seed=3) for j in range(m)]
    return server, clients


def garland(X):
    x = X[:, 0]
    return x * (1 - x) * (4 - np.sqrt(np.abs(np.sin(60 * x))))


def test_every_client_uses_exactly_its_budget_and_nodes_get_equal_pulls():
    m, t = 5, 3000
    server, clients = _federation(m, t)
    offsets = np.linspace(-1, 1, m)
    fns = [lambda X, o=o: garland(X) + o for o in offsets]
    pulled, finished, phases = _drive(server, clients, fns, noise=0.1)
    assert all(len(p) == t for p in pulled)
    assert all(c.used == t for c in clients)
    assert isinstance(finished, Finished) and finished.phase == phases
    # all clients pulled the same points in the same order (synchronised schedule, spec §4.3)
    for p in pulled[1:]:
        assert np.array_equal(p, pulled[0])
    for rec in server.history:
        tau = server.constants.tau(rec.depth)
        assert rec.reports == m and rec.survivors >= 1
        assert rec.width == pytest.approx(server.constants.width(m * math.ceil(tau / m)))
    # depth advances by exactly one per phase once tau_h >= M
    depths = [rec.depth for rec in server.history]
    assert all(b - a == 1 for a, b in itertools.pairwise(depths))


def test_server_mean_equals_the_pooled_mean_of_all_rewards():
    m, t = 3, 400
    server, clients = _federation(m, t)
    rng = np.random.default_rng(1)
    rewards_seen = []

    def make(mm):
        def evaluate(X):
            r = garland(X) + rng.uniform(-0.1, 0.1, len(X))
            rewards_seen.append((mm, X.copy(), r))
            return r

        return evaluate

    b = server.start()
    for j, c in enumerate(clients):
        server.receive(j, c.answer(b, make(j)))
    server.close_phase()
    rec = server.history[0]
    pooled = {}
    for _, X, r in rewards_seen:
        for x, v in zip(X[:, 0], r, strict=True):
            pooled.setdefault(x, []).append(v)
    centres = (rec.nodes - 0.5) / 2**rec.depth
    for x, mean in zip(centres, rec.means, strict=True):
        assert mean == pytest.approx(np.mean(pooled[x]))
        assert len(pooled[x]) == m * b.pulls_per_node


def test_noise_free_federation_keeps_the_optimal_node_and_recommends_near_it():
    m, t = 4, 20_000
    server, clients = _federation(m, t)
    _, finished, _ = _drive(server, clients, [garland] * m)
    x_star = math.pi / 6
    for rec in server.history:
        lo = (rec.nodes - 1) / 2**rec.depth
        hi = rec.nodes / 2**rec.depth
        assert np.any((lo <= x_star) & (x_star <= hi)), rec.depth
    assert abs(finished.recommendation[0] - x_star) < 2.0 ** -server.history[-1].depth


def test_redelivered_broadcast_does_not_pull_twice_and_duplicates_are_dropped():
    server, clients = _federation(2, 500)
    b = server.start()
    calls = []

    def evaluate(X):
        calls.append(len(X))
        return garland(X)

    r1 = clients[0].answer(b, evaluate)
    r2 = clients[0].answer(b, evaluate)
    assert r1 is r2 and len(calls) == 1
    assert server.receive(0, r1) is True
    assert server.receive(0, r1) is False  # duplicate: dropped, not double-counted
    assert not server.ready()


def test_bad_reports_are_rejected_and_change_nothing():
    server, clients = _federation(2, 500)
    b = server.start()
    good = clients[0].answer(b, garland)
    with pytest.raises(ProtocolError, match="phase 2"):
        server.receive(0, FedPNEReport(2, 0, True, good.means))
    with pytest.raises(ProtocolError, match="client 0 received as client 1"):
        server.receive(1, good)
    assert len(b.nodes) == 4  # M = 2, T = 500: tau = 1, 1, 2 -> phase 1 at depth 2
    with pytest.raises(ProtocolError, match="must hold 4 values"):
        server.receive(0, FedPNEReport(1, 0, True, good.means[:3]))
    with pytest.raises(ProtocolError, match="NaN"):
        FedPNEReport.from_wire({**good.to_wire(), "means": np.array([np.nan] * 4)})
    with pytest.raises(ProtocolError, match="missing field 'means'"):
        FedPNEReport.from_wire({"kind": "fedpne.report", "phase": 1, "client": 0, "complete": True})
    with pytest.raises(ProtocolError, match="kind"):
        FedPNEReport.from_wire({**good.to_wire(), "kind": "other"})
    assert server.reported == 0
    with pytest.raises(ProtocolError, match="no report"):
        server.close_phase()


def test_client_rejects_nan_rewards():
    _, clients = _federation(1, 100)
    server = FedPNEServer([[0, 1]], n_clients=1, budget=100, seed=3)
    b = server.start()
    with pytest.raises(InvalidRewardError, match="finite"):
        clients[0].answer(b, lambda X: np.full(len(X), np.nan))
    assert clients[0].used == 0


def test_literal_depth_counting_uses_depth_plus_one():
    true = FedPNEServer([[0, 1]], n_clients=10, budget=10_000)
    literal = FedPNEServer([[0, 1]], n_clients=10, budget=10_000, depth_counting="literal")
    bt, bl = true.start(), literal.start()
    # literal: tau at counter h+1, so |K| tau <= M stops one level earlier (8 * 8 > 10 at h = 2)
    assert bt.depth == 3 and bl.depth == 2
    assert bl.pulls_per_node == math.ceil(literal.constants.tau(3) / 10)


def test_same_seed_same_run():
    def run(seed):
        server = FedPNEServer([[0, 1], [0, 1]], n_clients=3, budget=2000, seed=seed)
        clients = [FedPNEClient(j, [[0, 1], [0, 1]], budget=2000, seed=seed) for j in range(3)]
        f = lambda X: np.sin(5 * X[:, 0]) * np.cos(3 * X[:, 1])  # noqa: E731
        pulled, fin, _ = _drive(server, clients, [f] * 3, noise=0.1, seed=seed)
        return pulled[0], fin.recommendation

    a, b = run(1), run(1)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(run(2)[0], a[0])


def test_dp_fed_pne_enlarges_c_and_adds_per_reward_noise_with_one_event_per_phase():
    from fedxab.algorithms.dpfedpne import DPFedPNEClient, DPFedPNEServer

    m, t = 5, 20_000
    eps, dpriv = 0.5, 1e-3
    server = DPFedPNEServer([[0, 1]], n_clients=m, budget=t, epsilon=eps, privacy_delta=dpriv)
    sigma = math.sqrt(2 * math.log(1.25 / dpriv)) / eps
    assert server.constants.c == pytest.approx(0.1 * math.sqrt(1 + 4 * sigma**2))
    clients = [
        DPFedPNEClient(j, [[0, 1]], budget=t, epsilon=eps, privacy_delta=dpriv, seed=3)
        for j in range(m)
    ]
    pulled, finished, phases = _drive(server, clients, [garland] * m)
    assert all(len(p) == t for p in pulled)
    completed = len(server.history)
    for client in clients:
        assert [p for p, _ in client.events] == list(range(1, completed + 1))
        assert all(e.noise_multiplier == pytest.approx(sigma) for _, e in client.events)
    # released means carry N(0, sigma^2 / (M t_h)) noise around the noise-free node values:
    # the standardised errors over all nodes of all phases have mean square ~ 1 (seeded;
    # tolerance [0.5, 1.6] for 23 chi-square(1) terms; measured 1.18)
    z = []
    for rec in server.history:
        centres = (rec.nodes - 0.5) / 2**rec.depth
        exact = garland(centres.reshape(-1, 1))
        t_h = math.ceil(server.constants.tau(rec.depth) / m)
        z.extend((rec.means - exact) / (sigma / math.sqrt(m * t_h)))
    assert len(z) >= 20
    assert 0.5 < float(np.mean(np.square(z))) < 1.6
    assert isinstance(finished, Finished) and phases >= completed


def test_dp_fed_pne_rejects_epsilon_where_the_classic_calibration_is_invalid():
    from fedxab.algorithms.dpfedpne import DPFedPNEServer

    with pytest.raises(ConfigError, match="analytic"):
        DPFedPNEServer([[0, 1]], n_clients=2, budget=100, epsilon=2.0, privacy_delta=1e-5)
    server = DPFedPNEServer(
        [[0, 1]],
        n_clients=2,
        budget=100,
        epsilon=2.0,
        privacy_delta=1e-5,
        calibration="analytic",
    )
    assert server.mechanism.sigma > 0


def test_integer_fields_sent_as_float_lists_are_rejected_not_truncated():
    wire = {
        "kind": "fedpne.broadcast",
        "phase": 1,
        "depth": 1,
        "nodes": [1.5, 2.0],
        "pulls_per_node": 1,
    }
    with pytest.raises(ProtocolError, match="must hold integers"):
        FedPNEBroadcast.from_wire(wire)
    assert FedPNEBroadcast.from_wire({**wire, "nodes": [1, 2]}).nodes.tolist() == [1, 2]


def test_a_stale_broadcast_is_refused_without_pulling():
    server, clients = _federation(1, 2000)
    first = server.start()
    server.receive(0, clients[0].answer(first, garland))
    second = server.close_phase()
    clients[0].answer(second, garland)
    used = clients[0].used
    with pytest.raises(ProtocolError, match="stale broadcast for phase 1"):
        clients[0].answer(first, garland)
    assert clients[0].used == used


def test_dp_client_clips_rewards_to_its_range_and_calibrates_to_its_width():
    from fedxab.algorithms.dpfedpne import DPFedPNEClient, DPFedPNEServer

    server = DPFedPNEServer([[0, 1]], n_clients=1, budget=50, epsilon=0.5, privacy_delta=1e-3)
    b = server.start()
    wide = DPFedPNEClient(
        0, [[0, 1]], budget=50, epsilon=0.5, privacy_delta=1e-3, reward_range=(-1.0, 3.0)
    )
    unit = DPFedPNEClient(0, [[0, 1]], budget=50, epsilon=0.5, privacy_delta=1e-3)
    assert wide.mechanism.sigma == pytest.approx(4 * unit.mechanism.sigma)
    # rewards of 100 are clipped to 1 before the noise: the released means stay near 1
    report = unit.answer(b, lambda X: np.full(len(X), 100.0))
    assert np.all(np.abs(report.means - 1.0) < 6 * unit.mechanism.sigma)
    with pytest.raises(ConfigError, match="algorithm.reward_range"):
        DPFedPNEClient(
            0, [[0, 1]], budget=50, epsilon=0.5, privacy_delta=1e-3, reward_range=(2.0, 1.0)
        )


def test_noise_free_mode_pulls_each_node_once_and_keeps_the_maximiser():
    """``noise_free`` (a deterministic objective): t_h = 1, width 0, one depth per phase; on
    f(x) = 1 - |x - 0.3| (f* - f(centre) <= nu rho^h = 2^-h on dyadic cells) the node holding
    x* = 0.3 is never eliminated, so the recommendation is within nu rho^H of f*."""
    from fedxab.algorithms.protocol import Finished
    from fedxab.algorithms.registry import make_federation

    def f(X):
        return 1.0 - np.abs(X[:, 0] - 0.3)

    server, clients = make_federation(
        "fedpne", [[0.0, 1.0]], n_clients=2, budget=64, seed=0, params={"noise_free": True}
    )
    seen: list[bytes] = []

    def evaluate(X):
        seen.extend(row.tobytes() for row in X)
        return f(X)

    message = server.start()
    while not isinstance(message, Finished):
        assert message.pulls_per_node == 1
        for m, client in enumerate(clients):
            server.receive(m, client.answer(message, evaluate))
        message = server.close_phase()
    history = server.history
    assert [p.depth for p in history] == list(range(len(history)))
    assert all(p.width == 0.0 for p in history)
    for p in history:  # the cell holding x* survives every elimination
        lowers = [server.partition.cell(p.depth, int(i))[0][0] for i in p.nodes]
        uppers = [server.partition.cell(p.depth, int(i))[1][0] for i in p.nodes]
        assert any(lo <= 0.3 <= up for lo, up in zip(lowers, uppers, strict=True))
    depth = history[-1].depth
    assert 1.0 - f(message.recommendation[None])[0] <= 0.5**depth
    assert len(seen) == len(set(seen)) * 2  # two clients, each point once per client
