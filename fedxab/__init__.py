"""fedxab: federated and distributed black-box optimization with differential privacy.

The names users need, importable from ``fedxab`` directly (each loaded on first use, so
``import fedxab`` stays cheap)::

    import fedxab

    results = fedxab.federate([f0, f1, f2], domain=[[0, 1], [0, 1]], budget=2000)
    results.runs[0].recommendation, results.runs[0].clients[0].best_value

- optimizers (ask/tell): :class:`HCT`, :class:`POO`;
- federating users' functions: :func:`federate`, :func:`make_config`, :func:`run_job`,
  :func:`serve`, :func:`host_clients`, :class:`AskTellClient`;
- configs: :func:`load_config`, :func:`config_from_dict`, :func:`default_config`,
  :class:`Config`;
- results: :class:`RunResults`, :class:`RunRecord`, :class:`ClientOutcome`,
  :func:`load_results`, :func:`write_results`;
- typed search spaces: :class:`SearchSpace`, :class:`Float`, :class:`Int`, :class:`Categorical`;
- objectives: :class:`FunctionObjective`; errors: :class:`FedxabError`, :class:`ConfigError`,
  :class:`ProtocolMismatchError`; the run identity: :func:`run_id_for`.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("fedxab")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

_PUBLIC = {
    "HCT": "fedxab.algorithms.hct",
    "POO": "fedxab.algorithms.poo",
    "federate": "fedxab.api",
    "make_config": "fedxab.api",
    "run_job": "fedxab.api",
    "serve": "fedxab.api",
    "host_clients": "fedxab.api",
    "AskTellClient": "fedxab.api",
    "Config": "fedxab.config",
    "load_config": "fedxab.config",
    "config_from_dict": "fedxab.config",
    "default_config": "fedxab.config",
    "RunResults": "fedxab.results",
    "RunRecord": "fedxab.results",
    "load_results": "fedxab.results",
    "write_results": "fedxab.results",
    "ClientOutcome": "fedxab.run.outcome",
    "FunctionObjective": "fedxab.objectives.wrap",
    "SearchSpace": "fedxab.space",
    "Float": "fedxab.space",
    "Int": "fedxab.space",
    "Categorical": "fedxab.space",
    "FedxabError": "fedxab.errors",
    "ConfigError": "fedxab.errors",
    "ProtocolMismatchError": "fedxab.run.identity",
    "run_id_for": "fedxab.run.identity",
}
"""Public name -> the module that defines it."""

if TYPE_CHECKING:  # the same names, for type checkers and the API reference (never run)
    from fedxab.algorithms.hct import HCT
    from fedxab.algorithms.poo import POO
    from fedxab.api import (
        AskTellClient,
        federate,
        host_clients,
        make_config,
        run_job,
        serve,
    )
    from fedxab.config import (
        Config,
        config_from_dict,
        default_config,
        load_config,
    )
    from fedxab.errors import ConfigError, FedxabError
    from fedxab.objectives.wrap import FunctionObjective
    from fedxab.results import (
        RunRecord,
        RunResults,
        load_results,
        write_results,
    )
    from fedxab.run.identity import (
        ProtocolMismatchError,
        run_id_for,
    )
    from fedxab.run.outcome import ClientOutcome
    from fedxab.space import Categorical, Float, Int, SearchSpace

__all__ = [
    "HCT",
    "POO",
    "AskTellClient",
    "Categorical",
    "ClientOutcome",
    "Config",
    "ConfigError",
    "FedxabError",
    "Float",
    "FunctionObjective",
    "Int",
    "ProtocolMismatchError",
    "RunRecord",
    "RunResults",
    "SearchSpace",
    "config_from_dict",
    "default_config",
    "federate",
    "host_clients",
    "load_config",
    "load_results",
    "make_config",
    "run_id_for",
    "run_job",
    "serve",
    "write_results",
]
"""The names of ``_PUBLIC``, written out (a literal list, which type checkers and the API
reference read without running the code)."""


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'fedxab' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
