"""The detail text of the progress bars of ``fedxab run`` and ``fedxab reproduce``."""

from __future__ import annotations

import math

__all__ = ["status_line"]


def status_line(
    regret: float | None = None,
    phase: int | None = None,
    evaluations: int | None = None,
    epsilon: float | None = None,
) -> str:
    """Regret so far, phase, evaluations and max epsilon, each where known, joined by " · "."""
    parts = []
    if regret is not None and math.isfinite(regret):
        parts.append(f"regret {regret:.3f}")
    if phase is not None:
        parts.append(f"phase {phase}")
    if evaluations is not None:
        parts.append(f"{evaluations:,} evals")
    if epsilon is not None:
        parts.append(f"ε {epsilon:.3f}")
    return " · ".join(parts)
