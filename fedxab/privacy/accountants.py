"""Privacy accountants: (epsilon, delta) recomputed from privacy events by interchangeable backends.

fedxab's privacy model: a release is data (:class:`~fedxab.privacy.mechanisms.PrivacyEvent`, like
dp-accounting's ``DpEvent``); an accountant turns a list of events into epsilon at a delta, or
delta at an epsilon. Events of one ``scope`` compose (each is ``count`` Poisson-subsampled Gaussian
releases, sampling rate q, noise multiplier z); events of different scopes touch disjoint data and
combine by parallel composition (the maximum over scopes).

Backends (:func:`make_accountant`):

- ``"rdp"`` (default): Google's dp-accounting RDP accountant, its default orders and its
  (improved) conversion to (epsilon, delta). At fractional orders dp-accounting 0.6 sums the
  absolute values of the RDP series: a valid upper bound, looser than the exact series (see
  ``"opacus-rdp"``), kept as it is because it is never below the true value; it agrees with
  Opacus at integer orders, and only there is agreement required;
- ``"moments"``: the moments accountant of Abadi et al. 2016 as the DP-FTS-DE paper (Dai, Low &
  Jaillet 2021) uses it: integer moment orders lambda = 1..32, i.e. RDP at integer orders
  alpha = lambda + 1 = 2..33, with the classic conversion
  ``epsilon = min_alpha RDP_total(alpha) + log(1/delta) / (alpha - 1)``. The RDP values come from
  dp-accounting (exact at integer orders); only the conversion is written here. It reproduces
  the paper's epsilon values and is never below ``"rdp"``;
- ``"opacus-rdp"`` (optional extra ``opacus``): Opacus's RDP analysis
  (``opacus.accountants.RDPAccountant``: its RDP of the subsampled Gaussian and its conversion,
  Balle et al. 2020, Theorem 21 -- the same improved conversion as ``"rdp"``), searched over
  dp-accounting's default orders (a superset of Opacus's own, which stop at 63), so that it
  differs from ``"rdp"`` only in the RDP values. They agree at integer orders; at fractional
  orders Opacus's series is exact (it matches multi-precision quadrature), while dp-accounting
  0.6 sums the series' absolute values (a looser upper bound) and drops an order whose sum does
  not converge within 1000 terms, so ``"rdp"`` is never below ``"opacus-rdp"`` and can be well
  above it at large q and small sigma (e.g. q = 0.5, sigma = 0.8, 1000 steps, delta = 1e-5:
  571.4 vs 347.2). dp-accounting 0.4.3 still summed the signed series and agrees with Opacus,
  but it requires numpy < 2, which has no wheels for Python 3.13 and later, so it is not pinned;
  every later release (0.4.4 to 0.6.0) sums absolute values.
  ``delta`` inverts that same conversion at the same orders;
- ``"pld"``: dp-accounting's privacy loss distribution accountant (``PLDAccountant``; Meiser and
  Mohammadi 2018, Koskela et al. 2020, Doroshenko et al. 2022), with the same neighbouring
  relation and events as ``"rdp"``: each event is ``count`` self-compositions of the
  Poisson-subsampled Gaussian (the plain Gaussian when q = 1), and the events of a scope
  compose. It uses dp-accounting's pessimistic estimate (its default), which rounds every
  privacy loss *up* to the grid of :data:`PLD_VALUE_INTERVAL` and counts the truncated tail as
  infinite loss, so epsilon and delta are upper bounds at any interval, and tighter than RDP's:
  DP-FTS-DE's landmine setting (q = 0.35, z = 1, 61 releases, delta = 1e-5) gives 19.93 where
  ``"rdp"`` gives 21.78;
- ``"opacus-prv"`` (optional extra ``opacus``): Opacus's PRV accountant (Gopi et al. 2021,
  numerical composition of privacy loss random variables), reporting its upper bound on
  epsilon (default ``eps_error`` 0.01). It gives epsilon only: ``delta`` raises.

The Opacus backends import Opacus (and so PyTorch) lazily; without it :func:`make_accountant`
raises a :class:`~fedxab.errors.ConfigError` saying how to install the extra.

Identical event histories share one computation (an LRU cache keyed by the events), so ten
thousand clients with the same history cost one accounting.

Accounting never hangs. The numerical backends (:data:`TIME_LIMITED`: ``"pld"``,
``"opacus-prv"``), whose cost grows with the width of the privacy loss distribution, compute in a
persistent worker process (:class:`_Worker`: ``python -m fedxab.privacy.accountant_worker``,
started on the first computation that the cache does not answer, and kept), under a time limit
per computation (``[privacy] accountant_timeout_s``, default :data:`DEFAULT_TIMEOUT_S`; a
worker's first computation includes its start-up and its imports: about 2 s with dp-accounting,
2.6 s with Opacus). The worker never imports the user's program, so it works the same from a
script (with or without a main guard), ``python -``, ``python -c`` and a notebook; a frozen
program computes in a thread instead. A computation that exceeds the limit, or whose worker dies
(e.g. out of memory), is answered by :data:`FALLBACK` (``"rdp"``, an upper bound: never below
the true epsilon, so a budget check stays safe, only looser); the accountant counts it
(``fallbacks``, and ``fallback_reasons``), logs a warning, and the results' privacy block, the
run's summary and ``fedxab audit`` say so (:func:`fallback_note`). A computation that ran out of
time is not tried again at the same limit. A worker process, not a thread: a thread cannot be
stopped.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import math
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, Protocol

import numpy as np

from fedxab.errors import ConfigError
from fedxab.privacy.accountant_worker import read_frame, write_frame
from fedxab.privacy.mechanisms import MAX_EVENT_COUNT, PrivacyEvent
from fedxab.validation import check_choice, check_positive

if TYPE_CHECKING:
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant as DpRdpAccountant

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "check_event",
    "fallback_note",
    "make_accountant",
    "noise_multiplier_for",
]

log = logging.getLogger(__name__)

ACCOUNTANTS = ("rdp", "moments", "pld", "opacus-rdp", "opacus-prv")
TIME_LIMITED = ("pld", "opacus-prv")
"""The backends that compute in the worker process under a time limit (module docstring)."""
FALLBACK = "rdp"
"""What answers a computation of a :data:`TIME_LIMITED` backend that ran out of time."""
DEFAULT_TIMEOUT_S = 60.0
"""The default time limit of one computation (``[privacy] accountant_timeout_s``)."""
PLD_VALUE_INTERVAL = 1e-3
"""``"pld"``'s value discretization interval (the grid of privacy loss values). The estimate is
pessimistic at any interval (an upper bound), so the interval trades only tightness for time.
Measured at delta = 1e-5 on five settings (q from 0.001 to 0.2, z from 0.8 to 4, 100 to 10,000
releases): 1e-3 is at most 0.002 above the value at a 30 times finer grid, and costs 0.05 to
0.3 s per distinct history; dp-accounting's default, 1e-4, gains at most 0.002 for 7 to 13 times
the time (0.4 to 3.5 s), which a run pays for every distinct history prefix
(``epsilon_by_phase``) and budget check."""
OPACUS_INSTALL = "pip install torch==2.13.0 'fedxab[opacus]'"
"""How to install the Opacus backends: torch pinned to the CPU build, in the same pip step."""
MOMENT_ORDERS = tuple(range(2, 34))
"""RDP orders alpha = lambda + 1 for the moment orders lambda = 1..32 (as Abadi et al. 2016)."""


@functools.cache
def _dp_accounting() -> Any:
    """dp-accounting, imported on first use: importing it imports scipy.signal and scipy.stats
    (about half a second), which a run without privacy never needs."""
    import dp_accounting
    import dp_accounting.pld.pld_privacy_accountant
    import dp_accounting.rdp.rdp_privacy_accountant

    return dp_accounting


@functools.cache
def opacus_orders() -> tuple[float, ...]:
    """The orders ``"opacus-rdp"`` searches: dp-accounting's defaults, those of ``"rdp"``."""
    return tuple(_dp_accounting().rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)


