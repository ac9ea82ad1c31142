"""The envelope around every broker message: round trip, and one clear ProtocolError per defect."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedxab.broker.codec import (
    MAX_MESSAGE_BYTES,
    SCHEMA_VERSION,
    SERVER,
    Envelope,
    client_sender,
    packb,
)
from fedxab.errors import ProtocolError


def _envelope(**changes: object) -> Envelope:
    fields = dict(
        run_id="run-1",
        kind="report",
        phase=3,
        sender=client_sender(7),
        msg_id="report:3",
        payload=packb({"kind": "fedpne.report", "phase": 3}),
        sent_at=1700000000.25,
    )
    fields.update(changes)
    return Envelope(**fields)  # type: ignore[arg-type]


def _raw(**changes: object) -> bytes:
    """An encoded envelope map with some fields replaced (or removed with ``...``)."""
    env = _envelope()
    data = {
        "schema_version": SCHEMA_VERSION,
        "run_id": env.run_id,
        "kind": env.kind,
        "phase": env.phase,
        "sender": env.sender,
        "msg_id": env.msg_id,
        "sent_at": env.sent_at,
        "payload": env.payload,
    }
    for key, value in changes.items():
        if value is ...:
            del data[key]
        else:
            data[key] = value
    return msgpack.packb(data, use_bin_type=True)


def test_round_trip_keeps_every_field_and_the_payload_bytes():
    env = _envelope()
    back = Envelope.decode(env.encode())
    assert back == env
    assert back.client_id == 7
    assert back.dedupe_key == ("run-1", 3, "client-7", "report:3")
    assert back.body() == {"kind": "fedpne.report", "phase": 3}
    assert _envelope(sender=SERVER).client_id is None


def test_unknown_schema_version_is_refused_with_the_version_named():
    with pytest.raises(ProtocolError, match=r"unknown schema version 2.*reads version 1"):
        Envelope.decode(_raw(schema_version=2))
    with pytest.raises(ProtocolError, match="unknown schema version True"):
        Envelope.decode(_raw(schema_version=True))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"run_id": ""}, "run_id"),
        ({"run_id": 5}, "run_id"),
        ({"run_id": "a b"}, "run_id"),
        ({"msg_id": None}, "msg_id"),
        ({"kind": "gossip"}, "kind"),
        ({"phase": -1}, "phase"),
        ({"phase": 2**31}, "phase"),
        ({"phase": 1.0}, "phase"),
        ({"phase": True}, "phase"),
        ({"sender": "client-x"}, "sender"),
        ({"sender": "client-"}, "sender"),
        ({"sender": "admin"}, "sender"),
        ({"sender": 3}, "sender"),
        ({"sent_at": float("nan")}, "sent_at"),
        ({"sent_at": -1.0}, "sent_at"),
        ({"sent_at": "now"}, "sent_at"),
        ({"payload": "text"}, "payload"),
        ({"payload": ...}, "missing field"),
        ({"extra": 1}, "unknown field"),
    ],
)
def test_each_bad_field_is_named(changes, field):
    with pytest.raises(ProtocolError, match=field):
        Envelope.decode(_raw(**changes))


def test_not_a_map_and_oversized_messages_are_refused():
    with pytest.raises(ProtocolError, match="must be a map"):
        Envelope.decode(msgpack.packb([1, 2, 3]))
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        Envelope.decode(b"\x00" * (MAX_MESSAGE_BYTES + 1))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_protocol_error_or_decode_to_a_valid_envelope(data):
    try:
        env = Envelope.decode(data)
    except ProtocolError:
        return
    assert env.schema_version == SCHEMA_VERSION  # pragma: no cover (random bytes never get here)
