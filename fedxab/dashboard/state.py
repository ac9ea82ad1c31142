"""What the dashboard shows: a run observer that keeps each run's figures in aggregate.

:class:`DashboardState` is a :class:`~fedxab.run.observe.RunObserver`: a runner tells it what
happens (regret, phases, messages, report outcomes, every client's epsilon) and the dashboard's
HTTP thread reads :meth:`DashboardState.snapshot`, a small JSON-ready dict. Its size does not
grow with the number of clients or rounds, so the page stays fast at 100,000 clients:

- curves keep at most :data:`CURVE_POINTS` points (:class:`Curve` halves its resolution when
  full, the way a zoomed-out chart would);
- epsilon is shown as a histogram of :data:`EPSILON_BINS` bins and the :data:`NEAREST` clients
  nearest their budget, computed from the latest per-client values when a page asks and cached
  until they change;
- the population of each closed phase (who joined, left, was asked and reported: the server's
  :class:`~fedxab.run.population.PhasePopulation`) is kept for the :data:`POPULATION_ROWS`
  newest phases, with every joined and left client named as runs of ids;
- per-client curves (each client's best observed value so far, which needs no optimum) are
  summarised over clients as a mean and quantile band; one client's own curve is fetched on
  demand (:meth:`DashboardState.client`);
- the trials of a user's objective, where this party evaluated them (``fedxab run``, and a
  ``fedxab client`` agent for its own clients), appear as each call returns
  (:class:`~fedxab.dashboard.trials.TrialFeed`: parameters by name, value, wall time, each
  client's best so far), and the server's recommendation by name once it arrives; a party
  without them (the server: the trials stay at the sites) shows each client's best value and
  its parameters by name from the run's outcomes.

At the end of a run (:meth:`DashboardState.end_run`) every figure is replaced by the run's
:class:`~fedxab.results.RunRecord`, so that what the page shows afterwards equals the results
file exactly. :func:`state_from_results` builds the same views from a results file alone.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedxab.dashboard.trials import CLIENTS_SHOWN, TrialFeed
from fedxab.run.observe import PrivacyView, Progress, RunObserver
from fedxab.run.outcome import mean_best
from fedxab.run.population import PhasePopulation, id_ranges
from fedxab.space import SearchSpace

__all__ = [
    "CURVE_POINTS",
    "EPSILON_BINS",
    "NEAREST",
    "POPULATION_ROWS",
    "Curve",
    "DashboardState",
    "RunView",
    "epsilon_panel",
    "lifetime_panel",
    "outcome_band",
    "state_from_results",
]

CURVE_POINTS = 1000
"""Most points a curve keeps (a 1280-pixel-wide chart cannot show more)."""
EPSILON_BINS = 20
"""Bins of the per-client epsilon histogram, from 0 to the larger of the budget and the max."""
NEAREST = 10
"""Clients listed as nearest their budget (those that spent the most)."""
BAND_QUANTILES = (10, 50, 90)
"""Percentiles over clients of the per-client curves' band (with min, max and mean)."""
POPULATION_ROWS = 50
"""Closed phases the population table keeps (the newest; the totals count every phase)."""
PRIVACY_SHARE = 0.01
"""Largest share of a run's wall time the dashboard lets epsilon refreshes take: the interval
between two grows with what the last one cost (asking the accountant for 100,000 clients is not
free)."""


