"""Signed agents on the embedded broker: same results as unsigned runs (HMAC and Ed25519); forged,
replayed and stale reports and forged broadcasts are rejected, counted and change nothing (under
Ed25519, even a report signed with all the server's key material); a client without its key cannot
join; keys never appear in logs, results, metrics or the ledger."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import sqlite3

import numpy as np
import pytest
from config_factory import sim_config
from prometheus_client import generate_latest

from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import run_id_for, run_on_broker
from fedxab.agents.server import ServerAgent
from fedxab.broker.base import Record, run_topics
from fedxab.broker.codec import SERVER, Envelope, client_sender, packb, unpackb
from fedxab.broker.memory import MemoryBroker
from fedxab.errors import FedxabError
from fedxab.monitoring.metrics import FederationMetrics
from fedxab.security.agents import key_env_var, signing_on
from fedxab.security.keypairs import PrivateKey, generate_keypairs, load_private_key
from fedxab.security.keys import SecretKey, generate_keys, load_key
from fedxab.security.signing import (
    SIG_BYTES,
    Ed25519Signer,
    SignedEnvelope,
    seal,
    seal_for_every_client,
)

SEED = 3


def _config(keys_dir=None, *, algorithm="fedpne", clients=6, budget=3000, sign=None, **extra):
    security = {}
    if keys_dir is not None:
        security = {"keys_dir": str(keys_dir), "sign": True}
    if sign is not None:
        security["sign"] = sign
    if security:
        extra["security"] = security
    return sim_config(algorithm, clients=clients, budget=budget, heterogeneity="offset", **extra)


def _without_time(record) -> dict:
    d = record.to_dict()
    d.pop("wall_time_s")
    return d


@pytest.fixture
def keys(tmp_path):
    generate_keys(6, tmp_path / "keys")
    return tmp_path / "keys"


@pytest.fixture
def pairs(tmp_path):
    """Ed25519 key pairs of the server and 6 clients (``private/``, ``public/``)."""
    generate_keypairs(6, tmp_path / "pairs")
    return tmp_path / "pairs"


def test_security_section_is_a_deployment_setting(keys):
    plain, signed = _config(), _config(keys)
    assert signed.security.sign and not signing_on(plain)
    assert plain.experiment_dict() == signed.experiment_dict()
    assert run_id_for(plain, SEED) == run_id_for(signed, SEED)


def test_kafka_runs_sign_by_default_the_embedded_broker_does_not():
    def on(url, sign=None):
        return signing_on(_config(sign=sign, broker={"url": url}))

    assert on("kafka://127.0.0.1:9092")
    assert not on("kafka://127.0.0.1:9092", sign=False)
    assert not on("memory://") and not on("inprocess://")
    assert on("memory://", sign=True)


@pytest.mark.parametrize(("scheme", "sig_bytes"), [("keys", 4 * SIG_BYTES), ("pairs", 64)])
@pytest.mark.parametrize(
    ("algorithm", "extra"),
    [
        ("fedpne", {}),
        ("dpfedpne", {"params": {"epsilon": 0.5, "privacy_delta": 1e-3}, "privacy": {}}),
    ],
)
def test_a_signed_run_gives_exactly_the_unsigned_results(
    request, scheme, sig_bytes, algorithm, extra
):
    """HMAC (``keys``) and Ed25519 (``pairs``, detected from the directory); every broadcast
    carries the scheme's signatures: 4 x 32 bytes (HMAC, 4 clients) or one of 64 (Ed25519)."""
    keys = request.getfixturevalue(scheme)

    def run(config, broker):
        return asyncio.run(run_on_broker(config, SEED, broker, hosts=2))

    kw = {"budget": 3000 if algorithm == "fedpne" else 20_000}
    plain = run(_config(algorithm=algorithm, clients=4, **kw, **extra), MemoryBroker())
    config = _config(keys, algorithm=algorithm, clients=4, **kw, **extra)
    broker = MemoryBroker()
    signed = run(config, broker)
    assert _without_time(signed) == _without_time(plain)
    if algorithm == "dpfedpne":  # the ledger was rebuilt from signed records
        assert signed.privacy == plain.privacy is not None
    topic = run_topics("fedxab", run_id_for(config, SEED))["broadcast"]
    broadcasts = asyncio.run(_values(broker, topic))
    assert broadcasts and {len(unpackb(b)["sig"]) for b in broadcasts} == {sig_bytes}


