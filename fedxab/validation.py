"""Parameter checks shared by constructors and the config loader (scikit-learn style).

Each check raises :class:`~fedxab.errors.ConfigError` naming the field, the value given and what
is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fedxab.errors import ConfigError


def check_choice(field: str, value: str, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(field, f"unknown value {value!r}; allowed: {', '.join(allowed)}")
    return value


def check_positive(field: str, value: float, upper: float | None = None) -> float:
    """``value`` as a finite float > 0 (and < ``upper`` when given)."""
    if isinstance(value, bool):
        raise ConfigError(field, f"must be a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(field, f"must be a number, got {value!r}") from exc
    if not math.isfinite(v) or v <= 0 or (upper is not None and v >= upper):
        bound = f" and < {upper}" if upper is not None else ""
        raise ConfigError(field, f"must be > 0{bound}, got {value!r}")
    return v


def check_positive_int(field: str, value: int) -> int:
    """``value`` if it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(field, f"must be a positive integer, got {value!r}")
    return value
