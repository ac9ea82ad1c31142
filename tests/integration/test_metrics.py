"""Live metrics of real runs, scraped over HTTP (issue 7's acceptance).

Each test serves a run's metrics on a free loopback port, scrapes ``/metrics`` while the run goes
(from its progress callback, which every runner calls after each phase) and after it, parses the
text with prometheus-client's parser and checks that the values moved during the run and, at the
end, equal the results file: cumulative regret, phases, messages, bytes, evaluations, epsilon.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_procs import Samples, get, log_line, scrape
from config_factory import sim_config
from typer.testing import CliRunner

from fedxab.agents.client import ClientAgent
from fedxab.agents.distributed import run_id_for, run_on_broker
from fedxab.agents.federation import Federation
from fedxab.agents.server import ServerAgent
from fedxab.broker.memory import MemoryBroker
from fedxab.cli import app
from fedxab.config import config_from_dict
from fedxab.monitoring.endpoint import MetricsEndpoint
from fedxab.monitoring.metrics import FederationMetrics
from fedxab.results import load_results, write_results
from fedxab.run.job import client_slices, collect_results
from fedxab.security.agents import key_env_var
from fedxab.security.keys import generate_keys

SEED = 1
CLIENTS = 4
EPSILON, PRIVACY_DELTA = 0.5, 1e-3


def _config(algorithm: str = "fedpne", budget: int = 4000, privacy: dict | None = None):
    """A Fed-PNE (or DP-Fed-PNE) job; on a broker the clients send their regret telemetry after
    every phase (by default at most once a second: a run of a few seconds would show its regret
    only at the end)."""
    algo: dict = {}
    if algorithm == "dpfedpne":
        algo |= {"epsilon": EPSILON, "privacy_delta": PRIVACY_DELTA, "composition": "sequential"}
    return sim_config(
        algorithm,
        clients=CLIENTS,
        budget=budget,
        heterogeneity="offset",
        params=algo,
        run={"seed": SEED},
        agents={"telemetry_interval_s": 1e-6},
        **({} if privacy is None else {"privacy": privacy}),
    )


class Scraper:
    """A progress callback that scrapes the endpoint on every call (during the run)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: list[Samples] = []

    def __call__(self, done: int, total: int, cum: float) -> None:
        self.seen.append(scrape(self.url))

    def series(self, name: str, **labels: str) -> list[float]:
        return [get(s, name, **labels) for s in self.seen]


def _results_file(tmp_path: Path, config, record):
    """The run written as results.json and read back: what the metrics must equal."""
    path = write_results(collect_results(config, [record]), tmp_path)
    (run,) = load_results(path).runs
    return run


def check_end_matches_results(after: Samples, run, *, server_view: bool = True) -> None:
    """Every end-of-run value of the scrape ``after`` equals the results file's ``run``."""
    comm = run.communication
    for gauge, value in (
        ("fedxab_cumulative_regret", run.final_cumulative_regret),
        ("fedxab_local_cumulative_regret", run.final_local_cumulative_regret),
        ("fedxab_global_simple_regret", run.final_global_simple_regret),
    ):  # a value the results do not have (unknown, or withheld under local DP) is NaN
        shown = get(after, gauge)
        assert math.isnan(shown) if value is None else shown == value, gauge
    assert get(after, "fedxab_simple_regret") == run.simple_regret
    assert get(after, "fedxab_phases_total") == comm["rounds"]
    assert get(after, "fedxab_phase_duration_seconds_count") == comm["rounds"]
    assert get(after, "fedxab_messages_total", direction="up") == comm["messages_up"]
    assert get(after, "fedxab_messages_total", direction="down") == comm["messages_down"]
    assert get(after, "fedxab_message_bytes_total", direction="up") == comm["bytes_up"]
    assert get(after, "fedxab_message_bytes_total", direction="down") == comm["bytes_down"]
    assert get(after, "fedxab_evaluations_total") == run.evaluations
    assert get(after, "fedxab_round") == run.rounds[-1]
    assert get(after, "fedxab_run_running") == 0
    assert get(after, "fedxab_runs_total", outcome="finished") == 1
    if server_view:
        accepted = sum(p["reports_accepted"] for p in comm["per_phase"])
        assert get(after, "fedxab_reports_total", outcome="accepted") == accepted
        assert get(after, "fedxab_reports_total", outcome="invalid") == 0
    privacy = run.privacy
    if privacy is None:
        assert not any(name.startswith("fedxab_epsilon") for name, _ in after)
        return
    assert get(after, "fedxab_epsilon_max") == privacy["max_epsilon"]
    assert get(after, "fedxab_client_epsilon_gcount") == len(privacy["epsilon"])
    assert get(after, "fedxab_client_epsilon_gsum") == math.fsum(privacy["epsilon"])
    assert get(after, "fedxab_client_epsilon_bucket", le="+Inf") == len(privacy["epsilon"])
    assert get(after, "fedxab_clients_withdrawn") == len(privacy["withdrawn"])
    budget = privacy["budget_epsilon"]
    if budget is None:
        assert math.isnan(get(after, "fedxab_epsilon_budget"))
    else:
        assert get(after, "fedxab_epsilon_budget") == budget
        over = sum(e > budget for e in privacy["epsilon"])
        assert get(after, "fedxab_clients_over_budget") == over == 0


