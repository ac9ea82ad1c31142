"""The population of each closed phase (fedxab.run.population): who joined, left, was asked
and reported, recorded once by the server's session and read by the metrics, the dashboard and
the server's log line."""

from __future__ import annotations

import asyncio
import logging

import pytest
from config_factory import sim_config
from test_server_party import CLIENTS, _party, _record, _reports

from fedxab.agents.distributed import run_on_broker
from fedxab.agents.federation import Federation
from fedxab.broker.memory import MemoryBroker
from fedxab.dashboard.state import POPULATION_ROWS, DashboardState
from fedxab.monitoring.metrics import FederationMetrics
from fedxab.run.observe import Observers
from fedxab.run.participation import Participation
from fedxab.run.population import NOTICE, PhasePopulation, Population, id_ranges

SEED = 0
PRIVATE = {  # each release charged: the budget stops every client at phase 4
    "params": {
        "epsilon": 0.5,
        "privacy_delta": 1e-3,
        "calibration": "classic",
        "composition": "sequential",
    },
    "heterogeneity": "shift",
    "privacy": {"accountant": "rdp", "budget_epsilon": 0.7},
}


def test_client_ids_are_named_as_runs_and_the_rest_counted():
    assert id_ranges([9, 0, 1, 2, 3, 7, 10, 11, 3]) == "0-3, 7, 9-11"
    assert id_ranges([]) == ""
    assert id_ranges([0, 1, 2, 3, 7, 9, 10, 11], shown=2) == "0-3, 7 and 3 more"
    assert id_ranges(range(0, 20_000, 2), shown=1) == "0 and 9999 more"


def test_each_close_records_who_joined_and_left_since_the_last_one():
    population = Population()
    assert [population.join(m) for m in (3, 1, 0, 2, 1)] == [True] * 4 + [False]
    first = population.close(1, asked=4, reported=4, run_id="r")
    assert first == PhasePopulation(1, (0, 1, 2, 3), (), 4, 4)
    assert population.leave(2) and not population.leave(2)  # a repeat is no news
    assert population.join(5)
    second = population.close(2, asked=4, reported=3, run_id="r")
    assert second == PhasePopulation(2, (5,), (2,), 4, 3)
    assert population.join(2)  # it rejoins
    assert population.leave(0, news=False)  # an earlier execution's: not named again
    assert population.join(7, news=False)
    third = population.close(3, asked=5, reported=5, run_id="r")
    assert third == PhasePopulation(3, (2,), (), 5, 5)
    assert population.members == {1, 2, 3, 5, 7} and population.gone == {0}
    assert population.records == [first, second, third]


def test_the_log_line_names_who_joined_and_left_and_says_nothing_otherwise(caplog):
    population = Population()
    for m in (*range(0, 4), 7, *range(9, 12)):
        population.join(m)
    with caplog.at_level(NOTICE, logger="fedxab.run.population"):
        population.close(1, asked=8, reported=8, run_id="run-a")
        population.close(2, asked=8, reported=8, run_id="run-a")  # nobody came or went
        population.leave(7)
        population.close(3, asked=7, reported=6, run_id="run-a")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (NOTICE, "run run-a: phase 1: 8 joined (0-3, 7, 9-11); 8 of 8 asked reported"),
        (NOTICE, "run run-a: phase 3: 1 left (7); 6 of 7 asked reported"),
    ]
    assert logging.getLevelName(NOTICE) == "NOTICE"


def test_the_server_party_feeds_joins_leaves_and_reports_into_the_phases_record():
    party, broadcast = _party()
    session = party.run_session
    for m in range(CLIENTS):
        party.on_control(_record("join", m, 0, {}, session=""))
    party.on_control(_record("leave", 1, 1, {}))  # client 1 leaves before the final answer
    for m, report in _reports(party, broadcast).items():
        if m != 1:
            assert party.on_report(report)
    session.close_phase(10, CLIENTS)
    assert session.population.records == [
        PhasePopulation(1, (0, 1, 2, 3), (1,), CLIENTS, CLIENTS - 1)
    ]


def test_a_report_makes_its_client_a_member_whose_join_comes_later():
    party, broadcast = _party()
    session = party.run_session
    for report in _reports(party, broadcast).values():
        party.on_report(report)
    session.close_phase(10, CLIENTS)
    for m in range(CLIENTS):  # the control topic was read after the report topic
        party.on_control(_record("join", m, 0, {}, session=""))
    assert session.population.records[0].joined == tuple(range(CLIENTS))
    assert session.population.members == set(range(CLIENTS))
    assert session.population._joined == set()  # the next phase names nobody


def test_a_resumed_server_names_only_the_joins_of_its_own_execution():
    first, broadcast = _party()
    for report in _reports(first, broadcast).values():
        first.on_report(report)
    closed = first.run_session.close_phase(10, CLIENTS)
    party, _ = _party(closed=[closed])
    party.resumed, party.control_live = True, {0: 10}
    party.on_control(_record("join", 0, 0, {}, session="", offset=3))  # before this execution
    party.on_control(_record("leave", 1, 0, {}, offset=4))  # (an earlier leave: not named)
    party.on_control(_record("leave", 2, 2, {}, offset=12))
    assert party.run_session.population.members == {0, 3}
    assert party.run_session.population._joined == set()
    assert party.run_session.population._left == {2}


