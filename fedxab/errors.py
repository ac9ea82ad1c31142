"""One exception hierarchy for fedxab.

Every error a user can trigger derives from :class:`FedxabError`, and its message names the field,
the value that was given and what is allowed, so that the fix is obvious from the message alone.
"""

from __future__ import annotations


class FedxabError(Exception):
    """Root of every error raised deliberately by fedxab."""


class ConfigError(FedxabError, ValueError):
    """A configuration value or a constructor argument is invalid.

    ``field`` is the dotted name of the offending setting (e.g. ``"algorithm.rho"``).
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        shown = field if field.isprintable() else ascii(field)  # (a key may hold a newline)
        super().__init__(f"{shown}: {message}")

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str]]:
        """Pickled as its field and message (an accountant's worker process raises it in the
        parent: :mod:`fedxab.privacy.accountants`)."""
        return type(self), (self.field, self.message)


class InvalidRewardError(FedxabError, ValueError):
    """A reward passed to an optimizer is NaN, infinite or otherwise unusable."""


class UnknownPointError(FedxabError, KeyError):
    """``tell`` was called for a point that the optimizer did not hand out with ``ask``."""

    def __str__(self) -> str:  # KeyError would otherwise quote the whole message
        return str(self.args[0]) if self.args else ""


class ObjectiveError(FedxabError, ValueError):
    """An objective was given or returned something of the wrong shape, type or value."""


class EvaluationError(ObjectiveError):
    """A client's objective failed while the run evaluated it (it returned a value that is not
    a finite real number): the run cannot go on. The message is one line naming the client and
    the point; on a broker the client tells the server, which stops the run with that line
    (:mod:`fedxab.agents.client`, :mod:`fedxab.agents.server`)."""

    def __init__(self, client: int, message: str) -> None:
        self.client = client
        self.message = one_line(message)
        super().__init__(self.message)

    def __reduce__(self) -> tuple[type[EvaluationError], tuple[int, str]]:
        """Pickled as its client and message (a worker process raises it in the parent)."""
        return type(self), (self.client, self.message)


def one_line(text: str, limit: int = 1000) -> str:
    """``text`` as one line of at most ``limit`` characters (whitespace runs, newlines
    included, become one space; a longer text is cut and ends with an ellipsis)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\N{HORIZONTAL ELLIPSIS}"


class StorageError(FedxabError, RuntimeError):
    """A file or directory fedxab keeps private cannot be written (read-only, disk full, no
    permission), or a directory it would write into is open to other users: one line naming
    the path (:mod:`fedxab.private_files`)."""


class ProtocolError(FedxabError, ValueError):
    """A message (broadcast, report, envelope) is malformed, from the wrong phase, or unexpected.

    A server or client that receives one rejects the message, counts it under :attr:`reason`,
    and keeps its state.
    """

    reason = "malformed"
    """The label a receiver counts the refusal under (``fedxab_messages_rejected_total``)."""


class RunConflictError(FedxabError, RuntimeError):
    """The run's topics already hold another start of the same run (a server agent that may
    not resume it refuses to start: :class:`~fedxab.agents.server.ServerAgent`)."""

    def __init__(self, run_id: str, published: int, topic: str) -> None:
        self.run_id, self.published, self.topic = run_id, published, topic
        super().__init__(
            f"run {run_id} already ran on this broker ({published} broadcast(s) on {topic}): "
            "start a new run under another [broker] namespace (--namespace NAME), or resume "
            "this one from its checkpoint"
        )
