"""What the fuzz suites share: a recorded DP-Fed-PNE run (every record of every topic, signed
or not) and the ways to confuse a record's fields (issue 16)."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field

from fedxab.agents import lobby
from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import client_agent, run_id_for
from fedxab.agents.lobby import _refusal_of
from fedxab.agents.server import ServerAgent
from fedxab.broker.base import DEFAULT_MAX_MESSAGE_BYTES, Record, lobby_topic
from fedxab.broker.codec import SERVER, client_sender, unpack_frame
from fedxab.broker.memory import MemoryBroker
from fedxab.config import config_from_dict
from fedxab.results import RunRecord
from fedxab.run.identity import protocol_of
from fedxab.security.keys import load_key
from fedxab.security.signing import HmacSigner, seal, seal_for_every_client

CLIENTS = 3
SEED = 0
LIMIT = DEFAULT_MAX_MESSAGE_BYTES


def fuzz_config(keys_dir: str | None) -> object:
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


async def run_agents(
    config, broker: MemoryBroker, timeout_s: float | None = None
) -> tuple[RunRecord, ServerAgent, ClientAgent]:
    """One run of ``config`` on ``broker`` (within ``timeout_s``): a server agent and one
    client agent hosting every client; the server's record and the two agents."""
    server = ServerAgent(config, SEED, broker, run_id=run_id_for(config, SEED))
    agent = client_agent(config, SEED, broker, list(range(CLIENTS)), None)
    async with asyncio.timeout(timeout_s), broker, asyncio.TaskGroup() as group:
        record = group.create_task(server.run())
        group.create_task(agent.run())
    return record.result(), server, agent


def record_run(keys_dir: str | None) -> Recorded:
    config = fuzz_config(keys_dir)
    broker = RecordingBroker()
    run_id = run_id_for(config, SEED)
    _, server, _ = asyncio.run(run_agents(config, broker))
    session = server.party.signing_session
    keys = {}
    if keys_dir is not None:
        keys = {m: load_key(f"{keys_dir}/client-{m}.key") for m in range(CLIENTS)}
    # The lobby: a hello of another run (the client agent above met its server at once), and the
    # server's refusal of it
    signer = HmacSigner(keys, CLIENTS) if keys else None
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


def paths_in(value, prefix=()) -> list[tuple]:
    """Every place in plain data (map keys, the first list items), the root excluded."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((*prefix, k))
            out += paths_in(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            out.append((*prefix, i))
            out += paths_in(v, (*prefix, i))
    return out


def mutate(data, path: tuple, how: str, value):
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


def open_frame(value: bytes) -> Opened:
    frame = unpack_frame(value, "record")
    if "sig" in frame:
        return Opened(unpack_frame(frame["envelope"], "envelope"), frame)
    return Opened(frame, None)


def reseal(recorded: Recorded, envelope: dict, inner: bytes, frame: dict) -> bytes:
    sender = envelope.get("sender")
    sender = sender if isinstance(sender, str) else None
    session = frame["session"]
    if sender == SERVER and frame.get("for") is None:
        keys = [recorded.keys[m] for m in range(CLIENTS)]
        return seal_for_every_client(inner, keys, session=session)
    signer = frame.get("for") if sender == SERVER else client_of(sender)
    key = recorded.keys.get(signer, recorded.keys[0])
    return seal(inner, key, session=session, for_client=frame.get("for"))


def client_of(sender) -> int | None:
    if isinstance(sender, str) and sender.startswith("client-") and sender[7:].isdigit():
        return int(sender[7:])
    return None
