"""The lobby: a client learns its execution's session there, or that its protocol is not the
server's.

A run's topics are named by its run id, a hash of the protocol (:mod:`fedxab.run.identity`), so
a client with another budget, seed or algorithm parameter than its server would wait on topics
nobody publishes to. The lobby topic of a namespace (``{namespace}.lobby``, one job per
namespace at a time) prevents that silent hang:

- a client agent publishes a ``hello`` (its run id, its protocol, the clients it hosts and a
  random nonce) every :data:`HELLO_INTERVAL_S` until the server welcomes it;
- a server agent reads the hellos; one of its own run gets a ``welcome`` carrying the hello's
  nonce and the **session** of this execution (128 random bits the server draws when it first
  starts and keeps in its checkpoint); one published since it started whose run id is none of
  its job's runs gets a ``refuse`` naming every differing field (logged as an error on the
  server), and the client agent stops with :class:`~fedxab.run.identity.ProtocolMismatchError`
  naming the same fields.

The session binds every record to one execution: the run id is the same for every execution of
a job (config and seed), the session is not. A client agent takes the session of the welcome
that answers its own nonce (fresh at each start, so a welcome of an earlier execution answers
none of its hellos), takes only broadcasts of that session, and writes it into every record it
sends; the server refuses a client's record of another session (:mod:`fedxab.agents.client`,
:mod:`fedxab.agents.server`). A restarted client agent learns the session again from the
server (a server process serving a later run of the job welcomes the earlier runs' hellos too,
as a restarted client process replays those runs first); a restarted server keeps it
(checkpoint). A client agent cannot join a run whose server has ended: nothing else can tell it
which session is this execution's. (The server of a run stopped by a client's failure therefore
stays until every client agent has taken its abort: :mod:`fedxab.run.failures`.)

With signing on, hellos, welcomes and refusals are signed like every other message (a hello with
the first hosted client, a welcome or refusal by the server about the client it answers), so a
forged welcome or refusal cannot misdirect or stop a client. (In an unsigned run anyone can
forge one: there the session protects against replays of earlier executions, not against a
party that writes its own records.)
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

from fedxab.agents.waits import wait_set
from fedxab.broker.base import Broker, Record
from fedxab.broker.codec import SERVER, Envelope, client_sender, packb
from fedxab.errors import ProtocolError
from fedxab.run.envelope import Refusal, admit
from fedxab.run.identity import ProtocolMismatchError, protocol_differences, run_id_of
from fedxab.security.agents import open_record
from fedxab.security.signing import Opened, SignatureError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from fedxab.security.agents import Signer

__all__ = ["HELLO_INTERVAL_S", "announce_and_watch", "new_session", "refuse_strangers"]

log = logging.getLogger(__name__)

_REPORTED_NONCES = 10_000
"""Hellos whose mismatch the server remembers having logged (a hello repeats every
:data:`HELLO_INTERVAL_S`: each is logged once, not every time)."""

HELLO_INTERVAL_S = 2.0
"""Seconds between a waiting client agent's hellos (a server started later still sees one)."""


def new_session() -> str:
    """A fresh session: 128 random bits, as 32 hex digits (no earlier execution has it)."""
    return secrets.token_hex(16)


def _envelope(run_id: str, kind: str, sender: str, body: Any) -> bytes:
    return Envelope(
        run_id=run_id,
        kind=kind,
        phase=0,
        sender=sender,
        msg_id=kind,
        payload=packb(body),
        sent_at=time.time(),
    ).encode()


def _mismatch_text(who: str, clients: list[int], differences: list[str]) -> str:
    shown = ", ".join(str(m) for m in clients[:10]) + (", ..." if len(clients) > 10 else "")
    return (
        f"{who} (clients {shown}) does not share the server's run protocol; "
        f"{'; '.join(differences)}. Start every party with the same [run] budget and seed, "
        "[algorithm], [federation] clients and [objective] direction (the objective "
        "function, output and agent settings may differ; a client of an elastic run takes a "
        "smaller budget of its own with [agents] client_budget)"
    )


