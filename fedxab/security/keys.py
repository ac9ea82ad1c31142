"""Per-client secret keys of the HMAC scheme: generation, key files with owner-only
permissions, loading; and the key-file plumbing both schemes share.

Every client of a federation (``"client-N"``, the envelope sender names of
:mod:`fedxab.broker.codec`) has its own 32-byte key from :mod:`secrets`, shared with the server
and nobody else: the server holds every client's key, a client its own only. The server has no
key of its own: it signs with each client's key (:mod:`fedxab.security.signing` says why).

Threat model: a shared key authenticates a message between its two holders only. The server holds
every client's key, so it could forge any client's report or ledger record, and a third party
cannot tell a client's record from one the server made: an auditor of an HMAC run trusts the
server. The Ed25519 scheme (:mod:`fedxab.security.keypairs`, the default of ``fedxab keys
generate``) gives every party a private key nobody else holds, so it cannot.

A key file is two lines of text::

    fedxab-key v1 party=client-3
    <64 hex digits>

:func:`generate_keys` writes one ``client-N.key`` per client with mode 0o600 (created so,
with ``O_CREAT | O_EXCL``: the bytes never exist with looser permissions, and an existing file is
never overwritten). :func:`load_key` refuses a key file that its group or others may read, and one
written for another party. :func:`load_key_from_env` reads the 64 hex digits from an environment
variable instead (for containers; never from the run config).

A :class:`SecretKey` never shows its bytes: its repr and str name the party only, and no error
message of this module quotes a key file's content.

Shared with :mod:`fedxab.security.keypairs`: :func:`write_key_files` (every file created with
``O_EXCL`` at its final mode, all or nothing) and :func:`read_key_file` (a private key file that
its group or others may read is refused with the ``chmod`` fix).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from fedxab.broker.codec import client_sender
from fedxab.errors import FedxabError
from fedxab.private_files import private_dir

__all__ = [
    "KEY_BYTES",
    "SecretKey",
    "check_clients",
    "check_party",
    "format_key_file",
    "generate_keys",
    "key_file_name",
    "load_key",
    "load_key_from_env",
    "parse_key_text",
    "read_key_file",
    "write_key_file",
    "write_key_files",
]

KEY_BYTES = 32
"""Length of a key, in bytes (HMAC-SHA256's block-size-safe, full-strength key)."""

_HEADER_RE = re.compile(r"fedxab-key v1 party=(client-[0-9]{1,18})")
_HEX_RE = re.compile(rf"[0-9a-f]{{{2 * KEY_BYTES}}}")
_PARTY_RE = re.compile(r"client-[0-9]{1,18}")


def check_party(
    party: str, pattern: re.Pattern[str] = _PARTY_RE, allowed: str = "'client-<id>'"
) -> str:
    """``party`` if it is a key owner's name (matches ``pattern``); else an error naming the
    ``allowed`` names. Shared with :mod:`fedxab.security.keypairs`."""
    if not isinstance(party, str) or not pattern.fullmatch(party):
        raise FedxabError(f"key party must be {allowed}, got {party!r:.80}")
    return party


class SecretKey:
    """A party's secret key; the bytes are only reachable through :meth:`reveal`.

    ``repr``/``str`` show the party only, so a key logged or printed by mistake leaks nothing.
    Keys compare in constant time; they are deliberately not hashable.
    """

    __slots__ = ("_secret", "party")

    def __init__(self, party: str, secret: bytes) -> None:
        check_party(party)
        if not isinstance(secret, bytes) or len(secret) != KEY_BYTES:
            raise FedxabError(f"a key for {party!r} must be {KEY_BYTES} bytes")
        self.party = party
        self._secret = secret

    @classmethod
    def generate(cls, party: str) -> SecretKey:
        """A new random key for ``party`` (from :func:`secrets.token_bytes`)."""
        return cls(party, secrets.token_bytes(KEY_BYTES))

    def reveal(self) -> bytes:
        """The key bytes (for HMAC only: never print, log or store them elsewhere)."""
        return self._secret

    @property
    def fingerprint(self) -> str:
        """16 hex digits that name this key without revealing it (a hash of the key, not the
        key): two parties holding the same key show the same fingerprint."""
        return hashlib.sha256(b"fedxab key fingerprint\x00" + self._secret).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"SecretKey(party={self.party!r}, <{KEY_BYTES} bytes hidden>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SecretKey):
            return NotImplemented
        return self.party == other.party and hmac.compare_digest(self._secret, other._secret)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):  # no pickling: a pickle would carry the bytes around silently
        raise TypeError("a SecretKey cannot be pickled")


def key_file_name(party: str) -> str:
    """The key file name of ``party``: ``client-N.key``."""
    return f"{check_party(party)}.key"


def format_key_file(key: SecretKey) -> str:
    """The text of ``key``'s key file (header line naming the party, then the hex key)."""
    return f"fedxab-key v1 party={key.party}\n{key.reveal().hex()}\n"


def parse_key_text(text: str, where: str) -> SecretKey:
    """The key in a key file's ``text``; ``where`` names the source in errors (never the text)."""
    lines = text.strip().splitlines()
    header = _HEADER_RE.fullmatch(lines[0].strip()) if lines else None
    if header is None and lines and " scheme=ed25519 " in lines[0]:
        raise FedxabError(
            f"{where}: an Ed25519 key, not an HMAC key (a run reads Ed25519 keys from the "
            "private/ and public/ directories of its keys_dir; set [security] scheme = "
            '"ed25519" or leave it out, or write HMAC keys with `fedxab keys generate '
            "--scheme hmac`)"
        )
    if header is None or len(lines) != 2:
        raise FedxabError(
            f"{where}: not a fedxab key file (expected a line 'fedxab-key v1 party=NAME' "
            "and a line of hex digits; regenerate it with `fedxab keys generate`)"
        )
    digits = lines[1].strip().lower()
    if not _HEX_RE.fullmatch(digits):
        raise FedxabError(f"{where}: the key must be {2 * KEY_BYTES} hex digits")
    return SecretKey(header.group(1), bytes.fromhex(digits))


