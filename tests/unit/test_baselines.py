"""Local HCT ([PF]'s baseline) and centralised HCT ([FX]'s baseline): spec-fedpne-pfpne §1.2, §7.1,
§8.1."""

import numpy as np
import pytest

from fedxab.algorithms.baselines import (
    CentralHCTBroadcast,
    CentralHCTClient,
    CentralHCTReport,
    CentralHCTServer,
    LocalHCTBroadcast,
    LocalHCTClient,
    LocalHCTReport,
    LocalHCTServer,
    local_hct_seed,
)
from fedxab.algorithms.fed1ucb import Fed1UCBServer
from fedxab.algorithms.hct import HCT
from fedxab.algorithms.protocol import Finished
from fedxab.errors import ConfigError, InvalidRewardError, ProtocolError

DOMAIN = [[0.0, 1.0], [-1.0, 1.0]]


def f_client(m):
    """Heterogeneous client objectives (different maximisers)."""
    centre = np.array([0.2 + 0.2 * m, 0.5 - 0.3 * m])
    return lambda X: 1.0 - np.sum((X - centre) ** 2, axis=1)


def _drive(server, clients, fns, bcls, rcls, noise=0.1, seed=0):
    """Run the federation in a plain loop, every message through to_wire/from_wire.

    Records, per client, every evaluate() call as (X, rewards); counts messages.
    """
    rng = np.random.default_rng(seed)
    calls = [[] for _ in clients]

    def evaluator(m):
        def evaluate(X):
            r = fns[m](X) + rng.uniform(-noise, noise, len(X))
            calls[m].append((X.copy(), r.copy()))
            return r

        return evaluate

    broadcasts = reports = 0
    msg = server.start()
    while not isinstance(msg, Finished):
        broadcasts += 1
        for m, client in enumerate(clients):
            report = client.answer(bcls.from_wire(msg.to_wire()), evaluator(m))
            reports += 1
            assert server.receive(m, rcls.from_wire(report.to_wire()))
        assert server.ready()
        msg = server.close_phase()
    return calls, msg, broadcasts, reports


# ============================================================================== local HCT
def _local(m, t, seed=5, **kw):
    server = LocalHCTServer(DOMAIN, n_clients=m, budget=t)
    clients = [LocalHCTClient(j, DOMAIN, budget=t, seed=seed, **kw) for j in range(m)]
    return server, clients


def test_local_hct_clients_run_standalone_hct_with_their_derived_seed():
    m, t = 3, 300
    server, clients = _local(m, t, rho=0.6)
    fns = [f_client(j) for j in range(m)]
    calls, finished, _, _ = _drive(server, clients, fns, LocalHCTBroadcast, LocalHCTReport)
    seeds = {local_hct_seed(5, j) for j in range(m)}
    assert len(seeds) == m  # each client its own partition
    for j in range(m):
        assert len(calls[j]) == t and all(X.shape == (1, 2) for X, _ in calls[j])
        ref = HCT(DOMAIN, rho=0.6, budget=t, seed=local_hct_seed(5, j))
        for X, r in calls[j]:
            x = ref.ask()
            assert np.array_equal(x, X[0])
            ref.tell(x, r[0])
        assert np.array_equal(clients[j].recommend(), ref.recommend())
        assert np.array_equal(server.recommendations[j], ref.recommend())
        assert clients[j].used == t
    # the clients' trajectories differ (own objective, own partition)
    assert not np.array_equal(calls[0][-1][0], calls[1][-1][0])
    # the run's answer is the lowest-id client's recommendation
    assert np.array_equal(finished.recommendation, server.recommendations[0])


def test_local_hct_with_shared_partitions_runs_every_client_on_the_run_s_partition():
    """partitions = "shared": each client's HCT is seeded with the run seed (the partition the
    federated algorithms of the run use); a bad value names the field."""
    clients = _local(2, 50, partitions="shared")[1]
    assert all(c.hct.seed == 5 for c in clients)
    per_client = _local(2, 50)[1]
    assert [c.hct.seed for c in per_client] == [local_hct_seed(5, j) for j in range(2)]
    with pytest.raises(ConfigError, match="algorithm.partitions"):
        _local(1, 50, partitions="mine")


def test_local_hct_communicates_one_broadcast_and_one_report_per_client():
    m, t = 4, 100
    server, clients = _local(m, t)
    _, finished, broadcasts, reports = _drive(
        server, clients, [f_client(j) for j in range(m)], LocalHCTBroadcast, LocalHCTReport
    )
    assert (broadcasts, reports) == (1, m)
    assert finished.phase == 1
    assert LocalHCTServer.SENDS_RAW_REWARDS is False
    wire = LocalHCTReport(1, 0, t, np.zeros(2)).to_wire()
    assert set(wire) == {"kind", "phase", "client", "pulls", "recommendation"}


