"""The tests' one config factory: a validated :class:`~fedxab.config.Config` of a simulated job.

:func:`fedxab.api.make_config` builds the config of a job on a *user's* objective; the tests mostly
run the built-in simulated objectives (Garland, Himmelblau, the GP family) with their
heterogeneity models, so they build their configs here. Imported by bare name
(``from config_factory import sim_config``): ``tests/`` is on ``sys.path`` through its
``conftest.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedxab.config import Config, config_from_dict


def sim_config(
    algorithm: str = "fedpne",
    *,
    clients: int | None = None,
    budget: int | None = None,
    objective: str | Mapping[str, Any] = "garland",
    heterogeneity: str | None = None,
    params: Mapping[str, Any] | None = None,
    **sections: Mapping[str, Any],
) -> Config:
    """``clients`` clients running ``algorithm`` (with its ``params``) on the simulated
    ``objective`` (its name, or its whole table: ``{"name": "garland", "noise": {...}}``),
    ``budget`` evaluations each, validated as ``fedxab run`` would.

    A value left None keeps the config's default. Each keyword of ``sections`` is merged into the
    table of that name (``run={"seed": 3}``, ``federation={"global_regret": False}``,
    ``agents``, ``broker``, ``security``, ``privacy``); a bad value raises
    the :class:`~fedxab.errors.ConfigError` a user would see.
    """
    data: dict[str, dict[str, Any]] = {
        "objective": {"name": objective} if isinstance(objective, str) else dict(objective),
        "algorithm": {"name": algorithm, **dict(params or {})},
    }
    if budget is not None:
        data["run"] = {"budget": budget}
    federation = {"clients": clients, "heterogeneity": heterogeneity}
    if any(v is not None for v in federation.values()):
        data["federation"] = {k: v for k, v in federation.items() if v is not None}
    for name, table in sections.items():
        data[name] = {**data.get(name, {}), **dict(table)}
    return config_from_dict(data)
