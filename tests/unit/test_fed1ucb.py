"""Fed1-UCB baseline: spec-fedpne-pfpne §7.1 (Fed1-UCB, [EXT:FMAB]), §8.1 and F16."""

import math

import numpy as np
import pytest

from fedxab.algorithms.fed1ucb import (
    Fed1UCBBroadcast,
    Fed1UCBClient,
    Fed1UCBReport,
    Fed1UCBServer,
    fed1ucb_arms,
    fed1ucb_eliminate,
    fed1ucb_width,
)
from fedxab.algorithms.protocol import Finished
from fedxab.errors import ConfigError, InvalidRewardError, ProtocolError


def garland(X):
    x = X[:, 0]
    return x * (1 - x) * (4 - np.sqrt(np.abs(np.sin(60 * x))))


def _federation(m, t, domain=((0, 1),), seed=3, **kw):
    server = Fed1UCBServer(domain, n_clients=m, budget=t, seed=seed, **kw)
    kw.pop("kappa", None)
    kw.pop("sigma", None)
    clients = [Fed1UCBClient(j, domain, budget=t, seed=seed, **kw) for j in range(m)]
    return server, clients


def _drive(server, clients, fns, noise=0.0, seed=0):
    """Run the federation in a plain loop, every message through to_wire/from_wire.

    Returns the batches each client evaluated (one list per client, one batch per phase), the
    broadcasts, and the final message.
    """
    rng = np.random.default_rng(seed)
    batches = [[] for _ in clients]

    def evaluator(m):
        def evaluate(X):
            batches[m].append(X.copy())
            return fns[m](X) + rng.uniform(-noise, noise, len(X))

        return evaluate

    broadcasts = []
    msg = server.start()
    while not isinstance(msg, Finished):
        broadcasts.append(msg)
        for m, client in enumerate(clients):
            wire = Fed1UCBBroadcast.from_wire(msg.to_wire())
            report = client.answer(wire, evaluator(m))
            assert server.receive(m, Fed1UCBReport.from_wire(report.to_wire()))
        assert server.ready()
        msg = server.close_phase()
    return batches, broadcasts, msg


# ------------------------------------------------------------------------------------ arms
@pytest.mark.parametrize("seed", [0, 1, 2, 7])
def test_grid_has_k_to_the_d_arms_inside_the_domain_with_offsets_in_the_first_step(seed):
    domain = np.array([[-5.0, 5.0], [0.0, 2.0]])
    k = 7
    arms = fed1ucb_arms(domain, arms_per_dim=k, seed=seed)
    assert arms.shape == (k**2, 2)
    assert np.all(arms >= domain[:, 0]) and np.all(arms < domain[:, 1])
    assert len({tuple(a) for a in arms}) == k**2
    step = (domain[:, 1] - domain[:, 0]) / k
    for j in range(2):
        values = np.unique(arms[:, j])
        assert len(values) == k
        u = values[0] - domain[j, 0]
        assert 0.0 <= u < step[j]
        np.testing.assert_allclose(values, domain[j, 0] + u + step[j] * np.arange(k))
    # C order: the last coordinate varies fastest
    assert arms[0, 0] == arms[k - 1, 0] and arms[0, 1] < arms[1, 1]


def test_arms_are_shared_by_seed_and_new_per_seed_and_random_beyond_two_dimensions():
    a = fed1ucb_arms([[0, 1]], seed=4)
    assert a.shape == (20, 1)  # K = 20 by default (spec §7.1 [PROPOSED])
    assert np.array_equal(a, fed1ucb_arms([[0, 1]], seed=4))
    assert not np.array_equal(a, fed1ucb_arms([[0, 1]], seed=5))
    assert not a.flags.writeable
    cube = [[-1, 1]] * 10
    rand = fed1ucb_arms(cube, seed=4)  # D > 2: 1000 uniformly random arms ([PF] §8.1)
    assert rand.shape == (1000, 10) and np.all(np.abs(rand) <= 1)
    assert len(np.unique(rand[:, 0])) == 1000  # not a grid
    assert fed1ucb_arms([[0, 1]] * 3, arms_per_dim=4, arm_set="grid").shape == (64, 3)
    assert fed1ucb_arms([[0, 1]], arm_set="random", n_arms=50).shape == (50, 1)
    server, clients = _federation(2, 100, seed=9)
    assert np.array_equal(server.arms, clients[1].arms)
    with pytest.raises(ConfigError, match="arm_set"):
        fed1ucb_arms([[0, 1]], arm_set="mesh")
    with pytest.raises(ConfigError, match="arms_per_dim"):
        fed1ucb_arms([[0, 1]], arms_per_dim=0)


