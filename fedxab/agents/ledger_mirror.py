"""The ledger topic read from a broker: a run's ledger rebuilt from the records on it.

The record format, and what makes one valid, is :mod:`fedxab.privacy.mirror` (pure); this module
reads a topic with a broker and an event loop and feeds its records to a
:class:`~fedxab.privacy.mirror.LedgerReader`: while a run goes (the server, with the clients'
end markers to wait for: :func:`rebuild_ledger`) or after it (an auditor, into a ledger file:
:func:`rebuild_from_broker`, ``fedxab audit --rebuild-from``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

from fedxab.broker.base import Broker, Record, topic_name
from fedxab.broker.factory import make_broker
from fedxab.broker.topics import MissingTopicError
from fedxab.config import BrokerConfig
from fedxab.errors import FedxabError
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mirror import LedgerReader, Rebuild
from fedxab.security.signing import Signer

__all__ = [
    "SETTLE_S",
    "YIELD_EVERY",
    "NothingToRebuild",
    "read_to_end",
    "rebuild_from_broker",
    "rebuild_ledger",
]

log = logging.getLogger(__name__)

SETTLE_S = 0.5
"""Reading a topic to its end goes on past its end offsets until no record came for this long."""

YIELD_EVERY = 256
"""A rebuild lets the event loop run (heartbeats, the broker client) after this many records."""


class NothingToRebuild(FedxabError):
    """The ledger topic holds no valid record of the run (``records``: how many it holds): an
    empty rebuild is not an empty ledger."""

    def __init__(self, message: str, records: int = 0) -> None:
        super().__init__(message)
        self.records = records


async def read_to_end(broker: Broker, topic: str, settle_s: float = SETTLE_S) -> list[Record]:
    """Every record the topic holds now (all partitions, from the beginning): up to its end
    offsets, then on until no record came for ``settle_s`` seconds (the dev broker's end
    offsets can lag behind its last records)."""
    sub = broker.subscribe(topic, None)
    try:
        ends = {p: end for p, end in (await sub.end_offsets()).items() if end > 0}
        records: list[Record] = []
        if not ends:
            return records
        stream = aiter(sub)
        while True:
            try:
                if ends:
                    record = await anext(stream)
                else:
                    async with asyncio.timeout(settle_s):
                        record = await anext(stream)
            except (TimeoutError, StopAsyncIteration):
                break
            records.append(record)
            if len(records) % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            if record.offset >= ends.get(record.partition, 0) - 1:
                ends.pop(record.partition, None)
        return records
    finally:
        await sub.close()


def _namespace_of(topic: str, run_id: str) -> str | None:
    suffix = f".{run_id}.ledger"
    return topic[: -len(suffix)] if topic.endswith(suffix) else None


async def rebuild_ledger(
    broker: Broker,
    topic: str,
    run_id: str,
    ledger: PrivacyLedger,
    *,
    expect: set[int] | None = None,
    timeout_s: float = 60.0,
    signer: Signer | None = None,
    clients_only: bool = False,
    session: str | None = None,
) -> Rebuild:
    """Record into ``ledger`` every valid entry of ``topic`` for ``run_id``.

    Without ``expect``, reads what the topic holds now (up to its end offsets). With ``expect``
    (client ids), reads until each of them has an end marker matching what was read, or until
    no record came for ``timeout_s`` seconds. Invalid, foreign (another namespace, or with
    ``session`` another session) and hostile records are skipped and counted, the first of each
    reason logged (:mod:`fedxab.privacy.mirror`). A record that contradicts one already in the
    ledger is skipped and counted too (reason ``conflict``, logged as an error naming both
    records): history is never rewritten, and one client cannot stop the others' accounting.
    ``clients_only``: the clients author their records (local DP; a server's record about a
    client is refused). ``signer``: see :func:`~fedxab.privacy.mirror.apply_record` (signed
    runs pass theirs: an unsigned or forged record is skipped and counted like a malformed
    one). Records above the broker's ``max_message_bytes`` are skipped unread."""
    reader = LedgerReader(
        run_id,
        _namespace_of(topic, run_id),
        signer,
        broker.max_message_bytes,
        topic=topic,
        clients_only=clients_only,
        session=session,
    )
    if expect is None:
        entries = reader.scan(await read_to_end(broker, topic))
        with ledger.transaction():  # one sync to disk, not one per record
            for record, entry in entries:
                reader.apply(ledger, record, entry)
        return reader.finish()

    if not expect:
        return reader.result
    async with broker.subscribe(topic, None) as sub:
        records = aiter(sub)
        k = 0
        while not expect <= reader.result.ended:
            try:  # an idle limit: a long ledger still arriving is read to its end
                async with asyncio.timeout(timeout_s):
                    record = await anext(records)
            except (TimeoutError, StopAsyncIteration):
                log.warning(
                    "ledger topic %s: no matching end marker from client(s) %s (no record for "
                    "%.0f s)",
                    topic,
                    sorted(expect - reader.result.ended)[:5],
                    timeout_s,
                )
                break
            reader.read(ledger, record)
            k += 1
            if k % YIELD_EVERY == 0:  # never starve the loop, however many records are queued
                await asyncio.sleep(0)
    return reader.finish()


