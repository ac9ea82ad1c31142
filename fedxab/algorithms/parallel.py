"""The m-player parallel X-armed bandit algorithm (Chen, Liu, Zhang & Li, "A Parallel algorithm
for X-Armed bandits", Algorithm 1), coordinator formulation, level by level.

Players are the clients, the coordinator is the server (the paper's equivalent coordinator
formulation). At depth ``h`` with confidence set ``S_h`` (``S_0 = {(0, 1)}``):

1. the server broadcasts ``(h, S_h, T_h)`` with the paper's ``T_h`` (fedxab reads the ``T_0`` it
   prints once as a typo for ``T_h``)::

       T_h = ceil( log(pi^2 (h+1)^2 |S_h| / (3 delta)) / (2 (nu rho^h)^2 m) )

2. every player pulls **every** node of ``S_h`` exactly ``T_h`` times (work replicated, not
   partitioned), node after node in increasing index, in one batch, and reports its local
   means ``mu^j_{h,i}`` (the paper's released statistic);
3. the server averages them in increasing client order, ``mu_{h,i} = (1/m) sum_j
   mu^j_{h,i}``, records the level, and expands every node with
   ``mu_{h,i} >= max mu_h - 3 nu rho^h`` (ties for the argmax: smallest index);
   ``S_{h+1}`` = the children of the expanded nodes.

If a level does not fit in the remaining per-player budget ``n``, it is still broadcast: players
pull in the prescribed order until their n-th evaluation and report ``complete=False``; that
partial level is discarded. The answer is the centre of the argmax node of the deepest
completed level, or of the root if no level completed (fedxab's choice). One communication round
is counted per completed level: :attr:`ParallelServer.rounds`.

Cells and representative points come from :class:`~fedxab.algorithms.partition.Partition` (cell
centres). The default split rule is ``"longest"``, fedxab's choice for this paper:
halving the longest side keeps every cell's aspect ratio <= 2, so a ball of radius ~ rho^h fits
in every depth-h cell as Assumption A4 needs, while a random split dimension can make arbitrarily
thin cells; it also needs no seed. In one dimension the two rules give the same dyadic tree.
Server and players must use the same ``k``, ``split`` and ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedxab.algorithms.partition import Partition
from fedxab.algorithms.pne import children
from fedxab.algorithms.protocol import (
    Finished,
    InboxServer,
    MeansReport,
    NodesBroadcast,
    ReportInbox,
    check_means_report,
)
from fedxab.algorithms.sampling import NodeSamplingClient
from fedxab.errors import ProtocolError
from fedxab.validation import check_delta, check_nu, check_positive_int, check_rho

__all__ = [
    "LevelRecord",
    "ParallelBroadcast",
    "ParallelClient",
    "ParallelReport",
    "ParallelServer",
    "pulls_per_node",
]


def pulls_per_node(
    depth: int, n_nodes: int, *, n_players: int, nu: float, rho: float, delta: float
) -> int:
    """``T_h``: how many times each player pulls each node of ``S_h``.

    ``ceil(log(pi^2 (h+1)^2 |S_h| / (3 delta)) / (2 (nu rho^h)^2 m))``, at least 1.
    """
    log_term = math.log(math.pi**2 * (depth + 1) ** 2 * n_nodes / (3.0 * delta))
    return max(1, math.ceil(log_term / (2.0 * (nu * rho**depth) ** 2 * n_players)))


# ------------------------------------------------------------------------------------ messages
class ParallelBroadcast(NodesBroadcast):
    """Coordinator -> players: the level ``(depth, S_h)`` and the pulls per node ``T_h``.

    One phase per level, so ``depth == phase - 1`` always.
    """

    kind = "parallel.broadcast"

    def validate(self) -> None:
        if self.depth != self.phase - 1:
            raise ProtocolError(
                f"field 'depth' must be phase - 1 = {self.phase - 1} (one level per phase), "
                f"got {self.depth}"
            )


class ParallelReport(MeansReport):
    """Player -> coordinator: its local mean of every node of ``S_h`` (``T_h`` pulls each), or
    ``complete=False`` (no values) when its budget ran out during the level."""

    kind = "parallel.report"


@dataclass(frozen=True)
class LevelRecord:
    """One completed level (= one communication round): what the coordinator learnt.

    ``evaluations`` is the cumulative number of evaluations of each player once this level is
    done; ``threshold`` is ``max mu_h - 3 nu rho^h``; ``expanded[j]`` says whether node
    ``nodes[j]`` passed it (its children form ``S_{h+1}``).
    """

    phase: int
    depth: int
    nodes: np.ndarray
    pulls_per_node: int
    evaluations: int
    means: np.ndarray
    best: int  # node index i of the argmax (smallest i on ties)
    threshold: float
    expanded: np.ndarray
    reports: int

    @property
    def size(self) -> int:
        """``|S_h|``."""
        return len(self.nodes)

    def to_dict(self) -> dict[str, Any]:
        """Plain-typed copy for results files."""
        return {
            "phase": self.phase,
            "depth": self.depth,
            "size": self.size,
            "nodes": self.nodes.tolist(),
            "pulls_per_node": self.pulls_per_node,
            "evaluations": self.evaluations,
            "means": self.means.tolist(),
            "best": self.best,
            "best_mean": float(self.means.max()),
            "threshold": self.threshold,
            "expanded": int(self.expanded.sum()),
            "reports": self.reports,
        }


# ----------------------------------------------------------------------------------- server
class ParallelServer(InboxServer[ParallelReport]):
    """The coordinator of the paper's "equivalent coordinator formulation"."""

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        nu: float = 1.0,
        rho: float = 0.5,
        delta: float | None = None,
        k: int = 2,
        split: str = "longest",
        seed: int = 0,
    ) -> None:
        self.n_clients = check_positive_int("federation.clients", n_clients)
        self.budget = check_positive_int("run.budget", budget)
        self.nu = check_nu("algorithm.nu", nu)
        self.rho = check_rho("algorithm.rho", rho)
        if delta is None:
            delta = 1.0 / budget  # the paper's theoretical choice
        self.delta = check_delta("algorithm.delta", delta, closed=True)
        self.partition = Partition(domain, k=k, split=split, seed=seed)
        self.k = k
        self.phase = 0
        self.depth = 0
        self.active = np.array([1], dtype=np.int64)  # S_h
        self.used = 0  # evaluations per player in completed levels
        self.history: list[LevelRecord] = []
        self._current: ParallelBroadcast | None = None
        self._inbox: ReportInbox[ParallelReport] = ReportInbox(n_clients)
        self._finished: Finished | None = None

    def pulls_per_node(self, depth: int, n_nodes: int) -> int:
        """``T_h`` for this run's ``m, nu, rho, delta``."""
        return pulls_per_node(
            depth, n_nodes, n_players=self.n_clients, nu=self.nu, rho=self.rho, delta=self.delta
        )

    def start(self) -> ParallelBroadcast:
        """The broadcast of level 0 (the root, ``T_0`` pulls per player)."""
        if self.phase != 0:
            raise ProtocolError("start() called twice")
        return self._next_level()

    def _next_level(self) -> ParallelBroadcast:
        self.phase += 1
        t_h = self.pulls_per_node(self.depth, len(self.active))
        self._current = ParallelBroadcast(self.phase, self.depth, self.active, t_h)
        self._inbox.open(self.phase)
        return self._current

    @property
    def phase_length(self) -> int:
        """Evaluations per player for the current level: ``|S_h| T_h``."""
        return len(self._open.nodes) * self._open.pulls_per_node

    @property
    def _open(self) -> ParallelBroadcast:
        """The current level's broadcast (ProtocolError before the first)."""
        if self._current is None:
            raise ProtocolError("no phase is open")
        return self._current

    @property
    def truncated(self) -> bool:
        """Whether the budget ends inside the current level (which is then discarded)."""
        return self.used + self.phase_length > self.budget

    def receive(self, client: int, report: ParallelReport) -> bool:
        """Record a player's report; ``False`` if it is a duplicate. The level barrier
        is :meth:`ready`: every player has reported."""
        if not isinstance(report, ParallelReport):
            raise ProtocolError(f"expected a {ParallelReport.kind!r}, got {type(report).__name__}")
        return super().receive(client, report)

    def check_report(self, report: ParallelReport) -> None:
        check_means_report(report, self.truncated, len(self.active))

    def close_phase(self) -> ParallelBroadcast | Finished:
        """Aggregate the level and broadcast the next one, or finish.

        Aggregating fewer than m reports (a quorum) is allowed and recorded in
        :attr:`LevelRecord.reports`, but Lemma 1's confidence then no longer holds: ``T_h`` was
        sized for m players.
        """
        if self._finished is not None:
            return self._finished
        reports = self._inbox.in_order()  # fixed client order
        if self.truncated:  # the partial level is discarded
            return self._finish()
        means = np.mean(np.stack([r.means for r in reports]), axis=0)
        best = int(np.argmax(means))  # first argmax = smallest node index
        threshold = float(means[best] - 3.0 * self.nu * self.rho**self.depth)
        expanded = means >= threshold  # the argmax always passes
        self.used += self.phase_length
        for arr in (means, expanded):
            arr.setflags(write=False)
        self.history.append(
            LevelRecord(
                phase=self.phase,
                depth=self.depth,
                nodes=self.active,
                pulls_per_node=self._open.pulls_per_node,
                evaluations=self.used,
                means=means,
                best=int(self.active[best]),
                threshold=threshold,
                expanded=expanded,
                reports=len(reports),
            )
        )
        if self.used >= self.budget:
            return self._finish()
        self.active = children(self.active[expanded], self.k)
        self.active.setflags(write=False)
        self.depth += 1
        return self._next_level()

    def _finish(self) -> Finished:
        self._inbox.close()
        self._finished = Finished(self.phase, self.recommend())
        return self._finished

    @property
    def finished(self) -> bool:
        return self._finished is not None

    @property
    def rounds(self) -> int:
        """Communication rounds so far: one per completed level."""
        return len(self.history)

    @property
    def deepest(self) -> int | None:
        """``h_max``: the deepest completed level, ``None`` if none completed."""
        return self.history[-1].depth if self.history else None

    def recommended_node(self) -> tuple[int, int]:
        """``(h_max, argmax i)`` of the deepest completed level, the root ``(0, 1)`` if none."""
        if not self.history:
            return 0, 1
        last = self.history[-1]
        return last.depth, last.best

    def recommend(self) -> np.ndarray:
        """``x(n)``: the centre of :meth:`recommended_node` (anytime; never changes state)."""
        lower, upper = self.partition.cell(*self.recommended_node())
        return (lower + upper) / 2.0

    def trace(self) -> list[dict[str, Any]]:
        """The per-level trace as plain dicts (``depth``, ``size`` = ``|S_h|``,
        ``pulls_per_node`` = ``T_h``, cumulative ``evaluations``, ``means``, ``best``, ...)."""
        return [rec.to_dict() for rec in self.history]


# ----------------------------------------------------------------------------------- client
class ParallelClient(NodeSamplingClient):
    """A player: pulls every node it is sent ``T_h`` times and reports its local means.

    See :class:`~fedxab.algorithms.sampling.NodeSamplingClient`; the partition's default split
    here is ``"longest"`` (the server's default).
    """

    report_class = ParallelReport

    def __init__(
        self,
        client_id: int,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        budget: int,
        k: int = 2,
        split: str = "longest",
        seed: int = 0,
        partition: Partition | None = None,
    ) -> None:
        super().__init__(
            client_id, domain, budget=budget, k=k, split=split, seed=seed, partition=partition
        )
