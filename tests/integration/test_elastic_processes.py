"""Elastic membership with real processes on the dev broker: a ``fedxab server`` and ``fedxab
client`` processes started at different phases, some stopped with SIGTERM (a clean leave), some
killed with SIGKILL (gone by silence), one restarted (a rejoin); the run finishes and ``fedxab
replay`` of its results (the recorded membership, in process) gives the same run."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from cli_procs import FEDXAB, start_cli, until, wait_ok

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
budget = {budget}

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
heartbeat_s = {heartbeat}
liveness_s = {liveness}
rebroadcast_s = 3.0
telemetry_timeout_s = {liveness}
min_clients = {min_clients}
inline_answer_s = 0  # a slow answer on the loop would stop the heartbeats past liveness_s

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


def _job(tmp_path, dev_broker, algorithm, heartbeat=0.5, liveness=4.0, **settings) -> Path:
    """The job's TOML file: ``JOB`` with ``settings`` (clients, min_clients, budget)."""
    dp = DP if algorithm == "dpfedpne" else {"params": "", "privacy": ""}
    job = tmp_path / "job.toml"
    namespace = f"e{uuid.uuid4().hex[:10]}"
    job.write_text(
        JOB.format(
            algorithm=algorithm,
            url=dev_broker.url,
            namespace=namespace,
            heartbeat=heartbeat,
            liveness=liveness,
            **settings,
            **dp,
        )
    )
    return job


def _site_env(tmp_path) -> dict[str, str]:
    """The site module written, and the environment that imports it."""
    (tmp_path / "elasticsite.py").write_text(SITE)
    path = [str(tmp_path), os.environ.get("PYTHONPATH")]
    return {"PYTHONPATH": os.pathsep.join(filter(None, path))}


class Population:
    """A server process and client processes of ``per`` clients each (``c0`` hosts clients
    0..per-1, ``c1`` the next ``per``, ...), whose sites take ``sleep`` seconds a call."""

    def __init__(
        self, tmp: Path, job: Path, env: dict[str, str], per: int = 2, sleep: float = 1.0
    ) -> None:
        self.tmp, self.job, self.env, self.per, self.sleep = tmp, job, env, per, sleep
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
        ids = f"{self.per * k}-{self.per * (k + 1) - 1}"
        args = ["client", str(self.job), "--client-id", ids, "-o", str(self.tmp / name)]
        env = {**self.env, "ELASTIC_SITE_SLEEP": str(self.sleep)}
        self.procs[name] = start_cli(*args, log=self.log(name), env=env)

    def stop(self, k: int, sig: int) -> None:
        proc = self.procs.pop(f"c{k}")
        proc.send_signal(sig)
        proc.wait(60)

    def finish(self, timeout: float) -> Path:
        """Wait for the server, then every client process still running, to exit with status
        0; the server's results file."""
        try:
            wait_ok(self.procs.pop("server"), self.log("server"), timeout)
            for name, proc in self.procs.items():
                wait_ok(proc, self.log(name), 120)
        finally:
            self.kill_all()
        return self.tmp / "server" / "results.json"

    def replay(self) -> subprocess.CompletedProcess:
        """``fedxab replay`` of the server's results, in a process of its own."""
        results = self.tmp / "server" / "results.json"
        return subprocess.run(
            [*FEDXAB, "replay", str(results)],
            capture_output=True,
            text=True,
            env={**os.environ, **self.env},
            timeout=600,
        )

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
    env = _site_env(tmp_path)
    job = _job(tmp_path, dev_broker, algorithm, clients=20, min_clients=10, budget=20000)
    pop = Population(tmp_path, job, env, sleep=1.5)
    try:
        pop.start_server()
        for k in range(6):  # clients 0-11 from the start
            pop.start(k)
        until(lambda: pop.closed() >= 1, "phase 1 closed", 120)
        pop.start(6)  # clients 12-15 join
        pop.start(7)
        pop.stop(1, signal.SIGTERM)  # clients 2-3 leave cleanly
        pop.stop(2, signal.SIGKILL)  # clients 4-5 die
        until(lambda: pop.closed() >= 2, "phase 2 closed", 120)
        pop.start(8)  # clients 16-19 join
        pop.start(9)
        pop.start(1)  # clients 2-3 rejoin
        pop.stop(3, signal.SIGKILL)  # clients 6-7 die
    except BaseException:
        pop.kill_all()
        raise
    results = pop.finish(240)
    run = json.loads(results.read_text())["runs"][0]
    phases = membership_of(run["communication"])
    members = [set(p.members) for p in phases]
    assert len(members[0]) >= 10 and members[0] <= set(range(12))  # min_clients = 10
    assert any(set(range(12, 16)) <= m for m in members)  # joined after phase 1
    assert any(set(range(16, 20)) <= m for m in members)  # joined later still
    assert {4, 5, 6, 7}.isdisjoint(members[-1])  # killed: gone by silence
    assert any({2, 3}.isdisjoint(m) for m in members) and {2, 3} <= members[-1]  # rejoined
    replayed = pop.replay()
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.strip() == "seed 0: identical"


@pytest.mark.slow
@pytest.mark.scale  # (1,000 clients in 16 process starts of 100: about 4 minutes each)
@pytest.mark.parametrize("algorithm", ["fedpne", "dpfedpne"])
def test_a_thousand_clients_come_and_go_and_the_replay_is_the_run(tmp_path, dev_broker, algorithm):
    """1,000 clients, 100 per client process (10 slots of ids): 800 from the start; at each of
    the first four phase boundaries one process stops with SIGTERM and one with SIGKILL (200
    clients, 20% of 1,000, leave) and two start (200 join: the unused slots, then restarts of
    stopped ones, which rejoin)."""
    env = _site_env(tmp_path)
    job = _job(
        tmp_path, dev_broker, algorithm, heartbeat=5.0, liveness=20.0,
        clients=1000, min_clients=700, budget=5000,
    )  # fmt: skip
    pop = Population(tmp_path, job, env, per=100, sleep=0.02)
    running, stopped = list(range(8)), [8, 9]
    try:
        pop.start_server()
        for k in running:
            pop.start(k)
        for boundary in range(1, 5):
            until(lambda b=boundary: pop.closed() >= b, f"phase {boundary} closed", 900)
            leaving, running = running[:2], running[2:]
            pop.stop(leaving[0], signal.SIGTERM)
            pop.stop(leaving[1], signal.SIGKILL)
            joining, stopped = stopped[:2], stopped[2:] + leaving
            for k in joining:
                pop.start(k)
            running += joining
    except BaseException:
        pop.kill_all()
        raise
    results = pop.finish(1200)
    run = json.loads(results.read_text())["runs"][0]
    phases = membership_of(run["communication"])
    sizes = [(len(p.members), len(p.asked), len(p.reported)) for p in phases]
    print("members, asked, reported per phase:", sizes)
    changes = [len(set(a.members) ^ set(b.members)) for a, b in itertools.pairwise(phases)]
    print("clients that joined or left between phases:", changes)
    assert len(phases) >= 5 and all(n >= 600 for n, _, _ in sizes)
    assert sum(changes) >= 4 * 200  # about 20% left and 20% joined at four boundaries
    replayed = pop.replay()
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.strip() == "seed 0: identical"
