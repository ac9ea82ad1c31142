"""fedxab audit: per-client table, one client's history, JSON, other accountants side by side,
lifetime spend per data owner, bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fedxab.cli import app
from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.ledger import Budget, PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent

runner = CliRunner()
EVENT = PrivacyEvent("gaussian", 1.5, 0.2, 1.0, 1)
WIDE = {"COLUMNS": "240"}  # a terminal wide enough for every column of the tables on one line


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "ledger.db"
    with PrivacyLedger(path) as book:
        for client, releases in ((0, 3), (1, 9)):
            book.set_budget("run-a", client, Budget(2.0, 1e-5))
            for phase in range(1, releases + 1):
                book.record("run-a", client, phase, EVENT)
        book.record("run-b", 4, 1, EVENT)  # a client without a budget
    return path


def test_json_rows_recompute_epsilon_and_flag_clients_over_budget(ledger):
    result = runner.invoke(app, ["audit", str(ledger), "--run", "run-a", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    rdp = make_accountant("rdp")
    assert [(r["client"], r["releases"]) for r in rows] == [(0, 3), (1, 9)]
    for row, releases in zip(rows, (3, 9), strict=True):
        assert row["epsilon"] == pytest.approx(rdp.epsilon([EVENT] * releases, 1e-5))
        assert row["remaining"] == pytest.approx(2.0 - row["epsilon"])
        assert row["over_budget"] == (row["epsilon"] > 2.0)
    assert [r["over_budget"] for r in rows] == [False, True]


def test_another_accountant_and_a_delta_for_clients_without_budget(ledger):
    result = runner.invoke(
        app, ["audit", str(ledger), "--accountant", "moments", "--delta", "1e-6", "--json"]
    )
    rows = {(r["run"], r["client"]): r for r in json.loads(result.output)}
    moments = make_accountant("moments")
    assert rows[("run-b", 4)]["epsilon"] == pytest.approx(moments.epsilon([EVENT], 1e-6))
    assert rows[("run-b", 4)]["budget_epsilon"] is None
    assert rows[("run-a", 0)]["accountant"] == "moments"


def test_several_accountants_side_by_side_the_first_checks_the_budget(ledger):
    result = runner.invoke(
        app, ["audit", str(ledger), "--run", "run-a", "--accountant", "moments",
              "--accountant", "rdp", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for row, releases in zip(json.loads(result.output), (3, 9), strict=True):
        history = [EVENT] * releases
        expected = {n: make_accountant(n).epsilon(history, 1e-5) for n in ("moments", "rdp")}
        assert row["epsilons"] == pytest.approx(expected, rel=1e-12)
        assert row["epsilon"] == row["epsilons"]["moments"]
        assert row["remaining"] == pytest.approx(2.0 - expected["moments"])
    table = runner.invoke(
        app, ["audit", str(ledger), "--accountant", "moments", "--accountant", "rdp"], env=WIDE
    )
    assert table.exit_code == 0 and "epsilon rdp" in table.output


@pytest.fixture
def lifetime_ledger(tmp_path):
    """Data owner A took part in two runs (3 + 2 releases) under a lifetime budget; B in one."""
    path = tmp_path / "lifetime.db"
    with PrivacyLedger(path) as book:
        book.set_lifetime_budget("client-0/a", Budget(3.0, 1e-5))
        for run, client, owner, releases in (
            ("run-a", 0, "client-0/a", 3), ("run-b", 0, "client-0/a", 2),
            ("run-b", 1, "client-1/b", 1),
        ):  # fmt: skip
            book.set_owner(run, client, owner, "objective-x")
            for phase in range(1, releases + 1):
                book.record(run, client, phase, EVENT)
    return path


def test_lifetime_spend_per_data_owner_over_its_runs(lifetime_ledger):
    result = runner.invoke(app, ["audit", str(lifetime_ledger), "--lifetime", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["owner"]: row for row in json.loads(result.output)}
    spent = make_accountant("rdp").epsilon([EVENT] * 5, 1e-5)  # one scope: 5 releases compose
    assert rows["client-0/a"] | {"epsilons": None} == {
        "owner": "client-0/a", "runs": 2, "releases": 5, "delta": 1e-5,
        "epsilon": pytest.approx(spent), "budget_epsilon": 3.0,
        "remaining": pytest.approx(3.0 - spent), "over_budget": spent > 3.0,
        "accountant": "rdp", "epsilons": None,
    }  # fmt: skip
    assert rows["client-1/b"]["epsilon"] is None  # no lifetime budget, no delta: not accounted
    with_delta = runner.invoke(
        app, ["audit", str(lifetime_ledger), "--lifetime", "--delta", "1e-6", "--json"]
    )
    b = {row["owner"]: row for row in json.loads(with_delta.output)}["client-1/b"]
    assert b["epsilon"] == pytest.approx(make_accountant("rdp").epsilon([EVENT], 1e-6))
    table = runner.invoke(app, ["audit", str(lifetime_ledger)], env=WIDE)
    assert table.exit_code == 0
    per_run, lifetime = table.output.split("lifetime spend per data owner")
    assert "run-a" in per_run and "client-0/a" in per_run
    assert "client-0/a" in lifetime and "run-a" not in lifetime


def test_one_clients_history_and_the_table(ledger):
    history = runner.invoke(
        app, ["audit", str(ledger), "--run", "run-a", "--client", "1", "--json"]
    )
    events = json.loads(history.output)
    assert [e["phase"] for e in events] == list(range(1, 10))
    epsilons = [e["epsilon_after"] for e in events]
    assert epsilons == sorted(epsilons)
    assert events[-1]["over_budget"] and not events[0]["over_budget"]
    table = runner.invoke(app, ["audit", str(ledger)])
    assert table.exit_code == 0 and "YES" in table.output and "run-b" in table.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--client", "1"], "--client needs --run"),
        (["--run", "run-z"], "no run 'run-z'"),
        (["--run", "run-a", "--client", "7"], "no release"),
        (["--accountant", "renyi"], "privacy.accountant"),
        (["--accountant", "rdp", "--accountant", "renyi"], "privacy.accountant"),
        (["--lifetime", "--run", "run-a"], "leave out --run"),
    ],
)
def test_bad_options_are_one_clear_error(ledger, args, message):
    result = runner.invoke(app, ["audit", str(ledger), *args])
    assert result.exit_code == 2
    assert message in result.output


def test_a_missing_or_corrupted_ledger_is_one_clear_error(tmp_path):
    missing = runner.invoke(app, ["audit", str(tmp_path / "none.db")])
    assert missing.exit_code == 2 and "no such ledger file" in missing.output
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"\x00garbage" * 64)
    corrupted = runner.invoke(app, ["audit", str(bad)])
    assert corrupted.exit_code == 2 and "corrupted" in corrupted.output


def test_verifying_an_unsigned_ledger_is_one_line(ledger, tmp_path):
    """A ledger recorded by a run that does not sign: one error line, not one per row."""
    from fedxab.security.keypairs import generate_keypairs

    generate_keypairs(1, tmp_path / "keys")
    result = runner.invoke(app, ["audit", str(ledger), "--verify", str(tmp_path / "keys/public")])
    assert result.exit_code == 2
    assert "holds no signed evidence: none of its 13 release(s)" in " ".join(result.output.split())
    assert "verification failed" not in result.output
    assert len(result.output.strip().splitlines()) <= 3  # one message, folded at most twice


def test_one_clients_lifetime_run_by_run(lifetime_ledger):
    result = runner.invoke(
        app, ["audit", str(lifetime_ledger), "--client", "0", "--lifetime", "--json"]
    )
    assert result.exit_code == 0, result.output
    steps = json.loads(result.output)
    rdp = make_accountant("rdp")
    assert [(s["owner"], s["run"], s["releases"]) for s in steps] == [
        ("client-0/a", "run-a", 3), ("client-0/a", "run-b", 2),
    ]  # fmt: skip
    assert steps[0]["epsilon_run"] == pytest.approx(rdp.epsilon([EVENT] * 3, 1e-5))
    assert steps[1]["epsilon_run"] == pytest.approx(rdp.epsilon([EVENT] * 2, 1e-5))
    assert steps[1]["epsilon"] == pytest.approx(rdp.epsilon([EVENT] * 5, 1e-5))
    assert steps[1]["remaining"] == pytest.approx(3.0 - steps[1]["epsilon"])
    no_budget = runner.invoke(app, ["audit", str(lifetime_ledger), "--client", "1", "--lifetime"])
    assert no_budget.exit_code == 2 and "pass --delta" in no_budget.output
    nobody = runner.invoke(app, ["audit", str(lifetime_ledger), "--client", "7", "--lifetime"])
    assert nobody.exit_code == 2 and "client 7 is no data owner's client" in nobody.output


def test_a_local_dp_servers_ledger_hint_names_a_command_that_writes_its_file(tmp_path):
    """A server under local DP keeps no ledger file (its clients do): its hint is the audit
    of the ledger topic, which creates the file it names; a run's own ledger is named as is."""
    from types import SimpleNamespace

    from rich.console import Console

    from fedxab.cli import _print_ledger
    from fedxab.config import config_from_dict
    from fedxab.security.keypairs import generate_keypairs

    generate_keypairs(1, tmp_path / "keys")
    cfg = config_from_dict(
        {
            "algorithm": {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 1e-3},
            "federation": {"clients": 2},
            "privacy": {"ledger": "clients.db"},
            "broker": {"url": "kafka://127.0.0.1:9092", "namespace": "ns"},
            "security": {"keys_dir": str(tmp_path / "keys")},
        }
    )
    results = SimpleNamespace(
        runs=[SimpleNamespace(privacy={"ledger": "clients.db", "run_id": "run-1"})]
    )

    def shown(*args):
        console = Console(record=True, width=400)
        _print_ledger(console, results, *args)
        return console.export_text()

    line = shown(cfg)
    assert "each client keeps its own (at clients.db on its machine)" in line
    assert (
        "fedxab audit run-1.ledger.db --run run-1 --rebuild-from kafka://127.0.0.1:9092 "
        f"--namespace ns --verify {tmp_path / 'keys' / 'public'}"
    ) in line
    assert "audit: fedxab audit clients.db" in shown()  # fedxab run: the ledger it wrote


