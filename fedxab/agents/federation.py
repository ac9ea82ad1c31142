"""The in-process federation runner: one server and M clients of a federated algorithm, no broker.

It drives the run's sessions (:mod:`fedxab.run.session`, the same the broker agents drive)
exactly as a deployment would, every message going through the wire codec
(:mod:`fedxab.broker.codec`)::

    msg = session.start()
    while not session.finished:
        wire = packb(msg.to_wire())                       # encoded once, sent to all M clients
        for m in session.active:
            b = type(msg).from_wire(unpackb(wire))        # each client decodes its copy
            report, telemetry, _ = clients.answer(m, b)   # pulls f_m, one vectorized batch
            session.classify(m, phase, packb(report.to_wire()))   # client -> server
        session.close_phase(len(wire), len(active))      # the barrier is met: every report
        msg = session.msg

and counts, per phase (= one communication round, as in [FX] and [PF]), the messages and
encoded bytes down (``len(wire) x M``) and up (the sum of the reports' sizes), and the reports
the server accepted. The final :class:`~fedxab.algorithms.protocol.Finished` carries the
recommendation and is not counted as a round.

``evaluate_m(X)`` evaluates client m's objective ``f_m`` on the whole batch at once, adds noise
from the stream ``(seed, "noise", m)`` and records, at the client's next positions
``t = used_m + 1, ..., used_m + n`` of its budget T, the noise-free regret terms
``f* - f(x_{m,t})`` (global objective) and ``f_m* - f_m(x_{m,t})`` (its own objective), summed
over clients per round in two float64 arrays of length T (memory O(T), whatever M). From them:

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

import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab.agents.workers import ClientWorkers, answer_client, check_workers
from fedxab.broker.codec import packb
from fedxab.config import Config
from fedxab.errors import ConfigError
from fedxab.results import RunRecord, RunResults
from fedxab.run.accounting import (
    FederationError,
    PhaseCommunication,
    check_budgets_used,
    communication_block,
    stopped_phases,
)
from fedxab.run.assembly import Functions, build_run
from fedxab.run.evaluation import BudgetExceededError, regret_known
from fedxab.run.identity import run_id_for
from fedxab.run.job import RunStartCallback, run_seeds
from fedxab.run.observe import ProgressCallback, observer_of
from fedxab.run.outcome import mean_best
from fedxab.run.watch import RunWatch

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fedxab.monitoring.metrics import FederationMetrics
    from fedxab.run.continuation import Continuation
    from fedxab.run.finished import FinishedRuns

__all__ = ["Federation", "run_federated", "run_federated_config"]

log = logging.getLogger(__name__)

_MAX_IDLE_PHASES = 1000


class Federation:
    """One federated run (one seed), built from a config: server, clients, objectives, noise.

    A synchronous driver of the run's sessions (:mod:`fedxab.run.session`): per phase, every
    active client answers the broadcast (each decoding its own copy of the encoded message), its
    report goes to the server session encoded, as over a broker, and the barrier must then be
    met. ``Federation(config, seed).run()`` returns the :class:`~fedxab.results.RunRecord`. The
    attributes stay available afterwards for inspection: ``server``, ``clients``, ``family``,
    ``phases`` (one :class:`PhaseCommunication` per phase), ``used`` (evaluations per client)
    and, with ``keep_points=True``, ``points[m]`` (the points client m evaluated, in order).

    With ``continuation`` (:mod:`fedxab.run.continuation`), the run continues a finished one: it
    keeps that run's id and its clients' objectives answer the evaluations it made from its
    trials.

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
        continuation: Continuation | None = None,
    ) -> None:
        self.config = config
        self.seed = seed
        self.metrics = metrics
        self.functions = functions
        self.run_id = run_id_for(config, seed) if continuation is None else continuation.run_id
        replay = None if continuation is None else continuation.trials
        self.workers = config.run.workers
        n_clients = config.federation.clients if config.federation is not None else 0
        if self.workers > 1:
            check_workers(config, None)  # the functions: when the workers start
            if keep_points:
                raise ConfigError(
                    "run.workers", "must be 1 with keep_points (the points stay in the workers)"
                )
            if replay:
                raise ConfigError(
                    "run.workers", "must be 1 to continue a run of a user's objective"
                )
        parts = build_run(
            config,
            seed,
            run_id=self.run_id,
            server=True,
            client_ids=range(n_clients) if self.workers == 1 else (),
            functions=functions,
            keep_points=keep_points,
            replay=replay,
        )
        assert parts.server is not None
        self.session, self.hosted = parts.server, parts.clients
        self.run_ledger = parts.run_ledger
        self.n_clients = n_clients
        self.budget = config.run.budget
        self.server = self.session.server
        self.evaluators = {} if self.hosted is None else self.hosted.evaluators
        hosted_clients = {} if self.hosted is None else self.hosted.clients
        self.clients = [hosted_clients[m] for m in sorted(hosted_clients)]
        """The client state machines, in client order (for inspection; the run drives
        ``hosted``, the clients' session). Empty with ``run.workers > 1``: they live in the
        worker processes."""
        self.family = self.session.family
        self.sums = self.session.sums
        self._observed_best: dict[int, float | None] = {}
        self.recommendation: np.ndarray | None = None

    @property
    def phases(self) -> list[PhaseCommunication]:
        """The closed phases, each with the evaluations its clients made."""
        return [self.session.counted(p) for p in self.session.phases]

    @property
    def used(self) -> np.ndarray:
        """Evaluations per client so far."""
        if self.hosted is None:
            return self.sums.used.copy()
        return np.array([e.used for e in self.evaluators.values()], dtype=np.int64)

    @property
    def points(self) -> list[list[np.ndarray]] | None:
        """With ``keep_points=True``, ``points[m]``: the batches client m evaluated, in order."""
        if not self.evaluators or self.evaluators[0].points is None:
            return None
        return [e.points for e in self.evaluators.values()]  # type: ignore[misc]

    # ---------------------------------------------------------------------------- the loop
    def run(self, progress: ProgressCallback | None = None) -> RunRecord:
        """Run the federation to its end; the record of regret, answer and communication."""
        observer = observer_of(self.metrics, progress)
        watch = RunWatch.of_session(observer, self.session, self.run_ledger)
        watch.start(self.config, self.run_id, "inprocess", regret_known(self.family, self.config))
        if self.hosted is not None:
            self.hosted.watch_trials(observer)
        watch.privacy()
        with watch.failing():
            if self.hosted is None:
                with ClientWorkers(
                    self.config,
                    self.seed,
                    run_id=self.run_id,
                    n_workers=self.workers,
                    functions=self.functions,
                ) as workers:
                    record = self._run(watch, workers)
            else:
                record = self._run(watch, None)
        watch.ended(record)
        return record

    def _answers(
        self, wire: bytes, active: list[int], workers: ClientWorkers | None
    ) -> list[tuple[int, bytes]]:
        """The active clients' encoded reports to the encoded broadcast ``wire``, each client
        decoding its own copy; the telemetry of their pulls goes straight to the sums."""
        name = self.config.algorithm.name
        try:
            if workers is not None:
                answers = workers.answer(wire, active)
            else:
                assert self.hosted is not None
                answers = [answer_client(self.hosted, name, wire, m) for m in active]
        except BudgetExceededError as exc:
            raise FederationError(str(exc)) from exc
        reports = []
        for m, report, telemetry, best in answers:
            if telemetry is not None:
                self.sums.add(telemetry)
            self._observed_best[m] = best
            if report is not None:  # None: the client was not asked in this phase
                reports.append((m, report))
        return reports

    def _run(self, watch: RunWatch, workers: ClientWorkers | None) -> RunRecord:
        session, sums, observer = self.session, self.sums, watch.observer
        n_clients = self.n_clients
        idle = 0

        t0 = time.perf_counter()
        msg = session.start()
        for m in range(n_clients):  # in process, every client is there from the start
            session.population.join(m)
        while session.finished is None:
            opened = time.perf_counter()
            wire = packb(msg.to_wire())
            phase = session.phase
            active = session.active
            for m, report in self._answers(wire, list(active), workers):
                verdict = session.classify(m, phase, report)
                if verdict.outcome != "accepted":
                    raise FederationError(f"phase {phase}: {verdict.outcome}: {verdict.text}")
            sums.flush()
            if not session.barrier_met(0.0, None, 1.0):
                raise FederationError(
                    f"phase {phase}: the server's barrier is not met after all {len(active)} "
                    f"clients reported ({len(session.accepted)} reports accepted)"
                )
            accepted = len(session.accepted)
            evaluations = sums.evaluations_by_phase.get(phase, 0)
            session.close_phase(len(wire), len(active))
            idle = idle + 1 if evaluations == 0 else 0
            if idle > _MAX_IDLE_PHASES:
                raise FederationError(
                    f"{idle} phases in a row without any evaluation (at phase {phase}): "
                    "the algorithm does not terminate"
                )
            observer.on_phase(
                session.counted(session.phases[-1]),
                time.perf_counter() - opened,
                active=watch.active(),
            )
            observer.on_population(session.population.records[-1])
            observer.on_report("accepted", accepted)
            observer.on_evaluations(evaluations)
            if not (observer.wants_progress or observer.wants_regret):
                msg = session.msg
                continue
            done = watch.reached(sums.used)
            if watch.due(done):
                watch.advance(sums, done)
                if observer.wants_regret:
                    self._observe_regret(watch, done)
                watch.privacy_if_due()
                watch.progress(done, phase=phase, evaluations=int(sums.used.sum()))
            msg = session.msg
        wall = time.perf_counter() - t0

        check_budgets_used(sums.used, session.expected_use())
        outcomes = (
            workers.outcomes()
            if workers is not None
            else {m: self.hosted.outcome(m) for m in range(n_clients)}  # type: ignore[union-attr]
        )
        for m in range(n_clients):
            session.add_outcome(outcomes[m])
        record = session.record(wall, self.privacy_block())
        self.recommendation = record.recommendation
        return record

    def _observe_regret(self, watch: RunWatch, done: int) -> None:
        """The regret at per-client round ``done`` (every active client got there)."""
        global_simple = local_simple = None
        if done > 0:
            g, loc = self.sums.simple_curves(np.array([done]))
            global_simple = None if g is None else float(g[0])
            local_simple = None if loc is None else float(loc[0])
        observed = mean_best(self._observed_best.values())
        watch.regret_at(done, (global_simple, local_simple), observed)

    @property
    def withdrawn(self) -> dict[int, Any]:
        """The clients that withdrew from the run (client -> its Withdrawal)."""
        return self.session.withdrawn

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
    continuation: Continuation | None = None,
) -> RunRecord:
    """Run the configured federated algorithm once with ``seed`` (see :class:`Federation`);
    ``functions``: the clients' own objectives, in place of the config's; ``continuation``:
    the finished run it continues."""
    record = Federation(
        config, seed, metrics=metrics, functions=functions, continuation=continuation
    ).run(progress)
    if continuation is not None:
        continuation.check(record)
    return record


def run_federated_config(
    config: Config,
    progress: ProgressCallback | None = None,
    *,
    on_run_start: RunStartCallback | None = None,
    metrics: FederationMetrics | None = None,
    functions: Functions | None = None,
    finished: FinishedRuns | None = None,
    continuations: Mapping[int, Continuation] | None = None,
) -> RunResults:
    """All ``config.run.repeats`` federated runs (seeds ``seed, seed+1, ...``) as results
    (``finished``: see :func:`~fedxab.run.job.run_seeds`; ``continuations``: by seed, the
    finished run a seed's run continues, :mod:`fedxab.run.continuation`).

    The ``objective`` block describes the configured (base) objective; with
    ``heterogeneity = "offset"`` or ``"none"`` it is the global objective itself.
    """
    return run_seeds(
        config,
        lambda seed: run_federated(
            config,
            seed,
            progress,
            metrics=metrics,
            functions=functions,
            continuation=(continuations or {}).get(seed),
        ),
        on_run_start=on_run_start,
        finished=finished,
    )
