"""One run core: every runner drives fedxab.run.session, and only it talks to the server state
machine (no second copy of the barrier, the classification or the run assembly)."""

from __future__ import annotations

import ast
import asyncio
from collections import Counter
from pathlib import Path

import pytest

from fedxab.agents.distributed import run_on_broker
from fedxab.agents.federation import run_federated
from fedxab.broker.memory import MemoryBroker
from fedxab.config import config_from_dict
from fedxab.run.observe import RunObserver
from fedxab.run.session import ClientSession, ServerSession

PACKAGE = Path(__file__).resolve().parents[2] / "fedxab"

ONLY_IN = {
    "receive": {"run/session.py"},  # a report reaches the state machine
    "ready": {"run/session.py"},  # the barrier
    "make_federation": {"run/assembly.py", "config.py"},  # a run's parts (config: validation)
    # what observers are told during a run: computed by one watcher (fedxab.run.watch)
    "on_progress": {"run/watch.py"},
    "on_regret": {"run/watch.py"},
    "on_observed": {"run/watch.py"},
    "ledger_epsilons": {"run/watch.py", "run/observe.py"},  # observe: EpsilonWatch
    "Progress": {"run/watch.py"},
}
"""Calls that only these modules (outside algorithms/, which defines them) may make. (Closing a
phase is the drivers' call of ``ServerSession.close_phase``: the counts below show it.) The
runners' observation -- progress, regret, what clients observed, epsilon -- is computed in
fedxab.run.watch alone: no runner keeps a copy that could drift."""


def _calls(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_only_the_run_core_drives_the_server_state_machine():
    found: dict[str, set[str]] = {name: set() for name in ONLY_IN}
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith("algorithms/"):
            continue
        for name in _calls(path) & set(ONLY_IN):
            found[name].add(where)
    assert found == ONLY_IN


OBSERVER_HOOKS = [name for name in vars(RunObserver) if name.startswith("on_")] + [
    "start_run",
    "end_run",
    "fail_run",
    "privacy_due",
    "watch_trials",
]
WATCHING = [
    "RunWatch",
    "of_session",
    "tell_regret",
    "regret_at",
    "privacy_if_due",
    "privacy_if_stale",
    "pulled",
    "add_terms",
    "ledger_epsilons",
    "Progress",
]

SHELL_MAY_NOT_CALL = {
    "open_record": "opening a record (size, decoding, signature)",
    "admit": "envelope admission",
    "classify": "classifying a report",
    "decode": "decoding an envelope or a message",
    "decode_broadcast": "decoding a broadcast",
    "decode_report": "decoding a report",
    "check_phase": "checking a payload's phase",
    "body": "decoding a payload",
    "unpackb": "decoding a payload",
    "packb": "encoding a payload",
    "Envelope": "building an envelope",
    "encode": "encoding an envelope",
    "encode_envelope": "encoding an envelope",
    "seal": "signing a record",
    "seal_about": "signing a record",
    "seal_for_every_client": "signing a record",
    "telemetry_from_wire": "decoding telemetry",
    "telemetry_to_wire": "encoding telemetry",
    "failure_text": "decoding a failure",
    "failure_body": "encoding a failure",
    "checked_best_release": "decoding a best-value release",
    "from_dict": "decoding an outcome",
    "release_record": "building a ledger record",
    "budget_record": "building a ledger record",
    "end_record": "building a ledger record",
    **dict.fromkeys(OBSERVER_HOOKS, "telling an observer"),
    **dict.fromkeys(WATCHING, "computing what an observer is told"),
}
"""What an agent, an asyncio and broker shell, leaves to its sans-I/O party (calls by name)."""

SHELLS = ["agents/server.py", "agents/client.py"]

SHELL_LINES = 757
"""The most lines the two shells may have together: 60% of their 1,262 lines when issue 38
asked them to become I/O shells (what is not asyncio or broker I/O lives in fedxab.run)."""

SHELL_MAY_NOT_IMPORT = {
    "fedxab.broker.codec",
    "fedxab.run.envelope",
    "fedxab.algorithms.registry",
    "fedxab.privacy.mirror",
}
"""What builds or reads records (modules): a shell imports none of them."""


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


@pytest.mark.parametrize("shell", SHELLS)
def test_an_agent_holds_no_admission_decoding_or_record_building(shell):
    """The agents move records; their parties (fedxab.run.server_party, client_party) say what
    each means."""
    found = {
        name: SHELL_MAY_NOT_CALL[name] for name in _calls(PACKAGE / shell) & set(SHELL_MAY_NOT_CALL)
    }
    assert found == {}
    assert _imports(PACKAGE / shell) & SHELL_MAY_NOT_IMPORT == set()


def test_the_agents_are_thin():
    lines = {shell: len((PACKAGE / shell).read_text().splitlines()) for shell in SHELLS}
    assert sum(lines.values()) <= SHELL_LINES, lines


CONFIG = config_from_dict(
    {
        "run": {"budget": 400},
        "objective": {"name": "garland"},
        "algorithm": {"name": "fedpne"},
        "federation": {"clients": 4},
    }
)


@pytest.fixture
def calls(monkeypatch):
    """Counts of the sessions' methods as a run calls them."""
    counted: Counter[str] = Counter()
    for cls, name in (
        (ServerSession, "classify"),
        (ServerSession, "barrier_met"),
        (ServerSession, "close_phase"),
        (ClientSession, "answer"),
    ):
        original = getattr(cls, name)

        def wrapper(self, *args, _original=original, _name=name, **kwargs):
            counted[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)
    return counted


def test_in_process_and_on_a_broker_the_same_sessions_do_the_work(calls):
    in_process = run_federated(CONFIG, 0)
    direct = dict(calls)
    calls.clear()

    async def on_broker():
        async with MemoryBroker() as broker:
            return await run_on_broker(CONFIG, 0, broker)

    on_memory = asyncio.run(on_broker())
    phases = in_process.communication["rounds"]
    assert on_memory.communication["rounds"] == phases
    # every report classified once, every client answering every phase, on both transports
    assert direct["classify"] == calls["classify"] == 4 * phases
    assert direct["answer"] == calls["answer"] == 4 * phases
    assert direct["close_phase"] == calls["close_phase"] == phases
    assert direct["barrier_met"] >= phases and calls["barrier_met"] >= phases
