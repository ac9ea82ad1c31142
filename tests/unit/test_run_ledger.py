"""A run's privacy block: epsilon over time (``epsilon_by_phase``), recomputed from the events."""

from __future__ import annotations

import itertools
from unittest import mock

import pytest

from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.privacy.run_ledger import RunLedger

A = PrivacyEvent("gaussian", 1.2, 0.25, 1.0, 1)
B = PrivacyEvent("gaussian", 0.8, 1.0, 1.0, 1)
C = PrivacyEvent("gaussian", 2.0, 1.0, 1.0, 1, "phase-3")
DELTA = 1e-5


def _run_ledger() -> RunLedger:
    return RunLedger(PrivacyLedger(":memory:"), "r", delta=DELTA)


def test_epsilon_by_phase_is_the_max_over_clients_of_the_epsilon_so_far():
    run = _run_ledger()
    led = run.ledger
    # clients 0 and 1: the same history (one group); client 2 releases more, later; client 3
    # never releases; client 4 releases but is not a client of the block.
    for m in (0, 1):
        led.record("r", m, 1, A)
        led.record("r", m, 1, A, release=1)
        led.record("r", m, 3, C)
    led.record("r", 2, 2, B)
    led.record("r", 2, 4, A)
    led.record("r", 4, 5, B)
    acc = make_accountant("rdp")

    def eps(*events):
        return acc.epsilon(list(events), DELTA)

    block = run.block(range(4), {})
    expected = [
        [1, eps(A, A)],
        [2, max(eps(A, A), eps(B))],
        [3, max(eps(A, A, C), eps(B))],
        [4, max(eps(A, A, C), eps(B, A))],
    ]
    got = block["epsilon_by_phase"]
    assert [p for p, _ in got] == [p for p, _ in expected]
    assert [e for _, e in got] == pytest.approx([e for _, e in expected], rel=1e-12)
    assert got[-1][1] == block["max_epsilon"]  # the same accounting as the per-client epsilon
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(got))


def test_clients_with_the_same_history_share_one_computation():
    run = _run_ledger()
    for m in range(50):
        run.ledger.record("r", m, 1, A)
        run.ledger.record("r", m, 2, B)
    with mock.patch.object(
        run.ledger.accountant, "epsilon", wraps=run.ledger.accountant.epsilon
    ) as spy:
        by_phase = run.epsilon_by_phase(range(50))
    assert spy.call_count == 2  # one per distinct prefix of the one group
    assert [p for p, _ in by_phase] == [1, 2]


def test_a_run_without_releases_has_no_epsilon_by_phase():
    assert _run_ledger().block(range(3), {})["epsilon_by_phase"] == []
