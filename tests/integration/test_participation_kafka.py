"""Partial participation on Kafka (the dev broker): the run and each client's ledger equal the
in-process run's, a client never asked charged nothing."""

from __future__ import annotations

import asyncio

from config_factory import sim_config

from fedxab.agents.distributed import run_on_broker
from fedxab.agents.federation import Federation
from fedxab.broker.kafka import KafkaBroker
from fedxab.run.participation import Participation

SEED, CLIENTS, Q = 3, 10, 0.2


def test_dp_fed_pne_with_a_sample_on_kafka_equals_the_in_process_run(dev_broker):
    params = {"epsilon": 0.5, "privacy_delta": 1e-3, "composition": "sequential"}
    config = sim_config(
        "dpfedpne",
        clients=CLIENTS,
        budget=2000,
        params=params,
        federation={"participation": Q},
        privacy={},
        broker={"namespace": "participation"},
    )

    async def main():
        async with KafkaBroker(dev_broker.address) as broker:
            return await asyncio.wait_for(run_on_broker(config, SEED, broker, hosts=2), 120)

    on_kafka = asyncio.run(main()).to_dict()
    in_process = Federation(config, SEED).run().to_dict()
    on_kafka.pop("wall_time_s")
    in_process.pop("wall_time_s")
    assert on_kafka == in_process
    phases = [p["phase"] for p in in_process["communication"]["per_phase"]]
    sample = Participation(SEED, CLIENTS, Q)
    assert [p["asked"] for p in in_process["communication"]["per_phase"]] == [
        len(sample.asked(p, range(CLIENTS))) for p in phases
    ]
    never = [m for m in range(CLIENTS) if not any(sample.asks(m, p) for p in phases)]
    assert never and all(on_kafka["privacy"]["epsilon"][m] == 0.0 for m in never)
