#!/usr/bin/env python
"""Benchmark: the cost of live Prometheus metrics on the in-process federation (issue 7).

The job of ``bench_federation.py``'s speed measurement: Fed-PNE (practical preset) on Garland with
value offsets, M = 100 clients, T = 10^4 evaluations each (10^6 evaluations), seed 0, run by
:class:`fedxab.agents.federation.Federation`:

- **off**: ``Federation(config, 0).run()``;
- **on**: ``Federation(config, 0, metrics=metrics).run()`` with a
  :class:`~fedxab.monitoring.metrics.FederationMetrics` served by a
  :class:`~fedxab.monitoring.endpoint.MetricsEndpoint` on a free loopback port, as
  ``fedxab run --metrics-port 0`` does. The metrics object and the endpoint are created once, before
  the timings (once per process in the CLI too); each timing covers ``Federation(...)`` and
  ``.run()``. After every "on" run (untimed) ``/metrics`` is scraped and checked against the
  run's record (cumulative regret, phases, messages), so the measured runs really exported.

The two variants alternate (off, on, off, on, ...), ``gc.collect()`` before each, after one
untimed warm-up of each. Reported: median of ``--repeats`` (default 3) and [min–max], the ratio of
the medians (on / off) and the target of the issue: ratio <= 1.10.

Usage (from the repository root)::

    python benchmarks/bench_metrics.py                  # M = 100, T = 10^4, median of 3
    python benchmarks/bench_metrics.py --repeats 7      # more repeats: a steadier median
    python benchmarks/bench_metrics.py --markdown       # the table as Markdown
    python benchmarks/bench_metrics.py --quick --json out.json   # smoke run (about a second)

The script prints the measurements and the verdict; it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from bench_federation import SEED, garland_config  # noqa: E402

CLIENTS = 100
BUDGET = 10_000
REPEATS = 3
TARGET_RATIO = 1.10
QUICK = {"clients": 10, "budget": 1_000, "repeats": 2}


def _scrape(url: str) -> dict[str, float]:
    """The unlabelled samples and the ``direction`` ones of ``/metrics``, by name."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode("utf-8")
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + "".join(f"{{{v}}}" for v in s.labels.values())
            out[key] = s.value
    return out


def _check_export(url: str, record: Any, metrics_runs: int) -> None:
    """The scrape after an "on" run agrees with its record (counters add up over the runs)."""
    seen = _scrape(url)
    comm = record.communication
    problems = []
    if seen["fedxab_cumulative_regret"] != record.final_cumulative_regret:
        problems.append("cumulative regret")
    if seen["fedxab_phases_total"] != comm["rounds"] * metrics_runs:
        problems.append("phases")
    if seen["fedxab_messages_total{up}"] != comm["messages_up"] * metrics_runs:
        problems.append("messages up")
    if problems:
        raise SystemExit(f"/metrics disagrees with the run's record: {', '.join(problems)}")


def measure(clients: int, budget: int, repeats: int) -> dict[str, Any]:
    """``repeats`` timings of each variant, alternating; their summary."""
    from fedxab.agents.federation import Federation
    from fedxab.monitoring.endpoint import MetricsEndpoint
    from fedxab.monitoring.metrics import FederationMetrics

    config = garland_config(clients, budget, SEED)
    metrics = FederationMetrics()
    times: dict[str, list[float]] = {"off": [], "on": []}
    records: dict[str, Any] = {}
    with MetricsEndpoint(metrics.registry, port=0) as endpoint:
        metrics_runs = 0

        def one(variant: str) -> float:
            nonlocal metrics_runs
            gc.collect()
            t0 = time.perf_counter()
            if variant == "on":
                record = Federation(config, SEED, metrics=metrics).run()
            else:
                record = Federation(config, SEED).run()
            elapsed = time.perf_counter() - t0
            records[variant] = record
            if variant == "on":
                metrics_runs += 1
                _check_export(endpoint.url, record, metrics_runs)
            return elapsed

        one("off")  # warm-up, untimed
        one("on")
        for _ in range(repeats):
            for variant in ("off", "on"):
                times[variant].append(one(variant))
        url = endpoint.url
    off, on = records["off"], records["on"]
    if (off.final_cumulative_regret, off.communication) != (
        on.final_cumulative_regret,
        on.communication,
    ):
        raise SystemExit("metrics changed the run's results")
    summary = {
        v: {"median": statistics.median(t), "min": min(t), "max": max(t), "runs": t}
        for v, t in times.items()
    }
    ratio = summary["on"]["median"] / summary["off"]["median"]
    return {
        "clients": clients,
        "budget": budget,
        "evaluations": clients * budget,
        "phases": off.communication["rounds"],
        "repeats": repeats,
        "seed": SEED,
        "endpoint": url,
        "times_s": summary,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
    }


def table(result: dict[str, Any], markdown: bool = False) -> str:
    """The side-by-side table: time off, time on, ratio, target, verdict."""
    t = result["times_s"]

    def cell(v: str) -> str:
        s = t[v]
        return f"{s['median']:.3f} [{s['min']:.3f}–{s['max']:.3f}]"

    header = [
        "job",
        "metrics off (s)",
        "metrics on (s)",
        "ratio on/off",
        "target",
        "meets target",
    ]
    job = (
        f"Fed-PNE, M = {result['clients']:,}, T = {result['budget']:,} "
        f"({result['phases']} phases), median of {result['repeats']}"
    )
    row = [
        job,
        cell("off"),
        cell("on"),
        f"{result['ratio']:.3f}",
        f"<= {result['target_ratio']:.2f}",
        "yes" if result["meets_target"] else "no",
    ]
    if markdown:
        return "\n".join(
            [
                "| " + " | ".join(header) + " |",
                "|" + "|".join("---" for _ in header) + "|",
                "| " + " | ".join(row) + " |",
            ]
        )
    widths = [max(len(h), len(r)) for h, r in zip(header, row, strict=True)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), line(row)])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=None, help=f"M (default {CLIENTS})")
    p.add_argument("--budget", type=int, default=None, help=f"T (default {BUDGET})")
    p.add_argument("--repeats", type=int, default=None, help=f"timings each (default {REPEATS})")
    p.add_argument("--quick", action="store_true", help="a smoke run: M = 10, T = 1000, 2 repeats")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--json", type=Path, default=None, help="write the measurements here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = QUICK if args.quick else {"clients": CLIENTS, "budget": BUDGET, "repeats": REPEATS}
    clients = args.clients or base["clients"]
    budget = args.budget or base["budget"]
    repeats = args.repeats or base["repeats"]
    result = measure(clients, budget, repeats)
    result["environment"] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
    }
    print("Live metrics cost: the in-process federation with and without /metrics")
    print(table(result, markdown=args.markdown))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
