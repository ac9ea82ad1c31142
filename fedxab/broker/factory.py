"""A broker from a URL: ``memory://`` (embedded), ``kafka://HOST:PORT[,HOST:PORT...]``.

``inprocess://`` means no broker at all (the direct in-process runner) and gives ``None``.
Kafka TLS/SASL settings come from the config's ``[broker]`` section; the SASL password only from
the environment variable :data:`SASL_PASSWORD_ENV`, never from a file that may be shared.

**Fault injection, for tests and soak runs only.** When the environment variable
:data:`FAULTS_ENV` (``FEDXAB_FAULTS``) is set and not empty, every broker :func:`make_broker`
makes is wrapped in :class:`~fedxab.broker.faults.FaultyBroker` (:func:`faults_from_env`), so
that separate ``fedxab server`` / ``fedxab client`` processes can be disturbed too. Its value is
one or more groups separated by ``;``, each a comma-separated list of ``key=value``::

    FEDXAB_FAULTS="duplicate=0.05,drop=0.02,reorder_window=3,seed=7"
    FEDXAB_FAULTS="kinds=report+control,duplicate=0.1,reorder_window=4,seed=1;kinds=ledger,duplicate=0.2"

Keys (each at most once per group): ``duplicate`` and ``drop`` (probabilities in [0, 1]),
``reorder_window`` (an integer >= 1), ``reorder_delay_s`` (seconds >= 0), ``seed`` (an integer
>= 0) and ``kinds`` (topic kinds joined by ``+``: broadcast, report, control, ledger; default
broadcast+report+control); anything left out takes
:class:`~fedxab.broker.faults.FaultyBroker`'s default. Each group wraps the broker once more, so
different topic kinds can get different faults. A bad value is a
:class:`~fedxab.errors.ConfigError` naming the variable; an injecting broker logs a warning.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fedxab.broker.base import TOPIC_KINDS, Broker
from fedxab.broker.memory import MemoryBroker
from fedxab.config import BrokerConfig
from fedxab.errors import ConfigError

if TYPE_CHECKING:
    from fedxab.broker.kafka import KafkaBroker

__all__ = [
    "FAULTS_ENV",
    "SASL_PASSWORD_ENV",
    "faults_from_env",
    "kafka_broker",
    "kafka_security",
    "make_broker",
    "parse_faults",
]

log = logging.getLogger(__name__)

SASL_PASSWORD_ENV = "FEDXAB_KAFKA_SASL_PASSWORD"
FAULTS_ENV = "FEDXAB_FAULTS"
"""Environment variable of injected transport faults (tests and soak runs; see the module doc)."""

_FAULT_KEYS = ("duplicate", "drop", "reorder_window", "reorder_delay_s", "seed", "kinds")


def _fault_value(key: str, text: str, where: str) -> Any:
    """One ``key=text`` of a fault group, converted and range-checked."""

    def bad(allowed: str) -> ConfigError:
        return ConfigError(FAULTS_ENV, f"{where}: {key} must be {allowed}, got {text!r}")

    if key in ("duplicate", "drop", "reorder_delay_s"):
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if key == "reorder_delay_s":
            if not (math.isfinite(value) and value >= 0):
                raise bad("a number of seconds >= 0")
        elif not 0 <= value <= 1:  # (NaN fails too)
            raise bad("a probability in [0, 1]")
        return value
    if key in ("reorder_window", "seed"):
        low = 1 if key == "reorder_window" else 0
        if not text.isascii() or not text.isdigit() or int(text) < low:
            raise bad(f"an integer >= {low}")
        return int(text)
    kinds = tuple(text.split("+"))
    if not text or any(k not in TOPIC_KINDS for k in kinds) or len(set(kinds)) != len(kinds):
        raise bad(f"topic kinds joined by '+' (each once) from {', '.join(TOPIC_KINDS)}")
    return kinds


def parse_faults(spec: str) -> list[dict[str, Any]]:
    """The fault groups of a :data:`FAULTS_ENV` value: one dict of
    :class:`~fedxab.broker.faults.FaultyBroker` keyword arguments per ``;``-separated group
    (an empty or blank value: no group). Every defect is a ConfigError naming the variable."""
    groups: list[dict[str, Any]] = []
    if not spec.strip():
        return groups
    for g, group in enumerate(spec.split(";"), start=1):
        where = f"group {g} ({group.strip()!r})"
        if not group.strip():
            raise ConfigError(FAULTS_ENV, f"{where}: empty group (a stray ';'?)")
        kwargs: dict[str, Any] = {}
        for item in group.split(","):
            key, sep, text = (part.strip() for part in item.partition("="))
            if not sep or not key:
                raise ConfigError(FAULTS_ENV, f"{where}: expected key=value, got {item.strip()!r}")
            if key not in _FAULT_KEYS:
                raise ConfigError(
                    FAULTS_ENV, f"{where}: unknown key {key!r} (allowed: {', '.join(_FAULT_KEYS)})"
                )
            if key in kwargs:
                raise ConfigError(FAULTS_ENV, f"{where}: {key} given twice")
            kwargs[key] = _fault_value(key, text, where)
        groups.append(kwargs)
    return groups


def faults_from_env(broker: Broker, environ: Mapping[str, str] | None = None) -> Broker:
    """``broker`` wrapped in one :class:`~fedxab.broker.faults.FaultyBroker` per group of
    :data:`FAULTS_ENV` (``broker`` itself when the variable is unset or empty)."""
    spec = (os.environ if environ is None else environ).get(FAULTS_ENV, "")
    groups = parse_faults(spec)
    if not groups:
        return broker
    from fedxab.broker.faults import FaultyBroker

    for kwargs in groups:
        broker = FaultyBroker(broker, **kwargs)
    log.warning("%s is set: injecting transport faults (%s)", FAULTS_ENV, spec.strip())
    return broker


def kafka_security(settings: BrokerConfig) -> dict[str, Any]:
    """The ``security`` mapping of :class:`~fedxab.broker.kafka.KafkaBroker` for ``settings``."""
    security: dict[str, Any] = {"security_protocol": settings.security_protocol}
    if settings.sasl_mechanism == "OAUTHBEARER":
        security.update(
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=settings.sasl_oauth_token_provider,
        )
    elif settings.security_protocol.startswith("SASL"):
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
    """The broker named by ``url`` (not started), or ``None`` for ``inprocess://``; with
    :data:`FAULTS_ENV` set, wrapped in the faults it asks for (:func:`faults_from_env`)."""
    broker = _make_broker(url, settings or BrokerConfig())
    return None if broker is None else faults_from_env(broker)


def _make_broker(url: str, settings: BrokerConfig) -> Broker | None:
    if url == "memory://":
        return MemoryBroker(max_message_bytes=settings.max_message_bytes)
    if url == "inprocess://":
        return None
    if url.startswith("kafka://"):
        return kafka_broker(url, settings)
    raise ConfigError(
        "broker.url", f"must be memory://, inprocess:// or kafka://HOST:PORT, got {url!r}"
    )


def kafka_broker(url: str, settings: BrokerConfig) -> KafkaBroker:
    """The :class:`~fedxab.broker.kafka.KafkaBroker` of ``kafka://HOST:PORT[,...]`` with the
    ``[broker]`` settings (never wrapped in faults: also the operator's ``fedxab topics``)."""
    servers = url.removeprefix("kafka://").strip("/")
    for server in servers.split(","):
        host, _, port = server.rpartition(":")
        if (
            not url.startswith("kafka://")
            or not host
            or not port.isdigit()
            or not 0 < int(port) < 65536
        ):
            raise ConfigError(
                "broker.url", f"expected kafka://HOST:PORT[,HOST:PORT...], got {url!r}"
            )
    from fedxab.broker.kafka import KafkaBroker

    return KafkaBroker(
        servers,
        security=kafka_security(settings),
        topics=settings.topic_settings,
        max_message_bytes=settings.max_message_bytes,
        unreachable_s=settings.unreachable_s,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        join_groups=settings.join_groups,
    )
