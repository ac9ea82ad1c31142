"""Runs on a broker: a server agent and client agents for each seed of a config.

``fedxab run`` puts every agent in one process on the embedded :class:`MemoryBroker` (or on Kafka
with ``--broker kafka://HOST:PORT``); ``fedxab server`` and ``fedxab client`` run the same agents in
separate processes. Either way the results are those of the in-process runner for the same config
and seed, bit for bit (tests/integration/test_transport_equivalence.py).

The run id names the run's topics. It is derived from the experiment (the config without
deployment settings) and the seed, so a server and clients started separately from the same
config file agree on it without talking.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from fedxab.agents.client import ClientAgent
from fedxab.agents.local import RunStartCallback, objective_info
from fedxab.agents.server import BarrierPolicy, ProgressCallback, ServerAgent
from fedxab.broker.base import Broker
from fedxab.config import Config
from fedxab.objectives.registry import make_objective
from fedxab.results import RunRecord, RunResults, summarize_communication

__all__ = ["client_slices", "run_id_for", "run_on_broker", "run_on_broker_config"]


def run_id_for(config: Config, seed: int) -> str:
    """``{algorithm}-{hash of the experiment}-s{seed}``: the same for every party of a run."""
    canonical = json.dumps(config.experiment_dict(), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
    return f"{config.algorithm.name}-{digest}-s{seed}"


def client_slices(n_clients: int, hosts: int) -> list[list[int]]:
    """Client ids ``0..n_clients-1`` split into ``hosts`` contiguous, nearly equal slices."""
    hosts = max(1, min(hosts, n_clients))
    bounds = [round(k * n_clients / hosts) for k in range(hosts + 1)]
    return [list(range(bounds[k], bounds[k + 1])) for k in range(hosts)]


async def run_on_broker(
    config: Config,
    seed: int,
    broker: Broker,
    *,
    hosts: int = 1,
    namespace: str = "fedxab",
    checkpoint_dir: str | Path | None = None,
    barrier: BarrierPolicy | None = None,
    progress: ProgressCallback | None = None,
) -> RunRecord:
    """One seed: a server agent and ``hosts`` client agents on ``broker``, in this process."""
    assert config.federation is not None
    run_id = run_id_for(config, seed)
    checkpoint = None if checkpoint_dir is None else Path(checkpoint_dir) / f"{run_id}.ckpt"
    server = ServerAgent(
        config,
        seed,
        broker,
        run_id=run_id,
        namespace=namespace,
        checkpoint=checkpoint,
        barrier=barrier,
        progress=progress,
    )
    agents = [
        ClientAgent(config, seed, broker, run_id=run_id, client_ids=ids, namespace=namespace)
        for ids in client_slices(config.federation.clients, hosts)
    ]
    async with asyncio.TaskGroup() as group:
        record_task = group.create_task(server.run())
        for agent in agents:
            group.create_task(agent.run())
    return record_task.result()


def run_on_broker_config(
    config: Config,
    broker_factory: Callable[[], Broker],
    progress: ProgressCallback | None = None,
    *,
    on_run_start: RunStartCallback | None = None,
    **options: object,
) -> RunResults:
    """Every seed of ``config`` on a broker from ``broker_factory`` (one per seed)."""

    async def one(seed: int) -> RunRecord:
        async with broker_factory() as broker:
            return await run_on_broker(config, seed, broker, progress=progress, **options)  # type: ignore[arg-type]

    runs = []
    seeds = config.run.seeds
    for k, seed in enumerate(seeds):
        if on_run_start is not None:
            on_run_start(k, len(seeds), seed)
        runs.append(asyncio.run(one(seed)))
    objective = make_objective(config.objective.name, **dict(config.objective.params))
    return RunResults(
        config=config.experiment_dict(),
        algorithm=config.algorithm.name,
        objective=objective_info(objective),
        runs=tuple(runs),
        communication=summarize_communication(runs),
    )
