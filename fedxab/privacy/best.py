"""The opt-in DP release of a client's best observed value (``[privacy] release_best``).

Under local DP nothing derived from a client's rewards leaves it except releases its ledger
charged. A user who wants the server to learn each client's best value opts in; at the end of
the run each client then releases

    ``clip(best, low, high) + N(0, sigma^2)``

with ``sigma`` calibrated by the analytic Gaussian mechanism (Balle & Wang 2018, Theorem 8) for
``(best_epsilon, delta)`` at sensitivity ``high - low``.

Sensitivity: the best value is the maximum (or minimum) of the client's rewards, and clipping
is monotone, so the clipped best equals the best of the clipped rewards and lies in
``[low, high]``; changing any rewards moves it by at most ``high - low``.

Accounting: the release is one :class:`~fedxab.privacy.mechanisms.PrivacyEvent` of scope
``run`` (it reads every reward, so it composes with every release of the run; the config asks
for DP-Fed-PNE's ``composition = "sequential"``, whose releases share that scope), keyed in the
ledger at phase :data:`BEST_PHASE`, a phase no run reaches. It is admitted through the client's
gate (budget check and record in one transaction, :meth:`~fedxab.privacy.gate.LedgerGate.admit`)
before the noise is even drawn, and recorded before the value leaves; a budget that cannot
afford it refuses it and nothing is released. The noise is seeded by (run seed, client), so a
replayed run releases the same value and its ledger charges nothing new.

The best *point* is never released: it is a vector in the search space, not a number of bounded
sensitivity (one reward can move the argmax anywhere), so a noisy copy of it would need another
mechanism (e.g. the exponential mechanism over candidates).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedxab.errors import ProtocolError
from fedxab.privacy.mechanisms import CalibrationFields, GaussianMechanism
from fedxab.privacy.release import PrivacyBudgetExceeded, ReleaseGate
from fedxab.seeding import stream

__all__ = ["BEST_PHASE", "BEST_SCOPE", "BestRelease", "checked_best_release", "release_best"]

BEST_PHASE = 2**31 - 1
"""The ledger phase of the best value's release: the last the wire allows, which no run reaches
(a run has at most 10^8 evaluations per client, so fewer phases)."""
BEST_SCOPE = "run"
"""Its scope: every reward of the run (DP-Fed-PNE's sequential composition)."""
BEST_FIELDS = CalibrationFields(
    "privacy.best_epsilon", "privacy.delta", "privacy.best_high", "privacy.calibration"
)


@dataclass(frozen=True)
class BestRelease:
    """The best value's release: its Gaussian mechanism and the declared range."""

    epsilon: float
    delta: float
    low: float
    high: float

    @classmethod
    def of(cls, settings: Any, delta: float) -> BestRelease | None:
        """The release a ``[privacy]`` section asks for at the run's accounting ``delta``, or
        None without ``release_best``."""
        if not settings.release_best:
            return None
        return cls(settings.best_epsilon, delta, settings.best_low, settings.best_high)

    @functools.cached_property
    def mechanism(self) -> GaussianMechanism:
        width = self.high - self.low
        return GaussianMechanism.calibrated(
            self.epsilon, self.delta, width, "analytic", BEST_FIELDS
        )


def release_best(
    settings: BestRelease, best: float | None, gate: ReleaseGate, seed: int, client: int
) -> dict[str, Any]:
    """What the server may learn of client ``client``'s ``best``: ``{"best_value_dp": noisy,
    ...}`` with the release's epsilon, delta, sigma and range, charged through ``gate`` before
    it is returned; or ``{"refused": reason, ...}`` (nothing released) when the budget cannot
    afford it (or ``best`` is None: the client made no evaluation)."""
    mechanism = settings.mechanism
    event = mechanism.event(BEST_SCOPE)
    about = {
        "mechanism": "gaussian",
        "epsilon": settings.epsilon,
        "delta": settings.delta,
        "sigma": mechanism.sigma,
        "range": [settings.low, settings.high],
    }
    if best is None:
        return {"refused": "no evaluation, so no best value", **about}
    try:
        gate.admit(BEST_PHASE, event)
    except PrivacyBudgetExceeded as exc:
        return {"refused": str(exc), **about}
    clipped = np.clip(np.array([best], dtype=np.float64), settings.low, settings.high)
    noisy, event = mechanism.release(clipped, stream(seed, "dp-best", client), scope=BEST_SCOPE)
    gate.record(BEST_PHASE, event)
    return {"best_value_dp": float(noisy[0]), **about}


def checked_best_release(body: Any, client: int) -> dict[str, Any]:
    """A client's ``best_dp`` message as the server reads it: client ``client``'s release
    (``best_value_dp`` and its finite epsilon, delta, sigma and range) or its refusal; a
    :class:`~fedxab.errors.ProtocolError` naming the defect otherwise."""
    about_client = body.get("client") if isinstance(body, dict) else None
    if type(about_client) is not int or about_client != client:  # (an array has no == test)
        raise ProtocolError(f"must be a map about client {client}")
    if "best_value" in body or "best_point" in body:
        raise ProtocolError("carries a raw best value or point")
    about = {k: body.get(k) for k in ("epsilon", "delta", "sigma")}
    low_high = body.get("range")
    numbers = [*about.values(), body.get("best_value_dp", 0.0)]
    if not (
        all(type(v) is float and math.isfinite(v) for v in numbers)
        and isinstance(low_high, list)
        and len(low_high) == 2
        and all(type(v) is float and math.isfinite(v) for v in low_high)
    ):
        raise ProtocolError("its epsilon, delta, sigma, range and value must be finite numbers")
    refused = body.get("refused")
    if ("best_value_dp" in body) == (refused is not None) or not isinstance(refused, str | None):
        raise ProtocolError("must carry either best_value_dp or a refusal")
    out = {"mechanism": "gaussian", **about, "range": low_high}
    if refused is not None:
        return {"refused": refused[:500], **out}
    return {"best_value_dp": body["best_value_dp"], **out}
