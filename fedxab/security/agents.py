"""The agents' side of message authentication: whether a run signs, its scheme, which keys each
party loads.

A run signs its messages if ``[security] sign`` says so, and by default when it runs on Kafka
(:func:`signing_on`): a federation across machines is authenticated unless its operator opts out;
the embedded broker and in-process runs, where every party is one process, run without keys.

The scheme (:func:`scheme_of`) is ``[security] scheme``, or the layout of ``keys_dir``: the
``private/`` and ``public/`` directories of ``fedxab keys generate`` mean Ed25519,
``client-N.key`` files HMAC. Keys are never read from the run config:

- **Ed25519** (:mod:`fedxab.security.keypairs`): the server loads its private key and every
  client's public key, a client agent its own clients' private keys and the server's public
  key. The server cannot sign as a client, and an auditor needs the public keys only
  (:func:`verifier_in`).
- **HMAC** (:mod:`fedxab.security.keys`): the server loads every client's key, a client agent
  its own clients' keys only, from ``keys_dir`` or, without it, from one environment variable
  per client (:func:`key_env_var`, ``FEDXAB_KEY_CLIENT_3``; HMAC keys only). The server holds
  every key, so an auditor of an HMAC run trusts it.

A missing or unreadable key stops the agent before it starts, with a
:class:`~fedxab.errors.FedxabError` naming the file or variable -- a client without its key cannot
join.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedxab.broker.codec import SERVER, client_sender
from fedxab.errors import FedxabError
from fedxab.security.keypairs import (
    PRIVATE_DIR,
    PUBLIC_DIR,
    PrivateKey,
    PublicKey,
    load_private_key,
    load_public_key,
    private_key_path,
    public_key_path,
    public_keys_in,
)
from fedxab.security.keys import SecretKey, key_file_name, load_key, load_key_from_env
from fedxab.security.signing import Ed25519Signer, HmacSigner, KeyId, Signer, open_record

if TYPE_CHECKING:
    from fedxab.config import Config, SecurityConfig

__all__ = [
    "BAD_SIGNATURES_NAMED",
    "KEY_ENV_PREFIX",
    "WRONG_KEY_AFTER_S",
    "KeyWatch",
    "Signer",
    "key_env_var",
    "keyring_in",
    "open_record",
    "scheme_of",
    "signer_for",
    "signing_on",
    "verifier_in",
]

BAD_SIGNATURES_NAMED = 3
"""Records failing one key, none verifying under it, over at least :data:`WRONG_KEY_AFTER_S`,
after which the key is named as wrong (:class:`KeyWatch`)."""

WRONG_KEY_AFTER_S = 10.0
"""Seconds over which a key's failures must spread before they name it as wrong: five hellos
of a waiting client agent (each answered by the server), many repeats of a stalled phase. A few
forged records published at once never span it. A server, which only names a client's key in
its log (it stops nothing), names it after half of it: before the client agent, which keeps
failing the server's records as long, stops."""


class KeyWatch:
    """When records that fail a key are taken as proof that the key file is wrong, rather than
    as forgeries (which are only counted).

    Rule: a key is *suspect* once at least :data:`BAD_SIGNATURES_NAMED` records failed it, the
    first and the last of them at least :data:`WRONG_KEY_AFTER_S` apart, and no record ever
    verified under it (:meth:`verified`): a record that verifies proves the key right, after
    which every failure is a forgery. So forged records published at once, or before the other
    party's first genuine one reaches this party, never name a key; a party whose key really
    differs keeps failing the other party's repeated records (the server answers each hello,
    repeats a stalled broadcast; a client repeats its heartbeats) and is named after
    :data:`WRONG_KEY_AFTER_S`. (A key-less attacker who floods forged records for that long
    before the genuine party's first record gets the same verdict: no party can tell the two
    apart before one record verifies.)"""

    def __init__(self, part: float = 1.0) -> None:
        self.after_s = part * WRONG_KEY_AFTER_S
        """The span of the rule (``part`` of :data:`WRONG_KEY_AFTER_S`)."""
        self.failed: Counter[KeyId] = Counter()
        """Records that failed each key."""
        self._span: dict[KeyId, tuple[float, float]] = {}
        self._good: set[KeyId] = set()

    def verified(self, *keys: KeyId) -> None:
        """Records verified under ``keys``: they are right."""
        self._good.update(keys)

    def fail(self, key: KeyId) -> bool:
        """A record failed ``key``; whether the key is now :meth:`suspect`."""
        self.failed[key] += 1
        now = time.monotonic()
        first, _ = self._span.get(key, (now, now))
        self._span[key] = (first, now)
        return self.suspect(key)

    def suspect(self, key: KeyId) -> bool:
        """Whether the failures of ``key`` say it is not the other party's (the rule above)."""
        if key in self._good or self.failed[key] < BAD_SIGNATURES_NAMED:
            return False
        first, last = self._span[key]
        return last - first >= self.after_s


KEY_ENV_PREFIX = "FEDXAB_KEY_CLIENT_"
"""Environment variables ``FEDXAB_KEY_CLIENT_<id>`` hold the (HMAC) keys when no keys_dir is
set."""

_KEY_FILE_RE = re.compile(r"client-([0-9]{1,18})\.key")
_GENERATE = "write keys with `fedxab keys generate --clients N --out DIR`"


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


