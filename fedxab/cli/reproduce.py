"""``fedxab reproduce``: a figure of the federated papers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fedxab.cli.common import errors_as_exit_code, make_console
from fedxab.cli.observe import progress_display
from fedxab.cli.options import ProgressOption
from fedxab.monitoring.progress import ProgressMode, Status
from fedxab.reproduce.plan import PilotTiming, Plan


def _duration(seconds: float) -> str:
    """A wall time for `fedxab reproduce`'s estimate and summary."""
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _reproduce_list_lines() -> list[str]:
    """The `fedxab reproduce --list` lines: name, figure, one-line description."""
    from fedxab.reproduce import EXPERIMENTS

    width = max(len(n) for n in EXPERIMENTS)
    fig_width = max(len(e.figure) for e in EXPERIMENTS.values())
    return [
        f"{e.name:<{width}}  {e.figure:<{fig_width}}  {e.description}" for e in EXPERIMENTS.values()
    ]


def _reproduce_summary(plan, results) -> Table:
    """The final value of each entry of a reproduction, with its runs, rounds and time."""
    from fedxab.reproduce.experiments import metric_label

    metric = plan.experiment.metric
    table = Table(
        title=f"{plan.experiment.name}: final {metric_label(plan.experiment)} "
        "(mean ± std over seeds)",
        title_justify="left",
    )
    table.add_column("algorithm")
    table.add_column("M", justify="right")
    table.add_column("runs", justify="right")
    table.add_column("final", justify="right")
    table.add_column("comm. rounds", justify="right")
    table.add_column("time (s)", justify="right")
    for res in results:
        mean, std = res.final(metric)
        comm = res.results.communication or {}
        rounds = comm.get("rounds")
        digits = 4 if metric in ("simple_regret", "local_simple_regret") else 1
        table.add_row(
            res.planned.entry.label,
            str(res.planned.config.federation.clients),
            str(len(res.results.runs)),
            f"{mean:.{digits}f} ± {std:.{digits}f}",
            "-" if rounds is None else f"{rounds:,.0f}",
            f"{sum(r.wall_time_s for r in res.results.runs):.1f}",
        )
    return table


def _privacy_utility_table(table, plan) -> Table:
    """The privacy-utility table of a DP-FTS-DE reproduction, with its caption."""
    from fedxab.reproduce.tables import privacy_utility_caption, privacy_utility_rows

    header, rows = privacy_utility_rows(table)
    out = Table(
        title=f"{plan.experiment.name}: privacy-utility table",
        title_justify="left",
        caption=privacy_utility_caption(table, plan),
        caption_justify="left",
    )
    for i, name in enumerate(header):
        out.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        out.add_row(*row)
    return out


def _print_privacy_utility(console: Console, plan, results, *, quiet: bool = False) -> None:
    """Write the privacy-utility table's files; print the table (unless ``quiet``) and where."""
    from fedxab.reproduce import write_privacy_utility

    table, json_path, md_path = write_privacy_utility(plan, results)
    if not quiet:
        console.print(_privacy_utility_table(table, plan))
    console.print(
        f"privacy-utility table: {md_path} ({json_path.name})", soft_wrap=True, markup=False
    )


def _reproduce_command(
    console: Console,
    name: str | None,
    *,
    list_only: bool = False,
    seeds: int | None = None,
    budget: int | None = None,
    clients: int | None = None,
    output: Path | None = None,
    figure: Path | None = None,
    plot_only: bool = False,
    quiet: bool = False,
    progress_mode: ProgressMode = ProgressMode.auto,
    jobs: int = 1,
    workers: int | None = None,
) -> Path | None:
    """The body of `fedxab reproduce` (printing to ``console``); returns the figure's path."""
    from fedxab.reproduce import (
        EXPERIMENTS,
        ReproduceError,
        load_plan_results,
        make_plan,
        plot_plan,
    )

    if list_only:
        for line in _reproduce_list_lines():
            console.print(line, soft_wrap=True, markup=False, highlight=False)
        return None
    if name is None:
        raise ReproduceError(
            f"give an experiment NAME (or --list); allowed: {', '.join(EXPERIMENTS)}"
        )
    plan = make_plan(
        name,
        seeds=seeds,
        budget=budget,
        clients=clients,
        output=output,
        figure=figure,
        validate=not plot_only,
        workers=workers,
    )
    if plot_only:
        results = load_plan_results(plan)
        path = plot_plan(plan, results)
        if plan.experiment.private:
            _print_privacy_utility(console, plan, results, quiet=quiet)
        console.print(f"figure: {path}", soft_wrap=True, markup=False)
        return path
    _print_plan(console, plan)
    timings, estimate = _pilot(console, plan, quiet=quiet, jobs=jobs)
    return _run_plan(console, plan, timings, estimate, quiet, progress_mode, jobs)


