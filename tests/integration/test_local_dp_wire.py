"""Under local DP only charged releases leave a client (issue 36 item 1), on the dev broker.

A DP-Fed-PNE job runs as three processes: `fedxab server --output` (with its metrics endpoint
and its dashboard) and two `fedxab client --output` processes, on a user's objective that logs
every value it returns. Every record on every topic of the job's namespace is read back, with
the server's results.json, its metrics and its dashboard state; every float found in them is
compared with every logged value: none may be one. The clients' own outputs hold what they
observed and their trials (issue 35 item 4). The same job without DP (Fed-PNE) is the positive
control: the server's results hold its clients' outcomes, which the same detector finds.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import os
import textwrap
import urllib.request
import uuid
from pathlib import Path

import msgpack
import numpy as np
import pytest
from cli_procs import log_line, start_cli, wait_ok

from fedxab.broker.codec import unpackb
from fedxab.broker.kafka import KafkaBroker
from fedxab.errors import ProtocolError

BUDGET = 60

OBJECTIVE = '''\
"""A site's black box that logs every value it returns (the test's raw rewards)."""
import os

import numpy as np
import pytest


def site(x, client_id):
    value = float(np.sin(3.1 * x[0] + 0.7 * client_id) * np.cos(2.3 * x[1]) + 0.123456789)
    with open(os.environ["RAW_VALUES"], "a") as log:
        log.write(repr(value) + "\\n")
    return value
'''


def _config(tmp: Path, namespace: str, algorithm: str) -> Path:
    params = "epsilon = 0.8\nprivacy_delta = 0.01\n" if algorithm == "dpfedpne" else ""
    path = tmp / f"{algorithm}.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            [run]
            budget = {BUDGET}
            output = "{(tmp / "unused").as_posix()}"

            [objective]
            function = "rawsites:site"
            domain = [[0.0, 1.0], [0.0, 1.0]]

            [algorithm]
            name = "{algorithm}"
            """
        )
        + params
        + textwrap.dedent(
            f"""
            [federation]
            clients = 2

            [broker]
            namespace = "{namespace}"

            [security]
            sign = false
            """
        )
    )
    return path


def _floats(value, out: list[float]) -> list[float]:
    """Every float in ``value``: decoded data, with any bytes decoded again as a message (an
    envelope's payload, a signed record's body) and any string parsed as JSON or a number."""
    if isinstance(value, dict):
        for k, v in value.items():
            _floats(k, out)
            _floats(v, out)
    elif isinstance(value, list | tuple):
        for v in value:
            _floats(v, out)
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "fc":
            out.extend(value.real.ravel().tolist())
    elif isinstance(value, float):
        out.append(value)
    elif isinstance(value, bytes | bytearray | memoryview):
        for decode in (unpackb, lambda b: msgpack.unpackb(b, raw=False, strict_map_key=False)):
            try:
                _floats(decode(bytes(value)), out)
                break
            except (ProtocolError, ValueError, TypeError, msgpack.ExtraData):
                continue
    return out


