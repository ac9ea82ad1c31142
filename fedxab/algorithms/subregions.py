"""Sub-regions of the normalised domain for distributed exploration (Dai, Low & Jaillet 2021).

The domain, normalised to ``[0, 1]^D``, is split into P disjoint axis-aligned boxes of equal
volume. P is factored over the leading dimensions with factors as equal as possible (P = 2: 2 x 1,
P = 3: three slabs along dimension 1, P = 4: 2 x 2, P = 6: 3 x 2), the larger factor first; the
regions are numbered lexicographically, first dimension outermost (the paper's landmine order:
``X_1 = [0,.5) x [0,.5)``, ``X_2 = [0,.5) x [.5,1]``, ...). Intervals are half-open, the last one
closed at 1 (fedxab's choice). Agent n's home region is ``n mod P`` (round-robin, as in the
authors' code).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedxab.errors import ConfigError
from fedxab.validation import check_positive_int

__all__ = ["SubRegions", "split_factors"]


def split_factors(n_regions: int, dim: int) -> tuple[int, ...]:
    """How many slices each dimension gets: P factored over the leading dimensions.

    P's prime factors, largest first, each go to the dimension with the smallest product so far
    (factors as equal as possible), over at most ``dim`` dimensions; sorted larger first.
    """
    primes, rest, p = [], n_regions, 2
    while rest > 1:
        while rest % p == 0:
            primes.append(p)
            rest //= p
        p += 1
    factors = [1] * min(dim, max(1, len(primes)))
    for prime in sorted(primes, reverse=True):
        smallest = factors.index(min(factors))
        factors[smallest] *= prime
    factors.sort(reverse=True)
    return tuple(factors + [1] * (dim - len(factors)))


@dataclass(frozen=True)
class SubRegions:
    """P equal sub-regions of ``[0, 1]^D``."""

    dim: int
    n_regions: int

    def __post_init__(self) -> None:
        check_positive_int("dim", self.dim)
        check_positive_int("algorithm.regions", self.n_regions)
        object.__setattr__(self, "_factors", split_factors(self.n_regions, self.dim))

    @property
    def factors(self) -> tuple[int, ...]:
        """Slices per dimension (product = P)."""
        return self._factors  # type: ignore[attr-defined]

    def region_of(self, X: np.ndarray) -> np.ndarray:
        """The region index i[x] in [0, P) of each row of X (n, D), points of ``[0, 1]^D``
        (clipped there first, as the release does)."""
        X = np.asarray(X, dtype=float)
        index = np.zeros(X.shape[0], dtype=np.int64)
        for d, k in enumerate(self.factors):
            if k == 1:
                continue  # one slice: every point's slot is 0
            x = np.clip(X[:, d], 0.0, 1.0)
            slot = np.minimum((x * k).astype(np.int64), k - 1)  # [j/k, (j+1)/k), last closed
            index = index * k + slot
        return index

    def bounds(self, region: int) -> np.ndarray:
        """The (D, 2) box of region ``region``."""
        if not 0 <= region < self.n_regions:
            raise ConfigError("region", f"must lie in 0..{self.n_regions - 1}, got {region}")
        slots = []
        for k in reversed(self.factors):
            slots.append(region % k)
            region //= k
        slots.reverse()
        return np.array(
            [[j / k, (j + 1) / k] for j, k in zip(slots, self.factors, strict=True)], dtype=float
        )

    def home(self, agent: int) -> int:
        """Agent ``agent``'s home region, round-robin ``n mod P`` (as the authors' code)."""
        return agent % self.n_regions
