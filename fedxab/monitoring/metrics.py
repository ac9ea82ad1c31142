"""Prometheus metrics of a federation: regret, phases, communication, reports and privacy loss.

One :class:`FederationMetrics` owns a dedicated :class:`prometheus_client.CollectorRegistry`
(never the process-wide default one), so that several runs, several agents or several tests in
one process never collide. The runners update it (in-process
:class:`~fedxab.agents.federation.Federation`; over a broker
:class:`~fedxab.agents.server.ServerAgent` and :class:`~fedxab.agents.client.ClientAgent`),
and :mod:`fedxab.monitoring.endpoint` serves it over HTTP at ``/metrics``.

Naming follows the Prometheus conventions: prefix ``fedxab_``, base units (seconds, bytes),
counters end in ``_total``, and labels take a small fixed set of values only: a client id is
never a label (per-client detail lives in the privacy ledger and the results file; ``fedxab
audit`` shows it). The metrics (see :data:`METRICS` for the help texts):

==========================================  =========  ===========================================
name                                        type       meaning
==========================================  =========  ===========================================
``fedxab_build_info{version,python}``       gauge      1; the fedxab and Python versions
``fedxab_run_info{algorithm,objective,      gauge      1 for the run in progress (or the last
transport,role,run_id}``                               one); one series at a time
``fedxab_runs_started_total``               counter    runs (seeds) started by this process
``fedxab_runs_total{outcome}``              counter    runs ended, ``finished`` or ``failed``
``fedxab_run_running``                      gauge      1 while a run is in progress
``fedxab_run_start_time_seconds``           gauge      Unix time the current run started
``fedxab_clients``                          gauge      clients in this view (M; a client agent:
                                                       the clients it hosts)
``fedxab_clients_active``                   gauge      of them, those still in the run (not
                                                       withdrawn, not left)
``fedxab_evaluation_budget``                gauge      T, evaluations per client
``fedxab_round``                            gauge      per-client round t every active client has
                                                       reached (evaluations per client so far)
``fedxab_evaluations_total``                counter    evaluations of all clients in this view
``fedxab_phase``                            gauge      the current (last closed) phase number
``fedxab_phases_total``                     counter    phases closed (communication rounds)
``fedxab_phase_duration_seconds``           histogram  wall time of a phase, broadcast to close
``fedxab_phase_reports``                    gauge      server: reports accepted in the open phase
``fedxab_phase_clients_joined``             gauge      server: clients that joined the run in
                                                       the last closed phase
``fedxab_phase_clients_left``               gauge      server: clients that left it then (a
                                                       leave before the end, or withdrew)
``fedxab_phase_clients_asked``              gauge      server: clients asked in the last closed
                                                       phase (``[federation] participation``)
``fedxab_phase_clients_reported``           gauge      server: reports it accepted of them
``fedxab_clients_joined_total``             counter    server: joins over the phases closed
``fedxab_clients_left_total``               counter    server: leaves over the phases closed
``fedxab_messages_total{direction}``        counter    messages, ``up`` (client -> server reports)
                                                       and ``down`` (broadcast, once per client)
``fedxab_message_bytes_total{direction}``   counter    their encoded payload bytes
``fedxab_reports_total{outcome}``           counter    reports the server received: ``accepted``,
                                                       ``duplicate``, ``late``, ``invalid``
``fedxab_control_messages_total{kind}``     counter    server: control-topic messages, ``join``,
                                                       ``leave``, ``heartbeat``, ``telemetry``,
                                                       ``stopped`` (a client stopped with an
                                                       aborted run), ``invalid``, ``duplicate``
                                                       (a second join or leave of one client)
``fedxab_broadcasts_repeated_total``        counter    server: broadcasts published again (stall)
``fedxab_broadcasts_invalid_total``         counter    client: broadcasts rejected as invalid
``fedxab_ledger_records_invalid_total``     counter    server: invalid ledger-topic records
``fedxab_cumulative_regret``                gauge      global cumulative regret averaged over
                                                       clients, ``(1/M) sum_{s<=t} sum_m (f* -
                                                       f(x_{m,s}))``
``fedxab_local_cumulative_regret``          gauge      local one, ``(1/M) sum sum (f_m* - f_m)``
``fedxab_global_simple_regret``             gauge      mean over clients of the best global
                                                       regret so far (Dai et al. 2021's metric)
``fedxab_local_simple_regret``              gauge      the same on the clients' own objectives
``fedxab_simple_regret``                    gauge      ``f* - f(x_rec)`` of the final
                                                       recommendation (NaN until the end)
``fedxab_observed_best_mean``               gauge      mean over the view's clients of the best
                                                       value each observed of its own objective,
                                                       in the user's direction (no optimum
                                                       needed; a server: NaN until the clients'
                                                       outcomes arrive at the end)
``fedxab_epsilon_max``                      gauge      the run's epsilon: the largest epsilon
                                                       spent by any client at ``delta`` (clients'
                                                       data are disjoint: parallel composition)
``fedxab_epsilon_budget``                   gauge      the per-client budget epsilon (NaN: none)
``fedxab_privacy_delta``                    gauge      the delta epsilon is accounted at
``fedxab_client_epsilon``                   gauge      distribution over clients of the epsilon
                                            histogram  each has spent: ``_bucket{le}`` (clients
                                                       with epsilon <= le), ``_gcount``, ``_gsum``
``fedxab_clients_over_budget``              gauge      clients whose epsilon exceeds the budget
                                                       (0 unless something is wrong)
``fedxab_clients_withdrawn``                gauge      clients that stopped releasing (budget
                                                       exhausted)
==========================================  =========  ===========================================

The privacy metrics exist only while a private run is observed. The regret gauges are NaN when
the optimum is unknown. Counters add up over the runs (seeds) of a process; the gauges describe the
run in progress, or the last one. At the end of a run :meth:`FederationMetrics.end_run` sets every
gauge from the run's :class:`~fedxab.results.RunRecord`, so the values then equal the results file
exactly (cumulative regret, epsilon); the counters of phases, messages, bytes and evaluations equal
the record's communication block by construction (the runners count the same phases).

Cost: an update is a few lock-protected float additions; the runners call them once per phase
(regret once per progress step, privacy at most every ``privacy_interval_s``), never per
evaluation. The privacy families are computed from a snapshot when scraped.
"""

