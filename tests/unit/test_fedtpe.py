"""Fed-TPE (fedxab.algorithms.fedtpe) and its Parzen estimators (fedxab.algorithms.parzen)."""

from __future__ import annotations

import numpy as np
import pytest

from fedxab.algorithms.fedtpe import TPEBroadcast, TPEReport
from fedxab.algorithms.parzen import ParzenEstimator, snap
from fedxab.algorithms.protocol import Finished
from fedxab.algorithms.registry import make_federation
from fedxab.errors import ConfigError, ProtocolError

UNIT2 = [[0.0, 1.0], [0.0, 1.0]]


def run(fns, budget, seed=0, domain=UNIT2, **params):
    """Drive a Fed-TPE federation in memory; every site's evaluated points and values, and
    the recommendation."""
    server, clients = make_federation(
        "fedtpe", np.asarray(domain), n_clients=len(fns), budget=budget, seed=seed, params=params
    )
    seen: list[list[tuple[np.ndarray, float]]] = [[] for _ in fns]

    def evaluate(m):
        def f(X):
            y = np.array([fns[m](x) for x in X])
            seen[m].extend(zip(X.copy(), y, strict=True))
            return y

        return f

    message = server.start()
    while not isinstance(message, Finished):
        for m, client in enumerate(clients):
            assert server.receive(m, client.answer(message, evaluate(m)))
        message = server.close_phase()
    return seen, message.recommendation, server


# ----------------------------------------------------------------------------- estimators
def test_a_continuous_estimator_is_a_density_on_the_unit_interval():
    est = ParzenEstimator(
        np.array([[0.1], [0.5], [0.95]]), np.array([1.0, 2.0, 0.5]), ["float"], [None]
    )
    grid = (np.arange(20_000) + 0.5) / 20_000
    mass = np.exp(est.log_pdf(grid[:, None])).mean()
    assert mass == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("kind", ["int", "categorical"])
def test_a_discrete_estimator_sums_to_one_over_the_values(kind):
    est = ParzenEstimator(snap(np.array([[0.1], [0.7]]), [5]), np.ones(2), [kind], [5])
    centres = (np.arange(5) + 0.5) / 5
    assert np.exp(est.log_pdf(centres[:, None])).sum() == pytest.approx(1.0, abs=1e-12)


def test_samples_follow_the_density():
    """Seeded: 20000 draws' histogram within 0.01 of the density's cell masses."""
    est = ParzenEstimator(
        snap(np.array([[0.2, 0.1], [0.8, 0.9]]), [None, 4]),
        np.array([3.0, 1.0]),
        ["float", "categorical"],
        [None, 4],
    )
    X = est.sample(np.random.default_rng(0), 20_000)
    assert np.all((X >= 0) & (X <= 1))
    assert set(np.unique(X[:, 1])) <= {0.125, 0.375, 0.625, 0.875}
    grid = (np.arange(2000) + 0.5) / 2000
    for k in range(4):
        pts = np.column_stack([grid, np.full(2000, (k + 0.5) / 4)])
        mass = np.exp(est.log_pdf(pts)).mean()
        assert np.mean(X[:, 1] == (k + 0.5) / 4) == pytest.approx(mass, abs=0.01)


def test_univariate_bandwidths_are_the_wider_neighbour_gap_clipped():
    """[TPE] §4.2: each kernel's sd is the greater distance to its neighbours (the ends 0 and 1
    count), clipped below at 1 / min(100, n + 1): here n = 3, so at 0.25."""
    est = ParzenEstimator(
        np.array([[0.3], [0.2], [0.7]]), np.ones(3), ["float"], [None], univariate=True
    )
    assert est._sigmas(0) == pytest.approx([0.4, 0.25, 0.4, 1.0])  # the prior's last


