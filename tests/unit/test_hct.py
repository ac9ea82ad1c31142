"""HCT: worked numbers of spec-hct-poo-parallel §1.8, the main loop's mechanics, bad input."""

import math

import numpy as np
import pytest

from fedxab.algorithms.hct import HCT, t_plus
from fedxab.errors import ConfigError, InvalidRewardError, UnknownPointError


@pytest.mark.parametrize(
    ("t", "expected"), [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (8, 8), (9, 16), (1000, 1024)]
)
def test_t_plus_table(t, expected):
    assert t_plus(t) == expected


# spec §1.8: nu = 1, rho = 0.5, n = 1000 (theory delta = 1/1000)
TAU_TABLE = [
    ("theory", 1, 7.132, [58, 229, 913, 3652, 14606, 58424, 233693]),
    ("theory", 64, 11.291, [91, 362, 1446, 5781, 23124, 92493, 369971]),
    ("theory", 1024, 14.063, [113, 451, 1801, 7201, 28802, 115206, 460823]),
    ("practical", 1, 4.829, [1, 1, 1, 4, 13, 50, 198]),
    ("practical", 64, 8.988, [1, 1, 2, 6, 24, 93, 369]),
    ("practical", 1024, 11.761, [1, 1, 2, 8, 31, 121, 482]),
]


@pytest.mark.parametrize(("preset", "tp", "log_term", "taus"), TAU_TABLE)
def test_tau_table_of_the_spec(preset, tp, log_term, taus):
    opt = HCT([[0, 1]], preset=preset, budget=1000)
    assert opt.log_term(tp) == pytest.approx(log_term, abs=5e-4)
    assert [opt.tau(h, tp) for h in range(7)] == taus


def test_presets_constants():
    theory = HCT([[0, 1]], preset="theory", budget=1000)
    assert theory.c == pytest.approx(2.8284, abs=1e-4)
    assert theory.c1 == pytest.approx(0.7993, abs=1e-4)
    assert theory.delta == pytest.approx(1e-3)
    practical = HCT([[0, 1]])
    assert (practical.c, practical.delta) == (0.1, 0.01)
    assert practical.c1 == pytest.approx((0.5 / 3) ** 0.125)


def test_initial_tree_and_first_rounds():
    """T_1 = {(0,1),(1,1),(1,2)}; the root is never pulled; ties go to the left child."""
    opt = HCT([[0, 1]])
    assert opt.n_nodes == 3 and opt.max_depth == 1
    x = opt.ask()
    assert x.tolist() == [0.25]  # both children have B = +inf: tie -> left
    opt.tell(x, 0.3)
    # tau_1(t+ = 2) = 1 for the practical preset, so (1,1) is expanded after one pull
    assert opt.n_nodes == 5
    assert opt.count[0] == 0
    x = opt.ask()
    assert x.tolist() == [0.75]  # (1,2) still has B = +inf
    opt.tell(x, 0.9)
    assert opt.count[0] == 0


def test_u_and_b_values_after_a_refresh():
    """Step (A): U = mu + nu rho^h + c sqrt(log(1/delta~(t+))/T); B = min(U, max B children)."""
    opt = HCT([[0, 1]])
    for _ in range(40):
        x = opt.ask()
        opt.tell(x, float(1.0 - abs(x[0] - 0.7)))
    opt._refresh(64)
    lt = math.log(1.0 / min(opt.c1 * opt.delta / 64, 0.5))
    assert math.isinf(opt.U[0])
    for node in range(1, opt.n_nodes):
        n = opt.count[node]
        if n == 0:
            assert math.isinf(opt.U[node]) and math.isinf(opt.B[node])
            continue
        expected_u = opt.total[node] / n + 0.5 ** opt.depth[node] + 0.1 * math.sqrt(lt / n)
        assert opt.U[node] == pytest.approx(expected_u, rel=1e-12)
    for node in range(opt.n_nodes):
        c0 = opt.child0[node]
        if c0 < 0:
            assert opt.B[node] == opt.U[node]
        else:
            assert opt.B[node] == min(opt.U[node], max(opt.B[c0], opt.B[c0 + 1]))