from __future__ import annotations

import logging
import math
import platform
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fedxab.run.observe import PrivacyView, RunObserver
from fedxab.run.outcome import mean_best
from fedxab.run.population import PhasePopulation
from fedxab.security.signing import SIGNATURE_REASONS

__all__ = [
    "EPSILON_BUCKETS",
    "PHASE_DURATION_BUCKETS",
    "REJECT_REASONS",
    "REPORT_OUTCOMES",
    "FederationMetrics",
    "PhaseCounts",
]

log = logging.getLogger(__name__)

REPORT_OUTCOMES = ("accepted", "duplicate", "late", "invalid")
CONTROL_KINDS = ("join", "leave", "heartbeat", "telemetry", "stopped", "invalid", "duplicate")
REJECTED_TOPICS = ("report", "control", "ledger", "broadcast")
REJECT_REASONS = (
    *SIGNATURE_REASONS,  # malformed (undecodable), missing_signature, unknown_sender, bad_signature
    "wrong_run",
    "wrong_kind",
    "wrong_key",  # the record key is not the sender's id
    "replay",  # another session of the run (signing runs)
    "late",  # an earlier phase
    "future_phase",
    "bad_payload",  # a body the algorithm refuses
    "conflict",  # a ledger record or client outcome contradicting the one already recorded
    "server_authored",  # local DP: a ledger record the server wrote about a client
    "end_mismatch",  # a ledger end marker that does not close the releases read
    "too_large",  # above [broker] max_message_bytes: refused before decoding
)
"""Why a message is refused: the ``reason`` label of ``fedxab_messages_rejected_total``."""
DIRECTIONS = ("up", "down")
ROLES = ("federation", "server", "client")

