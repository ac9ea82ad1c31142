"""The objective contract: what every objective provides.

An objective is a noise-free, vectorized function ``f(X) -> y`` on a box domain, to be MAXIMISED.
``X`` has shape (n, d) and ``y`` has shape (n,). Where known, an objective carries its optimum value
``optimum_value`` and one maximiser ``maximizer``, which are needed to compute regret. Noise is not
part of an objective: it is a separate :class:`~fedxab.objectives.noise.NoiseModel` with its own
random stream.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedxab.domain import as_domain
from fedxab.errors import ObjectiveError


class Objective:
    """Base class: subclasses implement :meth:`_evaluate` on a validated (n, d) float array."""

    name: str = "objective"

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        optimum_value: float | None = None,
        maximizer: Sequence[float] | np.ndarray | None = None,
    ) -> None:
        self.domain = as_domain(domain)
        self.optimum_value = None if optimum_value is None else float(optimum_value)
        if maximizer is None:
            self.maximizer = None
        else:
            m = np.asarray(maximizer, dtype=float).reshape(-1)
            if m.shape != (self.dim,):
                raise ObjectiveError(
                    f"{self.name}: maximizer must have {self.dim} coordinates, got shape {m.shape}"
                )
            m.setflags(write=False)
            self.maximizer = m

    @property
    def dim(self) -> int:
        return int(self.domain.shape[0])

    def __call__(self, X: np.ndarray | Sequence[float] | Sequence[Sequence[float]]) -> np.ndarray:
        """Evaluate at a batch ``X`` of shape (n, d) (a single point of shape (d,) is accepted)."""
        arr = np.asarray(X, dtype=float)
        if arr.ndim == 1 and arr.shape[0] == self.dim:
            arr = arr.reshape(1, self.dim)
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise ObjectiveError(
                f"{self.name}: points must have shape (n, {self.dim}), got {arr.shape}"
            )
        y = np.asarray(self._evaluate(arr), dtype=float).reshape(-1)
        if y.shape[0] != arr.shape[0]:
            raise ObjectiveError(
                f"{self.name}: returned {y.shape[0]} values for {arr.shape[0]} points"
            )
        return y

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def regret(self, X: np.ndarray) -> np.ndarray:
        """Instantaneous regret ``f* - f(x)`` of each row of ``X``; needs a known optimum."""
        if self.optimum_value is None:
            raise ObjectiveError(f"{self.name}: optimum value unknown, regret cannot be computed")
        return self.optimum_value - self(X)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim}, optimum_value={self.optimum_value})"
