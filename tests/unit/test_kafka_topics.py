"""Kafka as operators run it, without a broker: topic settings from ``[broker]``, topic names
under the namespace, how an existing topic differs from the config, and the SASL OAUTHBEARER
client configuration (a user's token function). The same against the dev broker:
tests/integration/test_kafka_topics_on_broker.py."""

from __future__ import annotations

import asyncio
import sys
import tomllib

import pytest
from aiokafka.abc import AbstractTokenProvider

from fedxab.broker.base import BrokerError, topic_name
from fedxab.broker.factory import SASL_PASSWORD_ENV, make_broker
from fedxab.broker.kafka import KafkaBroker, token_provider
from fedxab.broker.topics import (
    CREATE_COMMAND,
    CreateResult,
    MissingTopicError,
    TopicSettings,
    TopicState,
    check_creation,
    differences,
    topics_of,
)
from fedxab.config import BrokerConfig, config_from_dict
from fedxab.errors import ConfigError

OPERATED = """
[broker]
url = "kafka://kafka-1:9092,kafka-2:9092"
namespace = "team-a.tuning"
partitions = 6
replication_factor = 3
retention_ms = 604800000
ledger_retention_ms = -1
create_topics = false
[broker.topic_config]
"min.insync.replicas" = 2
"compression.type" = "lz4"
"unclean.leader.election.enable" = false
"""


def test_topic_settings_come_from_the_broker_section_and_reach_the_kafka_broker():
    settings = BrokerConfig.from_table(tomllib.loads(OPERATED)["broker"])
    broker = make_broker(settings.url, settings)
    assert isinstance(broker, KafkaBroker)
    topics = broker.topics
    assert (topics.partitions, topics.replication_factor, topics.create) == (6, 3, False)
    assert topics.configs("team-a.tuning.r.report", broker.max_message_bytes) == {
        "max.message.bytes": str(1 << 20),
        "retention.ms": "604800000",
        "min.insync.replicas": "2",
        "compression.type": "lz4",
        "unclean.leader.election.enable": "false",
    }
    ledger = topics.configs("team-a.tuning.r.ledger", broker.max_message_bytes)
    assert ledger["retention.ms"] == "-1"  # the privacy record outlives the run's chatter
    assert TopicSettings(retention_ms=5).configs("n.r.ledger", 1)["retention.ms"] == "5"
    assert topics.partitions_for("team-a.tuning.r.report") == 6
    assert topics.partitions_for("team-a.tuning.r.broadcast") == 1  # read in order


def test_the_defaults_are_those_of_before_and_a_config_round_trips():
    default = BrokerConfig().topic_settings
    assert (default.partitions, default.replication_factor, default.retention_ms) == (1, 1, None)
    assert default.create and default.configs("n.r.ledger", 100) == {"max.message.bytes": "100"}
    assert "topic_config" not in BrokerConfig().to_dict()
    job = {
        "objective": {"name": "garland"},
        "algorithm": {"name": "fedpne"},
        "federation": {"clients": 2},
        **tomllib.loads(OPERATED),
    }
    config = config_from_dict(job)
    assert config_from_dict(config.to_dict()).broker == config.broker
    assert "broker" not in config.experiment_dict()  # deployment, not the run's identity


@pytest.mark.parametrize(
    ("table", "field", "says"),
    [
        ({"partitions": 0}, "broker.partitions", "positive integer"),
        ({"replication_factor": -1}, "broker.replication_factor", "positive integer"),
        ({"retention_ms": 0}, "broker.retention_ms", "must not be 0"),
        ({"retention_ms": -2}, "broker.retention_ms", "-1 to keep records forever"),
        ({"ledger_retention_ms": 0}, "broker.ledger_retention_ms", "must not be 0"),
        ({"topic_config": {"retention.ms": 5}}, "broker.topic_config.retention.ms", "retention_ms"),
        (
            {"topic_config": {"max.message.bytes": 5}},
            "broker.topic_config.max.message.bytes",
            "max_message_bytes",
        ),
        ({"topic_config": {"Retention MS": 5}}, "broker.topic_config", "not a Kafka topic"),
        ({"topic_config": {"x.y": ""}}, "broker.topic_config.x.y", "non-empty string"),
        ({"topic_config": "min.insync.replicas=2"}, "broker.topic_config", "table"),
        ({"create_topics": "no"}, "broker.create_topics", "boolean"),
    ],
)
def test_bad_topic_settings_name_the_field(table, field, says):
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_table({"url": "kafka://k:9092", **table})
    assert caught.value.field == field
    assert says in str(caught.value)


