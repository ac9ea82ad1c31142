"""Runs that continue: a finished run taken up again with a larger budget.

``fedxab run --resume --budget N`` (the finished runs in ``DIR/runs``) and
``fedxab.federate(..., budget=N, resume=results)`` continue each finished run of the same
experiment whose budget was smaller, as Optuna's ``study.optimize`` called again continues a
study.

A federated run is a deterministic function of its config, its seed and its clients'
evaluations: the state machines make the same decisions from the same reports (as a restarted
server's checkpoint replay relies on, :mod:`fedxab.agents.checkpoint`). So a continued run *is*
the longer run: it is built with the larger budget, replays what the finished run did and goes
on from where it stopped. What it keeps of the finished run:

- its **run id**, so a ledger that recorded its releases charges nothing twice: the replayed
  phases release the same seeded values under the same keys, which the ledger takes as already
  recorded (:meth:`~fedxab.privacy.gate.LedgerGate.admit`); the same data owners are charged for
  the new phases, and the ledger ends as the longer run's ledger;
- its **evaluations**: a user's objective is not called again for them, its trials answer
  (:meth:`~fedxab.objectives.history.TrialLog.replay`: from the results in memory, or from the
  ``trials-seed{seed}-client{m}.csv`` files ``fedxab run`` writes beside ``results.json``; a
  point that is not the recorded one stops the run, naming both); a built-in (simulated)
  objective recomputes them from the seed, the same values, with nothing to store;
- the **horizon** its algorithm's constants were set for (:data:`HORIZON`).

That is in process (:func:`continue_job`, :func:`continuations_from_results`). On a broker
(``fedxab server --resume``, ``fedxab client --resume``: :func:`continue_party`) the finished
run's topics end with its answer, so the continued run is a new run on new topics, with the
longer run's id; the clients replay their trials the same way, and a private run is refused.

Which algorithms continue exactly (:data:`CONTINUES`): those whose decisions depend on the
budget only where it ends the run (the last, truncated phase, whose pulls are a prefix of the
full phase's), or also through a horizon parameter that the continued run keeps. FTS-DE and
the TS baseline (BO iteration t's schedules depend on t, not on T) continue as they are. Fed-PNE and
DP-Fed-PNE set ``L = log(c1 T / delta)`` from ``[algorithm] horizon`` (default: the budget), so
a run of budget 2,000 continued to 5,000 equals a run of budget 5,000 with ``horizon = 2000``
(the documented difference from a fresh 5,000 run, whose L is larger); a run started with
``horizon = 5000`` and budget 2,000, continued to 5,000, equals the 5,000 run exactly. Every
other algorithm is refused with one line saying why (:data:`REFUSED`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedxab.errors import ConfigError, FedxabError
from fedxab.run.identity import protocol_differences

if TYPE_CHECKING:
    from fedxab.config import Config
    from fedxab.objectives.history import TrialRecord
    from fedxab.results import RunRecord, RunResults
    from fedxab.run.finished import FinishedRuns

__all__ = [
    "CONTINUES",
    "HORIZON",
    "REFUSED",
    "Continuation",
    "ContinuationError",
    "check_continuable",
    "continuations_from_results",
    "continue_job",
    "continue_party",
    "continued_config",
    "in_process",
]

HORIZON = "horizon"
"""The ``[algorithm]`` parameter holding the T an algorithm's constants are set for."""

CONTINUES: Mapping[str, str | None] = {
    "fedpne": HORIZON,
    "dpfedpne": HORIZON,
    "ftsde": None,
    "ts": None,
}
"""The algorithms a finished run of which continues to a larger budget, each with the parameter
that holds its horizon (None: none depends on the budget). The tests check, for each, that the
evaluations of a run are the first ones of a run with a larger budget (and the same horizon)."""

