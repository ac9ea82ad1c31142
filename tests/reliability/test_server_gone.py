"""A client agent whose server has ended stops with a one-line error within ``[agents]
server_silence_s``, instead of waiting for the server's next record forever.

Seen at 10,000 clients with ``participation = 0.1`` on the dev broker: the server stopped with
"lost records" and a client process went on waiting. Reproduced here in one process on the
in-memory broker: a broker that loses every final answer (the server gives up on the clients
after ``telemetry_timeout_s`` and ends), and a server that ends mid-run (its task cancelled, as
a process killed). The server publishes at least every ``rebroadcast_s`` while it runs
(fedxab.agents.waits.keep_alive), so a client waiting longer than that for a live server (a
phase kept open by a client that starts late) goes on waiting."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from config_factory import sim_config

from fedxab.agents.client import ClientAgent
from fedxab.agents.federation import Federation
from fedxab.agents.server import ServerAgent
from fedxab.agents.waits import keep_alive, within
from fedxab.algorithms.protocol import Finished
from fedxab.algorithms.registry import decode_broadcast
from fedxab.broker.codec import Envelope
from fedxab.broker.memory import MemoryBroker
from fedxab.errors import ConfigError, FedxabError

SILENCE_S = 2.0
AGENTS = {"rebroadcast_s": 0.2, "telemetry_timeout_s": 1.0, "server_silence_s": SILENCE_S}
CONFIG = sim_config(clients=4, budget=200, agents=AGENTS)
RUN_ID = "run-gone"
STOPS_WITHIN_S = SILENCE_S + 3.0  # the limit, plus the event loop's slack on a loaded machine


class LosesFinalAnswers(MemoryBroker):
    """Loses every final answer the server publishes (the records a client never saw)."""

    async def publish(self, topic: str, key: str | None, value: bytes) -> None:
        if topic.endswith(".broadcast"):
            env = Envelope.decode(value)
            body = decode_broadcast("fedpne", env.body()) if env.kind == "broadcast" else None
            if isinstance(body, Finished):
                return
        await super().publish(topic, key, value)


async def _stopped(client: asyncio.Task, since: float) -> tuple[str, float]:
    """The client's error line and how long after ``since`` it came."""
    async with asyncio.timeout(30):  # (before the fix: still waiting here)
        with pytest.raises(FedxabError) as info:
            await client
    return str(info.value), time.monotonic() - since


def test_a_client_whose_final_answer_is_lost_stops_once_the_server_has_ended():
    async def main():
        async with LosesFinalAnswers() as broker:
            server = ServerAgent(CONFIG, 0, broker, run_id=RUN_ID)
            agent = ClientAgent(CONFIG, 0, broker, run_id=RUN_ID, client_ids=[0, 1, 2, 3])
            client = asyncio.ensure_future(agent.run())
            async with asyncio.timeout(60):
                await server.run()
            return await _stopped(client, time.monotonic())

    line, took = asyncio.run(main())
    assert line.startswith(f"run {RUN_ID}: no record from the server for 2 s after phase ")
    assert "server_silence_s" in line and "\n" not in line
    assert took < STOPS_WITHIN_S


def test_a_client_whose_server_ended_mid_run_stops():
    async def main():
        async with MemoryBroker() as broker:
            server = ServerAgent(CONFIG, 0, broker, run_id=RUN_ID)
            agent = ClientAgent(CONFIG, 0, broker, run_id=RUN_ID, client_ids=[0, 1, 2, 3])
            serving = asyncio.ensure_future(server.run())
            client = asyncio.ensure_future(agent.run())
            async with asyncio.timeout(30):
                while not server.phases:  # the first phase closed
                    await asyncio.sleep(0.005)
            serving.cancel()  # the server ends (a process killed, or its broker lost records)
            await asyncio.gather(serving, return_exceptions=True)
            return await _stopped(client, time.monotonic())

    line, took = asyncio.run(main())
    assert "no record from the server for 2 s after phase" in line
    assert took < STOPS_WITHIN_S


class CountsKinds(MemoryBroker):
    """Counts the kinds of the records published on the broadcast topic."""

    kinds: Counter[str]

    async def publish(self, topic: str, key: str | None, value: bytes) -> None:
        if topic.endswith(".broadcast"):
            self.kinds[Envelope.decode(value).kind] += 1
        await super().publish(topic, key, value)


def test_a_client_waiting_longer_than_the_limit_for_a_live_server_goes_on():
    """Client 0 waits for phase 2 while the other clients' agents start one by one, every
    half ``rebroadcast_s``: phase 1 makes progress (no stalled phase published again) and stays
    open longer than the limit, and the server's signs of life keep client 0 waiting."""
    clients, every_s = 32, AGENTS["rebroadcast_s"] / 2
    config = sim_config(clients=clients, budget=200, agents=AGENTS)
    assert (clients - 1) * every_s > 1.5 * SILENCE_S

    async def main():
        async with CountsKinds() as broker:
            broker.kinds = Counter()
            server = ServerAgent(config, 0, broker, run_id=RUN_ID)
            agents = [
                ClientAgent(config, 0, broker, run_id=RUN_ID, client_ids=[m])
                for m in range(clients)
            ]
            tasks = [asyncio.ensure_future(server.run()), asyncio.ensure_future(agents[0].run())]
            for agent in agents[1:]:
                await asyncio.sleep(every_s)
                tasks.append(asyncio.ensure_future(agent.run()))
            async with asyncio.timeout(60):
                record, *finals = await asyncio.gather(*tasks)
            return record, finals, broker.kinds

    record, finals, kinds = asyncio.run(main())
    assert all(isinstance(final, Finished) for final in finals)
    assert record.recommendation.tolist() == Federation(config, 0).run().recommendation.tolist()
    assert kinds["alive"] >= 1  # the server's signs of life during phase 1


def test_keep_alive_publishes_only_after_interval_of_silence():
    class Party:  # what keep_alive reads of a server party
        alive_interval = 0.2
        last_published = time.monotonic()

        def alive_record(self) -> bytes:
            self.last_published = time.monotonic()
            return b"alive"

    class Broker:
        published: list[tuple[str, bytes]] = []  # noqa: RUF012

        async def publish(self, topic: str, key: str | None, value: bytes) -> None:
            self.published.append((topic, value))

    party, broker = Party(), Broker()

    async def main():
        task = asyncio.ensure_future(keep_alive(broker, "t", party))  # type: ignore[arg-type]
        await asyncio.sleep(0.5)  # silent: a sign of life every 0.2 s
        count = len(broker.published)
        for _ in range(10):  # another publication every 50 ms: no sign of life needed
            party.last_published = time.monotonic()
            await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return count

    count = asyncio.run(main())
    assert 1 <= count <= 3  # 2, give or take the event loop's lateness
    assert broker.published == [("t", b"alive")] * count


def test_within_passes_records_on_and_names_the_silence():
    async def records():
        yield 1
        await asyncio.sleep(0.01)
        yield 2
        await asyncio.sleep(10)

    async def main():
        seen = []
        with pytest.raises(FedxabError, match=r"^silent 0\.2 s$"):
            async for item in within(records(), 0.2, lambda s: f"silent {s} s"):
                seen.append(item)
        return seen

    assert asyncio.run(main()) == [1, 2]


def test_a_limit_not_above_rebroadcast_s_is_refused():
    with pytest.raises(ConfigError, match=r"agents\.server_silence_s: must exceed rebroadcast_s"):
        sim_config(agents={"rebroadcast_s": 5.0, "server_silence_s": 5.0})
    assert sim_config().agents.server_silence == 120.0  # 12 x rebroadcast_s by default
