"""The federated protocol contract: sans-I/O state machines, in the style of h11.

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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

import numpy as np

from fedxab.algorithms.base import check_reward
from fedxab.errors import InvalidRewardError, ProtocolError

Evaluate = Callable[[np.ndarray], np.ndarray]
"""``evaluate(X) -> rewards``: the client's noisy objective on a batch of points."""


# ----------------------------------------------------------------------------- wire checks
def wire_int(data: Mapping[str, Any], name: str, minimum: int = 0) -> int:
    value = _field(data, name)
    integer = type(value) is int or isinstance(value, np.integer)  # (a bool is neither)
    if not integer or value < minimum:
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
        if finite and not np.isfinite(value).all():
            raise ProtocolError(f"field {name!r} holds NaN or infinite values")
    value = value.copy()
    value.setflags(write=False)
    return value


def _field(data: Mapping[str, Any], name: str) -> Any:
    if type(data) is not dict and not isinstance(data, Mapping):  # (dict first: the hot path)
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


@dataclass(frozen=True)
class NodesBroadcast:
    """Server -> clients: pull each active node ``(depth, i)`` ``pulls_per_node`` times.

    ``nodes`` holds the indices i, increasing and >= 1. Subclasses set ``kind`` and may add
    checks in :meth:`validate`.
    """

    phase: int
    depth: int
    nodes: np.ndarray
    pulls_per_node: int

    kind: ClassVar[str] = "nodes.broadcast"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "depth": self.depth,
            "nodes": self.nodes,
            "pulls_per_node": self.pulls_per_node,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        check_kind(data, cls.kind)
        nodes = wire_array(data, "nodes", "i")
        if nodes.size == 0 or nodes.min() < 1 or np.any(np.diff(nodes) <= 0):
            raise ProtocolError("field 'nodes' must be a non-empty increasing list of indices >= 1")
        message = cls(
            phase=wire_int(data, "phase", 1),
            depth=wire_int(data, "depth"),
            nodes=nodes,
            pulls_per_node=wire_int(data, "pulls_per_node", 1),
        )
        message.validate()
        return message

    def validate(self) -> None:
        """Algorithm-specific consistency checks of a decoded broadcast (none by default)."""


@dataclass(frozen=True)
class MeansReport:
    """Client -> server: one local mean per active node (or arm), in the broadcast's order.

    ``complete=False`` (with no means) says the client's budget ended inside the phase, or
    acknowledges a broadcast that asks for no statistics. Subclasses only set ``kind``.
    """

    phase: int
    client: int
    complete: bool
    means: np.ndarray = field(default_factory=lambda: np.empty(0))

    kind: ClassVar[str] = "means.report"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "client": self.client,
            "complete": self.complete,
            "means": self.means,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        check_kind(data, cls.kind)
        complete = wire_bool(data, "complete")
        means = wire_array(data, "means", "f")
        if not complete and means.size:
            raise ProtocolError("field 'means' must be empty in an incomplete report")
        return cls(
            phase=wire_int(data, "phase", 1),
            client=wire_int(data, "client"),
            complete=complete,
            means=means,
        )


@dataclass(frozen=True)
class Withdrawal:
    """Client -> server: the client leaves the run at ``phase`` and sends nothing more.

    A client withdraws when it refuses the phase's release, e.g. because the release would take
    it over its privacy budget (:mod:`fedxab.privacy.gate`); fedxab's choice is that the
    algorithm then treats that client as dropped out. It made ``used`` evaluations in all and
    none in this phase; ``reason`` says why, for the operator.
    """

    phase: int
    client: int
    used: int
    reason: str

    kind: ClassVar[str] = "withdrawal"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "client": self.client,
            "used": self.used,
            "reason": self.reason,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Withdrawal:
        check_kind(data, cls.kind)
        reason = _field(data, "reason")
        if not isinstance(reason, str):
            raise ProtocolError(f"field 'reason' must be a string, got {reason!r}")
        return cls(
            phase=wire_int(data, "phase", 1),
            client=wire_int(data, "client"),
            used=wire_int(data, "used"),
            reason=reason,
        )


