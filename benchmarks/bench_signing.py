#!/usr/bin/env python
"""Message signing's cost on the Kafka Fed-PNE benchmark: unsigned, HMAC and Ed25519 (issues 8, 17).

The job is the Kafka speed job of ``bench_transports.py``: Fed-PNE (practical preset) on Garland
with value offsets, M = 100 clients, T = 10^4 evaluations each, seed 0, the server agent and one
client agent hosting every client in this process, on Kafka (a dev broker on loopback, started by
this script; every run under a fresh namespace, i.e. fresh topics). Measured side by side in one
run of this script:

1. **Wall time, unsigned, HMAC and Ed25519**: the job with ``[security] sign = false``, and with
   ``sign = true`` under each scheme (``keys_dir``: what ``fedxab keys generate`` writes, in a
   temporary directory: ``client-N.key`` files for HMAC, ``private/`` and ``public/`` key pairs
   for Ed25519; the scheme is detected from the directory), interleaved (off, hmac, ed25519,
   off, ...) after ``--warmups`` untimed runs of each (default 1), ``gc.collect()`` before each;
   median [min–max] of ``--repeats`` runs (default 3) and the ratio to unsigned of the medians.
   Every run's results (the run record without its wall time) must be identical: signing must
   not change them.
2. **Direct cost, per scheme**: during every run, each call the agents make to a
   :class:`fedxab.security.signing.Signer` (signing: ``seal``, ``seal_about``,
   ``seal_for_every_client``; verifying: ``open``) is counted and timed where it happens
   (``time.perf_counter`` around the call) and its arguments are kept. After the runs, each
   scheme's last signed run's calls are made again in a tight loop on the same arguments (the
   run's actual messages, keys and sessions), ``--repeats`` times: the median is the time spent
   signing and verifying every message of one run, without the run's scheduling noise (a call
   timed inside the run may include waiting for the GIL held by another thread). Its share of the
   unsigned run's median wall time is the acceptance figure (target: under 5%); the in-run
   timing and the wall-time ratio, noisier, are reported beside it. ``open`` also decodes the
   inner envelope, which an unsigned receiver does too, so the share overstates the cost a
   little. The replayed signatures must equal the ones the run published (both schemes are
   deterministic). A third table splits the calls, wire bytes and replay times by scheme and
   envelope kind: a broadcast carries M x 32 bytes of HMAC tags, or one 64-byte Ed25519
   signature.

Checks that signing was really on (and off): the unsigned runs make no signing call; in each
signed run every report is signed once and verified once (as many as the run's messages up), every
call succeeds, and the calls are the scheme's.

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
SCHEMES = ("hmac", "ed25519")
VARIANTS = ("off", *SCHEMES)
"""The job unsigned, then signed under each scheme."""
SIGN_METHODS = ("seal", "seal_about", "seal_for_every_client")
VERIFY_METHODS = ("open",)
"""The methods of :class:`fedxab.security.signing.Signer` that are timed."""


# --------------------------------------------------------------------------------------------
# Counting and timing the signing calls


@dataclasses.dataclass
class Call:
    """One call of a signing method during a run (``args[0]``: the signer)."""

    op: str  # "sign" or "verify"
    function: Callable[..., Any]  # the original method
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any  # None if it raised
    seconds: float
    ok: bool


class SigningProbe:
    """Replaces the signing methods of :class:`~fedxab.security.signing.Signer` (both schemes
    inherit them) by wrappers that time each call and keep it in :attr:`calls` (a call inside
    another timed one is not counted twice). Use as a context manager; the originals are back
    on exit."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._local = threading.local()
        self._patched: list[tuple[str, Any]] = []

    def __enter__(self) -> SigningProbe:
        from fedxab.security.signing import Signer

        for op, names in (("sign", SIGN_METHODS), ("verify", VERIFY_METHODS)):
            for name in names:
                original = vars(Signer)[name]
                setattr(Signer, name, self._wrap(op, original))
                self._patched.append((name, original))
        return self

    def __exit__(self, *exc: object) -> None:
        from fedxab.security.signing import Signer

        for name, original in reversed(self._patched):
            setattr(Signer, name, original)
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
        return Envelope.decode(call.args[1]).kind
    if not call.ok:
        return "refused"
    return call.result.envelope.kind


def _wire_bytes(call: Call) -> int:
    """Size of the signed message: what ``sign`` returned, what ``verify`` was given."""
    data = call.result if call.op == "sign" else call.args[1]
    return len(data) if isinstance(data, bytes | bytearray | memoryview) else 0


def _broadcast_sig_bytes(calls: list[Call]) -> int | None:
    """The signature bytes of the run's first signed broadcast."""
    from fedxab.broker.codec import unpackb

    for c in calls:
        if c.op == "sign" and c.ok and _kind(c) == "broadcast":
            return len(unpackb(c.result)["sig"])
    return None


