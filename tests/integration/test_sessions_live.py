"""Issue 39's acceptance with real processes on the dev broker: a run's records are bound to its
execution. With `fedxab server` and two `fedxab client` processes of run B (namespace B), three
forged final answers published before B's server starts (random signatures; unsigned: a random
session), then, with phase 1 open, every broadcast of an earlier execution A of the same job
(namespace A: the same run id) replayed on B's broadcast topic -- its next phases and its final
answer -- change nothing: the waiting client process keeps running, and the run ends with the
in-process results. Signed (HMAC) and unsigned. (The same on the embedded broker, fast:
tests/integration/test_sessions.py.)"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from cli_procs import ProcessFederation, until
from test_sessions import forged_final_answers

from fedxab.agents.ledger_mirror import read_to_end
from fedxab.broker.base import run_topics
from fedxab.broker.kafka import KafkaBroker
from fedxab.config import load_config
from fedxab.run.identity import run_id_for
from fedxab.security.keys import generate_keys

pytestmark = pytest.mark.slow  # two runs of three processes each: 35-85 s per scheme

CONFIG = """
[run]
seed = 4
budget = 2000
output = "{output}"

[objective]
name = "garland"

[algorithm]
name = "fedpne"

[federation]
clients = 8

[agents]
rebroadcast_s = 1.0
status_interval_s = 0.5
telemetry_timeout_s = 5.0

[broker]
namespace = "{namespace}"  # topics of this test only: the dev broker is shared
{security}
"""


def _federation(tmp_path, url: str, name: str, security: str) -> ProcessFederation:
    directory = tmp_path / name
    directory.mkdir()
    path = directory / "run.toml"
    namespace = f"sessions-{name}-{uuid.uuid4().hex[:12]}"
    text = CONFIG.format(
        output=(directory / "run").as_posix(), namespace=namespace, security=security
    )
    path.write_text(text)
    return ProcessFederation(directory, url, path)


def _topic(fed: ProcessFederation) -> str:
    config = load_config(fed.config)
    return run_topics(config.broker.namespace, run_id_for(config, 4))["broadcast"]


async def _read(address: str, topic: str) -> list[bytes]:
    async with KafkaBroker(address) as broker:
        return [r.value for r in await read_to_end(broker, topic)]


async def _publish(address: str, topic: str, values: list[bytes]) -> None:
    async with KafkaBroker(address) as broker:
        await broker.create_topics([topic])
        await broker.publish_many(topic, [(None, v) for v in values])


@pytest.mark.parametrize("scheme", ["unsigned", "hmac"])
def test_replayed_and_forged_broadcasts_change_nothing_with_real_processes(
    scheme, tmp_path, dev_broker
):
    security = "[security]\nsign = false"  # (Kafka runs sign by default)
    if scheme == "hmac":
        generate_keys(8, tmp_path / "keys")
        security = f'[security]\nkeys_dir = "{(tmp_path / "keys").as_posix()}"\nsign = true'
    earlier = _federation(tmp_path, dev_broker.url, "a", security)
    fed = _federation(tmp_path, dev_broker.url, "b", security)
    try:
        for name in ("server", "client-a", "client-b"):
            earlier.start(name)
        expected = earlier.finish()
        replay = asyncio.run(_read(dev_broker.address, _topic(earlier)))
        assert len(replay) >= 3  # phases 1, 2, ... and the final answer
        run_id = run_id_for(load_config(fed.config), 4)
        forged = forged_final_answers(run_id, 8, signed=scheme == "hmac")

        fed.start("client-a")  # clients 0-3: waiting for the server
        asyncio.run(_publish(dev_broker.address, _topic(fed), forged))
        fed.start("server")
        until(
            lambda: "for 4 of 8 clients" in fed.log("server").read_text(errors="replace"),
            "phase 1 waiting for clients 4-7",
        )
        asyncio.run(_publish(dev_broker.address, _topic(fed), replay))
        time.sleep(3.0)  # (before: client-a took the final answer and exited within 1.2 s)
        assert fed.procs["client-a"].poll() is None, fed.log("client-a").read_text()[-3000:]
        fed.start("client-b")
        assert fed.finish() == expected == fed.expected()
    finally:
        earlier.stop_all()
        fed.stop_all()
