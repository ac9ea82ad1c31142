"""Numerical maximisation of a vectorized function on a box.

Used where an optimum has no closed form: the maximum of the smooth 1-D product-of-sines function
(Chen et al.'s test function), the normalisers of Rastrigin and Ackley (as PF-PNE normalises), the
optimum of an input-shifted client whose shifted maximiser leaves the domain, and the optimum of the
average objective of a heterogeneous client family (computed
numerically, by dense grid and local search, since [PF] gives no closed form).

The method is deterministic (no global random state):

1. evaluate the caller's candidate maximisers (clipped into the box);
2. evaluate a dense sample: a regular grid in one or two free dimensions, a seeded scrambled Sobol
   sample (plus the centre) in three or more;
3. polish the best few distinct points. In one dimension a vectorized golden-section search on the
   bracket of one grid step either side of the best grid peaks and of the candidates (the best
   ``4 n_polish`` of them when there are more, as with one candidate per client of a large
   family) is run to machine precision: unlike Brent's method, whose
   stopping rule is relative to ``sqrt(eps)``, it also locates square-root cusps such as Garland's
   to ~1e-15, where a ``1e-8`` error in ``x`` would cost ``2e-4`` in value. In more dimensions
   a compass (coordinate pattern) search is run from all starts at once (batched evaluations,
   no gradient, so kinks and cones are fine), then the best three results are refined by a
   bounded Nelder-Mead (dimensions <= 4) or L-BFGS-B with a batched central-difference gradient
   (more dimensions);
4. with ``separable=True`` (the function is a sum of one-coordinate terms, e.g. Rastrigin and its
   input-shifted clients) one exact coordinate-wise sweep of 1-D maximisations from the best point
   found, which gives the global maximum of such functions.

The best evaluated point is returned; polishing never replaces a point by a worse one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fedxab.errors import ConfigError

__all__ = ["BoxMaximum", "known_maximizers", "maximize_on_box"]

VectorFunction = Callable[[np.ndarray], np.ndarray]

_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0
_CHUNK = 1 << 16


@dataclass(frozen=True)
class BoxMaximum:
    """Result of :func:`maximize_on_box`: the best value found and a point attaining it."""

    value: float
    x: np.ndarray


def known_maximizers(objective: object) -> np.ndarray:
    """All maximisers an objective states, as a (k, d) array (k = 0 when none is known).

    Reads the ``maximizers`` attribute of fedxab's synthetic objectives when present, else the
    single ``maximizer`` of the :class:`~fedxab.objectives.base.Objective` contract.
    """
    dim = int(objective.dim)  # type: ignore[attr-defined]
    many = getattr(objective, "maximizers", None)
    if many is not None:
        return np.asarray(many, dtype=float).reshape(-1, dim)
    one = getattr(objective, "maximizer", None)
    if one is None:
        return np.empty((0, dim))
    return np.asarray(one, dtype=float).reshape(1, dim)


def _as_box(box: Sequence[Sequence[float]] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    try:
        arr = np.array(box, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ConfigError("box", f"must be a list of [lower, upper] pairs ({exc})") from exc
    if arr.ndim == 1 and arr.shape == (2,):
        arr = arr.reshape(1, 2)
    if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] < 1:
        raise ConfigError("box", f"must have shape (d, 2), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ConfigError("box", f"bounds must be finite, got {arr.tolist()}")
    if np.any(arr[:, 0] > arr[:, 1]):
        raise ConfigError("box", f"each row must be [lower, upper] with lower <= upper, got {arr}")
    return arr[:, 0].copy(), arr[:, 1].copy()


class _Reduced:
    """``f`` seen as a function of the free coordinates, scaled to the unit cube [0, 1]^k."""

    def __init__(self, f: VectorFunction, lo: np.ndarray, hi: np.ndarray) -> None:
        self.f = f
        self.lo = lo
        self.free = np.nonzero(hi > lo)[0]
        self.width = (hi - lo)[self.free]
        self.k = int(self.free.size)

    def to_full(self, T: np.ndarray) -> np.ndarray:
        T = np.clip(np.asarray(T, dtype=float).reshape(-1, self.k), 0.0, 1.0)
        X = np.repeat(self.lo.reshape(1, -1), T.shape[0], axis=0)
        X[:, self.free] = self.lo[self.free] + T * self.width
        return X

    def __call__(self, T: np.ndarray) -> np.ndarray:
        T = np.asarray(T, dtype=float).reshape(-1, self.k)
        out = np.empty(T.shape[0])
        for start in range(0, T.shape[0], _CHUNK):
            X = self.to_full(T[start : start + _CHUNK])
            out[start : start + _CHUNK] = np.asarray(self.f(X), dtype=float).reshape(-1)
        return np.where(np.isfinite(out), out, -np.inf)


def _golden_max(g: VectorFunction, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized golden-section maximisation of a 1-D ``g`` on the brackets ``[a_i, b_i]``.

    Iterates until every bracket is at the spacing of doubles; returns the best of the final
    probes and the bracket ends for each bracket.
    """
    a = a.astype(float).copy()
    b = b.astype(float).copy()
    c = b - _GOLDEN * (b - a)
    d = a + _GOLDEN * (b - a)
    gc = g(c)
    gd = g(d)
    for _ in range(200):
        if np.all(b - a <= 4.0 * np.spacing(np.maximum(np.abs(a), np.abs(b)))):
            break
        left = gc >= gd  # the maximum lies in [a, d]
        b = np.where(left, d, b)
        a = np.where(left, a, c)
        new_c = b - _GOLDEN * (b - a)
        new_d = a + _GOLDEN * (b - a)
        # Reuse the surviving probe, evaluate the other one.
        c_next = np.where(left, new_c, d)
        d_next = np.where(left, c, new_d)
        probe = np.where(left, c_next, d_next)
        gp = g(probe)
        gc_next = np.where(left, gp, gd)
        gd_next = np.where(left, gc, gp)
        c, d, gc, gd = c_next, d_next, gc_next, gd_next
    pts = np.stack([a, b, c, d], axis=1)
    vals = g(pts.reshape(-1)).reshape(pts.shape)
    j = np.argmax(vals, axis=1)
    rows = np.arange(pts.shape[0])
    return pts[rows, j], vals[rows, j]


