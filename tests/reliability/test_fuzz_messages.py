"""Fuzzing the wire: random and mutated byte strings never crash the decoder or a party.

Hypothesis feeds 10,000 byte strings to each target: arbitrary bytes, and valid messages with
bytes flipped, inserted, deleted or truncated. The decoder must raise ProtocolError or return a
well-formed envelope; the server party (:mod:`fedxab.run.server_party`, phase 1 open) must
classify every record exactly once (accepted, duplicate, late or invalid) with one log line per
rejection, and its state may change only by an accepted report; the client party
(:mod:`fedxab.run.client_party`) must return a valid broadcast or count it invalid. One live
server agent and one live client agent, each run to its end over the in-memory broker, take
mutated records on their topics the same way (the smoke tests of the agents' consumers).
"""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import run_id_for
from fedxab.agents.server import ServerAgent
from fedxab.broker.base import Record, run_topics
from fedxab.broker.codec import SERVER, Envelope, packb
from fedxab.broker.memory import MemoryBroker
from fedxab.config import config_from_dict
from fedxab.errors import ProtocolError
from fedxab.run.assembly import build_run
from fedxab.run.client_party import ClientParty
from fedxab.run.observe import RunObserver
from fedxab.run.server_party import ServerParty

EXAMPLES = 10_000
CONFIG = config_from_dict(
    {
        "run": {"budget": 1000},
        "objective": {"name": "garland"},
        "algorithm": {"name": "fedpne"},
        "federation": {"clients": 4},
    }
)
RUN_ID = run_id_for(CONFIG, 0)


def _live_pair():
    """The server party with phase 1 open, a client party, and valid wire bytes of each side."""
    session = build_run(CONFIG, 0, run_id=RUN_ID, server=True).server
    party = ServerParty(
        CONFIG, session, run_id=RUN_ID, signer=None, max_bytes=1 << 20, observer=RunObserver()
    )
    broadcast, _ = party.replay([])
    parts = build_run(CONFIG, 0, run_id=RUN_ID, server=False, client_ids=[0, 1])
    client = ClientParty(
        CONFIG, 0, parts, run_id=RUN_ID, max_message_bytes=1 << 20, observer=RunObserver()
    )
    broadcast_bytes = Envelope(
        run_id=RUN_ID,
        kind="broadcast",
        phase=session.phase,
        sender=SERVER,
        msg_id="broadcast:1",
        payload=packb(broadcast.to_wire()),
    ).encode()
    m, report = client.answer_all(broadcast)[0]
    report_bytes = client.envelope("report", m, session.phase, "r", packb(report.to_wire()))
    return party, client, broadcast_bytes, report_bytes


SERVER_PARTY, CLIENT_PARTY, BROADCAST, REPORT = _live_pair()


@st.composite
def mutated(draw, valid: bytes) -> bytes:
    """``valid`` with a few random byte edits, or a truncation, or pure random bytes."""
    how = draw(st.sampled_from(["random", "flip", "insert", "delete", "truncate"]))
    if how == "random":
        return draw(st.binary(max_size=300))
    data = bytearray(valid)
    if how == "truncate":
        return bytes(data[: draw(st.integers(0, len(data) - 1))])
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(data) - 1))
        if how == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif how == "insert":
            data.insert(i, draw(st.integers(0, 255)))
        elif len(data) > 1:
            del data[i]
    return bytes(data)


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.slow  # 10,000 byte strings: about 20 CPU-seconds
@FUZZ
@given(st.one_of(mutated(REPORT), mutated(BROADCAST)))
def test_decoder_raises_protocol_error_or_returns_a_valid_envelope(data):
    try:
        env = Envelope.decode(data)
    except ProtocolError as exc:
        assert str(exc)
        return
    assert Envelope.decode(env.encode()) == env


@pytest.fixture(scope="module")
def rejection_log():
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.INFO)
    logger = logging.getLogger("fedxab.run.server_party")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


def _state(party):
    """What a rejected record must leave as it was: the open phase, its accepted reports and
    the reports the state machine holds."""
    run = party.run_session
    return (run.phase, sorted(run.accepted), run.server.reported)


