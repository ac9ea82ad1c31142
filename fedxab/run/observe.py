"""Observing a run as it goes, the same for every runner.

A runner is given one :class:`RunObserver` and calls its hooks unconditionally: the base class
is the null observer (every hook does nothing), :class:`~fedxab.monitoring.metrics.
FederationMetrics` is the Prometheus one, :class:`ProgressObserver` feeds a progress display,
:class:`Observers` several at once and :class:`PrivacyOnly` passes on the privacy hooks only
(client agents beside a server agent that exports the rest). :func:`observer_of` builds one
from the runners' ``metrics`` and ``progress`` arguments, like Optuna's callbacks: the runners
never branch on whether someone is watching, only on what the observer asks for
(:attr:`RunObserver.wants_progress`, :meth:`RunObserver.privacy_due`), to skip work nobody
reads.

What observers are told during a run is computed in one place,
:class:`~fedxab.run.watch.RunWatch` (progress, running regret, epsilon), with the helpers here:
every client's epsilon from the ledger (:func:`ledger_epsilons`) and the max epsilon for
progress displays (:class:`EpsilonWatch`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedxab.objectives.history import TrialRecord
    from fedxab.privacy.run_ledger import RunLedger
    from fedxab.run.population import PhasePopulation

__all__ = [
    "PROGRESS_UPDATES",
    "EpsilonWatch",
    "Observers",
    "PrivacyOnly",
    "PrivacyView",
    "Progress",
    "ProgressCallback",
    "ProgressObserver",
    "RunObserver",
    "ledger_epsilons",
    "observer_of",
]

PROGRESS_UPDATES = 200
"""About how many times a run reports its progress."""

ProgressCallback = Callable[..., None]
"""``progress(done, total, cumulative_regret)``; a callback with a true ``details`` attribute
is also given ``phase``, ``evaluations`` and ``epsilon`` as keywords (:class:`Progress`)."""


@dataclass(frozen=True)
class Progress:
    """One progress update: ``done`` of ``total`` per-client rounds (the round every active
    client reached), the cumulative ``regret`` so far (NaN: the optimum is unknown) and, from
    the federated runners, the ``phase``, the ``evaluations`` over all clients and the max
    ``epsilon`` over clients so far (None: not known, or not computed)."""

    done: int
    total: int
    regret: float
    phase: int | None = None
    evaluations: int | None = None
    epsilon: float | None = None


class PrivacyView:
    """What an observer knows of a run's privacy: every client's epsilon so far, the budget,
    delta and the clients whose releases stopped. Immutable: an update makes a new one
    (:meth:`merged`), so a reader in another thread (a scrape, a page) never sees half of one."""

    __slots__ = ("budget", "delta", "epsilon", "withdrawn")

    def __init__(
        self,
        epsilon: Mapping[int, float],
        budget: float | None,
        delta: float | None,
        withdrawn: frozenset[int],
    ) -> None:
        self.epsilon = dict(epsilon)
        self.budget = budget
        self.delta = delta
        self.withdrawn = withdrawn

    @classmethod
    def merged(
        cls,
        old: PrivacyView | None,
        epsilon: Mapping[int, float],
        budget: float | None,
        delta: float | None,
        withdrawn: Iterable[int],
        replace: bool,
    ) -> PrivacyView:
        """``old`` updated by one :meth:`RunObserver.on_privacy` call: clients not in
        ``epsilon`` keep their values (several client agents of one process each update their
        own clients) and withdrawn clients stay withdrawn, unless ``replace``."""
        gone = frozenset(int(m) for m in withdrawn)
        if replace or old is None:
            return cls(epsilon, budget, delta, gone)
        return cls({**old.epsilon, **epsilon}, budget, delta, gone | old.withdrawn)


class RunObserver:
    """What watches a run; every hook does nothing here (the null observer)."""

    wants_progress = False
    """Whether :meth:`on_progress` is used (runners skip computing progress otherwise)."""
    wants_details = False
    """Whether :meth:`on_progress` shows the details: the phase, the evaluations and epsilon. A
    demand, like :attr:`wants_progress`, not a channel (the values come in the typed
    :class:`Progress`): only then does :class:`~fedxab.run.watch.RunWatch` compute the max
    epsilon (recomputed from the ledger: costly) and send a last update once the run's record is
    complete."""
    wants_regret = False
    """Whether :meth:`on_regret` and :meth:`on_observed` are used during the run (the simple
    regret costs a little)."""
    privacy_interval_s = math.inf
    """The least time between two :meth:`on_privacy` updates a runner should send during a run
    (recomputing epsilon asks the accountant); never, here."""
    wants_trials = False
    """Whether :meth:`on_trial` is used (the party then reports each call of a user's
    objective as it returns)."""

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
        """A run starts: ``run_id`` of ``algorithm`` on ``objective``, seen over ``transport``
        for ``clients`` clients of ``budget`` evaluations; whether its global and local regret
        can be computed (the optimum is known)."""

    def end_run(self, record: Any | None = None) -> None:
        """The run finished (with its record, where this party has one)."""

    def fail_run(self) -> None:
        """The run stopped with an error or was interrupted."""

    def on_phase(self, counts: Any, duration_s: float | None = None, *, active: int | None = None):
        """A phase closed (``duration_s`` None: replayed from a checkpoint)."""

    def on_phase_reports(self, n: int) -> None:
        """``n`` reports accepted so far in the open phase."""

    def on_population(self, population: PhasePopulation) -> None:
        """A phase closed: who joined and left since the last one, how many clients were asked
        and reported (:class:`~fedxab.run.population.PhasePopulation`; a server's view)."""

    def on_evaluations(self, n: int) -> None:
        """``n`` more evaluations."""

    def on_report(self, outcome: str, n: int = 1) -> None:
        """``n`` reports classified ``outcome`` (accepted, duplicate, late, invalid)."""

    def on_rejected(self, topic: str, reason: str, n: int = 1) -> None:
        """``n`` messages of ``topic`` refused for ``reason``."""

    def on_control(self, kind: str) -> None:
        """One control message of ``kind``."""

    def on_broadcast_repeated(self) -> None:
        """The server published a phase (or the final answer) again."""

    def on_broadcast_invalid(self) -> None:
        """A client agent refused a record of the broadcast topic."""

    def on_ledger_invalid(self, n: int) -> None:
        """``n`` ledger records refused while rebuilding a ledger."""

    def on_regret(
        self,
        *,
        t: int | None = None,
        cumulative: float | None = None,
        local: float | None = None,
        global_simple: float | None = None,
        local_simple: float | None = None,
    ) -> None:
        """The regret so far at per-client round ``t`` (cumulative, local cumulative, global and
        local simple regret; a value left None is unchanged)."""

    def on_observed(self, best_mean: float | None) -> None:
        """What the view's clients observed so far, no optimum needed: the mean over those that
        have evaluated of each one's best observed value, in the user's direction (None: no
        evaluation yet). Told with the regret (:attr:`wants_regret`)."""

    def privacy_due(self) -> bool:
        """Whether the clients' epsilon should be recomputed now for :meth:`on_privacy`."""
        return False

    def on_privacy(
        self,
        epsilon: Mapping[int, float],
        *,
        budget_epsilon: float | None,
        delta: float | None,
        withdrawn: Iterable[int] = (),
        replace: bool = False,
    ) -> None:
        """The epsilon each client has spent so far, and the clients whose releases stopped."""

    def on_progress(self, progress: Progress) -> None:
        """The run's progress (:class:`Progress`: the round every active client reached, the
        cumulative regret so far, and the details: ``phase``, ``evaluations``, ``epsilon``),
        computed by :class:`~fedxab.run.watch.RunWatch`."""

    def on_trial(self, client: int, trial: TrialRecord) -> None:
        """Client ``client`` (hosted by this party) called its user's objective once: the
        :class:`~fedxab.objectives.history.TrialRecord` (parameters by name, value, wall time).
        Told as it happens, where :attr:`wants_trials`; it never leaves the party."""

    def on_recommendation(self, point: Any) -> None:
        """The server's final answer reached this party: its recommended point (in the search
        box; a typed space decodes it)."""


class ProgressObserver(RunObserver):
    """A progress callback (:data:`ProgressCallback`) as an observer: called with the
    :class:`Progress`'s ``done``, ``total`` and ``regret``; a callback with a true ``details``
    attribute (the public opt-in) also with its ``phase``, ``evaluations`` and ``epsilon`` as
    keywords, and it wants the details (:attr:`RunObserver.wants_details`)."""

    wants_progress = True

    def __init__(self, callback: ProgressCallback) -> None:
        self.callback = callback
        self.wants_details = bool(getattr(callback, "details", False))

    def on_progress(self, progress: Progress) -> None:
        p = progress
        if self.wants_details:
            self.callback(
                p.done,
                p.total,
                p.regret,
                phase=p.phase,
                evaluations=p.evaluations,
                epsilon=p.epsilon,
            )
        else:
            self.callback(p.done, p.total, p.regret)


class Observers(RunObserver):
    """Several observers as one: every hook goes to each, in order."""

    def __init__(self, observers: Iterable[RunObserver]) -> None:
        self.observers = list(observers)
        self.wants_progress = any(o.wants_progress for o in self.observers)
        self.wants_details = any(o.wants_details for o in self.observers)
        self.wants_regret = any(o.wants_regret for o in self.observers)
        self.wants_trials = any(o.wants_trials for o in self.observers)
        intervals = [o.privacy_interval_s for o in self.observers]
        self.privacy_interval_s = min(intervals, default=math.inf)

    def privacy_due(self) -> bool:
        return any(o.privacy_due() for o in self.observers)


def _forward(name: str) -> Callable[..., None]:
    def hook(self: Observers, *args: Any, **kwargs: Any) -> None:
        for observer in self.observers:
            getattr(observer, name)(*args, **kwargs)

    hook.__name__ = name
    hook.__doc__ = getattr(RunObserver, name).__doc__
    return hook


for _name in (
    "start_run",
    "end_run",
    "fail_run",
    "on_phase",
    "on_phase_reports",
    "on_population",
    "on_evaluations",
    "on_report",
    "on_rejected",
    "on_control",
    "on_broadcast_repeated",
    "on_broadcast_invalid",
    "on_ledger_invalid",
    "on_regret",
    "on_observed",
    "on_privacy",
    "on_progress",
    "on_trial",
    "on_recommendation",
):
    setattr(Observers, _name, _forward(_name))


class PrivacyOnly(RunObserver):
    """Only the hooks of ``inner`` that tell what stays with a client agent: its clients'
    epsilon during the run, their trials and the recommendation they received, into observers
    whose other values a server agent of the same process sets."""

    def __init__(self, inner: RunObserver) -> None:
        self.inner = inner
        self.privacy_interval_s = inner.privacy_interval_s
        self.wants_trials = inner.wants_trials

    def on_trial(self, client: int, trial: TrialRecord) -> None:
        self.inner.on_trial(client, trial)

    def on_recommendation(self, point: Any) -> None:
        self.inner.on_recommendation(point)

    def privacy_due(self) -> bool:
        return self.inner.privacy_due()

    def on_privacy(self, epsilon: Mapping[int, float], **kwargs: Any) -> None:
        self.inner.on_privacy(epsilon, **kwargs)


def observer_of(
    metrics: RunObserver | None = None, progress: ProgressCallback | None = None
) -> RunObserver:
    """The one observer of a runner given optional ``metrics`` and a ``progress`` callback."""
    observers = [o for o in (metrics,) if o is not None]
    if progress is not None:
        observers.append(ProgressObserver(progress))
    if not observers:
        return RunObserver()
    return observers[0] if len(observers) == 1 else Observers(observers)


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
