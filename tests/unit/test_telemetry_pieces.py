"""Telemetry in pieces: a long phase's regret terms travel as several messages of bounded size;
the server's sums are the same, bit for bit, and a missing piece leaves them incomplete."""

from __future__ import annotations

import numpy as np
import pytest

from fedxab.run.evaluation import RegretSums, Telemetry, telemetry_batches


def _telemetry(phase: int, client: int, start: int, count: int, seed: int = 0) -> Telemetry:
    rng = np.random.default_rng([seed, phase, client])
    return Telemetry(phase, client, start, count, rng.random(count), rng.random(count))


def test_split_cuts_at_fixed_offsets_and_keeps_every_term():
    whole = _telemetry(3, 1, 100, 10)
    pieces = whole.split(4)
    assert [(p.start, p.count) for p in pieces] == [(100, 4), (104, 4), (108, 2)]
    assert all(p.phase == 3 and p.client == 1 for p in pieces)
    for name in ("global_terms", "local_terms"):
        joined = np.concatenate([getattr(p, name) for p in pieces])
        np.testing.assert_array_equal(joined, getattr(whole, name))
    assert whole.split(10) == [whole]


def test_batches_hold_at_most_the_limit_and_keep_the_order():
    entries = [_telemetry(p, 0, 30 * p, n) for p, n in enumerate([3, 0, 25, 1, 7])]
    batches = telemetry_batches(entries, 8)
    assert all(sum(t.count for t in b) <= 8 for b in batches)
    flat = [t for b in batches for t in b]
    assert [(t.phase, t.start, t.count) for t in flat] == [
        (0, 0, 3), (1, 30, 0), (2, 60, 8), (2, 68, 8), (2, 76, 8), (2, 84, 1), (3, 90, 1),
        (4, 120, 7),
    ]  # fmt: skip
    assert telemetry_batches([], 8) == []


def _sums(entries: list[Telemetry]) -> RegretSums:
    sums = RegretSums(2, 60, global_known=True, local_known=True)
    for t in entries:
        sums.add(t)
    sums.flush()
    return sums


