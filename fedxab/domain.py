"""Search domains: axis-aligned boxes in R^d, given as a (d, 2) array of [lower, upper] rows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedxab.errors import ConfigError

MAX_DIM = 1000
"""Most dimensions a domain has: X-armed bandits need cells small in every dimension, which
no budget reaches in more (the papers go up to 10)."""


def as_domain(bounds: Sequence[Sequence[float]] | np.ndarray, field: str = "domain") -> np.ndarray:
    """Validate ``bounds`` and return them as a read-only float array of shape (d, 2).

    Raises :class:`ConfigError` naming ``field`` when the shape is wrong, a bound is not finite, a
    lower bound is not strictly below its upper bound, or a width (upper - lower) overflows.
    """
    try:
        arr = np.array(bounds, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            field, f"must be a list of [lower, upper] pairs of numbers ({exc})"
        ) from exc
    if arr.ndim == 1 and arr.shape == (2,):
        arr = arr.reshape(1, 2)
    if arr.ndim != 2 or arr.shape[1] != 2 or not 1 <= arr.shape[0] <= MAX_DIM:
        raise ConfigError(
            field,
            f"must be a list of [lower, upper] pairs, one per dimension (at most {MAX_DIM:,}); "
            f"got shape {arr.shape}",
        )
    if not np.all(np.isfinite(arr)):
        raise ConfigError(field, f"bounds must be finite numbers, got {arr.tolist()}")
    bad = np.nonzero(arr[:, 0] >= arr[:, 1])[0]
    if bad.size:
        j = int(bad[0])
        raise ConfigError(
            field,
            f"dimension {j} has lower bound {float(arr[j, 0])} >= upper bound {float(arr[j, 1])}; "
            "give each dimension as [lower, upper] with lower < upper",
        )
    with np.errstate(over="ignore"):
        wide = np.nonzero(~np.isfinite(arr[:, 1] - arr[:, 0]))[0]
    if wide.size:
        j = int(wide[0])
        raise ConfigError(
            field,
            f"dimension {j} is [{float(arr[j, 0])}, {float(arr[j, 1])}], whose width overflows "
            "a float; give bounds less than 1.7e308 apart (rescale the parameter)",
        )
    arr.setflags(write=False)
    return arr
