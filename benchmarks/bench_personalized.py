"""Personalized algorithms against local HCT: the acceptance grid of issue 20 (PF-HCT).

For every function (Garland, DoubleSine, Himmelblau 2-D, Rastrigin 10-D; uniform noise
U(-0.1, 0.1), as in ``fedxab reproduce pfpne-*``), input-shift heterogeneity level (``none``;
``paper``: shifts ``s_m ~ N(0, (0.05 range)^2)``, fedxab's default scale, the ``pfpne-*``
experiments'; ``5x``: five times that) and number of clients M, this script runs PF-HCT, local HCT,
PF-PNE (``Delta = 0.01``) and Fed-PNE (all with the practical preset, ``nu = 1``, ``rho = 0.5``)
for ``--seeds`` seeds, and prints a markdown table of the mean +- std over seeds of the local
cumulative regret at T (averaged over the clients), the ratio PF-HCT / local HCT, and whether
the issue's target holds in that cell: ratio < 1 where clients are similar (levels ``none`` and
``paper``), ratio <= 1.2 everywhere.

Local HCT runs with ``partitions = "shared"``: every client's HCT uses the run's partition of the
domain, the one the federated algorithms of the same run use, so the comparison is paired (the
same algorithm as the per-client default, with the same expected regret; with per-client
partitions the seed-to-seed differences would mix the algorithms' with the partitions').

Run: ``.venv/bin/python benchmarks/bench_personalized.py [--seeds N] [--budget T]
[--clients 10,50] [--functions garland,...] [--levels none,paper,5x] [--jobs N] [--quick]
[--json PATH] [--from-json PATH ...] [--hct-windows FUNCTION]``.

- ``--quick``: 3 seeds, T = 2000, M = 10 only (each option given explicitly overrides it). The
  full grid (10 seeds, T = 10^4, M = 10 and 50) takes about 50 min on two cores, ``--jobs 2``.
- ``--from-json``: print the table of runs saved by ``--json`` (e.g. the M = 10 and M = 50
  halves of the grid, run separately), without running.
- ``--hct-windows FUNCTION``: HCT's mean regret per pull over windows of 10^5 pulls
  (:func:`hct_windows`), which shows whether more samples could help on that function at all.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

FUNCTIONS = {
    "garland": {"name": "garland"},
    "doublesine": {"name": "doublesine"},
    "himmelblau": {"name": "himmelblau"},
    "rastrigin": {"name": "rastrigin", "dim": 10},
}
LEVELS = {"none": None, "paper": 1.0, "5x": 5.0}
"""Heterogeneity level -> multiple of the default shift scale (None: identical clients)."""
PNE = {"preset": "practical", "nu": 1.0, "rho": 0.5}
ALGORITHMS = {
    "pfhct": {"name": "pfhct", **PNE},
    "local-hct": {"name": "local-hct", **PNE, "partitions": "shared"},
    "pfpne": {"name": "pfpne", **PNE, "Delta": 0.01},
    "fedpne": {"name": "fedpne", **PNE},
}
SIMILAR = ("none", "paper")
"""Levels where the clients count as similar: the target there is PF-HCT below local HCT."""
WITHIN = 1.2
"""Everywhere PF-HCT must be within this factor of local HCT."""


def _objective(function: str) -> Any:
    """The noiseless objective of a grid function (``FUNCTIONS``)."""
    from fedxab.objectives.registry import make_objective

    params = {k: v for k, v in FUNCTIONS[function].items() if k != "name"}
    return make_objective(FUNCTIONS[function]["name"], **params)


def _federation(function: str, level: str, clients: int) -> dict[str, Any]:
    """The ``[federation]`` section of a cell: shift scale = multiple x 0.05 x range."""
    multiple = LEVELS[level]
    if multiple is None:
        return {"clients": clients, "heterogeneity": "none"}
    domain = _objective(function).domain
    width = float(domain[0, 1] - domain[0, 0])  # every coordinate of these has the same range
    scale = multiple * 0.05 * width
    return {"clients": clients, "heterogeneity": "shift", "heterogeneity_scale": scale}


def run_one(task: tuple[str, str, int, str, int, int]) -> dict[str, Any]:
    """One run: the clients' mean local cumulative regret at T."""
    from fedxab.agents.federation import Federation
    from fedxab.config import config_from_dict

    function, level, clients, algorithm, budget, seed = task
    config = config_from_dict(
        {
            "run": {"seed": seed, "repeats": 1, "budget": budget},
            "objective": {**FUNCTIONS[function], "noise": {"name": "uniform", "half_width": 0.1}},
            "algorithm": ALGORITHMS[algorithm],
            "federation": _federation(function, level, clients),
        }
    )
    start = time.perf_counter()
    record = Federation(config, seed).run()
    return {
        "function": function,
        "level": level,
        "clients": clients,
        "algorithm": algorithm,
        "seed": seed,
        "regret": float(record.local_cumulative_regret[-1]),
        "wall_time_s": time.perf_counter() - start,
    }


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (function, level, M): mean and std per algorithm, ratio, target verdict."""
    cells: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    for r in runs:
        key = (r["function"], r["level"], r["clients"])
        cells.setdefault(key, {}).setdefault(r["algorithm"], []).append(r["regret"])
    rows = []
    order = {name: i for i, name in enumerate([*FUNCTIONS, *LEVELS])}
    for (function, level, clients), by_alg in sorted(
        cells.items(), key=lambda cell: (order[cell[0][0]], order[cell[0][1]], cell[0][2])
    ):
        stats = {a: (float(np.mean(v)), float(np.std(v))) for a, v in by_alg.items()}
        ratio = stats["pfhct"][0] / stats["local-hct"][0]
        bound = 1.0 if level in SIMILAR else WITHIN
        met = ratio < bound if level in SIMILAR else ratio <= bound
        rows.append(
            {
                "function": function,
                "level": level,
                "clients": clients,
                "regret": {a: {"mean": m, "std": s} for a, (m, s) in stats.items()},
                "ratio": ratio,
                "target": f"< {bound:g}" if level in SIMILAR else f"<= {bound:g}",
                "met": bool(met),
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], seeds: int, budget: int) -> str:
    names = list(ALGORITHMS)
    head = ["function", "heterogeneity", "M", *names, "PF-HCT / local HCT", "target", "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r['regret'][a]['mean']:.0f} ± {r['regret'][a]['std']:.0f}" for a in names]
        verdict = "met" if r["met"] else "not met"
        lines.append(
            f"| {r['function']} | {r['level']} | {r['clients']} | "
            + " | ".join(cells)
            + f" | {r['ratio']:.2f} | {r['target']} | {verdict} |"
        )
    met = sum(r["met"] for r in rows)
    lines.append("")
    lines.append(
        f"Local cumulative regret at T = {budget} (mean ± std over {seeds} seeds, averaged over "
        f"the clients). Target met in {met} of {len(rows)} cells."
    )
    return "\n".join(lines)


WINDOWS = (0, 1_000, 10_000, 30_000, 100_000)
"""The windows of pulls ``--hct-windows`` reports HCT's mean per-pull regret over."""


