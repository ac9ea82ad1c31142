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
Only this module prints; library code logs through :mod:`logging`.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import Progress, TaskID
from rich.table import Table
from rich.text import Text

from fedxab.errors import FedxabError
from fedxab.monitoring.plots import Metric as PlotMetric
from fedxab.monitoring.progress import ProgressMode, Status, make_progress
from fedxab.security.signing import Scheme

__all__ = ["app", "main"]

EXIT_ERROR = 2

app = typer.Typer(
    name="fedxab",
    help="Federated and distributed black-box optimization.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


SeedOption = Annotated[int | None, typer.Option(help="Override run.seed.", show_default=False)]
RepeatsOption = Annotated[
    int | None, typer.Option(help="Override run.repeats.", show_default=False)
]
BudgetOption = Annotated[
    int | None,
    typer.Option(help="Override run.budget (evaluations per client).", show_default=False),
]


MetricsPortOption = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="Serve Prometheus metrics at http://HOST:PORT/metrics while the job runs "
        "(0: a free port, printed).",
        show_default=False,
    ),
]
MetricsHostOption = Annotated[
    str,
    typer.Option(
        "--metrics-host",
        help="Interface of --metrics-port (0.0.0.0: every interface, e.g. in a container).",
    ),
]
ServeAfterOption = Annotated[
    float | None,
    typer.Option(
        "--serve-after",
        min=0,
        help="With --metrics-port or --dashboard: keep serving them SECONDS after the job "
        "ends (inf: until Ctrl-C).",
        show_default=False,
    ),
]
DashboardOption = Annotated[
    bool,
    typer.Option(
        "--dashboard",
        help="Serve the live dashboard (regret, phases, epsilon per client, report outcomes, "
        "a user's objective's trials and the recommendation by name) "
        "at http://127.0.0.1:PORT/ while the job runs (--dashboard-port; afterwards: "
        "`fedxab dashboard DIR`).",
    ),
]
DashboardPortOption = Annotated[
    int,
    typer.Option(
        "--dashboard-port",
        min=0,
        max=65535,
        help="Port of the dashboard (--dashboard, `fedxab dashboard`; 0: a free one, printed).",
    ),
]
DASHBOARD_PORT = 8050
"""The dashboard's default port."""
NamespaceOption = Annotated[
    str | None,
    typer.Option(
        help="Federated runs on a broker: the topic namespace (overrides broker.namespace); "
        "another namespace starts a new run on new topics.",
        show_default=False,
    ),
]
KeysDirOption = Annotated[
    Path | None,
    typer.Option(
        "--keys-dir",
        help="Directory of the message-signing keys (`fedxab keys generate`: private/ and "
        "public/, or HMAC client-N.key files). Overrides security.keys_dir; Kafka runs sign by "
        "default.",
        show_default=False,
    ),
]

ProgressOption = Annotated[
    ProgressMode,
    typer.Option(
        "--progress",
        envvar="FEDXAB_PROGRESS",
        case_sensitive=False,
        help="Progress display: bar (redrawn in place, fits the terminal's width), lines (a "
        "plain line per 10% of a run and at least every minute: CI logs, pipes), none; auto: "
        "bar on a terminal, else lines. --quiet: none.",
    ),
]


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False)


@contextlib.contextmanager
def _errors_as_exit_code() -> Iterator[None]:
    """Turn a FedxabError into one red ``error:`` line on stderr and exit status 2."""
    try:
        yield
    except FedxabError as exc:
        _console(stderr=True).print(Text(f"error: {exc}", style="bold red"), soft_wrap=True)
        raise typer.Exit(EXIT_ERROR) from None
    except KeyboardInterrupt:
        _console(stderr=True).print(Text("error: interrupted", style="bold red"))
        raise typer.Exit(130) from None


@contextlib.contextmanager
def _observers(
    console: Console,
    role: str,
    metrics_port: int | None,
    metrics_host: str,
    serve_after: float | None,
    dashboard: tuple[dict, int] | None = None,
) -> Iterator:
    """The job's observer: :class:`~fedxab.monitoring.metrics.FederationMetrics` served on
    ``metrics_host:metrics_port`` (with ``--metrics-port``) and a
    :class:`~fedxab.dashboard.state.DashboardState` served on the loopback interface (with
    ``dashboard``: the job's config as a dict and the port); None without either. After the
    body ends normally, ``serve_after`` seconds more of serving (Ctrl-C or SIGTERM ends them
    early, not as an error)."""
    if metrics_port is None and dashboard is None:
        if serve_after is not None:
            raise FedxabError(
                "--serve-after needs --metrics-port or --dashboard (something to keep serving)"
            )
        yield None
        return
    from fedxab.run.observe import Observers, RunObserver

    with contextlib.ExitStack() as stack:
        observers: list[RunObserver] = []
        served: list[str] = []
        if metrics_port is not None:
            from fedxab.monitoring.endpoint import MetricsEndpoint
            from fedxab.monitoring.metrics import FederationMetrics

            metrics = FederationMetrics(role=role)
            endpoint = stack.enter_context(
                MetricsEndpoint(metrics.registry, host=metrics_host, port=metrics_port)
            )
            console.print(f"metrics: {endpoint.url}", soft_wrap=True, markup=False)
            observers.append(metrics)
            served.append(f"metrics on {endpoint.url}")
        if dashboard is not None:
            from fedxab.dashboard.server import DashboardServer
            from fedxab.dashboard.state import DashboardState

            config, port = dashboard
            state = DashboardState(config)
            page = stack.enter_context(DashboardServer(state, port=port))
            console.print(f"dashboard: {page.url}", soft_wrap=True, markup=False)
            observers.append(state)
            served.append(f"the dashboard on {page.url}")
        yield observers[0] if len(observers) == 1 else Observers(observers)
        if serve_after:
            until = "until Ctrl-C" if math.isinf(serve_after) else f"for {serve_after:g} s"
            console.print(
                f"serving {' and '.join(served)} {until} (Ctrl-C stops)",
                soft_wrap=True,
                markup=False,
            )
            _wait(None if math.isinf(serve_after) else serve_after)


def _wait(seconds: float | None) -> None:
    """Block ``seconds`` (None: until Ctrl-C or SIGTERM, which end the wait quietly)."""
    import threading

    with contextlib.suppress(KeyboardInterrupt):
        _interruptible(lambda: threading.Event().wait(seconds))


def _version_callback(value: bool) -> None:
    if value:
        from fedxab import __version__

        _console().print(f"fedxab {__version__}")
        raise typer.Exit()


