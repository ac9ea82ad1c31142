"""The ``fedxab`` command.

``fedxab run [CONFIG.toml]`` runs a job (the built-in default without a config: Fed-PNE with 10
clients on Garland) with a progress display (``--progress``: a bar on a terminal, plain lines in
logs and pipes; :mod:`fedxab.monitoring.progress`) and prints a summary table; single-agent
algorithms run through :mod:`fedxab.agents.local`, federated ones through
:mod:`fedxab.agents.federation` (chosen by the algorithm's name). ``fedxab plot RESULTS.json
... -o regret.png`` draws regret curves. ``fedxab keys generate --clients N --out DIR`` writes
the message-signing keys: an Ed25519 key pair per party (:mod:`fedxab.security.keypairs`), or
with ``--scheme hmac`` one secret key per client (:mod:`fedxab.security.keys`).

``--metrics-port PORT`` (on ``run``, ``server`` and ``client``) serves Prometheus metrics of the
job at ``http://127.0.0.1:PORT/metrics`` while it runs (:mod:`fedxab.monitoring`; ``0`` picks a
free port, printed; ``--metrics-host`` another interface) and ``--serve-after SECONDS`` keeps
serving them after the end, until Ctrl-C.

Every :class:`~fedxab.errors.FedxabError` (bad config, bad results file, a metrics port in use,
...) is printed as a single red line ``error: <message>`` and the command exits with status 2;
no traceback.
Only this package prints; library code logs through :mod:`logging`. One module per command
group (:mod:`fedxab.cli.run`, :mod:`~fedxab.cli.agents`, :mod:`~fedxab.cli.audit`,
:mod:`~fedxab.cli.plot`, :mod:`~fedxab.cli.dashboard`, :mod:`~fedxab.cli.reproduce`,
:mod:`~fedxab.cli.keys`, :mod:`~fedxab.cli.topics`, :mod:`~fedxab.cli.replay`), each command a
thin layer over library functions: it parses, calls, prints. What they share:
:mod:`~fedxab.cli.common`, :mod:`~fedxab.cli.options`, :mod:`~fedxab.cli.observe`,
:mod:`~fedxab.cli.render`. This module assembles them into the ``fedxab`` command; a new command
is a module with its function, registered here. No function of the package is longer than 60 lines
(``tests/unit/test_cli_layout.py``): logic beyond that belongs in the library, with tests of its
own.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer
from rich.logging import RichHandler

from fedxab.cli import agents, audit, dashboard, keys, plot, replay, reproduce, run, topics
from fedxab.cli.agents import parse_client_ids
from fedxab.cli.common import load_job, make_console
from fedxab.cli.render import clients_table, print_ledger, summary_table

__all__ = ["app", "main"]

app = typer.Typer(
    name="fedxab",
    help="Federated and distributed black-box optimization.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _version_callback(value: bool) -> None:
    if value:
        from fedxab import __version__

        make_console().print(f"fedxab {__version__}")
        raise typer.Exit()


def _root(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show informational log messages.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Show the version."
        ),
    ] = False,
) -> None:
    """Federated and distributed black-box optimization."""
    # Library modules log under "fedxab"; show warnings (and with -v, info) on stderr. The
    # logger's own level is only raised with -v, so that nothing else is filtered out.
    logger = logging.getLogger("fedxab")
    handler = next((h for h in logger.handlers if isinstance(h, RichHandler)), None)
    if handler is None:
        handler = RichHandler(console=make_console(stderr=True), show_path=False, show_time=False)
        logger.addHandler(handler)
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    if verbose and logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


app.callback()(_root)
app.command()(run.run)
app.command()(agents.server)
app.command()(agents.client)
app.command("broker")(agents.dev_broker)
app.command()(audit.audit)
app.command()(plot.plot)
app.command()(dashboard.dashboard)
app.command()(reproduce.reproduce)
app.command()(replay.replay)
keys_app = typer.Typer(
    name="keys",
    help="Message-signing keys: an Ed25519 key pair per party, or one HMAC key per client.",
    no_args_is_help=True,
)
keys_app.command("generate")(keys.generate)
app.add_typer(keys_app)
topics_app = typer.Typer(
    name="topics",
    help="A job's Kafka topics, for clusters where only operators create topics.",
    no_args_is_help=True,
)
topics_app.command("create")(topics.create)
topics_app.command("describe")(topics.describe)
topics_app.command("delete")(topics.delete)
app.add_typer(topics_app)

# The names the test suite imports from the single module this package replaced.
_load = load_job
_parse_client_ids = parse_client_ids
_print_ledger = print_ledger
_summary_table = summary_table
_clients_table = clients_table


def main() -> None:
    """Entry point of the ``fedxab`` console script."""
    app()
