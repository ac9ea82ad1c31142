"""Elastic membership (``[federation] membership = "elastic"``): a run is a population, not a
fixed roster.

The M client ids ``0..M-1`` of ``[federation] clients`` are the ids a client may take; which of
them are *in the run* changes from phase to phase:

- a client **joins** with its ``join`` control message (a client agent sends one when it
  starts, and again when it restarts: a **rejoin**);
- it **leaves** with its ``leave`` control message, or by **silence**: no control message (a
  heartbeat every ``[agents] heartbeat_s``) for ``[agents] liveness_s`` seconds (default 3
  heartbeats), e.g. a process killed with SIGKILL;
- the clients in the run when a phase opens are its **members** (:class:`Roster`); the phase
  asks them (or, with ``[federation] participation`` q < 1, the members the seeded sample
  picks: :mod:`fedxab.run.participation`); the broadcast names the clients asked
  (:func:`asked_to_wire`), so a client never guesses;
- the **barrier** counts the clients asked that are still in the run: a member that leaves or
  falls silent during the phase is no longer waited for (a report it sent before is kept);
- the phase aggregates the reports received (**reported**), as a quorum does: the record of
  every phase (:class:`PhaseMembers`: members, asked, reported) states the coverage;
- a phase opens once ``[agents] min_clients`` (default 1) clients are in the run.

A client that joins at phase p reads the run's broadcasts from the first one (as a restarted
client agent does): it skips (pulls nothing, releases nothing) every phase it was not asked in,
whose pulls leave its schedule as a non-sampled client's do, and answers the current broadcast
if it is asked in it, else the next one. So it gets the current broadcast and its own remaining
budget: ``T`` less the pulls the run's schedule spent before it joined.

**Own budgets.** A client agent's ``[agents] client_budget`` B (at most ``[run] budget``, which
stays the run's for every party: it is in the run id) caps each client it hosts at B
evaluations (:attr:`~fedxab.algorithms.sampling.NodeSamplingClient.limit`): a client answers the
phases B covers and, at the first it does not, pulls and releases nothing and answers a
:class:`~fedxab.algorithms.protocol.Withdrawal` carrying its pulls (the barrier takes it, and the
server expects of it the pulls it made), then sends its ``leave`` after its telemetry
(:meth:`ClientParty.telemetry_records <fedxab.run.client_party.ClientParty.telemetry_records>`).
The phase's record names the withdrawal with those pulls (``withdrew``), so the replay
(:mod:`fedxab.run.replay`), whose config has no client's own budget, withdraws it there too.

What a changing population means for each algorithm (refusals in :data:`~fedxab.algorithms.
registry.NO_PARTICIPATION`, with a one-line :class:`~fedxab.errors.ConfigError`):

- **Fed-PNE** ([FX] Alg. 2): each phase averages the local means of the clients that reported,
  so the objective phase p eliminates on is the average of *those* clients' objectives;
  the run optimises the average over the clients present, phase by phase. The confidence width
  ``b = c sqrt(L / (n t_h))`` counts the pulls behind the reports received (n reports), so each
  phase's elimination keeps [FX]'s per-phase guarantee for the average objective of the clients
  that reported it; the regret bound of [FX] Thm. 4.2, stated for one fixed set of M clients,
  holds only where the population does not change (a fixed population is the special case).
  A phase nobody reported spends its pulls and asks the same nodes again.
- **DP-Fed-PNE** ([FX] Alg. 4): as Fed-PNE, and each client's ledger charges only the releases
  it made, in the phases it was asked and answered: its epsilon is that of its own releases;
  a client absent from a phase releases nothing and is charged nothing.
- every other federated algorithm refuses it (its server needs every client's report in every
  phase: PF-PNE/PF-HCT fit each client's personalized tree, the m-player algorithm splits one
  schedule, Fed1-UCB merges every client's statistics each round, FTS-DE/DP-FTS-DE run a BO
  iteration per agent per round, FedTPE merges every site's trials).

**A restarted server** (its checkpoint) opens the checkpointed phases with their recorded
members and the phase that was open with the members its broadcast named (kept in the
checkpoint with the close that opened it), so the clients that took that broadcast before the
restart are asked the same. A server that dies during phase 1, before any close, opens phase 1
again with the clients in the run at its restart: a client that took the first phase-1
broadcast and was not asked in it, but is in the second, counts the phase twice and its
reports are then refused (restart it too).

**The record.** The server writes every phase's :class:`PhaseMembers` into the run's
``communication`` block (``membership``). :func:`fedxab.run.replay.replay` runs the same config
and seed in process with those members, feeding the server exactly the reports recorded, and
gives the distributed run's results (:mod:`fedxab.run.replay` says which).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from fedxab.errors import ProtocolError
from fedxab.results import ResultsError

__all__ = [
    "Members",
    "PhaseMembers",
    "RecordedMembers",
    "Roster",
    "asked_from_wire",
    "asked_to_wire",
    "membership_of",
    "unwrap_broadcast",
    "wrap_broadcast",
]


class Members(Protocol):
    """Who is in the run when a phase opens: ``members(phase)``, client ids in increasing
    order (a :class:`Roster` now, or a :class:`RecordedMembers` on replay)."""

    def __call__(self, phase: int) -> list[int]: ...


@dataclasses.dataclass(frozen=True)
class PhaseMembers:
    """One phase of an elastic run: the clients in the run when it opened (``members``), those
    asked (``asked``, the members a participation sample picked, else all of them), and those
    whose report or withdrawal the server took (``reported``): what the phase aggregated; of
    those, the clients that withdrew at their own budget, with the pulls each had made
    (``withdrew``: what a replay needs, as its config has no client's own budget; written only
    if not empty)."""

    phase: int
    members: tuple[int, ...]
    asked: tuple[int, ...]
    reported: tuple[int, ...]
    withdrew: tuple[tuple[int, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "phase": self.phase,
            "members": list(self.members),
            "asked": list(self.asked),
            "reported": list(self.reported),
        }
        if self.withdrew:
            out["withdrew"] = [list(w) for w in self.withdrew]
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "membership") -> PhaseMembers:
        """A phase's record as read back (results file, checkpoint); malformed raises
        :class:`~fedxab.errors.ResultsError` naming the field."""
        try:
            phase = d["phase"]
            lists = {k: tuple(d[k]) for k in ("members", "asked", "reported")}
        except (KeyError, TypeError) as exc:
            raise ResultsError(
                f"{where}: each phase needs 'phase', 'members', 'asked' and 'reported'"
            ) from exc
        for key, ids in lists.items():
            if not all(type(m) is int and m >= 0 for m in ids) or list(ids) != sorted(set(ids)):
                raise ResultsError(f"{where}: '{key}' must list client ids in increasing order")
        if type(phase) is not int or phase < 1:
            raise ResultsError(f"{where}: 'phase' must be an integer >= 1, got {phase!r}")
        try:
            withdrew = tuple((m, used) for m, used in d.get("withdrew", []))
        except (TypeError, ValueError) as exc:
            raise ResultsError(f"{where}: 'withdrew' must list [client, pulls] pairs") from exc
        if not all(type(m) is int and type(u) is int and m >= 0 <= u for m, u in withdrew):
            raise ResultsError(f"{where}: 'withdrew' must list [client, pulls] pairs")
        return cls(phase, lists["members"], lists["asked"], lists["reported"], withdrew)


def membership_of(communication: Mapping[str, Any] | None) -> list[PhaseMembers]:
    """The per-phase membership recorded in a run's ``communication`` block (empty for a run
    of fixed membership)."""
    if communication is None:
        return []
    return [PhaseMembers.from_dict(p) for p in communication.get("membership", [])]


class Roster:
    """The server's live view of who is in an elastic run (sans-I/O: the caller gives the
    time). A client is in the run from its ``join`` until its ``leave`` or until it has been
    silent ``liveness_s`` seconds; a later ``join`` brings it back (a rejoin). Every control
    message of a client counts as a sign of life (:meth:`seen`)."""

    def __init__(self, liveness_s: float) -> None:
        self.liveness_s = liveness_s
        self.joined: set[int] = set()
        """Clients whose last join is newer than their last leave."""
        self.last_seen: dict[int, float] = {}
        self.joins: list[int] = []
        """Joins (or rejoins) since :meth:`take_events`, in order (for the population view)."""
        self.leaves: list[int] = []
        """Clean leaves since :meth:`take_events`, in order."""

    def join(self, m: int, now: float) -> bool:
        """Client ``m`` joined (or rejoined); whether it was not in the run (alive) before."""
        new = not self.alive(m, now)
        self.joined.add(m)
        self.last_seen[m] = now
        if new:
            self.joins.append(m)
        return new

    def leave(self, m: int, now: float) -> bool:
        """Client ``m`` left cleanly; whether it was in the run."""
        was = self.alive(m, now)
        self.joined.discard(m)
        self.last_seen[m] = now
        if was:
            self.leaves.append(m)
        return was

    def seen(self, m: int, now: float) -> None:
        """A valid control message of client ``m`` (a heartbeat, telemetry, ...)."""
        self.last_seen[m] = max(now, self.last_seen.get(m, now))

    def alive(self, m: int, now: float) -> bool:
        """Whether client ``m`` is in the run at time ``now``."""
        return m in self.joined and now - self.last_seen.get(m, -np.inf) <= self.liveness_s

    def members(self, now: float) -> list[int]:
        """The clients in the run at ``now``, in increasing order."""
        return sorted(m for m in self.joined if self.alive(m, now))

    def gone(self, clients: Iterable[int], now: float) -> set[int]:
        """Of ``clients``, those no longer in the run at ``now`` (left or silent)."""
        return {m for m in clients if not self.alive(m, now)}

    def take_events(self) -> tuple[list[int], list[int]]:
        """The joins and clean leaves since the last call."""
        events = self.joins, self.leaves
        self.joins, self.leaves = [], []
        return events


class RecordedMembers:
    """The members of each phase as a record gives them (:class:`PhaseMembers`): a replay,
    or a restarted server replaying its checkpointed phases; ``then`` for the phases after
    the record (a live :class:`Roster`'s view), else a phase past the record raises."""

    def __init__(self, record: Sequence[PhaseMembers], then: Members | None = None) -> None:
        self.by_phase = {p.phase: p for p in record}
        self.then = then

    def __call__(self, phase: int) -> list[int]:
        recorded = self.by_phase.get(phase)
        if recorded is not None:
            return list(recorded.members)
        if self.then is None:
            raise ProtocolError(f"the membership record has no phase {phase}")
        return self.then(phase)


# ------------------------------------------------------------------------------- the wire
def asked_to_wire(asked: Collection[int], n_clients: int) -> bytes:
    """The clients asked in a phase as a bit mask over the ids ``0..M-1`` (M/8 bytes)."""
    mask = np.zeros(n_clients, dtype=bool)
    mask[list(asked)] = True
    return np.packbits(mask).tobytes()


def asked_from_wire(data: Any, n_clients: int) -> frozenset[int]:
    """The clients a broadcast's mask names; a malformed mask raises ProtocolError."""
    if not isinstance(data, bytes) or len(data) != -(-n_clients // 8):
        raise ProtocolError(f"field 'asked' must be a mask of {n_clients} bits")
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    if bits[n_clients:].any():
        raise ProtocolError(f"field 'asked' names a client id beyond {n_clients - 1}")
    return frozenset(int(m) for m in np.flatnonzero(bits[:n_clients]))


def wrap_broadcast(wire: Any, asked: Collection[int], n_clients: int) -> dict[str, Any]:
    """An elastic run's broadcast body: the algorithm's message and the clients asked."""
    return {"broadcast": wire, "asked": asked_to_wire(asked, n_clients)}


def unwrap_broadcast(body: Any, n_clients: int) -> tuple[Any, frozenset[int]]:
    """The algorithm's message and the clients asked, from an elastic broadcast's body."""
    if not isinstance(body, dict) or set(body) != {"broadcast", "asked"}:
        raise ProtocolError("an elastic run's broadcast holds 'broadcast' and 'asked'")
    return body["broadcast"], asked_from_wire(body["asked"], n_clients)