@app.callback()
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
        handler = RichHandler(console=_console(stderr=True), show_path=False, show_time=False)
        logger.addHandler(handler)
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    if verbose and logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or not np.isfinite(value):
        return "-"
    return f"{value:.{digits}g}" if abs(value) >= 1e4 else f"{value:.{digits}f}"


def _fmt_point(x: np.ndarray, limit: int = 4) -> str:
    coords = [f"{v:.4f}" for v in np.asarray(x).reshape(-1)]
    shown = ", ".join(coords[:limit])
    return f"[{shown}{', …' if len(coords) > limit else ''}]"


def _fmt_at(run, x: np.ndarray) -> str:
    """A point of ``run``: its parameters by name in the user's units when the run has a
    typed space, else its coordinates."""
    params = run.params(x)
    if params is None:
        return _fmt_point(x)
    return ", ".join(
        f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
        for name, value in params.items()
    )


def _summary_table(results) -> Table:
    """Per run and mean/std: evaluations, regrets, recommendation, wall time.

    Federated runs show the local cumulative regret instead of the average regret (which is
    the cumulative regret divided by T); their communication has its own table.
    """
    federated = any(r.communication is not None for r in results.runs)
    table = Table(
        title=f"{results.algorithm} on {results.objective.get('name')}"
        f" (f* = {_fmt(results.objective.get('optimum_value'), 6)})",
        title_justify="left",
    )
    table.add_column("seed", justify="right")
    table.add_column("evals", justify="right")
    table.add_column("cum. regret", justify="right")
    if federated:
        table.add_column("local cum. regret", justify="right")
    else:
        table.add_column("avg regret", justify="right")
    table.add_column("simple regret", justify="right")
    table.add_column("recommendation")
    table.add_column("time (s)", justify="right")
    for r in results.runs:
        second = (
            _fmt(r.final_local_cumulative_regret, 3)
            if federated
            else _fmt(r.final_average_regret, 5)
        )
        if r.is_withheld("cumulative_regret"):
            cum = second = _WITHHELD
        else:
            cum = _fmt(r.final_cumulative_regret, 3)
        table.add_row(
            str(r.seed),
            f"{r.evaluations:,}",
            cum,
            second,
            _fmt(r.simple_regret, 5),
            _fmt_at(r, r.recommendation),
            f"{r.wall_time_s:.2f}",
        )
    if len(results.runs) > 1:
        s = results.summary
        table.add_section()
        for stat in ("mean", "std"):
            if federated:
                second = _fmt((s.get("local_cumulative_regret") or {}).get(stat), 3)
            else:
                second = _fmt(s["average_regret"][stat], 5)
            table.add_row(
                stat,
                "",
                _fmt(s["cumulative_regret"][stat], 3),
                second,
                _fmt(s["simple_regret"][stat], 5),
                "",
                "",
                style="bold" if stat == "mean" else None,
            )
    short = [_coverage_note(r) for r in results.runs if r.regret_coverage is not None]
    if short:
        table.caption = "incomplete regret: " + "; ".join(short)
        table.caption_justify = "left"
        table.caption_style = "bold yellow"
    return table


_CLIENT_ROWS = 10


_WITHHELD = "withheld (local DP)"
"""What a table shows for a value this party does not have under local DP."""


def _clients_table(results, always: bool = False) -> Table | None:
    """What each client observed in the last run (``RunRecord.clients``): shown where no
    optimum is known (a user's objective), the deployment results, or ``always`` (a client
    agent's own). The first clients, then the range of the others' best values. A server under
    local DP has none: one row says they are withheld."""
    run = results.runs[-1]
    if run.is_withheld("clients"):
        table = Table(title=f"what each client observed (seed {run.seed})", title_justify="left")
        table.add_column("clients")
        table.add_column("best observed, at, own recommendation, trials")
        table.add_row("all", _WITHHELD)
        for m, release in list(run.withheld.get("best_value_dp", {}).items())[:_CLIENT_ROWS]:
            table.add_row(f"client {m}", _best_release_text(release))
        table.caption = "each client keeps them: fedxab client --output DIR"
        table.caption_justify = "left"
        return table
    if run.clients is None or (results.objective.get("optimum_value") is not None and not always):
        return None
    direction = results.objective.get("direction", "maximize")
    table = Table(
        title=f"what each client observed (seed {run.seed}; best = {direction[:3]})",
        title_justify="left",
    )
    for name in ("client", "evals", "best observed", "at", "own recommendation"):
        table.add_column(name, justify="right" if name in ("client", "evals") else "left")
    for c in run.clients[:_CLIENT_ROWS]:
        table.add_row(
            str(c.client),
            f"{c.evaluations:,}",
            _fmt(c.best_value, 6),
            "-" if c.best_point is None else _fmt_at(run, c.best_point),
            "-" if c.recommendation is None else _fmt_at(run, c.recommendation),
        )
    rest = [c.best_value for c in run.clients[_CLIENT_ROWS:] if c.best_value is not None]
    if rest:
        table.caption = (
            f"{len(run.clients) - _CLIENT_ROWS:,} more clients: best observed from "
            f"{_fmt(min(rest), 6)} to {_fmt(max(rest), 6)}"
        )
        table.caption_justify = "left"
    return table


def _best_release_text(release: Mapping[str, Any]) -> str:
    """A client's best value as the server has it under ``[privacy] release_best``: noised,
    with its epsilon and noise sd, or why it was refused."""
    if "refused" in release:
        return f"best value (DP): refused: {release['refused']}"
    return (
        f"best value (DP, epsilon {release['epsilon']:g}): {_fmt(release['best_value_dp'], 6)} "
        f"(noise sd {_fmt(release['sigma'], 3)})"
    )


def _coverage_note(run) -> str:
    """Why a run's regret curves are incomplete (see ``RunRecord.regret_coverage``)."""
    cov = run.regret_coverage
    clients = cov["clients"]
    shown = ", ".join(map(str, clients[:5])) + (", …" if len(clients) > 5 else "")
    return (
        f"seed {run.seed} counts {cov['pulls_received']:,} of {cov['pulls_expected']:,} pulls "
        f"(telemetry missing from client(s) {shown}); its regret means are over the clients "
        "that reported each round"
        + (
            f", at least {cov['fewest_clients_per_round']:,}"
            if "fewest_clients_per_round" in cov
            else ""
        )
    )


