"""The [federation] config section and the federated-algorithm registry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedxab.algorithms.fedpne import FedPNEClient, FedPNEServer
from fedxab.algorithms.registry import (
    FEDERATED,
    federated_parameters,
    is_federated,
    make_federation,
    make_optimizer,
)
from fedxab.config import (
    Config,
    FederationConfig,
    config_from_dict,
    default_config,
    load_config,
)
from fedxab.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FED = {"algorithm": {"name": "fedpne"}}


def _error(data: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    return info.value


# ----------------------------------------------------------------------------------- config
def test_default_job_is_fedpne_with_ten_clients_on_garland():
    cfg = default_config()
    assert cfg.is_federated
    assert cfg.algorithm.name == "fedpne"
    assert cfg.federation == FederationConfig(clients=10, heterogeneity="offset")
    assert (cfg.run.budget, cfg.run.repeats, cfg.objective.name) == (10_000, 3, "garland")
    assert config_from_dict(cfg.to_dict()) == cfg


def test_federated_algorithm_without_section_takes_the_defaults():
    cfg = config_from_dict(FED)
    assert cfg.federation == FederationConfig()
    assert (cfg.federation.clients, cfg.federation.heterogeneity) == (10, "offset")
    assert cfg.federation.heterogeneity_scale is None
    assert cfg.to_dict()["federation"] == {"clients": 10, "heterogeneity": "offset"}


def test_federation_section_is_parsed_and_roundtrips():
    data = {
        **FED,
        "federation": {"clients": 3, "heterogeneity": "shift", "heterogeneity_scale": 1},
    }
    cfg = config_from_dict(data)
    assert cfg.federation == FederationConfig(3, "shift", 1.0)
    assert isinstance(cfg.federation.heterogeneity_scale, float)
    assert config_from_dict(cfg.to_dict()) == cfg


def test_single_agent_configs_have_no_federation_and_unchanged_to_dict():
    cfg = config_from_dict({"algorithm": {"name": "hct"}})
    assert cfg.federation is None and not cfg.is_federated
    assert set(cfg.to_dict()) == {"run", "objective", "algorithm"}


def test_single_agent_algorithm_with_federation_section_is_an_error():
    err = _error({"algorithm": {"name": "hct"}, "federation": {"clients": 4}})
    assert err.field == "federation"
    assert "'hct'" in str(err) and "fedpne" in str(err)
    with pytest.raises(ConfigError) as info:
        Config(federation=FederationConfig())  # built in code: same check
    assert info.value.field == "federation"


@pytest.mark.parametrize(
    ("section", "field", "fragment"),
    [
        ({"clients": 0}, "federation.clients", "in 1..1,000,000"),
        ({"clients": 2.5}, "federation.clients", "integer"),
        ({"clients": True}, "federation.clients", "integer"),
        ({"heterogeneity": "random"}, "federation.heterogeneity", "offset, shift, none"),
        ({"heterogeneity_scale": -1.0}, "federation.heterogeneity_scale", ">= 0"),
        ({"heterogeneity_scale": "big"}, "federation.heterogeneity_scale", "number"),
        (
            {"heterogeneity": "none", "heterogeneity_scale": 1.0},
            "federation.heterogeneity_scale",
            "no effect",
        ),
        (
            {"client": 3},
            "federation.client",
            "clients, field_assignment, global_regret, heterogeneity",
        ),
        ({"field_assignment": "random"}, "federation.field_assignment", '"fields"'),
        (
            {"heterogeneity": "fields", "field_assignment": "shuffled"},
            "federation.field_assignment",
            "allowed: first, random",
        ),
    ],
)
def test_bad_federation_values_name_the_field(section, field, fragment):
    err = _error({**FED, "federation": section})
    assert err.field == field
    assert fragment in str(err)


def test_federated_algorithm_parameters_are_checked_at_load():
    err = _error({"algorithm": {"name": "fedpne", "learning_rate": 0.1}})
    assert err.field == "algorithm.learning_rate"
    assert "rho" in str(err) and "split" in str(err)
    assert _error({"algorithm": {"name": "fedpne", "rho": 1.5}}).field == "algorithm.rho"
    assert _error({"algorithm": {"name": "fedpne", "k": 1}}).field == "algorithm.k"
    assert _error({"algorithm": {"name": "fedpne", "split": "x"}}).field == "algorithm.split"


def test_unknown_algorithm_lists_single_agent_and_federated_names():
    err = _error({"algorithm": {"name": "fedavg"}})
    assert err.field == "algorithm.name"
    for name in ("hct", "poo", "fedpne"):
        assert name in str(err)


@pytest.mark.parametrize("name", ["fedpne_garland.toml", "fedpne_himmelblau.toml"])
def test_federated_examples_load(name):
    cfg = load_config(EXAMPLES / name)
    assert cfg.is_federated and cfg.federation.clients == 10
    assert cfg.run.budget == 10_000 and cfg.run.repeats == 3


def test_garland_example_is_the_default_job():
    cfg = load_config(EXAMPLES / "fedpne_garland.toml")
    default = default_config()
    assert cfg.algorithm == default.algorithm
    assert cfg.objective == default.objective
    assert cfg.federation.clients == default.federation.clients
    assert cfg.federation.heterogeneity == default.federation.heterogeneity
    assert (cfg.run.seed, cfg.run.repeats, cfg.run.budget) == (0, 3, 10_000)


# --------------------------------------------------------------------------------- registry
def test_fedpne_is_registered_as_a_pair():
    assert FEDERATED["fedpne"] == (FedPNEServer, FedPNEClient)
    assert is_federated("fedpne") and not is_federated("hct")
    params = federated_parameters("fedpne")
    for p in ("nu", "rho", "preset", "c", "c1", "delta", "k", "split", "depth_counting"):
        assert p in params
    for run_level in ("domain", "seed", "budget", "n_clients", "client_id", "partition"):
        assert run_level not in params


def test_make_federation_shares_partition_parameters_with_every_client():
    server, clients = make_federation(
        "fedpne",
        np.array([[0.0, 1.0], [-1.0, 1.0]]),
        n_clients=4,
        budget=100,
        seed=5,
        params={"k": 3, "split": "longest", "rho": 0.6},
    )
    assert isinstance(server, FedPNEServer) and len(clients) == 4
    assert [c.client_id for c in clients] == [0, 1, 2, 3]
    assert server.n_clients == 4 and server.budget == 100 and server.constants.rho == 0.6
    for c in clients:
        assert c.budget == 100
        assert (c.partition.k, c.partition.split, c.partition.seed) == (3, "longest", 5)
    assert (server.partition.k, server.partition.split, server.partition.seed) == (3, "longest", 5)
    _, some = make_federation(
        "fedpne", np.array([[0.0, 1.0]]), n_clients=10, budget=5, seed=0, params={}, client_ids=[7]
    )
    assert [c.client_id for c in some] == [7]


@pytest.mark.parametrize(
    ("call", "field", "fragment"),
    [
        (lambda: make_federation("nope", np.array([[0, 1]]), n_clients=2, budget=5, seed=0,
                                 params={}), "algorithm.name",
         "federated: central-hct, dpfedpne, dpftsde, fed1ucb, fedpne, fedtpe, ftsde"),
        (lambda: make_federation("hct", np.array([[0, 1]]), n_clients=2, budget=5, seed=0,
                                 params={}), "algorithm.name", "single-agent"),
        (lambda: make_federation("fedpne", np.array([[0, 1]]), n_clients=2, budget=5, seed=0,
                                 params={"eta": 1}), "algorithm.eta", "allowed"),
        (lambda: make_federation("fedpne", np.array([[0, 1]]), n_clients=0, budget=5, seed=0,
                                 params={}), "federation.clients", ">= 1"),
        (lambda: make_federation("fedpne", np.array([[0, 1]]), n_clients=2, budget=5, seed=0,
                                 params={}, client_ids=[2]), "client_ids", "0..1"),
        (lambda: make_optimizer("fedpne", np.array([[0, 1]]), seed=0, budget=5, params={}),
         "algorithm.name", "federated algorithm"),
    ],
)  # fmt: skip
def test_registry_errors_name_the_field(call, field, fragment):
    with pytest.raises(ConfigError) as info:
        call()
    assert info.value.field == field
    assert fragment in str(info.value)
