"""The scikit-learn example (examples/sklearn_tuning): federated SVM tuning over three sites'
shards of the digits data set, in one process and as a server plus three client processes on
the dev broker, as its files say to run it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from cli_procs import FEDXAB, start_cli, wait_ok, without_time

import fedxab
from fedxab.config import load_config

pytest.importorskip("sklearn")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sklearn_tuning"


@pytest.fixture(scope="module")
def sites():
    sys.path.insert(0, str(EXAMPLE))
    try:
        import sites

        yield sites
    finally:
        sys.path.remove(str(EXAMPLE))


def test_the_example_runs_in_one_process_and_reports_every_site(sites):
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE / "tune.py")], capture_output=True, text=True, timeout=120
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 120
    rows = re.findall(
        r"^\s+(\d)\s+(0\.\d+)\s+(0\.\d+)\s+\(C=\S+, gamma=\S+, kernel=(\w+), degree=(\d)\)$",
        proc.stdout,
        re.MULTILINE,
    )
    assert [int(row[0]) for row in rows] == [0, 1, 2], proc.stdout
    # the reported accuracies are what the sites' own objectives give at their best parameters
    results = fedxab.federate(
        sites.accuracy,
        space=sites.SPACE,
        clients=3,
        budget=300,
        algorithm="fedpne",
        deterministic=True,
    )
    run = results.runs[0]
    for row, outcome in zip(rows, run.clients, strict=True):
        best = run.best_params[outcome.client]
        assert float(row[1]) == pytest.approx(outcome.best_value, abs=5e-5)
        assert (row[3], int(row[4])) == (best["kernel"], best["degree"])
        assert outcome.best_value == sites.accuracy(best, outcome.client)
        assert 0.9 < outcome.best_value <= 1.0  # an RBF SVM does this well on digits
    assert run.evaluations == 900
    # the config declares the same typed space as the module
    assert load_config(EXAMPLE / "run.toml").search_space == fedxab.SearchSpace(sites.SPACE)


def test_the_example_as_a_server_and_three_client_processes(tmp_path, dev_broker, sites):
    """The commands of run.toml's header, with keys and the dev broker: the server process
    cannot import the sites module; the results are those of the in-process run."""
    config = tmp_path / "run.toml"
    namespace = f"sk{uuid.uuid4().hex[:8]}"
    text = (EXAMPLE / "run.toml").read_text()
    config.write_text(
        text.replace('output = "results/sklearn_tuning"', f'output = "{tmp_path / "out"}"')
        + f'\n[broker]\nnamespace = "{namespace}"\n'
    )
    keys = tmp_path / "keys"
    subprocess.run([*FEDXAB, "keys", "generate", "--clients", "3", "--out", str(keys)], check=True)
    common = ["--broker", dev_broker.url, "--keys-dir", str(keys)]
    server = start_cli("server", str(config), *common, "-q", log=tmp_path / "server.log")
    clients = [
        start_cli(
            "client",
            str(config),
            *common,
            "--client-id",
            str(k),
            log=tmp_path / f"client{k}.log",
            env={"PYTHONPATH": str(EXAMPLE)},
        )
        for k in range(3)
    ]
    try:
        for k, proc in enumerate(clients):
            wait_ok(proc, tmp_path / f"client{k}.log", 120)
        wait_ok(server, tmp_path / "server.log", 120)
    finally:
        for proc in (server, *clients):
            if proc.poll() is None:
                proc.kill()
    got = json.loads((tmp_path / "out" / "results.json").read_text())["runs"][0]
    expected = fedxab.run_job(
        load_config(config).with_broker_url("inprocess://"), functions=sites.accuracy
    )
    assert without_time(got) == without_time(expected.runs[0].to_dict())
    assert set(got["recommendation_params"]) == {"C", "gamma", "kernel", "degree"}
    assert got["clients"][0]["best_params"] == expected.runs[0].best_params[0]
