"""A finished run continued with more budget (issue 37 item 3): Fed-PNE and DP-Fed-PNE, budget
2,000 continued to 5,000, against runs started with 5,000; and the one-line refusals."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import uuid
from pathlib import Path

import numpy as np
import pytest
from cli_procs import start_cli, wait_ok, without_time
from typer.testing import CliRunner

import fedxab
from fedxab.agents.federation import Federation
from fedxab.algorithms.registry import FEDERATED
from fedxab.cli import app
from fedxab.config import config_from_dict
from fedxab.errors import ConfigError, EvaluationError
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.results import write_results
from fedxab.run.continuation import CONTINUES, REFUSED, continue_party
from fedxab.run.identity import run_id_for

runner = CliRunner()

DOMAIN = [[0.0, 1.0], [0.0, 1.0]]
CLIENTS = 4


class Counted:
    """A deterministic objective per client, on a batch, that counts the points evaluated."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, X: np.ndarray, client_id: int) -> np.ndarray:
        self.calls += len(X)
        return 1.0 - np.sum((X - 0.3 - 0.05 * client_id) ** 2, axis=1)


def _federate(f: Counted, budget: int, **options):
    params = options.pop("params", {})
    clients = options.pop("clients", CLIENTS)
    return fedxab.federate(
        f,
        DOMAIN,
        budget=budget,
        clients=clients,
        algorithm="fedpne",
        params=params,
        vectorized=True,
        **options,
    )


def _comparable(run) -> dict:
    """A run's record without what may differ between two runs of one result: the wall time,
    the run id (a continued run keeps the id of the run it continues) and the trials' wall
    times."""
    data = run.to_dict()
    data.pop("wall_time_s")
    data.pop("run_id")
    trials = [[dataclasses.replace(t, wall_s=0.0) for t in o.trials] for o in run.clients]
    return {**data, "trials": trials}


def test_fedpne_continued_from_2000_to_5000_is_the_5000_run_with_the_kept_horizon():
    f = Counted()
    short = _federate(f, 2_000)
    assert f.calls == CLIENTS * 2_000
    continued = _federate(f, 5_000, resume=short)
    # the objective is called only for the new evaluations: the first 2,000 are replayed
    assert f.calls == CLIENTS * 5_000
    assert continued.runs[0].run_id == short.runs[0].run_id
    assert continued.config["algorithm"]["horizon"] == 2_000  # pinned

    longer = _federate(Counted(), 5_000, params={"horizon": 2_000})
    assert _comparable(continued.runs[0]) == _comparable(longer.runs[0])
    assert [len(o.trials) for o in continued.runs[0].clients] == [5_000] * CLIENTS

    # the documented difference: a run started with 5,000 sets L from T = 5,000, not 2,000
    fresh = _federate(Counted(), 5_000)
    assert _comparable(continued.runs[0]) != _comparable(fresh.runs[0])


def test_fedpne_started_with_the_horizon_of_5000_continues_to_exactly_the_5000_run():
    short = _federate(Counted(), 2_000, params={"horizon": 5_000})
    continued = _federate(Counted(), 5_000, params={"horizon": 5_000}, resume=short)
    fresh = _federate(Counted(), 5_000)  # horizon: the budget, 5,000
    assert _comparable(continued.runs[0]) == _comparable(fresh.runs[0])
    # ... and continued again, 5,000 -> 8,000, it is still the run of the longer budget
    again = _federate(Counted(), 8_000, params={"horizon": 5_000}, resume=continued)
    longest = _federate(Counted(), 8_000, params={"horizon": 5_000})
    assert _comparable(again.runs[0]) == _comparable(longest.runs[0])


