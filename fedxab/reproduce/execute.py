"""Running a plan: every entry over its seeds through
:func:`fedxab.agents.federation.run_federated_config` (:func:`run_plan`), each entry's
``OUTPUT/<entry>/results.json`` written as soon as it is done, and reading them back
(:func:`load_plan_results`, for ``--plot-only``).

The runner's results only hold the final simple regret, so for ``parallel-*`` the anytime loss
curve is rebuilt from the coordinator's per-level record (the recommendation after a completed
level is the centre of its best node, the root's centre before the first level completes) and
written next to ``results.json`` as ``simple_regret.json``. :class:`EntryResult` gives each
entry's curves and final values to the figure and the tables."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from fedxab.private_files import private_dir, write_atomically
from fedxab.reproduce.experiments import ReproduceError
from fedxab.reproduce.plan import Plan, PlannedEntry, make_plan
from fedxab.validation import check_positive_int

__all__ = [
    "SIMPLE_REGRET_FILENAME",
    "EntryResult",
    "RunProgress",
    "load_plan_results",
    "run_plan",
]

SIMPLE_REGRET_FILENAME = "simple_regret.json"


@dataclasses.dataclass(frozen=True, eq=False)
class EntryResult:
    """What one entry produced: its results and, for ``parallel-*``, the loss curves."""

    planned: PlannedEntry
    results: Any  # fedxab.results.RunResults
    simple_regret: np.ndarray | None = None
    """(seeds, len(rounds)) loss of the recommendation at each round of the grid."""

    @property
    def rounds(self) -> np.ndarray:
        return self.results.runs[0].rounds

    def band(self, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rounds, mean, std)`` over seeds of ``metric``."""
        if metric == "simple_regret":
            if self.simple_regret is None:
                raise ReproduceError(f"{self.planned.entry.key}: no simple-regret curves")
            curves = self.simple_regret
            return self.rounds, curves.mean(axis=0), curves.std(axis=0)
        if metric == "local_simple_regret":
            curves = self.local_simple_regret()
            return self.rounds, curves.mean(axis=0), curves.std(axis=0)
        from fedxab.monitoring.plots import regret_band

        return regret_band(self.results, metric)

    def local_simple_regret(self) -> np.ndarray:
        """(seeds, len(rounds)): each run's mean over clients of the best local regret so far
        ([DP]'s metric), checked to share the first run's rounds."""
        where = self.results.source or self.planned.results_path
        rounds = self.rounds
        curves = []
        for i, run in enumerate(self.results.runs):
            if run.local_simple_regret is None:
                raise ReproduceError(
                    f"{where}: runs[{i}] has no local_simple_regret (federated runs record it "
                    "when every client's optimum is known)"
                )
            if run.rounds.shape != rounds.shape or np.any(run.rounds != rounds):
                raise ReproduceError(f"{where}: runs[{i}] has a different rounds grid")
            curves.append(run.local_simple_regret)
        return np.vstack(curves)

    def final(self, metric: str) -> tuple[float, float]:
        """Mean and std over seeds of ``metric`` at the last round."""
        _, mean, std = self.band(metric)
        return float(mean[-1]), float(std[-1])

    def epsilon(self) -> tuple[float, float] | None:
        """Mean and std over seeds of each run's largest client epsilon (from its ledger), or
        None for a non-private entry."""
        blocks = [run.privacy for run in self.results.runs]
        if self.planned.entry.privacy is None and all(b is None for b in blocks):
            return None
        if any(b is None for b in blocks):
            raise ReproduceError(
                f"{self.planned.results_path}: a run of the private {self.planned.entry.key} has "
                "no privacy block"
            )
        eps = np.array([float(b["max_epsilon"]) for b in blocks])
        return float(eps.mean()), float(eps.std())


RunProgress = Callable[..., None]
"""``(entry, seed index, rounds done, T)``; called at the start of every run and as it goes.
A callback with a true ``details`` attribute also gets the run's ``regret`` (cumulative, averaged
over clients) and, from the federated runner, the ``phase``, ``evaluations`` and ``epsilon``
keywords."""


def _loss_curve(fed: Any, rounds: np.ndarray) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """The anytime loss ``f* - f(x(t))`` of a parallel run at ``rounds`` (per-player steps).

    ``x(t)`` is the centre of the best node of the deepest level completed by step t, the root's
    centre before any level completes (fedxab's choice).
    """
    server = fed.server
    glob = fed.family.global_objective
    f_star = float(glob.optimum_value)
    lower, upper = server.partition.cell(0, 1)
    centres = [(lower + upper) / 2.0]
    ends = []
    for rec in server.history:
        lower, upper = server.partition.cell(rec.depth, rec.best)
        centres.append((lower + upper) / 2.0)
        ends.append(rec.evaluations)
    values = glob(np.vstack(centres))
    losses = np.maximum(f_star - values, 0.0)
    level = np.searchsorted(np.asarray(ends, dtype=np.int64), rounds, side="right")
    levels = [
        {
            "depth": int(rec.depth),
            "evaluations": int(rec.evaluations),
            "best": int(rec.best),
            "loss": float(losses[k + 1]),
        }
        for k, rec in enumerate(server.history)
    ]
    return losses[level], levels


