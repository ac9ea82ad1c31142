"""``fedxab dashboard``: the dashboard of a finished job."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedxab.cli.common import errors_as_exit_code, make_console, wait
from fedxab.cli.options import DASHBOARD_PORT, DashboardPortOption


def dashboard(
    results: Annotated[
        Path,
        typer.Argument(
            help="A job's output directory (its run.output) or its results.json.",
            show_default=False,
        ),
    ],
    port: DashboardPortOption = DASHBOARD_PORT,
    ledger: Annotated[
        Path | None,
        typer.Option(
            help="The privacy ledger whose data owners' lifetime spend the page shows "
            "(default: the ledger file the results name, if it exists).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the dashboard of a finished job at http://127.0.0.1:PORT/ until Ctrl-C: regret and
    best-observed curves (mean and spread over clients, one client on demand), phases and
    messages, epsilon per client against the budget, each data owner's lifetime spend (with a
    ledger), report outcomes and the configuration. The results and the ledger are read again
    whenever they change. Live during a run: `fedxab run
    --dashboard` or `fedxab server --dashboard`."""
    from fedxab.dashboard.server import DashboardServer, ResultsSource

    console = make_console()
    with errors_as_exit_code():
        source = ResultsSource(results, ledger)
        with DashboardServer(source, port=port) as page:
            console.print(
                f"dashboard of {source.path}: {page.url} (Ctrl-C stops)",
                soft_wrap=True,
                markup=False,
            )
            wait(None)
