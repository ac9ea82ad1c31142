"""The embedded broker: Kafka's semantics in one asyncio process (the default of ``fedxab run``).

Every topic is one append-only partition (partition 0) of ``(key, value)`` records kept in memory.
Consumer groups keep a committed offset per topic; a subscription with a group starts at that
offset, so records a consumer read but did not commit are delivered again after it restarts
(at-least-once), exactly as with Kafka. As with a one-partition Kafka topic whose readers join
their group (``[broker] join_groups``), one consumer of a group reads at a time: a new
subscription of the same group takes the partition over and the older one's iteration ends. A
subscription without a group reads the whole topic from offset 0.

Records are never copied on read (values are immutable ``bytes``). The broker lives as long as the
object: "restarting" a consumer means closing its subscription and subscribing again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fedxab.broker.base import (
    DEFAULT_MAX_MESSAGE_BYTES,
    Broker,
    Record,
    Subscription,
    check_max_message_bytes,
    refuse_oversize_publish,
)
from fedxab.errors import ProtocolError

__all__ = ["MemoryBroker"]


class _Topic:
    def __init__(self, name: str) -> None:
        self.name = name
        self.records: list[Record] = []
        self._changed: asyncio.Event | None = None  # what readers at the end of the log await

    def append(self, key: str | None, value: bytes) -> None:
        self.records.append(Record(self.name, 0, len(self.records), key, value))
        self.wake()

    def changed(self) -> asyncio.Event:
        """The event the next ``wake()`` sets: a reader that has read every record awaits
        it. Made when a reader first waits, so that a batch of appends no one waits between
        (a client agent's reports) makes and sets one event, not one per record."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def wake(self) -> None:
        """Wake every waiting reader (the next wait gets a fresh event, so none spins)."""
        event, self._changed = self._changed, None
        if event is not None:
            event.set()


class _MemorySubscription(Subscription):
    def __init__(self, broker: MemoryBroker, topic: _Topic, group: str | None) -> None:
        self._broker = broker
        self._topic = topic
        self._group = group
        self._position = broker._committed.get((group, topic.name), 0) if group else 0
        self._closed = False
        if group is not None:
            broker._owners[(group, topic.name)] = self

    def _owns_partition(self) -> bool:
        if self._group is None:
            return True
        return self._broker._owners.get((self._group, self._topic.name)) is self

    async def _records(self) -> AsyncIterator[Record]:
        topic = self._topic
        while not self._closed and self._owns_partition():
            if self._position < len(topic.records):
                record = topic.records[self._position]
                self._position += 1
                yield record
                continue
            await topic.changed().wait()

    def __aiter__(self) -> AsyncIterator[Record]:
        return self._records()

    async def commit(self, record: Record) -> None:
        if self._group is None:
            return
        if record.topic != self._topic.name:
            raise ProtocolError(
                f"cannot commit a record of topic {record.topic!r} on a subscription to "
                f"{self._topic.name!r}"
            )
        key = (self._group, self._topic.name)
        self._broker._committed[key] = max(self._broker._committed.get(key, 0), record.offset + 1)

    async def end_offsets(self) -> dict[int, int]:
        return {0: len(self._topic.records)}

    async def close(self) -> None:
        self._closed = True
        if self._group is not None and self._owns_partition():
            del self._broker._owners[(self._group, self._topic.name)]
        self._topic.wake()  # so our iterator sees it is closed


class MemoryBroker(Broker):
    """In-process broker with Kafka's topic, group and commit semantics (module docstring)."""

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.max_message_bytes = check_max_message_bytes(max_message_bytes)
        self._topics: dict[str, _Topic] = {}
        self._committed: dict[tuple[str, str], int] = {}
        self._owners: dict[tuple[str, str], _MemorySubscription] = {}

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def _topic(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = _Topic(name)
        return topic

    async def create_topics(self, names: list[str]) -> None:
        for name in names:
            self._topic(name)

    async def publish(self, topic: str, key: str | None, value: bytes) -> None:
        if not isinstance(value, bytes):
            raise ProtocolError(f"record values are bytes, got {type(value).__name__}")
        refuse_oversize_publish(topic, value, self.max_message_bytes)
        self._topic(topic).append(key, value)

    def subscribe(self, topic: str, group: str | None) -> Subscription:
        return _MemorySubscription(self, self._topic(topic), group)

    def records(self, topic: str) -> list[Record]:
        """Every record of ``topic`` so far (for tests and inspection)."""
        return list(self._topic(topic).records)
