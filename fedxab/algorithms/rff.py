"""Random Fourier features and the RFF weight posterior of FTS / DP-FTS-DE (Dai et al. 2021).

The building blocks every FTS-family agent uses (Dai, Low & Jaillet 2021):

- :func:`model_inputs`, the kernel's input ``z(x)`` of a point of the encoded box: a categorical
  coordinate becomes its choice's one-hot vector scaled by ``1/√2``, so two different choices are
  at distance 1 whatever their indices, and kernel value ``σ0² exp(−1/(2l²))`` apart (other
  coordinates equal); every other coordinate is its own input;
- :func:`se_kernel`, the squared-exponential kernel ``k(x,x') = σ0² exp(−‖x−x'‖²/(2l²))``;
- :class:`RandomFeatures`, the feature map ``φ: X → ℝ^M`` with ``k(x,x') ≈ φ(x)ᵀφ(x')``. The
  shared map is derived from ``(seed, role)`` by :meth:`RandomFeatures.from_seed`, so every agent
  and the server rebuild exactly the same ``(s_j, b_j)`` without exchanging them;
- :class:`WeightPosterior`, the Bayesian linear model in feature space: ``Σ_t = Φ_tᵀΦ_t + λI``,
  ``ν_t = Σ_t⁻¹Φ_tᵀy_t`` and the sampler ``ω ~ N(ν_t, λΣ_t⁻¹)`` (paper eq. (2)) that
  produces the vector an agent sends (Algo. 2 line 10);
- :class:`FeatureFunction`, a function given by weights in feature space: ``φ(x)ᵀω`` (a sampled
  function, or a server vector, which is a weighted combination ``Σ_n φ_n ω_n`` of agents'
  vectors), or the piecewise ``g(x) = φ(x)ᵀω^(i[x])`` of the federated branch (Algo. 2 line 8).

Nothing here draws from a hidden generator: :meth:`RandomFeatures.from_seed` derives its stream
through :func:`fedxab.seeding.stream`, everything else takes a ``numpy.random.Generator``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.linalg import qr, solve_triangular

from fedxab.errors import ConfigError, InvalidRewardError
from fedxab.seeding import stream
from fedxab.validation import check_positive, check_positive_int

DEFAULT_NOISE_VARIANCE = 1e-6
"""Default λ: the practice value, the shared features' noise variance (the authors' code)."""

SHARED_ROLE = "rff"
"""Stream role of the shared feature draw (the run seed and this role fix ``(s_j, b_j)``)."""


def theory_regulariser(horizon: int) -> float:
    """The regulariser of the analysis, ``λ = 1 + 2/T`` (Dai, Low & Jaillet 2021)."""
    return 1.0 + 2.0 / check_positive_int("horizon", horizon)


def as_points(X: np.ndarray, dim: int | None = None, field: str = "X") -> np.ndarray:
    """``X`` as a finite float array of shape (n, ``dim``) (any D >= 1 when ``dim`` is None).

    Raises ConfigError naming ``field`` otherwise.
    """
    arr = np.asarray(X, dtype=float)
    if arr.ndim != 2 or arr.shape[1] < 1 or (dim is not None and arr.shape[1] != dim):
        shape = f"(n, {'D' if dim is None else dim})"
        raise ConfigError(field, f"must have shape {shape}, one point per row; got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ConfigError(field, "must contain finite numbers only (found NaN or inf)")
    return arr


CATEGORY_SCALE = 1.0 / math.sqrt(2.0)
"""The one-hot vectors' scale: ``‖c·e_i − c·e_j‖ = c·√2 = 1`` for two different choices i ≠ j."""


def check_categories(
    dim: int, categories: Sequence[int | None] | None
) -> tuple[int | None, ...] | None:
    """``categories`` as a tuple of ``dim`` entries (a categorical coordinate's number of
    choices, None for any other coordinate), or None when no coordinate is categorical."""
    if categories is None:
        return None
    cats = tuple(categories)
    if len(cats) != dim or any(
        n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1) for n in cats
    ):
        raise ConfigError(
            "categories",
            f"must list {dim} entries, a categorical coordinate's number of choices (>= 1) or "
            f"None; got {categories!r}",
        )
    return cats if any(n is not None for n in cats) else None


