"""The opt-in DP release of each client's best value over a broker (memory://, in process):
under local DP the server learns the noised value, charged in the clients' ledgers, never the
raw one (``[privacy] release_best``, fedxab.privacy.best)."""

from __future__ import annotations

import asyncio

from config_factory import sim_config

from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import run_id_for
from fedxab.agents.server import ServerAgent
from fedxab.broker.base import lobby_topic, run_topics
from fedxab.broker.codec import packb
from fedxab.broker.memory import MemoryBroker
from fedxab.config import config_from_dict
from fedxab.run.job import client_slices

SEED = 3
DP = {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 1e-3, "composition": "sequential"}
BEST = {"release_best": True, "best_epsilon": 0.5, "best_low": 0.0, "best_high": 1.0}


def _config(privacy: dict):
    data = sim_config("fedpne", clients=4, budget=20_000, heterogeneity="none").to_dict()
    data["algorithm"] = DP
    data["privacy"] = privacy
    return config_from_dict(data)


def _run(config):
    broker = MemoryBroker()
    run_id = run_id_for(config, SEED)

    async def main():
        server = ServerAgent(config, SEED, broker, run_id=run_id)
        clients = [
            ClientAgent(config, SEED, broker, run_id=run_id, client_ids=ids)
            for ids in client_slices(config.federation.clients, 2)
        ]
        async with asyncio.timeout(60):
            record, *_ = await asyncio.gather(server.run(), *(c.run() for c in clients))
        return record, clients

    record, clients = asyncio.run(main())
    topics = [*run_topics(config.broker.namespace, run_id).values(), lobby_topic("fedxab")]
    wire = b"".join(r.value for t in topics for r in broker.records(t))
    outcomes = {m: o for c in clients for m, o in c.outcomes().items()}
    return record, wire, outcomes


def test_the_server_learns_each_best_value_only_noised_and_charged_once():
    record, wire, outcomes = _run(_config(BEST))
    released = record.withheld["best_value_dp"]
    assert sorted(released) == ["0", "1", "2", "3"]
    for m, outcome in outcomes.items():
        raw, got = outcome.best_value, released[str(m)]
        assert "best_value" not in got and got["epsilon"] == 0.5
        assert got["best_value_dp"] != raw
        assert packb(raw) not in wire  # the raw best value is on no topic
        assert packb(got["best_value_dp"]) in wire  # the noised one is
    assert "clients" in record.withheld["fields"]  # still no outcome, no best point
    plain, _, _ = _run(_config({}))
    for m in outcomes:  # exactly one release more per client, in the server's rebuilt ledger
        assert record.privacy["releases"][m] == plain.privacy["releases"][m] + 1
        assert record.privacy["epsilon"][m] > plain.privacy["epsilon"][m]


def test_a_budget_that_cannot_afford_the_release_refuses_it_and_the_results_say_so():
    record, wire, outcomes = _run(_config({**BEST, "budget_epsilon": 0.9}))
    for m, outcome in outcomes.items():
        got = record.withheld["best_value_dp"][str(m)]
        assert "over its budget" in got["refused"] and "best_value_dp" not in got
        assert packb(outcome.best_value) not in wire
