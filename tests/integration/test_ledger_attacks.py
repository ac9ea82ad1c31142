"""The ledger topic of a signed DP-Fed-PNE run against an attacker, on the dev broker: records the
server authors about its clients, another execution's end markers replayed, junk by the ten
thousand (a hundred thousand in the slow test), a release index of 2^63. Each leaves the server's
results equal to the clean run's; each hostile record is named and fails `fedxab audit
--rebuild-from --verify`; junk is counted in bulk; an audit never leaves a partial ledger file.
End markers that do not match what was read are refused (on the in-memory broker)."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import numpy as np
import pytest
from config_factory import sim_config
from typer.testing import CliRunner

from fedxab.agents.distributed import run_id_for, run_on_broker
from fedxab.agents.ledger_mirror import read_to_end, rebuild_ledger
from fedxab.broker.base import Record, run_topics
from fedxab.broker.codec import SERVER, Envelope, client_sender, packb
from fedxab.broker.kafka import KafkaBroker
from fedxab.broker.memory import MemoryBroker
from fedxab.cli import app
from fedxab.monitoring.metrics import FederationMetrics
from fedxab.privacy import mirror
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.privacy.mirror import INDEX_LIMIT, end_record, release_record
from fedxab.security.keypairs import generate_keypairs, load_private_key
from fedxab.security.signing import Ed25519Signer

CLIENTS = 4
SEED = 3
runner = CliRunner()


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    keys = tmp_path_factory.mktemp("attacks") / "keys"
    generate_keypairs(CLIENTS, keys)
    return keys


def _namespace(tag: str) -> str:
    return f"{tag}{os.getpid()}{time.monotonic_ns() % 10**8}"


def _config(keys, address: str, namespace: str, ledger):
    return sim_config(
        "dpfedpne",
        clients=CLIENTS,
        budget=20_000,
        heterogeneity="offset",
        params={"epsilon": 0.5, "privacy_delta": 1e-3, "composition": "sequential"},
        privacy={"ledger": str(ledger), "lifetime_epsilon": 50.0},
        broker={"url": f"kafka://{address}", "namespace": namespace},
        security={"keys_dir": str(keys)},
    )


def _comparable(record) -> dict:
    """A run's results without its wall time and its ledger's path (each run has its own)."""
    out = record.to_dict()
    out.pop("wall_time_s")
    out["privacy"] = {k: v for k, v in out["privacy"].items() if k != "ledger"}
    return out


def _rejected(metrics: FederationMetrics) -> dict[str, float]:
    """``fedxab_messages_rejected_total`` of the ledger topic, by reason (non-zero only)."""
    out = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            labels = sample.labels
            wanted = sample.name == "fedxab_messages_rejected_total" and sample.value
            if wanted and labels["topic"] == "ledger":
                out[labels["reason"]] = sample.value
    return out


def _run(config, address: str, before=(), metrics=None):
    """One run of ``config`` on the dev broker (all agents here), after publishing ``before``
    (``(kind, key, value)``) on its topics."""
    run = run_id_for(config, SEED)
    topics = run_topics(config.broker.namespace, run)

    async def main():
        async with KafkaBroker(address) as broker:
            await broker.create_topics(list(topics.values()))
            for start in range(0, len(before), 5000):
                batch = before[start : start + 5000]
                for kind in {k for k, _, _ in batch}:
                    await broker.publish_many(
                        topics[kind], [(key, v) for k, key, v in batch if k == kind]
                    )
            return await asyncio.wait_for(
                run_on_broker(config, SEED, broker, hosts=2, metrics=metrics), 300
            )

    return asyncio.run(main())


def _end_markers(address: str, config) -> list[Record]:
    """The run's end markers on its ledger topic (read again until all are there: the dev
    broker's end offsets can lag behind its last records)."""
    topic = run_topics(config.broker.namespace, run_id_for(config, SEED))["ledger"]

    async def main():
        async with KafkaBroker(address) as broker:
            for _ in range(50):
                ends = [r for r in await read_to_end(broker, topic) if b"digest" in r.value]
                if len(ends) == CLIENTS:
                    return ends
                await asyncio.sleep(0.2)
            raise AssertionError(f"{len(ends)} end markers of {CLIENTS} on {topic}")

    return asyncio.run(main())