def call_summary(calls: list[Call]) -> dict[str, Any]:
    """Counts, bytes, in-run time, envelope kinds and schemes of one run's calls."""
    out: dict[str, Any] = {
        "schemes": sorted({c.args[0].scheme for c in calls}),
        "broadcast_sig_bytes": _broadcast_sig_bytes(calls),
    }
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


def _keys(scheme: str, clients: int, directory: Path) -> Path:
    """What ``fedxab keys generate --scheme SCHEME`` writes, in ``directory``."""
    from fedxab.security.keypairs import generate_keypairs
    from fedxab.security.keys import generate_keys

    (generate_keypairs if scheme == "ed25519" else generate_keys)(clients, directory)
    return directory


def _scheme_result(
    scheme: str,
    runs: list[list[Call]],
    warmups: int,
    repeats: int,
    off_median: float,
    messages_up: int,
) -> dict[str, Any]:
    """One scheme's calls, replay and shares."""
    signed_runs = [call_summary(c) for c in runs]
    replayed = replay(runs[-1], repeats)
    direct_s = replayed["sign"]["median"] + replayed["verify"]["median"]
    in_run = [s["sign"]["in_run_s"] + s["verify"]["in_run_s"] for s in signed_runs[warmups:]]
    share = direct_s / off_median
    signing_on = all(
        s["schemes"] == [scheme]
        and s["sign"]["by_kind"].get("report") == messages_up
        and s["verify"]["by_kind"].get("report") == messages_up
        and s["sign"]["failed"] == s["verify"]["failed"] == 0
        for s in signed_runs
    )
    return {
        "signed_runs": signed_runs,
        "last_signed_run": signed_runs[-1],
        "replay": replayed,
        "direct_s": direct_s,
        "in_run_s": _stats(in_run),
        "share": share,
        "in_run_share": statistics.median(in_run) / off_median,
        "meets_target": share < TARGET_SHARE,
        "signing_on": signing_on,
    }


def measure(address: str, clients: int, budget: int, repeats: int, warmups: int) -> dict[str, Any]:
    """The job unsigned and under each scheme, interleaved; the signing calls of every run;
    the replay."""
    from fedxab.broker.kafka import KafkaBroker

    base = garland_config(clients, budget, SEED)
    with tempfile.TemporaryDirectory() as tmp, SigningProbe() as probe:
        configs = {"off": with_security(base, sign=False)}
        for scheme in SCHEMES:
            keys_dir = _keys(scheme, clients, Path(tmp) / scheme)
            configs[scheme] = with_security(base, sign=True, keys_dir=keys_dir)
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        calls: dict[str, list[list[Call]]] = {v: [] for v in VARIANTS}
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
            for variant in VARIANTS:
                one(variant)
        for _ in range(repeats):
            for variant in VARIANTS:
                times[variant].append(one(variant))
    reference = _without_time(records[0][1])
    identical = all(_without_time(r) == reference for _, r in records)
    comm = records[0][1].communication
    messages_up = comm["messages_up"]
    wall = {v: _stats(t) | {"times": t} for v, t in times.items()}
    off_median = wall["off"]["median"]
    schemes = {
        scheme: _scheme_result(scheme, calls[scheme], warmups, repeats, off_median, messages_up)
        | {"ratio": wall[scheme]["median"] / off_median}
        for scheme in SCHEMES
    }
    unsigned_calls = sum(len(c) for c in calls["off"])
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
        "identical": identical,
        "unsigned_signing_calls": unsigned_calls,
        "schemes": schemes,
        "target_share": TARGET_SHARE,
        "signing_on": unsigned_calls == 0 and all(s["signing_on"] for s in schemes.values()),
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


def _variant(v: str) -> str:
    return "sign = false" if v == "off" else f"sign = true, {v}"


