#!/usr/bin/env python
"""Message signing's cost on the Kafka Fed-PNE benchmark (issue 8).

The job is the Kafka speed job of ``bench_transports.py``: Fed-PNE (practical preset) on Garland
with value offsets, M = 100 clients, T = 10^4 evaluations each, seed 0, the server agent and one
client agent hosting every client in this process, on Kafka (a dev broker on loopback, started by
this script; every run under a fresh namespace, i.e. fresh topics). Measured side by side in one
run of this script:

1. **Wall time, signing off and on**: the job with ``[security] sign = false`` and with
   ``sign = true`` (``keys_dir``: the key files of :func:`fedxab.security.keys.generate_keys`,
   what ``fedxab keys generate`` writes, in a temporary directory), interleaved (off, on, off,
   on, ...) after ``--warmups`` untimed runs of each (default 1), ``gc.collect()`` before each;
   median [min–max] of ``--repeats`` runs (default 3) and the ratio on/off of the medians. Every
   run's results (the run record without its wall time) must be identical: signing must not
   change them.
2. **Direct cost**: during every run, each call the agents make to the signing functions of
   :mod:`fedxab.security.signing` (signing: ``seal``, ``seal_for_every_client``; verifying:
   ``open_signed``) is counted and timed where it happens (``time.perf_counter`` around the call)
   and its arguments are kept. After the runs, the last signed run's calls are made again in a
   tight loop on the same arguments (the run's actual messages, keys and sessions), ``--repeats``
   times: the median is the time spent signing and verifying every message of one run, without
   the run's scheduling noise (a call timed inside the run may include waiting for the GIL held
   by another thread). Its share of the unsigned run's median wall time is the acceptance figure;
   the in-run timing and the wall-time ratio, noisier, are reported beside it. ``open_signed``
   also decodes the inner envelope, which an unsigned receiver does too, so the share overstates
   the cost a little. The replayed signatures must equal the ones the run published. A third
   table splits the calls, wire bytes and replay times by envelope kind.

Checks that signing was really on (and off): the unsigned runs make no signing call; in each
signed run every report is signed once and verified once (as many as the run's messages up) and
every call succeeds.

Target (issue 8): signing and verifying cost under 5% of the Kafka Fed-PNE benchmark's wall time.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_signing.py                 # M = 100, T = 10^4, median of 3
    .venv/bin/python benchmarks/bench_signing.py --markdown      # the tables as Markdown
    .venv/bin/python benchmarks/bench_signing.py --clients 10 --budget 1000 --repeats 1 \\
        --warmups 0 --json out.json                              # smoke run (a few seconds)

The script prints the measurements and the verdict; it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from bench_federation import (  # noqa: E402
    SEED,
    env_line,
    environment,
    make_console,
    md_table,
    print_table,
)
from bench_transports import (  # noqa: E402
    SPEED_BUDGET,
    SPEED_CLIENTS,
    _on_broker,
    _stats,
    _without_time,
    garland_config,
    with_security,
)

TARGET_SHARE = 0.05
SIGN_FUNCTIONS = ("seal", "seal_for_every_client")
VERIFY_FUNCTIONS = ("open_signed",)
"""The functions of :mod:`fedxab.security.signing` that are timed."""


# --------------------------------------------------------------------------------------------
# Counting and timing the signing functions


@dataclasses.dataclass
class Call:
    """One call of a signing function during a run."""

    op: str  # "sign" or "verify"
    function: Callable[..., Any]  # the original function
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any  # None if it raised
    seconds: float
    ok: bool


class SigningProbe:
    """Replaces the signing functions, in every fedxab module that holds them, by wrappers that
    time each call and keep it in :attr:`calls` (a call inside another timed one is not counted
    twice). Use as a context manager; the originals are back on exit."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._local = threading.local()
        self._patched: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> SigningProbe:
        import fedxab.agents.distributed  # noqa: F401  (loads the agents' bindings to patch)
        from fedxab.security import signing

        originals: dict[int, tuple[str, Any]] = {}
        for op, names in (("sign", SIGN_FUNCTIONS), ("verify", VERIFY_FUNCTIONS)):
            for name in names:
                fn = getattr(signing, name)
                originals[id(fn)] = (op, fn)
        wrappers = {key: self._wrap(op, fn) for key, (op, fn) in originals.items()}
        for module in list(sys.modules.values()):
            if not getattr(module, "__name__", "").startswith("fedxab"):
                continue
            for attr, value in list(vars(module).items()):
                hit = originals.get(id(value))
                if hit is not None and value is hit[1]:
                    setattr(module, attr, wrappers[id(value)])
                    self._patched.append((module, attr, value))
        return self

    def __exit__(self, *exc: object) -> None:
        for module, attr, value in reversed(self._patched):
            setattr(module, attr, value)
        self._patched.clear()

    def _wrap(self, op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        local = self._local

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "inside", False):
                return fn(*args, **kwargs)
            local.inside = True
            t0 = time.perf_counter()
            try:
                result = fn(*args, **kwargs)
            except Exception:
                seconds = time.perf_counter() - t0
                self.calls.append(Call(op, fn, args, kwargs, None, seconds, False))
                raise
            finally:
                local.inside = False
            seconds = time.perf_counter() - t0
            self.calls.append(Call(op, fn, args, kwargs, result, seconds, True))
            return result

        return timed

    def take(self) -> list[Call]:
        """The calls since the last :meth:`take`."""
        calls, self.calls = self.calls, []
        return calls


