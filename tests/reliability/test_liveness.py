"""Liveness you can see, on the embedded broker: the server names the clients an open phase
waits for, and a key that is not the server's is named, with its fingerprint, by both sides.
(The same faults with real processes on the dev broker: tests/integration/test_faults.py.)"""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from config_factory import sim_config

from fedxab.agents.client import ClientAgent
from fedxab.agents.server import ServerAgent
from fedxab.broker.memory import MemoryBroker
from fedxab.errors import FedxabError
from fedxab.run.identity import run_id_for
from fedxab.security import agents as security_agents
from fedxab.security.keys import generate_keys, load_key


def _config(**sections):
    return sim_config(clients=4, budget=300, **sections)


def test_the_server_names_the_clients_a_phase_waits_for(caplog):
    config = _config(agents={"status_interval_s": 0.2, "rebroadcast_s": 0.5})
    run_id = run_id_for(config, 0)

    async def main() -> None:
        broker = MemoryBroker()
        server = ServerAgent(config, 0, broker, run_id=run_id)
        agent = ClientAgent(config, 0, broker, run_id=run_id, client_ids=[0, 1, 3])
        tasks = [asyncio.create_task(server.run()), asyncio.create_task(agent.run())]
        await asyncio.sleep(1.0)  # client 2 never joins: phase 1 waits
        assert not any(task.done() for task in tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    with caplog.at_level(logging.WARNING, logger="fedxab.agents.server"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if "has waited" in r.getMessage()]
    assert len(lines) >= 3  # every 0.2 s, at default verbosity (a warning)
    assert re.search(r"phase 1 has waited \d+ s for 1 of 4 clients; never joined: 2;", lines[-1])
    assert "without [agents] phase_deadline_s" in lines[-1]


@pytest.fixture
def two_key_sets(tmp_path):
    generate_keys(4, tmp_path / "server")
    generate_keys(4, tmp_path / "wrong")
    return tmp_path / "server", tmp_path / "wrong"


def test_a_wrong_key_is_named_with_its_fingerprint_by_server_and_client(
    two_key_sets, caplog, monkeypatch
):
    """Named once its records keep failing for WRONG_KEY_AFTER_S (10 s in a deployment; 1 s
    here, and 0.5 s for the server, which must name it before the client agent stops)."""
    monkeypatch.setattr(security_agents, "WRONG_KEY_AFTER_S", 1.0)
    server_keys, wrong_keys = two_key_sets
    agents = {"rebroadcast_s": 0.05, "status_interval_s": 60, "heartbeat_s": 0.1}
    config = _config(agents=agents, security={"keys_dir": str(server_keys), "sign": True})
    stray = _config(agents=agents, security={"keys_dir": str(wrong_keys), "sign": True})
    run_id = run_id_for(config, 0)

    async def main() -> None:
        broker = MemoryBroker()
        server = ServerAgent(config, 0, broker, run_id=run_id)
        server.party.keys.after_s = 0.5
        good = ClientAgent(config, 0, broker, run_id=run_id, client_ids=[0, 1, 2])
        wrong = ClientAgent(stray, 0, broker, run_id=run_id, client_ids=[3])
        tasks = [asyncio.create_task(a.run()) for a in (server, good)]
        try:
            await asyncio.wait_for(wrong.run(), 10)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    with pytest.raises(FedxabError) as caught:
        asyncio.run(main())
    theirs = load_key(wrong_keys / "client-3.key").fingerprint
    ours = load_key(server_keys / "client-3.key").fingerprint
    assert theirs != ours
    assert f"with client 3's key (fingerprint {theirs})" in str(caught.value)
    assert "is not the server's" in str(caught.value)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(
        "message(s) from client 3 failed verification" in e and f"fingerprint {ours}" in e
        for e in errors
    ), errors


def test_a_fingerprint_names_a_key_and_reveals_nothing_of_it(tmp_path):
    generate_keys(2, tmp_path)
    first, second = (load_key(tmp_path / f"client-{m}.key") for m in (0, 1))
    assert re.fullmatch(r"[0-9a-f]{16}", first.fingerprint)
    assert first.fingerprint == load_key(tmp_path / "client-0.key").fingerprint
    assert first.fingerprint != second.fingerprint
    assert first.fingerprint not in first.reveal().hex()
