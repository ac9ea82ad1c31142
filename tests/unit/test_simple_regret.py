"""Simple-regret curves of federated runs (spec-dpftsde §7.1 metric): per round t, the mean over
clients of ``min_{tau <= t} (f_m* - f_m(x_{m,tau}))`` (local) and of ``min_{tau <= t} (f* -
f(x_{m,tau}))`` (global), noise-free, kept by :class:`RegretSums` in O(M + T) memory."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest
from config_factory import sim_config

from fedxab.agents.distributed import run_on_broker
from fedxab.agents.federation import Federation
from fedxab.broker.memory import MemoryBroker
from fedxab.results import RunRecord, RunResults, summarize
from fedxab.run.evaluation import RegretSums, Telemetry


def _tel(phase, client, start, g, loc=None):
    g = np.asarray(g, dtype=float)
    return Telemetry(
        phase, client, start, g.size, g, None if loc is None else np.asarray(loc, dtype=float)
    )


def _sums(m, t, *, local=True):
    return RegretSums(m, t, global_known=True, local_known=local)


# ------------------------------------------------------------------------ hand-computed cases
def test_two_clients_with_out_of_order_telemetry_hand_computed():
    sums = _sums(2, 5)
    # client 0: phase 1 pulls 2 points, phase 2 pulls 3; client 1: 3 then 2
    c0p1 = _tel(1, 0, 0, [0.5, 0.7], [0.6, 0.8])
    c0p2 = _tel(2, 0, 2, [0.3, 0.4, 0.1], [0.2, 0.5, 0.4])
    c1p1 = _tel(1, 1, 0, [0.9, 0.2, 0.6], [0.1, 0.3, 0.0])
    c1p2 = _tel(2, 1, 3, [0.05, 0.3], [0.2, 0.1])
    for t in (c1p2, c0p2, c1p1, c0p1):  # arrival order: latest first
        assert sums.add(t)
    assert not sums.add(c1p1)  # a redelivered copy changes nothing
    sums.flush()
    g, loc = sums.simple_curves(np.arange(1, 6))
    # client 0 global minima: .5 .5 .3 .3 .1 ; client 1: .9 .2 .2 .05 .05
    np.testing.assert_allclose(g, [0.7, 0.35, 0.25, 0.175, 0.075], rtol=0, atol=1e-15)
    # client 0 local minima: .6 .6 .2 .2 .2 ; client 1: .1 .1 0 0 0
    np.testing.assert_allclose(loc, [0.35, 0.35, 0.1, 0.1, 0.1], rtol=0, atol=1e-15)
    # on a coarser grid of rounds: the same values at those rounds
    g2, _ = sums.simple_curves(np.array([2, 5]))
    np.testing.assert_allclose(g2, [0.35, 0.075], rtol=0, atol=1e-15)


def test_a_client_that_stopped_early_keeps_its_last_best_value():
    sums = _sums(2, 6, local=False)
    sums.add(_tel(1, 0, 0, [1.0, 0.8]))
    sums.add(_tel(1, 1, 0, [0.4, 0.3]))
    sums.flush()
    sums.add(_tel(2, 0, 2, [0.6, 0.9, 0.2, 0.5]))  # client 1 withdrew after 2 evaluations
    sums.flush()
    g, loc = sums.simple_curves(np.arange(1, 7))
    assert loc is None  # local optima unknown
    # client 0: 1 .8 .6 .6 .2 .2 ; client 1: .4 .3 then .3 carried to the end
    np.testing.assert_allclose(g, [0.7, 0.55, 0.45, 0.45, 0.25, 0.25], rtol=0, atol=1e-15)


def test_missing_positions_carry_the_best_value_so_far():
    sums = _sums(1, 6, local=False)
    sums.add(_tel(3, 0, 4, [0.45, 0.1]))  # phase 2 (positions 3 and 4) never arrived
    sums.add(_tel(1, 0, 0, [0.5, 0.4]))
    sums.flush()
    g, _ = sums.simple_curves(np.arange(1, 7))
    np.testing.assert_allclose(g, [0.5, 0.4, 0.4, 0.4, 0.4, 0.1], rtol=0, atol=1e-15)


def test_rounds_before_any_client_evaluated_leave_the_curve_undefined():
    sums = _sums(2, 4, local=False)
    sums.add(_tel(2, 0, 2, [0.3, 0.2]))  # only late telemetry: rounds 1-2 unknown
    sums.flush()
    assert sums.simple_curves(np.arange(1, 5)) == (None, None)
    g, _ = sums.simple_curves(np.array([3, 4]))
    np.testing.assert_allclose(g, [0.3, 0.2])


def test_telemetry_arriving_after_a_later_phase_was_flushed_drops_the_curves(caplog):
    sums = _sums(1, 4, local=False)
    sums.add(_tel(2, 0, 2, [0.3, 0.2]))
    sums.flush()
    sums.add(_tel(1, 0, 0, [0.5, 0.4]))
    with caplog.at_level(logging.WARNING, logger="fedxab.run.evaluation"):
        sums.flush()
    assert "simple regret dropped" in caplog.text
    assert sums.simple_curves(np.arange(1, 5)) == (None, None)
    # the cumulative sums are unaffected
    np.testing.assert_allclose(sums.global_sum, [0.5, 0.4, 0.3, 0.2])


# ------------------------------------------------------------------- against a real runner
def _config(name="fedpne", heterogeneity="shift", budget=400, clients=3, params=None, **extra):
    return sim_config(
        name,
        clients=clients,
        budget=budget,
        objective="himmelblau",
        heterogeneity=heterogeneity,
        params=params,
        **extra,
    )


def _brute_force(fed: Federation, rounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Recompute both curves from the evaluated points: per-client running minima of the
    noise-free regret, a client that stopped carrying its last one, summed in client order."""
    fam, T = fed.family, fed.budget
    g_total, l_total = np.zeros(T), np.zeros(T)
    for m, batches in enumerate(fed.points):
        X = np.concatenate(batches)
        g = np.minimum.accumulate(fam.global_objective.optimum_value - fam.global_objective(X))
        loc = np.minimum.accumulate(fam.clients[m].optimum_value - fam.clients[m](X))
        pad = T - X.shape[0]
        g_total += np.concatenate([g, np.full(pad, g[-1])])
        l_total += np.concatenate([loc, np.full(pad, loc[-1])])
    n = fed.n_clients
    return g_total[rounds - 1] / n, l_total[rounds - 1] / n


