#!/usr/bin/env python
"""Benchmark: Fed-PNE with many clients on the dev broker, each party its own process.

Two jobs (Garland with value offsets, the job of ``bench_federation.py``), each run as
``fedxab server`` plus ``fedxab client`` processes on a dev broker (Kafka wire protocol, on
loopback) started by this script:

1. **One client process hosting 20,000 clients** (T = 1,000): the issue's target is under 120 s.
2. **100,000 clients in 5 client processes** (20,000 each, T = 1,000).
3. **Partial participation** (``--jobs sampled full-10k``): 10,000 clients in one client process,
   ``[federation] participation = 0.1`` against full participation (issue 37): the clients asked
   per phase (mean over phases), wall time and the server's peak RSS.

For each: wall time from the first process start to the last exit, each process's peak resident
set (``/usr/bin/time``'s maximum RSS), the size of ``results.json``, and whether the results
equal the in-process runner's for the same config and seed (wall time aside). The in-process run
is made in its own process too, with its time and peak RSS. Messages are unsigned (``[security]
sign = false``, explicitly, as in ``bench_transports.py``; ``bench_signing.py`` measures signing).

Usage (from the repository root)::

    python benchmarks/bench_scale.py               # both jobs
    python benchmarks/bench_scale.py --markdown    # the table as Markdown (for the README)
    python benchmarks/bench_scale.py --jobs one    # only the 20,000-client process
    python benchmarks/bench_scale.py --jobs sampled full-10k   # participation 0.1 against 1

The script prints measurements and the target's verdict; it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_federation import env_line, environment, garland_config, md_table
from bench_transports import _toml

BUDGET = 1_000
JOBS: dict[str, tuple[int, int, float | None]] = {
    "one": (20_000, 1, None),
    "many": (100_000, 5, None),
    "sampled": (10_000, 1, 0.1),
    "full-10k": (10_000, 1, None),
}
"""name -> (clients, client processes, [federation] participation)."""
TARGET_ONE_PROCESS_S = 120.0
TIMEOUT_S = 3600


def _timed_process(args: list[str], log: Path) -> tuple[subprocess.Popen, Path]:
    """``fedxab ARGS`` under ``/usr/bin/time`` (its peak RSS in KiB to a file next to ``log``)."""
    stats = log.with_suffix(".time")
    cmd = ["/usr/bin/time", "-f", "%M", "-o", str(stats), sys.executable, "-m", "fedxab.cli"]
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cmd, *args], stdout=out, stderr=subprocess.STDOUT)
    return proc, stats


def _peak_mb(stats: Path) -> float:
    return int(stats.read_text().split()[-1]) * 1024 / 1e6


def _in_process(config_path: Path, out: Path) -> dict[str, Any]:
    """The in-process run of the config (``fedxab run --broker inprocess://``), timed."""
    proc, stats = _timed_process(
        ["run", str(config_path), "--broker", "inprocess://", "--output", str(out), "-q"],
        out.with_suffix(".log"),
    )
    t0 = time.perf_counter()
    code = proc.wait(TIMEOUT_S)
    seconds = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"the in-process run failed:\n{out.with_suffix('.log').read_text()}")
    return {"seconds": seconds, "peak_mb": _peak_mb(stats), "run": _run_of(out)}


def _run_of(out: Path) -> dict[str, Any]:
    run = json.loads((out / "results.json").read_text())["runs"][0]
    run.pop("wall_time_s")
    return run


def measure(name: str, address: str, tmp: Path) -> dict[str, Any]:
    clients, processes, participation = JOBS[name]
    config = garland_config(clients, BUDGET)
    data = config.experiment_dict()
    if participation is not None:
        data.setdefault("federation", {})["participation"] = participation
    data["security"] = {"sign": False}
    data["broker"] = {"namespace": f"scale-{name}", "max_message_bytes": 8 << 20}
    path = tmp / f"{name}.toml"
    path.write_text(_toml(data))
    out = tmp / f"{name}-kafka"
    url = f"kafka://{address}"
    t0 = time.perf_counter()
    procs = {
        "server": _timed_process(
            ["server", str(path), "--broker", url, "--output", str(out), "-q"],
            tmp / f"{name}-s.log",
        )
    }
    per = clients // processes
    for k in range(processes):
        ids = f"{k * per}-{(k + 1) * per - 1}"
        procs[f"client {ids}"] = _timed_process(
            ["client", str(path), "--broker", url, "--client-id", ids], tmp / f"{name}-c{k}.log"
        )
    codes = {who: proc.wait(TIMEOUT_S) for who, (proc, _) in procs.items()}
    seconds = time.perf_counter() - t0
    failed = {who: code for who, code in codes.items() if code != 0}
    if failed:
        logs = "\n".join(
            f"--- {who}:\n{stats.with_suffix('.log').read_text()[-3000:]}"
            for who, (_, stats) in procs.items()
        )
        raise SystemExit(f"{name}: processes failed {failed}\n{logs}")
    reference = _in_process(path, tmp / f"{name}-inprocess")
    run = _run_of(out)
    phases = run["communication"]["per_phase"]
    return {
        "job": name,
        "clients": clients,
        "processes": processes,
        "budget": BUDGET,
        "seconds": seconds,
        "peak_mb": {who: _peak_mb(stats) for who, (_, stats) in procs.items()},
        "results_mb": (out / "results.json").stat().st_size / 1e6,
        "rounds": run["communication"]["rounds"],
        "participation": 1.0 if participation is None else participation,
        "asked_per_phase": sum(p["asked"] for p in phases) / max(1, len(phases)),
        "evaluations": run["evaluations"],
        "identical": run == reference["run"],
        "in_process_seconds": reference["seconds"],
        "in_process_peak_mb": reference["peak_mb"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", choices=sorted(JOBS), default=["one", "many"])
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()

    from fedxab.broker.devbroker import DevBroker

    rows = []
    with DevBroker() as dev, tempfile.TemporaryDirectory() as tmp:
        for name in args.jobs:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            rows.append(measure(name, dev.address, Path(tmp)))
    headers = [
        "clients", "client processes", "T", "participation", "asked per phase", "evaluations",
        "wall (s)", "phases", "peak RSS per process (MB)",
        "results.json (MB)", "= in-process", "in-process (s, MB)",
    ]  # fmt: skip
    table = [
        [
            f"{r['clients']:,}",
            str(r["processes"]),
            f"{r['budget']:,}",
            f"{r['participation']:g}",
            f"{r['asked_per_phase']:,.0f}",
            f"{r['evaluations']:,}",
            f"{r['seconds']:.1f}",
            str(r["rounds"]),
            ", ".join(f"{who} {mb:.0f}" for who, mb in r["peak_mb"].items()),
            f"{r['results_mb']:.1f}",
            "yes" if r["identical"] else "NO",
            f"{r['in_process_seconds']:.1f}, {r['in_process_peak_mb']:.0f}",
        ]
        for r in rows
    ]
    if args.markdown:
        print(md_table(headers, table))
    else:
        for row in table:
            print("  ".join(f"{h}: {v}" for h, v in zip(headers, row, strict=True)))
    for r in rows:
        if r["processes"] == 1 and r["job"] == "one":
            verdict = "met" if r["seconds"] < TARGET_ONE_PROCESS_S else "NOT met"
            print(
                f"target: one client process with {r['clients']:,} clients under "
                f"{TARGET_ONE_PROCESS_S:.0f} s: {verdict} ({r['seconds']:.1f} s)"
            )
    print(env_line(environment()))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
