"""``fedxab run``: a whole job in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from fedxab.cli.common import errors_as_exit_code, interruptible, load_job, make_console
from fedxab.cli.observe import job_observers, progress_display, run_callbacks
from fedxab.cli.options import (
    DASHBOARD_PORT,
    BudgetOption,
    DashboardOption,
    DashboardPortOption,
    KeysDirOption,
    MetricsHostOption,
    MetricsPortOption,
    NamespaceOption,
    ProgressOption,
    RepeatsOption,
    SeedOption,
    ServeAfterOption,
)
from fedxab.cli.render import print_choice, print_finished_seeds, print_results
from fedxab.errors import FedxabError
from fedxab.monitoring.progress import ProgressMode

_ConfigArgument = Annotated[
    Path | None,
    typer.Argument(
        help="TOML run configuration; without it the built-in default job runs "
        "(Fed-PNE, 10 clients on Garland, budget 10000 per client, 3 seeds).",
        show_default=False,
    ),
]
_OutputOption = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Override run.output (directory for results.json).",
        show_default=False,
    ),
]
_QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no table.")]
_BrokerOption = Annotated[
    str | None,
    typer.Option(
        help="Federated runs: memory:// (embedded broker, the default), kafka://HOST:PORT, "
        "or inprocess:// (no broker). Overrides broker.url.",
        show_default=False,
    ),
]
_HostsOption = Annotated[
    int, typer.Option(min=1, help="Federated runs on a broker: client agents to start.")
]
_ResumeOption = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Keep the seeds this job already finished (DIR/runs) and run only the others; "
        "on Kafka an interrupted seed continues from its checkpoint (DIR/checkpoints). With "
        "a larger --budget N, continue the finished runs to N, in process (Fed-PNE, "
        "DP-Fed-PNE, FTS-DE, TS; on Kafka: fedxab server/client --resume).",
    ),
]


def run(
    config: _ConfigArgument = None,
    seed: SeedOption = None,
    repeats: RepeatsOption = None,
    budget: BudgetOption = None,
    output: _OutputOption = None,
    quiet: _QuietOption = False,
    progress_mode: ProgressOption = ProgressMode.auto,
    broker: _BrokerOption = None,
    hosts: _HostsOption = 1,
    keys_dir: KeysDirOption = None,
    namespace: NamespaceOption = None,
    resume: _ResumeOption = False,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = "127.0.0.1",
    serve_after: ServeAfterOption = None,
    dashboard: DashboardOption = False,
    dashboard_port: DashboardPortOption = DASHBOARD_PORT,
) -> None:
    """Run a job and write DIR/results.json (federated jobs: every agent in this process).
    Each seed's run is kept in DIR/runs as it finishes; --resume takes them up again."""
    from fedxab.results import write_results
    from fedxab.run.continuation import continue_job
    from fedxab.run.finished import FinishedRuns

    console = make_console()
    with errors_as_exit_code():
        cfg = load_job(config, seed, repeats, budget, output, broker, keys_dir, namespace)
        cfg, finished, continuations = continue_job(cfg, FinishedRuns(cfg, resume=resume))
        if not quiet:
            _print_job(console, cfg, "built-in default" if config is None else str(config))
        print_finished_seeds(console, finished, quiet, continuations)
        progress = progress_display(console, quiet, progress_mode)
        unit = "evals" if cfg.federation is None else "rounds"
        on_run_start, on_progress = run_callbacks(progress, cfg.run.budget, unit)

        page = (cfg.to_dict(), dashboard_port) if dashboard else None
        with job_observers(
            console, "federation", metrics_port, metrics_host, serve_after, page
        ) as metrics:
            with progress:
                results = _run_job(
                    cfg,
                    progress=on_progress,
                    on_run_start=on_run_start,
                    hosts=hosts,
                    metrics=metrics,
                    finished=finished,
                    continuations=continuations,
                )
            path = write_results(results, cfg.output_dir)
            print_results(console, results, cfg, path, quiet=quiet, server=False)


def _print_job(console: Console, cfg: Any, source: str) -> None:
    """The first line of `fedxab run`: the algorithm, objective, clients, budget and seeds
    (and the algorithm ``auto`` chose)."""
    fed = cfg.federation
    who = (
        ""
        if fed is None
        else f"{fed.clients:,} clients ({escape(fed.heterogeneity)} heterogeneity), "
    )
    per = "" if fed is None else " per client"
    console.print(
        f"[bold]fedxab run[/bold]: {escape(cfg.algorithm.name)} on "
        f"{escape(cfg.objective.name)} ({escape(source)}), {who}"
        f"budget {cfg.run.budget:,}{per}, "
        f"{cfg.run.repeats} run(s) from seed {cfg.run.seed}",
        soft_wrap=True,
    )
    print_choice(console, cfg)


def _run_job(cfg: Any, *, progress: Any, hosts: int, **options: Any) -> Any:
    """Every run of ``cfg`` in this process: a single agent
    (:func:`~fedxab.agents.local.run_config`), or the whole federation
    (:func:`~fedxab.api.run_job`; SIGTERM ends it like Ctrl-C). A run id that already ran on
    the broker is an error naming the two ways on."""
    from fedxab.agents.local import run_config
    from fedxab.api import run_job
    from fedxab.errors import RunConflictError

    if cfg.federation is None:
        options.pop("continuations")  # (continue_job refuses a single-agent run)
        return run_config(cfg, progress, **options)
    try:
        return interruptible(lambda: run_job(cfg, progress=progress, hosts=hosts, **options))
    except RunConflictError as exc:
        raise FedxabError(
            f"run {exc.run_id} already ran on {cfg.broker.url}: start a new one "
            "with --namespace NAME, or continue this one with --resume (same "
            "--output)"
        ) from None