# ------------------------------------------------------------------------------ formulas
def test_width_formula():
    # sqrt(4 sigma^2 log T / (M n)), sigma = 1/2: M = 10, n = 9, T = 10^4
    assert fed1ucb_width(10, 9, 10_000) == pytest.approx(math.sqrt(math.log(1e4) / 90))
    assert fed1ucb_width(10, 9, 10_000) == pytest.approx(0.3199, abs=1e-4)
    assert fed1ucb_width(1, 4, 100, sigma=1.0) == pytest.approx(math.sqrt(math.log(100)))


def test_elimination_rule_on_a_hand_made_example():
    # eliminated iff mean + w < max - w (strict); here max - w = 0.875
    survive, best = fed1ucb_eliminate(np.array([0.5, 1.0, 0.75, 0.875, 0.1]), 0.125)
    assert best == 1
    assert survive.tolist() == [False, True, True, True, False]  # 0.75 + 0.125 = 0.875: kept
    survive, best = fed1ucb_eliminate(np.array([0.2, 0.9, 0.9]), 0.0)
    assert best == 1 and survive.tolist() == [False, True, True]  # ties: first argmax


def test_server_phase_averages_clients_and_eliminates_with_the_formula_width():
    m, t = 2, 10_000
    server, clients = _federation(m, t, arms_per_dim=4, kappa=10.0)
    values = {0: np.array([0.0, 1.0, 0.2, 0.95]), 1: np.array([0.0, 0.6, 0.2, 0.55])}
    b = server.start()
    n = int(10.0 * math.log(t))  # 92
    assert b.pulls_per_arm == n and b.arms.tolist() == [0, 1, 2, 3] and not b.commit
    arm_of = {x: i for i, x in enumerate(server.arms[:, 0])}
    for j, c in enumerate(clients):
        f = lambda X, v=values[j]: v[[arm_of[x] for x in X[:, 0]]]  # noqa: E731
        server.receive(j, c.answer(b, f))
    b2 = server.close_phase()
    rec = server.history[0]
    np.testing.assert_allclose(rec.means, [0.0, 0.8, 0.2, 0.75])
    w = math.sqrt(math.log(t) / (m * n))  # 0.2237
    assert rec.width == pytest.approx(w, abs=1e-4) and rec.pulls == n
    assert rec.width == pytest.approx(0.2237, abs=1e-4)
    # max - w = 0.576: arm 0 (0 + w) and arm 2 (0.2 + w) eliminated; arm 3 (0.75 + w) kept
    assert b2.arms.tolist() == [1, 3] and rec.best == 1 and rec.survivors == 2


# ---------------------------------------------------------------------------------- runs
@pytest.mark.parametrize(("m", "t"), [(3, 1000), (4, 777), (1, 80), (1, 50)])
def test_every_client_uses_exactly_t_in_synchronised_batches(m, t):
    server, clients = _federation(m, t)
    offsets = np.linspace(-0.5, 0.5, m)
    fns = [lambda X, o=o: garland(X) + o for o in offsets]
    batches, broadcasts, finished = _drive(server, clients, fns, noise=0.1)
    assert isinstance(finished, Finished) and finished.phase == len(broadcasts)
    for b in batches:
        assert sum(len(x) for x in b) == t
        assert len(b) == len(broadcasts)  # one evaluation batch per phase
    assert all(c.used == t for c in clients)
    for b in batches[1:]:
        assert all(np.array_equal(x, y) for x, y in zip(b, batches[0], strict=True))
    assert all(rec.survivors >= 1 for rec in server.history)
    last = broadcasts[-1]
    cut = last.commit or len(batches[0][-1]) < len(last.arms) * last.pulls_per_arm
    assert len(server.history) == len(broadcasts) - cut  # a cut or commit phase: no statistics
    if t == 50:  # 20 arms x int(log 50) = 60 > 50: the first phase is already cut
        assert server.history == [] and cut
    if t == 80:  # 20 arms x int(log 80) = 80: one complete phase ends exactly at T
        assert len(server.history) == 1 and not cut


