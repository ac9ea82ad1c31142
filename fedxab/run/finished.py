"""Finished runs kept as they finish, so that an interrupted job resumes where it stopped.

A job of several seeds writes each finished run to ``DIR/runs/seed-{seed}.json`` at once
(owner-only, atomically), before the next seed starts; ``results.json`` combines them at the end.
``fedxab run --resume`` (:class:`FinishedRuns` with ``resume=True``) takes the runs already there
instead of running their seeds again, so a job interrupted after two of three seeds runs only the
third, and its ``results.json`` equals the uninterrupted job's (wall times aside).

A kept run is taken only for the same experiment: the file stores the config's
:meth:`~fedxab.config.Config.experiment_dict` without ``run.seed``, ``run.repeats`` and
``run.output`` (so a resumed job may add seeds or move its output); a file of another experiment
is refused with the fields that differ, never mixed in. A kept run whose experiment differs only
in ``run.budget`` is a run to continue (:meth:`FinishedRuns.to_continue`,
:mod:`fedxab.run.continuation`).

File layout (schema ``fedxab.finished-run/1``)::

    {"schema": "fedxab.finished-run/1", "experiment": {...}, "run": {...}}   # RunRecord.to_dict()
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedxab.private_files import private_dir, write_atomically
from fedxab.results import ResultsError, RunRecord
from fedxab.run.identity import protocol_differences

if TYPE_CHECKING:
    from fedxab.config import Config

__all__ = ["FINISHED_SCHEMA", "FinishedRuns"]

FINISHED_SCHEMA = "fedxab.finished-run/1"
RUNS_DIRNAME = "runs"


def _experiment(config: Config) -> dict[str, Any]:
    """What a kept run must share with the job that takes it: the experiment, whichever seeds
    the job runs and wherever it writes."""
    data = config.experiment_dict()
    data["run"] = {k: v for k, v in data["run"].items() if k not in ("seed", "repeats", "output")}
    return json.loads(json.dumps(data))


class FinishedRuns:
    """The finished runs of ``config``'s job in ``config.output_dir / "runs"``.

    :meth:`keep` writes a run as it finishes; with ``resume``, :meth:`kept` returns those
    already there (by seed) for the runner to take instead of running them."""

    def __init__(self, config: Config, *, resume: bool) -> None:
        self.directory = config.output_dir / RUNS_DIRNAME
        self.resume = resume
        self._experiment = _experiment(config)
        self._seeds = config.run.seeds

    def path(self, seed: int) -> Path:
        return self.directory / f"seed-{seed}.json"

    def on_disk(self) -> list[int]:
        """The job's seeds that have a finished run on disk (kept or not)."""
        return [seed for seed in self._seeds if self.path(seed).exists()]

    def kept(self) -> dict[int, RunRecord]:
        """With ``resume``: the runs on disk, by seed (none without it), but those that
        :meth:`to_continue` returns. A file that is not a finished run of this experiment
        raises :class:`~fedxab.results.ResultsError` naming it and why."""
        if not self.resume:
            return {}
        kept = {}
        for seed in self.on_disk():
            experiment, record = self._read(seed)
            if experiment == self._experiment:
                kept[seed] = record
            elif not _other_budget(self._experiment, experiment):
                raise self._other_experiment(seed, experiment)
        return kept

    def to_continue(self) -> dict[int, tuple[dict[str, Any], RunRecord]]:
        """With ``resume``: the runs on disk whose experiment differs from this job's in
        ``run.budget`` alone (and the ``algorithm.horizon`` a continued run pins), by seed,
        with their experiment: the runs to continue (:mod:`fedxab.run.continuation`)."""
        if not self.resume:
            return {}
        found = {}
        for seed in self.on_disk():
            experiment, record = self._read(seed)
            if experiment != self._experiment and _other_budget(self._experiment, experiment):
                found[seed] = (experiment, record)
        return found

    def keep(self, record: RunRecord) -> Path:
        """Write ``record`` (a finished run of this job) to its file; its path."""
        body = {"schema": FINISHED_SCHEMA, "experiment": self._experiment, "run": record.to_dict()}
        target = self.path(record.seed)
        private_dir(self.directory)
        write_atomically(target, json.dumps(body, allow_nan=False).encode("utf-8"))
        return target

    def _read(self, seed: int) -> tuple[dict[str, Any], RunRecord]:
        """The experiment and the run of seed ``seed``'s file."""
        path = self.path(seed)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ResultsError(
                f"{path}: not a readable finished run ({exc}); remove it to run seed {seed} again"
            ) from exc
        if not isinstance(data, dict) or data.get("schema") != FINISHED_SCHEMA:
            raise ResultsError(f"{path}: not a {FINISHED_SCHEMA} file; remove it or move --output")
        experiment = data.get("experiment")
        if not isinstance(experiment, dict):
            raise ResultsError(f"{path}: 'experiment' must be an object; remove the file")
        if not isinstance(data.get("run"), dict):
            raise ResultsError(f"{path}: 'run' must be an object; remove the file")
        record = RunRecord.from_dict(data["run"], where=str(path))
        if record.seed != seed:
            raise ResultsError(f"{path}: holds seed {record.seed}, not {seed}")
        return experiment, record

    def _other_experiment(self, seed: int, experiment: dict[str, Any]) -> ResultsError:
        differences = protocol_differences(self._experiment, experiment)
        return ResultsError(
            f"{self.path(seed)} is a run of another experiment ({'; '.join(differences[:3])}); "
            "--resume takes only runs of this job: remove it or choose another --output"
        )


def _other_budget(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Whether ``theirs`` is ``ours`` with another ``run.budget`` (whatever its
    ``algorithm.horizon``): a run that ``--resume`` continues if its budget is the smaller
    (:func:`~fedxab.run.continuation.continued_config` refuses a larger one, naming
    ``run.budget``)."""

    def rest(experiment: dict[str, Any]) -> dict[str, Any]:
        run = {k: v for k, v in experiment.get("run", {}).items() if k != "budget"}
        algorithm = {k: v for k, v in experiment.get("algorithm", {}).items() if k != "horizon"}
        return {**experiment, "run": run, "algorithm": algorithm}

    budget = theirs.get("run", {}).get("budget")
    return budget != ours["run"].get("budget") and rest(ours) == rest(theirs)
