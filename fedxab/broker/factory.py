"""A broker from a URL: ``memory://`` (embedded), ``kafka://HOST:PORT[,HOST:PORT...]``.

``inprocess://`` means no broker at all (the direct in-process runner) and gives ``None``.
Kafka TLS/SASL settings come from the config's ``[broker]`` section; the SASL password only from
the environment variable :data:`SASL_PASSWORD_ENV`, never from a file that may be shared.
"""

from __future__ import annotations

import os
from typing import Any

from fedxab.broker.base import Broker
from fedxab.broker.memory import MemoryBroker
from fedxab.config import BrokerConfig
from fedxab.errors import ConfigError

__all__ = ["SASL_PASSWORD_ENV", "kafka_security", "make_broker"]

SASL_PASSWORD_ENV = "FEDXAB_KAFKA_SASL_PASSWORD"


def kafka_security(settings: BrokerConfig) -> dict[str, Any]:
    """The ``security`` mapping of :class:`~fedxab.broker.kafka.KafkaBroker` for ``settings``."""
    security: dict[str, Any] = {"security_protocol": settings.security_protocol}
    if settings.security_protocol.startswith("SASL"):
        password = os.environ.get(SASL_PASSWORD_ENV)
        if not password:
            raise ConfigError(
                "broker.sasl_mechanism",
                f"{settings.security_protocol} needs the SASL password in the environment "
                f"variable {SASL_PASSWORD_ENV}",
            )
        security.update(
            sasl_mechanism=settings.sasl_mechanism,
            sasl_plain_username=settings.sasl_username,
            sasl_plain_password=password,
        )
    for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        if getattr(settings, key) is not None:
            security[key] = getattr(settings, key)
    return security


def make_broker(url: str, settings: BrokerConfig | None = None) -> Broker | None:
    """The broker named by ``url`` (not started), or ``None`` for ``inprocess://``."""
    settings = settings or BrokerConfig()
    if url == "memory://":
        return MemoryBroker()
    if url == "inprocess://":
        return None
    if url.startswith("kafka://"):
        servers = url.removeprefix("kafka://").strip("/")
        for server in servers.split(","):
            host, _, port = server.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(
                    "broker.url", f"expected kafka://HOST:PORT[,HOST:PORT...], got {url!r}"
                )
        from fedxab.broker.kafka import KafkaBroker

        return KafkaBroker(servers, security=kafka_security(settings))
    raise ConfigError(
        "broker.url", f"must be memory://, inprocess:// or kafka://HOST:PORT, got {url!r}"
    )