def input_dim(dim: int, categories: tuple[int | None, ...] | None) -> int:
    """The length of :func:`model_inputs`' rows: ``dim`` plus ``n − 1`` per categorical."""
    return dim if categories is None else sum(1 if n is None else n for n in categories)


def model_inputs(X: np.ndarray, categories: tuple[int | None, ...] | None) -> np.ndarray:
    """The kernel's inputs ``Z`` (n, :func:`input_dim`) of points X (n, D) of the encoded box.

    A coordinate with ``categories[j] = n`` is a categorical whose choice k owns the cell
    ``[k/n, (k+1)/n)`` (:mod:`fedxab.space`); it becomes ``e_k / √2`` (n entries), so the SE
    kernel between two different choices is ``σ0² exp(−1/(2l²))`` times the other coordinates'
    factor, the same for every pair. Other coordinates are copied. ``categories`` None: X itself.
    """
    if categories is None:
        return X
    columns = []
    for j, n in enumerate(categories):
        if n is None:
            columns.append(X[:, j : j + 1])
            continue
        edges = np.linspace(0.0, 1.0, n + 1)  # the space's cells: decode's rule exactly
        k = np.clip(np.searchsorted(edges, X[:, j], side="right") - 1, 0, n - 1)
        columns.append(CATEGORY_SCALE * (k[:, None] == np.arange(n)))
    return np.hstack(columns)


def se_kernel(
    X: np.ndarray, Y: np.ndarray, lengthscale: float, signal_variance: float = 1.0
) -> np.ndarray:
    """The SE Gram matrix ``[σ0² exp(−‖x−y‖²/(2l²))]`` between the rows of X and Y."""
    sq = np.sum(X**2, axis=1)[:, None] + np.sum(Y**2, axis=1)[None, :] - 2.0 * X @ Y.T
    return signal_variance * np.exp(-np.maximum(sq, 0.0) / (2.0 * lengthscale**2))


