"""RFF / GP-TS building blocks of FTS and DP-FTS-DE (spec-dpftsde §2.1-§2.3, §3.5, §3.8, §3.9).

Statistical checks are seeded; each states its tolerance next to the assertion.
"""

import numpy as np
import pytest

from fedxab.algorithms.acquisition import (
    AcquisitionMaximiser,
    SEHyperparameters,
    exact_posterior_sample,
    own_ts_step,
)
from fedxab.algorithms.rff import (
    FeatureFunction,
    RandomFeatures,
    WeightPosterior,
    se_kernel,
    theory_regulariser,
)
from fedxab.errors import ConfigError, InvalidRewardError

# ---------------------------------------------------------------- features (§2.2)


def test_same_seed_gives_identical_features_across_instances():
    a = RandomFeatures.from_seed(3, 50, 0.03, seed=11)
    b = RandomFeatures.from_seed(3, 50, 0.03, seed=11)
    np.testing.assert_array_equal(a.spectral, b.spectral)
    np.testing.assert_array_equal(a.phase, b.phase)
    X = np.random.default_rng(0).uniform(size=(7, 3))
    np.testing.assert_array_equal(a(X), b(X))
    assert not np.array_equal(a.spectral, RandomFeatures.from_seed(3, 50, 0.03, seed=12).spectral)
    other_role = RandomFeatures.from_seed(3, 50, 0.03, seed=11, role="rff.other")
    assert not np.array_equal(a.spectral, other_role.spectral)


def test_feature_draw_has_the_stated_distribution():
    feats = RandomFeatures.from_seed(2, 20_000, 0.25, seed=4)
    # s_j ~ N(0, l^-2 I): per-coordinate std 4 (within 2%); b_j ~ U[0, 2pi]
    assert feats.spectral.std(axis=0) == pytest.approx([4.0, 4.0], rel=0.02)
    assert feats.phase.min() >= 0.0 and feats.phase.max() <= 2 * np.pi
    assert feats.phase.mean() == pytest.approx(np.pi, rel=0.02)


@pytest.mark.parametrize("normalize", [True, False])
def test_feature_matrix_shape_and_norm(normalize):
    feats = RandomFeatures.from_seed(2, 64, 0.1, seed=1, signal_variance=0.5, normalize=normalize)
    Phi = feats(np.random.default_rng(1).uniform(size=(9, 2)))
    assert Phi.shape == (9, 64) and (feats.n_features, feats.dim) == (64, 2)
    sq_norms = np.sum(Phi**2, axis=1)
    if normalize:  # ||phi(x)||^2 = sigma0^2 exactly ([code] normalisation, proof step (20)(a))
        np.testing.assert_allclose(sq_norms, 0.5, rtol=1e-12)
    else:  # Rahimi-Recht: sqrt(2 sigma0^2 / M) cos(.)
        assert np.all(sq_norms <= 2 * 0.5)


@pytest.mark.parametrize("normalize", [True, False])
def test_gram_matrix_error_shrinks_as_m_grows(normalize):
    """k(x,x') ~ phi(x)^T phi(x') with sup-error O(M^-1/2) (§2.2)."""
    X = np.random.default_rng(0).uniform(size=(30, 2))
    K = se_kernel(X, X, 0.3)
    errors = []
    for m in (10, 100, 1_000, 10_000):
        per_seed = []
        for seed in range(5):
            Phi = RandomFeatures.from_seed(2, m, 0.3, seed, normalize=normalize)(X)
            per_seed.append(np.abs(Phi @ Phi.T - K).max())
        errors.append(float(np.mean(per_seed)))
    assert errors == sorted(errors, reverse=True)
    # M^-1/2 predicts a factor 10 from M = 100 to 10^4; require at least 5
    assert errors[-1] < errors[1] / 5
    # stated tolerance: max |K_hat - K| over the 30x30 Gram matrix <= 0.05 at M = 10^4
    assert errors[-1] <= 0.05


def test_se_kernel_values():
    X = np.array([[0.0, 0.0], [0.3, 0.4]])  # distance 0.5
    K = se_kernel(X, X, lengthscale=0.5, signal_variance=0.8)
    np.testing.assert_allclose(K, [[0.8, 0.8 * np.exp(-0.5)], [0.8 * np.exp(-0.5), 0.8]])


