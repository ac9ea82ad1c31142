"""What a private algorithm sees of the privacy machinery, without I/O: the gate it calls around
each release and the error that refuses one.

fedxab's privacy model: **before** a release, a client (or, under central DP, the server) asks its
:class:`ReleaseGate` to admit it, which raises :class:`PrivacyBudgetExceeded` when the release
would exceed the budget; the release is recorded before the released value leaves. The sans-I/O
algorithms (:mod:`fedxab.algorithms`) import this module only; the ledger that stands behind a
gate (:class:`~fedxab.privacy.gate.LedgerGate`, SQLite) is given to them by the runner.
"""

from __future__ import annotations

from typing import Protocol

from fedxab.errors import FedxabError
from fedxab.privacy.mechanisms import PrivacyEvent

__all__ = ["PrivacyBudgetExceeded", "ReleaseGate"]


class PrivacyBudgetExceeded(FedxabError, RuntimeError):
    """A release would take a client over its privacy budget; nothing was released."""


class ReleaseGate(Protocol):
    """What a private algorithm calls around each release."""

    def admit(self, phase: int, event: PrivacyEvent) -> None:
        """Raise PrivacyBudgetExceeded if releasing ``event`` would exceed the budget."""
        ...

    def record(self, phase: int, event: PrivacyEvent) -> None:
        """Record the release of ``event`` in phase ``phase`` (before it is sent)."""
        ...
