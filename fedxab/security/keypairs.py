"""Ed25519 key pairs, one per party: generation, key files, loading, fingerprints.

Every party of a federation -- each client (``"client-N"``) and the server (``"server"``), the
envelope sender names of :mod:`fedxab.broker.codec` -- has its own Ed25519 key pair (RFC 8032,
through the ``cryptography`` package). The private key never leaves its party; the public key is
given to every party that verifies its messages:

- the **server** holds its private key and every client's public key;
- a **client agent** holds the private keys of the clients it hosts and the server's public key;
- an **auditor** holds public keys only, and verifies every signed record with them.

Threat model: nobody but client ``m`` holds ``m``'s private key, so nobody else -- the server
included -- can make a message or a ledger record that verifies as ``m``'s. (With the shared
keys of the HMAC scheme, :mod:`fedxab.security.keys`, the server holds every client's key and
could forge any of them.) A record the server writes about client ``m`` (central DP) is signed
with the server's key and says so.

:func:`generate_keypairs` writes the layout every party's ``keys_dir`` follows::

    DIR/private/server.key     DIR/private/client-0.key ...   (0o700 directory, 0o600 files)
    DIR/public/server.pub      DIR/public/client-0.pub  ...   (0o755 directory, 0o644 files)

A key file is two lines of text: a header naming the party, the scheme and the half, then the
32 key bytes in hex (a private key's seed, or the public key)::

    fedxab-key v1 party=client-3 scheme=ed25519 private
    <64 hex digits>

Private key files are created owner-only with ``O_EXCL`` and refused by :func:`load_private_key`
when their group or others may read them (:func:`fedxab.security.keys.read_key_file`); public
key files may be world-readable. A :class:`PrivateKey` never shows its bytes (its repr names the
party and its public key's fingerprint), and no error of this module quotes a key file's content.
A key's **fingerprint** (:attr:`PublicKey.fingerprint`, also a private key's) names it in logs
and lets two parties compare keys out of band.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from fedxab.broker.codec import SERVER, client_sender
from fedxab.errors import FedxabError
from fedxab.security.keys import check_clients, check_party, read_key_file, write_key_files

__all__ = [
    "ED25519_BYTES",
    "ED25519_SIG_BYTES",
    "PRIVATE_DIR",
    "PUBLIC_DIR",
    "PrivateKey",
    "PublicKey",
    "generate_keypairs",
    "keypair_paths",
    "load_private_key",
    "load_public_key",
    "private_key_path",
    "public_key_path",
    "public_keys_in",
]

ED25519_BYTES = 32
"""Length of an Ed25519 private key (its seed) and of a public key, in bytes."""
ED25519_SIG_BYTES = 64
"""Length of an Ed25519 signature, in bytes."""

PRIVATE_DIR = "private"
"""The subdirectory of a keys directory that holds private keys (``<party>.key``)."""
PUBLIC_DIR = "public"
"""The subdirectory of a keys directory that holds public keys (``<party>.pub``)."""

_PARTY = r"server|client-[0-9]{1,18}"
_PARTY_RE = re.compile(_PARTY)
_HEADER_RE = re.compile(rf"fedxab-key v1 party=({_PARTY}) scheme=ed25519 (private|public)")
_HEX_RE = re.compile(rf"[0-9a-f]{{{2 * ED25519_BYTES}}}")
_PUBLIC_FILE_RE = re.compile(rf"({_PARTY})\.pub")


def _check_party(party: str) -> str:
    return check_party(party, _PARTY_RE, "'server' or 'client-<id>'")


class PublicKey:
    """A party's Ed25519 public key: verifies that party's signatures."""

    __slots__ = ("_key", "party", "raw")

    def __init__(self, party: str, raw: bytes) -> None:
        _check_party(party)
        if not isinstance(raw, bytes) or len(raw) != ED25519_BYTES:
            raise FedxabError(f"a public key of {party!r} must be {ED25519_BYTES} bytes")
        self.party = party
        self.raw = raw
        self._key = Ed25519PublicKey.from_public_bytes(raw)

    def verify(self, signature: bytes, data: bytes) -> bool:
        """Whether ``signature`` is this party's Ed25519 signature of ``data``."""
        try:
            self._key.verify(signature, data)
        except InvalidSignature:
            return False
        return True

    @property
    def fingerprint(self) -> str:
        """32 hex digits naming this key (a SHA-256 of it, 128 bits): two parties holding the
        same public key show the same fingerprint, and so does its private key."""
        return hashlib.sha256(b"fedxab public key fingerprint\x00" + self.raw).hexdigest()[:32]

    def __repr__(self) -> str:
        return f"PublicKey(party={self.party!r}, ed25519, fingerprint={self.fingerprint})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PublicKey):
            return NotImplemented
        return self.party == other.party and self.raw == other.raw

    __hash__ = None  # type: ignore[assignment]


