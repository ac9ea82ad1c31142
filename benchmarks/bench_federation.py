#!/usr/bin/env python
"""Benchmark: the in-process federation runner with Fed-PNE (and PF-PNE) on Garland (issue 3).

Three measurements of ``fedxab.agents.federation.Federation(config, seed).run()`` on Garland with
uniform noise U(-0.1, 0.1) and the practical preset (``nu = 1``, ``rho = 0.5``, ``c = 0.1``,
``c1 = 1``, ``delta = 1/M``, binary partition). Speed and communication run Fed-PNE with value
offsets (client m maximises ``f_m = f + xi_m``, ``xi_m ~ N(0, 1)``); the scale measurement runs
that job and, by default, also PF-PNE with input shifts (``f_m(x) = f(clip(x - s_m))``,
``s_m ~ N(0, 0.05^2)``, regret measured on the average of the M clients):

1. **Speed**: M = 100 clients, T = 10^4 evaluations each (10^6 evaluations), the same job (seed 0)
   run 3 times: the time of ``Federation(...)`` (server, M clients, objectives) and of ``.run()``
   separately, and of both together; median and [min–max]; evaluations per second. Target of the
   issue: under 2 s.
2. **Scale**: M = 10,000 clients, T = 1,000 (10^7 evaluations), one run per job (Fed-PNE with
   offsets, PF-PNE with shifts; ``--scale-algorithms``), each in its own fresh process: time,
   peak resident memory (``ru_maxrss``, measured the way ``bench_hct_vs_pyxab.py`` does) and the
   evaluations of every client (each must use exactly T).
3. **Communication**: rounds (= phases) and bytes up / down of one run (seed 0) for
   M in {10, 100, 1000} at T = 10^4, and for T in {10^3, 10^4, 10^5} at M = 100, with the
   computed columns bytes / M, bytes / (M rounds) and rounds / ln T, and the spec's bound on the
   number of phases, ``P <= log(M T nu^2 / (k c^2)) / log(rho^-2)`` (spec-fedpne-pfpne §9), so
   that the O(M log T) growth can be read off the table.

Usage (from the repository root)::

    python benchmarks/bench_federation.py                    # the measurements of issue 3
    python benchmarks/bench_federation.py --markdown         # tables as Markdown (for the README)
    python benchmarks/bench_federation.py --scale-algorithms pfpne   # only PF-PNE at scale
    python benchmarks/bench_federation.py --quick --json out.json   # smoke run (seconds)

The script prints measurements and target verdicts; it asserts nothing about speed.
See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from _common import (  # noqa: E402
    GARLAND_F_STAR,
    garland,
    kib_to_mb,
    peak_rss_kib,
    run_in_fresh_process,
)

# The benchmarked job (Fed-PNE's Garland experiment, spec-fedpne-pfpne §7).
ALGORITHM = "fedpne"
PRESET = "practical"
NU = 1.0
RHO = 0.5
K = 2
C_PRACTICAL = 0.1
NOISE_HALF_WIDTH = 0.1
OFFSET_SCALE = 1.0
SHIFT_SCALE = 0.05  # sd of PF-PNE's input shifts s_m (fedxab's default: 0.05 x the range [0, 1])
HETEROGENEITY_SCALE = {"offset": OFFSET_SCALE, "shift": SHIFT_SCALE}
SEED = 0

# The jobs of the scale measurement: algorithm -> its heterogeneity (same preset, nu and rho).
# PF-PNE with input shifts has the clients' average as its global objective (spec §8.2).
SCALE_JOBS = {"fedpne": "offset", "pfpne": "shift"}
ALGORITHM_NAMES = {"fedpne": "Fed-PNE", "pfpne": "PF-PNE"}

# Targets and sizes of issue 3.
SPEED_CLIENTS = 100
SPEED_BUDGET = 10_000
SPEED_TARGET_S = 2.0
DEFAULT_REPEATS = 3
SCALE_CLIENTS = 10_000
SCALE_BUDGET = 1_000
COMM_CLIENTS = [10, 100, 1000]
COMM_CLIENTS_BUDGET = 10_000
COMM_BUDGETS = [1_000, 10_000, 100_000]
COMM_BUDGETS_CLIENTS = 100
# Linear growth in M: the fitted exponent of total bytes against M must fall in this range.
COMM_SLOPE_RANGE = (0.8, 1.2)

# --quick: the same measurements, small enough for a test (a few seconds in all).
QUICK = {
    "speed_clients": 10,
    "speed_budget": 1_000,
    "repeats": 2,
    "scale_clients": 200,
    "scale_budget": 200,
    "comm_clients": [5, 10, 20],
    "comm_clients_budget": 1_000,
    "comm_budgets": [500, 1_000, 2_000],
    "comm_budgets_clients": 10,
}


# --------------------------------------------------------------------------------------------
# The job


def garland_config(
    clients: int,
    budget: int,
    seed: int = SEED,
    algorithm: str = ALGORITHM,
    heterogeneity: str = "offset",
    **params: Any,
) -> Any:
    """The validated config of one federated run on Garland (value offsets by default).

    Offsets have sd ``OFFSET_SCALE``, input shifts (``heterogeneity="shift"``) ``SHIFT_SCALE``.

    ``params`` are further ``[algorithm]`` parameters (e.g. DP-Fed-PNE's ``epsilon``).
    """
    from fedxab.config import config_from_dict

    return config_from_dict(
        {
            "run": {"seed": seed, "repeats": 1, "budget": budget},
            "objective": {
                "name": "garland",
                "noise": {"name": "uniform", "half_width": NOISE_HALF_WIDTH},
            },
            "algorithm": {"name": algorithm, "preset": PRESET, "nu": NU, "rho": RHO, **params},
            "federation": {"clients": clients, "heterogeneity": heterogeneity}
            | (
                {"heterogeneity_scale": HETEROGENEITY_SCALE[heterogeneity]}
                if heterogeneity in HETEROGENEITY_SCALE
                else {}
            ),
        }
    )


def check_objective() -> None:
    """fedxab's Garland is the benchmarks' shared Garland (``_common``), with the same f*."""
    from fedxab.objectives.registry import make_objective

    obj = make_objective("garland")
    xs = np.linspace(0.0, 1.0, 1001).reshape(-1, 1)
    if not np.allclose(obj(xs), garland(xs), rtol=0, atol=1e-14):
        raise SystemExit("fedxab's Garland differs from the benchmarks' Garland (_common)")
    if abs(float(obj.optimum_value) - GARLAND_F_STAR) > 1e-12:
        raise SystemExit(f"fedxab's Garland f* = {obj.optimum_value}, expected {GARLAND_F_STAR}")


def warm_up() -> None:
    """One tiny run, untimed, so that lazy imports and first-call costs hit no measurement."""
    from fedxab.agents.federation import Federation

    Federation(garland_config(2, 100), SEED).run()


def _record_fields(record: Any) -> dict[str, Any]:
    comm = record.communication
    return {
        "evaluations": int(record.evaluations),
        "rounds": int(comm["rounds"]),
        "bytes_up": int(comm["bytes_up"]),
        "bytes_down": int(comm["bytes_down"]),
        "messages_up": int(comm["messages_up"]),
        "messages_down": int(comm["messages_down"]),
        "cumulative_regret": record.final_cumulative_regret,
        "simple_regret": record.simple_regret,
    }


def timed_run(clients: int, budget: int, seed: int = SEED) -> dict[str, Any]:
    """One run, timed in parts: config (not counted), construction, ``run()``, both together."""
    from fedxab.agents.federation import Federation

    t0 = time.perf_counter()
    config = garland_config(clients, budget, seed)
    config_s = time.perf_counter() - t0
    gc.collect()  # leave no garbage of the previous run to be collected during this one
    t1 = time.perf_counter()
    fed = Federation(config, seed)
    t2 = time.perf_counter()
    record = fed.run()
    t3 = time.perf_counter()
    return {
        "clients": clients,
        "budget": budget,
        "seed": seed,
        "config_s": config_s,
        "construct_s": t2 - t1,
        "run_s": t3 - t2,
        "total_s": t3 - t1,
        "loop_s": float(record.wall_time_s),
        **_record_fields(record),
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


def measure_speed(
    clients: int, budget: int, repeats: int, on_step: Callable[[], None] | None = None
) -> dict[str, Any]:
    """``repeats`` identical runs (seed 0) of M = ``clients``, T = ``budget``; their summary."""
    runs = []
    for _ in range(repeats):
        runs.append(timed_run(clients, budget))
        if on_step is not None:
            on_step()
    total = _stats([r["total_s"] for r in runs])
    return {
        "clients": clients,
        "budget": budget,
        "evaluations": clients * budget,
        "repeats": repeats,
        "runs": runs,
        "construct_s": _stats([r["construct_s"] for r in runs]),
        "run_s": _stats([r["run_s"] for r in runs]),
        "total_s": total,
        "evaluations_per_s": clients * budget / total["median"],
        "rounds": runs[0]["rounds"],
        "identical_results": all(
            (r["cumulative_regret"], r["simple_regret"], r["bytes_up"])
            == (runs[0]["cumulative_regret"], runs[0]["simple_regret"], runs[0]["bytes_up"])
            for r in runs
        ),
    }


# --------------------------------------------------------------------------------------------
# Scale probe (runs in a fresh subprocess)


def scale_probe(
    clients: int,
    budget: int,
    seed: int = SEED,
    algorithm: str = ALGORITHM,
    heterogeneity: str = "offset",
) -> dict[str, Any]:
    """One run of ``algorithm`` with M = ``clients``, T = ``budget`` in this process: times,
    peak RSS and the fewest and most evaluations made by a client.

    Meant for a fresh process (see :func:`measure_scale`). fedxab is imported and the config
    built before the baseline is read, so that "before construction" is the interpreter, numpy
    and fedxab; the peak after construction adds the server, the M clients and their
    objectives; the final peak adds the run.
    """
    from fedxab.agents.federation import Federation

    config = garland_config(clients, budget, seed, algorithm, heterogeneity)
    gc.collect()
    rss_before = peak_rss_kib()
    t1 = time.perf_counter()
    fed = Federation(config, seed)
    t2 = time.perf_counter()
    rss_constructed = peak_rss_kib()
    record = fed.run()
    t3 = time.perf_counter()
    peak = peak_rss_kib()
    used = fed.used
    return {
        "algorithm": algorithm,
        "heterogeneity": heterogeneity,
        "clients": clients,
        "budget": budget,
        "seed": seed,
        "construct_s": t2 - t1,
        "run_s": t3 - t2,
        "total_s": t3 - t1,
        "loop_s": float(record.wall_time_s),
        "peak_rss_before_construction_kib": int(rss_before),
        "peak_rss_after_construction_kib": int(rss_constructed),
        "peak_rss_kib": int(peak),
        "f_star": float(fed.family.global_objective.optimum_value),
        "client_evaluations_min": int(used.min()),
        "client_evaluations_max": int(used.max()),
        **_record_fields(record),
    }


def measure_scale(
    clients: int,
    budget: int,
    seed: int = SEED,
    algorithm: str = ALGORITHM,
    heterogeneity: str = "offset",
) -> dict[str, Any]:
    """:func:`scale_probe` in a fresh process; its measurements, with RSS also in MB."""
    res = run_in_fresh_process(
        "bench_federation", "scale_probe", clients, budget, seed, algorithm, heterogeneity
    )
    res["evaluations_per_s"] = res["evaluations"] / res["total_s"]
    for key in ("before_construction", "after_construction"):
        res[f"peak_rss_{key}_mb"] = kib_to_mb(res[f"peak_rss_{key}_kib"])
    res["peak_rss_mb"] = kib_to_mb(res["peak_rss_kib"])
    return res


# --------------------------------------------------------------------------------------------
# Communication


def rounds_bound(clients: int, budget: int) -> float:
    """Fed-PNE's bound on the number of phases, ``log(M T nu^2 / (k c^2)) / log(rho^-2)``."""
    return math.log(clients * budget * NU**2 / (K * C_PRACTICAL**2)) / math.log(RHO**-2)


def communication_row(clients: int, budget: int, seed: int = SEED) -> dict[str, Any]:
    """One run's rounds and bytes, with the computed scaling columns."""
    from fedxab.agents.federation import Federation

    fed = Federation(garland_config(clients, budget, seed), seed)
    rec = _record_fields(fed.run())
    total = rec["bytes_up"] + rec["bytes_down"]
    rounds = rec["rounds"]
    return {
        "clients": clients,
        "budget": budget,
        "seed": seed,
        **rec,
        "bytes_total": total,
        "bytes_per_client": total / clients,
        "bytes_per_client_round": total / (clients * rounds) if rounds else float("nan"),
        "rounds_per_ln_budget": rounds / math.log(budget),
        "rounds_bound": rounds_bound(clients, budget),
        "depths": [p.depth for p in fed.phases],
    }


def _loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y against log x (the exponent a of y ~ x^a)."""
    if len(xs) < 2:
        return float("nan")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def communication_fits(
    by_clients: list[dict[str, Any]], by_budget: list[dict[str, Any]]
) -> dict[str, Any]:
    rows = by_clients + by_budget
    return {
        "bytes_vs_clients_exponent": _loglog_slope(
            [r["clients"] for r in by_clients], [r["bytes_total"] for r in by_clients]
        ),
        "rounds_vs_clients_exponent": _loglog_slope(
            [r["clients"] for r in by_clients], [r["rounds"] for r in by_clients]
        ),
        "rounds_per_ln_budget": [r["rounds_per_ln_budget"] for r in by_budget],
        "bytes_per_client_round_range": [
            min(r["bytes_per_client_round"] for r in rows),
            max(r["bytes_per_client_round"] for r in rows),
        ],
        "rounds_within_bound": all(r["rounds"] <= r["rounds_bound"] for r in rows),
    }


# --------------------------------------------------------------------------------------------
# Verdicts


def verdicts(
    speed: dict[str, Any], scale: list[dict[str, Any]] | None, fits: dict[str, Any] | None
) -> dict[str, Any]:
    med = speed["total_s"]["median"]
    out: dict[str, Any] = {
        "speed": {
            "clients": speed["clients"],
            "budget": speed["budget"],
            "target_clients": SPEED_CLIENTS,
            "target_budget": SPEED_BUDGET,
            "target": f"median wall time (construction + run) < {SPEED_TARGET_S:g} s",
            "median_total_s": med,
            "evaluations_per_s": speed["evaluations_per_s"],
            "meets_target": med < SPEED_TARGET_S,
        }
    }
    if scale is not None:
        out["scale"] = [
            {
                "algorithm": sc["algorithm"],
                "heterogeneity": sc["heterogeneity"],
                "clients": sc["clients"],
                "budget": sc["budget"],
                "target_clients": SCALE_CLIENTS,
                "target_budget": SCALE_BUDGET,
                "target": "the run completes with every client using exactly its budget T",
                "total_s": sc["total_s"],
                "peak_rss_mb": sc["peak_rss_mb"],
                "meets_target": sc["evaluations"] == sc["clients"] * sc["budget"]
                and sc["client_evaluations_min"] == sc["client_evaluations_max"] == sc["budget"],
            }
            for sc in scale
        ]
    if fits is not None:
        lo, hi = COMM_SLOPE_RANGE
        a = fits["bytes_vs_clients_exponent"]
        out["communication"] = {
            "target": (
                f"O(M log T): total bytes ~ M^a with {lo:g} <= a <= {hi:g} over the M sweep, "
                "and rounds <= log(M T nu^2/(k c^2))/log(rho^-2) in every row"
            ),
            "bytes_vs_clients_exponent": a,
            "rounds_per_ln_budget": fits["rounds_per_ln_budget"],
            "rounds_within_bound": fits["rounds_within_bound"],
            "meets_target": bool(lo <= a <= hi and fits["rounds_within_bound"]),
        }
    return out


# --------------------------------------------------------------------------------------------
# Output


def fmt_s(v: float) -> str:
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def fmt_time(st: dict[str, float]) -> str:
    return f"{fmt_s(st['median'])} [{fmt_s(st['min'])}–{fmt_s(st['max'])}]"


def fmt_pow10(n: int) -> str:
    """``10^k`` for a power of ten, else the integer with thousands separators."""
    e = round(math.log10(n)) if n > 0 else 0
    return f"10^{e}" if 10**e == n else f"{n:,}"


def fmt_rate(v: float) -> str:
    return f"{v / 1e6:.2f} M" if v >= 1e6 else f"{v / 1e3:.1f} k"


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


SPEED_HEADERS = [
    "clients M",
    "budget T",
    "evaluations",
    "runs",
    "construction (s)",
    "run() (s)",
    "total (s)",
    "evaluations/s",
    "phases",
]
SPEED_CAPTION = (
    "The same job (seed 0) run back to back in one process after an untimed warm-up; "
    "median [min–max] over the runs. construction: Federation(config, seed) (server, M "
    "clients, client objectives); run(): the whole federation to its end (every message "
    "encoded and decoded with msgpack, regret and communication recorded); total: both, "
    "timed together. evaluations/s: M·T / median total."
)
SCALE_HEADERS = [
    "algorithm",
    "heterogeneity",
    "clients M",
    "budget T",
    "evaluations",
    "construction (s)",
    "run() (s)",
    "total (s)",
    "evaluations/s",
    "peak RSS (MB)",
    "after construction (MB)",
    "before construction (MB)",
    "phases",
]
SCALE_CAPTION = (
    "One run (seed 0) per row, each in its own fresh process. offsets: Fed-PNE's setting, "
    f"f_m = f + xi_m, xi_m ~ N(0, {OFFSET_SCALE:g}²), regret on f; shifts: PF-PNE's, "
    f"f_m(x) = f(clip(x − s_m)), s_m ~ N(0, {SHIFT_SCALE:g}²), regret on the average of the M "
    "clients. Peak RSS: ru_maxrss of the whole process (interpreter, numpy, fedxab, federation "
    "and run); before construction: the same peak once fedxab is imported and the config built; "
    "after construction: once the server, the M clients and their objectives exist. "
    "MB = 10^6 bytes."
)
HETEROGENEITY_NAMES = {"offset": "offsets", "shift": "shifts"}
COMM_HEADERS = [
    "clients M",
    "budget T",
    "rounds",
    "bound",
    "rounds / ln T",
    "messages",
    "bytes up",
    "bytes down",
    "bytes total",
    "bytes / M",
    "bytes / (M·rounds)",
]
COMM_CAPTION = (
    "One run (seed 0) per row. rounds: phases = communication rounds (one message down and one "
    "up per client per round); bound: Fed-PNE's log(M T nu²/(k c²)) / log(rho⁻²) with nu = 1, "
    "k = 2, c = 0.1, rho = 0.5; messages: up + down; bytes: msgpack-encoded size of every "
    "to_wire() (broadcast counted once per client). bytes / M: total per client; "
    "bytes / (M·rounds): per client and round."
)


def speed_rows(speed: dict[str, Any]) -> list[list[str]]:
    return [
        [
            f"{speed['clients']:,}",
            fmt_pow10(speed["budget"]),
            fmt_pow10(speed["evaluations"]),
            str(speed["repeats"]),
            fmt_time(speed["construct_s"]),
            fmt_time(speed["run_s"]),
            fmt_time(speed["total_s"]),
            fmt_rate(speed["evaluations_per_s"]),
            str(speed["rounds"]),
        ]
    ]


def scale_rows(scale: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            ALGORITHM_NAMES[sc["algorithm"]],
            HETEROGENEITY_NAMES[sc["heterogeneity"]],
            f"{sc['clients']:,}",
            fmt_pow10(sc["budget"]),
            fmt_pow10(sc["evaluations"]),
            fmt_s(sc["construct_s"]),
            fmt_s(sc["run_s"]),
            fmt_s(sc["total_s"]),
            fmt_rate(sc["evaluations_per_s"]),
            f"{sc['peak_rss_mb']:.1f}",
            f"{sc['peak_rss_after_construction_mb']:.1f}",
            f"{sc['peak_rss_before_construction_mb']:.1f}",
            str(sc["rounds"]),
        ]
        for sc in scale
    ]


def comm_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            f"{r['clients']:,}",
            fmt_pow10(r["budget"]),
            str(r["rounds"]),
            f"{r['rounds_bound']:.1f}",
            f"{r['rounds_per_ln_budget']:.3f}",
            f"{r['messages_up'] + r['messages_down']:,}",
            f"{r['bytes_up']:,}",
            f"{r['bytes_down']:,}",
            f"{r['bytes_total']:,}",
            f"{r['bytes_per_client']:,.0f}",
            f"{r['bytes_per_client_round']:.0f}",
        ]
        for r in rows
    ]


def _size_note(v: dict[str, Any]) -> str:
    """Empty at the issue's size, else a note saying where the target is stated."""
    tc, tb = v["target_clients"], v["target_budget"]
    if (v["clients"], v["budget"]) == (tc, tb):
        return ""
    return (
        f" (measured at M = {v['clients']:,}, T = {fmt_pow10(v['budget'])}; the target is "
        f"stated at M = {tc:,}, T = {fmt_pow10(tb)})"
    )


def verdict_lines(v: dict[str, Any]) -> list[str]:
    sp = v["speed"]
    lines = [
        f"Speed: Fed-PNE, M = {sp['clients']:,}, T = {fmt_pow10(sp['budget'])}: median "
        f"{fmt_s(sp['median_total_s'])} s ({fmt_rate(sp['evaluations_per_s'])} evaluations/s); "
        f"target < {SPEED_TARGET_S:g} s{_size_note(sp)}; meets target: {yes(sp['meets_target'])}"
    ]
    for sc in v.get("scale", []):
        lines.append(
            f"Scale: {ALGORITHM_NAMES[sc['algorithm']]} "
            f"({HETEROGENEITY_NAMES[sc['heterogeneity']]}), M = {sc['clients']:,}, "
            f"T = {fmt_pow10(sc['budget'])} ran to its end in {fmt_s(sc['total_s'])} s, peak RSS "
            f"{sc['peak_rss_mb']:.1f} MB; target: must run, every client using exactly T "
            f"evaluations{_size_note(sc)}; meets target: {yes(sc['meets_target'])}"
        )
    if "communication" in v:
        cm = v["communication"]
        per_ln = ", ".join(f"{x:.3f}" for x in cm["rounds_per_ln_budget"])
        lo, hi = COMM_SLOPE_RANGE
        lines.append(
            f"Communication: total bytes ~ M^{cm['bytes_vs_clients_exponent']:.2f} over the M "
            f"sweep; rounds / ln T = {per_ln} over the T sweep; rounds within the spec's bound "
            f"in every row: {yes(cm['rounds_within_bound'])}; target O(M log T) (exponent in "
            f"[{lo:g}, {hi:g}], rounds within the bound); meets target: {yes(cm['meets_target'])}"
        )
    return lines


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": np.__version__,
        "msgpack": _version("msgpack"),
        "fedxab": _version("fedxab"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def env_line(env: dict[str, Any]) -> str:
    return (
        f"Python {env['python']}, numpy {env['numpy']}, msgpack {env['msgpack']}, fedxab "
        f"{env['fedxab']}; {env['platform']}, {env['cpu_count']} CPUs."
    )


HETEROGENEITY_TEXT = {
    "offset": f"offset, xi_m ~ N(0, {OFFSET_SCALE:g}^2)",
    "shift": f"shift, s_m ~ N(0, {SHIFT_SCALE:g}^2), regret on the average of the M clients",
}


def parameters(scale_algorithms: list[str] | None = None) -> dict[str, Any]:
    """The settings: ``algorithm`` and ``heterogeneity`` are those of the speed and
    communication runs; ``scale_jobs`` those of the scale runs (the rest is shared)."""
    return {
        "algorithm": ALGORITHM,
        "preset": PRESET,
        "nu": NU,
        "rho": RHO,
        "k": K,
        "c": C_PRACTICAL,
        "c1": 1.0,
        "delta": "1/M",
        "objective": "garland",
        "f_star": GARLAND_F_STAR,
        "heterogeneity": HETEROGENEITY_TEXT["offset"],
        "scale_jobs": [
            {"algorithm": a, "heterogeneity": HETEROGENEITY_TEXT[SCALE_JOBS[a]]}
            for a in (list(SCALE_JOBS) if scale_algorithms is None else scale_algorithms)
        ],
        "noise": f"uniform U(-{NOISE_HALF_WIDTH:g}, {NOISE_HALF_WIDTH:g})",
        "seed": SEED,
        "runner": "fedxab.agents.federation.Federation (in-process, msgpack wire codec)",
    }


def params_line(offsets: bool = True, shifts: bool = False) -> str:
    """The settings in one line; ``shifts`` adds the PF-PNE job of the scale measurement."""
    clients = f"client offsets xi_m ~ N(0, {OFFSET_SCALE:g})" if offsets else "no client offsets"
    pfpne = (
        f" Many clients, PF-PNE: the same preset, input shifts s_m ~ N(0, {SHIFT_SCALE:g}²), "
        "regret on the average of the M clients."
        if shifts
        else ""
    )
    return (
        f"Fed-PNE (practical preset: nu = {NU:g}, rho = {RHO:g}, c = {C_PRACTICAL:g}, c1 = 1, "
        f"delta = 1/M, k = {K}) on Garland, f* = {GARLAND_F_STAR:.10f}, {clients}, "
        f"noise U(−{NOISE_HALF_WIDTH:g}, {NOISE_HALF_WIDTH:g}); in-process runner.{pfpne}"
    )


def make_console() -> Any:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # piped or captured: do not squeeze the tables into 80 columns
        console = Console(width=max(console.width, 170))
    return console


def print_table(
    console: Any, title: str, caption: str, headers: list[str], rows: list[list[str]]
) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, caption=Text(caption), caption_justify="left")
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*(Text(cell) for cell in r))
    console.print(table)


