"""Envelope admission: whether an opened record is for this party (one home for "is this for
me?").

A party first opens a record (:func:`~fedxab.security.agents.open_record`: its size, its
decoding and, in a signing run, its signature); :func:`admit` then asks of the envelope, in this
order, the questions every receiver asks, and the first that fails refuses the record under its
reason (the label counted in ``fedxab_messages_rejected_total``):

- ``wrong_run``: another run's record (the run id of :mod:`fedxab.run.identity`);
- ``wrong_kind``: a kind this topic does not carry to this party;
- ``unknown_sender``: not from the sender expected (the server, or a client of the run);
- ``wrong_key``: the record's key (the client id the broker partitions by) is not its sender's;
- ``replay``: of another session than this execution's (:mod:`fedxab.agents.lobby`), unless its
  kind is sent before a session is known (a client's join and heartbeats).

The payload is decoded only after admission, by the party that knows its kind; the decoded
message's own phase must then be its envelope's (:func:`check_phase`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedxab.broker.codec import SERVER, Envelope
from fedxab.errors import ProtocolError

if TYPE_CHECKING:
    from fedxab.security.signing import Opened

__all__ = ["CLIENT", "Refusal", "admit", "check_phase"]

CLIENT = "client"
"""``sender`` of :func:`admit` for a record any client of the run may send."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a record is not admitted: the ``reason`` counted, and a ``text`` for the log."""

    reason: str
    text: str


def admit(
    opened: Opened,
    *,
    run_id: str,
    kinds: Collection[str],
    sender: str = CLIENT,
    n_clients: int | None = None,
    key: str | None = None,
    session: str | None = None,
    sessionless: Collection[str] = (),
) -> Envelope | Refusal:
    """The envelope of ``opened`` if the record is for this party, else the :class:`Refusal`
    of the first check it fails (module docstring).

    ``run_id``: this run's id; ``kinds``: the kinds
    the topic carries to this party; ``sender``: :data:`~fedxab.broker.codec.SERVER` (only the
    server's records) or :data:`CLIENT` (a client's, with an id below ``n_clients`` if given);
    ``key``: the record's key, checked against the client sender when both are there;
    ``session``: this execution's (None: not checked), which every kind but those in
    ``sessionless`` must carry (in a signing run ``opened.session`` is the signature's)."""
    env = opened.envelope
    if env.run_id != run_id:
        return Refusal("wrong_run", f"for run {env.run_id!r}, this is {run_id!r}")
    if env.kind not in kinds:
        return Refusal("wrong_kind", f"kind {env.kind!r} from {env.sender!r}")
    if sender == SERVER:
        if env.sender != SERVER:
            return Refusal("unknown_sender", f"{env.kind!r} from {env.sender!r}, not the server")
    else:
        m = env.client_id
        if m is None or (n_clients is not None and not 0 <= m < n_clients):
            return Refusal("unknown_sender", f"unknown sender {env.sender!r}")
        if key is not None and key != str(m):
            return Refusal("wrong_key", f"key {key!r} does not match {env.sender!r}")
    if session is not None and opened.session != session and env.kind not in sessionless:
        return Refusal("replay", f"{env.sender}'s {env.kind} of session {opened.session!r}")
    return env


def check_phase(message: Any, phase: int) -> None:
    """A decoded payload names the phase of its envelope (``phase``); ProtocolError if not (a
    report or broadcast relabelled into another phase)."""
    own = getattr(message, "phase", None)
    if own != phase:
        raise ProtocolError(f"payload phase {own} != envelope phase {phase}")