REFUSED: Mapping[str, str] = {
    "pfpne": "L = log(c1 T / delta) is set from the budget, and each client hands over to PE "
    "with all its remaining budget",
    "pfhct": "its federated stage ends at a fraction phi of the budget, and each client then "
    "runs HCT with all its remaining budget",
    "parallel": "its default confidence delta = 1/T is set from the budget",
    "fed1ucb": "its pulls per arm (kappa log T) and its widths are set from the budget",
    "fedtpe": "its rounds R = B - I - K are set from the budget B",
    "local-hct": "the theory preset sets its delta = 1/T from the budget; continuing it is not "
    "supported yet",
    "central-hct": "the theory preset sets its delta = 1/T from the budget; continuing it is "
    "not supported yet",
    "dpftsde": "continuing its central-DP releases is not supported yet",
}
"""Why the other federated algorithms do not continue (checked in the tests)."""


@dataclasses.dataclass(frozen=True)
class Continuation:
    """What a continued run keeps of the finished run ``run_id`` (budget ``budget``): its id,
    per client the trials of a user's objective (empty for a simulation), and its per-phase
    communication (``phases``, the record's ``communication.per_phase``), which the continued
    run must repeat (:meth:`check`)."""

    run_id: str
    budget: int
    trials: Mapping[int, Sequence[TrialRecord]] = dataclasses.field(default_factory=dict)
    phases: Sequence[Mapping[str, Any]] = ()

    def check(self, record: RunRecord) -> None:
        """Raise :class:`ContinuationError` unless the continued run's ``record`` repeats every
        phase of the finished run but its last (which the budget may have cut short): what
        shows, for a simulation whose evaluations are recomputed, that it replayed that run."""
        done = list(self.phases)[:-1]
        got = list((record.communication or {}).get("per_phase", []))[: len(done)]
        for before, now in itertools.zip_longest(done, got):
            if before != now:
                phase = (before or now or {}).get("phase")
                raise ContinuationError(
                    f"run {self.run_id}: phase {phase} of the continued run differs from the "
                    f"finished run's ({_first_difference(before, now)}): it did not replay that "
                    "run (another fedxab version?); run it again without --resume"
                )


class ContinuationError(FedxabError, RuntimeError):
    """A continued run did not repeat the run it continues."""


def _first_difference(before: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> str:
    if before is None or now is None:
        return "missing in the " + ("finished" if before is None else "continued") + " run"
    key = next(k for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k))
    return f"{key}: {before.get(key)} before, {now.get(key)} now"


def _phases(run: RunRecord) -> tuple[Mapping[str, Any], ...]:
    return tuple((run.communication or {}).get("per_phase", ()))


def check_continuable(name: str) -> None:
    """A ConfigError naming ``run.budget`` unless algorithm ``name`` continues a run."""
    if name not in CONTINUES:
        why = REFUSED.get(name, "it is not a federated algorithm")
        raise ConfigError(
            "run.budget",
            f"a finished {name} run cannot be continued to a larger budget ({why}); run it "
            "again with the larger budget, without --resume",
        )


def _without(experiment: Mapping[str, Any], drop: Sequence[str]) -> dict[str, Any]:
    """``experiment`` without the dotted fields ``drop`` (plain data)."""
    data = json.loads(json.dumps(experiment))
    for name in drop:
        section, key = name.split(".")
        data.get(section, {}).pop(key, None)
    return data


_FREE = ("run.seed", "run.repeats", "run.output", "run.budget", f"algorithm.{HORIZON}")
"""What a continued run may change: the budget (larger), its seeds and output; the horizon
it pins itself."""


