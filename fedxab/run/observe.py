"""Observing a run as it goes, the same for every runner: metrics at the start, every client's
epsilon from the ledger, the max epsilon for progress displays."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedxab.run.accounting import stopped_phases
from fedxab.run.assembly import regret_known

if TYPE_CHECKING:
    from fedxab.config import Config
    from fedxab.monitoring.metrics import FederationMetrics
    from fedxab.objectives.families import ClientFamily
    from fedxab.privacy.run_ledger import RunLedger

__all__ = ["EpsilonWatch", "ledger_epsilons", "observe_privacy", "start_metrics"]


def observe_privacy(
    metrics: FederationMetrics, run_ledger: RunLedger, n_clients: int, server: Any
) -> None:
    """Give ``metrics`` every client's epsilon so far (from ``run_ledger``), the budget, delta
    and the clients whose releases stopped."""
    budget = run_ledger.budget
    metrics.on_privacy(
        ledger_epsilons(run_ledger, range(n_clients)),
        budget_epsilon=None if budget is None else budget.epsilon,
        delta=run_ledger.delta,
        withdrawn=stopped_phases(server),
    )


def start_metrics(
    metrics: FederationMetrics,
    config: Config,
    run_id: str,
    transport: str,
    clients: int,
    family: ClientFamily | None,
) -> None:
    """Tell ``metrics`` that run ``run_id`` of ``config`` starts, seen by a party that observes
    ``clients`` clients over ``transport`` (``inprocess``, ``memory``, ``kafka``)."""
    global_known, local_known = regret_known(family)
    metrics.start_run(
        run_id=run_id,
        algorithm=config.algorithm.name,
        objective=config.objective.name,
        transport=transport,
        clients=clients,
        budget=config.run.budget,
        regret_known=global_known,
        local_regret_known=local_known,
    )


def ledger_epsilons(run_ledger: RunLedger, clients: Any) -> dict[int, float]:
    """The epsilon each of ``clients`` has spent so far in ``run_ledger``, recomputed by its
    accountant at the run's delta (the numbers of :meth:`RunLedger.block`)."""
    deltas = dict.fromkeys((int(m) for m in clients), run_ledger.delta)
    return run_ledger.ledger.epsilons(run_ledger.run, deltas)


class EpsilonWatch:
    """The max over ``clients`` of the epsilon spent so far in ``run_ledger``, for progress
    displays: recomputed (:func:`ledger_epsilons`) only when the ledger recorded releases since
    the last look (one cheap query otherwise; the ledger is append-only, so the same release
    counts mean the same histories)."""

    def __init__(self, run_ledger: RunLedger, clients: Any) -> None:
        self.run_ledger = run_ledger
        self.clients = [int(m) for m in clients]
        self._releases: dict[int, int] | None = None
        self._epsilon = 0.0

    def __call__(self) -> float:
        rl = self.run_ledger
        releases = rl.ledger.releases_all(rl.run)
        if releases != self._releases:
            self._releases = releases
            self._epsilon = max(ledger_epsilons(rl, self.clients).values(), default=0.0)
        return self._epsilon
