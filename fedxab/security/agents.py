"""The agents' side of message authentication: which keys each agent loads, signing and opening.

:class:`Signer` holds the keys an agent needs (from ``[security] keys_dir``,
:class:`~fedxab.config.SecurityConfig`): the server holds ``server.key`` and every
``client-N.key``; a client agent holds ``server.key`` (to verify broadcasts) and its own clients'
keys (to sign). A missing or unreadable key file stops the agent before it starts, with a
:class:`~fedxab.errors.FedxabError` naming the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fedxab.broker.codec import SERVER, Envelope, client_sender
from fedxab.config import Config
from fedxab.errors import FedxabError
from fedxab.security.keys import SecretKey, key_file_name, load_key
from fedxab.security.signing import open_signed, sign_envelope

__all__ = ["Signer", "signer_for"]


class Signer:
    """Keys by party; :meth:`seal` signs as a held party, :meth:`open` verifies against
    the parties in :attr:`verify_keys`."""

    def __init__(self, keys: dict[str, SecretKey], verify: Iterable[str]) -> None:
        self._keys = keys
        self.verify_keys = {p: keys[p] for p in verify}

    def seal(self, envelope_bytes: bytes, party: str) -> bytes:
        """The signed wire form of ``envelope_bytes`` (an encoded envelope from ``party``)."""
        return sign_envelope(envelope_bytes, self._keys[party])

    def open(self, data: bytes) -> Envelope:
        """The envelope in ``data`` if a party of :attr:`verify_keys` signed it as itself;
        else :class:`~fedxab.security.signing.SignatureError`."""
        return open_signed(data, self.verify_keys)


def _load(keys_dir: Path, parties: list[str]) -> dict[str, SecretKey]:
    keys = {}
    for party in parties:
        path = keys_dir / key_file_name(party)
        try:
            keys[party] = load_key(path, party)
        except FedxabError as exc:
            raise FedxabError(
                f"message signing is on ([security] sign = true) but {party}'s key cannot be "
                f"loaded: {exc}"
            ) from None
    return keys


def signer_for(config: Config, clients: Iterable[int] | None = None) -> Signer | None:
    """The server's signer (``clients`` None: every client's key too) or a client agent's
    (``clients``: its own clients' keys and the server's); None if signing is off."""
    security = config.security
    if security is None or not security.sign:
        return None
    assert security.keys_dir is not None and config.federation is not None
    keys_dir = Path(security.keys_dir)
    if clients is None:
        parties = [SERVER, *(client_sender(m) for m in range(config.federation.clients))]
        return Signer(_load(keys_dir, parties), verify=parties[1:])
    parties = [SERVER, *(client_sender(m) for m in clients)]
    return Signer(_load(keys_dir, parties), verify=[SERVER])