def _communication_table(results) -> Table | None:
    """Per federated run and mean: phases (communication rounds), messages and bytes."""
    runs = [r for r in results.runs if r.communication is not None]
    if not runs:
        return None
    clients = runs[0].communication.get("clients")
    title = "communication" + (f" ({clients:,} clients)" if isinstance(clients, int) else "")
    table = Table(title=title, title_justify="left")
    table.add_column("seed", justify="right")
    table.add_column("phases", justify="right")
    for name in ("messages up", "messages down", "bytes up", "bytes down"):
        table.add_column(name, justify="right")
    keys = ("rounds", "messages_up", "messages_down", "bytes_up", "bytes_down")
    for r in runs:
        c = r.communication
        table.add_row(str(r.seed), *(f"{c[k]:,}" for k in keys))
    comm = results.communication
    if len(runs) > 1 and comm:
        table.add_section()
        table.add_row("mean", *(f"{comm[k]:,.1f}" for k in keys), style="bold")
    return table


def _privacy_table(results) -> Table | None:
    """Per private run: the largest client epsilon against the budget, and withdrawals."""
    runs = [r for r in results.runs if r.privacy is not None]
    if not runs:
        return None
    first = runs[0].privacy
    title = f"privacy ({first['accountant']} accountant, delta {first['delta']:g})"
    table = Table(title=title, title_justify="left")
    for name in ("seed", "max epsilon", "budget epsilon", "releases (max)", "clients withdrawn"):
        table.add_column(name, justify="right")
    for r in runs:
        p = r.privacy
        budget = p["budget_epsilon"]
        table.add_row(
            str(r.seed),
            _fmt(p["max_epsilon"]),
            "-" if budget is None else _fmt(budget),
            f"{max(p['releases'], default=0):,}",
            f"{len(p['withdrawn']):,} of {len(p['epsilon']):,}",
        )
    notes = [r.privacy["fallback_reason"] for r in runs if r.privacy.get("fallback_reason")]
    if notes:
        more = f" (and in {len(notes) - 1} more run(s))" if notes[1:] else ""
        table.caption = notes[0] + more
        table.caption_justify = "left"
        table.caption_style = "bold yellow"
    return table


@app.command()
def run(
    config: Annotated[
        Path | None,
        typer.Argument(
            help="TOML run configuration; without it the built-in default job runs "
            "(Fed-PNE, 10 clients on Garland, budget 10000 per client, 3 seeds).",
            show_default=False,
        ),
    ] = None,
    seed: SeedOption = None,
    repeats: RepeatsOption = None,
    budget: BudgetOption = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Override run.output (directory for results.json).",
            show_default=False,
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar and no table.")
    ] = False,
    progress_mode: ProgressOption = ProgressMode.auto,
    broker: Annotated[
        str | None,
        typer.Option(
            help="Federated runs: memory:// (embedded broker, the default), kafka://HOST:PORT, "
            "or inprocess:// (no broker). Overrides broker.url.",
            show_default=False,
        ),
    ] = None,
    hosts: Annotated[
        int, typer.Option(min=1, help="Federated runs on a broker: client agents to start.")
    ] = 1,
    keys_dir: KeysDirOption = None,
    namespace: NamespaceOption = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Keep the seeds this job already finished (DIR/runs) and run only the others; "
            "on Kafka an interrupted seed continues from its checkpoint (DIR/checkpoints).",
        ),
    ] = False,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = "127.0.0.1",
    serve_after: ServeAfterOption = None,
    dashboard: DashboardOption = False,
    dashboard_port: DashboardPortOption = DASHBOARD_PORT,
) -> None:
    """Run a job and write DIR/results.json (federated jobs: every agent in this process).
    Each seed's run is kept in DIR/runs as it finishes; --resume takes them up again."""
    from fedxab.agents.local import run_config
    from fedxab.agents.server import RunConflictError
    from fedxab.api import run_job
    from fedxab.results import write_results
    from fedxab.run.finished import FinishedRuns

    console = _console()
    with _errors_as_exit_code():
        cfg = _load(config, seed, repeats, budget, output, broker, keys_dir, namespace)
        finished = FinishedRuns(cfg, resume=resume)
        source = "built-in default" if config is None else str(config)
        fed = cfg.federation
        if not quiet:
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
            _print_choice(console, cfg)
        _print_finished_seeds(console, finished, quiet)
        progress = _progress(console, quiet, progress_mode)
        on_run_start, on_progress = _run_callbacks(
            progress, cfg.run.budget, "evals" if fed is None else "rounds"
        )

        page = (cfg.to_dict(), dashboard_port) if dashboard else None
        with _observers(
            console, "federation", metrics_port, metrics_host, serve_after, page
        ) as metrics:
            with progress:
                if fed is None:
                    results = run_config(
                        cfg,
                        on_progress,
                        on_run_start=on_run_start,
                        metrics=metrics,
                        finished=finished,
                    )
                else:
                    try:
                        results = _interruptible(
                            lambda: run_job(
                                cfg,
                                progress=on_progress,
                                on_run_start=on_run_start,
                                hosts=hosts,
                                metrics=metrics,
                                finished=finished,
                            )
                        )
                    except RunConflictError as exc:
                        raise FedxabError(
                            f"run {exc.run_id} already ran on {cfg.broker.url}: start a new one "
                            "with --namespace NAME, or continue this one with --resume (same "
                            "--output)"
                        ) from None
            path = write_results(results, cfg.output_dir)
            if not quiet:
                console.print(_summary_table(results))
                for table in (
                    _clients_table(results),
                    _communication_table(results),
                    _privacy_table(results),
                ):
                    if table is not None:
                        console.print(table)
            console.print(_run_ids(cfg), soft_wrap=True, markup=False)
            console.print(f"results: {path}", soft_wrap=True, markup=False)
            _print_ledger(console, results)


def _print_choice(console: Console, cfg) -> None:
    """``algorithm auto: NAME (settings): reason`` when the config asked for ``"auto"``."""
    choice = cfg.algorithm_choice
    if choice is not None:
        settings = ", ".join(f"{k} = {v}" for k, v in choice["params"].items())
        console.print(
            f"algorithm auto: {choice['name']} ({settings}): {choice['reason']}",
            soft_wrap=True,
            markup=False,
        )


