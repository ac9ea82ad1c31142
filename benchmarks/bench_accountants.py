"""Privacy accountants: the time to account 10,000 clients x 1,000 releases, and their epsilon.

Issue 17 ("Privacy a client can audit"): "a benchmark table reports each accountant's time for
10,000 clients x 1,000 releases".

Each client's history is what the ledger hands an accountant (its canonical history): one event,
``--releases`` releases of the Poisson-subsampled Gaussian (sampling rate q, noise multiplier z),
one scope. Two cases:

- **identical**: every client has q = 0.01, z = 1.0 (:data:`SAME`);
- **distinct**: client ``c`` has q = ``QS[c % 10]`` and z = ``ZS[(c // 10) % 10]``: 100 distinct
  histories (:data:`QS`, :data:`ZS`; fewer with fewer than 100 clients).

Measured, for each accountant of :data:`fedxab.privacy.accountants.ACCOUNTANTS` (the Opacus ones
skipped, with the reason, when Opacus is not installed): wall time of ``accountant.epsilon(history,
delta=1e-5)`` for every client in turn, median [min–max] of ``--repeats`` runs, each on a new
accountant after clearing every LRU cache of :mod:`fedxab.privacy.accountants`, so that each run
pays every distinct history's computation (identical histories share one: that is the cache's
job). The worker process of the time-limited backends (``pld``, ``opacus-prv``) is started, and
Opacus imported, before the timed runs: a process pays that once, not per accounting. Also
reported: each accountant's epsilon for the identical history and for DP-FTS-DE's landmine
setting (q = 0.35, z = 1, 61 releases), to show how tight each is, and the computations that ran
out of time (none expected at the default limit).

Run: ``.venv/bin/python benchmarks/bench_accountants.py [--clients N] [--releases R]
[--repeats K] [--markdown] [--json PATH]`` (``--clients 20 --releases 10 --repeats 1`` is a smoke
run of a few seconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_federation import _version, env_line, environment, md_table
from bench_ledger import clear_accountant_caches

from fedxab.errors import ConfigError
from fedxab.privacy import accountants
from fedxab.privacy.mechanisms import PrivacyEvent

DELTA = 1e-5
CASES = ("identical", "distinct")
SAME = (0.01, 1.0)
"""(q, z) of every client in the identical case."""
QS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.045, 0.05)
ZS = (0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 1.6, 1.8, 2.0, 2.5)
LANDMINE = (0.35, 1.0, 61)
"""DP-FTS-DE's landmine setting (q, z, releases): the issue's tightness figure."""


def _history(q: float, z: float, releases: int) -> list[PrivacyEvent]:
    return [PrivacyEvent("gaussian", z, q, 1.0, releases)]


def histories(case: str, clients: int, releases: int) -> list[list[PrivacyEvent]]:
    """Every client's history in ``case`` (``"identical"`` or ``"distinct"``)."""
    if case == "identical":
        return [_history(*SAME, releases) for _ in range(clients)]
    return [_history(QS[c % 10], ZS[(c // 10) % 10], releases) for c in range(clients)]


def measure(backend: str, clients: list[list[PrivacyEvent]], repeats: int) -> dict[str, Any]:
    """``epsilon`` of every client, on a new accountant with the caches cleared, ``repeats``
    times."""
    times, fallbacks = [], 0
    for _ in range(repeats):
        clear_accountant_caches()
        accountant = accountants.make_accountant(backend)
        t0 = time.perf_counter()
        epsilon = [accountant.epsilon(history, DELTA) for history in clients]
        times.append(time.perf_counter() - t0)
        fallbacks += accountant.fallbacks
    return {
        "times_s": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "max_epsilon": max(epsilon),
        "fallbacks": fallbacks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--releases", type=int, default=1_000, help="releases per client")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--json", type=Path, default=None, help="write the measurements here")
    args = parser.parse_args()

    cases = {case: histories(case, args.clients, args.releases) for case in CASES}
    distinct = {case: len({tuple(h) for h in hs}) for case, hs in cases.items()}
    print(
        f"Accountants: {args.clients:,} clients x {args.releases:,} releases (subsampled "
        f"Gaussian, one scope), delta = {DELTA:g}; identical: q = {SAME[0]}, z = {SAME[1]} "
        f"for all; distinct: q in {QS[0]}..{QS[-1]} x z in {ZS[0]}..{ZS[-1]}, "
        f"{distinct['distinct']} distinct histories."
    )
    results, skipped = [], {}
    for backend in accountants.ACCOUNTANTS:
        try:
            warm = accountants.make_accountant(backend)  # imports Opacus for its backends
        except ConfigError as exc:
            skipped[backend] = str(exc)
            print(f"{backend}: skipped ({exc})")
            continue
        tightness = {
            "epsilon_identical": warm.epsilon(_history(*SAME, args.releases), DELTA),
            "epsilon_landmine": warm.epsilon(_history(*LANDMINE), DELTA),
        }  # and, for the time-limited backends, a running worker
        for case, clients in cases.items():
            m = measure(backend, clients, args.repeats)
            results.append({"backend": backend, "case": case, **tightness, **m})

    headers = ["accountant", "case", "distinct histories", "time (s)", "per distinct history (ms)",
               "out of time", "epsilon (q = 0.01, z = 1)", "epsilon (landmine)"]  # fmt: skip
    rows = [
        [
            r["backend"],
            r["case"],
            str(distinct[r["case"]]),
            f"{r['median_s']:.3f} [{r['min_s']:.3f}–{r['max_s']:.3f}]",
            f"{1000 * r['median_s'] / distinct[r['case']]:.1f}",
            str(r["fallbacks"]),
            f"{r['epsilon_identical']:.4f}",
            f"{r['epsilon_landmine']:.2f}",
        ]
        for r in results
    ]
    print()
    print(md_table(headers, rows) if args.markdown else "\n".join(" | ".join(r) for r in rows))
    print()
    print(
        f"time: accountant.epsilon(history, delta={DELTA:g}) for each of the {args.clients:,} "
        f"clients, median [min–max] of {args.repeats} runs, each on a new accountant with the "
        "accountants' caches cleared; out of time: computations answered by the fallback over "
        f"all runs; epsilon at {args.releases:,} releases (q = 0.01, z = 1) and at DP-FTS-DE's "
        f"landmine setting (q = {LANDMINE[0]}, z = {LANDMINE[1]}, {LANDMINE[2]} releases)."
    )
    versions = ", ".join(f"{d} {_version(d)}" for d in ("dp-accounting", "opacus", "torch"))
    print(f"{env_line(environment())} {versions}.")
    if args.json is not None:
        data = {
            "clients": args.clients,
            "releases": args.releases,
            "repeats": args.repeats,
            "delta": DELTA,
            "distinct_histories": distinct,
            "results": results,
            "skipped": skipped,
            "environment": environment(),
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
