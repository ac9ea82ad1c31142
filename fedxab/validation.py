"""Parameter checks shared by constructors and the config loader (scikit-learn style).

Each check raises :class:`~fedxab.errors.ConfigError` naming the field, the value given and what
is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fedxab.errors import ConfigError

RHO_MIN = 1e-3
"""Smallest ``rho`` (``rho_max``) taken. The trees' thresholds grow like ``rho**(-2h)`` with the
depth h: at rho = 1e-3 they reach 1e300 at depth 50 (a double overflows near 1.8e308), and a
smaller rho only makes the cells' diameter bound ``nu * rho**h`` vanish faster than any
objective in the papers varies."""

NU_MAX = 1e6
"""Largest ``nu`` (``nu_max``) taken: nu bounds how much the objective varies over the whole
domain, in reward units; beyond 1e6 the thresholds ``(c / nu)**2 * rho**(-2h)`` stay below one
pull for more levels than a double can split an interval (about 50), and rescaling the rewards
is the fix."""


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


def check_nonnegative(field: str, value: object) -> float:
    """``value`` as a finite float >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ConfigError(field, f"must be a non-negative number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ConfigError(field, f"must be a finite number >= 0, got {value!r}")
    return v


def check_bool(field: str, value: object) -> bool:
    """``value`` if it is true or false (a NumPy boolean too)."""
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(field, f"must be true or false, got {value!r}")
    return bool(value)


def check_rho(field: str, value: float) -> float:
    """A tree's shrink rate: a number in [:data:`RHO_MIN`, 1)."""
    rho = check_positive(field, value, upper=1.0)
    if rho < RHO_MIN:
        raise ConfigError(
            field,
            f"must be >= {RHO_MIN:g} (and < 1), got {value!r}: the thresholds rho^(-2h) would "
            "overflow within the depths the tree reaches",
        )
    return rho


def check_nu(field: str, value: float) -> float:
    """A smoothness constant: a number in (0, :data:`NU_MAX`]."""
    nu = check_positive(field, value)
    if nu > NU_MAX:
        raise ConfigError(
            field,
            f"must be <= {NU_MAX:g}, got {value!r}: nu bounds the objective's variation in "
            "reward units; rescale the rewards instead",
        )
    return nu


def check_positive_int(field: str, value: int) -> int:
    """``value`` if it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(field, f"must be a positive integer, got {value!r}")
    return value