def write_key_file(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` with ``mode`` (0o600: a private key) and write ``data``; refuse an
    existing path (``O_CREAT | O_EXCL``: the bytes never exist with looser permissions, and an
    existing key file is never overwritten)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:
        raise FedxabError(
            f"{path}: already exists; refusing to overwrite a key file (delete it first "
            "to replace the key, and provision the new key to every party that uses it)"
        ) from None
    except OSError as exc:
        raise FedxabError(f"{path}: cannot create key file ({exc.strerror})") from None
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)  # in case the umask did something unusual
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


def write_key_files(
    files: Sequence[tuple[Path, bytes, int]], directories: Sequence[tuple[Path, int]]
) -> list[Path]:
    """Write every ``(path, data, mode)`` of ``files`` (:func:`write_key_file`), all or nothing,
    after creating the ``(directory, mode)`` of ``directories`` that are missing, in order.

    If any of the files already exists, nothing is written and a :class:`FedxabError` names it
    (and how many more). Returns the paths written, in order."""
    existing = [path for path, _, _ in files if os.path.lexists(path)]
    if existing:
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        raise FedxabError(
            f"{existing[0]}: already exists{more}; refusing to overwrite key files "
            "(choose another --out or delete the old keys first)"
        )
    for directory, mode in directories:
        private_dir(directory, mode)
    written: list[Path] = []
    try:
        for path, data, mode in files:
            write_key_file(path, data, mode)
            written.append(path)
    except BaseException:
        for path in written:  # all or nothing: no half-provisioned directory
            path.unlink(missing_ok=True)
        raise
    return written


def generate_keys(n_clients: int, out_dir: str | os.PathLike) -> list[Path]:
    """Write ``client-0.key`` .. ``client-{n-1}.key`` in ``out_dir``.

    Each file is created with mode 0o600 (``out_dir``, if created, with 0o700). If any of the
    files already exists, nothing is written and a :class:`FedxabError` names it. Returns the
    paths written, in client order. The server uses the whole directory; client ``m`` gets
    ``client-m.key`` only.
    """
    check_clients(n_clients)
    out = Path(out_dir)
    parties = [client_sender(i) for i in range(n_clients)]
    files = [
        (out / key_file_name(p), format_key_file(SecretKey.generate(p)).encode("ascii"), 0o600)
        for p in parties
    ]
    return write_key_files(files, [(out, 0o700)])


def check_clients(n_clients: int) -> int:
    """``n_clients`` if it is a number of clients to generate keys for (an integer >= 1)."""
    if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < 1:
        raise FedxabError(f"clients: must be an integer >= 1, got {n_clients!r}")
    return n_clients


def read_key_file(path: str | os.PathLike, *, private: bool = True) -> str:
    """The text of key file ``path``.

    Refused: a path that is not a regular file, a malformed (not ASCII) file and, ``private``,
    a file its group or others may read or write (fix: ``chmod 600 PATH``)."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise FedxabError(f"{p}: no such key file") from None
    except OSError as exc:
        raise FedxabError(f"{p}: cannot read key file ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise FedxabError(f"{p}: not a regular file")
    if private and os.name == "posix" and st.st_mode & 0o077:
        raise FedxabError(
            f"{p}: key file permissions {stat.S_IMODE(st.st_mode):#o} are too open "
            f"(group or others may access it); run `chmod 600 {p}`"
        )
    try:
        return p.read_text(encoding="ascii")
    except UnicodeDecodeError:
        raise FedxabError(f"{p}: not a fedxab key file (not ASCII text)") from None
    except OSError as exc:
        raise FedxabError(f"{p}: cannot read key file ({exc.strerror})") from None


def load_key(path: str | os.PathLike, party: str | None = None) -> SecretKey:
    """The key in key file ``path``; with ``party``, it must be that party's key.

    Refused: a path that is not a regular file, a file its group or others may read or write
    (fix: ``chmod 600 PATH``), a malformed file, a key of another party.
    """
    p = Path(path)
    if party is not None:
        check_party(party)
    key = parse_key_text(read_key_file(p), str(p))
    if party is not None and key.party != party:
        raise FedxabError(f"{p}: this is the key of {key.party!r}, expected {party!r}")
    return key


def load_key_from_env(var: str, party: str) -> SecretKey:
    """``party``'s key from environment variable ``var``: 64 hex digits (a key file's second
    line) or a whole key file's text, whose party must then be ``party``."""
    check_party(party)
    value = os.environ.get(var)
    if value is None or not value.strip():
        raise FedxabError(f"environment variable {var} is not set (expected {party}'s key)")
    where = f"environment variable {var}"
    if value.strip().startswith("fedxab-key"):
        key = parse_key_text(value, where)
        if key.party != party:
            raise FedxabError(f"{where}: holds the key of {key.party!r}, expected {party!r}")
        return key
    digits = value.strip().lower()
    if not _HEX_RE.fullmatch(digits):
        raise FedxabError(f"{where}: the key must be {2 * KEY_BYTES} hex digits")
    return SecretKey(party, bytes.fromhex(digits))
