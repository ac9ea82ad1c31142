"""Partial participation (``[federation] participation = q``): the asked sets are drawn from the
run seed (Poisson sampling), only asked clients pull and report, the barrier waits for them
alone, and every transport gives the same run."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
from config_factory import sim_config

from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import run_id_for, run_on_broker
from fedxab.agents.federation import Federation
from fedxab.agents.server import ServerAgent
from fedxab.algorithms.registry import NO_PARTICIPATION
from fedxab.broker.faults import FaultyBroker
from fedxab.broker.memory import MemoryBroker
from fedxab.errors import ConfigError
from fedxab.monitoring.metrics import FederationMetrics
from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.mechanisms import GaussianMechanism
from fedxab.run.job import client_slices
from fedxab.run.participation import Participation

SEED, CLIENTS, BUDGET, Q = 3, 10, 2000, 0.3


def _config(q: float | None = Q, algorithm: str = "fedpne", budget: int | None = BUDGET, **kwargs):
    federation = {} if q is None else {"participation": q}
    return sim_config(
        algorithm, clients=CLIENTS, budget=budget or 800, federation=federation, **kwargs
    )


def test_the_draw_is_a_seeded_poisson_sample():
    sample = Participation(seed=7, n_clients=10_000, rate=0.1)
    asked = sample.asked(5, range(10_000))
    assert asked == Participation(7, 10_000, 0.1).asked(5, range(10_000))  # reproducible
    assert asked != sample.asked(6, range(10_000))  # a fresh draw per phase
    # Binomial(10000, 0.1): mean 1000, sd 30; 4 sd either side
    assert 880 <= len(asked) <= 1120
    # a client's draw depends only on (seed, phase, id), not on who else is in the run
    assert sample.asked(5, range(0, 10_000, 2)) == [m for m in asked if m % 2 == 0]
    assert all(sample.asks(m, 5) == (m in set(asked)) for m in range(0, 10_000, 97))


@pytest.mark.parametrize("name", sorted(NO_PARTICIPATION))
def test_an_algorithm_that_asks_every_client_refuses_a_sample(name):
    with pytest.raises(ConfigError, match=r"^federation\.participation: ") as info:
        _config(0.5, name)
    assert NO_PARTICIPATION[name] in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("q", [0.0, 1.5, -0.1])
def test_a_rate_outside_0_1_is_refused(q):
    with pytest.raises(ConfigError, match=r"federation\.participation: .*\(0, 1\]"):
        _config(q)


def test_only_the_asked_clients_pull_and_report_and_the_transports_agree():
    config = _config()
    metrics = FederationMetrics()
    federation = Federation(config, SEED, metrics=metrics)
    in_process = federation.run()

    async def on_broker():
        async with MemoryBroker() as broker:
            return await run_on_broker(config, SEED, broker)

    on_memory = asyncio.run(on_broker())
    sample = Participation(SEED, CLIENTS, Q)
    phases = in_process.communication["per_phase"]
    asked = [sample.asked(p["phase"], range(CLIENTS)) for p in phases]
    assert [p["reports_accepted"] for p in phases] == [len(a) for a in asked]
    assert [p["asked"] for p in phases] == [len(a) for a in asked]
    exposition = metrics.exposition()
    assert _gauge(exposition, "fedxab_phase_clients_asked") == len(asked[-1])
    assert _gauge(exposition, "fedxab_phase_clients_reported") == len(asked[-1])
    assert any(len(a) < CLIENTS for a in asked)
    # every phase's pulls come from its asked clients only: each made the phase's pulls
    used = np.zeros(CLIENTS, dtype=np.int64)
    for p, who in zip(phases, asked, strict=True):
        assert p["evaluations"] % max(1, len(who)) == 0
        used[who] += p["evaluations"] // max(1, len(who))
    assert np.array_equal(federation.used, used)
    assert int(used.sum()) == in_process.evaluations < CLIENTS * BUDGET
    assert in_process.regret_coverage is None  # every pull a client made is counted
    # the embedded broker: the same run, bit for bit
    assert _without_time(on_memory) == _without_time(in_process)


def _gauge(exposition: str, name: str) -> float:
    (line,) = [x for x in exposition.splitlines() if x.startswith(name + " ")]
    return float(line.split()[1])


def _without_time(record) -> dict:
    d = record.to_dict()
    d.pop("wall_time_s")
    return d


def test_redelivered_and_reordered_messages_change_nothing_with_a_sample():
    config = _config(0.5, budget=None)
    broker = FaultyBroker(MemoryBroker(), reorder_window=5, duplicate=0.5, seed=2)
    record = asyncio.run(run_on_broker(config, SEED, broker, hosts=3))
    assert broker.injected["duplicated"] > 0 and broker.injected["reordered"] > 0
    assert _without_time(record) == _without_time(Federation(config, SEED).run())


def test_full_participation_is_the_run_without_the_setting():
    with_one = Federation(_config(1.0), SEED).run()
    without = Federation(_config(None), SEED).run()
    assert np.array_equal(with_one.cumulative_regret, without.cumulative_regret)
    assert with_one.evaluations == CLIENTS * BUDGET


EPSILON, PRIVACY_DELTA = 0.5, 1e-3


def _released(k: int) -> float:
    """The epsilon of k sequentially composed DP-Fed-PNE releases, by the runs' accountant."""
    if k == 0:
        return 0.0
    event = GaussianMechanism.calibrated(EPSILON, PRIVACY_DELTA).event("run")
    return make_accountant("rdp").epsilon([dataclasses.replace(event, count=k)], PRIVACY_DELTA)


