"""An auditor verifies a signed ledger with public keys alone: a 1,000-client Ed25519 ledger
rebuilt from its ledger topic verifies row by row from its evidence; a record forged with all the
server's key material, a row given another row's evidence, an edited row and a row without
evidence are each named; `fedxab audit --verify` exits non-zero on them, and on Kafka rebuilds
and verifies a signed run with public keys alone; central-DP records are the server's and say
so."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time

import pytest
from typer.testing import CliRunner

from fedxab.agents.ledger_mirror import rebuild_ledger
from fedxab.broker.base import topic_name
from fedxab.broker.codec import SERVER
from fedxab.broker.memory import MemoryBroker
from fedxab.cli import app
from fedxab.cli.audit import SIGNED_RECORDS_HINT
from fedxab.privacy.ledger import Budget, PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.privacy.mirror import budget_record, end_record, release_record
from fedxab.privacy.verify import verify_ledger
from fedxab.security.agents import verifier_in
from fedxab.security.keypairs import PrivateKey, generate_keypairs, load_private_key
from fedxab.security.signing import Ed25519Signer, SignatureError

RUN = "run-audit"
CLIENTS = 1000
RELEASES = 2
EVENT = PrivacyEvent("gaussian", 1.5, 0.2, 1.0, 1)
runner = CliRunner()


def _records(keys, clients: range) -> list[tuple[str, bytes]]:
    """Each client's budget, releases and end marker, signed by that client's private key as
    its agent signs them."""
    out = []
    for m in clients:
        private = load_private_key(keys / "private" / f"client-{m}.key", f"client-{m}")
        signer = Ed25519Signer({m: private}, {}, CLIENTS)
        records = [budget_record(RUN, m, Budget(4.0, 1e-5))]
        records += [release_record(RUN, m, phase, EVENT) for phase in range(1, RELEASES + 1)]
        records.append(end_record(RUN, m, [(p, 0, EVENT) for p in range(1, RELEASES + 1)]))
        out += [(str(m), signer.seal(record, m, "session")) for record in records]
    return out


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Key pairs of the server and 1,000 clients (written without fsync: the test's time is
    the auditor's, not the disk's)."""
    keys = tmp_path_factory.mktemp("audit") / "keys"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: None)
        generate_keypairs(CLIENTS, keys)
    return keys


def _rebuilt(keys, clients: range, path) -> PrivacyLedger:
    """The ledger ``path`` rebuilt from a ledger topic holding ``clients``' signed records,
    with public keys only."""

    async def rebuild():
        broker = MemoryBroker()
        topic = topic_name("fedxab", RUN, "ledger")
        await broker.create_topics([topic])
        await broker.publish_many(topic, _records(keys, clients))
        book = PrivacyLedger(path)
        rebuilt = await rebuild_ledger(
            broker, topic, RUN, book, signer=verifier_in(keys / "public")
        )
        assert rebuilt.skipped == 0 and rebuilt.ended == set(clients)
        return book

    return asyncio.run(rebuild())


def test_the_auditor_verifies_a_1000_client_ledger_with_public_keys_only(keys, tmp_path):
    """Rebuilt into a ledger file (one transaction) and verified, with public keys only."""
    verifier = verifier_in(keys / "public")
    assert not verifier.private  # public keys only
    with _rebuilt(keys, range(CLIENTS), tmp_path / "ledger.sqlite") as book:
        result = verify_ledger(book, verifier)
    assert result.ok and result.failures == []
    assert (result.rows, result.verified, result.by_server) == (CLIENTS * RELEASES,) * 2 + (0,)