@pytest.mark.parametrize("normalize", [True, False])
def test_jacobian_matches_finite_differences(normalize):
    feats = RandomFeatures.from_seed(3, 40, 0.2, seed=5, normalize=normalize)
    x, h = np.array([0.3, 0.6, 0.1]), 1e-6
    numeric = np.column_stack(
        [(feats((x + h * e)[None])[0] - feats((x - h * e)[None])[0]) / (2 * h) for e in np.eye(3)]
    )
    np.testing.assert_allclose(feats.jacobian(x), numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("categories", [None, (None, 3, None)])
@pytest.mark.parametrize("normalize", [True, False])
def test_one_point_path_gives_the_batch_values_bit_for_bit(categories, normalize):
    """``at`` and ``value_and_grad`` (one call per L-BFGS-B step) give exactly the values of the
    batch map and of ``jacobian``, which follows the formula's order of operations
    (σ0 (∂u/‖u‖ − u (uᵀ∂u)/‖u‖³), ‖u‖ as numpy.linalg.norm): a change of arithmetic there would
    move FTS-DE's queries, and fails here, not only the seeded reproductions."""
    feats = RandomFeatures.from_seed(
        3, 40, 0.2, seed=5, normalize=normalize, categories=categories, signal_variance=0.7
    )
    w = np.random.default_rng(6).standard_normal((2, 40))
    g = FeatureFunction(feats, w, region_of=lambda X: (X[:, 0] >= 0.5).astype(int))
    for x in np.random.default_rng(7).uniform(size=(20, 3)):
        phi, jac = feats.at(x)
        np.testing.assert_array_equal(phi, feats(x[None])[0])
        np.testing.assert_array_equal(jac, feats.jacobian(x))
        if categories is None:
            arg = feats.spectral @ x + feats.phase
            u, d_u = np.cos(arg), -np.sin(arg)[:, None] * feats.spectral
            if normalize:
                norm = float(np.linalg.norm(u))
                reference = np.sqrt(0.7) * (d_u / norm - np.outer(u, u @ d_u) / norm**3)
            else:
                reference = np.sqrt(2 * 0.7 / 40) * d_u
            np.testing.assert_array_equal(jac, reference)
        value, grad = g.value_and_grad(x)
        piece = w[int(x[0] >= 0.5)]
        assert value == float(feats(x[None])[0] @ piece)
        np.testing.assert_array_equal(grad, feats.jacobian(x).T @ piece)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n_features": 0}, "n_features"),
        ({"n_features": 2.5}, "n_features"),
        ({"lengthscale": 0.0}, "lengthscale"),
        ({"lengthscale": -0.1}, "lengthscale"),
        ({"lengthscale": float("nan")}, "lengthscale"),
        ({"dim": 0}, "dim"),
        ({"signal_variance": 0.0}, "signal_variance"),
    ],
)
def test_bad_feature_parameters_name_the_field(kwargs, field):
    args = {"dim": 2, "n_features": 10, "lengthscale": 0.1, "seed": 0} | kwargs
    with pytest.raises(ConfigError) as err:
        RandomFeatures.from_seed(**args)
    assert err.value.field == field


@pytest.mark.parametrize(
    "X", [np.zeros((4, 3)), np.zeros(2), np.zeros((2, 2, 1)), np.array([[0.1, np.nan]])]
)
def test_bad_points_name_x(X):
    feats = RandomFeatures.from_seed(2, 10, 0.1, seed=0)
    with pytest.raises(ConfigError) as err:
        feats(X)
    assert err.value.field == "X"


# ---------------------------------------------------------------- weight posterior (§2.3, eq. 2)


def _data(seed=3, n=15, dim=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, dim))
    return X, np.sin(6 * X[:, 0]) + 0.1 * rng.standard_normal(n)


def test_posterior_mean_and_covariance_match_closed_form():
    feats = RandomFeatures.from_seed(1, 6, 0.3, seed=2)
    X, y = _data()
    Phi, lam = feats(X), 0.05
    post = WeightPosterior.fit(Phi, y, lam)
    sigma = Phi.T @ Phi + lam * np.eye(6)
    np.testing.assert_allclose(post.mean, np.linalg.solve(sigma, Phi.T @ y), atol=1e-12)
    np.testing.assert_allclose(post.covariance, lam * np.linalg.inv(sigma), atol=1e-12)
    np.testing.assert_allclose(post.factor.T @ post.factor, sigma, atol=1e-12)


