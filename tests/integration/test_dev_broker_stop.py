"""`fedxab broker` and its Tansu child stop together, with real processes on a free loopback
port: SIGINT or SIGTERM stops both and frees the port (it used to take 5 s or more with a client
connected: the broker was sent SIGTERM, on which Tansu first waits 5 s for its connections to
close), a second Ctrl-C kills a broker that does not stop, and a SIGKILLed `fedxab broker` leaves
no Tansu behind (it used to keep running, and keep the port). Every test stops what it started,
also when it fails. The bounds (10 s) are generous: they catch a broker left running, not a slow
machine."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_procs import log_line, start_cli, until

from fedxab.broker.devbroker import (
    DevBroker,
    _advertised_brokers,
    dev_broker_available,
    free_port,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc; the parent-death signal is Linux's"
)

BOUND = 10.0  # seconds: far above the ~1 s a stop takes, so that load cannot make it flaky


@pytest.fixture(autouse=True)
def _needs_dev_broker() -> None:
    available, reason = dev_broker_available()
    if not available:
        pytest.skip(f"dev broker unavailable: {reason}")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a zombie holds no port)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    """The ids of the live processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    found.append(int(entry.name))
    return found


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def fedxab_broker(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, int, int]]:
    """``fedxab broker --port P`` on a free port, once it prints that it listens: (its process,
    its Tansu child's id, P). Both are killed on the way out if still alive."""
    port = free_port()
    log = tmp_path / "broker.log"
    proc = start_cli("broker", "--port", str(port), log=log)
    tansu: list[int] = []
    try:
        log_line(log, "dev broker listening", timeout=60)
        tansu = _children(proc.pid)
        assert len(tansu) == 1, f"children of fedxab broker: {tansu}"
        assert "tansu" in Path(f"/proc/{tansu[0]}/comm").read_text()
        yield proc, tansu[0], port
    finally:
        for pid in tansu:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_fedxab_broker_and_its_tansu_and_frees_the_port(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """With a client connection open (what made Tansu linger 5 s on SIGTERM), the signal sent
    to `fedxab broker` alone (as `kill` does; a terminal's Ctrl-C reaches Tansu too) ends both
    processes and frees the port; the command exits with status 130, without a traceback."""
    with fedxab_broker(tmp_path) as (proc, tansu, port):
        with socket.create_connection(("127.0.0.1", port), timeout=BOUND):
            proc.send_signal(signum)
            code = proc.wait(BOUND)
            until(lambda: not _alive(tansu), "the Tansu child to exit", timeout=BOUND)
            until(lambda: _port_free(port), f"port {port} to be free", timeout=BOUND)
        output = (tmp_path / "broker.log").read_text()
        assert code == 130, output
        assert "Traceback" not in output


def test_a_sigkilled_fedxab_broker_leaves_no_tansu_behind(tmp_path: Path) -> None:
    """SIGKILL gives `fedxab broker` no chance to stop its child: the parent-death signal
    (``prctl(PR_SET_PDEATHSIG)``) kills Tansu, which frees the port."""
    with fedxab_broker(tmp_path) as (proc, tansu, port):
        proc.kill()
        proc.wait(BOUND)
        until(lambda: not _alive(tansu), "the orphaned Tansu child to die", timeout=BOUND)
        until(lambda: _port_free(port), f"port {port} to be free", timeout=BOUND)


def test_stop_ends_tansu_cleanly_while_clients_are_connected() -> None:
    """Sent SIGTERM, Tansu waits 5 s for its open connections before it exits, so a stop with a
    4 s timeout had to kill it (exit status -9); sent SIGINT it exits at once, with status 0."""
    with DevBroker() as dev:
        process = dev._process
        assert process is not None
        with socket.create_connection(("127.0.0.1", dev.port), timeout=BOUND):
            dev.stop(timeout=4.0)
    assert process.returncode == 0, f"exit status {process.returncode} (-9: killed)"


def test_an_interrupted_stop_kills_the_broker() -> None:
    """A second Ctrl-C while :meth:`DevBroker.stop` waits (here for a broker frozen with SIGSTOP,
    which cannot exit) kills the broker before the interrupt propagates."""
    dev = DevBroker()
    dev.start()
    process = dev._process
    assert process is not None
    interrupt = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    try:
        process.send_signal(signal.SIGSTOP)
        interrupt.start()
        with pytest.raises(KeyboardInterrupt):
            dev.stop(timeout=60.0)
        assert process.poll() == -signal.SIGKILL
    finally:
        interrupt.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
        dev.stop()


def test_a_broker_started_from_a_thread_that_ends_keeps_running() -> None:
    """Linux sends the parent-death signal when the starting *thread* ends, so a broker started
    from another thread gets none: it must outlive that thread (and be stopped by ``stop``)."""
    dev = DevBroker()
    starter = threading.Thread(target=dev.start)
    try:
        starter.start()
        starter.join(BOUND)
        assert dev.running
        time.sleep(0.5)  # a parent-death signal is sent as the thread exits: it would be here
        assert dev.running
        assert ("127.0.0.1", dev.port) in _advertised_brokers(dev.port, timeout=BOUND)
    finally:
        starter.join(BOUND)
        dev.stop()