async def announce_and_watch(
    broker: Broker,
    topic: str,
    run_id: str,
    protocol: Mapping[str, Any],
    clients: list[int],
    signer: Signer | None,
    matched: asyncio.Event,
    welcomed: Callable[[Opened], None],
    refused: Callable[[SignatureError], None] = lambda exc: None,
) -> None:
    """A client agent's side: say hello until the server's welcome answers it; call
    ``welcomed`` with the opened welcome (whose envelope's session is the execution's: the
    callback sets ``matched``); raise :class:`ProtocolMismatchError` if the server refuses the
    protocol. ``refused``: told of each lobby record that failed a signature check."""
    nonce = secrets.token_hex(8)
    hello = _envelope(
        run_id,
        "hello",
        client_sender(clients[0]),
        {"protocol": dict(protocol), "clients": clients, "nonce": nonce},
    )
    if signer is not None:
        hello = signer.seal(hello, clients[0], "")

    async def say_hello() -> None:
        while not matched.is_set():
            await broker.publish(topic, str(clients[0]), hello)
            await wait_set(matched, HELLO_INTERVAL_S)

    sender = asyncio.create_task(say_hello())
    sub = broker.subscribe(topic, None)
    reader = asyncio.ensure_future(
        _answer(sub, run_id, nonce, signer, broker.max_message_bytes, welcomed, refused)
    )
    waiter = asyncio.ensure_future(matched.wait())
    try:
        await asyncio.wait({reader, waiter, sender}, return_when=asyncio.FIRST_COMPLETED)
        if reader.done():
            differences = reader.result()
            raise ProtocolMismatchError(
                _mismatch_text(f"run {run_id}", clients, differences)
                + " (the server refused this client's hello)"
            )
        if sender.done():
            sender.result()  # a publishing error
    finally:
        for task in (sender, reader, waiter):
            task.cancel()
        await asyncio.gather(sender, reader, waiter, return_exceptions=True)
        await sub.close()


async def _answer(
    sub: Any,
    run_id: str,
    nonce: str,
    signer: Signer | None,
    max_bytes: int,
    welcomed: Callable[[Opened], None],
    refused: Callable[[SignatureError], None],
) -> list[str]:
    """Read the lobby: hand the server's welcome of run ``run_id``'s hello ``nonce`` to
    ``welcomed`` (and keep reading); return the differences named by a refusal of it."""
    async for record in sub:
        try:
            opened = open_record(record.value, signer, max_bytes)
        except SignatureError as exc:
            refused(exc)
            continue
        except ProtocolError:
            continue
        if _is_welcome(opened, run_id, nonce):
            welcomed(opened)
            continue
        differences = _differences_in(record, run_id, nonce, signer, max_bytes)
        if differences is not None:
            return differences
    raise ProtocolError("the lobby subscription ended")


def _is_welcome(opened: Opened, run_id: str, nonce: str) -> bool:
    """Whether ``opened`` is the server's welcome of run ``run_id``'s hello ``nonce``, with a
    session."""
    env = opened.envelope
    if not env.session:
        return False
    # (signed: the signature's session must be the one the welcome names)
    admitted = admit(opened, run_id=run_id, kinds=("welcome",), sender=SERVER, session=env.session)
    if isinstance(admitted, Refusal):
        return False
    try:
        body = env.body()
    except ProtocolError:
        return False
    return isinstance(body, dict) and isinstance(body.get("nonce"), str) and body["nonce"] == nonce


def _differences_in(
    record: Record, run_id: str, nonce: str, signer: Signer | None, max_bytes: int
) -> list[str] | None:
    """The differences named by the server's refusal of run ``run_id``'s hello ``nonce`` in
    ``record``; None for any other record (other parties' lobby traffic, a refusal for another
    run, or not a valid refusal)."""
    try:
        opened = open_record(record.value, signer, max_bytes)
        env = admit(opened, run_id=run_id, kinds=("refuse",), sender=SERVER)
        if isinstance(env, Refusal):
            return None
        body = env.body()
    except ProtocolError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("nonce"), str):
        return None
    differences = body.get("differences")
    if body["nonce"] != nonce or not isinstance(differences, list):
        return None
    return differences if all(isinstance(d, str) for d in differences) else None