@pytest.mark.parametrize("kappa", [1.0, 2.0, 0.5])
def test_each_phase_pulls_every_active_arm_int_kappa_log_t_times(kappa):
    m, t = 2, 3000
    server, clients = _federation(m, t, arms_per_dim=10, kappa=kappa)
    n = int(kappa * math.log(t))  # 8, 16, 4
    batches, broadcasts, _ = _drive(server, clients, [garland] * m, noise=0.1)
    for p, b in enumerate(broadcasts):
        assert b.phase == p + 1
        if b.commit:
            continue
        assert b.pulls_per_arm == n
        expected = np.repeat(server.arms[b.arms], n, axis=0)
        for client_batches in batches:
            got = client_batches[p]
            assert np.array_equal(got, expected[: len(got)])
            if p < len(server.history):  # completed phases pull everything
                assert len(got) == len(b.arms) * n
    for p, rec in enumerate(server.history):
        assert rec.pulls == (p + 1) * n
        assert rec.width == pytest.approx(math.sqrt(math.log(t) / (m * rec.pulls)))


def test_server_means_are_averages_of_the_clients_cumulative_local_means():
    m, t = 3, 5000
    server, clients = _federation(m, t, arms_per_dim=5)
    offsets = [0.0, 0.3, -0.2]
    rng = np.random.default_rng(5)
    seen = [[] for _ in range(m)]

    def make(j):
        def evaluate(X):
            r = garland(X) + offsets[j] + rng.uniform(-0.5, 0.5, len(X))
            seen[j].append((X[:, 0].copy(), r))
            return r

        return evaluate

    b = server.start()
    for _ in range(2):
        for j, c in enumerate(clients):
            server.receive(j, c.answer(b, make(j)))
        b = server.close_phase()
    rec = server.history[1]
    for arm, mean in zip(rec.arms, rec.means, strict=True):
        x = server.arms[arm, 0]
        local = [np.mean(np.concatenate([r[xs == x] for xs, r in seen[j]])) for j in range(m)]
        assert mean == pytest.approx(np.mean(local))
        assert sum(np.sum(xs == x) for xs, _ in seen[0]) == rec.pulls


def test_noise_free_run_keeps_the_best_arm_and_commits_to_it():
    m, t = 2, 2000
    server, clients = _federation(m, t, arms_per_dim=10)
    best = 3
    target = server.arms[best, 0]
    f = lambda X: np.where(X[:, 0] == target, 0.9, 0.3)  # noqa: E731  clear gap of 0.6
    batches, broadcasts, finished = _drive(server, clients, [f] * m)
    for rec in server.history:
        assert best in rec.arms.tolist() and rec.best == best
    assert server.history[-1].survivors == 1
    last = broadcasts[-1]
    assert last.commit and last.arms.tolist() == [best]
    used_before = sum(len(x) for x in batches[0][:-1])
    assert last.pulls_per_arm == t - used_before
    assert np.all(batches[0][-1][:, 0] == target) and len(batches[0][-1]) == t - used_before
    assert np.array_equal(finished.recommendation, server.arms[best])
    # no more communication after the commit: it is the last broadcast
    assert finished.phase == last.phase == len(server.history) + 1


def test_noise_free_garland_never_loses_its_best_arm():
    m, t = 3, 4000
    server, clients = _federation(m, t, arms_per_dim=20)
    best = int(np.argmax(garland(server.arms)))
    _, _, finished = _drive(server, clients, [garland] * m)
    assert all(best in rec.arms.tolist() for rec in server.history)
    assert server.recommend_arm() == best
    assert np.array_equal(finished.recommendation, server.arms[best])


def test_truncated_phase_is_not_aggregated():
    m, t = 2, 100  # 20 arms x int(log 100) = 4 -> 80 pulls, then a phase cut at 100
    server, clients = _federation(m, t)
    batches, broadcasts, finished = _drive(server, clients, [garland] * m, noise=0.1)
    assert len(server.history) == 1 and len(broadcasts) == 2
    assert [len(x) for x in batches[0]] == [80, 20]
    assert finished.reason == "budget"
    assert np.array_equal(finished.recommendation, server.arms[server.history[0].best])


