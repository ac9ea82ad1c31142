"""Verifying a ledger from its evidence, with public keys alone (``fedxab audit --verify``).

A ledger rebuilt from a signed run's ledger topic
(:func:`~fedxab.agents.ledger_mirror.rebuild_ledger`) keeps, with every release, the signed record
that carried it (``events.evidence``). Each row is verified again from that evidence alone:

1. the signature: by the client the row is about, or -- a record written under central DP,
   which says so -- by the server about that client (:meth:`~fedxab.security.signing.Signer.open`
   with the verifier's keys: for Ed25519 runs the public keys, which an auditor may hold without
   being able to sign anything);
2. the content: the evidence decodes to a release whose run, client, phase, release and event
   are the row's (:func:`~fedxab.privacy.mirror.entry_of`), so a row cannot be edited, moved to
   another client or run, or given another row's evidence;
3. what it is charged to: the evidence names the data owner the ledger records for the row's
   client in its run (both or neither), so a release cannot be moved to another owner's lifetime
   spend or out of every owner's, and the delta and accountant the ledger records for the run
   (:meth:`~fedxab.privacy.ledger.PrivacyLedger.set_run`), if it records them, are the signed
   ones; an owner's lifetime budget in the ledger (whose delta its lifetime epsilon is accounted
   at) is one its records signed (a failure on the owner's first row otherwise).

4. the rows as a whole: a client's signed end marker, kept with the ledger
   (:meth:`~fedxab.privacy.ledger.PrivacyLedger.set_end`), gives the number and digest of its
   releases in the run, so a row deleted (a release hidden from the accounting) or added fails
   as a mismatch on that client; a client without an end marker (a run still going, or one whose
   marker was removed) is counted (:attr:`Verification.open`): its rows are verified one by one
   only.

A row without evidence cannot be verified and fails; a ledger none of whose rows has evidence
(recorded by a run that does not sign) is one finding, :attr:`Verification.unsigned`, not one
failure per row. A client's own ledger (signed runs) and a ledger rebuilt from the topic both keep
the evidence. Under Ed25519 nobody but client ``m``
holds ``m``'s private key, so a row that verifies as ``m``'s was signed by ``m``; a row signed by
the server is counted apart (:attr:`Verification.by_server`): the server made it, as it does
every release under central DP.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

from fedxab.errors import ConfigError, ProtocolError
from fedxab.privacy.ledger import Budget, PrivacyLedger
from fedxab.privacy.mirror import Entry, entry_of, releases_digest
from fedxab.security.signing import Signer

__all__ = ["Failure", "Verification", "verify_ledger"]


@dataclass(frozen=True)
class Failure:
    """A row of the ledger that does not verify, and why."""

    run: str
    client: int
    phase: int | None
    """None: the client's records as a whole (its end marker, its owner's lifetime budget)."""
    release: int | None
    reason: str

    def __str__(self) -> str:
        where = f"run {self.run}, client {self.client}"
        if self.phase is not None:
            where += f", phase {self.phase}, release {self.release}"
        return f"{where}: {self.reason}"


@dataclass
class Verification:
    """What :func:`verify_ledger` found: the rows checked, how many verified (``by_server`` of
    them signed by the server, central DP), and every row that failed."""

    rows: int = 0
    verified: int = 0
    by_server: int = 0
    unsigned: int = 0
    """Rows without evidence (each is also a failure)."""
    closed: int = 0
    """Clients (of a run) whose rows match their signed end marker."""
    open: int = 0
    """Clients (of a run) with rows but no end marker kept: verified row by row only."""
    failures: list[Failure] = field(default_factory=list)
    """The rows that failed."""
    whole: list[Failure] = field(default_factory=list)
    """The checks of a client's records as a whole that failed (end marker, lifetime budget)."""

    @property
    def ok(self) -> bool:
        """Whether there was a row to check and every row and whole verified."""
        return self.rows > 0 and not self.failures and not self.whole

    @property
    def all_unsigned(self) -> bool:
        """Whether no row has evidence: the ledger was recorded by a run that does not sign."""
        return self.rows > 0 and self.unsigned == self.rows


