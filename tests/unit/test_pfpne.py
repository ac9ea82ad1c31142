"""PF-PNE: spec-fedpne-pfpne §6 (worked table §6.7), §12 P2-P9, §13 items 7 and 8."""

import itertools
import math

import numpy as np
import pytest

from fedxab.algorithms.fedpne import FedPNEBroadcast, FedPNEClient, FedPNEReport, FedPNEServer
from fedxab.algorithms.pfpne import (
    PFPNEBroadcast,
    PFPNEClient,
    PFPNEFinished,
    PFPNEReport,
    PFPNEServer,
    descendants,
    transition_depth,
)
from fedxab.algorithms.pne import PNEConstants, children, eliminate
from fedxab.algorithms.protocol import Finished
from fedxab.errors import ConfigError, InvalidRewardError, ProtocolError


def garland(X):
    x = X[:, 0]
    return x * (1 - x) * (4 - np.sqrt(np.abs(np.sin(60 * x))))


def shifted_garlands(m, scale=0.05):
    """Per-client input shifts of Garland ([PF] §4 heterogeneity), clipped into [0, 1]."""
    shifts = np.linspace(-scale, scale, m)
    return [lambda X, s=s: garland(np.clip(X - s, 0.0, 1.0)) for s in shifts]


def centres(h, nodes):
    """Cell centres of 1-D nodes (h, i) on [0, 1] (dyadic partition)."""
    return ((np.asarray(nodes) - 0.5) / 2**h).reshape(-1, 1)


def _federation(m, t, dim=1, seed=3, client_kw=None, **kw):
    domain = [[0, 1]] * dim
    server = PFPNEServer(domain, n_clients=m, budget=t, seed=seed, **kw)
    ckw = {k: v for k, v in kw.items() if k in ("delta", "c", "c1", "preset", "nu", "rho")}
    ckw.update(client_kw or {})
    clients = [PFPNEClient(j, domain, n_clients=m, budget=t, seed=seed, **ckw) for j in range(m)]
    return server, clients


def _drive(server, clients, fns, noise=0.0, seed=0, rngs=None):
    """Plain driver loop through the wire; one shared noise stream (or one per client).

    Returns the pulled batches per client as (phase, X) pairs, the broadcasts and the final
    message.
    """
    rng = np.random.default_rng(seed)
    pulled = [[] for _ in clients]
    broadcasts = []

    def evaluator(m, phase):
        def evaluate(X):
            pulled[m].append((phase, X.copy()))
            r = rngs[m] if rngs is not None else rng
            return fns[m](X) + r.uniform(-noise, noise, len(X))

        return evaluate

    msg = server.start()
    while not isinstance(msg, Finished):
        wire = PFPNEBroadcast.from_wire(msg.to_wire())
        broadcasts.append(wire)
        for m, client in enumerate(clients):
            report = client.answer(wire, evaluator(m, wire.phase))
            assert server.receive(m, PFPNEReport.from_wire(report.to_wire()))
        assert server.ready()
        msg = server.close_phase()
    return pulled, broadcasts, PFPNEFinished.from_wire(msg.to_wire())


def _rows(batches, phases=None):
    rows = [X for p, X in batches if phases is None or p in phases]
    return np.concatenate(rows) if rows else np.empty((0, 1))


