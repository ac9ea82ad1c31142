"""The results file, ``results.json``: what a run produced, in a stable, versioned schema.

Layout (schema ``fedxab.results/1``)::

    {
      "schema": "fedxab.results/1",
      "fedxab_version": "0.1.0",
      "created_at": "2025-01-01T12:00:00+00:00",      # UTC
      "config": {...},                                 # Config.to_dict() echo
      "algorithm": "hct",
      "objective": {"name", "dim", "domain", "optimum_value", "maximizer"},
      "runs": [
        {"seed", "rounds": [...],                      # <= ~500 round numbers, last included
         "cumulative_regret": [...],                   # at those rounds, averaged over clients
         "average_regret": [...],                      # cumulative_regret / rounds
         "recommendation": [...], "simple_regret", "evaluations", "wall_time_s",
         # federated runs only:
         "local_cumulative_regret": [...],             # on the same rounds ([PF] local regret)
         "global_simple_regret": [...],                # when present: mean over clients of the
         "local_simple_regret": [...],                 #   best regret so far ([DP]'s metric)
         "communication": {"clients", "rounds", "messages_up", "messages_down",
                           "bytes_up", "bytes_down", "per_phase": [{...}, ...]},
         "clients": [{"client", "evaluations", "best_value", "best_point",   # federated:
                      "rounds", "best_so_far", "recommendation"}, ...],     # what each client
                                                       # observed, in the user's direction
         # with a typed [space] (config "space"): the points decoded, by name, in user units:
         "recommendation_params": {...},               # and per client "best_params" and
                                                       # "recommendation_params" (or null)
         "withheld": {"reason", "detail", "fields": [...]},  # a server under local DP: the
                                                       # fields it does not have, and why,
                      "best_value_dp": {"client id": {...}}},  # [privacy] release_best: each
                                                       # client's best value, noised, charged
         # private algorithms only (e.g. dpfedpne), recomputed from the privacy ledger:
         "privacy": {"accountant", "delta", "budget_epsilon", "max_epsilon",
                     "epsilon": [per client], "releases": [per client],
                     "withdrawn": {"client id": phase it refused},
                     "epsilon_by_phase": [[phase, max over clients of epsilon so far], ...]}}
      ],
      "summary": {"runs": n, "cumulative_regret": {"mean", "std"},
                  "average_regret": {"mean", "std"}, "simple_regret": {"mean", "std"},
                  "local_cumulative_regret": {"mean", "std"},    # federated runs only
                  "global_simple_regret": {"mean", "std"},       # when the curves are present
                  "local_simple_regret": {"mean", "std"}},       # (final round)
      "communication": null,                           # federated: mean over runs (below)
      "privacy": null     # private: {"runs", "accountant", "delta", "budget_epsilon",
    }                     #           "max_epsilon": {"mean", "std"}, "withdrawn": mean count}

Regret values are ``null`` when the objective's optimum is unknown. Summary statistics are over
runs, at the final round; ``std`` is the population standard deviation (``ddof = 0``), so a
single run has std 0.

Federated runs: ``cumulative_regret`` is the global regret averaged over clients,
``(1/M) sum_{s<=t} sum_m (f* - f(x_{m,s}))`` ([FX]'s plotted quantity), ``local_cumulative_regret``
the local one, ``(1/M) sum_{s<=t} sum_m (f_m* - f_m(x_{m,s}))`` ([PF]'s), both against the
per-client round t. ``global_simple_regret`` and ``local_simple_regret`` (the simple regret [DP]
plots) are, at round t, the mean over clients of ``min_{tau<=t} (f* - f(x_{m,tau}))`` and
``min_{tau<=t} (f_m* - f_m(x_{m,tau}))`` (noise-free); a client that stopped early (withdrew) keeps
its last best value; files without them still load. ``evaluations`` counts all clients' evaluations.
A run's ``communication`` counts phases (one communication round each), messages and encoded bytes
up (clients -> server) and down (server -> clients), in total and per phase; the top-level
``communication`` holds ``clients`` and the mean over runs of ``rounds``, ``messages_up``,
``messages_down``, ``bytes_up`` and ``bytes_down``. These fields were added to schema 1 as optional
keys: single-agent files are unchanged and older files still load.

Under local DP (DP-Fed-PNE) only the releases a client's ledger charged leave it: a server's
results have no ``clients`` block and no regret curves built from the clients' telemetry, and
say so in ``withheld`` (``reason`` "local DP", the ``fields`` it lacks); each client's own results
(``fedxab client --output``) hold them. Every run with a user's objective also writes, next to
``results.json``, each client's trials that this party evaluated,
``trials-seed{seed}-client{m}.csv`` (:mod:`fedxab.objectives.history`; pandas reads it).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedxab.errors import ConfigError, FedxabError
from fedxab.objectives.history import write_trials_csv
from fedxab.private_files import private_dir, write_atomically
from fedxab.run.outcome import ClientOutcome
from fedxab.space import SearchSpace

__all__ = [
    "COMMUNICATION_COUNTERS",
    "RESULTS_FILENAME",
    "SCHEMA",
    "TRIALS_FILENAME",
    "ResultsError",
    "RunRecord",
    "RunResults",
    "load_results",
    "summarize",
    "summarize_communication",
    "summarize_privacy",
    "write_results",
]

log = logging.getLogger(__name__)

SCHEMA = "fedxab.results/1"
RESULTS_FILENAME = "results.json"
TRIALS_FILENAME = "trials-seed{seed}-client{client}.csv"
"""A client's trials of one run, next to ``results.json`` (:func:`write_results`)."""


