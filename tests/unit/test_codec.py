"""The payload codec: msgpack with numpy arrays as ext type 1; garbage is a ProtocolError."""

from __future__ import annotations

import contextlib

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedxab.algorithms.fedpne import FedPNEBroadcast, FedPNEReport
from fedxab.algorithms.protocol import Finished
from fedxab.broker.codec import NDARRAY_EXT, packb, unpackb
from fedxab.errors import ProtocolError

NUMERIC_DTYPES = [
    "<f8",
    "<f4",
    "<f2",
    ">f8",
    "<i8",
    "<i4",
    "|i1",
    ">i2",
    "<u8",
    "|u1",
    "<u2",
    "|b1",
]


def _ext(body: object) -> bytes:
    """A message that is just one ext-1 value with the given (msgpack-encoded) body."""
    raw = body if isinstance(body, bytes) else msgpack.packb(body, use_bin_type=True)
    return msgpack.packb(msgpack.ExtType(NDARRAY_EXT, raw), use_bin_type=True)


# ----------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (2, 0, 4), (1, 1, 1, 2)])
def test_array_roundtrip_keeps_dtype_shape_and_values(dtype, shape):
    rng = np.random.default_rng(0)
    arr = np.asarray(rng.random(shape) * 100).astype(dtype)
    back = unpackb(packb({"a": arr}))["a"]
    assert isinstance(back, np.ndarray)
    assert back.dtype == np.dtype(dtype) and back.shape == shape
    np.testing.assert_array_equal(back, arr)
    assert not back.flags.writeable  # decoded arrays are read-only views of the message


def test_non_contiguous_arrays_are_sent_in_c_order():
    arr = np.arange(24, dtype=np.float64).reshape(4, 6)[::2, 1::2]
    assert not arr.flags.c_contiguous
    np.testing.assert_array_equal(unpackb(packb(arr)), arr)
    fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(unpackb(packb(fortran)), fortran)


def test_ext_layout_is_dtype_shape_bytes():
    arr = np.array([[1.5, -2.0]], dtype="<f8")
    ext = msgpack.unpackb(packb(arr))
    assert isinstance(ext, msgpack.ExtType) and ext.code == NDARRAY_EXT == 1
    dtype, shape, raw = msgpack.unpackb(ext.data)
    assert (dtype, shape, raw) == ("<f8", [1, 2], arr.tobytes())


def test_plain_values_and_numpy_scalars():
    value = {
        "s": "text",
        "i": -3,
        "big": 2**63,
        "f": 0.25,
        "b": True,
        "n": None,
        "raw": b"\x00\x01",
        "list": [1, [2.5, "x"]],
        "tuple": (1, 2),
        "np": [np.float64(0.5), np.int32(7), np.bool_(False), np.uint8(255)],
    }
    back = unpackb(packb(value))
    assert back["tuple"] == [1, 2]
    assert back["np"] == [0.5, 7, False, 255]
    assert type(back["np"][2]) is bool
    assert {k: back[k] for k in ("s", "i", "big", "f", "b", "n", "raw", "list")} == {
        k: value[k] for k in ("s", "i", "big", "f", "b", "n", "raw", "list")
    }


# every message of fedpne.py, through the wire and back
FEDPNE_MESSAGES = [
    FedPNEBroadcast(phase=1, depth=3, nodes=np.arange(1, 9, dtype=np.int64), pulls_per_node=1),
    FedPNEBroadcast(phase=7, depth=40, nodes=np.array([2**39, 2**40 - 1]), pulls_per_node=30181),
    FedPNEReport(phase=1, client=0, complete=True, means=np.array([0.5, -1.25, 3.0])),
    FedPNEReport(phase=4, client=9999, complete=False),
    Finished(phase=7, recommendation=np.array([0.52539062])),
    Finished(phase=2, recommendation=np.array([3.0, 2.0]), reason="budget"),
]


def _fields(msg) -> dict:
    out = {}
    for k, v in vars(msg).items():
        out[k] = v.tolist() if isinstance(v, np.ndarray) else v
    return out


@pytest.mark.parametrize("msg", FEDPNE_MESSAGES, ids=lambda m: type(m).__name__)
def test_every_fedpne_message_roundtrips_through_the_codec(msg):
    data = packb(msg.to_wire())
    assert isinstance(data, bytes)
    back = type(msg).from_wire(unpackb(data))
    assert type(back) is type(msg)
    assert _fields(back) == _fields(msg)
    # and encoding is deterministic (the runner counts these bytes)
    assert packb(back.to_wire()) == data


def test_a_report_cannot_be_read_as_a_broadcast():
    data = packb(FEDPNE_MESSAGES[2].to_wire())
    with pytest.raises(ProtocolError, match="kind"):
        FedPNEBroadcast.from_wire(unpackb(data))