# ----------------------------------------------------------------------------- H0 (P4)
@pytest.mark.parametrize(
    ("delta_gap", "nu", "rho", "floor", "ceil"),
    [
        (0.01, 1.0, 0.5, 6, 7),  # spec §6.1: rho^6 = 0.0156 >= 0.01 > rho^7
        (0.25, 1.0, 0.5, 2, 2),  # exactly nu rho^2: both rules give 2
        (0.6, 1.0, 0.5, 0, 1),
        (1.0, 1.0, 0.5, 0, 0),  # Delta >= nu -> H0 = 0
        (3.0, 1.0, 0.5, 0, 0),
        (0.1, 2.0, 0.75, 10, 11),  # 2 * 0.75^10 = 0.113 >= 0.1 > 2 * 0.75^11 = 0.084
        (1e-9, 1.0, 0.5, 29, 30),
    ],
)
def test_transition_depth_rules(delta_gap, nu, rho, floor, ceil):
    assert transition_depth(delta_gap, nu, rho) == floor
    assert transition_depth(delta_gap, nu, rho, "ceil") == ceil
    server = PFPNEServer([[0, 1]], n_clients=2, budget=100, nu=nu, rho=rho, Delta=delta_gap)
    assert server.h0 == floor
    if delta_gap < nu:
        assert nu * rho**floor >= delta_gap > nu * rho ** (floor + 1)
        assert nu * rho**ceil <= delta_gap < nu * rho ** (ceil - 1)


def test_bad_parameters_name_the_field():
    with pytest.raises(ConfigError, match=r"algorithm\.h0_rule"):
        PFPNEServer([[0, 1]], n_clients=2, budget=100, h0_rule="round")
    with pytest.raises(ConfigError, match=r"algorithm\.Delta"):
        PFPNEServer([[0, 1]], n_clients=2, budget=100, Delta=0.0)
    with pytest.raises(ConfigError, match=r"algorithm\.skip_levels"):
        PFPNEServer([[0, 1]], n_clients=2, budget=100, skip_levels="yes")
    with pytest.raises(ConfigError, match=r"algorithm\.reuse_samples"):
        PFPNEClient(0, [[0, 1]], n_clients=2, budget=100, reuse_samples=1)


def test_presets_use_pf_pne_constants():
    m = 10
    theory = PFPNEServer([[0, 1]], n_clients=m, budget=1000, preset="theory")
    assert theory.constants.c == 2.0
    assert theory.constants.c1 == pytest.approx((2 * m**2) ** 0.125)  # Lemma A.2, not (2M)^(1/8)
    assert theory.constants.delta == pytest.approx(0.1)
    practical = PFPNEClient(0, [[0, 1]], n_clients=m, budget=1000)
    assert (practical.constants.c, practical.constants.c1) == (0.1, 1.0)


# ------------------------------------------------------------------ worked table §6.7
def test_worked_table_of_section_6_7():
    m, t = 10, 10_000
    server, clients = _federation(m, t, delta=0.1)
    assert server.h0 == 6
    assert server.constants.log_term == pytest.approx(11.5129, abs=1e-4)
    pulled, broadcasts, finished = _drive(server, clients, shifted_garlands(m), noise=0.1)
    stage1 = [b for b in broadcasts if not b.final]
    assert [b.depth for b in stage1] == [1, 2, 3, 4, 5, 6]  # one depth per round, no skipping
    assert [server.constants.tau(h) for h in range(1, 9)] == [1, 2, 8, 30, 118, 472, 1887, 7546]
    assert [b.pulls_per_node for b in stage1] == [1, 1, 1, 3, 12, 48]
    assert [m * b.pulls_per_node for b in stage1] == [10, 10, 10, 30, 120, 480]  # N_h
    widths = [rec.width for rec in server.history]
    assert widths == pytest.approx([0.1073, 0.1073, 0.1073, 0.0619, 0.0310, 0.0155], abs=1e-4)
    assert stage1[0].nodes.tolist() == [1, 2]  # the root's children; the root is not sampled
    assert server.rounds == 6 and len(broadcasts) == 7  # 6 rounds + the handover broadcast
    final = broadcasts[-1]
    assert final.final and final.survivor_depth == 6
    last = server.history[-1]
    assert final.survivors.tolist() == last.nodes[last.survive].tolist()
    assert np.all(final.survivor_widths == last.width)
    # stage-2 local target is tau_h (not tau_h / M)
    for client in clients:
        assert client.used == t
        for rec in client.pe_history:
            assert np.all(rec.counts[~rec.protected] >= server.constants.tau(rec.depth))
    assert finished.clients.tolist() == list(range(m))
    assert finished.recommendations.shape == (m, 1)
    for j, client in enumerate(clients):
        assert np.array_equal(finished.recommendation_of(j), client.recommend())
    assert all(sum(len(X) for _, X in p) == t for p in pulled)


