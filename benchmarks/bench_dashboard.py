"""The dashboard at 100,000 clients: how fast its page loads, and what it costs the run.

One job, DP-Fed-PNE with M = 100,000 clients (T = 200, Garland, in process, rdp accountant,
each client's epsilon in the ledger), run ``--repeats`` times (default 2) each way, interleaved:

1. **Cost**: the run's wall time without any observer, and with the dashboard (a
   :class:`~fedxab.dashboard.state.DashboardState` observing it, served by a
   :class:`~fedxab.dashboard.server.DashboardServer`, and read once a second as the open page
   does: ``/api/state`` fetched by a thread of this process). Reported: the two medians and their
   ratio, and, in the dashboard runs, the time spent in its hooks (the runner's thread) and in
   building the page's state (the server's thread), as a share of the run: the cost measured
   directly, free of the run-to-run noise the ratio carries.
2. **Page load**: the finished 100,000-client run's page loaded ``--loads`` times (default 5) in
   headless Chromium (a fresh navigation each time); the time from navigation start until the
   page has drawn every panel (``performance.now()`` when the script has rendered the first
   state; the script sets it on ``document.body.dataset.renderedMs``), median [min-max], and the
   size of the state it fetched.

Targets (issue "See it live without Docker"): the page loads in under 2 s at 100,000 clients
and the server's metrics cost stays within 3%. ``--screenshots DIR`` also writes the two
1280x800 screenshots of the documentation: the run live (from one more, untimed run, at its
third phase) and finished.
Run: ``.venv/bin/python benchmarks/bench_dashboard.py [--markdown] [--repeats N] [--loads N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _browser import Chromium, chromium_binary
from bench_federation import env_line, environment, md_table

CLIENTS, BUDGET = 100_000, 200
POLL_S = 1.0
"""How often the open page reads the state (the page script's POLL_MS)."""


def job(clients: int, budget: int) -> Any:
    from fedxab.config import config_from_dict

    return config_from_dict(
        {
            "run": {"seed": 0, "repeats": 1, "budget": budget},
            "objective": {"name": "garland"},
            "algorithm": {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 1e-3},
            "federation": {"clients": clients, "heterogeneity": "none"},
            "broker": {"url": "inprocess://"},
            "privacy": {"accountant": "rdp", "budget_epsilon": 4.0},
        }
    )


class Timed:
    """An observer forwarding every hook to ``inner`` and adding up the time spent in them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not callable(value):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0

        return timed


class TimedSource:
    """A dashboard source whose snapshots are timed (the server thread's share of the cost)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.seconds = 0.0
        self.sizes: list[int] = []

    def snapshot(self, run: int | None = None) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            return self.state.snapshot(run)
        finally:
            self.seconds += time.perf_counter() - t0

    def client(self, m: int, run: int | None = None) -> dict[str, Any]:
        return self.state.client(m, run)


def _poll(url: str, stop: threading.Event, sizes: list[int]) -> None:
    while not stop.wait(POLL_S):
        with urllib.request.urlopen(url, timeout=30) as r:
            sizes.append(len(r.read()))


def run_plain(config: Any) -> float:
    from fedxab.api import run_job

    t0 = time.perf_counter()
    run_job(config)
    return time.perf_counter() - t0


def run_with_dashboard(config: Any, shots: Path | None = None) -> dict[str, Any]:
    """One run observed and served as the open page would read it; with ``shots``, a
    screenshot of the page mid-run (:func:`_live_shot`)."""
    from fedxab.api import run_job
    from fedxab.dashboard.server import DashboardServer
    from fedxab.dashboard.state import DashboardState

    state = DashboardState(config.to_dict())
    observer, source = Timed(state), TimedSource(state)
    stop, sizes = threading.Event(), []
    with DashboardServer(source) as page:
        poller = threading.Thread(
            target=_poll, args=(f"{page.base_url}api/state?token={page.token}", stop, sizes)
        )
        poller.start()
        shooter = None
        if shots is not None:
            shooter = threading.Thread(target=_live_shot, args=(page.url, state, shots))
            shooter.start()
        try:
            t0 = time.perf_counter()
            run_job(config, metrics=observer)
            wall = time.perf_counter() - t0
        finally:
            stop.set()
            poller.join()
            if shooter is not None:
                shooter.join()  # its browser closed before the server goes
        return {
            "wall": wall,
            "hooks": observer.seconds,
            "snapshots": source.seconds,
            "polls": len(sizes),
            "state_bytes": max(sizes, default=0),
            "state": state,
        }


def _live_shot(url: str, state: Any, shots: Path) -> None:
    """A screenshot of the page once the run has closed its third phase (none if the run
    ends before)."""
    while (view := state.current) is None or view.phases < 3:
        if view is not None and view.status != "running":
            return
        time.sleep(0.05)
    with Chromium() as browser:
        browser.open(url, "document.body.dataset.renderedMs")
        browser.screenshot(shots / "dashboard-live.png")


def page_loads(state: Any, loads: int, shots: Path | None) -> dict[str, Any]:
    from fedxab.dashboard.server import DashboardServer

    times = []
    with DashboardServer(state) as page, Chromium() as browser:
        for _ in range(loads):
            times.append(float(browser.open(page.url, "document.body.dataset.renderedMs")))
        if shots is not None:
            browser.screenshot(shots / "dashboard-finished.png")
        with urllib.request.urlopen(
            f"{page.base_url}api/state?token={page.token}", timeout=30
        ) as r:
            size = len(r.read())
    return {
        "ms": statistics.median(times),
        "min": min(times),
        "max": max(times),
        "times": times,
        "bytes": size,
    }


def measure(clients: int, budget: int, repeats: int, loads: int, shots: Path | None) -> dict:
    config = job(clients, budget)
    run_plain(job(10, 100))  # warm-up: imports and caches
    plain, dash = [], []
    for _ in range(repeats):
        plain.append(run_plain(config))
        dash.append(run_with_dashboard(config))
    state = dash[-1]["state"]
    for d in dash:
        del d["state"]
    if shots is not None and chromium_binary():  # one more run, not timed: the live page
        run_with_dashboard(config, shots)
    page = page_loads(state, loads, shots) if chromium_binary() else None
    snap = state.snapshot()["run"]
    plain_s = statistics.median(plain)
    dash_s = statistics.median(d["wall"] for d in dash)
    share = statistics.median((d["hooks"] + d["snapshots"]) / d["wall"] for d in dash)
    return {
        "clients": clients,
        "budget": budget,
        "repeats": repeats,
        "plain_s": plain, "dashboard": dash,
        "plain_median_s": plain_s,
        "dashboard_median_s": dash_s,
        "ratio": dash_s / plain_s,
        "cost_share": share,
        "page": page,
        "shown": {
            "clients": snap["clients"],
            "max_epsilon": snap["privacy"]["max"] if snap["privacy"] else None,
            "phases": snap["phases"]["count"],
        },
        "environment": environment(),
    }  # fmt: skip


def report(out: dict, markdown: bool) -> str:
    rows = [
        [
            f"{out['clients']:,}",
            f"{out['plain_median_s']:.1f}",
            f"{out['dashboard_median_s']:.1f}",
            f"{out['ratio']:.3f}x",
            f"{100 * out['cost_share']:.2f}%",
        ]
    ]
    text = [
        f"DP-Fed-PNE, M = {out['clients']:,}, T = {out['budget']}, median of {out['repeats']} "
        "runs each way, interleaved; the page's state read every second during the dashboard "
        "runs.",
        md_table(
            ["clients", "run (s)", "with dashboard (s)", "ratio", "hooks + state, share of run"],
            rows,
        ),
    ]
    page = out["page"]
    if page is None:
        text.append("page load: not measured (no chromium on PATH)")
    else:
        text.append(
            md_table(
                ["page load (ms), median [min-max]", "loads", "state (bytes)", "clients shown"],
                [
                    [
                        f"{page['ms']:.0f} [{page['min']:.0f}-{page['max']:.0f}]",
                        str(len(page["times"])),
                        f"{page['bytes']:,}",
                        f"{out['shown']['clients']['total']:,}",
                    ]
                ],
            )
        )
    text.append(env_line(out["environment"]))
    body = "\n\n".join(text)
    return body if markdown else body.replace("|", " ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--budget", type=int, default=BUDGET)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--screenshots", type=Path, default=None)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.screenshots is not None:
        args.screenshots.mkdir(parents=True, exist_ok=True)
    out = measure(args.clients, args.budget, args.repeats, args.loads, args.screenshots)
    print(report(out, args.markdown))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
