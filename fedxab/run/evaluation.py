"""Client evaluation with regret bookkeeping, shared by every transport.

A simulated federation knows each client's objective exactly, so it can measure regret. Two
pieces do that, the same way in-process and on a broker, so that the same seed gives bit-identical
regret curves on every transport:

- :class:`ClientEvaluator` is client m's ``evaluate(X)``: it evaluates ``f_m`` on the whole
  batch, adds noise from the stream ``(seed, "noise", m)`` (one sequential stream: a client that
  replays its phases from the start redraws exactly the same noise) and keeps, per pull, the
  noise-free regret terms ``f* - f(x)`` (global objective) and ``f_m* - f_m(x)`` (its own).
  :meth:`ClientEvaluator.take` hands over what the client evaluated since the last call as one
  :class:`Telemetry` (start position in the client's budget, count, terms);
- :class:`RegretSums` adds the clients' telemetry into per-round sums over clients, always in
  (phase, client) order, whatever order it arrived in. Summing in one fixed order is what makes
  floating-point results independent of the transport.

Telemetry is simulation bookkeeping, never part of the algorithm: the server state machine never
sees it. Over a broker, clients send it on the control topic; with an unknown optimum it carries
only the counts.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab import regret as _regret
from fedxab.algorithms.protocol import wire_array, wire_int
from fedxab.errors import EvaluationError, FedxabError, ObjectiveError, ProtocolError
from fedxab.objectives.base import Objective
from fedxab.objectives.families import ClientFamily, OffsetObjective
from fedxab.objectives.noise import NoiseModel
from fedxab.run.outcome import ObservedBest
from fedxab.seeding import stream

if TYPE_CHECKING:
    from fedxab.config import Config

__all__ = [
    "TELEMETRY_PULLS",
    "BudgetExceededError",
    "ClientEvaluator",
    "GlobalValues",
    "RegretSums",
    "Telemetry",
    "regret_known",
    "telemetry_batches",
]


class BudgetExceededError(FedxabError, RuntimeError):
    """A client asked for more evaluations than its budget T (an algorithm bug)."""


class GlobalValues:
    """``f(X)`` of the global objective, reusing the last batch's values when a client pulls the
    same points (the synchronised schedules of the phased algorithms: every client pulls the same
    nodes). One instance is shared by the clients of one process."""

    def __init__(self, objective: Objective) -> None:
        self.objective = objective
        self._last_x: np.ndarray | None = None
        self._last_g: np.ndarray | None = None
        self._last_terms: np.ndarray | None = None

    def __call__(self, X: np.ndarray) -> np.ndarray:
        last = self._last_x
        if last is not None and last.shape == X.shape and (last == X).all():
            return self._last_g  # type: ignore[return-value]
        g = self.objective(X)
        self._last_x, self._last_g, self._last_terms = X.copy(), g, None
        return g

    def regret_terms(self) -> np.ndarray:
        """``f* - f(X)`` of the last batch: computed once per batch and shared (read-only) by
        every client that pulls it, as ``f(X)`` is. A client agent keeps its clients' terms
        until it sends their telemetry, so one array per batch rather than one per client is
        also the memory it holds."""
        if self._last_terms is None:
            assert self._last_g is not None and self.objective.optimum_value is not None
            terms = self.objective.optimum_value - self._last_g
            terms.setflags(write=False)
            self._last_terms = terms
        return self._last_terms


def _local_function(
    family: ClientFamily, m: int
) -> tuple[Callable[[np.ndarray, np.ndarray | None], np.ndarray], bool]:
    """``(X, f(X)) -> f_m(X)``, without re-evaluating the base where f_m = f (+ offset), and
    whether it reads ``f(X)`` (else ``f(X)`` may be None: a user family, or a run that does not
    measure the global regret)."""
    obj = family.client(m)
    glob = family.global_objective
    if glob is not None and obj is glob:
        return (lambda X, g: g), True
    if isinstance(obj, OffsetObjective) and obj.base is glob:
        offset = obj.offset
        return (lambda X, g: g + offset), True
    return (lambda X, g: obj(X)), False


@dataclass(frozen=True)
class Telemetry:
    """What one client evaluated in one phase: positions ``start .. start + count - 1`` of its
    budget and, where the optima are known, the regret terms of those pulls."""

    phase: int
    client: int
    start: int
    count: int
    global_terms: np.ndarray | None
    local_terms: np.ndarray | None

    def split(self, max_count: int) -> list[Telemetry]:
        """This telemetry as pieces of at most ``max_count`` pulls each, cut at fixed offsets
        from :attr:`start` (so a piece sent twice is the same piece: the receiver dedupes it)."""
        if self.count <= max_count:
            return [self]
        pieces = []
        for lo in range(0, self.count, max_count):
            hi = min(lo + max_count, self.count)
            g, loc = self.global_terms, self.local_terms
            pieces.append(
                Telemetry(
                    self.phase,
                    self.client,
                    self.start + lo,
                    hi - lo,
                    None if g is None else g[lo:hi],
                    None if loc is None else loc[lo:hi],
                )
            )
        return pieces


_TERMS = ("global_terms", "local_terms")

TELEMETRY_PULLS = 16_384
"""Most pulls in one telemetry message: run-length encoded, at worst (no two equal terms in a
row) 32 bytes each with both regret terms, 512 KiB; a phased algorithm's few hundred bytes."""


