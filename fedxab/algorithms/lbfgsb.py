"""L-BFGS-B on a box, exactly as ``scipy.optimize.minimize`` runs it, at less cost per step.

The acquisition maximisation of FTS / DP-FTS-DE (App. B.2.6) runs L-BFGS-B from 20 starting
points in every BO iteration of every agent, about 15 evaluations each. ``minimize``'s Python
layers (its option handling, ``ScalarFunction``, ``MemoizeJac``, one result object per iteration)
cost about 100 us per evaluation, more than the feature function itself (``benchmarks/NOTES.md``,
issue 35). :func:`minimize_box` calls scipy's own L-BFGS-B step routine (``setulb``, the
reverse-communication interface that ``minimize`` calls: the routine asks for the function and
gradient at a point, or reports a new iterate or a stop) with ``minimize``'s default options
(10 corrections, ``ftol`` 2.2e-9, ``gtol`` 1e-5, 15,000 iterations and evaluations, 20
line-search steps) and the same caching (the function is called at the clipped start point
first, and again only at a point that differs from the last one), so the iterates, the point and
the value are those of ``minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=box)`` bit for
bit.

The routine is private to scipy: :func:`minimize_box` first checks, once per process, that it
gives ``minimize``'s results bit for bit on a fixed problem, and calls ``minimize`` itself when it
does not, or when the routine is missing or has another signature (a scipy other than 1.15 to
1.17, where its interface was read from).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from scipy.optimize import minimize

__all__ = ["minimize_box"]

Objective = Callable[[np.ndarray], tuple[float, np.ndarray]]

_CORRECTIONS = 10  # minimize's defaults for L-BFGS-B
_FTOL = 2.2204460492503131e-09
_GTOL = 1e-5
_MAX_ITERATIONS = 15000
_MAX_EVALUATIONS = 15000
_MAX_LINE_SEARCH = 20
_EVALUATE, _NEW_ITERATE, _STOP = 3, 1, 5  # the routine's task codes (task[0])


def minimize_box(fun: Objective, x0: np.ndarray, box: np.ndarray) -> tuple[np.ndarray, float]:
    """``(x, f)``: ``minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=box)``'s ``x`` and
    ``fun``; ``fun(x)`` returns the value (a float) and the gradient (D,); ``box`` is (D, 2)."""
    box = np.asarray(box, dtype=float)
    setulb = _step_routine()
    if setulb is None or not np.all(box[:, 0] < box[:, 1]):
        res = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=box)
        return res.x, res.fun
    return _drive(setulb, fun, x0, box)


def _drive(setulb: Callable[..., None], fun: Objective, x0: np.ndarray, box: np.ndarray):
    """L-BFGS-B through the step routine, as ``minimize``'s L-BFGS-B driver calls it."""
    n, m = box.shape[0], _CORRECTIONS
    low, high = box[:, 0].copy(), box[:, 1].copy()
    x = np.clip(np.asarray(x0, dtype=float).ravel(), low, high).astype(np.float64)
    bounded = np.full(n, 2, dtype=np.int32)  # 2: both bounds finite
    work = np.zeros(2 * m * n + 5 * n + 11 * m * m + 8 * m)
    iwork = np.zeros(3 * n, dtype=np.int32)
    task, line_task = np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int32)
    lsave, isave, dsave = np.zeros(4, np.int32), np.zeros(44, np.int32), np.zeros(29)
    factr = _FTOL / np.finfo(float).eps
    at = x.copy()
    value, grad = _evaluated(fun, at)  # minimize evaluates the start point first
    evaluations, iterations = 1, 0
    f: Any = np.array(0.0)  # then the value, a float, as minimize's driver hands it on
    g = np.zeros(n)
    while True:
        g = g.astype(np.float64)
        setulb(m, x, low, high, bounded, f, g, factr, _GTOL, work, iwork, task, lsave, isave,
               dsave, _MAX_LINE_SEARCH, line_task)  # fmt: skip
        if task[0] == _EVALUATE:
            if not np.array_equal(x, at):
                at = x.copy()
                value, grad = _evaluated(fun, at)
                evaluations += 1
            f, g = value, grad
        elif task[0] == _NEW_ITERATE:
            iterations += 1
            if iterations >= _MAX_ITERATIONS:
                task[:] = _STOP, 504
            elif evaluations > _MAX_EVALUATIONS:
                task[:] = _STOP, 502
        else:
            return x, float(f)


def _evaluated(fun: Objective, x: np.ndarray) -> tuple[float, np.ndarray]:
    """``fun`` at a copy of x, as ``minimize`` hands it: a float and a float array."""
    value, grad = fun(x.copy())
    if not np.isscalar(value):
        value = np.asarray(value).item()
    return cast(float, value), np.atleast_1d(np.asarray(grad, dtype=float))


@functools.cache
def _step_routine() -> Callable[..., None] | None:
    """scipy's L-BFGS-B step routine when it gives ``minimize``'s results bit for bit on a fixed
    problem (a sum of cosines in 3 dimensions, from 8 starting points), else None."""
    try:
        from scipy.optimize import _lbfgsb

        setulb = _lbfgsb.setulb
        rng = np.random.default_rng(0)
        freq, phase = rng.normal(0.0, 8.0, (30, 3)), rng.uniform(0.0, 6.0, 30)
        weights = rng.normal(size=30)

        def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
            arg = freq @ x + phase
            return float(np.cos(arg) @ weights), -(np.sin(arg) * weights) @ freq

        box = np.tile([0.0, 1.0], (3, 1))
        for x0 in rng.uniform(0.0, 1.0, (8, 3)):
            x, f = _drive(setulb, fun, x0, box)
            res = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=box)
            if not (np.array_equal(x, res.x) and f == res.fun):
                return None
        return setulb
    except Exception:  # another scipy: its routine is missing or has another interface
        return None
