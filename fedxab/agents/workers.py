"""Client hosts in worker processes, for the in-process runner on a multi-core machine.

``[run] workers = N`` (N > 1) splits a federated run's clients into N contiguous slices
(:func:`~fedxab.run.job.client_slices`, as the broker runtime's client hosts) and
hosts each slice in a process of its own (:func:`_context`). Each worker builds its
clients exactly as a client agent does (:func:`~fedxab.run.assembly.build_run` for its ids only)
and per phase answers the encoded broadcast for its active clients, every client decoding its
own copy. The server, the regret sums and the privacy ledger of central DP stay in the parent.

A client's answers depend only on its own state, its own random streams and the broadcasts, so
the record is identical to that of ``workers = 1`` (tests/integration/test_workers.py); only the
wall time differs. Clients that keep a privacy ledger themselves (local DP, ``dpfedpne``) are
not hosted in workers: their ledger must be the run's.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.context
import pickle
import sys
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from fedxab.algorithms.registry import PRIVATE, decode_broadcast
from fedxab.broker.codec import packb, unpackb
from fedxab.config import Config, config_from_dict
from fedxab.errors import ConfigError, FedxabError
from fedxab.run.assembly import Functions, build_run
from fedxab.run.evaluation import Telemetry
from fedxab.run.job import client_slices
from fedxab.run.outcome import ClientOutcome
from fedxab.run.session import ClientSession

__all__ = ["Answer", "ClientWorkers", "WorkerError", "answer_client", "check_workers"]

Answer = tuple[int, bytes | None, Telemetry | None, float | None]
"""One client's answer to a phase: (client, encoded report or None if it was not asked,
telemetry of its pulls, best value it has observed so far)."""


class WorkerError(FedxabError, RuntimeError):
    """A worker process died or could not send back what it raised."""


def check_workers(config: Config, functions: Functions | None, start_method: str = "fork") -> None:
    """Refuse ``run.workers > 1`` where the clients cannot live in other processes (and, for
    workers started by ``spawn``, where the objective functions cannot be sent to them)."""
    name = config.algorithm.name
    if PRIVATE.get(name) == "client":
        raise ConfigError(
            "run.workers",
            f"must be 1 for {name!r}: its clients keep the run's privacy ledger themselves "
            "(local DP); run it with workers = 1, or on a broker with client hosts",
        )
    if functions is not None and start_method != "fork":
        try:
            pickle.dumps(functions)
        except Exception as exc:
            raise ConfigError(
                "run.workers",
                f"> 1 sends the objective functions to worker processes, and they cannot be "
                f"pickled ({type(exc).__name__}: {exc}); define them at module level, or use "
                "workers = 1",
            ) from exc


def _context() -> multiprocessing.context.ForkContext | multiprocessing.context.SpawnContext:
    """``fork`` where the platform has it, else ``spawn``. A forked worker is ready in about
    0.1 s where a spawned one takes about 1 s (it imports fedxab and the main module again),
    which matters for a run of seconds. A forked child runs only :func:`_serve`: it builds its
    own clients and first replaces the log handlers it inherited (a parent's progress display
    may hold their locks at the fork)."""
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _own_log_handler() -> None:
    """The root logger of a worker: one plain handler on stderr, none inherited."""
    root = logging.getLogger()
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(processName)s %(name)s: %(message)s"))
    root.addHandler(handler)


def _serve(
    conn: Connection,
    config_data: dict[str, Any],
    seed: int,
    run_id: str,
    ids: list[int],
    functions: Functions | None,
) -> None:
    """A worker's loop: build clients ``ids``, then answer requests until told to stop."""
    _own_log_handler()
    config = config_from_dict(config_data)
    hosted = build_run(
        config, seed, run_id=run_id, server=False, client_ids=ids, functions=functions
    ).clients
    assert hosted is not None
    name = config.algorithm.name
    handlers: dict[str, Callable[..., Any]] = {
        "answer": lambda wire, active: [
            answer_client(hosted, name, wire, m) for m in active if m in hosted.clients
        ],
        "outcomes": lambda: {m: hosted.outcome(m) for m in ids},
    }
    while True:
        request = conn.recv()
        if request is None:
            return
        kind, args = request
        try:
            reply: tuple[str, Any] = ("ok", handlers[kind](*args))
        except BaseException as exc:
            reply = ("error", exc)
        try:
            conn.send(reply)
        except Exception:  # the exception itself cannot be pickled: send its text
            conn.send(("error", WorkerError(f"{type(reply[1]).__name__}: {reply[1]}")))


def answer_client(hosted: ClientSession, name: str, wire: bytes, m: int) -> Answer:
    """Client ``m``'s answer to the encoded broadcast ``wire`` of algorithm ``name`` (decoded
    for it alone), ``hosted`` being the session that holds it: in a worker, or in the
    in-process runner itself."""
    report, telemetry, _ = hosted.answer(m, decode_broadcast(name, unpackb(wire)))
    payload = None if report is None else packb(report.to_wire())  # None: not asked
    return m, payload, telemetry, hosted.evaluators[m].observed.best


class ClientWorkers:
    """The clients of one run, hosted by ``n_workers`` processes, forked where the platform
    can (:func:`_context`; see the module).

    Use as a context manager, or call :meth:`~fedxab.agents.workers.ClientWorkers.close`:
    the workers stop with it (and are killed if they do not)."""

    def __init__(
        self,
        config: Config,
        seed: int,
        *,
        run_id: str,
        n_workers: int,
        functions: Functions | None = None,
    ) -> None:
        context = _context()
        check_workers(config, functions, context.get_start_method())
        assert config.federation is not None
        self._conns: list[Connection] = []
        self._processes: list[Any] = []
        try:
            for ids in client_slices(config.federation.clients, n_workers):
                parent, child = context.Pipe()
                process = context.Process(
                    target=_serve,
                    args=(child, config.to_dict(), seed, run_id, ids, functions),
                    name=f"fedxab-clients-{ids[0]}-{ids[-1]}",
                    daemon=True,
                )
                process.start()
                child.close()
                self._conns.append(parent)
                self._processes.append(process)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ClientWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ask(self, kind: str, *args: Any) -> list[Any]:
        """Send one request to every worker, then collect their replies in worker order."""
        pairs = list(zip(self._conns, self._processes, strict=True))
        for conn, process in pairs:
            try:
                conn.send((kind, args))
            except OSError:
                raise self._died(process) from None
        replies = []
        for conn, process in pairs:
            try:
                status, value = conn.recv()
            except (EOFError, OSError):
                raise self._died(process) from None
            if status == "error":
                raise value
            replies.append(value)
        return replies

    @staticmethod
    def _died(process: Any) -> WorkerError:
        process.join(1.0)
        return WorkerError(f"worker process {process.name} died (exit code {process.exitcode})")

    def answer(self, wire: bytes, active: Sequence[int]) -> list[Answer]:
        """The answers of the ``active`` clients to the encoded broadcast ``wire``, in the
        order of ``active``."""
        replies = self._ask("answer", wire, list(active))
        by_client = {a[0]: a for answers in replies for a in answers}
        return [by_client[m] for m in active]

    def outcomes(self) -> dict[int, ClientOutcome]:
        """What every client observed, by client."""
        return {m: o for replies in self._ask("outcomes") for m, o in replies.items()}

    def close(self) -> None:
        """Stop the workers: ask, wait a little, then kill what is left."""
        for conn in self._conns:
            with contextlib.suppress(OSError):  # a worker already gone
                conn.send(None)
        for process in self._processes:
            process.join(5.0)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self._conns:
            conn.close()
        self._conns, self._processes = [], []
