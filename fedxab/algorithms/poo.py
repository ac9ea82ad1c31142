"""POO(HCT): Parallel Optimistic Optimization with HCT as the subroutine.

Shang, Kaufmann & Valko (2018) §4 run POO (Grill, Valko & Munos 2015) over HCT instances that
differ only in ``rho`` (fedxab uses ``nu = nu_max`` for all of them). "Parallel" means
interleaved on one evaluation budget. The schedule (Grill et al. 2015, Algorithm 1):

- keep ``N ~ 1/2 D_max log(n / log n)`` instances, ``D_max = log K / log(1/rho_max)``: while
  ``n >= 2`` and ``N <= 1/2 D_max log(n / log n)``, add ``N`` new instances with
  ``rho = rho_max^(2N/(2i+1))``, each caught up with ``n/N`` evaluations, then ``n <- 2n``,
  ``N <- 2N``;
- otherwise one round-robin sweep, one evaluation per instance in creation order, ``n <- n + N``.

``rho_grid`` selects the index range of the new instances:

- ``"zero-based"`` (default, fedxab's reading): ``i = 0, ..., N-1``, so that after doubling to
  ``N'`` the grid is exactly ``{rho_max^(N'/j) : j = 1..N'}`` and never exceeds ``rho_max``;
- ``"literal"``: ``i = 1, ..., N`` as the original paper prints it (gives values above ``rho_max``).

Recommendation: the instance with the largest empirical mean reward (all its rewards, catch-up
included; ties to the earliest), then that instance's recommendation: ``"lcb"`` (default,
HCT's practical rule) or ``"history"`` (P1's rule: a uniform draw from that instance's pulls).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from fedxab.algorithms.hct import HCT, RECOMMENDATIONS
from fedxab.errors import ConfigError, UnknownPointError
from fedxab.validation import check_choice, check_nu, check_rho

RHO_GRIDS = ("zero-based", "literal")


@dataclass(frozen=True)
class Doubling:
    """One doubling of the instance set: at schedule count ``n`` with ``n_before`` instances."""

    n: int
    n_before: int
    threshold: float
    exponents: tuple[float, ...]  # new instances have rho = rho_max ** exponent


class POO:
    """POO(HCT) with the ask/tell/recommend interface.

    ``preset``, ``c``, ``c1``, ``delta`` and the partition options are passed to every HCT
    instance; with the theory preset each instance gets ``c = 2/sqrt(1-rho_s)`` and
    ``c1 = (rho_s/(3 nu_max))^(1/8)``, and ``delta = 1/budget`` (the total budget).
    """

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        nu_max: float = 1.0,
        rho_max: float = 0.9,
        preset: str = "practical",
        c: float | None = None,
        c1: float | None = None,
        delta: float | None = None,
        budget: int | None = None,
        k: int = 2,
        split: str = "random",
        point: str = "centre",
        rho_grid: str = "zero-based",
        recommendation: str = "lcb",
        seed: int = 0,
    ) -> None:
        self.nu_max = check_nu("algorithm.nu_max", nu_max)
        self.rho_max = check_rho("algorithm.rho_max", rho_max)
        self.rho_grid = check_choice("algorithm.rho_grid", rho_grid, RHO_GRIDS)
        self.recommendation = check_choice(
            "algorithm.recommendation", recommendation, RECOMMENDATIONS
        )
        if preset == "theory" and delta is None:
            if budget is None:
                raise ConfigError(
                    "algorithm.delta",
                    "the theory preset sets delta = 1/budget: give the budget or an explicit delta",
                )
            delta = 1.0 / budget
        self._new_hct = partial(  # one HCT instance of smoothness (nu_max, rho)
            HCT,
            domain,
            nu=self.nu_max,
            preset=preset,
            c=c,
            c1=c1,
            delta=delta,
            budget=budget,
            k=k,
            split=split,
            point=point,
            recommendation=recommendation,
            seed=seed,
        )
        self.domain = domain
        self.d_max = math.log(k) / math.log(1.0 / self.rho_max)
        self.instances: list[HCT] = []
        self.rhos: list[float] = []
        self.doublings: list[Doubling] = []
        self._n = 0  # schedule counter n (evaluations planned so far, all instances)
        self._queue: deque[int] = deque()  # instance ids to ask next
        self._pending: dict[bytes, list[int]] = {}
        self.t = 0
        self._add_instance(self.rho_max)

    def _add_instance(self, rho: float) -> None:
        self.instances.append(self._new_hct(rho=rho))
        self.rhos.append(rho)

    def _threshold(self, n: int) -> float:
        return 0.5 * self.d_max * math.log(n / math.log(n))

    def _plan(self) -> None:
        """Queue the next block of the schedule: doublings with catch-up, then one sweep."""
        n_inst = len(self.instances)
        while self._n >= 2 and n_inst <= self._threshold(self._n):
            first = 0 if self.rho_grid == "zero-based" else 1
            exponents = tuple(2 * n_inst / (2 * i + 1) for i in range(first, first + n_inst))
            self.doublings.append(Doubling(self._n, n_inst, self._threshold(self._n), exponents))
            catch_up = self._n // n_inst
            for e in exponents:
                self._add_instance(self.rho_max**e)
                self._queue.extend([len(self.instances) - 1] * catch_up)
            self._n *= 2
            n_inst *= 2
        self._queue.extend(range(n_inst))
        self._n += n_inst

    def ask(self) -> np.ndarray:
        if not self._queue:
            self._plan()
        s = self._queue.popleft()
        x = self.instances[s].ask()
        self._pending.setdefault(x.tobytes(), []).append(s)
        return x

    def tell(self, x: np.ndarray | Sequence[float], reward: float) -> None:
        key = np.asarray(x, dtype=float).tobytes()
        waiting = self._pending.get(key)
        if not waiting:
            raise UnknownPointError(
                f"tell() got a point that ask() did not hand out (or that was already told): "
                f"{np.asarray(x).tolist()}"
            )
        self.instances[waiting[0]].tell(x, reward)  # validates the reward before we commit
        waiting.pop(0)
        if not waiting:
            del self._pending[key]
        self.t += 1

    def best_instance(self) -> int:
        """The instance with the largest empirical mean reward (ties: earliest created)."""
        means = [inst.empirical_mean() for inst in self.instances]
        return means.index(max(means))

    def recommend(self) -> np.ndarray:
        return self.instances[self.best_instance()].recommend()
