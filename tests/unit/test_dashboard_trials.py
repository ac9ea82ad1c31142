"""The dashboard's trials panel (issue 35 item 4): each call of a user's objective appears as
it happens, by name in the user's units, with each client's best so far and the server's
recommendation by name."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fedxab
from fedxab.api import make_config, run_job
from fedxab.dashboard.state import DashboardState, state_from_results
from fedxab.dashboard.trials import RECENT
from fedxab.objectives.history import TrialRecord

SPACE_TABLE = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "depth": {"type": "int", "low": 1, "high": 8},
    "kind": {"type": "categorical", "choices": ["a", "b"]},
}


def _state(direction: str) -> DashboardState:
    state = DashboardState({"space": SPACE_TABLE, "objective": {"direction": direction}})
    state.start_run(
        run_id="r", algorithm="fedpne", objective="user", transport="kafka", clients=2, budget=9
    )
    return state


def _trial(number: int, value: float) -> TrialRecord:
    return TrialRecord(
        number,
        {"lr": 10.0 ** -(1 + number), "depth": number + 1, "kind": "b"},
        value,
        0.01 * number,
    )


def test_fed_trials_are_served_by_name_with_each_clients_best_in_the_direction():
    state = _state("minimize")
    assert state.snapshot()["run"]["trials"] is None  # nothing evaluated yet
    for number, value in enumerate([0.5, 0.2, 0.9]):
        state.on_trial(3, _trial(number, value))
    state.on_trial(4, _trial(0, 0.7))
    version = state.version
    trials = state.snapshot()["run"]["trials"]
    assert trials["count"] == 4 and trials["clients"] == 2
    assert trials["direction"] == "minimize"
    best = trials["best"]  # the least loss over both clients
    assert (best["client"], best["number"], best["value"]) == (3, 1, 0.2)
    assert best["params"] == {"lr": 1e-2, "depth": 2, "kind": "b"}
    assert best["wall_s"] == 0.01 and best["at"] is not None
    assert [(r["client"], r["count"], r["value"]) for r in trials["per_client"]] == [
        (3, 3, 0.2),
        (4, 1, 0.7),
    ]
    assert [(r["client"], r["number"]) for r in trials["recent"]] == [
        (3, 0),
        (3, 1),
        (3, 2),
        (4, 0),
    ]
    detail = state.client(3)["trials"]  # one client's rows, in call order
    assert [r["value"] for r in detail["rows"]] == [0.5, 0.2, 0.9]
    assert detail["rows"][2]["params"] == {"lr": 1e-3, "depth": 3, "kind": "b"}
    state.on_trial(3, _trial(3, 0.1))
    assert state.version > version  # a page polling the version sees the new trial
    assert state.snapshot()["run"]["trials"]["best"]["value"] == 0.1


def test_maximising_the_best_is_the_largest_and_the_recent_list_stays_bounded():
    state = _state("maximize")
    for number in range(RECENT + 30):
        state.on_trial(0, _trial(number % 5, float(number % 7)))
    trials = state.snapshot()["run"]["trials"]
    assert trials["count"] == RECENT + 30 and len(trials["recent"]) == RECENT
    assert trials["best"]["value"] == 6.0


def test_the_recommendation_is_shown_by_name_in_the_users_units():
    state = _state("maximize")
    state.on_recommendation(np.array([0.5, 0.3, 0.9]))
    shown = state.snapshot()["run"]["recommendation"]
    assert shown["point"] == [0.5, 0.3, 0.9]
    expected = fedxab.SearchSpace.from_dict(SPACE_TABLE).decode(np.array([0.5, 0.3, 0.9]))
    assert shown["params"] == expected and set(shown["params"]) == {"lr", "depth", "kind"}
    assert abs(shown["params"]["lr"] - 10.0**-2.5) < 1e-12


@pytest.mark.parametrize("broker", ["inprocess://", "memory://"])
def test_a_run_of_a_users_objective_feeds_each_trial_as_it_happens(broker):
    """``fedxab run --dashboard``: the in-process runner, and the agents on the embedded
    broker (whose client agents tell a dashboard beside the server agent their trials)."""
    seen: list[int] = []  # trials the page had when each new one came

    class Watching(DashboardState):
        def on_trial(self, client, trial):
            run = self.snapshot()["run"]
            seen.append(0 if run["trials"] is None else run["trials"]["count"])
            super().on_trial(client, trial)

    space = {"lr": fedxab.Float(1e-3, 1e-1, log=True), "kind": fedxab.Categorical(["a", "b"])}
    config = make_config(
        None,
        clients=2,
        budget=10,
        space=space,
        algorithm="fedpne",
        sections={"broker": {"url": broker}},
    )
    state = Watching(config.to_dict())
    results = run_job(config, functions=lambda p: float(np.log10(p["lr"])), metrics=state)
    assert seen == list(range(20))  # one at a time, during the run
    run = state.snapshot()["run"]
    assert run["status"] == "finished" and run["trials"]["count"] == 20
    assert all(r["at"] is not None for r in run["trials"]["recent"])  # seen live, not at the end
    record = results.runs[0]
    assert run["recommendation"]["params"] == record.recommendation_params
    best = {c.client: c.best_value for c in record.clients}
    assert {r["client"]: r["value"] for r in run["trials"]["per_client"]} == best


def test_a_single_agent_run_of_a_users_objective_feeds_each_trial(tmp_path, monkeypatch):
    """``fedxab run --dashboard`` of a single-agent algorithm (HCT) on a user's objective."""
    from fedxab.agents.local import run_config
    from fedxab.config import config_from_dict

    (tmp_path / "onesite.py").write_text(
        "import math\n\ndef f(params):\n    return -abs(math.log10(params['lr']) + 2.0)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = config_from_dict(
        {
            "run": {"budget": 12, "output": str(tmp_path / "out")},
            "objective": {"function": "onesite:f"},
            "space": {"lr": SPACE_TABLE["lr"]},
            "algorithm": {"name": "hct"},
        }
    )
    seen: list[int] = []

    class Watching(DashboardState):
        def on_trial(self, client, trial):
            run = self.snapshot()["run"]
            seen.append(0 if run["trials"] is None else run["trials"]["count"])
            super().on_trial(client, trial)

    state = Watching(config.to_dict())
    results = run_config(config, metrics=state)
    assert seen == list(range(12))
    run = state.snapshot()["run"]
    assert set(run["trials"]["best"]["params"]) == {"lr"}
    assert run["trials"]["best"]["value"] == results.runs[0].clients[0].best_value
    assert run["recommendation"]["params"] == results.runs[0].recommendation_params


