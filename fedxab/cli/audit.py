"""``fedxab audit``: a privacy ledger, per client and per data owner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from fedxab.cli.common import errors_as_exit_code, make_console
from fedxab.cli.render import fmt
from fedxab.errors import FedxabError


def _cell(column: str, value: object) -> str:
    """A table cell of `fedxab audit`."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "YES" if value else "no"
    if column == "delta":
        return f"{value:g}"
    return fmt(value) if isinstance(value, float) else str(value)


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

    console = make_console()
    with errors_as_exit_code():
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
            notes = make_console(stderr=True)  # stdout stays the table or the JSON
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
            make_console(stderr=True).print(Text(note, style="bold yellow"), soft_wrap=True)
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
    notes = make_console(stderr=True)
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