class Accountant(Protocol):
    name: str
    fallbacks: int
    """Computations answered by :data:`FALLBACK` after running out of time (always 0 for the
    backends that are not :data:`TIME_LIMITED`)."""

    def epsilon(self, events: Iterable[PrivacyEvent], delta: float) -> float: ...

    def delta(self, events: Iterable[PrivacyEvent], epsilon: float) -> float: ...


def check_event(event: PrivacyEvent) -> None:
    if event.mechanism != "gaussian":
        raise ConfigError(
            "event.mechanism", f"only Gaussian releases are accounted, got {event.mechanism!r}"
        )
    check_positive("event.noise_multiplier", event.noise_multiplier)
    q = check_positive("event.sampling_rate", event.sampling_rate)
    if q > 1:
        raise ConfigError("event.sampling_rate", f"must lie in (0, 1], got {q}")
    count = event.count
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_EVENT_COUNT:
        raise ConfigError(
            "event.count", f"must be an integer in [1, {MAX_EVENT_COUNT}], got {count!r}"
        )


def _scopes(events: Iterable[PrivacyEvent]) -> list[tuple[PrivacyEvent, ...]]:
    """The events grouped by scope (each group composes; groups are disjoint)."""
    groups: dict[str, list[PrivacyEvent]] = defaultdict(list)
    for event in events:
        check_event(event)
        groups[event.scope].append(event)
    return [tuple(group) for group in groups.values()]


