"""Noise models: seeded statistical checks (stated tolerances), truncation, validation.

Spec: spec-fedpne-pfpne §7.2 / §8.2 (uniform noise) and spec-hct-poo-parallel §4.2 / C-8
(truncated Gaussian noise keeping rewards in [0, 1]).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtr

from fedxab.errors import ConfigError, ObjectiveError
from fedxab.objectives import (
    NOISE_MODELS,
    GaussianNoise,
    NoNoise,
    TruncatedGaussianNoise,
    UniformNoise,
    make_noise,
)

N = 20_000


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def phi(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def assert_mean_zero(eps: np.ndarray) -> None:
    """|mean| below 4 standard errors."""
    se = eps.std(ddof=1) / math.sqrt(eps.size)
    assert abs(eps.mean()) < 4 * se, (eps.mean(), se)


def test_no_noise() -> None:
    assert np.array_equal(NoNoise().sample(np.full(5, 0.3), rng()), np.zeros(5))


def test_uniform_noise_statistics() -> None:
    eps = UniformNoise(0.1).sample(np.full(N, 0.5), rng(1))
    assert eps.shape == (N,)
    assert eps.min() >= -0.1 and eps.max() <= 0.1
    assert_mean_zero(eps)
    # Var U(-a, a) = a^2 / 3; relative standard error of a variance estimate ~ sqrt(0.8 / N)
    # = 0.6 %, tolerance 3 %.
    assert eps.var() == pytest.approx(0.01 / 3, rel=0.03)
    assert UniformNoise().half_width == 0.1


def test_gaussian_noise_statistics() -> None:
    eps = GaussianNoise(0.5).sample(np.zeros(N), rng(2))
    assert_mean_zero(eps)
    # Relative SE of the std ~ 1 / sqrt(2 N) = 0.5 %, tolerance 3 %.
    assert eps.std() == pytest.approx(0.5, rel=0.03)
    assert np.array_equal(GaussianNoise(0.0).sample(np.zeros(4), rng()), np.zeros(4))


def test_noise_shape_is_preserved() -> None:
    fx = np.full((3, 4), 0.4)
    for model in (NoNoise(), UniformNoise(), GaussianNoise(1.0), TruncatedGaussianNoise()):
        assert model.sample(fx, rng()).shape == (3, 4)


def test_truncated_symmetric_keeps_rewards_in_unit_interval_and_zero_mean() -> None:
    fx = rng(3).random(N)
    eps = TruncatedGaussianNoise().sample(fx, rng(4))
    r = fx + eps
    assert r.min() >= 0.0 and r.max() <= 1.0
    assert np.all(np.abs(eps) <= np.minimum(fx, 1 - fx) + 1e-15)
    assert_mean_zero(eps)
    assert np.std(eps) > 0.1  # it is not degenerate


def test_truncated_symmetric_variance_matches_formula() -> None:
    # N(0, 1) conditioned on |eps| <= b: Var = 1 - 2 b phi(b) / (2 Phi(b) - 1).
    b = 0.5
    eps = TruncatedGaussianNoise(1.0).sample(np.full(N, 0.5), rng(5))
    expected = 1 - 2 * b * phi(b) / (2 * ndtr(b) - 1)
    assert eps.var() == pytest.approx(expected, rel=0.03)
    assert_mean_zero(eps)
    # A small sigma barely feels the truncation at b = 0.5 (50 sigma).
    small = TruncatedGaussianNoise(0.01).sample(np.full(N, 0.5), rng(6))
    assert small.std() == pytest.approx(0.01, rel=0.03)


def test_truncated_symmetric_zero_width() -> None:
    fx = np.array([0.0, 1.0, 1.2, -0.3])
    assert np.array_equal(TruncatedGaussianNoise().sample(fx, rng()), np.zeros(4))
    # Garland maximum: b ~ 0.0022.
    f_star = 4 * (math.pi / 6) * (1 - math.pi / 6)
    eps = TruncatedGaussianNoise().sample(np.full(1000, f_star), rng(7))
    assert np.abs(eps).max() <= 1 - f_star


def test_truncated_asymmetric_mean_and_range() -> None:
    f = 0.2
    eps = TruncatedGaussianNoise(1.0, mode="asymmetric").sample(np.full(N, f), rng(8))
    r = f + eps
    assert r.min() >= 0.0 and r.max() <= 1.0
    lo, hi = -f, 1 - f
    mean = (phi(lo) - phi(hi)) / (ndtr(hi) - ndtr(lo))  # ~0.2759
    se = eps.std(ddof=1) / math.sqrt(N)
    assert abs(eps.mean() - mean) < 4 * se
    # spec: E[r | x] ~ 0.5 + (f - 0.5) / 12 for sigma = 1.
    assert r.mean() == pytest.approx(0.5 + (f - 0.5) / 12, abs=0.005)


def test_truncated_far_tails_are_finite() -> None:
    model = TruncatedGaussianNoise(0.01, mode="asymmetric")
    # f = 1.5: eps in [-1.5, -0.5] = [-150, -50] sigma (lower tail)
    eps = model.sample(np.full(2000, 1.5), rng(9))
    assert np.all(np.isfinite(eps))
    assert eps.max() <= -0.5 and eps.min() >= -0.5 - 0.002
    # f = -0.5: eps in [0.5, 1.5] (upper tail, reflected)
    eps = model.sample(np.full(2000, -0.5), rng(10))
    assert eps.min() >= 0.5 and eps.max() <= 0.5 + 0.002


def test_truncated_clip_mode() -> None:
    f = 0.2
    eps = TruncatedGaussianNoise(1.0, mode="clip").sample(np.full(N, f), rng(11))
    r = f + eps
    assert r.min() >= 0.0 and r.max() <= 1.0
    # P(r == 0) = Phi(-0.2) = 0.4207; binomial SE ~ 0.0035, tolerance 4 SE.
    p0 = float(np.mean(r == 0.0))
    assert abs(p0 - ndtr(-f)) < 4 * math.sqrt(ndtr(-f) * (1 - ndtr(-f)) / N)


@pytest.mark.parametrize(
    "model",
    [
        UniformNoise(0.1),
        GaussianNoise(0.3),
        TruncatedGaussianNoise(),
        TruncatedGaussianNoise(mode="asymmetric"),
        TruncatedGaussianNoise(mode="clip"),
    ],
    ids=["uniform", "gaussian", "tg-sym", "tg-asym", "tg-clip"],
)
def test_same_seed_same_noise(model) -> None:
    fx = np.linspace(0.0, 1.0, 101)
    a = model.sample(fx, rng(42))
    b = model.sample(fx, rng(42))
    c = model.sample(fx, rng(43))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_parameter_validation() -> None:
    with pytest.raises(ConfigError) as exc:
        UniformNoise(-0.1)
    assert exc.value.field == "objective.noise.half_width"
    with pytest.raises(ConfigError) as exc:
        GaussianNoise(-1.0)
    assert exc.value.field == "objective.noise.sigma"
    with pytest.raises(ConfigError, match=">= 0"):
        TruncatedGaussianNoise(float("nan"))
    with pytest.raises(ConfigError, match="non-negative number"):
        GaussianNoise(True)
    with pytest.raises(ConfigError, match="allowed: symmetric, asymmetric, clip") as exc:
        TruncatedGaussianNoise(mode="reflect")
    assert exc.value.field == "objective.noise.mode"
    with pytest.raises(ObjectiveError, match="finite"):
        TruncatedGaussianNoise().sample(np.array([0.5, np.nan]), rng())


def test_make_noise() -> None:
    assert set(NOISE_MODELS) == {"none", "uniform", "gaussian", "truncated_gaussian"}
    assert isinstance(make_noise("none"), NoNoise)
    assert make_noise("uniform", half_width=0.2).half_width == 0.2
    assert make_noise("Gaussian", sigma=1).sigma == 1.0
    tg = make_noise("truncated_gaussian", sigma=0.5, mode="clip")
    assert isinstance(tg, TruncatedGaussianNoise) and tg.mode == "clip" and tg.sigma == 0.5
    assert repr(tg) == "TruncatedGaussianNoise(sigma=0.5, mode='clip')"
    with pytest.raises(ConfigError, match="allowed: none, uniform, gaussian, truncated_gaussian"):
        make_noise("laplace")
    with pytest.raises(ConfigError, match="allowed: half_width") as exc:
        make_noise("uniform", sigma=0.1)
    assert exc.value.field == "objective.noise.sigma"
    with pytest.raises(ConfigError, match="required") as exc:
        make_noise("gaussian")
    assert exc.value.field == "objective.noise.sigma"