def test_omega_samples_match_the_posterior():
    feats = RandomFeatures.from_seed(1, 6, 0.3, seed=2)
    X, y = _data()
    post = WeightPosterior.fit(feats(X), y, 0.05)
    n = 20_000
    samples = post.sample(np.random.default_rng(9), size=n)
    assert samples.shape == (n, 6)
    cov = post.covariance
    # sample mean within 4.5 standard errors in every coordinate
    z = np.abs(samples.mean(axis=0) - post.mean) / np.sqrt(np.diag(cov) / n)
    assert z.max() < 4.5
    # sample covariance: relative Frobenius error <= 5% (about 1% expected at n = 20000)
    sample_cov = np.cov(samples.T)
    assert np.linalg.norm(sample_cov - cov) / np.linalg.norm(cov) <= 0.05
    # variances within 5% each
    np.testing.assert_allclose(np.diag(sample_cov), np.diag(cov), rtol=0.05)


def test_sampling_is_reproducible_and_one_vector_per_call():
    feats = RandomFeatures.from_seed(1, 8, 0.3, seed=2)
    X, y = _data()
    post = WeightPosterior.fit(feats(X), y, 0.01)
    a = post.sample(np.random.default_rng(5))
    b = post.sample(np.random.default_rng(5))
    assert a.shape == (8,)
    np.testing.assert_array_equal(a, b)


def test_no_observations_gives_the_prior():
    post = WeightPosterior.fit(np.empty((0, 5)), np.empty(0), 0.3)
    np.testing.assert_array_equal(post.mean, np.zeros(5))
    np.testing.assert_allclose(post.covariance, np.eye(5), atol=1e-12)  # lam (lam I)^-1 = I


def test_small_lambda_mean_is_the_least_squares_fit():
    """§10: as lambda -> 0 with many points, the mean of phi(x)^T omega is the LS fit."""
    feats = RandomFeatures.from_seed(2, 20, 0.3, seed=7)
    X, y = _data(n=200, dim=2)
    Phi = feats(X)
    post = WeightPosterior.fit(Phi, y, 1e-10)
    lstsq = np.linalg.lstsq(Phi, y, rcond=None)[0]
    np.testing.assert_allclose(Phi @ post.mean, Phi @ lstsq, atol=1e-6)


def test_real_world_settings_are_numerically_stable():
    """l = 0.01, lambda = 1e-6, M = 100, 70 points, some repeated (§2.2): no failure, finite."""
    feats = RandomFeatures.from_seed(2, 100, 0.01, seed=0)
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(60, 2))
    X = np.vstack([X, X[:10]])
    y = rng.uniform(size=70)
    post = WeightPosterior.fit(feats(X), y)  # default lambda: 1e-6
    assert post.noise_variance == 1e-6
    Phi = feats(X)
    # normal equations hold to ~1e-9 relative
    residual = (Phi.T @ Phi + 1e-6 * np.eye(100)) @ post.mean - Phi.T @ y
    assert np.linalg.norm(residual) <= 1e-8 * np.linalg.norm(Phi.T @ y)
    assert np.all(np.isfinite(post.sample(rng, size=3)))


def test_theory_regulariser():
    assert theory_regulariser(40) == pytest.approx(1.05)
    with pytest.raises(ConfigError, match="horizon"):
        theory_regulariser(0)


def test_bad_posterior_inputs():
    Phi = np.ones((3, 4))
    with pytest.raises(ConfigError) as err:
        WeightPosterior.fit(Phi, np.ones(2))
    assert err.value.field == "y"
    with pytest.raises(ConfigError) as err:
        WeightPosterior.fit(Phi, np.ones(3), noise_variance=0.0)
    assert err.value.field == "noise_variance"
    with pytest.raises(ConfigError) as err:
        WeightPosterior.fit(np.ones(4), np.ones(4))
    assert err.value.field == "Phi"
    with pytest.raises(InvalidRewardError, match=r"y\[1\]"):
        WeightPosterior.fit(Phi, np.array([0.0, np.nan, 1.0]))


# ---------------------------------------------------------------- feature functions, argmax (§3.9)


