"""The progress display of ``fedxab run``, ``server`` and ``reproduce``.

Two forms (``--progress``, :class:`ProgressMode`):

- :class:`ProgressBars`, on a terminal: per task a line redrawn in place with the description,
  the bar, the done/total count and the elapsed and remaining times, laid out for the terminal's
  width at each redraw so that the count and the times always show whole (rich's own columns
  ellipsize them away at 80 columns). The details (:class:`Status`) go on the same line when
  they fit beside the bar, else on a second line under it.
- :class:`ProgressLines`, for logs and pipes: a plain, self-contained line per tenth of a task
  (and at least every :data:`HEARTBEAT_S` seconds), never a redraw or an escape code.

A task carries two fields besides rich's own: ``count`` (the done/total text, e.g.
``"1,200/3,000 rounds"``; the callers know the unit) and ``status`` (a :class:`Status`).
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.progress import Progress, Task, TaskID
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

__all__ = [
    "HEARTBEAT_S",
    "ProgressBars",
    "ProgressLines",
    "ProgressMode",
    "Status",
    "make_progress",
]

BAR_WIDTH = (10, 40)
"""The bar's narrowest and widest width: narrower it says little, wider it only takes room."""
DESCRIPTION_MIN = 12
"""A description is shortened (with an ellipsis) down to this width before the bar shrinks."""
HEARTBEAT_S = 60.0
"""Line mode: a line at least this often while a task moves, even between two tenths."""
SEPARATOR = " · "


class ProgressMode(enum.StrEnum):
    """``--progress``: ``auto`` is ``bar`` on an interactive terminal, else ``lines``."""

    auto = "auto"
    bar = "bar"
    lines = "lines"
    none = "none"


@dataclass(frozen=True)
class Status:
    """The details of a run's progress, each where known: regret so far, phase, evaluations
    (over all clients) and max epsilon (over clients)."""

    regret: float | None = None
    phase: int | None = None
    evaluations: int | None = None
    epsilon: float | None = None

    DROP_ORDER = ("evaluations", "phase", "epsilon", "regret")
    """Least important first: the fields :meth:`text` leaves out when short of room. The
    evaluations follow from the count; the regret is what the run is about."""

    def _parts(self) -> dict[str, str]:
        parts = {}
        if self.regret is not None and math.isfinite(self.regret):
            parts["regret"] = f"regret {self.regret:.3f}"
        if self.phase is not None:
            parts["phase"] = f"phase {self.phase}"
        if self.evaluations is not None:
            parts["evaluations"] = f"{self.evaluations:,} evals"
        if self.epsilon is not None:
            parts["epsilon"] = f"ε {self.epsilon:.3f}"
        return parts

    def text(self, width: int | None = None) -> str:
        """The known details joined by " · "; within ``width`` cells if given, by leaving out
        fields in :attr:`DROP_ORDER` (down to the last one, however long)."""
        parts = self._parts()
        for name in self.DROP_ORDER:
            if width is None or cell_len(SEPARATOR.join(parts.values())) <= width:
                break
            if len(parts) > 1:
                parts.pop(name, None)
        return SEPARATOR.join(parts.values())


def _clock(seconds: float | None) -> str:
    return "-:--:--" if seconds is None else str(timedelta(seconds=int(seconds)))


def _times(task: Task) -> str:
    """``"0:01:02 elapsed, 0:00:40 left"`` (``-:--:--`` until rich can estimate the rest)."""
    elapsed = task.finished_time if task.finished else task.elapsed
    return f"{_clock(elapsed)} elapsed, {_clock(task.time_remaining)} left"


