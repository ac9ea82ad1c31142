"""The privacy ledger: append-only, never charges twice, survives kills, enforces budgets."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from unittest import mock

import pytest

from fedxab.errors import ConfigError
from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.ledger import (
    SCHEMA,
    Budget,
    LedgerError,
    PrivacyBudgetExceeded,
    PrivacyLedger,
    canonical,
)
from fedxab.privacy.mechanisms import PrivacyEvent

EVENT = PrivacyEvent("gaussian", 1.2, 0.25, 1.0, 1)


def test_recording_the_same_release_again_never_charges_twice(tmp_path):
    with PrivacyLedger(tmp_path / "l.db") as ledger:
        ledger.set_budget("r", 3, Budget(10.0, 1e-5))
        assert ledger.record("r", 3, 1, EVENT) is True
        once = ledger.spent("r", 3)
        assert ledger.record("r", 3, 1, EVENT) is False  # a retry or a redelivered message
        assert ledger.spent("r", 3) == once
        assert ledger.record("r", 3, 2, EVENT) is True
        assert ledger.spent("r", 3) > once
        assert ledger.events("r", 3) == [EVENT, EVENT]


def test_a_different_event_under_a_recorded_key_is_refused(tmp_path):
    with PrivacyLedger(tmp_path / "l.db") as ledger:
        ledger.record("r", 0, 1, EVENT)
        with pytest.raises(LedgerError, match="already recorded"):
            ledger.record("r", 0, 1, PrivacyEvent("gaussian", 0.5, 0.25, 1.0, 1))
        assert ledger.events("r", 0) == [EVENT]


def test_the_ledger_persists_and_lists_runs_and_clients(tmp_path):
    path = tmp_path / "l.db"
    with PrivacyLedger(path) as ledger:
        ledger.record("a", 2, 1, EVENT)
        ledger.set_budget("a", 5, Budget(1.0, 1e-6))
        ledger.record("b", 0, 1, EVENT)
    with PrivacyLedger(path, accountant="moments") as ledger:
        assert ledger.runs() == ["a", "b"]
        assert ledger.clients("a") == [2, 5]
        assert ledger.budget("a", 5) == Budget(1.0, 1e-6)
        assert ledger.spent("a", 2, 1e-5) == make_accountant("moments").epsilon([EVENT], 1e-5)


@pytest.mark.parametrize("allowed", [1, 3, 7])
def test_releases_stop_exactly_at_the_last_one_that_fits_the_budget(tmp_path, allowed):
    rdp = make_accountant("rdp")
    at = [rdp.epsilon([EVENT] * k, 1e-5) for k in (allowed, allowed + 1)]
    budget = Budget((at[0] + at[1]) / 2, 1e-5)  # fits `allowed` releases, not one more
    with PrivacyLedger(tmp_path / "l.db") as ledger:
        ledger.set_budget("r", 0, budget)
        released = 0
        for phase in range(1, 20):
            try:
                ledger.check_release("r", 0, EVENT)
            except PrivacyBudgetExceeded as exc:
                assert "over its budget" in str(exc)
                break
            ledger.record("r", 0, phase, EVENT)
            released += 1
        assert released == allowed
        assert ledger.spent("r", 0) <= budget.epsilon < rdp.epsilon([EVENT] * (allowed + 1), 1e-5)


KILLER = """
import os, signal, sys
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent
ledger = PrivacyLedger(sys.argv[1])
for phase in range(1, int(sys.argv[2]) + 1):
    ledger.record("r", 1, phase, PrivacyEvent("gaussian", 1.0, 0.1, 1.0, 1))