def hct_windows(function: str, seed: int) -> list[float]:
    """One HCT run of ``WINDOWS[-1]`` pulls on ``function`` (the grid's noise and constants):
    its mean per-pull regret over each window. Flat windows mean more samples of the same
    function would not lower HCT's regret per pull: pooling clients' samples cannot help."""
    from fedxab.algorithms.hct import HCT

    f = _objective(function)
    hct = HCT(f.domain, **PNE, budget=WINDOWS[-1], seed=seed)
    noise = np.random.default_rng(seed).uniform(-0.1, 0.1, WINDOWS[-1])
    regret = np.empty(WINDOWS[-1])
    for t in range(WINDOWS[-1]):
        x = hct.ask()
        value = float(f(x[None, :])[0])
        hct.tell(x, value + noise[t])
        regret[t] = f.optimum_value - value
    return [float(regret[a:b].mean()) for a, b in itertools.pairwise(WINDOWS)]


def print_hct_windows(function: str, seeds: int) -> None:
    head = " | ".join(f"[{a:,}, {b:,})" for a, b in itertools.pairwise(WINDOWS))
    print(f"HCT on {function}: mean regret per pull over the pulls\n")
    print(f"| seed | {head} |\n|" + "---|" * len(WINDOWS))
    for seed in range(seeds):
        print(f"| {seed} | " + " | ".join(f"{v:.3f}" for v in hct_windows(function, seed)) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, help="seeds per cell (default 10; --quick: 3)")
    parser.add_argument("--budget", type=int, help="T per client (default 10000; --quick: 2000)")
    parser.add_argument("--clients", help="comma-separated M values (default 10,50; --quick: 10)")
    parser.add_argument("--functions", default=",".join(FUNCTIONS))
    parser.add_argument("--levels", default=",".join(LEVELS))
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--quick", action="store_true", help="3 seeds, T = 2000, M = 10")
    parser.add_argument("--json", type=Path, help="write the runs and the table here")
    parser.add_argument(
        "--from-json", type=Path, nargs="+", help="print the table of runs saved by --json"
    )
    parser.add_argument(
        "--hct-windows",
        metavar="FUNCTION",
        help="print HCT's mean regret per pull over windows of 10^5 pulls on FUNCTION, per seed",
    )
    args = parser.parse_args(argv)
    if args.hct_windows:
        if args.hct_windows not in FUNCTIONS:
            parser.error(f"unknown function {args.hct_windows!r}; allowed: {', '.join(FUNCTIONS)}")
        print_hct_windows(args.hct_windows, args.seeds or 2)
        return 0
    if args.from_json:
        saved = [json.loads(path.read_text(encoding="utf-8")) for path in args.from_json]
        runs = [run for data in saved for run in data["runs"]]
        budgets = {data["budget"] for data in saved}
        seeds = {data["seeds"] for data in saved}
        if len(budgets) > 1 or len(seeds) > 1:
            parser.error(f"--from-json files differ in budget {budgets} or seeds {seeds}")
        print(markdown(summarise(runs), seeds.pop(), budgets.pop()))
        return 0
    seeds = args.seeds or (3 if args.quick else 10)
    budget = args.budget or (2000 if args.quick else 10_000)
    clients = [int(m) for m in (args.clients or ("10" if args.quick else "10,50")).split(",")]
    functions = args.functions.split(",")
    levels = args.levels.split(",")
    for name, given, allowed in (("function", functions, FUNCTIONS), ("level", levels, LEVELS)):
        unknown = [v for v in given if v not in allowed]
        if unknown:
            parser.error(f"unknown {name} {unknown}; allowed: {', '.join(allowed)}")
    tasks = [
        (f, lev, m, a, budget, s)
        for f in functions
        for lev in levels
        for m in clients
        for a in ALGORITHMS
        for s in range(seeds)
    ]
    start = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            runs = list(pool.map(run_one, tasks))
    else:
        runs = [run_one(t) for t in tasks]
    rows = summarise(runs)
    table = markdown(rows, seeds, budget)
    print(table)
    print(f"\n{len(runs)} runs in {time.perf_counter() - start:.0f} s")
    if args.json:
        data = {"seeds": seeds, "budget": budget, "clients": clients, "rows": rows, "runs": runs}
        args.json.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
