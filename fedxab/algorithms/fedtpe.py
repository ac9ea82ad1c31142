"""Fed-TPE: federated Tree-structured Parzen Estimators with 1-bit labels (fedxab's own design).

Each site runs TPE (Bergstra et al. 2011, §4; :mod:`fedxab.algorithms.parzen`) on its own
objective; what it shares is, for each point it evaluated, the point and one bit: whether the
value is among the best fraction gamma of the site's own values (TPE's split, their eq. 2). The
values never leave the site, and a label is the same whatever the scale of a site's objective.

Phases (B = budget, I = ``n_init``, K = ``consensus``, R = B - I - K):

1. phase 1: every site evaluates I uniform points of the unit box (its own random stream);
2. phases 2 .. R + 1: the broadcast carries the federation's labelled points (every site's, as
   reported in the previous phase); each site evaluates one point, the candidate drawn from
   ``l`` with the largest ``log l(x) - log g(x)`` (EI ∝ l/g, [TPE] §4.1), where ``l`` is a
   Parzen estimator of its own good points (weight 1 each) and the other sites' good points
   (weight ``w_n = fed_weight * fed_decay / (fed_decay + n)`` each, n = the site's own
   evaluations: the federation's evidence fades as the site's own grows, as FTS-DE's
   ``1 - p_t`` does), and ``g`` the same of the bad points; it reports all its points and labels;
3. phase R + 2 (K > 0): the *consensus* phase. The server sends K candidates, the pooled good
   points with the largest pooled ``l/g`` (every site's points, equal weights); each site
   evaluates them and reports each one's mid-rank among its own earlier values, a number in
   [0, 1]. The recommendation is the candidate with the largest mean rank over the sites: a
   parameter set measured at every site. With K = 0 it is the top candidate, unmeasured.

Snapping: discrete coordinates are kept at their cells' centres (the point that decodes to the
value), and a site never proposes a point it has already evaluated (a deterministic objective
would pay twice for one answer); the consensus phase may repeat a site's own point.

What leaves a site: its evaluated points, one label per point, and K ranks at the end. That is
not a differential-privacy release (the points are exact); see docs/algorithms/fedtpe.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np

from fedxab.algorithms.parzen import KINDS, ParzenEstimator, snap
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
from fedxab.errors import ConfigError, ProtocolError
from fedxab.seeding import stream
from fedxab.validation import check_nonnegative, check_positive, check_positive_int

__all__ = ["FedTPEClient", "FedTPEServer", "TPEBroadcast", "TPEReport", "TPESettings"]


# ----------------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class TPEBroadcast:
    """Server -> sites: the pooled labelled ``points`` (N, D) with ``good`` (N,) in {0, 1} and
    their ``owner`` site (N,); in the consensus phase the K ``candidates`` (K, D) to rank."""

    phase: int
    points: np.ndarray
    good: np.ndarray
    owner: np.ndarray
    candidates: np.ndarray

    kind: ClassVar[str] = "tpe.broadcast"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "points": self.points,
            "good": self.good,
            "owner": self.owner,
            "candidates": self.candidates,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        check_kind(data, cls.kind)
        points = wire_array(data, "points", "f", ndim=2)
        good = wire_array(data, "good", "i")
        owner = wire_array(data, "owner", "i")
        candidates = wire_array(data, "candidates", "f", ndim=2)
        if good.shape != (len(points),) or owner.shape != (len(points),):
            raise ProtocolError("fields 'good' and 'owner' must hold one value per point")
        if good.size and (good.min() < 0 or good.max() > 1):
            raise ProtocolError("field 'good' must hold 0 or 1")
        if owner.size and owner.min() < 0:
            raise ProtocolError("field 'owner' must hold site ids >= 0")
        return cls(wire_int(data, "phase", 1), points, good, owner, candidates)


@dataclass(frozen=True)
class TPEReport:
    """Site -> server: every point it evaluated (n, D) and its label (n,); in the consensus
    phase, instead, each candidate's mid-rank among its own values (K,)."""

    phase: int
    client: int
    points: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))
    good: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    ranks: np.ndarray = field(default_factory=lambda: np.empty(0))

    kind: ClassVar[str] = "tpe.report"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "client": self.client,
            "points": self.points,
            "good": self.good,
            "ranks": self.ranks,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        check_kind(data, cls.kind)
        points = wire_array(data, "points", "f", ndim=2)
        good = wire_array(data, "good", "i")
        ranks = wire_array(data, "ranks", "f")
        if good.shape != (len(points),):
            raise ProtocolError("field 'good' must hold one label per point")
        if good.size and (good.min() < 0 or good.max() > 1):
            raise ProtocolError("field 'good' must hold 0 or 1")
        if ranks.size and (ranks.min() < 0 or ranks.max() > 1):
            raise ProtocolError("field 'ranks' must lie in [0, 1]")
        return cls(wire_int(data, "phase", 1), wire_int(data, "client"), points, good, ranks)


