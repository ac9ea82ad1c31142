"""PF-HCT: personalized federated HCT, fedxab's own personalized algorithm (issue 20).

PF-PNE as printed loses to local HCT (:mod:`fedxab.algorithms.pfpne`, "Non-reproduction"): its
local stage re-examines every node the server eliminated and samples every surviving node
``tau_h`` times. PF-HCT keeps PF-PNE's collaborative stage, makes its eliminations safe under the
clients' *measured* heterogeneity, hands over as soon as that heterogeneity dominates the
resolution of the tree, and then lets each client run HCT (adaptive sampling) restricted to the
surviving cells, without re-examining the eliminated ones.

- **Stage 1** (collaborative, one depth per round): exactly PF-PNE's stage 1 ([PF] Algorithm 1
  lines 4-13 and Algorithm 2, :class:`~fedxab.algorithms.pfpne.PFPNEServer`, same messages):
  every client pulls every node of ``G^h`` ``ceil(tau_h / M)`` times and reports its local means;
  the server averages them. Two changes on the server:

  - *heterogeneity*: ``D = max(D, max over nodes i and clients m of |mu_{m,i} - mubar_i| - w_h -
    b_h)``, clipped at 0 (a running max), with ``w_h = b(ceil(tau_h/M))`` a client's local width
    and ``b_h = b(M ceil(tau_h/M))`` the global one (:mod:`fedxab.algorithms.pne`);
  - *elimination*: node i goes iff ``mubar_best - mubar_i > 2 b_h + nu rho^h + 2 D``
    (:func:`~fedxab.algorithms.pne.eliminate` with slack ``nu rho^h + 2 D``).

- **Handover** before the next depth h+1 when the first of these holds: ``nu rho^h <= kappa D``
  (the tree's resolution at the aggregated depth h is below the heterogeneity: sharing further
  helps no client); the next depth would take stage 1 above ``phi T`` pulls per client; ``h + 1 >
  h_max``; the budget is spent. The handover broadcast carries the survivors ``S^h`` (PF-PNE's).
- **Stage 2** (local, no communication): each client runs :class:`~fedxab.algorithms.hct.HCT` on
  its own objective for its remaining budget, restricted to the cells of ``S^h``
  (``HCT(roots=(h, S^h))``), with the stage-1 statistics of those cells preloaded
  (:meth:`~fedxab.algorithms.hct.HCT.preload`): ``preload="global"`` (default) the global means,
  each trusted as far as the heterogeneity measured allows (the handover sends each survivor's
  mean with the width ``b_h + D_before + d_i``: sampling error, the heterogeneity measured before
  the last depth, and that node's own at the last depth; the client gives the mean the sample
  count of that width, where that is more than its own count and its own mean agrees), its own
  samples elsewhere; ``"own"`` the client's own samples, ``"none"`` nothing. Its personalized
  recommendation is its HCT's ``recommend()`` (before stage 2: the global best node it knows, as
  in PF-PNE).

If the clients differ by more than ``nu rho / kappa`` at depth 1, stage 1 stops after depth 1
(``|G^1| ceil(tau_1/M)`` pulls per client, 2 with the defaults) and stage 2 is HCT on every depth-1
cell, i.e. local HCT: the cost of trying to collaborate is bounded by that one depth. With
identical clients ``D`` stays 0 and stage 1 is Fed-PNE's phased elimination down to ``phi T``
pulls, after which HCT refines locally inside the survivors.

**Proven** (the argument of [FX] Lemma B.3 / [PF] Lemma A.3 with the extra slack): on the event
that every global mean is within ``b_h`` of the average objective ``fbar`` at the node's centre
(the concentration event of Fed-PNE's analysis), a client m whose objective satisfies
``|f_m(x) - fbar(x)| <= D`` at every sampled centre and the local smoothness ``f_m(x*_m) - f_m(x) <=
nu rho^h`` on the depth-h cell containing its maximiser ``x*_m`` never loses that cell: for any
node j, ``fbar(x_j) - fbar(x_{i*}) <= (f_m(x*_m) + D) - (f_m(x*_m) - nu rho^h - D)
= nu rho^h + 2 D``, so ``mubar_j - mubar_{i*} <= 2 b_h + nu rho^h + 2 D`` and ``i*`` survives.
Stage 2 then inherits HCT's guarantee on the union of the surviving cells. On the same event
(and the clients' local means within ``w_h``), the estimate ``D`` never exceeds the true
heterogeneity at the sampled centres.

**Only measured**: that the estimate ``D`` (a lower bound) covers every client's deviation, which
the proof assumes; that preloading the global statistics with the trust their widths give helps
(a global mean may be biased for a client beyond its width where ``D`` underestimates); that
the defaults ``kappa = 1``, ``phi = 0.1``, ``preload="global"`` are good choices (chosen from a
handful of 3-seed runs on Garland and Himmelblau, M = 10, T = 10^4: ``phi`` from 0.05 to 1, the
three preloads); and the regret against local HCT, PF-PNE and Fed-PNE
(``benchmarks/bench_personalized.py``, ``docs/algorithms/pfhct.md``). There is no regret bound for
PF-HCT as a whole.

Constants: stage 1 uses the phased-elimination constants (:class:`~fedxab.algorithms.pne.
PNEConstants`, practical preset ``c = 0.1``, ``c1 = 1``, ``delta = 1/M``), stage 2 HCT's own
(:func:`~fedxab.algorithms.hct.resolve_constants`, practical ``c = 0.1``, ``delta = 0.01``), the
local-HCT baseline's constants; explicit ``c``, ``c1``, ``delta`` apply to both. The stage-2 HCT
uses the run's partition (seed), which stage 1's cells come from (the local-HCT baseline draws
one partition per client). Only node means and recommendations leave a client, never a raw reward.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedxab.algorithms.baselines import one_reward
from fedxab.algorithms.hct import HCT
from fedxab.algorithms.partition import Partition
from fedxab.algorithms.pfpne import PFPNEBroadcast, PFPNEClient, PFPNEReport, PFPNEServer
from fedxab.algorithms.pne import eliminate
from fedxab.algorithms.protocol import Evaluate
from fedxab.errors import ConfigError
from fedxab.validation import check_choice, check_positive

PRELOADS = ("global", "own", "none")


def node_heterogeneity(local_means: np.ndarray, means: np.ndarray, widths: float) -> np.ndarray:
    """The heterogeneity each node shows: ``max_m |mu_{m,i} - mubar_i| - widths``, at least 0.

    ``local_means`` has one row per client, ``means`` is their average, ``widths`` the sum of a
    local mean's and the global mean's confidence widths.
    """
    spread = np.max(np.abs(np.asarray(local_means) - means), axis=0)
    return np.maximum(spread - widths, 0.0)


def _check_fraction(field: str, value: float) -> float:
    v = check_positive(field, value)
    if v > 1.0:
        raise ConfigError(field, f"must be > 0 and <= 1, got {value!r}")
    return v


def _check_depth(field: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(field, f"must be an integer >= 0, got {value!r}")
    return value


class PFHCTServer(PFPNEServer):
    """The PF-HCT server: PF-PNE's stage 1 with heterogeneity-aware elimination and handover.

    ``kappa`` (> 0): hand over once ``nu rho^h <= kappa D``; ``phi`` (in (0, 1]): stage 1 uses at
    most ``phi T`` pulls per client; ``h_max`` (>= 0): deepest stage-1 depth (0: plain local HCT).
    :attr:`heterogeneity` is the running estimate ``D``; :attr:`heterogeneity_history` its value
    after each aggregated depth.
    """

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
        kappa: float = 1.0,
        phi: float = 0.1,
        h_max: int = 20,
        k: int = 2,
        split: str = "random",
        seed: int = 0,
    ) -> None:
        super().__init__(
            domain,
            n_clients=n_clients,
            budget=budget,
            nu=nu,
            rho=rho,
            preset=preset,
            c=c,
            c1=c1,
            delta=delta,
            k=k,
            split=split,
            seed=seed,
        )
        self.kappa = check_positive("algorithm.kappa", kappa)
        self.phi = _check_fraction("algorithm.phi", phi)
        self.h0 = _check_depth("algorithm.h_max", h_max)  # stage 1's depth cap
        self.heterogeneity = 0.0
        self.heterogeneity_history: list[float] = []
        self._shown = np.empty(0)  # the last depth's node_heterogeneity
        self._before = 0.0  # D before the last depth

    def _eliminate(
        self, reports: list[PFPNEReport], means: np.ndarray, width: float
    ) -> tuple[np.ndarray, int]:
        """Update ``D`` from this depth's reports, then eliminate with slack ``nu rho^h + 2 D``."""
        assert self._current is not None
        local_width = float(self.constants.width(self._current.pulls_per_node))
        self._shown = node_heterogeneity([r.means for r in reports], means, local_width + width)
        self._before = self.heterogeneity
        self.heterogeneity = max(self.heterogeneity, float(np.max(self._shown, initial=0.0)))
        self.heterogeneity_history.append(self.heterogeneity)
        return eliminate(means, width, self.constants.slack(self.depth) + 2 * self.heterogeneity)

    def _survivor_widths(self, means: np.ndarray, width: float) -> np.ndarray:
        """How far node i's global mean may be from any one client's mean there:
        ``b_h + D_before + d_i``, with ``d_i`` the heterogeneity node i showed at this depth and
        ``D_before`` the estimate ``D`` before this depth (the clients' :meth:`PFHCTClient.
        _preloaded` trusts a global mean as much as this width allows)."""
        return width + self._before + self._shown

    def _stops_before(self, nodes: np.ndarray, depth: int) -> bool:
        """PF-PNE's rule (``depth > h_max``, budget spent), or the resolution of the last depth is
        below ``kappa D``, or sampling ``nodes`` would take stage 1 above ``phi T``."""
        if super()._stops_before(nodes, depth):
            return True
        if self.history and self.constants.slack(self.depth) <= self.kappa * self.heterogeneity:
            return True
        cost = len(nodes) * -(-self.constants.tau(depth) // self.n_clients)
        return self.used + cost > self.phi * self.budget


class PFHCTClient(PFPNEClient):
    """The PF-HCT client: PF-PNE's stage 1 (:class:`~fedxab.algorithms.pfpne.PFPNEClient`), then
    HCT restricted to the survivors with the whole remaining budget.

    ``preload``: what its HCT starts from on the surviving cells (:meth:`_preloaded`):
    ``"global"`` (default) the global means of the handover broadcast, each with the sample
    count its width allows, where that beats its own samples and they agree; ``"own"`` its own
    stage-1 samples; ``"none"`` nothing.
    :attr:`hct` is the stage-2 HCT (``None`` before).
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
        preload: str = "global",
        k: int = 2,
        split: str = "random",
        seed: int = 0,
        partition: Partition | None = None,
    ) -> None:
        super().__init__(
            client_id,
            domain,
            n_clients=n_clients,
            budget=budget,
            nu=nu,
            rho=rho,
            preset=preset,
            c=c,
            c1=c1,
            delta=delta,
            reuse_samples=True,
            k=k,
            split=split,
            seed=seed,
            partition=partition,
        )
        self._hct_settings = {
            "nu": nu,
            "rho": rho,
            "preset": preset,
            "c": c,
            "c1": c1,
            "delta": delta,
            "budget": budget,
            "k": k,
            "split": split,
            "seed": seed,  # the run's partition: stage 1's cells
        }
        self.preload = check_choice("algorithm.preload", preload, PRELOADS)
        self.hct: HCT | None = None

    def recommend(self) -> np.ndarray:
        """The stage-2 HCT's recommendation; before stage 2, PF-PNE's (the global best node)."""
        return super().recommend() if self.hct is None else self.hct.recommend()

    def _preloaded(self, b: PFPNEBroadcast) -> tuple[np.ndarray, np.ndarray]:
        """The sample counts and reward sums stage 2 starts from on the survivors ``S^h``.

        ``"own"``: this client's stage-1 samples. ``"global"``: on a cell where the global mean
        carries more evidence for this client than its own samples, the global mean with the
        sample count ``n_g = c^2 L / r^2`` whose HCT width equals the broadcast width ``r =
        b_h + D_before + d_i`` (:meth:`PFHCTServer._survivor_widths`: how far the global mean may
        be from this client's mean, sampling error plus measured heterogeneity); with identical
        clients ``r = b_h`` and ``n_g = M ceil(tau_h/M)``, every client's samples. The global mean
        is used where ``n_g`` exceeds the client's own count and its own mean agrees with it
        (``|mu_m - mubar| <= b(n_m) + r``); its own samples elsewhere.
        """
        const = self.constants
        keys = [(b.survivor_depth, int(i)) for i in b.survivors]
        counts = np.array([self._count.get(key, 0) for key in keys], dtype=np.int64)
        sums = np.array([self._sum.get(key, 0.0) for key in keys])
        if self.preload == "own":
            return counts, sums
        own = sums / np.maximum(counts, 1)
        n_global = np.rint(const.c**2 * const.log_term / b.survivor_widths**2).astype(np.int64)
        agree = (
            (counts > 0)
            & (n_global > counts)
            & (
                np.abs(own - b.survivor_means)
                <= const.width(np.maximum(counts, 1)) + b.survivor_widths
            )
        )
        counts = np.where(agree, n_global, counts)
        return counts, np.where(agree, b.survivor_means * n_global, sums)

    def _local_stage(
        self,
        b: PFPNEBroadcast,
        protected: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
        evaluate: Evaluate,
    ) -> PFPNEReport:
        """HCT on the cells of ``S^h`` (the whole domain if stage 1 aggregated no depth)."""
        h = b.survivor_depth
        hct = HCT(
            self.partition.domain, roots=(h, b.survivors) if h else None, **self._hct_settings
        )
        if h and self.preload != "none":
            hct.preload(*self._preloaded(b))
        self.protected.update(protected)
        self.hct = hct
        while self.used < self.budget:
            x = hct.ask()
            hct.tell(x, one_reward(evaluate, x))
            self.used += 1
        self.stage = "done"
        return PFPNEReport(b.phase, self.client_id, True, recommendation=self.recommend())


__all__ = ["PFHCTClient", "PFHCTServer", "node_heterogeneity"]
