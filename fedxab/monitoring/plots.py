"""Regret and privacy plots from results files, in the style of the federated papers' figures.

One curve per results file: the mean over runs (seeds) of the cumulative or average regret (or,
for federated runs, the local cumulative regret, [PF]'s measure, or the simple regrets) against
the round number, with a shaded band of ±1 standard deviation over runs. Where no optimum is
known (the users' own objectives), ``metric="best_observed"`` draws what the clients observed:
the mean over clients of each one's best observed value so far, in the objective's direction.
For private runs,
``metric="epsilon"`` draws the privacy loss over time instead: the maximum over clients of the
epsilon spent up to each phase (the runs' ``privacy.epsilon_by_phase``), against the phase.

Figures are drawn with matplotlib's object API on an Agg canvas (``matplotlib.figure.Figure``),
never through pyplot, so no display and no global backend state are involved.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from fedxab.results import ResultsError, RunResults, load_results

__all__ = ["METRICS", "epsilon_band", "observed_band", "plot_regret", "regret_band"]

log = logging.getLogger(__name__)

Metric = Literal[
    "cumulative_regret",
    "average_regret",
    "local_cumulative_regret",
    "global_simple_regret",
    "local_simple_regret",
    "best_observed",
    "epsilon",
]
METRICS: dict[str, str] = {
    "cumulative_regret": "cumulative regret",
    "average_regret": "average regret per round",
    "local_cumulative_regret": "local cumulative regret (mean over clients)",
    "global_simple_regret": "global simple regret (mean over clients)",
    "local_simple_regret": "local simple regret (mean over clients)",
    "best_observed": "best observed value so far (mean over clients)",
    "epsilon": "epsilon spent (max over clients)",
}
_REGRETS = [m for m in METRICS if m not in ("best_observed", "epsilon")]
_PER_CLIENT = {
    "local_cumulative_regret": "only federated runs record it, and only when every client's "
    "optimum is known",
    "global_simple_regret": "federated runs record it when the global optimum is known",
    "local_simple_regret": "federated runs record it when every client's optimum is known",
}


def regret_band(results: RunResults, metric: str = "cumulative_regret"):
    """``(rounds, mean, std)`` over the runs of ``results`` for ``metric`` (population std)."""
    if metric not in _REGRETS:
        raise ResultsError(f"metric must be one of {', '.join(_REGRETS)}, got {metric!r}")
    where = _where(results)
    rounds = results.runs[0].rounds
    curves = []
    for i, run in enumerate(results.runs):
        if run.rounds.shape != rounds.shape or np.any(run.rounds != rounds):
            raise ResultsError(f"{where}: runs[{i}] has a different rounds grid from runs[0]")
        if metric in _PER_CLIENT:
            curve = getattr(run, metric)
            if curve is None:
                raise ResultsError(f"{where}: runs[{i}] has no {metric} ({_PER_CLIENT[metric]})")
        else:
            curve = run.cumulative_regret if metric == "cumulative_regret" else run.average_regret
        if curve is None:
            raise ResultsError(
                f"{where}: runs[{i}] has no regret (optimum unknown); plot what the clients "
                "observed with metric best_observed"
            )
        curves.append(curve)
    stack = np.vstack(curves)
    return rounds, stack.mean(axis=0), stack.std(axis=0)


def observed_band(results: RunResults):
    """``(rounds, mean, std)`` over the runs of ``results`` of the mean over clients of each
    client's best observed value up to each round (population std over runs). A round before a
    client's first evaluation leaves that client out; before any client's, it is NaN."""
    where = _where(results)
    curves, rounds = [], None
    for i, run in enumerate(results.runs):
        if run.withheld is not None and run.is_withheld("clients"):
            raise ResultsError(
                f"{where}: runs[{i}]: what each client observed is withheld "
                f"({run.withheld['reason']}): plot a client's own results (fedxab client --output)"
            )
        if not run.clients:
            raise ResultsError(
                f"{where}: runs[{i}] has no clients block (what each client observed); files "
                "written before fedxab recorded it have none"
            )
        grid = run.clients[0].rounds
        if any(not np.array_equal(c.rounds, grid) for c in run.clients):
            raise ResultsError(f"{where}: runs[{i}]: the clients' curves have different rounds")
        if rounds is None:
            rounds = grid
        elif not np.array_equal(grid, rounds):
            raise ResultsError(f"{where}: runs[{i}] has a different rounds grid from runs[0]")
        stack = np.vstack([c.best_so_far for c in run.clients])
        seen = ~np.isnan(stack)
        total = np.where(seen, stack, 0.0).sum(axis=0)
        count = seen.sum(axis=0)
        curves.append(np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0))
    stack = np.vstack(curves)
    return rounds, stack.mean(axis=0), stack.std(axis=0)


def _where(results: RunResults) -> str:
    return str(results.source) if results.source is not None else results.algorithm


def epsilon_band(results: RunResults):
    """``(phases, mean, std)`` over the runs of ``results`` of the maximum over clients of the
    epsilon spent up to each phase (population std). The runs are aligned on the union of their
    phases: a run's epsilon at a phase is its epsilon after its last release at or before it
    (0 before its first)."""
    where = _where(results)
    series = []
    for i, run in enumerate(results.runs):
        by_phase = None if run.privacy is None else run.privacy.get("epsilon_by_phase")
        if not isinstance(by_phase, list):
            raise ResultsError(
                f"{where}: runs[{i}] has no privacy.epsilon_by_phase (only private runs, e.g. "
                "dpfedpne, record their epsilon over time): nothing to plot for --metric epsilon"
            )
        try:
            arr = np.asarray(by_phase, dtype=np.float64).reshape(-1, 2)
        except ValueError as exc:
            raise ResultsError(f"{where}: runs[{i}] has a malformed epsilon_by_phase") from exc
        series.append(arr)
    phases = np.unique(np.concatenate([a[:, 0] for a in series]))
    if phases.size == 0:
        raise ResultsError(f"{where}: no run released anything: no epsilon to plot")
    curves = []
    for arr in series:
        k = np.searchsorted(arr[:, 0], phases, side="right")
        values = np.concatenate([[0.0], arr[:, 1]])
        curves.append(values[k])
    stack = np.vstack(curves)
    return phases, stack.mean(axis=0), stack.std(axis=0)


def _labels(items: Sequence[RunResults]) -> list[str]:
    """The algorithm name, disambiguated by the file (its directory or stem) when repeated."""
    names = [r.algorithm for r in items]
    labels = []
    for i, r in enumerate(items):
        if names.count(r.algorithm) == 1:
            labels.append(r.algorithm)
            continue
        if r.source is not None:
            src = r.source
            tag = src.parent.name if src.stem == "results" and src.parent.name else src.stem
        else:
            tag = str(i + 1)
        labels.append(f"{r.algorithm} ({tag})")
    return labels


def plot_regret(
    results_list: Sequence[RunResults | str | Path],
    out_path: str | Path,
    metric: Metric = "cumulative_regret",
    *,
    title: str | None = None,
) -> Path:
    """Draw one mean ± 1 std regret curve per results (objects or paths) and save a PNG/PDF/SVG.

    Returns the path written. Raises :class:`ResultsError` for an unknown metric, an unreadable
    results file, or results without regret.
    """
    from matplotlib.figure import Figure

    if metric not in METRICS:
        raise ResultsError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if not results_list:
        raise ResultsError("nothing to plot: give at least one results file")
    items = [r if isinstance(r, RunResults) else load_results(r) for r in results_list]
    labels = _labels(items)

    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for res, label in zip(items, labels, strict=True):
        n = len(res.runs)
        if metric == "epsilon":
            phases, mean, std = epsilon_band(res)
            (line,) = ax.plot(
                phases,
                mean,
                label=f"{label} (n={n})",
                linewidth=1.6,
                marker=".",
                drawstyle="steps-post",
            )
            ax.fill_between(
                phases, mean - std, mean + std, color=line.get_color(), alpha=0.2, step="post"
            )
            continue
        if metric == "best_observed":
            rounds, mean, std = observed_band(res)
        else:
            rounds, mean, std = regret_band(res, metric)
        (line,) = ax.plot(rounds, mean, label=f"{label} (n={n})", linewidth=1.6)
        ax.fill_between(rounds, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("phase" if metric == "epsilon" else "round t")
    ax.set_ylabel(METRICS[metric])
    objectives = sorted({str(r.objective.get("name", "?")) for r in items})
    ax.set_title(title or f"{METRICS[metric]} on {', '.join(objectives)} (mean ± 1 std)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")

    out = Path(out_path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=120)
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot write plot {out}: {exc}") from exc
    log.info("wrote %s", out)
    return out
