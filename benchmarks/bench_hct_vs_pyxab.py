#!/usr/bin/env python
"""Benchmark: fedxab's HCT against PyXAB's HCT (PyPI ``pyxab==0.3.0``) on Garland (issues 2, 18).

Both optimizers get the same parameters, PyXAB's HCT defaults, which are fedxab's ``practical``
preset: ``nu = 1``, ``rho = 0.5``, ``c = 0.1``, ``delta = 0.01`` (``c1 = (rho / (3 nu))^(1/8)``
in both), the 1-D binary (dyadic) partition with the cell centre as representative point, and
uniform noise U(-0.1, 0.1). Both are driven by the same loop (``_common.drive``): the same
Garland function (``_common.garland_at``, scalar, checked at start-up against the vectorized
``_common.garland`` and that against PyXAB's ``Garland.f``), the same pre-drawn noise sequence
for a seed, the same regret bookkeeping; only the optimizer differs. Runs are interleaved (for
every seed both optimizers run, alternating which goes first) so that drift in machine load hits
both.

Reported: wall time (median over seeds and the min-max spread), cumulative regret
``sum_t f* - f(x_t)`` with ``f* = 4 (pi/6)(1 - pi/6)`` (mean +- sample std over seeds), the
speed ratio PyXAB time / fedxab time (ratio of the medians), the time of the driver alone (no
optimizer, the part of both times that is not the optimizer's) and, in a fresh subprocess,
fedxab's memory at a large budget (peak RSS of the whole process and tracemalloc peak of the
optimizer run, measured in two separate fresh processes). See ``benchmarks/README.md``.

Usage (from the repository root)::

    python benchmarks/bench_hct_vs_pyxab.py                    # 10^4 and 10^5, 5 seeds, 10^6 memory
    python benchmarks/bench_hct_vs_pyxab.py --markdown         # tables as Markdown (for the README)
    python benchmarks/bench_hct_vs_pyxab.py --quick --json out.json

The script prints measurements and target verdicts; it asserts nothing about speed.
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
import tracemalloc
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from _common import (  # noqa: E402
    GARLAND_DOMAIN,
    GARLAND_F_STAR,
    GARLAND_X_STAR,
    ask_tell_adapters,
    check_garland_optimum,
    check_garland_scalar,
    drive,
    garland,
    kib_to_mb,
    peak_rss_kib,
    pyxab_adapters,
    run_in_fresh_process,
    uniform_noise,
)

# The shared parameters (PyXAB's HCT defaults = fedxab's "practical" preset).
NU = 1.0
RHO = 0.5
C = 0.1
DELTA = 0.01
NOISE_HALF_WIDTH = 0.1
PYXAB_VERSION = "0.3.0"

# Targets: speed of issue 18 (issue 2 asked for 10x), regret and memory of issue 2.
SPEED_TARGET = 100.0
SPEED_TARGET_BUDGET = 100_000
MEMORY_TARGET_MB = 200.0  # MB = 10^6 bytes
MEMORY_TARGET_BUDGET = 1_000_000

DEFAULT_BUDGETS = [10_000, 100_000]
DEFAULT_SEEDS = 5
QUICK_BUDGETS = [1_000]
QUICK_SEEDS = 2
QUICK_MEMORY_BUDGET = 20_000

FEDXAB = "fedxab"
PYXAB = "pyxab"
LABELS = {FEDXAB: "fedxab HCT", PYXAB: "PyXAB HCT"}


# --------------------------------------------------------------------------------------------
# The two optimizers


def make_fedxab(seed: int) -> Any:
    """fedxab's HCT with the shared parameters (checked against the constants above)."""
    from fedxab.algorithms.hct import HCT

    opt = HCT(GARLAND_DOMAIN, nu=NU, rho=RHO, preset="practical", seed=seed)
    c1 = (RHO / (3.0 * NU)) ** 0.125
    got = (opt.nu, opt.rho, opt.c, opt.delta, opt.c1, opt.k)
    if not np.allclose(got, (NU, RHO, C, DELTA, c1, 2), rtol=0, atol=1e-15):
        raise RuntimeError(f"fedxab HCT parameters differ from the benchmark's: {got}")
    return opt