def test_the_univariate_density_is_the_product_of_its_marginals():
    """log p(x) = sum_j log p_j(x_j), each p_j the one-dimensional estimator of coordinate j;
    seeded draws' histogram on the discrete coordinate within 0.01 of its cell masses."""
    centres = snap(np.array([[0.2, 0.1], [0.8, 0.9], [0.5, 0.6]]), [None, 4])
    w = np.array([3.0, 1.0, 2.0])
    kinds, levels = ["float", "int"], [None, 4]
    est = ParzenEstimator(centres, w, kinds, levels, univariate=True)
    marginals = [
        ParzenEstimator(centres[:, [j]], w, [kinds[j]], [levels[j]], univariate=True)
        for j in range(2)
    ]
    X = est.sample(np.random.default_rng(0), 20_000)
    expected = marginals[0].log_pdf(X[:, [0]]) + marginals[1].log_pdf(X[:, [1]])
    assert est.log_pdf(X) == pytest.approx(expected, abs=1e-12)
    for k in range(4):
        mass = np.exp(marginals[1].log_pdf(np.array([[(k + 0.5) / 4]])))[0]
        assert np.mean(X[:, 1] == (k + 0.5) / 4) == pytest.approx(mass, abs=0.01)
    grid = (np.arange(20_000) + 0.5) / 20_000
    assert np.exp(marginals[0].log_pdf(grid[:, None])).mean() == pytest.approx(1.0, abs=1e-4)


def test_a_far_integer_value_keeps_a_finite_density():
    """Normalised in log space: a narrow kernel's far cells do not underflow to log 0."""
    est = ParzenEstimator(
        snap(np.array([[0.0]]), [200]), np.ones(1), ["int"], [200], sigma0=1e-3
    )  # sd one cell: the last cell is 199 sd away
    assert np.isfinite(est._level_table(0)).all()


def test_categories_have_no_order():
    """A categorical kernel puts the same mass on every other category, near or far."""
    est = ParzenEstimator(snap(np.array([[0.0]]), [5]), np.ones(1), ["categorical"], [5])
    p = np.exp(est.log_pdf(((np.arange(5) + 0.5) / 5)[:, None]))
    assert p[1] == pytest.approx(p[4]) and p[0] > p[1]
    ordered = ParzenEstimator(snap(np.array([[0.0]]), [5]), np.ones(1), ["int"], [5])
    q = np.exp(ordered.log_pdf(((np.arange(5) + 0.5) / 5)[:, None]))
    assert q[1] > q[4]


# ------------------------------------------------------------------------------ the run
def quadratic(centre):
    return lambda x: float(-np.sum((np.asarray(x) - centre) ** 2))


def test_each_site_uses_its_budget_and_the_recommendation_was_ranked_by_every_site():
    fns = [quadratic(np.array([0.3, 0.6]) + 0.02 * m) for m in range(3)]
    seen, rec, server = run(fns, budget=20)
    assert [len(s) for s in seen] == [20, 20, 20]
    # the last 3 evaluations of every site are the consensus candidates, the same at each site
    for s in seen:
        assert np.array_equal(np.array([x for x, _ in s[-3:]]), server.candidates)
    assert any(np.array_equal(rec, c) for c in server.candidates)
    assert server.ranks.shape == (3, 3) and np.all((server.ranks >= 0) & (server.ranks <= 1))


def test_a_site_never_proposes_a_point_it_has_evaluated():
    """On a 3 x 4 grid of 12 values, 12 evaluations before the consensus: every value once."""
    fns = [quadratic(np.array([0.5, 0.5]))] * 2
    seen, _, _ = run(fns, budget=15, kinds=["int", "categorical"], levels=[3, 4], n_init=2)
    for s in seen:
        points = {tuple(x) for x, _ in s[:12]}
        assert len(points) == 12


def test_labels_and_every_choice_are_invariant_to_increasing_transforms():
    """Only ranks of a site's own values are used and only 1-bit labels travel: a site whose
    objective is rescaled by exp(1000 f) + 7 makes exactly the same choices."""
    fns = [quadratic(np.array([0.2, 0.7])), quadratic(np.array([0.25, 0.65]))]
    scaled = [fns[0], lambda x: float(np.exp(10 * fns[1](x)) * 1000 + 7)]
    a, rec_a, _ = run(fns, budget=25, seed=3)
    b, rec_b, _ = run(scaled, budget=25, seed=3)
    for sa, sb in zip(a, b, strict=True):
        assert np.array_equal(np.array([x for x, _ in sa]), np.array([x for x, _ in sb]))
    assert np.array_equal(rec_a, rec_b)


