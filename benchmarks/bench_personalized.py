"""Personalized algorithms against local HCT: the acceptance grid of issue 20 (PF-HCT).

For every function (Garland, DoubleSine, Himmelblau 2-D, Rastrigin 10-D; uniform noise
U(-0.1, 0.1), as in ``fedxab reproduce pfpne-*``), input-shift heterogeneity level (``none``;
``paper``: shifts ``s_m ~ N(0, (0.05 range)^2)``, fedxab's default scale, the ``pfpne-*``
experiments'; ``5x``: five times that) and number of clients M, this script runs PF-HCT, local HCT,
PF-PNE (``Delta = 0.01``) and Fed-PNE (all with the practical preset, ``nu = 1``, ``rho = 0.5``)
for ``--seeds`` seeds, and prints a markdown table of the mean +- std over seeds of the local
cumulative regret at T (averaged over the clients), the ratio PF-HCT / local HCT with its 95%
confidence interval (:func:`paired_ratio`), and whether the issue's target holds in that cell:
ratio < 1 where clients are similar (levels ``none`` and ``paper``), ratio <= 1.2 everywhere.

Local HCT runs with ``partitions = "shared"``: every client's HCT uses the run's partition of the
domain, the one the federated algorithms of the same run use, so the comparison is paired (the
same algorithm as the per-client default, with the same expected regret; with per-client
partitions the seed-to-seed differences would mix the algorithms' with the partitions').

Run: ``.venv/bin/python benchmarks/bench_personalized.py [--seeds N] [--budget T]
[--clients 10,50] [--functions garland,...] [--levels none,paper,5x] [--jobs N] [--quick]
[--first-seed N] [--algorithms pfhct,local-hct,...] [--pfhct KEY=VALUE ...]
[--json PATH] [--from-json PATH ...] [--pooled-hct FUNCTION] [--free-means DEPTHS]``.

- ``--quick``: 3 seeds, T = 2000, M = 10 only (each option given explicitly overrides it). The
  full grid (10 seeds, T = 10^4, M = 10 and 50) takes about an hour on two cores, ``--jobs 2``.
- ``--first-seed``, ``--algorithms``, ``--pfhct KEY=VALUE``: other seeds (e.g. ones the
  published table does not use), a subset of the algorithms (PF-HCT and local HCT always run),
  and PF-HCT with other parameters: how its defaults were chosen.
- ``--from-json``: print the table of runs saved by ``--json`` (e.g. the M = 10 and M = 50
  halves of the grid, run separately), without running.
- ``--pooled-hct FUNCTION``: an idealised reference for identical clients, per seed: one HCT
  tree fed every client's pulls, each client charged an M-th of its regret, against HCT alone
  (:func:`pooled_hct`): how much pooling the clients' samples can lower HCT's regret on that
  function at all (``--clients``: one M, default 10; ``--seeds``: default 10).
- ``--free-means DEPTHS`` (e.g. ``4,5,6``): a reference for heterogeneous clients, per cell of
  ``--functions`` x ``--levels`` x ``--clients`` (one M): each client's HCT started, for free,
  from exact means at every node of depths 1..h, against HCT alone (:func:`free_means`): the
  federation's average objective (what sharing down to depth h could give at best, without
  stage 1's pulls, noise or eliminations), and the client's own objective (perfect coarse
  personalization). What any design that shares the coarse tree can gain in that cell.
"""

from __future__ import annotations

import argparse
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


