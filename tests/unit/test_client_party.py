"""The client party, record by record: no event loop, no broker.

Each record a client agent reads from the broadcast topic goes through
:meth:`ClientParty.on_broadcast`: a broadcast, final answer or abort it takes, or a refusal counted
under one reason with one log line. What it sends is records it builds: their envelopes decode,
carry the session the server's welcome gave, and (signing) verify under the clients' keys.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np
import pytest
from config_factory import sim_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedxab.algorithms.protocol import Finished
from fedxab.algorithms.registry import decode_report
from fedxab.broker.codec import SERVER, Envelope, client_sender, packb
from fedxab.config import config_from_dict
from fedxab.errors import EvaluationError, FedxabError
from fedxab.run.assembly import build_run
from fedxab.run.client_party import ClientParty
from fedxab.run.evaluation import telemetry_from_wire
from fedxab.run.failures import Aborted, failure_body
from fedxab.run.identity import run_id_for
from fedxab.run.observe import RunObserver
from fedxab.security import agents as security_agents
from fedxab.security.keys import generate_keys, load_key
from fedxab.security.signing import HmacSigner, Opened, seal_for_every_client

CONFIG = sim_config(clients=4, budget=1000)
RUN_ID = run_id_for(CONFIG, 0)
SESSION = "a" * 32
HOSTED = [0, 1]


def _party(config=CONFIG, clients=HOSTED, max_message_bytes=1 << 20) -> ClientParty:
    parts = build_run(config, 0, run_id=RUN_ID, server=False, client_ids=clients)
    return ClientParty(
        config, 0, parts, run_id=RUN_ID, max_message_bytes=max_message_bytes, observer=RunObserver()
    )


def _welcome(party: ClientParty, session: str = SESSION) -> None:
    welcome = Envelope(RUN_ID, "welcome", 0, SERVER, "welcome", packb(None), session=session)
    party.welcomed(Opened(welcome, session))


def _server_record(message, *, kind="broadcast", phase=None, run_id=RUN_ID, session=SESSION,
                   sender=SERVER) -> bytes:  # fmt: skip
    """A record as the server publishes it (unsigned): ``message`` a broadcast or a body."""
    payload = packb(message.to_wire() if hasattr(message, "to_wire") else message)
    phase = int(message.phase) if phase is None else phase
    return Envelope(
        run_id, kind, phase, sender, f"{kind}:{phase}", payload, session=session
    ).encode()


@pytest.fixture
def first():
    """Phase 1's broadcast, from the server's session of this run."""
    parts = build_run(CONFIG, 0, run_id=RUN_ID, server=True, client_ids=range(4))
    return parts.server.start()


@pytest.fixture
def party() -> ClientParty:
    party = _party()
    _welcome(party)
    return party


def _refused(party: ClientParty, value: bytes, caplog) -> str:
    """The one reason ``value`` was refused for (one count, one warning line)."""
    before = party.counts["broadcast_invalid"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fedxab.run.client_party"):
        assert party.on_broadcast(value) is None
    assert party.counts["broadcast_invalid"] == before + 1
    (line,) = [r.getMessage() for r in caplog.records]
    return line.split("(")[1].split(")")[0]


def test_a_broadcast_of_the_session_is_taken_and_answered(party, first):
    msg = party.on_broadcast(_server_record(first))
    assert int(msg.phase) == 1 and party.phase == 1 and party.counts["broadcast_invalid"] == 0
    answers = party.answer_all(msg)
    assert [m for m, _ in answers] == HOSTED
    assert [t.client for t in party.take_fresh()] == HOSTED and party.take_fresh() == []


def test_every_refusal_is_counted_under_its_reason(party, first, caplog):
    cases = {
        "malformed": b"\x00not an envelope",
        "wrong_run": _server_record(first, run_id="another-run"),
        "replay": _server_record(first, session="b" * 32),
        "wrong_kind": _server_record(first, kind="report"),
        "unknown_sender": _server_record(first, sender=client_sender(3)),
        "bad_payload": _server_record({"kind": "nonsense"}, phase=1),
        "out_of_order": _server_record(dataclasses.replace(first, phase=3)),
    }
    assert {why: _refused(party, value, caplog) for why, value in cases.items()} == {
        why: why for why in cases
    }
    assert party.phase == 0  # nothing refused moved the phase


def test_the_payload_phase_must_be_the_envelopes(party, first, caplog):
    assert _refused(party, _server_record(first, phase=2), caplog) == "bad_payload"


def test_a_record_above_the_size_limit_is_refused_before_decoding(first, caplog):
    party = _party(max_message_bytes=64)
    _welcome(party)
    assert _refused(party, _server_record(first), caplog) == "too_large"


def test_before_the_welcome_no_broadcast_is_taken(first, caplog):
    party = _party()
    assert _refused(party, _server_record(first), caplog) == "replay"
    _welcome(party)
    _welcome(party, "b" * 32)  # a later welcome keeps the first session
    assert party.session == SESSION and party.on_broadcast(_server_record(first)) is not None


def test_a_final_answer_only_of_the_phase_taken(party, first, caplog):
    final = Finished(phase=1, recommendation=np.zeros(1))
    assert _refused(party, _server_record(final), caplog) == "out_of_order"  # phase 0 taken
    party.on_broadcast(_server_record(first))
    assert isinstance(party.on_broadcast(_server_record(final)), Finished)


def test_an_abort_is_taken_unless_older_than_the_replies_sent(party, first, caplog):
    abort = _server_record(failure_body("client 3 failed"), kind="abort", phase=1)
    taken = party.on_broadcast(abort)
    assert taken == Aborted(1, "client 3 failed")
    party.sent(2)
    assert _refused(party, abort, caplog) == "replay"
    bad = _server_record({"no": "error"}, kind="abort", phase=2)
    assert _refused(party, bad, caplog) == "bad_payload"


def test_a_repeat_is_skipped_only_within_rebroadcast_s(party):
    assert not party.repeat_too_soon(1)
    party.sent(1)
    assert party.repeat_too_soon(1) and not party.repeat_too_soon(2)
    party._sent = (1, time.monotonic() - party.rebroadcast_s)
    assert not party.repeat_too_soon(1)
    assert party.counts["broadcasts_repeat_skipped"] == 1


def test_reports_and_telemetry_carry_the_session_and_decode(party, first):
    answers = party.answer_all(party.on_broadcast(_server_record(first)))
    reports, size = party.report_records(answers, 1)
    assert [key for key, _ in reports] == ["0", "1"] and party.counts["reports_sent"] == 2
    envelopes = [Envelope.decode(value) for _, value in reports]
    assert {(e.kind, e.phase, e.session, e.msg_id) for e in envelopes} == {
        ("report", 1, SESSION, "report:1")
    }
    assert [e.sender for e in envelopes] == [client_sender(0), client_sender(1)]
    assert size == sum(len(e.payload) for e in envelopes)
    assert all(int(decode_report("fedpne", e.body()).phase) == 1 for e in envelopes)
    telemetry = party.telemetry_records()
    assert [key for key, _ in telemetry] == ["0", "1"] and party.telemetry_records() == []
    entries = telemetry_from_wire(Envelope.decode(telemetry[0][1]).body())
    assert [t.client for t in entries] == [0] and entries[0].count > 0


def test_the_control_records_of_every_client(party):
    for kind, records in {
        "join": party.every_client("join", 0, "join"),
        "leave": party.every_client("leave", 4, "leave"),
    }.items():
        envelopes = [Envelope.decode(value) for _, value in records]
        assert [(e.kind, e.sender) for e in envelopes] == [(kind, client_sender(m)) for m in HOSTED]
        assert all(e.body() is None for e in envelopes)


def test_a_failed_objective_sends_failed_for_its_client_stopped_for_the_others(party):
    exc = EvaluationError(1, "the objective returned nan")
    envelopes = [Envelope.decode(v) for _, v in party.failure_records(exc, 2)]
    assert [(e.kind, e.sender, e.msg_id) for e in envelopes] == [
        ("failed", client_sender(1), "failed:2"),
        ("stopped", client_sender(0), "stopped:2"),
    ]
    assert "nan" in envelopes[0].body()["error"]


def test_outcomes_go_to_the_control_topic_without_local_dp(party):
    final = Finished(phase=3, recommendation=np.zeros(1))
    [(topic, records)] = party.outcome_records(final)
    assert topic == "control"
    envelopes = [Envelope.decode(v) for _, v in records]
    assert [(e.kind, e.phase, e.body()["client"]) for e in envelopes] == [
        ("outcome", 3, m) for m in HOSTED
    ]


@pytest.fixture
def hmac_keys(tmp_path, monkeypatch):
    generate_keys(4, tmp_path)
    monkeypatch.setattr(security_agents, "WRONG_KEY_AFTER_S", 0.0)
    return [load_key(tmp_path / f"client-{m}.key") for m in range(4)]


def test_signed_records_verify_and_a_wrong_key_is_named(tmp_path, hmac_keys, first, caplog):
    config = sim_config(clients=4, budget=1000, security={"keys_dir": str(tmp_path), "sign": True})
    party = _party(config)
    _welcome(party)
    server = HmacSigner(dict(enumerate(hmac_keys)), 4)
    (key, value), _ = party.every_client("join", 0, "join")
    assert key == "0" and server.open(value).envelope.session == SESSION
    broadcast = _server_record(first)
    signed = seal_for_every_client(broadcast, hmac_keys, session=SESSION)
    assert party.on_broadcast(signed) is not None
    wrong = [hmac_keys[0], hmac_keys[0], hmac_keys[2], hmac_keys[3]]  # client 1's is not its
    forged = seal_for_every_client(broadcast, wrong, session=SESSION)
    assert _refused(party, forged, caplog) == "bad_signature"  # client 1's key verified once


def test_a_key_that_never_verified_is_named_after_sustained_failures(tmp_path, hmac_keys, first):
    """A hosted client whose key is not the server's is never welcomed (the server refuses its
    hello): the party, probing the broadcast topic meanwhile, names the key."""
    config = sim_config(clients=4, budget=1000, security={"keys_dir": str(tmp_path), "sign": True})
    party = _party(config, clients=[1])
    wrong = [hmac_keys[0]] * 4
    forged = seal_for_every_client(_server_record(first), wrong, session=SESSION)
    party.probe(forged)
    party.probe(forged)
    with pytest.raises(FedxabError, match="client 1's key"):
        party.probe(forged)
    assert party.keys.failed[1] == 3


@st.composite
def _mutated(draw, valid: bytes) -> bytes:
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(data) - 1))
        data[i] ^= 1 << draw(st.integers(0, 7))
    return bytes(data)


def test_a_mutated_broadcast_is_taken_or_counted_never_raised(first):
    party = _party()
    _welcome(party)
    valid = _server_record(first)

    @settings(max_examples=300, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(_mutated(valid))
    def check(data):
        before = party.counts["broadcast_invalid"]
        msg = party.on_broadcast(data)
        assert (msg is None) == (party.counts["broadcast_invalid"] == before + 1)
        if msg is not None and not isinstance(msg, (Finished, Aborted)):
            party.answer_all(msg)  # what the agent does next: must not raise either

    check()
    assert party.counts["broadcast_invalid"] > 150


def test_under_local_dp_the_ledger_topic_gets_budgets_releases_and_ends(first):
    """Local DP (DP-Fed-PNE, ``release_best``): each client's budget record, a record of each
    release before the report carrying it, the charged best value instead of the outcome,
    and each client's end marker; the telemetry carries counts, never regret terms."""
    data = sim_config(clients=4, budget=20_000, heterogeneity="none").to_dict()
    data["algorithm"] = {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 1e-3,
                         "composition": "sequential"}  # fmt: skip
    data["privacy"] = {"release_best": True, "best_epsilon": 0.5, "best_low": 0.0,
                       "best_high": 1.0}  # fmt: skip
    config = config_from_dict(data)
    parts = build_run(config, 0, run_id=RUN_ID, server=False, client_ids=HOSTED)
    party = ClientParty(
        config, 0, parts, run_id=RUN_ID, max_message_bytes=1 << 20, observer=RunObserver()
    )
    _welcome(party)

    def kinds(records):
        return [Envelope.decode(value).body()["entry"] for _, value in records]

    assert kinds(party.budget_records()) == ["budget", "budget"]
    server = build_run(config, 0, run_id=RUN_ID, server=True, client_ids=range(4)).server
    party.answer_all(party.on_broadcast(_server_record(server.start())))
    releases = party.ledger_records()
    assert kinds(releases) == ["release", "release"] and party.ledger_records() == []
    for _, value in party.telemetry_records():
        assert all(
            t.global_terms is None for t in telemetry_from_wire(Envelope.decode(value).body())
        )
    final = Finished(phase=1, recommendation=np.zeros(1))
    (ledger_topic, best_releases), (control, best) = party.outcome_records(final)
    assert (ledger_topic, control) == ("ledger", "control")
    assert kinds(best_releases) == ["release", "release"]
    assert [Envelope.decode(v).kind for _, v in best] == ["best_dp", "best_dp"]
    assert all("best_value_dp" in Envelope.decode(v).body() for _, v in best)
    assert kinds(party.ledger_end_records()) == ["end", "end"]


def test_a_client_still_without_welcome_is_told_what_it_waits_for():
    text = _party().no_welcome_text(61.4, 2.0, "fedxab.lobby")
    assert text.startswith(f"run {RUN_ID}: no welcome from the server after 61 s")
    assert "(a hello every 2 s on fedxab.lobby)" in text and "server running?" in text
