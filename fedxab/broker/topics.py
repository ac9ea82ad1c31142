"""fedxab's Kafka topics as an operator sees them: their settings, their names, and the
``fedxab topics create|describe|delete`` operations.

**Settings** (``[broker]``, :class:`TopicSettings`): the partition count of the report, control,
ledger and lobby topics (a broadcast topic always has one partition, so that clients read the
broadcasts in order), the replication factor, the retention (``retention.ms``; unset: the
cluster's default; the ledger topics may keep theirs longer) and any other topic setting Kafka
takes (``topic_config``), with the ``max.message.bytes`` of ``[broker] max_message_bytes``.

**Who creates the topics.** By default every party creates the topics of its run that do not
exist yet, through the admin API, so a broker's auto-creation defaults never decide a topic's
settings. Where only operators may create topics (Amazon MSK and Confluent Cloud turn
auto-creation off, and clients often lack the Create ACL), ``[broker] create_topics = false``:
the operator runs ``fedxab topics create CONFIG`` once, and a party that finds one of its topics
missing stops at once with :class:`MissingTopicError`, naming the topic and that command.

**Names.** Every topic and the server's consumer group start with ``{namespace}.``
(:func:`~fedxab.broker.base.topic_name`): ``{namespace}.lobby``,
``{namespace}.{run_id}.{broadcast|report|control|ledger}`` and the group
``{namespace}.{run_id}.server``. A namespace may contain dots, so one prefixed ACL (say on
``team-a.``) covers every job whose namespace starts with it (``team-a.tuning``, ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fedxab.broker.base import BrokerError, lobby_topic, run_topics
from fedxab.errors import ConfigError

if TYPE_CHECKING:
    from fedxab.broker.kafka import KafkaBroker

__all__ = [
    "AUTHORIZATION_FAILED",
    "CREATE_COMMAND",
    "TOPIC_ALREADY_EXISTS",
    "CreateResult",
    "MissingTopicError",
    "TopicSettings",
    "TopicState",
    "check_creation",
    "create_run_topics",
    "delete_run_topics",
    "describe_run_topics",
    "differences",
    "topic_config_table",
    "topics_of",
]

CREATE_COMMAND = "fedxab topics create CONFIG"
"""The operator's command that creates a job's topics (with the job's --seed and --namespace)."""

_OWN_SETTINGS = {
    "max.message.bytes": "max_message_bytes",
    "retention.ms": "retention_ms",
}
"""Topic configs that have their own ``[broker]`` setting (``topic_config`` refuses them)."""
_CONFIG_NAME = re.compile(r"[a-z][a-z0-9]*(\.[a-z0-9]+)*")


class MissingTopicError(BrokerError):
    """A topic of the run does not exist and this party may not create it."""


def _config_value(name: str, value: object) -> str:
    """A ``topic_config`` value as Kafka takes it: a string (TOML numbers and booleans are
    written as Kafka writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return str(value)
    if isinstance(value, str) and value:
        return value
    raise ConfigError(
        f"broker.topic_config.{name}",
        f"must be a non-empty string, a number or a boolean, got {value!r}",
    )


def topic_config_table(table: object) -> tuple[tuple[str, str], ...]:
    """``[broker] topic_config`` (a table of Kafka topic settings, e.g.
    ``{"min.insync.replicas" = 2}``) as sorted ``(name, value)`` string pairs; a setting with
    its own ``[broker]`` key, or a name Kafka would not know, is a :class:`ConfigError`."""
    if isinstance(table, tuple):  # already converted (a section built in code)
        table = dict(table)
    if not isinstance(table, Mapping):
        raise ConfigError(
            "broker.topic_config",
            f'expected a table of Kafka topic settings, e.g. {{ "min.insync.replicas" = 2 }}, '
            f"got {table!r}",
        )
    pairs = []
    for name, value in table.items():
        if not isinstance(name, str) or not _CONFIG_NAME.fullmatch(name):
            raise ConfigError(
                "broker.topic_config",
                f"{name!r} is not a Kafka topic setting name (lower-case words joined by '.', "
                "e.g. min.insync.replicas)",
            )
        if name in _OWN_SETTINGS:
            raise ConfigError(
                f"broker.topic_config.{name}",
                f"has its own setting: use [broker] {_OWN_SETTINGS[name]}",
            )
        pairs.append((name, _config_value(name, value)))
    return tuple(sorted(pairs))


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"broker.{name}", f"must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class TopicSettings:
    """How the topics a party (or ``fedxab topics create``) creates are made (module doc)."""

    partitions: int = 1
    """Partitions of the report, control, ledger and lobby topics (broadcast topics: one)."""
    replication_factor: int = 1
    """Copies of each partition: 3 on a production cluster (Confluent Cloud requires it)."""
    retention_ms: int | None = None
    """``retention.ms`` of every topic; ``None``: the cluster's default; -1: kept forever."""
    ledger_retention_ms: int | None = None
    """``retention.ms`` of the ledger topics (a run's privacy record, which an auditor rebuilds
    from); ``None``: as ``retention_ms``."""
    config: tuple[tuple[str, str], ...] = ()
    """Other Kafka topic settings, as ``(name, value)`` strings (:func:`topic_config_table`)."""
    create: bool = True
    """Whether a party creates its run's missing topics (else :class:`MissingTopicError`)."""

    def __post_init__(self) -> None:
        _positive_int("partitions", self.partitions)
        _positive_int("replication_factor", self.replication_factor)
        for name in ("retention_ms", "ledger_retention_ms"):
            retention = getattr(self, name)
            if retention is not None and (
                isinstance(retention, bool) or not isinstance(retention, int) or retention < -1
            ):
                raise ConfigError(
                    f"broker.{name}",
                    f"must be milliseconds > 0, or -1 to keep records forever, got {retention!r}",
                )
            if retention == 0:
                raise ConfigError(f"broker.{name}", "must not be 0 (records would be dropped)")
        object.__setattr__(self, "config", topic_config_table(self.config))

    def partitions_for(self, name: str) -> int:
        """``partitions``, except for a broadcast topic: one partition, so that every client
        reads the server's broadcasts in the order they were sent."""
        return 1 if name.endswith(".broadcast") else self.partitions

    def configs(self, name: str, max_message_bytes: int) -> dict[str, str]:
        """The topic configs the topic ``name`` gets when it is created."""
        configs = {"max.message.bytes": str(max_message_bytes), **dict(self.config)}
        retention = self.retention_ms
        if name.endswith(".ledger") and self.ledger_retention_ms is not None:
            retention = self.ledger_retention_ms
        if retention is not None:
            configs["retention.ms"] = str(retention)
        return configs

    def missing(self, topic: str, servers: str) -> MissingTopicError:
        """The one-line error of a party that found ``topic`` absent and may not create it."""
        return MissingTopicError(
            f"topic {topic!r} does not exist on Kafka at {servers}, and this party does not "
            f"create topics ([broker] create_topics = false): create the job's topics first with "
            f"`{CREATE_COMMAND}` (with the job's --seed and --namespace)"
        )


@dataclass(frozen=True)
class TopicState:
    """One topic as the cluster describes it (``exists`` False: absent, nothing else known)."""

    name: str
    exists: bool
    partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    """The settings fedxab sets (max.message.bytes, retention.ms, ``topic_config``) that the
    cluster reports for the topic; a setting it does not report is left out."""


TOPIC_ALREADY_EXISTS = 36
AUTHORIZATION_FAILED = (29, 31)
"""Kafka's error codes TOPIC_AUTHORIZATION_FAILED and CLUSTER_AUTHORIZATION_FAILED: Kafka checks
a principal's Create permission before it looks whether the topic exists."""
_SETTING_OF_ERROR = {
    37: "partitions",  # INVALID_PARTITIONS
    38: "replication_factor",  # INVALID_REPLICATION_FACTOR (e.g. more than the brokers)
    40: "retention_ms, max_message_bytes or [broker.topic_config]",  # INVALID_CONFIG
    44: "topic settings, refused by the cluster's creation policy",  # POLICY_VIOLATION
}


@dataclass(frozen=True)
class CreateResult:
    """Kafka's answer about one topic of a CreateTopics request."""

    topic: str
    code: int
    error: str
    """The error's name (``TopicAuthorizationFailedError``, ...), empty for success."""
    detail: str = ""


def check_creation(results: Iterable[CreateResult], existing: Iterable[str], servers: str) -> None:
    """Accept a CreateTopics answer where every topic was created, already existed, or exists
    and this principal may not create topics (a client without the Create permission, once an
    operator or the server made them); otherwise raise, naming the topic and what to change:
    :class:`MissingTopicError` when a topic is missing and may not be created, or
    :class:`~fedxab.broker.base.BrokerError` naming the ``[broker]`` setting Kafka refused."""
    there = set(existing)
    for result in results:
        if result.code in (0, TOPIC_ALREADY_EXISTS):
            continue
        if result.code in AUTHORIZATION_FAILED:
            if result.topic in there:
                continue
            raise MissingTopicError(
                f"topic {result.topic!r} does not exist on Kafka at {servers}, and this "
                f"principal may not create it ({result.error}): create the job's topics with "
                f"`{CREATE_COMMAND}` (with the job's --seed and --namespace), or grant this "
                "principal Create on them (and Describe, without which it cannot see them)"
            )
        setting = _SETTING_OF_ERROR.get(result.code)
        hint = f" (check [broker] {setting})" if setting else ""
        raise BrokerError(
            f"cannot create topic {result.topic!r} on Kafka at {servers}: {result.error}: "
            f"{result.detail}{hint}"
        )


def topics_of(namespace: str, run_ids: Iterable[str]) -> list[str]:
    """Every topic of the runs ``run_ids`` in ``namespace``: the namespace's lobby, then each
    run's broadcast, report, control and ledger topics."""
    names = [lobby_topic(namespace)]
    for run_id in run_ids:
        names += run_topics(namespace, run_id).values()
    return list(dict.fromkeys(names))


def differences(state: TopicState, settings: TopicSettings, max_message_bytes: int) -> list[str]:
    """How an existing topic differs from what ``settings`` would create (``[]``: as
    configured). A setting the cluster does not report is not counted as a difference."""
    if not state.exists:
        return ["absent"]
    found = []
    wanted = settings.partitions_for(state.name)
    if state.partitions != wanted:
        found.append(f"partitions {state.partitions} (config: {wanted})")
    if state.replication_factor != settings.replication_factor:
        found.append(
            f"replication factor {state.replication_factor} (config: {settings.replication_factor})"
        )
    for name, value in settings.configs(state.name, max_message_bytes).items():
        if name in state.configs and state.configs[name] != value:
            found.append(f"{name} {state.configs[name]} (config: {value})")
    return found


async def create_run_topics(broker: KafkaBroker, names: Sequence[str]) -> list[TopicState]:
    """Create ``names`` that do not exist yet with the broker's :class:`TopicSettings`
    (whatever its ``create`` says: this is the operator's command), then describe them."""
    await broker.make_topics(list(names))
    return await broker.describe_topics(list(names))


async def describe_run_topics(broker: KafkaBroker, names: Sequence[str]) -> list[TopicState]:
    """The cluster's view of ``names`` (absent ones included), creating nothing."""
    return await broker.describe_topics(list(names))


async def delete_run_topics(broker: KafkaBroker, names: Sequence[str]) -> list[str]:
    """Delete those of ``names`` that exist (every record in them is lost); the deleted ones."""
    return await broker.delete_topics(list(names))
