#!/usr/bin/env python
"""Junk on a private run's ledger topic: the server's wall time, and results equal to the clean
run's (issue 36 item 4).

The job: DP-Fed-PNE (epsilon 0.5, delta 1e-3, sequential composition) on Garland with value
offsets, 4 clients, T = 20,000 each, seed 3, signed with Ed25519, the server agent and two client
agents in this process, on Kafka (a dev broker on loopback started by this script; every run under
a fresh namespace). Before each run, N junk records that need no key are published on its ledger
topic, ahead of every genuine record: a third random bytes, a third unsigned ledger envelopes, a
third signed maps with made-up signatures (each verified, and refused, with Ed25519). The table
gives, per N, the run's wall time (the server's, from its results), the time with the publishing,
whether the results (wall time and ledger path aside) equal the clean run's, and the refusals the
server counted by reason.

    .venv/bin/python benchmarks/bench_ledger_junk.py                 # N = 0, 10,000, 100,000
    .venv/bin/python benchmarks/bench_ledger_junk.py --junk 0 1000   # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from fedxab.agents.distributed import run_id_for, run_on_broker
from fedxab.broker.base import run_topics
from fedxab.broker.codec import packb
from fedxab.broker.devbroker import DevBroker
from fedxab.broker.kafka import KafkaBroker
from fedxab.config import config_from_dict
from fedxab.monitoring.metrics import FederationMetrics
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.privacy.mirror import release_record
from fedxab.security.keypairs import generate_keypairs

CLIENTS, SEED = 4, 3


def config(keys: Path, address: str, namespace: str, ledger: Path):
    return config_from_dict(
        {
            "run": {"budget": 20_000, "seed": SEED},
            "objective": {"name": "garland"},
            "algorithm": {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 1e-3,
                          "composition": "sequential"},
            "federation": {"clients": CLIENTS, "heterogeneity": "offset"},
            "privacy": {"ledger": str(ledger), "lifetime_epsilon": 50.0},
            "broker": {"url": f"kafka://{address}", "namespace": namespace},
            "security": {"keys_dir": str(keys)},
        }
    )  # fmt: skip


def junk(run: str, n: int) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(0)
    unsigned = release_record(run, 2, 1, PrivacyEvent("gaussian", 1.0, 1.0, 1.0, 1))
    made_up = packb({"envelope": unsigned, "sig": bytes(64), "session": ""})
    kinds = [lambda: rng.bytes(int(rng.integers(1, 200))), lambda: unsigned, lambda: made_up]
    return [(str(k % CLIENTS), kinds[k % 3]()) for k in range(n)]


def rejected(metrics: FederationMetrics) -> dict[str, int]:
    out = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            wanted = s.name == "fedxab_messages_rejected_total" and s.value
            if wanted and s.labels["topic"] == "ledger":
                out[s.labels["reason"]] = int(s.value)
    return out


def one(cfg, address: str, records: list[tuple[str, bytes]]):
    metrics = FederationMetrics()
    topics = run_topics(cfg.broker.namespace, run_id_for(cfg, SEED))

    async def main():
        async with KafkaBroker(address) as broker:
            await broker.create_topics(list(topics.values()))
            for start in range(0, len(records), 5000):
                await broker.publish_many(topics["ledger"], records[start : start + 5000])
            return await run_on_broker(cfg, SEED, broker, hosts=2, metrics=metrics)

    started = time.perf_counter()
    record = asyncio.run(main())
    return record, time.perf_counter() - started, rejected(metrics)


def comparable(record) -> dict:
    out = record.to_dict()
    out.pop("wall_time_s")
    out["privacy"] = {k: v for k, v in out["privacy"].items() if k != "ledger"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--junk", type=int, nargs="+", default=[0, 10_000, 100_000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, DevBroker() as dev:
        keys = Path(tmp) / "keys"
        generate_keypairs(CLIENTS, keys)
        print("| junk records | run wall time (s) | with publishing (s) | results equal ", end="")
        print("| refused |")
        print("|---:|---:|---:|---|---|")
        clean = None
        for n in args.junk:
            namespace = f"junk{n}x{os.getpid()}"
            cfg = config(keys, dev.address, namespace, Path(tmp) / f"{n}.db")
            record, total, refused = one(cfg, dev.address, junk(run_id_for(cfg, SEED), n))
            if n == 0:
                clean = comparable(record)
            equal = "-" if clean is None else str(comparable(record) == clean)
            print(f"| {n:,} | {record.wall_time_s:.2f} | {total:.2f} | {equal} | {refused} |")


if __name__ == "__main__":
    main()
