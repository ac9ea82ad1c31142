"""Server and client agents on the embedded broker: same results as in-process, under faults too.

Every test compares a run on the MemoryBroker with the in-process runner for the same config and
seed; the results must be identical (regret curves, recommendation, communication counts) except
the wall time.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from cli_procs import served_under_local_dp
from config_factory import sim_config

from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import run_id_for, run_on_broker
from fedxab.agents.federation import Federation
from fedxab.agents.server import RunConflictError, ServerAgent
from fedxab.algorithms.protocol import Finished
from fedxab.algorithms.registry import decode_broadcast
from fedxab.broker.base import run_topics
from fedxab.broker.codec import Envelope, client_sender, packb
from fedxab.broker.faults import FaultyBroker
from fedxab.broker.memory import MemoryBroker
from fedxab.config import config_from_dict
from fedxab.results import RunRecord
from fedxab.run.client_party import ClientParty
from fedxab.run.job import client_slices

SEED = 3


def _config(
    algorithm: str = "fedpne", heterogeneity: str = "offset", clients: int = 6, budget=800, **agents
):
    return sim_config(
        algorithm, clients=clients, budget=budget, heterogeneity=heterogeneity, agents=agents
    )


def _without_time(record) -> dict:
    d = record.to_dict()
    d.pop("wall_time_s")
    return d


def _in_process(config) -> dict:
    return _without_time(Federation(config, SEED).run())


@pytest.mark.parametrize(
    ("algorithm", "heterogeneity"),
    [
        ("fedpne", "offset"),
        ("pfpne", "shift"),
        ("parallel", "none"),
        ("fed1ucb", "offset"),
        ("local-hct", "shift"),
        ("central-hct", "offset"),
    ],
)
def test_memory_broker_gives_the_in_process_results(algorithm, heterogeneity):
    config = _config(algorithm, heterogeneity, budget=400)
    record = asyncio.run(run_on_broker(config, SEED, MemoryBroker(), hosts=2))
    assert _without_time(record) == _in_process(config)


def test_the_agents_of_one_process_share_one_client_family(monkeypatch):
    """``run_on_broker`` draws the simulated family once for its server and client agents (as
    the in-process runner does for its server and clients), not once per agent."""
    from fedxab.run import assembly

    drawn = []
    make_family = assembly.make_family
    monkeypatch.setattr(
        assembly, "make_family", lambda *args: drawn.append(1) or make_family(*args)
    )
    config = _config(budget=400)
    record = asyncio.run(run_on_broker(config, SEED, MemoryBroker(), hosts=3))
    assert len(drawn) == 1
    assert _without_time(record) == _in_process(config)


def test_client_slices_cover_every_client_once():
    assert client_slices(10, 3) == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert client_slices(2, 5) == [[0], [1]]


def test_run_id_depends_on_the_experiment_and_seed_not_on_the_broker():
    a = _config()
    b = config_from_dict({**a.to_dict(), "broker": {"url": "kafka://127.0.0.1:1"}})
    assert run_id_for(a, 1) == run_id_for(b, 1) != run_id_for(a, 2)
    assert run_id_for(a, 1) != run_id_for(_config(budget=801), 1)


def test_every_message_delivered_twice_changes_nothing():
    config = _config()
    broker = FaultyBroker(MemoryBroker(), duplicate=1.0, seed=1)
    record = asyncio.run(run_on_broker(config, SEED, broker, hosts=2))
    assert broker.injected["duplicated"] > 0
    assert _without_time(record) == _in_process(config)


@pytest.mark.parametrize("kinds", [("report",), ("broadcast", "report", "control")])
def test_reordered_messages_change_nothing(kinds):
    config = _config(clients=8)
    broker = FaultyBroker(MemoryBroker(), kinds=kinds, reorder_window=5, duplicate=0.3, seed=2)
    record = asyncio.run(run_on_broker(config, SEED, broker, hosts=3))
    assert broker.injected["reordered"] > 0
    assert _without_time(record) == _in_process(config)


async def _agents(config, broker, checkpoint=None, hosts=2):
    run_id = run_id_for(config, SEED)
    server = ServerAgent(config, SEED, broker, run_id=run_id, checkpoint=checkpoint)
    clients = [
        ClientAgent(config, SEED, broker, run_id=run_id, client_ids=ids)
        for ids in client_slices(config.federation.clients, hosts)
    ]
    return run_id, server, clients


async def _until(condition, timeout=10.0):
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.001)


def test_server_killed_after_a_phase_resumes_from_its_checkpoint(tmp_path):
    config = _config(budget=3000)
    checkpoint = tmp_path / "server.ckpt"

    async def main():
        broker = MemoryBroker()
        run_id, server, clients = await _agents(config, broker, checkpoint)
        client_tasks = [asyncio.create_task(c.run()) for c in clients]
        first = asyncio.create_task(server.run())
        await _until(lambda: len(server.phases) >= 2)
        first.cancel()  # the server process dies after its second phase
        await asyncio.gather(first, return_exceptions=True)
        assert checkpoint.exists()
        restarted = ServerAgent(config, SEED, broker, run_id=run_id, checkpoint=checkpoint)
        record = await restarted.run()
        await asyncio.gather(*client_tasks)
        return record, len(server.phases)

    record, phases_before = asyncio.run(main())
    assert phases_before >= 2
    assert len(record.communication["per_phase"]) == len(
        _in_process(config)["communication"]["per_phase"]
    )
    assert _without_time(record) == _in_process(config)


def test_client_killed_mid_run_and_restarted_resumes_from_the_current_phase():
    config = _config(budget=3000)

    async def main():
        broker = MemoryBroker()
        run_id, server, clients = await _agents(config, broker)
        server_task = asyncio.create_task(server.run())
        tasks = [asyncio.create_task(c.run()) for c in clients]
        await _until(lambda: len(server.phases) >= 2)
        tasks[1].cancel()  # the second client host dies while a phase is open
        await asyncio.gather(tasks[1], return_exceptions=True)
        phase_at_kill = server.phase
        again = ClientAgent(
            config,
            SEED,
            broker,
            run_id=run_id,
            client_ids=clients[1].clients.keys() and list(clients[1].clients),
        )
        tasks[1] = asyncio.create_task(again.run())
        record = await server_task
        await asyncio.gather(*tasks)
        return record, again, phase_at_kill

    record, again, phase_at_kill = asyncio.run(main())
    assert (
        again.counts["broadcasts_replayed"] >= phase_at_kill - 2
    )  # past phases: replayed silently
    assert _without_time(record) == _in_process(config)


def _bad_reports(
    config, run_id: str, phase: int, session: str
) -> list[tuple[str | None, bytes, str]]:
    """(record key, value, expected outcome) of hostile or broken reports (of ``session``,
    this execution's, unless they say otherwise)."""
    n = config.federation.clients

    def report(means: np.ndarray, client: int = 0) -> bytes:
        body = {"kind": "fedpne.report", "phase": phase, "client": client, "complete": True}
        return packb({**body, "means": means})

    def env(**changes):
        fields = dict(
            run_id=run_id,
            kind="report",
            phase=phase,
            sender=client_sender(0),
            msg_id="x",
            payload=report(np.array([0.5])),
            session=session,
        )
        fields.update(changes)
        return Envelope(**fields).encode()

    return [
        ("0", b"\x93garbage", "invalid"),
        ("0", env(run_id="another-run"), "invalid"),
        (str(n), env(sender=client_sender(n)), "invalid"),  # unknown client
        ("1", env(), "invalid"),  # key of client 1, envelope of client 0
        ("0", env(payload=report(np.array([math.nan]))), "invalid"),  # NaN statistic
        ("0", env(payload=report(np.array([math.inf]))), "invalid"),  # infinite statistic
        # not one mean per active node, from the client the phase still waits for
        ("5", env(sender=client_sender(5), payload=report(np.zeros(1000), 5)), "invalid"),
        ("0", env(phase=phase + 5), "invalid"),  # a future phase
        ("0", env(phase=max(phase - 1, 0)), "late"),  # a past phase
        ("0", env(kind="join"), "invalid"),
        ("0", env(session="0" * 32), "invalid"),  # another execution's
    ]


def test_bad_reports_are_rejected_counted_and_change_nothing():
    config = _config(budget=3000)

    async def main():
        broker = MemoryBroker()
        run_id, server, _ = await _agents(config, broker)
        topic = run_topics("fedxab", run_id)["report"]
        first = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[0, 1, 2, 3, 4])
        tasks = [asyncio.create_task(server.run()), asyncio.create_task(first.run())]
        # phase 1 waits for client 5
        await _until(lambda: server.party.counts["report_accepted"] == 5)
        bad = _bad_reports(config, run_id, server.phase, server.party.signing_session)
        for key, value, _ in bad:
            await broker.publish(topic, key, value)
        last = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[5])
        tasks.append(asyncio.create_task(last.run()))
        record, *_ = await asyncio.gather(*tasks)
        return record, server, bad

    record, server, bad = asyncio.run(main())
    expected = {"invalid": 0, "late": 0}
    for _, _, outcome in bad:
        expected[outcome] += 1
    assert expected == {"invalid": 10, "late": 1}
    assert server.party.counts["report_invalid"] == expected["invalid"]
    assert server.party.counts["report_late"] == expected["late"]
    assert _without_time(record) == _in_process(config)


