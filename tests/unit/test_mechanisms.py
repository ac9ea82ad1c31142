"""Mechanisms: Gaussian calibrations (classic, analytic), clipping, Poisson subsampling, and
the noise multiplier for a target epsilon."""

import math

import numpy as np
import pytest

from fedxab.errors import ConfigError, ProtocolError
from fedxab.privacy.accountants import make_accountant, noise_multiplier_for
from fedxab.privacy.mechanisms import (
    MAX_EVENT_COUNT,
    GaussianMechanism,
    PrivacyEvent,
    _analytic_delta,
    clip_l2,
    clip_l2_blocks,
    gaussian_sigma,
    poisson_subsample,
)


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


# ------------------------------------------------------------ clipping, subsampling, calibration


def test_clip_l2_bounds_the_norm_and_keeps_the_direction():
    v = np.array([3.0, 4.0])
    assert np.allclose(clip_l2(v, 1.0), [0.6, 0.8])
    assert np.array_equal(clip_l2(v, 10.0), v)
    with pytest.raises(ConfigError, match="privacy.clip_bound"):
        clip_l2(v, 0.0)


def test_clip_l2_blocks_bounds_each_block_by_s_over_sqrt_p():
    rng = np.random.default_rng(0)
    v = rng.normal(size=12) * 10
    clipped = clip_l2_blocks(v, 2.0, 4)
    norms = np.linalg.norm(clipped.reshape(4, 3), axis=1)
    assert np.all(norms <= 2.0 / 2 + 1e-12) and np.allclose(norms, 1.0)
    assert np.linalg.norm(clipped) <= 2.0 + 1e-12
    small = np.full(12, 1e-3)
    assert np.array_equal(clip_l2_blocks(small, 2.0, 4), small)
    with pytest.raises(ConfigError, match="privacy.blocks.*equal parts"):
        clip_l2_blocks(v, 2.0, 5)


def test_poisson_subsample_has_rate_q_and_is_seeded():
    # 100,000 Bernoulli(0.1) draws: count 10,000 with sd 94.9; tolerance 5 sd
    chosen = poisson_subsample(100_000, 0.1, np.random.default_rng(3))
    assert abs(chosen.size - 10_000) < 5 * 94.9
    assert np.array_equal(chosen, poisson_subsample(100_000, 0.1, np.random.default_rng(3)))
    assert np.array_equal(poisson_subsample(5, 1.0, np.random.default_rng(0)), np.arange(5))
    for q in (0.0, 1.5, -0.1):
        with pytest.raises(ConfigError, match="privacy.sampling_rate"):
            poisson_subsample(10, q, np.random.default_rng(0))


@pytest.mark.parametrize("accountant", ["rdp", "moments"])
def test_noise_multiplier_for_a_target_epsilon_is_the_smallest_that_fits(accountant):
    z = noise_multiplier_for(2.0, 1e-5, 100, 0.05, accountant)
    backend = make_accountant(accountant)

    def spent(m):
        return backend.epsilon([PrivacyEvent("gaussian", m, 0.05, 1.0, 100)], 1e-5)

    assert spent(z) <= 2.0 < spent(z * (1 - 2e-4))
    with pytest.raises(ConfigError, match="privacy.rounds"):
        noise_multiplier_for(2.0, 1e-5, 0, 0.05)


@pytest.mark.parametrize("count", [0, MAX_EVENT_COUNT + 1, 2**63, True, 1.0])
def test_an_event_count_outside_what_the_ledger_holds_is_refused(count):
    wire = {**PrivacyEvent("gaussian", 1.0).to_wire(), "count": count}
    with pytest.raises(ProtocolError, match="'count'"):
        PrivacyEvent.from_wire(wire)
    with pytest.raises(ConfigError, match="event.count"):
        make_accountant("rdp").epsilon([PrivacyEvent("gaussian", 1.0, count=count)], 1e-5)
    assert PrivacyEvent.from_wire({**wire, "count": MAX_EVENT_COUNT}).count == MAX_EVENT_COUNT