def telemetry_to_wire(
    entries: Sequence[Telemetry], encoded: dict[tuple[int, ...], Any] | None = None
) -> dict[str, Any]:
    """One client's entries, in order, as one message body: each entry's phase, start and
    count, and each regret term concatenated over the entries and run-length encoded
    (:func:`run_lengths`), once per message rather than once per entry (a term is None in every
    entry or in none). ``encoded`` (a dict, empty at first) keeps the encodings across the
    messages of one flush: the clients that pulled the same batches hold the very same arrays
    of global terms (:meth:`GlobalValues.regret_terms`), which are then encoded once."""
    if not entries or len({t.client for t in entries}) != 1:
        raise ValueError("telemetry_to_wire takes a non-empty list of one client's entries")
    data: dict[str, Any] = {
        "client": entries[0].client,
        "phases": np.array([t.phase for t in entries], dtype=np.int64),
        "starts": np.array([t.start for t in entries], dtype=np.int64),
        "counts": np.array([t.count for t in entries], dtype=np.int64),
    }
    for name in _TERMS:
        terms = [getattr(t, name) for t in entries]
        if all(x is None for x in terms):
            data[name] = data[f"{name}_runs"] = None
            continue
        if any(x is None for x in terms):
            raise ValueError(f"{name} is None in some telemetry entries and not in others")
        data[name], data[f"{name}_runs"] = _encoded_terms(terms, encoded)
    return data


def _encoded_terms(
    terms: list[np.ndarray], encoded: dict[tuple[int, ...], Any] | None
) -> tuple[np.ndarray, np.ndarray]:
    """``run_lengths`` of the concatenated ``terms``, from ``encoded`` if these arrays (by
    identity) were encoded before. Each entry keeps the arrays beside their encoding, so no
    id in a key can be reused by another array while ``encoded`` lives."""
    if encoded is None:
        return run_lengths(np.concatenate(terms))
    key = tuple(map(id, terms))
    if key not in encoded:
        encoded[key] = (terms, run_lengths(np.concatenate(terms)))
    return encoded[key][1]


