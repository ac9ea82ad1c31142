"""``fedxab audit``: a privacy ledger, per client and per data owner."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from fedxab.cli.common import errors_as_exit_code, make_console
from fedxab.cli.render import fmt
from fedxab.errors import FedxabError

if TYPE_CHECKING:
    from fedxab.security.signing import Signer


def _cell(column: str, value: object) -> str:
    """A table cell of `fedxab audit`."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "YES" if value else "no"
    if column == "delta":
        return f"{value:g}"
    return fmt(value) if isinstance(value, float) else str(value)


_LedgerArgument = Annotated[
    Path, typer.Argument(help="Privacy ledger file (SQLite).", show_default=False)
]
_RunOption = Annotated[
    str | None, typer.Option("--run", help="Only this run (default: every run).")
]
_ClientOption = Annotated[int | None, typer.Option("--client", help="One client's event history.")]
_AccountantOption = Annotated[
    list[str] | None,
    typer.Option(
        "--accountant",
        help="Recompute epsilon with this accountant: rdp, moments, pld, opacus-rdp, "
        "opacus-prv (default: the one the ledger's runs recorded, else rdp). Repeat it to "
        "show several side by side; the first one's epsilon is checked against the budgets.",
        show_default=False,
    ),
]
_LifetimeOption = Annotated[
    bool,
    typer.Option(
        "--lifetime",
        help="Only the lifetime spend of each data owner, over all its runs; with --client, "
        "that client's history run by run. With --verify, every run's releases are verified "
        "first.",
    ),
]
_DeltaOption = Annotated[
    float | None,
    typer.Option(
        help="Delta to account every client at (default: its budget's, else the one its "
        "run recorded)."
    ),
]
_JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
_RebuildFromOption = Annotated[
    str | None,
    typer.Option(
        help="First rebuild LEDGER (created if missing) from the run's ledger topic on this "
        "broker, kafka://HOST:PORT; needs --run.",
        show_default=False,
    ),
]
_NamespaceOption = Annotated[
    str, typer.Option(help="Topic namespace of the run (with --rebuild-from).")
]
_KeysDirOption = Annotated[
    Path | None,
    typer.Option(
        help="With --rebuild-from, for a run that signs its messages with HMAC: verify each "
        "record with the client keys in this directory (all of them, or a client's own) and "
        "skip those they do not verify.",
        show_default=False,
    ),
]
_VerifyOption = Annotated[
    Path | None,
    typer.Option(
        "--verify",
        help="Verify every release of LEDGER from its evidence (the signed record it came "
        "from) with the Ed25519 public keys in this directory (public/ of `fedxab keys "
        "generate`); name each release that fails and exit with status 2 if any does. With "
        "--rebuild-from, the rebuild verifies each record with these keys alone.",
        show_default=False,
    ),
]
_ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="With --rebuild-from: a job's TOML config whose [broker] TLS and SASL settings "
        "(OAUTHBEARER token function, SASL password from the environment) and record size "
        "reach the broker.",
        show_default=False,
    ),
]


def audit(
    ledger: _LedgerArgument,
    run_id: _RunOption = None,
    client_id: _ClientOption = None,
    accountants: _AccountantOption = None,
    lifetime: _LifetimeOption = False,
    delta: _DeltaOption = None,
    as_json: _JsonOption = False,
    rebuild_from: _RebuildFromOption = None,
    namespace: _NamespaceOption = "fedxab",
    keys_dir: _KeysDirOption = None,
    verify: _VerifyOption = None,
    config: _ConfigOption = None,
) -> None:
    """Audit a privacy ledger: per client, releases, epsilon spent, budget and what remains."""
    import json

    from fedxab.privacy.audit import audit_ledger

    console = make_console()
    with errors_as_exit_code():
        if lifetime and run_id is not None and rebuild_from is None:
            raise FedxabError(
                "--lifetime covers every run of the ledger: leave out --run (with "
                "--rebuild-from, --run names the run to rebuild first)"
            )
        hostile = None
        if rebuild_from is not None:
            if run_id is None:
                raise FedxabError("--rebuild-from needs --run: the run whose ledger topic to read")
            hostile = _rebuild(ledger, rebuild_from, namespace, run_id, keys_dir, verify, config)
        if not ledger.is_file():
            raise FedxabError(f"{ledger}: no such ledger file")
        if verify is not None:
            _verify_ledger(ledger, verify, None if lifetime else run_id)
        report = audit_ledger(
            ledger,
            run=run_id,
            client=client_id,
            lifetime=lifetime,
            delta=delta,
            accountants=accountants,
        )
        for note in report.notes:
            make_console(stderr=True).print(Text(note, style="bold yellow"), soft_wrap=True)
        if as_json:
            console.print_json(json.dumps(report.tables[0].rows))
        else:
            for table in report.tables:
                console.print(_audit_table(table.title, table.columns, table.rows))
        if hostile is not None:
            raise hostile


