"""Objectives: synthetic test functions with exact optima, noise models, client families."""
