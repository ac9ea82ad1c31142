"""Run configuration: a TOML file -> validated, frozen dataclasses.

A configuration has one section per concern. Today these are::

    [run]                  # algorithm-independent settings
    seed = 0               # int >= 0; run k of `repeats` uses seed + k
    repeats = 3            # int >= 1: independent runs
    budget = 20000         # int > 0: evaluations per client (the horizon T)
    output = "results"     # directory that receives results.json

    [objective]
    name = "garland"       # see fedxab.objectives.registry
    # ... any further key is a parameter of the objective
    noise = "uniform"      # a noise model's name, or a table:
    # [objective.noise]
    # name = "uniform"
    # half_width = 0.1

    [algorithm]
    name = "hct"           # see fedxab.algorithms.registry
    # ... any further key is a parameter of the algorithm

    [federation]           # federated algorithms only (e.g. name = "fedpne")
    clients = 10           # int >= 1: the number of clients M
    heterogeneity = "offset"   # "offset" (f_m = f + xi_m), "shift" (f_m(x) = f(x - s_m)), "none"
    # heterogeneity_scale = 1.0  # sd of xi_m ("offset", default 1) or of s_m ("shift", default
    #                            # 0.05 x each coordinate range)

Validation happens at the boundary, in the scikit-learn spirit: every bad value raises a
:class:`~fedxab.errors.ConfigError` whose ``field`` is the dotted key (``run.budget``,
``algorithm.name``, ...) and whose message says what was given and what is allowed. Objective and
algorithm names and parameters are checked by building the objects once through their registries,
so a config that loads is a config that runs.

Adding a section later (privacy, broker, monitoring) means writing one frozen dataclass
deriving from :class:`Section` (fields with defaults; range checks in ``_check``) and adding one
field to :class:`Config`; parsing, unknown-key and type errors, and ``to_dict`` come for free.
A section that only some algorithms take (``[federation]``) is an optional field (``None`` when
absent) listed in ``_OPTIONAL_SECTIONS``.

The algorithm's name decides the kind of run: a federated algorithm
(:data:`fedxab.algorithms.registry.FEDERATED`) always has a ``[federation]`` section (its
defaults if the file has none); a single-agent algorithm with a ``[federation]`` section is an
error naming ``federation``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import re
import reprlib
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Self

import numpy as np

from fedxab.algorithms.auto import AUTO, choose_algorithm
from fedxab.algorithms.registry import (
    FEDERATED,
    NO_PARTICIPATION,
    PRIVATE,
    is_federated,
    make_federation,
    make_optimizer,
)
from fedxab.broker.base import (
    DEFAULT_FETCH_MAX_WAIT_MS,
    DEFAULT_MAX_MESSAGE_BYTES,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    check_fetch_max_wait_ms,
    check_max_message_bytes,
)
from fedxab.broker.topics import TopicSettings, topic_config_table
from fedxab.domain import as_domain
from fedxab.errors import ConfigError
from fedxab.objectives.noise import make_noise
from fedxab.objectives.registry import make_objective
from fedxab.privacy.accountants import ACCOUNTANTS, DEFAULT_TIMEOUT_S
from fedxab.space import SearchSpace
from fedxab.validation import check_choice, check_positive

__all__ = [
    "AgentsConfig",
    "AlgorithmConfig",
    "BrokerConfig",
    "Config",
    "FederationConfig",
    "NoiseConfig",
    "ObjectiveConfig",
    "RunConfig",
    "Section",
    "SecurityConfig",
    "SpaceConfig",
    "config_from_dict",
    "default_config",
    "load_config",
]

_TYPE_NAMES: dict[type, str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "a boolean (true/false)",
}


_SHORT = reprlib.Repr()
"""How an error shows a value: cut to a few items and levels (a value may be 10 MB of text
or lists nested thousands deep)."""
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = 3, 60, 60, 6, 6


def _describe(value: object) -> str:
    return f"{_SHORT.repr(value)} ({type(value).__name__})"


def _coerce(field: str, value: object, expected: Any) -> object:
    """Check ``value`` against a scalar field type; ints are accepted where floats are expected.

    ``X | None`` accepts ``None`` or a value of type ``X``.
    """
    args = typing.get_args(expected)
    if type(None) in args:
        if value is None:
            return None
        (expected,) = [a for a in args if a is not type(None)]
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif expected is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok:
            value = float(value)  # type: ignore[arg-type]
            if not math.isfinite(value):
                raise ConfigError(field, f"expected a finite number, got {value!r}")
    else:
        ok = isinstance(value, expected)
    if not ok:
        want = _TYPE_NAMES.get(expected, expected.__name__)
        raise ConfigError(field, f"expected {want}, got {_describe(value)}")
    return value


MAX_NESTING = 16
"""Deepest nesting of lists and tables a parameter may have."""


def _check_param_value(field: str, value: object, depth: int = 0) -> None:
    """Parameters passed through to a registry must be plain data (they are echoed as JSON),
    nested at most :data:`MAX_NESTING` deep."""
    if depth > MAX_NESTING:
        raise ConfigError(field, f"nested deeper than {MAX_NESTING} lists or tables")
    if isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(field, f"expected a finite number, got {value!r}")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_param_value(f"{field}[{i}]", item, depth + 1)
        return
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                raise ConfigError(field, f"table keys must be strings, got {_describe(k)}")
            _check_param_value(f"{field}.{k}", item, depth + 1)
        return
    raise ConfigError(
        field,
        f"expected a number, string, boolean, list or table, got {_describe(value)}",
    )


def _frozen_params(field: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
    for key, value in params.items():
        _check_param_value(f"{field}.{key}", value)
    return MappingProxyType(copy.deepcopy(dict(params)))


def _plain(value: Any) -> Any:
    """A deep copy of ``value`` made of dicts, lists and scalars only (for to_dict / JSON)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _as_table(field: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(field, f"expected a table ([{field}]), got {_describe(value)}")
    return value


def _unknown_key(field: str, key: str, allowed: typing.Iterable[str], where: str) -> ConfigError:
    return ConfigError(
        field,
        f"unknown key {key!r} in {where}; allowed keys: {', '.join(sorted(allowed))}",
    )


@dataclasses.dataclass(frozen=True)
class Section:
    """Base of a config section made of scalar fields (int, float, str, bool) with defaults.

    Subclasses set ``SECTION`` (the TOML table name) and put range checks in :meth:`_check`.
    Types are checked on construction, so a section built in code is validated too.
    """

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            expected = hints[f.name]
            value = _coerce(f"{self.SECTION}.{f.name}", getattr(self, f.name), expected)
            object.__setattr__(self, f.name, value)
        self._check()

    def _check(self) -> None:
        """Range checks; raise ConfigError naming the field."""

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> Self:
        table = _as_table(cls.SECTION, table)
        allowed = [f.name for f in dataclasses.fields(cls)]
        for key in table:
            if key not in allowed:
                raise _unknown_key(f"{cls.SECTION}.{key}", key, allowed, f"[{cls.SECTION}]")
        return cls(**table)

    def to_dict(self) -> dict[str, Any]:
        """Plain data; optional fields that are ``None`` are left out (TOML has no null)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }


MAX_BUDGET = 10**8
"""Most evaluations per client a run takes: a run keeps a few numbers per evaluation (2.4 GB of
regret bookkeeping for one client at 10^8)."""

MAX_CLIENTS = 1_000_000
"""Most clients a federation takes (every party keeps a few numbers per client; the issue's
largest deployment has 100,000)."""


MAX_REPEATS = 100_000
"""Most runs one job takes (each is a run of its own, kept in ``runs/``)."""

MAX_SEED = 2**63 - 1
"""Largest seed a run takes (``seed + repeats - 1``; a ``numpy.random.SeedSequence`` entropy)."""


def _check_path(field: str, path: str) -> None:
    """``path`` must be one the file system can hold: no NUL byte, encodable, at most 4,096
    bytes, each part at most 255 (Linux's PATH_MAX and NAME_MAX)."""
    if "\x00" in path:
        raise ConfigError(field, "must not contain a NUL byte")
    try:
        encoded = os.fsencode(path)
    except UnicodeError:
        raise ConfigError(field, "must be a path this system can encode") from None
    if len(encoded) > 4096:
        raise ConfigError(field, f"must be at most 4,096 bytes long, got {len(encoded):,}")
    if any(len(part) > 255 for part in encoded.split(b"/")):
        raise ConfigError(field, "each directory name must be at most 255 bytes long")


@dataclasses.dataclass(frozen=True)
class RunConfig(Section):
    """``[run]``: what every run has, whatever the algorithm."""

    SECTION: ClassVar[str] = "run"

    seed: int = 0
    """Seed of the first run; run k of ``repeats`` uses ``seed + k``."""
    repeats: int = 1
    """Number of independent runs (seeds ``seed, seed+1, ...``)."""
    budget: int = 20_000
    """Evaluations per client: the horizon T."""
    output: str = "results"
    """Directory (relative to the working directory) that receives ``results.json``."""
    workers: int = 1
    """Processes that host the clients of an in-process federated run: 1 (the default) runs them
    in this process; N > 1 splits them across N worker processes (:mod:`fedxab.agents.workers`),
    with the same results."""

    def _check(self) -> None:
        if self.seed < 0:
            raise ConfigError("run.seed", f"must be an integer >= 0, got {self.seed}")
        if not 1 <= self.repeats <= MAX_REPEATS:
            raise ConfigError(
                "run.repeats", f"must be an integer in 1..{MAX_REPEATS:,}, got {self.repeats}"
            )
        if self.seed + self.repeats > MAX_SEED:
            raise ConfigError(
                "run.seed", f"seed + repeats must be at most {MAX_SEED:,}, got {self.seed}"
            )
        if not 0 < self.budget <= MAX_BUDGET:
            raise ConfigError(
                "run.budget",
                f"must be an integer in 1..{MAX_BUDGET:,} (evaluations per client), got "
                f"{self.budget}",
            )
        if not self.output.strip():
            raise ConfigError("run.output", "must be a non-empty directory path")
        _check_path("run.output", self.output)
        if self.workers < 1:
            raise ConfigError(
                "run.workers",
                f"must be an integer >= 1 (processes hosting clients), got {self.workers}",
            )

    @property
    def seeds(self) -> list[int]:
        """The seed of each run."""
        return [self.seed + k for k in range(self.repeats)]


def _default_noise_params() -> Mapping[str, Any]:
    return MappingProxyType({"half_width": 0.1})


@dataclasses.dataclass(frozen=True)
class NoiseConfig:
    """``objective.noise``: the observation noise model and its parameters."""

    name: str = "uniform"
    params: Mapping[str, Any] = dataclasses.field(default_factory=_default_noise_params)

    def __post_init__(self) -> None:
        _coerce("objective.noise.name", self.name, str)
        object.__setattr__(self, "params", _frozen_params("objective.noise", self.params))

    @classmethod
    def from_value(cls, value: object) -> NoiseConfig:
        """``noise = "name"`` (default parameters) or a table with ``name`` and parameters."""
        if isinstance(value, str):
            return cls(name=value, params={})
        if not isinstance(value, Mapping):
            raise ConfigError(
                "objective.noise",
                f"expected a noise model name or a table with name and parameters, "
                f"got {_describe(value)}",
            )
        if "name" not in value:
            raise ConfigError(
                "objective.noise.name",
                'missing; give the noise model, e.g. name = "gaussian" in [objective.noise]',
            )
        params = {k: v for k, v in value.items() if k != "name"}
        return cls(name=value["name"], params=params)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **_plain(self.params)}


DIRECTIONS = ("maximize", "minimize")

_USER_OBJECTIVE_KEYS = (
    "function",
    "domain",
    "direction",
    "vectorized",
    "deterministic",
    "style",
    "kwargs",
)
"""``[objective]`` keys of a user's own objective (:mod:`fedxab.objectives.user`)."""

_USER_DEFAULTS: dict[str, Any] = {
    "domain": None,
    "direction": "maximize",
    "vectorized": False,
    "deterministic": False,
    "style": "auto",
    "kwargs": {},
}
"""The defaults of the user-objective keys (a built-in objective takes none of them)."""

STYLES = ("auto", "params", "trial")
"""How a user's function over a ``[space]`` is called: given the parameters as a dict
(``params``), an Optuna-style trial (``trial``), or chosen from its first parameter's name
(``auto``: ``trial`` if that name is ``trial``, else ``params``)."""


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
    """``[objective]``: a built-in test function (``name`` + parameters) or the user's own
    function, and the noise model.

    A user's own objective names a Python callable, ``function = "package.module:function"``,
    with its ``domain`` (a list of ``[lower, upper]`` pairs) or a typed ``[space]``, its
    ``direction`` ("maximize", the default, or "minimize"), ``vectorized`` (the function takes
    the whole (n, d) batch), ``deterministic`` (the same parameters always give the same value:
    each is evaluated once per client), ``style`` (:data:`STYLES`) and ``kwargs`` (the
    ``[objective.kwargs]`` table: keyword arguments of every call). Any other key is an error
    naming it (a mistyped ``directon`` must not reach the function). The function is imported only
    by the processes that evaluate it, the clients: a server never needs it
    (:func:`fedxab.objectives.user.load_function`). Its noise model defaults to "none" (a
    user's black box is its own noise).
    """

    SECTION: ClassVar[str] = "objective"

    name: str = "garland"
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    noise: NoiseConfig = dataclasses.field(default_factory=NoiseConfig)
    function: str | None = None
    """``"package.module:function"``: the user's own objective (``name`` is then its label)."""
    domain: tuple[tuple[float, float], ...] | None = None
    """The search box of a user's objective (a built-in objective has its own)."""
    direction: str = "maximize"
    """Whether a user's objective is to be maximised or minimised."""
    vectorized: bool = False
    """Whether a user's function takes the whole (n, d) batch rather than one point."""
    deterministic: bool = False
    """Whether a user's function gives the same value for the same parameters: a client then
    evaluates each distinct point (each distinct parameter set of a ``[space]``) once, and
    answers repeats from what it observed (:mod:`fedxab.objectives.user`)."""
    style: str = "auto"
    """How a function over a ``[space]`` is called (:data:`STYLES`)."""
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """``[objective.kwargs]``: keyword arguments of every call of a user's function."""

    def __post_init__(self) -> None:
        _coerce("objective.name", self.name, str)
        object.__setattr__(self, "params", _frozen_params("objective", self.params))
        if not isinstance(self.noise, NoiseConfig):
            raise ConfigError("objective.noise", f"expected a NoiseConfig, got {self.noise!r}")
        _coerce("objective.function", self.function, str | None)
        check_choice("objective.direction", self.direction, DIRECTIONS)
        _coerce("objective.vectorized", self.vectorized, bool)
        _coerce("objective.deterministic", self.deterministic, bool)
        check_choice("objective.style", self.style, STYLES)
        if not isinstance(self.kwargs, Mapping):
            raise ConfigError(
                "objective.kwargs",
                f"expected a table of keyword arguments ([objective.kwargs]), got "
                f"{_describe(self.kwargs)}",
            )
        object.__setattr__(self, "kwargs", _frozen_params("objective.kwargs", self.kwargs))
        if self.function is None:
            for key in ("domain", "direction", "vectorized", "deterministic", "style", "kwargs"):
                if getattr(self, key) != _USER_DEFAULTS[key]:
                    raise ConfigError(
                        f"objective.{key}",
                        f"applies to a user's own objective (objective.function) only; built-in "
                        f"objective {self.name!r} has its own; remove it or set function",
                    )
            return
        from fedxab.objectives.user import check_function_spec

        check_function_spec(self.function, "objective.function")
        if self.params:
            key = next(iter(self.params))
            raise ConfigError(
                f"objective.{key}",
                f"unknown key for a user's objective{_did_you_mean(key, _USER_OBJECTIVE_KEYS)}; "
                "allowed: name, noise, " + ", ".join(_USER_OBJECTIVE_KEYS) + ". Keyword "
                "arguments of the function go in their own table, [objective.kwargs]",
            )
        if self.domain is not None:
            bounds = as_domain(self.domain, "objective.domain")
            object.__setattr__(self, "domain", tuple((float(a), float(b)) for a, b in bounds))

    @property
    def is_user(self) -> bool:
        """Whether this is a user's own objective (``function``) rather than a built-in one."""
        return self.function is not None

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> ObjectiveConfig:
        table = _as_table(cls.SECTION, table)
        user = {k: table[k] for k in _USER_OBJECTIVE_KEYS if k in table}
        function = user.get("function")
        # (a function that is not a string is refused by __post_init__, its value never str()'d:
        # a deeply nested value would overflow the stack)
        name = table.get("name", function if isinstance(function, str) else cls.name)
        if "noise" in table:
            noise = NoiseConfig.from_value(table["noise"])
        else:
            noise = NoiseConfig() if function is None else NoiseConfig(name="none", params={})
        skip = ("name", "noise", *_USER_OBJECTIVE_KEYS)
        params = {k: v for k, v in table.items() if k not in skip}
        return cls(name=name, params=params, noise=noise, **user)

    def to_dict(self) -> dict[str, Any]:
        data = {"name": self.name, **_plain(self.params), "noise": self.noise.to_dict()}
        if self.function is not None:
            data["function"] = self.function
            data["domain"] = [list(pair) for pair in self.domain or ()]
            data["direction"] = self.direction
            data["vectorized"] = self.vectorized
            if self.domain is None:
                del data["domain"]
            if self.deterministic:
                data["deterministic"] = True
            if self.style != "auto":
                data["style"] = self.style
            if self.kwargs:
                data["kwargs"] = _plain(self.kwargs)
        return data


def _did_you_mean(key: str, allowed: tuple[str, ...]) -> str:
    """`` (did you mean 'direction'?)`` for a near miss of one of ``allowed``, else ``""``."""
    import difflib

    close = difflib.get_close_matches(key, allowed, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclasses.dataclass(frozen=True)
class SpaceConfig:
    """``[space]``: the typed parameters of a user's objective, one table per parameter,
    ``lr = {type = "float", low = 1e-4, high = 0.1, log = true}``, ``depth = {type = "int",
    low = 1, high = 8}``, ``kind = {type = "categorical", choices = ["a", "b"]}``
    (:mod:`fedxab.space`). Every algorithm then searches the unit box of its encoding, and the
    function is given the decoded parameters by name."""

    SECTION: ClassVar[str] = "space"

    space: SearchSpace

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> SpaceConfig:
        return cls(SearchSpace.from_dict(_as_table(cls.SECTION, table)))

    def to_dict(self) -> dict[str, Any]:
        return self.space.to_dict()


def _default_algorithm_params() -> Mapping[str, Any]:
    return MappingProxyType({"preset": "practical"})


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig:
    """``[algorithm]``: the optimizer's name and its parameters (passed to ``make_optimizer``)."""

    SECTION: ClassVar[str] = "algorithm"

    name: str = "hct"
    params: Mapping[str, Any] = dataclasses.field(default_factory=_default_algorithm_params)
    choice: Mapping[str, Any] | None = None
    """For ``name = "auto"`` in the file: what the rule chose (``name``, ``params``, ``reason``;
    :func:`~fedxab.algorithms.auto.choose_algorithm`) and the keys the file ``given``; ``name``
    and ``params`` above are then the chosen algorithm's, the file's keys over the rule's."""

    def __post_init__(self) -> None:
        _coerce("algorithm.name", self.name, str)
        object.__setattr__(self, "params", _frozen_params("algorithm", self.params))

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> AlgorithmConfig:
        table = _as_table(cls.SECTION, table)
        if "name" not in table:
            # No name: the default algorithm with its default parameters, plus any given ones.
            params = {**_default_algorithm_params(), **table}
            return cls(params=params)
        return cls(name=table["name"], params={k: v for k, v in table.items() if k != "name"})

    def to_dict(self) -> dict[str, Any]:
        if self.choice is not None:  # as written: "auto" is chosen again from the same job
            return {"name": AUTO, **_plain(self.choice["given"])}
        return {"name": self.name, **_plain(self.params)}


HETEROGENEITY = ("offset", "shift", "none", "fields", "gp-perturbed", "gp-mixture")
FIELD_ASSIGNMENTS = ("first", "random")
MEMBERSHIPS = ("fixed", "elastic")


@dataclasses.dataclass(frozen=True)
class FederationConfig(Section):
    """``[federation]``: the clients of a federated run and how their objectives differ.

    ``heterogeneity`` builds the client family from the ``[objective]`` as the papers' experiments
    do (:mod:`fedxab.objectives.families`):

    - ``"offset"``: ``f_m = f + xi_m``, ``xi_m ~ N(0, scale^2)`` (Fed-PNE's experiments; scale
      default 1); the global objective is ``f``;
    - ``"shift"``: ``f_m(x) = f(clip(x - s_m))``, ``s_m ~ N(0, scale^2 I)`` (PF-PNE's; scale
      default 0.05 x each coordinate range); the global objective is the clients' average;
    - ``"none"``: every client has ``f`` itself;
    - ``"fields"``: the landmine objective only: client m tunes the SVM of its own field; the
      global objective is the clients' mean AUC (as in [FX]). Which field:
      ``field_assignment = "first"`` (the default) gives fields 0..M-1 for M <= 29 and random
      fields with replacement beyond; ``"random"`` draws every client's field uniformly with
      replacement from the run seed, as the papers do ("each client is assigned a random
      field");
    - ``"gp-perturbed"``: objective ``"gp-grid"`` only (DP-FTS-DE's, [DP] App. B.1.1):
      ``f^n = f + d(n, x)``, ``d = +-scale`` (default 0.02) with probability 1/2, drawn per grid
      point (``perturbation = "point"``, the default) or once per client (``"client"``); the global
      objective is the GP sample ``f``;
    - ``"gp-mixture"``: objective ``"gp-grid"`` only, the heterogeneity study ([DP] App. B.1.2):
      ``f^n = alpha g^n + (1 - alpha) f`` with an independent GP sample ``g^n`` per client,
      ``alpha = mixture_alpha`` (default 0.7, Fig. 7a; 1.0 for Fig. 7b); the global objective
      is the clients' average.

    With objective ``"gp-grid"`` the GP function of run ``seed`` is drawn by the family from
    ``stream(seed, "gp-family")`` (unless the objective's ``sample_seed`` fixes it), whatever
    the heterogeneity (:func:`fedxab.run.assembly.make_family`).
    """

    SECTION: ClassVar[str] = "federation"

    clients: int = 10
    """The number of clients M."""
    heterogeneity: str = "offset"
    """How the client objectives differ: "offset", "shift", "none", "fields" (landmine),
    "gp-perturbed" or "gp-mixture" (gp-grid)."""
    heterogeneity_scale: float | None = None
    """Standard deviation of the offsets (or of the shifts, in input units), or the magnitude d
    of the "gp-perturbed" perturbation (default 0.02); None = default."""
    perturbation: str | None = None
    """"gp-perturbed" only: draw the sign of d per grid point ("point", default) or per client
    ("client")."""
    mixture_alpha: float | None = None
    """"gp-mixture" only: the weight alpha in [0, 1] of each client's own GP sample; None = 0.7."""
    field_assignment: str | None = None
    """"fields" only: "first" (fields 0..M-1; the default) or "random" (the papers' reading)."""
    global_regret: bool | None = None
    """Measure the global regret (the global objective at every pull: simulation bookkeeping);
    unset means true. false: local regret only, for figures that need only it where the global
    objective is expensive (landmine's is the mean of every field's SVM: M fits per pull). The
    algorithm's course, the local regret and the epsilons are the same either way."""
    participation: float | None = None
    """The fraction q in (0, 1] of the clients the server asks each phase: each client is asked
    independently with probability q, drawn from the run seed (Poisson sampling,
    :mod:`fedxab.run.participation`); unset means 1, every client."""
    membership: str | None = None
    """Who is in the run: ``"fixed"`` (unset: every one of the M clients, from phase 1 to the
    end) or ``"elastic"`` (a population: a client joins at any phase boundary, leaves, or
    rejoins; each phase asks the clients in the run when it opens, :mod:`fedxab.run.membership`)."""

    @property
    def sampled(self) -> bool:
        """Whether the server asks only a sample of the clients each phase (participation < 1)."""
        return self.participation is not None and self.participation < 1

    @property
    def elastic(self) -> bool:
        """Whether clients may join and leave during the run (``membership = "elastic"``)."""
        return self.membership == "elastic"

    _ONLY_WITH: ClassVar[dict[str, str]] = {
        "perturbation": "gp-perturbed",
        "mixture_alpha": "gp-mixture",
        "field_assignment": "fields",
    }
    """Keys that apply to one heterogeneity only."""

    def _check(self) -> None:
        if not 1 <= self.clients <= MAX_CLIENTS:
            raise ConfigError(
                "federation.clients",
                f"must be an integer in 1..{MAX_CLIENTS:,} (clients), got {self.clients}",
            )
        if self.heterogeneity not in HETEROGENEITY:
            raise ConfigError(
                "federation.heterogeneity",
                f"unknown value {self.heterogeneity!r}; allowed: {', '.join(HETEROGENEITY)}",
            )
        scale = self.heterogeneity_scale
        if scale is not None:
            if scale < 0:
                raise ConfigError(
                    "federation.heterogeneity_scale", f"must be a number >= 0, got {scale}"
                )
            if self.heterogeneity == "none":
                raise ConfigError(
                    "federation.heterogeneity_scale",
                    'has no effect with heterogeneity = "none"; remove it or choose '
                    '"offset" or "shift"',
                )
            if self.heterogeneity == "gp-mixture":
                raise ConfigError(
                    "federation.heterogeneity_scale",
                    'has no effect with heterogeneity = "gp-mixture"; set mixture_alpha instead',
                )
        for key, heterogeneity in self._ONLY_WITH.items():
            if getattr(self, key) is not None and self.heterogeneity != heterogeneity:
                raise ConfigError(
                    f"federation.{key}",
                    f'only applies to heterogeneity = "{heterogeneity}", not '
                    f"{self.heterogeneity!r}; remove it",
                )
        for key, allowed in (
            ("perturbation", ("point", "client")),
            ("field_assignment", FIELD_ASSIGNMENTS),
            ("membership", MEMBERSHIPS),
        ):
            value = getattr(self, key)
            if value is not None and value not in allowed:
                raise ConfigError(
                    f"federation.{key}", f"unknown value {value!r}; allowed: {', '.join(allowed)}"
                )
        q = self.participation
        if q is not None and not 0.0 < q <= 1.0:
            raise ConfigError(
                "federation.participation",
                f"must be a fraction of the clients in (0, 1], got {q!r}",
            )
        alpha = self.mixture_alpha
        if alpha is not None and not 0.0 <= alpha <= 1.0:
            raise ConfigError(
                "federation.mixture_alpha", f"must be a number in [0, 1], got {alpha}"
            )


@dataclasses.dataclass(frozen=True)
class AgentsConfig(Section):
    """``[agents]``: how the server and client agents behave on a broker (federated runs).

    The phase barrier waits for every client; with ``phase_deadline_s`` set, a phase that has
    been open that long closes as soon as ``quorum`` (a fraction of M, rounded up) has reported,
    so that a client gone for good does not stop the run (its later pulls are then missing from
    the results, which say how many evaluations were made).
    """

    SECTION: ClassVar[str] = "agents"

    phase_deadline_s: float | None = None
    """Seconds after which a phase may close on a quorum; None: wait for every client."""
    quorum: float = 1.0
    """Fraction of the clients whose reports close a phase after the deadline, in (0, 1]."""
    heartbeat_s: float = 5.0
    """Seconds between a client's heartbeats on the control topic."""
    rebroadcast_s: float = 10.0
    """Seconds without a new report after which the server publishes the open phase again."""
    telemetry_interval_s: float = 1.0
    """Seconds between a client's regret telemetry messages (all phases since the last one)."""
    telemetry_timeout_s: float = 60.0
    """After the last phase, seconds the server waits without news (fresh telemetry, a client
    leaving, a ledger record) before it gives up on the clients it has not heard from."""
    status_interval_s: float = 30.0
    """Seconds between the server's warnings naming the clients an open phase still waits for."""
    liveness_s: float | None = None
    """``[federation] membership = "elastic"`` only: a client silent (no heartbeat, no other
    control message) this many seconds has left the run; unset: 3 x ``heartbeat_s``."""
    min_clients: int | None = None
    """``[federation] membership = "elastic"`` only: a phase opens once at least this many
    clients are in the run; unset: 1."""
    client_budget: int | None = None
    """``[federation] membership = "elastic"`` only, a client agent's setting: the evaluations
    each client it hosts makes at most, up to ``[run] budget`` (the run's, which stays the same
    for every party); a client answers the phases it covers, then withdraws and leaves
    (:mod:`fedxab.run.membership`). Unset: ``[run] budget``."""
    server_silence_s: float | None = None
    """A client agent waiting for the server's next record stops with an error after this many
    seconds without one (the server publishes at least every ``rebroadcast_s`` while it runs,
    so silence means it has ended or lost the broker); unset: 12 x ``rebroadcast_s``."""
    inline_answer_s: float = 0.05
    """A client agent computes its clients' answers to a broadcast on its event loop while its
    last answer took less than this many seconds, and in a worker thread otherwise (the first
    answer too): a thread keeps the heartbeats and the broker client going during a slow black
    box, but each answer then costs a thread hand-off, and the thread's memory comes from its
    own allocator arena, which the C library returns to the system between phases and the
    next phase faults in again. An answer much slower than the last one (PF-HCT hands each
    client its whole remaining budget in one answer) still runs on the loop once, blocking it
    that long: set 0 (always in a thread) where the loop must never block, e.g. a server agent
    in the same process that joins a consumer group (``[broker] join_groups``)."""

    def _check(self) -> None:
        for name in (
            "phase_deadline_s",
            "heartbeat_s",
            "rebroadcast_s",
            "telemetry_interval_s",
            "telemetry_timeout_s",
            "status_interval_s",
            "liveness_s",
            "server_silence_s",
        ):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"agents.{name}", f"must be a number of seconds > 0, got {value}")
        if self.inline_answer_s < 0:
            raise ConfigError(
                "agents.inline_answer_s",
                f"must be a number of seconds >= 0 (0: always in a thread), "
                f"got {self.inline_answer_s}",
            )
        if not 0 < self.quorum <= 1:
            raise ConfigError(
                "agents.quorum", f"must be a fraction of the clients in (0, 1], got {self.quorum}"
            )
        if self.min_clients is not None and self.min_clients < 1:
            raise ConfigError(
                "agents.min_clients", f"must be an integer >= 1, got {self.min_clients}"
            )
        if self.client_budget is not None and self.client_budget < 1:
            raise ConfigError(
                "agents.client_budget", f"must be an integer >= 1, got {self.client_budget}"
            )

        if self.server_silence_s is not None and self.server_silence_s <= self.rebroadcast_s:
            raise ConfigError(
                "agents.server_silence_s",
                f"must exceed rebroadcast_s ({self.rebroadcast_s} s: the longest the server "
                f"stays silent while it runs), got {self.server_silence_s}",
            )

    @property
    def server_silence(self) -> float:
        """Seconds without a record of the server after which a client agent stops."""
        return 12 * self.rebroadcast_s if self.server_silence_s is None else self.server_silence_s

    @property
    def liveness(self) -> float:
        """Seconds of silence after which a client has left an elastic run."""
        return 3 * self.heartbeat_s if self.liveness_s is None else self.liveness_s


_NAMESPACE = re.compile(r"[A-Za-z0-9._-]{1,100}")
_DATA_SET = _NAMESPACE  # the same rule: a name that is safe in a ledger key and a file name


@dataclasses.dataclass(frozen=True)
class BrokerConfig(Section):
    """``[broker]``: the transport. Deployment settings, not part of the experiment: results
    files and run ids leave this section out, so a run gives the same results on any broker.

    ``url`` is ``"memory://"`` (the embedded broker, one process), ``"inprocess://"`` (no broker:
    the direct runner) or ``"kafka://HOST:PORT[,HOST:PORT...]"``; ``--broker`` overrides it.
    TLS and SASL settings are passed to the Kafka client; the SASL password is never part of a
    config file: it is read from the environment variable ``FEDXAB_KAFKA_SASL_PASSWORD``. With
    ``sasl_mechanism = "OAUTHBEARER"`` there is no password: ``sasl_oauth_token_provider`` names
    the user's function that returns a token. The topic settings (``partitions``,
    ``replication_factor``, ``retention_ms``, ``topic_config``, ``create_topics``) say how the
    topics are created, and by whom (:mod:`fedxab.broker.topics`).
    """

    SECTION: ClassVar[str] = "broker"

    url: str = "memory://"
    namespace: str = "fedxab"
    """First part of every topic name: ``{namespace}.{run_id}.{kind}``; a run started again
    under another namespace is a new run on new topics (``--namespace``)."""
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """The largest record a party publishes or reads (a larger one read from a topic is refused
    before decoding); on Kafka also the ``max.message.bytes`` of the topics fedxab creates.
    Kafka's default, 1 MiB, fits signed broadcasts up to about 32,000 clients."""
    unreachable_s: float = 60.0
    """Kafka only: seconds a broker may fail to answer before the agents stop with an error
    (requests are retried meanwhile); a reader also stops once the broker's log is shorter
    than what it read (a broker restarted without its storage)."""
    fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS
    """Kafka only: how long a read waits at the broker for records, 1 to 10,000 ms. Apache
    Kafka answers as soon as a record arrives, so there it only sets how often an idle reader
    asks; the dev broker answers at the end of the wait, so there it bounds the delay of each
    hop of a phase. The default, 25 ms, is Kafka clients' 500 ms cut for the dev broker: a phase
    took 0.26 s with 500 and takes a few tens of ms with 25, where an idle reader asks 40 times
    a second (about 2.5% of a core in the reader's process; 5% with 10 ms, which made the
    phases no faster)."""
    join_groups: bool = False
    """Kafka only: whether the server's report reader joins its consumer group (Kafka's group
    membership: partitions shared among live members, rebalanced as they come and go), which
    costs seconds at every start (3 s on Apache Kafka by default). By default it is assigned the
    topic's partitions itself and uses the group only for its committed offsets."""
    sasl_oauth_token_provider: str | None = None
    """Kafka only, with ``sasl_mechanism = "OAUTHBEARER"``: ``"package.module:function"``, a
    function of no arguments that returns an OAuth token (Amazon MSK IAM, Confluent Cloud),
    imported by each party and called whenever a connection authenticates."""
    partitions: int = 1
    """Kafka only: partitions of the report, control, ledger and lobby topics fedxab creates
    (a broadcast topic always has one)."""
    replication_factor: int = 1
    """Kafka only: the replication factor of the topics fedxab creates; 3 on a production
    cluster (Confluent Cloud takes no other)."""
    retention_ms: int | None = None
    """Kafka only: ``retention.ms`` of the topics fedxab creates; unset: the cluster's default;
    -1: kept forever."""
    ledger_retention_ms: int | None = None
    """Kafka only: ``retention.ms`` of the ledger topics, a run's privacy record that an auditor
    rebuilds from (``fedxab audit --rebuild-from``); unset: ``retention_ms``; -1: forever."""
    topic_config: tuple = ()
    """Kafka only: other settings of the topics fedxab creates, a TOML table such as
    ``{ "min.insync.replicas" = 2 }`` (kept as sorted ``(name, value)`` strings)."""
    create_topics: bool = True
    """Kafka only: whether each party creates its run's missing topics. ``false`` where only
    operators create topics (``fedxab topics create``): a missing topic then stops a party at
    once, naming the topic and that command."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_config", topic_config_table(self.topic_config))
        super().__post_init__()

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["topic_config"] = dict(self.topic_config)
        if not self.topic_config:
            del data["topic_config"]
        return data

    @property
    def topic_settings(self) -> TopicSettings:
        """How the topics of a run on Kafka are created, and by whom."""
        return TopicSettings(
            partitions=self.partitions,
            replication_factor=self.replication_factor,
            retention_ms=self.retention_ms,
            ledger_retention_ms=self.ledger_retention_ms,
            config=self.topic_config,
            create=self.create_topics,
        )

    def _check(self) -> None:
        self.topic_settings  # noqa: B018 (its checks name the field)
        check_max_message_bytes(self.max_message_bytes)
        check_fetch_max_wait_ms(self.fetch_max_wait_ms)
        if not _NAMESPACE.fullmatch(self.namespace):
            raise ConfigError(
                "broker.namespace",
                f"must be 1 to 100 letters, digits, '.', '_' or '-' (a Kafka topic name part), "
                f"got {self.namespace!r}",
            )
        if not (math.isfinite(self.unreachable_s) and self.unreachable_s > 0):
            raise ConfigError(
                "broker.unreachable_s", f"must be a number of seconds > 0, got {self.unreachable_s}"
            )
        if not self.url.startswith(("memory://", "inprocess://", "kafka://")):
            raise ConfigError(
                "broker.url",
                f"must be memory://, inprocess:// or kafka://HOST:PORT, got {self.url!r}",
            )
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                "broker.security_protocol",
                f"unknown value {self.security_protocol!r}; allowed: "
                f"{', '.join(SECURITY_PROTOCOLS)}",
            )
        sasl = self.security_protocol.startswith("SASL")
        if sasl and self.sasl_mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                "broker.sasl_mechanism",
                f"{self.security_protocol} needs one of {', '.join(SASL_MECHANISMS)}, "
                f"got {self.sasl_mechanism!r}",
            )
        if not sasl and (
            self.sasl_mechanism or self.sasl_username or self.sasl_oauth_token_provider
        ):
            raise ConfigError(
                "broker.sasl_mechanism",
                f"SASL settings need security_protocol SASL_PLAINTEXT or SASL_SSL, "
                f"got {self.security_protocol}",
            )
        oauth = self.sasl_mechanism == "OAUTHBEARER"
        if oauth and not self.sasl_oauth_token_provider:
            raise ConfigError(
                "broker.sasl_oauth_token_provider",
                "OAUTHBEARER needs the token function, e.g. "
                'sasl_oauth_token_provider = "mysite.auth:kafka_token"',
            )
        if oauth and self.sasl_username:
            raise ConfigError("broker.sasl_username", "is not used with OAUTHBEARER (a token is)")
        if oauth and self.sasl_oauth_token_provider:  # given: checked above
            from fedxab.objectives.user import check_function_spec

            check_function_spec(self.sasl_oauth_token_provider, "broker.sasl_oauth_token_provider")
        if self.sasl_oauth_token_provider and not oauth:
            raise ConfigError(
                "broker.sasl_oauth_token_provider",
                f'is only used with sasl_mechanism = "OAUTHBEARER", got {self.sasl_mechanism!r}',
            )


@dataclasses.dataclass(frozen=True)
class SecurityConfig(Section):
    """``[security]``: message authentication (:mod:`fedxab.security`). Deployment settings, not
    part of the experiment: like ``[broker]``, results files and run ids leave this section out,
    so a signed run gives exactly the unsigned run's results.

    A signing run signs every envelope; the server refuses and counts a message whose signature
    does not match its claimed sender, an earlier phase's, another run's or another session's,
    and clients refuse broadcasts the server did not sign. ``sign`` unset means on for Kafka runs
    (``kafka://``) and off on the embedded broker and in-process. ``scheme``: Ed25519 key pairs
    (the server holds the clients' public keys only, so it cannot sign as a client; an auditor
    verifies with public keys) or HMAC-SHA256 under per-client keys shared with the server (which
    could then sign as any client). The keys are read from ``keys_dir`` (the files of ``fedxab
    keys generate``) or, for HMAC without it, from the environment variables
    ``FEDXAB_KEY_CLIENT_<N>``; never from this file.
    """

    SECTION: ClassVar[str] = "security"

    keys_dir: str | None = None
    """Directory of the key files: ``private/`` and ``public/`` (Ed25519: the server needs
    ``private/server.key`` and every client's ``public/client-N.pub``, a client agent its own
    ``private/client-N.key`` and ``public/server.pub``) or ``client-N.key`` files (HMAC: the
    server needs every one, a client agent its own)."""
    sign: bool | None = None
    """Sign and verify every message (unset: on for Kafka, off otherwise)."""
    scheme: str | None = None
    """``ed25519`` or ``hmac`` (unset: detected from ``keys_dir``'s layout; HMAC without it)."""

    def _check(self) -> None:
        from fedxab.security.signing import SCHEMES

        if self.scheme is not None:
            check_choice("security.scheme", self.scheme, SCHEMES)


@dataclasses.dataclass(frozen=True)
class PrivacyConfig(Section):
    """``[privacy]``: accounting and budgets of a private algorithm's releases. Present (defaults if
    not given) for algorithms that release privacy events.

    Every release is recorded in the per-client ledger; each client's epsilon is recomputed from
    its events by ``accountant`` at ``delta`` and reported in the results. With
    ``budget_epsilon`` set, every client has the budget (budget_epsilon, delta): a release that
    would exceed it is refused and the client drops out of the run.
    """

    SECTION: ClassVar[str] = "privacy"

    accountant: str = "rdp"
    """How spent epsilon is computed: rdp, moments, pld, opacus-rdp or opacus-prv."""
    accountant_timeout_s: float = DEFAULT_TIMEOUT_S
    """The time limit, in seconds, of one computation of the ``pld`` and ``opacus-prv``
    accountants; one that exceeds it is answered by ``rdp`` (an upper bound), counted and
    reported in the results' privacy block (:mod:`fedxab.privacy.accountants`)."""
    delta: float | None = None
    """The delta at which epsilon is accounted and budgets hold; default: the algorithm's
    ``privacy_delta`` if it has one, else ``1 / N^1.1`` (N clients)."""
    budget_epsilon: float | None = None
    """Each client's epsilon budget; None: releases are recorded but never refused."""
    ledger: str | None = None
    """SQLite file of the ledger (created if missing) on the machine of the party that records
    the releases (each client agent; the server under central DP); a relative path is taken in
    ``run.output``, so ``--output`` moves it with the results. None: an in-memory ledger for
    this run, or, with ``lifetime_epsilon``, the default lifetime ledger
    (:func:`~fedxab.privacy.run_ledger.default_ledger_path`)."""
    lifetime_epsilon: float | None = None
    """Each data owner's lifetime epsilon budget at ``delta``, charged by every run recorded in
    the same ledger (other seeds, other outputs): a release that would exceed it is refused and
    the client drops out. None: no lifetime limit."""
    data_set: str | None = None
    """Names the clients' data: client ``m``'s data owner is ``client-m/<data_set>``. Default:
    ``objective-`` and a hash of the ``[objective]`` section, so runs on the same objective
    share lifetime budgets whatever their seed."""
    release_best: bool = False
    """Local DP only: at the end of the run each client releases its best observed value to
    the server as a Gaussian release of ``best_epsilon`` at ``delta``, clipped to
    ``[best_low, best_high]`` and charged in its ledger before it is sent
    (:mod:`fedxab.privacy.best`). The best point is never released."""
    best_epsilon: float | None = None
    """The epsilon of that one release (required with ``release_best``)."""
    best_low: float | None = None
    """Lower end of the declared range of the best value (required with ``release_best``)."""
    best_high: float | None = None
    """Upper end of that range; ``best_high - best_low`` is the release's sensitivity."""

    def _check(self) -> None:
        self._check_best()
        check_choice("privacy.accountant", self.accountant, ACCOUNTANTS)
        check_positive("privacy.accountant_timeout_s", self.accountant_timeout_s)
        if self.delta is not None and not 0 < self.delta < 1:
            raise ConfigError("privacy.delta", f"must lie in (0, 1), got {self.delta}")
        if self.budget_epsilon is not None and not (
            math.isfinite(self.budget_epsilon) and self.budget_epsilon > 0
        ):
            raise ConfigError(
                "privacy.budget_epsilon", f"must be a number > 0, got {self.budget_epsilon}"
            )
        if self.ledger is not None and not self.ledger.strip():
            raise ConfigError("privacy.ledger", "must be a file path; leave it out for none")
        if self.lifetime_epsilon is not None and not (
            math.isfinite(self.lifetime_epsilon) and self.lifetime_epsilon > 0
        ):
            raise ConfigError(
                "privacy.lifetime_epsilon", f"must be a number > 0, got {self.lifetime_epsilon}"
            )
        if self.data_set is not None and not _DATA_SET.fullmatch(self.data_set):
            raise ConfigError(
                "privacy.data_set",
                "must be 1 to 100 characters of letters, digits and ._- , got "
                f"{self.data_set!r:.120}",
            )

    def _check_best(self) -> None:
        """The fields of the best value's release: all or none, each in range."""
        fields = {
            "best_epsilon": self.best_epsilon,
            "best_low": self.best_low,
            "best_high": self.best_high,
        }
        if not self.release_best:
            for name, value in fields.items():
                if value is not None:
                    raise ConfigError(
                        f"privacy.{name}", "applies only with release_best = true; remove it"
                    )
            return
        for name, value in fields.items():
            if value is None:
                raise ConfigError(
                    f"privacy.{name}",
                    "missing: release_best = true needs best_epsilon, best_low and best_high "
                    "(e.g. best_epsilon = 0.5, best_low = 0.0, best_high = 1.0)",
                )
            if not math.isfinite(value):
                raise ConfigError(f"privacy.{name}", f"must be a finite number, got {value}")
        assert self.best_epsilon is not None and self.best_low is not None
        assert self.best_high is not None
        if self.best_epsilon <= 0:
            raise ConfigError(
                "privacy.best_epsilon", f"must be a number > 0, got {self.best_epsilon}"
            )
        if not self.best_low < self.best_high:
            raise ConfigError(
                "privacy.best_high",
                f"must be greater than best_low ({self.best_low}), got {self.best_high}",
            )

    def accounting_delta(self, algorithm_params: Mapping[str, Any], n_clients: int) -> float:
        """``delta``; when it is not set, the algorithm's ``privacy_delta`` (DP-Fed-PNE) or else
        ``1 / N^1.1`` for N clients (DP-FTS-DE's choice, Dai, Low & Jaillet 2021)."""
        if self.delta is not None:
            return self.delta
        value = algorithm_params.get("privacy_delta")
        return float(value) if value is not None else float(n_clients) ** -1.1


@dataclasses.dataclass(frozen=True)
class Config:
    """A whole run configuration; one field per TOML section.

    Every field must have a ``default_factory`` that is the section's class (a class with
    ``from_table`` and ``to_dict``), or, for an optional section, default to ``None`` and be
    listed in ``_OPTIONAL_SECTIONS``: the list of allowed sections is read from these fields.
    """

    run: RunConfig = dataclasses.field(default_factory=RunConfig)
    objective: ObjectiveConfig = dataclasses.field(default_factory=ObjectiveConfig)
    algorithm: AlgorithmConfig = dataclasses.field(default_factory=AlgorithmConfig)
    federation: FederationConfig | None = None
    """Present (defaults if not given) for federated algorithms, None for single-agent ones."""
    agents: AgentsConfig | None = None
    """Federated runs: agent behaviour on a broker (defaults if not given); None otherwise."""
    broker: BrokerConfig | None = None
    """Federated runs: the transport (defaults if not given); None otherwise."""
    security: SecurityConfig | None = None
    """Federated runs: message authentication (defaults, off, if not given); None otherwise."""
    privacy: PrivacyConfig | None = None
    """Private algorithms (e.g. dpfedpne): accounting and budgets; None otherwise."""
    space: SpaceConfig | None = None
    """A user's objective: its typed parameters (instead of ``[objective] domain``)."""

    def __post_init__(self) -> None:
        self._check_space()
        name_ = self.algorithm.name
        for name, cls in _OPTIONAL_SECTIONS.items():
            value = getattr(self, name)
            private = name == "privacy"
            if name_ in PRIVATE if private else is_federated(name_):
                if value is None:
                    user = name == "federation" and self.objective.is_user
                    object.__setattr__(self, name, cls(heterogeneity="none") if user else cls())
                elif not isinstance(value, cls):
                    raise ConfigError(name, f"expected a {cls.__name__}, got {value!r}")
            elif value is not None:
                kind, which = (
                    ("releases nothing private", PRIVATE)
                    if private
                    else ("runs a single agent", FEDERATED)
                )
                raise ConfigError(
                    name,
                    f"algorithm {name_!r} {kind} and takes no [{name}] section; remove it, "
                    f"or choose one of {', '.join(sorted(which))}",
                )
        self._check_release_best()
        fed = self.federation
        if fed is not None and fed.sampled and name_ in NO_PARTICIPATION:
            raise ConfigError(
                "federation.participation",
                f"{name_!r} asks every client each phase ({NO_PARTICIPATION[name_]}); "
                "remove participation or choose fedpne or dpfedpne",
            )
        self._check_membership()
        if self.objective.is_user and fed is not None and fed.heterogeneity != "none":
            raise ConfigError(
                "federation.heterogeneity",
                f"{fed.heterogeneity!r} builds simulated client objectives from a built-in "
                "one; with a user's own objective (objective.function) each client evaluates "
                'its own function: use heterogeneity = "none" (or leave it out)',
            )

    def _check_membership(self) -> None:
        """``[federation] membership = "elastic"`` needs an algorithm whose phases may ask
        some clients only (those of :data:`NO_PARTICIPATION` refuse it, for the same reason);
        ``[agents] liveness_s``, ``min_clients`` and ``client_budget`` (at most ``[run]
        budget``) apply to it alone."""
        fed, agents, name = self.federation, self.agents, self.algorithm.name
        elastic = fed is not None and fed.elastic
        if elastic and name in NO_PARTICIPATION:
            raise ConfigError(
                "federation.membership",
                f"{name!r} cannot run with clients that come and go "
                f"({NO_PARTICIPATION[name]}); remove membership or choose fedpne or dpfedpne",
            )
        for key in ("liveness_s", "min_clients", "client_budget"):
            if not elastic and agents is not None and getattr(agents, key) is not None:
                raise ConfigError(
                    f"agents.{key}",
                    'applies to [federation] membership = "elastic" only; remove it or set '
                    "that membership",
                )
        own, budget = None if agents is None else agents.client_budget, self.run.budget
        if own is not None and own > budget:
            raise ConfigError(
                "agents.client_budget",
                f"must be at most [run] budget ({budget}, the run's), got {own}; lower it",
            )

    def _check_release_best(self) -> None:
        """``privacy.release_best`` needs local DP, and one scope for every release: the best
        value reads every reward, so it composes with every phase's release."""
        privacy = self.privacy
        if privacy is None or not privacy.release_best:
            return
        name = self.algorithm.name
        if PRIVATE.get(name) != "client":
            raise ConfigError(
                "privacy.release_best",
                f"applies under local DP only; {name!r} is central DP, whose clients send "
                "their outcomes to the trusted server anyway; remove it",
            )
        composition = self.algorithm_params().get("composition", "parallel")
        if composition != "sequential":
            raise ConfigError(
                "privacy.release_best",
                "the best value reads every phase's rewards, so its release composes with "
                f'all of them: set algorithm.composition = "sequential" (got {composition!r})',
            )

    def _check_space(self) -> None:
        objective = self.objective
        if self.space is not None and not isinstance(self.space, SpaceConfig):
            raise ConfigError("space", f"expected a SpaceConfig, got {self.space!r}")
        if not objective.is_user:
            if self.space is not None:
                raise ConfigError(
                    "space",
                    f"applies to a user's own objective (objective.function) only; built-in "
                    f"objective {objective.name!r} has its own domain; remove [space]",
                )
            return
        if self.space is not None and objective.domain is not None:
            raise ConfigError(
                "objective.domain",
                "give either a box (objective.domain) or typed parameters ([space]), not both",
            )
        if self.space is None and objective.domain is None:
            raise ConfigError(
                "objective.domain",
                "missing: a user's objective needs its search box, e.g. "
                "domain = [[0.0, 1.0], [-5.0, 5.0]] (one [lower, upper] pair per dimension), "
                'or typed parameters in a [space] table, e.g. lr = {type = "float", ...}',
            )
        if self.space is None and objective.style == "trial":
            raise ConfigError(
                "objective.style",
                '"trial" needs typed parameters: a [space] table (or space= in code)',
            )
        if self.space is not None and objective.vectorized:
            raise ConfigError(
                "objective.vectorized",
                "a function over typed parameters ([space]) takes one parameter set per call; "
                "remove vectorized",
            )

    @property
    def search_space(self) -> SearchSpace | None:
        """The typed parameters of ``[space]``, or None for a box."""
        return None if self.space is None else self.space.space

    @functools.cached_property
    def domain(self) -> np.ndarray:
        """The search box of the run, shape (d, 2): the unit box of a ``[space]``, a user
        objective's ``domain``, or the built-in objective's own (built once to read it)."""
        objective = self.objective
        if self.space is not None:
            return self.space.space.domain
        if objective.domain is not None:
            return as_domain(objective.domain, "objective.domain")
        return make_objective(objective.name, **dict(objective.params)).domain

    @property
    def is_federated(self) -> bool:
        """Whether the algorithm is federated (a server and ``federation.clients`` clients)."""
        return self.federation is not None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (dicts, lists, scalars) that :func:`config_from_dict` turns back into self.

        Absent optional sections (``federation`` of a single-agent run) are left out.
        """
        return {
            f.name: getattr(self, f.name).to_dict()
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }

    def experiment_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` without the deployment settings (``[broker]``, ``[security]`` and
        ``run.workers``, which change where a run computes, never its results): what results
        files record and what run ids are derived from."""
        data = self.to_dict()
        data.pop("broker", None)
        data.pop("security", None)
        data["run"].pop("workers", None)
        return data

    def algorithm_params(self) -> dict[str, Any]:
        """The ``[algorithm]`` parameters (without ``name``) as plain data: for ``"auto"``,
        the chosen algorithm's."""
        return _plain(self.algorithm.params)

    @property
    def algorithm_choice(self) -> dict[str, Any] | None:
        """What ``algorithm = "auto"`` chose and why (None when the file names an algorithm)."""
        choice = self.algorithm.choice
        return None if choice is None else {k: v for k, v in _plain(choice).items() if k != "given"}

    def with_run(self, **changes: Any) -> Config:
        """A copy with ``[run]`` keys replaced (``None`` values are ignored), re-validated.

        Used for command-line overrides such as ``--budget``; a bad value raises ConfigError
        naming ``run.<key>``.
        """
        data = self.to_dict()
        data["run"].update({k: v for k, v in changes.items() if v is not None})
        return config_from_dict(data)

    def with_broker_url(self, url: str) -> Config:
        """A copy on the transport ``url`` (``[broker] url``), re-validated."""
        if self.broker is None:
            raise ConfigError("broker.url", f"{self.algorithm.name!r} runs a single agent")
        data = self.to_dict()
        data["broker"] = {**data["broker"], "url": url}
        return config_from_dict(data)

    def with_objective_function(self, spec: str) -> Config:
        """A copy whose objective is the user's function ``spec`` (``package.module:function``),
        on the run's domain: a client process's own objective (``fedxab client --objective``).
        The protocol, hence the run id, is unchanged; a simulation's objective settings (noise,
        heterogeneity) are dropped with the built-in objective."""
        data = self.to_dict()
        old = self.objective
        if old.is_user:
            objective = {**data["objective"], "function": spec}
            if old.name == old.function:
                objective["name"] = spec
        else:
            objective = {"function": spec, "domain": self.domain.tolist()}
            if "federation" in data:
                data["federation"] = {"clients": data["federation"]["clients"]}
        data["objective"] = objective
        return config_from_dict(data)

    @property
    def output_dir(self) -> Path:
        return Path(self.run.output)


_OPTIONAL_SECTIONS: dict[str, Any] = {
    "federation": FederationConfig,
    "agents": AgentsConfig,
    "broker": BrokerConfig,
    "security": SecurityConfig,
    "privacy": PrivacyConfig,
}
"""Sections of federated runs only (``privacy``: of private algorithms only), None (absent)
otherwise: name -> section class."""


def _sections() -> dict[str, Any]:
    return {
        f.name: SpaceConfig
        if f.name == "space"
        else _OPTIONAL_SECTIONS[f.name]
        if f.default_factory is dataclasses.MISSING
        else f.default_factory
        for f in dataclasses.fields(Config)
    }


def _validate_objects(config: Config) -> None:
    """Build the objective, the noise model and the optimizer once, so a bad name or parameter
    is reported now (by the registries, with the field name) and not in the middle of a run."""
    domain = config.domain  # a user's function is not imported: only its clients need it
    make_noise(config.objective.noise.name, **dict(config.objective.noise.params))
    if config.federation is not None:
        # the server and one client (enough to check every parameter; M may be large)
        make_federation(
            config.algorithm.name,
            domain,
            n_clients=config.federation.clients,
            budget=config.run.budget,
            seed=config.run.seed,
            params=_plain(config.algorithm.params),
            client_ids=[0],
            edges=None if config.search_space is None else config.search_space.edges,
            categories=None if config.search_space is None else config.search_space.categories,
        )
        return
    make_optimizer(
        config.algorithm.name,
        domain,
        seed=config.run.seed,
        budget=config.run.budget,
        params=_plain(config.algorithm.params),
        edges=None if config.search_space is None else config.search_space.edges,
    )


NOISE_FREE_ALGORITHMS = ("fedpne", "hct", "local-hct", "central-hct")
"""Algorithms with a ``noise_free`` mode, which ``[objective] deterministic = true`` turns on
unless ``[algorithm] noise_free`` says otherwise: one pull tells a node's value exactly."""


def _noise_free_default(data: Mapping[str, Any]) -> Mapping[str, Any]:
    objective, algorithm = data.get("objective"), data.get("algorithm")
    if (
        isinstance(objective, Mapping)
        and objective.get("deterministic") is True
        and isinstance(algorithm, Mapping)
        and algorithm.get("name") in NOISE_FREE_ALGORITHMS
        and "noise_free" not in algorithm
    ):
        return {**data, "algorithm": {**algorithm, "noise_free": True}}
    return data


def _user_objective(data: Mapping[str, Any]) -> bool:
    table = data.get("objective")
    return isinstance(table, Mapping) and table.get("function") is not None


def config_from_dict(data: Mapping[str, Any], *, validate: bool = True) -> Config:
    """Build a validated :class:`Config` from plain data (e.g. parsed TOML).

    Missing sections and keys take their defaults. Unknown sections or keys, wrong types and out
    of range values raise :class:`ConfigError` naming the field. With ``validate`` (the default)
    the objective, noise model and optimizer are also built once through their registries.
    """
    if not isinstance(data, Mapping):
        raise ConfigError("config", f"expected a table of sections, got {_describe(data)}")
    sections = _sections()
    for key in data:
        if key not in sections:
            raise ConfigError(
                str(key),
                f"unknown section [{key}]; allowed sections: {', '.join(sorted(sections))}",
            )
    data = _noise_free_default(data)
    if _user_objective(data) and isinstance(data.get("federation"), Mapping):
        # a user's objective: every client evaluates its own function, no simulated family
        data = {**data, "federation": {"heterogeneity": "none", **data["federation"]}}
    choice = None
    if isinstance(data.get("algorithm"), Mapping) and data["algorithm"].get("name") == AUTO:
        data, choice = _resolve_auto(data)
    parts: dict[str, Any] = {  # one section object (or None) per field of Config
        name: (
            cls.from_table(data[name])
            if name in data
            else None
            if name in _OPTIONAL_SECTIONS or name == "space"
            else cls()
        )
        for name, cls in sections.items()
    }
    if choice is not None:
        algorithm = parts["algorithm"]
        assert isinstance(algorithm, AlgorithmConfig)
        parts["algorithm"] = dataclasses.replace(algorithm, choice=choice)
    config = Config(**parts)
    if validate:
        _validate_objects(config)
    return config


def _resolve_auto(data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``data`` with ``[algorithm] name = "auto"`` replaced by the algorithm
    :func:`~fedxab.algorithms.auto.choose_algorithm` picks for the job (the file's other
    ``[algorithm]`` keys over the rule's settings), and the choice with the keys ``given``."""
    given = {k: v for k, v in data["algorithm"].items() if k != "name"}
    private = "privacy" in data
    # the job without its algorithm, read for what the rule needs (budget, domain, space, sites)
    stand_in = {**data, "algorithm": {"name": "dpftsde" if private else "fedtpe"}}
    job = config_from_dict(stand_in, validate=False)
    assert job.federation is not None
    space = None if job.space is None else job.space.space
    chosen = choose_algorithm(
        budget=job.run.budget,
        dim=job.domain.shape[0],
        clients=job.federation.clients,
        private=private,
        kinds=None if space is None else space.kinds,
        levels=None if space is None else space.levels,
    )
    resolved = {**data, "algorithm": {"name": chosen.name, **chosen.params, **given}}
    return resolved, {**chosen.to_dict(), "given": given}


def load_config(path: str | Path, *, validate: bool = True) -> Config:
    """Read and validate a TOML run configuration.

    A missing or unreadable file, or a TOML syntax error, raises :class:`ConfigError` whose
    message gives the path (and, for syntax errors, the line and column).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(str(p), "config file not found") from exc
    except IsADirectoryError as exc:
        raise ConfigError(str(p), "is a directory, expected a TOML config file") from exc
    except OSError as exc:
        raise ConfigError(str(p), f"cannot read config file ({exc.strerror or exc})") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(str(p), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(p), f"invalid TOML: {exc}") from exc
    except RecursionError:
        raise ConfigError(str(p), "invalid TOML: arrays or tables nested too deeply") from None
    try:
        return config_from_dict(data, validate=validate)
    except ConfigError as exc:
        message = exc.message
        raise ConfigError(exc.field, f"{message} (in {p})") from exc


def default_config() -> Config:
    """The built-in job of ``fedxab run`` without a config file (``examples/fedpne_garland.toml``).

    Fed-PNE (practical preset: nu = 1, rho = 0.5, c = 0.1, c1 = 1, delta = 1/M) with M = 10
    clients on Garland with per-client offsets ``xi_m ~ N(0, 1)`` (as in [FX]),
    T = 10,000 evaluations per client, uniform noise in [-0.1, 0.1], 3 runs with seeds 0, 1, 2.
    """
    return config_from_dict(
        {
            "run": {"seed": 0, "repeats": 3, "budget": 10_000, "output": "results"},
            "objective": {"name": "garland", "noise": {"name": "uniform", "half_width": 0.1}},
            "algorithm": {"name": "fedpne", "preset": "practical", "nu": 1.0, "rho": 0.5},
            "federation": {"clients": 10, "heterogeneity": "offset"},
        }
    )
