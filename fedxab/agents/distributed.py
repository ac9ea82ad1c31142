"""Runs on a broker: a server agent and client agents for each seed of a config.

Three ways to use them, one code path:

- :func:`run_on_broker_config` (``fedxab run``; ``--broker`` picks the transport): every agent in
  this process, on the embedded :class:`~fedxab.broker.memory.MemoryBroker` by default or on Kafka;
- :func:`serve` (``fedxab server``): the server agent alone, every seed in turn, results file at
  the end;
- :func:`host_clients` (``fedxab client``): some clients, every seed in turn.

Whatever the transport, the results are those of the in-process runner for the same config and
seed, bit for bit (tests/integration/test_agents.py, tests/integration/test_kafka_agents.py).
:func:`run_on_broker` hosts every party, so its record holds what each client observed (with its
trials) and, under local DP, the regret curves: its client agents hand them to its server agent
in this process (:meth:`~fedxab.agents.server.ServerAgent.take_local`), never over the broker,
which carries only what a server may learn.

The run id names the run's topics. It is derived from the experiment (the config without its
``[broker]`` settings) and the seed, so a server and clients started separately from the same
config file agree on it without talking.

Each function takes an optional ``metrics``
(:class:`~fedxab.monitoring.metrics.FederationMetrics`): :func:`run_on_broker` and
:func:`serve` give it to the server agent (in :func:`run_on_broker` the client agents add their
clients' epsilon to it), :func:`host_clients` to the client agent (its own clients' view).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fedxab.agents.client import ClientAgent
from fedxab.agents.server import ServerAgent
from fedxab.broker.base import Broker
from fedxab.config import Config
from fedxab.errors import FedxabError
from fedxab.results import RunRecord, RunResults
from fedxab.run.assembly import Functions, server_family
from fedxab.run.identity import run_id_for
from fedxab.run.job import (
    RunStartCallback,
    announce_seeds,
    client_slices,
    collect_results,
    run_seeds,
)
from fedxab.run.observe import ProgressCallback

if TYPE_CHECKING:
    from fedxab.monitoring.metrics import FederationMetrics
    from fedxab.objectives.families import ClientFamily
    from fedxab.objectives.history import TrialRecord
    from fedxab.run.finished import FinishedRuns

__all__ = [
    "client_agent",
    "host_clients",
    "run_id_for",
    "run_on_broker",
    "run_on_broker_config",
    "serve",
]

CHECKPOINTS_DIRNAME = "checkpoints"
"""``fedxab run`` on Kafka: the servers' checkpoints, in the output directory."""


def _namespace(config: Config) -> str:
    return "fedxab" if config.broker is None else config.broker.namespace


def _server_agent(
    config: Config,
    seed: int,
    broker: Broker,
    checkpoint_dir: str | Path | None,
    progress: ProgressCallback | None,
    metrics: FederationMetrics | None = None,
    resume: bool | None = None,
    family: ClientFamily | None = None,
    local_clients: bool = False,
    sessions: dict[str, str] | None = None,
) -> ServerAgent:
    run_id = run_id_for(config, seed)
    job = [run_id_for(config, s) for s in config.run.seeds]
    return ServerAgent(
        config,
        seed,
        broker,
        run_id=run_id,
        namespace=_namespace(config),
        checkpoint=None if checkpoint_dir is None else Path(checkpoint_dir) / f"{run_id}.ckpt",
        progress=progress,
        metrics=metrics,
        known_runs=job,
        resume=resume,
        family=family,
        local_clients=local_clients,
        sessions=sessions,
    )


def client_agent(
    config: Config,
    seed: int,
    broker: Broker,
    ids: list[int],
    metrics: FederationMetrics | None = None,
    privacy_only: bool = False,
    functions: Functions | None = None,
    family: ClientFamily | None = None,
    server: ServerAgent | None = None,
    replay_trials: Mapping[int, Sequence[TrialRecord]] | None = None,
) -> ClientAgent:
    """The client agent of clients ``ids`` in run ``seed`` of ``config`` (``family``: see
    :func:`~fedxab.run.assembly.build_run`; ``server``: the server agent of this process;
    ``replay_trials``: by client, the trials of the finished run this one continues)."""
    return ClientAgent(
        config,
        seed,
        broker,
        run_id=run_id_for(config, seed),
        client_ids=ids,
        namespace=_namespace(config),
        metrics=metrics,
        metrics_privacy_only=privacy_only,
        functions=functions,
        family=family,
        server=server,
        replay_trials=replay_trials,
    )