def test_weighted_combination_is_the_combined_function():
    feats = RandomFeatures.from_seed(2, 30, 0.2, seed=3)
    rng = np.random.default_rng(0)
    vectors, weights = rng.standard_normal((4, 30)), np.array([0.1, 0.2, 0.3, 0.4])
    X = rng.uniform(size=(11, 2))
    combined = FeatureFunction(feats, weights @ vectors)(X)
    separate = sum(w * FeatureFunction(feats, v)(X) for w, v in zip(weights, vectors, strict=True))
    np.testing.assert_allclose(combined, separate, atol=1e-12)


@pytest.mark.parametrize(
    ("domain", "x_star"),
    [
        (None, [0.37, 0.81]),
        ([[-2.0, 3.0], [10.0, 11.0]], [1.2, 10.05]),
    ],
)
def test_maximiser_finds_a_known_maximiser(domain, x_star):
    """With normalised features, omega = phi(x*) gives f(x) = phi(x)^T phi(x*) <= sigma0^2 with
    equality at x* (Cauchy-Schwarz), so x* is the exact maximiser, whatever the RFF error."""
    x_star = np.array(x_star)
    feats = RandomFeatures.from_seed(2, 200, 0.2, seed=1, signal_variance=0.7)
    f = FeatureFunction(feats, feats(x_star[None])[0])
    x, value = AcquisitionMaximiser(domain=domain).argmax(f, np.random.default_rng(2))
    # stated tolerance: |x - x*| <= 1e-4 per coordinate, f(x) = sigma0^2 to 1e-9
    np.testing.assert_allclose(x, x_star, atol=1e-4)
    assert value == pytest.approx(0.7, abs=1e-9)
    assert f(x[None])[0] == pytest.approx(value)


def test_maximiser_of_a_weighted_combination():
    feats = RandomFeatures.from_seed(1, 300, 0.05, seed=6)
    a, b = np.array([[0.2]]), np.array([[0.75]])
    omega = 0.4 * feats(a)[0] + 1.0 * feats(b)[0]
    x, value = AcquisitionMaximiser(n_restarts=5).argmax(
        FeatureFunction(feats, omega), np.random.default_rng(0)
    )
    # the heavier bump wins; its peak is within 0.01 of 0.75 (the other bump is 11 l away)
    assert abs(x[0] - 0.75) <= 0.01 and value == pytest.approx(1.0, abs=0.05)


def _halves(X):
    return (X[:, 0] >= 0.5).astype(int)  # [0, .5) -> 0, [.5, 1] -> 1


def test_piecewise_function_switches_vectors_by_sub_region():
    """Algo. 2 line 8: g(x) = phi(x)^T omega^(i[x]), maximised over the whole domain."""
    feats = RandomFeatures.from_seed(1, 300, 0.1, seed=8)
    peak_07 = feats(np.array([[0.7]]))[0]
    peak_09 = feats(np.array([[0.9]]))[0]
    # region 0 = [0, .5) holds a vector peaked at 0.7, outside the region: g there is at most
    # ~k(0.5, 0.7) = e^-2 ~ 0.14, so the maximiser is region 1's peak 0.9 with value 0.3
    g = FeatureFunction(feats, np.stack([peak_07, 0.3 * peak_09]), region_of=_halves)
    X = np.array([[0.2], [0.7]])
    np.testing.assert_allclose(g(X), [feats(X[:1])[0] @ peak_07, feats(X[1:])[0] @ peak_09 * 0.3])
    x, value = AcquisitionMaximiser(n_restarts=5).argmax(g, np.random.default_rng(1))
    assert abs(x[0] - 0.9) <= 1e-4 and value == pytest.approx(0.3, abs=1e-9)


def test_grid_is_enumerated_without_drawing():
    feats = RandomFeatures.from_seed(1, 50, 0.03, seed=2)
    f = FeatureFunction(feats, np.random.default_rng(3).standard_normal(50))
    grid = np.linspace(0, 1, 1000)[:, None]
    rng = np.random.default_rng(4)
    state = rng.bit_generator.state
    x, value = AcquisitionMaximiser(grid=grid).argmax(f, rng)
    best = int(np.argmax(f(grid)))
    np.testing.assert_array_equal(x, grid[best])
    assert value == f(grid)[best]
    assert rng.bit_generator.state == state


