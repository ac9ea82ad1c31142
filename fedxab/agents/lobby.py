"""The lobby: a client whose run protocol is not the server's is told so, on both sides.

A run's topics are named by its run id, a hash of the protocol (:mod:`fedxab.run.identity`), so
a client with another budget, seed or algorithm parameter than its server would wait on topics
nobody publishes to. The lobby topic of a namespace (``{namespace}.lobby``, one job per
namespace at a time) prevents that silent hang:

- a client agent publishes a ``hello`` (its run id, its protocol, the clients it hosts and a
  random nonce) every :data:`HELLO_INTERVAL_S` until the first broadcast of its run arrives;
- a server agent reads the hellos published since it started; one whose run id is none of its
  job's runs gets a ``refuse`` naming every differing field (logged as an error on the server)
  and the client agent stops with :class:`~fedxab.run.identity.ProtocolMismatchError` naming
  the same fields.

With signing on, hellos and refusals are signed like every other message (a hello with the first
hosted client, a refusal by the server about the client it answers), so a forged refusal cannot
stop a client.
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
from fedxab.run.identity import ProtocolMismatchError, protocol_differences, run_id_of
from fedxab.security.agents import open_record

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from fedxab.security.agents import Signer

__all__ = ["HELLO_INTERVAL_S", "announce_and_watch", "refuse_strangers"]

log = logging.getLogger(__name__)

_REPORTED_NONCES = 10_000
"""Hellos whose mismatch the server remembers having logged (a hello repeats every
:data:`HELLO_INTERVAL_S`: each is logged once, not every time)."""

HELLO_INTERVAL_S = 2.0
"""Seconds between a waiting client agent's hellos (a server started later still sees one)."""


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
        "function, output and agent settings may differ)"
    )


async def announce_and_watch(
    broker: Broker,
    topic: str,
    run_id: str,
    protocol: Mapping[str, Any],
    clients: list[int],
    signer: Signer | None,
    matched: asyncio.Event,
) -> None:
    """A client agent's side: say hello until ``matched`` is set (its run's first broadcast
    arrived); raise :class:`ProtocolMismatchError` if the server refuses the protocol."""
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
    reader = asyncio.ensure_future(_refusal(sub, run_id, nonce, signer, broker.max_message_bytes))
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


async def _refusal(
    sub: Any, run_id: str, nonce: str, signer: Signer | None, max_bytes: int
) -> list[str]:
    """The differences named by the server's refusal of run ``run_id``'s hello ``nonce``."""
    async for record in sub:
        differences = _differences_in(record, run_id, nonce, signer, max_bytes)
        if differences is not None:
            return differences
    raise ProtocolError("the lobby subscription ended")


def _differences_in(
    record: Record, run_id: str, nonce: str, signer: Signer | None, max_bytes: int
) -> list[str] | None:
    """The differences named by the server's refusal of run ``run_id``'s hello ``nonce`` in
    ``record``; None for any other record (other parties' lobby traffic, a refusal for another
    run, or not a valid refusal)."""
    try:
        env = open_record(record.value, signer, max_bytes).envelope
        if env.kind != "refuse" or env.sender != SERVER or env.run_id != run_id:
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
) -> None:
    """A server agent's side, until cancelled: every hello published since it started whose
    run id is none of ``known_runs`` is logged as an error and refused, naming each field where
    it differs from ``protocol`` (the server's current run)."""
    sub = broker.subscribe(topic, None)
    try:
        start = await sub.end_offsets()
        reported: set[str] = set()
        async for record in sub:
            if record.offset < start.get(record.partition, 0):
                continue
            refusal = _refusal_of(
                record, protocol, known_runs, signer, reported, broker.max_message_bytes
            )
            if refusal is not None:
                await broker.publish(topic, record.key, refusal)
    finally:
        await sub.close()


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