def _audit(address, keys, config, ledger, *extra):
    run = run_id_for(config, SEED)
    return runner.invoke(
        app,
        [
            "audit", str(ledger), "--run", run, "--rebuild-from", f"kafka://{address}",
            "--namespace", config.broker.namespace, "--verify", str(keys / "public"), *extra,
        ],
    )  # fmt: skip


@pytest.fixture(scope="module")
def clean(dev_broker, keys, tmp_path_factory):
    """The clean run: its config and results."""
    ledger = tmp_path_factory.mktemp("clean") / "l.db"
    config = _config(keys, dev_broker.address, _namespace("clean"), ledger)
    return config, _run(config, dev_broker.address)


def _signer(keys, party: str, m: int | str) -> Ed25519Signer:
    private = load_private_key(keys / "private" / f"{party}.key", party)
    return Ed25519Signer({m: private}, {}, CLIENTS)


def test_records_the_server_authors_about_its_clients_are_refused_and_fail_the_audit(
    dev_broker, keys, clean, tmp_path
):
    """Under Ed25519 the server signs, ahead of the clients' genuine records, release records
    "about client m" in the central-DP form (a noise multiplier 20 times larger: a far smaller
    epsilon). The server's results are the clean run's; the audit keeps the clients' records,
    names both of each conflicting pair and exits 2."""
    _, reference = clean
    config = _config(keys, dev_broker.address, _namespace("forged"), tmp_path / "l.db")
    run, namespace = run_id_for(config, SEED), config.broker.namespace
    server = _signer(keys, SERVER, SERVER)
    lenient = PrivacyEvent("gaussian", 40.0, 1.0, 1.0, 1, "phase-1")
    forged = []
    for m in range(CLIENTS):
        for phase in range(1, 5):
            body = release_record(run, m, phase, lenient, by_server=True, namespace=namespace)
            forged.append(("ledger", str(m), server.seal_about(body, m, "s")))
    metrics = FederationMetrics()
    record = _run(config, dev_broker.address, forged, metrics)
    assert _comparable(record) == _comparable(reference)
    assert _rejected(metrics) == {"server_authored": len(forged)}
    audited = _audit(dev_broker.address, keys, config, tmp_path / "audit.db")
    assert audited.exit_code == 2, audited.output
    text = " ".join(audited.output.split())
    assert f"{len(forged)} hostile ledger record(s)" in text
    assert "the server's release (phase 1, release 0) record about client 0" in text
    assert "client 0's own record: partition" in text
    with PrivacyLedger(tmp_path / "audit.db") as book:  # the clients' own records are kept
        spent = book.spent_all(run, 1e-3)
    assert [spent[m] for m in range(CLIENTS)] == pytest.approx(reference.privacy["epsilon"])


def test_replayed_end_markers_of_another_namespace_are_refused_and_fail_the_audit(
    dev_broker, keys, clean, tmp_path
):
    """The clean run's end markers (same run id, its namespace) published on another
    namespace's ledger topic before that run starts: its server reads on to the genuine ones
    (the results are the clean run's, not 1 release) and the audit names the replays."""
    reference_config, reference = clean
    ends = [("ledger", r.key, r.value) for r in _end_markers(dev_broker.address, reference_config)]
    config = _config(keys, dev_broker.address, _namespace("replay"), tmp_path / "l.db")
    metrics = FederationMetrics()
    record = _run(config, dev_broker.address, ends, metrics)
    assert _comparable(record) == _comparable(reference)
    assert record.privacy["releases"] == [4] * CLIENTS
    assert _rejected(metrics) == {"replay": CLIENTS}
    audited = _audit(dev_broker.address, keys, config, tmp_path / "audit.db")
    assert audited.exit_code == 2, audited.output
    text = " ".join(audited.output.split())
    assert f"{CLIENTS} hostile ledger record(s)" in text
    assert f"namespace '{reference_config.broker.namespace}'" in text and "replayed" in text


