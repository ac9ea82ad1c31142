"""FTS, FTS-DE, DP-FTS and DP-FTS-DE: federated Thompson sampling with distributed exploration.

Dai, Low & Jaillet 2021 ([DP]), Algorithm 1 (server) and Algorithm 2 (agent). One code
path; the paper's family of algorithms is a matter of parameters:

======================  =========  ===========  ============  ==============================
name                    regions P  weights      init region   subsample / clip / noise
======================  =========  ===========  ============  ==============================
FTS (server-based)      1          uniform      whole         no (:class:`FTSDEServer`)
FTS-DE                  P > 1      adaptive     home          no
DP-FTS                  1          uniform      whole         yes (:class:`DPFTSDEServer`)
DP-FTS-DE               P > 1      adaptive     home          yes
======================  =========  ===========  ============  ==============================

(standard TS without communication is :mod:`fedxab.algorithms.ts`). The algorithm works on the
normalised domain ``[0, 1]^D`` and maps points to the objective's box to evaluate them.

Phases: phase 1 is round 0 (initialisation: ``n_init`` random points in the agent's home region,
or the whole domain); phase ``t + 1`` is BO iteration t = 1..T with T = budget - n_init.
Each phase's broadcast carries the previous round's aggregate ``(P, M)`` (Algo. 2 uses round
t - 1's vectors at iteration t); each report carries the agent's fresh ω sample. The
aggregate of round t is released for rounds 0..T-1 only: the last phase's vectors would never be
used, and the paper's epsilon counts exactly T releases, so the last report carries no ω.

Server aggregation, round r: ``phi`` = the weights of round r (:mod:`fts_schedules`); non-private:
``omega^(i) = sum_n phi_n^(i) omega_n`` over all agents. Private: Poisson subsample (rate q), clip
each vector to ``S / sqrt(P)``, ``omega^(i) = (1/q) sum_{n in S_t} phi_n^(i) omega_hat_n`` and add
``N(0, (z phi_max S / q)^2)`` per coordinate; one subsampled Gaussian event (q, z) per agent per
release for the ledger. ``phi_max`` is the round's global maximum (paper, default) or per region
(``phi_max_scope="region"``, the authors' code, also valid). An empty subsample gives pure noise
(default) or, with ``empty="uniform"``, the release's ``U[0,1]^M`` vectors.

Central DP: the trusted server checks each agent's budget before a release through its gates
(``server.gates``, :mod:`fedxab.privacy.gate`); an agent whose next release would exceed its budget
is left out of this and every later aggregate (it keeps optimising on its own) and recorded in
:attr:`DPFTSDEServer.refused`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np

from fedxab.algorithms.acquisition import (
    DEFAULT_CANDIDATES,
    DEFAULT_OWN_FEATURES,
    DEFAULT_RESTARTS,
    OWN_TS_SAMPLERS,
    AcquisitionMaximiser,
    SEHyperparameters,
    fit_se_hyperparameters,
    own_ts_step,
)
from fedxab.algorithms.blas import single_threaded_blas
from fedxab.algorithms.fts_schedules import (
    P_SCHEDULES,
    WEIGHT_SCHEDULES,
    a_schedule,
    p_own,
    region_weights,
)
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
from fedxab.algorithms.rff import (
    FeatureFunction,
    RandomFeatures,
    WeightPosterior,
    check_categories,
    model_inputs,
)
from fedxab.algorithms.subregions import SubRegions
from fedxab.domain import as_domain
from fedxab.errors import ConfigError, ProtocolError
from fedxab.privacy.mechanisms import PrivacyEvent, clip_l2
from fedxab.privacy.release import PrivacyBudgetExceeded, ReleaseGate
from fedxab.seeding import stream
from fedxab.validation import check_choice, check_positive, check_positive_int

__all__ = [
    "DPFTSDEServer",
    "FTSBroadcast",
    "FTSDEClient",
    "FTSDEServer",
    "FTSReport",
    "FTSSettings",
]

PHI_MAX_SCOPES = ("global", "region")
EMPTY_POLICIES = ("noise", "uniform")
INIT_REGIONS = ("home", "whole")


# ----------------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class FTSBroadcast:
    """Server -> agents: phase p (round p - 1) and round p - 2's aggregate ``vectors`` (P, M),
    empty (0, M) in phase 1; ``last`` says the agents need not send a vector back."""

    phase: int
    vectors: np.ndarray
    last: bool = False

    kind: ClassVar[str] = "fts.broadcast"

    def to_wire(self) -> dict[str, Any]:
        return {"kind": self.kind, "phase": self.phase, "vectors": self.vectors, "last": self.last}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        check_kind(data, cls.kind)
        last = data.get("last")
        if not isinstance(last, bool):
            raise ProtocolError(f"field 'last' must be a boolean, got {last!r}")
        vectors = wire_array(data, "vectors", "f", ndim=2)
        phase = wire_int(data, "phase", 1)
        if (phase == 1) != (vectors.shape[0] == 0):
            raise ProtocolError("field 'vectors' must be empty in phase 1 and only there")
        return cls(phase, vectors, last)


@dataclass(frozen=True)
class FTSReport:
    """Agent -> server: its ω sample of this round (M,), empty in the last phase."""

    phase: int
    client: int
    omega: np.ndarray = field(default_factory=lambda: np.empty(0))

    kind: ClassVar[str] = "fts.report"

    def to_wire(self) -> dict[str, Any]:
        return {"kind": self.kind, "phase": self.phase, "client": self.client, "omega": self.omega}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        check_kind(data, cls.kind)
        return cls(
            phase=wire_int(data, "phase", 1),
            client=wire_int(data, "client"),
            omega=wire_array(data, "omega", "f"),
        )


# ----------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class FTSSettings:
    """What the server and every agent must agree on."""

    dim: int
    n_clients: int
    budget: int
    n_init: int = 10
    n_features: int = 100
    lengthscale: float = 0.01
    signal_variance: float = 1.0
    noise_variance: float = 1e-6
    normalize_features: bool = True
    regions: int = 1
    weights: str = "real"
    a: float = 15.0
    init_region: str = "home"
    grid_size: int | None = None
    seed: int = 0
    categories: tuple[int | None, ...] | None = None
    """Per coordinate, a categorical's number of choices (None: not categorical), from the
    shared search space: the kernel sees those coordinates one-hot (:func:`model_inputs`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "categories", check_categories(self.dim, self.categories))
        check_positive_int("algorithm.n_init", self.n_init)
        check_positive_int("algorithm.n_features", self.n_features)
        check_positive("algorithm.lengthscale", self.lengthscale)
        check_positive("algorithm.signal_variance", self.signal_variance)
        check_positive("algorithm.noise_variance", self.noise_variance)
        check_positive_int("algorithm.regions", self.regions)
        check_choice("algorithm.weights", self.weights, WEIGHT_SCHEDULES)
        check_choice("algorithm.init_region", self.init_region, INIT_REGIONS)
        check_positive("algorithm.a", self.a)
        if self.budget <= self.n_init:
            raise ConfigError(
                "run.budget",
                f"must exceed algorithm.n_init = {self.n_init} (the initial points), "
                f"got {self.budget}",
            )
        if self.grid_size is not None:
            check_positive_int("algorithm.grid_size", self.grid_size)
            if self.grid_size**self.dim > 10**6:
                raise ConfigError(
                    "algorithm.grid_size",
                    f"{self.grid_size}^{self.dim} grid points is too many; leave grid_size out "
                    "to search the continuous domain",
                )
            grid = self.grid()
            assert grid is not None  # grid_size is set
            covered = np.unique(self.layout().region_of(grid))
            if covered.size != self.regions:
                raise ConfigError(
                    "algorithm.regions",
                    f"{self.regions} sub-regions of a {self.grid_size}-point grid leave some "
                    "without any grid point; use fewer regions or a finer grid",
                )

    @property
    def rounds(self) -> int:
        """T, the BO iterations after initialisation."""
        return self.budget - self.n_init

    def features(self) -> RandomFeatures:
        """The shared random features, the same for every party."""
        return RandomFeatures.from_seed(
            self.dim,
            self.n_features,
            self.lengthscale,
            self.seed,
            signal_variance=self.signal_variance,
            normalize=self.normalize_features,
            categories=self.categories,
        )

    def layout(self) -> SubRegions:
        return SubRegions(self.dim, self.regions)

    def grid(self) -> np.ndarray | None:
        """The discrete normalised domain (G^D points), or None (continuous)."""
        if self.grid_size is None:
            return None
        axes = [np.linspace(0.0, 1.0, self.grid_size)] * self.dim
        return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, self.dim)

    def weights_at(self, round_: int) -> np.ndarray:
        """The (P, N) aggregation weights of round ``round_``; uniform when P = 1."""
        homes = np.arange(self.n_clients) % self.regions
        a_t = 1.0 if self.regions == 1 else a_schedule(round_, self.weights, self.a)
        return region_weights(homes, self.regions, a_t)


