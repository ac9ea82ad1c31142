"""Federations on a real Kafka-protocol broker (the dev broker), in one process and in several.

Each run must give exactly the in-process runner's results for the same config and seed (wall
time aside), including when a client process or the server process is killed with SIGKILL in the
middle of the run and started again.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from cli_procs import ProcessFederation, log_line, until, without_time
from outage_proxy import OutageProxy

from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import run_id_for, run_on_broker
from fedxab.agents.federation import Federation
from fedxab.agents.server import ServerAgent
from fedxab.broker.devbroker import DevBroker, free_port
from fedxab.broker.kafka import KafkaBroker
from fedxab.config import config_from_dict
from fedxab.security.keys import generate_keys

SEED = 2
PROCESS_TIMEOUT = 120  # seconds a whole multi-process run may take before the test fails

CONFIG = """
[run]
seed = 4
repeats = 1
budget = 3000
output = "{output}"

[objective]
name = "garland"

[algorithm]
name = "fedpne"

[federation]
clients = 8

[security]  # Kafka runs sign by default: the keys of every client
keys_dir = "{keys}"
"""


@pytest.mark.parametrize("algorithm", ["pfpne", "pfhct"])
def test_kafka_in_one_process_gives_the_in_process_results(dev_broker, algorithm):
    config = config_from_dict(
        {
            "run": {"budget": 2000},
            "objective": {"name": "himmelblau"},
            "algorithm": {"name": algorithm},
            "federation": {"clients": 5, "heterogeneity": "shift"},
        }
    )

    async def main():
        async with KafkaBroker(dev_broker.address) as broker:
            return await asyncio.wait_for(run_on_broker(config, 1, broker, hosts=2), 60)

    record = asyncio.run(main())
    expected = Federation(config, 1).run().to_dict()
    assert without_time(record.to_dict()) == without_time(expected)


def test_telemetry_of_long_phases_fits_in_kafka_messages(dev_broker):
    """Two clients, T = 200,000: a late Fed-PNE phase has some 10^5 pulls per client, whose
    regret terms (16 bytes each) would exceed Kafka's default 1 MB message limit in one message.
    Telemetry travels in pieces; the results are the in-process run's."""
    config = config_from_dict(
        {
            "run": {"budget": 200_000},
            "objective": {"name": "garland"},
            "algorithm": {"name": "fedpne"},
            "federation": {"clients": 2},
        }
    )

    async def main():
        async with KafkaBroker(dev_broker.address) as broker:
            return await asyncio.wait_for(run_on_broker(config, 1, broker), 120)

    record = asyncio.run(main())
    phases = record.to_dict()["communication"]["per_phase"]
    assert max(p["evaluations"] for p in phases) / 2 > 2**20 / 16  # > 1 MiB of terms per client
    expected = Federation(config, 1).run().to_dict()
    assert without_time(record.to_dict()) == without_time(expected)


def test_a_broker_outage_mid_run_changes_nothing():
    """A broker restart as Apache Kafka does it (data kept): every connection dropped and the
    broker unreachable for 3 s after the second phase; agents reconnect, a stalled phase is
    broadcast again, and the results are those of the in-process run.

    (The dev broker's storage is in memory, so restarting its process would also lose every
    topic; the outage is made by a forwarder between the agents and the broker instead.)"""
    config = config_from_dict(
        {
            "run": {"budget": 3000},
            "objective": {"name": "garland"},
            "algorithm": {"name": "fedpne"},
            "federation": {"clients": 6},
            "agents": {"rebroadcast_s": 2.0},
        }
    )
    listen = free_port()
    proxy = OutageProxy(listen)
    proxy.start()

    async def main(address: str):
        run_id = run_id_for(config, SEED)
        brokers = [KafkaBroker(address) for _ in range(3)]
        server = ServerAgent(config, SEED, brokers[0], run_id=run_id)
        hosts = [
            ClientAgent(config, SEED, broker, run_id=run_id, client_ids=ids)
            for broker, ids in zip(brokers[1:], ([0, 1, 2], [3, 4, 5]), strict=True)
        ]
        tasks = [asyncio.create_task(server.run())] + [asyncio.create_task(h.run()) for h in hosts]
        async with asyncio.timeout(60):
            while len(server.phases) < 2:
                await asyncio.sleep(0.01)
        phase = server.phase
        await asyncio.to_thread(proxy.outage, 3.0)
        record, *_ = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        for broker in brokers:
            await broker.stop()
        return record, phase

    try:
        with DevBroker(listen, advertised_port=proxy.port) as dev:
            record, phase = asyncio.run(main(dev.address))
    finally:
        proxy.stop()
    assert proxy.outages == 1
    assert phase < record.communication["rounds"]  # the outage came before the last phase
    expected = Federation(config, SEED).run().to_dict()
    assert without_time(record.to_dict()) == without_time(expected)


