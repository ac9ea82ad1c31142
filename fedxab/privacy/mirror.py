"""The ledger mirrored on the run's ``ledger`` topic, and a ledger rebuilt from it.

DESIGN.md (Privacy): on a broker, every client agent publishes each release it records (and, at
start, each hosted client's budget) to ``{namespace}.{run_id}.ledger``, keyed by client id, before
the report that carries the released values. Anyone who can read the topic (the server, an
auditor) rebuilds the run's ledger from it (:func:`rebuild_ledger`): recording is idempotent per
(run, client, phase, release), so duplicated records (at-least-once delivery, a restarted client
publishing again) change nothing.

One record = one :class:`~fedxab.broker.codec.Envelope` of kind ``"ledger"`` whose payload is
``{"entry": "release", "phase", "release", "event": {...}}``,
``{"entry": "budget", "epsilon", "delta"}`` or, once the client has seen the run's end,
``{"entry": "end", "releases"}``; the client is the envelope's sender (and the record key, so one
client's records keep their order). Under central DP the server releases and records for every
client: its records are sent as ``"server"`` and name the client in the payload (``"client"``).
The end marker makes a client's mirror checkably complete without trusting a broker's end offsets
(the dev broker's can lag behind its last record): a reader that has a client's end marker has
every release published for that client before it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedxab.broker.base import DEFAULT_MAX_MESSAGE_BYTES, Broker, Record, topic_name
from fedxab.broker.codec import SERVER, Envelope, client_sender, packb
from fedxab.broker.factory import make_broker
from fedxab.config import BrokerConfig
from fedxab.errors import ConfigError, FedxabError, ProtocolError
from fedxab.privacy.ledger import Budget, LedgerError, PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.security.agents import Signer, keyring_in, open_record
from fedxab.security.signing import Opened, SignatureError

__all__ = [
    "Rebuild",
    "budget_record",
    "end_record",
    "read_to_end",
    "rebuild_from_broker",
    "rebuild_ledger",
    "release_record",
]

log = logging.getLogger(__name__)


def _record(
    run_id: str,
    client: int,
    phase: int,
    msg_id: str,
    body: dict[str, Any],
    by_server: bool,
) -> bytes:
    if by_server:
        body = {**body, "client": client}
    return Envelope(
        run_id=run_id,
        kind="ledger",
        phase=phase,
        sender=SERVER if by_server else client_sender(client),
        msg_id=f"{msg_id}:{client}" if by_server else msg_id,
        payload=packb(body),
        sent_at=time.time(),
    ).encode()


def release_record(
    run_id: str,
    client: int,
    phase: int,
    event: PrivacyEvent,
    release: int = 0,
    *,
    by_server: bool = False,
) -> bytes:
    """The ledger-topic record of one recorded release (``by_server``: central DP)."""
    body = {"entry": "release", "phase": phase, "release": release, "event": event.to_wire()}
    return _record(run_id, client, phase, f"release:{phase}:{release}", body, by_server)


def budget_record(run_id: str, client: int, budget: Budget, *, by_server: bool = False) -> bytes:
    """The ledger-topic record of a client's budget."""
    body = {"entry": "budget", "epsilon": budget.epsilon, "delta": budget.delta}
    return _record(run_id, client, 0, "budget", body, by_server)


def end_record(run_id: str, client: int, releases: int, *, by_server: bool = False) -> bytes:
    """The ledger-topic record saying all the client's ``releases`` releases are published."""
    return _record(run_id, client, 0, "end", {"entry": "end", "releases": releases}, by_server)


async def read_to_end(broker: Broker, topic: str) -> list[Record]:
    """Every record the topic holds now (all partitions, from the beginning)."""
    sub = broker.subscribe(topic, None)
    try:
        ends = {p: end for p, end in (await sub.end_offsets()).items() if end > 0}
        records: list[Record] = []
        if ends:
            async for record in sub:
                records.append(record)
                if record.offset >= ends.get(record.partition, 0) - 1:
                    ends.pop(record.partition, None)
                    if not ends:
                        break
        return records
    finally:
        await sub.close()


@dataclass
class Rebuild:
    """What :func:`rebuild_ledger` read: records skipped as invalid (by reason), and the
    clients whose end marker it saw (their mirror is complete)."""

    skipped: int = 0
    ended: set[int] = field(default_factory=set)
    reasons: Counter[str] = field(default_factory=Counter)


