"""Choosing Fed-TPE's settings on held-out tasks and seeds (never the reported ones).

Runs Fed-TPE variants (``--variants``, JSON: name -> algorithm parameters over ``auto``'s
choice) on tasks that ``bench_tuning.py`` never reports: shifted BBOB functions
(``bench_tuning.HELD_OUT_BBOB``) and the benchmark's four scikit-learn models on other data sets
(``bench_tuning.HELD_OUT_SKLEARN``), seeds 100-104 by default, 4 sites. It prints per task each
variant's per-site best (mean over sites; mean ± 95% t-interval over seeds), the server
recommendation's mean score at the sites and its ratio to the per-site best (a ratio of the
means, as ``bench_tuning.py`` prints it), and on how many seeds the variant's per-site best and
recommendation beat the first variant's. ``UNIVARIATE_DIM`` of ``fedxab.algorithms.auto`` was
chosen with

    .venv/bin/python benchmarks/select_fedtpe.py --budget 50 --seeds 100-104 \\
        --variants '{"joint": {"univariate": false}, "univariate": {"univariate": true}}'

and the number of consensus candidates with

    .venv/bin/python benchmarks/select_fedtpe.py --budget 50 --seeds 100-109 \\
        --tasks svc-breast_cancer,tree-digits,logreg-digits,knn-wine \\
        --variants '{"K3": {"consensus": 3}, "K8": {"consensus": 8}}'

(and the same on the held-out BBOB functions, seeds 100-104).

(``--json OUT`` also writes every per-seed value.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_federation import env_line, environment, md_table
from bench_tuning import (
    HELD_OUT_BBOB,
    HELD_OUT_SKLEARN,
    SITES,
    Meter,
    interval,
    make_task,
    parse_seeds,
)

HELD_OUT = (*HELD_OUT_BBOB, *HELD_OUT_SKLEARN)


def run_variant(name: str, params: dict, budget: int, seed: int) -> tuple[float, float]:
    """Fed-TPE with ``params`` over ``auto``'s choice: the mean over sites of each site's best
    score, and of the server recommendation's score."""
    import fedxab
    from fedxab.algorithms.auto import choose_algorithm

    task = make_task(name, seed, SITES)
    meter = Meter(task, SITES)
    space = task.space
    rule = choose_algorithm(
        budget=budget,
        dim=space.dim,
        clients=SITES,
        private=False,
        kinds=space.kinds,
        levels=space.levels,
    ).params
    result = fedxab.federate(
        [meter.site(m) for m in range(SITES)],
        space.domain,
        budget=budget,
        algorithm="fedtpe",
        params={**rule, **params},
        seed=seed,
    )
    recommended = space.decode(np.asarray(result.runs[0].recommendation))
    rec = np.array([task.score(m, recommended) for m in range(SITES)])
    return float(meter.outcome(1.0, rec).best.mean()), float(rec.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="100-104")
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--tasks", default=",".join(HELD_OUT))
    parser.add_argument(
        "--variants",
        default='{"joint": {"univariate": false}, "univariate": {"univariate": true}}',
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    variants: dict[str, dict] = json.loads(args.variants)
    print(env_line(environment()))
    print(f"{SITES} sites, seeds {seeds[0]}-{seeds[-1]}, budget {args.budget} per site")
    first = next(iter(variants))
    record: dict[str, dict[str, list[list[float]]]] = {}
    for name in args.tasks.split(","):
        if name not in HELD_OUT:
            parser.error(f"{name!r} is not a held-out task; choose from {', '.join(HELD_OUT)}")
        maximize = name in HELD_OUT_SKLEARN
        runs = {
            v: np.array([run_variant(name, p, args.budget, s) for s in seeds])
            for v, p in variants.items()
        }
        record[name] = {v: x.tolist() for v, x in runs.items()}
        sign = -1.0 if maximize else 1.0  # lower sign * value is better
        rows = []
        for v, x in runs.items():
            mean, half = interval(x[:, 0])
            better = np.sum(sign * x < sign * runs[first], axis=0)
            rows.append(
                [
                    v,
                    f"{mean:.4f} ± {half:.4f}",
                    f"{x[:, 1].mean():.4f}",
                    f"{x[:, 1].mean() / mean:.4f}",
                    f"{better[0]}/{len(x)}",
                    f"{better[1]}/{len(x)}",
                ]
            )
        sense = "higher" if maximize else "lower"
        print(f"\n{name}, {make_task(name, seeds[0], SITES).label} ({sense} is better)")
        headers = ["variant", "per-site best ± 95%", "rec. at sites", "rec./best"]
        headers += [f"seeds best better than {first}", f"seeds rec. better than {first}"]
        print(md_table(headers, rows), flush=True)

    if args.json is not None:
        args.json.write_text(json.dumps({"seeds": seeds, "budget": args.budget, "tasks": record}))


if __name__ == "__main__":
    main()
