"""Acquisition maximisation and the agent's own GP-TS step of FTS / DP-FTS-DE (Dai et al. 2021).

- :class:`AcquisitionMaximiser` finds ``argmax_x f(x)`` for a
  :class:`~fedxab.algorithms.rff.FeatureFunction` exactly as Dai, Low & Jaillet (2021), App. B.2.6,
  says: on a continuous box, the best of 1000 uniform points, then L-BFGS-B from 20 uniform random
  starting points (analytic gradients), keeping the best; on a discrete domain (the synthetic
  1000-point grid), enumeration. It serves both branches of Algo. 2: line 6 (own TS) and line 8
  (the piecewise server function).
- :func:`fit_se_hyperparameters` refits the agent's own GP by maximum marginal likelihood.
- :func:`own_ts_step` is Algo. 2 line 6, "x = argmax f_t^n(x), f_t^n from the agent's own GP
  posterior", with two samplers: ``"rff"`` (default, the practice of the authors' released code:
  fresh RFF features from the agent's fitted hyperparameters, ω ~ N(ν, λΣ⁻¹) with
  λ = max(1e-5, fitted noise variance), β = 1), and ``"exact"`` (a joint sample of the exact GP
  posterior on the candidate set, scaled by a user-given β).

Every draw comes from the ``numpy.random.Generator`` passed in; the order of draws is documented
on each function so that a restarted agent redraws the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize

from fedxab.algorithms.lbfgsb import minimize_box
from fedxab.algorithms.rff import (
    FeatureFunction,
    RandomFeatures,
    WeightPosterior,
    as_points,
    model_inputs,
    se_kernel,
)
from fedxab.domain import as_domain
from fedxab.errors import ConfigError
from fedxab.validation import check_choice, check_positive, check_positive_int

DEFAULT_CANDIDATES = 1000
"""Uniform random points evaluated first on a continuous domain (App. B.2.6)."""

DEFAULT_RESTARTS = 20
"""L-BFGS-B starting points on a continuous domain (App. B.2.6)."""

OWN_TS_SAMPLERS = ("rff", "exact")
"""Own-TS samplers; the first is the default."""

DEFAULT_OWN_FEATURES = 100
"""M_target, the number of fresh features of the "rff" own-TS sampler (the authors' code)."""

NOISE_FLOOR = 1e-5
"""Lower bound on the own GP's λ: λ = max(1e-5, fitted noise variance) (the authors' code)."""

_JITTERS = (1e-10, 1e-8, 1e-6, 1e-4)


@dataclass(frozen=True, eq=False)
class AcquisitionMaximiser:
    """Maximises a function in feature space over the domain (App. B.2.6).

    ``domain`` is a (D, 2) box, by default the normalised ``[0, 1]^D``. ``grid`` is a
    discrete domain (n, D) instead (the synthetic experiments' grid), maximised by
    enumeration; give one or the other. ``n_restarts = 0`` skips the L-BFGS-B refinement.
    """

    domain: np.ndarray | None = None
    grid: np.ndarray | None = None
    n_candidates: int = DEFAULT_CANDIDATES
    n_restarts: int = DEFAULT_RESTARTS

    def __post_init__(self) -> None:
        if self.domain is not None and self.grid is not None:
            raise ConfigError("grid", "give either grid (a discrete domain) or domain (a box)")
        if self.domain is not None:
            object.__setattr__(self, "domain", as_domain(self.domain))
        if self.grid is not None:
            grid = as_points(self.grid, field="grid")
            if grid.shape[0] < 1:
                raise ConfigError("grid", "must contain at least one point")
            grid.setflags(write=False)
            object.__setattr__(self, "grid", grid)
        check_positive_int("n_candidates", self.n_candidates)
        if (
            isinstance(self.n_restarts, bool)
            or not isinstance(self.n_restarts, int)
            or self.n_restarts < 0
        ):
            raise ConfigError("n_restarts", f"must be an integer >= 0, got {self.n_restarts!r}")

    def _box(self, dim: int) -> np.ndarray:
        """The (D, 2) box of a continuous domain of dimension ``dim``."""
        if self.domain is None:
            return np.tile([0.0, 1.0], (dim, 1))
        if self.domain.shape[0] != dim:
            raise ConfigError("domain", f"has dimension {self.domain.shape[0]}, expected {dim}")
        return self.domain

    def candidates(self, dim: int, rng: np.random.Generator) -> np.ndarray:
        """The candidate set: the grid, or ``n_candidates`` uniform points in the box.

        Draws ``n_candidates × D`` uniforms from ``rng`` on a continuous domain, nothing on a grid.
        """
        if self.grid is None:
            box = self._box(dim)
            return rng.uniform(box[:, 0], box[:, 1], size=(self.n_candidates, dim))
        if self.grid.shape[1] != dim:
            raise ConfigError("grid", f"has dimension {self.grid.shape[1]}, expected {dim}")
        return self.grid

    def argmax(self, f: FeatureFunction, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        """``(x, f(x))`` for the best point found (Algo. 2 lines 6 and 8).

        Continuous: the best candidate, then L-BFGS-B (box bounds, analytic gradient) from
        ``n_restarts`` uniform starting points; a refined point replaces the incumbent when its
        value is at least as high (as in the release). Draws the candidates, then the starting
        points. Discrete: the first grid point with the highest value.
        """
        dim = f.dim
        points = self.candidates(dim, rng)
        values = f(points)
        best = int(np.argmax(values))
        x_best, v_best = points[best].copy(), float(values[best])
        if self.grid is not None or self.n_restarts == 0:
            return x_best, v_best
        box = self._box(dim)
        lo, hi = box[:, 0], box[:, 1]

        def negated(x: np.ndarray) -> tuple[float, np.ndarray]:
            value, grad = f.value_and_grad(np.clip(x, lo, hi))
            return -value, -grad

        for start in rng.uniform(lo, hi, size=(self.n_restarts, dim)):
            x, value = minimize_box(negated, start, box)  # scipy's L-BFGS-B (lbfgsb.py)
            if -value >= v_best:
                x_best, v_best = np.clip(x, lo, hi), float(-value)
        return x_best, v_best


@dataclass(frozen=True)
class SEHyperparameters:
    """The agent's own GP hyperparameters for its own TS step.

    SE kernel with one shared lengthscale (not ARD), signal variance σ0² and noise variance. The
    defaults are the release's initial values, used until the first refit (the authors' code).
    """

    lengthscale: float = 1.0
    signal_variance: float = 0.1
    noise_variance: float = 1e-6

    def __post_init__(self) -> None:
        check_positive("lengthscale", self.lengthscale)
        check_positive("signal_variance", self.signal_variance)
        check_positive("noise_variance", self.noise_variance)


_LOG_BOUNDS = np.log([[1e-3, 10.0], [1e-4, 10.0], [1e-6, 1.0]])
"""Bounds of (lengthscale, signal variance, noise variance) searched by the fit (natural logs)."""


def _negative_log_marginal_likelihood(log_params: np.ndarray, sq_dist: np.ndarray, y: np.ndarray):
    ell, var, noise = np.exp(log_params)
    K = var * np.exp(-0.5 * sq_dist / ell**2) + noise * np.eye(len(y))
    try:
        chol = cho_factor(K, lower=True)
    except np.linalg.LinAlgError:
        return np.inf
    alpha = cho_solve(chol, y)
    return 0.5 * y @ alpha + np.log(np.diag(chol[0])).sum() + 0.5 * len(y) * np.log(2 * np.pi)


def fit_se_hyperparameters(
    X: np.ndarray,
    y: np.ndarray,
    rng: np.random.Generator,
    *,
    start: SEHyperparameters | None = None,
    restarts: int = 10,
) -> SEHyperparameters:
    """The SE hyperparameters maximising the GP's log marginal likelihood (type-II maximum
    likelihood, as the release's GPy ``optimize_restarts(10)``): L-BFGS-B in log space
    from ``start`` (default: the release's initial values) and ``restarts - 1`` starting points
    drawn uniformly in the log bounds (``3 (restarts - 1)`` uniforms from ``rng``)."""
    X = as_points(X)
    y = np.asarray(y, dtype=float)
    if y.shape != (X.shape[0],):
        raise ConfigError("y", f"must have shape ({X.shape[0]},), one value per row of X")
    start = start or SEHyperparameters()
    sq_dist = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=-1)
    first = np.log([start.lengthscale, start.signal_variance, start.noise_variance])
    starts = [np.clip(first, _LOG_BOUNDS[:, 0], _LOG_BOUNDS[:, 1])]
    starts += list(rng.uniform(_LOG_BOUNDS[:, 0], _LOG_BOUNDS[:, 1], size=(restarts - 1, 3)))
    best, best_value = starts[0], np.inf
    for x0 in starts:
        res = minimize(
            _negative_log_marginal_likelihood,
            x0,
            args=(sq_dist, y),
            method="L-BFGS-B",
            bounds=_LOG_BOUNDS,
        )
        if res.fun < best_value:
            best, best_value = res.x, float(res.fun)
    return SEHyperparameters(*(float(v) for v in np.exp(best)))


def rff_posterior_function(
    X: np.ndarray,
    y: np.ndarray,
    hyper: SEHyperparameters,
    rng: np.random.Generator,
    *,
    n_features: int = DEFAULT_OWN_FEATURES,
    noise_floor: float = NOISE_FLOOR,
    categories: tuple[int | None, ...] | None = None,
) -> FeatureFunction:
    """An approximate sample ``f_t^n(x) = φ_fresh(x)ᵀω`` of the agent's own GP posterior.

    Draws fresh features (``s_j`` then ``b_j``, :meth:`RandomFeatures.draw`) from the fitted
    lengthscale and signal variance, then ω ~ N(ν, λΣ⁻¹) with λ = max(noise_floor, noise
    variance) (eq. (2)); β = 1. Never the shared features: those serve only the vectors sent.
    ``categories``: the categorical coordinates, one-hot in the kernel (:func:`model_inputs`).
    """
    X = as_points(X)
    features = RandomFeatures.draw(
        X.shape[1],
        n_features,
        hyper.lengthscale,
        rng,
        signal_variance=hyper.signal_variance,
        categories=categories,
    )
    lam = max(check_positive("noise_floor", noise_floor), hyper.noise_variance)
    omega = WeightPosterior.fit(features(X), y, lam).sample(rng)
    return FeatureFunction(features, omega)


def exact_posterior_sample(
    X: np.ndarray,
    y: np.ndarray,
    points: np.ndarray,
    hyper: SEHyperparameters,
    rng: np.random.Generator,
    *,
    beta: float = 1.0,
    noise_floor: float = NOISE_FLOOR,
) -> np.ndarray:
    """A joint sample of ``GP(μ_t, β²σ_t²)`` at ``points`` (n, D), shape (n,) (Algo. 2 l. 6).

    ``μ_t(x) = k_t(x)ᵀ(K_t + λI)⁻¹y_t`` and
    ``σ_t²(x,x') = k(x,x') − k_t(x)ᵀ(K_t + λI)⁻¹k_t(x')``, with λ = max(noise_floor, noise
    variance). The posterior covariance on a dense candidate set is numerically low-rank, so it is
    factored with the smallest jitter (1e-10 … 1e-4 times σ0², added to the diagonal) that makes
    its Cholesky factorisation succeed. Draws n standard normals from ``rng``.
    """
    beta = check_positive("beta", beta)
    X = as_points(X)
    points = as_points(points, X.shape[1], "points")
    y = np.asarray(y, dtype=float)
    if y.shape != (X.shape[0],):
        raise ConfigError("y", f"must have shape ({X.shape[0]},), one value per row of X")
    lam = max(check_positive("noise_floor", noise_floor), hyper.noise_variance)
    ell, var = hyper.lengthscale, hyper.signal_variance
    cov = se_kernel(points, points, ell, var)
    mean = np.zeros(points.shape[0])
    if X.shape[0]:
        chol = cho_factor(se_kernel(X, X, ell, var) + lam * np.eye(X.shape[0]), lower=True)
        k_cross = se_kernel(X, points, ell, var)
        mean = k_cross.T @ cho_solve(chol, y)
        cov = cov - k_cross.T @ cho_solve(chol, k_cross)
    factor = _jittered_cholesky(cov, var)
    return mean + beta * (factor @ rng.standard_normal(points.shape[0]))


def _jittered_cholesky(cov: np.ndarray, scale: float) -> np.ndarray:
    """Lower L with ``LLᵀ = cov + j·scale·I`` for the smallest j in ``_JITTERS`` that works."""
    eye = np.eye(cov.shape[0])
    for jitter in _JITTERS[:-1]:
        try:
            return np.linalg.cholesky(cov + jitter * scale * eye)
        except np.linalg.LinAlgError:
            continue
    return np.linalg.cholesky(cov + _JITTERS[-1] * scale * eye)


def own_ts_step(
    X: np.ndarray,
    y: np.ndarray,
    hyper: SEHyperparameters,
    rng: np.random.Generator,
    maximiser: AcquisitionMaximiser,
    *,
    sampler: str = "rff",
    n_features: int = DEFAULT_OWN_FEATURES,
    beta: float = 1.0,
    noise_floor: float = NOISE_FLOOR,
    categories: tuple[int | None, ...] | None = None,
) -> np.ndarray:
    """The agent's own GP-TS query ``x_t^n = argmax_x f_t^n(x)``, whole domain (Algo. 2 line 6).

    ``sampler="rff"`` (default): :func:`rff_posterior_function` maximised by
    ``maximiser`` (draws: features, ω, candidates, starting points). ``sampler="exact"``:
    :func:`exact_posterior_sample` on ``maximiser``'s candidate set and its best candidate (draws:
    candidates, the sample); a joint sample exists only on a finite set, so there is no
    refinement — an option for discrete domains. ``beta`` (β_{t+1} of Algo. 2 line 6)
    scales only the exact sampler's posterior standard deviation; the practice value is 1.
    ``categories``: both samplers' kernel takes :func:`model_inputs` of the points.
    """
    check_choice("sampler", sampler, OWN_TS_SAMPLERS)
    X = as_points(X)
    if sampler == "rff":
        if beta != 1.0:
            raise ConfigError("beta", f"is used only by sampler='exact'; got beta={beta!r}")
        f = rff_posterior_function(
            X, y, hyper, rng, n_features=n_features, noise_floor=noise_floor, categories=categories
        )
        return maximiser.argmax(f, rng)[0]
    points = maximiser.candidates(X.shape[1], rng)
    values = exact_posterior_sample(
        model_inputs(X, categories),
        y,
        model_inputs(points, categories),
        hyper,
        rng,
        beta=beta,
        noise_floor=noise_floor,
    )
    return points[int(np.argmax(values))].copy()
