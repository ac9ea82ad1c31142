"""HCT baselines of the federated papers as federated server/client pairs.

Both run in the same runner as Fed-PNE (``start`` / ``answer`` / ``receive`` / ``close_phase``):

- :class:`LocalHCTServer` / :class:`LocalHCTClient`: [PF]'s baseline (Li, Song & Honorio
  2024): every client runs :class:`~fedxab.algorithms.hct.HCT` on its own objective for its whole
  budget, with no communication except one broadcast ("run") and one report per client (its
  recommendation). Its regret is the *local* regret of each client.
- :class:`CentralHCTServer` / :class:`CentralHCTClient`: [FX]'s baseline (Li et al. 2024): one
  HCT, held by the server, on the *global* objective ``(1/M) sum_m f_m`` with instant
  communication. Round ``t`` = one phase: the server broadcasts HCT's point ``x_t``, every client
  evaluates its objective there once and reports the reward, and the server tells HCT the average
  ``(1/M) sum_m (f_m(x_t) + eps_{m,t})`` (fedxab's choice; the paper does not say).

**Central HCT deliberately breaks the "summary statistics only" rule** that
fedxab's federated algorithms follow: each report
carries one raw reward. It models the unlimited, instant communication that [FX] grants this
baseline, so its communication is ``T`` rounds (``T`` broadcasts and ``M T`` reports), against
``O(log T)`` for the federated algorithms. ``SENDS_RAW_REWARDS`` on each server class says which
baseline does so, for tests and audits that check what leaves a client.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from fedxab.algorithms.hct import HCT
from fedxab.algorithms.protocol import (
    Evaluate,
    Finished,
    InboxServer,
    ReplyCache,
    ReportInbox,
    check_kind,
    evaluate_checked,
    wire_array,
    wire_int,
)
from fedxab.domain import as_domain
from fedxab.errors import ProtocolError
from fedxab.seeding import stream_word
from fedxab.validation import check_choice, check_positive_int

PARTITIONS = ("per-client", "shared")
"""Local HCT's ``partitions`` choices (:class:`LocalHCTClient`)."""


def local_hct_seed(seed: int, client_id: int) -> int:
    """The seed of client ``client_id``'s HCT (its partition and draws) in a local-HCT run.

    Derived from the run seed through :func:`fedxab.seeding.stream_word`, so every client has its
    own random partition, as when [PF] ran PyXAB's HCT separately on each client.
    """
    return stream_word(seed, "local-hct", client_id)


def one_reward(evaluate: Evaluate, x: np.ndarray) -> float:
    """``evaluate`` at the single point ``x``, checked to be one finite reward."""
    return float(evaluate_checked(evaluate, x.reshape(1, -1))[0])


def _check_point(value: np.ndarray, dim: int, name: str) -> None:
    if value.shape != (dim,):
        raise ProtocolError(f"field {name!r} must hold {dim} coordinates, got shape {value.shape}")


# ================================================================================ local HCT
@dataclass(frozen=True)
class LocalHCTBroadcast:
    """Server -> clients, once: run HCT for ``rounds`` pulls on your own objective."""

    phase: int
    rounds: int

    kind = "localhct.broadcast"

    def to_wire(self) -> dict[str, Any]:
        return {"kind": self.kind, "phase": self.phase, "rounds": self.rounds}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        check_kind(data, cls.kind)
        return cls(phase=wire_int(data, "phase", 1), rounds=wire_int(data, "rounds", 1))


@dataclass(frozen=True)
class LocalHCTReport:
    """Client -> server, once: how many pulls it made and its HCT's recommendation."""

    phase: int
    client: int
    pulls: int
    recommendation: np.ndarray

    kind = "localhct.report"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "client": self.client,
            "pulls": self.pulls,
            "recommendation": np.asarray(self.recommendation, dtype=np.float64),
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        check_kind(data, cls.kind)
        return cls(
            phase=wire_int(data, "phase", 1),
            client=wire_int(data, "client"),
            pulls=wire_int(data, "pulls"),
            recommendation=wire_array(data, "recommendation", "f"),
        )


