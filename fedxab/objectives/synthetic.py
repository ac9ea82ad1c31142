"""Synthetic test functions with exactly known optima (all MAXIMISATION problems).

Formulas: those of the federated papers' experiments ([FX] App. E, [PF]: Garland, DoubleSine,
Himmelblau, Rastrigin, Ackley, and their normalisation to [0, 1] used by PF-PNE), of Chen et al.'s
parallel paper (the product-of-sines function, and Garland), in PyXAB's conventions.

Every class evaluates a whole (n, d) batch with numpy (no Python loop over points), states its
optimum value ``optimum_value`` and a maximiser ``maximizer``, and lists every known global
maximiser in ``maximizers`` (a read-only (k, d) array). Optima that have no closed form are computed
numerically once per process (cached) by :func:`~fedxab.objectives.optimize.maximize_on_box`,
never typed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

import numpy as np
from scipy.optimize import brentq, root

from fedxab.domain import MAX_DIM
from fedxab.errors import ConfigError
from fedxab.objectives.base import Objective
from fedxab.objectives.optimize import maximize_on_box
from fedxab.validation import check_bool

__all__ = [
    "Ackley",
    "DoubleSine",
    "Garland",
    "Himmelblau",
    "Rastrigin",
    "SineProduct",
    "SyntheticObjective",
]


def _check_dim(value: object, field: str = "objective.dim") -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not 1 <= value <= MAX_DIM
    ):
        raise ConfigError(
            field, f"must be an integer in 1..{MAX_DIM:,} (dimensions), got {value!r}"
        )
    return int(value)


class SyntheticObjective(Objective):
    """An :class:`Objective` with all its known global maximisers in ``maximizers``.

    ``separable`` is True when ``f(x)`` is a sum of one-coordinate terms (plus a constant), which
    lets :func:`~fedxab.objectives.optimize.maximize_on_box` maximise it coordinate by coordinate.
    """

    separable: bool = False

    def __init__(
        self,
        domain: Sequence[Sequence[float]] | np.ndarray,
        optimum_value: float,
        maximizers: Sequence[Sequence[float]] | np.ndarray,
    ) -> None:
        dim = len(domain)
        ms = np.array(maximizers, dtype=float).reshape(-1, dim)
        super().__init__(domain, optimum_value, ms[0])
        ms.setflags(write=False)
        self.maximizers = ms


# --------------------------------------------------------------------------------------------
# Garland


class Garland(SyntheticObjective):
    """Garland, ``f(x) = x (1 - x) (4 - sqrt|sin 60x|)`` on [0, 1] (no rescaling).

    Source: [FX], [PF] and Chen et al. (PyXAB ``Garland``). The local
    maxima are the cusps ``x = k pi / 60`` where ``sin 60x = 0``; the global one is ``x* = pi/6``
    with ``f* = 4 (pi/6)(1 - pi/6) = 0.9977723912`` (closed form, computed from the formula); the
    runner-up is ``3 pi / 20`` (0.996691). Values lie in [0, f*] already, so no normalisation is
    applied; regret uses this exact f* (PyXAB's ``fmax = 1`` is only approximate). Near x*,
    ``f* - f ~ 1.94 sqrt|x - x*|``.
    """

    name = "garland"

    def __init__(self) -> None:
        x_star = math.pi / 6.0
        super().__init__([[0.0, 1.0]], 4.0 * x_star * (1.0 - x_star), [[x_star]])

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        x = X[:, 0]
        return x * (1.0 - x) * (4.0 - np.sqrt(np.abs(np.sin(60.0 * x))))


# --------------------------------------------------------------------------------------------
# DoubleSine


class DoubleSine(SyntheticObjective):
    """DoubleSine of the POO paper in PyXAB's form, on [0, 1].

    Source: PyXAB ``DoubleSine(rho1=0.3, rho2=0.8, tmax=0.5)`` (the version printed in [FX]
    App. E.2 is garbled)::

        u = |2x - 1|, e_k = -log2(rho_k), s(z) = (sin(2 pi z) + 1) / 2
        f(x) = s(log2(u) / 2) (u^e2 - u^e1) - u^e2,    f(0.5) = 0

    Raw values oscillate between ``-u^e2`` and ``-u^e1`` and lie in [-1, 0]: the maximum 0 is at
    x = 0.5 only (``f <= -u^e1 < 0`` elsewhere), the minimum -1 at x = 0 and x = 1. By default the
    function is normalised to [0, 1] as ``f + 1``, so ``f* = 1``; pass
    ``normalized=False`` for the raw values (``f* = 0``).
    """

    name = "doublesine"

    def __init__(self, normalized: bool = True) -> None:
        self.normalized = check_bool("objective.normalized", normalized)
        self.rho1, self.rho2, self.center = 0.3, 0.8, 0.5
        self._e1 = -math.log2(self.rho1)
        self._e2 = -math.log2(self.rho2)
        super().__init__([[0.0, 1.0]], 1.0 if self.normalized else 0.0, [[self.center]])

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        u = np.abs(2.0 * (X[:, 0] - self.center))
        pos = u > 0.0
        us = np.where(pos, u, 1.0)  # placeholder where u == 0, overwritten below
        s = (np.sin(2.0 * np.pi * (0.5 * np.log2(us))) + 1.0) / 2.0
        raw = np.where(pos, s * (us**self._e2 - us**self._e1) - us**self._e2, 0.0)
        return raw + 1.0 if self.normalized else raw


# --------------------------------------------------------------------------------------------
# Himmelblau

# Approximate locations (the textbook ones); polished to machine precision by Newton's method on
# the gradient.
_HIMMELBLAU_APPROX = (
    (3.0, 2.0),
    (-2.805118, 3.131312),
    (-3.779310, -3.283186),
    (3.584428, -1.848126),
)
_HIMMELBLAU_MIN = 890.0  # |f(5, 5)| = 19^2 + 23^2, the minimum on [-5, 5]^2


@cache
def _himmelblau_maximizers() -> tuple[tuple[float, float], ...]:
    def grad(p: np.ndarray) -> np.ndarray:
        x, y = p
        a = x * x + y - 11.0
        b = x + y * y - 7.0
        return np.array([4.0 * x * a + 2.0 * b, 2.0 * a + 4.0 * y * b])

    def hess(p: np.ndarray) -> np.ndarray:
        x, y = p
        return np.array(
            [
                [12.0 * x * x + 4.0 * y - 42.0, 4.0 * (x + y)],
                [4.0 * (x + y), 12.0 * y * y + 4.0 * x - 26.0],
            ]
        )

    out = []
    for p0 in _HIMMELBLAU_APPROX:
        sol = root(grad, np.array(p0), jac=hess, method="hybr", options={"xtol": 1e-15})
        out.append((float(sol.x[0]), float(sol.x[1])))
    return tuple(out)


class Himmelblau(SyntheticObjective):
    """Himmelblau, ``f = -(x1^2 + x2 - 11)^2 - (x1 + x2^2 - 7)^2`` on [-5, 5]^2 (maximised).

    Source: [PF] (PyXAB ``Himmelblau``). Raw values
    lie in [-890, 0] (minimum at (5, 5)); the four global maximisers (3, 2), (-2.805118, 3.131312),
    (-3.779310, -3.283186), (3.584428, -1.848126) all give 0 and are listed in ``maximizers``
    (refined to machine precision by Newton's method on the gradient). By default the function is
    normalised (as PF-PNE does) as ``1 + f / 890`` in [0, 1] with ``f* = 1``;
    ``normalized=False`` gives the raw values (``f* = 0``).
    """

    name = "himmelblau"

    def __init__(self, normalized: bool = True) -> None:
        self.normalized = check_bool("objective.normalized", normalized)
        super().__init__(
            [[-5.0, 5.0], [-5.0, 5.0]],
            1.0 if self.normalized else 0.0,
            _himmelblau_maximizers(),
        )

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        x1, x2 = X[:, 0], X[:, 1]
        raw = -((x1 * x1 + x2 - 11.0) ** 2) - (x1 + x2 * x2 - 7.0) ** 2
        return 1.0 + raw / _HIMMELBLAU_MIN if self.normalized else raw


# --------------------------------------------------------------------------------------------
# Rastrigin


def _rastrigin_terms(X: np.ndarray) -> np.ndarray:
    return -10.0 - X * X + 10.0 * np.cos(2.0 * np.pi * X)


@cache
def rastrigin_coordinate_bound() -> float:
    """``B = -min_{x in [-1, 1]} (-10 - x^2 + 10 cos 2 pi x)`` (about 20.2513, at |x| ~ 0.5025).

    Computed numerically (dense grid + golden-section polish, accurate far below 1e-9).
    """
    res = maximize_on_box(lambda X: -_rastrigin_terms(X[:, 0]), [[-1.0, 1.0]])
    return res.value


class Rastrigin(SyntheticObjective):
    """Rastrigin, ``f = sum_i (-10 - x_i^2 + 10 cos 2 pi x_i)`` on [-1, 1]^p (maximised).

    Source: [PF] (PyXAB ``Rastrigin``). ``f* = 0`` at x = 0. Each coordinate term has minimum ``-B``
    on [-1, 1], with ``B = rastrigin_coordinate_bound()`` (about 20.2513, computed numerically), so
    the raw range is [-B p, 0]. By default the function is normalised (fedxab's choice) as
    ``1 + f / (B p)``, exactly onto [0, 1] with ``f* = 1`` (PyXAB divides by ``20 p``, which
    overshoots to -1.0126); ``normalized=False`` gives the raw values (``f* = 0``). ``dim`` is p (10
    in PF-PNE).
    """

    name = "rastrigin"
    separable = True

    def __init__(self, dim: int = 10, normalized: bool = True) -> None:
        p = _check_dim(dim)
        self.normalized = check_bool("objective.normalized", normalized)
        self.bound = rastrigin_coordinate_bound() * p
        super().__init__([[-1.0, 1.0]] * p, 1.0 if self.normalized else 0.0, np.zeros((1, p)))

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        raw = np.sum(_rastrigin_terms(X), axis=1)
        return 1.0 + raw / self.bound if self.normalized else raw


# --------------------------------------------------------------------------------------------
# Ackley


def _ackley_raw(mean_sq: np.ndarray, mean_cos: np.ndarray) -> np.ndarray:
    return 20.0 * np.exp(-0.2 * np.sqrt(mean_sq)) + np.exp(mean_cos) - math.e - 20.0


#: PyXAB's normaliser |20 e^(-0.2 sqrt 0.5) + e^(-1) - 20 - e| = 4.987933 (a bound, not attained).
ACKLEY_PYXAB_BOUND = abs(20.0 * math.exp(-0.2 * math.sqrt(0.5)) + math.exp(-1.0) - 20.0 - math.e)


@cache
def ackley_minimum(dim: int) -> tuple[float, tuple[float, ...]]:
    """The minimum of the raw Ackley function on [-1, 1]^dim and a minimiser (numerical).

    The function depends on x only through ``a = mean x_i^2`` and ``c = mean cos 2 pi x_i`` and is
    even in each coordinate, so take x in [0, 1]^dim. At a minimiser every x_i is a first-order
    point of the same 1-D function ``g(x) = w_a x^2 + w_c cos 2 pi x`` on [0, 1] (w_a < 0 < w_c,
    the partial derivatives of the outer function). ``g`` decreases on [0, 1/2] and ``g'`` is
    concave on [1/2, 1] with ``g' < 0`` at both ends, so ``g`` has at most two local minima (an
    interior point and the end point 1) and at most two other first-order points (0 and a local
    maximum); by the second-order condition no two coordinates can sit at the same local maximum
    of ``g`` (moving them apart keeps a and c fixed to first order and lowers f). Hence the
    coordinates take at most three values: t1 (k of them), t2 (dim - 1 - k) and t3 (one). The
    minimum is found over every k and (t1, t2, t3) in [0, 1]^3 with :func:`maximize_on_box`.
    In 2-D it is -4.675205 at (+-0.5590, +-1) (not at the corners, where f = 20 e^-0.2 - 20).
    """
    if dim == 1:
        res = maximize_on_box(
            lambda X: -_ackley_raw(X[:, 0] ** 2, np.cos(2 * np.pi * X[:, 0])), [[0.0, 1.0]]
        )
        return -res.value, (float(res.x[0]),)
    best_val = math.inf
    best_x: tuple[float, ...] = ()
    for k in range(dim):
        n1, n2 = k, dim - 1 - k

        def neg(T: np.ndarray, n1: int = n1, n2: int = n2) -> np.ndarray:
            a = (n1 * T[:, 0] ** 2 + n2 * T[:, 1] ** 2 + T[:, 2] ** 2) / dim
            cos = np.cos(2.0 * np.pi * T)
            c = (n1 * cos[:, 0] + n2 * cos[:, 1] + cos[:, 2]) / dim
            return -_ackley_raw(a, c)

        res = maximize_on_box(neg, [[0.0, 1.0]] * 3, n_polish=8)
        if -res.value < best_val:
            t1, t2, t3 = (float(v) for v in res.x)
            best_val = -res.value
            best_x = (t1,) * n1 + (t2,) * n2 + (t3,)
    return float(best_val), best_x


class Ackley(SyntheticObjective):
    """Ackley on [-1, 1]^dim (maximised), in the dimension-normalised form::

        f(x) = 20 exp(-0.2 sqrt(mean_i x_i^2)) + exp(mean_i cos 2 pi x_i) - e - 20

    which for dim = 2 is the papers' ``20 exp(-0.2 sqrt(0.5 (x1^2 + x2^2))) +
    exp(0.5 (cos 2 pi x1 + cos 2 pi x2)) - e - 20`` (PyXAB ``Ackley``; domain [-1, 1]^2 as in PyXAB,
    the paper does not state it). ``f* = 0`` at x = 0 (a cone tip).

    Normalisation ``1 + f / B`` (``normalized=True``, default). With ``bound="exact"`` (default)
    B = |min of f on the domain|, computed numerically by :func:`ackley_minimum` (4.675205 for
    dim = 2, attained at (+-0.559, +-1)), so the normalised range is exactly [0, 1]. With
    ``bound="pyxab"`` B = PyXAB's 4.987933 = |20 e^(-0.2 sqrt 0.5) + e^(-1) - 20 - e|, which
    combines the worst value of each term at different points and is not attained (range
    [0.0627, 1] in 2-D). ``normalized=False`` gives the raw values (``f* = 0``).
    """

    name = "ackley"

    def __init__(self, dim: int = 2, normalized: bool = True, bound: str = "exact") -> None:
        p = _check_dim(dim)
        self.normalized = check_bool("objective.normalized", normalized)
        if bound not in ("exact", "pyxab"):
            raise ConfigError("objective.bound", f"must be 'exact' or 'pyxab', got {bound!r}")
        self.bound_kind = bound
        self.bound = -ackley_minimum(p)[0] if bound == "exact" else ACKLEY_PYXAB_BOUND
        super().__init__([[-1.0, 1.0]] * p, 1.0 if self.normalized else 0.0, np.zeros((1, p)))

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        raw = _ackley_raw(np.mean(X * X, axis=1), np.mean(np.cos(2.0 * np.pi * X), axis=1))
        return 1.0 + raw / self.bound if self.normalized else raw


# --------------------------------------------------------------------------------------------
# SineProduct


def _sine_product(x: np.ndarray) -> np.ndarray:
    return np.sin(13.0 * x) * np.sin(27.0 * x)


@cache
def _sine_product_argmax() -> float:
    """Maximiser of sin(13x) sin(27x) on [0, 1]: grid + golden polish, then the root of the
    derivative by Brent's method to ~1e-15 (the value alone cannot resolve x below ~1e-8)."""
    res = maximize_on_box(lambda X: _sine_product(X[:, 0]), [[0.0, 1.0]])
    x0 = float(res.x[0])

    def deriv(x: float) -> float:
        return 13.0 * math.cos(13.0 * x) * math.sin(27.0 * x) + 27.0 * math.sin(
            13.0 * x
        ) * math.cos(27.0 * x)

    a, b = max(0.0, x0 - 1e-4), min(1.0, x0 + 1e-4)
    if deriv(a) > 0.0 > deriv(b):
        return float(brentq(deriv, a, b, xtol=1e-15, rtol=1e-15))
    return x0


class SineProduct(SyntheticObjective):
    """The smooth multimodal 1-D function of Munos (2011) and Valko et al. (2013), on [0, 1].

    Source: test function 1 of Chen et al.'s parallel X-armed bandit paper.

    * standard (default): ``f(x) = (sin(13x) sin(27x) + 1) / 2``; ``f* = 0.9755991`` at
      ``x* = 0.8675262``, second local maximum 0.933836 at x ~ 0.39842;
    * ``printed=True``: the variant printed in the paper, ``(sin(13x) sin(27x) / 2 + 1) / 2``;
      ``f* = 0.7377996`` at the same x*.

    Both are increasing functions of ``sin(13x) sin(27x)``, so share x*, which is computed
    numerically (dense grid, golden-section polish, then the root of the derivative), never typed
    in. Values already lie in [0, 1]; no rescaling.
    """

    name = "sineproduct"

    def __init__(self, printed: bool = False) -> None:
        self.printed = check_bool("objective.printed", printed)
        x_star = _sine_product_argmax()
        super().__init__([[0.0, 1.0]], float(self._evaluate(np.array([[x_star]]))[0]), [[x_star]])

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        p = _sine_product(X[:, 0])
        return 0.5 * (0.5 * p + 1.0) if self.printed else 0.5 * (p + 1.0)
