"""Elastic membership over a broker (``[federation] membership = "elastic"``): clients that
start after phase 1, leave cleanly, fall silent (killed) and rejoin, with the server and client
agents on the embedded broker; the recorded membership replayed in process gives the same run
(:mod:`fedxab.run.membership`, :mod:`fedxab.run.replay`)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import numpy as np
import pytest
from config_factory import sim_config

from fedxab.agents.client import ClientAgent
from fedxab.agents.federation import Federation
from fedxab.agents.server import ServerAgent
from fedxab.broker.memory import MemoryBroker
from fedxab.run.identity import run_id_for
from fedxab.run.membership import membership_of
from fedxab.run.replay import replay, replay_differences

SEED, CLIENTS, BUDGET = 3, 8, 1500
AGENTS = {
    "heartbeat_s": 0.05,
    "liveness_s": 0.4,
    "rebroadcast_s": 0.3,
    "telemetry_timeout_s": 2.0,
}


def _config(algorithm: str):
    kwargs = {}
    if algorithm == "dpfedpne":
        kwargs = {
            "privacy": {},
            "params": {"epsilon": 0.5, "privacy_delta": 1e-3, "composition": "sequential"},
        }
    return sim_config(
        algorithm,
        clients=CLIENTS,
        budget=BUDGET,
        federation={"membership": "elastic"},
        agents=AGENTS,
        **kwargs,
    )


async def _elastic_run(config, events):
    """The server and one client agent per client on a memory broker; before phase p opens
    (once every client asked in phase p - 1 reported or is gone), the (action, client) pairs of
    ``events[p]``: "join" starts the client's agent, "leave" stops it (a clean leave), "kill"
    stops it without a word; phase p opens once the server's roster shows them."""
    run_id = run_id_for(config, SEED)
    async with MemoryBroker() as broker:
        server = ServerAgent(config, SEED, broker, run_id=run_id)
        session, may_open, opened = server.run_session, server.party.may_open, [0]
        server.party.may_open = lambda: opened[0] > server.phase and may_open()  # the gate
        agents: dict[int, ClientAgent] = {}
        tasks: dict[int, asyncio.Task] = {}
        run = asyncio.create_task(server.run())
        present: set[int] = set()
        async with asyncio.timeout(60):
            for phase in range(1, 100):
                while not run.done() and not (
                    server.phase == phase - 1
                    and set(session.asked)
                    <= set(session.accepted) | server.party.roster.gone(session.asked, time.time())
                ):
                    await asyncio.sleep(0.005)
                if run.done():
                    break
                for action, m in events.get(phase, []):
                    if action == "die_asked":  # killed now, still in the run as phase opens
                        agents[m].party.leave_records = lambda: []
                        tasks.pop(m).cancel()
                        continue
                    if action == "join":
                        agents[m] = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[m])
                        tasks[m] = asyncio.create_task(agents[m].run())
                        present.add(m)
                        continue
                    if action == "kill":
                        agents[m].party.leave_records = lambda: []  # gone without a word
                    tasks.pop(m).cancel()
                    present.discard(m)
                while set(server.party.roster.members(time.time())) != present:
                    await asyncio.sleep(0.01)
                opened[0] = phase
                present -= {m for action, m in events.get(phase, []) if action == "die_asked"}
            record = await run
            await asyncio.gather(*tasks.values(), return_exceptions=True)
    return record


EVENTS = {
    1: [("join", 0), ("join", 1), ("join", 2)],
    2: [("join", 3), ("join", 4)],  # after phase 1
    3: [("leave", 1), ("kill", 2), ("join", 5)],
    4: [("join", 1)],  # client 1 rejoins
}
MEMBERS = [{0, 1, 2}, {0, 1, 2, 3, 4}, {0, 3, 4, 5}, {0, 1, 3, 4, 5}]


@pytest.mark.parametrize("algorithm", ["fedpne", "dpfedpne"])
def test_clients_join_leave_die_and_rejoin_and_the_replay_is_the_run(algorithm):
    config = _config(algorithm)
    record = asyncio.run(_elastic_run(config, EVENTS))
    phases = membership_of(record.communication)
    assert [set(p.members) for p in phases[:4]] == MEMBERS
    assert all(set(p.members) == MEMBERS[-1] for p in phases[4:])
    assert all(p.asked == p.members == p.reported for p in phases)
    # statistics over the clients that reported, coverage stated: only the killed client's
    # pulls of the phase it was asked in while dead are missing
    coverage = record.regret_coverage
    assert coverage is None or set(coverage["clients"]) <= {2}
    again = replay(config, SEED, phases)
    assert replay_differences(record, again) == []
    assert np.array_equal(record.recommendation, again.recommendation)


