"""Objective names for configs and the CLI, and construction with checked parameters."""

from __future__ import annotations

import inspect
from typing import Any

from fedxab.errors import ConfigError
from fedxab.objectives.base import Objective
from fedxab.objectives.gp import GPGrid
from fedxab.objectives.landmine import LandmineSVM
from fedxab.objectives.synthetic import (
    Ackley,
    DoubleSine,
    Garland,
    Himmelblau,
    Rastrigin,
    SineProduct,
)

__all__ = ["OBJECTIVES", "make_objective", "objective_parameters"]

OBJECTIVES: dict[str, type[Objective]] = {
    "garland": Garland,
    "doublesine": DoubleSine,
    "himmelblau": Himmelblau,
    "rastrigin": Rastrigin,
    "ackley": Ackley,
    "sineproduct": SineProduct,
    "landmine": LandmineSVM,
    "gpgrid": GPGrid,  # "gp-grid": [DP] App. B.1.1 (the family draws f from the run seed)
}


def _lookup(name: object) -> tuple[str, type[Objective]]:
    key = name.strip().lower().replace("_", "").replace("-", "") if isinstance(name, str) else None
    cls = OBJECTIVES.get(key) if key is not None else None
    if key is None or cls is None:
        raise ConfigError(
            "objective.name",
            f"unknown objective {name!r}; allowed: {', '.join(OBJECTIVES)}",
        )
    return key, cls


def objective_parameters(name: str) -> list[str]:
    """The parameters an ``[objective]`` config section may set for objective ``name``."""
    _, cls = _lookup(name)
    return [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


def make_objective(name: str, **params: Any) -> Objective:
    """Build objective ``name`` (case-insensitive; "_" and "-" ignored) with ``params``.

    An unknown name raises ``ConfigError("objective.name", ...)`` listing the allowed names; an
    unknown parameter ``ConfigError("objective.<param>", ...)`` listing the allowed parameters;
    an invalid value the class's own ``ConfigError("objective.<param>", ...)``.
    """
    key, cls = _lookup(name)
    allowed = objective_parameters(key)
    for param in params:
        if param not in allowed:
            raise ConfigError(
                f"objective.{param}",
                f"not a parameter of objective {key!r}; allowed: {', '.join(allowed) or 'none'}",
            )
    return cls(**params)
