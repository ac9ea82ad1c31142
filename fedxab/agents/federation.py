"""The in-process federation runner: one server and M clients of a federated algorithm, no broker.

It drives the sans-I/O state machines of :mod:`fedxab.algorithms.protocol` exactly as a
deployment would, every message going through the wire codec (:mod:`fedxab.broker.codec`)::

    msg = server.start()
    while msg is not Finished:
        wire = packb(msg.to_wire())                       # encoded once, sent to all M clients
        for m in clients:
            b = type(msg).from_wire(unpackb(wire))        # each client decodes its copy
            report = client_m.answer(b, evaluate_m)       # pulls f_m, one vectorized batch
            data = packb(report.to_wire())                # client -> server
            server.receive(m, type(report).from_wire(unpackb(data)))
        msg = server.close_phase()

and counts, per phase (= one communication round, spec-fedpne-pfpne §4.4), the messages and
encoded bytes down (``len(wire) x M``) and up (the sum of the reports' sizes), and the reports
the server accepted. The final :class:`~fedxab.algorithms.protocol.Finished` carries the
recommendation and is not counted as a round.

``evaluate_m(X)`` evaluates client m's objective ``f_m`` on the whole batch at once, adds noise
from the stream ``(seed, "noise", m)`` and records, at the client's next positions
``t = used_m + 1, ..., used_m + n`` of its budget T, the noise-free regret terms
``f* - f(x_{m,t})`` (global objective) and ``f_m* - f_m(x_{m,t})`` (its own objective), summed
over clients per round in two float64 arrays of length T (memory O(T), whatever M). From them
(spec-fedpne-pfpne §1.2):

- ``cumulative_regret``: ``(1/M) sum_{s<=t} sum_m (f* - f(x_{m,s}))``, [FX]'s plotted quantity;
- ``local_cumulative_regret``: ``(1/M) sum_{s<=t} sum_m (f_m* - f_m(x_{m,s}))``, [PF]'s;
- ``simple_regret``: ``f* - f(x_rec)`` of the recommendation, on the global objective.

The client objectives come from ``[federation] heterogeneity`` (:mod:`fedxab.objectives.families`):
``"offset"`` (``f_m = f + xi_m``, global ``f``), ``"shift"`` (``f_m(x) = f(clip(x - s_m))``,
global = their average, whose optimum is computed numerically) or ``"none"``.
Every client must use exactly its budget T; anything else is an algorithm bug and raises
:class:`FederationError`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab import regret as _regret
from fedxab.agents.evaluation import (
    BudgetExceededError,
    ClientEvaluator,
    GlobalValues,
    RegretSums,
)
from fedxab.agents.local import (
    ProgressCallback,
    RunStartCallback,
    announce_seeds,
    collect_results,
    report_progress,
    wants_details,
)
from fedxab.algorithms.protocol import Finished
from fedxab.algorithms.registry import PRIVATE, make_federation
from fedxab.broker.codec import packb, unpackb
from fedxab.config import Config
from fedxab.errors import ConfigError, FedxabError
from fedxab.objectives.families import ClientFamily
from fedxab.privacy.run_ledger import RunLedger
from fedxab.results import RunRecord, RunResults
from fedxab.run.assembly import Functions, client_family, make_noise_model, regret_known
from fedxab.run.identity import run_id_for
from fedxab.run.outcome import ClientOutcome

if TYPE_CHECKING:
    from fedxab.monitoring.metrics import FederationMetrics

__all__ = [
    "Federation",
    "FederationError",
    "PhaseCommunication",
    "ledger_epsilons",
    "run_federated",
    "run_federated_config",
    "start_metrics",
]

log = logging.getLogger(__name__)

_PROGRESS_UPDATES = 200
_MAX_IDLE_PHASES = 1000


class FederationError(FedxabError, RuntimeError):
    """A federated algorithm broke the runner's contract: a client did not use exactly its
    budget, the phase barrier was not met after every client reported, or the run does not end."""


@dataclasses.dataclass(frozen=True)
class PhaseCommunication:
    """One phase (one communication round): what travelled, and what the clients evaluated."""

    phase: int
    depth: int | None
    """Depth of the phase's nodes, where the broadcast exposes it (``depth``), else None."""
    messages_up: int
    messages_down: int
    bytes_up: int
    bytes_down: int
    reports_accepted: int
    """Reports the server accepted (``receive`` returned True; duplicates are not)."""
    evaluations: int
    """Evaluations made by all clients in this phase."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def phase_communication(
    broadcast: Any,
    broadcast_bytes: int,
    messages_down: int,
    messages_up: int,
    bytes_up: int,
    accepted: int,
    evaluations: int,
) -> PhaseCommunication:
    """One phase's counts: ``broadcast`` went to ``messages_down`` clients (``broadcast_bytes``
    each), ``messages_up`` reports of ``bytes_up`` bytes in all came back."""
    depth = getattr(broadcast, "depth", None)
    return PhaseCommunication(
        phase=int(broadcast.phase),
        depth=None if depth is None else int(depth),
        messages_up=messages_up,
        messages_down=messages_down,
        bytes_up=bytes_up,
        bytes_down=broadcast_bytes * messages_down,
        reports_accepted=accepted,
        evaluations=evaluations,
    )


def communication_block(n_clients: int, phases: list[PhaseCommunication]) -> dict[str, Any]:
    """A run's ``communication`` block: totals and the per-phase list."""
    return {
        "clients": n_clients,
        "rounds": len(phases),
        "messages_up": sum(p.messages_up for p in phases),
        "messages_down": sum(p.messages_down for p in phases),
        "bytes_up": sum(p.bytes_up for p in phases),
        "bytes_down": sum(p.bytes_down for p in phases),
        "per_phase": [p.to_dict() for p in phases],
    }