def test_only_the_pulled_node_gets_statistics():
    opt = HCT([[0, 1]])
    for _ in range(200):
        x = opt.ask()
        opt.tell(x, 0.5)
    assert sum(opt.count) == 200 == opt.t
    assert opt.count[0] == 0
    # a node is expanded only once it reached its threshold at the time (tau grows with t+)
    for node in range(1, opt.n_nodes):
        if opt.child0[node] >= 0:
            assert opt.count[node] >= opt.tau(opt.depth[node], 1)


def test_recommend_does_not_change_state():
    opt = HCT([[0, 1]], recommendation="history", seed=5)
    rng = np.random.default_rng(0)
    for _ in range(300):
        x = opt.ask()
        opt.tell(x, float(rng.uniform()))
    before = (list(opt.count), list(opt.B), opt.t, opt.n_nodes)
    first = opt.recommend()
    assert np.array_equal(first, opt.recommend())
    assert (list(opt.count), list(opt.B), opt.t, opt.n_nodes) == before
    # and the next ask is the same as for an optimizer that was never asked to recommend
    twin = HCT([[0, 1]], recommendation="history", seed=5)
    rng = np.random.default_rng(0)
    for _ in range(300):
        x = twin.ask()
        twin.tell(x, float(rng.uniform()))
    assert np.array_equal(opt.ask(), twin.ask())


def test_history_recommendation_follows_the_pulls_with_multiplicity():
    opt = HCT([[0, 1]], recommendation="history", seed=1)
    for _ in range(64):
        x = opt.ask()
        opt.tell(x, 0.5)
    pulled = {tuple(opt.points[n].tolist()) for n in opt.history}
    draws = set()
    for _t in range(64, 400):
        x = opt.ask()
        opt.tell(x, 0.5)
        draws.add(tuple(opt.recommend().tolist()))
        pulled.add(tuple(x.tolist()))
    assert draws <= pulled and len(draws) > 1


def test_lcb_recommendation_prefers_well_sampled_good_nodes():
    opt = HCT([[0, 1]])
    for _ in range(2000):
        x = opt.ask()
        opt.tell(x, float(1.0 - abs(x[0] - 0.3)))
    assert abs(opt.recommend()[0] - 0.3) < 0.05


def test_random_point_rule_pulls_inside_the_cell():
    opt = HCT([[0, 1], [-2, 2]], point="random", seed=4)
    for _ in range(100):
        x = opt.ask()
        node = opt._pending[x.tobytes()][0][0]
        assert np.all(np.asarray(opt.lower[node]) <= x) and np.all(x <= np.asarray(opt.upper[node]))
        opt.tell(x, 0.1)


def test_same_seed_same_run_and_different_seed_different_run():
    def run(seed):
        opt = HCT([[0, 1], [0, 1]], seed=seed)
        out = []
        for _ in range(300):
            x = opt.ask()
            out.append(x.copy())
            opt.tell(x, float(np.sin(7 * x[0]) * np.cos(3 * x[1])))
        return np.array(out)

    assert np.array_equal(run(3), run(3))
    assert not np.array_equal(run(3), run(4))  # the split dimensions differ


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "high", None])
def test_bad_reward_is_rejected_and_changes_nothing(bad):
    opt = HCT([[0, 1]])
    x = opt.ask()
    with pytest.raises(InvalidRewardError):
        opt.tell(x, bad)
    assert opt.t == 0 and sum(opt.count) == 0
    opt.tell(x, 0.5)  # the point is still pending and can be told correctly
    assert opt.t == 1


