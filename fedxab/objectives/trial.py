"""An Optuna-style trial that answers from the point an algorithm chose.

A user's existing Optuna objective, ``def objective(trial): ... trial.suggest_float(...)``,
runs unchanged under fedxab: each evaluation hands it a :class:`Trial` whose ``suggest_*``
calls return the parameters decoded from the algorithm's point (:meth:`SearchSpace.decode
<fedxab.space.SearchSpace.decode>`). The space is declared once (``space=`` or ``[space]``, or
Optuna's own distributions); a ``suggest_*`` call must ask for a parameter of the space with
the same type and range, else it raises :class:`SpaceMismatchError` on the first evaluation,
before the function can return a value (and :func:`call_with_trial` raises it even if the
function caught it). This is fedxab's own small class, duck-typed like ``optuna.Trial`` for
what an objective uses: ``suggest_float``, ``suggest_int``, ``suggest_categorical``,
``params``, ``distributions``, ``number``, ``set_user_attr``/``user_attrs``, and
``report``/``should_prune`` (no pruning: a fedxab evaluation always runs to the end).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fedxab.errors import ConfigError
from fedxab.space import Categorical, Float, Int, Param, SearchSpace

__all__ = ["SpaceMismatchError", "Trial", "call_with_trial"]


class SpaceMismatchError(ConfigError):
    """The objective asked for a parameter that the declared space does not have, or has with
    another type or range."""


def _show(param: Param) -> str:
    fields = ", ".join(f"{k}={v!r}" for k, v in param.to_dict().items() if k != "type")
    return f"{type(param).__name__}({fields})"


class Trial:
    """One evaluation's parameters, asked for by name as with ``optuna.Trial``."""

    def __init__(self, space: SearchSpace, values: dict[str, Any], number: int) -> None:
        self.number = number
        """The evaluation's index at this client (0, 1, ...), as Optuna's ``trial.number``."""
        self.params: dict[str, Any] = {}
        """The parameters asked for so far, by name."""
        self.distributions: dict[str, Param] = {}
        """Their types, by name (fedxab's :mod:`fedxab.space` parameters)."""
        self.user_attrs: dict[str, Any] = {}
        self._space = space
        self._values = values
        self.error: SpaceMismatchError | None = None
        """The first mismatch between a ``suggest_*`` call and the space, if any."""

    def _suggest(self, name: str, asked: Param) -> Any:
        space = self._space
        if name not in space.params:
            error = SpaceMismatchError(
                f"space.{name}",
                f"the objective asks for {name!r} ({_show(asked)}), which the space does not "
                f"have; it has {', '.join(space.names)}",
            )
        elif space.params[name] != asked:
            error = SpaceMismatchError(
                f"space.{name}",
                f"the objective asks for {_show(asked)} but the space declares "
                f"{_show(space.params[name])}; make them the same",
            )
        else:
            self.params[name] = self._values[name]
            self.distributions[name] = asked
            return self._values[name]
        self.error = self.error or error
        raise error

    def _asked(self, name: str, make: Callable[[], Param]) -> Param:
        try:
            return make()
        except ConfigError as exc:  # a bad range in the objective's own call
            error = SpaceMismatchError(f"space.{name}", f"the objective's call: {exc.message}")
            self.error = self.error or error
            raise error from None

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        """The value of float parameter ``name`` (as ``optuna.Trial.suggest_float``)."""
        return self._suggest(name, self._asked(name, lambda: Float(low, high, log=log, step=step)))

    def suggest_int(
        self, name: str, low: int, high: int, *, step: int = 1, log: bool = False
    ) -> int:
        """The value of integer parameter ``name`` (as ``optuna.Trial.suggest_int``)."""
        return self._suggest(name, self._asked(name, lambda: Int(low, high, log=log, step=step)))

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        """The value of categorical parameter ``name`` (as
        ``optuna.Trial.suggest_categorical``)."""
        return self._suggest(name, self._asked(name, lambda: Categorical(choices)))

    def set_user_attr(self, key: str, value: Any) -> None:
        """Keep ``value`` under ``key`` in :attr:`user_attrs` (this evaluation only)."""
        self.user_attrs[key] = value

    def report(self, value: float, step: int) -> None:
        """Accepted and ignored: fedxab does not prune evaluations."""

    def should_prune(self) -> bool:
        """Always False: fedxab does not prune evaluations."""
        return False


def call_with_trial(
    fn: Callable[..., Any], space: SearchSpace, values: dict[str, Any], number: int
) -> Any:
    """``fn(trial)`` on a :class:`Trial` of ``values``; a mismatch with the space raises even
    if ``fn`` caught it."""
    trial = Trial(space, values, number)
    try:
        value = fn(trial)
    except SpaceMismatchError:
        raise
    except Exception:
        if trial.error is not None:
            raise trial.error from None
        raise
    if trial.error is not None:
        raise trial.error
    return value
