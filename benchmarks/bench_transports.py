"""Fed-PNE on every transport: in-process vs the embedded MemoryBroker vs Kafka (dev broker).

Measures, side by side in one run of this script:

1. **Speed**: Fed-PNE with M = 100 clients, T = 10^4 on Garland (the job of
   ``bench_federation.py``), wall time of one seed on each transport, median [min-max] of
   ``--repeats`` runs (default 3) after a warm-up: in-process (``Federation.run``), every agent in
   one process on the MemoryBroker (``run_on_broker``), and every agent in one process on Kafka
   (a dev broker on loopback started by this script); each run's config is made before its
   clock starts. On the two brokers also the time inside
   the phases (the server agent's phase durations, summed), and so what Kafka adds to each phase
   over the MemoryBroker, which runs the same agents. Also messages and bytes per run, which must
   be the same on every transport, and a check that the results are identical.
2. **Bare round trip**: the job's first phase as aiokafka alone moves it, with fedxab's
   ``fetch_max_wait_ms``: the server's broadcast (its very bytes) published, read by a client
   reader already waiting for it, which then publishes the M reports (their very bytes), read by
   a server reader already waiting; the time from the broadcast's publish to the last report
   read, median of ``--trips`` (default 20).
3. **Scale**: 1,000 clients (T = 10^3) on the MemoryBroker in one process (wall time, peak RSS of
   a fresh process), and the same run over Kafka with the server in one process and 4 client
   processes hosting 250 clients each (``fedxab server`` / ``fedxab client``).

Every Kafka run here sets ``[security] sign = false`` explicitly (message signing, issue 8, is
on by default for Kafka runs), so these numbers measure the transport alone and stay comparable to
earlier ones; ``bench_signing.py`` runs the same Kafka speed job signed and unsigned and measures
what signing costs.

Targets (issue "Speed where users wait"): the Kafka run under 1.5 s, and what Kafka adds to a
phase within 2x of the bare round trip; MemoryBroker within 1.2x of in-process. Run:
``.venv/bin/python benchmarks/bench_transports.py [--markdown] [--repeats N] [--trips N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import kib_to_mb, run_in_fresh_process
from bench_federation import env_line, environment, garland_config, md_table

SPEED_CLIENTS, SPEED_BUDGET = 100, 10_000
SCALE_CLIENTS, SCALE_BUDGET, SCALE_PROCESSES = 1_000, 1_000, 4
SEED = 0
TRIP_GAP_S = 0.05
"""Seconds between two bare round trips: the readers are waiting at the broker, as between
phases."""
_NAMESPACES = itertools.count()


def _without_time(record: Any) -> dict[str, Any]:
    d = record.to_dict()
    d.pop("wall_time_s")
    return d


def _in_process(config: Any) -> Any:
    from fedxab.agents.federation import Federation

    return Federation(config, SEED).run()


def with_security(config: Any, sign: bool, keys_dir: str | Path | None = None) -> Any:
    """``config`` with ``[security] sign`` set explicitly (and ``keys_dir`` if given)."""
    from fedxab.config import config_from_dict

    data = config.to_dict()
    data["security"] = {"sign": sign} | ({} if keys_dir is None else {"keys_dir": str(keys_dir)})
    return config_from_dict(data)


def _fresh_namespace(config: Any) -> Any:
    """``config`` under a namespace no earlier run of this script used (new Kafka topics)."""
    from fedxab.config import config_from_dict

    data = config.to_dict()
    data["broker"]["namespace"] = f"bench{next(_NAMESPACES)}-{os.getpid()}"
    return config_from_dict(data)


def _on_broker(config: Any, make_broker: Any, hosts: int = 1, phases: Any = None) -> Any:
    """One seed with every agent in this process (a fresh namespace: reruns never mix);
    ``phases``: a run observer (:func:`_phase_times`) told of every phase the server closes."""
    return _agents(_fresh_namespace(config), make_broker, hosts, phases)


def _agents(config: Any, make_broker: Any, hosts: int = 1, phases: Any = None) -> Any:
    """:func:`_on_broker` with ``config`` as given (already under a fresh namespace)."""
    from fedxab.agents.distributed import run_on_broker

    async def main() -> Any:
        async with make_broker() as broker:
            return await run_on_broker(config, SEED, broker, hosts=hosts, metrics=phases)

    return asyncio.run(main())


def _phase_times() -> Any:
    """A run observer that keeps the duration of every phase the server agent closes (from
    its broadcast's publish to the last report it waited for)."""
    from fedxab.run.observe import RunObserver

    class PhaseTimes(RunObserver):
        def __init__(self) -> None:
            self.durations: list[float] = []

        def on_phase(self, counts: Any, duration_s: float | None = None, **_: Any) -> None:
            if duration_s is not None:
                self.durations.append(duration_s)

    return PhaseTimes()


def first_phase_records(config: Any) -> tuple[bytes, list[tuple[str | None, bytes]]]:
    """The job's first broadcast and the M reports that answered it, as the agents published
    them (a MemoryBroker run keeps every record)."""
    from fedxab.agents.distributed import run_id_for, run_on_broker
    from fedxab.broker.base import run_topics
    from fedxab.broker.memory import MemoryBroker

    broker = MemoryBroker()
    asyncio.run(run_on_broker(config, SEED, broker))
    topics = run_topics(config.broker.namespace, run_id_for(config, SEED))
    broadcast = broker.records(topics["broadcast"])[0].value
    reports = broker.records(topics["report"])[: config.federation.clients]
    return broadcast, [(r.key, r.value) for r in reports]


async def _bare_round_trips(
    address: str, broadcast: bytes, reports: list[tuple[str | None, bytes]], trips: int
) -> list[float]:
    """``trips`` times, with aiokafka alone: publish ``broadcast``; a reader waiting for it
    publishes ``reports`` once it has it; seconds until a waiting reader has read them all.
    One producer (``acks="all"``, as fedxab's), readers with fedxab's ``fetch_max_wait_ms``."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from fedxab.broker.base import DEFAULT_FETCH_MAX_WAIT_MS

    namespace = f"bare{next(_NAMESPACES)}-{os.getpid()}"
    down, up = f"{namespace}.broadcast", f"{namespace}.report"
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(down, 1, 1), NewTopic(up, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=address, acks="all", enable_idempotence=False)
    client, server = (
        AIOKafkaConsumer(
            bootstrap_servers=address,
            enable_auto_commit=False,
            fetch_max_wait_ms=DEFAULT_FETCH_MAX_WAIT_MS,
        )
        for _ in range(2)
    )
    keyed = [(None if key is None else key.encode(), value) for key, value in reports]

    async def publish(topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
        sent = [await producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*sent)

    async def answer() -> None:
        while True:
            await client.getone()
            await publish(up, keyed)

    await producer.start()
    for reader, topic in ((client, down), (server, up)):
        await reader.start()
        reader.assign([TopicPartition(topic, 0)])
        await reader.seek_to_beginning()
    answering = asyncio.create_task(answer())
    seconds = []
    try:
        for _ in range(trips):
            await asyncio.sleep(TRIP_GAP_S)
            t0 = time.perf_counter()
            await publish(down, [(None, broadcast)])
            for _ in reports:
                await server.getone()
            seconds.append(time.perf_counter() - t0)
    finally:
        answering.cancel()
        await asyncio.gather(answering, return_exceptions=True)
        for party in (client, server, producer):
            await party.stop()
    return seconds


def bare_round_trip(address: str, config: Any, trips: int) -> dict[str, Any]:
    """The job's first phase moved by aiokafka alone, ``trips`` times (module docstring)."""
    broadcast, reports = first_phase_records(config)
    seconds = asyncio.run(_bare_round_trips(address, broadcast, reports, trips))
    return {
        "time": _stats(seconds),
        "times": seconds,
        "broadcast_bytes": len(broadcast),
        "reports": len(reports),
        "report_bytes": sum(len(value) for _, value in reports),
    }


def _timed(work: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = work()
    return time.perf_counter() - t0, out


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure_speed(kafka_address: str, repeats: int) -> dict[str, Any]:
    """Each transport ``repeats`` times, interleaved (warm-up first), on the same job."""
    from fedxab.broker.kafka import KafkaBroker
    from fedxab.broker.memory import MemoryBroker

    config = garland_config(SPEED_CLIENTS, SPEED_BUDGET)
    unsigned = with_security(config, sign=False)
    # Per transport: the run's config, made before the clock starts, and the run. A broker run
    # takes the job's config under a fresh namespace (new topics, so reruns never mix), which
    # the in-process run has no use for: rebuilding and validating that config is this
    # script's bookkeeping, not work of the transport, so neither side's time includes it.
    transports = {
        "in-process": (lambda: config, lambda run_config, phases: _in_process(run_config)),
        "MemoryBroker": (
            lambda: _fresh_namespace(config),
            lambda run_config, phases: _agents(run_config, MemoryBroker, phases=phases),
        ),
        "Kafka (dev broker)": (
            lambda: _fresh_namespace(unsigned),
            lambda run_config, phases: _agents(
                run_config, lambda: KafkaBroker(kafka_address), phases=phases
            ),
        ),
    }
    _in_process(garland_config(10, 1000))  # warm-up: imports and caches
    times: dict[str, list[float]] = {name: [] for name in transports}
    in_phases: dict[str, list[float]] = {name: [] for name in transports}
    records: dict[str, Any] = {}
    for _ in range(repeats):
        for name, (prepare, work) in transports.items():
            phases, run_config = _phase_times(), prepare()
            seconds, records[name] = _timed(
                lambda work=work, run_config=run_config, phases=phases: work(run_config, phases)
            )
            times[name].append(seconds)
            in_phases[name].append(sum(phases.durations))
    reference = _without_time(records["in-process"])
    rows = []
    for name in transports:
        comm = records[name].communication
        rows.append(
            {
                "transport": name,
                "time": _stats(times[name]),
                "times": times[name],
                "phases": _stats(in_phases[name]) if name != "in-process" else None,
                "rounds": comm["rounds"],
                "messages": comm["messages_up"] + comm["messages_down"],
                "bytes": comm["bytes_up"] + comm["bytes_down"],
                "identical": _without_time(records[name]) == reference,
            }
        )
    return {"rows": rows, "repeats": repeats}


def memory_scale_probe() -> dict[str, Any]:
    """In a fresh process: 1,000 clients on the MemoryBroker, one seed; time and peak RSS."""
    from _common import peak_rss_kib

    from fedxab.broker.memory import MemoryBroker

    config = garland_config(SCALE_CLIENTS, SCALE_BUDGET)
    rss_before = peak_rss_kib()
    seconds, record = _timed(lambda: _on_broker(config, MemoryBroker, hosts=4))
    return {
        "seconds": seconds,
        "peak_rss_kib": peak_rss_kib(),
        "rss_before_kib": rss_before,
        "rounds": record.communication["rounds"],
        "evaluations": record.evaluations,
    }


def kafka_processes(address: str) -> dict[str, Any]:
    """``fedxab server`` + 4 ``fedxab client`` processes (250 clients each) over Kafka."""
    config = garland_config(SCALE_CLIENTS, SCALE_BUDGET)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.toml"
        data = config.experiment_dict()
        data["run"]["output"] = (Path(tmp) / "out").as_posix()
        data["security"] = {"sign": False}  # explicitly unsigned: bench_signing.py measures it
        path.write_text(_toml(data))
        fedxab = [sys.executable, "-m", "fedxab.cli"]
        url = f"kafka://{address}"
        t0 = time.perf_counter()
        per = SCALE_CLIENTS // SCALE_PROCESSES
        procs = [subprocess.Popen([*fedxab, "server", str(path), "--broker", url, "-q"])]
        for k in range(SCALE_PROCESSES):
            ids = f"{k * per}-{(k + 1) * per - 1}"
            procs.append(
                subprocess.Popen(
                    [*fedxab, "client", str(path), "--broker", url, "--client-id", ids],
                    stdout=subprocess.DEVNULL,
                )
            )
        codes = [p.wait(600) for p in procs]
        seconds = time.perf_counter() - t0
        results = json.loads((Path(tmp) / "out" / "results.json").read_text())
    run = results["runs"][0]
    run.pop("wall_time_s")
    in_process = _without_time(_in_process(config))
    return {
        "seconds": seconds,
        "exit_codes": codes,
        "rounds": run["communication"]["rounds"],
        "evaluations": run["evaluations"],
        "identical": run == in_process,
    }


def _toml(data: dict[str, Any]) -> str:
    """A minimal TOML writer for a config dict (tables of scalars and one nested noise table)."""
    lines: list[str] = []

    def value(v: Any) -> str:
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()

    for section, table in data.items():
        nested = {k: v for k, v in table.items() if isinstance(v, dict)}
        lines.append(f"[{section}]")
        lines += [f"{k} = {value(v)}" for k, v in table.items() if k not in nested]
        for name, sub in nested.items():
            lines.append(f"[{section}.{name}]")
            lines += [f"{k} = {value(v)}" for k, v in sub.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trips", type=int, default=20, help="bare aiokafka round trips")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = parser.parse_args()

    from fedxab.broker.devbroker import DevBroker

    t_all = time.perf_counter()
    with DevBroker() as dev:
        speed = measure_speed(dev.address, args.repeats)
        bare = bare_round_trip(dev.address, garland_config(SPEED_CLIENTS, SPEED_BUDGET), args.trips)
        kafka_scale = kafka_processes(dev.address)
    memory_scale = run_in_fresh_process("bench_transports", "memory_scale_probe")
    rows = speed["rows"]
    base = rows[0]["time"]["median"]

    def spread(t: dict[str, float], scale: float = 1.0, digits: int = 3) -> str:
        return (
            f"{t['median'] * scale:.{digits}f} "
            f"[{t['min'] * scale:.{digits}f}–{t['max'] * scale:.{digits}f}]"
        )

    speed_table = md_table(
        [
            "transport",
            "wall time (s)",
            "vs in-process",
            "in phases (s)",
            "per phase (ms)",
            "rounds",
            "messages",
            "bytes",
            "results identical",
        ],
        [
            [
                r["transport"],
                spread(r["time"]),
                f"{r['time']['median'] / base:.2f}x",
                "-" if r["phases"] is None else spread(r["phases"]),
                "-" if r["phases"] is None else f"{1000 * r['phases']['median'] / r['rounds']:.1f}",
                str(r["rounds"]),
                f"{r['messages']:,}",
                f"{r['bytes']:,}",
                "yes" if r["identical"] else "NO",
            ]
            for r in rows
        ],
    )
    scale_table = md_table(
        [
            "transport",
            "clients M",
            "budget T",
            "processes",
            "wall time (s)",
            "peak RSS (MB)",
            "rounds",
            "evaluations",
        ],
        [
            [
                "MemoryBroker",
                f"{SCALE_CLIENTS:,}",
                f"{SCALE_BUDGET:,}",
                "1 (4 client agents)",
                f"{memory_scale['seconds']:.2f}",
                f"{kib_to_mb(memory_scale['peak_rss_kib']):.1f}",
                str(memory_scale["rounds"]),
                f"{memory_scale['evaluations']:,}",
            ],
            [
                "Kafka (dev broker)",
                f"{SCALE_CLIENTS:,}",
                f"{SCALE_BUDGET:,}",
                f"1 server + {SCALE_PROCESSES} clients x {SCALE_CLIENTS // SCALE_PROCESSES}",
                f"{kafka_scale['seconds']:.2f}",
                "-",
                str(kafka_scale["rounds"]),
                f"{kafka_scale['evaluations']:,}",
            ],
        ],
    )
    memory_ratio = rows[1]["time"]["median"] / base
    kafka_time = rows[2]["time"]["median"]
    added = (rows[2]["phases"]["median"] - rows[1]["phases"]["median"]) / rows[2]["rounds"]
    trip = bare["time"]["median"]
    phase_table = md_table(
        ["per phase", "time (ms)"],
        [
            ["Kafka's phase minus the MemoryBroker's (medians)", f"{1000 * added:.1f}"],
            ["bare aiokafka round trip of the first phase", spread(bare["time"], 1000, 1)],
        ],
    )
    verdicts = [
        f"Kafka run under 1.5 s: {'yes' if kafka_time < 1.5 else 'NO'} ({kafka_time:.3f} s)",
        f"what Kafka adds to a phase within 2x of a bare aiokafka round trip: "
        f"{'yes' if added <= 2 * trip else 'NO'} ({1000 * added:.1f} ms vs "
        f"{1000 * trip:.1f} ms, {added / trip:.2f}x)",
        f"MemoryBroker within 1.2x of in-process: {'yes' if memory_ratio <= 1.2 else 'NO'} "
        f"({memory_ratio:.2f}x)",
        f"results identical on every transport: "
        f"{'yes' if all(r['identical'] for r in rows) else 'NO'}",
        f"Kafka scale run exit codes: {kafka_scale['exit_codes']}, results identical to "
        f"in-process: {'yes' if kafka_scale['identical'] else 'NO'}",
    ]
    env = environment()
    print(
        f"Fed-PNE M = {SPEED_CLIENTS}, T = {SPEED_BUDGET:,} on Garland, seed {SEED}, "
        f"median of {args.repeats}:"
    )
    print(speed_table if args.markdown else json.dumps(rows, indent=1))
    print()
    print(
        f"Bare round trip: one broadcast ({bare['broadcast_bytes']:,} bytes) and "
        f"{bare['reports']} reports ({bare['report_bytes']:,} bytes), median of {args.trips}:"
    )
    print(phase_table if args.markdown else json.dumps(bare, indent=1))
    print()
    print(scale_table if args.markdown else json.dumps([memory_scale, kafka_scale], indent=1))
    print()
    for line in verdicts:
        print(f"- {line}")
    print(f"\n{env_line(env)} Whole script: {time.perf_counter() - t_all:.1f} s.")


if __name__ == "__main__":
    main()