def test_tell_for_a_point_not_asked():
    opt = HCT([[0, 1]])
    with pytest.raises(UnknownPointError, match="did not hand out"):
        opt.tell(np.array([0.25]), 0.5)
    x = opt.ask()
    opt.tell(x, 0.5)
    with pytest.raises(UnknownPointError):
        opt.tell(x, 0.5)  # told twice


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rho": 1.5}, "algorithm.rho"),
        ({"rho": 0}, "algorithm.rho"),
        ({"nu": -1}, "algorithm.nu"),
        ({"c": float("nan")}, "algorithm.c"),
        ({"delta": 2}, "algorithm.delta"),
        ({"preset": "fast"}, "algorithm.preset"),
        ({"refresh": "sometimes"}, "algorithm.refresh"),
        ({"recommendation": "best"}, "algorithm.recommendation"),
        ({"budget": -5}, "run.budget"),
        ({"preset": "theory"}, "algorithm.delta"),
    ],
)
def test_bad_parameters_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        HCT([[0, 1]], **kwargs)


def test_domain_with_lower_above_upper():
    with pytest.raises(ConfigError, match="lower bound 3.0 >= upper bound 1.0"):
        HCT([[0, 1], [3, 1]])


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("next_round", [True, False])
def test_cached_quantities_match_a_fresh_computation(k, next_round):
    """After every tell: B = min(U, max B of the children) everywhere, ``best`` is the child
    OptTraverse takes (largest B, ties to the lowest index), and the thresholds of the current
    t+ are tau_h(t) for every depth of the tree."""
    opt = HCT([[0, 1], [0, 2]], k=k, next_round=next_round, seed=3)
    rng = np.random.default_rng(3)
    for _ in range(700):
        x = opt.ask()
        opt.tell(x, float(x[0] * (2 - x[1]) + rng.uniform(-0.1, 0.1)))
        assert opt._taus == [opt.tau(h, opt._tplus) for h in range(opt.max_depth + 1)]
        for node in range(opt.n_nodes):
            c0 = opt.child0[node]
            if c0 < 0:
                assert opt.best[node] == -1 and opt.B[node] == opt.U[node]
                continue
            children = opt.B[c0 : c0 + k]
            assert opt.best[node] == c0 + children.index(max(children))
            assert opt.B[node] == min(opt.U[node], max(children))


def test_tell_accepts_a_copy_or_a_list_of_the_point():
    opt = HCT([[0, 1]])
    x = opt.ask()
    opt.tell(x.copy(), 0.5)
    x = opt.ask()
    opt.tell(x.tolist(), 0.5)
    assert opt.t == 2
    with pytest.raises(UnknownPointError):
        opt.tell(x, 0.5)  # the list told it already


def test_noise_free_hct_pulls_every_point_once_and_keeps_optimism():
    """``noise_free`` (a deterministic objective): every threshold is 1 and U has no
    confidence term, so each ask is a new point (DOO's b-values); on f(x) = 1 - |x - 0.3|
    (1-Lipschitz, so f* - f <= nu rho^h on a depth-h dyadic cell with nu = 1, rho = 1/2) 200
    pulls reach f* within 1e-3, where the noisy-mode HCT re-pulls and stops further off."""
    from fedxab.algorithms.hct import HCT

    def f(x):
        return 1.0 - abs(float(x[0]) - 0.3)

    results = {}
    for noise_free in (False, True):
        opt = HCT([[0.0, 1.0]], noise_free=noise_free, seed=0)
        seen = []
        for _ in range(200):
            x = opt.ask()
            seen.append(x.tobytes())
            opt.tell(x, f(x))
        results[noise_free] = (len(set(seen)), max(f(np.frombuffer(s)) for s in seen))
        if noise_free:
            assert opt.tau(7, 5) == 1
    assert results[True][0] == 200  # every pull a new point
    assert results[False][0] < 200  # the noisy mode re-pulls
    assert results[True][1] > 1.0 - 1e-3
    assert results[True][1] >= results[False][1]
