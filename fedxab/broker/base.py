"""The Broker interface: topics of byte records, consumer groups, commit after handling.

A broker moves opaque byte records (encoded envelopes,
:mod:`fedxab.broker.codec`) between agents. Its semantics are Kafka's, reduced to what the agents
use, so that the in-memory broker (:mod:`fedxab.broker.memory`) and the Kafka broker
(:mod:`fedxab.broker.kafka`) are interchangeable:

- a **topic** is an append-only log of records; each record has a ``key`` (the sender, e.g. a
  client id, for the report topic; ``None`` elsewhere), a ``value`` (bytes) and an ``offset``
  (position in its partition, increasing from 0);
- :meth:`Broker.subscribe` with a ``group`` resumes from the group's last committed offset (or
  from the beginning if it never committed): a consumer that restarts gets, again, every record it
  had not committed (**at-least-once**). Handlers are idempotent (duplicates are dropped by
  ``(run_id, phase, sender, msg_id)``), so redelivery never double-counts;
- :meth:`Broker.subscribe` with ``group=None`` reads the whole topic from the beginning and never
  commits: how a client rebuilds its state by replaying every broadcast;
- :meth:`Subscription.commit` marks every record up to and including the given one as handled.

Every broker takes records up to ``max_message_bytes`` (``[broker] max_message_bytes``, 1 MiB by
default): a larger one is refused when published (:class:`BrokerError`), and a larger one read
from a topic (a hostile or misconfigured publisher) is refused by its size before any decoding
(:func:`~fedxab.broker.codec.check_record_size`, :class:`~fedxab.broker.codec.RecordTooLarge`:
part of the pure codec, so that a reader of records needs no broker; named here too).

Exactly-once delivery (idempotent or transactional producers) is not used: at-least-once plus
dedupe is the design.

Topics are named ``{namespace}.{run_id}.{kind}`` (:func:`topic_name`), kind one of
:data:`TOPIC_KINDS`.
"""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from fedxab.broker.codec import RecordTooLarge, check_record_size
from fedxab.errors import ConfigError, FedxabError

