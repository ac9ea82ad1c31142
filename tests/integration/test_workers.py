"""``[run] workers``: clients hosted in worker processes give exactly the one-process record.

Each comparison runs the same config and seed with ``workers = 1`` and ``workers = N`` and
compares the whole record but the wall time: regret curves, recommendation, communication,
client outcomes and, for DP-FTS-DE (central DP), the privacy block.
"""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
from config_factory import sim_config
from fts_settings import CHEAP_FTS

from fedxab.agents import workers as workers_module
from fedxab.agents.federation import Federation
from fedxab.agents.workers import ClientWorkers, WorkerError
from fedxab.errors import ConfigError

SEED = 3


def site_value(x, client_id):
    """A user's black box per site (module level: worker processes import it by name)."""
    return -float(np.sum((np.asarray(x) - 0.2 - 0.1 * client_id) ** 2))


def failing_site(x, client_id):
    if client_id == 4:
        raise ValueError("site 4's instrument is offline")
    return site_value(x, client_id)


def _config(
    algorithm="fedpne", heterogeneity="offset", clients=5, budget=300, workers=1, params=None,
    **sections,
):  # fmt: skip
    run = {"workers": workers, **sections.pop("run", {})}
    return sim_config(
        algorithm,
        clients=clients,
        budget=budget,
        heterogeneity=heterogeneity,
        params=params,
        run=run,
        **sections,
    )


def _record(config, **kwargs) -> dict:
    record = Federation(config, SEED, **kwargs).run().to_dict()
    record.pop("wall_time_s")
    return record


@pytest.mark.parametrize(
    ("algorithm", "heterogeneity", "workers"),
    [("fedpne", "offset", 2), ("pfpne", "shift", 3), ("fed1ucb", "offset", 2)],
)
def test_clients_in_workers_give_the_one_process_record(algorithm, heterogeneity, workers):
    one = _record(_config(algorithm, heterogeneity))
    assert one["communication"]["rounds"] > 1
    assert _record(_config(algorithm, heterogeneity, workers=workers)) == one


def test_central_dp_runs_in_workers_with_the_same_privacy_block():
    extra = {
        "params": {**CHEAP_FTS, "q": 0.5, "z": 1.0, "clip": 11.0},
        "privacy": {"accountant": "rdp"},
    }
    config = _config("dpftsde", "none", clients=4, budget=12, **extra)
    one = _record(config)
    assert max(one["privacy"]["epsilon"]) > 0
    assert _record(_config("dpftsde", "none", 4, 12, workers=2, **extra)) == one


def test_users_objective_functions_run_in_workers():
    config = _config(clients=6, budget=200)
    one = _record(config, functions=site_value)
    assert _record(_config(clients=6, budget=200, workers=2), functions=site_value) == one


def test_an_error_in_a_worker_is_raised_in_the_parent_as_it_is_in_one_process():
    for workers in (1, 2):
        with pytest.raises(Exception, match="site 4's instrument is offline") as caught:
            Federation(_config(clients=6, workers=workers), SEED, functions=failing_site).run()
        if workers == 1:
            expected = type(caught.value)
    assert type(caught.value) is expected


def test_a_dead_worker_is_an_error_not_a_hang():
    config = _config(clients=4)
    with ClientWorkers(config, SEED, run_id="r", n_workers=2) as workers:
        workers._processes[1].kill()
        workers._processes[1].join()
        with pytest.raises(WorkerError, match=r"fedxab-clients-2-3 died"):
            workers.outcomes()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"workers": 0}, "run.workers"),
        ({"workers": 2, "algorithm": "dpfedpne"}, "run.workers"),
    ],
)
def test_workers_that_cannot_be_are_refused_naming_the_field(changes, field):
    algorithm = changes.pop("algorithm", "fedpne")
    extra = (
        {"params": {"epsilon": 0.5, "privacy_delta": 1e-3}, "privacy": {"accountant": "rdp"}}
        if algorithm == "dpfedpne"
        else {}
    )
    with pytest.raises(ConfigError, match=field):
        Federation(_config(algorithm, **changes, **extra), SEED).run()


def _spawn_only(monkeypatch):
    """Workers started as on a platform without fork."""
    spawn = multiprocessing.get_context("spawn")
    monkeypatch.setattr(workers_module, "_context", lambda: spawn)


def test_spawned_workers_give_the_one_process_record(monkeypatch):
    one = _record(_config(clients=6, budget=200), functions=site_value)
    _spawn_only(monkeypatch)
    assert _record(_config(clients=6, budget=200, workers=2), functions=site_value) == one


def test_functions_forked_workers_inherit_need_not_be_picklable():
    def quadratic(x):
        return -float(np.sum((np.asarray(x) - 0.3) ** 2))

    one = _record(_config(), functions=quadratic)
    assert _record(_config(workers=2), functions=quadratic) == one


def test_functions_that_cannot_be_sent_to_spawned_workers_are_refused(monkeypatch):
    _spawn_only(monkeypatch)
    with pytest.raises(ConfigError, match=r"run\.workers.*cannot be pickled"):
        Federation(_config(workers=2), SEED, functions=lambda x: -float(np.sum(x**2))).run()


def test_workers_is_a_deployment_setting_not_part_of_the_experiment():
    """Results files and resumed jobs ignore it: a job may resume with another worker count."""
    assert _config(workers=2).experiment_dict() == _config().experiment_dict()


def test_reproduce_workers_reaches_every_run_and_the_job_processes():
    from fedxab.reproduce.plan import make_plan

    plan = make_plan("dpftsde-synthetic-q", seeds=1, budget=14, clients=4, workers=2)
    assert {pe.config.run.workers for pe in plan.entries} == {2}
    assert make_plan("dpftsde-synthetic-q", **plan.make_args).entries[0].config.run.workers == 2
    assert "--workers 2" in plan.command_line