def telemetry_from_wire(
    data: Any,
    shared: MutableMapping[bytes, np.ndarray] | None = None,
    *,
    budget: int | None = None,
    max_pulls: int = TELEMETRY_PULLS,
) -> list[Telemetry]:
    """The entries of a :func:`telemetry_to_wire` body; a malformed one raises ProtocolError
    naming the field. Nothing is expanded before the sizes the body claims are checked (a few
    hundred bytes of runs could otherwise claim gigabytes): at most ``max_pulls`` pulls in all
    (what one message of a client holds, :func:`telemetry_batches`), each entry within the
    run's ``budget`` (positions ``0 .. budget - 1``) if it is given, and the runs of a term
    adding up to the pulls (summed as Python integers, so no overflow wraps them around).
    Each term is then expanded from its runs into one read-only array, looked up
    first in ``shared`` (terms expanded before, by their runs: a ``WeakValueDictionary`` keeps
    them while an entry does) and kept there: clients that pulled the same points send the same
    terms, which then take the memory (and the time to fill it) of one client's, as in process
    where the clients of a batch share its terms."""
    if not isinstance(data, dict):
        raise ProtocolError(f"telemetry must be a map of fields, got {type(data).__name__}")
    client = wire_int(data, "client")
    phases, starts, counts = (wire_array(data, f, "i") for f in ("phases", "starts", "counts"))
    if not phases.size or not (phases.shape == starts.shape == counts.shape):
        raise ProtocolError("fields phases, starts and counts must hold one value per entry")
    columns = phases.tolist(), starts.tolist(), counts.tolist()  # (a list's min costs less)
    if min(columns[0]) < 0 or min(columns[1]) < 0 or min(columns[2]) < 0:
        raise ProtocolError("fields phases, starts and counts must hold integers >= 0")
    total = sum(columns[2])
    if total > max_pulls:
        raise ProtocolError(
            f"fields counts claim {total} pulls; one telemetry message holds at most {max_pulls}"
        )
    if budget is not None and max(map(sum, zip(columns[1], columns[2], strict=True))) > budget:
        raise ProtocolError(
            f"fields starts and counts cover positions beyond the budget T = {budget}"
        )
    ends = np.cumsum(counts).tolist()
    spans = list(zip([0, *ends[:-1]], ends, strict=True))  # each entry's slice of the terms
    terms: dict[str, list[np.ndarray] | list[None]] = {}
    for name in _TERMS:
        if data.get(name) is None:
            terms[name] = [None] * phases.size
            continue
        values = wire_array(data, name, "f")
        runs = wire_array(data, f"{name}_runs", "i")
        if runs.shape != values.shape or (runs.size and runs.min() < 1):
            raise ProtocolError(
                f"field {name}_runs must hold one run length >= 1 per value of {name!r}"
            )
        claimed = sum(runs.tolist())
        if claimed != total:
            raise ProtocolError(f"field {name!r} must hold {total} values, got {claimed}")
        expanded = _expanded(values, runs, shared)
        terms[name] = [expanded[a:b] for a, b in spans]
    return [
        Telemetry(p, client, a, c, g, loc)
        for p, a, c, g, loc in zip(
            *columns, terms["global_terms"], terms["local_terms"], strict=True
        )
    ]


def _expanded(
    values: np.ndarray, runs: np.ndarray, shared: MutableMapping[bytes, np.ndarray] | None
) -> np.ndarray:
    """``np.repeat(values, runs)``, read-only, from ``shared`` if it is there (the key is
    unambiguous: ``values`` and ``runs`` have as many items, of 8 bytes each)."""
    key = values.tobytes() + runs.tobytes()
    expanded = None if shared is None else shared.get(key)
    if expanded is None:
        expanded = np.repeat(values, runs)
        expanded.setflags(write=False)
        if shared is not None:
            shared[key] = expanded
    return expanded


def run_lengths(terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, runs)``: ``terms`` as runs of equal values, ``np.repeat(values, runs)`` being
    ``terms`` bit for bit (equal means the same bits, so 0.0 and -0.0 stay apart). A phased
    algorithm pulls each cell centre many times in a row, so Fed-PNE's 10^4 terms per client are
    a few dozen runs: the telemetry's 16 bytes per pull shrink to a few hundred per phase."""
    terms = np.ascontiguousarray(terms, dtype=np.float64)
    if terms.size == 0:
        return terms, np.empty(0, dtype=np.int64)
    bits = terms.view(np.int64)
    bounds = np.empty(terms.size + 1, dtype=bool)  # where a run starts, and the end
    bounds[0] = bounds[-1] = True
    np.not_equal(bits[1:], bits[:-1], out=bounds[1:-1])
    edges = np.flatnonzero(bounds)
    return terms[edges[:-1]], edges[1:] - edges[:-1]


def telemetry_batches(entries: list[Telemetry], max_pulls: int) -> list[list[Telemetry]]:
    """``entries``, split into pieces of at most ``max_pulls`` pulls, grouped in order into
    batches of at most ``max_pulls`` pulls each."""
    batches: list[list[Telemetry]] = []
    room = 0
    for entry in entries:
        for piece in entry.split(max_pulls):
            if not batches or piece.count > room:
                batches.append([])
                room = max_pulls
            batches[-1].append(piece)
            room -= piece.count
    return batches