def _print_ledger(console: Console, results, cfg=None) -> None:
    """Where the releases were charged (the ledger every later run of these data owners
    charges too), and the command that audits it. ``cfg``: the config of a server process,
    which under local DP holds no ledger file (its clients do): it names the command that
    audits the ledger topic instead."""
    from fedxab.algorithms.registry import PRIVATE
    from fedxab.config import SecurityConfig
    from fedxab.security.agents import scheme_of, signing_on

    for r in results.runs:  # an accountant that fell back says so, beside the summary
        note = None if r.privacy is None else r.privacy.get("fallback_reason")
        if note:
            console.print(
                Text(f"privacy, seed {r.seed}: {note}", style="bold yellow"), soft_wrap=True
            )
    blocks = [r.privacy for r in results.runs if r.privacy is not None]
    if not blocks:
        return
    if cfg is None or PRIVATE.get(cfg.algorithm.name) != "client":
        console.print(_ledger_line(blocks[0].get("ledger")), soft_wrap=True, markup=False)
        return
    where = blocks[0].get("ledger")
    kept = "in memory" if where is None else f"at {where} on its machine"
    run = blocks[0]["run_id"]
    security = cfg.security or SecurityConfig()
    keys = Path(security.keys_dir or "KEYS_DIR")
    verify = ""
    if signing_on(cfg):
        ed25519 = scheme_of(security) == "ed25519"
        verify = f" --verify {keys / 'public'}" if ed25519 else f" --keys-dir {keys}"
    console.print(
        f"privacy ledger: each client keeps its own ({kept}); this server rebuilt its copy "
        f"from the ledger topic (audit: fedxab audit {run}.ledger.db --run {run} "
        f"--rebuild-from {cfg.broker.url} --namespace {cfg.broker.namespace}{verify})",
        soft_wrap=True,
        markup=False,
    )


def _ledger_line(where: str | None) -> str:
    """The line saying where a run's privacy ledger is (None: in memory)."""
    if where is None:
        return "privacy ledger: in memory (set [privacy] ledger to keep it)"
    return f"privacy ledger: {where} (audit: fedxab audit {where})"


def _print_finished_seeds(console: Console, finished, quiet: bool) -> None:
    """Say which seeds a job takes from disk (``--resume``), or which finished ones it will run
    again (without it)."""
    seeds = finished.on_disk()
    if quiet or not seeds:
        return
    listed = ", ".join(map(str, seeds))
    if finished.resume:
        text = f"resuming: seed(s) {listed} already finished ({finished.directory}); kept"
    else:
        text = (
            f"seed(s) {listed} finished before in {finished.directory}; running them again "
            "(--resume keeps them)"
        )
    console.print(text, soft_wrap=True, markup=False)


def _load(
    config: Path | None,
    seed: int | None,
    repeats: int | None,
    budget: int | None,
    output: Path | None,
    broker: str | None,
    keys_dir: Path | None = None,
    namespace: str | None = None,
):
    """The config file (or the built-in default) with the command-line overrides applied."""
    from fedxab.config import default_config, load_config

    cfg = default_config() if config is None else load_config(config)
    cfg = cfg.with_run(
        seed=seed, repeats=repeats, budget=budget, output=None if output is None else str(output)
    )
    if broker is not None:
        cfg = _federated_override(cfg, "--broker", "broker", "url", broker)
    if keys_dir is not None:
        cfg = _federated_override(cfg, "--keys-dir", "security", "keys_dir", str(keys_dir))
    if namespace is not None:
        cfg = _federated_override(cfg, "--namespace", "broker", "namespace", namespace)
    return cfg


def _federated_override(cfg, option: str, section: str, key: str, value: str):
    """``cfg`` with ``[section] key = value`` (from command-line ``option``), a setting of
    federated runs only."""
    from fedxab.config import config_from_dict

    if getattr(cfg, section) is None:
        raise FedxabError(
            f"{option}: {cfg.algorithm.name!r} runs a single agent; {option} is a setting of "
            "federated runs only"
        )
    data = cfg.to_dict()
    data[section] = {**data.get(section, {}), key: value}
    return config_from_dict(data)


def _interruptible(work):
    """Run ``work()``; SIGTERM ends it like Ctrl-C (agents close their subscriptions and
    brokers on the way out)."""
    import signal

    def on_term(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        return work()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _serve(coro_factory):
    """Run an async service until it ends, or until SIGINT/SIGTERM cancels it cleanly."""
    import asyncio
    import signal

    signalled = []

    async def main():
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def stop(sig: int) -> None:
            signalled.append(sig)
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop, sig)
        return await coro_factory()

    try:
        return asyncio.run(main())
    except asyncio.CancelledError as exc:
        if signalled:
            raise KeyboardInterrupt from None
        # not a signal: a library cancelled a task it did not own (e.g. the Kafka client when
        # its broker went away); an error, not an interruption
        logging.getLogger(__name__).error("the service was cancelled from inside", exc_info=exc)
        raise FedxabError(
            "the service stopped: a task was cancelled from inside (see the traceback above); "
            "if the broker went away, restart it and the agents (a server with its checkpoint)"
        ) from None


def _run_ids(cfg) -> str:
    """``run id(s) ...``: what a server and its clients share (:mod:`fedxab.run.identity`)."""
    from fedxab.run.identity import run_id_for

    ids = [run_id_for(cfg, seed) for seed in cfg.run.seeds]
    return f"run id{'s' if len(ids) > 1 else ''} {', '.join(ids)}"


def _parse_client_ids(text: str, n_clients: int) -> list[int]:
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


_BROKER_HELP = "kafka://HOST:PORT[,HOST:PORT]; overrides broker.url."


def _shared_broker(cfg, role: str):
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


