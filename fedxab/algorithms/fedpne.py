"""Fed-PNE: federated phased node elimination (Li, Song, Honorio & Lin, "Federated X-Armed Bandit").

Server = [FX] Algorithm 2, client = [FX] Algorithm 1 (Li et al. 2024), step by step:

- (A) before each phase, descend without sampling while ``|K| tau_h <= M`` or ``tau_h <= 1``;
- (B) every client pulls every active node ``t_h = ceil(tau_h / M)`` times, node after node in
  increasing index, and reports one local mean per node;
- (C) the server averages the local means, unweighted (every client used the same ``t_h``);
- (D) eliminates with width ``b_h = c sqrt(L / (M t_h))`` and slack ``nu rho^h``;
- (E) the survivors' children form the next phase's active set, one depth deeper.

If the next phase does not fit in the remaining budget, clients pull in the prescribed order until
their budget ``T`` is used and the truncated phase is not aggregated (fedxab's choice).

A client may withdraw (:class:`~fedxab.algorithms.protocol.Withdrawal`, e.g. DP-Fed-PNE's client
out of privacy budget): the barrier then waits for the others, (C) averages the reports received
and (D)'s width counts the pulls behind them; once every client has withdrawn the run finishes.

Partial participation (``[federation] participation``, :mod:`fedxab.run.participation`): the
run asks a sample of the clients each phase (``ask``); (C) averages the asked clients' reports and
(D)'s width counts their pulls; a client not asked skips the phase (``skip``), whose pulls
(``phase_pulls``) still count against its schedule; a phase that asks nobody spends its pulls
and asks the same nodes again.

``horizon`` (fedxab's): the T of ``L = log(c1 T / delta)`` (:class:`~fedxab.algorithms.pne.
PNEConstants`), the budget by default. Only ``L`` reads it, so the phase schedule, the widths
and the eliminations depend on the budget through ``horizon`` alone, and on the budget itself
only where it truncates the last phase: a run continued to a larger budget with the same
``horizon`` is the longer run (:mod:`fedxab.run.continuation`).

``depth_counting``: ``"true"`` (default) uses the true depth of the active nodes in every
formula; ``"literal"`` reproduces the paper's counter, one larger than the true depth.
The recommendation is the centre of the best node of the last completed phase.

``noise_free`` (fedxab's, for deterministic objectives: ``[objective] deterministic`` sets it):
one pull of a node tells its value exactly, so every client pulls each active node once
(``t_h = 1``), the width is 0, and the run descends one depth per phase with no step (A). The
elimination rule keeps its slack, so a node holding a maximiser is never eliminated (its
centre is within ``nu rho^h`` of ``f*`` under [FX]'s smoothness assumption, and no centre is
above ``f*``): the best centre of the last completed depth H is then within ``nu rho^H`` of
``f*``, as for deterministic optimistic optimisation. Each phase costs at least one pull, so a
run ends within its budget T.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedxab.algorithms.partition import Partition
from fedxab.algorithms.pne import PNEConstants, children, eliminate
from fedxab.algorithms.protocol import (
    Finished,
    InboxServer,
    MeansReport,
    NodesBroadcast,
    ReportInbox,
    Withdrawal,
    check_means_report,
)
from fedxab.algorithms.sampling import NodeSamplingClient
from fedxab.errors import ProtocolError
from fedxab.validation import check_bool, check_choice, check_positive_int

DEPTH_COUNTING = ("true", "literal")


class FedPNEBroadcast(NodesBroadcast):
    """Server -> clients: the active nodes ``(depth, i)`` and the pulls per node ``t_h``."""

    kind = "fedpne.broadcast"


class FedPNEReport(MeansReport):
    """Client -> server: one local mean per active node, or ``complete=False`` at the horizon."""

    kind = "fedpne.report"


@dataclass(frozen=True)
class PhaseRecord:
    """What the server learnt in one completed phase (for results and recommendation)."""

    phase: int
    depth: int
    nodes: np.ndarray
    means: np.ndarray
    width: float
    best: int  # node index i of the best node
    survivors: int
    reports: int


class FedPNEServer(InboxServer[FedPNEReport]):
    """The Fed-PNE server state machine ([FX] Algorithm 2)."""

    accepts_withdrawals = True

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        horizon: int | None = None,
        nu: float = 1.0,
        rho: float = 0.5,
        preset: str = "practical",
        c: float | None = None,
        c1: float | None = None,
        delta: float | None = None,
        k: int = 2,
        split: str = "random",
        depth_counting: str = "true",
        noise_free: bool = False,
        seed: int = 0,
        edges: Sequence[Sequence[float] | None] | None = None,
    ) -> None:
        self.noise_free = check_bool("algorithm.noise_free", noise_free)
        self.constants = PNEConstants.resolve(
            n_clients=n_clients,
            horizon=budget if horizon is None else check_positive_int("algorithm.horizon", horizon),
            nu=nu,
            rho=rho,
            preset=preset,
            c=c,
            c1=c1,
            delta=delta,
        )
        self.partition = Partition(domain, k=k, split=split, seed=seed, edges=edges)
        self.n_clients = n_clients
        self.budget = budget
        self.k = k
        self._offset = (
            1
            if check_choice("algorithm.depth_counting", depth_counting, DEPTH_COUNTING) == "literal"
            else 0
        )
        self.phase = 0
        self.depth = 0
        self.active = np.array([1], dtype=np.int64)
        self.used = 0  # pulls per client in completed phases
        self.history: list[PhaseRecord] = []
        self._current: FedPNEBroadcast | None = None
        self._inbox: ReportInbox[FedPNEReport] = ReportInbox(n_clients)
        self._finished: Finished | None = None

    # The formulas use depth + offset (offset 1 = the paper's literal counter).
    def _tau(self, h: int) -> int:
        return self.constants.tau(h + self._offset)

    def start(self) -> FedPNEBroadcast:
        """The first phase's broadcast."""
        if self.phase != 0:
            raise ProtocolError("start() called twice")
        return self._next_phase()

    def _next_phase(self) -> FedPNEBroadcast:
        m = self.n_clients
        if self.noise_free:  # one pull of each active node per client, one depth per phase
            t_h = 1
        else:
            while len(self.active) * self._tau(self.depth) <= m or self._tau(self.depth) <= 1:
                self.active = children(self.active, self.k)  # (A) expansion without sampling
                self.depth += 1
            t_h = -(-self._tau(self.depth) // m)  # ceil(tau_h / M)
        self.phase += 1
        self._current = FedPNEBroadcast(self.phase, self.depth, self.active, t_h)
        self._inbox.open(self.phase)
        return self._current

    @property
    def phase_length(self) -> int:
        """Pulls per client in the current phase: ``|K| t_h``."""
        assert self._current is not None
        return len(self._current.nodes) * self._current.pulls_per_node

    def phase_pulls(self) -> int:
        """Pulls the open phase asks of each client (fewer in a phase the horizon truncates):
        what a client not asked in it does not make."""
        return min(self.budget - self.used, self.phase_length)

    @property
    def truncated(self) -> bool:
        """Whether the current phase ends the horizon before it completes."""
        return self.used + self.phase_length > self.budget

    def receive(self, client: int, report: FedPNEReport | Withdrawal) -> bool:
        """Record a client's report (or its withdrawal); ``False`` if it is a duplicate."""
        if isinstance(report, Withdrawal):
            return self._inbox.withdraw(client, report)
        return super().receive(client, report)

    def check_report(self, report: FedPNEReport) -> None:
        check_means_report(report, self.truncated, len(self.active))

    @property
    def withdrawn(self) -> dict[int, Withdrawal]:
        """The clients that left the run, with their withdrawal."""
        return self._inbox.withdrawn

    def close_phase(self) -> FedPNEBroadcast | Finished:
        """Aggregate the reports received (all, or a quorum) and open the next phase."""
        if self._finished is not None:
            return self._finished
        if self._inbox.in_run == 0:
            return self._finish("withdrawn")
        if self.truncated:
            return self._finish()
        if self._inbox.expected == 0:
            # a phase that asked nobody still in the run (partial participation): its pulls
            # are spent, and the same nodes are asked in the next phase
            self.used += self.phase_length
            return self._finish() if self.used >= self.budget else self._next_phase()
        reports = self._inbox.in_order()  # a fixed client order (determinism)
        means = np.mean([r.means for r in reports], axis=0)
        t_h = self._current.pulls_per_node  # type: ignore[union-attr]
        width = 0.0 if self.noise_free else float(self.constants.width(len(reports) * t_h))
        survive, best = eliminate(means, width, self.constants.slack(self.depth + self._offset))
        self.history.append(
            PhaseRecord(
                self.phase,
                self.depth,
                self.active,
                means,
                width,
                int(self.active[best]),
                int(survive.sum()),
                len(reports),
            )
        )
        self.used += self.phase_length
        if self.used >= self.budget:
            return self._finish()
        self.active = children(self.active[survive], self.k)  # (E)
        self.depth += 1
        return self._next_phase()

    def _finish(self, reason: str = "budget") -> Finished:
        self._inbox.close()
        self._finished = Finished(self.phase, self.recommend(), reason)
        return self._finished

    def recommend(self) -> np.ndarray:
        """Centre of the best node of the last completed phase (the root's before any)."""
        if not self.history:
            h, i = 0, 1
        else:
            last = self.history[-1]
            h, i = last.depth, last.best
        lower, upper = self.partition.cell(h, i)
        return (lower + upper) / 2.0


class FedPNEClient(NodeSamplingClient):
    """The Fed-PNE client ([FX] Algorithm 1): every active node ``t_h`` times, one local mean each.

    See :class:`~fedxab.algorithms.sampling.NodeSamplingClient` for the budget and redelivery
    rules.
    """

    report_class = FedPNEReport
