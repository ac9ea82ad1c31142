"""Fed1-UCB (Shi & Shen 2021) on a random finite set of arms: the federated multi-armed baseline.

The Fed-PNE and PF-PNE papers compare against Fed1-UCB run on a finite mesh of the domain
([FX] and [PF], experiments). Implemented as in the reference code ([EXT:FMAB],
``Fed1_UCB_CR.py``) that [FX] says it followed:

- **arms** (:func:`fed1ucb_arms`): ``K`` values per dimension on a random-offset grid, ``K^D`` arms,
  arm ``j`` of a dimension ``[a, b]`` at ``a + u + j (b - a)/K`` with ``u ~ U(0, (b - a)/K)``
  drawn per dimension from the stream ``(seed, "fed1ucb-arms")``: server and clients built with
  the same seed hold the same arms, and a new run seed gives new offsets (fedxab's choice,
  K = 20 by default). For ``D > 2`` the default is ``n_arms = 1000`` arms drawn uniformly in the
  domain, as [PF] did for 10-D Rastrigin; ``arm_set`` forces either kind;
- **phase p**: every client pulls every active arm ``int(kappa log T)`` times (``kappa = 1``,
  fedxab's choice: the reference default 10 never finishes a phase at these horizons), arm after
  arm in increasing index, as one batch, and reports its *cumulative* local mean of every active arm
  (all its pulls of that arm since the start, not only this phase's);
- **server**: averages the reported means (unweighted: every client pulled every arm equally
  often), width ``w = sqrt(4 sigma^2 log T / (M n))`` with ``sigma = 1/2`` and ``n`` the cumulative
  pulls per client of an active arm (the same for every active arm), and eliminates every arm with
  ``mean + w < max_mean - w`` (strict), the maximum taken over the active arms (the reference
  code takes ``nanmax`` over all arms, including the frozen means of arms eliminated earlier; the
  algorithm of the paper compares active arms only, which is what is done here);
- **commit**: when one arm is left, one last broadcast tells every client to pull it until its
  budget ``T`` is used; the clients answer with an empty acknowledgement (no statistics) and the
  server finishes. No other communication happens after that.

If a phase does not fit in the remaining budget, clients pull in the prescribed order until ``T``
and report no statistics; the truncated phase is not aggregated (as Fed-PNE). Every
client uses exactly ``T`` pulls.

The recommendation is the active arm with the highest averaged mean after the last completed
phase (ties to the lowest arm index), the committed arm after a commit, and arm 0 before any
phase completed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedxab.algorithms.protocol import (
    Evaluate,
    Finished,
    InboxServer,
    MeansReport,
    ReplyCache,
    ReportInbox,
    check_kind,
    check_means_report,
    evaluate_checked,
    wire_array,
    wire_bool,
    wire_int,
)
from fedxab.domain import as_domain
from fedxab.errors import ConfigError, ProtocolError
from fedxab.seeding import stream
from fedxab.validation import check_choice, check_positive, check_positive_int

ARM_SETS = ("auto", "grid", "random")


# ----------------------------------------------------------------------------------- arms
def fed1ucb_arms(
    domain: Sequence[Sequence[float]] | np.ndarray,
    *,
    arms_per_dim: int = 20,
    arm_set: str = "auto",
    n_arms: int = 1000,
    seed: int = 0,
) -> np.ndarray:
    """The arms of a Fed1-UCB run, shape (n, D), read-only.

    ``arm_set="grid"``: the random-offset grid, ``K^D`` arms with ``K = arms_per_dim``, in C order
    (the last coordinate varies fastest). ``"random"``: ``n_arms`` points drawn uniformly in the
    domain. ``"auto"`` (default): the grid for ``D <= 2``, random arms for ``D > 2``.
    """
    bounds = as_domain(domain)
    check_choice("algorithm.arm_set", arm_set, ARM_SETS)
    k = check_positive_int("algorithm.arms_per_dim", arms_per_dim)
    dim = bounds.shape[0]
    lower, width = bounds[:, 0], bounds[:, 1] - bounds[:, 0]
    rng = stream(seed, "fed1ucb-arms")
    if arm_set == "random" or (arm_set == "auto" and dim > 2):
        n = check_positive_int("algorithm.n_arms", n_arms)
        arms = lower + width * rng.random((n, dim))  # in [a, b)
    else:
        step = width / k
        offset = rng.uniform(0.0, step)  # u ~ U(0, (b - a)/K), one per dimension
        axes = [lower[j] + offset[j] + step[j] * np.arange(k) for j in range(dim)]
        arms = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, dim)
    arms.setflags(write=False)
    return arms


def fed1ucb_width(n_clients: int, pulls: int, horizon: int, sigma: float = 0.5) -> float:
    """Confidence width ``sqrt(4 sigma^2 log T / (M n))`` ([EXT:FMAB]).

    ``n`` = cumulative pulls per client of the arm, ``M`` = clients whose means were averaged.
    """
    return math.sqrt(4.0 * sigma**2 * math.log(horizon) / (n_clients * pulls))


def fed1ucb_eliminate(means: np.ndarray, width: float) -> tuple[np.ndarray, int]:
    """``(survive, best)``: arm eliminated iff ``mean + w < max(mean) - w``; best = first argmax."""
    means = np.asarray(means, dtype=float)
    best = int(np.argmax(means))
    survive = ~(means + width < means[best] - width)
    return survive, best


# ------------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class Fed1UCBBroadcast:
    """Server -> clients: the active arms and the pulls per arm of this phase.

    ``commit=True``: the single surviving arm, to be pulled until the budget is used
    (``pulls_per_arm`` = the pulls left per client); the last message of the run.
    """

    phase: int
    arms: np.ndarray  # int64 arm indices, increasing
    pulls_per_arm: int
    commit: bool = False

    kind = "fed1ucb.broadcast"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "arms": self.arms,
            "pulls_per_arm": self.pulls_per_arm,
            "commit": self.commit,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Fed1UCBBroadcast:
        check_kind(data, cls.kind)
        arms = wire_array(data, "arms", "i")
        if arms.size == 0 or arms.min() < 0 or np.any(np.diff(arms) <= 0):
            raise ProtocolError("field 'arms' must be a non-empty increasing list of indices >= 0")
        commit = wire_bool(data, "commit")
        if commit and arms.size != 1:
            raise ProtocolError(f"a commit broadcast names exactly one arm, got {arms.size}")
        return cls(
            phase=wire_int(data, "phase", 1),
            arms=arms,
            pulls_per_arm=wire_int(data, "pulls_per_arm", 1),
            commit=commit,
        )


class Fed1UCBReport(MeansReport):
    """Client -> server: the cumulative local mean of every active arm.

    ``complete=False`` (and no means) answers a commit broadcast or a phase cut by the horizon.
    """

    kind = "fed1ucb.report"


@dataclass(frozen=True)
class Fed1UCBPhase:
    """What the server learnt in one completed elimination phase."""

    phase: int
    arms: np.ndarray  # active arm indices of the phase
    means: np.ndarray  # averaged cumulative means, one per active arm
    pulls: int  # cumulative pulls per client of each active arm (n)
    width: float
    best: int  # arm index of the best arm
    survivors: int
    reports: int


# --------------------------------------------------------------------------------- server
class Fed1UCBServer(InboxServer[Fed1UCBReport]):
    """The Fed1-UCB server state machine (Shi & Shen 2021, [EXT:FMAB])."""

    SENDS_RAW_REWARDS = False

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        arms_per_dim: int = 20,
        arm_set: str = "auto",
        n_arms: int = 1000,
        kappa: float = 1.0,
        sigma: float = 0.5,
        seed: int = 0,
        arms: np.ndarray | None = None,
    ) -> None:
        self.n_clients = check_positive_int("federation.clients", n_clients)
        self.budget = check_positive_int("run.budget", budget)
        self.kappa = check_positive("algorithm.kappa", kappa)
        self.sigma = check_positive("algorithm.sigma", sigma)
        self.arms = _arm_set(domain, arms, arms_per_dim, arm_set, n_arms, seed)
        # int(kappa log T) pulls per arm and phase; at least one so that tiny horizons progress.
        self.pulls_per_arm = max(1, int(self.kappa * math.log(self.budget)))
        self.phase = 0
        self.active = np.arange(len(self.arms), dtype=np.int64)
        self.used = 0  # pulls per client in completed phases
        self.pulls = 0  # cumulative pulls per client of each active arm
        self.history: list[Fed1UCBPhase] = []
        self._current: Fed1UCBBroadcast | None = None
        self._inbox: ReportInbox[Fed1UCBReport] = ReportInbox(n_clients)
        self._finished: Finished | None = None

    def start(self) -> Fed1UCBBroadcast | Finished:
        """The first phase's broadcast (a commit at once if the arm set has a single arm)."""
        if self.phase != 0:
            raise ProtocolError("start() called twice")
        return self._next_phase()

    def _next_phase(self) -> Fed1UCBBroadcast | Finished:
        if self.used >= self.budget:
            return self._finish()
        self.phase += 1
        self._inbox.open(self.phase)
        if len(self.active) == 1:
            self._current = Fed1UCBBroadcast(
                self.phase, self.active, self.budget - self.used, commit=True
            )
        else:
            self._current = Fed1UCBBroadcast(self.phase, self.active, self.pulls_per_arm)
        return self._current

    @property
    def phase_length(self) -> int:
        """Pulls per client in the current phase."""
        assert self._current is not None
        return len(self._current.arms) * self._current.pulls_per_arm

    @property
    def truncated(self) -> bool:
        """Whether the current phase is a commit or is cut by the horizon (no statistics)."""
        assert self._current is not None
        return self._current.commit or self.used + self.phase_length > self.budget

    def check_report(self, report: Fed1UCBReport) -> None:
        check_means_report(report, self.truncated, len(self.active))

    def close_phase(self) -> Fed1UCBBroadcast | Finished:
        """Average the reported means, eliminate, and open the next phase (or finish)."""
        if self._finished is not None:
            return self._finished
        reports = self._inbox.in_order()  # fixed client order (determinism)
        if self.truncated:  # commit done, or the horizon cut the phase: nothing to aggregate
            return self._finish()
        means = np.mean([r.means for r in reports], axis=0)
        self.pulls += self.pulls_per_arm
        width = fed1ucb_width(len(reports), self.pulls, self.budget, self.sigma)
        survive, best = fed1ucb_eliminate(means, width)
        self.history.append(
            Fed1UCBPhase(
                self.phase,
                self.active,
                means,
                self.pulls,
                width,
                int(self.active[best]),
                int(survive.sum()),
                len(reports),
            )
        )
        self.used += self.phase_length
        self.active = self.active[survive]
        return self._next_phase()

    def _finish(self) -> Finished:
        self._inbox.close()
        self._finished = Finished(self.phase, self.recommend())
        return self._finished

    def recommend_arm(self) -> int:
        """Index of the recommended arm (see the module docstring)."""
        if len(self.active) == 1:
            return int(self.active[0])
        if not self.history:
            return 0
        return self.history[-1].best

    def recommend(self) -> np.ndarray:
        """The recommended arm's point, shape (D,)."""
        return np.array(self.arms[self.recommend_arm()], dtype=float)


