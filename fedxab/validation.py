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

NU_MIN = 1e-6
"""Smallest ``nu`` taken: the expansion thresholds grow like ``1 / nu**2``; below 1e-6 (in
reward units) they overflow a double within a few levels, and rescaling the rewards is the fix."""

CONSTANT_RANGE = (1e-6, 1e6)
"""Where the confidence constants ``c`` and ``c1`` must lie: the thresholds ``c**2 log(1 /
(c1 delta / t))`` overflow or divide by zero beyond it (the papers' values are within 1e-2..1e2)."""

DELTA_MIN = 1e-12
"""Smallest confidence level ``delta`` taken (the theory preset's ``1 / budget`` is >= 1e-8)."""

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
    """A smoothness constant: a number in [:data:`NU_MIN`, :data:`NU_MAX`]."""
    nu = check_positive(field, value)
    if nu < NU_MIN:
        raise ConfigError(
            field,
            f"must be >= {NU_MIN:g}, got {value!r}: the expansion thresholds 1/nu^2 would "
            "overflow; rescale the rewards instead",
        )
    if nu > NU_MAX:
        raise ConfigError(
            field,
            f"must be <= {NU_MAX:g}, got {value!r}: nu bounds the objective's variation in "
            "reward units; rescale the rewards instead",
        )
    return nu


def check_constant(field: str, value: float) -> float:
    """A confidence constant (``c``, ``c1``): a number in :data:`CONSTANT_RANGE`."""
    v = check_positive(field, value)
    lo, hi = CONSTANT_RANGE
    if not lo <= v <= hi:
        raise ConfigError(
            field,
            f"must be in [{lo:g}, {hi:g}], got {value!r}: beyond, the expansion thresholds "
            "overflow or divide by zero",
        )
    return v


def check_delta(field: str, value: float, *, closed: bool = False) -> float:
    """A confidence level: a number in [:data:`DELTA_MIN`, 1) (``closed``: 1 allowed)."""
    if closed and not isinstance(value, bool) and value == 1:
        return 1.0
    v = check_positive(field, value, upper=1.0)
    if v < DELTA_MIN:
        raise ConfigError(
            field,
            f"must be >= {DELTA_MIN:g} (and < 1), got {value!r}: log(1/delta) terms would "
            "overflow the expansion thresholds",
        )
    return v


def check_positive_int(field: str, value: int) -> int:
    """``value`` if it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(field, f"must be a positive integer, got {value!r}")
    return value