async def run_on_broker(
    config: Config,
    seed: int,
    broker: Broker,
    *,
    hosts: int = 1,
    checkpoint_dir: str | Path | None = None,
    resume: bool | None = None,
    progress: ProgressCallback | None = None,
    metrics: FederationMetrics | None = None,
    functions: Functions | None = None,
) -> RunRecord:
    """One seed: a server agent and ``hosts`` client agents on ``broker``, in this process
    (``functions``: the clients' own objectives, in place of the config's; ``resume``: see
    :class:`~fedxab.agents.server.ServerAgent`). An error of one agent stops the others and is
    raised as it is (the first :class:`~fedxab.errors.FedxabError` among them, if any)."""
    assert config.federation is not None
    # a simulated family is drawn once for every agent here (users' own objectives: each client
    # agent loads its clients', the server has none)
    family = server_family(config, seed) if functions is None else None
    server = _server_agent(
        config, seed, broker, checkpoint_dir, progress, metrics, resume, family, local_clients=True
    )
    agents = [
        client_agent(
            config,
            seed,
            broker,
            ids,
            metrics,
            privacy_only=True,
            functions=functions,
            family=family,
            server=server,
        )
        for ids in client_slices(config.federation.clients, hosts)
    ]
    try:
        async with asyncio.TaskGroup() as group:
            record = group.create_task(server.run())
            for agent in agents:
                group.create_task(agent.run())
    except BaseExceptionGroup as failed:
        explained = _first_explained(failed)
        if explained is None:
            raise
        raise explained from None
    return record.result()


def _first_explained(group: BaseExceptionGroup) -> FedxabError | None:
    """The first error fedxab explains (a :class:`~fedxab.errors.FedxabError`) in ``group``,
    nested groups included."""
    for error in group.exceptions:
        if isinstance(error, FedxabError):
            return error
        if isinstance(error, BaseExceptionGroup):
            found = _first_explained(error)
            if found is not None:
                return found
    return None


def run_on_broker_config(
    config: Config,
    broker_factory: Callable[[], Broker],
    progress: ProgressCallback | None = None,
    *,
    on_run_start: RunStartCallback | None = None,
    hosts: int = 1,
    metrics: FederationMetrics | None = None,
    functions: Functions | None = None,
    finished: FinishedRuns | None = None,
) -> RunResults:
    """Every seed of ``config``, all agents in this process, each seed on a fresh broker
    connection (``finished``: see :func:`~fedxab.run.job.run_seeds`).

    With ``finished`` on Kafka, whose topics outlive this process, the server checkpoints each
    phase next to the finished runs (``DIR/checkpoints``): with ``finished.resume`` an
    interrupted seed continues from its checkpoint; without it, a seed whose topics already
    hold broadcasts is refused (:class:`~fedxab.errors.RunConflictError`)."""
    on_kafka = config.broker is not None and config.broker.url.startswith("kafka://")
    kept = finished if on_kafka else None  # the finished runs whose checkpoints are kept
    checkpoint_dir = None if kept is None else kept.directory.parent / CHECKPOINTS_DIRNAME

    async def one(seed: int) -> RunRecord:
        async with broker_factory() as broker:
            return await run_on_broker(
                config,
                seed,
                broker,
                hosts=hosts,
                checkpoint_dir=checkpoint_dir,
                resume=None if kept is None else kept.resume,
                progress=progress,
                metrics=metrics,
                functions=functions,
            )

    return run_seeds(
        config, lambda seed: asyncio.run(one(seed)), on_run_start=on_run_start, finished=finished
    )


async def serve(
    config: Config,
    broker: Broker,
    *,
    checkpoint_dir: str | Path | None = None,
    progress: ProgressCallback | None = None,
    on_run_start: RunStartCallback | None = None,
    metrics: FederationMetrics | None = None,
) -> RunResults:
    """The server side of every seed of ``config`` (one after the other) on ``broker``. Each
    run's session stays known to the later runs' server agents, whose lobby welcomes a client
    agent of an earlier run (:class:`~fedxab.agents.server.ServerAgent`)."""
    sessions: dict[str, str] = {}
    runs = [
        await _server_agent(
            config, seed, broker, checkpoint_dir, progress, metrics, sessions=sessions
        ).run()
        for seed in announce_seeds(config, on_run_start)
    ]
    return collect_results(config, runs)


async def host_clients(
    config: Config,
    broker: Broker,
    client_ids: list[int],
    *,
    metrics: FederationMetrics | None = None,
    functions: Functions | None = None,
    replay: Mapping[int, Mapping[int, Sequence[TrialRecord]]] | None = None,
) -> RunResults:
    """Clients ``client_ids`` for every seed of ``config`` in turn (``functions``: the clients'
    own objectives, in place of the config's; ``replay``: by seed, each client's trials of the
    finished run a continued run replays, :func:`~fedxab.run.continuation.continue_party`);
    their own results
    (:meth:`~fedxab.agents.client.ClientAgent.own_record`: what each observed, its trials, its
    epsilon), which under local DP only they have."""
    runs = []
    for seed in config.run.seeds:
        agent = client_agent(
            config,
            seed,
            broker,
            client_ids,
            metrics,
            functions=functions,
            replay_trials=(replay or {}).get(seed),
        )
        t0 = time.perf_counter()
        await agent.run()
        runs.append(agent.own_record(time.perf_counter() - t0))
    return collect_results(config, runs)