def _reason(
    verifier: Signer,
    run: str,
    row: tuple[int, int, int, object],
    evidence: bytes | None,
    owner: str | None,
    settings: tuple[float, str] | None,
) -> tuple[str | None, Entry | None]:
    """Why the row ``(client, phase, release, event)`` of ``run``, whose client the ledger
    records as data owner ``owner`` in a run it records at ``(delta, accountant)``
    ``settings``, fails against ``evidence`` (None if it verifies), and the evidence's entry."""
    if evidence is None:
        return "no evidence (a row recorded without its signed record cannot be verified)", None
    try:
        entry = entry_of(verifier.open(evidence), run, signed=True)
    except (ProtocolError, ConfigError) as exc:
        return f"{getattr(exc, 'reason', 'malformed')}: {exc}", None
    found = (entry.client, entry.phase, entry.release, entry.event)
    names = ("client", "phase", "release", "event")
    differ = [f"{n} {f!r}" for n, f, r in zip(names, found, row, strict=True) if f != r]
    if entry.entry != "release" or differ:
        what = ", ".join(differ) if entry.entry == "release" else f"a {entry.entry!r} entry"
        return f"the evidence is another record ({what})", entry
    signed = entry.owner
    if (None if signed is None else signed.name) != owner:
        named = None if signed is None else signed.name
        return f"data owner: the evidence names {named!r}, the ledger {owner!r}", entry
    accounted = None if signed is None else (signed.delta, signed.accountant)
    if settings is not None and accounted != settings:
        return (
            f"run accounting: the evidence says (delta, accountant) {accounted}, the ledger "
            f"{settings}",
            entry,
        )
    return None, entry


def verify_ledger(ledger: PrivacyLedger, verifier: Signer, run: str | None = None) -> Verification:
    """Verify every release of ``ledger`` (of ``run`` only, if given) from its evidence with
    ``verifier``'s keys (:func:`~fedxab.security.agents.verifier_in`: public keys)."""
    result = Verification()
    owners = functools.cache(ledger.run_owners)  # one query per run
    settings = functools.cache(ledger.run_settings)
    lifetimes: dict[str, tuple[Failure, set[Budget | None]]] = {}  # owner: first row, signed
    for run_id, client, phase, release, event, evidence in ledger.evidence(run):
        result.rows += 1
        result.unsigned += evidence is None
        row = (client, phase, release, event)
        owner = owners(run_id).get(client)
        reason, entry = _reason(verifier, run_id, row, evidence, owner, settings(run_id))
        if reason is not None:
            result.failures.append(Failure(run_id, client, phase, release, reason))
            continue
        assert entry is not None
        result.verified += 1
        result.by_server += entry.by_server
        if owner is not None and entry.owner is not None:
            first = Failure(run_id, client, None, None, "")
            lifetimes.setdefault(owner, (first, set()))[1].add(entry.owner.lifetime)
    _check_ends(ledger, verifier, run, result)
    for owner, (first, signed) in lifetimes.items():
        stored = ledger.lifetime_budget(owner)
        if stored not in signed:
            shown = sorted(map(str, signed))
            reason = (
                f"lifetime budget of data owner {owner!r}: the ledger's {stored} is signed by "
                f"none of its records (they sign {', '.join(shown)})"
            )
            result.whole.append(dataclasses.replace(first, reason=reason))
    return result


def _check_ends(
    ledger: PrivacyLedger, verifier: Signer, run: str | None, result: Verification
) -> None:
    """Each client's rows as a whole against its kept end marker (module docstring, 4)."""
    ends = ledger.ends(run)
    runs = [run] if run is not None else ledger.runs()
    for r in runs:
        for client in ledger.history_all(r):
            if (r, client) not in ends:
                result.open += 1
    for (r, client), evidence in sorted(ends.items()):
        rows = [(p, k, e) for p, k, _, e in ledger.history(r, client)]
        try:
            entry = entry_of(verifier.open(evidence), r, signed=True)
        except (ProtocolError, ConfigError) as exc:
            reason = f"end marker: {getattr(exc, 'reason', 'malformed')}: {exc}"
            result.whole.append(Failure(r, client, None, None, reason))
            continue
        if entry.entry != "end" or entry.client != client:
            other = f"client {entry.client}'s {entry.entry!r}"
            reason = f"end marker: the evidence is another record ({other})"
            result.whole.append(Failure(r, client, None, None, reason))
            continue
        if len(rows) != entry.releases or releases_digest(rows) != entry.digest:
            reason = (
                f"releases as a whole: the signed end marker closes {entry.releases} "
                f"release(s) (digest {entry.digest[:12]}...), the ledger holds {len(rows)} "
                f"(digest {releases_digest(rows)[:12]}...): a row was deleted or added"
            )
            result.whole.append(Failure(r, client, None, None, reason))
            continue
        result.closed += 1
