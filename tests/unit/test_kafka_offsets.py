"""A Kafka subscription never passes over a record the broker skipped (offsets are contiguous).

The dev broker sometimes hands a reader offset n + 1 before offset n while writers append (seen
about once in 10,000 records with four concurrent writers); the subscription seeks back and reads
n, and a record delivered again after the seek is not yielded twice. A fake consumer stands in for
aiokafka's here, so the test is exact.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

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

    def __aiter__(self):
        return self

    async def __anext__(self) -> Message:
        while self.position < self.n:
            offset = self.position
            self.position += 1
            if offset in self.missing:
                continue
            if self.skip.get(offset, 0) > 0:
                self.skip[offset] -= 1
                continue
            return Message("t", 0, offset, b"k", b"%d" % offset)
        raise StopAsyncIteration


def _read(consumer: SkippingConsumer) -> list[int]:
    sub = _KafkaSubscription(KafkaBroker("127.0.0.1:1"), "t", None)
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