class LocalHCTServer(InboxServer[LocalHCTReport]):
    """Local HCT, server side: one "run" broadcast, then collect each client's recommendation.

    The run's answer (``Finished.recommendation``) is the recommendation of the lowest-id client
    that reported. Comparing clients by their mean reward would be meaningless: their objectives
    differ (e.g. by an additive constant), so the best mean says nothing about the
    point. Every client's own answer is in :attr:`recommendations` (and on the client,
    :meth:`LocalHCTClient.recommend`), which is what local regret needs.
    """

    SENDS_RAW_REWARDS = False
    broadcast_class: type[LocalHCTBroadcast] = LocalHCTBroadcast

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
    ) -> None:
        self.domain = as_domain(domain)
        self.n_clients = check_positive_int("federation.clients", n_clients)
        self.budget = check_positive_int("run.budget", budget)
        self.phase = 0
        self._inbox: ReportInbox[LocalHCTReport] = ReportInbox(self.n_clients)
        self._finished: Finished | None = None

    def start(self) -> LocalHCTBroadcast:
        if self.phase != 0:
            raise ProtocolError("start() called twice")
        self.phase = 1
        self._inbox.open(1)
        return self.broadcast_class(1, self.budget)

    def check_report(self, report: LocalHCTReport) -> None:
        if report.pulls > self.budget:
            raise ProtocolError(f"field 'pulls' is {report.pulls}, above the budget {self.budget}")
        _check_point(report.recommendation, self.domain.shape[0], "recommendation")

    @property
    def recommendations(self) -> dict[int, np.ndarray]:
        """Each reporting client's own recommendation, by client id."""
        return {r.client: r.recommendation for r in self._inbox.received()}

    def close_phase(self) -> Finished:
        """Finish with the lowest-id client's recommendation (see the class docstring)."""
        if self._finished is not None:
            return self._finished
        first = self._inbox.in_order()[0]
        self._inbox.close()
        self._finished = Finished(self.phase, np.array(first.recommendation))
        return self._finished


class LocalHCTClient:
    """Local HCT, client side: its own :class:`HCT` run for the whole budget, then one report.

    HCT is sequential, so ``evaluate`` is called with one point at a time (``T`` calls of one row
    instead of one batch per phase): this baseline costs one Python call per pull in the runner.

    ``partitions``: ``"per-client"`` (default, as [PF] ran PyXAB's HCT separately on each client)
    seeds each client's HCT with :func:`local_hct_seed` of the run seed and the client id, so
    each client draws its own random partition; ``"shared"`` seeds every client's HCT with the
    run seed, so all clients use the partition the federated algorithms of the same run use
    (a paired comparison: the regret differences it shows are the algorithms', not the
    partitions'). The two are the same algorithm with the same expected regret.
    """

    def __init__(
        self,
        client_id: int,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        budget: int,
        nu: float = 1.0,
        rho: float = 0.5,
        preset: str = "practical",
        c: float | None = None,
        c1: float | None = None,
        delta: float | None = None,
        k: int = 2,
        split: str = "random",
        partitions: str = "per-client",
        noise_free: bool = False,
        seed: int = 0,
        edges: Sequence[Sequence[float] | None] | None = None,
    ) -> None:
        self.client_id = client_id
        self.budget = check_positive_int("run.budget", budget)
        shared = check_choice("algorithm.partitions", partitions, PARTITIONS) == "shared"
        self.hct = HCT(
            domain,
            nu=nu,
            rho=rho,
            preset=preset,
            c=c,
            c1=c1,
            delta=delta,
            budget=budget,
            k=k,
            split=split,
            noise_free=noise_free,
            seed=seed if shared else local_hct_seed(seed, client_id),
            edges=edges,
        )
        self.used = 0
        self._replies: ReplyCache[LocalHCTReport] = ReplyCache()

    def answer(self, broadcast: LocalHCTBroadcast, evaluate: Evaluate) -> LocalHCTReport:
        """Run HCT for ``min(rounds, budget left)`` pulls, then report its recommendation.

        A repeated broadcast (redelivery) gets the same report back without pulling again.
        """
        cached = self._replies.get(broadcast.phase)
        if cached is not None:
            return cached
        rounds = min(broadcast.rounds, self.budget - self.used)
        for _ in range(rounds):
            x = self.hct.ask()
            self.hct.tell(x, one_reward(evaluate, x))
            self.used += 1
        report = LocalHCTReport(broadcast.phase, self.client_id, rounds, self.hct.recommend())
        return self._replies.put(broadcast.phase, report)

    def recommend(self) -> np.ndarray:
        """This client's own answer (for its local regret)."""
        return self.hct.recommend()


# ============================================================================== central HCT
@dataclass(frozen=True)
class CentralHCTBroadcast:
    """Server -> clients, every round: the point ``x_t`` HCT asks for."""

    phase: int
    point: np.ndarray

    kind = "centralhct.broadcast"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "point": np.asarray(self.point, dtype=np.float64),
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> CentralHCTBroadcast:
        check_kind(data, cls.kind)
        return cls(phase=wire_int(data, "phase", 1), point=wire_array(data, "point", "f"))


