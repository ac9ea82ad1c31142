"""Privacy ledger: epsilon of every client of a run, 10,000 clients x 1,000 releases each.

Issue "Benchmark: epsilon for 10,000 clients x 1,000 releases each (clients with identical event
histories must share one computation): target under 1 s for the ``rdp`` backend; report each
backend."

Setup (timed, not part of the target): a file-backed ledger in a temporary directory, written
with ``PrivacyLedger.record_many`` (one transaction per batch of clients), one row per release:
the subsampled Gaussian (sampling rate q = 0.01, noise multiplier z = 1.0), one scope. Most
clients release in every phase; a few groups joined late and miss the first 1, 2, 5 or 10
phases (:data:`LATE_JOINERS`), so the run has a handful of distinct histories.

Measured: ``PrivacyLedger.spent_all(run, delta)`` for each backend (``rdp``, ``moments``,
``pld``, ``opacus-rdp``, ``opacus-prv``; the Opacus ones are skipped, with the reason, when
Opacus is not installed), wall time, median of ``--repeats`` runs. Each run opens the ledger
afresh (a new connection and a new accountant) after clearing every LRU cache of
:mod:`fedxab.privacy.accountants`, so nothing is reused between runs. The time spent inside the
accountant is reported separately (the rest is the SQL query of the ``totals`` view and the
grouping of clients by history).

Run: ``.venv/bin/python benchmarks/bench_ledger.py [--clients N] [--releases R] [--repeats K]``
(``--clients 200 --releases 50 --repeats 1`` is a smoke run of a few seconds).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_federation import _version, env_line, environment, md_table

from fedxab.errors import ConfigError
from fedxab.privacy import accountants
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent

RUN, DELTA = "bench", 1e-5
EVENT = PrivacyEvent("gaussian", noise_multiplier=1.0, sampling_rate=0.01)
LATE_JOINERS = {1: 0.04, 2: 0.03, 5: 0.02, 10: 0.01}
"""Phases missed: share of the clients (the last client ids) that joined that late."""
BATCH_CLIENTS = 100
"""Clients per ``record_many`` call (one transaction each)."""
TARGET_S = {"rdp": 1.0}


def releases_per_client(clients: int, releases: int) -> list[int]:
    """How many releases each client made: ``releases``, less the phases a late joiner missed."""
    counts = [releases] * clients
    end = clients
    for missed, share in LATE_JOINERS.items():
        start = max(0, end - round(share * clients))
        counts[start:end] = [max(1, releases - missed)] * (end - start)
        end = start
    return counts


def build(path: Path, counts: list[int]) -> float:
    """Write the ledger: client c releases once in each of its last ``counts[c]`` phases."""
    releases = max(counts)
    t0 = time.perf_counter()
    with PrivacyLedger(path) as ledger:
        for first in range(0, len(counts), BATCH_CLIENTS):
            ledger.record_many(
                RUN,
                (
                    (client, phase, EVENT)
                    for client in range(first, min(first + BATCH_CLIENTS, len(counts)))
                    for phase in range(releases - counts[client] + 1, releases + 1)
                ),
            )
    return time.perf_counter() - t0


class TimedAccountant:
    """Wraps an accountant: counts its ``epsilon`` calls and the time spent in them."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.calls, self.seconds = inner, inner.name, 0, 0.0

    def epsilon(self, events: Any, delta: float) -> float:
        t0 = time.perf_counter()
        try:
            return self.inner.epsilon(events, delta)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - t0


def clear_accountant_caches() -> None:
    """Empty every ``functools`` cache of :mod:`fedxab.privacy.accountants`."""
    for value in vars(accountants).values():
        if hasattr(value, "cache_clear"):
            value.cache_clear()


def measure(path: Path, backend: str, repeats: int) -> dict[str, Any]:
    """``spent_all`` on a fresh ledger, accountant and caches, ``repeats`` times."""
    walls, accounting = [], []
    for _ in range(repeats):
        clear_accountant_caches()
        with PrivacyLedger(path, accountant=backend) as ledger:
            ledger.accountant = timed = TimedAccountant(ledger.accountant)
            t0 = time.perf_counter()
            epsilon = ledger.spent_all(RUN, DELTA)
            walls.append(time.perf_counter() - t0)
        accounting.append(timed.seconds)
    return {
        "median": statistics.median(walls),
        "min": min(walls),
        "max": max(walls),
        "accounting": statistics.median(accounting),
        "calls": timed.calls,
        "max_epsilon": max(epsilon.values()),
        "clients": len(epsilon),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--releases", type=int, default=1_000, help="releases per client")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    counts = releases_per_client(args.clients, args.releases)
    groups = sorted(Counter(counts).items(), reverse=True)
    print(
        f"Ledger: {args.clients:,} clients, {sum(counts):,} releases (subsampled Gaussian "
        f"q = {EVENT.sampling_rate}, z = {EVENT.noise_multiplier}, one scope); "
        f"{len(groups)} distinct histories: "
        + ", ".join(f"{n:,} clients x {r:,} releases" for r, n in groups)
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.db"
        setup = build(path, counts)
        print(
            f"Setup: {setup:.1f} s (record_many, {BATCH_CLIENTS} clients per transaction), "
            f"file {path.stat().st_size / 1e6:.0f} MB."
        )
        for backend in accountants.ACCOUNTANTS:
            try:
                accountants.make_accountant(backend)
            except ConfigError as exc:
                print(f"{backend}: skipped ({exc})")
                continue
            m = measure(path, backend, args.repeats)
            target = TARGET_S.get(backend)
            rows.append(
                [
                    backend,
                    f"{m['clients']:,}",
                    f"{args.releases:,}",
                    str(len(groups)),
                    str(m["calls"]),
                    f"{m['median']:.3f} [{m['min']:.3f}–{m['max']:.3f}]",
                    f"{m['accounting']:.3f}",
                    f"{m['max_epsilon']:.4f}",
                    "-" if target is None else f"< {target:g} s",
                    "-" if target is None else "yes" if m["median"] < target else "NO",
                ]
            )
    headers = [
        "backend",
        "clients",
        "releases per client",
        "distinct histories",
        "accountant calls",
        "spent_all (s)",
        "of which accounting (s)",
        "max epsilon",
        "target",
        "met",
    ]
    print()
    print(md_table(headers, rows))
    print()
    print(
        f"spent_all(run, delta={DELTA:g}): wall time, median [min–max] of {args.repeats} runs, "
        "each on a fresh ledger connection and accountant with the accountants' caches cleared; "
        "accounting: time inside the accountant (the rest is the totals query and the grouping)."
    )
    versions = ", ".join(f"{d} {_version(d)}" for d in ("dp-accounting", "opacus", "torch"))
    print(f"{env_line(environment())} {versions}; SQLite {sqlite3.sqlite_version}.")


if __name__ == "__main__":
    main()
