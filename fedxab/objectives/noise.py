"""Observation noise models: the reward is ``r = f(x) + eps``, ``eps = model.sample(f(x), rng)``.

Noise is kept apart from objectives (which are noise-free) and draws from a caller's
:class:`numpy.random.Generator` (a stream of :mod:`fedxab.seeding`), so the same stream gives the
same noise. ``sample`` receives the noise-free values so that a truncation may depend on f(x).

Models ([FX] and [PF] assume zero-mean bounded noise, for which fedxab uses
``Uniform(-0.1, 0.1)`` by default; Chen et al.'s parallel paper uses "truncated zero-mean Gaussian
noise N(0, 1)" keeping rewards in [0, 1]):

* :class:`NoNoise` -- ``eps = 0``;
* :class:`UniformNoise` -- ``eps ~ U(-a, a)``;
* :class:`GaussianNoise` -- ``eps ~ N(0, sigma^2)``;
* :class:`TruncatedGaussianNoise` -- ``N(0, sigma^2)`` truncated three ways (``mode``):
  ``"symmetric"`` (default) conditions on ``|eps| <= b(x) = min(f, 1 - f)`` (zero mean and
  ``r`` in [0, 1]); ``"asymmetric"`` conditions on ``eps`` in ``[-f, 1 - f]`` (``r`` in [0, 1] but
  biased); ``"clip"`` returns ``clip(f + eps, 0, 1) - f`` (biased).

All sampling is vectorized; truncated normals use the inverse CDF (computed in log space, so
intervals deep in a tail are sampled correctly), never rejection loops.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from scipy.special import log_ndtr, ndtri_exp

from fedxab.errors import ConfigError, ObjectiveError
from fedxab.validation import check_nonnegative

__all__ = [
    "NOISE_MODELS",
    "GaussianNoise",
    "NoNoise",
    "NoiseModel",
    "TruncatedGaussianNoise",
    "UniformNoise",
    "make_noise",
]

_FIELD = "objective.noise"


def _as_values(fx: np.ndarray) -> np.ndarray:
    arr = np.asarray(fx, dtype=float)
    if not np.isfinite(arr).all():
        raise ObjectiveError(f"noise: the noise-free values f(x) must be finite, got {arr!r}")
    return arr


class NoiseModel:
    """Base class. :meth:`sample` returns the noise to ADD to the noise-free values ``fx``."""

    name: str = "noise"

    def sample(self, fx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noise of the same shape as ``fx`` (the noise-free values), drawn from ``rng``."""
        raise NotImplementedError

    @property
    def params(self) -> dict[str, Any]:
        """The constructor parameters (for logging and reproducing a run)."""
        return {}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