@app.command()
def server(
    config: Annotated[Path, typer.Argument(help="TOML run configuration.", show_default=False)],
    broker: Annotated[str | None, typer.Option(help=_BROKER_HELP, show_default=False)] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            help="Directory of the per-phase checkpoints; a restarted server resumes from them.",
            show_default=False,
        ),
    ] = None,
    seed: SeedOption = None,
    repeats: RepeatsOption = None,
    budget: BudgetOption = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Override run.output.", show_default=False),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    progress_mode: ProgressOption = ProgressMode.auto,
    keys_dir: KeysDirOption = None,
    namespace: NamespaceOption = None,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = "127.0.0.1",
    serve_after: ServeAfterOption = None,
    dashboard: DashboardOption = False,
    dashboard_port: DashboardPortOption = DASHBOARD_PORT,
) -> None:
    """Run the server of a federated job on a broker (clients run `fedxab client`)."""
    from fedxab.agents.distributed import serve
    from fedxab.results import write_results

    console = _console()
    with _errors_as_exit_code():
        cfg = _load(config, seed, repeats, budget, output, broker, keys_dir, namespace)
        if cfg.broker is None:
            raise FedxabError(f"{cfg.algorithm.name!r} is not a federated algorithm")
        transport = _shared_broker(cfg, "server")
        console.print(
            f"[bold]fedxab server[/bold]: {escape(cfg.algorithm.name)}, "
            f"{cfg.federation.clients:,} clients, on {escape(cfg.broker.url)}; "
            f"{_run_ids(cfg)}",
            soft_wrap=True,
        )
        _print_choice(console, cfg)
        progress = _progress(console, quiet, progress_mode)
        on_run_start, on_progress = _run_callbacks(progress, cfg.run.budget, "rounds")

        page = (cfg.to_dict(), dashboard_port) if dashboard else None
        with _observers(
            console, "server", metrics_port, metrics_host, serve_after, page
        ) as metrics:

            async def service():
                async with transport:
                    return await serve(
                        cfg,
                        transport,
                        checkpoint_dir=checkpoint,
                        progress=on_progress,
                        on_run_start=on_run_start,
                        metrics=metrics,
                    )

            with progress:
                results = _serve(service)
            path = write_results(results, cfg.output_dir)
            if not quiet:
                console.print(_summary_table(results))
                for table in (_clients_table(results), _communication_table(results)):
                    if table is not None:
                        console.print(table)
            console.print(_run_ids(cfg), soft_wrap=True, markup=False)
            console.print(f"results: {path}", soft_wrap=True, markup=False)
            _print_ledger(console, results, cfg)


