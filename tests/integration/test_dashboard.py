"""The dashboard end to end: its HTTP routes, `fedxab run --dashboard` and `fedxab dashboard`,
and the page in headless Chromium showing a run's own numbers, live and afterwards."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from fedxab.config import config_from_dict
from fedxab.dashboard.server import DashboardPortError, DashboardServer, ResultsSource
from fedxab.dashboard.state import DashboardState
from fedxab.errors import FedxabError
from fedxab.run.observe import Observers, RunObserver

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from _browser import Chromium, chromium_binary  # noqa: E402

needs_chromium = pytest.mark.skipif(
    chromium_binary() is None, reason="no chromium on PATH (Debian package chromium)"
)
CLIENTS = 8
SERVE = ("--serve-after", "inf")
JOB = {
    "run": {"seed": 0, "repeats": 1, "budget": 2000},
    "objective": {"name": "garland"},
    "algorithm": {
        "name": "dpfedpne",
        "epsilon": 0.5,
        "privacy_delta": 1e-3,
        "calibration": "classic",
        "composition": "sequential",  # each release charged: the budget stops clients
    },
    "federation": {"clients": CLIENTS, "heterogeneity": "shift"},
    "broker": {"url": "inprocess://"},
    "privacy": {"accountant": "rdp", "budget_epsilon": 0.7},
}


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def _finished_state() -> tuple[DashboardState, object]:
    from fedxab.api import run_job

    config = config_from_dict(JOB)
    state = DashboardState(config.to_dict())
    return state, run_job(config, metrics=state)


def _with_token(page: DashboardServer, path: str) -> str:
    """``path`` of ``page`` with its access token in the query."""
    return f"{page.base_url}{path}{'&' if '?' in path else '?'}token={page.token}"


def test_routes_serve_the_page_its_assets_and_json_on_loopback():
    state, results = _finished_state()
    with DashboardServer(state) as page:
        assert page.host == "127.0.0.1" and page.base_url == f"http://127.0.0.1:{page.port}/"
        assert page.url == f"{page.base_url}?token={page.token}"
        status, kind, body = _get(page.url)
        assert status == 200 and kind.startswith("text/html") and b"dashboard.js" in body
        assert b"http" not in body.replace(b"http://www.w3.org", b"")  # nothing from outside
        status, kind, body = _get(_with_token(page, "static/dashboard.js"))
        assert status == 200 and kind.startswith("text/javascript")
        status, kind, body = _get(_with_token(page, "api/state"))
        assert status == 200 and kind.startswith("application/json")
        snap = json.loads(body)
        assert snap["run"]["final"]["cumulative_regret"] == results.runs[0].final_cumulative_regret
        status, _, body = _get(_with_token(page, "api/client?id=3"))
        assert json.loads(body)["epsilon"] == results.runs[0].privacy["epsilon"][3]
        status, _, body = _get(_with_token(page, f"api/client?id={CLIENTS}"))
        assert status == 404 and f"clients 0 to {CLIENTS - 1}" in json.loads(body)["error"]
        status, _, body = _get(_with_token(page, "api/state?run=x"))
        assert status == 404
        assert _get(_with_token(page, "static/../../etc/passwd"))[0] == 404
        assert _get(_with_token(page, "nothing"))[0] == 404


def test_every_route_refuses_a_request_without_the_token():
    """Issue 39 item 6: the results the dashboard shows are private (written owner-only);
    any local user reaches the loopback port, so every route needs the server's token, from
    the query or from the cookie the page's answer set."""
    state, _ = _finished_state()
    with DashboardServer(state) as page, DashboardServer(state) as other:
        assert page.token != other.token  # drawn for each server
        for path in ("", "index.html", "static/dashboard.js", "api/state", "api/client?id=3"):
            status, _, body = _get(page.base_url + path)
            assert status == 403 and b"access token" in body, path
            assert _get(f"{page.base_url}{path}{'&' if '?' in path else '?'}token=x")[0] == 403
            assert _get(_with_token(other, path).replace(other.base_url, page.base_url))[0] == 403
        with urllib.request.urlopen(page.url, timeout=10) as r:  # the printed URL
            cookie = r.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        jar = cookie.split(";")[0]
        request = urllib.request.Request(page.base_url + "api/state", headers={"Cookie": jar})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200 and json.loads(r.read())["run"]
        forged = jar.split("=")[0] + "=" + "x" * len(page.token)
        request = urllib.request.Request(page.base_url + "api/state", headers={"Cookie": forged})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403


def test_a_port_in_use_names_the_option_and_the_fix():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(DashboardPortError, match="--dashboard-port: port .* already in use"):
            DashboardServer(DashboardState(), port=busy.getsockname()[1])


