"""The run identity (fedxab.run.identity): what all parties share, and nothing local."""

from __future__ import annotations

import pytest

from fedxab.config import config_from_dict, default_config
from fedxab.run.identity import protocol_differences, protocol_of, run_id_for


def _with(section: str, **values) -> dict:
    data = default_config().to_dict()
    data[section] = {**data.get(section, {}), **values}
    return data


@pytest.mark.parametrize(
    ("section", "values"),
    [
        ("run", {"output": "elsewhere"}),
        ("run", {"repeats": 7}),
        ("agents", {"heartbeat_s": 1.0, "rebroadcast_s": 3.0, "telemetry_timeout_s": 5.0}),
        ("broker", {"url": "kafka://127.0.0.1:1", "namespace": "site-a"}),
        ("security", {"keys_dir": "keys/", "sign": True}),
        ("objective", {"noise": "none"}),
        ("federation", {"heterogeneity": "shift"}),
    ],
)
def test_local_settings_leave_the_run_id_alone(section, values):
    base = default_config()
    other = config_from_dict(_with(section, **values))
    assert run_id_for(other, 0) == run_id_for(base, 0)


@pytest.mark.parametrize(
    ("section", "values", "field"),
    [
        ("run", {"budget": 2000}, "budget: expected 10000, got 2000"),
        ("algorithm", {"rho": 0.7}, "algorithm.rho: expected 0.5, got 0.7"),
        ("federation", {"clients": 11}, "clients: expected 10, got 11"),
        ("objective", {"name": "himmelblau"}, "domain: expected"),
    ],
)
def test_a_protocol_field_changes_the_run_id_and_is_named(section, values, field):
    base = default_config()
    other = config_from_dict(_with(section, **values))
    assert run_id_for(other, 0) != run_id_for(base, 0)
    differences = protocol_differences(protocol_of(base, 0), protocol_of(other, 0))
    assert len(differences) == 1 and differences[0].startswith(field)


def test_the_seed_is_part_of_the_protocol():
    config = default_config()
    assert protocol_differences(protocol_of(config, 0), protocol_of(config, 3)) == [
        "seed: expected 0, got 3"
    ]
    assert run_id_for(config, 3).endswith("-s3")


def test_a_missing_field_is_named_as_absent():
    assert protocol_differences({"a": {"b": 1}}, {"a": {}}) == ["a.b: expected 1, got (absent)"]


@pytest.mark.parametrize(
    "written",
    [
        {"k": 2, "split": "random"},  # defaults written out
        {"nu": 1},  # an int for the float default 1.0
        {"depth_counting": "true", "preset": "practical"},
    ],
)
def test_writing_a_default_out_is_the_same_protocol(written):
    base = default_config()
    other = config_from_dict(_with("algorithm", **written))
    assert protocol_differences(protocol_of(base, 0), protocol_of(other, 0)) == []
    assert run_id_for(other, 0) == run_id_for(base, 0)


def test_a_protocol_holds_every_parameter_value_with_its_default():
    algorithm = protocol_of(default_config(), 0)["algorithm"]
    assert algorithm["name"] == "fedpne"
    assert algorithm["split"] == "random" and algorithm["k"] == 2  # defaults, not written


def _user_config(function: str = "sites:f", **objective) -> dict:
    return config_from_dict(
        {
            "objective": {"function": function, "domain": [[0.0, 1.0]], **objective},
            "algorithm": {"name": "fedpne"},
            "federation": {"clients": 2},
        }
    )


def test_the_objectives_direction_is_part_of_the_protocol():
    high, low = _user_config(), _user_config(direction="minimize")
    assert run_id_for(high, 0) != run_id_for(low, 0)
    assert protocol_differences(protocol_of(high, 0), protocol_of(low, 0)) == [
        'objective.direction: expected "maximize", got "minimize"'
    ]


def test_the_objective_function_itself_is_private_to_the_client():
    """Neither the function's name nor its module is shared: each client brings its own."""
    one, other = _user_config("sites:f"), _user_config("elsewhere.module:g", name="mine")
    assert protocol_of(one, 0) == protocol_of(other, 0)
    assert "sites" not in str(protocol_of(one, 0))
