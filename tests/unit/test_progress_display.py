"""The progress display (fedxab.monitoring.progress): the bars keep the count, the times and the
details whole within the terminal's width; the line mode prints plain lines at a sane rate."""

from __future__ import annotations

import io
import math
import re
from datetime import timedelta

import pytest
from rich.cells import cell_len
from rich.console import Console

from fedxab.monitoring.progress import (
    HEARTBEAT_S,
    ProgressBars,
    ProgressLines,
    ProgressMode,
    Status,
    make_progress,
)

BUDGET = 10_000
STATUS = Status(regret=1234.56789, phase=7, evaluations=73_000, epsilon=0.71828)


class Clock:
    """A settable clock for rich's elapsed and remaining times."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _console(width: int) -> Console:
    return Console(file=io.StringIO(), width=width, force_terminal=True, record=True)


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=int(seconds)))


def _rendered(progress: ProgressBars, console: Console) -> list[str]:
    console.print(progress.get_renderable())
    return console.export_text().splitlines()


def _two_runs(console: Console, clock: Clock, description: str = "run 1/2 (seed 0)"):
    """A run at 90% and one just started, as the CLI's callbacks report them: two updates (at
    t = 90 s and 100 s) give rich a speed to estimate the remaining time from. Returns the
    progress and the expected count, elapsed and remaining texts of the first run."""
    progress = ProgressBars(console=console, get_time=clock)
    first = progress.add_task(description, total=BUDGET, count="", status=Status())
    (t1, d1), (t2, d2) = (90.0, 8_000), (100.0, 9_000)
    for now, done in ((t1, d1), (t2, d2)):
        clock.now = now
        progress.update(first, completed=done, count=f"{done:,}/{BUDGET:,} rounds", status=STATUS)
    progress.add_task(
        "run 2/2 (seed 1)", total=BUDGET, count=f"0/{BUDGET:,} rounds", status=Status()
    )
    remaining = math.ceil((BUDGET - d2) / ((d2 - d1) / (t2 - t1)))
    return (
        progress,
        f"{d2:,}/{BUDGET:,} rounds",
        f"{_clock(t2)} elapsed",
        f"{_clock(remaining)} left",
    )


def _status_values(status: Status) -> list[str]:
    return [
        f"regret {status.regret:.3f}",
        f"phase {status.phase}",
        f"{status.evaluations:,} evals",
        f"ε {status.epsilon:.3f}",
    ]


@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_the_bars_keep_the_count_the_times_and_the_details_within_the_width(width):
    console, clock = _console(width), Clock()
    progress, count, elapsed, left = _two_runs(console, clock)
    lines = _rendered(progress, console)

    assert all(cell_len(line) <= width for line in lines), lines
    bar = next(line for line in lines if line.startswith("run 1/2 (seed 0) "))
    assert count in bar and elapsed in bar and left in bar
    assert "━" in bar  # the bar itself
    text = "\n".join(lines)
    assert all(value in text for value in _status_values(STATUS)), lines
    assert "…" not in text  # nothing cut


def test_the_details_share_the_bars_line_when_they_fit_else_go_under_it():
    for width, inline in ((80, False), (200, True)):
        console = _console(width)
        progress, *_ = _two_runs(console, Clock())
        lines = _rendered(progress, console)
        i = next(i for i, line in enumerate(lines) if line.startswith("run 1/2"))
        details = STATUS.text()
        assert (details in lines[i]) is inline
        assert (lines[i + 1].strip() == details) is not inline


def test_a_long_description_is_shortened_not_the_count_or_the_times():
    console = _console(80)
    long = "DP-FedPNE (epsilon 0.5, sequential composition), seed 10/10"
    progress, count, elapsed, left = _two_runs(console, Clock(), long)
    lines = _rendered(progress, console)
    assert all(cell_len(line) <= 80 for line in lines), lines
    (bar,) = [line for line in lines if count in line]
    assert elapsed in bar and left in bar
    assert "…" in bar and long not in bar


def test_status_drops_the_least_important_details_first():
    full = STATUS.text()
    evals, phase, eps, regret = (
        f"{STATUS.evaluations:,} evals",
        f"phase {STATUS.phase}",
        f"ε {STATUS.epsilon:.3f}",
        f"regret {STATUS.regret:.3f}",
    )
    assert full == f"{regret} · {phase} · {evals} · {eps}"
    assert STATUS.text(len(full)) == full
    assert STATUS.text(len(full) - 1) == f"{regret} · {phase} · {eps}"
    assert STATUS.text(len(f"{regret} · {phase} · {eps}") - 1) == f"{regret} · {eps}"
    assert STATUS.text(len(f"{regret} · {eps}") - 1) == regret
    assert STATUS.text(1) == regret  # the regret stays, however narrow
    assert Status().text() == "" and Status(regret=float("nan")).text() == ""


def _line_mode(total: int, steps: list[tuple[float, int]]) -> str:
    """Lines printed by a ProgressLines task fed ``(time, done)`` updates (on a console that
    is a terminal: the line mode must not style or redraw even there)."""
    console, clock = _console(80), Clock()
    progress = ProgressLines(console, get_time=clock)
    with progress:
        task = progress.add_task(
            "run 1/1 (seed 3)", total=total, count=f"0/{total:,} evals", status=Status()
        )
        for now, done in steps:
            clock.now = now
            status = Status(regret=done / 7, phase=done // 100)
            progress.update(task, completed=done, count=f"{done:,}/{total:,} evals", status=status)
    return console.file.getvalue()


def test_the_line_mode_prints_a_plain_line_per_tenth_and_the_final_one():
    total = 1_000
    steps = [(0.1 * k, 10 * k) for k in range(1, 101)]  # 100 updates over 10 s
    out = _line_mode(total, steps)

    assert "\x1b" not in out and "\r" not in out
    lines = out.splitlines()
    assert [int(re.search(r"\((\d+)%\)", line)[1]) for line in lines] == list(range(0, 101, 10))
    for line in lines:
        assert line.startswith("run 1/1 (seed 3): ") and " elapsed" in line
    final = lines[-1]
    assert f"{total:,}/{total:,} evals (100%)" in final
    assert f"{_clock(steps[-1][0])} elapsed, 0:00:00 left" in final
    assert f"regret {total / 7:.3f} · phase {total // 100}" in final


def test_the_line_mode_prints_a_heartbeat_between_tenths():
    # 1%, 2%, 3%, 4% of a run, the last two HEARTBEAT_S apart from the line before
    steps = [(1.0, 10), (2.0, 20), (1.0 + HEARTBEAT_S, 30), (1.0 + 2 * HEARTBEAT_S, 40)]
    lines = _line_mode(1_000, steps).splitlines()
    assert [re.search(r": ([\d,]+)/", line)[1] for line in lines] == ["0", "30", "40"]


def test_auto_mode_is_the_bar_on_a_terminal_and_lines_elsewhere():
    terminal = Console(file=io.StringIO(), force_terminal=True, force_interactive=True)
    pipe = Console(file=io.StringIO(), force_terminal=False)
    assert type(make_progress(terminal, ProgressMode.auto)) is ProgressBars
    assert type(make_progress(pipe, ProgressMode.auto)) is ProgressLines
    assert type(make_progress(pipe, ProgressMode.bar)) is ProgressBars
    assert type(make_progress(terminal, ProgressMode.lines)) is ProgressLines
    assert make_progress(terminal, ProgressMode.none).disable
