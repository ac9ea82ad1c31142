"""Every registered federated algorithm runs end to end through the in-process runner.

Small sizes; checks that each client used exactly its budget (the runner raises otherwise), that
the results are reproducible from the seed, and that only summary statistics travel: every
message of a run is decoded and inspected for raw rewards.
"""

import numpy as np
import pytest
from config_factory import sim_config
from fts_settings import CHEAP_FTS, CHEAP_TS

from fedxab.agents.federation import Federation
from fedxab.algorithms.registry import FEDERATED
from fedxab.seeding import stream

PARAMS = {
    "dpfedpne": {"epsilon": 0.5, "privacy_delta": 1e-3},
    "ftsde": {**CHEAP_FTS, "regions": 2},
    "dpftsde": {**CHEAP_FTS, "regions": 2, "q": 0.5},
    "ts": CHEAP_TS,
}
# one evaluation per round: keep them short (DP-FTS-DE shortest: its RDP accountant's CPU grows
# with the releases, budget - n_init; 30 is n_init = 10 points and 20 iterations)
BUDGETS = {"ftsde": 80, "dpftsde": 30, "ts": 80, "fedtpe": 80}


def _config(
    name, budget=600, clients=4, objective="garland", heterogeneity="offset", seed=0, **federation
):
    return sim_config(
        name,
        clients=clients,
        budget=budget,
        objective={"name": objective, "noise": {"name": "uniform", "half_width": 0.1}},
        heterogeneity=heterogeneity,
        params=PARAMS.get(name, {}),
        run={"seed": seed, "repeats": 1},
        federation=federation,
    )


@pytest.mark.parametrize("name", sorted(FEDERATED))
def test_runs_to_the_budget_and_is_reproducible(name):
    budget = BUDGETS.get(name, 600)
    first = Federation(_config(name, budget), seed=0).run()
    again = Federation(_config(name, budget), seed=0).run()
    assert first.evaluations == 4 * budget
    assert np.array_equal(first.cumulative_regret, again.cumulative_regret)
    assert np.array_equal(first.recommendation, again.recommendation)
    assert np.all(np.diff(first.cumulative_regret) >= -1e-12)


def test_pfpne_on_input_shifts_and_himmelblau():
    rec = Federation(_config("pfpne", objective="himmelblau", heterogeneity="shift"), 1).run()
    assert rec.local_cumulative_regret is not None
    assert rec.local_cumulative_regret[-1] >= 0


def test_fedpne_on_landmine_fields(landmine):
    fed = Federation(
        _config("fedpne", budget=60, clients=3, objective="landmine", heterogeneity="fields"), 0
    )
    rec = fed.run()
    assert [c.field for c in fed.family.clients] == [0, 1, 2]
    assert rec.evaluations == 180
    assert 0.0 <= rec.simple_regret <= 1.0


def test_landmine_fields_can_be_assigned_at_random_as_in_the_papers(landmine):
    def fields(seed):
        config = _config(
            "fedpne",
            budget=10,
            clients=6,
            objective="landmine",
            heterogeneity="fields",
            seed=seed,
            field_assignment="random",
        )
        return [c.field for c in Federation(config, seed).family.clients]

    for seed in (0, 1):
        drawn = stream(seed, "landmine-fields").integers(0, 29, size=6).tolist()
        assert fields(seed) == drawn
    assert fields(0) != fields(1) and fields(0) != list(range(6))
