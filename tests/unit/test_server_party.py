"""The server party (fedxab.run.server_party) at record level: no event loop, no broker.

Each record read is classified once (counted, one log line per refusal, state unchanged when
refused); control messages keep who joined, left, failed and stopped; the records the server
publishes carry its session and decode to what it sent."""

from __future__ import annotations

import logging

import pytest
from config_factory import sim_config

from fedxab.broker.base import Record
from fedxab.broker.codec import SERVER, Envelope, client_sender, packb
from fedxab.run.assembly import build_run
from fedxab.run.evaluation import telemetry_to_wire
from fedxab.run.failures import failure_body
from fedxab.run.observe import RunObserver
from fedxab.run.server_party import ServerParty

CLIENTS = 4
SEED = 0
RUN_ID = "run-party"
SESSION = "5" * 32
CONFIG = sim_config(clients=CLIENTS, budget=200)


def _party(config=CONFIG, closed=(), **kwargs) -> tuple[ServerParty, object]:
    """A party with the phase after the ``closed`` ones open (as a resumed server replays
    them), and its broadcast."""
    parts = build_run(config, SEED, run_id=RUN_ID, server=True)
    kwargs.setdefault("observer", RunObserver())
    party = ServerParty(
        config,
        parts.server,
        run_id=RUN_ID,
        signer=None,
        max_bytes=1 << 20,
        **kwargs,
    )
    party.signing_session = SESSION
    broadcast, history = party.replay(list(closed))
    assert len(history) == len(closed)
    return party, broadcast


class Told(RunObserver):
    """Records the evaluations each fresh telemetry told (the party's watch)."""

    def __init__(self) -> None:
        self.evaluations: list[int] = []

    def on_evaluations(self, n: int) -> None:
        self.evaluations.append(n)


def _clients():
    return build_run(CONFIG, SEED, run_id=RUN_ID, server=False, client_ids=range(CLIENTS)).clients


def _record(kind, m, phase, body, *, key=None, session=SESSION, offset=0, **changes) -> Record:
    fields = dict(
        run_id=RUN_ID,
        kind=kind,
        phase=phase,
        sender=client_sender(m),
        msg_id=f"{kind}:{phase}",
        payload=body if isinstance(body, bytes) else packb(body),
        session=session,
    )
    fields.update(changes)
    value = Envelope(**fields).encode()
    return Record("t", 0, offset, str(m) if key is None else key, value)


def _reports(party, broadcast):
    hosted = _clients()
    return {
        m: _record("report", m, 1, hosted.answer(m, broadcast)[0].to_wire()) for m in range(CLIENTS)
    }


def test_a_report_is_accepted_once_then_a_duplicate():
    party, broadcast = _party()
    reports = _reports(party, broadcast)
    assert party.on_report(reports[0]) is True
    assert party.on_report(reports[0]) is False
    assert party.counts == {"report_accepted": 1, "report_duplicate": 1}
    assert party.last_report is reports[0]
    assert sorted(party.run_session.accepted) == [0]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"run_id": "run-other"}, "wrong_run"),
        ({"kind": "heartbeat"}, "wrong_kind"),
        ({"sender": client_sender(CLIENTS)}, "unknown_sender"),
        ({"key": "3"}, "wrong_key"),
        ({"session": "6" * 32}, "replay"),
        ({"phase": 2}, "future_phase"),
        ({"payload": b"\xc1"}, "bad_payload"),
    ],
)
def test_a_refused_report_is_counted_under_its_reason_and_changes_nothing(caplog, changes, reason):
    party, broadcast = _party()
    good = _reports(party, broadcast)[0]
    env = Envelope.decode(good.value)
    fields = {f: getattr(env, f) for f in ("run_id", "kind", "phase", "sender", "msg_id")}
    fields |= {"payload": env.payload, "session": env.session} | changes
    key = fields.pop("key", "0")
    record = Record("t", 0, 0, key, Envelope(**fields).encode())
    with caplog.at_level(logging.INFO, logger="fedxab.run.server_party"):
        assert party.on_report(record) is False
    assert party.counts == {"report_invalid": 1}
    assert party.rejected == {("report", reason): 1}
    assert len(caplog.records) == 1 and caplog.records[0].levelno == logging.WARNING
    assert party.run_session.accepted == {}


def test_undecodable_bytes_are_malformed():
    party, _ = _party()
    assert party.on_control(Record("t", 0, 0, "0", b"\x00not msgpack")) is False
    assert party.rejected == {("control", "malformed"): 1}


def test_join_leave_and_their_repeats():
    party, _ = _party()
    join = _record("join", 2, 0, {}, session="")  # (a join comes before the session is known)
    assert party.on_control(join) is False
    assert party.on_control(join) is False
    assert party.on_control(_record("leave", 2, 1, {})) is True
    assert party.on_control(_record("leave", 2, 1, {})) is True
    assert party.joined == {2} and party.left == {2} and set(party.last_seen) == {2}
    assert party.counts == {"control_join": 1, "control_leave": 1, "control_duplicate": 2}