async def _every_record(address: str, namespace: str) -> dict[str, list[bytes]]:
    """Every record of every topic whose name starts with ``namespace``, by topic."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=address)
    await consumer.start()
    try:
        topics = sorted(t for t in await consumer.topics() if t.startswith(f"{namespace}."))
    finally:
        await consumer.stop()
    out: dict[str, list[bytes]] = {}
    async with KafkaBroker(address) as broker:
        for topic in topics:
            sub = broker.subscribe(topic, None)
            try:
                ends = await sub.end_offsets()
                left = sum(ends.values())
                values = out[topic] = []
                if left:
                    async with asyncio.timeout(30):
                        async for record in sub:
                            values.append(record.value)
                            left -= 1
                            if left == 0:
                                break
            finally:
                await sub.close()
    return out


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def _run(tmp: Path, dev_broker, algorithm: str):
    """The job as three processes; (logged values, records by topic, server's results,
    metrics text, dashboard state, the clients' output directories)."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    (tmp / "rawsites.py").write_text(OBJECTIVE)
    config = _config(tmp, namespace, algorithm)
    raw_log = tmp / "raw.txt"
    where = os.pathsep.join(filter(None, [str(tmp), os.environ.get("PYTHONPATH", "")]))
    env = {"RAW_VALUES": str(raw_log), "PYTHONPATH": where, "COLUMNS": "300"}
    server_log = tmp / "server.log"
    url = dev_broker.url
    server = start_cli(
        *("server", str(config), "--broker", url, "--output", str(tmp / "server-out"), "-q"),
        *("--metrics-port", "0", "--dashboard", "--dashboard-port", "0", "--serve-after", "60"),
        log=server_log,
        env={"COLUMNS": "300"},
    )
    outputs = [tmp / f"client{k}-out" for k in range(2)]
    clients = [
        start_cli(
            *("client", str(config), "--broker", url, "--client-id", str(k)),
            *("--output", str(outputs[k])),
            log=tmp / f"client{k}.log",
            env=env,
        )
        for k in range(2)
    ]
    try:
        for k, proc in enumerate(clients):
            wait_ok(proc, tmp / f"client{k}.log", 120)
        log_line(server_log, "serving ", timeout=120)  # results written, still serving
        metrics_url = log_line(server_log, "metrics: ").split()[-1]
        dashboard_url = log_line(server_log, "dashboard: ").split()[-1]
        metrics = _get(metrics_url).decode()
        page, _, token = dashboard_url.partition("?")  # (the URL printed carries the token)
        dashboard = json.loads(_get(f"{page.rstrip('/')}/api/state?{token}"))
    finally:
        for proc in (server, *clients):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    calls = raw_log.read_text().split()
    assert len(calls) == 2 * BUDGET  # the objective ran, and logged every value it returned
    raw = {float(line) for line in calls}
    records = asyncio.run(_every_record(dev_broker.address, namespace))
    results = json.loads((tmp / "server-out" / "results.json").read_text())
    return raw, records, results, metrics, dashboard, outputs


def _metric_values(text: str) -> list[float]:
    values = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            values.append(float(line.rsplit(" ", 1)[-1]))
    return values


def _leaks(raw: set[float], found: list[float]) -> set[float]:
    return raw & {v for v in found if math.isfinite(v)}


def test_under_local_dp_no_raw_reward_reaches_the_server_side(tmp_path, dev_broker):
    raw, records, results, metrics, dashboard, outputs = _run(tmp_path, dev_broker, "dpfedpne")
    assert len(raw) >= 5  # distinct values (Fed-PNE pulls each cell's centre many times)
    kinds = {topic.rsplit(".", 1)[-1] for topic in records}
    assert {"broadcast", "report", "control", "ledger", "lobby"} <= kinds, kinds
    on_the_wire = [v for values in records.values() for r in values for v in _floats(r, [])]
    assert len(on_the_wire) > 20  # the noisy releases, the ledger's numbers, ...
    assert not _leaks(raw, on_the_wire)
    assert not _leaks(raw, _floats(results, []))
    assert not _leaks(raw, _metric_values(metrics))
    assert dashboard["runs"][0]["status"] == "finished"  # the state of the whole run
    assert not _leaks(raw, _floats(dashboard, []))
    # the server says what it does not have, and why
    run = results["runs"][0]
    assert "clients" not in run
    assert run["withheld"]["reason"] == "local DP" and "clients" in run["withheld"]["fields"]
    assert run["privacy"]["releases"][0] > 0  # the charged releases did reach it
    # each client has its own results: what it observed and every trial, the raw values
    for k, out in enumerate(outputs):
        own = json.loads((out / "results.json").read_text())["runs"][0]
        (client,) = own["clients"]
        assert client["client"] == k and client["best_value"] in raw
        with open(out / f"trials-seed0-client{k}.csv", newline="") as handle:
            trials = list(csv.DictReader(handle))
        assert len(trials) == BUDGET
        assert {float(t["value"]) for t in trials} <= raw
        assert max(float(t["value"]) for t in trials) == client["best_value"]
        assert set(trials[0]) == {"client", "number", "x0", "x1", "value", "wall_s"}


def test_without_dp_the_server_gets_its_clients_outcomes(tmp_path, dev_broker):
    """The positive control: the same job without DP sends each client's outcome (raw values
    the detector finds in the server's results), but never its trials."""
    raw, records, results, _, _, _ = _run(tmp_path, dev_broker, "fedpne")
    run = results["runs"][0]
    assert "withheld" not in run
    assert [c["client"] for c in run["clients"]] == [0, 1]
    assert all(c["best_value"] in raw for c in run["clients"])
    assert _leaks(raw, _floats(results, []))
    on_the_wire = [v for values in records.values() for r in values for v in _floats(r, [])]
    assert 0 < len(_leaks(raw, on_the_wire)) < len(raw)  # the outcomes, not the trials
    assert not list((tmp_path / "server-out").glob("trials-*.csv"))


@pytest.mark.parametrize("url", ["memory://", "inprocess://"])
def test_fedxab_run_keeps_every_clients_results_and_sends_no_raw_reward(monkeypatch, url):
    """`fedxab run` / `fedxab.federate` host every party: on the embedded broker no record
    carries a raw value (DP-Fed-PNE), yet the results hold each client's outcome and trials,
    handed over in process, equal to the in-process runner's."""
    import fedxab
    from fedxab.broker.memory import MemoryBroker

    raw: list[float] = []

    def site(x, client_id):
        value = float(np.sin(3.1 * x[0] + 0.7 * client_id) * np.cos(2.3 * x[1]) + 0.123456789)
        raw.append(value)
        return value

    published: list[bytes] = []
    publish = MemoryBroker.publish

    async def capturing(self, topic, key, value):
        published.append(value)
        await publish(self, topic, key, value)

    monkeypatch.setattr(MemoryBroker, "publish", capturing)
    params = {"epsilon": 0.8, "privacy_delta": 0.01}
    domain = [[0.0, 1.0], [0.0, 1.0]]
    run = fedxab.federate(
        site, domain, budget=BUDGET, clients=2, algorithm="dpfedpne", params=params, broker=url
    ).runs[0]
    assert len(raw) == 2 * BUDGET
    if url == "memory://":
        assert len(published) > 20
    assert not _leaks(set(raw), [v for r in published for v in _floats(r, [])])
    assert run.withheld is None and [len(c.trials) for c in run.clients] == [BUDGET, BUDGET]
    assert all(c.best_value in raw for c in run.clients)
