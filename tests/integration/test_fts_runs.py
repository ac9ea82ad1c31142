"""FTS / DP-FTS-DE runs end to end: the ledger's epsilon equals the paper's, budgets are enforced
by the trusted server, and every transport gives the same results."""

from __future__ import annotations

import asyncio

import pytest
from config_factory import sim_config
from fts_settings import CHEAP_FTS, CHEAP_TS

from fedxab.agents.distributed import run_id_for, run_on_broker
from fedxab.agents.federation import Federation
from fedxab.agents.ledger_mirror import rebuild_ledger
from fedxab.broker.base import run_topics
from fedxab.broker.kafka import KafkaBroker
from fedxab.broker.memory import MemoryBroker
from fedxab.config import config_from_dict
from fedxab.privacy.ledger import PrivacyLedger

SEED = 1


def _config(name="dpftsde", *, rounds=40, clients=3, algorithm=None, privacy=None):
    private = name == "dpftsde"
    return sim_config(
        name,
        clients=clients,
        budget=10 + rounds,
        objective={"name": "garland", "noise": {"name": "gaussian", "sigma": 0.1}},
        heterogeneity="none",
        params={"regions": 2, "weights": "synthetic", **CHEAP_FTS, **(algorithm or {})},
        run={"seed": SEED},
        **({"privacy": {"accountant": "moments", **(privacy or {})}} if private else {}),
    )


# spec-dpftsde §4.3: (q, z, epsilon) for N = 200, T = 40 and for N = 29, T = 60 (landmine)
SYNTHETIC = [
    (0.15, 1.0, 5.93),
    (0.25, 1.0, 9.91),
    (0.5, 1.0, 20.12),
    (0.25, 1.2, 7.39),
    (0.25, 1.5, 5.22),
]
LANDMINE = [
    (0.35, 1.0, 15.17),
    (0.35, 1.6, 7.12),
    (0.35, 2.0, 5.14),
    (0.35, 3.0, 3.05),
    (0.35, 4.0, 2.16),
    (0.10, 1.0, 3.75),
    (0.15, 1.0, 5.98),
    (0.20, 1.0, 7.69),
    (0.25, 1.0, 9.82),
]


@pytest.mark.parametrize(
    ("n", "rounds", "q", "z", "epsilon"),
    [(200, 40, *row) for row in SYNTHETIC] + [(29, 60, *row) for row in LANDMINE],
)
def test_the_ledger_reports_the_papers_epsilon(n, rounds, q, z, epsilon):
    # delta = 1/N^1.1 of the paper's N; the run itself uses 3 agents (epsilon does not depend
    # on N otherwise, spec §4.1)
    config = _config(rounds=rounds, algorithm={"q": q, "z": z}, privacy={"delta": n**-1.1})
    record = Federation(config, SEED).run()
    assert record.privacy["releases"] == [rounds] * 3  # one release per BO iteration
    assert [round(e, 2) for e in record.privacy["epsilon"]] == [epsilon] * 3


def test_the_default_delta_is_one_over_n_to_the_1_1():
    record = Federation(_config(clients=3, algorithm={"q": 0.25, "z": 1.0}), SEED).run()
    assert record.privacy["delta"] == pytest.approx(3**-1.1)


def test_a_budget_of_k_releases_leaves_every_agent_out_after_exactly_k():
    algorithm = {"q": 0.25, "z": 1.0}
    unlimited = Federation(_config(rounds=8, algorithm=algorithm), SEED)
    delta = unlimited.run().privacy["delta"]
    ledger, run = unlimited.run_ledger.ledger, unlimited.run_ledger.run
    k = 3
    eps_k = ledger.accountant.epsilon(ledger.events(run, 0)[:k], delta)  # k releases' epsilon
    limited = _config(rounds=8, algorithm=algorithm, privacy={"budget_epsilon": eps_k})
    record = Federation(limited, SEED).run()
    assert record.privacy["releases"] == [k] * 3
    assert record.privacy["epsilon"] == pytest.approx([eps_k] * 3, rel=1e-12)
    assert record.privacy["withdrawn"] == {str(m): k + 1 for m in range(3)}  # the (k+1)-th
    assert record.evaluations == 3 * (10 + 8)  # the agents go on optimising on their own


@pytest.mark.parametrize("name", ["ftsde", "dpftsde"])
def test_the_memory_broker_gives_the_in_process_results(name):
    config = _config(name, rounds=12, algorithm={"q": 0.5} if name == "dpftsde" else {})
    record = asyncio.run(run_on_broker(config, SEED, MemoryBroker(), hosts=2))
    expected = Federation(config, SEED).run()
    got, want = record.to_dict(), expected.to_dict()
    got.pop("wall_time_s")
    want.pop("wall_time_s")
    assert got == want


def test_standard_ts_runs_alone_with_one_broadcast_and_one_report_per_agent():
    config = config_from_dict(
        {
            "run": {"budget": 25, "seed": SEED},
            "objective": {"name": "garland", "noise": {"name": "gaussian", "sigma": 0.1}},
            "algorithm": {
                "name": "ts",
                **CHEAP_TS,
            },
            "federation": {"clients": 3, "heterogeneity": "none"},
        }
    )
    federation = Federation(config, SEED)
    record = federation.run()
    assert record.evaluations == 3 * 25
    assert record.communication["rounds"] == 1
    assert record.communication["messages_up"] == 3
    assert all(c.branches == ["own"] * 15 for c in federation.clients)


def test_dp_fts_de_on_kafka_gives_the_in_process_results_and_ledger_topic(dev_broker):
    config = _config(rounds=8, algorithm={"q": 0.5}, privacy={"budget_epsilon": 50.0})

    async def main():
        async with KafkaBroker(dev_broker.address) as broker:
            record = await asyncio.wait_for(run_on_broker(config, SEED, broker, hosts=2), 60)
            ledger = PrivacyLedger(":memory:")
            run = run_id_for(config, SEED)
            topic = run_topics("fedxab", run)["ledger"]
            rebuilt = await rebuild_ledger(broker, topic, run, ledger, expect={0, 1, 2})
            return record, ledger, rebuilt, run

    record, ledger, rebuilt, run = asyncio.run(main())
    expected = Federation(config, SEED).run()
    got, want = record.to_dict(), expected.to_dict()
    got.pop("wall_time_s")
    want.pop("wall_time_s")
    assert got == want
    # the server mirrored its central-DP ledger: the rebuilt copy gives the same epsilon
    assert rebuilt.ended == {0, 1, 2} and rebuilt.skipped == 0
    assert [len(ledger.events(run, m)) for m in range(3)] == expected.privacy["releases"]
    assert ledger.budget(run, 0).epsilon == 50.0