def scheme_of(security: SecurityConfig) -> str:
    """The run's signature scheme: ``security.scheme``, else detected from ``keys_dir``'s
    layout (``private/`` or ``public/``: Ed25519; ``client-N.key`` files: HMAC), else HMAC
    (the environment variables hold HMAC keys)."""
    if security.scheme is not None:
        return security.scheme
    if security.keys_dir is None:
        return "hmac"
    directory = Path(security.keys_dir)
    if (directory / PRIVATE_DIR).is_dir() or (directory / PUBLIC_DIR).is_dir():
        return "ed25519"
    if directory.is_dir() and any(_KEY_FILE_RE.fullmatch(p.name) for p in directory.iterdir()):
        return "hmac"
    raise FedxabError(
        f"security.keys_dir: {directory} holds neither the private/ and public/ directories "
        "of Ed25519 keys nor the client-N.key files of HMAC keys; "
        f"{_GENERATE} and pass --keys-dir DIR, or set security.scheme"
    )


def _loaded(what: str, fix: str, load: Callable[..., Any], *args: Any) -> Any:
    """``load(*args)``; a key that cannot be loaded is an error naming ``what`` and ``fix``."""
    try:
        return load(*args)
    except FedxabError as exc:
        raise FedxabError(
            f"this run signs its messages (on by default on Kafka) but {what} cannot be loaded: "
            f"{exc}. {fix}, or set [security] sign = false to run unauthenticated"
        ) from None


def _hmac_signer(security: SecurityConfig, clients: Iterable[int], n: int) -> HmacSigner:
    fix = (
        "Write keys with `fedxab keys generate --clients N --out DIR --scheme hmac` and pass "
        "--keys-dir DIR ([security] keys_dir; or the environment variables "
        f"{KEY_ENV_PREFIX}<id>)"
    )
    keys = {}
    for m in clients:
        party = client_sender(m)
        if security.keys_dir is not None:
            path = Path(security.keys_dir) / key_file_name(party)
            keys[m] = _loaded(f"{party}'s key", fix, load_key, path, party)
        else:
            keys[m] = _loaded(f"{party}'s key", fix, load_key_from_env, key_env_var(m), party)
    return HmacSigner(keys, n)


def _ed25519_signer(
    security: SecurityConfig, clients: Iterable[int] | None, n: int
) -> Ed25519Signer:
    directory = security.keys_dir
    if directory is None:
        raise FedxabError(
            'security.scheme = "ed25519" needs security.keys_dir (--keys-dir): the environment '
            f"variables {KEY_ENV_PREFIX}<id> hold HMAC keys only; {_GENERATE}"
        )
    fix = (
        "Write keys with `fedxab keys generate --clients N --out DIR` and pass --keys-dir DIR "
        "([security] keys_dir)"
    )

    def private(party: str) -> PrivateKey:
        path = private_key_path(directory, party)
        return _loaded(f"{party}'s private key", fix, load_private_key, path, party)

    def public(party: str) -> PublicKey:
        path = public_key_path(directory, party)
        return _loaded(f"{party}'s public key", fix, load_public_key, path, party)

    if clients is None:  # the server: its own private key, every client's public key
        mine: dict[KeyId, PrivateKey] = {SERVER: private(SERVER)}
        theirs: dict[KeyId, PublicKey] = {m: public(client_sender(m)) for m in range(n)}
    else:  # a client agent: its clients' private keys, the server's public key
        mine = {m: private(client_sender(m)) for m in clients}
        theirs = {SERVER: public(SERVER)}
    return Ed25519Signer(mine, theirs, n)


def signer_for(config: Config, clients: Iterable[int] | None = None) -> Signer | None:
    """The server's signer (``clients`` None) or a client agent's (``clients``: the clients it
    hosts), with the keys the scheme gives that party; None if the run does not sign."""
    if not signing_on(config):
        return None
    assert config.federation is not None
    n = config.federation.clients
    if config.security is None:  # (imported here: loading this module loads no config)
        from fedxab.config import SecurityConfig

        security = SecurityConfig()
    else:
        security = config.security
    if scheme_of(security) == "ed25519":
        return _ed25519_signer(security, clients, n)
    return _hmac_signer(security, range(n) if clients is None else clients, n)


def _key_id(party: str) -> KeyId:
    return SERVER if party == SERVER else int(party.removeprefix("client-"))


def verifier_in(public_dir: str | Path) -> Ed25519Signer:
    """An auditor's verifier: every public key (``<party>.pub``) in ``public_dir``, no private
    key; a directory without any is an error that says where they are."""
    keys: dict[KeyId, PublicKey] = {
        _key_id(party): key for party, key in public_keys_in(public_dir).items()
    }
    clients = [key for key in keys if isinstance(key, int)]
    return Ed25519Signer({}, keys, 1 + max(clients, default=0))


def keyring_in(keys_dir: str | Path) -> dict[int, SecretKey]:
    """Every HMAC client key in ``keys_dir`` (an auditor's: all of them, or a client's own), by
    id; a directory without any key file is an error."""
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
        hint = ""
        if (directory / PUBLIC_DIR).is_dir():
            hint = (
                f" (Ed25519 keys: verify with their public keys, --verify {directory / PUBLIC_DIR})"
            )
        raise FedxabError(f"--keys-dir: {directory} holds no client-N.key file{hint}")
    return keys