def _kind(call: Call) -> str:
    """The envelope kind of a call's message ("refused" for a verification that failed)."""
    from fedxab.broker.codec import Envelope

    if call.op == "sign":
        env = call.args[0] if call.args else next(iter(call.kwargs.values()))
        return (env if isinstance(env, Envelope) else Envelope.decode(env)).kind
    if not call.ok:
        return "refused"
    return getattr(call.result, "envelope", call.result).kind


def _wire_bytes(call: Call) -> int:
    """Size of the signed message: what ``sign`` returned, what ``verify`` was given."""
    data = call.result if call.op == "sign" else (call.args[0] if call.args else b"")
    return len(data) if isinstance(data, bytes | bytearray | memoryview) else 0


def call_summary(calls: list[Call]) -> dict[str, Any]:
    """Counts, bytes, in-run time and envelope kinds of one run's calls."""
    out: dict[str, Any] = {}
    for op in ("sign", "verify"):
        mine = [c for c in calls if c.op == op]
        kinds = [_kind(c) for c in mine]
        sizes = [_wire_bytes(c) for c in mine]
        by_bytes: Counter[str] = Counter()
        for kind, size in zip(kinds, sizes, strict=True):
            by_bytes[kind] += size
        out[op] = {
            "calls": len(mine),
            "failed": sum(not c.ok for c in mine),
            "bytes": sum(sizes),
            "in_run_s": sum(c.seconds for c in mine),
            "by_kind": dict(sorted(Counter(kinds).items())),
            "bytes_by_kind": dict(sorted(by_bytes.items())),
        }
    return out


def replay(calls: list[Call], repeats: int) -> dict[str, Any]:
    """The successful calls made again on the same arguments, per operation, ``repeats`` times
    (median [min-max] of the totals; the median per envelope kind, each kind in its own loop);
    and whether every signature equals the run's."""
    ok = [c for c in calls if c.ok]
    out: dict[str, Any] = {}
    for op in ("sign", "verify"):
        work: dict[str, list[tuple[Any, tuple[Any, ...], dict[str, Any]]]] = {}
        for c in ok:
            if c.op == op:
                work.setdefault(_kind(c), []).append((c.function, c.args, c.kwargs))
        times: list[float] = []
        by_kind: dict[str, list[float]] = {kind: [] for kind in work}
        for _ in range(repeats):
            gc.collect()
            for kind, items in work.items():
                t0 = time.perf_counter()
                for fn, args, kwargs in items:
                    fn(*args, **kwargs)
                by_kind[kind].append(time.perf_counter() - t0)
            times.append(sum(t[-1] for t in by_kind.values()))
        out[op] = {
            "calls": sum(len(items) for items in work.values()),
            "times": times,
            **_stats(times),
            "by_kind_s": {k: statistics.median(t) for k, t in sorted(by_kind.items())},
        }
    out["same_signatures"] = all(
        c.function(*c.args, **c.kwargs) == c.result for c in ok if c.op == "sign"
    )
    return out


# --------------------------------------------------------------------------------------------
# The measurement


