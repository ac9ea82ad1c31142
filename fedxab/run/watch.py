"""What every runner tells its observers as a run goes: one watcher, fed by each runner.

A runner (the single-agent runner, the in-process federation, the server agent, a client
agent) owns one :class:`RunWatch` for the clients it observes and feeds it what happens: the
regret terms of new evaluations (:meth:`RunWatch.add_terms`, :meth:`RunWatch.advance`), the
rounds each client used. The watch is the one place that computes what observers are told
during the run:

- the **progress**: the round every *active* client reached (:meth:`RunWatch.reached`, the
  minimum of the clients' used budgets over those that have not withdrawn, the budget T if
  none is left) -- a withdrawn client stops evaluating, so counting it would hold the progress
  at its last round for the rest of the run;
- the **running regret**: the sums of the global and local regret terms seen so far, over the
  observed clients (``(1/M) sum_m sum_t (f* - f(x_{m,t}))``, the cumulative regret of
  :mod:`fedxab.regret`, as far as the runner has seen it);
- **epsilon**: every client's epsilon so far for :meth:`~fedxab.run.observe.RunObserver.
  on_privacy`, and the max over clients for progress displays
  (:class:`~fedxab.run.observe.EpsilonWatch`, recomputed only after new releases);
- the **active clients**: the observed clients minus those withdrawn (the mask above);
- the **population** of each closed phase, as the server's session recorded it (who joined,
  left, was asked and reported: :mod:`fedxab.run.population`).

Progress displays get a typed, frozen :class:`~fedxab.run.observe.Progress` (the hook
:meth:`~fedxab.run.observe.RunObserver.on_progress`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab.run.accounting import stopped_phases
from fedxab.run.observe import (
    PROGRESS_UPDATES,
    EpsilonWatch,
    Progress,
    RunObserver,
    ledger_epsilons,
)

if TYPE_CHECKING:
    from fedxab.config import Config
    from fedxab.privacy.run_ledger import RunLedger
    from fedxab.results import RunRecord
    from fedxab.run.evaluation import RegretSums, Telemetry
    from fedxab.run.population import PhasePopulation
    from fedxab.run.session import ServerSession

__all__ = ["RunWatch"]


class RunWatch:
    """The observation of one run by one party: ``clients`` (the ids it observes) of a run of
    ``budget`` rounds per client, told to ``observer``.

    ``withdrawn()`` gives the ids of the clients that withdrew so far (from the party's
    session); ``known``: whether the global and local regret can be computed (the optima are
    known); ``run_ledger``: where the party's clients' releases are recorded (private runs),
    with ``stopped()`` the clients whose releases stopped (default: the withdrawn ones)."""

    def __init__(
        self,
        observer: RunObserver,
        budget: int,
        clients: Iterable[int],
        withdrawn: Callable[[], Collection[int]] = tuple,
        *,
        known: tuple[bool, bool] = (True, True),
        run_ledger: RunLedger | None = None,
        stopped: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        self.observer = observer
        self.budget = budget
        self.clients = [int(m) for m in clients]
        self._withdrawn = withdrawn
        self.known = known
        self.run_ledger = run_ledger
        self._stopped = stopped
        self.regret = np.zeros(2)
        """The sums of the global and local regret terms seen so far."""
        self._best = np.full((2, len(self.clients)), np.inf)  # best term per client (min)
        self._slot = {m: k for k, m in enumerate(self.clients)}
        self._counted = 0  # rounds whose terms :meth:`advance` added
        self._every = max(1, budget // PROGRESS_UPDATES)
        self._next = self._every
        self._epsilon = (
            EpsilonWatch(run_ledger, self.clients)
            if run_ledger is not None and observer.wants_details
            else None
        )
        self.evaluations = 0
        """Evaluations fed by :meth:`pulled` since the last :meth:`phase_seen`."""
        self.last_privacy = time.monotonic()

    @classmethod
    def of_session(
        cls, observer: RunObserver, session: ServerSession, run_ledger: RunLedger | None
    ) -> RunWatch:
        """The watch of a run's server side (the in-process federation, the server agent):
        every client of ``session``, the regret its per-round sums can compute, and the clients
        whose releases stopped in ``run_ledger`` (central DP: also those its server refused)."""
        sums = session.sums
        return cls(
            observer,
            session.budget,
            range(session.n_clients),
            lambda: session.withdrawn,
            known=(sums.global_sum is not None, sums.local_sum is not None),
            run_ledger=run_ledger,
            stopped=lambda: stopped_phases(session.server),
        )

    def start(self, config: Config, run_id: str, transport: str, known: tuple[bool, bool]) -> None:
        """Tell the observer that run ``run_id`` of ``config`` starts, seen over ``transport``
        (``inprocess``, ``memory``, ``kafka``) for the observed clients; ``known``: whether
        this party can compute the global and local regret
        (:func:`~fedxab.run.evaluation.regret_known`)."""
        self.observer.start_run(
            run_id=run_id,
            algorithm=config.algorithm.name,
            objective=config.objective.name,
            transport=transport,
            clients=len(self.clients),
            budget=self.budget,
            regret_known=known[0],
            local_regret_known=known[1],
        )

    @contextlib.contextmanager
    def failing(self) -> Iterator[None]:
        """Around a run: an error or an interruption in it tells the observer the run failed
        (:meth:`~fedxab.run.observe.RunObserver.fail_run`) before it goes on up."""
        try:
            yield
        except BaseException:
            self.observer.fail_run()
            raise

    def ended(self, record: RunRecord | None = None) -> None:
        """Tell the observer the run finished (with its ``record``, where the party has one)."""
        self.observer.end_run(record)

    # ------------------------------------------------------------------- the active clients
    def active_mask(self) -> np.ndarray:
        """Per observed client (in :attr:`clients` order): whether it has not withdrawn."""
        gone = set(self._withdrawn())
        return np.array([m not in gone for m in self.clients], dtype=bool)

    def active(self) -> int:
        """How many observed clients have not withdrawn."""
        return int(self.active_mask().sum())

    def reached(self, used: np.ndarray | Iterable[int]) -> int:
        """The round every active client reached: the least of ``used`` (evaluations per
        observed client, in :attr:`clients` order) over the active clients; the budget once
        none is active."""
        counts = np.fromiter(used, dtype=np.int64, count=len(self.clients))
        return int(counts.min(initial=self.budget, where=self.active_mask()))

    # ------------------------------------------------------------------------------ regret
    def add_terms(self, telemetry: Telemetry) -> None:
        """A client's new pulls (fresh telemetry): their regret terms join the running sums,
        and its best terms so far (the simple regret of what it evaluated)."""
        k = self._slot.get(telemetry.client)
        for row, terms in enumerate((telemetry.global_terms, telemetry.local_terms)):
            if terms is not None and terms.size:
                self.regret[row] += float(terms.sum())
                if k is not None:
                    self._best[row, k] = min(self._best[row, k], float(terms.min()))

    def add_regret(self, global_sum: float) -> None:
        """Global regret terms summing to ``global_sum`` (the single-agent runner's rounds)."""
        self.regret[0] += global_sum

    def advance(self, sums: RegretSums, done: int) -> None:
        """Every client's regret terms up to round ``done`` (from the run's per-round sums)
        join the running sums: the cumulative regret at round ``done`` exactly."""
        for row, per_round in enumerate((sums.global_sum, sums.local_sum)):
            if per_round is not None:
                self.regret[row] += float(per_round[self._counted : done].sum())
        self._counted = done

    def cumulative(self) -> tuple[float | None, float | None]:
        """The cumulative global and local regret so far, per client (None: not known)."""
        n = max(len(self.clients), 1)
        return tuple(  # type: ignore[return-value]
            float(s) / n if k else None for s, k in zip(self.regret, self.known, strict=True)
        )

    def best(self) -> tuple[float | None, float | None]:
        """The mean over observed clients of each one's best global and local regret term
        (None: not known, or a client has not evaluated yet)."""
        seen = np.isfinite(self._best).all(axis=1)
        return tuple(  # type: ignore[return-value]
            float(self._best[row].mean()) if self.known[row] and seen[row] else None
            for row in range(2)
        )

    def tell_regret(
        self, t: int | None, simple: tuple[float | None, float | None] = (None, None)
    ) -> None:
        """The regret so far at round ``t`` to the observer (``simple``: the global and local
        simple regret)."""
        cumulative, local = self.cumulative()
        self.observer.on_regret(
            t=t,
            cumulative=cumulative,
            local=local,
            global_simple=simple[0],
            local_simple=simple[1],
        )

    def regret_at(
        self, t: int, simple: tuple[float | None, float | None], observed: float | None
    ) -> None:
        """The regret at round ``t`` (:meth:`tell_regret`) and what the clients ``observed``
        (the mean of their best observed values) to the observer."""
        self.tell_regret(t, simple)
        self.observer.on_observed(observed)

    # ----------------------------------------------------------------- what runners feed
    def telemetry(self, telemetry: Telemetry) -> None:
        """Fresh telemetry, told at once (a server agent): its evaluations, and the running
        regret if someone reads it."""
        self.observer.on_evaluations(telemetry.count)
        if self.observer.wants_progress or self.observer.wants_regret:
            self.add_terms(telemetry)
            self.tell_regret(None)

    def phase_closed(
        self,
        counts: Any,
        duration: float,
        used: np.ndarray,
        *,
        leaving: int = 0,
        population: PhasePopulation | None = None,
    ) -> None:
        """A phase closed (a server agent): its counts, who joined, left, was asked and
        reported (``population``), the round every active client reached (``used``:
        evaluations per client), epsilon when due, and the progress. ``leaving``: clients that
        said they leave but have not withdrawn yet (not counted as active)."""
        observer = self.observer
        observer.on_phase(counts, duration, active=self.active() - leaving)
        if population is not None:
            observer.on_population(population)
        observer.on_phase_reports(0)
        done = self.reached(used)
        observer.on_regret(t=done)
        self.privacy_if_due()
        self.progress(done, phase=int(counts.phase), evaluations=int(np.sum(used)))

    def pulled(self, telemetry: Telemetry) -> None:
        """A hosted client's fresh pulls (a client agent, perhaps in a worker thread): counted
        for the next :meth:`phase_seen`, their terms added if the observer reads the regret."""
        self.evaluations += telemetry.count
        if telemetry.count and self.observer.wants_regret:
            self.add_terms(telemetry)

    def phase_seen(
        self, counts: Any, duration: float, used: Iterable[int], observed: float | None
    ) -> None:
        """A live broadcast answered (a client agent): the phase as this party saw it
        (``counts``), the evaluations since the last one and, if the observer reads them, the
        regret at the round every active hosted client reached (``used``: evaluations per
        client, in :attr:`clients` order) and what they ``observed``."""
        observer = self.observer
        observer.on_phase(counts, duration, active=self.active())
        observer.on_evaluations(self.evaluations)
        self.evaluations = 0
        if observer.wants_regret:
            self.regret_at(self.reached(used), self.best(), observed)

    # ---------------------------------------------------------------------------- progress
    def due(self, done: int) -> bool:
        """Whether round ``done`` is worth a progress update (about
        :data:`~fedxab.run.observe.PROGRESS_UPDATES` per run, and the last round); then the
        next one is due a step later."""
        if done < self._next and done != self.budget:
            return False
        self._next = (done // self._every + 1) * self._every
        return True

    def progress(
        self,
        done: int,
        *,
        regret: float | None = None,
        phase: int | None = None,
        evaluations: int | None = None,
        epsilon: float | None = None,
    ) -> None:
        """Tell the observer the progress: ``done`` rounds, the running cumulative regret (or
        ``regret``), and the max epsilon so far (or ``epsilon``) if the observer shows it."""
        if regret is None:
            cumulative = self.cumulative()[0]
            regret = math.nan if cumulative is None else cumulative
        if epsilon is None and self._epsilon is not None:
            epsilon = self._epsilon()
        self.observer.on_progress(Progress(done, self.budget, regret, phase, evaluations, epsilon))

    def finished(self, record: RunRecord, used: np.ndarray, phase: int | None) -> None:
        """One last update of a detailed progress display, once the telemetry and the ledger
        are in (a server agent: the clients' reports of their evaluations, and under local DP
        their releases, arrive after the phases): the round every active client reached
        (``used``: evaluations per client), the record's cumulative regret and max epsilon."""
        if not self.observer.wants_details:
            return
        cum = record.cumulative_regret
        privacy = record.privacy
        self.progress(
            self.reached(used),
            regret=float(cum[-1]) if cum is not None and cum.size else math.nan,
            phase=phase,
            evaluations=int(np.sum(used)),
            epsilon=None if privacy is None else float(privacy["max_epsilon"]),
        )

    # ----------------------------------------------------------------------------- privacy
    def privacy(self) -> None:
        """Every observed client's epsilon so far, the budget, delta and the clients whose
        releases stopped, to the observer (private runs)."""
        if self.run_ledger is None:
            return
        budget = self.run_ledger.budget
        stopped = self._stopped() if self._stopped is not None else self._withdrawn()
        self.observer.on_privacy(
            ledger_epsilons(self.run_ledger, self.clients),
            budget_epsilon=None if budget is None else budget.epsilon,
            delta=self.run_ledger.delta,
            withdrawn=[int(m) for m in stopped],
        )
        self.last_privacy = time.monotonic()

    def privacy_if_due(self) -> None:
        """:meth:`privacy`, when the observer says it is due."""
        if self.run_ledger is not None and self.observer.privacy_due():
            self.privacy()

    def privacy_if_stale(self) -> None:
        """:meth:`privacy`, once the observer's ``privacy_interval_s`` passed since the last
        (a client agent, whose observer may be shared: it does not ask it)."""
        if time.monotonic() - self.last_privacy >= self.observer.privacy_interval_s:
            self.privacy()
