"""Optuna's distribution objects as fedxab parameters, without importing Optuna.

A user who has Optuna distributions (``FloatDistribution``, ``IntDistribution``,
``CategoricalDistribution``, e.g. a finished study's ``best_trial.distributions``) may pass
them as a space; they are read by their attributes (``low``, ``high``, ``log``, ``step``,
``choices``), so fedxab never needs Optuna unless the user already has it.
"""

from __future__ import annotations

from typing import Any

from fedxab.errors import ConfigError
from fedxab.space import Categorical, Float, Int, Param

__all__ = ["convert_distribution", "is_optuna_distribution"]

_NAMES = ("FloatDistribution", "IntDistribution", "CategoricalDistribution")


def is_optuna_distribution(value: Any) -> bool:
    """Whether ``value`` is one of Optuna's distribution objects."""
    cls = type(value)
    return cls.__module__.split(".")[0] == "optuna" and cls.__name__ in _NAMES


def convert_distribution(name: str, dist: Any) -> Param:
    """The fedxab parameter of Optuna's distribution ``dist`` (the same values)."""
    kind = type(dist).__name__
    if kind == "FloatDistribution":
        return Float(dist.low, dist.high, log=bool(dist.log), step=dist.step)
    if kind == "IntDistribution":
        return Int(dist.low, dist.high, log=bool(dist.log), step=dist.step)
    if kind == "CategoricalDistribution":
        return Categorical(list(dist.choices))
    raise ConfigError(f"space.{name}", f"unsupported Optuna distribution {kind}")
