"""The results file, ``results.json``: what a run produced, in a stable, versioned schema.

Layout (schema ``fedxab.results/1``)::

    {
      "schema": "fedxab.results/1",
      "fedxab_version": "0.1.0",
      "created_at": "2025-01-01T12:00:00+00:00",      # UTC
      "config": {...},                                 # Config.to_dict() echo
      "algorithm": "hct",
      "objective": {"name", "dim", "domain", "optimum_value", "maximizer"},
      "runs": [
        {"seed", "rounds": [...],                      # <= ~500 round numbers, last included
         "cumulative_regret": [...],                   # at those rounds, averaged over clients
         "average_regret": [...],                      # cumulative_regret / rounds
         "recommendation": [...], "simple_regret", "evaluations", "wall_time_s"}
      ],
      "summary": {"runs": n, "cumulative_regret": {"mean", "std"},
                  "average_regret": {"mean", "std"}, "simple_regret": {"mean", "std"}},
      "communication": null,                           # filled by the federated issues
      "privacy": null                                  # filled by the privacy issue
    }

Regret values are ``null`` when the objective's optimum is unknown. Summary statistics are over
runs, at the final round; ``std`` is the population standard deviation (``ddof = 0``), so a
single run has std 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import logging
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedxab.errors import FedxabError

__all__ = [
    "RESULTS_FILENAME",
    "SCHEMA",
    "ResultsError",
    "RunRecord",
    "RunResults",
    "load_results",
    "summarize",
    "write_results",
]

log = logging.getLogger(__name__)

SCHEMA = "fedxab.results/1"
RESULTS_FILENAME = "results.json"


class ResultsError(FedxabError, ValueError):
    """A results file is missing, unreadable, or does not follow the results schema."""


def _version() -> str:
    from fedxab import __version__

    return __version__


def _float_or_none(value: Any) -> float | None:
    if value is None:
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _list_or_none(arr: np.ndarray | None) -> list[float] | None:
    if arr is None:
        return None
    return [float(v) for v in np.asarray(arr, dtype=np.float64)]


@dataclasses.dataclass(frozen=True, eq=False)
class RunRecord:
    """One run (one seed): the regret curve on a grid of rounds and the final answer.

    ``cumulative_regret[k]`` is the cumulative regret after round ``rounds[k]`` (averaged over
    clients in the federated case), or ``None`` when the optimum is unknown.
    """

    seed: int
    rounds: np.ndarray
    cumulative_regret: np.ndarray | None
    recommendation: np.ndarray
    simple_regret: float | None
    evaluations: int
    wall_time_s: float

    @property
    def average_regret(self) -> np.ndarray | None:
        """Average regret per round, ``cumulative_regret / rounds``."""
        if self.cumulative_regret is None:
            return None
        return self.cumulative_regret / self.rounds.astype(np.float64)

    @property
    def final_cumulative_regret(self) -> float | None:
        return None if self.cumulative_regret is None else float(self.cumulative_regret[-1])

    @property
    def final_average_regret(self) -> float | None:
        avg = self.average_regret
        return None if avg is None else float(avg[-1])

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": int(self.seed),
            "rounds": [int(r) for r in self.rounds],
            "cumulative_regret": _list_or_none(self.cumulative_regret),
            "average_regret": _list_or_none(self.average_regret),
            "recommendation": [float(v) for v in np.asarray(self.recommendation).reshape(-1)],
            "simple_regret": _float_or_none(self.simple_regret),
            "evaluations": int(self.evaluations),
            "wall_time_s": float(self.wall_time_s),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "run") -> RunRecord:
        def need(key: str) -> Any:
            if key not in d:
                raise ResultsError(f"{where}: missing field {key!r}")
            return d[key]

        try:
            rounds = np.asarray(need("rounds"), dtype=np.int64)
            cum_raw = need("cumulative_regret")
            cum = None if cum_raw is None else np.asarray(cum_raw, dtype=np.float64)
            rec = np.asarray(need("recommendation"), dtype=np.float64)
            simple = need("simple_regret")
            record = cls(
                seed=int(need("seed")),
                rounds=rounds,
                cumulative_regret=cum,
                recommendation=rec,
                simple_regret=None if simple is None else float(simple),
                evaluations=int(need("evaluations")),
                wall_time_s=float(need("wall_time_s")),
            )
        except ResultsError:
            raise
        except (TypeError, ValueError) as exc:
            raise ResultsError(f"{where}: malformed value ({exc})") from exc
        if rounds.ndim != 1 or rounds.size == 0:
            raise ResultsError(f"{where}: 'rounds' must be a non-empty list of round numbers")
        if np.any(rounds < 1) or np.any(np.diff(rounds) <= 0):
            raise ResultsError(f"{where}: 'rounds' must be increasing round numbers >= 1")
        if cum is not None and cum.shape != rounds.shape:
            raise ResultsError(
                f"{where}: 'cumulative_regret' has {cum.size} values for {rounds.size} rounds"
            )
        return record


def _stats(values: Sequence[float | None]) -> dict[str, float | None]:
    if not values or any(v is None for v in values):
        return {"mean": None, "std": None}
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std())}


def summarize(runs: Sequence[RunRecord]) -> dict[str, Any]:
    """Mean and (population) std over runs of the final cumulative, average and simple regret."""
    return {
        "runs": len(runs),
        "cumulative_regret": _stats([r.final_cumulative_regret for r in runs]),
        "average_regret": _stats([r.final_average_regret for r in runs]),
        "simple_regret": _stats([r.simple_regret for r in runs]),
    }


def _utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclasses.dataclass(frozen=True, eq=False)
class RunResults:
    """Everything a job produced: the config echo, the objective, one record per run.

    ``communication`` and ``privacy`` are ``None`` for single-agent runs; the federated and
    privacy issues fill them with plain JSON data.
    """

    config: Mapping[str, Any]
    algorithm: str
    objective: Mapping[str, Any]
    runs: tuple[RunRecord, ...]
    communication: Mapping[str, Any] | None = None
    privacy: Mapping[str, Any] | None = None
    created_at: str = dataclasses.field(default_factory=_utc_now)
    fedxab_version: str = dataclasses.field(default_factory=_version)
    source: Path | None = None
    """The file these results were loaded from, if any (not written to the file)."""

    @property
    def summary(self) -> dict[str, Any]:
        return summarize(self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "fedxab_version": self.fedxab_version,
            "created_at": self.created_at,
            "config": self.config,
            "algorithm": self.algorithm,
            "objective": self.objective,
            "runs": [r.to_dict() for r in self.runs],
            "summary": self.summary,
            "communication": self.communication,
            "privacy": self.privacy,
        }

    def to_json(self) -> str:
        """The results file's text: indented objects, number lists kept on one line."""
        return _dumps(self.to_dict()) + "\n"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: Path | None = None) -> RunResults:
        where = str(source) if source is not None else "results"
        if not isinstance(d, Mapping):
            raise ResultsError(f"{where}: expected a JSON object at the top level")
        schema = d.get("schema")
        if schema != SCHEMA:
            raise ResultsError(
                f"{where}: schema is {schema!r}, expected {SCHEMA!r} "
                "(not a fedxab results file, or written by an incompatible version)"
            )
        for key in ("config", "algorithm", "objective", "runs"):
            if key not in d:
                raise ResultsError(f"{where}: missing field {key!r}")
        if not isinstance(d["runs"], list) or not d["runs"]:
            raise ResultsError(f"{where}: 'runs' must be a non-empty list")
        if not isinstance(d["objective"], Mapping) or not isinstance(d["config"], Mapping):
            raise ResultsError(f"{where}: 'objective' and 'config' must be objects")
        runs = []
        for i, run in enumerate(d["runs"]):
            if not isinstance(run, Mapping):
                raise ResultsError(f"{where}: runs[{i}] must be an object")
            runs.append(RunRecord.from_dict(run, where=f"{where}: runs[{i}]"))
        return cls(
            config=d["config"],
            algorithm=str(d["algorithm"]),
            objective=d["objective"],
            runs=tuple(runs),
            communication=d.get("communication"),
            privacy=d.get("privacy"),
            created_at=str(d.get("created_at", "")),
            fedxab_version=str(d.get("fedxab_version", "")),
            source=source,
        )


