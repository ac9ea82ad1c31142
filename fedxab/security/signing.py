"""HMAC-SHA256 tags over encoded envelopes, with one secret key per client.

Each client ``m`` shares one key with the server and with nobody else
(:mod:`fedxab.security.keys`). HMAC is symmetric, so a key shared by the server with every client
would let any client forge the server's messages; instead the server authenticates to each client
with that client's own key:

- a **client's message** (report, control, ledger record) carries one tag, under its own key;
- a **server's message to every client** (broadcast, abort) carries one tag per client, in client
  order (``M`` x 32 bytes): client ``m`` checks tag ``m``;
- a **server's message about one client** (a ledger record written under central DP) carries one
  tag, under that client's key, and names the client (``for``), so that client can audit it.

On the wire a signed envelope is the msgpack map ``{"envelope": <encoded envelope>, "sig": <tags>,
"session": <str>}`` (plus ``"for": m`` for a server's message about client ``m``). A tag is
HMAC-SHA256 over the msgpack header ``[1, session, for]`` followed by the encoded envelope, so the
session and the addressee are authenticated with the envelope.

The **session** is the server's random token for one execution of a run (it survives a server
restart through the checkpoint). A client stamps each reply with the session of the broadcast it
answers; the server refuses a client's message of another session as a replay -- the run id of a
run repeated with the same config and seed is the same, the session is not. The envelope's run id
and phase, covered by the tag, let the receivers refuse a message of another run or an earlier
phase (the agents' checks).

:func:`open_signed` accepts an envelope only if the tag(s) its keyring can check are right, and
raises :class:`SignatureError` (a :class:`~fedxab.errors.ProtocolError`) with a ``reason`` for
counting otherwise.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Self

from fedxab.broker.codec import MAX_MESSAGE_BYTES, SERVER, Envelope, packb, unpack_frame
from fedxab.errors import ProtocolError
from fedxab.security.keys import SecretKey

__all__ = [
    "SIGNATURE_REASONS",
    "SIG_BYTES",
    "Opened",
    "SignatureError",
    "SignedEnvelope",
    "open_signed",
    "seal",
    "seal_for_every_client",
    "tag",
]

SIG_BYTES = hashlib.sha256().digest_size
"""Length of one tag (an HMAC-SHA256), in bytes."""

SIGNATURE_VERSION = 1
"""First element of the authenticated header; another version is refused."""

SIGNATURE_REASONS = ("malformed", "missing_signature", "unknown_sender", "bad_signature")
"""The values of :attr:`SignatureError.reason`."""

_FIELDS = frozenset({"envelope", "sig", "session"})
_MAX_SESSION = 64
_MAX_SIGNED_BYTES = MAX_MESSAGE_BYTES + 1024  # the envelope plus the map; tags checked apart


class SignatureError(ProtocolError):
    """A signed envelope is refused; ``reason`` is one of :data:`SIGNATURE_REASONS`."""

    def __init__(self, reason: str, message: str, client: int | None = None) -> None:
        self.reason = reason
        self.client = client
        """The client whose key failed to verify the message (``bad_signature``), if known."""
        super().__init__(message)


def tag(key: SecretKey, envelope: bytes, session: str = "", for_client: int | None = None) -> bytes:
    """HMAC-SHA256 under ``key`` of the header ``[1, session, for_client]`` and ``envelope``."""
    mac = hmac.new(key.reveal(), packb([SIGNATURE_VERSION, session, for_client]), hashlib.sha256)
    mac.update(envelope)
    return mac.digest()


def _check_tag(key: SecretKey, signed: SignedEnvelope, tag_bytes: bytes) -> bool:
    expected = tag(key, signed.envelope, signed.session, signed.for_client)
    return hmac.compare_digest(expected, tag_bytes)


@dataclass(frozen=True)
class SignedEnvelope:
    """An encoded envelope with its tag(s), session and (a server's message about one client)
    addressee, as they travel."""

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
    def decode(cls, data: bytes | bytearray | memoryview, max_tags: int = 1) -> Self:
        """Parse the outer map (the inner envelope is not parsed here); every defect raises a
        :class:`SignatureError`: ``"malformed"``, or ``"missing_signature"`` for no or an empty
        ``sig``. ``max_tags`` bounds the size of ``sig``."""
        limit = _MAX_SIGNED_BYTES + max_tags * (SIG_BYTES + 1)
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
        if not isinstance(sig, bytes) or len(sig) % SIG_BYTES:
            raise SignatureError("malformed", "signed envelope: 'sig' must be 32-byte tags")
        if not isinstance(session, str) or len(session) > _MAX_SESSION:
            raise SignatureError(
                "malformed", f"signed envelope: 'session' must be a string of <= {_MAX_SESSION}"
            )
        if for_client is not None and (type(for_client) is not int or for_client < 0):
            raise SignatureError("malformed", "signed envelope: 'for' must be a client id")
        return cls(raw["envelope"], sig, session, for_client)


def seal(
    envelope: bytes, key: SecretKey, *, session: str = "", for_client: int | None = None
) -> bytes:
    """The signed wire form of the encoded ``envelope``, with one tag under ``key``: a client's
    own message, or (``for_client``, the key's client) a server's message about that client."""
    signed = SignedEnvelope(envelope, tag(key, envelope, session, for_client), session, for_client)
    return signed.encode()


def seal_for_every_client(envelope: bytes, keys: Sequence[SecretKey], *, session: str) -> bytes:
    """The signed wire form of a server's message to every client: ``keys[m]`` is client
    ``m``'s key, tag ``m`` is under it."""
    tags = b"".join(tag(key, envelope, session) for key in keys)
    return SignedEnvelope(envelope, tags, session).encode()


@dataclass(frozen=True)
class Opened:
    """A verified envelope and the session it was signed in."""

    envelope: Envelope
    session: str
    for_client: int | None = None


def open_signed(
    data: bytes | bytearray | memoryview, keyring: Mapping[int, SecretKey], n_clients: int
) -> Opened:
    """The envelope in signed ``data`` if every tag ``keyring`` can check is right.

    ``keyring`` maps client ids to the keys this receiver holds (the server: every client's; a
    client agent: its own clients'). A client's message needs its sender's key; a server's
    message about one client needs that client's key; a server's message to every client must
    carry ``n_clients`` tags, and the tag of every client in ``keyring`` is checked.

    Raises :class:`SignatureError`: ``"malformed"`` (outer map, inner envelope, wrong number of
    tags), ``"missing_signature"``, ``"unknown_sender"`` (no key to check it with) or
    ``"bad_signature"`` (wrong key, another sender's name, tampered bytes, another session).
    """
    signed = SignedEnvelope.decode(data, max_tags=max(1, n_clients))
    try:
        envelope = Envelope.decode(signed.envelope)
    except ProtocolError as exc:
        raise SignatureError("malformed", f"signed envelope: {exc}") from exc
    what = f"kind {envelope.kind}, phase {envelope.phase}"
    if envelope.sender == SERVER and signed.for_client is None:
        if len(signed.sig) != n_clients * SIG_BYTES:
            raise SignatureError(
                "malformed",
                f"server's {what}: {len(signed.sig) // SIG_BYTES} tags for {n_clients} clients",
            )
        if not keyring:
            raise SignatureError("unknown_sender", f"server's {what}: no client key to check")
        for m, key in keyring.items():
            if not _check_tag(key, signed, signed.sig[m * SIG_BYTES : (m + 1) * SIG_BYTES]):
                raise SignatureError(
                    "bad_signature", f"bad server signature for client {m}", client=m
                )
        return Opened(envelope, signed.session)
    signer_id = signed.for_client if envelope.sender == SERVER else envelope.client_id
    if envelope.sender != SERVER and signed.for_client is not None:
        raise SignatureError("malformed", f"{envelope.sender}'s {what}: 'for' in a client's")
    if len(signed.sig) != SIG_BYTES:
        raise SignatureError("malformed", f"{envelope.sender}'s {what}: one tag expected")
    key = keyring.get(signer_id)  # type: ignore[arg-type]
    if key is None:
        raise SignatureError(
            "unknown_sender", f"envelope refused: no key for client {signer_id} ({what})"
        )
    if not _check_tag(key, signed, signed.sig):
        raise SignatureError(
            "bad_signature",
            f"envelope refused: bad signature of {envelope.sender!r} ({what})",
            client=signer_id,
        )
    return Opened(envelope, signed.session, signed.for_client)