class PrivateKey:
    """A party's Ed25519 private key; its bytes are only reachable through :meth:`reveal`.

    ``repr``/``str`` show the party and the public key's fingerprint only, so a key logged or
    printed by mistake leaks nothing. It is deliberately not hashable, and cannot be pickled.
    """

    __slots__ = ("_key", "party", "public")

    def __init__(self, party: str, seed: bytes) -> None:
        _check_party(party)
        if not isinstance(seed, bytes) or len(seed) != ED25519_BYTES:
            raise FedxabError(f"a private key of {party!r} must be {ED25519_BYTES} bytes")
        self.party = party
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self.public = PublicKey(party, self._key.public_key().public_bytes_raw())
        """The matching public key."""

    @classmethod
    def generate(cls, party: str) -> PrivateKey:
        """A new random key pair's private key for ``party`` (from the operating system's
        random source, as :mod:`secrets`)."""
        return cls(party, Ed25519PrivateKey.generate().private_bytes_raw())

    def sign(self, data: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``data``."""
        return self._key.sign(data)

    def reveal(self) -> bytes:
        """The 32-byte seed (for writing the key file only: never print, log or store it
        elsewhere)."""
        return self._key.private_bytes_raw()

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the public key (:attr:`PublicKey.fingerprint`)."""
        return self.public.fingerprint

    def __repr__(self) -> str:
        return (
            f"PrivateKey(party={self.party!r}, ed25519, fingerprint={self.fingerprint}, "
            f"<{ED25519_BYTES} bytes hidden>)"
        )

    __str__ = __repr__

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):  # no pickling: a pickle would carry the bytes around silently
        raise TypeError("a PrivateKey cannot be pickled")


def private_key_path(keys_dir: str | os.PathLike, party: str) -> Path:
    """``keys_dir/private/<party>.key``."""
    return Path(keys_dir) / PRIVATE_DIR / f"{_check_party(party)}.key"


def public_key_path(keys_dir: str | os.PathLike, party: str) -> Path:
    """``keys_dir/public/<party>.pub``."""
    return Path(keys_dir) / PUBLIC_DIR / f"{_check_party(party)}.pub"


def _key_text(party: str, half: str, raw: bytes) -> bytes:
    return f"fedxab-key v1 party={party} scheme=ed25519 {half}\n{raw.hex()}\n".encode("ascii")


def _parties(n_clients: int) -> list[str]:
    return [SERVER, *(client_sender(m) for m in range(check_clients(n_clients)))]


def keypair_paths(n_clients: int, out_dir: str | os.PathLike) -> list[Path]:
    """Every key file :func:`generate_keypairs` writes in ``out_dir``: the private keys (server
    first, then the clients in order), then the public keys in the same order."""
    parties = _parties(n_clients)
    return [private_key_path(out_dir, p) for p in parties] + [
        public_key_path(out_dir, p) for p in parties
    ]