def test_every_topic_of_a_job_is_under_its_namespace_which_may_hold_dots():
    runs = ["fedpne-0123456789ab-s0", "fedpne-0123456789ab-s1"]
    names = topics_of("team-a.tuning", runs)
    assert names[0] == "team-a.tuning.lobby"
    assert len(names) == 1 + 4 * len(runs)
    assert all(name.startswith("team-a.tuning.") for name in names)
    assert "team-a.tuning.fedpne-0123456789ab-s1.ledger" in names
    with pytest.raises(ConfigError, match="broker.namespace"):
        topic_name("team a", runs[0], "report")
    with pytest.raises(ConfigError, match="run_id"):
        topic_name("team-a", "a.b", "report")  # a dot stays the namespace's alone


def test_differences_name_what_an_existing_topic_does_not_share_with_the_config():
    settings = TopicSettings(partitions=3, replication_factor=3, retention_ms=1000)
    same = TopicState(
        "ns.r.report", True, 3, 3, {"retention.ms": "1000", "max.message.bytes": "100"}
    )
    assert differences(same, settings, 100) == []
    assert differences(TopicState("ns.r.report", False), settings, 100) == ["absent"]
    other = TopicState("ns.r.report", True, 1, 1, {"retention.ms": "5"})  # max.message.bytes
    assert differences(other, settings, 100) == [  # not reported: not a difference
        "partitions 1 (config: 3)",
        "replication factor 1 (config: 3)",
        "retention.ms 5 (config: 1000)",
    ]


def test_a_missing_topic_error_names_the_topic_and_the_command():
    error = TopicSettings(create=False).missing("ns.lobby", "k:9092")
    assert isinstance(error, BrokerError)
    assert "'ns.lobby' does not exist" in str(error) and CREATE_COMMAND in str(error)
    assert "\n" not in str(error)


# --- SASL OAUTHBEARER: a user's token function ------------------------------------------------

TOKENS = """
import asyncio
calls = []

def token():
    calls.append("sync")
    return "token-from-site"

async def async_token():
    calls.append("async")
    return "async-token"

def no_token():
    return None

def broken():
    raise RuntimeError("identity service unreachable")
"""


@pytest.fixture
def token_module(tmp_path, monkeypatch):
    (tmp_path / "site_tokens.py").write_text(TOKENS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "site_tokens", raising=False)
    import site_tokens

    return site_tokens


def _oauth(provider: str | None, **more) -> BrokerConfig:
    return BrokerConfig(
        url="kafka://kafka:9092",
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=provider,
        **more,
    )


def test_oauthbearer_gives_aiokafka_the_users_token_function_and_needs_no_password(
    token_module, monkeypatch
):
    monkeypatch.delenv(SASL_PASSWORD_ENV, raising=False)
    broker = make_broker("kafka://kafka:9092", _oauth("site_tokens:token"))
    options = broker._client_options  # what the producer, the consumers and the admin get
    assert options["sasl_mechanism"] == "OAUTHBEARER"
    assert "sasl_plain_password" not in options and "sasl_plain_username" not in options
    provider = options["sasl_oauth_token_provider"]
    assert isinstance(provider, AbstractTokenProvider)
    assert asyncio.run(provider.token()) == "token-from-site"
    assert token_module.calls == ["sync"]  # called when a connection authenticates, not before
    asynchronous = token_provider("site_tokens:async_token")
    assert asyncio.run(asynchronous.token()) == "async-token"
    with pytest.raises(BrokerError, match="returned NoneType, not a non-empty token"):
        asyncio.run(token_provider("site_tokens:no_token").token())
    with pytest.raises(BrokerError, match="failed: RuntimeError: identity service unreachable"):
        asyncio.run(token_provider("site_tokens:broken").token())


