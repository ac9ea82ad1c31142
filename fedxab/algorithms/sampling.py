"""The client side shared by level-by-level algorithms (Fed-PNE, the m-player algorithm).

The server names active nodes ``(depth, i)`` and a number of pulls per node; the client pulls
every node that many times, node after node in increasing index, in ONE batch of evaluations
([FX] Algorithm 1; Chen et al. Algorithm 1, player side), and reports one local mean per node.
If its budget ends inside the phase it pulls until the budget is used and reports
``complete=False``: the truncated phase is not aggregated (fedxab's choice for a budget that ends
mid-phase, which the papers do not consider). A redelivered broadcast gets the same report back
without pulling again; an older one is refused.

Before pulling for a phase whose statistics it would release, the client asks
:meth:`NodeSamplingClient._refusal` whether it may release them; if not (DP-Fed-PNE's client out of
privacy budget), it pulls nothing, answers a :class:`~fedxab.algorithms.protocol.Withdrawal` and
answers nothing to any later broadcast.

A client may have its own budget, smaller than the run's ``T`` (:attr:`NodeSamplingClient.limit`,
``[agents] client_budget`` under elastic membership): it answers the phases that budget covers
and withdraws, pulling and releasing nothing, at the first phase it does not cover (a
:class:`~fedxab.algorithms.protocol.Withdrawal` carries its pulls, so the server counts it out as
it counts any withdrawal).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from fedxab.algorithms.partition import Partition
from fedxab.algorithms.protocol import (
    Evaluate,
    MeansReport,
    ReplyCache,
    Withdrawal,
    evaluate_checked,
)
from fedxab.errors import ConfigError, ProtocolError
from fedxab.validation import check_positive_int

OWN_BUDGET = "its own budget"
"""How the reason of a withdrawal at the client's own budget begins (the record and the replay
tell it from a withdrawal at the end of a privacy budget by it)."""


class NodeSamplingClient:
    """Pulls the broadcast nodes ``pulls_per_node`` times each and reports their local means.

    Subclasses set :attr:`report_class` and may override :meth:`_local_means` (what is
    released, e.g. DP-Fed-PNE's noisy means).
    """

    report_class: ClassVar[type[MeansReport]] = MeansReport

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
        edges: Sequence[Sequence[float] | None] | None = None,
    ) -> None:
        if isinstance(client_id, bool) or not isinstance(client_id, int) or client_id < 0:
            raise ConfigError("client_id", f"must be an integer >= 0, got {client_id!r}")
        self.client_id = client_id
        self.budget = check_positive_int("run.budget", budget)
        self.partition = partition or Partition(domain, k=k, split=split, seed=seed, edges=edges)
        self.used = 0
        self.skipped = 0
        """Pulls of the phases this client was not asked in (partial participation): they
        leave the shared schedule, so the client's horizon ends with the server's."""
        self.limit: int | None = None
        """The client's own budget (``[agents] client_budget``): the evaluations it makes at
        most; None: the run's ``T``."""
        self.withdrawal: Withdrawal | None = None
        self._replies: ReplyCache[MeansReport] = ReplyCache()

    def answer(self, broadcast: Any, evaluate: Evaluate) -> MeansReport | Withdrawal | None:
        """Pull every node of ``broadcast`` (one batch) and report the local means.

        ``None`` (nothing to send) once the client has withdrawn, for any later phase.
        """
        if self.withdrawal is not None:
            return self.withdrawal if broadcast.phase == self.withdrawal.phase else None
        cached = self._replies.get(broadcast.phase)
        if cached is not None:
            return cached
        nodes, depth, t_h = broadcast.nodes, broadcast.depth, broadcast.pulls_per_node
        if len(nodes) and int(nodes.max()) > self.partition.k**depth:
            raise ProtocolError(f"node index {int(nodes.max())} does not exist at depth {depth}")
        n_nodes = len(nodes)
        n_pulls = min(self.budget - self.used - self.skipped, n_nodes * t_h)
        if self.limit is not None and self.used + n_pulls > self.limit:
            past = (
                f"{OWN_BUDGET} does not cover phase {broadcast.phase} "
                f"({self.used} made, {n_pulls} asked)"
            )
            self.withdrawal = Withdrawal(broadcast.phase, self.client_id, self.used, past)
            return self.withdrawal
        if n_pulls == n_nodes * t_h:
            reason = self._refusal(broadcast.phase)
            if reason is not None:
                self.withdrawal = Withdrawal(broadcast.phase, self.client_id, self.used, reason)
                return self.withdrawal
        points = self.partition.centres(depth, nodes)
        rewards = evaluate_checked(evaluate, np.repeat(points, t_h, axis=0)[:n_pulls])
        self.used += n_pulls
        if n_pulls == n_nodes * t_h:
            means = self._local_means(rewards.reshape(n_nodes, t_h), broadcast.phase)
            report = self.report_class(broadcast.phase, self.client_id, True, means)
        else:
            report = self.report_class(broadcast.phase, self.client_id, False)
        return self._replies.put(broadcast.phase, report)

    def skip(self, broadcast: Any) -> None:
        """Not asked in ``broadcast``'s phase: pull nothing, release nothing, send nothing;
        the phase's pulls count against the schedule as the server counts them
        (``FedPNEServer.phase_pulls``). A redelivered broadcast changes nothing."""
        if self.withdrawal is not None or self._replies.phase == broadcast.phase:
            return
        self._replies.skip(broadcast.phase)
        wanted = len(broadcast.nodes) * broadcast.pulls_per_node
        self.skipped += min(self.budget - self.used - self.skipped, wanted)

    def _refusal(self, phase: int) -> str | None:
        """Why the client refuses to release phase ``phase``'s statistics, or None (it may)."""
        return None

    def _local_means(self, rewards: np.ndarray, phase: int) -> np.ndarray:
        """The released statistic: each node's mean reward (rows = nodes, columns = pulls)."""
        return rewards.mean(axis=1)