# -------------------------------------------------------------------- §13 item 7
@pytest.mark.parametrize("t", [5, 6, 30, 200, 1500, 4000])
def test_rounds_equal_min_h0_and_depth_reached(t):
    m = 4
    server, clients = _federation(m, t)
    pulled, broadcasts, finished = _drive(server, clients, shifted_garlands(m), noise=0.1)
    cumulative = np.cumsum([len(b.nodes) * b.pulls_per_node for b in broadcasts if not b.final])
    depths = [b.depth for b in broadcasts if not b.final]
    reached = max([d for d, c in zip(depths, cumulative, strict=True) if c <= t], default=0)
    assert server.rounds == min(server.h0, reached)
    truncated = cumulative[-1] > t
    assert truncated == (not broadcasts[-1].final)
    for client, p in zip(clients, pulled, strict=True):
        assert client.used == t and sum(len(X) for _, X in p) == t  # exactly T pulls
        if truncated:
            assert client.pe_history == []  # stage 2 never runs
    # every client's own recommendation comes back, even when the horizon ends in stage 1
    assert finished.clients.tolist() == list(range(m))
    if t == 5:  # depth 1: 2 pulls, depth 2: 4 pulls -> ends inside depth 2
        assert server.rounds == 1 and truncated
    if t == 6:  # stage 1 uses exactly T at depth 2 < H0: handover with no budget left
        assert server.rounds == 2 and not truncated
        assert all(c.pe_history == [] for c in clients)


@pytest.mark.parametrize(("delta_gap", "t", "h0"), [(0.01, 60_000, 6), (0.1, 20_000, 3)])
def test_stage_two_invariants_protected_nodes_and_local_samples(delta_gap, t, h0):
    m = 5
    server, clients = _federation(m, t, delta=0.1, Delta=delta_gap)
    pulled, broadcasts, _ = _drive(server, clients, shifted_garlands(m), noise=0.1, seed=2)
    handover = broadcasts[-1].phase
    tau = server.constants.tau
    global_survivors = {rec.depth: set(rec.nodes[rec.survive].tolist()) for rec in server.history}
    global_sets = {rec.depth: (rec.nodes, rec.survive) for rec in server.history}
    t_h = {b.depth: b.pulls_per_node for b in broadcasts if not b.final}
    assert server.rounds == server.h0 == h0
    for client, batches in zip(clients, pulled, strict=True):
        records = client.pe_history
        assert [r.depth for r in records] == list(range(1, len(records) + 1))
        assert len(records) > server.h0  # PE goes below H0 here
        stage2 = _rows(batches, {handover})
        assert len(stage2) == t - server.used
        # one evaluate() batch per PE depth (plus the truncated last one)
        assert len([p for p, _ in batches if p == handover]) <= len(records) + 1
        protected_points = []
        for a, b in itertools.pairwise(records):
            assert np.array_equal(b.nodes, children(a.nodes[a.survive], 2))
        for r in records:
            h = r.depth
            s_h = global_survivors.get(h, set())
            assert s_h <= set(r.nodes.tolist())  # S^h is a subset of the local active set
            assert r.protected.tolist() == [i in s_h for i in r.nodes.tolist()]
            assert np.all(r.pulls[r.protected] == 0)  # protected: never pulled in stage 2
            assert np.all(r.survive[r.protected])  # ... and never eliminated
            unprot = ~r.protected
            assert np.all(r.counts[unprot] >= tau(h))  # >= tau_h local samples before deciding
            # P5: stage-1 samples count; a node of G^h \ S^h had t_h of them
            if h in global_sets:
                g_nodes, _ = global_sets[h]
                before = np.where(np.isin(r.nodes, g_nodes), t_h[h], 0)
            else:
                before = np.zeros(len(r.nodes), dtype=int)
            assert np.array_equal(r.counts[unprot], before[unprot] + r.pulls[unprot])
            assert np.array_equal(r.counts[unprot], np.maximum(before[unprot], tau(h)))
            # double elimination: whatever is removed at h <= H0 was not a global survivor
            removed = set(r.nodes[~r.survive].tolist())
            assert not removed & s_h
            protected_points.append(centres(h, r.nodes[r.protected]))
            # the statistics of protected nodes are the global ones
            if h in global_sets:
                rec = server.history[h - 1]
                pos = np.searchsorted(rec.nodes, r.nodes[r.protected])
                assert np.array_equal(r.means[r.protected], rec.means[pos])
                assert np.all(r.widths[r.protected] == rec.width)
        prot = np.concatenate(protected_points)
        assert not np.any(np.isclose(stage2[:, None, 0], prot[None, :, 0], rtol=0, atol=1e-12))
        assert stage2.size > 0


