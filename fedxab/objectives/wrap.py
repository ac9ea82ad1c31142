"""Turn a user's plain Python function into an :class:`~fedxab.objectives.base.Objective`."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fedxab.errors import ObjectiveError
from fedxab.objectives.base import Objective

__all__ = ["FunctionObjective"]


def _point(x: np.ndarray) -> str:
    return "[" + ", ".join(repr(float(v)) for v in x) + "]"


class FunctionObjective(Objective):
    """An objective (to MAXIMISE) from a callable.

    By default ``fn`` takes ONE point, a 1-D float array of length d, and returns a real number;
    the batch is evaluated row by row. With ``vectorized=True`` ``fn`` takes the whole (n, d) batch
    and returns n values. Every returned value must be a finite real number (bools, complex
    numbers, None, NaN and infinities are rejected) and an :class:`ObjectiveError` names the
    offending point. Exceptions raised by ``fn`` itself propagate unchanged. ``optimum_value`` and
    ``maximizer`` (when known) enable regret; ``name`` is used in messages.
    """

    trials: Any = None
    """A user's objective: the :class:`~fedxab.objectives.history.TrialLog` of its calls (set by
    :func:`~fedxab.objectives.user.user_objectives`); None otherwise."""

    def __init__(
        self,
        fn: Callable[[np.ndarray], Any],
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        vectorized: bool = False,
        optimum_value: float | None = None,
        maximizer: Sequence[float] | np.ndarray | None = None,
        name: str | None = None,
    ) -> None:
        if not callable(fn):
            raise ObjectiveError(f"FunctionObjective: fn must be callable, got {fn!r}")
        self.name = name if name is not None else getattr(fn, "__name__", "function")
        self.fn = fn
        self.vectorized = bool(vectorized)
        super().__init__(domain, optimum_value, maximizer)

    def _scalar(self, value: Any, x: np.ndarray) -> float:
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.reshape(()).item()
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            raise ObjectiveError(
                f"{self.name}: returned {value!r} (type {type(value).__name__}) at point "
                f"{_point(x)}; the function must return a finite real number"
            )
        v = float(value)
        if not np.isfinite(v):
            raise ObjectiveError(
                f"{self.name}: returned {v!r} at point {_point(x)}; "
                "the function must return a finite real number"
            )
        return v

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        if not self.vectorized:
            return np.array([self._scalar(self.fn(row.copy()), row) for row in X], dtype=float)
        raw = self.fn(X.copy())
        if np.iscomplexobj(raw):
            raise ObjectiveError(
                f"{self.name}: vectorized function returned complex values; "
                "the function must return finite real numbers"
            )
        try:
            y = np.asarray(raw, dtype=float).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise ObjectiveError(
                f"{self.name}: vectorized function returned {type(raw).__name__}, "
                f"expected {X.shape[0]} real numbers ({exc})"
            ) from exc
        if y.shape[0] != X.shape[0]:
            raise ObjectiveError(
                f"{self.name}: vectorized function returned {y.shape[0]} values "
                f"for {X.shape[0]} points"
            )
        bad = np.nonzero(~np.isfinite(y))[0]
        if bad.size:
            i = int(bad[0])
            raise ObjectiveError(
                f"{self.name}: returned {y[i]!r} at point {_point(X[i])}; "
                "the function must return a finite real number"
            )
        return y