@functools.lru_cache(maxsize=4)
def _grid_features(settings: FTSSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid, the shared features at every grid point and each point's sub-region, computed
    once and shared by every agent of a run: the federated branch on a grid is then one
    product per query. Read-only arrays."""
    grid = settings.grid()
    assert grid is not None
    arrays = (grid, settings.features()(grid), settings.layout().region_of(grid))
    for array in arrays:
        array.setflags(write=False)
    return arrays


_SHARED = tuple(f.name for f in dataclasses.fields(FTSSettings) if f.name != "dim")


def _settings(domain: Any, arguments: Mapping[str, Any]) -> tuple[np.ndarray, FTSSettings]:
    """The domain box and the :class:`FTSSettings` made of the constructor ``arguments`` that
    are settings: the server and every agent build them from the same configuration."""
    box = as_domain(domain)
    return box, FTSSettings(dim=box.shape[0], **{k: arguments[k] for k in _SHARED})


# ------------------------------------------------------------------------------------- server
class FTSDEServer(InboxServer[FTSReport]):
    """The server of FTS / FTS-DE ([DP] Algorithm 1 without privacy)."""

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        n_init: int = 10,
        n_features: int = 100,
        lengthscale: float = 0.01,
        signal_variance: float = 1.0,
        noise_variance: float = 1e-6,
        normalize_features: bool = True,
        regions: int = 1,
        weights: str = "real",
        a: float = 15.0,
        init_region: str = "home",
        grid_size: int | None = None,
        seed: int = 0,
        categories: Sequence[int | None] | None = None,
    ) -> None:
        check_positive_int("federation.clients", n_clients)
        self.domain, self.settings = _settings(domain, locals())
        self.n_clients = n_clients
        self.seed = seed
        self.features = self.settings.features()
        self.layout = self.settings.layout()
        self.phase = 0
        self.vectors = np.empty((0, self.settings.n_features))
        self._inbox: ReportInbox[FTSReport] = ReportInbox(n_clients)
        self._finished: Finished | None = None

    @property
    def last_phase(self) -> int:
        return self.settings.rounds + 1

    def start(self) -> FTSBroadcast:
        if self.phase != 0:
            raise ProtocolError("start() called twice")
        return self._open(1)

    def _open(self, phase: int) -> FTSBroadcast:
        self.phase = phase
        self._inbox.open(phase)
        return FTSBroadcast(phase, self.vectors, phase == self.last_phase)

    def check_report(self, report: FTSReport) -> None:
        want = 0 if self.phase == self.last_phase else self.settings.n_features
        if report.omega.shape != (want,):
            raise ProtocolError(f"field 'omega' must hold {want} values, got {report.omega.shape}")

    def close_phase(self) -> FTSBroadcast | Finished:
        """Aggregate this round's vectors and open the next phase, or finish."""
        if self._finished is not None:
            return self._finished
        reports = {r.client: r.omega for r in self._inbox.in_order()}
        if self.phase == self.last_phase:
            self._inbox.close()
            self._finished = Finished(self.phase, self.recommend())
            return self._finished
        self.vectors = self._aggregate(self.phase - 1, reports)
        return self._open(self.phase + 1)

    def _aggregate(self, round_: int, reports: dict[int, np.ndarray]) -> np.ndarray:
        """FTS / FTS-DE: ``sum_n phi_n^(i) omega_n`` over the agents that reported."""
        weights = self.settings.weights_at(round_)
        ids = sorted(reports)
        return weights[:, ids] @ np.array([reports[m] for m in ids])

    def recommend(self) -> np.ndarray:
        """The maximiser of the last released aggregate (post-processing), mapped to the domain;
        the domain's centre before any release."""
        if self.vectors.shape[0] == 0:
            return self.domain.mean(axis=1)
        f = FeatureFunction(
            self.features,
            self.vectors if self.settings.regions > 1 else self.vectors[0],
            self.layout.region_of if self.settings.regions > 1 else None,
        )
        maximiser = AcquisitionMaximiser(grid=self.settings.grid())
        with single_threaded_blas():  # L-BFGS-B's small factorisations (see blas.py)
            u, _ = maximiser.argmax(f, stream(self.seed, "fts-recommend"))
        return to_domain(self.domain, u[None])[0]


class DPFTSDEServer(FTSDEServer):
    """The server of DP-FTS / DP-FTS-DE ([DP] Algorithm 1): subsampled, clipped and
    noised aggregates, one privacy event per agent per release, budgets checked first."""

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        q: float = 0.35,
        z: float = 1.0,
        clip: float = 22.0,
        phi_max_scope: str = "global",
        empty: str = "noise",
        **settings: Any,
    ) -> None:
        super().__init__(domain, **settings)
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0 < q <= 1:
            raise ConfigError("algorithm.q", f"the sampling rate must lie in (0, 1], got {q!r}")
        self.q = float(q)
        self.z = check_positive("algorithm.z", z)
        self.clip = check_positive("algorithm.clip", clip)
        self.phi_max_scope = check_choice("algorithm.phi_max_scope", phi_max_scope, PHI_MAX_SCOPES)
        self.empty = check_choice("algorithm.empty", empty, EMPTY_POLICIES)
        self.gates: dict[int, ReleaseGate] = {}
        self.refused: dict[int, int] = {}  # agent -> the phase whose release it refused
        self.diagnostics: list[dict[str, float]] = []

    @property
    def event(self) -> PrivacyEvent:
        """One release's privacy event for each agent: a Poisson-subsampled Gaussian."""
        return PrivacyEvent("gaussian", self.z, self.q, 1.0, 1, "")

    def _admitted(self) -> list[int]:
        """The agents whose budget allows this release (the others are refused from now on)."""
        admitted = []
        for m in range(self.n_clients):
            if m in self.refused:
                continue
            gate = self.gates.get(m)
            if gate is not None:
                try:
                    gate.admit(self.phase, self.event)
                except PrivacyBudgetExceeded:
                    self.refused[m] = self.phase
                    continue
            admitted.append(m)
        return admitted

    def _aggregate(self, round_: int, reports: dict[int, np.ndarray]) -> np.ndarray:
        """DP-FTS(-DE): subsample, clip, weighted sum / q, Gaussian noise."""
        settings, n_regions = self.settings, self.settings.regions
        rng = stream(self.seed, "fts-server", self.phase)
        sampled = rng.random(self.n_clients) < self.q  # Poisson sampling: N draws, always
        admitted = self._admitted()
        chosen = [m for m in admitted if sampled[m] and m in reports]
        weights = settings.weights_at(round_)
        bound = self.clip / math.sqrt(n_regions)
        clipped = [clip_l2(reports[m], bound) for m in chosen]
        phi_max = weights.max() if self.phi_max_scope == "global" else weights.max(axis=1)
        std = np.broadcast_to(self.z * phi_max * self.clip / self.q, (n_regions,))
        noise = rng.normal(0.0, 1.0, size=(n_regions, settings.n_features)) * std[:, None]
        if chosen:
            vectors = weights[:, chosen] @ np.array(clipped) / self.q + noise
        elif self.empty == "noise":
            vectors = noise
        else:
            vectors = rng.uniform(0.0, 1.0, size=(n_regions, settings.n_features))
        for m in admitted:
            gate = self.gates.get(m)
            if gate is not None:
                gate.record(self.phase, self.event)
        norms = np.linalg.norm([reports[m] for m in chosen], axis=1) if chosen else np.empty(0)
        self.diagnostics.append(
            {
                "phase": self.phase,
                "sampled": len(chosen),
                "clipped": int(np.sum(norms > bound)),
                "phi_max": float(np.max(phi_max)),
                "noise_std": float(np.max(std)),
            }
        )
        return vectors


