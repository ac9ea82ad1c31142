"""HCT, the High Confidence Tree algorithm ("HCT-iid"), as given by Shang, Kaufmann & Valko (2018).

Implements Algorithm 1 (main loop) and Algorithm 2 (OptTraverse) of Shang, Kaufmann & Valko, with
UpdateB and Expand of Azar, Lazaric & Brunskill (2014), making these choices where the papers leave
room:

- ``t+ = 2^ceil(log2 t)`` with a base-2 log;
- U/B refresh of the whole tree when ``t`` is a power of two (the paper's rule, default), or
  whenever ``t+`` changes (``refresh="consistent"``);
- after a pull, U and the expansion threshold use ``t+1`` (the paper's lines 19/21, default) or
  ``t`` (``next_round=False``);
- the root is created expanded, never pulled, and always passed through;
- ties in OptTraverse go to the lowest child index; ``U = +inf`` while ``T = 0``.

``roots=(h, nodes)`` restricts HCT to the cells ``(h, i)``, ``i`` in ``nodes``, of its partition
(fedxab's extension, used by PF-HCT's local stage): the root is then created with those cells as
its children (instead of its ``k`` children), is never pulled and always passed through, and the
tree below each cell grows as usual; :meth:`HCT.preload` gives those cells samples made before the
run. :meth:`HCT.warm_start` instead gives any cells of the unrestricted tree samples made before
the run, growing the tree down to them (PF-HCT's default local stage). With ``roots=None`` and no
warm start (the defaults) HCT is exactly the papers' algorithm.

Only the pulled node's statistics change on a pull (not its ancestors'), and statistics are a
running count and sum per node, never a list of rewards. Per-round cost is O(depth), plus an
O(|tree|) refresh at powers of two. Every expanded node keeps the child OptTraverse steps to from
it (``best``, updated together with B), UpdateB stops at the first node whose B is unchanged, and
``log(1/delta~(t+))`` and the thresholds ``tau_h(t)`` are computed once per value of ``t+``: the
same arithmetic as computing everything afresh every round, so the same run, bit for bit.

Recommendation (``recommend()``, never changes state):

- ``"lcb"`` (default): the representative point of the pulled node with the highest lower
  confidence bound ``mu - c sqrt(log(1/delta~(t+)) / T)`` on its value. This is what a user wants
  from one run: the point whose value is known to be high with the most confidence; a node pulled
  once with a lucky reward loses to a well-sampled good node because its width is large.
- ``"history"``: the papers' rule: a uniform draw from the history of pulls, with
  multiplicity, which carries the guarantee ``E[S_n] <= E[R_n]/n``. The draw comes from a stream
  keyed by the seed and the round, so asking twice gives the same answer.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence

import numpy as np

from fedxab.algorithms.base import check_reward
from fedxab.algorithms.partition import Partition
from fedxab.errors import ConfigError, UnknownPointError
from fedxab.seeding import stream
from fedxab.validation import (
    check_bool,
    check_choice,
    check_constant,
    check_delta,
    check_nu,
    check_positive_int,
    check_rho,
)

PRESETS = ("practical", "theory")
REFRESH_RULES = ("paper", "consistent")
POINT_RULES = ("centre", "random")
RECOMMENDATIONS = ("lcb", "history")

_INF = math.inf


def t_plus(t: int) -> int:
    """``t+ = 2^ceil(log2 t)``, the smallest power of two >= t (HCT's ``t+``)."""
    if t < 1:
        raise ValueError(f"t must be >= 1, got {t}")
    return 1 << (t - 1).bit_length()


def resolve_constants(
    preset: str,
    nu: float,
    rho: float,
    c: float | None,
    c1: float | None,
    delta: float | None,
    budget: int | None,
) -> tuple[float, float, float]:
    """The ``(c, c1, delta)`` of a preset, with explicit values taking precedence.

    ``theory``: ``c = 2/sqrt(1-rho)``, ``c1 = (rho/(3 nu))^(1/8)``, ``delta = 1/budget``.
    ``practical`` (PyXAB's defaults, used in the federated papers' experiments): ``c = 0.1``,
    ``delta = 0.01``, ``c1`` as in theory.
    """
    check_choice("algorithm.preset", preset, PRESETS)
    if c is None:
        c = 2.0 / math.sqrt(1.0 - rho) if preset == "theory" else 0.1
    if c1 is None:
        c1 = (rho / (3.0 * nu)) ** 0.125
    if delta is None:
        if preset == "theory":
            if budget is None:
                raise ConfigError(
                    "algorithm.delta",
                    "the theory preset sets delta = 1/budget: give the budget or an explicit delta",
                )
            delta = 1.0 / budget
        else:
            delta = 0.01
    return (
        check_constant("algorithm.c", c),
        check_constant("algorithm.c1", c1),
        check_delta("algorithm.delta", delta),
    )


class HCT:
    """HCT on a box domain with the ask/tell/recommend interface.

    Parameters are those of HCT: smoothness ``nu``, ``rho``; confidence constants ``c``,
    ``c1``, ``delta`` (from ``preset`` unless given); the partition (``k``, ``split``, ``seed``).
    ``budget`` is needed only for the theory preset's ``delta = 1/n``.

    ``noise_free`` (fedxab's, for deterministic objectives): one pull tells a node's value, so
    every threshold ``tau_h`` is 1 and the confidence term of ``U`` (and of the ``lcb``
    recommendation) is 0: ``U = f(x_{h,i}) + nu rho^h``, the b-values of deterministic
    optimistic optimisation (Munos 2011), each pull a new node. Under the smoothness
    assumption ``U`` still bounds the best value of the node's cell, so the optimistic choice
    (and its simple-regret bound in ``nu rho^h`` of the depth reached) holds with exact values.
    ``edges``: a typed space's cell boundaries, so that the tree splits discrete coordinates
    between values (:class:`~fedxab.algorithms.partition.Partition`).
    """

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        nu: float = 1.0,
        rho: float = 0.5,
        preset: str = "practical",
        c: float | None = None,
        c1: float | None = None,
        delta: float | None = None,
        budget: int | None = None,
        k: int = 2,
        split: str = "random",
        point: str = "centre",
        refresh: str = "paper",
        next_round: bool = True,
        recommendation: str = "lcb",
        noise_free: bool = False,
        seed: int = 0,
        roots: tuple[int, Sequence[int] | np.ndarray] | None = None,
        edges: Sequence[Sequence[float] | None] | None = None,
    ) -> None:
        self.noise_free = check_bool("algorithm.noise_free", noise_free)
        self.nu = check_nu("algorithm.nu", nu)
        self.rho = check_rho("algorithm.rho", rho)
        if budget is not None:
            check_positive_int("run.budget", budget)
        self.c, self.c1, self.delta = resolve_constants(
            preset, self.nu, self.rho, c, c1, delta, budget
        )
        self.preset = preset
        self._c = 0.0 if self.noise_free else self.c  # the confidence widths' constant
        self.point_rule = check_choice("algorithm.point", point, POINT_RULES)
        self.refresh_rule = check_choice("algorithm.refresh", refresh, REFRESH_RULES)
        self.recommendation = check_choice(
            "algorithm.recommendation", recommendation, RECOMMENDATIONS
        )
        self.next_round = bool(next_round)
        self.seed = seed
        self.partition = Partition(domain, k=k, split=split, seed=seed, edges=edges)
        self.k = k
        self._point_rng = stream(seed, "hct-point") if point == "random" else None

        # Node arrays, indexed by node id; a node's children are ids child0 .. child0 + k - 1.
        self.depth: list[int] = []
        self.index: list[int] = []
        self.parent: list[int] = []
        self.child0: list[int] = []  # -1 for a leaf
        self.best: list[int] = []  # the child of largest B (see _children_max); -1 for a leaf
        self.count: list[int] = []  # T_{h,i}
        self.total: list[float] = []  # sum of rewards of x_{h,i}
        self.U: list[float] = []
        self.B: list[float] = []
        self.lower: list[tuple[float, ...]] = []
        self.upper: list[tuple[float, ...]] = []
        self.points: list[np.ndarray] = []
        self._point_keys: list[bytes] = []

        self.t = 0  # number of completed rounds (tells)
        self.reward_sum = 0.0
        self.max_depth = 0
        self._nu_rho_h: list[float] = []
        self._pending: dict[bytes, list[tuple[int, np.ndarray]]] = {}
        self._last_refresh_tplus = 0
        self._last_point: np.ndarray | None = None
        self._last_key = b""
        self.history = array("l")  # node id of each pull (papers' recommendation rule)
        self._history_points: list[np.ndarray] | None = [] if point == "random" else None

        self._use_tplus(1)  # sets _tplus, _log_term, _taus: the quantities of the current t+
        lower, upper = self.partition.root_cell()
        root = self._new_node(0, 1, -1, lower, upper)
        self._top_depth, self._top_count = 1, k  # depth and number of the root's children
        if roots is None:
            self._expand(root)  # T_1 = {(0,1), (1,1), ..., (1,k)}: the root starts expanded
        else:
            self._plant(root, *roots)

    # ----------------------------------------------------------------------------- quantities
    def log_term(self, tp: int) -> float:
        """``log(1/delta~(t+))`` with ``delta~(t) = min(c1 delta / t, 1/2)`` (Azar et al. 2014)."""
        return math.log(1.0 / min(self.c1 * self.delta / tp, 0.5))

    def tau(self, h: int, tp: int) -> int:
        """Expansion threshold ``tau_h(t) = ceil(c^2 log(1/delta~(t+)) rho^(-2h) / nu^2)``
        (1 with ``noise_free``: one pull tells a node's value)."""
        if self.noise_free:
            return 1
        return math.ceil(self.c**2 * self.log_term(tp) / self.nu**2 * self.rho ** (-2 * h))

    def _use_tplus(self, tp: int) -> None:
        """Make ``t+ = tp`` current: ``_log_term`` = ``log(1/delta~(t+))`` and ``_taus`` =
        ``[tau_0(t), ..., tau_H(t)]`` for the tree's depth H (extended by :meth:`_expand`).

        The round index that ask and tell pass to ``t+`` never decreases (``t+1`` in ask, ``t+1``
        or ``t`` in tell after ``t`` grew by one), so ``t+`` changes exactly when that index
        exceeds the current one.
        """
        self._tplus = tp
        self._log_term = self.log_term(tp)
        self._taus = [self.tau(h, tp) for h in range(self.max_depth + 1)]

    def _u_value(self, node: int, log_term: float) -> float:
        """``U = mu + nu rho^h + c sqrt(log(1/delta~)/T)``; +inf if T = 0 or for the root."""
        n = self.count[node]
        if n == 0 or node == 0:
            return _INF
        return (
            self.total[node] / n
            + self._nu_rho_h[self.depth[node]]
            + self._c * math.sqrt(log_term / n)
        )

    # ------------------------------------------------------------------------------ tree ops
    def _new_node(
        self, h: int, i: int, parent: int, lower: tuple[float, ...], upper: tuple[float, ...]
    ) -> int:
        node = len(self.depth)
        self.depth.append(h)
        self.index.append(i)
        self.parent.append(parent)
        self.child0.append(-1)
        self.best.append(-1)
        self.count.append(0)
        self.total.append(0.0)
        self.U.append(_INF)
        self.B.append(_INF)
        self.lower.append(lower)
        self.upper.append(upper)
        centre = np.array([(a + b) / 2.0 for a, b in zip(lower, upper, strict=True)])
        centre.setflags(write=False)
        self.points.append(centre)
        self._point_keys.append(centre.tobytes())
        while len(self._nu_rho_h) <= h:
            self._nu_rho_h.append(self.nu * self.rho ** len(self._nu_rho_h))
        return node

    def _expand(self, node: int) -> None:
        """Expand: create the k children with T = 0 and U = B = +inf (Azar et al. 2014)."""
        h, i = self.depth[node], self.index[node]
        first = len(self.depth)
        for j, lo, up in self.partition.child_cells(h, i, self.lower[node], self.upper[node]):
            self._new_node(h + 1, j, node, lo, up)
        self.child0[node] = first
        self.best[node] = first  # every child has B = +inf
        if h + 1 > self.max_depth:
            self.max_depth = h + 1
            self._taus.append(self.tau(h + 1, self._tplus))

    def _plant(self, root: int, h: int, nodes: Sequence[int] | np.ndarray) -> None:
        """Make the cells ``(h, i)``, ``i`` in ``nodes``, the root's children (``roots``)."""
        top = np.asarray(nodes)
        if isinstance(h, bool) or not isinstance(h, int | np.integer) or h < 1:
            raise ConfigError("algorithm.roots", f"the depth must be an integer >= 1, got {h!r}")
        if (
            top.ndim != 1
            or top.size == 0
            or top.dtype.kind not in "iu"
            or top.min() < 1
            or top.max() > self.k**h
            or np.any(np.diff(top) <= 0)
        ):
            raise ConfigError(
                "algorithm.roots",
                f"the nodes must be a non-empty increasing list of indices in 1..{self.k**h}",
            )
        self.child0[root] = root + 1
        self.best[root] = root + 1  # every child has B = +inf
        for i in top.tolist():
            lo, up = self.partition.cell(h, i)
            self._new_node(h, i, root, tuple(lo.tolist()), tuple(up.tolist()))
        self._top_depth, self._top_count = int(h), len(top)
        self.max_depth = int(h)
        self._taus = [self.tau(d, self._tplus) for d in range(self.max_depth + 1)]

    def preload(
        self, counts: Sequence[int] | np.ndarray, sums: Sequence[float] | np.ndarray
    ) -> None:
        """Give the root's children (in order) ``counts`` samples of reward sum ``sums`` each,
        made before the run, e.g. PF-HCT's stage-1 pulls; only before the first :meth:`ask`.

        A child with enough samples is expanded at once (the rule of :meth:`tell`); U and B are
        computed at the first ask's refresh.
        """
        n = self._top_count
        counts, sums = np.asarray(counts), np.asarray(sums, dtype=float)
        if self.t or self._pending:
            raise ValueError("preload() must come before the first ask()")
        if counts.shape != (n,) or sums.shape != (n,) or counts.dtype.kind not in "iu":
            raise ValueError(f"preload() needs {n} integer counts and {n} sums")
        if np.any(counts < 0) or not np.all(np.isfinite(sums)):
            raise ValueError("preload() needs counts >= 0 and finite sums")
        for node, (n_node, total) in enumerate(
            zip(counts.tolist(), sums.tolist(), strict=True), start=1
        ):
            self.count[node], self.total[node] = n_node, total
            if n_node and n_node >= self._taus[self.depth[node]] and self.child0[node] < 0:
                self._expand(node)

    def warm_start(self, stats: Mapping[tuple[int, int], tuple[int, float]]) -> None:
        """Give cells ``(h, i)`` of the partition ``stats[(h, i)] = (count, reward sum)`` of
        samples made before the run (PF-HCT's stage 1); only before the first :meth:`ask`, on
        an unrestricted tree. The tree grows down to every such cell: a node is expanded when a
        descendant has samples, or when it has enough samples itself (the rule of :meth:`tell`).
        U and B are computed at the first ask's refresh."""
        if self.t or self._pending:
            raise ValueError("warm_start() must come before the first ask()")
        if self._top_depth != 1 or self._top_count != self.k:
            raise ValueError("warm_start() needs a tree without roots")
        k, above = self.k, set()
        for h, i in stats:
            while h > 1:
                h, i = h - 1, (i - 1) // k + 1
                if (h, i) in above:
                    break
                above.add((h, i))
        stack = list(range(self.child0[0], self.child0[0] + k))
        while stack:
            node = stack.pop()
            key = (self.depth[node], self.index[node])
            if key in stats:
                self.count[node], self.total[node] = stats[key]
            n = self.count[node]
            if key in above or (n and n >= self._taus[self.depth[node]]):
                self._expand(node)
                stack.extend(range(self.child0[node], self.child0[node] + k))

    def _children_max(self, node: int) -> float:
        """The largest B among the children of an expanded ``node``; the child that has it (ties
        to the lowest index) is recorded in ``best[node]``, the step OptTraverse takes
        from ``node``. Called whenever a child's B may have changed, so ``best`` is always current.
        """
        B, c0 = self.B, self.child0[node]
        k = self.k if node else self._top_count
        if k == 2:
            j = c0 if B[c0] >= B[c0 + 1] else c0 + 1
        else:
            children = B[c0 : c0 + k]
            j = c0 + children.index(max(children))
        self.best[node] = j
        return B[j]

    def _refresh(self, tp: int) -> None:
        """Step (A): recompute every U with ``delta~(t+)``, then every B bottom-up."""
        lt = self.log_term(tp)
        U, B, child0 = self.U, self.B, self.child0
        for node in range(len(U)):
            U[node] = self._u_value(node, lt)
        for node in range(len(U) - 1, -1, -1):  # children have larger ids than their parent
            B[node] = U[node] if child0[node] < 0 else min(U[node], self._children_max(node))
        self._last_refresh_tplus = tp

    def _update_b(self, node: int) -> None:
        """UpdateB (Azar et al. 2014): ``B = min(U, max of the children's B)`` for the pulled node,
        then for its ancestors from the deepest to the root.

        A pull changes the U of the pulled node only (ancestors' U change only at a refresh), and a
        node's B depends only on its own U and its children's B: once a node's B comes out
        unchanged, no ancestor's B (nor its choice of child) can change, so the climb stops there.
        """
        U, B, child0, parent = self.U, self.B, self.child0, self.parent
        while node >= 0:
            b = U[node] if child0[node] < 0 else min(U[node], self._children_max(node))
            if b == B[node]:
                return
            B[node] = b
            node = parent[node]

    def _traverse(self) -> int:
        """OptTraverse (P1 Algorithm 2): from the root, which is always passed through
        (``T_{0,1} := tau_0 := 1``), step to the child of largest B (``best``) until reaching a
        leaf or a node pulled fewer than ``tau_h(t)`` times."""
        best, count, taus = self.best, self.count, self._taus
        node, h = best[0], self._top_depth
        while best[node] >= 0 and count[node] >= taus[h]:
            node = best[node]
            h += 1
        return node

    # ------------------------------------------------------------------------------- public
    def ask(self) -> np.ndarray:
        """Steps (A)-(B) of round ``t+1`` (P1 Algorithm 1): refresh if due, then OptTraverse;
        returns the point.

        The refresh is due when ``t+`` differs from that of the last refresh and, with the paper's
        rule, ``t`` is a power of two (``t = t+``).
        """
        t = self.t + 1
        if t > self._tplus:
            self._use_tplus(t_plus(t))
        tp = self._tplus
        if tp != self._last_refresh_tplus and (t == tp or self.refresh_rule == "consistent"):
            self._refresh(tp)
        node = self._traverse()
        if self._point_rng is None:
            x = self.points[node]
            key = self._point_keys[node]
        else:
            lo, up = self.lower[node], self.upper[node]
            x = self._point_rng.uniform(lo, up)
            x.setflags(write=False)
            key = x.tobytes()
        self._pending.setdefault(key, []).append((node, x))
        self._last_point, self._last_key = x, key
        return x

    def tell(self, x: np.ndarray | Sequence[float], reward: float) -> None:
        """Steps (C)-(G) (P1 Algorithm 1): record the reward of a point from :meth:`ask`, update
        U and B, expand.

        ``x`` is matched to a pending ask by its bytes; the read-only array the last :meth:`ask`
        returned is recognised by identity, without converting it again.
        """
        key = self._last_key if x is self._last_point else np.asarray(x, dtype=float).tobytes()
        waiting = self._pending.get(key)
        if not waiting:
            raise UnknownPointError(
                f"tell() got a point that ask() did not hand out (or that was already told): "
                f"{np.asarray(x).tolist()}"
            )
        r = check_reward(reward)
        node, point = waiting.pop(0)
        if not waiting:
            del self._pending[key]
        t = self.t = self.t + 1
        self.history.append(node)
        if self._history_points is not None:
            self._history_points.append(point)
        count = self.count[node] = self.count[node] + 1
        self.total[node] += r
        self.reward_sum += r
        # the round index of U and the threshold (see the module docstring)
        round_index = t + 1 if self.next_round else t
        if round_index > self._tplus:
            self._use_tplus(t_plus(round_index))
        self.U[node] = self._u_value(node, self._log_term)
        self._update_b(node)
        if self.child0[node] < 0 and count >= self._taus[self.depth[node]]:
            self._expand(node)

    def recommend(self) -> np.ndarray:
        """The current answer (see the module docstring); never changes state."""
        if self.t == 0:
            return self.points[0].copy()
        if self.recommendation == "history":
            rng = stream(self.seed, "hct-recommend", self.t)
            j = int(rng.integers(self.t))
            if self._history_points is not None:
                return self._history_points[j].copy()
            return self.points[self.history[j]].copy()
        lt = self.log_term(t_plus(self.t))
        best, best_lcb = 0, -_INF
        for node, n in enumerate(self.count):
            if n:
                lcb = self.total[node] / n - self._c * math.sqrt(lt / n)
                if lcb > best_lcb:
                    best, best_lcb = node, lcb
        return self.points[best].copy()

    @property
    def n_nodes(self) -> int:
        return len(self.depth)

    def empirical_mean(self) -> float:
        """Mean of all rewards received so far (used by POO to pick an instance)."""
        return self.reward_sum / self.t if self.t else -_INF