# hypothesis: nested plain data with numeric arrays survives the round trip
_arrays = hnp.arrays(
    dtype=st.sampled_from([np.dtype(d) for d in NUMERIC_DTYPES]),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
_values = st.recursive(
    _scalars | _arrays,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


@settings(max_examples=200, deadline=None)
@given(_values)
def test_roundtrip_of_arbitrary_plain_data(value):
    assert _same(value, unpackb(packb(value)))


# ---------------------------------------------------------------------- encoding refusals
@pytest.mark.parametrize(
    "value",
    [
        np.array(["a", "b"]),
        np.array([1 + 2j]),
        np.array([object()], dtype=object),
        np.array(["2020-01-01"], dtype="datetime64[D]"),
        object(),
        {1.5},
        2**64,
    ],
    ids=["str-array", "complex", "object", "datetime", "object()", "set", "int>64bit"],
)
def test_values_that_cannot_travel_are_refused(value):
    with pytest.raises(ProtocolError, match="cannot encode"):
        packb({"x": value})


# ---------------------------------------------------------------------- decoding refusals
@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "malformed message"),
        (b"\xc1", "malformed message"),  # never-used msgpack byte
        (packb({"a": 1})[:-1], "malformed message"),  # truncated
        (packb({"a": 1}) + b"\x00", "malformed message"),  # trailing data
        (msgpack.packb({1: "x"}), "malformed message"),  # non-string map key
        (msgpack.packb(msgpack.ExtType(7, b"")), "unknown msgpack extension type 7"),
        (_ext(b"\xc1"), "not valid msgpack"),
        (_ext({"dtype": "<f8"}), r"\[dtype, shape, data\]"),
        (_ext(["<f8", [1]]), r"\[dtype, shape, data\]"),
        (_ext(["|O8", [1], b"\x00" * 8]), "not a numeric dtype"),
        (_ext(["<c16", [1], b"\x00" * 16]), "not a numeric dtype"),
        (_ext(["<U1", [1], b"\x00" * 4]), "not a numeric dtype"),
        (_ext(["<M8", [1], b"\x00" * 8]), "not a numeric dtype"),
        (_ext(["f8", [1], b"\x00" * 8]), "not a numeric dtype"),
        (_ext(["<i3", [1], b"\x00" * 3]), "unknown dtype"),
        (_ext([8, [1], b"\x00" * 8]), "not a numeric dtype"),
        (_ext(["<f8", [2], b"\x00" * 8]), "needs 16 bytes, got 8"),
        (_ext(["<f8", [-1], b""]), "integers >= 0"),
        (_ext(["<f8", [1.0], b"\x00" * 8]), "integers >= 0"),
        (_ext(["<f8", [True], b"\x00" * 8]), "integers >= 0"),
        (_ext(["<f8", 1, b"\x00" * 8]), "shape must be a list"),
        (_ext(["<f8", [1] * 33, b"\x00" * 8]), "shape must be a list"),
        (_ext(["<f8", [2**63, 0], b""]), "malformed array"),
        (_ext(["<f8", [1], "12345678"]), "byte string"),
        (_ext(["|b1", [2], b"\x00\x02"]), "0 or 1"),
        (_ext(["<f8", [1], msgpack.ExtType(1, b"")]), "inside an array body"),
    ],
)
def test_malformed_bytes_are_a_protocol_error_with_the_reason(data, match):
    with pytest.raises(ProtocolError, match=match):
        unpackb(data)


def test_non_bytes_input_is_refused():
    with pytest.raises(ProtocolError, match="expected bytes"):
        unpackb("not bytes")  # type: ignore[arg-type]
    assert unpackb(bytearray(packb([1]))) == [1]
    assert unpackb(memoryview(packb([1]))) == [1]


_MESSAGE_CLASSES = (FedPNEBroadcast, FedPNEReport, Finished)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_bytes_never_raise_anything_but_protocol_error(data):
    try:
        value = unpackb(data)
    except ProtocolError:
        return
    for cls in _MESSAGE_CLASSES:  # whatever decodes is then rejected or accepted cleanly
        with contextlib.suppress(ProtocolError):
            cls.from_wire(value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_garbage_array_bodies_are_rejected_or_decode_to_numeric_arrays(body):
    try:
        value = unpackb(_ext(body))
    except ProtocolError:
        return
    assert isinstance(value, np.ndarray) and value.dtype.kind in "biuf"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(FEDPNE_MESSAGES),
    st.data(),
)
def test_corrupted_messages_are_rejected_cleanly(msg, data):
    """Flip, drop or insert bytes of a real message: a ProtocolError or a valid message."""
    raw = bytearray(packb(msg.to_wire()))
    pos = data.draw(st.integers(0, len(raw) - 1))
    action = data.draw(st.sampled_from(["flip", "drop", "insert"]))
    if action == "flip":
        raw[pos] ^= data.draw(st.integers(1, 255))
    elif action == "drop":
        del raw[pos]
    else:
        raw.insert(pos, data.draw(st.integers(0, 255)))
    with contextlib.suppress(ProtocolError):
        type(msg).from_wire(unpackb(bytes(raw)))
