"""An independent numerical maximiser for the objective tests (dense grid + scipy refinement)."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from fedxab.objectives import Objective


def grid_and_refined_max(obj: Objective, extra: np.ndarray | None = None) -> tuple[float, float]:
    """(max on a dense grid, max after refining the best grid points with scipy)."""
    lo, hi = obj.domain[:, 0], obj.domain[:, 1]
    best = -math.inf
    if obj.dim == 1:
        t = np.linspace(lo[0], hi[0], 400_001)
        y = obj(t.reshape(-1, 1))
        grid_max = float(y.max())
        h = t[1] - t[0]
        peaks = np.nonzero((y >= np.r_[-np.inf, y[:-1]]) & (y >= np.r_[y[1:], -np.inf]))[0]
        for i in peaks[np.argsort(-y[peaks])][:20]:
            a, b = max(lo[0], t[i] - h), min(hi[0], t[i] + h)
            r = minimize_scalar(
                lambda x: -obj([x])[0], bounds=(a, b), method="bounded", options={"xatol": 1e-13}
            )
            best = max(best, -float(r.fun))
    else:
        assert obj.dim == 2
        s1 = np.linspace(lo[0], hi[0], 801)
        s2 = np.linspace(lo[1], hi[1], 801)
        A, B = np.meshgrid(s1, s2, indexing="ij")
        P = np.column_stack([A.ravel(), B.ravel()])
        y = obj(P)
        grid_max = float(y.max())
        order = np.argsort(-y)
        starts: list[np.ndarray] = []
        for i in order[:5000]:
            if all(np.max(np.abs(P[i] - q) / (hi - lo)) > 0.02 for q in starts):
                starts.append(P[i])
            if len(starts) == 8:
                break
        for x0 in starts:
            r = minimize(
                lambda x: -obj(x)[0],
                x0,
                method="Nelder-Mead",
                bounds=list(zip(lo, hi, strict=True)),
                options={"xatol": 1e-12, "fatol": 1e-15, "maxfev": 4000},
            )
            best = max(best, -float(r.fun))
    best = max(best, grid_max)
    if extra is not None and len(extra):
        best = max(best, float(obj(np.asarray(extra, dtype=float).reshape(-1, obj.dim)).max()))
    return grid_max, best


def garland_cusps(shift: float = 0.0) -> np.ndarray:
    """The local maxima of Garland, k pi / 60 (spec-hct-poo-parallel §4.2), shifted."""
    x = np.arange(0, 20) * math.pi / 60.0 + shift
    return np.clip(x, 0.0, 1.0).reshape(-1, 1)
