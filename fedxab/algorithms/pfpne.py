"""PF-PNE: personalized federated phased node elimination (Li, Song & Honorio,
"Personalized Federated X-armed Bandit"): server = [PF] Algorithm 1, client = [PF] Algorithm 2,
local subroutine PE = [PF] Algorithm 3 (Li, Song & Honorio 2024).

Two stages, every client has exactly ``T`` pulls:

- **Stage 1** (collaborative, depths ``h = 1..H0``, one depth per communication round): the
  broadcast for depth h carries the nodes of ``G^h`` and the pulls per node ``ceil(tau_h / M)``,
  plus the previous depth's survivors ``S^{h-1}`` with their global means and widths (the paper's
  line-13 broadcast, piggy-backed on the next round). Every client pulls every node of ``G^h``
  (one batch) and reports its local means; the server averages them (unweighted), eliminates with
  ``b_h = c sqrt(L / (M ceil(tau_h/M)))`` and slack ``nu rho^h`` and descends one depth.
- **Handover**: after depth ``H0`` the server sends a final broadcast with ``S^{H0}`` and its
  statistics. Each client then runs **PE** locally with all its remaining budget (no
  communication): restarting at depth 1, nodes of ``S^h`` (h <= H0) are *protected* (never pulled,
  never eliminated, their statistics are the global ones); every other locally active node is pulled
  until it has ``tau_h`` local samples and is removed only if the local elimination rule says so
  (double elimination: eliminated globally AND locally). Below ``H0`` everything is local. The
  client replies with its personalized recommendation: the centre of the best node at the deepest
  depth PE completed (the global best node at the last aggregated depth if PE completed none).

The server's :class:`PFPNEFinished` carries the global recommendation, the centre of the global
best node at the last aggregated depth (``H0`` when stage 1 completes; the root's centre when
``H0 = 0``), and every reporting client's own recommendation, since PF-PNE's regret is local.

Readings of the paper's ambiguities, fedxab's default first:

- P2: the root is never sampled; stage 1 and PE start at depth 1 with the root's k children.
- P3: the client loops over depths while ``h <= H0`` and budget remains, then runs PE.
- P4: ``H0 = max{h >= 0 : nu rho^h >= Delta}`` (= 6 for nu = 1, rho = 0.5, Delta = 0.01; 0 when
  ``Delta >= nu``), ``h0_rule="floor"``; ``h0_rule="ceil"`` gives
  ``min{h >= 0 : nu rho^h <= Delta}`` (= 7).
- P5: stage-1 local samples of a node count towards its PE target ``tau_h``
  (``reuse_samples=True``); ``reuse_samples=False`` restarts every count at 0 in PE.
- P6: PE pulls the unprotected nodes in increasing index, each up to ``tau_h`` local samples, one
  batch (one ``evaluate`` call) per depth.
- P7: the reference node of PE's elimination uses the client's own statistics, the global ones when
  it is protected.
- P8: clients sample ``G^h`` (before elimination) in stage 1 and protect ``S^h`` (after) in PE.
- P9: no depth skipping (``skip_levels=False``); ``skip_levels=True`` adds Fed-PNE's expansion loop
  (descend without sampling while ``|G| tau_h <= M`` or ``tau_h <= 1``), never below ``H0``; the
  global sets of skipped depths are wholly protected in PE but, having no statistics, never serve as
  its reference node.
- Horizon: if ``T`` ends inside a stage-1 depth, clients pull in order until ``T``,
  that depth is not aggregated and stage 2 never runs; the server finishes with the clients' current
  recommendations (the global best node they know). If stage 1 uses exactly ``T`` before ``H0``,
  the handover still happens and PE has no budget.
- Theory preset: ``c = 2``, ``c1 = (2 M^2)^(1/8)`` ([PF] Lemma A.2); practical: ``c = 0.1``,
  ``c1 = 1``; ``delta = 1/M`` by default.

**Non-reproduction** (fedxab issue 20; ``docs/reproduce.md``, "PF-PNE does not reproduce"): as
printed, PF-PNE loses to local HCT (each client alone) in local cumulative regret: Garland,
M = 10, T = 3000: 797 +- 28 against 313 +- 12; Himmelblau, T = 10^4: 1086 against 177
(``fedxab reproduce pfpne-garland --budget 3000 --seeds 5 --jobs 2``,
``fedxab reproduce pfpne-himmelblau --seeds 5 --jobs 2``). The measured cause: PE must re-examine
every node the server eliminated up to ``tau_h`` local samples (68% of the pulls on Garland at
T = 3000, 82% on Himmelblau at T = 10^4), a cost that the paper's regret decomposition ([PF]
eq. 19, Corollary 3.1) never charges; and below ``H0`` every surviving node gets ``tau_h`` pulls
where HCT samples adaptively. :mod:`fedxab.algorithms.pfhct` (PF-HCT) is fedxab's answer.

Communication rounds (:attr:`PFPNEServer.rounds`) are the aggregated stage-1 depths,
``min(H0, depth reached before T)``; the handover phase adds one broadcast (carrying ``S^{H0}``) and
one reply (the recommendation) per client, and no statistics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np

from fedxab.algorithms.fedpne import PhaseRecord
from fedxab.algorithms.partition import Partition
from fedxab.algorithms.pne import PNEConstants, children, eliminate
from fedxab.algorithms.protocol import (
    Evaluate,
    Finished,
    InboxServer,
    ReplyCache,
    ReportInbox,
    check_kind,
    evaluate_checked,
    wire_array,
    wire_bool,
    wire_int,
)
from fedxab.errors import ProtocolError
from fedxab.validation import check_bool, check_choice, check_positive

H0_RULES = ("floor", "ceil")
_NO_PROTECTION = (np.empty(0, dtype=np.int64), np.empty(0), np.empty(0))


def transition_depth(Delta: float, nu: float = 1.0, rho: float = 0.5, rule: str = "floor") -> int:
    """The transition depth ``H0`` between the two stages ([PF] §3.1).

    ``"floor"``: the largest ``h >= 0`` with ``nu rho^h >= Delta``, i.e.
    ``floor(log(Delta/nu) / log rho)``; ``"ceil"``: the smallest ``h >= 0`` with
    ``nu rho^h <= Delta``. Both are 0 when ``Delta >= nu``. Computed by comparison, not by
    rounding a logarithm, so that ``Delta = nu rho^h`` exactly gives ``h`` under both rules.
    """
    check_choice("algorithm.h0_rule", rule, H0_RULES)
    Delta = check_positive("algorithm.Delta", Delta)
    h = 0
    if rule == "floor":
        while nu * rho ** (h + 1) >= Delta:
            h += 1
    else:
        while nu * rho**h > Delta:
            h += 1
    return h


def descendants(indices: np.ndarray, k: int, levels: int) -> np.ndarray:
    """All descendants ``levels`` depths below the nodes ``indices``, in increasing index."""
    out = np.asarray(indices, dtype=np.int64)
    for _ in range(levels):
        out = children(out, k)
    return out


def _increasing(values: np.ndarray, name: str) -> None:
    if values.size and (values.min() < 1 or np.any(np.diff(values) <= 0)):
        raise ProtocolError(f"field {name!r} must be an increasing list of node indices >= 1")


# ------------------------------------------------------------------------------ messages
@dataclass(frozen=True)
class PFPNEBroadcast:
    """Server -> clients, one per phase.

    Stage 1 (``final=False``): sample the nodes ``(depth, i)`` of ``G^depth``, ``pulls_per_node``
    times each. Both kinds carry the survivors ``S^{survivor_depth}`` of the last aggregated depth
    (empty, with ``survivor_depth = 0``, before any) with their global means and widths, which the
    clients store as protected statistics ([PF] Alg. 1 line 13, Alg. 2 lines 10-11).
    The final (handover) broadcast has no nodes, ``pulls_per_node = 0`` and
    ``depth = survivor_depth``: the clients run PE.
    """

    phase: int
    depth: int
    nodes: np.ndarray  # int64 indices i of G^depth, increasing (empty when final)
    pulls_per_node: int
    survivor_depth: int
    survivors: np.ndarray  # int64 indices of S^{survivor_depth}, increasing
    survivor_means: np.ndarray  # global means mubar of the survivors
    survivor_widths: np.ndarray  # global widths b_h of the survivors
    final: bool = False

    kind = "pfpne.broadcast"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "depth": self.depth,
            "nodes": np.asarray(self.nodes, dtype=np.int64),
            "pulls_per_node": self.pulls_per_node,
            "survivor_depth": self.survivor_depth,
            "survivors": np.asarray(self.survivors, dtype=np.int64),
            "survivor_means": np.asarray(self.survivor_means, dtype=np.float64),
            "survivor_widths": np.asarray(self.survivor_widths, dtype=np.float64),
            "final": self.final,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        check_kind(data, cls.kind)
        msg = cls(
            phase=wire_int(data, "phase", 1),
            depth=wire_int(data, "depth"),
            nodes=wire_array(data, "nodes", "i"),
            pulls_per_node=wire_int(data, "pulls_per_node"),
            survivor_depth=wire_int(data, "survivor_depth"),
            survivors=wire_array(data, "survivors", "i"),
            survivor_means=wire_array(data, "survivor_means", "f"),
            survivor_widths=wire_array(data, "survivor_widths", "f"),
            final=wire_bool(data, "final"),
        )
        msg.validate()
        return msg

    def validate(self) -> None:
        """Structural checks (a :class:`ProtocolError` naming the field if one fails)."""
        _increasing(self.nodes, "nodes")
        _increasing(self.survivors, "survivors")
        n = len(self.survivors)
        for name in ("survivor_means", "survivor_widths"):
            if getattr(self, name).shape != (n,):
                raise ProtocolError(
                    f"field {name!r} must hold {n} values (one per survivor), "
                    f"got shape {getattr(self, name).shape}"
                )
        if np.any(self.survivor_widths <= 0):
            raise ProtocolError("field 'survivor_widths' must hold positive widths")
        if (self.survivor_depth == 0) != (n == 0):
            raise ProtocolError(
                "field 'survivors' must be empty exactly when 'survivor_depth' is 0, got "
                f"{n} survivors at depth {self.survivor_depth}"
            )
        if self.final:
            if self.nodes.size or self.pulls_per_node != 0 or self.depth != self.survivor_depth:
                raise ProtocolError(
                    "a final broadcast must have no 'nodes', 'pulls_per_node' 0 and "
                    "'depth' equal to 'survivor_depth'"
                )
        elif self.nodes.size == 0 or self.pulls_per_node < 1 or self.depth <= self.survivor_depth:
            raise ProtocolError(
                "a stage-1 broadcast needs non-empty 'nodes', 'pulls_per_node' >= 1 and "
                "'depth' > 'survivor_depth'"
            )


@dataclass(frozen=True)
class PFPNEReport:
    """Client -> server.

    Stage 1: ``complete=True`` and one local mean per node of ``G^h``; ``complete=False`` (no
    means) when the horizon ends inside the depth. Handover phase: ``complete=True``, no means.
    Incomplete and handover reports carry the client's own ``recommendation`` (a point, shape (d,));
    complete stage-1 reports carry none (empty).
    """

    phase: int
    client: int
    complete: bool
    means: np.ndarray = field(default_factory=lambda: np.empty(0))
    recommendation: np.ndarray = field(default_factory=lambda: np.empty(0))

    kind = "pfpne.report"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "client": self.client,
            "complete": self.complete,
            "means": np.asarray(self.means, dtype=np.float64),
            "recommendation": np.asarray(self.recommendation, dtype=np.float64),
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> PFPNEReport:
        check_kind(data, cls.kind)
        return cls(
            phase=wire_int(data, "phase", 1),
            client=wire_int(data, "client"),
            complete=wire_bool(data, "complete"),
            means=wire_array(data, "means", "f"),
            recommendation=wire_array(data, "recommendation", "f"),
        )


@dataclass(frozen=True)
class PFPNEFinished(Finished):
    """The run is over: the global ``recommendation`` and each reporting client's own one.

    ``recommendations[j]`` is client ``clients[j]``'s personalized recommendation. The wire kind
    stays ``"finished"`` so that generic drivers treat it as :class:`Finished`.
    """

    clients: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    recommendations: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))

    def to_wire(self) -> dict[str, Any]:
        return {
            **super().to_wire(),
            "clients": np.asarray(self.clients, dtype=np.int64),
            "recommendations": np.asarray(self.recommendations, dtype=np.float64),
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> PFPNEFinished:
        base = Finished.from_wire(data)
        clients = wire_array(data, "clients", "i")
        recs = wire_array(data, "recommendations", "f", ndim=2)
        expected = (len(clients), len(base.recommendation)) if clients.size else (0,)
        if recs.shape[: len(expected)] != expected:
            raise ProtocolError(
                f"field 'recommendations' must have shape ({len(clients)}, "
                f"{len(base.recommendation)}), got {recs.shape}"
            )
        if clients.size and np.any(np.diff(clients) <= 0):
            raise ProtocolError("field 'clients' must be increasing client ids")
        return cls(base.phase, base.recommendation, base.reason, clients, recs)

    def recommendation_of(self, client: int) -> np.ndarray:
        """Client ``client``'s own recommendation (KeyError if it did not report one)."""
        hits = np.nonzero(self.clients == client)[0]
        if not hits.size:
            raise KeyError(f"no recommendation from client {client}")
        return self.recommendations[int(hits[0])]