def test_restarting_counts_pulls_globally_eliminated_nodes_tau_h_times():
    m, t = 5, 20_000
    server, clients = _federation(m, t, delta=0.1, client_kw={"reuse_samples": False})
    _drive(server, clients, shifted_garlands(m), noise=0.1, seed=2)
    checked = 0
    for client in clients:
        for r in client.pe_history:
            unprot = ~r.protected
            assert np.array_equal(r.counts[unprot], r.pulls[unprot])
            assert np.all(r.pulls[unprot] == server.constants.tau(r.depth))
            checked += int(unprot.sum())
    assert checked > 0


# -------------------------------------------------------------------- §13 item 8
def _single_client_elimination(f, rng, t, const, noise):
    """Reference: single-client phased node elimination on f (PE with nothing protected)."""
    lset, h, used, pulled, records = np.array([1, 2]), 1, 0, [], []
    while used < t:
        tau = const.tau(h)
        n = min(t - used, len(lset) * tau)
        X = np.repeat(centres(h, lset), tau, axis=0)[:n]
        r = f(X) + rng.uniform(-noise, noise, n)
        pulled.append(X)
        used += n
        if n < len(lset) * tau:
            break
        est = r.reshape(len(lset), tau).mean(axis=1)
        survive, best = eliminate(est, const.width(tau), const.slack(h))
        records.append((h, lset, est, survive, lset[best]))
        lset = children(lset[survive], 2)
        h += 1
    return np.concatenate(pulled), records


def test_delta_at_least_nu_gives_independent_single_client_eliminations():
    m, t, noise = 3, 6000, 0.1
    server, clients = _federation(m, t, Delta=1.0)
    assert server.h0 == 0
    first = server.start()
    assert first.final and first.phase == 1 and first.survivors.size == 0
    server, clients = _federation(m, t, Delta=1.0)
    fns = shifted_garlands(m, scale=0.1)
    rngs = [np.random.default_rng(100 + j) for j in range(m)]
    pulled, broadcasts, finished = _drive(server, clients, fns, noise=noise, rngs=rngs)
    assert server.rounds == 0 and len(broadcasts) == 1  # no communication of statistics
    assert finished.recommendation.tolist() == [0.5]  # the root's centre: nothing aggregated
    for j, client in enumerate(clients):
        ref_pulled, ref_records = _single_client_elimination(
            fns[j], np.random.default_rng(100 + j), t, client.constants, noise
        )
        assert np.array_equal(_rows(pulled[j]), ref_pulled)
        assert len(client.pe_history) == len(ref_records) >= 4
        for r, (h, nodes, est, survive, best) in zip(client.pe_history, ref_records, strict=True):
            assert r.depth == h and np.array_equal(r.nodes, nodes)
            assert not r.protected.any()
            assert r.means == pytest.approx(est, abs=1e-12)
            assert np.array_equal(r.survive, survive) and r.best == best
    # clients with different objectives ended with different trees
    assert not all(
        np.array_equal(clients[0].pe_history[-1].nodes, c.pe_history[-1].nodes) for c in clients[1:]
    )


