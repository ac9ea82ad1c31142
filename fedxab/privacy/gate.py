"""A client's release gate: the ledger check before a release and the record that goes with it.

fedxab's privacy model: **before** a release, the client checks that it keeps it within its budget
and records it, in one write transaction (:meth:`~fedxab.privacy.ledger.PrivacyLedger.reserve`,
which raises :class:`~fedxab.privacy.release.PrivacyBudgetExceeded`), so the release is recorded
before the released value leaves the client: a crash after the record over-counts (safe) and
never under-counts, and two processes on one ledger cannot both pass the check on the same
remainder. The algorithm client (sans-I/O) only sees the two calls of
:class:`~fedxab.privacy.release.ReleaseGate`; the runner or the client agent gives it a
:class:`LedgerGate`.

Records made through a gate are also kept in :attr:`LedgerGate.outbox` until the transport takes
them (:meth:`LedgerGate.drain`): the client agent mirrors them to the run's ``ledger`` topic.
"""

from __future__ import annotations

from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent

__all__ = ["LedgerGate"]


class LedgerGate:
    """Client ``client``'s gate on ``ledger`` for run ``run``."""

    def __init__(self, ledger: PrivacyLedger, run: str, client: int) -> None:
        self.ledger = ledger
        self.run = run
        self.client = client
        self.outbox: list[tuple[int, PrivacyEvent]] = []

    def admit(self, phase: int, event: PrivacyEvent) -> None:
        """Allow ``event`` if it fits the budget, recording it in the same write transaction
        (:meth:`~fedxab.privacy.ledger.PrivacyLedger.reserve`: processes sharing the ledger
        cannot both spend the last of a budget), or if this very release is already recorded
        (a replayed or re-run phase releases the same seeded values again: nothing new)."""
        self.ledger.reserve(self.run, self.client, phase, event)

    def record(self, phase: int, event: PrivacyEvent) -> None:
        """The release of ``event``, before it is sent: already recorded by :meth:`admit`
        (recording it again changes nothing; another event under its key is refused)."""
        self.ledger.record(self.run, self.client, phase, event)
        self.outbox.append((phase, event))  # mirrored even if already recorded (a re-run)

    def drain(self) -> list[tuple[int, PrivacyEvent]]:
        """The releases made since the last call (for the ledger topic)."""
        out, self.outbox = self.outbox, []
        return out
