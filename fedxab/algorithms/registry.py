"""Algorithm names for configs and the CLI, and construction with checked parameters."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from fedxab.algorithms.base import Optimizer
from fedxab.algorithms.hct import HCT
from fedxab.algorithms.poo import POO
from fedxab.errors import ConfigError

ALGORITHMS: dict[str, type] = {"hct": HCT, "poo": POO}

# Set by the run (config [run] section), not by [algorithm] parameters.
_RUN_LEVEL = ("domain", "seed", "budget")


def algorithm_parameters(name: str) -> list[str]:
    """The parameters an ``[algorithm]`` config section may set for algorithm ``name``."""
    sig = inspect.signature(ALGORITHMS[name])
    return [p for p in sig.parameters if p not in _RUN_LEVEL]


def make_optimizer(
    name: str, domain: np.ndarray, *, seed: int, budget: int, params: dict[str, Any]
) -> Optimizer:
    """Build the single-agent optimizer ``name`` with ``params`` from a config section."""
    cls = ALGORITHMS.get(name)
    if cls is None:
        raise ConfigError(
            "algorithm.name",
            f"unknown algorithm {name!r}; allowed: {', '.join(sorted(ALGORITHMS))}",
        )
    allowed = algorithm_parameters(name)
    for key in params:
        if key not in allowed:
            raise ConfigError(
                f"algorithm.{key}",
                f"not a parameter of {name!r}; allowed: {', '.join(allowed)}",
            )
    try:
        return cls(domain, seed=seed, budget=budget, **params)
    except TypeError as exc:  # e.g. a string where a number is expected
        raise ConfigError(f"algorithm ({name})", str(exc)) from exc
