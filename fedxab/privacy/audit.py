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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedxab.errors import ConfigError, FedxabError
from fedxab.privacy.accountants import Accountant, fallback_note, make_accountant
from fedxab.privacy.ledger import Budget, PrivacyLedger, canonical

__all__ = [
    "Audit",
    "AuditTable",
    "audit_ledger",
    "client_history",
    "client_lifetime",
    "client_summaries",
    "owner_summaries",
]

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


@dataclass(frozen=True)
class AuditTable:
    """One table of an audit: its title, the row keys it shows as columns (``epsilon NAME``:
    the row's ``epsilons[NAME]``) and its rows."""

    title: str
    columns: list[str]
    rows: list[dict[str, Any]]


@dataclass(frozen=True)
class Audit:
    """What ``fedxab audit`` shows: its tables (``--json`` prints the first one's rows) and a
    note for each accountant that fell back to another (:func:`fallback_note`)."""

    tables: list[AuditTable]
    notes: list[str]


def audit_ledger(
    path: Path,
    *,
    run: str | None = None,
    client: int | None = None,
    lifetime: bool = False,
    delta: float | None = None,
    accountants: Sequence[str] | None = None,
) -> Audit:
    """The audit of the ledger file at ``path``, after checking its ``totals`` view against its
    events (:meth:`PrivacyLedger.verify_totals`; of ``run`` only, unless ``lifetime``).

    Epsilon is by the first of ``accountants`` (checked against the budgets), the others shown
    beside it; without them, by the accountant the ledger's runs recorded if they agree on one,
    else rdp. The tables: with ``client`` and ``lifetime``, that client's lifetime run by run
    (:func:`client_lifetime`); with ``client``, its event history in ``run`` (which may be left
    out when the ledger holds one run; :func:`client_history`); else one row per run and client
    (:func:`client_summaries`; not with ``lifetime``) and one per data owner
    (:func:`owner_summaries`; with ``lifetime`` or when the ledger has data owners)."""
    names = list(accountants or ["rdp"])
    also = [make_accountant(name) for name in names[1:]]
    with PrivacyLedger(path, accountant=names[0]) as ledger:
        ledger.verify_totals(None if lifetime else run)  # derived data that was edited
        recorded = ledger.accountants()
        if accountants is None and len(recorded) == 1:  # the accountant the runs used
            names = recorded
            ledger.accountant = make_accountant(recorded[0])
        label = f"{names[0]} accountant"
        if client is not None:
            tables = [_client_table(ledger, label, run, client, lifetime, delta)]
        else:
            tables = _summary_tables(
                ledger, f"privacy ledger {path}", label, run, lifetime, delta, also
            )
        notes = [fallback_note(a) for a in (ledger.accountant, *also)]
    return Audit(tables, [note for note in notes if note])


def _client_table(
    ledger: PrivacyLedger,
    label: str,
    run: str | None,
    client: int,
    lifetime: bool,
    delta: float | None,
) -> AuditTable:
    """One client's lifetime (``lifetime``) or event history in ``run`` (see
    :func:`audit_ledger`)."""
    if lifetime:
        rows = client_lifetime(ledger, client, delta)
        columns = ["owner", "run", "releases", "delta", "epsilon_run", "epsilon",
                   "budget_epsilon", "remaining", "over_budget"]  # fmt: skip
        title = (
            f"client {client}'s lifetime, run by run: epsilon of the run, then of the "
            f"data owner after it ({label})"
        )
        return AuditTable(title, columns, rows)
    runs = [run] if run is not None else ledger.runs()
    if len(runs) != 1:
        raise FedxabError(f"--client needs --run: the ledger holds runs {runs}")
    rows = client_history(ledger, runs[0], client, delta)
    columns = ["phase", "release", "recorded_at", "noise_multiplier",
               "sampling_rate", "count", "epsilon_after", "over_budget"]  # fmt: skip
    return AuditTable(f"run {runs[0]}, client {client} ({label})", columns, rows)


def _summary_tables(
    ledger: PrivacyLedger,
    name: str,
    label: str,
    run: str | None,
    lifetime: bool,
    delta: float | None,
    also: Sequence[Accountant],
) -> list[AuditTable]:
    """Per run and client (not with ``lifetime``), then per data owner (see
    :func:`audit_ledger`)."""
    spend = ["releases", "delta", "epsilon", *(f"epsilon {a.name}" for a in also),
             "budget_epsilon", "remaining", "over_budget"]  # fmt: skip
    tables = []
    if not lifetime:
        rows = client_summaries(ledger, run, delta, also)
        tables.append(
            AuditTable(f"{name}, per run ({label})", ["run", "client", "owner", *spend], rows)
        )
    owners = owner_summaries(ledger, delta, also) if lifetime or ledger.owners() else []
    if lifetime or owners:
        title = f"lifetime spend per data owner ({label})"
        tables.append(AuditTable(title, ["owner", "runs", *spend], owners))
    return tables
