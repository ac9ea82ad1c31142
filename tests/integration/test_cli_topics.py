"""``fedxab topics`` and ``[broker] create_topics = false`` as an operator uses them, on the dev
broker: a server and a client process whose topics nobody created stop within seconds, naming the
missing topic and the command; ``fedxab topics create`` makes the topics with the config's
replication factor, partitions, retention and settings; the run then works; ``describe`` and
``delete`` show and remove them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from fedxab.cli import app

JOB = """
[run]
budget = 200
[objective]
name = "garland"
[algorithm]
name = "fedpne"
[federation]
clients = 2
[security]
sign = false
[broker]
url = "{url}"
namespace = "team-a.ops"
partitions = 2
replication_factor = 3
retention_ms = 86400000
create_topics = false
[broker.topic_config]
"min.insync.replicas" = 2
"""
STOPPED_WITHIN_S = 20.0
"""A party that may not create topics stops this soon after it starts (imports included), far
under the 60 s a party would wait for an unreachable broker ([broker] unreachable_s)."""


def _fedxab(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fedxab.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "250", "FEDXAB_HOME": str(cwd / "home")},
    )


def test_operators_create_the_topics_and_parties_that_may_not_stop_naming_them(
    tmp_path, dev_broker
):
    config = tmp_path / "job.toml"
    config.write_text(JOB.format(url=dev_broker.url))
    runner = CliRunner(env={"COLUMNS": "250"})

    started = time.monotonic()
    parties = [
        _fedxab("server", str(config), "-q", "-o", "out", cwd=tmp_path),
        _fedxab("client", str(config), "--client-id", "0-1", cwd=tmp_path),
    ]
    for party in parties:
        _, err = party.communicate(timeout=60)
        took = time.monotonic() - started
        assert party.returncode == 2, err
        assert took < STOPPED_WITHIN_S, took
        line = " ".join(err.split())
        assert "error: topic 'team-a.ops." in line and "does not exist" in line, err
        assert "`fedxab topics create CONFIG`" in line and "create_topics = false" in line
        assert "Traceback" not in err

    described = runner.invoke(app, ["topics", "describe", str(config)])
    assert described.exit_code == 1, described.output
    assert "5 topic(s) absent" in described.output

    created = runner.invoke(app, ["topics", "create", str(config)])
    assert created.exit_code == 0, created.output
    assert "5 topic(s) created, 0 already there" in created.output
    again = runner.invoke(app, ["topics", "describe", str(config)])
    assert again.exit_code == 0, again.output
    rows = [row for row in again.output.splitlines() if "team-a.ops." in row]
    assert len(rows) == 5
    for row in rows:
        cells = [cell.strip() for cell in row.split("│")[1:-1]]
        partitions = "1" if cells[0].endswith(".broadcast") else "2"
        assert cells[1:4] == ["exists", partitions, "3"], row
        assert "retention.ms=86400000" in cells[4] and "min.insync.replicas=2" in cells[4]
        assert cells[5] == "as configured", row

    run = _fedxab("run", str(config), "-q", "-o", "out", cwd=tmp_path)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert "results: out/results.json" in out

    refused = runner.invoke(app, ["topics", "delete", str(config)])
    assert refused.exit_code == 2 and "--yes" in refused.output
    deleted = runner.invoke(app, ["topics", "delete", str(config), "--yes"])
    assert deleted.exit_code == 0, deleted.output
    assert "5 topic(s) deleted, 0 were absent" in deleted.output
    gone = runner.invoke(app, ["topics", "describe", str(config)])
    assert gone.exit_code == 1 and "5 topic(s) absent" in gone.output


def test_topics_need_a_federated_job_on_kafka(tmp_path):
    config = tmp_path / "job.toml"
    config.write_text(JOB.format(url="memory://"))
    result = CliRunner().invoke(app, ["topics", "create", str(config)])
    assert result.exit_code == 2
    assert "topics live on Kafka" in result.output
