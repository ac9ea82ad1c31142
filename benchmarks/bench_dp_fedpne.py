#!/usr/bin/env python
"""Benchmark: DP-Fed-PNE's regret as the privacy level epsilon falls (issue 3).

DP-Fed-PNE ([FX] App. D, spec-fedpne-pfpne §5) clips every reward to the declared reward range
and adds ``N(0, (sigma w)^2)`` noise to it on the client, with the noise multiplier sigma
calibrated for (epsilon, privacy_delta) and ``w`` the range's width (the L2 sensitivity), and
enlarges the server's confidence constant to ``c_DP = c sqrt(1 + 4 sigma^2)``. This script runs
it on Garland without client offsets (so that the rewards, Garland plus noise U(-0.1, 0.1), lie
in the declared range [-0.1, 1.1] and the guarantee holds exactly), practical preset, M = 10
clients, T = 10^4 evaluations each, confidence ``delta = 1/M``, with ``privacy_delta = 1e-5`` and

- the classic calibration ``sigma = sqrt(2 ln(1.25/delta)) / epsilon`` (valid for epsilon < 1)
  at epsilon in {0.9, 0.5, 0.2, 0.1},
- the analytic calibration (Balle & Wang 2018) at epsilon in {1, 2, 4, 8},
- and non-private Fed-PNE,

5 seeds each (the same seeds for every setting), and prints, per setting: sigma, c_DP, the
number of phases, the final cumulative regret averaged over clients (mean +- sample std over
seeds), the same per round (R_T / T), the ratio to non-private Fed-PNE, and the simple regret of
the recommendation. The rows are ordered by sigma. The regret of uniform random search,
``T (f* - mean f)``, is printed as the no-learning reference.

Usage (from the repository root)::

    python benchmarks/bench_dp_fedpne.py                    # the table of issue 3
    python benchmarks/bench_dp_fedpne.py --markdown         # the table as Markdown
    python benchmarks/bench_dp_fedpne.py --quick --json out.json   # smoke run (seconds)

The script prints measurements and computed verdicts; it asserts nothing.
See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from _common import GARLAND_F_STAR, garland  # noqa: E402
from bench_federation import (  # noqa: E402
    C_PRACTICAL,
    check_objective,
    env_line,
    environment,
    fmt_pow10,
    garland_config,
    make_console,
    make_progress,
    md_table,
    parameters,
    params_line,
    print_table,
    warm_up,
    yes,
)

DEFAULT_CLIENTS = 10
DEFAULT_BUDGET = 10_000
DEFAULT_SEEDS = 5
PRIVACY_DELTA = 1e-5
CLASSIC_EPSILONS = [0.9, 0.5, 0.2, 0.1]
ANALYTIC_EPSILONS = [1.0, 2.0, 4.0, 8.0]
QUICK_CLIENTS = 5
QUICK_BUDGET = 1_000
QUICK_SEEDS = 2

NON_PRIVATE = "none"


def settings(classic: list[float], analytic: list[float]) -> list[dict[str, Any]]:
    """Non-private Fed-PNE, then every (calibration, epsilon) of DP-Fed-PNE."""
    out: list[dict[str, Any]] = [{"calibration": NON_PRIVATE, "epsilon": None}]
    out += [{"calibration": "classic", "epsilon": e} for e in classic]
    out += [{"calibration": "analytic", "epsilon": e} for e in analytic]
    return out


REWARD_RANGE = (-0.1, 1.1)  # Garland's range [0, 0.998] plus the noise U(-0.1, 0.1)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def expected_sigma(epsilon: float, delta: float, calibration: str) -> float | None:
    """An independent check of fedxab's sigma: the classic formula, or None for the analytic
    calibration (checked by :func:`analytic_delta` instead)."""
    if calibration == "classic":
        return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    return None


def analytic_delta(sigma: float, epsilon: float) -> float:
    """Balle & Wang (2018) Theorem 8 at sensitivity 1: the delta that ``sigma`` achieves."""
    a, b = 1.0 / (2.0 * sigma), epsilon * sigma
    return _phi(a - b) - math.exp(epsilon) * _phi(-a - b)


def run_setting(
    setting: dict[str, Any],
    clients: int,
    budget: int,
    seed: int,
    privacy_delta: float,
) -> dict[str, Any]:
    """One run of one setting; sigma and c_DP read back from the server and checked."""
    from fedxab.agents.federation import Federation

    if setting["calibration"] == NON_PRIVATE:
        config = garland_config(clients, budget, seed, heterogeneity="none")
    else:
        config = garland_config(
            clients,
            budget,
            seed,
            algorithm="dpfedpne",
            heterogeneity="none",
            epsilon=setting["epsilon"],
            privacy_delta=privacy_delta,
            calibration=setting["calibration"],
            reward_range=list(REWARD_RANGE),
        )
    fed = Federation(config, seed)
    record = fed.run()
    c = float(fed.server.constants.c)
    mech = getattr(fed.server, "mechanism", None)
    sigma = 0.0 if mech is None else float(mech.sigma)
    if mech is not None:
        client_sigmas = {float(cl.mechanism.noise_multiplier) for cl in fed.clients}
        if not all(math.isclose(cs, sigma, rel_tol=1e-12) for cs in client_sigmas):
            raise RuntimeError(f"clients' sigma {client_sigmas} differ from the server's {sigma}")
        want = expected_sigma(setting["epsilon"], privacy_delta, setting["calibration"])
        if want is not None and not math.isclose(sigma, want, rel_tol=1e-12):
            raise RuntimeError(f"classic sigma {sigma}, expected {want}")
        if want is None and not analytic_delta(sigma, setting["epsilon"]) <= privacy_delta * (
            1 + 1e-9
        ):
            raise RuntimeError(f"analytic sigma {sigma} does not reach delta = {privacy_delta}")
    if not math.isclose(c, C_PRACTICAL * math.sqrt(1.0 + 4.0 * sigma**2), rel_tol=1e-12):
        raise RuntimeError(f"c_DP = {c}, expected {C_PRACTICAL} sqrt(1 + 4 sigma^2)")
    return {
        **setting,
        "seed": seed,
        "sigma": sigma,
        "c_dp": c,
        "rounds": int(record.communication["rounds"]),
        "evaluations": int(record.evaluations),
        "cumulative_regret": float(record.final_cumulative_regret),
        "average_regret": float(record.final_average_regret),
        "local_cumulative_regret": record.final_local_cumulative_regret,
        "simple_regret": float(record.simple_regret),
        "wall_time_s": float(record.wall_time_s),
    }


def _mean_std(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting, ordered by sigma (non-private first)."""
    keys: list[tuple[str, float | None]] = []
    for r in runs:
        key = (r["calibration"], r["epsilon"])
        if key not in keys:
            keys.append(key)
    rows = []
    for cal, eps in keys:
        mine = [r for r in runs if (r["calibration"], r["epsilon"]) == (cal, eps)]
        rows.append(
            {
                "calibration": cal,
                "epsilon": eps,
                "seeds": len(mine),
                "sigma": mine[0]["sigma"],
                "c_dp": mine[0]["c_dp"],
                "rounds": _mean_std([r["rounds"] for r in mine]),
                "cumulative_regret": _mean_std([r["cumulative_regret"] for r in mine]),
                "average_regret": _mean_std([r["average_regret"] for r in mine]),
                "simple_regret": _mean_std([r["simple_regret"] for r in mine]),
            }
        )
    rows.sort(key=lambda row: row["sigma"])
    base = next((row for row in rows if row["calibration"] == NON_PRIVATE), None)
    for row in rows:
        row["regret_ratio"] = (
            row["cumulative_regret"]["mean"] / base["cumulative_regret"]["mean"] if base else None
        )
    return rows


