"""Verifying a ledger from its evidence, with public keys alone (``fedxab audit --verify``).

A ledger rebuilt from a signed run's ledger topic (:func:`~fedxab.privacy.mirror.rebuild_ledger`)
keeps, with every release, the signed record that carried it (``events.evidence``). Each row is
verified again from that evidence alone:

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
from fedxab.privacy.mirror import Entry, entry_of
from fedxab.security.signing import Signer

__all__ = ["Failure", "Verification", "verify_ledger"]


@dataclass(frozen=True)
class Failure:
    """A row of the ledger that does not verify, and why."""

    run: str
    client: int
    phase: int
    release: int
    reason: str

    def __str__(self) -> str:
        return (
            f"run {self.run}, client {self.client}, phase {self.phase}, release {self.release}: "
            f"{self.reason}"
        )


@dataclass
class Verification:
    """What :func:`verify_ledger` found: the rows checked, how many verified (``by_server`` of
    them signed by the server, central DP), and every row that failed."""

    rows: int = 0
    verified: int = 0
    by_server: int = 0
    unsigned: int = 0
    """Rows without evidence (each is also a failure)."""
    failures: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether there was a row to check and every row verified."""
        return self.rows > 0 and not self.failures

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
            first = Failure(run_id, client, phase, release, "")
            lifetimes.setdefault(owner, (first, set()))[1].add(entry.owner.lifetime)
    for owner, (first, signed) in lifetimes.items():
        stored = ledger.lifetime_budget(owner)
        if stored not in signed:
            shown = sorted(map(str, signed))
            reason = (
                f"lifetime budget of data owner {owner!r}: the ledger's {stored} is signed by "
                f"none of its records (they sign {', '.join(shown)})"
            )
            result.failures.append(dataclasses.replace(first, reason=reason))
    return result
