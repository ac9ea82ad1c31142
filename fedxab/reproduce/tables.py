"""The tables of a reproduction, as JSON and Markdown files in ``OUTPUT``: the manifest
``reproduce.json`` (the command, the estimated and measured wall time, each entry's final value:
:func:`write_manifest`) and, for the DP-FTS-DE figures, the privacy-utility table
``privacy_utility.json`` and ``.md`` (epsilon from each run's ledger next to the final regret,
mean ± std over seeds: :func:`write_privacy_utility`)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedxab.reproduce.execute import EntryResult
from fedxab.reproduce.experiments import metric_label
from fedxab.reproduce.plan import Plan

__all__ = [
    "MANIFEST_FILENAME",
    "PRIVACY_UTILITY_JSON",
    "PRIVACY_UTILITY_MD",
    "privacy_utility",
    "privacy_utility_caption",
    "privacy_utility_rows",
    "write_manifest",
    "write_privacy_utility",
]

log = logging.getLogger(__name__)

MANIFEST_FILENAME = "reproduce.json"
PRIVACY_UTILITY_JSON = "privacy_utility.json"
PRIVACY_UTILITY_MD = "privacy_utility.md"


def _display_path(path: Path) -> str:
    """``path`` as given when relative, else just its name (no outside paths in outputs)."""
    return path.as_posix() if not path.is_absolute() else path.name


def write_manifest(
    plan: Plan,
    results: Sequence[EntryResult],
    *,
    estimate_s: float | None,
    wall_time_s: float | None,
    figure: Path,
) -> Path:
    """``OUTPUT/reproduce.json``: the command, the estimate and wall time, the final values."""
    exp = plan.experiment
    entries = []
    for res in results:
        mean, std = res.final(exp.metric)
        comm = res.results.communication or {}
        entries.append(
            {
                "key": res.planned.entry.key,
                "label": res.planned.entry.label,
                "algorithm": dict(res.planned.entry.algorithm),
                "clients": res.planned.config.federation.clients,
                "results": f"{res.planned.entry.key}/results.json",
                "final": {"metric": exp.metric, "mean": mean, "std": std},
                "privacy": res.results.privacy,
                "communication_rounds": comm.get("rounds"),
                "wall_time_s": float(sum(r.wall_time_s for r in res.results.runs)),
            }
        )
    data = {
        "experiment": exp.name,
        "figure": exp.figure,
        "description": exp.description,
        "command": plan.command_line,
        "seeds": plan.seeds,
        "budget": plan.budget,
        "metric": exp.metric,
        "estimate_s": estimate_s,
        "wall_time_s": wall_time_s,
        "plot": _display_path(figure),
        "entries": entries,
    }
    path = plan.output / MANIFEST_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def _stats(values: np.ndarray) -> dict[str, Any]:
    return {
        "mean": float(values.mean()),
        "std": float(values.std()),
        "per_seed": [float(v) for v in values],
    }


def privacy_utility(plan: Plan, results: Sequence[EntryResult]) -> dict[str, Any]:
    """The privacy-utility table of a DP-FTS-DE figure, computed from the results: per entry,
    epsilon (each run's largest client epsilon, recomputed from its ledger by the configured
    accountant; mean and std over seeds; None for a non-private entry), delta, and the final
    local simple regret (mean and population std over seeds); for landmine also the best
    validation AUC, 1 - that regret (the objective's optimum is an AUC of 1)."""
    exp = plan.experiment
    rows = []
    for res in results:
        entry = res.planned.entry
        runs = res.results.runs
        final = res.local_simple_regret()[:, -1]
        private = res.epsilon() is not None
        blocks = [run.privacy for run in runs] if private else []
        params = res.planned.config.algorithm_params()
        row: dict[str, Any] = {
            "key": entry.key,
            "label": entry.label,
            "algorithm": res.results.algorithm,
            "q": params.get("q") if private else None,
            "z": params.get("z") if private else None,
            "seeds": [int(run.seed) for run in runs],
            "private": private,
            "accountant": blocks[0]["accountant"] if private else None,
            "delta": float(blocks[0]["delta"]) if private else None,
            "releases": max(max(b["releases"], default=0) for b in blocks) if private else None,
            "epsilon": (
                _stats(np.array([float(b["max_epsilon"]) for b in blocks])) if private else None
            ),
            "paper_epsilon": entry.paper_epsilon,
            "local_simple_regret": _stats(final),
        }
        if exp.needs_landmine:
            auc = 1.0 - final
            row["best_auc"] = _stats(auc)
        rows.append(row)
    n0 = exp.initial_points
    first = plan.entries[0].config
    return {
        "schema": "fedxab.privacy_utility/1",
        "experiment": exp.name,
        "figure": exp.figure,
        "command": plan.command_line,
        "clients": first.federation.clients,
        "budget": plan.budget,
        "iterations": plan.budget - n0,
        "initial_points": n0,
        "seeds": len(results[0].results.runs) if results else plan.seeds,
        "epsilon": "largest epsilon over agents of each run, recomputed from its privacy ledger; "
        "mean and std over seeds",
        "utility": f"final {metric_label(exp)}; mean and std over seeds",
        "rows": rows,
    }


def _num(stats: Mapping[str, Any] | None, digits: int, *, constant: bool = False) -> str:
    """``mean ± std``; just the mean when ``constant`` and the std rounds to 0 (epsilon, the
    same at every seed unless agents withdrew)."""
    if stats is None:
        return "-"
    mean, std = stats["mean"], stats["std"]
    if constant and std < 0.5 * 10.0**-digits:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _decimals(values: Sequence[float], significant: int = 3, least: int = 4) -> int:
    """Decimals giving the column's largest value ``significant`` digits (at least ``least``)."""
    top = max((abs(v) for v in values if math.isfinite(v) and v != 0), default=1.0)
    return max(least, significant - 1 - math.floor(math.log10(top)))


def privacy_utility_rows(table: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The table's header and rows as text (for the markdown file and the console)."""
    auc = any("best_auc" in r for r in table["rows"])
    digits = _decimals([r["local_simple_regret"]["mean"] for r in table["rows"]])
    header = ["algorithm", "epsilon", "epsilon (paper)", "delta", "final regret"]
    if auc:
        header.append("best AUC")
    lines = []
    for r in table["rows"]:
        line = [
            r["label"],
            _num(r["epsilon"], 2, constant=True),
            "-" if r["paper_epsilon"] is None else f"{r['paper_epsilon']:.2f}",
            "-" if r["delta"] is None else f"{r['delta']:.4g}",
            _num(r["local_simple_regret"], digits),
        ]
        if auc:
            line.append(_num(r["best_auc"], digits))
        lines.append(line)
    return header, lines


def privacy_utility_caption(table: Mapping[str, Any], plan: Plan) -> str:
    """The table's caption: what its columns are and how they were computed."""
    accountants = sorted({r["accountant"] for r in table["rows"] if r["accountant"]})
    return (
        f"N = {table['clients']} agents, {plan.budget_text}, {table['seeds']} "
        f"seed{'s' if table['seeds'] != 1 else ''}. "
        "epsilon: the largest over agents, recomputed from each run's privacy ledger "
        f"({', '.join(accountants) or 'no'} accountant), mean over seeds (± std when it "
        "varies); epsilon (paper): as Dai, Low & Jaillet (2021) report it, at the paper's N and "
        "T. final regret: "
        f"{metric_label(plan.experiment)} at the last iteration, mean ± std over seeds"
        + ("; best AUC = 1 − final regret." if plan.experiment.needs_landmine else ".")
    )


def write_privacy_utility(
    plan: Plan, results: Sequence[EntryResult]
) -> tuple[dict[str, Any], Path, Path]:
    """Write ``OUTPUT/privacy_utility.json`` and ``OUTPUT/privacy_utility.md``."""
    table = privacy_utility(plan, results)
    plan.output.mkdir(parents=True, exist_ok=True)
    json_path = plan.output / PRIVACY_UTILITY_JSON
    json_path.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    header, rows = privacy_utility_rows(table)
    exp = plan.experiment
    md = [
        f"# {exp.name}: privacy-utility table ({exp.figure})",
        "",
        f"`{table['command']}`",
        "",
        privacy_utility_caption(table, plan),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]
    md_path = plan.output / PRIVACY_UTILITY_MD
    md_path.write_text("\n".join(md), encoding="utf-8")
    log.info("wrote %s and %s", json_path, md_path)
    return table, json_path, md_path