def test_a_client_gone_for_good_is_replaced_by_the_quorum_after_the_deadline():
    config = _config(
        budget=2000, clients=6, phase_deadline_s=0.2, quorum=0.8, telemetry_timeout_s=0.5
    )

    async def main():
        broker = MemoryBroker()
        run_id, server, _ = await _agents(config, broker)
        present = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[0, 1, 2, 3, 4])
        tasks = [asyncio.create_task(present.run())]
        record = await server.run()
        await asyncio.gather(*tasks)
        return record

    record = asyncio.run(main())
    comm = record.communication
    assert all(p["reports_accepted"] == 5 for p in comm["per_phase"])
    assert record.evaluations == 5 * 2000  # client 5 never pulled
    assert np.isfinite(record.simple_regret)
    # the curves count five clients' pulls, and the record says so
    assert record.regret_coverage == {
        "pulls_expected": 6 * 2000,
        "pulls_received": 5 * 2000,
        "clients": [5],
        "fewest_clients_per_round": 5,
    }


def test_a_second_start_of_a_finished_run_is_refused_and_its_checkpoint_replays(tmp_path):
    config = _config(budget=400)

    async def main():
        broker = MemoryBroker()
        first = await run_on_broker(config, SEED, broker, hosts=2, checkpoint_dir=tmp_path)
        run_id = run_id_for(config, SEED)
        with pytest.raises(RunConflictError, match="another \\[broker\\] namespace"):
            await ServerAgent(config, SEED, broker, run_id=run_id).run()
        (path,) = tmp_path.glob("*.ckpt")
        again = await ServerAgent(config, SEED, broker, run_id=run_id, checkpoint=path).run()
        return first, again

    first, again = asyncio.run(main())
    assert _without_time(first) == _without_time(again) == _in_process(config)