def check_progressed(scraper: Scraper) -> None:
    """The values moved while the run went on: phases, regret, messages and round grew."""
    assert len(scraper.seen) >= 3, "too few scrapes during the run"
    assert all(v == 1 for v in scraper.series("fedxab_run_running"))
    phases = scraper.series("fedxab_phases_total")
    assert phases == sorted(phases) and phases[-1] > phases[0]
    regret = scraper.series("fedxab_cumulative_regret")
    assert regret == sorted(regret) and regret[-1] > regret[0] >= 0
    up = scraper.series("fedxab_messages_total", direction="up")
    assert up == sorted(up) and up[-1] > up[0]


@pytest.mark.parametrize("algorithm", ["fedpne", "dpfedpne"])
def test_in_process_run_scraped_during_and_after(tmp_path, algorithm):
    privacy = {"budget_epsilon": 1.0} if algorithm == "dpfedpne" else None
    config = _config(algorithm, budget=20_000, privacy=privacy)
    metrics = FederationMetrics(privacy_interval_s=0)  # epsilon after every phase
    with MetricsEndpoint(metrics.registry, port=0) as endpoint:
        scraper = Scraper(endpoint.url)
        record = Federation(config, SEED, metrics=metrics).run(scraper)
        after = scrape(endpoint.url)
    run = _results_file(tmp_path, config, record)
    check_progressed(scraper)
    rounds = scraper.series("fedxab_round")
    assert rounds == sorted(rounds) and rounds[-1] > rounds[0]
    check_end_matches_results(after, run)
    info = [labels for name, labels in after if name == "fedxab_run_info"]
    assert info == [
        (
            ("algorithm", algorithm),
            ("objective", "garland"),
            ("role", "federation"),
            ("run_id", run_id_for(config, SEED)),
            ("transport", "inprocess"),
        )
    ]
    if algorithm == "dpfedpne":
        epsilon = scraper.series("fedxab_epsilon_max")
        assert epsilon == sorted(epsilon) and 0 < epsilon[0] < epsilon[-1]
        assert epsilon[-1] <= run.privacy["max_epsilon"]


@pytest.mark.parametrize("algorithm", ["fedpne", "dpfedpne"])
def test_memory_broker_agents_scraped_during_and_after(tmp_path, algorithm):
    privacy = {"budget_epsilon": 1.0} if algorithm == "dpfedpne" else None
    config = _config(algorithm, budget=20_000, privacy=privacy)
    metrics = FederationMetrics(privacy_interval_s=0)
    with MetricsEndpoint(metrics.registry, port=0) as endpoint:
        scraper = Scraper(endpoint.url)
        record = asyncio.run(
            run_on_broker(config, SEED, MemoryBroker(), hosts=2, progress=scraper, metrics=metrics)
        )
        after = scrape(endpoint.url)
    run = _results_file(tmp_path, config, record)
    check_progressed(scraper)
    check_end_matches_results(after, run)
    # the server's view of the control topic: every client joined and sent telemetry
    assert get(after, "fedxab_control_messages_total", kind="join") == CLIENTS
    assert get(after, "fedxab_control_messages_total", kind="telemetry") >= CLIENTS
    assert ("fedxab_run_info", ()) not in after
    (info,) = [dict(labels) for name, labels in after if name == "fedxab_run_info"]
    assert info["transport"] == "memory" and info["role"] == "federation"
    # the same numbers as the in-process runner
    assert record.final_cumulative_regret == Federation(config, SEED).run().final_cumulative_regret