R = TypeVar("R")


class ReportInbox(Generic[R]):
    """A server's phase barrier: at most one report per client for the open phase.

    :meth:`admit` checks what every federated server checks (a phase is open, the client id is
    valid and is the report's claimed sender, the report is for the open phase) and says whether
    the report is new; a duplicate returns ``False`` and is never counted twice. Reports are read
    back in increasing client order, so aggregation does not depend on arrival order.

    A :class:`Withdrawal` (:meth:`withdraw`) removes its client from this phase's barrier and
    from every later one; a withdrawn client's later reports are refused.
    """

    def __init__(self, n_clients: int) -> None:
        self.n_clients = n_clients
        self.phase: int | None = None
        self._reports: dict[int, R] = {}
        self.withdrawn: dict[int, Withdrawal] = {}
        self.asked: frozenset[int] | None = None
        """The clients asked in the open phase (partial participation), None: every client."""

    def open(self, phase: int) -> None:
        self.phase = phase
        self._reports = {}
        self.asked = None

    def ask(self, clients: Iterable[int]) -> None:
        """Ask only ``clients`` in the open phase: the barrier waits for them alone and a
        report from any other client is refused."""
        self.asked = frozenset(clients)

    def close(self) -> None:
        self.phase = None

    def admit(self, client: int, report: Any) -> bool:
        if self.phase is None:
            raise ProtocolError("no phase is open")
        sender = getattr(report, "client", None)
        if not 0 <= client < self.n_clients or sender != client:
            raise ProtocolError(
                f"report from client {sender} received as client {client}; "
                f"expected an id in 0..{self.n_clients - 1}"
            )
        if report.phase != self.phase:
            raise ProtocolError(f"report for phase {report.phase}, current phase is {self.phase}")
        earlier = self.withdrawn.get(client)
        if earlier is not None:
            if report == earlier:
                return False  # a redelivered withdrawal
            raise ProtocolError(f"client {client} withdrew at phase {earlier.phase}")
        if self.asked is not None and client not in self.asked:
            raise ProtocolError(f"client {client} was not asked in phase {self.phase}")
        if isinstance(report, Withdrawal) and client in self._reports:
            raise ProtocolError(f"client {client} withdrew after reporting phase {self.phase}")
        return client not in self._reports

    def store(self, client: int, report: R) -> None:
        self._reports[client] = report

    def withdraw(self, client: int, withdrawal: Withdrawal) -> bool:
        """Take ``client`` out of the run; ``False`` for a redelivered withdrawal."""
        if not self.admit(client, withdrawal):
            return False
        self.withdrawn[client] = withdrawal
        return True

    @property
    def in_run(self) -> int:
        """Clients still in the run (not withdrawn)."""
        return self.n_clients - len(self.withdrawn)

    @property
    def expected(self) -> int:
        """The clients whose reports the barrier waits for: those still in the run, or of
        them the ones asked in the open phase."""
        if self.asked is None:
            return self.in_run
        return sum(m not in self.withdrawn for m in self.asked)

    def ready(self) -> bool:
        return len(self._reports) == self.expected

    def __len__(self) -> int:
        return len(self._reports)

    def received(self) -> list[R]:
        """The reports received so far, in increasing client order (possibly none)."""
        return [self._reports[m] for m in sorted(self._reports)]

    def in_order(self) -> list[R]:
        """The reports to aggregate, in increasing client order; at least one is needed."""
        if not self._reports:
            raise ProtocolError(f"phase {self.phase} has no report to aggregate")
        return self.received()


