"""The trials panel of a dashboard: every call of a hosted client's user objective, live.

A :class:`TrialFeed` is fed each :class:`~fedxab.objectives.history.TrialRecord` as the call
returns (:meth:`~fedxab.run.observe.RunObserver.on_trial`, from the party that evaluated it:
a ``fedxab client`` agent for its own clients, ``fedxab run`` for all of them) and keeps, per
client, its trial count, its best trial so far in the objective's direction and its trials.
What it serves stays small whatever the run's size: the totals, the best trial over all
clients, the :data:`RECENT` newest trials and the best of at most :data:`CLIENTS_SHOWN`
clients; one client's trials (at most :data:`ROWS_SHOWN`, the newest) are fetched on demand
(:meth:`TrialFeed.client`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

from fedxab.objectives.history import TrialRecord

__all__ = ["CLIENTS_SHOWN", "RECENT", "TrialFeed"]

RECENT = 50
"""Newest trials (over all hosted clients) the panel lists."""
CLIENTS_SHOWN = 20
"""Clients whose best trial the panel lists (those of lowest id; ``clients`` counts all)."""
ROWS_SHOWN = 1000
"""Newest trials of one client its detail lists."""


def _row(client: int, trial: TrialRecord, at: float | None) -> dict[str, Any]:
    """One trial as the page shows it: parameters by name, in the user's units."""
    return {
        "client": client,
        "number": trial.number,
        "params": dict(trial.params),
        "value": trial.value,
        "wall_s": trial.wall_s,
        "at": at,
    }


class TrialFeed:
    """The trials of the clients one party hosts; ``maximize``: the objective's direction
    (each trial's value is in the user's units and direction)."""

    def __init__(self, maximize: bool = True) -> None:
        self.maximize = maximize
        self.trials: dict[int, list[tuple[TrialRecord, float | None]]] = {}
        self.best: dict[int, tuple[TrialRecord, float | None]] = {}
        self.recent: collections.deque[tuple[int, TrialRecord, float | None]] = collections.deque(
            maxlen=RECENT
        )
        self.count = 0

    def _better(self, a: TrialRecord, b: TrialRecord) -> bool:
        return a.value > b.value if self.maximize else a.value < b.value

    def add(self, client: int, trial: TrialRecord, at: float | None) -> None:
        """Client ``client``'s new trial, seen at unix time ``at`` (None: not seen live)."""
        entry = (trial, at)
        self.trials.setdefault(client, []).append(entry)
        best = self.best.get(client)
        if best is None or self._better(trial, best[0]):
            self.best[client] = entry
        self.recent.append((client, *entry))
        self.count += 1

    def replace(self, trials: Iterable[tuple[int, Iterable[TrialRecord]]]) -> None:
        """The feed becomes ``(client, trials)``'s (a finished run's record), keeping the times
        of the trials it already had."""
        seen = {(m, t.number): at for m, rows in self.trials.items() for t, at in rows}
        self.trials, self.best, self.count = {}, {}, 0
        self.recent.clear()
        for m, rows in trials:
            for trial in rows:
                self.add(m, trial, seen.get((m, trial.number)))

    def to_json(self) -> dict[str, Any] | None:
        """The panel (None without a trial)."""
        if not self.count:
            return None
        overall = max(
            ((m, *entry) for m, entry in self.best.items()),
            key=lambda e: e[1].value if self.maximize else -e[1].value,
        )
        shown = sorted(self.best)[:CLIENTS_SHOWN]
        return {
            "count": self.count,
            "clients": len(self.trials),
            "direction": "maximize" if self.maximize else "minimize",
            "best": _row(*overall),
            "per_client": [{"count": len(self.trials[m]), **_row(m, *self.best[m])} for m in shown],
            "recent": [_row(*entry) for entry in self.recent],
        }

    def client(self, m: int) -> dict[str, Any] | None:
        """Client ``m``'s trials: count, best and the :data:`ROWS_SHOWN` newest (None without
        any)."""
        rows = self.trials.get(m)
        if not rows:
            return None
        return {
            "count": len(rows),
            "best": _row(m, *self.best[m]),
            "rows": [_row(m, *entry) for entry in rows[-ROWS_SHOWN:]],
        }