def make_pyxab(seed: int) -> Any:
    """PyXAB's HCT with the shared parameters and its default ``BinaryPartition``."""
    from PyXAB.algos.HCT import HCT
    from PyXAB.partition.BinaryPartition import BinaryPartition

    # BinaryPartition draws the split dimension from numpy's global RNG (always 0 in 1-D);
    # seed it anyway so that a PyXAB run is reproducible in any dimension.
    np.random.seed(seed)
    algo = HCT(nu=NU, rho=RHO, c=C, delta=DELTA, domain=[[0.0, 1.0]], partition=BinaryPartition)
    c1 = (RHO / (3.0 * NU)) ** 0.125
    got = (algo.nu, algo.rho, algo.c, algo.delta, float(algo.c1))
    if not np.allclose(got, (NU, RHO, C, DELTA, c1), rtol=0, atol=1e-15):
        raise RuntimeError(f"PyXAB HCT parameters differ from the benchmark's: {got}")
    return algo


def fedxab_tree(opt: Any) -> dict[str, int]:
    return {"nodes": int(opt.n_nodes), "depth": int(opt.max_depth)}


def pyxab_tree(algo: Any) -> dict[str, int]:
    """PyXAB's tree size; ``reachable_nodes < nodes`` when a node was expanded twice.

    PyXAB's expansion test does not check that the node is a leaf, so an internal node that is
    re-sampled can be expanded again: its new children replace the old ones, whose subtree stays
    in the node list (and in every B-value sweep) without being reachable from the root.
    """
    layers = algo.partition.get_node_list()
    total = sum(len(layer) for layer in layers)
    reachable, stack = 0, [algo.partition.get_root()]
    while stack:
        node = stack.pop()
        reachable += 1
        stack.extend(node.get_children() or ())
    return {"nodes": total, "reachable_nodes": reachable, "depth": int(algo.partition.get_depth())}


def run_one(name: str, budget: int, seed: int, on_chunk: Any = None) -> dict[str, Any]:
    """One timed run of one optimizer through the shared driver."""
    noise = uniform_noise(seed, budget, NOISE_HALF_WIDTH)
    gc.collect()  # leave no garbage of the previous run to be collected during this one
    if name == FEDXAB:
        opt = make_fedxab(seed)
        ask, tell = ask_tell_adapters(opt)
    else:
        opt = make_pyxab(seed)
        ask, tell = pyxab_adapters(opt)
    wall, regret = drive(ask, tell, budget, noise, on_chunk=on_chunk)
    tree = fedxab_tree(opt) if name == FEDXAB else pyxab_tree(opt)
    return {
        "optimizer": name,
        "budget": budget,
        "seed": seed,
        "wall_time_s": wall,
        "cumulative_regret": regret,
        "regret_per_round": regret / budget,
        **tree,
    }


def run_driver_alone(budget: int, seed: int) -> dict[str, Any]:
    """The shared driver timed with no optimizer (the same point every round, no update): the
    part of either optimizer's time that is the loop, Garland, the noise and the regret."""
    noise = uniform_noise(seed, budget, NOISE_HALF_WIDTH)
    point = np.array([0.5])
    gc.collect()
    wall, _ = drive(lambda t: point, lambda t, x, r: None, budget, noise)
    return {"budget": budget, "seed": seed, "wall_time_s": wall}


# --------------------------------------------------------------------------------------------
# Memory probe (runs in a fresh subprocess)


def memory_probe(budget: int, seed: int, trace: bool) -> dict[str, Any]:
    """fedxab's HCT run for ``budget`` rounds in this process; memory and time measurements.

    Meant for a fresh process (see :func:`measure_memory`). The noise sequence is drawn before
    the measurement starts (``8 * budget`` bytes, part of the driver, not of the optimizer).
    With ``trace``, tracemalloc runs from just before the optimizer's construction to the end of
    the run (tracing slows the run down and adds its own memory, so the RSS figure comes from a
    separate, untraced process).
    """
    noise = uniform_noise(seed, budget, NOISE_HALF_WIDTH)
    gc.collect()
    rss_before = peak_rss_kib()
    if trace:
        tracemalloc.start()
    opt = make_fedxab(seed)
    ask, tell = ask_tell_adapters(opt)
    wall, regret = drive(ask, tell, budget, noise)
    out: dict[str, Any] = {
        "budget": budget,
        "seed": seed,
        "wall_time_s": wall,
        "cumulative_regret": regret,
        "noise_array_bytes": int(noise.nbytes),
        **fedxab_tree(opt),
    }
    if trace:
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out["tracemalloc_peak_bytes"] = int(peak)
        out["tracemalloc_current_bytes"] = int(current)
    else:
        out["peak_rss_before_run_kib"] = int(rss_before)
        out["peak_rss_kib"] = int(peak_rss_kib())
    return out


