"""Standard Thompson sampling per agent, without communication: DP-FTS-DE's baseline.

The "standard TS" baseline of Dai, Low & Jaillet (2021): every agent runs GP-TS on its own objective
alone, from ``n_init`` random points in the whole domain, always with its own GP (p_t = 1), the RFF
sampler and acquisition maximiser of the FTS agent (:class:`~fedxab.algorithms.ftsde.FTSDEClient`,
whose own-TS step this reuses). As :class:`~fedxab.algorithms.baselines.LocalHCTServer` does for
HCT, the server sends one broadcast ("run for ``rounds`` evaluations") and collects one report per
agent, its best point observed; there is no other communication.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedxab.algorithms.acquisition import (
    DEFAULT_CANDIDATES,
    DEFAULT_OWN_FEATURES,
    DEFAULT_RESTARTS,
)
from fedxab.algorithms.baselines import LocalHCTBroadcast, LocalHCTReport, LocalHCTServer
from fedxab.algorithms.blas import single_threaded_blas
from fedxab.algorithms.ftsde import FTSDEClient, to_domain
from fedxab.algorithms.protocol import Evaluate, ReplyCache
from fedxab.seeding import stream

__all__ = ["TSBroadcast", "TSClient", "TSReport", "TSServer"]


class TSBroadcast(LocalHCTBroadcast):
    """Server -> agents, once: run Thompson sampling for ``rounds`` evaluations."""

    kind = "ts.broadcast"


class TSReport(LocalHCTReport):
    """Agent -> server, once: its evaluations and its best observed point."""

    kind = "ts.report"


class TSServer(LocalHCTServer):
    """One broadcast, one report per agent; the lowest-id agent's point is the run's answer."""

    broadcast_class = TSBroadcast


class TSClient(FTSDEClient):
    """An agent running GP-TS alone: :class:`FTSDEClient` with p_t = 1 and whole-domain
    initialisation, all its iterations in one phase (its random stream per iteration is the FTS
    agent's, so TS and FTS draw the same numbers where their histories agree)."""

    def __init__(
        self,
        client_id: int,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        own_sampler: str = "rff",
        own_features: int = DEFAULT_OWN_FEATURES,
        own_lengthscale: float = 1.0,
        own_signal_variance: float = 0.1,
        own_noise_variance: float = 1e-4,
        own_fit_every: int = 5,
        own_fit_restarts: int = 10,
        n_candidates: int = DEFAULT_CANDIDATES,
        n_restarts: int = DEFAULT_RESTARTS,
        replace_duplicates: bool = True,
        n_init: int = 10,
        grid_size: int | None = None,
        seed: int = 0,
        categories: Sequence[int | None] | None = None,
    ) -> None:
        super().__init__(
            client_id,
            domain,
            n_clients=n_clients,
            budget=budget,
            p_schedule="own",
            own_sampler=own_sampler,
            own_features=own_features,
            own_lengthscale=own_lengthscale,
            own_signal_variance=own_signal_variance,
            own_noise_variance=own_noise_variance,
            own_fit_every=own_fit_every,
            own_fit_restarts=own_fit_restarts,
            n_candidates=n_candidates,
            n_restarts=n_restarts,
            replace_duplicates=replace_duplicates,
            n_init=n_init,
            init_region="whole",
            grid_size=grid_size,
            seed=seed,
            categories=categories,
        )
        # TS answers with its own report class, not the FTS agent's (whose cache it leaves unused)
        self._ts_replies: ReplyCache[TSReport] = ReplyCache()

    def answer(self, broadcast: TSBroadcast, evaluate: Evaluate) -> TSReport:  # type: ignore[override]
        """The initial points, then every BO iteration, one evaluation each; then the report."""
        cached = self._ts_replies.get(broadcast.phase)
        if cached is not None:
            return cached
        with single_threaded_blas():
            U = self._initial_points(stream(self.seed, "fts-agent", self.client_id, 1))
            self._observe(U, evaluate)
            for t in range(1, min(broadcast.rounds, self.settings.budget) - len(U) + 1):
                rng = stream(self.seed, "fts-agent", self.client_id, t + 1)
                self._observe(self._query(t, np.empty(0), rng)[None], evaluate)
        best = to_domain(self.domain, self.X[int(np.argmax(self.y))][None])[0]
        return self._ts_replies.put(
            broadcast.phase, TSReport(broadcast.phase, self.client_id, self.used, best)
        )
