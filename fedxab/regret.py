"""Regret bookkeeping shared by the single-agent and the federated runners.

For a maximisation problem with optimum value ``f*`` the instantaneous regret of a pull at
``x_t`` is ``r_t = f* - f(x_t)`` (noise-free, so it is never negative when ``f*`` is exact), the
cumulative regret after ``T`` rounds is ``R_T = sum_{t <= T} r_t``, the average regret is
``R_T / T`` (the quantity the federated papers plot), and the simple regret of a recommendation
``x_rec`` is ``f* - f(x_rec)``. In the federated setting each client has its own regret curve and
the papers report the average over clients, ``(1/M) sum_m R_T^m``.

All functions are pure numpy helpers that return float64 arrays.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def instant_regret(optimum_value: float, values: ArrayLike) -> np.ndarray:
    """``f* - f(x_t)`` for each noise-free value ``f(x_t)`` in ``values``."""
    return float(optimum_value) - np.asarray(values, dtype=np.float64)


def cumulative_regret(instant: ArrayLike) -> np.ndarray:
    """The cumulative regret curve ``R_T = sum_{t <= T} r_t`` for T = 1..len(instant).

    ``instant`` may also be 2-D (clients x rounds); the sum then runs along the last axis.
    """
    return np.cumsum(np.asarray(instant, dtype=np.float64), axis=-1)


def average_regret(cumulative: ArrayLike, rounds: ArrayLike | None = None) -> np.ndarray:
    """The average regret per step ``R_T / T``.

    ``rounds`` gives the round number T of each entry of ``cumulative`` (1-based); by default the
    entries are taken to be rounds 1, 2, ..., n.
    """
    cum = np.asarray(cumulative, dtype=np.float64)
    if rounds is None:
        t = np.arange(1, cum.shape[-1] + 1, dtype=np.float64)
    else:
        t = np.asarray(rounds, dtype=np.float64)
        if t.shape != cum.shape[-1:]:
            raise ValueError(
                f"rounds has shape {t.shape} but the regret curve has {cum.shape[-1]} entries"
            )
        if np.any(t < 1):
            raise ValueError("round numbers start at 1")
    return cum / t


def simple_regret(optimum_value: float, value: float) -> float:
    """``f* - f(x_rec)``: the regret of the recommended point ``x_rec`` with value ``value``."""
    return float(optimum_value) - float(value)


def average_over_clients(per_client: ArrayLike) -> np.ndarray:
    """The mean over clients of a (clients x rounds) array, as a curve of length ``rounds``.

    A 1-D array is taken to be a single client and returned as float64 unchanged.
    """
    arr = np.asarray(per_client, dtype=np.float64)
    if arr.ndim == 1:
        return arr.copy()
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"expected a (clients, rounds) array with clients >= 1, got {arr.shape}")
    return arr.mean(axis=0)


def round_grid(total: int, max_points: int = 500) -> np.ndarray:
    """At most ``max_points`` evenly spaced round numbers in 1..total, always including ``total``.

    Used to store a regret curve compactly: the curve is kept at these rounds only.
    """
    if total < 1:
        raise ValueError(f"total must be >= 1, got {total}")
    if max_points < 2:
        raise ValueError(f"max_points must be >= 2, got {max_points}")
    if total <= max_points:
        return np.arange(1, total + 1, dtype=np.int64)
    grid = np.unique(np.rint(np.linspace(1, total, max_points)).astype(np.int64))
    return grid


def at_rounds(curve: ArrayLike, rounds: ArrayLike) -> np.ndarray:
    """The entries of a per-round ``curve`` (round 1 first) at the 1-based ``rounds``."""
    arr = np.asarray(curve, dtype=np.float64)
    idx = np.asarray(rounds, dtype=np.int64) - 1
    if idx.size and (idx.min() < 0 or idx.max() >= arr.shape[-1]):
        raise ValueError(f"rounds must lie in 1..{arr.shape[-1]}")
    return arr[..., idx]