def _max_1d(
    g: VectorFunction, extra: np.ndarray, n_grid: int, n_starts: int
) -> tuple[float, float]:
    """Maximum of a 1-D vectorized ``g`` on [0, 1]: grid, then golden polish of local maxima."""
    t = np.linspace(0.0, 1.0, n_grid)
    y = g(t)
    h = t[1] - t[0]
    left = np.concatenate(([-np.inf], y[:-1]))
    right = np.concatenate((y[1:], [-np.inf]))
    peaks = np.nonzero((y >= left) & (y >= right))[0]
    peaks = peaks[np.argsort(-y[peaks], kind="stable")][:n_starts]
    extra = np.clip(np.asarray(extra, dtype=float).reshape(-1), 0.0, 1.0)
    extra_y = g(extra) if extra.size else np.empty(0)
    # polish every extra point, or the best n_starts of many (one per client of a large family)
    polish = (
        extra[np.argsort(-extra_y, kind="stable")[:n_starts]] if extra.size > n_starts else extra
    )
    starts = np.concatenate((t[peaks], polish))
    xs, vs = _golden_max(g, np.clip(starts - h, 0.0, 1.0), np.clip(starts + h, 0.0, 1.0))
    all_x = np.concatenate((t, xs, extra))
    all_v = np.concatenate((y, vs, extra_y))
    i = int(np.argmax(all_v))
    return float(all_x[i]), float(all_v[i])