def test_a_restarted_server_replays_its_checkpointed_members(tmp_path):
    config = _config("fedpne")
    run_id = run_id_for(config, SEED)
    checkpoint = tmp_path / "ckpt"

    async def main():
        async with MemoryBroker() as broker:
            server = ServerAgent(config, SEED, broker, run_id=run_id, checkpoint=checkpoint)
            first = asyncio.create_task(server.run())
            hosts = [
                ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[m]) for m in (0, 1, 2)
            ]
            tasks = [asyncio.create_task(c.run()) for c in hosts]
            async with asyncio.timeout(60):
                while len(server.phases) < 2:
                    await asyncio.sleep(0.005)
                first.cancel()  # the server process dies after its second phase
                await asyncio.gather(first, return_exceptions=True)
                late = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[3])
                tasks.append(asyncio.create_task(late.run()))
                again = ServerAgent(config, SEED, broker, run_id=run_id, checkpoint=checkpoint)
                record = await again.run()
                await asyncio.gather(*tasks)
        return record, server.run_session.membership[:2]

    record, before = asyncio.run(main())
    phases = membership_of(record.communication)
    assert phases[:2] == before  # the checkpointed phases, as they were
    assert 3 in phases[-1].members
    assert replay_differences(record, replay(config, SEED, phases)) == []


def test_a_client_that_dies_while_asked_and_rejoins_reports_again():
    config = _config("fedpne")
    events = {
        1: [("join", 0), ("join", 1), ("join", 2)],
        2: [("die_asked", 2)],  # asked in phase 2, dead before its report
        4: [("join", 2)],  # back
    }
    record = asyncio.run(_elastic_run(config, events))
    phases = membership_of(record.communication)
    assert 2 in phases[1].asked and 2 not in phases[1].reported
    assert 2 in phases[3].members and 2 in phases[3].reported
    assert all(2 in p.reported for p in phases[3:])
    assert replay_differences(record, replay(config, SEED, phases)) == []


@pytest.mark.parametrize("algorithm", ["fedpne", "dpfedpne"])
def test_a_client_with_its_own_smaller_budget_withdraws_and_leaves(algorithm):
    """Client 1's agent runs with ``[agents] client_budget`` covering phase 1 only: it
    withdraws at phase 2 and leaves (the roster drops it before the final answer); the run
    finishes with the others, and the server expected of it the pulls it made."""
    config = _config(algorithm)
    first = Federation(config, SEED).run().communication["per_phase"][0]["evaluations"]
    own = dataclasses.replace(
        config.agents, client_budget=first // CLIENTS, telemetry_interval_s=0.05
    )
    run_id = run_id_for(config, SEED)
    left_while_running = []

    async def main():
        async with MemoryBroker() as broker:
            server = ServerAgent(config, SEED, broker, run_id=run_id)
            party = server.party
            session = server.run_session
            party.may_open = lambda: (  # the three in, then (once 1 withdrew) its leave
                1 in party.left
                if 1 in session.withdrawn
                else len(party.roster.members(time.time())) >= 3
            )
            run = asyncio.create_task(server.run())
            hosts = [
                ClientAgent(
                    dataclasses.replace(config, agents=own) if m == 1 else config,
                    SEED,
                    broker,
                    run_id=run_id,
                    client_ids=[m],
                )
                for m in (0, 1, 2)
            ]
            tasks = [asyncio.create_task(c.run()) for c in hosts]
            async with asyncio.timeout(60):
                while server.run_session.finished is None and not run.done():
                    if 1 in party.joined and 1 in party.left:
                        left_while_running.append(server.phase)
                        break
                    await asyncio.sleep(0.005)
                record = await run
                await asyncio.gather(*tasks)
        return record, server, hosts[1]

    record, server, host = asyncio.run(main())
    phases = membership_of(record.communication)
    assert left_while_running  # its leave came before the final answer
    assert host.party.hosted.clients[1].withdrawal.phase == 2 == phases[1].phase
    assert 1 in phases[1].reported  # the withdrawal met the barrier
    assert all(1 not in p.members for p in phases[2:]) and len(phases) > 2
    assert host.party.hosted.evaluators[1].used == server.run_session.withdrawn[1].used > 0
    assert record.regret_coverage is None or 1 not in record.regret_coverage["clients"]
    assert phases[1].withdrew == ((1, host.party.hosted.evaluators[1].used),)
    assert replay_differences(record, replay(config, SEED, phases)) == []
