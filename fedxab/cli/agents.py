"""``fedxab server``, ``fedxab client`` and ``fedxab broker``: the parties of a federated job
in separate processes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from fedxab.cli.common import (
    errors_as_exit_code,
    interruptible,
    load_job,
    make_console,
    run_with,
    show_notices,
)
from fedxab.cli.observe import job_observers, progress_display, run_callbacks
from fedxab.cli.options import (
    BROKER_HELP,
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
from fedxab.cli.render import clients_table, ledger_line, print_choice, print_results, run_ids
from fedxab.errors import ConfigError, FedxabError
from fedxab.monitoring.progress import ProgressMode


def parse_client_ids(text: str, n_clients: int) -> list[int]:
    """``"3"``, ``"0-9"`` or ``"0-4,7,9-11"`` -> sorted client ids, each in 0..n_clients-1."""
    ids: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise FedxabError(
                f"--client-id: expected N, A-B or a comma-separated list of them, got {text!r}"
            ) from None
        if not 0 <= first <= last < n_clients:
            raise FedxabError(
                f"--client-id: {part.strip()!r} is not within 0..{n_clients - 1} "
                f"(federation.clients = {n_clients})"
            )
        ids.update(range(first, last + 1))
    return sorted(ids)


def shared_broker(cfg, role: str):
    """The Kafka broker a separate server or client process needs (memory:// and inprocess://
    live inside one process: `fedxab run` uses them)."""
    from fedxab.broker.factory import make_broker

    if not cfg.broker.url.startswith("kafka://"):
        raise FedxabError(
            f"--broker: a {role} process needs a broker other processes reach, "
            f"kafka://HOST:PORT, got {cfg.broker.url!r} (run every agent in one process "
            "with `fedxab run`)"
        )
    return make_broker(cfg.broker.url, cfg.broker)


_ConfigArgument = Annotated[
    Path, typer.Argument(help="TOML run configuration.", show_default=False)
]
_BrokerOption = Annotated[str | None, typer.Option(help=BROKER_HELP, show_default=False)]
_CheckpointOption = Annotated[
    Path | None,
    typer.Option(
        help="Directory of the per-phase checkpoints; a restarted server resumes from them.",
        show_default=False,
    ),
]
_OutputOption = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Override run.output.", show_default=False),
]
_QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
_ClientIdOption = Annotated[
    str,
    typer.Option(
        "--client-id", help="Clients this process hosts: N, A-B, or a list such as 0-4,7."
    ),
]
_SiteDashboardOption = Annotated[
    bool,
    typer.Option(
        "--dashboard",
        help="Serve this site's own live dashboard at http://127.0.0.1:PORT/ "
        "(--dashboard-port): its clients' trials as they happen, their best so far and "
        "the server's recommendation.",
    ),
]
_ObjectiveOption = Annotated[
    str | None,
    typer.Option(
        help="This process's own objective, package.module:function (importable here); "
        "overrides objective.function, so each client process may bring its own.",
        show_default=False,
    ),
]
_ClientOutputOption = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Write these clients' own results here: results.json (what each observed, "
        "its epsilon) and each client's trials as CSV. Under local DP only they have them.",
        show_default=False,
    ),
]
_PartyResumeOption = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="With a larger --budget N: continue the finished run whose results are in "
        "--output to N (Fed-PNE, DP-Fed-PNE without [privacy], FTS-DE, TS). A new run on the "
        "broker, whose clients (fedxab client --resume, each with its own --output) answer "
        "its first evaluations from their trials.",
    ),
]
_PortOption = Annotated[
    int | None,
    typer.Option(help="Loopback port to listen on (default: a free one).", show_default=False),
]


def server(
    config: _ConfigArgument,
    broker: _BrokerOption = None,
    checkpoint: _CheckpointOption = None,
    seed: SeedOption = None,
    repeats: RepeatsOption = None,
    budget: BudgetOption = None,
    output: _OutputOption = None,
    quiet: _QuietOption = False,
    progress_mode: ProgressOption = ProgressMode.auto,
    keys_dir: KeysDirOption = None,
    namespace: NamespaceOption = None,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = "127.0.0.1",
    serve_after: ServeAfterOption = None,
    dashboard: DashboardOption = False,
    dashboard_port: DashboardPortOption = DASHBOARD_PORT,
    resume: _PartyResumeOption = False,
) -> None:
    """Run the server of a federated job on a broker (clients run `fedxab client`)."""
    from fedxab.agents.distributed import serve
    from fedxab.results import write_results

    console = make_console()
    show_notices()  # who joined and who left, phase by phase
    with errors_as_exit_code():
        cfg = load_job(config, seed, repeats, budget, output, broker, keys_dir, namespace)
        if cfg.broker is None:
            raise FedxabError(f"{cfg.algorithm.name!r} is not a federated algorithm")
        if resume:
            from fedxab.run.continuation import continue_party

            cfg, _ = continue_party(cfg, cfg.output_dir)
        transport = shared_broker(cfg, "server")
        console.print(
            f"[bold]fedxab server[/bold]: {escape(cfg.algorithm.name)}, "
            f"{cfg.federation.clients:,} clients, on {escape(cfg.broker.url)}; "
            f"{run_ids(cfg)}",
            soft_wrap=True,
        )
        print_choice(console, cfg)
        progress = progress_display(console, quiet, progress_mode)
        on_run_start, on_progress = run_callbacks(progress, cfg.run.budget, "rounds")

        page = (cfg.to_dict(), dashboard_port) if dashboard else None
        with job_observers(
            console, "server", metrics_port, metrics_host, serve_after, page
        ) as metrics:
            options = {"progress": on_progress, "on_run_start": on_run_start, "metrics": metrics}
            with progress:
                results = run_with(
                    transport,
                    lambda: serve(cfg, transport, checkpoint_dir=checkpoint, **options),
                )
            path = write_results(results, cfg.output_dir)
            print_results(console, results, cfg, path, quiet=quiet, server=True)


def client(
    config: _ConfigArgument,
    client_id: _ClientIdOption,
    broker: _BrokerOption = None,
    seed: SeedOption = None,
    repeats: RepeatsOption = None,
    budget: BudgetOption = None,
    keys_dir: KeysDirOption = None,
    namespace: NamespaceOption = None,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = "127.0.0.1",
    serve_after: ServeAfterOption = None,
    dashboard: _SiteDashboardOption = False,
    dashboard_port: DashboardPortOption = DASHBOARD_PORT,
    objective: _ObjectiveOption = None,
    output: _ClientOutputOption = None,
    resume: _PartyResumeOption = False,
) -> None:
    """Host clients of a federated job on a broker until the server's final answer (with
    --metrics-port, their own metrics: their regret and epsilon only; with --dashboard, their
    own live dashboard: their trials as they happen; with --output, their own results)."""
    from fedxab.agents.distributed import host_clients

    with errors_as_exit_code():
        cfg = load_job(config, seed, repeats, budget, None, broker, keys_dir, namespace)
        if cfg.broker is None or cfg.federation is None:
            raise FedxabError(f"{cfg.algorithm.name!r} is not a federated algorithm")
        if objective is not None:
            cfg = cfg.with_objective_function(objective)
        ids = parse_client_ids(client_id, cfg.federation.clients)
        replay = None
        if resume:
            from fedxab.run.continuation import continue_party

            if output is None:
                raise ConfigError(
                    "--output", "--resume continues from these clients' own results: give it"
                )
            cfg, replay = continue_party(cfg, output, ids)
        transport = shared_broker(cfg, "client")
        console = make_console()
        _print_clients(console, cfg, client_id)

        page = (cfg.to_dict(), dashboard_port) if dashboard else None
        with job_observers(
            console, "client", metrics_port, metrics_host, serve_after, page
        ) as metrics:
            results = run_with(
                transport,
                lambda: host_clients(cfg, transport, ids, metrics=metrics, replay=replay),
            )
            _print_clients_results(console, results, cfg, client_id, output)


def _print_clients(console: Console, cfg: Any, client_id: str) -> None:
    """The first line of `fedxab client`, and where a private run's ledger is kept."""
    console.print(
        f"[bold]fedxab client[/bold]: clients {escape(client_id)} of "
        f"{escape(cfg.algorithm.name)} on {escape(cfg.broker.url)}; {run_ids(cfg)}",
        soft_wrap=True,
    )
    if cfg.privacy is not None:
        from fedxab.privacy.run_ledger import ledger_location

        where = ledger_location(cfg.privacy, cfg.output_dir)
        console.print(ledger_line(where), soft_wrap=True, markup=False)


