"""Lifetime budgets per data owner (issue 17): every run recorded in a client's ledger charges
its data owner, whatever the seed or output, and a release that would take the owner over its
lifetime budget is refused before it is released.

The acceptance item: with a lifetime budget that allows k releases in total, a client restarted
on new runs (other seeds, other outputs) stops at exactly k across the runs, with two and three
runs; in process, through the client agents on the embedded broker, and through ``fedxab run``
in separate processes with the default ledger location.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_private_runs import CLIENTS, PRIVACY_DELTA, SEED, _config, _epsilon_after

from fedxab.agents.distributed import run_on_broker
from fedxab.agents.federation import Federation
from fedxab.broker.memory import MemoryBroker
from fedxab.errors import ConfigError
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.run_ledger import LEDGER_HOME_VAR, data_owner, objective_digest


@pytest.fixture(scope="module")
def phases() -> int:
    """Releases one run makes per client without any budget (every complete phase)."""
    record = Federation(_config(), SEED).run()
    (n,) = set(record.privacy["releases"])
    assert n >= 3, "a run must release more than once for the totals below to span runs"
    return n


def _lifetime(k: int) -> float:
    """A lifetime budget that allows exactly k releases: halfway between k and k + 1."""
    return (_epsilon_after(k) + _epsilon_after(k + 1)) / 2


def _owners(config) -> list[str]:
    data_set = objective_digest(config.to_dict()["objective"])
    return [data_owner(m, data_set) for m in range(CLIENTS)]


@pytest.mark.parametrize("runs", [2, 3])
def test_a_lifetime_budget_of_k_releases_stops_at_exactly_k_across_runs(tmp_path, phases, runs):
    # every run but the last releases in full; the last one only k - (runs - 1) x phases times
    k = (runs - 1) * phases + 1
    ledger = tmp_path / "client-ledger.db"
    config = _config({"ledger": str(ledger), "lifetime_epsilon": _lifetime(k)})
    released, last = [], None
    for seed in range(SEED, SEED + runs):  # a new run each time: another seed, another run id
        last = Federation(config, seed)
        released.append(last.run().privacy["releases"])
    assert [sum(r[m] for r in released) for m in range(CLIENTS)] == [k] * CLIENTS
    assert released[-1] == [1] * CLIENTS  # the earlier runs left room for one release
    assert released[:-1] == [[phases] * CLIENTS] * (runs - 1)
    # the refusal says what the owner spent, what remains, and that nothing was released
    reason = last.clients[0].withdrawal.reason
    spent, remaining = _epsilon_after(k), _lifetime(k) - _epsilon_after(k)
    assert f"spent epsilon {spent:.4f}" in reason and f"{remaining:.4f} remaining" in reason
    assert f"over {runs} run(s)" in reason and "before anything is released" in reason
    with PrivacyLedger(ledger) as book:
        for owner in _owners(config):
            assert book.lifetime_spent(owner) == pytest.approx(_epsilon_after(k), rel=1e-12)
            assert book.lifetime_spent(owner) <= _lifetime(k)
            assert len({run for run, _ in book.owner_runs(owner)}) == runs


def test_an_exhausted_owner_is_refused_before_its_first_release(tmp_path, phases):
    config = _config({"ledger": str(tmp_path / "l.db"), "lifetime_epsilon": _lifetime(phases)})
    assert Federation(config, SEED).run().privacy["releases"] == [phases] * CLIENTS
    record = Federation(config, SEED + 1).run()
    assert record.privacy["releases"] == [0] * CLIENTS
    assert record.evaluations == 0  # refused before the first phase's release


def test_running_the_same_run_again_charges_nothing_new(tmp_path, phases):
    """Same config and seed: the same run id and the same seeded releases, charged once."""
    config = _config({"ledger": str(tmp_path / "l.db"), "lifetime_epsilon": _lifetime(phases)})
    first = Federation(config, SEED).run()
    again = Federation(config, SEED).run()
    assert first.privacy == again.privacy
    assert again.privacy["releases"] == [phases] * CLIENTS


def test_the_same_run_id_on_another_objective_is_refused_not_charged_as_a_replay(tmp_path):
    """A run id does not cover the objective: another objective setting under the same run id
    would release new values that the ledger would take for a replay."""
    ledger = str(tmp_path / "l.db")
    Federation(_config({"ledger": ledger, "lifetime_epsilon": 50.0}), SEED).run()
    other = _config({"ledger": ledger, "lifetime_epsilon": 50.0, "data_set": "garland-v1"})
    with pytest.raises(Exception, match="would be taken for replays"):
        Federation(other, SEED).run()


def test_the_client_agents_charge_their_own_ledger_across_runs(tmp_path, phases):
    """On a broker the clients' agents keep the lifetime ledger (client side), not the server."""
    k = phases + 2
    config = _config({"ledger": str(tmp_path / "agents.db"), "lifetime_epsilon": _lifetime(k)})

    async def run(seed: int):
        async with MemoryBroker() as broker:
            return await run_on_broker(config, seed, broker, hosts=2)

    first, second = (asyncio.run(run(seed)) for seed in (SEED, SEED + 1))
    assert first.privacy["releases"] == [phases] * CLIENTS
    assert second.privacy["releases"] == [2] * CLIENTS
    assert second.privacy["epsilon"] == [_epsilon_after(2)] * CLIENTS  # the run's own spend
    with PrivacyLedger(tmp_path / "agents.db") as book:
        assert [book.lifetime_spent(o) for o in _owners(config)] == pytest.approx(
            [_epsilon_after(k)] * CLIENTS, rel=1e-12
        )


