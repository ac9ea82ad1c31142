"""Grid objectives and Gaussian-process sample functions (Dai, Low & Jaillet 2021, App. B.1.1).

DP-FTS-DE's synthetic experiments (App. B.1.1) use functions defined on a 1-D
grid of G = 1000 equally spaced points on [0, 1], drawn from a GP with an SE kernel of lengthscale
0.03 and min-max normalised to [0, 1]. This module holds the two pieces:

* :class:`GridObjective`: a function given by its values on the grid ``linspace(0, 1, G)``;
  evaluating a point returns the value at the nearest grid point (vectorized). Its optimum value
  and maximisers are exact (the largest grid value and every grid point that attains it), and the
  grid itself is exposed (``grid``, shape (G, 1)) so that a BO algorithm can maximise an
  acquisition function by enumeration (as App. B.2.6 does on this grid).
* :class:`GPGrid` (registered as objective ``"gp-grid"``): one GP sample on the grid, the
  paper's ``f``. The covariance factor (Cholesky of ``K + jitter I``) is computed once
  per (G, lengthscale) and cached (:func:`gp_grid_factor`), so sampling for another seed or
  another client costs one matrix-vector product.

Randomness: a sample is ``L z`` with ``z`` standard normal from a :mod:`fedxab.seeding` stream;
the base function of a run uses ``stream(seed, "gp-family")`` (see
:func:`fedxab.objectives.families.gp_sample_family`, which builds the clients).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from fedxab.errors import ConfigError, ObjectiveError
from fedxab.objectives.base import Objective
from fedxab.seeding import stream

__all__ = [
    "GP_JITTER",
    "GPGrid",
    "GridObjective",
    "gp_grid_factor",
    "gp_grid_values",
    "minmax_normalize",
    "sample_gp_grid",
    "se_kernel",
    "unit_grid",
]

GP_JITTER = 1e-6
"""Jitter added to the diagonal of the grid covariance (kernel variance 1) before factorising
(fedxab's value; the paper only says a small jitter is added)."""

GP_FAMILY_ROLE = "gp-family"
"""Stream role of a run's base GP function: ``stream(seed, "gp-family")``."""


def _check_grid_size(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 2:
        raise ConfigError(field, f"must be an integer >= 2 (grid points), got {value!r}")
    return int(value)


def _check_lengthscale(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ConfigError(field, f"must be a number > 0, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ConfigError(field, f"must be a finite number > 0, got {value!r}")
    return v


def _check_seed(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ConfigError(field, f"must be a non-negative integer, got {value!r}")
    return int(value)


def unit_grid(grid_size: int) -> np.ndarray:
    """The G equally spaced points ``linspace(0, 1, G)`` of [0, 1], shape (G,)."""
    return np.linspace(0.0, 1.0, _check_grid_size(grid_size, "grid_size"))


def se_kernel(x: np.ndarray, y: np.ndarray, lengthscale: float) -> np.ndarray:
    """The squared-exponential kernel ``k(x, y) = exp(-|x - y|^2 / (2 l^2))`` (variance 1) between
    the 1-D points ``x`` (n,) and ``y`` (m,), as an (n, m) matrix."""
    diff = np.asarray(x, dtype=float)[:, None] - np.asarray(y, dtype=float)[None, :]
    return np.exp(-0.5 * (diff / float(lengthscale)) ** 2)


@lru_cache(maxsize=4)
def _factor(grid_size: int, lengthscale: float) -> np.ndarray:
    x = np.linspace(0.0, 1.0, grid_size)
    cov = se_kernel(x, x, lengthscale)
    cov[np.diag_indices_from(cov)] += GP_JITTER
    try:
        factor = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:  # pragma: no cover - K + jitter I is PD in practice
        w, v = np.linalg.eigh(cov)
        factor = v * np.sqrt(np.clip(w, 0.0, None))
    factor.setflags(write=False)
    return factor


def gp_grid_factor(grid_size: int = 1000, lengthscale: float = 0.03) -> np.ndarray:
    """A read-only (G, G) matrix ``L`` with ``L L^T = K + GP_JITTER I``, ``K`` the SE covariance
    of the grid (:func:`unit_grid`). Computed once per (G, lengthscale) and cached (the last 4
    pairs; 8 MB each for G = 1000): the Cholesky factor, or ``V sqrt(W)`` from an eigendecomposition
    if Cholesky fails."""
    g = _check_grid_size(grid_size, "grid_size")
    ell = _check_lengthscale(lengthscale, "lengthscale")
    return _factor(g, ell)


def sample_gp_grid(
    rng: np.random.Generator,
    grid_size: int = 1000,
    lengthscale: float = 0.03,
    size: int | None = None,
) -> np.ndarray:
    """Raw (unnormalised) draws of a zero-mean GP with SE kernel on the grid: ``L z``, ``z`` drawn
    from ``rng``. Shape (G,) if ``size`` is None, else (size, G)."""
    factor = gp_grid_factor(grid_size, lengthscale)
    g = factor.shape[0]
    if size is None:
        return factor @ rng.standard_normal(g)
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise ConfigError("size", f"must be a positive integer or None, got {size!r}")
    return (factor @ rng.standard_normal((g, int(size)))).T


def minmax_normalize(values: np.ndarray) -> np.ndarray:
    """``(v - min v) / (max v - min v)``: values mapped onto [0, 1] (App. B.1.1)."""
    v = np.asarray(values, dtype=float)
    lo, hi = float(v.min()), float(v.max())
    if not hi > lo:
        raise ObjectiveError(f"cannot min-max normalise constant values ({lo})")
    out = (v - lo) / (hi - lo)
    # exact end points, whatever the rounding of the division
    out[v == lo] = 0.0
    out[v == hi] = 1.0
    return out


def gp_grid_values(
    rng: np.random.Generator, grid_size: int = 1000, lengthscale: float = 0.03
) -> np.ndarray:
    """One GP sample on the grid, min-max normalised to [0, 1] (App. B.1.1)."""
    return minmax_normalize(sample_gp_grid(rng, grid_size, lengthscale))


def _freeze(arr: np.ndarray) -> np.ndarray:
    arr = np.array(arr, dtype=float)
    arr.setflags(write=False)
    return arr


class GridObjective(Objective):
    """A function on [0, 1] given by its ``values`` at the G points ``linspace(0, 1, G)``.

    Evaluating ``x`` returns the value at the nearest grid point, index ``rint(x (G - 1))``
    clipped to 0..G-1 (an exact midpoint goes to the even index, numpy's ``rint``; points outside
    [0, 1] go to the nearest end). This is how the paper's grid-defined synthetic
    functions are queried from a continuous domain. ``optimum_value`` is the largest grid value,
    ``maximizers`` every grid point attaining it (``maximizer`` the first), so regret is exact.

    Attributes: ``grid`` (G, 1) and ``values`` (G,), both read-only; ``grid_size`` G.
    """

    name = "grid"

    def __init__(self, values: Sequence[float] | np.ndarray, name: str | None = None) -> None:
        v = np.asarray(values, dtype=float)
        if v.ndim != 1 or v.shape[0] < 2:
            raise ObjectiveError(
                f"grid objective: values must be a 1-D array of >= 2 grid values, got {v.shape}"
            )
        if not np.all(np.isfinite(v)):
            raise ObjectiveError("grid objective: values must be finite")
        if name is not None:
            self.name = name
        self.values = _freeze(v)
        self.grid = _freeze(np.linspace(0.0, 1.0, v.shape[0]).reshape(-1, 1))
        top = float(v.max())
        self.maximizers = _freeze(self.grid[v == top])
        super().__init__([[0.0, 1.0]], top, self.maximizers[0])

    @property
    def grid_size(self) -> int:
        return int(self.values.shape[0])

    def index(self, X: np.ndarray) -> np.ndarray:
        """The nearest grid index of each row of ``X`` (shape (n, 1)), as int64 (n,)."""
        x = np.asarray(X, dtype=float).reshape(-1)
        g = self.values.shape[0]
        return np.clip(np.rint(x * (g - 1)), 0, g - 1).astype(np.int64)

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        return self.values[self.index(X)]


class GPGrid(GridObjective):
    """A function drawn from a GP with SE kernel on a 1-D grid, normalised to [0, 1].

    As in Dai, Low & Jaillet (2021), App. B.1.1: the joint multivariate-normal sample on the
    ``grid_size`` points of [0, 1] with ``GP_JITTER`` on the diagonal, min-max normalised. The
    sample is ``L z`` with ``z`` from ``stream(sample_seed, "gp-family")``.

    ``sample_seed`` fixes the function. In a federated run the client family is the source of
    truth (:func:`fedxab.run.assembly.make_family`): with ``sample_seed = None`` (default) the
    function of run ``seed`` is the draw of ``stream(seed, "gp-family")``, a new function per run
    (:meth:`for_seed`); with an integer every run uses that one function. An objective built on
    its own (``make_objective("gp-grid")``, no run seed) with ``sample_seed = None`` is the draw of
    seed 0, a stand-in that fixes the domain and grid.
    """

    name = "gp-grid"

    def __init__(
        self,
        lengthscale: float = 0.03,
        grid_size: int = 1000,
        sample_seed: int | None = None,
    ) -> None:
        self.lengthscale = _check_lengthscale(lengthscale, "objective.lengthscale")
        size = _check_grid_size(grid_size, "objective.grid_size")
        self.sample_seed = (
            None if sample_seed is None else _check_seed(sample_seed, "objective.sample_seed")
        )
        seed = 0 if self.sample_seed is None else self.sample_seed
        values = gp_grid_values(stream(seed, GP_FAMILY_ROLE), size, self.lengthscale)
        super().__init__(values)

    def for_seed(self, seed: int) -> GPGrid:
        """The function of run ``seed``: itself if ``sample_seed`` is set, else the draw of
        ``stream(seed, "gp-family")``."""
        if self.sample_seed is not None:
            return self
        return GPGrid(self.lengthscale, self.grid_size, _check_seed(seed, "seed"))

    def __repr__(self) -> str:
        return (
            f"GPGrid(lengthscale={self.lengthscale}, grid_size={self.grid_size}, "
            f"sample_seed={self.sample_seed}, optimum_value={self.optimum_value})"
        )
