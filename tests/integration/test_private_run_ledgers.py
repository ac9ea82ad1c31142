"""What a private ``fedxab run`` says about its ledger and its accounting (issue 36): a relative
``[privacy] ledger`` lies in the output directory, so ``--output`` moves it; the ledger records
the run's delta and accountant, so ``fedxab audit`` needs no flag; an accountant that falls back
to ``rdp`` says so in results.json and in the run's summary; two runs started together on one
lifetime ledger stop within the lifetime budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from test_private_runs import CLIENTS, PRIVACY_DELTA, SEED, _epsilon_after

from fedxab.agents.federation import Federation
from fedxab.config import config_from_dict
from fedxab.privacy.ledger import PrivacyLedger

JOB = (
    "[run]\nbudget = 30000\n[objective]\nname = 'garland'\n"
    "[algorithm]\nname = 'dpfedpne'\nepsilon = 0.5\nprivacy_delta = 0.001\n"
    "composition = 'sequential'\n"
    f"[federation]\nclients = {CLIENTS}\nheterogeneity = 'offset'\n"
    "[privacy]\n"
)


def _fedxab(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "FEDXAB_HOME": str(cwd / "home"), "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-m", "fedxab.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )


def _done(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return out


def test_a_relative_ledger_follows_output_and_the_audit_needs_no_delta(tmp_path):
    config = tmp_path / "job.toml"
    config.write_text(JOB + "ledger = 'ledger.db'\naccountant = 'moments'\n")
    out = _done(_fedxab("run", str(config), "--seed", str(SEED), "-o", "elsewhere", cwd=tmp_path))
    ledger = tmp_path / "elsewhere" / "ledger.db"
    assert ledger.is_file()
    assert "privacy ledger: elsewhere/ledger.db (audit: fedxab audit elsewhere/ledger.db)" in out
    (run,) = json.loads((tmp_path / "elsewhere" / "results.json").read_text())["runs"]
    assert run["privacy"]["ledger"] == "elsewhere/ledger.db"
    # no budget, no --delta, no --accountant: the run's own delta and accountant
    audit = json.loads(_done(_fedxab("audit", str(ledger), "--json", cwd=tmp_path)))
    assert [row["epsilon"] for row in audit] == pytest.approx(run["privacy"]["epsilon"])
    assert {row["accountant"] for row in audit} == {"moments"}
    assert {row["delta"] for row in audit} == {PRIVACY_DELTA}
    lifetime = json.loads(
        _done(_fedxab("audit", str(ledger), "--lifetime", "--json", cwd=tmp_path))
    )
    assert [row["epsilon"] for row in lifetime] == pytest.approx(run["privacy"]["epsilon"])


def test_a_forced_fallback_is_in_the_results_and_the_summary(tmp_path):
    config = tmp_path / "job.toml"
    config.write_text(JOB + "accountant = 'pld'\naccountant_timeout_s = 1e-6\n")
    out = _done(_fedxab("run", str(config), "--seed", str(SEED), "-o", "out", cwd=tmp_path))
    (run,) = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    privacy = run["privacy"]
    assert privacy["accountant"] == "pld" and privacy["fallback_accountant"] == "rdp"
    assert privacy["accountant_fallbacks"] >= 1
    assert "ran out of time (privacy.accountant_timeout_s = 1e-06 s)" in privacy["fallback_reason"]
    assert f"privacy, seed {SEED}: the 'pld' accountant did not answer" in out
    assert "'rdp' answered them" in out


@pytest.mark.slow  # two private runs at once, about 20 s on 2 cores
def test_two_runs_started_together_on_one_lifetime_ledger_stop_within_it(tmp_path):
    # the lifetime budget fits 4 releases per data owner: one run alone would release more
    lifetime = (_epsilon_after(4) + _epsilon_after(5)) / 2
    config = tmp_path / "job.toml"
    shared = tmp_path / "shared.db"
    config.write_text(JOB + f"ledger = '{shared}'\nlifetime_epsilon = {lifetime!r}\n")
    runs = [
        _fedxab("run", str(config), "--seed", str(seed), "-o", f"out-{seed}", "-q", cwd=tmp_path)
        for seed in (SEED, SEED + 1)
    ]
    for process in runs:
        _done(process)
    with PrivacyLedger(shared) as ledger:
        owners = ledger.owners()
        assert len(owners) == CLIENTS
        for owner in owners:
            releases = sum(len(ledger.events(run, m)) for run, m in ledger.owner_runs(owner))
            assert releases == 4, owner
            assert ledger.lifetime_spent(owner) <= lifetime


SMALL_JOB = (
    "[run]\nbudget = 600\n[objective]\nname = 'garland'\n"
    "[algorithm]\nname = 'dpfedpne'\nepsilon = 0.5\nprivacy_delta = 0.001\n"
    "composition = 'sequential'\n"
    "[federation]\nclients = 2\nheterogeneity = 'offset'\n"
)
"""A private run small enough that a pair of them takes a few seconds (mostly imports)."""


def _owner_releases(path: Path) -> dict[str, tuple[int, float]]:
    """Each data owner's releases over every run on the ledger at ``path``, and its lifetime
    epsilon."""
    with PrivacyLedger(path) as ledger:
        return {
            owner: (
                sum(len(ledger.events(run, m)) for run, m in ledger.owner_runs(owner)),
                ledger.lifetime_spent(owner),
            )
            for owner in ledger.owners()
        }


PAIR_RUNNER = """
import os, sys, time
from pathlib import Path
from fedxab.cli import app
root, seed, trials = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
failed = 0
for trial in range(trials):
    directory = root / f"trial-{trial}"
    (directory / f"ready-{seed}").touch()  # a barrier: both runs of a trial start together
    while len(list(directory.glob("ready-*"))) < 2:
        time.sleep(0.001)
    os.chdir(directory)
    os.environ["FEDXAB_HOME"] = str(directory / "home")
    try:
        app(["run", "job.toml", "--seed", seed, "-o", f"out-{seed}", "-q"], prog_name="fedxab")
    except SystemExit as stop:
        if stop.code not in (0, None):
            failed += 1
            print(f"trial {trial}: fedxab run exited with {stop.code}", file=sys.stderr)