def _no_skip_fed_pne(fns, t, const, noise, seed):
    """Reference: spec §6.2 stage 1 without the transition (Fed-PNE without depth skipping)."""
    rng = np.random.default_rng(seed)
    m = len(fns)
    nodes, h, used = np.array([1, 2]), 1, 0
    pulled, records = [[] for _ in fns], []
    while True:
        t_h = math.ceil(const.tau(h) / m)
        length = len(nodes) * t_h
        n = min(t - used, length)
        local = []
        for j, f in enumerate(fns):
            X = np.repeat(centres(h, nodes), t_h, axis=0)[:n]
            r = f(X) + rng.uniform(-noise, noise, n)
            pulled[j].append(X)
            if n == length:
                local.append(r.reshape(len(nodes), t_h).mean(axis=1))
        used += n
        if n < length:
            return pulled, records
        means = np.mean(local, axis=0)
        width = float(const.width(m * t_h))
        survive, _ = eliminate(means, width, const.slack(h))
        records.append((h, nodes, means, width, survive))
        if used == t:
            return pulled, records
        nodes = children(nodes[survive], 2)
        h += 1


@pytest.mark.parametrize("t", [800, 3000])
def test_tiny_delta_stage_one_equals_no_skip_fed_pne(t):
    m, noise = 4, 0.1
    server, clients = _federation(m, t, Delta=1e-9)
    assert server.h0 == 29
    fns = shifted_garlands(m)
    pulled, _, _ = _drive(server, clients, fns, noise=noise, seed=5)
    ref_pulled, ref_records = _no_skip_fed_pne(fns, t, server.constants, noise, seed=5)
    assert server.rounds == len(ref_records) >= 5
    for rec, (h, nodes, means, width, survive) in zip(server.history, ref_records, strict=True):
        assert rec.depth == h and np.array_equal(rec.nodes, nodes)
        assert np.array_equal(rec.means, means) and rec.width == width
        assert np.array_equal(rec.survive, survive)
    for j, client in enumerate(clients):
        assert np.array_equal(_rows(pulled[j]), np.concatenate(ref_pulled[j]))
        assert client.pe_history == [] and client.used == t


def test_skip_levels_reproduces_fed_pne_trajectory():
    m, t, noise = 10, 3000, 0.1
    server, clients = _federation(m, t, Delta=1e-9, skip_levels=True)
    fns = shifted_garlands(m)
    pulled, broadcasts, _ = _drive(server, clients, fns, noise=noise, seed=4)
    fed = FedPNEServer([[0, 1]], n_clients=m, budget=t, seed=3)
    fed_clients = [FedPNEClient(j, [[0, 1]], budget=t, seed=3) for j in range(m)]
    rng = np.random.default_rng(4)
    fed_pulled = [[] for _ in range(m)]
    msg = fed.start()
    while not isinstance(msg, Finished):
        wire = FedPNEBroadcast.from_wire(msg.to_wire())
        for j, c in enumerate(fed_clients):

            def evaluate(X, j=j):
                fed_pulled[j].append(X.copy())
                return fns[j](X) + rng.uniform(-noise, noise, len(X))

            fed.receive(j, FedPNEReport.from_wire(c.answer(wire, evaluate).to_wire()))
        msg = fed.close_phase()
    assert broadcasts[0].depth == fed.history[0].depth == 3  # spec §4.6: M=10 skips to depth 3
    assert len(server.history) == len(fed.history) >= 4
    for a, b in zip(server.history, fed.history, strict=True):
        assert (a.depth, a.best, a.survivors) == (b.depth, b.best, b.survivors)
        assert np.array_equal(a.nodes, b.nodes) and np.array_equal(a.means, b.means)
    for j in range(m):
        assert np.array_equal(_rows(pulled[j]), np.concatenate(fed_pulled[j]))