def _run_child(budget: int, seed: int, trace: bool) -> dict[str, Any]:
    return run_in_fresh_process("bench_hct_vs_pyxab", "memory_probe", budget, seed, trace)


def measure_memory(budget: int, seed: int = 0) -> dict[str, Any]:
    """fedxab's memory at ``budget``: two fresh subprocesses, one untraced (peak RSS), one
    with tracemalloc (peak of Python allocations during the optimizer's construction and run).
    """
    rss = _run_child(budget, seed, trace=False)
    traced = _run_child(budget, seed, trace=True)
    return {
        "optimizer": FEDXAB,
        "budget": budget,
        "seed": seed,
        "peak_rss_kib": rss["peak_rss_kib"],
        "peak_rss_mb": kib_to_mb(rss["peak_rss_kib"]),
        "peak_rss_before_run_kib": rss["peak_rss_before_run_kib"],
        "peak_rss_before_run_mb": kib_to_mb(rss["peak_rss_before_run_kib"]),
        "tracemalloc_peak_bytes": traced["tracemalloc_peak_bytes"],
        "tracemalloc_peak_mb": traced["tracemalloc_peak_bytes"] / 1e6,
        "noise_array_bytes": rss["noise_array_bytes"],
        "wall_time_s": rss["wall_time_s"],
        "wall_time_traced_s": traced["wall_time_s"],
        "cumulative_regret": rss["cumulative_regret"],
        "nodes": rss["nodes"],
        "depth": rss["depth"],
    }


# --------------------------------------------------------------------------------------------
# Summary and verdicts


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def summarize(
    runs: list[dict[str, Any]], driver_runs: list[dict[str, Any]], budgets: list[int]
) -> list[dict[str, Any]]:
    rows = []
    for budget in budgets:
        row: dict[str, Any] = {"budget": budget}
        row["driver_alone_s"] = _stats(
            [r["wall_time_s"] for r in driver_runs if r["budget"] == budget]
        )
        for name in (FEDXAB, PYXAB):
            mine = [r for r in runs if r["budget"] == budget and r["optimizer"] == name]
            row[name] = {
                "seeds": len(mine),
                "wall_time_s": _stats([r["wall_time_s"] for r in mine]),
                "cumulative_regret": _stats([r["cumulative_regret"] for r in mine]),
            }
        row["speed_ratio"] = (
            row[PYXAB]["wall_time_s"]["median"] / row[FEDXAB]["wall_time_s"]["median"]
        )
        times = {
            (r["optimizer"], r["seed"]): r["wall_time_s"] for r in runs if r["budget"] == budget
        }
        row["per_seed_speed_ratio"] = {
            seed: times[(PYXAB, seed)] / times[(FEDXAB, seed)]
            for (name, seed) in sorted(times)
            if name == PYXAB and (FEDXAB, seed) in times
        }
        rows.append(row)
    return rows


def verdicts(summary: list[dict[str, Any]], memory: dict[str, Any] | None) -> dict[str, Any]:
    by_budget = {row["budget"]: row for row in summary}
    budget = SPEED_TARGET_BUDGET if SPEED_TARGET_BUDGET in by_budget else max(by_budget)
    row = by_budget[budget]
    fed_regret = row[FEDXAB]["cumulative_regret"]["mean"]
    pyx_regret = row[PYXAB]["cumulative_regret"]["mean"]
    out: dict[str, Any] = {
        "speed": {
            "budget": budget,
            "target_budget": SPEED_TARGET_BUDGET,
            "target": f"PyXAB time / fedxab time >= {SPEED_TARGET:g}",
            "speed_ratio": row["speed_ratio"],
            "meets_target": row["speed_ratio"] >= SPEED_TARGET,
        },
        "regret": {
            "budget": budget,
            "target_budget": SPEED_TARGET_BUDGET,
            "target": "fedxab mean cumulative regret <= PyXAB mean cumulative regret",
            "fedxab_mean": fed_regret,
            "pyxab_mean": pyx_regret,
            "meets_target": fed_regret <= pyx_regret,
        },
    }
    if memory is not None:
        out["memory"] = {
            "budget": memory["budget"],
            "target_budget": MEMORY_TARGET_BUDGET,
            "target": f"peak RSS of the whole process < {MEMORY_TARGET_MB:g} MB",
            "peak_rss_mb": memory["peak_rss_mb"],
            "tracemalloc_peak_mb": memory["tracemalloc_peak_mb"],
            "meets_target": memory["peak_rss_mb"] < MEMORY_TARGET_MB,
        }
    return out