def apply_record(
    ledger: PrivacyLedger,
    run_id: str,
    record: Record,
    signer: Signer | None = None,
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> int | None:
    """Apply one ledger-topic record; the client id if it is an end marker, else None.
    ProtocolError if it is not a valid record for ``run_id`` (then nothing is recorded),
    among them a record above ``max_bytes`` (refused before decoding). ``signer`` (signed
    runs) verifies the record; without it the record is only decoded. A signed server's record
    must be signed for the client it names."""
    opened = open_record(record.value, signer, max_bytes)
    try:
        client, entry, body = _entry_of(opened, run_id, signed=signer is not None)
        if entry == "release":
            event = PrivacyEvent.from_wire(body.get("event"))
            phase, release = body.get("phase"), body.get("release")
            if type(phase) is not int or type(release) is not int or phase != opened.envelope.phase:
                raise ProtocolError(f"bad phase/release {phase!r}/{release!r}")
        elif entry == "budget":
            budget = Budget(float(body["epsilon"]), float(body["delta"]))
    except (ProtocolError, ConfigError):
        raise
    except Exception as exc:  # any defect of an untrusted body is a malformed record
        raise ProtocolError(f"bad ledger entry: {type(exc).__name__}: {exc}") from exc
    if entry == "release":
        ledger.record(run_id, client, phase, event, release)
    elif entry == "budget":
        ledger.set_budget(run_id, client, budget)
    else:
        return client
    return None


def _entry_of(opened: Opened, run_id: str, *, signed: bool) -> tuple[int, str, Mapping]:
    """The client a ledger record is about, its entry kind and its body (ProtocolError if it is
    not a record of ``run_id``)."""
    env = opened.envelope
    if env.run_id != run_id or env.kind != "ledger":
        raise ProtocolError(f"{env.kind!r} from {env.sender!r} for run {env.run_id!r}")
    body = env.body()
    if not isinstance(body, Mapping):
        raise ProtocolError("a ledger entry must be a map")
    client = env.client_id
    if env.sender == SERVER:  # central DP: the server records for the client it names
        client = body.get("client")
        if type(client) is not int or client < 0:
            raise ProtocolError(f"a server's ledger entry must name a client, got {client!r}")
        if signed and client != opened.for_client:
            raise SignatureError(
                "bad_signature", f"server's entry for client {client} signed for another"
            )
    if client is None:
        raise ProtocolError(f"ledger entry from {env.sender!r}")
    entry = body.get("entry")
    if not isinstance(entry, str) or entry not in ("release", "budget", "end"):
        raise ProtocolError(f"unknown ledger entry {entry!r:.80}")
    return client, entry, body


async def rebuild_ledger(
    broker: Broker,
    topic: str,
    run_id: str,
    ledger: PrivacyLedger,
    *,
    expect: set[int] | None = None,
    timeout_s: float = 60.0,
    signer: Signer | None = None,
) -> Rebuild:
    """Record into ``ledger`` every valid entry of ``topic`` for ``run_id``.

    Without ``expect``, reads what the topic holds now (up to its end offsets). With ``expect``
    (client ids), reads until each of them has its end marker, or until no record came for
    ``timeout_s`` seconds. Invalid
    records are skipped, counted and logged. A record that contradicts one already in the
    ledger is skipped and counted too (reason ``conflict``, logged as an error naming the
    client): history is never rewritten, and one client cannot stop the others' accounting.
    ``signer``: see :func:`apply_record` (signed runs pass theirs: an unsigned or forged record
    is skipped and counted like a malformed one). Records above the broker's
    ``max_message_bytes`` are skipped unread."""
    result = Rebuild()

    def apply(record: Record) -> None:
        try:
            ended = apply_record(ledger, run_id, record, signer, broker.max_message_bytes)
        except (ProtocolError, ConfigError) as exc:  # malformed, or an event no accountant takes
            result.skipped += 1
            result.reasons[exc.reason if isinstance(exc, ProtocolError) else "malformed"] += 1
            log.warning("ledger topic %s offset %d skipped: %s", topic, record.offset, exc)
            return
        except LedgerError as exc:  # a valid record that contradicts one already recorded
            result.skipped += 1
            result.reasons["conflict"] += 1
            log.error(
                "ledger topic %s offset %d: %s; the first record is kept (a client that published "
                "two different releases under one key is misbehaving: audit it)",
                topic,
                record.offset,
                exc,
            )
            return
        if ended is not None:
            result.ended.add(ended)

    if expect is None:
        for record in await read_to_end(broker, topic):
            apply(record)
        return result

    if not expect:
        return result
    async with broker.subscribe(topic, None) as sub:
        records = aiter(sub)
        while not expect <= result.ended:
            try:  # an idle limit: a long ledger still arriving is read to its end
                record = await asyncio.wait_for(anext(records), timeout_s)
            except (TimeoutError, StopAsyncIteration):
                log.warning(
                    "ledger topic %s: no end marker from client(s) %s (no record for %.0f s)",
                    topic,
                    sorted(expect - result.ended)[:5],
                    timeout_s,
                )
                break
            apply(record)
    return result


def rebuild_from_broker(
    path: Path, url: str, namespace: str, run_id: str, keys_dir: Path | None = None
) -> tuple[Rebuild, list[int]]:
    """Record run ``run_id``'s ledger topic on the Kafka broker ``url`` into the ledger file
    ``path`` (created if missing), as far as the topic holds now (``fedxab audit
    --rebuild-from``); what was read, and the run's clients in the ledger. With ``keys_dir``
    (the client keys of a run that signs its messages), only the records those keys verify are
    recorded."""
    if not url.startswith("kafka://"):
        raise FedxabError(f"--rebuild-from: expected kafka://HOST:PORT, got {url!r}")
    signer = None
    if keys_dir is not None:
        keyring = keyring_in(keys_dir)
        signer = Signer(keyring, max(keyring) + 1)  # ledger records carry one tag each

    topic = topic_name(namespace, run_id, "ledger")
    broker = make_broker(url, BrokerConfig(url=url, namespace=namespace))

    async def main() -> tuple[Rebuild, list[int]]:
        async with broker:
            with PrivacyLedger(path) as book:
                rebuilt = await rebuild_ledger(broker, topic, run_id, book, signer=signer)
                return rebuilt, book.clients(run_id)

    return asyncio.run(main())
