"""The scikit-learn example (examples/sklearn_tuning): federated SVM tuning over three sites'
shards of the digits data set with the default algorithm ("auto"), in one process and as a
server plus three client processes on the dev broker, as its README says to run it; the
parameters are shown by name, in the user's units, in what it prints and writes."""

from __future__ import annotations

import csv
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


def _check_named(params: dict) -> None:
    """``params`` are the example's parameters by name, in the user's units: C and gamma
    floats within their (log-scale) bounds, the kernel one of its names, the degree an int."""
    assert list(params) == ["C", "gamma", "kernel", "degree"]
    assert isinstance(params["C"], float) and 1e-2 <= params["C"] <= 1e3
    assert isinstance(params["gamma"], float) and 1e-5 <= params["gamma"] <= 1e-1
    assert params["kernel"] in ("rbf", "poly")
    assert type(params["degree"]) is int and 2 <= params["degree"] <= 5


@pytest.fixture(scope="module")
def sites():
    sys.path.insert(0, str(EXAMPLE))
    try:
        import sites

        yield sites
    finally:
        sys.path.remove(str(EXAMPLE))


@pytest.fixture(scope="module")
def reference(sites) -> fedxab.RunResults:
    """The example's job (run.toml) in this process: the reference of both ways of running it,
    computed once (150 SVM fits)."""
    return fedxab.run_job(
        load_config(EXAMPLE / "run.toml").with_broker_url("inprocess://"), functions=sites.accuracy
    )


def test_the_example_runs_in_one_process_and_reports_every_site(sites, reference):
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE / "tune.py")], capture_output=True, text=True, timeout=120
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 120
    assert "algorithm auto: fedtpe (" in proc.stdout
    found = re.search(r"^federated recommendation: (.+)$", proc.stdout, re.MULTILINE)
    assert found, proc.stdout
    rows = re.findall(
        r"^\s+(\d)\s+(\d+)\s+(0\.\d+)\s+(0\.\d+)"
        r"\s+\(C=\S+, gamma=\S+, kernel=(\w+), degree=(\d)\)$",
        proc.stdout,
        re.MULTILINE,
    )
    assert [int(row[0]) for row in rows] == [0, 1, 2], proc.stdout
    # the reported figures are what the default run and the sites' own objectives give
    assert reference.algorithm_choice["name"] == "fedtpe"
    run = reference.runs[0]
    shown = dict(item.split("=") for item in found[1].split(", "))
    rec = run.recommendation_params
    assert (shown["kernel"], int(shown["degree"])) == (rec["kernel"], rec["degree"])
    assert float(shown["C"]) == pytest.approx(rec["C"], rel=1e-3)
    assert float(shown["gamma"]) == pytest.approx(rec["gamma"], rel=1e-3)
    for row, outcome in zip(rows, run.clients, strict=True):
        best = run.best_params[outcome.client]
        assert int(row[1]) == len(outcome.trials) <= 50
        assert float(row[2]) == pytest.approx(outcome.best_value, abs=5e-5)
        assert (row[4], int(row[5])) == (best["kernel"], best["degree"])
        _check_named(best)
        assert outcome.best_value == sites.accuracy(best, outcome.client)
        assert 0.9 < outcome.best_value <= 1.0  # an RBF SVM does this well on digits
    _check_named(run.recommendation_params)
    assert run.evaluations == 150
    # the config declares the same typed space as the module
    assert load_config(EXAMPLE / "run.toml").search_space == fedxab.SearchSpace(sites.SPACE)


def test_the_example_as_a_server_and_three_client_processes(tmp_path, dev_broker, sites, reference):
    """The commands of the README, with keys and the dev broker (without the dashboards): the
    server process cannot import the sites module; the results are those of the in-process
    run, with the parameters by name in the server's results and table and in site 0's
    trials."""
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
    server = start_cli(
        "server",
        str(config),
        *common,
        "--output",
        str(tmp_path / "out"),
        "--progress",
        "none",
        log=tmp_path / "server.log",
    )
    clients = [
        start_cli(
            "client",
            str(config),
            *common,
            "--client-id",
            str(k),
            *(["--output", str(tmp_path / "site0")] if k == 0 else []),
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
    assert without_time(got) == without_time(reference.runs[0].to_dict())
    assert reference.algorithm_choice["name"] == "fedtpe"
    rec = got["recommendation_params"]
    _check_named(rec)
    for m in range(3):
        _check_named(got["clients"][m]["best_params"])
        assert got["clients"][m]["best_params"] == reference.runs[0].best_params[m]
    line = (
        f"recommendation (seed 0): C={rec['C']:.4g}, gamma={rec['gamma']:.4g}, "
        f"kernel={rec['kernel']}, degree={rec['degree']}"
    )
    assert line in (tmp_path / "server.log").read_text().splitlines()
    with open(tmp_path / "site0" / "trials-seed0-client0.csv", newline="") as f:
        trials = list(csv.DictReader(f))
    assert list(trials[0]) == [
        "client",
        "number",
        "C",
        "gamma",
        "kernel",
        "degree",
        "value",
        "wall_s",
    ]
    assert {row["kernel"] for row in trials} <= {"rbf", "poly"}
    assert len(trials) == len(reference.runs[0].clients[0].trials)
