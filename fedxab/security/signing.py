"""HMAC-SHA256 signatures over encoded envelopes.

The sender signs the exact bytes of :meth:`Envelope.encode
<fedxab.broker.codec.Envelope.encode>` with its own key; what travels is a msgpack map
``{"envelope": <those bytes>, "sig": <32-byte tag>}`` (:class:`SignedEnvelope`). The receiver
(:func:`open_signed`) reads the claimed sender from the inner envelope, looks up that sender's key
in its keyring and checks the tag in constant time. A report signed with another client's key, a
tampered envelope or a missing signature is refused with a :class:`SignatureError` (a
:class:`~fedxab.errors.ProtocolError`) whose ``reason`` names why, for counting.

Replay protection (phase and run checks) is the receiver's job on the opened envelope.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from fedxab.broker.codec import MAX_MESSAGE_BYTES, Envelope, packb, unpackb
from fedxab.errors import ProtocolError
from fedxab.security.keys import SecretKey

__all__ = [
    "SIG_BYTES",
    "SignatureError",
    "SignedEnvelope",
    "open_signed",
    "sign",
    "sign_envelope",
    "verify",
]

SIG_BYTES = hashlib.sha256().digest_size
"""Length of a signature (an HMAC-SHA256 tag), in bytes."""

_FIELDS = frozenset({"envelope", "sig"})
_MAX_SIGNED_BYTES = MAX_MESSAGE_BYTES + 1024  # the envelope plus the map and the tag


class SignatureError(ProtocolError):
    """A signed envelope is refused. ``reason`` is one of ``"malformed"``,
    ``"missing_signature"``, ``"unknown_sender"``, ``"bad_signature"``."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


def sign(envelope_bytes: bytes, key: SecretKey) -> bytes:
    """The HMAC-SHA256 tag of ``envelope_bytes`` under ``key``."""
    return hmac.new(key.reveal(), envelope_bytes, hashlib.sha256).digest()


def verify(envelope_bytes: bytes, tag: bytes, key: SecretKey) -> bool:
    """Whether ``tag`` is ``key``'s tag of ``envelope_bytes`` (constant-time comparison)."""
    if not isinstance(tag, bytes) or len(tag) != SIG_BYTES:
        return False
    return hmac.compare_digest(sign(envelope_bytes, key), tag)


@dataclass(frozen=True)
class SignedEnvelope:
    """An encoded envelope and its tag, as they travel: msgpack ``{"envelope", "sig"}``."""

    envelope: bytes
    sig: bytes

    def encode(self) -> bytes:
        return packb({"envelope": self.envelope, "sig": self.sig})

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Self:
        """Parse the outer map (the inner envelope is not parsed here); every defect raises a
        :class:`SignatureError`: ``"malformed"``, or ``"missing_signature"`` for no or an empty
        ``sig``."""
        if isinstance(data, bytes | bytearray | memoryview) and len(data) > _MAX_SIGNED_BYTES:
            raise SignatureError(
                "malformed",
                f"signed envelope of {len(data)} bytes exceeds the limit of "
                f"{_MAX_SIGNED_BYTES} bytes",
            )
        try:
            raw = unpackb(data)
        except ProtocolError as exc:
            raise SignatureError("malformed", f"signed envelope: {exc}") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("envelope"), bytes):
            raise SignatureError(
                "malformed", "signed envelope must be a map with an 'envelope' byte string"
            )
        if not raw.get("sig"):
            raise SignatureError("missing_signature", "envelope refused: missing signature")
        if raw.keys() != _FIELDS:
            extra = sorted(set(raw) - _FIELDS)
            raise SignatureError("malformed", f"signed envelope: unknown field(s) {extra}")
        if not isinstance(raw["sig"], bytes):
            raise SignatureError("malformed", "signed envelope: 'sig' must be a byte string")
        return cls(envelope=raw["envelope"], sig=raw["sig"])


def sign_envelope(envelope: Envelope | bytes, key: SecretKey) -> bytes:
    """The signed wire form of ``envelope`` (an :class:`Envelope` or its encoded bytes).

    ``key`` must be the envelope sender's own key; an :class:`Envelope` from another sender is
    refused, so that a party cannot sign in another's name by mistake.
    """
    if isinstance(envelope, Envelope):
        if envelope.sender != key.party:
            raise ProtocolError(
                f"cannot sign an envelope from {envelope.sender!r} with the key of {key.party!r}"
            )
        envelope = envelope.encode()
    return SignedEnvelope(envelope=envelope, sig=sign(envelope, key)).encode()


def open_signed(data: bytes | bytearray | memoryview, keyring: Mapping[str, SecretKey]) -> Envelope:
    """The envelope in signed ``data``, if the claimed sender's key in ``keyring`` signed it.

    ``keyring`` maps sender names (``"server"``, ``"client-N"``) to their keys. Raises
    :class:`SignatureError` with ``reason`` ``"malformed"`` (outer map or inner envelope),
    ``"missing_signature"``, ``"unknown_sender"`` (no key for the claimed sender) or
    ``"bad_signature"`` (wrong key, another sender's name, tampered bytes).
    """
    signed = SignedEnvelope.decode(data)
    try:
        envelope = Envelope.decode(signed.envelope)
    except ProtocolError as exc:
        raise SignatureError("malformed", f"signed envelope: {exc}") from exc
    key = keyring.get(envelope.sender)
    if key is None:
        raise SignatureError(
            "unknown_sender",
            f"envelope refused: unknown sender {envelope.sender!r} (no key for it)",
        )
    if not verify(signed.envelope, signed.sig, key):
        raise SignatureError(
            "bad_signature",
            f"envelope refused: bad signature for sender {envelope.sender!r} "
            f"(kind {envelope.kind}, phase {envelope.phase})",
        )
    return envelope