os.kill(os.getpid(), signal.SIGKILL)  # no close, no flush: the process dies here
"""


def test_a_process_killed_between_releases_loses_no_recorded_event(tmp_path):
    path = tmp_path / "l.db"
    proc = subprocess.run([sys.executable, "-c", KILLER, str(path), "25"], check=False)
    assert proc.returncode == -signal.SIGKILL
    with PrivacyLedger(path) as ledger:
        assert len(ledger.events("r", 1)) == 25


def test_a_corrupted_or_foreign_file_is_refused_and_left_untouched(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    before = garbage.read_bytes()
    with pytest.raises(LedgerError, match="not a fedxab privacy ledger or is corrupted"):
        PrivacyLedger(garbage)
    assert garbage.read_bytes() == before
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(LedgerError, match="not a fedxab privacy ledger"):
        PrivacyLedger(foreign)
    with pytest.raises(LedgerError, match="directory"):
        PrivacyLedger(tmp_path)


def test_bad_budgets_and_accountants_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="privacy.budget_epsilon"):
        Budget(0.0, 1e-5)
    with pytest.raises(ConfigError, match="privacy.delta"):
        Budget(1.0, 1.0)
    with pytest.raises(ConfigError, match="privacy.accountant"):
        PrivacyLedger(tmp_path / "l.db", accountant="renyi")
    assert not (tmp_path / "l.db").exists()
    with PrivacyLedger(tmp_path / "m.db") as ledger:
        with pytest.raises(ConfigError, match="no budget"):
            ledger.spent("r", 0)
        assert ledger.check_release("r", 0, EVENT) is None


OTHER = PrivacyEvent("gaussian", 0.8, 0.1, 1.0, 1)
PHASE2 = PrivacyEvent("gaussian", 2.0, 1.0, 1.0, 1, "phase-2")


def _totals(path):
    with sqlite3.connect(path) as db:
        return db.execute("SELECT * FROM totals ORDER BY run, client, noise_multiplier").fetchall()


@pytest.mark.parametrize("name", ["rdp", "moments"])
def test_epsilon_depends_only_on_the_summed_counts_of_each_kind(name):
    """What the totals view relies on: order does not matter, count n equals n events of count
    1 (up to float rounding: n * rdp vs n additions of it)."""
    accountant = make_accountant(name)
    cheap = PrivacyEvent("gaussian", 1.0, 0.01)  # fast to account at dp-accounting's orders
    events = [cheap, PHASE2, OTHER, cheap, OTHER, PHASE2, cheap]
    assert canonical(events) == (
        PrivacyEvent("gaussian", 0.8, 0.1, 1.0, 2),
        PrivacyEvent("gaussian", 1.0, 0.01, 1.0, 3),
        PrivacyEvent("gaussian", 2.0, 1.0, 1.0, 2, "phase-2"),
    )
    expected = accountant.epsilon(events, 1e-5)
    for variant in (canonical(events), events[::-1], sorted(events, key=repr)):
        assert accountant.epsilon(variant, 1e-5) == pytest.approx(expected, rel=1e-12)
    for n in (2, 10):
        assert accountant.epsilon([cheap] * n, 1e-5) == pytest.approx(
            accountant.epsilon([PrivacyEvent("gaussian", 1.0, 0.01, 1.0, n)], 1e-5), rel=1e-12
        )


@pytest.fixture
def mixed(tmp_path):
    """Clients with different histories, scopes and budgets, some identical, one budget-only."""
    ledger = PrivacyLedger(tmp_path / "l.db")
    histories = {
        0: [EVENT] * 3,
        1: [EVENT] * 3,
        2: [EVENT, OTHER, EVENT],
        3: [OTHER, EVENT, EVENT],  # the same multiset as client 2, in another order
        4: [EVENT, PHASE2, PHASE2],
        5: [PrivacyEvent("gaussian", 1.2, 0.25, 1.0, 3)],  # client 0's history in one event
    }
    for client, events in histories.items():
        ledger.record_many("r", [(client, p, e) for p, e in enumerate(events, start=1)])
        ledger.set_budget("r", client, Budget(5.0, 1e-5 if client % 2 else 1e-6))
    ledger.set_budget("r", 9, Budget(1.0, 1e-5))  # no release yet
    ledger.record("other-run", 0, 1, OTHER)
    yield ledger
    ledger.close()


def test_spent_all_equals_spent_of_each_client(mixed):
    clients = [0, 1, 2, 3, 4, 5, 9]
    assert mixed.spent_all("r") == {c: mixed.spent("r", c) for c in clients}
    assert mixed.spent_all("r", 1e-3) == {c: mixed.spent("r", c, 1e-3) for c in clients}
    assert mixed.spent_all("r")[9] == 0.0
    assert mixed.releases_all("r") == {0: 3, 1: 3, 2: 3, 3: 3, 4: 3, 5: 3}
    rdp = make_accountant("rdp")
    assert mixed.spent_all("r", 1e-3)[3] == pytest.approx(
        rdp.epsilon([OTHER, EVENT, EVENT], 1e-3), rel=1e-12
    )
    mixed.record("r", 7, 1, EVENT)  # a client without a budget
    with pytest.raises(ConfigError, match=r"privacy\.delta: client\(s\) 7 of run r have no budget"):
        mixed.spent_all("r")


def test_spent_all_calls_the_accountant_once_per_distinct_history(mixed):
    mixed.accountant = mock.Mock(wraps=mixed.accountant)
    mixed.spent_all("r", 1e-5)
    # {0, 1, 5}, {2, 3}, {4} and the empty history of 9
    assert mixed.accountant.epsilon.call_count == 4
    mixed.accountant.epsilon.reset_mock()
    mixed.spent_all("r")  # budget deltas split {0, 1, 5} into {1, 5} and {0}, {2, 3} too
    assert mixed.accountant.epsilon.call_count == 6


def test_record_many_writes_the_whole_batch_or_nothing(tmp_path):
    path = tmp_path / "l.db"
    with PrivacyLedger(path) as ledger:
        ledger.record("r", 0, 1, EVENT)
        batch = [(1, 1, EVENT), (1, 2, EVENT, 0), (0, 1, OTHER)]  # the last one conflicts
        with pytest.raises(LedgerError, match="already recorded"):
            ledger.record_many("r", batch)
        with pytest.raises(ConfigError, match="event.count"):
            ledger.record_many(
                "r", [(1, 1, EVENT), (1, 2, PrivacyEvent("gaussian", 1.0, 1.0, 1.0, 0))]
            )
        assert ledger.clients("r") == [0] and ledger.events("r", 0) == [EVENT]
        assert _totals(path) == [("r", 0, "gaussian", 1.2, 0.25, 1.0, "", 1)]
        assert ledger.record_many("r", [(1, 1, EVENT), (0, 1, EVENT), (1, 1, EVENT, 0)]) == 1


def test_totals_count_each_release_once_whatever_path_records_it(tmp_path):
    path = tmp_path / "l.db"
    with PrivacyLedger(path) as ledger:
        for _ in range(2):  # the second pass only repeats recorded keys
            ledger.record("r", 0, 1, EVENT)
            ledger.record("r", 0, 2, PHASE2, release=3)
            ledger.record_many("r", [(0, 2, EVENT), (0, 3, EVENT), (1, 1, OTHER)])
        assert _totals(path) == [
            ("r", 0, "gaussian", 1.2, 0.25, 1.0, "", 3),
            ("r", 0, "gaussian", 2.0, 1.0, 1.0, "phase-2", 1),
            ("r", 1, "gaussian", 0.8, 0.1, 1.0, "", 1),
        ]
        assert ledger.releases_all("r") == {0: 4, 1: 1}
        for client in (0, 1):
            stored = {
                (e.noise_multiplier, e.scope): e.count
                for e in canonical(ledger.events("r", client))
            }
            assert stored == {(t[3], t[6]): t[7] for t in _totals(path) if t[1] == client}


def test_a_ledger_of_the_previous_schema_is_refused_untouched(tmp_path):
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('schema', 'fedxab.ledger/1')")
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=r"unknown ledger schema 'fedxab.ledger/1'.*ledger/3"):
        PrivacyLedger(path)
    assert path.read_bytes() == before


_LEDGER_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (
    run TEXT NOT NULL, client INTEGER NOT NULL, phase INTEGER NOT NULL, release INTEGER NOT NULL,
    mechanism TEXT NOT NULL, noise_multiplier REAL NOT NULL, sampling_rate REAL NOT NULL,
    sensitivity REAL NOT NULL, count INTEGER NOT NULL, scope TEXT NOT NULL,
    recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (run, client, phase, release)
);
CREATE TABLE budgets (
    run TEXT NOT NULL, client INTEGER NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL,
    PRIMARY KEY (run, client)
);
CREATE TABLE totals (
    run TEXT NOT NULL, client INTEGER NOT NULL,
    mechanism TEXT NOT NULL, noise_multiplier REAL NOT NULL, sampling_rate REAL NOT NULL,
    sensitivity REAL NOT NULL, scope TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (run, client, mechanism, noise_multiplier, sampling_rate, sensitivity, scope)
);
CREATE TRIGGER events_totals AFTER INSERT ON events BEGIN
    INSERT INTO totals VALUES (NEW.run, NEW.client, NEW.mechanism, NEW.noise_multiplier,
        NEW.sampling_rate, NEW.sensitivity, NEW.scope, NEW.count)
    ON CONFLICT (run, client, mechanism, noise_multiplier, sampling_rate, sensitivity, scope)
    DO UPDATE SET count = count + excluded.count;
END;
INSERT INTO meta VALUES ('schema', 'fedxab.ledger/2');
INSERT INTO events (run, client, phase, release, mechanism, noise_multiplier, sampling_rate,
    sensitivity, count, scope) VALUES ('old', 0, 1, 0, 'gaussian', 1.2, 0.25, 1.0, 1, '');
INSERT INTO budgets VALUES ('old', 0, 4.0, 1e-5);
"""


