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

from fedxab.agents.checkpoint import ServerCheckpoint
from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import client_agent, host_clients, serve
from fedxab.agents.federation import Federation
from fedxab.agents.ledger_mirror import read_to_end
from fedxab.agents.server import ServerAgent
from fedxab.algorithms.protocol import Finished
from fedxab.broker.base import run_topics
from fedxab.broker.codec import SERVER, Envelope, packb
from fedxab.broker.memory import MemoryBroker
from fedxab.errors import EvaluationError, FedxabError
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


def _published(broker: MemoryBroker, topic: str) -> int:
    """Records on ``topic`` of the embedded broker so far."""
    return len(broker._topic(topic).records)


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
        await _until(lambda: server.party.counts["report_accepted"] == 5)  # phase 1 waits for 5
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
        assert agent.party.session == server.party.signing_session
        assert agent.counts["broadcast_invalid"] >= 3 + len(earlier)


# ---------------------------------------------------------------- restarts and aborts (sessions)
def test_a_client_process_restarted_during_a_later_run_replays_the_earlier_one(tmp_path):
    """A client process restarted while its server serves the job's second run replays the
    first run before it (as ``fedxab client`` does): the server's second-run agent welcomes it
    into the first run's session (and a restarted server keeps a run's session from its
    checkpoint, written before any phase closes), so both runs end with the in-process
    results. Before, it waited forever for a welcome of the first run (test_soak's hang)."""
    config = sim_config(
        "fedpne",
        clients=CLIENTS,
        budget=1500,
        heterogeneity="offset",
        run={"seed": SEED, "repeats": 2},
        agents={"rebroadcast_s": 0.5, "telemetry_timeout_s": 2.0},
    )
    first, second = (run_id_for(config, seed) for seed in config.run.seeds)

    async def main():
        broker = MemoryBroker()
        served = asyncio.create_task(serve(config, broker, checkpoint_dir=tmp_path))
        stays = asyncio.create_task(host_clients(config, broker, [0, 1, 2]))
        gone = client_agent(config, config.run.seeds[0], broker, [3, 4, 5])
        await gone.run()  # the first run only: this process is then "killed"
        second_topic = run_topics("fedxab", second)["broadcast"]
        await _until(lambda: _published(broker, second_topic) > 0)  # the second run is open
        restarted = asyncio.create_task(host_clients(config, broker, [3, 4, 5]))
        async with asyncio.timeout(30):
            return await asyncio.gather(served, stays, restarted)

    results, _, replayed = asyncio.run(main())
    for seed, run in zip(config.run.seeds, results.runs, strict=True):
        assert _without_time(run) == _without_time(Federation(config, seed).run())
    assert len(replayed.runs) == 2  # the restarted process finished both runs
    checkpoint = ServerCheckpoint(tmp_path / f"{first}.ckpt", first)
    checkpoint.load()
    assert len(checkpoint.session) == 32


def test_a_server_keeps_its_session_from_before_its_first_phase_closes(tmp_path):
    """The session is in the checkpoint as soon as the server draws it: a server killed in its
    first phase comes back in the same session (else the client agents welcomed before would
    refuse every broadcast of the new one as a replay, and the run would hang)."""
    config = _config()
    run_id = run_id_for(config, SEED)
    path = tmp_path / f"{run_id}.ckpt"

    async def first_phase_only() -> str:
        broker = MemoryBroker()
        server = ServerAgent(config, SEED, broker, run_id=run_id, checkpoint=path)
        task = asyncio.create_task(server.run())
        await _until(lambda: server.party.counts["broadcast_repeated"] > 0)  # phase 1 is open
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return server.party.signing_session

    session = asyncio.run(first_phase_only())
    checkpoint = ServerCheckpoint(path, run_id)
    assert checkpoint.load() == [] and checkpoint.session == session


def test_a_client_welcomed_after_the_abort_takes_it_and_every_process_stops():
    """A client's objective returns NaN in phase 1; a client agent that starts only after the
    server published its abort is still welcomed (the server stays until every client stopped)
    and stops with the server's line, as does the failing client's agent; then the server
    stops. Before, the server left at once and the late agent waited forever for a welcome
    (test_user_objectives' NaN test on the dev broker, when a client process started slowly)."""
    config = _config()
    run_id = run_id_for(config, SEED)

    def objective(x, client_id):
        return float("nan") if client_id == 4 else -float(np.sum((np.asarray(x) - 0.3) ** 2))

    async def main():
        broker = MemoryBroker()
        server = ServerAgent(config, SEED, broker, run_id=run_id)
        early = ClientAgent(
            config, SEED, broker, run_id=run_id, client_ids=[0, 1, 2, 3, 4], functions=objective
        )
        tasks = [asyncio.create_task(a.run()) for a in (server, early)]
        topic = run_topics("fedxab", run_id)["broadcast"]
        await _until(lambda: server.party.failure is not None and _published(broker, topic) >= 2)
        late = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[5], functions=objective)
        tasks.append(asyncio.create_task(late.run()))
        async with asyncio.timeout(20):
            return await asyncio.gather(*tasks, return_exceptions=True), server

    (stopped, failed, late), server = asyncio.run(main())
    line = "client 4 failed at phase 1"
    assert isinstance(stopped, FedxabError) and line in str(stopped)
    assert isinstance(failed, EvaluationError) and "client 4" in str(failed)
    assert isinstance(late, FedxabError) and "the server stopped the run" in str(late)
    assert line in str(late)
    assert server.party.stopped == set(range(CLIENTS))
