"""What ``fedxab audit`` reports: each client's releases, spent epsilon, budget and what remains,
per run and, for data owners (:meth:`PrivacyLedger.set_owner`), over their lifetime.

Epsilon is recomputed from the ledger's events by the ledger's accountant (never read from a
stored epsilon), at ``delta`` if given, else at the delta of the client's budget -- the lifetime
budget's for an owner --, else at the delta its run recorded (:meth:`PrivacyLedger.set_run`; the
smallest of its runs' for an owner); only runs recorded by an older fedxab may have none.
Budgets, what remains and the over-budget flag are the ledger accountant's; ``also`` names more
accountants whose epsilon is shown beside it (``epsilons``, by accountant name), to compare
their tightness on the same events. The summary accounts a whole run at once
(:meth:`PrivacyLedger.epsilons`: one accountant call per distinct history, from the ledger's
``totals`` view of the events, which ``fedxab audit`` first checks against the events:
:meth:`PrivacyLedger.verify_totals`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from fedxab.errors import ConfigError
from fedxab.privacy.accountants import Accountant
from fedxab.privacy.ledger import Budget, PrivacyLedger, canonical

__all__ = ["client_history", "client_lifetime", "client_summaries", "owner_summaries"]

OVER_BUDGET_TOLERANCE = 1e-12
"""Epsilon above a budget by no more than this (floating-point noise) is not over it."""


def _spend(
    budget: Budget | None, epsilons: dict[str, float | None], accountant: str
) -> dict[str, Any]:
    """The columns every summary row shares: ``epsilon`` (by ``accountant``), the budget, what
    remains, the over-budget flag and ``epsilons`` (every accountant's)."""
    epsilon = epsilons[accountant]
    remaining = None if budget is None or epsilon is None else budget.epsilon - epsilon
    return {
        "epsilon": epsilon,
        "budget_epsilon": None if budget is None else budget.epsilon,
        "remaining": remaining,
        "over_budget": remaining is not None and remaining < -OVER_BUDGET_TOLERANCE,
        "accountant": accountant,
        "epsilons": epsilons,
    }


def client_summaries(
    ledger: PrivacyLedger,
    run: str | None = None,
    delta: float | None = None,
    also: Sequence[Accountant] = (),
) -> list[dict[str, Any]]:
    """One row per (run, client): its data owner, releases, epsilon, budget, remaining,
    over-budget flag."""
    runs = ledger.runs() if run is None else [run]
    if run is not None and run not in ledger.runs():
        raise ConfigError("--run", f"no run {run!r} in the ledger; runs: {ledger.runs()}")
    accountants = [ledger.accountant, *also]
    rows = []
    for r in runs:
        budgets = ledger.budgets(r)
        releases = ledger.releases_all(r)
        owners = ledger.run_owners(r)
        deltas = ledger.deltas(r, delta)
        by_accountant = {a.name: ledger.epsilons(r, deltas, a) for a in accountants}
        for client in ledger.clients(r):
            epsilons = {name: eps.get(client) for name, eps in by_accountant.items()}
            rows.append(
                {
                    "run": r,
                    "client": client,
                    "owner": owners.get(client),
                    "releases": releases.get(client, 0),
                    "delta": deltas.get(client),
                }
                | _spend(budgets.get(client), epsilons, ledger.accountant.name)
            )
    return rows


def owner_summaries(
    ledger: PrivacyLedger, delta: float | None = None, also: Sequence[Accountant] = ()
) -> list[dict[str, Any]]:
    """One row per data owner: the runs it took part in, its releases over all of them, and the
    epsilon they spent together against its lifetime budget
    (:meth:`PrivacyLedger.lifetime_spent`)."""
    releases_of = functools.cache(ledger.releases_all)  # one query per run, not per owner
    rows = []
    for owner in ledger.owners():
        budget = ledger.lifetime_budget(owner)
        at = delta if delta is not None else ledger.owner_delta(owner)
        taken = ledger.owner_runs(owner)
        releases = sum(releases_of(run).get(client, 0) for run, client in taken)
        epsilons = {
            a.name: None if at is None else ledger.lifetime_spent(owner, at, a)
            for a in [ledger.accountant, *also]
        }
        rows.append(
            {
                "owner": owner,
                "runs": len({run for run, _ in taken}),
                "releases": releases,
                "delta": at,
            }
            | _spend(budget, epsilons, ledger.accountant.name)
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
    at = delta if delta is not None else ledger.deltas(run).get(int(client))
    if at is None:
        raise ConfigError(
            "--delta",
            f"client {client} of run {run} has no budget and the run recorded no delta (an "
            "older ledger); pass --delta",
        )
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
                "over_budget": budget is not None
                and epsilon > budget.epsilon + OVER_BUDGET_TOLERANCE,
            }
        )
    return history


def client_lifetime(
    ledger: PrivacyLedger, client: int, delta: float | None = None
) -> list[dict[str, Any]]:
    """Client ``client``'s lifetime, run by run: for each data owner it is (``client-<m>/...``,
    one per data set) and each run of that owner in the order of the run's first release here,
    the run's releases, the epsilon of that run alone and the owner's lifetime epsilon after it
    (every release of the owner's runs so far, composed: :meth:`PrivacyLedger.owner_history`),
    at ``delta`` if given, else at the owner's lifetime budget's delta."""
    taken = [
        (owner, run)
        for owner in ledger.owners()
        for run, m in ledger.owner_runs(owner)
        if m == int(client)
    ]
    if not taken:
        raise ConfigError("--client", f"client {client} is no data owner's client in this ledger")
    rows = []
    for owner in dict.fromkeys(owner for owner, _ in taken):
        budget = ledger.lifetime_budget(owner)
        at = delta if delta is not None else ledger.owner_delta(owner)
        if at is None:
            raise ConfigError(
                "--delta",
                f"data owner {owner!r} has no lifetime budget and its runs recorded no delta "
                "(an older ledger); pass --delta",
            )
        histories = {run: ledger.history(run, client) for o, run in taken if o == owner}
        order = sorted(
            histories, key=lambda run: (min((h[2] for h in histories[run]), default=""), run)
        )
        so_far: list[Any] = []
        for run in order:
            events = [event for *_, event in histories[run]]
            so_far += events
            lifetime = ledger.accountant.epsilon(canonical(so_far), at)
            rows.append(
                {
                    "owner": owner,
                    "run": run,
                    "releases": sum(e.count for e in events),
                    "delta": at,
                    "epsilon_run": ledger.accountant.epsilon(canonical(events), at),
                }
                | _spend(budget, {ledger.accountant.name: lifetime}, ledger.accountant.name)
            )
    return rows