def test_a_replayed_point_that_is_not_the_recorded_one_stops_the_run():
    short = _federate(Counted(), 2_000)
    run = short.runs[0]
    first = run.clients[1].trials[0]
    moved = dataclasses.replace(first, params={"x0": 0.125, "x1": 0.5})
    clients = list(run.clients)
    clients[1] = dataclasses.replace(clients[1], trials=(moved, *clients[1].trials[1:]))
    tampered = dataclasses.replace(short, runs=(dataclasses.replace(run, clients=tuple(clients)),))
    with pytest.raises(EvaluationError, match="client 1: it evaluates .* does not continue"):
        _federate(Counted(), 5_000, resume=tampered)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"budget": 1_000}, "run.budget"),
        ({"params": {"rho": 0.7}}, "algorithm.rho"),
        ({"params": {"horizon": 3_000}}, "algorithm.horizon"),
        ({"algorithm": "fed1ucb"}, "algorithm.name"),
        ({"broker": "kafka://127.0.0.1:9"}, "broker.url"),
    ],
)
def test_a_continuation_that_does_not_fit_is_refused_naming_the_field(change, field):
    short = _federate(Counted(), 2_000)
    options = {"budget": 5_000, "params": {}, **change}
    budget = options.pop("budget")
    algorithm = options.pop("algorithm", "fedpne")
    with pytest.raises(ConfigError) as caught:
        fedxab.federate(
            Counted(), DOMAIN, budget=budget, clients=CLIENTS, algorithm=algorithm,
            vectorized=True, resume=short, **options,
        )  # fmt: skip
    assert caught.value.field == field
    assert "\n" not in str(caught.value)


def test_every_federated_algorithm_continues_or_says_why_not():
    assert set(CONTINUES) | set(REFUSED) == set(FEDERATED)
    assert not set(CONTINUES) & set(REFUSED)


def _points(name: str, budget: int, seed: int, params: dict) -> list[np.ndarray]:
    """Each client's evaluated points, in order, in run ``seed`` of ``name`` on Garland."""
    config = config_from_dict(
        {
            "run": {"budget": budget},
            "objective": {"name": "garland"},
            "algorithm": {"name": name, **params},
            "federation": {"clients": 3},
            "broker": {"url": "inprocess://"},
        }
    )
    federation = Federation(config, seed, keep_points=True)
    federation.run()
    return [np.concatenate(p) for p in federation.points]


PRIVATE = {"epsilon": 0.5, "privacy_delta": 1e-5}
PREFIX_CASES = {  # algorithm: (smaller budget, larger budget, parameters)
    "fedpne": (300, 700, {"horizon": 300}),
    "dpfedpne": (300, 700, {"horizon": 300, **PRIVATE}),
    "ftsde": (14, 20, {}),
    "ts": (14, 20, {}),
}
NOT_PREFIX_CASES = {  # algorithms refused because the budget sets their schedule
    "fed1ucb": (300, 700),
    "pfpne": (300, 700),
    "parallel": (300, 700),
    "fedtpe": (40, 60),
    "pfhct": (200, 500),
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in ("ftsde", "ts") else name
        for name in sorted(CONTINUES)
    ],
)
def test_an_algorithm_that_continues_evaluates_first_what_the_smaller_run_did(name):
    """What a continuation relies on: the replayed evaluations are the longer run's first."""
    small, large, params = PREFIX_CASES[name]
    for seed in (0, 1):
        shorter = _points(name, small, seed, params)
        longer = _points(name, large, seed, params)
        assert [len(p) for p in shorter] == [small] * 3
        for a, b in zip(shorter, longer, strict=True):
            np.testing.assert_array_equal(a, b[: len(a)])


@pytest.mark.parametrize("name", sorted(NOT_PREFIX_CASES))
def test_an_algorithm_refused_for_its_budget_schedule_evaluates_otherwise(name):
    """The refusals are not just caution: with a larger budget these evaluate other points
    before the smaller run's end."""
    small, large = NOT_PREFIX_CASES[name]
    shorter, longer = _points(name, small, 0, {}), _points(name, large, 0, {})
    assert any(not np.array_equal(a, b[: len(a)]) for a, b in zip(shorter, longer, strict=True))
    assert "budget" in REFUSED[name]


# ------------------------------------------------------------------------------ fedxab run
JOB = """\
[run]
budget = 2000

[objective]
name = "garland"

[algorithm]
name = "{algorithm}"
{params}

[federation]
clients = {clients}

[broker]
url = "inprocess://"
{privacy}
"""

PRIVACY = """
[privacy]
ledger = "ledger.sqlite"
lifetime_epsilon = 100.0
"""


def _job(tmp_path: Path, algorithm: str = "fedpne", params: str = "", private: bool = False):
    path = tmp_path / f"{algorithm}.toml"
    text = JOB.format(
        algorithm=algorithm,
        params=params,
        clients=CLIENTS,
        privacy=PRIVACY if private else "",
    )
    path.write_text(text)
    return path