class ResultsError(FedxabError, ValueError):
    """A results file is missing, unreadable, or does not follow the results schema."""


def _version() -> str:
    from fedxab import __version__

    return __version__


def _float_or_none(value: Any) -> float | None:
    if value is None:
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _list_or_none(arr: np.ndarray | None) -> list[float | None] | None:
    """A curve as JSON numbers; a value that is not finite (a round no client's telemetry
    reached: no mean exists) as null, read back as NaN."""
    if arr is None:
        return None
    return [float(v) if math.isfinite(v) else None for v in np.asarray(arr, dtype=np.float64)]


@dataclasses.dataclass(frozen=True, eq=False)
class RunRecord:
    """One run (one seed): the regret curve on a grid of rounds and the final answer.

    ``cumulative_regret[k]`` is the cumulative regret after round ``rounds[k]`` (averaged over
    clients in the federated case), or ``None`` when the optimum is unknown.
    ``local_cumulative_regret`` (federated runs) is the local regret on the same rounds, and
    ``communication`` the run's message and byte counts (see the module docstring).
    """

    seed: int
    rounds: np.ndarray = dataclasses.field(repr=False)
    cumulative_regret: np.ndarray | None = dataclasses.field(repr=False)
    recommendation: np.ndarray
    simple_regret: float | None
    evaluations: int
    wall_time_s: float
    local_cumulative_regret: np.ndarray | None = dataclasses.field(default=None, repr=False)
    communication: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    privacy: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    global_simple_regret: np.ndarray | None = dataclasses.field(default=None, repr=False)
    """Federated runs: at each of ``rounds``, the mean over clients of the client's best
    noise-free global regret so far, ``min_{tau <= t} (f* - f(x_{m,tau}))`` ([DP]'s metric)."""
    local_simple_regret: np.ndarray | None = dataclasses.field(default=None, repr=False)
    """Federated runs: the same on each client's own objective, ``min_{tau <= t} (f_m* -
    f_m(x_{m,tau}))``. A client that stopped early keeps its last best value."""
    regret_coverage: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    """Set only when the curves are incomplete: a run over a broker whose server did not get
    every client's regret telemetry within ``telemetry_timeout_s`` (a client gone for good, or
    lost messages). ``{"pulls_expected", "pulls_received", "clients",
    "fewest_clients_per_round"}``: the pulls the curves should count, those they do count, the
    clients short of theirs, and the fewest clients whose telemetry a round's mean holds (the
    cumulative curves average each round over the clients that reported it). None: the curves
    count every pull (always so in process)."""
    run_id: str | None = None
    """The run's id (:func:`~fedxab.run.identity.run_id_for`): what its topics, checkpoints and
    ledger rows are keyed by (``fedxab audit --run``). None in files written before it."""
    clients: tuple[ClientOutcome, ...] | None = dataclasses.field(default=None, repr=False)
    """Federated runs: what each client observed of its own objective, in the user's direction
    (:class:`~fedxab.run.outcome.ClientOutcome`: best observed value and point, best-so-far
    curve, own recommendation), by client id; the deployment results, known without any
    optimum. On a broker, clients that never sent theirs are missing."""
    withheld: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    """The fields this party does not have, and why: ``{"reason", "detail", "fields"}``
    (a server under local DP, :func:`~fedxab.run.outcome.withheld_block`); None: nothing
    withheld."""

    space: SearchSpace | None = dataclasses.field(default=None, repr=False, compare=False)
    """The run's typed parameters (the config's ``[space]``), which decode its points: set by
    :class:`RunResults` from its config; None on a box."""

    def params(self, point: np.ndarray | None) -> dict[str, Any] | None:
        """``point`` of the search box as named parameters in the user's units (None without a
        space or a point)."""
        if self.space is None or point is None:
            return None
        return self.space.decode(point)

    @property
    def recommendation_params(self) -> dict[str, Any] | None:
        """The server's recommendation as named parameters (with a ``[space]``)."""
        return self.params(self.recommendation)

    @property
    def best_params(self) -> dict[int, dict[str, Any] | None] | None:
        """Per client id: where it observed its best value, as named parameters (with a
        ``[space]``; None for a client without an evaluation)."""
        if self.space is None or self.clients is None:
            return None
        return {c.client: self.params(c.best_point) for c in self.clients}

    def trials_table(self) -> list[dict[str, Any]]:
        """Every known trial of every client, as rows with a ``client`` column
        (``pandas.DataFrame(run.trials_table())``; :mod:`fedxab.objectives.history`)."""
        return [row for outcome in self.clients or () for row in outcome.trials_table()]

    def is_withheld(self, field: str) -> bool:
        """Whether ``field`` (e.g. ``"clients"``, ``"cumulative_regret"``) is withheld."""
        return self.withheld is not None and field in self.withheld["fields"]

    @property
    def average_regret(self) -> np.ndarray | None:
        """Average regret per round, ``cumulative_regret / rounds``."""
        if self.cumulative_regret is None:
            return None
        return self.cumulative_regret / self.rounds.astype(np.float64)

    @property
    def final_cumulative_regret(self) -> float | None:
        return None if self.cumulative_regret is None else float(self.cumulative_regret[-1])

    @property
    def final_average_regret(self) -> float | None:
        avg = self.average_regret
        return None if avg is None else float(avg[-1])

    @property
    def final_local_cumulative_regret(self) -> float | None:
        local = self.local_cumulative_regret
        return None if local is None else float(local[-1])

    @property
    def final_global_simple_regret(self) -> float | None:
        curve = self.global_simple_regret
        return None if curve is None else float(curve[-1])

    @property
    def final_local_simple_regret(self) -> float | None:
        curve = self.local_simple_regret
        return None if curve is None else float(curve[-1])

    @property
    def is_federated(self) -> bool:
        return self.communication is not None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "seed": int(self.seed),
            "run_id": self.run_id,
            "rounds": [int(r) for r in self.rounds],
            "cumulative_regret": _list_or_none(self.cumulative_regret),
            "average_regret": _list_or_none(self.average_regret),
            "recommendation": [float(v) for v in np.asarray(self.recommendation).reshape(-1)],
            "simple_regret": _float_or_none(self.simple_regret),
            "evaluations": int(self.evaluations),
            "wall_time_s": float(self.wall_time_s),
        }
        if self.local_cumulative_regret is not None or self.communication is not None:
            d["local_cumulative_regret"] = _list_or_none(self.local_cumulative_regret)
        if self.communication is not None:
            d["communication"] = _plain_json(self.communication)
        if self.privacy is not None:
            d["privacy"] = _plain_json(self.privacy)
        if self.global_simple_regret is not None:
            d["global_simple_regret"] = _list_or_none(self.global_simple_regret)
        if self.local_simple_regret is not None:
            d["local_simple_regret"] = _list_or_none(self.local_simple_regret)
        if self.regret_coverage is not None:
            d["regret_coverage"] = _plain_json(self.regret_coverage)
        if self.space is not None:
            d["recommendation_params"] = _plain_json(self.recommendation_params)
        if self.clients is not None:
            d["clients"] = [self._client_dict(outcome) for outcome in self.clients]
        if self.withheld is not None:
            d["withheld"] = _plain_json(self.withheld)
        return d

    def _client_dict(self, outcome: ClientOutcome) -> dict[str, Any]:
        d = outcome.to_dict()
        if self.space is not None:
            d["best_params"] = _plain_json(self.params(outcome.best_point))
            d["recommendation_params"] = _plain_json(self.params(outcome.recommendation))
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "run") -> RunRecord:
        def need(key: str) -> Any:
            if key not in d:
                raise ResultsError(f"{where}: missing field {key!r}")
            return d[key]

        try:
            rounds = np.asarray(need("rounds"), dtype=np.int64)
            cum_raw = need("cumulative_regret")
            cum = None if cum_raw is None else np.asarray(cum_raw, dtype=np.float64)
            rec = np.asarray(need("recommendation"), dtype=np.float64)
            simple = need("simple_regret")
            local_raw = d.get("local_cumulative_regret")
            local = None if local_raw is None else np.asarray(local_raw, dtype=np.float64)
            gs_raw, ls_raw = d.get("global_simple_regret"), d.get("local_simple_regret")
            g_simple = None if gs_raw is None else np.asarray(gs_raw, dtype=np.float64)
            l_simple = None if ls_raw is None else np.asarray(ls_raw, dtype=np.float64)
            record = cls(
                seed=int(need("seed")),
                rounds=rounds,
                cumulative_regret=cum,
                recommendation=rec,
                simple_regret=None if simple is None else float(simple),
                evaluations=int(need("evaluations")),
                wall_time_s=float(need("wall_time_s")),
                local_cumulative_regret=local,
                communication=_check_communication(d.get("communication"), where),
                privacy=_check_privacy(d.get("privacy"), where),
                global_simple_regret=g_simple,
                local_simple_regret=l_simple,
                regret_coverage=_check_coverage(d.get("regret_coverage"), where),
                clients=_client_outcomes(d.get("clients"), where),
                run_id=_run_id(d.get("run_id"), where),
                withheld=_check_withheld(d.get("withheld"), where),
            )
        except ResultsError:
            raise
        except (TypeError, ValueError) as exc:
            raise ResultsError(f"{where}: malformed value ({exc})") from exc
        if rounds.ndim != 1 or rounds.size == 0:
            raise ResultsError(f"{where}: 'rounds' must be a non-empty list of round numbers")
        if np.any(rounds < 1) or np.any(np.diff(rounds) <= 0):
            raise ResultsError(f"{where}: 'rounds' must be increasing round numbers >= 1")
        for key, curve in (
            ("cumulative_regret", cum),
            ("local_cumulative_regret", local),
            ("global_simple_regret", g_simple),
            ("local_simple_regret", l_simple),
        ):
            if curve is not None and curve.shape != rounds.shape:
                raise ResultsError(
                    f"{where}: {key!r} has {curve.size} values for {rounds.size} rounds"
                )
        return record