def test_a_ledger_of_schema_2_is_upgraded_in_place_keeping_its_releases(tmp_path):
    path = tmp_path / "v2.db"
    with sqlite3.connect(path) as db:
        db.executescript(_LEDGER_2)
    with PrivacyLedger(path) as ledger:
        assert ledger.events("old", 0) == [EVENT]
        assert ledger.spent("old", 0) == make_accountant("rdp").epsilon([EVENT], 1e-5)
        assert ledger.owners() == []  # upgraded releases name no data owner
        assert ledger.record("new", 0, 1, EVENT, evidence=b"signed") is True
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta").fetchone() == (SCHEMA,)


def test_a_ledger_of_schema_4_gains_the_end_markers_table(tmp_path):
    """A /4 file (no ``ends`` table) is upgraded in place; each client's latest end marker is
    kept, by (run, client)."""
    path = tmp_path / "v4.db"
    with PrivacyLedger(path) as ledger:
        ledger.record("old", 0, 1, EVENT)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE ends")
        db.execute("UPDATE meta SET value='fedxab.ledger/4' WHERE key='schema'")
    with PrivacyLedger(path) as ledger:
        assert ledger.events("old", 0) == [EVENT] and ledger.ends() == {}
        ledger.set_end("old", 0, b"first")
        ledger.set_end("old", 0, b"latest")
        ledger.set_end("new", 3, b"other")
        assert ledger.ends() == {("old", 0): b"latest", ("new", 3): b"other"}
        assert ledger.ends("new") == {("new", 3): b"other"}
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta").fetchone() == (SCHEMA,)


