"""The Kafka broker: :class:`~fedxab.broker.base.Broker` on aiokafka.

:class:`KafkaBroker` maps the interface of :mod:`fedxab.broker.base` onto Kafka:

- one shared producer publishes every record, with ``acks="all"``; idempotence and transactions
  are off (at-least-once plus dedupe is the design, and the dev broker does not support them);
- topics are created with the broker's :class:`~fedxab.broker.topics.TopicSettings`
  (``[broker]`` partitions, replication factor, retention, other topic settings) through the
  admin API, before the first publish or subscription that names them (as the in-memory broker
  does), so that a broker's auto-creation defaults never decide them; with ``create_topics =
  false`` a party only checks that they exist (:class:`~fedxab.broker.topics.MissingTopicError`
  otherwise) and ``fedxab topics create`` makes them (:mod:`fedxab.broker.topics`);
- a subscription reads every partition of the topic. With a group it starts at the group's
  committed offset (at the beginning if the group never committed) and commits to it by hand,
  without joining it unless ``join_groups`` (see Group timing); without a group it starts at the
  beginning and never commits;
- each read asks the broker to wait at most ``fetch_max_wait_ms`` for records (see Latency).

Liveness. A request that fails (connect, publish, create topics) is retried, waiting
``reconnect_backoff`` seconds and doubling the wait up to ``reconnect_backoff_max``, until the
broker has failed to answer for ``unreachable_s`` seconds (``[broker] unreachable_s``); then
:class:`BrokerError` is raised. A reader asks the broker for its
partitions' end offsets every :func:`check_interval` seconds: a broker that has not answered for
``unreachable_s`` seconds raises :class:`BrokerError`. So does a broker that no longer has the
records at a reader's position after the reader read some (restarted without its storage: the
run's records are gone); consumers never reset a lost position silently
(``auto_offset_reset="none"``), where a reader would skip the new log's records as already
seen and wait forever. The agents stop with it; a server restarted with its checkpoint resumes the
run (its broadcasts are published again on the new log).

Group timing. A group is only where the server keeps its committed offsets of the report topic:
one reader per run, which needs none of Kafka's group membership. Joining a group costs seconds
before the first record (Apache Kafka delays the first join of an empty group by
``group.initial.rebalance.delay.ms``, 3 s by default; the dev broker answers a JoinGroup after
half the session timeout; a member that died is waited for until its session expires), so by
default a subscription is assigned the partitions itself and only reads and writes the group's
offsets. With ``join_groups=True`` (``[broker] join_groups``) it joins instead: the partitions
are shared among the group's live members and rebalanced as they come and go, with
``session_timeout_ms`` (default 6000, the smallest session timeout Apache Kafka accepts by
default) and a heartbeat every third of it; a member whose event loop is blocked for longer than
that leaves the group, and its uncommitted records go to the next member.

Latency. A read waits at the broker for at most ``fetch_max_wait_ms`` (``[broker]
fetch_max_wait_ms``, default :data:`DEFAULT_FETCH_MAX_WAIT_MS`). Apache Kafka answers a waiting
read as soon as a record arrives, so there the setting only sets how often an idle reader asks
(once per wait); the dev broker answers a read that finds no record only once the wait is over,
even if records arrive meanwhile (:mod:`fedxab.broker.devbroker`), so there the setting bounds
the delay of every hop of a phase: with Kafka clients' default of 500 ms, a phase (broadcast,
then reports) took about 0.26 s on the dev broker, against a few milliseconds of work.

TLS and SASL are configured with ``security`` (:func:`security_options`).

Record size: Kafka refuses records above ``message.max.bytes`` (1 MiB by default). A signed
broadcast carries one 32-byte tag per client, 32 KB per thousand clients, so a run with
more than about 32,000 clients needs more: ``max_message_bytes`` (``[broker]
max_message_bytes``) sets the producer's ``max_request_size`` and the ``max.message.bytes`` of
the topics fedxab creates (the broker's ``message.max.bytes`` still caps topics it did not
create). A record above it is refused at once with a :class:`BrokerError` that says so: retrying
cannot help.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import AbstractTokenProvider
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    CommitFailedError,
    ConsumerStoppedError,
    IllegalStateError,
    KafkaError,
    MessageSizeTooLargeError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    for_code,
)
from aiokafka.helpers import create_ssl_context

from fedxab.broker.base import (
    DEFAULT_FETCH_MAX_WAIT_MS,
    DEFAULT_MAX_MESSAGE_BYTES,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    Broker,
    BrokerError,
    Record,
    Subscription,
    check_fetch_max_wait_ms,
    check_max_message_bytes,
    refuse_oversize_publish,
)
from fedxab.broker.topics import (
    AUTHORIZATION_FAILED,
    CreateResult,
    TopicSettings,
    TopicState,
    check_creation,
)
from fedxab.errors import ConfigError, ProtocolError

__all__ = ["SECURITY_KEYS", "BrokerError", "KafkaBroker", "security_options", "token_provider"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_SASL_KEYS = ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password")
_PASSWORD_KEYS = _SASL_KEYS[1:]
_TOKEN_KEY = "sasl_oauth_token_provider"
_SSL_KEYS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
SECURITY_KEYS = ("security_protocol", *_SASL_KEYS, _TOKEN_KEY, *_SSL_KEYS)
"""The settings ``security`` accepts."""
_TOKEN_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def _being_cancelled() -> bool:
    """Whether the current task is being cancelled (a CancelledError not meant for it comes
    from inside a library)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _check_record(topic: str, key: str | None, value: bytes, limit: int) -> None:
    """What a record to publish must be: bytes, a str key or None, at most ``limit`` bytes."""
    if not isinstance(value, bytes):
        raise ProtocolError(f"record values are bytes, got {type(value).__name__}")
    if key is not None and not isinstance(key, str):
        raise ProtocolError(f"record keys are str or None, got {type(key).__name__}")
    refuse_oversize_publish(topic, value, limit)


