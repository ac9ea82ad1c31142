"""Typed search spaces (fedxab.space): the unit-box encoding, its inverse, snapping, plain data,
Optuna's distributions, and one-line errors naming ``space.<name>.<key>``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fedxab
from fedxab.errors import ConfigError
from fedxab.space import Categorical, Float, Int, SearchSpace, as_space


@pytest.fixture
def space() -> SearchSpace:
    return SearchSpace(
        {
            "lr": Float(1e-4, 1e-1, log=True),
            "depth": Int(1, 8),
            "n": Int(10, 1000, log=True),
            "kind": Categorical(["a", "b", "c"]),
            "frac": Float(0.0, 1.0, step=0.25),
            "x": Float(-5.0, 5.0),
        }
    )


def test_the_interface(space):
    assert fedxab.SearchSpace is SearchSpace and fedxab.Float is Float
    assert space.names == ("lr", "depth", "n", "kind", "frac", "x")
    assert space.dim == 6
    assert space.kinds == ("float", "int", "int", "categorical", "float", "float")
    assert space.levels == (None, 8, 991, 3, 5, None)
    assert space.domain.tolist() == [[0.0, 1.0]] * 6


def test_decode_gives_user_units_and_python_types(space):
    params = space.decode([0.5, 0.0, 1.0, 0.99, 0.65, 0.25])
    assert params == {
        "lr": pytest.approx(math.sqrt(1e-4 * 1e-1)),  # the middle in log
        "depth": 1,
        "n": 1000,
        "kind": "c",
        "frac": 0.75,  # cell 3 of 5 = [0.6, 0.8)
        "x": -2.5,
    }
    assert type(params["depth"]) is int and type(params["lr"]) is float


def test_equal_cells_decode_every_value_once():
    p = Int(3, 9, step=3)  # 3, 6, 9
    space = SearchSpace({"k": p})
    assert [space.decode([u])["k"] for u in (0.0, 0.33, 0.34, 0.66, 0.67, 1.0)] == [
        3,
        3,
        6,
        6,
        9,
        9,
    ]


def test_a_log_int_is_uniform_in_the_log():
    space = SearchSpace({"n": Int(1, 100, log=True)})
    # half of the box decodes to values below sqrt(1/2 * 100.5) ~ 7
    assert space.decode([0.5])["n"] == round(math.sqrt(0.5 * 100.5))
    edges = space.edges[0]
    assert edges[0] == 0 and edges[-1] == 1 and np.all(np.diff(edges) > 0)


def test_encode_is_the_inverse_and_snap_is_canonical(space):
    rng = np.random.default_rng(0)
    for x in rng.random((200, space.dim)):
        params = space.decode(x)
        snapped = space.snap(x)
        assert space.decode(snapped) == pytest.approx(params)
        assert np.allclose(space.encode(params), snapped)
        assert space.key(x) == space.key(snapped)
        assert np.array_equal(space.snap(snapped), snapped)


def test_plain_data_round_trip(space):
    data = space.to_dict()
    assert data["lr"] == {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}
    assert data["kind"] == {"type": "categorical", "choices": ["a", "b", "c"]}
    assert SearchSpace.from_dict(data) == space


def test_categorical_keeps_types_apart():
    space = SearchSpace({"c": Categorical([1, True, 1.0, None])})
    assert [space.decode([u])["c"] for u in (0.1, 0.3, 0.6, 0.9)] == [1, True, 1.0, None]
    assert type(space.decode([0.6])["c"]) is float


def test_optuna_distributions_convert():
    optuna = pytest.importorskip("optuna")
    d = optuna.distributions
    space = as_space(
        {
            "lr": d.FloatDistribution(1e-3, 1.0, log=True),
            "k": d.IntDistribution(1, 9, step=2),
            "c": d.CategoricalDistribution(["x", "y"]),
        }
    )
    assert space == SearchSpace(
        {"lr": Float(1e-3, 1.0, log=True), "k": Int(1, 9, step=2), "c": Categorical(["x", "y"])}
    )


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"type": "float", "low": 1.0, "high": 0.0}, "space.p.low"),
        ({"type": "flot", "low": 0, "high": 1}, "space.p.type"),
        ({"low": 0, "high": 1}, "space.p.type"),
        ({"type": "float", "low": 0.0}, "space.p.high"),
        ({"type": "float", "low": 0.0, "high": 1.0, "lg": True}, "space.p.lg"),
        ({"type": "float", "low": 0.0, "high": 1.0, "log": True}, "space.p.low"),
        ({"type": "float", "low": 0.1, "high": 1.0, "log": True, "step": 0.1}, "space.p.step"),
        ({"type": "float", "low": 0.0, "high": 1.0, "step": -1}, "space.p.step"),
        ({"type": "float", "low": "0", "high": 1.0}, "space.p.low"),
        ({"type": "int", "low": 1.5, "high": 3}, "space.p.low"),
        ({"type": "int", "low": 0, "high": 3, "log": True}, "space.p.low"),
        ({"type": "int", "low": 1, "high": 3, "step": 0}, "space.p.step"),
        ({"type": "int", "low": 1, "high": 3, "log": "yes"}, "space.p.log"),
        ({"type": "categorical", "choices": []}, "space.p.choices"),
        ({"type": "categorical", "choices": "ab"}, "space.p.choices"),
        ({"type": "categorical", "choices": ["a", "a"]}, "space.p.choices"),
        ({"type": "categorical", "choices": [[1]]}, "space.p.choices"),
        ({"type": "categorical"}, "space.p.choices"),
        (3, "space.p"),
    ],
)
def test_bad_tables_name_the_field(table, field):
    with pytest.raises(ConfigError) as info:
        SearchSpace.from_dict({"p": table})
    assert info.value.field == field
    assert "\n" not in str(info.value)


def test_encode_names_bad_parameters(space):
    params = space.decode(np.full(space.dim, 0.5))
    with pytest.raises(ConfigError, match=r"space\.depth: must be an integer, got 2\.5"):
        space.encode({**params, "depth": 2.5})
    with pytest.raises(ConfigError, match=r"space\.bogus"):
        space.encode({**params, "bogus": 1})
    with pytest.raises(ConfigError, match=r"space\.kind: 'z' is not one of"):
        space.encode({**params, "kind": "z"})
