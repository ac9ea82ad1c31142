"""What a client observed of its own objective: the deployment results, no optimum needed.

A real client's objective is private and its optimum unknown, so regret cannot be measured;
what it can report is what it saw. :class:`ObservedBest` follows one client's rewards as they
are observed (noisy, as the algorithm got them) and gives, at the end, its
:class:`ClientOutcome`: the best observed value and the point where it was observed, and the
best-so-far curve at :data:`OUTCOME_POINTS` rounds, all in the user's direction (a minimised
objective's values are turned back from the maximised ones fedxab works with).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab.algorithms.registry import PRIVATE
from fedxab.objectives.history import TrialRecord, trials_table
from fedxab.regret import round_grid

if TYPE_CHECKING:
    from fedxab.config import Config

__all__ = [
    "OUTCOME_POINTS",
    "ClientOutcome",
    "ObservedBest",
    "mean_best",
    "stays_local",
    "withheld_block",
]

OUTCOME_POINTS = 50
"""Rounds at which a client's best-so-far curve is kept (``round_grid(T, 50)``)."""


def mean_best(bests: Iterable[float | None]) -> float | None:
    """The mean of the clients' best observed values over those that have one (None: no
    client has evaluated yet): what ``fedxab_observed_best_mean`` shows, with no optimum."""
    values = [b for b in bests if b is not None]
    return math.fsum(values) / len(values) if values else None


def stays_local(config: Config) -> bool:
    """Whether everything a client derives from its rewards stays with it: its clients release
    under local DP (a ``[privacy]`` run of an algorithm whose clients release, DP-Fed-PNE), so
    only the releases its ledger charged may leave it. Its outcome (best value and point,
    best-so-far curve, own recommendation), its trials and its regret telemetry's terms are
    then never sent; the server's results say so (:func:`withheld_block`)."""
    return config.privacy is not None and PRIVATE.get(config.algorithm.name) == "client"


def withheld_block(config: Config, regret: bool) -> dict[str, Any]:
    """A server's ``withheld`` block under local DP (:func:`stays_local`): the per-run fields
    it does not have and why (``regret``: the simulation's regret curves, which it would
    otherwise build from the clients' telemetry, are among them)."""
    fields = ["clients"]
    if regret:
        fields += [
            "cumulative_regret",
            "local_cumulative_regret",
            "global_simple_regret",
            "local_simple_regret",
        ]
    return {
        "reason": "local DP",
        "detail": (
            f"{config.algorithm.name} releases under local differential privacy: only the "
            "releases each client's ledger charged leave it; what a client observed (best "
            "value and point, curve, own recommendation, trials) stays in its own results "
            "(fedxab client --output)"
        ),
        "fields": fields,
    }


@functools.lru_cache(maxsize=8)
def _grid(budget: int) -> np.ndarray:
    """``round_grid(budget, OUTCOME_POINTS)``, computed once per budget (a server checks one
    outcome per client against it) and read-only, as it is shared."""
    grid = round_grid(budget, OUTCOME_POINTS)
    grid.setflags(write=False)
    return grid


def _is_number_type(kind: type) -> bool:
    """Values of type ``kind`` are real numbers as plain data: ints or floats, not bools."""
    return issubclass(kind, int | float) and not issubclass(kind, bool)


def _is_int_type(kind: type) -> bool:
    return issubclass(kind, int) and not issubclass(kind, bool)


def _types(value: Any) -> set[type] | None:
    """The types of the items of ``value`` if it is a list or a tuple, else None: a list's
    items are checked by their few distinct types rather than one by one."""
    return set(map(type, value)) if isinstance(value, list | tuple) else None


def _floats(value: Any, name: str) -> np.ndarray:
    types = _types(value)
    if types is None or not all(_is_number_type(t) for t in types):
        raise ValueError(f"{name!r} must be a list of numbers")
    return np.asarray(value, dtype=np.float64)


