"""The tables and lines that show a job's results."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text


def fmt(value: float | None, digits: int = 4) -> str:
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


def summary_table(results) -> Table:
    """Per run and mean/std: evaluations, regrets, recommendation, wall time.

    Federated runs show the local cumulative regret instead of the average regret (which is
    the cumulative regret divided by T); their communication has its own table.
    """
    federated = any(r.communication is not None for r in results.runs)
    table = Table(
        title=f"{results.algorithm} on {results.objective.get('name')}"
        f" (f* = {fmt(results.objective.get('optimum_value'), 6)})",
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
            fmt(r.final_local_cumulative_regret, 3) if federated else fmt(r.final_average_regret, 5)
        )
        if r.is_withheld("cumulative_regret"):
            cum = second = _WITHHELD
        else:
            cum = fmt(r.final_cumulative_regret, 3)
        table.add_row(
            str(r.seed),
            f"{r.evaluations:,}",
            cum,
            second,
            fmt(r.simple_regret, 5),
            _fmt_at(r, r.recommendation),
            f"{r.wall_time_s:.2f}",
        )
    if len(results.runs) > 1:
        _add_mean_and_std(table, results.summary, federated)
    short = [_coverage_note(r) for r in results.runs if r.regret_coverage is not None]
    if short:
        table.caption = "incomplete regret: " + "; ".join(short)
        table.caption_justify = "left"
        table.caption_style = "bold yellow"
    return table


def recommendation_lines(results, limit: int = 10) -> list[str]:
    """Each run's recommendation by name, whole, for runs with a typed space (the summary
    table's column is cut to the terminal's width): ``recommendation (seed 0): C=181.4, ...``;
    at most ``limit`` runs."""
    return [
        f"recommendation (seed {r.seed}): {_fmt_at(r, r.recommendation)}"
        for r in results.runs[:limit]
        if r.recommendation is not None and r.recommendation_params is not None
    ]


def _add_mean_and_std(table: Table, s: Mapping[str, Any], federated: bool) -> None:
    """The mean and std rows of the summary table, from ``RunResults.summary`` ``s``."""
    table.add_section()
    for stat in ("mean", "std"):
        if federated:
            second = fmt((s.get("local_cumulative_regret") or {}).get(stat), 3)
        else:
            second = fmt(s["average_regret"][stat], 5)
        table.add_row(
            stat,
            "",
            fmt(s["cumulative_regret"][stat], 3),
            second,
            fmt(s["simple_regret"][stat], 5),
            "",
            "",
            style="bold" if stat == "mean" else None,
        )


_CLIENT_ROWS = 10


_WITHHELD = "withheld (local DP)"
"""What a table shows for a value this party does not have under local DP."""


def clients_table(results, always: bool = False) -> Table | None:
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
            fmt(c.best_value, 6),
            "-" if c.best_point is None else _fmt_at(run, c.best_point),
            "-" if c.recommendation is None else _fmt_at(run, c.recommendation),
        )
    rest = [c.best_value for c in run.clients[_CLIENT_ROWS:] if c.best_value is not None]
    if rest:
        table.caption = (
            f"{len(run.clients) - _CLIENT_ROWS:,} more clients: best observed from "
            f"{fmt(min(rest), 6)} to {fmt(max(rest), 6)}"
        )
        table.caption_justify = "left"
    return table


def _best_release_text(release: Mapping[str, Any]) -> str:
    """A client's best value as the server has it under ``[privacy] release_best``: noised,
    with its epsilon and noise sd, or why it was refused."""
    if "refused" in release:
        return f"best value (DP): refused: {release['refused']}"
    return (
        f"best value (DP, epsilon {release['epsilon']:g}): {fmt(release['best_value_dp'], 6)} "
        f"(noise sd {fmt(release['sigma'], 3)})"
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


def communication_table(results) -> Table | None:
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


def privacy_table(results) -> Table | None:
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
            fmt(p["max_epsilon"]),
            "-" if budget is None else fmt(budget),
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


def print_choice(console: Console, cfg) -> None:
    """``algorithm auto: NAME (settings): reason`` when the config asked for ``"auto"``."""
    choice = cfg.algorithm_choice
    if choice is not None:
        settings = ", ".join(f"{k} = {v}" for k, v in choice["params"].items())
        console.print(
            f"algorithm auto: {choice['name']} ({settings}): {choice['reason']}",
            soft_wrap=True,
            markup=False,
        )


def print_ledger(console: Console, results, cfg=None) -> None:
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
        console.print(ledger_line(blocks[0].get("ledger")), soft_wrap=True, markup=False)
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


def print_results(console: Console, results, cfg, path: Path, *, quiet: bool, server: bool) -> None:
    """What a job prints at its end: the summary and the other tables (unless ``quiet``; a
    ``server`` process shows no privacy table), the run ids, where the results are, and the
    privacy ledger (:func:`print_ledger`; a server names its own ledger topic)."""
    if not quiet:
        console.print(summary_table(results))
        for line in recommendation_lines(results):
            console.print(line, soft_wrap=True, markup=False)
        tables = [clients_table(results), communication_table(results)]
        if not server:
            tables.append(privacy_table(results))
        for table in tables:
            if table is not None:
                console.print(table)
    console.print(run_ids(cfg, results), soft_wrap=True, markup=False)
    console.print(f"results: {path}", soft_wrap=True, markup=False)
    print_ledger(console, results, cfg if server else None)


def ledger_line(where: str | None) -> str:
    """The line saying where a run's privacy ledger is (None: in memory)."""
    if where is None:
        return "privacy ledger: in memory (set [privacy] ledger to keep it)"
    return f"privacy ledger: {where} (audit: fedxab audit {where})"


def print_finished_seeds(
    console: Console, finished, quiet: bool, continued: Mapping[int, Any] | None = None
) -> None:
    """Say which seeds a job takes from disk (``--resume``), which it continues to a larger
    budget (``continued``: by seed, a :class:`~fedxab.run.continuation.Continuation`), or
    which finished ones it will run again (without it)."""
    continued = continued or {}
    if not quiet and continued:
        before = next(iter(continued.values())).budget
        console.print(
            f"continuing: seed(s) {', '.join(map(str, sorted(continued)))} from budget "
            f"{before:,} ({finished.directory})",
            soft_wrap=True,
            markup=False,
        )
    seeds = [s for s in finished.on_disk() if s not in continued]
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


def run_ids(cfg, results=None) -> str:
    """``run id(s) ...``: what a server and its clients share (:mod:`fedxab.run.identity`);
    with ``results``, the ids its runs carry (a continued run keeps the id of the run it
    continues, :mod:`fedxab.run.continuation`)."""
    from fedxab.run.identity import run_id_for

    if results is not None:
        ids = [run.run_id or run_id_for(cfg, run.seed) for run in results.runs]
    else:
        ids = [run_id_for(cfg, seed) for seed in cfg.run.seeds]
    return f"run id{'s' if len(ids) > 1 else ''} {', '.join(ids)}"
