"""Elastic membership with real processes on the dev broker: a ``fedxab server`` and ``fedxab
client`` processes started at different phases, some stopped with SIGTERM (a clean leave), some
killed with SIGKILL (gone by silence), one restarted (a rejoin); the run finishes and ``fedxab
replay`` of its results (the recorded membership, in process) gives the same run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from cli_procs import start_cli, until, wait_ok

from fedxab.agents.checkpoint import ServerCheckpoint
from fedxab.run.membership import membership_of

SITE = """\
import os
import time

import numpy as np


def site(X, client_id):
    time.sleep(float(os.environ.get("ELASTIC_SITE_SLEEP", "0")))  # a slow site: room to act
    return 1.0 - np.sum((X - 0.3 - 0.01 * client_id) ** 2, axis=1)
"""

JOB = """\
[run]
budget = 20000

[objective]
function = "elasticsite:site"
domain = [[0.0, 1.0], [0.0, 1.0]]
vectorized = true

[algorithm]
name = "{algorithm}"
{params}

[federation]
clients = {clients}
membership = "elastic"

[agents]
heartbeat_s = 0.5
liveness_s = 4.0
rebroadcast_s = 3.0
telemetry_timeout_s = 6.0
min_clients = {min_clients}

[broker]
url = "{url}"
namespace = "{namespace}"

[security]
sign = false
{privacy}"""

DP = {
    "params": 'epsilon = 0.5\nprivacy_delta = 0.001\ncomposition = "sequential"',
    "privacy": "\n[privacy]\n",
}


class Population:
    """A server process and client processes of 2 clients each (``c0`` hosts clients 0-1,
    ``c1`` clients 2-3, ...)."""

    def __init__(self, tmp: Path, job: Path, env: dict[str, str]) -> None:
        self.tmp, self.job, self.env = tmp, job, env
        self.procs: dict[str, subprocess.Popen] = {}
        self.starts: dict[str, int] = {}

    def log(self, name: str) -> Path:
        return self.tmp / f"{name}.{self.starts[name]}.log"

    def start_server(self) -> None:
        self.starts["server"] = 1
        args = ["server", str(self.job), "-o", str(self.tmp / "server"), "-q"]
        args += ["--checkpoint", str(self.tmp / "checkpoints")]
        self.procs["server"] = start_cli(*args, log=self.log("server"), env=self.env)

    def start(self, k: int) -> None:
        name = f"c{k}"
        self.starts[name] = self.starts.get(name, 0) + 1
        ids = f"{2 * k}-{2 * k + 1}"
        args = ["client", str(self.job), "--client-id", ids, "-o", str(self.tmp / name)]
        env = {**self.env, "ELASTIC_SITE_SLEEP": "1.0"}
        self.procs[name] = start_cli(*args, log=self.log(name), env=env)

    def stop(self, k: int, sig: int) -> None:
        proc = self.procs.pop(f"c{k}")
        proc.send_signal(sig)
        proc.wait(30)

    def closed(self) -> int:
        paths = list((self.tmp / "checkpoints").glob("*.ckpt"))
        return ServerCheckpoint.closed_phases_in(paths[0]) if paths else 0

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow  # (a server and 10 client processes on the dev broker: about a minute here)
@pytest.mark.parametrize("algorithm", ["fedpne", "dpfedpne"])
def test_client_processes_come_and_go_and_the_replay_is_the_run(tmp_path, dev_broker, algorithm):
    (tmp_path / "elasticsite.py").write_text(SITE)
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    }
    dp = DP if algorithm == "dpfedpne" else {"params": "", "privacy": ""}
    job = tmp_path / "job.toml"
    job.write_text(
        JOB.format(
            algorithm=algorithm,
            clients=20,
            min_clients=10,
            url=dev_broker.url,
            namespace=f"e{uuid.uuid4().hex[:10]}",
            **dp,
        )
    )
    pop = Population(tmp_path, job, env)
    try:
        pop.start_server()
        for k in range(6):  # clients 0-11 from the start
            pop.start(k)
        until(lambda: pop.closed() >= 1, "phase 1 closed", 120)
        pop.start(6)  # clients 12-15 join
        pop.start(7)
        pop.stop(1, signal.SIGTERM)  # clients 2-3 leave cleanly
        pop.stop(2, signal.SIGKILL)  # clients 4-5 die
        until(lambda: pop.closed() >= 3, "phase 3 closed", 120)
        pop.start(8)  # clients 16-19 join
        pop.start(9)
        pop.start(1)  # clients 2-3 rejoin
        pop.stop(3, signal.SIGKILL)  # clients 6-7 die
        wait_ok(pop.procs.pop("server"), pop.log("server"), 240)
        for name, proc in pop.procs.items():
            wait_ok(proc, pop.log(name), 60)
    finally:
        pop.kill_all()
    results = tmp_path / "server" / "results.json"
    run = json.loads(results.read_text())["runs"][0]
    phases = membership_of(run["communication"])
    members = [set(p.members) for p in phases]
    assert len(members[0]) >= 10 and members[0] <= set(range(12))  # min_clients = 10
    assert any(set(range(12, 16)) <= m for m in members)  # joined after phase 1
    assert any(set(range(16, 20)) <= m for m in members)  # joined later still
    assert {4, 5, 6, 7}.isdisjoint(members[-1])  # killed: gone by silence
    assert any({2, 3}.isdisjoint(m) for m in members) and {2, 3} <= members[-1]  # rejoined
    replayed = subprocess.run(
        [*__import__("cli_procs").FEDXAB, "replay", str(results)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.strip() == "seed 0: identical"
