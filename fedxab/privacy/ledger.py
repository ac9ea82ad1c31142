"""The per-client privacy ledger: an append-only record of every release, with budgets.

DESIGN.md (Privacy). Every release a client makes is one row keyed by
``(run, client, phase, release)``: recording the same key again (a retry, a redelivered message,
a replayed phase) changes nothing, so a release is never charged twice; recording the same key
with a different event is refused (:class:`LedgerError`), because it would rewrite history.
Rows are never updated or deleted. An event no accountant can account (e.g. a count below 1) is
refused before it is recorded.

Spent epsilon is always recomputed from the events by an accountant
(:mod:`fedxab.privacy.accountants`), at the delta of the client's budget. Before a release the
client asks :meth:`PrivacyLedger.check_release`, which raises :class:`PrivacyBudgetExceeded` if
the release would take it over its budget: nothing has been released or recorded at that point.

An accountant's epsilon depends only on the multiset of event kinds (mechanism, noise multiplier,
sampling rate, sensitivity, scope) with their counts summed: events of one scope compose by adding
their RDP (``count`` times each), which does not depend on their order, and scopes combine by a
maximum. So the ledger keeps a **materialized view**, the table ``totals``: per (run, client,
event kind), the summed count, maintained by an ``AFTER INSERT ON events`` trigger in the same
transaction as the event, whatever inserts it (a duplicate ignored by ``INSERT OR IGNORE`` fires
no trigger). It is derived data, never written directly. Accounting reads a client's *canonical
history* (:func:`canonical`: one event per kind, summed counts, sorted) from it, so its cost does
not grow with the number of releases, and :meth:`PrivacyLedger.spent_all` accounts a whole run
with one query and one accountant call per distinct (history, delta): ten thousand clients with
the same history share one computation. (Summing counts is exact in arithmetic; in floating
point, ``n`` times an RDP value may differ from ``n`` additions of it in the last bits, about
1e-15 relative.)

Storage is SQLite (standard library): each record is its own transaction
(:meth:`PrivacyLedger.record_many`: one for the whole batch), in WAL mode with
``synchronous=FULL``, so a process killed between two releases loses no recorded event, and a
crash mid-write leaves the last complete state. A file that is not a ledger, or a ledger of
another schema, is refused with a clear error, and nothing is written to it.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fedxab.errors import ConfigError, FedxabError
from fedxab.privacy.accountants import check_event, make_accountant
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.privacy.release import PrivacyBudgetExceeded
from fedxab.private_files import create_owner_only
from fedxab.validation import check_positive

__all__ = ["Budget", "LedgerError", "PrivacyBudgetExceeded", "PrivacyLedger", "canonical"]

SCHEMA = "fedxab.ledger/2"

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    run TEXT NOT NULL, client INTEGER NOT NULL, phase INTEGER NOT NULL, release INTEGER NOT NULL,
    mechanism TEXT NOT NULL, noise_multiplier REAL NOT NULL, sampling_rate REAL NOT NULL,
    sensitivity REAL NOT NULL, count INTEGER NOT NULL, scope TEXT NOT NULL,
    recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (run, client, phase, release)
);
CREATE TABLE IF NOT EXISTS budgets (
    run TEXT NOT NULL, client INTEGER NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL,
    PRIMARY KEY (run, client)
);
CREATE TABLE IF NOT EXISTS totals (
    run TEXT NOT NULL, client INTEGER NOT NULL,
    mechanism TEXT NOT NULL, noise_multiplier REAL NOT NULL, sampling_rate REAL NOT NULL,
    sensitivity REAL NOT NULL, scope TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (run, client, mechanism, noise_multiplier, sampling_rate, sensitivity, scope)
);
CREATE TRIGGER IF NOT EXISTS events_totals AFTER INSERT ON events BEGIN
    INSERT INTO totals VALUES (NEW.run, NEW.client, NEW.mechanism, NEW.noise_multiplier,
        NEW.sampling_rate, NEW.sensitivity, NEW.scope, NEW.count)
    ON CONFLICT (run, client, mechanism, noise_multiplier, sampling_rate, sensitivity, scope)
    DO UPDATE SET count = count + excluded.count;
END;
"""

