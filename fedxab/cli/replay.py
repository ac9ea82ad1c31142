"""``fedxab replay``: replay an elastic run's membership record in process and say whether it
gives the same run (:mod:`fedxab.run.replay`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedxab.cli.common import errors_as_exit_code, make_console


def replay(
    results: Annotated[
        Path,
        typer.Argument(
            help="The results.json of a run with elastic membership.", show_default=False
        ),
    ],
) -> None:
    """Replay each run of RESULTS in process with its recorded membership (the clients in the
    run, asked and reported per phase) and the same seed; exit status 1 if any run differs."""
    from fedxab.results import load_results
    from fedxab.run.replay import replay_results

    console = make_console()
    with errors_as_exit_code():
        outcomes = replay_results(load_results(results))
    for seed, differences in outcomes:
        verdict = "identical" if not differences else "DIFFERS: " + "; ".join(differences)
        console.print(f"seed {seed}: {verdict}", soft_wrap=True, markup=False)
    if any(differences for _, differences in outcomes):
        raise typer.Exit(1)