def test_bad_feature_function_and_maximiser_settings():
    feats = RandomFeatures.from_seed(2, 10, 0.1, seed=0)
    cases = [
        (lambda: FeatureFunction(feats, np.ones(9)), "weights"),
        (lambda: FeatureFunction(feats, np.ones((2, 10))), "region_of"),
        (lambda: FeatureFunction(feats, np.ones(10), region_of=_halves), "region_of"),
        (lambda: AcquisitionMaximiser(n_candidates=0), "n_candidates"),
        (lambda: AcquisitionMaximiser(n_restarts=-1), "n_restarts"),
        (lambda: AcquisitionMaximiser(domain=[[0, 1]], grid=np.zeros((3, 1))), "grid"),
        (lambda: AcquisitionMaximiser(domain=[[1, 0]]), "domain"),
        (
            lambda: AcquisitionMaximiser(domain=[[0, 1]]).argmax(
                FeatureFunction(feats, np.ones(10)), np.random.default_rng(0)
            ),
            "domain",
        ),
        (
            lambda: FeatureFunction(feats, np.ones((2, 10)), region_of=lambda X: X[:, 0] * 0 + 2)(
                np.zeros((1, 2))
            ),
            "region_of",
        ),
    ]
    for build, field in cases:
        with pytest.raises(ConfigError) as err:
            build()
        assert err.value.field == field


# ---------------------------------------------------------------- own GP-TS step (§3.5, §3.8)


def _bump_history(n=30):
    X = np.random.default_rng(0).uniform(size=(n, 1))
    return X, np.exp(-((X[:, 0] - 0.3) ** 2) / (2 * 0.1**2))


HYPER = SEHyperparameters(lengthscale=0.15, signal_variance=1.0, noise_variance=1e-4)


@pytest.mark.parametrize("sampler", ["rff", "exact"])
def test_own_ts_step_queries_near_the_maximum_of_well_observed_data(sampler):
    X, y = _bump_history()
    maximiser = AcquisitionMaximiser(n_candidates=500, n_restarts=5)
    for seed in range(3):
        x = own_ts_step(X, y, HYPER, np.random.default_rng(seed), maximiser, sampler=sampler)
        # 30 near-noiseless observations of a bump at 0.3: the sample's argmax is within 0.05
        assert x.shape == (1,) and abs(x[0] - 0.3) <= 0.05


def test_own_ts_step_is_reproducible():
    X, y = _bump_history()
    maximiser = AcquisitionMaximiser(n_candidates=200, n_restarts=2)
    a = own_ts_step(X, y, HYPER, np.random.default_rng(7), maximiser)
    b = own_ts_step(X, y, HYPER, np.random.default_rng(7), maximiser)
    np.testing.assert_array_equal(a, b)


def test_exact_sample_matches_the_gp_posterior_scaled_by_beta():
    X, y = _bump_history(n=8)
    points = np.linspace(0, 1, 6)[:, None]
    hyper = SEHyperparameters(lengthscale=0.2, signal_variance=1.0, noise_variance=0.01)
    K = se_kernel(X, X, 0.2) + 0.01 * np.eye(8)
    k = se_kernel(X, points, 0.2)
    mean = k.T @ np.linalg.solve(K, y)
    var = 1.0 - np.sum(k * np.linalg.solve(K, k), axis=0)
    rng, n, beta = np.random.default_rng(0), 4000, 2.0
    draws = np.array(
        [exact_posterior_sample(X, y, points, hyper, rng, beta=beta) for _ in range(n)]
    )
    # mean within 4.5 standard errors; variance beta^2 sigma^2 within 10%
    assert np.all(np.abs(draws.mean(axis=0) - mean) <= 4.5 * beta * np.sqrt(var / n))
    np.testing.assert_allclose(draws.var(axis=0), beta**2 * var, rtol=0.1)


def test_bad_own_ts_settings():
    X, y = _bump_history(n=5)
    maximiser = AcquisitionMaximiser(n_candidates=10, n_restarts=0)
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError) as err:
        own_ts_step(X, y, HYPER, rng, maximiser, sampler="gp")
    assert err.value.field == "sampler"
    with pytest.raises(ConfigError) as err:
        own_ts_step(X, y, HYPER, rng, maximiser, beta=2.0)
    assert err.value.field == "beta"
    with pytest.raises(ConfigError) as err:
        SEHyperparameters(lengthscale=0.0)
    assert err.value.field == "lengthscale"
