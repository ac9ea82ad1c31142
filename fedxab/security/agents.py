"""The agents' side of message authentication: whether a run signs, which keys each party loads.

A run signs its messages if ``[security] sign`` says so, and by default when it runs on Kafka
(:func:`signing_on`): a federation across machines is authenticated unless its operator opts out;
the embedded broker and in-process runs, where every party is one process, run without keys.

Keys come from ``[security] keys_dir`` (the files of ``fedxab keys generate``) or, without it,
from one environment variable per client (:func:`key_env_var`, ``FEDXAB_KEY_CLIENT_3``): never
from the run config. The server loads every client's key, a client agent its own clients' keys
only. A missing or unreadable key stops the agent before it starts, with a
:class:`~fedxab.errors.FedxabError` naming the file or variable -- a client without its key cannot
join.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from fedxab.broker.base import check_record_size
from fedxab.broker.codec import Envelope, client_sender
from fedxab.config import Config, SecurityConfig
from fedxab.errors import FedxabError
from fedxab.security.keys import SecretKey, key_file_name, load_key, load_key_from_env
from fedxab.security.signing import Opened, open_signed, seal, seal_for_every_client

__all__ = [
    "BAD_SIGNATURES_NAMED",
    "KEY_ENV_PREFIX",
    "Signer",
    "key_env_var",
    "keyring_in",
    "open_record",
    "signer_for",
    "signing_on",
]

BAD_SIGNATURES_NAMED = 3
"""Broadcasts failing one hosted client's key, before any broadcast verified, after which a
client agent stops with an error naming the client and its key's fingerprint."""

KEY_ENV_PREFIX = "FEDXAB_KEY_CLIENT_"
"""Environment variables ``FEDXAB_KEY_CLIENT_<id>`` hold the keys when no keys_dir is set."""

_KEY_FILE_RE = re.compile(r"client-([0-9]{1,18})\.key")


def key_env_var(m: int) -> str:
    """The environment variable of client ``m``'s key."""
    return f"{KEY_ENV_PREFIX}{int(m)}"


def signing_on(config: Config) -> bool:
    """Whether the run signs and verifies its messages: ``[security] sign`` if set, else on for
    Kafka (``kafka://``) and off for the embedded broker and in-process runs."""
    security, broker = config.security, config.broker
    if security is not None and security.sign is not None:
        return security.sign
    return broker is not None and broker.url.startswith("kafka://")


class Signer:
    """The keys one party holds, by client id, and what it signs and verifies with them."""

    def __init__(self, keys: dict[int, SecretKey], n_clients: int) -> None:
        self.keys = keys
        self.n_clients = n_clients

    def seal(self, envelope: bytes, m: int, session: str) -> bytes:
        """Client ``m``'s message, signed with its key in ``session``."""
        return seal(envelope, self.keys[m], session=session)

    def seal_about(self, envelope: bytes, m: int, session: str) -> bytes:
        """The server's message about client ``m`` (a central-DP ledger record)."""
        return seal(envelope, self.keys[m], session=session, for_client=m)

    def seal_for_every_client(self, envelope: bytes, session: str) -> bytes:
        """The server's message to every client (one tag per client; needs every key)."""
        keys = [self.keys[m] for m in range(self.n_clients)]
        return seal_for_every_client(envelope, keys, session=session)

    def open(self, data: bytes) -> Opened:
        """The verified envelope in ``data`` (see :func:`~fedxab.security.signing.open_signed`)."""
        return open_signed(data, self.keys, self.n_clients)


def open_record(value: bytes, signer: Signer | None, max_bytes: int) -> Opened:
    """The envelope in a record read from a topic: refused by size before any decoding
    (:class:`~fedxab.broker.base.RecordTooLarge` above ``max_bytes``, the broker's
    ``max_message_bytes``), then decoded, and verified if this party signs (``signer``).
    Every defect raises a :class:`~fedxab.errors.ProtocolError` whose ``reason`` the receiver
    counts."""
    check_record_size(value, max_bytes)
    if signer is None:
        return Opened(Envelope.decode(value), "")
    return signer.open(value)


def _load(security: SecurityConfig, clients: Iterable[int]) -> dict[int, SecretKey]:
    keys = {}
    for m in clients:
        party = client_sender(m)
        try:
            if security.keys_dir is not None:
                keys[m] = load_key(Path(security.keys_dir) / key_file_name(party), party)
            else:
                keys[m] = load_key_from_env(key_env_var(m), party)
        except FedxabError as exc:
            raise FedxabError(
                f"this run signs its messages (on by default on Kafka) but {party}'s key "
                f"cannot be loaded: {exc}. Write keys with `fedxab keys generate --clients N "
                "--out DIR` and pass --keys-dir DIR ([security] keys_dir; or the environment "
                f"variables {KEY_ENV_PREFIX}<id>), or set [security] sign = false to run "
                "unauthenticated"
            ) from None
    return keys


def signer_for(config: Config, clients: Iterable[int] | None = None) -> Signer | None:
    """The server's signer (``clients`` None: every client's key) or a client agent's
    (``clients``: its own clients' keys only); None if the run does not sign."""
    if not signing_on(config):
        return None
    assert config.federation is not None
    n = config.federation.clients
    security = config.security or SecurityConfig()
    return Signer(_load(security, range(n) if clients is None else clients), n)


def keyring_in(keys_dir: str | Path) -> dict[int, SecretKey]:
    """Every client key in ``keys_dir`` (an auditor's: all of them, or a client's own), by id;
    a directory without any key file is an error."""
    directory = Path(keys_dir)
    if not directory.is_dir():
        raise FedxabError(f"--keys-dir: {directory} is not a directory of key files")
    keys = {}
    for path in sorted(directory.iterdir()):
        match = _KEY_FILE_RE.fullmatch(path.name)
        if match:
            m = int(match.group(1))
            keys[m] = load_key(path, client_sender(m))
    if not keys:
        raise FedxabError(f"--keys-dir: {directory} holds no client-N.key file")
    return keys