class InboxServer(Generic[R]):
    """Base of the federated servers: the :class:`FederatedServer` barrier methods over a
    :class:`ReportInbox` (``_inbox``, set by the subclass). :meth:`receive` admits a report,
    has :meth:`check_report` check a new one's content against the open phase, and stores it."""

    _inbox: ReportInbox[R]

    def receive(self, client: int, report: R) -> bool:
        """Record a client's report; ``False`` if it is a duplicate (same client and phase)."""
        if not self._inbox.admit(client, report):
            return False
        self.check_report(report)
        self._inbox.store(client, report)
        return True

    def check_report(self, report: R) -> None:
        """Raise :class:`ProtocolError` unless a new report's content fits the open phase."""

    def ready(self) -> bool:
        """The phase barrier: every client still in the run (and asked) has reported."""
        return self._inbox.ready()

    def ask(self, clients: Iterable[int]) -> None:
        """Ask only ``clients`` in the open phase (:meth:`ReportInbox.ask`)."""
        self._inbox.ask(clients)

    @property
    def reported(self) -> int:
        """Reports received for the open phase."""
        return len(self._inbox)


def check_means_report(report: MeansReport, truncated: bool, n_values: int) -> None:
    """A :class:`MeansReport` fits its phase: complete with ``n_values`` means exactly when the
    phase asks for statistics and fits the budget (``truncated`` says it does not)."""
    if report.complete:
        if truncated:
            raise ProtocolError(
                "a complete report for a phase that ends the horizon or asks for no statistics"
            )
        if report.means.shape != (n_values,):
            raise ProtocolError(
                f"field 'means' must hold {n_values} values, got {report.means.shape}"
            )
    elif not truncated:
        raise ProtocolError("an incomplete report for a phase that fits the budget")


class ReplyCache(Generic[R]):
    """A client's last answer, so that a redelivered broadcast is answered without pulling again."""

    def __init__(self) -> None:
        self.phase: int | None = None
        self.report: R | None = None

    def get(self, phase: int) -> R | None:
        """The report already sent for ``phase``, or ``None`` for a new phase.

        Phases are numbered 1, 2, 3, ... and every client answers each of them in turn. A
        broadcast older than the last one answered is stale, and one that skips a phase comes
        before a broadcast the client never got (a broker that lost records): both raise
        ProtocolError, and the client's state is unchanged.
        """
        if self.phase is not None and phase < self.phase:
            raise ProtocolError(
                f"stale broadcast for phase {phase}; phase {self.phase} was already answered"
            )
        following = 1 if self.phase is None else self.phase + 1
        if phase > following:
            raise ProtocolError(
                f"broadcast for phase {phase} before the broadcast of phase {following}: a "
                "broadcast is missing"
            )
        return self.report if phase == self.phase else None

    def put(self, phase: int, report: R) -> R:
        self.phase, self.report = phase, report
        return report

    def skip(self, phase: int) -> None:
        """``phase`` was not asked of this client: it answered nothing, and the next phase
        follows it."""
        self.get(phase)  # refuses a stale or out-of-order broadcast
        self.phase, self.report = phase, None


def evaluate_checked(evaluate: Evaluate, X: np.ndarray) -> np.ndarray:
    """``evaluate(X)`` as a float vector of one finite reward per row of ``X``.

    Raises :class:`~fedxab.errors.InvalidRewardError` naming the first bad point, before the
    caller changes any state.
    """
    if len(X) == 0:
        return np.empty(0)
    rewards = np.asarray(evaluate(X), dtype=float).reshape(-1)
    if rewards.shape != (len(X),):
        raise InvalidRewardError(
            f"evaluate() returned {rewards.shape[0]} rewards for {len(X)} points"
        )
    if not np.isfinite(rewards).all():
        bad = int(np.nonzero(~np.isfinite(rewards))[0][0])
        check_reward(rewards[bad], field=f"reward at {X[bad].tolist()}")
    return rewards


class WireMessage(Protocol):
    """A broadcast or report as the wire sees it: ``to_wire`` encodes, ``from_wire`` (a
    classmethod) decodes; each class also sets its ``kind``."""

    def to_wire(self) -> dict[str, Any]: ...

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self: ...


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
