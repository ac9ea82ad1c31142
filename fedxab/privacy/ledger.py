"""The per-client privacy ledger: an append-only record of every release, with budgets.

Every release a client makes is one row keyed by
``(run, client, phase, release)``: recording the same key again (a retry, a redelivered message,
a replayed phase) changes nothing, so a release is never charged twice; recording the same key
with a different event is refused (:class:`LedgerError`), because it would rewrite history.
Rows are never updated or deleted (evidence may be attached once to a row that has none). An
event no accountant can account (e.g. a count below 1) is refused before it is recorded.

Spent epsilon is always recomputed from the events by an accountant
(:mod:`fedxab.privacy.accountants`), at the delta of the client's budget (or of its run:
:meth:`PrivacyLedger.set_run` records each run's delta and accountant). Before a release the
client calls :meth:`PrivacyLedger.reserve`, which re-reads its events, checks the budgets and
records the release in one write transaction (``BEGIN IMMEDIATE``), raising
:class:`PrivacyBudgetExceeded` if the release would take it over a budget: nothing has been
released or recorded at that point, and no other process can record in between, so processes
sharing a ledger cannot overspend a budget together (:meth:`PrivacyLedger.check_release` is the
check alone). Every key and value is range-checked before it touches SQLite (a release index
of 2^63 is a refused record, a :class:`~fedxab.errors.ConfigError` naming the field).

An accountant's epsilon depends only on the multiset of event kinds (mechanism, noise multiplier,
sampling rate, sensitivity, scope) with their counts summed: events of one scope compose by adding
their RDP (``count`` times each), which does not depend on their order, and scopes combine by a
maximum. So the ledger keeps a **materialized view**, the table ``totals``: per (run, client,
event kind), the summed count, maintained by an ``AFTER INSERT ON events`` trigger in the same
transaction as the event, whatever inserts it (a duplicate ignored by ``INSERT OR IGNORE`` fires
no trigger). It is derived data, never written directly, and never trusted for a budget: a
budget check sums the client's (or owner's) own events (:meth:`PrivacyLedger.client_history`,
:meth:`PrivacyLedger.owner_history`). Accounting a whole run reads each client's *canonical
history* (:func:`canonical`: one event per kind, summed counts, sorted) from it, so its cost does
not grow with the number of releases: :meth:`PrivacyLedger.spent_all` accounts a run with one
query and one accountant call per distinct (history, delta), and ten thousand clients with the
same history share one computation. :meth:`PrivacyLedger.check_totals` compares the view with
the events (the audit fails, naming the table, if someone edited it). (Summing counts is exact
in arithmetic; in floating point, ``n`` times an RDP value may differ from ``n`` additions of it
in the last bits, about 1e-15 relative.)

**Lifetime budgets.** A run's budget covers one run; a data owner's covers every run computed
from its data. Each client of a run is a *data owner* (:meth:`PrivacyLedger.set_owner`, named by
:func:`fedxab.privacy.run_ledger.data_owner`: the client and its data set, not the run), and an
owner may have a lifetime budget (:meth:`PrivacyLedger.set_lifetime_budget`). Its lifetime
history is the union of its releases in every run of the ledger, and
:meth:`PrivacyLedger.check_release` refuses a release that would take it over that budget, in
whatever run, before the release. Events of one scope compose across runs: a scope names the
part of the owner's data a release reads (e.g. DP-Fed-PNE's ``phase-3`` in every run), so two
runs on the same data compose like two releases of one run. A release is charged once: a run
executed again under the same run id (same config and seed, so the same seeded noise) records
nothing new.

**Evidence.** A ledger rebuilt from a signed run's ledger topic keeps, per release, the signed
record that carried it (``events.evidence``), so that an auditor can verify every row later with
the clients' public keys.

Storage is SQLite (standard library): each record is its own transaction
(:meth:`PrivacyLedger.record_many`: one for the whole batch), in WAL mode with
``synchronous=FULL``, so a process killed between two releases loses no recorded event, and a
crash mid-write leaves the last complete state. A new file is created in one transaction, so
processes that open it at once all find it complete. A file that is not a ledger, or a ledger
of another schema, is refused with a clear error, and nothing is written to it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedxab.errors import ConfigError, FedxabError, StorageError
from fedxab.privacy.accountants import (
    DEFAULT_TIMEOUT_S,
    Accountant,
    check_event,
    make_accountant,
)
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.privacy.release import PrivacyBudgetExceeded
from fedxab.private_files import create_owner_only, private_dir, storage_error
from fedxab.validation import check_positive

__all__ = ["Budget", "LedgerError", "PrivacyBudgetExceeded", "PrivacyLedger", "canonical"]

SCHEMA = "fedxab.ledger/5"
_UPGRADES = {
    "fedxab.ledger/2": "ALTER TABLE events ADD COLUMN evidence BLOB",
    "fedxab.ledger/3": "",
    "fedxab.ledger/4": "",
}
"""Ledgers of these schemas are upgraded in place (:meth:`PrivacyLedger._check_or_create`), by
the statement given and then the tables added since: version 3 added ``events.evidence`` and
the tables ``owners`` and ``lifetime_budgets``, version 4 the table ``runs`` (each run's delta
and accountant), version 5 the table ``ends`` (each client's signed end marker)."""

MAX_KEY = 2**63 - 1
"""The largest client, phase or release index a ledger records (SQLite's integers are signed
64-bit): a larger one is a refused record, never written."""
MAX_RUN_ID = 200
"""The longest run id (characters) a ledger records."""
LOCK_WAIT_S = 60.0
"""How long a process waits for another one's write transaction on the same ledger (a budget
check with its accounting, or the creation of the file) before it gives up, added to the
accountant's time limit (which such a transaction may include)."""

_LIFETIME_TABLES = """
CREATE TABLE IF NOT EXISTS owners (
    run TEXT NOT NULL, client INTEGER NOT NULL, owner TEXT NOT NULL, objective TEXT NOT NULL,
    PRIMARY KEY (run, client)
);
CREATE INDEX IF NOT EXISTS owners_by_owner ON owners (owner);
CREATE TABLE IF NOT EXISTS lifetime_budgets (
    owner TEXT PRIMARY KEY, epsilon REAL NOT NULL, delta REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run TEXT PRIMARY KEY, delta REAL NOT NULL, accountant TEXT NOT NULL,
    recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE IF NOT EXISTS ends (
    run TEXT NOT NULL, client INTEGER NOT NULL, evidence BLOB NOT NULL,
    PRIMARY KEY (run, client)
);
"""

_TABLES = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    run TEXT NOT NULL, client INTEGER NOT NULL, phase INTEGER NOT NULL, release INTEGER NOT NULL,
    mechanism TEXT NOT NULL, noise_multiplier REAL NOT NULL, sampling_rate REAL NOT NULL,
    sensitivity REAL NOT NULL, count INTEGER NOT NULL, scope TEXT NOT NULL,
    recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    evidence BLOB,
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
    + _LIFETIME_TABLES
)