def test_local_dp_charges_a_client_only_the_phases_it_was_asked_in():
    q = 0.2
    params = {"epsilon": EPSILON, "privacy_delta": PRIVACY_DELTA, "composition": "sequential"}
    federation = Federation(_config(q, "dpfedpne", params=params, privacy={}), SEED)
    record = federation.run()
    sample = Participation(SEED, CLIENTS, q)
    phases = [p["phase"] for p in record.communication["per_phase"]]
    ledger, run = federation.run_ledger.ledger, federation.run_ledger.run
    privacy = record.privacy
    never = [m for m in range(CLIENTS) if not any(sample.asks(m, p) for p in phases)]
    assert never, "the seed should leave some client never asked"
    for m in range(CLIENTS):
        asked = {p for p in phases if sample.asks(m, p)}
        released = {row[0] for row in ledger.history(run, m)}
        # released in the asked phases, but the last phase if the horizon truncated it
        assert asked - {phases[-1]} <= released <= asked
        assert privacy["releases"][m] == len(released)
        assert privacy["epsilon"][m] == pytest.approx(_released(len(released)), rel=1e-12)
    for m in never:
        assert privacy["releases"][m] == 0 and privacy["epsilon"][m] == 0.0
    # no amplification by the (public) sample: an asked client pays a full release, and a client
    # asked in fewer phases than the run has pays less than the full-participation client
    full = _released(len(phases) - 1)
    assert max(privacy["epsilon"]) < full


def test_a_server_restarted_from_its_checkpoint_asks_the_same_clients(tmp_path):
    config = _config(0.5, budget=3000)
    checkpoint = tmp_path / "server.ckpt"

    async def main():
        broker = MemoryBroker()
        run_id = run_id_for(config, SEED)
        server = ServerAgent(config, SEED, broker, run_id=run_id, checkpoint=checkpoint)
        clients = [
            ClientAgent(config, SEED, broker, run_id=run_id, client_ids=ids)
            for ids in client_slices(CLIENTS, 2)
        ]
        client_tasks = [asyncio.create_task(c.run()) for c in clients]
        first = asyncio.create_task(server.run())
        async with asyncio.timeout(20):
            while len(server.phases) < 2:
                await asyncio.sleep(0.001)
        first.cancel()  # the server process dies after its second phase
        await asyncio.gather(first, return_exceptions=True)
        restarted = ServerAgent(config, SEED, broker, run_id=run_id, checkpoint=checkpoint)
        record = await restarted.run()
        await asyncio.gather(*client_tasks)
        return record

    record = asyncio.run(main())
    assert _without_time(record) == _without_time(Federation(config, SEED).run())


