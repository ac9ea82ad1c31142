"""Fed-PNE on every transport: in-process vs the embedded MemoryBroker vs Kafka (dev broker).

Measures, side by side in one run of this script:

1. **Speed**: Fed-PNE with M = 100 clients, T = 10^4 on Garland (the job of
   ``bench_federation.py``), wall time of one seed on each transport, median [min-max] of
   ``--repeats`` runs (default 3) after a warm-up: in-process (``Federation.run``), every agent in
   one process on the MemoryBroker (``run_on_broker``), and every agent in one process on Kafka
   (a dev broker on loopback started by this script). Also messages and bytes per run, which must
   be the same on every transport, and a check that the results are identical.
2. **Scale**: 1,000 clients (T = 10^3) on the MemoryBroker in one process (wall time, peak RSS of
   a fresh process), and the same run over Kafka with the server in one process and 4 client
   processes hosting 250 clients each (``fedxab server`` / ``fedxab client``).

Every Kafka run here sets ``[security] sign = false`` explicitly (message signing, issue 8, is
on by default for Kafka runs), so these numbers measure the transport alone and stay comparable to
earlier ones; ``bench_signing.py`` runs the same Kafka speed job signed and unsigned and measures
what signing costs.

Targets (issue "Agents and brokers"): MemoryBroker within 1.5x of in-process; the Kafka run under
30 s. Run: ``.venv/bin/python benchmarks/bench_transports.py [--markdown] [--repeats N]``.
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


def _on_broker(config: Any, make_broker: Any, hosts: int = 1) -> Any:
    """One seed with every agent in this process (a fresh namespace: reruns never mix)."""
    from fedxab.agents.distributed import run_on_broker

    config = _fresh_namespace(config)

    async def main() -> Any:
        async with make_broker() as broker:
            return await run_on_broker(config, SEED, broker, hosts=hosts)

    return asyncio.run(main())


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
    transports = {
        "in-process": lambda: _in_process(config),
        "MemoryBroker": lambda: _on_broker(config, MemoryBroker),
        "Kafka (dev broker)": lambda: _on_broker(
            with_security(config, sign=False), lambda: KafkaBroker(kafka_address)
        ),
    }
    _in_process(garland_config(10, 1000))  # warm-up: imports and caches
    times: dict[str, list[float]] = {name: [] for name in transports}
    records: dict[str, Any] = {}
    for _ in range(repeats):
        for name, work in transports.items():
            seconds, records[name] = _timed(work)
            times[name].append(seconds)
    reference = _without_time(records["in-process"])
    rows = []
    for name in transports:
        comm = records[name].communication
        rows.append(
            {
                "transport": name,
                "time": _stats(times[name]),
                "times": times[name],
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
    return {
        "seconds": seconds,
        "exit_codes": codes,
        "rounds": run["communication"]["rounds"],
        "evaluations": run["evaluations"],
        "identical": run == _without_time(_in_process(config)),
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
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = parser.parse_args()

    from fedxab.broker.devbroker import DevBroker

    t_all = time.perf_counter()
    with DevBroker() as dev:
        speed = measure_speed(dev.address, args.repeats)
        kafka_scale = kafka_processes(dev.address)
    memory_scale = run_in_fresh_process("bench_transports", "memory_scale_probe")
    rows = speed["rows"]
    base = rows[0]["time"]["median"]
    speed_table = md_table(
        [
            "transport",
            "wall time (s)",
            "vs in-process",
            "rounds",
            "messages",
            "bytes",
            "results identical",
        ],
        [
            [
                r["transport"],
                f"{r['time']['median']:.3f} [{r['time']['min']:.3f}–{r['time']['max']:.3f}]",
                f"{r['time']['median'] / base:.2f}x",
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
    verdicts = [
        f"MemoryBroker within 1.5x of in-process: {'yes' if memory_ratio <= 1.5 else 'NO'} "
        f"({memory_ratio:.2f}x)",
        f"Kafka run under 30 s: {'yes' if kafka_time < 30 else 'NO'} ({kafka_time:.2f} s)",
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
    print(scale_table if args.markdown else json.dumps([memory_scale, kafka_scale], indent=1))
    print()
    for line in verdicts:
        print(f"- {line}")
    print(f"\n{env_line(env)} Whole script: {time.perf_counter() - t_all:.1f} s.")


if __name__ == "__main__":
    main()
