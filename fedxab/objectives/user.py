"""A user's own objective: a Python callable per client, named in a config or passed in code.

A config names it ``function = "package.module:function"`` (``[objective]``); only the processes
that evaluate it (the clients) import it, with :func:`load_function`. One callable serves every
client when it takes a ``client_id`` keyword parameter (fedxab passes each client's id); without
one, every client evaluates the same function (each on its own data, its own machine).
:func:`user_objectives` wraps the callables into maximised
:class:`~fedxab.objectives.wrap.FunctionObjective` instances: a function to be minimised is
negated there, and every value shown to the user is turned back (:func:`to_user_value`).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from fedxab.errors import ConfigError
from fedxab.objectives.wrap import FunctionObjective

__all__ = [
    "IN_CODE",
    "check_function_spec",
    "load_function",
    "to_user_value",
    "user_objectives",
]

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


IN_CODE = "<in code>"
"""The ``[objective] function`` of a run whose objectives were passed in code (e.g. to
:func:`fedxab.federate`): there is nothing to import; they must be passed again."""


def check_function_spec(spec: str, field: str) -> None:
    """Raise :class:`ConfigError` naming ``field`` unless ``spec`` reads ``module:function``
    (or is :data:`IN_CODE`)."""
    if spec != IN_CODE and not _SPEC.match(spec):
        raise ConfigError(
            field,
            f"expected 'package.module:function' (a module Python can import and a callable in "
            f"it), got {spec!r}",
        )


def load_function(spec: str, field: str = "objective.function") -> Callable[..., Any]:
    """Import ``package.module:function`` (a dotted attribute path after the colon is allowed);
    a clear :class:`ConfigError` naming ``field`` when the module or the name is missing."""
    check_function_spec(spec, field)
    if spec == IN_CODE:
        raise ConfigError(
            field,
            "this run's objectives were given in code; pass them again (functions=...), or "
            "name an importable function, package.module:function",
        )
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            field,
            f"cannot import module {module_name!r} ({exc}); run this client where the module is "
            "importable (installed, or its directory on PYTHONPATH)",
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(field, f"module {module_name!r} has no {attribute!r}") from None
    if not callable(target):
        raise ConfigError(field, f"{spec!r} is not callable, it is a {type(target).__name__}")
    return target


def takes_client_id(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` has a ``client_id`` parameter (one callable for every client)."""
    try:
        return "client_id" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def user_objectives(
    functions: Callable[..., Any] | Sequence[Callable[..., Any]],
    domain: Sequence[Sequence[float]] | np.ndarray,
    client_ids: Iterable[int],
    *,
    direction: str = "maximize",
    vectorized: bool = False,
    kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> dict[int, FunctionObjective]:
    """Client id -> its objective (maximised), for the clients ``client_ids``.

    ``functions`` is one callable per client (indexed by client id), or one callable for all;
    a callable with a ``client_id`` parameter is given each client's id. ``kwargs`` are further
    keyword arguments of every call (a config's extra ``[objective]`` keys).
    """
    minimize = direction == "minimize"
    objectives = {}
    for m in client_ids:
        fn = functions if callable(functions) else functions[m]
        if not callable(fn):
            raise ConfigError(
                "objective.function", f"client {m}'s objective must be callable, got {fn!r}"
            )
        bound = dict(kwargs or {})
        if takes_client_id(fn):
            bound["client_id"] = m
        call = functools.partial(fn, **bound) if bound else fn
        label = name or getattr(fn, "__name__", "function")
        objectives[m] = FunctionObjective(
            _negated(call) if minimize else call,
            domain,
            vectorized=vectorized,
            name=f"{label}[client {m}]",
        )
    return objectives


def _negated(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``x -> -fn(x)``: a function to minimise as one to maximise."""

    def negated(x: np.ndarray) -> Any:
        value = fn(x)
        if isinstance(value, bool | np.bool_):
            return value  # not a number: FunctionObjective names it
        try:
            return -np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            return value  # not a number: FunctionObjective names it

    return negated


def to_user_value(value: float | np.ndarray, direction: str) -> Any:
    """A value of the maximised objective in the user's ``direction`` (negated back for
    "minimize")."""
    return -value if direction == "minimize" else value