_EVENT_COLUMNS = "mechanism, noise_multiplier, sampling_rate, sensitivity, count, scope"
_KIND_COLUMNS = "mechanism, noise_multiplier, sampling_rate, sensitivity, scope"
"""An event's kind: the columns whose events compose by summing their counts."""

History = tuple[PrivacyEvent, ...]


_STORAGE_ERRORS = ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_IOERR", "SQLITE_CANTOPEN")
"""SQLite's result codes (and their extended forms) for a file that cannot be written."""


class _Connection(sqlite3.Connection):
    """A ledger's connection: a statement that fails because the file cannot be written (disk
    full, read-only, I/O error) raises :class:`~fedxab.errors.StorageError` naming the file,
    one line, instead of sqlite3's error (the transaction it was in is rolled back)."""

    where = ""

    def execute(self, sql: str, parameters: object = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)  # type: ignore[arg-type]
        except sqlite3.OperationalError as exc:
            name = getattr(exc, "sqlite_errorname", "")
            if not name.startswith(_STORAGE_ERRORS):
                raise
            raise StorageError(
                f"{self.where}: cannot write the privacy ledger ({exc}); free space or choose "
                "a writable path"
            ) from exc


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


def _kind_event(row: tuple) -> PrivacyEvent:
    """The event of a ``SELECT {_KIND_COLUMNS}, SUM(count)`` row."""
    mechanism, z, q, sensitivity, scope, count = row
    return PrivacyEvent(mechanism, z, q, sensitivity, count, scope)


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


