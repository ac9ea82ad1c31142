"""Helpers of the tests that run `fedxab server` / `fedxab client` as separate processes: start
them with their output in a log file, wait for a log line or for their exit, scrape their
Prometheus endpoint, compare results files without the wall time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

FEDXAB = [sys.executable, "-m", "fedxab.cli"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def without_time(run: dict) -> dict:
    """A results file's run without its wall time (the one field that differs between runs)."""
    run = dict(run)
    run.pop("wall_time_s")
    return run


LOCAL_DP_WITHHELD = [
    "clients",
    "cumulative_regret",
    "local_cumulative_regret",
    "global_simple_regret",
    "local_simple_regret",
]
"""What a server's results withhold under local DP when the objectives are simulated (their
regret curves are built from the clients' telemetry): ``fedxab.run.outcome.withheld_block``."""


def served_under_local_dp(served: dict, in_process: dict) -> tuple[dict, dict]:
    """A local-DP server's run and the in-process run of the same seed, each without what the
    server does not have: the served run must name exactly :data:`LOCAL_DP_WITHHELD` as
    withheld and hold none of it (nor the average regret derived from it); the in-process run
    (every party in one process) has all of it. Equal pairs mean equal runs otherwise."""
    served, in_process = dict(served), dict(in_process)
    assert served.pop("withheld")["fields"] == LOCAL_DP_WITHHELD
    for key in ("average_regret", *LOCAL_DP_WITHHELD):
        assert served.pop(key, None) is None, key
        in_process.pop(key)
    return served, in_process


def start_cli(*args: str, log: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """``fedxab ARGS`` in a new process, stdout and stderr to ``log``; ``env`` adds variables
    to this process's environment."""
    with open(log, "wb") as handle:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [*FEDXAB, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env},
        )


def wait_ok(proc: subprocess.Popen, log: Path, timeout: float) -> None:
    """Wait for ``proc`` to exit with status 0 (else fail with the end of its log)."""
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"process did not finish in {timeout} s:\n{log.read_text()[-3000:]}")
    assert code == 0, log.read_text()[-3000:]


def until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds (fail after ``timeout`` seconds)."""
    stop = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > stop:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def log_line(log: Path, prefix: str, timeout: float = 120) -> str:
    """The first line of ``log`` that starts with ``prefix`` (waiting for it)."""
    stop = time.monotonic() + timeout
    while time.monotonic() < stop:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                return line
        time.sleep(0.05)
    raise AssertionError(f"no {prefix!r} line in {log.name}:\n{log.read_text()[-3000:]}")


def scrape(url: str) -> Samples:
    """GET ``url`` and parse it: (sample name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def get(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


class ProcessFederation:
    """A server process and two client processes (clients 0-3 and 4-7) of the run in
    ``config`` (a TOML file whose output directory is ``tmp_path / "run"``), on ``url``."""

    def __init__(self, tmp_path: Path, url: str, config: Path) -> None:
        self.tmp = tmp_path
        self.url = url
        self.config = config
        self.checkpoints = tmp_path / "checkpoints"
        self.procs: dict[str, subprocess.Popen] = {}
        self._starts: dict[str, int] = {}

    def log(self, name: str) -> Path:
        """The log of the last start of ``name``."""
        n = self._starts.get(name, 1)
        return self.tmp / (f"{name}.log" if n <= 1 else f"{name}.{n}.log")

    def start(self, name: str, *, fresh_log: bool = False, keys_dir: Path | None = None) -> None:
        """Start ``name`` (``server``, ``client-a`` or ``client-b``); ``fresh_log``: in a
        new log file (the last one is kept); ``keys_dir``: other keys than the config's."""
        if fresh_log:
            self._starts[name] = self._starts.get(name, 1) + 1
        cfg, url = str(self.config), self.url
        if name == "server":
            args = ["server", cfg, "--broker", url, "--checkpoint", str(self.checkpoints), "-q"]
        else:
            hosted = {"client-a": "0-3", "client-b": "4-7"}[name]
            args = ["client", cfg, "--broker", url, "--client-id", hosted]
        if keys_dir is not None:
            args += ["--keys-dir", str(keys_dir)]
        self.procs[name] = start_cli(*args, log=self.log(name))

    def stop_all(self) -> None:
        """Kill every process still running (a test's cleanup)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def phases_checkpointed(self) -> bool:
        """Whether the server has checkpointed a closed phase (its checkpoint file is written
        at its start already, with the session and no phase)."""
        from fedxab.agents.checkpoint import ServerCheckpoint

        paths = self.checkpoints.glob("*.ckpt")
        return any(ServerCheckpoint.closed_phases_in(path) for path in paths)

    def closed_phases(self) -> int:
        """Phases in the server's checkpoint now."""
        from fedxab.agents.checkpoint import ServerCheckpoint

        (path,) = self.checkpoints.glob("*.ckpt")
        return ServerCheckpoint.closed_phases_in(path)

    def expected(self) -> list[dict]:
        """The in-process runs of the config, without wall time."""
        from fedxab.agents.federation import Federation
        from fedxab.config import load_config

        config = load_config(self.config)
        return [without_time(Federation(config, s).run().to_dict()) for s in config.run.seeds]

    def finish(self, clients: tuple[str, ...] | None = None, timeout: float = 120) -> list[dict]:
        """Wait for the processes (``clients``: those names only) to exit with status 0; the
        runs of the results file, without wall time."""
        try:
            for name, proc in self.procs.items():
                if clients is None or name in clients:
                    wait_ok(proc, self.log(name), timeout)
        finally:
            self.stop_all()
        return self.results()

    def results(self) -> list[dict]:
        data = json.loads((self.tmp / "run" / "results.json").read_text())
        runs = [without_time(run) for run in data["runs"]]
        assert runs, "the results file holds no runs"
        return runs