def measure(address: str, clients: int, budget: int, repeats: int, warmups: int) -> dict[str, Any]:
    """The job unsigned and signed, interleaved; the signing calls of every run; the replay."""
    from fedxab.broker.kafka import KafkaBroker
    from fedxab.security.keys import generate_keys

    base = garland_config(clients, budget, SEED)
    with tempfile.TemporaryDirectory() as tmp, SigningProbe() as probe:
        keys_dir = Path(tmp) / "keys"
        generate_keys(clients, keys_dir)
        configs = {
            "off": with_security(base, sign=False),
            "on": with_security(base, sign=True, keys_dir=keys_dir),
        }
        times: dict[str, list[float]] = {"off": [], "on": []}
        calls: dict[str, list[list[Call]]] = {"off": [], "on": []}
        records: list[tuple[str, Any]] = []

        def one(variant: str) -> float:
            gc.collect()
            probe.take()
            t0 = time.perf_counter()
            record = _on_broker(configs[variant], lambda: KafkaBroker(address))
            seconds = time.perf_counter() - t0
            calls[variant].append(probe.take())
            records.append((variant, record))
            return seconds

        for _ in range(warmups):
            one("off")
            one("on")
        for _ in range(repeats):
            for variant in ("off", "on"):
                times[variant].append(one(variant))
        last_signed = calls["on"][-1]
        replayed = replay(last_signed, repeats)
    reference = _without_time(records[0][1])
    identical = all(_without_time(r) == reference for _, r in records)
    comm = records[0][1].communication
    signed_runs = [call_summary(c) for c in calls["on"]]
    unsigned_calls = sum(len(c) for c in calls["off"])
    messages_up = comm["messages_up"]
    signing_on = all(
        s["sign"]["by_kind"].get("report") == messages_up
        and s["verify"]["by_kind"].get("report") == messages_up
        and s["sign"]["failed"] == s["verify"]["failed"] == 0
        for s in signed_runs
    )
    wall = {v: _stats(t) | {"times": t} for v, t in times.items()}
    off_median = wall["off"]["median"]
    direct_s = replayed["sign"]["median"] + replayed["verify"]["median"]
    in_run = [s["sign"]["in_run_s"] + s["verify"]["in_run_s"] for s in signed_runs[warmups:]]
    share = direct_s / off_median
    return {
        "clients": clients,
        "budget": budget,
        "seed": SEED,
        "repeats": repeats,
        "warmups": warmups,
        "rounds": comm["rounds"],
        "messages": comm["messages_up"] + comm["messages_down"],
        "messages_up": messages_up,
        "bytes": comm["bytes_up"] + comm["bytes_down"],
        "wall_s": wall,
        "ratio": wall["on"]["median"] / off_median,
        "identical": identical,
        "unsigned_signing_calls": unsigned_calls,
        "signed_runs": signed_runs,
        "last_signed_run": signed_runs[-1],
        "replay": replayed,
        "direct_s": direct_s,
        "in_run_s": _stats(in_run),
        "share": share,
        "in_run_share": statistics.median(in_run) / off_median,
        "target_share": TARGET_SHARE,
        "meets_target": share < TARGET_SHARE,
        "signing_on": signing_on and unsigned_calls == 0,
    }


# --------------------------------------------------------------------------------------------
# Output