def continued_config(
    config: Config, previous: Mapping[str, Any], algorithm: str | None = None
) -> Config:
    """The config of ``config``'s job continuing runs of the experiment ``previous`` (a
    finished run's :meth:`~fedxab.config.Config.experiment_dict`; ``algorithm``: the
    algorithm it ran, where ``previous`` says ``auto``): ``config`` with its algorithm and
    ``horizon`` pinned to the finished run's. A ConfigError names the field when the two are
    not the same experiment with a larger budget."""
    name = config.algorithm.name
    ran = algorithm or previous.get("algorithm", {}).get("name")
    if ran is not None and ran != name:
        raise ConfigError(
            "algorithm.name",
            f"the run to continue ran {ran!r}, this job runs {name!r}; set [algorithm] "
            f'name = "{ran}"',
        )
    check_continuable(name)
    ours = config.experiment_dict()
    if ours["algorithm"].get("name") == "auto":  # the choice is pinned, as the run ran
        ours["algorithm"] = {"name": name, **config.algorithm_params()}
    theirs = dict(previous)
    if theirs.get("algorithm", {}).get("name") == "auto":
        theirs["algorithm"] = {**theirs["algorithm"], "name": name}
    differences = protocol_differences(_without(theirs, _FREE), _without(ours, _FREE))
    if differences:
        field, _, what = differences[0].partition(": ")
        raise ConfigError(
            field,
            f"differs from the run to continue ({what}); --resume continues the same "
            "experiment with a larger run.budget: restore it, or choose another --output",
        )
    before = int(previous["run"]["budget"])
    if config.run.budget <= before:
        raise ConfigError(
            "run.budget",
            f"{config.run.budget} does not exceed the {before} evaluations per client of the "
            f"finished run; give --budget N with N > {before} to continue it",
        )
    data = config.to_dict()
    data["algorithm"] = ours["algorithm"]
    if CONTINUES[name] == HORIZON:
        horizon = theirs.get("algorithm", {}).get(HORIZON, before)
        given = ours["algorithm"].get(HORIZON)
        if given is not None and given != horizon:
            raise ConfigError(
                f"algorithm.{HORIZON}",
                f"{given} differs from the horizon {horizon} of the run to continue (its "
                f"constants were set for it); leave algorithm.{HORIZON} out or set it to "
                f"{horizon}",
            )
        data["algorithm"] = {**ours["algorithm"], HORIZON: horizon}
    from fedxab.config import config_from_dict

    return config_from_dict(data)


def continuations_from_results(
    previous: RunResults, config: Config
) -> tuple[Config, dict[int, Continuation]]:
    """The pinned config (:func:`continued_config`) and, by seed, the continuation of each run
    of ``previous`` (results in memory, e.g. of :func:`fedxab.federate`), with the trials of
    each client of a user's objective."""
    algorithm = previous.algorithm
    pinned = continued_config(config, previous.config, algorithm)
    before = int(previous.config["run"]["budget"])
    continuations = {}
    for run in previous.runs:
        continuations[run.seed] = Continuation(
            _run_id(run), before, _trials(run) if config.objective.is_user else {}, _phases(run)
        )
    return pinned, continuations


def _clients(config: Config) -> int:
    assert config.federation is not None  # (continued_config refuses a single agent)
    return config.federation.clients


def _run_id(run: RunRecord) -> str:
    if not run.run_id:
        raise ConfigError(
            "resume", f"run of seed {run.seed} has no run id: pass the results of the run itself"
        )
    return run.run_id


def _trials(run: RunRecord) -> dict[int, Sequence[TrialRecord]]:
    """Each client's trials of ``run``; a ConfigError where they are missing."""
    if run.clients is None or any(o.trials is None for o in run.clients):
        raise ConfigError(
            "resume",
            f"the results of seed {run.seed} do not hold every client's trials (a client "
            "agent keeps its own): pass the results of fedxab.federate",
        )
    return {m: tuple(o.trials or ()) for m, o in enumerate(run.clients)}


def in_process(config: Config) -> Config:
    """``config`` on ``inprocess://``, where ``fedxab run`` continues a run: from the embedded
    broker ``memory://``, whose parties are all in this process too, with the same results
    (identical on every transport); a ConfigError naming ``broker.url`` for Kafka, whose
    parties are elsewhere."""
    url = None if config.broker is None else config.broker.url
    if url is not None and url.startswith("inprocess://"):
        return config
    if url is not None and url.startswith("memory://"):
        return config.with_broker_url("inprocess://")
    raise ConfigError(
        "broker.url",
        f"fedxab run continues a finished run in process, not on {url!r}: use --broker "
        "inprocess://, or on Kafka fedxab server --resume and fedxab client --resume",
    )


