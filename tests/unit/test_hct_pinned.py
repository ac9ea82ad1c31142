"""HCT's and POO(HCT)'s trajectories pinned: optimizations of the inner loop must not change a run.

Each case drives an optimizer for a few thousand rounds on a fixed objective with seeded noise
and hashes every asked point, then the final tree (counts, reward sums, U, B, children, pull
history, depth, size) and the recommendation. The expected digests were computed with the
straightforward implementation of the inner loop (issue 18, before it was made faster); any
change to which point is asked, or to a statistic by as much as one bit, changes a digest.

The objective uses only +, -, *, / and sqrt (exactly rounded in IEEE arithmetic) and the noise
comes from numpy's PCG64, so the digests depend on nothing platform-specific but ``log`` and
``pow`` of the confidence terms.
"""

import hashlib
import math
from array import array

import numpy as np
import pytest

from fedxab.algorithms.hct import HCT
from fedxab.algorithms.poo import POO

D1 = [[0.0, 1.0]]
D2 = [[0.0, 1.0], [-2.0, 2.0]]


def objective(x: np.ndarray, domain: list[list[float]]) -> float:
    """A Garland-like multimodal function (a triangle wave in place of the sine)."""
    f = 0.0
    for xj, (lo, hi) in zip(x.tolist(), domain, strict=True):
        u = (xj - lo) / (hi - lo)
        wave = abs(9.5 * u - int(9.5 * u) - 0.5)
        f += u * (1.0 - u) * (4.0 - math.sqrt(wave))
    return f


def run_digest(opt, domain, rounds: int, seed: int, batch: int) -> tuple[str, str]:
    """Drive ``opt``: ``batch`` asks, then their tells in reverse order. Returns two digests:
    of the asked points, and of the final state (tree statistics and recommendation)."""
    rng = np.random.default_rng(seed)
    asked = hashlib.sha256()
    for _ in range(rounds // batch):
        xs = [opt.ask() for _ in range(batch)]
        for x in reversed(xs):
            asked.update(x.tobytes())
            opt.tell(x, objective(x, domain) + float(rng.uniform(-0.1, 0.1)))
    state = hashlib.sha256()
    trees = opt.instances if isinstance(opt, POO) else [opt]
    for tree in trees:
        for ints in (tree.count, tree.child0, tree.depth, tree.index, tree.parent, tree.history):
            state.update(array("q", ints).tobytes())
        for floats in (tree.total, tree.U, tree.B):
            state.update(array("d", floats).tobytes())
        state.update(repr((tree.t, tree.n_nodes, tree.max_depth, tree.reward_sum)).encode())
    state.update(opt.recommend().tobytes())
    return asked.hexdigest()[:16], state.hexdigest()[:16]


CASES = {
    # name: (optimizer, options, domain, rounds, seed, batch, expected digests)
    "default-1d": (HCT, {}, D1, 4000, 0, 1, ("7527df260f2b9b59", "d3ff28c85b328966")),
    "practical-2d-seed7": (HCT, {}, D2, 4000, 7, 1, ("03d9d3875b53aedb", "8d9a8babcd4a243d")),
    "k3-longest-consistent-2d": (
        HCT,
        {"k": 3, "split": "longest", "refresh": "consistent"},
        D2,
        4000,
        1,
        1,
        ("8d69e8c69fb2d1b9", "52b44e6bb3f2a1c2"),
    ),
    "t-round-random-point-history-2d": (
        HCT,
        {"next_round": False, "point": "random", "recommendation": "history"},
        D2,
        4000,
        2,
        1,
        ("256226adb7294448", "8dfa55b27688dcab"),
    ),
    "theory-1d": (
        HCT,
        {"preset": "theory", "budget": 3000},
        D1,
        3000,
        3,
        1,
        ("a4e8ebe9691e79a0", "e67b92719bd9ab03"),
    ),
    "k3-1d-pending-3": (HCT, {"k": 3}, D1, 3000, 4, 3, ("e5eec88d29d189f9", "0f0e923d3f3d6173")),
    "random-point-consistent-pending-4-2d": (
        HCT,
        {"point": "random", "refresh": "consistent", "next_round": False},
        D2,
        4000,
        5,
        4,
        ("12b58d193e936e1f", "6347aafd9ca30847"),
    ),
    "poo-1d": (POO, {}, D1, 4000, 6, 1, ("7e2f072f44702f0b", "f71625eca6839713")),
    "poo-k3-2d-pending-2": (
        POO,
        {"k": 3, "split": "longest"},
        D2,
        3000,
        8,
        2,
        ("a3e3c226d0bd0481", "bcf95fb685835e24"),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_trajectory_and_final_tree_are_pinned(name):
    cls, options, domain, rounds, seed, batch, expected = CASES[name]
    opt = cls(domain, seed=seed, **options)
    assert run_digest(opt, domain, rounds, seed, batch) == expected