async def _values(broker: MemoryBroker, topic: str) -> list[bytes]:
    from fedxab.agents.ledger_mirror import read_to_end

    return [r.value for r in await read_to_end(broker, topic)]


def test_keys_can_come_from_environment_variables(keys, monkeypatch):
    for m in range(4):
        monkeypatch.setenv(key_env_var(m), (keys / f"client-{m}.key").read_text())
    from_env = _config(clients=4, sign=True)
    record = asyncio.run(run_on_broker(from_env, SEED, MemoryBroker(), hosts=2))
    plain = asyncio.run(run_on_broker(_config(clients=4), SEED, MemoryBroker(), hosts=2))
    assert _without_time(record) == _without_time(plain)
    monkeypatch.delenv(key_env_var(3))
    with pytest.raises(FedxabError, match="client-3's key.*FEDXAB_KEY_CLIENT_3 is not set"):
        ClientAgent(from_env, SEED, MemoryBroker(), run_id="r", client_ids=[3])


def _report(run_id: str, phase: int, sender: str = "client-0") -> Envelope:
    body = {"kind": "fedpne.report", "phase": phase, "client": 0, "complete": True}
    return Envelope(
        run_id=run_id,
        kind="report",
        phase=phase,
        sender=sender,
        msg_id="report:x",
        payload=packb({**body, "means": np.array([0.5])}),
    )


def _forged_reports(keys, run_id: str, phase: int, session: str) -> list[tuple[str, bytes]]:
    """(record key, value): reports for the open phase that a signing server must refuse, each
    with the reason it must give."""
    env = _report(run_id, phase).encode()
    own = load_key(keys / "client-0.key", "client-0")
    good = SignedEnvelope.decode(seal(env, own, session=session))
    tampered = bytearray(good.envelope)
    tampered[-3] ^= 0x01
    return [
        ("bad_signature", seal(env, SecretKey.generate("client-0"), session=session)),
        # another client's id: client 1 signs a report that claims to come from client 0
        ("bad_signature", seal(env, load_key(keys / "client-1.key", "client-1"), session=session)),
        ("bad_signature", SignedEnvelope(bytes(tampered), good.sig, session).encode()),
        ("missing_signature", packb({"envelope": env, "sig": b"", "session": session})),
        ("malformed", env),  # unsigned
        ("malformed", b"\x93garbage"),
        ("unknown_sender", seal(_report(run_id, phase, "client-9").encode(), own)),
    ]


def _sent_by(value: bytes) -> Envelope:
    return Envelope.decode(unpackb(value)["envelope"])


async def _until(condition, what: str, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.002)


def test_forged_reports_are_rejected_counted_and_change_nothing(keys):
    config = _config(keys)
    clean = asyncio.run(run_on_broker(config, SEED, MemoryBroker(), hosts=2))

    async def main():
        broker = MemoryBroker()
        run_id = run_id_for(config, SEED)
        metrics = FederationMetrics()
        server = ServerAgent(config, SEED, broker, run_id=run_id, metrics=metrics)
        first = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[0, 1, 2, 3, 4])
        tasks = [asyncio.create_task(server.run()), asyncio.create_task(first.run())]
        counts = server.party.counts
        await _until(lambda: counts["report_accepted"] == 5, "5 reports")  # waits for 5
        forged = _forged_reports(keys, run_id, server.phase, server.party.signing_session)
        topics = run_topics("fedxab", run_id)
        for _, value in forged:
            await broker.publish(topics["report"], "0", value)
            await broker.publish(topics["control"], "0", value)
        # a broadcast a client signed (its own tag right, the others guessed), and an unsigned
        # one: every other client refuses both
        broadcast = Envelope(run_id, "broadcast", server.phase, SERVER, "b", b"").encode()
        guessed = [load_key(keys / "client-0.key", "client-0")]
        guessed += [SecretKey.generate(client_sender(m)) for m in range(1, 6)]
        await broker.publish(topics["broadcast"], None, broadcast)
        await broker.publish(
            topics["broadcast"], None, seal_for_every_client(broadcast, guessed, session="x")
        )
        last = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[5])
        tasks.append(asyncio.create_task(last.run()))
        record, *_ = await asyncio.gather(*tasks)
        return record, server, first, last, forged, metrics

    record, server, first, last, forged, metrics = asyncio.run(main())
    expected = {}
    for reason, _ in forged:
        for topic in ("report", "control"):
            expected[topic, reason] = expected.get((topic, reason), 0) + 1
    assert dict(server.party.rejected) == expected
    counts = server.party.counts
    assert counts["report_invalid"] == counts["control_invalid"] == len(forged)
    exposition = generate_latest(metrics.registry).decode()
    for (topic, reason), n in expected.items():
        line = f'fedxab_messages_rejected_total{{reason="{reason}",topic="{topic}"}} {n}.0'
        assert line in exposition
    assert first.counts["broadcast_invalid"] == 2 and last.counts["broadcast_invalid"] == 2
    assert _without_time(record) == _without_time(clean)


