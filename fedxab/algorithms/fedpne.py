"""Fed-PNE: federated phased node elimination (Li, Song, Honorio & Lin, "Federated X-Armed Bandit").

Server = [FX] Algorithm 2, client = [FX] Algorithm 1, as cleaned in spec-fedpne-pfpne §4:

- (A) before each phase, descend without sampling while ``|K| tau_h <= M`` or ``tau_h <= 1``;
- (B) every client pulls every active node ``t_h = ceil(tau_h / M)`` times, node after node in
  increasing index, and reports one local mean per node;
- (C) the server averages the local means, unweighted (every client used the same ``t_h``);
- (D) eliminates with width ``b_h = c sqrt(L / (M t_h))`` and slack ``nu rho^h``;
- (E) the survivors' children form the next phase's active set, one depth deeper.

If the next phase does not fit in the remaining budget, clients pull in the prescribed order until
their budget ``T`` is used and the truncated phase is not aggregated (spec §4.5, F8).

``depth_counting`` (spec F2): ``"true"`` (default) uses the true depth of the active nodes in every
formula; ``"literal"`` reproduces the paper's counter, one larger than the true depth.
The recommendation is the centre of the best node of the last completed phase.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedxab.algorithms.base import check_reward
from fedxab.algorithms.partition import Partition
from fedxab.algorithms.pne import PNEConstants, children, eliminate
from fedxab.algorithms.protocol import (
    Evaluate,
    Finished,
    check_kind,
    wire_array,
    wire_bool,
    wire_int,
)
from fedxab.errors import InvalidRewardError, ProtocolError
from fedxab.validation import check_choice

DEPTH_COUNTING = ("true", "literal")


@dataclass(frozen=True)
class FedPNEBroadcast:
    """Server -> clients: the active nodes ``(depth, i)`` and the pulls per node ``t_h``."""

    phase: int
    depth: int
    nodes: np.ndarray  # int64 indices i of the active nodes, increasing
    pulls_per_node: int

    kind = "fedpne.broadcast"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "depth": self.depth,
            "nodes": self.nodes,
            "pulls_per_node": self.pulls_per_node,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> FedPNEBroadcast:
        check_kind(data, cls.kind)
        nodes = wire_array(data, "nodes", "i")
        depth = wire_int(data, "depth")
        if nodes.size == 0 or nodes.min() < 1 or np.any(np.diff(nodes) <= 0):
            raise ProtocolError("field 'nodes' must be a non-empty increasing list of indices >= 1")
        return cls(
            phase=wire_int(data, "phase", 1),
            depth=depth,
            nodes=nodes,
            pulls_per_node=wire_int(data, "pulls_per_node", 1),
        )


@dataclass(frozen=True)
class FedPNEReport:
    """Client -> server: one local mean per active node, or ``complete=False`` at the horizon."""

    phase: int
    client: int
    complete: bool
    means: np.ndarray = field(default_factory=lambda: np.empty(0))

    kind = "fedpne.report"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "client": self.client,
            "complete": self.complete,
            "means": self.means,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> FedPNEReport:
        check_kind(data, cls.kind)
        return cls(
            phase=wire_int(data, "phase", 1),
            client=wire_int(data, "client"),
            complete=wire_bool(data, "complete"),
            means=wire_array(data, "means", "f"),
        )


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


class FedPNEServer:
    """The Fed-PNE server state machine ([FX] Algorithm 2)."""

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        nu: float = 1.0,
        rho: float = 0.5,
        preset: str = "practical",
        c: float | None = None,
        c1: float | None = None,
        delta: float | None = None,
        k: int = 2,
        split: str = "random",
        depth_counting: str = "true",
        seed: int = 0,
    ) -> None:
        self.constants = PNEConstants.resolve(
            n_clients=n_clients,
            horizon=budget,
            nu=nu,
            rho=rho,
            preset=preset,
            c=c,
            c1=c1,
            delta=delta,
        )
        self.partition = Partition(domain, k=k, split=split, seed=seed)
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
        self._reports: dict[int, FedPNEReport] = {}
        self._finished: Finished | None = None

    # The formulas use depth + offset (offset 1 = the paper's literal counter, spec F2).
    def _tau(self, h: int) -> int:
        return self.constants.tau(h + self._offset)

    def start(self) -> FedPNEBroadcast:
        """The first phase's broadcast."""
        if self.phase != 0:
            raise ProtocolError("start() called twice")
        return self._next_phase()

    def _next_phase(self) -> FedPNEBroadcast:
        m = self.n_clients
        while len(self.active) * self._tau(self.depth) <= m or self._tau(self.depth) <= 1:
            self.active = children(self.active, self.k)  # (A) expansion without sampling
            self.depth += 1
        self.phase += 1
        t_h = -(-self._tau(self.depth) // m)  # ceil(tau_h / M)
        self._current = FedPNEBroadcast(self.phase, self.depth, self.active, t_h)
        self._reports = {}
        return self._current

    @property
    def phase_length(self) -> int:
        """Pulls per client in the current phase: ``|K| t_h``."""
        assert self._current is not None
        return len(self._current.nodes) * self._current.pulls_per_node

    @property
    def truncated(self) -> bool:
        """Whether the current phase ends the horizon before it completes."""
        return self.used + self.phase_length > self.budget

    def receive(self, client: int, report: FedPNEReport) -> bool:
        """Record a client's report; ``False`` if it is a duplicate (same client and phase)."""
        if self._current is None or self._finished is not None:
            raise ProtocolError("no phase is open")
        if not 0 <= client < self.n_clients or report.client != client:
            raise ProtocolError(
                f"report from client {report.client} received as client {client}; "
                f"expected an id in 0..{self.n_clients - 1}"
            )
        if report.phase != self.phase:
            raise ProtocolError(f"report for phase {report.phase}, current phase is {self.phase}")
        if client in self._reports:
            return False
        if report.complete:
            if self.truncated:
                raise ProtocolError("a complete report for a phase that ends the horizon")
            if report.means.shape != (len(self.active),):
                raise ProtocolError(
                    f"field 'means' must hold {len(self.active)} values, got {report.means.shape}"
                )
        elif not self.truncated:
            raise ProtocolError("an incomplete report for a phase that fits the budget")
        self._reports[client] = report
        return True

    def ready(self) -> bool:
        """The phase barrier: every client has reported."""
        return len(self._reports) == self.n_clients

    @property
    def reported(self) -> int:
        return len(self._reports)

    def close_phase(self) -> FedPNEBroadcast | Finished:
        """Aggregate the reports received (all, or a quorum) and open the next phase."""
        if self._finished is not None:
            return self._finished
        if not self._reports:
            raise ProtocolError(f"phase {self.phase} has no report to aggregate")
        if self.truncated:
            return self._finish()
        order = sorted(self._reports)  # aggregate in a fixed client order (determinism)
        means = np.mean([self._reports[m].means for m in order], axis=0)
        t_h = self._current.pulls_per_node  # type: ignore[union-attr]
        width = float(self.constants.width(len(order) * t_h))
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
                len(order),
            )
        )
        self.used += self.phase_length
        if self.used >= self.budget:
            return self._finish()
        self.active = children(self.active[survive], self.k)  # (E)
        self.depth += 1
        return self._next_phase()

    def _finish(self) -> Finished:
        self._finished = Finished(self.phase, self.recommend())
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