def _time(st: dict[str, float], scale: float = 1.0, digits: int = 3) -> str:
    return (
        f"{st['median'] * scale:.{digits}f} "
        f"[{st['min'] * scale:.{digits}f}–{st['max'] * scale:.{digits}f}]"
    )


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def tables(r: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    job = f"Fed-PNE, M = {r['clients']:,}, T = {r['budget']:,}, seed {r['seed']}, on Kafka"
    wall = r["wall_s"]
    wall_rows = [
        [
            f"sign = {'true' if v == 'on' else 'false'}",
            _time(wall[v]),
            f"{wall[v]['median'] / wall['off']['median']:.3f}x",
            str(r["rounds"]),
            f"{r['messages']:,}",
            f"{r['bytes']:,}",
            _yes(r["identical"]),
        ]
        for v in ("off", "on")
    ]
    wall_caption = (
        f"Wall time of one run (every agent in this process, dev broker on loopback), median "
        f"[min–max] of {r['repeats']}, off and on interleaved after {r['warmups']} warm-up "
        f"run(s) of each. messages, bytes: the algorithm's (one broadcast per client and one "
        f"report per client per phase, payload sizes), as in bench_transports.py."
    )
    last, rep = r["last_signed_run"], r["replay"]
    off_ms = wall["off"]["median"] * 1e3
    cost_rows = []
    for op, label in (("sign", "sign"), ("verify", "verify")):
        n = rep[op]["calls"]
        cost_rows.append(
            [
                label,
                f"{last[op]['calls']:,}",
                f"{last[op]['bytes']:,}",
                _time(rep[op], 1e3, 2),
                f"{rep[op]['median'] / n * 1e6:.1f}" if n else "-",
                f"{last[op]['in_run_s'] * 1e3:.2f}",
                f"{rep[op]['median'] * 1e3 / off_ms:.3%}",
            ]
        )
    cost_rows.append(
        [
            "total",
            f"{last['sign']['calls'] + last['verify']['calls']:,}",
            f"{last['sign']['bytes'] + last['verify']['bytes']:,}",
            f"{r['direct_s'] * 1e3:.2f}",
            "",
            f"{r['in_run_s']['median'] * 1e3:.2f}",
            f"{r['share']:.3%}",
        ]
    )
    cost_caption = (
        f"The calls of the last signed run to fedxab.security.signing (sign: seal, "
        f"seal_for_every_client; verify: open_signed, which also decodes the inner envelope), "
        f"made again on the same arguments, median [min–max] of {r['repeats']}; in the run: the "
        f"same calls timed where they happened (total: median over the timed signed runs). "
        f"share: of the unsigned run's median wall time, {wall['off']['median']:.3f} s. wire "
        f"bytes: the signed messages."
    )
    kinds = sorted(set(last["sign"]["by_kind"]) | set(last["verify"]["by_kind"]))
    kind_rows = [
        [
            k,
            f"{last['sign']['by_kind'].get(k, 0):,}",
            f"{last['verify']['by_kind'].get(k, 0):,}",
            f"{last['sign']['bytes_by_kind'].get(k, 0):,}",
            f"{rep['sign']['by_kind_s'].get(k, 0) * 1e3:.2f}",
            f"{rep['verify']['by_kind_s'].get(k, 0) * 1e3:.2f}",
        ]
        for k in kinds
    ]
    kind_caption = (
        f"The calls of the last signed run by envelope kind; wire bytes of the signed messages; "
        f"sign and verify time: median of the replay, each kind in its own loop. The run's "
        f"messages up (reports): {r['messages_up']:,}; its rounds: {r['rounds']}."
    )
    return [
        (f"{job}: signing off and on", wall_caption, WALL_HEADERS, wall_rows),
        ("Signing and verifying every message of one run", cost_caption, COST_HEADERS, cost_rows),
        ("Signed and verified messages by kind", kind_caption, KIND_HEADERS, kind_rows),
    ]


WALL_HEADERS = [
    "[security]",
    "wall time (s)",
    "vs off",
    "rounds",
    "messages",
    "bytes",
    "results identical",
]
COST_HEADERS = [
    "operation",
    "calls",
    "wire bytes",
    "time (ms)",
    "per call (µs)",
    "in the run (ms)",
    "share of wall time",
]
KIND_HEADERS = ["envelope kind", "signed", "verified", "wire bytes", "sign (ms)", "verify (ms)"]


def verdict_lines(r: dict[str, Any]) -> list[str]:
    off = r["wall_s"]["off"]["median"]
    return [
        f"Signing and verifying every message: {r['direct_s'] * 1e3:.1f} ms per run = "
        f"{r['share']:.2%} of the unsigned run's {off:.3f} s (timed in the run: "
        f"{r['in_run_share']:.2%}); target < {r['target_share']:.0%}; meets target: "
        f"{'yes' if r['meets_target'] else 'no'}",
        f"Wall time on/off: {r['ratio']:.3f}x (medians; the spread of each is in the table)",
        f"Results identical with signing off and on: {_yes(r['identical'])}",
        f"Signing on in every signed run (each report signed and verified once, "
        f"{r['messages_up']:,} of each, no call failed) and off in every unsigned run "
        f"({r['unsigned_signing_calls']} calls): {_yes(r['signing_on'])}; replayed signatures "
        f"equal the published ones: {_yes(r['replay']['same_signatures'])}",
    ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=SPEED_CLIENTS, help="M (default %(default)s)")
    p.add_argument("--budget", type=int, default=SPEED_BUDGET, help="T (default %(default)s)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs each (default 3)")
    p.add_argument("--warmups", type=int, default=1, help="untimed runs each first (default 1)")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--json", type=Path, default=None, help="write the measurements here")
    args = p.parse_args(argv)
    if args.clients < 1 or args.budget < 1 or args.repeats < 1 or args.warmups < 0:
        p.error("--clients, --budget and --repeats must be >= 1, --warmups >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from fedxab.broker.devbroker import DevBroker

    t_all = time.perf_counter()
    with DevBroker() as dev:
        result = measure(dev.address, args.clients, args.budget, args.repeats, args.warmups)
    result["environment"] = env = environment()
    console = None if args.markdown else make_console()
    for title, caption, headers, rows in tables(result):
        if console is None:
            print(f"**{title}**\n\n{md_table(headers, rows)}\n\n{caption}\n")
        else:
            print_table(console, title, caption, headers, rows)
            print()
    for line in verdict_lines(result):
        print(f"- {line}")
    result["script_s"] = time.perf_counter() - t_all
    print(f"\n{env_line(env)} Whole script: {result['script_s']:.1f} s.")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
