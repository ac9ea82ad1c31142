"""Privacy accountants: (epsilon, delta) recomputed from privacy events by interchangeable backends.

DESIGN.md (Privacy): a release is data (:class:`~fedxab.privacy.mechanisms.PrivacyEvent`, like
dp-accounting's ``DpEvent``); an accountant turns a list of events into epsilon at a delta, or
delta at an epsilon. Events of one ``scope`` compose (each is ``count`` Poisson-subsampled Gaussian
releases, sampling rate q, noise multiplier z); events of different scopes touch disjoint data and
combine by parallel composition (the maximum over scopes).

Backends (:func:`make_accountant`):

- ``"rdp"`` (default): Google's dp-accounting RDP accountant, its default orders and its
  (improved) conversion to (epsilon, delta);
- ``"moments"``: the moments accountant of Abadi et al. 2016 as the DP-FTS-DE paper uses it
  (spec-dpftsde §4.2): integer moment orders lambda = 1..32, i.e. RDP at integer orders
  alpha = lambda + 1 = 2..33, with the classic conversion
  ``epsilon = min_alpha RDP_total(alpha) + log(1/delta) / (alpha - 1)``. The RDP values come from
  dp-accounting (exact at integer orders); only the conversion is written here. It reproduces
  the paper's epsilon values (spec §4.3) and is never below ``"rdp"``;
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
- ``"opacus-prv"`` (optional extra ``opacus``): Opacus's PRV accountant (Gopi et al. 2021,
  numerical composition of privacy loss random variables), reporting its upper bound on
  epsilon (default ``eps_error`` 0.01). It gives epsilon only: ``delta`` raises.

The Opacus backends import Opacus (and so PyTorch) lazily; without it :func:`make_accountant`
raises a :class:`~fedxab.errors.ConfigError` saying how to install the extra.

Identical event histories share one computation (an LRU cache keyed by the events), so ten
thousand clients with the same history cost one accounting.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fedxab.errors import ConfigError
from fedxab.privacy.mechanisms import MAX_EVENT_COUNT, PrivacyEvent
from fedxab.validation import check_choice, check_positive

if TYPE_CHECKING:
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

__all__ = ["ACCOUNTANTS", "Accountant", "check_event", "make_accountant", "noise_multiplier_for"]

ACCOUNTANTS = ("rdp", "moments", "opacus-rdp", "opacus-prv")
OPACUS_INSTALL = "pip install torch==2.13.0 'fedxab[opacus]'"
"""How to install the Opacus backends: torch pinned to the CPU build, in the same pip step."""
MOMENT_ORDERS = tuple(range(2, 34))
"""RDP orders alpha = lambda + 1 for the moment orders lambda = 1..32 (spec-dpftsde §4.2)."""


@functools.cache
def _dp_accounting() -> Any:
    """dp-accounting, imported on first use: importing it imports scipy.signal and scipy.stats
    (about half a second), which a run without privacy never needs."""
    import dp_accounting
    import dp_accounting.rdp.rdp_privacy_accountant

    return dp_accounting


@functools.cache
def opacus_orders() -> tuple[float, ...]:
    """The orders ``"opacus-rdp"`` searches: dp-accounting's defaults, those of ``"rdp"``."""
    return tuple(_dp_accounting().rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)


class Accountant(Protocol):
    name: str

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


def _rdp_accountant(
    group: tuple[PrivacyEvent, ...], orders: tuple[int, ...] | None
) -> RdpAccountant:
    dp_accounting = _dp_accounting()
    accountant = dp_accounting.rdp.rdp_privacy_accountant.RdpAccountant(
        orders=list(orders) if orders is not None else None,
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    )
    for event in group:
        gaussian = dp_accounting.GaussianDpEvent(event.noise_multiplier)
        dp_event = (
            gaussian
            if event.sampling_rate == 1
            else dp_accounting.PoissonSampledDpEvent(event.sampling_rate, gaussian)
        )
        with _quiet_fractional_orders():
            accountant.compose(dp_event, event.count)
    return accountant


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

    def epsilon(self, events: Iterable[PrivacyEvent], delta: float) -> float:
        delta = _check_delta(delta)
        return max((_rdp_epsilon(g, delta) for g in _scopes(events)), default=0.0)

    def delta(self, events: Iterable[PrivacyEvent], epsilon: float) -> float:
        epsilon = check_positive("privacy.epsilon", epsilon)
        return max((_rdp_delta(g, epsilon) for g in _scopes(events)), default=0.0)


class MomentsAccountant:
    """The classic moments accountant of the DP-FTS-DE paper (spec-dpftsde §4.2)."""

    name = "moments"

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
    return sum(
        np.asarray(compute_rdp(q=q, noise_multiplier=z, steps=n, orders=list(opacus_orders())))
        for z, q, n in history
    )


@functools.lru_cache(maxsize=4096)
def _opacus_rdp_epsilon(history: tuple[tuple[float, float, int], ...], delta: float) -> float:
    accountant = _opacus().RDPAccountant()
    accountant.history = list(history)
    return float(accountant.get_epsilon(delta, alphas=list(opacus_orders())))


@functools.lru_cache(maxsize=4096)
def _opacus_prv_epsilon(history: tuple[tuple[float, float, int], ...], delta: float) -> float:
    accountant = _opacus().PRVAccountant()
    accountant.history = list(history)
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


class OpacusPrvAccountant:
    """Opacus's PRV accountant (Gopi et al. 2021): epsilon only (module docstring)."""

    name = "opacus-prv"

    def __init__(self) -> None:
        _opacus()

    def epsilon(self, events: Iterable[PrivacyEvent], delta: float) -> float:
        delta = _check_delta(delta)
        return max(
            (_opacus_prv_epsilon(_opacus_history(g), delta) for g in _scopes(events)),
            default=0.0,
        )

    def delta(self, events: Iterable[PrivacyEvent], epsilon: float) -> float:
        raise ConfigError(
            "privacy.accountant",
            "'opacus-prv' computes epsilon only (Opacus's PRV accountant has no bounded "
            "delta-from-epsilon); use 'rdp', 'moments' or 'opacus-rdp' for delta",
        )


_BACKENDS: dict[str, type] = {
    "rdp": RdpAccountant,
    "moments": MomentsAccountant,
    "opacus-rdp": OpacusRdpAccountant,
    "opacus-prv": OpacusPrvAccountant,
}


def make_accountant(name: str) -> Accountant:
    """The accountant backend ``name`` (one of :data:`ACCOUNTANTS`); an Opacus backend without
    Opacus installed is a :class:`~fedxab.errors.ConfigError` naming the install command."""
    check_choice("privacy.accountant", name, ACCOUNTANTS)
    return _BACKENDS[name]()


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
