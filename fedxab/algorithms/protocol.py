"""The federated protocol contract (DESIGN.md, Contracts: Federated protocol; sans-I/O like h11).

A federated algorithm is a pair of pure state machines:

- server: ``start() -> Broadcast``; ``receive(client, report) -> bool`` (``False`` for a duplicate:
  idempotent per client and phase); ``close_phase() -> Broadcast | Finished`` once
  ``ready()`` says the phase barrier is met (or the caller decides a quorum is enough);
- client: ``answer(broadcast, evaluate) -> Report``, where ``evaluate(X)`` pulls the client's own
  objective at the rows of ``X`` (n, d) and returns the n noisy rewards.

Messages are frozen dataclasses with ``to_wire()`` (plain msgpack types plus numpy arrays) and
``from_wire()`` (validates every field and raises :class:`~fedxab.errors.ProtocolError` naming
it). They carry summary statistics only: a raw reward never leaves a client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from fedxab.errors import ProtocolError

Evaluate = Callable[[np.ndarray], np.ndarray]
"""``evaluate(X) -> rewards``: the client's noisy objective on a batch of points."""


# ----------------------------------------------------------------------------- wire checks
def wire_int(data: Mapping[str, Any], name: str, minimum: int = 0) -> int:
    value = _field(data, name)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ProtocolError(f"field {name!r} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def wire_bool(data: Mapping[str, Any], name: str) -> bool:
    value = _field(data, name)
    if not isinstance(value, bool):
        raise ProtocolError(f"field {name!r} must be a boolean, got {value!r}")
    return value


def wire_array(
    data: Mapping[str, Any], name: str, kind: str, ndim: int = 1, finite: bool = True
) -> np.ndarray:
    """A numpy array field of dtype kind ``"i"`` (integers) or ``"f"`` (floats)."""
    value = _field(data, name)
    if isinstance(value, list | tuple):
        try:
            value = np.asarray(value) if value else np.empty(0, dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"field {name!r} is not a numeric array: {exc}") from exc
    if not isinstance(value, np.ndarray):
        raise ProtocolError(f"field {name!r} must be an array, got {type(value).__name__}")
    if value.ndim != ndim:
        raise ProtocolError(
            f"field {name!r} must have {ndim} dimension(s), got shape {value.shape}"
        )
    if kind == "i":
        if value.dtype.kind not in "iu" and value.size:
            raise ProtocolError(f"field {name!r} must hold integers, got dtype {value.dtype}")
        value = value.astype(np.int64, copy=False)
    else:
        if value.dtype.kind not in "fiu" and value.size:
            raise ProtocolError(f"field {name!r} must hold numbers, got dtype {value.dtype}")
        value = value.astype(np.float64, copy=False)
        if finite and not np.all(np.isfinite(value)):
            raise ProtocolError(f"field {name!r} holds NaN or infinite values")
    value = value.copy()
    value.setflags(write=False)
    return value


def _field(data: Mapping[str, Any], name: str) -> Any:
    if not isinstance(data, Mapping):
        raise ProtocolError(f"message must be a map, got {type(data).__name__}")
    if name not in data:
        raise ProtocolError(f"missing field {name!r}")
    return data[name]


def check_kind(data: Mapping[str, Any], kind: str) -> None:
    got = _field(data, "kind")
    if got != kind:
        raise ProtocolError(f"field 'kind' must be {kind!r}, got {got!r}")


# ------------------------------------------------------------------------------ messages
@dataclass(frozen=True)
class Finished:
    """The server's last word: the run is over and this is its answer."""

    phase: int
    recommendation: np.ndarray
    reason: str = "budget"

    kind = "finished"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "recommendation": np.asarray(self.recommendation, dtype=np.float64),
            "reason": self.reason,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Finished:
        check_kind(data, cls.kind)
        reason = _field(data, "reason")
        if not isinstance(reason, str):
            raise ProtocolError(f"field 'reason' must be a string, got {reason!r}")
        return cls(
            phase=wire_int(data, "phase"),
            recommendation=wire_array(data, "recommendation", "f"),
            reason=reason,
        )


class FederatedServer(Protocol):
    """What the runners and agents need from a server state machine."""

    n_clients: int

    def start(self) -> Any: ...

    def receive(self, client: int, report: Any) -> bool: ...

    def ready(self) -> bool: ...

    def close_phase(self) -> Any: ...


class FederatedClient(Protocol):
    """What the runners and agents need from a client state machine."""

    client_id: int

    def answer(self, broadcast: Any, evaluate: Evaluate) -> Any: ...
