"""Type-confused fields against live agents, on every topic, signed and unsigned (issue 16).

The records are real: one DP-Fed-PNE run on the embedded broker is recorded (every broadcast,
report, control, ledger and lobby record), signed and unsigned. Hypothesis then takes a recorded
record, puts a value of another type (None, a bool, a huge or negative integer, NaN, a string,
bytes, a list, a map, a numpy array, ...) into one envelope field or one field anywhere in its
payload, or deletes or adds a field, signs the result with the sender's own key in the signed
runs (so the checks behind the signature are reached), and hands it to the live agent that reads
that topic. Every record must end as one counted outcome and nothing else: the agent's documented
protocol error path (never another exception), and no state change unless the record is still
valid.

``FEDXAB_FUZZ_EXAMPLES`` sets the examples per topic and signing mode (default 1,000; the issue's
100,000-record run: ``FEDXAB_FUZZ_EXAMPLES=10000``, 10 targets).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import os
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedxab.agents import lobby
from fedxab.agents.checkpoint import CheckpointError, ServerCheckpoint
from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import client_agent, run_id_for
from fedxab.agents.lobby import _differences_in, _refusal_of
from fedxab.agents.server import ServerAgent
from fedxab.algorithms.protocol import Finished
from fedxab.broker.base import DEFAULT_MAX_MESSAGE_BYTES, Record, lobby_topic
from fedxab.broker.codec import SERVER, Envelope, client_sender, packb, unpack_frame, unpackb
from fedxab.broker.memory import MemoryBroker
from fedxab.config import config_from_dict
from fedxab.errors import ConfigError, ProtocolError
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mirror import apply_record
from fedxab.run.identity import protocol_of
from fedxab.security.agents import Signer
from fedxab.security.keys import generate_keys, load_key
from fedxab.security.signing import SignatureError, SignedEnvelope, seal, seal_for_every_client

EXAMPLES = int(os.environ.get("FEDXAB_FUZZ_EXAMPLES", "1000"))
CLIENTS = 3
SEED = 0
LIMIT = DEFAULT_MAX_MESSAGE_BYTES


def _config(keys_dir: str | None) -> object:
    data = {
        "run": {"budget": 300, "seed": SEED},
        "objective": {"name": "garland"},
        "algorithm": {
            "name": "dpfedpne",
            "epsilon": 0.5,
            "privacy_delta": 1e-3,
            "composition": "sequential",
        },
        "federation": {"clients": CLIENTS},
        "privacy": {"budget_epsilon": 50.0},
        "agents": {"telemetry_interval_s": 1e-6},
    }
    if keys_dir is not None:
        data["security"] = {"keys_dir": keys_dir, "sign": True}
    return config_from_dict(data)


class RecordingBroker(MemoryBroker):
    """The embedded broker, keeping every record published, by topic kind."""

    def __init__(self) -> None:
        super().__init__()
        self.published: dict[str, list[Record]] = {}

    async def publish(self, topic: str, key: str | None, value: bytes) -> None:
        kind = topic.rsplit(".", 1)[-1]
        self.published.setdefault(kind, []).append(Record(topic, 0, 0, key, value))
        await super().publish(topic, key, value)


@dataclass
class Recorded:
    """One recorded run: its config, records by topic kind and, signed, keys and session."""

    config: object
    records: dict[str, list[Record]]
    keys: dict[int, object] = field(default_factory=dict)
    session: str = ""


def _record_run(keys_dir: str | None) -> Recorded:
    config = _config(keys_dir)
    broker = RecordingBroker()
    run_id = run_id_for(config, SEED)

    async def main():
        server = ServerAgent(config, SEED, broker, run_id=run_id)
        agent = client_agent(config, SEED, broker, list(range(CLIENTS)), None)
        async with broker, asyncio.TaskGroup() as group:
            group.create_task(server.run())
            group.create_task(agent.run())
        return server.session

    session = asyncio.run(main())
    keys = {}
    if keys_dir is not None:
        keys = {m: load_key(f"{keys_dir}/client-{m}.key") for m in range(CLIENTS)}
    # The lobby: a hello of another run (the client agent above met its server at once), and the
    # server's refusal of it
    signer = Signer(keys, CLIENTS) if keys else None
    other = protocol_of(config, SEED + 1)
    body = {"protocol": other, "clients": list(range(CLIENTS)), "nonce": "0123abcd"}
    hello = lobby._envelope(run_id_for(config, SEED + 1), "hello", client_sender(0), body)
    if signer is not None:
        hello = signer.seal(hello, 0, "")
    topic = lobby_topic("fedxab")
    hello_record = Record(topic, 0, 0, "0", hello)
    refusal = _refusal_of(hello_record, protocol_of(config, SEED), {run_id}, signer, set(), LIMIT)
    assert refusal is not None
    broker.published["hello"] = [hello_record]
    broker.published["refuse"] = [Record(topic, 0, 1, "0", refusal)]
    return Recorded(config, broker.published, keys, session)


@pytest.fixture(scope="module", params=["unsigned", "signed"])
def recorded(request, tmp_path_factory) -> Recorded:
    keys_dir = None
    if request.param == "signed":
        keys_dir = str(tmp_path_factory.mktemp("keys"))
        generate_keys(CLIENTS, keys_dir)
    return _record_run(keys_dir)


# --------------------------------------------------------------------------- the mutations
ARRAYS = [
    np.zeros(0),
    np.arange(3.0),
    np.array(True),
    np.array([[1, 2], [3, 4]], dtype=np.int64),
    np.array([np.nan, np.inf]),
    np.array([2**63 - 1], dtype=np.int64),
    np.array([1], dtype=np.uint8),
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=12),
)
CONFUSED = st.one_of(
    SCALARS,
    st.sampled_from(ARRAYS),
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=6), SCALARS, max_size=3),
    st.lists(st.lists(st.integers(-3, 3), max_size=3), max_size=3),
)


def _paths(value, prefix=()) -> list[tuple]:
    """Every place in plain data (map keys, the first list items), the root excluded."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((*prefix, k))
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            out.append((*prefix, i))
            out += _paths(v, (*prefix, i))
    return out


