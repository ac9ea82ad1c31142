"""``fedxab topics create|describe|delete``: a job's Kafka topics, for clusters where only
operators create topics (a thin layer over :mod:`fedxab.broker.topics`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from fedxab.cli.common import errors_as_exit_code, load_job, make_console
from fedxab.cli.options import NamespaceOption, RepeatsOption, SeedOption
from fedxab.errors import FedxabError

ConfigArgument = Annotated[
    Path, typer.Argument(help="TOML run configuration of the job.", show_default=False)
]
BrokerOption = Annotated[
    str | None,
    typer.Option(help="kafka://HOST:PORT[,HOST:PORT]; overrides broker.url.", show_default=False),
]


def _job_topics(config: Path, seed, repeats, broker_url, namespace):
    """The job's config, its Kafka broker (not started) and the names of its topics."""
    from fedxab.broker.factory import kafka_broker
    from fedxab.broker.topics import topics_of
    from fedxab.run.identity import run_id_for

    cfg = load_job(config, seed, repeats, None, None, broker_url, None, namespace)
    if cfg.broker is None:
        raise FedxabError(f"{cfg.algorithm.name!r} runs a single agent: it has no topics")
    if not cfg.broker.url.startswith("kafka://"):
        raise FedxabError(
            f"--broker: topics live on Kafka, kafka://HOST:PORT, got {cfg.broker.url!r}"
        )
    names = topics_of(cfg.broker.namespace, [run_id_for(cfg, s) for s in cfg.run.seeds])
    return cfg, kafka_broker(cfg.broker.url, cfg.broker), names


async def _on(broker, work):
    async with broker:
        return await work(broker)


def _table(cfg, states, status: dict[str, str]) -> Table:
    """One row per topic: what the cluster says, and how it differs from the config."""
    from fedxab.broker.topics import differences

    table = Table(title=f"topics on {cfg.broker.url}", title_justify="left")
    for column in ("topic", "status", "partitions", "replication", "settings", "vs config"):
        table.add_column(column, overflow="fold")
    settings = cfg.broker.topic_settings
    for state in states:
        found = differences(state, settings, cfg.broker.max_message_bytes)
        table.add_row(
            state.name,
            status.get(state.name, "exists" if state.exists else "absent"),
            "-" if state.partitions is None else str(state.partitions),
            "-" if state.replication_factor is None else str(state.replication_factor),
            ", ".join(f"{k}={v}" for k, v in sorted(state.configs.items())) or "-",
            "; ".join(found) if found else "as configured",
        )
    return table


def create(
    config: ConfigArgument,
    broker: BrokerOption = None,
    seed: SeedOption = None,
    repeats: RepeatsOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Create the job's topics that do not exist yet (the namespace's lobby and each run's
    broadcast, report, control and ledger topics) with the [broker] partitions,
    replication_factor, retention_ms, ledger_retention_ms and topic_config; existing topics
    are left as they are."""
    from fedxab.broker.topics import create_run_topics, describe_run_topics

    console = make_console()
    with errors_as_exit_code():
        cfg, kafka, names = _job_topics(config, seed, repeats, broker, namespace)

        async def work(kafka):
            before = await describe_run_topics(kafka, names)
            return before, await create_run_topics(kafka, names)

        before, after = asyncio.run(_on(kafka, work))
        status = {s.name: "existed" if s.exists else "created" for s in before}
        console.print(_table(cfg, after, status))
        made = sum(1 for s in before if not s.exists)
        console.print(f"{made} topic(s) created, {len(names) - made} already there", markup=False)


def describe(
    config: ConfigArgument,
    broker: BrokerOption = None,
    seed: SeedOption = None,
    repeats: RepeatsOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Show the job's topics as the cluster has them (partitions, replication factor, the
    settings fedxab sets) and how they differ from the config; creates nothing. Exits 1 if a
    topic is absent."""
    from fedxab.broker.topics import describe_run_topics

    console = make_console()
    with errors_as_exit_code():
        cfg, kafka, names = _job_topics(config, seed, repeats, broker, namespace)
        states = asyncio.run(_on(kafka, lambda k: describe_run_topics(k, names)))
        console.print(_table(cfg, states, {}))
    absent = [s.name for s in states if not s.exists]
    if absent:
        console.print(
            f"{len(absent)} topic(s) absent: create them with `fedxab topics create {config}`",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(1)


def delete(
    config: ConfigArgument,
    yes: Annotated[
        bool, typer.Option("--yes", help="Delete: every record of these topics is lost.")
    ] = False,
    broker: BrokerOption = None,
    seed: SeedOption = None,
    repeats: RepeatsOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Delete the job's topics that exist (the namespace's lobby included): every record in
    them, the privacy ledger topic's too, is lost. Needs --yes."""
    from fedxab.broker.topics import delete_run_topics

    console = make_console()
    with errors_as_exit_code():
        _, kafka, names = _job_topics(config, seed, repeats, broker, namespace)
        if not yes:
            raise FedxabError(
                f"--yes: deleting loses every record of {len(names)} topic(s) "
                f"({', '.join(names)}); run again with --yes"
            )
        deleted = asyncio.run(_on(kafka, lambda k: delete_run_topics(k, names)))
    for name in deleted:
        console.print(f"deleted: {name}", markup=False, soft_wrap=True)
    console.print(
        f"{len(deleted)} topic(s) deleted, {len(names) - len(deleted)} were absent", markup=False
    )
