"""The example configs: every algorithm the CLI accepts has one, and every one runs.

Each ``examples/*.toml`` is loaded as ``fedxab run`` loads it and run shrunk through the
in-process runners: one repeat, at most ``BUDGET`` evaluations per client and ``MAX_CLIENTS``
clients; Bayesian-optimisation algorithms (their clients take ``n_init``) get their initial
points and ``BO_ITERATIONS`` iterations. Everything else (objective, noise, heterogeneity,
algorithm and privacy parameters) is the example's own. Examples on the landmine data set need
the data and scikit-learn (the ``landmine`` fixture, conftest.py) and are skipped without them.
``examples/sklearn_tuning/`` (a user's objective in its own module) has its own test,
test_sklearn_example.py.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from fedxab.agents.federation import run_federated_config
from fedxab.agents.local import run_config
from fedxab.algorithms.registry import ALGORITHMS, FEDERATED, PRIVATE
from fedxab.config import Config, config_from_dict, load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = sorted(EXAMPLES.glob("*.toml"))
BUDGET = 200
"""Evaluations per client of a shrunk run (at most the example's own budget)."""
MAX_CLIENTS = 4
"""Clients of a shrunk run: several, so every federated path runs; few, because a regret
evaluation averages every client's function (SVM fits for dpftsde_landmine: the file took 23.5
CPU-s with 10 clients, 10 with 4)."""
BO_ITERATIONS = 3
"""Iterations after the initial points for algorithms whose budget counts BO iterations."""
TOL = 1e-9


def _unvalidated(path: Path) -> Config:
    """The example's config without building its objective (landmine needs the data)."""
    return load_config(path, validate=False)


def _n_init(config: Config) -> int | None:
    """The initial points of a Bayesian-optimisation algorithm (None for the others)."""
    if not config.is_federated:
        return None
    default = inspect.signature(FEDERATED[config.algorithm.name][1]).parameters.get("n_init")
    if default is None:
        return None
    return int(config.algorithm.params.get("n_init", default.default))


def _shrunk(config: Config) -> Config:
    """``config`` with one repeat, a small budget, at most MAX_CLIENTS clients and no ledger
    file (an in-memory one: nothing is written next to the repository)."""
    n_init = _n_init(config)
    budget = min(config.run.budget, BUDGET if n_init is None else n_init + BO_ITERATIONS)
    config = config.with_run(budget=budget, repeats=1)
    if not config.is_federated:
        return config
    data = config.to_dict()
    data["federation"]["clients"] = min(data["federation"]["clients"], MAX_CLIENTS)
    data.get("privacy", {}).pop("ledger", None)
    return config_from_dict(data)


def test_there_are_examples_and_they_follow_the_naming_rule():
    assert len(FILES) >= len(ALGORITHMS) + len(FEDERATED)
    for path in FILES:
        prefix = _unvalidated(path).algorithm.name.replace("-", "_") + "_"
        assert path.stem.startswith(prefix), f"{path.name}: expected {prefix}<objective>.toml"


def test_every_algorithm_name_has_an_example():
    names = {*ALGORITHMS, *FEDERATED}
    covered: dict[str, list[str]] = {}
    for path in FILES:
        covered.setdefault(_unvalidated(path).algorithm.name, []).append(path.name)
    missing = sorted(names - covered.keys())
    assert not missing, (
        f"algorithms without an example config in examples/: {', '.join(missing)}; add "
        "examples/<algorithm>_<objective>.toml (with '_' for '-') with [algorithm] name = ..."
    )
    unknown = sorted(covered.keys() - names)
    assert not unknown, f"examples of unregistered algorithms: {unknown}: {covered}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_the_example_runs_shrunk_and_every_client_uses_its_budget(path, request):
    if _unvalidated(path).objective.name == "landmine":
        request.getfixturevalue("landmine")  # skips without the data or scikit-learn
    example = load_config(path)
    config = _shrunk(example)
    name, budget = config.algorithm.name, config.run.budget
    clients = config.federation.clients if config.is_federated else 1
    assert budget <= BUDGET and config.run.repeats == 1

    results = (run_federated_config if config.is_federated else run_config)(config)

    assert results.algorithm == name
    (record,) = results.runs
    assert record.seed == example.run.seed
    assert record.evaluations == clients * budget
    if config.is_federated:
        assert [c.evaluations for c in record.clients] == [budget] * clients
        assert record.communication["rounds"] >= 1
    # the answer: one finite point inside the search box, at most the objective's range from f*
    rec = np.asarray(record.recommendation, dtype=np.float64)
    domain = config.domain
    assert rec.shape == (domain.shape[0],)
    assert np.all(np.isfinite(rec))
    assert np.all(domain[:, 0] - TOL <= rec) and np.all(rec <= domain[:, 1] + TOL), (rec, domain)
    assert -TOL <= record.simple_regret <= 1.0 + TOL  # every objective here has values in [0, 1]
    # the regret curve reaches the last round; each pull's regret lies in [0, 1]
    assert record.rounds[-1] == budget
    curve = record.cumulative_regret
    assert np.all(np.isfinite(curve)) and np.all(np.diff(curve) >= -TOL)
    assert -TOL <= curve[-1] <= budget + TOL

    if name in PRIVATE:
        privacy = record.privacy
        assert not privacy["withdrawn"]  # nobody ran out of privacy budget in so few phases
        releases, epsilon = privacy["releases"], np.asarray(privacy["epsilon"])
        assert len(releases) == clients and min(releases) >= 1
        assert np.all(np.isfinite(epsilon)) and np.all(epsilon > 0)
        if config.privacy.budget_epsilon is not None:
            assert np.all(epsilon <= config.privacy.budget_epsilon + TOL)
        if name == "dpftsde":  # T = budget - n_init releases, rounds 0..T-1 (spec-dpftsde §9.14)
            assert releases == [budget - _n_init(config)] * clients
