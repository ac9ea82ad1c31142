"""Partition invariants (spec-hct-poo-parallel §0.2, spec-fedpne-pfpne §2)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedxab.algorithms.partition import Partition
from fedxab.algorithms.registry import FEDERATED
from fedxab.errors import ConfigError

DOMAIN_3D = [[-1.0, 2.0], [0.0, 1.0], [5.0, 9.0]]


def _volume(lo, up):
    return float(np.prod(np.asarray(up) - np.asarray(lo)))


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("split", ["random", "longest"])
def test_children_tile_the_parent(k, split):
    part = Partition(DOMAIN_3D, k=k, split=split, seed=7)
    lower, upper = part.root_cell()
    frontier = [(0, 1, lower, upper)]
    for _ in range(3):  # three generations
        nxt = []
        for h, i, lo, up in frontier:
            kids = part.child_cells(h, i, lo, up)
            assert [j for j, _, _ in kids] == list(range(k * (i - 1) + 1, k * i + 1))
            assert sum(_volume(a, b) for _, a, b in kids) == pytest.approx(_volume(lo, up))
            # the children differ from the parent in one coordinate only, and are contiguous
            dims = {int(np.nonzero(np.asarray(a) != np.asarray(lo))[0][0]) for _, a, _ in kids[1:]}
            assert len(dims) == 1
            j = dims.pop()
            assert kids[0][1][j] == lo[j] and kids[-1][2][j] == up[j]
            for (_, _, b1), (_, a2, _) in itertools.pairwise(kids):
                assert b1[j] == a2[j]
            nxt += [(h + 1, jj, a, b) for jj, a, b in kids]
        frontier = nxt
    assert len(frontier) == k**3


def test_one_dimensional_partition_is_dyadic():
    part = Partition([[0.0, 1.0]], seed=3)
    for h in range(6):
        for i in range(1, 2**h + 1):
            lo, up = part.cell(h, i)
            assert lo[0] == pytest.approx((i - 1) / 2**h)
            assert up[0] == pytest.approx(i / 2**h)


def test_longest_side_rule_splits_the_widest_dimension_first():
    part = Partition(DOMAIN_3D, split="longest")
    lower, upper = part.root_cell()
    assert part.split_dim(0, 1, lower, upper) == 2  # width 4 beats 3 and 1
    lo, up = part.cell(1, 1)
    assert lo.tolist() == [-1.0, 0.0, 5.0] and up.tolist() == [2.0, 1.0, 7.0]
    # ties go to the lowest coordinate: widths 3, 1, 2 -> dimension 0
    assert part.split_dim(1, 1, tuple(lo), tuple(up)) == 0


def test_random_split_dimension_depends_on_the_seed():
    a = Partition(DOMAIN_3D, seed=1)
    b = Partition(DOMAIN_3D, seed=2)
    lo, up = a.root_cell()
    dims_a = [a.split_dim(h, i, lo, up) for h in range(6) for i in range(1, 2**h + 1)]
    dims_b = [b.split_dim(h, i, lo, up) for h in range(6) for i in range(1, 2**h + 1)]
    assert dims_a != dims_b
    assert set(dims_a) == {0, 1, 2}  # all coordinates are used
    # uniform over dimensions: 63 draws, each dimension well represented
    assert min(dims_a.count(j) for j in range(3)) >= 10


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    k=st.integers(2, 4),
    order_seed=st.integers(0, 2**16),
)
def test_same_seed_same_tree_in_any_expansion_order(seed, k, order_seed):
    """Two parties expanding nodes in different orders get identical cells (spec §2.2)."""
    rng = np.random.default_rng(order_seed)

    def grow(part, choose):
        lower, upper = part.root_cell()
        leaves = {(0, 1): (lower, upper)}
        cells = {}
        for _ in range(12):
            keys = sorted(leaves)
            h, i = keys[choose(len(keys))]
            lo, up = leaves.pop((h, i))
            for j, a, b in part.child_cells(h, i, lo, up):
                leaves[(h + 1, j)] = (a, b)
                cells[(h + 1, j)] = (a, b)
        return cells

    first = grow(Partition(DOMAIN_3D, k=k, seed=seed), lambda n: int(rng.integers(n)))
    second = Partition(DOMAIN_3D, k=k, seed=seed)
    for (h, i), (lo, up) in first.items():
        lo2, up2 = second.cell(h, i)  # built by another party, straight from the root
        assert lo2.tolist() == list(lo) and up2.tolist() == list(up)


def test_bad_partition_parameters_name_the_field():
    with pytest.raises(ConfigError, match="algorithm.k"):
        Partition([[0, 1]], k=1)
    with pytest.raises(ConfigError, match="algorithm.split"):
        Partition([[0, 1]], split="diagonal")
    with pytest.raises(ConfigError, match="domain: dimension 0 has lower bound 2.0 >= upper"):
        Partition([[2, 1]])


def test_typed_edges_split_discrete_coordinates_between_values():
    """With a typed space's edges, every cut along a discrete coordinate lies on a boundary
    between values, and a node holding one value of every discrete coordinate is cut along
    the continuous one."""
    from fedxab.space import Categorical, Float, Int, SearchSpace

    space = SearchSpace({"x": Float(0.0, 1.0), "n": Int(1, 5), "c": Categorical(["a", "b", "c"])})
    part = Partition(space.domain, k=2, split="random", seed=3, edges=space.edges)
    boundaries = {j: set(e.tolist()) for j, e in enumerate(space.edges) if e is not None}
    for h in range(1, 9):
        for i in range(1, 2**h + 1):
            lo, up = part.cell(h, i)
            for j, allowed in boundaries.items():
                assert lo[j] in allowed and up[j] in allowed  # never inside a value's cell
            assert up[0] > lo[0]
    # without edges the same tree cuts inside values (the midpoint of 5 cells is inside one)
    plain = Partition(space.domain, k=2, split="random", seed=3)
    cut_inside = any(
        plain.cell(h, i)[0][1] not in boundaries[1] for h in range(1, 6) for i in range(1, 2**h + 1)
    )
    assert cut_inside


def test_typed_edges_give_distinct_parameters_to_fedpne_noise_free():
    """Fed-PNE's noise_free mode on a typed space: with the tree cutting between values,
    almost every pull is a new parameter set (145 of 150 per client; 37 without the edges),
    and the best parameters are found."""
    import math
    from collections import Counter

    import fedxab

    calls: Counter = Counter()

    def objective(params, client_id):
        calls[client_id] += 1
        bonus = {"a": 0.0, "b": 0.2, "c": 0.1}[params["kind"]]
        lr, depth = math.log10(params["lr"]), params["depth"]
        return -0.05 * (lr + 2.0) ** 2 - 0.02 * (depth - 5) ** 2 + bonus  # varies by < nu = 1

    space = {
        "lr": fedxab.Float(1e-4, 1e-1, log=True),
        "depth": fedxab.Int(1, 8),
        "kind": fedxab.Categorical(["a", "b", "c"]),
    }
    run = fedxab.federate(
        objective, space=space, clients=2, budget=150, algorithm="fedpne", deterministic=True
    ).runs[0]
    assert min(calls.values()) >= 135
    for best in run.best_params.values():
        assert best["kind"] == "b" and best["depth"] == 5


def _trees(obj) -> list:
    """The partitions an algorithm's state machine holds (its own, or its HCT's)."""
    found = [getattr(obj, "partition", None), getattr(getattr(obj, "hct", None), "partition", None)]
    return [p for p in found if isinstance(p, Partition)]


@pytest.mark.parametrize("name", sorted(FEDERATED))
def test_every_tree_of_an_algorithm_takes_the_edges_or_none_does(name):
    """A typed run hands the space's edges to every side that takes them: the trees of one
    algorithm's server and clients must be the same, so either all take them or none."""
    from fedxab.algorithms.registry import make_federation
    from fedxab.space import Float, Int, SearchSpace

    space = SearchSpace({"x": Float(0.0, 1.0), "n": Int(1, 5)})
    params = {"epsilon": 0.5, "privacy_delta": 1e-3} if name == "dpfedpne" else {}
    server, clients = make_federation(
        name, space.domain, n_clients=2, budget=50, seed=0, params=params, edges=space.edges
    )
    trees = [t for obj in (server, *clients) for t in _trees(obj)]
    assert len({t.edges is None for t in trees}) <= 1, name
    if name in ("fedpne", "dpfedpne", "local-hct", "central-hct"):
        assert trees and trees[0].edges is not None