def _mutate(data, path: tuple, how: str, value):
    """``data`` with the value at ``path`` replaced (or deleted, or a field added beside it)."""
    data = copy.deepcopy(data)
    parent = data
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if how == "delete" and isinstance(parent, dict):
        del parent[last]
    elif how == "add" and isinstance(parent, dict):
        parent["extra_field"] = value
    else:
        parent[last] = value
    return data


@dataclass
class Opened:
    envelope: dict
    sealed: dict | None  # the signed frame's fields, or None (unsigned)


def _open(value: bytes) -> Opened:
    frame = unpack_frame(value, "record")
    if "sig" in frame:
        return Opened(unpack_frame(frame["envelope"], "envelope"), frame)
    return Opened(frame, None)


@st.composite
def confused_record(draw, recorded: Recorded, kind: str) -> tuple[Record, bool]:
    """A recorded record of topic ``kind`` with one field confused; and whether it changed."""
    record = draw(st.sampled_from(recorded.records[kind]))
    opened = _open(record.value)
    envelope = dict(opened.envelope)
    body = unpackb(envelope["payload"])
    where = draw(st.sampled_from(["envelope", "payload", "signature"]))
    how = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add"]))
    value = draw(CONFUSED)
    if where == "payload" and _paths(body):
        path = draw(st.sampled_from(_paths(body)))
        envelope["payload"] = packb(_mutate(body, path, how, value))
    elif where == "payload":  # a scalar or empty body: replace it whole
        envelope["payload"] = packb(value)
    elif where == "envelope" or opened.sealed is None:
        envelope = _mutate(envelope, (draw(st.sampled_from(sorted(envelope))),), how, value)
    inner = packb(envelope)
    if opened.sealed is None:
        return Record(record.topic, 0, 0, record.key, inner), True
    frame = dict(opened.sealed)
    frame["envelope"] = inner
    if where == "signature":  # the signed frame's own fields, confused
        return Record(
            record.topic, 0, 0, record.key, packb(_mutate(frame, (draw(st.sampled_from(
                sorted(frame))),), how, value))
        ), True  # fmt: skip
    # signed by the right key: the checks behind the signature are reached
    return Record(record.topic, 0, 0, record.key, _reseal(recorded, envelope, inner, frame)), True