def test_an_object_in_the_api_is_used_as_it_is():
    class Provider(AbstractTokenProvider):
        async def token(self):
            return "object-token"

    mine = Provider()
    broker = KafkaBroker(
        "kafka:9092",
        security={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": mine,
        },
    )
    assert broker._client_options["sasl_oauth_token_provider"] is mine
    plain = KafkaBroker(
        "kafka:9092",
        security={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": lambda: "from-a-lambda",
        },
    )
    assert asyncio.run(plain._client_options["sasl_oauth_token_provider"].token()) == (
        "from-a-lambda"
    )


@pytest.mark.parametrize(
    ("build", "field", "says"),
    [
        (lambda: _oauth(None), "broker.sasl_oauth_token_provider", "needs the token function"),
        (lambda: _oauth("no colon"), "broker.sasl_oauth_token_provider", "package.module"),
        (
            lambda: _oauth("site_tokens:token", sasl_username="u"),
            "broker.sasl_username",
            "not used with OAUTHBEARER",
        ),
        (
            lambda: BrokerConfig(
                url="kafka://k:1",
                security_protocol="SASL_SSL",
                sasl_mechanism="PLAIN",
                sasl_username="u",
                sasl_oauth_token_provider="site_tokens:token",
            ),
            "broker.sasl_oauth_token_provider",
            "only used with sasl_mechanism",
        ),
    ],
)
def test_bad_oauthbearer_settings_name_the_field(build, field, says):
    with pytest.raises(ConfigError) as caught:
        build()
    assert caught.value.field == field
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("provider", "says"),
    [
        ("no_such_module_here:token", "cannot import 'no_such_module_here'"),
        ("site_tokens:missing", "has no 'missing'"),
        (42, "must be a token function"),
    ],
)
def test_a_token_provider_that_cannot_be_used_is_a_clear_error(token_module, provider, says):
    with pytest.raises(ConfigError) as caught:
        token_provider(provider)
    assert caught.value.field == "broker.security.sasl_oauth_token_provider"
    assert says in str(caught.value)


def test_a_principal_without_create_runs_on_existing_topics_and_names_a_missing_one():
    """Kafka answers TOPIC_AUTHORIZATION_FAILED (29) before it looks whether a topic exists:
    an existing topic is fine, a missing one is named with the command."""
    answer = [
        CreateResult("ns.lobby", 29, "TopicAuthorizationFailedError"),
        CreateResult("ns.r.report", 36, "TopicAlreadyExistsError"),
        CreateResult("ns.r.ledger", 0, ""),
    ]
    check_creation(answer, existing=["ns.lobby"], servers="k:9092")
    with pytest.raises(MissingTopicError) as caught:
        check_creation(answer, existing=[], servers="k:9092")
    text = str(caught.value)
    assert "'ns.lobby' does not exist" in text and "may not create it" in text
    assert CREATE_COMMAND in text and "TopicAuthorizationFailedError" in text


def test_a_topic_kafka_refuses_to_create_names_the_setting_to_change():
    refused = [CreateResult("ns.r.report", 38, "InvalidReplicationFactorError", "3 > 1 broker")]
    with pytest.raises(BrokerError, match=r"3 > 1 broker \(check \[broker\] replication_factor\)"):
        check_creation(refused, existing=["ns.r.report"], servers="k:9092")
    other = [CreateResult("ns.r.report", 41, "NotControllerError", "moved")]
    with pytest.raises(BrokerError, match="NotControllerError: moved$"):
        check_creation(other, existing=[], servers="k:9092")
