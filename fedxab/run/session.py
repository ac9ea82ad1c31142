"""The sessions of one run, without I/O: what every runner drives, in process or over a broker.

A federated algorithm is a pair of sans-I/O state machines (:mod:`fedxab.algorithms.protocol`);
a *run* adds what the algorithm does not know about:

- :class:`ServerSession`: the server side of a run. It opens each phase (the state machine's
  broadcast), classifies every report once (:class:`Verdict`: accepted, duplicate, late or
  invalid with a reason; a rejected report changes no state), says when the phase barrier is met
  (every active client reported, or after a deadline a quorum), closes the phase (its
  :class:`ClosedPhase`: the accepted payloads and the counts, what a checkpoint keeps and a
  restart restores), gathers the simulation's regret telemetry and the clients' outcomes, and
  finishes with the run's :class:`~fedxab.results.RunRecord`;
- :class:`ClientSession`: the clients one party hosts: each answers a broadcast through its
  evaluator, and hands over the telemetry of its pulls and, at the end, its outcome.

The in-process runner (:class:`fedxab.agents.federation.Federation`), the server agent and the
client agent are drivers of these two classes: they only move bytes, keep time and observe. So a
run gives the same results on every transport by construction. :func:`fedxab.run.assembly.build_run`
builds both from a config.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab.algorithms.protocol import Finished
from fedxab.algorithms.registry import decode_report
from fedxab.algorithms.sampling import OWN_BUDGET
from fedxab.broker.codec import unpackb
from fedxab.errors import FedxabError, ProtocolError
from fedxab.run.accounting import (
    PhaseCommunication,
    communication_block,
    expected_use,
    federated_record,
    own_recommendation,
    phase_communication,
    withdrawn_clients,
)
from fedxab.run.envelope import check_phase
from fedxab.run.membership import PhaseMembers
from fedxab.run.population import Population

if TYPE_CHECKING:
    from fedxab.objectives.families import ClientFamily
    from fedxab.objectives.history import TrialLog
    from fedxab.results import RunRecord
    from fedxab.run.evaluation import ClientEvaluator, RegretSums, Telemetry
    from fedxab.run.membership import Members
    from fedxab.run.observe import RunObserver
    from fedxab.run.outcome import ClientOutcome
    from fedxab.run.participation import Participation

__all__ = [
    "REPORT_OUTCOMES",
    "ClientSession",
    "ClosedPhase",
    "ServerSession",
    "Verdict",
]

REPORT_OUTCOMES = ("accepted", "duplicate", "late", "invalid")
"""How a report is classified (:class:`Verdict`)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A report's classification: ``outcome`` in :data:`REPORT_OUTCOMES`; for a rejected one the
    ``reason`` (``late``, ``future_phase``, ``bad_payload``) and a line saying why."""

    outcome: str
    reason: str = ""
    text: str = ""


@dataclasses.dataclass(frozen=True)
class ClosedPhase:
    """One closed phase: the accepted reports' payloads by client, and the phase's counts."""

    phase: int
    reports: dict[int, bytes]
    counts: dict[str, Any] = dataclasses.field(default_factory=dict)
    members: PhaseMembers | None = None
    """Elastic membership: who was in the run, asked and reported (None: fixed membership)."""
    opened: tuple[int, ...] | None = None
    """Elastic membership: the members of the phase its close opened (a restarted server
    opens that phase with them again: its clients may have taken its broadcast already)."""


class ServerSession:
    """The server side of one run (one seed), driven by a runner.

    ``server``: the algorithm's server state machine; ``family``: the simulated client family
    (None where the objectives are the clients' own); ``sums``: the regret telemetry's sums.
    """

    def __init__(
        self,
        algorithm: str,
        server: Any,
        *,
        run_id: str,
        seed: int,
        n_clients: int,
        budget: int,
        family: ClientFamily | None,
        sums: RegretSums,
        participation: Participation | None = None,
        members: Members | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.server = server
        self.run_id = run_id
        self.seed = seed
        self.n_clients = n_clients
        self.budget = budget
        self.family = family
        self.sums = sums
        self.msg: Any = None
        """The open phase's broadcast, or the final :class:`Finished` once the run is over."""
        self.phases: list[PhaseCommunication] = []
        self.accepted: dict[int, bytes] = {}
        """The open phase's accepted reports (payload bytes as received), by client."""
        self.outcomes: dict[int, ClientOutcome] = {}
        self.withheld: dict[str, Any] | None = None
        """The fields of the record this server does not have, and why (local DP: a client's
        outcome and regret terms stay with it, :func:`~fedxab.run.outcome.stays_local`)."""
        self.participation = participation
        """Who is asked each phase (``[federation] participation`` < 1), None: every client."""
        self.asked: list[int] = []
        """The clients asked in the open phase (every active client at full participation)."""
        self.skipped = np.zeros(n_clients, dtype=np.int64)
        """Per client: the pulls of the phases it was not asked in (it did not make them)."""
        self.members = members
        """Elastic membership (:mod:`fedxab.run.membership`): who is in the run when a phase
        opens; None: every client not withdrawn (fixed membership)."""
        self.present: list[int] = []
        """Elastic membership: the open phase's members."""
        self.membership: list[PhaseMembers] = []
        """Elastic membership: the closed phases' record."""
        self.population = Population()
        """Who joined, left, was asked and reported, phase by phase (:mod:`fedxab.run.population`):
        its drivers tell it who joined and left; each closed phase adds its record."""
        self._withdrew: set[int] = set()  # the withdrawn clients the population was told of

    @property
    def elastic(self) -> bool:
        return self.members is not None

    def asked_in(self, phase: int) -> list[int]:
        """The clients asked in ``phase``: the open one's, a closed one's as recorded (elastic
        membership; a final answer's: none)."""
        if self.finished is None and phase == self.phase:
            return self.asked
        return next((list(p.asked) for p in self.membership if p.phase == phase), [])

    def _opened(self) -> Any:
        """After a phase opened (or the run finished): who is asked in it (elastic: of the
        clients in the run, :mod:`fedxab.run.membership`)."""
        if self.finished is not None:
            self.asked = []
            return self.msg
        pool = self.active
        if self.members is not None:
            present = set(self.members(self.phase))
            pool = [m for m in pool if m in present]
            self.present = pool
        if self.participation is None:
            self.asked = pool
        else:
            self.asked = self.participation.asked(self.phase, pool)
        if self.participation is not None or self.members is not None:
            self.server.ask(self.asked)
        return self.msg

    def _skip_unasked(self) -> None:
        """Before the open phase closes: charge its pulls to the schedule of every active
        client not asked in it (not sampled, or not in the run: elastic membership)."""
        if self.participation is None and self.members is None:
            return
        pulls = self.server.phase_pulls()
        asked = set(self.asked)
        for m in self.active:
            if m not in asked:
                self.skipped[m] += pulls

    # ------------------------------------------------------------------------------ phases
    def start(self) -> Any:
        """Open the first phase; its broadcast."""
        self.msg = self.server.start()
        return self._opened()

    @property
    def finished(self) -> Finished | None:
        """The final answer once the run is over, else None."""
        return self.msg if isinstance(self.msg, Finished) else None

    @property
    def phase(self) -> int:
        return int(self.msg.phase)

    @property
    def withdrawn(self) -> dict[int, Any]:
        """The clients that withdrew (client -> its Withdrawal)."""
        return withdrawn_clients(self.server)

    @property
    def active(self) -> list[int]:
        """The clients still in the run: those the open phase's broadcast is for."""
        gone = self.withdrawn
        return [m for m in range(self.n_clients) if m not in gone]

    def classify(self, m: int, phase: int, payload: bytes) -> Verdict:
        """Client ``m``'s report for ``phase`` (the encoded message): fed to the state machine
        if it is for the open phase and valid; every report gets exactly one verdict."""
        if self.msg is None:  # (elastic: a restarted server waiting for its clients)
            return Verdict("invalid", "future_phase", f"client {m} for phase {phase} (none open)")
        if phase < self.phase or self.finished is not None:
            return Verdict("late", "late", f"client {m} for phase {phase} ({self.phase})")
        if phase > self.phase:
            text = f"client {m} for phase {phase} ({self.phase})"
            return Verdict("invalid", "future_phase", text)
        try:
            report = decode_report(self.algorithm, unpackb(payload))
            check_phase(report, phase)
            fresh = self.server.receive(m, report)
        except (ProtocolError, FedxabError) as exc:
            return Verdict("invalid", "bad_payload", f"client {m}: {exc}")
        except Exception as exc:  # a payload no check foresaw: reject it, keep running
            return Verdict("invalid", "bad_payload", f"client {m}: {type(exc).__name__}: {exc}")
        if not fresh:
            return Verdict("duplicate", "", f"client {m}, phase {phase}")
        self.accepted[m] = payload
        self.population.join(m)  # a client that reports is in the run (its join may come later)
        return Verdict("accepted")

    def barrier_met(
        self,
        open_for_s: float,
        deadline_s: float | None,
        quorum: float,
        gone: Collection[int] = (),
    ) -> bool:
        """Whether the open phase may close: the state machine has every report it waits for,
        or (elastic membership) every asked client not ``gone`` from the run has reported, or
        the phase has been open ``deadline_s`` and a ``quorum`` (fraction of the asked
        clients, rounded up) reported."""
        if self.server.ready():
            return True
        if self.members is not None and all(m in self.accepted or m in gone for m in self.asked):
            return True
        if deadline_s is None or open_for_s < deadline_s:
            return False
        needed = max(1, math.ceil(quorum * len(self.asked) - 1e-9))
        return len(self.accepted) >= needed

    def close_phase(self, broadcast_bytes: int, messages_down: int) -> ClosedPhase:
        """Close the open phase (its barrier met): its counts are recorded and the next phase
        (or the final answer) opens. The closed phase, for a checkpoint."""
        accepted = self.accepted
        counts = phase_communication(
            self.msg,
            broadcast_bytes,
            messages_down=messages_down,
            messages_up=len(accepted),
            bytes_up=sum(len(p) for p in accepted.values()),
            accepted=len(accepted),
            evaluations=0,  # from the telemetry, in record()
            asked=len(self.asked),
        )
        members = self._members_closing()
        closed = ClosedPhase(self.phase, accepted, counts.to_dict(), members)
        self.phases.append(counts)
        self.accepted = {}
        self._skip_unasked()
        self.msg = self.server.close_phase()
        self._left_by_withdrawal()
        self.population.close(closed.phase, len(self.asked), len(accepted), self.run_id)
        present = set(self.present)
        self._opened()
        self._came_and_went(present)
        if members is not None and self.finished is None:  # (a restart opens it the same)
            closed = dataclasses.replace(closed, opened=tuple(self.present))
        return closed

    def _came_and_went(self, before: set[int]) -> None:
        """Elastic membership: the clients in the run when the next phase opened that were not
        in it before joined, and those gone have left (a leave the party named already, or
        silence past ``liveness_s``); named in the next phase's population record."""
        if self.members is None or self.finished is not None:
            return
        for m in before.difference(self.present):
            self.population.leave(m)
        for m in set(self.present).difference(before):
            self.population.join(m)

    def _members_closing(self) -> PhaseMembers | None:
        """Elastic membership: the open phase's record, and the state machine told that the
        clients asked are those that reported (a member gone without a report is not waited
        for; a phase nobody reported spends its pulls)."""
        if self.members is None:
            return None
        reported = tuple(sorted(self.accepted))
        if len(reported) < len(self.asked):
            self.server.ask(reported)
        withdrew = tuple(
            (m, int(w.used))
            for m, w in sorted(self.withdrawn.items())
            if m in self.accepted and w.phase == self.phase and w.reason.startswith(OWN_BUDGET)
        )
        record = PhaseMembers(
            self.phase, tuple(self.present), tuple(self.asked), reported, withdrew
        )
        self.membership.append(record)
        return record

    def _left_by_withdrawal(self, news: bool = True) -> None:
        """A client that withdrew since the last close (its privacy budget exhausted) has
        left the run."""
        withdrawn = self.withdrawn
        for m in withdrawn.keys() - self._withdrew:
            self.population.leave(m, news=news)
        self._withdrew.update(withdrawn)

    def restore(self, closed: ClosedPhase) -> None:
        """Replay a checkpointed closed phase: its reports, in client order, then its close."""
        for m, payload in sorted(closed.reports.items()):
            self.server.receive(m, decode_report(self.algorithm, unpackb(payload)))
            self.population.join(m, news=False)  # (named when the phase first closed)
        self.phases.append(PhaseCommunication(**closed.counts))
        if self.members is not None:
            self.accepted = dict(closed.reports)
            self._members_closing()
            self.accepted = {}
        self._skip_unasked()
        self.msg = self.server.close_phase()
        self._left_by_withdrawal(news=False)
        self._opened()

    # --------------------------------------------------------------------- what clients send
    def add_telemetry(self, telemetry: Telemetry, *, checked: bool = False) -> bool:
        """Buffer one piece of regret telemetry; False if it was already there (``checked``:
        see :meth:`~fedxab.run.evaluation.RegretSums.add`)."""
        return self.sums.add(telemetry, checked=checked)

    def add_outcome(self, outcome: ClientOutcome) -> bool:
        """What a client observed of its own objective; False (nothing kept) if the client's
        outcome is already in: the first one stays, as a ledger's first record does."""
        if outcome.client in self.outcomes:
            return False
        self.outcomes[outcome.client] = outcome
        return True

    def counted(self, phase: PhaseCommunication) -> PhaseCommunication:
        """``phase`` with the evaluations its clients made (from the telemetry so far)."""
        made = self.sums.evaluations_by_phase.get(phase.phase, 0)
        return dataclasses.replace(phase, evaluations=made)

    def expected_use(self) -> np.ndarray:
        """Evaluations each client must have made at the end (:func:`expected_use`), less
        the pulls of the phases it was not asked in."""
        withdrawn = self.withdrawn
        expected = expected_use(self.n_clients, self.budget, withdrawn)
        stayed = np.ones(self.n_clients, dtype=bool)
        stayed[list(withdrawn)] = False
        expected[stayed] -= self.skipped[stayed]
        return expected

    def record(self, wall: float, privacy: dict[str, Any] | None) -> RunRecord:
        """The run's record, once it is finished and the telemetry is in."""
        finished = self.finished
        if finished is None:
            raise FedxabError("the run is not finished: no record yet")
        sums = self.sums
        sums.flush()
        phases = [self.counted(p) for p in self.phases]
        recommendation = np.asarray(finished.recommendation, dtype=np.float64).reshape(-1).copy()
        communication = communication_block(self.n_clients, phases)
        if self.members is not None:
            communication["membership"] = [p.to_dict() for p in self.membership]
        return federated_record(
            self.run_id,
            self.seed,
            self.family,
            sums,
            recommendation,
            wall,
            communication,
            privacy,
            self.expected_use(),
            clients=(
                None
                if self.withheld is not None
                else tuple(self.outcomes[m] for m in sorted(self.outcomes))
            ),
            withheld=self.withheld,
        )


class ClientSession:
    """The clients one party hosts in one run: their state machines and evaluators, by id."""

    def __init__(
        self,
        clients: dict[int, Any],
        evaluators: dict[int, ClientEvaluator],
        trials: dict[int, TrialLog] | None = None,
        participation: Participation | None = None,
    ) -> None:
        self.participation = participation
        """Who is asked each phase, drawn as the server draws it; None: every client."""
        self.clients = clients
        self.evaluators = evaluators
        self.trials = trials or {}
        """The trial log of each client whose objective is a user's (by id)."""
        self._last_telemetry: dict[int, Telemetry] = {}
        self.asked: dict[int, frozenset[int]] | None = None
        """Elastic membership: the clients each phase's broadcast asks, by phase (set from
        each broadcast before it is answered, :mod:`fedxab.run.membership`); None: fixed."""

    def asks(self, m: int, phase: int) -> bool:
        """Whether client ``m`` is asked in ``phase``: as the broadcast names it (elastic
        membership over a broker), as the participation sample draws it (also in an elastic
        run in process, where every client is in the run), else always."""
        named = None if self.asked is None else self.asked.get(phase)
        if named is not None:
            return m in named
        return self.participation is None or self.participation.asks(m, phase)

    def answer(self, m: int, broadcast: Any) -> tuple[Any, Telemetry | None, bool]:
        """Client ``m``'s report for ``broadcast`` (None once it withdrew), the telemetry of
        the pulls it made for it, and whether that telemetry is new: a redelivered broadcast is
        answered from the client's reply cache, pulls nothing and repeats its last telemetry.
        The state machine's errors propagate (the caller decides what a rejection means).

        A client not asked in the broadcast's phase (partial participation, or not in the run
        then: elastic membership) skips it: it pulls nothing and answers nothing (None, None,
        False)."""
        if not isinstance(broadcast, Finished) and not self.asks(m, int(broadcast.phase)):
            self.clients[m].skip(broadcast)
            return None, None, False
        report = self.clients[m].answer(broadcast, self.evaluators[m])
        if report is None:
            return None, None, False
        phase = int(broadcast.phase)
        telemetry = self.evaluators[m].take(phase)
        last = self._last_telemetry.get(m)
        if telemetry.count == 0 and last is not None and last.phase == phase:
            return report, last, False
        self._last_telemetry[m] = telemetry
        return report, telemetry, True

    def watch_trials(self, observer: RunObserver) -> None:
        """Tell ``observer`` each new trial of every hosted client as it is made
        (:meth:`~fedxab.run.observe.RunObserver.on_trial`), if it wants them."""
        if observer.wants_trials:
            for m, log in self.trials.items():
                log.listener = functools.partial(observer.on_trial, m)

    def withdrawn(self, m: int) -> bool:
        """Whether client ``m`` withdrew from the run (it answers nothing more)."""
        return getattr(self.clients[m], "withdrawal", None) is not None

    def outcome(self, m: int) -> ClientOutcome:
        """What client ``m`` observed, with its own recommendation where it has one and its
        trials where its objective is a user's."""
        log = self.trials.get(m)
        trials = None if log is None else tuple(log.trials)
        return self.evaluators[m].observed.outcome(own_recommendation(self.clients[m]), trials)
