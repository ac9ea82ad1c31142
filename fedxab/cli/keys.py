"""``fedxab keys generate``: the message-signing keys."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedxab.cli.common import errors_as_exit_code, make_console
from fedxab.security.signing import Scheme


def generate(
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
    console = make_console()
    with errors_as_exit_code():
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
