"""The ledger mirrored on the run's ``ledger`` topic, and a ledger rebuilt from it.

On a broker, every client agent publishes each release it records (and, at
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

In a signed run each record is signed by the client it is about (under central DP, by the server,
naming the client), and a ledger rebuilt with the verifying keys keeps each release's signed record
as its evidence, so that an auditor can verify every row again later with public keys alone
(:mod:`fedxab.privacy.verify`).
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
from fedxab.security.agents import keyring_in, open_record, verifier_in
from fedxab.security.signing import HmacSigner, Opened, SignatureError, Signer

__all__ = [
    "SIGNED_RECORDS_HINT",
    "Entry",
    "Rebuild",
    "budget_record",
    "end_record",
    "entry_of",
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


@dataclass(frozen=True)
class Entry:
    """One ledger-topic record, decoded and checked: the client it is about, its kind
    (``"release"``, ``"budget"`` or ``"end"``) and its content; ``by_server``: written by the
    server about the client (central DP)."""

    client: int
    entry: str
    by_server: bool
    phase: int = 0
    release: int = 0
    event: PrivacyEvent | None = None
    budget: Budget | None = None


def entry_of(opened: Opened, run_id: str, *, signed: bool) -> Entry:
    """The entry of an opened ledger-topic record of run ``run_id``; ProtocolError if it is not
    a valid one (another run or kind, a malformed body, an event no accountant takes). A signed
    server's record must be signed for the client it names."""
    env = opened.envelope
    if env.run_id != run_id or env.kind != "ledger":
        raise ProtocolError(f"{env.kind!r} from {env.sender!r} for run {env.run_id!r}")
    body = env.body()
    if not isinstance(body, Mapping):
        raise ProtocolError("a ledger entry must be a map")
    client = env.client_id
    by_server = env.sender == SERVER
    if by_server:  # central DP: the server records for the client it names
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
    try:
        if entry == "release":
            phase, release = body.get("phase"), body.get("release")
            if type(phase) is not int or type(release) is not int or phase != env.phase:
                raise ProtocolError(f"bad phase/release {phase!r}/{release!r}")
            event = PrivacyEvent.from_wire(body.get("event"))
            return Entry(client, entry, by_server, phase, release, event=event)
        if entry == "budget":
            budget = Budget(float(body["epsilon"]), float(body["delta"]))
            return Entry(client, entry, by_server, budget=budget)
    except (ProtocolError, ConfigError):
        raise
    except Exception as exc:  # any defect of an untrusted body is a malformed record
        raise ProtocolError(f"bad ledger entry: {type(exc).__name__}: {exc}") from exc
    return Entry(client, entry, by_server)


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
    runs) verifies the record, and a release keeps the signed record as its evidence
    (:mod:`fedxab.privacy.verify`); without it the record is only decoded."""
    opened = open_record(record.value, signer, max_bytes)
    entry = entry_of(opened, run_id, signed=signer is not None)
    if entry.event is not None:
        evidence = None if signer is None else bytes(record.value)
        ledger.record(
            run_id, entry.client, entry.phase, entry.event, entry.release, evidence=evidence
        )
    elif entry.budget is not None:
        ledger.set_budget(run_id, entry.client, entry.budget)
    else:
        return entry.client
    return None


def _apply(
    result: Rebuild,
    ledger: PrivacyLedger,
    topic: str,
    run_id: str,
    record: Record,
    signer: Signer | None,
    max_bytes: int,
) -> None:
    """Apply ``record`` (:func:`apply_record`); an invalid or conflicting one is skipped,
    counted in ``result`` and logged."""
    try:
        ended = apply_record(ledger, run_id, record, signer, max_bytes)
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
        _apply(result, ledger, topic, run_id, record, signer, broker.max_message_bytes)

    if expect is None:
        records = await read_to_end(broker, topic)
        with ledger.transaction():  # one sync to disk, not one per record
            for record in records:
                apply(record)
        return result

    if not expect:
        return result
    async with broker.subscribe(topic, None) as sub:
        records = aiter(sub)
        while not expect <= result.ended:
            try:  # an idle limit: a long ledger still arriving is read to its end
                async with asyncio.timeout(timeout_s):
                    record = await anext(records)
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


SIGNED_RECORDS_HINT = (
    "the records of a run that signs its messages are read with --verify DIR (Ed25519: the "
    "public keys) or --keys-dir DIR (HMAC: the client keys)"
)
"""What to pass to ``fedxab audit --rebuild-from`` when a signed run's records were refused."""


def rebuild_from_broker(
    path: Path,
    url: str,
    namespace: str,
    run_id: str,
    keys_dir: Path | None = None,
    public_keys: Path | None = None,
) -> tuple[Rebuild, list[int]]:
    """Record run ``run_id``'s ledger topic on the Kafka broker ``url`` into the ledger file
    ``path`` (created if missing), as far as the topic holds now (``fedxab audit
    --rebuild-from``); what was read, and the run's clients in the ledger. With
    ``public_keys`` (a directory of Ed25519 public keys: what any auditor may hold) or
    ``keys_dir`` (the HMAC client keys), only the records those keys verify are recorded, each
    release with its signed record as evidence.

    A topic without any record of the run, or whose records all fail, is an error, and a ledger
    file this call created is removed: an empty rebuild is not an empty ledger."""
    if not url.startswith("kafka://"):
        raise FedxabError(f"--rebuild-from: expected kafka://HOST:PORT, got {url!r}")
    if keys_dir is not None and public_keys is not None:
        raise FedxabError(
            "--keys-dir (HMAC client keys) and --verify (Ed25519 public keys): give one, the "
            "keys of the run's scheme"
        )
    signer: Signer | None = None
    if public_keys is not None:
        signer = verifier_in(public_keys)
    elif keys_dir is not None:
        keyring = keyring_in(keys_dir)
        signer = HmacSigner(keyring, max(keyring) + 1)  # ledger records carry one tag each

    topic = topic_name(namespace, run_id, "ledger")
    broker = make_broker(url, BrokerConfig(url=url, namespace=namespace))
    created = not path.exists()

    async def main() -> tuple[Rebuild, list[int]]:
        async with broker:
            records = await read_to_end(broker, topic)
        if not records:
            raise FedxabError(
                f"--rebuild-from: the ledger topic {topic} on {url} holds no record: nothing "
                "to rebuild (check --run and --namespace)"
            )
        rebuilt = Rebuild()
        with PrivacyLedger(path) as book:
            for record in records:
                _apply(rebuilt, book, topic, run_id, record, signer, broker.max_message_bytes)
            clients = book.clients(run_id)
        if not clients:
            if created:
                for leftover in (path, *(Path(f"{path}{end}") for end in ("-wal", "-shm"))):
                    leftover.unlink(missing_ok=True)
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(rebuilt.reasons.items()))
            hint = "" if signer is not None else f"; {SIGNED_RECORDS_HINT}"
            raise FedxabError(
                f"--rebuild-from: none of the {len(records)} record(s) of {topic} is a valid "
                f"record of run {run_id} ({why}): nothing rebuilt{hint}"
            )
        return rebuilt, clients

    return asyncio.run(main())