def test_the_federation_helps_sites_with_close_optima():
    """Seeded, 8 seeds, 4 sites on 4-D quadratics with optima 0.05 apart, 20 evaluations each:
    the mean best value with the others' labels beats TPE alone (fed_weight = 0) by at least
    10% of the latter's distance to the optimum (measured: about 40%)."""
    rng = np.random.default_rng(0)
    fed, alone = [], []
    for seed in range(8):
        centre = rng.uniform(0.2, 0.8, size=4)
        fns = [quadratic(centre + rng.uniform(-0.025, 0.025, 4)) for _ in range(4)]
        domain = [[0.0, 1.0]] * 4
        for out, w in ((fed, 1.0), (alone, 0.0)):
            seen, _, _ = run(fns, 20, seed=seed, domain=domain, fed_weight=w)
            out.append(np.mean([max(v for _, v in s) for s in seen]))
    assert np.mean(fed) > np.mean(alone) * 0.9, (np.mean(fed), np.mean(alone))


def test_the_run_is_reproducible_and_the_domain_is_mapped():
    fn = quadratic(np.array([3.0, -1.0]))
    domain = [[0.0, 10.0], [-5.0, 5.0]]
    a = run([fn, fn], 12, seed=5, domain=domain)
    b = run([fn, fn], 12, seed=5, domain=domain)
    assert np.array_equal(a[1], b[1])
    xs = np.array([x for s in a[0] for x, _ in s])
    assert xs[:, 0].min() >= 0 and xs[:, 0].max() <= 10 and xs[:, 1].min() >= -5


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("params", "budget", "field"),
    [
        ({"kinds": ["float"]}, 20, "algorithm.kinds"),
        ({"kinds": ["float", "weird"]}, 20, "algorithm.kinds"),
        ({"kinds": ["float", "categorical"]}, 20, "algorithm.levels"),
        ({"levels": [0, -2]}, 20, "algorithm.levels"),
        ({"gamma": 1.5}, 20, "algorithm.gamma"),
        ({"consensus": -1}, 20, "algorithm.consensus"),
        ({"n_init": 0}, 20, "algorithm.n_init"),
        ({"fed_weight": -1.0}, 20, "algorithm.fed_weight"),
        ({"fed_decay": 0}, 20, "algorithm.fed_decay"),
        ({"categorical_eps": 0}, 20, "algorithm.categorical_eps"),
        ({}, 7, "run.budget"),
        ({"nonsense": 1}, 20, "algorithm.nonsense"),
    ],
)
def test_bad_parameters_are_one_line_config_errors(params, budget, field):
    with pytest.raises(ConfigError) as err:
        make_federation(
            "fedtpe", np.array(UNIT2), n_clients=2, budget=budget, seed=0, params=params
        )
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


def test_messages_round_trip_and_bad_fields_are_named():
    b = TPEBroadcast(2, np.zeros((2, 2)), np.array([0, 1]), np.array([0, 1]), np.empty((0, 2)))
    again = TPEBroadcast.from_wire(b.to_wire())
    assert np.array_equal(again.good, b.good) and again.phase == 2
    r = TPEReport(2, 1, np.zeros((1, 2)), np.array([1]), np.empty(0))
    assert TPEReport.from_wire(r.to_wire()).client == 1
    with pytest.raises(ProtocolError, match="good"):
        TPEReport.from_wire({**r.to_wire(), "good": np.array([2])})
    with pytest.raises(ProtocolError, match="ranks"):
        TPEReport.from_wire({**r.to_wire(), "ranks": np.array([1.5])})
    with pytest.raises(ProtocolError, match="owner"):
        TPEBroadcast.from_wire({**b.to_wire(), "owner": np.array([0])})


def test_the_server_refuses_a_report_of_the_wrong_size():
    server, _ = make_federation(
        "fedtpe", np.array(UNIT2), n_clients=2, budget=20, seed=0, params={}
    )
    server.start()
    with pytest.raises(ProtocolError, match="points"):
        server.receive(0, TPEReport(1, 0, np.zeros((4, 2)), np.zeros(4, dtype=np.int64)))
