"""Signed agents ([security] sign = true) on the embedded broker: same results as unsigned runs;
forged reports and broadcasts are rejected, counted and change nothing; a missing key stops an
agent before it starts."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import run_id_for, run_on_broker
from fedxab.agents.server import ServerAgent
from fedxab.broker.base import run_topics
from fedxab.broker.codec import SERVER, Envelope, client_sender, packb
from fedxab.broker.memory import MemoryBroker
from fedxab.config import config_from_dict
from fedxab.errors import ConfigError, FedxabError
from fedxab.security.keys import SecretKey, generate_keys, load_key
from fedxab.security.signing import SignedEnvelope, sign_envelope

SEED = 3


def _config(keys_dir=None, *, algorithm="fedpne", clients=6, budget=3000, **extra):
    data = {
        "run": {"budget": budget},
        "objective": {"name": "garland"},
        "algorithm": {"name": algorithm, **extra.pop("params", {})},
        "federation": {"clients": clients, "heterogeneity": "offset"},
        **extra,
    }
    if keys_dir is not None:
        data["security"] = {"keys_dir": str(keys_dir), "sign": True}
    return config_from_dict(data)


def _without_time(record) -> dict:
    d = record.to_dict()
    d.pop("wall_time_s")
    return d


@pytest.fixture
def keys(tmp_path):
    generate_keys(6, tmp_path / "keys")
    return tmp_path / "keys"


def test_security_section_is_a_deployment_setting(keys):
    plain, signed = _config(), _config(keys)
    assert signed.security.sign and not plain.security.sign
    assert plain.experiment_dict() == signed.experiment_dict()
    assert run_id_for(plain, SEED) == run_id_for(signed, SEED)
    with pytest.raises(ConfigError, match="keys_dir"):
        config_from_dict({**plain.to_dict(), "security": {"sign": True}})


@pytest.mark.parametrize(
    ("algorithm", "extra"),
    [
        ("fedpne", {}),
        ("dpfedpne", {"params": {"epsilon": 0.5, "privacy_delta": 1e-3}, "privacy": {}}),
    ],
)
def test_a_signed_run_gives_exactly_the_unsigned_results(keys, algorithm, extra):
    def run(config):
        return asyncio.run(run_on_broker(config, SEED, MemoryBroker(), hosts=2))

    kw = {"budget": 3000 if algorithm == "fedpne" else 20_000}
    plain = run(_config(algorithm=algorithm, clients=4, **kw, **extra))
    signed = run(_config(keys, algorithm=algorithm, clients=4, **kw, **extra))
    assert _without_time(signed) == _without_time(plain)
    if algorithm == "dpfedpne":  # the ledger was rebuilt from signed records
        assert signed.privacy == plain.privacy is not None


def _forged_reports(keys, run_id: str, phase: int) -> list[tuple[str, bytes]]:
    """(record key, value): reports for the open phase that a signed server must refuse."""
    body = {"kind": "fedpne.report", "phase": phase, "client": 0, "complete": True}
    env = Envelope(
        run_id=run_id,
        kind="report",
        phase=phase,
        sender=client_sender(0),
        msg_id="report:x",
        payload=packb({**body, "means": np.array([0.5])}),
    )
    own = load_key(keys / "client-0.key", "client-0")
    wire = SignedEnvelope.decode(sign_envelope(env, own))
    tampered = bytearray(wire.envelope)
    tampered[-3] ^= 0x01
    return [
        ("0", sign_envelope(env, SecretKey.generate("client-0"))),  # wrong key
        # another client's id: client 1 signs a report that claims to come from client 0
        ("0", sign_envelope(env.encode(), load_key(keys / "client-1.key", "client-1"))),
        ("0", SignedEnvelope(bytes(tampered), wire.sig).encode()),  # tampered payload
        ("0", SignedEnvelope(wire.envelope, b"").encode()),  # stripped signature
        ("0", env.encode()),  # unsigned
    ]


def test_forged_reports_are_rejected_counted_and_change_nothing(keys):
    config = _config(keys)
    clean = asyncio.run(run_on_broker(config, SEED, MemoryBroker(), hosts=2))

    async def main():
        broker = MemoryBroker()
        run_id = run_id_for(config, SEED)
        server = ServerAgent(config, SEED, broker, run_id=run_id)
        first = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[0, 1, 2, 3, 4])
        tasks = [asyncio.create_task(server.run()), asyncio.create_task(first.run())]
        async with asyncio.timeout(10):
            while server.counts["report_accepted"] < 5:  # phase 1 waits for client 5
                await asyncio.sleep(0.001)
        forged = _forged_reports(keys, run_id, server.phase)
        topics = run_topics("fedxab", run_id)
        for key, value in forged:
            await broker.publish(topics["report"], key, value)
            await broker.publish(topics["control"], key, value)  # wrong kind, still refused
        # a broadcast signed by a client, and an unsigned one: the clients refuse both
        broadcast = Envelope(
            run_id=run_id,
            kind="broadcast",
            phase=server.phase,
            sender=SERVER,
            msg_id="b",
            payload=b"",
        )
        await broker.publish(topics["broadcast"], None, broadcast.encode())
        last = ClientAgent(config, SEED, broker, run_id=run_id, client_ids=[5])
        tasks.append(asyncio.create_task(last.run()))
        record, *_ = await asyncio.gather(*tasks)
        return record, server, first, last, len(forged)

    record, server, first, last, n = asyncio.run(main())
    assert server.counts["signature_invalid"] == 2 * n
    assert server.counts["report_invalid"] == n
    assert server.counts["control_invalid"] == n
    assert first.counts["broadcast_invalid"] == 1 and last.counts["broadcast_invalid"] == 1
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