def test_in_process_curves_equal_a_brute_force_recomputation():
    fed = Federation(_config(), seed=4, keep_points=True)
    rec = fed.run()
    g, loc = _brute_force(fed, rec.rounds)
    np.testing.assert_array_equal(rec.global_simple_regret, g)
    np.testing.assert_array_equal(rec.local_simple_regret, loc)
    assert not np.array_equal(g, loc)  # shifted clients: local and global differ
    assert np.all(np.diff(rec.global_simple_regret) <= 0)
    assert np.all(rec.local_simple_regret >= 0)
    # in the summary, at the final round
    s = summarize([rec])
    assert s["global_simple_regret"] == {"mean": g[-1], "std": 0.0}
    assert s["local_simple_regret"] == {"mean": loc[-1], "std": 0.0}


def test_withdrawn_clients_carry_their_best_value_in_a_private_run():
    cfg = _config(
        "dpfedpne",
        budget=2000,
        params={"epsilon": 0.5, "privacy_delta": 1e-3, "composition": "sequential"},
        privacy={"budget_epsilon": 0.55},
    )
    fed = Federation(cfg, seed=2, keep_points=True)
    rec = fed.run()
    assert fed.withdrawn and int(fed.used.max()) < 2000  # every client stopped early
    g, loc = _brute_force(fed, rec.rounds)
    np.testing.assert_array_equal(rec.global_simple_regret, g)
    np.testing.assert_array_equal(rec.local_simple_regret, loc)


def test_a_broker_run_gives_the_same_curves_as_in_process():
    cfg = _config(budget=300)
    here = Federation(cfg, seed=1).run()
    there = asyncio.run(run_on_broker(cfg, 1, MemoryBroker(), hosts=2))
    np.testing.assert_array_equal(there.global_simple_regret, here.global_simple_regret)
    np.testing.assert_array_equal(there.local_simple_regret, here.local_simple_regret)


# ------------------------------------------------------------------------ the results file
def _record(simple: bool) -> RunRecord:
    rounds = np.array([1, 2, 3])
    return RunRecord(
        seed=0,
        rounds=rounds,
        cumulative_regret=np.array([0.5, 0.9, 1.2]),
        recommendation=np.array([0.3]),
        simple_regret=0.1,
        evaluations=6,
        wall_time_s=0.01,
        local_cumulative_regret=np.array([0.4, 0.8, 1.0]),
        communication={
            "clients": 2,
            "rounds": 1,
            "messages_up": 2,
            "messages_down": 2,
            "bytes_up": 10,
            "bytes_down": 10,
            "per_phase": [],
        },
        global_simple_regret=np.array([0.5, 0.4, 0.3]) if simple else None,
        local_simple_regret=np.array([0.4, 0.4, 0.2]) if simple else None,
    )


