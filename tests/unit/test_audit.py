"""fedxab.privacy.audit.audit_ledger: which tables an audit shows, by which accountant, with
epsilon recomputed from the ledger's events."""

from __future__ import annotations

import pytest

from fedxab.errors import FedxabError
from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.audit import audit_ledger
from fedxab.privacy.ledger import Budget, PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent

EVENT = PrivacyEvent("gaussian", 1.2, 0.25, 1.0, 1)
DELTA = 1e-5


@pytest.fixture
def ledger(tmp_path):
    """Two runs accounted by "moments": run a with clients 0 (2 releases) and 1 (1), run b
    with client 0 (3); client 0 is data owner "site" in both, with a lifetime budget."""
    path = tmp_path / "ledger.db"
    with PrivacyLedger(path) as book:
        for run, releases in (("a", {0: 2, 1: 1}), ("b", {0: 3})):
            book.set_run(run, DELTA, "moments")
            for client, n in releases.items():
                for phase in range(1, n + 1):
                    book.record(run, client, phase, EVENT)
            book.set_owner(run, 0, "site", "objective")
        book.set_lifetime_budget("site", Budget(50.0, DELTA))
    return path


def _epsilon(name: str, releases: int) -> float:
    return make_accountant(name).epsilon([EVENT] * releases, DELTA)


def test_the_audit_shows_every_run_and_client_then_every_data_owner(ledger):
    report = audit_ledger(ledger)
    per_run, per_owner = report.tables
    assert per_run.title == f"privacy ledger {ledger}, per run (moments accountant)"
    assert [(r["run"], r["client"], r["releases"]) for r in per_run.rows] == [
        ("a", 0, 2),
        ("a", 1, 1),
        ("b", 0, 3),
    ]
    assert per_run.rows[0]["epsilon"] == pytest.approx(_epsilon("moments", 2), rel=1e-12)
    assert per_owner.columns[:2] == ["owner", "runs"]
    assert [(r["owner"], r["runs"], r["releases"]) for r in per_owner.rows] == [("site", 2, 5)]
    assert per_owner.rows[0]["epsilon"] == pytest.approx(_epsilon("moments", 5), rel=1e-12)
    assert report.notes == []


def test_named_accountants_replace_the_recorded_one_and_the_others_are_shown_beside(ledger):
    (per_run, _) = audit_ledger(ledger, run="a", accountants=["rdp", "moments"]).tables
    assert per_run.title.endswith("(rdp accountant)")
    assert "epsilon moments" in per_run.columns
    row = per_run.rows[0]
    assert {r["run"] for r in per_run.rows} == {"a"}
    assert row["epsilon"] == pytest.approx(_epsilon("rdp", 2), rel=1e-12)
    assert row["epsilons"]["moments"] == pytest.approx(_epsilon("moments", 2), rel=1e-12)


def test_lifetime_shows_only_the_data_owners(ledger):
    (table,) = audit_ledger(ledger, lifetime=True).tables
    assert table.title == "lifetime spend per data owner (moments accountant)"


def test_a_clients_history_and_lifetime(ledger):
    (history,) = audit_ledger(ledger, run="b", client=0).tables
    assert history.title == "run b, client 0 (moments accountant)"
    assert [r["phase"] for r in history.rows] == [1, 2, 3]
    assert history.rows[-1]["epsilon_after"] == pytest.approx(_epsilon("moments", 3), rel=1e-12)
    (lifetime,) = audit_ledger(ledger, client=0, lifetime=True).tables
    assert [r["run"] for r in lifetime.rows] == ["a", "b"]
    assert lifetime.rows[-1]["epsilon"] == pytest.approx(_epsilon("moments", 5), rel=1e-12)


def test_a_clients_history_needs_the_run_when_the_ledger_holds_several(ledger):
    with pytest.raises(
        FedxabError, match=r"--client needs --run: the ledger holds runs \['a', 'b'\]"
    ):
        audit_ledger(ledger, client=0)
