"""``fedxab keys generate``: the message-signing keys."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedxab.cli.common import errors_as_exit_code, make_console
from fedxab.security.signing import Scheme

_ClientsOption = Annotated[
    int, typer.Option("--clients", min=1, help="Number of clients N (client-0 .. client-N-1).")
]
_OutOption = Annotated[
    Path,
    typer.Option("--out", help="Directory for the key files (created, owner-only, if missing)."),
]
_SchemeOption = Annotated[
    Scheme,
    typer.Option(
        "--scheme",
        help="ed25519: a key pair for the server and each client; the server holds the "
        "clients' public keys only (it cannot sign as a client) and anyone verifies with "
        "the public keys. hmac: one secret key per client, shared with the server (which "
        "could then sign as any client).",
    ),
]
_IfMissingOption = Annotated[
    bool,
    typer.Option(
        "--if-missing",
        help="If all the key files are already there (and load), write nothing and succeed "
        "(for provisioning scripts that run at every start).",
    ),
]


def generate(
    clients: _ClientsOption,
    out: _OutOption,
    scheme: _SchemeOption = "ed25519",
    if_missing: _IfMissingOption = False,
) -> None:
    """Write the message-signing keys, private keys readable by their owner only (mode 600);
    existing key files are never overwritten, and no key is ever printed. Ed25519 (default):
    private/<party>.key and public/<party>.pub for the server and each client, and who gets
    which. HMAC: client-0.key .. client-{N-1}.key; the server needs every key, each client its
    own only."""
    from fedxab.security.provision import generate_key_files, present_key_files

    console = make_console()
    with errors_as_exit_code():
        present = present_key_files(scheme, clients, out) if if_missing else None
        if present is not None:
            console.print(
                f"{len(present)} key file(s) already in {out}: nothing written",
                soft_wrap=True,
                markup=False,
            )
            return
        paths = generate_key_files(scheme, clients, out)
    for path in paths:
        console.print(f"key: {path}", soft_wrap=True, markup=False)
    for line in _handout(scheme, clients, out, paths):
        console.print(line, soft_wrap=True, markup=False)


def _handout(scheme: Scheme, clients: int, out: Path, paths: list[Path]) -> list[str]:
    """Who gets which of the key files written."""
    from fedxab.security.keypairs import PRIVATE_DIR, PUBLIC_DIR

    if scheme != "ed25519":
        return [
            f"{len(paths)} key file(s) written (mode 600): give every key to the server and "
            "each client its own key only"
        ]
    private, public = out / PRIVATE_DIR, out / PUBLIC_DIR
    return [
        f"{clients + 1} Ed25519 key pairs written (private keys mode 600, public keys 644); "
        "a private key never leaves its party. Give the",
        f"  server:   {private / 'server.key'} and {public} (every client's public key)",
        f"  client m: {private / 'client-m.key'} and {public / 'server.pub'}",
        f"  auditor:  {public} (public keys only)",
    ]
