"""Federated hyper-parameter tuning of an SVM across three sites, in one process.

    python examples/sklearn_tuning/tune.py [--budget 1000] [--broker memory://]

Each site evaluates its own objective (:mod:`sites`: validation accuracy on its own shard of
scikit-learn's digits); Fed-PNE finds hyper-parameters good for all of them. Prints, per site,
the best accuracy it observed and where, and its accuracy at the federated recommendation.
The same job as a server and three client processes: see this directory's run.toml.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import sites  # noqa: E402

import fedxab  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=1000, help="evaluations per site")
    parser.add_argument("--broker", default="inprocess://", help="inprocess://, memory://, ...")
    args = parser.parse_args()

    results = fedxab.federate(
        sites.accuracy,
        sites.DOMAIN,
        clients=sites.SITES,
        budget=args.budget,
        algorithm="fedpne",
        broker=args.broker,
    )
    run = results.runs[0]
    log_c, log_gamma = run.recommendation
    print(f"federated recommendation: C = {10**log_c:.4g}, gamma = {10**log_gamma:.4g}")
    print(f"{run.communication['rounds']} rounds, {run.evaluations} evaluations in all")
    print("site  best observed accuracy  at (C, gamma)          accuracy at the recommendation")
    for outcome in run.clients:
        c, g = 10.0 ** np.asarray(outcome.best_point)
        at_rec = sites.accuracy(run.recommendation, outcome.client)
        print(
            f"{outcome.client:>4}  {outcome.best_value:>22.4f}  ({c:<9.4g}, {g:<9.4g})  "
            f"{at_rec:>30.4f}"
        )


if __name__ == "__main__":
    main()
