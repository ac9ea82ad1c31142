"""minimize_box is scipy's L-BFGS-B bit for bit (the acquisition maximisation of FTS-DE)."""

import numpy as np
import pytest
from scipy.optimize import minimize

from fedxab.algorithms import lbfgsb
from fedxab.algorithms.lbfgsb import minimize_box
from fedxab.algorithms.rff import FeatureFunction, RandomFeatures


def _negated(f: FeatureFunction, box: np.ndarray):
    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = f.value_and_grad(np.clip(x, box[:, 0], box[:, 1]))
        return -value, -grad

    return fun


CASES = [
    # (dim, lengthscale, regions, box): the shared features' rugged landscape, the own GP's
    # smooth one, a piecewise function of two sub-regions, a box other than the unit box
    (6, 0.01, 1, None),
    (3, 0.3, 1, None),
    (2, 0.05, 2, None),
    (4, 0.2, 1, np.array([[-5.0, 5.0], [0.0, 1.0], [1e-3, 2e-3], [-1.0, 3.0]])),
]


@pytest.mark.parametrize(("dim", "lengthscale", "regions", "box"), CASES)
def test_the_iterates_are_minimizes_bit_for_bit(dim, lengthscale, regions, box):
    rng = np.random.default_rng(dim)
    box = np.tile([0.0, 1.0], (dim, 1)) if box is None else box
    features = RandomFeatures.draw(dim, 60, lengthscale, rng)
    weights = rng.standard_normal((regions, 60) if regions > 1 else 60)
    f = FeatureFunction(
        features, weights, (lambda X: (X[:, 0] >= 0.5).astype(int)) if regions > 1 else None
    )
    fun = _negated(f, box)
    for start in rng.uniform(box[:, 0], box[:, 1], (10, dim)):
        x, value = minimize_box(fun, start, box)
        res = minimize(fun, start, jac=True, method="L-BFGS-B", bounds=box)
        np.testing.assert_array_equal(x, res.x)
        assert value == res.fun


def test_the_step_routine_is_used_on_this_scipy():
    """The fast path is taken (scipy 1.15 to 1.17); on another scipy this fails to say it is
    lost, and minimize_box still gives minimize's results through minimize itself."""
    assert lbfgsb._step_routine() is not None


def test_without_the_step_routine_minimize_itself_runs(monkeypatch):
    monkeypatch.setattr(lbfgsb, "_step_routine", lambda: None)
    box = np.tile([0.0, 1.0], (2, 1))
    f = FeatureFunction(RandomFeatures.draw(2, 30, 0.1, np.random.default_rng(1)), np.ones(30))
    fun = _negated(f, box)
    x, value = minimize_box(fun, np.array([0.3, 0.6]), box)
    res = minimize(fun, np.array([0.3, 0.6]), jac=True, method="L-BFGS-B", bounds=box)
    np.testing.assert_array_equal(x, res.x)
    assert value == res.fun
