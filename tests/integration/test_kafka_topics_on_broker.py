"""Kafka as operators run it, on the dev broker (Tansu 0.6, a real Kafka-protocol broker): topics
created with the ``[broker]`` settings and described back through the admin API, deleted; a party
that may not create topics stops at once on a missing one, naming it and the command, and
creates nothing meanwhile (the dev broker auto-creates a topic that a metadata request names, so
this also shows fedxab never names a missing topic there); SASL OAUTHBEARER reaches the broker's
authentication with the user's token.

What the dev broker cannot show: it has one node, so a replication factor of 3 is recorded
(three replica entries, all node 111) but not replicated; it cannot turn auto-creation off; its
SASL accepts the OAUTHBEARER handshake but validates PLAIN and SCRAM only, so it refuses every
token (tested: the token function is called and the broker's refusal is the error)."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from typer.testing import CliRunner

from fedxab.agents.ledger_mirror import rebuild_from_broker
from fedxab.broker.base import BrokerError
from fedxab.broker.devbroker import DevBroker, _broker_binary, free_port
from fedxab.broker.factory import make_broker
from fedxab.broker.kafka import KafkaBroker
from fedxab.broker.topics import (
    CREATE_COMMAND,
    MissingTopicError,
    TopicSettings,
    create_run_topics,
    delete_run_topics,
    describe_run_topics,
    differences,
    topics_of,
)
from fedxab.cli import app
from fedxab.config import BrokerConfig
from fedxab.errors import FedxabError

TIMEOUT = 20.0
_jobs = itertools.count()


def _namespace() -> str:
    return f"ops-{next(_jobs)}-{time.monotonic_ns()}.jobs"


async def _cluster_topics(address: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


def test_topics_are_created_with_the_configured_settings_described_and_deleted(dev_broker):
    settings = BrokerConfig(
        url=dev_broker.url,
        partitions=3,
        replication_factor=3,
        retention_ms=7 * 24 * 3600 * 1000,
        ledger_retention_ms=-1,
        topic_config=(("cleanup.policy", "delete"), ("min.insync.replicas", "2")),
        max_message_bytes=2_000_000,
    )
    names = topics_of(_namespace(), ["fedpne-0123456789ab-s0"])

    async def scenario():
        broker = make_broker(settings.url, settings)
        async with broker:
            assert [s.exists for s in await describe_run_topics(broker, names)] == [False] * 5
            created = await create_run_topics(broker, names)
            again = await create_run_topics(broker, names)  # existing topics are left alone
            deleted = await delete_run_topics(broker, names)
            after = await describe_run_topics(broker, names)
            twice = await delete_run_topics(broker, names)
        return created, again, deleted, after, twice

    created, again, deleted, after, twice = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT))
    by_name = {state.name: state for state in created}
    report = by_name[names[2]]
    assert (report.partitions, report.replication_factor) == (3, 3)
    assert by_name[names[1]].partitions == 1  # the broadcast topic
    assert report.configs == {
        "max.message.bytes": "2000000",
        "retention.ms": "604800000",
        "cleanup.policy": "delete",
        "min.insync.replicas": "2",
    }
    assert by_name[names[4]].configs["retention.ms"] == "-1"  # the ledger topic
    for state in created:
        assert differences(state, settings.topic_settings, settings.max_message_bytes) == []
    assert again == created
    assert deleted == names and twice == []
    assert not any(state.exists for state in after)


def test_a_party_that_may_not_create_topics_stops_at_once_naming_the_missing_one(dev_broker):
    namespace = _namespace()
    names = topics_of(namespace, ["fedpne-0123456789ab-s0"])
    settings = TopicSettings(create=False)

    async def scenario():
        async with KafkaBroker(dev_broker.address, topics=settings) as party:
            started = time.monotonic()
            with pytest.raises(MissingTopicError) as caught:
                await party.create_topics(names)
            took = time.monotonic() - started
            with pytest.raises(MissingTopicError):
                await party.publish(names[2], "0", b"a report")
            with pytest.raises(MissingTopicError):
                async with party.subscribe(names[1], None):
                    pass
            untouched = await _cluster_topics(dev_broker.address)
            # once an operator created them, the same party runs on them
            async with KafkaBroker(dev_broker.address) as operator:
                await create_run_topics(operator, names)
            await party.create_topics(names)
            await party.publish(names[2], "0", b"a report")
        return caught.value, took, untouched

    error, took, untouched = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT))
    assert f"topic {names[0]!r} does not exist" in str(error)
    assert CREATE_COMMAND in str(error) and "create_topics = false" in str(error)
    assert took < 5.0, took
    assert not untouched & set(names)  # nothing was auto-created by asking


def test_every_topic_and_the_group_of_a_run_start_with_its_namespace(tmp_path):
    """A whole run (fedxab run on a broker of its own, so every topic listed is the run's) under
    a dotted namespace: one prefixed ACL on ``team-a.`` covers it."""
    job = tmp_path / "job.toml"
    with DevBroker() as broker:
        job.write_text(
            "[run]\nbudget = 200\n[objective]\nname = 'garland'\n[algorithm]\nname = 'fedpne'\n"
            f"[federation]\nclients = 2\n[broker]\nurl = '{broker.url}'\n"
            "namespace = 'team-a.tuning'\n[security]\nsign = false\n"
        )
        done = subprocess.run(
            [sys.executable, "-m", "fedxab.cli", "run", str(job), "-q"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, "FEDXAB_HOME": str(tmp_path / "home")},
        )
        assert done.returncode == 0, done.stderr

        async def listed():
            admin = AIOKafkaAdminClient(bootstrap_servers=broker.address)
            await admin.start()
            try:
                groups = await admin.list_consumer_groups()
                return set(await admin.list_topics()), {g[0] for g in groups}
            finally:
                await admin.close()

        topics, groups = asyncio.run(asyncio.wait_for(listed(), TIMEOUT))
    assert len(topics) == 5, topics  # the lobby and the run's four
    assert all(name.startswith("team-a.tuning.") for name in topics | groups), (topics, groups)
    assert groups, "the server's group"


@pytest.fixture
def authenticating_broker(tmp_path: Path) -> Iterator[str]:
    """Tansu started with --authentication on a free loopback port (stopped after): its
    address."""
    port = free_port()
    log = tmp_path / "tansu.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                *(_broker_binary(), "broker", "--storage-engine", "memory://tansu/"),
                *("--listener-url", f"tcp://127.0.0.1:{port}"),
                *("--advertised-listener-url", f"tcp://127.0.0.1:{port}", "--authentication"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1"},
        )
    try:
        deadline = time.monotonic() + 15
        while b"ready in" not in log.read_bytes():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def test_oauthbearer_reaches_the_brokers_authentication_with_the_users_token(
    authenticating_broker, caplog
):
    """The handshake takes OAUTHBEARER, the user's function gives the token that is sent, and
    the broker's refusal (it validates PLAIN and SCRAM only) comes back as a BrokerError."""
    calls: list[float] = []

    def token() -> str:
        calls.append(time.monotonic())
        return "eyJhbGciOiJub25lIn0.eyJzdWIiOiJmZWR4YWIifQ."

    broker = KafkaBroker(
        authenticating_broker,
        security={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": token,
        },
        unreachable_s=2.0,
    )
    with pytest.raises(BrokerError, match="could not connect"):
        asyncio.run(asyncio.wait_for(broker.start(), TIMEOUT))
    assert calls, "the token function was never asked"
    refusals = [r for r in caplog.records if "SaslAuthenticationFailed" in r.getMessage()]
    assert refusals, "the broker's answer to the token was not an authentication failure"


AUDITOR_TOKEN = """
from pathlib import Path

def token():
    with Path(__file__).with_name("asked").open("a") as asked:
        asked.write("token\\n")
    return "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhdWRpdG9yIn0."
"""


def test_the_auditors_rebuild_takes_the_configs_sasl_settings(
    authenticating_broker, tmp_path, monkeypatch
):
    """fedxab audit --rebuild-from --config: the job's [broker] SASL settings (here OAUTHBEARER
    with a token function) reach the auditor's broker."""
    (tmp_path / "auditor_auth.py").write_text(AUDITOR_TOKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    job = tmp_path / "job.toml"
    job.write_text(
        "[objective]\nname = 'garland'\n[algorithm]\nname = 'fedpne'\n"
        "[federation]\nclients = 2\n[broker]\nsecurity_protocol = 'SASL_PLAINTEXT'\n"
        "sasl_mechanism = 'OAUTHBEARER'\n"
        "sasl_oauth_token_provider = 'auditor_auth:token'\nunreachable_s = 2.0\n"
    )
    result = CliRunner().invoke(
        app,
        [
            *("audit", str(tmp_path / "rebuilt.db"), "--run", "fedpne-0123456789ab-s0"),
            *("--rebuild-from", f"kafka://{authenticating_broker}", "--config", str(job)),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "could not connect" in " ".join(result.output.split())
    assert (tmp_path / "asked").read_text().count("token") >= 1


def test_the_auditors_rebuild_creates_no_topic(dev_broker, tmp_path):
    namespace = _namespace()
    topic = f"{namespace}.fedpne-0123456789ab-s0.ledger"
    with pytest.raises(FedxabError, match=f"there is no ledger topic {topic}"):
        rebuild_from_broker(
            tmp_path / "rebuilt.db", dev_broker.url, namespace, "fedpne-0123456789ab-s0"
        )
    assert topic not in asyncio.run(_cluster_topics(dev_broker.address))
    assert not (tmp_path / "rebuilt.db").exists()