PHASE_DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, math.inf,
)  # fmt: skip
"""Phase durations span milliseconds (in-process) to minutes (slow black boxes on Kafka)."""

EPSILON_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, math.inf)
"""Upper bounds (``le``) of ``fedxab_client_epsilon``'s buckets."""

NAN = math.nan


class PhaseCounts(Protocol):
    """What one phase carried (e.g. :class:`~fedxab.run.accounting.PhaseCommunication`)."""

    phase: int
    messages_up: int
    messages_down: int
    bytes_up: int
    bytes_down: int


def _value(x: float | None) -> float:
    return NAN if x is None else float(x)


class _PrivacyCollector(Collector):
    """The privacy families, computed at scrape time from the latest snapshot (none: no
    families, so a non-private run exports no epsilon at all)."""

    def __init__(self) -> None:
        self.snapshot: PrivacyView | None = None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None:
            return
        values = [snap.epsilon[m] for m in sorted(snap.epsilon)]
        yield GaugeMetricFamily(
            "fedxab_epsilon_max",
            METRICS["fedxab_epsilon_max"],
            value=max(values, default=0.0),
        )
        yield GaugeMetricFamily(
            "fedxab_epsilon_budget", METRICS["fedxab_epsilon_budget"], value=_value(snap.budget)
        )
        yield GaugeMetricFamily(
            "fedxab_privacy_delta", METRICS["fedxab_privacy_delta"], value=_value(snap.delta)
        )
        buckets = []
        for le in EPSILON_BUCKETS:
            label = "+Inf" if le == math.inf else repr(le)
            buckets.append((label, float(sum(1 for e in values if e <= le))))
        yield GaugeHistogramMetricFamily(
            "fedxab_client_epsilon",
            METRICS["fedxab_client_epsilon"],
            buckets=buckets,
            gsum_value=math.fsum(values),
        )
        over = 0 if snap.budget is None else sum(1 for e in values if e > snap.budget)
        yield GaugeMetricFamily(
            "fedxab_clients_over_budget", METRICS["fedxab_clients_over_budget"], value=over
        )
        yield GaugeMetricFamily(
            "fedxab_clients_withdrawn",
            METRICS["fedxab_clients_withdrawn"],
            value=len(snap.withdrawn),
        )