def random_search_regret(budget: int) -> float:
    """``T (f* - mean f)``: the expected regret of pulling uniform random points (no learning)."""
    grid = np.linspace(0.0, 1.0, 2_000_001).reshape(-1, 1)
    return budget * (GARLAND_F_STAR - float(garland(grid).mean()))


def verdicts(summary: list[dict[str, Any]], random_regret: float) -> dict[str, Any]:
    """sigma falls as epsilon grows; regret grows with sigma within noise; never worse than
    random search."""
    sigma_ok = True
    for cal in ("classic", "analytic"):
        rows = sorted((r for r in summary if r["calibration"] == cal), key=lambda r: r["epsilon"])
        sigmas = [r["sigma"] for r in rows]
        sigma_ok &= all(a > b for a, b in itertools.pairwise(sigmas))
    # Rows are ordered by sigma (= by falling epsilon). The regret may not go down by more than
    # two standard errors of the difference from one row to the next.
    violations = []
    for prev, row in itertools.pairwise(summary):
        pa, ra = prev["cumulative_regret"], row["cumulative_regret"]
        se = math.sqrt(pa["std"] ** 2 / prev["seeds"] + ra["std"] ** 2 / row["seeds"])
        if ra["mean"] < pa["mean"] - 2.0 * se:
            violations.append([_label(prev), _label(row)])
    worst = max(r["cumulative_regret"]["mean"] for r in summary)
    return {
        "sigma": {
            "target": "sigma strictly decreases as epsilon grows, within each calibration",
            "meets_target": bool(sigma_ok),
        },
        "regret": {
            "target": (
                "graceful degradation: mean regret does not fall by more than 2 standard errors "
                "from one row to the next as sigma grows, and stays below random search's "
                "T (f* - mean f)"
            ),
            "decreases_beyond_noise": violations,
            "worst_mean_regret": worst,
            "random_search_regret": random_regret,
            "meets_target": not violations and worst < random_regret,
        },
    }