def _reseal(recorded: Recorded, envelope: dict, inner: bytes, frame: dict) -> bytes:
    sender = envelope.get("sender")
    sender = sender if isinstance(sender, str) else None
    session = frame["session"]
    if sender == SERVER and frame.get("for") is None:
        keys = [recorded.keys[m] for m in range(CLIENTS)]
        return seal_for_every_client(inner, keys, session=session)
    signer = frame.get("for") if sender == SERVER else _client_of(sender)
    key = recorded.keys.get(signer, recorded.keys[0])
    return seal(inner, key, session=session, for_client=frame.get("for"))


def _client_of(sender) -> int | None:
    if isinstance(sender, str) and sender.startswith("client-") and sender[7:].isdigit():
        return int(sender[7:])
    return None


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


# ------------------------------------------------------------------------------ the targets
def _live_server(recorded: Recorded) -> ServerAgent:
    """A server agent of the recorded run with phase 1 open, in the recorded session."""
    config = recorded.config
    server = ServerAgent(config, SEED, MemoryBroker(), run_id=run_id_for(config, SEED))
    server.session = recorded.session
    server._replay()
    return server


def _server_state(server: ServerAgent) -> tuple:
    run = server.run_session
    return (
        run.phase,
        sorted(run.accepted),
        repr(server.server.reported),
        sorted(server.joined),
        sorted(server.left),
        sorted(server.last_seen),
        repr({m: o.to_dict() for m, o in run.outcomes.items()}),
        server.sums.used.tolist(),
        dict(run.sums.evaluations_by_phase),
    )


@pytest.mark.parametrize("kind", ["report", "control"])
def test_a_live_server_turns_every_confused_record_into_one_counted_outcome(recorded, kind):
    server = _live_server(recorded)
    handle = server.on_report if kind == "report" else server.on_control

    @FUZZ
    @given(confused_record(recorded, kind))
    def check(sample):
        record, _ = sample
        before, state = dict(server.counts), _server_state(server)
        handle(record)  # must not raise
        grew = {k for k, n in server.counts.items() if n != before.get(k, 0)}
        assert len(grew) == 1 and server.counts[next(iter(grew))] == before.get(*grew, 0) + 1
        (outcome,) = grew
        if outcome.endswith(("_invalid", "_late")):  # rejected: nothing changed
            assert _server_state(server) == state, outcome

    check()
    rejected = sum(n for k, n in server.counts.items() if k.endswith("_invalid"))
    assert rejected > EXAMPLES // 4  # the confusions reached the rejection paths


def test_a_live_client_agent_turns_every_confused_broadcast_into_a_broadcast_or_a_rejection(
    recorded,
):
    config = recorded.config
    agent = ClientAgent(
        config, SEED, MemoryBroker(), run_id=run_id_for(config, SEED), client_ids=[0, 1, 2]
    )

    @FUZZ
    @given(confused_record(recorded, "broadcast"))
    def check(sample):
        record, _ = sample
        before = agent.counts["broadcast_invalid"]
        msg = agent.decode(record)  # must not raise
        if msg is None:
            assert agent.counts["broadcast_invalid"] == before + 1
        elif not isinstance(msg, Finished):
            agent.answer_all(msg)  # what a live agent does next: must not raise either

    check()


def test_the_ledger_reader_raises_only_its_protocol_errors(recorded):
    run_id = run_id_for(recorded.config, SEED)
    signer = Signer(recorded.keys, CLIENTS) if recorded.keys else None

    @FUZZ
    @given(confused_record(recorded, "ledger"))
    def check(sample):
        record, _ = sample
        with PrivacyLedger(":memory:") as book:
            try:
                apply_record(book, run_id, record, signer)
            except (ProtocolError, ConfigError):  # rebuild_ledger counts and skips these
                assert book.runs() == []  # a rejected record recorded nothing

    check()