def test_evidence_is_kept_and_attached_once_never_replaced(tmp_path):
    with PrivacyLedger(tmp_path / "l.db") as ledger:
        ledger.record("r", 0, 1, EVENT)
        ledger.record("r", 0, 2, EVENT, evidence=b"second")
        assert ledger.record("r", 0, 1, EVENT, evidence=b"late") is False
        assert ledger.record("r", 0, 2, EVENT, evidence=b"forged") is False
        rows = [(phase, proof) for _, _, phase, _, _, proof in ledger.evidence("r")]
        assert rows == [(1, b"late"), (2, b"second")]
        assert ledger.spent("r", 0, delta=1e-5) == make_accountant("rdp").epsilon(
            [EVENT, EVENT], 1e-5
        )


def test_a_data_owner_is_charged_across_runs_and_refused_over_its_lifetime_budget():
    ledger = PrivacyLedger(":memory:")
    two = make_accountant("rdp").epsilon([EVENT, EVENT], 1e-5)
    three = make_accountant("rdp").epsilon([EVENT] * 3, 1e-5)
    ledger.set_lifetime_budget("client-0/d", Budget((two + three) / 2, 1e-5))
    for run in ("a", "b"):
        ledger.set_owner(run, 0, "client-0/d", "objective-x")
    ledger.set_owner("c", 0, "client-0/other", "objective-x")  # another data set: not charged
    ledger.record("a", 0, 1, EVENT)
    ledger.record("c", 0, 1, EVENT)
    ledger.check_release("b", 0, EVENT)
    ledger.record("b", 0, 1, EVENT)
    assert ledger.lifetime_spent("client-0/d") == two
    with pytest.raises(PrivacyBudgetExceeded, match=r"over 2 run\(s\)") as refused:
        ledger.check_release("b", 0, EVENT)
    assert f"spent epsilon {two:.4f}" in str(refused.value)
    assert ledger.owner_runs("client-0/d") == [("a", 0), ("b", 0)]
    with pytest.raises(LedgerError, match="would be taken for replays"):
        ledger.set_owner("a", 0, "client-0/d", "objective-y")


