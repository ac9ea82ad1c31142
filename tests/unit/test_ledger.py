"""The privacy ledger: append-only, never charges twice, survives kills, enforces budgets."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys

import pytest

from fedxab.errors import ConfigError
from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.ledger import Budget, LedgerError, PrivacyBudgetExceeded, PrivacyLedger
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