class NoNoise(NoiseModel):
    """No noise: ``eps = 0``."""

    name = "none"

    def sample(self, fx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.zeros_like(_as_values(fx))


class UniformNoise(NoiseModel):
    """``eps ~ U(-a, a)`` i.i.d.; default ``a = 0.1`` (fedxab's choice; [FX] and [PF] do not
    give the noise)."""

    name = "uniform"

    def __init__(self, half_width: float = 0.1) -> None:
        self.half_width = check_nonnegative(f"{_FIELD}.half_width", half_width)

    @property
    def params(self) -> dict[str, Any]:
        return {"half_width": self.half_width}

    def sample(self, fx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        arr = _as_values(fx)
        a = self.half_width
        return rng.uniform(-a, a, size=arr.shape) if a > 0 else np.zeros_like(arr)


class GaussianNoise(NoiseModel):
    """``eps ~ N(0, sigma^2)`` i.i.d. (unbounded)."""

    name = "gaussian"

    def __init__(self, sigma: float) -> None:
        self.sigma = check_nonnegative(f"{_FIELD}.sigma", sigma)

    @property
    def params(self) -> dict[str, Any]:
        return {"sigma": self.sigma}

    def sample(self, fx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        arr = _as_values(fx)
        return rng.normal(0.0, self.sigma, size=arr.shape) if self.sigma > 0 else np.zeros_like(arr)


def _truncated_standard_normal(lo: np.ndarray, hi: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws of N(0, 1) conditioned on [lo, hi] (lo <= hi), for uniforms ``u``.

    Intervals with ``lo > 0`` are reflected to the lower tail, so every interval has
    ``lo <= 0`` or lies in the lower tail, where ``p = u Phi(hi) + (1 - u) Phi(lo)`` is computed
    in log space: ``log p = log Phi(hi) + log(u + (1 - u) exp(log Phi(lo) - log Phi(hi)))``.
    """
    flip = lo > 0.0
    a = np.where(flip, -hi, lo)
    b = np.where(flip, -lo, hi)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        la = log_ndtr(a)
        lb = log_ndtr(b)
        ratio = np.exp(la - lb)  # Phi(a) / Phi(b) in [0, 1]
        logp = lb + np.log(u + (1.0 - u) * ratio)
        z = ndtri_exp(logp)
    z = np.where(np.isfinite(z), z, a)
    z = np.clip(z, a, b)
    z = np.where(b > a, z, a)
    return np.where(flip, -z, z)


class TruncatedGaussianNoise(NoiseModel):
    """Gaussian noise ``N(0, sigma^2)`` truncated so that rewards stay in [0, 1].

    Chen et al.'s parallel paper says "truncated zero-mean Gaussian noise N(0, 1)" without saying
    how; fedxab offers three readings. ``mode``:

    * ``"symmetric"`` (default): conditioned on ``|eps| <= b(x) = min(f(x), 1 - f(x))``, which
      keeps both zero mean and ``r = f + eps`` in [0, 1]; the noise vanishes as f nears 0 or 1
      (``b ~ 0.0022`` at the Garland maximum). Where ``b <= 0`` (f outside (0, 1)) eps = 0.
    * ``"asymmetric"``: conditioned on ``eps`` in ``[-f(x), 1 - f(x)]``: ``r`` in [0, 1] but
      ``E[r | x] ~ 0.5 + (f - 0.5) / 12`` for sigma = 1 (biased, compressed).
    * ``"clip"``: ``eps' = clip(f + eps, 0, 1) - f`` with ``eps ~ N(0, sigma^2)`` (biased).
    """

    name = "truncated_gaussian"
    MODES = ("symmetric", "asymmetric", "clip")

    def __init__(self, sigma: float = 1.0, mode: str = "symmetric") -> None:
        self.sigma = check_nonnegative(f"{_FIELD}.sigma", sigma)
        if mode not in self.MODES:
            raise ConfigError(
                f"{_FIELD}.mode", f"unknown mode {mode!r}; allowed: {', '.join(self.MODES)}"
            )
        self.mode = mode

    @property
    def params(self) -> dict[str, Any]:
        return {"sigma": self.sigma, "mode": self.mode}

    def sample(self, fx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        f = _as_values(fx)
        if self.mode == "clip":
            eps = rng.normal(0.0, self.sigma, size=f.shape) if self.sigma > 0 else 0.0
            return np.clip(f + eps, 0.0, 1.0) - f
        if self.mode == "symmetric":
            b = np.maximum(np.minimum(f, 1.0 - f), 0.0)
            lo, hi = -b, b
        else:
            lo, hi = -f, 1.0 - f
        u = rng.random(size=f.shape)
        if self.sigma == 0.0:
            return np.clip(np.zeros_like(f), lo, hi)
        z = _truncated_standard_normal(lo / self.sigma, hi / self.sigma, u)
        return np.clip(self.sigma * z, lo, hi)


NOISE_MODELS: dict[str, type[NoiseModel]] = {
    "none": NoNoise,
    "uniform": UniformNoise,
    "gaussian": GaussianNoise,
    "truncated_gaussian": TruncatedGaussianNoise,
}


def make_noise(name: str, **params: Any) -> NoiseModel:
    """Build the noise model ``name`` ("none", "uniform", "gaussian", "truncated_gaussian").

    Unknown names and parameters raise :class:`ConfigError` (field ``objective.noise.name`` or
    ``objective.noise.<param>``) listing what is allowed; a missing required parameter names it.
    """
    key = name.strip().lower() if isinstance(name, str) else name
    cls = NOISE_MODELS.get(key)
    if cls is None:
        raise ConfigError(
            f"{_FIELD}.name",
            f"unknown noise model {name!r}; allowed: {', '.join(NOISE_MODELS)}",
        )
    sig = inspect.signature(cls)
    allowed = [
        p.name
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    for param in params:
        if param not in allowed:
            raise ConfigError(
                f"{_FIELD}.{param}",
                f"not a parameter of noise model {key!r}; allowed: {', '.join(allowed) or 'none'}",
            )
    for param in allowed:
        if sig.parameters[param].default is inspect.Parameter.empty and param not in params:
            raise ConfigError(f"{_FIELD}.{param}", f"required by noise model {key!r}")
    return cls(**params)