@dataclass(frozen=True)
class StageOneRecord(PhaseRecord):
    """One aggregated stage-1 depth: :class:`PhaseRecord` plus the survivors mask (S^h in G^h)."""

    survive: np.ndarray


@dataclass(frozen=True)
class PEDepthRecord:
    """What a client decided at one depth of PE ([PF] Alg. 3), for results and tests.

    ``nodes`` is the local active set ``K_m^h``; ``protected`` marks ``S^h``; ``counts`` the local
    samples of each node when the elimination was decided; ``pulls`` the stage-2 pulls at this
    depth; ``means``/``widths`` the statistics used (global ones for protected nodes, NaN if none);
    ``best`` the index of the reference node; ``survive`` the nodes kept.
    """

    depth: int
    nodes: np.ndarray
    protected: np.ndarray
    counts: np.ndarray
    pulls: np.ndarray
    means: np.ndarray
    widths: np.ndarray
    best: int
    survive: np.ndarray


def _resolve(n_clients: int, budget: int, **kw: Any) -> PNEConstants:
    # PF-PNE's theory preset uses c1 = (2 M^2)^(1/8) ([PF] Lemma A.2).
    return PNEConstants.resolve(n_clients=n_clients, horizon=budget, c1_exponent_clients=2, **kw)


# -------------------------------------------------------------------------------- server
class PFPNEServer(InboxServer[PFPNEReport]):
    """The PF-PNE server state machine ([PF] Algorithm 1), stage 1 plus the handover."""

    broadcast_class: type[PFPNEBroadcast] = PFPNEBroadcast

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
        Delta: float = 0.01,
        h0_rule: str = "floor",
        skip_levels: bool = False,
        k: int = 2,
        split: str = "random",
        seed: int = 0,
    ) -> None:
        self.constants = _resolve(
            n_clients, budget, nu=nu, rho=rho, preset=preset, c=c, c1=c1, delta=delta
        )
        self.h0 = transition_depth(Delta, self.constants.nu, self.constants.rho, h0_rule)
        self.Delta = float(Delta)
        self.skip_levels = check_bool("algorithm.skip_levels", skip_levels)
        self.partition = Partition(domain, k=k, split=split, seed=seed)
        self.n_clients = n_clients
        self.budget = budget
        self.k = k
        self.phase = 0
        self.depth = 0  # depth of the current stage-1 nodes
        self.active = np.empty(0, dtype=np.int64)  # G^depth
        self.used = 0  # pulls per client in aggregated stage-1 depths
        self.history: list[StageOneRecord] = []
        self.recommendations: dict[int, np.ndarray] = {}
        self._survivors = _Survivors.none()
        self._current: PFPNEBroadcast | None = None
        self._inbox: ReportInbox[PFPNEReport] = ReportInbox(n_clients)
        self._finished: PFPNEFinished | None = None

    @property
    def rounds(self) -> int:
        """Communication rounds of stage 1: the aggregated depths."""
        return len(self.history)

    @property
    def stage(self) -> str:
        """``"collaborative"`` (stage 1), ``"handover"`` (clients run PE) or ``"finished"``."""
        if self._finished is not None:
            return "finished"
        if self._current is not None and self._current.final:
            return "handover"
        return "collaborative"

    def start(self) -> PFPNEBroadcast:
        """First broadcast: depth 1 (the root is never sampled); the handover if H0 = 0."""
        if self.phase != 0:
            raise ProtocolError("start() called twice")
        return self._descend(children(np.array([1], dtype=np.int64), self.k), 1)

    def _descend(self, nodes: np.ndarray, depth: int) -> PFPNEBroadcast:
        """Open stage-1 depth ``depth`` on ``nodes``, or hand over if :meth:`_stops_before` it."""
        if self._stops_before(nodes, depth):
            return self._handover()
        return self._stage_one(nodes, depth)

    def _stops_before(self, nodes: np.ndarray, depth: int) -> bool:
        """Whether stage 1 ends before sampling ``nodes`` at ``depth``: below ``H0``, or when the
        budget is spent ([PF] Alg. 1, the loop over ``h <= H0``)."""
        return depth > self.h0 or self.used >= self.budget

    def _eliminate(
        self, reports: list[PFPNEReport], means: np.ndarray, width: float
    ) -> tuple[np.ndarray, int]:
        """The survivors mask and best node of the depth just aggregated ([PF] Alg. 1 line 11)."""
        return eliminate(means, width, self.constants.slack(self.depth))

    def _survivor_widths(self, means: np.ndarray, width: float) -> np.ndarray:
        """The widths the survivors' global means are sent with: ``b_h`` for every node."""
        return np.full(len(means), width)

    def _stage_one(self, nodes: np.ndarray, depth: int) -> PFPNEBroadcast:
        m, tau = self.n_clients, self.constants.tau
        if self.skip_levels:  # Fed-PNE's loop (A), never below H0 (P9 option)
            while depth < self.h0 and (len(nodes) * tau(depth) <= m or tau(depth) <= 1):
                nodes = children(nodes, self.k)
                depth += 1
        return self._open_round(nodes, depth, self.constants.pulls_per_client(depth, m))

    def _open_round(self, nodes: np.ndarray, depth: int, pulls: int) -> PFPNEBroadcast:
        """Broadcast a stage-1 round: sample ``nodes`` of ``G^depth`` ``pulls`` times each."""
        self.phase += 1
        self.depth = depth
        self.active = nodes
        s = self._survivors
        self._current = self.broadcast_class(
            self.phase, depth, nodes, pulls, s.depth, s.nodes, s.means, s.widths
        )
        self._inbox.open(self.phase)
        return self._current

    def _handover(self) -> PFPNEBroadcast:
        self.phase += 1
        s = self._survivors
        self.active = np.empty(0, dtype=np.int64)
        self._current = self.broadcast_class(
            self.phase, s.depth, self.active, 0, s.depth, s.nodes, s.means, s.widths, final=True
        )
        self._inbox.open(self.phase)
        return self._current

    @property
    def phase_length(self) -> int:
        """Pulls per client in this stage-1 depth, ``|G^h| ceil(tau_h/M)`` (0 at handover)."""
        assert self._current is not None
        return len(self._current.nodes) * self._current.pulls_per_node

    @property
    def truncated(self) -> bool:
        """Whether the current stage-1 depth ends the horizon before it completes."""
        return self.used + self.phase_length > self.budget

    def check_report(self, report: PFPNEReport) -> None:
        assert self._current is not None
        final, truncated = self._current.final, self.truncated
        if report.complete and not final and truncated:
            raise ProtocolError("a complete report for a depth that ends the horizon")
        if not report.complete and (final or not truncated):
            raise ProtocolError("an incomplete report for a phase that fits the budget")
        n_means = len(self.active) if report.complete and not final else 0
        if report.means.shape != (n_means,):
            raise ProtocolError(
                f"field 'means' must hold {n_means} values, got {report.means.shape}"
            )
        if report.complete and not final:
            if report.recommendation.size:
                raise ProtocolError("field 'recommendation' must be empty in a stage-1 report")
        else:
            self._check_point(report.recommendation)

    def _check_point(self, x: np.ndarray) -> None:
        dom = self.partition.domain
        if x.shape != (len(dom),):
            raise ProtocolError(
                f"field 'recommendation' must be a point of shape ({len(dom)},), got {x.shape}"
            )
        if np.any(x < dom[:, 0]) or np.any(x > dom[:, 1]):
            raise ProtocolError(f"field 'recommendation' {x.tolist()} lies outside the domain")

    def close_phase(self) -> PFPNEBroadcast | PFPNEFinished:
        """Aggregate the reports received (all, or a quorum) and open the next phase."""
        if self._finished is not None:
            return self._finished
        reports = self._inbox.in_order()  # aggregate in a fixed client order (determinism)
        assert self._current is not None
        if self._current.final or self.truncated:
            return self._finish(reports)
        return self._aggregate(reports)

    def _aggregate(self, reports: list[PFPNEReport]) -> PFPNEBroadcast:
        """Average the depth's local means, eliminate ([PF] Alg. 1 lines 10-11), go deeper."""
        assert self._current is not None
        means = np.mean([r.means for r in reports], axis=0)
        t_h = self._current.pulls_per_node
        width = float(self.constants.width(len(reports) * t_h))  # b_h, N_h = M ceil(tau_h/M)
        survive, best = self._eliminate(reports, means, width)
        self.used += self.phase_length
        return self._close_depth(self.active, means, width, survive, best, len(reports))

    def _close_depth(
        self,
        nodes: np.ndarray,
        means: np.ndarray,
        width: float,
        survive: np.ndarray,
        best: int,
        n_reports: int,
    ) -> PFPNEBroadcast:
        """Record the aggregated depth (its ``nodes``, global ``means`` and width), keep its
        survivors ``S^h`` and open the next depth on their children (or hand over)."""
        survive.setflags(write=False)
        self.history.append(
            StageOneRecord(
                self.phase,
                self.depth,
                nodes,
                means,
                width,
                int(nodes[best]),
                int(survive.sum()),
                n_reports,
                survive,
            )
        )
        kept = nodes[survive]
        widths = self._survivor_widths(means, width)[survive]
        self._survivors = _Survivors(self.depth, kept, means[survive], widths)
        return self._descend(children(kept, self.k), self.depth + 1)

    def _finish(self, reports: list[PFPNEReport]) -> PFPNEFinished:
        self._inbox.close()
        self.recommendations = {r.client: r.recommendation for r in reports}
        clients = np.array(sorted(self.recommendations), dtype=np.int64)
        recs = np.array([self.recommendations[m] for m in clients]).reshape(
            len(clients), self.partition.dim
        )
        self._finished = PFPNEFinished(self.phase, self.recommend(), "budget", clients, recs)
        return self._finished

    def recommend(self) -> np.ndarray:
        """Centre of the global best node at the last aggregated depth (the root's before any)."""
        if not self.history:
            return self.partition.centres(0, [1])[0]
        last = self.history[-1]
        return self.partition.centres(last.depth, [last.best])[0]


