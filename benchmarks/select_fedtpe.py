"""Choosing Fed-TPE's settings on held-out tasks and seeds (never the reported ones).

Runs Fed-TPE variants (``--variants``, JSON: name -> algorithm parameters over ``auto``'s
choice) on shifted BBOB functions that ``bench_tuning.py`` never reports
(``bench_tuning.HELD_OUT_BBOB``), seeds 100-104 by default, 4 sites, and prints per task each
variant's per-site best ``f - f*`` (mean over sites; mean ± 95% t-interval over seeds) and on
how many seeds it beats the first variant. ``UNIVARIATE_DIM`` of ``fedxab.algorithms.auto`` was
chosen with

    .venv/bin/python benchmarks/select_fedtpe.py --budget 50 --seeds 100-104 \\
        --variants '{"joint": {"univariate": false}, "univariate": {"univariate": true}}'

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
from bench_tuning import HELD_OUT_BBOB, SITES, Meter, interval, make_task, parse_seeds


def per_site_best(name: str, params: dict, budget: int, seed: int) -> float:
    """The mean over sites of each site's best ``f - f*`` under Fed-TPE with ``params``."""
    import fedxab
    from fedxab.algorithms.auto import choose_algorithm

    task = make_task(name, seed, SITES)
    meter = Meter(task, SITES)
    dim = task.space.dim
    rule = choose_algorithm(budget=budget, dim=dim, clients=SITES, private=False).params
    fedxab.federate(
        [meter.site(m) for m in range(SITES)],
        task.space.domain,
        budget=budget,
        algorithm="fedtpe",
        params={**rule, **params},
        seed=seed,
    )
    return float(meter.outcome(1.0, None).best.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="100-104")
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--tasks", default=",".join(HELD_OUT_BBOB))
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
    record: dict[str, dict[str, list[float]]] = {}
    for name in args.tasks.split(","):
        if name not in HELD_OUT_BBOB:
            parser.error(f"{name!r} is not a held-out task; choose from {', '.join(HELD_OUT_BBOB)}")
        values = {
            v: np.array([per_site_best(name, p, args.budget, s) for s in seeds])
            for v, p in variants.items()
        }
        record[name] = {v: x.tolist() for v, x in values.items()}
        rows = []
        for v, x in values.items():
            mean, half = interval(x)
            rows.append(
                [v, f"{mean:.3f} ± {half:.3f}", f"{int(np.sum(x < values[first]))}/{len(x)}"]
            )
        print(f"\n{name}, f - f* (lower is better)")
        print(
            md_table(["variant", "per-site best ± 95%", f"seeds better than {first}"], rows),
            flush=True,
        )

    if args.json is not None:
        args.json.write_text(json.dumps({"seeds": seeds, "budget": args.budget, "tasks": record}))


if __name__ == "__main__":
    main()
