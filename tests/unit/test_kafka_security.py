"""Kafka transport security: the [broker] TLS and SASL settings reach every aiokafka client
(producer, consumers, admin) as aiokafka options, and the SASL password comes from the
environment only."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from fedxab.broker.factory import SASL_PASSWORD_ENV, kafka_security, make_broker
from fedxab.broker.kafka import KafkaBroker
from fedxab.config import BrokerConfig
from fedxab.errors import ConfigError

CAFILE = ssl.get_default_verify_paths().openssl_cafile


@pytest.mark.skipif(not Path(CAFILE).is_file(), reason="no system CA bundle to stand in")
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_settings_become_the_aiokafka_client_options(monkeypatch, mechanism):
    monkeypatch.setenv(SASL_PASSWORD_ENV, "s3cret")
    settings = BrokerConfig(
        url="kafka://kafka:9092",
        security_protocol="SASL_SSL",
        sasl_mechanism=mechanism,
        sasl_username="fedxab-client",
        ssl_cafile=CAFILE,
    )
    broker = make_broker(settings.url, settings)
    assert isinstance(broker, KafkaBroker)
    options = broker._client_options  # what the producer, the consumers and the admin get
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == mechanism
    assert options["sasl_plain_username"] == "fedxab-client"
    assert options["sasl_plain_password"] == "s3cret"
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert "s3cret" not in repr(settings) and "password" not in settings.to_dict()


def test_the_sasl_password_comes_only_from_the_environment(monkeypatch):
    monkeypatch.delenv(SASL_PASSWORD_ENV, raising=False)
    settings = BrokerConfig(
        url="kafka://kafka:9092",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="fedxab-server",
    )
    with pytest.raises(ConfigError, match=SASL_PASSWORD_ENV):
        kafka_security(settings)
    with pytest.raises(ConfigError, match="unknown key"):
        BrokerConfig.from_table({"url": "kafka://k:1", "sasl_password": "x"})


def test_plaintext_passes_no_credentials():
    options = make_broker("kafka://kafka:9092", BrokerConfig(url="kafka://kafka:9092"))
    assert options._client_options["security_protocol"] == "PLAINTEXT"
    assert not {"sasl_mechanism", "ssl_context"} & set(options._client_options)


def test_max_message_bytes_reaches_the_kafka_broker_and_is_checked():
    default = make_broker("kafka://kafka:9092", BrokerConfig(url="kafka://kafka:9092"))
    assert default.max_message_bytes == 1 << 20  # Kafka's own default
    raised = make_broker(
        "kafka://kafka:9092", BrokerConfig(url="kafka://kafka:9092", max_message_bytes=5_000_000)
    )
    assert raised.max_message_bytes == 5_000_000
    with pytest.raises(ConfigError) as caught:
        BrokerConfig(url="kafka://kafka:9092", max_message_bytes=0)
    assert caught.value.field == "broker.max_message_bytes"
