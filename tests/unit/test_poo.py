"""POO(HCT): the schedule trace of spec-hct-poo-parallel §2.2 and the recommendation rule."""

import math

import numpy as np
import pytest

from fedxab.algorithms.poo import POO
from fedxab.errors import UnknownPointError


def _run(poo, n, reward=lambda x: 0.5):
    for _ in range(n):
        x = poo.ask()
        poo.tell(x, reward(x))


def test_schedule_trace_of_the_spec():
    poo = POO([[0, 1]])
    _run(poo, 5000)
    assert poo.d_max == pytest.approx(6.5788, abs=1e-4)
    trace = [(d.n, d.n_before, round(d.threshold, 3)) for d in poo.doublings]
    assert trace == [(2, 1, 3.486), (4, 2, 3.486), (8, 4, 4.432), (48, 8, 8.282), (880, 16, 16.006)]
    assert poo.doublings[1].exponents == pytest.approx((4, 4 / 3))
    assert poo.doublings[2].exponents == pytest.approx((8, 8 / 3, 8 / 5, 8 / 7))
    assert poo.doublings[4].exponents == pytest.approx(tuple(32 / (2 * i + 1) for i in range(16)))
    assert len(poo.instances) == 32
    grid8 = sorted(poo.rhos[:8])
    assert grid8 == pytest.approx(
        [0.4305, 0.6561, 0.7551, 0.81, 0.8449, 0.8689, 0.8866, 0.9], abs=1e-4
    )
    # after each doubling to N' instances the grid is {rho_max^(N'/j)}: never above rho_max
    assert sorted(poo.rhos) == pytest.approx(sorted(0.9 ** (32 / j) for j in range(1, 33)))
    # instances created at n = 880 are caught up with 880/16 = 55 evaluations
    assert all(poo.instances[s].t >= 55 for s in range(16, 32))


def test_every_instance_has_n_over_N_evaluations_when_the_schedule_is_checked():
    poo = POO([[0, 1]])
    for _ in range(3000):
        if not poo._queue:
            counts = {inst.t for inst in poo.instances}
            assert counts == {poo._n // len(poo.instances)}
        x = poo.ask()
        poo.tell(x, 0.5)


def test_literal_grid_exceeds_rho_max():
    poo = POO([[0, 1]], rho_grid="literal")
    _run(poo, 10)
    assert max(poo.rhos) == pytest.approx(0.9 ** (2 / 3))
    assert max(poo.rhos) > 0.9


def test_recommendation_comes_from_the_instance_with_best_mean_reward():
    poo = POO([[0, 1]], recommendation="history", seed=2)
    f = lambda x: float(1 - abs(x[0] - 0.61))  # noqa: E731
    _run(poo, 2000, f)
    best = poo.best_instance()
    means = [inst.empirical_mean() for inst in poo.instances]
    assert means[best] == max(means)
    rec = poo.recommend()
    assert np.array_equal(rec, poo.recommend())  # no state change
    assert abs(rec[0] - 0.61) < 0.2
    assert math.isfinite(means[best])


def test_unknown_point_is_rejected():
    poo = POO([[0, 1]])
    with pytest.raises(UnknownPointError):
        poo.tell(np.array([0.3]), 1.0)