# ------------------------------------------------------------------------- bad messages
def test_redelivered_broadcast_does_not_pull_twice_and_duplicates_are_dropped():
    server, clients = _federation(2, 500)
    b = server.start()
    calls = []

    def evaluate(X):
        calls.append(len(X))
        return garland(X)

    r1 = clients[0].answer(b, evaluate)
    r2 = clients[0].answer(Fed1UCBBroadcast.from_wire(b.to_wire()), evaluate)
    assert r1 is r2 and len(calls) == 1 and clients[0].used == calls[0]
    assert server.receive(0, r1) is True
    assert server.receive(0, r1) is False
    assert server.reported == 1 and not server.ready()


def test_malformed_and_misrouted_messages_are_rejected_and_change_nothing():
    server, clients = _federation(2, 500)
    b = server.start()
    good = clients[0].answer(b, garland)
    with pytest.raises(ProtocolError, match="phase 2"):
        server.receive(0, Fed1UCBReport(2, 0, True, good.means))
    with pytest.raises(ProtocolError, match="client 0 received as client 1"):
        server.receive(1, good)
    with pytest.raises(ProtocolError, match="expected an id in 0..1"):
        server.receive(5, Fed1UCBReport(1, 5, True, good.means))
    with pytest.raises(ProtocolError, match="must hold 20 values"):
        server.receive(0, Fed1UCBReport(1, 0, True, good.means[:3]))
    with pytest.raises(ProtocolError, match="incomplete report"):
        server.receive(0, Fed1UCBReport(1, 0, False))
    with pytest.raises(ProtocolError, match="NaN"):
        Fed1UCBReport.from_wire({**good.to_wire(), "means": np.full(20, np.nan)})
    with pytest.raises(ProtocolError, match="missing field 'complete'"):
        Fed1UCBReport.from_wire({"kind": "fed1ucb.report", "phase": 1, "client": 0, "means": []})
    with pytest.raises(ProtocolError, match="kind"):
        Fed1UCBReport.from_wire({**good.to_wire(), "kind": "fedpne.report"})
    wire = b.to_wire()
    with pytest.raises(ProtocolError, match="increasing"):
        Fed1UCBBroadcast.from_wire({**wire, "arms": np.array([3, 1])})
    with pytest.raises(ProtocolError, match="exactly one arm"):
        Fed1UCBBroadcast.from_wire({**wire, "commit": True})
    with pytest.raises(ProtocolError, match="pulls_per_arm"):
        Fed1UCBBroadcast.from_wire({**wire, "pulls_per_arm": 0})
    with pytest.raises(ProtocolError, match="out of range"):
        clients[1].answer(Fed1UCBBroadcast(1, np.array([0, 25]), 2), garland)
    assert clients[1].used == 0
    assert server.reported == 0
    with pytest.raises(ProtocolError, match="no report"):
        server.close_phase()


def test_complete_report_in_a_cut_phase_is_rejected():
    server, clients = _federation(1, 100)
    b = server.start()
    server.receive(0, clients[0].answer(b, garland))
    b = server.close_phase()  # 80 used: this phase is cut at 100
    with pytest.raises(ProtocolError, match="complete report"):
        server.receive(0, Fed1UCBReport(2, 0, True, np.zeros(len(b.arms))))


def test_client_rejects_nan_rewards_without_changing_state():
    server, clients = _federation(1, 100)
    b = server.start()
    with pytest.raises(InvalidRewardError, match="finite"):
        clients[0].answer(b, lambda X: np.full(len(X), np.nan))
    assert clients[0].used == 0 and clients[0].counts.sum() == 0


def test_same_seed_same_run():
    def run(seed):
        d = [[-5, 5], [-5, 5]]
        server, clients = _federation(3, 1500, domain=d, seed=seed, arms_per_dim=6)
        f = lambda X: np.sin(X[:, 0]) * np.cos(X[:, 1])  # noqa: E731
        batches, _, fin = _drive(server, clients, [f] * 3, noise=0.3, seed=seed)
        return np.concatenate(batches[0]), fin.recommendation, len(server.history)

    a, b = run(1), run(1)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
    assert not np.array_equal(run(2)[0], a[0])
