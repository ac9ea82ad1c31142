"""Reproduction wall time per seed: a figure's runs with each run's clients in 1 and N processes.

Issue "Speed where users wait": ``dpftsde-landmine`` under 10 min per seed with the same epsilons
and regret curves. This script runs ``--seeds`` seeds (default 1) of every entry of experiment
``NAME`` (default ``dpftsde-landmine``) one entry after the other, as ``fedxab reproduce NAME``
does after its pilot, once with each worker count of ``--workers`` (default ``2,1``: each run's
clients in 2 processes, then in this one; ``[run] workers``), and prints per entry and in all the
wall time of each, their ratio, and whether the two wrote the same results (every run's record
but its wall time: regret curves, epsilons, communication). The first worker count is the one
the issue's target applies to. One measurement per worker count: a landmine seed takes minutes.

The landmine experiments need ``FEDXAB_LANDMINE`` (the folder with ``LandmineData.mat``).
Run: ``.venv/bin/python benchmarks/bench_reproductions.py [NAME] [--seeds N] [--budget T]
[--clients M] [--workers 2,1] [--markdown] [--json PATH]`` (``dpftsde-synthetic-q --budget 14
--clients 8`` is a smoke run of seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_federation import env_line, environment, md_table

TARGET_S = 600.0
"""The issue's target for one seed of ``dpftsde-landmine``."""


def _runs_without_time(path: Path) -> list[dict[str, Any]]:
    runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
    for run in runs:
        run.pop("wall_time_s", None)
    return runs


def _timed_plan(args: argparse.Namespace, workers: int, out: Path) -> tuple[Any, dict[str, float]]:
    """Run the plan entry by entry; the plan and each entry's wall time."""
    from fedxab.reproduce import make_plan
    from fedxab.reproduce.execute import run_plan

    plan = make_plan(
        args.name,
        seeds=args.seeds,
        budget=args.budget,
        clients=args.clients,
        output=out,
        workers=workers,
    )
    seconds: dict[str, float] = {}
    started = [time.perf_counter()]

    def on_entry_done(result: Any) -> None:
        now = time.perf_counter()
        seconds[result.planned.entry.key] = now - started[0]
        started[0] = now

    run_plan(plan, on_entry_done=on_entry_done)
    return plan, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", default="dpftsde-landmine")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--budget", type=int, default=None)
    parser.add_argument("--clients", type=int, default=None)
    parser.add_argument("--workers", default="2,1", help="worker counts, the target's first")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="write the measurements here")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    times: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="fedxab-bench-reproduce-") as tmp:
        plans = {}
        for workers in counts:
            plans[workers], times[workers] = _timed_plan(args, workers, Path(tmp) / f"w{workers}")
        reference = plans[counts[0]]
        same = {
            pe.entry.key: all(
                _runs_without_time(plans[w].entries[k].results_path)
                == _runs_without_time(pe.results_path)
                for w in counts[1:]
            )
            for k, pe in enumerate(reference.entries)
        }
    first, *others = counts
    headers = ["entry", *(f"{w} worker{'s' * (w > 1)} (s)" for w in counts)]
    headers += [f"{w} / {first} workers" for w in others] + ["same results"]
    rows = []
    for pe in reference.entries:
        key = pe.entry.key
        cells = [f"{times[w][key]:.1f}" for w in counts]
        ratios = [f"{times[w][key] / times[first][key]:.2f}x" for w in others]
        rows.append([key, *cells, *ratios, "yes" if same[key] else "NO"])
    totals = {w: sum(times[w].values()) for w in counts}
    rows.append(
        [
            f"all ({args.seeds} seed{'s' * (args.seeds > 1)})",
            *(f"{totals[w]:.1f}" for w in counts),
            *(f"{totals[w] / totals[first]:.2f}x" for w in others),
            "yes" if all(same.values()) else "NO",
        ]
    )
    print(md_table(headers, rows) if args.markdown else "\n".join(" | ".join(r) for r in rows))
    per_seed = totals[first] / args.seeds
    if args.json is not None:
        data = {
            "experiment": args.name,
            "seeds": args.seeds,
            "workers": counts,
            "entries": [
                {
                    "key": pe.entry.key,
                    "seconds": {str(w): times[w][pe.entry.key] for w in counts},
                    "same_results": same[pe.entry.key],
                }
                for pe in reference.entries
            ],
            "per_seed_s": per_seed,
            "environment": environment(),
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    met = "yes" if per_seed < TARGET_S else "no"
    print(
        f"\n{args.name}: {per_seed / 60:.1f} min per seed with {first} worker"
        f"{'s' * (first > 1)} (target < {TARGET_S / 60:.0f} min for dpftsde-landmine: {met}); "
        f"{env_line(environment())}"
    )


if __name__ == "__main__":
    main()