METRICS: dict[str, str] = {
    "fedxab_build_info": "fedxab build: 1, with the fedxab and Python versions as labels.",
    "fedxab_run_info": "The run in progress (or the last one): 1, with its algorithm, objective, "
    "transport, this process's role and the run id as labels.",
    "fedxab_runs_started": "Runs (seeds) this process started.",
    "fedxab_runs": "Runs this process ended, by outcome (finished, failed).",
    "fedxab_run_running": "1 while a run is in progress, else 0.",
    "fedxab_run_start_time_seconds": "Unix time the current (or last) run started.",
    "fedxab_clients": "Clients in this view: M (a client agent: the clients it hosts).",
    "fedxab_clients_active": "Clients still in the run (not withdrawn, not left).",
    "fedxab_evaluation_budget": "T: the evaluation budget of each client.",
    "fedxab_round": "Per-client round t every active client has reached (evaluations each).",
    "fedxab_evaluations": "Objective evaluations by all clients in this view.",
    "fedxab_phase": "The phase number last closed (a client: last answered).",
    "fedxab_phases": "Phases (communication rounds) closed.",
    "fedxab_phase_duration_seconds": "Wall time of a phase, from its broadcast to its close.",
    "fedxab_phase_reports": "Reports the server accepted so far in the open phase.",
    "fedxab_phase_clients_joined": "Clients that joined the run in the last closed phase.",
    "fedxab_phase_clients_left": "Clients that left the run in the last closed phase "
    "(a leave before the final answer, or withdrew).",
    "fedxab_phase_clients_asked": "Clients the server asked in the last closed phase.",
    "fedxab_phase_clients_reported": "Reports the server accepted in the last closed phase.",
    "fedxab_clients_joined": "Clients that joined the run, summed over the phases closed.",
    "fedxab_clients_left": "Clients that left the run, summed over the phases closed.",
    "fedxab_messages": "Messages: up (client reports) and down (broadcasts, one per client).",
    "fedxab_message_bytes": "Encoded payload bytes of the messages, up and down.",
    "fedxab_reports": "Reports received by the server, by outcome "
    "(accepted, duplicate, late, invalid).",
    "fedxab_control_messages": "Control-topic messages received by the server, by kind "
    "(join, leave, heartbeat, telemetry, stopped, invalid, duplicate).",
    "fedxab_broadcasts_repeated": "Broadcasts the server published again (a stalled phase).",
    "fedxab_broadcasts_invalid": "Broadcasts a client agent rejected as invalid.",
    "fedxab_messages_rejected": "Messages refused, by topic (report, control, ledger, "
    "broadcast) and reason (malformed, bad_signature, missing_signature, unknown_sender, "
    "wrong_run, replay, late, future_phase, ...).",
    "fedxab_ledger_records_invalid": "Invalid records the server skipped on the ledger topic.",
    "fedxab_cumulative_regret": "Global cumulative regret averaged over clients, "
    "(1/M) sum_{s<=t} sum_m (f* - f(x_{m,s})).",
    "fedxab_local_cumulative_regret": "Local cumulative regret averaged over clients, "
    "(1/M) sum_{s<=t} sum_m (f_m* - f_m(x_{m,s})).",
    "fedxab_global_simple_regret": "Mean over clients of the best global regret so far, "
    "min_{s<=t} (f* - f(x_{m,s})).",
    "fedxab_local_simple_regret": "Mean over clients of the best local regret so far, "
    "min_{s<=t} (f_m* - f_m(x_{m,s})).",
    "fedxab_simple_regret": "Simple regret f* - f(x_rec) of the final recommendation "
    "(NaN until the run ends).",
    "fedxab_observed_best_mean": "Mean over the clients (that have evaluated) of the best value "
    "each observed of its own objective, in the objective's direction; needs no optimum.",
    "fedxab_epsilon_max": "The run's epsilon: the largest epsilon spent by a client at the "
    "accounting delta (clients hold disjoint data).",
    "fedxab_epsilon_budget": "Per-client privacy budget epsilon (NaN: no budget).",
    "fedxab_privacy_delta": "The delta at which epsilon is accounted.",
    "fedxab_client_epsilon": "Distribution over clients of the epsilon each has spent.",
    "fedxab_clients_over_budget": "Clients whose epsilon exceeds the budget (should be 0).",
    "fedxab_clients_withdrawn": "Clients that stopped releasing (privacy budget exhausted).",
}


