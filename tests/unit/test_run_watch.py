"""One watcher computes what every runner tells its observers (:mod:`fedxab.run.watch`).

The regression it exists for: the progress is the round every *active* client reached. A
withdrawn client stops evaluating; counted, it holds the progress at its last round for the rest
of the run (the server agent's progress bar did, while its regret gauge did not). Here client 0
has spent its data owner's lifetime budget in an earlier run, so it withdraws at its first
release and the other clients go on to the end: every runner's progress must reach the budget.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from config_factory import sim_config

from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import run_on_broker
from fedxab.agents.federation import Federation
from fedxab.agents.server import ServerAgent
from fedxab.broker.memory import MemoryBroker
from fedxab.run.identity import run_id_for
from fedxab.run.observe import Progress, ProgressObserver, RunObserver
from fedxab.run.watch import RunWatch

CLIENTS, BUDGET, SEED = 4, 3000, 2
RELEASES = 4  # what each client that stays releases in the run below


class Rounds(RunObserver):
    """Records every round told: progress (``done``) and regret (``t``)."""

    wants_progress = True
    wants_regret = True

    def __init__(self) -> None:
        self.done: list[int] = []
        self.t: list[int] = []

    def on_progress(self, progress: Progress) -> None:
        self.done.append(progress.done)

    def on_regret(self, *, t: int | None = None, **_: object) -> None:
        if t is not None:
            self.t.append(t)


# ------------------------------------------------------------------------------- the watch
def test_the_progress_leaves_withdrawn_clients_out():
    gone: set[int] = set()
    watch = RunWatch(RunObserver(), 10, [3, 5, 7], lambda: gone)
    used = np.array([4, 2, 9])
    assert watch.reached(used) == 2 and watch.active() == 3
    gone.add(5)  # client 5 stopped at round 2
    assert watch.reached(used) == 4 and watch.active() == 2
    gone.update({3, 7})
    assert watch.reached(used) == 10 and watch.active() == 0  # none left: the budget


def test_the_running_regret_is_per_observed_client_and_unknown_is_none_or_nan():
    seen = Rounds()
    watch = RunWatch(seen, 8, [0, 1], known=(True, False))
    watch.add_regret(3.0)
    assert watch.cumulative() == (1.5, None)
    watch.progress(4)
    assert seen.done == [4]
    blind = Rounds()
    RunWatch(blind, 8, [0], known=(False, False)).progress(2)
    assert blind.done == [2]


class Ends(RunObserver):
    """Records how runs end."""

    def __init__(self) -> None:
        self.ends: list[object] = []

    def fail_run(self) -> None:
        self.ends.append("failed")

    def end_run(self, record=None) -> None:
        self.ends.append(record)


def test_a_run_that_raises_is_told_failed_once_and_a_finished_one_ended():
    seen = Ends()
    watch = RunWatch(seen, 8, [0])
    with pytest.raises(KeyboardInterrupt), watch.failing():
        raise KeyboardInterrupt  # (an interruption too: BaseException)
    with watch.failing():
        pass
    watch.ended("record")
    assert seen.ends == ["failed", "record"]


def test_a_progress_callback_gets_the_typed_progress_as_before():
    plain: list[tuple] = []
    ProgressObserver(lambda *a, **k: plain.append((a, k))).on_progress(Progress(3, 9, 0.5, 2))
    assert plain == [((3, 9, 0.5), {})]

    detailed: list[tuple] = []

    def callback(*args, **kwargs):
        detailed.append((args, kwargs))

    callback.details = True  # type: ignore[attr-defined]
    ProgressObserver(callback).on_progress(Progress(3, 9, math.inf, 2, 27, 0.1))
    assert detailed == [((3, 9, math.inf), {"phase": 2, "evaluations": 27, "epsilon": 0.1})]


# ------------------------------------------------------------------------------ every runner
def _config(ledger, lifetime: float | None, clients: int = CLIENTS, budget: int = BUDGET):
    """DP-Fed-PNE; its client agents send their telemetry after every phase's reports."""
    privacy = {"ledger": str(ledger)}
    if lifetime is not None:
        privacy["lifetime_epsilon"] = lifetime
    return sim_config(
        "dpfedpne",
        clients=clients,
        budget=budget,
        heterogeneity="offset",
        params={"epsilon": 0.5, "privacy_delta": 1e-3, "composition": "sequential"},
        privacy=privacy,
        agents={"telemetry_interval_s": 1e-6},
    )


@pytest.fixture
def exhausted(tmp_path):
    """A config whose client 0 has no lifetime budget left (an earlier, longer run of client 0
    alone spent it on 4 releases), the others all of theirs (the run makes 4 releases)."""
    ledger = tmp_path / "ledger.db"
    first = Federation(_config(ledger, None, clients=1, budget=10 * BUDGET), SEED).run()
    assert first.privacy["releases"] == [RELEASES]
    return _config(ledger, first.privacy["epsilon"][0] * 1.0001)


def _check_withdrawal(record) -> None:
    """Client 0 withdrew (at its first release, before evaluating: it stays at round 0), the
    others used their whole budget."""
    assert set(record.privacy["withdrawn"]) == {"0"}
    assert record.privacy["releases"] == [0] + [RELEASES] * (CLIENTS - 1)
    assert record.evaluations == (CLIENTS - 1) * BUDGET


def test_in_process_the_progress_reaches_the_budget_past_a_withdrawn_client(exhausted):
    seen = Rounds()
    record = Federation(exhausted, SEED, metrics=seen).run()
    _check_withdrawal(record)
    assert max(seen.done) == BUDGET and max(seen.t) == BUDGET


def test_on_a_broker_every_agent_leaves_the_withdrawn_client_out(exhausted):
    """The server agent (progress at each phase, and its rounds) over a broker whose client
    agent is remote, and the client agent's own rounds (its metrics). The server learns the
    clients' rounds from their telemetry, sent after their reports: a phase closes on the
    reports, so its progress lags one phase behind, but it leaves round 0 (client 0's) once
    the others' telemetry came."""
    server_view, client_view = Rounds(), Rounds()
    run_id = run_id_for(exhausted, SEED)

    async def main():
        broker = MemoryBroker()
        server = ServerAgent(exhausted, SEED, broker, run_id=run_id, metrics=server_view)
        client = ClientAgent(
            exhausted,
            SEED,
            broker,
            run_id=run_id,
            client_ids=list(range(CLIENTS)),
            metrics=client_view,
        )
        record, _ = await asyncio.gather(server.run(), client.run())
        return record

    record = asyncio.run(main())
    _check_withdrawal(record)
    assert max(server_view.done) > 0 and max(server_view.t) > 0
    assert server_view.done == server_view.t  # the bar and the round gauge agree
    assert max(client_view.t) == BUDGET


def test_the_broker_runner_of_one_process_reaches_the_budget(exhausted):
    done: list[int] = []
    record = asyncio.run(
        run_on_broker(exhausted, SEED, MemoryBroker(), progress=lambda d, t, c: done.append(d))
    )
    _check_withdrawal(record)
    assert max(done) == BUDGET