async def _stop_quietly(
    client: AIOKafkaConsumer | AIOKafkaProducer, what: str, timeout: float
) -> None:
    """Stop an aiokafka client, waiting at most ``timeout`` seconds. With its broker gone,
    stopping can fail, hang (a producer flushing records no broker takes), or raise the
    CancelledError of one of the client's own tasks; none of that may replace the error that
    made the agent stop (it is logged), nor hide a real cancellation (re-raised)."""
    try:
        async with asyncio.timeout(timeout):
            await client.stop()
    except TimeoutError:
        log.warning("stopping %s took over %g s: given up (the broker is gone?)", what, timeout)
    except asyncio.CancelledError:
        if _being_cancelled():
            raise
        log.warning("stopping %s was cut off inside the Kafka client", what)
    except KafkaError as exc:
        log.warning("stopping %s failed: %s", what, exc)


def check_interval(unreachable_s: float) -> float:
    """Seconds between a waiting reader's questions to the broker: a fifth of
    ``unreachable_s``, at most 5 s."""
    return min(5.0, unreachable_s / 5)


_STOP_S = 5.0
"""Seconds a Kafka client may take to stop (a healthy broker takes milliseconds; a gone one
would keep a producer flushing forever)."""

_MAX_REREADS = 3
"""Times a reader goes back for a skipped offset before it accepts the gap."""


def _field(key: str) -> str:
    return f"broker.security.{key}"


class _TokenFunction(AbstractTokenProvider):
    """A user's function as aiokafka's OAUTHBEARER token provider: called (in a worker thread,
    as it may ask an identity service) each time the client authenticates a connection; it
    returns the token (a coroutine function is awaited instead)."""

    def __init__(self, function: Callable[[], Any], name: str) -> None:
        self._function = function
        self._name = name

    async def token(self) -> str:
        try:
            if inspect.iscoroutinefunction(self._function):
                value = await self._function()
            else:
                value = await asyncio.to_thread(self._function)
        except Exception as exc:
            raise BrokerError(
                f"the OAUTHBEARER token provider {self._name} failed: "
                f"{type(exc).__name__}: {exc} ([broker] sasl_oauth_token_provider)"
            ) from exc
        if not isinstance(value, str) or not value:
            raise BrokerError(
                f"the OAUTHBEARER token provider {self._name} returned {type(value).__name__}, "
                "not a non-empty token string"
            )
        return value


def token_provider(provider: object) -> AbstractTokenProvider:
    """aiokafka's token provider for ``provider``: an
    :class:`~aiokafka.abc.AbstractTokenProvider` as it is, a function of no arguments that
    returns the token, or such a function named ``"package.module:function"`` (imported here).
    Anything else is a :class:`~fedxab.errors.ConfigError` naming the setting."""
    field = _field(_TOKEN_KEY)
    if isinstance(provider, AbstractTokenProvider):
        return provider
    name = repr(provider)
    if isinstance(provider, str):
        if not _TOKEN_SPEC.fullmatch(provider):
            raise ConfigError(
                field, f"expected 'package.module:function' (a token function), got {provider!r}"
            )
        module_name, _, attribute = provider.partition(":")
        try:
            found: Any = importlib.import_module(module_name)
            for part in attribute.split("."):
                found = getattr(found, part)
        except ImportError as exc:
            raise ConfigError(field, f"cannot import {module_name!r}: {exc}") from exc
        except AttributeError:
            raise ConfigError(field, f"{module_name!r} has no {attribute!r}") from None
        provider = found
    if not callable(provider):
        raise ConfigError(
            field,
            f"must be a token function (no arguments, returns the token) or an aiokafka "
            f"AbstractTokenProvider, got {name}",
        )
    return _TokenFunction(provider, name)


