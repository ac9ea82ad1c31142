"""A job's displays and observers: the progress display and its callbacks, the metrics endpoint
and the live dashboard."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

from rich.console import Console
from rich.progress import Progress, TaskID

from fedxab.cli.common import wait
from fedxab.errors import FedxabError
from fedxab.monitoring.progress import ProgressMode, Status, make_progress


@contextlib.contextmanager
def job_observers(
    console: Console,
    role: str,
    metrics_port: int | None,
    metrics_host: str,
    serve_after: float | None,
    dashboard: tuple[dict, int] | None = None,
) -> Iterator:
    """The job's observer: :class:`~fedxab.monitoring.metrics.FederationMetrics` served on
    ``metrics_host:metrics_port`` (with ``--metrics-port``) and a
    :class:`~fedxab.dashboard.state.DashboardState` served on the loopback interface (with
    ``dashboard``: the job's config as a dict and the port); None without either. After the
    body ends normally, ``serve_after`` seconds more of serving (Ctrl-C or SIGTERM ends them
    early, not as an error)."""
    if metrics_port is None and dashboard is None:
        if serve_after is not None:
            raise FedxabError(
                "--serve-after needs --metrics-port or --dashboard (something to keep serving)"
            )
        yield None
        return
    from fedxab.run.observe import Observers, RunObserver

    with contextlib.ExitStack() as stack:
        observers: list[RunObserver] = []
        served: list[str] = []
        if metrics_port is not None:
            from fedxab.monitoring.endpoint import MetricsEndpoint
            from fedxab.monitoring.metrics import FederationMetrics

            metrics = FederationMetrics(role=role)
            endpoint = stack.enter_context(
                MetricsEndpoint(metrics.registry, host=metrics_host, port=metrics_port)
            )
            console.print(f"metrics: {endpoint.url}", soft_wrap=True, markup=False)
            observers.append(metrics)
            served.append(f"metrics on {endpoint.url}")
        if dashboard is not None:
            from fedxab.dashboard.server import DashboardServer
            from fedxab.dashboard.state import DashboardState

            config, port = dashboard
            state = DashboardState(config)
            page = stack.enter_context(DashboardServer(state, port=port))
            console.print(f"dashboard: {page.url}", soft_wrap=True, markup=False)
            observers.append(state)
            served.append(f"the dashboard on {page.url}")
        yield observers[0] if len(observers) == 1 else Observers(observers)
        if serve_after:
            until = "until Ctrl-C" if math.isinf(serve_after) else f"for {serve_after:g} s"
            console.print(
                f"serving {' and '.join(served)} {until} (Ctrl-C stops)",
                soft_wrap=True,
                markup=False,
            )
            wait(None if math.isinf(serve_after) else serve_after)


def progress_display(console: Console, quiet: bool, mode: ProgressMode) -> Progress:
    """The progress display of ``--progress`` (none with ``--quiet``)."""
    return make_progress(console, ProgressMode.none if quiet else mode)


def run_callbacks(progress: Progress, budget: int, unit: str):
    """``(on_run_start, on_progress)`` for the runners: a new task per run, counting ``unit``
    (evals or rounds per client), then its updates with the cumulative regret and the federated
    runners' details (the phase, the evaluations over all clients and, for private runs, the
    max epsilon over clients so far)."""
    task: list[TaskID] = []

    def count(done: int) -> str:
        return f"{done:,}/{budget:,} {unit}"

    def on_run_start(index: int, total: int, run_seed: int) -> None:
        description = f"run {index + 1}/{total} (seed {run_seed})"
        task.append(progress.add_task(description, total=budget, count=count(0), status=Status()))

    def on_progress(
        done: int,
        total: int,
        cum: float,
        *,
        phase: int | None = None,
        evaluations: int | None = None,
        epsilon: float | None = None,
    ) -> None:
        status = Status(cum, phase, evaluations, epsilon)
        progress.update(task[-1], completed=done, count=count(done), status=status)

    on_progress.details = True  # type: ignore[attr-defined]
    return on_run_start, on_progress
