"""How a run stops when a client's objective fails, on every transport.

In process, a client's :class:`~fedxab.errors.EvaluationError` (its objective returned NaN, an
infinity or something that is not a number) ends the run at once. On a broker the failing client
sends a ``failed`` control message with that error's line before it stops; the server stops the
run with the line naming the client (exit status 2 from the command line) and publishes an
``abort`` on the broadcast topic, so that every other client agent stops with the same line
instead of waiting for a phase that will never come. Both bodies are one map ``{"error": line}``
(:func:`failure_body`, :func:`failure_text`). A client agent that takes the abort, and the
failing client's agent for its other clients, send a ``stopped`` control message per client; the
server publishes the abort again every ``rebroadcast_s`` and keeps welcoming client agents in the
lobby until every client has failed or stopped (or ``telemetry_timeout_s`` pass without one more),
so a client agent started late, restarted, or whose copy of the abort was lost still learns the
execution's session and takes the abort.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedxab.errors import ProtocolError, one_line

__all__ = ["Aborted", "failure_body", "failure_text"]

MAX_ERROR_CHARS = 1000
"""Longest error line a ``failed`` or ``abort`` message carries (a longer one is cut)."""


@dataclass(frozen=True)
class Aborted:
    """The server's ``abort`` of the run at ``phase``: ``text`` says why (one line)."""

    phase: int
    text: str


def failure_body(text: str) -> dict[str, Any]:
    """The body of a ``failed`` or ``abort`` message: ``text`` as one bounded line."""
    return {"error": one_line(text, MAX_ERROR_CHARS)}


def failure_text(body: Any) -> str:
    """The error line of a ``failed`` or ``abort`` body; ProtocolError if it is not one."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        raise ProtocolError("a failed or abort message must be a map with a string 'error'")
    return one_line(body["error"], MAX_ERROR_CHARS)