def security_options(security: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check TLS/SASL settings and turn them into keyword arguments of aiokafka's clients.

    Keys (all optional, all strings but the token provider): ``security_protocol`` (one of
    :data:`SECURITY_PROTOCOLS`, default ``PLAINTEXT``); for ``SASL_*`` protocols
    ``sasl_mechanism`` (one of :data:`SASL_MECHANISMS`) and, for ``PLAIN`` and ``SCRAM-*``,
    ``sasl_plain_username`` and ``sasl_plain_password``, or, for ``OAUTHBEARER``,
    ``sasl_oauth_token_provider`` (:func:`token_provider`); for ``SSL`` and ``SASL_SSL``
    ``ssl_cafile`` (CA bundle; the system CAs if absent), ``ssl_certfile`` and ``ssl_keyfile``
    (client certificate, for mutual TLS). A bad setting raises
    :class:`~fedxab.errors.ConfigError` naming it and what is allowed.
    """
    settings = dict(security or {})
    for key, value in settings.items():
        if key not in SECURITY_KEYS:
            raise ConfigError(
                _field(str(key)), f"unknown setting; allowed: {', '.join(SECURITY_KEYS)}"
            )
        if key != _TOKEN_KEY and (not isinstance(value, str) or not value):
            raise ConfigError(_field(key), f"must be a non-empty string, got {value!r}")
    protocol = settings.get("security_protocol", "PLAINTEXT")
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            _field("security_protocol"),
            f"must be one of {', '.join(SECURITY_PROTOCOLS)}, got {protocol!r}",
        )
    options: dict[str, Any] = {"security_protocol": protocol}

    uses_sasl = protocol.startswith("SASL_")
    for key in (*_SASL_KEYS, _TOKEN_KEY):
        if not uses_sasl and key in settings:
            raise ConfigError(
                _field(key),
                f"is only used with security_protocol SASL_PLAINTEXT or SASL_SSL, not {protocol}",
            )
    if uses_sasl:
        if "sasl_mechanism" not in settings:
            raise ConfigError(_field("sasl_mechanism"), f"is required with {protocol}")
        mechanism = settings["sasl_mechanism"]
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                _field("sasl_mechanism"),
                f"must be one of {', '.join(SASL_MECHANISMS)}, got {mechanism!r}",
            )
        oauth = mechanism == "OAUTHBEARER"
        needed, unused = (
            ((_TOKEN_KEY,), _PASSWORD_KEYS) if oauth else (_PASSWORD_KEYS, (_TOKEN_KEY,))
        )
        for key in needed:
            if key not in settings:
                raise ConfigError(
                    _field(key), f"is required with security_protocol {protocol} and {mechanism}"
                )
        for key in unused:
            if key in settings:
                raise ConfigError(_field(key), f"is not used with sasl_mechanism {mechanism}")
        options["sasl_mechanism"] = mechanism
        if oauth:
            options[_TOKEN_KEY] = token_provider(settings[_TOKEN_KEY])
        else:
            options.update({key: settings[key] for key in _PASSWORD_KEYS})

    uses_ssl = protocol in ("SSL", "SASL_SSL")
    files = {key: settings[key] for key in _SSL_KEYS if key in settings}
    for key, path in files.items():
        if not uses_ssl:
            raise ConfigError(
                _field(key), f"is only used with security_protocol SSL or SASL_SSL, not {protocol}"
            )
        if not Path(path).is_file():
            raise ConfigError(_field(key), f"no such file: {path}")
    if "ssl_keyfile" in files and "ssl_certfile" not in files:
        raise ConfigError(_field("ssl_certfile"), "is required when ssl_keyfile is given")
    if uses_ssl:
        try:
            options["ssl_context"] = create_ssl_context(
                cafile=files.get("ssl_cafile"),
                certfile=files.get("ssl_certfile"),
                keyfile=files.get("ssl_keyfile"),
            )
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            key = "ssl_certfile" if "ssl_certfile" in files else "ssl_cafile"
            raise ConfigError(_field(key), f"cannot load the TLS files: {exc}") from exc
    return options


def _positive(field: str, value: float, *, integer: bool = False) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise ConfigError(
            field, f"must be a positive {'integer' if integer else 'number'}, got {value!r}"
        )


class KafkaBroker(Broker):
    """A :class:`~fedxab.broker.base.Broker` on a Kafka cluster (see the module docstring).

    ``bootstrap_servers`` is ``host:port[,host:port...]``. ``topics`` says how the topics this
    broker creates are made, and whether it creates them (:class:`TopicSettings`).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "fedxab",
        security: Mapping[str, Any] | None = None,
        topics: TopicSettings | None = None,
        unreachable_s: float = 60.0,
        reconnect_backoff: float = 0.5,
        reconnect_backoff_max: float = 8.0,
        session_timeout_ms: int = 6000,
        join_groups: bool = False,
        fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
            raise ConfigError(
                "broker.bootstrap_servers",
                f"must be 'host:port' (comma-separated for several), got {bootstrap_servers!r}",
            )
        _positive("broker.unreachable_s", unreachable_s)
        _positive("broker.reconnect_backoff", reconnect_backoff)
        _positive("broker.reconnect_backoff_max", reconnect_backoff_max)
        _positive("broker.session_timeout_ms", session_timeout_ms, integer=True)
        check_fetch_max_wait_ms(fetch_max_wait_ms)
        self.max_message_bytes = check_max_message_bytes(max_message_bytes)
        self.bootstrap_servers = bootstrap_servers
        self.topics = TopicSettings() if topics is None else topics
        self.session_timeout_ms = session_timeout_ms
        self.join_groups = join_groups
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self._client_options: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers,
            "client_id": client_id,
            **security_options(security),
        }
        self.unreachable_s = unreachable_s
        self._backoff = reconnect_backoff
        self._backoff_max = reconnect_backoff_max
        self._producer: AIOKafkaProducer | None = None
        self._start_lock = asyncio.Lock()
        self._metadata_lock = asyncio.Lock()
        self._known_topics: set[str] = set()
        self._subscriptions: set[_KafkaSubscription] = set()

    async def _retry(self, action: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt`` until it succeeds, backing off between failures, for at most
        ``unreachable_s`` seconds (module docstring)."""
        delay, started, number = self._backoff, time.monotonic(), 0
        while True:
            number += 1
            try:
                return await attempt()
            except MessageSizeTooLargeError:
                raise  # the same record will not fit the next time either
            except KafkaError as exc:
                error = exc
                log.warning("%s failed (attempt %d): %s", action, number, exc)
            waited = time.monotonic() - started
            if waited + delay > self.unreachable_s:
                raise BrokerError(
                    f"could not {action} on Kafka at {self.bootstrap_servers}: no answer for "
                    f"{waited:.1f} s after {number} attempts ([broker] unreachable_s = "
                    f"{self.unreachable_s:g}): {error}"
                ) from error
            await asyncio.sleep(delay)
            delay = min(2 * delay, self._backoff_max)

    async def _start_producer(self) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            acks="all",
            enable_idempotence=False,
            max_request_size=self.max_message_bytes,
            **self._client_options,
        )
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        return producer

    async def start(self) -> None:
        """Connect the shared producer (retried, then :class:`BrokerError`); idempotent."""
        async with self._start_lock:
            if self._producer is None:
                self._producer = await self._retry("connect", self._start_producer)

    async def _ready_producer(self) -> AIOKafkaProducer:
        await self.start()
        assert self._producer is not None
        return self._producer

    async def stop(self) -> None:
        """Close open subscriptions, flush pending records and disconnect; idempotent."""
        for subscription in list(self._subscriptions):
            await subscription.close()
        producer, self._producer = self._producer, None
        if producer is not None:
            await _stop_quietly(producer, "the producer", _STOP_S)

    def _admin(self) -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(**self._client_options)

    async def _create_topics(self, names: list[str]) -> None:
        admin = self._admin()
        try:
            await admin.start()
            response = await admin.create_topics(
                [
                    NewTopic(
                        name,
                        self.topics.partitions_for(name),
                        replication_factor=self.topics.replication_factor,
                        topic_configs=self.topics.configs(name, self.max_message_bytes),
                    )
                    for name in names
                ]
            )
            results = [
                CreateResult(
                    topic,
                    code,
                    for_code(code).__name__ if code else "",
                    (message[0] if message and message[0] else for_code(code).description)
                    if code
                    else "",
                )
                for topic, code, *message in response.topic_errors
            ]
            refused = any(r.code in AUTHORIZATION_FAILED for r in results)
            existing = await admin.list_topics() if refused else []
        finally:
            await admin.close()
        check_creation(results, existing, self.bootstrap_servers)

    async def create_topics(self, names: list[str]) -> None:
        """Create the topics that do not exist yet (existing topics are left as they are); with
        ``create_topics = false`` only check that they exist, raising
        :class:`~fedxab.broker.topics.MissingTopicError` naming the first one missing."""
        unique = list(dict.fromkeys(names))  # Kafka rejects a request naming a topic twice
        if self.topics.create:
            await self.make_topics(unique)
            return
        existing = set(await self._retry("list the topics", self._list_topics))
        for name in unique:
            if name not in existing:
                raise self.topics.missing(name, self.bootstrap_servers)
        await self._ready_producer()
        for name in unique:
            await self.partitions_of(name)
        self._known_topics.update(unique)

    async def make_topics(self, names: list[str]) -> None:
        """Create the topics that do not exist yet, whatever ``create_topics`` says (the
        operator's ``fedxab topics create``)."""
        unique = list(dict.fromkeys(names))
        await self._ready_producer()
        await self._retry(f"create topics {unique}", lambda: self._create_topics(unique))
        for name in unique:  # the producer knows them before anything is published
            await self.partitions_of(name)
        self._known_topics.update(unique)

    async def _list_topics(self) -> list[str]:
        """Every topic of the cluster (a metadata request naming no topic: it creates none,
        where naming a missing one may auto-create it)."""
        admin = self._admin()
        try:
            await admin.start()
            return await admin.list_topics()
        finally:
            await admin.close()

    async def _describe(self, names: list[str]) -> list[TopicState]:
        admin = self._admin()
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            present = [name for name in names if name in existing]
            described = {t["topic"]: t for t in await admin.describe_topics(present)}
            # every setting of each topic: the dev broker drops a request that names some
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name) for name in present]
            )
        finally:
            await admin.close()
        wanted = {*self.topics.configs("", self.max_message_bytes), "retention.ms"}
        configs: dict[str, dict[str, str]] = {}
        for response in responses:
            for code, _message, _kind, name, entries in (r[:5] for r in response.resources):
                if code == 0:
                    configs[name] = {e[0]: e[1] for e in entries if e[0] in wanted and e[1]}
        states = []
        for name in names:
            topic = described.get(name)
            if topic is None or topic["error_code"] != 0:
                states.append(TopicState(name, exists=False))
                continue
            partitions = topic["partitions"]
            states.append(
                TopicState(
                    name,
                    exists=True,
                    partitions=len(partitions),
                    replication_factor=max((len(p["replicas"]) for p in partitions), default=0),
                    configs=configs.get(name, {}),
                )
            )
        return states

    async def describe_topics(self, names: list[str]) -> list[TopicState]:
        """What the cluster says of each of ``names``, creating none: whether it exists, its
        partitions, replication factor and the settings fedxab sets."""
        unique = list(dict.fromkeys(names))
        return await self._retry(f"describe topics {unique}", lambda: self._describe(unique))

    async def _delete(self, names: list[str]) -> list[str]:
        admin = self._admin()
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            present = [name for name in names if name in existing]
            if not present:
                return []
            response = await admin.delete_topics(present)
        finally:
            await admin.close()
        for topic, code, *_ in response.topic_error_codes:
            if code not in (0, UnknownTopicOrPartitionError.errno):
                raise BrokerError(f"cannot delete topic {topic!r}: {for_code(code).__name__}")
        gone = {topic for topic, code, *_ in response.topic_error_codes if code == 0}
        return [name for name in present if name in gone]

    async def delete_topics(self, names: list[str]) -> list[str]:
        """Delete those of ``names`` that exist (their records are lost); the ones deleted."""
        unique = list(dict.fromkeys(names))
        deleted = await self._retry(f"delete topics {unique}", lambda: self._delete(unique))
        self._known_topics.difference_update(deleted)
        return deleted

    async def _ensure_topics(self, names: Iterable[str]) -> None:
        """Create (or, with ``create_topics = false``, check) the topics this broker object
        has not created or seen yet."""
        missing = [name for name in names if name not in self._known_topics]
        if missing:
            await self.create_topics(missing)

    async def partitions_of(self, topic: str) -> list[int]:
        """The partition numbers of ``topic`` (waiting for the cluster's metadata to list it).

        One topic at a time: the Kafka client, asked about a new topic while it is updating
        its metadata for another, can miss the new one and wait 100 ms to ask again."""
        producer = await self._ready_producer()
        async with self._metadata_lock:
            partitions = await self._retry(
                f"read the metadata of topic {topic!r}", lambda: producer.partitions_for(topic)
            )
        return sorted(partitions)

    async def publish(self, topic: str, key: str | None, value: bytes) -> None:
        """Append one record (``key`` encoded as UTF-8); returns once all replicas have it
        (:meth:`publish_many` of one record)."""
        await self.publish_many(topic, [(key, value)])

    async def publish_many(self, topic: str, records: Sequence[tuple[str | None, bytes]]) -> None:
        """Append the records in one go: all are handed to the producer, which batches them,
        then every acknowledgement is awaited (order is kept: one partition's records are
        sent in order). A failed send is retried like a connection (for up to
        ``unreachable_s``, with backoff), the whole batch again (records delivered twice are
        dropped by the receivers' dedupe), then raises :class:`BrokerError`; a record larger
        than ``max_message_bytes`` (or than the broker takes) raises it at once."""
        for key, value in records:
            _check_record(topic, key, value, self.max_message_bytes)
        if not records:
            return
        producer = await self._ready_producer()
        await self._ensure_topics([topic])

        async def attempt() -> None:
            sent = [
                await producer.send(topic, value, key=None if key is None else key.encode())
                for key, value in records
            ]
            await asyncio.gather(*sent)

        try:
            # Retried with backoff: a broker that restarts is unreachable for a while.
            await self._retry(f"publish to topic {topic!r}", attempt)
        except MessageSizeTooLargeError as exc:
            size = max(len(value) for _, value in records)
            raise BrokerError(
                f"a record of {size:,} bytes for topic {topic!r} is larger than Kafka takes "
                f"({self.max_message_bytes:,} bytes): {exc}. Raise [broker] max_message_bytes, "
                "and the Kafka broker's message.max.bytes if the topics were not created by "
                "fedxab (a signed broadcast carries 32 bytes per client)"
            ) from exc

    def subscribe(self, topic: str, group: str | None) -> Subscription:
        """A subscription to ``topic``; its consumer connects on ``async with`` or first use."""
        subscription = _KafkaSubscription(self, topic, group)
        self._subscriptions.add(subscription)
        return subscription

    async def _open_consumer(self, topic: str, group: str | None) -> AIOKafkaConsumer:
        """A started consumer of ``topic`` (see the module docstring for the kinds)."""
        await self._ensure_topics([topic])
        partitions = await self.partitions_of(topic)
        joins = group is not None and self.join_groups
        membership = (
            {
                "session_timeout_ms": self.session_timeout_ms,
                "heartbeat_interval_ms": max(1, self.session_timeout_ms // 3),
            }
            if joins
            else {}
        )

        async def attempt() -> AIOKafkaConsumer:
            consumer = AIOKafkaConsumer(
                *([topic] if joins else []),
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="none",  # a lost log is an error, see _out_of_range
                fetch_max_wait_ms=self.fetch_max_wait_ms,
                **membership,
                **self._client_options,
            )
            try:
                await consumer.start()
                if not joins:
                    await _assign(consumer, [TopicPartition(topic, p) for p in partitions], group)
            except BaseException:
                await consumer.stop()
                raise
            return consumer

        return await self._retry(f"subscribe to topic {topic!r}", attempt)


async def _assign(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition], group: str | None
) -> None:
    """Assign ``partitions`` to ``consumer``, each at ``group``'s committed offset, or at the
    beginning (no group, or a group that never committed there). The offsets are asked for
    before the assignment: the consumer would otherwise ask before it knows the group's
    coordinator, fail, and wait 100 ms to ask again."""
    committed = {tp: await consumer.committed(tp) for tp in partitions} if group else {}
    consumer.assign(partitions)
    fresh = [tp for tp in partitions if committed.get(tp) is None]
    for tp, offset in committed.items():
        if offset is not None:
            consumer.seek(tp, offset)
    if fresh:
        await consumer.seek_to_beginning(*fresh)