def _junk(keys, run: str, namespace: str, n: int) -> list[tuple[str, str, bytes]]:
    """``n`` junk records nobody needs a key for (random bytes, unsigned envelopes, a signed
    map with made-up signatures), and one record client 1 signs about itself with a release
    index of 2^63."""
    rng = np.random.default_rng(0)
    unsigned = release_record(run, 2, 1, PrivacyEvent("gaussian", 1.0, 1.0, 1.0, 1))
    made_up = packb({"envelope": unsigned, "sig": bytes(64), "session": ""})
    kinds = [lambda: rng.bytes(int(rng.integers(1, 200))), lambda: unsigned, lambda: made_up]
    out = [("ledger", str(k % CLIENTS), kinds[k % 3]()) for k in range(n)]
    body = {"entry": "release", "phase": 1, "release": 2**63, "namespace": namespace}
    body["event"] = PrivacyEvent("gaussian", 1.0, 1.0, 1.0, 1).to_wire()
    huge = Envelope(run, "ledger", 1, client_sender(1), "huge", packb(body), 0.0).encode()
    out.append(("ledger", "1", _signer(keys, "client-1", 1).seal(huge, 1, "")))
    return out


@pytest.mark.parametrize(
    "n", [10_000, pytest.param(100_000, marks=pytest.mark.slow)], ids=["10k", "100k"]
)
def test_junk_on_the_ledger_topic_is_counted_in_bulk_and_changes_no_result(
    dev_broker, keys, clean, tmp_path, caplog, n
):
    """``n`` junk records and one release index of 2^63 on the ledger topic ahead of the run:
    the results are the clean run's, the refusals are counted by reason with one log line per
    reason (and a summary), and the audit counts them too (junk is not hostile: exit 0) and
    writes a complete ledger."""
    _, reference = clean
    config = _config(keys, dev_broker.address, _namespace("junk"), tmp_path / "l.db")
    run = run_id_for(config, SEED)
    metrics = FederationMetrics()
    with caplog.at_level(logging.WARNING, logger=mirror.__name__):
        record = _run(
            config, dev_broker.address, _junk(keys, run, config.broker.namespace, n), metrics
        )
    assert _comparable(record) == _comparable(reference)
    made_up = len(range(2, n, 3))
    rejected = _rejected(metrics)  # random bytes, unsigned envelopes and the 2^63 release
    assert rejected == {"malformed": n - made_up + 1, "bad_signature": made_up}
    lines = [r for r in caplog.records if r.name == mirror.__name__]
    assert len(lines) <= len(rejected) + 1
    ledger = tmp_path / "audit.db"
    audited = _audit(dev_broker.address, keys, config, ledger, "--json")
    assert audited.exit_code == 0, audited.output
    assert f"{n + 1} ledger record(s) skipped" in " ".join(audited.output.split())
    with PrivacyLedger(ledger) as book:
        assert book.releases_all(run) == dict.fromkeys(range(CLIENTS), 4)


def test_an_audit_that_fails_midway_leaves_no_ledger_file(
    dev_broker, keys, clean, tmp_path, monkeypatch
):
    """A rebuild that raises after some records were written removes the file it created."""
    config, _ = clean
    calls = []

    def failing(*args):
        calls.append(args)
        if len(calls) == 3:
            raise RuntimeError("disk full")
        return real(*args)

    real = mirror._write
    monkeypatch.setattr(mirror, "_write", failing)
    ledger = tmp_path / "audit.db"
    audited = _audit(dev_broker.address, keys, config, ledger)
    assert audited.exit_code != 0 and len(calls) == 3
    assert not ledger.exists() and not list(tmp_path.iterdir())