def test_fresh_telemetry_is_added_and_told_once():
    told = Told()
    party, broadcast = _party(observer=told)
    _, telemetry, _ = _clients().answer(1, broadcast)
    record = _record("telemetry", 1, 1, telemetry_to_wire([telemetry]))
    assert party.on_control(record) is True
    assert party.on_control(record) is True  # (a repeat: counted, not added again)
    assert told.evaluations == [telemetry.count] and party.fresh_telemetry == 1
    assert party.counts == {"control_telemetry": 2}


def test_telemetry_of_another_client_is_refused_whole():
    told = Told()
    party, broadcast = _party(observer=told)
    _, telemetry, _ = _clients().answer(1, broadcast)
    record = _record("telemetry", 0, 1, telemetry_to_wire([telemetry]))
    assert party.on_control(record) is False
    assert party.rejected == {("control", "bad_payload"): 1} and told.evaluations == []


def test_a_failure_of_this_execution_stops_the_run_and_an_earlier_ones_does_not():
    party, _ = _party()
    party.control_live = {0: 10}
    earlier = _record("failed", 1, 1, failure_body("boom"), offset=3)
    assert party.on_control(earlier) is False
    assert party.failure is None and party.stopped == set()
    assert party.on_control(_record("failed", 1, 1, failure_body("boom"), offset=10)) is True
    assert party.failure == f"run {RUN_ID}: client 1 failed at phase 1: boom"
    assert party.on_control(_record("stopped", 2, 1, {}, offset=11)) is True
    assert party.stopped == {1, 2}
    assert party.abort_record(1)  # the abort names the failure
    env = Envelope.decode(party.abort_record(1))
    assert (env.kind, env.sender, env.session) == ("abort", SERVER, SESSION)
    assert env.body() == failure_body(party.failure)


def test_a_second_different_outcome_is_a_conflict():
    party, broadcast = _party()
    hosted = _clients()
    first = hosted.outcome(0).to_dict()
    assert party.on_control(_record("outcome", 0, 1, first)) is False  # (nothing to wake)
    assert party.on_control(_record("outcome", 0, 1, first)) is False  # the same again: kept
    assert party.counts == {"control_outcome": 2}
    hosted.answer(0, broadcast)  # client 0 pulls: its outcome is another one
    second = hosted.outcome(0).to_dict()
    assert second != first
    party.on_control(_record("outcome", 0, 1, second))
    assert party.rejected == {("control", "conflict"): 1}
    assert party.run_session.outcomes[0].to_dict() == first


def test_under_local_dp_an_outcome_is_refused():
    params = {"epsilon": 0.8, "privacy_delta": 0.01}
    config = sim_config("dpfedpne", clients=CLIENTS, budget=200, params=params)
    party, _ = _party(config)
    party.on_control(_record("outcome", 0, 1, {}))
    assert party.rejected == {("control", "local_dp"): 1}


def test_the_broadcast_record_is_the_broadcast_in_this_session():
    party, broadcast = _party()
    record, size = party.broadcast_record(broadcast)
    env = Envelope.decode(record)
    assert (env.kind, env.phase, env.sender, env.msg_id, env.session) == (
        "broadcast",
        1,
        SERVER,
        "broadcast:1",
        SESSION,
    )
    assert env.payload == packb(broadcast.to_wire()) and size == len(env.payload)


def test_replay_restores_the_closed_phases_and_returns_their_broadcasts():
    party, broadcast = _party()
    for record in _reports(party, broadcast).values():
        party.on_report(record)
    closed = party.run_session.close_phase(10, CLIENTS)
    second = party.run_session.msg
    again, msg = _party(closed=[closed])  # a resumed server
    assert int(msg.phase) == int(second.phase) == 2
    assert packb(msg.to_wire()) == packb(second.to_wire())
    assert again.run_session.phases == party.run_session.phases


def test_the_waiting_text_names_who_is_missing_and_why():
    party, broadcast = _party()
    party.on_control(_record("join", 1, 0, {}, session=""))
    party.on_report(_reports(party, broadcast)[0])
    text = party.waiting_text(1, 12.0)
    assert f"run {RUN_ID}: phase 1 has waited 12 s for 3 of 4 clients" in text
    assert "never joined: 2, 3" in text and "joined, no report yet: 1" in text
    assert "phase_deadline_s" in text


def test_telemetry_handed_over_in_process_is_added_and_told_once():
    told = Told()
    party, broadcast = _party(observer=told)
    hosted = _clients()
    _, telemetry, _ = hosted.answer(3, broadcast)
    party.take_local([telemetry, telemetry], [hosted.outcome(3)])
    assert told.evaluations == [telemetry.count] and party.fresh_telemetry == 1
    assert list(party.run_session.outcomes) == [3]
    assert party.counts == {}  # (nothing came over the broker)


def test_at_the_end_the_missing_leaves_and_telemetry_are_named(caplog):
    party, broadcast = _party()
    _, telemetry, _ = _clients().answer(0, broadcast)
    party.on_control(_record("telemetry", 0, 1, telemetry_to_wire([telemetry])))
    party.on_control(_record("leave", 0, 1, {}))
    with caplog.at_level(logging.WARNING, logger="fedxab.run.server_party"):
        party.warn_incomplete(party.run_session.expected_use())
    lines = [r.getMessage() for r in caplog.records]
    assert f"run {RUN_ID}: 3 client(s) did not confirm the final answer (first: [1, 2, 3])" in lines
    assert any("telemetry incomplete for 4 client(s)" in line for line in lines), lines