class _KafkaSubscription(Subscription):
    """A consumer of one topic, created on first use and stopped by ``close()``."""

    def __init__(self, broker: KafkaBroker, topic: str, group: str | None) -> None:
        self._broker = broker
        self._topic = topic
        self._group = group
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._committed: dict[TopicPartition, int] = {}

    async def _ready(self) -> AIOKafkaConsumer | None:
        """The started consumer, or ``None`` once the subscription is closed."""
        async with self._lock:
            if self._consumer is None and not self._closed:
                self._consumer = await self._broker._open_consumer(self._topic, self._group)
            return self._consumer

    async def __aenter__(self) -> Subscription:
        await self._ready()
        return self

    def __aiter__(self) -> AsyncIterator[Record]:
        return self._records()

    async def _records(self) -> AsyncIterator[Record]:
        """Yield records until the subscription is closed (also from another task)."""
        consumer = await self._ready()
        if consumer is None:
            return
        following: dict[int, int] = {}  # partition -> the offset the next record must have
        rereads: Counter[tuple[int, int]] = Counter()
        interval = check_interval(self._broker.unreachable_s)
        answered = checked = time.monotonic()
        digests: dict[int, int] = {}  # partition -> hash of the last record yielded
        verifying: dict[int, float] = {}  # partition -> when its last record was asked again
        try:
            while True:
                if time.monotonic() - checked >= interval:
                    answered, ends = await self._check_log(consumer, answered)
                    self._verify_short_logs(consumer, ends, following, verifying, interval)
                    checked = time.monotonic()
                try:
                    async with asyncio.timeout(interval):  # unlike wait_for, no task per read
                        message = await consumer.getone()
                except TimeoutError:
                    continue
                except ConsumerStoppedError:
                    return  # closed (also from another task)
                except NoOffsetForPartitionError as exc:  # a group's first read: from the start
                    await consumer.seek_to_beginning(*exc.args)
                    continue
                except OffsetOutOfRangeError as exc:
                    await self._out_of_range(consumer, exc, following)
                    continue
                except asyncio.CancelledError:
                    if _being_cancelled():
                        raise
                    raise BrokerError(  # from inside the Kafka client, not a cancellation
                        f"reading topic {self._topic!r} from the Kafka broker at "
                        f"{self._broker.bootstrap_servers} was cut off inside the Kafka client "
                        "(the broker went away?)"
                    ) from None
                answered = time.monotonic()
                want = following.get(message.partition)
                if message.partition in verifying and want is not None:
                    if message.offset == want - 1:  # the last record read, asked again
                        del verifying[message.partition]
                        if hash(message.value) != digests[message.partition]:
                            raise self._lost(message.partition, want - 1, "holds another record")
                    continue
                if want is not None and message.offset < want:
                    continue  # delivered again after a seek or a rebalance: already yielded
                if want is not None and message.offset > want:
                    rereads[(message.partition, want)] += 1
                    if rereads[(message.partition, want)] <= _MAX_REREADS:
                        self._resume_at(message.partition, message.offset, want)
                        continue
                    log.warning(
                        "topic %r partition %d: offsets %d..%d are missing; going on",
                        self._topic,
                        message.partition,
                        want,
                        message.offset - 1,
                    )
                following[message.partition] = message.offset + 1
                digests[message.partition] = hash(message.value)
                key = None if message.key is None else message.key.decode(errors="replace")
                yield Record(message.topic, message.partition, message.offset, key, message.value)
        except KafkaError as exc:
            raise BrokerError(f"consuming topic {self._topic!r} failed: {exc}") from exc

    async def _out_of_range(
        self, consumer: AIOKafkaConsumer, exc: OffsetOutOfRangeError, following: dict[int, int]
    ) -> None:
        """The broker has no record at this reader's position. Where the reader has already
        read records of the partition, the broker lost them (restarted without its storage):
        :class:`BrokerError`. Elsewhere (a committed offset beyond a topic made again) the
        reader starts from the beginning."""
        for tp in exc.args[0]:
            if tp.partition in following:
                raise self._lost(tp.partition, following[tp.partition] - 1, "is gone")
            await consumer.seek_to_beginning(tp)

    def _lost(self, partition: int, offset: int, what: str) -> BrokerError:
        return BrokerError(
            f"the Kafka broker at {self._broker.bootstrap_servers} lost records of topic "
            f"{self._topic!r}: the record at offset {offset} of partition {partition}, which "
            f"this reader had read, {what} (was the broker restarted without its storage?). "
            "Stop every party; restart the server with its checkpoint directory to resume the "
            "run, then the clients"
        )

    def _verify_short_logs(
        self,
        consumer: AIOKafkaConsumer,
        ends: dict[TopicPartition, int],
        following: dict[int, int],
        verifying: dict[int, float],
        interval: float,
    ) -> None:
        """A partition whose end offset lies before what this reader has read is either a
        broker whose end offset lags (the dev broker's can, by a batch) or a lost log: the
        reader asks for the last record it read again, and the record decides (the same:
        read on; another: lost, in ``_records``). One that has not come back within
        ``interval`` seconds is not there any more: :class:`BrokerError`."""
        now = time.monotonic()
        for partition, since in verifying.items():
            if now - since > interval:
                raise self._lost(partition, following[partition] - 1, "is not served any more")
        for tp, end in ends.items():
            read_to = following.get(tp.partition)
            if read_to is not None and end < read_to and tp.partition not in verifying:
                verifying[tp.partition] = now
                consumer.seek(tp, read_to - 1)

    async def _check_log(
        self, consumer: AIOKafkaConsumer, answered: float
    ) -> tuple[float, dict[TopicPartition, int]]:
        """Ask the broker for the end offsets: the time of its last answer and the offsets
        (none if it did not answer), or :class:`BrokerError` once it has not answered for
        ``unreachable_s``."""
        limit = self._broker.unreachable_s
        partitions = list(consumer.assignment())
        if not partitions:  # a group member between assignments: ask about the topic's
            partitions = [
                TopicPartition(self._topic, p)
                for p in range(self._broker.topics.partitions_for(self._topic))
            ]
        try:
            async with asyncio.timeout(limit):
                ends = await consumer.end_offsets(partitions)
        except (KafkaError, TimeoutError) as exc:
            silent = time.monotonic() - answered
            if silent > limit:
                raise BrokerError(
                    f"the Kafka broker at {self._broker.bootstrap_servers} has not answered "
                    f"for {silent:.0f} s ([broker] unreachable_s = {limit:g}) while reading "
                    f"topic {self._topic!r}: {exc or type(exc).__name__}"
                ) from exc
            return answered, {}
        return time.monotonic(), ends

    def _resume_at(self, partition: int, got: int, want: int) -> None:
        """Read ``partition`` again from offset ``want``: record ``got`` came first. Offsets of
        fedxab's topics are contiguous (no compaction, no transactions), so a jump means the
        broker skipped records (the dev broker does that, about once in 10,000 records, to a
        reader while writers append); a record never seen is never passed over, unless it is
        still missing after :data:`_MAX_REREADS` tries."""
        log.warning(
            "topic %r partition %d: got offset %d, expected %d; reading from %d again",
            self._topic,
            partition,
            got,
            want,
            want,
        )
        assert self._consumer is not None
        self._consumer.seek(TopicPartition(self._topic, partition), want)

    async def commit(self, record: Record) -> None:
        """Commit ``record.offset + 1`` for its partition (never moving a commit backwards).

        If the partition was reassigned to another member meanwhile, the commit is skipped with a
        warning: that member gets the record again (at-least-once).
        """
        if self._group is None:
            return
        if record.topic != self._topic:
            raise ProtocolError(
                f"cannot commit a record of topic {record.topic!r} on a subscription to "
                f"{self._topic!r}"
            )
        partition = TopicPartition(record.topic, record.partition)
        if record.offset + 1 <= self._committed.get(partition, 0):
            return
        consumer = await self._ready()
        if consumer is None:
            raise BrokerError(f"cannot commit on a closed subscription to {self._topic!r}")
        try:
            await consumer.commit({partition: record.offset + 1})
        except (CommitFailedError, IllegalStateError) as exc:
            log.warning("commit of %s offset %d skipped: %s", partition, record.offset, exc)
            return
        except KafkaError as exc:
            raise BrokerError(f"commit on topic {self._topic!r} failed: {exc}") from exc
        self._committed[partition] = record.offset + 1

    async def end_offsets(self) -> dict[int, int]:
        consumer = await self._ready()
        if consumer is None:
            raise BrokerError(
                f"cannot read end offsets on a closed subscription to {self._topic!r}"
            )
        partitions = [
            TopicPartition(self._topic, p) for p in await self._broker.partitions_of(self._topic)
        ]
        try:
            offsets = await consumer.end_offsets(partitions)
        except KafkaError as exc:
            raise BrokerError(f"reading end offsets of {self._topic!r} failed: {exc}") from exc
        return {tp.partition: offset for tp, offset in offsets.items()}

    async def close(self) -> None:
        """Stop the consumer (leaving its group); uncommitted records go to the group again."""
        async with self._lock:
            self._closed = True
            consumer, self._consumer = self._consumer, None
        self._broker._subscriptions.discard(self)
        if consumer is not None:
            await _stop_quietly(consumer, f"the consumer of topic {self._topic!r}", _STOP_S)
