"""``[broker] max_message_bytes`` bounds every record a party publishes or reads: a larger one
is refused when published, and refused by its size alone, before any decoding, by every reader
(server, client agent, lobby, ledger mirror). The probe is a record of bytes that are not
msgpack (``0xc1`` is never used by msgpack): a reader that decoded it would call it
``malformed``, so ``too_large`` shows the size was checked first."""

from __future__ import annotations

import asyncio
import tracemalloc

import pytest

from fedxab.agents.client import ClientAgent
from fedxab.agents.lobby import _differences_in, _refusal_of
from fedxab.agents.server import ServerAgent
from fedxab.broker.base import BrokerError, Record, RecordTooLarge
from fedxab.broker.codec import client_sender, encode_envelope, packb
from fedxab.broker.memory import MemoryBroker
from fedxab.config import config_from_dict
from fedxab.errors import ConfigError, ProtocolError
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mirror import apply_record
from fedxab.run.identity import protocol_of, run_id_for

LIMIT = 4096
CONFIG = config_from_dict(
    {
        "run": {"budget": 300},
        "objective": {"name": "garland"},
        "algorithm": {"name": "fedpne"},
        "federation": {"clients": 3},
        "broker": {"max_message_bytes": LIMIT},
    }
)
RUN_ID = run_id_for(CONFIG, 0)


def _probe(size: int) -> Record:
    return Record("t", 0, 0, "0", b"\xc1" * size)


def test_a_record_over_the_limit_is_refused_when_published():
    broker = MemoryBroker(max_message_bytes=LIMIT)
    asyncio.run(broker.publish("t", None, b"x" * LIMIT))  # at the limit: taken
    with pytest.raises(BrokerError, match=r"4,097 bytes .* max_message_bytes \(4,096 bytes\)"):
        asyncio.run(broker.publish("t", None, b"x" * (LIMIT + 1)))
    assert len(broker.records("t")) == 1  # the refused record was not appended


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_the_limit_must_be_a_positive_number_of_bytes(bad):
    with pytest.raises(ConfigError, match="broker.max_message_bytes"):
        MemoryBroker(max_message_bytes=bad)


def test_the_server_refuses_a_record_by_its_size_before_decoding():
    server = ServerAgent(CONFIG, 0, MemoryBroker(max_message_bytes=LIMIT), run_id=RUN_ID)
    server.party.on_report(_probe(LIMIT))
    server.party.on_report(_probe(LIMIT + 1))
    server.party.on_control(_probe(LIMIT + 1))
    assert server.party.rejected[("report", "malformed")] == 1  # decoded: not msgpack
    assert server.party.rejected[("report", "too_large")] == 1  # never decoded
    assert server.party.rejected[("control", "too_large")] == 1


def test_a_client_agent_refuses_a_broadcast_by_its_size_before_decoding(caplog):
    agent = ClientAgent(
        CONFIG, 0, MemoryBroker(max_message_bytes=LIMIT), run_id=RUN_ID, client_ids=[0]
    )
    assert agent.party.on_broadcast(_probe(LIMIT).value) is None
    assert agent.party.on_broadcast(_probe(LIMIT + 1).value) is None
    assert agent.counts["broadcast_invalid"] == 2
    reasons = [r.getMessage().split("(")[1].split(")")[0] for r in caplog.records]
    assert reasons == ["malformed", "too_large"]


def test_the_ledger_mirror_and_the_lobby_refuse_a_record_by_its_size():
    with PrivacyLedger(":memory:") as book:
        with pytest.raises(RecordTooLarge, match="max_message_bytes") as caught:
            apply_record(book, RUN_ID, _probe(LIMIT + 1), None, LIMIT)
        assert caught.value.reason == "too_large"
        with pytest.raises(ProtocolError) as decoded:
            apply_record(book, RUN_ID, _probe(LIMIT), None, LIMIT)
        assert decoded.value.reason == "malformed"
        assert book.runs() == []
    protocol = protocol_of(CONFIG, 0)
    assert _refusal_of(_probe(LIMIT + 1), protocol, {RUN_ID}, None, set(), LIMIT) is None
    assert _differences_in(_probe(LIMIT + 1), "run", "nonce", None, LIMIT) is None


def _telemetry_record(body: dict) -> Record:
    payload = packb(body)
    value = encode_envelope(
        RUN_ID, "telemetry", 0, client_sender(0), "telemetry:0:0-0:0", payload, 0.0
    )
    return Record("control", 0, 0, "0", value)


@pytest.mark.parametrize(
    "claim",
    [
        {"counts": [2**40], "global_terms_runs": [2**40], "local_terms_runs": [2**40]},
        # 16 MiB per term once expanded: a claim the server could have afforded to expand
        {"counts": [2**21], "global_terms_runs": [2**21], "local_terms_runs": [2**21]},
        # runs whose int64 sum wraps around to the claimed count (4 * 2**62 = 2**64 = 0)
        {"counts": [0], "global_terms_runs": [2**62] * 4, "local_terms_runs": [2**62] * 4},
        # one message's pulls at most, but beyond the run's budget T = 300
        {"counts": [1000], "global_terms_runs": [1000], "local_terms_runs": [1000]},
    ],
)
def test_a_tiny_telemetry_record_claiming_a_huge_expansion_is_refused_before_expanding(claim):
    """The attack of issue 39: a telemetry record of a few hundred bytes whose run lengths
    claim 2**40 pulls (8 TiB once expanded; 6.2 GB and 11 s before the check). The server
    refuses it from the sizes it claims: the whole admission (decode, check, reject) allocates
    under 10 MB (tracemalloc's peak; in practice a few kB)."""
    n = len(claim["global_terms_runs"])
    body = {
        "client": 0,
        "phases": [0],
        "starts": [0],
        "global_terms": [0.5] * n,
        "local_terms": [0.25] * n,
        **claim,
    }
    record = _telemetry_record(body)
    assert len(record.value) < 400  # (about 280 bytes with this run id)
    server = ServerAgent(CONFIG, 0, MemoryBroker(max_message_bytes=LIMIT), run_id=RUN_ID)
    tracemalloc.start()
    try:
        server.party.on_control(record)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert server.party.rejected[("control", "bad_payload")] == 1
    assert peak < 10 * 2**20, f"admission allocated {peak} bytes"
    assert server.sums.received.sum() == 0
    # the same body within bounds is taken: the refusal is about the sizes claimed
    ok = body | {"counts": [3], "global_terms": [0.5], "global_terms_runs": [3],
                 "local_terms": [0.25], "local_terms_runs": [3]}  # fmt: skip
    server.party.on_control(_telemetry_record(ok))
    assert server.sums.received.tolist() == [3, 0, 0]