def withdrawn_clients(server: Any) -> dict[int, Any]:
    """The clients that withdrew from the run (client -> its Withdrawal), as the server state
    machine records them; empty for algorithms whose clients never withdraw."""
    return getattr(server, "withdrawn", {})


def own_recommendation(client: Any) -> np.ndarray | None:
    """A client's own final answer, where the algorithm gives each client one (local and
    personalized algorithms: ``client.recommend()``), else None (the server's answer is the
    client's)."""
    recommend = getattr(client, "recommend", None)
    return None if recommend is None else recommend()


def stopped_phases(server: Any) -> dict[int, int]:
    """The clients whose releases stopped, with the phase they stopped at: withdrawn clients
    (local DP) and clients the server left out of its releases (central DP, ``refused``)."""
    stopped = {m: w.phase for m, w in withdrawn_clients(server).items()}
    return stopped | dict(getattr(server, "refused", {}))


def observe_privacy(
    metrics: FederationMetrics, run_ledger: RunLedger, n_clients: int, server: Any
) -> None:
    """Give ``metrics`` every client's epsilon so far (from ``run_ledger``), the budget, delta
    and the clients whose releases stopped."""
    budget = run_ledger.budget
    metrics.on_privacy(
        ledger_epsilons(run_ledger, range(n_clients)),
        budget_epsilon=None if budget is None else budget.epsilon,
        delta=run_ledger.delta,
        withdrawn=stopped_phases(server),
    )


def expected_use(n_clients: int, budget: int, withdrawn: dict[int, Any]) -> np.ndarray:
    """Evaluations each client must have made at the end: its budget T, or for a client that
    withdrew the ``used`` count its withdrawal declared."""
    expected = np.full(n_clients, budget, dtype=np.int64)
    for m, withdrawal in withdrawn.items():
        expected[m] = withdrawal.used
    return expected