sys.exit(1 if failed else 0)
"""
"""One of the two processes of each trial: for every trial, ``fedxab run`` (the command itself,
called in this process) on the trial's job, started with the other process's run of the trial.
Two processes doing every trial's run spare the test 38 interpreter start-ups and imports (about
3 CPU-seconds each), and the barrier makes each trial's two runs start closer together than two
new processes would."""


@pytest.mark.slow  # 40 private runs in 2 processes: about 14 CPU-seconds
def test_twenty_pairs_of_runs_started_together_never_overspend_a_lifetime_budget(tmp_path):
    """Issue 36: 20 trials, each two ``fedxab run`` executions in two processes started together
    on one new ledger whose lifetime budget fits k = 2 releases per data owner, where one run
    alone releases 3 times and the pair would release 6: every trial stops each owner at exactly
    k releases, at the epsilon of k releases, within the budget."""
    k, trials = 2, 20
    alone = Federation(config_from_dict(tomllib.loads(SMALL_JOB + "[privacy]\n")), SEED).run()
    assert set(alone.privacy["releases"]) == {k + 1}, "one run alone must want more than k"
    lifetime = (_epsilon_after(k) + _epsilon_after(k + 1)) / 2
    for trial in range(trials):
        directory = tmp_path / f"trial-{trial}"
        directory.mkdir()
        (directory / "job.toml").write_text(
            SMALL_JOB
            + f"[privacy]\nledger = '{directory / 'shared.db'}'\nlifetime_epsilon = {lifetime!r}\n"
        )
    env = {**os.environ, "COLUMNS": "200"}
    pair = [
        subprocess.Popen(
            [sys.executable, "-c", PAIR_RUNNER, str(tmp_path), str(seed), str(trials)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for seed in (SEED, SEED + 1)
    ]
    for process in pair:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
    outcomes = [
        _owner_releases(tmp_path / f"trial-{trial}" / "shared.db") for trial in range(trials)
    ]
    spent = _epsilon_after(k)
    wrong = {
        trial: owners
        for trial, owners in enumerate(outcomes)
        if len(owners) != 2
        or any(
            n != k or eps > lifetime or eps != pytest.approx(spent) for n, eps in owners.values()
        )
    }
    assert not wrong, f"{len(wrong)} of {trials} trials did not stop at {k} releases: {wrong}"