def _finite(x: Any) -> float | None:
    """``x`` as a float, None if it is None or not finite (JSON has no NaN)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


class Curve:
    """A curve of ``(x, y)`` points kept at most :data:`CURVE_POINTS` long: when full, every
    other point is dropped and from then on only every ``stride``-th new point is kept (the
    newest point is always shown)."""

    def __init__(self, limit: int = CURVE_POINTS) -> None:
        self.limit = limit
        self.points: list[tuple[float, float]] = []
        self.stride = 1
        self.seen = 0
        self.newest: tuple[float, float] | None = None

    def add(self, x: float, y: float) -> None:
        self.newest = (float(x), float(y))
        if self.seen % self.stride == 0:
            self.points.append(self.newest)
            if len(self.points) > self.limit:
                self.points = self.points[::2]
                self.stride *= 2
        self.seen += 1

    def replace(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        """The curve becomes ``(xs, ys)`` (evenly thinned to the limit, its last point kept)."""
        n = len(xs)
        keep = np.unique(np.linspace(0, n - 1, min(n, self.limit)).round().astype(int))
        self.points = [(float(xs[i]), float(ys[i])) for i in keep]
        self.newest = self.points[-1] if self.points else None
        self.seen, self.stride = n, 1

    def to_json(self) -> list[list[float | None]]:
        points = list(self.points)
        if self.newest is not None and (not points or points[-1] != self.newest):
            points.append(self.newest)
        return [[x, _finite(y)] for x, y in points]


def epsilon_panel(privacy: PrivacyView) -> dict[str, Any]:
    """The epsilon panel of ``privacy``: summary, histogram and the clients nearest the budget."""
    ids = np.fromiter(privacy.epsilon.keys(), dtype=np.int64, count=len(privacy.epsilon))
    eps = np.fromiter(privacy.epsilon.values(), dtype=np.float64, count=len(ids))
    budget = privacy.budget
    top = max(float(eps.max(initial=0.0)), budget or 0.0) or 1.0
    counts, edges = np.histogram(eps, bins=EPSILON_BINS, range=(0.0, top))
    nearest = np.argsort(-eps, kind="stable")[:NEAREST]
    return {
        "clients": int(eps.size),
        "max": float(eps.max(initial=0.0)),
        "mean": float(eps.mean()) if eps.size else None,
        "budget": _finite(budget),
        "delta": _finite(privacy.delta),
        "over_budget": 0 if budget is None else int((eps > budget).sum()),
        "withdrawn": len(privacy.withdrawn),
        "histogram": {"edges": edges.tolist(), "counts": counts.tolist()},
        "nearest": [
            {
                "client": int(ids[i]),
                "epsilon": float(eps[i]),
                "share": None if not budget else float(eps[i] / budget),
                "withdrawn": int(ids[i]) in privacy.withdrawn,
            }
            for i in nearest
        ],
    }


def lifetime_panel(ledger: str | Path) -> dict[str, Any]:
    """The lifetime panel of a privacy ledger: every data owner's epsilon over all its runs
    against its lifetime budget (:func:`~fedxab.privacy.audit.owner_summaries`, what ``fedxab
    audit --lifetime`` prints), summarised: owner counts and the :data:`NEAREST` owners with the
    least budget left (or the most spent, where owners have no budget)."""
    from fedxab.privacy.audit import owner_summaries
    from fedxab.privacy.ledger import PrivacyLedger

    with PrivacyLedger(ledger) as book:
        rows = owner_summaries(book)

    def least_left(row: dict[str, Any]) -> tuple[float, float]:
        remaining = row["remaining"]
        spent = row["epsilon"] or 0.0
        return (math.inf if remaining is None else remaining, -spent)

    nearest = sorted(rows, key=least_left)[:NEAREST]
    return {
        "ledger": str(ledger),
        "owners": len(rows),
        "with_budget": sum(row["budget_epsilon"] is not None for row in rows),
        "over_budget": sum(bool(row["over_budget"]) for row in rows),
        "nearest": [
            {
                key: row[key]
                for key in ("owner", "runs", "releases", "epsilon", "budget_epsilon", "remaining")
            }
            for row in nearest
        ],
    }


def outcome_band(outcomes: Sequence[Any]) -> dict[str, Any] | None:
    """Over the clients' :class:`~fedxab.run.outcome.ClientOutcome` s: the rounds of their
    best-so-far curves and, per round, the mean, min, max and :data:`BAND_QUANTILES` percentiles
    over clients that have evaluated by then (None without outcomes)."""
    curves = [o for o in outcomes if len(o.rounds)]
    if not curves:
        return None
    rounds = curves[0].rounds
    same = [o.best_so_far for o in curves if np.array_equal(o.rounds, rounds)]
    values = np.vstack(same)
    seen = ~np.isnan(values)
    band: dict[str, Any] = {"rounds": rounds.tolist(), "clients": len(same)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a round no client has reached yet
        band["mean"] = np.nanmean(values, axis=0)
        band["min"] = np.nanmin(values, axis=0)
        band["max"] = np.nanmax(values, axis=0)
        quantiles = np.nanpercentile(values, BAND_QUANTILES, axis=0)
    for q, row in zip(BAND_QUANTILES, quantiles, strict=True):
        band[f"p{q}"] = row
    reached = seen.sum(axis=0)
    for key in ("mean", "min", "max", *(f"p{q}" for q in BAND_QUANTILES)):
        band[key] = [_finite(v) if n else None for v, n in zip(band[key], reached, strict=True)]
    return band


class RunView:
    """One run as the dashboard shows it: live figures while it goes, its record's afterwards.
    ``space``: the run's typed parameters (:class:`~fedxab.space.SearchSpace`), which name the
    recommendation's; ``maximize``: the objective's direction."""

    SERIES = ("cumulative", "local", "global_simple", "local_simple", "observed")

    def __init__(
        self, info: Mapping[str, Any], space: Any | None = None, maximize: bool = True
    ) -> None:
        self.info = dict(info)
        self.space = space
        self.trials = TrialFeed(maximize)
        self.recommendation: dict[str, Any] | None = None
        self.status = "running"
        self.started = time.time()
        self.ended: float | None = None
        self.round = 0
        self.curves = {name: Curve() for name in self.SERIES}
        self.phase_durations = Curve()
        self.phases = 0
        self.last_phase: int | None = None
        self.traffic = Counter[str]()
        self.reports = Counter[str]()
        self.control = Counter[str]()
        self.rejected = Counter[str]()
        self.evaluations = 0
        self.active: int | None = None
        self.privacy: PrivacyView | None = None
        self.final: dict[str, Any] = {}
        self.outcomes: dict[int, Any] = {}
        self.outcome_best: list[dict[str, Any]] | None = None
        """Each client's best value and its parameters by name, from the outcomes
        (:meth:`best_from_outcomes`)."""
        self.band: dict[str, Any] | None = None
        self._panel: tuple[PrivacyView, dict[str, Any]] | None = None
        self.population: deque[dict[str, Any]] = deque(maxlen=POPULATION_ROWS)
        """The newest closed phases' populations (:meth:`add_population`)."""
        self.population_totals = Counter[str]()

    def recommend(self, point: Any) -> None:
        """The server's recommended ``point``, and its parameters by name (with a space)."""
        x = np.asarray(point, dtype=np.float64).reshape(-1)
        params = None if self.space is None else self.space.decode(x)
        self.recommendation = {"point": x.tolist(), "params": params}

    def add_population(self, population: PhasePopulation) -> None:
        """A closed phase's population (the server's record): its counts and who joined and
        left, by id (:func:`~fedxab.run.population.id_ranges`)."""
        self.population.append(
            {
                "phase": population.phase,
                "joined": len(population.joined),
                "left": len(population.left),
                "asked": population.asked,
                "reported": population.reported,
                "joined_ids": id_ranges(population.joined),
                "left_ids": id_ranges(population.left),
            }
        )
        self.population_totals.update(joined=len(population.joined), left=len(population.left))

    # ------------------------------------------------------------------------------ record
    def finish(self, record: Any | None) -> None:
        """The run ended; with its record, every figure becomes the record's."""
        self.status = "finished"
        self.ended = time.time()
        if record is None:
            return
        if record.recommendation is not None:
            self.recommend(record.recommendation)
        if record.clients and any(o.trials for o in record.clients):
            self.trials.replace((o.client, o.trials or ()) for o in record.clients)
        rounds = record.rounds
        for name, curve in (
            ("cumulative", record.cumulative_regret),
            ("local", record.local_cumulative_regret),
            ("global_simple", record.global_simple_regret),
            ("local_simple", record.local_simple_regret),
        ):
            if curve is not None:
                self.curves[name].replace(rounds, curve)
        self.round = int(rounds[-1]) if len(rounds) else self.round
        self.evaluations = int(record.evaluations)
        communication = record.communication
        if communication is not None:
            per_phase = communication.get("per_phase") or []
            self.phases = len(per_phase)
            self.last_phase = per_phase[-1]["phase"] if per_phase else None
            self.traffic = Counter(
                {
                    k: int(communication[k])
                    for k in ("messages_up", "messages_down", "bytes_up", "bytes_down")
                }
            )
        if record.privacy is not None:
            p = record.privacy
            self.privacy = PrivacyView(
                dict(enumerate(p["epsilon"])),
                p["budget_epsilon"],
                p["delta"],
                frozenset(int(m) for m in p["withdrawn"]),
            )
        if record.clients:
            self.outcomes = {o.client: o for o in record.clients}
            self.outcome_best = self.best_from_outcomes()
            self.band = outcome_band(record.clients)
            if self.band is not None:  # the mean best-so-far over clients: what was observed
                mean = [math.nan if v is None else v for v in self.band["mean"]]
                self.curves["observed"].replace(self.band["rounds"], mean)
            observed = mean_best(o.best_value for o in record.clients)
        else:
            observed = None
        self.final = {
            "cumulative_regret": _finite(record.final_cumulative_regret),
            "local_cumulative_regret": _finite(record.final_local_cumulative_regret),
            "simple_regret": _finite(record.simple_regret),
            "observed_best_mean": _finite(observed),
            "wall_time_s": _finite(record.wall_time_s),
            "seed": int(record.seed),
        }

    def best_from_outcomes(self) -> list[dict[str, Any]] | None:
        """Per client (the :data:`~fedxab.dashboard.trials.CLIENTS_SHOWN` of lowest id): its
        evaluations, best value (the user's direction) and the parameters where it was
        observed, by name in the user's units. None without a typed space."""
        if self.space is None:
            return None
        return [
            {
                "client": m,
                "evaluations": int(o.evaluations),
                "value": _finite(o.best_value),
                "params": self.space.decode(np.asarray(o.best_point, dtype=np.float64)),
            }
            for m, o in sorted(self.outcomes.items())[:CLIENTS_SHOWN]
            if o.best_point is not None
        ]

    # -------------------------------------------------------------------------------- json
    def privacy_panel(self) -> dict[str, Any] | None:
        """The epsilon panel, recomputed only when the privacy view changed."""
        privacy = self.privacy
        if privacy is None:
            return None
        if self._panel is None or self._panel[0] is not privacy:
            self._panel = (privacy, epsilon_panel(privacy))
        return self._panel[1]

    def to_json(self) -> dict[str, Any]:
        clients = int(self.info.get("clients", 0))
        withdrawn = 0 if self.privacy is None else len(self.privacy.withdrawn)
        return {
            "info": self.info,
            "status": self.status,
            "started": self.started,
            "ended": self.ended,
            "elapsed_s": self.final.get("wall_time_s")
            or (self.ended or time.time()) - self.started,
            "round": self.round,
            "clients": {
                "total": clients,
                "active": self.active if self.active is not None else clients - withdrawn,
                "withdrawn": withdrawn,
            },
            "curves": {name: c.to_json() for name, c in self.curves.items() if c.newest},
            "band": self.band,
            "phases": {
                "count": self.phases,
                "last": self.last_phase,
                "durations": self.phase_durations.to_json(),
                **self.traffic,
            },
            "evaluations": self.evaluations,
            "population": {
                "joined": self.population_totals["joined"],
                "left": self.population_totals["left"],
                "phases": list(self.population),
            },
            "reports": dict(self.reports),
            "control": dict(self.control),
            "rejected": dict(self.rejected),
            "privacy": self.privacy_panel(),
            "final": self.final,
            "trials": self.trials.to_json(),
            "recommendation": self.recommendation,
            "outcome_best": self.outcome_best,
        }