def test_a_server_without_the_trials_shows_each_clients_best_by_name_from_the_outcomes():
    """A server's record has each client's best point, not its trials (they stay at the
    sites): the panel lists each client's best value and its parameters by name."""
    space = {"lr": fedxab.Float(1e-3, 1e-1, log=True), "kind": fedxab.Categorical(["a", "b"])}
    results = fedxab.federate(
        lambda p: float(np.log10(p["lr"])) + (p["kind"] == "b"),
        space=space,
        clients=3,
        budget=10,
        direction="minimize",
    )
    record = results.runs[0]
    at_server = dataclasses.replace(
        record, clients=tuple(dataclasses.replace(c, trials=None) for c in record.clients)
    )
    run = state_from_results(dataclasses.replace(results, runs=(at_server,))).snapshot()["run"]
    assert run["trials"] is None
    rows = run["outcome_best"]
    assert [r["client"] for r in rows] == [0, 1, 2]
    for row, outcome in zip(rows, record.clients, strict=True):
        assert row["params"] == record.best_params[outcome.client]
        assert set(row["params"]) == {"lr", "kind"} and row["params"]["kind"] in ("a", "b")
        assert row["value"] == outcome.best_value  # the user's direction: the least loss
        assert row["evaluations"] == outcome.evaluations == 10
    assert run["recommendation"]["params"] == record.recommendation_params
    # a run on a box has no names to show
    box = fedxab.federate(lambda x: float(x[0]), [[0.0, 1.0]], clients=2, budget=5)
    assert state_from_results(box).snapshot()["run"]["outcome_best"] is None