class FedPNEClient:
    """The Fed-PNE client state machine ([FX] Algorithm 1)."""

    def __init__(
        self,
        client_id: int,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        budget: int,
        k: int = 2,
        split: str = "random",
        seed: int = 0,
        partition: Partition | None = None,
    ) -> None:
        self.client_id = client_id
        self.budget = budget
        self.partition = partition or Partition(domain, k=k, split=split, seed=seed)
        self.used = 0
        self._last: tuple[int, FedPNEReport] | None = None

    def points(self, depth: int, nodes: np.ndarray) -> np.ndarray:
        """Representative points (cell centres) of nodes ``(depth, i)``, shape (len(nodes), d)."""
        cells = [self.partition.cell(depth, int(i)) for i in nodes]
        return np.array([(lo + up) / 2.0 for lo, up in cells])

    def answer(self, broadcast: FedPNEBroadcast, evaluate: Evaluate) -> FedPNEReport:
        """Pull every node ``t_h`` times (one batch), report the local means.

        A repeated broadcast (redelivery) gets the same report back without pulling again.
        """
        if self._last is not None and self._last[0] == broadcast.phase:
            return self._last[1]
        t_h = broadcast.pulls_per_node
        n_nodes = len(broadcast.nodes)
        n_pulls = min(self.budget - self.used, n_nodes * t_h)
        X = np.repeat(self.points(broadcast.depth, broadcast.nodes), t_h, axis=0)[:n_pulls]
        rewards = np.asarray(evaluate(X), dtype=float).reshape(-1) if n_pulls else np.empty(0)
        if rewards.shape != (n_pulls,):
            raise InvalidRewardError(
                f"evaluate() returned {rewards.shape[0]} rewards for {n_pulls} points"
            )
        if not np.all(np.isfinite(rewards)):
            bad = int(np.nonzero(~np.isfinite(rewards))[0][0])
            check_reward(rewards[bad], field=f"reward at {X[bad].tolist()}")
        self.used += n_pulls
        if n_pulls == n_nodes * t_h:
            means = self._local_means(rewards.reshape(n_nodes, t_h), broadcast.phase)
            report = FedPNEReport(broadcast.phase, self.client_id, True, means)
        else:
            report = FedPNEReport(broadcast.phase, self.client_id, False)
        self._last = (broadcast.phase, report)
        return report

    def _local_means(self, rewards: np.ndarray, phase: int) -> np.ndarray:
        """The released statistic: each node's mean reward (rows = nodes, columns = pulls)."""
        return rewards.mean(axis=1)
