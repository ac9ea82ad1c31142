"""DP-Fed-PNE: Fed-PNE with client-side Gaussian noise ([FX] App. D, Algorithms 3 and 4).

Every client adds i.i.d. ``N(0, sigma^2)`` noise to *every* reward before
averaging (Alg. 3 line 8), with ``sigma`` calibrated for (epsilon, delta_priv) at sensitivity 1
(rewards in [0, 1]); only the noisy means leave the client. The server is Fed-PNE's with the
confidence constant enlarged for the extra variance (fedxab's choice, after the theory's ratio
``2 -> sqrt(4 + 16 sigma^2)``): ``c_DP = c sqrt(1 + 4 sigma^2)``, used in tau_h and in the width.

Each reward belongs to exactly one released scalar (a node is estimated in one phase only), so the
whole transcript is (epsilon, delta_priv)-DP without composition over phases (Theorem D.1). Each
client records one :class:`~fedxab.privacy.mechanisms.PrivacyEvent` per completed phase for the
privacy ledger; ``composition`` says how the ledger combines them:

- ``"parallel"`` (default, the paper's Theorem D.1): scope ``phase-<p>``, disjoint data, so the
  client's epsilon stays that of one release however many phases it completes;
- ``"sequential"``: one scope for the whole run, so every phase's release composes. This is the
  reading to choose when what is protected is not the reward stream but data every evaluation
  reads again (e.g. a client's landmine field behind each validation AUC): then the phases do
  not touch disjoint data.

With a :class:`~fedxab.privacy.release.ReleaseGate` (``client.gate``), the client asks the ledger
before pulling for a phase it would release and records the release before it is sent; a refused
release (over budget) makes it withdraw from the run
(:class:`~fedxab.algorithms.protocol.Withdrawal`).

The confidence level ``delta`` (in L, tau_h, b) and the privacy ``privacy_delta`` are separate
parameters.

The guarantee needs bounded rewards: the paper assumes rewards in [0, 1], so that one reward
moves a node's sum by at most 1. The client therefore clips every reward to ``reward_range``
(default ``(0, 1)``) before adding noise, and calibrates sigma to the range's width (the L2
sensitivity). A deployment whose rewards live elsewhere (e.g. Fed-PNE's offset clients) must
declare its range; values outside it are clipped, never released as they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fedxab.algorithms.fedpne import FedPNEClient, FedPNEServer
from fedxab.algorithms.partition import Partition
from fedxab.algorithms.pne import PNEConstants
from fedxab.errors import ConfigError
from fedxab.privacy.mechanisms import CalibrationFields, GaussianMechanism, PrivacyEvent
from fedxab.privacy.release import PrivacyBudgetExceeded, ReleaseGate
from fedxab.seeding import stream
from fedxab.validation import CONSTANT_RANGE, check_choice

COMPOSITIONS = ("parallel", "sequential")
ALGORITHM_FIELDS = CalibrationFields(
    "algorithm.epsilon",
    "algorithm.privacy_delta",
    "algorithm.reward_range",
    "algorithm.calibration",
)
"""DP-Fed-PNE's release settings are algorithm parameters (part of the run protocol)."""


class DPFedPNEServer(FedPNEServer):
    """Fed-PNE's server with ``c_DP = c sqrt(1 + 4 sigma^2)`` ([FX] Alg. 4, Remark D.2)."""

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        n_clients: int,
        budget: int,
        epsilon: float,
        privacy_delta: float,
        calibration: str = "classic",
        horizon: int | None = None,
        nu: float = 1.0,
        rho: float = 0.5,
        preset: str = "practical",
        c: float | None = None,
        c1: float | None = None,
        delta: float | None = None,
        k: int = 2,
        split: str = "random",
        depth_counting: str = "true",
        seed: int = 0,
        edges: Sequence[Sequence[float] | None] | None = None,
    ) -> None:
        self.mechanism = GaussianMechanism.calibrated(
            epsilon, privacy_delta, 1.0, calibration, ALGORITHM_FIELDS
        )
        base_c = PNEConstants.resolve(n_clients=n_clients, horizon=budget, preset=preset, c=c).c
        sigma = self.mechanism.sigma  # (sigma^2 overflows past 1e154)
        noisy_c = base_c * math.sqrt(1.0 + 4.0 * sigma**2) if sigma < 1e150 else math.inf
        if not noisy_c <= CONSTANT_RANGE[1]:
            raise ConfigError(
                "algorithm.epsilon",
                f"{epsilon!r} is too small: its noise (sigma = {sigma:.3g}) makes "
                f"the confidence constant c = {noisy_c:.3g}, beyond {CONSTANT_RANGE[1]:g}; no "
                "budget could resolve a cell at that noise. Give a larger epsilon",
            )
        super().__init__(
            domain,
            n_clients=n_clients,
            budget=budget,
            horizon=horizon,
            nu=nu,
            rho=rho,
            preset=preset,
            c=noisy_c,
            c1=c1,
            delta=delta,
            k=k,
            split=split,
            depth_counting=depth_counting,
            seed=seed,
            edges=edges,
        )


class DPFedPNEClient(FedPNEClient):
    """Fed-PNE's client adding ``N(0, sigma^2)`` to every reward ([FX] Alg. 3 line 8)."""

    def __init__(
        self,
        client_id: int,
        domain: Sequence[Sequence[float]] | np.ndarray,
        *,
        budget: int,
        epsilon: float,
        privacy_delta: float,
        calibration: str = "classic",
        reward_range: Sequence[float] = (0.0, 1.0),
        composition: str = "parallel",
        k: int = 2,
        split: str = "random",
        seed: int = 0,
        partition: Partition | None = None,
        edges: Sequence[Sequence[float] | None] | None = None,
    ) -> None:
        super().__init__(
            client_id,
            domain,
            budget=budget,
            k=k,
            split=split,
            seed=seed,
            partition=partition,
            edges=edges,
        )
        self.reward_range = _check_range(reward_range)
        width = self.reward_range[1] - self.reward_range[0]
        self.mechanism = GaussianMechanism.calibrated(
            epsilon, privacy_delta, width, calibration, ALGORITHM_FIELDS
        )
        self.composition = check_choice("algorithm.composition", composition, COMPOSITIONS)
        self.seed = seed
        self.events: list[tuple[int, PrivacyEvent]] = []  # (phase, event) released
        self.gate: ReleaseGate | None = None

    def _scope(self, phase: int) -> str:
        return f"phase-{phase}" if self.composition == "parallel" else "run"

    def _refusal(self, phase: int) -> str | None:
        if self.gate is None:
            return None
        try:
            self.gate.admit(phase, self.mechanism.event(self._scope(phase)))
        except PrivacyBudgetExceeded as exc:
            return str(exc)
        return None

    def _local_means(self, rewards: np.ndarray, phase: int) -> np.ndarray:
        rng = stream(self.seed, "dp-noise", self.client_id, phase)
        clipped = np.clip(rewards, *self.reward_range)
        noisy, event = self.mechanism.release(clipped, rng, scope=self._scope(phase))
        if self.gate is not None:
            self.gate.record(phase, event)
        self.events.append((phase, event))
        return noisy.mean(axis=1)


def _check_range(reward_range: Sequence[float]) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in reward_range)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            "algorithm.reward_range", f"must be [lower, upper], got {reward_range!r}"
        ) from exc
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConfigError(
            "algorithm.reward_range", f"must be finite with lower < upper, got [{lo}, {hi}]"
        )
    return lo, hi