# --- the ledger records each run's delta and accountant: the audit needs no flags --------------


@pytest.fixture
def recorded_runs(tmp_path):
    """Two runs of data owner client-0/d, no budgets: each run recorded its delta (1e-3 and
    1e-4) and accountant (moments), as every run of fedxab records them."""
    path = tmp_path / "ledger.db"
    with PrivacyLedger(path, accountant="moments") as book:
        for run, delta, releases in (("run-a", 1e-3, 2), ("run-b", 1e-4, 3)):
            book.set_run(run, delta, "moments")
            book.set_owner(run, 0, "client-0/d", "objective-x")
            for phase in range(1, releases + 1):
                book.reserve(run, 0, phase, EVENT)
    return path


def test_lifetime_and_per_run_epsilon_need_no_delta_and_use_the_runs_accountant(recorded_runs):
    moments = make_accountant("moments")
    result = runner.invoke(app, ["audit", str(recorded_runs), "--lifetime", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["accountant"] == "moments" and row["delta"] == 1e-4  # the smaller: more epsilon
    assert row["epsilon"] == pytest.approx(moments.epsilon([EVENT] * 5, 1e-4))
    result = runner.invoke(app, ["audit", str(recorded_runs), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["run"]: r for r in json.loads(result.output)}
    assert rows["run-a"]["epsilon"] == pytest.approx(moments.epsilon([EVENT] * 2, 1e-3))
    assert rows["run-b"]["epsilon"] == pytest.approx(moments.epsilon([EVENT] * 3, 1e-4))
    result = runner.invoke(
        app, ["audit", str(recorded_runs), "--client", "0", "--lifetime", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert [r["releases"] for r in json.loads(result.output)] == [2, 3]


def test_an_edited_totals_table_fails_the_audit_naming_it(recorded_runs):
    import sqlite3

    with sqlite3.connect(recorded_runs) as db:
        db.execute("DELETE FROM totals WHERE run='run-b'")
    for args in ([], ["--lifetime"], ["--run", "run-b"]):
        result = runner.invoke(app, ["audit", str(recorded_runs), *args])
        assert result.exit_code != 0, args
        assert "the totals table disagrees with the events" in result.output
        assert "run run-b, client 0" in result.output


def test_an_accountant_that_falls_back_says_so_in_the_audit(tmp_path, monkeypatch):
    from fedxab.privacy import accountants

    path = tmp_path / "ledger.db"
    odd = PrivacyEvent("gaussian", 1.37, 0.21, 1.0, 1)  # a history no other test accounts
    with PrivacyLedger(path) as book:
        book.set_run("r", 1e-5, "pld")
        book.record("r", 0, 1, odd)

    def no_answer(compute, args, timeout_s):
        accountants._WORKER.failure = "ran out of time (privacy.accountant_timeout_s = 60 s)"

    monkeypatch.setattr(accountants._WORKER, "run", no_answer)
    result = runner.invoke(app, ["audit", str(path), "--json"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "the 'pld' accountant did not answer" in result.output
    assert "'rdp' answered them" in result.output
    rows = json.loads(result.output[result.output.index("[") :])
    assert rows[0]["epsilon"] == make_accountant("rdp").epsilon([odd], 1e-5)