# ----------------------------------------------------------------------------------- settings
def _check_types(
    dim: int, kinds: Sequence[str] | None, levels: Sequence[int | None] | None
) -> tuple[tuple[str, ...], tuple[int | None, ...]]:
    """The coordinates' kinds and numbers of values (None: continuous), checked: all continuous
    by default; in a config ``levels`` may write 0 for a continuous coordinate."""
    kinds = ("float",) * dim if kinds is None else tuple(kinds)
    if len(kinds) != dim or any(k not in KINDS for k in kinds):
        raise ConfigError(
            "algorithm.kinds", f"must list {dim} of {', '.join(KINDS)} (one per dimension)"
        )
    raw = [None] * dim if levels is None else list(levels)
    if len(raw) != dim:
        raise ConfigError("algorithm.levels", f"must list {dim} values (one per dimension)")
    out: list[int | None] = []
    for kind, n in zip(kinds, raw, strict=True):
        n = None if n in (None, 0) else n
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ConfigError("algorithm.levels", f"must be integers >= 1 or 0, got {n!r}")
        if kind == "categorical" and n is None:
            raise ConfigError(
                "algorithm.levels", "a categorical dimension needs its number of choices"
            )
        out.append(n)
    return kinds, tuple(out)


@dataclass(frozen=True)
class TPESettings:
    """What the server and every site must agree on."""

    dim: int
    n_clients: int
    budget: int
    n_init: int = 5
    consensus: int = 3
    gamma: float = 0.15
    gamma_max: int = 25
    sigma0: float = 0.2
    categorical_eps: float = 0.5
    univariate: bool = False
    kinds: tuple[str, ...] = ()
    levels: tuple[int | None, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        check_positive_int("algorithm.n_init", self.n_init)
        if isinstance(self.consensus, bool) or not isinstance(self.consensus, int):
            raise ConfigError("algorithm.consensus", f"must be an integer >= 0, {self.consensus!r}")
        check_nonnegative("algorithm.consensus", self.consensus)
        check_positive("algorithm.gamma", self.gamma, upper=1.0)
        check_positive_int("algorithm.gamma_max", self.gamma_max)
        check_positive("algorithm.sigma0", self.sigma0)
        if not isinstance(self.univariate, bool):
            raise ConfigError("algorithm.univariate", f"must be true or false, {self.univariate!r}")
        if not 0 < self.categorical_eps <= 1:
            raise ConfigError(
                "algorithm.categorical_eps", f"must lie in (0, 1], got {self.categorical_eps!r}"
            )
        if self.budget < self.n_init + self.consensus:
            raise ConfigError(
                "run.budget",
                f"must be at least algorithm.n_init + algorithm.consensus = "
                f"{self.n_init + self.consensus}, got {self.budget}",
            )

    @property
    def rounds(self) -> int:
        """R, the TPE phases after the initial one."""
        return self.budget - self.n_init - self.consensus

    @property
    def last_phase(self) -> int:
        return self.rounds + 1 + (1 if self.consensus else 0)

    def is_consensus(self, phase: int) -> bool:
        return self.consensus > 0 and phase == self.last_phase

    def n_good(self, n: int) -> int:
        """How many of n values are "good": ``min(ceil(gamma n), gamma_max)``, at least 1."""
        return max(1, min(math.ceil(self.gamma * n), self.gamma_max))

    def estimator(self, points: np.ndarray, weights: np.ndarray) -> ParzenEstimator:
        return ParzenEstimator(
            points,
            weights,
            self.kinds,
            self.levels,
            sigma0=self.sigma0,
            categorical_eps=self.categorical_eps,
            univariate=self.univariate,
        )


def _settings(domain: Any, arguments: Mapping[str, Any]) -> tuple[np.ndarray, TPESettings]:
    box = as_domain(domain)
    kinds, levels = _check_types(box.shape[0], arguments["kinds"], arguments["levels"])
    shared = (
        "n_clients",
        "budget",
        "n_init",
        "consensus",
        "gamma",
        "gamma_max",
        "sigma0",
        "univariate",
    )
    settings = TPESettings(
        dim=box.shape[0],
        **{k: arguments[k] for k in shared},
        categorical_eps=arguments["categorical_eps"],
        kinds=kinds,
        levels=levels,
        seed=arguments["seed"],
    )
    return box, settings


def to_domain(box: np.ndarray, U: np.ndarray) -> np.ndarray:
    """Points of ``[0, 1]^D`` mapped linearly to the box."""
    return box[:, 0] + U * (box[:, 1] - box[:, 0])


def log_ratio(settings: TPESettings, X: np.ndarray, good: np.ndarray, w: np.ndarray) -> Any:
    """``x -> log l(x) - log g(x)`` for labelled points ``X`` with weights ``w`` ([TPE] §4.1)."""
    is_good = good.astype(bool)
    l_est = settings.estimator(X[is_good], w[is_good])
    g_est = settings.estimator(X[~is_good], w[~is_good])
    return lambda Z: l_est.log_pdf(Z) - g_est.log_pdf(Z)


# ------------------------------------------------------------------------------------- server
class FedTPEServer(InboxServer[TPEReport]):
    """The server of Fed-TPE: pools the sites' labelled points, picks the consensus candidates,
    and recommends the candidate the sites rank highest."""

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        n_init: int = 5,
        consensus: int = 3,
        gamma: float = 0.15,
        gamma_max: int = 25,
        sigma0: float = 0.2,
        categorical_eps: float = 0.5,
        univariate: bool = False,
        kinds: Sequence[str] | None = None,
        levels: Sequence[int | None] | None = None,
        seed: int = 0,
    ) -> None:
        check_positive_int("federation.clients", n_clients)
        self.domain, self.settings = _settings(domain, locals())
        self.n_clients = n_clients
        dim = self.settings.dim
        self.points = np.empty((0, dim))
        self.good = np.empty(0, dtype=np.int64)
        self.owner = np.empty(0, dtype=np.int64)
        self.candidates = np.empty((0, dim))
        self.ranks: np.ndarray | None = None  # (sites, K) in the consensus phase
        self.phase = 0
        self._inbox: ReportInbox[TPEReport] = ReportInbox(n_clients)
        self._finished: Finished | None = None

    def start(self) -> TPEBroadcast:
        if self.phase != 0:
            raise ProtocolError("start() called twice")
        return self._open(1)

    def _open(self, phase: int) -> TPEBroadcast:
        self.phase = phase
        self._inbox.open(phase)
        if self.settings.is_consensus(phase):
            self.candidates = self._candidates()
        return TPEBroadcast(phase, self.points, self.good, self.owner, self.candidates)

    def check_report(self, report: TPEReport) -> None:
        s = self.settings
        if s.is_consensus(self.phase):
            if report.ranks.shape != (len(self.candidates),) or report.points.size:
                raise ProtocolError(
                    f"field 'ranks' must hold {len(self.candidates)} values and 'points' none"
                )
            return
        used = s.n_init + self.phase - 1
        if report.points.shape != (used, s.dim) or report.ranks.size:
            raise ProtocolError(
                f"field 'points' must have shape ({used}, {s.dim}), got {report.points.shape}"
            )
        if not np.all((report.points >= 0) & (report.points <= 1)):
            raise ProtocolError("field 'points' must lie in the unit box")

    def close_phase(self) -> TPEBroadcast | Finished:
        """Pool this phase's labelled points (or ranks) and open the next phase, or finish."""
        if self._finished is not None:
            return self._finished
        reports = self._inbox.in_order()
        if self.settings.is_consensus(self.phase):
            self.ranks = np.array([r.ranks for r in reports])
        else:
            self.points = np.vstack([r.points for r in reports])
            self.good = np.concatenate([r.good for r in reports])
            self.owner = np.concatenate([np.full(len(r.good), r.client) for r in reports])
        if self.phase == self.settings.last_phase:
            self._inbox.close()
            self._finished = Finished(self.phase, self.recommend())
            return self._finished
        return self._open(self.phase + 1)

    def ranked_pool(self) -> np.ndarray:
        """The distinct pooled points, best first: those some site labelled good before the
        others, each group by decreasing pooled ``log l - log g`` (every point weight 1)."""
        unique, inverse = np.unique(self.points, axis=0, return_inverse=True)
        good = np.zeros(len(unique), dtype=np.int64)
        np.maximum.at(good, inverse.reshape(-1), self.good)
        if self.good.all() or not self.good.any():  # one density would be the prior alone
            scores = np.zeros(len(unique))
        else:
            ratio = log_ratio(self.settings, self.points, self.good, np.ones(len(self.good)))
            scores = ratio(unique)
        return unique[np.lexsort((-scores, -good))]

    def _candidates(self) -> np.ndarray:
        """The K consensus candidates: the first K of :meth:`ranked_pool` (repeated in turn if
        the pool holds fewer distinct points)."""
        pool = self.ranked_pool()
        return pool[np.arange(self.settings.consensus) % len(pool)]

    def recommend(self) -> np.ndarray:
        """The candidate with the largest mean rank over the sites (consensus phase; ties: the
        earlier candidate), else the first of :meth:`ranked_pool`; the box's centre before any
        report."""
        if self.ranks is not None:
            best = int(np.argmax(self.ranks.mean(axis=0)))
            return to_domain(self.domain, self.candidates[best : best + 1])[0]
        if len(self.points) == 0:
            return self.domain.mean(axis=1)
        return to_domain(self.domain, self.ranked_pool()[:1])[0]