class ClientEvaluator:
    """Client m's ``evaluate(X)``: noisy rewards of ``f_m`` on the batch, regret terms kept
    where the optima are known (a simulation), and what the client observed always
    (:attr:`observed`, :mod:`fedxab.run.outcome`). A user family (no global objective)
    evaluates only the client's own function, and so does a run without ``global_regret``
    unless ``f_m`` is computed from the global objective's values."""

    def __init__(
        self,
        m: int,
        family: ClientFamily,
        noise: NoiseModel,
        *,
        seed: int,
        budget: int,
        global_values: GlobalValues | None = None,
        keep_points: bool = False,
        direction: str = "maximize",
        global_regret: bool = True,
    ) -> None:
        self.client = m
        self.budget = budget
        self.used = 0
        self._rng = stream(seed, "noise", m)
        self._sample = noise.sample
        self._local, reads_global = _local_function(family, m)
        glob = family.global_objective
        if glob is None or not (global_regret or reads_global):
            glob = None
        self._global = None if glob is None else global_values or GlobalValues(glob)
        self._f_star = None if glob is None or not global_regret else glob.optimum_value
        self._fm_star = family.client(m).optimum_value
        self.observed = ObservedBest(m, budget, direction)
        """What the client observed: its best reward so far (:class:`ObservedBest`)."""
        self._start = 0
        self._g_terms: list[np.ndarray] = []
        self._l_terms: list[np.ndarray] = []
        self.points: list[np.ndarray] | None = [] if keep_points else None

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        if self.used + n > self.budget:
            raise BudgetExceededError(
                f"client {self.client} asked for {n} evaluations with "
                f"{self.budget - self.used} left of its budget T = {self.budget} "
                "(algorithm bug: a client must never exceed T)"
            )
        try:
            g = None if self._global is None else self._global(X)
            fm = self._local(X, g)
            rewards = fm + self._sample(fm, self._rng)
        except EvaluationError:
            raise
        except ObjectiveError as exc:  # a value that is not a finite real number
            text = str(exc)
            if f"client {self.client}" not in text:
                text = f"client {self.client}: {text}"
            raise EvaluationError(self.client, text) from exc
        self.observed.add(X, rewards)
        if self._f_star is not None:
            assert self._global is not None
            self._g_terms.append(self._global.regret_terms())  # f* - g, shared
        if self._fm_star is not None:
            self._l_terms.append(self._fm_star - fm)
        if self.points is not None:
            self.points.append(X.copy())
        self.used += n
        return rewards

    def take(self, phase: int) -> Telemetry:
        """What was evaluated since the last call, as phase ``phase``'s telemetry."""
        start, count = self._start, self.used - self._start
        g = self._concat(self._g_terms) if self._f_star is not None else None
        loc = self._concat(self._l_terms) if self._fm_star is not None else None
        self._start = self.used
        self._g_terms, self._l_terms = [], []
        return Telemetry(phase, self.client, start, count, g, loc)

    @staticmethod
    def _concat(parts: list[np.ndarray]) -> np.ndarray:
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.empty(0)


_FLUSH_PULLS = 65_536
"""Most pulls :meth:`RegretSums.flush` adds at once (it holds their terms and positions)."""

_LONG_ENTRY = 64
"""Pulls from which :meth:`RegretSums.flush` adds an entry on its own, by slices of its
positions: for such entries (Fed-PNE's: 12 to 5,176 pulls, median 364, with M = 100 and
T = 10^4) slices cost less than ``np.add.at``'s positions and concatenated terms, temporaries
of up to half a megabyte that the C library maps afresh, page by page, at each flush
(benchmarks/NOTES.md, "Transports": 5,600 page faults a run)."""


def _concatenated(parts: list[np.ndarray | None]) -> np.ndarray:
    """The terms of the entries, one after the other (check() refused entries without them)."""
    arrays = [p for p in parts if p is not None]
    assert len(arrays) == len(parts)
    return np.concatenate(arrays) if len(arrays) > 1 else np.asarray(arrays[0])