def rebuild_from_broker(
    path: Path,
    url: str,
    namespace: str,
    run_id: str,
    signer: Signer | None = None,
    settings: BrokerConfig | None = None,
) -> tuple[Rebuild, list[int]]:
    """Record run ``run_id``'s ledger topic on the Kafka broker ``url`` into the ledger file
    ``path`` (created if missing), as far as the topic holds now (``fedxab audit
    --rebuild-from``); what was read, and the run's clients in the ledger. ``settings``: the
    ``[broker]`` section whose TLS, SASL and record size settings reach the broker (an
    auditor's principal may only read); the rebuild never creates a topic. With ``signer``
    (one that verifies with the run's public keys, what any auditor may hold, or with its HMAC
    client keys), only the records it verifies are recorded, each release with its signed
    record as evidence.

    Every record is read and checked first; a run any of whose clients wrote its own records is
    a local-DP run, whose records the server may not author. The valid records are then
    written in one transaction: an error leaves the file as it was, and a file this call
    created is removed. A topic without any record of the run, or whose records all fail, is
    :class:`NothingToRebuild`: an empty rebuild is not an empty ledger. Hostile records
    (:data:`~fedxab.privacy.mirror.HOSTILE`) are in the returned :attr:`Rebuild.named`; the
    caller fails the audit on them."""
    if not url.startswith("kafka://"):
        raise FedxabError(
            f"a ledger topic is read from Kafka: expected kafka://HOST:PORT, got {url!r}"
        )
    topic = topic_name(namespace, run_id, "ledger")
    reader_settings = dataclasses.replace(
        settings or BrokerConfig(), url=url, namespace=namespace, create_topics=False
    )
    broker = make_broker(url, reader_settings)
    assert broker is not None  # a kafka:// URL

    async def read() -> list[Record]:
        async with broker:
            return await read_to_end(broker, topic)

    try:
        records = asyncio.run(read())
    except MissingTopicError:
        raise NothingToRebuild(
            f"there is no ledger topic {topic} on {url}, so it holds no record: nothing to rebuild"
        ) from None
    if not records:
        raise NothingToRebuild(
            f"the ledger topic {topic} on {url} holds no record: nothing to rebuild"
        )
    reader = LedgerReader(run_id, namespace, signer, broker.max_message_bytes, topic=topic)
    entries = reader.scan(records)
    created = not path.exists()
    try:
        with PrivacyLedger(path) as book, book.transaction():
            for record, entry in entries:
                reader.apply(book, record, entry)
            clients = book.clients(run_id)
            if not clients:
                raise NothingToRebuild(
                    f"none of the {len(records)} record(s) of {topic} is a valid record of run "
                    f"{run_id} ({reader.result.summary()}): nothing rebuilt",
                    len(records),
                )
    except BaseException:
        if created:
            for leftover in (path, *(Path(f"{path}{end}") for end in ("-wal", "-shm"))):
                leftover.unlink(missing_ok=True)
        raise
    return reader.finish(), clients
