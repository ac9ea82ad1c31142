"""`fedxab run` keeps each finished seed as it finishes and `--resume` takes them up again; a
Kafka job run a second time says in one line how to start a new one (issue 16, item 6)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedxab.agents.checkpoint import ServerCheckpoint
from fedxab.cli import app
from fedxab.config import config_from_dict
from fedxab.results import ResultsError, RunRecord
from fedxab.run.finished import FinishedRuns

runner = CliRunner()

JOB = """\
[run]
repeats = 3
budget = {budget}

[objective]
name = "garland"

[algorithm]
name = "fedpne"

[federation]
clients = {clients}

[security]
sign = false
"""


def _config(tmp_path: Path, budget: int, clients: int = 10) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(JOB.format(budget=budget, clients=clients))
    return path


def _runs(out: Path) -> list[dict]:
    runs = json.loads((out / "results.json").read_text())["runs"]
    for run in runs:
        run.pop("wall_time_s")
    return runs


def _start(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "fedxab.cli", *args], stdout=out, stderr=subprocess.STDOUT
        )


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, "the run ended before the moment the test waits for"
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.02)


@pytest.mark.slow  # about 27 s (a fresh-clone CI run): six runs of 200 clients, T = 200,000
def test_a_job_interrupted_after_two_seeds_resumes_with_them_and_equals_one_uninterrupted(
    tmp_path,
):
    config = _config(tmp_path, budget=200_000, clients=200)
    out = tmp_path / "out"
    proc = _start(["run", str(config), "-o", str(out), "-q"], tmp_path / "first.log")
    _wait_for(lambda: (out / "runs" / "seed-1.json").exists(), proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 130
    assert not (out / "results.json").exists()
    assert not (out / "runs" / "seed-2.json").exists(), "the third seed finished before the stop"
    kept = {s: (out / "runs" / f"seed-{s}.json").read_bytes() for s in (0, 1)}
    assert all(os.stat(out / "runs" / f"seed-{s}.json").st_mode & 0o077 == 0 for s in (0, 1))

    resumed = runner.invoke(app, ["run", str(config), "-o", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "resuming: seed(s) 0, 1 already finished" in " ".join(resumed.output.split())
    assert "run 1/3" not in resumed.output and "run 2/3" not in resumed.output
    assert {s: (out / "runs" / f"seed-{s}.json").read_bytes() for s in (0, 1)} == kept

    fresh = runner.invoke(app, ["run", str(config), "-o", str(tmp_path / "fresh"), "-q"])
    assert fresh.exit_code == 0, fresh.output
    assert _runs(out) == _runs(tmp_path / "fresh")


def test_without_resume_finished_seeds_run_again_and_the_user_is_told(tmp_path):
    config = _config(tmp_path, budget=2_000)
    out = tmp_path / "out"
    assert runner.invoke(app, ["run", str(config), "-o", str(out), "-q"]).exit_code == 0
    again = runner.invoke(app, ["run", str(config), "-o", str(out), "--repeats", "4"])
    assert again.exit_code == 0, again.output
    text = " ".join(again.output.split())
    assert "seed(s) 0, 1, 2 finished before" in text and "--resume keeps them" in text
    assert "run 1/4" in text and "run 4/4" in text  # every seed ran


def test_resume_adds_seeds_to_a_job_but_refuses_runs_of_another_experiment(tmp_path):
    base = {
        "run": {"repeats": 2, "budget": 500, "output": str(tmp_path)},
        "objective": {"name": "garland"},
        "algorithm": {"name": "fedpne"},
        "federation": {"clients": 4},
    }
    record = RunRecord.from_dict(
        {
            "seed": 1,
            "rounds": [500],
            "cumulative_regret": [1.0],
            "recommendation": [0.5],
            "simple_regret": 0.1,
            "evaluations": 2000,
            "wall_time_s": 0.1,
        }
    )
    FinishedRuns(config_from_dict(base), resume=True).keep(record)

    more = config_from_dict({**base, "run": {**base["run"], "repeats": 5}})
    assert list(FinishedRuns(more, resume=True).kept()) == [1]
    assert FinishedRuns(more, resume=False).kept() == {}

    longer = config_from_dict({**base, "run": {**base["run"], "budget": 600}})
    assert FinishedRuns(longer, resume=True).kept() == {}  # a run to continue, not to keep
    assert list(FinishedRuns(longer, resume=True).to_continue()) == [1]

    other = config_from_dict({**base, "federation": {"clients": 5}})
    with pytest.raises(ResultsError, match=r"another experiment \(federation.clients: expected 5"):
        FinishedRuns(other, resume=True).kept()

    (tmp_path / "runs" / "seed-1.json").write_text("{not json")
    with pytest.raises(ResultsError, match="seed-1.json: not a readable finished run"):
        FinishedRuns(config_from_dict(base), resume=True).kept()


def test_a_finished_kafka_job_run_again_says_in_one_line_how_to_start_a_new_one(
    tmp_path, dev_broker
):
    config = _config(tmp_path, budget=300, clients=4)
    base = ["run", str(config), "--broker", dev_broker.url, "--repeats", "1", "-q"]
    first = runner.invoke(app, [*base, "-o", str(tmp_path / "a"), "--namespace", "resume-a"])
    assert first.exit_code == 0, first.output

    again = runner.invoke(app, [*base, "-o", str(tmp_path / "b"), "--namespace", "resume-a"])
    assert again.exit_code == 2
    lines = again.output.strip().splitlines()
    assert len(" ".join(lines)) <= 200 and "Traceback" not in again.output
    text = " ".join(again.output.split())
    assert "already ran on" in text and "--namespace NAME" in text and "--resume" in text

    new = runner.invoke(app, [*base, "-o", str(tmp_path / "c"), "--namespace", "resume-c"])
    assert new.exit_code == 0, new.output
    assert _runs(tmp_path / "c") == _runs(tmp_path / "a")

    bad = runner.invoke(app, [*base, "-o", str(tmp_path / "d"), "--namespace", "no spaces"])
    assert bad.exit_code == 2 and "broker.namespace" in bad.output


def test_a_kafka_seed_interrupted_mid_run_continues_from_its_checkpoint(tmp_path, dev_broker):
    config = _config(tmp_path, budget=20_000)
    out = tmp_path / "out"
    args = ["run", str(config), "--broker", dev_broker.url, "--repeats", "1", "-o", str(out)]
    args += ["--namespace", "resume-mid", "-q"]
    proc = _start(args, tmp_path / "first.log")
    checkpoints = out / "checkpoints"

    def phases_closed() -> int:
        return sum(ServerCheckpoint.closed_phases_in(p) for p in checkpoints.glob("*.ckpt"))

    _wait_for(lambda: phases_closed() >= 3, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 130
    assert not (out / "results.json").exists()

    resumed = runner.invoke(app, [*args, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    direct_args = ["run", str(config), "--broker", "inprocess://", "--repeats", "1", "-q"]
    direct = runner.invoke(app, [*direct_args, "-o", str(tmp_path / "direct")])
    assert direct.exit_code == 0, direct.output
    assert _runs(out) == _runs(tmp_path / "direct")