@dataclasses.dataclass(frozen=True, eq=False)
class ClientOutcome:
    """One client's view of one run, in the user's direction.

    ``best_value`` is the best reward the client observed (None before any evaluation) and
    ``best_point`` where; ``best_so_far[k]`` the best observed up to round ``rounds[k]`` (NaN
    before its first evaluation); ``recommendation`` the client's own final answer where the
    algorithm gives each client one (personalized and local algorithms), else None.
    ``trials``: every call of a user's objective (:mod:`fedxab.objectives.history`), known only
    where the client ran (None elsewhere, and for a simulation); never in :meth:`to_dict`, so
    no message carries them.
    """

    client: int
    evaluations: int
    best_value: float | None
    best_point: np.ndarray | None
    rounds: np.ndarray
    best_so_far: np.ndarray
    recommendation: np.ndarray | None = None
    trials: tuple[TrialRecord, ...] | None = None

    def trials_table(self) -> list[dict[str, Any]]:
        """The client's trials as rows (``pandas.DataFrame(outcome.trials_table())``); empty
        where they are not known here."""
        return trials_table(self.trials or (), self.client)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON and msgpack ready; NaN as None), without the trials."""
        return {
            "client": self.client,
            "evaluations": self.evaluations,
            "best_value": self.best_value,
            "best_point": None if self.best_point is None else self.best_point.tolist(),
            "rounds": self.rounds.tolist(),
            "best_so_far": [None if math.isnan(v) else v for v in self.best_so_far.tolist()],
            "recommendation": (
                None if self.recommendation is None else self.recommendation.tolist()
            ),
        }

    def check(self, budget: int, domain: np.ndarray) -> None:
        """ValueError unless this outcome fits a run of ``budget`` evaluations per client on
        ``domain`` (``(d, 2)`` bounds): what a server checks of a client's outcome."""
        dim = domain.shape[0]
        if self.evaluations > budget:
            raise ValueError(f"{self.evaluations} evaluations, more than the budget {budget}")
        if not np.array_equal(self.rounds, _grid(budget)):
            raise ValueError("'rounds' is not the run's grid of rounds")
        if (self.best_value is None) != (self.best_point is None):
            raise ValueError("'best_value' and 'best_point' must both be given or both null")
        for name in ("best_point", "recommendation"):
            point = getattr(self, name)
            if point is not None and (point.shape != (dim,) or not np.isfinite(point).all()):
                raise ValueError(f"{name!r} must be {dim} finite numbers")
            if point is not None and not (
                (point >= domain[:, 0]).all() and (point <= domain[:, 1]).all()
            ):
                raise ValueError(f"{name!r} lies outside the domain")

    @classmethod
    def from_dict(cls, data: Any) -> ClientOutcome:
        """The inverse of :meth:`to_dict`; a ValueError names any bad field."""
        if not isinstance(data, Mapping) or data.keys() != _FIELDS:
            raise ValueError(f"a client outcome must be a map with the fields {sorted(_FIELDS)}")
        client, evaluations = data["client"], data["evaluations"]
        for name, value in (("client", client), ("evaluations", evaluations)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name!r} must be an integer >= 0, got {value!r}")
        rounds, values = data["rounds"], data["best_so_far"]
        types = _types(rounds)
        if types is None or not all(_is_int_type(t) for t in types):
            raise ValueError("'rounds' must be a list of round numbers")
        types = _types(values)
        if types is None or not all(t is type(None) or _is_number_type(t) for t in types):
            raise ValueError("'best_so_far' must be a list of finite numbers or nulls")
        rounds = np.asarray(rounds, dtype=np.int64)
        curve = np.array(values, dtype=np.float64)  # (None becomes NaN)
        if np.count_nonzero(~np.isfinite(curve)) != values.count(None):  # a NaN or inf sent
            raise ValueError("'best_so_far' must be a list of finite numbers or nulls")
        if rounds.ndim != 1 or curve.shape != rounds.shape:
            raise ValueError("'best_so_far' must hold one value per round of 'rounds'")
        best = data["best_value"]
        if best is not None and (
            isinstance(best, bool) or not isinstance(best, int | float) or not math.isfinite(best)
        ):
            raise ValueError(f"'best_value' must be a finite number or null, got {best!r:.80}")
        point, rec = data["best_point"], data["recommendation"]
        return cls(
            client=client,
            evaluations=evaluations,
            best_value=None if best is None else float(best),
            best_point=None if point is None else _floats(point, "best_point"),
            rounds=rounds,
            best_so_far=curve,
            recommendation=None if rec is None else _floats(rec, "recommendation"),
        )


_FIELDS = frozenset(f.name for f in dataclasses.fields(ClientOutcome)) - {"trials"}


class ObservedBest:
    """Client ``client``'s best observed reward so far, fed batch by batch in pull order.

    Works on the maximised rewards; :meth:`outcome` turns them into the user's ``direction``.
    Memory O(:data:`OUTCOME_POINTS`), whatever the budget T.
    """

    def __init__(self, client: int, budget: int, direction: str = "maximize") -> None:
        self.client = client
        self.sign = -1.0 if direction == "minimize" else 1.0
        self.rounds = _grid(budget)
        self._curve = np.full(self.rounds.size, -np.inf)
        self._best = -np.inf
        self._point: np.ndarray | None = None
        self.used = 0
        self._next = 0  # the first of :attr:`rounds` after :attr:`used`

    def add(self, X: np.ndarray, rewards: np.ndarray) -> None:
        """The batch ``X`` was evaluated with (maximised, observed) ``rewards``, in order."""
        n = rewards.shape[0]
        if n == 0:
            return
        start = self.used
        if n == 1:  # one pull (HCT's ask and tell): the same values, without the array work
            self._add_one(X, rewards)
            return
        running = np.maximum(np.maximum.accumulate(rewards), self._best)
        i = int(np.argmax(rewards))
        if rewards[i] > self._best:
            self._best, self._point = float(rewards[i]), np.array(X[i], dtype=np.float64)
        lo = int(np.searchsorted(self.rounds, start + 1))
        hi = int(np.searchsorted(self.rounds, start + n, side="right"))
        self._curve[lo:hi] = running[self.rounds[lo:hi] - start - 1]
        self.used += n
        self._next = hi

    def _add_one(self, X: np.ndarray, rewards: np.ndarray) -> None:
        """:meth:`add` of one pull; ``np.maximum(r, best)`` is ``r if r >= best else best``."""
        r, best = rewards[0], self._best
        if r > best:
            self._best, self._point = float(r), np.array(X[0], dtype=np.float64)
        self.used += 1
        if self._next < self.rounds.size and self.rounds[self._next] == self.used:
            self._curve[self._next] = r if r >= best else best
            self._next += 1

    @property
    def best(self) -> float | None:
        """The best reward observed so far, in the user's direction (None: no evaluation)."""
        return None if self._point is None else self.sign * self._best

    def outcome(
        self,
        recommendation: np.ndarray | None = None,
        trials: tuple[TrialRecord, ...] | None = None,
    ) -> ClientOutcome:
        """The client's outcome so far, in the user's direction (with its ``trials``)."""
        curve = np.where(np.isfinite(self._curve), self.sign * self._curve, np.nan)
        return ClientOutcome(
            client=self.client,
            evaluations=self.used,
            best_value=self.best,
            best_point=None if self._point is None else self._point.copy(),
            rounds=self.rounds.copy(),
            best_so_far=curve,
            recommendation=(
                None
                if recommendation is None
                else np.asarray(recommendation, dtype=np.float64).reshape(-1).copy()
            ),
            trials=trials,
        )