def test_results_source_reads_the_file_again_when_it_changes(tmp_path):
    from fedxab.results import write_results

    with pytest.raises(FedxabError, match="no results file"):
        ResultsSource(tmp_path)
    _, results = _finished_state()
    path = write_results(results, tmp_path)
    source = ResultsSource(tmp_path)
    assert len(source.snapshot()["runs"]) == 1
    two = dataclasses.replace(results, runs=results.runs * 2)
    write_results(two, tmp_path)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert len(source.snapshot()["runs"]) == 2


class _PauseAt(RunObserver):
    """Holds the run at its ``updates``-th progress update until released."""

    wants_progress = True

    def __init__(self, updates: int) -> None:
        self.updates = updates
        self.reached = threading.Event()
        self.release = threading.Event()

    def on_progress(self, progress) -> None:
        self.updates -= 1
        if self.updates == 0:
            self.reached.set()
            assert self.release.wait(60)


def _value(browser: Chromium, element_id: str) -> str:
    return browser.evaluate(f"document.getElementById({element_id!r}).dataset.value")


def _chart(browser: Chromium, chart: str, series: str) -> dict:
    return browser.evaluate(
        f"(() => {{ const p = document.querySelector('#{chart} polyline[data-series={series}]');"
        " return p ? {points: Number(p.dataset.points), last: p.dataset.last} : null; })()"
    )


@needs_chromium
def test_the_page_shows_a_run_live_and_then_its_record(tmp_path):
    from fedxab.api import run_job

    config = config_from_dict(JOB)
    state, pause = DashboardState(config.to_dict()), _PauseAt(updates=2)
    out: dict = {}
    runner = threading.Thread(
        target=lambda: out.setdefault("results", run_job(config, metrics=Observers([state, pause])))
    )
    with DashboardServer(state) as page, Chromium() as browser:
        runner.start()
        try:
            assert pause.reached.wait(60)
            browser.open(page.url, "document.body.dataset.renderedMs")
            live = state.snapshot()["run"]
            assert browser.evaluate("document.body.dataset.status") == "running"
            assert 0 < live["phases"]["count"] < 10
            assert _value(browser, "kpi-phases") == str(live["phases"]["count"])
            assert _value(browser, "kpi-clients") == str(CLIENTS)
            curve = live["curves"]["cumulative"]
            shown = _chart(browser, "regret-chart", "cumulative")
            assert shown["points"] == len(curve) and float(shown["last"]) == curve[-1][1]
            assert float(_value(browser, "kpi-regret")) == curve[-1][1]
            browser.screenshot(tmp_path / "live.png")
        finally:
            pause.release.set()
            runner.join(120)
        record = out["results"].runs[0]
        browser.open(page.url, "document.body.dataset.status === 'finished'")
        browser.screenshot(tmp_path / "finished.png")

        # the curves: the record's cumulative regret, to the last digit
        shown = _chart(browser, "regret-chart", "cumulative")
        assert float(shown["last"]) == record.final_cumulative_regret
        assert float(_value(browser, "kpi-regret")) == record.final_cumulative_regret
        band = _chart(browser, "band-chart", "mean")
        reached = np.isfinite([o.best_so_far for o in record.clients]).any(axis=0)
        assert band["points"] == int(reached.sum()) > 0
        # the epsilon panel: the record's per-client epsilon
        epsilon = record.privacy["epsilon"]
        assert float(_value(browser, "kpi-epsilon")) == max(epsilon)
        assert browser.evaluate("document.getElementById('eps-hist').dataset.total") == str(CLIENTS)
        rows = browser.evaluate(
            "[...document.querySelectorAll('#eps-nearest tbody tr')]"
            ".map(r => [Number(r.dataset.client), Number(r.dataset.epsilon)])"
        )
        assert rows[0][1] == max(epsilon) and all(epsilon[m] == e for m, e in rows)
        # the client counts
        withdrawn = len(record.privacy["withdrawn"])
        assert withdrawn > 0  # the budget stops clients: the count is not trivially 0
        assert _value(browser, "kpi-clients") == str(CLIENTS)
        assert _value(browser, "kpi-withdrawn") == str(withdrawn)
    assert (tmp_path / "finished.png").read_bytes()[:4] == b"\x89PNG"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_chromium
