"""What idle connections to the dashboard cost the run it shows (issue 39 item 6).

One job, ``fedxab run JOB --dashboard`` (Fed-PNE, Garland, M clients on the embedded
``memory://`` broker), run ``--repeats`` times (default 3) each way, interleaved:

1. **alone**: nothing connects to the dashboard;
2. **idle N**: as soon as the dashboard's port accepts, this process opens ``--connections``
   (default 2,000) TCP connections to it and sends nothing on them, keeping them open until
   the run ends;
3. **idle N, reopened**: the same, and every connection the dashboard closes is opened again
   (checked every 0.5 s): an attacker who keeps N idle connections at all times.

Reported: the median wall time of the ``fedxab run`` process (start to exit, the same in every
mode) and its ratio to **alone**, how many connections the dashboard closed and this process
opened again (last run of the mode), and the load average over the last minute when the last
run of the mode ended (the machine's, other work included). Target: each ratio within 1.10
(the run's wall time within 10%).
Run: ``.venv/bin/python benchmarks/bench_dashboard_idle.py [--repeats N]
[--connections N] [--clients M] [--budget T]``; the fedxab it runs is the one on the path of
this Python (``-m fedxab.cli``; set ``PYTHONPATH`` to measure another checkout).
"""

from __future__ import annotations

import argparse
import errno
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_federation import env_line, environment, md_table

MODES = ("alone", "idle", "idle, reopened")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _job(folder: Path, clients: int, budget: int) -> Path:
    path = folder / "job.toml"
    path.write_text(
        f'[run]\nseed = 0\nrepeats = 1\nbudget = {budget}\noutput = "{folder.as_posix()}/out"\n'
        '[objective]\nname = "garland"\n[algorithm]\nname = "fedpne"\n'
        f"[federation]\nclients = {clients}\n"
    )
    return path


def _connect(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    code = sock.connect_ex(("127.0.0.1", port))
    if code not in (0, errno.EINPROGRESS):
        sock.close()
        raise OSError(code, os.strerror(code))
    return sock


class Idler(threading.Thread):
    """Holds ``n`` idle connections to ``port`` from when it accepts until :meth:`stop`;
    with ``reopen``, one the dashboard closes is opened again (a closed idle connection is
    the only kind that turns readable: one ``poll`` over all of them finds them)."""

    def __init__(self, port: int, n: int, reopen: bool) -> None:
        super().__init__(daemon=True)
        self.port, self.n, self.reopen = port, n, reopen
        self.socks: dict[int, socket.socket] = {}
        self.done = threading.Event()
        self.reopened = 0

    def _open(self, poller: select.poll) -> None:
        sock = _connect(self.port)
        self.socks[sock.fileno()] = sock
        poller.register(sock, select.POLLIN)

    def run(self) -> None:
        while not self.done.is_set():  # until the dashboard listens
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        poller = select.poll()
        for _ in range(self.n):
            self._open(poller)
        while not self.done.wait(0.5):
            if not self.reopen:
                continue
            for fd, _ in poller.poll(0):
                poller.unregister(fd)
                self.socks.pop(fd).close()
                try:
                    self._open(poller)
                    self.reopened += 1
                except OSError:
                    pass

    def stop(self) -> int:
        """Stop and close every connection; how many were opened again."""
        self.done.set()
        self.join(10)
        for sock in self.socks.values():
            sock.close()
        return self.reopened


def one_run(job: Path, mode: str, connections: int) -> tuple[float, int, float]:
    """(wall time of the run process, connections opened again, 1-min load at its end)."""
    port = _free_port()
    idler = None if mode == "alone" else Idler(port, connections, reopen=mode != "idle")
    command = [sys.executable, "-m", "fedxab.cli", "run", str(job), "-q"]
    command += ["--dashboard", "--dashboard-port", str(port)]
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if idler is not None:
        idler.start()
    _, err = proc.communicate(timeout=1800)
    wall = time.perf_counter() - start
    reopened = 0 if idler is None else idler.stop()
    if proc.returncode != 0:
        raise SystemExit(f"the run failed ({mode}): {err.decode(errors='replace')[-2000:]}")
    return wall, reopened, os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--budget", type=int, default=20_000)
    args = parser.parse_args()
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    reopened: dict[str, int] = {}
    load: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        job = _job(Path(tmp), args.clients, args.budget)
        for _ in range(args.repeats):
            for mode in MODES:
                wall, reopened[mode], load[mode] = one_run(job, mode, args.connections)
                walls[mode].append(wall)
    base = statistics.median(walls["alone"])
    rows = [
        [
            "alone" if mode == "alone" else f"{mode} ({args.connections:,} connections)",
            f"{statistics.median(walls[mode]):.2f}",
            f"{statistics.median(walls[mode]) / base:.3f}",
            f"{min(walls[mode]):.2f}-{max(walls[mode]):.2f}",
            "-" if mode != "idle, reopened" else f"{reopened[mode]:,}",
            f"{load[mode]:.1f}",
        ]
        for mode in MODES
    ]
    header = [
        "dashboard",
        "wall s (median)",
        "ratio",
        "range s",
        "reopened (last run)",
        "load 1 min",
    ]
    print(env_line(environment()))
    print(
        f"fedxab run --dashboard: Fed-PNE, Garland, M = {args.clients}, T = {args.budget:,}, "
        f"memory:// broker, {args.repeats} runs per mode"
    )
    print(md_table(header, rows))


if __name__ == "__main__":
    main()