# --------------------------------------------------------------------------------- client
class Fed1UCBClient:
    """The Fed1-UCB client state machine: pulls, keeps cumulative per-arm sums, reports means."""

    def __init__(
        self,
        client_id: int,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        budget: int,
        arms_per_dim: int = 20,
        arm_set: str = "auto",
        n_arms: int = 1000,
        seed: int = 0,
        arms: np.ndarray | None = None,
    ) -> None:
        self.client_id = client_id
        self.budget = check_positive_int("run.budget", budget)
        self.arms = _arm_set(domain, arms, arms_per_dim, arm_set, n_arms, seed)
        self.sums = np.zeros(len(self.arms))
        self.counts = np.zeros(len(self.arms), dtype=np.int64)
        self.used = 0
        self._replies: ReplyCache[Fed1UCBReport] = ReplyCache()

    def answer(self, broadcast: Fed1UCBBroadcast, evaluate: Evaluate) -> Fed1UCBReport:
        """Pull every active arm ``pulls_per_arm`` times (one batch) and report cumulative means.

        A repeated broadcast (redelivery) gets the same report back without pulling again.
        """
        cached = self._replies.get(broadcast.phase)
        if cached is not None:
            return cached
        arms = broadcast.arms
        if arms.size and arms.max() >= len(self.arms):
            raise ProtocolError(
                f"arm index {int(arms.max())} out of range: this client has {len(self.arms)} arms "
                "(server and clients must be built with the same arm settings and seed)"
            )
        per_arm = broadcast.pulls_per_arm
        n_pulls = min(self.budget - self.used, len(arms) * per_arm)
        X = np.repeat(self.arms[arms], per_arm, axis=0)[:n_pulls]
        rewards = evaluate_checked(evaluate, X)
        self.used += n_pulls
        pulled = np.repeat(arms, per_arm)[:n_pulls]
        np.add.at(self.sums, pulled, rewards)
        np.add.at(self.counts, pulled, 1)
        if not broadcast.commit and n_pulls == len(arms) * per_arm:
            means = self.sums[arms] / self.counts[arms]
            report = Fed1UCBReport(broadcast.phase, self.client_id, True, means)
        else:
            report = Fed1UCBReport(broadcast.phase, self.client_id, False)
        return self._replies.put(broadcast.phase, report)


def _arm_set(
    domain: Sequence[Sequence[float]] | np.ndarray,
    arms: np.ndarray | None,
    arms_per_dim: int,
    arm_set: str,
    n_arms: int,
    seed: int,
) -> np.ndarray:
    """The run's arms: built from the settings, or ``arms`` (e.g. shared by an in-process run)."""
    if arms is None:
        return fed1ucb_arms(
            domain, arms_per_dim=arms_per_dim, arm_set=arm_set, n_arms=n_arms, seed=seed
        )
    dim = as_domain(domain).shape[0]
    arr = np.array(arms, dtype=float)
    if arr.ndim != 2 or arr.shape[1] != dim or len(arr) == 0:
        raise ConfigError("algorithm.arms", f"must have shape (n, {dim}), got {arr.shape}")
    arr.setflags(write=False)
    return arr