def test_client_agents_export_their_own_clients_only():
    config = _config("dpfedpne", budget=20_000, privacy={"budget_epsilon": 1.0})
    slices = client_slices(CLIENTS, 2)
    views = [FederationMetrics(role="client", privacy_interval_s=0) for _ in slices]

    async def main():
        broker = MemoryBroker()
        run_id = run_id_for(config, SEED)
        # every party in this process (as in `fedxab run`): the clients hand the server agent
        # what they keep from the broker under local DP, so its record is complete
        server = ServerAgent(config, SEED, broker, run_id=run_id, local_clients=True)
        agents = [
            ClientAgent(
                config, SEED, broker, run_id=run_id, client_ids=ids, metrics=view, server=server
            )
            for ids, view in zip(slices, views, strict=True)
        ]
        async with broker, asyncio.TaskGroup() as group:
            task = group.create_task(server.run())
            for agent in agents:
                group.create_task(agent.run())
        return task.result()

    with MetricsEndpoint(views[0].registry) as first, MetricsEndpoint(views[1].registry) as second:
        record = asyncio.run(main())
        scraped = [scrape(first.url), scrape(second.url)]
    comm, privacy = record.communication, record.privacy
    total = lambda name, **labels: sum(get(s, name, **labels) for s in scraped)  # noqa: E731
    assert [get(s, "fedxab_clients") for s in scraped] == [len(ids) for ids in slices]
    assert total("fedxab_messages_total", direction="up") == comm["messages_up"]
    assert total("fedxab_messages_total", direction="down") == comm["messages_down"]
    assert total("fedxab_message_bytes_total", direction="up") == comm["bytes_up"]
    assert total("fedxab_message_bytes_total", direction="down") == comm["bytes_down"]
    assert total("fedxab_evaluations_total") == record.evaluations
    # each agent's regret is the mean over its own clients; together, the federation's
    regret = sum(
        get(s, "fedxab_cumulative_regret") * len(ids)
        for s, ids in zip(scraped, slices, strict=True)
    )
    assert regret / CLIENTS == pytest.approx(record.final_cumulative_regret, rel=1e-12)
    # what each agent's clients observed, live: the mean of their best values in the results
    for s, ids in zip(scraped, slices, strict=True):
        bests = [record.clients[m].best_value for m in ids]
        assert get(s, "fedxab_observed_best_mean") == pytest.approx(math.fsum(bests) / len(ids))
    # each agent's epsilon: its own clients only, the numbers of the results file
    for s, ids in zip(scraped, slices, strict=True):
        own = [privacy["epsilon"][m] for m in ids]
        assert get(s, "fedxab_client_epsilon_gcount") == len(ids)
        assert get(s, "fedxab_epsilon_max") == max(own)
        assert get(s, "fedxab_client_epsilon_gsum") == math.fsum(own)
        assert not any(name == "fedxab_reports_total" and get(s, name, outcome="accepted")
                       for name, _ in s)  # fmt: skip


# ---------------------------------------------------------------------------------- the CLI
TOML = """\
[run]
seed = 1
repeats = 1
budget = {budget}
output = "{output}"

[objective]
name = "garland"

[algorithm]
name = "dpfedpne"
epsilon = 0.5
privacy_delta = 0.001
composition = "sequential"

[federation]
clients = 4

[privacy]
budget_epsilon = 1.0
"""


def _toml(tmp_path: Path, budget: int = 2000) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(TOML.format(budget=budget, output=(tmp_path / "out").as_posix()))
    return path


@pytest.fixture
def busy_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