# --------------------------------------------------------------------------------------------
# Output


def _fmt_s(v: float) -> str:
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def _fmt_time(st: dict[str, float]) -> str:
    return f"{_fmt_s(st['median'])} [{_fmt_s(st['min'])}–{_fmt_s(st['max'])}]"


def _fmt_regret(st: dict[str, float]) -> str:
    return f"{st['mean']:.1f} ± {st['std']:.1f}"


def _fmt_budget(b: int) -> str:
    e = round(math.log10(b)) if b > 0 else 0
    return f"10^{e}" if 10**e == b else f"{b:,}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


TIME_HEADERS = [
    "budget",
    "seeds",
    "fedxab time (s)",
    "PyXAB time (s)",
    "PyXAB / fedxab time",
    "driver alone (s)",
    "fedxab regret",
    "PyXAB regret",
]
TIME_CAPTION = (
    "Time: wall time of the whole run loop, median [min–max] over seeds. "
    "PyXAB / fedxab time: ratio of the medians, measured in the same run. "
    "Driver alone: the same loop with no optimizer (one fixed point, no update), part of both "
    "times. "
    "Regret: cumulative regret sum_t (f* − f(x_t)), mean ± sample std over seeds."
)
MEMORY_HEADERS = [
    "budget",
    "peak RSS (MB)",
    "RSS before run (MB)",
    "tracemalloc peak (MB)",
    "time (s)",
    "tree nodes",
]
MEMORY_CAPTION = (
    "fedxab HCT, seed 0, each figure from a fresh process. Peak RSS: ru_maxrss of the whole "
    "process (interpreter, numpy, fedxab, the pre-drawn noise array of 8 bytes per round, and "
    "the run); RSS before run: the same peak just before the optimizer is built. "
    "tracemalloc peak: Python allocations from the optimizer's construction to the end of the "
    "run (separate traced process). MB = 10^6 bytes."
)


def time_rows(summary: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            _fmt_budget(row["budget"]),
            str(row[FEDXAB]["seeds"]),
            _fmt_time(row[FEDXAB]["wall_time_s"]),
            _fmt_time(row[PYXAB]["wall_time_s"]),
            f"{row['speed_ratio']:.1f}x",
            _fmt_time(row["driver_alone_s"]),
            _fmt_regret(row[FEDXAB]["cumulative_regret"]),
            _fmt_regret(row[PYXAB]["cumulative_regret"]),
        ]
        for row in summary
    ]


def memory_rows(memory: dict[str, Any]) -> list[list[str]]:
    return [
        [
            _fmt_budget(memory["budget"]),
            f"{memory['peak_rss_mb']:.1f}",
            f"{memory['peak_rss_before_run_mb']:.1f}",
            f"{memory['tracemalloc_peak_mb']:.2f}",
            _fmt_s(memory["wall_time_s"]),
            str(memory["nodes"]),
        ]
    ]