@pytest.mark.slow  # 10,000 records: about 18 s
@FUZZ
@given(data=mutated(REPORT), key=st.sampled_from(["0", "1", None]))
def test_the_server_party_classifies_every_record_once(rejection_log, data, key):
    party = SERVER_PARTY
    before = dict(party.counts)
    state = _state(party)
    logged = len(rejection_log)
    party.on_report(Record("t", 0, 0, key, data))  # must not raise
    changed = {k: v - before.get(k, 0) for k, v in party.counts.items() if v != before.get(k, 0)}
    assert len(changed) == 1 and next(iter(changed.values())) == 1  # exactly one outcome
    (outcome,) = changed
    new_lines = rejection_log[logged:]
    if outcome == "report_accepted":
        assert new_lines == []
    else:  # one clear line per record not accepted; a warning for an invalid one
        assert len(new_lines) == 1 and new_lines[0].getMessage()
        assert (new_lines[0].levelno == logging.WARNING) == (outcome == "report_invalid")
    if outcome != "report_accepted":
        assert _state(party) == state


def test_a_live_server_agent_counts_junk_on_its_topics_and_finishes_the_run():
    """The smoke test of the agent's consumers: 20 undecodable records on each of the report
    and control topics before the run starts; every one is refused as malformed, and the run
    ends with the same record as without them."""
    records = [b"\xc1" * (k + 1) for k in range(20)]  # (0xc1: a byte msgpack never uses)

    async def run(with_junk: bool):
        broker = MemoryBroker()
        server = ServerAgent(CONFIG, 0, broker, run_id=RUN_ID)
        client = ClientAgent(CONFIG, 0, broker, run_id=RUN_ID, client_ids=list(range(4)))
        topics = run_topics("fedxab", RUN_ID)
        async with asyncio.timeout(60), broker:
            if with_junk:
                await broker.create_topics(list(topics.values()))
                for value in records:
                    await broker.publish(topics["report"], "0", value)
                    await broker.publish(topics["control"], "0", value)
            result, _ = await asyncio.gather(server.run(), client.run())
        return result, server.party

    clean, _ = asyncio.run(run(False))
    result, party = asyncio.run(run(True))
    assert party.rejected == {("report", "malformed"): 20, ("control", "malformed"): 20}
    assert result.cumulative_regret.tolist() == clean.cumulative_regret.tolist()


@pytest.mark.slow  # 10,000 records
@FUZZ
@given(data=mutated(BROADCAST))
def test_a_client_party_rejects_bad_broadcasts(data):
    party = CLIENT_PARTY
    before = party.counts["broadcast_invalid"]
    msg = party.on_broadcast(data)
    if msg is None:
        assert party.counts["broadcast_invalid"] == before + 1
    else:
        assert party.counts["broadcast_invalid"] == before
        assert int(msg.phase) >= 0


def test_a_live_client_agent_skips_bad_broadcasts_and_finishes():
    """The client agent's I/O shell, live on the embedded broker: mutated copies of a broadcast
    published once the run began are refused (counted once each) and the run finishes as
    without them."""
    rng = random.Random(0)
    garbage = []
    for _ in range(20):  # the broadcast with one bit flipped (of no session: all refused)
        data = bytearray(BROADCAST)
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        garbage.append(bytes(data))

    topic = run_topics("fedxab", RUN_ID)["broadcast"]

    class Injecting(MemoryBroker):
        """Appends the garbage right behind the server's first record on the broadcast topic,
        before any reader can run, so the client reads it before the run's next phase (a
        garbage published by another task could land after the final answer, unread)."""

        injected = False
        garbage: list[bytes] = []  # noqa: RUF012 (set per run below)

        async def publish(self, topic_: str, key: str | None, value: bytes) -> None:
            await super().publish(topic_, key, value)
            if topic_ == topic and not self.injected:
                self.injected = True
                for junk in self.garbage:
                    await super().publish(topic_, None, junk)

    async def main(records):
        async with Injecting() as broker:
            broker.garbage = records
            server = ServerAgent(CONFIG, 0, broker, run_id=RUN_ID)
            client = ClientAgent(CONFIG, 0, broker, run_id=RUN_ID, client_ids=[0, 1, 2, 3])
            async with asyncio.timeout(60):
                record, _ = await asyncio.gather(server.run(), client.run())
        assert broker.injected
        return record, client

    clean, _ = asyncio.run(main([]))
    record, client = asyncio.run(main(garbage))
    assert client.counts["broadcast_invalid"] == len(garbage)  # none is of this session
    assert record.recommendation.tolist() == clean.recommendation.tolist()
    assert record.evaluations == clean.evaluations


@pytest.mark.slow  # reads the counts the slow fuzz tests above leave (the same lane, module)
def test_the_fuzzing_reached_every_outcome():
    """The mutations exercise rejection paths (invalid) and, rarely, produce valid copies."""
    counts = SERVER_PARTY.counts
    assert counts["report_invalid"] > EXAMPLES // 2
    assert CLIENT_PARTY.counts["broadcast_invalid"] > EXAMPLES // 2