# --- a ledger that holds: concurrent processes, edited derived data, out-of-range records -------

HAMMER = """
import os, sys, time
from pathlib import Path
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.privacy.ledger import Budget, PrivacyBudgetExceeded, PrivacyLedger
from fedxab.privacy.gate import LedgerGate
directory, me = Path(sys.argv[1]), sys.argv[2]
trials, lifetime = int(sys.argv[3]), float(sys.argv[4])
event = PrivacyEvent("gaussian", 1.2, 0.25, 1.0, 1)
for trial in range(trials):
    (directory / f"ready-{trial}-{me}").touch()  # a barrier: both processes start together
    while len(list(directory.glob(f"ready-{trial}-*"))) < 2:
        time.sleep(0.001)
    ledger = PrivacyLedger(directory / f"ledger-{trial}.db")
    run = f"run-{me}"  # each process is its own run of the same data owner
    ledger.set_owner(run, 0, "client-0/d", "objective-x")
    ledger.set_lifetime_budget("client-0/d", Budget(lifetime, 1e-5))
    gate = LedgerGate(ledger, run, 0)
    for phase in range(1, 100):
        try:
            gate.admit(phase, event)
        except PrivacyBudgetExceeded:
            break
        time.sleep(0.002)  # the evaluations between the check and the record
        gate.record(phase, event)
    ledger.close()
"""


@pytest.mark.slow  # about 15 s on 2 cores
def test_two_processes_on_one_lifetime_ledger_never_overspend(tmp_path):
    """20 trials, two processes each: every trial stops at exactly the k releases that fit."""
    rdp, k, trials = make_accountant("rdp"), 5, 20
    lifetime = sum(rdp.epsilon([EVENT] * n, 1e-5) for n in (k, k + 1)) / 2
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HAMMER, str(tmp_path), me, str(trials), repr(lifetime)]
        )
        for me in ("a", "b")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    for trial in range(trials):
        with PrivacyLedger(tmp_path / f"ledger-{trial}.db") as ledger:
            assert len(ledger.events("run-a", 0)) + len(ledger.events("run-b", 0)) == k, trial
            assert ledger.lifetime_spent("client-0/d") <= lifetime


CREATOR = """
import sys, time
from pathlib import Path
from fedxab.privacy.ledger import PrivacyLedger
directory, me, trials = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
failed = 0
for trial in range(trials):
    (directory / f"ready-{trial}-{me}").touch()
    while len(list(directory.glob(f"ready-{trial}-*"))) < 4:
        time.sleep(0.0005)
    try:
        with PrivacyLedger(directory / f"new-{trial}.db") as ledger:
            ledger.record(f"run-{me}", 0, 1, ledger_event := __import__(
                "fedxab.privacy.mechanisms", fromlist=["PrivacyEvent"]
            ).PrivacyEvent("gaussian", 1.2, 0.25, 1.0, 1))
    except Exception as exc:
        failed += 1
        print(f"trial {trial}: {exc}", file=sys.stderr)
sys.exit(1 if failed else 0)
"""