__all__ = [
    "DEFAULT_FETCH_MAX_WAIT_MS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_FETCH_MAX_WAIT_MS",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "TOPIC_KINDS",
    "Broker",
    "BrokerError",
    "Record",
    "RecordTooLarge",
    "Subscription",
    "check_fetch_max_wait_ms",
    "check_max_message_bytes",
    "check_record_size",
    "refuse_oversize_publish",
    "run_topics",
    "topic_name",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Kafka security protocols fedxab passes to the client (config and KafkaBroker check both)."""
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
"""SASL mechanisms fedxab passes to the Kafka client."""
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
"""Kafka's default largest record (``message.max.bytes``, ``max_request_size``): 1 MiB."""
DEFAULT_FETCH_MAX_WAIT_MS = 25
"""How long a Kafka read waits at the broker for records, in ms (``[broker] fetch_max_wait_ms``;
Kafka clients' default is 500: :mod:`fedxab.broker.kafka`, Latency)."""
MAX_FETCH_MAX_WAIT_MS = 10_000
"""The longest wait accepted (well under the Kafka client's 40 s request timeout)."""


class BrokerError(FedxabError, ConnectionError):
    """The broker could not be reached, or refused a request (after retries, where they help)."""


def check_max_message_bytes(value: object) -> int:
    """``value`` if it is a positive int, else :class:`ConfigError` naming the setting."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            "broker.max_message_bytes", f"must be a positive number of bytes, got {value!r}"
        )
    return value


def check_fetch_max_wait_ms(value: object) -> int:
    """``value`` if it is an int from 1 to :data:`MAX_FETCH_MAX_WAIT_MS`, else
    :class:`ConfigError` naming the setting (0 would make every idle reader ask without pause)."""
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole or not isinstance(value, int) or not 1 <= value <= MAX_FETCH_MAX_WAIT_MS:
        raise ConfigError(
            "broker.fetch_max_wait_ms",
            f"must be a whole number of milliseconds from 1 to {MAX_FETCH_MAX_WAIT_MS:,}, "
            f"got {value!r}",
        )
    return value


def refuse_oversize_publish(topic: str, value: bytes, limit: int) -> None:
    """:class:`BrokerError` for a record above ``limit`` that this party was about to publish."""
    if len(value) > limit:
        raise BrokerError(
            f"a record of {len(value):,} bytes for topic {topic!r} is larger than [broker] "
            f"max_message_bytes ({limit:,} bytes). Raise it on every party (a signed broadcast "
            "carries 32 bytes per client)"
        )


TOPIC_KINDS = ("broadcast", "report", "control", "ledger")
"""broadcast: server -> clients; report: clients -> server (key = client id); control: join,
leave, heartbeat, telemetry, abort; ledger: privacy events."""

_NAME_PART = re.compile(r"[A-Za-z0-9_-]{1,100}")
_NAMESPACE = re.compile(r"[A-Za-z0-9._-]{1,100}")


def _check_name_part(field: str, value: str, pattern: re.Pattern[str] = _NAME_PART) -> None:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        dots = "'.', " if pattern is _NAMESPACE else ""
        raise ConfigError(
            field,
            f"must be 1 to 100 letters, digits, {dots}'_' or '-' (it names Kafka topics), "
            f"got {value!r}",
        )


def topic_name(namespace: str, run_id: str, kind: str) -> str:
    """``{namespace}.{run_id}.{kind}``: letters, digits, ``_`` and ``-`` (Kafka-legal), and
    dots in the namespace, so that one prefixed ACL can cover many namespaces
    (:mod:`fedxab.broker.topics`)."""
    _check_name_part("broker.namespace", namespace, _NAMESPACE)
    _check_name_part("run_id", run_id)
    if kind not in TOPIC_KINDS:
        raise ConfigError("topic kind", f"must be one of {', '.join(TOPIC_KINDS)}, got {kind!r}")
    return f"{namespace}.{run_id}.{kind}"


def lobby_topic(namespace: str) -> str:
    """``{namespace}.lobby``: where the parties of a namespace's runs check, before they meet on
    their run's topics, that they share the run protocol (:mod:`fedxab.agents.lobby`)."""
    _check_name_part("broker.namespace", namespace, _NAMESPACE)
    return f"{namespace}.lobby"


def run_topics(namespace: str, run_id: str) -> dict[str, str]:
    """The four topics of one run, by kind."""
    return {kind: topic_name(namespace, run_id, kind) for kind in TOPIC_KINDS}


@dataclass(frozen=True)
class Record:
    """One record read from a topic."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes


class Subscription(abc.ABC):
    """An open consumer of one topic: iterate records, commit what has been handled.

    Use as ``async with broker.subscribe(topic, group) as sub: async for record in sub: ...``.
    """

    @abc.abstractmethod
    def __aiter__(self) -> AsyncIterator[Record]: ...

    @abc.abstractmethod
    async def commit(self, record: Record) -> None:
        """Mark ``record`` and every earlier record of its partition as handled by the group.

        A no-op for a subscription without a group.
        """

    @abc.abstractmethod
    async def end_offsets(self) -> dict[int, int]:
        """Per partition, the offset the next published record will get (the log's end)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop consuming; uncommitted records will be delivered again to the group."""

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Broker(abc.ABC):
    """A transport of byte records between agents (see the module docstring)."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """The largest record published or read (module docstring)."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect (Kafka) or prepare; idempotent."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Flush pending records and disconnect; idempotent."""

    @abc.abstractmethod
    async def create_topics(self, names: list[str]) -> None:
        """Create the topics that do not exist yet (an existing topic is left as it is)."""

    @abc.abstractmethod
    async def publish(self, topic: str, key: str | None, value: bytes) -> None:
        """Append one record to ``topic``; returns once the broker has acknowledged it."""

    async def publish_many(self, topic: str, records: Sequence[tuple[str | None, bytes]]) -> None:
        """Append ``(key, value)`` records to ``topic`` in order; returns once the broker has
        acknowledged every one. A broker that can batch (Kafka) sends them together: a client
        agent publishes one report per hosted client, thousands at a time."""
        for key, value in records:
            await self.publish(topic, key, value)

    @abc.abstractmethod
    def subscribe(self, topic: str, group: str | None) -> Subscription:
        """A consumer of ``topic``: with ``group``, from the group's committed offset (at-least-
        once); with ``group=None``, from the beginning, without commits."""

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def transport_of(broker: Broker) -> str:
    """The transport's name for the metrics' run info: ``memory``, ``kafka``, ... (a wrapper
    such as :class:`~fedxab.broker.faults.FaultyBroker` names what it wraps)."""
    inner = getattr(broker, "inner", None)
    if isinstance(inner, Broker):
        return transport_of(inner)
    return type(broker).__name__.lower().removesuffix("broker") or "broker"