def _run_id(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ResultsError(f"{where}: 'run_id' must be a string")
    return value


_DECODED = ("best_params", "recommendation_params")
"""Fields of a client's results that :class:`RunRecord` computes from its points."""


def _client_outcomes(value: Any, where: str) -> tuple[ClientOutcome, ...] | None:
    """A run's ``clients`` block as read, or None (files written before it still load)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ResultsError(f"{where}: 'clients' must be a list of client outcomes")
    outcomes = []
    for k, item in enumerate(value):
        if isinstance(item, Mapping):  # the named parameters are decoded again on reading
            item = {n: v for n, v in item.items() if n not in _DECODED}
        try:
            outcomes.append(ClientOutcome.from_dict(item))
        except (TypeError, ValueError) as exc:
            raise ResultsError(f"{where}: clients[{k}]: {exc}") from exc
    return tuple(outcomes)


def _check_withheld(value: Any, where: str) -> dict[str, Any] | None:
    """A run's ``withheld`` block as read: a reason, a detail and the names of the fields."""
    if value is None:
        return None
    fields = value.get("fields") if isinstance(value, Mapping) else None
    if not (
        isinstance(value, Mapping)
        and isinstance(value.get("reason"), str)
        and isinstance(value.get("detail", ""), str)
        and isinstance(fields, list)
        and all(isinstance(f, str) for f in fields)
    ):
        raise ResultsError(
            f"{where}: 'withheld' must be an object with a 'reason' and a list of 'fields'"
        )
    return dict(value)


def _check_coverage(value: Any, where: str) -> dict[str, Any] | None:
    """A ``regret_coverage`` block as read: pull counts and client ids, or None."""
    if value is None:
        return None
    keys = {"pulls_expected", "pulls_received", "clients"}
    fewest = "fewest_clients_per_round"  # older results files lack it
    if not isinstance(value, Mapping) or not keys <= set(value) <= keys | {fewest}:
        raise ResultsError(
            f"{where}: 'regret_coverage' must have the fields {sorted(keys)} (and {fewest!r})"
        )
    counts = (value["pulls_expected"], value["pulls_received"], value.get(fewest, 0))
    clients = value["clients"]
    if not all(isinstance(c, int) and c >= 0 for c in counts) or not (
        isinstance(clients, list) and all(isinstance(m, int) and m >= 0 for m in clients)
    ):
        raise ResultsError(
            f"{where}: 'regret_coverage' must hold pull counts >= 0 and a list of client ids"
        )
    return dict(value)


COMMUNICATION_COUNTERS = ("rounds", "messages_up", "messages_down", "bytes_up", "bytes_down")
"""The totals of a run's ``communication`` block (all integers >= 0)."""


def _plain_json(value: Any) -> Any:
    """``value`` as JSON-ready dicts, lists and Python scalars (numpy scalars converted)."""
    if isinstance(value, Mapping):
        return {str(k): _plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_plain_json(v) for v in value]
    if isinstance(value, np.bool_ | bool):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _check_communication(value: Any, where: str) -> Mapping[str, Any] | None:
    """A run's ``communication`` block, checked: None, or counters >= 0 and a per-phase list."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ResultsError(f"{where}: 'communication' must be an object")
    for key in COMMUNICATION_COUNTERS:
        v = value.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ResultsError(f"{where}: communication.{key} must be an integer >= 0, got {v!r}")
    per_phase = value.get("per_phase", [])
    if not isinstance(per_phase, list) or not all(isinstance(p, Mapping) for p in per_phase):
        raise ResultsError(f"{where}: communication.per_phase must be a list of objects")
    return value


def _check_privacy(value: Any, where: str) -> Mapping[str, Any] | None:
    """A run's ``privacy`` block, checked: None, or an accountant and one epsilon per client."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not isinstance(value.get("accountant"), str):
        raise ResultsError(f"{where}: 'privacy' must be an object naming its accountant")
    epsilon = value.get("epsilon")
    if not isinstance(epsilon, list) or not all(
        isinstance(e, int | float) and e >= 0 for e in epsilon
    ):
        raise ResultsError(f"{where}: privacy.epsilon must be a list of numbers >= 0")
    return value


def _stats(values: Sequence[float | None]) -> dict[str, float | None]:
    """Mean and std over runs; null if a run has no value (unknown optimum, or no telemetry)."""
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return {"mean": None, "std": None}
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std())}


