"""Signed envelopes, and the two schemes that sign them: Ed25519 signatures and HMAC-SHA256 tags.

A party holds a :class:`Signer`: the keys it has, by key id (a client id, or
:data:`~fedxab.broker.codec.SERVER` for the server's own key pair), and what it signs and verifies
with them. Three kinds of message are signed:

- a **client's message** (report, control, ledger record, hello) by that client;
- a **server's message to every client** (broadcast, abort);
- a **server's message about one client** (a ledger record written under central DP, a lobby
  refusal), which names the client (``for``) so that client can audit it.

The schemes differ in who can sign what, which is the threat model:

- **Ed25519** (:class:`Ed25519Signer`, :mod:`fedxab.security.keypairs`): every party has its own
  key pair. A client signs its messages with its private key; the server signs its messages with
  its own private key, once (a broadcast carries one 64-byte signature whatever the number of
  clients), and a record about client ``m`` is signed by the server and says so. The server holds
  the clients' *public* keys only, so it cannot make a message or a ledger record that verifies as
  a client's, and an auditor verifies every record with public keys alone.
- **HMAC** (:class:`HmacSigner`, :mod:`fedxab.security.keys`): each client shares one secret key
  with the server. The server authenticates to each client with that client's key: a broadcast
  carries one 32-byte tag per client (``M`` x 32 bytes; client ``m`` checks tag ``m``), a record
  about client ``m`` one tag under ``m``'s key. The server holds every client's key, so it could
  forge any client's message or record: an auditor of an HMAC run trusts the server.

On the wire a signed envelope is the msgpack map ``{"envelope": <encoded envelope>, "sig":
<signatures>, "session": <str>}`` (plus ``"for": m`` for a server's message about client ``m``).
Each signature covers the msgpack header ``[scheme, session, for]`` followed by the encoded
envelope: the scheme (:data:`SCHEME_IDS`: 1 HMAC, 2 Ed25519), the session and the addressee are
authenticated with the envelope, so a message signed under one scheme is never valid under the
other.

The **session** is the server's random token for one execution of a run (it survives a server
restart through the checkpoint). A client stamps each reply with the session of the broadcast it
answers; the server refuses a client's message of another session as a replay -- the run id of a
run repeated with the same config and seed is the same, the session is not. The envelope's run id
and phase, covered by the signature, let the receivers refuse a message of another run or an
earlier phase (the agents' checks).

:meth:`Signer.open` accepts an envelope only if every signature its keys can check is right, and
raises :class:`SignatureError` (a :class:`~fedxab.errors.ProtocolError`) with a ``reason`` for
counting otherwise. :func:`seal`, :func:`seal_for_every_client` and :func:`open_signed` are the
HMAC scheme's functions on explicit keys.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Self, get_args

from fedxab.broker.codec import (
    MAX_MESSAGE_BYTES,
    SERVER,
    Envelope,
    check_record_size,
    packb,
    unpack_frame,
)
from fedxab.errors import ProtocolError
from fedxab.security.keypairs import ED25519_SIG_BYTES, PrivateKey, PublicKey
from fedxab.security.keys import SecretKey

__all__ = [
    "SCHEMES",
    "SCHEME_IDS",
    "SIGNATURE_REASONS",
    "SIG_BYTES",
    "Ed25519Signer",
    "HmacSigner",
    "KeyId",
    "Opened",
    "SignatureError",
    "SignedEnvelope",
    "Signer",
    "open_record",
    "open_signed",
    "seal",
    "seal_for_every_client",
    "tag",
]

SIG_BYTES = hashlib.sha256().digest_size
"""Length of one HMAC tag (an HMAC-SHA256), in bytes."""

Scheme = Literal["hmac", "ed25519"]
"""The signature schemes (``[security] scheme``)."""
SCHEMES: tuple[Scheme, ...] = get_args(Scheme)
SCHEME_IDS: dict[str, int] = {"hmac": 1, "ed25519": 2}
"""The first element of the signed header, by scheme (another value is refused)."""

SIGNATURE_REASONS = ("malformed", "missing_signature", "unknown_sender", "bad_signature")
"""The values of :attr:`SignatureError.reason`."""

KeyId = int | str
"""Names a key: a client id, or :data:`~fedxab.broker.codec.SERVER` (the server's own key)."""

_FIELDS = frozenset({"envelope", "sig", "session"})
_MAX_SESSION = 64
_MAX_SIGNED_BYTES = MAX_MESSAGE_BYTES + 1024  # the envelope plus the map; signatures apart


class SignatureError(ProtocolError):
    """A signed envelope is refused; ``reason`` is one of :data:`SIGNATURE_REASONS`."""

    def __init__(self, reason: str, message: str, key: KeyId | None = None) -> None:
        self.reason = reason
        self.key = key
        """The key that failed to verify the message (``bad_signature``), if known."""
        self.client = key if type(key) is int else None
        """The client whose key failed (:attr:`key`, when it is a client's)."""
        super().__init__(message)


def _header(scheme: str, session: str, for_client: int | None) -> bytes:
    return packb([SCHEME_IDS[scheme], session, for_client])


def tag(key: SecretKey, envelope: bytes, session: str = "", for_client: int | None = None) -> bytes:
    """HMAC-SHA256 under ``key`` of the header ``[1, session, for_client]`` and ``envelope``."""
    return _mac(key, _header("hmac", session, for_client), envelope)


def _mac(key: SecretKey, header: bytes, envelope: bytes) -> bytes:
    mac = hmac.new(key.reveal(), header, hashlib.sha256)
    mac.update(envelope)
    return mac.digest()


@dataclass(frozen=True)
class SignedEnvelope:
    """An encoded envelope with its signature(s), session and (a server's message about one
    client) addressee, as they travel."""

    envelope: bytes
    sig: bytes
    session: str = ""
    for_client: int | None = None

    def encode(self) -> bytes:
        wire: dict[str, object] = {
            "envelope": self.envelope,
            "sig": self.sig,
            "session": self.session,
        }
        if self.for_client is not None:
            wire["for"] = self.for_client
        return packb(wire)

    @classmethod
    def decode(
        cls, data: bytes | bytearray | memoryview, max_tags: int = 1, sig_bytes: int = SIG_BYTES
    ) -> Self:
        """Parse the outer map (the inner envelope is not parsed here); every defect raises a
        :class:`SignatureError`: ``"malformed"``, or ``"missing_signature"`` for no or an empty
        ``sig``. ``sig`` holds at most ``max_tags`` signatures of ``sig_bytes`` bytes."""
        limit = _MAX_SIGNED_BYTES + max_tags * (sig_bytes + 1)
        if isinstance(data, bytes | bytearray | memoryview) and len(data) > limit:
            raise SignatureError(
                "malformed", f"signed envelope of {len(data)} bytes exceeds the limit of {limit}"
            )
        try:
            raw = unpack_frame(data, "signed envelope")
        except ProtocolError as exc:
            raise SignatureError("malformed", str(exc)) from exc
        if not isinstance(raw.get("envelope"), bytes):
            raise SignatureError(
                "malformed", "signed envelope must be a map with an 'envelope' byte string"
            )
        if not raw.get("sig"):
            raise SignatureError("missing_signature", "envelope refused: missing signature")
        extra = sorted(set(raw) - _FIELDS - {"for"})
        if extra or not raw.keys() >= _FIELDS:
            raise SignatureError(
                "malformed", f"signed envelope: fields {sorted(raw)}, expected {sorted(_FIELDS)}"
            )
        sig, session, for_client = raw["sig"], raw["session"], raw.get("for")
        if not isinstance(sig, bytes) or len(sig) % sig_bytes:
            raise SignatureError(
                "malformed", f"signed envelope: 'sig' must be {sig_bytes}-byte signatures"
            )
        if not isinstance(session, str) or len(session) > _MAX_SESSION:
            raise SignatureError(
                "malformed", f"signed envelope: 'session' must be a string of <= {_MAX_SESSION}"
            )
        if for_client is not None and (type(for_client) is not int or for_client < 0):
            raise SignatureError("malformed", "signed envelope: 'for' must be a client id")
        return cls(raw["envelope"], sig, session, for_client)


@dataclass(frozen=True)
class Opened:
    """A verified envelope and the session it was signed in."""

    envelope: Envelope
    session: str
    for_client: int | None = None


class Signer:
    """The keys one party holds under one scheme, and what it signs and verifies with them.

    A scheme says which keys sign a message (:meth:`signers`) and how one key signs and
    verifies (:meth:`_sign`, :meth:`_verify`); sealing and opening are the same for both."""

    scheme: ClassVar[str]
    sig_bytes: ClassVar[int]

    def __init__(self, n_clients: int) -> None:
        self.n_clients = n_clients

    def signers(self, sender: int | None, for_client: int | None) -> list[KeyId]:
        """The keys whose signatures, in this order, a message carries: client ``sender``'s
        message, or (``sender`` None) the server's about client ``for_client`` or, with
        ``for_client`` None too, to every client."""
        raise NotImplementedError

    def _sign(self, key: KeyId, header: bytes, envelope: bytes) -> bytes:
        raise NotImplementedError

    def _verify(self, key: KeyId, sig: bytes, header: bytes, envelope: bytes) -> bool | None:
        """Whether ``sig`` is ``key``'s signature; None if this party does not hold ``key``."""
        raise NotImplementedError

    def fingerprint(self, key: KeyId) -> str:
        """The fingerprint of the key this party holds under ``key`` (names it, reveals
        nothing)."""
        raise NotImplementedError

    def _seal(
        self, envelope: bytes, sender: int | None, session: str, for_client: int | None
    ) -> bytes:
        header = _header(self.scheme, session, for_client)
        keys = self.signers(sender, for_client)
        sig = b"".join(self._sign(key, header, envelope) for key in keys)
        return SignedEnvelope(envelope, sig, session, for_client).encode()

    def seal(self, envelope: bytes, m: int, session: str) -> bytes:
        """Client ``m``'s message, signed by ``m`` in ``session``."""
        return self._seal(envelope, m, session, None)

    def seal_about(self, envelope: bytes, m: int, session: str) -> bytes:
        """The server's message about client ``m`` (a central-DP ledger record, a refusal)."""
        return self._seal(envelope, None, session, m)

    def seal_for_every_client(self, envelope: bytes, session: str) -> bytes:
        """The server's message to every client (a broadcast, an abort)."""
        return self._seal(envelope, None, session, None)

    def open(self, data: bytes | bytearray | memoryview) -> Opened:
        """The envelope in signed ``data`` if every signature this party can check is right.

        A client's message needs its sender's key; a server's message needs the keys
        :meth:`signers` names for it (HMAC: of a broadcast, the tag of every client key held
        is checked). Raises :class:`SignatureError`: ``"malformed"`` (outer map, inner envelope,
        wrong number of signatures), ``"missing_signature"``, ``"unknown_sender"`` (no key to
        check it with) or ``"bad_signature"`` (wrong key, another sender's name, tampered bytes,
        another session, another scheme)."""
        size = self.sig_bytes
        most = max(1, len(self.signers(None, None)))
        signed = SignedEnvelope.decode(data, max_tags=most, sig_bytes=size)
        try:
            envelope = Envelope.decode(signed.envelope)
        except ProtocolError as exc:
            raise SignatureError("malformed", f"signed envelope: {exc}") from exc
        what = f"{envelope.sender}'s kind {envelope.kind}, phase {envelope.phase}"
        server = envelope.sender == SERVER
        if not server and signed.for_client is not None:
            raise SignatureError("malformed", f"{what}: 'for' in a client's message")
        keys = self.signers(None if server else envelope.client_id, signed.for_client)
        if len(signed.sig) != len(keys) * size:
            raise SignatureError(
                "malformed", f"{what}: {len(signed.sig) // size} signatures, {len(keys)} expected"
            )
        header = _header(self.scheme, signed.session, signed.for_client)
        checked = 0
        for i, key in enumerate(keys):
            ok = self._verify(key, signed.sig[i * size : (i + 1) * size], header, signed.envelope)
            if ok is False:
                raise SignatureError(
                    "bad_signature",
                    f"envelope refused: bad signature of {envelope.sender!r} ({what}, "
                    f"{self.scheme} key of {_name(key)})",
                    key=key,
                )
            if ok:
                checked += 1
        if not checked:
            whose = _name(keys[0]) if len(keys) == 1 else f"any of its {len(keys)} clients"
            raise SignatureError("unknown_sender", f"envelope refused: no key for {whose} ({what})")
        return Opened(envelope, signed.session, signed.for_client)


def _name(key: KeyId) -> str:
    return "the server" if key == SERVER else f"client {key}"


class HmacSigner(Signer):
    """HMAC-SHA256 tags under the clients' shared keys (``keys``, by client id: the server's
    every client's, a client agent's its own clients'). See the module's threat model: the
    server holds every key, so it could sign as any client."""

    scheme = "hmac"
    sig_bytes = SIG_BYTES

    def __init__(self, keys: Mapping[int, SecretKey], n_clients: int) -> None:
        super().__init__(n_clients)
        self.keys = dict(keys)

    def signers(self, sender: int | None, for_client: int | None) -> list[KeyId]:
        if sender is not None:
            return [sender]
        return list(range(self.n_clients)) if for_client is None else [for_client]

    def _sign(self, key: KeyId, header: bytes, envelope: bytes) -> bytes:
        return _mac(self.keys[key], header, envelope)  # type: ignore[index]

    def _verify(self, key: KeyId, sig: bytes, header: bytes, envelope: bytes) -> bool | None:
        if key not in self.keys:
            return None
        return hmac.compare_digest(self._sign(key, header, envelope), sig)

    def fingerprint(self, key: KeyId) -> str:
        return self.keys[key].fingerprint  # type: ignore[index]


class Ed25519Signer(Signer):
    """Ed25519 signatures: this party signs with its ``private`` keys (the server: its own; a
    client agent: its clients') and verifies with the ``public`` keys (the server: every
    client's; a client agent: the server's; an auditor: any). See the module's threat model:
    nobody but client ``m`` can sign as ``m``."""

    scheme = "ed25519"
    sig_bytes = ED25519_SIG_BYTES

    def __init__(
        self,
        private: Mapping[KeyId, PrivateKey],
        public: Mapping[KeyId, PublicKey],
        n_clients: int,
    ) -> None:
        super().__init__(n_clients)
        self.private = dict(private)
        self.public = {**public, **{key: k.public for key, k in private.items()}}

    def signers(self, sender: int | None, for_client: int | None) -> list[KeyId]:
        return [SERVER if sender is None else sender]

    def _sign(self, key: KeyId, header: bytes, envelope: bytes) -> bytes:
        return self.private[key].sign(header + envelope)

    def _verify(self, key: KeyId, sig: bytes, header: bytes, envelope: bytes) -> bool | None:
        public = self.public.get(key)
        return None if public is None else public.verify(sig, header + envelope)

    def fingerprint(self, key: KeyId) -> str:
        return self.public[key].fingerprint


def seal(
    envelope: bytes, key: SecretKey, *, session: str = "", for_client: int | None = None
) -> bytes:
    """The HMAC-signed wire form of the encoded ``envelope``, with one tag under ``key``: a
    client's own message, or (``for_client``, the key's client) a server's message about that
    client."""
    signed = SignedEnvelope(envelope, tag(key, envelope, session, for_client), session, for_client)
    return signed.encode()


def seal_for_every_client(envelope: bytes, keys: Sequence[SecretKey], *, session: str) -> bytes:
    """The HMAC-signed wire form of a server's message to every client: ``keys[m]`` is client
    ``m``'s key, tag ``m`` is under it."""
    tags = b"".join(tag(key, envelope, session) for key in keys)
    return SignedEnvelope(envelope, tags, session).encode()


def open_signed(
    data: bytes | bytearray | memoryview, keyring: Mapping[int, SecretKey], n_clients: int
) -> Opened:
    """The envelope in HMAC-signed ``data``, checked with ``keyring`` (client ids to keys) in a
    run of ``n_clients`` clients (:meth:`Signer.open`)."""
    return HmacSigner(keyring, n_clients).open(data)


def open_record(value: bytes, signer: Signer | None, max_bytes: int) -> Opened:
    """The envelope in a record read from a topic: refused by size before any decoding
    (:class:`~fedxab.broker.codec.RecordTooLarge` above ``max_bytes``, the broker's
    ``max_message_bytes``), then decoded, and verified if this party signs (``signer``).
    Every defect raises a :class:`~fedxab.errors.ProtocolError` whose ``reason`` the receiver
    counts. The session is the signature's in a signing run, else the envelope's own."""
    check_record_size(value, max_bytes)
    if signer is None:
        envelope = Envelope.decode(value)
        return Opened(envelope, envelope.session)
    return signer.open(value)