@contextlib.contextmanager
def _quiet_fractional_orders() -> Iterator[None]:
    """dp-accounting logs a warning (through absl) for every fractional order near 1 whose
    series does not converge, and leaves that order out, which is the right thing: keep those
    lines out of fedxab's output."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        yield
    finally:
        absl.setLevel(level)


def _dp_event(event: PrivacyEvent) -> Any:
    """One release of ``event`` as a dp-accounting ``DpEvent``: the Poisson-subsampled Gaussian,
    or the plain Gaussian when q = 1."""
    dp_accounting = _dp_accounting()
    gaussian = dp_accounting.GaussianDpEvent(event.noise_multiplier)
    if event.sampling_rate == 1:
        return gaussian
    return dp_accounting.PoissonSampledDpEvent(event.sampling_rate, gaussian)


def _rdp_accountant(
    group: tuple[PrivacyEvent, ...], orders: tuple[int, ...] | None
) -> DpRdpAccountant:
    dp_accounting = _dp_accounting()
    accountant = dp_accounting.rdp.rdp_privacy_accountant.RdpAccountant(
        orders=list(orders) if orders is not None else None,
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    )
    for event in group:
        with _quiet_fractional_orders():
            accountant.compose(_dp_event(event), event.count)
    return accountant


def _pld_accountant(group: tuple[PrivacyEvent, ...]) -> PLDAccountant:
    """dp-accounting's PLD accountant with ``group`` composed (``"pld"``, module docstring)."""
    dp_accounting = _dp_accounting()
    accountant = dp_accounting.pld.PLDAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=PLD_VALUE_INTERVAL,
    )
    for event in group:
        accountant.compose(_dp_event(event), event.count)
    return accountant


def _pld_epsilon(group: tuple[PrivacyEvent, ...], delta: float) -> float:
    return float(_pld_accountant(group).get_epsilon(delta))


def _pld_delta(group: tuple[PrivacyEvent, ...], epsilon: float) -> float:
    return float(_pld_accountant(group).get_delta(epsilon))


WORKER_MODULE = "fedxab.privacy.accountant_worker"
"""The module the worker process runs (``python -m``)."""


def _fedxab_root() -> str:
    """The directory this fedxab is imported from, for the worker's ``PYTHONPATH``: the worker
    imports the same fedxab whatever the current directory and ``sys.path`` of the parent."""
    import fedxab

    return os.path.dirname(os.path.dirname(os.path.abspath(fedxab.__file__)))


def _read_answers(stream: IO[bytes], answers: queue.Queue[bytes | None]) -> None:
    """The reader thread of one worker process: each answer frame, then None at its end."""
    while (frame := read_frame(stream)) is not None:
        answers.put(frame)
    answers.put(None)