def make_progress() -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        refresh_per_second=4,
        transient=True,
    )


def tables(
    speed: dict[str, Any],
    scale: list[dict[str, Any]] | None,
    comm: dict[str, Any] | None,
) -> list[tuple[str, str, list[str], list[list[str]]]]:
    out = [
        (
            "Fed-PNE in process: wall time",
            SPEED_CAPTION,
            SPEED_HEADERS,
            speed_rows(speed),
        )
    ]
    if scale is not None:
        out.append(
            ("Many clients: time and peak memory", SCALE_CAPTION, SCALE_HEADERS, scale_rows(scale))
        )
    if comm is not None:
        out.append(
            (
                f"Communication against M (T = {fmt_pow10(comm['clients_budget'])})",
                COMM_CAPTION,
                COMM_HEADERS,
                comm_rows(comm["by_clients"]),
            )
        )
        out.append(
            (
                f"Communication against T (M = {comm['budgets_clients']:,})",
                COMM_CAPTION,
                COMM_HEADERS,
                comm_rows(comm["by_budget"]),
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark the in-process federation runner (Fed-PNE on Garland, and PF-PNE "
        "in the scale runs; issue 3).",
        epilog="Run from the repository root with the project's virtualenv.",
    )
    p.add_argument(
        "--speed-clients",
        type=int,
        default=None,
        help=f"M of the timed job (default: {SPEED_CLIENTS})",
    )
    p.add_argument(
        "--speed-budget",
        type=int,
        default=None,
        help=f"T of the timed job (default: {SPEED_BUDGET})",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"runs of the timed job (default: {DEFAULT_REPEATS})",
    )
    p.add_argument(
        "--scale-clients",
        type=int,
        default=None,
        help=f"M of the fresh-process scale runs, 0 to skip them (default: {SCALE_CLIENTS})",
    )
    p.add_argument(
        "--scale-budget",
        type=int,
        default=None,
        help=f"T of the scale runs (default: {SCALE_BUDGET})",
    )
    p.add_argument(
        "--scale-algorithms",
        nargs="+",
        choices=list(SCALE_JOBS),
        default=list(SCALE_JOBS),
        help="the scale jobs, each in its own fresh process: fedpne (value offsets), pfpne "
        f"(input shifts) (default: {' '.join(SCALE_JOBS)})",
    )
    p.add_argument(
        "--comm-clients",
        type=int,
        nargs="*",
        default=None,
        help="numbers of clients M of the communication sweep over M; none skips both sweeps "
        f"(default: {' '.join(map(str, COMM_CLIENTS))})",
    )
    p.add_argument(
        "--comm-clients-budget",
        type=int,
        default=None,
        help=f"T of the sweep over M (default: {COMM_CLIENTS_BUDGET})",
    )
    p.add_argument(
        "--comm-budgets",
        type=int,
        nargs="+",
        default=None,
        help=f"budgets T of the sweep over T (default: {' '.join(map(str, COMM_BUDGETS))})",
    )
    p.add_argument(
        "--comm-budgets-clients",
        type=int,
        default=None,
        help=f"M of the sweep over T (default: {COMM_BUDGETS_CLIENTS})",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: M = 10, T = 1000 (2 runs); scale M = 200, T = 200 (each job); "
        "communication M in {5, 10, 20} at T = 1000 and T in {500, 1000, 2000} at M = 10 "
        "(explicit flags still win)",
    )
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="write the raw measurements to PATH"
    )
    args = p.parse_args(argv)
    defaults = {
        "speed_clients": SPEED_CLIENTS,
        "speed_budget": SPEED_BUDGET,
        "repeats": DEFAULT_REPEATS,
        "scale_clients": SCALE_CLIENTS,
        "scale_budget": SCALE_BUDGET,
        "comm_clients": COMM_CLIENTS,
        "comm_clients_budget": COMM_CLIENTS_BUDGET,
        "comm_budgets": COMM_BUDGETS,
        "comm_budgets_clients": COMM_BUDGETS_CLIENTS,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, QUICK[key] if args.quick else value)
    for key in ("speed_clients", "speed_budget", "repeats", "scale_budget"):
        if getattr(args, key) < 1:
            p.error(f"--{key.replace('_', '-')} must be >= 1, got {getattr(args, key)}")
    if args.scale_clients < 0:
        p.error(f"--scale-clients must be >= 0 (0 skips the scale run), got {args.scale_clients}")
    if args.comm_clients_budget < 2 or any(b < 2 for b in args.comm_budgets):
        p.error("communication budgets must be >= 2 (the table divides by ln T)")
    if any(m < 1 for m in args.comm_clients) or args.comm_budgets_clients < 1:
        p.error("communication client counts must be >= 1")
    args.scale_algorithms = list(dict.fromkeys(args.scale_algorithms))
    args.comm_clients = sorted(set(args.comm_clients))
    args.comm_budgets = sorted(set(args.comm_budgets))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_objective()
    warm_up()

    scale: list[dict[str, Any]] | None = None
    comm: dict[str, Any] | None = None
    do_comm = bool(args.comm_clients)
    steps = args.repeats + (len(args.scale_algorithms) if args.scale_clients else 0)
    if do_comm:
        steps += len(args.comm_clients) + len(args.comm_budgets)
    progress = make_progress()
    with progress:
        task = progress.add_task("measurements", total=steps)

        def step(description: str | None = None) -> None:
            progress.advance(task)
            if description is not None:
                progress.update(task, description=description)

        progress.update(
            task,
            description=f"speed: M = {args.speed_clients:,}, T = {args.speed_budget:,}",
        )
        speed = measure_speed(args.speed_clients, args.speed_budget, args.repeats, on_step=step)
        if args.scale_clients:
            scale = []
            for algorithm in args.scale_algorithms:
                progress.update(
                    task,
                    description=f"scale: {ALGORITHM_NAMES[algorithm]}, M = "
                    f"{args.scale_clients:,}, T = {args.scale_budget:,} (fresh process)",
                )
                scale.append(
                    measure_scale(
                        args.scale_clients,
                        args.scale_budget,
                        algorithm=algorithm,
                        heterogeneity=SCALE_JOBS[algorithm],
                    )
                )
                step()
        if do_comm:
            by_clients, by_budget = [], []
            for m in args.comm_clients:
                progress.update(task, description=f"communication: M = {m:,}")
                by_clients.append(communication_row(m, args.comm_clients_budget))
                step()
            for t in args.comm_budgets:
                progress.update(task, description=f"communication: T = {t:,}")
                by_budget.append(communication_row(args.comm_budgets_clients, t))
                step()
            comm = {
                "clients_budget": args.comm_clients_budget,
                "budgets_clients": args.comm_budgets_clients,
                "by_clients": by_clients,
                "by_budget": by_budget,
                "fits": communication_fits(by_clients, by_budget),
            }

    v = verdicts(speed, scale, None if comm is None else comm["fits"])
    env = environment()
    all_tables = tables(speed, scale, comm)
    shifts = scale is not None and "pfpne" in args.scale_algorithms
    settings = params_line(shifts=shifts)
    if args.markdown:
        parts = []
        for title, caption, headers, rows in all_tables:
            parts += [f"**{title}**", md_table(headers, rows), caption]
        parts.append(settings + "\n" + env_line(env))
        parts.append("\n".join(f"- {line}" for line in verdict_lines(v)))
        print("\n\n".join(parts))
    else:
        console = make_console()
        for title, caption, headers, rows in all_tables:
            print_table(console, title, caption, headers, rows)
        for line in [settings, env_line(env), *verdict_lines(v)]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if args.json is not None:
        payload = {
            "benchmark": "federation",
            "command": [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)],
            "parameters": parameters(args.scale_algorithms if args.scale_clients else []),
            "environment": env,
            "speed": speed,
            "scale": scale,
            "communication": comm,
            "verdicts": v,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