def test_lost_broadcasts_and_reports_are_recovered_by_rebroadcasting_a_stalled_phase():
    config = _config(rebroadcast_s=0.05)
    broker = FaultyBroker(MemoryBroker(), kinds=("broadcast", "report"), drop=0.2, seed=5)

    async def main():
        _, server, clients = await _agents(config, broker)
        tasks = [asyncio.create_task(c.run()) for c in clients]
        record = await asyncio.wait_for(server.run(), 30)
        # a lost Finished would leave clients waiting: they end with the repeated ones, or here
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return record, server

    record, server = asyncio.run(main())
    assert broker.injected["dropped"] > 0
    assert server.party.counts["broadcast_repeated"] > 0
    assert _without_time(record) == _in_process(config)


class Loses(MemoryBroker):
    """Loses every record for which ``lose(topic, envelope, lost so far)`` holds."""

    def __init__(self, lose) -> None:
        super().__init__()
        self.lose = lose
        self.lost = 0

    async def publish(self, topic: str, key: str | None, value: bytes) -> None:
        if self.lose(topic, Envelope.decode(value), self.lost):
            self.lost += 1
            return
        await super().publish(topic, key, value)


def first_final_answer(algorithm: str):
    """The first copy of the server's final answer."""

    def lose(topic: str, env: Envelope, lost: int) -> bool:
        return (
            topic.endswith(".broadcast")
            and not lost
            and isinstance(decode_broadcast(algorithm, env.body()), Finished)
        )

    return lose