@pytest.mark.slow  # about 9 s on 2 cores
def test_four_processes_creating_one_ledger_all_succeed(tmp_path):
    """50 trials: four processes open the same new ledger at once; each one opens it and
    records, none sees it half created."""
    trials = 50
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CREATOR, str(tmp_path), str(me), str(trials)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(4)
    ]
    outcomes = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    assert all(code == 0 for code, _ in outcomes), [err for _, err in outcomes]
    for trial in range(trials):
        with PrivacyLedger(tmp_path / f"new-{trial}.db") as ledger:
            assert ledger.runs() == [f"run-{me}" for me in range(4)]


def test_an_edited_totals_table_is_detected_and_cannot_cause_overspending(tmp_path):
    path = tmp_path / "l.db"
    rdp = make_accountant("rdp")
    budget = Budget(sum(rdp.epsilon([EVENT] * n, 1e-5) for n in (3, 4)) / 2, 1e-5)  # 3 fit
    with PrivacyLedger(path) as ledger:
        ledger.set_budget("r", 0, budget)
        ledger.set_owner("r", 0, "client-0/d", "objective-x")
        ledger.set_lifetime_budget("client-0/d", budget)
        for phase in (1, 2, 3):
            assert ledger.reserve("r", 0, phase, EVENT)
        assert ledger.check_totals() == []
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM totals")
    with PrivacyLedger(path) as ledger:
        assert ledger.check_totals() == [
            "run r, client 0: the totals table says 0 release(s), the events 3"
        ]
        with pytest.raises(LedgerError, match="the totals table disagrees with the events"):
            ledger.verify_totals()
        with pytest.raises(PrivacyBudgetExceeded):  # the budget checks read the events
            ledger.reserve("r", 0, 4, EVENT)
        assert ledger.spent("r", 0) == rdp.epsilon([EVENT] * 3, 1e-5)
        assert ledger.lifetime_spent("client-0/d") == rdp.epsilon([EVENT] * 3, 1e-5)
    with sqlite3.connect(path) as db:  # a count lowered, another kind added
        db.execute("INSERT INTO totals VALUES ('r', 0, 'gaussian', 1.2, 0.25, 1.0, '', 1)")
        db.execute("INSERT INTO totals VALUES ('r', 1, 'gaussian', 9.0, 0.25, 1.0, '', 1)")
    with PrivacyLedger(path) as ledger:
        assert [line.split(":")[0] for line in ledger.check_totals()] == [
            "run r, client 0",
            "run r, client 1",
        ]


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ({"release": 2**63}, "record.release"),
        ({"phase": 2**64}, "record.phase"),
        ({"client": -1}, "record.client"),
        ({"phase": 1.5}, "record.phase"),
        ({"run": ""}, "record.run"),
    ],
)
def test_an_out_of_range_record_is_refused_before_it_touches_sqlite(tmp_path, key, field):
    path = tmp_path / "l.db"
    with PrivacyLedger(path) as ledger:
        ledger.record("r", 0, 1, EVENT)
        args = {"run": "r", "client": 0, "phase": 2, "release": 0} | key
        with pytest.raises(ConfigError, match="the record is refused|run id") as refused:
            ledger.record(args["run"], args["client"], args["phase"], EVENT, args["release"])
        assert refused.value.field == field
        with pytest.raises(ConfigError):
            ledger.reserve(args["run"], args["client"], args["phase"], EVENT, args["release"])
        assert ledger.evidence() is not None and len(list(ledger.evidence())) == 1
    with PrivacyLedger(path) as ledger:  # the file is whole
        assert ledger.events("r", 0) == [EVENT]


def test_a_run_records_its_delta_and_accountant_once(tmp_path):
    with PrivacyLedger(tmp_path / "l.db") as ledger:
        ledger.set_run("r", 1e-3, "moments")
        ledger.set_run("r", 1e-3, "moments")  # the same again: nothing new
        ledger.record("r", 0, 1, EVENT)
        assert ledger.run_settings("r") == (1e-3, "moments")
        assert ledger.run_settings("other") is None
        assert ledger.deltas("r") == {0: 1e-3}  # no budget: the run's delta
        with pytest.raises(LedgerError, match="refusing delta 1e-05"):
            ledger.set_run("r", 1e-5, "moments")
