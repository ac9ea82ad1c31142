"""The schedules of DP-FTS-DE: aggregation weights over rounds and the probability p_t.

**Weights** (Dai, Low & Jaillet 2021, Algorithm 1): for sub-region i, agent n gets
``phi_n^(i) ∝ exp(a_t)`` if its home region is i and ``∝ exp(1)`` otherwise (the paper's softmax
with temperature ``a / (a_t - 1)``, identical after normalisation). ``a_t`` starts at
``a + 1 = 16``, stays there for ``hold`` rounds, then follows ``linspace(a + 1, 1, decay)`` and
is 1 (uniform weights 1/N) afterwards. Round 0 is the initialisation round. The two published
schedules:

- ``"synthetic"``: a_t = 16 for rounds 0..5, then 16, 12.25, 8.5, 4.75, 1 for rounds 6..10;
- ``"real"``: a_t = 16 for rounds 0..9, then ``linspace(16, 1, 30)`` for rounds 10..39 (the authors'
  code).

Variants (App. B.2.3, B.2.5, Fig. 5): ``"non-adaptive"`` (a_t = a + 1 forever) and ``"equal"``
(phi = 1/N always). ``P = 1`` always gives uniform weights (FTS / DP-FTS).

**p_t**: the probability that agent n uses its own GP-TS at BO iteration t >= 1;
``1 - p_t = 1/t`` (real-world), ``1/sqrt(t)`` (synthetic) or ``1/t^2`` (theory), so p_1 = 0 (the
first query always uses the server's vectors); ``p_min`` clamps p_t from below for the
theory-faithful mode. ``"own"`` is p_t = 1 (standard TS, no federated step).
"""

from __future__ import annotations

import math

import numpy as np

from fedxab.errors import ConfigError
from fedxab.validation import check_choice

__all__ = ["P_SCHEDULES", "WEIGHT_SCHEDULES", "a_schedule", "p_own", "region_weights"]

WEIGHT_SCHEDULES = ("synthetic", "real", "non-adaptive", "equal")
P_SCHEDULES = ("1/t", "1/sqrt(t)", "1/t^2", "own")

_HOLD_DECAY = {"synthetic": (6, 5), "real": (10, 30)}
"""Rounds at a + 1 (counting round 0), then the length of the linear decay to 1."""


def a_schedule(round_: int, schedule: str, a: float = 15.0) -> float:
    """``a_t`` of round ``round_`` (0 = initialisation) under ``schedule`` (module docstring)."""
    check_choice("algorithm.weights", schedule, WEIGHT_SCHEDULES)
    top = a + 1.0
    if schedule == "non-adaptive":
        return top
    if schedule == "equal":
        return 1.0
    hold, decay = _HOLD_DECAY[schedule]
    if round_ < hold:
        return top
    if round_ < hold + decay:
        return float(np.linspace(top, 1.0, decay)[round_ - hold])
    return 1.0


def region_weights(homes: np.ndarray, n_regions: int, a_t: float) -> np.ndarray:
    """The (P, N) weights ``phi_n^(i)``: ``exp(a_t)`` for home agents, ``exp(1)`` for the others,
    each row normalised to sum 1 (the "equivalent, simpler form")."""
    homes = np.asarray(homes)
    # exp(a_t - 1) relative to exp(0) = 1: the same ratio, no overflow
    home = (homes[None, :] == np.arange(n_regions)[:, None]).astype(float)
    raw = np.where(home > 0, math.exp(a_t - 1.0), 1.0)
    return raw / raw.sum(axis=1, keepdims=True)


def p_own(t: int, schedule: str, p_min: float = 0.0) -> float:
    """p_t, the probability of the agent's own GP-TS at BO iteration ``t >= 1``."""
    check_choice("algorithm.p_schedule", schedule, P_SCHEDULES)
    if t < 1:
        raise ConfigError("t", f"BO iterations count from 1, got {t}")
    if schedule == "own":
        return 1.0
    gap = {"1/t": 1.0 / t, "1/sqrt(t)": 1.0 / math.sqrt(t), "1/t^2": 1.0 / t**2}[schedule]
    return max(1.0 - gap, p_min)