def _dumps(value: Any, level: int = 0) -> str:
    """JSON with 2-space indented objects but lists of scalars on one line (compact curves)."""
    pad = "  " * (level + 1)
    if isinstance(value, Mapping) and value:
        items = [f"{pad}{json.dumps(str(k))}: {_dumps(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    if isinstance(value, list | tuple) and any(
        isinstance(v, Mapping | list | tuple) for v in value
    ):
        items = [f"{pad}{_dumps(v, level + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + "  " * level + "]"
    return json.dumps(value, allow_nan=False)


def write_results(results: RunResults, out_dir: str | Path) -> Path:
    """Write ``results.json`` into ``out_dir`` (created if needed) atomically; return its path.

    The JSON goes to a temporary file in the same directory, is flushed to disk, and then
    replaces ``results.json`` with :func:`os.replace`, so a reader never sees a partial file.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(f"cannot create output directory {out}: {exc.strerror or exc}") from exc
    target = out / RESULTS_FILENAME
    text = results.to_json()
    fd, tmp_name = tempfile.mkstemp(prefix=".results.", suffix=".json.tmp", dir=out)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    log.info("wrote %s", target)
    return target


def load_results(path: str | Path) -> RunResults:
    """Read and validate a results file; raise :class:`ResultsError` with the reason if bad."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ResultsError(f"{p}: results file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{p}: cannot read results file ({exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(
            f"{p}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from exc
    return RunResults.from_dict(data, source=p)
