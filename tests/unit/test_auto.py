"""``algorithm = "auto"``: a test per branch of the rule; the choice in configs and results."""

from __future__ import annotations

import pytest

import fedxab
from fedxab.algorithms.auto import (
    CONSENSUS_FROM_50,
    TREE_DIM,
    TUNING_BUDGET,
    UNIVARIATE_DIM,
    choose_algorithm,
)
from fedxab.config import config_from_dict
from fedxab.errors import ConfigError


def test_privacy_chooses_a_dp_algorithm_whatever_the_budget():
    for budget in (8, 50, 5000):
        choice = choose_algorithm(budget=budget, dim=3, clients=4, private=True)
        assert choice.name == "dpftsde" and "privacy" in choice.reason
        assert 1 <= choice.params["n_init"] < budget


def test_a_tuning_budget_chooses_fedtpe_with_gamma_by_budget():
    small = choose_algorithm(budget=50, dim=6, clients=4, private=False)
    assert small.name == "fedtpe" and small.params["gamma"] == 0.15
    assert small.params["n_init"] + small.params["consensus"] <= 50
    assert "kinds" not in small.params  # all continuous: the default
    large = choose_algorithm(budget=100, dim=6, clients=4, private=False)
    assert large.params["gamma"] == 0.25
    assert choose_algorithm(budget=TUNING_BUDGET, dim=2, clients=1, private=False).name == "fedtpe"


def test_fedtpe_models_coordinates_one_by_one_from_the_univariate_dimension():
    def univariate(dim: int) -> bool:
        return choose_algorithm(budget=50, dim=dim, clients=4, private=False).params["univariate"]

    assert not univariate(UNIVARIATE_DIM - 1)
    assert univariate(UNIVARIATE_DIM) and univariate(TREE_DIM + 1)


def test_consensus_candidates_by_budget():
    def consensus(budget: int) -> int:
        return choose_algorithm(budget=budget, dim=4, clients=4, private=False).params["consensus"]

    assert [consensus(b) for b in (2, 3, 14, 15, 49)] == [0, 1, 1, 3, 3]
    assert consensus(50) == consensus(100) == CONSENSUS_FROM_50 == 8


def test_tiny_budgets_still_fit_the_initial_and_consensus_evaluations():
    for budget in (1, 2, 3, 14, 15):
        p = choose_algorithm(budget=budget, dim=2, clients=2, private=False).params
        assert p["n_init"] >= 1 and p["n_init"] + p["consensus"] <= max(budget, 1)


def test_typed_parameters_reach_fedtpe():
    choice = choose_algorithm(
        budget=30,
        dim=3,
        clients=4,
        private=False,
        kinds=("float", "int", "categorical"),
        levels=(None, 8, 3),
    )
    assert choice.params["kinds"] == ["float", "int", "categorical"]
    assert choice.params["levels"] == [0, 8, 3]


def test_categorical_parameters_keep_fedtpe_at_long_horizons():
    choice = choose_algorithm(
        budget=5000,
        dim=2,
        clients=4,
        private=False,
        kinds=("float", "categorical"),
        levels=(None, 3),
    )
    assert choice.name == "fedtpe" and "categorical" in choice.reason


def test_high_dimension_keeps_fedtpe_at_long_horizons():
    choice = choose_algorithm(budget=5000, dim=TREE_DIM + 1, clients=4, private=False)
    assert choice.name == "fedtpe" and "dimension" in choice.reason


def test_a_long_horizon_on_a_small_numeric_box_chooses_fedpne():
    choice = choose_algorithm(budget=TUNING_BUDGET + 1, dim=TREE_DIM, clients=4, private=False)
    assert choice.name == "fedpne" and choice.params == {"preset": "practical"}


# -------------------------------------------------------------------------- in a config
def _data(budget=40, **algorithm):
    return {
        "run": {"budget": budget},
        "objective": {"name": "himmelblau"},
        "algorithm": {"name": "auto", **algorithm},
        "federation": {"clients": 3, "heterogeneity": "shift"},
    }


def test_a_config_resolves_auto_and_writes_it_back_as_auto():
    config = config_from_dict(_data())
    assert config.algorithm.name == "fedtpe"
    assert config.algorithm_choice["name"] == "fedtpe" and config.algorithm_choice["reason"]
    assert config.to_dict()["algorithm"] == {"name": "auto"}
    assert config_from_dict(config.to_dict()).algorithm == config.algorithm
    # a new budget is a new choice
    assert config.with_run(budget=2000).algorithm.name == "fedpne"


def test_a_config_key_overrides_the_rules_setting_and_a_foreign_key_is_named():
    config = config_from_dict(_data(gamma=0.3))
    assert config.algorithm.params["gamma"] == 0.3
    assert config.to_dict()["algorithm"] == {"name": "auto", "gamma": 0.3}
    with pytest.raises(ConfigError, match=r"^algorithm\.gamma: not a parameter of 'fedpne'"):
        config_from_dict(_data(budget=2000, gamma=0.3))


def test_the_api_defaults_to_auto_and_results_keep_the_choice():
    def site(x):
        return float(-((x[0] - 0.3) ** 2))

    results = fedxab.federate(site, [[0.0, 1.0]], clients=2, budget=12)
    assert results.algorithm == "fedtpe"
    assert results.to_dict()["algorithm_choice"]["name"] == "fedtpe"
    assert results.to_dict()["config"]["algorithm"] == {"name": "auto"}
    explicit = fedxab.federate(
        site,
        [[0.0, 1.0]],
        clients=2,
        budget=12,
        algorithm="fedtpe",
        params=results.to_dict()["algorithm_choice"]["params"],
    )
    assert explicit.to_dict()["algorithm_choice"] is None
    assert explicit.runs[0].recommendation == pytest.approx(results.runs[0].recommendation)


def test_a_typed_space_gives_fedtpe_its_kinds_and_levels():
    space = {
        "lr": fedxab.Float(1e-4, 1e-1, log=True),
        "depth": fedxab.Int(1, 8),
        "kind": fedxab.Categorical(["a", "b", "c"]),
    }
    config = fedxab.make_config(space=space, clients=2, budget=30)
    assert config.algorithm.name == "fedtpe"
    assert config.algorithm.params["kinds"] == ["float", "int", "categorical"]
    assert config.algorithm.params["levels"] == [0, 8, 3]