def _print_plan(console: Console, plan: Plan) -> None:
    """The first line of a reproduction: its entries, seeds, clients and budget."""
    exp = plan.experiment
    m = "m = " + ", ".join(str(pe.config.federation.clients) for pe in plan.entries)
    who = m if exp.fixed_clients else f"M = {plan.entries[0].config.federation.clients} clients"
    console.print(
        f"[bold]fedxab reproduce {escape(exp.name)}[/bold] ({escape(exp.figure)}): "
        f"{len(plan.entries)} {'curves' if exp.fixed_clients else 'algorithms'} x "
        f"{plan.seeds} seeds, {who}, "
        + (
            f"{plan.budget_text} per client"
            if exp.initial_points
            else f"T = {plan.budget:,} evaluations per "
            f"{'player' if exp.fixed_clients else 'client'}"
        ),
        soft_wrap=True,
    )


def _pilot(
    console: Console, plan: Plan, *, quiet: bool, jobs: int
) -> tuple[dict[str, PilotTiming], float]:
    """Time the pilot runs (:func:`~fedxab.reproduce.plan.pilot`; a status line says which,
    unless ``quiet``) and print the estimate made from them; return the timings and the
    estimated wall time (:func:`~fedxab.reproduce.plan.estimated_time`)."""
    import time

    from fedxab.reproduce import pilot
    from fedxab.reproduce.plan import estimated_time

    t_pilot = time.perf_counter()
    if quiet:
        timings = pilot(plan)
    else:
        with console.status("timing a pilot run of each algorithm ...") as status:
            timings = pilot(
                plan, lambda pe: status.update(f"timing a pilot run of {pe.entry.label} ...")
            )
    pilot_s = time.perf_counter() - t_pilot
    estimate = estimated_time(plan, timings, jobs)
    if not quiet:
        console.print(
            f"estimated time: about {_duration(estimate)} (from timed pilot runs: "
            f"{_pilot_method(plan, timings, pilot_s)})",
            soft_wrap=True,
        )
        console.print(
            "  per run: "
            + ", ".join(
                f"{pe.entry.label} ~{_duration(timings[pe.entry.key].estimate_s)}"
                for pe in plan.entries
            ),
            soft_wrap=True,
            markup=False,
        )
    return timings, estimate


def _pilot_method(plan: Plan, timings: dict[str, PilotTiming], pilot_s: float) -> str:
    """How the estimate was made: which pilot runs, how long they took, how they scale."""
    from fedxab.reproduce.plan import pilot_budget

    large = pilot_budget(plan.budget)
    if plan.experiment.pilot_clients is not None:
        m = plan.entries[0].config.federation.clients
        small, large = next(iter(timings.values())).clients or (m, m)
        names = sorted({pe.config.algorithm.name for pe in plan.entries})
        pilots = f"{small} and {large}" if small < large else f"{large}"
        return (
            f"1 seed of each of {', '.join(names)} with {pilots} of the {m} clients at the "
            f"full budget, {_duration(pilot_s)}, extrapolated to {m} clients, "
            f"x {plan.seeds} seeds"
        )
    return (
        f"1 seed of each algorithm at T = {max(1, large // 4):,} and {large:,}, "
        f"{_duration(pilot_s)}, extrapolated to T = {plan.budget:,} with the measured "
        f"growth, x {plan.seeds} seeds"
    )