def summarize(runs: Sequence[RunRecord]) -> dict[str, Any]:
    """Mean and (population) std over runs of the final cumulative, average and simple regret
    (and, for federated runs, of the final local cumulative regret and, where present, of the
    final-round global and local simple-regret curves)."""
    out: dict[str, Any] = {
        "runs": len(runs),
        "cumulative_regret": _stats([r.final_cumulative_regret for r in runs]),
        "average_regret": _stats([r.final_average_regret for r in runs]),
        "simple_regret": _stats([r.simple_regret for r in runs]),
    }
    if any(r.is_federated or r.local_cumulative_regret is not None for r in runs):
        out["local_cumulative_regret"] = _stats([r.final_local_cumulative_regret for r in runs])
    if any(r.global_simple_regret is not None for r in runs):
        out["global_simple_regret"] = _stats([r.final_global_simple_regret for r in runs])
    if any(r.local_simple_regret is not None for r in runs):
        out["local_simple_regret"] = _stats([r.final_local_simple_regret for r in runs])
    return out


def summarize_communication(runs: Sequence[RunRecord]) -> dict[str, Any] | None:
    """The top-level ``communication`` block: the number of clients and the mean over runs of
    each counter of :data:`COMMUNICATION_COUNTERS`; ``None`` if no run communicated."""
    blocks = [r.communication for r in runs if r.communication is not None]
    if not blocks:
        return None
    out: dict[str, Any] = {"runs": len(blocks)}
    clients = {b.get("clients") for b in blocks}
    out["clients"] = clients.pop() if len(clients) == 1 else None
    for key in COMMUNICATION_COUNTERS:
        out[key] = float(np.mean([float(b[key]) for b in blocks]))
    return out