def test_every_row_that_fails_is_named(keys, tmp_path):
    """Four rows broken four ways, each named with its run, client, release and reason."""
    ledger = tmp_path / "ledger.sqlite"
    _rebuilt(keys, range(10), ledger).close()
    server = load_private_key(keys / "private" / "server.key", SERVER)
    forged = Ed25519Signer({7: server}, {}, CLIENTS).seal(release_record(RUN, 7, 9, EVENT), 7, "s")
    with PrivacyLedger(ledger) as book:
        book.record(RUN, 7, 9, EVENT, evidence=forged)  # signed by the server as client 7
        book.record(RUN, 8, 9, EVENT)  # no evidence
        other = dict(((c, p), e) for _, c, p, _, _, e in book.evidence(RUN))[(3, 1)]
        book.record(RUN, 4, 9, EVENT, evidence=other)  # client 3's record, on client 4's row
    with sqlite3.connect(ledger) as db:  # a row edited after the fact
        db.execute("UPDATE events SET noise_multiplier=3.0 WHERE client=5 AND phase=2")
    with PrivacyLedger(ledger) as book:
        result = verify_ledger(book, verifier_in(keys / "public"))
    assert not result.ok and result.rows == 10 * RELEASES + 3
    named = {(f.run, f.client, f.phase, f.release): f.reason for f in result.failures}
    assert set(named) == {(RUN, 7, 9, 0), (RUN, 8, 9, 0), (RUN, 4, 9, 0), (RUN, 5, 2, 0)}
    assert named[RUN, 7, 9, 0].startswith("bad_signature")
    assert named[RUN, 8, 9, 0].startswith("no evidence")
    assert "client 3" in named[RUN, 4, 9, 0] and "phase 1" in named[RUN, 4, 9, 0]
    assert "event" in named[RUN, 5, 2, 0]
    # each of those clients' rows no longer match its signed end marker as a whole
    whole = {f.client: f.reason for f in result.whole}
    assert sorted(whole) == [4, 5, 7, 8] and all("as a whole" in r for r in whole.values())
    assert "closes 2 release(s)" in whole[4] and "the ledger holds 3" in whole[4]
    assert (result.closed, result.open) == (6, 0)
    shown = runner.invoke(app, ["audit", str(ledger), "--verify", str(keys / "public")])
    assert shown.exit_code == 2, shown.output
    for failure in result.failures + result.whole:
        assert str(failure)[:60] in " ".join(shown.output.split())
    assert f"4 of {10 * RELEASES + 3} release(s), and 4 client(s)' records as a whole failed" in (
        " ".join(shown.output.split())
    )
    made_up = Ed25519Signer({SERVER: PrivateKey.generate(SERVER)}, {}, CLIENTS)
    about = made_up.seal_about(release_record(RUN, 2, 9, EVENT, by_server=True), 2, "s")
    with PrivacyLedger(ledger) as book:
        book.record(RUN, 2, 9, EVENT, evidence=about)  # a central-DP record nobody signed
        result = verify_ledger(book, verifier_in(keys / "public"), RUN)
    assert any(f.client == 2 and f.reason.startswith("bad_signature") for f in result.failures)


# ------------------------------------------------------------------------- the command, on Kafka
def test_audit_verify_rebuilds_and_verifies_a_signed_kafka_run_with_public_keys(
    dev_broker, tmp_path
):
    """A local-DP run signed with Ed25519 on Kafka; `fedxab audit --rebuild-from --verify`
    with the public keys alone rebuilds and verifies its ledger; `--verify` on the ledger file
    names a forged row and exits non-zero; a run whose topic holds nothing is an error and
    leaves no ledger file."""
    from fedxab.agents.distributed import run_id_for, run_on_broker
    from fedxab.broker.kafka import KafkaBroker
    from fedxab.config import config_from_dict

    keys = tmp_path / "keys"
    generate_keypairs(4, keys)
    namespace = f"verify{os.getpid()}{time.monotonic_ns() % 10**6}"
    config = config_from_dict(
        {
            "run": {"budget": 20_000},
            "objective": {"name": "garland"},
            "algorithm": {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 1e-3},
            "federation": {"clients": 4, "heterogeneity": "offset"},
            "privacy": {},
            "broker": {"url": f"kafka://{dev_broker.address}", "namespace": namespace},
            "security": {"keys_dir": str(keys)},
        }
    )

    async def main():
        async with KafkaBroker(dev_broker.address) as broker:
            return await asyncio.wait_for(run_on_broker(config, 3, broker, hosts=2), 120)

    record = asyncio.run(main())
    run = run_id_for(config, 3)
    ledger = tmp_path / "audited.db"
    public = str(keys / "public")
    source = ["--rebuild-from", f"kafka://{dev_broker.address}", "--namespace", namespace]
    result = runner.invoke(
        app, ["audit", str(ledger), "--run", run, *source, "--verify", public, "--json"]
    )
    assert result.exit_code == 0, result.output
    releases = record.privacy["releases"]
    assert f"{sum(releases)} release(s) verified" in result.output
    with PrivacyLedger(ledger) as book:
        server = load_private_key(keys / "private" / "server.key", SERVER)
        forged = Ed25519Signer({2: server}, {}, 4).seal(release_record(run, 2, 99, EVENT), 2, "")
        book.record(run, 2, 99, EVENT, evidence=forged)
    failed = runner.invoke(app, ["audit", str(ledger), "--verify", public])
    assert failed.exit_code == 2
    assert f"run {run}, client 2, phase 99, release 0: bad_signature" in failed.output
    empty = tmp_path / "empty.db"
    nothing = runner.invoke(
        app, ["audit", str(empty), "--run", "no-such-run", *source, "--verify", public]
    )
    assert nothing.exit_code == 2 and "holds no record" in nothing.output
    assert not empty.exists()