async def refuse_strangers(
    broker: Broker,
    topic: str,
    protocol: Mapping[str, Any],
    known_runs: Collection[str],
    signer: Signer | None,
    *,
    run_id: str = "",
    sessions: Mapping[str, str] | None = None,
    refused: Callable[[SignatureError], None] = lambda exc: None,
) -> None:
    """A server agent's side, until cancelled: every hello of a run whose session ``sessions``
    holds (by run id; read at each hello, so a session added later counts) gets a welcome with
    that session, once per nonce: a hello of run ``run_id`` (the server's current run) even if
    published before this server started, so a client that said hello first need not wait for
    its next one; a hello of another of the job's runs (a client agent replaying an earlier
    run of the job, restarted while the server serves a later one) if published since. Every
    hello published since it started whose run id is none of ``known_runs`` is logged as an
    error and refused, naming each field where it differs from ``protocol``. ``refused``: told
    of each hello published since it started that failed a signature check."""
    sessions = {} if sessions is None else sessions
    sub = broker.subscribe(topic, None)
    try:
        start = await sub.end_offsets()
        reported: set[str] = set()
        welcomed: set[str] = set()
        async for record in sub:
            max_bytes = broker.max_message_bytes
            live = record.offset >= start.get(record.partition, 0)
            try:
                runs = sessions if live else {run_id: sessions.get(run_id, "")}
                welcome = _welcome_of(record, runs, signer, welcomed, max_bytes)
            except SignatureError as exc:
                if live:
                    refused(exc)
                welcome = None
            if welcome is not None:
                await broker.publish(topic, record.key, welcome)
            if not live:
                continue
            refusal = _refusal_of(record, protocol, known_runs, signer, reported, max_bytes)
            if refusal is not None:
                await broker.publish(topic, record.key, refusal)
    finally:
        await sub.close()


def _welcome_of(
    record: Record,
    sessions: Mapping[str, str],
    signer: Signer | None,
    welcomed: set[str],
    max_bytes: int,
) -> bytes | None:
    """The welcome of the hello in ``record`` (its nonce and its run's session in
    ``sessions``), or None (not a hello of a run ``sessions`` has a session for, or one whose
    nonce was welcomed already: ``welcomed``, at most :data:`_REPORTED_NONCES` of them). A
    record that fails a signature check raises its :class:`SignatureError`."""
    if not any(sessions.values()):
        return None
    try:
        env = open_record(record.value, signer, max_bytes).envelope
    except SignatureError:
        raise
    except ProtocolError:
        return None
    try:
        session = sessions.get(env.run_id, "") if env.kind == "hello" else ""
        if not session:
            return None
        run_id = env.run_id
        body = env.body()
        nonce, clients = body["nonce"], body["clients"]
        if not (isinstance(nonce, str) and isinstance(clients, list) and clients):
            return None
        first = clients[0]
        if type(first) is not int or env.client_id != first:
            return None
    except Exception:  # any defect of an untrusted record: no welcome (the refusal logs it)
        return None
    if nonce in welcomed:
        return None
    if len(welcomed) >= _REPORTED_NONCES:
        welcomed.clear()
    welcomed.add(nonce)
    welcome = Envelope(
        run_id=run_id,
        kind="welcome",
        phase=0,
        sender=SERVER,
        msg_id="welcome",
        payload=packb({"nonce": nonce}),
        sent_at=time.time(),
        session=session,
    ).encode()
    if signer is not None:
        welcome = signer.seal_about(welcome, first, session)
    return welcome


def _refusal_of(
    record: Record,
    protocol: Mapping[str, Any],
    known_runs: Collection[str],
    signer: Signer | None,
    reported: set[str],
    max_bytes: int,
) -> bytes | None:
    """The refusal of the hello in ``record``, or None (not a hello, or one of a known run).
    Each hello's mismatch is logged once (``reported`` holds the nonces logged, at most
    :data:`_REPORTED_NONCES` of them)."""
    try:
        env = open_record(record.value, signer, max_bytes).envelope
        if env.kind != "hello" or env.run_id in known_runs:
            return None
        body = env.body()
        theirs, clients, nonce = body["protocol"], body["clients"], body["nonce"]
        if not (
            isinstance(theirs, dict)
            and isinstance(nonce, str)
            and isinstance(clients, list)
            and clients
            and all(type(m) is int for m in clients)
            and env.client_id == clients[0]
        ):
            raise ProtocolError("a hello holds a protocol map, client ids and a nonce")
        if run_id_of(theirs) != env.run_id:  # a refusal would reach that run's clients
            raise ProtocolError(f"run id {env.run_id!r} is not the one of the hello's protocol")
        differences = protocol_differences(protocol, theirs) or [
            f"run id: expected one of {sorted(known_runs)}, got {env.run_id!r}"
        ]
    except Exception as exc:  # any defect of an untrusted hello: ignore it, keep serving
        log.warning("lobby: ignored a record that is not a valid hello: %s", exc)
        return None
    if nonce not in reported:
        if len(reported) >= _REPORTED_NONCES:
            reported.clear()  # a mismatch logged again is better than a set that never ends
        reported.add(nonce)
        log.error(_mismatch_text(f"a client agent of run {env.run_id}", clients, differences))
    refusal = _envelope(env.run_id, "refuse", SERVER, {"nonce": nonce, "differences": differences})
    if signer is not None:
        refusal = signer.seal_about(refusal, clients[0], "")
    return refusal