def summarize_privacy(runs: Sequence[RunRecord]) -> dict[str, Any] | None:
    """The top-level ``privacy`` block: the accounting settings and, over runs, the largest
    client epsilon (mean, std) and the mean number of clients that withdrew; ``None`` if no run
    was private."""
    blocks = [r.privacy for r in runs if r.privacy is not None]
    if not blocks:
        return None
    first = blocks[0]
    return {
        "runs": len(blocks),
        "accountant": first["accountant"],
        "delta": first["delta"],
        "budget_epsilon": first["budget_epsilon"],
        "max_epsilon": _stats([float(b["max_epsilon"]) for b in blocks]),
        "withdrawn": float(np.mean([len(b["withdrawn"]) for b in blocks])),
    }


def _utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclasses.dataclass(frozen=True, eq=False)
class RunResults:
    """Everything a job produced: the config echo, the objective, one record per run.

    ``communication`` and ``privacy`` are ``None`` for single-agent runs; the federated and
    privacy issues fill them with plain JSON data.
    """

    config: Mapping[str, Any]
    algorithm: str
    objective: Mapping[str, Any]
    runs: tuple[RunRecord, ...]
    communication: Mapping[str, Any] | None = None
    privacy: Mapping[str, Any] | None = None
    algorithm_choice: Mapping[str, Any] | None = None
    """What ``algorithm = "auto"`` chose (``name``, ``params``, ``reason``); None otherwise."""
    created_at: str = dataclasses.field(default_factory=_utc_now)
    fedxab_version: str = dataclasses.field(default_factory=_version)
    source: Path | None = None
    """The file these results were loaded from, if any (not written to the file)."""

    def __post_init__(self) -> None:
        space = self.space
        if space is not None:  # every run decodes its points with the config's space
            runs = tuple(dataclasses.replace(r, space=space) for r in self.runs)
            object.__setattr__(self, "runs", runs)

    @functools.cached_property
    def space(self) -> SearchSpace | None:
        """The typed parameters of the config's ``[space]``, or None (a box)."""
        table = self.config.get("space") if isinstance(self.config, Mapping) else None
        if not table:
            return None
        try:
            return SearchSpace.from_dict(table)
        except ConfigError as exc:
            raise ResultsError(f"config.{exc}") from None

    @property
    def summary(self) -> dict[str, Any]:
        return summarize(self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "fedxab_version": self.fedxab_version,
            "created_at": self.created_at,
            "config": self.config,
            "algorithm": self.algorithm,
            "algorithm_choice": self.algorithm_choice,
            "objective": self.objective,
            "runs": [r.to_dict() for r in self.runs],
            "summary": self.summary,
            "communication": self.communication,
            "privacy": self.privacy,
        }

    def to_json(self) -> str:
        """The results file's text: indented objects, number lists kept on one line."""
        return _dumps(self.to_dict()) + "\n"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: Path | None = None) -> RunResults:
        where = str(source) if source is not None else "results"
        if not isinstance(d, Mapping):
            raise ResultsError(f"{where}: expected a JSON object at the top level")
        schema = d.get("schema")
        if schema != SCHEMA:
            raise ResultsError(
                f"{where}: schema is {schema!r}, expected {SCHEMA!r} "
                "(not a fedxab results file, or written by an incompatible version)"
            )
        for key in ("config", "algorithm", "objective", "runs"):
            if key not in d:
                raise ResultsError(f"{where}: missing field {key!r}")
        if not isinstance(d["runs"], list) or not d["runs"]:
            raise ResultsError(f"{where}: 'runs' must be a non-empty list")
        if not isinstance(d["objective"], Mapping) or not isinstance(d["config"], Mapping):
            raise ResultsError(f"{where}: 'objective' and 'config' must be objects")
        runs = []
        for i, run in enumerate(d["runs"]):
            if not isinstance(run, Mapping):
                raise ResultsError(f"{where}: runs[{i}] must be an object")
            runs.append(RunRecord.from_dict(run, where=f"{where}: runs[{i}]"))
        return cls(
            config=d["config"],
            algorithm=str(d["algorithm"]),
            objective=d["objective"],
            runs=tuple(runs),
            communication=d.get("communication"),
            privacy=d.get("privacy"),
            algorithm_choice=d.get("algorithm_choice"),
            created_at=str(d.get("created_at", "")),
            fedxab_version=str(d.get("fedxab_version", "")),
            source=source,
        )