SIGNED_RECORDS_HINT = (
    "the records of a run that signs its messages are read with --verify DIR (Ed25519: the "
    "public keys) or --keys-dir DIR (HMAC: the client keys)"
)
"""What to pass to ``fedxab audit --rebuild-from`` when a signed run's records were refused."""


def _rebuild(
    ledger: Path,
    broker: str,
    namespace: str,
    run_id: str,
    keys_dir: Path | None,
    verify: Path | None,
    config: Path | None = None,
) -> FedxabError | None:
    """``--rebuild-from``: rebuild ``ledger`` from the run's ledger topic
    (:func:`~fedxab.agents.ledger_mirror.rebuild_from_broker`), say on stderr what was skipped,
    named hostile or not yet ended; return the error that fails the audit once it is shown
    (hostile records), if any."""
    from fedxab.agents.ledger_mirror import NothingToRebuild, rebuild_from_broker
    from fedxab.config import load_config
    from fedxab.privacy.mirror import HOSTILE

    if not broker.startswith("kafka://"):
        raise FedxabError(f"--rebuild-from: expected kafka://HOST:PORT, got {broker!r}")
    settings = None if config is None else load_config(config).broker
    if config is not None and settings is None:
        raise FedxabError(f"--config: {config} is a single-agent job: it has no [broker] section")
    signer = _ledger_verifier(keys_dir, verify)
    try:
        rebuilt, clients = rebuild_from_broker(ledger, broker, namespace, run_id, signer, settings)
    except NothingToRebuild as exc:
        if not exc.records:
            raise FedxabError(f"--rebuild-from: {exc} (check --run and --namespace)") from None
        hint = "" if signer is not None else f"; {SIGNED_RECORDS_HINT}"
        raise FedxabError(f"--rebuild-from: {exc}{hint}") from None
    notes = make_console(stderr=True)  # stdout stays the table or the JSON
    if rebuilt.skipped:
        notes.print(f"[yellow]{rebuilt.skipped} ledger record(s) skipped ({rebuilt.summary()})[/]")
        if keys_dir is None and verify is None and rebuilt.reasons.get("malformed"):
            notes.print(f"[yellow]{SIGNED_RECORDS_HINT}[/]")
    for named in rebuilt.named:
        notes.print(Text(f"hostile ledger record: {named}", style="red"), soft_wrap=True)
    hostile = None
    if rebuilt.hostile:
        kinds = ", ".join(f"{rebuilt.reasons[r]} {r}" for r in HOSTILE if rebuilt.reasons[r])
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
    return hostile


def _ledger_verifier(keys_dir: Path | None, verify: Path | None) -> Signer | None:
    """What checks the ledger records' signatures: the run's HMAC client keys (``--keys-dir``)
    or its Ed25519 public keys (``--verify``), at most one; None without keys."""
    from fedxab.security.agents import keyring_in, verifier_in
    from fedxab.security.signing import HmacSigner

    if keys_dir is not None and verify is not None:
        raise FedxabError(
            "--keys-dir (HMAC client keys) and --verify (Ed25519 public keys): give one, the "
            "keys of the run's scheme"
        )
    if verify is not None:
        return verifier_in(verify)
    if keys_dir is None:
        return None
    keyring = keyring_in(keys_dir)
    return HmacSigner(keyring, max(keyring) + 1)  # ledger records carry one tag each


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


def _audit_table(title: str, columns: list[str], rows: list[dict[str, Any]]) -> Table:
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