def test_central_dp_records_are_signed_by_the_server_and_say_so(tmp_path):
    """DP-FTS-DE (central DP) signed with Ed25519 on the embedded broker gives the unsigned
    run's results; every ledger record is the server's, names its client, and verifies with the
    server's public key only (the auditor counts it apart)."""
    from fts_settings import CHEAP_FTS

    from fedxab.agents.distributed import run_id_for, run_on_broker
    from fedxab.agents.ledger_mirror import read_to_end
    from fedxab.broker.base import run_topics
    from fedxab.config import config_from_dict

    keys = tmp_path / "keys"
    generate_keypairs(3, keys)

    def config(**security):
        return config_from_dict(
            {
                "run": {"budget": 22, "seed": 1},
                "objective": {"name": "garland", "noise": {"name": "gaussian", "sigma": 0.1}},
                "algorithm": {"name": "dpftsde", "regions": 2, "weights": "synthetic", "q": 0.5}
                | CHEAP_FTS,
                "federation": {"clients": 3, "heterogeneity": "none"},
                "privacy": {"accountant": "moments"},
                **({"security": security} if security else {}),
            }
        )

    signed = config(keys_dir=str(keys), sign=True)
    broker = MemoryBroker()
    record = asyncio.run(run_on_broker(signed, 1, broker, hosts=2))
    plain = asyncio.run(run_on_broker(config(), 1, MemoryBroker(), hosts=2))
    without_time = [r.to_dict() | {"wall_time_s": 0} for r in (record, plain)]
    assert without_time[0] == without_time[1]
    run = run_id_for(signed, 1)
    topic = run_topics("fedxab", run)["ledger"]
    auditor = verifier_in(keys / "public")
    with PrivacyLedger(":memory:") as book:
        rebuilt = asyncio.run(rebuild_ledger(broker, topic, run, book, signer=auditor))
        assert rebuilt.skipped == 0
        result = verify_ledger(book, auditor)
    assert result.ok and result.rows == sum(record.privacy["releases"]) > 0
    assert result.by_server == result.rows
    values = [r.value for r in asyncio.run(read_to_end(broker, topic))]
    clients_only = Ed25519Signer({}, {m: auditor.public[m] for m in range(3)}, 3)
    for value in values:
        opened = auditor.open(value)
        assert opened.envelope.sender == SERVER and opened.for_client is not None
        with pytest.raises(SignatureError) as info:
            clients_only.open(value)  # the clients' keys do not verify the server's records
        assert info.value.reason == "unknown_sender"


