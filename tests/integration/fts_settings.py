"""Small, fast settings of the Thompson-sampling algorithms for the integration tests: few
features, a coarse grid, no refits of the agents' own GPs."""

CHEAP_TS = {
    "grid_size": 50,
    "own_fit_every": 0,
    "own_lengthscale": 0.05,
    "own_signal_variance": 1.0,
    "own_noise_variance": 0.01,
    "own_features": 16,
}
"""TS (and every FTS agent's own GP)."""

CHEAP_FTS = {**CHEAP_TS, "n_features": 8, "lengthscale": 0.05, "noise_variance": 0.01}
"""FTS, FTS-DE, DP-FTS-DE: CHEAP_TS and a small shared random-feature model."""
