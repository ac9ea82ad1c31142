"""The figure of a reproduction: every entry of the experiment in one axes, mean ± 1 std over
seeds of its metric, as the papers draw them (:func:`plot_plan`), saved as a small PNG (or a PDF
or SVG)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedxab.reproduce.execute import EntryResult
from fedxab.reproduce.experiments import metric_label
from fedxab.reproduce.plan import Plan

__all__ = ["plot_plan"]

log = logging.getLogger(__name__)


def plot_plan(
    plan: Plan, results: Sequence[EntryResult], out_path: str | Path | None = None, dpi: int = 100
) -> Path:
    """All entries in one axes: mean ± 1 std over seeds of the experiment's metric; returns the
    path written (default ``plan.figure``)."""
    from matplotlib.figure import Figure

    from fedxab.results import ResultsError

    exp = plan.experiment
    metric = exp.metric
    many = len(results) > 6
    fig = Figure(figsize=(7.2, 4.8) if many else (6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    bands = [res.band(metric) for res in results]
    log_y = metric == "simple_regret" or exp.log_y
    floor = 0.0 if metric == "local_simple_regret" else None
    if log_y:  # log scale: clip the lower band edge above zero
        positive = np.concatenate([mean[mean > 0] for _, mean, _ in bands])
        floor = float(positive.min()) / 3 if positive.size else 1e-6
    styles = ("-", "--", "-.", ":")
    for i, (res, (rounds, mean, std)) in enumerate(zip(results, bands, strict=True)):
        entry = res.planned.entry
        z = 2 * (len(results) - i)  # the first entry (the paper's method) on top
        label = entry.label
        eps = res.epsilon()
        if eps is not None:
            label += f", ε = {eps[0]:.2f}"
        rounds = rounds - exp.initial_points  # BO iterations: the initialisation at t <= 0
        ax.plot(
            rounds,
            mean,
            label=label,
            color=entry.color,
            linestyle=styles[i % len(styles)],
            linewidth=1.6,
            zorder=z + 1,
        )
        low = mean - std if floor is None else np.maximum(mean - std, floor)
        ax.fill_between(
            rounds, low, mean + std, color=entry.color, alpha=0.2, linewidth=0, zorder=z
        )
    if log_y:
        ax.set_yscale("log")
    if metric == "simple_regret":
        ax.set_xlabel("time step t (evaluations per player)")
    elif exp.initial_points:
        ax.axvline(0, color="0.6", linewidth=0.8, linestyle=":", zorder=0)
        ax.set_xlabel(f"iteration t (t ≤ 0: the {exp.initial_points} initial points)")
    else:
        ax.set_xlabel("round t (evaluations per client)")
    ax.set_ylabel(metric_label(exp))
    first = plan.entries[0].config
    who = (
        f"n = {plan.budget:,} per player"
        if exp.fixed_clients
        else f"N = {first.federation.clients} agents, {plan.budget_text}"
        if exp.initial_points
        else f"M = {first.federation.clients} clients, T = {plan.budget:,}"
    )
    seeds = len(results[0].results.runs) if results else plan.seeds
    fig.suptitle(f"{exp.title}: {exp.figure}  ({exp.name})", fontsize=11)
    ax.set_title(f"{who}, mean ± 1 std over {seeds} seeds\n{exp.setting}", fontsize=8, color="0.3")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=7 if many else 8, ncol=2 if many else 1)
    out = Path(out_path) if out_path is not None else plan.figure
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".png":
            _save_small_png(fig, out, dpi, colors=None if many else 128)
        else:
            fig.savefig(out, dpi=dpi)
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot write figure {out}: {exc}") from exc
    log.info("wrote %s", out)
    return out


def _save_small_png(fig: Any, out: Path, dpi: int, colors: int | None = 128) -> None:
    """Save ``fig`` as a PNG with a 128-colour palette (about a third of the size of the RGBA
    file, no visible difference on these line plots: small enough to commit under docs/);
    ``colors=None``: RGB, for a dozen curves, whose bands' blends would take over the palette
    and turn a thin line's colour into a neighbour's."""
    import io

    from PIL import Image  # a dependency of matplotlib

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    buf.seek(0)
    with Image.open(buf) as img:
        rgb = img.convert("RGB")
    if colors is not None:
        rgb = rgb.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    tmp = out.with_name(f".{out.name}.tmp")
    rgb.save(tmp, format="PNG", optimize=True)
    os.replace(tmp, out)