@dataclass(frozen=True)
class _Survivors:
    depth: int
    nodes: np.ndarray
    means: np.ndarray
    widths: np.ndarray

    @classmethod
    def none(cls) -> _Survivors:
        return cls(0, np.empty(0, dtype=np.int64), np.empty(0), np.empty(0))


# -------------------------------------------------------------------------------- client
class PFPNEClient:
    """The PF-PNE client state machine ([PF] Algorithm 2 with PE, Algorithm 3).

    The client keeps a local sample count and reward sum for every node it pulls, stores the
    protected statistics ``(mubar, b_h)`` of every global survivor, and runs PE on the handover
    broadcast. The constants (``nu, rho, c, c1, delta``, preset) must match the server's: PE uses
    ``tau_h`` and ``b(n)``; a stage-1 broadcast whose ``pulls_per_node`` differs from this client's
    ``ceil(tau_h/M)`` is rejected.
    """

    def __init__(
        self,
        client_id: int,
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
        reuse_samples: bool = True,
        k: int = 2,
        split: str = "random",
        seed: int = 0,
        partition: Partition | None = None,
    ) -> None:
        self.constants = _resolve(
            n_clients, budget, nu=nu, rho=rho, preset=preset, c=c, c1=c1, delta=delta
        )
        self.client_id = client_id
        self.n_clients = n_clients
        self.budget = budget
        self.k = k
        self.reuse_samples = check_bool("algorithm.reuse_samples", reuse_samples)
        self.partition = partition or Partition(domain, k=k, split=split, seed=seed)
        self.used = 0
        self.phase = 0  # last phase answered
        self.depth = 0  # last stage-1 depth pulled
        self.stage = "collaborative"  # then "done" (after PE, or at the horizon in stage 1)
        self.protected: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.pe_history: list[PEDepthRecord] = []
        self._active = np.empty(0, dtype=np.int64)  # G^depth
        self._count: dict[tuple[int, int], int] = {}
        self._sum: dict[tuple[int, int], float] = {}
        self._replies: ReplyCache[PFPNEReport] = ReplyCache()

    # ------------------------------------------------------------------------- helpers
    def recommend(self) -> np.ndarray:
        """This client's own recommendation (never changes state).

        The centre of the best node at the deepest depth PE completed; before PE, the global best
        node of the last aggregated depth (from the protected statistics); the root's centre before
        any.
        """
        if self.pe_history:
            last = self.pe_history[-1]
            return self.partition.centres(last.depth, [last.best])[0]
        with_stats = [h for h, (_, mu, _) in self.protected.items() if np.all(np.isfinite(mu))]
        if with_stats:
            h = max(with_stats)
            nodes, mu, _ = self.protected[h]
            return self.partition.centres(h, [int(nodes[int(np.argmax(mu))])])[0]
        return self.partition.centres(0, [1])[0]

    # -------------------------------------------------------------------------- answer
    def answer(self, broadcast: PFPNEBroadcast, evaluate: Evaluate) -> PFPNEReport:
        """Stage 1: pull every node ``ceil(tau_h/M)`` times (one batch) and report local means.
        Handover: run PE with the whole remaining budget and report the recommendation.

        A repeated broadcast (redelivery) gets the same report back without pulling again.
        """
        cached = self._replies.get(broadcast.phase)
        if cached is not None:
            return cached
        if self.stage != "collaborative":
            raise ProtocolError(
                f"client {self.client_id} has finished; got phase {broadcast.phase}"
            )
        if broadcast.phase != self.phase + 1:
            raise ProtocolError(
                f"broadcast for phase {broadcast.phase}, client {self.client_id} expects "
                f"phase {self.phase + 1}"
            )
        broadcast.validate()
        protected = self._new_protected(broadcast)
        if broadcast.final:
            report = self._local_stage(broadcast, protected, evaluate)
        else:
            report = self._stage_one(broadcast, protected, evaluate)
        self.phase = broadcast.phase
        return self._replies.put(broadcast.phase, report)

    def _new_protected(
        self, b: PFPNEBroadcast
    ) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Check the broadcast against this client's view; the protected sets it adds."""
        if b.survivor_depth != self.depth:
            raise ProtocolError(
                f"field 'survivor_depth' is {b.survivor_depth}, client {self.client_id} last "
                f"sampled depth {self.depth}"
            )
        if b.survivors.size and not np.all(np.isin(b.survivors, self._active)):
            raise ProtocolError(
                f"field 'survivors' holds nodes that were not sampled at depth {self.depth}"
            )
        new: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if b.survivor_depth:
            new[b.survivor_depth] = (b.survivors, b.survivor_means, b.survivor_widths)
        if b.final:
            return new
        base = b.survivors if b.survivor_depth else np.array([1], dtype=np.int64)
        expected = descendants(base, self.k, b.depth - b.survivor_depth)
        if not np.array_equal(expected, b.nodes):
            raise ProtocolError(
                f"field 'nodes' must be the depth-{b.depth} descendants of the survivors"
            )
        t_h = self._first_pulls(b.depth)
        if b.pulls_per_node != t_h:
            raise ProtocolError(
                f"field 'pulls_per_node' is {b.pulls_per_node}, but this client's constants give "
                f"{t_h} at depth {b.depth}; client and server must share nu, rho, c, c1, delta"
            )
        for h in range(b.survivor_depth + 1, b.depth):  # depths skipped by skip_levels
            nodes = descendants(base, self.k, h - b.survivor_depth)
            nan = np.full(len(nodes), np.nan)
            new[h] = (nodes, nan, nan)
        return new

    def _first_pulls(self, depth: int) -> int:
        """Pulls per node of a depth's first stage-1 broadcast: ``ceil(tau_h / M)``."""
        return self.constants.pulls_per_client(depth, self.n_clients)

    def _stage_one(
        self,
        b: PFPNEBroadcast,
        protected: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
        evaluate: Evaluate,
    ) -> PFPNEReport:
        t_h, n_nodes = b.pulls_per_node, len(b.nodes)
        n_pulls = min(self.budget - self.used, n_nodes * t_h)
        X = np.repeat(self.partition.centres(b.depth, b.nodes), t_h, axis=0)[:n_pulls]
        rewards = evaluate_checked(evaluate, X)
        # commit
        self.protected.update(protected)
        self.used += n_pulls
        self.depth = b.depth
        self._active = b.nodes
        owner = np.repeat(np.arange(n_nodes), t_h)[:n_pulls]
        sums = np.bincount(owner, weights=rewards, minlength=n_nodes)
        counts = np.bincount(owner, minlength=n_nodes)
        for j, i in enumerate(b.nodes):
            if counts[j]:
                key = (b.depth, int(i))
                self._count[key] = self._count.get(key, 0) + int(counts[j])
                self._sum[key] = self._sum.get(key, 0.0) + float(sums[j])
        if n_pulls == n_nodes * t_h:
            means = rewards.reshape(n_nodes, t_h).mean(axis=1)
            return PFPNEReport(b.phase, self.client_id, True, means)
        self.stage = "done"  # the horizon ended inside stage 1: no PE
        return PFPNEReport(b.phase, self.client_id, False, recommendation=self.recommend())

    def _local_stage(
        self,
        b: PFPNEBroadcast,
        protected: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
        evaluate: Evaluate,
    ) -> PFPNEReport:
        """[PF] Algorithm 3 with the whole remaining budget, on working copies (commit at end)."""
        prot = {**self.protected, **protected}
        count = dict(self._count) if self.reuse_samples else {}
        total_sum = dict(self._sum) if self.reuse_samples else {}
        used = self.used
        const, k = self.constants, self.k
        records: list[PEDepthRecord] = []
        lset = children(np.array([1], dtype=np.int64), k)
        h = 1
        while used < self.budget:
            p_nodes, p_mu, p_w = prot.get(h, _NO_PROTECTION)
            in_p = np.isin(lset, p_nodes)
            u = lset[~in_p]
            have = np.array([count.get((h, int(i)), 0) for i in u], dtype=np.int64)
            need = np.maximum(const.tau(h) - have, 0)
            total = int(need.sum())
            n = min(self.budget - used, total)
            pulls_u = np.minimum(need, np.maximum(n - (np.cumsum(need) - need), 0))
            if n:
                sel = pulls_u > 0
                nodes, reps = u[sel], pulls_u[sel]
                X = np.repeat(self.partition.centres(h, nodes), reps, axis=0)
                rewards = evaluate_checked(evaluate, X)
                keys = [(h, i) for i in nodes.tolist()]
                # each node's sum goes on from its earlier samples, one reward at a time in
                # pull order (np.add.at adds sequentially: the sums of a per-pull loop)
                sums = np.array([total_sum.get(key, 0.0) for key in keys])
                np.add.at(sums, np.repeat(np.arange(len(keys)), reps), rewards)
                for key, r, s in zip(keys, reps.tolist(), sums.tolist(), strict=True):
                    count[key] = count.get(key, 0) + r
                    total_sum[key] = s
                used += n
            if n < total:  # the horizon ends inside this depth: no decision
                break
            cnt = np.array([count.get((h, int(i)), 0) for i in lset], dtype=np.int64)
            est = np.empty(len(lset))
            wid = np.empty(len(lset))
            cu = cnt[~in_p]
            est[~in_p] = [total_sum[(h, int(i))] / c for i, c in zip(u, cu, strict=True)]
            wid[~in_p] = const.width(cu) if cu.size else []
            pos = np.searchsorted(p_nodes, lset[in_p])
            est[in_p], wid[in_p] = p_mu[pos], p_w[pos]
            usable = np.isfinite(est)  # protected nodes of skipped depths have no statistics
            survive, best = eliminate(
                np.where(usable, est, -np.inf), np.where(usable, wid, 0.0), const.slack(h)
            )
            survive |= in_p  # protected nodes are never eliminated
            pulls = np.zeros(len(lset), dtype=np.int64)
            pulls[~in_p] = pulls_u
            records.append(
                PEDepthRecord(h, lset, in_p, cnt, pulls, est, wid, int(lset[best]), survive)
            )
            lset = children(lset[survive], k)
            h += 1
        # commit
        self.protected = prot
        self._count, self._sum = count, total_sum
        self.used = used
        self.pe_history = records
        self.stage = "done"
        return PFPNEReport(b.phase, self.client_id, True, recommendation=self.recommend())


__all__ = [
    "H0_RULES",
    "PEDepthRecord",
    "PFPNEBroadcast",
    "PFPNEClient",
    "PFPNEFinished",
    "PFPNEReport",
    "PFPNEServer",
    "StageOneRecord",
    "descendants",
    "transition_depth",
]