class DashboardState(RunObserver):
    """Every run this process observed (one per seed), as the dashboard shows them.

    Hooks may come from the runner's threads; :meth:`snapshot` from the HTTP server's: one lock
    guards both. ``config``: the job's configuration as a dict (shown on the page).
    """

    wants_regret = True
    wants_progress = True
    wants_trials = True

    def __init__(self, config: Mapping[str, Any] | None = None, *, privacy_interval_s=1.0):
        self.config = dict(config or {})
        space = self.config.get("space")
        self.space = None if not space else SearchSpace.from_dict(space)
        """The job's typed parameters (its config's ``[space]``), which name the points."""
        objective = self.config.get("objective") or {}
        self.maximize = objective.get("direction", "maximize") != "minimize"
        self.runs: list[RunView] = []
        self.base_interval_s = privacy_interval_s
        self.privacy_interval_s = privacy_interval_s
        self._lock = threading.Lock()
        self._last_privacy = time.monotonic()
        self._asked: float | None = None
        self.version = 0
        self.lifetime: dict[str, Any] | None = None
        """The data owners' lifetime spend (:func:`lifetime_panel`), where a ledger is read."""

    @property
    def current(self) -> RunView | None:
        return self.runs[-1] if self.runs else None

    def _update(self, change: Any, *args: Any) -> None:
        with self._lock:
            view = self.current
            if view is not None:
                change(view, *args)
                self.version += 1

    # ------------------------------------------------------------------------------ hooks
    def start_run(self, **info: Any) -> None:
        with self._lock:
            self.runs.append(RunView(info, self.space, self.maximize))
            self.version += 1
            self._last_privacy = time.monotonic()

    def end_run(self, record: Any | None = None) -> None:
        self._update(RunView.finish, record)

    def fail_run(self) -> None:
        def failed(view: RunView) -> None:
            view.status, view.ended = "failed", time.time()

        self._update(failed)

    def on_phase(self, counts: Any, duration_s: float | None = None, *, active=None) -> None:
        def phase(view: RunView) -> None:
            view.phases += 1
            view.last_phase = int(counts.phase)
            view.traffic.update(
                messages_up=counts.messages_up,
                messages_down=counts.messages_down,
                bytes_up=counts.bytes_up,
                bytes_down=counts.bytes_down,
            )
            if duration_s is not None:
                view.phase_durations.add(counts.phase, duration_s)
            if active is not None:
                view.active = int(active)

        self._update(phase)

    def on_population(self, population: PhasePopulation) -> None:
        self._update(RunView.add_population, population)

    def on_evaluations(self, n: int) -> None:
        def evaluations(view: RunView) -> None:
            view.evaluations += int(n)

        self._update(evaluations)

    def on_report(self, outcome: str, n: int = 1) -> None:
        self._update(lambda view: view.reports.update({outcome: n}))

    def on_rejected(self, topic: str, reason: str, n: int = 1) -> None:
        self._update(lambda view: view.rejected.update({f"{topic}: {reason}": n}))

    def on_control(self, kind: str) -> None:
        self._update(lambda view: view.control.update({kind: 1}))

    def on_regret(self, **regret: float | None) -> None:
        def curves(view: RunView) -> None:
            t = regret.get("t")
            if t is not None:
                view.round = int(t)
            for name in ("cumulative", "local", "global_simple", "local_simple"):
                value = regret.get(name)
                if value is not None:
                    view.curves[name].add(view.round, value)

        self._update(curves)

    def on_observed(self, best_mean: float | None) -> None:
        if best_mean is not None:
            self._update(lambda view: view.curves["observed"].add(view.round, best_mean))

    def on_progress(self, progress: Progress) -> None:
        def advance(view: RunView) -> None:
            view.round = max(view.round, int(progress.done))

        self._update(advance)

    def on_trial(self, client: int, trial: Any) -> None:
        self._update(lambda view: view.trials.add(int(client), trial, time.time()))

    def on_recommendation(self, point: Any) -> None:
        self._update(RunView.recommend, point)

    def privacy_due(self) -> bool:
        """Due every ``privacy_interval_s``; that interval grows so that recomputing epsilon
        (the runner's work between this answer and :meth:`on_privacy`) takes at most
        :data:`PRIVACY_SHARE` of the run's time."""
        due = time.monotonic() - self._last_privacy >= self.privacy_interval_s
        if due:
            self._asked = time.monotonic()
        return due

    def on_privacy(
        self,
        epsilon: Mapping[int, float],
        *,
        budget_epsilon: float | None,
        delta: float | None,
        withdrawn: Iterable[int] = (),
        replace: bool = False,
    ) -> None:
        now = time.monotonic()
        if self._asked is not None:
            cost = now - self._asked
            self.privacy_interval_s = max(self.base_interval_s, cost / PRIVACY_SHARE)
            self._asked = None
        self._last_privacy = now

        def privacy(view: RunView) -> None:
            view.privacy = PrivacyView.merged(
                view.privacy, epsilon, budget_epsilon, delta, withdrawn, replace
            )

        self._update(privacy)

    # ------------------------------------------------------------------------------ reads
    def snapshot(self, run: int | None = None) -> dict[str, Any]:
        """What the page shows: run ``run`` (an index into the runs; default the newest) in
        full, every run's one-line summary, and the configuration."""
        with self._lock:
            views = list(self.runs)
            index = len(views) - 1 if run is None else run
            if views and not 0 <= index < len(views):
                raise KeyError(f"run {run}: this dashboard has runs 0 to {len(views) - 1}")
            return {
                "version": self.version,
                "config": self.config,
                "runs": [
                    {"index": k, "run_id": v.info.get("run_id"), "status": v.status}
                    for k, v in enumerate(views)
                ],
                "selected": index if views else None,
                "run": views[index].to_json() if views else None,
                "lifetime": self.lifetime,
            }

    def client(self, m: int, run: int | None = None) -> dict[str, Any]:
        """Client ``m`` of run ``run`` (default the newest): its epsilon, its trials so far
        (where this party evaluated them) and, once the run has its outcomes, its best-so-far
        curve. KeyError if the run or the client is unknown."""
        with self._lock:
            if not self.runs:
                raise KeyError("no run yet")
            view = self.runs[-1 if run is None else run]
            clients = int(view.info.get("clients", 0))
            trials = view.trials.client(m)
            if not 0 <= m < clients and trials is None:
                raise KeyError(f"client {m}: this run has clients 0 to {clients - 1}")
            privacy = view.privacy
            outcome = view.outcomes.get(m)
            return {
                "client": m,
                "epsilon": None if privacy is None else _finite(privacy.epsilon.get(m)),
                "withdrawn": privacy is not None and m in privacy.withdrawn,
                "trials": trials,
                "outcome": None
                if outcome is None
                else {
                    "evaluations": outcome.evaluations,
                    "best_value": _finite(outcome.best_value),
                    "rounds": outcome.rounds.tolist(),
                    "best_so_far": [_finite(v) for v in outcome.best_so_far],
                },
            }


def state_from_results(results: Any, ledger: str | Path | None = None) -> DashboardState:
    """A dashboard of a finished job: one view per run of ``results``
    (:class:`~fedxab.results.RunResults`), each built from its record alone, and, with a
    privacy ``ledger`` file, its data owners' lifetime spend (:func:`lifetime_panel`)."""
    state = DashboardState(results.config)
    clients = (results.config.get("federation") or {}).get("clients", 1)
    for record in results.runs:
        state.start_run(
            run_id=record.run_id,
            algorithm=results.algorithm,
            objective=results.objective.get("name"),
            transport="results file",
            clients=int(clients),
            budget=int(results.config.get("run", {}).get("budget", record.rounds[-1])),
            regret_known=record.cumulative_regret is not None,
            local_regret_known=record.local_cumulative_regret is not None,
        )
        state.end_run(record)
    if ledger is not None:
        state.lifetime = lifetime_panel(ledger)
    return state