def test_ed25519_forgeries_with_the_servers_key_material_are_rejected(pairs):
    """Under Ed25519 the server holds its private key and the clients' public keys: a report of
    client 0 signed with the server's private key (or a made-up key) is refused and counted
    against client 0; a broadcast signed with client 0's private key is refused by every
    client agent; the run's results are the clean run's."""
    config = _config(pairs)
    clean = asyncio.run(run_on_broker(config, SEED, MemoryBroker(), hosts=2))

    async def main():
        broker = MemoryBroker()
        run_id = run_id_for(config, SEED)
        server = ServerAgent(config, SEED, broker, run_id=run_id)
        first = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[0, 1, 2, 3, 4])
        tasks = [asyncio.create_task(server.run()), asyncio.create_task(first.run())]
        await _until(lambda: server.party.counts["report_accepted"] == 5, "5 reports")
        topics = run_topics("fedxab", run_id)
        server_key = load_private_key(pairs / "private" / "server.key", SERVER)
        report = _report(run_id, server.phase).encode()
        for key in (server_key, PrivateKey.generate("client-0")):
            forged = Ed25519Signer({0: key}, {}, 6).seal(report, 0, server.party.signing_session)
            await broker.publish(topics["report"], "0", forged)
        client_key = load_private_key(pairs / "private" / "client-0.key", "client-0")
        broadcast = Envelope(run_id, "broadcast", server.phase, SERVER, "b", b"").encode()
        forged = Ed25519Signer({SERVER: client_key}, {}, 6).seal_for_every_client(broadcast, "x")
        await broker.publish(topics["broadcast"], None, forged)
        last = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[5])
        tasks.append(asyncio.create_task(last.run()))
        record, *_ = await asyncio.gather(*tasks)
        return record, server, first, last

    record, server, first, last = asyncio.run(main())
    assert dict(server.party.rejected) == {("report", "bad_signature"): 2}
    assert server.party.bad_signatures == {0: 2}
    assert first.counts["broadcast_invalid"] == last.counts["broadcast_invalid"] == 1
    assert _without_time(record) == _without_time(clean)


class HoldingBroker(MemoryBroker):
    """Holds client 5's report of phase 2 until :attr:`release` is set (phase 1 is Fed-PNE's
    first with reports, so phase 2 is the first with an earlier phase's reports to replay)."""

    def __init__(self) -> None:
        super().__init__()
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def publish(self, topic: str, key: str | None, value: bytes) -> None:
        if topic.endswith(".report") and key == "5" and _sent_by(value).phase == 2:
            self.held.set()
            await self.release.wait()
        await super().publish(topic, key, value)


async def _reports(broker: MemoryBroker, topic: str) -> dict[tuple[str, int], bytes]:
    from fedxab.agents.ledger_mirror import read_to_end

    records: list[Record] = await read_to_end(broker, topic)
    return {(_sent_by(r.value).sender, _sent_by(r.value).phase): r.value for r in records}