def _dumps(value: Any, level: int = 0) -> str:
    """JSON with 2-space indented objects but lists of scalars on one line (compact curves)."""
    pad = "  " * (level + 1)
    if isinstance(value, Mapping) and value:
        items = [f"{pad}{json.dumps(str(k))}: {_dumps(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    if isinstance(value, list | tuple) and any(
        isinstance(v, Mapping | list | tuple) for v in value
    ):
        items = [f"{pad}{_dumps(v, level + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + "  " * level + "]"
    return json.dumps(value, allow_nan=False)


def write_results(results: RunResults, out_dir: str | Path) -> Path:
    """Write ``results.json`` into ``out_dir`` (created if needed) atomically; return its path.
    Each client's trials known here go beside it (:data:`TRIALS_FILENAME`).

    The JSON goes to a temporary file in the same directory, is flushed to disk, and then
    replaces ``results.json`` with :func:`os.replace`, so a reader never sees a partial file;
    the file is owner-only (what each client observed is private to it).
    """
    out = private_dir(out_dir)
    target = out / RESULTS_FILENAME
    write_atomically(target, results.to_json().encode("utf-8"))
    log.info("wrote %s", target)
    for run in results.runs:
        for outcome in run.clients or ():
            if outcome.trials is not None:
                name = TRIALS_FILENAME.format(seed=run.seed, client=outcome.client)
                write_trials_csv(out / name, outcome.trials_table())
    return target


def load_results(path: str | Path) -> RunResults:
    """Read and validate a results file; raise :class:`ResultsError` with the reason if bad."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ResultsError(f"{p}: results file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{p}: cannot read results file ({exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(
            f"{p}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from exc
    return RunResults.from_dict(data, source=p)
