"""A site's own live dashboard (issue 35 item 4, issue 36 item 1): `fedxab client --dashboard`
on the dev broker serves its clients' trials while the run goes (parameters by name, in the
user's units), their best so far and, once it arrives, the server's recommendation by name.

A server process and one client process run a Fed-PNE job over a typed ``[space]``, on a
user's objective that takes about 30 ms a call; the test reads the client's ``/api/state``
with the printed token during the run (the trial count grows) and after it (every trial, the
recommendation)."""

from __future__ import annotations

import json
import os
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from cli_procs import log_line, start_cli, wait_ok

BUDGET = 40
CLIENTS = 2

OBJECTIVE = '''\
"""A site's slow black box over named parameters."""
import math
import time


def site(params, client_id):
    time.sleep(0.03)
    depth = params["depth"] + (params["kind"] == "b")
    return -abs(math.log10(params["lr"]) + 2.0) - 0.1 * abs(depth - 4 - client_id)
'''

SPACE = {"lr", "depth", "kind"}


def _config(tmp: Path) -> Path:
    path = tmp / "job.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            [run]
            budget = {BUDGET}
            output = "{(tmp / "unused").as_posix()}"

            [objective]
            function = "slowsites:site"

            [space]
            lr = {{type = "float", low = 1e-4, high = 1e-1, log = true}}
            depth = {{type = "int", low = 1, high = 8}}
            kind = {{type = "categorical", choices = ["a", "b"]}}

            [algorithm]
            name = "fedpne"

            [federation]
            clients = {CLIENTS}

            [broker]
            namespace = "t{uuid.uuid4().hex[:10]}"

            [security]
            sign = false
            """
        )
    )
    return path


def _state(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_a_client_serves_its_own_trials_live_and_the_recommendation_by_name(tmp_path, dev_broker):
    (tmp_path / "slowsites.py").write_text(OBJECTIVE)
    config = _config(tmp_path)
    where = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    server_log, client_log = tmp_path / "server.log", tmp_path / "client.log"
    url = dev_broker.url
    client = start_cli(
        *("client", str(config), "--broker", url, "--client-id", f"0-{CLIENTS - 1}"),
        *("--dashboard", "--dashboard-port", "0", "--serve-after", "60"),
        log=client_log,
        env={"PYTHONPATH": where, "COLUMNS": "300"},
    )
    server = None
    try:
        printed = log_line(client_log, "dashboard: ", timeout=60).split()[-1]
        page, _, token = printed.partition("?")
        state_url = f"{page.rstrip('/')}/api/state?{token}"
        try:  # without the token: refused
            urllib.request.urlopen(f"{page.rstrip('/')}/api/state", timeout=10)
            raise AssertionError("the state was served without the token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 403
        server = start_cli(
            *("server", str(config), "--broker", url, "-q"), log=server_log, env={"COLUMNS": "300"}
        )
        counts = []  # the trial counts the page showed while the run went
        stop = time.monotonic() + 120
        while time.monotonic() < stop:
            run = _state(state_url)["run"]
            if run is not None and run["status"] != "running":
                break
            if run is not None and run["trials"] is not None:
                counts.append(run["trials"]["count"])
                recent = run["trials"]["recent"][-1]
                assert set(recent["params"]) == SPACE and 1e-4 <= recent["params"]["lr"] <= 0.1
            time.sleep(0.1)
        assert len(set(counts)) >= 3, counts  # it grew while the run went
        assert counts == sorted(counts) and 0 < counts[0] < CLIENTS * BUDGET
        log_line(client_log, "serving ", timeout=60)  # the run ended, still serving
        run = _state(state_url)["run"]
        assert run["status"] == "finished"
        trials = run["trials"]
        assert trials["count"] == CLIENTS * BUDGET and trials["clients"] == CLIENTS
        for row in trials["per_client"]:  # each client's best, by name, in the user's units
            assert row["count"] == BUDGET and set(row["params"]) == SPACE
            assert isinstance(row["params"]["depth"], int) and row["params"]["kind"] in "ab"
        assert trials["best"]["value"] == max(r["value"] for r in trials["per_client"])
        recommendation = run["recommendation"]
        assert set(recommendation["params"]) == SPACE and len(recommendation["point"]) == 3
        detail = _state(f"{page.rstrip('/')}/api/client?id=1&{token}")
        assert [r["number"] for r in detail["trials"]["rows"]] == list(range(BUDGET))
        wait_ok(server, server_log, 60)
    finally:
        for proc in (client, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
