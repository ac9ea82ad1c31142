"""The in-process single-agent runner: one optimizer, one objective, no broker.

Each round ``t = 1..T`` (T = ``run.budget``)::

    x_t = opt.ask()
    f_t = f(x_t)                      # noise-free, used for regret only
    y_t = f_t + eps_t                 # eps_t from the noise model, stream (seed, "noise", 0)
    opt.tell(x_t, y_t)

and the regret ``f* - f(x_t)`` is accumulated (noise-free, against ``objective.optimum_value``).
At the end the optimizer's recommendation and its simple regret ``f* - f(x_rec)`` are recorded.

The noise stream is keyed by client 0, so a later federated run with one client draws the same
noise as this runner for the same seed.
"""

from __future__ import annotations

import functools
import logging
import time

import numpy as np

from fedxab import regret as _regret
from fedxab.algorithms.registry import make_optimizer
from fedxab.config import Config
from fedxab.objectives.registry import make_objective
from fedxab.results import RunRecord, RunResults
from fedxab.run.assembly import client_family, make_noise_model
from fedxab.run.finished import FinishedRuns
from fedxab.run.identity import run_id_for
from fedxab.run.job import RunStartCallback, run_seeds
from fedxab.run.observe import ProgressCallback, RunObserver, observer_of
from fedxab.run.outcome import ObservedBest
from fedxab.run.watch import RunWatch
from fedxab.seeding import stream

__all__ = ["run_config", "run_single"]

log = logging.getLogger(__name__)


def run_single(
    config: Config,
    seed: int,
    progress: ProgressCallback | None = None,
    *,
    metrics: RunObserver | None = None,
) -> RunRecord:
    """Run the configured optimizer once with ``seed`` for ``config.run.budget`` rounds; the
    ``metrics`` and ``progress`` observers see its regret and round as it goes."""
    observer = observer_of(metrics, progress)
    try:
        record = _run_single(config, seed, observer)
    except BaseException:
        observer.fail_run()
        raise
    observer.end_run(record)
    return record


def _run_single(config: Config, seed: int, observer: RunObserver) -> RunRecord:
    budget = config.run.budget
    if config.objective.is_user:
        objective = client_family(config, seed).client(0)
    else:
        objective = make_objective(config.objective.name, **dict(config.objective.params))
    noise = make_noise_model(config)
    opt = make_optimizer(
        config.algorithm.name,
        config.domain,
        seed=seed,
        budget=budget,
        params=config.algorithm_params(),
        edges=None if config.search_space is None else config.search_space.edges,
    )
    rng = stream(seed, "noise", 0)
    f_star = objective.optimum_value
    known = f_star is not None
    if not known:
        log.warning("%s: optimum unknown, regret will not be recorded", objective.name)
    watch = RunWatch(observer, budget, [0], known=(known, False))
    watch.start(config, run_id_for(config, seed), "inprocess", (known, known))
    trials = getattr(objective, "trials", None)  # a user's objective: its calls, live
    if trials is not None and observer.wants_trials:
        trials.listener = functools.partial(observer.on_trial, 0)

    values = np.empty(budget, dtype=np.float64)  # noise-free f(x_t)
    points = np.empty((budget, config.domain.shape[0]))  # x_t
    observed = np.empty(budget, dtype=np.float64)  # y_t
    seen = ObservedBest(0, budget, config.objective.direction)
    watched = observer.wants_progress or observer.wants_regret
    counted = 0  # rounds whose regret the watch holds
    f_ref = 0.0 if f_star is None else float(f_star)

    ask, tell, sample = opt.ask, opt.tell, noise.sample
    t0 = time.perf_counter()
    for t in range(budget):
        x = ask()
        fx = objective(x[None])
        f = float(fx[0])
        values[t] = f
        y = f + float(sample(fx, rng)[0])
        points[t], observed[t] = x, y
        tell(x, y)
        if watched and watch.due(t + 1):
            watch.add_regret(f_ref * (t + 1 - counted) - float(values[counted : t + 1].sum()))
            seen.add(points[counted : t + 1], observed[counted : t + 1])
            counted = t + 1
            watch.regret_at(t + 1, (None, None), seen.best)
            watch.progress(t + 1)
    recommendation = np.asarray(opt.recommend(), dtype=np.float64).reshape(-1).copy()
    wall = time.perf_counter() - t0

    rounds = _regret.round_grid(budget)
    if known:
        curve = _regret.cumulative_regret(_regret.instant_regret(f_ref, values))
        cum = _regret.at_rounds(curve, rounds)
        simple = _regret.simple_regret(f_ref, float(objective(recommendation[None])[0]))
    else:
        cum, simple = None, None
    log.debug("seed %d: %d evaluations in %.3f s", seed, budget, wall)
    seen.add(points[counted:], observed[counted:])
    return RunRecord(
        run_id=run_id_for(config, seed),
        seed=seed,
        rounds=rounds,
        cumulative_regret=cum,
        recommendation=recommendation,
        simple_regret=simple,
        evaluations=budget,
        wall_time_s=wall,
        clients=(seen.outcome(),),
    )


def run_config(
    config: Config,
    progress: ProgressCallback | None = None,
    *,
    on_run_start: RunStartCallback | None = None,
    metrics: RunObserver | None = None,
    finished: FinishedRuns | None = None,
) -> RunResults:
    """All ``config.run.repeats`` runs (seeds ``seed, seed+1, ...``), collected as results
    (``finished``: see :func:`~fedxab.run.job.run_seeds`)."""
    return run_seeds(
        config,
        lambda seed: run_single(config, seed, progress, metrics=metrics),
        on_run_start=on_run_start,
        finished=finished,
    )
