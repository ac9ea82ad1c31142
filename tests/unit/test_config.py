"""Run configuration: defaults, TOML loading, and a ConfigError naming the field for bad input."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fedxab.config import (
    AlgorithmConfig,
    Config,
    NoiseConfig,
    RunConfig,
    config_from_dict,
    default_config,
    load_config,
)
from fedxab.errors import ConfigError, FedxabError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(data: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    return info.value


# --- defaults and valid input ----------------------------------------------------------------


def test_default_config_is_fedpne_practical_on_garland():
    # the federated default job (issue 3); its [federation] section: test_federated_config.py
    cfg = default_config()
    assert cfg.run == RunConfig(seed=0, repeats=3, budget=10_000, output="results")
    assert cfg.run.seeds == [0, 1, 2]
    assert cfg.objective.name == "garland"
    assert cfg.objective.noise == NoiseConfig("uniform", {"half_width": 0.1})
    assert cfg.algorithm == AlgorithmConfig(
        "fedpne", {"preset": "practical", "nu": 1.0, "rho": 0.5}
    )


def test_empty_config_takes_section_defaults():
    cfg = config_from_dict({})
    assert cfg.run == RunConfig()
    assert cfg.run.budget == 20_000 and cfg.run.repeats == 1
    assert cfg.objective.name == "garland"
    assert cfg.algorithm.name == "hct"


def test_load_full_toml(tmp_path):
    path = _write(
        tmp_path,
        """
        [run]
        seed = 4
        repeats = 2
        budget = 500
        output = "out/x"

        [objective]
        name = "himmelblau"
        normalized = true

        [objective.noise]
        name = "uniform"
        half_width = 0.05

        [algorithm]
        name = "poo"
        rho_max = 0.8
        """,
    )
    cfg = load_config(path)
    assert cfg.run == RunConfig(seed=4, repeats=2, budget=500, output="out/x")
    assert cfg.run.seeds == [4, 5]
    assert cfg.output_dir == Path("out/x")
    assert cfg.objective.name == "himmelblau"
    assert dict(cfg.objective.params) == {"normalized": True}
    assert cfg.objective.noise == NoiseConfig("uniform", {"half_width": 0.05})
    assert cfg.algorithm == AlgorithmConfig("poo", {"rho_max": 0.8})


def test_noise_as_a_name_or_an_inline_table():
    cfg = config_from_dict({"objective": {"name": "garland", "noise": "uniform"}})
    assert cfg.objective.noise == NoiseConfig("uniform", {})
    cfg = config_from_dict(
        {"objective": {"name": "garland", "noise": {"name": "uniform", "half_width": 0.2}}}
    )
    assert cfg.objective.noise.params["half_width"] == 0.2


def test_to_dict_roundtrips_and_is_plain_data():
    cfg = config_from_dict(
        {
            "run": {"seed": 3, "budget": 100},
            "objective": {"name": "garland", "noise": {"name": "uniform", "half_width": 0.2}},
            "algorithm": {"name": "hct", "rho": 0.7, "nu": 2},
        }
    )
    d = cfg.to_dict()
    assert d == {
        "run": {"seed": 3, "repeats": 1, "budget": 100, "output": "results", "workers": 1},
        "objective": {"name": "garland", "noise": {"name": "uniform", "half_width": 0.2}},
        "algorithm": {"name": "hct", "rho": 0.7, "nu": 2},
    }
    assert type(d["algorithm"]) is dict
    assert config_from_dict(d) == cfg


def test_config_is_frozen():
    cfg = default_config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.run.budget = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.algorithm.params["c"] = 1.0  # type: ignore[index]


def test_with_run_overrides_and_revalidates():
    cfg = default_config().with_run(seed=9, budget=123, repeats=None)
    assert (cfg.run.seed, cfg.run.budget, cfg.run.repeats) == (9, 123, 3)
    with pytest.raises(ConfigError) as info:
        default_config().with_run(budget=-1)
    assert info.value.field == "run.budget"


@pytest.mark.parametrize("name", ["hct_garland.toml", "poo_garland.toml", "hct_himmelblau.toml"])
def test_examples_load(name):
    cfg = load_config(EXAMPLES / name)
    assert cfg.run.budget <= 20_000
    assert cfg.run.repeats >= 1


# --- bad input: every error names its field ----------------------------------------------------


@pytest.mark.parametrize("budget", [-5, 0])
def test_non_positive_budget(budget):
    err = _error({"run": {"budget": budget}})
    assert err.field == "run.budget"
    assert str(budget) in str(err)
    assert "1..100,000,000" in str(err)


def test_negative_seed_and_zero_repeats():
    assert _error({"run": {"seed": -1}}).field == "run.seed"
    assert _error({"run": {"repeats": 0}}).field == "run.repeats"
    assert _error({"run": {"output": "  "}}).field == "run.output"


def test_run_section_built_in_code_is_validated_too():
    with pytest.raises(ConfigError) as info:
        RunConfig(budget=-3)
    assert info.value.field == "run.budget"


def test_unknown_objective_name_lists_allowed():
    err = _error({"objective": {"name": "nope"}})
    assert err.field == "objective.name"
    assert "nope" in str(err)
    assert "garland" in str(err)


def test_unknown_algorithm_name_lists_allowed():
    err = _error({"algorithm": {"name": "sgd"}})
    assert err.field == "algorithm.name"
    assert "sgd" in str(err)
    assert "hct" in str(err) and "poo" in str(err)


def test_unknown_algorithm_parameter():
    err = _error({"algorithm": {"name": "hct", "learning_rate": 0.1}})
    assert err.field == "algorithm.learning_rate"


def test_bad_algorithm_parameter_value():
    err = _error({"algorithm": {"name": "hct", "rho": 1.5}})
    assert err.field == "algorithm.rho"


def test_unknown_noise_model_and_bad_noise_parameter():
    err = _error({"objective": {"noise": "pink"}})
    assert err.field == "objective.noise.name"
    assert "uniform" in str(err) and "gaussian" in str(err)
    err = _error({"objective": {"noise": {"name": "uniform", "half_width": -1.0}}})
    assert err.field == "objective.noise.half_width"
    err = _error({"objective": {"noise": {"name": "uniform", "sigma": 1.0}}})
    assert err.field == "objective.noise.sigma"


def test_bad_objective_parameter():
    assert _error({"objective": {"name": "garland", "dim": 3}}).field == "objective.dim"
    assert _error({"objective": {"name": "rastrigin", "dim": 0}}).field == "objective.dim"


def test_unknown_key_lists_allowed_keys():
    err = _error({"run": {"bugdet": 10}})
    assert err.field == "run.bugdet"
    for allowed in ("budget", "output", "repeats", "seed"):
        assert allowed in str(err)


def test_unknown_section_lists_allowed_sections():
    err = _error({"extra": {"x": 1}})
    assert err.field == "extra"
    assert "agents, algorithm, broker, federation, objective, privacy, run" in str(err)


@pytest.mark.parametrize(
    ("data", "field", "fragments"),
    [
        ({"run": {"budget": "100"}}, "run.budget", ["'100'", "str", "integer"]),
        ({"run": {"budget": 1.5}}, "run.budget", ["1.5", "integer"]),
        ({"run": {"seed": True}}, "run.seed", ["True", "integer"]),
        ({"run": {"output": 5}}, "run.output", ["5", "string"]),
        ({"run": 3}, "run", ["table"]),
        ({"objective": {"name": 5}}, "objective.name", ["5", "string"]),
        ({"algorithm": {"name": ["hct"]}}, "algorithm.name", ["string"]),
        ({"objective": {"noise": 0.1}}, "objective.noise", ["0.1", "name"]),
        ({"objective": {"noise": {"half_width": 0.1}}}, "objective.noise.name", ["missing"]),
        ({"algorithm": {"name": "hct", "rho": float("nan")}}, "algorithm.rho", ["finite"]),
    ],
)
def test_wrong_types_name_field_value_and_expected_type(data, field, fragments):
    err = _error(data)
    assert err.field == field
    for fragment in fragments:
        assert fragment in str(err)


def test_bad_toml_syntax_reports_path_and_line(tmp_path):
    path = _write(tmp_path, "[run]\nseed = 1\nbudget = = 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert str(path) in msg
    assert "line 3" in msg
    assert "invalid TOML" in msg


def test_missing_file_reports_path(tmp_path):
    path = tmp_path / "missing.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)
    assert "not found" in str(info.value)


def test_error_in_a_file_names_field_and_file(tmp_path):
    path = _write(tmp_path, "[run]\nbudget = -5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.field == "run.budget"
    assert str(path) in str(info.value)
    assert "-5" in str(info.value)


def test_config_error_is_a_fedxab_error():
    with pytest.raises(FedxabError):
        config_from_dict({"run": {"budget": -1}})
    with pytest.raises(ConfigError):
        config_from_dict([1, 2])  # type: ignore[arg-type]


def test_sections_come_from_config_fields():
    # Adding a section is one new dataclass plus one field on Config: check the wiring.
    names = [f.name for f in dataclasses.fields(Config)]
    assert names == [
        "run",
        "objective",
        "algorithm",
        "federation",
        "agents",
        "broker",
        "security",
        "privacy",
        "space",
    ]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"algorithm": {"name": "poo", "rho_max": 1e-320}}, "algorithm.rho_max"),
        ({"algorithm": {"name": "hct", "rho": 1e-4}}, "algorithm.rho"),
        ({"algorithm": {"name": "hct", "nu": 2**63 - 1}}, "algorithm.nu"),
        ({"algorithm": {"name": "poo", "nu_max": 1e7}}, "algorithm.nu_max"),
        ({"algorithm": {"name": "fedpne", "nu": 2**63 - 1}, "federation": {"clients": 2}},
         "algorithm.nu"),
        ({"algorithm": {"name": "parallel", "rho": 1e-320}, "federation": {"clients": 2}},
         "algorithm.rho"),
        ({"algorithm": {"name": "fedpne"}, "federation": {"clients": 2**31}}, "federation.clients"),
        ({"run": {"budget": 2**62}, "algorithm": {"name": "hct"}}, "run.budget"),
        ({"algorithm": {"name": "dpfedpne", "epsilon": 1.0, "privacy_delta": 1e-5},
          "federation": {"clients": 2}}, "algorithm.epsilon"),
        ({"algorithm": {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 2.0},
          "federation": {"clients": 2}}, "algorithm.privacy_delta"),
    ],
)  # fmt: skip
def test_settings_that_used_to_crash_at_run_time_are_config_errors(data, field):
    """Issue 16: each of these loaded, then crashed (overflow, division by zero) or hung."""
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert info.value.field == field


@pytest.mark.parametrize(
    "data",
    [
        {"algorithm": {"name": "hct", "nu": 1e6, "rho": 1e-3}},
        {"algorithm": {"name": "poo", "nu_max": 1e6, "rho_max": 1e-3}},
        {"algorithm": {"name": "fedpne", "nu": 1e6, "rho": 1e-3}, "federation": {"clients": 2}},
        {"algorithm": {"name": "parallel", "nu": 1e6, "rho": 1e-3}, "federation": {"clients": 2}},
    ],
)
def test_the_extreme_settings_still_taken_run(data):
    from fedxab.agents.local import run_config
    from fedxab.api import run_job

    config = config_from_dict({"run": {"budget": 300}, **data})
    if config.federation is None:
        results = run_config(config)
    else:
        results = run_job(config.with_broker_url("inprocess://"))
    assert results.runs[0].evaluations == 300 * (2 if config.federation else 1)


@pytest.mark.parametrize("value", [-0.1, float("nan"), float("inf")])
def test_inline_answer_s_must_be_seconds_at_least_zero(value):
    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {
                "algorithm": {"name": "fedpne"},
                "federation": {"clients": 2},
                "agents": {"inline_answer_s": value},
            }
        )
    assert info.value.field == "agents.inline_answer_s"
    assert ("0: always in a thread" if value < 0 else "finite") in str(info.value)
    config = config_from_dict(
        {"algorithm": {"name": "fedpne"}, "federation": {"clients": 2}, "agents": {}}
    )
    assert config.agents.inline_answer_s == 0.05


def test_a_domain_whose_width_overflows_is_refused_at_config_time():
    """Issue 39 item 4: [[-1e308, 1e308]] has a width of inf; a run on it hung on a broker."""
    raw = {
        "objective": {"function": "mod:f", "domain": [[0.0, 1.0], [-1e308, 1e308]]},
        "algorithm": {"name": "fedpne"},
        "federation": {"clients": 2},
    }
    with pytest.raises(ConfigError, match=r"objective.domain: dimension 1 .* width overflows"):
        config_from_dict(raw)
    raw["objective"]["domain"][1] = [-8e307, 8e307]  # wide, but its width is a float
    assert list(config_from_dict(raw).objective.domain[1]) == [-8e307, 8e307]


@pytest.mark.parametrize("name", [{}, {"name": "garland"}])
def test_a_deeply_nested_objective_function_is_a_config_error_not_a_recursion(name):
    """Found by the config property test: a function value nested thousands deep was str()'d
    for the objective's default name (even when a name was given) and overflowed the stack."""
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ConfigError) as err:
        config_from_dict({"objective": {**name, "function": deep}})
    assert err.value.field == "objective.function"
