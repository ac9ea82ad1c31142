"""The ledger mirrored on the run's ``ledger`` topic: its record format, and a ledger rebuilt
from its records.

This module is the pure half: records built and read, checked and applied to a ledger, with no
broker and no event loop. Reading a topic from a broker (and ``fedxab audit --rebuild-from``)
is :mod:`fedxab.agents.ledger_mirror`.

On a broker, every client agent publishes each release it records (and, at start, each hosted
client's budgets) to ``{namespace}.{run_id}.ledger``, keyed by client id, before the report that
carries the released values. Anyone who can read the topic (the server, an auditor) rebuilds the
run's ledger from it (:func:`~fedxab.agents.ledger_mirror.rebuild_ledger`): recording is
idempotent per (run, client, phase, release), so duplicated records (at-least-once delivery, a
restarted client publishing again) change nothing.

One record = one :class:`~fedxab.broker.codec.Envelope` of kind ``"ledger"`` whose payload is
``{"entry": "release", "phase", "release", "event": {...}, ...}``, ``{"entry": "budget",
"epsilon", "delta", ...}`` or, once the client has seen the run's end, ``{"entry": "end",
"releases", "digest"}``; every one also names the run's ``namespace``. The client is the
envelope's sender (and the record key, so one client's records keep their order). Releases and
budgets also say what they are charged to (:class:`Owner`): the client's data owner and objective
setting (:meth:`~fedxab.privacy.ledger.PrivacyLedger.set_owner`), the owner's lifetime budget
(``lifetime``: ``[epsilon, delta]`` or None) and the delta and accountant the run is accounted at
(``run_delta``, ``accountant``: :meth:`~fedxab.privacy.ledger.PrivacyLedger.set_run`), so a
rebuilt ledger keeps all of them, and every row's evidence signs them. Under
central DP the server releases and records for every client: its records are sent as
``"server"`` and name the client in the payload (``"client"``).

**What binds a record to its run's execution.** The run id and kind are the envelope's; the
namespace is in the body (a run id repeats in another namespace for the same config and seed),
and in a signed run the signature also covers the execution's session (the server's random token
for one execution of a run, :mod:`fedxab.security.signing`), which the server checks on the
releases and end markers it reads. A record of another namespace or session is refused as a
``replay``. (No lobby session id exists yet: the run id, namespace and, when signed, the
broadcast session are the execution's identity.)

**End markers are checked against what was read.** An end marker carries the number of the
client's releases and the digest of them (:func:`releases_digest`): a reader takes a client's
mirror as complete only when the releases it holds for that client have that digest, so a
replayed or forged marker cannot end a rebuild early (it is refused as ``end_mismatch``). The
marker makes a client's mirror checkably complete without trusting a broker's end offsets (the
dev broker's can lag behind its last record).

**Who may author what.** Under local DP (DP-Fed-PNE) each client records its own releases; the
server authors none. A release, budget or end record the server signed about a client of a run
whose clients write their own records is refused (``server_authored``), and an audit that finds
one fails naming both the server's record and the client's
(:func:`~fedxab.agents.ledger_mirror.rebuild_from_broker`). A record
that contradicts one already recorded (``conflict``) is named the same way. These, the replays and
the end mismatches are *hostile* records (:data:`HOSTILE`): only a party that can publish on the
topic makes them, and any of them fails an audit.

**Hostile or malformed records never stop the accounting.** Every field is range-checked before
it touches SQLite (a release index of 2^63 is a refused record, not an ``OverflowError``), each
refused record is counted by reason and only the first of each reason is logged (then one summary
line), and a rebuild yields to the event loop every
:data:`~fedxab.agents.ledger_mirror.YIELD_EVERY` records, so that a topic flooded with junk
delays a server's results by the time it takes to read it and nothing else.

In a signed run each record is signed by the client it is about (under central DP, by the server,
naming the client), and every release row keeps its signed record as its evidence, and every
client its signed end marker (the client's own ledger and a ledger rebuilt with the verifying keys
alike), so that an auditor can verify every row, and each client's rows as a whole, again later
with public keys alone (:mod:`fedxab.privacy.verify`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fedxab.broker.codec import MAX_MESSAGE_BYTES, SERVER, Envelope, client_sender, packb
from fedxab.errors import ConfigError, ProtocolError
from fedxab.privacy.accountants import ACCOUNTANTS
from fedxab.privacy.ledger import Budget, LedgerError, PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.security.signing import Opened, SignatureError, Signer, open_record

if TYPE_CHECKING:
    from fedxab.privacy.run_ledger import RunLedger

__all__ = [
    "HOSTILE",
    "Entry",
    "LedgerReader",
    "Owner",
    "Rebuild",
    "TopicRecord",
    "apply_record",
    "budget_record",
    "end_record",
    "entry_of",
    "release_record",
    "releases_digest",
]

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "fedxab"
"""The topic namespace of a run that sets none (``[broker] namespace``)."""

INDEX_LIMIT = 2**31
"""Release indices and end-marker counts must lie in ``[0, INDEX_LIMIT)`` (phases already do:
the envelope's check); a server's record names a client id below ``2**63`` (SQLite's integer)."""

HOSTILE = ("conflict", "server_authored", "replay", "end_mismatch")
"""Refusal reasons that only a party able to publish on the topic causes, and that fail an audit
(junk that does not even decode or verify is only counted)."""

_NAMED = 20  # hostile records named in full per rebuild; the rest are counted


class TopicRecord(Protocol):
    """A record read from a topic, as far as a ledger reader uses it
    (:class:`~fedxab.broker.base.Record` is one)."""

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def value(self) -> bytes: ...


@dataclass(frozen=True)
class Owner:
    """What a client's releases are charged to, as its records name it: its data owner and the
    objective setting it evaluates (:func:`~fedxab.privacy.run_ledger.data_owner`,
    :func:`~fedxab.privacy.run_ledger.objective_digest`), the owner's lifetime budget, and the
    delta and accountant the run is accounted at (None: not named)."""

    name: str
    objective: str
    lifetime: Budget | None = None
    delta: float | None = None
    accountant: str | None = None

    @classmethod
    def of(cls, run_ledger: RunLedger, client: int) -> Owner:
        """Client ``client``'s, in the run ``run_ledger`` accounts."""
        name, objective = run_ledger.owner(client)
        accountant = run_ledger.ledger.accountant.name
        return cls(name, objective, run_ledger.lifetime, run_ledger.delta, accountant)


def releases_digest(rows: Iterable[tuple[int, int, PrivacyEvent]]) -> str:
    """The SHA-256 (hex) of a client's releases ``(phase, release, event)``, in (phase,
    release) order: what an end marker says the client published."""
    ordered = sorted((int(p), int(r), e.to_wire()) for p, r, e in rows)
    return hashlib.sha256(packb([list(row) for row in ordered])).hexdigest()


def _record(
    run_id: str,
    client: int,
    phase: int,
    msg_id: str,
    body: dict[str, Any],
    by_server: bool,
    namespace: str,
) -> bytes:
    body = {**body, "namespace": namespace}
    if by_server:
        body["client"] = client
    return Envelope(
        run_id=run_id,
        kind="ledger",
        phase=phase,
        sender=SERVER if by_server else client_sender(client),
        msg_id=f"{msg_id}:{client}" if by_server else msg_id,
        payload=packb(body),
        sent_at=time.time(),
    ).encode()


def _owner_fields(owner: Owner | None) -> dict[str, Any]:
    if owner is None:
        return {}
    lifetime = owner.lifetime
    return {
        "owner": owner.name,
        "objective": owner.objective,
        "lifetime": None if lifetime is None else [lifetime.epsilon, lifetime.delta],
        "run_delta": owner.delta,
        "accountant": owner.accountant,
    }


def release_record(
    run_id: str,
    client: int,
    phase: int,
    event: PrivacyEvent,
    release: int = 0,
    *,
    by_server: bool = False,
    namespace: str = DEFAULT_NAMESPACE,
    owner: Owner | None = None,
) -> bytes:
    """The ledger-topic record of one recorded release (``by_server``: central DP)."""
    body = {"entry": "release", "phase": phase, "release": release, "event": event.to_wire()}
    body |= _owner_fields(owner)
    return _record(run_id, client, phase, f"release:{phase}:{release}", body, by_server, namespace)


def budget_record(
    run_id: str,
    client: int,
    budget: Budget | None,
    *,
    by_server: bool = False,
    namespace: str = DEFAULT_NAMESPACE,
    owner: Owner | None = None,
) -> bytes:
    """The ledger-topic record of a client's budget for the run (None: none) and what its
    releases are charged to (``owner``)."""
    body: dict[str, Any] = {
        "entry": "budget",
        "epsilon": None if budget is None else budget.epsilon,
        "delta": None if budget is None else budget.delta,
    }
    body |= _owner_fields(owner)
    return _record(run_id, client, 0, "budget", body, by_server, namespace)


def end_record(
    run_id: str,
    client: int,
    releases: Iterable[tuple[int, int, PrivacyEvent]],
    *,
    by_server: bool = False,
    namespace: str = DEFAULT_NAMESPACE,
) -> bytes:
    """The ledger-topic record saying all the client's ``releases`` (``(phase, release,
    event)``, every one it recorded in the run) are published: their number and digest."""
    rows = list(releases)
    body = {"entry": "end", "releases": len(rows), "digest": releases_digest(rows)}
    return _record(run_id, client, 0, "end", body, by_server, namespace)


@dataclass
class Rebuild:
    """What a rebuild read: records skipped as invalid (by reason), the clients whose end
    marker matched what was read (their mirror is complete), and the hostile records named in
    full (:data:`HOSTILE`; the first few, each naming the record it contradicts)."""

    skipped: int = 0
    ended: set[int] = field(default_factory=set)
    reasons: Counter[str] = field(default_factory=Counter)
    named: list[str] = field(default_factory=list)

    @property
    def hostile(self) -> int:
        """How many refused records were hostile (:data:`HOSTILE`)."""
        return sum(self.reasons[r] for r in HOSTILE)

    def summary(self) -> str:
        """``"3 malformed, 1 conflict"``: the refused records by reason."""
        return ", ".join(f"{n} {reason}" for reason, n in sorted(self.reasons.items()))


@dataclass(frozen=True)
class Entry:
    """One ledger-topic record, decoded and checked: the client it is about, its kind
    (``"release"``, ``"budget"`` or ``"end"``) and its content; ``by_server``: written by the
    server about the client (central DP); ``session``: the session it was signed in."""

    client: int
    entry: str
    by_server: bool
    phase: int = 0
    release: int = 0
    event: PrivacyEvent | None = None
    budget: Budget | None = None
    owner: Owner | None = None
    releases: int = 0
    digest: str = ""
    namespace: str | None = None
    session: str = ""

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.client, self.phase, self.release)


class _Replay(ProtocolError):
    reason = "replay"


def _index(name: str, value: Any, limit: int = INDEX_LIMIT) -> int:
    if type(value) is not int or not 0 <= value < limit:
        raise ProtocolError(f"{name} must be an integer in [0, {limit}), got {value!r:.40}")
    return value


def _owner_of(body: Mapping[str, Any]) -> Owner | None:
    name, objective = body.get("owner"), body.get("objective")
    if name is None and objective is None:
        return None
    if not (isinstance(name, str) and isinstance(objective, str)) or not 0 < len(name) <= 256:
        raise ProtocolError("'owner' and 'objective' must be strings (owner: 1 to 256 chars)")
    if len(objective) > 256:
        raise ProtocolError("'objective' must be at most 256 chars")
    delta, accountant = body.get("run_delta"), body.get("accountant")
    if (delta is None) != (accountant is None):
        raise ProtocolError("'run_delta' and 'accountant' come together")
    if accountant is not None and accountant not in ACCOUNTANTS:
        raise ProtocolError(f"unknown accountant {accountant!r:.40}")
    if delta is not None:
        delta = Budget(1.0, float(delta)).delta  # a delta in (0, 1]
    return Owner(name, objective, _budget_of(body.get("lifetime")), delta, accountant)


def _budget_of(value: Any) -> Budget | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ProtocolError(f"a lifetime budget must be [epsilon, delta], got {value!r:.60}")
    return Budget(float(value[0]), float(value[1]))


def entry_of(opened: Opened, run_id: str, *, signed: bool, namespace: str | None = None) -> Entry:
    """The entry of an opened ledger-topic record of run ``run_id`` (of ``namespace``, if
    given); ProtocolError if it is not a valid one (another run, namespace or kind, a malformed
    body, a field out of range, an event no accountant takes). A signed server's record must be
    signed for the client it names."""
    env = opened.envelope
    if env.run_id != run_id or env.kind != "ledger":
        raise ProtocolError(f"{env.kind!r} from {env.sender!r} for run {env.run_id!r}")
    body = env.body()
    if not isinstance(body, Mapping):
        raise ProtocolError("a ledger entry must be a map")
    recorded_in = body.get("namespace")
    if recorded_in is not None and not isinstance(recorded_in, str):  # (an array: no == test)
        raise ProtocolError(
            f"a ledger entry's 'namespace' must be a string, got {type(recorded_in).__name__}"
        )
    if namespace is not None and recorded_in != namespace:
        raise _Replay(
            f"{env.sender}'s {body.get('entry')!r:.20} record of namespace {recorded_in!r:.80}, "
            f"read in {namespace!r}: another execution's record, replayed"
        )
    client = env.client_id
    by_server = env.sender == SERVER
    if by_server:  # central DP: the server records for the client it names
        client = _index("a server's ledger entry's 'client'", body.get("client"), 2**63)
        if signed and client != opened.for_client:
            raise SignatureError(
                "bad_signature", f"server's entry for client {client} signed for another"
            )
    if client is None:
        raise ProtocolError(f"ledger entry from {env.sender!r}")
    entry = body.get("entry")
    if not isinstance(entry, str) or entry not in ("release", "budget", "end"):
        raise ProtocolError(f"unknown ledger entry {entry!r:.80}")
    session = opened.session
    namespace_of = recorded_in
    try:
        if entry == "release":
            phase = body.get("phase")
            release = _index("a release index", body.get("release"))
            if type(phase) is not int or phase != env.phase:
                raise ProtocolError(f"bad phase {phase!r:.40} (envelope: {env.phase})")
            event = PrivacyEvent.from_wire(body.get("event"))
            owner = _owner_of(body)
            return Entry(
                client,
                entry,
                by_server,
                phase,
                release,
                event,
                owner=owner,
                namespace=namespace_of,
                session=session,
            )
        if entry == "budget":
            epsilon, delta = body.get("epsilon"), body.get("delta")
            budget = None if epsilon is None else Budget(float(epsilon), float(delta))  # type: ignore[arg-type]
            return Entry(
                client,
                entry,
                by_server,
                budget=budget,
                owner=_owner_of(body),
                namespace=namespace_of,
                session=session,
            )
        releases = _index("an end marker's 'releases'", body.get("releases"))
        digest = body.get("digest")
        if not isinstance(digest, str) or len(digest) != 64:
            raise ProtocolError(f"an end marker's 'digest' must be 64 hex digits, {digest!r:.80}")
        return Entry(
            client,
            entry,
            by_server,
            releases=releases,
            digest=digest,
            namespace=namespace_of,
            session=session,
        )
    except (ProtocolError, ConfigError):
        raise
    except Exception as exc:  # any defect of an untrusted body is a malformed record
        raise ProtocolError(f"bad ledger entry: {type(exc).__name__}: {exc}") from exc


def _write(ledger: PrivacyLedger, run_id: str, entry: Entry, evidence: bytes | None) -> None:
    """Record ``entry`` (a release or a budget) in ``ledger``; LedgerError if it contradicts
    what is recorded."""
    owner = entry.owner
    if owner is not None:
        ledger.set_owner(run_id, entry.client, owner.name, owner.objective)
        if owner.delta is not None and owner.accountant is not None:
            ledger.set_run(run_id, owner.delta, owner.accountant)
        if owner.lifetime is not None:
            ledger.set_lifetime_budget(owner.name, owner.lifetime)
    if entry.event is not None:
        ledger.record(
            run_id, entry.client, entry.phase, entry.event, entry.release, evidence=evidence
        )
    elif entry.budget is not None:
        ledger.set_budget(run_id, entry.client, entry.budget)


def _complete(ledger: PrivacyLedger, run_id: str, entry: Entry) -> bool:
    """Whether the releases ``ledger`` holds for the end marker's client are the ones it
    closes."""
    rows = [(p, r, e) for p, r, _, e in ledger.history(run_id, entry.client)]
    return len(rows) == entry.releases and releases_digest(rows) == entry.digest


def apply_record(
    ledger: PrivacyLedger,
    run_id: str,
    record: TopicRecord,
    signer: Signer | None = None,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> int | None:
    """Apply one ledger-topic record, of any namespace; the client id if it is an end marker
    that matches what ``ledger`` holds, else None. ProtocolError if it is not a valid record
    for ``run_id`` (then nothing is recorded), among them a record above ``max_bytes``
    (refused before decoding) and an end marker that does not match. ``signer`` (signed runs)
    verifies the record, and a release keeps the signed record as its evidence
    (:mod:`fedxab.privacy.verify`); without it the record is only decoded."""
    reader = LedgerReader(run_id, None, signer, max_bytes)
    entry = reader.open(record)
    if entry.entry == "end":
        if not _complete(ledger, run_id, entry):
            raise ProtocolError(f"client {entry.client}'s end marker does not match its releases")
        return entry.client
    _write(ledger, run_id, entry, reader.evidence(record))
    return None


def _where(record: TopicRecord) -> str:
    return f"partition {record.partition} offset {record.offset}"


def _about(entry: Entry) -> str:
    by = "the server" if entry.by_server else f"client {entry.client}"
    what = {"release": f"release (phase {entry.phase}, release {entry.release})"}.get(
        entry.entry, entry.entry
    )
    return f"{by}'s {what} record about client {entry.client}"


class LedgerReader:
    """Reads one run's ledger topic into a ledger, record by record (the broker side,
    :mod:`fedxab.agents.ledger_mirror`, feeds it): opens, checks and applies its records and
    counts, logs and names those it refuses (module docstring).

    ``clients_only``: the run's clients write their own records (local DP), so a record the
    server authored about a client is refused. ``session``: the execution's session (a signing
    server's own); releases and end markers of another session are refused."""

    def __init__(
        self,
        run_id: str,
        namespace: str | None,
        signer: Signer | None,
        max_bytes: int,
        *,
        topic: str = "",
        clients_only: bool = False,
        session: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.namespace = namespace
        self.signer = signer
        self.max_bytes = max_bytes
        self.topic = topic
        self.clients_only = clients_only
        self.session = session or None
        self.result = Rebuild()
        self.first: dict[tuple[int, int, int], str] = {}  # where each recorded release came from
        self.own: dict[tuple[int, int, int], str] = {}  # clients' own releases (audit: pass 1)
        self.own_any: dict[int, str] = {}  # each client's first own record (audit: pass 1)

    def evidence(self, record: TopicRecord) -> bytes | None:
        return None if self.signer is None else bytes(record.value)

    def open(self, record: TopicRecord) -> Entry:
        opened = open_record(record.value, self.signer, self.max_bytes)
        entry = entry_of(
            opened, self.run_id, signed=self.signer is not None, namespace=self.namespace
        )
        if (
            self.session is not None
            and entry.entry != "budget"
            and not entry.by_server
            and entry.session != self.session
        ):
            raise _Replay(
                f"{_about(entry)} of session {entry.session!r:.70}, not this execution's: replayed"
            )
        return entry

    def refuse(self, reason: str, record: TopicRecord, text: str) -> None:
        result = self.result
        result.skipped += 1
        result.reasons[reason] += 1
        if reason in HOSTILE and len(result.named) < _NAMED:
            result.named.append(f"{self.topic} {_where(record)}: {text}")
        if result.reasons[reason] == 1:  # one line per kind; the summary gives the counts
            level = logging.ERROR if reason in HOSTILE else logging.WARNING
            log.log(
                level,
                "ledger topic %s %s refused (%s; further ones are counted, not logged): %s",
                self.topic,
                _where(record),
                reason,
                text,
            )

    def entry(self, record: TopicRecord) -> Entry | None:
        """The record's entry, or None (refused and counted)."""
        try:
            return self.open(record)
        except (ProtocolError, ConfigError) as exc:  # malformed, or an event no one accounts
            self.refuse(getattr(exc, "reason", "malformed"), record, str(exc))
            return None

    def scan(self, records: Iterable[TopicRecord]) -> list[tuple[TopicRecord, Entry]]:
        """Every valid entry of ``records`` (a whole topic read at once), the others refused;
        notes where each client's own records are, and whether there are any (then the run is
        local DP: ``clients_only``)."""
        entries = []
        for record in records:
            entry = self.entry(record)
            if entry is None:
                continue
            entries.append((record, entry))
            if not entry.by_server:
                self.clients_only = True
                self.own_any.setdefault(entry.client, _where(record))
                if entry.entry == "release":
                    self.own.setdefault(entry.key, _where(record))
        return entries

    def apply(self, ledger: PrivacyLedger, record: TopicRecord, entry: Entry) -> None:
        """Record ``entry`` in ``ledger``, or refuse it (counted, and named if hostile)."""
        if entry.by_server and self.clients_only:
            theirs = self.own.get(entry.key) or self.own_any.get(entry.client)
            also = "" if theirs is None else f"; client {entry.client}'s own record: {theirs}"
            self.refuse(
                "server_authored",
                record,
                f"{_about(entry)}: under local DP the server may not author a client's "
                f"ledger records{also}",
            )
            return
        if entry.entry == "end":
            if _complete(ledger, self.run_id, entry):
                self.result.ended.add(entry.client)
                evidence = self.evidence(record)
                if evidence is not None:  # the client's rows, as a whole, for an auditor
                    ledger.set_end(self.run_id, entry.client, evidence)
            else:
                held = len(ledger.history(self.run_id, entry.client))
                self.refuse(
                    "end_mismatch",
                    record,
                    f"{_about(entry)} closes {entry.releases} release(s) with digest "
                    f"{entry.digest[:12]}..., but {held} were read for it: not this mirror's end",
                )
            return
        try:
            _write(ledger, self.run_id, entry, self.evidence(record))
        except LedgerError as exc:  # a valid record contradicting one already recorded
            first = self.first.get(entry.key, "an earlier record")
            self.refuse(
                "conflict",
                record,
                f"{_about(entry)} contradicts the one recorded from {first} ({exc}); the first "
                "is kept (a party that published two different records under one key is "
                "misbehaving: audit it)",
            )
            return
        if entry.event is not None:
            self.first.setdefault(entry.key, _where(record))

    def read(self, ledger: PrivacyLedger, record: TopicRecord) -> None:
        entry = self.entry(record)
        if entry is not None:
            self.apply(ledger, record, entry)

    def finish(self) -> Rebuild:
        result = self.result
        if result.skipped:
            log.warning(
                "ledger topic %s: %d record(s) refused (%s)",
                self.topic,
                result.skipped,
                result.summary(),
            )
        return result