@pytest.mark.parametrize("command", ["run", "server", "client"])
def test_a_metrics_port_in_use_exits_2_with_one_error_line(tmp_path, busy_port, command):
    args = [command, str(_toml(tmp_path)), "--metrics-port", str(busy_port)]
    if command != "run":
        args += ["--broker", "kafka://127.0.0.1:9"]  # never reached: the port check comes first
    if command == "client":
        args += ["--client-id", "0-3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"error: --metrics-port: port {busy_port} is already in use" in result.output
    assert "another --metrics-port" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_metrics_port_in_use_in_a_real_process(tmp_path, busy_port):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedxab.cli",
            "run",
            str(_toml(tmp_path)),
            "-q",
            *["--metrics-port", str(busy_port)],
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(f"error: --metrics-port: port {busy_port}")
    assert "Traceback" not in proc.stderr + proc.stdout


def test_serve_after_needs_a_metrics_port(tmp_path):
    result = CliRunner().invoke(app, ["run", str(_toml(tmp_path)), "--serve-after", "5"])
    assert result.exit_code == 2
    assert "error: --serve-after needs --metrics-port" in result.output


def test_fedxab_run_serves_the_results_values_after_the_end(tmp_path):
    """`fedxab run --metrics-port 0 --serve-after`: the printed URL serves, after the run, the
    numbers of the results file it wrote; Ctrl-C ends the serving with status 0."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fedxab.cli",
            "run",
            str(_toml(tmp_path, 20_000)),
            "-q",
            "--broker",
            "memory://",
            "--metrics-port",
            "0",
            "--serve-after",
            "120",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"COLUMNS": "200"},
    )
    try:
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"fedxab run ended early: {proc.stderr.read()}"
            lines.append(line)
            if line.startswith("serving metrics on "):
                break
        url = next(line.split()[1] for line in lines if line.startswith("metrics: "))
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        results = Path(
            next(line.split(" ", 1)[1].strip() for line in lines if line.startswith("results: "))
        )
        after = scrape(url)
        (run,) = load_results(results).runs
        check_end_matches_results(after, run)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------ separate processes on Kafka
def test_server_and_client_processes_on_kafka_serve_their_own_views(tmp_path, dev_broker):
    """`fedxab server` and two `fedxab client` processes, each with --metrics-port 0: after the
    run the server's endpoint serves the results file's numbers, and each client process its own
    clients' numbers only (their messages, evaluations and epsilon)."""
    config = _toml(tmp_path, 8000)
    base = [sys.executable, "-m", "fedxab.cli"]
    common = ["--broker", dev_broker.url, "--metrics-port", "0", "--serve-after", "120"]
    slices = {"client-a": "0-1", "client-b": "2-3"}
    # Kafka runs sign by default: each process gets its keys from the environment, the server
    # every client's, a client process its own clients' only
    keys = {m: path.read_text() for m, path in enumerate(generate_keys(4, tmp_path / "keys"))}
    own = {"server": range(4), "client-a": range(2), "client-b": range(2, 4)}
    procs: dict[str, subprocess.Popen] = {}
    logs = {name: tmp_path / f"{name}.log" for name in ("server", *slices)}
    try:
        for name in logs:
            args = ["server", str(config), "-q"] if name == "server" else ["client", str(config)]
            if name in slices:
                args += ["--client-id", slices[name]]
            with open(logs[name], "wb") as log:
                procs[name] = subprocess.Popen(
                    [*base, *args, *common],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=os.environ
                    | {"COLUMNS": "300"}
                    | {key_env_var(m): keys[m] for m in own[name]},
                )
        urls = {name: log_line(log, "metrics: ").split()[1] for name, log in logs.items()}
        for log in logs.values():
            log_line(log, "serving metrics on ")  # the run is over, the endpoint still up
        scraped = {name: scrape(url) for name, url in urls.items()}
        results = log_line(logs["server"], "results: ").split(" ", 1)[1].strip()
        (run,) = load_results(results).runs
        for proc in procs.values():
            proc.send_signal(signal.SIGINT)
        for name, proc in procs.items():
            assert proc.wait(timeout=30) == 0, logs[name].read_text()[-3000:]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    check_end_matches_results(scraped["server"], run)
    assert run.is_withheld("cumulative_regret")  # local DP: the clients' pulls stay with them
    (info,) = [dict(labels) for name, labels in scraped["server"] if name == "fedxab_run_info"]
    assert (info["role"], info["transport"]) == ("server", "kafka")
    clients = [scraped[name] for name in slices]
    total = lambda name, **labels: sum(get(s, name, **labels) for s in clients)  # noqa: E731
    comm = run.communication
    assert total("fedxab_messages_total", direction="up") == comm["messages_up"]
    assert total("fedxab_message_bytes_total", direction="up") == comm["bytes_up"]
    assert total("fedxab_evaluations_total") == run.evaluations
    for s, ids in zip(clients, ([0, 1], [2, 3]), strict=True):
        (info,) = [dict(labels) for name, labels in s if name == "fedxab_run_info"]
        assert info["role"] == "client"
        assert get(s, "fedxab_clients") == 2
        own = [run.privacy["epsilon"][m] for m in ids]
        assert get(s, "fedxab_epsilon_max") == max(own)
        assert get(s, "fedxab_client_epsilon_gcount") == len(own)
        assert get(s, "fedxab_reports_total", outcome="accepted") == 0  # the server's view only


def test_a_single_agent_run_feeds_its_metrics_through_the_same_observer():
    """HCT alone: the metrics follow the run (round, regret) and end equal to its record."""
    from prometheus_client.parser import text_string_to_metric_families

    from fedxab.agents.local import run_single

    def values() -> dict[str, float]:
        return {
            s.name: s.value
            for family in text_string_to_metric_families(metrics.exposition())
            for s in family.samples
            if not s.labels
        }

    config = config_from_dict(
        {"run": {"budget": 600}, "objective": {"name": "garland"}, "algorithm": {"name": "hct"}}
    )
    metrics = FederationMetrics()
    rounds: list[float] = []
    observed: list[float] = []

    def progress(done, total, cum):
        now = values()
        rounds.append(now["fedxab_round"])
        observed.append(now["fedxab_observed_best_mean"])

    record = run_single(config, 0, progress, metrics=metrics)
    assert rounds[-1] == 600 and len(rounds) >= 100  # the round moved with the progress
    # the best observed value, live: it only goes up and ends at the record's
    assert observed[-1] == record.clients[0].best_value
    assert all(a <= b for a, b in itertools.pairwise(observed))
    end = values()
    assert end["fedxab_cumulative_regret"] == record.final_cumulative_regret
    assert end["fedxab_simple_regret"] == record.simple_regret
    assert end["fedxab_runs_started_total"] == 1 and end["fedxab_run_running"] == 0
