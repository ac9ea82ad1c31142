"""Federated hyper-parameter tuning of an SVM across three sites, in one process.

    python examples/sklearn_tuning/tune.py [--budget 50] [--broker inprocess://]

Each site evaluates its own objective (:mod:`sites`: validation accuracy on its own shard of
scikit-learn's digits) over typed parameters (C and gamma on a log scale, the kernel, the
polynomial degree); the algorithm is fedxab's default, ``"auto"``, chosen from the budget, the
space and the number of sites. Prints the choice, the federated recommendation and, per site,
the best accuracy it observed and with which parameters, and its accuracy at the
recommendation. The same job as a server and three client processes: see README.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sites

import fedxab


def _show(params: dict) -> str:
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=50, help="evaluations per site")
    parser.add_argument("--broker", default="inprocess://", help="inprocess://, memory://, ...")
    args = parser.parse_args()

    results = fedxab.federate(
        sites.accuracy,
        space=sites.SPACE,
        clients=sites.SITES,
        budget=args.budget,
        deterministic=True,  # an SVM fit gives the same accuracy for the same parameters
        broker=args.broker,
    )
    run = results.runs[0]
    rec = run.recommendation_params
    choice = results.algorithm_choice
    print(f"algorithm auto: {choice['name']} ({choice['reason']})")
    print(f"federated recommendation: {_show(rec)}")
    rounds = run.communication["rounds"]
    print(f"{rounds} communication rounds, {run.evaluations} evaluations in all")
    print("site  fits  best observed accuracy  accuracy at the recommendation  best parameters")
    for outcome in run.clients:
        at_rec = sites.accuracy(rec, outcome.client)
        best = run.best_params[outcome.client]
        fits = len(outcome.trials)  # calls of the objective: a repeated point is not refitted
        print(
            f"{outcome.client:>4}  {fits:>4}  {outcome.best_value:>22.4f}  {at_rec:>30.4f}"
            f"  ({_show(best)})"
        )


if __name__ == "__main__":
    main()
