"""Federated hyper-parameter tuning of an SVM across three sites, in one process.

    python examples/sklearn_tuning/tune.py [--budget 300] [--broker memory://]

Each site evaluates its own objective (:mod:`sites`: validation accuracy on its own shard of
scikit-learn's digits) over typed parameters (C and gamma on a log scale, the kernel, the
polynomial degree); Fed-PNE finds parameters good for all of them. Prints, per site, the best
accuracy it observed and with which parameters, and its accuracy at the federated
recommendation. The same job as a server and three client processes: see run.toml.
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
    parser.add_argument("--budget", type=int, default=300, help="evaluations per site")
    parser.add_argument("--broker", default="inprocess://", help="inprocess://, memory://, ...")
    args = parser.parse_args()

    results = fedxab.federate(
        sites.accuracy,
        space=sites.SPACE,
        clients=sites.SITES,
        budget=args.budget,
        algorithm="fedpne",
        deterministic=True,  # an SVM fit gives the same accuracy for the same parameters
        broker=args.broker,
    )
    run = results.runs[0]
    rec = run.recommendation_params
    print(f"federated recommendation: {_show(rec)}")
    print(f"{run.communication['rounds']} rounds, {run.evaluations} evaluations in all")
    print("site  best observed accuracy  accuracy at the recommendation  best parameters")
    for outcome in run.clients:
        at_rec = sites.accuracy(rec, outcome.client)
        best = run.best_params[outcome.client]
        print(f"{outcome.client:>4}  {outcome.best_value:>22.4f}  {at_rec:>30.4f}  ({_show(best)})")


if __name__ == "__main__":
    main()