def _distinct_best(T: np.ndarray, y: np.ndarray, n: int, radius: float) -> np.ndarray:
    """Indices of up to ``n`` best points, greedily skipping points within ``radius`` of a pick."""
    order = np.argsort(-y, kind="stable")[: max(50 * n, 200)]
    picked: list[int] = []
    for i in order:
        if not np.isfinite(y[i]):
            break
        if all(np.max(np.abs(T[i] - T[j])) > radius for j in picked):
            picked.append(int(i))
            if len(picked) == n:
                break
    return np.asarray(picked, dtype=int)


def _compass(
    g: _Reduced, starts: np.ndarray, step0: float, tol: float = 1e-14
) -> tuple[np.ndarray, np.ndarray]:
    """Compass (coordinate pattern) search from every start at once, on [0, 1]^k.

    Each round evaluates the 2k points ``p +- step e_i`` of every unconverged start in one batch,
    moves to the best if it improves, else halves that start's step, until steps fall below
    ``tol``. It needs no gradient (copes with kinks) and converges for C^1 functions.
    """
    P = np.array(starts, dtype=float, copy=True)
    n, k = P.shape
    v = g(P)
    step = np.full(n, float(step0))
    dirs = np.vstack([np.eye(k), -np.eye(k)])
    for _ in range(5000):
        act = np.nonzero(step > tol)[0]
        if act.size == 0:
            break
        Q = np.clip(P[act, None, :] + step[act, None, None] * dirs[None, :, :], 0.0, 1.0)
        vq = g(Q.reshape(-1, k)).reshape(act.size, 2 * k)
        j = np.argmax(vq, axis=1)
        best = vq[np.arange(act.size), j]
        up = best > v[act]
        moved = act[up]
        P[moved] = Q[np.nonzero(up)[0], j[up]]
        v[moved] = best[up]
        step[act[~up]] *= 0.5
    return P, v


def _lbfgsb(g: _Reduced, t0: np.ndarray) -> np.ndarray:
    """L-BFGS-B on [0, 1]^k from ``t0`` with a batched central-difference gradient."""
    k = g.k
    step = 1e-7

    def fun(t: np.ndarray) -> tuple[float, np.ndarray]:
        plus = np.clip(t + step * np.eye(k), 0.0, 1.0)
        minus = np.clip(t - step * np.eye(k), 0.0, 1.0)
        vals = g(np.vstack([t.reshape(1, k), plus, minus]))
        if not np.isfinite(vals[0]):
            return 1e300, np.zeros(k)
        denom = np.diag(plus - minus)
        with np.errstate(invalid="ignore"):
            diff = vals[1 : k + 1] - vals[k + 1 :]
        diff = np.where(np.isfinite(diff), diff, 0.0)
        grad = np.where(denom > 0, diff / np.where(denom > 0, denom, 1.0), 0.0)
        return -float(vals[0]), -grad

    from scipy.optimize import minimize  # imported here: scipy.optimize is slow to import

    res = minimize(
        fun,
        t0,
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, 1.0)] * k,
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 500},
    )
    return np.clip(np.asarray(res.x, dtype=float), 0.0, 1.0)


def _nelder_mead(g: _Reduced, t0: np.ndarray) -> np.ndarray:
    k = g.k
    from scipy.optimize import minimize  # imported here: scipy.optimize is slow to import

    res = minimize(
        lambda t: -float(g(t)[0]),
        t0,
        method="Nelder-Mead",
        bounds=[(0.0, 1.0)] * k,
        options={"xatol": 1e-13, "fatol": 1e-15, "maxfev": 600 * k},
    )
    return np.clip(np.asarray(res.x, dtype=float), 0.0, 1.0)


def _coordinate_sweep(g: _Reduced, t0: np.ndarray, n_grid: int, n_starts: int) -> np.ndarray:
    """One sweep of exact 1-D maximisations, one coordinate at a time (exact if separable)."""
    t = t0.copy()
    for i in range(g.k):

        def line(s: np.ndarray, i: int = i) -> np.ndarray:
            s = np.asarray(s, dtype=float).reshape(-1)
            T = np.repeat(t.reshape(1, -1), s.size, axis=0)
            T[:, i] = s
            return g(T)

        best, _ = _max_1d(line, np.asarray([t[i]]), n_grid, n_starts)
        t[i] = best
    return t