@dataclass(frozen=True, eq=False)
class RandomFeatures:
    """The RFF map ``φ`` of the SE kernel (Rahimi & Recht 2007, as FTS uses it).

    ``spectral`` holds the frequencies ``s_j ~ N(0, l⁻²I_D)`` as rows (M, D), ``phase`` the offsets
    ``b_j ~ U[0, 2π]`` (M,). Then ``φ(x) = sqrt(2σ0²/M)·[cos(s_jᵀx + b_j)]_j`` and
    ``k(x,x') ≈ φ(x)ᵀφ(x')``. With ``normalize=True`` (the default, as in the authors' code) each
    feature vector is rescaled to norm ``sqrt(σ0²)``, so ``‖φ(x)‖² = σ0²`` exactly, as the proof's
    step (20)(a) assumes; ``normalize=False`` gives the plain Rahimi–Recht map.

    ``categories`` (:func:`check_categories`): the map takes points x of the encoded box (D,)
    and applies the kernel to ``z = model_inputs(x)``, so ``spectral`` has
    :func:`input_dim` columns; None: z = x.
    """

    spectral: np.ndarray
    phase: np.ndarray
    signal_variance: float = 1.0
    normalize: bool = True
    categories: tuple[int | None, ...] | None = None

    def __post_init__(self) -> None:
        spectral = np.array(self.spectral, dtype=float)
        phase = np.array(self.phase, dtype=float)
        if spectral.ndim != 2 or spectral.shape[0] < 1 or spectral.shape[1] < 1:
            raise ConfigError(
                "spectral", f"must have shape (n_features, dim), got {spectral.shape}"
            )
        if phase.shape != (spectral.shape[0],):
            raise ConfigError(
                "phase",
                f"must have shape ({spectral.shape[0]},) to match spectral, got {phase.shape}",
            )
        if not (np.all(np.isfinite(spectral)) and np.all(np.isfinite(phase))):
            raise ConfigError("spectral", "frequencies and phases must be finite")
        if self.categories is not None:
            cats = check_categories(len(self.categories), self.categories)
            inputs = input_dim(len(self.categories), cats)
            if inputs != spectral.shape[1]:
                raise ConfigError(
                    "categories", f"give {inputs} kernel inputs, spectral has {spectral.shape[1]}"
                )
            object.__setattr__(self, "categories", cats)
        spectral.setflags(write=False)
        phase.setflags(write=False)
        object.__setattr__(self, "spectral", spectral)
        object.__setattr__(self, "phase", phase)
        object.__setattr__(
            self, "signal_variance", check_positive("signal_variance", self.signal_variance)
        )

    @classmethod
    def draw(
        cls,
        dim: int,
        n_features: int,
        lengthscale: float,
        rng: np.random.Generator,
        *,
        signal_variance: float = 1.0,
        normalize: bool = True,
        categories: tuple[int | None, ...] | None = None,
    ) -> RandomFeatures:
        """Draw ``s_j ~ N(0, l⁻²I)`` (one entry per kernel input, :func:`input_dim`) then
        ``b_j ~ U[0, 2π]``, j = 1..M, from ``rng``."""
        dim = check_positive_int("dim", dim)
        n_features = check_positive_int("n_features", n_features)
        lengthscale = check_positive("lengthscale", lengthscale)
        cats = check_categories(dim, categories)
        spectral = rng.standard_normal((n_features, input_dim(dim, cats))) / lengthscale
        phase = rng.uniform(0.0, 2.0 * math.pi, n_features)
        return cls(spectral, phase, signal_variance, normalize, cats)

    @classmethod
    def from_seed(
        cls,
        dim: int,
        n_features: int,
        lengthscale: float,
        seed: int,
        *,
        role: str = SHARED_ROLE,
        signal_variance: float = 1.0,
        normalize: bool = True,
        categories: tuple[int | None, ...] | None = None,
    ) -> RandomFeatures:
        """The shared map of a run: :meth:`draw` from the stream ``(seed, role)``.

        Every party that calls this with the same arguments (``categories`` comes from the shared
        search space) gets identical features, which the
        server's coordinate-wise averaging of ω vectors requires. Spec values: M = 100, l = 0.01,
        σ0² = 1 (real-world); M = 50, l = 0.03 (synthetic).
        """
        return cls.draw(
            dim,
            n_features,
            lengthscale,
            stream(seed, role),
            signal_variance=signal_variance,
            normalize=normalize,
            categories=categories,
        )

    @property
    def n_features(self) -> int:
        """M, the number of features."""
        return int(self.spectral.shape[0])

    @property
    def dim(self) -> int:
        """D, the dimension of the points (the encoded box's)."""
        return len(self.categories) if self.categories else int(self.spectral.shape[1])

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """``Φ``, the (n, M) matrix whose rows are ``φ(x)ᵀ`` for the rows x of X (n, D).

        Computed in one (n, M) array, in place: an own-TS step evaluates fresh features on the
        whole grid, and each temporary of that size costs about as much as the arithmetic. With
        D = 1 the products ``x·s_j`` are plain products (a matrix product of inner dimension 1
        rounds each the same way), so the values are those of ``cos(X Sᵀ + b)`` exactly."""
        return self._features(model_inputs(as_points(X, self.dim), self.categories))

    def _features(self, Z: np.ndarray) -> np.ndarray:
        """``Φ`` (n, M) of the kernel inputs Z (n, :func:`input_dim`)."""
        arg = Z * self.spectral.T if self.spectral.shape[1] == 1 else Z @ self.spectral.T
        arg += self.phase
        features = np.cos(arg, out=arg)
        if self.normalize:
            norms = np.linalg.norm(features, axis=1, keepdims=True)
            features *= math.sqrt(self.signal_variance)
            features /= norms
        else:
            features *= math.sqrt(2.0 * self.signal_variance / self.n_features)
        return features

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        """``∂φ/∂x`` at one point x (D,), shape (M, D); used for the L-BFGS-B refinement.
        A categorical coordinate's column is 0: φ is constant inside each choice's cell."""
        x = np.asarray(x, dtype=float)
        return self._jacobian(model_inputs(x[None], self.categories)[0])

    def at(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``φ(x)`` (M,) and ``∂φ/∂x`` (M, D) at one point x (D,) of the box, checked as by
        :func:`as_points`: the values of ``self(x[None])[0]`` and ``self.jacobian(x)`` exactly
        (the same operations), with the kernel input ``z(x)`` computed once. One L-BFGS-B step
        of the acquisition's refinement costs one call."""
        Z = model_inputs(as_points(np.reshape(x, (1, -1)), self.dim, "x"), self.categories)
        return self._features(Z)[0], self._jacobian(Z[0])

    @functools.cached_property
    def _input_spectral(self) -> np.ndarray:
        """``∂(s_jᵀz(x))/∂x`` (M, D): the frequencies of each coordinate's own input, zero for a
        categorical coordinate (the identity maps z to x on the other coordinates)."""
        if self.categories is None:
            return self.spectral
        spectral = np.zeros((self.n_features, self.dim))
        start = 0
        for j, n in enumerate(self.categories):
            if n is None:
                spectral[:, j] = self.spectral[:, start]
            start += 1 if n is None else n
        spectral.setflags(write=False)
        return spectral

    def _jacobian(self, z: np.ndarray) -> np.ndarray:
        """``∂φ/∂x`` (M, D) at the point whose kernel input is z (:func:`input_dim`,)."""
        arg = self.spectral @ z + self.phase
        cos, sin = np.cos(arg), np.sin(arg)
        d_cos = -sin[:, None] * self._input_spectral  # ∂cos(s_jᵀz(x) + b_j)/∂x, (M, D)
        if not self.normalize:
            return math.sqrt(2.0 * self.signal_variance / self.n_features) * d_cos
        norm = math.sqrt(cos.dot(cos))  # ‖u‖, as numpy.linalg.norm computes it
        # φ = σ0 u/‖u‖ with u = cos(·): ∂φ = σ0 (I/‖u‖ − u uᵀ/‖u‖³) ∂u
        return math.sqrt(self.signal_variance) * (
            d_cos / norm - cos[:, None] * (cos @ d_cos) / norm**3
        )


@dataclass(frozen=True, eq=False)
class WeightPosterior:
    """The posterior ``N(ν_t, λΣ_t⁻¹)`` of the RFF weight vector ω (paper eq. (2)).

    ``factor`` is an upper-triangular R with ``RᵀR = Σ_t = Φ_tᵀΦ_t + λI`` (a Cholesky factor of
    Σ_t), obtained from the QR decomposition of ``[Φ_t; sqrt(λ)I]`` so that ``Φ_tᵀΦ_t`` is never
    formed: with λ = 1e-6 squaring Φ_t would square its condition number. Σ_t is positive
    definite for every λ > 0, so the factorisation cannot fail and the release's fallback
    (ω uniform on [−0.5, 0.5]^M on a linear-algebra error, in the authors' code) is not needed:
    fedxab samples through a Cholesky factor.
    """

    mean: np.ndarray
    factor: np.ndarray
    noise_variance: float

    @classmethod
    def fit(
        cls, Phi: np.ndarray, y: np.ndarray, noise_variance: float = DEFAULT_NOISE_VARIANCE
    ) -> WeightPosterior:
        """The posterior from features ``Φ_t`` (t, M) and observations ``y_t`` (t,).

        ``noise_variance`` is λ; the default is the practice value, and
        :func:`theory_regulariser` gives the analysis' ``1 + 2/T``. With no observations (t = 0)
        this is the prior ``N(0, I)``.
        """
        lam = check_positive("noise_variance", noise_variance)
        Phi = np.asarray(Phi, dtype=float)
        if Phi.ndim != 2 or Phi.shape[1] < 1:
            raise ConfigError("Phi", f"must have shape (t, n_features), got {Phi.shape}")
        if not np.all(np.isfinite(Phi)):
            raise ConfigError("Phi", "must contain finite numbers only (found NaN or inf)")
        y = np.asarray(y, dtype=float)
        if y.shape != (Phi.shape[0],):
            raise ConfigError(
                "y", f"must have shape ({Phi.shape[0]},), one value per row of Phi; got {y.shape}"
            )
        if not np.all(np.isfinite(y)):
            bad = int(np.nonzero(~np.isfinite(y))[0][0])
            raise InvalidRewardError(f"y[{bad}] = {y[bad]} is not finite; rewards must be finite")
        m = Phi.shape[1]
        stacked = np.vstack([Phi, math.sqrt(lam) * np.eye(m)])
        q, r = qr(stacked, mode="economic")
        mean = solve_triangular(r, q[: Phi.shape[0]].T @ y)  # ν_t = Σ_t⁻¹Φ_tᵀy_t
        mean.setflags(write=False)
        r.setflags(write=False)
        return cls(mean, r, lam)

    @property
    def covariance(self) -> np.ndarray:
        """``λΣ_t⁻¹`` (M, M)."""
        r_inv = solve_triangular(self.factor, np.eye(self.factor.shape[0]))
        return self.noise_variance * (r_inv @ r_inv.T)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        """ω ~ N(ν_t, λΣ_t⁻¹): one vector (M,), or ``size`` vectors (size, M).

        ``ω = ν_t + sqrt(λ) R⁻¹z`` with z ~ N(0, I_M): its covariance is ``λ(RᵀR)⁻¹ = λΣ_t⁻¹``.
        Draws exactly M standard normals per vector from ``rng``.
        """
        m = self.mean.shape[0]
        z = rng.standard_normal(m if size is None else (check_positive_int("size", size), m))
        noise = solve_triangular(self.factor, z.T).T
        return self.mean + math.sqrt(self.noise_variance) * noise


@dataclass(frozen=True, eq=False)
class FeatureFunction:
    """A function given by weights in feature space, ``f(x) = φ(x)ᵀω`` (eq. (2)).

    ``weights`` of shape (M,) is one vector: a sampled ω (Algo. 2 line 6 in the RFF practice)
    or a server vector. A weighted combination of vectors is again one vector,
    ``Σ_n φ_n ω_n``, and by linearity its function is ``Σ_n φ_n φ(x)ᵀω_n``.

    ``weights`` of shape (P, M) with ``region_of`` is the federated branch's piecewise function
    ``g(x) = φ(x)ᵀω^(i[x])`` (Algo. 2 line 8): ``region_of`` maps points (n, D) to
    their sub-region indices i[x] in [0, P) (see :mod:`fedxab.algorithms.subregions`).
    """

    features: RandomFeatures
    weights: np.ndarray
    region_of: Callable[[np.ndarray], np.ndarray] | None = None

    def __post_init__(self) -> None:
        w = np.array(self.weights, dtype=float)
        m = self.features.n_features
        if w.ndim not in (1, 2) or w.shape[-1] != m:
            raise ConfigError(
                "weights", f"must have shape ({m},) or (P, {m}) for M = {m}; got {w.shape}"
            )
        if w.ndim == 2 and self.region_of is None:
            raise ConfigError(
                "region_of", "is required with one weight vector per sub-region (P, M)"
            )
        if w.ndim == 1 and self.region_of is not None:
            raise ConfigError("region_of", "needs weights of shape (P, M), one row per sub-region")
        if not np.all(np.isfinite(w)):
            raise ConfigError("weights", "must contain finite numbers only (found NaN or inf)")
        w.setflags(write=False)
        object.__setattr__(self, "weights", w)

    @property
    def dim(self) -> int:
        """D, the input dimension."""
        return self.features.dim

    def _rows(self, X: np.ndarray) -> np.ndarray:
        """The weight vector that applies at each row of X: (M,) or (n, M)."""
        if self.region_of is None:
            return self.weights
        regions = np.asarray(self.region_of(X))
        n_regions = self.weights.shape[0]
        if (
            regions.shape != (X.shape[0],)
            or not np.issubdtype(regions.dtype, np.integer)
            or (regions.size and (regions.min() < 0 or regions.max() >= n_regions))
        ):
            raise ConfigError(
                "region_of",
                f"must map (n, D) points to n integer sub-region indices in [0, {n_regions})",
            )
        return self.weights[regions]

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """``f`` at the rows of X (n, D), shape (n,)."""
        X = as_points(X, self.dim)
        Phi = self.features(X)
        w = self._rows(X)
        return Phi @ w if w.ndim == 1 else np.einsum("nm,nm->n", Phi, w)

    def value_and_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """``f(x)`` and ``∇f(x)`` at one point x (D,); piecewise: the gradient of x's piece."""
        phi, jacobian = self.features.at(x)
        w = self._rows(np.reshape(np.asarray(x, dtype=float), (1, -1)))
        w = w if w.ndim == 1 else w[0]
        return float(phi @ w), jacobian.T @ w
