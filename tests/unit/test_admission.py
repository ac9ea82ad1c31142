"""Envelope admission (fedxab.run.envelope): each check refuses under its own reason, in order,
and an envelope that passes them all is returned as it was opened."""

from __future__ import annotations

import pytest

from fedxab.broker.codec import SERVER, Envelope, client_sender
from fedxab.errors import ProtocolError
from fedxab.run.envelope import CLIENT, Refusal, admit, check_phase
from fedxab.security.signing import Opened

SESSION = "a" * 32


def _opened(session: str = SESSION, **changes: object) -> Opened:
    fields: dict[str, object] = dict(
        run_id="run-1",
        kind="report",
        phase=2,
        sender=client_sender(3),
        msg_id="report:2",
        payload=b"\x80",
        session=session,
    )
    fields.update(changes)
    env = Envelope(**fields)  # type: ignore[arg-type]
    return Opened(env, session)


def _client_record(opened: Opened, **changes: object) -> Envelope | Refusal:
    given: dict[str, object] = dict(
        run_id="run-1",
        kinds=("report", "join"),
        n_clients=4,
        key="3",
        session=SESSION,
        sessionless=("join",),
    )
    given.update(changes)
    return admit(opened, **given)  # type: ignore[arg-type]


def test_a_record_that_passes_every_check_is_its_envelope():
    opened = _opened()
    assert _client_record(opened) is opened.envelope


@pytest.mark.parametrize(
    ("opened", "changes", "reason"),
    [
        (_opened(run_id="run-2"), {}, "wrong_run"),
        (_opened(kind="broadcast"), {}, "wrong_kind"),
        (_opened(sender=SERVER), {}, "unknown_sender"),
        (_opened(sender=client_sender(4)), {}, "unknown_sender"),  # not below n_clients
        (_opened(), {"key": "2"}, "wrong_key"),
        (_opened(session="b" * 32), {}, "replay"),
        (_opened(session=""), {}, "replay"),
        # the first failing check names the refusal
        (_opened(run_id="run-2", kind="broadcast"), {}, "wrong_run"),
        (_opened(kind="broadcast", sender=SERVER), {}, "wrong_kind"),
        (_opened(sender=client_sender(9), session="b" * 32), {"key": "9"}, "unknown_sender"),
        (_opened(session="b" * 32), {"key": "2"}, "wrong_key"),
    ],
)
def test_each_check_refuses_under_its_reason(opened, changes, reason):
    refusal = _client_record(opened, **changes)
    assert isinstance(refusal, Refusal)
    assert refusal.reason == reason
    assert refusal.text


def test_unchecked_fields_admit_anything():
    """No session, key or client count given: those checks are not made."""
    opened = _opened(sender=client_sender(99), session="b" * 32)
    assert admit(opened, run_id="run-1", kinds=("report",)) is opened.envelope
    assert admit(opened, run_id="run-1", kinds=("report",), sender=CLIENT, key=None) is not None


def test_a_sessionless_kind_is_admitted_of_any_session():
    opened = _opened(kind="join", session="")
    assert _client_record(opened) is opened.envelope


def test_only_the_server_when_the_server_is_expected():
    server = _opened(kind="broadcast", sender=SERVER)
    assert admit(server, run_id="run-1", kinds=("broadcast",), sender=SERVER) is server.envelope
    client = _opened(kind="broadcast")
    refusal = admit(client, run_id="run-1", kinds=("broadcast",), sender=SERVER)
    assert isinstance(refusal, Refusal) and refusal.reason == "unknown_sender"


class _Message:
    phase = 4


def test_a_payload_of_another_phase_than_its_envelope_is_a_protocol_error():
    check_phase(_Message(), 4)
    with pytest.raises(ProtocolError, match="payload phase 4 != envelope phase 5"):
        check_phase(_Message(), 5)
    with pytest.raises(ProtocolError, match="payload phase None"):
        check_phase(object(), 5)