def verdict_lines(v: dict[str, Any]) -> list[str]:
    sp, rg = v["speed"], v["regret"]
    note = (
        ""
        if sp["budget"] == sp["target_budget"]
        else (
            f" (measured at {_fmt_budget(sp['budget'])}; the target is stated at "
            f"{_fmt_budget(sp['target_budget'])})"
        )
    )
    lines = [
        f"Speed: fedxab {sp['speed_ratio']:.1f}x faster than PyXAB at "
        f"{_fmt_budget(sp['budget'])}; target >= {SPEED_TARGET:g}x{note}; "
        f"meets target: {_yes(sp['meets_target'])}",
        f"Regret: fedxab mean cumulative regret {rg['fedxab_mean']:.1f} vs PyXAB "
        f"{rg['pyxab_mean']:.1f} at {_fmt_budget(rg['budget'])}; target: no worse{note}; "
        f"meets target: {_yes(rg['meets_target'])}",
    ]
    if "memory" in v:
        m = v["memory"]
        mnote = (
            ""
            if m["budget"] == m["target_budget"]
            else (
                f" (measured at {_fmt_budget(m['budget'])}; the target is stated at "
                f"{_fmt_budget(m['target_budget'])})"
            )
        )
        lines.append(
            f"Memory: fedxab peak RSS {m['peak_rss_mb']:.1f} MB (whole process), tracemalloc "
            f"peak {m['tracemalloc_peak_mb']:.2f} MB at {_fmt_budget(m['budget'])}; target < "
            f"{MEMORY_TARGET_MB:g} MB{mnote}; meets target: {_yes(m['meets_target'])}"
        )
    return lines


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": np.__version__,
        "fedxab": version("fedxab"),
        "pyxab": version("pyxab"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def parameters() -> dict[str, Any]:
    return {
        "objective": "garland",
        "domain": GARLAND_DOMAIN,
        "f_star": GARLAND_F_STAR,
        "x_star": GARLAND_X_STAR,
        "nu": NU,
        "rho": RHO,
        "c": C,
        "delta": DELTA,
        "c1": (RHO / (3.0 * NU)) ** 0.125,
        "partition": "1-D binary (dyadic), cell centre",
        "noise": f"uniform U(-{NOISE_HALF_WIDTH}, {NOISE_HALF_WIDTH}), default_rng(seed)",
        "fedxab": 'HCT(domain, nu=1, rho=0.5, preset="practical", seed=seed)',
        "pyxab": "PyXAB.algos.HCT.HCT(nu=1, rho=0.5, c=0.1, delta=0.01, domain, BinaryPartition)",
    }


def params_line() -> str:
    return (
        f"Garland on [0, 1], f* = 4(π/6)(1−π/6) = {GARLAND_F_STAR:.10f}; nu = {NU:g}, "
        f"rho = {RHO:g}, c = {C:g}, delta = {DELTA:g}; 1-D binary partition (cell centres); "
        f"noise U(−{NOISE_HALF_WIDTH:g}, {NOISE_HALF_WIDTH:g})."
    )


def env_line(env: dict[str, Any]) -> str:
    return (
        f"Python {env['python']}, numpy {env['numpy']}, fedxab {env['fedxab']}, "
        f"PyXAB {env['pyxab']}; {env['platform']}, {env['cpu_count']} CPUs."
    )


def print_rich(
    summary: list[dict[str, Any]],
    memory: dict[str, Any] | None,
    v: dict[str, Any],
    env: dict[str, Any],
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    if not console.is_terminal:  # piped or captured: do not squeeze the tables into 80 columns
        console = Console(width=max(console.width, 150))

    def add_table(title: str, caption: str, headers: list[str], rows: list[list[str]]) -> None:
        table = Table(title=title, caption=Text(caption), caption_justify="left")
        for i, h in enumerate(headers):
            table.add_column(h, justify="left" if i == 0 else "right")
        for r in rows:
            table.add_row(*(Text(cell) for cell in r))
        console.print(table)

    add_table(
        "HCT on Garland: fedxab vs PyXAB (same driver, same noise)",
        TIME_CAPTION,
        TIME_HEADERS,
        time_rows(summary),
    )
    if memory is not None:
        add_table(
            "fedxab HCT memory (fresh processes)",
            MEMORY_CAPTION,
            MEMORY_HEADERS,
            memory_rows(memory),
        )
    for line in [params_line(), env_line(env), *verdict_lines(v)]:
        console.print(line, markup=False, highlight=False)


def print_markdown(
    summary: list[dict[str, Any]],
    memory: dict[str, Any] | None,
    v: dict[str, Any],
    env: dict[str, Any],
) -> None:
    parts = [_md_table(TIME_HEADERS, time_rows(summary)), TIME_CAPTION]
    if memory is not None:
        parts += [_md_table(MEMORY_HEADERS, memory_rows(memory)), MEMORY_CAPTION]
    parts.append(params_line() + "\n" + env_line(env))
    parts.append("\n".join(f"- {line}" for line in verdict_lines(v)))
    print("\n\n".join(parts))


# --------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark fedxab's HCT against PyXAB's HCT on Garland (issues 2, 18).",
        epilog="Run from the repository root with the project's virtualenv; needs pyxab==0.3.0.",
    )
    p.add_argument(
        "--budgets",
        type=int,
        nargs="+",
        default=None,
        help=f"budgets (rounds) to time (default: {' '.join(map(str, DEFAULT_BUDGETS))})",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=f"number of seeds, 0..N-1, per budget (default: {DEFAULT_SEEDS})",
    )
    p.add_argument(
        "--memory-budget",
        type=int,
        default=None,
        help=f"budget of fedxab's memory probe, 0 to skip (default: {MEMORY_TARGET_BUDGET})",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: budgets {QUICK_BUDGETS[0]}, {QUICK_SEEDS} seeds, memory budget "
        f"{QUICK_MEMORY_BUDGET} (explicit flags still win)",
    )
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="write the raw measurements as JSON to PATH",
    )
    args = p.parse_args(argv)
    if args.budgets is None:
        args.budgets = QUICK_BUDGETS if args.quick else DEFAULT_BUDGETS
    if args.seeds is None:
        args.seeds = QUICK_SEEDS if args.quick else DEFAULT_SEEDS
    if args.memory_budget is None:
        args.memory_budget = QUICK_MEMORY_BUDGET if args.quick else MEMORY_TARGET_BUDGET
    if any(b < 1 for b in args.budgets):
        p.error(f"--budgets must be positive integers, got {args.budgets}")
    if args.seeds < 1:
        p.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.memory_budget < 0:
        p.error(f"--memory-budget must be >= 0 (0 skips the probe), got {args.memory_budget}")
    args.budgets = sorted(set(args.budgets))
    return args