def test_local_hct_duplicates_and_bad_reports_are_rejected():
    server, clients = _local(2, 50)
    b = server.start()
    calls = []

    def evaluate(X):
        calls.append(len(X))
        return f_client(0)(X)

    r = clients[0].answer(b, evaluate)
    assert clients[0].answer(b, evaluate) is r and len(calls) == 50  # redelivery: no re-pull
    assert server.receive(0, r) is True
    assert server.receive(0, r) is False
    with pytest.raises(ProtocolError, match="phase 2"):
        server.receive(1, LocalHCTReport(2, 1, 50, np.zeros(2)))
    with pytest.raises(ProtocolError, match="2 coordinates"):
        server.receive(1, LocalHCTReport(1, 1, 50, np.zeros(3)))
    with pytest.raises(ProtocolError, match="above the budget"):
        server.receive(1, LocalHCTReport(1, 1, 51, np.zeros(2)))
    with pytest.raises(ProtocolError, match="received as client 0"):
        server.receive(0, LocalHCTReport(1, 1, 50, np.zeros(2)))
    with pytest.raises(ProtocolError, match="NaN"):
        LocalHCTReport.from_wire({**r.to_wire(), "recommendation": np.array([np.nan, 0.0])})
    with pytest.raises(ProtocolError, match="rounds"):
        LocalHCTBroadcast.from_wire({"kind": "localhct.broadcast", "phase": 1, "rounds": 0})
    assert server.reported == 1 and not server.ready()
    with pytest.raises(InvalidRewardError, match="finite"):
        clients[1].answer(b, lambda X: np.array([np.nan]))


def test_local_hct_same_seed_same_run():
    def run(seed):
        server, clients = _local(2, 120, seed=seed)
        calls, fin, _, _ = _drive(
            server,
            clients,
            [f_client(0), f_client(1)],
            LocalHCTBroadcast,
            LocalHCTReport,
            seed=seed,
        )
        return np.concatenate([X for X, _ in calls[1]]), fin.recommendation

    a, b = run(1), run(1)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(run(2)[0], a[0])


# ============================================================================ central HCT
def _central(m, t, seed=7, **kw):
    server = CentralHCTServer(DOMAIN, n_clients=m, budget=t, seed=seed, **kw)
    clients = [CentralHCTClient(j, DOMAIN, budget=t) for j in range(m)]
    return server, clients


def test_central_hct_is_told_exactly_the_average_of_the_clients_rewards():
    m, t = 3, 200
    server, clients = _central(m, t)
    told = []
    tell = server.hct.tell

    def spy(x, reward):
        told.append((np.array(x), reward))
        tell(x, reward)

    server.hct.tell = spy
    fns = [f_client(j) for j in range(m)]
    calls, finished, broadcasts, reports = _drive(
        server, clients, fns, CentralHCTBroadcast, CentralHCTReport, noise=0.3
    )
    assert len(told) == t == broadcasts and reports == m * t  # T rounds
    for s, (x, reward) in enumerate(told):
        points = [calls[j][s][0] for j in range(m)]
        assert all(np.array_equal(p, x.reshape(1, -1)) for p in points)  # same x_t everywhere
        assert reward == pytest.approx(np.mean([calls[j][s][1][0] for j in range(m)]), abs=1e-15)
    # equivalently: a standalone HCT (rho = 0.75, [FX]) fed those averages asks the same points
    ref = HCT(DOMAIN, rho=0.75, budget=t, seed=7)
    for x, reward in told:
        assert np.array_equal(ref.ask(), x)
        ref.tell(x, reward)
    assert np.array_equal(finished.recommendation, ref.recommend())
    assert finished.phase == t and all(c.used == t for c in clients)


def test_central_hct_sends_raw_rewards_and_says_so():
    assert CentralHCTServer.SENDS_RAW_REWARDS is True
    assert Fed1UCBServer.SENDS_RAW_REWARDS is False
    assert "reward" in CentralHCTReport(1, 0, 0.5).to_wire()


def test_central_hct_duplicates_and_bad_messages_are_rejected():
    server, clients = _central(2, 3)
    b = server.start()
    calls = []

    def evaluate(X):
        calls.append(X.copy())
        return np.array([0.25])

    r = clients[0].answer(b, evaluate)
    assert clients[0].answer(CentralHCTBroadcast.from_wire(b.to_wire()), evaluate) is r
    assert len(calls) == 1 and clients[0].used == 1
    assert server.receive(0, r) is True
    assert server.receive(0, r) is False
    with pytest.raises(ProtocolError, match="phase 2"):
        server.receive(1, CentralHCTReport(2, 1, 0.1))
    with pytest.raises(ProtocolError, match="received as client 1"):
        server.receive(1, r)
    with pytest.raises(ProtocolError, match="finite"):
        CentralHCTReport.from_wire({**r.to_wire(), "reward": float("nan")})
    with pytest.raises(ProtocolError, match="number"):
        CentralHCTReport.from_wire({**r.to_wire(), "reward": "0.5"})
    with pytest.raises(ProtocolError, match="missing field 'reward'"):
        CentralHCTReport.from_wire({"kind": "centralhct.report", "phase": 1, "client": 0})
    with pytest.raises(ProtocolError, match="2 coordinates"):
        clients[1].answer(CentralHCTBroadcast(1, np.zeros(3)), evaluate)
    with pytest.raises(InvalidRewardError, match="1 point"):
        clients[1].answer(b, lambda X: np.zeros(2))
    assert clients[1].used == 0 and server.reported == 1
    # a client never pulls beyond its budget
    lone = CentralHCTClient(0, DOMAIN, budget=1)
    lone.answer(CentralHCTBroadcast(1, np.zeros(2)), evaluate)
    with pytest.raises(ProtocolError, match="budget"):
        lone.answer(CentralHCTBroadcast(2, np.zeros(2)), evaluate)


def test_central_hct_same_seed_same_run():
    def run(seed):
        server, clients = _central(2, 150, seed=seed)
        calls, fin, _, _ = _drive(
            server,
            clients,
            [f_client(0), f_client(1)],
            CentralHCTBroadcast,
            CentralHCTReport,
            seed=seed,
        )
        return np.concatenate([X for X, _ in calls[0]]), fin.recommendation

    a, b = run(1), run(1)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(run(2)[0], a[0])
