"""DP-FTS-DE wall time: the paper's synthetic run, in-process and on the embedded MemoryBroker.

The setting of spec-dpftsde §6 / §7.1: N = 200 agents on the 1000-point grid (a GP sample with
per-point perturbations ``±0.02``), T = 40 BO iterations after 10 initial points, M = 100 shared
random features (the issue's size; the paper's synthetic runs use M = 50), P = 2 sub-regions,
q = 0.25, z = 1, S = 11, ``1 - p_t = 1/sqrt(t)``, the synthetic weight schedule, the agents' own
GP with fixed hyperparameters (lengthscale 0.03, variance 1, noise 0.01). One seed, median
[min-max] of ``--repeats`` runs (default 3) after a warm-up, measured side by side in this one
run: in-process with the clients in this process, in-process with the clients in ``--workers``
worker processes (``[run] workers``, default 2, worker start-up included), and on the MemoryBroker;
the results of the three must be identical.

Targets: a full synthetic run under 30 s in-process (issue "DP-FTS-DE"), then under 10 s
(issue "Speed where users wait").
Run: ``.venv/bin/python benchmarks/bench_fts.py [--markdown] [--repeats N] [--agents N]
[--workers N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_federation import env_line, environment, md_table
from bench_transports import SEED, _in_process, _without_time

TARGET_S = 10.0


def synthetic_config(agents: int, features: int = 100, workers: int = 1) -> Any:
    from fedxab.config import config_from_dict

    return config_from_dict(
        {
            "run": {"budget": 50, "seed": SEED, "workers": workers},
            "objective": {"name": "gp-grid", "noise": {"name": "gaussian", "sigma": 0.1}},
            "algorithm": {
                "name": "dpftsde",
                "n_features": features,
                "lengthscale": 0.03,
                "noise_variance": 0.01,
                "grid_size": 1000,
                "regions": 2,
                "weights": "synthetic",
                "p_schedule": "1/sqrt(t)",
                "q": 0.25,
                "z": 1.0,
                "clip": 11.0,
                "own_fit_every": 0,
                "own_lengthscale": 0.03,
                "own_signal_variance": 1.0,
                "own_noise_variance": 0.01,
            },
            "federation": {"clients": agents, "heterogeneity": "gp-perturbed"},
            "privacy": {"accountant": "moments"},
        }
    )


def _memory(config: Any) -> Any:
    from fedxab.agents.distributed import run_on_broker
    from fedxab.broker.memory import MemoryBroker

    return asyncio.run(run_on_broker(config, SEED, MemoryBroker()))


def _timed(run: Any, config: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    record = run(config)
    return time.perf_counter() - t0, record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    config = synthetic_config(args.agents)
    rounds = config.run.budget - 10 + 1  # the initialisation round and T BO iterations
    _in_process(synthetic_config(4))  # warm-up: imports, the GP factor of the grid
    runs = {
        "in-process": (_in_process, config),
        f"in-process, {args.workers} workers": (
            _in_process,
            synthetic_config(args.agents, workers=args.workers),
        ),
        "MemoryBroker": (_memory, config),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    records: dict[str, Any] = {}
    for _ in range(args.repeats):
        for name, (run, cfg) in runs.items():
            seconds, records[name] = _timed(run, cfg)
            times[name].append(seconds)
    first, *others = (_without_time(r) for r in records.values())
    same = all(other == first for other in others)
    baseline = statistics.median(times["in-process"])
    rows = []
    for name, values in times.items():
        median = statistics.median(values)
        met = "yes" if median < TARGET_S else "no"
        rows.append(
            [
                name,
                f"{args.agents:,}",
                str(rounds),
                f"{median:.2f} [{min(values):.2f}-{max(values):.2f}]",
                f"{1000 * median / rounds:.0f}",
                f"{median / baseline:.2f}x",
                f"< {TARGET_S:.0f} s: {met}" if name != "MemoryBroker" else "-",
            ]
        )
    headers = ["transport", "agents N", "rounds", "run (s)", "per round (ms)", "vs in-process",
               "target"]  # fmt: skip
    privacy = records["in-process"].privacy
    print(md_table(headers, rows) if args.markdown else "\n".join(" | ".join(r) for r in rows))
    print(
        f"\nresults identical in all three: {'yes' if same else 'NO'}; max epsilon "
        f"{privacy['max_epsilon']:.2f} (moments accountant, delta {privacy['delta']:.3g}); "
        f"median of {args.repeats} runs; {env_line(environment())}"
    )


if __name__ == "__main__":
    main()
