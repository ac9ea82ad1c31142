"""Helpers of the tests that run `fedxab server` / `fedxab client` as separate processes: start
them with their output in a log file, wait for a log line or for their exit, scrape their
Prometheus endpoint, compare results files without the wall time."""

from __future__ import annotations

import os
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