@pytest.mark.parametrize("piece", [1, 3, 7, 30])
def test_the_sums_of_pieces_equal_the_sums_of_whole_entries(piece):
    whole = [_telemetry(p, m, 20 * p, 20) for p in range(3) for m in range(2)]
    pieces = [q for t in whole for q in t.split(piece)]
    a, b = _sums(whole), _sums(pieces[::-1] + pieces[:5])  # any order, some twice
    for name in ("global_sum", "local_sum", "global_simple_sum", "local_simple_sum"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.evaluations_by_phase == b.evaluations_by_phase == {0: 40, 1: 40, 2: 40}
    assert b.complete(np.array([60, 60]))


def test_a_missing_piece_leaves_the_telemetry_incomplete():
    pieces = [q for p in range(3) for q in _telemetry(p, 0, 20 * p, 20).split(7)]
    pieces += _telemetry(0, 1, 0, 60).split(7)
    sums = _sums(pieces[:4] + pieces[5:])  # one piece of client 0's phase 1 lost
    assert (sums.used == 60).all()  # the furthest position is there...
    assert not sums.complete(np.array([60, 60]))  # ...but not every evaluation
    sums.add(pieces[4])
    assert sums.complete(np.array([60, 60]))


# ------------------------------------------------------- means over the clients that reported
def _terms(g) -> np.ndarray:
    return np.asarray(g, dtype=float)


def test_a_client_whose_telemetry_never_came_is_left_out_of_the_mean_not_counted_as_zero():
    """Three clients owe 4 rounds each; client 2 never reports, and client 1 withdrew after 2
    rounds (it owes 2). Round means: (1 + 3) / 2 = 2 (clients 0 and 1), (1 + 3) / 2 = 2, then
    client 1 counts with no regret (it made no pull, as in process): 1 / 2, 1 / 2."""
    sums = RegretSums(3, 4, global_known=True, local_known=False)
    sums.add(Telemetry(1, 0, 0, 4, _terms([1, 1, 1, 1]), None))
    sums.add(Telemetry(1, 1, 0, 2, _terms([3, 3]), None))
    sums.flush()
    expected = np.array([4, 2, 4])
    np.testing.assert_array_equal(sums.reporting(expected), [2, 2, 2, 2])
    cum, _ = sums.curves(np.arange(1, 5), expected)
    np.testing.assert_allclose(cum, [2.0, 4.0, 4.5, 5.0], rtol=0, atol=1e-15)
    # the old reading, dividing by every client, gave 2/3 of that
    old, _ = sums.curves(np.arange(1, 5))
    np.testing.assert_allclose(old, np.array([4, 8, 9, 10]) / 3, rtol=0, atol=1e-15)


def test_with_every_client_reported_the_mean_is_the_sum_over_m_bit_for_bit():
    rng = np.random.default_rng(0)
    sums = RegretSums(3, 50, global_known=True, local_known=True)
    for m in range(3):
        sums.add(Telemetry(1, m, 0, 50, rng.random(50), rng.random(50)))
    sums.flush()
    full = np.full(3, 50)
    rounds = np.arange(1, 51)
    with_expected, without = sums.curves(rounds, full), sums.curves(rounds)
    for a, b in zip(with_expected, without, strict=True):
        assert np.array_equal(a, b)


def test_a_round_no_client_reported_makes_the_curve_unknown_from_there():
    sums = RegretSums(2, 4, global_known=True, local_known=False)
    sums.add(Telemetry(1, 0, 0, 2, _terms([1, 1]), None))
    sums.flush()
    cum, _ = sums.curves(np.arange(1, 5), np.array([4, 4]))
    assert cum[:2].tolist() == [1.0, 2.0] and np.isnan(cum[2:]).all()


def test_terms_travel_run_length_encoded_and_come_back_bit_for_bit():
    from fedxab.broker.codec import packb, unpackb
    from fedxab.errors import ProtocolError
    from fedxab.run.evaluation import run_lengths, telemetry_from_wire, telemetry_to_wire

    terms = np.array([0.5, 0.5, 0.5, 0.0, -0.0, -0.0, 1e-300, 0.5, 0.5])
    values, runs = run_lengths(terms)
    assert runs.tolist() == [3, 1, 2, 1, 2]  # 0.0 and -0.0 are different bits: two runs
    assert values.tolist() == [0.5, 0.0, -0.0, 1e-300, 0.5]
    # three phases of one client in one message: the terms encoded once, over all three
    entries = [
        Telemetry(2, 1, 40, 9, terms, np.full(9, 0.25)),
        Telemetry(3, 1, 49, 0, np.empty(0), np.empty(0)),
        Telemetry(4, 1, 49, 2, np.array([0.5, 0.5]), np.array([0.25, 0.5])),
    ]
    wire = telemetry_to_wire(entries)
    assert wire["local_terms"].tolist() == [0.25, 0.5]
    assert wire["local_terms_runs"].tolist() == [10, 1]
    assert wire["global_terms_runs"].tolist() == [3, 1, 2, 1, 4]  # the runs span entries
    back = telemetry_from_wire(unpackb(packb(wire)))
    assert [(t.phase, t.client, t.start, t.count) for t in back] == [
        (2, 1, 40, 9), (3, 1, 49, 0), (4, 1, 49, 2)
    ]  # fmt: skip
    for a, b in zip(entries, back, strict=True):
        for name in ("global_terms", "local_terms"):
            assert getattr(b, name).tobytes() == getattr(a, name).tobytes()
    (alone,) = telemetry_from_wire(telemetry_to_wire([Telemetry(0, 0, 0, 3, None, None)]))
    assert alone.global_terms is None and alone.local_terms is None and alone.count == 3
    for bad in ({"global_terms_runs": [3, 1, 2, 1, 3]}, {"global_terms_runs": [3, 1, 2, 5, 0]},
                {"global_terms_runs": [11]}, {"counts": [9, 0]}, {"starts": [40, -1, 49]},
                {"phases": []}, {"client": "1"}):  # fmt: skip
        with pytest.raises(ProtocolError):
            telemetry_from_wire(wire | bad)
    with pytest.raises(ProtocolError, match="map of fields"):
        telemetry_from_wire([wire])
    with pytest.raises(ValueError, match="one client"):
        telemetry_to_wire([entries[0], Telemetry(2, 2, 0, 0, np.empty(0), np.empty(0))])


def test_the_same_terms_are_encoded_once_per_flush_and_decoded_once_while_held():
    """A client agent's clients that pulled the same batches hold the same arrays of global
    terms: encoded once per flush (``encoded``, by identity), with the same bytes as alone;
    a server decodes equal terms once (``shared``), read-only, while an entry holds them."""
    import weakref

    from fedxab.broker.codec import packb, unpackb
    from fedxab.run.evaluation import telemetry_from_wire, telemetry_to_wire

    glob = [np.array([0.5, 0.5, 0.25]), np.array([0.25, 0.0])]
    clients = [
        [Telemetry(0, m, 0, 3, glob[0], np.full(3, m + 0.5)),
         Telemetry(1, m, 3, 2, glob[1], np.full(2, m + 0.5))]
        for m in range(3)
    ]  # fmt: skip
    encoded: dict = {}
    bodies = [packb(telemetry_to_wire(entries, encoded)) for entries in clients]
    assert bodies == [packb(telemetry_to_wire(entries)) for entries in clients]
    assert len(encoded) == 1 + 3  # the shared global terms once, each client's local terms
    shared: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
    back = [telemetry_from_wire(unpackb(body), shared) for body in bodies]
    assert back[0][0].global_terms.base is back[2][0].global_terms.base  # one array
    assert back[0][0].local_terms.base is not back[1][0].local_terms.base
    for entries, decoded in zip(clients, back, strict=True):
        for a, b in zip(entries, decoded, strict=True):
            assert not b.global_terms.flags.writeable and not b.local_terms.flags.writeable
            for name in ("global_terms", "local_terms"):
                assert getattr(b, name).tobytes() == getattr(a, name).tobytes()
    assert len(shared) == 1 + 3
    del back, decoded, b
    assert len(shared) == 0  # nothing kept once no entry holds them


def test_clients_pulling_the_same_batch_share_one_array_of_global_regret_terms():
    """``f* - f(X)`` is computed once per batch and shared, read-only, by the clients that pull
    it (a client agent holds its clients' terms until it sends them); the bits are those of
    ``f* - f(X)``, and a new batch gets its own array."""
    from fedxab.objectives.families import value_offset_family
    from fedxab.objectives.noise import UniformNoise
    from fedxab.objectives.registry import make_objective
    from fedxab.run.evaluation import ClientEvaluator, GlobalValues

    family = value_offset_family(make_objective("garland"), 2, seed=0)
    glob = family.global_objective
    shared = GlobalValues(glob)
    a, b = (
        ClientEvaluator(m, family, UniformNoise(), seed=0, budget=10, global_values=shared)
        for m in (0, 1)
    )
    X = np.linspace(0.0, 1.0, 4).reshape(-1, 1)
    a(X)
    b(X)
    first, second = a.take(1).global_terms, b.take(1).global_terms
    assert first is second and not first.flags.writeable
    assert first.tobytes() == (glob.optimum_value - glob(X)).tobytes()
    a(X[:2])
    assert a.take(2).global_terms.tobytes() == first[:2].tobytes()
    assert shared.regret_terms() is not first
