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
  the paper's epsilon values (spec §4.3) and is never below ``"rdp"``.

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
from typing import Protocol

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant

from fedxab.errors import ConfigError
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.validation import check_choice, check_positive

__all__ = ["ACCOUNTANTS", "Accountant", "make_accountant"]

ACCOUNTANTS = ("rdp", "moments")
MOMENT_ORDERS = tuple(range(2, 34))
"""RDP orders alpha = lambda + 1 for the moment orders lambda = 1..32 (spec-dpftsde §4.2)."""


class Accountant(Protocol):
    name: str

    def epsilon(self, events: Iterable[PrivacyEvent], delta: float) -> float: ...

    def delta(self, events: Iterable[PrivacyEvent], epsilon: float) -> float: ...


def _check_event(event: PrivacyEvent) -> None:
    if event.mechanism != "gaussian":
        raise ConfigError(
            "event.mechanism", f"only Gaussian releases are accounted, got {event.mechanism!r}"
        )
    check_positive("event.noise_multiplier", event.noise_multiplier)
    q = check_positive("event.sampling_rate", event.sampling_rate)
    if q > 1:
        raise ConfigError("event.sampling_rate", f"must lie in (0, 1], got {q}")
    if isinstance(event.count, bool) or not isinstance(event.count, int) or event.count < 1:
        raise ConfigError("event.count", f"must be an integer >= 1, got {event.count!r}")


def _scopes(events: Iterable[PrivacyEvent]) -> list[tuple[PrivacyEvent, ...]]:
    """The events grouped by scope (each group composes; groups are disjoint)."""
    groups: dict[str, list[PrivacyEvent]] = defaultdict(list)
    for event in events:
        _check_event(event)
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
) -> rdp_privacy_accountant.RdpAccountant:
    accountant = rdp_privacy_accountant.RdpAccountant(
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


def make_accountant(name: str) -> Accountant:
    """The accountant backend ``name`` (one of :data:`ACCOUNTANTS`)."""
    check_choice("privacy.accountant", name, ACCOUNTANTS)
    return RdpAccountant() if name == "rdp" else MomentsAccountant()
