"""The embedded broker has Kafka's semantics: topics, keys, groups, commit, at-least-once."""

from __future__ import annotations

import asyncio

import pytest

from fedxab.broker.base import run_topics, topic_name
from fedxab.broker.memory import MemoryBroker
from fedxab.errors import ConfigError


async def _take(sub, n: int, timeout: float = 2.0):
    out = []
    iterator = aiter(sub)
    for _ in range(n):
        out.append(await asyncio.wait_for(anext(iterator), timeout))
    return out


def test_topic_names_are_checked():
    assert topic_name("fedxab", "run-1", "report") == "fedxab.run-1.report"
    assert sorted(run_topics("ns", "r")) == ["broadcast", "control", "ledger", "report"]
    with pytest.raises(ConfigError, match="run_id"):
        topic_name("fedxab", "a.b", "report")
    with pytest.raises(ConfigError, match="broker.namespace"):
        topic_name("", "r", "report")
    with pytest.raises(ConfigError, match="topic kind"):
        topic_name("fedxab", "r", "gossip")


@pytest.mark.asyncio
async def test_records_keep_order_keys_and_offsets():
    broker = MemoryBroker()
    await broker.create_topics(["t"])
    for i in range(3):
        await broker.publish("t", str(i), b"v%d" % i)
    async with broker.subscribe("t", None) as sub:
        records = await _take(sub, 3)
        assert await sub.end_offsets() == {0: 3}
    assert [(r.offset, r.key, r.value) for r in records] == [
        (0, "0", b"v0"),
        (1, "1", b"v1"),
        (2, "2", b"v2"),
    ]


@pytest.mark.asyncio
async def test_a_restarted_group_consumer_gets_every_uncommitted_record_again():
    broker = MemoryBroker()
    for i in range(5):
        await broker.publish("t", None, bytes([i]))
    async with broker.subscribe("t", "server") as sub:
        records = await _take(sub, 4)
        await sub.commit(records[1])  # handled 0 and 1; 2 and 3 were read but not committed
    async with broker.subscribe("t", "server") as sub:
        again = await _take(sub, 3)
    assert [r.offset for r in again] == [2, 3, 4]


@pytest.mark.asyncio
async def test_groups_are_independent_and_no_group_reads_from_the_start():
    broker = MemoryBroker()
    await broker.publish("t", None, b"a")
    async with broker.subscribe("t", "g1") as sub:
        await sub.commit((await _take(sub, 1))[0])
    async with broker.subscribe("t", "g2") as sub:
        assert [r.value for r in await _take(sub, 1)] == [b"a"]
    async with broker.subscribe("t", None) as sub:
        first = await _take(sub, 1)
        await sub.commit(first[0])  # a no-op without a group
    async with broker.subscribe("t", None) as sub:
        assert [r.value for r in await _take(sub, 1)] == [b"a"]


@pytest.mark.asyncio
async def test_a_waiting_consumer_wakes_on_publish_and_ends_when_closed():
    broker = MemoryBroker()
    sub = broker.subscribe("t", "g")
    waiting = asyncio.create_task(_take(sub, 1))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    await broker.publish("t", "k", b"x")
    assert [r.value for r in await waiting] == [b"x"]
    listing = asyncio.create_task(_collect(sub))
    await asyncio.sleep(0.01)
    await sub.close()
    assert await asyncio.wait_for(listing, 1.0) == []


async def _collect(sub):
    return [r async for r in sub]


@pytest.mark.asyncio
async def test_a_new_consumer_of_the_same_group_takes_the_partition_over():
    broker = MemoryBroker()
    old = broker.subscribe("t", "g")
    listing = asyncio.create_task(_collect(old))
    await asyncio.sleep(0.01)
    new = broker.subscribe("t", "g")
    await broker.publish("t", None, b"x")
    assert [r.value for r in await _take(new, 1)] == [b"x"]
    assert await asyncio.wait_for(listing, 1.0) == []
    await old.close()  # closing the displaced consumer leaves the new owner in place
    await broker.publish("t", None, b"y")
    assert [r.value for r in await _take(new, 1)] == [b"y"]
    await new.close()


@pytest.mark.asyncio
async def test_values_must_be_bytes():
    from fedxab.errors import ProtocolError

    with pytest.raises(ProtocolError, match="bytes"):
        await MemoryBroker().publish("t", None, "text")  # type: ignore[arg-type]
