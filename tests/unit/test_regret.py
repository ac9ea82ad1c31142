"""Regret bookkeeping on hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest

from fedxab import regret


def test_instant_cumulative_and_average_regret_by_hand():
    # f* = 1, pulls with values 0.5, 0.75, 1.0, 0.9
    r = regret.instant_regret(1.0, [0.5, 0.75, 1.0, 0.9])
    np.testing.assert_allclose(r, [0.5, 0.25, 0.0, 0.1])
    cum = regret.cumulative_regret(r)
    np.testing.assert_allclose(cum, [0.5, 0.75, 0.75, 0.85])
    # R_T / T = 0.5/1, 0.75/2, 0.75/3, 0.85/4
    np.testing.assert_allclose(regret.average_regret(cum), [0.5, 0.375, 0.25, 0.2125])
    assert cum.dtype == np.float64


def test_average_regret_on_a_grid_of_rounds():
    np.testing.assert_allclose(
        regret.average_regret([2.0, 3.0, 12.0], rounds=[1, 10, 100]), [2.0, 0.3, 0.12]
    )
    with pytest.raises(ValueError, match="rounds"):
        regret.average_regret([1.0, 2.0], rounds=[1, 2, 3])
    with pytest.raises(ValueError, match="start at 1"):
        regret.average_regret([1.0], rounds=[0])


def test_simple_regret():
    # Garland: f* = 4 (pi/6)(1 - pi/6); a recommendation worth 0.9 has regret f* - 0.9
    f_star = 4 * (np.pi / 6) * (1 - np.pi / 6)
    assert regret.simple_regret(f_star, 0.9) == pytest.approx(0.0977723911610445, abs=1e-12)
    assert regret.simple_regret(0.0, 0.0) == 0.0


def test_average_over_clients_by_hand():
    per_client = [[1.0, 2.0, 3.0], [3.0, 4.0, 8.0]]
    np.testing.assert_allclose(regret.average_over_clients(per_client), [2.0, 3.0, 5.5])
    # cumulative regret of each client, then the average over clients
    cum = regret.cumulative_regret([[0.5, 0.5, 0.0], [1.0, 0.0, 0.5]])
    np.testing.assert_allclose(cum, [[0.5, 1.0, 1.0], [1.0, 1.0, 1.5]])
    np.testing.assert_allclose(regret.average_over_clients(cum), [0.75, 1.0, 1.25])
    # one client: unchanged
    np.testing.assert_allclose(regret.average_over_clients([1.0, 2.0]), [1.0, 2.0])
    with pytest.raises(ValueError):
        regret.average_over_clients(np.zeros((0, 3)))
    with pytest.raises(ValueError):
        regret.average_over_clients(np.zeros((2, 2, 2)))


def test_round_grid_small_budget_keeps_every_round():
    np.testing.assert_array_equal(regret.round_grid(5), [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(regret.round_grid(1), [1])


@pytest.mark.parametrize("total", [501, 1000, 20_000, 10**6, 10**7 + 3])
def test_round_grid_is_bounded_increasing_and_includes_last(total):
    g = regret.round_grid(total)
    assert g.size <= 500
    assert g[0] == 1
    assert g[-1] == total
    assert np.all(np.diff(g) > 0)


def test_round_grid_rejects_bad_arguments():
    with pytest.raises(ValueError):
        regret.round_grid(0)
    with pytest.raises(ValueError):
        regret.round_grid(10, max_points=1)


def test_at_rounds_picks_one_based_rounds():
    curve = np.array([10.0, 20.0, 30.0, 40.0])
    np.testing.assert_allclose(regret.at_rounds(curve, [1, 3, 4]), [10.0, 30.0, 40.0])
    with pytest.raises(ValueError):
        regret.at_rounds(curve, [5])
    with pytest.raises(ValueError):
        regret.at_rounds(curve, [0])