def test_skipped_depths_are_protected_without_statistics_in_pe():
    m, t = 10, 10_000
    server, clients = _federation(m, t, delta=0.1, skip_levels=True)
    _, broadcasts, _ = _drive(server, clients, shifted_garlands(m), noise=0.1, seed=1)
    assert broadcasts[0].depth == 3 and server.h0 == 6
    client = clients[0]
    for h in (1, 2):
        nodes, mu, _ = client.protected[h]
        assert nodes.tolist() == list(range(1, 2**h + 1)) and np.all(np.isnan(mu))
        rec = client.pe_history[h - 1]
        assert rec.protected.all() and rec.pulls.sum() == 0 and rec.survive.all()
    assert all(c.used == t for c in clients)


# --------------------------------------------------------------------- personalization
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clients_find_their_own_optima(seed):
    """Two groups of clients with peaks at 0.3 and 0.7: each client's recommendation is its own
    depth-6 optimum (error 0.0047 measured, bound 2^-7), while one global answer cannot be."""
    m, t = 6, 20_000
    peaks = np.array([0.3, 0.3, 0.3, 0.7, 0.7, 0.7])
    fns = [lambda X, p=p: 1 - np.abs(X[:, 0] - p) for p in peaks]
    server, clients = _federation(m, t, seed=seed, Delta=0.1)
    assert server.h0 == 3
    _, _, finished = _drive(server, clients, fns, noise=0.1, seed=seed)
    assert np.all(np.abs(finished.recommendations[:, 0] - peaks) < 2.0**-7)
    assert np.abs(finished.recommendation[0] - peaks).max() > 0.25


# ------------------------------------------------------------------- wire and robustness
def test_wire_round_trips():
    server, clients = _federation(2, 2000, Delta=0.25)
    fns = shifted_garlands(2)
    _, broadcasts, finished = _drive(server, clients, fns, noise=0.1)
    for b in broadcasts:
        again = PFPNEBroadcast.from_wire(b.to_wire())
        for name in ("nodes", "survivors", "survivor_means", "survivor_widths"):
            assert np.array_equal(getattr(again, name), getattr(b, name))
        assert (again.phase, again.depth, again.pulls_per_node, again.final) == (
            b.phase,
            b.depth,
            b.pulls_per_node,
            b.final,
        )
    assert [b.final for b in broadcasts] == [False, False, True]
    report = PFPNEReport(3, 1, True, recommendation=np.array([0.25]))
    again = PFPNEReport.from_wire(report.to_wire())
    assert again.recommendation.tolist() == [0.25] and again.means.size == 0
    plain = Finished.from_wire(finished.to_wire())  # generic drivers still understand it
    assert plain.recommendation.tolist() == finished.recommendation.tolist()
    assert PFPNEFinished.from_wire(finished.to_wire()).recommendations.shape == (2, 1)


def _stage1_wire(**changes):
    wire = PFPNEBroadcast(
        2,
        2,
        np.array([1, 2, 3, 4]),
        1,
        1,
        np.array([1, 2]),
        np.array([0.5, 0.6]),
        np.array([0.1, 0.1]),
    ).to_wire()
    wire.update(changes)
    return wire


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"kind": "fedpne.broadcast"}, "kind"),
        ({"nodes": np.array([2, 1, 3, 4])}, "increasing"),
        ({"survivor_means": np.array([0.5])}, "2 values"),
        ({"survivor_means": np.array([0.5, np.nan])}, "NaN"),
        ({"survivor_widths": np.array([0.1, 0.0])}, "positive"),
        ({"survivor_depth": 0}, "empty exactly"),
        ({"depth": 1}, "depth"),
        ({"pulls_per_node": 0}, "pulls_per_node"),
        ({"final": True}, "final broadcast"),
        ({"final": 1}, "boolean"),
        ({"survivors": np.array([1.5, 2.0])}, "integers"),
    ],
)
def test_malformed_broadcasts_are_rejected(changes, match):
    assert PFPNEBroadcast.from_wire(_stage1_wire()).depth == 2
    with pytest.raises(ProtocolError, match=match):
        PFPNEBroadcast.from_wire(_stage1_wire(**changes))