def _write_config(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    keys = tmp_path / "keys"
    if not keys.exists():
        generate_keys(8, keys)
    path.write_text(CONFIG.format(output=(tmp_path / name).as_posix(), keys=keys.as_posix()))
    return path


@pytest.fixture
def federation(tmp_path, dev_broker):
    return ProcessFederation(tmp_path, dev_broker.url, _write_config(tmp_path, "run"))


def test_server_and_clients_in_separate_processes(federation):
    for name in ("server", "client-a", "client-b"):
        federation.start(name)
    assert federation.finish() == federation.expected()
    # who joined, named by the server at its default verbosity (fedxab.run.population)
    server_log = " ".join(federation.log("server").read_text().split())
    assert "phase 1: 8 joined (0-7); 8 of 8 asked reported" in server_log, server_log[-3000:]


@pytest.mark.parametrize("victim", ["client-b", "server"])
def test_a_process_killed_mid_run_and_restarted_changes_nothing(federation, victim):
    """SIGKILL after the first closed phase, then a restart: a client process replays the
    broadcasts, the server process resumes from its checkpoint; the results are unchanged."""
    for name in ("server", "client-a", "client-b"):
        federation.start(name)
    until(federation.phases_checkpointed, "the first closed phase")
    federation.kill(victim)
    closed = federation.closed_phases()
    federation.start(victim)
    expected = federation.expected()
    assert 1 <= closed < expected[0]["communication"]["rounds"]  # killed before the run's end
    assert federation.finish() == expected


def test_a_client_process_stops_cleanly_on_sigterm(federation):
    federation.start("client-a")  # no server: it waits for its welcome
    # started (its imports done: a fixed 3 s was too short on a loaded machine, where the
    # signal came before the command line began and killed the interpreter: status -15)
    log_line(federation.log("client-a"), "fedxab client: ", timeout=60)
    time.sleep(2)
    proc = federation.procs["client-a"]
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(20)
    assert code == 130, federation.log("client-a").read_text()
    assert "interrupted" in federation.log("client-a").read_text()


@pytest.mark.slow  # (three processes on the dev broker, about 25 s; in process: test_server_gone)
def test_client_processes_stop_once_their_server_process_is_gone(tmp_path, dev_broker):
    """Issue 37's finding with real processes: a client process whose server ended mid-run
    (here SIGKILL) stops with exit status 2 and one line naming the server's silence, within
    ``[agents] server_silence_s`` of the server's last record, instead of waiting forever."""
    silence_s = 5.0
    path = _write_config(tmp_path, "run")
    agents = f"\n[agents]\nrebroadcast_s = 1.0\nserver_silence_s = {silence_s}\n"
    path.write_text(path.read_text() + agents)
    federation = ProcessFederation(tmp_path, dev_broker.url, path)
    try:
        for name in ("server", "client-a", "client-b"):
            federation.start(name)
        until(federation.phases_checkpointed, "the first closed phase")
        federation.kill("server")
        killed = time.monotonic()
        for name in ("client-a", "client-b"):
            code = federation.procs[name].wait(silence_s + 30)
            text = " ".join(federation.log(name).read_text().split())
            assert code == 2, text[-3000:]
            assert f"no record from the server for {silence_s:.0f} s after phase" in text
            assert "Traceback" not in text
        print(f"both client processes stopped {time.monotonic() - killed:.1f} s after the kill")
    finally:
        federation.stop_all()
