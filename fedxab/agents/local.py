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

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from fedxab import regret as _regret
from fedxab.algorithms.registry import make_optimizer
from fedxab.config import Config
from fedxab.objectives.base import Objective
from fedxab.objectives.noise import make_noise
from fedxab.objectives.registry import make_objective
from fedxab.results import RunRecord, RunResults, summarize_communication, summarize_privacy
from fedxab.seeding import stream

__all__ = [
    "ProgressCallback",
    "RunStartCallback",
    "objective_info",
    "report_progress",
    "run_config",
    "run_id_for",
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


def run_id_for(config: Config, seed: int) -> str:
    """``{algorithm}-{hash of the experiment}-s{seed}``: the same for every party of a run."""
    canonical = json.dumps(config.experiment_dict(), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
    return f"{config.algorithm.name}-{digest}-s{seed}"


def objective_info(objective: Objective) -> dict[str, Any]:
    """The ``objective`` block of the results file."""
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
    objective = make_objective(config.objective.name, **dict(config.objective.params))
    noise = make_noise(config.objective.noise.name, **dict(config.objective.noise.params))
    opt = make_optimizer(
        config.algorithm.name,
        objective.domain,
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
        tell(x, f + float(sample(fx, rng)[0]))
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
    return RunRecord(
        seed=seed,
        rounds=rounds,
        cumulative_regret=cum,
        recommendation=recommendation,
        simple_regret=simple,
        evaluations=budget,
        wall_time_s=wall,
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
    objective = make_objective(config.objective.name, **dict(config.objective.params))
    return RunResults(
        config=config.experiment_dict(),
        algorithm=config.algorithm.name,
        objective=objective_info(objective),
        runs=tuple(runs),
        communication=summarize_communication(runs),
        privacy=summarize_privacy(runs),
    )
