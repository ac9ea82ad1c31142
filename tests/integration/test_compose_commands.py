"""compose.yaml's own fedxab command lines, run as processes on the dev broker.

No Docker engine runs here, so the containers' command lines are taken from compose.yaml as
they are and only what Docker would provide is replaced: the broker address (``kafka:9092``),
the mounted paths (``/config/run.toml``, ``/keys``, ``/data``), the client ids' variable, and the
metrics listeners (``0.0.0.0`` and fixed ports become loopback and free ports, as every test
binds). The server keeps its own ``--output`` and ``--checkpoint``, as in compose: it must meet
its clients (its run id must not depend on where it writes), and its results must be the
in-process run's.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from cli_procs import FEDXAB, start_cli, until, without_time

from fedxab.agents.federation import run_federated_config
from fedxab.broker.devbroker import DevBroker, dev_broker_available, free_port
from fedxab.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def _mounted_config(service: dict) -> Path:
    """The host file compose mounts at /config/run.toml for ``service``."""
    for volume in service["volumes"]:
        host, _, rest = volume.partition(":")
        if rest.split(":")[0] == "/config/run.toml":
            return ROOT / host
    raise AssertionError("no /config/run.toml volume")


def _command(service: dict, replace: dict[str, str]) -> list[str]:
    """The service's command with Docker's values replaced (each must be used)."""
    out = []
    for arg in service["command"]:
        arg = str(arg)
        for old, new in replace.items():
            if arg == old or arg.startswith(old + "/"):
                arg = new + arg[len(old) :]
                break
        out.append(arg)
    return out


@pytest.fixture
def broker():
    available, reason = dev_broker_available()
    if not available:
        pytest.skip(f"dev broker unavailable: {reason}")
    with DevBroker() as dev:  # its own: compose's config uses the default namespace
        yield dev


def test_compose_server_and_client_command_lines_complete_a_job(tmp_path, broker):
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    config_path = _mounted_config(services["server"])
    assert _mounted_config(services["client"]) == config_path
    replace = {
        "kafka://kafka:9092": broker.url,
        "/config/run.toml": str(config_path),
        "/keys": str(tmp_path / "keys"),
        "/data": str(tmp_path / "data"),
        "0.0.0.0": "127.0.0.1",
        "9100": str(free_port()),
        "9101": str(free_port()),
        "${FEDXAB_CLIENT_IDS:-0-9}": "0-9",
    }
    commands = {name: _command(services[name], replace) for name in ("keys", "server", "client")}
    assert "--output" in commands["server"] and "--checkpoint" in commands["server"]
    assert "--serve-after" in commands["server"]  # metrics outlive the job: we stop it below

    subprocess.run([*FEDXAB, *commands["keys"]], check=True, capture_output=True)
    procs = {
        name: start_cli(*commands[name], log=tmp_path / f"{name}.log")
        for name in ("server", "client")
    }
    results = tmp_path / "data" / "results" / "results.json"
    try:
        until(results.exists, "the server's results file", timeout=180)
        until(lambda: b"run(s) finished" in (tmp_path / "client.log").read_bytes(), "clients")
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            proc.wait(30)
    expected = run_federated_config(load_config(config_path))
    got = json.loads(results.read_text())["runs"]
    assert [without_time(r) for r in got] == [without_time(r.to_dict()) for r in expected.runs]