def test_the_lobby_refuses_or_ignores_every_confused_hello_and_refusal(recorded):
    signer = Signer(recorded.keys, CLIENTS) if recorded.keys else None
    protocol = protocol_of(recorded.config, SEED)
    known = {run_id_for(recorded.config, SEED)}

    @FUZZ
    @given(confused_record(recorded, "hello"), confused_record(recorded, "refuse"))
    def check(hello, refusal):
        answer = _refusal_of(hello[0], protocol, known, signer, set(), LIMIT)  # must not raise
        if answer is not None:
            assert Envelope.decode(_inner(answer)).kind == "refuse"
        differences = _differences_in(refusal[0], "0123abcd", signer, LIMIT)  # must not raise
        assert differences is None or all(isinstance(d, str) for d in differences)

    check()


def test_the_recorded_run_holds_every_topic(recorded):
    assert {"broadcast", "report", "control", "ledger", "hello", "refuse"} <= set(recorded.records)
    kinds = {Envelope.decode(_inner(r.value)).kind for r in recorded.records["control"]}
    assert {"join", "telemetry", "outcome", "leave"} <= kinds


def _inner(value: bytes) -> bytes:
    frame = unpack_frame(value, "record")
    return frame["envelope"] if "sig" in frame else value


def test_signed_frames_with_confused_fields_are_signature_errors():
    tag = b"\0" * 32
    for field_name, value in [("sig", np.zeros(3)), ("envelope", [1]), ("session", {"a": 1})]:
        frame = {"envelope": b"x", "sig": tag, "session": ""} | {field_name: value}
        with pytest.raises(SignatureError):
            SignedEnvelope.decode(packb(frame))


# ------------------------------------------------------------------------------ checkpoints
def _checkpoint_bytes(tmp_path) -> bytes:
    from fedxab.run.session import ClosedPhase

    checkpoint = ServerCheckpoint(tmp_path / "run.ckpt", "run-a")
    checkpoint.session = "s"
    checkpoint.append(ClosedPhase(1, {0: b"\x80", 2: b"\x81"}, {"messages_up": 2}))
    checkpoint.append(ClosedPhase(2, {1: b"\x82"}, {"messages_up": 1}))
    return (tmp_path / "run.ckpt").read_bytes()


@pytest.fixture(scope="module")
def checkpoint_file(tmp_path_factory) -> bytes:
    return _checkpoint_bytes(tmp_path_factory.mktemp("ckpt"))


@FUZZ
@given(data=st.data())
def test_a_mutated_checkpoint_is_refused_with_a_checkpoint_error(
    checkpoint_file, data, tmp_path_factory
):
    """Flipped, inserted or truncated bytes (the digest fails), and confused fields behind a
    recomputed digest (the fields' checks): CheckpointError, or the file's own phases."""
    outer = unpack_frame(checkpoint_file, "checkpoint")
    contents = unpackb(outer["body"])
    if data.draw(st.booleans()):
        raw = bytearray(checkpoint_file)
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
        mutated = bytes(raw[: data.draw(st.integers(1, len(raw)))])
    else:
        path = data.draw(st.sampled_from(_paths(contents)))
        how = data.draw(st.sampled_from(["replace", "delete", "add"]))
        body = packb(_mutate(contents, path, how, data.draw(CONFUSED)))
        digest = hashlib.sha256(body).digest()
        mutated = packb({"schema": outer["schema"], "sha256": digest, "body": body})
    where = tmp_path_factory.mktemp("mutated") / "run.ckpt"
    where.write_bytes(mutated)
    try:
        phases = ServerCheckpoint(where, "run-a").load()
    except CheckpointError as exc:
        assert str(where) in str(exc)
        return
    assert all(type(p.phase) is int for p in phases)