def _run_plan(
    console: Console,
    plan: Plan,
    timings: dict[str, PilotTiming],
    estimate: float,
    quiet: bool,
    progress_mode: ProgressMode,
    jobs: int,
) -> Path:
    """Run the plan with a progress display weighted by the pilots' estimates
    (:class:`~fedxab.reproduce.plan.PlanProgress`), draw the figure, write the manifest and
    print the summary and where everything is; return the figure's path."""
    import time

    from fedxab.reproduce import plot_plan, run_plan
    from fedxab.reproduce.plan import PlanProgress
    from fedxab.reproduce.tables import write_manifest

    exp = plan.experiment
    progress = progress_display(console, quiet, progress_mode)
    share = PlanProgress(plan, timings)
    task = progress.add_task(
        exp.name, total=share.total, count=f"0/{plan.runs} runs", status=Status()
    )

    def on_progress(pe, k: int, done: int, horizon: int, **details) -> None:
        completed, finished = share.at(pe.entry.key, k, done, horizon)
        progress.update(
            task,
            completed=completed,
            description=f"{pe.entry.label}, seed {k + 1}/{plan.seeds}",
            count=f"{finished}/{plan.runs} runs",
            status=Status(**details),
        )

    on_progress.details = True  # type: ignore[attr-defined]

    t0 = time.perf_counter()
    with progress:
        results = run_plan(plan, on_progress, jobs=jobs)
        progress.update(task, completed=share.total, description=exp.name)
    wall = time.perf_counter() - t0
    path = plot_plan(plan, results)
    write_manifest(plan, results, estimate_s=estimate, wall_time_s=wall, figure=path)
    if not quiet:
        console.print(_reproduce_summary(plan, results))
    if exp.private:
        _print_privacy_utility(console, plan, results, quiet=quiet)
    if not quiet:
        console.print(f"took {_duration(wall)} (estimated {_duration(estimate)})", soft_wrap=True)
    for res in results:
        console.print(f"results: {res.planned.results_path}", soft_wrap=True, markup=False)
    console.print(f"figure: {path}", soft_wrap=True, markup=False)
    return path


_NameArgument = Annotated[
    str | None,
    typer.Argument(help="Experiment (figure) name; see --list.", show_default=False),
]
_ListOption = Annotated[
    bool, typer.Option("--list", help="List the experiments with a description and exit.")
]
_SeedsOption = Annotated[
    int | None,
    typer.Option(
        help="Runs per algorithm (seeds 0..N-1); default: the experiment's own (10, 5 for "
        "dpftsde-landmine).",
        show_default=False,
    ),
]
_BudgetOption = Annotated[
    int | None,
    typer.Option(help="Override T, evaluations per client (per player).", show_default=False),
]
_ClientsOption = Annotated[
    int | None, typer.Option(help="Override M, the number of clients.", show_default=False)
]
_OutputOption = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Results directory (default: results/reproduce/NAME)."),
]
_FigureOption = Annotated[Path | None, typer.Option(help="Figure file (default: OUTPUT/NAME.png).")]
_PlotOnlyOption = Annotated[
    bool, typer.Option("--plot-only", help="Redraw the figure from OUTPUT's results.")
]
_QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="No estimate, progress bar or table.")
]
_JobsOption = Annotated[
    int,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        help="Run this many algorithms at once, each in its own process (same results; "
        "the progress bar then moves when an algorithm is done).",
    ),
]
_WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-w",
        min=1,
        help="Host each run's clients in this many processes ([run] workers; same "
        "results). Uses jobs x workers cores.",
    ),
]


def reproduce(
    name: _NameArgument = None,
    list_: _ListOption = False,
    seeds: _SeedsOption = None,
    budget: _BudgetOption = None,
    clients: _ClientsOption = None,
    output: _OutputOption = None,
    figure: _FigureOption = None,
    plot_only: _PlotOnlyOption = False,
    quiet: _QuietOption = False,
    progress_mode: ProgressOption = ProgressMode.auto,
    jobs: _JobsOption = 1,
    workers: _WorkersOption = None,
) -> None:
    """Reproduce a figure of the federated papers: every algorithm over N seeds, results.json
    per algorithm and a PNG with mean ± 1 std bands (see fedxab.reproduce)."""
    with errors_as_exit_code():
        _reproduce_command(
            make_console(),
            name,
            list_only=list_,
            seeds=seeds,
            budget=budget,
            clients=clients,
            output=output,
            figure=figure,
            plot_only=plot_only,
            quiet=quiet,
            progress_mode=progress_mode,
            jobs=jobs,
            workers=workers,
        )
