"""Privacy mechanisms that release a value and return the privacy event they cost.

As in Google's dp-accounting (``DpEvent``), a release is described by data, a
:class:`PrivacyEvent`, which an accountant later converts into (epsilon, delta); the mechanism
itself never decides what the budget is.

Calibration of the Gaussian mechanism's standard deviation sigma for one release of L2
sensitivity ``s`` at (epsilon, delta):

- ``"classic"`` (Dwork & Roth 2014, Theorem A.1): ``sigma = s sqrt(2 log(1.25/delta)) / epsilon``,
  valid only for ``0 < epsilon < 1``. This is the calibration of DP-Fed-PNE ([FX] App. D,
  ``sigma^2 = 2 log(1.25/delta)/epsilon^2``) and the default there.
- ``"analytic"`` (Balle & Wang 2018, Theorem 8): the smallest sigma with
  ``Phi(s/(2 sigma) - epsilon sigma/s) - e^epsilon Phi(-s/(2 sigma) - epsilon sigma/s) <= delta``,
  valid for every epsilon > 0 and never larger than the classic sigma.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from scipy.special import ndtr

from fedxab.errors import ConfigError, ProtocolError
from fedxab.validation import check_choice, check_positive

CALIBRATIONS = ("classic", "analytic")

MAX_EVENT_COUNT = 2**31 - 1
"""Most releases one event may compose (a run's budget is at most 10^8 rounds); also what the
ledger's SQLite integers hold with room to spare."""


@dataclass(frozen=True)
class PrivacyEvent:
    """One release, as data: what an accountant needs to compute its privacy loss.

    ``count`` releases of a Gaussian mechanism with noise multiplier ``sigma / sensitivity``,
    each on a Poisson subsample of rate ``sampling_rate`` (1 = no subsampling). Events with
    different ``scope`` touch disjoint data (e.g. DP-Fed-PNE's phases use disjoint rewards), so
    an accountant combines them by parallel composition; events in one scope compose.
    """

    mechanism: str
    noise_multiplier: float
    sampling_rate: float = 1.0
    sensitivity: float = 1.0
    count: int = 1
    scope: str = ""

    def to_wire(self) -> dict[str, object]:
        return {
            "mechanism": self.mechanism,
            "noise_multiplier": self.noise_multiplier,
            "sampling_rate": self.sampling_rate,
            "sensitivity": self.sensitivity,
            "count": self.count,
            "scope": self.scope,
        }

    @classmethod
    def from_wire(cls, data: Any) -> PrivacyEvent:
        """The event of :meth:`to_wire`'s data; ProtocolError naming a bad field."""
        if not isinstance(data, dict):
            raise ProtocolError(f"a privacy event must be a map, got {type(data).__name__}")
        try:
            mechanism, scope = data["mechanism"], data["scope"]
            numbers = [float(data[k]) for k in ("noise_multiplier", "sampling_rate", "sensitivity")]
            count = data["count"]
        except KeyError as exc:
            raise ProtocolError(f"privacy event: missing field {exc}") from exc
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"privacy event: a number field is not a number ({exc})") from exc
        if not isinstance(mechanism, str) or not isinstance(scope, str):
            raise ProtocolError("privacy event: fields 'mechanism' and 'scope' must be strings")
        if type(count) is not int or not 1 <= count <= MAX_EVENT_COUNT:
            raise ProtocolError(
                f"privacy event: field 'count' must be an integer in [1, {MAX_EVENT_COUNT}]"
            )
        if not all(math.isfinite(v) and v > 0 for v in numbers) or numbers[1] > 1:
            raise ProtocolError(f"privacy event: out of range values {numbers}")
        noise_multiplier, sampling_rate, sensitivity = numbers
        return cls(mechanism, noise_multiplier, sampling_rate, sensitivity, count, scope)


def _analytic_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return float(ndtr(a - b) - math.exp(epsilon) * ndtr(-a - b))


class CalibrationFields(NamedTuple):
    """The config fields a calibration's inputs come from, named in its errors."""

    epsilon: str = "privacy.epsilon"
    delta: str = "privacy.delta"
    sensitivity: str = "privacy.sensitivity"
    calibration: str = "privacy.calibration"


PRIVACY_FIELDS = CalibrationFields()
"""Release settings of the ``[privacy]`` section."""


