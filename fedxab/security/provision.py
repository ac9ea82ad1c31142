"""The key files of a signing scheme, as ``fedxab keys generate`` provisions them: which files a
directory holds for N clients, whether they are all there and load, and writing them all or
nothing. Ed25519: a key pair per party (:mod:`fedxab.security.keypairs`); HMAC: one secret key
per client (:mod:`fedxab.security.keys`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedxab.broker.codec import client_sender
from fedxab.security.keypairs import (
    generate_keypairs,
    keypair_paths,
    load_private_key,
    load_public_key,
)
from fedxab.security.keys import generate_keys, key_file_name, load_key
from fedxab.security.signing import Scheme

__all__ = ["generate_key_files", "key_file_paths", "present_key_files"]


def key_file_paths(scheme: Scheme, n_clients: int, out_dir: str | os.PathLike) -> list[Path]:
    """Every key file of ``scheme`` for ``n_clients`` clients in ``out_dir``, in the order
    :func:`generate_key_files` writes them."""
    if scheme == "ed25519":
        return keypair_paths(n_clients, out_dir)
    return [Path(out_dir) / key_file_name(client_sender(m)) for m in range(n_clients)]


def present_key_files(
    scheme: Scheme, n_clients: int, out_dir: str | os.PathLike
) -> list[Path] | None:
    """The key files of :func:`key_file_paths` if every one is there, each loaded (a broken key
    file raises its error); None if any is missing."""
    paths = key_file_paths(scheme, n_clients, out_dir)
    if not all(path.exists() for path in paths):
        return None
    loaders: dict[str, Callable[[Path, str], Any]] = (
        {".key": load_private_key, ".pub": load_public_key}
        if scheme == "ed25519"
        else {".key": load_key}
    )
    for path in paths:
        loaders[path.suffix](path, path.stem)
    return paths


def generate_key_files(scheme: Scheme, n_clients: int, out_dir: str | os.PathLike) -> list[Path]:
    """Write the key files of ``scheme`` (:func:`~fedxab.security.keypairs.generate_keypairs`,
    :func:`~fedxab.security.keys.generate_keys`); if any already exists, nothing is written and
    a :class:`~fedxab.errors.FedxabError` names it. Returns the paths written."""
    generate = generate_keypairs if scheme == "ed25519" else generate_keys
    return generate(n_clients, out_dir)
