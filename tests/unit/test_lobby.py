"""The lobby cannot be turned against a client (issue 16, found by the live fuzz suite).

A hello names its protocol and its run id, and a client agent stops when the server refuses
its hello (the refusal carries the hello's nonce, which anyone reading the lobby sees). Copying
a client's hello with a mangled protocol must therefore not produce a refusal that stops that
client: the server ignores a hello whose run id is not its protocol's, and a client takes only
refusals for its own run.
"""

from __future__ import annotations

from fedxab.agents import lobby
from fedxab.agents.lobby import _differences_in, _refusal_of
from fedxab.broker.base import DEFAULT_MAX_MESSAGE_BYTES, Record
from fedxab.broker.codec import client_sender
from fedxab.config import config_from_dict
from fedxab.run.identity import protocol_of, run_id_for

CONFIG = config_from_dict(
    {
        "run": {"budget": 100},
        "objective": {"name": "garland"},
        "algorithm": {"name": "fedpne"},
        "federation": {"clients": 2},
    }
)
SERVER_RUN = run_id_for(CONFIG, 0)


def _hello(run_id: str, protocol: dict, nonce: str = "n0nce") -> Record:
    body = {"protocol": protocol, "clients": [0], "nonce": nonce}
    value = lobby._envelope(run_id, "hello", client_sender(0), body)
    return Record("fedxab.lobby", 0, 0, "0", value)


def _refusal(hello: Record) -> bytes | None:
    return _refusal_of(
        hello, protocol_of(CONFIG, 0), {SERVER_RUN}, None, set(), DEFAULT_MAX_MESSAGE_BYTES
    )


def test_a_hello_of_another_run_is_refused_naming_the_differences():
    other = protocol_of(CONFIG, 1)
    refusal = _refusal(_hello(run_id_for(CONFIG, 1), other))
    assert refusal is not None
    record = Record("fedxab.lobby", 0, 1, "0", refusal)
    differences = _differences_in(
        record, run_id_for(CONFIG, 1), "n0nce", None, DEFAULT_MAX_MESSAGE_BYTES
    )
    assert differences == ["seed: expected 0, got 1"]


def test_a_hello_whose_run_id_is_not_its_protocols_is_ignored():
    mangled = {**protocol_of(CONFIG, 1), "budget": "a string"}
    assert _refusal(_hello(run_id_for(CONFIG, 1), mangled)) is None


def test_a_client_takes_no_refusal_meant_for_another_run():
    refusal = _refusal(_hello(run_id_for(CONFIG, 1), protocol_of(CONFIG, 1)))
    record = Record("fedxab.lobby", 0, 1, "0", refusal)
    elsewhere = run_id_for(CONFIG, 2)
    assert _differences_in(record, elsewhere, "n0nce", None, DEFAULT_MAX_MESSAGE_BYTES) is None