def test_lost_telemetry_leaves_the_results_marked_incomplete_not_silently_short():
    config = _config(telemetry_timeout_s=0.5)
    broker = Loses(lambda topic, env, lost: env.kind == "telemetry" and env.client_id == 2)

    async def main():
        _, server, clients = await _agents(config, broker)
        record, *_ = await asyncio.gather(server.run(), *(c.run() for c in clients))
        return record

    record = asyncio.run(main())
    assert broker.lost > 0
    assert record.regret_coverage == {
        "pulls_expected": 6 * 800,
        "pulls_received": 5 * 800,
        "clients": [2],
        "fewest_clients_per_round": 5,
    }
    full = Federation(config, SEED).run()
    assert full.regret_coverage is None  # in process every pull is counted
    assert record.evaluations == 5 * 800 < full.evaluations
    assert RunRecord.from_dict(record.to_dict()).regret_coverage == record.regret_coverage


@pytest.mark.parametrize("algorithm", ["fedpne", "dpfedpne"])
def test_a_lost_final_answer_is_repeated_until_every_client_has_left(algorithm):
    """The clients' telemetry is complete before the final answer: without the clients' leave
    messages the server would stop there, and a client that lost the answer would wait forever."""
    data = _config(rebroadcast_s=0.05, telemetry_timeout_s=20, telemetry_interval_s=1e-6).to_dict()
    if algorithm == "dpfedpne":  # the clients' ledger end markers come with the final answer
        data["algorithm"] = {"name": algorithm, "epsilon": 0.5, "privacy_delta": 1e-3}
        data["run"]["budget"] = 20_000
        data["privacy"] = {}
    config = config_from_dict(data)
    broker = Loses(first_final_answer(algorithm))

    async def main():
        _, server, clients = await _agents(config, broker)
        async with asyncio.timeout(15):
            record, *_ = await asyncio.gather(server.run(), *(c.run() for c in clients))
        return record, server

    record, server = asyncio.run(main())
    assert broker.lost == 1 and server.party.counts["broadcast_repeated"] >= 1
    assert server.party.left == set(range(6))
    got, expected = _without_time(record), _in_process(config)
    if algorithm == "dpfedpne":  # local DP: the clients' outcomes and regret stay with them
        got, expected = served_under_local_dp(got, expected)
    assert got == expected


def _where_answers_run(monkeypatch, slow_answer: int | None = None) -> list[str]:
    """Records where each ``ClientParty.answer_all`` of a client agent runs: ``"loop"`` (the
    main thread, the event loop's) or ``"thread"``; the ``slow_answer``-th (1-based) first
    sleeps 0.6 s."""
    import threading
    import time

    where: list[str] = []
    answer_all = ClientParty.answer_all

    def recording(self, broadcast):
        main = threading.current_thread() is threading.main_thread()
        where.append("loop" if main else "thread")
        if len(where) == slow_answer:
            time.sleep(0.6)
        return answer_all(self, broadcast)

    monkeypatch.setattr(ClientParty, "answer_all", recording)
    return where


@pytest.mark.parametrize(
    ("inline_answer_s", "expected"),
    [
        (3600.0, ["thread", "loop", "loop", "loop"]),  # fast answers: on the loop after the first
        (0.0, ["thread"] * 4),  # 0: always in a thread
    ],
)
def test_a_client_agent_answers_on_its_loop_while_its_answers_are_fast(
    monkeypatch, inline_answer_s, expected
):
    """``[agents] inline_answer_s``: the first answer goes to the executor thread; later ones
    run on the event loop while the last one took less than the limit. Where an answer runs
    changes nothing in the results."""
    where = _where_answers_run(monkeypatch)
    config = _config(inline_answer_s=inline_answer_s)
    record = asyncio.run(run_on_broker(config, SEED, MemoryBroker()))
    assert where[:4] == expected and len(where) == record.communication["rounds"]
    assert _without_time(record) == _in_process(config)


def test_a_slow_answer_sends_the_next_one_back_to_the_thread(monkeypatch):
    """An answer that took at least ``inline_answer_s`` (a slow black box) makes the next one
    run in the thread again, where it cannot stop the heartbeats and the broker client."""
    where = _where_answers_run(monkeypatch, slow_answer=3)
    config = _config(inline_answer_s=0.5)
    record = asyncio.run(run_on_broker(config, SEED, MemoryBroker()))
    assert where[:5] == ["thread", "loop", "loop", "thread", "loop"]
    assert _without_time(record) == _in_process(config)