def tables(r: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    job = f"Fed-PNE, M = {r['clients']:,}, T = {r['budget']:,}, seed {r['seed']}, on Kafka"
    wall = r["wall_s"]
    off_s = wall["off"]["median"]
    wall_rows = [
        [
            _variant(v),
            _time(wall[v]),
            f"{wall[v]['median'] / off_s:.3f}x",
            str(r["rounds"]),
            f"{r['messages']:,}",
            f"{r['bytes']:,}",
            _yes(r["identical"]),
        ]
        for v in VARIANTS
    ]
    wall_caption = (
        f"Wall time of one run (every agent in this process, dev broker on loopback), median "
        f"[min–max] of {r['repeats']}, unsigned, HMAC and Ed25519 interleaved after "
        f"{r['warmups']} warm-up run(s) of each. messages, bytes: the algorithm's (one broadcast "
        f"per client and one report per client per phase, payload sizes), as in "
        f"bench_transports.py."
    )
    cost_rows = []
    for scheme, s in r["schemes"].items():
        last, rep = s["last_signed_run"], s["replay"]
        for op in ("sign", "verify"):
            n = rep[op]["calls"]
            cost_rows.append(
                [
                    scheme,
                    op,
                    f"{last[op]['calls']:,}",
                    f"{last[op]['bytes']:,}",
                    _time(rep[op], 1e3, 2),
                    f"{rep[op]['median'] / n * 1e6:.1f}" if n else "-",
                    f"{last[op]['in_run_s'] * 1e3:.2f}",
                    f"{rep[op]['median'] / off_s:.3%}",
                ]
            )
        cost_rows.append(
            [
                scheme,
                "total",
                f"{last['sign']['calls'] + last['verify']['calls']:,}",
                f"{last['sign']['bytes'] + last['verify']['bytes']:,}",
                f"{s['direct_s'] * 1e3:.2f}",
                "",
                f"{s['in_run_s']['median'] * 1e3:.2f}",
                f"{s['share']:.3%}",
            ]
        )
    cost_caption = (
        f"The calls of each scheme's last signed run to fedxab.security.signing.Signer (sign: "
        f"seal, seal_about, seal_for_every_client; verify: open, which also decodes the inner "
        f"envelope), made again on the same arguments, median [min–max] of {r['repeats']}; in "
        f"the run: the same calls timed where they happened (total: median over the timed "
        f"signed runs). share: of the unsigned run's median wall time, {off_s:.3f} s. wire "
        f"bytes: the signed messages."
    )
    kind_rows = []
    for scheme, s in r["schemes"].items():
        last, rep = s["last_signed_run"], s["replay"]
        for k in sorted(set(last["sign"]["by_kind"]) | set(last["verify"]["by_kind"])):
            kind_rows.append(
                [
                    scheme,
                    k,
                    f"{last['sign']['by_kind'].get(k, 0):,}",
                    f"{last['verify']['by_kind'].get(k, 0):,}",
                    f"{last['sign']['bytes_by_kind'].get(k, 0):,}",
                    f"{rep['sign']['by_kind_s'].get(k, 0) * 1e3:.2f}",
                    f"{rep['verify']['by_kind_s'].get(k, 0) * 1e3:.2f}",
                ]
            )
    kind_caption = (
        f"The calls of each scheme's last signed run by envelope kind; wire bytes of the signed "
        f"messages; sign and verify time: median of the replay, each kind in its own loop. The "
        f"run's messages up (reports): {r['messages_up']:,}; its rounds: {r['rounds']}."
    )
    return [
        (f"{job}: unsigned, HMAC and Ed25519", wall_caption, WALL_HEADERS, wall_rows),
        ("Signing and verifying every message of one run", cost_caption, COST_HEADERS, cost_rows),
        ("Signed and verified messages by kind", kind_caption, KIND_HEADERS, kind_rows),
    ]


WALL_HEADERS = [
    "[security]",
    "wall time (s)",
    "vs unsigned",
    "rounds",
    "messages",
    "bytes",
    "results identical",
]
COST_HEADERS = [
    "scheme",
    "operation",
    "calls",
    "wire bytes",
    "time (ms)",
    "per call (µs)",
    "in the run (ms)",
    "share of wall time",
]
KIND_HEADERS = [
    "scheme",
    "envelope kind",
    "signed",
    "verified",
    "wire bytes",
    "sign (ms)",
    "verify (ms)",
]


def verdict_lines(r: dict[str, Any]) -> list[str]:
    off = r["wall_s"]["off"]["median"]
    lines = []
    for scheme, s in r["schemes"].items():
        lines.append(
            f"{scheme}: signing and verifying every message: {s['direct_s'] * 1e3:.1f} ms per "
            f"run = {s['share']:.2%} of the unsigned run's {off:.3f} s (timed in the run: "
            f"{s['in_run_share']:.2%}); target < {r['target_share']:.0%}; meets target: "
            f"{'yes' if s['meets_target'] else 'no'}; wall time vs unsigned: {s['ratio']:.3f}x; "
            f"a broadcast's signatures: {s['last_signed_run']['broadcast_sig_bytes']} bytes; "
            f"replayed signatures equal the published ones: "
            f"{_yes(s['replay']['same_signatures'])}"
        )
    lines += [
        f"Results identical unsigned, with HMAC and with Ed25519: {_yes(r['identical'])}",
        f"Signing on in every signed run, under its scheme (each report signed and verified "
        f"once, {r['messages_up']:,} of each, no call failed) and off in every unsigned run "
        f"({r['unsigned_signing_calls']} calls): {_yes(r['signing_on'])}",
    ]
    return lines


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
