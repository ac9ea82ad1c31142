"""A Kafka subscription never passes over a record the broker skipped (offsets are contiguous).

The dev broker sometimes hands a reader offset n + 1 before offset n while writers append (seen
about once in 10,000 records with four concurrent writers); the subscription seeks back and reads
n, and a record delivered again after the seek is not yielded twice. A fake consumer stands in for
aiokafka's here, so the test is exact.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from aiokafka.errors import ConsumerStoppedError, KafkaConnectionError, OffsetOutOfRangeError

from fedxab.broker.base import BrokerError
from fedxab.broker.kafka import KafkaBroker, _KafkaSubscription


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


class SkippingConsumer:
    """Serves offsets 0..n-1 of one partition, skipping each offset in ``skip`` the first
    ``times`` time(s) it would serve it; ``missing`` offsets never exist."""

    def __init__(self, n: int, skip: set[int], times: int = 1, missing=frozenset()):
        self.n, self.skip, self.missing = n, dict.fromkeys(skip, times), missing
        self.position = 0
        self.seeks: list[int] = []

    def seek(self, tp, offset: int) -> None:
        self.seeks.append(offset)
        self.position = offset

    def highwater(self, tp) -> int:
        return self.n

    async def getone(self) -> Message:
        while self.position < self.n:
            offset = self.position
            self.position += 1
            if offset in self.missing:
                continue
            if self.skip.get(offset, 0) > 0:
                self.skip[offset] -= 1
                continue
            return Message("t", 0, offset, b"k", b"%d" % offset)
        raise ConsumerStoppedError  # what a closed consumer raises: the iteration ends


def _read(consumer, unreachable_s: float = 60.0) -> list[int]:
    sub = _KafkaSubscription(KafkaBroker("127.0.0.1:1", unreachable_s=unreachable_s), "t", None)
    sub._consumer = consumer  # type: ignore[assignment]

    async def main() -> list[int]:
        return [record.offset async for record in sub]

    return asyncio.run(main())


def test_a_skipped_offset_is_read_again_and_nothing_is_yielded_twice():
    consumer = SkippingConsumer(8, skip={2, 5})
    assert _read(consumer) == list(range(8))
    assert consumer.seeks == [2, 5]


def test_an_offset_still_missing_after_three_rereads_is_passed_over():
    consumer = SkippingConsumer(6, skip=set(), missing={3})
    assert _read(consumer) == [0, 1, 2, 4, 5]
    assert consumer.seeks == [3, 3, 3]


class IdleConsumer:
    """No records after offsets 0..n-1; the broker's end offsets come from ``ends``."""

    def __init__(self, n: int, ends) -> None:
        self.n, self.position, self.ends = n, 0, ends

    def assignment(self):
        from aiokafka import TopicPartition

        return {TopicPartition("t", 0)}

    def highwater(self, tp) -> int:
        return self.n

    async def getone(self) -> Message:
        if self.position < self.n:
            self.position += 1
            return Message("t", 0, self.position - 1, b"k", b"x")
        await asyncio.Event().wait()  # nothing more: wait until cancelled
        raise AssertionError

    async def end_offsets(self, partitions):
        return {tp: self.ends(tp) for tp in partitions}


class LostLogConsumer(IdleConsumer):
    """Offsets 0..n-1, then the broker has no record at the reader's position."""

    async def getone(self) -> Message:
        if self.position < self.n:
            return await super().getone()
        from aiokafka import TopicPartition

        raise OffsetOutOfRangeError({TopicPartition("t", 0): self.n})


def test_a_reader_whose_position_the_broker_lost_stops():
    with pytest.raises(
        BrokerError, match=r"topic .t.: the record at offset 2 of partition 0, .* is gone"
    ):
        _read(LostLogConsumer(3, ends=lambda tp: 0))


def test_a_waiting_reader_stops_once_the_broker_has_not_answered_for_unreachable_s():
    def down(tp):
        raise KafkaConnectionError("connection refused")

    with pytest.raises(
        BrokerError, match=r"has not answered for \d+ s \(\[broker\] unreachable_s = 0.5"
    ):
        _read(IdleConsumer(3, ends=down), unreachable_s=0.5)


class ServingConsumer(IdleConsumer):
    """Offsets 0..n-1 of values ``values``; the end offset it reports lags by ``lag``; a seek
    serves the record asked for again (``values`` may have changed meanwhile)."""

    def __init__(self, values: list[bytes], lag: int) -> None:
        super().__init__(len(values), ends=lambda tp: len(self.values) - lag)
        self.values = values
        self.seeks: list[int] = []

    def seek(self, tp, offset: int) -> None:
        self.seeks.append(offset)
        self.position = offset

    async def getone(self) -> Message:
        if self.position < self.n:
            self.position += 1
            return Message("t", 0, self.position - 1, b"k", self.values[self.position - 1])
        await asyncio.Event().wait()
        raise AssertionError


def _read_for(consumer, seconds: float) -> list[int]:
    """The offsets read in ``seconds`` (then the reader is cancelled)."""
    sub = _KafkaSubscription(KafkaBroker("127.0.0.1:1", unreachable_s=0.5), "t", None)
    sub._consumer = consumer  # type: ignore[assignment]
    seen: list[int] = []

    async def main() -> None:
        async for record in sub:
            seen.append(record.offset)

    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(main(), seconds))
    return seen


def test_an_end_offset_that_lags_is_checked_against_the_last_record_and_reading_goes_on():
    consumer = ServingConsumer([b"a", b"b", b"c"], lag=2)
    assert _read_for(consumer, 1.0) == [0, 1, 2]  # nothing yielded twice, no error
    assert consumer.seeks and set(consumer.seeks) == {2}  # the last record, asked again


def test_a_last_record_that_changed_means_the_broker_lost_its_log():
    consumer = ServingConsumer([b"a", b"b", b"c"], lag=2)
    original = consumer.getone

    async def restarted() -> Message:
        if consumer.seeks:
            consumer.values = [b"x", b"y", b"z"]  # a new log under the same offsets
        return await original()

    consumer.getone = restarted  # type: ignore[method-assign]
    with pytest.raises(
        BrokerError, match="the record at offset 2 of partition 0, .* holds another"
    ):
        _read(consumer, unreachable_s=0.5)
