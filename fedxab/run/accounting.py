"""What a federated run counts and records, the same for every runner: the communication of
each phase, who withdrew, the evaluations each client owes, and the run's
:class:`~fedxab.results.RunRecord` built from the regret sums (the regrets of [FX] and [PF]).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab import regret as _regret
from fedxab.errors import FedxabError
from fedxab.results import RunRecord

if TYPE_CHECKING:
    from fedxab.objectives.families import ClientFamily
    from fedxab.run.evaluation import RegretSums
    from fedxab.run.outcome import ClientOutcome

__all__ = [
    "FederationError",
    "PhaseCommunication",
    "check_budgets_used",
    "communication_block",
    "expected_use",
    "federated_record",
    "own_recommendation",
    "phase_communication",
    "regret_coverage",
    "stopped_phases",
    "withdrawn_clients",
]

log = logging.getLogger(__name__)


class FederationError(FedxabError, RuntimeError):
    """A federated algorithm broke the runner's contract: a client did not use exactly its
    budget, the phase barrier was not met after every client reported, or the run does not end."""


@dataclasses.dataclass(frozen=True)
class PhaseCommunication:
    """One phase (one communication round): what travelled, and what the clients evaluated."""

    phase: int
    depth: int | None
    """Depth of the phase's nodes, where the broadcast exposes it (``depth``), else None."""
    messages_up: int
    messages_down: int
    bytes_up: int
    bytes_down: int
    reports_accepted: int
    """Reports the server accepted (``receive`` returned True; duplicates are not)."""
    evaluations: int
    """Evaluations made by all clients in this phase."""
    asked: int | None = None
    """Clients the server asked in this phase (all those in the run, unless ``[federation]
    participation`` < 1); None where this view does not know (a client agent's)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def phase_communication(
    broadcast: Any,
    broadcast_bytes: int,
    messages_down: int,
    messages_up: int,
    bytes_up: int,
    accepted: int,
    evaluations: int,
    asked: int | None = None,
) -> PhaseCommunication:
    """One phase's counts: ``broadcast`` went to ``messages_down`` clients (``broadcast_bytes``
    each), of whom ``asked`` were asked to report, and ``messages_up`` reports of ``bytes_up``
    bytes in all came back."""
    depth = getattr(broadcast, "depth", None)
    return PhaseCommunication(
        phase=int(broadcast.phase),
        depth=None if depth is None else int(depth),
        messages_up=messages_up,
        messages_down=messages_down,
        bytes_up=bytes_up,
        bytes_down=broadcast_bytes * messages_down,
        reports_accepted=accepted,
        evaluations=evaluations,
        asked=asked,
    )


def communication_block(n_clients: int, phases: list[PhaseCommunication]) -> dict[str, Any]:
    """A run's ``communication`` block: totals and the per-phase list."""
    return {
        "clients": n_clients,
        "rounds": len(phases),
        "messages_up": sum(p.messages_up for p in phases),
        "messages_down": sum(p.messages_down for p in phases),
        "bytes_up": sum(p.bytes_up for p in phases),
        "bytes_down": sum(p.bytes_down for p in phases),
        "per_phase": [p.to_dict() for p in phases],
    }


def withdrawn_clients(server: Any) -> dict[int, Any]:
    """The clients that withdrew from the run (client -> its Withdrawal), as the server state
    machine records them; empty for algorithms whose clients never withdraw."""
    return getattr(server, "withdrawn", {})


def own_recommendation(client: Any) -> np.ndarray | None:
    """A client's own final answer, where the algorithm gives each client one (local and
    personalized algorithms: ``client.recommend()``), else None (the server's answer is the
    client's)."""
    recommend = getattr(client, "recommend", None)
    return None if recommend is None else recommend()


def stopped_phases(server: Any) -> dict[int, int]:
    """The clients whose releases stopped, with the phase they stopped at: withdrawn clients
    (local DP) and clients the server left out of its releases (central DP, ``refused``)."""
    stopped = {m: w.phase for m, w in withdrawn_clients(server).items()}
    return stopped | dict(getattr(server, "refused", {}))