def test_malformed_messages_missing_fields_and_bad_finished():
    wire = _stage1_wire()
    del wire["survivor_widths"]
    with pytest.raises(ProtocolError, match="missing field 'survivor_widths'"):
        PFPNEBroadcast.from_wire(wire)
    good = PFPNEReport(1, 0, True, np.array([0.1, 0.2])).to_wire()
    with pytest.raises(ProtocolError, match="NaN"):
        PFPNEReport.from_wire({**good, "means": np.array([np.nan, 0.2])})
    with pytest.raises(ProtocolError, match="missing field 'recommendation'"):
        PFPNEReport.from_wire({k: v for k, v in good.items() if k != "recommendation"})
    fin = PFPNEFinished(3, np.array([0.5]), "budget", np.array([0, 1]), np.ones((2, 1))).to_wire()
    with pytest.raises(ProtocolError, match="shape"):
        PFPNEFinished.from_wire({**fin, "recommendations": np.ones((3, 1))})
    with pytest.raises(ProtocolError, match="increasing"):
        PFPNEFinished.from_wire({**fin, "clients": np.array([1, 0])})


def test_server_rejects_bad_reports_and_drops_duplicates():
    server, clients = _federation(2, 500)
    b = server.start()
    good = clients[0].answer(b, garland)
    assert len(b.nodes) == 2
    with pytest.raises(ProtocolError, match="phase 2"):
        server.receive(0, PFPNEReport(2, 0, True, good.means))
    with pytest.raises(ProtocolError, match="client 0 received as client 1"):
        server.receive(1, good)
    with pytest.raises(ProtocolError, match="must hold 2 values"):
        server.receive(0, PFPNEReport(1, 0, True, good.means[:1]))
    with pytest.raises(ProtocolError, match="empty in a stage-1 report"):
        server.receive(0, PFPNEReport(1, 0, True, good.means, np.array([0.5])))
    with pytest.raises(ProtocolError, match="incomplete report"):
        server.receive(0, PFPNEReport(1, 0, False, recommendation=np.array([0.5])))
    assert server.reported == 0
    assert server.receive(0, good) is True
    assert server.receive(0, good) is False  # duplicate: dropped
    assert not server.ready()
    # handover: the reply must be a point of the domain
    server, clients = _federation(2, 500, Delta=1.0)
    b = server.start()
    assert b.final
    with pytest.raises(ProtocolError, match="outside the domain"):
        server.receive(0, PFPNEReport(1, 0, True, recommendation=np.array([1.5])))
    with pytest.raises(ProtocolError, match="shape"):
        server.receive(0, PFPNEReport(1, 0, True, recommendation=np.array([0.5, 0.5])))
    assert server.receive(0, clients[0].answer(b, garland))
    finished = server.close_phase()  # a quorum: client 1 never answered
    assert isinstance(finished, PFPNEFinished) and finished.clients.tolist() == [0]
    assert np.array_equal(finished.recommendation_of(0), clients[0].recommend())
    with pytest.raises(KeyError):
        finished.recommendation_of(1)
    assert server.close_phase() is finished and server.stage == "finished"