@dataclass(frozen=True)
class CentralHCTReport:
    """Client -> server, every round: the client's RAW noisy reward at ``x_t``.

    This message breaks the summary-statistics-only rule on purpose (module docstring).
    """

    phase: int
    client: int
    reward: float

    kind = "centralhct.report"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "client": self.client,
            "reward": float(self.reward),
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> CentralHCTReport:
        check_kind(data, cls.kind)
        if "reward" not in data:
            raise ProtocolError("missing field 'reward'")
        reward = data["reward"]
        if isinstance(reward, bool) or not isinstance(reward, int | float | np.number):
            raise ProtocolError(f"field 'reward' must be a number, got {reward!r}")
        if not math.isfinite(float(reward)):
            raise ProtocolError(f"field 'reward' must be finite, got {reward!r}")
        return cls(
            phase=wire_int(data, "phase", 1),
            client=wire_int(data, "client"),
            reward=float(reward),
        )


class CentralHCTServer(InboxServer[CentralHCTReport]):
    """Centralised HCT on the global objective ([FX]'s baseline): one round per phase, T phases.

    Parameters of the HCT are those of :class:`~fedxab.algorithms.hct.HCT`; ``rho`` defaults to
    0.75, the value [FX] used for this baseline. The server tells HCT the mean of the
    rewards received for the round, in client order (all M, or the quorum the caller closed on).
    """

    SENDS_RAW_REWARDS = True

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        nu: float = 1.0,
        rho: float = 0.75,
        preset: str = "practical",
        c: float | None = None,
        c1: float | None = None,
        delta: float | None = None,
        k: int = 2,
        split: str = "random",
        noise_free: bool = False,
        seed: int = 0,
        edges: Sequence[Sequence[float] | None] | None = None,
    ) -> None:
        self.n_clients = check_positive_int("federation.clients", n_clients)
        self.budget = check_positive_int("run.budget", budget)
        self.hct = HCT(
            domain,
            nu=nu,
            rho=rho,
            preset=preset,
            c=c,
            c1=c1,
            delta=delta,
            budget=budget,
            k=k,
            split=split,
            noise_free=noise_free,
            seed=seed,
            edges=edges,
        )
        self.dim = self.hct.partition.dim
        self.phase = 0
        self._current: CentralHCTBroadcast | None = None
        self._inbox: ReportInbox[CentralHCTReport] = ReportInbox(self.n_clients)
        self._finished: Finished | None = None

    def start(self) -> CentralHCTBroadcast:
        if self.phase != 0:
            raise ProtocolError("start() called twice")
        return self._next_round()

    def _next_round(self) -> CentralHCTBroadcast:
        self.phase += 1
        self._inbox.open(self.phase)
        self._current = CentralHCTBroadcast(self.phase, self.hct.ask())
        return self._current

    def check_report(self, report: CentralHCTReport) -> None:
        if not math.isfinite(report.reward):
            raise ProtocolError(f"field 'reward' must be finite, got {report.reward!r}")

    def close_phase(self) -> CentralHCTBroadcast | Finished:
        """Tell HCT the round's average reward; next round, or finish after ``T`` rounds."""
        if self._finished is not None:
            return self._finished
        rewards = [r.reward for r in self._inbox.in_order()]
        self.hct.tell(self._current.point, sum(rewards) / len(rewards))  # type: ignore[union-attr]
        if self.hct.t >= self.budget:
            self._inbox.close()
            self._finished = Finished(self.phase, self.hct.recommend())
            return self._finished
        return self._next_round()

    def recommend(self) -> np.ndarray:
        return self.hct.recommend()


class CentralHCTClient:
    """Centralised HCT, client side: evaluate the broadcast point once, report the raw reward."""

    def __init__(
        self,
        client_id: int,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        budget: int,
    ) -> None:
        self.client_id = client_id
        self.dim = as_domain(domain).shape[0]
        self.budget = check_positive_int("run.budget", budget)
        self.used = 0
        self._replies: ReplyCache[CentralHCTReport] = ReplyCache()

    def answer(self, broadcast: CentralHCTBroadcast, evaluate: Evaluate) -> CentralHCTReport:
        """One pull at the broadcast point; a redelivered broadcast is answered from cache."""
        cached = self._replies.get(broadcast.phase)
        if cached is not None:
            return cached
        if self.used >= self.budget:
            raise ProtocolError(
                f"client {self.client_id} has used its budget of {self.budget} pulls; "
                f"no pull left for phase {broadcast.phase}"
            )
        _check_point(broadcast.point, self.dim, "point")
        reward = one_reward(evaluate, np.asarray(broadcast.point, dtype=float))
        self.used += 1
        return self._replies.put(
            broadcast.phase, CentralHCTReport(broadcast.phase, self.client_id, reward)
        )
