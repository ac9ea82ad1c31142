"""Gaussian mechanism calibrations: classic (Dwork & Roth Thm A.1), analytic (Balle & Wang)."""

import math

import numpy as np
import pytest

from fedxab.errors import ConfigError
from fedxab.privacy.mechanisms import GaussianMechanism, _analytic_delta, gaussian_sigma


def test_classic_calibration_formula():
    # sigma^2 = 2 log(1.25/delta) / eps^2  ([FX] App. D)
    sigma = gaussian_sigma(0.5, 1e-5)
    assert sigma**2 == pytest.approx(2 * math.log(1.25e5) / 0.25)
    assert gaussian_sigma(0.5, 1e-5, sensitivity=2.0) == pytest.approx(2 * sigma)


@pytest.mark.parametrize("eps", [1.0, 2.0, 10.0])
def test_classic_calibration_refuses_epsilon_at_least_one_and_names_the_fix(eps):
    with pytest.raises(ConfigError, match="privacy.epsilon.*calibration = 'analytic'"):
        gaussian_sigma(eps, 1e-5)


@pytest.mark.parametrize(("eps", "delta"), [(0.1, 1e-5), (0.5, 1e-6), (1.0, 1e-5), (8.0, 1e-3)])
def test_analytic_calibration_is_tight_and_never_above_classic(eps, delta):
    sigma = gaussian_sigma(eps, delta, calibration="analytic")
    assert _analytic_delta(sigma, eps, 1.0) <= delta
    assert _analytic_delta(sigma * (1 - 1e-6), eps, 1.0) > delta * (1 - 1e-3)
    if eps < 1:
        assert sigma <= gaussian_sigma(eps, delta)


def test_bad_parameters_name_the_field():
    with pytest.raises(ConfigError, match="privacy.delta"):
        gaussian_sigma(0.5, 1.5)
    with pytest.raises(ConfigError, match="privacy.epsilon"):
        gaussian_sigma(-1, 1e-5)
    with pytest.raises(ConfigError, match="privacy.calibration"):
        gaussian_sigma(0.5, 1e-5, calibration="rough")


def test_release_adds_noise_of_the_stated_variance_and_returns_an_event():
    mech = GaussianMechanism(sigma=2.0)
    rng = np.random.default_rng(0)
    values = np.zeros(200_000)
    noisy, event = mech.release(values, rng, scope="phase-1")
    # 200k samples: the std estimate's standard error is ~ 2/sqrt(400k) = 0.0032; tolerance 0.02
    assert noisy.std() == pytest.approx(2.0, abs=0.02)
    assert abs(noisy.mean()) < 0.02
    assert (event.mechanism, event.noise_multiplier, event.count, event.scope) == (
        "gaussian",
        2.0,
        1,
        "phase-1",
    )
    again, _ = mech.release(values, np.random.default_rng(0))
    assert np.array_equal(noisy, again)
