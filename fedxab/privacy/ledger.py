"""The per-client privacy ledger: an append-only record of every release, with budgets.

DESIGN.md (Privacy). Every release a client makes is one row keyed by
``(run, client, phase, release)``: recording the same key again (a retry, a redelivered message,
a replayed phase) changes nothing, so a release is never charged twice; recording the same key
with a different event is refused (:class:`LedgerError`), because it would rewrite history.
Rows are never updated or deleted.

Spent epsilon is always recomputed from the events by an accountant
(:mod:`fedxab.privacy.accountants`), at the delta of the client's budget. Before a release the
client asks :meth:`PrivacyLedger.check_release`, which raises :class:`PrivacyBudgetExceeded` if
the release would take it over its budget: nothing has been released or recorded at that point.

Storage is SQLite (standard library): each record is its own transaction, in WAL mode with
``synchronous=FULL``, so a process killed between two releases loses no recorded event, and a
crash mid-write leaves the last complete state. A file that is not a ledger is refused with a
clear error, and nothing is written to it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from fedxab.errors import ConfigError, FedxabError
from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.validation import check_positive

__all__ = ["Budget", "LedgerError", "PrivacyBudgetExceeded", "PrivacyLedger"]

SCHEMA = "fedxab.ledger/1"

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
"""

_EVENT_COLUMNS = "mechanism, noise_multiplier, sampling_rate, sensitivity, count, scope"


class LedgerError(FedxabError, RuntimeError):
    """The ledger file is not a ledger, is corrupted, or a record would rewrite history."""


class PrivacyBudgetExceeded(FedxabError, RuntimeError):
    """A release would take a client over its privacy budget; nothing was released."""


@dataclass(frozen=True)
class Budget:
    """A client's (epsilon, delta) budget."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        check_positive("privacy.budget_epsilon", self.epsilon)
        check_positive("privacy.delta", self.delta, upper=1.0)


class PrivacyLedger:
    """The ledger in the SQLite file ``path`` (created if missing; ``":memory:"`` for tests)."""

    def __init__(self, path: str | Path, *, accountant: str = "rdp") -> None:
        self.path = str(path)
        self.accountant = make_accountant(accountant)
        if self.path != ":memory:" and Path(self.path).is_dir():
            raise LedgerError(f"ledger {self.path} is a directory, expected a SQLite file")
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None)
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

        Raises :class:`LedgerError` if the key was recorded with a different event.
        """
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

    def budget(self, run: str, client: int) -> Budget | None:
        row = self._db.execute(
            "SELECT epsilon, delta FROM budgets WHERE run=? AND client=?", (run, int(client))
        ).fetchone()
        return None if row is None else Budget(*row)

    def clients(self, run: str) -> list[int]:
        rows = self._db.execute(
            "SELECT client FROM events WHERE run=? UNION SELECT client FROM budgets WHERE run=? "
            "ORDER BY client",
            (run, run),
        )
        return [r[0] for r in rows]

    def runs(self) -> list[str]:
        rows = self._db.execute("SELECT run FROM events UNION SELECT run FROM budgets ORDER BY run")
        return [r[0] for r in rows]

    def spent(self, run: str, client: int, delta: float | None = None) -> float:
        """Epsilon spent by the client, recomputed from its events at ``delta`` (default: the
        delta of its budget)."""
        if delta is None:
            budget = self.budget(run, client)
            if budget is None:
                raise ConfigError(
                    "privacy.delta", f"client {client} of run {run} has no budget; pass a delta"
                )
            delta = budget.delta
        return self.accountant.epsilon(self.events(run, client), delta)

    def check_release(self, run: str, client: int, event: PrivacyEvent) -> float | None:
        """The epsilon the client would have spent after ``event``; raises
        :class:`PrivacyBudgetExceeded` (before anything is released) if that exceeds its
        budget. A client without a budget may release anything (``None``)."""
        budget = self.budget(run, client)
        if budget is None:
            return None
        after = self.accountant.epsilon([*self.events(run, client), event], budget.delta)
        if after > budget.epsilon:
            raise PrivacyBudgetExceeded(
                f"client {client} of run {run}: this release would bring epsilon to "
                f"{after:.4f} at delta {budget.delta:g}, over its budget {budget.epsilon:g} "
                f"({self.accountant.name} accountant); the release is refused"
            )
        return after