def test_replayed_reports_of_an_earlier_phase_or_execution_are_refused(keys):
    """A valid report of phase p-1 replayed in phase p is refused as late; a valid report of
    the same run (same run id, config and seed) from an earlier execution is refused as a
    replay, even for the very client and phase the server is waiting for."""
    config = _config(keys)
    run_id = run_id_for(config, SEED)
    topic = run_topics("fedxab", run_id)["report"]

    async def earlier_execution():
        broker = MemoryBroker()
        record = await run_on_broker(config, SEED, broker, hosts=2)
        return record, await _reports(broker, topic)

    clean, earlier = asyncio.run(earlier_execution())

    async def main():
        broker = HoldingBroker()
        server = ServerAgent(config, SEED, broker, run_id=run_id)
        tasks = [
            asyncio.create_task(server.run()),
            asyncio.create_task(ClientAgent(config, SEED, broker, run_id=run_id,
                                            client_ids=[0, 1, 2, 3, 4]).run()),
            asyncio.create_task(ClientAgent(config, SEED, broker, run_id=run_id,
                                            client_ids=[5]).run()),
        ]  # fmt: skip
        await asyncio.wait_for(broker.held.wait(), 20)
        counts = server.party.counts
        await _until(lambda: counts["report_accepted"] == 6 + 5, "phase 2 but client 5")
        assert server.run_session.phase == 2
        this = await _reports(broker, topic)
        await broker.publish(topic, "0", this["client-0", 1])  # phase p-1, this execution
        replay = earlier["client-5", 2]  # the awaited report, from the earlier execution
        await MemoryBroker.publish(broker, topic, "5", replay)  # (not held)
        await _until(lambda: sum(server.party.rejected.values()) == 2, "the two replays refused")
        assert server.party.counts["report_accepted"] == 11
        broker.release.set()
        record, *_ = await asyncio.gather(*tasks)
        return record, server

    record, server = asyncio.run(main())
    assert dict(server.party.rejected) == {("report", "late"): 1, ("report", "replay"): 1}
    assert _without_time(record) == _without_time(clean)


def test_a_client_without_its_key_file_cannot_start(keys):
    config = _config(keys)
    (keys / "client-4.key").unlink()
    run_id = run_id_for(config, SEED)
    ClientAgent(config, SEED, MemoryBroker(), run_id=run_id, client_ids=[0, 1])  # has its keys
    with pytest.raises(FedxabError, match=r"client-4's key.*client-4\.key: no such key file"):
        ClientAgent(config, SEED, MemoryBroker(), run_id=run_id, client_ids=[3, 4])
    with pytest.raises(FedxabError, match=r"client-4\.key"):
        ServerAgent(config, SEED, MemoryBroker(), run_id=run_id)


def _spellings(key: SecretKey | PrivateKey) -> list[bytes]:
    """The ways a key's bytes could be written down: raw, hex, base64, a key file's line."""
    raw = key.reveal()
    return [raw, raw.hex().encode(), raw.hex().upper().encode(), base64.b64encode(raw),
            base64.urlsafe_b64encode(raw), repr(raw).encode(), str(list(raw)).encode()]  # fmt: skip


def _secrets(keys, scheme: str) -> list[SecretKey | PrivateKey]:
    """Every secret of a keys directory: the HMAC keys, or the Ed25519 private keys."""
    if scheme == "keys":
        return [load_key(keys / f"client-{m}.key", client_sender(m)) for m in range(6)]
    parties = [SERVER, *(client_sender(m) for m in range(6))]
    return [load_private_key(keys / "private" / f"{p}.key", p) for p in parties]


@pytest.mark.parametrize("scheme", ["keys", "pairs"])
def test_keys_never_appear_in_logs_results_metrics_or_the_ledger(request, scheme, tmp_path, caplog):
    keys = request.getfixturevalue(scheme)
    ledger = tmp_path / "ledger.sqlite"
    config = _config(
        keys,
        algorithm="dpfedpne",
        clients=6,
        budget=20_000,
        params={"epsilon": 0.5, "privacy_delta": 1e-3},
        privacy={"ledger": str(ledger)},
    )
    metrics = FederationMetrics()
    with caplog.at_level(logging.DEBUG):
        record = asyncio.run(run_on_broker(config, SEED, MemoryBroker(), hosts=2, metrics=metrics))
        logging.getLogger("fedxab").debug("config: %r", config)
    assert record.privacy is not None and ledger.stat().st_size > 0
    with sqlite3.connect(ledger) as db:  # every value of every table
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        ledger_dump = "\n".join(repr(db.execute(f"SELECT * FROM {t}").fetchall()) for t in tables)
    texts = {
        "logs": caplog.text.encode(),
        "results": json.dumps(record.to_dict()).encode(),
        "metrics": generate_latest(metrics.registry),
        "ledger file": ledger.read_bytes(),
        "ledger rows": ledger_dump.encode(),
        "config": repr(config).encode() + json.dumps(config.to_dict()).encode(),
    }
    assert "INFO" in caplog.text or "WARNING" in caplog.text or caplog.records  # logs were taken
    for key in _secrets(keys, scheme):
        for where, text in texts.items():
            for spelling in _spellings(key):
                assert spelling not in text, f"{key.party}'s key in the {where}"
