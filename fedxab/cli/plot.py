"""``fedxab plot``: regret, best-observed or epsilon curves of results files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedxab.cli.common import errors_as_exit_code, make_console
from fedxab.monitoring.plots import Metric as PlotMetric


def plot(
    results: Annotated[
        list[Path], typer.Argument(help="One or more results.json files.", show_default=False)
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Image file to write (.png, .pdf, .svg).")
    ] = Path("regret.png"),
    metric: Annotated[
        PlotMetric,
        typer.Option(
            help="Which regret to plot against the round number (local_cumulative_regret, "
            "global/local_simple_regret: federated runs, mean over clients); best_observed: "
            "the clients' best observed value so far (mean over clients; no optimum needed); "
            "or epsilon: the privacy loss of private runs (max over clients) against the phase."
        ),
    ] = "cumulative_regret",
    title: Annotated[str | None, typer.Option(help="Figure title.", show_default=False)] = None,
) -> None:
    """Plot regret, best observed or epsilon curves (mean ± 1 std over runs), one per results
    file."""
    from fedxab.monitoring.plots import plot_regret

    with errors_as_exit_code():
        path = plot_regret(results, output, metric=metric, title=title)
    make_console().print(f"plot: {path}", soft_wrap=True, markup=False)
