"""What a client observed (fedxab.run.outcome): best value, where, best-so-far curve."""

from __future__ import annotations

import numpy as np
import pytest

from fedxab.regret import round_grid
from fedxab.run.outcome import OUTCOME_POINTS, ClientOutcome, ObservedBest


def _feed(tracker: ObservedBest, X: np.ndarray, y: np.ndarray, batches: list[int]) -> None:
    start = 0
    for n in batches:
        tracker.add(X[start : start + n], y[start : start + n])
        start += n


@pytest.mark.parametrize("batches", [[1000], [1] * 1000, [7, 993], [500, 0, 250, 250]])
def test_the_curve_is_the_running_maximum_at_the_grid_whatever_the_batches(batches):
    rng = np.random.default_rng(3)
    X, y = rng.random((1000, 2)), rng.normal(size=1000)
    tracker = ObservedBest(4, 1000)
    _feed(tracker, X, y, batches)
    out = tracker.outcome()
    grid = round_grid(1000, OUTCOME_POINTS)
    np.testing.assert_array_equal(out.rounds, grid)
    np.testing.assert_array_equal(out.best_so_far, np.maximum.accumulate(y)[grid - 1])
    i = int(np.argmax(y))
    assert (out.client, out.evaluations, out.best_value) == (4, 1000, y[i])
    np.testing.assert_array_equal(out.best_point, X[i])


def test_minimise_reports_the_users_values_and_nan_before_the_first_pull():
    tracker = ObservedBest(0, 10, "minimize")  # grid: every round
    costs = np.array([5.0, 3.0, 4.0, 1.0])
    tracker.add(np.arange(4.0)[:, None], -costs)  # fedxab maximises -cost
    out = tracker.outcome()
    assert out.best_value == 1.0 and out.best_point.tolist() == [3.0]
    assert out.best_so_far[:4].tolist() == [5.0, 3.0, 3.0, 1.0]
    assert np.isnan(out.best_so_far[4:]).all()  # rounds not reached yet


def test_an_outcome_survives_its_plain_form_and_bad_fields_are_named():
    tracker = ObservedBest(2, 10)
    tracker.add(np.array([[0.5], [0.25]]), np.array([1.0, 2.0]))
    out = tracker.outcome(recommendation=np.array([0.3]))
    back = ClientOutcome.from_dict(out.to_dict())
    assert back.to_dict() == out.to_dict()
    bad = {**out.to_dict(), "evaluations": -1}
    with pytest.raises(ValueError, match="'evaluations' must be an integer >= 0"):
        ClientOutcome.from_dict(bad)
    with pytest.raises(ValueError, match="one value per round"):
        ClientOutcome.from_dict({**out.to_dict(), "best_so_far": [1.0]})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("best_so_far", [True] * 10, "'best_so_far' must be a list of finite numbers"),
        ("best_so_far", [float("inf")] * 10, "'best_so_far' must be a list of finite numbers"),
        ("best_so_far", [None, float("nan")] * 5, "'best_so_far' must be a list of finite num"),
        ("best_so_far", [None] * 9 + ["1"], "'best_so_far' must be a list of finite numbers"),
        ("best_so_far", (1.0,) * 9 + (False,), "'best_so_far' must be a list of finite numbers"),
        ("best_so_far", "1234567890", "'best_so_far' must be a list of finite numbers"),
        ("best_point", [True], "'best_point' must be a list of numbers"),
        ("rounds", [1.0 * r for r in range(1, 11)], "'rounds' must be a list of round numbers"),
        ("rounds", [*range(1, 10), True], "'rounds' must be a list of round numbers"),
        ("rounds", [*range(1, 10), None], "'rounds' must be a list of round numbers"),
    ],
)
def test_type_confused_outcome_fields_are_refused(field, value, message):
    """Found by the live fuzz suite: a bool or float passed where a number or a round number
    belongs was converted silently."""
    tracker = ObservedBest(0, 10)
    tracker.add(np.array([[0.5]]), np.array([1.0]))
    with pytest.raises(ValueError, match=message):
        ClientOutcome.from_dict({**tracker.outcome().to_dict(), field: value})


def test_an_outcome_may_hold_nulls_ints_and_int_subclasses_where_numbers_belong():
    """The list checks look at each item's type (a null, an int or a float, not a bool); an
    int subclass other than bool is an int, as ``isinstance`` says."""

    class Round(int):
        pass

    tracker = ObservedBest(0, 10)
    tracker.add(np.array([[0.5]]), np.array([1.0]))
    plain = tracker.outcome().to_dict()
    back = ClientOutcome.from_dict(
        {
            **plain,
            "rounds": [Round(r) for r in plain["rounds"]],
            "best_so_far": [None, 2, *[1.5] * 8],
        }
    )
    assert back.rounds.tolist() == plain["rounds"]
    assert np.isnan(back.best_so_far[0]) and back.best_so_far[1:3].tolist() == [2.0, 1.5]


def test_a_server_checks_the_best_point_lies_in_the_domain():
    tracker = ObservedBest(0, 10)
    tracker.add(np.array([[0.5]]), np.array([1.0]))
    outcome = tracker.outcome()
    outcome.check(10, np.array([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="'best_point' lies outside the domain"):
        outcome.check(10, np.array([[0.6, 1.0]]))


def test_a_clients_first_outcome_stays():
    """Found by the live fuzz suite: a second outcome of a client replaced its first."""
    from fedxab.config import config_from_dict
    from fedxab.run.assembly import build_run

    config = config_from_dict(
        {
            "run": {"budget": 10},
            "objective": {"name": "garland"},
            "algorithm": {"name": "fedpne"},
            "federation": {"clients": 2},
        }
    )
    session = build_run(config, 0, run_id="r", server=True).server
    first, second = ObservedBest(1, 10), ObservedBest(1, 10)
    first.add(np.array([[0.5]]), np.array([1.0]))
    second.add(np.array([[0.25]]), np.array([9.0]))
    assert session.add_outcome(first.outcome()) is True
    assert session.add_outcome(second.outcome()) is False
    assert session.outcomes[1].best_value == 1.0
