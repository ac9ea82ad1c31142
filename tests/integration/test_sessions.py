"""Every record is bound to one execution (issue 39, items 1 and 2), on the embedded broker: an
earlier execution's broadcasts and final answer (same run id, another namespace), replayed on
this run's broadcast topic mid-run, and three forged final answers published before the server's
first broadcast, change nothing: the client agents count and drop them, and the run ends with the
in-process results, signed (HMAC) and unsigned. (The same with real processes on the dev broker:
tests/integration/test_sessions_live.py.)"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest
from config_factory import sim_config

from fedxab.agents.client import ClientAgent
from fedxab.agents.federation import Federation
from fedxab.agents.server import ServerAgent
from fedxab.algorithms.protocol import Finished
from fedxab.broker.base import run_topics
from fedxab.broker.codec import SERVER, Envelope, packb
from fedxab.broker.memory import MemoryBroker
from fedxab.privacy.mirror import read_to_end
from fedxab.run.identity import run_id_for
from fedxab.security.keys import generate_keys
from fedxab.security.signing import SIG_BYTES, SignedEnvelope

SEED = 5
CLIENTS = 6


def _config(keys_dir=None):
    extra = {} if keys_dir is None else {"security": {"keys_dir": str(keys_dir), "sign": True}}
    agents = {"rebroadcast_s": 0.5, "telemetry_timeout_s": 2.0}
    return sim_config(
        "fedpne", clients=CLIENTS, budget=3000, heterogeneity="offset", agents=agents, **extra
    )


def _without_time(record) -> dict:
    d = record.to_dict()
    d.pop("wall_time_s")
    return d


def forged_final_answers(run_id: str, n_clients: int, signed: bool) -> list[bytes]:
    """Three well-formed final answers of phase 1 (the phase a client is in after its first
    broadcast) in no session, and in two random ones; signed: with random signatures."""
    out = []
    for session in ("", os.urandom(16).hex(), os.urandom(16).hex()):
        body = packb(Finished(1, np.full(1, 0.123)).to_wire())
        env = Envelope(run_id, "broadcast", 1, SERVER, "broadcast:1", body, session=session)
        value = env.encode()
        if signed:
            sig = os.urandom(SIG_BYTES * n_clients)
            value = SignedEnvelope(value, sig, session).encode()
        out.append(value)
    return out


async def _until(condition, timeout=20.0):
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


@pytest.fixture(params=["unsigned", "hmac"])
def config(request, tmp_path):
    if request.param == "unsigned":
        return _config()
    generate_keys(CLIENTS, tmp_path / "keys")
    return _config(tmp_path / "keys")


def test_replayed_and_forged_broadcasts_of_other_executions_change_nothing(config):
    signed = config.security is not None
    run_id = run_id_for(config, SEED)

    async def earlier_execution() -> list[bytes]:
        broker = MemoryBroker()
        server = ServerAgent(config, SEED, broker, run_id=run_id, namespace="earlier")
        agent = ClientAgent(
            config, SEED, broker, run_id=run_id, client_ids=list(range(CLIENTS)),
            namespace="earlier",
        )  # fmt: skip
        await asyncio.gather(server.run(), agent.run())
        topic = run_topics("earlier", run_id)["broadcast"]
        return [r.value for r in await read_to_end(broker, topic, settle_s=0.05)]

    earlier = asyncio.run(earlier_execution())
    assert len(earlier) >= 3  # phases 1, 2, ... and the final answer

    async def main():
        broker = MemoryBroker()
        topic = run_topics("fedxab", run_id)["broadcast"]
        first = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[0, 1, 2, 3, 4])
        tasks = [asyncio.create_task(first.run())]
        for value in forged_final_answers(run_id, CLIENTS, signed):
            await broker.publish(topic, None, value)  # before the server's first broadcast
        await asyncio.sleep(0.2)
        # (resume: the forged records on its topic do not make the server refuse to start)
        server = ServerAgent(config, SEED, broker, run_id=run_id, resume=True)
        tasks.append(asyncio.create_task(server.run()))
        await _until(lambda: server.counts["report_accepted"] == 5)  # phase 1 waits for 5
        for value in earlier:  # the earlier execution's next phases and final answer
            await broker.publish(topic, None, value)
        await _until(lambda: first.counts["broadcast_invalid"] >= 3 + len(earlier))
        await asyncio.sleep(0.2)
        assert not tasks[0].done()  # the first agent took none of them
        last = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[5])
        tasks.append(asyncio.create_task(last.run()))
        finished, record, _ = await asyncio.gather(*tasks)
        return finished, record, first, last, server

    finished, record, first, last, server = asyncio.run(main())
    assert _without_time(record) == _without_time(Federation(config, SEED).run())
    assert np.array_equal(finished.recommendation, record.recommendation)
    for agent in (first, last):
        assert agent.session == server.session
        assert agent.counts["broadcast_invalid"] >= 3 + len(earlier)