def expected_use(n_clients: int, budget: int, withdrawn: dict[int, Any]) -> np.ndarray:
    """Evaluations each client must have made at the end: its budget T, or for a client that
    withdrew the ``used`` count its withdrawal declared."""
    expected = np.full(n_clients, budget, dtype=np.int64)
    for m, withdrawal in withdrawn.items():
        expected[m] = withdrawal.used
    return expected


def check_budgets_used(used: np.ndarray, expected: np.ndarray) -> None:
    """Raise :class:`FederationError` unless every client made exactly ``expected`` evaluations
    (its budget T, see :func:`expected_use`)."""
    short = np.nonzero(used != expected)[0]
    if short.size:
        detail = ", ".join(f"client {m}: {int(used[m])} of {int(expected[m])}" for m in short[:5])
        raise FederationError(
            f"{short.size} client(s) did not use exactly their budget of evaluations "
            f"({detail}{', ...' if short.size > 5 else ''}): algorithm bug"
        )


def federated_record(
    run_id: str,
    seed: int,
    family: ClientFamily | None,
    sums: RegretSums,
    recommendation: np.ndarray,
    wall: float,
    communication: dict[str, Any],
    privacy: dict[str, Any] | None = None,
    expected: np.ndarray | None = None,
    clients: tuple[ClientOutcome, ...] | None = None,
    withheld: dict[str, Any] | None = None,
) -> RunRecord:
    """The :class:`RunRecord` of a federated run from its flushed regret sums.

    Besides the cumulative curves it carries the simple-regret curves DP-FTS-DE plots
    (:meth:`RegretSums.simple_curves`, on the same rounds): ``global_simple_regret`` and
    ``local_simple_regret``, the mean over clients of each client's best noise-free regret so far.
    ``expected`` (per client, :func:`expected_use`): the pulls the sums should hold; where they
    hold fewer, the record says so in ``regret_coverage``. ``family`` is None where the
    objectives are the clients' own (no regret); ``clients``: what each client observed;
    ``withheld``: the fields this party does not have and why
    (:func:`~fedxab.run.outcome.withheld_block`).
    """
    rounds = _regret.round_grid(sums.budget)
    glob = None if family is None else family.global_objective
    cum, local = sums.curves(rounds, expected)
    global_simple, local_simple = sums.simple_curves(rounds)
    simple = None
    if glob is not None and glob.optimum_value is not None:
        value = float(glob(recommendation[None])[0])
        simple = _regret.simple_regret(float(glob.optimum_value), value)
    log.debug(
        "seed %d: %d clients x %d evaluations, %d phases in %.3f s",
        seed,
        sums.n_clients,
        sums.budget,
        communication["rounds"],
        wall,
    )
    return RunRecord(
        run_id=run_id,
        seed=seed,
        rounds=rounds,
        cumulative_regret=cum,
        recommendation=recommendation,
        simple_regret=simple,
        evaluations=int(sums.used.sum()),
        wall_time_s=wall,
        local_cumulative_regret=local,
        communication=communication,
        privacy=privacy,
        global_simple_regret=global_simple,
        local_simple_regret=local_simple,
        regret_coverage=None if expected is None else regret_coverage(sums, expected),
        clients=clients,
        withheld=withheld,
    )


def regret_coverage(sums: RegretSums, expected: np.ndarray) -> dict[str, Any] | None:
    """The ``regret_coverage`` block of a run whose sums miss pulls of ``expected``, else None:
    the pulls expected and received, the clients short of theirs, and the fewest clients a
    round's mean counts (the curves average over the clients that reported each round)."""
    short = np.flatnonzero(sums.received < expected)
    if not short.size:
        return None
    return {
        "pulls_expected": int(expected.sum()),
        "pulls_received": int(np.minimum(sums.received, expected).sum()),
        "clients": [int(m) for m in short],
        "fewest_clients_per_round": int(sums.reporting(expected).min()),
    }