class _Worker:
    """The persistent worker process of the :data:`TIME_LIMITED` backends (module docstring):
    ``python -m`` :data:`WORKER_MODULE` with this interpreter, fed jobs on its standard input
    (:mod:`fedxab.privacy.accountant_worker`). Not ``multiprocessing``: its ``spawn`` imports
    the parent's ``__main__`` again in the child (a script without an ``if __name__ ==
    "__main__":`` guard runs twice; from ``python -`` the child dies at once) and ``fork``
    copies the locks of the parent's threads. One computation at a time (a lock); stopped at
    interpreter exit.

    A frozen program (``sys.frozen``: its ``sys.executable`` is the program, not Python) has no
    interpreter to start: there a computation runs in a thread under the same time limit, and
    one that runs out of time is left to finish in the background (a thread cannot be
    stopped), its answer unused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._answers: queue.Queue[bytes | None] | None = None
        self.failure = ""
        """Why the last computation got no answer (for the fallback's reason)."""

    def run(
        self, compute: Callable[..., float], args: tuple[Any, ...], timeout_s: float
    ) -> float | None:
        """``compute(*args)`` in the worker (started if not running); None if it took longer
        than ``timeout_s`` seconds or the worker died (:attr:`failure` says which), after which
        the worker is stopped (the next call starts another). An exception ``compute`` raised
        is raised here."""
        if getattr(sys, "frozen", False):
            return self._run_in_thread(compute, args, timeout_s)
        with self._lock:
            process, answers = self._start()
            try:
                assert process.stdin is not None
                write_frame(process.stdin, pickle.dumps((compute, args)))
                frame = answers.get(timeout=timeout_s)
            except queue.Empty:
                frame = None
                self.failure = f"ran out of time (privacy.accountant_timeout_s = {timeout_s:g} s)"
            except OSError:  # the worker died before it read the job
                frame = None
            except BaseException:  # e.g. KeyboardInterrupt: an answer would be left behind
                self.stop()
                raise
            if frame is None:
                if process.poll() is not None or not self.failure:
                    self.failure = f"its worker process stopped (exit status {process.wait()})"
                self.stop()
                return None
        ok, value = pickle.loads(frame)
        if not ok:
            raise value
        return value

    def _run_in_thread(
        self, compute: Callable[..., float], args: tuple[Any, ...], timeout_s: float
    ) -> float | None:
        answer: list[tuple[bool, Any]] = []

        def target() -> None:
            try:
                answer.append((True, compute(*args)))
            except Exception as exc:
                answer.append((False, exc))

        thread = threading.Thread(target=target, name="fedxab-accountant", daemon=True)
        thread.start()
        thread.join(timeout_s)
        if not answer:
            self.failure = f"ran out of time (privacy.accountant_timeout_s = {timeout_s:g} s)"
            return None
        ok, value = answer[0]
        if not ok:
            raise value
        return value

    def _start(self) -> tuple[subprocess.Popen[bytes], queue.Queue[bytes | None]]:
        self.failure = ""
        if self._process is None or self._answers is None or self._process.poll() is not None:
            self.stop()
            path = os.environ.get("PYTHONPATH")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_fedxab_root(), path])))
            # -P: the current directory is not put on the worker's path (it might shadow fedxab)
            self._process = subprocess.Popen(
                [sys.executable, "-P", "-m", WORKER_MODULE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            self._answers = queue.Queue()
            threading.Thread(
                target=_read_answers,
                args=(self._process.stdout, self._answers),
                name="fedxab-accountant-answers",
                daemon=True,
            ).start()
        return self._process, self._answers

    def stop(self) -> None:
        """Kill the worker, if any."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            self._process = None
        self._answers = None


_WORKER = _Worker()
atexit.register(_WORKER.stop)


@functools.lru_cache(maxsize=4096)
def _time_limited(
    compute: Callable[[tuple[PrivacyEvent, ...], float], float],
    group: tuple[PrivacyEvent, ...],
    value: float,
    timeout_s: float,
) -> float | str:
    """``compute(group, value)`` in the worker under ``timeout_s``, or why it got no answer
    (a ``str``: it ran out of time, or the worker stopped). Cached like the other backends, the
    failures too: a computation that ran out of time is not tried again at the same limit."""
    answer = _WORKER.run(compute, (group, value), timeout_s)
    return _WORKER.failure if answer is None else answer


class _TimeLimitedAccountant:
    """What the :data:`TIME_LIMITED` backends share: per scope, a computation in the worker
    process under the time limit ``timeout_s``, answered by :data:`FALLBACK` when it gets no
    answer: counted in ``fallbacks``, by reason in ``fallback_reasons``, with a warning."""

    name: str

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.fallbacks = 0
        self.fallback_reasons: dict[str, int] = {}

    def _account(
        self,
        compute: Callable[[tuple[PrivacyEvent, ...], float], float],
        fallback: Callable[[tuple[PrivacyEvent, ...], float], float],
        events: Iterable[PrivacyEvent],
        value: float,
    ) -> float:
        """The maximum over scopes (parallel composition) of ``compute(group, value)``, or of
        ``fallback(group, value)`` for a scope whose computation got no answer."""
        results = []
        for group in _scopes(events):
            result = _time_limited(compute, group, value, self.timeout_s)
            if isinstance(result, str):
                self.fallbacks += 1
                self.fallback_reasons[result] = self.fallback_reasons.get(result, 0) + 1
                log.warning(
                    "the %r accountant %s; answered by %r, an upper bound on epsilon and delta",
                    self.name,
                    result,
                    FALLBACK,
                )
                result = fallback(group, value)
            results.append(result)
        return max(results, default=0.0)


def fallback_note(accountant: Accountant) -> str | None:
    """One line saying which of ``accountant``'s computations :data:`FALLBACK` answered and
    why, or None if none was: what the results, the audit and a run's summary show."""
    reasons = getattr(accountant, "fallback_reasons", None) or {}
    if not reasons:
        return None
    why = "; ".join(f"{n} {reason}" for reason, n in reasons.items())
    return (
        f"the {accountant.name!r} accountant did not answer {sum(reasons.values())} "
        f"computation(s) ({why}); {FALLBACK!r} answered them, an upper bound on epsilon"
    )


@functools.lru_cache(maxsize=4096)
def _rdp_epsilon(group: tuple[PrivacyEvent, ...], delta: float) -> float:
    return float(_rdp_accountant(group, None).get_epsilon(delta))


@functools.lru_cache(maxsize=4096)
def _rdp_delta(group: tuple[PrivacyEvent, ...], epsilon: float) -> float:
    return float(_rdp_accountant(group, None).get_delta(epsilon))


@functools.lru_cache(maxsize=4096)
def _moment_rdp(group: tuple[PrivacyEvent, ...]) -> tuple[float, ...]:
    """Total RDP of ``group`` at :data:`MOMENT_ORDERS` (dp-accounting's exact integer-order
    values; its accountant keeps them, per order, in ``_rdp``)."""
    return tuple(float(v) for v in _rdp_accountant(group, MOMENT_ORDERS)._rdp)


def _check_delta(delta: float) -> float:
    d = check_positive("privacy.delta", delta)
    if d >= 1:
        raise ConfigError("privacy.delta", f"must lie in (0, 1), got {delta!r}")
    return d


class RdpAccountant:
    """dp-accounting's RDP accountant (default orders, improved conversion)."""

    name = "rdp"
    fallbacks = 0

    def epsilon(self, events: Iterable[PrivacyEvent], delta: float) -> float:
        delta = _check_delta(delta)
        return max((_rdp_epsilon(g, delta) for g in _scopes(events)), default=0.0)

    def delta(self, events: Iterable[PrivacyEvent], epsilon: float) -> float:
        epsilon = check_positive("privacy.epsilon", epsilon)
        return max((_rdp_delta(g, epsilon) for g in _scopes(events)), default=0.0)


class PldAccountant(_TimeLimitedAccountant):
    """dp-accounting's PLD accountant (module docstring), under the time limit ``timeout_s``."""

    name = "pld"

    def epsilon(self, events: Iterable[PrivacyEvent], delta: float) -> float:
        return self._account(_pld_epsilon, _rdp_epsilon, events, _check_delta(delta))

    def delta(self, events: Iterable[PrivacyEvent], epsilon: float) -> float:
        epsilon = check_positive("privacy.epsilon", epsilon)
        return self._account(_pld_delta, _rdp_delta, events, epsilon)


class MomentsAccountant:
    """The classic moments accountant of the DP-FTS-DE paper (Dai, Low & Jaillet 2021)."""

    name = "moments"
    fallbacks = 0

    def epsilon(self, events: Iterable[PrivacyEvent], delta: float) -> float:
        """``min_alpha RDP_total(alpha) + log(1/delta)/(alpha - 1)`` over alpha = 2..33."""
        log_inv_delta = math.log(1 / _check_delta(delta))
        return max(
            (
                min(
                    r + log_inv_delta / (a - 1)
                    for a, r in zip(MOMENT_ORDERS, _moment_rdp(g), strict=True)
                )
                for g in _scopes(events)
            ),
            default=0.0,
        )

    def delta(self, events: Iterable[PrivacyEvent], epsilon: float) -> float:
        """``min_alpha exp((alpha - 1)(RDP_total(alpha) - epsilon))``, capped at 1 (the same
        tail bound, solved for delta)."""
        epsilon = check_positive("privacy.epsilon", epsilon)
        return max(
            (
                math.exp(
                    min(
                        0.0,
                        *(
                            (a - 1) * (r - epsilon)
                            for a, r in zip(MOMENT_ORDERS, _moment_rdp(g), strict=True)
                        ),
                    )
                )
                for g in _scopes(events)
            ),
            default=0.0,
        )


def _opacus() -> Any:
    """``opacus.accountants``, imported on first use (Opacus and PyTorch are an optional extra)."""
    try:
        from opacus import accountants
    except ImportError as exc:
        raise ConfigError(
            "privacy.accountant",
            f"the Opacus backends need the optional extra 'opacus' ({exc}); install it with "
            f"`{OPACUS_INSTALL}` (torch==2.13.0 first and in the same pip step: a plain torch "
            "requirement pulls a multi-GB CUDA build)",
        ) from exc
    return accountants


def _opacus_history(group: tuple[PrivacyEvent, ...]) -> tuple[tuple[float, float, int], ...]:
    """Opacus's ``history`` for one scope: ``(noise_multiplier, sample_rate, num_steps)``, one
    entry per distinct (z, q) (composition commutes), so a split stream equals the whole."""
    steps: dict[tuple[float, float], int] = defaultdict(int)
    for event in group:
        steps[(float(event.noise_multiplier), float(event.sampling_rate))] += event.count
    return tuple((z, q, n) for (z, q), n in steps.items())


@functools.lru_cache(maxsize=4096)
def _opacus_rdp(history: tuple[tuple[float, float, int], ...]) -> np.ndarray:
    """Total RDP of ``history`` at :func:`opacus_orders` (Opacus's ``compute_rdp``)."""
    compute_rdp = _opacus().analysis.rdp.compute_rdp
    orders = list(opacus_orders())
    total = np.zeros(len(orders))
    for z, q, n in history:
        total += np.asarray(compute_rdp(q=q, noise_multiplier=z, steps=n, orders=orders))
    return total


@functools.lru_cache(maxsize=4096)
def _opacus_rdp_epsilon(history: tuple[tuple[float, float, int], ...], delta: float) -> float:
    accountant = _opacus().RDPAccountant()
    accountant.history = list(history)
    return float(accountant.get_epsilon(delta, alphas=list(opacus_orders())))


def _opacus_prv_epsilon(group: tuple[PrivacyEvent, ...], delta: float) -> float:
    accountant = _opacus().PRVAccountant()
    accountant.history = list(_opacus_history(group))
    try:
        # q = 1 takes log(0) on the way (harmless: it selects a branch)
        with np.errstate(divide="ignore"):
            return float(accountant.get_epsilon(delta))
    except (ValueError, RuntimeError) as exc:
        raise ConfigError(
            "privacy.accountant",
            f"'opacus-prv' cannot account these events at delta={delta!r} ({exc}); "
            "use 'opacus-rdp' or 'rdp'",
        ) from exc


class OpacusRdpAccountant:
    """Opacus's RDP accountant at dp-accounting's default orders (module docstring)."""

    name = "opacus-rdp"
    fallbacks = 0

    def __init__(self) -> None:
        _opacus()

    def epsilon(self, events: Iterable[PrivacyEvent], delta: float) -> float:
        delta = _check_delta(delta)
        return max(
            (_opacus_rdp_epsilon(_opacus_history(g), delta) for g in _scopes(events)),
            default=0.0,
        )

    def delta(self, events: Iterable[PrivacyEvent], epsilon: float) -> float:
        """Opacus's conversion ``epsilon = r - (log delta + log a)/(a - 1) + log((a - 1)/a)``
        (Balle et al. 2020, Theorem 21) solved for delta, minimised over the same orders and
        capped at 1: the delta at ``epsilon(events, delta)`` is at most ``delta``."""
        epsilon = check_positive("privacy.epsilon", epsilon)
        a = np.asarray(opacus_orders(), dtype=float)
        deltas = []
        for g in _scopes(events):
            log_delta = (a - 1) * (_opacus_rdp(_opacus_history(g)) - epsilon + np.log1p(-1 / a))
            deltas.append(math.exp(min(0.0, float(np.nanmin(log_delta - np.log(a))))))
        return max(deltas, default=0.0)


class OpacusPrvAccountant(_TimeLimitedAccountant):
    """Opacus's PRV accountant (Gopi et al. 2021): epsilon only (module docstring), under the
    time limit ``timeout_s``."""

    name = "opacus-prv"

    def __init__(self, timeout_s: float) -> None:
        _opacus()
        super().__init__(timeout_s)

    def epsilon(self, events: Iterable[PrivacyEvent], delta: float) -> float:
        return self._account(_opacus_prv_epsilon, _rdp_epsilon, events, _check_delta(delta))

    def delta(self, events: Iterable[PrivacyEvent], epsilon: float) -> float:
        raise ConfigError(
            "privacy.accountant",
            "'opacus-prv' computes epsilon only (Opacus's PRV accountant has no bounded "
            "delta-from-epsilon); use 'rdp', 'moments', 'pld' or 'opacus-rdp' for delta",
        )


_BACKENDS: dict[str, type] = {
    "rdp": RdpAccountant,
    "moments": MomentsAccountant,
    "pld": PldAccountant,
    "opacus-rdp": OpacusRdpAccountant,
    "opacus-prv": OpacusPrvAccountant,
}


def make_accountant(name: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Accountant:
    """The accountant backend ``name`` (one of :data:`ACCOUNTANTS`), a :data:`TIME_LIMITED` one
    with the time limit ``timeout_s`` per computation (``[privacy] accountant_timeout_s``); an
    Opacus backend without Opacus installed is a :class:`~fedxab.errors.ConfigError` naming the
    install command."""
    check_choice("privacy.accountant", name, ACCOUNTANTS)
    timeout_s = check_positive("privacy.accountant_timeout_s", timeout_s)
    backend = _BACKENDS[name]
    return backend(timeout_s) if name in TIME_LIMITED else backend()


def noise_multiplier_for(
    epsilon: float, delta: float, rounds: int, sampling_rate: float, accountant: str = "rdp"
) -> float:
    """The smallest noise multiplier z (to 1e-4 relative) with which ``rounds`` releases of the
    Poisson-subsampled Gaussian at rate ``sampling_rate`` stay within (``epsilon``, ``delta``)
    under ``accountant`` (bisection over z >= 0.01: epsilon decreases as z grows)."""
    epsilon = check_positive("privacy.epsilon", epsilon)
    delta = _check_delta(delta)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError("privacy.rounds", f"must be an integer >= 1, got {rounds!r}")
    backend = make_accountant(accountant)

    def spent(z: float) -> float:
        return backend.epsilon([PrivacyEvent("gaussian", z, sampling_rate, 1.0, rounds)], delta)

    lo, hi = 1e-2, 1.0
    while spent(hi) > epsilon:
        lo, hi = hi, 2 * hi
        if hi > 1e6:
            raise ConfigError("privacy.epsilon", f"no noise multiplier reaches epsilon {epsilon}")
    while hi - lo > 1e-4 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spent(mid) > epsilon else (lo, mid)
    return hi