_EVENT_COLUMNS = "mechanism, noise_multiplier, sampling_rate, sensitivity, count, scope"

History = tuple[PrivacyEvent, ...]


class LedgerError(FedxabError, RuntimeError):
    """The ledger file is not a ledger, is corrupted, or a record would rewrite history."""


@dataclass(frozen=True)
class Budget:
    """A client's (epsilon, delta) budget."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        check_positive("privacy.budget_epsilon", self.epsilon)
        check_positive("privacy.delta", self.delta, upper=1.0)


def canonical(events: Iterable[PrivacyEvent]) -> History:
    """``events`` as one event per kind (mechanism, noise multiplier, sampling rate, sensitivity,
    scope) with the counts summed, sorted: the same for every history with the same accounting
    (module docstring), and what the ``totals`` table holds per client."""
    counts: dict[tuple[str, float, float, float, str], int] = defaultdict(int)
    for e in events:
        counts[(e.mechanism, e.noise_multiplier, e.sampling_rate, e.sensitivity, e.scope)] += (
            e.count
        )
    return tuple(
        PrivacyEvent(m, z, q, s, count, scope)
        for (m, z, q, s, scope), count in sorted(counts.items())
    )


def _no_budget(run: str, clients: list[int]) -> ConfigError:
    shown = ", ".join(map(str, clients[:10])) + (", ..." if len(clients) > 10 else "")
    return ConfigError(
        "privacy.delta",
        f"client(s) {shown} of run {run} have no budget; pass a delta or set their budgets",
    )


class PrivacyLedger:
    """The ledger in the SQLite file ``path`` (created if missing; ``":memory:"`` for tests)."""

    def __init__(self, path: str | Path, *, accountant: str = "rdp") -> None:
        self.path = str(path)
        self.accountant = make_accountant(accountant)
        if self.path != ":memory:":
            if Path(self.path).is_dir():
                raise LedgerError(f"ledger {self.path} is a directory, expected a SQLite file")
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                create_owner_only(self.path)  # before SQLite creates it (and its journals)
            except OSError as exc:
                raise LedgerError(f"cannot create ledger {self.path}: {exc.strerror}") from exc
        try:
            # A client agent answers in an executor thread; SQLite here is serialized
            # (sqlite3.threadsafety == 3), and the agent never uses the ledger concurrently.
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._check_or_create()
        except sqlite3.DatabaseError as exc:
            raise LedgerError(
                f"{self.path} is not a fedxab privacy ledger or is corrupted ({exc}); "
                "nothing was written to it"
            ) from exc

    def _check_or_create(self) -> None:
        db = self._db
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise LedgerError(f"{self.path} is a SQLite database but not a fedxab privacy ledger")
        if tables:
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None or row[0] != SCHEMA:
                raise LedgerError(
                    f"{self.path}: unknown ledger schema {row and row[0]!r}; this fedxab reads "
                    f"{SCHEMA}"
                )
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        if not tables:
            db.executescript(f"BEGIN; {_TABLES} COMMIT;")
            db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA,))

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PrivacyLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ writes
    def record(
        self, run: str, client: int, phase: int, event: PrivacyEvent, release: int = 0
    ) -> bool:
        """Append one release; ``False`` if this key was already recorded with this event.

        Raises :class:`LedgerError` if the key was recorded with a different event, and
        :class:`~fedxab.errors.ConfigError` (naming the field) for an event no accountant can
        account.
        """
        check_event(event)
        key = (run, int(client), int(phase), int(release))
        values = (
            event.mechanism,
            float(event.noise_multiplier),
            float(event.sampling_rate),
            float(event.sensitivity),
            int(event.count),
            event.scope,
        )
        cursor = self._db.execute(
            f"INSERT OR IGNORE INTO events (run, client, phase, release, {_EVENT_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            key + values,
        )
        if cursor.rowcount == 1:
            return True
        stored = self._db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE run=? AND client=? AND phase=? "
            "AND release=?",
            key,
        ).fetchone()
        if tuple(stored) != values:
            raise LedgerError(
                f"run {run}, client {client}, phase {phase}, release {release} is already "
                f"recorded as {stored}; refusing to record {values}"
            )
        return False

    def record_many(
        self,
        run: str,
        rows: Iterable[tuple[int, int, PrivacyEvent] | tuple[int, int, PrivacyEvent, int]],
    ) -> int:
        """Append ``(client, phase, event[, release])`` rows in one transaction (bulk import);
        the number newly recorded. The rules of :meth:`record` apply to each row, and if one
        raises, nothing of the batch is written."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            added = sum(self.record(run, *row) for row in rows)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return added

    def set_budget(self, run: str, client: int, budget: Budget) -> None:
        """Set (or replace) a client's budget for a run."""
        self._db.execute(
            "INSERT OR REPLACE INTO budgets VALUES (?, ?, ?, ?)",
            (run, int(client), budget.epsilon, budget.delta),
        )

    # ------------------------------------------------------------------------------- reads
    def events(self, run: str, client: int) -> list[PrivacyEvent]:
        """The client's events, in (phase, release) order."""
        return [event for *_, event in self.history(run, client)]

    def history(self, run: str, client: int) -> list[tuple[int, int, str, PrivacyEvent]]:
        """``(phase, release, recorded_at, event)`` of each of the client's releases, in order."""
        rows = self._db.execute(
            f"SELECT phase, release, recorded_at, {_EVENT_COLUMNS} FROM events "
            "WHERE run=? AND client=? ORDER BY phase, release",
            (run, int(client)),
        )
        return [(r[0], r[1], r[2], PrivacyEvent(*r[3:])) for r in rows]

    def history_all(self, run: str) -> dict[int, list[tuple[int, PrivacyEvent]]]:
        """``(phase, event)`` of every release of every client of ``run``, in (phase, release)
        order per client, in one query."""
        rows = self._db.execute(
            f"SELECT client, phase, {_EVENT_COLUMNS} FROM events WHERE run=? "
            "ORDER BY client, phase, release",
            (run,),
        )
        out: dict[int, list[tuple[int, PrivacyEvent]]] = defaultdict(list)
        for client, phase, *values in rows:
            out[client].append((phase, PrivacyEvent(*values)))
        return dict(out)

    def recorded(self, run: str, client: int, phase: int, release: int = 0) -> PrivacyEvent | None:
        """The event recorded under this key, or None."""
        row = self._db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE run=? AND client=? AND phase=? "
            "AND release=?",
            (run, int(client), int(phase), int(release)),
        ).fetchone()
        return None if row is None else PrivacyEvent(*row)

    def _histories(self, run: str, client: int | None = None) -> dict[int, History]:
        """The canonical history of every client of ``run`` with a release (or of ``client``
        only), from the ``totals`` table in one query."""
        where, args = ("run=?", (run,)) if client is None else ("run=? AND client=?", (run, client))
        events: dict[int, list[PrivacyEvent]] = defaultdict(list)
        for c, *values in self._db.execute(
            f"SELECT client, {_EVENT_COLUMNS} FROM totals WHERE {where}", args
        ):
            events[c].append(PrivacyEvent(*values))
        return {c: canonical(e) for c, e in events.items()}

    def budget(self, run: str, client: int) -> Budget | None:
        row = self._db.execute(
            "SELECT epsilon, delta FROM budgets WHERE run=? AND client=?", (run, int(client))
        ).fetchone()
        return None if row is None else Budget(*row)

    def budgets(self, run: str) -> dict[int, Budget]:
        """Every budget set for ``run``, by client."""
        rows = self._db.execute("SELECT client, epsilon, delta FROM budgets WHERE run=?", (run,))
        return {client: Budget(epsilon, delta) for client, epsilon, delta in rows}

    def clients(self, run: str) -> list[int]:
        """The clients of ``run`` with a release or a budget (releases read from ``totals``:
        a few rows per client, where ``events`` has one per release)."""
        rows = self._db.execute(
            "SELECT client FROM totals WHERE run=? UNION SELECT client FROM budgets WHERE run=? "
            "ORDER BY client",
            (run, run),
        )
        return [r[0] for r in rows]

    def runs(self) -> list[str]:
        """The runs with a release or a budget (from ``totals``, like :meth:`clients`)."""
        rows = self._db.execute("SELECT run FROM totals UNION SELECT run FROM budgets ORDER BY run")
        return [r[0] for r in rows]

    def releases_all(self, run: str) -> dict[int, int]:
        """The number of releases (summed counts) of every client of ``run`` with a release."""
        rows = self._db.execute(
            "SELECT client, SUM(count) FROM totals WHERE run=? GROUP BY client", (run,)
        )
        return dict(rows.fetchall())

    def spent(self, run: str, client: int, delta: float | None = None) -> float:
        """Epsilon spent by the client, recomputed from its events at ``delta`` (default: the
        delta of its budget)."""
        client = int(client)
        if delta is None:
            budget = self.budget(run, client)
            if budget is None:
                raise _no_budget(run, [client])
            delta = budget.delta
        return self.accountant.epsilon(self._histories(run, client).get(client, ()), delta)

    def deltas(self, run: str, delta: float | None = None) -> dict[int, float]:
        """The delta each client of ``run`` is accounted at: ``delta`` for every client if
        given, else the delta of each client's budget (clients without one are left out)."""
        if delta is not None:
            return dict.fromkeys(self.clients(run), delta)
        return {client: budget.delta for client, budget in self.budgets(run).items()}

    def spent_all(self, run: str, delta: float | None = None) -> dict[int, float]:
        """:meth:`spent` of every client of ``run`` (those with a release or a budget), by
        client, at ``delta`` (default: each client's budget delta): see :meth:`epsilons`."""
        deltas = self.deltas(run, delta)
        missing = [c for c in self.clients(run) if c not in deltas]
        if missing:
            raise _no_budget(run, missing)
        return self.epsilons(run, deltas)

    def epsilons(self, run: str, deltas: Mapping[int, float]) -> dict[int, float]:
        """Epsilon spent by each client of ``deltas`` at its delta: the canonical histories in
        one query of ``totals``, then one accountant call per distinct (history, delta), shared
        by every client with that history (module docstring)."""
        histories = self._histories(run)
        keys = {client: (histories.get(client, ()), at) for client, at in deltas.items()}
        epsilon = {key: self.accountant.epsilon(*key) for key in set(keys.values())}
        return {client: epsilon[key] for client, key in keys.items()}

    def check_release(self, run: str, client: int, event: PrivacyEvent) -> float | None:
        """The epsilon the client would have spent after ``event``; raises
        :class:`PrivacyBudgetExceeded` (before anything is released) if that exceeds its
        budget. A client without a budget may release anything (``None``)."""
        client = int(client)
        budget = self.budget(run, client)
        if budget is None:
            return None
        check_event(event)
        history = self._histories(run, client).get(client, ())
        after = self.accountant.epsilon(canonical([*history, event]), budget.delta)
        if after > budget.epsilon:
            raise PrivacyBudgetExceeded(
                f"client {client} of run {run}: this release would bring epsilon to "
                f"{after:.4f} at delta {budget.delta:g}, over its budget {budget.epsilon:g} "
                f"({self.accountant.name} accountant); the release is refused"
            )
        return after