def test_an_elastic_runs_joins_silences_and_rejoins_are_named_phase_by_phase(caplog):
    """The schedule of test_membership (fedxab.run.membership): clients 4-5 join at phase 2,
    1 is gone at phase 3 and back at 4, 2 is gone at 4 (silent after its last report)."""
    from test_membership import _config, _drive

    schedule = {1: [0, 1, 2, 3], 2: [0, 1, 2, 3, 4, 5], 3: [0, 2, 3, 4, 5]}
    with caplog.at_level(NOTICE, logger="fedxab.run.population"):
        record, _ = _drive(_config(), lambda phase: schedule.get(phase, [0, 1, 3, 4, 5]))
    lines = [r.getMessage().split(": ", 1)[1] for r in caplog.records]
    assert lines == [
        "phase 1: 4 joined (0-3); 4 of 4 asked reported",
        "phase 2: 2 joined (4-5); 6 of 6 asked reported",
        "phase 3: 1 left (1); 5 of 5 asked reported",
        "phase 4: 1 joined (1); 1 left (2); 5 of 5 asked reported",
    ]
    membership = record.communication["membership"]
    assert [len(p["asked"]) for p in membership[:4]] == [4, 6, 5, 5]


def _private_config(**sections):
    return sim_config("dpfedpne", clients=8, budget=2000, **PRIVATE, **sections)


def test_in_process_every_client_joins_at_phase_1_and_withdrawn_clients_leave():
    federation = Federation(_private_config(), SEED)
    record = federation.run()
    population = federation.session.population.records
    per_phase = record.communication["per_phase"]
    assert [p.phase for p in population] == [p["phase"] for p in per_phase]
    assert population[0].joined == tuple(range(8))
    assert all(not p.joined for p in population[1:])
    withdrawn = sorted(int(m) for m in record.privacy["withdrawn"])
    assert withdrawn and sorted(m for p in population for m in p.left) == withdrawn
    assert [p.asked for p in population] == [p["asked"] for p in per_phase]
    assert [p.reported for p in population] == [p["reports_accepted"] for p in per_phase]


def _sample(text: str, name: str) -> float:
    (line,) = [x for x in text.splitlines() if x.startswith(f"{name} ")]
    return float(line.split()[-1])


def test_the_metrics_and_the_dashboard_show_the_servers_record_of_a_sampled_run():
    config = sim_config(clients=20, budget=400, federation={"participation": 0.5})
    metrics, state = FederationMetrics(role="server"), DashboardState()
    federation = Federation(config, SEED, metrics=Observers([metrics, state]))
    federation.run()
    population = federation.session.population.records
    sample = Participation(SEED, 20, 0.5)
    asked = [len(sample.asked(p.phase, range(20))) for p in population]
    assert [p.asked for p in population] == asked
    assert len({p.asked for p in population}) > 1  # the sample's size varies: not a constant
    text, last = metrics.exposition(), population[-1]
    assert _sample(text, "fedxab_clients_joined_total") == 20
    assert _sample(text, "fedxab_clients_left_total") == 0
    assert _sample(text, "fedxab_phase_clients_joined") == 0  # the last phase's
    assert _sample(text, "fedxab_phase_clients_asked") == last.asked
    assert _sample(text, "fedxab_phase_clients_reported") == last.reported
    shown = state.snapshot()["run"]["population"]
    assert (shown["joined"], shown["left"]) == (20, 0)
    rows = population[-POPULATION_ROWS:]
    assert [(r["phase"], r["asked"], r["reported"]) for r in shown["phases"]] == [
        (p.phase, p.asked, p.reported) for p in rows
    ]
    if len(population) <= POPULATION_ROWS:
        assert shown["phases"][0]["joined_ids"] == "0-19"


def test_the_server_agent_logs_metrics_and_shows_who_joined_and_who_withdrew(caplog):
    config = _private_config()
    metrics, state = FederationMetrics(role="server"), DashboardState()

    async def on_broker():
        async with MemoryBroker() as broker:
            return await run_on_broker(config, SEED, broker, metrics=Observers([metrics, state]))

    with caplog.at_level(NOTICE, logger="fedxab.run.population"):
        record = asyncio.run(on_broker())
    lines = [r.getMessage() for r in caplog.records if r.name == "fedxab.run.population"]
    withdrawn = sorted(int(m) for m in record.privacy["withdrawn"])
    assert withdrawn == list(range(8))
    phases = record.communication["per_phase"]
    assert lines == [
        f"run {record.run_id}: phase 1: 8 joined (0-7); 8 of 8 asked reported",
        f"run {record.run_id}: phase {phases[-1]['phase']}: 8 left (0-7); 8 of 8 asked reported",
    ]
    text = metrics.exposition()
    assert _sample(text, "fedxab_clients_joined_total") == 8
    assert _sample(text, "fedxab_clients_left_total") == 8
    assert _sample(text, "fedxab_phase_clients_left") == 8
    shown = state.snapshot()["run"]["population"]
    assert [(r["phase"], r["joined_ids"], r["left_ids"]) for r in shown["phases"]] == [
        (p["phase"], "0-7" if p["phase"] == 1 else "", "0-7" if p is phases[-1] else "")
        for p in phases
    ]


@pytest.mark.parametrize("verbose", [False, True])
def test_fedxab_server_shows_the_notice_lines_at_its_default_verbosity(verbose):
    from fedxab.cli import _root
    from fedxab.cli.common import show_notices

    logger = logging.getLogger("fedxab")
    saved = logger.level, [(h, h.level) for h in logger.handlers]
    try:
        _root(verbose=verbose)
        show_notices()
        (handler,) = [h for h in logger.handlers if h.level <= NOTICE]
        population = logging.getLogger("fedxab.run.population")
        assert population.isEnabledFor(NOTICE) and handler.level <= NOTICE
        assert (handler.level <= logging.INFO) is verbose  # INFO still needs -v
    finally:
        logger.setLevel(saved[0])
        for h, level in saved[1]:
            h.setLevel(level)