def test_lifetime_audit_of_two_signed_kafka_runs_with_public_keys_alone(dev_broker, tmp_path):
    """Two signed DP-Fed-PNE runs of the same 4 clients on Kafka, recorded in the clients' own
    lifetime ledger. An auditor holding only the public keys rebuilds both runs' ledgers from
    their topics; `fedxab audit --lifetime --verify` prints each data owner's lifetime epsilon
    over both runs, equal to what the clients' own ledger gives (which verifies too), and a
    client's history run by run; a row the server edits, and an owner it moves, are named."""
    from fedxab.agents.distributed import run_id_for, run_on_broker
    from fedxab.broker.kafka import KafkaBroker
    from fedxab.config import config_from_dict

    keys = tmp_path / "keys"
    generate_keypairs(4, keys)
    namespace = f"lifetime{os.getpid()}{time.monotonic_ns() % 10**6}"
    own = tmp_path / "clients.db"
    config = config_from_dict(
        {
            "run": {"budget": 20_000, "seed": 3, "repeats": 2},
            "objective": {"name": "garland"},
            "algorithm": {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 1e-3,
                          "composition": "sequential"},
            "federation": {"clients": 4, "heterogeneity": "offset"},
            "privacy": {"ledger": str(own), "lifetime_epsilon": 50.0},
            "broker": {"url": f"kafka://{dev_broker.address}", "namespace": namespace},
            "security": {"keys_dir": str(keys)},
        }
    )  # fmt: skip

    async def main(seed):
        async with KafkaBroker(dev_broker.address) as broker:
            return await asyncio.wait_for(run_on_broker(config, seed, broker, hosts=2), 120)

    records = [asyncio.run(main(seed)) for seed in (3, 4)]
    runs = [run_id_for(config, seed) for seed in (3, 4)]
    public = str(keys / "public")
    audited = tmp_path / "auditor.db"
    source = ["--rebuild-from", f"kafka://{dev_broker.address}", "--namespace", namespace]
    for run, record in zip(runs, records, strict=True):
        rebuilt = runner.invoke(app, ["audit", str(audited), "--run", run, *source])
        assert rebuilt.exit_code == 2 and SIGNED_RECORDS_HINT[:40] in rebuilt.output  # unsigned
        rebuilt = runner.invoke(
            app, ["audit", str(audited), "--run", run, *source, "--verify", public, "--json"]
        )
        assert rebuilt.exit_code == 0, rebuilt.output
        assert f"{sum(record.privacy['releases'])} release(s) verified" in rebuilt.output

    def lifetime(ledger):
        shown = runner.invoke(app, ["audit", str(ledger), "--lifetime", "--verify", public,
                                    "--json"])  # fmt: skip
        assert shown.exit_code == 0, shown.output
        assert "32 release(s) verified" in shown.output
        assert "8 client(s) of a run checked as a whole" in " ".join(shown.output.split())
        return {row["owner"]: row for row in json.loads(shown.stdout)}

    by_auditor, by_clients = lifetime(audited), lifetime(own)
    owners = [f"client-{m}/{records[0].privacy['data_set']}" for m in range(4)]
    assert sorted(by_auditor) == sorted(by_clients) == owners
    single = records[0].privacy["epsilon"][0]
    for owner in owners:
        row = by_auditor[owner]
        assert (row["runs"], row["releases"], row["delta"]) == (2, 8, 1e-3)
        assert row["epsilon"] == by_clients[owner]["epsilon"] > single
        assert row["budget_epsilon"] == 50.0
    history = runner.invoke(app, ["audit", str(audited), "--client", "1", "--lifetime", "--json"])
    assert history.exit_code == 0, history.output
    steps = json.loads(history.stdout)
    assert [step["run"] for step in steps] == runs
    assert steps[0]["epsilon"] == pytest.approx(single) == steps[0]["epsilon_run"]
    assert steps[1]["epsilon"] == by_auditor[owners[1]]["epsilon"]

    with sqlite3.connect(audited) as db:  # the server edits one row and moves one owner
        db.execute(
            "UPDATE events SET noise_multiplier = noise_multiplier * 2 "
            "WHERE run=? AND client=2 AND phase=1",
            (runs[1],),
        )
        db.execute("UPDATE owners SET owner='client-9/elsewhere' WHERE run=? AND client=3",
                   (runs[0],))  # fmt: skip
        db.execute("DELETE FROM events WHERE run=? AND client=1 AND phase=4", (runs[1],))
        db.execute("UPDATE lifetime_budgets SET delta=0.5 WHERE owner=?", (owners[0],))
        db.execute("UPDATE runs SET delta=0.5 WHERE run=?", (runs[0],))
    failed = runner.invoke(app, ["audit", str(audited), "--lifetime", "--verify", public])
    assert failed.exit_code == 2
    text = " ".join(failed.output.split())
    assert f"run {runs[1]}, client 2, phase 1, release 0: the evidence is another record" in text
    assert f"run {runs[0]}, client 3, phase 1, release 0: data owner" in text
    assert "client-9/elsewhere" in text
    edited = "the ledger's Budget(epsilon=50.0, delta=0.5) is signed by none of its records"
    assert f"client 0: lifetime budget of data owner '{owners[0]}': {edited}" in text
    assert f"run {runs[0]}, client 0, phase 1, release 0: run accounting" in text
    deleted = "releases as a whole: the signed end marker closes 4 release(s)"
    assert f"run {runs[1]}, client 1: {deleted}" in text
    assert "the ledger holds 3" in text and "a row was deleted or added" in text