def test_the_barrier_and_a_quorum_count_the_asked_clients_and_refuse_the_others():
    from fedxab.broker.codec import packb
    from fedxab.run.assembly import build_run

    config = _config(0.5)
    parts = build_run(config, SEED, run_id="r", server=True, client_ids=range(CLIENTS))
    session, clients = parts.server, parts.clients
    broadcast = session.start()
    asked = Participation(SEED, CLIENTS, 0.5).asked(session.phase, range(CLIENTS))
    assert session.asked == asked and 2 <= len(asked) < CLIENTS
    (outsider, *_) = sorted(set(range(CLIENTS)) - set(asked))
    report, telemetry, _ = clients.answer(outsider, broadcast)
    assert (report, telemetry) == (None, None)  # not asked: no pull, no report
    assert clients.evaluators[outsider].used == 0
    payloads = {}
    for m in asked:
        report, telemetry, _ = clients.answer(m, broadcast)
        assert telemetry.count > 0
        payloads[m] = packb(report.to_wire())
    # a report from a client not asked (one answering as if asked) is refused
    eager = build_run(_config(None), SEED, run_id="r", server=False, client_ids=[outsider])
    report, _, _ = eager.clients.answer(outsider, broadcast)
    verdict = session.classify(outsider, session.phase, packb(report.to_wire()))
    assert verdict.outcome == "invalid" and "was not asked" in verdict.text
    first = asked[0]
    assert session.classify(first, session.phase, payloads[first]).outcome == "accepted"
    assert not session.barrier_met(0.0, None, 1.0)
    # after the deadline a quorum is a fraction of the asked clients, not of all M
    half = -(-len(asked) // 2)
    for m in asked[1:half]:
        session.classify(m, session.phase, payloads[m])
    assert session.barrier_met(5.0, 1.0, 0.5)
    assert not session.barrier_met(5.0, 1.0, 1.0)
    for m in asked[half:]:
        session.classify(m, session.phase, payloads[m])
    assert session.barrier_met(0.0, None, 1.0)  # every asked client reported


def test_a_client_host_restarted_mid_run_replays_its_skipped_phases():
    config = _config(0.5, budget=3000)

    async def main():
        broker = MemoryBroker()
        run_id = run_id_for(config, SEED)
        server = ServerAgent(config, SEED, broker, run_id=run_id)
        slices = client_slices(CLIENTS, 2)
        hosts = [ClientAgent(config, SEED, broker, run_id=run_id, client_ids=i) for i in slices]
        server_task = asyncio.create_task(server.run())
        tasks = [asyncio.create_task(c.run()) for c in hosts]
        async with asyncio.timeout(20):
            while len(server.phases) < 2:
                await asyncio.sleep(0.001)
        tasks[1].cancel()  # the second host dies while a phase is open
        await asyncio.gather(tasks[1], return_exceptions=True)
        again = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=slices[1])
        tasks[1] = asyncio.create_task(again.run())
        record = await server_task
        await asyncio.gather(*tasks)
        return record

    record = asyncio.run(main())
    assert _without_time(record) == _without_time(Federation(config, SEED).run())


def test_participation_is_part_of_the_run_protocol():
    from fedxab.run.identity import protocol_differences, protocol_of

    # parties that draw different samples never share a run; q = 1 is the run without it
    assert run_id_for(_config(0.5), SEED) != run_id_for(_config(None), SEED)
    assert run_id_for(_config(0.5), SEED) != run_id_for(_config(0.25), SEED)
    assert run_id_for(_config(1.0), SEED) == run_id_for(_config(None), SEED)
    lines = protocol_differences(protocol_of(_config(0.5), SEED), protocol_of(_config(1.0), SEED))
    assert lines == ["participation: expected 0.5, got (absent)"]