# --------------------------------------------------------------------------------------------
# Output


def _label(row: dict[str, Any]) -> str:
    if row["calibration"] == NON_PRIVATE:
        return "Fed-PNE (non-private)"
    return f"DP-Fed-PNE {row['calibration']} ε = {row['epsilon']:g}"


HEADERS = [
    "algorithm",
    "calibration",
    "epsilon",
    "sigma",
    "c_DP",
    "phases",
    "cumulative regret",
    "R_T / T",
    "vs non-private",
    "simple regret",
]


def caption(clients: int, budget: int, seeds: int, privacy_delta: float, rnd: float) -> str:
    return (
        f"M = {clients}, T = {fmt_pow10(budget)}, privacy delta = {privacy_delta:g}, confidence "
        f"delta = 1/M, {seeds} seeds (0..{seeds - 1}), the same for every row; rows ordered by "
        "sigma. sigma: the noise multiplier (the Gaussian noise added to every reward, clipped "
        f"to [{REWARD_RANGE[0]:g}, {REWARD_RANGE[1]:g}], has standard deviation sigma x "
        f"{REWARD_RANGE[1] - REWARD_RANGE[0]:g}, the range's width); no client offsets; "
        "c_DP = c sqrt(1 + 4 sigma²) with c = 0.1. phases: communication rounds "
        "(mean over seeds). cumulative regret: (1/M) Σ_m Σ_t (f* − f(x_m,t)) at T, mean ± sample "
        "std over seeds; R_T / T: the same per round; vs non-private: ratio of the means. simple "
        f"regret: f* − f(recommendation), mean ± std. Random search (no learning) would have "
        f"cumulative regret T (f* − mean f) = {rnd:.1f}."
    )