def generate_keypairs(n_clients: int, out_dir: str | os.PathLike) -> list[Path]:
    """Write a key pair for the server and for each of ``n_clients`` clients in ``out_dir``:
    ``private/<party>.key`` (mode 0o600; ``out_dir`` and ``private/``, if created, 0o700) and
    ``public/<party>.pub`` (mode 0o644, ``public/`` 0o755).

    If any of the files already exists, nothing is written and a :class:`FedxabError` names it.
    Returns the paths written (:func:`keypair_paths`' order). Give the server
    ``private/server.key`` and ``public/``; client ``m`` ``private/client-m.key`` and
    ``public/server.pub``; an auditor ``public/``.
    """
    keys = [PrivateKey.generate(party) for party in _parties(n_clients)]
    files = [
        (private_key_path(out_dir, k.party), _key_text(k.party, "private", k.reveal()), 0o600)
        for k in keys
    ]
    files += [
        (public_key_path(out_dir, k.party), _key_text(k.party, "public", k.public.raw), 0o644)
        for k in keys
    ]
    out = Path(out_dir)
    return write_key_files(
        files, [(out, 0o700), (out / PRIVATE_DIR, 0o700), (out / PUBLIC_DIR, 0o755)]
    )


def _parse(text: str, where: str, half: str, party: str | None) -> tuple[str, bytes]:
    """The party and key bytes of an Ed25519 key file's ``text`` (``half``: private or public);
    ``where`` names the source in errors (never the text)."""
    lines = text.strip().splitlines()
    header = _HEADER_RE.fullmatch(lines[0].strip()) if lines else None
    if header is None or len(lines) != 2:
        if lines and lines[0].startswith("fedxab-key v1 party=") and "scheme=" not in lines[0]:
            raise FedxabError(
                f"{where}: an HMAC key, not an Ed25519 {half} key (a run with HMAC keys reads "
                'client-N.key files in its keys_dir itself; set [security] scheme = "hmac" '
                "or leave it out)"
            )
        raise FedxabError(
            f"{where}: not a fedxab Ed25519 key file (expected a line 'fedxab-key v1 "
            f"party=NAME scheme=ed25519 {half}' and a line of hex digits; regenerate it with "
            "`fedxab keys generate`)"
        )
    if header.group(2) != half:
        raise FedxabError(
            f"{where}: this is a {header.group(2)} key, expected a {half} key "
            f"(private keys are private/<party>.key, public keys public/<party>.pub)"
        )
    digits = lines[1].strip().lower()
    if not _HEX_RE.fullmatch(digits):
        raise FedxabError(f"{where}: the key must be {2 * ED25519_BYTES} hex digits")
    if party is not None and header.group(1) != _check_party(party):
        raise FedxabError(f"{where}: this is the key of {header.group(1)!r}, expected {party!r}")
    return header.group(1), bytes.fromhex(digits)


def load_private_key(path: str | os.PathLike, party: str | None = None) -> PrivateKey:
    """The private key in key file ``path``; with ``party``, it must be that party's key.

    Refused: a path that is not a regular file, a file its group or others may read or write
    (fix: ``chmod 600 PATH``), a malformed file, a public key, a key of another party."""
    owner, seed = _parse(read_key_file(path), str(path), "private", party)
    return PrivateKey(owner, seed)


def load_public_key(path: str | os.PathLike, party: str | None = None) -> PublicKey:
    """The public key in key file ``path``; with ``party``, it must be that party's key.

    Refused: a path that is not a regular file, a malformed file, a private key, a key of
    another party."""
    owner, raw = _parse(read_key_file(path, private=False), str(path), "public", party)
    return PublicKey(owner, raw)


def public_keys_in(directory: str | os.PathLike) -> dict[str, PublicKey]:
    """Every public key file (``<party>.pub``) in ``directory``, by party (an auditor's: the
    ``public/`` directory of :func:`generate_keypairs`, or any subset of it); a directory
    without any public key file is an error that says where they are."""
    path = Path(directory)
    if not path.is_dir():
        raise FedxabError(f"{path}: not a directory of public key files (<party>.pub)")
    keys = {}
    for file in sorted(path.iterdir()):
        match = _PUBLIC_FILE_RE.fullmatch(file.name)
        if match:
            keys[match.group(1)] = load_public_key(file, match.group(1))
    if not keys:
        hint = (
            f"; the public keys are in {path / PUBLIC_DIR}"
            if (path / PUBLIC_DIR).is_dir()
            else " (`fedxab keys generate` writes them in the public/ directory of its --out)"
        )
        raise FedxabError(f"{path}: holds no public key file (<party>.pub){hint}")
    return keys