# ------------------------------------------------------------ end markers, on the memory broker
def test_an_end_marker_that_does_not_match_what_was_read_ends_nothing(keys):
    """Client 0 published two releases; an end marker for one release (a stale or forged one)
    ahead of them is refused as ``end_mismatch`` and the reader waits for the matching one."""
    run = "run-ends"
    signer = _signer(keys, "client-0", 0)
    event = PrivacyEvent("gaussian", 1.5, 1.0, 1.0, 1)
    rows = [(1, 0, event), (2, 0, event)]
    records = [end_record(run, 0, rows[:1])]
    records += [release_record(run, 0, p, e, r) for p, r, e in rows]
    records.append(end_record(run, 0, rows))

    async def main(values):
        broker = MemoryBroker()
        topic = run_topics("fedxab", run)["ledger"]
        await broker.create_topics([topic])
        await broker.publish_many(topic, [("0", signer.seal(v, 0, "")) for v in values])
        with PrivacyLedger(":memory:") as book:
            verifier = Ed25519Signer({}, {0: signer.public[0]}, CLIENTS)
            rebuilt = await rebuild_ledger(
                broker, topic, run, book, expect={0}, timeout_s=0.5, signer=verifier
            )
            return rebuilt, len(book.history(run, 0))

    rebuilt, held = asyncio.run(main(records))
    assert rebuilt.ended == {0} and held == 2
    assert rebuilt.reasons == {"end_mismatch": 1}
    assert "closes 1 release(s)" in rebuilt.named[0] and "0 were read" in rebuilt.named[0]
    unfinished, held = asyncio.run(main(records[:-1]))  # only the stale marker: not complete
    assert unfinished.ended == set() and held == 2


def test_a_release_index_of_2_63_is_a_refused_record(keys):
    """Signed by the client it is about, range-checked before it touches SQLite."""
    run = "run-huge"
    body = {"entry": "release", "phase": 1, "release": 2**63, "namespace": "fedxab"}
    body["event"] = PrivacyEvent("gaussian", 1.0, 1.0, 1.0, 1).to_wire()
    for release in (2**63, INDEX_LIMIT, -1):
        body["release"] = release
        env = Envelope(run, "ledger", 1, client_sender(1), "x", packb(body), 0.0).encode()
        signer = _signer(keys, "client-1", 1)
        value = signer.seal(env, 1, "")
        verifier = Ed25519Signer({}, {1: signer.public[1]}, CLIENTS)
        with PrivacyLedger(":memory:") as book:
            with pytest.raises(mirror.ProtocolError, match="a release index must be"):
                mirror.apply_record(book, run, Record("t", 0, 0, "1", value), verifier)
            assert book.runs() == []


def test_a_conflict_names_both_records(keys):
    """Client 0 signs two different releases under one key: the first is kept, and the second
    is a hostile record naming the first's offset."""
    run = "run-conflict"
    signer = _signer(keys, "client-0", 0)
    first, second = (PrivacyEvent("gaussian", z, 1.0, 1.0, 1) for z in (1.5, 0.5))

    async def main():
        broker = MemoryBroker()
        topic = run_topics("fedxab", run)["ledger"]
        await broker.create_topics([topic])
        values = [release_record(run, 0, 1, e) for e in (first, second)]
        await broker.publish_many(topic, [("0", signer.seal(v, 0, "")) for v in values])
        with PrivacyLedger(":memory:") as book:
            verifier = Ed25519Signer({}, {0: signer.public[0]}, CLIENTS)
            rebuilt = await rebuild_ledger(broker, topic, run, book, signer=verifier)
            return rebuilt, book.events(run, 0)

    rebuilt, kept = asyncio.run(main())
    assert kept == [first] and rebuilt.reasons == {"conflict": 1} and rebuilt.hostile == 1
    assert "partition 0 offset 1: client 0's release (phase 1, release 0)" in rebuilt.named[0]
    assert "contradicts the one recorded from partition 0 offset 0" in rebuilt.named[0]