class FederationMetrics(RunObserver):
    """The metrics of one process's view of a federation, in a registry of its own: a run
    observer (:class:`~fedxab.run.observe.RunObserver`) whose hooks set Prometheus series.

    ``role`` is that view: ``"federation"`` (every party in this process: ``fedxab run``),
    ``"server"`` (a server agent) or ``"client"`` (a client agent: its own clients only).
    ``privacy_interval_s`` is the least time between two privacy updates during a run
    (:meth:`privacy_due`; recomputing epsilon asks the accountant).
    """

    wants_regret = True

    def __init__(self, *, role: str = "federation", privacy_interval_s: float = 1.0) -> None:
        from fedxab import __version__

        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        self.role = role
        self.privacy_interval_s = float(privacy_interval_s)
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        def gauge(name: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, METRICS[name], labels, registry=r)

        def counter(name: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, METRICS[name], labels, registry=r)

        gauge("fedxab_build_info", ("version", "python")).labels(
            __version__, platform.python_version()
        ).set(1)
        self.run_info = gauge(
            "fedxab_run_info", ("algorithm", "objective", "transport", "role", "run_id")
        )
        self.runs_started = counter("fedxab_runs_started")
        runs = counter("fedxab_runs", ("outcome",))
        self._runs = {o: runs.labels(o) for o in ("finished", "failed")}
        self.running = gauge("fedxab_run_running")
        self.start_time = gauge("fedxab_run_start_time_seconds")
        self.clients = gauge("fedxab_clients")
        self.clients_active = gauge("fedxab_clients_active")
        self.budget = gauge("fedxab_evaluation_budget")
        self.round = gauge("fedxab_round")
        self.evaluations = counter("fedxab_evaluations")
        self.phase = gauge("fedxab_phase")
        self.phases = counter("fedxab_phases")
        self.phase_joined = gauge("fedxab_phase_clients_joined")
        self.phase_left = gauge("fedxab_phase_clients_left")
        self.phase_asked = gauge("fedxab_phase_clients_asked")
        self.phase_reported = gauge("fedxab_phase_clients_reported")
        self.joined = counter("fedxab_clients_joined")
        self.left = counter("fedxab_clients_left")
        self.phase_duration = Histogram(
            "fedxab_phase_duration_seconds",
            METRICS["fedxab_phase_duration_seconds"],
            buckets=PHASE_DURATION_BUCKETS,
            registry=r,
        )
        self.phase_reports = gauge("fedxab_phase_reports")
        messages = counter("fedxab_messages", ("direction",))
        message_bytes = counter("fedxab_message_bytes", ("direction",))
        self._up, self._down = messages.labels("up"), messages.labels("down")
        self._bytes_up, self._bytes_down = message_bytes.labels("up"), message_bytes.labels("down")
        reports = counter("fedxab_reports", ("outcome",))
        self._reports = {o: reports.labels(o) for o in REPORT_OUTCOMES}
        control = counter("fedxab_control_messages", ("kind",))
        self._control = {k: control.labels(k) for k in CONTROL_KINDS}
        self.broadcasts_repeated = counter("fedxab_broadcasts_repeated")
        self.broadcasts_invalid = counter("fedxab_broadcasts_invalid")
        self.ledger_invalid = counter("fedxab_ledger_records_invalid")
        self._rejected = counter("fedxab_messages_rejected", ("topic", "reason"))
        for topic in REJECTED_TOPICS:  # every series from 0, so rate() sees the first one
            for reason in REJECT_REASONS:
                self._rejected.labels(topic, reason)
        self.cumulative_regret = gauge("fedxab_cumulative_regret")
        self.local_cumulative_regret = gauge("fedxab_local_cumulative_regret")
        self.global_simple_regret = gauge("fedxab_global_simple_regret")
        self.local_simple_regret = gauge("fedxab_local_simple_regret")
        self.simple_regret = gauge("fedxab_simple_regret")
        self.observed_best_mean = gauge("fedxab_observed_best_mean")
        self._privacy = _PrivacyCollector()
        r.register(self._privacy)
        self._last_privacy = 0.0
        self.run_id: str | None = None
        for g in (*self._regret_gauges(), self.simple_regret, self.observed_best_mean):
            g.set(NAN)

    # ------------------------------------------------------------------------------ runs
    def start_run(
        self,
        *,
        run_id: str,
        algorithm: str,
        objective: str,
        transport: str,
        clients: int,
        budget: int,
        regret_known: bool = True,
        local_regret_known: bool = True,
    ) -> None:
        """A new run (one seed) starts: its info series replaces the last one's, and the run's
        gauges start over (regret 0, or NaN where the optimum is unknown)."""
        self.run_info.clear()
        self.run_info.labels(algorithm, objective, transport, self.role, run_id).set(1)
        self.run_id = run_id
        self.runs_started.inc()
        self.running.set(1)
        self.start_time.set(time.time())
        self.clients.set(clients)
        self.clients_active.set(clients)
        self.budget.set(budget)
        self.round.set(0)
        self.phase.set(0)
        self.phase_reports.set(0)
        self.cumulative_regret.set(0.0 if regret_known else NAN)
        self.global_simple_regret.set(NAN)
        self.local_cumulative_regret.set(0.0 if local_regret_known else NAN)
        self.local_simple_regret.set(NAN)
        self.simple_regret.set(NAN)
        self.observed_best_mean.set(NAN)
        self._privacy.snapshot = None
        self._last_privacy = time.monotonic()

    def end_run(self, record: Any | None = None) -> None:
        """The run finished. With its :class:`~fedxab.results.RunRecord`, every regret and
        privacy gauge is set from it, so that they equal the results file exactly."""
        if record is not None:
            self.cumulative_regret.set(_value(record.final_cumulative_regret))
            self.local_cumulative_regret.set(_value(record.final_local_cumulative_regret))
            self.global_simple_regret.set(_value(record.final_global_simple_regret))
            self.local_simple_regret.set(_value(record.final_local_simple_regret))
            self.simple_regret.set(_value(record.simple_regret))
            if record.clients:
                bests = (outcome.best_value for outcome in record.clients)
                self.observed_best_mean.set(_value(mean_best(bests)))
            self.round.set(int(record.rounds[-1]))
            privacy = record.privacy
            if privacy is not None:
                self.on_privacy(
                    dict(enumerate(privacy["epsilon"])),
                    budget_epsilon=privacy["budget_epsilon"],
                    delta=privacy["delta"],
                    withdrawn=[int(m) for m in privacy["withdrawn"]],
                    replace=True,
                )
        self.phase_reports.set(0)
        self.running.set(0)
        self._runs["finished"].inc()

    def fail_run(self) -> None:
        """The run stopped with an error (or was interrupted)."""
        self.running.set(0)
        self._runs["failed"].inc()

    # ---------------------------------------------------------------------------- phases
    def on_phase(
        self, counts: PhaseCounts, duration_s: float | None = None, *, active: int | None = None
    ) -> None:
        """A phase closed: its messages and bytes, and (unless None: a phase replayed from a
        checkpoint) how long it took. ``active``: the clients still in the run."""
        self.phases.inc()
        self.phase.set(counts.phase)
        self._up.inc(counts.messages_up)
        self._down.inc(counts.messages_down)
        self._bytes_up.inc(counts.bytes_up)
        self._bytes_down.inc(counts.bytes_down)
        if duration_s is not None:
            self.phase_duration.observe(duration_s)
        if active is not None:
            self.clients_active.set(active)

    def on_population(self, population: PhasePopulation) -> None:
        """A phase closed (a server's view): how many clients joined, left, were asked and
        reported in it (:class:`~fedxab.run.population.PhasePopulation`)."""
        self.phase_joined.set(len(population.joined))
        self.phase_left.set(len(population.left))
        self.phase_asked.set(population.asked)
        self.phase_reported.set(population.reported)
        self.joined.inc(len(population.joined))
        self.left.inc(len(population.left))

    def on_phase_reports(self, n: int) -> None:
        """``n`` reports accepted so far in the open phase."""
        self.phase_reports.set(n)

    def on_broadcast_repeated(self) -> None:
        self.broadcasts_repeated.inc()

    def on_broadcast_invalid(self) -> None:
        self.broadcasts_invalid.inc()

    def on_ledger_invalid(self, n: int) -> None:
        if n:
            self.ledger_invalid.inc(n)

    def on_evaluations(self, n: int) -> None:
        """``n`` more evaluations (all clients of the view together)."""
        if n:
            self.evaluations.inc(n)

    def on_report(self, outcome: str, n: int = 1) -> None:
        """``n`` reports received with ``outcome`` (:data:`REPORT_OUTCOMES`)."""
        if n:
            self._reports[outcome].inc(n)

    def on_rejected(self, topic: str, reason: str, n: int = 1) -> None:
        """``n`` messages of ``topic`` refused for ``reason``."""
        if n:
            self._rejected.labels(topic, reason).inc(n)

    def on_control(self, kind: str) -> None:
        """One control-topic message of ``kind`` (join, leave, heartbeat, telemetry, stopped,
        invalid, duplicate: a second join or leave of one client)."""
        counter = self._control.get(kind)
        if counter is not None:
            counter.inc()

    # ---------------------------------------------------------------------------- regret
    def on_regret(
        self,
        *,
        t: int | None = None,
        cumulative: float | None = None,
        local: float | None = None,
        global_simple: float | None = None,
        local_simple: float | None = None,
    ) -> None:
        """The run's regret so far, each averaged over the view's clients, at per-client round
        ``t``; a value left None keeps its gauge."""
        if t is not None:
            self.round.set(t)
        for gauge, value in (
            (self.cumulative_regret, cumulative),
            (self.local_cumulative_regret, local),
            (self.global_simple_regret, global_simple),
            (self.local_simple_regret, local_simple),
        ):
            if value is not None:
                gauge.set(value)

    def on_observed(self, best_mean: float | None) -> None:
        self.observed_best_mean.set(_value(best_mean))

    def _regret_gauges(self) -> tuple[Gauge, ...]:
        return (
            self.cumulative_regret,
            self.local_cumulative_regret,
            self.global_simple_regret,
            self.local_simple_regret,
        )

    # --------------------------------------------------------------------------- privacy
    def privacy_due(self) -> bool:
        """Whether ``privacy_interval_s`` has passed since the last privacy update (or the
        run's start): the runners recompute epsilon only then."""
        return time.monotonic() - self._last_privacy >= self.privacy_interval_s

    def on_privacy(
        self,
        epsilon: Mapping[int, float],
        *,
        budget_epsilon: float | None,
        delta: float | None,
        withdrawn: Iterable[int] = (),
        replace: bool = False,
    ) -> None:
        """The epsilon each client (id -> epsilon) has spent so far, and the clients that
        withdrew (their budget exhausted). Clients not in ``epsilon`` keep their last values
        (several client agents of one process may each update their own clients), unless
        ``replace``."""
        self._privacy.snapshot = PrivacyView.merged(
            self._privacy.snapshot, epsilon, budget_epsilon, delta, withdrawn, replace
        )
        self._last_privacy = time.monotonic()

    @property
    def epsilon(self) -> dict[int, float]:
        """The last epsilon per client (empty if no private run is observed)."""
        snap = self._privacy.snapshot
        return {} if snap is None else dict(snap.epsilon)

    # -------------------------------------------------------------------------- exposure
    def exposition(self) -> str:
        """The metrics in the Prometheus text format (what ``/metrics`` serves)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode("utf-8")

    @classmethod
    def exported_samples(cls) -> dict[str, set[str]]:
        """Every sample name the registry of this class can export (with ``_total``,
        ``_bucket``, ...: the names PromQL sees), privacy ones included, with its label names.
        Taken from a throwaway instance that observes a private run."""
        probe = cls()
        probe.start_run(
            run_id="probe", algorithm="a", objective="o", transport="t", clients=1, budget=1
        )
        probe.on_privacy({0: 0.0}, budget_epsilon=1.0, delta=1e-5)
        out: dict[str, set[str]] = {}
        for family in probe.registry.collect():
            for sample in family.samples:
                out.setdefault(sample.name, set()).update(sample.labels)
        return out