# --------------------------------------------------------------------------------------- site
class FedTPEClient:
    """A site of Fed-TPE: TPE on its own values with the federation's labelled points."""

    def __init__(
        self,
        client_id: int,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        fed_weight: float = 1.0,
        fed_decay: float = 20.0,
        n_candidates: int = 64,
        n_init: int = 5,
        consensus: int = 3,
        gamma: float = 0.15,
        gamma_max: int = 25,
        sigma0: float = 0.2,
        categorical_eps: float = 0.5,
        univariate: bool = False,
        kinds: Sequence[str] | None = None,
        levels: Sequence[int | None] | None = None,
        seed: int = 0,
    ) -> None:
        if isinstance(client_id, bool) or not isinstance(client_id, int) or client_id < 0:
            raise ConfigError("client_id", f"must be an integer >= 0, got {client_id!r}")
        self.client_id = client_id
        self.domain, self.settings = _settings(domain, locals())
        self.fed_weight = check_nonnegative("algorithm.fed_weight", fed_weight)
        self.fed_decay = check_positive("algorithm.fed_decay", fed_decay)
        self.n_candidates = check_positive_int("algorithm.n_candidates", n_candidates)
        self.seed = seed
        self.X = np.empty((0, self.settings.dim))  # own points (unit box), in order
        self.y = np.empty(0)
        self.used = 0
        self._replies: ReplyCache[TPEReport] = ReplyCache()

    def answer(self, broadcast: TPEBroadcast, evaluate: Evaluate) -> TPEReport:
        """Phase 1: the initial points; then one TPE point per phase; last, rank the
        consensus candidates."""
        cached = self._replies.get(broadcast.phase)
        if cached is not None:
            return cached
        return self._replies.put(broadcast.phase, self._round(broadcast, evaluate))

    def _round(self, broadcast: TPEBroadcast, evaluate: Evaluate) -> TPEReport:
        s = self.settings
        rng = stream(self.seed, "tpe-site", self.client_id, broadcast.phase)
        if s.is_consensus(broadcast.phase):
            return self._rank(broadcast, evaluate)
        if broadcast.phase == 1:
            U = snap(rng.random((s.n_init, s.dim)), s.levels)
        else:
            if broadcast.points.shape[1:] != (s.dim,):
                raise ProtocolError(f"field 'points' must have {s.dim} columns")
            U = self._propose(broadcast, rng)[None]
        self._observe(U, evaluate)
        return TPEReport(broadcast.phase, self.client_id, self.X.copy(), self.labels())

    def _observe(self, U: np.ndarray, evaluate: Evaluate) -> np.ndarray:
        rewards = evaluate_checked(evaluate, to_domain(self.domain, U))
        self.X = np.vstack([self.X, U])
        self.y = np.concatenate([self.y, rewards])
        self.used += len(U)
        return rewards

    def labels(self) -> np.ndarray:
        """1 for the site's ``n_good(n)`` best values (ties: the earlier point), else 0."""
        order = np.argsort(-self.y, kind="stable")
        good = np.zeros(len(self.y), dtype=np.int64)
        good[order[: self.settings.n_good(len(self.y))]] = 1
        return good

    def fed_point_weight(self) -> float:
        """``w_n = fed_weight * fed_decay / (fed_decay + n)``, n = own evaluations so far."""
        return self.fed_weight * self.fed_decay / (self.fed_decay + len(self.y))

    def _propose(self, broadcast: TPEBroadcast, rng: np.random.Generator) -> np.ndarray:
        """The candidate from ``l`` of largest ``log l - log g`` that is not already evaluated
        here ([TPE] §4.1); a uniform point if every candidate is a repeat."""
        s = self.settings
        others = broadcast.owner != self.client_id
        X = np.vstack([self.X, broadcast.points[others]])
        good = np.concatenate([self.labels(), broadcast.good[others]])
        w = np.concatenate([np.ones(len(self.y)), np.full(others.sum(), self.fed_point_weight())])
        keep = w > 0
        X, good, w = X[keep], good[keep], w[keep]
        is_good = good.astype(bool)
        l_est = s.estimator(X[is_good], w[is_good])
        g_est = s.estimator(X[~is_good], w[~is_good])
        candidates = snap(l_est.sample(rng, self.n_candidates), s.levels)
        fresh = ~(candidates[:, None, :] == self.X[None, :, :]).all(axis=2).any(axis=1)
        if not fresh.any():
            return snap(rng.random(s.dim), s.levels)
        candidates = candidates[fresh]
        scores = l_est.log_pdf(candidates) - g_est.log_pdf(candidates)
        return candidates[int(np.argmax(scores))]

    def _rank(self, broadcast: TPEBroadcast, evaluate: Evaluate) -> TPEReport:
        """Evaluate the K candidates; report each one's mid-rank among the earlier values."""
        earlier = self.y.copy()
        values = self._observe(np.asarray(broadcast.candidates), evaluate)
        below = (earlier[None, :] < values[:, None]).sum(axis=1)
        ties = (earlier[None, :] == values[:, None]).sum(axis=1)
        ranks = (below + 0.5 * ties) / max(len(earlier), 1)
        empty = np.empty((0, self.settings.dim))
        return TPEReport(broadcast.phase, self.client_id, empty, np.empty(0, dtype=np.int64), ranks)