def test_simple_curves_are_serialised_only_when_present_and_load_back():
    with_curves, without = _record(True), _record(False)
    d = with_curves.to_dict()
    assert d["global_simple_regret"] == [0.5, 0.4, 0.3]
    assert d["local_simple_regret"] == [0.4, 0.4, 0.2]
    back = RunRecord.from_dict(d)
    np.testing.assert_array_equal(back.global_simple_regret, [0.5, 0.4, 0.3])
    np.testing.assert_array_equal(back.local_simple_regret, [0.4, 0.4, 0.2])
    plain = without.to_dict()
    assert "global_simple_regret" not in plain and "local_simple_regret" not in plain
    old = RunRecord.from_dict(plain)  # files written before the curves existed
    assert old.global_simple_regret is None and old.local_simple_regret is None
    assert "global_simple_regret" not in summarize([without])
    s = summarize([with_curves, _record(True)])
    assert s["global_simple_regret"] == pytest.approx({"mean": 0.3, "std": 0.0})
    assert s["local_simple_regret"] == pytest.approx({"mean": 0.2, "std": 0.0})
    res = RunResults(config={}, algorithm="fedpne", objective={}, runs=(with_curves,))
    assert RunResults.from_dict(res.to_dict()).to_dict() == res.to_dict()


def test_a_curve_of_the_wrong_length_is_rejected():
    from fedxab.results import ResultsError

    d = _record(True).to_dict() | {"local_simple_regret": [0.1, 0.2]}
    with pytest.raises(ResultsError, match="local_simple_regret"):
        RunRecord.from_dict(d)


def test_long_and_short_entries_give_a_loops_sums_by_slices_or_at_once(monkeypatch):
    """Fed-PNE's shape: entries of a few to a few hundred pulls, clients overlapping in the
    rounds they cover. However flush adds them -- every entry by slices, every entry in one
    ``np.add.at``, or the default (long entries by slices, the short ones between them at
    once) -- each round's sum is the same sequence of additions as a loop over the entries in
    (phase, client) order, bit for bit (the terms span six orders of magnitude, so another
    order of additions shows in the bits)."""
    rng = np.random.default_rng(11)
    m, budget = 5, 600
    used = [0] * m
    entries = []
    for phase in range(1, 9):
        for c in range(m):
            n = min(int(rng.choice([1, 3, 20, 70, 150])), budget - used[c])
            if n:
                scale = 10.0 ** rng.integers(-3, 3, size=n)
                entries.append(_tel(phase, c, used[c], rng.random(n) * scale, rng.random(n)))
                used[c] += n

    def run(long_entry):
        monkeypatch.setattr("fedxab.run.evaluation._LONG_ENTRY", long_entry)
        sums = _sums(m, budget)
        for t in reversed(entries):
            sums.add(t)
        sums.flush()
        return sums

    mixed, by_slices, at_once = run(64), run(1), run(10**9)
    expected = np.zeros(budget)
    for t in entries:  # already in (phase, client) order
        for k, value in enumerate(t.global_terms):
            expected[t.start + k] = float(expected[t.start + k]) + float(value)
    assert mixed.global_sum.tobytes() == expected.tobytes()
    for other in (by_slices, at_once):
        _assert_same_sums(mixed, other)


def test_one_pull_phases_give_the_same_sums_flushed_each_phase_at_the_end_or_in_pieces(
    monkeypatch,
):
    """Centralised HCT's shape: every phase, each asked client pulls once (here some skip a
    phase, leaving gaps). Flushing after every phase (one term per client: the vectorised
    path), once at the end (several entries per client) and at the end in pieces of 7 pulls
    give the same sums bit for bit, and the cumulative sums are a loop's additions in
    (phase, client) order."""
    rng = np.random.default_rng(5)
    m, budget = 6, 40
    used = [0] * m
    phases = []
    for phase in range(1, budget + 1):
        asked = [c for c in range(m) if rng.random() < 0.8 and used[c] < budget]
        phases.append(
            [
                _tel(phase, c, used[c], rng.random(1) * 10.0 ** rng.integers(-3, 3), rng.random(1))
                for c in asked
            ]
        )
        for c in asked:
            used[c] += 1

    def run(flush_each_phase):
        sums = _sums(m, budget)
        for entries in phases:
            for t in reversed(entries):
                sums.add(t)
            if flush_each_phase:
                sums.flush()
        sums.flush()
        return sums

    each, end = run(True), run(False)
    monkeypatch.setattr("fedxab.run.evaluation._FLUSH_PULLS", 7)
    pieces = run(False)
    expected = np.zeros(budget)
    for entries in phases:
        for t in entries:
            expected[t.start] = float(expected[t.start]) + float(t.global_terms[0])
    assert each.global_sum.tobytes() == expected.tobytes()
    rounds = np.arange(1, budget + 1)
    for other in (end, pieces):
        _assert_same_sums(each, other)
        for a, b in zip(each.simple_curves(rounds), other.simple_curves(rounds), strict=True):
            assert a.tobytes() == b.tobytes()


def _assert_same_sums(a, b) -> None:
    """Two RegretSums hold the same bits in every per-round sum and the same phase counts."""
    for name in ("global_sum", "local_sum", "pulls_at", "global_simple_sum", "local_simple_sum"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name
    assert a.evaluations_by_phase == b.evaluations_by_phase
