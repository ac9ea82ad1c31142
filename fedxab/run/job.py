"""A job: the runs of one config, one per seed, collected as results; what every runner shares.

Whatever runs each seed (the single-agent runner, the in-process federation, the agents on a
broker, a reproduction), the job around it is the same: the seeds of ``[run]`` in order
(:func:`run_seeds`, :func:`announce_seeds`), each announced to ``on_run_start`` before it runs
(:data:`RunStartCallback`), then the results file's content (:func:`collect_results`, with the
objective described by :func:`objective_info`). A federation split over several hosts takes its
clients' slices from :func:`client_slices`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from fedxab.objectives.registry import make_objective
from fedxab.results import RunRecord, RunResults, summarize_communication, summarize_privacy

if TYPE_CHECKING:
    from fedxab.config import Config
    from fedxab.run.finished import FinishedRuns

__all__ = [
    "RunStartCallback",
    "announce_seeds",
    "client_slices",
    "collect_results",
    "objective_info",
    "run_seeds",
]

RunStartCallback = Callable[[int, int, int], None]
"""``on_run_start(index, repeats, seed)``; called before each run of a job."""


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


def run_seeds(
    config: Config,
    run_one: Callable[[int], RunRecord],
    *,
    on_run_start: RunStartCallback | None = None,
    finished: FinishedRuns | None = None,
) -> RunResults:
    """The results of ``run_one(seed)`` for each seed of ``config.run``, in order, calling
    ``on_run_start(k, n, seed)`` before run k. With ``finished``, each run is written to disk as
    it finishes, and the runs it already kept (``--resume``) are taken instead of run again."""
    kept = {} if finished is None else finished.kept()
    seeds = config.run.seeds
    runs = []
    for k, seed in enumerate(seeds):
        if seed in kept:
            runs.append(kept[seed])
            continue
        if on_run_start is not None:
            on_run_start(k, len(seeds), seed)
        record = run_one(seed)
        if finished is not None:
            finished.keep(record)
        runs.append(record)
    return collect_results(config, runs)


def announce_seeds(config: Config, on_run_start: RunStartCallback | None) -> Iterator[int]:
    """The seeds of ``config.run``, calling ``on_run_start(k, n, seed)`` before run k."""
    seeds = config.run.seeds
    for k, seed in enumerate(seeds):
        if on_run_start is not None:
            on_run_start(k, len(seeds), seed)
        yield seed


def collect_results(config: Config, runs: list[RunRecord]) -> RunResults:
    """The results of a job's runs: the experiment's config, the objective, the runs (each
    with its run id) and (for federated runs) the mean communication."""
    return RunResults(
        config=config.experiment_dict(),
        algorithm=config.algorithm.name,
        objective=objective_info(config),
        runs=tuple(runs),
        communication=summarize_communication(runs),
        privacy=summarize_privacy(runs),
        algorithm_choice=config.algorithm_choice,
    )


def client_slices(n_clients: int, hosts: int) -> list[list[int]]:
    """Client ids ``0..n_clients-1`` split into ``hosts`` contiguous, nearly equal slices."""
    hosts = max(1, min(hosts, n_clients))
    bounds = [round(k * n_clients / hosts) for k in range(hosts + 1)]
    return [list(range(bounds[k], bounds[k + 1])) for k in range(hosts)]