def _run(*args: str) -> str:
    result = runner.invoke(app, ["run", *map(str, args)])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def _runs(out: Path) -> list[dict]:
    runs = json.loads((out / "results.json").read_text())["runs"]
    for run in runs:
        run.pop("wall_time_s")
        run.pop("run_id")
    return runs


def test_fedxab_run_resume_budget_continues_a_fedpne_run(tmp_path):
    job = _job(tmp_path)
    out = tmp_path / "out"
    _run(job, "-o", out, "-q", "--broker", "memory://")
    # the embedded broker's run continues in process (the same results on every transport)
    text = _run(job, "-o", out, "--resume", "--budget", "5000", "--broker", "memory://")
    assert "continuing: seed(s) 0 from budget 2,000" in text
    first_id = json.loads((out / "runs" / "seed-0.json").read_text())["run"]["run_id"]
    assert f"run id {first_id}" in text  # the id the continued run keeps
    (tmp_path / "h").mkdir()
    pinned = _job(tmp_path / "h", params="horizon = 2000")
    _run(pinned, "-o", tmp_path / "longer", "-q", "--budget", "5000")
    assert _runs(out) == _runs(tmp_path / "longer")
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["run"]["budget"] == 5_000
    assert results["config"]["algorithm"]["horizon"] == 2_000


def test_a_continued_dpfedpne_run_charges_its_ledger_as_the_longer_run(tmp_path):
    job = _job(tmp_path, "dpfedpne", "epsilon = 0.5\nprivacy_delta = 1e-5\n", private=True)
    out = tmp_path / "out"
    _run(job, "-o", out, "-q")
    first = json.loads((out / "results.json").read_text())["runs"][0]
    _run(job, "-o", out, "-q", "--resume", "--budget", "5000")
    continued = json.loads((out / "results.json").read_text())["runs"][0]
    assert continued["run_id"] == first["run_id"]

    (tmp_path / "h").mkdir()
    pinned = _job(
        tmp_path / "h",
        "dpfedpne",
        "epsilon = 0.5\nprivacy_delta = 1e-5\nhorizon = 2000\n",
        private=True,
    )
    _run(pinned, "-o", tmp_path / "longer", "-q", "--budget", "5000")
    longer = json.loads((tmp_path / "longer" / "results.json").read_text())["runs"][0]

    ours = PrivacyLedger(str(out / "ledger.sqlite"))
    theirs = PrivacyLedger(str(tmp_path / "longer" / "ledger.sqlite"))
    try:
        assert ours.runs() == [first["run_id"]]  # one run, continued: no second run charged
        history = ours.history_all(first["run_id"])
        assert history == theirs.history_all(longer["run_id"])
        releases = [len(history[m]) for m in range(CLIENTS)]
        assert all(r > f for r, f in zip(releases, first["privacy"]["releases"], strict=True))
        assert ours.run_owners(first["run_id"]) == theirs.run_owners(longer["run_id"])
        owner = ours.run_owners(first["run_id"])[0]
        assert ours.lifetime_spent(owner) == pytest.approx(theirs.lifetime_spent(owner))
    finally:
        ours.close()
        theirs.close()
    for block in (continued["privacy"], longer["privacy"]):
        block.pop("run_id")
        block.pop("ledger")
    assert continued["privacy"] == longer["privacy"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--budget", "1000"], "run.budget: 1000 does not exceed the 2000 evaluations"),
        (
            ["--budget", "5000", "--broker", "kafka://127.0.0.1:9"],
            "broker.url: fedxab run continues a finished run in process",
        ),
    ],
)
def test_fedxab_run_refuses_a_continuation_in_one_line(tmp_path, args, expected):
    job = _job(tmp_path)
    out = tmp_path / "out"
    _run(job, "-o", out, "-q")
    result = runner.invoke(app, ["run", str(job), "-o", str(out), "--resume", *args])
    assert result.exit_code != 0
    assert expected in " ".join(result.output.split())


def test_fedxab_run_resume_without_a_previous_run_says_so(tmp_path):
    job = _job(tmp_path)
    result = runner.invoke(
        app, ["run", str(job), "-o", str(tmp_path / "none"), "--resume", "--budget", "5000"]
    )
    assert result.exit_code != 0
    assert "run.output:" in result.output and "no finished run to resume" in result.output


