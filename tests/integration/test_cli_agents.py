"""The commands that run agents: fedxab run --broker, fedxab server, fedxab client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedxab.cli import _parse_client_ids, app
from fedxab.errors import FedxabError

runner = CliRunner()

FEDERATED = """\
[run]
repeats = 2
budget = 600
output = "{output}"

[objective]
name = "garland"

[algorithm]
name = "{algorithm}"

[federation]
clients = 6
"""


def _config(tmp_path: Path, algorithm: str = "fedpne") -> Path:
    path = tmp_path / "run.toml"
    path.write_text(FEDERATED.format(output=(tmp_path / "out").as_posix(), algorithm=algorithm))
    return path


def _runs(path: Path) -> list[dict]:
    runs = json.loads(path.read_text())["runs"]
    for run in runs:
        run.pop("wall_time_s")
    return runs


def test_run_on_the_embedded_broker_equals_the_in_process_run(tmp_path):
    config = _config(tmp_path)
    memory = runner.invoke(app, ["run", str(config), "-q", "-o", str(tmp_path / "m")])
    direct = runner.invoke(
        app, ["run", str(config), "-q", "-o", str(tmp_path / "d"), "--broker", "inprocess://"]
    )
    hosts = runner.invoke(
        app, ["run", str(config), "-q", "-o", str(tmp_path / "h"), "--hosts", "3"]
    )
    assert memory.exit_code == direct.exit_code == hosts.exit_code == 0, memory.output
    expected = _runs(tmp_path / "d" / "results.json")
    assert _runs(tmp_path / "m" / "results.json") == expected
    assert _runs(tmp_path / "h" / "results.json") == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["server", "{config}", "--broker", "memory://"], "needs a broker other processes reach"),
        (["client", "{config}", "--client-id", "0", "--broker", "inprocess://"], "kafka://"),
        (["client", "{config}", "--client-id", "0-9", "--broker", "kafka://h:1"], "0..5"),
        (["client", "{config}", "--client-id", "x", "--broker", "kafka://h:1"], "expected N, A-B"),
        (["run", "{config}", "--broker", "carrier-pigeon://"], "broker.url"),
        (["server", "{config}", "--broker", "kafka://nohost"], "kafka://HOST:PORT"),
    ],
)
def test_bad_transport_options_are_one_clear_error(tmp_path, args, message):
    config = _config(tmp_path)
    result = runner.invoke(app, [a.format(config=config) for a in args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_broker_for_a_single_agent_job_is_refused(tmp_path):
    path = tmp_path / "hct.toml"
    path.write_text('[algorithm]\nname = "hct"\n[run]\nbudget = 100\n')
    result = runner.invoke(app, ["run", str(path), "--broker", "memory://"])
    assert result.exit_code == 2
    assert "runs a single agent" in result.output


def test_client_id_lists():
    assert _parse_client_ids("3", 10) == [3]
    assert _parse_client_ids("0-2,7,5-6", 10) == [0, 1, 2, 5, 6, 7]
    for bad in ("", "3-1", "-1", "10", "1,,2"):
        with pytest.raises(FedxabError, match="--client-id"):
            _parse_client_ids(bad, 10)