def test_lifetime_settings_are_checked():
    with pytest.raises(ConfigError, match="privacy.lifetime_epsilon"):
        _config({"lifetime_epsilon": -1})
    with pytest.raises(ConfigError, match="privacy.data_set"):
        _config({"data_set": "no spaces/or slashes"})


def _fedxab(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, LEDGER_HOME_VAR: str(home), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "fedxab.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )


def test_fedxab_run_charges_the_default_ledger_and_audit_shows_lifetime_spend(tmp_path, phases):
    """Two ``fedxab run`` processes, other seeds, other outputs, no ledger configured: the
    default ledger (printed, and named in results.json with each run id) charges both."""
    k = phases + 1
    config = tmp_path / "run.toml"
    config.write_text(
        "[run]\nbudget = 30000\n[objective]\nname = 'garland'\n"
        "[algorithm]\nname = 'dpfedpne'\nepsilon = 0.5\nprivacy_delta = 0.001\n"
        "composition = 'sequential'\n"
        f"[federation]\nclients = {CLIENTS}\nheterogeneity = 'offset'\n"
        f"[privacy]\nlifetime_epsilon = {_lifetime(k)!r}\n"
    )
    home = tmp_path / "home"
    releases, run_ids = [], []
    for seed, out in ((SEED, "first"), (SEED + 1, "second")):
        done = _fedxab(
            "run", str(config), "--seed", str(seed), "--output", str(tmp_path / out), home=home
        )
        assert done.returncode == 0, done.stderr
        default = home / "privacy-ledger.sqlite"
        assert f"privacy ledger: {default}" in done.stdout
        results = json.loads(next((tmp_path / out).rglob("results.json")).read_text())
        (run,) = results["runs"]
        assert run["privacy"]["ledger"] == str(default)
        assert re.search(rf"run id {re.escape(run['run_id'])}\b", done.stdout)
        releases.append(run["privacy"]["releases"])
        run_ids.append(run["run_id"])
    assert releases == [[phases] * CLIENTS, [1] * CLIENTS]
    assert run_ids[0] != run_ids[1]
    audit = _fedxab("audit", str(home / "privacy-ledger.sqlite"), "--lifetime", "--json", home=home)
    assert audit.returncode == 0, audit.stderr
    rows = {row["owner"]: row for row in json.loads(audit.stdout)}
    assert sorted(rows) == sorted(_owners(_config()))
    for row in rows.values():
        assert row["runs"] == 2 and row["releases"] == k
        assert row["epsilon"] == pytest.approx(_epsilon_after(k, "sequential"), rel=1e-9)
        assert row["remaining"] == pytest.approx(_lifetime(k) - _epsilon_after(k), rel=1e-9)
        assert row["delta"] == PRIVACY_DELTA
    table = _fedxab("audit", str(home / "privacy-ledger.sqlite"), home=home)
    assert table.returncode == 0, table.stderr
    assert "lifetime" in table.stdout and all(r in table.stdout for r in run_ids)
