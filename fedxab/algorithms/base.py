"""The single-agent optimizer contract: ask / tell / recommend.

As in Optuna and nevergrad: ``x = opt.ask()`` hands out the next point to evaluate,
``opt.tell(x, reward)`` reports the noisy reward observed there, and ``opt.recommend()`` returns
the optimizer's current answer without changing its state.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np

from fedxab.errors import InvalidRewardError


@runtime_checkable
class Optimizer(Protocol):
    """What every single-agent optimizer offers."""

    def ask(self) -> np.ndarray:
        """The next point to evaluate, shape (d,)."""
        ...

    def tell(self, x: np.ndarray, reward: float) -> None:
        """Record the reward observed at a point previously returned by :meth:`ask`."""
        ...

    def recommend(self) -> np.ndarray:
        """The current best guess of a maximiser, shape (d,). Never changes state."""
        ...


def check_reward(reward: float, field: str = "reward") -> float:
    """Return ``reward`` as a float, or raise :class:`InvalidRewardError` if it is not finite."""
    try:
        value = float(reward)
    except (TypeError, ValueError) as exc:
        raise InvalidRewardError(f"{field} must be a real number, got {reward!r}") from exc
    if not math.isfinite(value):
        raise InvalidRewardError(
            f"{field} must be finite, got {value!r}; check the objective for NaN/inf at this point"
        )
    return value
