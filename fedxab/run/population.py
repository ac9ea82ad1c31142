"""Who is in a run, phase by phase: the one record the metrics, the dashboard and the server's
log read (issue 37 item 6, "seen live").

A run is a population: clients join it, leave it, are asked in a phase or not, and report or
not. The server's session (:class:`~fedxab.run.session.ServerSession`) keeps a
:class:`Population`, which its drivers tell who joined and who left
(:meth:`Population.join`, :meth:`Population.leave`: a ``join`` or ``leave`` control message,
or every client at the start of an in-process run); a client that withdrew (its privacy budget
exhausted) has left too, and under elastic membership (:mod:`fedxab.run.membership`) so has a
member the next phase opens without (silent past ``[agents] liveness_s``), while one it opens
with that was not in the run before has joined. When a phase closes, the session turns what
happened since the last close into one :class:`PhasePopulation`:

- ``joined``: the clients that joined since the previous phase closed (the first phase: since
  the start);
- ``left``: those that left the run before its final answer, in that time (a client that
  leaves after the final answer has finished, not left);
- ``asked``: the clients asked to report in the phase (every one in the run, or the sample of
  ``[federation] participation``);
- ``reported``: the clients whose accepted reports closed the phase.

Observers get it through :meth:`~fedxab.run.observe.RunObserver.on_population`; the server
names the clients that joined and left in one log line at :data:`NOTICE` level, which
``fedxab server`` shows at its default verbosity (:meth:`PhasePopulation.line`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["NAMES_SHOWN", "NOTICE", "PhasePopulation", "Population", "id_ranges"]

log = logging.getLogger(__name__)

NOTICE = 25
"""A log level between INFO and WARNING (syslog's "normal but significant"): who joined and
who left a run. ``fedxab server`` shows it by default, other commands with ``-v``."""
logging.addLevelName(NOTICE, "NOTICE")

NAMES_SHOWN = 20
"""Most runs of client ids a log line or the dashboard names (then: how many more)."""


def id_ranges(ids: Iterable[int], shown: int = NAMES_SHOWN) -> str:
    """Client ids as runs, ``"0-3, 7, 9-11"`` (the form of ``--client-id``), the first
    ``shown`` runs then ``"and N more"`` (N clients)."""
    runs: list[list[int]] = []
    for m in sorted(set(ids)):
        if runs and m == runs[-1][1] + 1:
            runs[-1][1] = m
        else:
            runs.append([m, m])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:shown])
    rest = sum(b - a + 1 for a, b in runs[shown:])
    return f"{text} and {rest} more" if rest else text


@dataclass(frozen=True)
class PhasePopulation:
    """The population of one closed phase (module docstring): the ids that ``joined`` and
    ``left`` since the previous close, in increasing order, and how many clients were
    ``asked`` and ``reported``."""

    phase: int
    joined: tuple[int, ...]
    left: tuple[int, ...]
    asked: int
    reported: int

    def line(self, run_id: str) -> str:
        """The server's log line naming who joined and who left (empty: nobody did)."""
        parts = [
            f"{len(ids)} {what} ({id_ranges(ids)})"
            for what, ids in (("joined", self.joined), ("left", self.left))
            if ids
        ]
        if not parts:
            return ""
        return (
            f"run {run_id}: phase {self.phase}: {'; '.join(parts)}; "
            f"{self.reported} of {self.asked} asked reported"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "phase": self.phase,
            "joined": list(self.joined),
            "left": list(self.left),
            "asked": self.asked,
            "reported": self.reported,
        }


class Population:
    """Who joined and left the run so far, and the record of each closed phase."""

    def __init__(self) -> None:
        self.members: set[int] = set()
        """The clients in the run now: joined and not left since."""
        self.gone: set[int] = set()
        """The clients that left and have not joined again."""
        self.records: list[PhasePopulation] = []
        """One record per phase closed by this process (not those replayed from a checkpoint)."""
        self._joined: set[int] = set()
        self._left: set[int] = set()

    def join(self, m: int, *, news: bool = True) -> bool:
        """Client ``m`` joined (after leaving: it rejoined); whether it was news.
        ``news=False``: a join the previous execution of a resumed server had already seen
        (the control topic is read again from its start), which the next record does not name."""
        if m in self.members:
            return False
        self.members.add(m)
        self.gone.discard(m)
        if news:
            self._joined.add(m)
        return True

    def leave(self, m: int, *, news: bool = True) -> bool:
        """Client ``m`` left the run (a leave before the final answer, or it withdrew);
        whether it was news."""
        if m in self.gone:
            return False
        self.gone.add(m)
        self.members.discard(m)
        if news:
            self._left.add(m)
        return True

    def close(self, phase: int, asked: int, reported: int, run_id: str) -> PhasePopulation:
        """Phase ``phase`` closed with ``asked`` clients asked and ``reported`` reports
        accepted: its record (kept in :attr:`records`), with who joined and left since the
        last close, named in one log line."""
        record = PhasePopulation(
            phase=phase,
            joined=tuple(sorted(self._joined)),
            left=tuple(sorted(self._left)),
            asked=asked,
            reported=reported,
        )
        self._joined, self._left = set(), set()
        self.records.append(record)
        line = record.line(run_id)
        if line:
            log.log(NOTICE, "%s", line)
        return record