def gaussian_sigma(
    epsilon: float,
    delta: float,
    sensitivity: float = 1.0,
    calibration: str = "classic",
    fields: CalibrationFields = PRIVACY_FIELDS,
) -> float:
    """The noise standard deviation for one (epsilon, delta)-DP release (module docstring);
    an invalid input raises :class:`~fedxab.errors.ConfigError` naming its ``fields`` entry."""
    check_choice(fields.calibration, calibration, CALIBRATIONS)
    epsilon = check_positive(fields.epsilon, epsilon)
    delta = check_positive(fields.delta, delta, upper=1.0)
    sensitivity = check_positive(fields.sensitivity, sensitivity)
    if calibration == "classic":
        if epsilon >= 1.0:
            raise ConfigError(
                fields.epsilon,
                f"the classic Gaussian calibration needs 0 < epsilon < 1, got {epsilon}; "
                f"set {fields.calibration} = 'analytic' (Balle & Wang 2018) for epsilon >= 1",
            )
        return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    lo, hi = 1e-6 * sensitivity, sensitivity
    while _analytic_delta(hi, epsilon, sensitivity) > delta:
        hi *= 2.0
    for _ in range(200):  # bisection to machine precision on the monotone delta(sigma)
        mid = 0.5 * (lo + hi)
        if _analytic_delta(mid, epsilon, sensitivity) > delta:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class GaussianMechanism:
    """Adds ``N(0, sigma^2)`` noise, elementwise, to released values of L2 sensitivity ``s``."""

    sigma: float
    sensitivity: float = 1.0

    @classmethod
    def calibrated(
        cls,
        epsilon: float,
        delta: float,
        sensitivity: float = 1.0,
        calibration: str = "classic",
        fields: CalibrationFields = PRIVACY_FIELDS,
    ) -> GaussianMechanism:
        sigma = gaussian_sigma(epsilon, delta, sensitivity, calibration, fields)
        return cls(sigma, sensitivity)

    @property
    def noise_multiplier(self) -> float:
        return self.sigma / self.sensitivity

    def event(self, scope: str = "") -> PrivacyEvent:
        """The privacy event of one release (known before releasing, for a budget check)."""
        return PrivacyEvent("gaussian", self.noise_multiplier, 1.0, self.sensitivity, 1, scope)

    def release(
        self, values: np.ndarray, rng: np.random.Generator, scope: str = ""
    ) -> tuple[np.ndarray, PrivacyEvent]:
        """``values + N(0, sigma^2 I)`` and the event of this one release."""
        values = np.asarray(values, dtype=np.float64)
        noisy = values + rng.normal(0.0, self.sigma, size=values.shape)
        return noisy, self.event(scope)


def clip_l2(values: np.ndarray, bound: float) -> np.ndarray:
    """``values`` scaled down, if needed, so that its L2 norm is at most ``bound`` (Abadi et al.
    2016, Algorithm 1's clipping): the direction is kept, a vector inside the ball is unchanged."""
    bound = check_positive("privacy.clip_bound", bound)
    values = np.asarray(values, dtype=np.float64)
    norm = float(np.linalg.norm(values))
    return values if norm <= bound else values * (bound / norm)


def clip_l2_blocks(values: np.ndarray, bound: float, blocks: int) -> np.ndarray:
    """``values`` cut into ``blocks`` equal parts, each clipped to L2 norm ``bound / sqrt(blocks)``,
    so the whole vector's norm is at most ``bound`` (DP-FTS-DE's per-sub-region clipping with
    S / sqrt(P), Dai, Low & Jaillet 2021, Algorithm 1)."""
    bound = check_positive("privacy.clip_bound", bound)
    values = np.asarray(values, dtype=np.float64)
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise ConfigError("privacy.blocks", f"must be an integer >= 1, got {blocks!r}")
    if values.ndim != 1 or values.size % blocks:
        raise ConfigError(
            "privacy.blocks",
            f"{blocks} block(s) do not divide a vector of shape {values.shape} into equal parts",
        )
    parts = values.reshape(blocks, -1)
    norms = np.linalg.norm(parts, axis=1, keepdims=True)
    limit = bound / math.sqrt(blocks)
    scale = np.minimum(1.0, limit / np.where(norms > 0, norms, 1.0))
    return (parts * scale).reshape(-1)


def poisson_subsample(n: int, q: float, rng: np.random.Generator) -> np.ndarray:
    """The indices among ``0..n-1`` chosen independently, each with probability ``q``
    (Poisson subsampling, the sampling of the subsampled Gaussian mechanism)."""
    q = check_positive("privacy.sampling_rate", q)
    if q > 1:
        raise ConfigError("privacy.sampling_rate", f"must lie in (0, 1], got {q}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError("privacy.population", f"must be an integer >= 0, got {n!r}")
    return np.arange(n) if q == 1 else np.flatnonzero(rng.random(n) < q)