def test_client_rejects_inconsistent_broadcasts_without_changing_state():
    server, clients = _federation(2, 500)
    b1 = server.start()
    for j, c in enumerate(clients):
        server.receive(j, c.answer(b1, garland))
    b2 = server.close_phase()
    client = clients[0]
    used = client.used
    bad = [
        (
            PFPNEBroadcast(
                3, 2, b2.nodes, 1, 1, b2.survivors, b2.survivor_means, b2.survivor_widths
            ),
            "phase 2",
        ),
        (
            PFPNEBroadcast(
                2, 2, np.array([1, 2]), 1, 1, b2.survivors, b2.survivor_means, b2.survivor_widths
            ),
            "descendants",
        ),
        (
            PFPNEBroadcast(
                2,
                2,
                np.array([1, 2, 3, 4, 5, 6]),
                1,
                1,
                np.array([1, 2, 3]),
                np.zeros(3),
                np.ones(3),
            ),
            "not sampled",
        ),
        (
            PFPNEBroadcast(2, 3, children(b2.nodes, 2), 1, 2, b2.nodes, np.zeros(4), np.ones(4)),
            "survivor_depth",
        ),
        (
            PFPNEBroadcast(
                2, 2, b2.nodes, 7, 1, b2.survivors, b2.survivor_means, b2.survivor_widths
            ),
            "pulls_per_node",
        ),
    ]
    for broadcast, match in bad:
        with pytest.raises(ProtocolError, match=match):
            client.answer(broadcast, garland)
        assert client.used == used and client.phase == 1 and 1 not in client.protected
    client.answer(b2, garland)  # the genuine broadcast still works
    assert client.phase == 2 and client.protected[1][0].tolist() == b2.survivors.tolist()
    # a client whose constants differ from the server's is caught
    other = PFPNEClient(1, [[0, 1]], n_clients=2, budget=500, c=1.0)
    with pytest.raises(ProtocolError, match="must share"):
        other.answer(b1, garland)
    assert other.used == 0


def test_nan_rewards_are_rejected_in_both_stages_and_leave_state_intact():
    server, clients = _federation(1, 400, Delta=0.25)
    b = server.start()
    client = clients[0]
    with pytest.raises(InvalidRewardError, match="finite"):
        client.answer(b, lambda X: np.full(len(X), np.nan))
    assert client.used == 0 and client.phase == 0
    server.receive(0, client.answer(b, garland))
    b = server.close_phase()
    server.receive(0, client.answer(b, garland))
    final = server.close_phase()
    assert final.final
    used = client.used
    calls = []

    def flaky(X):
        calls.append(len(X))
        return garland(X) if len(calls) < 3 else np.full(len(X), np.inf)

    with pytest.raises(InvalidRewardError):
        client.answer(final, flaky)
    assert client.used == used and client.pe_history == [] and client.stage == "collaborative"
    report = client.answer(final, garland)
    assert client.used == 400 and report.recommendation.shape == (1,)


def test_redelivered_broadcasts_do_not_pull_twice():
    server, clients = _federation(2, 600, Delta=0.5)
    calls = []

    def evaluate(X):
        calls.append(len(X))
        return garland(X)

    b = server.start()
    r1 = clients[0].answer(b, evaluate)
    assert clients[0].answer(b, evaluate) is r1 and len(calls) == 1
    server.receive(0, r1)
    server.receive(1, clients[1].answer(b, garland))
    final = server.close_phase()
    assert final.final
    f1 = clients[0].answer(final, evaluate)
    n = len(calls)
    assert clients[0].answer(final, evaluate) is f1 and len(calls) == n
    assert clients[0].used == 600
    with pytest.raises(ProtocolError, match="finished"):
        clients[0].answer(PFPNEBroadcast.from_wire({**final.to_wire(), "phase": 3}), evaluate)


def test_descendants_helper():
    assert descendants(np.array([2]), 2, 2).tolist() == [5, 6, 7, 8]
    assert descendants(np.array([1, 3]), 3, 0).tolist() == [1, 3]


def test_same_seed_same_run():
    def run(seed):
        server, clients = _federation(3, 4000, dim=2, seed=seed, Delta=0.1)
        f = lambda X: np.sin(5 * X[:, 0]) * np.cos(3 * X[:, 1])  # noqa: E731
        fns = [lambda X, s=s: f(X) + s for s in (0.0, 0.1, 0.2)]
        pulled, _, fin = _drive(server, clients, fns, noise=0.1, seed=seed)
        return _rows(pulled[0]), fin.recommendations

    a, b = run(1), run(1)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert a[0].shape == (4000, 2)
    assert not np.array_equal(run(2)[0], a[0])


def test_pne_constants_resolve_is_shared():
    const = PNEConstants.resolve(n_clients=10, horizon=10_000, delta=0.1)
    client = PFPNEClient(0, [[0, 1]], n_clients=10, budget=10_000, delta=0.1)
    assert client.constants == const