def _index(field: str, value: object) -> int:
    """``value`` if it is an integer a ledger can record (0 to :data:`MAX_KEY`), else a
    :class:`~fedxab.errors.ConfigError` naming ``field``: checked before it touches SQLite."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(field, f"must be an integer, got {value!r:.80}; the record is refused")
    if not 0 <= int(value) <= MAX_KEY:
        raise ConfigError(
            field, f"must lie in [0, 2^63 - 1], got {int(value)}; the record is refused"
        )
    return int(value)


def _key(run: object, client: object, phase: object, release: object) -> tuple[str, int, int, int]:
    """A release's key ``(run, client, phase, release)``, range-checked (:func:`_index`)."""
    if not isinstance(run, str) or not 0 < len(run) <= MAX_RUN_ID:
        raise ConfigError(
            "record.run", f"must be a run id of 1 to {MAX_RUN_ID} characters, got {run!r:.80}"
        )
    return (
        run,
        _index("record.client", client),
        _index("record.phase", phase),
        _index("record.release", release),
    )


def _values(event: PrivacyEvent) -> tuple[str, float, float, float, int, str]:
    """``event``'s columns, after :func:`~fedxab.privacy.accountants.check_event` and a check
    of what it leaves to the ledger (a finite sensitivity > 0, a text scope)."""
    check_event(event)
    sensitivity = check_positive("event.sensitivity", event.sensitivity)
    if not isinstance(event.scope, str) or len(event.scope) > MAX_RUN_ID:
        raise ConfigError(
            "event.scope",
            f"must be text of at most {MAX_RUN_ID} characters, got {event.scope!r:.80}",
        )
    return (
        event.mechanism,
        float(event.noise_multiplier),
        float(event.sampling_rate),
        sensitivity,
        int(event.count),
        event.scope,
    )


