"""What ``fedxab audit`` reports: each client's releases, spent epsilon, budget and what remains.

Epsilon is recomputed from the ledger's events by the chosen accountant (never read from a stored
epsilon), at ``delta`` if given, else at the delta of the client's budget (clients with neither
get none). The summary accounts a whole run at once (:meth:`PrivacyLedger.epsilons`: one
accountant call per distinct history, from the ledger's ``totals`` view of the events).
"""

from __future__ import annotations

from typing import Any

from fedxab.errors import ConfigError
from fedxab.privacy.ledger import PrivacyLedger

__all__ = ["client_history", "client_summaries"]


def client_summaries(
    ledger: PrivacyLedger, run: str | None = None, delta: float | None = None
) -> list[dict[str, Any]]:
    """One row per (run, client): releases, epsilon, budget, remaining, over-budget flag."""
    runs = ledger.runs() if run is None else [run]
    if run is not None and run not in ledger.runs():
        raise ConfigError("--run", f"no run {run!r} in the ledger; runs: {ledger.runs()}")
    rows = []
    for r in runs:
        budgets = ledger.budgets(r)
        releases = ledger.releases_all(r)
        deltas = ledger.deltas(r, delta)
        epsilons = ledger.epsilons(r, deltas)
        for client in ledger.clients(r):
            budget = budgets.get(client)
            epsilon = epsilons.get(client)
            remaining = None if budget is None or epsilon is None else budget.epsilon - epsilon
            rows.append(
                {
                    "run": r,
                    "client": client,
                    "releases": releases.get(client, 0),
                    "delta": deltas.get(client),
                    "epsilon": epsilon,
                    "budget_epsilon": None if budget is None else budget.epsilon,
                    "remaining": remaining,
                    "over_budget": remaining is not None and remaining < -1e-12,
                    "accountant": ledger.accountant.name,
                }
            )
    return rows


def client_history(
    ledger: PrivacyLedger, run: str, client: int, delta: float | None = None
) -> list[dict[str, Any]]:
    """The client's events in order, each with the epsilon spent up to and including it."""
    rows = ledger.history(run, client)
    if not rows:
        raise ConfigError("--client", f"client {client} has no release in run {run!r}")
    budget = ledger.budget(run, client)
    at = delta if delta is not None else None if budget is None else budget.delta
    if at is None:
        raise ConfigError("--delta", f"client {client} of run {run} has no budget; pass --delta")
    events = [event for *_, event in rows]
    history = []
    for k, (phase, release, recorded_at, event) in enumerate(rows, start=1):
        epsilon = ledger.accountant.epsilon(events[:k], at)
        history.append(
            {"phase": phase, "release": release, "recorded_at": recorded_at}
            | event.to_wire()
            | {
                "epsilon_after": epsilon,
                "delta": at,
                "over_budget": budget is not None and epsilon > budget.epsilon + 1e-12,
            }
        )
    return history
