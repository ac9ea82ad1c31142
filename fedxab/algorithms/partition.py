"""Hierarchical k-ary partition of a box domain, as in the X-armed bandit papers.

Node ``(h, i)`` is the cell at depth ``h`` with index ``i`` in ``1..k^h``; the root ``(0, 1)`` is
the whole domain. Children of ``(h, i)`` are ``(h+1, k(i-1)+1), ..., (h+1, k i)``: the cell cut
into k equal slabs along one coordinate, lowest slab first (the partition of [FX] and [PF]; k = 2
in their experiments).

The split coordinate of a node is chosen by ``split``:

- ``"random"`` (default): uniformly at random, as in the federated papers' experiments (PyXAB's
  ``BinaryPartition``), but drawn from a keyed hash of ``(seed, h, i)`` rather than in expansion
  order, so that every party with the same seed builds the same tree whatever order it expands
  nodes in (fedxab's choice; the papers do not say how the coordinate is drawn).
- ``"longest"``: the longest side, ties to the lowest coordinate (fedxab's tie rule).

In one dimension both rules give the dyadic (k-adic) partition.

``edges`` (fedxab's, for typed search spaces, :mod:`fedxab.space`): per coordinate, the cell
boundaries of a discrete parameter's values (None for a continuous one). A cut along such a
coordinate is moved to the nearest boundary strictly inside the node, so that the node is split
between values; a node that holds one value of the coordinate drawn is cut along the next
coordinate (cyclically) that it can split, and along the drawn one, at the midpoint, only if
it can split none (its children then hold the same parameters). With k > 2, a node whose
snapped cuts would not be distinct is cut at the midpoints.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedxab.domain import as_domain
from fedxab.errors import ConfigError
from fedxab.seeding import mix64, stream_word

SPLIT_RULES = ("random", "longest")


MAX_K = 16
"""Largest branching factor: every expansion makes k cells at once (the papers use k = 2)."""


class Partition:
    """The geometry of the tree: which cell each node ``(h, i)`` is. Holds no statistics."""

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        k: int = 2,
        split: str = "random",
        seed: int = 0,
        edges: Sequence[Sequence[float] | None] | None = None,
    ) -> None:
        self.domain = as_domain(domain)
        if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= MAX_K:
            raise ConfigError(
                "algorithm.k", f"branching factor must be an integer in 2..{MAX_K}, got {k!r}"
            )
        if split not in SPLIT_RULES:
            raise ConfigError(
                "algorithm.split",
                f"unknown split rule {split!r}; allowed: {', '.join(SPLIT_RULES)}",
            )
        self.k = k
        self.split = split
        self.seed = seed
        self.dim = int(self.domain.shape[0])
        self._key = stream_word(seed, "partition")
        if edges is not None and len(edges) != self.dim:
            raise ConfigError("space", f"{len(edges)} coordinates' edges for {self.dim} dimensions")
        self.edges: tuple[np.ndarray | None, ...] | None = (
            None
            if edges is None or all(e is None for e in edges)
            else tuple(None if e is None else np.asarray(e, dtype=float) for e in edges)
        )
        self._cells: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def split_dim(self, h: int, i: int, lower: Sequence[float], upper: Sequence[float]) -> int:
        """The coordinate along which node ``(h, i)`` with cell ``[lower, upper]`` is cut."""
        if self.dim == 1:
            return 0
        if self.split == "random":
            return mix64(self._key, h, i) % self.dim
        widths = [u - lo for lo, u in zip(lower, upper, strict=True)]
        return widths.index(max(widths))

    def child_cells(
        self, h: int, i: int, lower: tuple[float, ...], upper: tuple[float, ...]
    ) -> list[tuple[int, tuple[float, ...], tuple[float, ...]]]:
        """The k children of ``(h, i)`` as ``(index, lower, upper)``, lowest slab first."""
        j = self.split_dim(h, i, lower, upper)
        cuts = None
        if self.edges is not None:
            for step in range(self.dim):  # the drawn coordinate, else the next one it can split
                jj = (j + step) % self.dim
                cuts = self._cuts(jj, lower[jj], upper[jj])
                if cuts is not None:
                    j = jj
                    break
        k = self.k
        if cuts is None:
            a, b = lower[j], upper[j]
            cuts = [a + (b - a) * s / k for s in range(k)] + [b]
        out = []
        for s in range(k):
            lo = (*lower[:j], cuts[s], *lower[j + 1 :])
            up = (*upper[:j], cuts[s + 1], *upper[j + 1 :])
            out.append((k * (i - 1) + 1 + s, lo, up))
        return out

    def _cuts(self, j: int, a: float, b: float) -> list[float] | None:
        """The k + 1 cut points of ``[a, b]`` along coordinate ``j`` (the ``edges``' rule), or
        None if ``[a, b]`` holds one value of a discrete coordinate."""
        assert self.edges is not None
        k, edges = self.k, self.edges[j]
        mids = [a + (b - a) * s / k for s in range(1, k)]
        if edges is None:
            return [a, *mids, b]
        inside = edges[(edges > a) & (edges < b)]
        if inside.size == 0:
            return None
        snapped = [float(inside[np.argmin(np.abs(inside - m))]) for m in mids]
        if len(set(snapped)) < len(snapped):
            return [a, *mids, b]
        return [a, *snapped, b]

    def root_cell(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return tuple(self.domain[:, 0].tolist()), tuple(self.domain[:, 1].tolist())

    def cell(self, h: int, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The cell ``[lower, upper]`` of node ``(h, i)`` (read-only arrays).

        Found by walking down from the root, then cached: federated clients ask for the same
        active nodes every phase, and in-process clients share one partition.
        """
        cached = self._cells.get((h, i))
        if cached is None:
            cached = self._walk(h, i)
            self._cells[(h, i)] = cached
        return cached

    def centres(self, h: int, nodes: Sequence[int] | np.ndarray) -> np.ndarray:
        """Representative points (cell centres) of nodes ``(h, i)``, shape (len(nodes), d)."""
        cells = [self.cell(h, int(i)) for i in nodes]
        return np.array([(lo + up) / 2.0 for lo, up in cells]).reshape(len(cells), self.dim)

    def _walk(self, h: int, i: int) -> tuple[np.ndarray, np.ndarray]:
        if h < 0 or not 1 <= i <= self.k**h:
            raise ValueError(f"no node ({h}, {i}) in a {self.k}-ary tree")
        path = []  # indices from (h, i) up to depth 1
        idx = i
        for _ in range(h):
            path.append(idx)
            idx = self.parent(h, idx)[1]
        lower, upper = self.root_cell()
        depth, index = 0, 1
        for child in reversed(path):
            s = (child - 1) % self.k
            _, lower, upper = self.child_cells(depth, index, lower, upper)[s]
            depth, index = depth + 1, child
        lo, up = np.array(lower), np.array(upper)
        lo.setflags(write=False)
        up.setflags(write=False)
        return lo, up

    def parent(self, h: int, i: int) -> tuple[int, int]:
        """The parent ``(h-1, ceil(i/k))`` of node ``(h, i)``."""
        return h - 1, (i - 1) // self.k + 1