def _execute_script(db: sqlite3.Connection, script: str) -> None:
    """Execute the statements of ``script`` one by one, inside the caller's transaction
    (``executescript`` would commit it first)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            if statement.strip(" \n;"):
                db.execute(statement)
            statement = ""
    if statement.strip(" \n;"):
        db.execute(statement)


def _no_budget(run: str, clients: list[int]) -> ConfigError:
    shown = ", ".join(map(str, clients[:10])) + (", ..." if len(clients) > 10 else "")
    return ConfigError(
        "privacy.delta",
        f"client(s) {shown} of run {run} have no budget; pass a delta or set their budgets",
    )


class PrivacyLedger:
    """The ledger in the SQLite file ``path`` (created if missing; ``":memory:"`` for tests),
    accounted by ``accountant`` (with the time limit ``accountant_timeout_s`` for the backends
    that have one: :func:`~fedxab.privacy.accountants.make_accountant`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        accountant: str = "rdp",
        accountant_timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.path = str(path)
        self.accountant = make_accountant(accountant, timeout_s=accountant_timeout_s)
        self.accountant_timeout_s = float(accountant_timeout_s)
        if self.path != ":memory:":
            if Path(self.path).is_dir():
                raise LedgerError(f"ledger {self.path} is a directory, expected a SQLite file")
            private_dir(Path(self.path).parent)
            try:
                create_owner_only(self.path)  # before SQLite creates it (and its journals)
            except OSError as exc:
                raise storage_error(self.path, exc, "create the ledger") from None
        try:
            # A client agent answers in an executor thread; SQLite here is serialized
            # (sqlite3.threadsafety == 3), and the agent never uses the ledger concurrently.
            self._db = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=LOCK_WAIT_S + self.accountant_timeout_s,
                factory=_Connection,
            )
            self._db.where = self.path
            self._check_or_create()
        except sqlite3.OperationalError as exc:  # read-only, disk full, no permission
            raise StorageError(
                f"{self.path}: cannot open the ledger for writing ({exc}); choose a writable "
                "path with room (nothing was written to it)"
            ) from exc
        except sqlite3.DatabaseError as exc:
            raise LedgerError(
                f"{self.path} is not a fedxab privacy ledger or is corrupted ({exc}); "
                "nothing was written to it"
            ) from exc

    def _check_or_create(self) -> None:
        """Check the file is a ledger of a known schema, creating or upgrading it, in one write
        transaction: processes that open a new ledger at once create it once, and each finds it
        complete. A file that is not a ledger is left untouched."""
        db = self._db
        with self.transaction():
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if tables and "meta" not in tables:
                raise LedgerError(
                    f"{self.path} is a SQLite database but not a fedxab privacy ledger"
                )
            schema: str | None = None
            if tables:
                row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                schema = row and row[0]
                if schema != SCHEMA and schema not in _UPGRADES:
                    raise LedgerError(
                        f"{self.path}: unknown ledger schema {schema!r}; this fedxab reads "
                        f"{SCHEMA} (and upgrades {', '.join(_UPGRADES)})"
                    )
            if not tables:
                _execute_script(db, _TABLES)
                db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA,))
            elif schema is not None and schema != SCHEMA:  # None: refused above
                # releases keep their rows (an upgraded /2 row has no evidence, no data owner:
                # it counts towards no lifetime budget)
                _execute_script(db, f"{_UPGRADES[schema]};{_LIFETIME_TABLES}")
                db.execute("UPDATE meta SET value=? WHERE key='schema'", (SCHEMA,))
        self._write_ahead_log()
        db.execute("PRAGMA synchronous=FULL")

    def _write_ahead_log(self) -> None:
        """Switch the file to WAL mode (kept in the file), trying again while another process
        holds it: SQLite answers that switch "database is locked" at once, without waiting,
        when processes open a new ledger together."""
        deadline = time.monotonic() + LOCK_WAIT_S + self.accountant_timeout_s
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PrivacyLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ writes
    def record(
        self,
        run: str,
        client: int,
        phase: int,
        event: PrivacyEvent,
        release: int = 0,
        *,
        evidence: bytes | None = None,
    ) -> bool:
        """Append one release; ``False`` if this key was already recorded with this event.

        ``evidence``: the signed ledger-topic record that carried this release (a ledger
        rebuilt from a signed run keeps it, so an auditor can verify every row with public keys
        later); attached to an already recorded row that has none, never replaced.

        Raises :class:`LedgerError` if the key was recorded with a different event, and
        :class:`~fedxab.errors.ConfigError` (naming the field) for an event no accountant can
        account.
        """
        key = _key(run, client, phase, release)
        values = _values(event)
        cursor = self._db.execute(
            f"INSERT OR IGNORE INTO events (run, client, phase, release, {_EVENT_COLUMNS}, "
            "evidence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*key, *values, evidence),
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
        if evidence is not None:
            self._db.execute(
                "UPDATE events SET evidence=? WHERE run=? AND client=? AND phase=? "
                "AND release=? AND evidence IS NULL",
                (evidence, *key),
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
        with self.transaction():
            return sum(self.record(run, *row) for row in rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction around the writes in the block: committed (one sync to disk) when
        the block ends, rolled back if it raises. A statement that raises inside the block
        (a refused record the caller catches) writes nothing, and the rest still commits. For
        bulk writes: each write outside a transaction is its own, synced to disk. Taken at
        its start (``BEGIN IMMEDIATE``), so what the block reads no other process changes
        before it commits. Inside another transaction, the block is part of it."""
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def set_budget(self, run: str, client: int, budget: Budget) -> None:
        """Set (or replace) a client's budget for a run."""
        self._db.execute(
            "INSERT OR REPLACE INTO budgets VALUES (?, ?, ?, ?)",
            (*_key(run, client, 0, 0)[:2], budget.epsilon, budget.delta),
        )

    def set_owner(self, run: str, client: int, owner: str, objective: str) -> None:
        """Say that client ``client`` of ``run`` is the data owner ``owner``, evaluating the
        objective setting ``objective`` (a digest): its releases in ``run`` count towards the
        owner's lifetime budget (module docstring).

        A client of a run is one owner, on one objective setting, for good: anything else raises
        :class:`LedgerError`. A run id does not cover the objective, and a release recorded under
        a run id is charged once (a replay releases the same values); a run on another data set
        or objective setting under that id would release new values charged as nothing."""
        if not isinstance(owner, str) or not owner:
            raise ConfigError("privacy.data_set", f"a data owner must be named, got {owner!r}")
        key = _key(run, client, 0, 0)[:2]
        self._db.execute(
            "INSERT OR IGNORE INTO owners VALUES (?, ?, ?, ?)", (*key, owner, objective)
        )
        stored = self._db.execute(
            "SELECT owner, objective FROM owners WHERE run=? AND client=?", key
        ).fetchone()
        if tuple(stored) != (owner, objective):
            raise LedgerError(
                f"client {client} of run {run} is recorded in this ledger as data owner "
                f"{stored[0]!r} on objective setting {stored[1]}; refusing to record it as "
                f"{owner!r} on {objective}: its releases would be taken for replays and never "
                "charged. Run another seed (a new run id), or use another ledger"
            )

    def set_run(self, run: str, delta: float, accountant: str) -> None:
        """Record the delta ``run`` is accounted at and the accountant its budgets used, so that
        an audit needs neither. A run is recorded once: another delta or accountant for the
        same run id raises :class:`LedgerError`."""
        delta = Budget(1.0, delta).delta
        key = _key(run, 0, 0, 0)[0]
        self._db.execute(
            "INSERT OR IGNORE INTO runs (run, delta, accountant) VALUES (?, ?, ?)",
            (key, delta, accountant),
        )
        stored = self.run_settings(run)
        assert stored is not None  # the row is there: inserted above if it was not
        if stored != (delta, accountant):
            raise LedgerError(
                f"run {run} is recorded in this ledger at delta {stored[0]:g} with the "
                f"{stored[1]!r} accountant; refusing delta {delta:g} with {accountant!r}. Run "
                "another seed (a new run id), or use another ledger"
            )

    def run_settings(self, run: str) -> tuple[float, str] | None:
        """``(delta, accountant)`` recorded for ``run`` (:meth:`set_run`), or None (a run
        recorded by an older fedxab, or rebuilt from a ledger topic that does not carry them)."""
        row = self._db.execute("SELECT delta, accountant FROM runs WHERE run=?", (run,)).fetchone()
        return None if row is None else (float(row[0]), str(row[1]))

    def owner_delta(self, owner: str) -> float | None:
        """The delta ``owner``'s lifetime spend is accounted at: its lifetime budget's, else
        the smallest delta recorded for its runs (:meth:`set_run`; the largest epsilon, so
        never an understatement), else None."""
        budget = self.lifetime_budget(owner)
        if budget is not None:
            return budget.delta
        row = self._db.execute(
            "SELECT MIN(r.delta) FROM runs r JOIN owners o ON r.run = o.run WHERE o.owner=?",
            (owner,),
        ).fetchone()
        return None if row[0] is None else float(row[0])

    def accountants(self) -> list[str]:
        """The accountants the runs of this ledger recorded (:meth:`set_run`), sorted."""
        return [r[0] for r in self._db.execute("SELECT DISTINCT accountant FROM runs ORDER BY 1")]

    def set_lifetime_budget(self, owner: str, budget: Budget) -> None:
        """Set (or replace) data owner ``owner``'s lifetime budget, which every run charges."""
        self._db.execute(
            "INSERT OR REPLACE INTO lifetime_budgets VALUES (?, ?, ?)",
            (owner, budget.epsilon, budget.delta),
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

    def evidence(
        self, run: str | None = None
    ) -> Iterator[tuple[str, int, int, int, PrivacyEvent, bytes | None]]:
        """``(run, client, phase, release, event, evidence)`` of every release (of ``run``
        only, if given), in (run, client, phase, release) order; ``evidence`` is None for a
        row recorded without one."""
        where, args = ("WHERE run=?", (run,)) if run is not None else ("", ())
        rows = self._db.execute(
            f"SELECT run, client, phase, release, {_EVENT_COLUMNS}, evidence FROM events "
            f"{where} ORDER BY run, client, phase, release",
            args,
        )
        for r in rows:
            yield r[0], r[1], r[2], r[3], PrivacyEvent(*r[4:10]), r[10]

    def set_end(self, run: str, client: int, evidence: bytes) -> None:
        """Keep the client's signed end marker of ``run`` (:mod:`fedxab.privacy.mirror`: the
        number and digest of its releases), the latest one: an auditor checks the client's rows
        against it as a whole, so a row deleted or added later is caught."""
        self._db.execute(
            "INSERT OR REPLACE INTO ends VALUES (?, ?, ?)",
            (*_key(run, client, 0, 0)[:2], bytes(evidence)),
        )

    def ends(self, run: str | None = None) -> dict[tuple[str, int], bytes]:
        """Every signed end marker kept (of ``run`` only, if given), by (run, client)."""
        where, args = ("WHERE run=?", (run,)) if run is not None else ("", ())
        rows = self._db.execute(f"SELECT run, client, evidence FROM ends {where}", args)
        return {(r[0], r[1]): r[2] for r in rows}

    def recorded(self, run: str, client: int, phase: int, release: int = 0) -> PrivacyEvent | None:
        """The event recorded under this key, or None."""
        row = self._db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE run=? AND client=? AND phase=? "
            "AND release=?",
            _key(run, client, phase, release),
        ).fetchone()
        return None if row is None else PrivacyEvent(*row)

    def _histories(self, run: str) -> dict[int, History]:
        """The canonical history of every client of ``run`` with a release, from the ``totals``
        view in one query: for accounting a whole run at once (:meth:`epsilons`; checked
        against the events by :meth:`check_totals`). A budget check reads the events."""
        events: dict[int, list[PrivacyEvent]] = defaultdict(list)
        for c, *values in self._db.execute(
            f"SELECT client, {_EVENT_COLUMNS} FROM totals WHERE run=?", (run,)
        ):
            events[c].append(PrivacyEvent(*values))
        return {c: canonical(e) for c, e in events.items()}

    def client_history(self, run: str, client: int) -> History:
        """The canonical history of ``client`` in ``run``, summed from its events (one query
        over its rows of ``events``, never the ``totals`` view)."""
        rows = self._db.execute(
            f"SELECT {_KIND_COLUMNS}, SUM(count) FROM events WHERE run=? AND client=? "
            f"GROUP BY {_KIND_COLUMNS}",
            (run, int(client)),
        )
        return canonical(_kind_event(r) for r in rows)

    def check_totals(self, run: str | None = None) -> list[str]:
        """Where the ``totals`` view disagrees with the events (of ``run``, or of every run):
        one line per (run, client) whose summed counts differ, empty if none does. A ``totals``
        row must equal the summed counts of its kind's events, and each (run, client)'s
        ``totals`` must sum to its events' counts (so no kind is missing)."""
        where, args = ("WHERE run=?", (run,)) if run is not None else ("", ())
        kind = " AND ".join(f"e.{c}=t.{c}" for c in _KIND_COLUMNS.split(", "))
        differ = self._db.execute(
            f"SELECT t.run, t.client FROM totals t {where.replace('run', 't.run')} "
            f"{'AND' if where else 'WHERE'} t.count IS NOT (SELECT SUM(e.count) FROM events e "
            f"WHERE e.run=t.run AND e.client=t.client AND {kind})",
            args,
        ).fetchall()
        sums = self._db.execute(
            f"SELECT run, client, SUM(count) FROM events {where} GROUP BY run, client "
            f"EXCEPT SELECT run, client, SUM(count) FROM totals {where} GROUP BY run, client",
            args * 2,
        ).fetchall()
        bad = sorted({(r, c) for r, c in differ} | {(r, c) for r, c, _ in sums})
        return [
            f"run {r}, client {c}: the totals table says {self._total(r, c)} release(s), "
            f"the events {self._event_count(r, c)}"
            for r, c in bad
        ]

    def _total(self, run: str, client: int) -> int:
        row = self._db.execute(
            "SELECT COALESCE(SUM(count), 0) FROM totals WHERE run=? AND client=?", (run, client)
        ).fetchone()
        return int(row[0])

    def _event_count(self, run: str, client: int) -> int:
        row = self._db.execute(
            "SELECT COALESCE(SUM(count), 0) FROM events WHERE run=? AND client=?", (run, client)
        ).fetchone()
        return int(row[0])

    def verify_totals(self, run: str | None = None) -> None:
        """Raise :class:`LedgerError` naming the ``totals`` table if it disagrees with the
        events (:meth:`check_totals`): derived data was edited, and nothing accounted from it
        can be trusted."""
        bad = self.check_totals(run)
        if bad:
            shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
            raise LedgerError(
                f"{self.path}: the totals table disagrees with the events ({shown}): it was "
                "edited; budget checks read the events, but this ledger's summaries cannot be "
                "trusted"
            )

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
        return self.accountant.epsilon(self.client_history(run, client), delta)

    def deltas(self, run: str, delta: float | None = None) -> dict[int, float]:
        """The delta each client of ``run`` is accounted at: ``delta`` for every client if
        given, else the delta of each client's budget, else the run's (:meth:`set_run`;
        clients with none of them are left out)."""
        if delta is not None:
            return dict.fromkeys(self.clients(run), delta)
        settings = self.run_settings(run)
        at = {} if settings is None else dict.fromkeys(self.clients(run), settings[0])
        return at | {client: budget.delta for client, budget in self.budgets(run).items()}

    def spent_all(self, run: str, delta: float | None = None) -> dict[int, float]:
        """:meth:`spent` of every client of ``run`` (those with a release or a budget), by
        client, at ``delta`` (default: each client's budget delta): see :meth:`epsilons`."""
        deltas = self.deltas(run, delta)
        missing = [c for c in self.clients(run) if c not in deltas]
        if missing:
            raise _no_budget(run, missing)
        return self.epsilons(run, deltas)

    def epsilons(
        self, run: str, deltas: Mapping[int, float], accountant: Accountant | None = None
    ) -> dict[int, float]:
        """Epsilon spent by each client of ``deltas`` at its delta: the canonical histories in
        one query of ``totals``, then one call of ``accountant`` (default: the ledger's) per
        distinct (history, delta), shared by every client with that history (module
        docstring)."""
        accountant = accountant or self.accountant
        histories = self._histories(run)
        keys = {client: (histories.get(client, ()), at) for client, at in deltas.items()}
        epsilon = {key: accountant.epsilon(*key) for key in set(keys.values())}
        return {client: epsilon[key] for client, key in keys.items()}

    def owner(self, run: str, client: int) -> str | None:
        """The data owner client ``client`` of ``run`` is, if named."""
        row = self._db.execute(
            "SELECT owner FROM owners WHERE run=? AND client=?", (run, int(client))
        ).fetchone()
        return None if row is None else row[0]

    def run_owners(self, run: str) -> dict[int, str]:
        """The data owner of each client of ``run`` that names one (one query)."""
        rows = self._db.execute("SELECT client, owner FROM owners WHERE run=?", (run,))
        return dict(rows.fetchall())

    def owners(self) -> list[str]:
        """Every data owner named in the ledger, sorted."""
        return [r[0] for r in self._db.execute("SELECT DISTINCT owner FROM owners ORDER BY 1")]

    def owner_runs(self, owner: str) -> list[tuple[str, int]]:
        """``(run, client)`` of every run in which ``owner`` took part, sorted."""
        rows = self._db.execute(
            "SELECT run, client FROM owners WHERE owner=? ORDER BY run, client", (owner,)
        )
        return [(r[0], r[1]) for r in rows]

    def lifetime_budget(self, owner: str) -> Budget | None:
        row = self._db.execute(
            "SELECT epsilon, delta FROM lifetime_budgets WHERE owner=?", (owner,)
        ).fetchone()
        return None if row is None else Budget(*row)

    def owner_history(self, owner: str) -> History:
        """The canonical history of every release of ``owner``, over all its runs, summed from
        the events (one query): events of one scope compose across runs, since a scope names
        the part of the owner's data a release reads (module docstring)."""
        kind = ", ".join("e." + c for c in _KIND_COLUMNS.split(", "))
        rows = self._db.execute(
            f"SELECT {kind}, SUM(e.count) FROM events e "
            "JOIN owners o ON e.run = o.run AND e.client = o.client WHERE o.owner=? "
            f"GROUP BY {kind}",
            (owner,),
        )
        return canonical(_kind_event(r) for r in rows)

    def lifetime_spent(
        self, owner: str, delta: float | None = None, accountant: Accountant | None = None
    ) -> float:
        """Epsilon ``owner`` has spent over all its runs, at ``delta`` (default: its lifetime
        budget's delta), by ``accountant`` (default: the ledger's)."""
        if delta is None:
            budget = self.lifetime_budget(owner)
            if budget is None:
                raise ConfigError(
                    "--delta", f"data owner {owner!r} has no lifetime budget; pass a delta"
                )
            delta = budget.delta
        return (accountant or self.accountant).epsilon(self.owner_history(owner), delta)

    def check_release(self, run: str, client: int, event: PrivacyEvent) -> float | None:
        """The epsilon the client would have spent in ``run`` after ``event``; raises
        :class:`PrivacyBudgetExceeded` (before anything is released) if that exceeds its budget
        for the run or its data owner's lifetime budget. A client without either may release
        anything (``None`` if it has no run budget)."""
        client = int(client)
        budget = self.budget(run, client)
        owner = self.owner(run, client)
        lifetime = None if owner is None else self.lifetime_budget(owner)
        if budget is None and lifetime is None:
            return None
        check_event(event)
        after = None
        if budget is not None:
            history = self.client_history(run, client)
            after = self.accountant.epsilon(canonical([*history, event]), budget.delta)
            if after > budget.epsilon:
                raise PrivacyBudgetExceeded(
                    f"client {client} of run {run}: this release would bring epsilon to "
                    f"{after:.4f} at delta {budget.delta:g}, over its budget {budget.epsilon:g} "
                    f"({self.accountant.name} accountant); the release is refused"
                )
        if lifetime is not None:
            assert owner is not None
            self._check_lifetime(owner, lifetime, run, client, event)
        return after

    def reserve(
        self, run: str, client: int, phase: int, event: PrivacyEvent, release: int = 0
    ) -> bool:
        """Check and record a release in one write transaction: the client's (and its data
        owner's) events are read again, the budgets checked (:meth:`check_release`, which
        raises :class:`PrivacyBudgetExceeded`) and the release recorded, with no other process
        writing in between, so processes that share a ledger can never overspend a budget
        together. ``False`` if this very release was already recorded (a replayed phase
        releases the same seeded values: nothing new is charged)."""
        key = _key(run, client, phase, release)
        _values(event)
        with self.transaction():
            if self.recorded(*key) == event:
                return False
            self.check_release(run, key[1], event)
            return self.record(*key[:3], event, key[3])

    def _check_lifetime(
        self, owner: str, lifetime: Budget, run: str, client: int, event: PrivacyEvent
    ) -> None:
        """Raise :class:`PrivacyBudgetExceeded` if ``event`` would take ``owner`` over its
        lifetime budget, with what it spent and what remains in the message."""
        history = self.owner_history(owner)
        after = self.accountant.epsilon(canonical([*history, event]), lifetime.delta)
        if after <= lifetime.epsilon:
            return
        spent = self.accountant.epsilon(history, lifetime.delta)
        runs = len({r for r, _ in self.owner_runs(owner)})
        raise PrivacyBudgetExceeded(
            f"client {client} of run {run}: data owner {owner!r} has spent epsilon "
            f"{spent:.4f} of its lifetime budget {lifetime.epsilon:g} (delta {lifetime.delta:g}) "
            f"over {runs} run(s), {max(lifetime.epsilon - spent, 0.0):.4f} remaining; this "
            f"release would bring it to {after:.4f} ({self.accountant.name} accountant), so it "
            "is refused before anything is released"
        )
