"""Elastic membership (``[federation] membership = "elastic"``, :mod:`fedxab.run.membership`):
the record-level rules without a broker: who is asked when clients join after phase 1, leave,
fall silent and rejoin; what the barrier counts; the per-phase record; and its in-process
replay (:mod:`fedxab.run.replay`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from config_factory import sim_config

from fedxab.agents.federation import Federation
from fedxab.algorithms.registry import NO_PARTICIPATION
from fedxab.errors import ConfigError, ProtocolError
from fedxab.results import ResultsError, RunRecord
from fedxab.run.accounting import stopped_phases
from fedxab.run.assembly import build_run
from fedxab.run.identity import protocol_of, run_id_for
from fedxab.run.membership import (
    PhaseMembers,
    Roster,
    asked_from_wire,
    asked_to_wire,
    membership_of,
)
from fedxab.run.replay import ReplayError, replay, replay_differences

SEED, CLIENTS, BUDGET = 3, 8, 1500


def _config(algorithm="fedpne", membership="elastic", **federation):
    fed = {"membership": membership, **federation} if membership else dict(federation)
    kwargs = {}
    if algorithm == "dpfedpne":
        kwargs["privacy"] = {}
        kwargs["params"] = {"epsilon": 0.5, "privacy_delta": 1e-3, "composition": "sequential"}
    return sim_config(algorithm, clients=CLIENTS, budget=BUDGET, federation=fed, **kwargs)


def _drive(config, members, reported=lambda phase, asked: asked, limits=None):
    """Run ``config`` in process with ``members(phase)`` in the run as each phase opens and
    ``reported(phase, asked)`` the clients whose reports reach the server; the record.
    ``limits``: client -> its own budget (as ``[agents] client_budget`` sets it)."""
    parts = build_run(
        config, SEED, run_id=run_id_for(config, SEED), server=True, client_ids=range(CLIENTS)
    )
    session, hosted = parts.server, parts.clients
    for m, limit in (limits or {}).items():
        hosted.clients[m].limit = limit
    session.members = members
    msg = session.start()
    from fedxab.algorithms.registry import decode_broadcast
    from fedxab.broker.codec import packb, unpackb

    while session.finished is None:
        phase = session.phase
        hosted.asked[phase] = frozenset(session.asked)
        wire = packb(msg.to_wire())
        arrive = set(reported(phase, list(session.asked)))
        for m in session.active:
            broadcast = decode_broadcast(config.algorithm.name, unpackb(wire))
            report, telemetry, _ = hosted.answer(m, broadcast)
            if telemetry is not None:
                session.sums.add(telemetry)
            if report is not None and m in arrive:
                assert session.classify(m, phase, packb(report.to_wire())).outcome == "accepted"
        gone = set(session.asked) - arrive
        assert session.barrier_met(0.0, None, 1.0, gone=gone)
        if gone:  # without the gone clients the barrier still waits for them
            assert not session.barrier_met(0.0, None, 1.0)
        session.close_phase(len(wire), len(session.active))
        msg = session.msg
    for m in range(CLIENTS):
        session.add_outcome(hosted.outcome(m))
    privacy = None
    if parts.run_ledger is not None:
        privacy = parts.run_ledger.block(range(CLIENTS), stopped_phases(session.server))
    return session.record(0.0, privacy), hosted


# --------------------------------------------------------------------------------- config
def test_membership_is_opt_in_and_fixed_runs_keep_their_run_id():
    fixed, unset, elastic = _config(membership="fixed"), _config(membership=None), _config()
    assert not fixed.federation.elastic and not unset.federation.elastic
    assert elastic.federation.elastic
    assert "membership" not in protocol_of(unset, SEED)
    assert run_id_for(unset, SEED) == run_id_for(
        sim_config("fedpne", clients=CLIENTS, budget=BUDGET), SEED
    )
    assert protocol_of(elastic, SEED)["membership"] == "elastic"
    assert run_id_for(elastic, SEED) != run_id_for(unset, SEED)


def test_a_bad_membership_value_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"^federation\.membership: unknown value 'open'"):
        _config(membership="open")


@pytest.mark.parametrize("name", sorted(NO_PARTICIPATION))
def test_an_algorithm_that_needs_every_client_refuses_elastic_membership(name):
    with pytest.raises(ConfigError, match=r"^federation\.membership: ") as info:
        sim_config(name, clients=4, budget=100, federation={"membership": "elastic"})
    assert NO_PARTICIPATION[name] in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "key,value", [("liveness_s", 5.0), ("min_clients", 3), ("client_budget", 60)]
)
def test_the_elastic_agent_settings_need_elastic_membership(key, value):
    with pytest.raises(ConfigError, match=rf"^agents\.{key}: applies to .*elastic"):
        sim_config("fedpne", clients=4, budget=100, agents={key: value})
    config = sim_config(
        "fedpne", clients=4, budget=100, agents={key: value}, federation={"membership": "elastic"}
    )
    assert getattr(config.agents, key) == value


def test_liveness_defaults_to_three_heartbeats():
    assert _config().agents.liveness == 3 * _config().agents.heartbeat_s
    with pytest.raises(ConfigError, match=r"^agents\.liveness_s: must be"):
        sim_config("fedpne", agents={"liveness_s": 0}, federation={"membership": "elastic"})


def test_a_client_budget_above_the_runs_is_refused_naming_the_field():
    elastic = {"membership": "elastic"}
    with pytest.raises(ConfigError, match=r"^agents\.client_budget: must be at most \[run\]"):
        sim_config("fedpne", budget=100, agents={"client_budget": 101}, federation=elastic)
    with pytest.raises(ConfigError, match=r"^agents\.client_budget: must be an integer >= 1"):
        sim_config("fedpne", budget=100, agents={"client_budget": 0}, federation=elastic)
    config = sim_config("fedpne", budget=100, agents={"client_budget": 100}, federation=elastic)
    assert run_id_for(config, SEED) == run_id_for(_with_budget(config, None), SEED)


def _with_budget(config, own):
    return dataclasses.replace(config, agents=dataclasses.replace(config.agents, client_budget=own))


# ------------------------------------------------------------------------- own budgets
@pytest.mark.parametrize("algorithm", ["fedpne", "dpfedpne"])
def test_a_client_with_its_own_budget_answers_the_phases_it_covers_then_withdraws(algorithm):
    config, everyone = _config(algorithm), lambda phase: list(range(CLIENTS))
    full, _ = _drive(config, everyone)
    pulls = [p["evaluations"] // CLIENTS for p in full.communication["per_phase"]]
    k = 1  # (DP-Fed-PNE's run at this budget has 3 phases)
    own = sum(pulls[:k]) + pulls[k] - 1  # covers k phases, not phase k + 1
    record, hosted = _drive(config, everyone, limits={5: own})
    phases = membership_of(record.communication)
    # phase k + 1: client 5 withdrew (pulled nothing) and the barrier took that; then it is out
    assert all(5 in p.asked and 5 in p.reported for p in phases[: k + 1])
    assert all(5 not in p.members and 5 not in p.asked for p in phases[k + 1 :])
    assert hosted.evaluators[5].used == sum(pulls[:k])
    assert hosted.clients[5].withdrawal.phase == k + 1
    assert "own budget" in hosted.clients[5].withdrawal.reason
    others = [hosted.evaluators[m].used for m in range(CLIENTS) if m != 5]
    assert others == [hosted.evaluators[0].used] * (CLIENTS - 1) and others[0] > own
    per_phase = record.communication["per_phase"]
    assert per_phase[k]["evaluations"] == (CLIENTS - 1) * pulls[k]
    assert record.regret_coverage is None  # the server expected of it what it made
    assert record.evaluations == sum(hosted.evaluators[m].used for m in range(CLIENTS))
    assert phases[k].withdrew == ((5, sum(pulls[:k])),)
    assert all(not p.withdrew for i, p in enumerate(phases) if i != k)
    again = replay(config, SEED, phases)  # (its config has no own budget: the record says)
    assert replay_differences(record, again) == []
    assert membership_of(RunRecord.from_dict(record.to_dict()).communication) == phases
    if algorithm == "dpfedpne":  # its ledger charges the k releases it made, no more
        privacy = record.privacy
        assert privacy["releases"][5] == k and privacy["releases"][0] == full.privacy["releases"][0]
        assert len(hosted.clients[5].events) == k
        by_phase = dict(privacy["epsilon_by_phase"])  # everyone's, phase by phase
        assert privacy["epsilon"][5] == pytest.approx(by_phase[k]) and by_phase[k] > 0
        assert privacy["epsilon"][5] < privacy["epsilon"][0]
        assert again.privacy["epsilon"] == privacy["epsilon"]


def test_a_phases_withdrawals_round_trip_and_bad_ones_are_refused():
    phase = PhaseMembers(2, (0, 5), (0, 5), (0, 5), ((5, 40),))
    assert PhaseMembers.from_dict(phase.to_dict()) == phase
    assert "withdrew" not in PhaseMembers(2, (0,), (0,), (0,)).to_dict()
    for bad in ([[5]], [[5, -1]], [["5", 40]], 3):
        with pytest.raises(ResultsError, match="'withdrew' must list"):
            PhaseMembers.from_dict({**phase.to_dict(), "withdrew": bad})


def test_client_budget_in_the_config_sets_every_hosted_clients_own_budget():
    config = _with_budget(_config(), 100)
    parts = build_run(
        config, SEED, run_id=run_id_for(config, SEED), server=False, client_ids=[2, 5]
    )
    assert [c.limit for c in parts.clients.clients.values()] == [100, 100]
    unset = build_run(
        _config(), SEED, run_id=run_id_for(config, SEED), server=False, client_ids=[2]
    )
    assert unset.clients.clients[2].limit is None


# --------------------------------------------------------------------------------- roster
def test_the_roster_joins_leaves_silence_and_rejoin():
    roster = Roster(liveness_s=10.0)
    assert roster.join(1, 0.0) and roster.join(2, 0.0) and roster.join(3, 0.0)
    assert not roster.join(1, 1.0)  # a repeated join: still in
    roster.seen(1, 9.0)
    assert roster.members(9.5) == [1, 2, 3]
    assert roster.leave(2, 9.5)  # a clean leave
    assert roster.members(15.0) == [1]  # 3 silent since 0.0: gone after 10 s
    assert roster.gone([1, 2, 3], 15.0) == {2, 3}
    assert roster.join(3, 16.0)  # a rejoin
    assert roster.members(16.0) == [1, 3]
    assert roster.take_events() == ([1, 2, 3, 3], [2])
    assert roster.take_events() == ([], [])


def test_the_asked_mask_round_trips_and_refuses_bad_bits():
    asked = {0, 5, 9}
    wire = asked_to_wire(asked, 10)
    assert len(wire) == 2 and asked_from_wire(wire, 10) == asked
    with pytest.raises(ProtocolError, match="beyond 9"):
        asked_from_wire(bytes([0, 0b00100000]), 10)
    with pytest.raises(ProtocolError, match="mask of 10 bits"):
        asked_from_wire(b"\x00", 10)


# ------------------------------------------------------------------- session-level rules
def test_every_client_every_phase_is_the_fixed_run():
    config = _config()
    record, _ = _drive(config, lambda phase: list(range(CLIENTS)))
    fixed = Federation(_config(membership=None), SEED).run()
    assert np.array_equal(record.recommendation, fixed.recommendation)
    assert np.array_equal(record.cumulative_regret, fixed.cumulative_regret)
    strip = [{k: v for k, v in p.items()} for p in fixed.communication["per_phase"]]
    assert record.communication["per_phase"] == strip
    assert "membership" not in fixed.communication
    assert all(
        p.members == p.asked == p.reported == tuple(range(CLIENTS))
        for p in membership_of(record.communication)
    )


def test_join_after_phase_one_leave_silence_and_rejoin():
    # phase 1: clients 0-3; 4-5 join at phase 2; 1 leaves after phase 2 and rejoins at 4;
    # client 2 is asked in phase 3 but dies without a report (the barrier does not wait)
    schedule = {1: [0, 1, 2, 3], 2: [0, 1, 2, 3, 4, 5], 3: [0, 2, 3, 4, 5]}

    def members(phase):
        return schedule.get(phase, [0, 1, 3, 4, 5])

    def reported(phase, asked):
        return [m for m in asked if not (phase == 3 and m == 2)]

    record, hosted = _drive(_config(), members, reported)
    phases = membership_of(record.communication)
    assert [p.members for p in phases[:4]] == [
        (0, 1, 2, 3),
        (0, 1, 2, 3, 4, 5),
        (0, 2, 3, 4, 5),
        (0, 1, 3, 4, 5),
    ]
    assert phases[2].asked == (0, 2, 3, 4, 5) and phases[2].reported == (0, 3, 4, 5)
    per_phase = record.communication["per_phase"]
    assert [p["reports_accepted"] for p in per_phase[:4]] == [4, 6, 4, 5]
    # each client pulled only in the phases it was asked in; the rest left its schedule
    pulls = [p["evaluations"] for p in per_phase]
    length = [pulls[i] // max(1, len(phases[i].asked)) for i in range(len(phases))]
    for m in range(CLIENTS):
        made = sum(length[i] for i, p in enumerate(phases) if m in p.asked)
        assert hosted.evaluators[m].used == made, m
    assert hosted.evaluators[6].used == 0  # never joined: never pulled
    assert record.evaluations == sum(pulls)


def test_a_phase_whose_asked_clients_all_leave_spends_its_pulls():
    record, _ = _drive(
        _config(), lambda phase: list(range(CLIENTS)), lambda p, a: [] if p == 2 else a
    )
    phases = membership_of(record.communication)
    assert phases[1].reported == () and phases[1].asked == tuple(range(CLIENTS))
    per_phase = record.communication["per_phase"]
    assert per_phase[1]["reports_accepted"] == 0
    assert per_phase[2]["depth"] == per_phase[1]["depth"]  # the same nodes asked again


# ------------------------------------------------------------------------------- replay
def _record_of(config, members, reported):
    record, _ = _drive(config, members, reported)
    return record


@pytest.mark.parametrize("algorithm", ["fedpne", "dpfedpne"])
def test_the_replay_of_the_record_gives_the_same_run(algorithm):
    config = _config(algorithm)

    def members(phase):
        return [m for m in range(CLIENTS) if (m + phase) % 4 != 0]

    def reported(phase, asked):
        return [m for m in asked if (m * phase) % 7 != 3]

    original = _record_of(config, members, reported)
    record = membership_of(original.communication)
    again = replay(config, SEED, record)
    assert replay_differences(original, again) == []
    assert np.array_equal(original.recommendation, again.recommendation)
    if algorithm == "dpfedpne":  # each client charged its own releases only
        epsilon = original.privacy["epsilon"]
        asked = [sum(m in p.asked for p in record) for m in range(CLIENTS)]
        assert all((e > 0) == (k > 0) for e, k in zip(epsilon, asked, strict=True))
        assert epsilon == again.privacy["epsilon"]
    # the record goes through a results file and back
    read = RunRecord.from_dict(original.to_dict())
    assert membership_of(read.communication) == record


def test_the_replay_refuses_another_runs_record():
    config = _config()
    original = _record_of(config, lambda p: list(range(CLIENTS)), lambda p, a: a)
    record = membership_of(original.communication)
    with pytest.raises(ReplayError, match="phase 1: the record asks"):
        replay(_config(participation=0.5), SEED, record)
    with pytest.raises(ReplayError, match="no phase"):
        replay(config, SEED, record[:2])


def test_replay_differences_names_what_differs():
    config = _config()
    original = _record_of(config, lambda p: list(range(CLIENTS)), lambda p, a: a)
    moved = dataclasses.replace(original, recommendation=original.recommendation + 1e-9)
    assert replay_differences(original, moved)[0].startswith("recommendation")


def test_in_process_every_client_is_in_the_run():
    elastic = Federation(_config(), SEED).run()
    fixed = Federation(_config(membership=None), SEED).run()
    assert np.array_equal(elastic.recommendation, fixed.recommendation)
    assert elastic.communication == fixed.communication


def test_fedxab_replay_says_identical_or_what_is_missing(tmp_path):
    from typer.testing import CliRunner

    from fedxab.cli import app
    from fedxab.results import RunResults, write_results

    config = _config()
    schedule = [0, 1, 2, 3, 5]
    original = _record_of(config, lambda p: schedule, lambda p, a: a)

    def results_of(run, cfg):
        return RunResults(
            config=cfg.to_dict(), algorithm="fedpne", objective={"name": "garland"}, runs=(run,)
        )

    path = write_results(results_of(original, config), tmp_path / "elastic")
    invoked = CliRunner().invoke(app, ["replay", str(path)])
    assert invoked.exit_code == 0, invoked.output
    assert invoked.output.strip() == f"seed {SEED}: identical"
    fixed = Federation(_config(membership=None), SEED).run()
    path = write_results(results_of(fixed, _config(membership=None)), tmp_path / "fixed")
    invoked = CliRunner().invoke(app, ["replay", str(path)])
    assert invoked.exit_code == 2 and "has no membership record" in invoked.output


def test_the_checkpoint_keeps_each_phases_members(tmp_path):
    from fedxab.agents.checkpoint import ServerCheckpoint
    from fedxab.run.membership import PhaseMembers
    from fedxab.run.session import ClosedPhase

    members = PhaseMembers(1, (0, 2, 5), (0, 5), (5,))
    checkpoint = ServerCheckpoint(tmp_path / "run.ckpt", "run-1")
    checkpoint.append(ClosedPhase(1, {5: b"x"}, {"phase": 1}, members))
    (loaded,) = ServerCheckpoint(tmp_path / "run.ckpt", "run-1").load()
    assert loaded.members == members and loaded.reports == {5: b"x"}


def test_elastic_with_participation_samples_the_members_and_replays():
    from fedxab.run.participation import Participation

    config = _config(participation=0.5)
    schedule = {1: [0, 1, 2, 3, 4], 2: [0, 1, 2, 3, 4, 5, 6, 7]}
    original = _record_of(
        config, lambda p: schedule.get(p, [1, 3, 5, 7]), lambda p, a: [m for m in a if m != 3]
    )
    phases = membership_of(original.communication)
    sample = Participation(SEED, CLIENTS, 0.5)
    assert all(p.asked == tuple(sample.asked(p.phase, p.members)) for p in phases)
    assert any(p.asked != p.members for p in phases)  # a sample of the members
    assert replay_differences(original, replay(config, SEED, phases)) == []