def check_budgets_used(used: np.ndarray, expected: np.ndarray) -> None:
    """Raise :class:`FederationError` unless every client made exactly ``expected`` evaluations
    (its budget T, see :func:`expected_use`)."""
    short = np.nonzero(used != expected)[0]
    if short.size:
        detail = ", ".join(f"client {m}: {int(used[m])} of {int(expected[m])}" for m in short[:5])
        raise FederationError(
            f"{short.size} client(s) did not use exactly their budget of evaluations "
            f"({detail}{', ...' if short.size > 5 else ''}): algorithm bug"
        )


def federated_record(
    seed: int,
    family: ClientFamily | None,
    sums: RegretSums,
    recommendation: np.ndarray,
    wall: float,
    communication: dict[str, Any],
    privacy: dict[str, Any] | None = None,
    expected: np.ndarray | None = None,
    clients: tuple[ClientOutcome, ...] | None = None,
) -> RunRecord:
    """The :class:`RunRecord` of a federated run from its flushed regret sums.

    Besides the cumulative curves it carries the simple-regret curves of spec-dpftsde §7.1
    (:meth:`RegretSums.simple_curves`, on the same rounds): ``global_simple_regret`` and
    ``local_simple_regret``, the mean over clients of each client's best noise-free regret so far.
    ``expected`` (per client, :func:`expected_use`): the pulls the sums should hold; where they
    hold fewer, the record says so in ``regret_coverage``. ``family`` is None where the
    objectives are the clients' own (no regret); ``clients``: what each client observed.
    """
    rounds = _regret.round_grid(sums.budget)
    glob = None if family is None else family.global_objective
    cum, local = sums.curves(rounds)
    global_simple, local_simple = sums.simple_curves(rounds)
    simple = None
    if glob is not None and glob.optimum_value is not None:
        value = float(glob(recommendation[None])[0])
        simple = _regret.simple_regret(float(glob.optimum_value), value)
    log.debug(
        "seed %d: %d clients x %d evaluations, %d phases in %.3f s",
        seed,
        sums.n_clients,
        sums.budget,
        communication["rounds"],
        wall,
    )
    return RunRecord(
        seed=seed,
        rounds=rounds,
        cumulative_regret=cum,
        recommendation=recommendation,
        simple_regret=simple,
        evaluations=int(sums.used.sum()),
        wall_time_s=wall,
        local_cumulative_regret=local,
        communication=communication,
        privacy=privacy,
        global_simple_regret=global_simple,
        local_simple_regret=local_simple,
        regret_coverage=None if expected is None else regret_coverage(sums, expected),
        clients=clients,
    )


def regret_coverage(sums: RegretSums, expected: np.ndarray) -> dict[str, Any] | None:
    """The ``regret_coverage`` block of a run whose sums miss pulls of ``expected``, else None."""
    short = np.flatnonzero(sums.received < expected)
    if not short.size:
        return None
    return {
        "pulls_expected": int(expected.sum()),
        "pulls_received": int(np.minimum(sums.received, expected).sum()),
        "clients": [int(m) for m in short],
    }


def start_metrics(
    metrics: FederationMetrics,
    config: Config,
    run_id: str,
    transport: str,
    clients: int,
    family: ClientFamily | None,
) -> None:
    """Tell ``metrics`` that run ``run_id`` of ``config`` starts, seen by a party that observes
    ``clients`` clients over ``transport`` (``inprocess``, ``memory``, ``kafka``)."""
    global_known, local_known = regret_known(family)
    metrics.start_run(
        run_id=run_id,
        algorithm=config.algorithm.name,
        objective=config.objective.name,
        transport=transport,
        clients=clients,
        budget=config.run.budget,
        regret_known=global_known,
        local_regret_known=local_known,
    )


def ledger_epsilons(run_ledger: RunLedger, clients: Any) -> dict[int, float]:
    """The epsilon each of ``clients`` has spent so far in ``run_ledger``, recomputed by its
    accountant at the run's delta (the numbers of :meth:`RunLedger.block`)."""
    deltas = dict.fromkeys((int(m) for m in clients), run_ledger.delta)
    return run_ledger.ledger.epsilons(run_ledger.run, deltas)


