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

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from fedxab import regret as _regret
from fedxab.algorithms.registry import make_optimizer
from fedxab.config import Config
from fedxab.objectives.registry import make_objective
from fedxab.results import RunRecord, RunResults, summarize_communication, summarize_privacy
from fedxab.run.assembly import client_family, make_noise_model
from fedxab.run.outcome import ObservedBest
from fedxab.seeding import stream

__all__ = [
    "ProgressCallback",
    "RunStartCallback",
    "objective_info",
    "report_progress",
    "run_config",
    "run_single",
]

log = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int, float], None]
"""``progress(done, total, cumulative_regret)``; called at most about 200 times per run. A
callback with a true ``details`` attribute is also given the federated runners' details as
keywords (:func:`report_progress`)."""

RunStartCallback = Callable[[int, int, int], None]
"""``on_run_start(index, repeats, seed)``; called before each run of :func:`run_config`."""

_PROGRESS_UPDATES = 200


def wants_details(progress: ProgressCallback | None) -> bool:
    """Whether ``progress`` takes the details keywords (its ``details`` attribute is true)."""
    return bool(getattr(progress, "details", False))


def report_progress(
    progress: ProgressCallback, done: int, total: int, cum: float, **details: Any
) -> None:
    """``progress(done, total, cum)``, with ``details`` (``phase``: the phase just closed,
    ``evaluations``: over all clients so far, ``epsilon``: the max over clients spent so far,
    private runs only) as keywords if ``progress`` takes them (:func:`wants_details`)."""
    if wants_details(progress):
        progress(done, total, cum, **details)  # type: ignore[call-arg]
    else:
        progress(done, total, cum)


def objective_info(config: Config) -> dict[str, Any]:
    """The ``objective`` block of the results file: the built-in objective (built once to
    describe it), or a user's own, described by its config alone (never imported here)."""
    spec = config.objective
    if spec.is_user:
        return {
            "name": spec.name,
            "function": spec.function,
            "direction": spec.direction,
            "dim": int(config.domain.shape[0]),
            "domain": config.domain.tolist(),
            "optimum_value": None,
            "maximizer": None,
        }
    objective = make_objective(spec.name, **dict(spec.params))
    return {
        "name": objective.name,
        "dim": int(objective.dim),
        "domain": objective.domain.tolist(),
        "optimum_value": objective.optimum_value,
        "maximizer": None if objective.maximizer is None else objective.maximizer.tolist(),
    }


def run_single(config: Config, seed: int, progress: ProgressCallback | None = None) -> RunRecord:
    """Run the configured optimizer once with ``seed`` for ``config.run.budget`` rounds."""
    budget = config.run.budget
    if config.objective.is_user:
        objective = client_family(config, seed).clients[0]
    else:
        objective = make_objective(config.objective.name, **dict(config.objective.params))
    noise = make_noise_model(config)
    opt = make_optimizer(
        config.algorithm.name,
        config.domain,
        seed=seed,
        budget=budget,
        params=config.algorithm_params(),
    )
    rng = stream(seed, "noise", 0)
    f_star = objective.optimum_value
    known = f_star is not None
    if not known:
        log.warning("%s: optimum unknown, regret will not be recorded", objective.name)

    values = np.empty(budget, dtype=np.float64)  # noise-free f(x_t)
    points = np.empty((budget, config.domain.shape[0]))  # x_t
    observed = np.empty(budget, dtype=np.float64)  # y_t
    every = max(1, budget // _PROGRESS_UPDATES)
    next_report = every if progress is not None else budget + 1
    running = 0.0  # cumulative regret up to round `counted`, for the progress callback only
    counted = 0
    f_ref = float(f_star) if known else 0.0

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
        if t + 1 == next_report:
            running += f_ref * (t + 1 - counted) - float(values[counted : t + 1].sum())
            counted = t + 1
            progress(t + 1, budget, running if known else float("nan"))  # type: ignore[misc]
            next_report = min(next_report + every, budget)
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
    seen = ObservedBest(0, budget, config.objective.direction)
    seen.add(points, observed)
    return RunRecord(
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
) -> RunResults:
    """All ``config.run.repeats`` runs (seeds ``seed, seed+1, ...``), collected as results."""
    runs = [run_single(config, seed, progress) for seed in announce_seeds(config, on_run_start)]
    return collect_results(config, runs)


def announce_seeds(config: Config, on_run_start: RunStartCallback | None) -> Iterator[int]:
    """The seeds of ``config.run``, calling ``on_run_start(k, n, seed)`` before run k."""
    seeds = config.run.seeds
    for k, seed in enumerate(seeds):
        if on_run_start is not None:
            on_run_start(k, len(seeds), seed)
        yield seed


def collect_results(config: Config, runs: list[RunRecord]) -> RunResults:
    """The results of a job's runs: the experiment's config, the objective, the runs and (for
    federated runs) the mean communication."""
    return RunResults(
        config=config.experiment_dict(),
        algorithm=config.algorithm.name,
        objective=objective_info(config),
        runs=tuple(runs),
        communication=summarize_communication(runs),
        privacy=summarize_privacy(runs),
    )