def test_run_dashboard_and_dashboard_command_serve_the_results(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text(
        "[run]\nseed = 0\nrepeats = 2\nbudget = 1000\n"
        f'output = "{tmp_path / "out"}"\n[objective]\nname = "garland"\n'
        '[algorithm]\nname = "fedpne"\n[federation]\nclients = 5\n'
    )
    fedxab = str(Path(sys.executable).with_name("fedxab"))
    port = _free_port()
    proc = subprocess.Popen(
        [fedxab, "run", str(job), "-q", "--dashboard", "--dashboard-port", str(port), *SERVE],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("serving "):
                break
        text = "".join(lines)
        found = re.search(rf"dashboard: (http://127\.0\.0\.1:{port}/\?token=[\w-]+)", text)
        assert found, text
        results = json.loads((tmp_path / "out" / "results.json").read_text())
        with Chromium() as browser:
            url = found.group(1)
            browser.open(url, "document.body.dataset.status === 'finished'")
            last = results["runs"][-1]["cumulative_regret"][-1]
            assert float(_value(browser, "kpi-regret")) == last
            assert browser.evaluate("document.getElementById('run-select').options.length") == 2
            assert _value(browser, "kpi-clients") == "5"
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0

    port = _free_port()
    proc = subprocess.Popen(
        [fedxab, "dashboard", str(tmp_path / "out"), "--dashboard-port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        found = re.search(rf"(http://127\.0\.0\.1:{port}/\?token=[\w-]+)", line)
        assert found, line
        with Chromium() as browser:
            browser.open(found.group(1), "document.body.dataset.renderedMs")
            first = results["runs"][0]["cumulative_regret"][-1]
            browser.evaluate("document.getElementById('run-select').value = '0'")
            browser.evaluate(
                "document.getElementById('run-select').dispatchEvent(new Event('change'))"
            )
            deadline = time.monotonic() + 10
            while float(_value(browser, "kpi-regret") or "nan") != first:
                assert time.monotonic() < deadline, "the page did not show run 0"
                time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0


def test_a_results_file_with_its_ledger_shows_each_owners_lifetime_spend(tmp_path):
    """Two runs charging one ledger with lifetime budgets: the page's lifetime panel is what
    `fedxab audit --lifetime` computes, and it follows the ledger when it grows."""
    from fedxab.api import run_job
    from fedxab.privacy.audit import owner_summaries
    from fedxab.privacy.ledger import PrivacyLedger
    from fedxab.results import write_results

    ledger = tmp_path / "ledger.db"
    job = {**JOB, "privacy": {**JOB["privacy"], "ledger": str(ledger), "lifetime_epsilon": 1.5}}
    results = run_job(config_from_dict(job))
    write_results(results, tmp_path)
    source = ResultsSource(tmp_path)  # the ledger the results name
    lifetime = source.snapshot()["lifetime"]
    with PrivacyLedger(ledger) as book:
        rows = owner_summaries(book)
    assert lifetime["owners"] == len(rows) == CLIENTS
    assert lifetime["with_budget"] == CLIENTS and lifetime["over_budget"] == 0
    spent = {row["owner"]: row["epsilon"] for row in rows}
    assert {r["owner"]: r["epsilon"] for r in lifetime["nearest"]} == {
        r["owner"]: spent[r["owner"]] for r in lifetime["nearest"]
    }
    least = min(row["remaining"] for row in rows)
    assert lifetime["nearest"][0]["remaining"] == least

    second = config_from_dict({**job, "run": {**job["run"], "seed": 1}})
    run_job(second)  # the same owners spend again: the panel follows the ledger
    os.utime(ledger, ns=(time.time_ns(), time.time_ns() + 10**9))
    again = source.snapshot()["lifetime"]
    assert all(r["runs"] == 2 for r in again["nearest"])
    assert again["nearest"][0]["epsilon"] > lifetime["nearest"][0]["epsilon"]
    with pytest.raises(FedxabError, match="--ledger: .*no such ledger file"):
        ResultsSource(tmp_path, tmp_path / "missing.db")


@needs_chromium
def test_the_page_lists_the_owners_nearest_their_lifetime_budget(tmp_path):
    from fedxab.api import run_job
    from fedxab.results import write_results

    ledger = tmp_path / "ledger.db"
    job = {**JOB, "privacy": {**JOB["privacy"], "ledger": str(ledger), "lifetime_epsilon": 1.5}}
    write_results(run_job(config_from_dict(job)), tmp_path)
    source = ResultsSource(tmp_path)
    nearest = source.snapshot()["lifetime"]["nearest"]
    with DashboardServer(source) as page, Chromium() as browser:
        browser.open(page.url, "document.body.dataset.renderedMs")
        assert browser.evaluate("document.getElementById('lifetime').hidden") is False
        rows = browser.evaluate(
            "[...document.querySelectorAll('#lifetime-owners tbody tr')]"
            ".map(r => [r.dataset.owner, Number(r.dataset.epsilon)])"
        )
    assert rows == [[r["owner"], r["epsilon"]] for r in nearest]


@needs_chromium
def test_the_page_shows_the_trials_and_the_recommendation_by_name():
    from fedxab.objectives.history import TrialRecord

    space = {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}}
    state = DashboardState({"space": space, "objective": {"direction": "minimize"}})
    state.start_run(
        run_id="r", algorithm="fedpne", objective="user", transport="kafka", clients=1, budget=5
    )
    for number, value in enumerate([0.4, 0.125, 0.3]):
        state.on_trial(0, TrialRecord(number, {"lr": 10.0 ** -(number + 1)}, value, 0.5))
    with DashboardServer(state) as page, Chromium() as browser:
        browser.open(page.url, "document.body.dataset.renderedMs")
        assert _value(browser, "trials-counts") == "3"
        assert browser.evaluate("document.getElementById('trials-panel').hidden") is False
        best = "document.querySelector('#trials-best tbody tr')"
        assert browser.evaluate(f"{best}.dataset.value") == "0.125"  # the least, minimising
        assert browser.evaluate(f"{best}.cells[4].textContent") == "lr = 0.01"
        newest = "document.querySelector('#trials-recent tbody tr')"
        assert browser.evaluate(f"{newest}.cells[1].textContent") == "2"  # newest first
        assert browser.evaluate("document.getElementById('recommendation').hidden") is True
        state.on_recommendation([0.5])
        version = state.version
        deadline = time.monotonic() + 10
        while browser.evaluate("document.body.dataset.version") != str(version):
            assert time.monotonic() < deadline, "the page did not show the recommendation"
            time.sleep(0.05)
        text = browser.evaluate("document.getElementById('recommendation-params').textContent")
        assert text == "lr = 0.003162"  # 10**-2.5, by name in the user's units


@needs_chromium
def test_a_servers_page_shows_each_clients_best_by_name_without_the_trials():
    """A server's record has no trials (they stay at the sites): the page lists each client's
    best value and its parameters by name from the outcomes, and hides the newest trials; the
    chart of a run without an optimum is titled by what it shows."""
    import fedxab
    from fedxab.dashboard.state import state_from_results

    space = {"lr": fedxab.Float(1e-3, 1e-1, log=True), "kind": fedxab.Categorical(["a", "b"])}
    results = fedxab.federate(
        lambda p: float(np.log10(p["lr"])) + (p["kind"] == "b"), space=space, clients=2, budget=8
    )
    record = results.runs[0]
    at_server = dataclasses.replace(
        record, clients=tuple(dataclasses.replace(c, trials=None) for c in record.clients)
    )
    state = state_from_results(dataclasses.replace(results, runs=(at_server,)))
    with DashboardServer(state) as page, Chromium() as browser:
        browser.open(page.url, "document.body.dataset.renderedMs")
        rows = browser.evaluate(
            "[...document.querySelectorAll('#trials-best tbody tr')]"
            ".map((tr) => [...tr.cells].map((td) => td.textContent))"
        )
        for row, outcome in zip(rows, record.clients, strict=True):
            lr, kind = record.best_params[outcome.client].values()
            assert row[0] == str(outcome.client) and row[1] == "8"
            assert row[4] == f"lr = {lr:.4g}, kind = {kind}"  # by name, in the user's units
        assert browser.evaluate("document.getElementById('trials-recent').hidden") is True
        assert _value(browser, "kpi-evaluations") == "16"
        title = browser.evaluate("document.getElementById('regret-title').textContent")
        assert title == "best observed value"


@needs_chromium
def test_the_page_shows_the_population_of_each_phase_newest_first():
    """The server's record of each closed phase (fedxab.run.population): how many joined, left,
    were asked and reported, and who joined and left by id; hidden before the first phase."""
    from fedxab.run.population import PhasePopulation

    state = DashboardState()
    state.start_run(
        run_id="r", algorithm="fedpne", objective="garland", transport="kafka", clients=12, budget=9
    )
    rows = "[...document.querySelectorAll('#population tbody tr')]"
    with DashboardServer(state) as page, Chromium() as browser:
        browser.open(page.url, "document.body.dataset.renderedMs")
        assert browser.evaluate("document.getElementById('population-panel').hidden") is True
        state.on_population(PhasePopulation(1, tuple(range(10)), (), 10, 10))
        state.on_population(PhasePopulation(2, (10, 11), (3, 7, 8), 9, 8))
        version = state.version
        deadline = time.monotonic() + 10
        while browser.evaluate("document.body.dataset.version") != str(version):
            assert time.monotonic() < deadline, "the page did not show the population"
            time.sleep(0.05)
        assert browser.evaluate("document.getElementById('population-panel').hidden") is False
        shown = browser.evaluate(f"{rows}.map(r => [...r.cells].map(c => c.textContent))")
        assert browser.evaluate("document.getElementById('population-totals').textContent") == (
            "(12 joined, 3 left)"
        )
    assert shown == [
        ["2", "2", "3", "9", "8", "10-11", "3, 7-8"],
        ["1", "10", "0", "10", "10", "0-9", "–"],
    ]