def _print_clients_results(
    console: Console, results: Any, cfg: Any, client_id: str, output: Path | None
) -> None:
    """What `fedxab client` prints at the end: its runs, what each of its clients observed,
    and where their own results are (with --output, which writes them)."""
    console.print(
        f"clients {client_id}: {len(results.runs)} run(s) finished on {cfg.broker.url}",
        soft_wrap=True,
        markup=False,
    )
    table = clients_table(results, always=True)
    if table is not None:
        console.print(table)
    if output is not None:
        from fedxab.results import write_results

        path = write_results(results, output)
        console.print(f"results: {path}", soft_wrap=True, markup=False)


def dev_broker(port: _PortOption = None) -> None:
    """Start a local Kafka-compatible dev broker (in-memory) on 127.0.0.1 until Ctrl-C."""
    with errors_as_exit_code():
        interruptible(lambda: _serve_dev_broker(port))


def _serve_dev_broker(port: int | None) -> None:
    """Start the dev broker, print its address and wait on it; Ctrl-C or SIGTERM (here from the
    start, so also while it starts) stops it, a second Ctrl-C kills it (``DevBroker.stop``)."""
    from fedxab.broker.devbroker import DevBroker

    with DevBroker(port) as dev:
        make_console().print(
            f"dev broker listening on {dev.address} (in-memory; Ctrl-C stops it)\n"
            f"use: --broker {dev.url}",
            soft_wrap=True,
            markup=False,
        )
        dev.watch()
