"""Synthetic objectives, the numerical maximiser, the registry and FunctionObjective.

Reference numbers: spec-fedpne-pfpne §9 and spec-hct-poo-parallel §4.2 / §4.4.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numeric_maxima import garland_cusps, grid_and_refined_max
from scipy.optimize import brentq, minimize_scalar

from fedxab.errors import ConfigError, ObjectiveError
from fedxab.objectives import (
    OBJECTIVES,
    Ackley,
    DoubleSine,
    FunctionObjective,
    Garland,
    Himmelblau,
    Objective,
    Rastrigin,
    SineProduct,
    make_objective,
    maximize_on_box,
)
from fedxab.objectives.synthetic import (
    ACKLEY_PYXAB_BOUND,
    ackley_minimum,
    rastrigin_coordinate_bound,
)

_CASES = {
    "garland": Garland(),
    "doublesine": DoubleSine(),
    "doublesine-raw": DoubleSine(normalized=False),
    "himmelblau": Himmelblau(),
    "himmelblau-raw": Himmelblau(normalized=False),
    "rastrigin-1d": Rastrigin(dim=1),
    "rastrigin-2d": Rastrigin(dim=2),
    "ackley": Ackley(),
    "ackley-pyxab": Ackley(bound="pyxab"),
    "sineproduct": SineProduct(),
    "sineproduct-printed": SineProduct(printed=True),
}
ALL_OBJECTIVES = list(_CASES.values())
IDS = list(_CASES)


# ------------------------------------------------------------------------------------------
# Worked numbers from the specs


def test_garland_worked_numbers() -> None:
    g = Garland()
    assert g.optimum_value == pytest.approx(0.9977723912, abs=1e-10)
    assert g.optimum_value == 4 * (math.pi / 6) * (1 - math.pi / 6)
    assert g.maximizer[0] == pytest.approx(math.pi / 6, abs=1e-15)
    assert g([math.pi / 6])[0] == pytest.approx(g.optimum_value, abs=1e-7)
    # Runner-up local maximum 3 pi / 20 with gap ~1.1e-3.
    runner_up = g([3 * math.pi / 20])[0]
    assert runner_up == pytest.approx(0.996691, abs=1e-6)
    assert g.optimum_value - runner_up == pytest.approx(1.08e-3, abs=1e-4)
    np.testing.assert_allclose(g([[0.0], [1.0]]), 0.0, atol=1e-15)


def test_sineproduct_worked_numbers() -> None:
    s = SineProduct()
    assert s.optimum_value == pytest.approx(0.9755991, abs=1e-7)
    assert s.maximizer[0] == pytest.approx(0.8675262, abs=1e-7)

    # x* to 1e-9: an independent root of the derivative of sin(13x) sin(27x).
    def deriv(x: float) -> float:
        return 13 * math.cos(13 * x) * math.sin(27 * x) + 27 * math.sin(13 * x) * math.cos(27 * x)

    x_ref = brentq(deriv, 0.86, 0.875, xtol=1e-15)
    assert abs(s.maximizer[0] - x_ref) < 1e-9
    # Second local maximum 0.933836 near 0.39842.
    r = minimize_scalar(lambda x: -s([x])[0], bounds=(0.35, 0.45), method="bounded")
    assert -r.fun == pytest.approx(0.933836, abs=1e-6)
    assert r.x == pytest.approx(0.39842, abs=1e-4)
    p = SineProduct(printed=True)
    assert p.optimum_value == pytest.approx(0.7377996, abs=1e-7)
    assert p.maximizer[0] == s.maximizer[0]
    t = np.linspace(0, 1, 100_001).reshape(-1, 1)
    assert p(t).min() == pytest.approx(0.2715, abs=1e-4)


def test_himmelblau_maximizers() -> None:
    h = Himmelblau()
    spec = np.array(
        [[3.0, 2.0], [-2.805118, 3.131312], [-3.779310, -3.283186], [3.584428, -1.848126]]
    )
    assert h.maximizers.shape == (4, 2)
    np.testing.assert_allclose(h.maximizers, spec, atol=1e-6)
    np.testing.assert_allclose(h(h.maximizers), 1.0, atol=1e-13)
    raw = Himmelblau(normalized=False)
    np.testing.assert_allclose(raw(raw.maximizers), 0.0, atol=1e-10)
    assert raw([5.0, 5.0])[0] == -890.0
    assert h([5.0, 5.0])[0] == 0.0
    with pytest.raises(ValueError):
        h.maximizers[0, 0] = 1.0  # read-only


def test_rastrigin_bound_and_normalisation() -> None:
    b = rastrigin_coordinate_bound()
    assert b == pytest.approx(20.2513, abs=1e-4)
    r = minimize_scalar(
        lambda x: -10 - x * x + 10 * math.cos(2 * math.pi * x),
        bounds=(0.4, 0.6),
        method="bounded",
        options={"xatol": 1e-12},
    )
    assert abs(-r.fun - b) < 1e-9
    assert r.x == pytest.approx(0.5025, abs=1e-4)
    f = Rastrigin(dim=3)
    assert f.bound == pytest.approx(3 * b)
    assert f(np.zeros(3))[0] == 1.0
    assert f(np.full(3, r.x))[0] == pytest.approx(0.0, abs=1e-12)  # exactly onto [0, 1]
    raw = Rastrigin(dim=3, normalized=False)
    assert raw(np.full(3, r.x))[0] == pytest.approx(-3 * 20.2513, abs=3e-4)
    # PyXAB's 20 p would overshoot below -1:
    assert raw(np.full(3, r.x))[0] / (20 * 3) == pytest.approx(-1.0126, abs=1e-4)
    assert Rastrigin().dim == 10


def test_ackley_bounds() -> None:
    a = Ackley()
    assert a.dim == 2
    assert a(np.zeros(2))[0] == 1.0
    raw = Ackley(normalized=False)
    assert raw([1.0, 1.0])[0] == pytest.approx(20 * math.exp(-0.2) - 20, abs=1e-12)
    assert abs(ACKLEY_PYXAB_BOUND - 4.987933) < 1e-6
    assert Ackley(bound="pyxab").bound == ACKLEY_PYXAB_BOUND
    # The exact bound = |min on [-1, 1]^2| ~ 4.6752 (spec §9 table), against grid + refine.
    neg = FunctionObjective(lambda X: -raw(X), raw.domain, vectorized=True)
    _, refined = grid_and_refined_max(neg)
    assert a.bound == pytest.approx(4.6752, abs=1e-4)
    assert refined - 1e-9 <= a.bound <= refined + 1e-6
    val, x = ackley_minimum(2)
    assert raw(np.array(x))[0] == pytest.approx(val, abs=1e-12)
    t = np.linspace(-1, 1, 301)
    A, B = np.meshgrid(t, t)
    y = a(np.column_stack([A.ravel(), B.ravel()]))
    assert y.min() >= 0.0 and y.max() <= 1.0
    # Three dimensions: the reduction agrees with a direct search on the box.
    direct = maximize_on_box(lambda X: -Ackley(dim=3, normalized=False)(X), [[-1, 1]] * 3)
    assert ackley_minimum(3)[0] <= -direct.value + 1e-9


def test_doublesine_values() -> None:
    raw = DoubleSine(normalized=False)
    assert raw([0.5])[0] == 0.0
    np.testing.assert_allclose(raw([[0.0], [1.0]]), -1.0, atol=1e-12)
    t = np.linspace(0, 1, 200_001).reshape(-1, 1)
    y = raw(t)
    assert y.max() <= 0.0
    assert y.min() == pytest.approx(-1.0, abs=1e-12)
    u = np.abs(2 * t[:, 0] - 1)
    e1, e2 = -math.log2(0.3), -math.log2(0.8)
    assert np.all(y <= -(u**e1) + 1e-12) and np.all(y >= -(u**e2) - 1e-12)
    norm = DoubleSine()
    assert norm.optimum_value == 1.0 and norm.maximizer[0] == 0.5
    np.testing.assert_allclose(norm(t), y + 1.0, atol=1e-15)


# ------------------------------------------------------------------------------------------
# Generic properties of every objective


@pytest.mark.parametrize("obj", ALL_OBJECTIVES, ids=IDS)
def test_optimum_matches_numerical_maximum(obj: Objective) -> None:
    extra = garland_cusps() if isinstance(obj, Garland) else None
    grid_max, refined = grid_and_refined_max(obj, extra)
    assert obj.optimum_value >= grid_max - 1e-9
    assert abs(obj.optimum_value - refined) <= 1e-6
    assert obj(obj.maximizer)[0] == pytest.approx(obj.optimum_value, abs=1e-7)
    assert np.all(obj.maximizer >= obj.domain[:, 0]) and np.all(obj.maximizer <= obj.domain[:, 1])


@pytest.mark.parametrize(
    "obj", [*ALL_OBJECTIVES, Rastrigin(), Ackley(dim=4)], ids=[*IDS, "rastrigin-10d", "ackley-4d"]
)
def test_vectorized_equals_row_by_row(obj: Objective) -> None:
    rng = np.random.default_rng(1)
    lo, hi = obj.domain[:, 0], obj.domain[:, 1]
    X = lo + rng.random((200, obj.dim)) * (hi - lo)
    X[0] = obj.maximizer
    batch = obj(X)
    assert batch.shape == (200,)
    rows = np.array([obj(x)[0] for x in X])
    np.testing.assert_array_equal(batch, rows)
    assert np.all(np.isfinite(batch))


@pytest.mark.parametrize("obj", [Garland(), Himmelblau(), Rastrigin(dim=3)], ids=["g", "h", "r"])
def test_shape_errors(obj: Objective) -> None:
    with pytest.raises(ObjectiveError, match=r"shape \(n, "):
        obj(np.zeros((4, obj.dim + 1)))
    with pytest.raises(ObjectiveError):
        obj(np.zeros((2, 2, obj.dim)))


def test_regret_uses_optimum() -> None:
    g = Garland()
    np.testing.assert_allclose(g.regret([[0.0]]), [g.optimum_value])


# ------------------------------------------------------------------------------------------
# maximize_on_box


def test_maximize_on_box_cusp_and_subbox() -> None:
    g = Garland()
    res = maximize_on_box(g, [[0.0, 0.4]])
    # Best cusp inside [0, 0.4] is 7 pi / 60 (8 pi / 60 = 0.4189 is outside).
    x7 = 7 * math.pi / 60
    assert res.x[0] == pytest.approx(x7, abs=1e-12)
    assert res.value == pytest.approx(4 * x7 * (1 - x7), abs=1e-7)


def test_maximize_on_box_degenerate_and_candidates() -> None:
    h = Himmelblau()
    res = maximize_on_box(h, [[3.0, 3.0], [-5.0, 5.0]])
    assert res.x[0] == 3.0 and res.x[1] == pytest.approx(2.0, abs=1e-6)
    assert res.value == pytest.approx(1.0, abs=1e-12)
    res = maximize_on_box(h, [[-5, 5], [-5, 5]], candidates=h.maximizers[1:2], n_samples=100)
    assert res.value == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ConfigError, match="box"):
        maximize_on_box(h, [[1.0, 0.0], [0.0, 1.0]])


def test_maximize_on_box_high_dim_separable() -> None:
    r = Rastrigin(dim=6)
    res = maximize_on_box(r, r.domain, separable=True)
    assert res.value == pytest.approx(1.0, abs=1e-10)
    np.testing.assert_allclose(res.x, 0.0, atol=1e-6)


# ------------------------------------------------------------------------------------------
# Registry


def test_registry_names_and_errors() -> None:
    assert set(OBJECTIVES) == {
        "garland",
        "doublesine",
        "himmelblau",
        "rastrigin",
        "ackley",
        "sineproduct",
        "landmine",
        "gpgrid",
    }
    for name, cls in OBJECTIVES.items():
        if name != "landmine":  # needs its data file; tests/unit/test_landmine.py covers it
            assert isinstance(make_objective(name), cls)
    assert isinstance(make_objective("Double_Sine"), DoubleSine)
    assert make_objective("rastrigin", dim=3).dim == 3
    with pytest.raises(ConfigError, match="allowed: garland, doublesine") as exc:
        make_objective("branin")
    assert exc.value.field == "objective.name"
    with pytest.raises(ConfigError, match="allowed: dim, normalized") as exc:
        make_objective("rastrigin", dims=3)
    assert exc.value.field == "objective.dims"
    with pytest.raises(ConfigError) as exc:
        make_objective("rastrigin", dim=0)
    assert exc.value.field == "objective.dim"
    with pytest.raises(ConfigError) as exc:
        make_objective("himmelblau", normalized="yes")
    assert exc.value.field == "objective.normalized"
    with pytest.raises(ConfigError, match="'exact' or 'pyxab'") as exc:
        make_objective("ackley", bound="loose")
    assert exc.value.field == "objective.bound"
    with pytest.raises(ConfigError, match="allowed: none"):
        make_objective("garland", normalized=True)


# ------------------------------------------------------------------------------------------
# FunctionObjective


def test_function_objective_scalar_and_vectorized() -> None:
    calls: list[np.ndarray] = []

    def f(x: np.ndarray) -> float:
        calls.append(x)
        return -float(np.sum((x - 0.25) ** 2))

    obj = FunctionObjective(f, [[0, 1], [0, 1]], optimum_value=0.0, maximizer=[0.25, 0.25])
    X = np.array([[0.0, 0.0], [0.25, 0.25], [1.0, 0.5]])
    np.testing.assert_allclose(obj(X), [-0.125, 0.0, -0.625])
    assert len(calls) == 3 and all(c.shape == (2,) for c in calls)
    np.testing.assert_allclose(obj.regret(X), [0.125, 0.0, 0.625])
    vec = FunctionObjective(lambda Z: -np.sum((Z - 0.25) ** 2, axis=1), obj.domain, vectorized=True)
    np.testing.assert_array_equal(vec(X), obj(X))
    assert obj.name == "f"


def test_function_objective_rejects_bad_values() -> None:
    obj = FunctionObjective(lambda x: float("nan") if x[0] > 0.5 else 1.0, [[0, 1]], name="user")
    assert obj([[0.1]])[0] == 1.0
    with pytest.raises(ObjectiveError, match=r"user: returned nan at point \[0\.75\]"):
        obj([[0.1], [0.75]])
    with pytest.raises(ObjectiveError, match="finite real number"):
        FunctionObjective(lambda x: "1.0", [[0, 1]])([[0.5]])
    with pytest.raises(ObjectiveError, match="finite real number"):
        FunctionObjective(lambda x: math.inf, [[0, 1]])([[0.5]])
    with pytest.raises(ObjectiveError, match=r"at point \[0\.5, 0\.25\]"):
        FunctionObjective(
            lambda Z: np.where(Z[:, 1] < 0.3, np.nan, 1.0), [[0, 1], [0, 1]], vectorized=True
        )([[0.1, 0.9], [0.5, 0.25]])
    with pytest.raises(ObjectiveError, match="2 values for 1 points"):
        FunctionObjective(lambda Z: np.zeros(2), [[0, 1]], vectorized=True)([[0.5]])
    with pytest.raises(ObjectiveError, match="maximizer"):
        FunctionObjective(lambda x: 0.0, [[0, 1]], maximizer=[0.1, 0.2])
