"""The message payload codec: plain data <-> msgpack bytes, numpy arrays as an extension type.

Broadcasts and reports (DESIGN.md, Contracts: Federated protocol) turn into plain data with
``to_wire()``: maps with string keys, lists, strings, numbers, booleans, ``None``, bytes, and
numpy arrays. :func:`packb` writes that as msgpack; :func:`unpackb` reads it back. The envelope
(schema version, run id, phase, sender, message id) wraps this payload in a later issue.

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

import math
import re
from typing import Any

import msgpack
import numpy as np

from fedxab.errors import ProtocolError

__all__ = ["MAX_NDIM", "NDARRAY_EXT", "packb", "unpackb"]

NDARRAY_EXT = 1
"""msgpack extension type code of a numpy array."""

MAX_NDIM = 32
"""Most dimensions a decoded array may have."""

_NUMERIC_KINDS = "biuf"
_KIND_NAMES = "bool, int, uint or float"
# byte order, kind, item size: "<f8", "|b1", ">i4", "|u1" (what dtype.str gives for numeric dtypes)
_DTYPE_RE = re.compile(r"[<>|=][biuf][0-9]{1,2}")


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
    if not isinstance(dtype_str, str) or not _DTYPE_RE.fullmatch(dtype_str):
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
    if not isinstance(data, bytes | bytearray | memoryview):
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