def check_pyxab() -> None:
    try:
        from PyXAB.synthetic_obj.Garland import Garland
    except ImportError as exc:
        raise SystemExit(
            f"PyXAB is not importable ({exc}); install it with "
            f"`pip install pyxab=={PYXAB_VERSION}` (or the project's `bench` extra)."
        ) from exc
    installed = metadata.version("pyxab")
    if installed != PYXAB_VERSION:
        print(
            f"warning: pyxab {installed} is installed; this benchmark was written for "
            f"{PYXAB_VERSION}",
            file=sys.stderr,
        )
    # The shared Garland is PyXAB's formula.
    xs = np.linspace(0.0, 1.0, 1001)
    ours = garland(xs.reshape(-1, 1))
    theirs = np.array([Garland().f([x]) for x in xs])
    if not np.allclose(ours, theirs, rtol=0, atol=1e-14):
        raise SystemExit("the benchmark's Garland differs from PyXAB's Garland.f")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_pyxab()
    check_garland_optimum()
    check_garland_scalar()

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    seeds = list(range(args.seeds))
    runs: list[dict[str, Any]] = []
    driver_runs: list[dict[str, Any]] = []
    memory: dict[str, Any] | None = None
    total_rounds = 2 * len(seeds) * sum(args.budgets)
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        refresh_per_second=4,
        transient=True,
    )
    with progress:
        overall = progress.add_task("all timed runs (rounds)", total=total_rounds)
        for budget in args.budgets:
            for seed in seeds:
                # Interleave, alternating which optimizer goes first.
                order = (FEDXAB, PYXAB) if seed % 2 == 0 else (PYXAB, FEDXAB)
                for name in order:
                    task = progress.add_task(
                        f"{LABELS[name]}  n={budget:,}  seed={seed}", total=budget
                    )

                    def advance(n: int, task: Any = task) -> None:
                        progress.advance(task, n)
                        progress.advance(overall, n)

                    runs.append(run_one(name, budget, seed, on_chunk=advance))
                    progress.remove_task(task)
                driver_runs.append(run_driver_alone(budget, seed))
        if args.memory_budget:
            task = progress.add_task(
                f"fedxab memory probe n={args.memory_budget:,} (2 fresh subprocesses)", total=None
            )
            memory = measure_memory(args.memory_budget)
            progress.remove_task(task)

    summary = summarize(runs, driver_runs, args.budgets)
    v = verdicts(summary, memory)
    env = environment()
    if args.markdown:
        print_markdown(summary, memory, v, env)
    else:
        print_rich(summary, memory, v, env)
    if args.json is not None:
        payload = {
            "benchmark": "hct_vs_pyxab",
            "command": [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)],
            "parameters": parameters(),
            "environment": env,
            "budgets": args.budgets,
            "seeds": seeds,
            "runs": runs,
            "driver_runs": driver_runs,
            "summary": summary,
            "memory": memory,
            "verdicts": v,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
