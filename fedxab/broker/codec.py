"""The message payload codec: plain data <-> msgpack bytes, numpy arrays as an extension type.

Broadcasts and reports (the messages of :mod:`fedxab.algorithms.protocol`) turn into plain data
with ``to_wire()``: maps with string keys, lists, strings, numbers, booleans, ``None``, bytes,
and numpy arrays. :func:`packb` writes that as msgpack; :func:`unpackb` reads it back. On a
broker, every message travels in an :class:`Envelope` (schema version, run id, kind, phase,
sender, message id, send time, and the execution's session once the sender has one) whose
``payload`` is those msgpack bytes, unchanged: the payload's size is what the results count as
communication, whatever the transport.

Numpy arrays travel as msgpack extension type :data:`NDARRAY_EXT` (code 1) whose body is the
msgpack of ``[dtype.str, shape, raw C-order bytes]``, for numeric dtypes only (bool, signed and
unsigned integers, floats; byte order as in ``dtype.str``). Nothing is ever pickled, and decoding
trusts nothing: the dtype string must name a numeric dtype, the shape must be a list of
non-negative integers whose product times the item size equals the byte length, booleans must
be 0 or 1. Anything malformed -- truncated or random bytes, an unknown extension code, a bad
array body, trailing data -- raises :class:`~fedxab.errors.ProtocolError` with the reason, and
never another exception: a receiver can reject and count a bad message and carry on.

Numpy scalars (``np.float64(0.5)``, ``np.int64(3)``, ``np.bool_(True)``) are written as the
matching msgpack scalar; tuples are written as lists.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, fields
from typing import Any, Self

import msgpack
import numpy as np

from fedxab.errors import ProtocolError

__all__ = [
    "ENVELOPE_KINDS",
    "MAX_MESSAGE_BYTES",
    "MAX_NDIM",
    "NDARRAY_EXT",
    "SCHEMA_VERSION",
    "SERVER",
    "Envelope",
    "RecordTooLarge",
    "check_record_size",
    "client_sender",
    "encode_envelope",
    "packb",
    "unpack_frame",
    "unpackb",
]

NDARRAY_EXT = 1
"""msgpack extension type code of a numpy array."""

MAX_NDIM = 32
"""Most dimensions a decoded array may have."""

_NUMERIC_KINDS = "biuf"
_KIND_NAMES = "bool, int, uint or float"
# byte order, kind, item size: "<f8", "|b1", ">i4", "|u1" (what dtype.str gives for numeric dtypes)
_DTYPE_RE = re.compile(r"[<>|=][biuf][0-9]{1,2}")
# (tuples, not ``bytes | bytearray``: a union is built anew at each isinstance on the hot path)
_BYTES = (bytes, bytearray, memoryview)
_NUMBERS = (int, float)


# ------------------------------------------------------------------------------------ encode
def _encode_array(arr: np.ndarray) -> msgpack.ExtType:
    if arr.dtype.kind not in _NUMERIC_KINDS:
        raise ProtocolError(
            f"cannot encode a numpy array of dtype {arr.dtype}: only {_KIND_NAMES} arrays travel"
        )
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    body = msgpack.packb([arr.dtype.str, list(arr.shape), arr.tobytes()], use_bin_type=True)
    return msgpack.ExtType(NDARRAY_EXT, body)


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return _encode_array(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    raise ProtocolError(
        f"cannot encode a value of type {type(obj).__name__}: messages hold maps, lists, "
        "strings, numbers, booleans, None, bytes and numeric numpy arrays"
    )


def packb(obj: Any) -> bytes:
    """The msgpack bytes of ``obj`` (a message's ``to_wire()``), numpy arrays as ext type 1.

    Raises :class:`ProtocolError` for a value that cannot travel (an object, a complex or object
    array, an integer beyond 64 bits).
    """
    try:
        return msgpack.packb(obj, default=_default, use_bin_type=True, datetime=False)
    except ProtocolError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"cannot encode message: {exc}") from exc


# ------------------------------------------------------------------------------------ decode
def _no_nested_ext(code: int, data: bytes) -> Any:
    raise ProtocolError(f"malformed array: extension type {code} inside an array body")


@functools.lru_cache(maxsize=64)
def _numeric_dtype(dtype_str: str) -> np.dtype:
    """The numeric dtype named by ``dtype_str`` (parsed once per name), or ProtocolError."""
    if not _DTYPE_RE.fullmatch(dtype_str):
        raise ProtocolError(
            f"malformed array: dtype {dtype_str!r} is not a numeric dtype ({_KIND_NAMES})"
        )
    try:
        dtype = np.dtype(dtype_str)
    except TypeError as exc:
        raise ProtocolError(f"malformed array: unknown dtype {dtype_str!r}") from exc
    if dtype.kind not in _NUMERIC_KINDS or dtype.str.lstrip("<>|=") != dtype_str.lstrip("<>|="):
        raise ProtocolError(
            f"malformed array: dtype {dtype_str!r} is not a numeric dtype ({_KIND_NAMES})"
        )
    return dtype


def _decode_array(data: bytes) -> np.ndarray:
    try:
        body = msgpack.unpackb(data, raw=False, ext_hook=_no_nested_ext, use_list=True)
    except ProtocolError:
        raise
    except Exception as exc:  # any msgpack failure on untrusted bytes
        raise ProtocolError(f"malformed array: body is not valid msgpack ({exc})") from exc
    if not isinstance(body, list) or len(body) != 3:
        raise ProtocolError("malformed array: body must be [dtype, shape, data]")
    dtype_str, shape, raw = body
    if not isinstance(dtype_str, str):
        raise ProtocolError(
            f"malformed array: dtype {dtype_str!r} is not a numeric dtype ({_KIND_NAMES})"
        )
    dtype = _numeric_dtype(dtype_str)
    if not isinstance(shape, list) or len(shape) > MAX_NDIM:
        raise ProtocolError(f"malformed array: shape must be a list of at most {MAX_NDIM} sizes")
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in shape):
        raise ProtocolError(f"malformed array: shape {shape!r} must hold integers >= 0")
    if not isinstance(raw, bytes):
        raise ProtocolError("malformed array: data must be a byte string")
    count = math.prod(shape)
    if count * dtype.itemsize != len(raw):
        raise ProtocolError(
            f"malformed array: shape {tuple(shape)} of {dtype_str} needs "
            f"{count * dtype.itemsize} bytes, got {len(raw)}"
        )
    try:
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. a dimension numpy rejects
        raise ProtocolError(f"malformed array: {exc}") from exc
    if dtype.kind == "b" and raw and max(raw) > 1:
        raise ProtocolError("malformed array: boolean bytes must be 0 or 1")
    return arr


def _ext_hook(code: int, data: bytes) -> Any:
    if code != NDARRAY_EXT:
        raise ProtocolError(
            f"malformed message: unknown msgpack extension type {code} "
            f"(only {NDARRAY_EXT}, a numpy array, is known)"
        )
    return _decode_array(data)


def unpackb(data: bytes | bytearray | memoryview) -> Any:
    """The plain data encoded in ``data`` by :func:`packb`; arrays come back read-only.

    Raises :class:`ProtocolError` (never another exception) if ``data`` is not exactly one
    well-formed message: garbage, truncated bytes, trailing bytes, unknown extension types,
    malformed arrays, or map keys that are not strings.
    """
    if not isinstance(data, _BYTES):
        raise ProtocolError(f"malformed message: expected bytes, got {type(data).__name__}")
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            ext_hook=_ext_hook,
            use_list=True,
            strict_map_key=True,
            timestamp=0,
        )
    except ProtocolError:
        raise
    except Exception as exc:  # any failure on untrusted bytes is a malformed message
        reason = str(exc) or type(exc).__name__
        raise ProtocolError(f"malformed message: {reason}") from exc


_FRAME_FIELDS = 16
_FRAME_STRING = 1024


def _no_ext_in_frame(code: int, data: bytes) -> Any:
    raise ProtocolError("malformed frame: an array or extension value where a scalar belongs")


def unpack_frame(data: bytes | bytearray | memoryview, what: str) -> dict[str, Any]:
    """The map of a frame (``what``: an envelope, a signed envelope): at most 16 fields whose
    values are scalars, strings of at most 1,024 characters and byte strings.

    Anything else (a list, a map or a numpy array in a field, ``what`` not being a map) raises
    :class:`ProtocolError` while parsing, so that a field never holds a value whose comparison
    fails (a numpy array's truth value) and hostile bytes cannot inflate: the only large value a
    frame can hold is a byte string, the size of its bytes."""
    if not isinstance(data, _BYTES):
        raise ProtocolError(f"malformed {what}: expected bytes, got {type(data).__name__}")
    try:
        raw = msgpack.unpackb(
            data,
            raw=False,
            ext_hook=_no_ext_in_frame,
            strict_map_key=True,
            timestamp=0,
            max_map_len=_FRAME_FIELDS,
            max_array_len=0,
            max_str_len=_FRAME_STRING,
        )
    except ProtocolError as exc:
        raise ProtocolError(f"{what}: {exc}") from exc
    except Exception as exc:  # any failure on untrusted bytes is a malformed frame
        reason = str(exc) or type(exc).__name__
        if "exceeds max_" in reason:  # a list, a long string or too many fields
            raise ProtocolError(
                f"{what} must be a map of at most {_FRAME_FIELDS} scalar fields ({reason})"
            ) from exc
        raise ProtocolError(f"malformed {what}: {reason}") from exc
    if not isinstance(raw, dict):
        raise ProtocolError(f"{what} must be a map, got {type(raw).__name__}")
    if dict in map(type, raw.values()):  # (msgpack makes plain dicts: no subclass to miss)
        raise ProtocolError(f"malformed {what}: a map where a scalar belongs")
    return raw


# ---------------------------------------------------------------------------------- envelope
SCHEMA_VERSION = 1
"""Envelope schema this fedxab writes and reads; another version is refused, never guessed."""

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest encoded envelope accepted (a guard against memory exhaustion by a hostile peer)."""


class RecordTooLarge(ProtocolError):
    """A record read from a topic is larger than the reader's ``max_message_bytes``."""

    reason = "too_large"


def check_record_size(value: bytes, limit: int) -> None:
    """Refuse a record read from a topic by its size alone, before any byte of it is decoded
    (decoding a hostile msgpack record can take about 70 times its size in memory)."""
    if len(value) > limit:
        raise RecordTooLarge(
            f"a record of {len(value):,} bytes is larger than [broker] max_message_bytes "
            f"({limit:,} bytes); if such records are expected, raise it on every party"
        )


ENVELOPE_KINDS = (
    "broadcast",  # server -> clients: the phase's broadcast, or the final answer
    "report",  # client -> server: the client's report for a phase
    "join",  # client -> server (control): the client takes part in the run
    "leave",  # client -> server (control): the client stops for good
    "heartbeat",  # client -> server (control): the client is alive
    "telemetry",  # client -> server (control): simulation-only regret terms, see agents
    "abort",  # server -> clients (broadcast topic): the run is stopped, see agents.failures
    "alive",  # server -> clients (broadcast topic): the server runs, see agents.waits
    "failed",  # client -> server (control): the client's objective failed, see agents.failures
    "stopped",  # client -> server (control): the client stopped with a failed run (its abort)
    "ledger",  # either way (ledger topic): a privacy event
    "outcome",  # client -> server (control): what the client observed of its objective
    "best_dp",  # client -> server (control): its best value as a charged DP release (opt-in)
    "hello",  # client -> server (lobby): the run protocol the client will take part in
    "refuse",  # server -> client (lobby): the client's protocol is not the server's
    "welcome",  # server -> client (lobby): the session of this execution, for the hello's nonce
)

SERVER = "server"
"""The server's sender name; a client's is :func:`client_sender` of its id."""

_CLIENT_PREFIX = "client-"
_ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def client_sender(client_id: int) -> str:
    """The sender name of client ``client_id`` (``"client-7"``)."""
    return f"{_CLIENT_PREFIX}{int(client_id)}"


@functools.lru_cache(maxsize=1 << 16)
def _check_sender(sender: str) -> None:
    """Raise :class:`ProtocolError` unless ``sender`` is the server or ``client-<id>`` (cached:
    a run's messages come from a few senders, so each is checked once; a bad one is never
    cached, since raising caches nothing)."""
    if sender == SERVER:
        return
    digits = sender[len(_CLIENT_PREFIX) :] if sender.startswith(_CLIENT_PREFIX) else ""
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 18):
        raise ProtocolError(
            f"envelope field 'sender' must be {SERVER!r} or 'client-<id>', got {sender!r}"
        )


@dataclass(frozen=True)
class Envelope:
    """What travels on a broker topic: routing and dedupe fields around a payload.

    ``(run_id, phase, sender, msg_id)`` identifies a message: a receiver that has handled it once
    drops every later copy (at-least-once delivery plus dedupe, see :mod:`fedxab.broker.base`).
    ``payload`` is the msgpack of a message's ``to_wire()`` (or of a control body); its decoding
    is the receiver's job (:meth:`body`), so routing never needs to parse it.
    """

    run_id: str
    kind: str
    phase: int
    sender: str
    msg_id: str
    payload: bytes
    sent_at: float = 0.0
    schema_version: int = SCHEMA_VERSION
    session: str = ""
    """The execution's session (:mod:`fedxab.agents.lobby`); empty before a client has one
    (its join, heartbeats and hello), and then not written."""

    @property
    def client_id(self) -> int | None:
        """The sending client's id, or ``None`` for the server (parsed at each read: cheaper
        than a ``functools.cached_property``, which takes a lock on Python 3.11)."""
        return None if self.sender == SERVER else int(self.sender[len(_CLIENT_PREFIX) :])

    @property
    def dedupe_key(self) -> tuple[str, int, str, str]:
        return (self.run_id, self.phase, self.sender, self.msg_id)

    def body(self) -> Any:
        """The decoded payload (raises :class:`ProtocolError` if it is malformed)."""
        return unpackb(self.payload)

    def encode(self) -> bytes:
        """The envelope as msgpack bytes (a map; the payload as a byte string)."""
        return encode_envelope(
            self.run_id,
            self.kind,
            self.phase,
            self.sender,
            self.msg_id,
            self.payload,
            self.sent_at,
            self.schema_version,
            self.session,
        )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Self:
        """Parse and validate an encoded envelope; every defect raises one clear ProtocolError.

        Checked: size, msgpack well-formedness, a flat map (:func:`unpack_frame`) with exactly
        the envelope's fields, the schema version (an unknown one is named), and each field's
        type and range.
        """
        if isinstance(data, _BYTES) and len(data) > MAX_MESSAGE_BYTES:
            raise ProtocolError(
                f"envelope of {len(data)} bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes"
            )
        raw = unpack_frame(data, "envelope")
        version = raw.get("schema_version")
        if version != SCHEMA_VERSION or isinstance(version, bool):
            raise ProtocolError(
                f"envelope field 'schema_version': unknown schema version {version!r}; "
                f"this fedxab reads version {SCHEMA_VERSION} only"
            )
        if not _REQUIRED_FIELDS <= raw.keys() <= _ENVELOPE_FIELDS:
            extra = sorted(set(raw) - _ENVELOPE_FIELDS)
            missing = sorted(_REQUIRED_FIELDS - set(raw))
            what = "; ".join(
                part
                for part in (
                    f"unknown field(s) {extra}" if extra else "",
                    f"missing field(s) {missing}" if missing else "",
                )
                if part
            )
            raise ProtocolError(f"envelope: {what}")
        for name in ("run_id", "msg_id"):
            value = raw[name]
            if not isinstance(value, str) or not _ID_RE.fullmatch(value):
                raise ProtocolError(
                    f"envelope field {name!r} must be 1 to 200 letters, digits or '_.:-', "
                    f"got {value!r:.80}"
                )
        kind = raw["kind"]
        if kind not in ENVELOPE_KINDS:
            raise ProtocolError(
                f"envelope field 'kind' must be one of {', '.join(ENVELOPE_KINDS)}, "
                f"got {kind!r:.80}"
            )
        phase = raw["phase"]
        if isinstance(phase, bool) or not isinstance(phase, int) or not 0 <= phase < 2**31:
            raise ProtocolError(
                f"envelope field 'phase' must be an integer in [0, 2^31), got {phase!r:.80}"
            )
        sender = raw["sender"]
        if not isinstance(sender, str):
            raise ProtocolError(f"envelope field 'sender' must be a string, got {sender!r:.80}")
        _check_sender(sender)
        sent_at = raw["sent_at"]
        if (
            isinstance(sent_at, bool)
            or not isinstance(sent_at, _NUMBERS)
            or not math.isfinite(sent_at)
            or sent_at < 0
        ):
            raise ProtocolError(
                f"envelope field 'sent_at' must be a finite time >= 0, got {sent_at!r:.80}"
            )
        payload = raw["payload"]
        if not isinstance(payload, bytes):
            raise ProtocolError(
                f"envelope field 'payload' must be a byte string, got {type(payload).__name__}"
            )
        session = raw.get("session", "")
        if not isinstance(session, str) or not _SESSION_RE.fullmatch(session):
            raise ProtocolError(
                f"envelope field 'session' must be 1 to 64 hex digits, got {session!r:.80}"
            )
        # Every field is checked: fill the frozen instance at once rather than through the
        # generated __init__, whose per-field setattr is a quarter of a decode's time.
        envelope = object.__new__(cls)
        envelope.__dict__.update(raw, sent_at=float(sent_at), session=session)
        return envelope


_ENVELOPE_FIELDS = frozenset(f.name for f in fields(Envelope))
_REQUIRED_FIELDS = _ENVELOPE_FIELDS - {"session"}
_SESSION_RE = re.compile(r"|[0-9a-f]{1,64}")


def encode_envelope(
    run_id: str,
    kind: str,
    phase: int,
    sender: str,
    msg_id: str,
    payload: bytes,
    sent_at: float,
    schema_version: int = SCHEMA_VERSION,
    session: str = "",
) -> bytes:
    """``Envelope(...).encode()`` without building the envelope: what a sender of many messages
    (a client agent's reports) calls. An empty ``session`` is not written."""
    frame = {
        "schema_version": schema_version,
        "run_id": run_id,
        "kind": kind,
        "phase": phase,
        "sender": sender,
        "msg_id": msg_id,
        "sent_at": sent_at,
        "payload": payload,
    }
    if session:
        frame["session"] = session
    return packb(frame)
