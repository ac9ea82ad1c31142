"""Each site's own trial history: every call of a user's objective, kept where the site runs.

A :class:`TrialLog` belongs to one client's objective
(:class:`~fedxab.objectives.user.UserCall` keeps it): every call of the user's function adds a
:class:`TrialRecord` of the parameters the function was given (by name with a typed space, the
decoded values in the user's units; else the point's coordinates ``x0, x1, ...``), the value it
returned (in the user's units and direction, before fedxab turns a minimised value into a
maximised one) and the wall time of the call. A vectorised function evaluates a batch in one
call: each of its points gets the call's wall time divided by the batch size. A repeat that a
deterministic objective answers from its cache is no call, so no trial.

A run that continues a finished one (:mod:`fedxab.run.continuation`) hands each client's log
the trials of that run (:meth:`TrialLog.replay`): the client's first evaluations are answered
from them, in order, without calling the function again, and are logged again as they were.

The trials stay with the party that evaluated them: a client's
:class:`~fedxab.run.outcome.ClientOutcome` carries them (``trials``) in the in-process runner,
in :func:`fedxab.federate` and in ``fedxab run`` (every party is in the caller's process), and
a client agent writes them to its own output directory (``fedxab client --output``); no message
of any transport carries them (:meth:`ClientOutcome.to_dict` leaves them out).

:func:`trials_table` gives them as rows (a list of dicts, one key per column), which
``pandas.DataFrame(rows)`` reads, and :func:`write_trials_csv` as a CSV file, which
``pandas.read_csv`` reads; pandas itself is not needed.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedxab.private_files import write_atomically

__all__ = ["TrialLog", "TrialRecord", "read_trials_csv", "trials_table", "write_trials_csv"]


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """One call of a user's objective: ``number`` (0-based, in call order), the ``params`` it
    was given (by name), the ``value`` it returned and the call's wall time ``wall_s``."""

    number: int
    params: Mapping[str, Any]
    value: float
    wall_s: float

    def row(self) -> dict[str, Any]:
        """The trial as one flat row: ``number``, each parameter, ``value``, ``wall_s``."""
        return {"number": self.number, **self.params, "value": self.value, "wall_s": self.wall_s}


def _params(x: Any) -> dict[str, Any]:
    """The parameters a function was given, by name: a mapping as it is (a typed space's
    decoded parameters), an array as its coordinates ``x0, x1, ...``."""
    if isinstance(x, Mapping):
        return {str(k): v.item() if isinstance(v, np.generic) else v for k, v in x.items()}
    return {f"x{i}": float(v) for i, v in enumerate(np.asarray(x, dtype=np.float64).reshape(-1))}


def _number(value: Any) -> float | None:
    """``value`` as a float, or None where it is not one finite number (the objective's own
    check names the fault; a failed call is not a trial)."""
    if isinstance(value, bool | np.bool_):
        return None
    try:
        number = float(np.asarray(value, dtype=np.float64).reshape(()))
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class TrialLog:
    """The trials of one client's objective, in call order (:attr:`trials`); each new one is
    also given to :attr:`listener`, where set (a live dashboard of the site)."""

    def __init__(self) -> None:
        self.trials: list[TrialRecord] = []
        self.listener: Callable[[TrialRecord], None] | None = None
        self._recorded: deque[TrialRecord] = deque()

    def replay(self, trials: Iterable[TrialRecord]) -> None:
        """Answer the next calls from ``trials`` (a finished run's, oldest first) instead of
        calling the function: :meth:`next_recorded` hands them out."""
        self._recorded = deque(trials)

    @property
    def replaying(self) -> int:
        """Recorded trials not replayed yet."""
        return len(self._recorded)

    def next_recorded(self, params: Any) -> TrialRecord:
        """The next recorded trial, logged again, for a call given ``params``; ValueError
        (saying both) if that trial was made with other parameters."""
        trial = self._recorded.popleft()
        given = _params(params)
        if _as_text(given) != _as_text(trial.params):
            self._recorded.clear()
            raise ValueError(
                f"it evaluates {given} as its trial {trial.number}, where the run it continues "
                f"evaluated {dict(trial.params)}"
            )
        self._append(given, trial.value, trial.wall_s)
        return trial

    def add(self, params: Any, value: Any, wall_s: float) -> None:
        """One call: the function was given ``params`` (a mapping, or a point) and returned
        ``value`` in ``wall_s`` seconds (nothing is kept for a value that is not a number)."""
        number = _number(value)
        if number is not None:
            self._append(_params(params), number, wall_s)

    def _append(self, params: Mapping[str, Any], value: float, wall_s: float) -> None:
        trial = TrialRecord(len(self.trials), params, value, wall_s)
        self.trials.append(trial)
        if self.listener is not None:
            self.listener(trial)

    def add_batch(self, params: Sequence[Any], values: Any, wall_s: float) -> None:
        """One vectorised call on the points ``params``, which returned ``values`` (one per
        point, else nothing is kept) in ``wall_s`` seconds in all."""
        try:
            flat = np.asarray(values, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            return
        if flat.shape[0] == len(params):
            for p, v in zip(params, flat, strict=True):
                self.add(p, v, wall_s / len(params))


def _as_text(params: Mapping[str, Any]) -> dict[str, str]:
    """Parameters as a CSV file writes them (``str`` of each value: exact for a float), so that
    trials read back from one (:func:`read_trials_csv`) compare with the parameters given."""
    return {str(k): str(v) for k, v in params.items()}


def trials_table(trials: Iterable[TrialRecord], client: int | None = None) -> list[dict[str, Any]]:
    """The trials as rows (one dict per trial: ``client`` if given, ``number``, the
    parameters, ``value``, ``wall_s``): ``pandas.DataFrame(trials_table(...))``."""
    rows = []
    for trial in trials:
        row = trial.row()
        rows.append(row if client is None else {"client": client, **row})
    return rows


def write_trials_csv(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``rows`` (:func:`trials_table`) as a CSV file at ``path``, owner-only (a site's
    trials are private to it); its columns are the union of the rows' keys, in first-seen
    order. The path."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(columns))
    writer.writeheader()
    writer.writerows(rows)
    target = Path(path)
    write_atomically(target, text.getvalue().encode("utf-8"))
    return target


def read_trials_csv(path: str | Path) -> list[TrialRecord]:
    """The trials of a file :func:`write_trials_csv` wrote (one client's), parameters as their
    text (what :meth:`TrialLog.next_recorded` compares); ValueError naming the file and the
    row if it is not such a file."""
    target = Path(path)
    rows = list(csv.DictReader(io.StringIO(target.read_text(encoding="utf-8"), newline="")))
    trials = []
    for i, row in enumerate(rows):
        try:
            row.pop("client", None)  # (the column trials_table adds for the client's id)
            number, value, wall_s = int(row.pop("number")), row.pop("value"), row.pop("wall_s")
            trials.append(TrialRecord(number, dict(row), float(value), float(wall_s)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{target}: row {i + 1} is not a trial ({exc})") from None
    return trials