def _run_parallel(
    pe: PlannedEntry, progress: Callable[[int, int, float], None] | None, on_start: Any
) -> EntryResult:
    """Like ``run_federated_config``, keeping each coordinator's level record for the loss."""
    from fedxab.agents.federation import Federation
    from fedxab.run.job import announce_seeds, collect_results

    config = pe.config
    runs, curves, traces = [], [], []
    for seed in announce_seeds(config, on_start):
        fed = Federation(config, seed)
        record = fed.run(progress)
        loss, levels = _loss_curve(fed, record.rounds)
        runs.append(record)
        curves.append(loss)
        traces.append({"seed": seed, "simple_regret": loss.tolist(), "levels": levels})
    _write_simple_regret(pe, runs[0].rounds, traces)
    return EntryResult(pe, collect_results(config, runs), np.vstack(curves))


def _write_simple_regret(pe: PlannedEntry, rounds: np.ndarray, traces: list[dict]) -> Path:
    path = pe.directory / SIMPLE_REGRET_FILENAME
    data = {
        "schema": "fedxab.simple_regret/1",
        "description": "loss f* - f(x(t)) of the coordinator's recommendation after each "
        "per-player step t (rebuilt from its per-level record)",
        "algorithm": pe.config.algorithm.name,
        "players": pe.config.federation.clients,
        "rounds": [int(r) for r in rounds],
        "runs": traces,
    }
    private_dir(path.parent)
    write_atomically(path, (json.dumps(data) + "\n").encode("utf-8"))
    return path


def run_plan(
    plan: Plan,
    progress: RunProgress | None = None,
    on_entry_done: Callable[[EntryResult], None] | None = None,
    *,
    jobs: int = 1,
) -> list[EntryResult]:
    """Run every entry over the seeds; write each entry's ``results.json`` as soon as it is done
    (and, for ``parallel-*``, its ``simple_regret.json``).

    With ``jobs`` > 1, entries run in that many worker processes at once (the entries are
    independent and seeded, so the results are the same as one after the other); ``progress``
    then hears of each entry when it is done, not during its runs."""
    check_positive_int("--jobs", jobs)
    if jobs == 1:
        done = []
        for pe in plan.entries:
            done.append(_run_entry(pe, plan, progress))
            if on_entry_done is not None:
                on_entry_done(done[-1])
        return done
    context = multiprocessing.get_context("spawn")  # never fork a process that may hold threads
    by_key: dict[str, EntryResult] = {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {
            pool.submit(
                _run_entry_in_worker, plan.experiment.name, plan.make_args, pe.entry.key
            ): pe
            for pe in plan.entries
        }
        for future in as_completed(futures):
            future.result()  # an error in a worker is raised here
            pe = futures[future]
            by_key[pe.entry.key] = _load_entry(plan, pe)
            if progress is not None:
                progress(pe, plan.seeds - 1, plan.budget, plan.budget)
            if on_entry_done is not None:
                on_entry_done(by_key[pe.entry.key])
    return [by_key[pe.entry.key] for pe in plan.entries]


def _run_entry(pe: PlannedEntry, plan: Plan, progress: RunProgress | None) -> EntryResult:
    """Run one entry over the plan's seeds and write its results."""
    from fedxab.agents.federation import run_federated_config
    from fedxab.results import write_results

    state = {"seed": 0}

    def on_start(k: int, total: int, seed: int) -> None:
        state["seed"] = k
        if progress is not None:
            progress(pe, k, 0, plan.budget)

    def on_progress(rounds: int, total: int, cum: float, **details: Any) -> None:
        if progress is None:
            return
        if getattr(progress, "details", False):  # regret, phase, evaluations, epsilon
            progress(pe, state["seed"], rounds, total, regret=cum, **details)
        else:
            progress(pe, state["seed"], rounds, total)

    on_progress.details = True  # type: ignore[attr-defined]

    if plan.experiment.metric == "simple_regret":
        private_dir(pe.directory)
        result = _run_parallel(pe, on_progress, on_start)
    else:
        results = run_federated_config(pe.config, on_progress, on_run_start=on_start)
        result = EntryResult(pe, results)
    write_results(result.results, pe.directory)
    return result


def _run_entry_in_worker(name: str, make_args: Mapping[str, Any], key: str) -> None:
    """A worker process's job for :func:`run_plan`: rebuild the plan (a config is not sent
    between processes) and run entry ``key``, writing its results."""
    plan = make_plan(name, **make_args)
    (pe,) = [pe for pe in plan.entries if pe.entry.key == key]
    _run_entry(pe, plan, None)


def load_plan_results(plan: Plan) -> list[EntryResult]:
    """The results an earlier run of ``plan`` wrote (for ``--plot-only``)."""
    return [_load_entry(plan, pe) for pe in plan.entries]


def _load_entry(plan: Plan, pe: PlannedEntry) -> EntryResult:
    """The results entry ``pe`` of ``plan`` wrote."""
    from fedxab.results import load_results

    if not pe.results_path.is_file():
        raise ReproduceError(
            f"no results for {pe.entry.key} in {pe.directory}: run "
            f"`fedxab reproduce {plan.experiment.name}` first (with the same --output)"
        )
    results = load_results(pe.results_path)
    curves = None
    if plan.experiment.metric == "simple_regret":
        path = pe.directory / SIMPLE_REGRET_FILENAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            curves = np.array([r["simple_regret"] for r in data["runs"]], dtype=float)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ReproduceError(f"{path}: cannot read the simple-regret curves ({exc})") from exc
        if curves.ndim != 2 or curves.shape[1] != len(results.runs[0].rounds):
            raise ReproduceError(f"{path}: curves do not match {pe.results_path}'s rounds")
    return EntryResult(pe, results, curves)