class _Bars:
    """The bars of some tasks, laid out for the width the console gives at render time.

    Every task gets the same column widths, so that bars and counts line up. Room goes first
    to the count and the times (never cut), then to the description (down to
    :data:`DESCRIPTION_MIN`) and the bar (down to its minimum); the details share the line only
    if they fit whole, else they go on a line of their own under each bar."""

    def __init__(self, tasks: list[Task]) -> None:
        self.tasks = tasks

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self.tasks:
            return
        width = options.max_width
        bar_min, bar_max = BAR_WIDTH
        counts = [task.fields["count"] for task in self.tasks]
        times = [_times(task) for task in self.tasks]
        statuses = [task.fields["status"].text() for task in self.tasks]
        count_w = max(map(cell_len, counts))
        times_w = max(map(cell_len, times))
        status_w = max(map(cell_len, statuses))
        description_w = max(cell_len(task.description) for task in self.tasks)

        fixed = count_w + times_w + 3  # and a space after the description, the bar, the count
        inline_w = cell_len(SEPARATOR) + status_w  # after the times: " · regret ..."
        inline = status_w > 0 and description_w + bar_min + fixed + inline_w <= width
        room = width - fixed - (inline_w if inline else 0)  # description and bar
        description_w = min(description_w, max(DESCRIPTION_MIN, room - bar_min))
        bar_w = max(1, min(bar_max, room - description_w))

        for task, count, clock, status in zip(self.tasks, counts, times, statuses, strict=True):
            row = Table.grid(padding=(0, 1))
            row.add_column(width=description_w, no_wrap=True, overflow="ellipsis")
            row.add_column(width=bar_w, no_wrap=True)
            row.add_column(width=count_w, justify="right", no_wrap=True)
            row.add_column(width=times_w, no_wrap=True)
            cells = [
                Text(task.description, style="bold"),
                ProgressBar(task.total, task.completed, width=bar_w),
                count,
                clock,
            ]
            if inline:
                row.add_column(no_wrap=True)
                cells.append(f"· {status}" if status else "")
            row.add_row(*cells)
            yield row
            if status and not inline:
                below = task.fields["status"].text(width - 2)
                yield Text(f"  {below}", no_wrap=True, overflow="ellipsis")


class ProgressBars(Progress):
    """The terminal display: see :class:`_Bars` (and :func:`make_progress`)."""

    def get_renderables(self) -> Iterable[RenderableType]:
        yield _Bars([task for task in self.tasks if task.visible])


class ProgressLines(Progress):
    """The line mode, for CI logs, pipes and ``| tee``: rich's task bookkeeping (times,
    estimates) without its live display; a plain line when a task starts, at each tenth of it
    (the last at 100%) and at least every ``heartbeat`` seconds while it moves, e.g.

    ``run 1/3 (seed 0): 600/3,000 rounds (20%), 0:00:04 elapsed, 0:00:16 left, regret 3.274``
    """

    def __init__(self, console: Console, *, heartbeat: float = HEARTBEAT_S, get_time=None) -> None:
        super().__init__(console=console, disable=True, get_time=get_time)
        self.heartbeat = heartbeat
        self._printed: dict[TaskID, tuple[int, float]] = {}  # the last line's tenth and time
        self._printing = threading.Lock()  # the runners may report from other threads

    def add_task(self, description: str, *args, **kwargs) -> TaskID:
        task_id = super().add_task(description, *args, **kwargs)
        self._print(task_id)
        return task_id

    def update(self, task_id: TaskID, **kwargs) -> None:
        super().update(task_id, **kwargs)
        self._print(task_id)

    def _print(self, task_id: TaskID) -> None:
        """Print the task's line if it reached a new tenth or the heartbeat is due."""
        with self._printing:
            task = next(task for task in self.tasks if task.id == task_id)
            tenth = int(task.percentage // 10)
            now = self.get_time()
            last = self._printed.get(task_id)
            if last is not None and tenth <= last[0] and now - last[1] < self.heartbeat:
                return
            self._printed[task_id] = (tenth, now)
            self.console.print(_line(task), markup=False, highlight=False, soft_wrap=True)


def _line(task: Task) -> str:
    """A task's progress as one self-contained line (see :class:`ProgressLines`)."""
    parts = [
        f"{task.description}: {task.fields['count']} ({int(task.percentage)}%)",
        _times(task),
        task.fields["status"].text(),
    ]
    return ", ".join(part for part in parts if part)


def make_progress(console: Console, mode: ProgressMode) -> Progress:
    """The progress display of ``mode`` on ``console`` (``none``: one that shows nothing)."""
    if mode is ProgressMode.auto:
        mode = ProgressMode.bar if console.is_interactive else ProgressMode.lines
    if mode is ProgressMode.lines:
        return ProgressLines(console)
    return ProgressBars(console=console, disable=mode is ProgressMode.none)