def to_domain(box: np.ndarray, U: np.ndarray) -> np.ndarray:
    """Points of ``[0, 1]^D`` mapped linearly to the box (as the authors' code does)."""
    return box[:, 0] + U * (box[:, 1] - box[:, 0])


# -------------------------------------------------------------------------------------- agent
class FTSDEClient:
    """An agent of FTS / DP-FTS-DE ([DP] Algorithm 2)."""

    def __init__(
        self,
        client_id: int,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        p_schedule: str = "1/t",
        p_min: float = 0.0,
        own_sampler: str = "rff",
        own_features: int = DEFAULT_OWN_FEATURES,
        own_lengthscale: float = 1.0,
        own_signal_variance: float = 0.1,
        own_noise_variance: float = 1e-6,
        own_fit_every: int = 5,
        own_fit_restarts: int = 10,
        n_candidates: int = DEFAULT_CANDIDATES,
        n_restarts: int = DEFAULT_RESTARTS,
        replace_duplicates: bool = True,
        n_init: int = 10,
        n_features: int = 100,
        lengthscale: float = 0.01,
        signal_variance: float = 1.0,
        noise_variance: float = 1e-6,
        normalize_features: bool = True,
        regions: int = 1,
        weights: str = "real",
        a: float = 15.0,
        init_region: str = "home",
        grid_size: int | None = None,
        seed: int = 0,
        categories: Sequence[int | None] | None = None,
    ) -> None:
        if isinstance(client_id, bool) or not isinstance(client_id, int) or client_id < 0:
            raise ConfigError("client_id", f"must be an integer >= 0, got {client_id!r}")
        self.client_id = client_id
        self.domain, self.settings = _settings(domain, locals())
        self.p_schedule = check_choice("algorithm.p_schedule", p_schedule, P_SCHEDULES)
        if not 0 <= p_min <= 1:
            raise ConfigError("algorithm.p_min", f"must lie in [0, 1], got {p_min}")
        self.p_min = float(p_min)
        self.own_sampler = check_choice("algorithm.own_sampler", own_sampler, OWN_TS_SAMPLERS)
        self.own_features = check_positive_int("algorithm.own_features", own_features)
        self.own = SEHyperparameters(own_lengthscale, own_signal_variance, own_noise_variance)
        if (
            isinstance(own_fit_every, bool)
            or not isinstance(own_fit_every, int)
            or own_fit_every < 0
        ):
            raise ConfigError(
                "algorithm.own_fit_every",
                f"must be an integer >= 0 (0: never), got {own_fit_every!r}",
            )
        self.own_fit_every = own_fit_every
        self.own_fit_restarts = check_positive_int("algorithm.own_fit_restarts", own_fit_restarts)
        self.maximiser = AcquisitionMaximiser(
            grid=self.settings.grid(), n_candidates=n_candidates, n_restarts=n_restarts
        )
        self.replace_duplicates = bool(replace_duplicates)
        self.seed = seed
        self.features = self.settings.features()
        self.layout = self.settings.layout()
        self.home = self.layout.home(client_id)
        self.X = np.empty((0, self.settings.dim))  # normalised points queried, in order
        self.y = np.empty(0)
        self.branches: list[str] = []  # "own" or "federated", per BO iteration
        self.used = 0
        self._replies: ReplyCache[FTSReport] = ReplyCache()

    def answer(self, broadcast: FTSBroadcast, evaluate: Evaluate) -> FTSReport:
        """Phase 1: the initial points; later phases: one BO iteration; then a fresh ω."""
        cached = self._replies.get(broadcast.phase)
        if cached is not None:
            return cached
        with single_threaded_blas():
            return self._replies.put(broadcast.phase, self._round(broadcast, evaluate))

    def _round(self, broadcast: FTSBroadcast, evaluate: Evaluate) -> FTSReport:
        rng = stream(self.seed, "fts-agent", self.client_id, broadcast.phase)
        if broadcast.phase == 1:
            U = self._initial_points(rng)
        else:
            if broadcast.vectors.shape != (self.settings.regions, self.settings.n_features):
                raise ProtocolError(
                    f"field 'vectors' must have shape ({self.settings.regions}, "
                    f"{self.settings.n_features}), got {broadcast.vectors.shape}"
                )
            U = self._query(broadcast.phase - 1, broadcast.vectors, rng)[None]
        self._observe(U, evaluate)
        omega = np.empty(0) if broadcast.last else self._omega(rng)
        return FTSReport(broadcast.phase, self.client_id, omega)

    def _observe(self, U: np.ndarray, evaluate: Evaluate) -> None:
        """Evaluate the normalised points U (mapped to the domain) and add them to the history."""
        rewards = evaluate_checked(evaluate, to_domain(self.domain, U))
        self.X = np.vstack([self.X, U])
        self.y = np.concatenate([self.y, rewards])
        self.used += len(U)

    def _initial_points(self, rng: np.random.Generator) -> np.ndarray:
        """``n_init`` uniform points in the home region (DE) or the whole domain;
        on a grid, the nearest grid points."""
        box = (
            self.layout.bounds(self.home)
            if self.settings.init_region == "home"
            else np.tile([0.0, 1.0], (self.settings.dim, 1))
        )
        U = rng.uniform(box[:, 0], box[:, 1], size=(self.settings.n_init, self.settings.dim))
        return self._snap(U)

    def _snap(self, U: np.ndarray) -> np.ndarray:
        """On a grid domain, each point moved to its nearest grid point."""
        g = self.settings.grid_size
        return U if g is None else np.round(U * (g - 1)) / (g - 1)

    def _query(self, t: int, vectors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """BO iteration t's point (Algo. 2 lines 5-8): own GP-TS with probability p_t, else the
        maximiser of ``g(x) = phi(x)^T omega^(i[x])`` from the server's vectors."""
        if rng.random() <= p_own(t, self.p_schedule, self.p_min):
            self.branches.append("own")
            n = len(self.y)
            if self.own_fit_every and n >= 5 and n % self.own_fit_every == 0:
                self.own = fit_se_hyperparameters(
                    model_inputs(self.X, self.settings.categories),
                    self.y,
                    rng,
                    start=self.own,
                    restarts=self.own_fit_restarts,
                )
            x = own_ts_step(
                self.X,
                self.y,
                self.own,
                rng,
                self.maximiser,
                sampler=self.own_sampler,
                n_features=self.own_features,
                categories=self.settings.categories,
            )
        elif self.settings.grid_size is not None:
            self.branches.append("federated")
            grid, phi, point_regions = _grid_features(self.settings)
            values = np.einsum("gm,gm->g", phi, vectors[point_regions])  # g(x) at every grid point
            x = grid[int(np.argmax(values))].copy()
        else:
            self.branches.append("federated")
            regions = self.settings.regions
            g = FeatureFunction(
                self.features,
                vectors if regions > 1 else vectors[0],
                self.layout.region_of if regions > 1 else None,
            )
            x, _ = self.maximiser.argmax(g, rng)
        if self.replace_duplicates and np.any(np.all(x == self.X, axis=1)):
            x = self._snap(rng.uniform(0.0, 1.0, size=(1, self.settings.dim)))[0]  # fedxab's choice
        return x

    def _omega(self, rng: np.random.Generator) -> np.ndarray:
        """A fresh ω ~ N(nu_t, lambda Sigma_t^-1) from the whole history (Algo. 2 l. 10)."""
        posterior = WeightPosterior.fit(self.features(self.X), self.y, self.settings.noise_variance)
        return posterior.sample(rng)