@app.command()
def client(
    config: Annotated[Path, typer.Argument(help="TOML run configuration.", show_default=False)],
    client_id: Annotated[
        str,
        typer.Option(
            "--client-id", help="Clients this process hosts: N, A-B, or a list such as 0-4,7."
        ),
    ],
    broker: Annotated[str | None, typer.Option(help=_BROKER_HELP, show_default=False)] = None,
    seed: SeedOption = None,
    repeats: RepeatsOption = None,
    budget: BudgetOption = None,
    keys_dir: KeysDirOption = None,
    namespace: NamespaceOption = None,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = "127.0.0.1",
    serve_after: ServeAfterOption = None,
    dashboard: Annotated[
        bool,
        typer.Option(
            "--dashboard",
            help="Serve this site's own live dashboard at http://127.0.0.1:PORT/ "
            "(--dashboard-port): its clients' trials as they happen, their best so far and "
            "the server's recommendation.",
        ),
    ] = False,
    dashboard_port: DashboardPortOption = DASHBOARD_PORT,
    objective: Annotated[
        str | None,
        typer.Option(
            help="This process's own objective, package.module:function (importable here); "
            "overrides objective.function, so each client process may bring its own.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write these clients' own results here: results.json (what each observed, "
            "its epsilon) and each client's trials as CSV. Under local DP only they have them.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Host clients of a federated job on a broker until the server's final answer (with
    --metrics-port, their own metrics: their regret and epsilon only; with --dashboard, their
    own live dashboard: their trials as they happen; with --output, their own results)."""
    from fedxab.agents.distributed import host_clients

    with _errors_as_exit_code():
        cfg = _load(config, seed, repeats, budget, None, broker, keys_dir, namespace)
        if cfg.broker is None or cfg.federation is None:
            raise FedxabError(f"{cfg.algorithm.name!r} is not a federated algorithm")
        if objective is not None:
            cfg = cfg.with_objective_function(objective)
        ids = _parse_client_ids(client_id, cfg.federation.clients)
        transport = _shared_broker(cfg, "client")
        console = _console()
        console.print(
            f"[bold]fedxab client[/bold]: clients {escape(client_id)} of "
            f"{escape(cfg.algorithm.name)} on {escape(cfg.broker.url)}; {_run_ids(cfg)}",
            soft_wrap=True,
        )
        if cfg.privacy is not None:
            from fedxab.privacy.run_ledger import ledger_location

            where = ledger_location(cfg.privacy, cfg.output_dir)
            console.print(_ledger_line(where), soft_wrap=True, markup=False)

        page = (cfg.to_dict(), dashboard_port) if dashboard else None
        with _observers(
            console, "client", metrics_port, metrics_host, serve_after, page
        ) as metrics:

            async def service():
                async with transport:
                    return await host_clients(cfg, transport, ids, metrics=metrics)

            results = _serve(service)
            console.print(
                f"clients {client_id}: {len(results.runs)} run(s) finished on {cfg.broker.url}",
                soft_wrap=True,
                markup=False,
            )
            table = _clients_table(results, always=True)
            if table is not None:
                console.print(table)
            if output is not None:
                from fedxab.results import write_results

                path = write_results(results, output)
                console.print(f"results: {path}", soft_wrap=True, markup=False)


@app.command("broker")
def dev_broker(
    port: Annotated[
        int | None,
        typer.Option(help="Loopback port to listen on (default: a free one).", show_default=False),
    ] = None,
) -> None:
    """Start a local Kafka-compatible dev broker (in-memory) on 127.0.0.1 until Ctrl-C."""
    from fedxab.broker.devbroker import DevBroker

    with _errors_as_exit_code(), DevBroker(port) as dev:
        _console().print(
            f"dev broker listening on {dev.address} (in-memory; Ctrl-C stops it)\n"
            f"use: --broker {dev.url}",
            soft_wrap=True,
            markup=False,
        )
        _interruptible(dev.watch)


def _progress(console: Console, quiet: bool, mode: ProgressMode) -> Progress:
    """The progress display of ``--progress`` (none with ``--quiet``)."""
    return make_progress(console, ProgressMode.none if quiet else mode)


def _run_callbacks(progress: Progress, budget: int, unit: str):
    """``(on_run_start, on_progress)`` for the runners: a new task per run, counting ``unit``
    (evals or rounds per client), then its updates with the cumulative regret and the federated
    runners' details (the phase, the evaluations over all clients and, for private runs, the
    max epsilon over clients so far)."""
    task: list[TaskID] = []

    def count(done: int) -> str:
        return f"{done:,}/{budget:,} {unit}"

    def on_run_start(index: int, total: int, run_seed: int) -> None:
        description = f"run {index + 1}/{total} (seed {run_seed})"
        task.append(progress.add_task(description, total=budget, count=count(0), status=Status()))

    def on_progress(
        done: int,
        total: int,
        cum: float,
        *,
        phase: int | None = None,
        evaluations: int | None = None,
        epsilon: float | None = None,
    ) -> None:
        status = Status(cum, phase, evaluations, epsilon)
        progress.update(task[-1], completed=done, count=count(done), status=status)

    on_progress.details = True  # type: ignore[attr-defined]
    return on_run_start, on_progress


def _cell(column: str, value: object) -> str:
    """A table cell of `fedxab audit`."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "YES" if value else "no"
    if column == "delta":
        return f"{value:g}"
    return _fmt(value) if isinstance(value, float) else str(value)


@app.command()
def audit(
    ledger: Annotated[
        Path, typer.Argument(help="Privacy ledger file (SQLite).", show_default=False)
    ],
    run_id: Annotated[
        str | None, typer.Option("--run", help="Only this run (default: every run).")
    ] = None,
    client_id: Annotated[
        int | None, typer.Option("--client", help="One client's event history.")
    ] = None,
    accountants: Annotated[
        list[str] | None,
        typer.Option(
            "--accountant",
            help="Recompute epsilon with this accountant: rdp, moments, pld, opacus-rdp, "
            "opacus-prv (default: the one the ledger's runs recorded, else rdp). Repeat it to "
            "show several side by side; the first one's epsilon is checked against the budgets.",
            show_default=False,
        ),
    ] = None,
    lifetime: Annotated[
        bool,
        typer.Option(
            "--lifetime",
            help="Only the lifetime spend of each data owner, over all its runs; with --client, "
            "that client's history run by run. With --verify, every run's releases are verified "
            "first.",
        ),
    ] = False,
    delta: Annotated[
        float | None,
        typer.Option(
            help="Delta to account every client at (default: its budget's, else the one its "
            "run recorded)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    rebuild_from: Annotated[
        str | None,
        typer.Option(
            help="First rebuild LEDGER (created if missing) from the run's ledger topic on this "
            "broker, kafka://HOST:PORT; needs --run.",
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[
        str, typer.Option(help="Topic namespace of the run (with --rebuild-from).")
    ] = "fedxab",
    keys_dir: Annotated[
        Path | None,
        typer.Option(
            help="With --rebuild-from, for a run that signs its messages with HMAC: verify each "
            "record with the client keys in this directory (all of them, or a client's own) and "
            "skip those they do not verify.",
            show_default=False,
        ),
    ] = None,
    verify: Annotated[
        Path | None,
        typer.Option(
            "--verify",
            help="Verify every release of LEDGER from its evidence (the signed record it came "
            "from) with the Ed25519 public keys in this directory (public/ of `fedxab keys "
            "generate`); name each release that fails and exit with status 2 if any does. With "
            "--rebuild-from, the rebuild verifies each record with these keys alone.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Audit a privacy ledger: per client, releases, epsilon spent, budget and what remains."""
    import json

    from fedxab.privacy.accountants import fallback_note, make_accountant
    from fedxab.privacy.audit import (
        client_history,
        client_lifetime,
        client_summaries,
        owner_summaries,
    )
    from fedxab.privacy.ledger import PrivacyLedger
    from fedxab.privacy.mirror import HOSTILE, SIGNED_RECORDS_HINT, rebuild_from_broker

    console = _console()
    with _errors_as_exit_code():
        if lifetime and run_id is not None and rebuild_from is None:
            raise FedxabError(
                "--lifetime covers every run of the ledger: leave out --run (with "
                "--rebuild-from, --run names the run to rebuild first)"
            )
        hostile: FedxabError | None = None
        if rebuild_from is not None:
            if run_id is None:
                raise FedxabError("--rebuild-from needs --run: the run whose ledger topic to read")
            rebuilt, clients = rebuild_from_broker(
                ledger, rebuild_from, namespace, run_id, keys_dir, verify
            )
            notes = _console(stderr=True)  # stdout stays the table or the JSON
            if rebuilt.skipped:
                notes.print(
                    f"[yellow]{rebuilt.skipped} ledger record(s) skipped ({rebuilt.summary()})[/]"
                )
                if keys_dir is None and verify is None and rebuilt.reasons.get("malformed"):
                    notes.print(f"[yellow]{SIGNED_RECORDS_HINT}[/]")
            for named in rebuilt.named:
                notes.print(Text(f"hostile ledger record: {named}", style="red"), soft_wrap=True)
            if rebuilt.hostile:
                kinds = ", ".join(
                    f"{rebuilt.reasons[r]} {r}" for r in HOSTILE if rebuilt.reasons[r]
                )
                hostile = FedxabError(
                    f"{rebuilt.hostile} hostile ledger record(s) on the run's ledger topic "
                    f"({kinds}): the audit fails; the ledger keeps only the records that verify "
                    "and agree"
                )
            open_mirrors = sorted(set(clients) - rebuilt.ended)
            if open_mirrors:
                notes.print(
                    f"[yellow]no end marker yet from client(s) {open_mirrors[:10]}: the run is "
                    "still going or they stopped early; what they published is counted[/]"
                )
        if not ledger.is_file():
            raise FedxabError(f"{ledger}: no such ledger file")
        if verify is not None:
            _verify_ledger(ledger, verify, None if lifetime else run_id)
        names = accountants or ["rdp"]
        also = [make_accountant(name) for name in names[1:]]
        tables = []
        with PrivacyLedger(ledger, accountant=names[0]) as book:
            book.verify_totals(None if lifetime else run_id)  # derived data that was edited
            recorded = book.accountants()
            if accountants is None and len(recorded) == 1:  # the accountant the runs used
                names = recorded
                book.accountant = make_accountant(recorded[0])
            if client_id is not None and lifetime:
                rows = client_lifetime(book, client_id, delta)
                columns = ["owner", "run", "releases", "delta", "epsilon_run", "epsilon",
                           "budget_epsilon", "remaining", "over_budget"]  # fmt: skip
                title = (
                    f"client {client_id}'s lifetime, run by run: epsilon of the run, then of the "
                    f"data owner after it ({names[0]} accountant)"
                )
                tables.append((title, columns, rows))
            elif client_id is not None:
                runs = [run_id] if run_id is not None else book.runs()
                if len(runs) != 1:
                    raise FedxabError(f"--client needs --run: the ledger holds runs {runs}")
                rows = client_history(book, runs[0], client_id, delta)
                columns = ["phase", "release", "recorded_at", "noise_multiplier",
                           "sampling_rate", "count", "epsilon_after", "over_budget"]  # fmt: skip
                title = f"run {runs[0]}, client {client_id} ({names[0]} accountant)"
                tables.append((title, columns, rows))
            else:
                spend = ["releases", "delta", "epsilon", *(f"epsilon {a.name}" for a in also),
                         "budget_epsilon", "remaining", "over_budget"]  # fmt: skip
                if not lifetime:
                    rows = client_summaries(book, run_id, delta, also)
                    title = f"privacy ledger {ledger}, per run ({names[0]} accountant)"
                    tables.append((title, ["run", "client", "owner", *spend], rows))
                owners = owner_summaries(book, delta, also) if lifetime or book.owners() else []
                if lifetime or owners:
                    title = f"lifetime spend per data owner ({names[0]} accountant)"
                    tables.append((title, ["owner", "runs", *spend], owners))
            fallbacks = [fallback_note(a) for a in (book.accountant, *also)]
        for note in filter(None, fallbacks):
            _console(stderr=True).print(Text(note, style="bold yellow"), soft_wrap=True)
        if as_json:
            console.print_json(json.dumps(tables[0][2]))
        else:
            for title, columns, rows in tables:
                console.print(_audit_table(title, columns, rows))
        if hostile is not None:
            raise hostile


def _verify_ledger(ledger: Path, public_keys: Path, run_id: str | None) -> None:
    """`fedxab audit --verify`: every release of ``ledger`` (of ``run_id``) verified from its
    evidence with the public keys in ``public_keys`` (:mod:`fedxab.privacy.verify`); each
    failure is printed, and any failure, or nothing to verify, is an error."""
    from fedxab.privacy.ledger import PrivacyLedger
    from fedxab.privacy.verify import verify_ledger
    from fedxab.security.agents import verifier_in

    verifier = verifier_in(public_keys)
    with PrivacyLedger(ledger) as book:
        result = verify_ledger(book, verifier, run_id)
    if result.all_unsigned:
        raise FedxabError(
            f"--verify: {ledger} holds no signed evidence: none of its {result.rows} release(s) "
            "was recorded with a signed record (a run that does not sign its messages, or a "
            "ledger from before evidence was kept), so nothing in it can be verified"
        )
    notes = _console(stderr=True)
    for failure in (*result.failures, *result.whole):
        notes.print(Text(f"verification failed: {failure}", style="red"), soft_wrap=True)
    if not result.rows:
        of_run = "" if run_id is None else f" of run {run_id}"
        raise FedxabError(f"--verify: {ledger} holds no release{of_run} to verify")
    if result.failures or result.whole:
        whole = f", and {len(result.whole)} client(s)' records as a whole" if result.whole else ""
        raise FedxabError(
            f"{len(result.failures)} of {result.rows} release(s){whole} failed verification "
            f"with the public keys in {public_keys}"
        )
    notes.print(
        f"{result.verified} release(s) verified with the public keys in {public_keys}: "
        f"{result.verified - result.by_server} signed by their client, {result.by_server} by "
        f"the server (central DP); {result.closed} client(s) of a run checked as a whole "
        f"against their signed end marker, {result.open} without one (rows checked one by one)",
        soft_wrap=True,
        markup=False,
    )


def _audit_table(title: str, columns: list[str], rows: list[dict]) -> Table:
    """One table of `fedxab audit`: a column ``epsilon NAME`` shows ``epsilons[NAME]``. A cell
    too wide for the terminal folds onto more lines, never loses characters (run ids, owners)."""
    table = Table(title=title)
    for name in columns:
        table.add_column(
            name.replace("_", " "),
            justify="left" if name in {"run", "owner"} else "right",
            overflow="fold",
        )
    for row in rows:
        cells = (
            _cell(c, row["epsilons"][c.split()[1]] if c.startswith("epsilon ") else row[c])
            for c in columns
        )
        table.add_row(*cells, style="bold red" if row.get("over_budget") else None)
    return table


@app.command()
def plot(
    results: Annotated[
        list[Path], typer.Argument(help="One or more results.json files.", show_default=False)
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Image file to write (.png, .pdf, .svg).")
    ] = Path("regret.png"),
    metric: Annotated[
        PlotMetric,
        typer.Option(
            help="Which regret to plot against the round number (local_cumulative_regret, "
            "global/local_simple_regret: federated runs, mean over clients); best_observed: "
            "the clients' best observed value so far (mean over clients; no optimum needed); "
            "or epsilon: the privacy loss of private runs (max over clients) against the phase."
        ),
    ] = "cumulative_regret",
    title: Annotated[str | None, typer.Option(help="Figure title.", show_default=False)] = None,
) -> None:
    """Plot regret, best observed or epsilon curves (mean ± 1 std over runs), one per results
    file."""
    from fedxab.monitoring.plots import plot_regret

    with _errors_as_exit_code():
        path = plot_regret(results, output, metric=metric, title=title)
    _console().print(f"plot: {path}", soft_wrap=True, markup=False)


@app.command()
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

    console = _console()
    with _errors_as_exit_code():
        source = ResultsSource(results, ledger)
        with DashboardServer(source, port=port) as page:
            console.print(
                f"dashboard of {source.path}: {page.url} (Ctrl-C stops)",
                soft_wrap=True,
                markup=False,
            )
            _wait(None)


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
    import time

    from fedxab.reproduce import (
        EXPERIMENTS,
        ReproduceError,
        load_plan_results,
        make_plan,
        pilot,
        plot_plan,
        run_plan,
    )
    from fedxab.reproduce.plan import pilot_budget
    from fedxab.reproduce.tables import write_manifest

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
    exp = plan.experiment
    if plot_only:
        results = load_plan_results(plan)
        path = plot_plan(plan, results)
        if exp.private:
            _print_privacy_utility(console, plan, results, quiet=quiet)
        console.print(f"figure: {path}", soft_wrap=True, markup=False)
        return path

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
    t_pilot = time.perf_counter()
    if quiet:
        timings = pilot(plan)
    else:
        with console.status("timing a pilot run of each algorithm ...") as status:
            timings = pilot(
                plan, lambda pe: status.update(f"timing a pilot run of {pe.entry.label} ...")
            )
    pilot_s = time.perf_counter() - t_pilot
    per_run = {key: t.estimate_s for key, t in timings.items()}
    # entries at once on `jobs` processes: at best the total shared out, at worst the longest
    estimate = plan.seeds * max(sum(per_run.values()) / jobs, max(per_run.values()))
    large = pilot_budget(plan.budget)
    if not quiet:
        if exp.pilot_clients is not None:
            m = plan.entries[0].config.federation.clients
            small, large = next(iter(timings.values())).clients or (m, m)
            names = sorted({pe.config.algorithm.name for pe in plan.entries})
            pilots = f"{small} and {large}" if small < large else f"{large}"
            how = (
                f"1 seed of each of {', '.join(names)} with {pilots} of the {m} clients at the "
                f"full budget, {_duration(pilot_s)}, extrapolated to {m} clients, "
                f"x {plan.seeds} seeds"
            )
        else:
            how = (
                f"1 seed of each algorithm at T = {max(1, large // 4):,} and {large:,}, "
                f"{_duration(pilot_s)}, extrapolated to T = {plan.budget:,} with the measured "
                f"growth, x {plan.seeds} seeds"
            )
        console.print(
            f"estimated time: about {_duration(estimate)} (from timed pilot runs: {how})",
            soft_wrap=True,
        )
        console.print(
            "  per run: "
            + ", ".join(
                f"{pe.entry.label} ~{_duration(per_run[pe.entry.key])}" for pe in plan.entries
            ),
            soft_wrap=True,
            markup=False,
        )

    progress = _progress(console, quiet, progress_mode)
    weights = [max(per_run[pe.entry.key], 1e-6) for pe in plan.entries]
    total = plan.seeds * sum(weights)
    index = {pe.entry.key: i for i, pe in enumerate(plan.entries)}
    task = progress.add_task(exp.name, total=total, count=f"0/{plan.runs} runs", status=Status())

    def on_progress(pe, k: int, done: int, horizon: int, **details) -> None:
        i = index[pe.entry.key]
        before = plan.seeds * sum(weights[:i]) + k * weights[i]
        completed = before + weights[i] * min(done, horizon) / horizon
        finished = i * plan.seeds + k + (1 if done >= horizon else 0)
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
        progress.update(task, completed=total, description=exp.name)
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


@app.command()
def reproduce(
    name: Annotated[
        str | None,
        typer.Argument(help="Experiment (figure) name; see --list.", show_default=False),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", help="List the experiments with a description and exit.")
    ] = False,
    seeds: Annotated[
        int | None,
        typer.Option(
            help="Runs per algorithm (seeds 0..N-1); default: the experiment's own (10, 5 for "
            "dpftsde-landmine).",
            show_default=False,
        ),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(help="Override T, evaluations per client (per player).", show_default=False),
    ] = None,
    clients: Annotated[
        int | None, typer.Option(help="Override M, the number of clients.", show_default=False)
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Results directory (default: results/reproduce/NAME)."),
    ] = None,
    figure: Annotated[
        Path | None, typer.Option(help="Figure file (default: OUTPUT/NAME.png).")
    ] = None,
    plot_only: Annotated[
        bool, typer.Option("--plot-only", help="Redraw the figure from OUTPUT's results.")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No estimate, progress bar or table.")
    ] = False,
    progress_mode: ProgressOption = ProgressMode.auto,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Run this many algorithms at once, each in its own process (same results; "
            "the progress bar then moves when an algorithm is done).",
        ),
    ] = 1,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-w",
            min=1,
            help="Host each run's clients in this many processes ([run] workers; same "
            "results). Uses jobs x workers cores.",
        ),
    ] = None,
) -> None:
    """Reproduce a figure of the federated papers: every algorithm over N seeds, results.json
    per algorithm and a PNG with mean ± 1 std bands (see fedxab.reproduce)."""
    with _errors_as_exit_code():
        _reproduce_command(
            _console(),
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


keys_app = typer.Typer(
    name="keys",
    help="Message-signing keys: an Ed25519 key pair per party, or one HMAC key per client.",
    no_args_is_help=True,
)
app.add_typer(keys_app)


@keys_app.command("generate")
def keys_generate(
    clients: Annotated[
        int, typer.Option("--clients", min=1, help="Number of clients N (client-0 .. client-N-1).")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out", help="Directory for the key files (created, owner-only, if missing)."
        ),
    ],
    scheme: Annotated[
        Scheme,
        typer.Option(
            "--scheme",
            help="ed25519: a key pair for the server and each client; the server holds the "
            "clients' public keys only (it cannot sign as a client) and anyone verifies with "
            "the public keys. hmac: one secret key per client, shared with the server (which "
            "could then sign as any client).",
        ),
    ] = "ed25519",
    if_missing: Annotated[
        bool,
        typer.Option(
            "--if-missing",
            help="If all the key files are already there (and load), write nothing and succeed "
            "(for provisioning scripts that run at every start).",
        ),
    ] = False,
) -> None:
    """Write the message-signing keys, private keys readable by their owner only (mode 600);
    existing key files are never overwritten, and no key is ever printed. Ed25519 (default):
    private/<party>.key and public/<party>.pub for the server and each client, and who gets
    which. HMAC: client-0.key .. client-{N-1}.key; the server needs every key, each client its
    own only."""
    from fedxab.broker.codec import client_sender
    from fedxab.security.keypairs import (
        PRIVATE_DIR,
        PUBLIC_DIR,
        generate_keypairs,
        keypair_paths,
        load_private_key,
        load_public_key,
    )
    from fedxab.security.keys import generate_keys, key_file_name, load_key

    ed25519 = scheme == "ed25519"
    console = _console()
    with _errors_as_exit_code():
        if ed25519:
            paths = keypair_paths(clients, out)
            loaders = {".key": load_private_key, ".pub": load_public_key}
        else:
            paths = [out / key_file_name(client_sender(m)) for m in range(clients)]
            loaders = {".key": load_key}
        if if_missing and all(path.exists() for path in paths):
            for path in paths:
                loaders[path.suffix](path, path.stem)  # a broken key file is an error
            console.print(
                f"{len(paths)} key file(s) already in {out}: nothing written",
                soft_wrap=True,
                markup=False,
            )
            return
        paths = (generate_keypairs if ed25519 else generate_keys)(clients, out)
    for path in paths:
        console.print(f"key: {path}", soft_wrap=True, markup=False)
    if ed25519:
        private, public = out / PRIVATE_DIR, out / PUBLIC_DIR
        lines = [
            f"{clients + 1} Ed25519 key pairs written (private keys mode 600, public keys 644); "
            "a private key never leaves its party. Give the",
            f"  server:   {private / 'server.key'} and {public} (every client's public key)",
            f"  client m: {private / 'client-m.key'} and {public / 'server.pub'}",
            f"  auditor:  {public} (public keys only)",
        ]
    else:
        lines = [
            f"{len(paths)} key file(s) written (mode 600): give every key to the server and "
            "each client its own key only"
        ]
    for line in lines:
        console.print(line, soft_wrap=True, markup=False)


def main() -> None:
    """Entry point of the ``fedxab`` console script."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