def rows_of(summary: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in summary:
        private = r["calibration"] != NON_PRIVATE
        cr, ar, sr = r["cumulative_regret"], r["average_regret"], r["simple_regret"]
        rounds = r["rounds"]
        phases = (
            f"{rounds['mean']:g}"
            if rounds["min"] == rounds["max"]
            else f"{rounds['mean']:.1f} [{rounds['min']:g}–{rounds['max']:g}]"
        )
        out.append(
            [
                "DP-Fed-PNE" if private else "Fed-PNE",
                r["calibration"] if private else "—",
                f"{r['epsilon']:g}" if private else "∞",
                f"{r['sigma']:.3f}",
                f"{r['c_dp']:.3f}",
                phases,
                f"{cr['mean']:.1f} ± {cr['std']:.1f}",
                f"{ar['mean']:.4f}",
                f"{r['regret_ratio']:.2f}x" if r["regret_ratio"] is not None else "",
                f"{sr['mean']:.4f} ± {sr['std']:.4f}",
            ]
        )
    return out


def verdict_lines(v: dict[str, Any]) -> list[str]:
    rg = v["regret"]
    bad = "; ".join(f"{a} -> {b}" for a, b in rg["decreases_beyond_noise"]) or "none"
    return [
        f"Sigma: decreases as epsilon grows in each calibration; meets target: "
        f"{yes(v['sigma']['meets_target'])}",
        f"Regret: worst mean cumulative regret {rg['worst_mean_regret']:.1f} vs random search "
        f"{rg['random_search_regret']:.1f}; decreases beyond 2 standard errors as sigma grows: "
        f"{bad}; target: graceful degradation; meets target: {yes(rg['meets_target'])}",
    ]


# --------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="DP-Fed-PNE's regret as epsilon falls (Garland, issue 3).",
        epilog="Run from the repository root with the project's virtualenv.",
    )
    p.add_argument("--clients", type=int, default=None, help=f"M (default: {DEFAULT_CLIENTS})")
    p.add_argument(
        "--budget", type=int, default=None, help=f"T per client (default: {DEFAULT_BUDGET})"
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=f"seeds 0..N-1 per setting (default: {DEFAULT_SEEDS})",
    )
    p.add_argument(
        "--privacy-delta",
        type=float,
        default=PRIVACY_DELTA,
        help=f"delta of (epsilon, delta)-DP (default: {PRIVACY_DELTA:g})",
    )
    p.add_argument(
        "--classic-epsilons",
        type=float,
        nargs="*",
        default=CLASSIC_EPSILONS,
        help=f"epsilons (< 1) of the classic calibration (default: "
        f"{' '.join(f'{e:g}' for e in CLASSIC_EPSILONS)})",
    )
    p.add_argument(
        "--analytic-epsilons",
        type=float,
        nargs="*",
        default=ANALYTIC_EPSILONS,
        help=f"epsilons of the analytic calibration (default: "
        f"{' '.join(f'{e:g}' for e in ANALYTIC_EPSILONS)})",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: M = {QUICK_CLIENTS}, T = {QUICK_BUDGET}, {QUICK_SEEDS} seeds, the "
        "same epsilons (explicit flags still win)",
    )
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="write the raw measurements to PATH"
    )
    args = p.parse_args(argv)
    if args.clients is None:
        args.clients = QUICK_CLIENTS if args.quick else DEFAULT_CLIENTS
    if args.budget is None:
        args.budget = QUICK_BUDGET if args.quick else DEFAULT_BUDGET
    if args.seeds is None:
        args.seeds = QUICK_SEEDS if args.quick else DEFAULT_SEEDS
    if args.clients < 1 or args.budget < 1 or args.seeds < 1:
        p.error("--clients, --budget and --seeds must be >= 1")
    if not 0 < args.privacy_delta < 1:
        p.error(f"--privacy-delta must be in (0, 1), got {args.privacy_delta}")
    if any(not 0 < e < 1 for e in args.classic_epsilons):
        p.error(
            f"--classic-epsilons must be in (0, 1) (the classic calibration is invalid for "
            f"epsilon >= 1; use --analytic-epsilons), got {args.classic_epsilons}"
        )
    if any(e <= 0 for e in args.analytic_epsilons):
        p.error(f"--analytic-epsilons must be > 0, got {args.analytic_epsilons}")
    args.classic_epsilons = sorted(set(args.classic_epsilons), reverse=True)
    args.analytic_epsilons = sorted(set(args.analytic_epsilons), reverse=True)
    return args


def measure(
    args: argparse.Namespace, on_run: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    runs = []
    for setting in settings(args.classic_epsilons, args.analytic_epsilons):
        for seed in range(args.seeds):
            runs.append(run_setting(setting, args.clients, args.budget, seed, args.privacy_delta))
            if on_run is not None:
                on_run(_label(setting))
    return runs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_objective()
    warm_up()
    n_settings = 1 + len(args.classic_epsilons) + len(args.analytic_epsilons)
    progress = make_progress()
    with progress:
        task = progress.add_task("runs", total=n_settings * args.seeds)
        runs = measure(args, lambda label: progress.update(task, advance=1, description=label))

    summary = summarize(runs)
    rnd = random_search_regret(args.budget)
    v = verdicts(summary, rnd)
    env = environment()
    title = (
        f"DP-Fed-PNE on Garland: regret as epsilon falls (M = {args.clients}, "
        f"T = {fmt_pow10(args.budget)})"
    )
    cap = caption(args.clients, args.budget, args.seeds, args.privacy_delta, rnd)
    if args.markdown:
        parts = [f"**{title}**", md_table(HEADERS, rows_of(summary)), cap]
        parts.append(params_line(offsets=False) + "\n" + env_line(env))
        parts.append("\n".join(f"- {line}" for line in verdict_lines(v)))
        print("\n\n".join(parts))
    else:
        console = make_console()
        print_table(console, title, cap, HEADERS, rows_of(summary))
        for line in [params_line(offsets=False), env_line(env), *verdict_lines(v)]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if args.json is not None:
        payload = {
            "benchmark": "dp_fedpne",
            "command": [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)],
            "parameters": {
                **parameters(),
                "algorithm": "dpfedpne (fedpne for the non-private row)",
                "clients": args.clients,
                "budget": args.budget,
                "privacy_delta": args.privacy_delta,
                "confidence_delta": "1/M",
                "classic_epsilons": args.classic_epsilons,
                "analytic_epsilons": args.analytic_epsilons,
            },
            "environment": env,
            "seeds": list(range(args.seeds)),
            "runs": runs,
            "summary": summary,
            "random_search_regret": rnd,
            "verdicts": v,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