class RegretSums:
    """Per-round sums over clients of the regret terms, added in (phase, client) order.

    :meth:`add` buffers telemetry (a second copy of the same (phase, client, start) is ignored:
    a redelivered message changes nothing); :meth:`flush` adds everything buffered, sorted by
    (phase, client, start). Whoever flushes after every phase (in-process) or once at the end
    (a server agent) gets the same sums, bit for bit.

    Simple regret (Dai, Low & Jaillet 2021's metric): :meth:`flush` also keeps, per client, the
    best (smallest) regret term so far, ``min_{tau <= t} (f_m* - f_m(x_{m,tau}))`` (local) and
    ``min_{tau <= t} (f* - f(x_{m,tau}))`` (global), and adds it into per-round sums, so that
    :meth:`simple_curves` gives their mean over clients in O(M + T) memory. A client's terms
    arrive in position order because its phases do (its telemetry of phase p is flushed before
    that of phase p + 1; true on every transport). A client whose terms stop before T (it
    withdrew, or its telemetry is incomplete) keeps its last best value for the remaining rounds;
    positions missing in the middle of its telemetry also carry its best value so far. A client
    counts in the mean of round t from its first known evaluation on (so, in a normal run, every
    client in every round).
    """

    def __init__(self, n_clients: int, budget: int, *, global_known: bool, local_known: bool):
        self.n_clients = n_clients
        self.budget = budget
        self.global_sum = np.zeros(budget) if global_known else None
        self.local_sum = np.zeros(budget) if local_known else None
        self.used = np.zeros(n_clients, dtype=np.int64)
        """Per client: the end of the furthest position its telemetry covers."""
        self.received = np.zeros(n_clients, dtype=np.int64)
        """Per client: the evaluations its telemetry covers (no gap: equals :attr:`used`)."""
        self.evaluations_by_phase: dict[int, int] = {}
        self.pulls_at = np.zeros(budget, dtype=np.int64)
        """Per position (round): the clients whose telemetry covers it, once flushed."""
        self._seen: set[tuple[int, int, int]] = set()
        self._pending: list[Telemetry] = []
        # simple regret: per-client best so far (M) and per-round sums of it over clients (T)
        self.global_simple_sum = np.zeros(budget) if global_known else None
        self.local_simple_sum = np.zeros(budget) if local_known else None
        self._simple_count = np.zeros(budget, dtype=np.int64)
        self._best_global = np.full(n_clients, np.inf)
        self._best_local = np.full(n_clients, np.inf)
        self._covered = np.zeros(n_clients, dtype=np.int64)
        self._simple_ok = True

    def add(self, telemetry: Telemetry, *, checked: bool = False) -> bool:
        """Buffer one client's telemetry for one phase (or a piece of it, :meth:`Telemetry.split`);
        ``False`` if it was already added. ``checked``: it passed :meth:`check` already (a server
        checks every entry of a message before it adds any)."""
        key = (telemetry.phase, telemetry.client, telemetry.start)
        if key in self._seen:
            return False
        if not checked:
            self.check(telemetry)
        self._seen.add(key)
        self._pending.append(telemetry)
        self.received[telemetry.client] += telemetry.count
        stop = telemetry.start + telemetry.count
        self.used[telemetry.client] = max(int(self.used[telemetry.client]), stop)
        return True

    def check(self, telemetry: Telemetry) -> None:
        """Raise ProtocolError unless ``telemetry`` fits: a known client, within the budget,
        with the terms whose optimum is known."""
        if not 0 <= telemetry.client < self.n_clients:
            raise ProtocolError(
                f"telemetry of client {telemetry.client}; expected an id in 0..{self.n_clients - 1}"
            )
        if telemetry.start + telemetry.count > self.budget:
            raise ProtocolError(
                f"telemetry of client {telemetry.client} covers positions up to "
                f"{telemetry.start + telemetry.count}, beyond the budget T = {self.budget}"
            )
        for name, known in (
            ("global_terms", self.global_sum is not None),
            ("local_terms", self.local_sum is not None),
        ):
            if known and getattr(telemetry, name) is None:
                raise ProtocolError(f"telemetry of client {telemetry.client} lacks {name!r}")

    def flush(self) -> None:
        """Add every buffered telemetry into the sums, in (phase, client) order: a long entry
        on its own (:meth:`_add_entry`), the short ones between two long ones a few thousand
        pulls at a time (:meth:`_add_in_order`); either way each round's sum is the same
        sequence of additions."""
        pending = sorted(self._pending, key=lambda t: (t.phase, t.client, t.start))
        self._pending = []
        chunk: list[Telemetry] = []
        pulls = 0
        for t in pending:
            if t.count >= _LONG_ENTRY:
                if chunk:
                    self._add_in_order(chunk)
                    chunk, pulls = [], 0
                self._add_entry(t)
                continue
            if chunk and pulls + t.count > _FLUSH_PULLS:
                self._add_in_order(chunk)
                chunk, pulls = [], 0
            chunk.append(t)
            pulls += t.count
        if chunk:
            self._add_in_order(chunk)

    def _add_entry(self, t: Telemetry) -> None:
        """Add one entry into the sums, by slices of its positions."""
        stop = t.start + t.count
        if self.global_sum is not None:
            assert t.global_terms is not None  # check() refused telemetry without them
            self.global_sum[t.start : stop] += t.global_terms
        if self.local_sum is not None:
            assert t.local_terms is not None
            self.local_sum[t.start : stop] += t.local_terms
        self.pulls_at[t.start : stop] += 1
        self.evaluations_by_phase[t.phase] = self.evaluations_by_phase.get(t.phase, 0) + t.count
        self._add_simple(t)

    def _add_in_order(self, pending: list[Telemetry]) -> None:
        """Add ``pending`` (sorted) into the sums: all the entries at once, as ``np.add.at``
        adds unbuffered, one value after the other in the order given, so that each round's sum
        is the sequence of additions a loop over the entries would make, bit for bit. A phase of
        one pull per client (centralised HCT: M entries of one term each, every round) so costs
        a few array operations rather than a few per client."""
        counts = np.array([t.count for t in pending], dtype=np.int64)
        starts = np.array([t.start for t in pending], dtype=np.int64)
        offsets = np.cumsum(counts) - counts  # each entry's first index in the concatenation
        at = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(starts - offsets, counts)
        global_terms = local_terms = None
        if self.global_sum is not None:
            global_terms = _concatenated([t.global_terms for t in pending])
            np.add.at(self.global_sum, at, global_terms)
        if self.local_sum is not None:
            local_terms = _concatenated([t.local_terms for t in pending])
            np.add.at(self.local_sum, at, local_terms)
        np.add.at(self.pulls_at, at, 1)
        for t in pending:
            self.evaluations_by_phase[t.phase] = self.evaluations_by_phase.get(t.phase, 0) + t.count
        if not self._one_pull_each(pending, counts, starts):
            for t in pending:
                self._add_simple(t)
            return
        # one term per client, right after its last one: its running minimum is one np.minimum
        ms = np.array([t.client for t in pending], dtype=np.int64)
        for total, best, terms in (
            (self.global_simple_sum, self._best_global, global_terms),
            (self.local_simple_sum, self._best_local, local_terms),
        ):
            if total is not None and terms is not None:
                running = np.minimum(terms, best[ms])
                np.add.at(total, starts, running)
                best[ms] = running
        np.add.at(self._simple_count, starts, 1)
        self._covered[ms] = starts + 1

    def _one_pull_each(
        self, pending: list[Telemetry], counts: np.ndarray, starts: np.ndarray
    ) -> bool:
        """Whether :meth:`_add_simple` of each entry would add one term and carry nothing:
        one entry of one pull per client, none before or after a gap in its positions."""
        if not self._simple_ok or not np.all(counts == 1):
            return False
        clients = [t.client for t in pending]
        if len(set(clients)) != len(clients):
            return False
        covered = self._covered[clients]
        return bool(np.all((starts == covered) | (covered == 0)))

    def _add_simple(self, t: Telemetry) -> None:
        """Client ``t.client``'s running minima over positions ``t.start .. stop - 1``."""
        if not self._simple_ok or t.count == 0:
            return
        m, start, stop = t.client, t.start, t.start + t.count
        covered = int(self._covered[m])
        if start < covered:
            import logging

            logging.getLogger(__name__).warning(
                "simple regret dropped: telemetry of client %d for positions %d..%d came after "
                "position %d was added",
                m,
                start,
                stop - 1,
                covered - 1,
            )
            self._simple_ok = False
            return
        sums = (
            (self.global_simple_sum, self._best_global, t.global_terms),
            (self.local_simple_sum, self._best_local, t.local_terms),
        )
        if start > covered and covered > 0:  # a gap: carry the best so far across it
            for total, best, _ in sums:
                if total is not None:
                    total[covered:start] += best[m]
            self._simple_count[covered:start] += 1
        for total, best, terms in sums:
            if total is not None and terms is not None:
                running = np.minimum(np.minimum.accumulate(terms), best[m])
                total[start:stop] += running
                best[m] = running[-1]
        self._simple_count[start:stop] += 1
        self._covered[m] = stop

    def complete(self, expected: np.ndarray) -> bool:
        """Every client's telemetry covers the evaluations it made (``expected[m]``: its budget
        T, or fewer for a client that withdrew), with no piece missing."""
        return bool(np.all(self.received >= expected))

    def reporting(self, expected: np.ndarray) -> np.ndarray:
        """Per round t: the clients a mean over clients counts. A client whose telemetry of
        round t is missing (its evaluations were due, ``t < expected[m]``, but never reported)
        is left out; a client that withdrew before t counts, with no regret (it makes no pull,
        as in process). Flushes first (which changes no sum, :meth:`flush`)."""
        self.flush()
        due = np.bincount(np.minimum(expected, self.budget), minlength=self.budget + 1)
        due_at = self.n_clients - np.cumsum(due)[: self.budget]  # clients with t < expected[m]
        return self.n_clients - (due_at - self.pulls_at)

    def curves(
        self, rounds: np.ndarray, expected: np.ndarray | None = None
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Global and local cumulative regret averaged over clients, at ``rounds``.

        With ``expected`` (per client, the evaluations it owes), a round's mean is over the
        clients that reported it (:meth:`reporting`): a client whose telemetry never came is
        not counted as zero regret. A round no client reported makes the curve NaN from there
        on. When every client reported every round (always in process) the curve is the sum
        over clients divided by M, bit for bit as without ``expected``."""
        reporting = None if expected is None else self.reporting(expected)
        if reporting is not None and np.all(reporting == self.n_clients):
            reporting = None

        def curve(per_round: np.ndarray | None) -> np.ndarray | None:
            if per_round is None:
                return None
            if reporting is None:
                mean = _regret.cumulative_regret(per_round) / self.n_clients
            else:
                with np.errstate(invalid="ignore", divide="ignore"):
                    step = np.where(reporting > 0, per_round / reporting, np.nan)
                mean = _regret.cumulative_regret(step)
            return _regret.at_rounds(mean, rounds)

        return curve(self.global_sum), curve(self.local_sum)

    def simple_curves(self, rounds: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Global and local simple regret averaged over clients, at the 1-based ``rounds``.

        At round t: the mean over clients of ``min_{tau <= t} (f* - f(x_{m,tau}))`` (global) and
        of ``min_{tau <= t} (f_m* - f_m(x_{m,tau}))`` (local), noise-free: the simple regret of
        Dai, Low & Jaillet 2021. A client whose terms stop at position s < T (it withdrew) counts
        with its last best value in rounds s + 1 .. T. ``None`` where the optimum is unknown,
        where a client's telemetry came out of order (logged), or where some round in ``rounds``
        has no client with a known evaluation yet.
        """
        if not self._simple_ok:
            return None, None
        T = self.budget
        tail = (self._covered > 0) & (self._covered < T)
        idx = self._covered[tail]
        extra_count = np.zeros(T + 1, dtype=np.int64)
        np.add.at(extra_count, idx, 1)
        count = self._simple_count + np.cumsum(extra_count)[:T]
        at = np.asarray(rounds, dtype=np.int64) - 1
        if at.size and np.any(count[at] == 0):
            return None, None

        def curve(total: np.ndarray | None, best: np.ndarray) -> np.ndarray | None:
            if total is None:
                return None
            extra = np.zeros(T + 1)
            np.add.at(extra, idx, best[tail])
            per_round = total + np.cumsum(extra)[:T] if idx.size else total
            return _regret.at_rounds(per_round / np.maximum(count, 1), rounds)

        return (
            curve(self.global_simple_sum, self._best_global),
            curve(self.local_simple_sum, self._best_local),
        )


def regret_known(family: ClientFamily | None, config: Config) -> tuple[bool, bool]:
    """Whether the global and the local (per-client) regret are measured: the optima are known
    (a simulation; never for a user's objective), and for the global one, ``[federation]
    global_regret`` asks for it."""
    if family is None or family.global_objective is None:
        return False, False
    local = all(c is not None and c.optimum_value is not None for c in family.clients)
    wanted = config.federation is None or config.federation.global_regret is not False
    return wanted and family.global_objective.optimum_value is not None, local
