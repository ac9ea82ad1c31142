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
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from fedxab.errors import ConfigError, EvaluationError, FedxabError, one_line
from fedxab.objectives.history import TrialLog
from fedxab.objectives.trial import SpaceMismatchError, call_with_trial
from fedxab.objectives.wrap import FunctionObjective
from fedxab.space import SearchSpace

log = logging.getLogger(__name__)

__all__ = [
    "IN_CODE",
    "ObjectiveFailedError",
    "UserCall",
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
    space: SearchSpace | None = None,
    style: str = "auto",
    deterministic: bool = False,
) -> dict[int, FunctionObjective]:
    """Client id -> its objective (maximised), for the clients ``client_ids``.

    ``functions`` is one callable per client (indexed by client id), or one callable for all;
    a callable with a ``client_id`` parameter is given each client's id. ``kwargs`` are further
    keyword arguments of every call (a config's ``[objective.kwargs]``). With a ``space`` the
    objective searches its unit box (``domain`` is ignored) and the function is given the
    decoded parameters (:class:`UserCall`). Each objective's ``trials``
    (:class:`~fedxab.objectives.history.TrialLog`) records every call of the user's function.
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
        call = UserCall(
            fn,
            m,
            bound=bound,
            space=space,
            style=resolve_style(fn, style) if space is not None else "point",
            vectorized=vectorized,
            deterministic=deterministic,
        )
        label = name or getattr(fn, "__name__", "function")
        objectives[m] = FunctionObjective(
            _negated(call) if minimize else call,
            domain if space is None else space.domain,
            vectorized=vectorized,
            name=f"{label}[client {m}]",
        )
        objectives[m].trials = call.trials
    return objectives


def resolve_style(fn: Callable[..., Any], style: str) -> str:
    """``"trial"`` or ``"params"``: how ``fn`` over a typed space is called. ``"auto"`` reads
    ``fn``'s first parameter: named ``trial`` (Optuna's convention) means a trial, anything
    else the parameters as a dict."""
    if style != "auto":
        return style
    try:
        first = next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):  # a builtin without a signature
        first = None
    return "trial" if first == "trial" else "params"


class ObjectiveFailedError(EvaluationError):
    """The user's function raised: one line naming the client, the parameters and the
    exception (the traceback is logged). ``original`` is the exception raised (None once
    pickled across processes). The run stops, on a broker too (:class:`EvaluationError`)."""

    def __init__(self, client: int, message: str, original: BaseException | None = None) -> None:
        super().__init__(client, message)
        self.original = original


class UserCall:
    """Client ``client``'s calls of the user's function ``fn``, on points of the search box.

    - ``style``: ``"point"`` (a box: ``fn(x)``, ``x`` a 1-D array, or the (n, d) batch when
      ``vectorized``), ``"params"`` (``fn({"lr": ..., ...})``, the point decoded by ``space``)
      or ``"trial"`` (``fn(trial)``, :mod:`fedxab.objectives.trial`);
    - ``deterministic``: the function is called once per distinct point (a box) or distinct
      parameter set (a space: :meth:`SearchSpace.key`); a repeat is answered with the value
      observed, at no call. :attr:`calls` counts the calls of ``fn``;
    - an exception raised by ``fn`` becomes an :class:`ObjectiveFailedError`, one line naming
      the client, the parameters and the exception; its traceback goes to the log.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        client: int,
        *,
        bound: Mapping[str, Any],
        space: SearchSpace | None,
        style: str,
        vectorized: bool,
        deterministic: bool,
    ) -> None:
        self.fn = fn
        self.client = client
        self.bound = dict(bound)
        self.space = space
        self.style = style
        self.vectorized = vectorized
        self.cache: dict[Any, Any] | None = {} if deterministic else None
        self.calls = 0
        """Calls of the user's function so far (rows of a vectorized batch: one each), the
        trials a continued run replays included (so a trial's number is the same)."""
        self.trials = TrialLog()
        """Every call: the parameters the function was given, its value and the call's wall
        time (:mod:`fedxab.objectives.history`)."""
        self.__name__ = getattr(fn, "__name__", "function")

    def key(self, x: np.ndarray) -> Any:
        """What identifies ``x``'s evaluation: its parameters, or the point's bytes."""
        return self.space.key(x) if self.space is not None else np.asarray(x, float).tobytes()

    def __call__(self, x: np.ndarray) -> Any:
        if self.vectorized:
            return self._batch(x)
        if self.cache is None:
            return self._call(x)
        key = self.key(x)
        if key not in self.cache:
            self.cache[key] = self._call(x)
        return self.cache[key]

    def _batch(self, X: np.ndarray) -> Any:
        if self.cache is None:
            return self._call(X, rows=X.shape[0])
        keys = [self.key(row) for row in X]
        first: dict[Any, int] = {}  # each new key's first row
        for i, k in enumerate(keys):
            if k not in self.cache and k not in first:
                first[k] = i
        new = list(first.values())
        if new:
            values = np.asarray(self._call(X[new], rows=len(new)), dtype=float).reshape(-1)
            if values.shape[0] != len(new):  # FunctionObjective names the wrong count
                return values
            self.cache.update((keys[i], v) for i, v in zip(new, values, strict=True))
        return np.array([self.cache[k] for k in keys])

    def describe(self, x: np.ndarray) -> str:
        """The parameters of ``x`` as the user knows them."""
        if self.space is not None:
            return repr(self.space.decode(x))
        return np.array2string(np.asarray(x, dtype=float), separator=", ", threshold=20)

    def _call(self, x: np.ndarray, rows: int = 1) -> Any:
        """The user's function on ``x`` (a batch of ``rows`` points when vectorized), recorded
        in :attr:`trials` with the parameters as the function knows them; the points that a
        continued run replays (:meth:`TrialLog.replay`) are answered from their trials."""
        if self.trials.replaying:
            return self._replayed(x, rows)
        t0 = time.perf_counter()
        value = self._invoke(x, rows)
        wall_s = time.perf_counter() - t0
        if self.vectorized:
            self.trials.add_batch([self._given(row) for row in x], value, wall_s)
        else:
            self.trials.add(self._given(x), value, wall_s)
        return value

    def _replayed(self, x: np.ndarray, rows: int) -> Any:
        """``x``'s values from the trials of the run this one continues, as far as they go
        (the rest of a batch calls the function); a point that is not the next recorded one
        raises :class:`EvaluationError`: the run is not the one it continues."""
        points = list(x) if self.vectorized else [x]
        values = []
        for point in points[: self.trials.replaying]:
            try:
                values.append(self.trials.next_recorded(self._given(point)).value)
            except ValueError as exc:
                raise EvaluationError(
                    self.client,
                    f"client {self.client}: {exc}: it does not continue that run (another "
                    "objective, space or algorithm parameter?); run it again without resume",
                ) from None
            self.calls += 1
        if not self.vectorized:
            return values[0]
        rest = x[len(values) :]
        if len(rest):
            values += list(np.asarray(self._call(rest, rows=len(rest)), float).reshape(-1))
        return np.asarray(values, dtype=float)

    def _given(self, x: np.ndarray) -> Any:
        """The parameters of point ``x`` as the function is given them (decoded, by name)."""
        return x if self.space is None else self.space.decode(x)

    def _invoke(self, x: np.ndarray, rows: int) -> Any:
        number = self.calls
        self.calls += rows
        try:
            if self.style == "params":
                assert self.space is not None
                return self.fn(self.space.decode(x), **self.bound)
            if self.style == "trial":
                assert self.space is not None
                call = functools.partial(self.fn, **self.bound) if self.bound else self.fn
                return call_with_trial(call, self.space, self.space.decode(x), number)
            return self.fn(x.copy(), **self.bound)
        except SpaceMismatchError as exc:  # a config error, found at this client's call
            raise EvaluationError(self.client, f"client {self.client}: {exc}") from exc
        except FedxabError:
            raise
        except Exception as exc:
            at = self.describe(x)
            log.error("client %d: the objective raised at %s", self.client, at, exc_info=exc)
            raise ObjectiveFailedError(
                self.client,
                f"client {self.client}: the objective raised {type(exc).__name__}: "
                f"{one_line(str(exc), 300)} at {at}",
                exc,
            ) from None


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