def maximize_on_box(
    f: VectorFunction,
    box: Sequence[Sequence[float]] | np.ndarray,
    candidates: Sequence[Sequence[float]] | np.ndarray | None = None,
    *,
    separable: bool = False,
    n_samples: int | None = None,
    n_polish: int = 16,
    seed: int = 0,
) -> BoxMaximum:
    """Maximise a vectorized ``f`` ((n, d) -> (n,)) on ``box`` ((d, 2) rows [lower, upper]).

    ``candidates`` (k, d) are evaluated first (after clipping into the box), e.g. the known
    maximisers of the function. ``n_samples`` sets the dense sample size (defaults: 100001 grid
    points in 1-D, 501 x 501 in 2-D, 2**15 Sobol points in more); ``n_polish`` the number of
    distinct best points that are locally refined; ``seed`` the Sobol scrambling (the result is
    deterministic for a given seed). A row with lower == upper fixes that coordinate. Non-finite
    values of ``f`` are treated as -inf. See the module docstring for the method.
    """
    lo, hi = _as_box(box)
    d = lo.size
    if n_polish < 1:
        raise ConfigError("n_polish", f"must be a positive integer, got {n_polish}")
    if n_samples is not None and n_samples < 2:
        raise ConfigError("n_samples", f"must be an integer >= 2, got {n_samples}")
    cand = (
        np.empty((0, d))
        if candidates is None
        else np.asarray(candidates, dtype=float).reshape(-1, d)
    )
    cand = cand[np.all(np.isfinite(cand), axis=1)]
    g = _Reduced(f, lo, hi)
    if g.k == 0:
        X = lo.reshape(1, d)
        return BoxMaximum(float(np.asarray(f(X), dtype=float).reshape(-1)[0]), lo.copy())

    cand_t = (np.clip(cand, lo, hi)[:, g.free] - lo[g.free]) / g.width
    if g.k == 1:
        n_grid = n_samples or 100_001
        t_best, _ = _max_1d(g, cand_t.reshape(-1), n_grid, 4 * n_polish)
        T_best = np.asarray([t_best])
    else:
        if g.k == 2:
            side = round(math.sqrt(n_samples)) if n_samples else 501
            s = np.linspace(0.0, 1.0, max(side, 2))
            A, B = np.meshgrid(s, s, indexing="ij")
            T = np.column_stack([A.ravel(), B.ravel()])
            radius = 2.0 * (s[1] - s[0])
        else:
            n = n_samples or (1 << 15)
            m = int(np.ceil(np.log2(n)))
            from scipy.stats import qmc  # imported here: scipy.stats is slow to import

            T = qmc.Sobol(d=g.k, scramble=True, rng=np.random.default_rng(seed)).random_base2(m)[:n]
            T = np.vstack([np.full((1, g.k), 0.5), T])
            radius = 0.5 / n ** (1.0 / g.k)
        T = np.vstack([cand_t, T])
        y = g(T)
        starts = T[_distinct_best(T, y, n_polish, radius)]
        P, py = _compass(g, starts, 2.0 * radius)
        top = np.argsort(-py, kind="stable")[:3]
        local = _nelder_mead if g.k <= 4 else _lbfgsb
        refined = np.vstack([local(g, P[i]) for i in top])
        P = np.vstack([T, P, refined])
        py = np.concatenate([y, py, g(refined)])
        T_best = P[int(np.argmax(py))]
        if separable:
            swept = _coordinate_sweep(g, T_best, 20_001, n_polish)
            if g(swept)[0] >= g(T_best)[0]:
                T_best = swept
    x = g.to_full(T_best)[0]
    value = float(np.asarray(f(x.reshape(1, d)), dtype=float).reshape(-1)[0])
    return BoxMaximum(value, x)
