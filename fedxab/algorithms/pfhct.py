"""PF-HCT: personalized federated HCT, fedxab's own personalized algorithm (issue 20).

PF-PNE as printed loses to local HCT (:mod:`fedxab.algorithms.pfpne`, "Non-reproduction"): its
local stage re-examines every node the server eliminated and samples every surviving node
``tau_h`` times. PF-HCT keeps PF-PNE's collaborative stage, makes its eliminations safe under the
clients' *measured* heterogeneity, samples each depth in rounds of successive elimination, hands
over as soon as that heterogeneity dominates the resolution of the tree, and then lets each
client run HCT (adaptive sampling), warm-started with the federation's tree.

- **Stage 1** (collaborative): PF-PNE's stage 1 ([PF] Algorithm 1 lines 4-13 and Algorithm 2,
  :class:`~fedxab.algorithms.pfpne.PFPNEServer`, same messages): the clients pull the nodes of
  ``G^h`` and report their local means (never a raw reward); the server averages them. Four
  changes on the server:

  - *rounds*: a depth is sampled in up to ``rounds_per_depth`` rounds (default 3) of
    successive elimination (Even-Dar, Mannor & Mansour 2006): after round j every surviving
    node has ``round_targets(ceil(tau_h/M))[j]`` pulls per client (doubling up to PF-PNE's
    ``ceil(tau_h/M)``), and a round eliminates with the width of the samples so far, so a
    clearly bad node costs a fraction of ``tau_h``; every survivor of the depth has PF-PNE's
    ``ceil(tau_h/M)`` pulls per client. ``rounds_per_depth = 1`` is PF-PNE's single round;
    with ``close_stalled`` (default) a round that eliminates no node while the clients
    measurably differ (``R > 0``, below) closes the depth: its later rounds would refine means
    of nodes no width separates, for clients they describe only to within ``R``;
  - *heterogeneity*: ``D = max(D, max over nodes i and clients m of |mu_{m,i} - mubar_i| - w_m -
    b)``, clipped at 0 (a running max, updated every round), with ``w_m`` the width of client
    m's own samples of the node and ``b`` the global one (:mod:`fedxab.algorithms.pne`);
  - *elimination*: node i goes iff ``mubar_best - mubar_i > 2 b + nu rho^h + 2 D`` after the
    depth's last round (:func:`~fedxab.algorithms.pne.eliminate` with slack ``nu rho^h + 2 D``);
    an earlier round adds ``2 u`` to the slack, with ``u = w + b - w_h - b_h`` how much more
    heterogeneity its wider widths could hide than the last round's (``w_h, b_h``): an early
    round eliminates no node the depth's last round would have had to keep for a
    heterogeneity it cannot see yet.

  - *spread*: ``R``, the clients' root-mean-square deviation from their average objective at
    the round's nodes, estimated without bias by an analysis of variance (:func:`spread`;
    the noise variance it subtracts comes from each client's successive rounds of a node,
    :func:`batch_noise`) and counted only when an F test rejects identical clients, at level
    ``delta / (rounds_per_depth h_max)`` per test (a running max, updated every round). ``D``
    is a high-probability lower bound on the *largest* deviation, blind when each client has
    few pulls of a node (``M = 50``: 3 pulls per client at depth 5); ``R`` pools every client
    and node and sees a typical client's deviation.

- **Handover** before the next depth h+1 when the first of these holds:
  ``nu rho^h <= max(kappa D, kappa_spread R)``, the tree's resolution at the aggregated depth h
  below the heterogeneity, so that sharing further helps few clients (``kappa_spread = 0``:
  ``D`` alone, the rule before ``R``; checked after every round, so the depth where it first
  holds skips its later rounds); with ``look_ahead`` (default) the same rule at the next
  depth's resolution ``nu rho^(h+1)`` (``D`` and ``R`` only grow, so the handover would
  withhold that depth: it is not sampled); the next depth would take stage 1 above ``phi T``
  pulls per client (counting all its rounds in full); ``h + 1 > h_max``; the budget is spent.
  ``R`` is the latest spread at every depth: it is measured once the noise can be (from a
  node's second round on) and then describes the coarser depths sampled before too. The
  handover broadcast carries the survivors ``S^h`` (PF-PNE's), the *shared depths* (those after
  which the rule did not hold, with ``D`` as it was after the depth and the latest ``R``) and
  the global means of the nodes stage 1 eliminated there (:class:`PFHCTBroadcast`), each with
  the width of its own samples.
- **Stage 2** (local, no communication): each client runs :class:`~fedxab.algorithms.hct.HCT` on
  its own objective for its remaining budget. ``stage2 = "tree"`` (default): on the whole
  domain, warm-started with the stage-1 tree (:meth:`~fedxab.algorithms.hct.HCT.warm_start`):
  every stage-1 node the client sampled, with ``preload = "global"`` (default) the global means
  of the shared depths' nodes, survivors and eliminated, each trusted as far as the
  heterogeneity measured allows (:meth:`PFHCTClient._trusted`), its own samples elsewhere. So
  with identical clients (``D = 0``, every depth shared) HCT starts from the federation's
  knowledge of the whole tree, and with different clients the cells below the shared depths
  keep only the client's own samples, and HCT comes back to a cell stage 1 eliminated there
  (on the average objective) when its optimism says so. ``stage2 = "cells"``: HCT restricted
  to the cells of ``S^h`` (``HCT(roots=(h, S^h))``, :meth:`~fedxab.algorithms.hct.HCT.preload`),
  never returning to an eliminated cell. ``preload = "own"``: the client's own samples only;
  ``"none"``: nothing. Its personalized recommendation is its HCT's ``recommend()`` (before
  stage 2: the global best node it knows, as in PF-PNE).

If the clients differ by more than ``nu rho / kappa`` at depth 1, stage 1 stops after depth 1
(``|G^1| ceil(tau_1/M)`` pulls per client, 2 with the defaults) and stage 2 is HCT with those
samples, i.e. local HCT: the cost of trying to collaborate is bounded by that one depth. With
identical clients ``D`` stays 0, ``R`` too unless its test errs (at most ``delta`` over the
whole stage), and stage 1 is Fed-PNE's phased elimination down to ``phi T`` pulls, after which
each client's HCT starts from the federation's statistics.

**Proven** (the argument of [FX] Lemma B.3 / [PF] Lemma A.3 with the extra slack): on the event
that every global mean is within its width ``b`` of the average objective ``fbar`` at the node's
centre (the concentration event of Fed-PNE's analysis, here for each round's count: a union
bound over at most ``rounds_per_depth`` rounds per depth), a client m whose objective satisfies
``|f_m(x) - fbar(x)| <= D`` at every sampled centre and the local smoothness ``f_m(x*_m) - f_m(x) <=
nu rho^h`` on the depth-h cell containing its maximiser ``x*_m`` never loses that cell: for any
node j, ``fbar(x_j) - fbar(x_{i*}) <= (f_m(x*_m) + D) - (f_m(x*_m) - nu rho^h - D)
= nu rho^h + 2 D``, so ``mubar_j - mubar_{i*} <= 2 b + nu rho^h + 2 D`` and ``i*`` survives
(a depth closed early, by the handover rule or ``close_stalled``, eliminates with the width of
its samples so far, so the argument holds for it unchanged).
With ``stage2 = "cells"``, stage 2 then inherits HCT's guarantee on the union of the surviving
cells. On the same event (and the clients' local means within their widths), the estimate ``D``
never exceeds the true heterogeneity at the sampled centres.

**Only measured**: that the estimate ``D`` (a lower bound) covers every client's deviation, which
the proof assumes; that handing over at ``nu rho^h <= max(kappa D, kappa_spread R)`` shares
the depths that help (the handover rule is a choice, not part of the proof; ``R`` is unbiased
for the mean squared deviation under independent noise of one variance, the F test exact only
for Gaussian noise); that starting HCT from the global statistics with the trust their widths
give helps (a global mean may be biased for a client beyond its width where ``D`` underestimates);
that the eliminated nodes' means of the shared depths help more than they mislead; that the
defaults ``kappa = 1``, ``kappa_spread = 0.5``, ``phi = 0.1``, ``preload = "global"``,
``rounds_per_depth = 3``, ``close_stalled = True``, ``look_ahead = True``, ``stage2 = "tree"``
are good choices (``docs/algorithms/pfhct.md`` says on which runs each was chosen); and the
regret against local HCT, PF-PNE and Fed-PNE (``benchmarks/bench_personalized.py``). There is
no regret bound for PF-HCT as a whole.

Constants: stage 1 uses the phased-elimination constants (:class:`~fedxab.algorithms.pne.
PNEConstants`, practical preset ``c = 0.1``, ``c1 = 1``, ``delta = 1/M``), stage 2 HCT's own
(:func:`~fedxab.algorithms.hct.resolve_constants`, practical ``c = 0.1``, ``delta = 0.01``), the
local-HCT baseline's constants; explicit ``c``, ``c1``, ``delta`` apply to both. The stage-2 HCT
uses the run's partition (seed), which stage 1's cells come from (the local-HCT baseline draws
one partition per client). Only node means and recommendations leave a client, never a raw reward.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Self

import numpy as np

from fedxab.algorithms.baselines import one_reward
from fedxab.algorithms.hct import HCT
from fedxab.algorithms.partition import Partition
from fedxab.algorithms.pfpne import PFPNEBroadcast, PFPNEClient, PFPNEReport, PFPNEServer
from fedxab.algorithms.pne import eliminate
from fedxab.algorithms.protocol import Evaluate, wire_array, wire_int
from fedxab.errors import ConfigError, ProtocolError
from fedxab.validation import (
    check_bool,
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
)

PRELOADS = ("global", "own", "none")
STAGE2 = ("tree", "cells")


def node_heterogeneity(
    local_means: np.ndarray, means: np.ndarray, widths: float | np.ndarray
) -> np.ndarray:
    """The heterogeneity each node shows: ``max_m (|mu_{m,i} - mubar_i| - w_m)``, at least 0.

    ``local_means`` has one row per client, ``means`` is their average, ``widths`` the sum of a
    local mean's and the global mean's confidence widths: one number, or one per client (a
    column) when the clients' sample counts differ.
    """
    spread = np.abs(np.asarray(local_means) - means) - widths
    return np.maximum(np.max(spread, axis=0), 0.0)


def spread(
    local_means: np.ndarray,
    pulls: np.ndarray,
    noise: float,
    noise_dof: int,
    level: float,
) -> float:
    """The clients' root-mean-square heterogeneity ``R`` at a round's nodes; 0 unless significant.

    ``local_means`` has one row per client and one column per node, every client with
    ``pulls[i]`` samples of node i; ``noise`` is an estimate of the reward noise's variance
    ``sigma^2`` with ``noise_dof`` degrees of freedom (:func:`batch_noise`). The between-clients
    part of a one-way analysis of variance, per node: with ``mubar_i`` the nodes' average,
    ``E[(mu_{m,i} - mubar_i)^2] = (f_m(x_i) - fbar(x_i))^2 + (1 - 1/M) sigma^2 / n_i``, so

    ``R^2 = mean over m, i of (mu_{m,i} - mubar_i)^2 - mean over i of (1 - 1/M) sigma^2 / n_i``

    is unbiased for the clients' mean squared deviation from their average objective at the
    nodes' centres. ``R`` counts only when the F test rejects identical clients at ``level``:
    ``sum n_i (mu_{m,i} - mubar_i)^2 / ((M - 1) N sigma^2)`` above the ``1 - level`` quantile of
    ``F((M - 1) N, noise_dof)``. Without a noise estimate (``noise_dof = 0``) it is 0; with a
    noise-free one (``noise = 0``) every deviation counts.
    """
    from scipy.stats import f as f_distribution  # imported here: scipy.stats is slow to import

    m, n_nodes = local_means.shape
    if m < 2 or n_nodes == 0 or noise_dof == 0:
        return 0.0
    deviations = local_means - local_means.mean(axis=0)
    r2 = float(np.mean(deviations**2) - np.mean((1 - 1 / m) * noise / pulls))
    if r2 <= 0:
        return 0.0
    dof = (m - 1) * n_nodes
    if noise > 0:
        statistic = float(np.sum(pulls * deviations**2)) / (dof * noise)
        if statistic <= f_distribution.ppf(1 - level, dof, noise_dof):
            return 0.0
    return r2**0.5


def batch_noise(
    sums: np.ndarray, squares: np.ndarray, counts: np.ndarray, batches: np.ndarray
) -> tuple[float, int]:
    """The reward noise's variance from the clients' successive rounds of the same nodes.

    Client m reports node i's mean ``a_j`` of each round's ``k_j`` pulls (a batch); the server
    keeps ``sums = sum_j k_j a_j``, ``squares = sum_j k_j a_j^2``, ``counts = sum_j k_j`` per
    client and node, and ``batches`` (one per node: the rounds it was sampled in). Within one
    client and node the objective is fixed, so the batch means differ by noise alone:
    ``E[sum_j k_j (a_j - abar)^2] = (J - 1) sigma^2`` (one-way analysis of variance within
    client), and heterogeneity cannot enter the estimate. Returns the sum of those squares over
    clients and nodes and its degrees of freedom, ``sum (J - 1)`` (``(0.0, 0)`` before any node
    has two rounds): their ratio estimates ``sigma^2``.
    """
    several = batches > 1
    dof = int(np.sum(batches[several] - 1)) * counts.shape[0]
    if dof == 0:
        return 0.0, 0
    c = counts[:, several]
    within = squares[:, several] - sums[:, several] ** 2 / c
    return float(np.maximum(within, 0.0).sum()), dof


def round_targets(pulls: int, rounds: int) -> list[int]:
    """The cumulative pulls per node and client after each round of a stage-1 depth:
    ``ceil(pulls / 2^(rounds - 1 - j))`` for ``j = 0 .. rounds - 1``, repeats dropped (a depth of
    ``pulls = ceil(tau_h / M)`` is sampled in at most ``rounds`` doubling rounds)."""
    return sorted({-(-pulls // 2 ** (rounds - 1 - j)) for j in range(rounds)})


def _check_fraction(field: str, value: float) -> float:
    v = check_positive(field, value)
    if v > 1.0:
        raise ConfigError(field, f"must be > 0 and <= 1, got {value!r}")
    return v


def _check_depth(field: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(field, f"must be an integer >= 0, got {value!r}")
    return value


def _no_nodes() -> np.ndarray:
    return np.empty(0, dtype=np.int64)


def _no_values() -> np.ndarray:
    return np.empty(0)


@dataclass(frozen=True)
class PFHCTBroadcast(PFPNEBroadcast):
    """PF-PNE's broadcast (:class:`~fedxab.algorithms.pfpne.PFPNEBroadcast`, same fields and
    checks) plus, in the handover only, what the clients' tree (``stage2 = "tree"``) may take
    from the federation: ``shared_depth``, the deepest depth whose global statistics help a
    client (:meth:`PFHCTServer._handover`), and the global means and widths of the nodes stage 1
    eliminated down to that depth, ``(eliminated_depths[j], eliminated[j])``. Both are empty
    (0) in stage-1 rounds."""

    shared_depth: int = 0
    eliminated_depths: np.ndarray = field(default_factory=_no_nodes)
    eliminated: np.ndarray = field(default_factory=_no_nodes)
    eliminated_means: np.ndarray = field(default_factory=_no_values)
    eliminated_widths: np.ndarray = field(default_factory=_no_values)

    kind = "pfhct.broadcast"

    def to_wire(self) -> dict[str, Any]:
        return {
            **super().to_wire(),
            "shared_depth": self.shared_depth,
            "eliminated_depths": np.asarray(self.eliminated_depths, dtype=np.int64),
            "eliminated": np.asarray(self.eliminated, dtype=np.int64),
            "eliminated_means": np.asarray(self.eliminated_means, dtype=np.float64),
            "eliminated_widths": np.asarray(self.eliminated_widths, dtype=np.float64),
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        base = super().from_wire(data)
        msg = replace(
            base,
            shared_depth=wire_int(data, "shared_depth"),
            eliminated_depths=wire_array(data, "eliminated_depths", "i"),
            eliminated=wire_array(data, "eliminated", "i"),
            eliminated_means=wire_array(data, "eliminated_means", "f"),
            eliminated_widths=wire_array(data, "eliminated_widths", "f"),
        )
        msg.validate()
        return msg

    def validate(self) -> None:
        super().validate()
        n = len(self.eliminated)
        for name in ("eliminated_depths", "eliminated_means", "eliminated_widths"):
            if getattr(self, name).shape != (n,):
                raise ProtocolError(
                    f"field {name!r} must hold {n} values (one per eliminated node), "
                    f"got shape {getattr(self, name).shape}"
                )
        if (n or self.shared_depth) and not self.final:
            raise ProtocolError(
                "fields 'eliminated' and 'shared_depth' must be empty and 0 in a stage-1 broadcast"
            )
        if not 0 <= self.shared_depth <= self.survivor_depth:
            raise ProtocolError(
                f"field 'shared_depth' must lie in 0..{self.survivor_depth} (the depths stage 1 "
                f"aggregated), got {self.shared_depth}"
            )
        if np.any(self.eliminated_widths <= 0):
            raise ProtocolError("field 'eliminated_widths' must hold positive widths")
        depths = self.eliminated_depths
        if n and (depths.min() < 1 or depths.max() > self.shared_depth):
            raise ProtocolError(
                f"field 'eliminated_depths' must lie in 1..{self.shared_depth} (the depths "
                "whose statistics are shared, 'shared_depth')"
            )
        if n and (self.eliminated.min() < 1):
            raise ProtocolError("field 'eliminated' must hold node indices >= 1")


class PFHCTServer(PFPNEServer):
    """The PF-HCT server: PF-PNE's stage 1 in rounds of successive elimination, with
    heterogeneity-aware elimination and handover.

    ``kappa`` (> 0) and ``kappa_spread`` (>= 0; 0: ``D`` alone): hand over once
    ``nu rho^h <= max(kappa D, kappa_spread R)`` (:meth:`_heterogeneous`); ``phi`` (in (0, 1]):
    stage 1 uses at most ``phi T`` pulls per client; ``h_max`` (>= 0): deepest stage-1 depth
    (0: plain local HCT); ``rounds_per_depth`` (>= 1): rounds per depth
    (:func:`round_targets`); ``close_stalled``: a round that eliminates no node while ``R > 0``
    closes its depth (``False``: every depth takes all its rounds, the rule before);
    ``look_ahead``: stage 1 opens no depth the handover rule already withholds
    (:meth:`_stops_before`; ``False``: it stops only after a depth where the rule holds, the
    rule before).
    :attr:`heterogeneity` is the running estimate ``D``, :attr:`heterogeneity_history` its value
    after each aggregated depth, :attr:`spread` the running ``R`` (:func:`spread`).
    """

    broadcast_class = PFHCTBroadcast

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
        kappa_spread: float = 0.5,
        phi: float = 0.1,
        h_max: int = 20,
        rounds_per_depth: int = 3,
        close_stalled: bool = True,
        look_ahead: bool = True,
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
        self.kappa_spread = check_nonnegative("algorithm.kappa_spread", kappa_spread)
        self.phi = _check_fraction("algorithm.phi", phi)
        self.h0 = _check_depth("algorithm.h_max", h_max)  # stage 1's depth cap
        self.rounds_per_depth = check_positive_int("algorithm.rounds_per_depth", rounds_per_depth)
        self.close_stalled = check_bool("algorithm.close_stalled", close_stalled)
        self.look_ahead = check_bool("algorithm.look_ahead", look_ahead)
        self.heterogeneity = 0.0
        self.spread = 0.0
        self.heterogeneity_history: list[float] = []
        # the F test of spread(): the concentration event's delta over at most rounds_per_depth
        # tests per depth and h_max depths
        self._level = self.constants.delta / (self.rounds_per_depth * max(self.h0, 1))
        self._noise = (0.0, 0)  # batch_noise() of the depths closed: sum of squares, dof
        self._before = 0.0  # D before the current depth
        self._aggregated = 0  # stage-1 rounds aggregated
        # the current depth: its nodes G^h, the cumulative pulls per node and client after each
        # round, which nodes are still sampled, each client's reward sums, sums of pulls x
        # squared round means and pulls per node, the rounds each node was sampled in, and the
        # heterogeneity each node showed when it was last sampled
        self._targets: list[int] = []
        self._round = 0  # index of the open round in _targets
        self._nodes = np.empty(0, dtype=np.int64)
        self._alive = np.empty(0, dtype=bool)
        self._sums = np.empty((n_clients, 0))
        self._squares = np.empty((n_clients, 0))
        self._counts = np.empty((n_clients, 0), dtype=np.int64)
        self._batches = np.empty(0, dtype=np.int64)
        self._shown = np.empty(0)
        self._eliminated: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []

    @property
    def rounds(self) -> int:
        """Communication rounds of stage 1: every aggregated round (up to ``rounds_per_depth``
        per depth)."""
        return self._aggregated

    def _stage_one(self, nodes: np.ndarray, depth: int) -> PFPNEBroadcast:
        """Open depth ``depth``: its first round, ``round_targets(ceil(tau_h/M))[0]`` pulls."""
        t_h = self.constants.pulls_per_client(depth, self.n_clients)
        self._targets = round_targets(t_h, self.rounds_per_depth)
        self._nodes = nodes
        self._alive = np.ones(len(nodes), dtype=bool)
        self._sums = np.zeros((self.n_clients, len(nodes)))
        self._squares = np.zeros((self.n_clients, len(nodes)))
        self._counts = np.zeros((self.n_clients, len(nodes)), dtype=np.int64)
        self._batches = np.zeros(len(nodes), dtype=np.int64)
        self._shown = np.zeros(len(nodes))
        self._before = self.heterogeneity
        self._round = 0
        return self._open_round(nodes, depth, self._targets[0])

    def _aggregate(self, reports: list[PFPNEReport]) -> PFPNEBroadcast:
        """Successive elimination inside the depth: add the round's local means to each
        client's sums, update ``D`` from the clients' means so far (each with the width of its
        own count) and ``R`` (:meth:`_update_spread`), eliminate with slack ``nu rho^h + 2 D``
        and the width of the samples so far; then the next round on the survivors, or, after the
        last (or a round after which the handover rule holds, or, with ``close_stalled``, one
        that eliminated no node while ``R > 0``: :meth:`_stalled`), the depth's record and the
        next depth. One round per depth (``rounds_per_depth = 1``) is PF-PNE's stage 1."""
        assert self._current is not None
        pulls, const = self._current.pulls_per_node, self.constants
        alive = np.flatnonzero(self._alive)
        for r in reports:
            self._sums[r.client, alive] += r.means * pulls
            self._squares[r.client, alive] += r.means**2 * pulls
            self._counts[r.client, alive] += pulls
        self._batches[alive] += 1
        self.used += self.phase_length
        self._aggregated += 1
        counts, sums = self._counts[:, alive], self._sums[:, alive]
        seen = counts[:, 0] > 0  # the clients with samples of this depth
        total = int(counts[:, 0].sum())  # every surviving node has the same samples
        means = sums.sum(axis=0) / total
        width = float(const.width(total))  # b(N), N = M ceil(tau_h/M) after the last round
        local_widths = const.width(counts[seen, :1]) + width
        local_means = sums[seen] / counts[seen]
        self._shown[alive] = node_heterogeneity(local_means, means, local_widths)
        self.heterogeneity = max(self.heterogeneity, float(np.max(self._shown[alive])))
        noise = self._depth_noise(seen)
        self._update_spread(local_means, counts[seen][0], noise)
        final = self._targets[-1]
        unseen = (
            float(const.width(counts[seen, 0].min()))
            + width
            - float(const.width(final))
            - float(const.width(final * int(seen.sum())))
        )
        slack = const.slack(self.depth) + 2 * (self.heterogeneity + max(unseen, 0.0))
        survive, best = eliminate(means, width, slack)
        self._alive[alive[~survive]] = False
        self._round += 1
        closes = self._heterogeneous(self.depth, self.heterogeneity) or self._stalled(survive)
        if self._round < len(self._targets) and not closes:
            step = self._targets[self._round] - self._targets[self._round - 1]
            return self._open_round(self._nodes[self._alive], self.depth, step)
        self.heterogeneity_history.append(self.heterogeneity)
        self._noise = noise
        totals = self._counts.sum(axis=0)  # every node of G^h was sampled in the first round
        all_means = self._sums.sum(axis=0) / totals
        gone = ~self._alive
        widths = self._survivor_widths(all_means, const.width(totals))
        self._eliminated.append((self.depth, self._nodes[gone], all_means[gone], widths[gone]))
        return self._close_depth(
            self._nodes, all_means, width, self._alive.copy(), int(alive[best]), len(reports)
        )

    def _stalled(self, survive: np.ndarray) -> bool:
        """With ``close_stalled``: the round eliminated none of its nodes (``survive``) while the
        clients measurably differ (``R > 0``). Successive elimination's later rounds exist to
        eliminate; here no width separated the nodes, and the precision they would add to the
        global means is worth little to clients that deviate from them by ``R``, beyond the noise of
        their own means (the F test). With identical clients (``R = 0``) every round is taken:
        there the refined means are every client's."""
        return self.close_stalled and self.spread > 0 and bool(survive.all())

    def _depth_noise(self, seen: np.ndarray) -> tuple[float, int]:
        """:func:`batch_noise` of the depths closed and the current one (clients ``seen``)."""
        ss, dof = batch_noise(
            self._sums[seen], self._squares[seen], self._counts[seen], self._batches
        )
        return self._noise[0] + ss, self._noise[1] + dof

    def _update_spread(
        self, local_means: np.ndarray, pulls: np.ndarray, noise: tuple[float, int]
    ) -> None:
        """``R = max(R, spread(...))`` at the nodes sampled this round (the clients'
        ``local_means`` so far, ``pulls`` per client and node), with ``noise`` the noise sum of
        squares and dof pooled over every stage-1 round so far (:meth:`_depth_noise`)."""
        ss, dof = noise
        variance = ss / dof if dof else 0.0
        self.spread = max(self.spread, spread(local_means, pulls, variance, dof, self._level))

    def _heterogeneous(self, depth: int, bound: float) -> bool:
        """The handover rule: the resolution of ``depth``, ``nu rho^h``, is at most
        ``max(kappa D, kappa_spread R)``, with ``D = bound`` and ``R`` the latest spread (a
        typical client's deviation, measured once the noise can be, from a node's second round
        on: it describes the coarser depths sampled before too). Checked after every round:
        once it holds, the depth's later rounds would only refine global means no client
        shares, and the depth closes with the samples so far; :meth:`_handover` shares the
        depths where it did not hold yet."""
        heterogeneity = max(self.kappa * bound, self.kappa_spread * self.spread)
        return self.constants.slack(depth) <= heterogeneity

    def _survivor_widths(self, means: np.ndarray, width: float | np.ndarray) -> np.ndarray:
        """How far node i's global mean may be from any one client's mean there:
        ``b_i + D_before + d_i``, with ``b_i`` the width of its samples (``width``: ``b_h`` for
        every survivor, one per node for the eliminated ones), ``d_i`` the heterogeneity node i
        showed when last sampled and ``D_before`` the estimate ``D`` before this depth (the
        clients' :meth:`PFHCTClient._trusted` trusts a global mean as much as this width
        allows)."""
        return width + self._before + self._shown

    def _handover(self) -> PFPNEBroadcast:
        """PF-PNE's handover, plus what the clients' trees may take from the federation.

        ``shared_depth``: the depths d at which the handover rule still found sharing useful,
        ``nu rho^d > max(kappa D_d, kappa_spread R)`` with ``D_d`` the estimate after depth d and
        ``R`` the latest spread (:meth:`_heterogeneous`; every depth when both are 0; the
        trust rule still weighs each shared mean by its width); at the depth where the
        heterogeneity reached the tree's resolution and below, a client keeps its own samples:
        there the global means describe no one client. The global means of the
        nodes eliminated at the shared depths, each with the width of its own samples: there
        the eliminations hold for every client within ``D`` of the average (the elimination
        lemma), so a client's HCT need not come back to those cells unless its own samples
        disagree (:meth:`PFHCTClient._trusted`); below, it keeps its own samples of them.
        """
        b = super()._handover()
        assert isinstance(b, PFHCTBroadcast)  # built by broadcast_class
        shared = 0
        for d, d_estimate in enumerate(self.heterogeneity_history, start=1):
            if self._heterogeneous(d, d_estimate):
                break
            shared = d
        if not shared:
            return b
        gone = [e for e in self._eliminated if e[0] <= shared]
        depths = [np.full(len(e[1]), e[0], dtype=np.int64) for e in gone]
        self._current = replace(
            b,
            shared_depth=shared,
            eliminated_depths=np.concatenate([np.empty(0, np.int64), *depths]),
            eliminated=np.concatenate([np.empty(0, np.int64), *(e[1] for e in gone)]),
            eliminated_means=np.concatenate([np.empty(0), *(e[2] for e in gone)]),
            eliminated_widths=np.concatenate([np.empty(0), *(e[3] for e in gone)]),
        )
        return self._current

    def _stops_before(self, nodes: np.ndarray, depth: int) -> bool:
        """PF-PNE's rule (``depth > h_max``, budget spent), or the handover rule
        (:meth:`_heterogeneous`) holds at the resolution of the next depth ``depth``
        (``look_ahead``) or of the last one, or sampling ``nodes`` would take stage 1 above
        ``phi T``.

        ``look_ahead``: ``D`` and ``R`` are running maxima, so a depth at whose resolution the
        rule already holds would be withheld by :meth:`_handover`; its stage-1 samples would
        describe the average objective finer than the clients agree on, and each client's HCT
        samples those cells adaptively instead of uniformly."""
        if super()._stops_before(nodes, depth):
            return True
        last = depth if self.look_ahead else self.depth
        if self.history and self._heterogeneous(last, self.heterogeneity):
            return True
        cost = len(nodes) * self.constants.pulls_per_client(depth, self.n_clients)
        return self.used + cost > self.phi * self.budget