class EpsilonWatch:
    """The max over ``clients`` of the epsilon spent so far in ``run_ledger``, for progress
    displays: recomputed (:func:`ledger_epsilons`) only when the ledger recorded releases since
    the last look (one cheap query otherwise; the ledger is append-only, so the same release
    counts mean the same histories)."""

    def __init__(self, run_ledger: RunLedger, clients: Any) -> None:
        self.run_ledger = run_ledger
        self.clients = [int(m) for m in clients]
        self._releases: dict[int, int] | None = None
        self._epsilon = 0.0

    def __call__(self) -> float:
        rl = self.run_ledger
        releases = rl.ledger.releases_all(rl.run)
        if releases != self._releases:
            self._releases = releases
            self._epsilon = max(ledger_epsilons(rl, self.clients).values(), default=0.0)
        return self._epsilon


class Federation:
    """One federated run (one seed), built from a config: server, clients, objectives, noise.

    ``Federation(config, seed).run()`` returns the :class:`~fedxab.results.RunRecord`. The
    attributes stay available afterwards for inspection: ``server``, ``clients``, ``family``,
    ``phases`` (one :class:`PhaseCommunication` per phase), ``used`` (evaluations per client)
    and, with ``keep_points=True``, ``points[m]`` (the points client m evaluated, in order).

    With ``metrics`` (a :class:`~fedxab.monitoring.metrics.FederationMetrics`), the run updates
    it as it goes: once per phase the phase, messages, bytes, reports and evaluations; at each
    progress step (at most about 200 per run) the regret; every ``privacy_interval_s`` the
    clients' epsilon; at the end every value from the record.
    """

    def __init__(
        self,
        config: Config,
        seed: int,
        *,
        keep_points: bool = False,
        metrics: FederationMetrics | None = None,
        functions: Functions | None = None,
    ) -> None:
        if config.federation is None:
            raise ConfigError(
                "algorithm.name",
                f"{config.algorithm.name!r} is not a federated algorithm; use "
                "fedxab.agents.local.run_single",
            )
        self.config = config
        self.seed = seed
        self.metrics = metrics
        self.n_clients = config.federation.clients
        self.budget = config.run.budget
        self.noise = make_noise_model(config)
        self.family = client_family(config, seed, functions=functions)
        self.server, self.clients = make_federation(
            config.algorithm.name,
            config.domain,
            n_clients=self.n_clients,
            budget=self.budget,
            seed=seed,
            params=config.algorithm_params(),
        )
        self.run_ledger: RunLedger | None = None
        if config.privacy is not None:
            run = run_id_for(config, seed)
            self.run_ledger = RunLedger.from_config(
                config.privacy, config.algorithm_params(), run, self.n_clients
            )
            for m, client in enumerate(self.clients):
                gate = self.run_ledger.gate(m)
                if PRIVATE[config.algorithm.name] == "server":
                    self.server.gates[m] = gate  # central DP: the trusted server releases
                else:
                    client.gate = gate
        self.phases: list[PhaseCommunication] = []
        glob = self.family.global_objective
        shared = None if glob is None else GlobalValues(glob)
        self.evaluators = [
            ClientEvaluator(
                m,
                self.family,
                self.noise,
                seed=seed,
                budget=self.budget,
                global_values=shared,
                keep_points=keep_points,
                direction=config.objective.direction,
            )
            for m in range(self.n_clients)
        ]
        global_known, local_known = regret_known(self.family)
        self.sums = RegretSums(
            self.n_clients, self.budget, global_known=global_known, local_known=local_known
        )
        self.recommendation: np.ndarray | None = None

    @property
    def used(self) -> np.ndarray:
        """Evaluations per client so far."""
        return np.array([e.used for e in self.evaluators], dtype=np.int64)

    @property
    def points(self) -> list[list[np.ndarray]] | None:
        """With ``keep_points=True``, ``points[m]``: the batches client m evaluated, in order."""
        if self.evaluators and self.evaluators[0].points is None:
            return None
        return [e.points for e in self.evaluators]  # type: ignore[misc]

    # ---------------------------------------------------------------------------- the loop
    def run(self, progress: ProgressCallback | None = None) -> RunRecord:
        """Run the federation to its end; the record of regret, answer and communication."""
        metrics = self.metrics
        if metrics is None:
            return self._run(progress)
        start_metrics(
            metrics,
            self.config,
            run_id_for(self.config, self.seed),
            "inprocess",
            self.n_clients,
            self.family,
        )
        if self.run_ledger is not None:
            self._observe_privacy(metrics)
        try:
            record = self._run(progress)
        except BaseException:
            metrics.fail_run()
            raise
        metrics.end_run(record)
        return record

    def _run(self, progress: ProgressCallback | None) -> RunRecord:
        server, clients = self.server, self.clients
        n_clients, budget = self.n_clients, self.budget
        evaluators, sums = self.evaluators, self.sums
        metrics = self.metrics
        every = max(1, budget // _PROGRESS_UPDATES)
        next_report = every
        details = wants_details(progress)
        watch = (
            EpsilonWatch(self.run_ledger, range(n_clients))
            if details and self.run_ledger is not None
            else None
        )
        running, running_local, counted = 0.0, 0.0, 0
        idle = 0

        withdrawn = self.withdrawn
        t0 = time.perf_counter()
        msg = server.start()
        while not isinstance(msg, Finished):
            opened = time.perf_counter()
            wire = packb(msg.to_wire())
            broadcast_cls = type(msg)
            phase = int(msg.phase)
            bytes_up = accepted = sent = 0
            active = [m for m in range(n_clients) if m not in withdrawn]
            for m in active:
                broadcast = broadcast_cls.from_wire(unpackb(wire))
                try:
                    report = clients[m].answer(broadcast, evaluators[m])
                except BudgetExceededError as exc:
                    raise FederationError(str(exc)) from exc
                sums.add(evaluators[m].take(phase))
                data = packb(report.to_wire())
                bytes_up += len(data)
                sent += 1
                if server.receive(m, type(report).from_wire(unpackb(data))):
                    accepted += 1
            sums.flush()
            if not server.ready():
                raise FederationError(
                    f"phase {phase}: the server's barrier is not met after all {len(active)} "
                    f"clients reported ({accepted} reports accepted)"
                )
            evaluations = sums.evaluations_by_phase.get(phase, 0)
            comm = phase_communication(
                msg, len(wire), len(active), sent, bytes_up, accepted, evaluations
            )
            self.phases.append(comm)
            idle = idle + 1 if evaluations == 0 else 0
            if idle > _MAX_IDLE_PHASES:
                raise FederationError(
                    f"{idle} phases in a row without any evaluation (at phase {phase}): "
                    "the algorithm does not terminate"
                )
            if metrics is not None:
                metrics.on_phase(
                    comm, time.perf_counter() - opened, active=n_clients - len(withdrawn)
                )
                metrics.on_report("accepted", accepted)
                metrics.on_report("duplicate", sent - accepted)
                metrics.on_evaluations(evaluations)
            if progress is not None or metrics is not None:
                done = int(sums.used.min(initial=budget, where=self._active_mask()))
                if done >= next_report or done == budget:
                    if sums.global_sum is not None:
                        running += float(sums.global_sum[counted:done].sum())
                    if sums.local_sum is not None:
                        running_local += float(sums.local_sum[counted:done].sum())
                    counted = done
                    cum = running / n_clients if sums.global_sum is not None else float("nan")
                    if metrics is not None:
                        self._observe_regret(metrics, done, cum, running_local / n_clients)
                        if self.run_ledger is not None and metrics.privacy_due():
                            self._observe_privacy(metrics)
                    if details:
                        report_progress(
                            progress,  # type: ignore[arg-type]
                            done,
                            budget,
                            cum,
                            phase=phase,
                            evaluations=int(sums.used.sum()),
                            epsilon=None if watch is None else watch(),
                        )
                    elif progress is not None:
                        progress(done, budget, cum)
                    next_report = (done // every + 1) * every
            msg = server.close_phase()
        wall = time.perf_counter() - t0

        check_budgets_used(sums.used, expected_use(n_clients, budget, withdrawn))
        recommendation = np.asarray(msg.recommendation, dtype=np.float64).reshape(-1).copy()
        self.recommendation = recommendation
        return federated_record(
            self.seed,
            self.family,
            sums,
            recommendation,
            wall,
            self.communication(),
            self.privacy_block(),
            clients=tuple(
                e.observed.outcome(own_recommendation(client))
                for e, client in zip(self.evaluators, self.clients, strict=True)
            ),
        )

    def _observe_regret(
        self, metrics: FederationMetrics, done: int, cum: float, local: float
    ) -> None:
        """The regret at per-client round ``done`` (every active client got there)."""
        sums = self.sums
        global_simple = local_simple = None
        if done > 0:
            g, loc = sums.simple_curves(np.array([done]))
            global_simple = None if g is None else float(g[0])
            local_simple = None if loc is None else float(loc[0])
        metrics.on_regret(
            t=done,
            cumulative=cum if sums.global_sum is not None else None,
            local=local if sums.local_sum is not None else None,
            global_simple=global_simple,
            local_simple=local_simple,
        )

    def _observe_privacy(self, metrics: FederationMetrics) -> None:
        """Every client's epsilon so far, from the ledger."""
        assert self.run_ledger is not None
        observe_privacy(metrics, self.run_ledger, self.n_clients, self.server)

    @property
    def withdrawn(self) -> dict[int, Any]:
        """The clients that withdrew from the run (client -> its Withdrawal)."""
        return withdrawn_clients(self.server)

    def _active_mask(self) -> np.ndarray:
        mask = np.ones(self.n_clients, dtype=bool)
        mask[list(self.withdrawn)] = False
        return mask

    def privacy_block(self) -> dict[str, Any] | None:
        """The run's ``privacy`` block (private algorithms), from the ledger."""
        if self.run_ledger is None:
            return None
        return self.run_ledger.block(range(self.n_clients), stopped_phases(self.server))

    def communication(self) -> dict[str, Any]:
        """The run's ``communication`` block: totals and the per-phase list."""
        return communication_block(self.n_clients, self.phases)


def run_federated(
    config: Config,
    seed: int,
    progress: ProgressCallback | None = None,
    *,
    metrics: FederationMetrics | None = None,
    functions: Functions | None = None,
) -> RunRecord:
    """Run the configured federated algorithm once with ``seed`` (see :class:`Federation`);
    ``functions``: the clients' own objectives, in place of the config's."""
    return Federation(config, seed, metrics=metrics, functions=functions).run(progress)


def run_federated_config(
    config: Config,
    progress: ProgressCallback | None = None,
    *,
    on_run_start: RunStartCallback | None = None,
    metrics: FederationMetrics | None = None,
    functions: Functions | None = None,
) -> RunResults:
    """All ``config.run.repeats`` federated runs (seeds ``seed, seed+1, ...``) as results.

    The ``objective`` block describes the configured (base) objective; with
    ``heterogeneity = "offset"`` or ``"none"`` it is the global objective itself.
    """
    runs = [
        run_federated(config, seed, progress, metrics=metrics, functions=functions)
        for seed in announce_seeds(config, on_run_start)
    ]
    return collect_results(config, runs)