def test_fedxab_run_refuses_to_continue_an_algorithm_that_cannot(tmp_path):
    job = _job(tmp_path, "fed1ucb")
    out = tmp_path / "out"
    _run(job, "-o", out, "-q")
    result = runner.invoke(app, ["run", str(job), "-o", str(out), "--resume", "--budget", "5000"])
    assert result.exit_code != 0
    text = " ".join(result.output.split())
    assert "run.budget: a finished fed1ucb run cannot be continued" in text


SITE_MODULE = """\
import numpy as np

CALLS = [0]


def site(x, client_id):
    CALLS[0] += 1
    return float(1.0 - np.sum((x - 0.3 - 0.05 * client_id) ** 2))
"""

USER_JOB = """\
[run]
budget = 300

[objective]
function = "continuesite:site"
domain = [[0.0, 1.0], [0.0, 1.0]]

[algorithm]
name = "fedpne"

[federation]
clients = 3

[broker]
url = "inprocess://"
"""


def test_fedxab_run_continues_a_users_function_from_its_trials_csv(tmp_path, monkeypatch):
    (tmp_path / "continuesite.py").write_text(SITE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import continuesite

    job = tmp_path / "job.toml"
    job.write_text(USER_JOB)
    out = tmp_path / "out"
    _run(job, "-o", out, "-q")
    assert continuesite.CALLS[0] == 3 * 300
    _run(job, "-o", out, "-q", "--resume", "--budget", "700")
    assert continuesite.CALLS[0] == 3 * 700  # the first 300 per client came from the CSV files

    pinned = tmp_path / "pinned.toml"
    pinned.write_text(USER_JOB.replace('"fedpne"', '"fedpne"\nhorizon = 300'))
    _run(pinned, "-o", tmp_path / "longer", "-q", "--budget", "700")
    assert _runs(out) == _runs(tmp_path / "longer")
    for m in range(3):
        name = f"trials-seed0-client{m}.csv"
        ours = [r.split(",")[:-1] for r in (out / name).read_text().splitlines()]
        theirs = [r.split(",")[:-1] for r in (tmp_path / "longer" / name).read_text().splitlines()]
        assert ours == theirs and len(ours) == 701  # (the wall times aside)

    (out / "trials-seed0-client2.csv").unlink()
    result = runner.invoke(
        app, ["run", str(job), "-o", str(out), "--resume", "--budget", "900", "-q"]
    )
    assert result.exit_code != 0
    assert "run.output: a user's objective continues from the finished run's trials" in " ".join(
        result.output.split()
    )


def test_a_continuation_that_does_not_repeat_the_finished_runs_phases_is_refused(tmp_path):
    job = _job(tmp_path)
    out = tmp_path / "out"
    _run(job, "-o", out, "-q")
    kept = out / "runs" / "seed-0.json"
    data = json.loads(kept.read_text())
    assert len(data["run"]["communication"]["per_phase"]) > 2
    data["run"]["communication"]["per_phase"][1]["bytes_up"] += 1  # as another version might
    kept.write_text(json.dumps(data))
    result = runner.invoke(app, ["run", str(job), "-o", str(out), "--resume", "--budget", "5000"])
    assert result.exit_code != 0
    text = " ".join(result.output.split())
    assert "phase 2 of the continued run differs from the finished run's (bytes_up:" in text


# ---------------------------------------------------------------- server and clients on a broker
async def _on_broker(server_config, client_config, function, replay=None):
    """``serve`` and ``host_clients`` (clients 0..2) of one job on one embedded broker."""
    from fedxab.agents.distributed import host_clients, serve
    from fedxab.broker.factory import make_broker

    broker = make_broker("memory://", server_config.broker)
    async with broker, asyncio.TaskGroup() as group:
        served = group.create_task(serve(server_config, broker))
        hosted = group.create_task(
            host_clients(client_config, broker, [0, 1, 2], functions=function, replay=replay)
        )
    return served.result(), hosted.result()


def _party_config(budget: int):
    return fedxab.make_config(
        DOMAIN,
        clients=3,
        budget=budget,
        algorithm="fedpne",
        vectorized=True,
        sections={"broker": {"url": "memory://"}},
    )


def test_a_server_and_its_clients_continue_a_run_on_a_broker(tmp_path):
    first = _party_config(300)
    served, hosted = asyncio.run(_on_broker(first, first, Counted()))
    write_results(served, tmp_path / "server")
    write_results(hosted, tmp_path / "clients")

    more = _party_config(700)
    server_config, _ = continue_party(more, tmp_path / "server")
    client_config, replay = continue_party(more, tmp_path / "clients", [0, 1, 2])
    assert run_id_for(server_config, 0) == run_id_for(client_config, 0)  # they meet
    f = Counted()
    served, hosted = asyncio.run(_on_broker(server_config, client_config, f, replay))
    assert f.calls == 3 * (700 - 300)  # the first 300 per client came from their trials

    longer = _federate(Counted(), 700, params={"horizon": 300}, clients=3)
    ours, theirs = served.runs[0].to_dict(), longer.runs[0].to_dict()
    ours.pop("wall_time_s"), theirs.pop("wall_time_s")
    assert ours == theirs  # the run id too: on a broker a continued run is a new run
    for mine, its in zip(hosted.runs[0].clients, longer.runs[0].clients, strict=True):
        assert [dataclasses.replace(t, wall_s=0) for t in mine.trials] == [
            dataclasses.replace(t, wall_s=0) for t in its.trials
        ]


def test_a_party_resumes_only_a_finished_run_and_not_a_private_one(tmp_path):
    with pytest.raises(ConfigError, match=r"^run.output: .*results.json does not exist"):
        continue_party(_party_config(700), tmp_path)
    result = runner.invoke(
        app,
        ["client", str(_job(tmp_path)), "--client-id", "0", "--resume", "--budget", "700"],
    )
    assert result.exit_code != 0
    assert "--output: --resume continues from these clients' own results" in result.output
    private = fedxab.make_config(
        DOMAIN,
        clients=3,
        budget=300,
        algorithm="dpfedpne",
        params=PRIVATE,
        vectorized=True,
        sections={"broker": {"url": "memory://"}, "privacy": {"budget_epsilon": 10.0}},
    )
    write_results(
        fedxab.federate(Counted(), DOMAIN, budget=300, clients=3, algorithm="dpfedpne",
                        params=PRIVATE, vectorized=True,
                        sections={"privacy": {"budget_epsilon": 10.0}}),
        tmp_path / "private",
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"^privacy: a private run continues in process only"):
        continue_party(private.with_run(budget=700), tmp_path / "private")


@pytest.mark.slow  # (two runs of a server and a client process: about a minute here)
def test_fedxab_server_and_client_processes_continue_a_run_on_the_dev_broker(
    tmp_path, dev_broker, monkeypatch
):
    (tmp_path / "continuesite.py").write_text(SITE_MODULE)
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    }
    on_broker = USER_JOB.replace(
        'url = "inprocess://"',
        f'url = "{dev_broker.url}"\nnamespace = "c{uuid.uuid4().hex[:10]}"',
    )
    job = tmp_path / "job.toml"
    job.write_text(on_broker + "\n[security]\nsign = false\n")
    server_out, client_out = tmp_path / "server", tmp_path / "clients"

    def both(*more: str) -> None:
        server = start_cli(
            "server", str(job), "-o", str(server_out), "-q", *more, log=tmp_path / "server.log"
        )
        client = start_cli("client", str(job), "--client-id", "0-2", "-o", str(client_out),
                           *more, log=tmp_path / "client.log", env=env)  # fmt: skip
        wait_ok(server, tmp_path / "server.log", 180)
        wait_ok(client, tmp_path / "client.log", 180)

    both()
    both("--budget", "700", "--resume")

    monkeypatch.syspath_prepend(str(tmp_path))
    pinned = tmp_path / "pinned.toml"
    pinned.write_text(USER_JOB.replace('"fedpne"', '"fedpne"\nhorizon = 300'))
    _run(pinned, "-o", tmp_path / "longer", "-q", "--budget", "700")
    served = json.loads((server_out / "results.json").read_text())["runs"][0]
    longer = json.loads((tmp_path / "longer" / "results.json").read_text())["runs"][0]
    assert without_time(served) == without_time(longer)  # the run id too: a new run
    for m in range(3):
        name = f"trials-seed0-client{m}.csv"
        ours = [r.split(",")[:-1] for r in (client_out / name).read_text().splitlines()]
        theirs = [r.split(",")[:-1] for r in (tmp_path / "longer" / name).read_text().splitlines()]
        assert ours == theirs and len(ours) == 701  # (the wall times aside)