def _run(
    function: str,
    level: str,
    clients: int,
    algorithm: str,
    budget: int,
    seed: int,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """The in-process federation of one grid run (its server, clients and objectives)."""
    from fedxab.agents.federation import Federation
    from fedxab.config import config_from_dict

    config = config_from_dict(
        {
            "run": {"seed": seed, "repeats": 1, "budget": budget},
            "objective": {**FUNCTIONS[function], "noise": {"name": "uniform", "half_width": 0.1}},
            "algorithm": {**ALGORITHMS[algorithm], **(overrides or {})},
            "federation": _federation(function, level, clients),
        }
    )
    return Federation(config, seed)


def run_one(task: tuple[str, str, int, str, int, int, dict[str, Any]]) -> dict[str, Any]:
    """One run: the clients' mean local cumulative regret at T. The last item of ``task``
    overrides the algorithm's parameters (``--pfhct``)."""
    function, level, clients, algorithm, _, seed, _ = task
    start = time.perf_counter()
    record = _run(*task).run()
    return {
        "function": function,
        "level": level,
        "clients": clients,
        "algorithm": algorithm,
        "seed": seed,
        "regret": float(record.local_cumulative_regret[-1]),
        "wall_time_s": time.perf_counter() - start,
    }


def paired_ratio(pfhct: dict[int, float], local: dict[int, float]) -> tuple[float, float, float]:
    """PF-HCT / local HCT over the seeds both ran (``{seed: regret}``), and a 95% confidence
    interval for it: the seeds' paired differences (same seed, same partition, same clients),
    their mean's t interval (Student, n - 1 degrees of freedom), divided by local HCT's mean
    regret (taken as exact). An interval that holds 1 means the seeds do not tell the two
    apart."""
    from scipy import stats

    seeds = sorted(set(pfhct) & set(local))
    diff = np.array([pfhct[s] - local[s] for s in seeds])
    base = float(np.mean([local[s] for s in seeds]))
    half = float(stats.t.ppf(0.975, len(seeds) - 1) * diff.std(ddof=1) / np.sqrt(len(seeds)))
    mean = float(diff.mean())
    return 1 + mean / base, 1 + (mean - half) / base, 1 + (mean + half) / base


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (function, level, M): mean and std per algorithm, ratio with its paired
    95% interval, target verdict (on the ratio of the means, as the issue states it)."""
    cells: dict[tuple[str, str, int], dict[str, dict[int, float]]] = {}
    for r in runs:
        key = (r["function"], r["level"], r["clients"])
        cells.setdefault(key, {}).setdefault(r["algorithm"], {})[r["seed"]] = r["regret"]
    rows = []
    order = {name: i for i, name in enumerate([*FUNCTIONS, *LEVELS])}
    for (function, level, clients), by_alg in sorted(
        cells.items(), key=lambda cell: (order[cell[0][0]], order[cell[0][1]], cell[0][2])
    ):
        stats = {
            a: (float(np.mean(list(v.values()))), float(np.std(list(v.values()))))
            for a, v in by_alg.items()
        }
        ratio, low, high = paired_ratio(by_alg["pfhct"], by_alg["local-hct"])
        bound = 1.0 if level in SIMILAR else WITHIN
        met = ratio < bound if level in SIMILAR else ratio <= bound
        rows.append(
            {
                "function": function,
                "level": level,
                "clients": clients,
                "regret": {a: {"mean": m, "std": s} for a, (m, s) in stats.items()},
                "ratio": ratio,
                "ratio_95": [low, high],
                "target": f"< {bound:g}" if level in SIMILAR else f"<= {bound:g}",
                "met": bool(met),
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], seeds: int, budget: int) -> str:
    names = [a for a in ALGORITHMS if rows and a in rows[0]["regret"]]
    head = ["function", "heterogeneity", "M", *names, "PF-HCT / local HCT", "95% CI", "target"]
    head.append("met")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r['regret'][a]['mean']:.0f} ± {r['regret'][a]['std']:.0f}" for a in names]
        verdict = "met" if r["met"] else "not met"
        lines.append(
            f"| {r['function']} | {r['level']} | {r['clients']} | "
            + " | ".join(cells)
            + f" | {r['ratio']:.2f} | {r['ratio_95'][0]:.2f}–{r['ratio_95'][1]:.2f}"
            + f" | {r['target']} | {verdict} |"
        )
    met = sum(r["met"] for r in rows)
    lines.append("")
    lines.append(
        f"Local cumulative regret at T = {budget} (mean ± std over {seeds} seeds, averaged over "
        f"the clients); 95% CI: the ratio's paired confidence interval over the seeds "
        f"(`paired_ratio`). Target met in {met} of {len(rows)} cells."
    )
    return "\n".join(lines)


def pooled_hct(function: str, seed: int, clients: int, budget: int) -> tuple[float, float]:
    """Identical clients, idealised: one HCT run of ``clients * budget`` pulls on ``function``
    (the grid's noise and constants), as if every client's pulls fed one tree; returns HCT's
    cumulative regret after ``budget`` pulls (one client alone) and an M-th of it after all
    the pulls (each client's share of the pooled run). Their ratio is what pooling samples can
    do for HCT on that function, without the federated algorithms' costs (communication
    rounds, uniform sampling, raw rewards kept private)."""
    from fedxab.algorithms.hct import HCT

    f = _objective(function)
    pulls = clients * budget
    hct = HCT(f.domain, **PNE, budget=pulls, seed=seed)
    regret = _hct_regrets(hct, f, np.random.default_rng(seed).uniform(-0.1, 0.1, pulls))
    return float(regret[:budget].sum()), float(regret.sum() / clients)


def _hct_regrets(hct: Any, f: Any, noise: np.ndarray) -> np.ndarray:
    """Run ``hct`` on objective ``f`` for ``len(noise)`` pulls, each reward noised by the next
    value of ``noise``; the regret of every pull."""
    regret = np.empty(len(noise))
    for t in range(len(noise)):
        x = hct.ask()
        value = float(f(x[None, :])[0])
        hct.tell(x, value + noise[t])
        regret[t] = f.optimum_value - value
    return regret


def free_means(
    task: tuple[str, str, int, int, int, tuple[int, ...], int],
) -> dict[str, Any]:
    """HCT for client m of a cell, alone and started from free exact means (``--free-means``).

    ``task = (function, level, clients, seed, m, depths, budget)``. For each depth h in
    ``depths``, two runs warm-started (:meth:`~fedxab.algorithms.hct.HCT.warm_start`) with every
    node of depths 1..h, each given ``M ceil(tau_d/M)`` samples (what Fed-PNE's stage 1 gives a
    surviving node of depth d) of mean: the average of the M clients' noiseless objectives at the
    node's centre (``average``), or client m's own (``own``). Same noise sequence and partition
    (the run's) in every run; returns the cumulative regrets at ``budget``.
    """
    from fedxab.algorithms.hct import HCT

    function, level, clients, seed, m, depths, budget = task
    federation = _run(function, level, clients, "pfhct", budget, seed)
    objectives, constants = federation.family.clients, federation.server.constants
    f = objectives[m]
    noise = np.random.default_rng([seed, m]).uniform(-0.1, 0.1, budget)

    def regret(source: str, depth: int) -> float:
        hct = HCT(f.domain, **PNE, budget=budget, seed=seed)
        stats = {}
        for d in range(1, depth + 1):
            nodes = np.arange(1, hct.k**d + 1)
            centres = hct.partition.centres(d, nodes)
            if source == "own":
                values = f(centres)
            else:
                values = np.mean([g(centres) for g in objectives], axis=0)
            n = clients * constants.pulls_per_client(d, clients)
            for i, v in zip(nodes.tolist(), values.tolist(), strict=True):
                stats[(d, i)] = (n, n * v)
        hct.warm_start(stats)
        return float(_hct_regrets(hct, f, noise).sum())

    return {
        "seed": seed,
        "client": m,
        "alone": regret("own", 0),
        "average": {d: regret("average", d) for d in depths},
        "own": {d: regret("own", d) for d in depths},
    }


def print_free_means(
    cells: list[tuple[str, str]],
    clients: int,
    depths: tuple[int, ...],
    seeds: range,
    budget: int,
    jobs: int,
) -> None:
    """The ``--free-means`` table: per cell and depth, the mean over seeds (of the mean over
    the clients) of each warm-started HCT's regret over HCT alone, with its paired 95% CI."""
    tasks = [(f, lev, clients, s, m, depths, budget) for f, lev in cells for s in seeds
             for m in range(clients)]  # fmt: skip
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(free_means, tasks))
    else:
        results = [free_means(t) for t in tasks]
    print(f"HCT started from free exact means down to depth h / HCT alone, M = {clients}, "
          f"T = {budget:,}, seeds {seeds.start}-{seeds.stop - 1}\n")  # fmt: skip
    print("| function | heterogeneity | h | federation's average | its own objective |")
    print("|---|---|---|---|---|")
    per_cell = len(seeds) * clients
    for j, (function, level) in enumerate(cells):
        chunk = results[j * per_cell : (j + 1) * per_cell]
        alone = {s: np.mean([r["alone"] for r in chunk if r["seed"] == s]) for s in seeds}
        for d in depths:
            cols = []
            for source in ("average", "own"):
                given = {s: np.mean([r[source][d] for r in chunk if r["seed"] == s]) for s in seeds}
                ratio, low, high = paired_ratio(given, alone)
                cols.append(f"{ratio:.3f} ({low:.3f}–{high:.3f})")
            print(f"| {function} | {level} | {d} | {cols[0]} | {cols[1]} |")


def print_pooled_hct(function: str, seeds: int, clients: int, budget: int) -> None:
    alone, pooled = {}, {}
    print(f"HCT on {function}, T = {budget:,}: alone, and pooled over M = {clients}\n")
    print("| seed | alone | pooled / M | ratio |\n|---|---|---|---|")
    for seed in range(seeds):
        alone[seed], pooled[seed] = pooled_hct(function, seed, clients, budget)
        ratio = pooled[seed] / alone[seed]
        print(f"| {seed} | {alone[seed]:.0f} | {pooled[seed]:.0f} | {ratio:.2f} |")
    ratio, low, high = paired_ratio(pooled, alone)
    print(f"\nmean pooled / mean alone: {ratio:.2f} (95% CI {low:.2f}–{high:.2f})")


def _parameters(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items as parameters: a VALUE that reads as JSON (a number, true) is that,
    anything else a string."""
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--pfhct needs KEY=VALUE, got {item!r}")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, help="seeds per cell (default 10; --quick: 3)")
    parser.add_argument("--budget", type=int, help="T per client (default 10000; --quick: 2000)")
    parser.add_argument("--clients", help="comma-separated M values (default 10,50; --quick: 10)")
    parser.add_argument("--functions", default=",".join(FUNCTIONS))
    parser.add_argument("--levels", default=",".join(LEVELS))
    parser.add_argument("--first-seed", type=int, default=0, help="seeds start here (default 0)")
    parser.add_argument(
        "--algorithms",
        default=",".join(ALGORITHMS),
        help="comma-separated subset of the algorithms (pfhct and local-hct always run)",
    )
    parser.add_argument(
        "--pfhct",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a PF-HCT parameter, e.g. --pfhct rounds_per_depth=1 --pfhct stage2=cells",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--quick", action="store_true", help="3 seeds, T = 2000, M = 10")
    parser.add_argument("--json", type=Path, help="write the runs and the table here")
    parser.add_argument(
        "--from-json", type=Path, nargs="+", help="print the table of runs saved by --json"
    )
    parser.add_argument(
        "--pooled-hct",
        metavar="FUNCTION",
        help="print HCT alone against one HCT fed M clients' pulls on FUNCTION, per seed",
    )
    parser.add_argument(
        "--free-means",
        metavar="DEPTHS",
        help="print HCT started from free exact means down to each of these depths (e.g. 4,5,6) "
        "against HCT alone, per cell",
    )
    args = parser.parse_args(argv)
    if args.free_means:
        cells = [(f, lev) for f in args.functions.split(",") for lev in args.levels.split(",")]
        unknown = [c for c in cells if c[0] not in FUNCTIONS or c[1] not in LEVELS]
        if unknown:
            parser.error(f"unknown function or level in {unknown}")
        depths = tuple(int(d) for d in args.free_means.split(","))
        if min(depths) < 1:
            parser.error(f"--free-means needs depths >= 1, got {args.free_means!r}")
        seeds = range(args.first_seed, args.first_seed + (args.seeds or 10))
        clients = int(args.clients or 10)
        print_free_means(cells, clients, depths, seeds, args.budget or 10_000, args.jobs)
        return 0
    if args.pooled_hct:
        if args.pooled_hct not in FUNCTIONS:
            parser.error(f"unknown function {args.pooled_hct!r}; allowed: {', '.join(FUNCTIONS)}")
        clients = int(args.clients or 10)
        print_pooled_hct(args.pooled_hct, args.seeds or 10, clients, args.budget or 10_000)
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
    algorithms = [a for a in ALGORITHMS if a in {"pfhct", "local-hct", *args.algorithms.split(",")}]
    overrides = _parameters(parser, args.pfhct)
    for name, given, allowed in (
        ("function", functions, FUNCTIONS),
        ("level", levels, LEVELS),
        ("algorithm", args.algorithms.split(","), ALGORITHMS),
    ):
        unknown = [v for v in given if v not in allowed]
        if unknown:
            parser.error(f"unknown {name} {unknown}; allowed: {', '.join(allowed)}")
    tasks = [
        (f, lev, m, a, budget, s, overrides if a == "pfhct" else {})
        for f in functions
        for lev in levels
        for m in clients
        for a in algorithms
        for s in range(args.first_seed, args.first_seed + seeds)
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
        data = {
            "seeds": seeds,
            "first_seed": args.first_seed,
            "budget": budget,
            "clients": clients,
            "pfhct": overrides,
            "rows": rows,
            "runs": runs,
        }
        args.json.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
