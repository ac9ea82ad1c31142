"""The ledger side of one private run: budgets, the clients' gates and the results' privacy block.

Every party of a run (the in-process runner, or each client agent for its own clients) opens the
configured ledger (``[privacy] ledger``, or an in-memory one), sets each client's budget
``(budget_epsilon, delta)`` when one is configured and hands each private client a
:class:`~fedxab.privacy.gate.LedgerGate`. At the end, :meth:`RunLedger.block` recomputes every
client's epsilon from the recorded events with the configured accountant (never a running total):
that is what the results file reports.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from typing import Any

from fedxab.privacy.gate import LedgerGate
from fedxab.privacy.ledger import Budget, PrivacyLedger, canonical
from fedxab.privacy.mechanisms import PrivacyEvent

__all__ = ["RunLedger"]


class RunLedger:
    """Run ``run``'s view of ``ledger``, accounting at ``delta``."""

    def __init__(
        self,
        ledger: PrivacyLedger,
        run: str,
        *,
        delta: float,
        budget_epsilon: float | None = None,
    ) -> None:
        self.ledger = ledger
        self.run = run
        self.delta = delta
        self.budget = None if budget_epsilon is None else Budget(budget_epsilon, delta)

    @classmethod
    def from_config(
        cls,
        settings: Any,
        algorithm_params: Mapping[str, Any],
        run: str,
        n_clients: int,
        *,
        path: str | None = None,
    ) -> RunLedger:
        """From a :class:`~fedxab.config.PrivacyConfig` (``[privacy]``); ``path`` overrides
        its ledger file (``":memory:"`` for a private copy)."""
        path = path or settings.ledger or ":memory:"
        ledger = PrivacyLedger(path, accountant=settings.accountant)
        return cls(
            ledger,
            run,
            delta=settings.accounting_delta(algorithm_params, n_clients),
            budget_epsilon=settings.budget_epsilon,
        )

    def gate(self, client: int) -> LedgerGate:
        """Client ``client``'s gate, its budget set in the ledger first (if there is one)."""
        if self.budget is not None:
            self.ledger.set_budget(self.run, client, self.budget)
        return LedgerGate(self.ledger, self.run, client)

    def block(self, clients: Iterable[int], withdrawn: Mapping[int, int]) -> dict[str, Any]:
        """A run's ``privacy`` block: per client (in ``clients`` order) the epsilon spent at
        ``delta`` and the releases recorded; ``withdrawn`` maps a client that dropped out to the
        phase it refused."""
        ids = list(clients)
        epsilon = self.ledger.spent_all(self.run, self.delta)
        releases = self.ledger.releases_all(self.run)
        per_client = [float(epsilon.get(m, 0.0)) for m in ids]
        return {
            "accountant": self.ledger.accountant.name,
            "delta": self.delta,
            "budget_epsilon": None if self.budget is None else self.budget.epsilon,
            "max_epsilon": max(per_client, default=0.0),
            "epsilon": per_client,
            "releases": [int(releases.get(m, 0)) for m in ids],
            "withdrawn": {str(m): int(p) for m, p in sorted(withdrawn.items())},
            "epsilon_by_phase": self.epsilon_by_phase(ids),
        }

    def epsilon_by_phase(self, clients: Iterable[int]) -> list[list[float]]:
        """``[[phase, epsilon], ...]`` for every phase at which one of ``clients`` released: the
        maximum over ``clients`` of the epsilon spent up to and including that phase, recomputed
        from the events by the accountant at ``delta``.

        Clients with the same sequence of ``(phase, event)`` share one computation, and each
        distinct canonical prefix is accounted once."""
        wanted = {int(m) for m in clients}
        groups: set[tuple[tuple[int, PrivacyEvent], ...]] = {
            tuple(rows) for m, rows in self.ledger.history_all(self.run).items() if m in wanted
        }
        cache: dict[tuple[PrivacyEvent, ...], float] = {}
        steps: list[tuple[list[int], list[float]]] = []  # per group: its phases, epsilon after
        for rows in groups:
            phases: list[int] = []
            spent: list[float] = []
            for i, (phase, _) in enumerate(rows):
                if i + 1 < len(rows) and rows[i + 1][0] == phase:
                    continue  # the phase's last release closes it
                prefix = canonical(e for _, e in rows[: i + 1])
                if prefix not in cache:
                    cache[prefix] = float(self.ledger.accountant.epsilon(prefix, self.delta))
                phases.append(int(phase))
                spent.append(cache[prefix])
            steps.append((phases, spent))
        out: list[list[float]] = []
        for phase in sorted({p for phases, _ in steps for p in phases}):
            best = 0.0
            for phases, spent in steps:
                k = bisect_right(phases, phase)
                if k:
                    best = max(best, spent[k - 1])
            out.append([phase, best])
        return out

    def close(self) -> None:
        self.ledger.close()