class PFHCTClient(PFPNEClient):
    """The PF-HCT client: PF-PNE's stage 1 (:class:`~fedxab.algorithms.pfpne.PFPNEClient`, in
    the server's rounds), then HCT with the whole remaining budget.

    ``stage2``: ``"tree"`` (default) HCT on the whole domain warm-started with the stage-1 tree
    (:meth:`_warm_start`), ``"cells"`` HCT restricted to the survivors (:meth:`_preloaded`).
    ``preload``: what its HCT starts from: ``"global"`` (default) the federation's means, each
    with the sample count its width allows, where that beats its own samples and they agree
    (:meth:`_trusted`); ``"own"`` its own stage-1 samples; ``"none"`` nothing.
    ``rounds_per_depth`` must be the server's (it checks each round's pulls).
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
        rounds_per_depth: int = 3,
        stage2: str = "tree",
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
        self._stage2_hct = partial(  # stage 2's HCT, on the domain of stage 1's partition
            HCT,
            self.partition.domain,
            nu=nu,
            rho=rho,
            preset=preset,
            c=c,
            c1=c1,
            delta=delta,
            budget=budget,
            k=k,
            split=split,
            seed=seed,  # the run's partition: stage 1's cells
        )
        self.preload = check_choice("algorithm.preload", preload, PRELOADS)
        self.rounds_per_depth = check_positive_int("algorithm.rounds_per_depth", rounds_per_depth)
        self.stage2 = check_choice("algorithm.stage2", stage2, STAGE2)
        self.hct: HCT | None = None

    def _round_targets(self, depth: int) -> list[int]:
        return round_targets(super()._first_pulls(depth), self.rounds_per_depth)

    def _first_pulls(self, depth: int) -> int:
        """A depth's first round: ``round_targets(ceil(tau_h / M))[0]`` pulls per node."""
        return self._round_targets(depth)[0]

    def _new_protected(
        self, b: PFPNEBroadcast
    ) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """A new depth or the handover: PF-PNE's checks. A later round of the depth this client
        sampled last: its nodes must be some of the last round's, its pulls the next round's
        (:func:`round_targets`); it adds no protected set."""
        if b.final or b.depth != self.depth:
            return super()._new_protected(b)
        if b.nodes.size == 0 or not np.all(np.isin(b.nodes, self._active)):
            raise ProtocolError(
                f"field 'nodes' must be some of the nodes of the last round at depth {b.depth}"
            )
        targets = self._round_targets(b.depth)
        done = self._count.get((b.depth, int(b.nodes[0])), 0)
        later = [t - done for t in targets if t > done]
        if not later or b.pulls_per_node != later[0]:
            raise ProtocolError(
                f"field 'pulls_per_node' is {b.pulls_per_node}, but after {done} pulls this "
                f"client's next round at depth {b.depth} has {later[0] if later else 0}"
            )
        return {}

    def recommend(self) -> np.ndarray:
        """The stage-2 HCT's recommendation; before stage 2, PF-PNE's (the global best node)."""
        return super().recommend() if self.hct is None else self.hct.recommend()

    def _preloaded(self, b: PFPNEBroadcast) -> tuple[np.ndarray, np.ndarray]:
        """The sample counts and reward sums ``stage2 = "cells"`` starts from on the survivors
        ``S^h``: with ``preload = "own"`` this client's stage-1 samples, with ``"global"``
        :meth:`_trusted`."""
        if self.preload == "own":
            return self._own(b.survivor_depth, b.survivors)
        return self._trusted(b.survivor_depth, b.survivors, b.survivor_means, b.survivor_widths)

    def _own(self, depth: int, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keys = [(depth, int(i)) for i in nodes]
        counts = np.array([self._count.get(key, 0) for key in keys], dtype=np.int64)
        return counts, np.array([self._sum.get(key, 0.0) for key in keys])

    def _trusted(
        self, depth: int, nodes: np.ndarray, means: np.ndarray, widths: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The counts and sums of ``nodes`` at ``depth``: a global mean where it carries more
        evidence for this client than its own samples, its own samples elsewhere.

        A global mean is sent with the width ``r = b_h + D_before + d_i`` (:meth:`PFHCTServer.
        _survivor_widths`: how far it may be from this client's mean, sampling error plus
        measured heterogeneity); it counts as ``n_g = c^2 L / r^2`` samples, the count whose HCT
        width is ``r`` (with identical clients ``r = b_h`` and ``n_g = M ceil(tau_h/M)``, every
        client's samples). It is used where ``n_g`` exceeds the client's own count and its own
        mean agrees (``|mu_m - mubar| <= b(n_m) + r``).
        """
        const = self.constants
        counts, sums = self._own(depth, nodes)
        own = sums / np.maximum(counts, 1)
        n_global = np.rint(const.c**2 * const.log_term / widths**2).astype(np.int64)
        agree = (
            (counts > 0)
            & (n_global > counts)
            & (np.abs(own - means) <= const.width(np.maximum(counts, 1)) + widths)
        )
        counts = np.where(agree, n_global, counts)
        return counts, np.where(agree, means * n_global, sums)

    def _warm_start(self, b: PFHCTBroadcast) -> dict[tuple[int, int], tuple[int, float]]:
        """The statistics ``stage2 = "tree"`` starts its HCT from: this client's own samples of
        every stage-1 node; with ``preload = "global"``, down to the handover's
        ``shared_depth``, :meth:`_trusted` global means of the survivors (the protected sets)
        and of the eliminated nodes the handover carries."""
        stats = {key: (n, self._sum[key]) for key, n in self._count.items()}
        if self.preload == "own":
            return stats
        sent = [
            (d, nodes, means, widths)
            for d, (nodes, means, widths) in self.protected.items()
            if d <= b.shared_depth
        ]
        for d in np.unique(b.eliminated_depths).tolist():
            at = b.eliminated_depths == d
            sent.append((d, b.eliminated[at], b.eliminated_means[at], b.eliminated_widths[at]))
        for d, nodes, means, widths in sent:
            counts, sums = self._trusted(d, nodes, means, widths)
            for i, n, total in zip(nodes.tolist(), counts.tolist(), sums.tolist(), strict=True):
                if n:
                    stats[(d, i)] = (n, total)
        return stats

    def _local_stage(
        self,
        b: PFPNEBroadcast,
        protected: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
        evaluate: Evaluate,
    ) -> PFPNEReport:
        """Stage 2: HCT for the rest of the budget, from the stage-1 tree (``"tree"``) or on the
        cells of ``S^h`` (``"cells"``; the whole domain if stage 1 aggregated no depth)."""
        self.protected.update(protected)
        h = b.survivor_depth
        if self.stage2 == "tree":
            hct = self._stage2_hct()
            if self.preload != "none":
                hct.warm_start(self._warm_start(b))  # type: ignore[arg-type]
        else:
            roots = (h, b.survivors) if h else None
            hct = self._stage2_hct(roots=roots)
            if h and self.preload != "none":
                hct.preload(*self._preloaded(b))
        self.hct = hct
        while self.used < self.budget:
            x = hct.ask()
            hct.tell(x, one_reward(evaluate, x))
            self.used += 1
        self.stage = "done"
        return PFPNEReport(b.phase, self.client_id, True, recommendation=self.recommend())


__all__ = ["PFHCTClient", "PFHCTServer", "node_heterogeneity"]