def continue_job(
    config: Config, finished: FinishedRuns
) -> tuple[Config, FinishedRuns, dict[int, Continuation]]:
    """``fedxab run --resume --budget N``: the job's config with the finished runs' algorithm
    and horizon pinned (:func:`continued_config`), its finished runs (of that config) and, by
    seed, the continuation of each finished run of a smaller budget in ``DIR/runs`` (as is,
    with none to continue). The continued runs run in process (:func:`in_process`)."""
    if not finished.resume:
        return config, finished, {}
    if not finished.on_disk() and not (config.output_dir / "checkpoints").exists():
        raise ConfigError(
            "run.output",
            f"{config.output_dir} holds no finished run to resume (no runs/seed-*.json of "
            "this job's seeds): give the --output of the run to continue, or run without "
            "--resume",
        )
    previous = finished.to_continue()
    if not previous:
        return config, finished, {}
    from fedxab.run.finished import FinishedRuns

    budgets = sorted({int(e["run"]["budget"]) for e, _ in previous.values()})
    if len(budgets) > 1:
        raise ConfigError(
            "run.budget",
            f"the finished runs to continue have budgets {budgets}: continue them one budget "
            "at a time (--repeats and --seed select the runs)",
        )
    experiment, record = next(iter(previous.values()))
    ran = record.run_id.rsplit("-", 2)[0] if record.run_id else None
    pinned = in_process(continued_config(config, experiment, ran))
    continuations = {
        seed: Continuation(
            _run_id(run),
            budgets[0],
            _trials_on_disk(pinned.output_dir, seed, range(_clients(pinned)))
            if pinned.objective.is_user
            else {},
            _phases(run),
        )
        for seed, (_, run) in previous.items()
    }
    return pinned, FinishedRuns(pinned, resume=True), continuations


def _trials_on_disk(
    directory: Path, seed: int, clients: Iterable[int]
) -> dict[int, Sequence[TrialRecord]]:
    """Each of ``clients``' trials of run ``seed`` of a user's objective, from the CSV files
    beside ``results.json`` in ``directory`` (:data:`~fedxab.results.TRIALS_FILENAME`); a
    ConfigError naming ``run.output`` where one is missing or unreadable."""
    from fedxab.objectives.history import read_trials_csv
    from fedxab.results import TRIALS_FILENAME

    trials: dict[int, Sequence[TrialRecord]] = {}
    for m in clients:
        path = directory / TRIALS_FILENAME.format(seed=seed, client=m)
        try:
            trials[m] = read_trials_csv(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                "run.output",
                f"a user's objective continues from the finished run's trials, and {path} "
                f"cannot be read ({exc}); give the --output that holds them",
            ) from None
    return trials


def continue_party(
    config: Config, output: Path, client_ids: Sequence[int] = ()
) -> tuple[Config, dict[int, Mapping[int, Sequence[TrialRecord]]]]:
    """``fedxab server --resume`` and ``fedxab client --resume`` (``client_ids``: the clients
    this party hosts): the job's config pinned to the finished run whose results are in
    ``output`` (:func:`continued_config`), and by seed the trials of each hosted client of a
    user's objective, to replay.

    On a broker the finished run's topics end with its final answer, so a continued run is a
    new run there (its id is the pinned config's), on new topics: the server runs it as it
    would any run, and the clients answer its first phases from their trials. A private run
    is refused (its ledger would charge the replayed releases again under the new id): it
    continues in process (``fedxab run --resume --budget N``)."""
    from fedxab.results import RESULTS_FILENAME, load_results

    path = Path(output) / RESULTS_FILENAME
    if not path.exists():
        raise ConfigError(
            "run.output",
            f"{path} does not exist: --resume continues the finished run whose results are "
            "there; give the --output of that run, or leave out --resume",
        )
    previous = load_results(path)
    pinned = continued_config(config, previous.config, previous.algorithm)
    if pinned.privacy is not None:
        raise ConfigError(
            "privacy",
            "a private run continues in process only (fedxab run --resume --budget N): on a "
            "broker the continued run has a new id, and its ledger would charge the replayed "
            "releases again",
        )
    replay: dict[int, Mapping[int, Sequence[TrialRecord]]] = {}
    if client_ids and pinned.objective.is_user:
        for run in previous.runs:
            replay[run.seed] = _trials_on_disk(Path(output), run.seed, client_ids)
    return pinned, replay
