"""Typed search spaces: named float, integer and categorical parameters on the unit box.

A user declares what each parameter is, in its own units::

    space = SearchSpace({
        "lr": Float(1e-4, 1e-1, log=True),
        "depth": Int(1, 8),
        "kind": Categorical(["gini", "entropy"]),
    })

and every algorithm searches the unit box ``[0, 1]^dim`` (:attr:`SearchSpace.domain`), one
coordinate per parameter; :meth:`SearchSpace.decode` turns a point of the box into the
parameters, by name, in the user's units. The encoding (also in ``docs/objectives.md``):

- a continuous :class:`Float` maps linearly onto [0, 1] (``log=True``: linearly in ``log``);
- a parameter with ``n`` distinct values (an :class:`Int`, a :class:`Float` with ``step``, a
  :class:`Categorical`) owns ``n`` cells of [0, 1] (:attr:`SearchSpace.edges`): cell ``k``,
  ``[e_k, e_{k+1})`` (the last one closed), decodes to value ``k``. The cells are equal,
  ``e_k = k / n``, except for a log-scale :class:`Int`, whose value ``v`` owns the stretch of
  ``[log(low - 1/2), log(high + 1/2)]`` between ``log(v - 1/2)`` and ``log(v + 1/2)``, so that
  the box is uniform in the logarithm as the user asked. A categorical's order means nothing.

:meth:`SearchSpace.encode` is the inverse (a discrete value encodes to its cell's centre) and
:meth:`SearchSpace.snap` maps a point to the encoding of its decoded parameters: points with
the same parameters snap to the same point, so a repeat is detectable.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from fedxab.errors import ConfigError

__all__ = ["Categorical", "Float", "Int", "Param", "SearchSpace", "as_space"]

_CHOICE_TYPES = (str, int, float, bool, type(None))


def _number(field: str, value: object, *, integer: bool = False) -> float:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(field, f"must be {kind}, got {value!r}")
    if integer and not float(value).is_integer():
        raise ConfigError(field, f"must be {kind}, got {value!r}")
    if not math.isfinite(float(value)):
        raise ConfigError(field, f"must be a finite number, got {value!r}")
    return float(value)


class Param:
    """One parameter of a :class:`SearchSpace` (:class:`Float`, :class:`Int`,
    :class:`Categorical`)."""

    KIND: ClassVar[str] = ""

    @property
    def levels(self) -> int | None:
        """The number of distinct values, or None for a continuous :class:`Float`."""
        raise NotImplementedError

    def edges(self) -> np.ndarray | None:
        """The ``levels + 1`` cell boundaries in [0, 1], or None when continuous."""
        n = self.levels
        return None if n is None else np.linspace(0.0, 1.0, n + 1)

    def value(self, k: int) -> Any:
        """Value ``k`` of a discrete parameter (a Python scalar)."""
        raise NotImplementedError

    def index(self, value: Any, field: str) -> int:
        """The index of ``value`` among the discrete values (ConfigError naming ``field``)."""
        raise NotImplementedError

    def decode(self, u: float) -> Any:
        """The value at coordinate ``u`` in [0, 1]."""
        edges = self.edges()
        assert edges is not None
        k = int(np.searchsorted(edges, u, side="right")) - 1
        return self.value(min(max(k, 0), len(edges) - 2))

    def encode(self, value: Any, field: str) -> float:
        """The coordinate of ``value`` (a discrete value: its cell's centre)."""
        edges = self.edges()
        assert edges is not None
        k = self.index(value, field)
        return float((edges[k] + edges[k + 1]) / 2)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: ``{"type": ..., ...}`` as in a ``[space]`` table."""
        data: dict[str, Any] = {"type": self.KIND}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value != f.default:
                data[f.name] = list(value) if isinstance(value, tuple) else value
        return data


@dataclasses.dataclass(frozen=True)
class Float(Param):
    """A real parameter in ``[low, high]``; ``log``: searched uniformly in ``log`` (``low > 0``);
    ``step``: only the grid ``low, low + step, ... <= high`` (not with ``log``), as Optuna's
    ``suggest_float``."""

    KIND: ClassVar[str] = "float"

    low: float
    high: float
    log: bool = False
    step: float | None = None

    def __post_init__(self) -> None:
        low = _number("Float.low", self.low)
        high = _number("Float.high", self.high)
        if not isinstance(self.log, bool):
            raise ConfigError("Float.log", f"must be true or false, got {self.log!r}")
        if low > high:
            raise ConfigError("Float.low", f"must be <= high ({high!r}), got {low!r}")
        if self.log and low <= 0:
            raise ConfigError("Float.low", f"must be > 0 with log = true, got {low!r}")
        step = self.step
        if step is not None:
            step = _number("Float.step", step)
            if step <= 0:
                raise ConfigError("Float.step", f"must be > 0, got {step!r}")
            if self.log:
                raise ConfigError("Float.step", "cannot be combined with log = true; drop one")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "step", step)

    @property
    def levels(self) -> int | None:
        if self.step is None:
            return None if self.high > self.low else 1
        return math.floor((self.high - self.low) / self.step + 1e-9) + 1

    def value(self, k: int) -> float:
        if self.step is None:
            return self.low
        return float(self.low + k * self.step)

    def index(self, value: Any, field: str) -> int:
        v = _number(field, value)
        n = self.levels
        assert n is not None
        k = round((v - self.low) / self.step) if self.step else 0
        if not 0 <= k < n or not math.isclose(self.value(k), v, rel_tol=1e-9, abs_tol=1e-12):
            raise ConfigError(field, f"{value!r} is not a value of {self!r}")
        return k

    def decode(self, u: float) -> float:
        if self.levels is not None:
            return super().decode(u)
        u = min(max(float(u), 0.0), 1.0)
        if self.log:
            lo, hi = math.log(self.low), math.log(self.high)
            return min(max(math.exp(lo + u * (hi - lo)), self.low), self.high)
        return min(max(self.low + u * (self.high - self.low), self.low), self.high)

    def encode(self, value: Any, field: str) -> float:
        if self.levels is not None:
            return super().encode(value, field)
        v = _number(field, value)
        if not self.low <= v <= self.high:
            raise ConfigError(field, f"{value!r} is outside [{self.low!r}, {self.high!r}]")
        if self.log:
            lo, hi = math.log(self.low), math.log(self.high)
            return (math.log(v) - lo) / (hi - lo)
        return (v - self.low) / (self.high - self.low)


@dataclasses.dataclass(frozen=True)
class Int(Param):
    """An integer parameter in ``[low, high]`` on the grid ``low, low + step, ...``; ``log``:
    uniform in ``log`` (``low >= 1``, ``step`` 1), as Optuna's ``suggest_int``."""

    KIND: ClassVar[str] = "int"

    low: int
    high: int
    log: bool = False
    step: int = 1

    def __post_init__(self) -> None:
        low = int(_number("Int.low", self.low, integer=True))
        high = int(_number("Int.high", self.high, integer=True))
        step = int(_number("Int.step", self.step, integer=True))
        if not isinstance(self.log, bool):
            raise ConfigError("Int.log", f"must be true or false, got {self.log!r}")
        if low > high:
            raise ConfigError("Int.low", f"must be <= high ({high}), got {low}")
        if step < 1:
            raise ConfigError("Int.step", f"must be an integer >= 1, got {step}")
        if self.log and low < 1:
            raise ConfigError("Int.low", f"must be >= 1 with log = true, got {low}")
        if self.log and step != 1:
            raise ConfigError("Int.step", f"must be 1 with log = true, got {step}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "step", step)

    @property
    def levels(self) -> int:
        return (self.high - self.low) // self.step + 1

    def edges(self) -> np.ndarray:
        if not self.log:
            return super().edges()  # type: ignore[return-value]
        values = np.arange(self.low, self.high + 1, dtype=float)
        logs = np.log(np.append(values - 0.5, values[-1] + 0.5))
        edges = (logs - logs[0]) / (logs[-1] - logs[0])
        edges[0], edges[-1] = 0.0, 1.0
        return edges

    def value(self, k: int) -> int:
        return int(self.low + k * self.step)

    def index(self, value: Any, field: str) -> int:
        v = _number(field, value, integer=True)
        k = int(v - self.low) // self.step
        if not 0 <= k < self.levels or self.value(k) != v:
            raise ConfigError(field, f"{value!r} is not a value of {self!r}")
        return k


@dataclasses.dataclass(frozen=True)
class Categorical(Param):
    """One of ``choices`` (str, int, float, bool or None), unordered, as Optuna's
    ``suggest_categorical``."""

    KIND: ClassVar[str] = "categorical"

    choices: Sequence[Any]
    """Any sequence of values (not a string); stored as a tuple."""

    def __post_init__(self) -> None:
        if isinstance(self.choices, str | bytes) or not isinstance(self.choices, Sequence):
            raise ConfigError(
                "Categorical.choices", f"must be a list of values, got {self.choices!r}"
            )
        choices = tuple(self.choices)
        if not choices:
            raise ConfigError("Categorical.choices", "must hold at least one value")
        for c in choices:
            if not isinstance(c, _CHOICE_TYPES):
                raise ConfigError(
                    "Categorical.choices",
                    f"values must be str, int, float, bool or None, got {c!r} ({type(c).__name__})",
                )
        keys = [_choice_key(c) for c in choices]
        if len(set(keys)) != len(keys):
            raise ConfigError("Categorical.choices", f"has a repeated value: {list(choices)!r}")
        object.__setattr__(self, "choices", choices)

    @property
    def levels(self) -> int:
        return len(self.choices)

    def value(self, k: int) -> Any:
        return self.choices[k]

    def index(self, value: Any, field: str) -> int:
        key = _choice_key(value)
        for k, c in enumerate(self.choices):
            if _choice_key(c) == key:
                return k
        raise ConfigError(field, f"{value!r} is not one of {list(self.choices)!r}")


def _choice_key(value: Any) -> tuple[str, Any]:
    """A key under which 1, 1.0 and True are different choices (as the user wrote them)."""
    return (type(value).__name__, value)


_TYPES: dict[str, type[Param]] = {"float": Float, "int": Int, "categorical": Categorical}


def _param_from_dict(name: str, data: Any) -> Param:
    field = f"space.{name}"
    if isinstance(data, Param):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(
            field,
            f'expected a table such as {{type = "float", low = 0.0, high = 1.0}}, got {data!r}',
        )
    kind = data.get("type")
    if kind not in _TYPES:
        raise ConfigError(
            f"{field}.type", f"must be one of {', '.join(map(repr, _TYPES))}, got {kind!r}"
        )
    cls = _TYPES[kind]
    allowed = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    for key in data:
        if key != "type" and key not in allowed:
            raise ConfigError(
                f"{field}.{key}",
                f"unknown key for a {kind} parameter; allowed: type, {', '.join(allowed)}",
            )
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.default is dataclasses.MISSING and f.name not in data:
            raise ConfigError(f"{field}.{f.name}", f"missing (a {kind} parameter needs it)")
    args = {k: v for k, v in data.items() if k != "type"}
    try:
        return cls(**args)
    except ConfigError as exc:
        sub = exc.field.partition(".")[2]
        raise ConfigError(f"{field}.{sub}", exc.message) from None


_NAME_OK = str.isidentifier


class SearchSpace:
    """Named, typed parameters and their encoding on the unit box (module docstring)."""

    def __init__(self, params: Mapping[str, Param | Mapping[str, Any]]) -> None:
        if isinstance(params, SearchSpace):
            params = params.params
        if not isinstance(params, Mapping) or not params:
            raise ConfigError(
                "space", f"must map each parameter's name to its type, got {params!r}"
            )
        parsed: dict[str, Param] = {}
        for name, p in params.items():
            if not isinstance(name, str) or not name:
                raise ConfigError("space", f"parameter names must be strings, got {name!r}")
            if not isinstance(p, Param | Mapping):
                raise ConfigError(
                    f"space.{name}",
                    f"expected fedxab.Float, fedxab.Int or fedxab.Categorical, got {p!r}",
                )
            parsed[name] = _param_from_dict(name, p)
        self.params: Mapping[str, Param] = parsed
        self.names: tuple[str, ...] = tuple(parsed)
        self.dim = len(parsed)
        self.kinds: tuple[str, ...] = tuple(p.KIND for p in parsed.values())
        self.levels: tuple[int | None, ...] = tuple(p.levels for p in parsed.values())
        self.edges: tuple[np.ndarray | None, ...] = tuple(p.edges() for p in parsed.values())
        """Per dimension: the cell boundaries of a discrete parameter, None if continuous."""
        self.categories: tuple[int | None, ...] = tuple(
            p.levels if p.KIND == "categorical" else None for p in parsed.values()
        )
        """Per dimension: a categorical's number of choices, None for any other parameter."""
        domain = np.tile([0.0, 1.0], (self.dim, 1))
        domain.setflags(write=False)
        self.domain = domain

    def __repr__(self) -> str:
        return f"SearchSpace({dict(self.params)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SearchSpace) and dict(self.params) == dict(other.params)

    def __hash__(self) -> int:
        return hash(tuple(self.params.items()))

    def _point(self, x: Any) -> np.ndarray:
        u = np.asarray(x, dtype=float).reshape(-1)
        if u.shape != (self.dim,):
            raise ValueError(f"expected a point of {self.dim} coordinates, got shape {u.shape}")
        return u

    def decode(self, x: Sequence[float] | np.ndarray) -> dict[str, Any]:
        """The parameters at the point ``x`` of ``[0, 1]^dim``, by name, in the user's units
        (Python floats, ints and the categorical choices themselves)."""
        u = self._point(x)
        return {n: p.decode(float(v)) for (n, p), v in zip(self.params.items(), u, strict=True)}

    def encode(self, params: Mapping[str, Any]) -> np.ndarray:
        """The point of ``params`` (every name of the space; a discrete value encodes to its
        cell's centre); a ConfigError names a missing, unknown or bad parameter."""
        for name in params:
            if name not in self.params:
                raise ConfigError(
                    f"space.{name}", f"unknown parameter; the space has {', '.join(self.names)}"
                )
        out = np.empty(self.dim)
        for j, (name, p) in enumerate(self.params.items()):
            if name not in params:
                raise ConfigError(f"space.{name}", "missing from the parameters given")
            out[j] = p.encode(params[name], f"space.{name}")
        return out

    def snap(self, x: Sequence[float] | np.ndarray) -> np.ndarray:
        """The canonical point of ``decode(x)``: discrete coordinates moved to their cell's
        centre, continuous ones clipped to [0, 1]. Equal parameters snap to equal points."""
        u = np.clip(self._point(x), 0.0, 1.0)
        out = u.copy()
        for j, edges in enumerate(self.edges):
            if edges is not None:
                k = min(max(int(np.searchsorted(edges, u[j], side="right")) - 1, 0), len(edges) - 2)
                out[j] = (edges[k] + edges[k + 1]) / 2
        return out

    def key(self, x: Sequence[float] | np.ndarray) -> tuple[Any, ...]:
        """A hashable key of the parameters at ``x``: equal exactly when they are equal."""
        params = self.decode(x)
        return tuple(_choice_key(params[n]) for n in self.names)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain data (a ``[space]`` table): name -> ``{"type": ..., ...}``."""
        return {name: p.to_dict() for name, p in self.params.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchSpace:
        """The space of a ``[space]`` table (or :meth:`to_dict`); ConfigErrors name the field,
        e.g. ``space.lr.low``."""
        return cls(data)


def as_space(value: Any) -> SearchSpace:
    """``value`` as a :class:`SearchSpace`: a SearchSpace, or a mapping of names to
    :class:`Param` objects, ``[space]`` tables or Optuna distributions
    (:mod:`fedxab.objectives.trial`)."""
    if isinstance(value, SearchSpace):
        return value
    if isinstance(value, Mapping):
        from fedxab.objectives.optuna_compat import convert_distribution, is_optuna_distribution

        value = {
            name: convert_distribution(name, p) if is_optuna_distribution(p) else p
            for name, p in value.items()
        }
    return SearchSpace(value)
